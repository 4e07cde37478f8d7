/* quant_ref.c — reference float -> block encoders (round to nearest).
 *
 * Owns: qc_quant_row_{F32,F16,BF16,Q8_0,Q4_0,F8A8}, used to make test data and
 * samples (F8A8: the W8A8 FP8 models mkgguf writes for benchmarks). Q8_0/Q4_0 reproduce llama.cpp's quantize_row_q8_0_ref /
 * quantize_row_q4_0_ref bit for bit: the scale is computed in float, the
 * quants use the unrounded scale's reciprocal, and only then is the scale
 * stored as fp16. Keep the float expressions in this order and this file
 * free of -ffast-math / FP contraction, or the bytes stop matching.
 * Non-goals: importance-weighted or search-based quantizers (llama-quantize's
 * job), NaN/Inf input handling beyond "no crash".
 */
#include <math.h>
#include <string.h>

#include "act_fp8.h"
#include "dequant.h"
#include "dequant_hfq.h"
#include "fp16.h"

void qc_quant_row_F32(const float *src, void *dst, int64_t n)
{
	memcpy(dst, src, (size_t)n * sizeof(float));
}

void qc_quant_row_F16(const float *src, void *dst, int64_t n)
{
	uint8_t *p = dst;
	for (int64_t i = 0; i < n; i++) {
		uint16_t h = qc_f32_to_fp16(src[i]);
		memcpy(p + 2 * i, &h, sizeof h);
	}
}

void qc_quant_row_BF16(const float *src, void *dst, int64_t n)
{
	uint8_t *p = dst;
	for (int64_t i = 0; i < n; i++) {
		uint16_t b = qc_f32_to_bf16(src[i]);
		memcpy(p + 2 * i, &b, sizeof b);
	}
}

/* Symmetric 8-bit: d = max|x| / 127, q = round-half-away(x / d). */
void qc_quant_row_Q8_0(const float *src, void *dst, int64_t n)
{
	uint8_t *p = dst;
	for (int64_t ib = 0; ib < n / QC_QK32; ib++, src += QC_QK32, p += sizeof(struct qc_block_Q8_0)) {
		struct qc_block_Q8_0 b;
		float amax = 0.0f;
		for (int j = 0; j < QC_QK32; j++) {
			float a = fabsf(src[j]);
			amax = amax > a ? amax : a;
		}
		const float d = amax / 127.0f;
		const float inv = d != 0.0f ? 1.0f / d : 0.0f;
		b.d = qc_f32_to_fp16(d);
		for (int j = 0; j < QC_QK32; j++)
			b.qs[j] = (int8_t)roundf(src[j] * inv);
		memcpy(p, &b, sizeof b);
	}
}

/* Symmetric 4-bit with the sign chosen so that the element of largest
 * magnitude lands exactly on code 0 (value -8*d): d = max / -8 where max is
 * that element with its sign, q = min(15, trunc(x/d + 8.5)). The other
 * extreme can reach +8*d and is clamped to 7*d. */
void qc_quant_row_Q4_0(const float *src, void *dst, int64_t n)
{
	uint8_t *p = dst;
	for (int64_t ib = 0; ib < n / QC_QK32; ib++, src += QC_QK32, p += sizeof(struct qc_block_Q4_0)) {
		struct qc_block_Q4_0 b;
		float amax = 0.0f, vmax = 0.0f;
		for (int j = 0; j < QC_QK32; j++) {
			if (amax < fabsf(src[j])) { /* first of equal magnitudes wins */
				amax = fabsf(src[j]);
				vmax = src[j];
			}
		}
		const float d = vmax / -8.0f;
		const float inv = d != 0.0f ? 1.0f / d : 0.0f;
		b.d = qc_f32_to_fp16(d);
		for (int j = 0; j < QC_QK32 / 2; j++) {
			const float x0 = src[j] * inv;
			const float x1 = src[j + QC_QK32 / 2] * inv;
			int q0 = (int)(x0 + 8.5f);
			int q1 = (int)(x1 + 8.5f);
			q0 = q0 < 15 ? q0 : 15;
			q1 = q1 < 15 ? q1 : 15;
			b.qs[j] = (uint8_t)((unsigned)q0 | ((unsigned)q1 << 4));
		}
		memcpy(p, &b, sizeof b);
	}
}

/* W8A8 FP8 as llm-compressor's FP8_DYNAMIC scheme writes it: one scale per row (the call
 * is one row), d = max|x| / 448 (1 for a zero row), codes e4m3(x / d) rounded to nearest
 * even; activation scale 0 (dynamic per token). */
void qc_quant_row_F8A8(const float *src, void *dst, int64_t n)
{
	float amax = 0.0f;
	for (int64_t i = 0; i < n; i++)
		amax = fmaxf(amax, fabsf(src[i]));
	const float d = amax > 0.0f ? amax / QC_FP8_MAX : 1.0f;
	uint8_t *p = dst;
	for (int64_t ib = 0; ib < n / QC_QK32; ib++, p += sizeof(struct qc_block_F8A8)) {
		struct qc_block_F8A8 b;
		qc_hfq_put_f32(b.d, d);
		qc_hfq_put_f32(b.a, 0.0f);
		for (int j = 0; j < QC_QK32; j++)
			b.qs[j] = qc_act_fp8_code(src[ib * QC_QK32 + j], d);
		memcpy(p, &b, sizeof b);
	}
}
