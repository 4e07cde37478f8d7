/* serve_engine.c — the engine thread: take submissions, step, publish ids.
 *
 * Owns: the loop  {take new jobs and cancels -> qc_engine_add / release ->
 * qc_engine_step -> copy new ids to each job -> retire finished jobs -> snapshot
 * stats}, sleeping on a condition variable only when there is no work. The
 * engine mutex guards the queue and counters; a job's mutex guards the job; the
 * engine thread never holds both, and never waits for a connection thread.
 * Non-goals: fairness beyond the scheduler's FCFS; priorities.
 */
#include "serve_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct serve_engine {
	struct qc_engine *e;
	struct serve_metrics *m;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct serve_job *pending;     /* submitted, not yet added; FIFO via tail */
	struct serve_job **pending_tail;
	int in_flight;                 /* accepted, not done */
	int limit;                     /* in_flight refused at or above this */
	bool draining, stopping, failed, wake;
	struct serve_job *active;      /* engine thread only: added to the engine */
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct serve_job *serve_job_new(const int32_t *prompt, int32_t n_prompt)
{
	struct serve_job *j = calloc(1, sizeof *j);
	if (!j)
		return NULL;
	j->prompt = malloc(sizeof(int32_t) * (size_t)(n_prompt > 0 ? n_prompt : 1));
	if (!j->prompt) {
		free(j);
		return NULL;
	}
	memcpy(j->prompt, prompt, sizeof(int32_t) * (size_t)n_prompt);
	j->n_prompt = n_prompt;
	pthread_mutex_init(&j->mu, NULL);
	pthread_cond_init(&j->cv, NULL);
	atomic_init(&j->refs, 1);
	return j;
}

void serve_job_unref(struct serve_job *j)
{
	if (!j || atomic_fetch_sub(&j->refs, 1) != 1)
		return;
	pthread_mutex_destroy(&j->mu);
	pthread_cond_destroy(&j->cv);
	free(j->prompt);
	free(j->ids);
	free(j->lp);
	free(j);
}

/* Mark j done (engine thread); drops the engine's reference. */
static void job_done(struct serve_engine *s, struct serve_job *j, enum qc_sched_finish fin, int status,
		     const char *msg)
{
	pthread_mutex_lock(&j->mu);
	j->done = true;
	j->finish = fin;
	j->err_status = status;
	if (msg)
		snprintf(j->err_msg, sizeof j->err_msg, "%s", msg);
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->mu);
	pthread_mutex_lock(&s->mu);
	s->in_flight--;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_lock(&s->m->mu);
	s->m->in_flight--;
	pthread_mutex_unlock(&s->m->mu);
	serve_job_unref(j);
}

/* Copy ids past j->n; 0 or -1 when out of memory. */
static int publish(struct serve_engine *s, struct serve_job *j, const int32_t *ids, int32_t n,
		   const struct qc_sample_result *lp, int32_t n_lp)
{
	if (n <= j->n)
		return 0;
	const double t = now_s();
	pthread_mutex_lock(&j->mu);
	int32_t old = j->n;
	if (n > j->cap) {
		int32_t cap = j->cap ? j->cap : 16;
		while (cap < n)
			cap *= 2;
		int32_t *p = realloc(j->ids, sizeof *p * (size_t)cap);
		struct qc_sample_result *l = NULL;
		if (p)
			j->ids = p;
		if (p && n_lp) {
			l = realloc(j->lp, sizeof *l * (size_t)cap);
			if (l)
				j->lp = l;
		}
		if (!p || (n_lp && !l)) {
			pthread_mutex_unlock(&j->mu);
			return -1;
		}
		j->cap = cap;
	}
	memcpy(j->ids + old, ids + old, sizeof(int32_t) * (size_t)(n - old));
	if (n_lp >= n)
		memcpy(j->lp + old, lp + old, sizeof *lp * (size_t)(n - old));
	j->n = n;
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->mu);

	/* a step that yields k ids for one job spreads its interval over them */
	if (old == 0)
		serve_metrics_observe(s->m, &s->m->ttft, t - j->t_submit);
	else
		for (int32_t k = old; k < n; k++)
			serve_metrics_observe(s->m, &s->m->itl, (t - j->t_last) / (double)(n - old));
	j->t_last = t;
	pthread_mutex_lock(&s->m->mu);
	s->m->generated_tokens += (uint64_t)(n - old);
	pthread_mutex_unlock(&s->m->mu);
	return 0;
}

static void snapshot(struct serve_engine *s)
{
	struct qc_sched_stats st;
	qc_engine_stats(s->e, &st);
	pthread_mutex_lock(&s->m->mu);
	s->m->sched = st;
	pthread_mutex_unlock(&s->m->mu);
}

/* Add each newly taken job to the engine; failures finish the job at once. */
static void admit(struct serve_engine *s, struct serve_job *list)
{
	while (list) {
		struct serve_job *j = list;
		list = j->next;
		struct qc_engine_request r = {.prompt = j->prompt, .n_prompt = j->n_prompt,
					      .max_tokens = j->max_tokens, .ignore_eos = j->ignore_eos,
					      .n_stop_ids = j->n_stop_ids, .sampling = j->sampling};
		memcpy(r.stop_ids, j->stop_ids, sizeof r.stop_ids);
		struct qc_err err = {0};
		if (s->failed) {
			job_done(s, j, QC_SCHED_FINISH_NONE, 503, "the engine has failed");
			continue;
		}
		/* a group's other choices were queued right behind it, under one lock */
		struct serve_job *grp[QC_SCHED_MAX_CHOICES] = {j};
		uint64_t eids[QC_SCHED_MAX_CHOICES];
		int32_t n = 1;
		while (n < j->n_group && n < QC_SCHED_MAX_CHOICES && list) {
			grp[n++] = list;
			list = list->next;
		}
		int rc = qc_engine_add_n(s->e, &r, n, eids, &err);
		for (int32_t i = 0; i < n; i++) {
			if (rc) {
				char msg[QC_ERR_MSG_MAX + 64];
				qc_err_format(&err, msg, sizeof msg);
				job_done(s, grp[i], QC_SCHED_FINISH_NONE, rc == QC_ENOMEM ? 503 : 400, msg);
				continue;
			}
			grp[i]->eid = eids[i];
			grp[i]->next = s->active;
			s->active = grp[i];
		}
	}
}

/* Release cancelled and finished jobs; publish new ids of the rest. */
static void sweep(struct serve_engine *s, bool after_step)
{
	struct serve_job **pp = &s->active;
	while (*pp) {
		struct serve_job *j = *pp;
		pthread_mutex_lock(&j->mu);
		bool cancel = j->cancel;
		pthread_mutex_unlock(&j->mu);
		const int32_t *ids = NULL;
		const struct qc_sample_result *lp = NULL;
		int32_t n = 0, n_lp = 0;
		enum qc_sched_finish fin = QC_SCHED_FINISH_NONE;
		if (cancel) {
			qc_engine_release(s->e, j->eid);
			*pp = j->next;
			job_done(s, j, QC_SCHED_FINISH_CANCELLED, 0, NULL);
			continue;
		}
		if (after_step && !qc_engine_output(s->e, j->eid, &ids, &n, &fin)) {
			qc_engine_logprobs(s->e, j->eid, &lp, &n_lp);
			if (publish(s, j, ids, n, lp, n_lp)) {
				qc_engine_release(s->e, j->eid);
				*pp = j->next;
				job_done(s, j, QC_SCHED_FINISH_NONE, 503, "out of memory");
				continue;
			}
		}
		if (fin != QC_SCHED_FINISH_NONE) {
			char msg[QC_ERR_MSG_MAX + 128];
			const char *why = qc_engine_failure(s->e, j->eid);
			/* copied before the release frees it */
			snprintf(msg, sizeof msg, "this request's logits are not finite (%s); the model's weights "
				 "or activations hold NaN/inf", why ? why : "the sampler refused the row");
			qc_engine_release(s->e, j->eid);
			*pp = j->next;
			if (fin == QC_SCHED_FINISH_NO_MEMORY) {
				job_done(s, j, fin, 503, "the KV cache cannot hold this request");
			} else if (fin == QC_SCHED_FINISH_ERROR) {
				fprintf(stderr, "qserve: request failed alone: %s\n", msg);
				pthread_mutex_lock(&s->m->mu);
				s->m->failed_logits++;
				pthread_mutex_unlock(&s->m->mu);
				job_done(s, j, fin, 500, msg);
			} else {
				job_done(s, j, fin, 0, NULL);
			}
			continue;
		}
		pp = &j->next;
	}
}

/* The engine failed: finish everything with 500; later submissions get 503. */
static void fail_all(struct serve_engine *s, const struct qc_err *err)
{
	char msg[QC_ERR_MSG_MAX + 64];
	qc_err_format(err, msg, sizeof msg);
	fprintf(stderr, "qserve: engine failed: %s\n", msg);
	pthread_mutex_lock(&s->mu);
	s->failed = true;
	pthread_mutex_unlock(&s->mu);
	while (s->active) {
		struct serve_job *j = s->active;
		s->active = j->next;
		qc_engine_release(s->e, j->eid);
		job_done(s, j, QC_SCHED_FINISH_NONE, 500, msg);
	}
}

static void *engine_main(void *arg)
{
	struct serve_engine *s = arg;
	for (;;) {
		pthread_mutex_lock(&s->mu);
		while (!s->pending && !s->active && !s->wake && !s->stopping)
			pthread_cond_wait(&s->cv, &s->mu);
		if (s->stopping && !s->pending && !s->active) {
			pthread_mutex_unlock(&s->mu);
			break;
		}
		struct serve_job *list = s->pending;
		s->pending = NULL;
		s->pending_tail = &s->pending;
		s->wake = false;
		pthread_mutex_unlock(&s->mu);

		admit(s, list);
		sweep(s, false);
		if (qc_engine_has_work(s->e)) {
			struct qc_err err = {0};
			if (qc_engine_step(s->e, &err))
				fail_all(s, &err);
			else
				sweep(s, true);
		}
		snapshot(s);
	}
	return NULL;
}

int serve_engine_start(struct qc_engine *e, struct serve_metrics *m, const struct serve_engine_opts *o,
		       struct serve_engine **out, struct qc_err *err)
{
	struct serve_engine *s = calloc(1, sizeof *s);
	*out = NULL;
	if (!s)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	s->e = e;
	s->m = m;
	s->pending_tail = &s->pending;
	/* the running set plus the queue the operator allows */
	s->limit = (o->max_running > 0 ? o->max_running : 1) + (o->max_queue > 0 ? o->max_queue : 0);
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	snapshot(s);
	if (pthread_create(&s->thread, NULL, engine_main, s)) {
		pthread_mutex_destroy(&s->mu);
		pthread_cond_destroy(&s->cv);
		free(s);
		return qc_err_set(err, QC_EIO, NULL, NULL, -1, "cannot start the engine thread");
	}
	*out = s;
	return QC_OK;
}

void serve_engine_stop(struct serve_engine *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->stopping = true;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->thread, NULL);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
}

int serve_engine_submit(struct serve_engine *s, struct serve_job *j)
{
	return serve_engine_submit_group(s, &j, 1);
}

int serve_engine_submit_group(struct serve_engine *s, struct serve_job **jobs, int32_t n)
{
	int status = 0;
	pthread_mutex_lock(&s->mu);
	if (s->draining || s->stopping || s->failed) {
		status = 503;
	} else if (s->in_flight + n > s->limit) {
		status = 429;
	} else {
		for (int32_t i = 0; i < n; i++) {
			struct serve_job *j = jobs[i];
			j->n_group = i == 0 ? n : 0;
			j->t_submit = now_s();
			atomic_fetch_add(&j->refs, 1);
			j->next = NULL;
			*s->pending_tail = j;
			s->pending_tail = &j->next;
		}
		s->in_flight += n;
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_lock(&s->m->mu);
	if (status == 429)
		s->m->rejected_full++;
	if (!status) {
		s->m->in_flight += n;
		/* the prompt is computed once for the whole group */
		s->m->prompt_tokens += (uint64_t)jobs[0]->n_prompt;
	}
	pthread_mutex_unlock(&s->m->mu);
	return status;
}

void serve_engine_cancel(struct serve_engine *s, struct serve_job *j)
{
	pthread_mutex_lock(&j->mu);
	bool was = j->cancel || j->done;
	j->cancel = true;
	pthread_mutex_unlock(&j->mu);
	if (was)
		return;
	pthread_mutex_lock(&s->mu);
	s->wake = true;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

void serve_engine_drain(struct serve_engine *s)
{
	pthread_mutex_lock(&s->mu);
	s->draining = true;
	pthread_mutex_unlock(&s->mu);
}

bool serve_engine_failed(struct serve_engine *s)
{
	pthread_mutex_lock(&s->mu);
	bool f = s->failed;
	pthread_mutex_unlock(&s->mu);
	return f;
}

int serve_engine_in_flight(struct serve_engine *s)
{
	pthread_mutex_lock(&s->mu);
	int n = s->in_flight;
	pthread_mutex_unlock(&s->mu);
	return n;
}
