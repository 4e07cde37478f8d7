/* argmax.c — reference of runtime/cuda/kernels/argmax.cu: per row, the lowest index of
 * the largest value; -1 for a row with a NaN or +inf, or only -inf (the same
 * scan as the sampler's greedy path). */
#include <math.h>

#include "ops.h"

void qc_ref_argmax(const float *x, int64_t n_rows, int32_t n, int32_t *out)
{
	for (int64_t r = 0; r < n_rows; r++) {
		const float *row = x + r * n;
		int32_t best = -1;
		float bv = -INFINITY;
		int bad = 0;
		for (int32_t i = 0; i < n; i++) {
			bad |= isnan(row[i]) || row[i] == INFINITY;
			if (row[i] > bv) {
				bv = row[i];
				best = i;
			}
		}
		out[r] = bad ? -1 : best;
	}
}
