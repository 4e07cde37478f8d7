/* add.cu — y += x, with x repeated every n_x elements: the residual add
 * (n_x = n) and the q/k/v bias add (n_x = row width) are one kernel.
 * Non-goals: fusing into neighbours. Reference: runtime/ops/add.c.
 */
#include "add.h"
#include "pdl.cuh"

#include <cuda_runtime.h>

static __global__ void add_kernel(const struct qc_cuda_add_args a)
{
	qc_pdl_enter();
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < a.n)
		a.d_y[i] += a.d_x[i % a.n_x];
}

extern "C" int qc_cuda_add(const struct qc_cuda_add_args *a, cudaStream_t s, struct qc_err *err)
{
	if (a->n < 0 || a->n_x < 1 || (a->n + 255) / 256 > INT32_MAX)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "add: n %lld, n_x %lld", (long long)a->n,
				  (long long)a->n_x);
	if (!a->n)
		return QC_OK;
	(void)qc_launch(add_kernel, dim3((unsigned)((a->n + 255) / 256)), dim3(256), 0, s, *a);
	return qc_cuda_check(cudaGetLastError(), "add_kernel", err);
}
