/* marlin_gemm.cu — C = A·Wᵀ: fp16 activations (m, k) × marlin-packed int4/int8 weights
 * (group-32 fp16 scales, i4z/i8z offsets; docs/layout-marlin.md), fp32 or fp16 out.
 * A block = 4 warps × one stripe each × 16·MT tokens. A warp streams its stripe with
 * one 16-byte cp.async per lane per k16 tile and reads back one 16-byte shared load:
 * the lane's whole B operand for 8 (i4) / 4 (i8) n8 tiles (i6: and once per 32 k the
 * lane's 16 bytes of the high-bit plane, docs/layout-marlin.md). A is staged once per block
 * (XOR-swizzled rows, ldmatrix.x4); 4 cp.async stages of 64 k. Small m splits K
 * (fp32 partials summed in a fixed order by a second kernel: deterministic).
 * Weights become fp16(d·(q−8)), fp16(d·q) or fp16(q·s + o) (i8z: q signed), sums fp32;
 * marlin_i6 (q6_K, 6-bit codes): fp16(d·sc·(q−32)), the product exact in a float.
 * C reference: runtime/ops/marlin_gemm.c. Fragment-ordered weights: IST-DASLab Marlin's
 * idea (facts only). Index grammar: m tokens, n columns, k reduction, g a 32-k group,
 * st a stage, mt an m16 tile, j an n8 tile of the stripe, ks a k16 tile of a stage.
 */
#include "marlin_gemm.cuh"
#include "pdl.cuh"

extern "C" {
#include "layout_marlin.h"
}

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace {

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

struct kparams {
	const __half *a;   /* (m, k) */
	const uint8_t *w;  /* packed slice */
	void *c;           /* (m, ldc), f32 or f16 */
	float *ws;         /* (splits, m, n) partials when splits > 1 */
	const int32_t *expert; /* per-row slice (one row per block), or NULL */
	size_t mat_stride, ldc;
	int m, n, k, groups, g_per_split, splits, c_f16;
	size_t stripe_bytes; /* codes (k/16 tiles) then scales of one stripe */
};

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

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p)
{
	unsigned s = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(s));
}

__device__ __forceinline__ void mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		     "{%0,%1,%2,%3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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

template <int BITS, int MT, bool ZP>
__global__ void __launch_bounds__(THREADS) marlin_gemm_kernel(const kparams p)
{
	qc_pdl_enter();
	using G = geo<BITS>;
	using SP = smem_plan<BITS, MT, ZP>;
	constexpr int BM = 16 * MT;
	extern __shared__ __align__(16) uint8_t smem[];
	const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	/* MoE rows may each use another slice: then a block takes one row */
	const int m0 = p.expert ? blockIdx.x : blockIdx.x * BM;
	const int m_end = p.expert ? m0 + 1 : p.m;
	const uint8_t *w = p.expert ? p.w + (size_t)p.expert[m0] * p.mat_stride : p.w;
	const int stripe = blockIdx.y * WARPS + warp;
	const bool has_w = stripe < p.n / G::WN; /* warp-uniform; idle warps still help load A */
	const int g_begin = blockIdx.z * p.g_per_split;
	const int g_end = min(p.groups, g_begin + p.g_per_split);
	const int iters = (g_end - g_begin + 1) / 2;
	const uint8_t *wst = w + (size_t)stripe * p.stripe_bytes;      /* this warp's stripe */
	const uint8_t *wsc = wst + (size_t)p.groups * G::GB;            /* its scales */

	auto load = [&](int st, int it) {
		uint8_t *sa = smem + st * SP::STAGE, *sb = sa + SP::A, *ss = sb + SP::B;
		const int g = g_begin + 2 * it, n_g = min(GROUPS_PER_STAGE, g_end - g);
		for (int i = threadIdx.x; i < BM * 8; i += THREADS) {
			int row = i / 8, ch = i % 8;
			bool ok = m0 + row < m_end && ch < 4 * n_g;
			const __half *src = ok ? p.a + (size_t)(m0 + row) * p.k + (size_t)g * 32 + ch * 8 : p.a;
			cp_async16(sa + row * 128 + ((ch ^ (row % 8)) * 16), src, ok);
		}
		if (!has_w)
			return;
		for (int t = 0; t < n_g * G::GB / TILE_BYTES; t++)
			cp_async16(sb + warp * GROUPS_PER_STAGE * G::GB + t * TILE_BYTES + lane * 16,
				   wst + (size_t)g * G::GB + t * TILE_BYTES + lane * 16, true);
		if constexpr (BITS == 6) {
			/* lanes 0-15: the int8 scales of both groups (128 bytes each, contiguous);
			 * lanes 16-31: each group's 128 bytes of d (its 256-block's) */
			uint8_t *dst = ss + warp * SP::SW + lane * 16;
			if (lane < 16) {
				if (lane < 8 * n_g)
					cp_async16(dst, wsc + (size_t)g * 128 + lane * 16, true);
			} else if ((lane - 16) / 8 < n_g) {
				const int gg = (lane - 16) / 8;
				cp_async16(dst, wsc + (size_t)p.groups * 128 + (size_t)((g + gg) / 8) * 128 + (lane % 8) * 16,
					   true);
			}
			return;
		}
		/* scales of n_g groups (and, i4z/i8z, their offsets G groups further on) */
		const int half = ZP ? lane / 16 : 0, l16 = ZP ? lane % 16 : lane;
		if (l16 * 16 < n_g * G::WN * 2)
			cp_async16(ss + warp * SP::SW + half * GROUPS_PER_STAGE * G::WN * 2 + l16 * 16,
				   wsc + (size_t)half * p.groups * G::WN * 2 + (size_t)g * G::WN * 2 + l16 * 16, true);
	};

	float acc[MT][G::NF][4];
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
#pragma unroll
		for (int j = 0; j < G::NF; j++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[mt][j][e] = 0.0f;

	for (int st = 0; st < STAGES - 1; st++) {
		if (st < iters)
			load(st, st);
		cp_commit();
	}
	for (int it = 0; it < iters; it++) {
		cp_wait<STAGES - 2>();
		__syncthreads(); /* stage `it` landed; everyone is done with stage it-1 */
		if (it + STAGES - 1 < iters)
			load((it + STAGES - 1) % STAGES, it + STAGES - 1);
		cp_commit();
		if (!has_w)
			continue;
		const uint8_t *sa = smem + (it % STAGES) * SP::STAGE, *sb = sa + SP::A, *ss = sb + SP::B;
		const int n_g = min(GROUPS_PER_STAGE, g_end - (g_begin + 2 * it));
		/* this lane's A fragments of k16 tile ks, every m16 tile (ldmatrix.x4 of
		 * the swizzled rows) */
		auto load_a = [&](const int ks, uint32_t (&af)[MT][4]) {
#pragma unroll
			for (int mt = 0; mt < MT; mt++) {
				int row = mt * 16 + ((lane / 8) % 2) * 8 + lane % 8, ch = 2 * ks + lane / 16;
				ldsm_x4(af[mt], sa + row * 128 + ((ch ^ (row % 8)) * 16));
			}
		};
		/* marlin_i6's group: the unit's two tiles and high-bit plane, this lane's
		 * 8 int8 scales per tile and 8 fp16 d (one per n8 tile's column) */
		auto group6 = [&](const int gg) {
			const uint8_t *unit = sb + warp * GROUPS_PER_STAGE * G::GB + gg * G::GB;
			const uint8_t *sp = ss + warp * SP::SW + 16 * (lane / 4);
			const uint4 hb = *(const uint4 *)(unit + 2 * TILE_BYTES + lane * 16);
			const uint4 d4 = *(const uint4 *)(sp + 256 + gg * 128);
			const uint32_t dw[4] = { d4.x, d4.y, d4.z, d4.w };
#pragma unroll
			for (int ks2 = 0; ks2 < 2; ks2++) {
				const int ks = 2 * gg + ks2;
				uint32_t af[MT][4];
				load_a(ks, af);
				const uint4 bw = *(const uint4 *)(unit + ks2 * TILE_BYTES + lane * 16);
				const uint2 s8 = *(const uint2 *)(sp + gg * 128 + 8 * ks2);
				const uint32_t words[4] = { bw.x, bw.y, bw.z, bw.w };
				const uint32_t hw[2] = { ks2 ? hb.z : hb.x, ks2 ? hb.w : hb.y };
#pragma unroll
				for (int j = 0; j < G::NF; j++) {
					const int wi = j / 2, t = j % 2;
					const float d = __half2float(__ushort_as_half(
						(unsigned short)(dw[j / 2] >> (16 * (j % 2)))));
					const float ds = d * (float)(int8_t)(((j < 4 ? s8.x : s8.y) >> (8 * (j % 4))) & 0xff);
					uint32_t b[2];
					dq_i6(words[wi] >> (8 * t), hw[wi / 2] >> (8 * t), 4 * (wi % 2), ds, b);
#pragma unroll
					for (int mt = 0; mt < MT; mt++)
						mma16816(acc[mt][j], af[mt], b[0], b[1]);
				}
			}
		};
		/* one 32-k group: 2 k16 tiles; a lambda so a full stage is straight-line
		 * code the scheduler can interleave across both groups */
		auto group = [&](const int gg) {
			if constexpr (BITS == 6) {
				group6(gg);
				return;
			}
			/* this lane's NF scales, one per n8 tile, in one load */
			__half sc[G::NF], of[G::NF];
			const uint8_t *sp = ss + warp * SP::SW + gg * G::WN * 2 + (lane / 4) * G::NF * 2;
			if constexpr (BITS == 4)
				*(uint4 *)sc = *(const uint4 *)sp;
			else
				*(uint2 *)sc = *(const uint2 *)sp;
			if constexpr (ZP && BITS == 4)
				*(uint4 *)of = *(const uint4 *)(sp + GROUPS_PER_STAGE * G::WN * 2);
			else if constexpr (ZP)
				*(uint2 *)of = *(const uint2 *)(sp + GROUPS_PER_STAGE * G::WN * 2);
#pragma unroll
			for (int ks2 = 0; ks2 < 2; ks2++) {
				const int ks = 2 * gg + ks2;
				uint32_t af[MT][4];
				load_a(ks, af);
				const uint4 bw = *(const uint4 *)(sb + (warp * KS_PER_STAGE + ks) * TILE_BYTES + lane * 16);
				const uint32_t words[4] = { bw.x, bw.y, bw.z, bw.w };
				uint32_t b[G::NF][2];
#pragma unroll
				for (int w = 0; w < 4; w++) {
					if constexpr (BITS == 4) {
						uint32_t t[4];
						if constexpr (ZP)
							dq_i4u(words[w], t);
						else
							dq_i4(words[w], t);
						b[(2 * w) % G::NF][0] = t[0];
						b[(2 * w) % G::NF][1] = t[1];
						b[(2 * w + 1) % G::NF][0] = t[2];
						b[(2 * w + 1) % G::NF][1] = t[3];
					} else {
						dq_i8(words[w], b[w % G::NF]);
					}
				}
#pragma unroll
				for (int j = 0; j < G::NF; j++) {
					__half2 s2 = __half2half2(sc[j]);
					if constexpr (ZP) { /* code·s + o, one rounding */
						__half2 o2 = __half2half2(of[j]);
						b[j][0] = u32(__hfma2(h2(b[j][0]), s2, o2));
						b[j][1] = u32(__hfma2(h2(b[j][1]), s2, o2));
					} else {
						b[j][0] = u32(__hmul2(h2(b[j][0]), s2));
						b[j][1] = u32(__hmul2(h2(b[j][1]), s2));
					}
#pragma unroll
					for (int mt = 0; mt < MT; mt++)
						mma16816(acc[mt][j], af[mt], b[j][0], b[j][1]);
				}
			}
		};
		if (n_g == GROUPS_PER_STAGE) {
			group(0);
			group(1);
		} else {
			group(0);
		}
	}
	cp_wait<0>();
	if (!has_w)
		return;
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
#pragma unroll
		for (int j = 0; j < G::NF; j++)
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const int r = m0 + mt * 16 + lane / 4 + 8 * h;
				const size_t col = (size_t)stripe * G::WN + 8 * j + 2 * (lane % 4);
				if (r >= m_end)
					continue;
				const float v0 = acc[mt][j][2 * h], v1 = acc[mt][j][2 * h + 1];
				if (p.splits > 1)
					*(float2 *)(p.ws + ((size_t)blockIdx.z * p.m + r) * p.n + col) = make_float2(v0, v1);
				else if (p.c_f16)
					*(__half2 *)((__half *)p.c + (size_t)r * p.ldc + col) = __floats2half2_rn(v0, v1);
				else
					*(float2 *)((float *)p.c + (size_t)r * p.ldc + col) = make_float2(v0, v1);
			}
}

/* C = sum of the split partials, in split order (deterministic). */
__global__ void marlin_reduce_kernel(const float *ws, void *c, int splits, size_t n, size_t mn, size_t ldc,
				     int c_f16)
{
	qc_pdl_enter();
	size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 2;
	if (i >= mn)
		return;
	const size_t o = i / n * ldc + i % n;
	float2 s = make_float2(0.0f, 0.0f);
	for (int z = 0; z < splits; z++) {
		float2 v = *(const float2 *)(ws + (size_t)z * mn + i);
		s.x += v.x;
		s.y += v.y;
	}
	if (c_f16)
		*(__half2 *)((__half *)c + o) = __floats2half2_rn(s.x, s.y);
	else
		*(float2 *)((float *)c + o) = s;
}

template <int BITS, int MT, bool ZP>
int launch(const kparams &p, dim3 grid, cudaStream_t s, struct qc_err *err)
{
	(void)qc_launch(marlin_gemm_kernel<BITS, MT, ZP>, grid, dim3(THREADS), smem_plan<BITS, MT, ZP>::TOTAL, s, p);
	return qc_cuda_check(cudaGetLastError(), "marlin_gemm_kernel", err);
}

/* Blocks of this configuration one SM holds; raises the kernel's shared-memory
 * limit first (launch relies on that: every call plans before launching). */
template <int BITS, int MT, bool ZP>
int occupancy(int *per_sm, struct qc_err *err)
{
	const int smem = smem_plan<BITS, MT, ZP>::TOTAL;
	int rc = qc_cuda_check(cudaFuncSetAttribute(marlin_gemm_kernel<BITS, MT, ZP>,
						    cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
			       "marlin_gemm: raising the shared-memory limit", err);
	if (!rc)
		rc = qc_cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, marlin_gemm_kernel<BITS, MT, ZP>,
										 THREADS, smem),
				   "marlin_gemm: occupancy", err);
	return rc;
}

typedef int (*launch_fn)(const kparams &, dim3, cudaStream_t, struct qc_err *);
typedef int (*occupancy_fn)(int *, struct qc_err *);

/* The instantiated configurations: (bits, m16 tiles per block, offsets). */
const struct config {
	int bits, mt, zp;
	launch_fn launch;
	occupancy_fn occupancy;
} configs[] = {
#define QC_MARLIN_CFG(B, M, Z) { B, M, Z, launch<B, M, Z>, occupancy<B, M, Z> }
	QC_MARLIN_CFG(4, 1, false), QC_MARLIN_CFG(4, 2, false), QC_MARLIN_CFG(4, 4, false),
	QC_MARLIN_CFG(8, 1, false), QC_MARLIN_CFG(8, 2, false), QC_MARLIN_CFG(8, 4, false),
	QC_MARLIN_CFG(4, 1, true),  QC_MARLIN_CFG(4, 2, true),  QC_MARLIN_CFG(4, 4, true),
	QC_MARLIN_CFG(8, 1, true),  QC_MARLIN_CFG(8, 2, true),  QC_MARLIN_CFG(8, 4, true),
	QC_MARLIN_CFG(6, 1, false), QC_MARLIN_CFG(6, 2, false), QC_MARLIN_CFG(6, 4, false),
#undef QC_MARLIN_CFG
};

struct plan {
	const struct config *cfg;
	int splits, g_per_split;
	int64_t m_blocks, n_blocks;
};

/* Tokens per block from m (one row per block for MoE rows). K is split so the
 * grid fills whole waves of resident blocks (waves / splits, the time per unit of
 * work, smallest; ties to fewer splits), keeping >= 8 groups (4 pipeline stages)
 * per split and the fp32 partials no larger than the weights. */
int make_plan(const struct qc_marlin_gemm_args *a, struct plan *pl, struct qc_err *err)
{
	const int bits = qc_marlin_bits(a->layout), zp = qc_marlin_has_offsets(a->layout);
	const int mt = a->expert || a->m <= 16 ? 1 : a->m <= 32 ? 2 : 4;
	pl->cfg = NULL;
	for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++)
		if (configs[i].bits == bits && configs[i].mt == mt && configs[i].zp == zp)
			pl->cfg = &configs[i];
	QC_ASSERT(pl->cfg); /* every (bits, mt, zp) chosen above is listed */
	int dev, n_sms, per_sm;
	int rc = qc_cuda_check(cudaGetDevice(&dev), "marlin_gemm: cudaGetDevice", err);
	if (!rc)
		rc = qc_cuda_check(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, dev),
				   "marlin_gemm: SM count", err);
	if (!rc)
		rc = pl->cfg->occupancy(&per_sm, err);
	if (rc)
		return rc;
	if (per_sm < 1)
		return qc_err_set(err, QC_ECUDA, NULL, NULL, -1, "marlin_gemm: no block of %d-bit x %d fits an SM",
				  bits, 16 * mt);
	const int groups = (int)(a->k / 32), wn = bits == 8 ? 32 : 64;
	pl->m_blocks = a->expert ? a->m : (a->m + 16 * mt - 1) / (16 * mt);
	pl->n_blocks = (a->n + WARPS * wn - 1) / (WARPS * wn);
	int s = 1;
	if (a->split == QC_MARLIN_SPLIT_FIXED) {
		s = a->split_k < 1 ? 1 : a->split_k > groups ? groups : a->split_k;
	} else {
		const int64_t blocks = pl->m_blocks * pl->n_blocks, slots = (int64_t)n_sms * per_sm;
		const double w_bytes = (double)a->n * (double)a->k * bits / 8;
		int64_t cap = (int64_t)(w_bytes / ((double)a->m * (double)a->n * 8));
		cap = cap < groups / 8 ? cap : groups / 8;
		double best = (double)((blocks + slots - 1) / slots);
		for (int64_t c = 2; c <= cap; c++) {
			double cost = (double)((blocks * c + slots - 1) / slots) / (double)c;
			if (cost < best) {
				best = cost;
				s = (int)c;
			}
		}
	}
	pl->g_per_split = (groups + s - 1) / s;
	pl->splits = (groups + pl->g_per_split - 1) / pl->g_per_split; /* no empty split */
	return QC_OK;
}

} /* namespace */

static size_t ws_bytes(const struct qc_marlin_gemm_args *a, const struct plan *pl)
{
	return pl->splits > 1 ? (size_t)pl->splits * (size_t)a->m * (size_t)a->n * sizeof(float) : 0;
}

extern "C" int qc_cuda_marlin_gemm_workspace(const struct qc_marlin_gemm_args *a, size_t *bytes, struct qc_err *err)
{
	struct plan pl;
	*bytes = 0;
	int rc = qc_marlin_gemm_check(a, err);
	if (!rc)
		rc = make_plan(a, &pl, err);
	if (!rc)
		*bytes = ws_bytes(a, &pl);
	return rc;
}

extern "C" int qc_cuda_marlin_gemm(const struct qc_marlin_gemm_args *a, cudaStream_t s, struct qc_err *err)
{
	int rc = qc_marlin_gemm_check(a, err);
	if (rc)
		return rc;
	if (!a->c || ((uintptr_t)a->a | (uintptr_t)a->w | (a->expert ? a->mat_stride : 0)) % 16 ||
	    (uintptr_t)a->c % 8 || a->ldc < a->n || a->ldc % 2)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "marlin_gemm: a, w (and mat_stride) need 16-byte alignment, c 8-byte alignment, "
				  "ldc (%lld) even and >= n (%lld)", (long long)a->ldc, (long long)a->n);
	struct plan pl;
	if ((rc = make_plan(a, &pl, err)))
		return rc;
	const size_t need = ws_bytes(a, &pl);
	if (need && (!a->workspace || a->workspace_bytes < need || (uintptr_t)a->workspace % 8))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "marlin_gemm: m=%lld n=%lld k=%lld splits K %d ways and needs %zu workspace bytes, got %zu",
				  (long long)a->m, (long long)a->n, (long long)a->k, pl.splits, need, a->workspace_bytes);
	uint64_t row;
	QC_ASSERT(qc_marlin_row_bytes(a->layout, a->type, a->k, &row) == QC_OK); /* the check passed */
	kparams p;
	p.a = (const __half *)a->a;
	p.w = (const uint8_t *)a->w;
	p.c = a->c;
	p.ws = (float *)a->workspace;
	p.expert = a->expert;
	p.mat_stride = a->mat_stride;
	p.ldc = (size_t)a->ldc;
	p.m = (int)a->m;
	p.n = (int)a->n;
	p.k = (int)a->k;
	p.groups = (int)(a->k / 32);
	p.g_per_split = pl.g_per_split;
	p.splits = pl.splits;
	p.c_f16 = a->c_type == QC_MARLIN_C_F16;
	p.stripe_bytes = (size_t)qc_marlin_stripe(a->layout) * row;
	dim3 grid((unsigned)pl.m_blocks, (unsigned)pl.n_blocks, (unsigned)pl.splits);
	if ((rc = pl.cfg->launch(p, grid, s, err)))
		return rc;
	if (pl.splits > 1) {
		size_t mn = (size_t)a->m * (size_t)a->n, pairs = mn / 2;
		(void)qc_launch(marlin_reduce_kernel, dim3((unsigned)((pairs + 255) / 256)), dim3(256), 0, s, p.ws, a->c, pl.splits, (size_t)a->n,
										      mn, p.ldc, p.c_f16);
		rc = qc_cuda_check(cudaGetLastError(), "marlin_reduce_kernel", err);
	}
	return rc;
}
