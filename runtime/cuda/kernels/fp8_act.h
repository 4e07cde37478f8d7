/* fp8_act.h — the W8A8 FP8 kernels' activation rounding (fp8_act.cu) and the scratch
 * layout the GEMM (fp8_gemm.cu) and the GEMV (fp8_gemv.cu) share.
 *
 * Owns: qc_cuda_fp8_act_quant, step 1 of both fp8_rows kernels (matmul_dispatch.h runs
 * them), exposed so its codes can be checked against runtime/ops/fp8_gemm.c
 * qc_ref_fp8_act_quant bit for bit; where in the scratch the codes and scales go.
 */
#ifndef QC_CUDA_FP8_ACT_H
#define QC_CUDA_FP8_ACT_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rows r < n_rows of x (stride ldx floats; k % 32 == 0) to e4m3 codes (n_rows, k) and
 * a scale per row under the activation scale *d_a (device f32: > 0 static, else
 * dynamic per row; quant/act_fp8.h). QC_EINVAL on a bad shape. */
int qc_cuda_fp8_act_quant(const float *d_x, int64_t ldx, int64_t n_rows, int64_t k, const float *d_a,
			  uint8_t *d_codes, float *d_scales, cudaStream_t s, struct qc_err *err);

/* Byte offsets in an fp8_rows kernel's scratch: the codes, then the row scales. */
static inline uint64_t qc_cuda_fp8_ws_codes(void)
{
	return 0;
}
static inline uint64_t qc_cuda_fp8_ws_scales(int64_t k, int64_t n_rows)
{
	return ((uint64_t)k * (uint64_t)n_rows + 255) & ~(uint64_t)255;
}

#ifdef __cplusplus
}
#endif

#endif
