/* gguf_meta.h — GGUF metadata to the bundle manifest's "config", "tokenizer" and
 * "metadata" objects. The tokenizer object's schema is the one runtime/text/vocab_json.c
 * reads (docs/bundle.md lists it). */
#ifndef QC_GGUF_META_H
#define QC_GGUF_META_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "gguf.h"

/* Add "config", "tokenizer" (when the file has one) and "metadata" to manifest. */
int qc_meta_from_gguf(const struct qc_gguf_model *m, cJSON *manifest, struct qc_err *err);

/* A GGUF value as JSON (strings that are not valid UTF-8 or hold NUL become
 * {"hex": "..."}). Arrays longer than max_array become {"omitted_array": n}. NULL on OOM. */
cJSON *qc_meta_value_json(const struct qc_gguf_value *v, uint64_t max_array);

/* true when s[0..len) is valid UTF-8 without NUL bytes (storable as a JSON string). */
bool qc_meta_json_safe(const char *s, uint64_t len);

#endif
