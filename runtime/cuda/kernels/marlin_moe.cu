/* marlin_moe.cu — stacked experts in a marlin layout, many rows (the layout table's
 * QC_KERNEL_MOE_GEMM for marlin_*): the grouped forms of the marlin GEMM.
 *
 * Owns: qc_cuda_marlin_moe, three steps on the stream, no host synchronization
 * (graph-capturable although the row -> expert map exists only on the device):
 *   1. the row sort (moe_sort.cu) into tiles of one expert, group_rows high;
 *   2. gather_f16: sorted row s = fp16(x of row sorted[s]) into the scratch (the
 *      one rounding every marlin tensor-core path adds, rows_to_f16's);
 *   3. qc_cuda_marlin_gemm in grouped mode: block x is tile x, its weights slice e
 *      of the stack, its outputs written to the rows' own places in y (the
 *      mma.sync tiles may split K: the partials follow the fp16 rows).
 * The tile height follows the mean rows an expert gets: a decode step has few (64
 * requests, top-2 of 8 experts: 16 each), and the mma.sync kernel's 16-64-row tiles
 * stream each expert's weights once per tile; prefill has many, and on compute
 * capability 9.0 the warp-specialized kernel's 128-row tiles multiply at wgmma's
 * rate. QC_MARLIN_MOE_ROWS forces one (qc_cuda_marlin_moe_rows).
 * Why: before, marlin experts ran one GEMV per row (each row streaming its expert's
 * whole matrix) and plan.c kept experts ggml for the wmma grouped GEMM (moe_gemm.cu).
 * Reference: runtime/ops/marlin_gemm.c with an expert per row (fp16 activations).
 */
#include "f16_pack.cuh"
#include "marlin_gemm.cuh"
#include "moe_sort.cuh"
#include "pdl.cuh"

#include <cuda_fp16.h>

namespace {

uint64_t align256(uint64_t n)
{
	return (n + 255) & ~(uint64_t)255;
}

/* xs[s][k] = fp16(x[(sorted[s] / x_div) * ldx + k]) for the sorted rows s <
 * off[nx], 8 values a thread (X8: n_in % 8 == 0, ldx % 4 == 0, x 16-byte aligned),
 * else one. Rows past off[nx] are left as they are: they only feed outputs the GEMM
 * never stores (a token's outputs depend on its own row alone). */
template <bool X8>
__global__ void gather_f16(const float *x, int64_t ldx, int32_t x_div, int64_t n_in, int64_t n_rows,
			   const struct qc_moe_sort v, __half *xs)
{
	qc_pdl_enter();
	constexpr int V = X8 ? 8 : 1;
	const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
	if (i >= n_rows * n_in)
		return;
	const int64_t s = i / n_in, k = i % n_in;
	if (s >= v.off[v.nx])
		return;
	const float *src = x + (int64_t)(v.sorted[s] / x_div) * ldx + k;
	if constexpr (X8) {
		qc_store_f16x8(xs + i, ((const float4 *)src)[0], ((const float4 *)src)[1]);
	} else {
		xs[i] = __float2half_rn(*src);
	}
}

int forced_rows = 0; /* qc_cuda_marlin_moe_rows */

/* Tile height for n_rows rows over nx experts (the comment at the top). Measured on
 * 4 Mixtral-shape layers, Q4_0, H200 (docs/perf-notes.md, fifteenth session): at a
 * mean of 16 rows an expert (64 requests, top-2 of 8) 32-row tiles decode 21.9k
 * tok/s against 20.4k on 16-row ones, which split every expert past 16 rows in two
 * and stream its weights twice; at a mean of 8, 16-row tiles win (15.9k vs 13.3k);
 * at 32, 32-row tiles equal the rest. */
int group_rows(int64_t n_rows, int64_t nx, bool ws_ok)
{
	if (forced_rows == 16 || forced_rows == 32 || forced_rows == 64 ||
	    (forced_rows == QC_MARLIN_GROUP_ROWS_WS && ws_ok))
		return forced_rows;
	if (forced_rows != 0)
		QC_WARN_ONCE("cuda: QC_MARLIN_MOE_ROWS=%d is no tile height here (16, 32, 64; 128 on compute "
			     "capability 9.0): the rows per expert choose", forced_rows);
	const int64_t mean = (n_rows + nx - 1) / nx;
	if (ws_ok && mean > 64)
		return QC_MARLIN_GROUP_ROWS_WS;
	return mean <= 12 ? 16 : mean <= 32 ? 32 : 64;
}

} /* namespace */

extern "C" void qc_cuda_marlin_moe_rows(int rows)
{
	forced_rows = rows;
}

extern "C" uint64_t qc_cuda_marlin_moe_ws(int64_t n_in, int64_t n_out, int64_t n_rows, int64_t n_mat)
{
	if (n_rows < 1 || n_mat < 1 || n_in < 1 || n_out < 1)
		return 0;
	/* the sort (its tile list is longest for the lowest tiles), the fp16 rows, then
	 * the split-K partials: the mma.sync plan keeps them under half the weight's
	 * bytes (marlin_gemm.cu make_plan), at most n_in · n_out / 2 */
	return qc_moe_sort_carve(n_rows, n_mat, 16, NULL, NULL) + align256((uint64_t)n_rows * (uint64_t)n_in * 2) +
	       align256((uint64_t)n_in * (uint64_t)n_out / 2);
}

extern "C" int qc_cuda_marlin_moe(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err)
{
	if (qc_cuda_mm_check_fuse(a, 0, "marlin_moe", err))
		return QC_EUNSUPPORTED;
	if (a->n_rows == 0)
		return QC_OK;
	const int64_t nx = a->d_expert ? a->n_mat : 1;
	if (nx < 1 || nx > QC_MOE_SORT_MAX_EXPERTS || a->x_div < 1 || a->n_rows > INT32_MAX ||
	    qc_moe_sort_max_tiles(a->n_rows, nx, 16) > INT32_MAX)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "marlin_moe: %lld rows over %lld experts (x_div %d) not supported (at most %d experts)",
				  (long long)a->n_rows, (long long)nx, (int)a->x_div, QC_MOE_SORT_MAX_EXPERTS);
	bool ws_ok = false;
	int rc = qc_cuda_marlin_gemm_grouped_ok(&ws_ok, err);
	if (rc)
		return rc;
	const int tile = group_rows(a->n_rows, nx, ws_ok);
	const uint64_t sort_b = qc_moe_sort_carve(a->n_rows, nx, 16, NULL, NULL);
	const uint64_t need = qc_cuda_marlin_moe_ws(a->n_in, a->n_out, a->n_rows, nx);
	if (!a->d_ws || ((uintptr_t)a->d_ws & 255) || a->ws_bytes < need)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "marlin_moe: scratch of %llu bytes at %p too small or unaligned (%llu needed, 256-byte "
				  "aligned)", (unsigned long long)a->ws_bytes, a->d_ws, (unsigned long long)need);
	struct qc_moe_sort v;
	qc_moe_sort_carve(a->n_rows, nx, tile, (uint8_t *)a->d_ws, &v);
	if ((rc = qc_moe_sort_run(a, &v, s, err)))
		return rc;
	__half *xs = (__half *)((uint8_t *)a->d_ws + sort_b);
	const bool x8 = a->n_in % 8 == 0 && a->ldx % 4 == 0 && (uintptr_t)a->d_x % 16 == 0;
	const int64_t work = (x8 ? a->n_rows * a->n_in / 8 : a->n_rows * a->n_in);
	(void)qc_launch(x8 ? gather_f16<true> : gather_f16<false>, dim3((unsigned)((work + 255) / 256)), dim3(256), 0,
			s, a->d_x, a->ldx, a->x_div, a->n_in, a->n_rows, v, xs);
	if ((rc = qc_cuda_check(cudaGetLastError(), "marlin_moe: gather_f16", err)))
		return rc;
	struct qc_marlin_gemm_args g = {};
	g.layout = a->layout;
	g.type = a->type;
	g.m = a->n_rows;
	g.n = a->n_out;
	g.k = a->n_in;
	g.a = xs;
	g.w = a->d_w;
	g.c = a->d_y;
	g.ldc = a->ldy;
	g.c_type = QC_MARLIN_C_F32;
	g.mat_stride = a->mat_stride;
	g.tiles = v.tiles;
	g.n_tiles = v.n_tiles;
	g.seg_end = v.off;
	g.rows = v.sorted;
	g.max_tiles = v.max_tiles;
	g.group_rows = tile;
	g.n_sorted = v.off + nx;
	const uint64_t part_off = sort_b + align256((uint64_t)a->n_rows * (uint64_t)a->n_in * 2);
	g.workspace = (uint8_t *)a->d_ws + part_off;
	g.workspace_bytes = (size_t)(a->ws_bytes - part_off);
	return qc_cuda_marlin_gemm(&g, s, err);
}
