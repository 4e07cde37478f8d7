/* dequant_f16.c — reference of runtime/cuda/kernels/dequant_f16.cu: decode rows with
 * qc_dequant_row_*, round each value to binary16 (nearest even). */
#include <stdlib.h>

#include "fp16.h"
#include "ops.h"

void qc_ref_dequant_f16(const uint8_t *src, enum qc_type type, uint64_t row_bytes, int64_t n_rows,
			int64_t n, uint16_t *dst)
{
	float *row = malloc(sizeof(float) * (size_t)n);
	if (!row)
		return;
	for (int64_t r = 0; r < n_rows; r++) {
		qc_types[type].dequant_row(src + (uint64_t)r * row_bytes, row, n);
		for (int64_t i = 0; i < n; i++)
			dst[r * n + i] = qc_f32_to_fp16(row[i]);
	}
	free(row);
}
