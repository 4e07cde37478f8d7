/* silu_mul.c — reference of runtime/cuda/kernels/silu_mul.cu: y = silu(g) * u. */
#include <math.h>

#include "ops.h"

void qc_ref_silu_mul(const float *g, const float *u, float *y, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
