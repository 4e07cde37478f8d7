/* layout_marlin.h — the Marlin-class tensor-core layouts (marlin_i4 / _i8 / _i4z / _i8z / _i6).
 *
 * Owns: which encodings go into which marlin layout, whether a shape fits, the pack
 * of one [N rows, K] ggml matrix and the exact unpack back to ggml blocks, and the
 * error of the values the kernel uses. Byte layout (docs/layout-marlin.md): stripes
 * of 64 (i4) / 32 (i8) rows, each its codes as 16-byte-per-lane m16n8k16 B-fragment
 * tiles, then its permuted fp16 group-32 scales (i4z/i8z: + offsets + kept headers).
 * marlin_i6 (q6_K, lossless: its bytes are ggml's, rearranged) has its own geometry
 * in layout_marlin6.c; the functions here check its fit and delegate to it.
 * Invariants: unpack(pack(x)) == x byte for byte; stripe-aligned row ranges sit at
 * r0 * qc_marlin_row_bytes and are packed matrices of their own; no padding (shapes
 * that do not fit stay ggml). q5_K's 5-bit codes are stored as int8 (i8z).
 * Non-goals: act-order, other group sizes.
 * Reference: PTX ISA "Matrix Fragments for mma.m16n8k16"; fragment-ordered weights
 * are IST-DASLab Marlin's idea (facts only).
 */
#ifndef QC_LAYOUT_MARLIN_H
#define QC_LAYOUT_MARLIN_H

#include <stdbool.h>
#include <stdint.h>

#include "layout.h"

#define QC_MARLIN_TILE_K 16       /* k rows of one mma B tile */
#define QC_MARLIN_GROUP 32        /* k elements per fp16 scale */
#define QC_MARLIN_LANE_BYTES 16   /* bytes each lane of a warp loads per tile */
#define QC_MARLIN_STRIPE_I4 64    /* n columns per i4 tile: 32 lanes x 32 nibbles / 16 k */
#define QC_MARLIN_STRIPE_I8 32    /* n columns per i8 tile: 32 lanes x 16 bytes / 16 k */
#define QC_MARLIN_STRIPE_I6 64    /* n columns per i6 stripe: its low nibbles are i4 tiles */

/* True for the marlin layout ids. */
bool qc_marlin_is(enum qc_layout l);

/* Bits per stored code of marlin layout l: 4 (i4, i4z), 6 (i6) or 8 (i8, i8z). */
int qc_marlin_bits(enum qc_layout l);

/* True when layout l stores an fp16 offset per group after the scales (i4z, i8z):
 * the kernels compute code·s + o instead of code·d. */
bool qc_marlin_has_offsets(enum qc_layout l);

/* The marlin layout an encoding packs into, or QC_LAYOUT_GGML when none does. */
enum qc_layout qc_marlin_layout_for(enum qc_type type);

/* Columns (ggml rows) per stripe of layout l (64 for 4- and 6-bit, 32 for 8-bit
 * codes). l must be a marlin id. */
int qc_marlin_stripe(enum qc_layout l);

/* Whether a tensor of this type and shape can be stored in layout l. On false,
 * *why (may be NULL) gets a static sentence saying what does not fit. */
bool qc_marlin_fits(enum qc_layout l, enum qc_type type, const int64_t ne[4], uint32_t n_dims, const char **why);

/* Bytes one stripe takes, divided by its rows: rows [r0, r1) on stripe boundaries
 * sit at r0 * row_bytes and are a packed matrix of their own. Equal to the ggml
 * row bytes for marlin_i4/_i8 (and q4_1 in i4z); larger where a verbatim header
 * is kept (q4_K, hq4 in i4z) and for q5_K in i8z (8-bit codes, scales, offsets
 * and headers: K·19/16 bytes); q6_K in i6: K·210/256, the ggml row size.
 * QC_EFORMAT when the type or ne0 does not fit. */
int qc_marlin_row_bytes(enum qc_layout l, enum qc_type type, int64_t ne0, uint64_t *bytes);

/* Bytes in layout l; QC_EFORMAT when the shape or type does not fit, QC_ERANGE on
 * overflow. */
int qc_marlin_bytes(enum qc_layout l, enum qc_type type, const int64_t ne[4], uint64_t *bytes);

/* Pack one slice: rows = ne[1] ggml rows of ne[0] elements, out = ne[1] *
 * qc_marlin_row_bytes bytes. Caller checked qc_marlin_fits. Never fails on data
 * (any code and scale bits are kept); QC_ENOMEM for its one-stripe buffer. */
int qc_marlin_pack_slice(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *rows,
			 uint8_t *out, struct qc_err *err);

/* Undo layout l for rows [row0, row0+n_rows) of the flattened [ne[1]*ne[2]*ne[3],
 * ne[0]] view, writing ggml blocks to out. QC_EFORMAT if the shape does not fit. */
int qc_marlin_unpack_rows(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *packed,
			  uint64_t row0, uint64_t n_rows, uint8_t *out, struct qc_err *err);

/* What the kernel computes from layout l against the exact ggml values: i4/i8
 * are exact up to the fp16 rounding of d*q; i4z/i8z round their scale and offset
 * to fp16 once (q4_K: d*sc and dmin*m; hq4: d and d*z; q5_K: d*sc and
 * 16*d*sc - dmin*m) and then fp16(code*s + o); i6 computes ggml's float value
 * (d*sc)*(q - 32) itself (max 0). */
struct qc_marlin_err {
	uint64_t n;        /* elements compared */
	double max_abs;    /* max |kernel value - ggml value| (NaN if any value is NaN) */
	double rms;        /* root mean square of the difference */
	double rms_w;      /* root mean square of the ggml values, for scale */
};

/* Fill *e over a whole tensor in layout l (all slices). QC_EFORMAT on a misfit. */
int qc_marlin_error(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *packed,
		    struct qc_marlin_err *e, struct qc_err *err);

#endif
