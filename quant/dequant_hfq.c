/* dequant_hfq.c — decoders of the Hugging Face scheme encodings (qtype.def ids
 * 128..133): hq4/hq8 (GPTQ, AWQ, compressed-tensors int), bnb_nf4/bnb_fp4
 * (bitsandbytes 4-bit), f8_e4m3 (compressed-tensors float-quantized), nvfp4.
 * Each element is one f32 product of the block's scale and a code value, the same
 * operation the reference libraries run in float32 (GPTQ/AWQ scale*(q-z),
 * compressed-tensors (q-z)*scale, bnb code[q]*absmax), so results are bit-exact
 * with those libraries' float32 dequantization (docs/hf-quant.md).
 * Non-goals: encoders (convert time only needs the codes it copies).
 */
#include "dequant_hfq.h"

#include <stddef.h>

#include "dequant.h"

/* bitsandbytes get_4bit_type("nf4"): already in [-1, 1], as float32. */
QC_TABLE_BEGIN(float, qc_bnb_nf4, 16)
	-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
	-0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
	0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
	0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f,
QC_TABLE_END()

/* bitsandbytes get_4bit_type("fp4"): {0, 1/16, 8, 12, 4, 6, 2, 3} (sign in bit 3)
 * divided by 12 in float32, as the checkpoint's quant_map and bnb's CUDA kernel
 * (dDequantizeFP4Tree) have them; code 8 is +0 as in quant_map (Python's -0 is the
 * integer 0; the CUDA kernel's -0.0 compares equal). bnb's CPU backend uses a
 * 4-decimal copy (0.0052, 0.6667, ...); docs/hf-quant.md gives the difference. */
QC_TABLE_BEGIN(float, qc_bnb_fp4, 16)
	0.0f, 0.0625f / 12.0f, 8.0f / 12.0f, 1.0f, 4.0f / 12.0f, 6.0f / 12.0f, 2.0f / 12.0f, 3.0f / 12.0f,
	0.0f, -0.0625f / 12.0f, -8.0f / 12.0f, -1.0f, -4.0f / 12.0f, -6.0f / 12.0f, -2.0f / 12.0f, -3.0f / 12.0f,
QC_TABLE_END()

/* OCP E2M1 (compressed-tensors kE2M1ToFloat with the sign in bit 3). */
QC_TABLE_BEGIN(float, qc_e2m1, 16)
	0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
	-0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f,
QC_TABLE_END()

void qc_dequant_row_HQ4(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK32; ib++, p += sizeof(struct qc_block_HQ4), dst += QC_QK32) {
		struct qc_block_HQ4 b;
		memcpy(&b, p, sizeof b);
		const float d = qc_hfq_get_f32(b.d);
		for (int j = 0; j < 16; j++) {
			dst[j] = d * (float)((b.qs[j] & 0xf) - b.z);
			dst[j + 16] = d * (float)((b.qs[j] >> 4) - b.z);
		}
	}
}

void qc_dequant_row_HQ8(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK32; ib++, p += sizeof(struct qc_block_HQ8), dst += QC_QK32) {
		struct qc_block_HQ8 b;
		memcpy(&b, p, sizeof b);
		const float d = qc_hfq_get_f32(b.d);
		for (int j = 0; j < 32; j++)
			dst[j] = d * (float)(b.qs[j] - b.z);
	}
}

static void dequant_bnb4(const void *src, float *dst, int64_t n, const float *table)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK32; ib++, p += sizeof(struct qc_block_BNB_NF4), dst += QC_QK32) {
		struct qc_block_BNB_NF4 b;
		memcpy(&b, p, sizeof b);
		const float d = qc_hfq_get_f32(b.d);
		for (int j = 0; j < 16; j++) {
			dst[2 * j] = table[b.qs[j] >> 4] * d;
			dst[2 * j + 1] = table[b.qs[j] & 0xf] * d;
		}
	}
}

void qc_dequant_row_BNB_NF4(const void *src, float *dst, int64_t n)
{
	dequant_bnb4(src, dst, n, qc_bnb_nf4);
}

void qc_dequant_row_BNB_FP4(const void *src, float *dst, int64_t n)
{
	dequant_bnb4(src, dst, n, qc_bnb_fp4);
}

/* e4m3 codes (32 at codes_off) times the block's f32 d (at offset 0), blocks of `block`
 * bytes: f8_e4m3, and f8_a8 whose activation scale a the matmul applies, not this */
static void dequant_e4m3(const uint8_t *p, float *dst, int64_t n, size_t block, size_t codes_off)
{
	for (int64_t ib = 0; ib < n / QC_QK32; ib++, p += block, dst += QC_QK32) {
		uint16_t dh[2];
		memcpy(dh, p, sizeof dh);
		const float d = qc_hfq_get_f32(dh);
		for (int j = 0; j < 32; j++)
			dst[j] = qc_e4m3_to_f32(p[codes_off + (size_t)j]) * d;
	}
}

void qc_dequant_row_F8E4M3(const void *src, float *dst, int64_t n)
{
	dequant_e4m3(src, dst, n, sizeof(struct qc_block_F8E4M3), offsetof(struct qc_block_F8E4M3, qs));
}

void qc_dequant_row_F8A8(const void *src, float *dst, int64_t n)
{
	dequant_e4m3(src, dst, n, sizeof(struct qc_block_F8A8), offsetof(struct qc_block_F8A8, qs));
}

void qc_dequant_row_NVFP4(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK32; ib++, p += sizeof(struct qc_block_NVFP4), dst += QC_QK32) {
		struct qc_block_NVFP4 b;
		memcpy(&b, p, sizeof b);
		const float d0 = qc_hfq_get_f32(b.d), d1 = qc_hfq_get_f32(b.d + 2);
		for (int j = 0; j < 16; j++) {
			const float d = j < 8 ? d0 : d1;
			dst[2 * j] = qc_e2m1[b.qs[j] & 0xf] * d;
			dst[2 * j + 1] = qc_e2m1[b.qs[j] >> 4] * d;
		}
	}
}
