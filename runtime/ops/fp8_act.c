/* fp8_act.c — reference of runtime/cuda/kernels/fp8_act.cu: W8A8 FP8 activation rows
 * to e4m3 codes and a scale per row, by quant/act_fp8.h (the arithmetic the CPU matmul
 * uses too), and the activation scale an fp8_rows matrix stores (docs/layout-fp8.md's
 * offset, written out here).
 */
#include <string.h>

#include "act_fp8.h"
#include "ops.h"

void qc_ref_fp8_act_quant(const float *x, int64_t ldx, int64_t n_rows, int64_t k, float a, uint8_t *codes,
			  float *scales)
{
	for (int64_t t = 0; t < n_rows; t++)
		scales[t] = qc_act_fp8_row(x + t * ldx, k, a, codes + t * k, NULL);
}

float qc_ref_fp8_rows_act_scale(const uint8_t *w, int64_t n_in, int64_t n_out)
{
	const uint64_t act_off = (uint64_t)n_out * (uint64_t)n_in + (((uint64_t)n_out * 4 + 15) & ~(uint64_t)15);
	float a;
	memcpy(&a, w + act_off, 4);
	return a;
}
