/* layout.h — how a tensor's bytes are arranged in a bundle, and per-target choices.
 *
 * Owns: enum qc_layout (append-only: ids are on disk), the target list and the rule
 * that picks a layout for (target, type). Every layout can be undone back to plain
 * ggml rows, which is what `qconvert dump` and the CPU backend read.
 * Today every target stores ggml blocks as-is (QC_LAYOUT_GGML); tensor-core
 * layouts for sm80+ are added here as new ids with their pack/unpack pair.
 */
#ifndef QC_LAYOUT_H
#define QC_LAYOUT_H

#include <stdint.h>

#include "qc_err.h"
#include "qtype.h"

enum qc_layout {
	QC_LAYOUT_GGML = 0, /* ggml blocks, rows in order, ne[0] fastest: byte-identical to GGUF */
	QC_LAYOUT_COUNT,
};

enum qc_target {
	QC_TARGET_CPU = 0,
	QC_TARGET_SM80,
	QC_TARGET_SM86,
	QC_TARGET_SM89,
	QC_TARGET_SM90,
	QC_TARGET_COUNT,
};

const char *qc_layout_name(enum qc_layout l);
int qc_layout_from_name(const char *name);            /* -1 when unknown */
const char *qc_target_name(enum qc_target t);
int qc_target_from_name(const char *name);            /* -1 when unknown */

/* Layout qconvert writes for a tensor of this type on this target. */
enum qc_layout qc_target_layout(enum qc_target tgt, enum qc_type type, uint32_t n_dims);

/* Bytes a tensor of shape ne occupies in layout l; QC_EFORMAT if the shape does not
 * fit the layout, QC_ERANGE on overflow. */
int qc_layout_bytes(enum qc_layout l, enum qc_type type, const int64_t ne[4], uint64_t *bytes);

/* Undo layout l: write rows [row0, row0+n_rows) of the flattened [rows, ne[0]] view as
 * plain ggml blocks into out (n_rows * row_bytes). */
int qc_layout_unpack_rows(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *packed,
			  uint64_t row0, uint64_t n_rows, uint8_t *out, struct qc_err *err);

#endif
