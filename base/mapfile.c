/* mapfile.c — see mapfile.h. */
#include "mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int qc_map_open(const char *path, struct qc_map *m, struct qc_err *err)
{
	struct stat st;
	m->fd = -1;
	m->p = NULL;
	m->size = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return qc_err_set(err, QC_EIO, path, NULL, -1, "cannot open: %s", strerror(errno));
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		return qc_err_set(err, QC_EIO, path, NULL, -1, "cannot stat: %s", strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return qc_err_set(err, QC_EIO, path, NULL, -1, "not a regular file");
	}
	m->fd = fd;
	m->size = (uint64_t)st.st_size;
	if (m->size == 0)
		return QC_OK;
	void *p = mmap(NULL, m->size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		close(fd);
		m->fd = -1;
		return qc_err_set(err, QC_EIO, path, NULL, -1, "cannot mmap %llu bytes: %s",
				  (unsigned long long)m->size, strerror(e));
	}
	m->p = p;
	return QC_OK;
}

void qc_map_close(struct qc_map *m)
{
	if (m->p)
		munmap((void *)(uintptr_t)m->p, m->size);
	if (m->fd >= 0)
		close(m->fd);
	m->p = NULL;
	m->fd = -1;
	m->size = 0;
}

static void page_range(const struct qc_map *m, uint64_t off, uint64_t len, void **start, size_t *n)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t a = off & ~(page - 1);
	uint64_t end = off + len > m->size ? m->size : off + len;
	*start = (void *)(uintptr_t)(m->p + a);
	*n = end > a ? (size_t)(end - a) : 0;
}

void qc_map_release(const struct qc_map *m, uint64_t off, uint64_t len)
{
	void *s;
	size_t n;
	if (!m->p || off >= m->size)
		return;
	page_range(m, off, len, &s, &n);
	if (n)
		madvise(s, n, MADV_DONTNEED);
}

void qc_map_will_need(const struct qc_map *m, uint64_t off, uint64_t len)
{
	void *s;
	size_t n;
	if (!m->p || off >= m->size)
		return;
	page_range(m, off, len, &s, &n);
	if (n)
		madvise(s, n, MADV_SEQUENTIAL);
}

int qc_map_pread(const struct qc_map *m, void *buf, uint64_t off, uint64_t n, struct qc_err *err)
{
	uint8_t *b = buf;
	if (m->fd < 0) {
		memcpy(buf, m->p + off, n);
		return QC_OK;
	}
	while (n) {
		ssize_t r = pread(m->fd, b, n > (1u << 30) ? (1u << 30) : (size_t)n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return qc_err_set(err, QC_EIO, NULL, NULL, (int64_t)off, "read failed: %s",
					  r < 0 ? strerror(errno) : "unexpected end of file");
		b += r;
		off += (uint64_t)r;
		n -= (uint64_t)r;
	}
	return QC_OK;
}
