/* paged_attn.h — entry point of paged_attn.cu (causal attention over paged fp16
 * or fp8 K/V). */
#ifndef QC_CUDA_PAGED_ATTN_H
#define QC_CUDA_PAGED_ATTN_H

#include "qc_cuda.h"
#include "rope_kv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether prefill runs may take flash_attn.cu (runtime/cuda/backend_cuda_env.c
 * reads QC_CUDA_FLASH once): off makes a token's result independent of how its
 * prompt was chunked. */
enum qc_cuda_attn_flash {
	QC_CUDA_ATTN_FLASH_AUTO = 0,
	QC_CUDA_ATTN_FLASH_OFF = 1,
};

struct qc_cuda_paged_attn_args {
	const float *d_q;          /* (n_tok, n_head * hd), after RoPE (fp8 pool: and rotated) */
	float *d_out;              /* (n_tok, n_head * hd) */
	const uint16_t *d_pool;    /* kv_store.h layout, binary16; or NULL and d_pool8 */
	int32_t layer, n_layer, block_tokens;
	int32_t n_head, n_head_kv, hd;
	const int32_t *d_pos;      /* (n_tok) position; token t sees positions 0..pos */
	const int32_t *d_tok_seq;  /* (n_tok) plan entry of each token */
	const int32_t *d_tables;   /* (n_seqs, table_stride) block ids */
	int32_t table_stride;
	enum qc_cuda_attn_flash flash; /* the flash prefill path: AUTO (its rules) or OFF (QC_CUDA_FLASH=0);
					  here, in table_stride's padding, so the struct the kernels
					  take by value keeps its size */
	int64_t n_tok;
	int32_t max_ctx;           /* bound on pos + 1 (sizes shared memory) */
	float scale;               /* 1 / sqrt(hd) (Gemma, Phi-3: the model's q scale) */
	float softcap;             /* scaled scores -> tanh(s / softcap) * softcap; 0: none (Gemma 2) */
	int32_t window;            /* a token sees only its last window positions; 0: all
				      (attn_window.cuh; Gemma 2/3's local layers, Phi-3, Mistral) */
	void *d_ws;                /* optional scratch for the split-K path (paged_attn_split.cuh):
				      at least qc_cuda_paged_attn_ws_bytes(1, ...) bytes (tokens are
				      taken as many at a time as it holds); NULL: one block per
				      (token, head) */
	uint64_t ws_bytes;
	/* Zeroed arrival counters (n_tok x n_head_kv per launch; each launch leaves them
	 * zero): the split path's last chunk of a (token, K/V head) merges the chunks
	 * itself, in chunk order (the merge kernel's bits); NULL or too few: the merge
	 * kernel runs. May be the matmuls' counters (matmul_dispatch.h d_flags). */
	uint32_t *d_flags;
	int64_t n_flags;
	/* The fp8 pool instead of d_pool (exactly one is set): qc_cuda_kv_store_e4m3's
	 * codes and exponents; its K heads are rotated, so d_q must be too (that
	 * store rotates it): q . k is then the unrotated product. */
	const uint8_t *d_pool8;    /* (n_blocks, n_layer, 2, block_tokens, n_head_kv * hd) E4M3FN */
	const int8_t *d_pool8_exp; /* (n_blocks, n_layer, 2, block_tokens, n_head_kv) */
	/* 1: every token's positions below its own were written by earlier forwards (each
	 * sequence has one token in the step: decode), and d_pos, d_tok_seq and d_tables
	 * were written before this forward's first kernel. The split path then loads those
	 * K/V rows before its programmatic-dependent-launch wait, while the kernels before
	 * it run, and only q and the token's own row after it. 0: everything after it. */
	int32_t old_ctx;
	/* 1 (with old_ctx): RoPE here, not in qc_cuda_rope_kv (_e4m3 for the fp8 pool)
	 * before: d_q is the Q|K|V GEMV's unrotated q, and the chunk block holding a
	 * token's own position rotates that token's K row and stores it and V into the
	 * pool from rope_kv.d_k / d_v / d_slots (those kernels' bits; rope_kv names the
	 * same pool; d_q and d_k are left as they were). The other blocks of the token
	 * never read that row. Where the split path cannot run, the kernel of its own
	 * runs first (said once). */
	int32_t fuse_rope;
	struct qc_cuda_rope_kv_args rope_kv;
};

/* Scratch bytes the split-K path needs for n_tok tokens (0 on a bad shape). */
uint64_t qc_cuda_paged_attn_ws_bytes(int64_t n_tok, int32_t n_head, int32_t hd, int32_t max_ctx);

/* out = softmax(cap(q K^T * scale)) V per token and head over the positions its
 * window leaves (all of 0..pos without one), K/V read only through the block
 * tables (GQA: head h reads kv head h / (n_head / n_head_kv)).
 * With d_ws large enough and a shape in its limits, the split-K path; else one
 * block per (token, head). QC_EUNSUPPORTED when max_ctx scores do not fit in
 * shared memory on the one-block path; QC_EINVAL unless exactly one of d_pool,
 * d_pool8 (with d_pool8_exp) is set. */
int qc_cuda_paged_attn(const struct qc_cuda_paged_attn_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
