/* moe_gemm.cu — grouped MoE GEMM: rows sorted by expert, tensor-core tiles.
 *
 * Owns: the prefill matmul of stacked expert weights (GGML layout, every type
 * with a decode.cuh decoder), all on the device with no host synchronization:
 *   1. the row sort (moe_sort.cu): rows ordered by expert and a list of BM-row
 *      tiles (expert, first sorted row) that never mix experts;
 *   2. gemm_kernel, grid (n_out / BN, worst-case tile count): a block past the
 *      real tile count exits at once. Per BK step it gathers its BM rows of x
 *      (float -> fp16) and decodes BN weight rows with qc_dev<T>::dec32 (fp16)
 *      into shared memory; 4 warps of 32 x 32 each run wmma m16n16k16 (fp32
 *      accumulation); the tile goes back through shared memory to the rows'
 *      own positions r in y.
 * Non-goals (yet): double buffering / cp.async, 16-byte block loads, split-K,
 * caching the sort between the three expert matmuls of a layer.
 * Index grammar: r activation row, e expert, s position in the sorted list,
 * m row within a tile, o output row of a weight (= output column), n within
 * the BN block, k along n_in, j 32-element chunk along a weight row.
 * Reference: runtime/ops/moe_gemm.c (fp16-rounded operands, double sums).
 */
#include "moe_gemm.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <string.h>

#include "decode_dispatch.cuh"
#include "moe_sort.cuh"

#define BM 64             /* rows (of one expert) per tile */
#define BN 64             /* output columns per block */
#define BK 64             /* n_in per step: two 32-element chunks per weight row */
#define THREADS 128       /* 4 warps in 2 x 2, each 32 x 32 of the tile */
#define LDS (BK + 8)      /* fp16 row pitch of xs/ws: a multiple of 8 (wmma), 144 bytes */
#define LDC (BN + 4)      /* float row pitch of the output tile: a multiple of 4 (wmma) */
#define MAX_GRID_Y 65535

static_assert(QC_CUDA_MOE_GEMM_MAX_EXPERTS <= QC_MOE_SORT_MAX_EXPERTS, "the sort: one scan thread per expert");
static_assert(THREADS == 2 * BN && BK == 64, "weight decode: thread = (row of the BN block, chunk)");
static_assert(BM == 64 && BN == 64 && THREADS == 128, "warp layout: 2 x 2 warps of 32 x 32");
static_assert((LDS * 2 * 16) % 32 == 0 && LDS % 8 == 0, "wmma fp16 tiles: 32-byte aligned fragments");
static_assert((LDC * 4 * 16) % 32 == 0 && LDC % 4 == 0, "wmma float tile: 32-byte aligned fragments");

#define XS_HALFS (BM * LDS)
#define WS_HALFS (BN * LDS)
#define SMEM_BYTES (2 * (XS_HALFS + WS_HALFS))
static_assert(BM * LDC * 4 <= SMEM_BYTES, "the output tile reuses the operand tiles");
static_assert((XS_HALFS * 2) % 128 == 0, "ws starts 128-byte aligned");

template <int T>
static __global__ void __launch_bounds__(THREADS) gemm_kernel(const struct qc_cuda_mm_args a, const struct qc_moe_sort v)
{
	using namespace nvcuda;
	const int tile = blockIdx.y;
	if (tile >= *v.n_tiles) /* the grid is sized for the worst case */
		return;
	__shared__ __align__(128) uint8_t smem[SMEM_BYTES];
	__shared__ int64_t xrow[BM]; /* float offset of tile row m's activations in x */
	__shared__ int64_t yrow[BM]; /* float offset of its outputs in y; -1: no row */
	__half *xs = (__half *)smem;            /* (BM, LDS) activations, k fastest */
	__half *ws = (__half *)smem + XS_HALFS; /* (BN, LDS) weight rows, k fastest */
	float *cs = (float *)smem;              /* (BM, LDC) the result, after the last step */
	const int tid = threadIdx.x, warp = tid >> 5, wm = warp >> 1, wn = warp & 1;
	const int32_t e = v.tiles[2 * tile], s0 = v.tiles[2 * tile + 1];
	const int32_t rest = v.off[e + 1] - s0;
	const int nv = rest < BM ? rest : BM; /* rows of this tile */
	for (int m = tid; m < BM; m += THREADS) {
		const int64_t r = m < nv ? v.sorted[s0 + m] : -1;
		xrow[m] = r < 0 ? -1 : (r / a.x_div) * a.ldx;
		yrow[m] = r < 0 ? -1 : r * a.ldy;
	}
	const int64_t n0 = (int64_t)blockIdx.x * BN;
	/* this thread decodes chunk kc of weight row n0 + wr at every step */
	const int wr = tid >> 1, kc = tid & 1;
	const int64_t o = n0 + wr;
	const uint8_t *wrow = a.d_w + (uint64_t)e * a.mat_stride + (uint64_t)(o < a.n_out ? o : 0) * a.row_bytes;
	const int64_t n_chunks = a.n_in / 32;
	const bool x2 = !((uintptr_t)a.d_x & 7) && !(a.ldx & 1); /* float2 loads: offsets stay even */

	wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
	for (int i = 0; i < 2; i++)
#pragma unroll
		for (int jj = 0; jj < 2; jj++)
			wmma::fill_fragment(acc[i][jj], 0.0f);

	for (int64_t k0 = 0; k0 < a.n_in; k0 += BK) {
		__syncthreads(); /* the previous step's fragments are loaded (and xrow is set) */
		for (int p = tid; p < BM * BK / 2; p += THREADS) {
			const int m = p / (BK / 2), kk = 2 * (p % (BK / 2));
			const int64_t xo = xrow[m];
			float2 f = make_float2(0.0f, 0.0f);
			if (xo >= 0 && k0 + kk < a.n_in) { /* n_in is even: k + 1 < n_in too */
				const float *src = a.d_x + xo + k0 + kk;
				if (x2)
					f = *(const float2 *)src;
				else
					f = make_float2(src[0], src[1]);
			}
			*(__half2 *)&xs[m * LDS + kk] = __floats2half2_rn(f.x, f.y);
		}
		{
			const int64_t j = k0 / 32 + kc;
			uint4 *dst = (uint4 *)&ws[wr * LDS + kc * 32]; /* 144 wr + 64 kc bytes: 16-byte aligned */
			if (o < a.n_out && j < n_chunks) {
				float w[32];
				int c;
				qc_dev<T>::dec32(chunk_ptr<T>(wrow, j, &c), c, w);
#pragma unroll
				for (int q = 0; q < 4; q++) {
					__half2 h[4];
#pragma unroll
					for (int i = 0; i < 4; i++)
						h[i] = __floats2half2_rn(w[8 * q + 2 * i], w[8 * q + 2 * i + 1]);
					uint4 u;
					memcpy(&u, h, sizeof u);
					dst[q] = u;
				}
			} else {
#pragma unroll
				for (int q = 0; q < 4; q++)
					dst[q] = make_uint4(0, 0, 0, 0);
			}
		}
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < BK; kk += 16) {
			wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
			wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];
#pragma unroll
			for (int i = 0; i < 2; i++)
				wmma::load_matrix_sync(fa[i], xs + (wm * 32 + i * 16) * LDS + kk, LDS);
#pragma unroll
			for (int jj = 0; jj < 2; jj++) /* B(k, n) = ws[n][k]: column-major */
				wmma::load_matrix_sync(fb[jj], ws + (wn * 32 + jj * 16) * LDS + kk, LDS);
#pragma unroll
			for (int i = 0; i < 2; i++)
#pragma unroll
				for (int jj = 0; jj < 2; jj++)
					wmma::mma_sync(acc[i][jj], fa[i], fb[jj], acc[i][jj]);
		}
	}
	__syncthreads(); /* cs overlays xs/ws: every warp is done with them */
#pragma unroll
	for (int i = 0; i < 2; i++)
#pragma unroll
		for (int jj = 0; jj < 2; jj++)
			wmma::store_matrix_sync(cs + (wm * 32 + i * 16) * LDC + wn * 32 + jj * 16, acc[i][jj], LDC,
						wmma::mem_row_major);
	__syncthreads();
	for (int idx = tid; idx < BM * BN; idx += THREADS) {
		const int m = idx / BN, n = idx % BN;
		if (m < nv && n0 + n < a.n_out)
			a.d_y[yrow[m] + n0 + n] = cs[m * LDC + n];
	}
}

typedef void (*launch_fn)(const struct qc_cuda_mm_args *a, const struct qc_moe_sort *v, cudaStream_t s);

template <int T> static void launch(const struct qc_cuda_mm_args *a, const struct qc_moe_sort *v, cudaStream_t s)
{
	const dim3 grid((unsigned)((a->n_out + BN - 1) / BN), (unsigned)v->max_tiles);
	gemm_kernel<T><<<grid, THREADS, 0, s>>>(*a, *v);
}

/* The launcher for t, nullptr when t has no device decoder (decode_dispatch.cuh). */
static launch_fn find(enum qc_type t)
{
	return qc_dev_find<launch_fn>(t, [](auto tag) { return launch<decltype(tag)::value>; });
}

extern "C" bool qc_cuda_moe_gemm_supports(enum qc_type t)
{
	return find(t) != nullptr;
}

extern "C" uint64_t qc_cuda_moe_gemm_ws_bytes(int64_t n_rows, int64_t n_experts)
{
	if (n_rows < 1 || n_experts < 1)
		return 0;
	return qc_moe_sort_carve(n_rows, n_experts, BM, NULL, NULL);
}

extern "C" int qc_cuda_moe_gemm(const struct qc_cuda_moe_gemm_args *ga, cudaStream_t s, struct qc_err *err)
{
	const struct qc_cuda_mm_args *a = &ga->mm;
	if (qc_cuda_mm_check_fuse(a, 0, "moe_gemm", err))
		return QC_EUNSUPPORTED;
	const int64_t nx = ga->n_experts;
	const launch_fn f = (unsigned)a->type < QC_TYPE_COUNT ? find(a->type) : nullptr;
	if (!f || a->layout != QC_LAYOUT_GGML)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "moe_gemm: no grouped GEMM for %s weights (layout %d)",
				  (unsigned)a->type < QC_TYPE_COUNT && qc_types[a->type].name ? qc_types[a->type].name : "?",
				  (int)a->layout);
	if (a->n_in % 32)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "moe_gemm: n_in %lld is not a multiple of 32", (long long)a->n_in);
	if (a->n_in < 32 || a->n_out < 1 || a->n_rows < 0 || a->x_div < 1 || nx < 1 ||
	    nx > QC_CUDA_MOE_GEMM_MAX_EXPERTS || qc_moe_sort_max_tiles(a->n_rows, nx, BM) > MAX_GRID_Y ||
	    (a->n_out + BN - 1) / BN > INT32_MAX)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "moe_gemm: shape n_in %lld, n_out %lld, n_rows %lld, x_div %d, %lld experts not supported",
				  (long long)a->n_in, (long long)a->n_out, (long long)a->n_rows, a->x_div, (long long)nx);
	if (a->n_rows == 0)
		return QC_OK;
	const uint64_t need = qc_cuda_moe_gemm_ws_bytes(a->n_rows, nx);
	if (!a->d_ws || ((uintptr_t)a->d_ws & 255) || a->ws_bytes < need)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "moe_gemm: scratch of %llu bytes at %p too small or unaligned (%llu needed, 256-byte aligned)",
				  (unsigned long long)a->ws_bytes, a->d_ws, (unsigned long long)need);
	struct qc_moe_sort v;
	qc_moe_sort_carve(a->n_rows, nx, BM, (uint8_t *)a->d_ws, &v);
	int rc = qc_moe_sort_run(a, &v, s, err);
	if (rc)
		return rc;
	f(a, &v, s);
	return qc_cuda_check(cudaGetLastError(), "moe_gemm kernels", err);
}

extern "C" int qc_cuda_moe_gemm_mm(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err)
{
	const struct qc_cuda_moe_gemm_args g = {*a, a->n_mat};
	return qc_cuda_moe_gemm(&g, s, err);
}

extern "C" uint64_t qc_cuda_moe_gemm_ws(int64_t n_in, int64_t n_out, int64_t n_rows, int64_t n_mat)
{
	(void)n_in, (void)n_out; /* the sort's arrays only */
	return qc_cuda_moe_gemm_ws_bytes(n_rows, n_mat);
}
