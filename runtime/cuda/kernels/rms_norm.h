/* rms_norm.h — entry point of rms_norm.cu (RMSNorm of rows times a weight). */
#ifndef QC_CUDA_RMS_NORM_H
#define QC_CUDA_RMS_NORM_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qc_cuda_rms_norm_args {
	const float *d_x;          /* input row r at d_x + (d_rows ? d_rows[r] : r) * ldx */
	int64_t ldx;
	const int32_t *d_rows;     /* (n_rows) gathered input rows, or NULL */
	const float *d_w;          /* (n) weight */
	float *d_y;                /* (n_rows, ldy); may alias d_x when d_rows is NULL */
	int64_t ldy;
	int64_t n_rows, n;
	float eps;
};

/* y = x / sqrt(mean(x^2) + eps) * w per row. QC_EINVAL on bad sizes. */
int qc_cuda_rms_norm(const struct qc_cuda_rms_norm_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
