/* model.h — model config and weight views over an open bundle (no compute).
 *
 * Owns: struct qc_model: the manifest "config" hyper-parameters and per-layer weight
 * views (bundle pointer + encoding + shape + optional act-order permutation), built
 * once at open; small vectors (norms, biases, rope factors) decoded to float.
 * Supported, each checked against llama.cpp (tests/test_engine*.c): "llama" (Llama
 * 2/3, Mistral, TinyLlama, stories; Mixtral MoE), "qwen2" (q/k/v biases), "qwen3"
 * (q/k RMSNorm), "qwen2moe" (top-k not renormalized, sigmoid-gated shared expert),
 * "qwen3moe" (top-k renormalized); GQA, tied embeddings, RoPE NORM/NEOX with linear,
 * YaRN or llama3 (rope_freqs.weight) scaling.
 * "gemma2" (embedding scale, post norms, GELU-tanh, soft-caps, sliding window).
 * "gemma3" (gemma2's block without soft-caps, q/k norms, 5 local layers of 6 with
 * a window and RoPE base 10000, the global ones with the file's base and scaling;
 * checked against transformers, which Gemma 3 llama.cpp c392e50 predates).
 * "phi3" (Phi-3 / Phi-3.5: fused attn_qkv and gate|up ffn_up viewed as their row
 * ranges, q scaled after RoPE, LongRoPE tables chosen by context, a window on
 * every layer).
 * Non-goals: MLA, expert groups/bias, other archs.
 * Reference: llama.cpp llama-model.cpp, build_moe_ffn, ggml rope_yarn (facts only).
 */
#ifndef QC_MODEL_H
#define QC_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "arch.h"
#include "bundle.h"
#include "layout.h"
#include "ops.h"      /* enum qc_rope_mode */
#include "qc_err.h"
#include "qtype.h"

/* A weight matrix view: n_out rows of n_in elements, ggml row encoding; for an
 * expert stack, n_mat matrices mat_stride bytes apart. data is NULL when absent.
 * act_perm (GPTQ act-order): y = W . x[act_perm]; one permutation shared by all
 * matrices (perm_stride 0) or one per matrix (perm_stride n_in). */
struct qc_mat {
	const uint8_t *data;   /* first row of matrix 0; valid until qc_model_close */
	const int32_t *act_perm; /* (n_mat or 1, n_in) indices into x, checked; NULL: none */
	int64_t perm_stride;   /* elements from matrix e's permutation to e+1's */
	enum qc_type type;
	enum qc_layout layout; /* how the bytes are arranged; the CPU backend reads GGML only */
	int64_t n_in;          /* elements per row (ne[0]) */
	int64_t n_out;         /* rows per matrix */
	int64_t n_mat;         /* matrices (experts), 1 for dense */
	uint64_t row_bytes;    /* bytes per row */
	uint64_t mat_stride;   /* bytes from matrix e to e+1 */
};

/* RoPE frequency scaling (llama.cpp rope.scaling.type). */
enum qc_rope_scaling {
	QC_ROPE_SCALING_NONE = 0,
	QC_ROPE_SCALING_LINEAR = 1,
	QC_ROPE_SCALING_YARN = 2,
};

struct qc_model_config {
	int32_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_vocab;
	int32_t n_ff;              /* dense FFN width, or per-expert width for MoE */
	int32_t n_expert, n_expert_used;
	int32_t rope_dim;          /* rotated leading dims of each head */
	enum qc_rope_mode rope_mode;
	float rope_freq_base;
	float rope_freq_scale;     /* 1 / scaling factor; 1 when none */
	enum qc_rope_scaling rope_scaling;
	float rope_ext_factor;     /* YaRN ramp mix: 1 for yarn, else 0 */
	float rope_attn_factor;    /* ggml's mscale input (rope.scaling.attn_factor, 1) */
	float rope_corr_dims[2];   /* YaRN ramp bounds in rotated pairs (ggml corr_dims) */
	int32_t n_ctx_orig;        /* YaRN original context */
	bool expert_norm_w;        /* renormalize the top-k expert weights to sum 1 */
	int32_t n_ff_shexp;        /* shared expert width, 0 when none */
	float norm_eps;            /* RMSNorm epsilon */
	int32_t n_ctx_train;
	bool tied_embeddings;      /* output weight is token_embd */
	/* Gemma 2 (llama.cpp build_gemma2); neutral values for the other archs */
	float embd_scale;          /* token embeddings times this: sqrt(n_embd) for Gemma, else 1 */
	bool ffn_gelu;             /* gelu_tanh(gate) * up instead of silu(gate) * up */
	float q_scale;             /* q times this after RoPE, attention scale then 1;
				    * 0: attention scale 1/sqrt(head_dim) */
	float attn_softcap;        /* attention scores soft-capped at this; 0: none */
	float final_softcap;       /* logits soft-capped at this; 0: none */
	int32_t sliding_window;    /* tokens a windowed layer sees; 0: none */
	int32_t window_pattern;    /* formats/arch.h's: n-1 windowed layers then one global */
	/* Gemma 3: the local layers (n-1 of every rope_local_pattern, whether or not
	 * the window cuts anything) rotate with their own base and no scaling */
	int32_t rope_local_pattern; /* 0: every layer uses rope_freq_base / rope_freq_scale */
	float rope_local_base;
	uint64_t feats;            /* formats/arch.h QC_AF() bits this model needs */
	char arch[64];             /* config.architecture */
};

/* Whether layer il attends through the sliding window (Gemma 2: even layers;
 * pattern 1, Phi-3: every layer). */
static inline bool qc_model_layer_windowed(const struct qc_model_config *c, int il)
{
	if (c->sliding_window <= 0 || c->window_pattern <= 0)
		return false;
	return c->window_pattern == 1 || il % c->window_pattern < c->window_pattern - 1;
}

/* The window every layer attends through, or 0 when some layer is global (Gemma
 * 2's odd layers) or there is none: the K/V the scheduler may release behind. */
static inline int32_t qc_model_window_all(const struct qc_model_config *c)
{
	for (int il = 0; il < c->n_layer; il++)
		if (!qc_model_layer_windowed(c, il))
			return 0;
	return c->n_layer > 0 ? c->sliding_window : 0;
}

/* Whether layer il is a Gemma 3 local layer (RoPE base rope_local_base, unscaled). */
static inline bool qc_model_layer_local_rope(const struct qc_model_config *c, int il)
{
	return c->rope_local_pattern > 1 && il % c->rope_local_pattern < c->rope_local_pattern - 1;
}

struct qc_layer {
	const float *attn_norm;    /* (n_embd) */
	const float *ffn_norm;     /* (n_embd) */
	const float *bq, *bk, *bv; /* (n_head*hd), (n_head_kv*hd) x2; NULL when absent */
	const float *q_norm, *k_norm; /* (head_dim) per-head RMSNorm weights; NULL when absent */
	const float *attn_post_norm, *ffn_post_norm; /* (n_embd) Gemma 2's; NULL when absent */
	struct qc_mat wq, wk, wv, wo;
	struct qc_mat ffn_gate, ffn_up, ffn_down;          /* dense FFN */
	struct qc_mat gate_inp;                            /* (n_expert, n_embd) router */
	struct qc_mat gate_exps, up_exps, down_exps;       /* (n_expert) x (n_ff, n_embd) */
	struct qc_mat gate_inp_shexp;                      /* (1, n_embd) shared expert gate */
	struct qc_mat gate_shexp, up_shexp, down_shexp;    /* (n_ff_shexp, n_embd) etc. */
};

/* Which shard of a tensor-parallel bundle a model is (docs/tp.md). A plain bundle
 * opens as {0, 1, 0, n_vocab}. A --tp N bundle opened by qc_model_open is the
 * whole model's description without weights (rank -1: config, tokenizer; no
 * backend takes it); qc_model_rank_open gives rank r's shard, whose cfg has the
 * rank's own widths (n_head, n_head_kv, n_ff, n_ff_shexp divided by size; n_vocab
 * = its vocabulary rows) and whose weights are the members "tp<r>.<name>". */
struct qc_model_tp {
	int32_t rank;              /* 0..size-1, or -1 for the weightless whole */
	int32_t size;              /* ranks the bundle was sharded for (1: plain) */
	int32_t vocab0;            /* first token id of this rank's embedding / output rows */
	int32_t n_vocab_all;       /* the whole vocabulary */
};

struct qc_model {
	struct qc_model_config cfg;
	struct qc_model_tp tp;
	uint64_t data_lo, data_hi; /* file bytes holding this model's tensors (a rank's own
				      members in a --tp bundle): what a device uploads */
	struct qc_bundle *bundle;  /* owned when opened by qc_model_open */
	bool own_bundle;
	struct qc_mat token_embd;  /* (n_vocab, n_embd) */
	struct qc_mat output;      /* (n_vocab, n_embd); token_embd's view when tied */
	const float *output_norm;  /* (n_embd) */
	const float *rope_freqs;   /* (rope_dim / 2) frequency divisors (llama3); NULL when absent */
	const float *rope_long, *rope_short; /* (rope_dim / 2) Phi-3 LongRoPE divisors; NULL when absent */
	struct qc_layer *layers;   /* (n_layer) */
	float *vec_store;          /* owns every decoded vector above */
};

/* Open the bundle at path and build the model over it (the model owns it).
 * Returns QC_OK and *out, or the bundle's error, QC_EFORMAT (missing/mis-shaped
 * tensor or config key, naming it), QC_EUNSUPPORTED (architecture or feature),
 * QC_ENOMEM. *out is NULL on failure. */
int qc_model_open(const char *path, struct qc_model **out, struct qc_err *err);

/* Same over an open bundle, borrowed: it must outlive the model. On a --tp
 * bundle (manifest "tp") both give the weightless whole: tp.rank -1, tp.size N,
 * cfg and n_vocab the whole model's, layers zeroed (no backend takes it). */
int qc_model_from_bundle(struct qc_bundle *b, struct qc_model **out, struct qc_err *err);

/* Rank rank's shard of whole (model_tp.c), over whole's bundle (borrowed: whole
 * must outlive it): cfg = whole's with n_head, n_head_kv, n_ff, n_ff_shexp divided
 * by tp.size and n_vocab its vocabulary rows; tensors "tp<rank>.<name>", shapes
 * checked against those widths; tp = {rank, size, vocab0, n_vocab_all}; data_lo/hi
 * its own members. A plain whole (size 1) gives rank 0 as the same views again.
 * QC_OK and *out, QC_EINVAL (rank out of range, whole is itself a shard),
 * QC_EFORMAT (manifest "tp", missing or mis-shaped member, naming it), QC_ENOMEM. */
int qc_model_rank_open(const struct qc_model *whole, int rank, struct qc_model **out, struct qc_err *err);

/* True when this engine runs every feature formats/arch.h's row for arch needs
 * (llama, qwen2, qwen3, qwen2moe, qwen3moe, gemma2, phi3, gemma3): lets a caller refuse a GGUF before
 * converting it. The file's metadata may still add one (a soft-cap, a window) that
 * qc_model_open refuses, naming it. */
bool qc_model_arch_supported(const char *arch);

/* QC_OK when backend b implements every feature m needs, else QC_EUNSUPPORTED
 * naming the backend and the missing features (formats/arch.h's column).
 * Each backend's create calls it. */
int qc_model_check_backend(const struct qc_model *m, enum qc_arch_backend b, struct qc_err *err);

/* The RoPE frequency divisors for a per-sequence context of n_ctx tokens, or NULL
 * for none, as llama.cpp c392e50 build_rope_factors picks them: rope_freqs when
 * present, else the LongRoPE long table when n_ctx (rounded up to 32, llama.cpp's
 * K/V padding without flash attention) exceeds the original context n_ctx_orig,
 * else the short one. */
const float *qc_model_rope_factors(const struct qc_model *m, int32_t n_ctx);

/* Accepts NULL; closes the bundle when the model owns it. */
void qc_model_close(struct qc_model *m);

/* Pointer to row r of matrix e of w. */
static inline const uint8_t *qc_mat_row(const struct qc_mat *w, int64_t e, int64_t r)
{
	return w->data + (uint64_t)e * w->mat_stride + (uint64_t)r * w->row_bytes;
}

#endif
