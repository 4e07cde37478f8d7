/* tp_allreduce.c — reference of runtime/cuda/kernels/tp_allreduce.cu: the sum of
 * n_ranks float arrays, added in rank order 0, 1, .., n_ranks - 1 for every
 * element (the order that gives every rank the same bits; tp_group.c's host
 * all-reduce adds the same way). */
#include "ops.h"

void qc_ref_tp_sum(const float *const *x, int n_ranks, int64_t n, float *y)
{
	for (int64_t i = 0; i < n; i++) {
		float s = x[0][i];
		for (int r = 1; r < n_ranks; r++)
			s += x[r][i];
		y[i] = s;
	}
}
