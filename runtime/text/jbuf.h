/* jbuf.h — a growable text buffer bounded by a byte limit, for the renderers of
 * this room (the Jinja interpreter and the built-in chat families).
 *
 * Owns: struct jbuf and its appends. The first failure sticks in rc (QC_ERANGE past
 * max, QC_ENOMEM) and later appends do nothing, so a renderer checks once at the
 * end. The text stays NUL-terminated.
 */
#ifndef QC_JBUF_H
#define QC_JBUF_H

#include <stddef.h>

#include "qc_err.h"

struct jbuf { /* growable output, bounded by max */
	char *s;
	size_t len, cap, max;
	int rc;
};
void jbuf_put(struct jbuf *b, const char *p, size_t n);
void jbuf_putc(struct jbuf *b, char c);
void jbuf_deinit(struct jbuf *b);

#endif
