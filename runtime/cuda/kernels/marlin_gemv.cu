/* marlin_gemv.cu — y = W x for a few float activation rows, W in a marlin layout
 * (docs/layout-marlin.md), without tensor cores: the decode-step matmul.
 *
 * Why not the marlin GEMM at m = 1: it rounds x to fp16 in a separate kernel,
 * pads the token tile to 16 rows, and is bound by dequant + mma issue (about
 * 40% of HBM bandwidth on the big shapes, 8-26% on the 4096-wide ones). Here a
 * warp streams one stripe's code tiles straight from global memory (lane l
 * reads bytes 16l..16l+15 of each 512-byte tile: fully coalesced), decodes the
 * 8 (i4) or 4 (i8) columns x 4 k positions its fragment slot holds, and dots
 * them with float x from shared memory; a group's sum is scaled once
 * (d·Σ(q−8)x, d·Σqx, or s·Σqx + o·Σx for i4z and i8z (q signed there), float
 * throughout: no fp16 rounding of weights or activations).
 *
 * Partition: a block = WARPS warps on one stripe; warp w takes KT_WARP
 * consecutive k16 tiles; the block's warps are summed in shared memory in warp
 * order, and when K needs more than one block per stripe the blocks' partials
 * go to the scratch and a second kernel sums them in block order. The partition
 * depends on (n, k) only and each row has its own accumulators, so a row's
 * result never depends on the other rows (batched == alone, bit for bit).
 * In-kernel sum (the caller passes arrival counters, d_flags): each block adds
 * one to its stripe's counter after its partials are out; the block that
 * arrives last sums the stripe's partials in block order, exactly as the second
 * kernel would (same bits), and re-zeroes the counter. One kernel per matmul
 * instead of two: a decode step is bound by its kernel count (docs/perf-notes.md).
 * Fusions (matmul_dispatch.h): several matrices on the same x share a launch
 * (their stripes side by side along the grid, each block finds its matrix), x2 makes the staged activations silu(x) * x2,
 * norm_w makes them RMSNorm(x) * norm_w (each block sums the squares of its rows
 * in a fixed order: deterministic and batch-invariant, not the rms_norm kernel's
 * bits), acc makes the final store y += (silu.cuh and add.cu's arithmetic: same bits as
 * the separate kernels).
 * Programmatic dependent launch (pdl.cuh): the weight tiles and scales are
 * loaded before qc_pdl_wait, so they stream while the previous kernel drains.
 * Rows: whatever the backend sends (the layout table's GEMV column: one row of
 * an int4 layout, and MoE rows, an expert per row, one row per block; more with
 * QC_MARLIN_GEMV_ROWS, docs/cuda.md); ROWS at a time share a block's weight loads.
 * This file never hands a call to another kernel: the table decides.
 * Reference: runtime/ops/marlin_gemm.c (the F64 truth of the layout's values).
 */
#include "marlin_gemm.cuh"
#include "matmul_dispatch.h"
#include "pdl.cuh"
#include "silu.cuh"

extern "C" {
#include "layout_marlin.h"
}

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace {

constexpr int WARPS = 8;
constexpr int ROWS = 4;                     /* activation rows per launch (more: register spills) */
constexpr int TILE = 512;                   /* bytes of one k16 tile of a stripe */

struct gparams {
	uint64_t mat_stride, stripe_bytes;
	const int32_t *expert;     /* (rows) or NULL */
	const float *x;
	int64_t ldx;
	int32_t x_div;
	/* matrices side by side along n (QC_MM_FUSE_MULTI; one without it): matrix m
	 * has columns col0[m] .. col0[m + 1] - 1 of the launch, its weights at wm[m],
	 * its outputs at ym[m] with row stride ldym[m] */
	int n_mats;
	const uint8_t *wm[1 + QC_CUDA_MM_MORE];
	float *ym[1 + QC_CUDA_MM_MORE];
	int64_t ldym[1 + QC_CUDA_MM_MORE];
	int col0[2 + QC_CUDA_MM_MORE];
	float *ws;                 /* (kb, rows, n) partials when kb > 1 */
	uint32_t *flags;           /* (rows, n / S) arrival counters, or NULL: marlin_gemv_reduce sums */
	const float *x2;           /* NULL, or x is silu(x) * x2 (the SwiGLU product, fused into the load) */
	int acc;                   /* y += (the residual add, fused into the store) */
	const float *norm_w;       /* NULL, or x is RMSNorm(x) * norm_w (every block sums its rows' squares) */
	float norm_eps;
	int64_t r0;                /* first row of this launch */
	int nr, n, k, kb;
};

__device__ __forceinline__ float h2f(uint32_t w, int hi)
{
	return __half2float(__ushort_as_half((unsigned short)(hi ? w >> 16 : w & 0xffff)));
}

/* Code byte -> float without an int-to-float conversion (a quarter-rate
 * instruction that bound the first version): the byte becomes the low mantissa
 * byte of 2^23 (one byte permute), and the subtraction of 2^23 + zero is exact. */
__device__ __forceinline__ float byte_f(uint32_t src, int b)
{
	return __int_as_float((int)__byte_perm(src, 0x4b000000u, 0x7540u + (unsigned)b));
}

/* The four weights (code - zero) of n8 tile j at k = 2c, 2c+1, 2c+8, 2c+9.
 * i4: word j/2 holds tiles j (nibbles p = 0, 1, 4, 5 of the word shifted by
 * 8·(j%2)); even nibbles come from lo = w & 0x0f0f0f0f, odd ones from
 * hi = (w >> 4) & 0x0f0f0f0f. i8: word j, bytes k = 2c, 2c+1, 2c+8, 2c+9,
 * made unsigned by flipping the sign bits (zero 128). */
template <int BITS, int Z> __device__ __forceinline__ void weights(const uint32_t lo[4], const uint32_t hi[4], int j,
								   float f[4])
{
	constexpr float M = 8388608.0f + (float)Z;
	if constexpr (BITS == 4) {
		const int w = j / 2, b = j % 2;
		f[0] = byte_f(lo[w], b) - M;     /* nibble p = 2b:     k = 2c */
		f[1] = byte_f(lo[w], b + 2) - M; /* nibble p = 2b + 4: k = 2c + 1 */
		f[2] = byte_f(hi[w], b) - M;     /* nibble p = 2b + 1: k = 2c + 8 */
		f[3] = byte_f(hi[w], b + 2) - M; /* nibble p = 2b + 5: k = 2c + 9 */
	} else {
		f[0] = byte_f(lo[j], 0) - M;
		f[1] = byte_f(lo[j], 1) - M;
		f[2] = byte_f(lo[j], 2) - M;
		f[3] = byte_f(lo[j], 3) - M;
	}
}

/* The matrix holding launch column n. */
__device__ __forceinline__ int mat_of(const gparams &p, int64_t n)
{
	int m = 0;
	while (m + 1 < p.n_mats && n >= p.col0[m + 1])
		m++;
	return m;
}

/* y = s, or y += s (one float add: the residual add kernel's bits), for launch row
 * `row` and launch column n of matrix m */
__device__ __forceinline__ void store(const gparams &p, int m, int64_t row, int64_t n, float s)
{
	float *y = p.ym[m] + (p.r0 + row) * p.ldym[m] + (n - p.col0[m]);
	if (p.acc)
		*y += s;
	else
		*y = s;
}

/* KT_WARP: k16 tiles per warp (an even number: whole 32-k groups) */
template <int BITS, bool ZP, int G, int KT_WARP>
__global__ void __launch_bounds__(32 * WARPS) marlin_gemv_kernel(const gparams p)
{
	constexpr int KT_BLOCK = WARPS * KT_WARP;
	constexpr int S = BITS == 4 ? 64 : 32; /* stripe width */
	constexpr int NJ = S / 8;              /* n8 tiles per stripe = columns per lane */
	__shared__ float xs[G][KT_BLOCK * 16];
	__shared__ float red[WARPS][G][S];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = lane / 4, c = lane % 4;
	const int stripe = blockIdx.x, kb = blockIdx.y;
	const int rb = G == 1 ? blockIdx.z : 0; /* MoE: this block's row */
	const int nr = G == 1 ? 1 : p.nr;
	const int64_t row0 = p.r0 + rb;
	if (p.expert) /* the routing kernel wrote it */
		qc_pdl_wait();
	const int mat = mat_of(p, (int64_t)stripe * S);
	const uint8_t *w = p.wm[mat] + (p.expert ? (uint64_t)p.expert[row0] * p.mat_stride : 0) +
			   (uint64_t)(stripe - p.col0[mat] / S) * p.stripe_bytes;
	const int KT = p.k / 16, G32 = p.k / 32;
	const int kt0 = kb * KT_BLOCK, kt_end = min(KT, kt0 + KT_BLOCK);
	__shared__ bool last;
	qc_pdl_trigger();

	const int wt0 = kt0 + warp * KT_WARP;
	const uint8_t *sc = w + (size_t)KT * TILE; /* scales, then (i4z/i8z) offsets */
	/* the warp's code tiles and its groups' scales in flight before anything waits */
	uint4 v[KT_WARP], sv[KT_WARP / 2], ov[KT_WARP / 2];
#pragma unroll
	for (int u = 0; u < KT_WARP; u++)
		if (wt0 + u < kt_end)
			v[u] = __ldg((const uint4 *)(w + (size_t)(wt0 + u) * TILE) + lane);
#pragma unroll
	for (int gg = 0; gg < KT_WARP / 2; gg++) {
		const int g = wt0 / 2 + gg;
		if (2 * g >= kt_end)
			break;
		if constexpr (BITS == 4) {
			sv[gg] = __ldg((const uint4 *)(sc + 2 * ((size_t)g * S + NJ * r)));
			if constexpr (ZP)
				ov[gg] = __ldg((const uint4 *)(sc + 2 * ((size_t)G32 * S + (size_t)g * S + NJ * r)));
		} else {
			const uint2 s2 = __ldg((const uint2 *)(sc + 2 * ((size_t)g * S + NJ * r)));
			sv[gg] = make_uint4(s2.x, s2.y, 0, 0);
			if constexpr (ZP) {
				const uint2 o2 = __ldg((const uint2 *)(sc + 2 * ((size_t)G32 * S + (size_t)g * S + NJ * r)));
				ov[gg] = make_uint4(o2.x, o2.y, 0, 0);
			}
		}
	}
	qc_pdl_wait(); /* everything below reads or writes what earlier kernels touch */
	/* RMSNorm: each block sums its rows' squares over the whole row, in a fixed
	 * order (thread strides, a shuffle tree, the warps in order), so every block
	 * and every batch gets the same scale for a row */
	__shared__ float nscale[G];
	if (p.norm_w) {
		__shared__ float nred[WARPS][G];
#pragma unroll
		for (int t = 0; t < G; t++) {
			float ss = 0.0f;
			if (t < nr) {
				const float *xr = p.x + ((row0 + t) / p.x_div) * p.ldx;
				for (int i = threadIdx.x; i < p.k; i += 32 * WARPS)
					ss = fmaf(xr[i], xr[i], ss);
			}
#pragma unroll
			for (int off = 16; off > 0; off >>= 1)
				ss += __shfl_xor_sync(0xffffffffu, ss, off);
			if (lane == 0)
				nred[warp][t] = ss;
		}
		__syncthreads();
		if (threadIdx.x < G) {
			float ss = 0.0f;
			for (int ww = 0; ww < WARPS; ww++)
				ss += nred[ww][threadIdx.x];
			nscale[threadIdx.x] = 1.0f / sqrtf(ss / (float)p.k + p.norm_eps);
		}
		__syncthreads();
	}
	/* x of this block's k range, every row */
	for (int i = threadIdx.x; i < G * KT_BLOCK * 16; i += 32 * WARPS) {
		const int t = i / (KT_BLOCK * 16), kk = i % (KT_BLOCK * 16);
		const int64_t kg = (int64_t)kt0 * 16 + kk;
		const int64_t xi = ((row0 + t) / p.x_div) * p.ldx + kg;
		float xv = 0.0f;
		if (t < nr && kg < p.k) {
			xv = p.x2 ? qc_silu_mul(p.x[xi], p.x2[xi]) : p.x[xi];
			if (p.norm_w)
				xv = (xv * nscale[t]) * p.norm_w[kg]; /* rms_norm.cu's rounding */
		}
		xs[t][kk] = xv;
	}
	__syncthreads();

	float acc[NJ][G];
#pragma unroll
	for (int j = 0; j < NJ; j++)
#pragma unroll
		for (int t = 0; t < G; t++)
			acc[j][t] = 0.0f;
#pragma unroll
	for (int gg = 0; gg < KT_WARP / 2; gg++) {
		const int kt = wt0 + 2 * gg;
		if (kt >= kt_end)
			break;
		float d[NJ], o[NJ];
		const uint32_t sw[4] = {sv[gg].x, sv[gg].y, sv[gg].z, sv[gg].w};
#pragma unroll
		for (int j = 0; j < NJ; j++)
			d[j] = h2f(sw[j / 2], j % 2);
		if constexpr (ZP) {
			const uint32_t ow[4] = {ov[gg].x, ov[gg].y, ov[gg].z, ov[gg].w};
#pragma unroll
			for (int j = 0; j < NJ; j++)
				o[j] = h2f(ow[j / 2], j % 2);
		}
	float gs[NJ][G], xsum[G];
#pragma unroll
		for (int t = 0; t < G; t++) {
			xsum[t] = 0.0f;
#pragma unroll
			for (int j = 0; j < NJ; j++)
				gs[j][t] = 0.0f;
		}
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const int kl = (kt + h - kt0) * 16; /* tile's first k within the block */
			const uint4 vv = v[2 * gg + h];
			const uint32_t wd[4] = {vv.x, vv.y, vv.z, vv.w};
			uint32_t lo[4], hi[4];
#pragma unroll
			for (int i = 0; i < 4; i++) {
				lo[i] = BITS == 4 ? wd[i] & 0x0f0f0f0fu : wd[i] ^ 0x80808080u;
				hi[i] = BITS == 4 ? (wd[i] >> 4) & 0x0f0f0f0fu : 0u;
			}
			float2 xa[G], xb[G];
#pragma unroll
			for (int t = 0; t < G; t++) {
				xa[t] = *(const float2 *)&xs[t][kl + 2 * c];
				xb[t] = *(const float2 *)&xs[t][kl + 2 * c + 8];
				if constexpr (ZP)
					xsum[t] += (xa[t].x + xa[t].y) + (xb[t].x + xb[t].y);
			}
#pragma unroll
			for (int j = 0; j < NJ; j++) {
				float f[4];
				weights<BITS, BITS == 8 ? 128 : (ZP ? 0 : 8)>(lo, hi, j, f);
#pragma unroll
				for (int t = 0; t < G; t++) {
					float s = gs[j][t];
					s = fmaf(f[0], xa[t].x, s);
					s = fmaf(f[1], xa[t].y, s);
					s = fmaf(f[2], xb[t].x, s);
					s = fmaf(f[3], xb[t].y, s);
					gs[j][t] = s;
				}
			}
		}
#pragma unroll
		for (int j = 0; j < NJ; j++)
#pragma unroll
			for (int t = 0; t < G; t++) {
				if constexpr (ZP)
					acc[j][t] = fmaf(o[j], xsum[t], fmaf(d[j], gs[j][t], acc[j][t]));
				else
					acc[j][t] = fmaf(d[j], gs[j][t], acc[j][t]);
			}
	}
	/* the four lanes of a column (same r, c = 0..3), then the warps in order */
#pragma unroll
	for (int j = 0; j < NJ; j++)
#pragma unroll
		for (int t = 0; t < G; t++) {
			float s = acc[j][t];
			s += __shfl_xor_sync(0xffffffffu, s, 1);
			s += __shfl_xor_sync(0xffffffffu, s, 2);
			if (c == 0)
				red[warp][t][8 * j + r] = s;
		}
	__syncthreads();
	for (int i = threadIdx.x; i < nr * S; i += 32 * WARPS) {
		const int t = i / S, col = i % S;
		float s = 0.0f;
		for (int ww = 0; ww < WARPS; ww++)
			s += red[ww][t][col];
		const int64_t n = (int64_t)stripe * S + col;
		const int64_t row = G == 1 ? rb : t; /* within this launch */
		if (p.kb == 1)
			store(p, mat, row, n, s);
		else
			p.ws[((int64_t)kb * p.nr + row) * p.n + n] = s;
	}
	if (p.kb == 1 || !p.flags)
		return;
	/* the last of the stripe's kb blocks sums them (the threadfence pattern: every
	 * thread's partials visible device-wide before the block counts itself) */
	__threadfence();
	__syncthreads();
	uint32_t *flag = &p.flags[(int64_t)rb * gridDim.x + stripe];
	if (threadIdx.x == 0)
		last = atomicAdd(flag, 1u) == (uint32_t)p.kb - 1;
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	for (int i = threadIdx.x; i < nr * S; i += 32 * WARPS) {
		const int t = i / S, col = i % S;
		const int64_t n = (int64_t)stripe * S + col;
		const int64_t row = G == 1 ? rb : t;
		float s = 0.0f;
		for (int b = 0; b < p.kb; b++) /* block order: marlin_gemv_reduce's sum */
			s += __ldcg(&p.ws[((int64_t)b * p.nr + row) * p.n + n]);
		store(p, mat, row, n, s);
	}
	if (threadIdx.x == 0)
		*flag = 0u; /* ready for the next launch (stream order, or its qc_pdl_wait) */
}

/* y[r][n] = sum over kb in order of ws[kb][r][n] */
__global__ void marlin_gemv_reduce(const gparams p)
{
	qc_pdl_enter();
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= (int64_t)p.nr * p.n)
		return;
	const int64_t row = i / p.n, n = i % p.n;
	float s = 0.0f;
	for (int b = 0; b < p.kb; b++)
		s += p.ws[((int64_t)b * p.nr + row) * p.n + n];
	store(p, mat_of(p, n), row, n, s);
}

/* k16 tiles per warp: 4 (512 k per block; measured a little faster than 8 on
 * every Llama-3-8B shape), 8 with QC_CUDA_GEMV_KT8 (the backend's
 * QC_MARLIN_GEMV_KTW=8, fixed for the process, so the partition stays
 * batch-invariant) */
int kt_warp(enum qc_cuda_gemv_kt kt)
{
	return kt == QC_CUDA_GEMV_KT8 ? 8 : 4;
}

int blocks_along_k(int64_t k, enum qc_cuda_gemv_kt kt)
{
	const int kb = WARPS * kt_warp(kt);
	return (int)((k / 16 + kb - 1) / kb);
}

template <int BITS, bool ZP, int KTW>
int launch(const gparams &p0, int64_t n_rows, uint64_t n_flags, cudaStream_t s, struct qc_err *err)
{
	constexpr int S = BITS == 4 ? 64 : 32;
	gparams p = p0;
	const dim3 block(32 * WARPS);
	for (int64_t r0 = 0; r0 < n_rows; r0 += ROWS) {
		p.r0 = r0;
		p.nr = (int)(n_rows - r0 < ROWS ? n_rows - r0 : ROWS);
		/* counters: one per (block row, stripe); too few, the reduce kernel */
		const uint64_t need = (uint64_t)(p.expert ? p.nr : 1) * (uint64_t)(p.n / S);
		p.flags = p0.flags && need <= n_flags ? p0.flags : NULL;
		cudaError_t e;
		if (p.expert)
			e = qc_launch(marlin_gemv_kernel<BITS, ZP, 1, KTW>,
				      dim3((unsigned)(p.n / S), (unsigned)p.kb, (unsigned)p.nr), block, 0, s, p);
		else if (p.nr == 1)
			e = qc_launch(marlin_gemv_kernel<BITS, ZP, 1, KTW>, dim3((unsigned)(p.n / S), (unsigned)p.kb, 1),
				      block, 0, s, p);
		else
			e = qc_launch(marlin_gemv_kernel<BITS, ZP, ROWS, KTW>,
				      dim3((unsigned)(p.n / S), (unsigned)p.kb, 1), block, 0, s, p);
		int rc = qc_cuda_check(e, "marlin_gemv_kernel", err);
		if (rc)
			return rc;
		if (p.kb > 1 && !p.flags) {
			const int64_t total = (int64_t)p.nr * p.n;
			if ((rc = qc_cuda_check(qc_launch(marlin_gemv_reduce, dim3((unsigned)((total + 255) / 256)),
							  dim3(256), 0, s, p),
						"marlin_gemv_reduce", err)))
				return rc;
		}
	}
	return QC_OK;
}

} /* namespace */

/* Scratch of the K partials: kb blocks along K x ROWS rows x n floats (none when
 * one block covers K). */
extern "C" uint64_t qc_cuda_marlin_gemv_ws(int64_t n_in, int64_t n_out, int64_t n_rows, enum qc_cuda_gemv_kt kt)
{
	const int kb = blocks_along_k(n_in, kt);
	const int64_t rows = n_rows < ROWS ? n_rows : ROWS;
	return kb > 1 ? (uint64_t)kb * (uint64_t)rows * (uint64_t)n_out * sizeof(float) : 0;
}

/* The table's scratch for every entry point (matmul_layouts.def). */
extern "C" uint64_t qc_cuda_marlin_ws(int64_t n_in, int64_t n_out, int64_t n_rows, const struct qc_cuda_mm_tuning *t)
{
	const uint64_t a = qc_cuda_marlin_mm_ws(n_in, n_out, n_rows, &t->rows);
	const uint64_t b = qc_cuda_marlin_gemv_ws(n_in, n_out, n_rows, t->gemv_kt);
	return a > b ? a : b;
}

extern "C" int qc_cuda_marlin_gemv(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err)
{
	if (qc_cuda_mm_check_fuse(a, QC_MM_FUSE_SILU | QC_MM_FUSE_ACC | QC_MM_FUSE_MULTI | QC_MM_FUSE_NORM, "marlin_gemv",
				  err))
		return QC_EUNSUPPORTED;
	if (a->d_norm_w && a->d_x2)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "marlin_gemv: RMSNorm and silu(x)*x2 together");
	if (a->n_rows == 0)
		return QC_OK;
	const int S = qc_marlin_stripe(a->layout);
	uint64_t row;
	if (S <= 0 || qc_marlin_row_bytes(a->layout, a->type, a->n_in, &row) != QC_OK || a->n_in % 32 ||
	    a->n_out % S || a->n_in > INT32_MAX || a->n_out > INT32_MAX || a->x_div < 1 || a->n_rows < 0 ||
	    (a->d_expert && a->mat_stride % 16) || (uintptr_t)a->d_w % 16 || (a->n_out / S) > INT32_MAX)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "marlin_gemv: %s %s n_in %lld, n_out %lld, x_div %d not supported",
				  qc_layout_name(a->layout), qc_types[a->type].name, (long long)a->n_in,
				  (long long)a->n_out, a->x_div);
	bool more_ok = a->n_more >= 0 && a->n_more <= QC_CUDA_MM_MORE && (!a->n_more || !a->d_expert);
	int64_t cols = a->n_out;
	for (int m = 0; more_ok && m < a->n_more; m++) {
		more_ok = a->more[m].n_out > 0 && a->more[m].n_out % S == 0 && (uintptr_t)a->more[m].d_w % 16 == 0;
		cols += a->more[m].n_out;
	}
	if (!more_ok || cols > INT32_MAX)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "marlin_gemv: %d more matrices (%lld columns in all) not supported", a->n_more,
				  (long long)cols);
	gparams p = {};
	p.n_mats = 1 + a->n_more;
	p.wm[0] = a->d_w;
	p.ym[0] = a->d_y;
	p.ldym[0] = a->ldy;
	p.col0[0] = 0;
	cols = a->n_out;
	for (int m = 0; m < a->n_more; m++) {
		p.col0[1 + m] = (int)cols;
		p.wm[1 + m] = a->more[m].d_w;
		p.ym[1 + m] = a->more[m].d_y;
		p.ldym[1 + m] = a->more[m].ldy;
		cols += a->more[m].n_out;
	}
	p.col0[p.n_mats] = (int)cols;
	p.mat_stride = a->mat_stride;
	p.stripe_bytes = (uint64_t)S * row;
	p.expert = a->d_expert;
	p.x = a->d_x;
	p.ldx = a->ldx;
	p.x_div = a->x_div;
	p.n = (int)cols;
	p.k = (int)a->n_in;
	p.kb = blocks_along_k(a->n_in, a->gemv_kt);
	p.ws = (float *)a->d_ws;
	p.flags = a->d_flags;
	p.x2 = a->d_x2;
	p.acc = a->accumulate != 0;
	p.norm_w = a->d_norm_w;
	p.norm_eps = a->norm_eps;
	const uint64_t nf = a->d_flags && a->n_flags > 0 ? (uint64_t)a->n_flags : 0;
	const uint64_t need = qc_cuda_marlin_gemv_ws(a->n_in, cols, a->n_rows, a->gemv_kt);
	if (need && (!a->d_ws || a->ws_bytes < need))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "marlin_gemv: n_in %lld, n_out %lld needs %llu scratch bytes, got %llu",
				  (long long)a->n_in, (long long)cols, (unsigned long long)need,
				  (unsigned long long)a->ws_bytes);
	/* the (bits, offsets) pair picks the instantiation; qc_marlin_stripe above
	 * refused every non-marlin id */
	const bool k8 = kt_warp(a->gemv_kt) == 8, zp = qc_marlin_has_offsets(a->layout);
	if (qc_marlin_bits(a->layout) == 4)
		return zp ? (k8 ? launch<4, true, 8>(p, a->n_rows, nf, s, err) : launch<4, true, 4>(p, a->n_rows, nf, s, err))
			  : (k8 ? launch<4, false, 8>(p, a->n_rows, nf, s, err) : launch<4, false, 4>(p, a->n_rows, nf, s, err));
	return zp ? (k8 ? launch<8, true, 8>(p, a->n_rows, nf, s, err) : launch<8, true, 4>(p, a->n_rows, nf, s, err))
		  : (k8 ? launch<8, false, 8>(p, a->n_rows, nf, s, err) : launch<8, false, 4>(p, a->n_rows, nf, s, err));
}
