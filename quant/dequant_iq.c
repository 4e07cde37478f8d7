/* dequant_iq.c — decoders for the lattice/codebook "i-quants": iq2_xxs,
 * iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m, iq4_nl, iq4_xs.
 *
 * Bit-exact with llama.cpp's dequantize_row_iq* (ggml-quants.c): the
 * sub-block scale is formed in float with llama.cpp's association (for
 * iq2/iq3_xxs: (d * (0.5 + s)) * 0.25 or 0.5), multiplied by the grid value,
 * and the sign applied as a multiplication by -1/+1 so even NaN scales give
 * the same bits. Grids come from iq_tables.h in compact form; the sign byte
 * of iq2_xxs/iq2_xs/iq3_xxs is 7 stored bits plus a parity bit.
 * Every index a block can hold is in range of its table, so corrupt blocks
 * decode to garbage values, never out-of-bounds reads.
 */
#include <string.h>

#include "dequant.h"
#include "fp16.h"
#include "iq_tables.h"

/* llama.cpp's fixed +-1/8 shift of the iq1 ternary grid points */
#define IQ1_DELTA 0.125f

static inline uint32_t load_le32(const uint8_t *b)
{
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static inline uint16_t load_le16(const uint8_t *b)
{
	return (uint16_t)(b[0] | b[1] << 8);
}

/* y[j] = scale * v[j] * (bit j of signs ? -1 : 1), j < count */
static inline void put_signed(float *y, float scale, const int8_t *v, uint32_t signs, int count)
{
	for (int j = 0; j < count; j++) {
		const float a = scale * (float)v[j];
		y[j] = a * ((signs >> j) & 1 ? -1.0f : 1.0f);
	}
}

void qc_dequant_row_IQ2_XXS(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, p += sizeof(struct qc_block_IQ2_XXS)) {
		struct qc_block_IQ2_XXS b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		const uint8_t *q = (const uint8_t *)b.qs;
		for (int s = 0; s < 8; s++, q += 8) {
			/* bytes 0..3: one grid row per 8 elements; word 1: 4 x 7-bit
			 * sign indices, 4-bit scale on top */
			const uint32_t aux = load_le32(q + 4);
			const float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
			for (int l = 0; l < 4; l++, dst += 8) {
				int8_t row[8];
				qc_iq_row8(qc_iq2xxs_grid[q[l]], qc_iq2xxs_levels, row);
				put_signed(dst, db, row, qc_iq_signs7(aux >> (7 * l)), 8);
			}
		}
	}
}

void qc_dequant_row_IQ2_XS(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, p += sizeof(struct qc_block_IQ2_XS)) {
		struct qc_block_IQ2_XS b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		for (int s = 0; s < 8; s++) {
			const float db[2] = {
				d * (0.5f + (float)(b.scales[s] & 0xf)) * 0.25f,
				d * (0.5f + (float)(b.scales[s] >> 4)) * 0.25f,
			};
			for (int l = 0; l < 4; l++, dst += 8) {
				const uint16_t w = b.qs[4 * s + l];
				int8_t row[8];
				qc_iq_row8(qc_iq2xs_grid[w & 511], qc_iq2xs_levels, row);
				put_signed(dst, db[l / 2], row, qc_iq_signs7(w >> 9), 8);
			}
		}
	}
}

void qc_dequant_row_IQ2_S(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, p += sizeof(struct qc_block_IQ2_S)) {
		struct qc_block_IQ2_S b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		const uint8_t *signs = b.qs + 32;
		for (int s = 0; s < 8; s++) {
			const float db[2] = {
				d * (0.5f + (float)(b.scales[s] & 0xf)) * 0.25f,
				d * (0.5f + (float)(b.scales[s] >> 4)) * 0.25f,
			};
			for (int l = 0; l < 4; l++, dst += 8) {
				const unsigned idx = b.qs[4 * s + l] | ((b.qh[s] >> (2 * l)) & 3u) << 8;
				int8_t row[8];
				qc_iq_row8(qc_iq2s_grid[idx], qc_iq2s_levels, row);
				put_signed(dst, db[l / 2], row, signs[4 * s + l], 8);
			}
		}
	}
}

void qc_dequant_row_IQ3_XXS(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, p += sizeof(struct qc_block_IQ3_XXS)) {
		struct qc_block_IQ3_XXS b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		for (int s = 0; s < 8; s++) {
			const uint32_t aux = load_le32(b.qs + 64 + 4 * s);
			const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
			for (int l = 0; l < 4; l++, dst += 8) {
				/* two 4-wide rows make one group of 8 sharing a sign byte */
				const uint32_t sg = qc_iq_signs7(aux >> (7 * l));
				int8_t row[8];
				qc_iq_row4(qc_iq3xxs_grid[b.qs[8 * s + 2 * l]], qc_iq3xxs_levels, row);
				qc_iq_row4(qc_iq3xxs_grid[b.qs[8 * s + 2 * l + 1]], qc_iq3xxs_levels, row + 4);
				put_signed(dst, db, row, sg, 8);
			}
		}
	}
}

void qc_dequant_row_IQ3_S(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, p += sizeof(struct qc_block_IQ3_S)) {
		struct qc_block_IQ3_S b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		for (int s = 0; s < 8; s++) {
			const float db = d * (float)(1 + 2 * ((b.scales[s / 2] >> (4 * (s % 2))) & 0xf));
			for (int l = 0; l < 4; l++, dst += 8) {
				const unsigned i0 = b.qs[8 * s + 2 * l] | ((b.qh[s] >> (2 * l)) & 1u) << 8;
				const unsigned i1 = b.qs[8 * s + 2 * l + 1] | ((b.qh[s] >> (2 * l + 1)) & 1u) << 8;
				int8_t row[8];
				qc_iq_row4(qc_iq3s_grid[i0], qc_iq3s_levels, row);
				qc_iq_row4(qc_iq3s_grid[i1], qc_iq3s_levels, row + 4);
				put_signed(dst, db, row, b.signs[4 * s + l], 8);
			}
		}
	}
}

/* y = dl * (grid value + delta), the sum rounded before the product */
static inline void put_iq1(float *y, float dl, unsigned idx, float delta)
{
	int8_t row[8];
	qc_iq_row8(qc_iq1s_grid[idx], qc_iq1s_levels, row);
	for (int j = 0; j < 8; j++)
		y[j] = dl * ((float)row[j] + delta);
}

void qc_dequant_row_IQ1_S(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, p += sizeof(struct qc_block_IQ1_S)) {
		struct qc_block_IQ1_S b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		for (int s = 0; s < 8; s++) {
			const uint16_t h = b.qh[s];
			const float dl = d * (float)(2 * ((h >> 12) & 7) + 1);
			const float delta = h & 0x8000 ? -IQ1_DELTA : IQ1_DELTA;
			for (int l = 0; l < 4; l++, dst += 8)
				put_iq1(dst, dl, b.qs[4 * s + l] | ((h >> (3 * l)) & 7u) << 8, delta);
		}
	}
}

void qc_dequant_row_IQ1_M(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, p += sizeof(struct qc_block_IQ1_M)) {
		struct qc_block_IQ1_M b;
		memcpy(&b, p, sizeof b);
		uint16_t sc[4];
		for (int k = 0; k < 4; k++)
			sc[k] = load_le16(b.scales + 2 * k);
		/* the fp16 super-scale is the top nibble of each scale word, word 0 lowest */
		const uint16_t dbits = (uint16_t)((sc[0] >> 12) | (sc[1] >> 8 & 0x00f0) |
						  (sc[2] >> 4 & 0x0f00) | (sc[3] & 0xf000));
		const float d = qc_fp16_to_f32(dbits);
		for (int s = 0; s < 8; s++) {
			for (int l = 0; l < 4; l++, dst += 8) {
				/* 3-bit scale f = 2s + l/2 (one per 16 elements), 4 per word */
				const int f = 2 * s + l / 2;
				const float dl = d * (float)(2 * ((sc[f / 4] >> (3 * (f % 4))) & 7) + 1);
				/* one nibble of qh per row: 3 high index bits, delta sign on top */
				const unsigned nib = (b.qh[2 * s + l / 2] >> (4 * (l % 2))) & 0xf;
				const float delta = nib & 8 ? -IQ1_DELTA : IQ1_DELTA;
				put_iq1(dst, dl, b.qs[4 * s + l] | (nib & 7u) << 8, delta);
			}
		}
	}
}

void qc_dequant_row_IQ4_NL(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK32; ib++, p += sizeof(struct qc_block_IQ4_NL), dst += QC_QK32) {
		struct qc_block_IQ4_NL b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		for (int j = 0; j < 16; j++) {
			dst[j] = d * (float)qc_iq4nl_values[b.qs[j] & 0xf];
			dst[j + 16] = d * (float)qc_iq4nl_values[b.qs[j] >> 4];
		}
	}
}

void qc_dequant_row_IQ4_XS(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, p += sizeof(struct qc_block_IQ4_XS)) {
		struct qc_block_IQ4_XS b;
		memcpy(&b, p, sizeof b);
		const float d = qc_fp16_to_f32(b.d);
		for (int s = 0; s < 8; s++, dst += 32) {
			const int ls = ((b.scales_l[s / 2] >> (4 * (s % 2))) & 0xf) |
				       ((b.scales_h >> (2 * s)) & 3) << 4;
			const float dl = d * (float)(ls - 32);
			const uint8_t *q = b.qs + 16 * s;
			for (int j = 0; j < 16; j++) {
				dst[j] = dl * (float)qc_iq4nl_values[q[j] & 0xf];
				dst[j + 16] = dl * (float)qc_iq4nl_values[q[j] >> 4];
			}
		}
	}
}
