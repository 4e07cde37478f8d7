/* marlin_dequant.h — entry point of marlin_dequant.cu (marlin slice -> fp16 W[n][k]). */
#ifndef QC_CUDA_MARLIN_DEQUANT_H
#define QC_CUDA_MARLIN_DEQUANT_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* d_out (n, k) fp16 bits, row-major: the values the marlin GEMM multiplies
 * with. QC_EUNSUPPORTED for a layout or shape it does not take. */
int qc_cuda_marlin_to_f16(enum qc_layout layout, enum qc_type type, const uint8_t *d_w, int64_t n, int64_t k,
			  uint16_t *d_out, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
