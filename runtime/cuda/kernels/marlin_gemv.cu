/* marlin_gemv.cu — y = W x for a few float activation rows, W in a marlin layout
 * (docs/layout-marlin.md), without tensor cores: the decode-step matmul.
 *
 * Why not the marlin GEMM at m = 1: it rounds x to fp16 in a separate kernel,
 * pads the token tile to 16 rows, and is bound by dequant + mma issue (about
 * 40% of HBM bandwidth on the big shapes, 8-26% on the 4096-wide ones). Here a
 * warp streams one stripe's code tiles straight from global memory (lane l
 * reads bytes 16l..16l+15 of each 512-byte tile: fully coalesced), decodes the
 * 8 (i4) or 4 (i8) columns x 4 k positions its fragment slot holds, and dots
 * them with float x from shared memory; a group's sum is scaled once
 * (d·Σ(q−8)x, d·Σqx, or s·Σqx + o·Σx for i4z and i8z (q signed there), float
 * throughout: no fp16 rounding of weights or activations).
 *
 * Partition: a block = WARPS warps on one stripe; warp w takes KT_WARP
 * consecutive k16 tiles; the block's warps are summed in shared memory in warp
 * order, and when K needs more than one block per stripe the blocks' partials
 * go to the scratch and a second kernel sums them in block order. The partition
 * depends on (n, k) only and each row has its own accumulators, so a row's
 * result never depends on the other rows (batched == alone, bit for bit).
 * In-kernel sum (the caller passes arrival counters, d_flags): each block adds
 * one to its stripe's counter after its partials are out; the block that
 * arrives last sums the stripe's partials in block order, exactly as the second
 * kernel would (same bits), and re-zeroes the counter. One kernel per matmul
 * instead of two: a decode step is bound by its kernel count (docs/perf-notes.md).
 * Fusions (matmul_dispatch.h): several matrices on the same x share a launch
 * (their stripes side by side along the grid, each block finds its matrix), x2 makes the staged activations silu(x) * x2,
 * norm_w makes them RMSNorm(x) * norm_w (each block sums the squares of its rows
 * in a fixed order: deterministic and batch-invariant, not the rms_norm kernel's
 * bits), acc makes the final store y += (silu.cuh and add.cu's arithmetic: same bits as
 * the separate kernels).
 * Programmatic dependent launch (pdl.cuh): the weight tiles and scales are
 * loaded before qc_pdl_wait, so they stream while the previous kernel drains.
 * Rows: whatever the backend sends (the layout table's GEMV column: one row of
 * an int4 layout, and MoE rows, an expert per row, one row per block; more with
 * QC_MARLIN_GEMV_ROWS, docs/cuda.md); ROWS at a time share a block's weight loads.
 * This file never hands a call to another kernel: the table decides.
 * Reference: runtime/ops/marlin_gemm.c (the F64 truth of the layout's values).
 */
#include "marlin_gemm.cuh"
#include "marlin_gemv.cuh"
#include "matmul_dispatch.h"
#include "pdl.cuh"

extern "C" {
#include "layout_marlin.h"
}

#include <cuda_runtime.h>

namespace {

using namespace qc_mgv;

/* KT_WARP: k16 tiles per warp (an even number: whole 32-k groups) */
template <int BITS, bool ZP, int G, int KT_WARP>
__global__ void __launch_bounds__(32 * WARPS) marlin_gemv_kernel(const gparams p)
{
	constexpr int KT_BLOCK = WARPS * KT_WARP;
	constexpr int S = stripe_of<BITS>(); /* stripe width */
	constexpr int NJ = S / 8;              /* n8 tiles per stripe = columns per lane */
	__shared__ __align__(16) float xs[G][KT_BLOCK * 16];
	__shared__ float nscale[G];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = lane / 4, c = lane % 4;
	const int stripe = blockIdx.x, kb = blockIdx.y;
	const int rb = G == 1 ? blockIdx.z : 0; /* MoE: this block's row */
	const int nr = G == 1 ? 1 : p.nr;
	const int64_t row0 = p.r0 + rb;
	if (p.expert) /* the routing kernel wrote it */
		qc_pdl_wait();
	const int mat = mat_of(p, (int64_t)stripe * S);
	const uint8_t *w = p.wm[mat] + (p.expert ? (uint64_t)p.expert[row0] * p.mat_stride : 0) +
			   (uint64_t)(stripe - p.col0[mat] / S) * p.stripe_bytes;
	const int KT = p.k / 16, G32 = p.k / 32;
	const int kt0 = kb * KT_BLOCK, kt_end = min(KT, kt0 + KT_BLOCK);
	qc_pdl_trigger();

	const int wt0 = kt0 + warp * KT_WARP;
	const uint8_t *sc = w + codes_bytes<BITS>(KT); /* scales, then (i4z/i8z) offsets */
	/* the warp's code tiles and its groups' scales in flight before anything waits */
	uint4 v[KT_WARP], sv[KT_WARP / 2], ov[KT_WARP / 2], hv[BITS == 6 ? KT_WARP / 2 : 1];
#pragma unroll
	for (int u = 0; u < KT_WARP; u++)
		if (wt0 + u < kt_end)
			v[u] = __ldg((const uint4 *)(w + tile_off<BITS>(wt0 + u)) + lane);
#pragma unroll
	for (int gg = 0; gg < KT_WARP / 2; gg++) {
		if (wt0 + 2 * gg >= kt_end)
			break;
		load_scales<BITS, ZP>(sc, G32, wt0 / 2 + gg, r, sv[gg], ov[gg]);
		if constexpr (BITS == 6)
			hv[gg] = __ldg((const uint4 *)(w + high_off(wt0 / 2 + gg)) + lane);
	}
	qc_pdl_wait(); /* everything below reads or writes what earlier kernels touch */
	stage_block<G>(p, row0, nr, (int64_t)kt0 * 16, KT_BLOCK * 16, nscale, &xs[0][0], KT_BLOCK * 16);

	float acc[NJ][G];
#pragma unroll
	for (int j = 0; j < NJ; j++)
#pragma unroll
		for (int t = 0; t < G; t++)
			acc[j][t] = 0.0f;
#pragma unroll
	for (int gg = 0; gg < KT_WARP / 2; gg++) {
		const int kt = wt0 + 2 * gg;
		if (kt >= kt_end)
			break;
		dot_group<BITS, ZP, G>(v[2 * gg], v[2 * gg + 1], sv[gg], ov[gg], hv[BITS == 6 ? gg : 0], &xs[0][0],
				       KT_BLOCK * 16, (kt - kt0) * 16, c, acc);
	}
	finish<S, G>(p, acc, mat, stripe, kb, rb, nr);
}

/* y[r][n] = sum over kb in order of ws[kb][r][n] */
__global__ void marlin_gemv_reduce(const gparams p)
{
	qc_pdl_enter();
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= (int64_t)p.nr * p.n)
		return;
	const int64_t row = i / p.n, n = i % p.n;
	float s = 0.0f;
	for (int b = 0; b < p.kb; b++)
		s += p.ws[((int64_t)b * p.nr + row) * p.n + n];
	store(p, mat_of(p, n), row, n, s);
}

/* k16 tiles per warp: 4 (512 k per block; measured a little faster than 8 on
 * every Llama-3-8B shape), 8 with QC_CUDA_GEMV_KT8 (the backend's
 * QC_MARLIN_GEMV_KTW=8, fixed for the process, so the partition stays
 * batch-invariant) */
int kt_warp(enum qc_cuda_gemv_kt kt)
{
	return kt == QC_CUDA_GEMV_KT8 ? 8 : 4;
}

int blocks_along_k(int64_t k, enum qc_cuda_gemv_kt kt)
{
	const int kb = WARPS * kt_warp(kt);
	return (int)((k / 16 + kb - 1) / kb);
}

template <int BITS, bool ZP, int KTW>
int launch(const gparams &p0, int64_t n_rows, uint64_t n_flags, cudaStream_t s, struct qc_err *err)
{
	constexpr int S = stripe_of<BITS>();
	gparams p = p0;
	const dim3 block(32 * WARPS);
	for (int64_t r0 = 0; r0 < n_rows; r0 += ROWS) {
		p.r0 = r0;
		p.nr = (int)(n_rows - r0 < ROWS ? n_rows - r0 : ROWS);
		/* counters: one per (block row, stripe); too few, the reduce kernel */
		const uint64_t need = (uint64_t)(p.expert ? p.nr : 1) * (uint64_t)(p.n / S);
		p.flags = p0.flags && need <= n_flags ? p0.flags : NULL;
		cudaError_t e;
		if (p.expert)
			e = qc_launch(marlin_gemv_kernel<BITS, ZP, 1, KTW>,
				      dim3((unsigned)(p.n / S), (unsigned)p.kb, (unsigned)p.nr), block, 0, s, p);
		else if (p.nr == 1)
			e = qc_launch(marlin_gemv_kernel<BITS, ZP, 1, KTW>, dim3((unsigned)(p.n / S), (unsigned)p.kb, 1),
				      block, 0, s, p);
		else
			e = qc_launch(marlin_gemv_kernel<BITS, ZP, ROWS, KTW>,
				      dim3((unsigned)(p.n / S), (unsigned)p.kb, 1), block, 0, s, p);
		int rc = qc_cuda_check(e, "marlin_gemv_kernel", err);
		if (rc)
			return rc;
		if (p.kb > 1 && !p.flags && (rc = qc_mgv_reduce_launch(p, s, err)))
			return rc;
	}
	return QC_OK;
}

} /* namespace */

/* The K partials' sum in block order, for launches without counters (both GEMVs). */
int qc_mgv_reduce_launch(const gparams &p, cudaStream_t s, struct qc_err *err)
{
	const int64_t total = (int64_t)p.nr * p.n;
	return qc_cuda_check(qc_launch(marlin_gemv_reduce, dim3((unsigned)((total + 255) / 256)), dim3(256), 0, s, p),
			     "marlin_gemv_reduce", err);
}

/* Scratch of the K partials: kb blocks along K x ROWS rows x n floats (none when
 * one block covers K). The streaming partition still sends MoE rows to the
 * load-once kernel: the most of the two. */
extern "C" uint64_t qc_cuda_marlin_gemv_ws(int64_t n_in, int64_t n_out, int64_t n_rows, enum qc_cuda_gemv_kt kt)
{
	int kb = blocks_along_k(n_in, kt == QC_CUDA_GEMV_STREAM ? QC_CUDA_GEMV_KT4 : kt);
	if (kt == QC_CUDA_GEMV_STREAM) {
		for (int bits = 4; bits <= 8; bits += 2) { /* the most of the three widths' */
			int skb, ktb;
			qc_mgv_stream_partition(bits, n_in, n_out, &skb, &ktb);
			kb = skb > kb ? skb : kb;
		}
	}
	const int64_t rows = n_rows < ROWS ? n_rows : ROWS;
	uint64_t b = kb > 1 ? (uint64_t)kb * (uint64_t)rows * (uint64_t)n_out * sizeof(float) : 0;
	/* the persistent kernel's pieces, whether or not its knob is on now (the knob
	 * may change after the scratch is sized: tests, A/B runs) */
	for (int bits = 4; kt == QC_CUDA_GEMV_STREAM && bits <= 8; bits += 4) {
		const uint64_t pb = qc_mgv_persist_ws(bits, n_in, n_out, n_rows);
		b = pb > b ? pb : b;
	}
	return b;
}

/* The table's scratch for every entry point (matmul_layouts.def). */
extern "C" uint64_t qc_cuda_marlin_ws(int64_t n_in, int64_t n_out, int64_t n_rows, const struct qc_cuda_mm_tuning *t)
{
	const uint64_t a = qc_cuda_marlin_mm_ws(n_in, n_out, n_rows, &t->rows);
	const uint64_t b = qc_cuda_marlin_gemv_ws(n_in, n_out, n_rows, t->gemv_kt);
	return a > b ? a : b;
}


/* qc_cuda_marlin_gemv_norm_once's switch (the one-pass prologue; process-wide) */
static bool norm_once = true;

extern "C" void qc_cuda_marlin_gemv_norm_once(int on)
{
	norm_once = on != 0;
}

extern "C" int qc_cuda_marlin_gemv(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err)
{
	if (qc_cuda_mm_check_fuse(a, QC_MM_FUSE_SILU | QC_MM_FUSE_ACC | QC_MM_FUSE_MULTI | QC_MM_FUSE_NORM, "marlin_gemv",
				  err))
		return QC_EUNSUPPORTED;
	if (a->d_norm_w && a->d_x2)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "marlin_gemv: RMSNorm and silu(x)*x2 together");
	if (a->n_rows == 0)
		return QC_OK;
	const int S = qc_marlin_stripe(a->layout);
	uint64_t row;
	if (S <= 0 || qc_marlin_row_bytes(a->layout, a->type, a->n_in, &row) != QC_OK || a->n_in % 32 ||
	    a->n_out % S || a->n_in > INT32_MAX || a->n_out > INT32_MAX || a->x_div < 1 || a->n_rows < 0 ||
	    (a->d_expert && a->mat_stride % 16) || (uintptr_t)a->d_w % 16 || (a->n_out / S) > INT32_MAX)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "marlin_gemv: %s %s n_in %lld, n_out %lld, x_div %d not supported",
				  qc_layout_name(a->layout), qc_types[a->type].name, (long long)a->n_in,
				  (long long)a->n_out, a->x_div);
	bool more_ok = a->n_more >= 0 && a->n_more <= QC_CUDA_MM_MORE && (!a->n_more || !a->d_expert);
	int64_t cols = a->n_out;
	for (int m = 0; more_ok && m < a->n_more; m++) {
		more_ok = a->more[m].n_out > 0 && a->more[m].n_out % S == 0 && (uintptr_t)a->more[m].d_w % 16 == 0;
		cols += a->more[m].n_out;
	}
	if (!more_ok || cols > INT32_MAX)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "marlin_gemv: %d more matrices (%lld columns in all) not supported", a->n_more,
				  (long long)cols);
	gparams p = {};
	p.n_mats = 1 + a->n_more;
	p.wm[0] = a->d_w;
	p.ym[0] = a->d_y;
	p.ldym[0] = a->ldy;
	p.col0[0] = 0;
	cols = a->n_out;
	for (int m = 0; m < a->n_more; m++) {
		p.col0[1 + m] = (int)cols;
		p.wm[1 + m] = a->more[m].d_w;
		p.ym[1 + m] = a->more[m].d_y;
		p.ldym[1 + m] = a->more[m].ldy;
		cols += a->more[m].n_out;
	}
	p.col0[p.n_mats] = (int)cols;
	p.mat_stride = a->mat_stride;
	p.stripe_bytes = (uint64_t)S * row;
	p.expert = a->d_expert;
	p.x = a->d_x;
	p.ldx = a->ldx;
	p.x_div = a->x_div;
	p.n = (int)cols;
	p.k = (int)a->n_in;
	const bool stream = a->gemv_kt == QC_CUDA_GEMV_STREAM && !a->d_expert;
	bool hint_ok = a->l2.n >= 0 && a->l2.n <= QC_CUDA_L2_RANGES;
	for (int r = 0; hint_ok && r < a->l2.n; r++)
		hint_ok = a->l2.d[r] && (uintptr_t)a->l2.d[r] % 16 == 0 && a->l2.bytes[r] % 16 == 0;
	if (!hint_ok) /* a caller's bug: say so rather than prefetch past an allocation */
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "marlin_gemv: L2 hint of %d ranges not aligned",
				  a->l2.n);
	if (stream) /* the load-once kernel takes no hint */
		p.l2 = a->l2;
	const enum qc_cuda_gemv_kt kt = a->gemv_kt == QC_CUDA_GEMV_STREAM ? QC_CUDA_GEMV_KT4 : a->gemv_kt;
	p.kb = blocks_along_k(a->n_in, kt);
	if (stream)
		qc_mgv_stream_partition(qc_marlin_bits(a->layout), a->n_in, cols, &p.kb, &p.kt_block);
	p.ws = (float *)a->d_ws;
	p.flags = a->d_flags;
	p.x2 = a->d_x2;
	p.acc = a->accumulate != 0;
	p.norm_w = a->d_norm_w;
	p.norm_eps = a->norm_eps;
	p.norm_once = norm_once;
	const uint64_t nf = a->d_flags && a->n_flags > 0 ? (uint64_t)a->n_flags : 0;
	const uint64_t need = qc_cuda_marlin_gemv_ws(a->n_in, cols, a->n_rows, a->gemv_kt);
	if (need && (!a->d_ws || a->ws_bytes < need))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "marlin_gemv: n_in %lld, n_out %lld needs %llu scratch bytes, got %llu",
				  (long long)a->n_in, (long long)cols, (unsigned long long)need,
				  (unsigned long long)a->ws_bytes);
	/* the (bits, offsets) pair picks the instantiation; qc_marlin_stripe above
	 * refused every non-marlin id */
	const bool k8 = kt_warp(kt) == 8, zp = qc_marlin_has_offsets(a->layout);
	if (stream && qc_mgv_stream_choice(qc_marlin_bits(a->layout)).persist)
		return qc_mgv_persist_launch(qc_marlin_bits(a->layout), zp, p, a->n_rows, nf, s, err);
	if (stream)
		return qc_mgv_stream_launch(qc_marlin_bits(a->layout), zp, p, a->n_rows, nf, s, err);
	if (qc_marlin_bits(a->layout) == 6) /* q6_K: no offsets */
		return k8 ? launch<6, false, 8>(p, a->n_rows, nf, s, err) : launch<6, false, 4>(p, a->n_rows, nf, s, err);
	if (qc_marlin_bits(a->layout) == 4)
		return zp ? (k8 ? launch<4, true, 8>(p, a->n_rows, nf, s, err) : launch<4, true, 4>(p, a->n_rows, nf, s, err))
			  : (k8 ? launch<4, false, 8>(p, a->n_rows, nf, s, err) : launch<4, false, 4>(p, a->n_rows, nf, s, err));
	return zp ? (k8 ? launch<8, true, 8>(p, a->n_rows, nf, s, err) : launch<8, true, 4>(p, a->n_rows, nf, s, err))
		  : (k8 ? launch<8, false, 8>(p, a->n_rows, nf, s, err) : launch<8, false, 4>(p, a->n_rows, nf, s, err));
}
