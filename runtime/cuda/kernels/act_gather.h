/* act_gather.h — entry point of act_gather.cu (activations in act-order). */
#ifndef QC_CUDA_ACT_GATHER_H
#define QC_CUDA_ACT_GATHER_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qc_cuda_act_gather_args {
	const float *d_x;          /* row (r / x_div) at d_x + (r / x_div) * ldx */
	int64_t ldx;
	int32_t x_div;
	const int32_t *d_expert;   /* (n_rows) matrix of each row, NULL: matrix 0 */
	const int32_t *d_perm;     /* (n_mat or 1, k) permutations of 0..k-1 */
	int64_t perm_stride;       /* 0: one shared permutation; k: one per matrix */
	int64_t n_rows, k;
	float *d_out;              /* (n_rows, k) */
};

/* out[r][i] = x[(r / x_div) * ldx + perm_e(r)[i]]: what a weight stored with its
 * columns in act-order multiplies. QC_EINVAL on a bad shape. */
int qc_cuda_act_gather(const struct qc_cuda_act_gather_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
