/* inspect.h — a report on a .gguf or a bundle: architecture, parameter count,
 * bytes per encoding, tokenizer summary, every tensor. One JSON shape for both
 * inputs; the text form is printed from that JSON. */
#ifndef QC_INSPECT_H
#define QC_INSPECT_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "bundle.h"
#include "gguf.h"

cJSON *qc_inspect_gguf(const struct qc_gguf_model *m, struct qc_err *err);   /* caller frees */
cJSON *qc_inspect_bundle(const struct qc_bundle *b, struct qc_err *err);     /* caller frees */
void qc_inspect_print(const cJSON *report, FILE *out);

#endif
