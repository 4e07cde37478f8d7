/* hf_config.c — config.json → struct qc_hf_config → GGUF keys (see hf_config.h).
 * Every number is checked to be an exact integer (or finite real) in a sane range
 * before use; absent optional values take transformers' defaults. */
#include "hf_config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_DIM (1 << 24)

static const struct qc_hf_arch archs[] = {
	{ "LlamaForCausalLM", "llama", true, false, false, QC_HF_MOE_NONE, false },
	{ "MistralForCausalLM", "llama", true, false, false, QC_HF_MOE_NONE, false },
	{ "MixtralForCausalLM", "llama", true, false, false, QC_HF_MOE_MIXTRAL, false },
	{ "Qwen2ForCausalLM", "qwen2", false, true, false, QC_HF_MOE_NONE, false },
	{ "Qwen3ForCausalLM", "qwen3", false, false, true, QC_HF_MOE_NONE, false },
	{ "Qwen2MoeForCausalLM", "qwen2moe", false, true, false, QC_HF_MOE_QWEN, true },
	{ "Qwen3MoeForCausalLM", "qwen3moe", false, false, true, QC_HF_MOE_QWEN, false },
};

struct ctx {
	const cJSON *j;
	char path[QC_ERR_NAME_MAX];
	struct qc_err *err;
};

/* Optional integer key in [lo, hi]; *out keeps def when absent. */
static int get_int(struct ctx *c, const char *key, int64_t lo, int64_t hi, bool required, int64_t def, int64_t *out)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(c->j, key);
	*out = def;
	if (!x || cJSON_IsNull(x)) {
		if (required)
			return qc_err_set(c->err, QC_EFORMAT, c->path, NULL, -1, "\"%s\" is missing", key);
		return QC_OK;
	}
	double v = cJSON_IsNumber(x) ? x->valuedouble : NAN;
	if (!(v >= (double)lo && v <= (double)hi) || v != floor(v))
		return qc_err_set(c->err, QC_EFORMAT, c->path, NULL, -1, "\"%s\" must be an integer in [%lld, %lld]", key,
				  (long long)lo, (long long)hi);
	*out = (int64_t)v;
	return QC_OK;
}

static int get_real(struct ctx *c, const cJSON *obj, const char *key, double def, double *out)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(obj, key);
	*out = def;
	if (!x || cJSON_IsNull(x))
		return QC_OK;
	if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble <= 0)
		return qc_err_set(c->err, QC_EFORMAT, c->path, NULL, -1, "\"%s\" must be a positive number", key);
	*out = x->valuedouble;
	return QC_OK;
}

static int get_bool(struct ctx *c, const char *key, bool def, bool *out, bool *present)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(c->j, key);
	*out = def;
	if (present)
		*present = x && !cJSON_IsNull(x);
	if (!x || cJSON_IsNull(x))
		return QC_OK;
	if (!cJSON_IsBool(x))
		return qc_err_set(c->err, QC_EFORMAT, c->path, NULL, -1, "\"%s\" must be true or false", key);
	*out = cJSON_IsTrue(x);
	return QC_OK;
}

static int parse_rope_scaling(struct ctx *c, struct qc_hf_config *h)
{
	const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c->j, "rope_scaling");
	h->rope.type = QC_HF_ROPE_NONE;
	if (!rs || cJSON_IsNull(rs))
		return QC_OK;
	if (!cJSON_IsObject(rs))
		return qc_err_set(c->err, QC_EFORMAT, c->path, NULL, -1, "\"rope_scaling\" must be an object");
	/* transformers reads "rope_type", older configs say "type" */
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
	if (!cJSON_IsString(t))
		t = cJSON_GetObjectItemCaseSensitive(rs, "type");
	if (!cJSON_IsString(t))
		return qc_err_set(c->err, QC_EFORMAT, c->path, NULL, -1, "\"rope_scaling\" has no \"rope_type\"");
	const char *s = t->valuestring;
	static const struct { const char *name; enum qc_hf_rope_scaling type; } kinds[] = {
		{ "default", QC_HF_ROPE_NONE }, { "linear", QC_HF_ROPE_LINEAR },
		{ "llama3", QC_HF_ROPE_LLAMA3 }, { "yarn", QC_HF_ROPE_YARN },
	};
	size_t k = 0;
	while (k < sizeof kinds / sizeof kinds[0] && strcmp(kinds[k].name, s) != 0)
		k++;
	if (k == sizeof kinds / sizeof kinds[0])
		return qc_err_set(c->err, QC_EUNSUPPORTED, c->path, NULL, -1,
				  "rope_scaling type '%s' is not supported (linear, llama3, yarn)", s);
	h->rope.type = kinds[k].type;
	int rc = get_real(c, rs, "factor", 1.0, &h->rope.factor);
	if (!rc)
		rc = get_real(c, rs, "low_freq_factor", 1.0, &h->rope.low_freq_factor);
	if (!rc)
		rc = get_real(c, rs, "high_freq_factor", 4.0, &h->rope.high_freq_factor);
	if (rc)
		return rc;
	const cJSON *o = cJSON_GetObjectItemCaseSensitive(rs, "original_max_position_embeddings");
	h->rope.orig_ctx = 0;
	if (o && !cJSON_IsNull(o)) {
		if (!cJSON_IsNumber(o) || !(o->valuedouble >= 1 && o->valuedouble <= (double)(1ll << 40)) ||
		    o->valuedouble != floor(o->valuedouble))
			return qc_err_set(c->err, QC_EFORMAT, c->path, NULL, -1,
					  "rope_scaling.original_max_position_embeddings must be a positive integer");
		h->rope.orig_ctx = (int64_t)o->valuedouble;
	}
	if (h->rope.type == QC_HF_ROPE_LLAMA3 && !(h->rope.high_freq_factor > h->rope.low_freq_factor))
		return qc_err_set(c->err, QC_EFORMAT, c->path, NULL, -1, "rope_scaling: high_freq_factor must exceed low_freq_factor");
	return QC_OK;
}

static int parse_moe(struct ctx *c, struct qc_hf_config *h)
{
	const struct qc_hf_arch *a = h->arch;
	int rc;
	if (a->moe == QC_HF_MOE_NONE)
		return QC_OK;
	const char *n_key = a->moe == QC_HF_MOE_MIXTRAL ? "num_local_experts" : "num_experts";
	if ((rc = get_int(c, n_key, 1, 4096, true, 0, &h->n_expert)) ||
	    (rc = get_int(c, "num_experts_per_tok", 1, h->n_expert, true, 0, &h->n_expert_used)))
		return rc;
	if (a->moe == QC_HF_MOE_MIXTRAL) {
		h->n_ff_expert = h->n_ff;
		return QC_OK;
	}
	int64_t step;
	if ((rc = get_int(c, "moe_intermediate_size", 1, MAX_DIM, true, 0, &h->n_ff_expert)) ||
	    (rc = get_int(c, "decoder_sparse_step", 1, 1 << 20, false, 1, &step)) ||
	    (rc = get_bool(c, "norm_topk_prob", false, &h->norm_topk_prob, NULL)))
		return rc;
	const cJSON *only = cJSON_GetObjectItemCaseSensitive(c->j, "mlp_only_layers");
	if (step != 1 || (cJSON_IsArray(only) && cJSON_GetArraySize(only) > 0))
		return qc_err_set(c->err, QC_EUNSUPPORTED, c->path, NULL, -1,
				  "dense layers between MoE layers (decoder_sparse_step %lld, mlp_only_layers) are not supported",
				  (long long)step);
	if (a->shared_expert)
		return get_int(c, "shared_expert_intermediate_size", 1, MAX_DIM, true, 0, &h->n_ff_shared);
	return QC_OK;
}

static int parse_window(struct ctx *c, struct qc_hf_config *h);

int qc_hf_config_parse(const struct qc_hf_source *src, struct qc_hf_config *h, struct qc_err *err)
{
	struct ctx c = { .j = src->config, .err = err };
	int rc;
	memset(h, 0, sizeof *h);
	snprintf(c.path, sizeof c.path, "%s/config.json", src->path);
	const cJSON *ar = cJSON_GetObjectItemCaseSensitive(c.j, "architectures");
	const cJSON *a0 = cJSON_IsArray(ar) ? cJSON_GetArrayItem(ar, 0) : NULL;
	if (!cJSON_IsString(a0))
		return qc_err_set(err, QC_EFORMAT, c.path, NULL, -1, "no \"architectures\" list naming the model class");
	for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
		if (strcmp(archs[i].hf_name, a0->valuestring) == 0)
			h->arch = &archs[i];
	if (!h->arch)
		return qc_err_set(err, QC_EUNSUPPORTED, c.path, NULL, -1,
				  "architecture '%.100s' is not supported (Llama, Mistral, Mixtral, Qwen2, Qwen3, Qwen2-MoE, Qwen3-MoE)",
				  a0->valuestring);
	if ((rc = get_int(&c, "num_hidden_layers", 1, 4096, true, 0, &h->n_layer)) ||
	    (rc = get_int(&c, "hidden_size", 1, MAX_DIM, true, 0, &h->n_embd)) ||
	    (rc = get_int(&c, "intermediate_size", 1, MAX_DIM, true, 0, &h->n_ff)) ||
	    (rc = get_int(&c, "num_attention_heads", 1, 65536, true, 0, &h->n_head)) ||
	    (rc = get_int(&c, "num_key_value_heads", 1, h->n_head, false, h->n_head, &h->n_head_kv)) ||
	    (rc = get_int(&c, "head_dim", 2, 65536, false, h->n_embd / h->n_head, &h->head_dim)) ||
	    (rc = get_int(&c, "vocab_size", 1, MAX_DIM, true, 0, &h->n_vocab)) ||
	    (rc = get_int(&c, "max_position_embeddings", 1, 1ll << 40, false, 2048, &h->n_ctx)) ||
	    (rc = get_real(&c, c.j, "rms_norm_eps", 1e-6, &h->rms_eps)) ||
	    (rc = get_real(&c, c.j, "rope_theta", 10000.0, &h->rope_theta)) ||
	    (rc = get_bool(&c, "tie_word_embeddings", false, &h->tie_embeddings, NULL)) ||
	    (rc = get_bool(&c, "attention_bias", h->arch->qkv_bias, &h->attn_bias, NULL)))
		return rc;
	const cJSON *hdj = cJSON_GetObjectItemCaseSensitive(c.j, "head_dim");
	h->explicit_head_dim = hdj && !cJSON_IsNull(hdj);
	if (h->n_head % h->n_head_kv)
		return qc_err_set(err, QC_EFORMAT, c.path, NULL, -1, "num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
				  (long long)h->n_head, (long long)h->n_head_kv);
	if (h->head_dim < 2 || h->head_dim % 2)
		return qc_err_set(err, QC_EFORMAT, c.path, NULL, -1, "head dimension %lld must be even", (long long)h->head_dim);
	if (h->arch->qkv_bias)
		h->attn_bias = true;
	if ((rc = parse_window(&c, h)))
		return rc;
	const cJSON *act = cJSON_GetObjectItemCaseSensitive(c.j, "hidden_act");
	if (cJSON_IsString(act) && strcmp(act->valuestring, "silu") != 0)
		return qc_err_set(err, QC_EUNSUPPORTED, c.path, NULL, -1, "hidden_act '%.40s' is not supported (silu)",
				  act->valuestring);
	if ((rc = parse_rope_scaling(&c, h)))
		return rc;
	return parse_moe(&c, h);
}

/* Which classes' sliding_window transformers applies, and whether it is gated by
 * use_sliding_window and max_window_layers (Qwen2: layers il >= max_window_layers
 * are windowed, as its flash-attention path and later releases' layer_types say;
 * 4.46's eager/SDPA mask windows every layer whenever use_sliding_window is set). */
static const struct {
	const char *hf_name;
	bool gated;
} window_rules[] = {
	{"MistralForCausalLM", false},
	{"MixtralForCausalLM", false},
	{"Qwen2ForCausalLM", true},
};

/* h->sliding_window from the config: a window on every layer is written (the
 * runtime applies it, as transformers does; llama.cpp's converter drops it);
 * windowed layers above full-attention ones are refused, as is a window on a
 * class not in window_rules; one as long as the context cuts nothing. */
static int parse_window(struct ctx *c, struct qc_hf_config *h)
{
	bool swa = false, gated = false, known = false;
	int64_t w = 0, first = 0;
	int rc;
	for (size_t i = 0; i < sizeof window_rules / sizeof window_rules[0]; i++)
		if (!strcmp(h->arch->hf_name, window_rules[i].hf_name)) {
			known = true;
			gated = window_rules[i].gated;
		}
	if ((rc = get_bool(c, "use_sliding_window", false, &swa, NULL)))
		return rc;
	const cJSON *sw = cJSON_GetObjectItemCaseSensitive(c->j, "sliding_window");
	if (swa && !known)
		return qc_err_set(c->err, QC_EUNSUPPORTED, c->path, NULL, -1, "use_sliding_window: true is not supported for %s",
				  h->arch->hf_name);
	h->sliding_window = 0;
	if (!known || (gated && !swa) || !sw || cJSON_IsNull(sw))
		return QC_OK;
	if ((rc = get_int(c, "sliding_window", 1, 1ll << 40, true, 0, &w)) ||
	    (gated && (rc = get_int(c, "max_window_layers", 0, 1ll << 40, false, 28, &first))))
		return rc;
	if (w >= h->n_ctx || first >= h->n_layer)
		return QC_OK; /* cuts nothing, or no layer is windowed */
	if (first > 0)
		return qc_err_set(c->err, QC_EUNSUPPORTED, c->path, NULL, -1,
				  "sliding_window on layers %lld.. above full-attention layers 0..%lld (max_window_layers) is not supported",
				  (long long)first, (long long)first - 1);
	h->sliding_window = w;
	return QC_OK;
}

static int key(char *buf, size_t n, const struct qc_hf_config *c, const char *suffix)
{
	return snprintf(buf, n, "%s.%s", c->arch->gguf_arch, suffix);
}

int qc_hf_config_to_gguf(const struct qc_hf_config *c, struct qc_gguf_writer *w, struct qc_err *err)
{
	char k[128];
	int rc = qc_gguf_writer_add_str(w, "general.architecture", c->arch->gguf_arch, err);
	static const char *const names[] = {
		"vocab_size", "context_length", "embedding_length", "block_count", "feed_forward_length",
		"attention.head_count", "attention.head_count_kv", "rope.dimension_count",
	};
	const int64_t vals[] = { c->n_vocab, c->n_ctx, c->n_embd, c->n_layer, c->n_ff, c->n_head, c->n_head_kv, c->head_dim };
	for (size_t i = 0; !rc && i < sizeof names / sizeof names[0]; i++) {
		key(k, sizeof k, c, names[i]);
		rc = qc_gguf_writer_add_u32(w, k, (uint32_t)vals[i], err);
	}
	/* head size: as llama.cpp, whenever the config states it, and wherever it differs
	 * from n_embd / n_head (Qwen3, some Mistrals) */
	if (!rc && (c->explicit_head_dim || c->head_dim * c->n_head != c->n_embd)) {
		key(k, sizeof k, c, "attention.key_length");
		rc = qc_gguf_writer_add_u32(w, k, (uint32_t)c->head_dim, err);
		key(k, sizeof k, c, "attention.value_length");
		if (!rc)
			rc = qc_gguf_writer_add_u32(w, k, (uint32_t)c->head_dim, err);
	}
	key(k, sizeof k, c, "rope.freq_base");
	if (!rc)
		rc = qc_gguf_writer_add_f32(w, k, (float)c->rope_theta, err);
	key(k, sizeof k, c, "attention.layer_norm_rms_epsilon");
	if (!rc)
		rc = qc_gguf_writer_add_f32(w, k, (float)c->rms_eps, err);
	key(k, sizeof k, c, "attention.sliding_window");
	if (!rc && c->sliding_window > 0)
		rc = qc_gguf_writer_add_u32(w, k, (uint32_t)(c->sliding_window > UINT32_MAX ? UINT32_MAX : c->sliding_window), err);
	if (!rc && (c->rope.type == QC_HF_ROPE_LINEAR || c->rope.type == QC_HF_ROPE_YARN)) {
		key(k, sizeof k, c, "rope.scaling.type");
		rc = qc_gguf_writer_add_str(w, k, c->rope.type == QC_HF_ROPE_LINEAR ? "linear" : "yarn", err);
		key(k, sizeof k, c, "rope.scaling.factor");
		if (!rc)
			rc = qc_gguf_writer_add_f32(w, k, (float)c->rope.factor, err);
		key(k, sizeof k, c, "rope.scaling.original_context_length");
		if (!rc && c->rope.orig_ctx)
			rc = qc_gguf_writer_add_u32(w, k, (uint32_t)(c->rope.orig_ctx > UINT32_MAX ? UINT32_MAX : c->rope.orig_ctx), err);
	}
	if (!rc && c->n_expert) {
		key(k, sizeof k, c, "expert_count");
		rc = qc_gguf_writer_add_u32(w, k, (uint32_t)c->n_expert, err);
		key(k, sizeof k, c, "expert_used_count");
		if (!rc)
			rc = qc_gguf_writer_add_u32(w, k, (uint32_t)c->n_expert_used, err);
		key(k, sizeof k, c, "expert_feed_forward_length");
		if (!rc && c->arch->moe == QC_HF_MOE_QWEN)
			rc = qc_gguf_writer_add_u32(w, k, (uint32_t)c->n_ff_expert, err);
		key(k, sizeof k, c, "expert_shared_feed_forward_length");
		if (!rc && c->n_ff_shared)
			rc = qc_gguf_writer_add_u32(w, k, (uint32_t)c->n_ff_shared, err);
		/* always explicit for Qwen MoE: transformers' default (false) differs from
		 * llama.cpp's qwen3moe default (true) */
		key(k, sizeof k, c, "expert_weights_norm");
		if (!rc && c->arch->moe == QC_HF_MOE_QWEN)
			rc = qc_gguf_writer_add_bool(w, k, c->norm_topk_prob, err);
	}
	return rc;
}

void qc_hf_config_llama3_rope_factors(const struct qc_hf_config *c, float *out)
{
	const double pi = 3.14159265358979323846;
	double old_ctx = c->rope.orig_ctx ? (double)c->rope.orig_ctx : 8192.0;
	double lo = c->rope.low_freq_factor, hi = c->rope.high_freq_factor, f = c->rope.factor;
	double lo_wl = old_ctx / lo, hi_wl = old_ctx / hi;
	for (int64_t i = 0; i < c->head_dim / 2; i++) {
		/* llama.cpp computes the frequencies in float32; so do we */
		float freq = 1.0f / powf((float)c->rope_theta, (float)(2 * i) / (float)c->head_dim);
		double wl = 2 * pi / freq;
		double r;
		if (wl < hi_wl) {
			r = 1.0;
		} else if (wl > lo_wl) {
			r = f;
		} else {
			double smooth = (old_ctx / wl - lo) / (hi - lo);
			r = 1.0 / ((1 - smooth) / f + smooth);
		}
		out[i] = (float)r;
	}
}
