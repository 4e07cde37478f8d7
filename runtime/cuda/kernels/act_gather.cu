/* act_gather.cu — activations gathered into a weight's act-order (GPTQ desc_act
 * resolved at convert time by permuting K): the matmul then reads them in the
 * order the weight's columns are stored. One thread per output element.
 * Reference: runtime/ops/act_gather.c (the CPU backend's act_gather).
 */
#include "act_gather.h"
#include "pdl.cuh"

#include <cuda_runtime.h>

static __global__ void act_gather_kernel(const struct qc_cuda_act_gather_args a)
{
	qc_pdl_enter();
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= a.n_rows * a.k)
		return;
	const int64_t r = i / a.k, j = i % a.k;
	const int64_t e = a.d_expert ? a.d_expert[r] : 0;
	a.d_out[i] = a.d_x[(r / a.x_div) * a.ldx + a.d_perm[e * a.perm_stride + j]];
}

extern "C" int qc_cuda_act_gather(const struct qc_cuda_act_gather_args *a, cudaStream_t s, struct qc_err *err)
{
	if (a->n_rows < 0 || a->k < 1 || a->x_div < 1 || a->ldx < a->k || (a->n_rows * a->k + 255) / 256 > INT32_MAX)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "act_gather: %lld rows of %lld, ldx %lld, x_div %d",
				  (long long)a->n_rows, (long long)a->k, (long long)a->ldx, a->x_div);
	if (!a->n_rows)
		return QC_OK;
	(void)qc_launch(act_gather_kernel, dim3((unsigned)((a->n_rows * a->k + 255) / 256)), dim3(256), 0, s, *a);
	return qc_cuda_check(cudaGetLastError(), "act_gather_kernel", err);
}
