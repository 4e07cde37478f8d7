/* marlin_wgmma.cu — the marlin GEMM (C = A·Wᵀ, fp16 activations × marlin-packed
 * weights, fp32 sums) on Hopper's warpgroup MMA (sm_90a): the same blocks, stages and
 * weights as marlin_gemm.cu (marlin_gemm_frag.cuh), 64 or 128 tokens a block, with
 * the roles of the operands swapped. wgmma reads its B operand from shared memory and may
 * take A from registers; so the weights are A (the rows are output columns) and the
 * activations B: a stage's tokens × 64 k, which load_stage already lays out as
 * wgmma's K-major 128-byte swizzle (16-byte chunk c of token row r at c ^ (r % 8),
 * 8-row groups 1024 bytes apart). A lane's fp16 B fragments of n8 tiles 2i and 2i+1
 * (frag_b: column lane/4, k = 2c, 2c+1, 2c+8, 2c+9) are exactly its A fragment of an
 * m16 tile whose rows 0-7 are tile 2i's columns and rows 8-15 tile 2i+1's, so each
 * warp's stripe is the 16 rows it owns in NF/2 wgmma.m64nNk16 (warp w: rows 16w..;
 * N the block's tokens) and the marlin layouts feed wgmma unchanged. Each wgmma
 * reads the tokens' 16 k from shared memory through a descriptor; the 4 k16 steps
 * of a stage advance the descriptor's start by 32 bytes.
 *
 * Pipeline: 4 (or 6) stages of cp.async, loaded 2 (4) ahead; one wgmma group per
 * 32-k group, waited for before the next group's weights are decoded (ptxas
 * serializes wgmma whose register inputs are written while an earlier one is in
 * flight), so a decode overlaps another warpgroup's tensor-core work: with two
 * warpgroups a block (128 tokens, each warpgroup half of every stripe's n8 tiles)
 * the second runs a group behind the first (wg_stage).
 * Warps past the last stripe feed zeros and store nothing. K splits and their
 * fixed-order sum are marlin_gemm.cu's. Built for sm_90a only: elsewhere the kernel
 * body is empty and wg_supported says no. C reference: runtime/ops/marlin_gemm.c.
 */
#include "marlin_wgmma.cuh"
#include "marlin_gemm_frag.cuh"
#include "wgmma.cuh"
#include "pdl.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace {

using namespace qc_mrl;

template <int BITS, bool ZP, int NST, int WGS> struct wg_plan {
	static constexpr int A = 64 * WGS * 128; /* 64·WGS tokens × 64 k fp16: swizzle atoms of 8 rows */
	static constexpr int B = WARPS * GROUPS_PER_STAGE * geo<BITS>::GB;
	static constexpr int S = WARPS * GROUPS_PER_STAGE * geo<BITS>::SG * (ZP ? 2 : 1);
	/* every stage's A region on a 1024-byte boundary (the swizzle's period) */
	static constexpr int STAGE = (A + B + S + 1023) / 1024 * 1024;
	static constexpr int TOTAL = NST * STAGE + 1024; /* + the base's alignment */
};

#ifdef QC_WGMMA_BODY
/* Warpgroup WG's A fragments of group gg's two k16 tiles (the weights of n8 tiles
 * 2·NIW·WG .. of each warp's stripe); zeros for a warp past the last stripe. */
template <int BITS, bool ZP, int NIW, int WG>
__device__ __forceinline__ void wg_decode(const uint8_t *sb, const uint8_t *ss, int warp, int lane, bool has_w, int gg,
					  uint32_t (&a)[2][NIW][4])
{
#pragma unroll
	for (int ks2 = 0; ks2 < 2; ks2++) {
		uint32_t b[2 * NIW][2];
		if (has_w) {
			frag_b<BITS, ZP, 2 * NIW * WG, 2 * NIW>(sb, ss, warp, lane, gg, ks2, b);
		} else {
#pragma unroll
			for (int j = 0; j < 2 * NIW; j++)
				b[j][0] = b[j][1] = 0;
		}
#pragma unroll
		for (int i = 0; i < NIW; i++) {
			a[ks2][i][0] = b[2 * i][0];
			a[ks2][i][1] = b[2 * i + 1][0];
			a[ks2][i][2] = b[2 * i][1];
			a[ks2][i][3] = b[2 * i + 1][1];
		}
	}
}

/* 2·NIW wgmma of one group (B: the stage's activations at sa, k16 tiles 2gg, 2gg+1),
 * then the wait: every A fragment is in place before the fence (a register written
 * between a wgmma and the wait that retires it serializes them, ptxas C7513). */
template <int NIW, int N>
__device__ __forceinline__ void wg_mma(const uint8_t *sa, int gg, const uint32_t (&a)[2][NIW][4],
				       float (&acc)[NIW][N / 2])
{
	wg_fence();
#pragma unroll
	for (int ks2 = 0; ks2 < 2; ks2++) {
		const uint64_t desc = wg_desc(sa + (2 * gg + ks2) * 32);
#pragma unroll
		for (int i = 0; i < NIW; i++)
			wgmma_rs<N>(acc[i], a[ks2][i], desc);
	}
	wg_commit();
	wg_wait<0>();
}

/* Warpgroup WG's share of one stage. A warpgroup decodes, then waits for its own
 * wgmma; what overlaps is the other warpgroup's. So with two, the second runs one
 * group behind: it enters each stage with the previous stage's last group decoded
 * (held: its registers, that stage's activations still in place: the loads two
 * stages ahead overwrite the stage before it), starts its wgmma at once while the
 * first decodes, and decodes this stage's last group to hold for the next. */
template <int BITS, bool ZP, int WGS, int WG>
__device__ __forceinline__ void wg_stage(const uint8_t *sa, const uint8_t *sb, const uint8_t *ss, int warp, int lane,
					 bool has_w, int n_g, float (&acc)[geo<BITS>::NF / 2 / WGS][32 * WGS],
					 uint32_t (&held)[2][geo<BITS>::NF / 2 / WGS][4], const uint8_t *&held_sa,
					 int &held_gg)
{
	constexpr int NIW = geo<BITS>::NF / 2 / WGS;
	constexpr bool LAG = WGS == 2 && WG == 1;
	if (LAG && held_sa)
		wg_mma<NIW, 64 * WGS>(held_sa, held_gg, held, acc);
#pragma unroll
	for (int gg = 0; gg < GROUPS_PER_STAGE; gg++) {
		if (gg >= n_g)
			break;
		if (LAG && gg == n_g - 1) {
			wg_decode<BITS, ZP, NIW, WG>(sb, ss, warp, lane, has_w, gg, held);
			held_sa = sa;
			held_gg = gg;
			break;
		}
		uint32_t a[2][NIW][4];
		wg_decode<BITS, ZP, NIW, WG>(sb, ss, warp, lane, has_w, gg, a);
		wg_mma<NIW, 64 * WGS>(sa, gg, a, acc);
	}
}
#endif

/* NST stages, loaded NST - 2 ahead; WGS warpgroups, 64·WGS tokens a block. */
template <int BITS, bool ZP, int NST, int WGS>
__global__ void __launch_bounds__(THREADS * WGS) marlin_wgmma_kernel(const kparams p, const c_parts cp)
{
#ifdef QC_WGMMA_BODY
	qc_pdl_enter();
	using G = geo<BITS>;
	using SP = wg_plan<BITS, ZP, NST, WGS>;
	constexpr int AHEAD = NST - 2, BMT = 64 * WGS;
	constexpr int NIW = G::NF / 2 / WGS; /* wgmma per k16 tile and warpgroup */
	extern __shared__ uint8_t smem_raw[];
	uint8_t *smem = smem_raw + ((1024 - (uint32_t)__cvta_generic_to_shared(smem_raw) % 1024) % 1024);
	const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % WARPS, wgi = threadIdx.x / THREADS;
	const int m0 = blockIdx.x * BMT;
	const int stripe = blockIdx.y * WARPS + warp;
	const bool has_w = stripe < p.n / G::WN;
	const int g_begin = blockIdx.z * p.g_per_split;
	const int g_end = min(p.groups, g_begin + p.g_per_split);
	const int iters = (g_end - g_begin + 1) / 2;
	const uint8_t *wst = p.w + (size_t)stripe * p.stripe_bytes;
	const uint8_t *wsc = wst + (size_t)p.groups * G::GB;

	float acc[NIW][32 * WGS];
#pragma unroll
	for (int i = 0; i < NIW; i++)
#pragma unroll
		for (int e = 0; e < 32 * WGS; e++)
			acc[i][e] = 0.0f;

	uint32_t held[2][NIW][4]; /* the lagging warpgroup's decoded group (wg_stage) */
	const uint8_t *held_sa = NULL;
	int held_gg = 0;
	for (int st = 0; st < AHEAD; st++) {
		if (st < iters)
			load_stage<BITS, ZP, BMT>(p, smem + st * SP::STAGE, m0, p.m, has_w, wst, wsc, g_begin, g_end, st);
		cp_commit();
	}
	for (int it = 0; it < iters; it++) {
		cp_wait<AHEAD - 1>();
		/* cp.async wrote through the generic proxy; wgmma reads through the async one */
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
		__syncthreads(); /* stage it landed; stage it-2's wgmma groups were waited for */
		if (it + AHEAD < iters)
			load_stage<BITS, ZP, BMT>(p, smem + ((it + AHEAD) % NST) * SP::STAGE, m0, p.m, has_w, wst, wsc,
						  g_begin, g_end, it + AHEAD);
		cp_commit();
		const uint8_t *sa = smem + (it % NST) * SP::STAGE, *sb = sa + SP::A, *ss = sb + SP::B;
		const int n_g = min(GROUPS_PER_STAGE, g_end - (g_begin + 2 * it));
		if (WGS == 1 || wgi == 0)
			wg_stage<BITS, ZP, WGS, 0>(sa, sb, ss, warp, lane, has_w, n_g, acc, held, held_sa, held_gg);
		else
			wg_stage<BITS, ZP, WGS, WGS - 1>(sa, sb, ss, warp, lane, has_w, n_g, acc, held, held_sa, held_gg);
	}
	if (WGS == 2 && wgi == 1 && held_sa) /* the lagging warpgroup's last group */
		wg_mma<NIW, 64 * WGS>(held_sa, held_gg, held, acc);
	wg_wait<0>();
#pragma unroll
	for (int i = 0; i < NIW; i++)
#pragma unroll
		for (int e = 0; e < 32 * WGS; e++)
			reg_fence(acc[i][e]);
	cp_wait<0>();
	if (!has_w)
		return;
	/* acc[i][4t + e]: token 8t + 2c + (e & 1), column 16(NIW·wgi + i) + 8(e >> 1) + lane/4
	 * of the stripe */
	const int c = lane % 4, r = lane / 4;
#pragma unroll
	for (int i = 0; i < NIW; i++)
#pragma unroll
		for (int t = 0; t < 8 * WGS; t++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int tok = m0 + 8 * t + 2 * c + (e & 1);
				const size_t col = (size_t)stripe * G::WN + 16 * (NIW * wgi + i) + 8 * (e >> 1) + r;
				if (tok >= p.m)
					continue;
				store_c(p, cp, tok, col, acc[i][4 * t + e]);
			}
#else
	(void)p;
	(void)cp;
#endif
}

template <int BITS, bool ZP, int NST, int WGS>
int launch(const kparams &p, const c_parts &cp, dim3 grid, cudaStream_t s, struct qc_err *err)
{
	(void)qc_launch(marlin_wgmma_kernel<BITS, ZP, NST, WGS>, grid, dim3(THREADS * WGS),
			wg_plan<BITS, ZP, NST, WGS>::TOTAL, s, p, cp);
	return qc_cuda_check(cudaGetLastError(), "marlin_wgmma_kernel", err);
}

template <int BITS, bool ZP, int NST, int WGS> int occupancy(int *per_sm, struct qc_err *err)
{
	return kernel_occupancy(marlin_wgmma_kernel<BITS, ZP, NST, WGS>, THREADS * WGS, wg_plan<BITS, ZP, NST, WGS>::TOTAL,
				"marlin_wgmma", per_sm, err);
}

/* The instantiated (bits, offsets, stages, warpgroups): every marlin layout. */
const struct wg_config {
	int bits, zp, nst, wgs;
	int (*launch)(const kparams &, const c_parts &, dim3, cudaStream_t, struct qc_err *);
	int (*occupancy)(int *, struct qc_err *);
} wg_configs[] = {
#define QC_WG_CFG(B, Z, S, W) { B, Z, S, W, launch<B, Z, S, W>, occupancy<B, Z, S, W> }
#define QC_WG_ALL(S, W) QC_WG_CFG(4, false, S, W), QC_WG_CFG(8, false, S, W), QC_WG_CFG(4, true, S, W), \
			QC_WG_CFG(8, true, S, W), QC_WG_CFG(6, false, S, W)
	QC_WG_ALL(4, 1), QC_WG_ALL(6, 1), QC_WG_ALL(4, 2), QC_WG_ALL(6, 2),
#undef QC_WG_ALL
#undef QC_WG_CFG
};

int wg_stages = 6, wg_groups = 2, wg_form = 0; /* wg_tune; the backend's defaults */

const struct wg_config *wg_find(int bits, bool zp, int wgs)
{
	for (size_t i = 0; i < sizeof wg_configs / sizeof wg_configs[0]; i++)
		if (wg_configs[i].bits == bits && wg_configs[i].zp == (int)zp && wg_configs[i].nst == wg_stages &&
		    wg_configs[i].wgs == wgs)
			return &wg_configs[i];
	return NULL;
}

} /* namespace */

namespace qc_mrl {

int wg_supported(bool *yes, struct qc_err *err)
{
	int dev, major, minor;
	int rc = qc_cuda_check(cudaGetDevice(&dev), "marlin_wgmma: cudaGetDevice", err);
	if (!rc)
		rc = qc_cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev),
				   "marlin_wgmma: compute capability", err);
	if (!rc)
		rc = qc_cuda_check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev),
				   "marlin_wgmma: compute capability", err);
	*yes = !rc && major == 9 && minor == 0; /* the sm_90a cubin runs on 9.0 only */
	return rc;
}

void wg_tune(int stages, int warpgroups, int form)
{
	wg_stages = stages == 6 ? 6 : 4;
	wg_groups = warpgroups == 1 ? 1 : 2;
	wg_form = form == 1 || form == 2 ? form : 0;
	ws_set_form2(form == 2);
}

int wg_form_now(void)
{
	return wg_form;
}

int wg_block_tokens(int64_t m)
{
	/* the larger block only where it wastes no more tokens than the smaller: 192
	 * rows measured 9,619 tok/s on 64-token blocks against 7,775 on 128-token ones
	 * (H200, docs/perf-notes.md, tenth session) */
	const int small = wg_form >= 1 ? 128 : 64;
	return wg_groups == 2 && ((m + small - 1) / small) % 2 == 0 ? 2 * small : small;
}

int wg_block_cols(int bits)
{
	return wg_form >= 1 ? 128 : WARPS * (bits == 8 ? 32 : 64);
}

int wg_occupancy(int bits, bool zp, int tokens, int *per_sm, struct qc_err *err)
{
	if (wg_form >= 1)
		return ws_occupancy(bits, zp, wg_stages, tokens, per_sm, err);
	const struct wg_config *c = wg_find(bits, zp, tokens / 64);
	QC_ASSERT(c); /* every marlin (bits, offsets) is instantiated */
	return c->occupancy(per_sm, err);
}

int wg_launch(int bits, bool zp, int tokens, const kparams &p, const c_parts &cp, dim3 grid, cudaStream_t s,
	      struct qc_err *err)
{
	if (wg_form >= 1)
		return ws_launch(bits, zp, wg_stages, tokens, p, cp, grid, s, err);
	const struct wg_config *c = wg_find(bits, zp, tokens / 64);
	QC_ASSERT(c);
	return c->launch(p, cp, grid, s, err);
}

} /* namespace qc_mrl */
