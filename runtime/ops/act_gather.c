/* act_gather.c — reference of runtime/cuda/kernels/act_gather.cu:
 * out[r][i] = x[(r / x_div) * ldx + perm_e(r)[i]], e(r) = expert ? expert[r] : 0. */
#include "ops.h"

void qc_ref_act_gather(const float *x, int64_t ldx, int32_t x_div, const int32_t *expert, const int32_t *perm,
		       int64_t perm_stride, int64_t n_rows, int64_t k, float *out)
{
	for (int64_t r = 0; r < n_rows; r++) {
		const int32_t *p = perm + (expert ? expert[r] : 0) * perm_stride;
		for (int64_t i = 0; i < k; i++)
			out[r * k + i] = x[(r / x_div) * ldx + p[i]];
	}
}
