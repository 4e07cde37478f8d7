/* matmul_ref.c — the CPU matmul's reference kernel: every weight type, double sums.
 *
 * Used for every (type, rounding) the float and int8 kernels do not take: each row
 * decoded to float by the type table's dequant_row, dotted in double from exact
 * products in 16 lanes; q4_1/q5_1 add the q8_1 block-sum term (block_min * sdelta).
 * The AVX2 clones are the same code compiled for AVX2 (the same IEEE result).
 */
#include "matmul_cpu_int.h"

/* Matmul dot of float values held as doubles: the products are exact (24-bit
 * mantissas), summed in 16 lanes (lane k takes i = k mod 16, plus the tail in
 * lane 0) combined by a fixed tree; fused or not, the same IEEE result. */
typedef double v4d __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));

static inline __attribute__((always_inline)) double dot_dd_body(const double *a, const double *b,
								int64_t n)
{
	v4d s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		v4d a0, a1, a2, a3, b0, b1, b2, b3;
		memcpy(&a0, a + i, sizeof a0);
		memcpy(&a1, a + i + 4, sizeof a1);
		memcpy(&a2, a + i + 8, sizeof a2);
		memcpy(&a3, a + i + 12, sizeof a3);
		memcpy(&b0, b + i, sizeof b0);
		memcpy(&b1, b + i + 4, sizeof b1);
		memcpy(&b2, b + i + 8, sizeof b2);
		memcpy(&b3, b + i + 12, sizeof b3);
		s0 += a0 * b0;
		s1 += a1 * b1;
		s2 += a2 * b2;
		s3 += a3 * b3;
	}
	double t = 0.0;
	for (; i < n; i++)
		t += a[i] * b[i];
	const v4d s = (s0 + s1) + (s2 + s3);
	return ((s[0] + t) + s[1]) + (s[2] + s[3]);
}

/* The same sums with a given as floats (widened exactly in the loop). */
static inline __attribute__((always_inline)) double dot_fd_body(const float *a, const double *b,
								int64_t n)
{
	v4d s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		v4f a0, a1, a2, a3;
		v4d b0, b1, b2, b3;
		prefetch_ahead(a + i, 16384);
		memcpy(&a0, a + i, sizeof a0);
		memcpy(&a1, a + i + 4, sizeof a1);
		memcpy(&a2, a + i + 8, sizeof a2);
		memcpy(&a3, a + i + 12, sizeof a3);
		memcpy(&b0, b + i, sizeof b0);
		memcpy(&b1, b + i + 4, sizeof b1);
		memcpy(&b2, b + i + 8, sizeof b2);
		memcpy(&b3, b + i + 12, sizeof b3);
		s0 += __builtin_convertvector(a0, v4d) * b0;
		s1 += __builtin_convertvector(a1, v4d) * b1;
		s2 += __builtin_convertvector(a2, v4d) * b2;
		s3 += __builtin_convertvector(a3, v4d) * b3;
	}
	double t = 0.0;
	for (; i < n; i++)
		t += (double)a[i] * b[i];
	const v4d s = (s0 + s1) + (s2 + s3);
	return ((s[0] + t) + s[1]) + (s[2] + s[3]);
}

double qc_matmul_dot_dd_generic(const double *a, const double *b, int64_t n)
{
	return dot_dd_body(a, b, n);
}

double qc_matmul_dot_fd_generic(const float *a, const double *b, int64_t n)
{
	return dot_fd_body(a, b, n);
}

#ifdef QC_X86
__attribute__((target("avx2,fma"))) double qc_matmul_dot_dd_avx2(const double *a, const double *b,
									 int64_t n)
{
	return dot_dd_body(a, b, n);
}

__attribute__((target("avx2,fma"))) double qc_matmul_dot_fd_avx2(const float *a, const double *b,
									 int64_t n)
{
	return dot_fd_body(a, b, n);
}
#endif

void qc_matmul_rows_ref(struct qc_matmul *mm, const struct mm_part *p, struct slot *s, int64_t r0,
			int64_t r1)
{
	const struct qc_mat *w = p->w;
	const struct qc_type_traits *tt = &qc_types[w->type];
	const int64_t nb = w->n_in / 32, n = w->n_in;
	const bool widen = mm->n_tok > 1;
	float *row = s->ftile;

	for (int64_t r = r0; r < r1; r++) {
		const uint8_t *wr = qc_mat_row(w, mm->e, r);
		tt->dequant_row(wr, row, n);
		for (int64_t i = 0; widen && i < n; i++)
			s->rowd[i] = (double)row[i];
		for (int64_t t = 0; t < mm->n_tok; t++) {
			const double *xt = mm->xd + t * n;
			double acc = widen ? mm->dot_dd(s->rowd, xt, n) : mm->dot_fd(row, xt, n);
			for (int64_t b = 0; mm->q81 && b < nb; b++)
				acc += (double)block_min(tt, wr, b) * mm->sdelta[t * nb + b];
			p->y[t * p->ldy + r] = (float)acc;
		}
	}
}
