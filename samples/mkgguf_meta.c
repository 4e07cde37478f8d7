/* mkgguf_meta.c — mkgguf's metadata: the key set of a llama.cpp-converted checkpoint.
 *
 * Owns: general.*, the <arch>.* hyperparameters (rope scaling included) and the
 * tokenizer.ggml.* keys, in convert_hf_to_gguf's order, plus general.file_type for the
 * types llama.cpp's enum llama_ftype names. The split.* keys are mkgguf_out.c's.
 */
#include "mkgguf.h"

#include <math.h>
#include <stdio.h>

/* llama.cpp's general.file_type (enum llama_ftype) for the --type choices that have one
 * (every matrix of that type: MOSTLY_Q6_K is all Q6_K; q4_k and q5_k alone are no ftype,
 * llama.cpp's Q4_K_S/Q5_K_S mix in other types). Mixes carry their own (mkgguf_mix.c). */
static const struct { enum qc_type type; uint32_t ftype; } ftypes[] = {
	{ QC_TYPE_F32, 0 }, { QC_TYPE_F16, 1 }, { QC_TYPE_Q4_0, 2 }, { QC_TYPE_Q8_0, 7 },
	{ QC_TYPE_Q6_K, 18 }, { QC_TYPE_BF16, 32 },
};

static int add_hparam(struct qc_gguf_writer *w, const struct hparams *hp, const char *suffix,
		      uint32_t v, struct qc_err *err)
{
	char key[96];
	snprintf(key, sizeof key, "%s.%s", qc_mkgguf_arch_names[hp->arch], suffix);
	return qc_gguf_writer_add_u32(w, key, v, err);
}

static int add_hparam_f32(struct qc_gguf_writer *w, const struct hparams *hp, const char *suffix,
			  float v, struct qc_err *err)
{
	char key[96];
	snprintf(key, sizeof key, "%s.%s", qc_mkgguf_arch_names[hp->arch], suffix);
	return qc_gguf_writer_add_f32(w, key, v, err);
}

/* convert_hf_to_gguf Phi3MiniModel: the original context and the window always
 * (llama.cpp c392e50 refuses a phi3 without a window unless its layer count and
 * context match a known model), and with LongRoPE the attention factor
 * sqrt(1 + ln(scale) / ln(orig)), scale = context / original context (1 when <= 1). */
static int add_phi3(struct qc_gguf_writer *w, const struct hparams *hp, const struct hparams_x *hx,
		    struct qc_err *err)
{
	const int64_t orig = hx->rope_orig_ctx ? hx->rope_orig_ctx : hp->n_ctx;
	int rc = add_hparam(w, hp, "rope.scaling.original_context_length", (uint32_t)orig, err);
	if (!rc)
		rc = add_hparam(w, hp, "attention.sliding_window",
				(uint32_t)(hx->sliding_window > 0 ? hx->sliding_window : 2047), err);
	if (!rc && hx->rope_scaling == ROPE_LONGROPE) {
		const double scale = (double)hp->n_ctx / (double)orig;
		const double f = scale > 1.0 ? sqrt(1.0 + log(scale) / log((double)orig)) : 1.0;
		rc = add_hparam_f32(w, hp, "rope.scaling.attn_factor", (float)f, err);
	}
	return rc;
}

/* The full key set of a llama.cpp-converted checkpoint, in convert_hf_to_gguf's order. */
int qc_mkgguf_add_metadata(struct qc_gguf_writer *w, const struct opts *o, const struct vocab *v,
			struct qc_err *err)
{
	const struct hparams *hp = &o->hp;
	uint32_t hd = (uint32_t)(hp->n_embd / hp->n_head);
	char name[96];
	snprintf(name, sizeof name, "qconvert synthetic %s (%s, seed %llu)", o->preset,
		 o->mix ? o->mix->name : qc_types[o->type].name, (unsigned long long)o->seed);
	int rc = qc_gguf_writer_add_str(w, "general.architecture", qc_mkgguf_arch_names[hp->arch], err);
	if (!rc)
		rc = qc_gguf_writer_add_str(w, "general.name", name, err);
	if (!rc)
		rc = add_hparam(w, hp, "vocab_size", (uint32_t)hp->n_vocab, err);
	if (!rc)
		rc = add_hparam(w, hp, "context_length", (uint32_t)hp->n_ctx, err);
	if (!rc)
		rc = add_hparam(w, hp, "embedding_length", (uint32_t)hp->n_embd, err);
	if (!rc)
		rc = add_hparam(w, hp, "block_count", (uint32_t)hp->n_layer, err);
	if (!rc)
		rc = add_hparam(w, hp, "feed_forward_length", (uint32_t)hp->n_ff, err);
	if (!rc)
		rc = add_hparam(w, hp, "rope.dimension_count", hd, err);
	if (!rc)
		rc = add_hparam_f32(w, hp, "rope.freq_base", hp->rope_base, err);
	if (!rc)
		rc = add_hparam(w, hp, "attention.head_count", (uint32_t)hp->n_head, err);
	if (!rc)
		rc = add_hparam(w, hp, "attention.head_count_kv", (uint32_t)hp->n_head_kv, err);
	if (!rc)
		rc = add_hparam_f32(w, hp, "attention.layer_norm_rms_epsilon", hp->rms_eps, err);
	const bool qwen3 = hp->arch == ARCH_QWEN3 || hp->arch == ARCH_QWEN3MOE;
	const bool gemma2 = hp->arch == ARCH_GEMMA2, gemma3 = hp->arch == ARCH_GEMMA3;
	if (!rc && (qwen3 || gemma2 || gemma3))
		rc = add_hparam(w, hp, "attention.key_length", hd, err);
	if (!rc && (qwen3 || gemma2 || gemma3))
		rc = add_hparam(w, hp, "attention.value_length", hd, err);
	/* convert_hf_to_gguf Gemma2Model: both soft-caps and the window, always */
	const struct hparams_x *gx = &o->hx;
	if (!rc && gemma2)
		rc = add_hparam_f32(w, hp, "attn_logit_softcapping", gx->attn_softcap > 0 ? gx->attn_softcap : 50.0f, err);
	if (!rc && gemma2)
		rc = add_hparam_f32(w, hp, "final_logit_softcapping", gx->final_softcap > 0 ? gx->final_softcap : 30.0f,
				    err);
	if (!rc && gemma2)
		rc = add_hparam(w, hp, "attention.sliding_window",
				(uint32_t)(gx->sliding_window > 0 ? gx->sliding_window : 4096), err);
	/* convert_hf_to_gguf Gemma3Model: the window, no soft-caps (Gemma 3 has none) */
	if (!rc && gemma3)
		rc = add_hparam(w, hp, "attention.sliding_window",
				(uint32_t)(gx->sliding_window > 0 ? gx->sliding_window : 512), err);
	if (!rc && hp->arch == ARCH_PHI3)
		rc = add_phi3(w, hp, &o->hx, err);
	/* any other arch: only when asked (qconvert writes it for a Hugging Face
	 * Mistral or Qwen2 whose config has one; llama.cpp's converter never does) */
	if (!rc && !gemma2 && !gemma3 && hp->arch != ARCH_PHI3 && gx->sliding_window > 0)
		rc = add_hparam(w, hp, "attention.sliding_window", (uint32_t)gx->sliding_window, err);
	if (!rc && hp->n_expert)
		rc = add_hparam(w, hp, "expert_count", (uint32_t)hp->n_expert, err);
	if (!rc && hp->n_expert)
		rc = add_hparam(w, hp, "expert_used_count", (uint32_t)hp->n_expert_used, err);
	if (!rc && qc_mkgguf_has_experts(hp->arch))
		rc = add_hparam(w, hp, "expert_feed_forward_length", (uint32_t)hp->n_ff, err);
	if (!rc && hp->arch == ARCH_QWEN2MOE)
		rc = add_hparam(w, hp, "expert_shared_feed_forward_length",
				(uint32_t)(o->hx.n_ff_shexp ? o->hx.n_ff_shexp : hp->n_ff), err);
	const struct hparams_x *hx = &o->hx;
	if (!rc && (hx->rope_scaling == ROPE_LINEAR || hx->rope_scaling == ROPE_YARN)) {
		char key[96];
		snprintf(key, sizeof key, "%s.rope.scaling.type", qc_mkgguf_arch_names[hp->arch]);
		rc = qc_gguf_writer_add_str(w, key, hx->rope_scaling == ROPE_YARN ? "yarn" : "linear", err);
		if (!rc)
			rc = add_hparam_f32(w, hp, "rope.scaling.factor", hx->rope_factor, err);
		if (!rc && hx->rope_scaling == ROPE_YARN)
			rc = add_hparam(w, hp, "rope.scaling.original_context_length",
					(uint32_t)(hx->rope_orig_ctx ? hx->rope_orig_ctx : hp->n_ctx), err);
	}
	if (!rc && o->mix)
		rc = qc_gguf_writer_add_u32(w, "general.file_type", o->mix->ftype, err);
	for (size_t i = 0; i < sizeof ftypes / sizeof ftypes[0] && !rc && !o->mix; i++)
		if (ftypes[i].type == o->type)
			rc = qc_gguf_writer_add_u32(w, "general.file_type", ftypes[i].ftype, err);
	if (!rc)
		rc = qc_gguf_writer_add_str(w, "tokenizer.ggml.model", "llama", err);
	if (!rc)
		rc = qc_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok,
						v->n, err);
	if (!rc)
		rc = qc_gguf_writer_add_arr(w, "tokenizer.ggml.scores", QC_GGUF_FLOAT32, v->score, v->n, err);
	if (!rc)
		rc = qc_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", QC_GGUF_INT32, v->ttype, v->n,
					    err);
	if (!rc)
		rc = qc_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1, err);
	if (!rc)
		rc = qc_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2, err);
	if (!rc)
		rc = qc_gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 0, err);
	if (!rc)
		rc = qc_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true, err);
	if (!rc)
		rc = qc_gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", false, err);
	if (!rc)
		rc = qc_gguf_writer_add_u32(w, "general.quantization_version", 2, err);
	return rc;
}
