/* gemm_f16.c — reference of runtime/cuda/kernels/gemm_f16.cu in its precision:
 * weights (unless F32) and activations rounded to binary16, exact products
 * summed in double: what a tensor-core GEMM with fp32 accumulation aims at. */
#include <stdlib.h>

#include "fp16.h"
#include "ops.h"

static float r16(float v)
{
	return qc_fp16_to_f32(qc_f32_to_fp16(v));
}

void qc_ref_gemm_f16(const uint8_t *w, enum qc_type type, int64_t n_in, int64_t n_out,
		     uint64_t row_bytes, const float *x, int64_t ldx, int64_t n_rows, float *y,
		     int64_t ldy)
{
	float *row = malloc(sizeof(float) * (size_t)n_in);
	const int keep = type == QC_TYPE_F32;
	if (!row)
		return;
	for (int64_t o = 0; o < n_out; o++) {
		qc_types[type].dequant_row(w + (uint64_t)o * row_bytes, row, n_in);
		for (int64_t i = 0; !keep && i < n_in; i++)
			row[i] = r16(row[i]);
		for (int64_t r = 0; r < n_rows; r++) {
			double s = 0.0;
			for (int64_t i = 0; i < n_in; i++)
				s += (double)row[i] * (double)(keep ? x[r * ldx + i] : r16(x[r * ldx + i]));
			y[r * ldy + o] = (float)s;
		}
	}
	free(row);
}
