/* matmul_round.c — the CPU matmul's activation rounding, as ggml's x86 CPU build rounds.
 *
 * With QC_ACT_ROUND_GGML, activations are rounded once per matmul to the type ggml
 * pairs with the weights (q8_0 / q8_1 for 32-element blocks, q8_K for 256, the
 * weight's own type for floats), keeping the int8 codes for the int8 kernel and the
 * q8_1 block-sum correction for the reference kernel. The AVX2 clone does the same
 * IEEE operations per element.
 * Reference: ggml-cpu quantize_row_q8_0 / q8_1 (x86), quantize_row_q8_K_ref.
 * W8A8 weights (f8_a8) round their activations to e4m3 under every mode: that is the
 * checkpoint's own arithmetic, not an emulation of ggml (quant/act_fp8.h).
 */
#include "matmul_cpu_int.h"

#include <math.h>

#include "act_fp8.h"
#include "dequant_hfq.h"

/* ggml quantize_row_q8_K_ref: per 256 values, d = max / -127 with max the
 * signed value of largest magnitude, q = min(127, rint(x / d)). Kept here until
 * qtype.def grows a q8_K encoder. With codes (K-quant kernel): the codes, d per
 * 256 (dk) and the sum of each 16 codes (b16, ggml's bsums) too. */
static void round_q8_k(const float *x, float *y, int8_t *codes, double *dk, int16_t *b16, int64_t n)
{
	for (int64_t b = 0; b < n; b += 256) {
		float amax = 0.0f, max = 0.0f;
		for (int j = 0; j < 256; j++) {
			float ax = fabsf(x[b + j]);
			if (ax > amax) {
				amax = ax;
				max = x[b + j];
			}
		}
		if (amax == 0.0f) {
			memset(y + b, 0, 256 * sizeof *y);
			if (codes) {
				memset(codes + b, 0, 256);
				dk[b / 256] = 0.0;
				memset(b16 + b / 16, 0, 16 * sizeof *b16);
			}
			continue;
		}
		const float iscale = -127.0f / max;
		const float d = 1.0f / iscale;
		for (int j = 0; j < 256; j++) {
			long q = lrintf(iscale * x[b + j]);
			q = q < 127 ? q : 127;
			y[b + j] = d * (float)q;
			if (codes)
				codes[b + j] = (int8_t)q;
		}
		if (codes) {
			dk[b / 256] = (double)d;
			for (int g = 0; g < 16; g++) {
				int32_t s = 0;
				for (int j = 0; j < 16; j++)
					s += codes[b + 16 * g + j];
				b16[b / 16 + g] = (int16_t)s; /* |s| <= 16 x 127 */
			}
		}
	}
}

/* ggml's x86 quantize_row_q8_0 / q8_1 (AVX2 path, what llama.cpp's CPU build
 * runs): per 32 values id = 127 / amax, q = rint(x * id), d = fp16(amax / 127).
 * The reference encoder (qc_quant_row_Q8_0: id = 1 / d, roundf) picks a
 * different code now and then, which these random models amplify to 0.05
 * logits. With sdelta (q8_1) each block also gets s - d16 * sum q, where
 * s = fp16(d * sum q) with the unrounded float d, as ggml stores it (and s itself
 * in s81, for the q8_1 kernel); with
 * codes the int8 codes, their d16 and -128 * sum q are kept (int8 kernel). */
static void round_q8_x86(const float *x, float *y, double *sdelta, float *s81, int8_t *codes,
			 double *dcodes, int32_t *xs, int64_t n)
{
	for (int64_t b = 0; b < n; b += 32) {
		float amax = 0.0f;
		for (int j = 0; j < 32; j++)
			amax = fmaxf(amax, fabsf(x[b + j]));
		const float d32 = amax / 127.0f;
		const float d = qc_fp16_to_f32(qc_f32_to_fp16(d32));
		const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
		int32_t sum = 0;
		for (int j = 0; j < 32; j++) {
			const float q = rintf(x[b + j] * id);
			sum += (int32_t)q;
			y[b + j] = d * q;
			if (codes)
				codes[b + j] = (int8_t)q;
		}
		if (codes) {
			dcodes[b / 32] = d;
			xs[b / 32] = -128 * sum;
		}
		if (sdelta) {
			const float s = qc_fp16_to_f32(qc_f32_to_fp16(d32 * (float)sum));
			sdelta[b / 32] = (double)s - (double)d * (double)sum;
			s81[b / 32] = s;
		}
	}
}

#ifdef QC_X86
/* round_q8_x86 for the int8 kernel (codes, no sdelta) with the same IEEE
 * operations per element: |x| max (exact), x * id, round to nearest even. */
__attribute__((target("avx2,fma"))) static void round_q8_codes_avx2(const float *x, float *y,
								     int8_t *codes, double *dcodes,
								     int32_t *xs, int64_t n)
{
	const __m256 sign = _mm256_set1_ps(-0.0f);
	const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	for (int64_t b = 0; b < n; b += 32) {
		__m256 v[4], m;
		for (int j = 0; j < 4; j++)
			v[j] = _mm256_loadu_ps(x + b + 8 * j);
		m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
				  _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
		__m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
		h = _mm_max_ps(h, _mm_movehl_ps(h, h));
		h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
		const float amax = _mm_cvtss_f32(h);
		const float d = qc_fp16_to_f32(qc_f32_to_fp16(amax / 127.0f));
		const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
		__m256i qi[4], sum = _mm256_setzero_si256();
		for (int j = 0; j < 4; j++) {
			const __m256 q = _mm256_round_ps(_mm256_mul_ps(v[j], id),
							 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
			_mm256_storeu_ps(y + b + 8 * j, _mm256_mul_ps(_mm256_set1_ps(d), q));
			qi[j] = _mm256_cvtps_epi32(q);
			sum = _mm256_add_epi32(sum, qi[j]);
		}
		const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]),
						     _mm256_packs_epi32(qi[2], qi[3]));
		_mm256_storeu_si256((__m256i *)(void *)(codes + b), _mm256_permutevar8x32_epi32(p, order));
		__m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
		s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
		s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
		dcodes[b / 32] = d;
		xs[b / 32] = -128 * _mm_cvtsi128_si32(s4);
	}
}
#endif

/* The type ggml rounds activations to for weights of type wt under mm's rounding
 * mode, or QC_TYPE_COUNT when they stay as they are. */
static enum qc_type act_type(const struct qc_matmul *mm, enum qc_type wt)
{
	const struct qc_type_traits *tt = &qc_types[wt];
	if (mm->ar != QC_ACT_ROUND_GGML || wt == QC_TYPE_F32)
		return QC_TYPE_COUNT;
	if (tt->family == QC_FAMILY_FLOAT)
		return wt;
	if (tt->block_elems == 32)
		return QC_TYPE_Q8_0;
	if (tt->block_elems == 256)
		return QC_TYPE_Q8_K;
	return QC_TYPE_COUNT;
}

float qc_matmul_w8a8_scale(const struct qc_mat *w, int64_t e)
{
	struct qc_block_F8A8 b;
	memcpy(&b, qc_mat_row(w, e, 0), sizeof b);
	return qc_hfq_get_f32(b.a);
}

bool qc_matmul_act_rounded(const struct qc_matmul *mm, enum qc_type wt)
{
	if (qc_types[wt].family == QC_FAMILY_W8A8) /* the model's own scheme, under every mode */
		return true;
	const enum qc_type at = act_type(mm, wt);
	if (at == QC_TYPE_COUNT)
		return false;
	if (at != QC_TYPE_Q8_K && at != QC_TYPE_Q8_0 && !qc_types[at].quant_row) {
		QC_WARN_ONCE("no activation encoder for %s weights: float activations", qc_types[wt].name);
		return false;
	}
	return true;
}

void qc_matmul_round_tokens(struct qc_matmul *mm, enum qc_type wt, const float *x, int64_t n_in, int64_t t0,
			    int64_t t1, bool codes, uint8_t *qbuf)
{
	const enum qc_type at = act_type(mm, wt);
	if (qc_types[wt].family == QC_FAMILY_W8A8) {
		const float a = qc_matmul_w8a8_scale(mm->parts[0].w, mm->e);
		for (int64_t t = t0; t < t1; t++)
			qc_act_fp8_row(x + t * n_in, n_in, a, NULL, mm->xr + t * n_in);
		return;
	}
	for (int64_t t = t0; t < t1; t++) {
		const float *src = x + t * n_in;
		float *dst = mm->xr + t * n_in;
		const int64_t nb = n_in / 32;
		if (at == QC_TYPE_Q8_K) {
			round_q8_k(src, dst, codes ? mm->xq + t * n_in : NULL, mm->xqd + t * nb,
				   mm->xb16 + t * (n_in / 16), n_in);
#ifdef QC_X86
		} else if (at == QC_TYPE_Q8_0 && codes && mm->avx2 && !pairs_q8_1(wt)) {
			round_q8_codes_avx2(src, dst, mm->xq + t * n_in, mm->xqd + t * nb, mm->xs + t * nb,
					    n_in);
#endif
		} else if (at == QC_TYPE_Q8_0) {
			round_q8_x86(src, dst, pairs_q8_1(wt) ? mm->sdelta + t * nb : NULL,
				     mm->xs81 + t * nb, codes ? mm->xq + t * n_in : NULL, mm->xqd + t * nb,
				     mm->xs + t * nb, n_in);
		} else {
			qc_types[at].quant_row(src, qbuf, n_in);
			qc_types[at].dequant_row(qbuf, dst, n_in);
		}
	}
}
