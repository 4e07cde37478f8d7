/* marlin_gemm.c — C reference of runtime/cuda/kernels/marlin_gemm.cu (see marlin_gemm.h).
 *
 * Dequantizes W from the packed bytes with the element -> byte formulas written
 * out in docs/layout-marlin.md §"Where element (n, k) lives" (the packer in
 * quant/layout_marlin.c goes the other way, from lane slots to elements, so the
 * two are independent), then a plain matmul. marlin_i6 is read the same way from
 * its own section of that page (weight_i6). Non-goals: speed.
 */
#include "marlin_gemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp16.h"
#include "layout_marlin.h"

int qc_marlin_gemm_check(const struct qc_marlin_gemm_args *a, struct qc_err *err)
{
	if (!qc_marlin_is(a->layout) || !qc_type_valid((uint32_t)a->type) ||
	    qc_marlin_layout_for(a->type) != a->layout)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "marlin_gemm: layout %s does not hold encoding id %d", qc_layout_name(a->layout),
				  (int)a->type);
	int64_t stripe = qc_marlin_stripe(a->layout), kb = qc_type_get(a->type)->block_elems;
	uint64_t row;
	if (a->m < 1 || a->k < 32 || a->k % 32 || a->n < stripe || a->n % stripe || a->m > (1 << 24) ||
	    a->k > (1 << 24) || a->n > (1 << 24) || qc_marlin_row_bytes(a->layout, a->type, a->k, &row))
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "marlin_gemm: shape m=%lld n=%lld k=%lld not supported (%s of %s needs k %% %lld == 0, "
				  "n %% %lld == 0)",
				  (long long)a->m, (long long)a->n, (long long)a->k, qc_layout_name(a->layout),
				  qc_type_get(a->type)->name, (long long)(kb > 32 ? kb : 32), (long long)stripe);
	if (!a->a || !a->w)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "marlin_gemm: NULL input");
	if (a->tiles && (a->expert || !a->n_tiles || !a->seg_end || !a->rows || !a->n_sorted || a->max_tiles < 1 ||
			 (a->group_rows != 16 && a->group_rows != 32 && a->group_rows != 64 && a->group_rows != 128)))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "marlin_gemm: grouped rows need n_tiles, seg_end, rows, n_sorted, max_tiles >= 1, group_rows 16, "
				  "32, 64 or 128 and no expert (group_rows %lld)", (long long)a->group_rows);
	if (a->n_parts < 0 || a->n_parts > QC_MARLIN_MAX_PARTS || (a->n_parts && (a->expert || a->tiles)))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "marlin_gemm: %d output parts (at most %d, not with experts or grouped rows)", a->n_parts,
				  QC_MARLIN_MAX_PARTS);
	for (int i = 0; i < a->n_parts; i++) {
		const int64_t c0 = a->part_col0[i], end = i + 1 < a->n_parts ? a->part_col0[i + 1] : a->n;
		if (c0 <= (i ? a->part_col0[i - 1] : 0) || c0 >= end || c0 % 8 || !a->part_c[i] ||
		    (uintptr_t)a->part_c[i] % 8 || a->part_ldc[i] < end - c0 || a->part_ldc[i] % 2)
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
					  "marlin_gemm: output part %d (columns %lld.., row stride %lld) is not ascending "
					  "inside (0, n = %lld), a multiple of 8, or its output is NULL, misaligned or narrower",
					  i, (long long)c0, (long long)a->part_ldc[i], (long long)a->n);
	}
	if ((a->expert || a->tiles) && a->mat_stride < (uint64_t)a->n * row)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "marlin_gemm: mat_stride %llu is shorter than a slice",
				  (unsigned long long)a->mat_stride);
	return QC_OK;
}

/* marlin_i6 (q6_K): element (n, k) from docs/layout-marlin.md §marlin_i6. Per stripe
 * a 1536-byte unit per 32 k (tiles 2g, 2g+1 of low nibbles placed as marlin_i4's,
 * then the high bits), the int8 scales at CB = G·1536, the fp16 d at DB = CB + G·128. */
static float weight_i6(const struct qc_marlin_gemm_args *a, uint64_t row, const uint8_t *w, int64_t n, int64_t k)
{
	const int64_t S = 64, G = a->k / 32;
	int64_t nt = n / S, nn = n % S, j = nn / 8, r = nn % 8;
	int64_t kt = k / 16, kk = k % 16, reg = kk / 8, c = (kk % 8) / 2, second = kk % 2;
	int64_t lane = 4 * r + c, wd = j / 2, p = 2 * (j % 2) + reg + 4 * second;
	int64_t byte = p / 2, half = p % 2, m = 2 * (wd % 2) + half;
	uint64_t stripe = (uint64_t)nt * row * (uint64_t)S, unit = stripe + (uint64_t)(k / 32) * 1536;
	uint64_t cb = stripe + (uint64_t)G * 1536, db = cb + (uint64_t)G * 128;
	uint8_t lo = w[unit + 512 * (uint64_t)(kt % 2) + 16 * (uint64_t)lane + 4 * (uint64_t)wd + (uint64_t)byte];
	uint8_t hi = w[unit + 1024 + 16 * (uint64_t)lane + 4 * (uint64_t)(2 * (kt % 2) + wd / 2) + (uint64_t)byte];
	int q = ((lo >> (4 * half)) & 15) | ((hi >> (2 * m)) & 3) << 4;
	int8_t sc = (int8_t)w[cb + (uint64_t)(k / 32) * 128 + 16 * (uint64_t)r + 8 * (uint64_t)(kt % 2) + (uint64_t)j];
	uint16_t d;
	memcpy(&d, w + db + (uint64_t)(k / 256) * 128 + 16 * (uint64_t)r + 2 * (uint64_t)j, 2);
	return (qc_fp16_to_f32(d) * (float)sc) * (float)(q - 32); /* ggml's order: d·sc exact, one rounding */
}

/* value of element (n, k), from the documented byte positions */
static float weight(const struct qc_marlin_gemm_args *a, uint64_t row, const uint8_t *w, int64_t n, int64_t k)
{
	if (a->layout == QC_LAYOUT_MARLIN_I6)
		return weight_i6(a, row, w, n, k);
	const int bits = qc_marlin_bits(a->layout);
	const bool zp = qc_marlin_has_offsets(a->layout);
	int64_t S = bits == 4 ? 64 : 32, KT = a->k / 16, G = a->k / 32;
	int64_t nt = n / S, nn = n % S, j = nn / 8, r = nn % 8;
	int64_t kt = k / 16, kk = k % 16, reg = kk / 8, c = (kk % 8) / 2, second = kk % 2;
	int64_t lane = 4 * r + c;
	uint64_t codes = (uint64_t)KT * 512, stripe = row * (uint64_t)S; /* codes, scales[, offsets, headers] */
	uint64_t tile = (uint64_t)nt * stripe + (uint64_t)kt * 512 + (uint64_t)lane * 16;
	uint64_t sc = (uint64_t)nt * stripe + codes + 2 * (uint64_t)((k / 32) * S + (S / 8) * r + j);
	uint16_t d, o;
	memcpy(&d, w + sc, 2);
	float q;
	if (bits == 4) {
		int64_t p = 2 * (j % 2) + reg + 4 * second; /* nibble in word j/2 */
		uint8_t b = w[tile + 4 * (uint64_t)(j / 2) + (uint64_t)p / 2];
		q = (float)((b >> (4 * (p % 2))) & 15);
	} else {
		q = (float)(int8_t)w[tile + 4 * (uint64_t)j + 2 * (uint64_t)reg + (uint64_t)second];
	}
	if (zp) {
		memcpy(&o, w + sc + (uint64_t)(G * S) * 2, 2); /* offsets follow the scales */
		return (float)((double)q * qc_fp16_to_f32(d) + qc_fp16_to_f32(o));
	}
	if (bits == 4) /* marlin_i4: q4_0's codes are stored unsigned, centred on 8 */
		q -= 8.0f;
	return qc_fp16_to_f32(d) * q; /* exact: 11-bit scale times a code of at most 8 bits */
}

/* x[0 .. k) rounded in place to integer codes of `bits` (8 or 16) in blocks of 32
 * (see QC_MARLIN_PREC_XQ8_F64); x = d q in double, exactly */
static void round_xq(const float *x, double *xd, int64_t k, int bits)
{
	const float qmax = bits == 8 ? 127.0f : 32767.0f;
	for (int64_t b = 0; b + 32 <= k; b += 32) {
		float amax = 0.0f;
		for (int j = 0; j < 32; j++)
			amax = fmaxf(amax, fabsf(x[b + j]));
		const float d = bits == 8 ? qc_fp16_to_f32(qc_f32_to_fp16(amax / 127.0f)) : amax / 32767.0f;
		const float id = amax != 0.0f ? qmax / amax : 0.0f;
		for (int j = 0; j < 32; j++)
			xd[b + j] = (double)d * (double)rintf(x[b + j] * id);
	}
}

int qc_marlin_gemm_ref(const struct qc_marlin_gemm_args *a, enum qc_marlin_prec prec, double *out,
		       struct qc_err *err)
{
	int rc = qc_marlin_gemm_check(a, err);
	if (rc)
		return rc;
	float *w = malloc((size_t)(a->n * a->k) * sizeof(float));
	float *x = malloc((size_t)a->k * sizeof(float));
	double *xd = malloc((size_t)a->k * sizeof(double)); /* the XQ modes' rounded x */
	if (!w || !x || !xd) {
		free(w);
		free(x);
		free(xd);
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "marlin_gemm_ref: out of memory");
	}
	const uint16_t *ah = a->a;
	uint64_t row; /* the layout's bytes per row: a stripe is S of them */
	QC_ASSERT(qc_marlin_row_bytes(a->layout, a->type, a->k, &row) == QC_OK); /* checked above */
	int64_t have = -1; /* slice now decoded in w */
	for (int64_t m = 0; m < a->m; m++) {
		int64_t e = a->expert ? a->expert[m] : 0;
		for (int64_t n = 0; e != have && n < a->n; n++)
			for (int64_t k = 0; k < a->k; k++) {
				float v = weight(a, row, (const uint8_t *)a->w + (uint64_t)e * a->mat_stride, n, k);
				w[n * a->k + k] = prec == QC_MARLIN_PREC_F16 ? qc_fp16_to_f32(qc_f32_to_fp16(v)) : v;
			}
		have = e;
		for (int64_t k = 0; k < a->k; k++)
			x[k] = qc_fp16_to_f32(ah[m * a->k + k]);
		const int xq = prec == QC_MARLIN_PREC_XQ8_F64 || prec == QC_MARLIN_PREC_XQ8_F32 ? 8
			       : prec == QC_MARLIN_PREC_XQ16_F64 || prec == QC_MARLIN_PREC_XQ16_F32 ? 16 : 0;
		if (xq)
			round_xq(x, xd, a->k, xq);
		for (int64_t n = 0; n < a->n; n++) {
			const float *wr = w + n * a->k;
			if (xq) {
				const bool f32 = prec == QC_MARLIN_PREC_XQ8_F32 || prec == QC_MARLIN_PREC_XQ16_F32;
				double sd = 0;
				float sf = 0;
				for (int64_t k = 0; k < a->k; k++) {
					sd += xd[k] * (double)wr[k];
					sf += (float)xd[k] * wr[k];
				}
				out[m * a->n + n] = f32 ? sf : sd;
			} else if (prec == QC_MARLIN_PREC_F16) {
				float s = 0; /* fp16 products are exact in float; the sum rounds as a GPU's would */
				for (int64_t k = 0; k < a->k; k++)
					s += x[k] * wr[k];
				out[m * a->n + n] = s;
			} else {
				double s = 0;
				for (int64_t k = 0; k < a->k; k++)
					s += (double)x[k] * (double)wr[k];
				out[m * a->n + n] = s;
			}
		}
	}
	free(w);
	free(x);
	free(xd);
	return QC_OK;
}
