/* dequant_f16.h — entry point of dequant_f16.cu (rows of any decoded type -> fp16). */
#ifndef QC_CUDA_DEQUANT_F16_H
#define QC_CUDA_DEQUANT_F16_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qc_cuda_dequant_f16_args {
	const uint8_t *d_src;      /* n_rows rows of GGML blocks, row_bytes apart */
	enum qc_type type;         /* a type with a device decoder (F32 for activations) */
	uint64_t row_bytes;
	int64_t n_rows, n;         /* rows, elements per row (whole blocks) */
	uint16_t *d_dst;           /* (n_rows, n) binary16, contiguous */
};

/* dst = fp16(decode(src)), round to nearest even. QC_EUNSUPPORTED for a type
 * without a decoder, or n not a multiple of 32 for a block type. */
int qc_cuda_dequant_f16(const struct qc_cuda_dequant_f16_args *a, cudaStream_t s,
			struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
