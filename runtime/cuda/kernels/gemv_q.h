/* gemv_q.h — entry point of gemv_q.cu (fused-dequant GEMV, GGML layout). */
#ifndef QC_CUDA_GEMV_Q_H
#define QC_CUDA_GEMV_Q_H

#include <stdbool.h>

#include "matmul_dispatch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* true when T has a device decoder (decode.cuh). */
bool qc_cuda_gemv_q_supports(enum qc_type t);

/* The matmul_dispatch.h contract for GGML rows. QC_EUNSUPPORTED for a type
 * without a decoder, or n_in not a multiple of 32 for a block type. */
int qc_cuda_gemv_q(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
