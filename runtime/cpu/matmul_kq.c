/* matmul_kq.c — the CPU matmul's K-quant kernel: q4_K / q5_K / q6_K weights x q8_K codes.
 *
 * Used with QC_ACT_ROUND_GGML, where these weights pair with q8_K activations (per 256
 * values a float d_x and int8 codes, matmul_round.c). A super-block's weights are
 * d * s_g * q - dm * m_g with unsigned codes q and, per 16 values g, integer scales
 * s_g and mins m_g (q4_K / q5_K: s, m of the 32-value sub-block, dm = dmin; q6_K: its
 * signed 6-bit code q - 32 as s_g * q - 32 s_g, dm = d). So a super-block's dot is
 *   IS * (d * d_x) - IM * (dm * d_x),  IS = sum_g s_g sum_{i in g} q_i x_i,
 *   IM = sum_g m_g sum_{i in g} x_i,
 * with IS and IM exact integers (|IS| < 2^31 for every type here) and d * d_x, dm * d_x
 * exact in double; each super-block's value is formed in double and added to a double
 * in super-block order, as the int8 kernel does with its blocks. A row's codes and
 * scales are decoded once per row and job into the slot, then dotted with every
 * token. The AVX2 decoders give the same codes, and the AVX2 dot the same integers
 * (unsigned x signed byte products in pairs, at most 2 x 63 x 127: no int16
 * saturation; times the group's scale in int32), so the bits equal the portable
 * kernel's.
 * Not ggml's float order (ggml_vec_dot_q4_K_q8_K sums in float lanes): the exact sums
 * differ from it by float rounding, as the int8 kernel's do.
 * Reference: ggml-cpu quants.c ggml_vec_dot_q{4,5,6}_K_q8_K, dequant_k.c (layouts).
 */
#include "matmul_cpu_int.h"

/* Super-block blk decoded: q (256) unsigned codes, s (128) the scale s_g of each code
 * pair (s_g 8 times), m (16) the mins m_g (|m_g| <= 32 x 128), d (2) d and dm. */
typedef void (*kq_decode_fn)(const uint8_t *blk, uint8_t *q, int16_t *s, int16_t *m, double *d);

/* 6-bit scale and min of sub-block j (0..7) of a q4_K / q5_K scales field (dequant_k.c). */
static void scale_min_k4(const uint8_t sc[12], int j, int *scale, int *min)
{
	if (j < 4) {
		*scale = sc[j] & 63;
		*min = sc[j + 4] & 63;
	} else {
		*scale = (sc[j + 4] & 0xf) | (sc[j - 4] >> 6) << 4;
		*min = (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
	}
}

/* Pair scales and per-16 mins of a q4_K / q5_K super-block, d, dm. */
static void head_k4(const uint8_t sc[12], uint16_t d16, uint16_t dmin16, int16_t *s, int16_t *m, double *d)
{
	for (int j = 0; j < 8; j++) {
		int a, b;
		scale_min_k4(sc, j, &a, &b);
		for (int p = 0; p < 16; p++)
			s[16 * j + p] = (int16_t)a;
		m[2 * j] = m[2 * j + 1] = (int16_t)b;
	}
	d[0] = (double)qc_fp16_to_f32(d16);
	d[1] = (double)qc_fp16_to_f32(dmin16);
}

/* q6_K: signed scales; code q - 32 as s_g q - 32 s_g, so m_g = 32 s_g and dm = d. */
static void head_q6_k(const int8_t sc[16], uint16_t d16, int16_t *s, int16_t *m, double *d)
{
	for (int g = 0; g < 16; g++) {
		for (int p = 0; p < 8; p++)
			s[8 * g + p] = sc[g];
		m[g] = (int16_t)(32 * sc[g]);
	}
	d[0] = d[1] = (double)qc_fp16_to_f32(d16);
}

static void decode_q4_k(const uint8_t *blk, uint8_t *q, int16_t *s, int16_t *m, double *d)
{
	const struct qc_block_Q4_K *b = (const void *)blk;
	for (int j = 0; j < 8; j++)
		for (int l = 0; l < 32; l++)
			q[32 * j + l] = (b->qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xf;
	head_k4(b->scales, b->d, b->dmin, s, m, d);
}

static void decode_q5_k(const uint8_t *blk, uint8_t *q, int16_t *s, int16_t *m, double *d)
{
	const struct qc_block_Q5_K *b = (const void *)blk;
	for (int j = 0; j < 8; j++)
		for (int l = 0; l < 32; l++)
			q[32 * j + l] = (uint8_t)(((b->qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xf) |
						  ((b->qh[l] >> j) & 1) << 4);
	head_k4(b->scales, b->d, b->dmin, s, m, d);
}

/* q6_K element e: half h, quarter k, index l (dequant_k.c's layout). */
static void decode_q6_k(const uint8_t *blk, uint8_t *q, int16_t *s, int16_t *m, double *d)
{
	const struct qc_block_Q6_K *b = (const void *)blk;
	for (int h = 0; h < 2; h++)
		for (int k = 0; k < 4; k++)
			for (int l = 0; l < 32; l++) {
				const int lo = (b->ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0xf;
				const int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
				q[128 * h + 32 * k + l] = (uint8_t)(lo | hi << 4);
			}
	head_q6_k(b->scales, b->d, s, m, d);
}

#ifdef QC_X86
/* The 12 scale bytes of a q4_K / q5_K super-block as 8 scales then 8 mins
 * (ggml's kmask unpacking, without branches). */
static inline void kmask_unpack(const uint8_t sc[12], uint8_t v[16])
{
	uint32_t u[4];
	memcpy(u, sc, 12);
	u[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
	const uint32_t mins_lo = u[1] & 0x3f3f3f3fu;
	u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
	u[2] = mins_lo;
	u[0] &= 0x3f3f3f3fu;
	memcpy(v, u, 16);
}

/* head_k4 without branches (ggml's kmask unpacking of the 12 bytes: scales in
 * bytes 0..7, mins in 8..15 of u) and with F16C's exact conversions. */
__attribute__((target("avx2,f16c"))) static inline void head_k4_avx2(const uint8_t sc[12], uint16_t d16,
								     uint16_t dmin16, int16_t *s, int16_t *m,
								     double *d)
{
	uint8_t v[16];
	kmask_unpack(sc, v);
	for (int j = 0; j < 8; j++) {
		_mm256_storeu_si256((__m256i *)(void *)(s + 16 * j), _mm256_set1_epi16(v[j]));
		m[2 * j] = m[2 * j + 1] = v[8 + j];
	}
	d[0] = (double)_cvtsh_ss(d16);
	d[1] = (double)_cvtsh_ss(dmin16);
}

/* The same codes with AVX2 (byte masks after 16-bit shifts: the bits a shift
 * carries across a byte boundary are masked off). */
__attribute__((target("avx2,f16c"))) static inline __attribute__((always_inline)) void decode_q4_k_avx2(const uint8_t *blk, uint8_t *q, int16_t *s,
							      int16_t *m, double *d)
{
	const struct qc_block_Q4_K *b = (const void *)blk;
	const __m256i m4 = _mm256_set1_epi8(0xf);
	for (int c = 0; c < 4; c++) {
		const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(b->qs + 32 * c));
		_mm256_storeu_si256((__m256i *)(void *)(q + 64 * c), _mm256_and_si256(v, m4));
		_mm256_storeu_si256((__m256i *)(void *)(q + 64 * c + 32), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
	}
	head_k4_avx2(b->scales, b->d, b->dmin, s, m, d);
}

__attribute__((target("avx2,f16c"))) static inline __attribute__((always_inline)) void decode_q6_k_avx2(const uint8_t *blk, uint8_t *q, int16_t *s,
							      int16_t *m, double *d)
{
	const struct qc_block_Q6_K *b = (const void *)blk;
	const __m256i m4 = _mm256_set1_epi8(0xf), m2 = _mm256_set1_epi8(0x30);
	for (int h = 0; h < 2; h++) {
		const __m256i lo0 = _mm256_loadu_si256((const __m256i *)(const void *)(b->ql + 64 * h));
		const __m256i lo1 = _mm256_loadu_si256((const __m256i *)(const void *)(b->ql + 64 * h + 32));
		const __m256i hi = _mm256_loadu_si256((const __m256i *)(const void *)(b->qh + 32 * h));
		uint8_t *o = q + 128 * h;
		_mm256_storeu_si256((__m256i *)(void *)o,
				    _mm256_or_si256(_mm256_and_si256(lo0, m4), _mm256_and_si256(_mm256_slli_epi16(hi, 4), m2)));
		_mm256_storeu_si256((__m256i *)(void *)(o + 32),
				    _mm256_or_si256(_mm256_and_si256(lo1, m4), _mm256_and_si256(_mm256_slli_epi16(hi, 2), m2)));
		_mm256_storeu_si256((__m256i *)(void *)(o + 64),
				    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo0, 4), m4), _mm256_and_si256(hi, m2)));
		_mm256_storeu_si256((__m256i *)(void *)(o + 96),
				    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo1, 4), m4),
						    _mm256_and_si256(_mm256_srli_epi16(hi, 2), m2)));
	}
	for (int g = 0; g < 16; g++) {
		_mm_storeu_si128((__m128i *)(void *)(s + 8 * g), _mm_set1_epi16(b->scales[g]));
		m[g] = (int16_t)(32 * b->scales[g]);
	}
	d[0] = d[1] = (double)_cvtsh_ss(b->d);
}
#endif


/* IS and IM of one super-block: sum over code pairs of s * (q x + q' x'), and sum
 * over 16-code groups of m_g * (the group's activation code sum). */
static inline __attribute__((always_inline)) void dot_sb_generic(const uint8_t *q, const int16_t *s, const int16_t *m, const int8_t *x,
			   const int16_t *xb, int32_t *is, int32_t *im)
{
	int32_t a = 0, b = 0;
	for (int p = 0; p < 128; p++)
		a += s[p] * (q[2 * p] * x[2 * p] + q[2 * p + 1] * x[2 * p + 1]);
	for (int g = 0; g < 16; g++)
		b += m[g] * xb[g];
	*is = a;
	*im = b;
}

typedef void (*dot_sb_fn)(const uint8_t *q, const int16_t *s, const int16_t *m, const int8_t *x,
			  const int16_t *xb, int32_t *is, int32_t *im);

/* Decode and dot in one, from the block in place (one token), or NULL. */
typedef void (*dot_blk_fn)(const uint8_t *blk, const int8_t *x, const int16_t *xb, int32_t *is, int32_t *im,
			   double *d);

#ifdef QC_X86
/* The same integers with AVX2: per 32 codes, maddubs gives the 16 pair sums, madd
 * with the pair scales sums them in pairs to int32; the mins in one madd (integer
 * adds: any order gives the same sums). */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void
dot_sb_avx2(const uint8_t *q, const int16_t *s, const int16_t *m, const int8_t *x, const int16_t *xb, int32_t *is,
	    int32_t *im)
{
	__m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (int v = 0; v < 8; v++) {
		const __m256i qv = _mm256_loadu_si256((const __m256i *)(const void *)(q + 32 * v));
		const __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(x + 32 * v));
		const __m256i sv = _mm256_loadu_si256((const __m256i *)(const void *)(s + 16 * v));
		acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(qv, xv), sv));
	}
	const __m256i mm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)m),
					     _mm256_loadu_si256((const __m256i *)(const void *)xb));
	/* lanes 0-3: IS halves, 4-7: IM halves, after one horizontal add */
	const __m256i h = _mm256_hadd_epi32(acc, mm);
	__m128i t = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
	t = _mm_hadd_epi32(t, t);
	*is = _mm_cvtsi128_si32(t);
	*im = _mm_extract_epi32(t, 1);
}
#endif

#ifdef QC_X86
/* q4_K decode and dot_sb_avx2 in one (one token): the codes, scales and mins stay in
 * registers; the same integers (sub-block j's codes against the same 32 activation
 * codes, times the same scale; the mins each twice against the per-16 sums). */
__attribute__((target("avx2,f16c"))) static inline __attribute__((always_inline)) void
dot1_q4_k_avx2(const uint8_t *blk, const int8_t *x, const int16_t *xb, int32_t *is, int32_t *im, double *d)
{
	const struct qc_block_Q4_K *b = (const void *)blk;
	const __m256i m4 = _mm256_set1_epi8(0xf);
	uint8_t v[16];
	kmask_unpack(b->scales, v);
	__m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 4
	for (int c = 0; c < 4; c++) {
		const __m256i qv = _mm256_loadu_si256((const __m256i *)(const void *)(b->qs + 32 * c));
		const __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(x + 64 * c));
		const __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(x + 64 * c + 32));
		const __m256i p0 = _mm256_maddubs_epi16(_mm256_and_si256(qv, m4), x0);
		const __m256i p1 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(qv, 4), m4), x1);
		acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p0, _mm256_set1_epi16(v[2 * c])));
		acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p1, _mm256_set1_epi16(v[2 * c + 1])));
	}
	const __m128i mn = _mm_loadl_epi64((const __m128i *)(const void *)(v + 8));
	const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));
	const __m256i mm = _mm256_madd_epi16(m16, _mm256_loadu_si256((const __m256i *)(const void *)xb));
	const __m256i h = _mm256_hadd_epi32(acc, mm);
	__m128i t = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
	t = _mm_hadd_epi32(t, t);
	*is = _mm_cvtsi128_si32(t);
	*im = _mm_extract_epi32(t, 1);
	d[0] = (double)_cvtsh_ss(b->d);
	d[1] = (double)_cvtsh_ss(b->dmin);
}

/* The same for q6_K: decode_q6_k_avx2's codes, each 32 against their two groups'
 * scales (bytes 2v, 2v + 1 of the scales spread to 8 int16 each), mins 32 s_g. */
__attribute__((target("avx2,f16c"))) static inline __attribute__((always_inline)) void
dot1_q6_k_avx2(const uint8_t *blk, const int8_t *x, const int16_t *xb, int32_t *is, int32_t *im, double *d)
{
	const struct qc_block_Q6_K *b = (const void *)blk;
	const __m256i m4 = _mm256_set1_epi8(0xf), m2 = _mm256_set1_epi8(0x30);
	const __m128i sc = _mm_loadu_si128((const __m128i *)(const void *)b->scales);
	const __m128i pick = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
	__m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 2
	for (int h = 0; h < 2; h++) {
		const __m256i lo0 = _mm256_loadu_si256((const __m256i *)(const void *)(b->ql + 64 * h));
		const __m256i lo1 = _mm256_loadu_si256((const __m256i *)(const void *)(b->ql + 64 * h + 32));
		const __m256i hi = _mm256_loadu_si256((const __m256i *)(const void *)(b->qh + 32 * h));
		__m256i q[4];
		q[0] = _mm256_or_si256(_mm256_and_si256(lo0, m4), _mm256_and_si256(_mm256_slli_epi16(hi, 4), m2));
		q[1] = _mm256_or_si256(_mm256_and_si256(lo1, m4), _mm256_and_si256(_mm256_slli_epi16(hi, 2), m2));
		q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo0, 4), m4), _mm256_and_si256(hi, m2));
		q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo1, 4), m4),
				       _mm256_and_si256(_mm256_srli_epi16(hi, 2), m2));
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++) {
			const int v = 4 * h + k; /* codes 32v .. 32v + 31: groups 2v, 2v + 1 */
			const __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(x + 32 * v));
			const __m256i sv = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, _mm_add_epi8(pick, _mm_set1_epi8((char)(2 * v)))));
			acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], xv), sv));
		}
	}
	const __m256i m16 = _mm256_slli_epi16(_mm256_cvtepi8_epi16(sc), 5); /* 32 s_g, |.| <= 4096 */
	const __m256i mm = _mm256_madd_epi16(m16, _mm256_loadu_si256((const __m256i *)(const void *)xb));
	const __m256i hs = _mm256_hadd_epi32(acc, mm);
	__m128i t = _mm_add_epi32(_mm256_castsi256_si128(hs), _mm256_extracti128_si256(hs, 1));
	t = _mm_hadd_epi32(t, t);
	*is = _mm_cvtsi128_si32(t);
	*im = _mm_extract_epi32(t, 1);
	d[0] = d[1] = (double)_cvtsh_ss(b->d);
}
#endif

/* Rows [r0, r1) of part p: each row decoded once into the slot (the int8 kernel's
 * buffers: pk holds 16 n bytes, pkd 16 n / 32 doubles), then dotted with every token.
 * Inlined with its dot so the double sum stays in a register. */
static inline __attribute__((always_inline)) void rows_kq_body(struct qc_matmul *mm, const struct mm_part *p,
								 struct slot *s, int64_t r0, int64_t r1,
								 kq_decode_fn decode, dot_sb_fn dot, dot_blk_fn dot1)
{
	const struct qc_mat *w = p->w;
	const int64_t n = w->n_in, nb = n / 256, nb32 = n / 32, bb = (int64_t)qc_types[w->type].block_bytes;
	uint8_t *q = s->pk;
	int16_t *sc = (int16_t *)(void *)(s->pk + n);
	int16_t *m = (int16_t *)(void *)(s->pk + 2 * n);
	double *d = s->pkd;

	for (int64_t r = r0; r < r1; r++) {
		const uint8_t *wr = qc_mat_row(w, mm->e, r);
		if (mm->n_tok == 1) { /* decode: each super-block dotted while its codes are in L1 */
			const int8_t *x = mm->xq;
			double acc = 0.0;
			for (int64_t b = 0; b < nb; b++) {
				int32_t is, im;
				for (int64_t o = 0; o < bb; o += 64)
					prefetch_ahead(wr + b * bb + o, 4096);
				if (dot1) {
					dot1(wr + b * bb, x + 256 * b, mm->xb16 + 16 * b, &is, &im, d);
				} else {
					decode(wr + b * bb, q, sc, m, d);
					dot(q, sc, m, x + 256 * b, mm->xb16 + 16 * b, &is, &im);
				}
				acc += (double)is * (d[0] * mm->xqd[b]) - (double)im * (d[1] * mm->xqd[b]);
			}
			p->y[r] = (float)acc;
			continue;
		}
		for (int64_t b = 0; b < nb; b++) {
			for (int64_t o = 0; o < bb; o += 64) /* see prefetch_ahead */
				prefetch_ahead(wr + b * bb + o, 4096);
			decode(wr + b * bb, q + 256 * b, sc + 128 * b, m + 16 * b, d + 2 * b);
		}
		for (int64_t t = 0; t < mm->n_tok; t++) {
			const int8_t *x = mm->xq + t * n;
			const double *dx = mm->xqd + t * nb32;
			const int16_t *xb = mm->xb16 + t * (n / 16);
			double acc = 0.0;
			for (int64_t b = 0; b < nb; b++) {
				int32_t is, im;
				dot(q + 256 * b, sc + 128 * b, m + 16 * b, x + 256 * b, xb + 16 * b, &is, &im);
				acc += (double)is * (d[2 * b] * dx[b]) - (double)im * (d[2 * b + 1] * dx[b]);
			}
			p->y[t * p->ldy + r] = (float)acc;
		}
	}
}

static void rows_kq_generic(struct qc_matmul *mm, const struct mm_part *p, struct slot *s, int64_t r0, int64_t r1,
			    kq_decode_fn decode)
{
	rows_kq_body(mm, p, s, r0, r1, decode, dot_sb_generic, NULL);
}

#ifdef QC_X86
/* AVX2 without FMA: (double)is * (d * dx) is not always exact, so a compiler that
 * contracts (clang's default) must not fuse it with the sum, or the bits would differ
 * from the portable build's. One clone per type with its decoder inlined. */
__attribute__((target("avx2,f16c"))) static void rows_q4_k_avx2(struct qc_matmul *mm, const struct mm_part *p,
								 struct slot *s, int64_t r0, int64_t r1)
{
	rows_kq_body(mm, p, s, r0, r1, decode_q4_k_avx2, dot_sb_avx2, dot1_q4_k_avx2);
}

__attribute__((target("avx2,f16c"))) static void rows_q6_k_avx2(struct qc_matmul *mm, const struct mm_part *p,
								 struct slot *s, int64_t r0, int64_t r1)
{
	rows_kq_body(mm, p, s, r0, r1, decode_q6_k_avx2, dot_sb_avx2, dot1_q6_k_avx2);
}

/* Types without an AVX2 decoder: the portable one through a pointer, the AVX2 dot. */
__attribute__((target("avx2"))) static void rows_kq_avx2(struct qc_matmul *mm, const struct mm_part *p,
							 struct slot *s, int64_t r0, int64_t r1, kq_decode_fn decode)
{
	rows_kq_body(mm, p, s, r0, r1, decode, dot_sb_avx2, NULL);
}
#define KQ_AVX2(f) f
#else
#define KQ_AVX2(f) NULL
#endif

static const struct kq_type {
	enum qc_type type;
	kq_decode_fn decode;          /* portable */
	/* AVX2 rows with the decoder inlined (the same codes), or NULL */
	void (*rows_avx2)(struct qc_matmul *mm, const struct mm_part *p, struct slot *s, int64_t r0, int64_t r1);
} kq_types[] = {
	{QC_TYPE_Q4_K, decode_q4_k, KQ_AVX2(rows_q4_k_avx2)},
	{QC_TYPE_Q5_K, decode_q5_k, NULL},
	{QC_TYPE_Q6_K, decode_q6_k, KQ_AVX2(rows_q6_k_avx2)},
};

static const struct kq_type *find_kq(enum qc_type t)
{
	for (size_t i = 0; i < sizeof kq_types / sizeof kq_types[0]; i++)
		if (kq_types[i].type == t)
			return &kq_types[i];
	return NULL;
}

bool qc_matmul_kq_kernel(enum qc_type t)
{
	return find_kq(t) != NULL;
}

void qc_matmul_rows_kq(struct qc_matmul *mm, const struct mm_part *p, struct slot *s, int64_t r0, int64_t r1)
{
	const struct kq_type *kt = find_kq(p->w->type);
	QC_ASSERT(kt != NULL);
#ifdef QC_X86
	if (mm->avx2) {
		if (kt->rows_avx2)
			kt->rows_avx2(mm, p, s, r0, r1);
		else
			rows_kq_avx2(mm, p, s, r0, r1, kt->decode);
		return;
	}
#endif
	rows_kq_generic(mm, p, s, r0, r1, kt->decode);
}
