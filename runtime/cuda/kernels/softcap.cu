/* softcap.cu — x = softcap(x * scale) elementwise, in place: the embedding scale
 * (qc_ref_scale: one float multiply, the same bits) and the final-logit soft-cap
 * (qc_ref_softcap: the formula of softcap.cuh; tanhf within 2 ulp of glibc's).
 * Reference: runtime/ops/softcap.c; llama.cpp build_gemma2 (facts only).
 */
#include "softcap.h"
#include "pdl.cuh"
#include "softcap.cuh"

#include <cuda_runtime.h>
#include <math.h>

static __global__ void softcap_kernel(const struct qc_cuda_softcap_args a)
{
	qc_pdl_enter();
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= a.n)
		return;
	float x = __fmul_rn(a.d_x[i], a.scale);
	if (a.cap > 0.0f)
		x = qc_softcap1(x, a.cap);
	a.d_x[i] = x;
}

extern "C" int qc_cuda_softcap(const struct qc_cuda_softcap_args *a, cudaStream_t s, struct qc_err *err)
{
	if (a->n < 0 || (a->n + 255) / 256 > INT32_MAX || !isfinite(a->scale) || !isfinite(a->cap) || a->cap < 0.0f)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "softcap: n %lld, scale %g, cap %g", (long long)a->n,
				  (double)a->scale, (double)a->cap);
	if (!a->n)
		return QC_OK;
	(void)qc_launch(softcap_kernel, dim3((unsigned)((a->n + 255) / 256)), dim3(256), 0, s, *a);
	return qc_cuda_check(cudaGetLastError(), "softcap_kernel", err);
}
