/* rope_kv.h — entry points of rope_kv.cu (RoPE of Q and K, then K and V into
 * their paged fp16 slots, in one launch) and rope_kv8.cu (the same into the fp8
 * pool, q rotated for attention on it, in one launch). */
#ifndef QC_CUDA_ROPE_KV_H
#define QC_CUDA_ROPE_KV_H

#include "qc_cuda.h"
#include "rope.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Aliasing: d_q, d_k, d_v and d_pool must not overlap; d_slots must not repeat
 * a slot (as qc_cuda_kv_store). */
struct qc_cuda_rope_kv_args {
	struct qc_cuda_rope_args rope; /* positions, n_tok, hd, n_rot, mode and the angle
					* parameters, as for qc_cuda_rope; rope.d_x and
					* rope.n_heads are not read (d_q/n_head, d_k/n_head_kv) */
	float *d_q;                /* (n_tok, n_head * hd), rotated in place */
	int32_t n_head;
	float *d_k;                /* (n_tok, n_head_kv * hd), rotated in place */
	const float *d_v;          /* (n_tok, n_head_kv * hd) */
	int32_t n_head_kv;
	const int32_t *d_slots;    /* (n_tok) block * block_tokens + offset */
	uint16_t *d_pool;          /* (n_blocks, n_layer, 2, block_tokens, n_head_kv * hd) binary16;
				      NULL: RoPE only, no store (d_v and d_slots not read) */
	uint8_t *d_pool8;          /* qc_cuda_rope_kv_e4m3 only (NULL for qc_cuda_rope_kv): (n_blocks,
				      n_layer, 2, block_tokens, n_head_kv * hd) E4M3FN codes */
	int8_t *d_pool8_exp;       /* with d_pool8: (n_blocks, n_layer, 2, block_tokens, n_head_kv)
				      scale exponents */
	int32_t layer, n_layer, block_tokens;
};

/* Bit for bit qc_cuda_rope of d_q (n_head heads), qc_cuda_rope of d_k
 * (n_head_kv heads), then qc_cuda_kv_store of (k, v) with kv_dim = n_head_kv *
 * hd: dims past n_rot stay unrotated, the pool gets fp16 (round to nearest
 * even) of the rotated k and of v. QC_OK without a launch when n_tok is 0;
 * QC_EINVAL on what either of those rejects or a head count < 1;
 * QC_EUNSUPPORTED past the grid (n_rot > 8192, n_tok > INT32_MAX, over 16M
 * elements of q, k and v per token). */
int qc_cuda_rope_kv(const struct qc_cuda_rope_kv_args *a, cudaStream_t s, struct qc_err *err);

/* The fp8 pool's qc_cuda_rope_kv: bit for bit qc_cuda_rope_kv without a pool
 * (RoPE of d_q and d_k in place) then qc_cuda_kv_store_e4m3 of (k, v) into
 * d_pool8 / d_pool8_exp with d_q (each head left RoPE'd, then rotated by
 * qc_ref_kv_rotate's H, what attention on this pool takes); d_k is left RoPE'd,
 * unrotated. One launch: one warp per (token, head), the head RoPE'd in shared
 * memory and stored from there. QC_OK without a launch when n_tok is 0;
 * QC_EINVAL on what qc_cuda_rope_kv rejects, hd > 1024, d_pool set or d_pool8 /
 * d_pool8_exp missing; QC_EUNSUPPORTED past the grid (n_tok > INT32_MAX, over
 * 524280 heads per token). */
int qc_cuda_rope_kv_e4m3(const struct qc_cuda_rope_kv_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
