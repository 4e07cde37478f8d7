/* decode_iq.cuh — device decoders of the i-quants iq2_xxs, iq2_xs, iq2_s,
 * iq3_xxs, iq3_s, iq1_s, iq1_m, iq4_nl, iq4_xs (qc_dev<T> specializations).
 *
 * Owns: their dec32; included by decode.cuh (its qc_dev template, ld_f16).
 * Chunk c of a 256-element super-block is sub-block c; iq4_nl blocks are 32.
 * Invariants: bit-exact with quant/dequant_iq.c: the same float ops in
 * the same order ((d * (0.5 + s)) * 0.25 or 0.5, times the grid value, times
 * -1/+1 for the sign) in __fadd_rn/__fmul_rn; grids from iq_tables.c
 * (decode_tables.cuh) expanded by iq_tables.h's shared helpers; blocks read
 * bytewise (words assembled little-endian), any alignment.
 * Reference: llama.cpp dequantize_row_iq* (ggml-quants.c); quant/qblock.h.
 */
#ifndef QC_CUDA_DECODE_IQ_CUH
#define QC_CUDA_DECODE_IQ_CUH

#include "decode_tables.cuh"
#include "iq_tables.h"

static __device__ __forceinline__ uint16_t iq_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static __device__ __forceinline__ uint32_t iq_le32(const uint8_t *p)
{
	return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}

/* (d * (0.5 + s)) * f: the iq2/iq3_xxs sub-block scale, f = 0.25 or 0.5 */
static __device__ __forceinline__ float iq_half_scale(float d, unsigned s, float f)
{
	return __fmul_rn(__fmul_rn(d, __fadd_rn(0.5f, (float)s)), f);
}

/* o[j] = (db * v[j]) * (bit j of signs ? -1 : 1), j < 8 (put_signed) */
static __device__ __forceinline__ void iq_put_signed(float *o, float db, const int8_t v[8], uint32_t signs)
{
#pragma unroll
	for (int j = 0; j < 8; j++)
		o[j] = __fmul_rn(__fmul_rn(db, qc_i2f(v[j])), (signs >> j) & 1 ? -1.0f : 1.0f);
}

/* o[j] = dl * (iq1s grid value + delta), the sum rounded first (put_iq1) */
static __device__ __forceinline__ void iq1_put(float *o, float dl, unsigned idx, float delta)
{
	int8_t row[8];
	qc_iq_row8(qc_dev_grid(qc_iq1s_grid, idx), qc_iq1s_levels, row);
#pragma unroll
	for (int j = 0; j < 8; j++)
		o[j] = __fmul_rn(dl, __fadd_rn(qc_i2f(row[j]), delta));
}

/* iq2_xxs: d 0; sub-block c at 2 + 8c: 4 grid-row bytes, then an LE u32 of
 * 4 x 7-bit sign indices and the 4-bit scale on top */
template <> struct qc_dev<QC_TYPE_IQ2_XXS> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 256, BYTES = 66;
	static __device__ void dec32(const uint8_t *b, int c, float *o)
	{
		const uint8_t *q = b + 2 + 8 * c;
		const uint32_t aux = iq_le32(q + 4);
		const float db = iq_half_scale(ld_f16(b), aux >> 28, 0.25f);
#pragma unroll
		for (int l = 0; l < 4; l++) {
			int8_t row[8];
			qc_iq_row8(qc_dev_grid(qc_iq2xxs_grid, q[l]), qc_iq2xxs_levels, row);
			iq_put_signed(o + 8 * l, db, row, qc_iq_signs7(aux >> (7 * l)));
		}
	}
};

/* iq2_xs: d 0, qs 2 (32 LE u16: 9-bit row, 7-bit sign index), scales 66 (8) */
template <> struct qc_dev<QC_TYPE_IQ2_XS> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 256, BYTES = 74;
	static __device__ void dec32(const uint8_t *b, int c, float *o)
	{
		const float d = ld_f16(b);
		const float db[2] = {iq_half_scale(d, b[66 + c] & 0xfu, 0.25f), iq_half_scale(d, b[66 + c] >> 4, 0.25f)};
#pragma unroll
		for (int l = 0; l < 4; l++) {
			const uint16_t w = iq_le16(b + 2 + 2 * (4 * c + l));
			int8_t row[8];
			qc_iq_row8(qc_dev_grid(qc_iq2xs_grid, w & 511u), qc_iq2xs_levels, row);
			iq_put_signed(o + 8 * l, db[l / 2], row, qc_iq_signs7(w >> 9));
		}
	}
};

/* iq2_s: d 0, row-index low bytes 2 (32), sign bytes 34 (32), qh 66 (8: 2 high
 * index bits per row), scales 74 (8) */
template <> struct qc_dev<QC_TYPE_IQ2_S> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 256, BYTES = 82;
	static __device__ void dec32(const uint8_t *b, int c, float *o)
	{
		const float d = ld_f16(b);
		const float db[2] = {iq_half_scale(d, b[74 + c] & 0xfu, 0.25f), iq_half_scale(d, b[74 + c] >> 4, 0.25f)};
#pragma unroll
		for (int l = 0; l < 4; l++) {
			const unsigned idx = b[2 + 4 * c + l] | ((b[66 + c] >> (2 * l)) & 3u) << 8;
			int8_t row[8];
			qc_iq_row8(qc_dev_grid(qc_iq2s_grid, idx), qc_iq2s_levels, row);
			iq_put_signed(o + 8 * l, db[l / 2], row, b[34 + 4 * c + l]);
		}
	}
};

/* iq3_xxs: d 0, row indices 2 (64, 8 per sub-block), LE u32 signs + scale
 * at 66 + 4c; two 4-wide rows share one sign byte */
template <> struct qc_dev<QC_TYPE_IQ3_XXS> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 256, BYTES = 98;
	static __device__ void dec32(const uint8_t *b, int c, float *o)
	{
		const uint8_t *q = b + 2 + 8 * c;
		const uint32_t aux = iq_le32(b + 66 + 4 * c);
		const float db = iq_half_scale(ld_f16(b), aux >> 28, 0.5f);
#pragma unroll
		for (int l = 0; l < 4; l++) {
			int8_t row[8];
			qc_iq_row4(qc_dev_grid(qc_iq3xxs_grid, q[2 * l]), qc_iq3xxs_levels, row);
			qc_iq_row4(qc_dev_grid(qc_iq3xxs_grid, q[2 * l + 1]), qc_iq3xxs_levels, row + 4);
			iq_put_signed(o + 8 * l, db, row, qc_iq_signs7(aux >> (7 * l)));
		}
	}
};

/* iq3_s: d 0, row-index low bytes 2 (64), qh 66 (8: 9th bits), signs 74 (32),
 * scales 106 (4: odd scale 1 + 2s, sub-block 2k low nibble) */
template <> struct qc_dev<QC_TYPE_IQ3_S> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 256, BYTES = 110;
	static __device__ void dec32(const uint8_t *b, int c, float *o)
	{
		const float db = __fmul_rn(ld_f16(b), (float)(1 + 2 * ((b[106 + c / 2] >> (4 * (c % 2))) & 0xf)));
		const uint8_t *q = b + 2 + 8 * c;
		const unsigned qh = b[66 + c];
#pragma unroll
		for (int l = 0; l < 4; l++) {
			const unsigned i0 = q[2 * l] | ((qh >> (2 * l)) & 1u) << 8;
			const unsigned i1 = q[2 * l + 1] | ((qh >> (2 * l + 1)) & 1u) << 8;
			int8_t row[8];
			qc_iq_row4(qc_dev_grid(qc_iq3s_grid, i0), qc_iq3s_levels, row);
			qc_iq_row4(qc_dev_grid(qc_iq3s_grid, i1), qc_iq3s_levels, row + 4);
			iq_put_signed(o + 8 * l, db, row, b[74 + 4 * c + l]);
		}
	}
};

/* iq1_s: d 0, row-index low bytes 2 (32), qh 34 (8 LE u16: 4 x 3 high index
 * bits, 3-bit scale at 12, delta sign at 15) */
template <> struct qc_dev<QC_TYPE_IQ1_S> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 256, BYTES = 50;
	static __device__ void dec32(const uint8_t *b, int c, float *o)
	{
		const unsigned h = iq_le16(b + 34 + 2 * c);
		const float dl = __fmul_rn(ld_f16(b), (float)(2 * ((h >> 12) & 7) + 1));
		const float delta = h & 0x8000 ? -0.125f : 0.125f;
#pragma unroll
		for (int l = 0; l < 4; l++)
			iq1_put(o + 8 * l, dl, b[2 + 4 * c + l] | ((h >> (3 * l)) & 7u) << 8, delta);
	}
};

/* iq1_m: row-index low bytes 0 (32), qh 32 (16: a nibble per row, 3 high index
 * bits + delta sign), scales 48 (4 LE u16: 4 x 3-bit scales each, the fp16
 * super-scale in their top nibbles, word 0 lowest) */
template <> struct qc_dev<QC_TYPE_IQ1_M> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 256, BYTES = 56;
	static __device__ void dec32(const uint8_t *b, int c, float *o)
	{
		const unsigned s0 = iq_le16(b + 48), s1 = iq_le16(b + 50), s2 = iq_le16(b + 52), s3 = iq_le16(b + 54);
		const float d = qc_dev_f16((uint16_t)((s0 >> 12) | (s1 >> 8 & 0x00f0) | (s2 >> 4 & 0x0f00) | (s3 & 0xf000)));
		const unsigned sc = iq_le16(b + 48 + 2 * (c / 2)); /* scales 2c, 2c + 1 */
#pragma unroll
		for (int l = 0; l < 4; l++) {
			const int f = 2 * c + l / 2;
			const float dl = __fmul_rn(d, (float)(2 * ((sc >> (3 * (f % 4))) & 7) + 1));
			const unsigned nib = (b[32 + 2 * c + l / 2] >> (4 * (l % 2))) & 0xf;
			iq1_put(o + 8 * l, dl, b[4 * c + l] | (nib & 7u) << 8, nib & 8 ? -0.125f : 0.125f);
		}
	}
};

/* iq4_nl: d 0, nibbles 2 (byte j: element j low, j + 16 high); x = d * value */
template <> struct qc_dev<QC_TYPE_IQ4_NL> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 32, BYTES = 18;
	static __device__ void dec32(const uint8_t *b, int, float *o)
	{
		const float d = ld_f16(b);
#pragma unroll
		for (int j = 0; j < 16; j++) {
			o[j] = __fmul_rn(d, qc_i2f(qc_iq_level(qc_iq4nl_values, b[2 + j] & 0xfu)));
			o[j + 16] = __fmul_rn(d, qc_i2f(qc_iq_level(qc_iq4nl_values, b[2 + j] >> 4)));
		}
	}
};

/* iq4_xs: d 0, scales_h 2 (LE u16, 2 high bits per sub-block), scales_l 4 (4),
 * nibbles 8 (16 per sub-block, as iq4_nl); x = (d * (ls - 32)) * value */
template <> struct qc_dev<QC_TYPE_IQ4_XS> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 256, BYTES = 136;
	static __device__ void dec32(const uint8_t *b, int c, float *o)
	{
		const int ls = ((b[4 + c / 2] >> (4 * (c % 2))) & 0xf) | ((iq_le16(b + 2) >> (2 * c)) & 3) << 4;
		const float dl = __fmul_rn(ld_f16(b), (float)(ls - 32));
		const uint8_t *q = b + 8 + 16 * c;
#pragma unroll
		for (int j = 0; j < 16; j++) {
			o[j] = __fmul_rn(dl, qc_i2f(qc_iq_level(qc_iq4nl_values, q[j] & 0xfu)));
			o[j + 16] = __fmul_rn(dl, qc_i2f(qc_iq_level(qc_iq4nl_values, q[j] >> 4)));
		}
	}
};

#endif
