/* rope_pair.cuh — the angle and the rotation of one RoPE pair, shared by
 * rope.cu and rope_kv.cu so the fused kernel and the plain one cannot drift
 * apart: both must rotate bit for bit alike (the K cache holds what either
 * wrote).
 *
 * Owns: rope_pair_cs (cos and sin, times mscale, of pair p at a position),
 * rope_pair_rotate, and where a pair's two dims sit in a head per mode.
 * Invariants: theta is advanced by p float multiplications from pos (ggml's
 * rope cache, as the CPU backend); every product and sum is rounded on its own
 * (__fmul_rn & co., so nvcc cannot contract them into fma). Non-goals: the
 * grids (each kernel's own). Reference: runtime/ops/rope.c.
 */
#ifndef QC_CUDA_ROPE_PAIR_CUH
#define QC_CUDA_ROPE_PAIR_CUH

#include "rope.h"

extern "C" {
#include "ops.h" /* enum qc_rope_mode */
}

struct rope_cs {
	float c, s;                /* cos and sin of the angle, times mscale */
};

/* Pair p (< n_rot / 2) at position pos, with a's angle parameters (theta_scale,
 * freq_scale, d_ff, the YaRN ramp, mscale; a.d_x and a.n_heads are not read). */
static __device__ __forceinline__ struct rope_cs rope_pair_cs(const struct qc_cuda_rope_args &a, int32_t pos, int p)
{
	float theta = (float)pos;
	for (int k = 0; k < p; k++)
		theta *= a.theta_scale;
	const float extrap = a.d_ff ? __fdiv_rn(theta, a.d_ff[p]) : theta;
	const float interp = __fmul_rn(a.freq_scale, extrap);
	float ang = interp;
	if (a.ext_factor != 0.0f) {
		const float y = __fdiv_rn(__fsub_rn((float)p, a.corr[0]), fmaxf(0.001f, __fsub_rn(a.corr[1], a.corr[0])));
		const float mix = __fmul_rn(1.0f - fminf(1.0f, fmaxf(0.0f, y)), a.ext_factor);
		ang = __fadd_rn(__fmul_rn(interp, __fsub_rn(1.0f, mix)), __fmul_rn(extrap, mix));
	}
	return {__fmul_rn(cosf(ang), a.mscale), __fmul_rn(sinf(ang), a.mscale)};
}

/* offset in its head of pair p's first dim: 2p (NORM, adjacent) or p (NEOX) */
static __device__ __forceinline__ int rope_pair_first(int32_t mode, int p)
{
	return mode == QC_ROPE_NEOX ? p : 2 * p;
}

/* distance from a pair's first dim to its second: 1 (NORM) or n_rot / 2 (NEOX) */
static __device__ __forceinline__ int rope_pair_stride(int32_t mode, int half)
{
	return mode == QC_ROPE_NEOX ? half : 1;
}

/* (x0, x1) rotated: (x0 cos - x1 sin, x0 sin + x1 cos) */
static __device__ __forceinline__ float2 rope_pair_rotate(float x0, float x1, struct rope_cs r)
{
	return make_float2(__fsub_rn(__fmul_rn(x0, r.c), __fmul_rn(x1, r.s)),
			   __fadd_rn(__fmul_rn(x0, r.s), __fmul_rn(x1, r.c)));
}

/* The n_rot / 2 pairs of one head in shared memory y, rotated in place by the calling
 * warp (lane l takes pairs l, l + 32, ...), then __syncwarp: rope_kv8.cu's per-head
 * RoPE, and the attention's (paged_attn_split.cu) for its fp8 q heads and own K row. */
static __device__ __forceinline__ void rope_head_warp(float *y, int half, int32_t mode, const struct rope_cs *ang)
{
	const int stride = rope_pair_stride(mode, half);
	for (int p = threadIdx.x & 31; p < half; p += 32) {
		const int i = rope_pair_first(mode, p);
		const float2 z = rope_pair_rotate(y[i], y[i + stride], ang[p]);
		y[i] = z.x;
		y[i + stride] = z.y;
	}
	__syncwarp();
}

#endif
