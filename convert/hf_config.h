/* hf_config.h — a Hugging Face config.json as model hyper-parameters, and those as
 * llama.cpp's GGUF keys.
 *
 * Owns: the architecture table (which "architectures"[0] values are supported, the
 * GGUF architecture each becomes, and its per-family traits: RoPE Q/K permutation,
 * q/k/v bias, q/k norms, MoE style), reading and range-checking every hyper-parameter
 * the converter and runtime need, and writing them with convert_hf_to_gguf.py's key
 * names (<arch>.block_count, .rope.scaling.*, .expert_count, ...).
 * Non-goals: tensor names (hf_names.c), tokenizer (hf_tokenizer.c), quantization.
 * References: transformers' Llama/Mistral/Mixtral/Qwen2/Qwen3/Qwen2Moe/Qwen3Moe/Gemma2/
 * Gemma3/Phi3 configuration_*.py (defaults), modeling_rope_utils.py (LongRoPE's attention
 * factor), llama.cpp convert_hf_to_gguf.py set_gguf_parameters (keys; facts only).
 */
#ifndef QC_HF_CONFIG_H
#define QC_HF_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf_write.h"
#include "hf_source.h"
#include "qc_err.h"

enum qc_hf_moe {
	QC_HF_MOE_NONE,
	QC_HF_MOE_MIXTRAL,   /* block_sparse_moe.{gate, experts.N.w1/w2/w3} */
	QC_HF_MOE_QWEN,      /* mlp.{gate, experts.N.{gate,up,down}_proj} (+ shared_expert) */
};

/* Which per-layer tensor table a family uses (hf_names.c). */
enum qc_hf_layer_names {
	QC_HF_NAMES_LLAMA,   /* q/k/v/o, input + post-attention norms, gate/up/down (or experts) */
	QC_HF_NAMES_GEMMA,   /* + post-attention and pre/post-FFN norms (Gemma 2, 3) */
	QC_HF_NAMES_PHI3,    /* fused qkv_proj and gate_up_proj */
};

enum qc_hf_rope_scaling { QC_HF_ROPE_NONE, QC_HF_ROPE_LINEAR, QC_HF_ROPE_LLAMA3, QC_HF_ROPE_YARN, QC_HF_ROPE_LONGROPE };
#define QC_HF_ROPE_BIT(t) (1u << (t))

struct qc_hf_arch {
	const char *hf_name;       /* config.json "architectures"[0] */
	const char *gguf_arch;     /* general.architecture */
	enum qc_hf_layer_names names;
	bool permute_qk;           /* NORM RoPE in GGUF: Q/K rows reordered per head */
	bool qkv_bias;             /* q/k/v_proj carry a bias */
	bool qk_norm;              /* per-head RMS norm of Q and K (Qwen3, Gemma 3) */
	enum qc_hf_moe moe;
	bool shared_expert;        /* Qwen2-MoE shared expert + its sigmoid gate */
	bool norm_plus_one;        /* HF stores w of an RMSNorm that scales by (1 + w); the
				    * GGUF (llama.cpp's Gemma converters) holds 1 + w */
	bool text_config;          /* hyper-parameters under "text_config" (a multimodal
				    * class whose text model alone is converted) */
	bool softcap;              /* attn/final logit soft-capping keys are written (Gemma 2) */
	const char *act;           /* the hidden activation the GGUF arch implies */
	unsigned rope_types;       /* QC_HF_ROPE_BIT of each accepted rope_scaling type */
	bool partial_rope;         /* partial_rotary_factor honoured: RoPE on the leading
				    * rope_dim of each head (Phi3's apply_rotary_pos_emb) */
};

struct qc_hf_config {
	const struct qc_hf_arch *arch;
	int64_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_ctx;
	int64_t rope_dim;          /* rotated leading dims of a head: head_dim ×
				      partial_rotary_factor (head_dim when the arch has none) */
	double rms_eps, rope_theta;
	bool tie_embeddings;
	bool explicit_head_dim;    /* config.json states head_dim (llama.cpp then writes key_length) */
	bool attn_bias;            /* arch->qkv_bias, or Llama's "attention_bias" */
	int64_t n_expert, n_expert_used, n_ff_expert, n_ff_shared;
	bool norm_topk_prob;       /* Qwen MoE: renormalize the top-k router weights */
	int64_t sliding_window;    /* tokens a windowed layer attends back over (transformers'
				      mask: the last W positions), 0: none or never cuts */
	bool write_window;         /* write the window key even when 0 or longer than the
				      context (which layers it covers is the GGUF arch's rule) */
	double attn_softcap, final_softcap; /* 0: none (null in config.json) */
	char root[48];             /* the text model's tensor prefix: "model", or e.g.
				      "language_model.model" inside a multimodal class */
	char head[48];             /* the output projection's module: "lm_head", ... */
	const char *const *dropped;/* tensor-name prefixes converted by nobody (a vision
				      tower), NULL-terminated; NULL: none */
	struct {
		enum qc_hf_rope_scaling type;
		double factor, low_freq_factor, high_freq_factor;
		int64_t orig_ctx;        /* original_max_position_embeddings, 0 when absent */
		double attn_factor;      /* LongRoPE: on cos and sin (transformers' attention_factor) */
		const cJSON *long_factor, *short_factor; /* LongRoPE: rope_dim/2 positive numbers
							    each, checked; valid while the source is open */
	} rope;
};

/* Read src->config. QC_EUNSUPPORTED names an unknown architecture or an option this
 * converter does not handle (e.g. sliding-window-only layers, dense MoE layers);
 * QC_EFORMAT a missing or out-of-range value. err's path is "<src>/config.json". */
int qc_hf_config_parse(const struct qc_hf_source *src, struct qc_hf_config *c, struct qc_err *err);

/* general.architecture and the <arch>.* hyper-parameter keys, as llama.cpp writes them. */
int qc_hf_config_to_gguf(const struct qc_hf_config *c, struct qc_gguf_writer *w, struct qc_err *err);

/* Llama 3 RoPE frequency factors (hd/2 floats) into out, as llama.cpp's rope_freqs.weight.
 * Only meaningful when c->rope.type == QC_HF_ROPE_LLAMA3. */
void qc_hf_config_llama3_rope_factors(const struct qc_hf_config *c, float *out);

/* LongRoPE factor table (rope.long_factor or rope.short_factor, rope_dim/2 values,
 * checked by parse) into out, as llama.cpp's rope_factors_{long,short}.weight. */
void qc_hf_config_rope_factors(const cJSON *table, int64_t n, float *out);

#endif
