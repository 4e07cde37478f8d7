/* gguf_write_emit.c — the GGUF writer's output: layout, serialization, write_mem/write_file.
 *
 * Tensor infos and offsets are laid out at write time from the encoded KV bytes and
 * the tensor list; then header, KV bytes, tensor infos, padding and tensor data go
 * through a sink (gguf_write_sink.c) into memory (write_mem) or into a fresh
 * "<path>.tmp.XXXXXX" renamed over path once complete (write_file), so a reader
 * never sees a half-written file.
 * Bloat: no mmap output, no in-place editing.
 * Layout matched: llama.cpp ggml/src/gguf.cpp gguf_write_to_buf (padding after every
 * tensor, data section aligned, n_dims as given).
 */
#include "gguf_write_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cursor.h"

#define STAGE_BYTES (8u << 20)      /* each of write_file's two staging buffers */
#define TMP_TRIES 64                /* attempts at an unused "<path>.tmp.XXXXXX" name */

/* ---- layout --------------------------------------------------------------------- */

struct layout {
	uint64_t info_bytes;    /* magic .. end of tensor infos */
	uint64_t data_off;      /* start of the data section */
	uint64_t total;         /* file size */
};

static int compute_layout(const struct qc_gguf_writer *w, struct layout *lo, struct qc_err *err)
{
	uint64_t lw = len_width(w);
	uint64_t off = 8 + 2 * lw + w->kv.len;
	if (w->version == 1 && (w->n_kv > UINT32_MAX || w->n_tensors > UINT32_MAX))
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "too many keys or tensors for GGUF v1");
	for (uint64_t i = 0; i < w->n_tensors; i++) {
		const struct wtensor *t = &w->tensors[i];
		/* name, n_dims, dims, type, offset */
		off += lw + strlen(t->name) + 4 + t->n_dims * lw + 4 + 8;
	}
	lo->info_bytes = off;
	if (!qc_align_ok(off, w->alignment, &lo->data_off))
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "header size overflows");
	uint64_t end = lo->data_off;
	for (uint64_t i = 0; i < w->n_tensors; i++) {
		uint64_t padded;
		if (!qc_align_ok(w->tensors[i].n_bytes, w->alignment, &padded) || !qc_add_ok(end, padded, &end))
			return qc_err_set(err, QC_ERANGE, NULL, w->tensors[i].name, -1,
					  "file size overflows 64 bits");
	}
	if (end > (uint64_t)INT64_MAX)
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "file size exceeds INT64_MAX");
	lo->total = end;
	return QC_OK;
}

int qc_gguf_writer_file_size(const struct qc_gguf_writer *w, uint64_t *n_bytes, struct qc_err *err)
{
	struct layout lo;
	int rc = compute_layout(w, &lo, err);
	if (!rc)
		*n_bytes = lo.total;
	return rc;
}

/* ---- serialization ------------------------------------------------------------------ */

#define INFO_MAX (8 + QC_GGUF_MAX_NAME + 4 + 8 * QC_GGUF_MAX_DIMS + 4 + 8)  /* one tensor info */

/* Little-endian u32/u64 or version-width length at p; returns bytes written. Widths
 * were range-checked when the value was added (dims) or laid out (counts). */
static size_t enc_u32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
	return 4;
}

static size_t enc_u64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
	return 8;
}

static size_t enc_len(const struct qc_gguf_writer *w, uint8_t *p, uint64_t v)
{
	return w->version == 1 ? enc_u32(p, (uint32_t)v) : enc_u64(p, v);
}

static size_t enc_info(const struct qc_gguf_writer *w, const struct wtensor *t, uint64_t rel_off,
		       uint8_t *p)
{
	size_t n = strlen(t->name), k = enc_len(w, p, n);
	memcpy(p + k, t->name, n);
	k += n;
	k += enc_u32(p + k, t->n_dims);
	for (uint32_t d = 0; d < t->n_dims; d++)
		k += enc_len(w, p + k, (uint64_t)t->ne[d]);
	k += enc_u32(p + k, (uint32_t)t->type);
	k += enc_u64(p + k, rel_off);
	return k;
}

static uint64_t pad_to(uint64_t n, uint32_t align)
{
	return (align - n % align) % align;
}

static int emit(const struct qc_gguf_writer *w, const struct layout *lo, struct sink *s,
		struct qc_err *err)
{
	uint8_t hdr[INFO_MAX];
	size_t k = 0;
	memcpy(hdr, "GGUF", 4);
	k = 4 + enc_u32(hdr + 4, w->version);
	k += enc_len(w, hdr + k, w->n_tensors);
	k += enc_len(w, hdr + k, w->n_kv);
	int rc = qc_gguf_sink_put(s, hdr, k, err);
	if (!rc)
		rc = qc_gguf_sink_put(s, w->kv.p, w->kv.len, err);
	uint64_t rel = 0;
	for (uint64_t i = 0; i < w->n_tensors && !rc; i++) {
		const struct wtensor *t = &w->tensors[i];
		rc = qc_gguf_sink_put(s, hdr, enc_info(w, t, rel, hdr), err);
		rel += t->n_bytes + pad_to(t->n_bytes, w->alignment);
	}
	if (rc)
		return rc;
	QC_ASSERT(qc_gguf_sink_pos(s) == lo->info_bytes);
	rc = qc_gguf_sink_zero(s, lo->data_off - lo->info_bytes, err);
	for (uint64_t i = 0; i < w->n_tensors && !rc; i++) {
		const struct wtensor *t = &w->tensors[i];
		if (t->fill)
			rc = qc_gguf_sink_fill(s, t, err);
		else
			rc = qc_gguf_sink_put(s, t->data, t->n_bytes, err);
		if (!rc)
			rc = qc_gguf_sink_zero(s, pad_to(t->n_bytes, w->alignment), err);
	}
	if (!rc)
		rc = qc_gguf_sink_flush(s, err);
	if (!rc && s->fl)
		rc = qc_gguf_sink_wait(s, err);
	if (!rc)
		QC_ASSERT(qc_gguf_sink_pos(s) == lo->total);
	return rc;
}

int qc_gguf_writer_write_mem(const struct qc_gguf_writer *w, uint8_t **buf, size_t *len, struct qc_err *err)
{
	struct layout lo;
	*buf = NULL;
	*len = 0;
	int rc = compute_layout(w, &lo, err);
	if (rc)
		return rc;
	if (lo.total > SIZE_MAX)
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "file of %llu bytes does not fit memory",
				  (unsigned long long)lo.total);
	struct sink s = { .cap = (size_t)lo.total, .path = "(memory)" };
	s.buf = malloc(s.cap ? s.cap : 1);
	if (!s.buf)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "cannot allocate %llu bytes",
				  (unsigned long long)lo.total);
	rc = emit(w, &lo, &s, err);
	if (rc) {
		free(s.buf);
		return rc;
	}
	*buf = s.buf;
	*len = s.cap;
	return QC_OK;
}

/* Create "<path>.tmp.XXXXXX" with a fresh suffix; returns the fd or -1 (errno set). */
static int open_tmp(const char *path, char *tmp, size_t tmp_len)
{
	static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
	static unsigned counter;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 16);
	for (int tries = 0; tries < TMP_TRIES; tries++) {
		char sfx[7];
		x += 0x9e3779b97f4a7c15ull + counter++;
		uint64_t z = x;
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		for (int i = 0; i < 6; i++, z /= 62)
			sfx[i] = digits[z % 62];
		sfx[6] = '\0';
		if ((size_t)snprintf(tmp, tmp_len, "%s.tmp.%s", path, sfx) >= tmp_len) {
			errno = ENAMETOOLONG;
			return -1;
		}
		int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (fd >= 0 || errno != EEXIST)
			return fd;
	}
	return -1;
}

int qc_gguf_writer_write_file(const struct qc_gguf_writer *w, const char *path, struct qc_err *err)
{
	struct layout lo;
	struct flusher fl;
	int fd, rc = compute_layout(w, &lo, err);
	if (rc)
		return rc;
	size_t tmp_len = strlen(path) + 16;
	char *tmp = malloc(tmp_len);
	struct sink s = { .cap = STAGE_BYTES, .path = path };
	s.buf = malloc(s.cap);
	s.spare = malloc(s.cap);
	if (!tmp || !s.buf || !s.spare) {
		rc = qc_err_set(err, QC_ENOMEM, path, NULL, -1, "cannot allocate 2 x %u-byte write buffers",
				STAGE_BYTES);
		goto out_free;
	}
	fd = open_tmp(path, tmp, tmp_len);
	if (fd < 0) {
		rc = qc_err_set(err, QC_EIO, path, NULL, -1, "cannot create temporary file: %s",
				strerror(errno));
		goto out_free;
	}
	if (qc_gguf_flusher_start(&fl, fd)) {
		rc = qc_err_set(err, QC_ENOMEM, path, NULL, -1, "cannot start the writer thread");
		goto out_close;
	}
	s.fl = &fl;
	rc = emit(w, &lo, &s, err);
	qc_gguf_flusher_stop(&fl);
	if (rc)
		goto out_close;
	if ((w->flags & QC_GGUF_WRITE_FSYNC) && fsync(fd)) {
		rc = qc_err_set(err, QC_EIO, path, NULL, -1, "fsync failed: %s", strerror(errno));
		goto out_close;
	}
	if (close(fd)) {
		rc = qc_err_set(err, QC_EIO, path, NULL, -1, "close failed: %s", strerror(errno));
		goto out_unlink;
	}
	if (rename(tmp, path)) {
		rc = qc_err_set(err, QC_EIO, path, NULL, -1, "cannot rename %s into place: %s", tmp,
				strerror(errno));
		goto out_unlink;
	}
	goto out_free;

out_close:
	close(fd);
out_unlink:
	unlink(tmp);
out_free:
	free(s.spare);
	free(s.buf);
	free(tmp);
	return rc;
}
