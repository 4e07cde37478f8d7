/* serve_buf.h — the growable byte buffer the server's text and JSON paths share.
 *
 * Owns: struct serve_buf (always NUL-terminated once non-empty) and its append.
 * Non-goals: formatting beyond printf; a cap (callers bound what they append).
 */
#ifndef QC_SERVE_BUF_H
#define QC_SERVE_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct serve_buf {
	char *p;         /* (len + 1) bytes once anything was appended, else NULL */
	size_t len, cap;
};

/* Append n bytes. 0, or -1 when out of memory (the buffer is unchanged). */
int serve_buf_put(struct serve_buf *b, const void *s, size_t n);
/* Append printf-formatted text. 0 or -1 (out of memory, or a format error). */
int serve_buf_printf(struct serve_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drop the first n bytes (n <= len). */
void serve_buf_consume(struct serve_buf *b, size_t n);
/* Frees the bytes and zeroes *b; accepts an empty buffer. */
void serve_buf_deinit(struct serve_buf *b);

#endif
