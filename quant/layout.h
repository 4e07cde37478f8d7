/* layout.h — how a tensor's bytes are arranged in a bundle, and per-target choices.
 *
 * Owns: enum qc_layout (append-only: ids are on disk), the target list and the rule
 * that picks a layout for (target, type). Every layout can be undone back to plain
 * ggml rows, which is what `qconvert dump` and the CPU backend read.
 * cpu stores ggml blocks as-is; sm80+ store q4_0/q8_0/q4_1/q4_K/hq4/q5_K/hq8 matrices in the
 * marlin tensor-core layouts (layout_marlin.h, docs/layout-marlin.md) when the shape fits.
 * sm100 also stores nvfp4 matrices with CUTLASS block-scale tiles (nvfp4_swz,
 * layout_nvfp4.h, docs/layout-nvfp4.md); sm80..sm90 keep nvfp4 ggml.
 */
#ifndef QC_LAYOUT_H
#define QC_LAYOUT_H

#include <stdint.h>

#include "qc_err.h"
#include "qtype.h"

enum qc_layout {
	QC_LAYOUT_GGML = 0, /* ggml blocks, rows in order, ne[0] fastest: byte-identical to GGUF */
	QC_LAYOUT_MARLIN_I4 = 1, /* 4-bit codes in mma B-fragment order + group-32 fp16 scales */
	QC_LAYOUT_MARLIN_I8 = 2, /* 8-bit codes, likewise */
	QC_LAYOUT_MARLIN_I4Z = 3, /* 4-bit codes + fp16 scale and offset per group (+ exact headers) */
	QC_LAYOUT_MARLIN_I8Z = 4, /* 8-bit codes (i8 order) + fp16 scale and offset per group (+ exact headers) */
	QC_LAYOUT_NVFP4_SWZ = 5, /* nvfp4: code rows + e4m3 scales in CUTLASS sm100 128x4 tiles + global scales */
	QC_LAYOUT_COUNT,
};

enum qc_target {
	QC_TARGET_CPU = 0,
	QC_TARGET_SM80,
	QC_TARGET_SM86,
	QC_TARGET_SM89,
	QC_TARGET_SM90,
	QC_TARGET_SM100,           /* sm90's choices, and nvfp4 in nvfp4_swz */
	QC_TARGET_COUNT,
};

const char *qc_layout_name(enum qc_layout l);
int qc_layout_from_name(const char *name);            /* -1 when unknown */
const char *qc_target_name(enum qc_target t);
int qc_target_from_name(const char *name);            /* -1 when unknown */

/* Layout the target's kernels want for a tensor of this type (shape not considered). */
enum qc_layout qc_target_layout(enum qc_target tgt, enum qc_type type, uint32_t n_dims);

/* Layout qconvert writes for this tensor: qc_target_layout when the shape fits it,
 * else QC_LAYOUT_GGML with *why (may be NULL; static text) saying what did not fit;
 * *why is NULL when nothing was given up. */
enum qc_layout qc_target_layout_for(enum qc_target tgt, enum qc_type type, const int64_t ne[4], uint32_t n_dims,
				    const char **why);

/* Bytes per row in layout l (ggml rows: the row size; marlin: a stripe's bytes over
 * its rows): a slice is ne[1] of them, row r of a stripe-aligned range starts at
 * r * row bytes. nvfp4_swz: K/2, the code bytes of a row; its slice is longer (the
 * padded scale tiles and global scales follow the codes: qc_layout_bytes of one
 * slice) and its rows are not addressable as matrices of their own.
 * QC_EFORMAT when ne0 does not fit. */
int qc_layout_row_bytes(enum qc_layout l, enum qc_type type, int64_t ne0, uint64_t *bytes);

/* Pack one ne[0] x ne[1] slice: rows holds its ne[1] ggml rows, out receives
 * qc_layout_bytes of that one slice (ne[1] * qc_layout_row_bytes but for nvfp4_swz)
 * in layout l. Caller checked the shape (qc_layout_bytes); nvfp4_swz also fails
 * (QC_EFORMAT) on scales it cannot keep exactly (qc_nvfp4_swz_data_fits says first). */
int qc_layout_pack_slice(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *rows,
			 uint8_t *out, struct qc_err *err);

/* Bytes a tensor of shape ne occupies in layout l; QC_EFORMAT if the shape does not
 * fit the layout, QC_ERANGE on overflow. */
int qc_layout_bytes(enum qc_layout l, enum qc_type type, const int64_t ne[4], uint64_t *bytes);

/* Undo layout l: write rows [row0, row0+n_rows) of the flattened [rows, ne[0]] view as
 * plain ggml blocks into out (n_rows * row_bytes). */
int qc_layout_unpack_rows(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *packed,
			  uint64_t row0, uint64_t n_rows, uint8_t *out, struct qc_err *err);

#endif
