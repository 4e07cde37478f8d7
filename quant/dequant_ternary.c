/* dequant_ternary.c — decoders for the ternary types tq1_0 and tq2_0
 * (x = d * t, t in {-1, 0, 1}).
 *
 * Bit-exact with llama.cpp's dequantize_row_tq1_0 / _tq2_0: (float)(t) * d.
 * tq1_0 packs 5 trits per byte as a base-3 fixed-point fraction of 256
 * (byte = ceil(v * 256 / 243)), so trit n of byte b is the integer part of
 * 3 * frac(b * 3^n / 256): ((uint8_t)(b * 3^n) * 3) >> 8.
 * Element order: qs[0..31] give 5 x 32 elements (trit n of byte m ->
 * element 32n + m), qs[32..47] give 5 x 16 more, qh[0..3] the last 4 x 4.
 * tq2_0: 2-bit codes, byte m of 32-byte half c holds elements
 * 128c + 32k + m at bit 2k.
 */
#include <string.h>

#include "dequant.h"
#include "fp16.h"

static inline int trit(uint8_t byte, int n)
{
	static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
	const uint8_t frac = (uint8_t)(byte * pow3[n]);
	return (frac * 3) >> 8;
}

/* Expand `width` bytes x `ntrits` trits to ntrits*width elements. */
static float *put_trits(float *y, const uint8_t *bytes, int width, int ntrits, float d)
{
	for (int n = 0; n < ntrits; n++)
		for (int m = 0; m < width; m++)
			*y++ = (float)(trit(bytes[m], n) - 1) * d;
	return y;
}

void qc_dequant_row_TQ1_0(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, p += sizeof(struct qc_block_TQ1_0)) {
		struct qc_block_TQ1_0 b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		dst = put_trits(dst, b.qs, 32, 5, d);
		dst = put_trits(dst, b.qs + 32, 16, 5, d);
		dst = put_trits(dst, b.qh, 4, 4, d);
	}
}

void qc_dequant_row_TQ2_0(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, p += sizeof(struct qc_block_TQ2_0), dst += QC_QK_K) {
		struct qc_block_TQ2_0 b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		for (int e = 0; e < QC_QK_K; e++) {
			const int q = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
			dst[e] = (float)(q - 1) * d;
		}
	}
}
