/* moe_sort.cu — the row sort of the grouped MoE GEMMs (moe_sort.cuh says what and
 * why). Index grammar: r activation row, e expert, c sort chunk, s sorted position.
 */
#include "moe_sort.cuh"

static_assert(QC_MOE_SORT_MAX_EXPERTS == 32 * 32, "block_scan: warp 0 scans one sum per warp");

static uint64_t align256(uint64_t n)
{
	return (n + 255) & ~(uint64_t)255;
}

int64_t qc_moe_sort_max_tiles(int64_t n_rows, int64_t nx, int tile_rows)
{
	return (n_rows + tile_rows - 1) / tile_rows + (nx < n_rows ? nx : n_rows);
}

uint64_t qc_moe_sort_carve(int64_t n_rows, int64_t nx, int tile_rows, uint8_t *base, struct qc_moe_sort *v)
{
	const int64_t n_chunks = (n_rows + QC_MOE_SORT_CHUNK - 1) / QC_MOE_SORT_CHUNK, mt = qc_moe_sort_max_tiles(n_rows, nx, tile_rows);
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
		v->tile_rows = tile_rows;
	}
	return b_hist + b_sorted + b_off + b_tiles + 256;
}

static __device__ __forceinline__ int32_t expert_of(const struct qc_cuda_mm_args &a, int64_t r)
{
	return a.d_expert ? a.d_expert[r] : 0;
}

/* Rows per expert in this block's chunk; a row with an expert out of range
 * gets NaN outputs here and takes no further part. */
static __global__ void __launch_bounds__(QC_MOE_SORT_CHUNK) hist_kernel(const struct qc_cuda_mm_args a, const struct qc_moe_sort v)
{
	__shared__ int32_t h[QC_MOE_SORT_MAX_EXPERTS];
	for (int e = threadIdx.x; e < v.nx; e += QC_MOE_SORT_CHUNK)
		h[e] = 0;
	__syncthreads();
	const int64_t r = (int64_t)blockIdx.x * QC_MOE_SORT_CHUNK + threadIdx.x;
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
	for (int e = threadIdx.x; e < v.nx; e += QC_MOE_SORT_CHUNK)
		v.hist[(int64_t)blockIdx.x * v.nx + e] = h[e];
}

/* Exclusive prefix sum of v over the QC_MOE_SORT_MAX_EXPERTS threads of the block;
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
static __global__ void __launch_bounds__(QC_MOE_SORT_MAX_EXPERTS) scan_kernel(const struct qc_moe_sort v)
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
	const int32_t nt = (cnt + v.tile_rows - 1) / v.tile_rows;
	const int32_t toff = block_scan(nt, sums, &n_tiles);
	if (live) {
		for (int64_t c = 0; c < v.n_chunks; c++)
			v.hist[c * v.nx + e] += off;
		v.off[e] = off;
		for (int32_t t = 0; t < nt && toff + t < v.max_tiles; t++) {
			v.tiles[2 * (toff + t)] = e;
			v.tiles[2 * (toff + t) + 1] = off + t * v.tile_rows;
		}
	}
	if (threadIdx.x == 0) {
		v.off[v.nx] = n_valid;
		*v.n_tiles = n_tiles < v.max_tiles ? n_tiles : v.max_tiles; /* never more: qc_moe_sort_max_tiles */
	}
}

/* Row r goes to hist[chunk][e] + (rows of e earlier in the chunk): stable. */
static __global__ void __launch_bounds__(QC_MOE_SORT_CHUNK) scatter_kernel(const struct qc_cuda_mm_args a, const struct qc_moe_sort v)
{
	__shared__ int32_t ex[QC_MOE_SORT_CHUNK];
	const int64_t r = (int64_t)blockIdx.x * QC_MOE_SORT_CHUNK + threadIdx.x;
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

int qc_moe_sort_run(const struct qc_cuda_mm_args *a, const struct qc_moe_sort *v, cudaStream_t s, struct qc_err *err)
{
	hist_kernel<<<(unsigned)v->n_chunks, QC_MOE_SORT_CHUNK, 0, s>>>(*a, *v);
	scan_kernel<<<1, QC_MOE_SORT_MAX_EXPERTS, 0, s>>>(*v);
	scatter_kernel<<<(unsigned)v->n_chunks, QC_MOE_SORT_CHUNK, 0, s>>>(*a, *v);
	return qc_cuda_check(cudaGetLastError(), "moe_sort kernels", err);
}
