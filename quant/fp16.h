/* fp16.h — scalar conversions between binary32 and the 16-bit / 8-bit float
 * formats that appear inside blocks: IEEE binary16, bfloat16, OCP E8M0, and
 * OCP FP8 E4M3FN (compressed-tensors weights, the fp8 K/V cache).
 *
 * Owns: bit-exact integer implementations usable from C and CUDA (QC_HOSTDEV).
 * Decode is exact. binary16 encode rounds to nearest, ties to even, overflows
 * to inf, and maps any NaN to the quiet NaN 0x7e00 with its sign (ggml's
 * portable path). bf16 encode is ggml's ggml_compute_fp32_to_bf16 contract:
 * RNE on the top 16 bits, subnormals kept, NaN forced quiet (bit 6 of the
 * result). binary16 NaNs decode with payload kept and the quiet bit set, as
 * both x86 F16C and ggml's table do. E4M3 encode rounds to nearest, ties to
 * even, and is the OCP spec's non-saturating conversion: a magnitude that
 * rounds past 448 (> 464) and any NaN or inf become NaN (S.1111.111), so an
 * overflow shows instead of clamping silently.
 * Non-goals: rounding modes other than RNE, vector versions.
 */
#ifndef QC_FP16_H
#define QC_FP16_H

#include <stdint.h>
#include <string.h>

#include "qblock.h"

static inline QC_HOSTDEV float qc_bits_to_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static inline QC_HOSTDEV uint32_t qc_f32_to_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

/* binary16 bits -> float, exact. */
static inline QC_HOSTDEV float qc_fp16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t man = h & 0x3ffu;

	if (exp == 0x1f) /* inf, or NaN with payload kept and made quiet */
		return qc_bits_to_f32(sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0));
	if (exp == 0) {
		/* zero or subnormal: man * 2^-24, exact in binary32 */
		float mag = (float)man * 0x1p-24f;
		return sign ? -mag : mag;
	}
	/* rebias 15 -> 127 */
	return qc_bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* float -> binary16 bits, round to nearest even. */
static inline QC_HOSTDEV uint16_t qc_f32_to_fp16(float f)
{
	uint32_t u = qc_f32_to_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t a = u & 0x7fffffffu;

	if (a > 0x7f800000u)
		return sign | 0x7e00u;
	/* 65520 is the midpoint between 65504 (max half) and 2^16; its tie goes
	 * to the even side, which is the overflow */
	if (a >= 0x477ff000u)
		return sign | 0x7c00u;
	if (a >= 0x38800000u) {
		/* normal half: drop 13 mantissa bits; a carry out of the mantissa
		 * correctly bumps the exponent */
		uint32_t h = (a >> 13) - (112u << 10);
		uint32_t rem = a & 0x1fffu;
		if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
			h++;
		return sign | (uint16_t)h;
	}
	/* at or below 2^-25 (half of the smallest subnormal, tie to 0): zero */
	if (a <= 0x33000000u)
		return sign;
	{
		/* subnormal half: count units of 2^-24; the value is m * 2^(e-150) */
		uint32_t e = a >> 23;
		uint32_t m = (a & 0x7fffffu) | 0x800000u;
		uint32_t shift = 126u - e; /* 14..24 for e in 102..112 */
		uint32_t h = m >> shift;
		uint32_t rem = m & ((1u << shift) - 1u);
		uint32_t half = 1u << (shift - 1u);
		if (rem > half || (rem == half && (h & 1u)))
			h++; /* may reach 0x400, the smallest normal: still correct */
		return sign | (uint16_t)h;
	}
}

/* bfloat16 bits -> float: the top half of a binary32, exact. */
static inline QC_HOSTDEV float qc_bf16_to_f32(uint16_t b)
{
	return qc_bits_to_f32((uint32_t)b << 16);
}

/* float -> bfloat16 bits (ggml's rule, see header). */
static inline QC_HOSTDEV uint16_t qc_f32_to_bf16(float f)
{
	uint32_t u = qc_f32_to_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	/* adding 0x7fff plus the kept LSB rounds ties to even; a carry into the
	 * exponent rounds up to the next binade or to inf */
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* E8M0 scale byte -> 2^(e-127) / 2, the factor MXFP4's doubled E2M1 values
 * are multiplied by (ggml/gguf-py use the halved scale so that the value
 * table holds integers). e = 0 and 1 give binary32 subnormals; e = 255 gives
 * 2^127, not NaN, as in ggml. */
static inline QC_HOSTDEV float qc_e8m0_to_f32_half(uint8_t e)
{
	if (e < 2)
		return qc_bits_to_f32(0x00200000u << e);
	return qc_bits_to_f32((uint32_t)(e - 1) << 23);
}

/* OCP FP8 E4M3FN: bias 7, no infinities, S.1111.111 is NaN; exact in f32. */
static inline QC_HOSTDEV float qc_e4m3_to_f32(uint8_t v)
{
	const int e = (v >> 3) & 0xf, m = v & 7;
	float x;
	if ((v & 0x7f) == 0x7f) {
		uint32_t nan = 0x7fc00000u;
		memcpy(&x, &nan, sizeof x);
	} else if (e == 0) {
		x = (float)m * (1.0f / 512.0f);              /* m/8 * 2^-6 */
	} else {
		uint32_t u = ((uint32_t)(e - 7 + 127) << 23) | ((uint32_t)m << 20);
		memcpy(&x, &u, sizeof x);
	}
	return (v & 0x80) ? -x : x;
}

/* float -> E4M3FN code, RNE; |f| > 464 (rounds past the max finite 448), inf
 * and NaN give the NaN code with f's sign (no saturation: see the header). */
static inline QC_HOSTDEV uint8_t qc_f32_to_e4m3(float f)
{
	const uint32_t u = qc_f32_to_bits(f), a = u & 0x7fffffffu;
	const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);

	if (a > 0x43e80000u) /* 464 = 1.8125 * 2^8, the tie that goes to 448; NaN, inf */
		return sign | 0x7fu;
	if (a >= 0x3c800000u) {
		/* normal (>= 2^-6): keep 3 mantissa bits; adding 0x7ffff plus the kept
		 * LSB rounds ties to even, a carry bumps the exponent; rebias 127 -> 7 */
		return sign | (uint8_t)(((a + 0x7ffffu + ((a >> 20) & 1u)) >> 20) - (120u << 3));
	}
	/* subnormal: units of 2^-9, 0..8 (8 is code 8 = 2^-6, the smallest normal) */
	const float v = qc_bits_to_f32(a) * 512.0f; /* exact: a power-of-two scale of a value < 2^-6 */
	uint32_t q = (uint32_t)v;
	const float r = v - (float)q;
	if (r > 0.5f || (r == 0.5f && (q & 1u)))
		q++;
	return sign | (uint8_t)q;
}

#endif
