/* model.c — manifest config + weight views for the llama, Qwen, Gemma 2/3 and Phi-3 families.
 *
 * Owns: reading "config" (per architecture, from formats/arch.h's row: RoPE pairing,
 * experts, weight renormalization, shared expert, as llama.cpp hard-codes them),
 * locating every tensor by llama.cpp's GGUF name and checking its shape (and its
 * optional "<base>.act_perm" permutation) once, so the backend never re-checks.
 * Fused w13 experts are found through the bundle's part table (gate rows then up
 * rows per expert, docs/bundle.md), so fused and separate stacks look the same.
 * Phi-3's fused attn_qkv and ffn_up stay whole in the bundle (dump returns them as
 * the GGUF had them); q/k/v and gate/up are views of their row ranges here.
 * Every tensor is looked up under a prefix: "" in a plain bundle, "tp<r>." for
 * rank r's members of a --tp bundle (model_tp.c builds those models with the
 * rank's widths in cfg, so the same shape checks apply to a shard).
 * Non-goals: any arithmetic beyond decoding small vectors and the YaRN ramp.
 * Reference: llama.cpp llama_model::load_hparams / load_tensors, llama_context
 * cparams (yarn), ggml_rope_yarn_corr_dims (facts only).
 */
#include "model.h"
#include "model_int.h"

#include "arch.h"
#include "bundle_tp.h"
#include "layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIM (1 << 24)

/* Which architectures run, and how: formats/arch.h's table (features each arch
 * needs) against QC_ARCH_RUNTIME_FEATURES (what this engine implements). RoPE
 * pairing, expert rule, top-k renormalization and the shared expert are read off
 * the same row, so a new arch is one row there plus its forward pass here. */
bool qc_model_arch_supported(const char *arch)
{
	const struct qc_arch *a = qc_arch_find(arch);
	return a && !(a->feats & ~QC_ARCH_RUNTIME_FEATURES);
}

/* llama.cpp's YaRN beta_fast / beta_slow for these archs (hparams defaults). */
#define YARN_BETA_FAST 32.0f
#define YARN_BETA_SLOW 1.0f

static const cJSON *cfg_item(const cJSON *cfg, const char *key)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(cfg, key);
	if (cJSON_IsArray(it)) /* per-layer arrays: this engine needs uniform layers */
		it = cJSON_GetArrayItem(it, 0);
	return cJSON_IsNumber(it) ? it : NULL;
}

static int cfg_int(const cJSON *cfg, const char *key, int32_t def, bool required, int32_t *out,
		   const char *path, struct qc_err *err)
{
	const cJSON *it = cfg_item(cfg, key);
	if (!it) {
		if (required)
			return qc_err_set(err, QC_EFORMAT, path, NULL, -1, "config key '%s' missing", key);
		*out = def;
		return QC_OK;
	}
	if (!(it->valuedouble >= 0 && it->valuedouble <= MAX_DIM))
		return qc_err_set(err, QC_EFORMAT, path, NULL, -1, "config '%s' = %g out of range", key,
				  it->valuedouble);
	*out = (int32_t)it->valuedouble;
	return QC_OK;
}

static float cfg_float(const cJSON *cfg, const char *key, float def)
{
	const cJSON *it = cfg_item(cfg, key);
	return it ? (float)it->valuedouble : def;
}

/* A key that is present must hold a finite number (a NaN written by a converter is
 * stored as JSON null, which must not fall back to the default), > 0 when
 * `positive`, else >= 0. */
enum cfg_sign { CFG_NONNEG, CFG_POSITIVE };

static int cfg_check_num(const cJSON *cfg, const char *key, enum cfg_sign sign, const char *p, struct qc_err *err)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(cfg, key);
	if (cJSON_IsArray(it))
		it = cJSON_GetArrayItem(it, 0);
	if (!it)
		return QC_OK;
	if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
		return qc_err_set(err, QC_EFORMAT, p, NULL, -1, "config '%s' is not a finite number", key);
	if (it->valuedouble < 0 || (sign == CFG_POSITIVE && it->valuedouble == 0))
		return qc_err_set(err, QC_EFORMAT, p, NULL, -1, "config '%s' = %g must be %s", key, it->valuedouble,
				  sign == CFG_POSITIVE ? "> 0" : ">= 0");
	return QC_OK;
}

static int check_config_values(const cJSON *cfg, const char *p, struct qc_err *err)
{
	static const struct { const char *key; enum cfg_sign sign; } keys[] = {
		{"n_ctx_train", CFG_POSITIVE},        {"n_embd", CFG_POSITIVE},
		{"n_layer", CFG_POSITIVE},            {"n_ff", CFG_POSITIVE},
		{"n_head", CFG_POSITIVE},             {"n_head_kv", CFG_POSITIVE},
		{"head_dim_k", CFG_POSITIVE},         {"head_dim_v", CFG_POSITIVE},
		{"rope_dim", CFG_POSITIVE},           {"rope_freq_base", CFG_POSITIVE},
		{"norm_rms_eps", CFG_POSITIVE},       {"n_ff_expert", CFG_POSITIVE},
		{"rope_freq_scale_linear", CFG_NONNEG}, {"rope_scaling_factor", CFG_NONNEG},
		{"rope_scaling_attn_factor", CFG_NONNEG}, {"rope_scaling_orig_ctx", CFG_NONNEG},
		{"n_expert", CFG_NONNEG},             {"n_expert_used", CFG_NONNEG},
	};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		int rc = cfg_check_num(cfg, keys[i].key, keys[i].sign, p, err);
		if (rc)
			return rc;
	}
	return QC_OK;
}

/* The config against the tensors: no blk.N at or past n_layer (llama.cpp: "wrong
 * number of tensors"; layers below it are required by load_layer), and the FFN
 * widths the config states equal the ones the weights have. */
static int check_config_tensors(const struct qc_bundle *b, const struct qc_model_config *c, struct qc_err *err)
{
	const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(b->manifest, "config");
	for (uint64_t i = 0; i < b->n_tensors; i++) {
		const char *nm;
		qc_bundle_tp_rank_of(b->tensors[i].name, &nm); /* a --tp bundle's tp<r>. prefix off */
		char *end;
		long long l = strncmp(nm, "blk.", 4) ? -1 : strtoll(nm + 4, &end, 10);
		if (l >= c->n_layer)
			return qc_err_set(err, QC_EFORMAT, b->path, b->tensors[i].name, -1,
					  "config 'n_layer' = %d, but the bundle has tensors for layer %lld", c->n_layer, l);
	}
	const cJSON *ff = cfg_item(cfg, c->n_expert ? "n_ff_expert" : "n_ff");
	if (ff && ff->valuedouble != c->n_ff)
		return qc_err_set(err, QC_EFORMAT, b->path, c->n_expert ? "blk.0.ffn_down_exps.weight" : "blk.0.ffn_down.weight",
				  -1, "config '%s' = %g, but the FFN weights are %d wide", c->n_expert ? "n_ff_expert" : "n_ff",
				  ff->valuedouble, c->n_ff);
	return QC_OK;
}

/* ggml_rope_yarn_corr_dim: the rotated dim whose wavelength spans n_rot turns
 * over the original context (float arithmetic as ggml does it). */
static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base)
{
	return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

static int read_rope(const cJSON *cfg, struct qc_model_config *c, const char *p,
		     struct qc_err *err)
{
	int rc;
	c->rope_freq_base = cfg_float(cfg, "rope_freq_base", 10000.0f);
	/* llama.cpp: type defaults to "linear", so a bare factor scales linearly */
	c->rope_scaling = QC_ROPE_SCALING_LINEAR;
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling_type");
	if (cJSON_IsString(st) && !strcmp(st->valuestring, "none"))
		c->rope_scaling = QC_ROPE_SCALING_NONE;
	else if (cJSON_IsString(st) && !strcmp(st->valuestring, "yarn"))
		c->rope_scaling = QC_ROPE_SCALING_YARN;
	else if (cJSON_IsString(st) && strcmp(st->valuestring, "linear"))
		return qc_err_set(err, QC_EUNSUPPORTED, p, NULL, -1, "rope scaling '%s' not supported",
				  st->valuestring);
	/* scaling factor, else the older linear key; scale = 1 / factor */
	float factor = cfg_float(cfg, "rope_scaling_factor", 0.0f);
	if (factor == 0.0f)
		factor = cfg_float(cfg, "rope_freq_scale_linear", 0.0f);
	c->rope_freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
	if (c->rope_scaling == QC_ROPE_SCALING_NONE)
		c->rope_freq_scale = 1.0f; /* llama.cpp: never scale when the type is none */
	c->rope_attn_factor = cfg_float(cfg, "rope_scaling_attn_factor", 1.0f);
	if ((rc = cfg_int(cfg, "rope_scaling_orig_ctx", 0, false, &c->n_ctx_orig, p, err)))
		return rc;
	if (!c->n_ctx_orig)
		c->n_ctx_orig = c->n_ctx_train;
	if (!(c->rope_freq_base > 0) || !isfinite(c->rope_freq_scale) || !(c->rope_freq_scale > 0) ||
	    !(c->rope_attn_factor > 0) || !isfinite(c->rope_attn_factor) || c->n_ctx_orig < 1)
		return qc_err_set(err, QC_EFORMAT, p, NULL, -1, "config: bad rope parameters");
	c->rope_ext_factor = c->rope_scaling == QC_ROPE_SCALING_YARN ? 1.0f : 0.0f;
	const float lo = floorf(yarn_corr_dim(c->rope_dim, c->n_ctx_orig, YARN_BETA_FAST, c->rope_freq_base));
	const float hi = ceilf(yarn_corr_dim(c->rope_dim, c->n_ctx_orig, YARN_BETA_SLOW, c->rope_freq_base));
	c->rope_corr_dims[0] = lo > 0.0f ? lo : 0.0f;
	c->rope_corr_dims[1] = hi < (float)(c->rope_dim - 1) ? hi : (float)(c->rope_dim - 1);
	return QC_OK;
}

static int read_config(const struct qc_bundle *b, struct qc_model_config *c,
		       struct qc_arch_desc *d, struct qc_err *err)
{
	const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(b->manifest, "config");
	const char *p = b->path;
	int rc;

	if (!cJSON_IsObject(cfg))
		return qc_err_set(err, QC_EFORMAT, p, NULL, -1, "manifest has no config object");
	qc_arch_describe(b->manifest, d);
	const char *a = d->name;
	if (!d->arch)
		return qc_err_set(err, QC_EUNSUPPORTED, p, NULL, -1, "architecture '%s' not supported", a);
	const uint64_t missing = qc_arch_missing(d);
	if (missing) {
		char list[QC_ERR_MSG_MAX];
		return qc_err_set(err, QC_EUNSUPPORTED, p, NULL, -1, "architecture '%s' not supported: missing %s", a,
				  qc_arch_feat_list(missing, list, sizeof list));
	}
	if ((rc = check_config_values(cfg, p, err)))
		return rc;

	if ((rc = cfg_int(cfg, "n_embd", 0, true, &c->n_embd, p, err)) ||
	    (rc = cfg_int(cfg, "n_layer", 0, true, &c->n_layer, p, err)) ||
	    (rc = cfg_int(cfg, "n_head", 0, true, &c->n_head, p, err)) ||
	    (rc = cfg_int(cfg, "n_head_kv", c->n_head, false, &c->n_head_kv, p, err)) ||
	    (rc = cfg_int(cfg, "n_expert", 0, false, &c->n_expert, p, err)) ||
	    (rc = cfg_int(cfg, "n_expert_used", 0, false, &c->n_expert_used, p, err)) ||
	    (rc = cfg_int(cfg, "n_ctx_train", 4096, false, &c->n_ctx_train, p, err)))
		return rc;
	if (c->n_embd < 1 || c->n_layer < 1 || c->n_head < 1 || c->n_head_kv < 1 ||
	    c->n_head % c->n_head_kv)
		return qc_err_set(err, QC_EFORMAT, p, NULL, -1,
				  "config: n_embd %d, n_layer %d, n_head %d, n_head_kv %d inconsistent",
				  c->n_embd, c->n_layer, c->n_head, c->n_head_kv);
	if ((rc = cfg_int(cfg, "head_dim_k", c->n_embd / c->n_head, false, &c->head_dim, p, err)))
		return rc;
	int32_t hdv;
	if ((rc = cfg_int(cfg, "head_dim_v", c->head_dim, false, &hdv, p, err)) ||
	    (rc = cfg_int(cfg, "rope_dim", c->head_dim, false, &c->rope_dim, p, err)))
		return rc;
	if (hdv != c->head_dim || c->head_dim < 2 || c->rope_dim > c->head_dim || c->rope_dim % 2)
		return qc_err_set(err, QC_EUNSUPPORTED, p, NULL, -1,
				  "head_dim_k %d, head_dim_v %d, rope_dim %d not supported", c->head_dim,
				  hdv, c->rope_dim);
	if (d->arch->experts == QC_EXPERTS_NONE)
		c->n_expert = c->n_expert_used = 0; /* llama.cpp builds these dense whatever the keys say */
	if (d->arch->experts == QC_EXPERTS_REQUIRED && !c->n_expert)
		return qc_err_set(err, QC_EFORMAT, p, NULL, -1, "%s needs n_expert > 0", a);
	if (c->n_expert && (c->n_expert_used < 1 || c->n_expert_used > c->n_expert))
		return qc_err_set(err, QC_EFORMAT, p, NULL, -1, "n_expert_used %d of %d experts",
				  c->n_expert_used, c->n_expert);
	c->expert_norm_w = (d->feats & QC_AF(MOE_RENORM)) != 0; /* build_moe_ffn norm_w */

	c->norm_eps = cfg_float(cfg, "norm_rms_eps", 1e-5f);
	if (!(c->norm_eps > 0))
		return qc_err_set(err, QC_EFORMAT, p, NULL, -1, "config: bad norm_rms_eps");
	return read_rope(cfg, c, p, err);
}

/* Optional "<base>.act_perm" of weight `name` (or of the fused tensor t holding
 * it): I32 [n_in] shared or [n_in, n_mat] per matrix, each row a permutation. */
static int perm_view(const struct qc_bundle *b, const char *name, const struct qc_bundle_tensor *t,
		     struct qc_mat *w, struct qc_err *err)
{
	char pn[160];
	const struct qc_bundle_tensor *pt = NULL;
	const char *bases[2] = {name, t->name};
	for (int k = 0; k < 2 && !pt; k++) {
		size_t l = strlen(bases[k]);
		if (l > 7 && !strcmp(bases[k] + l - 7, ".weight") && l - 7 + 10 < sizeof pn) {
			snprintf(pn, sizeof pn, "%.*s.act_perm", (int)(l - 7), bases[k]);
			pt = qc_bundle_find(b, pn);
		}
	}
	if (!pt)
		return QC_OK;
	const int64_t K = w->n_in;
	if (pt->type != QC_TYPE_I32 || pt->layout != QC_LAYOUT_GGML || pt->ne[0] != K ||
	    (pt->ne[1] != 1 && pt->ne[1] != w->n_mat) || pt->ne[2] != 1 || pt->ne[3] != 1)
		return qc_err_set(err, QC_EFORMAT, b->path, pn, -1,
				  "i32 [%lld] or [%lld, %lld] expected (got %s [%lld, %lld])",
				  (long long)K, (long long)K, (long long)w->n_mat, qc_types[pt->type].name,
				  (long long)pt->ne[0], (long long)pt->ne[1]);
	const int32_t *perm = (const int32_t *)(const void *)qc_bundle_data(b, pt);
	uint8_t *seen = calloc((size_t)K, 1);
	if (!seen)
		return qc_err_set(err, QC_ENOMEM, b->path, pn, -1, "out of memory");
	int rc = QC_OK;
	for (int64_t e = 0; e < pt->ne[1] && !rc; e++) {
		memset(seen, 0, (size_t)K);
		for (int64_t i = 0; i < K && !rc; i++) {
			const int32_t v = perm[e * K + i];
			if (v < 0 || v >= K || seen[v])
				rc = qc_err_set(err, QC_EFORMAT, b->path, pn, (int64_t)(pt->off + 4 * (uint64_t)(e * K + i)),
						"row %lld is not a permutation of 0..%lld (element %lld = %d)",
						(long long)e, (long long)K - 1, (long long)i, v);
			else
				seen[v] = 1;
		}
	}
	free(seen);
	if (rc)
		return rc;
	w->act_perm = perm;
	w->perm_stride = pt->ne[1] == 1 ? 0 : K;
	return QC_OK;
}

/* View tensor `name` (or the part of a fused tensor that holds it) as n_mat
 * matrices of n_out x n_in. n_out = -1 accepts any row count (stored in w). */
static int mat_view(const struct qc_bundle *b, const char *name, int64_t n_in, int64_t n_out,
		    int64_t n_mat, bool required, struct qc_mat *w, struct qc_err *err)
{
	const struct qc_bundle_part *part = NULL;
	const struct qc_bundle_tensor *t = qc_bundle_find(b, name);
	int64_t row0 = 0, rows;

	memset(w, 0, sizeof *w);
	if (!t)
		t = qc_bundle_find_part(b, name, &part);
	if (!t) {
		if (!required)
			return QC_OK;
		return qc_err_set(err, QC_EFORMAT, b->path, name, -1, "tensor missing");
	}
	rows = t->ne[1];
	if (part) {
		row0 = part->row0;
		rows = part->n_rows;
	}
	if (t->ne[0] != n_in || (n_out >= 0 && rows != n_out) || t->ne[2] != n_mat || t->ne[3] != 1)
		return qc_err_set(err, QC_EFORMAT, b->path, name, -1,
				  "shape [%lld, %lld, %lld] where [%lld, %lld, %lld] expected",
				  (long long)t->ne[0], (long long)rows, (long long)t->ne[2],
				  (long long)n_in, (long long)n_out, (long long)n_mat);
	/* Rows are addressed as row0 * row bytes in every layout; a tensor-core layout
	 * (marlin stripes) allows that only on stripe boundaries, which a fused part's
	 * rows must then keep. Which backend reads which layout is the backend's call. */
	uint64_t rb;
	int rc = qc_layout_row_bytes(t->layout, t->type, n_in, &rb);
	if (rc)
		return qc_err_set(err, rc, b->path, name, -1, "row of %lld elements does not fit layout %s",
				  (long long)n_in, qc_layout_name(t->layout));
	const int stripe = qc_layout_row_align(t->layout);
	if (stripe == 0 && part) /* plan.c never fuses these (the layout table's fusable) */
		return qc_err_set(err, QC_EUNSUPPORTED, b->path, name, -1,
				  "part of a %s tensor: its kernels take whole matrices", qc_layout_name(t->layout));
	if (stripe > 1 && part) {
		if (row0 % stripe || rows % stripe)
			return qc_err_set(err, QC_EUNSUPPORTED, b->path, name, -1,
					  "part rows [%lld, %lld) of a %s tensor are not on its %d-row stripes",
					  (long long)row0, (long long)(row0 + rows), qc_layout_name(t->layout), stripe);
	}
	w->layout = t->layout;
	w->type = t->type;
	w->n_in = n_in;
	w->n_out = rows;
	w->n_mat = n_mat;
	/* one slice's bytes: ne[1] rows of rb, except where a layout pads (nvfp4_swz) */
	const int64_t ne_slice[4] = { n_in, t->ne[1], 1, 1 };
	if ((rc = qc_layout_bytes(t->layout, t->type, ne_slice, &w->mat_stride)))
		return qc_err_set(err, rc, b->path, name, -1, "matrix does not fit layout %s", qc_layout_name(t->layout));
	w->row_bytes = rb;
	w->data = qc_bundle_data(b, t) + (uint64_t)row0 * rb;
	return perm_view(b, name, t, w, err);
}

/* Rows [row0, row0 + n_rows) of the one-matrix tensor `fused` (total_rows rows of
 * n_in) as a matrix of their own: Phi-3's attn_qkv and ffn_up, of whose single
 * product llama.cpp's build_phi3 takes views. Each output row is one row's dot
 * product either way. A layout whose kernels take whole matrices, or whose row
 * stripes the range would cut, is refused. */
static int row_view(const struct qc_bundle *b, const char *fused, int64_t n_in, int64_t total_rows, int64_t row0,
		    int64_t n_rows, struct qc_mat *w, struct qc_err *err)
{
	int rc = mat_view(b, fused, n_in, total_rows, 1, true, w, err);
	if (rc)
		return rc;
	const int stripe = qc_layout_row_align(w->layout);
	if (stripe == 0 || (stripe > 1 && (row0 % stripe || n_rows % stripe)))
		return qc_err_set(err, QC_EUNSUPPORTED, b->path, fused, -1,
				  "rows [%lld, %lld) of a %s tensor are not whole %d-row stripes", (long long)row0,
				  (long long)(row0 + n_rows), qc_layout_name(w->layout), stripe);
	w->data += (uint64_t)row0 * w->row_bytes;
	w->n_out = n_rows;
	return QC_OK;
}

/* Decode a 1-D tensor of n elements into dst (advanced past it). */
static int vec_load(const struct qc_bundle *b, const char *name, int64_t n, bool required,
		    float **dst, const float **out, struct qc_err *err)
{
	const struct qc_bundle_tensor *t = qc_bundle_find(b, name);
	*out = NULL;
	if (!t) {
		if (!required)
			return QC_OK;
		return qc_err_set(err, QC_EFORMAT, b->path, name, -1, "tensor missing");
	}
	if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1 ||
	    n % qc_types[t->type].block_elems || !qc_types[t->type].dequant_row)
		return qc_err_set(err, QC_EFORMAT, b->path, name, -1,
				  "vector of %lld elements expected (got ne[0] %lld, type %s)",
				  (long long)n, (long long)t->ne[0], qc_types[t->type].name);
	qc_types[t->type].dequant_row(qc_bundle_data(b, t), *dst, n);
	*out = *dst;
	*dst += n;
	return QC_OK;
}

/* Every one of the n RoPE divisors in v (NULL: none) is a positive number. */
static int check_factors(const struct qc_bundle *b, const char *name, const float *v, int64_t n, struct qc_err *err)
{
	for (int64_t i = 0; v && i < n; i++)
		if (!(v[i] > 0) || !isfinite(v[i]))
			return qc_err_set(err, QC_EFORMAT, b->path, name, -1, "factor %lld = %g is not a positive number",
					  (long long)i, (double)v[i]);
	return QC_OK;
}

/* A LongRoPE table (NULL when absent): one divisor per rotated pair, rope_dim / 2
 * (llama.cpp's Phi-4-mini loader, n_rot / 2; c392e50's n_embd_head / 2 is the same
 * number when the whole head rotates). Other lengths are refused here, naming
 * rope.dimension_count, before vec_load's generic shape message. */
static int longrope_load(const struct qc_bundle *b, const struct qc_model_config *c, const char *name,
			 float **store, const float **out, struct qc_err *err)
{
	const struct qc_bundle_tensor *t = qc_bundle_find(b, name);
	const int64_t n = c->rope_dim / 2;
	int rc;
	*out = NULL;
	if (t && t->ne[0] != n && t->ne[1] == 1)
		return qc_err_set(err, QC_EFORMAT, b->path, name, -1,
				  "LongRoPE table of %lld factors: rope.dimension_count %d (head_dim %d) rotates %lld pairs",
				  (long long)t->ne[0], c->rope_dim, c->head_dim, (long long)n);
	if ((rc = vec_load(b, name, n, false, store, out, err)))
		return rc;
	return check_factors(b, name, *out, n, err);
}

/* llama.cpp's K/V cache length is n_ctx rounded up to this (no flash attention) */
#define LLAMA_KV_PAD 32

const float *qc_model_rope_factors(const struct qc_model *m, int32_t n_ctx)
{
	if (m->rope_freqs)
		return m->rope_freqs;
	const int64_t padded = ((int64_t)n_ctx + LLAMA_KV_PAD - 1) / LLAMA_KV_PAD * LLAMA_KV_PAD;
	return padded > m->cfg.n_ctx_orig ? m->rope_long : m->rope_short;
}

static int load_layer(const struct qc_bundle *b, const char *pfx, const struct qc_model_config *c, int il,
		      struct qc_layer *L, float **store, struct qc_err *err)
{
	char n[112];
	int64_t E = c->n_embd, hd = c->head_dim, q_dim = (int64_t)c->n_head * hd;
	int64_t kv_dim = (int64_t)c->n_head_kv * hd;
	const bool post = (c->feats & QC_AF(POST_NORM)) != 0;
	int rc;

#define NAME(s) (snprintf(n, sizeof n, "%sblk.%d." s, pfx, il), n)
	if ((rc = vec_load(b, NAME("attn_norm.weight"), E, true, store, &L->attn_norm, err)) ||
	    (rc = vec_load(b, NAME("ffn_norm.weight"), E, true, store, &L->ffn_norm, err)) ||
	    (rc = vec_load(b, NAME("post_attention_norm.weight"), E, post, store, &L->attn_post_norm, err)) ||
	    (rc = vec_load(b, NAME("post_ffw_norm.weight"), E, post, store, &L->ffn_post_norm, err)) ||
	    (rc = vec_load(b, NAME("attn_q.bias"), q_dim, false, store, &L->bq, err)) ||
	    (rc = vec_load(b, NAME("attn_k.bias"), kv_dim, false, store, &L->bk, err)) ||
	    (rc = vec_load(b, NAME("attn_v.bias"), kv_dim, false, store, &L->bv, err)) ||
	    (rc = vec_load(b, NAME("attn_q_norm.weight"), hd, false, store, &L->q_norm, err)) ||
	    (rc = vec_load(b, NAME("attn_k_norm.weight"), hd, false, store, &L->k_norm, err)) ||
	    (rc = mat_view(b, NAME("attn_output.weight"), q_dim, E, 1, true, &L->wo, err)))
		return rc;
	if (c->feats & QC_AF(FUSED_QKV)) { /* q rows, then k rows, then v rows */
		const int64_t R = q_dim + 2 * kv_dim;
		if ((rc = row_view(b, NAME("attn_qkv.weight"), E, R, 0, q_dim, &L->wq, err)) ||
		    (rc = row_view(b, n, E, R, q_dim, kv_dim, &L->wk, err)) ||
		    (rc = row_view(b, n, E, R, q_dim + kv_dim, kv_dim, &L->wv, err)))
			return rc;
	} else if ((rc = mat_view(b, NAME("attn_q.weight"), E, q_dim, 1, true, &L->wq, err)) ||
		   (rc = mat_view(b, NAME("attn_k.weight"), E, kv_dim, 1, true, &L->wk, err)) ||
		   (rc = mat_view(b, NAME("attn_v.weight"), E, kv_dim, 1, true, &L->wv, err))) {
		return rc;
	}
	if (c->feats & QC_AF(FUSED_GATE_UP)) { /* llm_build_ffn SWIGLU: silu(first half) * second half */
		const int64_t F = c->n_ff;
		if ((rc = row_view(b, NAME("ffn_up.weight"), E, 2 * F, 0, F, &L->ffn_gate, err)) ||
		    (rc = row_view(b, n, E, 2 * F, F, F, &L->ffn_up, err)) ||
		    (rc = mat_view(b, NAME("ffn_down.weight"), F, E, 1, true, &L->ffn_down, err)))
			return rc;
		return QC_OK;
	}
	if (!c->n_expert) {
		if ((rc = mat_view(b, NAME("ffn_gate.weight"), E, c->n_ff, 1, true, &L->ffn_gate, err)) ||
		    (rc = mat_view(b, NAME("ffn_up.weight"), E, c->n_ff, 1, true, &L->ffn_up, err)) ||
		    (rc = mat_view(b, NAME("ffn_down.weight"), c->n_ff, E, 1, true, &L->ffn_down, err)))
			return rc;
		return QC_OK;
	}
	int64_t X = c->n_expert;
	if ((rc = mat_view(b, NAME("ffn_gate_inp.weight"), E, X, 1, true, &L->gate_inp, err)) ||
	    (rc = mat_view(b, NAME("ffn_gate_exps.weight"), E, c->n_ff, X, true, &L->gate_exps, err)) ||
	    (rc = mat_view(b, NAME("ffn_up_exps.weight"), E, c->n_ff, X, true, &L->up_exps, err)) ||
	    (rc = mat_view(b, NAME("ffn_down_exps.weight"), c->n_ff, E, X, true, &L->down_exps, err)))
		return rc;
	if (c->n_ff_shexp) {
		const int64_t S = c->n_ff_shexp;
		if ((rc = mat_view(b, NAME("ffn_gate_inp_shexp.weight"), E, 1, 1, true, &L->gate_inp_shexp, err)) ||
		    (rc = mat_view(b, NAME("ffn_gate_shexp.weight"), E, S, 1, true, &L->gate_shexp, err)) ||
		    (rc = mat_view(b, NAME("ffn_up_shexp.weight"), E, S, 1, true, &L->up_shexp, err)) ||
		    (rc = mat_view(b, NAME("ffn_down_shexp.weight"), S, E, 1, true, &L->down_shexp, err)))
			return rc;
	}
#undef NAME
	return QC_OK;
}

/* Gemma 3's local layers: RoPE base 10000, unscaled (llama.cpp
 * rope_freq_base_train_swa; transformers rope_local_base_freq). */
#define GEMMA3_LOCAL_ROPE_BASE 10000.0f

/* Gemma's and Phi-3's extras, from the arch row and the file (llama.cpp
 * build_gemma2, build_phi3; Gemma 3 as transformers' Gemma3ForCausalLM): embeddings
 * times sqrtf(n_embd); q times 1/sqrt(head_dim) after RoPE (the 27B models, told by
 * their layer count, use 1/sqrt(n_embd/n_head)); the soft-caps and window as the
 * file states them; Gemma 3's local layers' RoPE base. The GGUF's Gemma norm
 * weights already hold 1 + w (convert_hf_to_gguf Gemma2Model and Gemma3Model add
 * 1 to every *norm.weight, q/k norms included), so RMSNorm (1+w) is a plain
 * RMSNorm here. */
static void arch_config(const struct qc_arch_desc *d, struct qc_model_config *c)
{
	c->feats = d->feats;
	snprintf(c->arch, sizeof c->arch, "%s", d->name);
	c->embd_scale = d->feats & QC_AF(EMBD_SCALE) ? sqrtf((float)c->n_embd) : 1.0f;
	c->ffn_gelu = (d->feats & QC_AF(GEGLU_TANH)) != 0;
	const int64_t q_dim = qc_arch_q_scale_dim(d->name, c->n_layer, c->n_embd, c->n_head, c->head_dim);
	c->q_scale = q_dim > 0 ? 1.0f / sqrtf((float)q_dim) : 0.0f;
	c->attn_softcap = d->feats & QC_AF(ATTN_SOFTCAP) ? (float)d->attn_softcap : 0.0f;
	c->final_softcap = d->feats & QC_AF(FINAL_SOFTCAP) ? (float)d->final_softcap : 0.0f;
	c->sliding_window = d->feats & QC_AF(SLIDING_WINDOW) ? (int32_t)d->sliding_window : 0;
	c->window_pattern = d->window_pattern;
	c->rope_local_pattern = d->feats & QC_AF(ROPE_LOCAL) ? d->arch->window_pattern : 0;
	c->rope_local_base = GEMMA3_LOCAL_ROPE_BASE;
}

int qc_model_check_backend(const struct qc_model *m, enum qc_arch_backend b, struct qc_err *err)
{
	struct qc_arch_desc d = {.arch = qc_arch_find(m->cfg.arch), .feats = m->cfg.feats};
	snprintf(d.name, sizeof d.name, "%s", m->cfg.arch);
	const uint64_t missing = qc_arch_missing_on(&d, b);
	char list[QC_ERR_MSG_MAX];
	if (!missing)
		return QC_OK;
	return qc_err_set(err, QC_EUNSUPPORTED, m->bundle ? m->bundle->path : NULL, NULL, -1,
			  "architecture '%s' not supported by the %s backend: missing %s", m->cfg.arch,
			  qc_arch_backends[b].name, qc_arch_feat_list(missing, list, sizeof list));
}

/* An FFN width comes from the weights (n_ff in the config may be the dense or
 * the expert width depending on the converter's source): tensor pfx + name's
 * columns, times n_ranks (a rank's shard holds 1/n_ranks of them). */
static int ffn_width(const struct qc_bundle *b, const char *pfx, const char *name, int n_ranks, int32_t *n_ff,
		     struct qc_err *err)
{
	char full[112];
	const struct qc_bundle_part *part = NULL;
	snprintf(full, sizeof full, "%s%s", pfx, name);
	const struct qc_bundle_tensor *t = qc_bundle_find(b, full);
	if (!t)
		t = qc_bundle_find_part(b, full, &part);
	if (!t)
		return qc_err_set(err, QC_EFORMAT, b->path, full, -1, "tensor missing");
	if (t->ne[0] < 1 || t->ne[0] * n_ranks > MAX_DIM)
		return qc_err_set(err, QC_EFORMAT, b->path, full, -1, "bad FFN width %lld",
				  (long long)t->ne[0]);
	*n_ff = (int32_t)(t->ne[0] * n_ranks);
	return QC_OK;
}

int qc_model_read_cfg(const struct qc_bundle *b, const char *pfx, int n_ranks, struct qc_model_config *c,
		      struct qc_err *err)
{
	struct qc_arch_desc arch;
	int rc;
	memset(c, 0, sizeof *c);
	if ((rc = read_config(b, c, &arch, err)) ||
	    (rc = ffn_width(b, pfx, c->n_expert ? "blk.0.ffn_down_exps.weight" : "blk.0.ffn_down.weight", n_ranks,
			    &c->n_ff, err)) ||
	    ((arch.feats & QC_AF(MOE_SHARED)) &&
	     (rc = ffn_width(b, pfx, "blk.0.ffn_down_shexp.weight", n_ranks, &c->n_ff_shexp, err))) ||
	    (rc = check_config_tensors(b, c, err)))
		return rc;
	c->rope_mode = arch.feats & QC_AF(ROPE_NEOX) ? QC_ROPE_NEOX : QC_ROPE_NORM;
	arch_config(&arch, c);
	if ((c->feats & QC_AF(SLIDING_WINDOW)) && c->sliding_window <= 0) /* llama.cpp refuses a phi3 so too */
		return qc_err_set(err, QC_EFORMAT, b->path, NULL, -1, "architecture '%s' attends through a window, but "
				  "'%s.attention.sliding_window' is not stated", c->arch, c->arch);
	return QC_OK;
}

int qc_model_load_weights(struct qc_model *m, const char *pfx, struct qc_err *err)
{
	const struct qc_bundle *b = m->bundle;
	struct qc_model_config *c = &m->cfg;
	const struct qc_arch *arch = qc_arch_find(c->arch);
	char n[112];
	int rc;

#define NAME(s) (snprintf(n, sizeof n, "%s" s, pfx), n)
	const struct qc_bundle_tensor *te = qc_bundle_find(b, NAME("token_embd.weight"));
	if (!arch)
		return qc_err_set(err, QC_EUNSUPPORTED, b->path, NULL, -1, "architecture '%s' not supported", c->arch);
	if (!te)
		return qc_err_set(err, QC_EFORMAT, b->path, n, -1, "tensor missing");
	if (te->ne[1] < 1 || te->ne[1] > MAX_DIM)
		return qc_err_set(err, QC_EFORMAT, b->path, n, -1, "bad vocab size");
	if (c->n_vocab && te->ne[1] != c->n_vocab) /* a rank's: the manifest's tp.vocab range */
		return qc_err_set(err, QC_EFORMAT, b->path, n, -1, "%lld vocabulary rows where the manifest's "
				  "\"tp\" range has %d", (long long)te->ne[1], c->n_vocab);
	c->n_vocab = (int32_t)te->ne[1];
	if ((rc = mat_view(b, n, c->n_embd, c->n_vocab, 1, true, &m->token_embd, err)) ||
	    (rc = mat_view(b, NAME("output.weight"), c->n_embd, c->n_vocab, 1, false, &m->output, err)))
		return rc;
	if (arch->feats & QC_AF(TIED_EMBD))
		m->output.data = NULL; /* llama.cpp's Gemma reads token_embd whatever the file has */
	c->tied_embeddings = m->output.data == NULL;
	if (c->tied_embeddings)
		m->output = m->token_embd;

	int64_t hd = c->head_dim;
	size_t per_layer = 4 * (size_t)c->n_embd + (size_t)(c->n_head + 2 * c->n_head_kv) * hd + 2 * hd;
	m->vec_store = malloc(sizeof(float) * (per_layer * (size_t)c->n_layer + (size_t)c->n_embd +
					       (size_t)c->rope_dim / 2 + (size_t)hd));
	m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
	if (!m->vec_store || !m->layers)
		return qc_err_set(err, QC_ENOMEM, b->path, NULL, -1, "out of memory");
	float *store = m->vec_store;
	/* Only an arch whose graph reads the LongRoPE tables loads them. */
	const bool longrope = (arch->feats & QC_AF(LONGROPE)) != 0;
	if ((rc = vec_load(b, NAME("output_norm.weight"), c->n_embd, true, &store, &m->output_norm, err)) ||
	    (rc = vec_load(b, NAME("rope_freqs.weight"), c->rope_dim / 2, false, &store, &m->rope_freqs, err)) ||
	    (rc = check_factors(b, n, m->rope_freqs, c->rope_dim / 2, err)) ||
	    (longrope && (rc = longrope_load(b, c, NAME("rope_factors_long.weight"), &store, &m->rope_long, err))) ||
	    (longrope && (rc = longrope_load(b, c, NAME("rope_factors_short.weight"), &store, &m->rope_short, err))))
		return rc;
#undef NAME
	for (int il = 0; il < c->n_layer; il++)
		if ((rc = load_layer(b, pfx, c, il, &m->layers[il], &store, err)))
			return rc;
	return QC_OK;
}

void qc_model_data_range(struct qc_model *m, const char *pfx)
{
	const struct qc_bundle *b = m->bundle;
	const size_t pl = strlen(pfx);
	m->data_lo = UINT64_MAX;
	m->data_hi = 0;
	for (uint64_t i = 0; i < b->n_tensors; i++) {
		const struct qc_bundle_tensor *t = &b->tensors[i];
		if (strncmp(t->name, pfx, pl))
			continue;
		m->data_lo = t->off < m->data_lo ? t->off : m->data_lo;
		m->data_hi = t->off + t->size > m->data_hi ? t->off + t->size : m->data_hi;
	}
	if (m->data_lo > m->data_hi)
		m->data_lo = m->data_hi = 0;
}

int qc_model_from_bundle(struct qc_bundle *b, struct qc_model **out, struct qc_err *err)
{
	int rc;

	*out = NULL;
	if (cJSON_GetObjectItemCaseSensitive(b->manifest, "tp")) /* qconvert --tp N: model_tp.c */
		return qc_model_tp_whole(b, out, err);
	struct qc_model *m = calloc(1, sizeof *m);
	if (!m)
		return qc_err_set(err, QC_ENOMEM, b->path, NULL, -1, "out of memory");
	m->bundle = b;
	if ((rc = qc_model_read_cfg(b, "", 1, &m->cfg, err)) || (rc = qc_model_load_weights(m, "", err)))
		goto out_free;
	m->tp = (struct qc_model_tp){.rank = 0, .size = 1, .vocab0 = 0, .n_vocab_all = m->cfg.n_vocab};
	qc_model_data_range(m, ""); /* a plain bundle: every member */
	*out = m;
	return QC_OK;

out_free:
	m->bundle = NULL;
	qc_model_close(m);
	return rc;
}

int qc_model_open(const char *path, struct qc_model **out, struct qc_err *err)
{
	struct qc_bundle *b;
	int rc = qc_bundle_open(path, &b, err);
	*out = NULL;
	if (rc)
		return rc;
	rc = qc_model_from_bundle(b, out, err);
	if (rc) {
		qc_bundle_close(b);
		return rc;
	}
	(*out)->own_bundle = true;
	return QC_OK;
}

void qc_model_close(struct qc_model *m)
{
	if (!m)
		return;
	if (m->own_bundle)
		qc_bundle_close(m->bundle);
	free(m->layers);
	free(m->vec_store);
	free(m);
}
