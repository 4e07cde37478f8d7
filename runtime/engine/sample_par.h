/* sample_par.h — sampling many logit rows at once on worker threads.
 *
 * Owns: one sampler workspace per thread and the fan-out of a step's rows.
 * Each row has its own sampler (its own PRNG and history), so rows are
 * independent and the tokens do not depend on the thread count or the order
 * the threads take the rows in. Threads are started per call (a row of a
 * 128k vocabulary costs milliseconds; a thread start, microseconds) and only
 * when there are at least two rows.
 * Non-goals: a persistent pool; callbacks (the engine calls on_logits itself,
 * in order, and samples such rows one by one).
 */
#ifndef QC_SAMPLE_PAR_H
#define QC_SAMPLE_PAR_H

#include <stdint.h>

#include "qc_err.h"
#include "sampler.h"

struct qc_sample_par;

/* One row to sample: qc_sampler_sample(s, ws, logits, n_vocab, res). */
struct qc_sample_job {
	struct qc_sampler *s;
	const float *logits;
	struct qc_sample_result *res;
	int rc;                    /* out: this row's result (QC_OK or the sampler's code) */
};

/* Up to n_threads workspaces of n_vocab (1..64 threads; the first is made
 * now, the others on first use). QC_OK, QC_EINVAL, QC_ENOMEM. */
int qc_sample_par_new(int32_t n_threads, int32_t n_vocab, struct qc_sample_par **out, struct qc_err *err);

/* Accepts NULL. */
void qc_sample_par_free(struct qc_sample_par *p);

/* The first workspace, for the caller's own sequential sampling. */
struct qc_sampler_ws *qc_sample_par_ws(struct qc_sample_par *p);

/* Sample every job (rows of n_vocab logits), each job's rc set. On failure the
 * error of the lowest failing job is returned (the others still ran). */
int qc_sample_par_run(struct qc_sample_par *p, struct qc_sample_job *jobs, int32_t n_jobs, int32_t n_vocab,
		      struct qc_err *err);

#endif
