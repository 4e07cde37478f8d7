/* cursor.h — bounded reads over an untrusted byte range, checked arithmetic.
 *
 * Owns: struct qc_cursor and the overflow-safe size helpers every parser uses.
 * Invariant: nothing is read without qc_cur_need() succeeding first; every
 * size computed from file data goes through qc_mul_ok/qc_add_ok.
 * Reads are little-endian and alignment-free (memcpy), as GGUF and
 * safetensors are little-endian on disk.
 */
#ifndef QC_CURSOR_H
#define QC_CURSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "qc_err.h"

struct qc_cursor {
	const uint8_t *p;   /* start of the range; valid while the owner keeps it mapped */
	uint64_t len;       /* bytes in the range */
	uint64_t off;       /* next byte to read */
	uint64_t base;      /* file offset of p[0], for error messages */
	const char *path;   /* file name for error messages */
};

/* a*b and a+b without wrap-around; false on overflow. */
static inline bool qc_mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
	return !__builtin_mul_overflow(a, b, out);
}

static inline bool qc_add_ok(uint64_t a, uint64_t b, uint64_t *out)
{
	return !__builtin_add_overflow(a, b, out);
}

/* Round x up to a multiple of align (a power of two); false on overflow. */
static inline bool qc_align_ok(uint64_t x, uint64_t align, uint64_t *out)
{
	uint64_t t;
	if (!qc_add_ok(x, align - 1, &t))
		return false;
	*out = t & ~(align - 1);
	return true;
}

static inline int qc_cur_need(struct qc_cursor *c, uint64_t n, const char *what, struct qc_err *err)
{
	if (n > c->len - c->off)
		return qc_err_set(err, QC_EFORMAT, c->path, NULL, (int64_t)(c->base + c->off),
				  "file truncated: need %llu bytes for %s, %llu left",
				  (unsigned long long)n, what, (unsigned long long)(c->len - c->off));
	return QC_OK;
}

static inline int qc_cur_read(struct qc_cursor *c, void *dst, uint64_t n, const char *what,
			      struct qc_err *err)
{
	int rc = qc_cur_need(c, n, what, err);
	if (rc)
		return rc;
	memcpy(dst, c->p + c->off, n);
	c->off += n;
	return QC_OK;
}

static inline int qc_cur_u8(struct qc_cursor *c, uint8_t *v, const char *what, struct qc_err *err)
{
	return qc_cur_read(c, v, 1, what, err);
}

static inline int qc_cur_u32(struct qc_cursor *c, uint32_t *v, const char *what, struct qc_err *err)
{
	return qc_cur_read(c, v, 4, what, err);
}

static inline int qc_cur_u64(struct qc_cursor *c, uint64_t *v, const char *what, struct qc_err *err)
{
	return qc_cur_read(c, v, 8, what, err);
}

static inline uint64_t qc_cur_pos(const struct qc_cursor *c)
{
	return c->base + c->off;
}

#endif
