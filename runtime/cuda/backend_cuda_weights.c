/* backend_cuda_weights.c — the CUDA backend's weights (uploaded as one region by
 * backend_cuda_upload.c): the device view of each matrix (struct dmat), the f16 host conversion of types
 * without a device decoder (logged once per type), and the matmul scratch size.
 * Non-goals: choosing kernels (backend_cuda_mm.c asks the layout table).
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda_int.h"
#include "fp16.h"

int qc_cuda_be_ck(cudaError_t e, const char *what, struct qc_err *err)
{
	return qc_cuda_check(e, what, err);
}

/* cudaMalloc tracked for destroy. */
int qc_cuda_be_dalloc(struct cu *c, size_t bytes, void **out, struct qc_err *err)
{
	void *p = NULL;
	int rc;
	if (c->n_allocs == c->cap_allocs) {
		int cap = c->cap_allocs ? 2 * c->cap_allocs : 64;
		void **a = realloc(c->allocs, sizeof *a * (size_t)cap);
		if (!a)
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		c->allocs = a;
		c->cap_allocs = cap;
	}
	if ((rc = qc_cuda_be_ck(cudaMalloc(&p, bytes ? bytes : 16), "cudaMalloc", err))) {
		char msg[QC_ERR_MSG_MAX];
		snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
		return qc_err_set(err, QC_ECUDA, NULL, NULL, -1, "device allocation of %zu bytes: %s", bytes, msg);
	}
	c->allocs[c->n_allocs++] = p;
	*out = p;
	return QC_OK;
}

int qc_cuda_be_dfloats(struct cu *c, size_t n, float **out, struct qc_err *err)
{
	return qc_cuda_be_dalloc(c, n * sizeof(float), (void **)out, err);
}

/* A small host vector to the device (NULL stays NULL). */
int qc_cuda_be_upload_vec(struct cu *c, const float *h, int64_t n, const float **d, struct qc_err *err)
{
	float *p;
	int rc;
	*d = NULL;
	if (!h)
		return QC_OK;
	if ((rc = qc_cuda_be_dfloats(c, (size_t)n, &p, err)) ||
	    (rc = qc_cuda_be_ck(cudaMemcpy(p, h, (size_t)n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy", err)))
		return rc;
	*d = p;
	return QC_OK;
}

/* Layout of the bundle tensor holding host pointer p. */
static enum qc_layout layout_of(const struct qc_bundle *b, const uint8_t *p)
{
	const uint64_t off = (uint64_t)(p - b->map);
	for (uint64_t i = 0; i < b->n_tensors; i++)
		if (off >= b->tensors[i].off && off < b->tensors[i].off + b->tensors[i].size)
			return b->tensors[i].layout;
	return QC_LAYOUT_GGML;
}

/* Decode every matrix of w on the host to f16 and upload it (the slow path). */
static int convert_f16(struct cu *c, const struct qc_mat *w, const uint8_t **d_out, struct qc_err *err)
{
	for (int i = 0; i < c->n_convs; i++)
		if (c->convs[i].h_src == w->data) {
			*d_out = c->convs[i].d_w;
			return QC_OK;
		}
	const size_t n_rows = (size_t)w->n_mat * (size_t)w->n_out, n_in = (size_t)w->n_in;
	float *row = malloc(n_in * sizeof(float));
	uint16_t *h = malloc(n_rows * n_in * sizeof(uint16_t));
	struct conv *cv = realloc(c->convs, sizeof *cv * (size_t)(c->n_convs + 1));
	void *d = NULL;
	int rc = QC_OK;
	if (cv)
		c->convs = cv;
	if (!row || !h || !cv) {
		rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory converting %s weights",
				qc_types[w->type].name);
		goto out;
	}
	for (int64_t e = 0; e < w->n_mat; e++)
		for (int64_t r = 0; r < w->n_out; r++) {
			qc_types[w->type].dequant_row(qc_mat_row(w, e, r), row, w->n_in);
			uint16_t *dst = h + ((size_t)e * (size_t)w->n_out + (size_t)r) * n_in;
			for (size_t i = 0; i < n_in; i++)
				dst[i] = qc_f32_to_fp16(row[i]);
		}
	if ((rc = qc_cuda_be_dalloc(c, n_rows * n_in * 2, &d, err)) ||
	    (rc = qc_cuda_be_ck(cudaMemcpy(d, h, n_rows * n_in * 2, cudaMemcpyHostToDevice), "cudaMemcpy (f16 weights)", err)))
		goto out;
	c->convs[c->n_convs].h_src = w->data;
	c->convs[c->n_convs].d_w = d;
	c->n_convs++;
	*d_out = d;
out:
	free(row);
	free(h);
	return rc;
}

/* Every kernel kind the layout table names for d's layout has a function in d's
 * kernels (matmul_layouts.def), so a matmul never finds a hole mid-forward.
 * An experts column of none is a layout that holds no experts. */
static int kinds_served(const struct qc_bundle *b, const char *what, const struct dmat *d, struct qc_err *err)
{
	const struct qc_layout_traits *t = &qc_layouts[d->layout];
	for (int i = 0; i <= QC_ROWS_COUNT; i++) {
		const enum qc_kernel_kind k = i < QC_ROWS_COUNT ? t->kernel[i] : t->experts;
		if (k != QC_KERNEL_NONE && (!d->k->run[k] || (k == QC_KERNEL_MOE_GEMM && !d->k->moe_ws)))
			return qc_err_set(err, QC_EUNSUPPORTED, b->path, what, -1,
					  "layout %s of %s: the layout table names a %s kernel, %s has none",
					  qc_layout_name(d->layout), qc_types[d->type].name, qc_kernel_kind_name(k),
					  d->k->name);
	}
	return QC_OK;
}

/* The device view of w: a slice of the uploaded file, or an f16 conversion
 * when no kernel reads its (layout, type): in the GGML layout only F64, Q8_1,
 * Q8_K and the integer types (every other type has a decode.cuh decoder). */
int qc_cuda_be_make_dmat(struct cu *c, const struct qc_mat *w, const char *what, struct dmat *d,
		     bool warned[QC_TYPE_COUNT], struct qc_err *err)
{
	const struct qc_bundle *b = c->m->bundle;
	memset(d, 0, sizeof *d);
	if (!w->data)
		return QC_OK;
	if (w->act_perm) { /* the permutation is a bundle tensor: it came up with the file */
		const uint64_t po = (uint64_t)((const uint8_t *)w->act_perm - b->map);
		const uint64_t pb = (uint64_t)(w->perm_stride ? w->n_mat : 1) * (uint64_t)w->n_in * 4;
		if (po < c->file_lo || po + pb > c->file_hi)
			return qc_err_set(err, QC_EINVAL, b->path, what, -1, "act-order permutation outside the tensor region");
		d->d_perm = (const int32_t *)(const void *)(c->d_file + (po - c->file_lo));
		d->perm_stride = w->perm_stride;
		c->any_perm = true;
	}
	{ /* every byte the view reads lies in the uploaded range (a tensor-parallel
	     rank's own members: a weight of another rank's would read past them) */
		const uint64_t wo = (uint64_t)(w->data - b->map);
		const uint64_t wb = (uint64_t)(w->n_mat - 1) * w->mat_stride + (uint64_t)w->n_out * w->row_bytes;
		if (wo < c->file_lo || wo + wb > c->file_hi)
			return qc_err_set(err, QC_EINVAL, b->path, what, -1,
					  "weight bytes [%llu, %llu) outside the model's range [%llu, %llu)",
					  (unsigned long long)wo, (unsigned long long)(wo + wb),
					  (unsigned long long)c->file_lo, (unsigned long long)c->file_hi);
	}
	d->type = w->type;
	d->layout = layout_of(b, w->data);
	d->n_in = w->n_in;
	d->n_out = w->n_out;
	d->n_mat = w->n_mat;
	d->row_bytes = w->row_bytes;
	d->mat_stride = w->mat_stride;
	d->d_w = c->d_file + ((uint64_t)(w->data - b->map) - c->file_lo);
	/* W8A8 weights anywhere but fp8_rows (decoded to f16, or a GEMV) would multiply float
	   activations: another model than the checkpoint */
	if (qc_types[d->type].family == QC_FAMILY_W8A8 && d->layout != QC_LAYOUT_FP8_ROWS)
		return qc_err_set(err, QC_EUNSUPPORTED, b->path, what, -1,
				  "%s (W8A8 FP8) weights in layout %s: the CUDA backend runs them only from the "
				  "fp8_rows layout (a single matrix, one scale per row), which qconvert writes for "
				  "--target sm89, sm90 or sm100; this bundle's target or this tensor's shape has none",
				  qc_types[d->type].name, qc_layout_name(d->layout));
	d->k = qc_cuda_mm_find(d->layout, d->type);
	if (d->k)
		return kinds_served(b, what, d, err);
	if (d->layout != QC_LAYOUT_GGML)
		return qc_err_set(err, QC_EUNSUPPORTED, b->path, what, -1,
				  "no CUDA kernel for layout %s of %s", qc_layout_name(d->layout),
				  qc_types[d->type].name);

	if (!warned[d->type]) {
		warned[d->type] = true;
		qc_warn_prefix();
		fprintf(stderr, "cuda: no device decoder for %s weights: dequantized to f16 on the host "
				"at load (slow path, f16-rounded values)\n", qc_types[d->type].name);
	}
	int rc = convert_f16(c, w, &d->d_w, err);
	if (rc)
		return rc;
	d->type = QC_TYPE_F16;
	d->row_bytes = (uint64_t)w->n_in * 2;
	d->mat_stride = d->row_bytes * (uint64_t)w->n_out;
	d->k = qc_cuda_mm_find(QC_LAYOUT_GGML, QC_TYPE_F16);
	return kinds_served(b, what, d, err);
}

/* Largest gemm scratch over the model's matrices. */
uint64_t qc_cuda_be_ws_need(const struct cu *c)
{
	const struct qc_model_config *cfg = &c->m->cfg;
	uint64_t need = 0;
	const struct dmat *all[16]; /* a layer's dense matrices, or the output */
	for (int il = 0; il <= cfg->n_layer; il++) {
		int n = 0;
		if (il < cfg->n_layer) {
			const struct dlayer *L = &c->L[il];
			const struct dmat *v[] = {&L->wq,    &L->wk,     &L->wv,      &L->wo,    &L->gate,    &L->up,
						  &L->down,  &L->gate_inp, &L->gate_sh, &L->up_sh, &L->down_sh,
						  &L->gate_inp_sh};
			for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
				all[n++] = v[i];
		} else {
			all[n++] = &c->out;
		}
		for (int i = 0; i < n; i++) {
			const struct dmat *w = all[i];
			if (!w->d_w || !w->k || !w->k->ws_bytes)
				continue;
			const int64_t rows = w == &c->out ? c->p.max_logits : c->p.max_tokens;
			const uint64_t b = w->k->ws_bytes(w->n_in, w->n_out, rows, &c->env.mm);
			need = b > need ? b : need;
		}
		/* the one-launch groups (qc_cuda_be_mm_multi: Q|K|V, gate|up): their
		 * partition is the group's width, and so is their scratch */
		if (il < cfg->n_layer) {
			const struct dlayer *L = &c->L[il];
			const struct dmat *grp[2][3] = {{&L->wq, &L->wk, &L->wv}, {&L->gate, &L->up, NULL}};
			for (int g = 0; g < 2; g++) {
				const struct dmat *w0 = grp[g][0];
				if (!w0->d_w || !w0->k || !w0->k->ws_bytes)
					continue;
				int64_t cols = 0;
				for (int i = 0; i < 3 && grp[g][i]; i++)
					cols += grp[g][i]->d_w ? grp[g][i]->n_out : 0;
				const uint64_t b = w0->k->ws_bytes(w0->n_in, cols, c->p.max_tokens, &c->env.mm);
				need = b > need ? b : need;
			}
		}
	}
	/* MoE experts past gemv_max_rows rows: the grouped GEMM's row sort (qc_cuda_be_mm) */
	const int64_t exp_rows = c->p.max_tokens * (cfg->n_expert ? cfg->n_expert_used : 1);
	for (int il = 0; cfg->n_expert && il < cfg->n_layer; il++) {
		const struct dmat *x[] = {&c->L[il].gate_exps, &c->L[il].up_exps, &c->L[il].down_exps};
		for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) {
			if (!x[i]->d_w || !x[i]->k || !x[i]->k->moe_ws)
				continue;
			const uint64_t b = x[i]->k->moe_ws(x[i]->n_in, x[i]->n_out, exp_rows, x[i]->n_mat);
			need = b > need ? b : need;
		}
	}
	return need;
}

