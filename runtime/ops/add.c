/* add.c — reference of runtime/cuda/kernels/add.cu: y[i] += x[i % n_x]. */
#include "ops.h"

void qc_ref_add(float *y, const float *x, int64_t n, int64_t n_x)
{
	for (int64_t i = 0; i < n; i++)
		y[i] += x[i % n_x];
}
