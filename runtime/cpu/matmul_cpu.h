/* matmul_cpu.h — y = W x on the CPU: activation rounding and the dot kernels.
 *
 * Owns: rounding a batch of activations once per matmul (qc_matmul_prepare) and
 * computing any range of output rows of it (qc_matmul_rows), tiled rows x tokens.
 * Invariant: every output y[t][r] is computed by the same sequence of IEEE
 * operations whatever the row range, the tile it lands in, the number of tokens
 * in the batch or the thread that runs it: splitting rows over threads, or a
 * token's decode versus the same token inside a prefill, changes no bit.
 * A job may hold several matrices of one type and width over the same activations
 * (Q, K, V; gate, up): rounded once, their rows numbered one after the other, so one
 * pool dispatch runs them all.
 * Non-goals: threads (the backend's pool calls qc_matmul_rows per range).
 */
#ifndef QC_MATMUL_CPU_H
#define QC_MATMUL_CPU_H

#include <stdint.h>

#include "backend.h"
#include "model.h"
#include "qc_err.h"

struct qc_matmul;

#define QC_MATMUL_MAX_PARTS 3 /* matrices of one job (Q, K, V) */

/* Buffers for matmuls of up to max_tok activation rows of up to max_in elements,
 * with n_slots scratch slots (one per thread). QC_OK, QC_ENOMEM or QC_EINVAL. */
int qc_matmul_new(int64_t max_in, int64_t max_tok, int n_slots, enum qc_act_round ar,
		  struct qc_matmul **out, struct qc_err *err);
void qc_matmul_free(struct qc_matmul *mm); /* accepts NULL */

/* Sets up y[t * ldy + r] = W_e[r] . x[t] for n_tok rows of x (w->n_in each):
 * rounds the activations as mm's enum qc_act_round says. x and y are borrowed
 * until the last qc_matmul_rows of this job; n_tok <= max_tok, w->n_in <= max_in. */
void qc_matmul_prepare(struct qc_matmul *mm, const struct qc_mat *w, int64_t e, const float *x,
		       int64_t n_tok, float *y, int64_t ldy);

/* Whether a and b can be one job (qc_matmul_prepare_group): the same type and
 * width, and no act-order permutation (each would gather x its own way). */
bool qc_matmul_groupable(const struct qc_mat *a, const struct qc_mat *b);

/* Sets up n (1..QC_MATMUL_MAX_PARTS) matmuls y[i][t * ldy[i] + r] = W_i,e[r] . x[t]
 * as one job: the activations are rounded once; job row R is row R of W_0 for R <
 * W_0->n_out, then W_1's rows, and so on. Every pair of w must be
 * qc_matmul_groupable (a bug otherwise: asserted). Borrows as qc_matmul_prepare. */
void qc_matmul_prepare_group(struct qc_matmul *mm, int n, const struct qc_mat *const *w, int64_t e,
			     const float *x, int64_t n_tok, float *const *y, const int64_t *ldy);

/* qc_matmul_prepare_group in two steps, so the rounding can be shared out: plan
 * (the kernel chosen, nothing rounded), then qc_matmul_round for every token, in
 * any split over distinct slots, before the first qc_matmul_rows. */
void qc_matmul_plan_group(struct qc_matmul *mm, int n, const struct qc_mat *const *w, int64_t e,
			  const float *x, int64_t n_tok, float *const *y, const int64_t *ldy);

/* Rounds tokens [t0, t1) of the planned job's activations, with scratch slot slot;
 * distinct slots may run concurrently on disjoint token ranges. */
void qc_matmul_round(struct qc_matmul *mm, int slot, int64_t t0, int64_t t1);

/* Rows of the prepared job (all its matrices). */
int64_t qc_matmul_job_rows(const struct qc_matmul *mm);

/* Job rows [r0, r1) of the prepared job, with scratch slot (0..n_slots-1);
 * distinct slots may run concurrently on disjoint row ranges. */
void qc_matmul_rows(struct qc_matmul *mm, int slot, int64_t r0, int64_t r1);

#endif
