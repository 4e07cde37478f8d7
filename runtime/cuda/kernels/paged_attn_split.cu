/* paged_attn_split.cu — the split-K ("flash-decoding") path of paged_attn.cu: the
 * chunk kernel (scores and P V on the tensor cores, RoPE and the K/V store inside
 * in decode steps of a few rows, K/V loads before the programmatic-dependent-launch
 * wait), its merge (in the last chunk block, or a kernel of its own), the split
 * scratch's size and the launch (qc_cuda_paged_attn_split). What the path computes
 * and its limits: paged_attn_split.cuh. Why each piece is as it is: the comments
 * below and docs/perf-notes.md.
 * Reference: runtime/ops/paged_attn.c (tests/gpu/kernels_attn.c checks every path
 * against it and the paths' bits against each other).
 */
#include "paged_attn.h"
#include "pdl.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "attn_window.cuh"
#include "kv_pool.cuh"
#include "mma_sync.cuh"
#include "paged_attn_split.cuh"
#include "rope_pair.cuh"

#define MAX_HD QC_ATTN_MAX_HD /* head dims a lane-strided register row holds */

/* A build with -DQC_ATTN_STAMPS (a profiling aid, never the product's: see
 * tools/attn_stamps.sh) has the split kernel's block (token 0, K/V head y, chunk z)
 * record %globaltimer at its phases, per layer, for the last launch of each layer;
 * the table goes at exit to qc_attn_stamps_path, which the tool's own file
 * (tools/attn_stamps_env.c) sets from $QC_ATTN_STAMPS: kernels read no environment. Phases: entry, before the wait, after
 * it, q (and the own rows) staged, own row stored, scores, softmax, P V, partials
 * out and counted, the merge done (the last block only). */
#ifdef QC_ATTN_STAMPS
#define STAMP_N 10
#define STAMP_LAYERS 128
#define STAMP_BLOCKS 256
__device__ unsigned long long qc_attn_stamp[STAMP_LAYERS * STAMP_BLOCKS * STAMP_N];
static __device__ __forceinline__ void stamp(const struct qc_cuda_paged_attn_args &a, int i)
{
	const int b = blockIdx.y * gridDim.z + blockIdx.z;
	if (threadIdx.x || blockIdx.x || a.layer >= STAMP_LAYERS || b >= STAMP_BLOCKS)
		return;
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	unsigned long long *s = qc_attn_stamp + ((size_t)a.layer * STAMP_BLOCKS + b) * STAMP_N;
	if (i == 0) /* this launch's phases only: none left from an earlier one */
		for (int k = 1; k < STAMP_N; k++)
			s[k] = 0;
	s[i] = t;
}
extern "C" {
const char *qc_attn_stamps_path; /* set before main by tools/attn_stamps_env.c */
}
static void stamp_dump(void)
{
	static unsigned long long h[STAMP_LAYERS * STAMP_BLOCKS * STAMP_N];
	const char *path = qc_attn_stamps_path;
	FILE *f = path ? fopen(path, "w") : NULL;
	if (!f || cudaMemcpyFromSymbol(h, qc_attn_stamp, sizeof h) != cudaSuccess) {
		if (f)
			fclose(f);
		return;
	}
	for (int l = 0; l < STAMP_LAYERS; l++)
		for (int b = 0; b < STAMP_BLOCKS; b++) {
			const unsigned long long *s = h + ((size_t)l * STAMP_BLOCKS + b) * STAMP_N;
			if (!s[0])
				continue;
			fprintf(f, "%d\t%d", l, b);
			for (int i = 0; i < STAMP_N; i++)
				fprintf(f, "\t%lld", s[i] ? (long long)(s[i] - s[0]) : -1LL);
			fprintf(f, "\t%llu\n", s[0]);
		}
	fclose(f);
}
#define STAMP(i) stamp(a, i)
#else
#define STAMP(i) ((void)0)
#endif

#define ST 128 /* threads of a split block */

/* out[h] of token t = merge of its ns chunks in chunk order: sum_s e^(m_s - M) o_s /
 * sum_s e^(m_s - M) l_s, by one warp (all 32 lanes call it). Lane s holds chunk s's
 * (m, l) (ns <= QC_ATTN_SPLIT_MAX = 32), lane l the dimensions l, l + 32, ...; the
 * partials of MB chunks are loaded at once, so the merge costs a few memory round
 * trips, not one per chunk. The sums run in chunk order, one fmaf per chunk (the
 * same bits as a loop over chunks). Read through L2 (__ldcg): the split kernel's
 * last block merges chunks other blocks wrote. */
static __device__ void merge_head(const struct qc_cuda_paged_attn_args &a, int64_t t, int h, int ns, int32_t n_split,
				  const float *part_o, const float *part_ml, int lane)
{
	constexpr int MB = 8, ND = MAX_HD / 32;
	float *out = a.d_out + (t * a.n_head + h) * (int64_t)a.hd;
	const float *ml = part_ml + (t * a.n_head + h) * (int64_t)n_split * 2;
	const float *po = part_o + (t * a.n_head + h) * (int64_t)n_split * a.hd;
	const float m = lane < ns ? __ldcg(&ml[2 * lane]) : -INFINITY;
	const float l = lane < ns ? __ldcg(&ml[2 * lane + 1]) : 0.0f;
	float M = m;
	for (int off = 16; off > 0; off >>= 1)
		M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
	const float w = lane < ns ? expf(m - M) : 0.0f;
	float L = 0.0f;
	for (int s = 0; s < ns; s++)
		L += __shfl_sync(0xffffffffu, w, s) * __shfl_sync(0xffffffffu, l, s);
	const float inv = 1.0f / L;
	float r[ND];
#pragma unroll
	for (int i = 0; i < ND; i++)
		r[i] = 0.0f;
	for (int s0 = 0; s0 < ns; s0 += MB) {
		float v[MB][ND];
#pragma unroll
		for (int u = 0; u < MB; u++)
#pragma unroll
			for (int i = 0; i < ND; i++)
				v[u][i] = s0 + u < ns && lane + 32 * i < a.hd ? __ldcg(&po[(int64_t)(s0 + u) * a.hd + lane + 32 * i])
									      : 0.0f;
#pragma unroll
		for (int u = 0; u < MB; u++) {
			const float ws = __shfl_sync(0xffffffffu, w, (s0 + u) & 31);
			if (s0 + u < ns)
#pragma unroll
				for (int i = 0; i < ND; i++)
					r[i] = fmaf(ws, v[u][i], r[i]);
		}
	}
#pragma unroll
	for (int i = 0; i < ND; i++)
		if (lane + 32 * i < a.hd)
			out[lane + 32 * i] = r[i] * inv;
}

/* Scores, softmax and unnormalized P V of one (token, K/V head, chunk); with
 * counters (flags), the chunk that finishes last merges the (token, K/V head).
 * BIG: heads of up to MAX_HD values and up to 16 query heads per K/V head; else up
 * to 128 and 8 (the fragments' registers are sized for them). MINB: the blocks
 * per SM a build is made for (0: the compiler's choice). Each split block is a
 * chain of dependent memory round trips (docs/perf-notes.md), so a step with more
 * blocks than the SMs hold at once runs at the rate of the blocks resident per SM. */
template <typename KV, bool ROPE, bool BIG, int MINB>
static __global__ void __launch_bounds__(ST, MINB) attn_split_kernel(const struct qc_cuda_paged_attn_args a,
							       int32_t chunk_max, int32_t n_split, float *part_o,
							       float *part_ml, const int32_t *skip, uint32_t *flags)
{
	qc_pdl_trigger();
	STAMP(0);
	/* a.old_ctx: the rows of positions below the token's own, the step's positions and
	   tables were written before the kernels this launch may overlap, so they load
	   before the wait (skip is written by the flash path's kernels: wait first) */
	const bool early = a.old_ctx && !skip;
	if (!early)
		qc_pdl_wait();
	extern __shared__ float sm[];
	const int64_t t = blockIdx.x;
	if (skip && skip[t])
		return;
	const int kvh = blockIdx.y, sp = blockIdx.z;
	const int G = a.n_head / a.n_head_kv, hd = a.hd;
	/* (G, hd) scaled q, (G, chunk_max) scores then weights, (ST / 32, G, hd) P V partials;
	   ROPE: the token's own K and V rows in the pool's encoding (4 hd bytes: binary16
	   rows, or fp8 codes then the two exponents), its angles (n_rot / 2) */
	constexpr bool FP8 = KV::SCALED;
	float *qs = sm, *sc = sm + G * hd, *red = sc + G * chunk_max;
	uint8_t *kcur = (uint8_t *)(red + (ST / 32) * G * hd), *vcur = kcur + (FP8 ? 1 : 2) * hd;
	int8_t *ecur = (int8_t *)(kcur + 2 * hd); /* fp8: K's, V's exponent */
	struct rope_cs *ang = (struct rope_cs *)(kcur + 4 * hd);
	const int32_t n_ctx = a.d_pos[t] + 1;
	/* chunks cut the positions the token sees (its window's), so its result is a
	   function of that range alone */
	const int32_t jw = n_ctx <= a.max_ctx ? qc_attn_win_start(a, n_ctx - 1) : 0;
	const int32_t chunk = n_ctx <= a.max_ctx ? qc_attn_chunk(n_ctx - jw) : 0, j0 = jw + sp * chunk;
	const int32_t j1 = n_ctx < j0 + chunk ? n_ctx : j0 + chunk;
	if (flags && n_ctx > a.max_ctx && sp == 0) { /* broken contract: NaN out, as the merge kernel */
		if (early)
			qc_pdl_wait(); /* d_out may still be read by the kernels before */
		for (int i = threadIdx.x; i < G * hd; i += ST)
			a.d_out[(t * a.n_head + (int64_t)kvh * G + i / hd) * hd + i % hd] = __int_as_float(0x7fc00000);
		return;
	}
	if (n_ctx > a.max_ctx || j0 >= n_ctx)
		return; /* the merge reads only the chunks a token has (and NaNs a broken one) */
	const int32_t *table = a.d_tables + (int64_t)a.d_tok_seq[t] * a.table_stride;
	const int64_t q_dim = (int64_t)a.n_head * hd;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	/* ROPE: the token's angles now (its position is known), and whether this block
	   holds the token's own row (it rotates and stores it; never read from the pool) */
	const int32_t jc = n_ctx - 1;
	const bool own = ROPE && jc < j1;
	const int half_rot = ROPE ? a.rope_kv.rope.n_rot / 2 : 0;
	if constexpr (ROPE)
		for (int p = threadIdx.x; p < half_rot; p += ST)
			ang[p] = rope_pair_cs(a.rope_kv.rope, jc, p);
	const int nvec = hd / 8; /* 16-byte vectors per row */
	/* The two passes run on the tensor cores (mma.sync m16n8k16, fp32 sums).
	 * Scores S = Q K^T: the G heads are the MMA's M (padded to 16), 8 positions an N
	 * tile. P V as O^T = V^T P^T: 16 dims an M tile, the heads N. q and P are fp32:
	 * each goes in as two binary16 terms (hi + lo of the value times a power of two
	 * that keeps both inside binary16's range: ~22 significant bits), and K and V are
	 * exact in binary16 (fp8: the codes; the row's power of two is applied in fp32),
	 * so the products are exact and the sums fp32, in the tensor core's order.
	 * K needs no shared memory: a head's sum over dims is order-free, so lane
	 * (g, t) loads position g's dims 32s + 8t .. + 7 (one 16-byte load) and q's
	 * fragments follow the same permuted order. V's fragments pair two positions of
	 * one dim in a register: lane (g, t) loads positions 2t, 2t + 1, 2t + 8, 2t + 9
	 * of a 16-position step at dims 64h + 8g .. + 7 and pairs them by byte permutes;
	 * its M rows are dims 64h + 8g + 2i (row g) and + 1 (row g + 8) of tile i.
	 * A block's warps meet only in the score row (shared memory) and in the final
	 * sum of their P V partials, in warp order: one fixed order (deterministic). */
	const int g8 = lane >> 2, t4 = lane & 3;
	constexpr int NT = 2;                     /* N tiles of 8 positions a warp scores at once */
	constexpr int SEGS = BIG ? MAX_HD / 32 : 4; /* 32-dim segments a head has at most */
	constexpr int HG = BIG ? MAX_HD / 64 : 2;   /* 64-dim groups a head has at most */
	constexpr int NG = BIG ? 2 : 1;             /* 8-head N tiles of P V */
	constexpr int GSTEP = (ST / 32) * NT * 8;   /* positions a block scores per round */
	constexpr int VSTEP = (ST / 32) * 16;       /* positions a block's P V takes per round */
	const int nseg = (hd + 31) / 32, nhg = (hd + 63) / 64, VB0 = 16 * warp;
	typename KV::raw kr[NT][SEGS];
	const int32_t jlive = early || ROPE ? jc : j1; /* rows below this one load now */
	const int32_t klim = ROPE ? min(j1, jc) : j1;    /* ROPE: the own row comes from kcur */
	auto kpos = [&](int32_t jb, int nt) { return jb + warp * NT * 8 + nt * 8 + g8; };
	auto kseg = [&](int s) { return s < nseg && 32 * s + 8 * t4 < hd; };
	auto load_k = [&](int32_t jb, int32_t lim) { /* jb: the round's first position */
#pragma unroll
		for (int nt = 0; nt < NT; nt++) {
			const int32_t j = kpos(jb, nt);
			typename KV::row k = {};
			if (j < lim)
				k = KV::at(a, table, j, 0, kvh);
#pragma unroll
			for (int s = 0; s < SEGS; s++)
				kr[nt][s] = j < lim && kseg(s) ? KV::load8(k, 4 * s + t4) : KV::zero8();
		}
	};
	/* ROPE: the own row's vectors from kcur (after it is written) */
	auto own_k = [&](int32_t jb) {
#pragma unroll
		for (int nt = 0; nt < NT; nt++)
			if (kpos(jb, nt) == jc)
#pragma unroll
				for (int s = 0; s < SEGS; s++)
					if (kseg(s))
						kr[nt][s] = KV::smem8(kcur, 4 * s + t4, FP8 ? ecur[0] : 0);
	};
	load_k(j0, min(j1, jlive));
	/* P V's first step in flight now too */
	const int32_t n = j1 - j0;
	typename KV::raw vr[4][HG];
	auto vpos = [&](int r) { return 2 * t4 + (r & 1) + 8 * (r >> 1); };
	auto vgrp = [&](int h) { return h < nhg && 64 * h + 8 * g8 < hd; };
	auto load_v = [&](int32_t jb, int32_t lim) { /* jb: the step's first position, from j0 */
#pragma unroll
		for (int r = 0; r < 4; r++) {
			const int32_t j = jb + vpos(r);
			typename KV::row v = {};
			if (j < lim)
				v = KV::at(a, table, j0 + j, 1, kvh);
#pragma unroll
			for (int h = 0; h < HG; h++)
				vr[r][h] = j < lim && vgrp(h) ? KV::load8(v, 8 * h + g8) : KV::zero8();
		}
	};
	auto own_v = [&](int32_t jb) {
#pragma unroll
		for (int r = 0; r < 4; r++)
			if (j0 + jb + vpos(r) == jc)
#pragma unroll
				for (int h = 0; h < HG; h++)
					if (vgrp(h))
						vr[r][h] = KV::smem8(vcur, 8 * h + g8, FP8 ? ecur[1] : 0);
	};
	const int32_t vlim = ROPE ? min(n, jc - j0) : n;
	if constexpr (ROPE) {
		load_v(VB0, min(n, jlive - j0));
		STAMP(1);
		if (early)
			qc_pdl_wait();
		STAMP(2);
		/* q of the G heads and, in the own block, the token's K and V rows as the
		   Q|K|V GEMV left them (one round trip); RoPE and the store as rope_kv.cu
		   does them (rope_pair.cuh: the same floats), q scaled after */
		const struct qc_cuda_rope_kv_args &rk = a.rope_kv;
		const int64_t kv_dim = (int64_t)a.n_head_kv * hd;
		float *raw = red; /* 2 hd floats: P V's scratch is not in use yet */
		for (int i = threadIdx.x; i < G * hd; i += ST)
			qs[i] = a.d_q[t * q_dim + ((int64_t)kvh * G + i / hd) * hd + i % hd];
		if (own)
			for (int i = threadIdx.x; i < hd; i += ST) {
				raw[i] = rk.d_k[t * kv_dim + (int64_t)kvh * hd + i];
				raw[hd + i] = rk.d_v[t * kv_dim + (int64_t)kvh * hd + i];
			}
		__syncthreads();
		const int mode = rk.rope.mode, n_rot = rk.rope.n_rot, stride = rope_pair_stride(mode, half_rot);
		if constexpr (FP8) {
			/* rope_kv8.cu's order: RoPE, then q rotated by H (kv8_rotate), then the
			   kernel's scale; K RoPE'd and stored through kv8_store_staged (WHT), V
			   stored as it is; one warp per head, the codes into shared memory */
			for (int g = warp; g < G; g += ST / 32) {
				float *y = qs + g * hd;
				rope_head_warp(y, half_rot, mode, ang);
				kv8_rotate(y, hd);
				for (int d = lane; d < hd; d += 32)
					y[d] = y[d] * a.scale;
				__syncwarp();
			}
			if (own && warp == 0) {
				rope_head_warp(raw, half_rot, mode, ang);
				kv8_store_staged(raw, kcur, &ecur[0], hd, KV8_ROT_WHT);
			}
			if (own && warp == 1)
				kv8_store_staged(raw + hd, vcur, &ecur[1], hd, KV8_ROT_NONE);
		} else {
			for (int i = threadIdx.x; i < G * half_rot; i += ST) {
				float *x = qs + (i / half_rot) * hd + rope_pair_first(mode, i % half_rot);
				const float2 y = rope_pair_rotate(x[0], x[stride], ang[i % half_rot]);
				x[0] = y.x * a.scale;
				x[stride] = y.y * a.scale;
			}
			for (int i = threadIdx.x; i < G * (hd - n_rot); i += ST) {
				float *x = qs + (i / (hd - n_rot)) * hd + n_rot + i % (hd - n_rot);
				*x = *x * a.scale;
			}
			if (own) {
				__half *kh = (__half *)kcur, *vh = (__half *)vcur;
				for (int p = threadIdx.x; p < half_rot; p += ST) {
					const int d = rope_pair_first(mode, p);
					const float2 y = rope_pair_rotate(raw[d], raw[d + stride], ang[p]);
					kh[d] = __float2half_rn(y.x);
					kh[d + stride] = __float2half_rn(y.y);
				}
				for (int d = n_rot + threadIdx.x; d < hd; d += ST)
					kh[d] = __float2half_rn(raw[d]);
				for (int d = threadIdx.x; d < hd; d += ST)
					vh[d] = __float2half_rn(raw[hd + d]);
			}
		}
		__syncthreads();
		STAMP(3);
		if (own) {
			const int64_t slot = rk.d_slots[t], b = slot / a.block_tokens, o = slot % a.block_tokens;
			const int64_t row = ((b * a.n_layer + a.layer) * 2) * a.block_tokens + o; /* K's; V's bt rows on */
			if constexpr (FP8) {
				uint2 *kp = (uint2 *)(a.d_pool8 + row * kv_dim + (int64_t)kvh * hd);
				uint2 *vp = (uint2 *)((uint8_t *)kp + a.block_tokens * kv_dim);
				for (int i = threadIdx.x; i < nvec; i += ST) {
					kp[i] = ((const uint2 *)kcur)[i];
					vp[i] = ((const uint2 *)vcur)[i];
				}
				if (threadIdx.x == 0) {
					int8_t *ep = (int8_t *)a.d_pool8_exp + row * a.n_head_kv + kvh;
					ep[0] = ecur[0];
					ep[a.block_tokens * a.n_head_kv] = ecur[1];
				}
			} else {
				uint4 *kp = (uint4 *)((__half *)a.d_pool + row * kv_dim + (int64_t)kvh * hd);
				uint4 *vp = (uint4 *)((__half *)kp + a.block_tokens * kv_dim);
				for (int i = threadIdx.x; i < nvec; i += ST) {
					kp[i] = ((const uint4 *)kcur)[i];
					vp[i] = ((const uint4 *)vcur)[i];
				}
			}
			own_k(j0);
			own_v(VB0);
		}
		STAMP(4);
	} else if (early) {
		load_v(VB0, min(n, jlive - j0));
		qc_pdl_wait();
		/* the token's own row, stored by the kernel just before */
		if (jc < j1) {
#pragma unroll
			for (int nt = 0; nt < NT; nt++) {
				if (kpos(j0, nt) != jc)
					continue;
				const typename KV::row k = KV::at(a, table, jc, 0, kvh);
#pragma unroll
				for (int s = 0; s < SEGS; s++)
					if (kseg(s))
						kr[nt][s] = KV::load8(k, 4 * s + t4);
			}
#pragma unroll
			for (int r = 0; r < 4; r++)
				if (j0 + VB0 + vpos(r) == jc)
#pragma unroll
					for (int h = 0; h < HG; h++)
						if (vgrp(h))
							vr[r][h] = KV::load8(KV::at(a, table, jc, 1, kvh), 8 * h + g8);
		}
	}
	if constexpr (!ROPE) {
		for (int i = threadIdx.x; i < G * hd; i += ST)
			qs[i] = a.d_q[t * q_dim + ((int64_t)kvh * G + i / hd) * hd + i % hd] * a.scale;
		__syncthreads();
	}

	/* q's two binary16 terms, in place: head g's hd floats become its hd hi halves
	   then hd lo halves (a warp rewrites only its own heads), scaled by 2^sg so the
	   largest |q| of the head is in [2^14, 2^15); 2^-sg goes to red[g] (P V's
	   partials are not written until after the softmax) */
	for (int g = warp; g < G; g += ST / 32) {
		float *y = qs + g * hd;
		const uint32_t m = kv8_amax_bits(y, hd, false);
		bool le;
		int sg = m ? 15 - kv8_frexp(__uint_as_float(m), &le) : 0;
		sg = sg > 149 ? 149 : sg;
		float v[MAX_HD / 32];
#pragma unroll
		for (int i = 0; i < MAX_HD / 32; i++)
			v[i] = lane + 32 * i < hd ? y[lane + 32 * i] : 0.0f;
		__syncwarp();
		__half *hi = (__half *)y, *lo = hi + hd;
#pragma unroll
		for (int i = 0; i < MAX_HD / 32; i++)
			if (lane + 32 * i < hd) {
				const float x = kv8_ldexp(v[i], sg);
				const __half h = __float2half_rn(x);
				hi[lane + 32 * i] = h;
				lo[lane + 32 * i] = __float2half_rn(__fsub_rn(x, __half2float(h)));
			}
		if (lane == 0)
			red[g] = kv8_pow2(-sg);
	}
	__syncthreads();
	const float qu0 = g8 < G ? red[g8] : 0.0f, qu1 = NG > 1 && g8 + 8 < G ? red[g8 + 8] : 0.0f;
	for (int32_t jb = j0; jb < j1; jb += GSTEP) {
		float acc[NT][4];
#pragma unroll
		for (int nt = 0; nt < NT; nt++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[nt][e] = 0.0f;
#pragma unroll
		for (int s = 0; s < SEGS; s++) {
			if (s >= nseg)
				break;
			const int d = 32 * s + 8 * t4;
			uint4 qh[2] = {}, ql[2] = {};
#pragma unroll
			for (int ng = 0; ng < NG; ng++)
				if (d < hd && g8 + 8 * ng < G) {
					const __half *p = (const __half *)(qs + (g8 + 8 * ng) * hd);
					qh[ng] = *(const uint4 *)(p + d);
					ql[ng] = *(const uint4 *)(p + hd + d);
				}
#pragma unroll
			for (int nt = 0; nt < NT; nt++) {
				const uint4 kb = KV::h8(kr[nt][s]);
				const uint32_t a0[4] = {qh[0].x, qh[1].x, qh[0].y, qh[1].y};
				const uint32_t a1[4] = {ql[0].x, ql[1].x, ql[0].y, ql[1].y};
				const uint32_t a2[4] = {qh[0].z, qh[1].z, qh[0].w, qh[1].w};
				const uint32_t a3[4] = {ql[0].z, ql[1].z, ql[0].w, ql[1].w};
				mma16816(acc[nt], a0, kb.x, kb.y);
				mma16816(acc[nt], a1, kb.x, kb.y);
				mma16816(acc[nt], a2, kb.z, kb.w);
				mma16816(acc[nt], a3, kb.z, kb.w);
			}
		}
		/* the powers of two of positions 2t and 2t + 1 (loaded by lanes 8t, 8t + 4) */
		float ks[NT][2];
#pragma unroll
		for (int nt = 0; nt < NT; nt++)
#pragma unroll
			for (int e = 0; e < 2; e++)
				ks[nt][e] = KV::SCALED ? __shfl_sync(0xffffffffu, KV::scale(kr[nt][0]), 4 * (2 * t4 + e)) : 1.0f;
		if (jb + GSTEP < j1) {
			load_k(jb + GSTEP, klim);
			if (own)
				own_k(jb + GSTEP);
		}
#pragma unroll
		for (int nt = 0; nt < NT; nt++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int32_t j = jb + warp * NT * 8 + nt * 8 + 2 * t4 + (e & 1);
				const int g = g8 + 8 * (e >> 1);
				if (j >= j1 || g >= G || (NG == 1 && e >= 2))
					continue;
				float s = __fmul_rn(acc[nt][e], e < 2 ? qu0 : qu1);
				if (KV::SCALED)
					s = __fmul_rn(s, ks[nt][e & 1]);
				sc[g * chunk_max + (j - j0)] = qc_attn_cap(a, s);
			}
	}
	__syncthreads();
	STAMP(5);
	/* per head: chunk max and sum of exp; warp w takes heads w, w + 4, ... */
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
	STAMP(6);
	/* P V: warp w takes the 16-position steps w, w + 4, ... P (in (0, 1]) goes in as
	 * two binary16 terms of p 2^14 (fp8: p 2^(e - E + 14), e the V row's exponent,
	 * E the largest of the warp's steps so far: its sums are rescaled by an exact
	 * power of two when a step brings a larger one), so o holds O 2^(14 - E). */
	float o[HG][4][NG][4];
#pragma unroll
	for (int h = 0; h < HG; h++)
#pragma unroll
		for (int i = 0; i < 4; i++)
#pragma unroll
			for (int ng = 0; ng < NG; ng++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					o[h][i][ng][e] = 0.0f;
	int E = 0;
	bool any = false;
	for (int32_t jb = VB0; jb < n; jb += VSTEP) {
		if (!(early || ROPE) || jb != VB0) { /* else loaded before the wait */
			load_v(jb, vlim);
			if (own)
				own_v(jb);
		}
		int ev[4] = {0, 0, 0, 0};
		if constexpr (FP8) {
			/* the rows' exponents (lane t of group 0 loaded this lane's positions) */
			int em = -1000;
#pragma unroll
			for (int r = 0; r < 4; r++) {
				const uint32_t u = __float_as_uint(__shfl_sync(0xffffffffu, KV::scale(vr[r][0]), t4));
				ev[r] = u >> 23 ? (int)(u >> 23) - 127 : -149 + 31 - __clz(u);
				if (jb + vpos(r) < n)
					em = max(em, ev[r]);
			}
			em = max(em, __shfl_xor_sync(0xffffffffu, em, 1));
			em = max(em, __shfl_xor_sync(0xffffffffu, em, 2));
			if (!any || em > E) { /* warp-uniform */
				if (any)
#pragma unroll
					for (int h = 0; h < HG; h++)
#pragma unroll
						for (int i = 0; i < 4; i++)
#pragma unroll
							for (int ng = 0; ng < NG; ng++)
#pragma unroll
								for (int e = 0; e < 4; e++)
									o[h][i][ng][e] = kv8_ldexp(o[h][i][ng][e], E - em);
				E = em;
				any = true;
			}
		}
		uint32_t bh[NG][2], bl[NG][2];
#pragma unroll
		for (int ng = 0; ng < NG; ng++) {
			const int g = g8 + 8 * ng;
			__half ph[4], pl[4];
#pragma unroll
			for (int r = 0; r < 4; r++) {
				const int32_t j = jb + vpos(r);
				const float p = j < n && g < G ? sc[g * chunk_max + j] : 0.0f;
				const float x = kv8_ldexp(p, FP8 ? ev[r] - E + 14 : 14);
				ph[r] = __float2half_rn(x);
				pl[r] = __float2half_rn(__fsub_rn(x, __half2float(ph[r])));
			}
			bh[ng][0] = (uint32_t)__half_as_ushort(ph[0]) | (uint32_t)__half_as_ushort(ph[1]) << 16;
			bh[ng][1] = (uint32_t)__half_as_ushort(ph[2]) | (uint32_t)__half_as_ushort(ph[3]) << 16;
			bl[ng][0] = (uint32_t)__half_as_ushort(pl[0]) | (uint32_t)__half_as_ushort(pl[1]) << 16;
			bl[ng][1] = (uint32_t)__half_as_ushort(pl[2]) | (uint32_t)__half_as_ushort(pl[3]) << 16;
		}
#pragma unroll
		for (int h = 0; h < HG; h++) {
			if (h >= nhg)
				break;
			const uint4 w0 = KV::h8(vr[0][h]), w1 = KV::h8(vr[1][h]), w2 = KV::h8(vr[2][h]), w3 = KV::h8(vr[3][h]);
			const uint32_t x0[4] = {w0.x, w0.y, w0.z, w0.w}, x1[4] = {w1.x, w1.y, w1.z, w1.w};
			const uint32_t x2[4] = {w2.x, w2.y, w2.z, w2.w}, x3[4] = {w3.x, w3.y, w3.z, w3.w};
#pragma unroll
			for (int i = 0; i < 4; i++) {
				const uint32_t av[4] = {__byte_perm(x0[i], x1[i], 0x5410), __byte_perm(x0[i], x1[i], 0x7632),
							__byte_perm(x2[i], x3[i], 0x5410), __byte_perm(x2[i], x3[i], 0x7632)};
#pragma unroll
				for (int ng = 0; ng < NG; ng++) {
					mma16816(o[h][i][ng], av, bh[ng][0], bh[ng][1]);
					mma16816(o[h][i][ng], av, bl[ng][0], bl[ng][1]);
				}
			}
		}
	}
	/* c0, c1: dim 64h + 8g + 2i, heads 2t, 2t + 1; c2, c3: the next dim */
#pragma unroll
	for (int h = 0; h < HG; h++)
#pragma unroll
		for (int i = 0; i < 4; i++)
#pragma unroll
			for (int ng = 0; ng < NG; ng++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const int g = 2 * t4 + (e & 1) + 8 * ng, d = 64 * h + 8 * g8 + 2 * i + (e >> 1);
					if (h < nhg && g < G && d < hd)
						red[(warp * G + g) * hd + d] = kv8_ldexp(o[h][i][ng][e], E - 14);
				}
	__syncthreads();
	STAMP(7);
	for (int i = threadIdx.x; i < G * hd; i += ST) {
		const int g = i / hd, d = i % hd;
		float r = 0.0f;
		for (int w = 0; w < ST / 32; w++)
			r += red[(w * G + g) * hd + d];
		part_o[((t * a.n_head + (int64_t)kvh * G + g) * n_split + sp) * hd + d] = r;
	}
	if (!flags)
		return;
	/* every thread's chunk results visible device-wide, then the block counts itself */
	__shared__ int last;
	const int ns = qc_attn_n_chunks(n_ctx - jw);
	__threadfence();
	__syncthreads();
	uint32_t *flag = &flags[t * a.n_head_kv + kvh];
	if (threadIdx.x == 0)
		last = atomicAdd(flag, 1u) == (uint32_t)ns - 1;
	__syncthreads();
	STAMP(8);
	if (!last)
		return;
	__threadfence();
	for (int g = warp; g < G; g += ST / 32)
		merge_head(a, t, kvh * G + g, ns, n_split, part_o, part_ml, lane);
	if (threadIdx.x == 0)
		*flag = 0u; /* ready for the next launch */
#ifdef QC_ATTN_STAMPS
	__syncthreads(); /* every warp's heads merged */
#endif
	STAMP(9);
}

/* out = merge of a token's chunks in chunk order (merge_head): block (t, y), warp w
 * takes head 4y + w. */
#define MERGE_HEADS 4
static __global__ void attn_merge_kernel(const struct qc_cuda_paged_attn_args a, int32_t n_split,
					 const float *part_o, const float *part_ml, const int32_t *skip)
{
	qc_pdl_enter();
	const int64_t t = blockIdx.x;
	if (skip && skip[t])
		return;
	const int h = blockIdx.y * MERGE_HEADS + (int)(threadIdx.x >> 5), lane = threadIdx.x & 31;
	if (h >= a.n_head)
		return;
	const int32_t n_ctx = a.d_pos[t] + 1;
	float *out = a.d_out + (t * a.n_head + h) * (int64_t)a.hd;
	if (n_ctx > a.max_ctx) { /* broken contract: NaN out, as the one-block kernel does */
		for (int d = lane; d < a.hd; d += 32)
			out[d] = __int_as_float(0x7fc00000);
		return;
	}
	merge_head(a, t, h, qc_attn_n_chunks(n_ctx - qc_attn_win_start(a, n_ctx - 1)), n_split, part_o, part_ml, lane);
}

extern "C" uint64_t qc_cuda_paged_attn_ws_bytes(int64_t n_tok, int32_t n_head, int32_t hd, int32_t max_ctx)
{
	if (n_tok < 1 || n_head < 1 || hd < 1 || max_ctx < 1)
		return 0;
	return (uint64_t)n_tok * (uint64_t)n_head * (uint64_t)qc_attn_splits(max_ctx) * ((uint64_t)hd + 2) *
	       sizeof(float);
}

/* The split kernels: pool x RoPE inside or not x build (size, MINB). RoPE inside
 * runs for steps of up to 8 rows only, which never take the 5-block build. */
typedef void (*split_fn)(const struct qc_cuda_paged_attn_args, int32_t, int32_t, float *, float *, const int32_t *,
			 uint32_t *);
enum split_build { SPLIT_BIG, SPLIT_B4, SPLIT_B5, SPLIT_BUILDS };
static const split_fn split_kernels[2][2][SPLIT_BUILDS] = {
	{{attn_split_kernel<kv_f16, false, true, 0>, attn_split_kernel<kv_f16, false, false, 4>,
	  attn_split_kernel<kv_f16, false, false, 5>},
	 {attn_split_kernel<kv_f16, true, true, 0>, attn_split_kernel<kv_f16, true, false, 4>,
	  attn_split_kernel<kv_f16, true, false, 4>}},
	{{attn_split_kernel<kv_fp8, false, true, 0>, attn_split_kernel<kv_fp8, false, false, 4>,
	  attn_split_kernel<kv_fp8, false, false, 5>},
	 {attn_split_kernel<kv_fp8, true, true, 0>, attn_split_kernel<kv_fp8, true, false, 4>,
	  attn_split_kernel<kv_fp8, true, false, 4>}},
};

/* Which build a launch takes: the small one for heads of up to 128 values and up to
 * 8 query heads per K/V head; 5 blocks per SM once the (token, K/V head) pairs alone
 * fill the SMs at 4. */
static enum split_build split_build_for(const struct qc_cuda_paged_attn_args *a, int n_sm)
{
	if (a->hd > 128 || a->n_head / a->n_head_kv > 8)
		return SPLIT_BIG;
	return a->n_tok * a->n_head_kv > 4 * (int64_t)n_sm ? SPLIT_B5 : SPLIT_B4;
}

/* The split path, or QC_EUNSUPPORTED when this shape is outside its limits.
 * Tokens with skip[t] set (NULL: none) are left alone. */
int qc_cuda_paged_attn_split(const struct qc_cuda_paged_attn_args *a, const int32_t *skip, cudaStream_t s,
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
	/* fuse_rope: the own rows (2 hd binary16) and the angles after the partials */
	const size_t smem = sizeof(float) * ((size_t)G * (size_t)a->hd + (size_t)G * (size_t)chunk_max +
					     (size_t)(ST / 32) * (size_t)G * (size_t)a->hd) +
			    (a->fuse_rope ? 4 * (size_t)a->hd + sizeof(struct rope_cs) * (size_t)(a->rope_kv.rope.n_rot / 2) : 0);
	int dev, max_smem, n_sm, rc;
	if ((rc = qc_cuda_check(cudaGetDevice(&dev), "cudaGetDevice", err)) ||
	    (rc = qc_cuda_check(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
				"cudaDeviceGetAttribute", err)) ||
	    (rc = qc_cuda_check(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev),
				"cudaDeviceGetAttribute", err)))
		return rc;
	if (smem > (size_t)max_smem)
		return QC_EUNSUPPORTED;
	if (!a->n_tok)
		return QC_OK;
	const split_fn split_k = split_kernels[a->d_pool8 != NULL][a->fuse_rope != 0][split_build_for(a, n_sm)];
#ifdef QC_ATTN_STAMPS
	static bool stamp_once = (atexit(stamp_dump), true);
	(void)stamp_once;
#endif
	if (smem > 48 * 1024 &&
	    (rc = qc_cuda_check(cudaFuncSetAttribute(split_k, cudaFuncAttributeMaxDynamicSharedMemorySize,
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
		if (a->fuse_rope) {
			const int64_t kv_dim = (int64_t)a->n_head_kv * a->hd;
			b.rope_kv.d_k = a->rope_kv.d_k + t0 * kv_dim;
			b.rope_kv.d_v = a->rope_kv.d_v + t0 * kv_dim;
			b.rope_kv.d_slots = a->rope_kv.d_slots + t0;
		}
		float *part_o = (float *)a->d_ws;
		float *part_ml = part_o + (size_t)b.n_tok * (size_t)a->n_head * (size_t)ns * (size_t)a->hd;
		/* the merge in the split kernel when the counters cover this launch */
		uint32_t *flags = a->d_flags && b.n_tok * a->n_head_kv <= a->n_flags ? a->d_flags : NULL;
		(void)qc_launch(split_k, dim3((unsigned)b.n_tok, (unsigned)a->n_head_kv, (unsigned)ns), dim3(ST),
				smem, s, b, chunk_max, ns, part_o, part_ml, skip ? skip + t0 : NULL, flags);
		if ((rc = qc_cuda_check(cudaGetLastError(), "attn_split_kernel", err)))
			return rc;
		if (flags)
			continue;
		(void)qc_launch(attn_merge_kernel,
				dim3((unsigned)b.n_tok, (unsigned)((a->n_head + MERGE_HEADS - 1) / MERGE_HEADS)),
				dim3(32 * MERGE_HEADS), 0, s, b, ns, part_o, part_ml, skip ? skip + t0 : NULL);
		if ((rc = qc_cuda_check(cudaGetLastError(), "attn_merge_kernel", err)))
			return rc;
	}
	return QC_OK;
}
