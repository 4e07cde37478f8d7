/* tp_rules.h — how `qconvert --tp N` cuts each tensor (docs/tp.md "The split").
 *
 * Owns: the one table from tensor name to split (output rows by Q head / K/V head /
 * FFN row, input columns, vocabulary rows, replicated), the sections of a tensor
 * that holds several matrices (Phi-3's attn_qkv, gate|up ffn_up, fused MoE gate|up:
 * each section is split on its own and rank r keeps its part of each, in order),
 * and the widths' divisibility checks. plan_tp.c plans shards with it; dump.c and
 * inspect.c read it back.
 * Invariants: a name no row matches is refused (never guessed); a split is always
 * into N equal parts of every section (the vocabulary excepted: tp.vocab ranges).
 */
#ifndef QC_TP_RULES_H
#define QC_TP_RULES_H

#include <stdint.h>

#include "qc_err.h"

#define QC_TP_MAX_SECTIONS 3

enum qc_tp_split {
	QC_TP_REPLICATE = 0,       /* whole on every rank */
	QC_TP_ROWS,                /* output rows (ne[1]; a 1-D bias: its elements), per section */
	QC_TP_COLS,                /* input columns (ne[0]): each rank's part is a partial sum */
	QC_TP_VOCAB,               /* rows by the bundle's tp.vocab ranges */
	QC_TP_PERM,                /* "<base>.act_perm": goes with its weight (replicated beside a row
				      split; a column split of a permuted weight is refused) */
};

/* What a section counts: its size along the split axis is count * unit elements. */
enum qc_tp_unit {
	QC_TP_U_HEAD = 0,          /* n_head query heads of head_dim_k */
	QC_TP_U_KV,                /* n_head_kv K heads of head_dim_k */
	QC_TP_U_KV_V,              /* n_head_kv V heads of head_dim_v */
	QC_TP_U_HEAD_V,            /* n_head attention outputs of head_dim_v (attn_output columns) */
	QC_TP_U_FF,                /* the layer's dense FFN width: ffn_down's ne[0] */
	QC_TP_U_FF_EXP,            /* per-expert FFN width: ffn_down_exps' ne[0] */
	QC_TP_U_FF_SHEXP,          /* shared-expert FFN width: ffn_down_shexp's ne[0] */
	QC_TP_U_COUNT,
};

/* One row of the table. */
struct qc_tp_rule {
	const char *pattern;       /* "blk.#.attn_q.weight": '#' stands for a layer number */
	enum qc_tp_split split;
	int n_sections;            /* ROWS/COLS: sections along the axis, in order */
	enum qc_tp_unit sections[QC_TP_MAX_SECTIONS];
};

/* The model's widths a split is measured in. ff(ctx, layer, unit) gives a layer's
 * FFN width of unit QC_TP_U_FF* (-1 when the layer has no such FFN). */
struct qc_tp_dims {
	int64_t n_head, n_head_kv, head_dim_k, head_dim_v;
	int64_t (*ff)(const void *ctx, long layer, enum qc_tp_unit u);
	const void *ctx;
};

/* A tensor's split into n ranks: rank r's part of section s is [off[s] + r*size[s]/n,
 * + size[s]/n) along the axis (rows, or columns for COLS; elements of a 1-D tensor). */
struct qc_tp_cut {
	const struct qc_tp_rule *rule;
	long layer;                /* the '#' of the pattern, -1 when none */
	int n_sections;
	int64_t off[QC_TP_MAX_SECTIONS], size[QC_TP_MAX_SECTIONS]; /* whole tensor, elements/rows */
};

/* The table (tp_rules.c) and its length. */
extern const struct qc_tp_rule qc_tp_rules[];
extern const int qc_tp_n_rules;

/* Name of unit u as the user knows it ("n_head", "n_ff_expert", ...). */
const char *qc_tp_unit_name(enum qc_tp_unit u);

/* The first row of the table whose pattern matches name (its split: every row of a
 * name splits the same way), or NULL. */
const struct qc_tp_rule *qc_tp_rule_of(const char *name);

/* Cut tensor `name` of shape ne (n_dims) into n ranks. The axis is the rule's: ne[1]
 * for a row split of a matrix, ne[0] for a column split or a 1-D tensor (unused for
 * REPLICATE/VOCAB/PERM). Of the rows whose pattern matches, the first whose sections
 * add up to the extent is taken (ffn_up: F rows, or Phi-3's 2F = gate|up).
 * QC_EUNSUPPORTED naming the tensor when no row matches its name, or none its extent;
 * QC_EINVAL naming the tensor and the width when a section's count is not divisible
 * by n. */
int qc_tp_cut(const char *name, const int64_t ne[4], uint32_t n_dims, const struct qc_tp_dims *d, int n,
	      struct qc_tp_cut *cut, struct qc_err *err);

#endif
