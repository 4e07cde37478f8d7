/* hf_names.h — which tensors a Hugging Face model must have, under which GGUF names.
 *
 * Owns: the list of tensors of one architecture (struct qc_hf_config): the HF name
 * (a linear module's prefix without ".weight", or a full tensor name), the llama.cpp
 * GGUF name (token_embd.weight, blk.N.attn_q.weight, blk.N.ffn_gate_exps.weight, ...),
 * the expected ggml shape, whether Q/K rows get the RoPE permutation, and how experts
 * stack. Order: token_embd, then per layer, then output_norm, output (as llama.cpp).
 * Non-goals: reading bytes, quantization, metadata.
 * References: llama.cpp gguf-py tensor_mapping.py (names), convert_hf_to_gguf.py
 * LlamaModel.modify_tensors (permute, Mixtral stacking), Qwen2MoeModel (experts).
 */
#ifndef QC_HF_NAMES_H
#define QC_HF_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hf_config.h"

#define QC_HF_NAME_MAX 160

enum qc_hf_tkind {
	QC_HF_T_MATRIX,    /* a linear layer weight: HF [ne1, ne0]; the quant scheme may own it */
	QC_HF_T_VECTOR,    /* 1-D (norms, biases): stored as F32 like llama.cpp */
};

struct qc_hf_tspec {
	char gguf[QC_HF_NAME_MAX];   /* GGUF tensor name */
	char hf[QC_HF_NAME_MAX];     /* MATRIX: module prefix; VECTOR: tensor name. Experts:
				      * contains one "%d" for the expert index */
	enum qc_hf_tkind kind;
	int64_t ne0, ne1;            /* ggml shape of one matrix (ne0 = in) or vector (ne0) */
	int n_expert;                /* > 0: stacked [ne0, ne1, n_expert] from n_expert modules */
	int perm_heads;              /* > 0: RoPE row permutation over this many heads */
	int pair;                    /* gate experts: index of the up-experts spec, else -1 */
	bool plus_one;               /* VECTOR: written as 1 + w (Gemma's RMSNorm weights,
				      * as llama.cpp's converter writes them, in float32) */
};

/* The tensor list for c. *out is malloc'd (caller frees), *n its length.
 * QC_ENOMEM only. */
int qc_hf_names_build(const struct qc_hf_config *c, struct qc_hf_tspec **out, size_t *n, struct qc_err *err);

/* Expert module / tensor name: s->hf with the expert index filled in. */
void qc_hf_names_expert(const struct qc_hf_tspec *s, int e, char *buf, size_t len);

/* RoPE permutation of llama.cpp LlamaModel.permute: GGUF row r of a [n_heads*hd] block
 * comes from HF row qc_hf_perm_src(r, hd). Within each head the HF layout is
 * [2][hd/2] (rotate_half pairs i and i+hd/2), GGUF's is [hd/2][2] (adjacent pairs). */
int64_t qc_hf_perm_src(int64_t r, int64_t hd);

#endif
