/* arch.c — the architecture table and its refinement by a manifest (see arch.h). */
#include "arch.h"

#include <stdio.h>
#include <string.h>

const struct qc_arch_feat_info qc_arch_feats[QC_AF_COUNT] = {
#define X(id, key, phrase) [QC_AF_##id##_BIT] = {key, phrase},
#include "arch_feat.def"
#undef X
};

/* Shared columns: the llama block (pre-RMSNorm, SwiGLU) and Gemma's. */
#define LLAMA_BLOCK (QC_AF(RMSNORM) | QC_AF(SWIGLU))
#define GEMMA_BLOCK (QC_AF(RMSNORM_1P) | QC_AF(GEGLU_TANH) | QC_AF(ROPE_NEOX) | QC_AF(EMBD_SCALE) | QC_AF(TIED_EMBD))

/* Facts from llama.cpp (llama_model_rope_type, load_hparams, build_*): which norm,
 * FFN, RoPE pairing, biases and extras each architecture's graph uses. MoE bits on
 * an OPTIONAL row apply only when the file has experts (llama -> Mixtral). */
const struct qc_arch qc_archs[] = {
	{.name = "llama", .feats = LLAMA_BLOCK | QC_AF(ROPE_NORM) | QC_AF(MOE_RENORM),
	 .experts = QC_EXPERTS_OPTIONAL, .examples = "Llama 2/3, TinyLlama"},
	{.name = "mistral", .stored_as = "llama", .feats = LLAMA_BLOCK | QC_AF(ROPE_NORM),
	 .examples = "Mistral 7B (its window on every layer when the file states it, as transformers)"},
	{.name = "mixtral", .stored_as = "llama", .feats = LLAMA_BLOCK | QC_AF(ROPE_NORM) | QC_AF(MOE) | QC_AF(MOE_RENORM),
	 .experts = QC_EXPERTS_REQUIRED, .examples = "Mixtral 8x7B"},
	{.name = "qwen2", .feats = LLAMA_BLOCK | QC_AF(ROPE_NEOX) | QC_AF(QKV_BIAS), .examples = "Qwen2, Qwen2.5"},
	{.name = "qwen2moe", .feats = LLAMA_BLOCK | QC_AF(ROPE_NEOX) | QC_AF(QKV_BIAS) | QC_AF(MOE) | QC_AF(MOE_SHARED),
	 .experts = QC_EXPERTS_REQUIRED, .examples = "Qwen1.5-MoE, Qwen2-57B-A14B"},
	{.name = "qwen3", .feats = LLAMA_BLOCK | QC_AF(ROPE_NEOX) | QC_AF(QK_NORM), .examples = "Qwen3"},
	{.name = "qwen3moe", .feats = LLAMA_BLOCK | QC_AF(ROPE_NEOX) | QC_AF(QK_NORM) | QC_AF(MOE) | QC_AF(MOE_RENORM),
	 .experts = QC_EXPERTS_REQUIRED, .examples = "Qwen3-30B-A3B"},
	{.name = "gemma", .feats = GEMMA_BLOCK, .examples = "Gemma"},
	{.name = "gemma2", .feats = GEMMA_BLOCK | QC_AF(POST_NORM) | QC_AF(ATTN_SOFTCAP) | QC_AF(FINAL_SOFTCAP) |
					QC_AF(SLIDING_WINDOW),
	 .window_pattern = 2, .examples = "Gemma 2"},
	{.name = "gemma3", .feats = GEMMA_BLOCK | QC_AF(POST_NORM) | QC_AF(QK_NORM) | QC_AF(SLIDING_WINDOW) |
					QC_AF(ROPE_LOCAL),
	 .window_pattern = 6, .examples = "Gemma 3"},
	{.name = "phi3", .feats = LLAMA_BLOCK | QC_AF(ROPE_NEOX) | QC_AF(FUSED_QKV) | QC_AF(FUSED_GATE_UP) |
				  QC_AF(LONGROPE) | QC_AF(SLIDING_WINDOW),
	 .window_pattern = 1, .examples = "Phi-3, Phi-3.5"},
	{.name = "starcoder2", .feats = QC_AF(LAYERNORM) | QC_AF(GELU_MLP) | QC_AF(ROPE_NEOX) | QC_AF(LINEAR_BIAS),
	 .examples = "StarCoder2"},
	{.name = "falcon", .feats = QC_AF(LAYERNORM) | QC_AF(GELU_MLP) | QC_AF(ROPE_NEOX) | QC_AF(FUSED_QKV) |
				    QC_AF(PARALLEL_BLOCK),
	 .examples = "Falcon 7B/40B"},
	{.name = "gpt2", .feats = QC_AF(LAYERNORM) | QC_AF(GELU_MLP) | QC_AF(POS_EMBD) | QC_AF(FUSED_QKV) |
				  QC_AF(LINEAR_BIAS),
	 .examples = "GPT-2"},
	{.name = "bert", .feats = QC_AF(LAYERNORM) | QC_AF(GELU_MLP) | QC_AF(POS_EMBD) | QC_AF(LINEAR_BIAS) |
				  QC_AF(NON_CAUSAL),
	 .examples = "BERT (embeddings)"},
};
const size_t qc_n_archs = sizeof qc_archs / sizeof qc_archs[0];

#define MOE_BITS (QC_AF(MOE) | QC_AF(MOE_RENORM) | QC_AF(MOE_SHARED))

const struct qc_arch *qc_arch_find(const char *name)
{
	for (size_t i = 0; i < qc_n_archs; i++)
		if (!qc_archs[i].stored_as && !strcmp(name, qc_archs[i].name))
			return &qc_archs[i];
	return NULL;
}

/* A number: the value, or element 0 of a per-layer array (the engine needs
 * uniform layers and reads the same element). */
static bool num(const cJSON *o, const char *key, double *v)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
	if (cJSON_IsArray(it))
		it = cJSON_GetArrayItem(it, 0);
	if (!cJSON_IsNumber(it))
		return false;
	*v = it->valuedouble;
	return true;
}

static bool md_num(const cJSON *md, const char *arch, const char *suffix, double *v)
{
	char key[160];
	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	return num(md, key, v);
}

/* A soft-cap key that is present decides: > 0 caps, 0 turns the row's cap off. */
static void softcap(const cJSON *md, const char *arch, const char *suffix, uint64_t bit, uint64_t *feats, double *out)
{
	double v;
	if (!md_num(md, arch, suffix, &v))
		return;
	*out = v > 0 ? v : 0;
	*feats = v > 0 ? *feats | bit : *feats & ~bit;
}

/* llama.cpp c392e50 (load_hparams, LLM_ARCH_PHI3) gives Phi-3 GGUFs written before
 * the window key these windows, by layer count, K/V heads (0: any) and trained
 * context; any other phi3 without the key it refuses to load. */
static const struct {
	const char *arch;
	double n_layer, n_head_kv, n_ctx_train, window;
} window_defaults[] = {
	{"phi3", 32, 0, 4096, 2047},      /* Phi-3-mini-4k-instruct */
	{"phi3", 40, 0, 4096, 2047},      /* Phi-3-medium-4k-instruct */
	{"phi3", 32, 32, 131072, 262144}, /* Phi-3-mini-128k-instruct */
	{"phi3", 40, 0, 131072, 131072},  /* Phi-3-medium-128k-instruct */
};

static bool default_window(const cJSON *cfg, const char *arch, double *v)
{
	double nl = 0, kv = 0, ctx = 0;
	num(cfg, "n_layer", &nl);
	num(cfg, "n_head_kv", &kv);
	num(cfg, "n_ctx_train", &ctx);
	for (size_t i = 0; i < sizeof window_defaults / sizeof window_defaults[0]; i++)
		if (!strcmp(arch, window_defaults[i].arch) && nl == window_defaults[i].n_layer &&
		    (!window_defaults[i].n_head_kv || kv == window_defaults[i].n_head_kv) &&
		    ctx == window_defaults[i].n_ctx_train) {
			*v = window_defaults[i].window;
			return true;
		}
	return false;
}

void qc_arch_describe(const cJSON *manifest, struct qc_arch_desc *d)
{
	const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(manifest, "config");
	const cJSON *md = cJSON_GetObjectItemCaseSensitive(manifest, "metadata");
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(cfg, "architecture");
	double v;

	memset(d, 0, sizeof *d);
	snprintf(d->name, sizeof d->name, "%s", cJSON_IsString(a) ? a->valuestring : "");
	d->arch = qc_arch_find(d->name);
	if (!d->arch)
		return;
	d->feats = d->arch->feats;
	d->window_pattern = d->arch->window_pattern;

	/* experts: llama.cpp builds a NONE row dense whatever the keys say */
	if (d->arch->experts != QC_EXPERTS_NONE) {
		if (num(cfg, "n_expert", &v) && v > 0)
			d->n_expert = (int64_t)v;
		if (num(cfg, "n_expert_used", &v) && v > 0)
			d->n_expert_used = (int64_t)v;
		if (num(cfg, "n_expert_shared", &v) && v > 0)
			d->n_expert_shared = (int64_t)v;
	}
	if (d->arch->experts == QC_EXPERTS_OPTIONAL)
		d->feats = d->n_expert ? d->feats | QC_AF(MOE) : d->feats & ~MOE_BITS;
	if ((d->feats & QC_AF(MOE_SHARED)) && !d->n_expert_shared)
		d->n_expert_shared = 1; /* qwen2moe states the shared expert's width, not a count: it has one */

	softcap(md, d->name, "attn_logit_softcapping", QC_AF(ATTN_SOFTCAP), &d->feats, &d->attn_softcap);
	softcap(md, d->name, "final_logit_softcapping", QC_AF(FINAL_SOFTCAP), &d->feats, &d->final_softcap);

	/* A stated window limits attention only when shorter than the trained context;
	 * otherwise it never cuts anything and the model runs as all-global. */
	if (md_num(md, d->name, "attention.sliding_window", &v) || default_window(cfg, d->name, &v)) {
		double ctx = 0;
		num(cfg, "n_ctx_train", &ctx);
		d->sliding_window = v > 0 ? (int64_t)v : 0;
		if (v > 0 && (ctx <= 0 || v < ctx))
			d->feats |= QC_AF(SLIDING_WINDOW);
		else
			d->feats &= ~QC_AF(SLIDING_WINDOW);
	}
	if (!(d->feats & QC_AF(SLIDING_WINDOW)))
		d->window_pattern = 0;
	else if (!d->window_pattern)
		d->window_pattern = 1; /* a window stated for a row without a pattern: every layer */

	/* RoPE scaling, with llama.cpp's default type "linear" for a bare factor */
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling_type");
	const char *type = cJSON_IsString(st) ? st->valuestring : "linear";
	double factor = 0;
	if (!num(cfg, "rope_scaling_factor", &factor) || factor == 0)
		num(cfg, "rope_freq_scale_linear", &factor);
	/* Phi-3: the row's LongRoPE only with the factor tables (config "longrope") */
	const cJSON *lr = cJSON_GetObjectItemCaseSensitive(cfg, "longrope");
	if (!cJSON_IsTrue(lr))
		d->feats &= ~QC_AF(LONGROPE);
	if (!strcmp(type, "yarn"))
		d->feats |= QC_AF(ROPE_YARN);
	else if (!strcmp(type, "longrope"))
		d->feats |= QC_AF(LONGROPE);
	else if (!strcmp(type, "linear") && factor > 0 && factor != 1)
		d->feats |= QC_AF(ROPE_LINEAR);

	const cJSON *tied = cJSON_GetObjectItemCaseSensitive(cfg, "tie_embeddings");
	if (cJSON_IsTrue(tied))
		d->feats |= QC_AF(TIED_EMBD);
}

const struct qc_arch_backend_info qc_arch_backends[QC_ARCH_BACKEND_COUNT] = {
	[QC_ARCH_BACKEND_CPU] = {"CPU", QC_ARCH_CPU_FEATURES},
	[QC_ARCH_BACKEND_CUDA] = {"CUDA", QC_ARCH_CUDA_FEATURES},
};

const struct qc_arch_checked qc_arch_checked[] = {
	{"gemma2", QC_ARCH_EXTRA_GEMMA2},
	{"phi3", QC_ARCH_EXTRA_PHI3},
	{"llama", QC_ARCH_EXTRA_HF_WINDOW},
	{"qwen2", QC_ARCH_EXTRA_HF_WINDOW},
	{"gemma3", QC_ARCH_EXTRA_GEMMA3},
};
const size_t qc_n_arch_checked = sizeof qc_arch_checked / sizeof qc_arch_checked[0];

uint64_t qc_arch_missing_on(const struct qc_arch_desc *d, enum qc_arch_backend b)
{
	uint64_t have = QC_ARCH_BASE_FEATURES;
	for (size_t i = 0; i < qc_n_arch_checked; i++)
		if (!strcmp(d->name, qc_arch_checked[i].arch))
			have |= qc_arch_checked[i].feats & qc_arch_backends[b].feats;
	return d->arch ? d->feats & ~have : UINT64_MAX;
}

/* The CPU's column is a superset of the CUDA one: what it lacks, no backend has. */
uint64_t qc_arch_missing(const struct qc_arch_desc *d)
{
	return qc_arch_missing_on(d, QC_ARCH_BACKEND_CPU);
}

const char *qc_arch_feat_list(uint64_t mask, char *buf, size_t len)
{
	size_t n = 0;
	if (len)
		buf[0] = '\0';
	for (int i = 0; i < QC_AF_COUNT && n < len; i++)
		if (mask & (UINT64_C(1) << i)) {
			int w = snprintf(buf + n, len - n, "%s%s", n ? ", " : "", qc_arch_feats[i].phrase);
			if (w < 0)
				break;
			n += (size_t)w;
		}
	return buf;
}

/* Architectures whose graph scales q by 1/sqrt(head_dim) after RoPE and then
 * attends with scale 1 (llama.cpp build_gemma2, build_phi3, build_gemma3). */
static const char *const q_scaled_after_rope[] = {"gemma2", "phi3", "gemma3"};

/* The 27B models, told by their layer count as llama.cpp tells them, scale q by
 * 1/sqrt(n_embd/n_head) instead (their query_pre_attn_scalar: 4608/32 and 5376/32). */
static const struct { const char *arch; int64_t n_layer; } q_scaled_by_width[] = {
	{"gemma2", 46},
	{"gemma3", 62},
};

int64_t qc_arch_q_scale_dim(const char *arch, int64_t n_layer, int64_t n_embd, int64_t n_head, int64_t head_dim)
{
	int64_t d = 0;
	for (size_t i = 0; i < sizeof q_scaled_after_rope / sizeof q_scaled_after_rope[0]; i++)
		if (!strcmp(arch, q_scaled_after_rope[i]))
			d = head_dim;
	for (size_t i = 0; i < sizeof q_scaled_by_width / sizeof q_scaled_by_width[0]; i++)
		if (!strcmp(arch, q_scaled_by_width[i].arch) && n_layer == q_scaled_by_width[i].n_layer && n_head > 0)
			d = n_embd / n_head;
	return d;
}
