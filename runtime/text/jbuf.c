/* jbuf.c — see jbuf.h. */
#include "jbuf.h"

#include <stdlib.h>
#include <string.h>

void jbuf_put(struct jbuf *b, const char *p, size_t n)
{
	if (b->rc)
		return;
	if (n > b->max || b->len > b->max - n) {
		b->rc = QC_ERANGE;
		return;
	}
	if (b->len + n + 1 > b->cap) {
		size_t c = b->cap ? b->cap : 256;
		while (c < b->len + n + 1)
			c *= 2;
		char *q = realloc(b->s, c);
		if (!q) {
			b->rc = QC_ENOMEM;
			return;
		}
		b->s = q;
		b->cap = c;
	}
	memcpy(b->s + b->len, p, n);
	b->len += n;
	b->s[b->len] = '\0';
}

void jbuf_putc(struct jbuf *b, char c) { jbuf_put(b, &c, 1); }

void jbuf_deinit(struct jbuf *b)
{
	free(b->s);
	b->s = NULL;
	b->len = b->cap = 0;
}
