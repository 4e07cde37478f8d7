/* dump.h — a tensor as little-endian float32 in its logical shape (row-major,
 * ne[0] fastest), from a GGUF or from a bundle (target layout undone; a fused
 * part is cut back out of its fused tensor). */
#ifndef QC_DUMP_H
#define QC_DUMP_H

#include <stdio.h>

#include "bundle.h"
#include "gguf.h"

int qc_dump_gguf(const struct qc_gguf_model *m, const char *name, FILE *out, struct qc_err *err);
int qc_dump_bundle(const struct qc_bundle *b, const char *name, FILE *out, struct qc_err *err);

/* Decode n_rows rows of ggml blocks (row length ne0) and write them as float32. */
int qc_dump_rows(enum qc_type type, int64_t ne0, const uint8_t *rows, uint64_t n_rows, FILE *out,
		 struct qc_err *err);

#endif
