/* marlin_gemv.cuh — what the two marlin decode GEMVs share (marlin_gemv.cu: a
 * block loads its tiles once and exits; marlin_gemv_stream.cu: a block streams a
 * long K range through a ring of loads in flight): the launch parameters, the
 * code-to-float decode, the activation staging (RMSNorm and silu·x2 folded in),
 * and the block's epilogue (warps summed in order, then the store, or the K
 * partials and the in-kernel sum by the stripe's last block).
 *
 * Why shared: both kernels must give the same bits for the same partition (the
 * backend may take either, and a row's result must not depend on which batch it
 * was in), so the arithmetic lives here once.
 * Layout: docs/layout-marlin.md (stripes of S columns, 512-byte k16 tiles, lane
 * l holds bytes 16l..16l+15 of a tile; group-32 fp16 scales after the tiles).
 */
#ifndef QC_CUDA_MARLIN_GEMV_CUH
#define QC_CUDA_MARLIN_GEMV_CUH

#include "matmul_dispatch.h"
#include "silu.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace qc_mgv {

constexpr int WARPS = 8;
constexpr int ROWS = 4;   /* activation rows per launch (more: register spills) */
constexpr int TILE = 512; /* bytes of one k16 tile of a stripe (marlin_i6: its low nibbles) */

/* Columns of a stripe for `BITS`-wide codes: 64 for 4 and 6 bits (marlin_i6's
 * low nibbles are a marlin_i4 tile), 32 for 8. */
template <int BITS> __host__ __device__ constexpr int stripe_of()
{
	return BITS == 8 ? 32 : 64;
}
/* Bytes of one 32-k group of a stripe's codes: its two tiles, and for 6-bit codes
 * the 512-byte plane of their high bits after them (docs/layout-marlin.md). */
template <int BITS> __host__ __device__ constexpr int group_bytes()
{
	return BITS == 6 ? 3 * TILE : 2 * TILE;
}
/* Byte offset of k16 tile kt's 512 code bytes inside its stripe. */
template <int BITS> __device__ __forceinline__ size_t tile_off(int kt)
{
	return (size_t)(kt >> 1) * group_bytes<BITS>() + (size_t)(kt & 1) * TILE;
}
/* Byte offset of group g's high-bit plane (6-bit codes). */
__device__ __forceinline__ size_t high_off(int g)
{
	return (size_t)g * group_bytes<6>() + 2 * TILE;
}
/* Where a stripe's scales start: after its KT (even) tiles. */
template <int BITS> __device__ __forceinline__ size_t codes_bytes(int KT)
{
	return (size_t)(KT / 2) * group_bytes<BITS>();
}

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
	int norm_once;             /* one row, k <= 4096: x and norm_w read once for the sum and the
				      staging (norm_stage_1row; the same bits) */
	int64_t r0;                /* first row of this launch */
	int nr, n, k, kb;
	int kt_block;              /* k16 tiles per block along K (a multiple of 2 * WARPS) */
	int cluster;               /* the kb blocks of a stripe are one thread-block cluster: their
				      partials are summed through distributed shared memory (sm_90) */
	int64_t p_ng;              /* the persistent GEMV (marlin_gemv_persist.cu): 32-k groups of
				      the launch (stripes x k / 32), split evenly over p_nw warps */
	int p_nw;
	struct qc_cuda_l2_hint l2; /* the weights read next: the blocks ask L2 for them (l2_prefetch) */
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

/* 16 bytes of weights the block reads once: past L1 (it keeps x), with a hint
 * that L2 fetch the rest of the 256-byte sector run (the warp's tiles are one
 * contiguous range). */
__device__ __forceinline__ uint4 ld_stream(const void *ptr)
{
	uint4 v;
	asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
		     : "l"(ptr));
	return v;
}

/* Lane (r = lane / 4)'s scales (and i4z/i8z offsets) of 32-k group g: NJ fp16
 * values each, 16 bytes (i4) or 8 (i8). sc: the stripe's scale array.
 * marlin_i6: sv = the 16 int8 sub-block scales (tile 2g's NJ columns, then tile
 * 2g + 1's), ov = the NJ fp16 super-block scales d of the group's 256-block. */
template <int BITS, bool ZP>
__device__ __forceinline__ void load_scales(const uint8_t *sc, int G32, int g, int r, uint4 &sv, uint4 &ov)
{
	constexpr int S = stripe_of<BITS>(), NJ = S / 8;
	if constexpr (BITS == 6) {
		sv = __ldg((const uint4 *)(sc + (size_t)g * 128 + 16 * r));
		ov = __ldg((const uint4 *)(sc + (size_t)G32 * 128 + (size_t)(g / 8) * 128 + 16 * r));
	} else if constexpr (BITS == 4) {
		sv = __ldg((const uint4 *)(sc + 2 * ((size_t)g * S + NJ * r)));
		if constexpr (ZP)
			ov = __ldg((const uint4 *)(sc + 2 * ((size_t)G32 * S + (size_t)g * S + NJ * r)));
	} else {
		const uint2 s2 = __ldg((const uint2 *)(sc + 2 * ((size_t)g * S + NJ * r)));
		sv = make_uint4(s2.x, s2.y, 0, 0);
		if constexpr (ZP) {
			const uint2 o2 = __ldg((const uint2 *)(sc + 2 * ((size_t)G32 * S + (size_t)g * S + NJ * r)));
			ov = make_uint4(o2.x, o2.y, 0, 0);
		}
	}
}

/* The NJ fp16 scales (and offsets) of a lane's group as floats. */
template <int NJ, bool ZP>
__device__ __forceinline__ void group_scales(const uint4 sv, const uint4 ov, float (&d)[NJ], float (&o)[NJ])
{
	const uint32_t sw[4] = {sv.x, sv.y, sv.z, sv.w};
#pragma unroll
	for (int j = 0; j < NJ; j++)
		d[j] = h2f(sw[j / 2], j % 2);
	if constexpr (ZP) {
		const uint32_t ow[4] = {ov.x, ov.y, ov.z, ov.w};
#pragma unroll
		for (int j = 0; j < NJ; j++)
			o[j] = h2f(ow[j / 2], j % 2);
	}
}

/* A lane's activations for k16 tile kl of the staged x, for each of G rows: k = 2c,
 * 2c + 1 (xa) and 2c + 8, 2c + 9 (xb), the k of its fragment slot. */
template <int G>
__device__ __forceinline__ void load_xfrag(const float *xs, int xstride, int kl, int c, float2 (&xa)[G],
					   float2 (&xb)[G])
{
#pragma unroll
	for (int t = 0; t < G; t++) {
		xa[t] = *(const float2 *)&xs[t * xstride + kl + 2 * c];
		xb[t] = *(const float2 *)&xs[t * xstride + kl + 2 * c + 8];
	}
}

/* One 32-k group (tiles v0, v1 at k16 tiles kl0/16 and kl0/16 + 1 of the staged
 * x) into acc: per column the group's sum Σ(q - z)·x, scaled once by d (and
 * o·Σx for offsets). xs: G rows of xstride floats. */
template <int BITS, bool ZP, int G>
__device__ __forceinline__ void dot_group48(const uint4 v0, const uint4 v1, const uint4 sv, const uint4 ov,
					    const float *xs, int xstride, int kl0, int c,
					    float (&acc)[stripe_of<BITS>() / 8][G])
{
	constexpr int NJ = stripe_of<BITS>() / 8;
	float d[NJ], o[NJ];
	group_scales<NJ, ZP>(sv, ov, d, o);
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
		const int kl = kl0 + 16 * h;
		const uint4 vv = h ? v1 : v0;
		const uint32_t wd[4] = {vv.x, vv.y, vv.z, vv.w};
		uint32_t lo[4], hi[4];
#pragma unroll
		for (int i = 0; i < 4; i++) {
			lo[i] = BITS == 4 ? wd[i] & 0x0f0f0f0fu : wd[i] ^ 0x80808080u;
			hi[i] = BITS == 4 ? (wd[i] >> 4) & 0x0f0f0f0fu : 0u;
		}
		float2 xa[G], xb[G];
		load_xfrag<G>(xs, xstride, kl, c, xa, xb);
		if constexpr (ZP)
#pragma unroll
			for (int t = 0; t < G; t++)
				xsum[t] += (xa[t].x + xa[t].y) + (xb[t].x + xb[t].y);
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

/* The 6-bit codes of one lane's tile as marlin_i4's two nibble planes, each byte a
 * whole code 0..63: nibble words wd[0..3] and the tile's two high-bit words (word
 * h covers nibble words 2h and 2h + 1: per byte, bits 0-1 and 2-3 the low and high
 * nibble of word 2h, bits 4-5 and 6-7 those of word 2h + 1). */
__device__ __forceinline__ void planes6(const uint32_t wd[4], uint32_t h0, uint32_t h1, uint32_t lo[4],
					uint32_t hi[4])
{
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const uint32_t hb = i < 2 ? h0 : h1;
		const uint32_t l4 = wd[i] & 0x0f0f0f0fu, h4 = (wd[i] >> 4) & 0x0f0f0f0fu;
		if (i % 2 == 0) {
			lo[i] = l4 | ((hb << 4) & 0x30303030u);
			hi[i] = h4 | ((hb << 2) & 0x30303030u);
		} else {
			lo[i] = l4 | (hb & 0x30303030u);
			hi[i] = h4 | ((hb >> 2) & 0x30303030u);
		}
	}
}

/* marlin_i6 (q6_K): one 32-k group whose two k16 tiles have a scale each per
 * column (d·sc, exact in float: an 11-bit times an 8-bit significand). Per tile
 * and column the lane's sum Σ(q − 32)·x over its 4 k, then acc += (d·sc)·sum,
 * tile 2g first. sv: the 16 int8 sub-block scales (load_scales), dv: the 8 fp16
 * super-block scales, hv: the group's high-bit plane (words 0, 1: tile 2g). */
template <int G>
__device__ __forceinline__ void dot_group6(const uint4 v0, const uint4 v1, const uint4 sv, const uint4 dv,
					   const uint4 hv, const float *xs, int xstride, int kl0, int c,
					   float (&acc)[8][G])
{
	float d[8], o[8];
	group_scales<8, false>(dv, dv, d, o);
	const uint32_t sw[4] = {sv.x ^ 0x80808080u, sv.y ^ 0x80808080u, sv.z ^ 0x80808080u, sv.w ^ 0x80808080u};
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const int kl = kl0 + 16 * h;
		const uint4 vv = h ? v1 : v0;
		const uint32_t wd[4] = {vv.x, vv.y, vv.z, vv.w};
		uint32_t lo[4], hi[4];
		planes6(wd, h ? hv.z : hv.x, h ? hv.w : hv.y, lo, hi);
		float2 xa[G], xb[G];
		load_xfrag<G>(xs, xstride, kl, c, xa, xb);
#pragma unroll
		for (int j = 0; j < 8; j++) {
			float f[4];
			weights<4, 32>(lo, hi, j, f);
			/* the int8 scale of (tile 2g + h, column j), sign bit flipped: byte - 128 */
			const float ds = d[j] * (byte_f(sw[2 * h + j / 4], j % 4) - 8388736.0f);
#pragma unroll
			for (int t = 0; t < G; t++) {
				float s = 0.0f;
				s = fmaf(f[0], xa[t].x, s);
				s = fmaf(f[1], xa[t].y, s);
				s = fmaf(f[2], xb[t].x, s);
				s = fmaf(f[3], xb[t].y, s);
				acc[j][t] = fmaf(ds, s, acc[j][t]);
			}
		}
	}
}

/* One 32-k group of any marlin code width into acc (hv: marlin_i6's high-bit
 * plane, unused otherwise). */
template <int BITS, bool ZP, int G>
__device__ __forceinline__ void dot_group(const uint4 v0, const uint4 v1, const uint4 sv, const uint4 ov,
					  const uint4 hv, const float *xs, int xstride, int kl0, int c,
					  float (&acc)[stripe_of<BITS>() / 8][G])
{
	if constexpr (BITS == 6)
		dot_group6<G>(v0, v1, sv, ov, hv, xs, xstride, kl0, c, acc);
	else
		dot_group48<BITS, ZP, G>(v0, v1, sv, ov, xs, xstride, kl0, c, acc);
}

/* x of one row, 4 consecutive elements from i (a multiple of 4): one 16-byte load
 * when the row allows it, else four; the same values either way. */
__device__ __forceinline__ float4 ld_x4(const float *row, int64_t i, bool vec)
{
	if (vec)
		return *(const float4 *)(row + i);
	return make_float4(row[i], row[i + 1], row[i + 2], row[i + 3]);
}

/* ss + the squares of a thread's four 16-byte pieces of x (elements i0 + STEP u,
 * those below k), in the order norm_scales and norm_stage_1row both sum them. */
template <int STEP>
__device__ __forceinline__ float sumsq4(const float4 (&q)[4], int64_t i0, int64_t k, float ss)
{
#pragma unroll
	for (int u = 0; u < 4; u++)
		if (i0 + u * STEP < k) {
			ss = fmaf(q[u].x, q[u].x, ss);
			ss = fmaf(q[u].y, q[u].y, ss);
			ss = fmaf(q[u].z, q[u].z, ss);
			ss = fmaf(q[u].w, q[u].w, ss);
		}
	return ss;
}

/* RMSNorm scale 1/sqrt(mean(x²) + eps) of each of the block's rows, into nscale[G]:
 * thread t sums elements 4(t + 256j) .. +3 for j = 0, 1, ... in order (k is a
 * multiple of 32), four loads in flight, then a shuffle tree and the warps in
 * order: one fixed order for every block and every batch. Ends synchronized. */
template <int G>
__device__ __forceinline__ void norm_scales(const gparams &p, int64_t row0, int nr, bool vec, float *nscale)
{
	__shared__ float nred[WARPS][G];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	constexpr int STEP = 4 * 32 * WARPS;
#pragma unroll
	for (int t = 0; t < G; t++) {
		float ss = 0.0f;
		if (t < nr) {
			const float *xr = p.x + ((row0 + t) / p.x_div) * p.ldx;
			for (int i0 = 4 * threadIdx.x; i0 < p.k; i0 += 4 * STEP) {
				float4 q[4];
#pragma unroll
				for (int u = 0; u < 4; u++)
					if (i0 + u * STEP < p.k)
						q[u] = ld_x4(xr, i0 + u * STEP, vec);
				ss = sumsq4<STEP>(q, i0, p.k, ss);
			}
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

/* ---- integer activations (the streaming GEMV's XQ modes, QC_MARLIN_GEMV_XQ) ----
 * Why: with float activations a 16-byte int4 load costs ~170 instructions per lane
 * (per weight a byte permute, a subtraction and an FMA), which holds the big GEMVs
 * at 60-80% of the copy rate; with integer activations two or four products are
 * one dp2a / dp4a and the decode is a mask and a byte permute per four weights.
 * XB = 16: each 32-element block as 16-bit codes, d = amax / 32767 (a float),
 *   |error| <= 2^-16 amax per element: below binary16's rounding (2^-11 |x|) for
 *   every element above amax / 32, so the end-to-end bound derived from fp16
 *   activations (docs/cuda.md) still covers it.
 * XB = 8: int8 codes as the CPU backend rounds for ggml (runtime/cpu/
 *   matmul_round.c: d = fp16(amax / 127), q = rint(x * (127 / amax))), ggml's
 *   numerics; |error| <= amax / 254, outside that bound.
 * Staged layout of a block's K range (G rows of len elements, ng = len / 32 groups
 * per row): the codes first, XB / 2 bytes per (row t, group g, lane c): for each
 * tile h of the group the codes at k = 2c, 2c + 1, 2c + 8, 2c + 9 of the tile (the
 * weights' fragment order, docs/layout-marlin.md): XB = 8 one 32-bit word per
 * tile, XB = 16 two (k = 2c, 2c + 1, then 2c + 8, 2c + 9); then the G * ng float
 * scales d, row by row. */
template <int XB> __device__ __forceinline__ constexpr int xq_lane_bytes()
{
	return XB == 8 ? 8 : 16; /* one group's codes for one lane */
}
template <int G, int XB> __device__ __forceinline__ float *xq_scales(float *xs, int len)
{
	return xs + G * len * (XB / 8) / 4; /* after the codes */
}
/* Shared memory bytes of the staged activations: G rows of len elements. */
__host__ __device__ constexpr size_t xq_smem(int G, int len, int XB)
{
	return (size_t)G * (size_t)len * (size_t)(XB / 8) + (size_t)G * (size_t)(len / 32) * sizeof(float);
}

/* Round four activations e (elements kk .. kk + 3 of row t, kk a multiple of 4)
 * to the codes of their 32-block and store codes and scale (layout above). A
 * block's 8 threads are lanes 8a .. 8a + 7 of one warp; all 32 lanes call this
 * together. amax is the integer max of |e|'s bit patterns, so a NaN (the largest
 * pattern) or an inf reaches d and the output, as the float path's would. */
template <int G, int XB> __device__ __forceinline__ void store_xq(const float e[4], int t, int kk, int len, float *xs)
{
	constexpr float QMAX = XB == 8 ? 127.0f : 32767.0f;
	uint32_t m = 0;
#pragma unroll
	for (int h = 0; h < 4; h++)
		m = max(m, __float_as_uint(fabsf(e[h])));
#pragma unroll
	for (int off = 1; off < 8; off <<= 1)
		m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
	const float amax = __uint_as_float(m);
	const float id = amax != 0.0f ? QMAX / amax : 0.0f;
	int qi[4];
#pragma unroll
	for (int h = 0; h < 4; h++)
		qi[h] = __float2int_rn(e[h] * id);
	const int ng = len / 32, g = kk / 32, h = (kk % 32) / 16, m4 = (kk % 16) / 4;
	const int c0 = 2 * (m4 % 2), half = m4 / 2; /* k = 4·m4 .. +3: lanes c0, c0 + 1 */
	const int lane0 = (t * ng + g) * 4 + c0;    /* (row, group, lane) slot of c0 */
	if constexpr (XB == 8) {
		uint16_t *w16 = (uint16_t *)xs; /* slot: 2 words, word h: 2 halves */
		w16[4 * lane0 + 2 * h + half] = (uint16_t)((qi[0] & 0xff) | (qi[1] & 0xff) << 8);
		w16[4 * (lane0 + 1) + 2 * h + half] = (uint16_t)((qi[2] & 0xff) | (qi[3] & 0xff) << 8);
	} else {
		uint32_t *w32 = (uint32_t *)xs; /* slot: 4 words, 2h + half */
		w32[4 * lane0 + 2 * h + half] = (uint32_t)(qi[0] & 0xffff) | (uint32_t)qi[1] << 16;
		w32[4 * (lane0 + 1) + 2 * h + half] = (uint32_t)(qi[2] & 0xffff) | (uint32_t)qi[3] << 16;
	}
	if (kk % 32 == 0)
		xq_scales<G, XB>(xs, len)[t * ng + g] = XB == 8 ? __half2float(__float2half_rn(amax / 127.0f))
								 : amax / 32767.0f;
}

/* An integer below 2^22 in magnitude as a float, exactly, in two full-rate
 * instructions (I2F is quarter rate): its bits added to 1.5 * 2^23's. */
__device__ __forceinline__ float i2f_small(int v)
{
	return __int_as_float(0x4B400000 + v) - 12582912.0f;
}

/* dot_group with integer activations: group g of the staged K range (layout
 * above), tiles v0, v1. Per column j and row t: the lane's integer sum over its 8
 * k values Σ(q − z)x, then acc += (d_w d_x) · Σ (+ (o d_x) · Σx for offsets).
 * The integer sums are exact, and so are their floats (below 2^22, but for int8
 * weights with 16-bit codes: rounded once); with XB = 8 d_w d_x is exact too (two
 * 11-bit significands). */
template <int BITS, bool ZP, int G, int XB>
__device__ __forceinline__ void dot_group_xq(const uint4 v0, const uint4 v1, const uint4 sv, const uint4 ov,
					     const float *xs, int len, int g, int c,
					     float (&acc)[stripe_of<BITS>() / 8][G])
{
	constexpr int NJ = stripe_of<BITS>() / 8;
	const int ng = len / 32;
	const float *dx = xs + G * len * (XB / 8) / 4;
	float d[NJ], o[NJ];
	group_scales<NJ, ZP>(sv, ov, d, o);
	/* the weight words of both tiles, one column's four codes per word */
	uint32_t q[2][NJ];
#pragma unroll
	for (int hh = 0; hh < 2; hh++) {
		const uint4 vv = hh ? v1 : v0;
		const uint32_t wd[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
		for (int i = 0; i < 4; i++) {
			if constexpr (BITS == 4) {
				/* word i: columns 2i (bytes 0, 2 of each nibble plane) and 2i + 1 (1, 3) */
				const uint32_t lo = wd[i] & 0x0f0f0f0fu, hi = (wd[i] >> 4) & 0x0f0f0f0fu;
				q[hh][2 * i] = __byte_perm(lo, hi, 0x6420);
				q[hh][2 * i + 1] = __byte_perm(lo, hi, 0x7531);
			} else {
				q[hh][i] = wd[i]; /* signed codes, k = 2c, 2c + 1, 2c + 8, 2c + 9 */
			}
		}
	}
#pragma unroll
	for (int t = 0; t < G; t++) {
		const int slot = (t * ng + g) * 4 + c;
		const float dxt = dx[t * ng + g];
		uint32_t xw[4]; /* XB 8: tiles 0, 1 in xw[0], xw[1]; XB 16: (tile, half) in xw[2 tile + half] */
		if constexpr (XB == 8) {
			const uint2 x2 = ((const uint2 *)xs)[slot];
			xw[0] = x2.x, xw[1] = x2.y;
		} else {
			const uint4 x4 = ((const uint4 *)xs)[slot];
			xw[0] = x4.x, xw[1] = x4.y, xw[2] = x4.z, xw[3] = x4.w;
		}
		/* Σx over the lane's 8 k: the offsets' term, and q4_0's centre 8 */
		int sx = 0;
		if constexpr (ZP || BITS == 4) {
			if constexpr (XB == 8)
				sx = __dp4a((int)xw[0], 0x01010101, __dp4a((int)xw[1], 0x01010101, 0));
			else
#pragma unroll
				for (int i = 0; i < 4; i++)
					sx = __dp2a_lo((int)xw[i], 0x0101, sx);
		}
#pragma unroll
		for (int j = 0; j < NJ; j++) {
			int is;
			if constexpr (XB == 8) {
				is = __dp4a((int)q[0][j], (int)xw[0], __dp4a((int)q[1][j], (int)xw[1], 0));
			} else {
				is = __dp2a_lo((int)xw[0], (int)q[0][j], 0);
				is = __dp2a_hi((int)xw[1], (int)q[0][j], is);
				is = __dp2a_lo((int)xw[2], (int)q[1][j], is);
				is = __dp2a_hi((int)xw[3], (int)q[1][j], is);
			}
			if constexpr (BITS == 4 && !ZP)
				is -= 8 * sx;
			/* below 2^22 but for int8 weights times 16-bit codes (8 * 128 * 32767) */
			float a = acc[j][t];
			if constexpr (ZP)
				a = fmaf(o[j] * dxt, i2f_small(sx), a); /* |sx| <= 8 * 32767 */
			acc[j][t] = fmaf(d[j] * dxt, XB == 16 && BITS == 8 ? (float)is : i2f_small(is), a);
		}
	}
}

/* xs[t * xstride + kk] = the activation the matmul sees at k = k0 + kk of row
 * row0 + t, kk < len (a multiple of 32; zero past k and past the launch's rows):
 * x, silu(x) * x2, or (x * nscale) * norm_w (rms_norm.cu's rounding). Four
 * 16-byte loads per thread in flight. Not synchronized.
 * XB (8, 16): each 32-element block rounded to integer codes instead (store_xq;
 * xs then holds the layout dot_group_xq reads, xstride unused).
 * wrap (the persistent GEMV's blocks whose K range runs past the end of a stripe
 * into the next one): k = (k0 + kk) mod p.k, every staged element a real one
 * (the caller keeps len <= p.k so the positions are distinct). */
template <int G, int XB = 0>
__device__ __forceinline__ void stage_x(const gparams &p, int64_t row0, int nr, int64_t k0, int len, bool vec,
					const float *nscale, float *xs, int xstride, bool wrap = false)
{
	constexpr int STEP = 4 * 32 * WARPS;
	for (int i0 = 4 * threadIdx.x; i0 < G * len; i0 += 4 * STEP) {
		float4 q[4], q2[4];
#pragma unroll
		for (int u = 0; u < 4; u++) {
			const int i = i0 + u * STEP, t = i / len, kk = i % len;
			int64_t kg = k0 + kk;
			if (wrap && kg >= p.k)
				kg -= p.k;
			q[u] = q2[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			if (i < G * len && t < nr && kg < p.k) {
				const int64_t ro = ((row0 + t) / p.x_div) * p.ldx;
				q[u] = ld_x4(p.x + ro, kg, vec);
				if (p.x2)
					q2[u] = ld_x4(p.x2 + ro, kg, vec);
			}
		}
#pragma unroll
		for (int u = 0; u < 4; u++) {
			const int i = i0 + u * STEP, t = i / len, kk = i % len;
			if (i >= G * len) /* warp-uniform: G * len is a multiple of 128 */
				break;
			int64_t kg = k0 + kk;
			if (wrap && kg >= p.k)
				kg -= p.k;
			float e[4] = {q[u].x, q[u].y, q[u].z, q[u].w};
			const float e2[4] = {q2[u].x, q2[u].y, q2[u].z, q2[u].w};
			if (t < nr && kg < p.k) {
#pragma unroll
				for (int h = 0; h < 4; h++) {
					if (p.x2)
						e[h] = qc_silu_mul(e[h], e2[h]);
					if (p.norm_w)
						e[h] = (e[h] * nscale[t]) * p.norm_w[kg + h]; /* rms_norm.cu's rounding */
				}
			}
			if constexpr (XB != 0)
				store_xq<G, XB>(e, t, kk, len, xs);
			else
				*(float4 *)&xs[t * xstride + kk] = make_float4(e[0], e[1], e[2], e[3]);
		}
	}
}

/* Whether every row this block reads allows 16-byte loads of x (and x2). */
__device__ __forceinline__ bool x_vec(const gparams &p)
{
	return ((uintptr_t)p.x % 16 == 0) && (!p.x2 || (uintptr_t)p.x2 % 16 == 0) && p.ldx % 4 == 0;
}

/* norm_scales then stage_x for one row whose whole length the block's threads load
 * in one pass (k <= 4 * STEP, k0 a multiple of STEP, k0 + len <= 4 * STEP, len a
 * multiple of 128, no x2, no wrap; stage_block says when): each thread's
 * four 16-byte pieces of x (elements 4t + STEP u) and of norm_w are loaded once,
 * before the row sum, and the staging takes them from registers instead of loading x
 * again after it (one memory round trip fewer on the critical path). The same sums
 * in the same order and the same products: norm_scales' and stage_x's bits. */
template <int XB>
__device__ __forceinline__ void norm_stage_1row(const gparams &p, int64_t row0, int64_t k0, int len, bool vec,
						float *nscale, float *xs)
{
	__shared__ float nred[WARPS];
	constexpr int STEP = 4 * 32 * WARPS;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const float *xr = p.x + (row0 / p.x_div) * p.ldx;
	const int i0 = 4 * threadIdx.x;
	float4 q[4], w[4];
#pragma unroll
	for (int u = 0; u < 4; u++)
		if (i0 + u * STEP < p.k) {
			q[u] = ld_x4(xr, i0 + u * STEP, vec);
			w[u] = ld_x4(p.norm_w, i0 + u * STEP, ((uintptr_t)p.norm_w % 16) == 0);
		}
	float ss = sumsq4<STEP>(q, i0, p.k, 0.0f);
#pragma unroll
	for (int off = 16; off > 0; off >>= 1)
		ss += __shfl_xor_sync(0xffffffffu, ss, off);
	if (lane == 0)
		nred[warp] = ss;
	__syncthreads();
	if (threadIdx.x == 0) {
		float t = 0.0f;
		for (int ww = 0; ww < WARPS; ww++)
			t += nred[ww];
		nscale[0] = 1.0f / sqrtf(t / (float)p.k + p.norm_eps);
	}
	__syncthreads();
	const float ns = nscale[0];
	const int off = (int)(k0 / STEP); /* the staged range's first piece */
#pragma unroll
	for (int u = 0; u < 4; u++) {
		const int i = i0 + u * STEP; /* staged element (kk) */
		if (i >= len) /* warp-uniform: len is a multiple of 128 */
			break;
		const int s = u + off;
		const int64_t kg = k0 + i;
		float4 x = s == 0 ? q[0] : s == 1 ? q[1] : s == 2 ? q[2] : q[3];
		const float4 nw = s == 0 ? w[0] : s == 1 ? w[1] : s == 2 ? w[2] : w[3];
		float e[4] = {x.x, x.y, x.z, x.w};
		const float f[4] = {nw.x, nw.y, nw.z, nw.w};
		if (kg < p.k)
#pragma unroll
			for (int h = 0; h < 4; h++)
				e[h] = (e[h] * ns) * f[h]; /* rms_norm.cu's rounding */
		else
			e[0] = e[1] = e[2] = e[3] = 0.0f;
		if constexpr (XB != 0)
			store_xq<1, XB>(e, 0, i, len, xs);
		else
			*(float4 *)&xs[i] = make_float4(e[0], e[1], e[2], e[3]);
	}
}

/* What every GEMV block does once its first weight loads are out and it has
 * waited for the kernels before it: its rows' RMSNorm scales where the launch
 * folds the norm in, x of its K range staged (stage_x's arguments), then the block
 * synchronized so every warp may read xs. One row with the norm, short enough to
 * load in one pass: norm_stage_1row (x read once). */
template <int G, int XB = 0>
__device__ __forceinline__ void stage_block(const gparams &p, int64_t row0, int nr, int64_t k0, int len, float *nscale,
					    float *xs, int xstride, bool wrap = false)
{
	constexpr int STEP = 4 * 32 * WARPS;
	const bool vec = x_vec(p);
	/* the staged range starts on a thread's first piece and ends on a warp's last
	 * element (len a multiple of 128: the staging loop's break stays warp-uniform),
	 * inside the four pieces a thread holds (SmolLM2's 576-long rows staged as 768
	 * take it since the seventh session: +6.6% there, docs/perf-notes.md) */
	if (G == 1 && p.norm_w && !p.x2 && !wrap && p.norm_once && p.k <= 4 * STEP && k0 % STEP == 0 &&
	    len % 128 == 0 && k0 + len <= 4 * STEP) {
		norm_stage_1row<XB>(p, row0, k0, len, vec, nscale, xs);
		__syncthreads();
		return;
	}
	if (p.norm_w)
		norm_scales<G>(p, row0, nr, vec, nscale);
	stage_x<G, XB>(p, row0, nr, k0, len, vec, nscale, xs, xstride, wrap);
	__syncthreads();
}

/* The block's column sums into red[WARPS][G][S] (the four lanes of a column,
 * c = 0..3, by shuffles; one warp's value per slot), synchronized; col_sum()
 * then adds the warps in order. Both epilogues below start here. */
template <int S, int G>
__device__ __forceinline__ void warp_columns(float (&acc)[S / 8][G], float (*red)[G][S])
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = lane / 4, c = lane % 4;
#pragma unroll
	for (int j = 0; j < S / 8; j++)
#pragma unroll
		for (int t = 0; t < G; t++) {
			float s = acc[j][t];
			s += __shfl_xor_sync(0xffffffffu, s, 1);
			s += __shfl_xor_sync(0xffffffffu, s, 2);
			if (c == 0)
				red[warp][t][8 * j + r] = s;
		}
	__syncthreads();
}

template <int S, int G> __device__ __forceinline__ float col_sum(const float (*red)[G][S], int t, int col)
{
	float s = 0.0f;
	for (int ww = 0; ww < WARPS; ww++)
		s += red[ww][t][col];
	return s;
}

/* The block's epilogue: the four lanes of a column (c = 0..3), then the warps in
 * order; then y (one block along K), or the partials and, for the stripe's last
 * block to arrive, their sum in block order (the reduce kernel's bits) and the
 * counter back at zero. rb: this block's row (experts) or 0. */
template <int S, int G>
__device__ __forceinline__ void finish(const gparams &p, float (&acc)[S / 8][G], int mat, int stripe, int kb, int rb,
				       int nr)
{
	__shared__ float red[WARPS][G][S];
	__shared__ bool last;
	warp_columns<S, G>(acc, red);
	for (int i = threadIdx.x; i < nr * S; i += 32 * WARPS) {
		const int t = i / S, col = i % S;
		const float s = col_sum<S, G>(red, t, col);
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

/* finish() for a launch whose kb blocks along K form one cluster (p.cluster,
 * sm_90+): each block leaves its warp-summed columns in its own shared memory, the
 * cluster's rank-0 block reads every rank's through distributed shared memory and
 * sums them in rank (= block) order, the flags path's order and bits, then stores.
 * No partials in global memory, no fence, no counter. Every block waits at a
 * second cluster barrier so its shared memory outlives rank 0's reads. */
template <int S, int G>
__device__ __forceinline__ void finish_cluster(const gparams &p, float (&acc)[S / 8][G], int mat, int stripe, int nr)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	__shared__ float red[WARPS][G][S];
	__shared__ float part[G][S];
	warp_columns<S, G>(acc, red);
	for (int i = threadIdx.x; i < nr * S; i += 32 * WARPS)
		part[i / S][i % S] = col_sum<S, G>(red, i / S, i % S);
	uint32_t rank;
	asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
	/* every rank's part[] written and visible cluster-wide */
	asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
	if (rank == 0) {
		const uint32_t base = (uint32_t)__cvta_generic_to_shared(&part[0][0]);
		for (int i = threadIdx.x; i < nr * S; i += 32 * WARPS) {
			const int t = i / S, col = i % S;
			float s = 0.0f;
			for (int b = 0; b < p.kb; b++) { /* block order: the reduce kernel's sum */
				uint32_t remote;
				float v;
				asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
					     : "=r"(remote)
					     : "r"(base + (uint32_t)((t * S + col) * sizeof(float))), "r"(b));
				asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
				s += v;
			}
			store(p, mat, t, (int64_t)stripe * S + col, s);
		}
	}
	/* rank 0 is done reading: the others' shared memory may go */
	asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
	(void)p, (void)acc, (void)mat, (void)stripe, (void)nr;
	__trap(); /* the host never asks for a cluster below sm_90 */
#endif
}

/* Bytes of one bulk L2 prefetch: a launch's blocks share a hint's ranges in chunks
 * of this size, so a 16 MB hint is one instruction for each of ~256 blocks. */
constexpr uint64_t L2_CHUNK = 64 * 1024;

/* This block's share of the launch's L2 hint (p.l2): chunk ids b, b + nb, ... of
 * the ranges taken in order, each asked of L2 with one cp.async.bulk.prefetch
 * (sm_90; fire and forget: nothing waits for it, a warp may exit with it pending).
 * Called by one thread once the block's own weight loads are issued. Below sm_90
 * the hint is ignored (the host sends none there). */
__device__ __forceinline__ void l2_prefetch(const gparams &p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	const uint64_t nb = (uint64_t)gridDim.x * gridDim.y, b = (uint64_t)blockIdx.y * gridDim.x + blockIdx.x;
	uint64_t base = 0; /* first chunk id of range r */
	for (int r = 0; r < p.l2.n; r++) {
		const uint64_t nch = (p.l2.bytes[r] + L2_CHUNK - 1) / L2_CHUNK;
		/* this block's first id at or past base */
		uint64_t id = b >= base ? b : b + (base - b + nb - 1) / nb * nb;
		for (; id < base + nch; id += nb) {
			const uint64_t off = (id - base) * L2_CHUNK;
			const uint64_t left = p.l2.bytes[r] - off;
			const uint32_t len = (uint32_t)(left < L2_CHUNK ? left : L2_CHUNK);
			asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p.l2.d[r] + off), "r"(len)
				     : "memory");
		}
		base += nch;
	}
#else
	(void)p;
#endif
}

} /* namespace qc_mgv */

/* The streaming kernel's launch (marlin_gemv_stream.cu) for rows without experts:
 * p.kt_block and p.kb set by qc_mgv_stream_partition. */
int qc_mgv_stream_launch(int bits, bool zp, const qc_mgv::gparams &p0, int64_t n_rows, uint64_t n_flags,
			 cudaStream_t s, struct qc_err *err);
/* The K partials' sum (marlin_gemv.cu's reduce kernel), for a launch of either
 * GEMV that had no arrival counters: y = sum of p.ws in block order. */
int qc_mgv_reduce_launch(const qc_mgv::gparams &p, cudaStream_t s, struct qc_err *err);
/* The streaming GEMV's choices for `bits`-wide codes (marlin_gemv_stream.cu's
 * table, set by the qc_cuda_marlin_gemv_stream_* knobs), which the persistent
 * kernel shares: blocks a launch aims at, k16 tiles per warp at least, the
 * activations' codes, and whether the persistent kernel runs. */
struct qc_mgv_choice {
	int blocks, min_wt, xq;
	bool persist;
};
qc_mgv_choice qc_mgv_stream_choice(int bits);
/* The persistent kernel (marlin_gemv_persist.cu) for rows without experts; its
 * scratch (bytes) for up to n_rows rows; and whether it takes this launch (the
 * knob is on for the width). */
int qc_mgv_persist_launch(int bits, bool zp, const qc_mgv::gparams &p0, int64_t n_rows, uint64_t n_flags,
			  cudaStream_t s, struct qc_err *err);
uint64_t qc_mgv_persist_ws(int bits, int64_t n_in, int64_t n_out, int64_t n_rows);
/* Blocks along K and k16 tiles per block of the streaming kernel for an
 * n_in x n_out matrix of `bits`-wide codes (4, 8): a function of the shape and the
 * width only (batch-invariant). */
void qc_mgv_stream_partition(int bits, int64_t n_in, int64_t n_out, int *kb, int *kt_block);

#endif
