/* gguf_write.h — GGUF writer (v3, plus v2 and v1 for tests), streaming tensor data.
 *
 * Owns: building a GGUF file from typed KV pairs and tensors, in the byte layout
 * gguf.h describes; keys and tensors are written in the order they were added.
 * Invariants: keys and tensor names are unique; every tensor's data offset and the
 * data section start are multiples of the alignment; each tensor is zero-padded to
 * the alignment (the last one too), as llama.cpp gguf_write_to_buf does.
 * Tensor bytes are never held by the writer: borrowed pointers or a fill callback
 * are read only while a write_* call runs, through two fixed 8 MiB staging buffers
 * (one filled while a helper thread writes the other).
 * Non-goals: reading (gguf.h), quantizing (qtype.h), editing files, big-endian hosts.
 */
#ifndef QC_GGUF_WRITE_H
#define QC_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "qc_err.h"
#include "qtype.h"

#define QC_GGUF_WRITER_MAX_ALIGNMENT (1u << 30)
#define QC_GGUF_WRITER_MAX_DEPTH 64         /* nesting limit for array-of-array values */

struct qc_gguf_writer;

/* One array value for qc_gguf_writer_add_arr_nested. data, by elem type:
 *   numeric/BOOL: n × qc_gguf_vtype_size(elem) bytes, little-endian (bools copied as given)
 *   STRING:       const char *const[n], NUL-terminated
 *   ARRAY:        const struct qc_gguf_warr[n], each one element (may nest again) */
struct qc_gguf_warr {
	enum qc_gguf_vtype elem;
	uint64_t n;
	const void *data;
};

/* Produce bytes [byte_off, byte_off + n) of one tensor's data into buf.
 * Called in increasing byte_off order, n > 0; return QC_OK or a negative QC_E* code
 * (the write then fails, naming the tensor and offset). */
typedef int (*qc_gguf_fill_fn)(void *ctx, uint64_t byte_off, void *buf, size_t n);

enum qc_gguf_write_flags {
	QC_GGUF_WRITE_DEFAULT = 0,
	QC_GGUF_WRITE_FSYNC = 1 << 0,   /* write_file: fsync the file before the rename */
};

/* New empty writer. version 1, 2 or 3; alignment 0 means the GGUF default (32), else a
 * power of two <= QC_GGUF_WRITER_MAX_ALIGNMENT; a non-default alignment is recorded as
 * the first key, general.alignment (u32). Returns NULL on a bad argument or no memory. */
struct qc_gguf_writer *qc_gguf_writer_new(uint32_t version, uint32_t alignment);

/* Frees w and everything it copied (keys, values, names). Accepts NULL. */
void qc_gguf_writer_free(struct qc_gguf_writer *w);

/* Set enum qc_gguf_write_flags bits for later write_* calls. */
void qc_gguf_writer_set_flags(struct qc_gguf_writer *w, unsigned flags);

/* Typed KV adders. key is copied and must be non-empty and not yet added (QC_EINVAL);
 * QC_ENOMEM on allocation failure, QC_ERANGE when a length does not fit (v1: u32).
 * On failure nothing is added. "general.alignment" is accepted only as a u32 power of
 * two and then sets the data alignment. */
int qc_gguf_writer_add_u8(struct qc_gguf_writer *w, const char *key, uint8_t v, struct qc_err *err);
int qc_gguf_writer_add_i8(struct qc_gguf_writer *w, const char *key, int8_t v, struct qc_err *err);
int qc_gguf_writer_add_u16(struct qc_gguf_writer *w, const char *key, uint16_t v, struct qc_err *err);
int qc_gguf_writer_add_i16(struct qc_gguf_writer *w, const char *key, int16_t v, struct qc_err *err);
int qc_gguf_writer_add_u32(struct qc_gguf_writer *w, const char *key, uint32_t v, struct qc_err *err);
int qc_gguf_writer_add_i32(struct qc_gguf_writer *w, const char *key, int32_t v, struct qc_err *err);
int qc_gguf_writer_add_u64(struct qc_gguf_writer *w, const char *key, uint64_t v, struct qc_err *err);
int qc_gguf_writer_add_i64(struct qc_gguf_writer *w, const char *key, int64_t v, struct qc_err *err);
int qc_gguf_writer_add_f32(struct qc_gguf_writer *w, const char *key, float v, struct qc_err *err);
int qc_gguf_writer_add_f64(struct qc_gguf_writer *w, const char *key, double v, struct qc_err *err);
int qc_gguf_writer_add_bool(struct qc_gguf_writer *w, const char *key, bool v, struct qc_err *err);
/* s is NUL-terminated. */
int qc_gguf_writer_add_str(struct qc_gguf_writer *w, const char *key, const char *s, struct qc_err *err);
/* len bytes of s, which may hold NULs or invalid UTF-8 (for hostile-input tests). */
int qc_gguf_writer_add_strn(struct qc_gguf_writer *w, const char *key, const char *s, uint64_t len,
			    struct qc_err *err);
/* Array of a numeric or BOOL elem type from a raw buffer of n × size bytes (copied). */
int qc_gguf_writer_add_arr(struct qc_gguf_writer *w, const char *key, enum qc_gguf_vtype elem,
			   const void *data, uint64_t n, struct qc_err *err);
/* Array of n NUL-terminated strings (copied). */
int qc_gguf_writer_add_arr_str(struct qc_gguf_writer *w, const char *key, const char *const *strs,
			       uint64_t n, struct qc_err *err);
/* Any array, including arrays of arrays (depth <= QC_GGUF_WRITER_MAX_DEPTH). */
int qc_gguf_writer_add_arr_nested(struct qc_gguf_writer *w, const char *key,
				  const struct qc_gguf_warr *arr, struct qc_err *err);

/* Add a tensor whose data is n_bytes(type, ne) at data. BORROWED: data is not copied and
 * must stay valid until the last write_* call. name: 1..QC_GGUF_MAX_NAME-1 bytes, unique.
 * n_dims 0..QC_GGUF_MAX_DIMS, ne[i] >= 0, ne[0] a multiple of the type's block size,
 * element count < 2^63 (v1: each ne[i] < 2^32). QC_EINVAL / QC_ERANGE / QC_ENOMEM. */
int qc_gguf_writer_add_tensor(struct qc_gguf_writer *w, const char *name, enum qc_type type,
			      uint32_t n_dims, const int64_t *ne, const void *data, struct qc_err *err);

/* Same, data produced on demand by fill(ctx, ...) during each write_* call; ctx is
 * borrowed like data above. Memory use stays bounded whatever the tensor size. */
int qc_gguf_writer_add_tensor_fill(struct qc_gguf_writer *w, const char *name, enum qc_type type,
				   uint32_t n_dims, const int64_t *ne, qc_gguf_fill_fn fill, void *ctx,
				   struct qc_err *err);

uint64_t qc_gguf_writer_n_kv(const struct qc_gguf_writer *w);
uint64_t qc_gguf_writer_n_tensors(const struct qc_gguf_writer *w);

/* Exact size in bytes of the file write_* would produce. QC_ERANGE on overflow or when
 * a count does not fit the version's field width. */
int qc_gguf_writer_file_size(const struct qc_gguf_writer *w, uint64_t *n_bytes, struct qc_err *err);

/* Write to "<path>.tmp.XXXXXX" in path's directory (mode 0666 & ~umask), then rename
 * over path. On any failure the temporary file is removed, path is untouched and err
 * names the file, tensor and offset. Prints nothing. QC_EIO / QC_ERANGE / fill's code. */
int qc_gguf_writer_write_file(const struct qc_gguf_writer *w, const char *path, struct qc_err *err);

/* Write the whole file into a new malloc'd buffer; on success the caller owns *buf
 * (release with free()) and *len is its size; on failure *buf is NULL. */
int qc_gguf_writer_write_mem(const struct qc_gguf_writer *w, uint8_t **buf, size_t *len, struct qc_err *err);

#endif
