/* add.h — entry point of add.cu (residual and bias adds). */
#ifndef QC_CUDA_ADD_H
#define QC_CUDA_ADD_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qc_cuda_add_args {
	float *d_y;                /* (n) accumulated in place */
	const float *d_x;          /* (n_x) added periodically: y[i] += x[i % n_x] */
	int64_t n, n_x;            /* n_x = n: residual; n_x = row width: bias */
};

/* y[i] += x[i % n_x] for i < n. QC_EINVAL when n_x < 1. */
int qc_cuda_add(const struct qc_cuda_add_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
