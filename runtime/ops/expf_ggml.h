/* expf_ggml.h — ggml's vector exp (ggml_v_expf, the x86 AVX2 + FMA version), one
 * lane, inline: callers compiled for FMA (paged_attn.c's FMA build) get its fmaf as
 * instructions, the others libm's fmaf; one correctly rounded operation either way,
 * so the same bits. qc_ref_expf_ggml (expf_ggml.c) is this as a function.
 *
 * Not libm's expf: its own range reduction and polynomial (within about 1.5 ulp),
 * which llama.cpp's CPU build uses in soft_max and SiLU. The CPU backend takes it where
 * it reproduces llama.cpp bit for bit (paged_attn.c, silu_mul.c): on a trained model a
 * last-bit difference there flips a later q8 code (docs/accuracy.md).
 * Reference: ggml-cpu.c ggml_v_expf (__AVX2__ && __FMA__).
 */
#ifndef QC_OPS_EXPF_GGML_H
#define QC_OPS_EXPF_GGML_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline __attribute__((always_inline)) uint32_t qc_expf_f32_bits(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	return u;
}

static inline __attribute__((always_inline)) float qc_expf_bits_f32(uint32_t u)
{
	float x;
	memcpy(&x, &u, sizeof x);
	return x;
}

static inline __attribute__((always_inline)) float qc_expf_ggml_inline(float x)
{
	const float r = 0x1.8p23f;
	const float z = fmaf(x, 0x1.715476p+0f, r);
	const float n = z - r;
	const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
	const uint32_t e = qc_expf_f32_bits(z) << 23;
	const float k = qc_expf_bits_f32(e + qc_expf_f32_bits(1.0f));
	const float u = b * b;
	const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
				  fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
			     u, 0x1.ffffecp-1f * b);
	if (!(fabsf(n) > 126.0f))
		return fmaf(j, k, k);
	/* |n| > 126: 2^n split in two factors; past 192 it over/underflows outright */
	const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
	const float s1 = qc_expf_bits_f32(g + 0x7f000000u), s2 = qc_expf_bits_f32(e - g);
	if (fabsf(n) > 192.0f)
		return s1 * s1;
	return fmaf(s2, j, s2) * s1;
}

#endif
