/* moe_combine.h — entry point of moe_combine.cu (weighted sum of expert outputs into the residual). */
#ifndef QC_CUDA_MOE_COMBINE_H
#define QC_CUDA_MOE_COMBINE_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qc_cuda_moe_combine_args {
	float *d_x;                /* (n_tok, n) residual, accumulated */
	const float *d_eout;       /* (n_tok * k, n) expert outputs, row t * k + s */
	const float *d_w;          /* (n_tok, k) routing weights */
	int64_t n_tok, n;
	int32_t k;
};

/* x[t] += w[t,s] * eout[t*k+s] for s = 0..k-1 in that order (each product
 * rounded, then added: the CPU order). */
int qc_cuda_moe_combine(const struct qc_cuda_moe_combine_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
