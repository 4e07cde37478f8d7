/* moe_gemm.c — reference of runtime/cuda/kernels/moe_gemm.cu in its precision: each
 * row's expert matrix (every type, F32 included) and the activations rounded
 * to binary16, exact products summed in double: what the tensor-core grouped
 * GEMM with fp32 accumulation aims at. The sort by expert changes nothing in
 * the function, so there is none here. A row whose expert is outside
 * [0, n_mat) gets NaN outputs, as on the device. */
#include <math.h>
#include <stdlib.h>

#include "fp16.h"
#include "ops.h"

static float r16(float v)
{
	return qc_fp16_to_f32(qc_f32_to_fp16(v));
}

void qc_ref_moe_gemm(const uint8_t *w, enum qc_type type, int64_t n_in, int64_t n_out, uint64_t row_bytes,
		     uint64_t mat_stride, int64_t n_mat, const float *x, int64_t ldx, int x_div,
		     const int32_t *expert, int64_t n_rows, float *y, int64_t ldy)
{
	float *row = malloc(sizeof(float) * (size_t)n_in), *xr = malloc(sizeof(float) * (size_t)n_in);
	if (!row || !xr)
		goto out;
	for (int64_t r = 0; r < n_rows; r++) {
		const int64_t e = expert ? expert[r] : 0;
		if (e < 0 || e >= n_mat) {
			for (int64_t o = 0; o < n_out; o++)
				y[r * ldy + o] = NAN;
			continue;
		}
		for (int64_t i = 0; i < n_in; i++)
			xr[i] = r16(x[(r / x_div) * ldx + i]);
		for (int64_t o = 0; o < n_out; o++) {
			qc_types[type].dequant_row(w + (uint64_t)e * mat_stride + (uint64_t)o * row_bytes, row, n_in);
			double s = 0.0;
			for (int64_t i = 0; i < n_in; i++)
				s += (double)r16(row[i]) * (double)xr[i];
			y[r * ldy + o] = (float)s;
		}
	}
out:
	free(row);
	free(xr);
}
