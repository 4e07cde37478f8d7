/* backend_tp.h — tensor parallelism in one process: one thread per rank, each
 * driving its own instance of the engine's backend on its shard (docs/tp.md).
 *
 * Owns: the rank group (tp_group.h), the rank models (qc_model_rank_open), one
 * thread per rank that makes every call of its inner backend (create, kv_limits,
 * forward, forward_top, destroy: a device backend keeps a rank on one thread),
 * and the host side of the output: each rank's vocabulary columns placed side by
 * side, or each rank's best candidates merged into the row's best.
 * The engine uses it in three steps, because the K/V pool is sized between them:
 * open (models, threads), kv_limits (every rank's), create (every rank's inner
 * backend with n_blocks); then it drives the ops of qc_backend_tp_ops.
 * Errors: the first failing rank's, in rank order. A forward that fails on every
 * rank (the plan checks a backend makes before its first all-reduce) leaves the
 * ranks in step and the backend usable; one that fails on some ranks only leaves
 * them out of step, and every later forward fails at once naming that rank (the
 * engine is then to be freed). A rank that never returns (a device collective
 * waiting for a rank that failed before it) is the inner backend's to prevent:
 * each inner create/forward must fail on every rank before its first collective,
 * or not at all after it. destroy joins idle threads only, so it does not hang.
 * Non-goals: the all-reduce itself (the inner backend's), scheduling, sampling.
 */
#ifndef QC_BACKEND_TP_H
#define QC_BACKEND_TP_H

#include <stdint.h>

#include "backend.h"
#include "model.h"
#include "qc_err.h"

struct qc_backend_tp;

/* whole: qc_model_open's model (a --tp bundle's weightless whole, or a plain
 * model: one rank), borrowed, outliving tp; inner: the backend every rank runs
 * (static). Opens each rank's model and starts one thread per rank. QC_OK and
 * *out, or qc_model_rank_open's error, QC_ENOMEM. */
int qc_backend_tp_open(const struct qc_backend_ops *inner, const struct qc_model *whole, struct qc_backend_tp **out,
		       struct qc_err *err);

/* Every rank's K/V block bytes and most K/V bytes, each from its own thread with
 * p plus {tp, tp_rank = r, device = r}: inner->kv_limits, or
 * qc_backend_block_bytes when inner has none (*max_bytes 0 then: host memory).
 * *block_bytes: the largest over ranks (they hold the same K/V heads each);
 * *max_bytes: the smallest stated (0: none). */
int qc_backend_tp_kv_limits(struct qc_backend_tp *tp, const struct qc_backend_params *p, float mem_util,
			    uint64_t *block_bytes, uint64_t *max_bytes, struct qc_err *err);

/* Each rank's inner backend, created in its thread, over its model with p plus
 * {tp = the group, tp_rank = r, device = r, n_threads = max(1, p->n_threads /
 * size)} (p->n_blocks blocks each: every rank the same block tables). On failure
 * the ranks made are destroyed and the first failing rank's error returned. */
int qc_backend_tp_create(struct qc_backend_tp *tp, const struct qc_backend_params *p, struct qc_err *err);

/* The ops the engine drives tp with (its state argument is tp): forward,
 * forward_top when inner has one, destroy (qc_backend_tp_free); name and
 * prefill_chunk inner's; create and kv_limits NULL (the calls above). Valid
 * until tp is freed. */
const struct qc_backend_ops *qc_backend_tp_ops(const struct qc_backend_tp *tp);

int qc_backend_tp_size(const struct qc_backend_tp *tp);
/* Rank r's model (0 <= r < size), valid until tp is freed. */
const struct qc_model *qc_backend_tp_rank_model(const struct qc_backend_tp *tp, int r);

/* Accepts NULL. Each rank's inner backend is destroyed in its thread, the
 * threads joined, the rank models closed. */
void qc_backend_tp_free(struct qc_backend_tp *tp);

/* The best m of n_src candidate lists, each best first (larger value, then lower
 * id; -0 == +0) with global ids and no NaN: list s has n[s] entries at ids[s],
 * vals[s]. Writes the merged best min(m, sum n[s]) to out_ids / out_vals, best
 * first, and returns that count. The global top m of a row lies within the union
 * of its slices' top m, so merging the ranks' lists gives the row's own. */
int32_t qc_backend_tp_merge_top(int n_src, const int32_t *const *ids, const float *const *vals, const int32_t *n,
				int32_t m, int32_t *out_ids, float *out_vals);

#endif
