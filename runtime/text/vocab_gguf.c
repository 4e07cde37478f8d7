/* vocab_gguf.c — build a struct qc_vocab from a GGUF's tokenizer.* keys.
 *
 * Keys read (llama.cpp LLM_KV_TOKENIZER_*): tokenizer.ggml.{model, pre, tokens,
 * scores, token_type, merges, bos/eos/eot/eom/unknown/seperator (sic)/padding/
 * cls/mask token ids, fim_{pre,suf,mid,pad,rep,sep}_token_id (and the older
 * prefix/suffix/middle), add_bos_token, add_eos_token, add_space_prefix,
 * remove_extra_whitespaces}, tokenizer.chat_template, general.name.
 * Absent keys keep llama.cpp's per-model defaults (qc_vocab_begin).
 * Unlike llama.cpp we check that scores/token_type have one entry per token.
 * Everything is copied: the GGUF may be closed once this returns.
 */
#define QC_VOCAB_INTERNAL
#include "vocab.h"

#include <stdlib.h>
#include <string.h>

#include "gguf.h"

static int key_error(const struct qc_gguf *g, const char *key, const char *what, struct qc_err *err)
{
	const struct qc_gguf_kv *kv = qc_gguf_find(g, key);
	return qc_err_set(err, QC_EFORMAT, g->path, NULL, kv ? (int64_t)kv->off : -1, "key '%s': %s", key,
			  what);
}

/* Optional string; *s stays NULL when absent. */
static int opt_str(const struct qc_gguf *g, const char *key, struct qc_gguf_str *s, struct qc_err *err)
{
	s->p = NULL;
	s->len = 0;
	int rc = qc_gguf_get_str(g, key, s, err);
	if (rc == QC_ENOTFOUND) {
		s->p = NULL;
		return QC_OK;
	}
	return rc;
}

/* Optional numeric/string array of n elements; NULL when absent. */
static int opt_arr(const struct qc_gguf *g, const char *key, uint64_t n, bool strings,
		   const struct qc_gguf_value **out, struct qc_err *err)
{
	*out = NULL;
	const struct qc_gguf_kv *kv = qc_gguf_find(g, key);
	if (!kv)
		return QC_OK;
	const struct qc_gguf_value *a = &kv->val;
	if (a->type != QC_GGUF_ARRAY)
		return key_error(g, key, "not an array", err);
	bool is_str = a->arr.elem == QC_GGUF_STRING;
	if (strings ? !is_str : (is_str || a->arr.elem == QC_GGUF_ARRAY || a->arr.elem == QC_GGUF_BOOL))
		return key_error(g, key, strings ? "not an array of strings" : "not a numeric array", err);
	if (n != UINT64_MAX && a->arr.n != n)
		return qc_err_set(err, QC_EFORMAT, g->path, NULL, (int64_t)kv->off,
				  "key '%s' has %llu entries for %llu tokens", key,
				  (unsigned long long)a->arr.n, (unsigned long long)n);
	*out = a;
	return QC_OK;
}

static int load_tokens(struct qc_vocab *v, const struct qc_gguf *g, struct qc_err *err)
{
	const struct qc_gguf_value *toks, *scores, *types;
	int rc = opt_arr(g, "tokenizer.ggml.tokens", UINT64_MAX, true, &toks, err);
	if (rc)
		return rc;
	if (!toks)
		return qc_err_set(err, QC_EFORMAT, g->path, NULL, -1, "no tokenizer.ggml.tokens");
	if ((rc = qc_vocab_alloc_tokens(v, toks->arr.n, g->path, err)) ||
	    (rc = opt_arr(g, "tokenizer.ggml.scores", toks->arr.n, false, &scores, err)) ||
	    (rc = opt_arr(g, "tokenizer.ggml.token_type", toks->arr.n, false, &types, err)))
		return rc;
	/* the common layouts are read straight from the mapping */
	bool f32 = scores && scores->arr.elem == QC_GGUF_FLOAT32;
	bool i32 = types && types->arr.elem == QC_GGUF_INT32;
	for (uint32_t i = 0; i < v->n_tokens; i++) {
		float score = 0.0f;
		int64_t type = QC_TOKEN_TYPE_NORMAL;
		double d;
		if (f32) {
			memcpy(&score, scores->arr.raw + 4 * (size_t)i, 4);
		} else if (scores) {
			if (!qc_gguf_arr_f64(scores, i, &d))
				return key_error(g, "tokenizer.ggml.scores", "unreadable entry", err);
			score = (float)d;
		}
		if (i32) {
			int32_t t;
			memcpy(&t, types->arr.raw + 4 * (size_t)i, 4);
			type = t;
		} else if (types && !qc_gguf_arr_i64(types, i, &type)) {
			return key_error(g, "tokenizer.ggml.token_type", "unreadable entry", err);
		}
		const struct qc_gguf_str *s = &toks->arr.items[i].s;
		if ((rc = qc_vocab_set_token(v, i, s->p, (size_t)s->len, score, type, err)))
			return rc;
	}
	return QC_OK;
}

static int load_merges(struct qc_vocab *v, const struct qc_gguf *g, struct qc_err *err)
{
	const struct qc_gguf_value *m;
	int rc = opt_arr(g, "tokenizer.ggml.merges", UINT64_MAX, true, &m, err);
	if (rc || !m)
		return rc; /* qc_vocab_finish insists on merges for BPE */
	if ((rc = qc_vocab_alloc_merges(v, m->arr.n, g->path, err)))
		return rc;
	for (uint32_t i = 0; i < v->n_merges; i++)
		if ((rc = qc_vocab_set_merge(v, i, m->arr.items[i].s.p, (size_t)m->arr.items[i].s.len, err)))
			return rc;
	return QC_OK;
}

static const struct {
	const char *key;
	enum qc_special which;
} id_keys[] = {
	{ "tokenizer.ggml.bos_token_id", QC_SPECIAL_BOS },
	{ "tokenizer.ggml.eos_token_id", QC_SPECIAL_EOS },
	{ "tokenizer.ggml.eot_token_id", QC_SPECIAL_EOT },
	{ "tokenizer.ggml.eom_token_id", QC_SPECIAL_EOM },
	{ "tokenizer.ggml.unknown_token_id", QC_SPECIAL_UNK },
	{ "tokenizer.ggml.seperator_token_id", QC_SPECIAL_SEP },
	{ "tokenizer.ggml.padding_token_id", QC_SPECIAL_PAD },
	{ "tokenizer.ggml.cls_token_id", QC_SPECIAL_CLS },
	{ "tokenizer.ggml.mask_token_id", QC_SPECIAL_MASK },
	{ "tokenizer.ggml.fim_pre_token_id", QC_SPECIAL_FIM_PRE },
	{ "tokenizer.ggml.fim_suf_token_id", QC_SPECIAL_FIM_SUF },
	{ "tokenizer.ggml.fim_mid_token_id", QC_SPECIAL_FIM_MID },
	{ "tokenizer.ggml.fim_pad_token_id", QC_SPECIAL_FIM_PAD },
	{ "tokenizer.ggml.fim_rep_token_id", QC_SPECIAL_FIM_REP },
	{ "tokenizer.ggml.fim_sep_token_id", QC_SPECIAL_FIM_SEP },
	{ "tokenizer.ggml.prefix_token_id", QC_SPECIAL_FIM_PRE }, /* deprecated spellings */
	{ "tokenizer.ggml.suffix_token_id", QC_SPECIAL_FIM_SUF },
	{ "tokenizer.ggml.middle_token_id", QC_SPECIAL_FIM_MID },
};

static int load_keys(struct qc_vocab *v, const struct qc_gguf *g, struct qc_err *err)
{
	for (size_t k = 0; k < sizeof id_keys / sizeof id_keys[0]; k++) {
		int64_t id;
		int rc = qc_gguf_get_i64(g, id_keys[k].key, &id, err);
		if (rc == QC_ENOTFOUND)
			continue;
		if (rc)
			return rc;
		qc_vocab_set_special(v, id_keys[k].which, id, id_keys[k].key);
	}
	const struct {
		const char *key;
		bool *dst;
	} flag_keys[] = {
		{ "tokenizer.ggml.add_bos_token", &v->add_bos },
		{ "tokenizer.ggml.add_eos_token", &v->add_eos },
		{ "tokenizer.ggml.add_space_prefix", &v->add_space_prefix },
		{ "tokenizer.ggml.remove_extra_whitespaces", &v->remove_extra_ws },
	};
	for (size_t k = 0; k < sizeof flag_keys / sizeof flag_keys[0]; k++) {
		int rc = qc_gguf_get_bool(g, flag_keys[k].key, flag_keys[k].dst, err);
		if (rc && rc != QC_ENOTFOUND)
			return rc;
	}
	struct qc_gguf_str tmpl;
	int rc = opt_str(g, "tokenizer.chat_template", &tmpl, err);
	if (rc || !tmpl.p)
		return rc;
	return qc_vocab_set_chat_template(v, tmpl.p, (size_t)tmpl.len, err);
}

int qc_vocab_from_gguf(const struct qc_gguf *g, struct qc_vocab **out, struct qc_err *err)
{
	struct qc_vocab *v = NULL;
	struct qc_gguf_str model, pre, name;
	char *name_z = NULL;
	int rc;

	*out = NULL;
	if ((rc = opt_str(g, "tokenizer.ggml.model", &model, err)) ||
	    (rc = opt_str(g, "tokenizer.ggml.pre", &pre, err)) || (rc = opt_str(g, "general.name", &name, err)))
		return rc;
	if (!model.p)
		return qc_err_set(err, QC_EFORMAT, g->path, NULL, -1, "no tokenizer.ggml.model");
	if (name.p && !(name_z = strndup(name.p, (size_t)name.len)))
		return qc_err_set(err, QC_ENOMEM, g->path, NULL, -1, "out of memory");
	if ((rc = qc_vocab_begin(model.p, (size_t)model.len, pre.p, (size_t)pre.len, g->path, &v, err)))
		goto out_free;
	if ((rc = load_tokens(v, g, err)) || (rc = load_merges(v, g, err)) || (rc = load_keys(v, g, err)) ||
	    (rc = qc_vocab_finish(v, name_z, g->path, err)))
		goto out_free;
	*out = v;
	v = NULL;
out_free:
	qc_vocab_free(v);
	free(name_z);
	return rc;
}
