/* moe_combine.cu — add the routing-weighted expert outputs to the residual,
 * slot by slot in rank order, each product rounded before the add (the CPU
 * backend's order, so no fma). One thread per (token, element).
 * Reference: kernels/ref/moe_combine.c.
 */
#include "moe_combine.h"

#include <cuda_runtime.h>

static __global__ void moe_combine_kernel(const struct qc_cuda_moe_combine_args a)
{
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= a.n_tok * a.n)
		return;
	const int64_t t = i / a.n, d = i % a.n;
	float x = a.d_x[i];
	for (int s = 0; s < a.k; s++)
		x = __fadd_rn(x, __fmul_rn(a.d_eout[(t * a.k + s) * a.n + d], a.d_w[t * a.k + s]));
	a.d_x[i] = x;
}

extern "C" int qc_cuda_moe_combine(const struct qc_cuda_moe_combine_args *a, cudaStream_t s, struct qc_err *err)
{
	if (a->n_tok < 0 || a->n < 1 || a->k < 1)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "moe_combine: %lld tokens of %lld, k %d",
				  (long long)a->n_tok, (long long)a->n, a->k);
	const int64_t n = a->n_tok * a->n;
	if (!n)
		return QC_OK;
	moe_combine_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(*a);
	return qc_cuda_check(cudaGetLastError(), "moe_combine_kernel", err);
}
