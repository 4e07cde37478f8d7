/* serve_buf.c — growable byte buffer (see serve_buf.h).
 *
 * Owns: doubling growth with overflow-checked sizes. Non-goals: shrinking.
 */
#include "serve_buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int serve_buf_put(struct serve_buf *b, const void *s, size_t n)
{
	if (n > ((size_t)-1) / 4 - b->len)
		return -1;
	if (b->len + n + 1 > b->cap) {
		size_t c = b->cap ? b->cap : 256;
		while (c < b->len + n + 1)
			c *= 2;
		char *q = realloc(b->p, c);
		if (!q)
			return -1;
		b->p = q;
		b->cap = c;
	}
	if (n)
		memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

int serve_buf_printf(struct serve_buf *b, const char *fmt, ...)
{
	char small[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof small, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -1;
	if ((size_t)n < sizeof small)
		return serve_buf_put(b, small, (size_t)n);
	char *big = malloc((size_t)n + 1);
	if (!big)
		return -1;
	va_start(ap, fmt);
	vsnprintf(big, (size_t)n + 1, fmt, ap);
	va_end(ap);
	int rc = serve_buf_put(b, big, (size_t)n);
	free(big);
	return rc;
}

void serve_buf_consume(struct serve_buf *b, size_t n)
{
	if (n >= b->len) {
		b->len = 0;
	} else {
		memmove(b->p, b->p + n, b->len - n);
		b->len -= n;
	}
	if (b->p)
		b->p[b->len] = '\0';
}

void serve_buf_deinit(struct serve_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}
