/* gguf_write_sink.c — the GGUF writer's output sink: staging buffers and a flusher thread.
 *
 * Tensor bytes flow from the caller's pointer or fill callback into one of two
 * staging buffers while a background thread write(2)s the other (file sinks), or
 * straight into one buffer holding the whole file (memory sinks): memory stays
 * bounded and fill cost overlaps disk time. Knows nothing of GGUF beyond the tensor
 * record whose fill callback it runs; gguf_write_emit.c decides what goes in.
 * Invariant: bytes reach the file in the order they were put; after a failed write
 * later jobs are dropped and the first failure (errno, offset) is reported.
 * Bloat: no O_DIRECT, no more than two buffers, no io_uring.
 */
#include "gguf_write_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *flusher_main(void *arg)
{
	struct flusher *f = arg;
	pthread_mutex_lock(&f->mu);
	for (;;) {
		while (!f->job && !f->stop)
			pthread_cond_wait(&f->cv, &f->mu);
		if (!f->job)
			break;
		const uint8_t *p = f->job;
		size_t n = f->job_n;
		uint64_t at = f->off;
		int e = f->err_no;  /* after a failure, later jobs are dropped */
		pthread_mutex_unlock(&f->mu);
		while (n && !e) {
			ssize_t k = write(f->fd, p, n > (1u << 30) ? (1u << 30) : n);
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0) {
				e = k < 0 ? errno : EIO;
				break;
			}
			p += k;
			n -= (size_t)k;
			at += (uint64_t)k;
		}
		pthread_mutex_lock(&f->mu);
		if (e && !f->err_no) {
			f->err_no = e;
			f->err_off = at;
		}
		f->off += f->job_n;
		f->job = NULL;
		pthread_cond_broadcast(&f->cv);
	}
	pthread_mutex_unlock(&f->mu);
	return NULL;
}

/* Wait until the previous job is written; its error, if any, as errno. */
static int flusher_wait(struct flusher *f, uint64_t *err_off)
{
	pthread_mutex_lock(&f->mu);
	while (f->job)
		pthread_cond_wait(&f->cv, &f->mu);
	int e = f->err_no;
	*err_off = f->err_off;
	pthread_mutex_unlock(&f->mu);
	return e;
}

static void flusher_submit(struct flusher *f, const uint8_t *p, size_t n)
{
	pthread_mutex_lock(&f->mu);
	QC_ASSERT(!f->job);
	f->job = p;
	f->job_n = n;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

int qc_gguf_flusher_start(struct flusher *f, int fd)
{
	memset(f, 0, sizeof *f);
	f->fd = fd;
	if (pthread_mutex_init(&f->mu, NULL))
		return QC_ENOMEM;
	if (pthread_cond_init(&f->cv, NULL))
		goto out_mutex;
	if (pthread_create(&f->tid, NULL, flusher_main, f))
		goto out_cond;
	return QC_OK;

out_cond:
	pthread_cond_destroy(&f->cv);
out_mutex:
	pthread_mutex_destroy(&f->mu);
	return QC_ENOMEM;
}

void qc_gguf_flusher_stop(struct flusher *f)
{
	pthread_mutex_lock(&f->mu);
	f->stop = true;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
	pthread_join(f->tid, NULL);
	pthread_cond_destroy(&f->cv);
	pthread_mutex_destroy(&f->mu);
}


int qc_gguf_sink_wait(struct sink *s, struct qc_err *err)
{
	uint64_t at;
	int e = flusher_wait(s->fl, &at);
	if (e)
		return qc_err_set(err, QC_EIO, s->path, NULL, (int64_t)at, "write failed: %s", strerror(e));
	return QC_OK;
}

/* Hand n bytes at p to the flusher once it is idle. */
static int sink_submit(struct sink *s, const uint8_t *p, size_t n, struct qc_err *err)
{
	int rc = qc_gguf_sink_wait(s, err);
	if (rc)
		return rc;
	flusher_submit(s->fl, p, n);
	s->flushed += n;
	return QC_OK;
}

/* Queue the filled staging buffer and continue in the spare one. */
int qc_gguf_sink_flush(struct sink *s, struct qc_err *err)
{
	if (!s->fl || !s->used)
		return QC_OK;
	int rc = sink_submit(s, s->buf, s->used, err);
	if (rc)
		return rc;
	uint8_t *t = s->buf;
	s->buf = s->spare;
	s->spare = t;
	s->used = 0;
	return QC_OK;
}

/* Make room for at least one byte. A full memory sink means the layout was computed
 * wrong, a bug. */
static int sink_room(struct sink *s, struct qc_err *err)
{
	if (s->used < s->cap)
		return QC_OK;
	QC_ASSERT(s->fl);
	return qc_gguf_sink_flush(s, err);
}

int qc_gguf_sink_put(struct sink *s, const void *src, uint64_t n, struct qc_err *err)
{
	const uint8_t *p = src;
	if (!n)
		return QC_OK;
	if (!s->fl) {
		QC_ASSERT(n <= s->cap - s->used);
		memcpy(s->buf + s->used, p, (size_t)n);
		s->used += (size_t)n;
		return QC_OK;
	}
	if (n >= s->cap) {  /* big borrowed tensors go straight from the caller's memory */
		int rc = qc_gguf_sink_flush(s, err);
		if (!rc)
			rc = sink_submit(s, p, (size_t)n, err);
		return rc ? rc : qc_gguf_sink_wait(s, err);
	}
	while (n) {
		int rc = sink_room(s, err);
		if (rc)
			return rc;
		size_t k = s->cap - s->used < n ? s->cap - s->used : (size_t)n;
		memcpy(s->buf + s->used, p, k);
		s->used += k;
		p += k;
		n -= k;
	}
	return QC_OK;
}

int qc_gguf_sink_zero(struct sink *s, uint64_t n, struct qc_err *err)
{
	while (n) {
		int rc = sink_room(s, err);
		if (rc)
			return rc;
		size_t k = s->cap - s->used < n ? s->cap - s->used : (size_t)n;
		memset(s->buf + s->used, 0, k);
		s->used += k;
		n -= k;
	}
	return QC_OK;
}

/* Let the callback write straight into the staging buffer, chunk by chunk. */
int qc_gguf_sink_fill(struct sink *s, const struct wtensor *t, struct qc_err *err)
{
	uint64_t off = 0;
	while (off < t->n_bytes) {
		int rc = sink_room(s, err);
		if (rc)
			return rc;
		uint64_t left = t->n_bytes - off;
		size_t k = s->cap - s->used < left ? s->cap - s->used : (size_t)left;
		rc = t->fill(t->fill_ctx, off, s->buf + s->used, k);
		if (rc)
			return qc_err_set(err, rc < 0 ? rc : QC_EIO, s->path, t->name, (int64_t)qc_gguf_sink_pos(s),
					  "fill callback failed (%s) for tensor bytes [%llu, %llu)",
					  qc_status_name(rc < 0 ? rc : QC_EIO), (unsigned long long)off,
					  (unsigned long long)(off + k));
		s->used += k;
		off += k;
	}
	return QC_OK;
}
