/* backend_cuda_mm.c — one matmul of the CUDA backend: the layout table says which
 * kernel kind runs (qc_layout_kernel, quant/layout.c), matmul_dispatch.h gives the
 * kind's function for the weight's (layout, type); act-order weights get their
 * activations gathered first. This file holds no row-count rule of its own.
 * qc_cuda_be_mm_fused asks the kind what it fuses (qc_cuda_mm_kernels.fuse) and
 * runs the SwiGLU product or the residual add as kernels of their own where it
 * cannot: the same bits either way (silu.cuh, add.cu). qc_cuda_be_mm_multi runs
 * matrices on the same activations (Q, K, V; gate, up) in one launch where the
 * kind can (QC_MM_FUSE_MULTI) and their layouts agree, else one after the other.
 */
#include <stdio.h>

#include "backend_cuda_int.h"
#include "kernels/act_gather.h"
#include "kernels/add.h"
#include "kernels/silu_mul.h"

/* The kernel kind the layout table picks for this matmul. */
static enum qc_kernel_kind kind_of(const struct cu *c, const struct dmat *w, int64_t n_rows, bool experts)
{
	return qc_layout_kernel(w->layout, n_rows, experts, w->n_in, w->n_out, &c->env.mm.rows);
}

/* y (+)= W x, x = silu(x) * x2 when x2: the kind takes the fusions (checked by the callers) */
static int mm_run(struct cu *c, const struct dmat *w, const float *d_x, int64_t ldx, int32_t x_div,
		  const int32_t *d_expert, int64_t n_rows, float *d_y, int64_t ldy, const float *d_x2, bool acc,
		  struct qc_err *err)
{
	if (w->d_perm) { /* act-order: x gathered into the order of the weight's columns */
		if (n_rows * w->n_in > c->xperm_cap)
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "act_gather: %lld rows of %lld exceed the buffer",
					  (long long)n_rows, (long long)w->n_in);
		const struct qc_cuda_act_gather_args g = {d_x, ldx, x_div, d_expert, w->d_perm, w->perm_stride,
							  n_rows, w->n_in, c->d_xperm};
		int rc = qc_cuda_act_gather(&g, c->st, err);
		if (rc)
			return rc;
		d_x = c->d_xperm;
		ldx = w->n_in;
		x_div = 1;
	}
	struct qc_cuda_mm_args a = {
		.d_w = w->d_w, .type = w->type, .layout = w->layout, .n_in = w->n_in, .n_out = w->n_out,
		.row_bytes = w->row_bytes, .mat_stride = w->mat_stride, .d_x = d_x, .ldx = ldx,
		.x_div = x_div, .d_expert = d_expert, .n_mat = w->n_mat, .n_rows = n_rows, .d_y = d_y, .ldy = ldy,
		.d_ws = c->d_ws, .ws_bytes = c->ws_bytes, .blas = c->blas, .gemv_kt = c->env.mm.gemv_kt,
		.d_flags = c->d_flags, .n_flags = c->n_flags, .d_x2 = d_x2, .accumulate = acc,
	};
	qc_cuda_be_l2_hint(c, &w, 1, &a.l2);
	const struct qc_kernel_rows *r = &c->env.mm.rows;
	const enum qc_kernel_kind kind = kind_of(c, w, n_rows, d_expert != NULL);
	if (d_expert && n_rows > r->gemv_max_rows && kind == QC_KERNEL_GEMV)
		QC_WARN_ONCE("cuda: MoE experts in the %s layout (n_in %lld) run as per-row GEMV: the "
			     "grouped GEMMs read GGML layouts with n_in a multiple of 32 (moe_gemm.cu) and "
			     "the marlin layouts (marlin_moe.cu); prefill of this model is slow",
			     qc_layout_name(w->layout), (long long)w->n_in);
	const qc_cuda_mm_fn fn = (unsigned)kind < QC_KERNEL_COUNT ? w->k->run[kind] : NULL;
	if (!fn) /* make_dmat checked every kind the table names: a bug */
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "cuda: no %s kernel for %s %s",
				  qc_kernel_kind_name(kind), qc_layout_name(w->layout), qc_types[w->type].name);
	return fn(&a, c->st, err);
}

int qc_cuda_be_mm(struct cu *c, const struct dmat *w, const float *d_x, int64_t ldx, int32_t x_div,
		  const int32_t *d_expert, int64_t n_rows, float *d_y, int64_t ldy, struct qc_err *err)
{
	return mm_run(c, w, d_x, ldx, x_div, d_expert, n_rows, d_y, ldy, NULL, false, err);
}

int qc_cuda_be_mm_fused(struct cu *c, const struct dmat *w, float *d_x, const float *d_x2, int64_t ldx,
			int64_t n_rows, float *d_y, int64_t ldy, bool acc, float *d_tmp, struct qc_err *err)
{
	const unsigned have = qc_cuda_be_mm_fuses(c, w, n_rows);
	const bool f_silu = d_x2 && (have & QC_MM_FUSE_SILU), f_acc = acc && (have & QC_MM_FUSE_ACC);
	int rc;
	if (d_x2 && !f_silu) { /* x = silu(x) * x2 in place, then a plain matmul */
		const struct qc_cuda_silu_mul_args sm = {d_x, d_x2, d_x, n_rows * ldx};
		if ((rc = qc_cuda_silu_mul(&sm, c->st, err)))
			return rc;
	}
	if (!acc || f_acc)
		return mm_run(c, w, d_x, ldx, 1, NULL, n_rows, d_y, ldy, f_silu ? d_x2 : NULL, acc, err);
	/* y += through d_tmp and the add kernel */
	if ((rc = mm_run(c, w, d_x, ldx, 1, NULL, n_rows, d_tmp, ldy, f_silu ? d_x2 : NULL, false, err)))
		return rc;
	const struct qc_cuda_add_args ad = {d_y, d_tmp, n_rows * ldy, n_rows * ldy};
	return qc_cuda_add(&ad, c->st, err);
}

bool qc_cuda_be_mm_multi_can(const struct cu *c, const struct dmat *const *w, int n, int64_t n_rows, unsigned fuse)
{
	const enum qc_kernel_kind kind = kind_of(c, w[0], n_rows, false);
	const unsigned need = fuse | (n > 1 ? (unsigned)QC_MM_FUSE_MULTI : 0u);
	bool one = n >= 1 && n <= 1 + QC_CUDA_MM_MORE && (unsigned)kind < QC_KERNEL_COUNT &&
		   (w[0]->k->fuse[kind] & need) == need && !w[0]->d_perm;
	int64_t cols = w[0]->n_out;
	for (int i = 1; one && i < n; i++) {
		one = w[i]->layout == w[0]->layout && w[i]->type == w[0]->type && w[i]->n_in == w[0]->n_in &&
		      !w[i]->d_perm && kind_of(c, w[i], n_rows, false) == kind;
		cols += w[i]->n_out;
	}
	return one && w[0]->k->ws_bytes(w[0]->n_in, cols, n_rows, &c->env.mm) <= c->ws_bytes;
}

int qc_cuda_be_mm_multi(struct cu *c, const struct dmat *const *w, float *const *d_y, const int64_t *ldy, int n,
			const float *d_x, int64_t ldx, int64_t n_rows, const float *d_norm_w, struct qc_err *err)
{
	const enum qc_kernel_kind kind = kind_of(c, w[0], n_rows, false);
	const bool one = qc_cuda_be_mm_multi_can(c, w, n, n_rows, d_norm_w ? (unsigned)QC_MM_FUSE_NORM : 0u);
	if (d_norm_w && !one) /* the caller asks qc_cuda_be_mm_multi_can first */
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "cuda: RMSNorm cannot be fused here");
	if (!one) {
		for (int i = 0; i < n; i++) {
			int rc = qc_cuda_be_mm(c, w[i], d_x, ldx, 1, NULL, n_rows, d_y[i], ldy[i], err);
			if (rc)
				return rc;
		}
		return QC_OK;
	}
	struct qc_cuda_mm_args a = {
		.d_w = w[0]->d_w, .type = w[0]->type, .layout = w[0]->layout, .n_in = w[0]->n_in, .n_out = w[0]->n_out,
		.row_bytes = w[0]->row_bytes, .mat_stride = w[0]->mat_stride, .d_x = d_x, .ldx = ldx,
		.x_div = 1, .n_rows = n_rows, .d_y = d_y[0], .ldy = ldy[0],
		.d_ws = c->d_ws, .ws_bytes = c->ws_bytes, .blas = c->blas, .gemv_kt = c->env.mm.gemv_kt,
		.d_flags = c->d_flags, .n_flags = c->n_flags, .n_more = n - 1,
		.d_norm_w = d_norm_w, .norm_eps = c->m->cfg.norm_eps,
	};
	for (int i = 1; i < n; i++)
		a.more[i - 1] = (struct qc_cuda_mm_more){w[i]->d_w, w[i]->n_out, d_y[i], ldy[i]};
	qc_cuda_be_l2_hint(c, w, n, &a.l2);
	return w[0]->k->run[kind](&a, c->st, err);
}

unsigned qc_cuda_be_mm_fuses(const struct cu *c, const struct dmat *w, int64_t n_rows)
{
	const enum qc_kernel_kind kind = kind_of(c, w, n_rows, false);
	return (unsigned)kind < QC_KERNEL_COUNT && !w->d_perm ? w->k->fuse[kind] : 0u;
}
