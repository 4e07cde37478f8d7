/* moe_combine.c — reference of kernels/cuda/moe_combine.cu: x[t] += w[t,s] *
 * eout[t*k+s] slot by slot, each product rounded before the add. */
#include "ops.h"

void qc_ref_moe_combine(float *x, const float *eout, const float *w, int64_t n_tok, int64_t n, int k)
{
	for (int64_t t = 0; t < n_tok; t++)
		for (int s = 0; s < k; s++) {
			const float ws = w[t * k + s];
			for (int64_t d = 0; d < n; d++) {
				const float p = eout[(t * k + s) * n + d] * ws;
				x[t * n + d] += p;
			}
		}
}
