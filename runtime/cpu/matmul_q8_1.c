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
 * The AVX2 clone is the same code compiled for AVX2/FMA (fmaf is one rounding either way).
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

static ucodes_fn find_ucodes(enum qc_type t)
{
	static const struct { enum qc_type type; ucodes_fn fn; } tab[] = {
		{QC_TYPE_Q4_1, ucodes_q4_1},
		{QC_TYPE_Q5_1, ucodes_q5_1},
	};
	for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
		if (tab[i].type == t)
			return tab[i].fn;
	return NULL;
}

bool qc_matmul_q81_kernel(enum qc_type t)
{
	return find_ucodes(t) != NULL;
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
__attribute__((target("avx2,fma"))) static float dot_q81_avx2(ucodes_fn uc, const uint8_t *wr,
							      int64_t nb, const int8_t *xq,
							      const double *xqd, const float *xs81)
{
	return dot_q81_body(uc, wr, nb, xq, xqd, xs81);
}
#endif

void qc_matmul_rows_q81(struct qc_matmul *mm, int64_t r0, int64_t r1)
{
	const struct qc_mat *w = mm->w;
	const ucodes_fn uc = find_ucodes(w->type);
	const int64_t nb = w->n_in / 32;
	float (*dot)(ucodes_fn, const uint8_t *, int64_t, const int8_t *, const double *,
		     const float *) = dot_q81_generic;
#ifdef QC_X86
	if (mm->avx2)
		dot = dot_q81_avx2;
#endif
	QC_ASSERT(uc != NULL);
	for (int64_t r = r0; r < r1; r++) {
		const uint8_t *wr = qc_mat_row(w, mm->e, r);
		for (int64_t t = 0; t < mm->n_tok; t++)
			mm->y[t * mm->ldy + r] = dot(uc, wr, nb, mm->xq + t * w->n_in, mm->xqd + t * nb,
						     mm->xs81 + t * nb);
	}
}
