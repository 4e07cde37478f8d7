/* kv_store.cu — write this step's K and V rows into their paged slots: binary16,
 * or the fp8 pool (E4M3FN codes + a power-of-two scale per token and kv head, K
 * heads rotated; kv_pool.cuh).
 *
 * Pool layout (the CPU backend's, in binary16): block b, layer l, K (0) or
 * V (1), token offset o: element ((b * n_layer + l) * 2 + which) * bt + o rows
 * of kv_dim; the fp8 exponents the same rows of kv_dim / hd. binary16: one
 * thread per (token, element); fp8: one warp per (token, head), since a head's
 * scale and rotation need all of it (and the q heads' rotation rides along:
 * attention on the fp8 pool takes q rotated).
 * Non-goals: other quantized caches. Reference: runtime/ops/kv_store.c.
 */
#include "kv_store.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kv_pool.cuh"
#include "pdl.cuh"

#define KV8_WARPS 4 /* warps per block of the fp8 store */

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

/* Warp w of the step: token w / per, then its K heads, V heads and q heads. */
static __global__ void kv_store_e4m3_kernel(const struct qc_cuda_kv_store_e4m3_args a)
{
	qc_pdl_enter();
	extern __shared__ float kv8_sm[]; /* (KV8_WARPS, hd) */
	const int n_kv = a.kv_dim / a.hd, per = 2 * n_kv + (a.d_q ? a.n_head : 0);
	const int64_t w = (int64_t)blockIdx.x * KV8_WARPS + (threadIdx.x >> 5);
	if (w >= a.n_tok * per)
		return; /* a whole warp: the others' __syncwarp never waits for it */
	float *y = kv8_sm + (threadIdx.x >> 5) * a.hd;
	const int64_t t = w / per;
	const int h = (int)(w % per);
	if (h >= 2 * n_kv) { /* a q head: rotated in place */
		float *q = a.d_q + (t * a.n_head + (h - 2 * n_kv)) * a.hd;
		const int lane = threadIdx.x & 31;
		for (int d = lane; d < a.hd; d += 32)
			y[d] = q[d];
		__syncwarp();
		kv8_rotate(y, a.hd);
		for (int d = lane; d < a.hd; d += 32)
			q[d] = y[d];
		return;
	}
	const int which = h / n_kv, kvh = h % n_kv;
	const int64_t slot = a.d_slots[t], b = slot / a.block_tokens, o = slot % a.block_tokens;
	const int64_t row = ((b * a.n_layer + a.layer) * 2 + which) * a.block_tokens + o;
	const float *x = (which ? a.d_v : a.d_k) + t * a.kv_dim + (int64_t)kvh * a.hd;
	kv8_store_head(x, a.d_codes + row * a.kv_dim + (int64_t)kvh * a.hd, a.d_exps + row * n_kv + kvh, a.hd,
		       which ? KV8_ROT_NONE : KV8_ROT_WHT, y);
}

extern "C" int qc_cuda_kv_store_e4m3(const struct qc_cuda_kv_store_e4m3_args *a, cudaStream_t s, struct qc_err *err)
{
	if (a->n_tok < 0 || a->hd < 1 || a->hd > 1024 || a->kv_dim < a->hd || a->kv_dim % a->hd ||
	    a->block_tokens < 1 || a->layer < 0 || a->layer >= a->n_layer || (a->d_q && a->n_head < 1))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "kv_store_e4m3: %lld tokens, kv_dim %d, head_dim %d, %d q heads, layer %d/%d",
				  (long long)a->n_tok, a->kv_dim, a->hd, a->n_head, a->layer, a->n_layer);
	const int64_t per = 2 * (int64_t)(a->kv_dim / a->hd) + (a->d_q ? a->n_head : 0);
	const int64_t blocks = (a->n_tok * per + KV8_WARPS - 1) / KV8_WARPS;
	if (blocks > INT32_MAX)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "kv_store_e4m3: %lld tokens of %lld heads",
				  (long long)a->n_tok, (long long)per);
	if (!blocks)
		return QC_OK;
	return qc_cuda_check(qc_launch(kv_store_e4m3_kernel, dim3((unsigned)blocks), dim3(32 * KV8_WARPS),
				       sizeof(float) * KV8_WARPS * (size_t)a->hd, s, *a),
			     "kv_store_e4m3_kernel", err);
}
