/* fp8_gemm.h — the W8A8 FP8 GEMM's activation rounding, on its own (fp8_gemm.cu).
 *
 * Owns: qc_cuda_fp8_act_quant, step 1 of qc_cuda_fp8_gemm (matmul_dispatch.h runs
 * both), exposed so its codes can be checked against runtime/ops/fp8_gemm.c
 * qc_ref_fp8_act_quant bit for bit.
 */
#ifndef QC_CUDA_FP8_GEMM_H
#define QC_CUDA_FP8_GEMM_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rows r < n_rows of x (stride ldx floats; k % 32 == 0) to e4m3 codes (n_rows, k) and
 * a scale per row under the activation scale *d_a (device f32: > 0 static, else
 * dynamic per row; quant/act_fp8.h). QC_EINVAL on a bad shape. */
int qc_cuda_fp8_act_quant(const float *d_x, int64_t ldx, int64_t n_rows, int64_t k, const float *d_a,
			  uint8_t *d_codes, float *d_scales, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
