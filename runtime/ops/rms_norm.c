/* rms_norm.c — reference of runtime/cuda/kernels/rms_norm.cu: ggml's rms_norm (sum of
 * squares in double) times the weight, as the CPU backend computes it. */
#include <math.h>

#include "ops.h"

void qc_ref_rms_norm(const float *x, int64_t ldx, const int32_t *rows, const float *w, float *y,
		     int64_t ldy, int64_t n_rows, int64_t n, float eps)
{
	for (int64_t r = 0; r < n_rows; r++) {
		const float *xr = x + (rows ? rows[r] : r) * ldx;
		float *yr = y + r * ldy;
		double sum = 0.0;
		for (int64_t i = 0; i < n; i++)
			sum += (double)(xr[i] * xr[i]);
		const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
		for (int64_t i = 0; i < n; i++)
			yr[i] = (xr[i] * scale) * w[i];
	}
}
