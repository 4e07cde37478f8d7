/* expf_ggml.c — ggml's vector exp (ggml_v_expf, the x86 AVX2 + FMA version), one lane.
 *
 * Not libm's expf: its own range reduction and polynomial (within about 1.5 ulp),
 * which llama.cpp's CPU build uses in soft_max and SiLU. The CPU backend takes it where
 * it reproduces llama.cpp bit for bit (paged_attn.c, silu_mul.c): on a trained model a
 * last-bit difference there flips a later q8 code (docs/accuracy.md).
 * Reference: ggml-cpu.c ggml_v_expf (__AVX2__ && __FMA__).
 */
#include <math.h>
#include <string.h>

#include "ops.h"

static uint32_t f32_bits(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	return u;
}

static float bits_f32(uint32_t u)
{
	float x;
	memcpy(&x, &u, sizeof x);
	return x;
}

float qc_ref_expf_ggml(float x)
{
	const float r = 0x1.8p23f;
	const float z = fmaf(x, 0x1.715476p+0f, r);
	const float n = z - r;
	const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
	const uint32_t e = f32_bits(z) << 23;
	const float k = bits_f32(e + f32_bits(1.0f));
	const float u = b * b;
	const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
				  fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
			     u, 0x1.ffffecp-1f * b);
	if (!(fabsf(n) > 126.0f))
		return fmaf(j, k, k);
	/* |n| > 126: 2^n split in two factors; past 192 it over/underflows outright */
	const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
	const float s1 = bits_f32(g + 0x7f000000u), s2 = bits_f32(e - g);
	if (fabsf(n) > 192.0f)
		return s1 * s1;
	return fmaf(s2, j, s2) * s1;
}
