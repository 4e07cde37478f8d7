/* marlin_gemm_frag.cuh — what the marlin GEMM kernels share (marlin_gemm.cu: mma.sync,
 * any NVIDIA tensor-core GPU; marlin_wgmma.cu: Hopper wgmma): the block's shape (4 warps,
 * one stripe each), the shared-memory stage plan, the kernel arguments, the stage loader
 * (cp.async of 64 k of activations and of each warp's codes and scales) and the
 * decoders that turn a lane's 16 code bytes into its fp16 B fragments of one k16 tile.
 *
 * Why shared: the two kernels differ only in the tensor-core instruction; the
 * weights each computes with must be the same fp16 values (the layout's decode,
 * docs/layout-marlin.md), so they come from one function. Index grammar as in
 * marlin_gemm.cu: m tokens, n columns, k reduction, g a 32-k group, j an n8 tile.
 */
#ifndef QC_MARLIN_GEMM_FRAG_CUH
#define QC_MARLIN_GEMM_FRAG_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "qc_cuda.h"
extern "C" {
#include "marlin_gemm.h" /* QC_MARLIN_MAX_PARTS */
}

namespace qc_mrl {


constexpr int WARPS = 4;
constexpr int THREADS = 32 * WARPS;
constexpr int STAGES = 4;
constexpr int GROUPS_PER_STAGE = 2; /* 64 k per stage */
constexpr int KS_PER_STAGE = 4;     /* k16 tiles per stage */
constexpr int TILE_BYTES = 512;     /* one k16 x stripe tile: 32 lanes x 16 bytes */

template <int BITS> struct geo {
	static constexpr int WN = BITS == 8 ? 32 : 64;
	static constexpr int NF = WN / 8;
	/* bytes of a stripe's 32-k group of codes: two tiles, and for 6 bits the
	 * plane of their high bits after them (docs/layout-marlin.md §marlin_i6) */
	static constexpr int GB = BITS == 6 ? 3 * TILE_BYTES : 2 * TILE_BYTES;
	/* a warp's scales of one stage: fp16 per (group, column) (i4z/i8z: and the
	 * offsets after them); i6: int8 per (k16 tile, column), then the fp16 d of
	 * each group's 256-block (its own copy per group: a split may start mid-block) */
	static constexpr int SG = BITS == 6 ? 256 : WN * 2;
};

template <int BITS, int MT, bool ZP> struct smem_plan {
	static constexpr int A = 16 * MT * 128;                        /* (16·MT rows, 64 k) fp16 */
	static constexpr int B = WARPS * GROUPS_PER_STAGE * geo<BITS>::GB; /* each warp's 2 groups of codes */
	static constexpr int SW = GROUPS_PER_STAGE * geo<BITS>::SG * (ZP ? 2 : 1); /* a warp's scales (+offsets) */
	static constexpr int S = WARPS * SW;
	static constexpr int STAGE = A + B + S;
	static constexpr int TOTAL = STAGES * STAGE;
};

/* Column ranges of C with outputs of their own (qc_marlin_gemm_args.part_*: a
 * fused matrix's parts); n = 0: all of C is c. */
struct c_parts {
	void *c[QC_MARLIN_MAX_PARTS];
	size_t ldc[QC_MARLIN_MAX_PARTS], col0[QC_MARLIN_MAX_PARTS];
	int n;
};

/* Where column col of C goes: its output (c or a part's), that output's row
 * stride, and the column there. Columns of one 8-column tile never straddle parts
 * (col0 % 8 == 0). Resolved once per column a thread stores. */
struct c_col {
	void *c;
	size_t ldc, col;
};
static_assert(QC_MARLIN_MAX_PARTS == 2, "c_where tests two parts");
__device__ __forceinline__ c_col c_where(void *c, size_t ldc, const c_parts cp, size_t col)
{
	c_col w = { c, ldc, col };
	if (cp.n > 0 && col >= cp.col0[0])
		w = { cp.c[0], cp.ldc[0], col - cp.col0[0] };
	if (cp.n > 1 && col >= cp.col0[1])
		w = { cp.c[1], cp.ldc[1], col - cp.col0[1] };
	return w;
}

struct kparams {
	const __half *a;   /* (m, k) */
	const uint8_t *w;  /* packed slice */
	void *c;           /* (m, ldc), f32 or f16 */
	float *ws;         /* (splits, m, n) partials when splits > 1 */
	const int32_t *expert; /* per-row slice (one row per block), or NULL */
	/* grouped rows (the warp-specialized kernel; qc_marlin_gemm_args says what):
	 * block x is tile x; NULL tiles: off */
	const int32_t *tiles, *n_tiles, *seg_end, *rows;
	size_t mat_stride, ldc;
	int m, n, k, groups, g_per_split, splits, c_f16;
	size_t stripe_bytes; /* codes (k/16 tiles) then scales of one stripe */
};
/* kparams stays at 128 bytes: past that nvcc addresses the whole parameter block
 * through a pointer in every kernel that takes it, main loops included (the
 * warp-specialized GEMM 5-15% slower on an H200); the output parts (c_parts) are
 * each kernel's parameter of their own. */
static_assert(sizeof(kparams) <= 128, "kparams past 128 bytes");

/* One output value of the GEMM at (token, column col, which goes to w): the
 * split's fp32 partial when K is split, else C in fp16 or fp32 (the wgmma kernels'
 * epilogues). */
__device__ __forceinline__ void store_at(const kparams &p, const c_col &w, int tok, size_t col, float v)
{
	if (p.splits > 1)
		p.ws[((size_t)blockIdx.z * p.m + tok) * p.n + col] = v;
	else if (p.c_f16)
		((__half *)w.c)[(size_t)tok * w.ldc + w.col] = __float2half_rn(v);
	else
		((float *)w.c)[(size_t)tok * w.ldc + w.col] = v;
}

__device__ __forceinline__ void store_c(const kparams &p, const c_parts &cp, int tok, size_t col, float v)
{
	store_at(p, c_where(p.c, p.ldc, cp, col), tok, col, v);
}

/* Raises kernel's dynamic shared-memory limit to smem, then *per_sm = the blocks of
 * `threads` one SM holds (every marlin GEMM kernel's occupancy query; `what` names it
 * in errors). */
template <typename K>
int kernel_occupancy(K kernel, int threads, int smem, const char *what, int *per_sm, struct qc_err *err)
{
	cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
	if (e != cudaSuccess)
		return qc_err_set(err, QC_ECUDA, NULL, NULL, -1, "%s: raising the shared-memory limit: %s (%s)", what,
				  cudaGetErrorString(e), cudaGetErrorName(e));
	e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kernel, threads, smem);
	if (e != cudaSuccess)
		return qc_err_set(err, QC_ECUDA, NULL, NULL, -1, "%s: occupancy: %s (%s)", what, cudaGetErrorString(e),
				  cudaGetErrorName(e));
	return QC_OK;
}

__device__ __forceinline__ __half2 h2(uint32_t u)
{
	__half2 h;
	memcpy(&h, &u, 4);
	return h;
}

__device__ __forceinline__ uint32_t u32(__half2 h)
{
	uint32_t u;
	memcpy(&u, &h, 4);
	return u;
}

/* One i4 word -> fragments 2w (b[0], b[1]) and 2w+1 (b[2], b[3]), codes − 8.
 * Nibbles (p, p+4) are one half pair: or-ing a nibble into the mantissa of
 * 1024.0 (0x6400) gives 1024 + q (low) or 1024 + 16q (next nibble), exactly. */
__device__ __forceinline__ void dq_i4(uint32_t q, uint32_t b[4])
{
	const __half2 k1032 = h2(0x64086408u), k1_16 = h2(0x2c002c00u), km72 = h2(0xd480d480u);
	b[0] = u32(__hsub2(h2((q & 0x000f000fu) | 0x64006400u), k1032));
	b[1] = u32(__hfma2(h2((q & 0x00f000f0u) | 0x64006400u), k1_16, km72));
	q >>= 8;
	b[2] = u32(__hsub2(h2((q & 0x000f000fu) | 0x64006400u), k1032));
	b[3] = u32(__hfma2(h2((q & 0x00f000f0u) | 0x64006400u), k1_16, km72));
}

/* i4z: one word -> fragments 2w, 2w+1 as the plain codes 0..15 (exact halves). */
__device__ __forceinline__ void dq_i4u(uint32_t q, uint32_t b[4])
{
	const __half2 k1024 = h2(0x64006400u), k1_16 = h2(0x2c002c00u), km64 = h2(0xd400d400u);
	b[0] = u32(__hsub2(h2((q & 0x000f000fu) | 0x64006400u), k1024));
	b[1] = u32(__hfma2(h2((q & 0x00f000f0u) | 0x64006400u), k1_16, km64));
	q >>= 8;
	b[2] = u32(__hsub2(h2((q & 0x000f000fu) | 0x64006400u), k1024));
	b[3] = u32(__hfma2(h2((q & 0x00f000f0u) | 0x64006400u), k1_16, km64));
}

/* marlin_i6: n8 tile j's fragment (b[0]: k = 2c, 2c+1; b[1]: 2c+8, 2c+9) from the
 * word of low nibbles (marlin_i4's, shifted so tile j's byte pair is lowest) and
 * the word of high bits (shifted alike; this word's pairs at sh, sh+2, sh+16, sh+18).
 * The 6-bit code goes into the mantissa of 1024.0 as dq_i4 does (1024 + q, or
 * 1024 + 16q for the second nibble), so q − 32 comes out exact in a half; then
 * ds·(q − 32) is exact in a float (ds = d·sc: 11 + 7 bits, times 5 + 1) and one
 * rounding makes the fp16 weight, the value of the layout's fp16 decode. */
__device__ __forceinline__ void dq_i6(uint32_t lo, uint32_t hi, int sh, float ds, uint32_t b[2])
{
	const __half2 k1056 = h2(0x64206420u), k1_16 = h2(0x2c002c00u), km96 = h2(0xd600d600u);
	const uint32_t h = hi >> sh;
	const uint32_t p0 = (lo & 0x000f000fu) | ((h & 0x00030003u) << 4) | 0x64006400u;
	const uint32_t p1 = (lo & 0x00f000f0u) | (((h >> 2) & 0x00030003u) << 8) | 0x64006400u;
	const float2 q0 = __half22float2(__hsub2(h2(p0), k1056));
	const float2 q1 = __half22float2(__hfma2(h2(p1), k1_16, km96));
	b[0] = u32(__floats2half2_rn(ds * q0.x, ds * q0.y));
	b[1] = u32(__floats2half2_rn(ds * q1.x, ds * q1.y));
}

/* One i8 word (signed bytes k, k+1, k+8, k+9) -> fragment b[0], b[1]: the bias
 * flip makes byte u = q + 128, and 0x64uu is the half 1024 + u. */
__device__ __forceinline__ void dq_i8(uint32_t q, uint32_t b[2])
{
	const __half2 k1152 = h2(0x64806480u);
	uint32_t x = q ^ 0x80808080u;
	b[0] = u32(__hsub2(h2(__byte_perm(x, 0x64646464u, 0x4140)), k1152));
	b[1] = u32(__hsub2(h2(__byte_perm(x, 0x64646464u, 0x4342)), k1152));
}

__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool pred)
{
	unsigned s = (unsigned)__cvta_generic_to_shared(dst);
	int n = pred ? 16 : 0; /* 0: nothing is read, the 16 bytes are zero-filled */
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(n));
}

__device__ __forceinline__ void cp_commit()
{
	asm volatile("cp.async.commit_group;\n" ::);
}

template <int N> __device__ __forceinline__ void cp_wait()
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* The weight half of stage st: each warp's codes and scales of the stage's (up to)
 * 2 groups, loaded by that warp (the first 4 warps of the block) into sb (WARPS·2·GB
 * bytes of codes) and ss (WARPS·SW of scales), which follow the stage's activations. */
template <int BITS, bool ZP>
__device__ __forceinline__ void load_stage_w(const kparams &p, uint8_t *sb, uint8_t *ss, bool has_w,
					     const uint8_t *wst, const uint8_t *wsc, int g, int n_g)
{
	using G = geo<BITS>;
	constexpr int SW = GROUPS_PER_STAGE * G::SG * (ZP ? 2 : 1);
	const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % WARPS;
	if (!has_w || threadIdx.x >= THREADS) /* codes and scales: the first 4 warps */
		return;
	for (int t = 0; t < n_g * G::GB / TILE_BYTES; t++)
		cp_async16(sb + warp * GROUPS_PER_STAGE * G::GB + t * TILE_BYTES + lane * 16,
			   wst + (size_t)g * G::GB + t * TILE_BYTES + lane * 16, true);
	if constexpr (BITS == 6) {
		/* lanes 0-15: the int8 scales of both groups (128 bytes each, contiguous);
		 * lanes 16-31: each group's 128 bytes of d (its 256-block's) */
		uint8_t *dst = ss + warp * SW + lane * 16;
		if (lane < 16) {
			if (lane < 8 * n_g)
				cp_async16(dst, wsc + (size_t)g * 128 + lane * 16, true);
		} else if ((lane - 16) / 8 < n_g) {
			const int gg = (lane - 16) / 8;
			cp_async16(dst, wsc + (size_t)p.groups * 128 + (size_t)((g + gg) / 8) * 128 + (lane % 8) * 16, true);
		}
		return;
	}
	/* scales of n_g groups (and, i4z/i8z, their offsets G groups further on) */
	const int half = ZP ? lane / 16 : 0, l16 = ZP ? lane % 16 : lane;
	if (l16 * 16 < n_g * G::WN * 2)
		cp_async16(ss + warp * SW + half * GROUPS_PER_STAGE * G::WN * 2 + l16 * 16,
			   wsc + (size_t)half * p.groups * G::WN * 2 + (size_t)g * G::WN * 2 + l16 * 16, true);
}

/* Stage st of the pipeline: 64 k of the block's BM token rows (XOR-swizzled 128-byte
 * rows: 16-byte chunk ch of row r at chunk ch ^ (r % 8), which is also wgmma's 128-byte
 * swizzle when the region is 1024-byte aligned), then each warp's codes and scales of
 * the stage's (up to) 2 groups. `stage` is the stage's base, its size SP::STAGE-like:
 * A (BM·128 bytes), the codes (WARPS·2·GB) and the scales (WARPS·SW) in that order. */
template <int BITS, bool ZP, int BM>
__device__ __forceinline__ void load_stage(const kparams &p, uint8_t *stage, int m0, int m_end, bool has_w,
					   const uint8_t *wst, const uint8_t *wsc, int g_begin, int g_end, int it)
{
	using G = geo<BITS>;
	uint8_t *sa = stage, *sb = sa + BM * 128, *ss = sb + WARPS * GROUPS_PER_STAGE * G::GB;
	const int g = g_begin + 2 * it, n_g = min(GROUPS_PER_STAGE, g_end - g);
	for (int i = threadIdx.x; i < BM * 8; i += blockDim.x) {
		int row = i / 8, ch = i % 8;
		bool ok = m0 + row < m_end && ch < 4 * n_g;
		const __half *src = ok ? p.a + (size_t)(m0 + row) * p.k + (size_t)g * 32 + ch * 8 : p.a;
		cp_async16(sa + row * 128 + ((ch ^ (row % 8)) * 16), src, ok);
	}
	load_stage_w<BITS, ZP>(p, sb, ss, has_w, wst, wsc, g, n_g);
}

/* This lane's fp16 B fragments of n8 tiles J0 .. J0+NJ-1 of its warp's stripe for
 * k16 tile ks2 of group gg of a stage (b[j][0]: k = 2c, 2c+1; b[j][1]: 2c+8, 2c+9;
 * column lane / 4; b[j] is tile J0 + j), scaled: the weights the layout's decode
 * gives. sb, ss: the stage's codes and scales (load_stage's regions); warp: the
 * stripe's warp slot in the block (0-3). */
template <int BITS, bool ZP, int J0 = 0, int NJ = geo<BITS>::NF>
__device__ __forceinline__ void frag_b(const uint8_t *sb, const uint8_t *ss, int warp, int lane, int gg, int ks2,
				       uint32_t (&b)[NJ][2])
{
	using G = geo<BITS>;
	constexpr int SW = GROUPS_PER_STAGE * G::SG * (ZP ? 2 : 1);
	static_assert(J0 >= 0 && NJ > 0 && J0 + NJ <= G::NF && (BITS != 4 || (J0 % 2 == 0 && NJ % 2 == 0)),
		      "whole words of the lane's 16 bytes");
	if constexpr (BITS == 6) {
		/* marlin_i6's group: its two tiles and high-bit plane, this lane's 8 int8
		 * scales per tile and 8 fp16 d (one per n8 tile's column) */
		const uint8_t *unit = sb + warp * GROUPS_PER_STAGE * G::GB + gg * G::GB;
		const uint8_t *sp = ss + warp * SW + 16 * (lane / 4);
		const uint4 hb = *(const uint4 *)(unit + 2 * TILE_BYTES + lane * 16);
		const uint4 d4 = *(const uint4 *)(sp + 256 + gg * 128);
		const uint32_t dw[4] = { d4.x, d4.y, d4.z, d4.w };
		const uint4 bw = *(const uint4 *)(unit + ks2 * TILE_BYTES + lane * 16);
		const uint2 s8 = *(const uint2 *)(sp + gg * 128 + 8 * ks2);
		const uint32_t words[4] = { bw.x, bw.y, bw.z, bw.w };
		const uint32_t hw[2] = { ks2 ? hb.z : hb.x, ks2 ? hb.w : hb.y };
#pragma unroll
		for (int jj = 0; jj < NJ; jj++) {
			const int j = J0 + jj, wi = j / 2, t = j % 2;
			const float d = __half2float(__ushort_as_half((unsigned short)(dw[j / 2] >> (16 * (j % 2)))));
			const float ds = d * (float)(int8_t)(((j < 4 ? s8.x : s8.y) >> (8 * (j % 4))) & 0xff);
			dq_i6(words[wi] >> (8 * t), hw[wi / 2] >> (8 * t), 4 * (wi % 2), ds, b[jj]);
		}
		return;
	}
	/* this lane's NF scales, one per n8 tile, in one load */
	__half sc[G::NF], of[G::NF];
	const uint8_t *sp = ss + warp * SW + gg * G::WN * 2 + (lane / 4) * G::NF * 2;
	if constexpr (BITS == 4)
		*(uint4 *)sc = *(const uint4 *)sp;
	else
		*(uint2 *)sc = *(const uint2 *)sp;
	if constexpr (ZP && BITS == 4)
		*(uint4 *)of = *(const uint4 *)(sp + GROUPS_PER_STAGE * G::WN * 2);
	else if constexpr (ZP)
		*(uint2 *)of = *(const uint2 *)(sp + GROUPS_PER_STAGE * G::WN * 2);
	const uint4 bw = *(const uint4 *)(sb + (warp * KS_PER_STAGE + 2 * gg + ks2) * TILE_BYTES + lane * 16);
	const uint32_t words[4] = { bw.x, bw.y, bw.z, bw.w };
	/* i4: word w holds tiles 2w, 2w+1; i8: word w tile w */
	constexpr int W0 = BITS == 4 ? J0 / 2 : J0, NW = BITS == 4 ? NJ / 2 : NJ;
#pragma unroll
	for (int w = W0; w < W0 + NW; w++) {
		if constexpr (BITS == 4) {
			uint32_t t[4];
			if constexpr (ZP)
				dq_i4u(words[w], t);
			else
				dq_i4(words[w], t);
			b[2 * w - J0][0] = t[0];
			b[2 * w - J0][1] = t[1];
			b[2 * w + 1 - J0][0] = t[2];
			b[2 * w + 1 - J0][1] = t[3];
		} else {
			dq_i8(words[w], b[w - J0]);
		}
	}
#pragma unroll
	for (int jj = 0; jj < NJ; jj++) {
		__half2 s2 = __half2half2(sc[J0 + jj]);
		if constexpr (ZP) { /* code·s + o, one rounding */
			__half2 o2 = __half2half2(of[J0 + jj]);
			b[jj][0] = u32(__hfma2(h2(b[jj][0]), s2, o2));
			b[jj][1] = u32(__hfma2(h2(b[jj][1]), s2, o2));
		} else {
			b[jj][0] = u32(__hmul2(h2(b[jj][0]), s2));
			b[jj][1] = u32(__hmul2(h2(b[jj][1]), s2));
		}
	}
}

} /* namespace qc_mrl */

#endif
