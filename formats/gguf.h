/* gguf.h — GGUF reader (v1, v2, v3) over an mmap, and multi-file split models.
 *
 * File layout (all little-endian; v1 uses u32 where v2+ use u64 for counts,
 * string lengths, array lengths and dimensions):
 *   1. magic "GGUF", u32 version
 *   2. n_tensors, n_kv
 *   3. n_kv × { string key, u32 value type, value }   (arrays: u32 elem type, n, elems;
 *      arrays may nest)
 *   4. n_tensors × { string name, u32 n_dims, n_dims × dim, u32 ggml type, u64 offset }
 *   5. padding to general.alignment (default 32), then the data section; each tensor's
 *      offset is relative to the data section and a multiple of the alignment.
 * Every count, length, dimension, type id and offset is validated with checked
 * arithmetic before use (see cursor.h); every tensor must lie inside the file.
 * Non-goals: writing (gguf_write.h), dequantizing (qtype.h).
 * Behaviour matched: llama.cpp ggml/src/gguf.cpp gguf_init_from_file_impl.
 */
#ifndef QC_GGUF_H
#define QC_GGUF_H

#include <stdbool.h>
#include <stdint.h>

#include "mapfile.h"
#include "qc_err.h"
#include "qtype.h"

enum qc_gguf_vtype {
	QC_GGUF_UINT8 = 0,
	QC_GGUF_INT8 = 1,
	QC_GGUF_UINT16 = 2,
	QC_GGUF_INT16 = 3,
	QC_GGUF_UINT32 = 4,
	QC_GGUF_INT32 = 5,
	QC_GGUF_FLOAT32 = 6,
	QC_GGUF_BOOL = 7,
	QC_GGUF_STRING = 8,
	QC_GGUF_ARRAY = 9,
	QC_GGUF_UINT64 = 10,
	QC_GGUF_INT64 = 11,
	QC_GGUF_FLOAT64 = 12,
	QC_GGUF_VTYPE_COUNT,
};

#define QC_GGUF_MAX_DIMS 4
#define QC_GGUF_MAX_NAME 64          /* llama.cpp's GGML_MAX_NAME, incl. NUL */
#define QC_GGUF_DEFAULT_ALIGNMENT 32

/* A string inside the mapping: not NUL-terminated, valid until qc_gguf_close. */
struct qc_gguf_str {
	const char *p;
	uint64_t len;
};

struct qc_gguf_value {
	enum qc_gguf_vtype type;
	union {
		uint64_t u;                /* UINT8..UINT64 */
		int64_t i;                 /* INT8..INT64 */
		double f;                  /* FLOAT32, FLOAT64 */
		bool b;                    /* BOOL */
		struct qc_gguf_str s;      /* STRING */
		struct {
			enum qc_gguf_vtype elem;
			uint64_t n;
			const uint8_t *raw;           /* numeric/bool elems: n × size, LE, unaligned */
			struct qc_gguf_value *items;  /* STRING/ARRAY elems: n values */
		} arr;
	};
};

struct qc_gguf_kv {
	struct qc_gguf_str key;
	struct qc_gguf_value val;
	uint64_t off;                      /* file offset of the key, for messages */
};

struct qc_gguf_tensor {
	char name[QC_GGUF_MAX_NAME];       /* NUL-terminated */
	uint32_t n_dims;
	int64_t ne[QC_GGUF_MAX_DIMS];      /* elements per dim, ne[0] contiguous; unused dims = 1 */
	enum qc_type type;
	uint64_t n_elems;
	uint64_t n_bytes;
	uint64_t data_off;                 /* absolute file offset of the first byte */
	uint64_t info_off;                 /* file offset of its tensor-info record */
	int file_idx;                      /* which split file (0 for single files) */
};

struct qc_gguf {
	char *path;
	struct qc_map file;                /* fd + mapping; fd -1 for qc_gguf_open_mem */
	const uint8_t *map;                /* whole file, read-only; valid until close */
	uint64_t size;
	uint32_t version;
	uint32_t alignment;
	uint64_t data_off;                 /* absolute offset of the data section */
	uint64_t n_kv;
	struct qc_gguf_kv *kv;
	uint64_t n_tensors;
	struct qc_gguf_tensor *tensors;
	struct qc_arena *arena;            /* owns kv items and tensor records */
};

/* Open and fully validate path. On success *out owns an fd and a mapping;
 * release with qc_gguf_close. On failure *out is NULL and err names the offset. */
int qc_gguf_open(const char *path, struct qc_gguf **out, struct qc_err *err);

/* Same over caller memory (buf must outlive the handle); name is for messages. */
int qc_gguf_open_mem(const void *buf, uint64_t len, const char *name, struct qc_gguf **out,
		     struct qc_err *err);

void qc_gguf_close(struct qc_gguf *g); /* accepts NULL */

/* Lookups. find returns NULL when absent. The typed getters return QC_ENOTFOUND
 * when absent and QC_EFORMAT (naming the key) when the type does not convert. */
const struct qc_gguf_kv *qc_gguf_find(const struct qc_gguf *g, const char *key);
int qc_gguf_get_u64(const struct qc_gguf *g, const char *key, uint64_t *v, struct qc_err *err);
int qc_gguf_get_i64(const struct qc_gguf *g, const char *key, int64_t *v, struct qc_err *err);
int qc_gguf_get_f64(const struct qc_gguf *g, const char *key, double *v, struct qc_err *err);
int qc_gguf_get_bool(const struct qc_gguf *g, const char *key, bool *v, struct qc_err *err);
int qc_gguf_get_str(const struct qc_gguf *g, const char *key, struct qc_gguf_str *v,
		    struct qc_err *err);
/* Array of any kind: returns the value (type ARRAY) or NULL. */
const struct qc_gguf_value *qc_gguf_get_arr(const struct qc_gguf *g, const char *key);

/* Scalar value conversions: false if the value is not numeric. */
bool qc_gguf_value_as_i64(const struct qc_gguf_value *v, int64_t *out);
bool qc_gguf_value_as_f64(const struct qc_gguf_value *v, double *out);
/* Element i of a numeric/bool array (caller checks i < n): false if not numeric. */
bool qc_gguf_arr_i64(const struct qc_gguf_value *arr, uint64_t i, int64_t *out);
bool qc_gguf_arr_f64(const struct qc_gguf_value *arr, uint64_t i, double *out);

/* Byte size of one scalar of type t (0 for STRING/ARRAY or invalid). */
uint32_t qc_gguf_vtype_size(enum qc_gguf_vtype t);
const char *qc_gguf_vtype_name(enum qc_gguf_vtype t);

/* Compare a mapped string with a C string. */
bool qc_gguf_str_eq(struct qc_gguf_str s, const char *c);

/* ---- split models: "-00001-of-00003.gguf" read as one ----------------------- */

struct qc_gguf_model {
	int n_files;
	struct qc_gguf **files;            /* files[0] holds the metadata */
	uint64_t n_tensors;
	struct qc_gguf_tensor **tensors;   /* in file order; pointers into files[i] */
};

/* Open path; if it carries split.count > 1, open every sibling named by the
 * split convention and check split.no / split.count / split.tensors.count.
 * Duplicate tensor names across the set are an error. */
int qc_gguf_model_open(const char *path, struct qc_gguf_model **out, struct qc_err *err);
void qc_gguf_model_close(struct qc_gguf_model *m); /* accepts NULL */
const struct qc_gguf_tensor *qc_gguf_model_find(const struct qc_gguf_model *m, const char *name);
/* Pointer to a tensor's bytes inside its file's mapping. */
const uint8_t *qc_gguf_model_data(const struct qc_gguf_model *m, const struct qc_gguf_tensor *t);

#endif
