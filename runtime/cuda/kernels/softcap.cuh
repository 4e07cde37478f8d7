/* softcap.cuh — the one soft-cap formula of the device code, tanh(x / cap) * cap
 * computed as ggml_scale(1/cap), ggml_tanh, ggml_scale(cap) (a multiply by the float
 * 1/cap, tanhf, a multiply): the logit kernel (softcap.cu) and the attention
 * kernels' scores (paged_attn.cu, flash_attn.cu) share it.
 * Reference: runtime/ops/softcap.c qc_ref_softcap1. */
#ifndef QC_CUDA_SOFTCAP_CUH
#define QC_CUDA_SOFTCAP_CUH

static __device__ __forceinline__ float qc_softcap1(float x, float cap)
{
	return __fmul_rn(tanhf(__fmul_rn(x, 1.0f / cap)), cap);
}

#endif
