/* paged_attn.cu — causal attention of each planned token over its sequence's
 * cached K/V, read only through the plan's block tables (decode and prefill).
 *
 * One block per (token, head): q in shared memory, the pos + 1 scores in
 * shared memory (max_ctx floats; warps over positions, lanes over dims), a
 * block max / exp / sum softmax, then P V with warps over positions again and
 * their partial rows summed in shared memory (fixed order: batch-invariant).
 * With scratch (d_ws) the split-K path (paged_attn_split.cu) runs instead:
 * decode steps and small batches, any context length.
 * Prefill: with scratch, the tokens of runs of FLASH_MIN_RUN+ consecutive
 * positions of one sequence go to flash_attn.cu first (run list and done flags
 * carved from the front of d_ws, found on the device); the kernels here skip
 * them (not while s is captured into a graph: decode steps). a->flash OFF
 * (the backend's QC_CUDA_FLASH=0) turns that off (then a token's result never depends on how its prompt was
 * chunked).
 * GQA: head h reads kv head h / (n_head / n_head_kv). K/V are fp16, or fp8
 * (E4M3FN + a power-of-two scale per position and K/V head, decoded in registers
 * by kv_pool.cuh's kv_fp8; its K rows are rotated and q comes rotated alike):
 * the kernels are templated on the pool's trait, only their element loads
 * differ. Math fp32.
 * Soft-capped scores and a sliding window (attn_window.cuh): a windowed token's
 * positions start at its window (the split path chunks the positions it sees),
 * and nothing before it is read.
 * Reference: runtime/ops/paged_attn.c; vLLM paged_attention v1 (facts only).
 */
#include "paged_attn.h"
#include "pdl.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "attn_window.cuh"
#include "block_reduce.cuh"
#include "flash_attn.h"
#include "kv_pool.cuh"
#include "paged_attn_split.cuh"
#include "ops.h" /* enum qc_rope_mode: the RoPE-inside arguments' check */

#define THREADS 256
#define PW 4       /* positions per warp step */
#define MAX_HD QC_ATTN_MAX_HD /* head dims a lane-strided register row holds */
#define FLASH_MIN_RUN 16 /* shorter runs (decode tokens) keep the kernels of this file */

template <typename KV>
static __global__ void paged_attn_kernel(const struct qc_cuda_paged_attn_args a, const int32_t *skip)
{
	qc_pdl_enter();
	extern __shared__ float sm[];
	float *q = sm, *sc = sm + a.hd;
	const int64_t t = blockIdx.x;
	if (skip && skip[t])
		return; /* flash_attn.cu wrote this token */
	const int h = blockIdx.y, kvh = h / (a.n_head / a.n_head_kv);
	const int32_t n_ctx = a.d_pos[t] + 1;
	if (n_ctx > a.max_ctx) { /* broken contract: NaN out, never a shared-memory overrun */
		for (int d = threadIdx.x; d < a.hd; d += blockDim.x)
			a.d_out[t * (int64_t)a.n_head * a.hd + (int64_t)h * a.hd + d] = __int_as_float(0x7fc00000);
		return;
	}
	const int32_t *table = a.d_tables + (int64_t)a.d_tok_seq[t] * a.table_stride;
	const int64_t q_dim = (int64_t)a.n_head * a.hd;
	const int32_t jw = qc_attn_win_start(a, n_ctx - 1); /* scores of positions jw.. at sc[jw..] */

	for (int d = threadIdx.x; d < a.hd; d += blockDim.x)
		q[d] = a.d_q[t * q_dim + (int64_t)h * a.hd + d];
	__syncthreads();
	/* scores: each warp takes PW positions at a time (independent loads in
	 * flight), lanes over the head dims (coalesced K rows), shuffle sums */
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	float mx = -INFINITY;
	for (int32_t jb = jw + warp * PW; jb < n_ctx; jb += nw * PW) {
		float s[PW];
#pragma unroll
		for (int u = 0; u < PW; u++) {
			s[u] = 0.0f;
			if (jb + u < n_ctx) {
				const typename KV::row k = KV::at(a, table, jb + u, 0, kvh);
				for (int d = lane; d < a.hd; d += 32)
					s[u] = fmaf(q[d], KV::get(k, d), s[u]);
			}
		}
#pragma unroll
		for (int u = 0; u < PW; u++) {
			for (int off = 16; off > 0; off >>= 1)
				s[u] += __shfl_xor_sync(0xffffffffu, s[u], off);
			if (jb + u < n_ctx) {
				const float v = qc_attn_cap(a, s[u] * a.scale);
				if (lane == 0)
					sc[jb + u] = v;
				mx = fmaxf(mx, v);
			}
		}
	}
	mx = block_reduce<QC_RED_MAX>(mx); /* also orders the sc writes before the reads below */
	float sum = 0.0f;
	for (int32_t j = jw + threadIdx.x; j < n_ctx; j += blockDim.x) {
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
	for (int32_t jb = jw + warp * PW; jb < n_ctx; jb += nw * PW) {
#pragma unroll
		for (int u = 0; u < PW; u++) {
			if (jb + u >= n_ctx)
				break;
			const typename KV::row v = KV::at(a, table, jb + u, 1, kvh);
			const float p = sc[jb + u] * inv;
#pragma unroll
			for (int m = 0; m < MAX_HD / 32; m++)
				if (lane + 32 * m < a.hd)
					o[m] = fmaf(p, KV::get(v, lane + 32 * m), o[m]);
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


/* Bytes of the flash path's done flags at the front of d_ws (its run list follows). */
static uint64_t flash_done_bytes(int64_t n_tok)
{
	return ((uint64_t)n_tok * sizeof(int32_t) + 255) / 256 * 256;
}

/* The flash path runs unless a->flash is OFF, the shape is outside its list,
 * the step is too small to hold a run of FLASH_MIN_RUN, its carve of the
 * scratch would leave the split path without room for a token, or s is being
 * captured into a CUDA graph: the backend captures decode steps only (one
 * token per sequence, never a run), where the run search would add two
 * launches per layer to every replay. */
static bool flash_wanted(const struct qc_cuda_paged_attn_args *a, cudaStream_t s)
{
	cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
	if (a->flash == QC_CUDA_ATTN_FLASH_OFF || a->old_ctx || !a->d_ws || ((uintptr_t)a->d_ws & 15) ||
	    a->n_tok < FLASH_MIN_RUN ||
	    cudaStreamIsCapturing(s, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone)
		return false;
	if (!qc_cuda_flash_attn_shape_ok(a->hd, a->n_head, a->n_head_kv)) {
		QC_WARN_ONCE("paged_attn: no flash prefill kernel for head_dim %d with %d / %d heads; prefill runs "
			     "split-K", a->hd, a->n_head, a->n_head_kv);
		return false;
	}
	const uint64_t need = flash_done_bytes(a->n_tok) + qc_cuda_flash_attn_ws_bytes(a->n_tok);
	const uint64_t split1 = qc_cuda_paged_attn_ws_bytes(1, a->n_head, a->hd, a->max_ctx);
	if (a->ws_bytes >= need && (a->ws_bytes - need >= split1 || a->ws_bytes < split1))
		return true;
	QC_WARN_ONCE("paged_attn: scratch of %llu bytes has no room for the flash prefill run list (%llu bytes); "
		     "prefill runs split-K", (unsigned long long)a->ws_bytes, (unsigned long long)need);
	return false;
}

extern "C" int qc_cuda_paged_attn(const struct qc_cuda_paged_attn_args *a, cudaStream_t s, struct qc_err *err)
{
	if (a->n_head < 1 || a->n_head_kv < 1 || a->n_head % a->n_head_kv || a->hd < 1 || a->hd > MAX_HD || a->n_tok < 0 ||
	    a->max_ctx < 1 || a->block_tokens < 1 || a->n_tok > INT32_MAX || a->n_head > 65535)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "paged_attn: %lld tokens, %d heads / %d kv heads of %d, max_ctx %d",
				  (long long)a->n_tok, a->n_head, a->n_head_kv, a->hd, a->max_ctx);
	if (!a->d_pool == !a->d_pool8 || !a->d_pool8 != !a->d_pool8_exp)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "paged_attn: give either the binary16 pool or the fp8 pool with its exponents");
	if (a->fuse_rope) {
		const struct qc_cuda_rope_kv_args *k = &a->rope_kv;
		if (!a->old_ctx || k->d_pool != a->d_pool || k->d_pool8 != a->d_pool8 ||
		    k->d_pool8_exp != a->d_pool8_exp || k->n_head != a->n_head ||
		    k->n_head_kv != a->n_head_kv || k->rope.hd != a->hd || k->rope.n_tok != a->n_tok ||
		    k->layer != a->layer || k->n_layer != a->n_layer || k->block_tokens != a->block_tokens ||
		    !k->d_k || !k->d_v || !k->d_slots || k->rope.n_rot < 2 || k->rope.n_rot % 2 ||
		    k->rope.n_rot > a->hd || (k->rope.mode != QC_ROPE_NORM && k->rope.mode != QC_ROPE_NEOX))
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
					  "paged_attn: RoPE in the attention needs old_ctx and rope_kv arguments "
					  "of the same shape and pool (n_rot %d, mode %d)",
					  k->rope.n_rot, k->rope.mode);
	}
	struct qc_cuda_paged_attn_args b = *a; /* what the kernels below see: the scratch past the flash carve */
	const int32_t *skip = NULL;
	int rc;
	if (flash_wanted(a, s)) {
		const uint64_t nd = flash_done_bytes(a->n_tok), fw = qc_cuda_flash_attn_ws_bytes(a->n_tok);
		const struct qc_cuda_flash_attn_args f = {*a, FLASH_MIN_RUN, (int32_t *)a->d_ws, (char *)a->d_ws + nd, fw};
		if ((rc = qc_cuda_flash_attn(&f, s, err)))
			return rc;
		skip = f.d_done;
		b.d_ws = (char *)a->d_ws + nd + fw;
		b.ws_bytes = a->ws_bytes - nd - fw;
	}
	if (b.d_ws) {
		rc = qc_cuda_paged_attn_split(&b, skip, s, err);
		if (rc != QC_EUNSUPPORTED)
			return rc;
	}
	if (a->fuse_rope) { /* the kernel below reads rotated q and a stored row */
		QC_WARN_ONCE("paged_attn: no split-K attention for head_dim %d with %d / %d heads here; RoPE and the "
			     "K/V store run as a kernel of their own", a->hd, a->n_head, a->n_head_kv);
		if ((rc = a->d_pool8 ? qc_cuda_rope_kv_e4m3(&a->rope_kv, s, err) : qc_cuda_rope_kv(&a->rope_kv, s, err)))
			return rc;
	}
	const size_t smem = sizeof(float) * ((size_t)a->hd + (size_t)a->max_ctx + (THREADS / 32) * (size_t)a->hd);
	int dev, max_smem;
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
	void (*const one)(const struct qc_cuda_paged_attn_args, const int32_t *) =
		a->d_pool8 ? paged_attn_kernel<kv_fp8> : paged_attn_kernel<kv_f16>;
	if (smem > 48 * 1024 &&
	    (rc = qc_cuda_check(cudaFuncSetAttribute(one, cudaFuncAttributeMaxDynamicSharedMemorySize,
						     (int)smem), "cudaFuncSetAttribute(paged_attn)", err)))
		return rc;
	(void)qc_launch(one, dim3((unsigned)a->n_tok, (unsigned)a->n_head), dim3(THREADS), smem, s, *a, skip);
	return qc_cuda_check(cudaGetLastError(), "paged_attn_kernel", err);
}
