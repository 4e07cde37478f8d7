/* argmax.h — entry point of argmax.cu (greedy token choice on the device). */
#ifndef QC_CUDA_ARGMAX_H
#define QC_CUDA_ARGMAX_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qc_cuda_argmax_args {
	const float *d_x;          /* (n_rows, n) logits */
	int32_t *d_out;            /* (n_rows) */
	int64_t n_rows;
	int32_t n;
};

/* d_out[r] = the lowest index of the largest value of row r, or -1 when the row
 * holds a NaN or +inf or only -inf (the host sampler then names the logit).
 * QC_EINVAL on a bad shape. */
int qc_cuda_argmax(const struct qc_cuda_argmax_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
