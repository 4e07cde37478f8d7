/* kv_store.h — entry point of kv_store.cu (write K/V rows into paged fp16 blocks). */
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

#ifdef __cplusplus
}
#endif

#endif
