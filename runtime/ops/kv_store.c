/* kv_store.c — reference of runtime/cuda/kernels/kv_store.cu: K/V rows to their
 * binary16 slots (round to nearest even), pool laid out as the CPU backend's;
 * and the fp8 (E4M3FN) store with one power-of-two scale per token and kv head,
 * K heads rotated by a Walsh-Hadamard transform first (the scheme and why: ops.h
 * qc_ref_kv_e4m3_exp and qc_ref_kv_rotate, docs/serve.md).
 * Reference: QuaRot (Ashkboos et al. 2024, arXiv:2404.00456) section 4 for
 * rotating K (and Q, so q . k is unchanged) before quantizing the cache. */
#include <math.h>
#include <string.h>

#include "fp16.h"
#include "ops.h"

void qc_ref_kv_store(const float *k, const float *v, const int32_t *slots, int64_t n_tok,
		     uint16_t *pool, int layer, int n_layer, int bt, int kv_dim)
{
	for (int64_t t = 0; t < n_tok; t++) {
		const int64_t b = slots[t] / bt, o = slots[t] % bt;
		uint16_t *kd = pool + (((b * n_layer + layer) * 2 + 0) * bt + o) * kv_dim;
		uint16_t *vd = pool + (((b * n_layer + layer) * 2 + 1) * bt + o) * kv_dim;
		for (int d = 0; d < kv_dim; d++) {
			kd[d] = qc_f32_to_fp16(k[t * kv_dim + d]);
			vd[d] = qc_f32_to_fp16(v[t * kv_dim + d]);
		}
	}
}

int8_t qc_ref_kv_e4m3_exp(const float *x, int hd)
{
	float amax = 0.0f;
	for (int d = 0; d < hd; d++) {
		const float a = fabsf(x[d]);
		if (!(a <= 3.4028235e38f)) /* NaN, inf: no scale can hold it; it encodes as NaN */
			continue;
		amax = a > amax ? a : amax;
	}
	if (amax == 0.0f)
		return 0;
	/* amax = f * 2^e2, f in [0.5, 1); 448 = 0.875 * 2^9: the smallest exp with
	 * amax <= 448 * 2^exp is e2 - 9 when f <= 0.875, else e2 - 8 */
	int e2;
	const float f = frexpf(amax, &e2);
	int e = f <= 0.875f ? e2 - 9 : e2 - 8;
	/* float's range bounds e to -158..120; below -128 a smaller exp only means
	 * values far under 448 (never saturation) */
	return (int8_t)(e < -128 ? -128 : e);
}

int qc_ref_kv_rot_block(int hd)
{
	const int n = hd & -hd;
	return n >= 16 ? n : 1;
}

void qc_ref_kv_rotate(float *x, int hd)
{
	const int n = qc_ref_kv_rot_block(hd);
	const float s = 1.0f / sqrtf((float)n);
	for (int b = 0; b < hd; b += n) {
		float *y = x + b;
		for (int len = 1; len < n; len <<= 1)
			for (int i = 0; i < n; i += 2 * len)
				for (int j = i; j < i + len; j++) {
					const float u = y[j], v = y[j + len];
					y[j] = u + v;
					y[j + len] = u - v;
				}
		for (int i = 0; i < n; i++)
			y[i] *= s;
	}
}

/* One head's codes and exponent. rot: K's Walsh-Hadamard first, on the head
 * divided by 2^e0 (e0: max |x| = f * 2^e0, f in [0.5, 1)), so the butterfly's
 * sums stay far from float's range and the result scales exactly with x. */
static void store_e4m3_head(const float *x, uint8_t *codes, int8_t *exp, int hd, enum qc_ref_kv_rot rot)
{
	float y[hd];
	int e0 = 0;
	memcpy(y, x, sizeof y);
	if (rot == QC_REF_KV_ROT_WHT) {
		float amax = 0.0f;
		for (int d = 0; d < hd; d++)
			amax = fabsf(y[d]) > amax ? fabsf(y[d]) : amax; /* NaN/inf: skipped, they stay NaN */
		if (amax > 0.0f && amax <= 3.4028235e38f)
			frexpf(amax, &e0);
		for (int d = 0; d < hd; d++)
			y[d] = ldexpf(y[d], -e0);
		qc_ref_kv_rotate(y, hd);
	}
	const int e1 = qc_ref_kv_e4m3_exp(y, hd);
	int e = e0 + e1;
	e = e < -128 ? -128 : e > 127 ? 127 : e;
	*exp = (int8_t)e;
	for (int d = 0; d < hd; d++)
		codes[d] = qc_f32_to_e4m3(ldexpf(y[d], e0 - e));
}

static void store_e4m3_row(const float *x, uint8_t *codes, int8_t *exps, int kv_dim, int hd,
			   enum qc_ref_kv_rot rot)
{
	for (int h = 0; h * hd < kv_dim; h++)
		store_e4m3_head(x + (int64_t)h * hd, codes + (int64_t)h * hd, exps + h, hd, rot);
}

void qc_ref_kv_store_e4m3(const float *k, const float *v, const int32_t *slots, int64_t n_tok,
			  uint8_t *codes, int8_t *exps, int layer, int n_layer, int bt, int kv_dim, int hd)
{
	const int n_kv = kv_dim / hd;
	for (int64_t t = 0; t < n_tok; t++) {
		const int64_t b = slots[t] / bt, o = slots[t] % bt;
		const int64_t rk = ((b * n_layer + layer) * 2 + 0) * bt + o, rv = rk + bt;
		store_e4m3_row(k + t * kv_dim, codes + rk * kv_dim, exps + rk * n_kv, kv_dim, hd, QC_REF_KV_ROT_WHT);
		store_e4m3_row(v + t * kv_dim, codes + rv * kv_dim, exps + rv * n_kv, kv_dim, hd, QC_REF_KV_ROT_NONE);
	}
}
