/* marlin_gemv_stream.cu — the decode GEMV of marlin_gemv.cu with blocks that
 * stream: each warp walks a long run of one stripe's k16 tiles with a ring of D
 * tiles (and their scales) in flight, refilling a slot as soon as its tile is
 * summed, instead of loading four tiles once and exiting.
 *
 * Why: ncu put the load-once GEMV at 0.75-1.7 TB/s on the Llama-3-8B shapes
 * against ~3 TB/s of copy bandwidth (docs/perf-notes.md). Its blocks run a chain
 * of latencies around one 16 KB load (the RMSNorm row sum, the x staging, the
 * shared-memory sum, the partials' fence and counter), all blocks of a wave in
 * phase, so the memory system idles between waves. Here those fixed costs are
 * paid once per 32-128 KB of weights, and a warp always has D - 2 tiles in flight.
 *
 * Partition (qc_mgv_stream_partition): blocks along K chosen from the shape so a
 * launch has about stream_blocks blocks (two per SM on a 132-SM Hopper), at most
 * so many that a warp still gets stream_min_wt tiles;
 * a block covers kt_block k16 tiles (a multiple of 2·WARPS), each warp
 * kt_block / WARPS consecutive ones. It depends on (n_in, n_out) only, and the
 * arithmetic is marlin_gemv.cuh's (per 32-k group, warps in order, blocks in
 * order), so a row's bits do not depend on the batch. x of the block's K range
 * is staged in dynamic shared memory (G rows x kt_block x 16 floats).
 * Activations: floats (marlin_gemv.cuh's dot_group), or per 32-block integer
 * codes summed with dp2a / dp4a (dot_group_xq; int4 layouts default to 16-bit
 * codes: about half the instructions per weight byte, docs/cuda.md).
 * MoE rows (experts) stay on marlin_gemv.cu's kernel (one row per block there).
 * Reference: runtime/ops/marlin_gemm.c (QC_MARLIN_PREC_F64, _XQ16_F64, _XQ8_F64),
 * through tests/gpu/marlin_gemm_test.c.
 */
#include "marlin_gemv.cuh"
#include "pdl.cuh"

#include <cuda_runtime.h>

using namespace qc_mgv;

namespace {

constexpr int STREAM_MAX_KTB = 256; /* k16 tiles per block at most: x of ROWS rows in 64 KB */
/* The streaming GEMV's choices, one row per weight width (int4 layouts, int8
 * layouts), set once before any launch (qc_cuda_marlin_gemv_stream_tune / _xq) so
 * every launch of the process partitions and rounds alike: blocks a launch aims
 * at (264: 2 per SM of a 132-SM H100/H200, the most that are resident at 128
 * registers; 132: one per SM, fewer blocks along K), k16 tiles per warp at least
 * (8: a ring's worth), and the activations' codes (16-bit codes: dp2a; 0: floats).
 * The defaults are the best measured end to end on an H100 and an H200 on the
 * Llama-3-8B and SmolLM2 shapes (docs/perf-notes.md): int4 gains from the codes
 * (fewer instructions per byte) and loses with 132 blocks; int8 the other way. */
struct stream_cfg {
	int blocks, min_wt, xq;
};
constexpr stream_cfg STREAM_DEFAULT[2] = {{264, 8, 16}, {132, 8, 0}};
stream_cfg cfg[2] = {STREAM_DEFAULT[0], STREAM_DEFAULT[1]};
int cfg_of(int bits)
{
	return bits == 4 ? 0 : 1;
}
/* split-K sums through a thread-block cluster (qc_cuda_marlin_gemv_stream_cluster;
 * off: measured slower on an H100, docs/perf-notes.md) */
bool stream_cluster = false;

/* Whether the current device launches clusters (compute capability 9.0+). */
bool cluster_ok()
{
	int dev = 0, major = 0;
	return cudaGetDevice(&dev) == cudaSuccess &&
	       cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9;
}

/* D: tiles in flight per warp (even). XB: 0 float activations, 8 / 16 integer
 * codes (dot_group_xq). */
template <int BITS, bool ZP, int G, int D, int XB>
__global__ void __launch_bounds__(32 * WARPS, 2) marlin_gemv_stream_kernel(const gparams p)
{
	constexpr int S = BITS == 4 ? 64 : 32;
	constexpr int NJ = S / 8;
	extern __shared__ __align__(16) float xs[]; /* [G][kt_block * 16], or XB's codes and scales */
	__shared__ float nscale[G];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = lane / 4, c = lane % 4;
	const int stripe = blockIdx.x, kb = blockIdx.y;
	const int nr = G == 1 ? 1 : p.nr;
	const int64_t row0 = p.r0;
	const int mat = mat_of(p, (int64_t)stripe * S);
	const uint8_t *w = p.wm[mat] + (uint64_t)(stripe - p.col0[mat] / S) * p.stripe_bytes;
	const int KT = p.k / 16, G32 = p.k / 32;
	const int ktb = p.kt_block, ktw = ktb / WARPS;
	const int kt0 = kb * ktb, kt_end = min(KT, kt0 + ktb);
	const int t0 = kt0 + warp * ktw, t1 = min(t0 + ktw, kt_end); /* this warp's tiles (none: t0 >= t1) */
	qc_pdl_trigger();

	const uint8_t *sc = w + (size_t)KT * TILE; /* scales, then (i4z/i8z) offsets */
	uint4 v[D], sv[D / 2], ov[D / 2];
	/* the first D tiles and their scales in flight before anything waits */
#pragma unroll
	for (int u = 0; u < D; u += 2)
		if (t0 + u < t1) {
			v[u] = ld_stream(w + (size_t)(t0 + u) * TILE + 16 * lane);
			v[u + 1] = ld_stream(w + (size_t)(t0 + u + 1) * TILE + 16 * lane);
			load_scales<BITS, ZP>(sc, G32, (t0 + u) / 2, r, sv[u / 2], ov[u / 2]);
		}
	qc_pdl_wait(); /* everything below reads or writes what earlier kernels touch */
	const bool vec = x_vec(p);
	if (p.norm_w)
		norm_scales<G>(p, row0, nr, vec, nscale);
	stage_x<G, XB>(p, row0, nr, (int64_t)kt0 * 16, ktb * 16, vec, nscale, xs, ktb * 16);
	__syncthreads();

	float acc[NJ][G];
#pragma unroll
	for (int j = 0; j < NJ; j++)
#pragma unroll
		for (int t = 0; t < G; t++)
			acc[j][t] = 0.0f;
	/* t1 - t0 is even (kt_block / WARPS is, and so is KT): whole groups */
	for (int base = t0; base < t1; base += D) {
#pragma unroll
		for (int gg = 0; gg < D / 2; gg++) {
			const int kt = base + 2 * gg;
			if (kt < t1) {
				if constexpr (XB != 0)
					dot_group_xq<BITS, ZP, G, XB>(v[2 * gg], v[2 * gg + 1], sv[gg], ov[gg], xs, ktb * 16,
								  (kt - kt0) / 2, c, acc);
				else
					dot_group<BITS, ZP, G>(v[2 * gg], v[2 * gg + 1], sv[gg], ov[gg], xs, ktb * 16,
							       (kt - kt0) * 16, c, acc);
				const int nk = kt + D;
				if (nk < t1) { /* refill the slot just summed */
					v[2 * gg] = ld_stream(w + (size_t)nk * TILE + 16 * lane);
					v[2 * gg + 1] = ld_stream(w + (size_t)(nk + 1) * TILE + 16 * lane);
					load_scales<BITS, ZP>(sc, G32, nk / 2, r, sv[gg], ov[gg]);
				}
			}
		}
	}
	/* every weight load of this block is out: the next weights' L2 hint goes now,
	 * to overlap this launch's tail and the latency-bound kernels after it */
	if (p.l2.n && threadIdx.x == 0)
		l2_prefetch(p);
	if (p.cluster)
		finish_cluster<S, G>(p, acc, mat, stripe, nr);
	else
		finish<S, G>(p, acc, mat, stripe, kb, 0, nr);
}

template <int BITS, bool ZP, int G, int D, int XB>
cudaError_t launch_one(const gparams &p, cudaStream_t s)
{
	constexpr int S = BITS == 4 ? 64 : 32;
	auto *k = marlin_gemv_stream_kernel<BITS, ZP, G, D, XB>;
	const int len = p.kt_block * 16;
	const size_t smem = XB ? xq_smem(G, len, XB) : (size_t)G * (size_t)len * sizeof(float);
	/* past the default 48 KB of shared memory (the staged x and the epilogues'
	 * static arrays, ~17 KB at ROWS rows) the kernel must be allowed it, on the
	 * current device (a function attribute, not a stream operation) */
	static const size_t smem_static = [k] {
		cudaFuncAttributes fa;
		return cudaFuncGetAttributes(&fa, k) == cudaSuccess ? fa.sharedSizeBytes : (size_t)48 * 1024;
	}();
	if (smem + smem_static > 48 * 1024) {
		cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
		if (e != cudaSuccess)
			return e;
	}
	const dim3 grid((unsigned)(p.n / S), (unsigned)p.kb, 1);
	if (p.cluster)
		return qc_launch_cluster(k, grid, dim3(1, (unsigned)p.kb, 1), dim3(32 * WARPS), smem, s, p);
	return qc_launch(k, grid, dim3(32 * WARPS), smem, s, p);
}

template <int BITS, bool ZP>
int launch(const gparams &p0, int64_t n_rows, uint64_t n_flags, cudaStream_t s, struct qc_err *err)
{
	constexpr int S = BITS == 4 ? 64 : 32;
	gparams p = p0;
	for (int64_t r0 = 0; r0 < n_rows; r0 += ROWS) {
		p.r0 = r0;
		p.nr = (int)(n_rows - r0 < ROWS ? n_rows - r0 : ROWS);
		p.flags = p0.flags && (uint64_t)(p.n / S) <= n_flags ? p0.flags : NULL;
		p.l2.n = r0 == 0 ? p0.l2.n : 0; /* the hint once, with the first rows */
		/* a cluster of the kb blocks along K where asked, the device has clusters
		 * and kb fits the portable size (8); same bits as the other two sums */
		p.cluster = stream_cluster && p.kb > 1 && p.kb <= 8 && cluster_ok();
		/* a ring of 8 tiles for one row; 4 for ROWS rows (their accumulators
		 * take the registers): the ring depth changes no arithmetic */
		cudaError_t e;
		const int xq = cfg[cfg_of(BITS)].xq;
		if (xq == 16)
			e = p.nr == 1 ? launch_one<BITS, ZP, 1, 8, 16>(p, s) : launch_one<BITS, ZP, ROWS, 4, 16>(p, s);
		else if (xq == 8)
			e = p.nr == 1 ? launch_one<BITS, ZP, 1, 8, 8>(p, s) : launch_one<BITS, ZP, ROWS, 4, 8>(p, s);
		else
			e = p.nr == 1 ? launch_one<BITS, ZP, 1, 8, 0>(p, s) : launch_one<BITS, ZP, ROWS, 4, 0>(p, s);
		int rc = qc_cuda_check(e, "marlin_gemv_stream_kernel", err);
		if (rc)
			return rc;
		if (p.kb > 1 && !p.flags && !p.cluster && (rc = qc_mgv_reduce_launch(p, s, err)))
			return rc;
	}
	return QC_OK;
}

} /* namespace */

void qc_mgv_stream_partition(int bits, int64_t n_in, int64_t n_out, int *kb, int *kt_block)
{
	const stream_cfg &c = cfg[cfg_of(bits)];
	/* width in 64-column units whatever the stripe (a function of the shape
	 * alone); i8's 32-wide stripes then get twice the blocks */
	const int64_t KT = n_in / 16, units = n_out / 64 > 0 ? n_out / 64 : 1;
	const int64_t step = 2 * WARPS, per = (int64_t)WARPS * c.min_wt;
	const int64_t max_kb = KT / per > 0 ? KT / per : 1;
	const int64_t min_kb = (KT + STREAM_MAX_KTB - 1) / STREAM_MAX_KTB;
	int64_t b = (c.blocks + units / 2) / units;
	b = b > max_kb ? max_kb : b;
	b = b < min_kb ? min_kb : b < 1 ? 1 : b;
	int64_t ktb = (KT + b - 1) / b;
	ktb = (ktb + step - 1) / step * step;
	*kt_block = (int)ktb;
	*kb = (int)((KT + ktb - 1) / ktb);
}

extern "C" void qc_cuda_marlin_gemv_stream_tune(int blocks, int min_warp_tiles)
{
	for (int i = 0; i < 2; i++) {
		cfg[i].blocks = blocks > 0 ? blocks : STREAM_DEFAULT[i].blocks;
		cfg[i].min_wt = min_warp_tiles >= 2 ? min_warp_tiles & ~1 : STREAM_DEFAULT[i].min_wt;
	}
}

extern "C" void qc_cuda_marlin_gemv_stream_cluster(int on)
{
	stream_cluster = on != 0;
}

extern "C" int qc_cuda_marlin_gemv_stream_xq(int bits)
{
	if (bits != -1 && bits != 0 && bits != 8 && bits != 16)
		return QC_EINVAL;
	for (int i = 0; i < 2; i++)
		cfg[i].xq = bits >= 0 ? bits : STREAM_DEFAULT[i].xq;
	return QC_OK;
}

int qc_mgv_stream_launch(int bits, bool zp, const gparams &p, int64_t n_rows, uint64_t n_flags, cudaStream_t s,
			 struct qc_err *err)
{
	if (bits == 4)
		return zp ? launch<4, true>(p, n_rows, n_flags, s, err) : launch<4, false>(p, n_rows, n_flags, s, err);
	return zp ? launch<8, true>(p, n_rows, n_flags, s, err) : launch<8, false>(p, n_rows, n_flags, s, err);
}
