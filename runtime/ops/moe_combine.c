/* moe_combine.c — reference of runtime/cuda/kernels/moe_combine.cu: acc = sum over
 * slots in order of w[t,s] * eout[t*k+s] (each product rounded), plus the
 * shared expert times silu(g)/g when sh is given, then x[t] += acc. */
#include <math.h>

#include "ops.h"

void qc_ref_moe_combine(float *x, const float *eout, const float *w, int64_t n_tok, int64_t n, int k,
			const float *sh, const float *shg)
{
	for (int64_t t = 0; t < n_tok; t++) {
		const float gs = sh ? (shg[t] / (1.0f + expf(-shg[t]))) / shg[t] : 0.0f;
		for (int64_t d = 0; d < n; d++) {
			float acc = eout[t * k * n + d] * w[t * k];
			for (int s = 1; s < k; s++) {
				const float p = eout[(t * k + s) * n + d] * w[t * k + s];
				acc += p;
			}
			if (sh) {
				const float p = sh[t * n + d] * gs;
				acc += p;
			}
			x[t * n + d] += acc;
		}
	}
}
