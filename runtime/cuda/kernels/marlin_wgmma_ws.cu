/* marlin_wgmma_ws.cu — the marlin GEMM (C = A·Wᵀ) on Hopper's wgmma with the work split
 * by warpgroup (sm_90a): one producer warpgroup loads and decodes, two consumer
 * warpgroups only multiply. A block is 128 output columns (2 stripes of the 4- and
 * 6-bit layouts, 4 of the 8-bit ones) × 128 or 256 tokens; K splits and their
 * fixed-order sum are marlin_gemm.cu's, whose planner launches it (wg_tune's form 1).
 *
 * Why a second form: marlin_wgmma.cu decodes the weights into registers and feeds
 * them to wgmma as its A operand, so each warpgroup decodes, then waits for its own
 * tensor-core work (ptxas serializes a wgmma whose register input is written while an
 * earlier one is in flight): it reached ~45-50% of cuBLAS fp16 on the 8B shapes
 * (docs/perf-notes.md, tenth session). Here the producer decodes a stage's weights
 * into shared memory, in the same K-major 128-byte swizzle the activations already
 * have, and the consumers issue wgmma with both operands in shared memory
 * (m64nBTk16: a consumer's 64 columns × all the block's tokens), so decoding runs
 * beside the multiplies.
 *
 * Pipeline: ST raw stages (64 k of the block's tokens, each stripe's codes and
 * scales: load_stage's layout) loaded AHEAD = ST − 2 ahead, and DS = 3
 * decoded stages (128 columns × 64 k fp16, row = output column). The activations
 * come by the copy engine (one cp.async.bulk.tensor of BT rows × 64 k a stage, the
 * tensor map's 128-byte swizzle being wgmma's; rows past m read as zeros) and
 * complete on acts[s]; codes and scales by cp.async of the first warps. Measured
 * first with cp.async for the activations too: 16 copies a thread a stage and their
 * addresses were ~40% of the producer's instructions, the producer the bottleneck.
 * full[d]: the producer's 128 threads arrive once decoded stage d is written (after
 * fence.proxy.async: the decode writes through the generic proxy, wgmma reads
 * through the async one). empty_dec[d], empty_raw[s]: the
 * consumers' 256 threads arrive once their wgmma of that stage retired. The producer
 * decodes stage i once stage i − 3 retired and refills raw stage i + AHEAD once
 * stage i − 2 did, after publishing stage i: so from a retirement to the stage the
 * tensor cores need next there are two stages' multiplies, not one (the first
 * measured form, two decoded stages, left the tensor cores idle half the time).
 *
 * The decoded weights are frag_b's (marlin_gemm_frag.cuh), the fp16 values every
 * marlin kernel multiplies with; C reference: runtime/ops/marlin_gemm.c.
 */
#include "marlin_wgmma.cuh"
#include "marlin_gemm_frag.cuh"
#include "wgmma.cuh"
#include "pdl.cuh"

#include <cuda.h> /* CUtensorMap: the activations' tensor map (types only; the encoder is fetched at run time) */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace {

using namespace qc_mrl;

constexpr int WS_THREADS = 3 * THREADS; /* producer, consumer 0, consumer 1 */
constexpr int SMEM_MAX = 227 * 1024;    /* compute capability 9.0's per-block opt-in limit */
constexpr int CB = 128;                 /* output columns a block: a consumer's m64 tile each */
constexpr int DS = 3;                   /* decoded stages */

template <int BITS, bool ZP, int BT> struct ws_geo {
	using G = geo<BITS>;
	static constexpr int SPB = CB / G::WN; /* stripes a block: 2, or 4 for the 8-bit layouts */
	static constexpr int RAW_A = BT * 128; /* tokens × 64 k fp16 */
	static constexpr int RAW_B = SPB * GROUPS_PER_STAGE * G::GB;
	static constexpr int RAW_S = SPB * GROUPS_PER_STAGE * G::SG * (ZP ? 2 : 1);
	static constexpr int RAW = (RAW_A + RAW_B + RAW_S + 1023) / 1024 * 1024;
	static constexpr int DEC = CB * 128; /* the block's columns × 64 k fp16 */
	static constexpr int bytes(int st) { return DS * DEC + st * RAW + (DS + st) * 2 * 8 + 1024; }
	/* the raw stages asked for, fewer where they do not fit (at least 3) */
	static constexpr int stages(int want) { return bytes(want) <= SMEM_MAX || want <= 3 ? want : stages(want - 1); }
};

template <int BITS, bool ZP, int NST, int BT> struct ws_plan {
	using W = ws_geo<BITS, ZP, BT>;
	static constexpr int ST = W::stages(NST);
	static constexpr int TOTAL = W::bytes(ST);
	static_assert(TOTAL <= SMEM_MAX, "a block's stages fit the shared memory");
};

#ifdef QC_WGMMA_BODY
__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(uint64_t *b, int count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t *b)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(b)) : "memory");
}

/* Arrives, and tells the barrier to expect `bytes` more of asynchronous copies
 * before its phase completes. */
__device__ __forceinline__ void mbar_arrive_tx(uint64_t *b, uint32_t bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)), "r"(bytes)
		     : "memory");
}

/* The copy engine: the box at (c0 along k, c1 along the rows) of the tensor map into
 * dst (1024-byte aligned), completing `bytes` on bar. */
__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1)
{
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n"
		     ::"r"(smem_u32(dst)), "l"((uint64_t)map), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
		     : "memory");
}

/* Returns once the barrier's phase of this parity has completed. */
__device__ __forceinline__ void mbar_wait(uint64_t *b, uint32_t parity)
{
	uint32_t done = 0;
	while (!done)
		asm volatile("{\n\t.reg .pred p;\n\t"
			     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
			     "selp.u32 %0, 1, 0, p;\n\t}\n"
			     : "=r"(done)
			     : "r"(smem_u32(b)), "r"(parity)
			     : "memory");
}

/* stmatrix .x4: four 8×8 fp16 matrices from the mma fragment layout (lane l holds
 * row l/4, columns 2(l%4), +1 of each) to rows whose 16-byte addresses lanes
 * 8i..8i+7 give for matrix i. */
__device__ __forceinline__ void stsm_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3)
{
	asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
		     "r"(r2), "r"(r3)
		     : "memory");
}

/* The producer warp's share of one raw stage, decoded into the decoded stage at dec:
 * stripe slot s = warp % SPB, its k16 tiles (warp / SPB)·SPB .. (all four where a
 * block has 4 stripes, two where it has 2). Row s·WN + column, 64 k in 128 bytes,
 * 16-byte chunk c of row r at c ^ (r % 8). A lane's frag_b values are the mma
 * fragments of 8×8 blocks (8 columns × 8 k), so stmatrix writes two n8 tiles' two k
 * halves at once; lane l addresses row l % 8 of block l / 8 (tile 2jp + l/16, k half
 * (l/8) % 2), and the 8 rows of a block take 8 different chunks (no bank conflict).
 * The tiles are decoded without a branch between them (the loads of one overlap the
 * arithmetic of another). A stripe past the last writes zeros; so does a group past
 * the split's end (n_g = 1): the consumers multiply every k16 tile of a stage (a wgmma
 * under a data-dependent branch is serialized, ptxas C7520) and its activations are
 * zero-filled, but stale codes and scales could decode to Inf. */
template <int BITS, bool ZP, int SPB>
__device__ __forceinline__ void ws_decode(const uint8_t *sb, const uint8_t *ss, uint8_t *dec, int warp, int lane,
					  bool has_w, int n_g)
{
	using G = geo<BITS>;
	constexpr int TPW = KS_PER_STAGE * SPB / WARPS; /* k16 tiles a warp */
	const int slot = warp % SPB, kt0 = warp / SPB * TPW;
	const int rr = lane % 8, blk = lane / 8;
	const uint32_t row_addr = smem_u32(dec) + (uint32_t)(slot * G::WN + 8 * (blk / 2) + rr) * 128;
	if (has_w) {
#pragma unroll
		for (int t = 0; t < TPW; t++) {
			const int kt = kt0 + t;
			uint32_t b[G::NF][2];
			frag_b<BITS, ZP>(sb, ss, slot, lane, kt / 2, kt % 2, b);
			const uint32_t a = row_addr + (uint32_t)(((2 * kt + blk % 2) ^ rr) * 16);
#pragma unroll
			for (int jp = 0; jp < G::NF / 2; jp++)
				stsm_x4(a + jp * 16 * 128, b[2 * jp][0], b[2 * jp][1], b[2 * jp + 1][0], b[2 * jp + 1][1]);
		}
	}
	if (!has_w || n_g < GROUPS_PER_STAGE) {
#pragma unroll
		for (int t = 0; t < TPW; t++) {
			const int kt = kt0 + t;
			if (has_w && kt / 2 < n_g)
				continue;
			const uint32_t a = row_addr + (uint32_t)(((2 * kt + blk % 2) ^ rr) * 16);
#pragma unroll
			for (int jp = 0; jp < G::NF / 2; jp++)
				stsm_x4(a + jp * 16 * 128, 0, 0, 0, 0);
		}
	}
}

/* The block's tokens m0 .. m_end − 1 and its weight slice: tile blockIdx.x of the
 * sorted rows when grouped (false past the tiles in use: nothing to do; read after
 * qc_pdl_enter, the sort wrote them), else blockIdx.x's BT tokens of slice 0. */
__device__ __forceinline__ bool ws_rows(const kparams &p, int bt, int *m0, int *m_end, const uint8_t **w)
{
	if (!p.tiles) {
		*m0 = blockIdx.x * bt;
		*m_end = p.m;
		*w = p.w;
		return true;
	}
	if ((int)blockIdx.x >= *p.n_tiles)
		return false;
	const int e = p.tiles[2 * blockIdx.x];
	*m0 = p.tiles[2 * blockIdx.x + 1];
	*m_end = min(p.seg_end[e + 1], *m0 + bt);
	*w = p.w + (size_t)e * p.mat_stride;
	return true;
}

/* A consumer's accumulators to the output (either form): acc[4t + e] is token
 * m0 + 8t + 2c + (e & 1), block column 64·cw + 16·warp + 8(e >> 1) + lane/4 (the m64
 * tile's rows 16·warp.. belong to this warp); tokens from m_end on are not stored,
 * and grouped rows go to their own row. */
template <int BITS, int BT>
__device__ __forceinline__ void ws_store(const kparams &p, const c_parts &cp, const float *acc, int m0, int m_end,
					 int cw, int warp, int lane)
{
	const int c = lane % 4, r = lane / 4;
	const size_t n_valid = (size_t)(p.n / geo<BITS>::WN * geo<BITS>::WN);
	/* the lane's two columns, each's output resolved once */
	const size_t col0 = (size_t)blockIdx.y * CB + 64 * cw + 16 * warp + r;
	const c_col w[2] = { c_where(p.c, p.ldc, cp, col0), c_where(p.c, p.ldc, cp, col0 + 8) };
#pragma unroll
	for (int t = 0; t < BT / 8; t++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const int tok = m0 + 8 * t + 2 * c + (e & 1);
			const size_t col = col0 + 8 * (e >> 1);
			if (tok >= m_end || col >= n_valid)
				continue;
			store_at(p, w[e >> 1], p.rows ? p.rows[tok] : tok, col, acc[4 * t + e]);
		}
}

/* Form 2's decode: TPW k16 tiles kt0.. of stripe slot `slot`, by one warp, into dec
 * (same rows, swizzle and zero rules as ws_decode). */
template <int BITS, bool ZP, int TPW>
__device__ __forceinline__ void ws_decode_tiles(const uint8_t *sb, const uint8_t *ss, uint8_t *dec, int slot, int kt0,
						int lane, bool has_w, int n_g)
{
	using G = geo<BITS>;
	const int rr = lane % 8, blk = lane / 8;
	const uint32_t row_addr = smem_u32(dec) + (uint32_t)(slot * G::WN + 8 * (blk / 2) + rr) * 128;
	/* four n8 tiles at a time: the consumers' 128 accumulators leave few registers */
	constexpr int NH = G::NF / 4 > 0 ? G::NF / 4 : 1, NJ = G::NF / NH;
#pragma unroll
	for (int t = 0; t < TPW; t++) {
		const int kt = kt0 + t;
		const bool live = has_w && kt / 2 < n_g;
		const uint32_t a = row_addr + (uint32_t)(((2 * kt + blk % 2) ^ rr) * 16);
#pragma unroll
		for (int h = 0; h < NH; h++) {
			uint32_t b[NJ][2];
			if (live) {
				if (h == 0)
					frag_b<BITS, ZP, 0, NJ>(sb, ss, slot, lane, kt / 2, kt % 2, b);
				else
					frag_b<BITS, ZP, (NH > 1 ? NJ : 0), NJ>(sb, ss, slot, lane, kt / 2, kt % 2, b);
			} else {
#pragma unroll
				for (int j = 0; j < NJ; j++)
					b[j][0] = b[j][1] = 0;
			}
#pragma unroll
			for (int jp = 0; jp < NJ / 2; jp++)
				stsm_x4(a + (h * NJ / 2 + jp) * 16 * 128, b[2 * jp][0], b[2 * jp][1], b[2 * jp + 1][0],
					b[2 * jp + 1][1]);
		}
	}
}

/* cp.async completion as one of the barrier's expected arrivals (the thread's copies
 * issued so far). */
__device__ __forceinline__ void cp_mbar_arrive(uint64_t *b)
{
	asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(b)) : "memory");
}
#endif

/* Form 2 (the default): the consumers decode their own 64 columns of stage i + 1 into
 * shared memory while their wgmma of stage i runs (both operands in shared memory,
 * so no register of an in-flight wgmma is written); the first warpgroup only loads
 * (TMA for the activations, cp.async for codes and scales, completing on codes[s]),
 * up to ST stages ahead, with 40 registers (setmaxnreg) so the consumers get 232. */
template <int BITS, bool ZP, int NST, int BT>
__global__ void __launch_bounds__(WS_THREADS, 1)
	marlin_ws2_kernel(const kparams p, const __grid_constant__ CUtensorMap amap, const c_parts cp)
{
#ifdef QC_WGMMA_BODY
	qc_pdl_enter();
	using G = geo<BITS>;
	using W = ws_geo<BITS, ZP, BT>;
	using SP = ws_plan<BITS, ZP, NST, BT>;
	constexpr int ST = SP::ST;
	constexpr int SPC = 64 / G::WN; /* stripes a consumer: 1, or 2 for the 8-bit layouts */
	extern __shared__ uint8_t smem_raw[];
	uint8_t *smem = smem_raw + ((1024 - smem_u32(smem_raw) % 1024) % 1024);
	uint8_t *dec = smem, *raw = smem + DS * W::DEC; /* two of the DS decoded stages used */
	uint64_t *acts = (uint64_t *)(raw + ST * W::RAW), *codes = acts + ST, *empty_raw = codes + ST;
	const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % WARPS, wgi = threadIdx.x / THREADS;
	int m0, m_end;
	const uint8_t *wbase;
	if (!ws_rows(p, BT, &m0, &m_end, &wbase))
		return;
	const int g_begin = blockIdx.z * p.g_per_split;
	const int g_end = min(p.groups, g_begin + p.g_per_split);
	const int iters = (g_end - g_begin + 1) / 2;
	if (threadIdx.x == 0)
		for (int s = 0; s < ST; s++) {
			mbar_init(&acts[s], 1);
			mbar_init(&codes[s], THREADS);
			mbar_init(&empty_raw[s], 2 * THREADS);
		}
	__syncthreads();

	if (wgi == 0) { /* the loader */
		asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
		const int stripe = blockIdx.y * W::SPB + warp;
		const bool loads_w = warp < W::SPB && stripe < p.n / G::WN;
		const uint8_t *wst = wbase + (size_t)stripe * p.stripe_bytes;
		const uint8_t *wsc = wst + (size_t)p.groups * G::GB;
		for (int j = 0; j < iters; j++) {
			if (j >= ST)
				mbar_wait(&empty_raw[j % ST], ((j - ST) / ST) & 1);
			uint8_t *sa = raw + (j % ST) * W::RAW;
			if (threadIdx.x == 0) {
				mbar_arrive_tx(&acts[j % ST], W::RAW_A);
				tma_load_2d(sa, &amap, &acts[j % ST], (g_begin + 2 * j) * 32, m0);
			}
			if (warp < W::SPB)
				load_stage_w<BITS, ZP>(p, sa + W::RAW_A, sa + W::RAW_A + W::RAW_B, loads_w, wst, wsc,
						       g_begin + 2 * j, min(GROUPS_PER_STAGE, g_end - (g_begin + 2 * j)));
			cp_mbar_arrive(&codes[j % ST]);
		}
		cp_wait<0>();
		return;
	}

	asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
	const int cw = wgi - 1;
	/* this warp's share of the consumer's decode: stripe slot cw·SPC + warp % SPC,
	 * k16 tiles (warp / SPC)·SPC .. (SPC of them) */
	const int slot = cw * SPC + warp % SPC, kt0 = warp / SPC * SPC;
	const bool has_w = blockIdx.y * W::SPB + slot < p.n / G::WN;
	auto decode = [&](int st) {
		const uint8_t *sb = raw + (st % ST) * W::RAW + W::RAW_A;
		ws_decode_tiles<BITS, ZP, SPC>(sb, sb + W::RAW_B, dec + (st % 2) * W::DEC, slot, kt0, lane, has_w,
					       min(GROUPS_PER_STAGE, g_end - (g_begin + 2 * st)));
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
		asm volatile("bar.sync %0, %1;\n" ::"r"(2 + cw), "n"(THREADS) : "memory"); /* the warpgroup's rows */
	};
	float acc[BT / 2];
#pragma unroll
	for (int e = 0; e < BT / 2; e++)
		acc[e] = 0.0f;
	mbar_wait(&codes[0], 0);
	decode(0);
	for (int it = 0; it < iters; it++) {
		mbar_wait(&acts[it % ST], (it / ST) & 1);
		const uint8_t *sa = raw + (it % ST) * W::RAW;
		const uint8_t *sw = dec + (it % 2) * W::DEC + (size_t)cw * 64 * 128;
		wg_fence();
#pragma unroll
		for (int ks = 0; ks < KS_PER_STAGE; ks++)
			wgmma_ss<BT>(acc, wg_desc(sw + ks * 32), wg_desc(sa + ks * 32));
		wg_commit();
		wg_wait<1>(); /* iteration it − 1 retired: its raw stage and decoded stage (it + 1) % 2 */
		if (it >= 1)
			mbar_arrive(&empty_raw[(it - 1) % ST]);
		if (it + 1 < iters) {
			mbar_wait(&codes[(it + 1) % ST], ((it + 1) / ST) & 1);
			decode(it + 1);
		}
	}
	wg_wait<0>();
#pragma unroll
	for (int e = 0; e < BT / 2; e++)
		reg_fence(acc[e]);
	ws_store<BITS, BT>(p, cp, acc, m0, m_end, cw, warp, lane);
#else
	(void)p;
	(void)cp;
#endif
}

/* NST raw stages (fewer where shared memory says), BT tokens a block. */
template <int BITS, bool ZP, int NST, int BT>
__global__ void __launch_bounds__(WS_THREADS, 1) marlin_ws_kernel(const kparams p, const __grid_constant__ CUtensorMap amap,
									 const c_parts cp)
{
#ifdef QC_WGMMA_BODY
	qc_pdl_enter();
	using G = geo<BITS>;
	using W = ws_geo<BITS, ZP, BT>;
	using SP = ws_plan<BITS, ZP, NST, BT>;
	constexpr int ST = SP::ST, AHEAD = ST - 2;
	extern __shared__ uint8_t smem_raw[];
	uint8_t *smem = smem_raw + ((1024 - smem_u32(smem_raw) % 1024) % 1024);
	uint8_t *dec = smem, *raw = smem + DS * W::DEC;
	uint64_t *full = (uint64_t *)(raw + ST * W::RAW), *empty_dec = full + DS, *empty_raw = empty_dec + DS;
	uint64_t *acts = empty_raw + ST;
	const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % WARPS, wgi = threadIdx.x / THREADS;
	int m0, m_end;
	const uint8_t *wbase;
	if (!ws_rows(p, BT, &m0, &m_end, &wbase))
		return;
	const int g_begin = blockIdx.z * p.g_per_split;
	const int g_end = min(p.groups, g_begin + p.g_per_split);
	const int iters = (g_end - g_begin + 1) / 2;
	if (threadIdx.x == 0) {
		for (int d = 0; d < DS; d++) {
			mbar_init(&full[d], THREADS);
			mbar_init(&empty_dec[d], 2 * THREADS);
		}
		for (int s = 0; s < ST; s++) {
			mbar_init(&empty_raw[s], 2 * THREADS);
			mbar_init(&acts[s], 1);
		}
	}
	__syncthreads();

	if (wgi == 0) { /* the producer: loads, decodes, publishes */
		/* warps 0 .. SPB-1 load stripe slot `warp` (load_stage_w) */
		const int stripe = blockIdx.y * W::SPB + warp;
		const bool loads_w = warp < W::SPB && stripe < p.n / G::WN;
		const uint8_t *wst = wbase + (size_t)stripe * p.stripe_bytes;
		const uint8_t *wsc = wst + (size_t)p.groups * G::GB;
		/* the stripe this warp decodes */
		const bool has_w = blockIdx.y * W::SPB + warp % W::SPB < p.n / G::WN;
		auto load = [&](int st) {
			uint8_t *sa = raw + (st % ST) * W::RAW;
			const int n_g = min(GROUPS_PER_STAGE, g_end - (g_begin + 2 * st));
			if (threadIdx.x == 0) {
				mbar_arrive_tx(&acts[st % ST], W::RAW_A);
				tma_load_2d(sa, &amap, &acts[st % ST], (g_begin + 2 * st) * 32, m0);
			}
			if (warp < W::SPB)
				load_stage_w<BITS, ZP>(p, sa + W::RAW_A, sa + W::RAW_A + W::RAW_B, loads_w, wst, wsc,
						       g_begin + 2 * st, n_g);
		};
		for (int st = 0; st < AHEAD; st++) {
			if (st < iters)
				load(st);
			cp_commit();
		}
		for (int it = 0; it < iters; it++) {
			if (it >= DS) /* decoded stage it % DS: iteration it − DS retired */
				mbar_wait(&empty_dec[it % DS], ((it - DS) / DS) & 1);
			cp_wait<AHEAD - 1>(); /* this thread's codes and scales of stage it have landed */
			asm volatile("bar.sync 1, %0;\n" ::"n"(THREADS) : "memory"); /* and every loading warp's */
			const uint8_t *sa = raw + (it % ST) * W::RAW, *sb = sa + W::RAW_A, *ss = sb + W::RAW_B;
			const int n_g = min(GROUPS_PER_STAGE, g_end - (g_begin + 2 * it));
			ws_decode<BITS, ZP, W::SPB>(sb, ss, dec + (it % DS) * W::DEC, warp, lane, has_w, n_g);
			asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
			mbar_arrive(&full[it % DS]);
			const int j = it + AHEAD; /* raw stage j % ST: iteration j − ST = it − 2 retired */
			if (j < iters) {
				if (j >= ST)
					mbar_wait(&empty_raw[j % ST], ((j - ST) / ST) & 1);
				load(j);
			}
			cp_commit();
		}
		cp_wait<0>();
		return;
	}

	/* a consumer: columns 64·cw .. of the block, all BT tokens */
	const int cw = wgi - 1;
	float acc[BT / 2];
#pragma unroll
	for (int e = 0; e < BT / 2; e++)
		acc[e] = 0.0f;
	for (int it = 0; it < iters; it++) {
		mbar_wait(&full[it % DS], (it / DS) & 1);
		mbar_wait(&acts[it % ST], (it / ST) & 1);
		const uint8_t *sa = raw + (it % ST) * W::RAW;
		const uint8_t *sw = dec + (it % DS) * W::DEC + (size_t)cw * 64 * 128;
		wg_fence();
#pragma unroll
		for (int ks = 0; ks < KS_PER_STAGE; ks++)
			wgmma_ss<BT>(acc, wg_desc(sw + ks * 32), wg_desc(sa + ks * 32));
		wg_commit();
		wg_wait<1>(); /* iteration it − 1's multiplies have read their stages */
		if (it >= 1) {
			mbar_arrive(&empty_dec[(it - 1) % DS]);
			mbar_arrive(&empty_raw[(it - 1) % ST]);
		}
	}
	wg_wait<0>();
#pragma unroll
	for (int e = 0; e < BT / 2; e++)
		reg_fence(acc[e]);
	ws_store<BITS, BT>(p, cp, acc, m0, m_end, cw, warp, lane);
#else
	(void)p;
	(void)cp;
#endif
}

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
				   const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
				   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* cuTensorMapEncodeTiled from the driver the runtime loaded (no link to libcuda). */
int encode_fn(encode_tiled_fn *fn, struct qc_err *err)
{
	static encode_tiled_fn f = [] {
		void *p = NULL;
		cudaDriverEntryPointQueryResult q;
		if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) !=
			    cudaSuccess ||
		    q != cudaDriverEntryPointSuccess)
			p = NULL;
		return (encode_tiled_fn)p;
	}();
	*fn = f;
	return f ? QC_OK
		 : qc_err_set(err, QC_ECUDA, NULL, NULL, -1,
			      "marlin_wgmma_ws: the driver has no cuTensorMapEncodeTiled (CUDA 12 or newer needed)");
}

/* The activations (m × k fp16, row-major) as BT rows × 64 k boxes in the 128-byte
 * swizzle; rows past m read as zeros. */
int acts_map(const kparams &p, int bt, CUtensorMap *map, struct qc_err *err)
{
	encode_tiled_fn enc;
	int rc = encode_fn(&enc, err);
	if (rc)
		return rc;
	const cuuint64_t dim[2] = { (cuuint64_t)p.k, (cuuint64_t)p.m };
	const cuuint64_t stride[1] = { (cuuint64_t)p.k * 2 };
	const cuuint32_t box[2] = { 64, (cuuint32_t)bt }, elem[2] = { 1, 1 };
	const CUresult r = enc(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)p.a, dim, stride, box, elem,
			       CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
			       CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	if (r != CUDA_SUCCESS)
		return qc_err_set(err, QC_ECUDA, NULL, NULL, -1,
				  "marlin_wgmma_ws: cuTensorMapEncodeTiled of the activations (m=%d k=%d at %p) failed: %d",
				  p.m, p.k, (const void *)p.a, (int)r);
	return QC_OK;
}

int ws_form2 = 0; /* wg_tune's form 2: ws_launch / ws_occupancy take marlin_ws2_kernel where it fits */

/* Form 2 where ptxas keeps its wgmma asynchronous: for int4 with offsets (i4z) and
 * q6_K (i6) it reports C7515 (wgmma serialized: the consumers' decode of those
 * layouts needs the registers the accumulators hold), so they keep form 1. */
template <int BITS, bool ZP> constexpr bool ws2_fits = !(BITS == 4 && ZP) && BITS != 6;

template <int BITS, bool ZP, int NST, int BT>
int launch(const kparams &p, const c_parts &cp, dim3 grid, cudaStream_t s, struct qc_err *err)
{
	CUtensorMap map;
	int rc = acts_map(p, BT, &map, err);
	if (rc)
		return rc;
	if constexpr (ws2_fits<BITS, ZP>)
		if (ws_form2) {
			(void)qc_launch(marlin_ws2_kernel<BITS, ZP, NST, BT>, grid, dim3(WS_THREADS),
					ws_plan<BITS, ZP, NST, BT>::TOTAL, s, p, map, cp);
			return qc_cuda_check(cudaGetLastError(), "marlin_ws2_kernel", err);
		}
	(void)qc_launch(marlin_ws_kernel<BITS, ZP, NST, BT>, grid, dim3(WS_THREADS), ws_plan<BITS, ZP, NST, BT>::TOTAL, s,
			p, map, cp);
	return qc_cuda_check(cudaGetLastError(), "marlin_ws_kernel", err);
}

template <int BITS, bool ZP, int NST, int BT> int occupancy(int *per_sm, struct qc_err *err)
{
	if constexpr (ws2_fits<BITS, ZP>)
		if (ws_form2)
			return kernel_occupancy(marlin_ws2_kernel<BITS, ZP, NST, BT>, WS_THREADS,
						ws_plan<BITS, ZP, NST, BT>::TOTAL, "marlin_wgmma_ws (form 2)", per_sm, err);
	return kernel_occupancy(marlin_ws_kernel<BITS, ZP, NST, BT>, WS_THREADS, ws_plan<BITS, ZP, NST, BT>::TOTAL,
				"marlin_wgmma_ws", per_sm, err);
}

/* The instantiated (bits, offsets, stages, tokens): every marlin layout. */
const struct ws_config {
	int bits, zp, nst, bt;
	int (*launch)(const kparams &, const c_parts &, dim3, cudaStream_t, struct qc_err *);
	int (*occupancy)(int *, struct qc_err *);
} ws_configs[] = {
#define QC_WS_CFG(B, Z, S, T) { B, Z, S, T, launch<B, Z, S, T>, occupancy<B, Z, S, T> }
#define QC_WS_ALL(S, T) QC_WS_CFG(4, false, S, T), QC_WS_CFG(8, false, S, T), QC_WS_CFG(4, true, S, T), \
			QC_WS_CFG(8, true, S, T), QC_WS_CFG(6, false, S, T)
	QC_WS_ALL(4, 128), QC_WS_ALL(6, 128), QC_WS_ALL(4, 256), QC_WS_ALL(6, 256),
#undef QC_WS_ALL
#undef QC_WS_CFG
};

const struct ws_config *ws_find(int bits, bool zp, int nst, int bt)
{
	for (size_t i = 0; i < sizeof ws_configs / sizeof ws_configs[0]; i++)
		if (ws_configs[i].bits == bits && ws_configs[i].zp == (int)zp && ws_configs[i].nst == nst &&
		    ws_configs[i].bt == bt)
			return &ws_configs[i];
	return NULL;
}

} /* namespace */

namespace qc_mrl {

void ws_set_form2(int on)
{
	ws_form2 = on;
}

int ws_occupancy(int bits, bool zp, int stages, int tokens, int *per_sm, struct qc_err *err)
{
	const struct ws_config *c = ws_find(bits, zp, stages, tokens);
	QC_ASSERT(c); /* every marlin (bits, offsets) at 4 and 6 stages, 128 and 256 tokens */
	return c->occupancy(per_sm, err);
}

int ws_launch(int bits, bool zp, int stages, int tokens, const kparams &p, const c_parts &cp, dim3 grid, cudaStream_t s,
	      struct qc_err *err)
{
	const struct ws_config *c = ws_find(bits, zp, stages, tokens);
	QC_ASSERT(c);
	return c->launch(p, cp, grid, s, err);
}

} /* namespace qc_mrl */
