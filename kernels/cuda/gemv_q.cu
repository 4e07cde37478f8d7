/* gemv_q.cu — y = W x with the weight decoded in registers (GGML layout).
 *
 * Owns: the small-batch matmul of every type with a decode.cuh decoder. One
 * warp per output row; lane l decodes 32-element chunks l, l+32, ... once and
 * dots each with up to G activation rows staged in shared memory (G = 8 for
 * one matrix, 1 for a single row or when every row picks its own expert);
 * plain float rows of any length get a per-element tail; a fixed shuffle tree
 * sums the lanes. A row's result never depends on the other rows of the batch
 * (same partition, same order): batched == alone, bit for bit.
 * Non-goals (yet): 16-byte loads of ggml blocks, int8 dot products, split-K.
 * Index grammar: o output row, r activation row, j chunk along the row.
 * Reference: kernels/ref/gemv_q.c (decode a row with qc_dequant_row_*, dot).
 */
#include "gemv_q.h"

#include <cuda_runtime.h>

#include "decode.cuh"

#define WARPS 16 /* output rows per block; they share the staged activations */

/* Activations are staged through shared memory 1024 * U elements (U chunks
 * per lane) at a time, chunk q's element i at xs[q * 33 + i]: lane l reading
 * its chunk's element i hits bank (l + i) % 32, so no conflicts, and the
 * global loads that fill it are coalesced (read straight from global memory,
 * each lane's 32 floats sat on their own cache line: 32-way replays). U = 8
 * for one activation row (a 4096-wide row is one tile: one sync, 8 chunks in
 * flight per lane), 1 for eight. A lane still takes its chunks in increasing
 * order, so every U and G give the same sums. */
template <int T, int G, int U>
static __global__ void __launch_bounds__(32 * WARPS) gemv_q_kernel(const struct qc_cuda_mm_args a)
{
	__shared__ float xs[G][32 * U * 33];
	const int lane = threadIdx.x & 31;
	const int64_t o = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
	const int64_t r0 = (int64_t)blockIdx.y * G;
	const bool live = o < a.n_out; /* dead warps still help stage and sync */
	const int64_t e = a.d_expert ? a.d_expert[r0] : 0;
	const uint8_t *row = a.d_w + (uint64_t)e * a.mat_stride + (uint64_t)(live ? o : 0) * a.row_bytes;
	const int64_t n_chunks = a.n_in / 32;
	const int nr = (int)(a.n_rows - r0 < G ? a.n_rows - r0 : G);
	const float *xr[G];
	float acc[G];
#pragma unroll
	for (int t = 0; t < G; t++) {
		xr[t] = a.d_x + ((r0 + (t < nr ? t : 0)) / a.x_div) * a.ldx;
		acc[t] = 0.0f;
	}
	for (int64_t base = 0; base < n_chunks; base += 32 * U) {
		const int64_t n_el = (n_chunks - base < 32 * U ? n_chunks - base : 32 * U) * 32;
		__syncthreads(); /* the previous tile is consumed */
		for (int idx = threadIdx.x; idx < G * 1024 * U; idx += blockDim.x) {
			const int t = idx / (1024 * U), el = idx % (1024 * U);
			xs[t][(el >> 5) * 33 + (el & 31)] = t < nr && el < n_el ? xr[t][base * 32 + el] : 0.0f;
		}
		__syncthreads();
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int64_t j = base + lane + 32 * u;
			if (!live || j >= n_chunks)
				break;
			float w[32];
			int c;
			qc_dev<T>::dec32(chunk_ptr<T>(row, j, &c), c, w);
#pragma unroll
			for (int t = 0; t < G; t++) {
				if (t < nr) {
					const float *x = &xs[t][(lane + 32 * u) * 33];
					float s = 0.0f;
#pragma unroll
					for (int i = 0; i < 32; i++)
						s = fmaf(w[i], x[i], s);
					acc[t] += s;
				}
			}
		}
	}
	if (!live)
		return;
	if constexpr (qc_dev<T>::PLAIN) { /* rows of any length: the last n_in % 32 elements */
		for (int64_t i = n_chunks * 32 + lane; i < a.n_in; i += 32) {
			const float w = qc_dev<T>::dec1(row, i);
#pragma unroll
			for (int t = 0; t < G; t++)
				if (t < nr)
					acc[t] = fmaf(w, xr[t][i], acc[t]);
		}
	}
#pragma unroll
	for (int t = 0; t < G; t++) {
		float v = acc[t];
		for (int off = 16; off > 0; off >>= 1)
			v += __shfl_xor_sync(0xffffffffu, v, off);
		if (lane == 0 && t < nr)
			a.d_y[(r0 + t) * a.ldy + o] = v;
	}
}

typedef int (*launch_fn)(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err);

template <int T>
static int launch(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err)
{
	const dim3 block(32 * WARPS);
	const unsigned gx = (unsigned)((a->n_out + WARPS - 1) / WARPS);
	if (a->d_expert || a->n_rows == 1) { /* same sums as G = 8: batch-invariant */
		gemv_q_kernel<T, 1, 8><<<dim3(gx, (unsigned)a->n_rows), block, 0, s>>>(*a);
	} else {
		const unsigned gy = (unsigned)((a->n_rows + 7) / 8);
		gemv_q_kernel<T, 8, 1><<<dim3(gx, gy), block, 0, s>>>(*a);
	}
	return qc_cuda_check(cudaGetLastError(), "gemv_q_kernel", err);
}

template <int T> static launch_fn pick()
{
	if constexpr (qc_dev<T>::ok)
		return launch<T>;
	else
		return nullptr;
}

/* Per-type launcher, generated from qtype.def (no hand-written type list). */
static launch_fn find(enum qc_type t)
{
#define QC_TYPE(E, ...) \
	if (t == QC_TYPE_##E) \
		return pick<QC_TYPE_##E>();
#include "qtype.def"
#undef QC_TYPE
	return nullptr;
}

extern "C" bool qc_cuda_gemv_q_supports(enum qc_type t)
{
	return find(t) != nullptr;
}

extern "C" int qc_cuda_gemv_q(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err)
{
	const launch_fn f = find(a->type);
	if (!f)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "gemv_q: no device decoder for %s",
				  qc_types[a->type].name ? qc_types[a->type].name : "?");
	if ((a->n_in % 32 && qc_types[a->type].block_elems != 1) || a->n_in < 1 || a->n_out < 1 || a->n_rows < 1 || a->x_div < 1 ||
	    a->n_rows > 65535 * 8 || (a->d_expert && a->n_rows > 65535))
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "gemv_q: shape n_in %lld, n_out %lld, n_rows %lld, x_div %d not supported",
				  (long long)a->n_in, (long long)a->n_out, (long long)a->n_rows, a->x_div);
	return f(a, s, err);
}
