/* engine.h — model + backend + paged KV + scheduler + samplers + tokenizer.
 *
 * Owns: the request table (per request: sampler, generated ids, finish reason)
 * and one logits buffer. Data flow of one qc_engine_step: scheduler plan ->
 * backend forward (K/V through the plan's block tables) -> sample each entry that
 * needs logits -> qc_sched_commit -> append accepted tokens. Requests preempted by
 * the scheduler are recomputed transparently; their output is unchanged.
 * Finished requests keep their output until qc_engine_release.
 * Non-goals: threads (one caller thread), stop strings, chat templates, HTTP.
 */
#ifndef QC_ENGINE_H
#define QC_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "model.h"
#include "qc_err.h"
#include "sampler.h"
#include "scheduler.h"

struct qc_engine; /* opaque */
struct qc_vocab;

/* Called for every sampled position with the raw logits row (valid only during
 * the call); step counts this request's generated tokens before this one. */
typedef void (*qc_engine_logits_fn)(void *ctx, uint64_t id, int32_t step, const float *logits,
				    int32_t n_vocab);

/* What a logits row the sampler refuses (NaN, +inf, all -inf: a broken
 * weight or activation) does. FAIL_STEP: qc_engine_step fails (a one-request
 * tool such as qrun reports it and stops). FAIL_REQUEST: only that request
 * finishes, with QC_SCHED_FINISH_ERROR and the sampler's message
 * (qc_engine_failure); the step and every other request go on (a server). */
enum qc_bad_logits {
	QC_BAD_LOGITS_FAIL_STEP = 0,
	QC_BAD_LOGITS_FAIL_REQUEST = 1,
};

struct qc_engine_opts {
	const struct qc_backend_ops *backend; /* NULL: qc_backend_cpu */
	enum qc_act_round act_round;          /* default QC_ACT_ROUND_GGML */
	enum qc_attn_order attn_order;        /* default QC_ATTN_ORDER_FIXED (CPU backend) */
	int32_t block_tokens;                 /* K/V block size in tokens; 0: 16 */
	int32_t max_running;                  /* concurrent sequences; 0: 8 */
	int32_t max_seq_tokens;               /* longest sequence; 0: min(n_ctx_train, 4096) */
	int32_t max_batch_tokens;             /* tokens per forward; 0: 512 */
	int32_t max_prefill_tokens;           /* of those, prompt tokens per forward (the chunked-
						 prefill budget); 0: the backend's prefill_chunk
						 (CPU 128, else max_batch_tokens); capped at
						 max_batch_tokens */
	bool prefix_cache;                    /* reuse cached K/V blocks of earlier requests'
						 identical prefixes; default true */
	bool kv_keep_passed;                  /* keep the K/V blocks a window on every layer has
						 passed (default false: released after each step,
						 so such a model's K/V stops growing with the
						 context); the results are the same bits either way */
	uint64_t prefix_salt;                 /* mixed into every cache key with the bundle's
						 manifest, backend and K/V block geometry */
	int32_t n_threads;                    /* backend matmul threads; 0: $QC_THREADS, else online CPUs
						 (results do not depend on it) */
	uint64_t kv_budget_bytes;             /* K/V pool; 0: max_running full sequences,
						 capped at 2 GiB (or one full sequence) */
	enum qc_kv_dtype kv_dtype;            /* K/V pool storage; default QC_KV_F16 */
	float gpu_mem_util;                   /* device backends: fraction of device memory for
						 weights + buffers + K/V; 0: 0.9 */
	enum qc_bad_logits bad_logits;        /* default QC_BAD_LOGITS_FAIL_STEP */
	int32_t tp;                           /* tensor parallel ranks (docs/tp.md): 0 (default): the
						 bundle's own (a plain bundle: no ranks, as before; a
						 --tp N bundle: N); N >= 1: must equal the bundle's
						 size (a plain bundle's is 1), else QC_EINVAL. With
						 ranks, backend_tp.c runs one instance of the backend
						 per rank, each on its own thread and K/V pool (the
						 same number of blocks each, of its own K/V heads:
						 kv_budget_bytes is per rank); n_threads is shared
						 out among them */
	bool no_verify;                       /* false (default): every tensor's XXH3 is checked
						 at load, on threads beside the backend's upload;
						 a mismatch fails qc_engine_new naming the tensor */
	qc_engine_logits_fn on_logits;        /* optional */
	void *cb_ctx;
};

#define QC_ENGINE_MAX_STOP_IDS 16 /* caller's stop ids; the vocab's end ids take the rest */

struct qc_engine_request {
	const int32_t *prompt;     /* (n_prompt) ids, copied; BOS is the caller's business */
	int32_t n_prompt;          /* >= 1 */
	int32_t max_tokens;        /* >= 1 */
	bool ignore_eos;           /* true: only max_tokens and stop_ids stop it */
	int32_t n_stop_ids;        /* 0..QC_ENGINE_MAX_STOP_IDS */
	int32_t stop_ids[QC_ENGINE_MAX_STOP_IDS]; /* more finishing ids (vLLM stop_token_ids), < n_vocab */
	struct qc_sampler_params sampling; /* min_ban_ids are the engine's: it fills them
					      with the request's end ids when min_tokens > 0 */
};

/* Defaults as documented on each field. Never fails. */
void qc_engine_opts_init(struct qc_engine_opts *o);

/* Open the bundle at path, build model, vocab (when the manifest has a tokenizer),
 * backend, K/V pool and scheduler. o may be NULL (defaults). Returns QC_OK and
 * *out, or the failing part's error. *out is NULL on failure. */
int qc_engine_new(const char *path, const struct qc_engine_opts *o, struct qc_engine **out,
		  struct qc_err *err);

/* Accepts NULL. Frees everything, live requests included. */
void qc_engine_free(struct qc_engine *e);

/* The bundle's model: with tensor parallel ranks, the weightless whole (its cfg
 * the whole model's; qc_engine_rank_model has each rank's shard). */
const struct qc_model *qc_engine_model(const struct qc_engine *e);
/* Tensor parallel ranks the engine runs (0: none, the backend runs the model). */
int qc_engine_tp_size(const struct qc_engine *e);
/* Rank r's shard (0 <= r < qc_engine_tp_size), or NULL. */
const struct qc_model *qc_engine_rank_model(const struct qc_engine *e, int r);
/* Perplexity scoring: *nll = -sum over i in first+1..n-1 of log p(ids[i] |
 * ids[0..i-1]) (natural log, softmax in double), one sequence of n tokens through
 * the backend, min(max_running, max_batch_tokens) positions per forward; logits
 * are computed only at positions first..n-2. first = 0 scores every position but
 * the first; llama-perplexity's rule is first = n/2 (n - 1 - n/2 tokens). The
 * engine must be idle; n <= max_seq_tokens, 0 <= first <= n - 2. QC_OK, QC_EINVAL
 * (busy, bad id), QC_ERANGE, the K/V pool's QC_ENOMEM, or the backend's error. */
int qc_engine_score(struct qc_engine *e, const int32_t *ids, int32_t n, int32_t first, double *nll, struct qc_err *err);

/* Tokens the K/V pool holds (blocks * block tokens; --kv-dtype fp8: about twice
 * f16's for the same --kv-mem, four times on the CPU, whose f16 pool is floats). */
int64_t qc_engine_kv_tokens(const struct qc_engine *e);
/* The tokenizer, or NULL when the bundle has none. */
const struct qc_vocab *qc_engine_vocab(const struct qc_engine *e);

/* Tokenize text as llama.cpp's common_tokenize(add_special, parse_special = true):
 * BOS exactly when the vocab asks for it and add_special is set. *ids is malloc'd
 * (caller frees). QC_EUNSUPPORTED without a tokenizer, else qc_tokenize's codes. */
int qc_engine_tokenize(const struct qc_engine *e, const char *text, size_t len, bool add_special,
		       int32_t **ids, size_t *n_ids, struct qc_err *err);

/* Queue a request; *id identifies it. QC_EINVAL (bad ids/params), the
 * scheduler's QC_ERANGE (too long / queue full), QC_ENOMEM. */
int qc_engine_add(struct qc_engine *e, const struct qc_engine_request *r, uint64_t *id,
		  struct qc_err *err);

/* Queue one prompt with n_choices (1..QC_SCHED_MAX_CHOICES, at most max_running)
 * independent continuations; ids[i] (n_choices entries) identifies choice i,
 * which behaves as a request of its own for output, logprobs and release. The
 * prompt is prefilled once: the choices share its K/V blocks (copy-on-write)
 * and are each sampled from its last logits row. Choice i samples with seed
 * r->sampling.seed + i (wrapping), so choice i equals qc_engine_add of the same
 * request with that seed. Releasing choice 0 before the prompt finishes cancels
 * the others (they finish CANCELLED); releasing another choice only drops it.
 * Returns qc_engine_add's codes; QC_EINVAL for n_choices out of range. */
int qc_engine_add_n(struct qc_engine *e, const struct qc_engine_request *r, int32_t n_choices,
		    uint64_t *ids, struct qc_err *err);

/* Run one scheduler step (one forward). QC_OK, or a backend/scheduler error
 * (the engine should then be freed). */
int qc_engine_step(struct qc_engine *e, struct qc_err *err);

/* True while any request is waiting or running. */
bool qc_engine_has_work(const struct qc_engine *e);

/* Generated ids so far of request id (valid until the next step or release) and
 * its finish reason (QC_SCHED_FINISH_NONE while live). QC_ENOTFOUND for an
 * unknown or released id. */
int qc_engine_output(const struct qc_engine *e, uint64_t id, const int32_t **ids, int32_t *n,
		     enum qc_sched_finish *finish);

/* Why request id finished with QC_SCHED_FINISH_ERROR (e.g. "sampler: logit of
 * token 55 is nan"), valid until release; NULL for any other request. */
const char *qc_engine_failure(const struct qc_engine *e, uint64_t id);

/* Per generated token of request id, the sampler's report (chosen logprob and
 * top alternatives), parallel to qc_engine_output's ids; *n is 0 unless the
 * request set sampling.logprobs. Valid until the next step or release.
 * QC_ENOTFOUND for an unknown or released id. */
int qc_engine_logprobs(const struct qc_engine *e, uint64_t id, const struct qc_sample_result **res,
		       int32_t *n);

/* Forget a finished (or cancel and forget a live) request; a live one's KV
 * blocks are freed at once. */
void qc_engine_release(struct qc_engine *e, uint64_t id);

void qc_engine_stats(const struct qc_engine *e, struct qc_sched_stats *out);

#endif
