/* hf_config.c — config.json → struct qc_hf_config → GGUF keys (see hf_config.h).
 * Every number is checked to be an exact integer (or finite real) in a sane range
 * before use; absent optional values take transformers' defaults. */
#include "hf_config.h"

#include "arch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_DIM (1 << 24)

#define ROPE_ALL (QC_HF_ROPE_BIT(QC_HF_ROPE_NONE) | QC_HF_ROPE_BIT(QC_HF_ROPE_LINEAR) | \
		  QC_HF_ROPE_BIT(QC_HF_ROPE_LLAMA3) | QC_HF_ROPE_BIT(QC_HF_ROPE_YARN))

/* Gemma 2 and 3: what llama.cpp's gemma2/gemma3 graphs (and qrun's) implement; the
 * RoPE scalings each transformers class applies (Gemma 3: linear, global layers only). */
#define GEMMA(hf, gguf, qkn, tc, cap, ropes)                                                     \
	{ .hf_name = hf, .gguf_arch = gguf, .names = QC_HF_NAMES_GEMMA, .qk_norm = qkn,             \
	  .norm_plus_one = true, .text_config = tc, .softcap = cap, .act = "gelu_pytorch_tanh",     \
	  .rope_types = ropes }

static const struct qc_hf_arch archs[] = {
	{ .hf_name = "LlamaForCausalLM", .gguf_arch = "llama", .permute_qk = true, .act = "silu", .rope_types = ROPE_ALL },
	{ .hf_name = "MistralForCausalLM", .gguf_arch = "llama", .permute_qk = true, .act = "silu", .rope_types = ROPE_ALL },
	{ .hf_name = "MixtralForCausalLM", .gguf_arch = "llama", .permute_qk = true, .moe = QC_HF_MOE_MIXTRAL,
	  .act = "silu", .rope_types = ROPE_ALL },
	{ .hf_name = "Qwen2ForCausalLM", .gguf_arch = "qwen2", .qkv_bias = true, .act = "silu", .rope_types = ROPE_ALL },
	{ .hf_name = "Qwen3ForCausalLM", .gguf_arch = "qwen3", .qk_norm = true, .act = "silu", .rope_types = ROPE_ALL },
	{ .hf_name = "Qwen2MoeForCausalLM", .gguf_arch = "qwen2moe", .qkv_bias = true, .moe = QC_HF_MOE_QWEN,
	  .shared_expert = true, .act = "silu", .rope_types = ROPE_ALL },
	{ .hf_name = "Qwen3MoeForCausalLM", .gguf_arch = "qwen3moe", .qk_norm = true, .moe = QC_HF_MOE_QWEN,
	  .act = "silu", .rope_types = ROPE_ALL },
	GEMMA("Gemma2ForCausalLM", "gemma2", false, false, true, QC_HF_ROPE_BIT(QC_HF_ROPE_NONE)),
	GEMMA("Gemma3ForCausalLM", "gemma3", true, false, false,
	      QC_HF_ROPE_BIT(QC_HF_ROPE_NONE) | QC_HF_ROPE_BIT(QC_HF_ROPE_LINEAR)),
	GEMMA("Gemma3ForConditionalGeneration", "gemma3", true, true, false,
	      QC_HF_ROPE_BIT(QC_HF_ROPE_NONE) | QC_HF_ROPE_BIT(QC_HF_ROPE_LINEAR)),
	{ .hf_name = "Phi3ForCausalLM", .gguf_arch = "phi3", .names = QC_HF_NAMES_PHI3, .act = "silu",
	  .rope_types = QC_HF_ROPE_BIT(QC_HF_ROPE_NONE) | QC_HF_ROPE_BIT(QC_HF_ROPE_LONGROPE), .partial_rope = true },
};

#undef GEMMA

/* Values a class's configuration gives a key config.json leaves out (the released
 * multimodal Gemma 3 configs state only a few text_config keys). Other classes'
 * missing keys take the defaults at each read. */
static const struct {
	const char *hf_prefix;     /* the classes whose name starts so */
	const char *key;
	double value;
} class_defaults[] = {
	{"Gemma2", "vocab_size", 256000}, {"Gemma2", "hidden_size", 2304},
	{"Gemma2", "intermediate_size", 9216}, {"Gemma2", "num_hidden_layers", 26},
	{"Gemma2", "num_attention_heads", 8}, {"Gemma2", "num_key_value_heads", 4},
	{"Gemma2", "head_dim", 256}, {"Gemma2", "max_position_embeddings", 8192},
	{"Gemma2", "rope_theta", 10000}, {"Gemma2", "query_pre_attn_scalar", 256},
	{"Gemma2", "sliding_window", 4096}, {"Gemma2", "attn_logit_softcapping", 50},
	{"Gemma2", "final_logit_softcapping", 30},
	{"Gemma3", "vocab_size", 262208}, {"Gemma3", "hidden_size", 2304},
	{"Gemma3", "intermediate_size", 9216}, {"Gemma3", "num_hidden_layers", 26},
	{"Gemma3", "num_attention_heads", 8}, {"Gemma3", "num_key_value_heads", 4},
	{"Gemma3", "head_dim", 256}, {"Gemma3", "max_position_embeddings", 131072},
	{"Gemma3", "rope_theta", 1000000}, {"Gemma3", "query_pre_attn_scalar", 256},
	{"Gemma3", "sliding_window", 4096}, {"Gemma3", "rope_local_base_freq", 10000},
	{"Gemma3", "sliding_window_pattern", 6},
	{"Phi3", "original_max_position_embeddings", 4096},
	{"Gemma", "tie_word_embeddings", 1},
};

/* Keys whose value the GGUF arch fixes (llama.cpp's graph and qrun's assume it; a
 * GGUF does not store it): any other value is refused, naming the key. */
static const struct {
	const char *hf_prefix;
	const char *key;
	double value;
	const char *why;
} fixed_values[] = {
	{"Gemma3", "rope_local_base_freq", 10000, "the local layers' RoPE base of llama.cpp's gemma3"},
	{"Gemma3", "sliding_window_pattern", 6, "llama.cpp's gemma3 windows 5 of every 6 layers"},
	{"Gemma", "tie_word_embeddings", 1, "llama.cpp's Gemma reads the output from token_embd"},
};

/* Where the text model's tensors are, for classes that wrap it: transformers < 4.52
 * (and the released checkpoints) say language_model.model.*, later ones
 * model.language_model.*; the first whose embed_tokens exists is used. The other
 * prefixes (the vision tower, its projector) are dropped with a note. */
static const char *const gemma3_cg_dropped[] = {
	"vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.", NULL,
};
static const struct {
	const char *hf_name;
	const char *root, *head;
	const char *const *dropped;
} text_roots[] = {
	{"Gemma3ForConditionalGeneration", "language_model.model", "language_model.lm_head", gemma3_cg_dropped},
	{"Gemma3ForConditionalGeneration", "model.language_model", "lm_head", gemma3_cg_dropped},
};

static bool has_prefix(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

struct ctx {
	const cJSON *j;            /* the hyper-parameters (config.json, or its text_config) */
	const struct qc_hf_arch *arch;
	char path[QC_ERR_NAME_MAX];
	struct qc_err *err;
};

/* The class's default for key (class_defaults), if it has one. */
static bool class_default(const struct ctx *c, const char *key, double *v)
{
	for (size_t i = 0; c->arch && i < sizeof class_defaults / sizeof class_defaults[0]; i++)
		if (has_prefix(c->arch->hf_name, class_defaults[i].hf_prefix) && !strcmp(key, class_defaults[i].key)) {
			*v = class_defaults[i].value;
			return true;
		}
	return false;
}

/* Optional integer key in [lo, hi]; when absent *out is the class's default, else
 * def (an error when required). */
static int get_int(struct ctx *c, const char *key, int64_t lo, int64_t hi, bool required, int64_t def, int64_t *out)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(c->j, key);
	double cd;
	*out = def;
	if ((!x || cJSON_IsNull(x)) && class_default(c, key, &cd) && cd >= (double)lo && cd <= (double)hi) {
		*out = (int64_t)cd;
		return QC_OK;
	}
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
	if ((!x || cJSON_IsNull(x)) && obj == c->j)
		class_default(c, key, out);
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
	double cd;
	*out = def;
	if (present)
		*present = x && !cJSON_IsNull(x);
	if ((!x || cJSON_IsNull(x)) && class_default(c, key, &cd))
		*out = cd != 0;
	if (!x || cJSON_IsNull(x))
		return QC_OK;
	if (!cJSON_IsBool(x))
		return qc_err_set(c->err, QC_EFORMAT, c->path, NULL, -1, "\"%s\" must be true or false", key);
	*out = cJSON_IsTrue(x);
	return QC_OK;
}

/* One LongRoPE table: rope_dim/2 positive finite numbers (each divides its rotated
 * pair's frequency; transformers' _compute_longrope_parameters sizes them by
 * head_dim × partial_rotary_factor). */
static int longrope_table(struct ctx *c, const cJSON *rs, const char *key, const struct qc_hf_config *h,
			  const cJSON **out)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, key);
	const int64_t n = h->rope_dim / 2;
	if (!cJSON_IsArray(t) || cJSON_GetArraySize(t) != n)
		return qc_err_set(c->err, QC_EFORMAT, c->path, NULL, -1,
				  "rope_scaling.%s must be a list of %lld numbers (the rotated dims %lld / 2), not %d",
				  key, (long long)n, (long long)h->rope_dim, cJSON_IsArray(t) ? cJSON_GetArraySize(t) : 0);
	const cJSON *x;
	cJSON_ArrayForEach(x, t)
		if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || !(x->valuedouble > 0))
			return qc_err_set(c->err, QC_EFORMAT, c->path, NULL, -1, "rope_scaling.%s holds a value that is not a positive number",
					  key);
	*out = t;
	return QC_OK;
}

/* Phi-3's LongRoPE (transformers _compute_longrope_parameters): the original context
 * is the top-level original_max_position_embeddings (Phi3Config always has one), the
 * scale s = max_position_embeddings / it, and the factor on cos and sin
 * rope_scaling.attention_factor when stated, else sqrt(1 + ln s / ln original) for
 * s > 1 and 1 otherwise; it applies whichever table is chosen. */
static int parse_longrope(struct ctx *c, const cJSON *rs, struct qc_hf_config *h)
{
	int rc;
	if ((rc = longrope_table(c, rs, "long_factor", h, &h->rope.long_factor)) ||
	    (rc = longrope_table(c, rs, "short_factor", h, &h->rope.short_factor)) ||
	    (rc = get_int(c, "original_max_position_embeddings", 1, 1ll << 40, false, h->n_ctx, &h->rope.orig_ctx)) ||
	    (rc = get_real(c, rs, "attention_factor", 0.0, &h->rope.attn_factor)))
		return rc;
	if (h->rope.attn_factor == 0.0) {
		const double scale = (double)h->n_ctx / (double)h->rope.orig_ctx;
		h->rope.attn_factor = scale <= 1.0 || h->rope.orig_ctx < 2 ? 1.0 : sqrt(1.0 + log(scale) / log((double)h->rope.orig_ctx));
	}
	return QC_OK;
}

/* h->rope_dim: head_dim × partial_rotary_factor where the arch rotates part of a head
 * (Phi-4-mini: 0.75), as transformers' int(head_dim * factor), which must be exact
 * and even (rotate_half pairs i with i + rope_dim / 2); head_dim elsewhere. */
static int parse_rope_dim(struct ctx *c, struct qc_hf_config *h)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(c->j, "partial_rotary_factor");
	h->rope_dim = h->head_dim;
	if (!h->arch->partial_rope || !x || cJSON_IsNull(x))
		return QC_OK;
	if (!cJSON_IsNumber(x))
		return qc_err_set(c->err, QC_EFORMAT, c->path, NULL, -1, "\"partial_rotary_factor\" must be a number in (0, 1]");
	const double f = x->valuedouble;
	if (!(f > 0.0 && f <= 1.0))
		return qc_err_set(c->err, QC_EFORMAT, c->path, NULL, -1, "\"partial_rotary_factor\" %g is not in (0, 1]", f);
	const double r = (double)h->head_dim * f;
	if (r != floor(r) || (int64_t)r % 2 || r < 2)
		return qc_err_set(c->err, QC_EFORMAT, c->path, NULL, -1,
				  "\"partial_rotary_factor\" %g: head_dim %lld x %g = %.17g rotated dims, not a whole "
				  "even number", f, (long long)h->head_dim, f, r);
	h->rope_dim = (int64_t)r;
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
		{ "longrope", QC_HF_ROPE_LONGROPE }, { "su", QC_HF_ROPE_LONGROPE }, /* Phi3Config renames su */
	};
	size_t k = 0;
	while (k < sizeof kinds / sizeof kinds[0] && strcmp(kinds[k].name, s) != 0)
		k++;
	if (k == sizeof kinds / sizeof kinds[0] || !(h->arch->rope_types & QC_HF_ROPE_BIT(kinds[k].type)))
		return qc_err_set(c->err, QC_EUNSUPPORTED, c->path, NULL, -1,
				  "rope_scaling type '%.40s' is not supported for %s", s, h->arch->hf_name);
	h->rope.type = kinds[k].type;
	if (h->rope.type == QC_HF_ROPE_LONGROPE)
		return parse_longrope(c, rs, h);
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

/* h->arch from "architectures"[0]; c->j becomes the hyper-parameters' object. */
static int find_arch(struct ctx *c, struct qc_hf_config *h)
{
	const cJSON *ar = cJSON_GetObjectItemCaseSensitive(c->j, "architectures");
	const cJSON *a0 = cJSON_IsArray(ar) ? cJSON_GetArrayItem(ar, 0) : NULL;
	if (!cJSON_IsString(a0))
		return qc_err_set(c->err, QC_EFORMAT, c->path, NULL, -1, "no \"architectures\" list naming the model class");
	for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
		if (strcmp(archs[i].hf_name, a0->valuestring) == 0)
			h->arch = &archs[i];
	if (!h->arch)
		return qc_err_set(c->err, QC_EUNSUPPORTED, c->path, NULL, -1,
				  "architecture '%.100s' is not supported (Llama, Mistral, Mixtral, Qwen2, Qwen3, Qwen2-MoE, "
				  "Qwen3-MoE, Gemma 2, Gemma 3, Phi-3)", a0->valuestring);
	c->arch = h->arch;
	if (h->arch->text_config) {
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(c->j, "text_config");
		if (!cJSON_IsObject(t))
			return qc_err_set(c->err, QC_EFORMAT, c->path, NULL, -1, "%s without a \"text_config\" object",
					  h->arch->hf_name);
		c->j = t;
	}
	return QC_OK;
}

/* The text model's tensor prefix and output module (text_roots), by which one the
 * checkpoint has. */
static void find_root(const struct qc_hf_source *src, struct qc_hf_config *h)
{
	snprintf(h->root, sizeof h->root, "model");
	snprintf(h->head, sizeof h->head, "lm_head");
	bool found = false;
	for (size_t i = 0; i < sizeof text_roots / sizeof text_roots[0] && !found; i++) {
		if (strcmp(text_roots[i].hf_name, h->arch->hf_name))
			continue;
		char name[128];
		snprintf(name, sizeof name, "%s.embed_tokens.weight", text_roots[i].root);
		found = qc_hf_find(src, name) != NULL;
		if (found || !h->dropped) { /* the first row when none matches: the error names its tensor */
			snprintf(h->root, sizeof h->root, "%s", text_roots[i].root);
			snprintf(h->head, sizeof h->head, "%s", text_roots[i].head);
			h->dropped = text_roots[i].dropped;
		}
	}
}

/* fixed_values: a value the GGUF arch cannot carry must be the one it assumes. */
static int check_fixed(struct ctx *c)
{
	for (size_t i = 0; i < sizeof fixed_values / sizeof fixed_values[0]; i++) {
		if (!has_prefix(c->arch->hf_name, fixed_values[i].hf_prefix))
			continue;
		const cJSON *x = cJSON_GetObjectItemCaseSensitive(c->j, fixed_values[i].key);
		if (!x || cJSON_IsNull(x))
			continue; /* the class default, which class_defaults holds equal */
		double v = cJSON_IsBool(x) ? (cJSON_IsTrue(x) ? 1.0 : 0.0) : cJSON_IsNumber(x) ? x->valuedouble : NAN;
		if (v != fixed_values[i].value)
			return qc_err_set(c->err, QC_EUNSUPPORTED, c->path, NULL, -1, "\"%s\" must be %g for %s (%s)",
					  fixed_values[i].key, fixed_values[i].value, c->arch->hf_name, fixed_values[i].why);
	}
	return QC_OK;
}

/* hidden_act (or Gemma's hidden_activation) must be the arch's activation. */
static int check_act(struct ctx *c)
{
	static const char *const keys[] = {"hidden_act", "hidden_activation"};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		const cJSON *act = cJSON_GetObjectItemCaseSensitive(c->j, keys[i]);
		if (cJSON_IsString(act) && strcmp(act->valuestring, c->arch->act) != 0)
			return qc_err_set(c->err, QC_EUNSUPPORTED, c->path, NULL, -1, "%s '%.40s' is not supported (%s)", keys[i],
					  act->valuestring, c->arch->act);
	}
	return QC_OK;
}

/* transformers scales scores by query_pre_attn_scalar^-1/2 (Gemma); the GGUF arch's
 * graph derives its scale from the shape (qc_arch_q_scale_dim): they must agree. */
static int check_q_scale(struct ctx *c, const struct qc_hf_config *h)
{
	int64_t qpas;
	int rc = get_int(c, "query_pre_attn_scalar", 1, 1 << 24, false, 0, &qpas);
	if (rc || !qpas)
		return rc;
	int64_t d = qc_arch_q_scale_dim(h->arch->gguf_arch, h->n_layer, h->n_embd, h->n_head, h->head_dim);
	if (d != qpas)
		return qc_err_set(c->err, QC_EUNSUPPORTED, c->path, NULL, -1,
				  "query_pre_attn_scalar %lld: llama.cpp's and qrun's %s scale q by 1/sqrt(%lld) at %lld layers "
				  "(a GGUF does not store it)", (long long)qpas, h->arch->gguf_arch, (long long)d, (long long)h->n_layer);
	return QC_OK;
}

/* A soft-cap: the class default when absent, null for none, else > 0. Only archs
 * whose graph caps may state one. */
static int get_softcap(struct ctx *c, const char *key, double *out)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(c->j, key);
	*out = 0;
	if (!x)
		class_default(c, key, out);
	else if (!cJSON_IsNull(x) && (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble <= 0))
		return qc_err_set(c->err, QC_EFORMAT, c->path, NULL, -1, "\"%s\" must be a positive number or null", key);
	else if (!cJSON_IsNull(x))
		*out = x->valuedouble;
	if (*out > 0 && !c->arch->softcap)
		return qc_err_set(c->err, QC_EUNSUPPORTED, c->path, NULL, -1, "\"%s\" is not supported for %s", key,
				  c->arch->hf_name);
	return QC_OK;
}

int qc_hf_config_parse(const struct qc_hf_source *src, struct qc_hf_config *h, struct qc_err *err)
{
	struct ctx c = { .j = src->config, .err = err };
	int rc;
	memset(h, 0, sizeof *h);
	snprintf(c.path, sizeof c.path, "%s/config.json", src->path);
	if ((rc = find_arch(&c, h)))
		return rc;
	find_root(src, h);
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
	double hd_default;
	h->explicit_head_dim = (hdj && !cJSON_IsNull(hdj)) || class_default(&c, "head_dim", &hd_default);
	if (h->n_head % h->n_head_kv)
		return qc_err_set(err, QC_EFORMAT, c.path, NULL, -1, "num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
				  (long long)h->n_head, (long long)h->n_head_kv);
	if (h->head_dim < 2 || h->head_dim % 2)
		return qc_err_set(err, QC_EFORMAT, c.path, NULL, -1, "head dimension %lld must be even", (long long)h->head_dim);
	if (h->arch->qkv_bias)
		h->attn_bias = true;
	if (h->attn_bias && h->arch->names != QC_HF_NAMES_LLAMA)
		return qc_err_set(err, QC_EUNSUPPORTED, c.path, NULL, -1, "attention_bias is not supported for %s", h->arch->hf_name);
	if ((rc = check_fixed(&c)) || (rc = check_act(&c)) || (rc = check_q_scale(&c, h)) ||
	    (rc = get_softcap(&c, "attn_logit_softcapping", &h->attn_softcap)) ||
	    (rc = get_softcap(&c, "final_logit_softcapping", &h->final_softcap)) ||
	    (rc = parse_window(&c, h)) || (rc = parse_rope_dim(&c, h)) || (rc = parse_rope_scaling(&c, h)))
		return rc;
	return parse_moe(&c, h);
}

/* How each class's sliding_window becomes the GGUF key. */
enum window_rule {
	WIN_EVERY,   /* every layer (Mistral, Mixtral); dropped when it cuts nothing */
	WIN_GATED,   /* Qwen2: only with use_sliding_window, on layers il >= max_window_layers
		      * (its flash-attention path and later releases' layer_types; 4.46's
		      * eager/SDPA mask windows every layer whenever use_sliding_window is set) */
	WIN_ARCH,    /* written as stated, null as 0 (none): the GGUF arch's rule picks the
		      * layers (gemma2: even ones, gemma3: 5 of 6, phi3: all), as llama.cpp's
		      * converter writes it; gemma3's local RoPE holds even when it cuts nothing */
};

static const struct {
	const char *hf_prefix;
	enum window_rule rule;
} window_rules[] = {
	{"MistralForCausalLM", WIN_EVERY},
	{"MixtralForCausalLM", WIN_EVERY},
	{"Qwen2ForCausalLM", WIN_GATED},
	{"Gemma2", WIN_ARCH},
	{"Gemma3", WIN_ARCH},
	{"Phi3", WIN_ARCH},
};

/* Newer transformers configs list each layer's kind ("sliding_attention" or
 * "full_attention"): it must be the GGUF arch's fixed pattern (window_pattern n:
 * layer il is windowed when il % n < n - 1; 1: every layer). */
static int check_layer_types(struct ctx *c, const struct qc_hf_config *h)
{
	const cJSON *lt = cJSON_GetObjectItemCaseSensitive(c->j, "layer_types");
	const struct qc_arch *a = qc_arch_find(h->arch->gguf_arch);
	if (!lt || cJSON_IsNull(lt))
		return QC_OK;
	if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != h->n_layer)
		return qc_err_set(c->err, QC_EFORMAT, c->path, NULL, -1, "\"layer_types\" must list num_hidden_layers (%lld) kinds",
				  (long long)h->n_layer);
	const int n = a ? a->window_pattern : 0;
	for (int il = 0; il < (int)h->n_layer; il++) {
		const cJSON *t = cJSON_GetArrayItem(lt, il);
		const bool windowed = n == 1 || (n > 1 && il % n < n - 1);
		const char *want = windowed ? "sliding_attention" : "full_attention";
		if (!cJSON_IsString(t) || strcmp(t->valuestring, want))
			return qc_err_set(c->err, QC_EUNSUPPORTED, c->path, NULL, -1,
					  "layer_types[%d] must be \"%s\" (%s's fixed pattern)", il, want, h->arch->gguf_arch);
	}
	return QC_OK;
}

/* h->sliding_window from the config: a window on every layer is written (the
 * runtime applies it, as transformers does; llama.cpp's converter drops it);
 * windowed layers above full-attention ones are refused, as is a window on a
 * class not in window_rules; one as long as the context cuts nothing. Gemma and
 * Phi-3 windows are written as stated (WIN_ARCH). */
static int parse_window(struct ctx *c, struct qc_hf_config *h)
{
	bool swa = false, known = false;
	enum window_rule rule = WIN_EVERY;
	int64_t w = 0, first = 0;
	int rc;
	for (size_t i = 0; i < sizeof window_rules / sizeof window_rules[0]; i++)
		if (has_prefix(h->arch->hf_name, window_rules[i].hf_prefix)) {
			known = true;
			rule = window_rules[i].rule;
		}
	if ((rc = get_bool(c, "use_sliding_window", false, &swa, NULL)))
		return rc;
	const cJSON *sw = cJSON_GetObjectItemCaseSensitive(c->j, "sliding_window");
	if (swa && (!known || rule != WIN_GATED))
		return qc_err_set(c->err, QC_EUNSUPPORTED, c->path, NULL, -1, "use_sliding_window: true is not supported for %s",
				  h->arch->hf_name);
	h->sliding_window = 0;
	if (known && rule == WIN_ARCH) {
		h->write_window = true;
		if ((rc = check_layer_types(c, h)))
			return rc;
		return get_int(c, "sliding_window", 0, 1ll << 40, false, 0, &h->sliding_window);
	}
	if (!known || (rule == WIN_GATED && !swa) || !sw || cJSON_IsNull(sw))
		return QC_OK;
	if ((rc = get_int(c, "sliding_window", 1, 1ll << 40, true, 0, &w)) ||
	    (rule == WIN_GATED && (rc = get_int(c, "max_window_layers", 0, 1ll << 40, false, 28, &first))))
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
	/* rope.dimension_count: the rotated dims, as llama.cpp's Phi-4-mini converter writes
	 * (head_dim × partial_rotary_factor); key_length below stays the head size */
	const int64_t vals[] = { c->n_vocab, c->n_ctx, c->n_embd, c->n_layer, c->n_ff, c->n_head, c->n_head_kv, c->rope_dim };
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
	if (!rc && (c->sliding_window > 0 || c->write_window))
		rc = qc_gguf_writer_add_u32(w, k, (uint32_t)(c->sliding_window > UINT32_MAX ? UINT32_MAX : c->sliding_window), err);
	/* Gemma 2's caps, 0 for a null one (arch.c: a stated 0 turns the row's cap off) */
	key(k, sizeof k, c, "attn_logit_softcapping");
	if (!rc && c->arch->softcap)
		rc = qc_gguf_writer_add_f32(w, k, (float)c->attn_softcap, err);
	key(k, sizeof k, c, "final_logit_softcapping");
	if (!rc && c->arch->softcap)
		rc = qc_gguf_writer_add_f32(w, k, (float)c->final_softcap, err);
	/* LongRoPE: the tables are tensors (hf_convert.c); the original context chooses
	 * between them at run time, the attention factor scales cos and sin */
	if (!rc && c->rope.type == QC_HF_ROPE_LONGROPE) {
		key(k, sizeof k, c, "rope.scaling.original_context_length");
		rc = qc_gguf_writer_add_u32(w, k, (uint32_t)(c->rope.orig_ctx > UINT32_MAX ? UINT32_MAX : c->rope.orig_ctx), err);
		key(k, sizeof k, c, "rope.scaling.attn_factor");
		if (!rc)
			rc = qc_gguf_writer_add_f32(w, k, (float)c->rope.attn_factor, err);
	}
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

void qc_hf_config_rope_factors(const cJSON *table, int64_t n, float *out)
{
	for (int64_t i = 0; i < n; i++)
		out[i] = (float)cJSON_GetNumberValue(cJSON_GetArrayItem(table, (int)i));
}
