/* dequant_int.c — decoders for the 32-element "legacy" blocks: q4_0, q4_1,
 * q5_0, q5_1, q8_0, q8_1.
 *
 * Bit-exact with llama.cpp's dequantize_row_q4_0..q8_0 (ggml-quants.c): the
 * integer code is converted to float, multiplied by the fp16 scale, and for
 * the _1 types the fp16 offset is added afterwards: two roundings, never a
 * fused multiply-add (separate statements, so compilers that contract within
 * an expression cannot fuse them). ggml has no to_float for q8_1; it decodes
 * here as d * q (s is a dot-product helper and is ignored).
 * Element order in a block: byte j carries element j in its low nibble and
 * element j+16 in its high nibble; q5's 5th bits sit in a LE uint32, bit j.
 */
#include <string.h>

#include "dequant.h"
#include "fp16.h"

/* d*q + m as llama.cpp rounds it: product, then sum. */
static inline float affine(float q, float d, float m)
{
	const float p = q * d;
	return p + m;
}

static inline uint32_t load_le32(const uint8_t b[4])
{
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

void qc_dequant_row_Q4_0(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK32; ib++, p += sizeof(struct qc_block_Q4_0), dst += QC_QK32) {
		struct qc_block_Q4_0 b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		for (int j = 0; j < QC_QK32 / 2; j++) {
			dst[j] = (float)((b.qs[j] & 0xf) - 8) * d;
			dst[j + 16] = (float)((b.qs[j] >> 4) - 8) * d;
		}
	}
}

void qc_dequant_row_Q4_1(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK32; ib++, p += sizeof(struct qc_block_Q4_1), dst += QC_QK32) {
		struct qc_block_Q4_1 b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		const float m = qc_fp16_to_f32(b.m);
		for (int j = 0; j < QC_QK32 / 2; j++) {
			dst[j] = affine((float)(b.qs[j] & 0xf), d, m);
			dst[j + 16] = affine((float)(b.qs[j] >> 4), d, m);
		}
	}
}

void qc_dequant_row_Q5_0(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK32; ib++, p += sizeof(struct qc_block_Q5_0), dst += QC_QK32) {
		struct qc_block_Q5_0 b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		const uint32_t hi = load_le32(b.qh);
		for (int j = 0; j < QC_QK32 / 2; j++) {
			int q0 = (int)((b.qs[j] & 0xf) | ((hi >> j) & 1) << 4);
			int q1 = (int)((b.qs[j] >> 4) | ((hi >> (j + 16)) & 1) << 4);
			dst[j] = (float)(q0 - 16) * d;
			dst[j + 16] = (float)(q1 - 16) * d;
		}
	}
}

void qc_dequant_row_Q5_1(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK32; ib++, p += sizeof(struct qc_block_Q5_1), dst += QC_QK32) {
		struct qc_block_Q5_1 b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		const float m = qc_fp16_to_f32(b.m);
		const uint32_t hi = load_le32(b.qh);
		for (int j = 0; j < QC_QK32 / 2; j++) {
			uint32_t q0 = (b.qs[j] & 0xfu) | ((hi >> j) & 1) << 4;
			uint32_t q1 = (b.qs[j] >> 4) | ((hi >> (j + 16)) & 1) << 4;
			dst[j] = affine((float)q0, d, m);
			dst[j + 16] = affine((float)q1, d, m);
		}
	}
}

void qc_dequant_row_Q8_0(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK32; ib++, p += sizeof(struct qc_block_Q8_0), dst += QC_QK32) {
		struct qc_block_Q8_0 b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		for (int j = 0; j < QC_QK32; j++)
			dst[j] = (float)b.qs[j] * d;
	}
}

void qc_dequant_row_Q8_1(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK32; ib++, p += sizeof(struct qc_block_Q8_1), dst += QC_QK32) {
		struct qc_block_Q8_1 b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		for (int j = 0; j < QC_QK32; j++)
			dst[j] = (float)b.qs[j] * d;
	}
}
