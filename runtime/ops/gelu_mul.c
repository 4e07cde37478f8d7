/* gelu_mul.c — Gemma's gated FFN activation: y = gelu_tanh(g) * u.
 * gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))).
 * QC_REF_GELU_F16_TABLE is ggml's CPU path (GGML_GELU_FP16): x rounded to
 * binary16, its gelu rounded to binary16, x <= -10 gives 0 and x >= 10 gives x.
 * Reference: ggml-cpu.c ggml_gelu_f32 / ggml_vec_gelu_f32 (c392e50), llama.cpp
 * llm_build_ffn LLM_FFN_GELU + LLM_FFN_PAR. */
#include <math.h>

#include "fp16.h"
#include "ops.h"

/* The inner 1 + a x^2 as one fused multiply-add: ggml's CPU build contracts it
 * (GGML_NATIVE), and with it the binary16 table equals libggml-cpu c392e50's
 * ggml_table_gelu_f16 on all 37376 inputs below 10 in magnitude (without it,
 * one entry differs). */
static float gelu(float x)
{
	return 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * fmaf(0.044715f * x, x, 1.0f)));
}

void qc_ref_gelu_mul(const float *g, const float *u, float *y, int64_t n, enum qc_ref_gelu_mode mode)
{
	for (int64_t i = 0; i < n; i++) {
		const float x = g[i];
		float a;
		if (mode == QC_REF_GELU_EXACT)
			a = gelu(x);
		else if (x <= -10.0f)
			a = 0.0f;
		else if (x >= 10.0f)
			a = x;
		else
			a = qc_fp16_to_f32(qc_f32_to_fp16(gelu(qc_fp16_to_f32(qc_f32_to_fp16(x)))));
		y[i] = a * u[i];
	}
}
