/* silu_mul.h — entry point of silu_mul.cu (SwiGLU gate). */
#ifndef QC_CUDA_SILU_MUL_H
#define QC_CUDA_SILU_MUL_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qc_cuda_silu_mul_args {
	const float *d_g, *d_u;    /* (n) gate, up */
	float *d_y;                /* (n); may alias d_g or d_u */
	int64_t n;
};

/* y = silu(g) * u, silu(x) = x / (1 + exp(-x)). */
int qc_cuda_silu_mul(const struct qc_cuda_silu_mul_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
