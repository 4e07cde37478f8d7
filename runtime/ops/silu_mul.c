/* silu_mul.c — reference of runtime/cuda/kernels/silu_mul.cu: y = silu(g) * u.
 * silu(g) = g / (1 + exp(-g)) with ggml's exp (qc_ref_expf_ggml), rounded to float, then
 * times u: llama.cpp's AVX2/FMA ggml_vec_silu_f32 then ggml_mul, bit for bit (rows whose
 * length is not a multiple of 8 take libm's expf for their last n % 8 there; not here). */
#include <math.h>

#include "ops.h"

void qc_ref_silu_mul(const float *g, const float *u, float *y, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		const float s = g[i] / (1.0f + qc_ref_expf_ggml(-g[i]));
		y[i] = s * u[i];
	}
}
