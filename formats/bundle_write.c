/* bundle_write.c — streaming bundle writer (layout in bundle.h).
 * Data goes straight from the caller's buffers (often the source mmap) to the
 * temp file with write(2) while XXH3 runs over the same bytes, so memory use is
 * independent of model size. The header member is written last with pwrite.
 * An unnamed bundle (qrun's on-the-fly conversion) never has a name at all: an
 * O_TMPFILE (else a temp name unlinked at once) read back through its fd, so no
 * signal, crash or SIGKILL can leave it behind. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "bundle.h"
#include "tar.h"

struct qc_bundle_writer {
	char *path, *tmp;          /* tmp: NULL once renamed, and always when unnamed */
	int fd;
	bool unnamed;              /* path is the directory; never renamed or fsynced */
	uint32_t align;
	uint64_t pos;              /* bytes written so far */
	uint64_t flushed;          /* writeback started for [0, flushed) */
	/* current member */
	char name[128];
	uint64_t want, got;
	XXH3_state_t *xx;
	bool in_member;
};

/* volatile global so a CLI signal handler can unlink a half-written file */
static char *volatile g_tmp_path;

/* The file named in messages: the temp file, or the directory of an unnamed one. */
static const char *where(const struct qc_bundle_writer *w)
{
	return w->tmp ? w->tmp : w->path;
}

const char *qc_bundle_writer_tmp_path(void)
{
	return g_tmp_path;
}

void qc_bundle_hash_hex(uint64_t h, char out[17])
{
	snprintf(out, 17, "%016llx", (unsigned long long)h);
}

/* Start writeback every 64 MiB: dirty pages never pile up to the kernel's throttling
 * limit, and the final fsync has little left to do. */
static void kick_writeback(struct qc_bundle_writer *w)
{
	if (w->pos - w->flushed >= (64u << 20)) {
		sync_file_range(w->fd, (off_t)w->flushed, (off_t)(w->pos - w->flushed), SYNC_FILE_RANGE_WRITE);
		w->flushed = w->pos;
	}
}

static int write_all(struct qc_bundle_writer *w, const void *p, uint64_t n, struct qc_err *err)
{
	const uint8_t *b = p;
	while (n) {
		size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
		ssize_t r = write(w->fd, b, chunk);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return qc_err_set(err, QC_EIO, where(w), w->in_member ? w->name : NULL, (int64_t)w->pos,
					  "write failed: %s", r < 0 ? strerror(errno) : "no progress");
		b += r;
		n -= (uint64_t)r;
		w->pos += (uint64_t)r;
	}
	kick_writeback(w);
	return QC_OK;
}

static int write_zeros(struct qc_bundle_writer *w, uint64_t n, struct qc_err *err)
{
	static const uint8_t zero[4096];
	while (n) {
		uint64_t k = n > sizeof zero ? sizeof zero : n;
		int rc = write_all(w, zero, k, err);
		if (rc)
			return rc;
		n -= k;
	}
	return QC_OK;
}

/* Pad so the next member header puts its data at a multiple of align. */
static int write_gap(struct qc_bundle_writer *w, uint64_t align, struct qc_err *err)
{
	uint64_t gap = qc_tar_gap(w->pos, align);
	if (!gap)
		return QC_OK;
	uint8_t *buf = calloc(1, gap);
	if (!buf)
		return qc_err_set(err, QC_ENOMEM, where(w), NULL, -1, "out of memory");
	qc_tar_pad_member(buf, gap);
	int rc = write_all(w, buf, gap, err);
	free(buf);
	return rc;
}

/* A writer for path with its fields but no file yet. */
static int writer_new(const char *path, uint32_t alignment, struct qc_bundle_writer **out, struct qc_err *err)
{
	*out = NULL;
	if (alignment < QC_BUNDLE_ALIGN || (alignment & (alignment - 1)))
		return qc_err_set(err, QC_EINVAL, path, NULL, -1, "alignment %u must be a power of two >= %d",
				  alignment, QC_BUNDLE_ALIGN);
	struct qc_bundle_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return qc_err_set(err, QC_ENOMEM, path, NULL, -1, "out of memory");
	w->fd = -1;
	w->align = alignment;
	w->path = strdup(path);
	w->xx = XXH3_createState();
	if (!w->path || !w->xx) {
		qc_bundle_writer_abort(w);
		return qc_err_set(err, QC_ENOMEM, path, NULL, -1, "out of memory");
	}
	*out = w;
	return QC_OK;
}

/* The header member; its data (the bundle header) is filled in by finish. */
static int write_header_member(struct qc_bundle_writer *w, struct qc_bundle_writer **out, struct qc_err *err)
{
	uint8_t hdr[2 * QC_TAR_BLOCK] = {0};
	qc_tar_file_header(hdr, QC_BUNDLE_HDR_MEMBER, QC_TAR_BLOCK);
	int rc = write_all(w, hdr, sizeof hdr, err);
	if (rc) {
		qc_bundle_writer_abort(w);
		return rc;
	}
	*out = w;
	return QC_OK;
}

int qc_bundle_writer_open(const char *path, uint32_t alignment, struct qc_bundle_writer **out,
			  struct qc_err *err)
{
	struct qc_bundle_writer *w;
	int rc = writer_new(path, alignment, &w, err);
	*out = NULL;
	if (rc)
		return rc;
	size_t n = strlen(path) + 16;
	w->tmp = malloc(n);
	if (!w->tmp) {
		qc_bundle_writer_abort(w);
		return qc_err_set(err, QC_ENOMEM, path, NULL, -1, "out of memory");
	}
	snprintf(w->tmp, n, "%s.tmp.XXXXXX", path);
	w->fd = mkstemp(w->tmp);
	if (w->fd < 0) {
		int e = errno;
		free(w->tmp);
		w->tmp = NULL;
		qc_bundle_writer_abort(w);
		return qc_err_set(err, QC_EIO, path, NULL, -1, "cannot create temporary output: %s", strerror(e));
	}
	g_tmp_path = w->tmp;
	mode_t um = umask(0);
	umask(um);
	fchmod(w->fd, 0666 & ~um); /* mkstemp makes 0600; the bundle is an ordinary file */
	return write_header_member(w, out, err);
}

int qc_bundle_writer_open_unnamed(const char *dir, uint32_t alignment, int *fd, struct qc_bundle_writer **out,
				  struct qc_err *err)
{
	struct qc_bundle_writer *w;
	int rc = writer_new(dir, alignment, &w, err);
	*out = NULL;
	*fd = -1;
	if (rc)
		return rc;
	w->unnamed = true;
	w->fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (w->fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
		/* no O_TMPFILE on this filesystem: a name that lives only until unlink */
		char tmp[4096];
		if ((size_t)snprintf(tmp, sizeof tmp, "%s/.qc-bundle-XXXXXX", dir) < sizeof tmp &&
		    (w->fd = mkstemp(tmp)) >= 0)
			unlink(tmp);
	}
	if (w->fd < 0 || (*fd = fcntl(w->fd, F_DUPFD_CLOEXEC, 0)) < 0) {
		int e = errno;
		qc_bundle_writer_abort(w);
		return qc_err_set(err, QC_EIO, dir, NULL, -1, "cannot create an unnamed temporary bundle: %s",
				  strerror(e));
	}
	rc = write_header_member(w, out, err);
	if (rc) {
		close(*fd);
		*fd = -1;
	}
	return rc;
}

int qc_bundle_writer_begin(struct qc_bundle_writer *w, const char *name, uint64_t size, uint64_t *off,
			   struct qc_err *err)
{
	QC_ASSERT(!w->in_member);
	int n = snprintf(w->name, sizeof w->name, "tensors/%s", name);
	if (n < 0 || n >= 100)
		return qc_err_set(err, QC_EINVAL, w->path, name, -1, "tensor name too long for a bundle member");
	int rc = write_gap(w, w->align, err);
	if (rc)
		return rc;
	uint8_t hdr[QC_TAR_BLOCK];
	qc_tar_file_header(hdr, w->name, size);
	rc = write_all(w, hdr, sizeof hdr, err);
	if (rc)
		return rc;
	QC_ASSERT(w->pos % w->align == 0);
	*off = w->pos;
	snprintf(w->name, sizeof w->name, "%s", name);
	w->want = size;
	w->got = 0;
	w->in_member = true;
	XXH3_64bits_reset(w->xx);
	return QC_OK;
}

/* Count n bytes of the open member and hash them; refuses more than it declared. */
static int account(struct qc_bundle_writer *w, const void *data, uint64_t n, struct qc_err *err)
{
	QC_ASSERT(w->in_member);
	if (n > w->want - w->got)
		return qc_err_set(err, QC_EINVAL, w->path, w->name, (int64_t)w->pos,
				  "tensor data longer than its declared %llu bytes", (unsigned long long)w->want);
	XXH3_64bits_update(w->xx, data, (size_t)n);
	w->got += n;
	return QC_OK;
}

int qc_bundle_writer_write(struct qc_bundle_writer *w, const void *data, uint64_t n, struct qc_err *err)
{
	int rc = account(w, data, n, err);
	if (rc)
		return rc;
	return write_all(w, data, n, err);
}

int qc_bundle_writer_copy(struct qc_bundle_writer *w, const void *data, int src_fd, uint64_t src_off, uint64_t n,
			  struct qc_err *err)
{
	static int no_cfr; /* copy_file_range unavailable here: use write() from then on */
	int rc = account(w, data, n, err);
	if (rc)
		return rc;
	loff_t in = (loff_t)src_off;
	while (n && !no_cfr) {
		ssize_t r = copy_file_range(src_fd, &in, w->fd, NULL, n > (1u << 30) ? (1u << 30) : (size_t)n, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP) &&
		    in == (loff_t)src_off) {
			QC_WARN_ONCE("copy_file_range unavailable (%s); copying through user space", strerror(errno));
			no_cfr = 1;
			break;
		}
		if (r <= 0)
			return qc_err_set(err, QC_EIO, where(w), w->name, (int64_t)w->pos, "copy failed: %s",
					  r < 0 ? strerror(errno) : "source ended early");
		n -= (uint64_t)r;
		w->pos += (uint64_t)r;
		data = (const uint8_t *)data + r;
		kick_writeback(w);
	}
	return n ? write_all(w, data, n, err) : QC_OK;
}

int qc_bundle_writer_end(struct qc_bundle_writer *w, uint64_t *xxh3, struct qc_err *err)
{
	QC_ASSERT(w->in_member);
	if (w->got != w->want)
		return qc_err_set(err, QC_EINVAL, w->path, w->name, (int64_t)w->pos,
				  "wrote %llu of %llu declared bytes", (unsigned long long)w->got,
				  (unsigned long long)w->want);
	*xxh3 = XXH3_64bits_digest(w->xx);
	w->in_member = false;
	return write_zeros(w, (QC_TAR_BLOCK - w->pos % QC_TAR_BLOCK) % QC_TAR_BLOCK, err);
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

int qc_bundle_writer_finish(struct qc_bundle_writer *w, const cJSON *manifest, struct qc_err *err)
{
	int rc;
	char *json = cJSON_PrintUnformatted(manifest);
	if (!json) {
		rc = qc_err_set(err, QC_ENOMEM, w->path, NULL, -1, "cannot serialize the manifest");
		goto out;
	}
	uint64_t mlen = strlen(json);
	uint8_t th[QC_TAR_BLOCK];
	qc_tar_file_header(th, "manifest.json", mlen);
	rc = write_all(w, th, sizeof th, err);
	uint64_t moff = w->pos;
	if (!rc)
		rc = write_all(w, json, mlen, err);
	if (!rc)
		rc = write_zeros(w, (QC_TAR_BLOCK - w->pos % QC_TAR_BLOCK) % QC_TAR_BLOCK + 2 * QC_TAR_BLOCK, err);
	if (rc)
		goto out;
	uint8_t h[QC_TAR_BLOCK] = {0};
	memcpy(h, "QCBUNDLE", 8);
	h[8] = QC_BUNDLE_MAJOR & 0xff; h[9] = QC_BUNDLE_MAJOR >> 8;
	h[10] = QC_BUNDLE_MINOR & 0xff; h[11] = QC_BUNDLE_MINOR >> 8;
	for (int i = 0; i < 4; i++)
		h[12 + i] = (uint8_t)(w->align >> (8 * i));
	put64(h + 16, moff);
	put64(h + 24, mlen);
	put64(h + 32, XXH3_64bits(json, (size_t)mlen));
	put64(h + 40, w->pos);
	put64(h + 48, XXH3_64bits(h, 48));
	if (pwrite(w->fd, h, sizeof h, QC_TAR_BLOCK) != (ssize_t)sizeof h) {
		rc = qc_err_set(err, QC_EIO, where(w), NULL, QC_TAR_BLOCK, "cannot write the header: %s", strerror(errno));
		goto out;
	}
	if (!w->unnamed && fsync(w->fd) != 0) {
		rc = qc_err_set(err, QC_EIO, where(w), NULL, -1, "fsync failed: %s", strerror(errno));
		goto out;
	}
	if (close(w->fd) != 0) {
		w->fd = -1;
		rc = qc_err_set(err, QC_EIO, where(w), NULL, -1, "close failed: %s", strerror(errno));
		goto out;
	}
	w->fd = -1;
	if (w->unnamed)
		goto out;
	if (rename(w->tmp, w->path) != 0) {
		rc = qc_err_set(err, QC_EIO, w->path, NULL, -1, "cannot rename %s into place: %s", w->tmp,
				strerror(errno));
		goto out;
	}
	free(w->tmp);
	w->tmp = NULL; /* renamed: nothing to remove */
out:
	free(json);
	qc_bundle_writer_abort(w);
	return rc;
}

void qc_bundle_writer_abort(struct qc_bundle_writer *w)
{
	if (!w)
		return;
	g_tmp_path = NULL;
	if (w->fd >= 0)
		close(w->fd);
	if (w->tmp) {
		unlink(w->tmp);
		free(w->tmp);
	}
	XXH3_freeState(w->xx);
	free(w->path);
	free(w);
}
