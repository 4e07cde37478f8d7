/* argmax.cu — per row, the lowest index of the largest logit: greedy sampling
 * on the device, so a greedy decode step brings back 4 bytes per row instead of
 * the vocabulary. "Larger, then lower index" is a total order, so the parallel
 * reduction picks exactly what the host's left-to-right scan picks.
 * Reference: runtime/ops/argmax.c.
 */
#include "argmax.h"
#include "pdl.cuh"

#include <cuda_runtime.h>
#include <math.h>

#define THREADS 1024

/* (v, i) beats (w, j): larger value, then lower index; i < 0 never wins */
static __device__ __forceinline__ bool beats(float v, int32_t i, float w, int32_t j)
{
	return i >= 0 && (j < 0 || v > w || (v == w && i < j));
}

static __global__ void __launch_bounds__(THREADS) argmax_kernel(const struct qc_cuda_argmax_args a)
{
	qc_pdl_enter();
	__shared__ float sv[THREADS / 32];
	__shared__ int32_t si[THREADS / 32];
	__shared__ int sbad[THREADS / 32];
	const float *x = a.d_x + (int64_t)blockIdx.x * a.n;
	float bv = -INFINITY;
	int32_t bi = -1;
	int bad = 0;
	for (int32_t i = threadIdx.x; i < a.n; i += THREADS) {
		const float v = x[i];
		bad |= isnan(v) || v == INFINITY;
		if (v > bv) { /* -inf never taken: an all -inf row stays -1, as on the host */
			bv = v;
			bi = i;
		}
	}
	for (int off = 16; off > 0; off >>= 1) {
		const float w = __shfl_xor_sync(0xffffffffu, bv, off);
		const int32_t j = __shfl_xor_sync(0xffffffffu, bi, off);
		bad |= __shfl_xor_sync(0xffffffffu, bad, off);
		if (beats(w, j, bv, bi)) {
			bv = w;
			bi = j;
		}
	}
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	if (lane == 0) {
		sv[warp] = bv;
		si[warp] = bi;
		sbad[warp] = bad;
	}
	__syncthreads();
	if (threadIdx.x)
		return;
	for (int w = 1; w < THREADS / 32; w++) {
		bad |= sbad[w];
		if (beats(sv[w], si[w], bv, bi)) {
			bv = sv[w];
			bi = si[w];
		}
	}
	a.d_out[blockIdx.x] = bad ? -1 : bi;
}

extern "C" int qc_cuda_argmax(const struct qc_cuda_argmax_args *a, cudaStream_t s, struct qc_err *err)
{
	if (a->n_rows < 0 || a->n_rows > INT32_MAX || a->n < 1)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "argmax: %lld rows of %d", (long long)a->n_rows,
				  a->n);
	if (!a->n_rows)
		return QC_OK;
	(void)qc_launch(argmax_kernel, dim3((unsigned)a->n_rows), dim3(THREADS), 0, s, *a);
	return qc_cuda_check(cudaGetLastError(), "argmax_kernel", err);
}
