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

/* Row-stacked fusions: source tensors of one layer written as one bundle tensor,
 * its parts in this order (the runtime views each part by name: model.c mat_view;
 * dump returns each). Stacked MoE experts fuse whole pairs of one shape (per
 * expert gate rows, then up rows). Dense matrices on the same input fuse where the
 * target's kernels read the fused tensor as one tensor-core matrix (a marlin
 * layout, every part on a stripe): the longest run of parts from the first that
 * share an encoding, so Q4_K_M's q6_K V leaves Q|K fused. */
struct fuse_group {
	unsigned flag;          /* QC_PLAN_FUSE_* that enables it */
	uint32_t n_dims;        /* 3: stacked experts of one shape; 2: dense matrices of one K */
	int n;                  /* its parts */
	const char *part[QC_PLAN_MAX_PARTS];
	const char *fused[QC_PLAN_MAX_PARTS + 1]; /* name of the first k parts fused (NULL: no such fusion) */
};

static const struct fuse_group fuse_groups[] = {
	{ QC_PLAN_FUSE_MOE, 3, 2, { "ffn_gate_exps.weight", "ffn_up_exps.weight" },
	  { NULL, NULL, "ffn_gate_up_exps.weight" } },
	{ QC_PLAN_FUSE_DENSE, 2, 3, { "attn_q.weight", "attn_k.weight", "attn_v.weight" },
	  { NULL, NULL, "attn_qk.weight", "attn_qkv.weight" } },
	{ QC_PLAN_FUSE_DENSE, 2, 2, { "ffn_gate.weight", "ffn_up.weight" }, { NULL, NULL, "ffn_gate_up.weight" } },
};
#define N_FUSE_GROUPS ((int)(sizeof fuse_groups / sizeof fuse_groups[0]))

/* What happens to a source tensor: alone (n < 2), or part of fused group g's
 * first n parts src[0..n) of layer `layer`. why: the reason the group's whole set of
 * parts did not fuse (set when the tensor is the group's first part). */
struct fusion {
	const struct fuse_group *g;
	long layer;
	int n;
	const struct qc_gguf_tensor *src[QC_PLAN_MAX_PARTS];
	const char *why;
};

/* src carries a GPTQ act-order permutation ("<base>.act_perm"): its K order is its own */
static bool has_act_perm(const struct qc_gguf_model *m, const struct qc_gguf_tensor *src)
{
	char pn[QC_PLAN_NAME_MAX + 16];
	const size_t l = strlen(src->name);
	if (l < 7 || strcmp(src->name + l - 7, ".weight") != 0)
		return false;
	snprintf(pn, sizeof pn, "%.*s.act_perm", (int)(l - 7), src->name);
	return qc_gguf_model_find(m, pn) != NULL;
}

/* Parts j of src that fuse with part 0 (same encoding and shape rules). */
static bool part_fits(const struct fuse_group *g, const struct qc_gguf_tensor *a, const struct qc_gguf_tensor *b)
{
	if (a->type != b->type || a->n_dims != g->n_dims || b->n_dims != g->n_dims || a->ne[0] != b->ne[0] ||
	    a->ne[2] != b->ne[2] || a->ne[3] != 1 || b->ne[3] != 1)
		return false;
	return g->n_dims == 3 ? a->ne[1] == b->ne[1] : a->ne[2] == 1;
}

static void fusion_of(const struct qc_gguf_model *m, const struct qc_gguf_tensor *s, enum qc_target tgt,
		      unsigned flags, struct fusion *fu)
{
	memset(fu, 0, sizeof *fu);
	int k = -1;
	for (int gi = 0; gi < N_FUSE_GROUPS && k < 0; gi++) {
		const struct fuse_group *g = &fuse_groups[gi];
		for (int j = 0; (flags & g->flag) && j < g->n && k < 0; j++)
			if ((fu->layer = layer_of(s->name, g->part[j])) >= 0) {
				fu->g = g;
				k = j;
			}
	}
	if (k < 0)
		return;
	const struct fuse_group *g = fu->g;
	char name[QC_PLAN_NAME_MAX];
	for (int j = 0; j < g->n; j++) {
		snprintf(name, sizeof name, "blk.%ld.%s", fu->layer, g->part[j]);
		fu->src[j] = qc_gguf_model_find(m, name);
	}
	const struct qc_gguf_tensor *s0 = fu->src[0];
	if (!s0)
		return; /* no first part: nothing to fuse with */
	const char *why = NULL;
	int n = 1;
	for (; n < g->n; n++) {
		if (!fu->src[n])
			break; /* a model without this part: nothing to say */
		if (!part_fits(g, s0, fu->src[n])) {
			why = g->n_dims == 3 ? "encodings or shapes differ" : "encodings differ";
			break;
		}
		if (g->n_dims == 2 && has_act_perm(m, fu->src[n])) {
			why = "act-order permutations";
			break;
		}
	}
	/* dense parts with act-order keep their own K order; stacked experts fuse with
	 * theirs (hf_quant.h loads a pair only with equal permutations) */
	if (g->n_dims == 2 && has_act_perm(m, s0))
		n = 1, why = "act-order permutations";
	if (g->n_dims == 3 && n < g->n)
		n = 1; /* experts fuse whole pairs or not at all */
	while (n > 1 && !g->fused[n])
		n--;
	const enum qc_layout want = qc_target_layout(tgt, s0->type, g->n_dims);
	if (!qc_layout_fusable(want)) {
		n = 1;
		why = "the target's layout takes whole matrices (nvfp4_swz, fp8_rows)";
	}
	if (g->n_dims == 2 && !qc_marlin_is(want)) {
		n = 1; /* the GEMV launches take the separate matrices together already */
		why = NULL;
	} else if (g->n_dims == 2 && n > 1) { /* one tensor-core matrix: every part on a stripe */
		int64_t ne[4] = { s0->ne[0], 0, 1, 1 };
		const int align = qc_layout_row_align(want);
		bool on_stripe = align > 0;
		const char *lay_why = NULL;
		for (int j = 0; j < n; j++) {
			on_stripe = on_stripe && ne[1] % align == 0;
			ne[1] += fu->src[j]->ne[1];
		}
		if (!on_stripe || qc_target_layout_for(tgt, s0->type, ne, 2, &lay_why) != want) {
			n = 1;
			why = "the parts do not fall on the tensor-core layout's stripes";
		}
	}
	fu->why = k == 0 && n < g->n ? why : NULL;
	fu->n = k < n ? n : 0;
}

/* Groups that did not fuse whole, counted over the layers for one note each. */
struct fuse_miss {
	const struct fuse_group *g;
	const char *why;
	int n, count;
	long first;
	enum qc_type types[QC_PLAN_MAX_PARTS];
};
#define FUSE_MISS_MAX 16

static void miss_add(struct fuse_miss *ms, int *n_ms, const struct fusion *fu)
{
	for (int i = 0; i < *n_ms; i++)
		if (ms[i].g == fu->g && ms[i].why == fu->why && ms[i].n == fu->n) {
			ms[i].count++;
			return;
		}
	if (*n_ms == FUSE_MISS_MAX)
		return;
	struct fuse_miss *x = &ms[(*n_ms)++];
	*x = (struct fuse_miss){ fu->g, fu->why, fu->n, 1, fu->layer, { 0 } };
	for (int j = 0; j < fu->g->n; j++)
		x->types[j] = fu->src[j] ? fu->src[j]->type : QC_TYPE_F32;
}

static int miss_notes(struct qc_plan *p, const struct fuse_miss *ms, int n_ms)
{
	for (int i = 0; i < n_ms; i++) {
		const struct fuse_miss *x = &ms[i];
		char parts[256] = "", fused[96] = "";
		size_t o = 0;
		for (int j = x->n > 1 ? x->n : 0; j < x->g->n && o < sizeof parts; j++)
			o += (size_t)snprintf(parts + o, sizeof parts - o, "%s%s (%s)", o ? ", " : "", x->g->part[j],
					      qc_type_get(x->types[j])->name);
		if (x->n > 1)
			snprintf(fused, sizeof fused, "out of %s", x->g->fused[x->n]);
		if (qc_plan_note(p, "%s kept %s in %d layer%s (first blk.%ld): %s", parts, x->n > 1 ? fused : "separate", x->count,
				 x->count == 1 ? "" : "s", x->first, x->why))
			return QC_ENOMEM;
	}
	return QC_OK;
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
	struct fuse_miss miss[FUSE_MISS_MAX];
	int n_miss = 0;
	for (uint64_t i = 0; i < m->n_tensors; i++) {
		const struct qc_gguf_tensor *s = m->tensors[i];
		struct qc_plan_tensor *t = &p->t[p->n];
		if (!name_ok(s->name)) {
			rc = qc_err_set(err, QC_EUNSUPPORTED, m->files[s->file_idx]->path, NULL, (int64_t)s->info_off,
					"tensor %llu: name is not printable UTF-8 or contains '/' or '\\'; refusing to write it as a bundle member",
					(unsigned long long)i);
			goto fail;
		}
		struct fusion fu;
		fusion_of(m, s, tgt, flags, &fu);
		if (fu.why)
			miss_add(miss, &n_miss, &fu);
		if (fu.n > 1 && fu.src[0] != s)
			continue; /* emitted with the group's first part */
		t->n_dims = s->n_dims;
		memcpy(t->ne, s->ne, sizeof t->ne);
		t->type = s->type;
		t->parts[0] = (struct qc_plan_part){ s, 0, s->ne[1], 0, 0, s->ne[0] };
		t->n_parts = 1;
		t->rank = -1;
		snprintf(t->name, sizeof t->name, "%s", s->name);
		if (fu.n > 1) {
			snprintf(t->name, sizeof t->name, "blk.%ld.%s", fu.layer, fu.g->fused[fu.n]);
			for (int k = 1; k < fu.n; k++) {
				t->parts[k] = (struct qc_plan_part){ fu.src[k], t->ne[1], fu.src[k]->ne[1], 0, 0,
								     fu.src[k]->ne[0] };
				t->ne[1] += fu.src[k]->ne[1];
			}
			t->n_parts = fu.n;
			t->fused = true;
		}
		rc = qc_plan_finish_tensor(m, p, t, tgt, err);
		if (rc)
			goto fail;
		p->total_bytes += t->size;
		p->n++;
	}
	if (miss_notes(p, miss, n_miss)) {
		rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		goto fail;
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
