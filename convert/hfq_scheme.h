/* hfq_scheme.h — what the scheme decoders behind hf_quant.h share (internal).
 *
 * Owns: struct qc_hfq (one parsed quantization_config), the per-scheme ops table
 * entry each hfq_<scheme>.c exports, tensor lookups with dtype/shape checks that
 * name file, tensor and offset, and the "dense" intermediate every scheme decodes
 * into: one code per element (columns already in act-order), one f32 scale and one
 * int16 zero per 32-element block. hfq_emit.c turns it into qtype.def rows.
 * Non-goals: model names (hf_convert.c); arithmetic on weights (codes are copied,
 * scales widened, never recomputed).
 */
#ifndef QC_HFQ_SCHEME_H
#define QC_HFQ_SCHEME_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "hf_quant.h"

#define QC_HFQ_MAX_GROUPS 64       /* compressed-tensors config_groups */
#define QC_HFQ_MAX_PATTERNS 4096   /* ignore / targets / skip entries in all */
#define QC_HFQ_NAME_MAX 512        /* module + suffix */

/* compressed-tensors weight args of one config group. */
struct qc_hfq_ct_group {
	const cJSON *targets;      /* borrowed array of strings */
	int num_bits;
	bool is_float;             /* "type": "float" */
	int act;                   /* input_activations: 0 none, 1 float 8-bit static per tensor
				      (input_scale), 2 float 8-bit dynamic per token (W8A8 FP8) */
	bool symmetric;
	int strategy;              /* enum qc_hfq_ct_strategy (hfq_ct.c) */
	int64_t group_size;        /* group / tensor_group */
	int64_t block_n, block_k;  /* block strategy */
	int format;                /* enum qc_hfq_ct_format (hfq_ct.c) */
};

struct qc_hfq {
	const struct qc_hfq_ops *ops;
	cJSON *cfg;                /* owned copy of the quantization config object, or NULL */
	/* gptq / awq */
	int bits;
	int64_t group_size;        /* -1: one group over K */
	bool sym, desc_act, static_groups, v2_zeros, awq_zero_point;
	/* bitsandbytes */
	bool bnb_4bit, bnb_8bit;
	const cJSON *skip;         /* llm_int8_skip_modules / modules_to_not_convert (into cfg) */
	/* compressed-tensors */
	const cJSON *ignore;
	int n_groups;
	struct qc_hfq_ct_group groups[QC_HFQ_MAX_GROUPS];
};

/* One scheme: parse its config (q->cfg is set), decide module by module, decode. */
struct qc_hfq_ops {
	const char *name;          /* quant_method value */
	int (*parse)(struct qc_hfq *q, const char *cfg_path, struct qc_err *err);
	/* module is quantized under this config's rules (ignore/skip/targets only) */
	bool (*rule)(const struct qc_hfq *q, const char *module);
	/* the module's packed tensors exist */
	bool (*present)(const struct qc_hfq *q, const struct qc_hf_source *src, const char *module);
	int (*load)(const struct qc_hfq *q, const struct qc_hf_source *src, const char *module,
		    struct qc_hfq_tensor *out, struct qc_err *err);
};

extern const struct qc_hfq_ops qc_hfq_none_ops, qc_hfq_gptq_ops, qc_hfq_awq_ops, qc_hfq_bnb_ops,
	qc_hfq_ct_ops;

/* Parse a quantization config object without a checkpoint (qc_hfq_open does this
 * after reading config.json; the fuzz harness calls it directly). qcfg may be NULL
 * ("none"); quantize_cfg is quantize_config.json or NULL. */
int qc_hfq_parse(const cJSON *qcfg, const cJSON *quantize_cfg, struct qc_hfq **out, struct qc_err *err);
/* The config's own rule for module (no tensors consulted). */
bool qc_hfq_rule(const struct qc_hfq *q, const char *module);

/* ---- config helpers (hfq_common.c) ---- */

/* Integer field: absent → def; present but not an exact integer in [lo, hi] → QC_EUNSUPPORTED. */
int qc_hfq_int(const cJSON *o, const char *key, int64_t def, int64_t lo, int64_t hi, int64_t *v,
	       const char *path, struct qc_err *err);
/* Bool field: absent → def; not a bool → QC_EFORMAT. */
int qc_hfq_bool(const cJSON *o, const char *key, bool def, bool *v, const char *path, struct qc_err *err);
/* Optional array of strings (NULL when absent or null); else QC_EFORMAT. */
int qc_hfq_strings(const cJSON *o, const char *key, const cJSON **v, const char *path, struct qc_err *err);

/* ---- tensors (hfq_common.c) ---- */

/* Tensor "<module>.<suffix>", NULL when absent. */
const struct qc_hf_tensor *qc_hfq_find(const struct qc_hf_source *src, const char *module, const char *suffix);
/* Same, but a missing tensor is QC_ENOTFOUND naming it; dtype must be one of mask
 * (bits 1 << enum qc_st_dtype) and the shape match want[0..n_dims) (-1: any). */
int qc_hfq_need(const struct qc_hf_source *src, const char *module, const char *suffix, uint32_t dtypes,
		uint32_t n_dims, const int64_t *want, const struct qc_hf_tensor **t, struct qc_err *err);
#define QC_HFQ_DT(d) (1u << (d))
#define QC_HFQ_DT_FLOAT (QC_HFQ_DT(QC_ST_F32) | QC_HFQ_DT(QC_ST_F16) | QC_HFQ_DT(QC_ST_BF16))
/* File name of t's shard, for messages. */
const char *qc_hfq_file(const struct qc_hf_source *src, const struct qc_hf_tensor *t);
/* Element i of a float tensor (F32/F16/BF16/F8_E4M3) as f32 (exact widening). */
float qc_hfq_f32_at(const struct qc_hf_tensor *t, uint64_t i);
/* Element i of an integer tensor (I8/U8/I16/I32/I64) as int64. */
int64_t qc_hfq_int_at(const struct qc_hf_tensor *t, uint64_t i);

/* ---- the dense intermediate (hfq_emit.c) ---- */

struct qc_hfq_dense {
	int64_t n, k;              /* rows (out), columns (in); k % 32 == 0 */
	uint8_t *codes;            /* (n*k) row-major, columns in output order */
	float *d;                  /* (n*k/32, or n*k/16 for nvfp4) block scales */
	int16_t *z;                /* (n*k/32) block zeros, NULL where the type has none */
	int32_t *perm;             /* (k) act_perm or NULL; moves into the output tensor */
	float a;                   /* f8_a8: activation scale (> 0 static, 0 dynamic per token) */
};

/* Allocate codes, d (per 'per' elements) and optionally z for n x k; checks k % 32
 * and sizes (QC_EUNSUPPORTED / QC_ERANGE name file and tensor). */
int qc_hfq_dense_new(struct qc_hfq_dense *dn, int64_t n, int64_t k, int per, bool zeros,
		     const char *file, const char *tensor, struct qc_err *err);
void qc_hfq_dense_free(struct qc_hfq_dense *dn);

/* Emit dn as rows of type: hq4 (codes < 16), hq8, bnb_nf4/bnb_fp4, f8_e4m3, f8_a8, nvfp4. */
int qc_hfq_emit(struct qc_hfq_dense *dn, enum qc_type type, struct qc_hfq_tensor *out, struct qc_err *err);

/* Act-order: from g_idx (k entries, each < n_groups) build the stable column order
 * sorting by group (NULL when already non-decreasing) and per output 32-block its
 * group (bgroup, k/32 entries). A block spanning two groups is QC_EUNSUPPORTED; a
 * g_idx entry out of range is QC_EFORMAT at its byte offset. */
int qc_hfq_groups(const struct qc_hf_source *src, const struct qc_hf_tensor *g_idx, int64_t k,
		  int64_t group_size, int64_t n_groups, int32_t **perm, int32_t *bgroup, struct qc_err *err);

/* Plain float module (F16/BF16/F32 weight copied as is). */
int qc_hfq_load_plain(const struct qc_hf_source *src, const char *module, struct qc_hfq_tensor *out,
		      struct qc_err *err);

/* HF module-name rule of transformers' bnb/awq "modules_to_not_convert": the leaf
 * name equals an entry, the name equals it, or contains it followed by '.'. */
bool qc_hfq_skip_match(const cJSON *list, const char *module);

#endif
