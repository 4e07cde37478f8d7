/* rms_norm.h — entry points of rms_norm.cu (RMSNorm of rows times a weight,
 * plain or after the residual add). */
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
	float *d_y;                /* (n_rows, ldy); may be d_x when d_rows is NULL and ldy == ldx */
	int64_t ldy;
	int64_t n_rows, n;
	float eps;
};

/* y = x / sqrt(mean(x^2) + eps) * w per row. QC_EINVAL on bad sizes. */
int qc_cuda_rms_norm(const struct qc_cuda_rms_norm_args *a, cudaStream_t s, struct qc_err *err);

/* The same fields in the same order, x writable, and the residual last.
 * Aliasing: d_y may be the same pointer as d_x or as d_res only when d_rows is
 * NULL and ldy == ldx (each element is then read and written by one thread,
 * reads first); otherwise d_y must not overlap them. d_res must not overlap
 * d_x. d_rows must not repeat a row (two blocks would add to it). */
struct qc_cuda_add_rms_norm_args {
	float *d_x;                /* residual stream row at d_x + (d_rows ? d_rows[r] : r) * ldx:
				    * x += res is stored there, then normalised. With d_rows only
				    * the gathered rows get the residual */
	int64_t ldx;
	const int32_t *d_rows;     /* (n_rows) gathered rows, or NULL */
	const float *d_w;          /* (n) weight */
	float *d_y;                /* (n_rows, ldy) */
	int64_t ldy;
	int64_t n_rows, n;
	float eps;
	const float *d_res;        /* the residual delta, indexed as d_x (same rows, ldx) */
};

/* x += res, then y = x / sqrt(mean(x^2) + eps) * w per row: x and y bit for bit
 * those of qc_cuda_add (y += x on each row) followed by qc_cuda_rms_norm, in one
 * launch. QC_EINVAL on bad sizes, a NULL d_res or an aliasing the rules above
 * forbid. */
int qc_cuda_add_rms_norm(const struct qc_cuda_add_rms_norm_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
