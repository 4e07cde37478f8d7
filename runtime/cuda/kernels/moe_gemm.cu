/* moe_gemm.cu — grouped MoE GEMM: rows sorted by expert, tensor-core tiles.
 *
 * Owns: the prefill matmul of stacked expert weights (GGML layout, every type
 * with a decode.cuh decoder), all on the device with no host synchronization,
 * so it is graph-capturable although the row -> expert map exists only there:
 *   1. hist_kernel: per chunk of SORT_ROWS rows, rows per expert;
 *      scan_kernel (one block, a thread per expert): exclusive scans give each
 *      expert its first sorted position, each chunk its first position within
 *      the expert, and the tile list (expert, first sorted row) of BM-row
 *      tiles that never mix experts; scatter_kernel: a stable placement (rank
 *      among the chunk's earlier rows of the same expert), so the sorted order
 *      and thus every result is the same run to run.
 *   2. gemm_kernel, grid (n_out / BN, worst-case tile count): a block past the
 *      real tile count exits at once. Per BK step it gathers its BM rows of x
 *      (float -> fp16) and decodes BN weight rows with qc_dev<T>::dec32 (fp16)
 *      into shared memory; 4 warps of 32 x 32 each run wmma m16n16k16 (fp32
 *      accumulation); the tile goes back through shared memory to the rows'
 *      own positions r in y.
 * The sort is the vLLM/SGLang fused-MoE idea (moe_align_block_size: tokens
 * sorted by expert, padded to the tile height); the code is ours.
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

#define SORT_ROWS 256     /* rows per sort chunk: threads of hist_kernel and scatter_kernel */
#define SCAN_THREADS 1024 /* scan_kernel: one thread per expert */
#define BM 64             /* rows (of one expert) per tile */
#define BN 64             /* output columns per block */
#define BK 64             /* n_in per step: two 32-element chunks per weight row */
#define THREADS 128       /* 4 warps in 2 x 2, each 32 x 32 of the tile */
#define LDS (BK + 8)      /* fp16 row pitch of xs/ws: a multiple of 8 (wmma), 144 bytes */
#define LDC (BN + 4)      /* float row pitch of the output tile: a multiple of 4 (wmma) */
#define MAX_GRID_Y 65535

static_assert(SCAN_THREADS == 32 * 32, "block_scan: warp 0 scans one sum per warp");
static_assert(QC_CUDA_MOE_GEMM_MAX_EXPERTS <= SCAN_THREADS, "scan_kernel: one thread per expert");
static_assert(THREADS == 2 * BN && BK == 64, "weight decode: thread = (row of the BN block, chunk)");
static_assert(BM == 64 && BN == 64 && THREADS == 128, "warp layout: 2 x 2 warps of 32 x 32");
static_assert((LDS * 2 * 16) % 32 == 0 && LDS % 8 == 0, "wmma fp16 tiles: 32-byte aligned fragments");
static_assert((LDC * 4 * 16) % 32 == 0 && LDC % 4 == 0, "wmma float tile: 32-byte aligned fragments");

#define XS_HALFS (BM * LDS)
#define WS_HALFS (BN * LDS)
#define SMEM_BYTES (2 * (XS_HALFS + WS_HALFS))
static_assert(BM * LDC * 4 <= SMEM_BYTES, "the output tile reuses the operand tiles");
static_assert((XS_HALFS * 2) % 128 == 0, "ws starts 128-byte aligned");

/* The sort's arrays in the scratch (int32 each). */
struct sort_view {
	int32_t *hist;    /* (n_chunks, nx) rows of expert e in chunk c; after scan_kernel: the
			     sorted position of the chunk's first row of e */
	int32_t *sorted;  /* (n_rows) row ids by expert, stable */
	int32_t *off;     /* (nx + 1) first sorted position of each expert; off[nx]: valid rows */
	int32_t *tiles;   /* (max_tiles, 2) expert, first sorted position */
	int32_t *n_tiles; /* (1) tiles in use */
	int32_t nx, n_chunks, max_tiles;
};

static uint64_t align256(uint64_t n)
{
	return (n + 255) & ~(uint64_t)255;
}

static int64_t max_tiles_of(int64_t n_rows, int64_t nx)
{
	/* each expert wastes at most one partial tile, and at most n_rows experts have rows */
	return (n_rows + BM - 1) / BM + (nx < n_rows ? nx : n_rows);
}

/* Section sizes of the scratch; base NULL: sizes only. Returns the bytes. */
static uint64_t carve(int64_t n_rows, int64_t nx, uint8_t *base, struct sort_view *v)
{
	const int64_t n_chunks = (n_rows + SORT_ROWS - 1) / SORT_ROWS, mt = max_tiles_of(n_rows, nx);
	const uint64_t b_hist = align256((uint64_t)n_chunks * (uint64_t)nx * 4);
	const uint64_t b_sorted = align256((uint64_t)n_rows * 4);
	const uint64_t b_off = align256((uint64_t)(nx + 1) * 4);
	const uint64_t b_tiles = align256((uint64_t)mt * 8);
	if (base) {
		v->hist = (int32_t *)base;
		v->sorted = (int32_t *)(base + b_hist);
		v->off = (int32_t *)(base + b_hist + b_sorted);
		v->tiles = (int32_t *)(base + b_hist + b_sorted + b_off);
		v->n_tiles = (int32_t *)(base + b_hist + b_sorted + b_off + b_tiles);
		v->nx = (int32_t)nx;
		v->n_chunks = (int32_t)n_chunks;
		v->max_tiles = (int32_t)mt;
	}
	return b_hist + b_sorted + b_off + b_tiles + 256;
}

static __device__ __forceinline__ int32_t expert_of(const struct qc_cuda_mm_args &a, int64_t r)
{
	return a.d_expert ? a.d_expert[r] : 0;
}

/* Rows per expert in this block's chunk; a row with an expert out of range
 * gets NaN outputs here and takes no further part. */
static __global__ void __launch_bounds__(SORT_ROWS) hist_kernel(const struct qc_cuda_mm_args a, const struct sort_view v)
{
	__shared__ int32_t h[QC_CUDA_MOE_GEMM_MAX_EXPERTS];
	for (int e = threadIdx.x; e < v.nx; e += SORT_ROWS)
		h[e] = 0;
	__syncthreads();
	const int64_t r = (int64_t)blockIdx.x * SORT_ROWS + threadIdx.x;
	if (r < a.n_rows) {
		const int32_t e = expert_of(a, r);
		if (e >= 0 && e < v.nx) {
			atomicAdd(&h[e], 1);
		} else {
			for (int64_t o = 0; o < a.n_out; o++)
				a.d_y[r * a.ldy + o] = __int_as_float(0x7fc00000);
		}
	}
	__syncthreads();
	for (int e = threadIdx.x; e < v.nx; e += SORT_ROWS)
		v.hist[(int64_t)blockIdx.x * v.nx + e] = h[e];
}

/* Exclusive prefix sum of v over the SCAN_THREADS threads of the block;
 * *total gets the sum. Every thread must call it (it synchronizes). */
static __device__ int32_t block_scan(int32_t v, int32_t *sums, int32_t *total)
{
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	int32_t incl = v;
	for (int d = 1; d < 32; d <<= 1) {
		const int32_t t = __shfl_up_sync(0xffffffffu, incl, d);
		if (lane >= d)
			incl += t;
	}
	if (lane == 31)
		sums[w] = incl;
	__syncthreads();
	if (w == 0) {
		int32_t s = sums[lane];
		for (int d = 1; d < 32; d <<= 1) {
			const int32_t t = __shfl_up_sync(0xffffffffu, s, d);
			if (lane >= d)
				s += t;
		}
		sums[lane] = s;
	}
	__syncthreads();
	const int32_t res = (w ? sums[w - 1] : 0) + incl - v;
	*total = sums[31];
	__syncthreads(); /* sums is reused by the next call */
	return res;
}

/* One block: expert offsets, per-chunk positions, the tile list. */
static __global__ void __launch_bounds__(SCAN_THREADS) scan_kernel(const struct sort_view v)
{
	__shared__ int32_t sums[32];
	const int e = threadIdx.x;
	const bool live = e < v.nx;
	int32_t cnt = 0;
	for (int64_t c = 0; live && c < v.n_chunks; c++) {
		int32_t *p = &v.hist[c * v.nx + e];
		const int32_t h = *p;
		*p = cnt;
		cnt += h;
	}
	int32_t n_valid, n_tiles;
	const int32_t off = block_scan(cnt, sums, &n_valid);
	const int32_t nt = (cnt + BM - 1) / BM;
	const int32_t toff = block_scan(nt, sums, &n_tiles);
	if (live) {
		for (int64_t c = 0; c < v.n_chunks; c++)
			v.hist[c * v.nx + e] += off;
		v.off[e] = off;
		for (int32_t t = 0; t < nt && toff + t < v.max_tiles; t++) {
			v.tiles[2 * (toff + t)] = e;
			v.tiles[2 * (toff + t) + 1] = off + t * BM;
		}
	}
	if (threadIdx.x == 0) {
		v.off[v.nx] = n_valid;
		*v.n_tiles = n_tiles < v.max_tiles ? n_tiles : v.max_tiles; /* never more: max_tiles_of */
	}
}

/* Row r goes to hist[chunk][e] + (rows of e earlier in the chunk): stable. */
static __global__ void __launch_bounds__(SORT_ROWS) scatter_kernel(const struct qc_cuda_mm_args a, const struct sort_view v)
{
	__shared__ int32_t ex[SORT_ROWS];
	const int64_t r = (int64_t)blockIdx.x * SORT_ROWS + threadIdx.x;
	int32_t e = -1;
	if (r < a.n_rows) {
		e = expert_of(a, r);
		e = e >= 0 && e < v.nx ? e : -1;
	}
	ex[threadIdx.x] = e;
	__syncthreads();
	if (e < 0)
		return;
	int32_t rank = 0;
	for (int i = 0; i < (int)threadIdx.x; i++)
		rank += ex[i] == e;
	v.sorted[v.hist[(int64_t)blockIdx.x * v.nx + e] + rank] = (int32_t)r;
}

template <int T>
static __global__ void __launch_bounds__(THREADS) gemm_kernel(const struct qc_cuda_mm_args a, const struct sort_view v)
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

typedef void (*launch_fn)(const struct qc_cuda_mm_args *a, const struct sort_view *v, cudaStream_t s);

template <int T> static void launch(const struct qc_cuda_mm_args *a, const struct sort_view *v, cudaStream_t s)
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
	return carve(n_rows, n_experts, NULL, NULL);
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
	    nx > QC_CUDA_MOE_GEMM_MAX_EXPERTS || max_tiles_of(a->n_rows, nx) > MAX_GRID_Y ||
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
	struct sort_view v;
	carve(a->n_rows, nx, (uint8_t *)a->d_ws, &v);
	hist_kernel<<<(unsigned)v.n_chunks, SORT_ROWS, 0, s>>>(*a, v);
	scan_kernel<<<1, SCAN_THREADS, 0, s>>>(v);
	scatter_kernel<<<(unsigned)v.n_chunks, SORT_ROWS, 0, s>>>(*a, v);
	f(a, &v, s);
	return qc_cuda_check(cudaGetLastError(), "moe_gemm kernels", err);
}
