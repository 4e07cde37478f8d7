/* arena.h — bump allocator for per-file metadata, freed all at once.
 * Owns: chunks of heap memory; pointers it returns live until qc_arena_free.
 * Non-goal: freeing single objects. */
#ifndef QC_ARENA_H
#define QC_ARENA_H

#include <stddef.h>

struct qc_arena;

struct qc_arena *qc_arena_new(void);          /* NULL on OOM */
void qc_arena_free(struct qc_arena *a);        /* accepts NULL */
/* Zeroed, 16-byte aligned; NULL on OOM or when n*size overflows. */
void *qc_arena_calloc(struct qc_arena *a, size_t n, size_t size);
/* NUL-terminated copy of len bytes. */
char *qc_arena_strndup(struct qc_arena *a, const char *s, size_t len);

#endif
