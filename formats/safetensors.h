/* safetensors.h — reader for one .safetensors file over a mapping or caller memory.
 *
 * File layout (Hugging Face safetensors, little-endian):
 *   1. u64 N: byte length of the header
 *   2. N bytes of UTF-8 JSON: one object; "__metadata__" (optional) maps string → string;
 *      every other key is a tensor name → {"dtype": "F32", "shape": [..],
 *      "data_offsets": [begin, end]}; trailing spaces pad the header (writers align to 8)
 *   3. the data section: tensor bytes at [8 + N + begin, 8 + N + end), row-major,
 *      little-endian, shape[0] slowest
 * Checks: N ≤ QC_ST_MAX_HEADER and ≤ file size − 8; JSON nesting ≤ QC_ST_MAX_DEPTH;
 * dtype known; shape entries and offsets exact non-negative integers < 2^53;
 * product(shape) × element size == end − begin (checked arithmetic); begin ≤ end ≤ data
 * size; spans do not overlap (gaps are allowed, the reference library rejects them);
 * names non-empty and unique (cJSON 1.7 keeps both members of a duplicated key in its
 * child list and cJSON_GetObjectItem returns the first, so a duplicate shows up as two
 * tensors with one name; it is rejected, pointing at the second key).
 * Error offsets: header problems point at 8 + the position of the tensor's key in the
 * JSON (8 when the key text is not found verbatim, e.g. escaped names); span problems
 * at 8 + N + begin. Shape entries are read through cJSON doubles, so 2.0 or 2e0 count
 * as the integer 2; 2.5, -1 and values ≥ 2^53 are rejected. Non-goals: writing; dtype conversion.
 * Behaviour matched: huggingface/safetensors safetensors/src/tensor.rs (Metadata::validate).
 */
#ifndef QC_SAFETENSORS_H
#define QC_SAFETENSORS_H

#include <stdbool.h>
#include <stdint.h>

#include "mapfile.h"
#include "qc_err.h"

enum qc_st_dtype {
	QC_ST_BOOL, QC_ST_U8, QC_ST_I8, QC_ST_F8_E5M2, QC_ST_F8_E4M3, QC_ST_F8_E8M0,
	QC_ST_I16, QC_ST_U16, QC_ST_F16, QC_ST_BF16,
	QC_ST_I32, QC_ST_U32, QC_ST_F32,
	QC_ST_F64, QC_ST_I64, QC_ST_U64,
	QC_ST_DTYPE_COUNT,
};

#define QC_ST_MAX_DIMS 8
#define QC_ST_MAX_HEADER (100ull << 20)   /* bytes of header JSON */
#define QC_ST_MAX_DEPTH 8                 /* JSON nesting: header, tensor, shape = 3 */
#define QC_ST_MAX_INT 9007199254740992.0  /* 2^53: shape entries and offsets stay below */

struct qc_st_tensor {
	const char *name;                  /* NUL-terminated; valid until qc_st_close */
	enum qc_st_dtype dtype;
	uint32_t n_dims;                   /* 0 for a scalar */
	uint64_t shape[QC_ST_MAX_DIMS];    /* (n_dims) elements, shape[0] slowest */
	uint64_t n_elems;
	uint64_t n_bytes;                  /* end - begin */
	uint64_t begin;                    /* offset inside the data section */
	uint64_t data_off;                 /* absolute file offset: 8 + N + begin */
	uint64_t hdr_off;                  /* file offset of its key in the header, for messages */
};

struct qc_st_meta {
	const char *key, *value;           /* NUL-terminated; valid until qc_st_close */
};

struct qc_st {
	char *path;
	struct qc_map file;                /* fd + mapping; fd -1 for qc_st_open_mem */
	const uint8_t *map;                /* whole file, read-only; valid until close */
	uint64_t size;
	uint64_t header_len;               /* N */
	uint64_t data_off;                 /* 8 + N */
	uint64_t n_tensors;
	struct qc_st_tensor *tensors;      /* (n_tensors), in data-offset order */
	uint64_t n_meta;
	struct qc_st_meta *meta;           /* (n_meta), in header order */
	const struct qc_st_tensor **by_name; /* (n_tensors), sorted by strcmp for lookups */
	struct qc_arena *arena;            /* owns names, metadata and the tables */
};

/* Open and fully validate path. On success *out owns an fd and a mapping; release with
 * qc_st_close. On failure *out is NULL and err names the file, tensor and offset.
 * Codes: QC_EIO, QC_EFORMAT, QC_ERANGE (sizes/offsets), QC_EUNSUPPORTED (unknown
 * dtype, too many dims), QC_ENOMEM. */
int qc_st_open(const char *path, struct qc_st **out, struct qc_err *err);

/* Same over caller memory (buf must outlive the handle); name is for messages. */
int qc_st_open_mem(const void *buf, uint64_t len, const char *name, struct qc_st **out,
		   struct qc_err *err);

void qc_st_close(struct qc_st *st); /* accepts NULL */

/* Tensor by name, NULL when absent (binary search). */
const struct qc_st_tensor *qc_st_find(const struct qc_st *st, const char *name);
/* Pointer to t's bytes (t->n_bytes of them) inside the mapping; valid until qc_st_close. */
const uint8_t *qc_st_data(const struct qc_st *st, const struct qc_st_tensor *t);
/* "__metadata__" value for key, NULL when absent. */
const char *qc_st_meta_get(const struct qc_st *st, const char *key);

/* Dtype table: name as spelled in the header ("F32"), element bytes. */
const char *qc_st_dtype_name(enum qc_st_dtype d);
uint32_t qc_st_dtype_size(enum qc_st_dtype d);
/* Parse a header dtype string; false when unknown. */
bool qc_st_dtype_parse(const char *s, enum qc_st_dtype *d);

#endif
