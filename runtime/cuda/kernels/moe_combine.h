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
	const float *d_sh;         /* (n_tok, n) shared expert output, or NULL */
	const float *d_shg;        /* (n_tok) shared expert gate logits (with d_sh) */
};

/* x[t] += sum_s w[t,s] * eout[t*k+s] (+ sh[t] * sigmoid(shg[t])): slots summed
 * in order, then the shared expert, then added to x (each product rounded: the
 * CPU order). The sigmoid is silu(g) / g as the CPU computes it. */
int qc_cuda_moe_combine(const struct qc_cuda_moe_combine_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
