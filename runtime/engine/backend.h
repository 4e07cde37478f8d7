/* backend.h — the compute interface the engine drives (CPU today, CUDA later).
 *
 * Owns: struct qc_backend_ops, the three calls a backend provides: create (take
 * the model's weights — upload them, or for the CPU just keep the views — and
 * allocate a K/V pool of n_blocks blocks), forward (one scheduler plan), destroy.
 * Contract of forward: perform plan->n_cow block copies first; write the K/V of
 * every planned token to its slot; attention reads K/V only through the plan's
 * block tables; write one row of n_vocab logits per entry with need_logits, in
 * entry order (row k = the k-th such entry), computed at that entry's last token.
 * Non-goals: scheduling, sampling, tokenization (engine.c), thread safety.
 */
#ifndef QC_BACKEND_H
#define QC_BACKEND_H

#include <stdint.h>

#include "model.h"
#include "qc_err.h"
#include "scheduler.h"
#include "tp_group.h"

/* How matmul activations are rounded before the dot product. */
enum qc_act_round {
	QC_ACT_ROUND_NONE = 0,      /* float activations (the plain reference) */
	QC_ACT_ROUND_GGML = 1,      /* as ggml's CPU vec_dot_type: f16/bf16 for those
				       weights, 8-bit blocks (q8_0 / q8_K) for quantized */
};

/* How the CPU backend orders attention sums with QC_ACT_ROUND_GGML. llama.cpp's CPU
 * build sums q.k and P.V in tinyBLAS tiles for a sequence with 2 or more tokens in a
 * batch and with ggml_vec_dot_f16 for 1 (a decode step): last-bit different, which on
 * a trained model can flip a later q8 code (docs/accuracy.md). */
enum qc_attn_order {
	QC_ATTN_ORDER_FIXED = 0,    /* always the tile order: a token's logits do not depend
				       on how its sequence was batched (prefill = one token
				       per forward, prefix cache on or off: same bits) */
	QC_ATTN_ORDER_LLAMA = 1,    /* llama.cpp's: tiles for 2+ tokens, vec_dot for 1;
				       bit-identical to its AVX2/FMA build, batching-dependent */
};

/* What the K/V pool stores (--kv-dtype). */
enum qc_kv_dtype {
	QC_KV_F16 = 0,              /* binary16 values (the CPU keeps them in floats) */
	QC_KV_FP8 = 1,              /* E4M3FN codes + a power-of-two scale per token and kv
				       head (ops.h qc_ref_kv_e4m3_exp); CPU and CUDA */
};

/* "f16" / "fp8". */
const char *qc_kv_dtype_name(enum qc_kv_dtype dt);

struct qc_backend_params {
	int32_t n_blocks;           /* K/V pool size in blocks (qc_kv_blocks_total) */
	int32_t block_tokens;       /* tokens per block */
	int32_t max_tokens;         /* most tokens one forward will carry */
	int32_t max_logits;         /* most logits rows one forward will write */
	int32_t max_ctx;            /* longest sequence attention will see */
	enum qc_act_round act_round;
	enum qc_attn_order attn_order;
	int32_t n_threads;          /* worker threads for matmuls, >= 1 */
	enum qc_kv_dtype kv_dtype;  /* a backend that cannot store it refuses at create */
	/* Tensor parallelism (docs/tp.md; set by backend_tp.c, else NULL / 0 / 0):
	 * this backend runs rank tp_rank's shard (the model's tp fields say which);
	 * after each O and down projection (and the MoE combine, and the vocab-sharded
	 * embedding) it sums the partial rows over the group: the CPU through
	 * qc_tp_allreduce_f32, a device backend its own way (CUDA: NCCL, with rank 0's
	 * start-up data passed through qc_tp_group_slot). create, forward, forward_top
	 * and kv_limits of one rank are always called from that rank's own thread. */
	struct qc_tp_group *tp;
	int32_t tp_rank;
	int32_t device;             /* device ordinal for device backends (CUDA: cudaSetDevice) */
};

#define QC_BACKEND_TOP_MAX 128 /* most candidates forward_top returns per row */

struct qc_backend_ops {
	const char *name;
	/* Default prefill chunk (max_prefill_tokens) for this backend: the most prompt
	 * tokens one step carries, hence the longest a decoding stream waits; 0: the
	 * whole max_batch_tokens. */
	int32_t prefill_chunk;
	/* m is borrowed and outlives the backend. QC_OK and *state, or an error. */
	int (*create)(const struct qc_model *m, const struct qc_backend_params *p, void **state,
		      struct qc_err *err);
	/* logits: (plan->n_logits, n_vocab) floats, caller-owned. */
	int (*forward)(void *state, const struct qc_sched_plan *plan, float *logits,
		       struct qc_err *err);
	void (*destroy)(void *state); /* accepts NULL */
	/* Optional (NULL: the engine takes every row from forward and samples it on
	 * the host). forward, plus for every logit row k with want[k] = m in
	 * 1..QC_BACKEND_TOP_MAX the row's m best ids, best first (larger logit, then
	 * lower id), at top_ids + k * QC_BACKEND_TOP_MAX, and for m >= 2 their logits
	 * at top_logits + k * QC_BACKEND_TOP_MAX; top_ids[k * QC_BACKEND_TOP_MAX] is -1
	 * when the row holds a NaN or +inf or only -inf. Logit row k is written only
	 * when want[k] is 0 or the row is flagged (the host then names the bad
	 * logit): a device backend brings back 4 bytes per greedy row and 8 m per
	 * top-k row instead of the vocabulary. */
	int (*forward_top)(void *state, const struct qc_sched_plan *plan, const int32_t *want, float *logits,
			   int32_t *top_ids, float *top_logits, struct qc_err *err);
	/* Optional (NULL: qc_backend_block_bytes, host memory): this backend's K/V
	 * block bytes and the most K/V bytes it can hold next to the weights and
	 * the buffers p implies (p->n_blocks unused), using mem_util of the device
	 * memory. QC_OK, or an error (QC_ECUDA: no device). */
	int (*kv_limits)(const struct qc_model *m, const struct qc_backend_params *p, float mem_util,
			 uint64_t *block_bytes, uint64_t *max_bytes, struct qc_err *err);
};

/* The plain-C backend (backend_cpu.c). */
extern const struct qc_backend_ops qc_backend_cpu;

/* Bytes of one CPU K/V block for m (qc_kv_block_bytes): f16, 4 bytes per value
 * (floats); fp8, 1 byte per value + 1 scale-exponent byte per token and kv head. */
int qc_backend_block_bytes(const struct qc_model *m, int32_t block_tokens, enum qc_kv_dtype dt, uint64_t *out,
			   struct qc_err *err);

#endif
