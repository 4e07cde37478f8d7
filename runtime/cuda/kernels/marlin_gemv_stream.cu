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
#include "cp_async.cuh"
#include "pdl.cuh"
#include "dev_once.cuh"

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
	bool ring;    /* one row's tiles through the shared-memory ring (ring_issue) */
	bool persist; /* marlin_gemv_persist.cu's kernel instead (blocks = its grid) */
	bool wave;    /* blocks along K rounded down, not to the nearest: a launch that
			 fits one wave of `blocks` stays in it (the 8B Q|K|V: 192 blocks,
			 not 288 = a second wave of 24) */
};
/* Rows: int4, int8, then marlin_i6's 6-bit codes, which always take float
 * activations and the register ring (no integer-code, shared-ring or persistent
 * form: those knobs set the first two rows only). */
constexpr int N_CFG = 3;
constexpr stream_cfg STREAM_DEFAULT[N_CFG] = {
	{264, 8, 16, false, false, true}, {132, 8, 0, false, false, true}, {264, 8, 0, false, false, true}};
stream_cfg cfg[N_CFG] = {STREAM_DEFAULT[0], STREAM_DEFAULT[1], STREAM_DEFAULT[2]};
constexpr int I6_CFG = 2;
int cfg_of(int bits)
{
	return bits == 4 ? 0 : bits == 8 ? 1 : I6_CFG;
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

/* The shared-memory ring (QC_MARLIN_GEMV_RING): a slot holds one 32-k group of
 * a warp: its two 512-byte tiles, then every lane's scales (16 bytes for i4, 8
 * for i8) and, with offsets, every lane's offsets. Each lane copies (cp.async)
 * and later reads only its own bytes, so a lane's wait on its copies is all the
 * synchronization a slot needs. */
template <int BITS, bool ZP> __host__ __device__ constexpr int ring_slot_bytes()
{
	return 2 * TILE + (BITS == 4 ? 512 : 256) * (ZP ? 2 : 1);
}
/* Groups per warp: 11 KB of ring per warp, 88 KB per block, so that two blocks
 * and their staged x fit an SM's 227 KB (i4 7 groups, i4z 5, i8 8, i8z 7): twice
 * the weight bytes in flight of the register ring (8 tiles per warp). */
template <int BITS, bool ZP> __host__ __device__ constexpr int ring_groups()
{
	return (11 * 1024) / ring_slot_bytes<BITS, ZP>();
}
/* Bytes of the staged activations (the ring follows, 16-byte aligned). */
__host__ __device__ constexpr size_t x_bytes(int G, int len, int XB)
{
	return ((XB ? xq_smem(G, len, XB) : (size_t)G * (size_t)len * sizeof(float)) + 15) / 16 * 16;
}

/* Copy group kt / 2 (tiles kt, kt + 1 and their scales) of this lane into slot. */
template <int BITS, bool ZP>
__device__ __forceinline__ void ring_issue(uint8_t *slot, const uint8_t *w, const uint8_t *sc, int G32, int kt,
					   int lane, int r)
{
	constexpr int S = BITS == 4 ? 64 : 32, NJ = S / 8;
	cp_async16(slot + 16 * lane, w + (size_t)kt * TILE + 16 * lane, true);
	cp_async16(slot + TILE + 16 * lane, w + (size_t)(kt + 1) * TILE + 16 * lane, true);
	const uint8_t *s0 = sc + 2 * ((size_t)(kt / 2) * S + NJ * r);
	if constexpr (BITS == 4) {
		cp_async16(slot + 2 * TILE + 16 * lane, s0, true);
		if constexpr (ZP)
			cp_async16(slot + 2 * TILE + 512 + 16 * lane, s0 + 2 * (size_t)G32 * S, true);
	} else {
		cp_async8(slot + 2 * TILE + 8 * lane, s0);
		if constexpr (ZP)
			cp_async8(slot + 2 * TILE + 256 + 8 * lane, s0 + 2 * (size_t)G32 * S);
	}
}

/* This lane's tiles, scales and offsets of the group in slot. */
template <int BITS, bool ZP>
__device__ __forceinline__ void ring_read(const uint8_t *slot, int lane, uint4 &v0, uint4 &v1, uint4 &sv, uint4 &ov)
{
	v0 = *(const uint4 *)(slot + 16 * lane);
	v1 = *(const uint4 *)(slot + TILE + 16 * lane);
	if constexpr (BITS == 4) {
		sv = *(const uint4 *)(slot + 2 * TILE + 16 * lane);
		if constexpr (ZP)
			ov = *(const uint4 *)(slot + 2 * TILE + 512 + 16 * lane);
	} else {
		const uint2 s2 = *(const uint2 *)(slot + 2 * TILE + 8 * lane);
		sv = make_uint4(s2.x, s2.y, 0, 0);
		if constexpr (ZP) {
			const uint2 o2 = *(const uint2 *)(slot + 2 * TILE + 256 + 8 * lane);
			ov = make_uint4(o2.x, o2.y, 0, 0);
		}
	}
}

/* One group into acc, with float activations or integer codes (the same
 * arithmetic whichever ring delivered the group). */
template <int BITS, bool ZP, int G, int XB>
__device__ __forceinline__ void sum_group(const uint4 v0, const uint4 v1, const uint4 sv, const uint4 ov, const float *xs,
					  const uint4 hv, int ktb, int kt, int kt0, int c, float (&acc)[stripe_of<BITS>() / 8][G])
{
	if constexpr (XB != 0)
		dot_group_xq<BITS, ZP, G, XB>(v0, v1, sv, ov, xs, ktb * 16, (kt - kt0) / 2, c, acc);
	else
		dot_group<BITS, ZP, G>(v0, v1, sv, ov, hv, xs, ktb * 16, (kt - kt0) * 16, c, acc);
}

/* D: tiles in flight per warp in registers (even), when RING is false; RING: the
 * shared-memory ring of ring_groups() groups per warp instead. XB: 0 float
 * activations, 8 / 16 integer codes (dot_group_xq). */
template <int BITS, bool ZP, int G, int D, int XB, bool RING>
__global__ void __launch_bounds__(32 * WARPS, 2) marlin_gemv_stream_kernel(const gparams p)
{
	static_assert(BITS != 6 || (!RING && XB == 0 && !ZP), "marlin_i6: float activations, register ring");
	constexpr int S = stripe_of<BITS>();
	constexpr int NJ = S / 8;
	constexpr int DG = RING ? ring_groups<BITS, ZP>() : 1;
	constexpr int SLOT = ring_slot_bytes<BITS, ZP>();
	/* [G][kt_block * 16] floats or XB's codes and scales, then the ring */
	extern __shared__ __align__(16) float xs[];
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

	const uint8_t *sc = w + codes_bytes<BITS>(KT); /* scales, then (i4z/i8z) offsets */
	uint4 v[RING ? 2 : D], sv[RING ? 1 : D / 2], ov[RING ? 1 : D / 2], hv[BITS == 6 ? D / 2 : 1];
	uint8_t *ring = (uint8_t *)xs + x_bytes(G, ktb * 16, XB) + (size_t)warp * DG * SLOT;
	/* the first D tiles (DG groups) and their scales in flight before anything waits */
	if constexpr (RING) {
#pragma unroll
		for (int u = 0; u < DG; u++) {
			if (t0 + 2 * u < t1)
				ring_issue<BITS, ZP>(ring + u * SLOT, w, sc, G32, t0 + 2 * u, lane, r);
			cp_async_commit(); /* one group per slot, empty or not: the waits count them */
		}
	} else {
#pragma unroll
		for (int u = 0; u < D; u += 2)
			if (t0 + u < t1) {
				v[u] = ld_stream(w + tile_off<BITS>(t0 + u) + 16 * lane);
				v[u + 1] = ld_stream(w + tile_off<BITS>(t0 + u + 1) + 16 * lane);
				if constexpr (BITS == 6)
					hv[u / 2] = ld_stream(w + high_off((t0 + u) / 2) + 16 * lane);
				load_scales<BITS, ZP>(sc, G32, (t0 + u) / 2, r, sv[u / 2], ov[u / 2]);
			}
	}
	qc_pdl_wait(); /* everything below reads or writes what earlier kernels touch */
	stage_block<G, XB>(p, row0, nr, (int64_t)kt0 * 16, ktb * 16, nscale, xs, ktb * 16);

	float acc[NJ][G];
#pragma unroll
	for (int j = 0; j < NJ; j++)
#pragma unroll
		for (int t = 0; t < G; t++)
			acc[j][t] = 0.0f;
	/* t1 - t0 is even (kt_block / WARPS is, and so is KT): whole groups */
	if constexpr (RING) {
		int slot = 0;
		for (int kt = t0; kt < t1; kt += 2) {
			cp_async_wait<DG - 1>(); /* this lane's oldest group has landed */
			uint8_t *sl = ring + slot * SLOT;
			ring_read<BITS, ZP>(sl, lane, v[0], v[1], sv[0], ov[0]);
			sum_group<BITS, ZP, G, XB>(v[0], v[1], sv[0], ov[0], xs, hv[0], ktb, kt, kt0, c, acc);
			/* refill the slot just read (in-order issue: its reads came first) */
			if (kt + 2 * DG < t1)
				ring_issue<BITS, ZP>(sl, w, sc, G32, kt + 2 * DG, lane, r);
			cp_async_commit();
			slot = slot + 1 == DG ? 0 : slot + 1;
		}
	} else {
		for (int base = t0; base < t1; base += D) {
#pragma unroll
			for (int gg = 0; gg < D / 2; gg++) {
				const int kt = base + 2 * gg;
				if (kt < t1) {
					sum_group<BITS, ZP, G, XB>(v[2 * gg], v[2 * gg + 1], sv[gg], ov[gg], xs,
								   hv[BITS == 6 ? gg : 0], ktb, kt, kt0, c, acc);
					const int nk = kt + D;
					if (nk < t1) { /* refill the slot just summed */
						v[2 * gg] = ld_stream(w + tile_off<BITS>(nk) + 16 * lane);
						v[2 * gg + 1] = ld_stream(w + tile_off<BITS>(nk + 1) + 16 * lane);
						if constexpr (BITS == 6)
							hv[gg] = ld_stream(w + high_off(nk / 2) + 16 * lane);
						load_scales<BITS, ZP>(sc, G32, nk / 2, r, sv[gg], ov[gg]);
					}
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

template <int BITS, bool ZP, int G, int D, int XB, bool RING>
cudaError_t launch_one(const gparams &p, cudaStream_t s)
{
	constexpr int S = stripe_of<BITS>();
	auto *k = marlin_gemv_stream_kernel<BITS, ZP, G, D, XB, RING>;
	const int len = p.kt_block * 16;
	const size_t smem =
		x_bytes(G, len, XB) + (RING ? (size_t)WARPS * ring_groups<BITS, ZP>() * ring_slot_bytes<BITS, ZP>() : 0);
	if (RING) { /* two blocks of ~100 KB per SM: ask for the largest shared-memory carveout, once per device */
		static qc_dev_once carved;
		const cudaError_t ce = qc_dev_once_run(carved, [k] {
			return cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout,
						    (int)cudaSharedmemCarveoutMaxShared);
		});
		if (ce != cudaSuccess)
			return ce;
	}
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
	constexpr int S = stripe_of<BITS>();
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
		/* one row: the register ring or the shared-memory one; ROWS rows: the
		 * register ring (the staged x of 4 rows leaves no room for the other) */
		const int xq = cfg[cfg_of(BITS)].xq;
		const bool ring = cfg[cfg_of(BITS)].ring;
		if constexpr (BITS == 6) /* 24 bytes a tile and lane: 6 tiles in flight fit the registers */
			e = p.nr > 1 ? launch_one<6, false, ROWS, 4, 0, false>(p, s) : launch_one<6, false, 1, 6, 0, false>(p, s);
		else if (xq == 16)
			e = p.nr > 1 ? launch_one<BITS, ZP, ROWS, 4, 16, false>(p, s)
			    : ring   ? launch_one<BITS, ZP, 1, 8, 16, true>(p, s)
				     : launch_one<BITS, ZP, 1, 8, 16, false>(p, s);
		else if (xq == 8)
			e = p.nr > 1 ? launch_one<BITS, ZP, ROWS, 4, 8, false>(p, s)
			    : ring   ? launch_one<BITS, ZP, 1, 8, 8, true>(p, s)
				     : launch_one<BITS, ZP, 1, 8, 8, false>(p, s);
		else
			e = p.nr > 1 ? launch_one<BITS, ZP, ROWS, 4, 0, false>(p, s)
			    : ring   ? launch_one<BITS, ZP, 1, 8, 0, true>(p, s)
				     : launch_one<BITS, ZP, 1, 8, 0, false>(p, s);
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
	int64_t b = c.wave ? c.blocks / units : (c.blocks + units / 2) / units;
	b = b > max_kb ? max_kb : b;
	b = b < min_kb ? min_kb : b < 1 ? 1 : b;
	int64_t ktb = (KT + b - 1) / b;
	ktb = (ktb + step - 1) / step * step;
	*kt_block = (int)ktb;
	*kb = (int)((KT + ktb - 1) / ktb);
}

extern "C" void qc_cuda_marlin_gemv_stream_tune(int blocks, int min_warp_tiles)
{
	for (int i = 0; i < N_CFG; i++) {
		cfg[i].blocks = blocks > 0 ? blocks : STREAM_DEFAULT[i].blocks;
		cfg[i].min_wt = min_warp_tiles >= 2 ? min_warp_tiles & ~1 : STREAM_DEFAULT[i].min_wt;
	}
}

extern "C" void qc_cuda_marlin_gemv_stream_cluster(int on)
{
	stream_cluster = on != 0;
}

extern "C" void qc_cuda_marlin_gemv_stream_ring(int on)
{
	for (int i = 0; i < 2; i++)
		cfg[i].ring = on < 0 ? STREAM_DEFAULT[i].ring : on != 0;
}

extern "C" void qc_cuda_marlin_gemv_stream_wave(int on)
{
	for (int i = 0; i < N_CFG; i++)
		cfg[i].wave = on < 0 ? STREAM_DEFAULT[i].wave : on != 0;
}

extern "C" void qc_cuda_marlin_gemv_stream_persist(int on)
{
	for (int i = 0; i < 2; i++)
		cfg[i].persist = on < 0 ? STREAM_DEFAULT[i].persist : on != 0;
}

qc_mgv_choice qc_mgv_stream_choice(int bits)
{
	const stream_cfg &c = cfg[cfg_of(bits)];
	return qc_mgv_choice{c.blocks, c.min_wt, c.xq, c.persist};
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
	if (bits == 6) /* q6_K: no offsets */
		return launch<6, false>(p, n_rows, n_flags, s, err);
	if (bits == 4)
		return zp ? launch<4, true>(p, n_rows, n_flags, s, err) : launch<4, false>(p, n_rows, n_flags, s, err);
	return zp ? launch<8, true>(p, n_rows, n_flags, s, err) : launch<8, false>(p, n_rows, n_flags, s, err);
}
