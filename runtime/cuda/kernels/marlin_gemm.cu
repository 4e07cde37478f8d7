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
#include "marlin_gemm_frag.cuh"
#include "marlin_wgmma.cuh"
#include "mma_sync.cuh"

extern "C" {
#include "layout_marlin.h"
}

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace {

using namespace qc_mrl;

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p)
{
	unsigned s = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(s));
}

template <int BITS, int MT, bool ZP>
__global__ void __launch_bounds__(THREADS) marlin_gemm_kernel(const kparams p, const c_parts cp)
{
	qc_pdl_enter();
	using G = geo<BITS>;
	using SP = smem_plan<BITS, MT, ZP>;
	constexpr int BM = 16 * MT;
	extern __shared__ __align__(16) uint8_t smem[];
	const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	/* MoE rows may each use another slice: then a block takes one row; grouped rows
	 * (sorted by expert): a block takes tile blockIdx.x, rows of one slice */
	int m0 = p.expert ? blockIdx.x : blockIdx.x * BM;
	int m_end = p.expert ? m0 + 1 : p.m;
	const uint8_t *w = p.expert ? p.w + (size_t)p.expert[m0] * p.mat_stride : p.w;
	if (p.tiles) {
		if ((int)blockIdx.x >= *p.n_tiles)
			return;
		const int e = p.tiles[2 * blockIdx.x];
		m0 = p.tiles[2 * blockIdx.x + 1];
		m_end = min(p.seg_end[e + 1], m0 + BM);
		w = p.w + (size_t)e * p.mat_stride;
	}
	const int stripe = blockIdx.y * WARPS + warp;
	const bool has_w = stripe < p.n / G::WN; /* warp-uniform; idle warps still help load A */
	const int g_begin = blockIdx.z * p.g_per_split;
	const int g_end = min(p.groups, g_begin + p.g_per_split);
	const int iters = (g_end - g_begin + 1) / 2;
	const uint8_t *wst = w + (size_t)stripe * p.stripe_bytes;      /* this warp's stripe */
	const uint8_t *wsc = wst + (size_t)p.groups * G::GB;            /* its scales */

	auto load = [&](int st, int it) {
		load_stage<BITS, ZP, BM>(p, smem + st * SP::STAGE, m0, m_end, has_w, wst, wsc, g_begin, g_end, it);
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
		/* one 32-k group: 2 k16 tiles; a lambda so a full stage is straight-line
		 * code the scheduler can interleave across both groups */
		auto group = [&](const int gg) {
#pragma unroll
			for (int ks2 = 0; ks2 < 2; ks2++) {
				uint32_t af[MT][4];
				load_a(2 * gg + ks2, af);
				uint32_t b[G::NF][2];
				frag_b<BITS, ZP>(sb, ss, warp, lane, gg, ks2, b);
#pragma unroll
				for (int j = 0; j < G::NF; j++)
#pragma unroll
					for (int mt = 0; mt < MT; mt++)
						mma16816(acc[mt][j], af[mt], b[j][0], b[j][1]);
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
				const int s = m0 + mt * 16 + lane / 4 + 8 * h;
				const size_t col = (size_t)stripe * G::WN + 8 * j + 2 * (lane % 4);
				if (s >= m_end)
					continue;
				const int r = p.rows ? p.rows[s] : s; /* grouped rows: the row's own place */
				const float v0 = acc[mt][j][2 * h], v1 = acc[mt][j][2 * h + 1];
				if (p.splits > 1) {
					*(float2 *)(p.ws + ((size_t)blockIdx.z * p.m + r) * p.n + col) = make_float2(v0, v1);
					continue;
				}
				const c_col w = c_where(p.c, p.ldc, cp, col);
				const size_t o = (size_t)r * w.ldc + w.col;
				if (p.c_f16)
					*(__half2 *)((__half *)w.c + o) = __floats2half2_rn(v0, v1);
				else
					*(float2 *)((float *)w.c + o) = make_float2(v0, v1);
			}
}

/* C = sum of the split partials, in split order (deterministic). Grouped rows: pair i
 * is sorted row i / n's, whose partials and output are at its own row rows[i / n]
 * (rows past *n_sorted are in no tile: left alone). */
__global__ void marlin_reduce_kernel(const float *ws, void *c, int splits, size_t n, size_t mn, size_t ldc,
				     int c_f16, const int32_t *rows, const int32_t *n_sorted, c_parts parts)
{
	qc_pdl_enter();
	size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 2;
	if (i >= mn)
		return;
	if (rows) {
		const size_t srow = i / n;
		if (srow >= (size_t)*n_sorted)
			return;
		i = (size_t)rows[srow] * n + i % n;
	}
	const c_col w = c_where(c, ldc, parts, i % n);
	void *const cb = w.c;
	const size_t o = i / n * w.ldc + w.col;
	float2 s = make_float2(0.0f, 0.0f);
	for (int z = 0; z < splits; z++) {
		float2 v = *(const float2 *)(ws + (size_t)z * mn + i);
		s.x += v.x;
		s.y += v.y;
	}
	if (c_f16)
		*(__half2 *)((__half *)cb + o) = __floats2half2_rn(s.x, s.y);
	else
		*(float2 *)((float *)cb + o) = s;
}

template <int BITS, int MT, bool ZP>
int launch(const kparams &p, const c_parts &cp, dim3 grid, cudaStream_t s, struct qc_err *err)
{
	(void)qc_launch(marlin_gemm_kernel<BITS, MT, ZP>, grid, dim3(THREADS), smem_plan<BITS, MT, ZP>::TOTAL, s, p, cp);
	return qc_cuda_check(cudaGetLastError(), "marlin_gemm_kernel", err);
}

/* Blocks of this configuration one SM holds; raises the kernel's shared-memory
 * limit first (launch relies on that: every call plans before launching). */
template <int BITS, int MT, bool ZP>
int occupancy(int *per_sm, struct qc_err *err)
{
	return kernel_occupancy(marlin_gemm_kernel<BITS, MT, ZP>, THREADS, smem_plan<BITS, MT, ZP>::TOTAL, "marlin_gemm",
				per_sm, err);
}

typedef int (*launch_fn)(const kparams &, const c_parts &, dim3, cudaStream_t, struct qc_err *);
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
	bool wg; /* marlin_wgmma.cu's kernel (Hopper) instead of cfg's */
	int wg_tokens; /* its tokens a block (wg_block_tokens) */
	int splits, g_per_split;
	int64_t m_blocks, n_blocks;
};

/* Token counts for which a matmul of one slice runs on wgmma where the device has
 * it (qc_cuda_marlin_gemm_wgmma_rows); MoE rows keep the mma.sync kernel. */
int64_t wg_min_rows = 128, wg_max_rows = INT64_MAX;
/* 1 (default): the wgmma plan splits K to fill the SMs with partials up to the fp16
 * weight's size; 0: under the mma.sync plan's cap (qc_cuda_marlin_gemm_wgmma_tune) */
int wg_split_free = 1;

/* K splits of the warp-specialized wgmma kernel (form 1) by a time model: each wave
 * of blocks costs its share of the block's multiplies at ~5 TFLOP/s an SM (the
 * ~660 TFLOP/s cuBLAS reaches on the 8B shapes, over 132 SMs) plus ~1.5 µs of
 * pipeline fill and epilogue, and every split past the first writes and the sum
 * re-reads m·n fp32 partials (~6 TB/s: they mostly stay in the L2). Form 0's
 * wave-filling rule took ten splits of 28672 × 4096 at 256 rows, 1.7x slower
 * than one (docs/perf-notes.md, tenth session). */
static int ws_splits(const struct qc_marlin_gemm_args *a, int64_t blocks, int64_t slots, int bm, int bn, int groups)
{
	const double tile_us = 2.0 * bm * bn * (double)a->k / 5e12 * 1e6, fill_us = 1.5;
	const double part_us = 2.0 * (double)a->m * (double)a->n * 4.0 / 6e12 * 1e6;
	/* at least 4 stages a split; partials no larger than the fp16 weight, the
	 * workspace the backend reserves for the wgmma path (qc_cuda_marlin_gemm_wgmma_ws) */
	const int64_t cap = groups / 8 < a->k / (2 * a->m) ? groups / 8 : a->k / (2 * a->m);
	int best_s = 1;
	double best = 1e30;
	for (int c = 1; c <= cap && c <= 32; c++) {
		const double waves = (double)((blocks * c + slots - 1) / slots);
		const double t = waves * (tile_us / c + fill_us) + (c > 1 ? c * part_us : 0.0);
		if (t < best) {
			best = t;
			best_s = c;
		}
	}
	return best_s;
}

/* Tokens per block from m (one row per block for MoE rows). K is split so the
 * grid fills whole waves of resident blocks (waves / splits, the time per unit of
 * work, smallest; ties to fewer splits), keeping >= 8 groups (4 pipeline stages)
 * per split and the fp32 partials no larger than the weights (the wgmma plan: than
 * the weight in fp16). */
int make_plan(const struct qc_marlin_gemm_args *a, struct plan *pl, struct qc_err *err)
{
	const int bits = qc_marlin_bits(a->layout), zp = qc_marlin_has_offsets(a->layout);
	const bool ws_group = a->tiles && a->group_rows == QC_MARLIN_GROUP_ROWS_WS;
	const int mt = a->tiles ? (ws_group ? 4 : (int)(a->group_rows / 16))
		       : a->expert || a->m <= 16 ? 1 : a->m <= 32 ? 2 : 4;
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
	bool wg_dev = false;
	pl->wg = false;
	if (!rc && (ws_group || (!a->tiles && !a->expert && a->m >= wg_min_rows && a->m <= wg_max_rows)))
		rc = wg_supported(&wg_dev, err);
	if (!rc && ws_group && (!wg_dev || wg_form_now() < 1))
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "marlin_gemm: grouped rows of %d run on the warp-specialized wgmma kernel only (compute "
				  "capability 9.0, QC_MARLIN_WGMMA_TUNE form 1 or 2)", QC_MARLIN_GROUP_ROWS_WS);
	pl->wg = wg_dev;
	pl->wg_tokens = ws_group ? QC_MARLIN_GROUP_ROWS_WS : wg_dev ? wg_block_tokens(a->m) : 0;
	if (!rc)
		rc = pl->wg ? wg_occupancy(bits, zp, pl->wg_tokens, &per_sm, err) : pl->cfg->occupancy(&per_sm, err);
	if (rc)
		return rc;
	if (per_sm < 1)
		return qc_err_set(err, QC_ECUDA, NULL, NULL, -1,
				  "marlin_gemm: no block of %d-bit x %d tokens (%s) fits an SM", bits,
				  pl->wg ? pl->wg_tokens : 16 * mt, pl->wg ? "wgmma" : "mma.sync");
	const int groups = (int)(a->k / 32), wn = bits == 8 ? 32 : 64;
	const int bm = pl->wg ? pl->wg_tokens : 16 * mt, bn = pl->wg ? wg_block_cols(bits) : WARPS * wn;
	pl->m_blocks = a->tiles ? a->max_tiles : a->expert ? a->m : (a->m + bm - 1) / bm;
	pl->n_blocks = (a->n + bn - 1) / bn;
	int s = 1;
	if (ws_group) { /* its time model knows no tile list: never split */
		s = 1;
	} else if (a->split == QC_MARLIN_SPLIT_FIXED) {
		s = a->split_k < 1 ? 1 : a->split_k > groups ? groups : a->split_k;
	} else {
		const int64_t blocks = pl->m_blocks * pl->n_blocks, slots = (int64_t)n_sms * per_sm;
		if (pl->wg && wg_form_now() >= 1) {
			s = ws_splits(a, blocks, slots, bm, bn, groups);
			goto planned;
		}
		const double w_bytes = (double)a->n * (double)a->k * bits / 8;
		int64_t cap = (int64_t)(w_bytes / ((double)a->m * (double)a->n * 8));
		if (pl->wg && wg_split_free) /* partials up to the fp16 weight's size (k / 2m splits) */
			cap = a->k / (2 * a->m);
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
planned:
	pl->g_per_split = (groups + s - 1) / s;
	pl->splits = (groups + pl->g_per_split - 1) / pl->g_per_split; /* no empty split */
	return QC_OK;
}

} /* namespace */

static size_t ws_bytes(const struct qc_marlin_gemm_args *a, const struct plan *pl)
{
	return pl->splits > 1 ? (size_t)pl->splits * (size_t)a->m * (size_t)a->n * sizeof(float) : 0;
}

extern "C" void qc_cuda_marlin_gemm_wgmma_rows(int64_t min_rows, int64_t max_rows)
{
	wg_min_rows = min_rows > 0 ? min_rows : INT64_MAX;
	wg_max_rows = max_rows;
}

extern "C" void qc_cuda_marlin_gemm_wgmma_tune(int stages, int warpgroups, int split_free, int form)
{
	wg_tune(stages, warpgroups, form);
	wg_split_free = split_free;
}

extern "C" uint64_t qc_cuda_marlin_gemm_wgmma_ws(int64_t n_in, int64_t n_out, int64_t n_rows)
{
	bool dev = false;
	if (!wg_split_free || n_rows < wg_min_rows || wg_min_rows > wg_max_rows || wg_supported(&dev, NULL) || !dev)
		return 0;
	return (uint64_t)n_in * (uint64_t)n_out * 2;
}

/* The shape check, then the plan: what the two queries below share. */
static int checked_plan(const struct qc_marlin_gemm_args *a, struct plan *pl, struct qc_err *err)
{
	int rc = qc_marlin_gemm_check(a, err);
	return rc ? rc : make_plan(a, pl, err);
}

extern "C" int qc_cuda_marlin_gemm_grouped_ok(bool *yes, struct qc_err *err)
{
	bool dev = false;
	const int rc = wg_supported(&dev, err);
	*yes = !rc && dev && wg_form_now() >= 1;
	return rc;
}

extern "C" int qc_cuda_marlin_gemm_plan_wgmma(const struct qc_marlin_gemm_args *a, bool *wgmma, struct qc_err *err)
{
	struct plan pl;
	int rc = checked_plan(a, &pl, err);
	*wgmma = !rc && pl.wg;
	return rc;
}

extern "C" int qc_cuda_marlin_gemm_workspace(const struct qc_marlin_gemm_args *a, size_t *bytes, struct qc_err *err)
{
	struct plan pl;
	int rc = checked_plan(a, &pl, err);
	*bytes = rc ? 0 : ws_bytes(a, &pl);
	return rc;
}

extern "C" int qc_cuda_marlin_gemm(const struct qc_marlin_gemm_args *a, cudaStream_t s, struct qc_err *err)
{
	int rc = qc_marlin_gemm_check(a, err);
	if (rc)
		return rc;
	if (!a->c || ((uintptr_t)a->a | (uintptr_t)a->w | (a->expert || a->tiles ? a->mat_stride : 0)) % 16 ||
	    (uintptr_t)a->c % 8 || a->ldc < (a->n_parts ? a->part_col0[0] : a->n) || a->ldc % 2)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "marlin_gemm: a, w (and mat_stride) need 16-byte alignment, c 8-byte alignment, "
				  "ldc (%lld) even and >= n (%lld, or the first part's width)", (long long)a->ldc,
				  (long long)a->n);
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
	p.tiles = a->tiles;
	p.n_tiles = a->n_tiles;
	p.seg_end = a->seg_end;
	p.rows = a->rows;
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
	c_parts cp;
	cp.n = a->n_parts;
	for (int i = 0; i < QC_MARLIN_MAX_PARTS; i++) {
		const bool on = i < a->n_parts;
		cp.c[i] = on ? a->part_c[i] : NULL;
		cp.ldc[i] = on ? (size_t)a->part_ldc[i] : 0;
		cp.col0[i] = on ? (size_t)a->part_col0[i] : 0;
	}
	dim3 grid((unsigned)pl.m_blocks, (unsigned)pl.n_blocks, (unsigned)pl.splits);
	if ((rc = pl.wg ? wg_launch(qc_marlin_bits(a->layout), qc_marlin_has_offsets(a->layout), pl.wg_tokens, p, cp, grid, s, err)
			: pl.cfg->launch(p, cp, grid, s, err)))
		return rc;
	if (pl.splits > 1) {
		size_t mn = (size_t)a->m * (size_t)a->n, pairs = mn / 2;
		(void)qc_launch(marlin_reduce_kernel, dim3((unsigned)((pairs + 255) / 256)), dim3(256), 0, s, p.ws, a->c,
				pl.splits, (size_t)a->n, mn, p.ldc, p.c_f16, a->tiles ? a->rows : (const int32_t *)NULL,
				a->n_sorted, cp);
		rc = qc_cuda_check(cudaGetLastError(), "marlin_reduce_kernel", err);
	}
	return rc;
}
