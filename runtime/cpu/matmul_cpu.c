/* matmul_cpu.c — y = W x on the CPU: the job, its dispatch, and the kernels' lifetime.
 *
 * Owns: qc_matmul_new/free (buffers; CPU features pick the SIMD clones once),
 * qc_matmul_prepare[_group] (rounds the activations once, chooses the kernel; a
 * group is several matrices over the same x) and qc_matmul_rows (runs it on a
 * range of the job's rows, part by part). Five kernels, chosen per job from the
 * weight type and enum qc_act_round:
 *  - float (f32/f16 weights, float lanes): matmul_float.c;
 *  - int8 (q8_0 / q4_0 / q5_0 weights x q8_0 activation codes, QC_ACT_ROUND_GGML), exact
 *    integer block sums summed in double: matmul_int8.c;
 *  - q8_1 (q4_1 / q5_1 weights x q8_1 activation codes, QC_ACT_ROUND_GGML), ggml's
 *    own float order, bit for bit: matmul_q8_1.c;
 *  - K-quant (q4_K / q5_K / q6_K weights x q8_K activation codes, QC_ACT_ROUND_GGML),
 *    exact integer super-block sums summed in double: matmul_kq.c;
 *  - reference (every other case), decoded rows dotted in double: matmul_ref.c; it also
 *    runs W8A8 FP8 (f8_a8), whose activations are first rounded to e4m3 (the products of
 *    two e4m3 values times two scales, summed in double).
 * Activation rounding (ggml's x86 quantize_row_q8_*): matmul_round.c. SIMD clones do
 * the same IEEE operations as the portable code, bit for bit (matmul_cpu.h's invariant).
 */
#include "matmul_cpu_int.h"

#include <stdlib.h>

#ifdef QC_X86
#include <cpuid.h>
#endif

/* ---- jobs ------------------------------------------------------------------ */

bool qc_matmul_groupable(const struct qc_mat *a, const struct qc_mat *b)
{
	/* W8A8 matrices round x once for the group: only with one activation scale
	   (Q, K and V calibrated on the same input usually have it) */
	if (a->type == b->type && qc_types[a->type].family == QC_FAMILY_W8A8 && a->data && b->data &&
	    qc_matmul_w8a8_scale(a, 0) != qc_matmul_w8a8_scale(b, 0))
		return false;
	return a->type == b->type && a->n_in == b->n_in && !a->act_perm && !b->act_perm;
}

void qc_matmul_plan_group(struct qc_matmul *mm, int n, const struct qc_mat *const *w, int64_t e,
			  const float *x, int64_t n_tok, float *const *y, const int64_t *ldy)
{
	QC_ASSERT(n >= 1 && n <= QC_MATMUL_MAX_PARTS);
	const struct qc_mat *w0 = w[0];
	const struct int8_type *i8 = mm->ar == QC_ACT_ROUND_GGML ? qc_matmul_find_int8(w0->type) : NULL;

	mm->n_rows = 0;
	for (int i = 0; i < n; i++) {
		QC_ASSERT(i == 0 || qc_matmul_groupable(w0, w[i]));
		mm->parts[i] = (struct mm_part){.w = w[i], .y = y[i], .ldy = ldy[i], .r_base = mm->n_rows};
		mm->n_rows += w[i]->n_out;
	}
	mm->n_parts = n;
	mm->e = e;
	mm->n_tok = n_tok;
	mm->i8 = i8;
	mm->pack = i8 && mm->avx2 && i8->pack_simd ? i8->pack_simd : qc_matmul_pack_generic;
	mm->dot16 = i8 && mm->vnni && n_tok < DOT16_MAX_TOK ? i8->dot16_vnni : NULL;
	const bool q81 = mm->ar == QC_ACT_ROUND_GGML && qc_matmul_q81_kernel(w0->type);
	const bool kq = mm->ar == QC_ACT_ROUND_GGML && qc_matmul_kq_kernel(w0->type);
	const bool rounded = qc_matmul_act_rounded(mm, w0->type);
	mm->x = x;
	mm->codes = i8 != NULL || q81 || kq;
	mm->xa = rounded ? mm->xr : x;
	mm->q81 = rounded && pairs_q8_1(w0->type);
	mm->kind = qc_matmul_float_kernel(w0->type) ? MM_FLOAT
		   : i8				     ? MM_INT8
		   : q81 && mm->q81		     ? MM_Q81
		   : kq && rounded		     ? MM_KQ
						     : MM_REF;
}

void qc_matmul_round(struct qc_matmul *mm, int slot, int64_t t0, int64_t t1)
{
	const struct qc_mat *w0 = mm->parts[0].w;
	const int64_t n = w0->n_in;
	if (mm->xa == mm->xr)
		qc_matmul_round_tokens(mm, w0->type, mm->x, n, t0, t1, mm->codes,
				       mm->qbuf + (size_t)slot * (size_t)(mm->max_in * 8 + 64));
	for (int64_t i = t0 * n; mm->kind == MM_REF && i < t1 * n; i++)
		mm->xd[i] = (double)mm->xa[i];
}

void qc_matmul_prepare_group(struct qc_matmul *mm, int n, const struct qc_mat *const *w, int64_t e,
			     const float *x, int64_t n_tok, float *const *y, const int64_t *ldy)
{
	qc_matmul_plan_group(mm, n, w, e, x, n_tok, y, ldy);
	qc_matmul_round(mm, 0, 0, n_tok);
}

void qc_matmul_prepare(struct qc_matmul *mm, const struct qc_mat *w, int64_t e, const float *x,
		       int64_t n_tok, float *y, int64_t ldy)
{
	qc_matmul_prepare_group(mm, 1, &w, e, x, n_tok, &y, &ldy);
}

int64_t qc_matmul_job_rows(const struct qc_matmul *mm)
{
	return mm->n_rows;
}

void qc_matmul_rows(struct qc_matmul *mm, int slot, int64_t r0, int64_t r1)
{
	struct slot *s = &mm->slots[slot];
	for (int i = 0; i < mm->n_parts; i++) {
		const struct mm_part *p = &mm->parts[i];
		const int64_t lo = (r0 > p->r_base ? r0 : p->r_base) - p->r_base;
		const int64_t hi = (r1 < p->r_base + p->w->n_out ? r1 : p->r_base + p->w->n_out) - p->r_base;
		if (lo >= hi)
			continue;
		if (mm->kind == MM_FLOAT)
			qc_matmul_rows_float(mm, p, s, lo, hi);
		else if (mm->kind == MM_INT8)
			qc_matmul_rows_int8(mm, p, s, lo, hi);
		else if (mm->kind == MM_Q81)
			qc_matmul_rows_q81(mm, p, lo, hi);
		else if (mm->kind == MM_KQ)
			qc_matmul_rows_kq(mm, p, s, lo, hi);
		else
			qc_matmul_rows_ref(mm, p, s, lo, hi);
	}
}

/* ---- lifetime -------------------------------------------------------------- */

static bool cpu_has(bool avx512)
{
#ifdef QC_X86
	unsigned int eax, ebx, ecx = 0, edx;
	const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !f16c)
		return false;
	return !avx512 || (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
			   __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
			   __builtin_cpu_supports("avx512vnni"));
#else
	(void)avx512;
	return false;
#endif
}

void qc_matmul_free(struct qc_matmul *mm)
{
	if (!mm)
		return;
	for (int k = 0; mm->slots && k < mm->n_slots; k++) {
		free(mm->slots[k].ftile);
		free(mm->slots[k].lanes);
		free(mm->slots[k].rowd);
		free(mm->slots[k].pk);
		free(mm->slots[k].pkd);
		free(mm->slots[k].codes);
	}
	free(mm->slots);
	free(mm->xr);
	free(mm->xd);
	free(mm->sdelta);
	free(mm->xs81);
	free(mm->xq);
	free(mm->xqd);
	free(mm->xs);
	free(mm->xb16);
	free(mm->qbuf);
	free(mm);
}

int qc_matmul_new(int64_t max_in, int64_t max_tok, int n_slots, enum qc_act_round ar,
		  struct qc_matmul **out, struct qc_err *err)
{
	*out = NULL;
	if (max_in < 1 || max_tok < 1 || n_slots < 1)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "matmul sizes must be positive");
	struct qc_matmul *mm = calloc(1, sizeof *mm);
	if (!mm)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	const size_t in = (size_t)max_in, tok = (size_t)max_tok, nb = in / 32 + 1;
	mm->ar = ar;
	mm->max_in = max_in;
	mm->max_tok = max_tok;
	mm->n_slots = n_slots;
	mm->slots = calloc((size_t)n_slots, sizeof *mm->slots);
	mm->xr = malloc(tok * in * sizeof(float));
	mm->xd = malloc(tok * in * sizeof(double));
	mm->sdelta = malloc(tok * nb * sizeof(double));
	mm->xs81 = malloc(tok * nb * sizeof(float));
	mm->xq = malloc(tok * in);
	mm->xqd = malloc(tok * nb * sizeof(double));
	mm->xs = malloc(tok * nb * sizeof(int32_t));
	mm->xb16 = malloc(tok * (in / 16 + 1) * sizeof(int16_t));
	mm->qbuf = malloc((size_t)n_slots * (in * 8 + 64));
	bool ok = mm->slots && mm->xr && mm->xd && mm->sdelta && mm->xs81 && mm->xq && mm->xqd && mm->xs && mm->xb16 &&
		  mm->qbuf;
	for (int k = 0; ok && k < n_slots; k++) {
		struct slot *s = &mm->slots[k];
		s->ftile = malloc((size_t)FR * in * sizeof(float));
		s->lanes = malloc((tok + FT) * FR * 16 * sizeof(float));
		s->rowd = malloc(in * sizeof(double));
		s->pk = malloc(nb * IR * 32);
		s->pkd = malloc(nb * IR * sizeof(double));
		s->codes = malloc(32);
		ok = s->ftile && s->lanes && s->rowd && s->pk && s->pkd && s->codes;
	}
	if (!ok) {
		qc_matmul_free(mm);
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1,
				  "out of memory for matmul buffers (%lld x %lld)", (long long)max_tok,
				  (long long)max_in);
	}
	qc_matmul_int8_init();
	mm->ftile = qc_matmul_ftile_generic;
	mm->itile = qc_matmul_itile_generic;
	mm->dot_dd = qc_matmul_dot_dd_generic;
	mm->dot_fd = qc_matmul_dot_fd_generic;
#ifdef QC_X86
	if (cpu_has(false)) {
		mm->avx2 = true;
		mm->ftile = qc_matmul_ftile_avx2;
		mm->dot_dd = qc_matmul_dot_dd_avx2;
		mm->dot_fd = qc_matmul_dot_fd_avx2;
		mm->itile = qc_matmul_itile_avx2;
	}
	if (cpu_has(true)) {
		mm->vnni = true;
		mm->ftile = qc_matmul_ftile_avx2vl;
		mm->itile = qc_matmul_itile_vnni;
	}
#endif
	*out = mm;
	return QC_OK;
}
