/* quant_k.c — plain float -> block encoders for q4_K, q5_K and q6_K super-blocks.
 *
 * Owns: qc_quant_row_{Q4_K,Q5_K,Q6_K}, which mkgguf uses to write K-quant models
 * straight from seeded floats (llama-quantize would need an F16 file first). Each
 * block covers its input: per sub-block the range [min(0, lo), hi] (q4_K/q5_K) or
 * [-amax, amax] (q6_K) lies inside what the stored scales can reach, so every
 * element's error is at most half a sub-block step plus fp16 rounding. How: the
 * super-block scales d/dmin are max/63 (q6_K: max/127) stored in fp16 rounded UP, and
 * each 6-bit (8-bit) sub-block scale is the ceiling, never the nearest, so rounding
 * a scale cannot shrink the range below the data.
 * Layout and decoding: quant/qblock.h and dequant_k.c (bit-exact with llama.cpp).
 * Not llama.cpp's quantize_row_q4_K_ref: no iterative scale search, no importance
 * weights, so the bytes differ from llama-quantize's and the error is ~1.5x larger;
 * the blocks are equally valid. Non-goals: NaN/Inf input beyond "no crash" (scales
 * are clamped to the largest finite half, so blocks always decode finite).
 */
#include <math.h>
#include <string.h>

#include "dequant.h"
#include "fp16.h"

#define HALF_MAX_BITS 0x7bffu               /* 65504, the largest finite half */
#define LANES 8                             /* independent min/max accumulators */

/* fp16 bits of the smallest half >= x (x >= 0, finite or not), capped at 65504. */
static uint16_t fp16_up(float x)
{
	if (!(x > 0.0f))
		return 0;
	uint16_t h = qc_f32_to_fp16(x);
	if (h < 0x7c00u && qc_fp16_to_f32(h) < x)
		h++;    /* positive halves are ordered like their bit patterns */
	return h > HALF_MAX_BITS ? HALF_MAX_BITS : h;
}

/* ceil(v / step) clamped to 0..hi; 0 when step is 0. */
static int ceil_steps(float v, float step, int hi)
{
	if (!(step > 0.0f) || !(v > 0.0f))
		return 0;
	const float q = ceilf(v / step);
	return q >= (float)hi ? hi : (int)q;
}

/* q4_K / q5_K common part: d, dmin, 8 sub-block scales and mins, and the codes
 * (0..levels) of one super-block x, such that x ~ d*sc*q - dmin*mn. */
struct kq_block {
	uint16_t d, dmin;
	uint8_t sc[8], mn[8];
	uint8_t q[QC_QK_K];
};

static void kq_encode(const float *x, int levels, struct kq_block *b)
{
	float lo[8], hi[8], mmax = 0.0f, need[8], nmax = 0.0f;
	for (int s = 0; s < 8; s++) {
		/* LANES independent minima/maxima: no loop-carried chain, min/max exact */
		float a[LANES], z[LANES];
		for (int j = 0; j < LANES; j++) {
			a[j] = 0.0f;
			z[j] = x[32 * s + j];
		}
		for (int l = 0; l < 32; l += LANES)
			for (int j = 0; j < LANES; j++) {
				const float v = x[32 * s + l + j];
				a[j] = v < a[j] ? v : a[j];
				z[j] = v > z[j] ? v : z[j];
			}
		for (int j = 1; j < LANES; j++) {
			a[0] = a[j] < a[0] ? a[j] : a[0];
			z[0] = z[j] > z[0] ? z[j] : z[0];
		}
		lo[s] = -a[0];  /* >= 0: the decoder subtracts dmin*mn */
		hi[s] = z[0];
		mmax = lo[s] > mmax ? lo[s] : mmax;
	}
	b->dmin = fp16_up(mmax / 63.0f);
	const float dmin = qc_fp16_to_f32(b->dmin);
	float ml[8];
	for (int s = 0; s < 8; s++) {
		b->mn[s] = (uint8_t)ceil_steps(lo[s], dmin, 63);
		ml[s] = dmin * (float)b->mn[s];
		need[s] = (hi[s] + ml[s]) / (float)levels;
		nmax = need[s] > nmax ? need[s] : nmax;
	}
	b->d = fp16_up(nmax / 63.0f);
	const float d = qc_fp16_to_f32(b->d);
	for (int s = 0; s < 8; s++) {
		b->sc[s] = (uint8_t)ceil_steps(need[s], d, 63);
		const float dl = d * (float)b->sc[s];
		const float inv = dl > 0.0f ? 1.0f / dl : 0.0f, top = (float)levels, m = ml[s];
		const float *xs = x + 32 * s;
		int32_t qi[32];
		for (int l = 0; l < 32; l++) {
			/* clamped to 0..levels in float (NaN -> 0), then truncating v + 0.5
			 * rounds to nearest; branch-free, into int32 so that -O2 vectorizes it */
			float v = (xs[l] + m) * inv + 0.5f;
			v = v > 0.0f ? v : 0.0f;
			v = v < top ? v : top;
			qi[l] = (int32_t)v;
		}
		for (int l = 0; l < 32; l++)
			b->q[32 * s + l] = (uint8_t)qi[l];
	}
}

/* The 12-byte scale field dequant_k.c's scale_min_k4 reads: bytes 0..3 and 4..7 hold
 * the scales and mins of sub-blocks 0..3 in their low 6 bits and the top 2 bits of
 * sub-blocks 4..7's; bytes 8..11 hold the low nibbles of sub-blocks 4..7's. */
static void pack_scales(const struct kq_block *b, uint8_t out[12])
{
	for (int s = 0; s < 4; s++) {
		out[s] = (uint8_t)(b->sc[s] | (b->sc[s + 4] >> 4) << 6);
		out[s + 4] = (uint8_t)(b->mn[s] | (b->mn[s + 4] >> 4) << 6);
		out[s + 8] = (uint8_t)((b->sc[s + 4] & 0xf) | (b->mn[s + 4] & 0xf) << 4);
	}
}

void qc_quant_row_Q4_K(const float *src, void *dst, int64_t n)
{
	uint8_t *p = dst;
	struct kq_block k;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, src += QC_QK_K, p += sizeof(struct qc_block_Q4_K)) {
		struct qc_block_Q4_K b;
		kq_encode(src, 15, &k);
		b.d = k.d;
		b.dmin = k.dmin;
		pack_scales(&k, b.scales);
		/* sub-blocks 2c and 2c+1 share bytes 32c..32c+31, low and high nibble */
		for (int c = 0; c < 4; c++)
			for (int l = 0; l < 32; l++)
				b.qs[32 * c + l] = (uint8_t)(k.q[64 * c + l] | k.q[64 * c + 32 + l] << 4);
		memcpy(p, &b, sizeof b);
	}
}

void qc_quant_row_Q5_K(const float *src, void *dst, int64_t n)
{
	uint8_t *p = dst;
	struct kq_block k;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, src += QC_QK_K, p += sizeof(struct qc_block_Q5_K)) {
		struct qc_block_Q5_K b;
		kq_encode(src, 31, &k);
		b.d = k.d;
		b.dmin = k.dmin;
		pack_scales(&k, b.scales);
		memset(b.qh, 0, sizeof b.qh);
		for (int c = 0; c < 4; c++)
			for (int l = 0; l < 32; l++)
				b.qs[32 * c + l] = (uint8_t)((k.q[64 * c + l] & 0xf) | (k.q[64 * c + 32 + l] & 0xf) << 4);
		/* bit s of qh[l]: the fifth bit of element 32s + l */
		for (int s = 0; s < 8; s++)
			for (int l = 0; l < 32; l++)
				b.qh[l] |= (uint8_t)((k.q[32 * s + l] >> 4) << s);
		memcpy(p, &b, sizeof b);
	}
}

/* 16 sub-blocks of 16, symmetric: sub-block scale amax/31 so codes stay in -31..31
 * (the format's -32 is never needed), int8 scales 0..127 of an fp16 d. */
void qc_quant_row_Q6_K(const float *src, void *dst, int64_t n)
{
	uint8_t *p = dst;
	for (int64_t ib = 0; ib < n / QC_QK_K; ib++, src += QC_QK_K, p += sizeof(struct qc_block_Q6_K)) {
		struct qc_block_Q6_K b;
		float need[16], nmax = 0.0f;
		uint8_t q[QC_QK_K];
		for (int s = 0; s < 16; s++) {
			float a[LANES];
			for (int j = 0; j < LANES; j++)
				a[j] = 0.0f;
			for (int l = 0; l < 16; l += LANES)
				for (int j = 0; j < LANES; j++) {
					const float v = fabsf(src[16 * s + l + j]);
					a[j] = v > a[j] ? v : a[j];
				}
			for (int j = 1; j < LANES; j++)
				a[0] = a[j] > a[0] ? a[j] : a[0];
			need[s] = a[0] / 31.0f;
			nmax = need[s] > nmax ? need[s] : nmax;
		}
		b.d = fp16_up(nmax / 127.0f);
		const float d = qc_fp16_to_f32(b.d);
		for (int s = 0; s < 16; s++) {
			const int sc = ceil_steps(need[s], d, 127);
			b.scales[s] = (int8_t)sc;
			const float dl = d * (float)sc;
			const float inv = dl > 0.0f ? 1.0f / dl : 0.0f;
			const float *xs = src + 16 * s;
			int32_t qi[16];
			for (int l = 0; l < 16; l++) {
				/* x/dl in -31..31 up to rounding; + 32.5 keeps it positive, so
				 * truncation rounds to nearest; clamped in float as in kq_encode */
				float v = xs[l] * inv + 32.5f;
				v = v > 0.0f ? v : 0.0f;
				v = v < 63.0f ? v : 63.0f;
				qi[l] = (int32_t)v;
			}
			for (int l = 0; l < 16; l++)
				q[16 * s + l] = (uint8_t)qi[l];
		}
		/* element 128h + 32k + l: low nibble k/2 of ql[64h + 32(k%2) + l], high
		 * 2 bits at 2k of qh[32h + l] */
		for (int h = 0; h < 2; h++) {
			const uint8_t *q0 = q + 128 * h, *q1 = q0 + 32, *q2 = q0 + 64, *q3 = q0 + 96;
			for (int l = 0; l < 32; l++) {
				b.ql[64 * h + l] = (uint8_t)((q0[l] & 0xf) | (q2[l] & 0xf) << 4);
				b.ql[64 * h + 32 + l] = (uint8_t)((q1[l] & 0xf) | (q3[l] & 0xf) << 4);
				b.qh[32 * h + l] = (uint8_t)(q0[l] >> 4 | (q1[l] >> 4) << 2 | (q2[l] >> 4) << 4 |
							     (q3[l] >> 4) << 6);
			}
		}
		memcpy(p, &b, sizeof b);
	}
}
