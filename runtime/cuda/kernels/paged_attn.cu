/* paged_attn.cu — causal attention of each planned token over its sequence's
 * cached K/V, read only through the plan's block tables (decode and prefill).
 *
 * One block per (token, head): q in shared memory, the pos + 1 scores in
 * shared memory (max_ctx floats; warps over positions, lanes over dims), a
 * block max / exp / sum softmax, then P V with warps over positions again and
 * their partial rows summed in shared memory (fixed order: batch-invariant).
 * With scratch (d_ws) the split-K path of paged_attn_split.cuh runs instead:
 * decode steps and small batches, any context length.
 * Prefill: with scratch, the tokens of runs of FLASH_MIN_RUN+ consecutive
 * positions of one sequence go to flash_attn.cu first (run list and done flags
 * carved from the front of d_ws, found on the device); the kernels here skip
 * them (not while s is captured into a graph: decode steps). a->flash OFF
 * (the backend's QC_CUDA_FLASH=0) turns that off (then a token's result never depends on how its prompt was
 * chunked).
 * GQA: head h reads kv head h / (n_head / n_head_kv). K/V are fp16, math fp32.
 * Reference: runtime/ops/paged_attn.c; vLLM paged_attention v1 (facts only).
 */
#include "paged_attn.h"
#include "pdl.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block_reduce.cuh"
#include "flash_attn.h"
#include "paged_attn_split.cuh"

#define THREADS 256
#define PW 4       /* positions per warp step */
#define MAX_HD 256 /* head dims a lane-strided register row holds */
#define FLASH_MIN_RUN 16 /* shorter runs (decode tokens) keep the kernels of this file */

static __device__ __forceinline__ const __half *kv_row(const struct qc_cuda_paged_attn_args &a,
						       const int32_t *table, int32_t j, int which, int kvh)
{
	const int64_t b = table[j / a.block_tokens], o = j % a.block_tokens;
	const int64_t kv_dim = (int64_t)a.n_head_kv * a.hd;
	return (const __half *)a.d_pool + (((b * a.n_layer + a.layer) * 2 + which) * a.block_tokens + o) * kv_dim +
	       (int64_t)kvh * a.hd;
}

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


#define ST 128 /* threads of a split block */
#define TG 8   /* lanes per position in the score pass */

/* out[h] of token t = merge of its ns chunks in chunk order: sum_s e^(m_s - M) o_s /
 * sum_s e^(m_s - M) l_s; threads tid, tid + nth, ... take the dimensions. Read through
 * L2 (__ldcg): the split kernel's last block merges chunks other blocks wrote. */
static __device__ void merge_head(const struct qc_cuda_paged_attn_args &a, int64_t t, int h, int ns, int32_t n_split,
				  const float *part_o, const float *part_ml, int tid, int nth)
{
	float *out = a.d_out + (t * a.n_head + h) * (int64_t)a.hd;
	const float *ml = part_ml + (t * a.n_head + h) * (int64_t)n_split * 2;
	const float *po = part_o + (t * a.n_head + h) * (int64_t)n_split * a.hd;
	float M = -INFINITY;
	for (int s = 0; s < ns; s++)
		M = fmaxf(M, __ldcg(&ml[2 * s]));
	float L = 0.0f;
	for (int s = 0; s < ns; s++)
		L += expf(__ldcg(&ml[2 * s]) - M) * __ldcg(&ml[2 * s + 1]);
	const float inv = 1.0f / L;
	for (int d = tid; d < a.hd; d += nth) {
		float r = 0.0f;
		for (int s = 0; s < ns; s++)
			r = fmaf(expf(__ldcg(&ml[2 * s]) - M), __ldcg(&po[(int64_t)s * a.hd + d]), r);
		out[d] = r * inv;
	}
}

/* Scores, softmax and unnormalized P V of one (token, K/V head, chunk); with
 * counters (flags), the chunk that finishes last merges the (token, K/V head). */
static __global__ void __launch_bounds__(ST) attn_split_kernel(const struct qc_cuda_paged_attn_args a,
							       int32_t chunk_max, int32_t n_split, float *part_o,
							       float *part_ml, const int32_t *skip, uint32_t *flags)
{
	qc_pdl_enter();
	extern __shared__ float sm[];
	const int64_t t = blockIdx.x;
	if (skip && skip[t])
		return;
	const int kvh = blockIdx.y, sp = blockIdx.z;
	const int G = a.n_head / a.n_head_kv, hd = a.hd;
	/* (G, hd) scaled q, (G, chunk_max) scores then weights, (ST / (hd / 2), G, hd) P V partials */
	float *qs = sm, *sc = sm + G * hd, *red = sc + G * chunk_max;
	const int32_t n_ctx = a.d_pos[t] + 1;
	const int32_t chunk = n_ctx <= a.max_ctx ? qc_attn_chunk(n_ctx) : 0, j0 = sp * chunk;
	const int32_t j1 = n_ctx < j0 + chunk ? n_ctx : j0 + chunk;
	if (flags && n_ctx > a.max_ctx && sp == 0) { /* broken contract: NaN out, as the merge kernel */
		for (int i = threadIdx.x; i < G * hd; i += ST)
			a.d_out[(t * a.n_head + (int64_t)kvh * G + i / hd) * hd + i % hd] = __int_as_float(0x7fc00000);
		return;
	}
	if (n_ctx > a.max_ctx || j0 >= n_ctx)
		return; /* the merge reads only the chunks a token has (and NaNs a broken one) */
	const int32_t *table = a.d_tables + (int64_t)a.d_tok_seq[t] * a.table_stride;
	const int64_t q_dim = (int64_t)a.n_head * hd;
	for (int i = threadIdx.x; i < G * hd; i += ST)
		qs[i] = a.d_q[t * q_dim + ((int64_t)kvh * G + i / hd) * hd + i % hd] * a.scale;
	__syncthreads();

	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = lane & (TG - 1);
	const int nvec = hd / 8; /* 16-byte vectors per row */
	for (int32_t jb = j0 + warp * (32 / TG); jb < j1; jb += (ST / 32) * (32 / TG)) {
		const int32_t j = jb + lane / TG;
		const bool ok = j < j1;
		uint4 kv[4]; /* hd <= 256: at most 32 vectors / 8 lanes */
		int nv = 0;
		if (ok) {
			const uint4 *k = (const uint4 *)kv_row(a, table, j, 0, kvh);
#pragma unroll
			for (int u = 0; u < 4; u++)
				if (sub + TG * u < nvec)
					kv[nv++] = k[sub + TG * u];
		}
		for (int g = 0; g < G; g++) {
			float s = 0.0f;
			for (int u = 0; u < nv; u++) {
				const __half2 *h2 = (const __half2 *)&kv[u];
				const float *qv = qs + g * hd + (sub + TG * u) * 8;
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const float2 f = __half22float2(h2[e]);
					s = fmaf(qv[2 * e], f.x, s);
					s = fmaf(qv[2 * e + 1], f.y, s);
				}
			}
			s += __shfl_xor_sync(0xffffffffu, s, 4);
			s += __shfl_xor_sync(0xffffffffu, s, 2);
			s += __shfl_xor_sync(0xffffffffu, s, 1);
			if (ok && sub == 0)
				sc[g * chunk_max + (j - j0)] = s;
		}
	}
	__syncthreads();
	/* per head: chunk max and sum of exp; warp w takes heads w, w + 4, ... */
	const int32_t n = j1 - j0;
	for (int g = warp; g < G; g += ST / 32) {
		float *row = sc + g * chunk_max;
		float mx = -INFINITY;
		for (int32_t j = lane; j < n; j += 32)
			mx = fmaxf(mx, row[j]);
		for (int off = 16; off > 0; off >>= 1)
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
		float sum = 0.0f;
		for (int32_t j = lane; j < n; j += 32) {
			const float e = expf(row[j] - mx);
			row[j] = e;
			sum += e;
		}
		for (int off = 16; off > 0; off >>= 1)
			sum += __shfl_xor_sync(0xffffffffu, sum, off);
		if (lane == 0) {
			const int64_t pi = ((t * a.n_head + (int64_t)kvh * G + g) * n_split + sp) * 2;
			part_ml[pi] = mx;
			part_ml[pi + 1] = sum;
		}
	}
	__syncthreads();
	/* P V: thread i owns dimension pair i % (hd / 2) of every head in the group
	 * for the positions of group i / (hd / 2); four V rows in flight per step */
	const int h2 = hd / 2, ng = ST / h2, grp = threadIdx.x / h2, d2 = threadIdx.x % h2;
	float acc[QC_ATTN_GROUP_MAX][2];
	for (int g = 0; g < G; g++)
		acc[g][0] = acc[g][1] = 0.0f;
	if (grp < ng) {
		int32_t j = grp;
		for (; j + 3 * ng < n; j += 4 * ng) {
			float2 f[4];
#pragma unroll
			for (int u = 0; u < 4; u++)
				f[u] = __half22float2(((const __half2 *)kv_row(a, table, j0 + j + u * ng, 1, kvh))[d2]);
#pragma unroll
			for (int u = 0; u < 4; u++)
				for (int g = 0; g < G; g++) {
					const float p = sc[g * chunk_max + j + u * ng];
					acc[g][0] = fmaf(p, f[u].x, acc[g][0]);
					acc[g][1] = fmaf(p, f[u].y, acc[g][1]);
				}
		}
		for (; j < n; j += ng) {
			const float2 f = __half22float2(((const __half2 *)kv_row(a, table, j0 + j, 1, kvh))[d2]);
			for (int g = 0; g < G; g++) {
				const float p = sc[g * chunk_max + j];
				acc[g][0] = fmaf(p, f.x, acc[g][0]);
				acc[g][1] = fmaf(p, f.y, acc[g][1]);
			}
		}
		if (grp > 0)
			for (int g = 0; g < G; g++) {
				red[(grp * G + g) * hd + 2 * d2] = acc[g][0];
				red[(grp * G + g) * hd + 2 * d2 + 1] = acc[g][1];
			}
	}
	__syncthreads();
	if (grp == 0)
		for (int g = 0; g < G; g++) {
			for (int r = 1; r < ng; r++) {
				acc[g][0] += red[(r * G + g) * hd + 2 * d2];
				acc[g][1] += red[(r * G + g) * hd + 2 * d2 + 1];
			}
			float *o = part_o + ((t * a.n_head + (int64_t)kvh * G + g) * n_split + sp) * hd;
			o[2 * d2] = acc[g][0];
			o[2 * d2 + 1] = acc[g][1];
		}
	if (!flags)
		return;
	/* every thread's chunk results visible device-wide, then the block counts itself */
	__shared__ int last;
	const int ns = qc_attn_n_chunks(n_ctx);
	__threadfence();
	__syncthreads();
	uint32_t *flag = &flags[t * a.n_head_kv + kvh];
	if (threadIdx.x == 0)
		last = atomicAdd(flag, 1u) == (uint32_t)ns - 1;
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	for (int g = warp; g < G; g += ST / 32)
		merge_head(a, t, kvh * G + g, ns, n_split, part_o, part_ml, lane, 32);
	if (threadIdx.x == 0)
		*flag = 0u; /* ready for the next launch */
}

/* out = merge of a token's chunks in chunk order: sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s. */
static __global__ void attn_merge_kernel(const struct qc_cuda_paged_attn_args a, int32_t n_split,
					 const float *part_o, const float *part_ml, const int32_t *skip)
{
	qc_pdl_enter();
	const int64_t t = blockIdx.x;
	if (skip && skip[t])
		return;
	const int h = blockIdx.y;
	const int32_t n_ctx = a.d_pos[t] + 1;
	float *out = a.d_out + (t * a.n_head + h) * (int64_t)a.hd;
	if (n_ctx > a.max_ctx) { /* broken contract: NaN out, as the one-block kernel does */
		for (int d = threadIdx.x; d < a.hd; d += blockDim.x)
			out[d] = __int_as_float(0x7fc00000);
		return;
	}
	merge_head(a, t, h, qc_attn_n_chunks(n_ctx), n_split, part_o, part_ml, threadIdx.x, blockDim.x);
}

extern "C" uint64_t qc_cuda_paged_attn_ws_bytes(int64_t n_tok, int32_t n_head, int32_t hd, int32_t max_ctx)
{
	if (n_tok < 1 || n_head < 1 || hd < 1 || max_ctx < 1)
		return 0;
	return (uint64_t)n_tok * (uint64_t)n_head * (uint64_t)qc_attn_splits(max_ctx) * ((uint64_t)hd + 2) *
	       sizeof(float);
}

/* The split path, or QC_EUNSUPPORTED when this shape is outside its limits.
 * Tokens with skip[t] set (NULL: none) are left alone. */
static int paged_attn_split(const struct qc_cuda_paged_attn_args *a, const int32_t *skip, cudaStream_t s,
			    struct qc_err *err)
{
	const int G = a->n_head / a->n_head_kv;
	/* shared memory and scratch sized for the longest chunk and the most chunks
	 * a token of up to max_ctx positions can have */
	const int32_t chunk_max = qc_attn_chunk(a->max_ctx), ns = qc_attn_splits(a->max_ctx);
	if (a->hd % 8 || a->hd > 256 || G > QC_ATTN_GROUP_MAX ||
	    a->ws_bytes < qc_cuda_paged_attn_ws_bytes(1, a->n_head, a->hd, a->max_ctx) || a->n_head_kv > 65535 ||
	    ns > 65535 || a->n_tok > INT32_MAX)
		return QC_EUNSUPPORTED;
	const size_t smem = sizeof(float) * ((size_t)G * (size_t)a->hd + (size_t)G * (size_t)chunk_max +
					     (size_t)(ST / (a->hd / 2)) * (size_t)G * (size_t)a->hd);
	int dev, max_smem, rc;
	if ((rc = qc_cuda_check(cudaGetDevice(&dev), "cudaGetDevice", err)) ||
	    (rc = qc_cuda_check(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
				"cudaDeviceGetAttribute", err)))
		return rc;
	if (smem > (size_t)max_smem)
		return QC_EUNSUPPORTED;
	if (!a->n_tok)
		return QC_OK;
	if (smem > 48 * 1024 &&
	    (rc = qc_cuda_check(cudaFuncSetAttribute(attn_split_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
						     (int)smem), "cudaFuncSetAttribute(attn_split)", err)))
		return rc;
	/* tokens per launch: as many as the scratch holds (a token's result does not
	 * depend on which launch it is in) */
	const uint64_t per_tok = qc_cuda_paged_attn_ws_bytes(1, a->n_head, a->hd, a->max_ctx);
	const int64_t slice = (int64_t)(a->ws_bytes / per_tok);
	for (int64_t t0 = 0; t0 < a->n_tok; t0 += slice) {
		struct qc_cuda_paged_attn_args b = *a;
		b.n_tok = a->n_tok - t0 < slice ? a->n_tok - t0 : slice;
		b.d_q = a->d_q + t0 * (int64_t)a->n_head * a->hd;
		b.d_out = a->d_out + t0 * (int64_t)a->n_head * a->hd;
		b.d_pos = a->d_pos + t0;
		b.d_tok_seq = a->d_tok_seq + t0;
		float *part_o = (float *)a->d_ws;
		float *part_ml = part_o + (size_t)b.n_tok * (size_t)a->n_head * (size_t)ns * (size_t)a->hd;
		/* the merge in the split kernel when the counters cover this launch */
		uint32_t *flags = a->d_flags && b.n_tok * a->n_head_kv <= a->n_flags ? a->d_flags : NULL;
		(void)qc_launch(attn_split_kernel, dim3((unsigned)b.n_tok, (unsigned)a->n_head_kv, (unsigned)ns), dim3(ST),
				smem, s, b, chunk_max, ns, part_o, part_ml, skip ? skip + t0 : NULL, flags);
		if ((rc = qc_cuda_check(cudaGetLastError(), "attn_split_kernel", err)))
			return rc;
		if (flags)
			continue;
		(void)qc_launch(attn_merge_kernel, dim3((unsigned)b.n_tok, (unsigned)a->n_head), dim3(128), 0, s, b, ns, part_o, part_ml,
												 skip ? skip + t0 : NULL);
		if ((rc = qc_cuda_check(cudaGetLastError(), "attn_merge_kernel", err)))
			return rc;
	}
	return QC_OK;
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
	if (a->flash == QC_CUDA_ATTN_FLASH_OFF || !a->d_ws || ((uintptr_t)a->d_ws & 15) || a->n_tok < FLASH_MIN_RUN ||
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
		rc = paged_attn_split(&b, skip, s, err);
		if (rc != QC_EUNSUPPORTED)
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
	if (smem > 48 * 1024 &&
	    (rc = qc_cuda_check(cudaFuncSetAttribute(paged_attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
						     (int)smem), "cudaFuncSetAttribute(paged_attn)", err)))
		return rc;
	(void)qc_launch(paged_attn_kernel, dim3((unsigned)a->n_tok, (unsigned)a->n_head), dim3(THREADS), smem, s, *a, skip);
	return qc_cuda_check(cudaGetLastError(), "paged_attn_kernel", err);
}
