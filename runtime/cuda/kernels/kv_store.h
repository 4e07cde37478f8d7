/* kv_store.h — entry points of kv_store.cu (write K/V rows into paged fp16
 * blocks, or into the fp8 pool). */
#ifndef QC_CUDA_KV_STORE_H
#define QC_CUDA_KV_STORE_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qc_cuda_kv_store_args {
	const float *d_k, *d_v;    /* (n_tok, kv_dim) */
	const int32_t *d_slots;    /* (n_tok) block * block_tokens + offset */
	int64_t n_tok;
	uint16_t *d_pool;          /* (n_blocks, n_layer, 2, block_tokens, kv_dim) binary16 */
	int32_t layer, n_layer, block_tokens, kv_dim;
};

/* pool[slot][layer][K|V] = fp16(k|v) (round to nearest even, as the CPU
 * backend rounds its cache). */
int qc_cuda_kv_store(const struct qc_cuda_kv_store_args *a, cudaStream_t s, struct qc_err *err);

struct qc_cuda_kv_store_e4m3_args {
	const float *d_k, *d_v;    /* (n_tok, kv_dim), K after RoPE */
	float *d_q;                /* (n_tok, n_head * hd): each head rotated in place as the K
				      heads are (qc_ref_kv_rotate), what attention on this pool
				      takes; NULL: none */
	int32_t n_head;
	const int32_t *d_slots;    /* (n_tok) block * block_tokens + offset, no slot twice */
	int64_t n_tok;
	uint8_t *d_codes;          /* (n_blocks, n_layer, 2, block_tokens, kv_dim) E4M3FN */
	int8_t *d_exps;            /* (n_blocks, n_layer, 2, block_tokens, kv_dim / hd) scale exponents */
	int32_t layer, n_layer, block_tokens, kv_dim, hd;
};

/* qc_ref_kv_store_e4m3 bit for bit (codes and exponents; a NaN's code may differ
 * in sign), plus d_q's heads rotated. One warp per (token, head).
 * QC_EINVAL on a bad shape (kv_dim not a multiple of hd, hd < 1 or > 1024). */
int qc_cuda_kv_store_e4m3(const struct qc_cuda_kv_store_e4m3_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
