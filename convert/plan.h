/* plan.h — which tensors a bundle will hold, built from the source before any
 * byte is written: names, shapes, encodings, layouts, sizes, and fusions.
 * Fusion rule (MoE): per layer N, ffn_gate_exps and ffn_up_exps of the same
 * type and shape become one "blk.N.ffn_gate_up_exps.weight" ([H, 2I, E]; per
 * expert gate rows first, then up rows). Different encodings stay separate and
 * the reason is kept in the plan's notes (printed once by the CLI). */
#ifndef QC_PLAN_H
#define QC_PLAN_H

#include <stdint.h>

#include "gguf.h"
#include "layout.h"
#include "layout_marlin.h"

#define QC_PLAN_MAX_PARTS 2
#define QC_PLAN_NAME_MAX 96

struct qc_plan_part {
	const struct qc_gguf_tensor *src;
	int64_t row0, n_rows;      /* rows of each ne[2]*ne[3] slice this part occupies */
};

struct qc_plan_tensor {
	char name[QC_PLAN_NAME_MAX];
	uint32_t n_dims;
	int64_t ne[4];
	enum qc_type type;
	enum qc_layout layout;
	uint64_t size;             /* bytes in the bundle */
	int n_parts;               /* 1 = plain copy, 2 = fused */
	struct qc_plan_part parts[QC_PLAN_MAX_PARTS];
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
};

enum qc_plan_flags {
	QC_PLAN_FUSE_MOE = 1 << 0,
};

int qc_plan_build(const struct qc_gguf_model *m, enum qc_target tgt, unsigned flags, struct qc_plan **out,
		  struct qc_err *err);
void qc_plan_free(struct qc_plan *p); /* accepts NULL */

#endif
