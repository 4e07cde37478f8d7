/* gelu_mul.cu — GeGLU (Gemma 2 / Gemma 3 FFN): y = gelu_tanh(gate) * up, elementwise.
 * The formula of runtime/ops/gelu_mul.c's QC_REF_GELU_EXACT, the inner 1 + a x^2 as one
 * fused multiply-add as there; tanhf is CUDA's (within 2 ulp of glibc's), so the
 * result is close to the reference, not its bits. The ggml binary16 table
 * (QC_REF_GELU_F16_TABLE) is the CPU's QC_ACT_ROUND_GGML emulation, which the CUDA
 * backend does not do (docs/cuda.md "Numerics").
 * Not fused into the down GEMV's loads (the marlin GEMV fuses SiLU only): one
 * launch of its own, before the down matmul.
 * Reference: runtime/ops/gelu_mul.c; llama.cpp llm_build_ffn LLM_FFN_GELU + LLM_FFN_PAR.
 */
#include "gelu_mul.h"
#include "pdl.cuh"

#include <cuda_runtime.h>

static __device__ __forceinline__ float gelu_tanh(float x)
{
	const float in = __fmul_rn(__fmul_rn(0.79788456080286535587989211986876f, x), fmaf(__fmul_rn(0.044715f, x), x, 1.0f));
	return __fmul_rn(__fmul_rn(0.5f, x), 1.0f + tanhf(in));
}

static __global__ void gelu_mul_kernel(const struct qc_cuda_gelu_mul_args a)
{
	qc_pdl_enter();
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= a.n)
		return;
	a.d_y[i] = __fmul_rn(gelu_tanh(a.d_g[i]), a.d_u[i]);
}

extern "C" int qc_cuda_gelu_mul(const struct qc_cuda_gelu_mul_args *a, cudaStream_t s, struct qc_err *err)
{
	if (a->n < 0 || (a->n + 255) / 256 > INT32_MAX)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "gelu_mul: n %lld", (long long)a->n);
	if (!a->n)
		return QC_OK;
	(void)qc_launch(gelu_mul_kernel, dim3((unsigned)((a->n + 255) / 256)), dim3(256), 0, s, *a);
	return qc_cuda_check(cudaGetLastError(), "gelu_mul_kernel", err);
}
