/* silu_mul.cu — SwiGLU: y = silu(gate) * up, elementwise.
 * silu(x) = x / (1 + expf(-x)) as ggml (accurate expf, not __expf).
 * The formula lives in silu.cuh (the marlin GEMV fuses it into its loads). Reference: runtime/ops/silu_mul.c.
 */
#include "silu_mul.h"
#include "pdl.cuh"
#include "silu.cuh"

#include <cuda_runtime.h>

static __global__ void silu_mul_kernel(const struct qc_cuda_silu_mul_args a)
{
	qc_pdl_enter();
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= a.n)
		return;
	a.d_y[i] = qc_silu_mul(a.d_g[i], a.d_u[i]);
}

extern "C" int qc_cuda_silu_mul(const struct qc_cuda_silu_mul_args *a, cudaStream_t s, struct qc_err *err)
{
	if (a->n < 0 || (a->n + 255) / 256 > INT32_MAX)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "silu_mul: n %lld", (long long)a->n);
	if (!a->n)
		return QC_OK;
	(void)qc_launch(silu_mul_kernel, dim3((unsigned)((a->n + 255) / 256)), dim3(256), 0, s, *a);
	return qc_cuda_check(cudaGetLastError(), "silu_mul_kernel", err);
}
