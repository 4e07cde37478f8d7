/* dequant_f16.cu — decode GGML rows (or float activations) to binary16.
 *
 * Owns: the feed of the tensor-core path: weights of the prefill GEMM are
 * decoded to fp16 tiles here and activations cast with the same kernel (type
 * F32), then gemm_f16.cu runs cuBLAS. One thread per 32-element chunk.
 * Non-goals: keeping the fp16 copy (the backend reuses one scratch buffer).
 * Reference: runtime/ops/dequant_f16.c (qc_dequant_row_* then qc_f32_to_fp16).
 */
#include "dequant_f16.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "decode_dispatch.cuh"

template <int T>
static __global__ void dequant_f16_kernel(const struct qc_cuda_dequant_f16_args a)
{
	const int64_t n_chunks = (a.n + 31) / 32;
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= a.n_rows * n_chunks)
		return;
	const int64_t r = i / n_chunks, j = i % n_chunks;
	const uint8_t *row = a.d_src + (uint64_t)r * a.row_bytes;
	__half *dst = (__half *)a.d_dst + r * a.n + j * 32;
	if constexpr (qc_dev<T>::PLAIN) {
		if (32 * j + 32 > a.n) { /* the short last chunk of a plain row */
			for (int64_t k = 32 * j; k < a.n; k++)
				dst[k - 32 * j] = __float2half_rn(qc_dev<T>::dec1(row, k));
			return;
		}
	}
	float w[32];
	int c;
	qc_dev<T>::dec32(chunk_ptr<T>(row, j, &c), c, w);
	if (!((uintptr_t)dst & 15)) { /* 16-byte stores: 4 per chunk instead of 32 */
		uint4 *v = (uint4 *)dst;
#pragma unroll
		for (int k = 0; k < 4; k++) {
			__half2 h[4];
#pragma unroll
			for (int m = 0; m < 4; m++)
				h[m] = __halves2half2(__float2half_rn(w[8 * k + 2 * m]), __float2half_rn(w[8 * k + 2 * m + 1]));
			uint4 u;
			memcpy(&u, h, sizeof u);
			v[k] = u;
		}
		return;
	}
	for (int k = 0; k < 32; k++)
		dst[k] = __float2half_rn(w[k]);
}

typedef void (*launch_fn)(const struct qc_cuda_dequant_f16_args *a, cudaStream_t s);

template <int T> static void launch(const struct qc_cuda_dequant_f16_args *a, cudaStream_t s)
{
	const int64_t n = a->n_rows * ((a->n + 31) / 32);
	dequant_f16_kernel<T><<<(unsigned)((n + 255) / 256), 256, 0, s>>>(*a);
}

/* The launcher for t, nullptr when t has no device decoder (decode_dispatch.cuh). */
static launch_fn find(enum qc_type t)
{
	return qc_dev_find<launch_fn>(t, [](auto tag) { return launch<decltype(tag)::value>; });
}

extern "C" int qc_cuda_dequant_f16(const struct qc_cuda_dequant_f16_args *a, cudaStream_t s,
				   struct qc_err *err)
{
	const launch_fn f = find(a->type);
	if (!f || (a->n % 32 && qc_types[a->type].block_elems != 1) || a->n < 1 || a->n_rows < 1 ||
	    (a->n_rows * ((a->n + 31) / 32) + 255) / 256 > INT32_MAX)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "dequant_f16: type %s, %lld rows of %lld not supported",
				  qc_types[a->type].name ? qc_types[a->type].name : "?", (long long)a->n_rows,
				  (long long)a->n);
	f(a, s);
	return qc_cuda_check(cudaGetLastError(), "dequant_f16_kernel", err);
}
