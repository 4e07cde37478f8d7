/* matmul_q8_1.c — the CPU matmul's q8_1 kernel: q4_1 / q5_1 weights x q8_1 activation codes.
 *
 * With QC_ACT_ROUND_GGML these weights pair with q8_1 activations (d, s = fp16(d * sum q)
 * and 32 int8 codes per block, matmul_round.c), and each dot is computed in float in
 * the order of ggml's x86 AVX2 ggml_vec_dot_q{4,5}_1_q8_1, which is what llama.cpp's
 * portable x86 build runs: per block, 8 lanes of 4-code integer sums, each lane
 * acc = fma(d_w * d_x, sum, acc); then hsum_float_8(acc) + the float running sum of
 * m_w * s_x (a product of two binary16 values: exact in float). Same bits as ggml, not
 * merely close: on a trained model with massive activations (SmolLM2, docs/accuracy.md)
 * a last-bit difference here flips a q8 code of a later layer and moves logits by 0.1
 * or more, so a double-sum kernel cannot agree with llama.cpp within 1e-3 there.
 * The AVX2 version (rows_q81_avx2) computes the same integer lane sums with byte
 * multiply-adds and the same fmas, so it gives the generic kernel's bits.
 * Reference: ggml-cpu-quants.c ggml_vec_dot_q4_1_q8_1, ggml_vec_dot_q5_1_q8_1, hsum_float_8.
 */
#include "matmul_cpu_int.h"

#include <math.h>

/* Unsigned codes (0..15 / 0..31) of block b of a weight row; d and m returned. */
typedef void (*ucodes_fn)(const uint8_t *row, int64_t b, uint8_t *codes, float *d, float *m);

static void ucodes_q4_1(const uint8_t *row, int64_t b, uint8_t *codes, float *d, float *m)
{
	const struct qc_block_Q4_1 *blk = (const struct qc_block_Q4_1 *)(const void *)row + b;
	for (int j = 0; j < 16; j++) {
		codes[j] = blk->qs[j] & 15;
		codes[j + 16] = blk->qs[j] >> 4;
	}
	*d = qc_fp16_to_f32(blk->d);
	*m = qc_fp16_to_f32(blk->m);
}

static void ucodes_q5_1(const uint8_t *row, int64_t b, uint8_t *codes, float *d, float *m)
{
	const struct qc_block_Q5_1 *blk = (const struct qc_block_Q5_1 *)(const void *)row + b;
	uint32_t qh;
	memcpy(&qh, blk->qh, sizeof qh);
	for (int j = 0; j < 16; j++) {
		codes[j] = (uint8_t)((blk->qs[j] & 15) | (((qh >> j) & 1u) << 4));
		codes[j + 16] = (uint8_t)((blk->qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
	}
	*d = qc_fp16_to_f32(blk->d);
	*m = qc_fp16_to_f32(blk->m);
}

static inline __attribute__((always_inline)) float dot_q81_body(ucodes_fn uc, const uint8_t *wr,
								int64_t nb, const int8_t *xq,
								const double *xqd, const float *xs81)
{
	float acc[8] = {0}, summs = 0.0f;
	uint8_t c[32];
	for (int64_t b = 0; b < nb; b++) {
		float dw, mw;
		uc(wr, b, c, &dw, &mw);
		summs += mw * xs81[b];
		const float d = dw * (float)xqd[b];
		const int8_t *q = xq + b * 32;
		for (int l = 0; l < 8; l++) {
			const int32_t s = c[4 * l] * q[4 * l] + c[4 * l + 1] * q[4 * l + 1] +
					  c[4 * l + 2] * q[4 * l + 2] + c[4 * l + 3] * q[4 * l + 3];
			acc[l] = fmaf(d, (float)s, acc[l]);
		}
	}
	/* hsum_float_8: high half + low half, then (0 + 2) + (1 + 3) */
	float h[4];
	for (int j = 0; j < 4; j++)
		h[j] = acc[j + 4] + acc[j];
	return ((h[0] + h[2]) + (h[1] + h[3])) + summs;
}

static float dot_q81_generic(ucodes_fn uc, const uint8_t *wr, int64_t nb, const int8_t *xq,
			     const double *xqd, const float *xs81)
{
	return dot_q81_body(uc, wr, nb, xq, xqd, xs81);
}

#ifdef QC_X86
/* The same sums with AVX2: a block's 32 codes in one register (q4_1: the low
 * nibbles of the 16 bytes, then the high ones, as ucodes_q4_1 orders them; q5_1:
 * ucodes_q5_1's bytes), times the 32 activation codes by unsigned x signed byte
 * products summed in pairs (at most 2 x 31 x 127: no int16 saturation), the pairs
 * summed again: lane l is the integer sum of codes 4l..4l+3, exactly the scalar
 * kernel's s, then acc_l = fma(d, s, acc_l) in the same order. So the bits equal
 * dot_q81_body's (and ggml's). The weight block is decoded once for up to
 * Q81_TOK tokens. */
#define Q81_TOK 4

/* d and m by the F16C conversion (exact, as qc_fp16_to_f32; the AVX2 kernels run
 * only where cpu_has found F16C): the software one's branches were a fifth of
 * this kernel's decode time. */
__attribute__((target("avx2,fma,f16c"))) static inline __m256i codes_q4_1_avx2(const uint8_t *row, int64_t b,
									      float *d, float *m)
{
	const struct qc_block_Q4_1 *blk = (const struct qc_block_Q4_1 *)(const void *)row + b;
	const __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)blk->qs);
	const __m128i lo = _mm_and_si128(raw, _mm_set1_epi8(15));
	const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(15));
	*d = _cvtsh_ss(blk->d);
	*m = _cvtsh_ss(blk->m);
	return _mm256_set_m128i(hi, lo);
}

/* Any type's 32 codes through its scalar ucodes, as one register. */
#define CODES_VIA(name, uc)                                                                                      \
	__attribute__((target("avx2,fma,f16c"))) static inline __m256i name(const uint8_t *row, int64_t b, float *d, \
								       float *m)                              \
	{                                                                                                        \
		uint8_t c[32];                                                                                   \
		uc(row, b, c, d, m);                                                                             \
		return _mm256_loadu_si256((const __m256i *)(const void *)c);                                     \
	}
CODES_VIA(codes_q5_1_avx2, ucodes_q5_1)

typedef __m256i (*codes256_fn)(const uint8_t *row, int64_t b, float *d, float *m);

/* Row r's dots with tokens t0 .. t0 + nt - 1 into y. Inlined with nt a constant
 * (Q81_TOK, or 1 for the tail) so the accumulators live in registers: with a
 * variable count they went through the stack every block (a store-to-load
 * round trip per block, a fifth of a decode step's matmul time). Each token's
 * operations and their order do not depend on nt. */
__attribute__((target("avx2,fma,f16c"))) static inline __attribute__((always_inline)) void
q81_tokens(struct qc_matmul *mm, const struct mm_part *p, codes256_fn codes, const uint8_t *wr, int64_t nb,
	   int64_t r, int64_t t0, int nt)
{
	const __m256i ones = _mm256_set1_epi16(1);
	const int64_t n_in = p->w->n_in;
	__m256 acc[Q81_TOK];
	float summs[Q81_TOK];
#pragma GCC unroll 4
	for (int u = 0; u < nt; u++) {
		acc[u] = _mm256_setzero_ps();
		summs[u] = 0.0f;
	}
	for (int64_t b = 0; b < nb; b++) {
		float dw, mw;
		const __m256i cw = codes(wr, b, &dw, &mw);
#pragma GCC unroll 4
		for (int u = 0; u < nt; u++) {
			const int64_t t = t0 + u;
			summs[u] += mw * mm->xs81[t * nb + b];
			const float d = dw * (float)mm->xqd[t * nb + b];
			const __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(mm->xq + t * n_in + b * 32));
			const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(cw, q), ones);
			acc[u] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc[u]);
		}
	}
#pragma GCC unroll 4
	for (int u = 0; u < nt; u++) {
		float a[8], h[4];
		_mm256_storeu_ps(a, acc[u]);
		for (int j = 0; j < 4; j++) /* hsum_float_8, as dot_q81_body */
			h[j] = a[j + 4] + a[j];
		p->y[(t0 + u) * p->ldy + r] = ((h[0] + h[2]) + (h[1] + h[3])) + summs[u];
	}
}

__attribute__((target("avx2,fma,f16c"))) static inline __attribute__((always_inline)) void
rows_q81_avx2(struct qc_matmul *mm, const struct mm_part *p, codes256_fn codes, int64_t r0, int64_t r1)
{
	const int64_t nb = p->w->n_in / 32;
	for (int64_t r = r0; r < r1; r++) {
		const uint8_t *wr = qc_mat_row(p->w, mm->e, r);
		int64_t t0 = 0;
		for (; t0 + Q81_TOK <= mm->n_tok; t0 += Q81_TOK)
			q81_tokens(mm, p, codes, wr, nb, r, t0, Q81_TOK);
		for (; t0 < mm->n_tok; t0++)
			q81_tokens(mm, p, codes, wr, nb, r, t0, 1);
	}
}
/* One clone per type, each with its codes function inlined. */
__attribute__((target("avx2,fma,f16c"))) static void rows_q4_1_avx2(struct qc_matmul *mm, const struct mm_part *p,
									int64_t r0, int64_t r1)
{
	rows_q81_avx2(mm, p, codes_q4_1_avx2, r0, r1);
}

__attribute__((target("avx2,fma,f16c"))) static void rows_q5_1_avx2(struct qc_matmul *mm, const struct mm_part *p,
									int64_t r0, int64_t r1)
{
	rows_q81_avx2(mm, p, codes_q5_1_avx2, r0, r1);
}
#define ROWS_AVX2(f) f
#else
#define ROWS_AVX2(f) NULL
#endif

/* The q8_1 weight types: scalar codes, and the AVX2 rows kernel (x86). */
static const struct q81_type {
	enum qc_type type;
	ucodes_fn ucodes;
	void (*rows_avx2)(struct qc_matmul *mm, const struct mm_part *p, int64_t r0, int64_t r1);
} q81_types[] = {
	{QC_TYPE_Q4_1, ucodes_q4_1, ROWS_AVX2(rows_q4_1_avx2)},
	{QC_TYPE_Q5_1, ucodes_q5_1, ROWS_AVX2(rows_q5_1_avx2)},
};

static const struct q81_type *find_q81(enum qc_type t)
{
	for (size_t i = 0; i < sizeof q81_types / sizeof q81_types[0]; i++)
		if (q81_types[i].type == t)
			return &q81_types[i];
	return NULL;
}

bool qc_matmul_q81_kernel(enum qc_type t)
{
	return find_q81(t) != NULL;
}

void qc_matmul_rows_q81(struct qc_matmul *mm, const struct mm_part *p, int64_t r0, int64_t r1)
{
	const struct qc_mat *w = p->w;
	const struct q81_type *qt = find_q81(w->type);
	QC_ASSERT(qt != NULL);
	const ucodes_fn uc = qt->ucodes;
	const int64_t nb = w->n_in / 32;
	float (*dot)(ucodes_fn, const uint8_t *, int64_t, const int8_t *, const double *,
		     const float *) = dot_q81_generic;
	if (mm->avx2 && qt->rows_avx2) {
		qt->rows_avx2(mm, p, r0, r1);
		return;
	}
	for (int64_t r = r0; r < r1; r++) {
		const uint8_t *wr = qc_mat_row(w, mm->e, r);
		for (int64_t t = 0; t < mm->n_tok; t++)
			p->y[t * p->ldy + r] = dot(uc, wr, nb, mm->xq + t * w->n_in, mm->xqd + t * nb,
						     mm->xs81 + t * nb);
	}
}
