/* silu.cuh — the one SwiGLU formula of the device code, silu(g) * u with
 * silu(x) = x / (1 + expf(-x)) as ggml (accurate expf, rounded products): the
 * silu_mul kernel and the GEMV prologues that fuse it (marlin_gemv.cu) share it,
 * so fused and unfused paths give the same bits. Reference: runtime/ops/silu_mul.c. */
#ifndef QC_CUDA_SILU_CUH
#define QC_CUDA_SILU_CUH

static __device__ __forceinline__ float qc_silu_mul(float g, float u)
{
	return __fmul_rn(__fdiv_rn(g, 1.0f + expf(-g)), u);
}

#endif
