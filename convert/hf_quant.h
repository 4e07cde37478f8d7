/* hf_quant.h — quantization schemes of Hugging Face checkpoints (GPTQ, AWQ,
 * bitsandbytes, compressed-tensors), decoded once at convert time into encodings
 * of the traits table (quant/qtype.def), so nothing downstream knows the scheme.
 *
 * Owns: parsing "quantization_config" (config.json) / quantize_config.json, deciding
 * which linear modules are quantized (ignore lists, skip modules, "re:" targets), and
 * turning one module's packed tensors into rows of a normalized encoding.
 * Contract with the HF model converter (hf_convert.c):
 *   - a "module" is the HF prefix of a linear layer without ".weight", e.g.
 *     "model.layers.0.self_attn.q_proj" or "model.layers.0.block_sparse_moe.experts.3.w1";
 *   - output rows are out_features (ggml ne[1] = N), columns in_features (ne[0] = K),
 *     row-major, each row qc_type_row_bytes(type, K) bytes: any row reorder (RoPE
 *     permutation of Q/K, stacking experts) is valid on them;
 *   - act_perm, when set, is the K permutation act-order needed: the layer computes
 *     y = W' · x[act_perm] (the bundle stores it as "<ggml base>.act_perm", I32 [K]);
 *   - encodings: hq4, hq8, bnb_nf4, bnb_fp4, f8_e4m3, nvfp4 (qtype.def ids 128+),
 *     bit-exact with the writing library's float32 dequantization (docs/hf-quant.md).
 * Implementation: hf_quant.c (dispatch), hfq_<scheme>.c, hfq_common.c, hfq_emit.c.
 * Non-goals: model architecture, names, tokenizer (hf_convert.c).
 */
#ifndef QC_HF_QUANT_H
#define QC_HF_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hf_source.h"
#include "qc_err.h"
#include "qtype.h"

struct qc_hfq; /* opaque: one checkpoint's parsed scheme */

struct qc_hfq_tensor {
	enum qc_type type;        /* a normalized encoding (or F16/BF16/F32 for unquantized) */
	int64_t n_rows, n_cols;   /* N (out_features), K (in_features) */
	uint8_t *data;            /* malloc'd, n_rows * row bytes */
	size_t size;
	int32_t *act_perm;        /* malloc'd (n_cols) or NULL */
};

/* What unifying the scales of two halves of a fused tensor cost (0 when none was needed). */
struct qc_hfq_fuse_stats {
	double max_abs_err, rms_err;  /* over the re-quantized half, vs. its own dequantization */
	bool requantized;
};

/* Parse the checkpoint's scheme. A model without quantization_config gets a "none"
 * scheme (every module plain). QC_EUNSUPPORTED names an unknown quant_method or an
 * unsupported option (bits, group size, format) with the config file as path. */
int qc_hfq_open(const struct qc_hf_source *src, struct qc_hfq **out, struct qc_err *err);
void qc_hfq_close(struct qc_hfq *q); /* accepts NULL */

/* "none", "gptq", "awq", "bitsandbytes", "compressed-tensors", ... */
const char *qc_hfq_method(const struct qc_hfq *q);

/* True when module is stored quantized in this checkpoint (its packed tensors exist
 * and no ignore/skip rule excludes it). */
bool qc_hfq_is_quantized(const struct qc_hfq *q, const struct qc_hf_source *src, const char *module);

/* Decode module into out (zeroed on entry; free with qc_hfq_tensor_free). Errors name
 * the file, tensor and byte offset: missing scale/zero tensors, shape or dtype
 * mismatches, group size not dividing K, out-of-range g_idx. */
int qc_hfq_load(const struct qc_hfq *q, const struct qc_hf_source *src, const char *module,
		struct qc_hfq_tensor *out, struct qc_err *err);

/* Load two modules that will be fused row-wise (MoE gate then up of one expert).
 * Where an encoding needed one scale for the whole fused tensor the smaller-scaled
 * half would be re-quantized and st would say what that cost; every encoding this
 * file produces keeps an f32 scale per 32-element block (docs/hf-quant.md), so FP8
 * per-tensor and NVFP4 global scales of the two halves stay as they are, exactly, and
 * st is all zero. Both outputs share type, K and act_perm; a differing act_perm, type
 * or K is QC_EUNSUPPORTED (nothing is returned; the caller keeps them unfused). */
int qc_hfq_load_pair(const struct qc_hfq *q, const struct qc_hf_source *src, const char *gate_module,
		     const char *up_module, struct qc_hfq_tensor *gate, struct qc_hfq_tensor *up,
		     struct qc_hfq_fuse_stats *st, struct qc_err *err);

void qc_hfq_tensor_free(struct qc_hfq_tensor *t); /* accepts NULL; zeroes it */

#endif
