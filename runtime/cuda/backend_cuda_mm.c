/* backend_cuda_mm.c — one matmul of the CUDA backend: the layout table says which
 * kernel kind runs (qc_layout_kernel, quant/layout.c), matmul_dispatch.h gives the
 * kind's function for the weight's (layout, type); act-order weights get their
 * activations gathered first. This file holds no row-count rule of its own.
 */
#include <stdio.h>

#include "backend_cuda_int.h"
#include "kernels/act_gather.h"
#include "kernels/moe_gemm.h"

/* y = W x for n_rows activation rows (see matmul_dispatch.h). */
int qc_cuda_be_mm(struct cu *c, const struct dmat *w, const float *d_x, int64_t ldx, int32_t x_div,
		  const int32_t *d_expert, int64_t n_rows, float *d_y, int64_t ldy, struct qc_err *err)
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
	const struct qc_cuda_mm_args a = {
		.d_w = w->d_w, .type = w->type, .layout = w->layout, .n_in = w->n_in, .n_out = w->n_out,
		.row_bytes = w->row_bytes, .mat_stride = w->mat_stride, .d_x = d_x, .ldx = ldx,
		.x_div = x_div, .d_expert = d_expert, .n_rows = n_rows, .d_y = d_y, .ldy = ldy,
		.d_ws = c->d_ws, .ws_bytes = c->ws_bytes, .blas = c->blas, .gemv_kt = c->env.mm.gemv_kt,
	};
	const struct qc_kernel_rows *r = &c->env.mm.rows;
	const enum qc_kernel_kind kind = qc_layout_kernel(w->layout, n_rows, d_expert != NULL, w->n_in, w->n_out, r);
	if (kind == QC_KERNEL_MOE_GEMM) {
		const struct qc_cuda_moe_gemm_args g = {a, w->n_mat};
		return qc_cuda_moe_gemm(&g, c->st, err);
	}
	if (d_expert && n_rows > r->gemv_max_rows)
		QC_WARN_ONCE("cuda: MoE experts in the %s layout (n_in %lld) run as per-row GEMV: the "
			     "grouped GEMM (moe_gemm.cu) reads only GGML layouts with n_in a multiple of 32; "
			     "prefill of this model is slow", qc_layout_name(w->layout), (long long)w->n_in);
	const qc_cuda_mm_fn fn = (unsigned)kind < QC_KERNEL_COUNT ? w->k->run[kind] : NULL;
	if (!fn) /* make_dmat checked every kind the table names: a bug */
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "cuda: no %s kernel for %s %s",
				  qc_kernel_kind_name(kind), qc_layout_name(w->layout), qc_types[w->type].name);
	return fn(&a, c->st, err);
}
