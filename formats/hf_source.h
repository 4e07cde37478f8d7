/* hf_source.h — a Hugging Face model folder as an input: a directory, or a .tar,
 * .tar.gz (any libarchive filter) or .zip of one, read without unpacking to disk.
 *
 * Layout read (names relative to the model root; the root is the folder holding the
 * shallowest config.json in an archive, e.g. "model/" in model/config.json):
 *   1. config.json (required), and when present tokenizer.json, tokenizer_config.json,
 *      generation_config.json, quantize_config.json, model.safetensors.index.json
 *      (each ≤ QC_HF_MAX_JSON bytes, read into memory, parsed with cJSON)
 *   2. weights: the shards named by the index's "weight_map" (tensor → file), or a
 *      single model.safetensors when there is no index
 * Archives: members of an uncompressed tar are mapped in place (the archive is mmapped
 * once; a shard is the byte range of its member). Compressed tars and zips are streamed
 * once; every *.safetensors member is copied into an anonymous memfd and mapped, so
 * they cost their full uncompressed size in RAM/swap (tmpfs) for the handle's life.
 * Checks: every shard in the map exists and opens (safetensors.h checks); every mapped
 * tensor is in its shard; no tensor is in two shards; no shard tensor is unlisted.
 * Non-goals: .bin/pickle checkpoints, downloading, dequantizing or detecting quant
 * schemes beyond qc_hf_quant_method. Behaviour matched: transformers
 * modeling_utils load_sharded_checkpoint (index → shard files).
 */
#ifndef QC_HF_SOURCE_H
#define QC_HF_SOURCE_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "mapfile.h"
#include "qc_err.h"
#include "safetensors.h"

#define QC_HF_MAX_JSON (256ull << 20)   /* tokenizer.json files reach tens of MB */
#define QC_HF_MAX_SHARDS 65536

enum qc_hf_kind {
	QC_HF_KIND_DIR,
	QC_HF_KIND_TAR,          /* uncompressed tar: shards mapped in place */
	QC_HF_KIND_ARCHIVE,      /* compressed tar or zip: shards copied to memfds */
};

struct qc_hf_shard {
	char *name;              /* file name relative to the model root */
	struct qc_st *st;        /* parsed shard; its path names archive:member */
	struct qc_map mem;       /* memfd copy (QC_HF_KIND_ARCHIVE), else fd -1 */
};

struct qc_hf_tensor {
	const char *name;                  /* == t->name */
	int shard;                         /* index into shards */
	const struct qc_st_tensor *t;      /* dtype, shape, n_bytes */
	const uint8_t *data;               /* t->n_bytes bytes; valid until qc_hf_close */
};

struct qc_hf_source {
	char *path;
	enum qc_hf_kind kind;
	cJSON *config;                     /* owned; never NULL after open */
	cJSON *tokenizer, *tokenizer_config, *generation_config, *quantize_config;
	cJSON *index;                      /* model.safetensors.index.json; NULL when single-file */
	int n_shards;
	struct qc_hf_shard *shards;        /* (n_shards) */
	uint64_t n_tensors;
	struct qc_hf_tensor *tensors;      /* (n_tensors), sorted by name */
	struct qc_map archive;             /* the mapped .tar (QC_HF_KIND_TAR), else fd -1 */
};

/* Open a directory or archive at path and validate it all. On success *out owns every
 * mapping, fd and JSON tree; release with qc_hf_close. On failure *out is NULL and err
 * names the file (archive members as "archive:member"), tensor and offset.
 * Codes: QC_EIO, QC_EFORMAT, QC_ERANGE, QC_ENOTFOUND (no config.json, no weights, a
 * missing shard), QC_EUNSUPPORTED, QC_ENOMEM. */
int qc_hf_open(const char *path, struct qc_hf_source **out, struct qc_err *err);
void qc_hf_close(struct qc_hf_source *src); /* accepts NULL */

/* Tensor by name, NULL when absent. */
const struct qc_hf_tensor *qc_hf_find(const struct qc_hf_source *src, const char *name);

/* config.json "quantization_config"."quant_method" (else quantize_config.json's
 * "quant_method"), or "none". Points into the owned JSON; valid until qc_hf_close. */
const char *qc_hf_quant_method(const struct qc_hf_source *src);

#endif
