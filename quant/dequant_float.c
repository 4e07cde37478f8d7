/* dequant_float.c — decoders for the plain element types: f32, f16, bf16, f64
 * and the integer types i8..i64.
 *
 * Matches llama.cpp's to_float where it has one (f16: ggml_fp16_to_fp32_row,
 * bf16: ggml_bf16_to_fp32_row; f32 is the identity). ggml gives f64 and the
 * integer types no to_float; here they convert with C's (float) cast, which
 * rounds to nearest even (exact for i8/i16; i32/i64/f64 round). Elements may
 * sit at any alignment, so every read goes through memcpy.
 * Non-goals: validation (NaN/Inf scans live with the format readers).
 */
#include <string.h>

#include "dequant.h"
#include "fp16.h"

void qc_dequant_row_F32(const void *src, float *dst, int64_t n)
{
	memcpy(dst, src, (size_t)n * sizeof(float));
}

void qc_dequant_row_F16(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t i = 0; i < n; i++) {
		uint16_t h;
		memcpy(&h, p + 2 * i, sizeof h);
		dst[i] = qc_fp16_to_f32(h);
	}
}

void qc_dequant_row_BF16(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t i = 0; i < n; i++) {
		uint16_t b;
		memcpy(&b, p + 2 * i, sizeof b);
		dst[i] = qc_bf16_to_f32(b);
	}
}

void qc_dequant_row_F64(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t i = 0; i < n; i++) {
		double v;
		memcpy(&v, p + 8 * i, sizeof v);
		dst[i] = (float)v;
	}
}

void qc_dequant_row_I8(const void *src, float *dst, int64_t n)
{
	const int8_t *p = src;
	for (int64_t i = 0; i < n; i++)
		dst[i] = (float)p[i];
}

void qc_dequant_row_I16(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t i = 0; i < n; i++) {
		int16_t v;
		memcpy(&v, p + 2 * i, sizeof v);
		dst[i] = (float)v;
	}
}

void qc_dequant_row_I32(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t i = 0; i < n; i++) {
		int32_t v;
		memcpy(&v, p + 4 * i, sizeof v);
		dst[i] = (float)v;
	}
}

void qc_dequant_row_I64(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t i = 0; i < n; i++) {
		int64_t v;
		memcpy(&v, p + 8 * i, sizeof v);
		dst[i] = (float)v;
	}
}
