/* plan.h — which tensors a bundle will hold, built from the source before any
 * byte is written: names, shapes, encodings, layouts, sizes, and fusions.
 * Fusion rules (plan.c's table): per layer N, ffn_gate_exps and ffn_up_exps of
 * the same type and shape become one "blk.N.ffn_gate_up_exps.weight" ([H, 2I, E];
 * per expert gate rows first, then up rows) (QC_PLAN_FUSE_MOE); for a target whose
 * tensor-core layouts take them, attn_q|attn_k|attn_v become "blk.N.attn_qkv.weight"
 * (or attn_q|attn_k "attn_qk.weight" where V's encoding differs) and ffn_gate|ffn_up
 * "blk.N.ffn_gate_up.weight", rows stacked in that order (QC_PLAN_FUSE_DENSE).
 * What does not fuse stays separate and the reason is kept in the plan's notes
 * (one per group and reason, printed once by the CLI).
 * Tensor parallelism (`--tp N`, docs/tp.md): qc_plan_shard turns the plain plan
 * into N ranks' shards "tp<r>.<name>" (plan_tp.c, by convert/tp_rules.h's table);
 * each shard is parts of source tensors (row ranges, and for a column split a
 * block-aligned column range of every row), so it is gathered, never decoded. */
#ifndef QC_PLAN_H
#define QC_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "bundle_tp.h"
#include "gguf.h"
#include "layout.h"
#include "layout_marlin.h"

#define QC_PLAN_MAX_PARTS 3         /* attn_qkv (fused, or a --tp shard of one): its Q, K and V rows */
#define QC_PLAN_NAME_MAX 96

/* Rows [src_row0, src_row0 + n_rows) of each ne[2]*ne[3] slice of src, elements
 * [col0, col0 + n_cols) of each of those rows, at rows [row0, row0 + n_rows) of the
 * tensor's slice. Parts are written in order, each row by row: they stack by rows,
 * or (a 1-D tensor, one row) follow each other along it. */
struct qc_plan_part {
	const struct qc_gguf_tensor *src;
	int64_t row0, n_rows;      /* rows of each ne[2]*ne[3] slice this part occupies */
	int64_t src_row0;          /* its first row in each slice of src (0 but in --tp shards) */
	int64_t col0, n_cols;      /* elements of each src row (0 and ne[0] but in column shards;
				      block-aligned) */
};

struct qc_plan_tensor {
	char name[QC_PLAN_NAME_MAX];
	uint32_t n_dims;
	int64_t ne[4];
	enum qc_type type;
	enum qc_layout layout;
	uint64_t size;             /* bytes in the bundle */
	int n_parts;               /* 1 = plain copy, more = fused or a shard's sections */
	struct qc_plan_part parts[QC_PLAN_MAX_PARTS];
	bool fused;                /* parts are distinct source tensors (gate|up, q|k|v), listed in the
				      manifest's "parts" (names prefixed "tp<r>." in a shard) */
	int rank;                  /* -1, or the --tp rank whose shard this is */
	int base_off;              /* name + base_off: the original name (after "tp<r>.") */
	int note;                  /* index of the plan note on its layout, -1 when none */
	/* filled while writing */
	uint64_t off, xxh3;
	struct qc_marlin_err lay_err;   /* marlin_i4z/_i8z: kernel values vs ggml values (n = 0: none) */
};

struct qc_plan {
	uint64_t n;
	struct qc_plan_tensor *t;
	char **notes;              /* human-readable decisions worth a log line */
	int n_notes;
	uint64_t total_bytes;
	int tp_size;               /* 0: a plain bundle; N: shards for N ranks, rank 0's first */
	int64_t tp_vocab[QC_TP_MAX][2]; /* rank r's vocabulary rows: first, count */
};

enum qc_plan_flags {
	QC_PLAN_FUSE_MOE = 1 << 0,
	QC_PLAN_FUSE_DENSE = 1 << 1,
	QC_PLAN_FUSE_ALL = QC_PLAN_FUSE_MOE | QC_PLAN_FUSE_DENSE,
};

int qc_plan_build(const struct qc_gguf_model *m, enum qc_target tgt, unsigned flags, struct qc_plan **out,
		  struct qc_err *err);
void qc_plan_free(struct qc_plan *p); /* accepts NULL */

struct cJSON;

/* Replace plain plan p (from qc_plan_build) by the shards of n ranks (1..QC_TP_MAX):
 * every tensor cut by convert/tp_rules.h's table, widths from cfg (the manifest's
 * "config": n_head, n_head_kv, head_dim_k/_v, n_vocab) and the layers' down matrices;
 * rank 0's tensors first, each rank in p's order. QC_EINVAL / QC_EUNSUPPORTED naming
 * the tensor for a width not divisible by n, a column cut off the encoding's blocks or
 * the target layout's K groups, a column split of an act-order weight, or a tensor no
 * rule names; p is unchanged then. */
int qc_plan_shard(struct qc_plan *p, const struct qc_gguf_model *m, enum qc_target tgt, int n,
		  const struct cJSON *cfg, struct qc_err *err);

/* For plan.c and plan_tp.c: choose t's layout (the target's, or ggml with a note in p
 * saying why) and its size. */
int qc_plan_finish_tensor(const struct qc_gguf_model *m, struct qc_plan *p, struct qc_plan_tensor *t,
			  enum qc_target tgt, struct qc_err *err);

/* Note a decision in p (printf format); QC_ENOMEM. */
int qc_plan_note(struct qc_plan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Whether t is one whole source tensor (not fused, not a shard's cut). */
bool qc_plan_tensor_whole(const struct qc_plan_tensor *t);

/* Copy slice sl of t's ggml rows (t->ne[1] rows of ne[0] elements) from its parts into
 * out, releasing the source pages read. */
void qc_plan_gather_slice(const struct qc_gguf_model *m, const struct qc_plan_tensor *t, uint64_t sl, uint8_t *out);

#endif
