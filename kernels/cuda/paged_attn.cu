/* paged_attn.cu — causal attention of each planned token over its sequence's
 * cached K/V, read only through the plan's block tables (decode and prefill).
 *
 * One block per (token, head): q in shared memory, the pos + 1 scores in
 * shared memory (max_ctx floats; warps over positions, lanes over dims), a
 * block max / exp / sum softmax, then P V with warps over positions again and
 * their partial rows summed in shared memory (fixed order: batch-invariant).
 * Not yet flash-style (no K/V tiles shared across query tokens, no split-K for
 * long contexts): the next step for speed.
 * GQA: head h reads kv head h / (n_head / n_head_kv). K/V are fp16, math fp32.
 * Reference: kernels/ref/paged_attn.c; vLLM paged_attention v1 (facts only).
 */
#include "paged_attn.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "block_reduce.cuh"

#define THREADS 256
#define PW 4       /* positions per warp step */
#define MAX_HD 256 /* head dims a lane-strided register row holds */

static __device__ __forceinline__ const __half *kv_row(const struct qc_cuda_paged_attn_args &a,
						       const int32_t *table, int32_t j, int which, int kvh)
{
	const int64_t b = table[j / a.block_tokens], o = j % a.block_tokens;
	const int64_t kv_dim = (int64_t)a.n_head_kv * a.hd;
	return (const __half *)a.d_pool + (((b * a.n_layer + a.layer) * 2 + which) * a.block_tokens + o) * kv_dim +
	       (int64_t)kvh * a.hd;
}

static __global__ void paged_attn_kernel(const struct qc_cuda_paged_attn_args a)
{
	extern __shared__ float sm[];
	float *q = sm, *sc = sm + a.hd;
	const int64_t t = blockIdx.x;
	const int h = blockIdx.y, kvh = h / (a.n_head / a.n_head_kv);
	const int32_t n_ctx = a.d_pos[t] + 1;
	if (n_ctx > a.max_ctx) { /* broken contract: NaN out, never a shared-memory overrun */
		for (int d = threadIdx.x; d < a.hd; d += blockDim.x)
			a.d_out[t * (int64_t)a.n_head * a.hd + (int64_t)h * a.hd + d] = __int_as_float(0x7fc00000);
		return;
	}
	const int32_t *table = a.d_tables + (int64_t)a.d_tok_seq[t] * a.table_stride;
	const int64_t q_dim = (int64_t)a.n_head * a.hd;

	for (int d = threadIdx.x; d < a.hd; d += blockDim.x)
		q[d] = a.d_q[t * q_dim + (int64_t)h * a.hd + d];
	__syncthreads();
	/* scores: each warp takes PW positions at a time (independent loads in
	 * flight), lanes over the head dims (coalesced K rows), shuffle sums */
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	float mx = -INFINITY;
	for (int32_t jb = warp * PW; jb < n_ctx; jb += nw * PW) {
		float s[PW];
#pragma unroll
		for (int u = 0; u < PW; u++) {
			s[u] = 0.0f;
			if (jb + u < n_ctx) {
				const __half *k = kv_row(a, table, jb + u, 0, kvh);
				for (int d = lane; d < a.hd; d += 32)
					s[u] = fmaf(q[d], __half2float(k[d]), s[u]);
			}
		}
#pragma unroll
		for (int u = 0; u < PW; u++) {
			for (int off = 16; off > 0; off >>= 1)
				s[u] += __shfl_xor_sync(0xffffffffu, s[u], off);
			if (jb + u < n_ctx) {
				const float v = s[u] * a.scale;
				if (lane == 0)
					sc[jb + u] = v;
				mx = fmaxf(mx, v);
			}
		}
	}
	mx = block_reduce<QC_RED_MAX>(mx); /* also orders the sc writes before the reads below */
	float sum = 0.0f;
	for (int32_t j = threadIdx.x; j < n_ctx; j += blockDim.x) {
		const float e = expf(sc[j] - mx);
		sc[j] = e;
		sum += e;
	}
	sum = block_reduce<QC_RED_SUM>(sum); /* also orders the sc writes before the reads */
	const float inv = 1.0f / sum;
	/* P V: warp w sums positions w, w + nw, ... (PW rows in flight), lane l
	 * dims l + 32m; the warps' partial rows meet in shared memory, summed in
	 * warp order (deterministic) */
	float o[MAX_HD / 32];
#pragma unroll
	for (int m = 0; m < MAX_HD / 32; m++)
		o[m] = 0.0f;
	for (int32_t jb = warp * PW; jb < n_ctx; jb += nw * PW) {
#pragma unroll
		for (int u = 0; u < PW; u++) {
			if (jb + u >= n_ctx)
				break;
			const __half *v = kv_row(a, table, jb + u, 1, kvh);
			const float p = sc[jb + u] * inv;
#pragma unroll
			for (int m = 0; m < MAX_HD / 32; m++)
				if (lane + 32 * m < a.hd)
					o[m] = fmaf(p, __half2float(v[lane + 32 * m]), o[m]);
		}
	}
	float *red = sc + a.max_ctx; /* (nw, hd) */
#pragma unroll
	for (int m = 0; m < MAX_HD / 32; m++)
		if (lane + 32 * m < a.hd)
			red[warp * a.hd + lane + 32 * m] = o[m];
	__syncthreads();
	for (int d = threadIdx.x; d < a.hd; d += blockDim.x) {
		float r = 0.0f;
		for (int w = 0; w < nw; w++)
			r += red[w * a.hd + d];
		a.d_out[t * q_dim + (int64_t)h * a.hd + d] = r;
	}
}

extern "C" int qc_cuda_paged_attn(const struct qc_cuda_paged_attn_args *a, cudaStream_t s, struct qc_err *err)
{
	if (a->n_head < 1 || a->n_head_kv < 1 || a->n_head % a->n_head_kv || a->hd < 1 || a->hd > MAX_HD || a->n_tok < 0 ||
	    a->max_ctx < 1 || a->block_tokens < 1 || a->n_tok > INT32_MAX || a->n_head > 65535)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "paged_attn: %lld tokens, %d heads / %d kv heads of %d, max_ctx %d",
				  (long long)a->n_tok, a->n_head, a->n_head_kv, a->hd, a->max_ctx);
	const size_t smem = sizeof(float) * ((size_t)a->hd + (size_t)a->max_ctx + (THREADS / 32) * (size_t)a->hd);
	int dev, max_smem;
	int rc;
	if ((rc = qc_cuda_check(cudaGetDevice(&dev), "cudaGetDevice", err)) ||
	    (rc = qc_cuda_check(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
				"cudaDeviceGetAttribute", err)))
		return rc;
	if (smem + 32 * sizeof(float) > (size_t)max_smem)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "paged_attn: context of %d positions needs %zu bytes of shared memory (device: %d); "
				  "split-K attention is not written yet", a->max_ctx, smem, max_smem);
	if (!a->n_tok)
		return QC_OK;
	if (smem > 48 * 1024 &&
	    (rc = qc_cuda_check(cudaFuncSetAttribute(paged_attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
						     (int)smem), "cudaFuncSetAttribute(paged_attn)", err)))
		return rc;
	paged_attn_kernel<<<dim3((unsigned)a->n_tok, (unsigned)a->n_head), THREADS, smem, s>>>(*a);
	return qc_cuda_check(cudaGetLastError(), "paged_attn_kernel", err);
}
