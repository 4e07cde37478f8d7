/* plan_tp.c — qc_plan_shard (plan.h): a plain plan into the shards of N ranks.
 * Each plain tensor is cut by convert/tp_rules.h's table; rank r's shard
 * "tp<r>.<name>" is made of parts of the same source tensors (row ranges mapped
 * through the plain tensor's parts, so a fused MoE gate|up shard is rank r's gate
 * rows then its up rows of every expert), and written in the target's layout by the
 * same machinery as a plain tensor. Everything that can be refused is refused here,
 * before a byte is written.
 * Vocabulary: rows [0, V) of token_embd/output cut into N ranges on multiples of the
 * row alignment A of the target's layouts for them (marlin stripes), V/N rounded
 * down to A for ranks 0..N-2, the last rank taking the rest. */
#include "plan.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tp_rules.h"

/* A positive integer config value (a single number: per-layer arrays are not split). */
static int cfg_width(const cJSON *cfg, const char *key, int64_t def, int64_t *v, struct qc_err *err)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(cfg, key);
	if (!x && def > 0) {
		*v = def;
		return QC_OK;
	}
	if (!cJSON_IsNumber(x) || !(x->valuedouble >= 1 && x->valuedouble <= 1e9) ||
	    floor(x->valuedouble) != x->valuedouble)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "--tp: config '%s' must be one positive integer (per-layer values are not split)", key);
	*v = (int64_t)x->valuedouble;
	return QC_OK;
}

/* The layer's FFN width of unit u: its down matrix's ne[0]; -1 when it has none. */
static int64_t ff_width(const void *ctx, long layer, enum qc_tp_unit u)
{
	static const char *const down[QC_TP_U_COUNT] = {
		[QC_TP_U_FF] = "ffn_down.weight",
		[QC_TP_U_FF_EXP] = "ffn_down_exps.weight",
		[QC_TP_U_FF_SHEXP] = "ffn_down_shexp.weight",
	};
	char n[QC_PLAN_NAME_MAX];
	if ((unsigned)u >= QC_TP_U_COUNT || !down[u])
		return -1;
	snprintf(n, sizeof n, "blk.%ld.%s", layer, down[u]);
	const struct qc_gguf_tensor *t = qc_gguf_model_find(ctx, n);
	return t ? t->ne[0] : -1;
}

static int vocab_ranges(struct qc_plan *p, const struct qc_gguf_model *m, enum qc_target tgt, int n,
			const cJSON *cfg, struct qc_err *err)
{
	const struct qc_gguf_tensor *te = qc_gguf_model_find(m, "token_embd.weight");
	const struct qc_gguf_tensor *out = qc_gguf_model_find(m, "output.weight");
	if (!te || te->n_dims != 2)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, "token_embd.weight", -1,
				  "--tp: the vocabulary split needs a 2-D token_embd.weight");
	const int64_t V = te->ne[1];
	int64_t nv = V;
	int rc = cfg_width(cfg, "n_vocab", V, &nv, err);
	if (rc)
		return rc;
	if (nv != V || (out && (out->n_dims != 2 || out->ne[1] != V)))
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, out && out->ne[1] != V ? "output.weight" : "token_embd.weight",
				  -1, "--tp: config n_vocab %lld, token_embd.weight %lld rows and output.weight %lld rows must agree to split the vocabulary",
				  (long long)nv, (long long)V, (long long)(out ? out->ne[1] : V));
	int64_t align = 1;
	for (int k = 0; k < 2; k++) {
		const struct qc_gguf_tensor *t = k ? out : te;
		const int a = t ? qc_layout_row_align(qc_target_layout(tgt, t->type, t->n_dims)) : 1;
		align = a > align ? a : align;
	}
	int64_t per = V / n / align * align;
	if (V / n == 0)
		return qc_err_set(err, QC_EINVAL, NULL, "token_embd.weight", -1,
				  "--tp %d: a vocabulary of %lld tokens cannot give every rank a row", n, (long long)V);
	if (per == 0) {
		per = V / n;
		if (qc_plan_note(p, "--tp %d: vocabulary of %lld rows split at %lld rows, not on the %lld-row stripes of the target's layout (too few rows)",
				 n, (long long)V, (long long)per, (long long)align))
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	}
	for (int r = 0; r < n; r++) {
		p->tp_vocab[r][0] = r * per;
		p->tp_vocab[r][1] = r == n - 1 ? V - r * per : per;
	}
	return QC_OK;
}

/* Append to o the rows [a, a + len) of plain tensor t's slice, through t's parts. */
static void add_rows(struct qc_plan_tensor *o, const struct qc_plan_tensor *t, int64_t a, int64_t len)
{
	for (int k = 0; k < t->n_parts && len > 0; k++) {
		const struct qc_plan_part *pp = &t->parts[k];
		const int64_t lo = a > pp->row0 ? a : pp->row0;
		const int64_t hi = a + len < pp->row0 + pp->n_rows ? a + len : pp->row0 + pp->n_rows;
		if (lo >= hi)
			continue;
		QC_ASSERT(o->n_parts < QC_PLAN_MAX_PARTS);
		o->parts[o->n_parts++] = (struct qc_plan_part){ pp->src, o->ne[1], hi - lo, pp->src_row0 + (lo - pp->row0),
								pp->col0, pp->n_cols };
		o->ne[1] += hi - lo;
	}
}

/* Rank r's elements [c0, c0 + w) of every row of t (a column split, or the sections of
 * a 1-D tensor): block-aligned, or refused. */
static int add_cols(struct qc_plan_tensor *o, const struct qc_plan_tensor *t, int n, int r, int64_t c0, int64_t w,
		    struct qc_err *err)
{
	const struct qc_type_traits *tt = qc_type_get(t->type);
	const int64_t be = tt->block_elems;
	if (c0 % be || w % be)
		return qc_err_set(err, QC_EINVAL, NULL, t->name, -1,
				  "--tp %d: rank %d's columns [%lld, %lld) do not fall on the %lld-element blocks of %s",
				  n, r, (long long)c0, (long long)(c0 + w), (long long)be, tt->name);
	QC_ASSERT(t->n_parts == 1 && o->n_parts < QC_PLAN_MAX_PARTS);
	const struct qc_plan_part *pp = &t->parts[0];
	o->parts[o->n_parts++] = (struct qc_plan_part){ pp->src, 0, pp->n_rows, pp->src_row0, pp->col0 + c0, w };
	o->ne[0] += w;
	return QC_OK;
}

/* "<base>.weight" -> "<base>.act_perm" */
static void perm_name(const char *w, char *buf, size_t len)
{
	size_t k = strlen(w);
	if (k > 7 && strcmp(w + k - 7, ".weight") == 0)
		k -= 7;
	snprintf(buf, len, "%.*s.act_perm", (int)k, w);
}

/* A column split cuts K: refused where the weight is permuted along K (act-order), and
 * where the whole tensor has a tensor-core layout the shard's K does not fit. */
static int check_cols(const struct qc_gguf_model *m, const struct qc_plan_tensor *t, const struct qc_plan_tensor *o,
		      enum qc_target tgt, int n, struct qc_err *err)
{
	char pn[QC_PLAN_NAME_MAX + 16];
	perm_name(t->name, pn, sizeof pn);
	if (qc_gguf_model_find(m, pn))
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, t->name, -1,
				  "--tp %d: this weight is split by input columns, but it has an act-order permutation (%s, GPTQ desc_act): its groups follow the permuted order, so a rank's columns are not whole groups; convert without --tp, or a checkpoint quantized without act-order",
				  n, pn);
	const char *why = NULL;
	if (t->layout != QC_LAYOUT_GGML && qc_target_layout_for(tgt, o->type, o->ne, o->n_dims, &why) != t->layout)
		return qc_err_set(err, QC_EINVAL, NULL, t->name, -1,
				  "--tp %d: a rank's %lld columns do not fit layout %s (%s), in which the whole tensor is stored",
				  n, (long long)o->ne[0], qc_layout_name(t->layout), why ? why : "shape");
	return QC_OK;
}

/* The weight of act_perm `name` must not be split by columns (its own rule says). */
static int check_perm(const struct qc_gguf_model *m, const char *name, const struct qc_tp_dims *d, int n,
		      struct qc_err *err)
{
	char w[QC_PLAN_NAME_MAX + 16];
	snprintf(w, sizeof w, "%.*s.weight", (int)(strlen(name) - strlen(".act_perm")), name);
	const struct qc_gguf_tensor *s = qc_gguf_model_find(m, w);
	if (!s)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, name, -1,
				  "--tp: act-order permutation without its weight %s; cannot tell how to split it", w);
	struct qc_tp_cut c;
	int rc = qc_tp_cut(w, s->ne, s->n_dims, d, n, &c, err);
	if (!rc && c.rule->split == QC_TP_COLS) /* the weight's own cut refuses it too; name the pair here */
		rc = qc_err_set(err, QC_EUNSUPPORTED, NULL, w, -1,
				"--tp %d: this weight is split by input columns, but it has an act-order permutation (%s, GPTQ desc_act); convert without --tp, or a checkpoint quantized without act-order",
				n, name);
	return rc;
}

/* Rank r's shard of plain tensor t into o. */
static int shard(const struct qc_gguf_model *m, const struct qc_plan *p, const struct qc_plan_tensor *t, int r,
		 int n, const struct qc_tp_dims *d, enum qc_target tgt, struct qc_plan_tensor *o, struct qc_err *err)
{
	struct qc_tp_cut c;
	int rc = qc_tp_cut(t->name, t->ne, t->n_dims, d, n, &c, err);
	if (rc)
		return rc;
	memset(o, 0, sizeof *o);
	o->base_off = snprintf(o->name, sizeof o->name, "tp%d.", r);
	if ((size_t)snprintf(o->name + o->base_off, sizeof o->name - (size_t)o->base_off, "%s", t->name) >=
	    sizeof o->name - (size_t)o->base_off)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, t->name, -1, "--tp: name too long with its rank prefix");
	o->rank = r;
	o->n_dims = t->n_dims;
	memcpy(o->ne, t->ne, sizeof o->ne);
	o->type = t->type;
	o->fused = t->fused;
	switch (c.rule->split) {
	case QC_TP_PERM: /* a row split keeps the whole permutation of its input */
		if ((rc = check_perm(m, t->name, d, n, err)))
			return rc;
		o->n_parts = t->n_parts;
		memcpy(o->parts, t->parts, sizeof o->parts);
		return QC_OK;
	case QC_TP_REPLICATE:
		o->n_parts = t->n_parts;
		memcpy(o->parts, t->parts, sizeof o->parts);
		return QC_OK;
	case QC_TP_VOCAB:
		o->ne[1] = 0;
		add_rows(o, t, p->tp_vocab[r][0], p->tp_vocab[r][1]);
		return QC_OK;
	case QC_TP_ROWS:
		if (t->n_dims == 1) {
			o->ne[0] = 0;
			for (int s = 0; !rc && s < c.n_sections; s++)
				rc = add_cols(o, t, n, r, c.off[s] + r * (c.size[s] / n), c.size[s] / n, err);
			return rc;
		}
		o->ne[1] = 0;
		for (int s = 0; s < c.n_sections; s++)
			add_rows(o, t, c.off[s] + r * (c.size[s] / n), c.size[s] / n);
		return QC_OK;
	case QC_TP_COLS:
		o->ne[0] = 0;
		rc = add_cols(o, t, n, r, c.off[0] + r * (c.size[0] / n), c.size[0] / n, err);
		return rc ? rc : check_cols(m, t, o, tgt, n, err);
	}
	return qc_err_set(err, QC_EUNSUPPORTED, NULL, t->name, -1, "--tp: unknown split"); /* not reached */
}

int qc_plan_shard(struct qc_plan *p, const struct qc_gguf_model *m, enum qc_target tgt, int n, const cJSON *cfg,
		  struct qc_err *err)
{
	if (n < 1 || n > QC_TP_MAX)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "--tp %d: ranks must be 1 to %d", n, QC_TP_MAX);
	struct qc_tp_dims d = { .ff = ff_width, .ctx = m };
	int rc;
	if ((rc = cfg_width(cfg, "n_head", 0, &d.n_head, err)) ||
	    (rc = cfg_width(cfg, "n_head_kv", d.n_head, &d.n_head_kv, err)) ||
	    (rc = cfg_width(cfg, "head_dim_k", 0, &d.head_dim_k, err)) ||
	    (rc = cfg_width(cfg, "head_dim_v", d.head_dim_k, &d.head_dim_v, err)) ||
	    (rc = vocab_ranges(p, m, tgt, n, cfg, err)))
		return rc;
	struct qc_plan_tensor *q = calloc((size_t)(p->n * (uint64_t)n) + 1, sizeof *q);
	if (!q)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	uint64_t k = 0, total = 0;
	for (int r = 0; r < n; r++)
		for (uint64_t i = 0; i < p->n; i++, k++) {
			if ((rc = shard(m, p, &p->t[i], r, n, &d, tgt, &q[k], err)) ||
			    (rc = qc_plan_finish_tensor(m, p, &q[k], tgt, err))) {
				free(q);
				return rc;
			}
			total += q[k].size;
		}
	/* the whole tensors' layout notes are about tensors this bundle does not hold */
	int kept = 0;
	for (int i = 0; i < p->n_notes; i++) {
		bool whole = false;
		for (uint64_t j = 0; j < p->n && !whole; j++)
			whole = p->t[j].note == i;
		for (uint64_t j = 0; j < k; j++) /* the shards' notes move down with the others */
			q[j].note = q[j].note == i ? kept : q[j].note;
		if (whole)
			free(p->notes[i]);
		else
			p->notes[kept++] = p->notes[i];
	}
	p->n_notes = kept;
	free(p->t);
	p->t = q;
	p->n = k;
	p->total_bytes = total;
	p->tp_size = n;
	return QC_OK;
}
