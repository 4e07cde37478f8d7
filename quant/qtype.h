/* qtype.h — per-encoding traits, generated from qtype.def.
 *
 * Owns: enum qc_type (frozen GGML ids), struct qc_type_traits and the table.
 * Everything that depends on an encoding (sizes, names, decoding) reads this
 * table; no other file switches on a type. Adding a type = one qtype.def line,
 * its block struct in quant/qblock.h and its decoder in runtime/ops/.
 */
#ifndef QC_QTYPE_H
#define QC_QTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qc_err.h"

/* One member of id + 1 bytes per type: the union's size is one past the largest
 * id, so QC_TYPE_COUNT follows qtype.def (char arrays: no padding). Never used
 * as an object. */
union qc_type_id_span {
#define QC_TYPE(E, id, name, be, bb, fam, q, tol) char E[(id) + 1];
#include "qtype.def"
#undef QC_TYPE
};

enum qc_type {
#define QC_TYPE(E, id, name, be, bb, fam, q, tol) QC_TYPE_##E = id,
#include "qtype.def"
#undef QC_TYPE
	/* one past the largest id; ids with block_elems 0 are holes */
	QC_TYPE_COUNT = (int)sizeof(union qc_type_id_span),
};

enum qc_family {
	QC_FAMILY_NONE = 0,
	QC_FAMILY_FLOAT,     /* f32/f16/bf16/f64 */
	QC_FAMILY_PLAIN_INT, /* i8..i64, not weights */
	QC_FAMILY_INT,       /* 32-element int blocks with scale (and min) */
	QC_FAMILY_KQUANT,    /* 256-element super-blocks */
	QC_FAMILY_IQUANT,    /* lattice/codebook quants */
	QC_FAMILY_TERNARY,
	QC_FAMILY_FP4,
	QC_FAMILY_FP8,       /* e4m3 codes with a per-block scale */
	QC_FAMILY_W8A8,      /* e4m3 weights whose activations are rounded to e4m3 too (f8_a8):
			        a matmul that multiplies float activations would change the model */
};

/* Decode n_elems (a multiple of block_elems) values from src blocks to dst. */
typedef void (*qc_dequant_row_fn)(const void *src, float *dst, int64_t n_elems);
/* Encode n_elems floats into blocks (reference, round-to-nearest). */
typedef void (*qc_quant_row_fn)(const float *src, void *dst, int64_t n_elems);

struct qc_type_traits {
	const char *name;          /* GGML's lower-case name ("q4_K"), NULL for holes */
	int64_t block_elems;       /* elements per block; 0 marks an unused id */
	int64_t block_bytes;       /* bytes per block */
	enum qc_family family;
	qc_dequant_row_fn dequant_row;
	qc_quant_row_fn quant_row; /* NULL when no encoder is provided */
	double nmse_tol;
};

extern const struct qc_type_traits qc_types[QC_TYPE_COUNT];

/* true if id names a type this build decodes. */
bool qc_type_valid(uint32_t id);

/* Traits for a valid type (caller checked qc_type_valid). */
static inline const struct qc_type_traits *qc_type_get(enum qc_type t)
{
	return &qc_types[t];
}

/* Type by name ("q4_K", case-insensitive); -1 when unknown. */
int qc_type_from_name(const char *name);

/* Bytes of a row of n_elems; QC_EFORMAT when n_elems is not a multiple of the
 * block size, QC_ERANGE on overflow. */
int qc_type_row_bytes(enum qc_type t, uint64_t n_elems, uint64_t *out_bytes);

/* Bits per weight, for reports. */
double qc_type_bpw(enum qc_type t);

#endif
