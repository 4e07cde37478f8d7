/* gguf_meta.c — GGUF key/values into manifest JSON (see gguf_meta.h).
 * config: the typed model hyper-parameters every runtime path needs, read with
 * llama.cpp's key names and defaults (src/llama-model.cpp load_hparams).
 * tokenizer: tokenizer.ggml.* in the schema runtime/text/vocab_json.c reads.
 * metadata: every other key verbatim, so arch-specific extras survive.
 * check: the hyper-parameters against the tensors (layer count vs blk.N present,
 * widths vs shapes) and for finite, positive values, as llama.cpp refuses such a
 * file at load ("wrong number of tensors", a shape mismatch). Only what holds for
 * every architecture: a key is checked against a tensor only where that tensor
 * exists (Mamba writes feed_forward_length 0 and has no ffn_down). */
#include "gguf_meta.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_config.h"

bool qc_meta_json_safe(const char *s, uint64_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	for (uint64_t i = 0; i < len;) {
		unsigned c = p[i];
		int n;
		if (c == 0)
			return false;
		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			n = 1;
		else if (c >= 0xe0 && c <= 0xef)
			n = 2;
		else if (c >= 0xf0 && c <= 0xf4)
			n = 3;
		else
			return false;
		if (i + (uint64_t)n >= len) /* continuation bytes run past the end */
			return false;
		unsigned cp = c & (0x3fu >> n);
		for (int k = 1; k <= n; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (p[i + k] & 0x3f);
		}
		if ((n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)))
			return false;
		i += (uint64_t)n + 1;
	}
	return true;
}

static cJSON *str_json(const char *s, uint64_t len)
{
	if (qc_meta_json_safe(s, len)) {
		char *tmp = malloc((size_t)len + 1);
		if (!tmp)
			return NULL;
		memcpy(tmp, s, (size_t)len);
		tmp[len] = '\0';
		cJSON *j = cJSON_CreateString(tmp);
		free(tmp);
		return j;
	}
	char *hex = malloc((size_t)len * 2 + 1);
	if (!hex)
		return NULL;
	for (uint64_t i = 0; i < len; i++)
		snprintf(hex + 2 * i, 3, "%02x", (unsigned char)s[i]);
	hex[len * 2] = '\0';
	cJSON *o = cJSON_CreateObject();
	if (o && !cJSON_AddStringToObject(o, "hex", hex)) {
		cJSON_Delete(o);
		o = NULL;
	}
	free(hex);
	return o;
}

static cJSON *scalar_json(const struct qc_gguf_value *v)
{
	double f;
	int64_t i;
	switch (v->type) {
	case QC_GGUF_BOOL:
		return cJSON_CreateBool(v->b);
	case QC_GGUF_FLOAT32:
	case QC_GGUF_FLOAT64:
		return cJSON_CreateNumber(v->f);
	case QC_GGUF_UINT64:
		return cJSON_CreateNumber((double)v->u);
	default:
		if (qc_gguf_value_as_i64(v, &i))
			return cJSON_CreateNumber((double)i);
		if (qc_gguf_value_as_f64(v, &f))
			return cJSON_CreateNumber(f);
		return cJSON_CreateNull();
	}
}

cJSON *qc_meta_value_json(const struct qc_gguf_value *v, uint64_t max_array)
{
	if (v->type == QC_GGUF_STRING)
		return str_json(v->s.p, v->s.len);
	if (v->type != QC_GGUF_ARRAY)
		return scalar_json(v);
	if (v->arr.n > max_array) {
		cJSON *o = cJSON_CreateObject();
		if (o)
			cJSON_AddNumberToObject(o, "omitted_array", (double)v->arr.n);
		return o;
	}
	cJSON *a = cJSON_CreateArray();
	for (uint64_t k = 0; a && k < v->arr.n; k++) {
		cJSON *e;
		if (v->arr.items) {
			e = qc_meta_value_json(&v->arr.items[k], max_array);
		} else {
			double f;
			int64_t i;
			if (v->arr.elem == QC_GGUF_BOOL && qc_gguf_arr_i64(v, k, &i))
				e = cJSON_CreateBool(i != 0);
			else if (v->arr.elem != QC_GGUF_FLOAT32 && v->arr.elem != QC_GGUF_FLOAT64 && qc_gguf_arr_i64(v, k, &i))
				e = cJSON_CreateNumber((double)i);
			else if (qc_gguf_arr_f64(v, k, &f))
				e = cJSON_CreateNumber(f);
			else
				e = cJSON_CreateNull();
		}
		if (!e || !cJSON_AddItemToArray(a, e)) {
			cJSON_Delete(e);
			cJSON_Delete(a);
			return NULL;
		}
	}
	return a;
}

/* ---- config --------------------------------------------------------------- */

struct meta_ctx {
	const struct qc_gguf *g;
	char arch[64];
};

static const struct qc_gguf_kv *arch_kv(const struct meta_ctx *c, const char *suffix)
{
	char key[160];
	snprintf(key, sizeof key, "%s.%s", c->arch, suffix);
	return qc_gguf_find(c->g, key);
}

/* Copy "<arch>.<suffix>" into obj[name] if present (scalars and per-layer arrays). */
static int put(const struct meta_ctx *c, cJSON *obj, const char *name, const char *suffix)
{
	const struct qc_gguf_kv *kv = arch_kv(c, suffix);
	if (!kv)
		return QC_OK;
	cJSON *j = qc_meta_value_json(&kv->val, QC_META_MAX_ARRAY);
	if (!j || !cJSON_AddItemToObject(obj, name, j)) {
		cJSON_Delete(j);
		return QC_ENOMEM;
	}
	return QC_OK;
}

/* The value of kv for layer il: the scalar, or element il of a per-layer array. */
static bool layer_value(const struct qc_gguf_kv *kv, uint64_t il, double *v)
{
	if (kv->val.type == QC_GGUF_ARRAY)
		return il < kv->val.arr.n && !kv->val.arr.items && qc_gguf_arr_f64(&kv->val, il, v);
	return qc_gguf_value_as_f64(&kv->val, v);
}

/* QC_EFORMAT naming the file, the key (at its offset) and, when given, the tensor. */
static int bad_key(const struct meta_ctx *c, const struct qc_gguf_kv *kv, const char *tensor, struct qc_err *err,
		   const char *why)
{
	return qc_err_set(err, QC_EFORMAT, c->g->path, tensor, (int64_t)kv->off, "key '%.*s' %s", (int)kv->key.len,
			  kv->key.p, why);
}

/* Layer index of a "blk.N." tensor name, -1 for any other name. */
static int64_t layer_of(const char *name)
{
	if (strncmp(name, "blk.", 4))
		return -1;
	char *end;
	long long n = strtoll(name + 4, &end, 10);
	return end != name + 4 && *end == '.' && n >= 0 ? (int64_t)n : -1;
}

/* Each of these, where present, is a finite number; `positive` ones are > 0, the
 * others >= 0 (llama.cpp reads 0 as "unset" for the scaling factors). */
static const struct { const char *suffix; bool positive; } float_keys[] = {
	{"rope.freq_base", true},
	{"attention.layer_norm_rms_epsilon", true},
	{"attention.layer_norm_epsilon", true},
	{"rope.scale_linear", false},
	{"rope.scaling.factor", false},
	{"rope.scaling.attn_factor", false},
};

static int check_config(const struct meta_ctx *c, const struct qc_gguf_model *m, struct qc_err *err)
{
	char why[256];
	double v;
	for (size_t i = 0; i < sizeof float_keys / sizeof float_keys[0]; i++) {
		const struct qc_gguf_kv *kv = arch_kv(c, float_keys[i].suffix);
		if (!kv || kv->val.type == QC_GGUF_ARRAY || kv->val.type == QC_GGUF_STRING)
			continue;
		if (!qc_gguf_value_as_f64(&kv->val, &v) || !isfinite(v) || v < 0 || (float_keys[i].positive && v == 0)) {
			snprintf(why, sizeof why, "= %g: must be a finite number %s", v,
				 float_keys[i].positive ? "> 0" : ">= 0");
			return bad_key(c, kv, NULL, err, why);
		}
	}
	/* scalars that size something: a present 0 is never meaningful */
	static const char *const pos_keys[] = { "context_length", "embedding_length", "block_count",
						"rope.dimension_count" };
	for (size_t i = 0; i < sizeof pos_keys / sizeof pos_keys[0]; i++) {
		const struct qc_gguf_kv *kv = arch_kv(c, pos_keys[i]);
		if (kv && kv->val.type != QC_GGUF_ARRAY && (!qc_gguf_value_as_f64(&kv->val, &v) || !(v > 0))) {
			snprintf(why, sizeof why, "= %g: must be > 0", v);
			return bad_key(c, kv, NULL, err, why);
		}
	}

	/* block_count against the blk.N tensors: every N below it, the last one N - 1 */
	int64_t max_layer = -1;
	const char *max_name = NULL;
	for (uint64_t i = 0; i < m->n_tensors; i++) {
		int64_t l = layer_of(m->tensors[i]->name);
		if (l > max_layer) {
			max_layer = l;
			max_name = m->tensors[i]->name;
		}
	}
	const struct qc_gguf_kv *bc = arch_kv(c, "block_count");
	double n_layer = 0;
	if (bc && max_layer >= 0 && qc_gguf_value_as_f64(&bc->val, &n_layer) && n_layer != (double)max_layer + 1) {
		snprintf(why, sizeof why, "= %g, but the tensors are for %lld layers (the last is %s)", n_layer,
			 (long long)max_layer + 1, max_name);
		return bad_key(c, bc, NULL, err, why);
	}
	/* per-layer arrays have one value per layer */
	static const char *const layer_keys[] = { "feed_forward_length", "attention.head_count",
						  "attention.head_count_kv" };
	for (size_t i = 0; bc && i < sizeof layer_keys / sizeof layer_keys[0]; i++) {
		const struct qc_gguf_kv *kv = arch_kv(c, layer_keys[i]);
		if (kv && kv->val.type == QC_GGUF_ARRAY && (double)kv->val.arr.n != n_layer) {
			snprintf(why, sizeof why, "has %llu values for %g layers (block_count)",
				 (unsigned long long)kv->val.arr.n, n_layer);
			return bad_key(c, kv, NULL, err, why);
		}
	}

	/* widths against shapes, where the tensor exists */
	const struct qc_gguf_kv *ne = arch_kv(c, "embedding_length");
	const struct qc_gguf_tensor *emb = qc_gguf_model_find(m, "token_embd.weight");
	if (ne && emb && qc_gguf_value_as_f64(&ne->val, &v) && v != (double)emb->ne[0]) {
		snprintf(why, sizeof why, "= %g, but token_embd.weight has rows of %lld", v, (long long)emb->ne[0]);
		return bad_key(c, ne, "token_embd.weight", err, why);
	}
	static const struct { const char *key, *tensor; } widths[] = {
		{"feed_forward_length", "ffn_down.weight"},           /* [n_ff, n_embd] */
		{"expert_feed_forward_length", "ffn_down_exps.weight"}, /* [n_ff_exp, n_embd, n_expert] */
	};
	for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++) {
		const struct qc_gguf_kv *kv = arch_kv(c, widths[k].key);
		for (int64_t il = 0; kv && il <= max_layer; il++) {
			char name[96];
			snprintf(name, sizeof name, "blk.%lld.%s", (long long)il, widths[k].tensor);
			const struct qc_gguf_tensor *t = qc_gguf_model_find(m, name);
			v = NAN;
			if (t && (!layer_value(kv, (uint64_t)il, &v) || v != (double)t->ne[0])) {
				snprintf(why, sizeof why, "= %g for layer %lld, but %s is %lld wide", v, (long long)il, name,
					 (long long)t->ne[0]);
				return bad_key(c, kv, name, err, why);
			}
		}
	}
	return QC_OK;
}

static int add_config(const struct meta_ctx *c, const struct qc_gguf_model *m, cJSON *manifest, struct qc_err *err)
{
	cJSON *cfg = cJSON_AddObjectToObject(manifest, "config");
	if (!cfg)
		return qc_err_set(err, QC_ENOMEM, c->g->path, NULL, -1, "out of memory");
	cJSON_AddStringToObject(cfg, "architecture", c->arch);
	static const char *const keys[][2] = {
		{"n_ctx_train", "context_length"},
		{"n_embd", "embedding_length"},
		{"n_layer", "block_count"},
		{"n_ff", "feed_forward_length"},
		{"n_head", "attention.head_count"},
		{"n_head_kv", "attention.head_count_kv"},
		{"head_dim_k", "attention.key_length"},
		{"head_dim_v", "attention.value_length"},
		{"norm_rms_eps", "attention.layer_norm_rms_epsilon"},
		{"norm_eps", "attention.layer_norm_epsilon"},
		{"n_vocab", "vocab_size"},
		{"rope_dim", "rope.dimension_count"},
		{"rope_freq_base", "rope.freq_base"},
		{"rope_freq_scale_linear", "rope.scale_linear"},
		{"rope_scaling_type", "rope.scaling.type"},
		{"rope_scaling_factor", "rope.scaling.factor"},
		{"rope_scaling_orig_ctx", "rope.scaling.original_context_length"},
		{"rope_scaling_attn_factor", "rope.scaling.attn_factor"},
		{"n_expert", "expert_count"},
		{"n_expert_used", "expert_used_count"},
		{"n_ff_expert", "expert_feed_forward_length"},
		{"n_ff_shared_expert", "expert_shared_feed_forward_length"},
		{"n_expert_shared", "expert_shared_count"},
		{"expert_weights_scale", "expert_weights_scale"},
		{"expert_weights_norm", "expert_weights_norm"},
		{"expert_gating_func", "expert_gating_func"},
	};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if (put(c, cfg, keys[i][0], keys[i][1]))
			return qc_err_set(err, QC_ENOMEM, c->g->path, NULL, -1, "out of memory");
	/* derived values, as llama.cpp derives them when the keys are absent */
	const cJSON *nh = cJSON_GetObjectItemCaseSensitive(cfg, "n_head");
	const cJSON *ne = cJSON_GetObjectItemCaseSensitive(cfg, "n_embd");
	if (cJSON_IsNumber(nh) && !cJSON_GetObjectItemCaseSensitive(cfg, "n_head_kv"))
		cJSON_AddNumberToObject(cfg, "n_head_kv", nh->valuedouble);
	if (cJSON_IsNumber(nh) && cJSON_IsNumber(ne) && nh->valuedouble > 0) {
		double hd = ne->valuedouble / nh->valuedouble;
		if (!cJSON_GetObjectItemCaseSensitive(cfg, "head_dim_k"))
			cJSON_AddNumberToObject(cfg, "head_dim_k", hd);
		if (!cJSON_GetObjectItemCaseSensitive(cfg, "head_dim_v"))
			cJSON_AddNumberToObject(cfg, "head_dim_v", hd);
	}
	const cJSON *hk = cJSON_GetObjectItemCaseSensitive(cfg, "head_dim_k");
	if (cJSON_IsNumber(hk) && !cJSON_GetObjectItemCaseSensitive(cfg, "rope_dim"))
		cJSON_AddNumberToObject(cfg, "rope_dim", hk->valuedouble);
	if (!cJSON_GetObjectItemCaseSensitive(cfg, "rope_freq_base"))
		cJSON_AddNumberToObject(cfg, "rope_freq_base", 10000.0);
	if (!cJSON_GetObjectItemCaseSensitive(cfg, "n_vocab")) {
		const struct qc_gguf_value *tok = qc_gguf_get_arr(c->g, "tokenizer.ggml.tokens");
		const struct qc_gguf_tensor *emb = qc_gguf_model_find(m, "token_embd.weight");
		if (tok)
			cJSON_AddNumberToObject(cfg, "n_vocab", (double)tok->arr.n);
		else if (emb)
			cJSON_AddNumberToObject(cfg, "n_vocab", (double)emb->ne[1]);
	}
	cJSON_AddBoolToObject(cfg, "tie_embeddings", qc_gguf_model_find(m, "output.weight") == NULL);
	/* Phi-3 LongRoPE has no rope.scaling.type: its factor tables are the sign. Only
	 * when present, so the bundles of every other model keep their bytes. */
	if (qc_gguf_model_find(m, "rope_factors_long.weight") || qc_gguf_model_find(m, "rope_factors_short.weight"))
		cJSON_AddBoolToObject(cfg, "longrope", true);
	return QC_OK;
}

/* ---- tokenizer -------------------------------------------------------------- */

static int add_arr(const struct qc_gguf *g, cJSON *tok, const char *name, const char *key)
{
	const struct qc_gguf_value *v = qc_gguf_get_arr(g, key);
	if (!v)
		return QC_OK;
	cJSON *j = qc_meta_value_json(v, UINT64_MAX);
	if (!j || !cJSON_AddItemToObject(tok, name, j)) {
		cJSON_Delete(j);
		return QC_ENOMEM;
	}
	return QC_OK;
}

static int add_tokenizer(const struct qc_gguf *g, cJSON *manifest, struct qc_err *err)
{
	struct qc_gguf_str s;
	if (qc_gguf_get_str(g, "tokenizer.ggml.model", &s, NULL))
		return QC_OK; /* no tokenizer: a weights-only file */
	cJSON *tok = cJSON_AddObjectToObject(manifest, "tokenizer");
	if (!tok || !cJSON_AddItemToObject(tok, "model", str_json(s.p, s.len)))
		return qc_err_set(err, QC_ENOMEM, g->path, NULL, -1, "out of memory");
	if (!qc_gguf_get_str(g, "tokenizer.ggml.pre", &s, NULL))
		cJSON_AddItemToObject(tok, "pre", str_json(s.p, s.len));
	if (add_arr(g, tok, "tokens", "tokenizer.ggml.tokens") || add_arr(g, tok, "scores", "tokenizer.ggml.scores") ||
	    add_arr(g, tok, "token_types", "tokenizer.ggml.token_type") ||
	    add_arr(g, tok, "merges", "tokenizer.ggml.merges"))
		return qc_err_set(err, QC_ENOMEM, g->path, NULL, -1, "out of memory building the tokenizer");
	static const char *const ids[][2] = {
		{"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
		{"unk", "tokenizer.ggml.unknown_token_id"}, {"sep", "tokenizer.ggml.seperator_token_id"},
		{"pad", "tokenizer.ggml.padding_token_id"}, {"cls", "tokenizer.ggml.cls_token_id"},
		{"mask", "tokenizer.ggml.mask_token_id"},   {"eot", "tokenizer.ggml.eot_token_id"},
		{"eom", "tokenizer.ggml.eom_token_id"},
	};
	cJSON *sp = cJSON_AddObjectToObject(tok, "special");
	for (size_t i = 0; sp && i < sizeof ids / sizeof ids[0]; i++) {
		int64_t v;
		if (!qc_gguf_get_i64(g, ids[i][1], &v, NULL))
			cJSON_AddNumberToObject(sp, ids[i][0], (double)v);
	}
	static const char *const flags[][2] = {
		{"add_bos", "tokenizer.ggml.add_bos_token"},
		{"add_eos", "tokenizer.ggml.add_eos_token"},
		{"add_space_prefix", "tokenizer.ggml.add_space_prefix"},
		{"remove_extra_whitespaces", "tokenizer.ggml.remove_extra_whitespaces"},
	};
	for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
		bool b;
		if (!qc_gguf_get_bool(g, flags[i][1], &b, NULL))
			cJSON_AddBoolToObject(tok, flags[i][0], b);
	}
	if (!qc_gguf_get_str(g, "tokenizer.chat_template", &s, NULL))
		cJSON_AddItemToObject(tok, "chat_template", str_json(s.p, s.len));
	return QC_OK;
}

/* ---- everything else ---------------------------------------------------------- */

static bool in_tokenizer_object(const char *key)
{
	static const char *const moved[] = {
		"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
	};
	for (size_t i = 0; i < sizeof moved / sizeof moved[0]; i++)
		if (strcmp(key, moved[i]) == 0)
			return true;
	return false;
}

static int add_metadata(const struct qc_gguf *g, cJSON *manifest, struct qc_err *err)
{
	cJSON *md = cJSON_AddObjectToObject(manifest, "metadata");
	if (!md)
		return qc_err_set(err, QC_ENOMEM, g->path, NULL, -1, "out of memory");
	for (uint64_t i = 0; i < g->n_kv; i++) {
		const struct qc_gguf_kv *kv = &g->kv[i];
		if (in_tokenizer_object(kv->key.p) || strncmp(kv->key.p, "split.", 6) == 0)
			continue;
		cJSON *j = qc_meta_value_json(&kv->val, QC_META_MAX_ARRAY);
		/* keys that are not UTF-8 are kept, spelled "hex:<bytes>", so the manifest stays valid JSON */
		char *hexkey = NULL;
		if (!qc_meta_json_safe(kv->key.p, kv->key.len)) {
			hexkey = malloc((size_t)kv->key.len * 2 + 5);
			if (hexkey) {
				memcpy(hexkey, "hex:", 4);
				for (uint64_t k = 0; k < kv->key.len; k++)
					snprintf(hexkey + 4 + 2 * k, 3, "%02x", (unsigned char)kv->key.p[k]);
			}
		}
		bool ok = j && (hexkey || qc_meta_json_safe(kv->key.p, kv->key.len)) &&
			  cJSON_AddItemToObject(md, hexkey ? hexkey : kv->key.p, j);
		free(hexkey);
		if (!ok) {
			cJSON_Delete(j);
			return qc_err_set(err, QC_ENOMEM, g->path, NULL, -1, "out of memory");
		}
	}
	return QC_OK;
}

int qc_meta_from_gguf(const struct qc_gguf_model *m, cJSON *manifest, struct qc_err *err)
{
	struct meta_ctx c = { .g = m->files[0] };
	struct qc_gguf_str a;
	int rc = qc_gguf_get_str(c.g, "general.architecture", &a, err);
	if (rc == QC_ENOTFOUND)
		return qc_err_set(err, QC_EFORMAT, c.g->path, NULL, -1, "general.architecture is missing");
	if (rc)
		return rc;
	if (a.len == 0 || a.len >= sizeof c.arch || !qc_meta_json_safe(a.p, a.len))
		return qc_err_set(err, QC_EFORMAT, c.g->path, NULL, -1, "bad general.architecture");
	memcpy(c.arch, a.p, a.len);
	c.arch[a.len] = '\0';
	rc = check_config(&c, m, err);
	if (!rc)
		rc = add_config(&c, m, manifest, err);
	if (!rc)
		rc = add_tokenizer(c.g, manifest, err);
	if (!rc)
		rc = add_metadata(c.g, manifest, err);
	return rc;
}
