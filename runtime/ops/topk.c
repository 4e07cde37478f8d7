/* topk.c — reference of runtime/cuda/kernels/topk.cu: for each row r with k[r] >= 2,
 * the k[r] best (id, value) pairs, best first ("better": larger value, then
 * lower id; -0 and +0 are equal), at ids/vals + r * stride; ids[r * stride] =
 * -1 for a row holding a NaN or +inf or only -inf. Rows with k[r] < 2 are not
 * touched. A plain selection by repeated scans: O(k * n), fine for tests. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "ops.h"

static bool better(float v, int32_t i, float w, int32_t j)
{
	return v > w || (v == w && i < j);
}

void qc_ref_topk(const float *x, int64_t n_rows, int32_t n, const int32_t *k, int32_t stride, int32_t *ids,
		 float *vals)
{
	for (int64_t r = 0; r < n_rows; r++) {
		const float *row = x + r * n;
		int32_t m = k[r] < n ? k[r] : n;
		if (k[r] < 2)
			continue;
		bool bad = false, any = false;
		for (int32_t i = 0; i < n; i++) {
			bad |= isnan(row[i]) || row[i] == INFINITY;
			any |= row[i] > -INFINITY;
		}
		if (bad || !any) {
			ids[r * stride] = -1;
			continue;
		}
		/* the best element worse than the previous pick, m times */
		float pv = INFINITY;
		int32_t pi = -1;
		for (int32_t s = 0; s < m; s++) {
			int32_t bi = -1;
			for (int32_t i = 0; i < n; i++)
				if ((pi < 0 || better(pv, pi, row[i], i)) && (bi < 0 || better(row[i], i, row[bi], bi)))
					bi = i;
			ids[r * stride + s] = bi;
			vals[r * stride + s] = row[bi];
			pv = row[bi];
			pi = bi;
		}
	}
}
