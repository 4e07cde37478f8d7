/* dequant_k.c — decoders for the 256-element K-quant super-blocks: q2_K,
 * q3_K, q4_K, q5_K, q6_K, q8_K.
 *
 * Bit-exact with llama.cpp's dequantize_row_q{2..6}_K and _q8_K: each
 * sub-block scale is first formed in float (super-scale * integer scale),
 * then multiplied by the integer code, then the float min is subtracted —
 * the same three roundings llama.cpp does, in the same order, never fused.
 * Layout facts the decoders rely on (element e of a super-block):
 *   q2_K/q3_K: 2-bit plane (e%128)/32 of qs[32*(e/128) + e%32]; scale e/16.
 *   q4_K/q5_K: sub-block s = e/32 reads nibble s%2 of qs[32*(s/2) + e%32].
 *   q6_K: see qc_dequant_row_Q6_K.
 */
#include <string.h>

#include "dequant.h"
#include "fp16.h"

/* q*d - m as llama.cpp rounds it: product, then difference. */
static inline float mul_sub(float q, float d, float m)
{
	const float p = q * d;
	return p - m;
}

/* 2-bit code of element e (0..255) in a q2_K/q3_K qs array. */
static inline int plane2(const uint8_t qs[64], int e)
{
	return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

/* 6-bit scale and min of sub-block s (0..7) in the 12-byte q4_K/q5_K field:
 * s < 4 keeps them in the low 6 bits of bytes s and s+4; s >= 4 has their
 * low nibbles in byte s+4 and their top 2 bits in the spare top bits of
 * bytes s-4 (scale) and s (min). */
static void scale_min_k4(const uint8_t sc[12], int s, int *scale, int *min)
{
	if (s < 4) {
		*scale = sc[s] & 63;
		*min = sc[s + 4] & 63;
	} else {
		*scale = (sc[s + 4] & 0xf) | (sc[s - 4] >> 6) << 4;
		*min = (sc[s + 4] >> 4) | (sc[s] >> 6) << 4;
	}
}

void qc_dequant_row_Q2_K(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, p += sizeof(struct qc_block_Q2_K), dst += QC_QK_K) {
		struct qc_block_Q2_K b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		const float dmin = qc_fp16_to_f32(b.dmin);
		for (int s = 0; s < 16; s++) {
			const float dl = d * (float)(b.scales[s] & 0xf);
			const float ml = dmin * (float)(b.scales[s] >> 4);
			for (int e = 16 * s; e < 16 * s + 16; e++)
				dst[e] = mul_sub((float)plane2(b.qs, e), dl, ml);
		}
	}
}

void qc_dequant_row_Q3_K(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, p += sizeof(struct qc_block_Q3_K), dst += QC_QK_K) {
		struct qc_block_Q3_K b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		for (int s = 0; s < 16; s++) {
			/* 6-bit scale: low nibble from bytes 0..7, top 2 bits from 8..11 */
			int lo = (b.scales[s % 8] >> (4 * (s / 8))) & 0xf;
			int hi = (b.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
			const float dl = d * (float)((lo | hi << 4) - 32);
			for (int e = 16 * s; e < 16 * s + 16; e++) {
				/* a clear hmask bit means the code is 4 lower */
				int high = (b.hmask[e % 32] >> (e / 32)) & 1;
				dst[e] = dl * (float)(plane2(b.qs, e) - (high ? 0 : 4));
			}
		}
	}
}

void qc_dequant_row_Q4_K(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, p += sizeof(struct qc_block_Q4_K), dst += QC_QK_K) {
		struct qc_block_Q4_K b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		const float dmin = qc_fp16_to_f32(b.dmin);
		for (int s = 0; s < 8; s++) {
			int sc, mn;
			scale_min_k4(b.scales, s, &sc, &mn);
			const float dl = d * (float)sc;
			const float ml = dmin * (float)mn;
			const uint8_t *q = b.qs + 32 * (s / 2);
			const int shift = 4 * (s % 2);
			for (int l = 0; l < 32; l++)
				dst[32 * s + l] = mul_sub((float)((q[l] >> shift) & 0xf), dl, ml);
		}
	}
}

void qc_dequant_row_Q5_K(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, p += sizeof(struct qc_block_Q5_K), dst += QC_QK_K) {
		struct qc_block_Q5_K b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		const float dmin = qc_fp16_to_f32(b.dmin);
		for (int s = 0; s < 8; s++) {
			int sc, mn;
			scale_min_k4(b.scales, s, &sc, &mn);
			const float dl = d * (float)sc;
			const float ml = dmin * (float)mn;
			const uint8_t *q = b.qs + 32 * (s / 2);
			const int shift = 4 * (s % 2);
			for (int l = 0; l < 32; l++) {
				int v = ((q[l] >> shift) & 0xf) | ((b.qh[l] >> s) & 1) << 4;
				dst[32 * s + l] = mul_sub((float)v, dl, ml);
			}
		}
	}
}

/* Each 128-element half h owns ql[64h..64h+63] and qh[32h..32h+31]. Its
 * quarter k (32 elements, index l) takes the low or high nibble (k/2) of
 * ql[64h + 32*(k%2) + l] and bits 2k..2k+1 of qh[32h + l]; scale e/16. */
void qc_dequant_row_Q6_K(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, p += sizeof(struct qc_block_Q6_K), dst += QC_QK_K) {
		struct qc_block_Q6_K b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		for (int e = 0; e < QC_QK_K; e++) {
			const int h = e / 128, k = (e % 128) / 32, l = e % 32;
			int lo = (b.ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0xf;
			int hi = (b.qh[32 * h + l] >> (2 * k)) & 3;
			const float dl = d * (float)b.scales[e / 16];
			dst[e] = dl * (float)((lo | hi << 4) - 32);
		}
	}
}

void qc_dequant_row_Q8_K(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, p += sizeof(struct qc_block_Q8_K), dst += QC_QK_K) {
		struct qc_block_Q8_K b;
		memcpy(&b, p, sizeof b);
		for (int j = 0; j < QC_QK_K; j++)
			dst[j] = b.d * (float)b.qs[j];
	}
}
