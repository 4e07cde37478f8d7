/* marlin_gemv_persist.cu — the decode GEMV with a grid of resident blocks whose
 * warps each walk an equal run of the launch's 32-k groups, across stripes.
 *
 * Why: the streaming kernel (marlin_gemv_stream.cu) gives each block one
 * (stripe, K range) tile of the matrix; the launch is then a whole number of
 * blocks that rarely fills whole waves (the 8B Q|K|V launch: 288 blocks for 264
 * slots, a second wave of 24; gate|up: 448 for 264, 1.7 waves), every block pays
 * the prologue (its first loads, the norm, the x staging) and the epilogue
 * (sums, partials, counter) with its ring empty, and the split-K shapes add a
 * chain (fence, counter, the last block's sum) per stripe. Here the grid is the
 * resident block count (two per SM), the launch's groups (stripes x k / 32) are
 * split evenly over its warps, and a warp's ring of loads runs on from one
 * stripe into the next: one prologue per block and a full memory pipe until the
 * warp's last group. docs/perf-notes.md has the prediction and the measurement.
 *
 * Partition: NG = (n / S) * (k / 32) groups, NW = min(blocks * WARPS, NG)
 * warps; warp W takes groups [W NG / NW, (W + 1) NG / NW), in order (stripe-major,
 * then k). Only a warp's first and last stripe can be partial: a stripe a warp
 * covers whole it stores itself; a partial one it leaves as a piece (its column
 * sums) in shared memory, and once the block's warps are done the block sums the
 * pieces of each split stripe in warp order: a stripe inside the block is stored
 * then, one that crosses into a neighbour block (only the block's first and last
 * can) leaves a block piece in the scratch ([block][0 first / 1 last][row][column])
 * and the last of its blocks to arrive (a counter per stripe; without counters, a
 * reduce kernel) sums the block pieces in block order and stores. (Summing warp
 * pieces in global memory instead, a stripe split among up to 32 warps, made the
 * last warp's sum a chain of L2 round trips: 2-4x slower, docs/perf-notes.md.)
 * The partition depends on the
 * shape and the width's block count only, and one-row and ROWS-row launches share
 * it and the arithmetic (marlin_gemv.cuh), so a row's bits do not depend on the
 * batch. They differ from the streaming kernel's (another split of K).
 * Each block stages x of the K positions its warps touch: all of K, or, when its
 * run is shorter than a stripe, the run's positions mod K (stage_x's wrap).
 * Reference: runtime/ops/marlin_gemm.c through tests/gpu/marlin_gemm_test.c.
 */
#include "marlin_gemv.cuh"
#include "pdl.cuh"

#include <cuda_runtime.h>

using namespace qc_mgv;

namespace {

/* staged x of a block at most, in elements: ROWS rows of codes or floats in 64 KB
 * (the streaming kernel's limit, STREAM_MAX_KTB tiles) */
constexpr int PERSIST_MAX_LEN = 4096;

/* the partition of an n_in x n_out launch of `bits`-wide codes */
struct ppart {
	int64_t ng; /* groups */
	int nw;     /* warps with work */
	int blocks; /* grid */
};

__host__ __device__ __forceinline__ int64_t gstart(int64_t w, int64_t ng, int nw)
{
	return w < nw ? w * ng / nw : ng;
}

/* The warp whose run holds group g (runs are never empty: nw <= ng). */
__host__ __device__ __forceinline__ int64_t warp_of(int64_t g, int64_t ng, int nw)
{
	return ((g + 1) * nw - 1) / ng;
}

/* Block b's staging: the first group's k / 32 (xb) and the staged length (a
 * multiple of 128, so stage_x's break is warp-uniform); wrap when the run is
 * shorter than a stripe. */
__host__ __device__ __forceinline__ void block_stage(int64_t b, int64_t ng, int nw, int k, int *xb, int *len,
						       bool *wrap)
{
	const int64_t g0 = gstart(b * WARPS, ng, nw), g1 = gstart(b * WARPS + WARPS, ng, nw);
	const int g32 = k / 32;
	const int64_t run = (g1 - g0) * 32;
	const int full = (k + 127) / 128 * 128;
	const int64_t part = (run + 127) / 128 * 128;
	if (part >= k) { /* all of K (zero past it) */
		*xb = 0, *len = full, *wrap = false;
	} else {
		*xb = (int)(g0 % g32), *len = (int)part, *wrap = true;
	}
}

ppart partition(int bits, int64_t n_in, int64_t n_out)
{
	const qc_mgv_choice c = qc_mgv_stream_choice(bits);
	const int S = bits == 4 ? 64 : 32;
	ppart pp;
	pp.ng = (n_out / S) * (n_in / 32);
	int64_t b = c.blocks;
	/* at least min_wt tiles (min_wt / 2 groups) per warp */
	const int64_t gmin = c.min_wt / 2 > 0 ? c.min_wt / 2 : 1;
	const int64_t most = pp.ng / (WARPS * gmin);
	b = b < most ? b : most;
	/* a block's staged x within PERSIST_MAX_LEN: blocks short enough along K */
	if (n_in > PERSIST_MAX_LEN) {
		const int64_t per = PERSIST_MAX_LEN / 32 - 4; /* groups, with room for the rounding */
		const int64_t least = (pp.ng + per - 1) / per;
		b = b > least ? b : least;
	}
	b = b < 1 ? 1 : b;
	const int64_t nw = b * WARPS < pp.ng ? b * WARPS : pp.ng;
	pp.nw = (int)nw;
	pp.blocks = (int)((nw + WARPS - 1) / WARPS);
	return pp;
}

/* The weights of stripe s of the launch. */
__device__ __forceinline__ const uint8_t *stripe_w(const gparams &p, int S, int64_t s)
{
	const int m = mat_of(p, s * S);
	return p.wm[m] + (uint64_t)(s - p.col0[m] / S) * p.stripe_bytes;
}

/* Block b's piece of stripe s in the scratch: 0 when s is the block's first stripe,
 * 1 its last. */
template <int S, int G> __device__ __forceinline__ float *bpiece(const gparams &p, int64_t b, int j, int t)
{
	return p.ws + (((size_t)b * 2 + (size_t)j) * G + (size_t)t) * S;
}

/* The blocks whose runs hold stripe s's first and last groups. */
__device__ __forceinline__ void stripe_blocks(const gparams &p, int64_t s, int64_t *blo, int64_t *bhi)
{
	const int g32 = p.k / 32;
	*blo = warp_of(s * g32, p.p_ng, p.p_nw) / WARPS;
	*bhi = warp_of((s + 1) * g32 - 1, p.p_ng, p.p_nw) / WARPS;
}

/* Stripe s's block pieces summed in block order and stored (threads over rows x
 * columns, step apart): the loads of up to 8 pieces in flight before the sums. */
template <int S, int G> __device__ __forceinline__ void sum_bpieces(const gparams &p, int64_t s, int nr, int tid, int step)
{
	const int g32 = p.k / 32;
	int64_t blo, bhi;
	stripe_blocks(p, s, &blo, &bhi);
	const int m = mat_of(p, s * S);
	for (int i = tid; i < nr * S; i += step) {
		const int t = i / S, col = i % S;
		float sum = 0.0f;
		for (int64_t b0 = blo; b0 <= bhi; b0 += 8) {
			float v[8];
#pragma unroll
			for (int u = 0; u < 8; u++)
				if (b0 + u <= bhi) {
					const int64_t b = b0 + u;
					const int j = gstart(b * WARPS, p.p_ng, p.p_nw) / g32 == s ? 0 : 1;
					v[u] = __ldcg(bpiece<S, G>(p, b, j, t) + col);
				}
#pragma unroll
			for (int u = 0; u < 8; u++)
				if (b0 + u <= bhi)
					sum += v[u];
		}
		store(p, m, t, s * S + col, sum);
	}
}

template <int BITS, bool ZP, int G, int D, int XB>
__global__ void __launch_bounds__(32 * WARPS, 2) marlin_gemv_persist_kernel(const gparams p)
{
	constexpr int S = BITS == 4 ? 64 : 32;
	constexpr int NJ = S / 8;
	constexpr int DG = D / 2; /* groups in flight per warp */
	extern __shared__ __align__(16) float xs[];
	__shared__ float nscale[G];
	__shared__ float pc[WARPS][2][G][S]; /* the warps' pieces: 0 first stripe, 1 last */
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = lane / 4, c = lane % 4;
	const int nr = G == 1 ? 1 : p.nr;
	const int KT = p.k / 16, G32 = p.k / 32;
	/* group and stripe numbers in 32 bits (registers: the int4 kernels sit at 128);
	 * the launch refuses more than 2^31 groups */
	const int W = blockIdx.x * WARPS + warp;
	const int g0 = (int)gstart(W, p.p_ng, p.p_nw), g1 = (int)gstart(W + 1, p.p_ng, p.p_nw);
	qc_pdl_trigger();

	/* the load cursor: stripe ls, group lg of it, its weights lw */
	int ls = g0 / G32;
	int lg = g0 % G32;
	const uint8_t *lw = g0 < g1 ? stripe_w(p, S, ls) : nullptr;
	uint4 v[D], sv[DG], ov[DG];
#pragma unroll
	for (int u = 0; u < DG; u++)
		if (g0 + u < g1) {
			v[2 * u] = ld_stream(lw + (size_t)(2 * lg) * TILE + 16 * lane);
			v[2 * u + 1] = ld_stream(lw + (size_t)(2 * lg + 1) * TILE + 16 * lane);
			load_scales<BITS, ZP>(lw + (size_t)KT * TILE, G32, lg, r, sv[u], ov[u]);
			if (++lg == G32 && g0 + u + 1 < g1) {
				lg = 0;
				lw = stripe_w(p, S, ++ls);
			}
		}
	qc_pdl_wait(); /* everything below reads or writes what earlier kernels touch */
	int xb, len;
	bool wrap;
	block_stage(blockIdx.x, p.p_ng, p.p_nw, p.k, &xb, &len, &wrap);
	stage_block<G, XB>(p, p.r0, nr, (int64_t)xb * 32, len, nscale, xs, len, wrap);

	float acc[NJ][G];
#pragma unroll
	for (int j = 0; j < NJ; j++)
#pragma unroll
		for (int t = 0; t < G; t++)
			acc[j][t] = 0.0f;
	const int s_first = g0 / G32;
	int cs = s_first; /* the sum cursor: stripe cs, group cg of it */
	int cg = g0 % G32;
	for (int q0 = g0; q0 < g1; q0 += DG) {
#pragma unroll
		for (int u = 0; u < DG; u++) {
			const int g = q0 + u;
			if (g < g1) { /* warp-uniform */
				int sg = cg - xb; /* the group's place in the staged x */
				sg += sg < 0 ? G32 : 0;
				if constexpr (XB != 0)
					dot_group_xq<BITS, ZP, G, XB>(v[2 * u], v[2 * u + 1], sv[u], ov[u], xs, len, sg, c,
								      acc);
				else
					dot_group<BITS, ZP, G>(v[2 * u], v[2 * u + 1], sv[u], ov[u], make_uint4(0, 0, 0, 0),
							       xs, len, sg * 32, c, acc);
				if (g + DG < g1) { /* refill the slot just summed */
					v[2 * u] = ld_stream(lw + (size_t)(2 * lg) * TILE + 16 * lane);
					v[2 * u + 1] = ld_stream(lw + (size_t)(2 * lg + 1) * TILE + 16 * lane);
					load_scales<BITS, ZP>(lw + (size_t)KT * TILE, G32, lg, r, sv[u], ov[u]);
					if (++lg == G32 && g + DG + 1 < g1) {
						lg = 0;
						lw = stripe_w(p, S, ++ls);
					}
				}
				if (++cg == G32 || g + 1 == g1) { /* the end of this warp's part of stripe cs */
					/* the four lanes of a column (c = 0..3) */
#pragma unroll
					for (int j = 0; j < NJ; j++)
#pragma unroll
						for (int t = 0; t < G; t++) {
							float sum = acc[j][t];
							sum += __shfl_xor_sync(0xffffffffu, sum, 1);
							sum += __shfl_xor_sync(0xffffffffu, sum, 2);
							acc[j][t] = sum;
						}
					const bool whole = cs * G32 >= g0 && (cs + 1) * G32 <= g1;
					if (c == 0) {
						const int m = mat_of(p, (int64_t)cs * S);
#pragma unroll
						for (int j = 0; j < NJ; j++)
#pragma unroll
							for (int t = 0; t < G; t++)
								if (t < nr) {
									if (whole)
										store(p, m, t, (int64_t)cs * S + 8 * j + r,
										      acc[j][t]);
									else
										pc[warp][cs == s_first ? 0 : 1][t][8 * j + r] =
											acc[j][t];
								}
					}
#pragma unroll
					for (int j = 0; j < NJ; j++)
#pragma unroll
						for (int t = 0; t < G; t++)
							acc[j][t] = 0.0f;
					if (cg == G32) {
						cg = 0;
						cs++;
					}
				}
			}
		}
	}
	/* the block's split stripes: the warps' pieces summed in warp order (stripes
	 * sb0 .. sb1 of the block's run; one warp's whole stripes were stored) */
	__syncthreads();
	const int64_t b = blockIdx.x;
	const int64_t gb0 = gstart(b * WARPS, p.p_ng, p.p_nw), gb1 = gstart(b * WARPS + WARPS, p.p_ng, p.p_nw);
	if (gb0 >= gb1)
		return;
	const int sb0 = (int)(gb0 / G32), sb1 = (int)((gb1 - 1) / G32);
	bool cross[2] = {false, false}; /* the first / last stripe left a block piece */
	for (int sx = sb0; sx <= sb1; sx++) {
		const int64_t wlo = warp_of((int64_t)sx * G32, p.p_ng, p.p_nw),
			      whi = warp_of((int64_t)(sx + 1) * G32 - 1, p.p_ng, p.p_nw);
		if (wlo == whi)
			continue; /* one warp's: stored */
		const int64_t w0 = wlo > b * WARPS ? wlo : b * WARPS, w1 = whi < b * WARPS + WARPS - 1 ? whi : b * WARPS + WARPS - 1;
		const bool inside = wlo >= b * WARPS && whi < b * WARPS + WARPS;
		const int jb = sx == sb0 ? 0 : 1;
		if (!inside)
			cross[jb] = true;
		for (int i = threadIdx.x; i < nr * S; i += 32 * WARPS) {
			const int t = i / S, col = i % S;
			float sum = 0.0f;
			for (int64_t w = w0; w <= w1; w++) {
				const int j = gstart(w, p.p_ng, p.p_nw) / G32 == sx ? 0 : 1;
				sum += pc[w - b * WARPS][j][t][col];
			}
			if (inside)
				store(p, mat_of(p, (int64_t)sx * S), t, (int64_t)sx * S + col, sum);
			else
				bpiece<S, G>(p, b, jb, t)[col] = sum;
		}
	}
	if (!p.flags || !(cross[0] || cross[1]))
		return; /* no counters: the reduce kernel sums the block pieces */
	/* count this block's pieces; the stripe's last block to arrive sums them
	 * (every thread's pieces visible device-wide first: the threadfence pattern) */
	__shared__ bool last[2];
	__threadfence();
	__syncthreads();
	if (threadIdx.x < 2) {
		const int e = threadIdx.x;
		const int sx = e == 0 ? sb0 : sb1;
		last[e] = false;
		if (cross[e] && !(e == 1 && sb1 == sb0 && cross[0])) {
			int64_t blo, bhi;
			stripe_blocks(p, sx, &blo, &bhi);
			last[e] = atomicAdd(&p.flags[sx], 1u) == (uint32_t)(bhi - blo);
		}
	}
	__syncthreads();
	for (int e = 0; e < 2; e++) {
		if (!last[e])
			continue;
		__threadfence();
		const int sx = e == 0 ? sb0 : sb1;
		sum_bpieces<S, G>(p, sx, nr, threadIdx.x, 32 * WARPS);
		if (threadIdx.x == 0)
			p.flags[sx] = 0u; /* ready for the next launch (stream order, or its qc_pdl_wait) */
	}
}

/* Without counters: the block pieces of stripes that cross blocks summed in block
 * order, one block per stripe (the others were stored by the kernel). */
template <int S, int G> __global__ void marlin_gemv_persist_reduce(const gparams p)
{
	qc_pdl_enter();
	const int64_t s = blockIdx.x;
	int64_t blo, bhi;
	stripe_blocks(p, s, &blo, &bhi);
	if (blo == bhi)
		return; /* inside one block: stored */
	sum_bpieces<S, G>(p, s, G == 1 ? 1 : p.nr, threadIdx.x, blockDim.x);
}

template <int BITS, bool ZP, int G, int D, int XB> cudaError_t launch_one(const gparams &p, int blocks, int len, cudaStream_t s)
{
	auto *k = marlin_gemv_persist_kernel<BITS, ZP, G, D, XB>;
	const size_t smem = ((XB ? xq_smem(G, len, XB) : (size_t)G * (size_t)len * sizeof(float)) + 15) / 16 * 16;
	static const size_t smem_static = [k] {
		cudaFuncAttributes fa;
		return cudaFuncGetAttributes(&fa, k) == cudaSuccess ? fa.sharedSizeBytes : (size_t)48 * 1024;
	}();
	if (smem + smem_static > 48 * 1024) {
		cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
		if (e != cudaSuccess)
			return e;
	}
	return qc_launch(k, dim3((unsigned)blocks), dim3(32 * WARPS), smem, s, p);
}

template <int BITS, bool ZP, int G, int D>
cudaError_t launch_xq(const gparams &p, int xq, int blocks, int len, cudaStream_t s)
{
	if (xq == 16)
		return launch_one<BITS, ZP, G, D, 16>(p, blocks, len, s);
	if (xq == 8)
		return launch_one<BITS, ZP, G, D, 8>(p, blocks, len, s);
	return launch_one<BITS, ZP, G, D, 0>(p, blocks, len, s);
}

template <int BITS, bool ZP>
int launch(const gparams &p0, int64_t n_rows, uint64_t n_flags, cudaStream_t s, struct qc_err *err)
{
	constexpr int S = BITS == 4 ? 64 : 32;
	const ppart pp = partition(BITS, p0.k, p0.n);
	if (pp.ng > INT32_MAX)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "marlin_gemv_persist: %lld groups of 32 (n_in %d, n_out %d) past 2^31",
				  (long long)pp.ng, p0.k, p0.n);
	const int xq = qc_mgv_stream_choice(BITS).xq;
	gparams p = p0;
	p.p_ng = pp.ng;
	p.p_nw = pp.nw;
	p.kb = 1;
	p.cluster = 0;
	p.l2.n = 0; /* the L2 hint is the streaming kernel's (measured slower, off) */
	int len = 0; /* the longest staging of the grid's blocks */
	for (int64_t b = 0; b < pp.blocks; b++) {
		int xb, lb;
		bool wrap;
		block_stage(b, pp.ng, pp.nw, p.k, &xb, &lb, &wrap);
		len = lb > len ? lb : len;
	}
	const int64_t stripes = p.n / S;
	for (int64_t r0 = 0; r0 < n_rows; r0 += ROWS) {
		p.r0 = r0;
		p.nr = (int)(n_rows - r0 < ROWS ? n_rows - r0 : ROWS);
		p.flags = p0.flags && (uint64_t)stripes <= n_flags ? p0.flags : NULL;
		/* a ring of 8 tiles for one row, 4 for ROWS rows (their accumulators take
		 * the registers): the depth changes no arithmetic */
		const int G = n_rows == 1 ? 1 : ROWS; /* the pieces' row stride: one per launch size */
		cudaError_t e = G == 1 ? launch_xq<BITS, ZP, 1, 8>(p, xq, pp.blocks, len, s)
				       : launch_xq<BITS, ZP, ROWS, 4>(p, xq, pp.blocks, len, s);
		int rc = qc_cuda_check(e, "marlin_gemv_persist_kernel", err);
		if (rc)
			return rc;
		if (!p.flags) {
			e = G == 1 ? qc_launch(marlin_gemv_persist_reduce<S, 1>, dim3((unsigned)stripes), dim3(64), 0, s, p)
				   : qc_launch(marlin_gemv_persist_reduce<S, ROWS>, dim3((unsigned)stripes), dim3(256), 0, s, p);
			if ((rc = qc_cuda_check(e, "marlin_gemv_persist_reduce", err)))
				return rc;
		}
	}
	return QC_OK;
}

} /* namespace */

uint64_t qc_mgv_persist_ws(int bits, int64_t n_in, int64_t n_out, int64_t n_rows)
{
	const int S = bits == 4 ? 64 : 32;
	const ppart pp = partition(bits, n_in, n_out);
	const int64_t G = n_rows > 1 ? ROWS : 1;
	return (uint64_t)pp.blocks * 2u * (uint64_t)G * (uint64_t)S * sizeof(float);
}

int qc_mgv_persist_launch(int bits, bool zp, const gparams &p, int64_t n_rows, uint64_t n_flags, cudaStream_t s,
			  struct qc_err *err)
{
	if (bits != 4 && bits != 8) /* marlin_i6 has no persistent form: its table row never asks */
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "marlin_gemv_persist: %d-bit codes", bits);
	if (bits == 4)
		return zp ? launch<4, true>(p, n_rows, n_flags, s, err) : launch<4, false>(p, n_rows, n_flags, s, err);
	return zp ? launch<8, true>(p, n_rows, n_flags, s, err) : launch<8, false>(p, n_rows, n_flags, s, err);
}
