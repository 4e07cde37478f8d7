/* serve_engine.h — the one engine thread behind qserve and the jobs it serves.
 *
 * Owns: the submission queue, the engine thread (add -> step -> publish), and
 * struct serve_job, the only state a connection thread and the engine thread
 * share (guarded by the job's own mutex). The engine thread never waits on a
 * client: it appends each step's new ids (and logprobs) to the job and
 * signals; a slow reader only lets its job's arrays grow (bounded by
 * max_tokens). A cancelled job is released from the engine before the next
 * step, so its KV blocks are free at once.
 * Non-goals: HTTP, JSON, text (serve_text.c, in the connection thread).
 * Reference: vLLM's AsyncLLMEngine split (one loop, per-request output queues).
 */
#ifndef QC_SERVE_ENGINE_H
#define QC_SERVE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "serve_metrics.h"

struct serve_job {
	/* input, fixed before submit */
	int32_t *prompt;              /* (n_prompt) ids, owned */
	int32_t n_prompt, max_tokens;
	bool ignore_eos;
	int32_t n_stop_ids;           /* stop_token_ids, < n_vocab */
	int32_t stop_ids[QC_ENGINE_MAX_STOP_IDS];
	struct qc_sampler_params sampling;
	int32_t n_group;              /* the first job of a group (n / best_of): its size, the
					 next n_group - 1 jobs submitted with it are its other
					 choices; others 0 */
	double t_submit;              /* monotonic seconds */

	/* shared, under mu */
	pthread_mutex_t mu;
	pthread_cond_t cv;            /* signalled on new ids and on done */
	int32_t *ids;                 /* (n) generated ids so far */
	struct qc_sample_result *lp;  /* (n) when sampling.logprobs, else NULL */
	int32_t n, cap;
	bool done;                    /* no more ids will come */
	enum qc_sched_finish finish;  /* when done */
	int err_status;               /* when done by failure: HTTP status (400, 500, 503), else 0 */
	char err_msg[256];
	bool cancel;                  /* set by the connection: stop and release */

	/* engine thread only */
	uint64_t eid;
	double t_last;                /* when the last id was published */
	struct serve_job *next;
	atomic_int refs;
};

struct serve_engine;

struct serve_engine_opts {
	int32_t max_running;          /* the engine's running set (qc_engine_opts.max_running) */
	int32_t max_queue;            /* accepted jobs beyond the running set before 429 */
};

/* Start the engine thread over e (borrowed; only that thread touches it from
 * now on) with metrics m (borrowed). Returns QC_OK and *out, QC_ENOMEM, QC_EIO
 * (thread creation). */
int serve_engine_start(struct qc_engine *e, struct serve_metrics *m, const struct serve_engine_opts *o,
		       struct serve_engine **out, struct qc_err *err);

/* Stop the thread once every job has finished (call after the HTTP side
 * stopped submitting), then free. Accepts NULL. The qc_engine is not freed. */
void serve_engine_stop(struct serve_engine *s);

/* A job with one reference (the caller's). prompt is copied. NULL when out of memory. */
struct serve_job *serve_job_new(const int32_t *prompt, int32_t n_prompt);
/* Drop one reference; the last one frees. Accepts NULL. */
void serve_job_unref(struct serve_job *j);

/* Queue j (takes a reference of its own). 0; 429 when the queue is full;
 * 503 when draining or the engine has failed. */
int serve_engine_submit(struct serve_engine *s, struct serve_job *j);

/* Queue jobs[0..n) as the choices of one prompt (qc_engine_add_n: one prefill,
 * choice i sampled with jobs[0]->sampling.seed + i); jobs[0]'s prompt, limits and
 * sampling hold for all. Same statuses as serve_engine_submit, for all at once
 * (the group counts n toward the limit). */
int serve_engine_submit_group(struct serve_engine *s, struct serve_job **jobs, int32_t n);

/* Ask the engine to stop j and free its blocks now (idempotent). */
void serve_engine_cancel(struct serve_engine *s, struct serve_job *j);

/* Refuse new submissions from now on (SIGTERM). */
void serve_engine_drain(struct serve_engine *s);

/* Jobs accepted and not yet done. */
int serve_engine_in_flight(struct serve_engine *s);

/* True once a qc_engine_step failed (every later request gets 503). */
bool serve_engine_failed(struct serve_engine *s);

#endif
