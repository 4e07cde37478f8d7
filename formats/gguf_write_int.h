/* gguf_write_int.h — what the GGUF writer's files share (formats/gguf_write*.c only).
 *
 * Owns: the writer struct (encoded KV bytes, tensor list, name sets), the tensor
 * record, the staging sink and its flusher thread, and the few helpers more than one
 * of those files needs. The public interface is gguf_write.h; nothing here is for
 * callers outside the writer.
 * Split: gguf_write.c (the writer, its name sets and tensor list), gguf_write_kv.c
 * (KV pairs), gguf_write_sink.c (staging + background write(2)), gguf_write_emit.c
 * (layout, serialization, write_mem / write_file).
 */
#ifndef QC_GGUF_WRITE_INT_H
#define QC_GGUF_WRITE_INT_H

#include <pthread.h>

#include "gguf_write.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "GGUF writer assumes a little-endian host");

#define ALIGNMENT_KEY "general.alignment"

struct bytes {
	uint8_t *p;
	size_t len, cap;
};

struct wtensor {
	char name[QC_GGUF_MAX_NAME];    /* NUL-terminated */
	uint32_t n_dims;
	int64_t ne[QC_GGUF_MAX_DIMS];   /* elements per dim, ne[0] contiguous; unused = 1 */
	enum qc_type type;
	uint64_t n_bytes;
	const void *data;               /* borrowed; NULL when fill is set */
	qc_gguf_fill_fn fill;
	void *fill_ctx;                 /* borrowed */
};

/* Open-addressing set of indexes (slot = index + 1, 0 = empty) over names stored
 * elsewhere; power-of-two capacity, at most half full. */
struct name_set {
	uint64_t *slot;
	uint64_t cap;
};

enum name_kind { NAME_KEY, NAME_TENSOR };

struct qc_gguf_writer {
	uint32_t version;
	uint32_t alignment;
	unsigned flags;
	struct bytes kv;                /* n_kv encoded { key, type, value } records */
	uint64_t n_kv;
	uint64_t *key_off;              /* (n_kv) offset of each key's bytes in kv.p */
	uint32_t *key_len;              /* (n_kv) key length in bytes */
	uint64_t keys_cap;
	struct name_set key_set;
	bool have_alignment_key;
	struct wtensor *tensors;        /* (n_tensors) in insertion order */
	uint64_t n_tensors, tensors_cap;
	struct name_set tensor_set;
};

static inline bool is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

static inline uint64_t len_width(const struct qc_gguf_writer *w)
{
	return w->version == 1 ? 4 : 8;
}

/* ---- name sets (gguf_write.c) ---------------------------------------------- */

/* Whether name s (n bytes) is already a key (NAME_KEY) or tensor (NAME_TENSOR). */
bool qc_gguf_name_set_has(const struct qc_gguf_writer *w, enum name_kind k, const char *s, size_t n);

/* Record name number idx (0..n-1, already stored); n is the new element count.
 * QC_OK or QC_ENOMEM (the set is unchanged). */
int qc_gguf_name_set_insert(struct qc_gguf_writer *w, enum name_kind k, uint64_t idx, uint64_t n);

/* ---- output sink (gguf_write_sink.c) ---------------------------------------- */

/* Background writer for write_file: write(2) of one staging buffer overlaps the fill
 * of the other, so an expensive fill callback and a slow disk cost max(), not sum(). */
struct flusher {
	pthread_t tid;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int fd;
	const uint8_t *job;     /* bytes being written; NULL when idle (guarded by mu) */
	size_t job_n;
	bool stop;
	uint64_t off;           /* file offset of the next job */
	int err_no;             /* errno of the first failed write, 0 if none */
	uint64_t err_off;       /* file offset where it failed */
};

struct sink {
	struct flusher *fl; /* NULL: memory sink, buf is the whole output of cap bytes */
	uint8_t *buf;       /* buffer being filled */
	uint8_t *spare;     /* the other staging buffer (file sinks) */
	size_t cap, used;
	uint64_t flushed;   /* bytes handed to the flusher */
	const char *path;   /* the destination, for messages */
};

static inline uint64_t qc_gguf_sink_pos(const struct sink *s)
{
	return s->flushed + s->used;
}

/* Start f's thread writing to fd (borrowed). QC_OK or QC_ENOMEM. */
int qc_gguf_flusher_start(struct flusher *f, int fd);

/* Finish the pending job, then end the thread. */
void qc_gguf_flusher_stop(struct flusher *f);

/* Wait until the flusher is idle; QC_EIO (path, offset) if a write failed. */
int qc_gguf_sink_wait(struct sink *s, struct qc_err *err);

/* Queue the filled staging buffer and continue in the spare one (file sinks). */
int qc_gguf_sink_flush(struct sink *s, struct qc_err *err);

/* Append n bytes at src; big ones go to the flusher straight from src. */
int qc_gguf_sink_put(struct sink *s, const void *src, uint64_t n, struct qc_err *err);

/* Append n zero bytes. */
int qc_gguf_sink_zero(struct sink *s, uint64_t n, struct qc_err *err);

/* Append tensor t's bytes through its fill callback, chunk by chunk. */
int qc_gguf_sink_fill(struct sink *s, const struct wtensor *t, struct qc_err *err);

#endif
