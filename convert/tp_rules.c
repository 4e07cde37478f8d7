/* tp_rules.c — the split table of `qconvert --tp N` and its arithmetic (see tp_rules.h).
 * Megatron-LM's split (column-parallel Q/K/V and gate/up, row-parallel O and down,
 * vocabulary-parallel embedding and output), stated per GGUF tensor name. */
#include "tp_rules.h"

#include <stdbool.h>
#include <string.h>

#define ROWS1(p, u) { p, QC_TP_ROWS, 1, { u } }
#define COLS1(p, u) { p, QC_TP_COLS, 1, { u } }
#define REPL(p) { p, QC_TP_REPLICATE, 0, { 0 } }

const struct qc_tp_rule qc_tp_rules[] = {
	{ "token_embd.weight", QC_TP_VOCAB, 0, { 0 } },
	{ "output.weight", QC_TP_VOCAB, 0, { 0 } },
	REPL("output_norm.weight"),
	REPL("rope_freqs.weight"),
	REPL("rope_factors_long.weight"),
	REPL("rope_factors_short.weight"),
	REPL("blk.#.attn_norm.weight"),
	REPL("blk.#.ffn_norm.weight"),
	REPL("blk.#.post_attention_norm.weight"),
	REPL("blk.#.post_ffw_norm.weight"),
	REPL("blk.#.attn_q_norm.weight"),
	REPL("blk.#.attn_k_norm.weight"),
	ROWS1("blk.#.attn_q.weight", QC_TP_U_HEAD),
	ROWS1("blk.#.attn_q.bias", QC_TP_U_HEAD),
	ROWS1("blk.#.attn_k.weight", QC_TP_U_KV),
	ROWS1("blk.#.attn_k.bias", QC_TP_U_KV),
	ROWS1("blk.#.attn_v.weight", QC_TP_U_KV_V),
	ROWS1("blk.#.attn_v.bias", QC_TP_U_KV_V),
	/* Phi-3: one matrix of Q rows, K rows, V rows */
	{ "blk.#.attn_qkv.weight", QC_TP_ROWS, 3, { QC_TP_U_HEAD, QC_TP_U_KV, QC_TP_U_KV_V } },
	{ "blk.#.attn_qkv.bias", QC_TP_ROWS, 3, { QC_TP_U_HEAD, QC_TP_U_KV, QC_TP_U_KV_V } },
	/* plan.c's fusion where V's encoding differs: Q rows, K rows */
	{ "blk.#.attn_qk.weight", QC_TP_ROWS, 2, { QC_TP_U_HEAD, QC_TP_U_KV } },
	COLS1("blk.#.attn_output.weight", QC_TP_U_HEAD_V),
	ROWS1("blk.#.ffn_gate.weight", QC_TP_U_FF),
	ROWS1("blk.#.ffn_up.weight", QC_TP_U_FF),
	/* Phi-3: gate rows then up rows in one ffn_up (2F rows; the extent tells) */
	{ "blk.#.ffn_up.weight", QC_TP_ROWS, 2, { QC_TP_U_FF, QC_TP_U_FF } },
	/* plan.c's fusion: gate rows then up rows */
	{ "blk.#.ffn_gate_up.weight", QC_TP_ROWS, 2, { QC_TP_U_FF, QC_TP_U_FF } },
	COLS1("blk.#.ffn_down.weight", QC_TP_U_FF),
	REPL("blk.#.ffn_gate_inp.weight"),
	ROWS1("blk.#.ffn_gate_exps.weight", QC_TP_U_FF_EXP),
	ROWS1("blk.#.ffn_up_exps.weight", QC_TP_U_FF_EXP),
	/* plan.c's fusion: per expert, gate rows then up rows */
	{ "blk.#.ffn_gate_up_exps.weight", QC_TP_ROWS, 2, { QC_TP_U_FF_EXP, QC_TP_U_FF_EXP } },
	COLS1("blk.#.ffn_down_exps.weight", QC_TP_U_FF_EXP),
	REPL("blk.#.ffn_gate_inp_shexp.weight"),
	ROWS1("blk.#.ffn_gate_shexp.weight", QC_TP_U_FF_SHEXP),
	ROWS1("blk.#.ffn_up_shexp.weight", QC_TP_U_FF_SHEXP),
	COLS1("blk.#.ffn_down_shexp.weight", QC_TP_U_FF_SHEXP),
	/* GPTQ / compressed-tensors act-order (convert/hf_quant.h): follows its weight */
	{ "*.act_perm", QC_TP_PERM, 0, { 0 } },
};
const int qc_tp_n_rules = (int)(sizeof qc_tp_rules / sizeof qc_tp_rules[0]);

static const char *const unit_names[QC_TP_U_COUNT] = {
	[QC_TP_U_HEAD] = "n_head",
	[QC_TP_U_KV] = "n_head_kv",
	[QC_TP_U_KV_V] = "n_head_kv",
	[QC_TP_U_HEAD_V] = "n_head",
	[QC_TP_U_FF] = "n_ff",
	[QC_TP_U_FF_EXP] = "n_ff_expert",
	[QC_TP_U_FF_SHEXP] = "n_ff_shexp",
};

const char *qc_tp_unit_name(enum qc_tp_unit u)
{
	return (unsigned)u < QC_TP_U_COUNT ? unit_names[u] : "?";
}

/* Glob: '#' matches a decimal layer number (stored in *layer), '*' any non-empty text. */
static bool match(const char *p, const char *s, long *layer)
{
	for (; *p; p++, s++) {
		if (*p == '#') {
			if (*s < '0' || *s > '9')
				return false;
			long v = 0;
			for (; *s >= '0' && *s <= '9' && v < 100000000; s++)
				v = v * 10 + (*s - '0');
			*layer = v;
			s--;
		} else if (*p == '*') {
			if (!*s)
				return false;
			for (const char *t = s + 1;; t++) { /* '*' takes s[0..t) */
				if (match(p + 1, t, layer))
					return true;
				if (!*t)
					return false;
			}
		} else if (*p != *s) {
			return false;
		}
	}
	return *s == '\0';
}

const struct qc_tp_rule *qc_tp_rule_of(const char *name)
{
	long layer;
	for (int i = 0; i < qc_tp_n_rules; i++)
		if (match(qc_tp_rules[i].pattern, name, &layer))
			return &qc_tp_rules[i];
	return NULL;
}

/* count and unit size of a section of unit u */
static int section(const struct qc_tp_dims *d, long layer, enum qc_tp_unit u, int64_t *count, int64_t *unit)
{
	switch (u) {
	case QC_TP_U_HEAD: *count = d->n_head; *unit = d->head_dim_k; break;
	case QC_TP_U_KV: *count = d->n_head_kv; *unit = d->head_dim_k; break;
	case QC_TP_U_KV_V: *count = d->n_head_kv; *unit = d->head_dim_v; break;
	case QC_TP_U_HEAD_V: *count = d->n_head; *unit = d->head_dim_v; break;
	default:
		*count = d->ff ? d->ff(d->ctx, layer, u) : -1;
		*unit = 1;
		break;
	}
	return *count > 0 && *unit > 0 ? QC_OK : QC_ENOTFOUND;
}

int qc_tp_cut(const char *name, const int64_t ne[4], uint32_t n_dims, const struct qc_tp_dims *d, int n,
	      struct qc_tp_cut *cut, struct qc_err *err)
{
	bool named = false;
	int64_t extent = 0;
	memset(cut, 0, sizeof *cut);
	for (int i = 0; i < qc_tp_n_rules; i++) {
		const struct qc_tp_rule *r = &qc_tp_rules[i];
		long layer = -1;
		if (!match(r->pattern, name, &layer))
			continue;
		named = true;
		cut->rule = r;
		cut->layer = layer;
		if (r->split != QC_TP_ROWS && r->split != QC_TP_COLS)
			return QC_OK;
		extent = r->split == QC_TP_COLS || n_dims == 1 ? ne[0] : ne[1];
		int64_t off = 0, count[QC_TP_MAX_SECTIONS], unit[QC_TP_MAX_SECTIONS];
		bool known = true;
		for (int s = 0; s < r->n_sections; s++) {
			known = known && section(d, layer, r->sections[s], &count[s], &unit[s]) == QC_OK;
			if (known) {
				cut->off[s] = off;
				cut->size[s] = count[s] * unit[s];
				off += cut->size[s];
			}
		}
		if (!known || off != extent)
			continue; /* another row of this name may fit (ffn_up: F or 2F rows) */
		cut->n_sections = r->n_sections;
		for (int s = 0; s < r->n_sections; s++)
			if (count[s] % n)
				return qc_err_set(err, QC_EINVAL, NULL, name, -1,
						  "--tp %d: %s %lld is not divisible by %d (this tensor is split by %s)", n,
						  qc_tp_unit_name(r->sections[s]), (long long)count[s], n,
						  r->split == QC_TP_ROWS ? "output rows" : "input columns");
		return QC_OK;
	}
	if (!named)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, name, -1,
				  "--tp: no split rule for this tensor (convert/tp_rules.c lists the tensors that can be sharded); refusing to guess");
	const bool cols = cut->rule->split == QC_TP_COLS;
	cut->rule = NULL;
	return qc_err_set(err, QC_EUNSUPPORTED, NULL, name, -1,
			  "--tp: its %lld %s do not add up to the model's widths (n_head %lld, n_head_kv %lld, head_dim %lld/%lld, or the layer's FFN width from its down matrix); cannot split it",
			  (long long)extent, cols ? "columns" : "rows", (long long)d->n_head, (long long)d->n_head_kv,
			  (long long)d->head_dim_k, (long long)d->head_dim_v);
}
