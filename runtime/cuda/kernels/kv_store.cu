/* kv_store.cu — write this step's K and V rows into their paged fp16 slots.
 *
 * Pool layout (the CPU backend's, in binary16): block b, layer l, K (0) or
 * V (1), token offset o: element ((b * n_layer + l) * 2 + which) * bt + o rows
 * of kv_dim. One thread per (token, element). Non-goals: quantized caches.
 * Reference: runtime/ops/kv_store.c.
 */
#include "kv_store.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

static __global__ void kv_store_kernel(const struct qc_cuda_kv_store_args a)
{
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= a.n_tok * a.kv_dim)
		return;
	const int64_t t = i / a.kv_dim, d = i % a.kv_dim;
	const int64_t slot = a.d_slots[t], b = slot / a.block_tokens, o = slot % a.block_tokens;
	const int64_t kbase = (((b * a.n_layer + a.layer) * 2 + 0) * a.block_tokens + o) * a.kv_dim;
	const int64_t vbase = (((b * a.n_layer + a.layer) * 2 + 1) * a.block_tokens + o) * a.kv_dim;
	__half *pool = (__half *)a.d_pool;
	pool[kbase + d] = __float2half_rn(a.d_k[i]);
	pool[vbase + d] = __float2half_rn(a.d_v[i]);
}

extern "C" int qc_cuda_kv_store(const struct qc_cuda_kv_store_args *a, cudaStream_t s, struct qc_err *err)
{
	if (a->n_tok < 0 || a->kv_dim < 1 || a->block_tokens < 1 || a->layer < 0 || a->layer >= a->n_layer)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "kv_store: %lld tokens, kv_dim %d, layer %d/%d",
				  (long long)a->n_tok, a->kv_dim, a->layer, a->n_layer);
	const int64_t n = a->n_tok * a->kv_dim;
	if (!n)
		return QC_OK;
	kv_store_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(*a);
	return qc_cuda_check(cudaGetLastError(), "kv_store_kernel", err);
}
