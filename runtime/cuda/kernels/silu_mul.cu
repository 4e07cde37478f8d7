/* silu_mul.cu — SwiGLU: y = silu(gate) * up, elementwise.
 * silu(x) = x / (1 + expf(-x)) as ggml (accurate expf, not __expf).
 * Non-goals: fusing into the gate/up matmul. Reference: runtime/ops/silu_mul.c.
 */
#include "silu_mul.h"

#include <cuda_runtime.h>

static __global__ void silu_mul_kernel(const struct qc_cuda_silu_mul_args a)
{
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= a.n)
		return;
	const float g = a.d_g[i];
	a.d_y[i] = __fmul_rn(__fdiv_rn(g, 1.0f + expf(-g)), a.d_u[i]);
}

extern "C" int qc_cuda_silu_mul(const struct qc_cuda_silu_mul_args *a, cudaStream_t s, struct qc_err *err)
{
	if (a->n < 0 || (a->n + 255) / 256 > INT32_MAX)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "silu_mul: n %lld", (long long)a->n);
	if (!a->n)
		return QC_OK;
	silu_mul_kernel<<<(unsigned)((a->n + 255) / 256), 256, 0, s>>>(*a);
	return qc_cuda_check(cudaGetLastError(), "silu_mul_kernel", err);
}
