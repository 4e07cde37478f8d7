/* hf_convert.h — a Hugging Face model folder (or .tar/.tar.gz/.zip of one) to a bundle.
 *
 * Data flow: qc_hf_open (hf_source.h) → config.json (hf_config.h) → tensor list
 * (hf_names.h) → per tensor: unquantized bytes borrowed from the shard mappings, or
 * rows decoded by the quant scheme (hf_quant.h); Q/K rows RoPE-permuted for
 * NORM-rope families; experts stacked → tokenizer.json (hf_tokenizer.h) → one
 * temporary GGUF beside the output, in exactly the names and keys llama.cpp's
 * convert_hf_to_gguf.py writes → the GGUF pipeline (convert.h) unchanged, with the
 * manifest's "source" describing the HF input → the temporary GGUF is removed, on
 * success and on every error. docs/hf.md describes the mapping.
 * Non-goals: .bin/pickle checkpoints, architectures outside hf_config.c's table.
 */
#ifndef QC_HF_CONVERT_H
#define QC_HF_CONVERT_H

#include <cjson/cJSON.h>

#include "convert.h"
#include "qc_err.h"

/* Normalize the model at in into a GGUF at gguf_path (written atomically by the GGUF
 * writer). On success *source (may be NULL) receives the manifest "source" object
 * (caller frees with cJSON_Delete). Errors name the input file, tensor and offset. */
int qc_hf_to_gguf(const char *in, const char *gguf_path, cJSON **source, int verbose, struct qc_err *err);

/* The whole conversion, options as for qc_convert_gguf (o->in is the HF input). */
int qc_convert_hf(const struct qc_convert_opts *o, struct qc_convert_stats *st, struct qc_err *err);

/* Default output: "<folder or archive name without .tar/.tar.gz/.tgz/.zip>.<target>.qb"
 * beside it. */
void qc_hf_default_out(const char *in, enum qc_target tgt, char *buf, size_t len);

/* Path of the temporary GGUF while qc_convert_hf runs, else NULL (for signal handlers). */
const char *qc_hf_convert_tmp_path(void);

#endif
