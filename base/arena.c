/* arena.c — chunked bump allocator (see arena.h). Large requests get their own chunk. */
#include "arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_BYTES (1u << 20)

struct chunk {
	struct chunk *next;
	size_t used, cap;
	_Alignas(16) unsigned char data[];
};

struct qc_arena {
	struct chunk *head;
};

struct qc_arena *qc_arena_new(void)
{
	return calloc(1, sizeof(struct qc_arena));
}

void qc_arena_free(struct qc_arena *a)
{
	if (!a)
		return;
	for (struct chunk *c = a->head, *n; c; c = n) {
		n = c->next;
		free(c);
	}
	free(a);
}

void *qc_arena_calloc(struct qc_arena *a, size_t n, size_t size)
{
	size_t bytes;
	if (__builtin_mul_overflow(n, size, &bytes) || bytes > SIZE_MAX - 64)
		return NULL;
	bytes = (bytes + 15) & ~(size_t)15;
	struct chunk *c = a->head;
	if (!c || c->cap - c->used < bytes) {
		size_t cap = bytes > CHUNK_BYTES ? bytes : CHUNK_BYTES;
		struct chunk *nc = malloc(sizeof(*nc) + cap);
		if (!nc)
			return NULL;
		nc->used = 0;
		nc->cap = cap;
		if (c && bytes > CHUNK_BYTES) {
			/* keep filling the current chunk; the big one goes behind it */
			nc->next = c->next;
			c->next = nc;
		} else {
			nc->next = c;
			a->head = nc;
		}
		c = nc;
	}
	void *p = c->data + c->used;
	c->used += bytes;
	memset(p, 0, bytes);
	return p;
}

char *qc_arena_strndup(struct qc_arena *a, const char *s, size_t len)
{
	char *d = qc_arena_calloc(a, len + 1, 1);
	if (d)
		memcpy(d, s, len);
	return d;
}
