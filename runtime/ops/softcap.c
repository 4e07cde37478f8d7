/* softcap.c — scaling and soft-capping of float rows, in place.
 * qc_ref_softcap: x = tanh(x / cap) * cap, as ggml_scale(1/cap), ggml_tanh,
 * ggml_scale(cap) compute it (a float multiply by 1.0f/cap, tanhf, a multiply).
 * Reference: llama.cpp build_gemma2 (final logits), llm_build_kqv (attention). */
#include <math.h>

#include "ops.h"

void qc_ref_scale(float *x, int64_t n, float s)
{
	for (int64_t i = 0; i < n; i++)
		x[i] *= s;
}

float qc_ref_softcap1(float x, float cap)
{
	return tanhf(x * (1.0f / cap)) * cap;
}

void qc_ref_softcap(float *x, int64_t n, float cap)
{
	for (int64_t i = 0; i < n; i++)
		x[i] = qc_ref_softcap1(x[i], cap);
}
