/* gemv_q.cu — y = W x with the weight decoded in registers (GGML layout).
 *
 * Owns: the small-batch matmul of every type with a decode.cuh decoder. One
 * warp per output row; lane l decodes 32-element chunks l, l+32, ... once and
 * dots each with up to G activation rows staged in shared memory (G = 2 or
 * 4, the fewest that hold the rows of one matrix, in groups of 4 past that;
 * 1 for a single row or when every row picks its own expert);
 * a fixed shuffle tree sums the lanes. A row's result never depends on the
 * other rows of the batch (same partition, same order): batched == alone, bit
 * for bit.
 * Weight loads: ggml blocks (18, 34, 210... bytes, 2-byte aligned) reach the
 * decoders through shared memory: per warp, each span of 32 chunks (one chunk
 * per lane) is copied with coalesced 16-byte cp.async loads of the aligned
 * 16-byte window around it, STAGES spans in flight, then every lane decodes
 * its chunk from there. Plain float rows (F32/F16/BF16) are read directly
 * with 16-byte loads, plus a per-element tail for rows of any length.
 * Contract (matmul_dispatch.h): the 15 bytes after the last matrix of a block
 * type must be readable (the window's last 16-byte load; allocations are padded
 * by QC_CUDA_MM_PAD), and so must the bytes from the start of the 16-byte unit
 * holding d_w.
 * Non-goals (yet): int8 dot products, split-K.
 * Index grammar: o output row, r activation row, j chunk along the row,
 * s span (32 chunks) along the row.
 * Reference: runtime/ops/gemv_q.c (decode a row with qc_dequant_row_*, dot).
 */
#include "gemv_q.h"
#include "pdl.cuh"

#include <cuda_runtime.h>

#include "cp_async.cuh"
#include "decode_dispatch.cuh"
#include "dev_once.cuh"

#define WARPS 16 /* output rows per block; they share the staged activations */
#define STAGES 4 /* spans of a block-type row in flight per warp */
#define XS(U) (32 * (U) * 33) /* staged floats per activation row: 32 * U chunks of 32, padded to 33 */

/* Activations are staged through shared memory 1024 * U elements (U chunks
 * per lane) at a time, chunk q's element i at xs[q * 33 + i]: lane l reading
 * its chunk's element i hits bank (l + i) % 32, so no conflicts, and the
 * global loads that fill it are coalesced (read straight from global memory,
 * each lane's 32 floats sat on their own cache line: 32-way replays). U = 8
 * for one activation row (a 4096-wide row is one tile: one sync, 8 chunks in
 * flight per lane), 8 / G for G rows. A lane still takes its chunks in
 * increasing order, so every U and G give the same sums. (Float4 reads of a
 * XOR-swizzled copy, 8 instead of 32 shared loads per chunk, measured slower
 * on an H200: 311 -> 387 us for a 128256x4096 F16 row; not kept.)
 * Call with the whole block: it syncs before (the previous tile is consumed)
 * and after. */
template <int G, int U>
static __device__ __forceinline__ void stage_x(float (*xs)[XS(U)], const float *const xr[G], int nr,
					       int64_t base, int64_t n_chunks)
{
	const int64_t n_el = (n_chunks - base < 32 * U ? n_chunks - base : 32 * U) * 32;
	__syncthreads();
#pragma unroll
	for (int t = 0; t < G; t++) /* t unrolled: xr stays in registers */
		for (int el = threadIdx.x; el < 1024 * U; el += blockDim.x)
			xs[t][(el >> 5) * 33 + (el & 31)] = t < nr && el < n_el ? xr[t][base * 32 + el] : 0.0f;
	__syncthreads();
}

/* acc[t] += w . (chunk q of staged row t), each chunk summed from 0 in order */
template <int G, int U>
static __device__ __forceinline__ void dot_chunk(const float w[32], const float (*xs)[XS(U)], int q, int nr,
						 float acc[G])
{
#pragma unroll
	for (int t = 0; t < G; t++) {
		if (t < nr) {
			const float *x = &xs[t][q * 33];
			float s = 0.0f;
#pragma unroll
			for (int i = 0; i < 32; i++)
				s = fmaf(w[i], x[i], s);
			acc[t] += s;
		}
	}
}

/* Lane sums of each activation row through a fixed shuffle tree; lane 0 stores. */
template <int G>
static __device__ __forceinline__ void store_rows(const float acc[G], const struct qc_cuda_mm_args &a, int64_t r0,
						  int nr, int64_t o, int lane)
{
#pragma unroll
	for (int t = 0; t < G; t++) {
		float v = acc[t];
		for (int off = 16; off > 0; off >>= 1)
			v += __shfl_xor_sync(0xffffffffu, v, off);
		if (lane == 0 && t < nr)
			a.d_y[(r0 + t) * a.ldy + o] = v;
	}
}

/* What both kernels derive from the launch: this warp's row, the activation rows. */
template <int G> struct gemv_ctx {
	int lane;
	int64_t o, r0;
	bool live; /* dead warps (o >= n_out) still help stage and sync */
	const uint8_t *row;
	int nr;
	const float *xr[G];
	float acc[G];

	__device__ __forceinline__ gemv_ctx(const struct qc_cuda_mm_args &a)
	{
		lane = threadIdx.x & 31;
		o = (int64_t)blockIdx.y * WARPS + (threadIdx.x >> 5);
		r0 = (int64_t)blockIdx.x * G;
		live = o < a.n_out;
		const int64_t e = a.d_expert ? a.d_expert[r0] : 0;
		row = a.d_w + (uint64_t)e * a.mat_stride + (uint64_t)(live ? o : 0) * a.row_bytes;
		nr = (int)(a.n_rows - r0 < G ? a.n_rows - r0 : G);
#pragma unroll
		for (int t = 0; t < G; t++) {
			xr[t] = a.d_x + ((r0 + (t < nr ? t : 0)) / a.x_div) * a.ldx;
			acc[t] = 0.0f;
		}
	}
};

/* Plain float rows: 16-byte loads straight from global memory (dec32), then
 * the last n_in % 32 elements of rows of any length. */
template <int T, int G, int U>
static __global__ void __launch_bounds__(32 * WARPS) gemv_plain_kernel(const struct qc_cuda_mm_args a)
{
	qc_pdl_enter();
	__shared__ float xs[G][XS(U)];
	gemv_ctx<G> c(a);
	const int64_t n_chunks = a.n_in / 32;
	for (int64_t base = 0; base < n_chunks; base += 32 * U) {
		stage_x<G, U>(xs, c.xr, c.nr, base, n_chunks);
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int64_t j = base + c.lane + 32 * u;
			if (!c.live || j >= n_chunks)
				break;
			float w[32];
			qc_dev<T>::dec32(c.row + j * qc_dev<T>::BYTES, 0, w);
			dot_chunk<G, U>(w, xs, c.lane + 32 * u, c.nr, c.acc);
		}
	}
	if (!c.live)
		return;
	for (int64_t i = n_chunks * 32 + c.lane; i < a.n_in; i += 32) {
		const float w = qc_dev<T>::dec1(c.row, i);
#pragma unroll
		for (int t = 0; t < G; t++)
			if (t < c.nr)
				c.acc[t] = fmaf(w, c.xr[t][i], c.acc[t]);
	}
	store_rows<G>(c.acc, a, c.r0, c.nr, c.o, c.lane);
}

/* Block types: a span is 32 chunks (one per lane), whole blocks since QK
 * divides 1024; its bytes go through a per-warp ring of STAGES windows placed
 * after the G * XS(U) staged activation floats. */
template <int T> struct span_of {
	static constexpr int CPB = qc_dev<T>::QK / 32; /* chunks per block */
	static_assert(qc_dev<T>::QK % 32 == 0 && 32 % CPB == 0, "a span is whole blocks");
	static constexpr int BYTES = 32 / CPB * qc_dev<T>::BYTES;  /* a full span */
	static constexpr int STAGE = (BYTES + 15) / 16 * 16 + 16; /* its 16-byte window, any skew */
};

template <int T, int G, int U> static constexpr size_t blk_smem(void)
{
	return sizeof(float) * G * XS(U) + (size_t)WARPS * STAGES * span_of<T>::STAGE;
}

/* Address of span s of row. */
template <int T> static __device__ __forceinline__ uintptr_t span_at(const uint8_t *row, int64_t s)
{
	return (uintptr_t)(row + s * 32 / span_of<T>::CPB * qc_dev<T>::BYTES);
}

/* Copy the 16-byte window [span start rounded down, span end rounded up) of span s
 * to dst with lane-strided cp.async (coalesced); commits nothing. */
template <int T>
static __device__ __forceinline__ void span_issue(const uint8_t *row, int64_t s, int64_t n_chunks, uint8_t *dst,
						  int lane)
{
	const int64_t nc = n_chunks - s * 32 < 32 ? n_chunks - s * 32 : 32;
	const uintptr_t p = span_at<T>(row, s);
	const uintptr_t a0 = p & ~(uintptr_t)15;
	const uintptr_t a1 = (p + (uintptr_t)(nc / span_of<T>::CPB * qc_dev<T>::BYTES) + 15) & ~(uintptr_t)15;
	const int nv = (int)((a1 - a0) >> 4);
	for (int v = lane; v < nv; v += 32)
		cp_async16(dst + 16 * v, (const void *)(a0 + 16 * (uintptr_t)v), true);
}

template <int T, int G, int U>
static __global__ void __launch_bounds__(32 * WARPS) gemv_blk_kernel(const struct qc_cuda_mm_args a)
{
	qc_pdl_enter();
	using S = span_of<T>;
	extern __shared__ __align__(16) unsigned char smem[];
	float(*xs)[XS(U)] = (float(*)[XS(U)])(void *)smem;
	gemv_ctx<G> c(a);
	uint8_t *ring = smem + sizeof(float) * G * XS(U) + (size_t)(threadIdx.x >> 5) * STAGES * S::STAGE;
	const int64_t n_chunks = a.n_in / 32, n_spans = (n_chunks + 31) / 32;
#pragma unroll
	for (int k = 0; k < STAGES - 1; k++) { /* prologue: spans 0 .. STAGES - 2 in flight */
		if (c.live && k < n_spans)
			span_issue<T>(c.row, k, n_chunks, ring + k * S::STAGE, c.lane);
		cp_async_commit();
	}
	for (int64_t s = 0; s < n_spans; s++) {
		if (s % U == 0)
			stage_x<G, U>(xs, c.xr, c.nr, s * 32, n_chunks);
		const int64_t next = s + STAGES - 1; /* into the slot span s - 1 left */
		if (c.live && next < n_spans)
			span_issue<T>(c.row, next, n_chunks, ring + (next % STAGES) * S::STAGE, c.lane);
		cp_async_commit();
		cp_async_wait<STAGES - 1>(); /* span s landed: this lane's copies */
		__syncwarp();                /* ... and every lane's */
		const int64_t j = s * 32 + c.lane;
		if (c.live && j < n_chunks) {
			const uint8_t *win = ring + (s % STAGES) * S::STAGE + (span_at<T>(c.row, s) & 15);
			float w[32];
			qc_dev<T>::dec32(win + c.lane / S::CPB * qc_dev<T>::BYTES, c.lane % S::CPB, w);
			dot_chunk<G, U>(w, xs, (int)(s % U) * 32 + c.lane, c.nr, c.acc);
		}
		__syncwarp(); /* every lane is done with slot s % STAGES */
	}
	if (c.live)
		store_rows<G>(c.acc, a, c.r0, c.nr, c.o, c.lane);
}

typedef int (*launch_fn)(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err);

/* One (G, U) instance of the kernel for T on grid g. */
template <int T, int G, int U>
static int launch_one(const struct qc_cuda_mm_args *a, dim3 g, cudaStream_t s, struct qc_err *err)
{
	if constexpr (qc_dev<T>::PLAIN) {
		(void)qc_launch(gemv_plain_kernel<T, G, U>, g, dim3(32 * WARPS), 0, s, *a);
		return qc_cuda_check(cudaGetLastError(), "gemv_plain_kernel", err);
	} else {
		constexpr size_t smem = blk_smem<T, G, U>();
		static qc_dev_once raised; /* the opt-in above 48 KiB, once per instance and device */
		int rc;
		if (smem > 48 * 1024 &&
		    (rc = qc_cuda_check(qc_dev_once_run(raised, [&] {
						return cudaFuncSetAttribute(gemv_blk_kernel<T, G, U>,
									    cudaFuncAttributeMaxDynamicSharedMemorySize,
									    (int)smem);
					}), "cudaFuncSetAttribute(gemv_blk_kernel)", err)))
			return rc;
		(void)qc_launch(gemv_blk_kernel<T, G, U>, g, dim3(32 * WARPS), smem, s, *a);
		return qc_cuda_check(cudaGetLastError(), "gemv_blk_kernel", err);
	}
}

template <int T>
static int launch(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err)
{
	/* G activation rows per block, the fewest that hold n_rows (staging and
	 * reading rows that do not exist costs as much as real ones), at most 4:
	 * more rows take several row groups, and since blockIdx.x (the row group)
	 * varies fastest, the blocks reading the same weights run together and
	 * share them through the L2. (G = 8 with U = 1 syncs every span: on an
	 * H200 two groups of 4 measured faster at 8 rows for F16 and Q4_0, 240 ->
	 * 165 us and 175 -> 156 us at 14336x4096, equal for Q6_K.) G * U = 8, and
	 * every (G, U) gives the same sums: the GEMV stays batch-invariant. */
	const unsigned gy = (unsigned)((a->n_out + WARPS - 1) / WARPS);
	if (a->d_expert || a->n_rows == 1)
		return launch_one<T, 1, 8>(a, dim3((unsigned)a->n_rows, gy), s, err);
	if (a->n_rows == 2)
		return launch_one<T, 2, 4>(a, dim3(1, gy), s, err);
	return launch_one<T, 4, 2>(a, dim3((unsigned)((a->n_rows + 3) / 4), gy), s, err);
}

/* The launcher for t, nullptr when t has no device decoder (decode_dispatch.cuh). */
static launch_fn find(enum qc_type t)
{
	return qc_dev_find<launch_fn>(t, [](auto tag) { return launch<decltype(tag)::value>; });
}

extern "C" bool qc_cuda_gemv_q_supports(enum qc_type t)
{
	return find(t) != nullptr;
}

extern "C" int qc_cuda_gemv_q(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err)
{
	if (qc_cuda_mm_check_fuse(a, 0, "gemv_q", err))
		return QC_EUNSUPPORTED;
	const launch_fn f = find(a->type);
	if (!f)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "gemv_q: no device decoder for %s",
				  qc_types[a->type].name ? qc_types[a->type].name : "?");
	if ((a->n_in % 32 && qc_types[a->type].block_elems != 1) || a->n_in < 1 || a->n_out < 1 || a->n_rows < 1 || a->x_div < 1 ||
	    a->n_out > (int64_t)65535 * WARPS || a->n_rows > INT32_MAX)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "gemv_q: shape n_in %lld, n_out %lld, n_rows %lld, x_div %d not supported",
				  (long long)a->n_in, (long long)a->n_out, (long long)a->n_rows, a->x_div);
	return f(a, s, err);
}
