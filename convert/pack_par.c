/* pack_par.c — qc_pack_slice_par (pack_par.h). Why: the marlin repack and its
 * error measurement ran on one thread (a Q4_K_M 8B model took 145 s to convert
 * for sm90); stripes are independent, so ranges of them pack in parallel.
 */
#include "pack_par.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PACK_RANGES 16 /* fixed: results must not depend on the thread count */

struct range {
	int64_t r0, n;             /* rows */
	int rc;
	struct qc_err err;
	struct qc_marlin_err e;
};

struct job {
	enum qc_layout l;
	enum qc_type type;
	int64_t ne0;
	const uint8_t *in;
	uint64_t in_row, out_row;
	uint8_t *out;
	bool want_err;
	struct range *r;
	int n_ranges, n_threads, tid;
};

static void pack_range(const struct job *j, struct range *r)
{
	const int64_t ne[4] = { j->ne0, r->n, 1, 1 };
	uint8_t *o = j->out + (uint64_t)r->r0 * j->out_row;
	r->rc = qc_layout_pack_slice(j->l, j->type, ne, j->in + (uint64_t)r->r0 * j->in_row, o, &r->err);
	if (!r->rc && j->want_err)
		r->rc = qc_marlin_error(j->l, j->type, ne, o, &r->e, &r->err);
}

static void *worker(void *arg)
{
	const struct job *j = arg;
	for (int k = j->tid; k < j->n_ranges; k += j->n_threads)
		pack_range(j, &j->r[k]);
	return NULL;
}

int qc_pack_slice_par(enum qc_layout l, enum qc_type type, int64_t ne0, int64_t ne1, const uint8_t *in,
		      uint64_t in_row, uint8_t *out, struct qc_marlin_err *e, int n_threads, struct qc_err *err)
{
	if (!qc_marlin_is(l)) { /* nvfp4_swz: one piece (its scale tiles span the slice) */
		const int64_t ne[4] = { ne0, ne1, 1, 1 };
		if (e)
			memset(e, 0, sizeof *e);
		(void)in_row;
		(void)n_threads;
		return qc_layout_pack_slice(l, type, ne, in, out, err);
	}
	const int S = qc_marlin_stripe(l);
	uint64_t out_row;
	int rc = qc_layout_row_bytes(l, type, ne0, &out_row);
	if (rc || S <= 0 || ne1 % S)
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "%s in layout %s: %lld rows are not whole stripes",
				  qc_type_get(type)->name, qc_layout_name(l), (long long)ne1);
	const int64_t stripes = ne1 / S;
	const int n_ranges = (int)(stripes < PACK_RANGES ? stripes : PACK_RANGES);
	struct range r[PACK_RANGES];
	memset(r, 0, sizeof r);
	for (int k = 0, s0 = 0; k < n_ranges; k++) { /* stripes split as evenly as possible */
		const int64_t s1 = stripes * (k + 1) / n_ranges;
		r[k].r0 = (int64_t)s0 * S;
		r[k].n = (s1 - s0) * S;
		s0 = (int)s1;
	}
	if (n_threads <= 0) { /* $QC_THREADS, else the online CPUs */
		const char *env = getenv("QC_THREADS");
		const long c = env && atoi(env) > 0 ? atol(env) : sysconf(_SC_NPROCESSORS_ONLN);
		n_threads = c > 0 ? (c < PACK_RANGES ? (int)c : PACK_RANGES) : 1;
	}
	if (n_threads > n_ranges)
		n_threads = n_ranges;
	struct job jobs[PACK_RANGES];
	pthread_t th[PACK_RANGES];
	bool started[PACK_RANGES] = { false };
	for (int t = 0; t < n_threads; t++) {
		jobs[t] = (struct job){ l, type, ne0, in, in_row, out_row, out, e != NULL, r, n_ranges, n_threads, t };
		if (t > 0) /* thread 0 is this one */
			started[t] = pthread_create(&th[t], NULL, worker, &jobs[t]) == 0;
	}
	worker(&jobs[0]);
	for (int t = 1; t < n_threads; t++) {
		if (started[t])
			pthread_join(th[t], NULL);
		else /* could not start: its share runs here */
			worker(&jobs[t]);
	}
	for (int k = 0; k < n_ranges; k++)
		if (r[k].rc) {
			*err = r[k].err;
			return r[k].rc;
		}
	if (e) { /* ranges combined in order */
		memset(e, 0, sizeof *e);
		double se = 0, sw = 0;
		for (int k = 0; k < n_ranges; k++) {
			const struct qc_marlin_err *x = &r[k].e;
			se += x->rms * x->rms * (double)x->n;
			sw += x->rms_w * x->rms_w * (double)x->n;
			e->max_abs = x->max_abs > e->max_abs || x->max_abs != x->max_abs ? x->max_abs : e->max_abs;
			e->n += x->n;
		}
		e->rms = e->n ? sqrt(se / (double)e->n) : 0;
		e->rms_w = e->n ? sqrt(sw / (double)e->n) : 0;
	}
	return QC_OK;
}
