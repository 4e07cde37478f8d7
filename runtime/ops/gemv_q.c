/* gemv_q.c — reference of runtime/cuda/kernels/gemv_q.cu: decode each weight row with
 * qc_dequant_row_* and dot it with the activation row. truth: double products
 * and sum (the fp64 truth of the 2x rule); else a float running sum (a plain
 * reference in the kernel's precision). Rows are at most 1 << 16 elements. */
#include <stdlib.h>

#include "ops.h"

void qc_ref_gemv_q(const uint8_t *w, enum qc_type type, int64_t n_in, int64_t n_out,
		   uint64_t row_bytes, uint64_t mat_stride, const float *x, int64_t ldx, int x_div,
		   const int32_t *expert, int64_t n_rows, float *y, int64_t ldy, int truth)
{
	float *row = malloc(sizeof(float) * (size_t)n_in);
	if (!row)
		return;
	for (int64_t r = 0; r < n_rows; r++) {
		const int64_t e = expert ? expert[r] : 0;
		const float *xr = x + (r / x_div) * ldx;
		for (int64_t o = 0; o < n_out; o++) {
			qc_types[type].dequant_row(w + (uint64_t)e * mat_stride + (uint64_t)o * row_bytes, row, n_in);
			double sd = 0.0;
			float sf = 0.0f;
			for (int64_t i = 0; i < n_in; i++) {
				sd += (double)row[i] * (double)xr[i];
				sf += row[i] * xr[i];
			}
			y[r * ldy + o] = truth ? (float)sd : sf;
		}
	}
	free(row);
}
