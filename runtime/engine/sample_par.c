/* sample_par.c — see sample_par.h. Workers take job indices from one atomic
 * counter; each keeps its own error, and the lowest failing index wins so the
 * reported error does not depend on scheduling. */
#include "sample_par.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define MAX_THREADS 64

struct qc_sample_par {
	int32_t n_threads, n_vocab;
	struct qc_sampler_ws *ws[MAX_THREADS]; /* [0] always, the rest made on first use */
};

struct run {
	struct qc_sample_par *p;
	struct qc_sample_job *jobs;
	int32_t n_jobs, n_vocab;
	atomic_int next;
};

struct worker {
	struct run *r;
	struct qc_sampler_ws *ws;
	int rc;
	int32_t bad;               /* lowest failing job, or n_jobs */
	struct qc_err err;
};

int qc_sample_par_new(int32_t n_threads, int32_t n_vocab, struct qc_sample_par **out, struct qc_err *err)
{
	*out = NULL;
	if (n_threads < 1 || n_threads > MAX_THREADS)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "sampling threads %d outside 1..%d", n_threads,
				  MAX_THREADS);
	struct qc_sample_par *p = calloc(1, sizeof *p);
	if (!p)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	p->n_threads = n_threads;
	p->n_vocab = n_vocab;
	int rc = qc_sampler_ws_new(n_vocab, &p->ws[0], err);
	if (rc) {
		free(p);
		return rc;
	}
	*out = p;
	return QC_OK;
}

void qc_sample_par_free(struct qc_sample_par *p)
{
	if (!p)
		return;
	for (int i = 0; i < MAX_THREADS; i++)
		qc_sampler_ws_free(p->ws[i]);
	free(p);
}

struct qc_sampler_ws *qc_sample_par_ws(struct qc_sample_par *p)
{
	return p->ws[0];
}

static void *work(void *arg)
{
	struct worker *w = arg;
	struct run *r = w->r;
	for (;;) {
		const int i = atomic_fetch_add(&r->next, 1);
		if (i >= r->n_jobs)
			break;
		struct qc_sample_job *j = &r->jobs[i];
		struct qc_err e = {0};
		const int rc = qc_sampler_sample(j->s, w->ws, j->logits, r->n_vocab, j->res, &e);
		j->rc = rc;
		if (rc && i < w->bad) {
			w->bad = i;
			w->rc = rc;
			w->err = e;
		}
	}
	return NULL;
}

int qc_sample_par_run(struct qc_sample_par *p, struct qc_sample_job *jobs, int32_t n_jobs, int32_t n_vocab,
		      struct qc_err *err)
{
	if (n_jobs <= 0)
		return QC_OK;
	struct run r = {.p = p, .jobs = jobs, .n_jobs = n_jobs, .n_vocab = n_vocab};
	struct worker w[MAX_THREADS];
	pthread_t th[MAX_THREADS];
	int n = n_jobs < p->n_threads ? n_jobs : p->n_threads, started = 1;
	atomic_init(&r.next, 0);
	for (int t = 0; t < n; t++) {
		w[t] = (struct worker){.r = &r, .rc = QC_OK, .bad = n_jobs};
		if (t && !p->ws[t] && qc_sampler_ws_new(p->n_vocab, &p->ws[t], NULL)) {
			n = t; /* out of memory for more workspaces: fewer threads, same tokens */
			QC_WARN_ONCE("sampling: no memory for another workspace: %d sampling threads", n);
			break;
		}
		w[t].ws = p->ws[t];
	}
	for (int t = 1; t < n; t++, started++)
		if (pthread_create(&th[t], NULL, work, &w[t])) {
			QC_WARN_ONCE("sampling: could not start a thread: %d sampling threads", started);
			break; /* fewer threads: the others take the rows */
		}
	work(&w[0]);
	for (int t = 1; t < started; t++)
		pthread_join(th[t], NULL);
	int best = -1;
	for (int t = 0; t < started; t++)
		if (w[t].rc && (best < 0 || w[t].bad < w[best].bad))
			best = t;
	if (best < 0)
		return QC_OK;
	if (err)
		*err = w[best].err;
	return w[best].rc;
}
