/* gemm_f16.h — entry points of gemm_f16.cu (prefill matmul: fp16 tiles + cuBLAS). */
#ifndef QC_CUDA_GEMM_F16_H
#define QC_CUDA_GEMM_F16_H

#include "matmul_dispatch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Scratch bytes for n_rows activations against an n_out x n_in matrix. */
uint64_t qc_cuda_gemm_f16_ws_bytes(int64_t n_in, int64_t n_out, int64_t n_rows);

/* matmul_dispatch.h contract for one GGML matrix (d_expert must be NULL,
 * x_div 1): QC_EUNSUPPORTED otherwise; QC_ECUDA on a cuBLAS failure. */
int qc_cuda_gemm_f16(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
