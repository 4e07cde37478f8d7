/* plan.c — source tensors to bundle tensors (see plan.h). */
#include "plan.h"

#include "gguf_meta.h"
#include "layout_marlin.h"
#include "layout_nvfp4.h"
#include "layout_fp8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int qc_plan_note(struct qc_plan *p, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	char **n = realloc(p->notes, (size_t)(p->n_notes + 1) * sizeof(*n));
	if (!n)
		return QC_ENOMEM;
	p->notes = n;
	if (!(n[p->n_notes] = strdup(buf)))
		return QC_ENOMEM;
	p->n_notes++;
	return QC_OK;
}

/* "blk.<N>.<what>" -> N, or -1 */
static long layer_of(const char *name, const char *what)
{
	long n;
	int end = 0;
	char tail[80];
	if (sscanf(name, "blk.%ld.%79s%n", &n, tail, &end) != 2 || name[end] || strcmp(tail, what) != 0)
		return -1;
	return n;
}

static bool fusable(const struct qc_gguf_tensor *g, const struct qc_gguf_tensor *u)
{
	return g->type == u->type && g->n_dims == 3 && u->n_dims == 3 && g->ne[0] == u->ne[0] &&
	       g->ne[1] == u->ne[1] && g->ne[2] == u->ne[2] && g->ne[3] == 1;
}

bool qc_plan_tensor_whole(const struct qc_plan_tensor *t)
{
	const struct qc_plan_part *pp = &t->parts[0];
	return t->n_parts == 1 && pp->src_row0 == 0 && pp->n_rows == pp->src->ne[1] && pp->col0 == 0 &&
	       pp->n_cols == pp->src->ne[0];
}

void qc_plan_gather_slice(const struct qc_gguf_model *m, const struct qc_plan_tensor *t, uint64_t sl, uint8_t *out)
{
	for (int k = 0; k < t->n_parts; k++) {
		const struct qc_plan_part *pp = &t->parts[k];
		const struct qc_gguf_tensor *s = pp->src;
		const struct qc_gguf *g = m->files[s->file_idx];
		const struct qc_type_traits *tt = qc_type_get(s->type);
		uint64_t src_row, n;
		QC_ASSERT(qc_type_row_bytes(s->type, (uint64_t)s->ne[0], &src_row) == QC_OK);
		const uint64_t c0 = (uint64_t)(pp->col0 / tt->block_elems) * tt->block_bytes;
		const uint64_t cn = (uint64_t)(pp->n_cols / tt->block_elems) * tt->block_bytes;
		const uint64_t base = s->data_off + (sl * (uint64_t)s->ne[1] + (uint64_t)pp->src_row0) * src_row;
		if (cn == src_row) { /* whole rows: one span */
			n = (uint64_t)pp->n_rows * src_row;
			memcpy(out, g->map + base, (size_t)n);
			out += n;
		} else {
			for (int64_t r = 0; r < pp->n_rows; r++, out += cn)
				memcpy(out, g->map + base + (uint64_t)r * src_row + c0, (size_t)cn);
			n = (uint64_t)pp->n_rows * src_row;
		}
		qc_map_release(&g->file, base, n);
	}
}

/* Layouts that keep a scale structure the blocks must have exactly (nothing is
 * re-quantized): nvfp4_swz keeps e4m3 codes over a global scale per row (hfq_ct.c writes
 * fl(e4m3/global)), fp8_rows one weight scale per row and one activation scale. A
 * shard's rows are gathered to check them as they will be stored. */
typedef bool (*data_fits_fn)(enum qc_type type, const int64_t ne[4], const uint8_t *rows, const char **why);

static bool data_fits(const struct qc_gguf_model *m, const struct qc_plan_tensor *t, data_fits_fn fits,
		      const char **why)
{
	const struct qc_gguf_tensor *s = t->parts[0].src;
	if (qc_plan_tensor_whole(t)) {
		bool ok = fits(t->type, t->ne, qc_gguf_model_data(m, s), why);
		qc_map_release(&m->files[s->file_idx]->file, s->data_off, s->n_bytes);
		return ok;
	}
	uint64_t row;
	QC_ASSERT(qc_type_row_bytes(t->type, (uint64_t)t->ne[0], &row) == QC_OK);
	const int64_t ne[4] = { t->ne[0], t->ne[1], 1, 1 };
	uint8_t *buf = malloc((size_t)(row * (uint64_t)t->ne[1]) + 1);
	bool ok = buf != NULL;
	for (uint64_t sl = 0; ok && sl < (uint64_t)(t->ne[2] * t->ne[3]); sl++) {
		qc_plan_gather_slice(m, t, sl, buf);
		ok = fits(t->type, ne, buf, why);
	}
	if (!buf)
		*why = "out of memory checking its scales";
	free(buf);
	return ok;
}

int qc_plan_finish_tensor(const struct qc_gguf_model *m, struct qc_plan *p, struct qc_plan_tensor *t,
			  enum qc_target tgt, struct qc_err *err)
{
	const char *why = NULL;
	t->layout = qc_target_layout_for(tgt, t->type, t->ne, t->n_dims, &why);
	/* embeddings are gathered by row, never multiplied: the GPU reads ggml rows */
	if (t->layout != QC_LAYOUT_GGML && strcmp(t->name + t->base_off, "token_embd.weight") == 0) {
		t->layout = QC_LAYOUT_GGML;
		why = "rows are gathered by token id";
	}
	/* stacked experts: for sm90 a marlin layout (the grouped warp-specialized wgmma
	 * GEMM, marlin_moe.cu); elsewhere ggml, for the wmma grouped GEMM (moe_gemm.cu)
	 * that beat marlin experts on per-row GEMV (H200, 4 Mixtral-shape layers, Q4_0:
	 * prefill 2.6k vs 12.7k tok/s, decode at 64 2.6k vs 4.3k; docs/bench.md) */
	if (qc_marlin_is(t->layout) && t->n_dims == 3 && t->ne[2] > 1 && tgt != QC_TARGET_SM90) {
		t->layout = QC_LAYOUT_GGML;
		why = "stacked experts: the grouped MoE GEMM for this target reads ggml blocks";
	}
	/* a fused half (a shard's section) is addressed as rows row0.. of each slice: it must
	 * start on a stripe (the layout table's row alignment); a layout without fused
	 * halves stays ggml */
	bool off_stripe = false;
	for (int k = 1; k < t->n_parts && t->n_dims > 1 && qc_layout_row_align(t->layout) > 0; k++)
		off_stripe |= t->parts[k].row0 % qc_layout_row_align(t->layout) != 0;
	if (t->n_parts > 1 && !qc_layout_fusable(t->layout)) {
		t->layout = QC_LAYOUT_GGML;
		why = "fused halves (the nvfp4_swz and fp8_rows kernels take whole matrices)";
	} else if (off_stripe) {
		t->layout = QC_LAYOUT_GGML;
		why = t->fused ? "the fused halves do not start on a stripe boundary"
			       : "the sections of this shard do not start on a stripe boundary";
	}
	/* nothing is re-quantized: scales nvfp4_swz or fp8_rows cannot keep exactly stay ggml */
	if ((t->layout == QC_LAYOUT_NVFP4_SWZ && !data_fits(m, t, qc_nvfp4_swz_data_fits, &why)) ||
	    (t->layout == QC_LAYOUT_FP8_ROWS && !data_fits(m, t, qc_fp8_rows_data_fits, &why)))
		t->layout = QC_LAYOUT_GGML;
	if (why && qc_plan_note(p, "%s (%s, [%lld, %lld]): kept in layout ggml instead of %s: %s", t->name,
			qc_type_get(t->type)->name, (long long)t->ne[0], (long long)t->ne[1],
			qc_layout_name(qc_target_layout(tgt, t->type, t->n_dims)), why))
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	t->note = why ? p->n_notes - 1 : -1;
	int rc = qc_layout_bytes(t->layout, t->type, t->ne, &t->size);
	if (rc)
		return qc_err_set(err, QC_EFORMAT, NULL, t->name, -1, "shape does not fit layout %s",
				  qc_layout_name(t->layout));
	return QC_OK;
}

/* Tensor names become manifest strings and tar member names ("tensors/<name>"):
 * require printable UTF-8 without '/' (no path can escape the archive) and not "."/"..". */
static bool name_ok(const char *n)
{
	if (!n[0] || strcmp(n, ".") == 0 || strcmp(n, "..") == 0 || !qc_meta_json_safe(n, strlen(n)))
		return false;
	for (const unsigned char *p = (const unsigned char *)n; *p; p++)
		if (*p < 0x20 || *p == 0x7f || *p == '/' || *p == '\\')
			return false;
	return true;
}

int qc_plan_build(const struct qc_gguf_model *m, enum qc_target tgt, unsigned flags, struct qc_plan **out,
		  struct qc_err *err)
{
	int rc = QC_OK;
	*out = NULL;
	struct qc_plan *p = calloc(1, sizeof(*p));
	if (!p || !(p->t = calloc((size_t)m->n_tensors + 1, sizeof(*p->t)))) {
		free(p);
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	}
	for (uint64_t i = 0; i < m->n_tensors; i++) {
		const struct qc_gguf_tensor *s = m->tensors[i];
		struct qc_plan_tensor *t = &p->t[p->n];
		if (!name_ok(s->name)) {
			rc = qc_err_set(err, QC_EUNSUPPORTED, m->files[s->file_idx]->path, NULL, (int64_t)s->info_off,
					"tensor %llu: name is not printable UTF-8 or contains '/' or '\\'; refusing to write it as a bundle member",
					(unsigned long long)i);
			goto fail;
		}
		long layer = layer_of(s->name, "ffn_up_exps.weight");
		char gate[QC_PLAN_NAME_MAX];
		if ((flags & QC_PLAN_FUSE_MOE) && layer >= 0) {
			snprintf(gate, sizeof gate, "blk.%ld.ffn_gate_exps.weight", layer);
			const struct qc_gguf_tensor *g = qc_gguf_model_find(m, gate);
			if (g && fusable(g, s) && qc_layout_fusable(qc_target_layout(tgt, s->type, s->n_dims)))
				continue; /* emitted together with its gate half */
		}
		layer = layer_of(s->name, "ffn_gate_exps.weight");
		const struct qc_gguf_tensor *up = NULL;
		if ((flags & QC_PLAN_FUSE_MOE) && layer >= 0) {
			char upn[QC_PLAN_NAME_MAX];
			snprintf(upn, sizeof upn, "blk.%ld.ffn_up_exps.weight", layer);
			up = qc_gguf_model_find(m, upn);
			if (up && !fusable(s, up)) {
				if (qc_plan_note(p, "blk.%ld: ffn_gate_exps (%s) and ffn_up_exps (%s) differ in encoding or shape; kept separate",
					 layer, qc_type_get(s->type)->name, qc_type_get(up->type)->name)) {
					rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
					goto fail;
				}
				up = NULL;
			} else if (up && !qc_layout_fusable(qc_target_layout(tgt, s->type, s->n_dims))) {
				if (qc_plan_note(p, "blk.%ld: ffn_gate_exps and ffn_up_exps kept separate: nvfp4_swz matrices are not fused (their kernels take whole matrices)",
					 layer)) {
					rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
					goto fail;
				}
				up = NULL;
			}
		}
		t->n_dims = s->n_dims;
		memcpy(t->ne, s->ne, sizeof t->ne);
		t->type = s->type;
		t->parts[0] = (struct qc_plan_part){ s, 0, s->ne[1], 0, 0, s->ne[0] };
		t->n_parts = 1;
		t->rank = -1;
		if (up) {
			snprintf(t->name, sizeof t->name, "blk.%ld.ffn_gate_up_exps.weight", layer);
			t->ne[1] = 2 * s->ne[1];
			t->parts[1] = (struct qc_plan_part){ up, s->ne[1], up->ne[1], 0, 0, up->ne[0] };
			t->n_parts = 2;
			t->fused = true;
		} else {
			snprintf(t->name, sizeof t->name, "%s", s->name);
		}
		rc = qc_plan_finish_tensor(m, p, t, tgt, err);
		if (rc)
			goto fail;
		p->total_bytes += t->size;
		p->n++;
	}
	*out = p;
	return QC_OK;
fail:
	qc_plan_free(p);
	return rc;
}

void qc_plan_free(struct qc_plan *p)
{
	if (!p)
		return;
	for (int i = 0; i < p->n_notes; i++)
		free(p->notes[i]);
	free(p->notes);
	free(p->t);
	free(p);
}
