/* bundle.h — the qconvert bundle (.qb): one file, an uncompressed POSIX tar whose
 * members keep tensor data aligned, so the runtime mmaps it and copies as is.
 *
 * Byte layout (docs/bundle.md says the same for users):
 *   1. [0, 512)      ustar header of member ".qcbundle" (512 bytes of data)
 *   2. [512, 1024)   the bundle header, little-endian:
 *        0  char[8]  magic "QCBUNDLE"
 *        8  u16      major version (readers reject a major they do not know)
 *        10 u16      minor version (additions only)
 *        12 u32      alignment of tensor data (power of two, >= 4096)
 *        16 u64      manifest offset (absolute, start of manifest.json's data)
 *        24 u64      manifest size in bytes
 *        32 u64      XXH3-64 of the manifest bytes
 *        40 u64      total file size
 *        48 u64      XXH3-64 of bytes 0..47 of this header
 *        56..511     zero
 *   3. per tensor, in manifest order: optional pax comment member (padding), then the
 *      ustar header of "tensors/<name>" so that its data starts at a multiple of the
 *      alignment; data; zero fill to 512.
 *   4. member "manifest.json": UTF-8 JSON (cJSON) — model config, tokenizer, source
 *      identity, converter version, target, and per tensor: name, ne, encoding
 *      {type, layout, layout_id, params}, offset, size, xxh3 (16 hex digits).
 *   5. two zero blocks (end of archive).
 * Invariants the reader checks before handing anything out: header hash, manifest
 * hash, every tensor inside [1024, manifest offset), aligned, disjoint, with the
 * size its shape/type/layout imply, and names unique.
 */
#ifndef QC_BUNDLE_H
#define QC_BUNDLE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "layout.h"
#include "mapfile.h"
#include "qc_err.h"
#include "qtype.h"

#define QC_BUNDLE_MAJOR 1
#define QC_BUNDLE_MINOR 0
#define QC_BUNDLE_ALIGN 4096
#define QC_BUNDLE_HDR_MEMBER ".qcbundle"
#define QC_BUNDLE_MAX_PARTS 4

/* A tensor made by stacking parts along dim 1 (rows), per ne[2] slice (expert):
 * e.g. w13 = gate rows [0, I) then up rows [I, 2I) for every expert. */
struct qc_bundle_part {
	const char *name;          /* the source tensor this part came from */
	int64_t row0, n_rows;      /* its rows inside each ne[2] slice */
};

struct qc_bundle_tensor {
	const char *name;          /* NUL-terminated, valid until qc_bundle_close */
	uint32_t n_dims;
	int64_t ne[4];             /* ggml order: ne[0] contiguous; unused dims 1 */
	enum qc_type type;         /* element encoding of the (unpacked) ggml rows */
	enum qc_layout layout;
	uint64_t off, size;        /* absolute byte range in the file */
	uint64_t xxh3;
	int n_parts;               /* 0 unless fused */
	struct qc_bundle_part parts[QC_BUNDLE_MAX_PARTS];
	const cJSON *json;         /* this tensor's manifest entry */
};

struct qc_bundle {
	char *path;
	struct qc_map file;
	const uint8_t *map;        /* whole file; valid until qc_bundle_close */
	uint64_t size;
	uint16_t major, minor;
	uint32_t alignment;
	uint64_t manifest_off, manifest_size;
	cJSON *manifest;           /* owned */
	const char *target;        /* manifest "target" */
	uint64_t n_tensors;
	struct qc_bundle_tensor *tensors;
};

/* Open and validate (layout above). *out is NULL on failure; err names offset/tensor. */
int qc_bundle_open(const char *path, struct qc_bundle **out, struct qc_err *err);
/* Same over caller memory (outlives the handle). */
int qc_bundle_open_mem(const void *buf, uint64_t len, const char *name, struct qc_bundle **out,
		       struct qc_err *err);
void qc_bundle_close(struct qc_bundle *b); /* accepts NULL */

const struct qc_bundle_tensor *qc_bundle_find(const struct qc_bundle *b, const char *name);
/* The fused tensor holding part `name`, with *part set; NULL if none. */
const struct qc_bundle_tensor *qc_bundle_find_part(const struct qc_bundle *b, const char *name,
						   const struct qc_bundle_part **part);
static inline const uint8_t *qc_bundle_data(const struct qc_bundle *b, const struct qc_bundle_tensor *t)
{
	return b->map + t->off;
}
/* Recompute a tensor's XXH3; QC_ECHECKSUM naming it on mismatch. */
int qc_bundle_verify_tensor(const struct qc_bundle *b, const struct qc_bundle_tensor *t,
			    struct qc_err *err);

/* ---- writer ------------------------------------------------------------------
 * Streams tensors into "<path>.tmp.XXXXXX" beside path; finish renames it into
 * place, abort (or any failure) unlinks it, so no partial output is ever left. */
struct qc_bundle_writer;

int qc_bundle_writer_open(const char *path, uint32_t alignment, struct qc_bundle_writer **out,
			  struct qc_err *err);
/* A bundle with no name in directory dir (O_TMPFILE, else a temp name unlinked at
 * once): nothing is left behind by any exit, SIGKILL included. *fd gets the
 * caller's own descriptor of it (-1 on failure), to read the finished bundle
 * through /proc/self/fd/N; closing it (and finish/abort) drops the file. finish
 * neither renames nor fsyncs it. */
int qc_bundle_writer_open_unnamed(const char *dir, uint32_t alignment, int *fd, struct qc_bundle_writer **out,
				  struct qc_err *err);
/* Start member "tensors/<name>" of exactly size bytes; returns its data offset. */
int qc_bundle_writer_begin(struct qc_bundle_writer *w, const char *name, uint64_t size, uint64_t *off,
			   struct qc_err *err);
int qc_bundle_writer_write(struct qc_bundle_writer *w, const void *data, uint64_t n, struct qc_err *err);
/* Append n bytes that are at src_off in file src_fd, whose content is also mapped at data
 * (hashed from there): copied in the kernel with copy_file_range, no user-space copy. */
int qc_bundle_writer_copy(struct qc_bundle_writer *w, const void *data, int src_fd, uint64_t src_off, uint64_t n,
			  struct qc_err *err);
/* End the member; fails if fewer/more than size bytes were written. */
int qc_bundle_writer_end(struct qc_bundle_writer *w, uint64_t *xxh3, struct qc_err *err);
/* Write manifest (not consumed), the end of archive, the header; fsync; rename. Frees w. */
int qc_bundle_writer_finish(struct qc_bundle_writer *w, const cJSON *manifest, struct qc_err *err);
void qc_bundle_writer_abort(struct qc_bundle_writer *w); /* accepts NULL; frees w */
/* Temp file of the writer in progress (NULL if none): for a CLI signal handler only. */
const char *qc_bundle_writer_tmp_path(void);

/* Hex form of a hash as stored in the manifest (16 lower-case digits + NUL). */
void qc_bundle_hash_hex(uint64_t h, char out[17]);

#endif
