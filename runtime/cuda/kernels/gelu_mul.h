/* gelu_mul.h — entry point of gelu_mul.cu (Gemma's GELU-tanh gate). */
#ifndef QC_CUDA_GELU_MUL_H
#define QC_CUDA_GELU_MUL_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qc_cuda_gelu_mul_args {
	const float *d_g, *d_u;    /* (n) gate, up */
	float *d_y;                /* (n); may alias d_g or d_u */
	int64_t n;
};

/* y = gelu_tanh(g) * u, gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))):
 * qc_ref_gelu_mul's QC_REF_GELU_EXACT (the CPU backend's float path). QC_EINVAL on n < 0. */
int qc_cuda_gelu_mul(const struct qc_cuda_gelu_mul_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
