/* hf_tokenizer.c — tokenizer.json → tokenizer.ggml.* keys (see hf_tokenizer.h).
 * Every id from the file is range-checked; token texts are looked up through one
 * sorted (text, id) table built once. */
#include "hf_tokenizer.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS (1 << 24)
#define MAX_MERGES (1 << 24)
/* ids with no token (gaps, padding up to vocab_size) become [PAD<id>]; real
 * tokenizers leave a few hundred at most, so a larger count is refused rather than
 * allocated (the counts come from the file) */
#define MAX_PAD (1 << 16)

static const char llama3_re[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
				"?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char qwen2_re[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
			       "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct entry {
	const char *text;
	int32_t id;
};

struct tok {
	const struct qc_hf_tok_src *s;
	struct qc_err *err;
	int64_t n;                 /* tokens written */
	const char **text;         /* (n) borrowed from the JSON or pad names */
	char **pad;                /* (n) owned "[PAD<id>]" strings, else NULL */
	int32_t *type;             /* (n) enum qc_token_type values */
	float *score;              /* (n) SPM only */
	struct entry *by_text;     /* (n_text) sorted by text */
	size_t n_text;
	bool spm;
};

static const cJSON *get(const cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

static bool is_type(const cJSON *o, const char *type)
{
	const cJSON *t = get(o, "type");
	return cJSON_IsString(t) && strcmp(t->valuestring, type) == 0;
}

/* First object of the given "type" anywhere inside j (Sequences nest). */
static const cJSON *find_type(const cJSON *j, const char *type, int depth)
{
	if (!j || depth > 16)
		return NULL;
	if (cJSON_IsObject(j) && is_type(j, type))
		return j;
	const cJSON *c;
	cJSON_ArrayForEach(c, j) {
		if (cJSON_IsObject(c) || cJSON_IsArray(c)) {
			const cJSON *r = find_type(c, type, depth + 1);
			if (r)
				return r;
		}
	}
	return NULL;
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->text, ((const struct entry *)b)->text);
}

static int32_t lookup(const struct tok *t, const char *text)
{
	struct entry k = { text, 0 };
	const struct entry *e = bsearch(&k, t->by_text, t->n_text, sizeof k, cmp_entry);
	return e ? e->id : -1;
}

static bool id_ok(const cJSON *x, int64_t *id)
{
	if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble < MAX_TOKENS) ||
	    x->valuedouble != floor(x->valuedouble))
		return false;
	*id = (int64_t)x->valuedouble;
	return true;
}

/* Place text at id; a second, different text for one id is an error. */
static int place(struct tok *t, int64_t id, const char *text)
{
	if (t->text[id] && strcmp(t->text[id], text) != 0)
		return qc_err_set(t->err, QC_EFORMAT, t->s->path, NULL, -1, "token id %lld is both '%.40s' and '%.40s'",
				  (long long)id, t->text[id], text);
	t->text[id] = text;
	return QC_OK;
}

static int load_tokens(struct tok *t, const cJSON *vocab, const cJSON *added)
{
	const char *p = t->s->path;
	int64_t max_id = -1, id = 0, n_entries = 0;
	const cJSON *x;
	cJSON_ArrayForEach(x, vocab) {
		n_entries++;
		if (!id_ok(x, &id))
			return qc_err_set(t->err, QC_EFORMAT, p, NULL, -1, "vocab entry '%.40s': id must be an integer in [0, 2^24)", x->string);
		max_id = id > max_id ? id : max_id;
	}
	cJSON_ArrayForEach(x, added) {
		if (!id_ok(get(x, "id"), &id) || !cJSON_IsString(get(x, "content")))
			return qc_err_set(t->err, QC_EFORMAT, p, NULL, -1, "added_tokens: each needs an integer id and a content string");
		max_id = id > max_id ? id : max_id;
		n_entries++;
	}
	t->n = max_id + 1;
	if (t->s->n_vocab > 0 && t->n > t->s->n_vocab)
		return qc_err_set(t->err, QC_EFORMAT, p, NULL, -1,
				  "tokenizer has ids up to %lld but the model's vocab_size is %lld", (long long)max_id,
				  (long long)t->s->n_vocab);
	if (t->s->n_vocab > t->n)
		t->n = t->s->n_vocab;
	if (t->n < 1)
		return qc_err_set(t->err, QC_EFORMAT, p, NULL, -1, "empty vocabulary");
	if (t->n - n_entries > MAX_PAD)
		return qc_err_set(t->err, QC_ERANGE, p, NULL, -1,
				  "%lld token entries for %lld ids (vocab_size or the largest id): more than %d without a token",
				  (long long)n_entries, (long long)t->n, MAX_PAD);
	size_t n = (size_t)t->n;
	t->text = calloc(n, sizeof *t->text);
	t->pad = calloc(n, sizeof *t->pad);
	t->type = calloc(n, sizeof *t->type);
	t->score = calloc(n, sizeof *t->score);
	t->by_text = calloc(n, sizeof *t->by_text);
	if (!t->text || !t->pad || !t->type || !t->score || !t->by_text)
		return qc_err_set(t->err, QC_ENOMEM, p, NULL, -1, "out of memory");
	int rc;
	cJSON_ArrayForEach(x, vocab) {
		id_ok(x, &id);
		if ((rc = place(t, id, x->string)))
			return rc;
		t->type[id] = 1; /* NORMAL */
	}
	cJSON_ArrayForEach(x, added) {
		id_ok(get(x, "id"), &id);
		if ((rc = place(t, id, get(x, "content")->valuestring)))
			return rc;
		t->type[id] = cJSON_IsTrue(get(x, "special")) ? 3 /* CONTROL */ : 4 /* USER_DEFINED */;
	}
	for (int64_t i = 0; i < t->n; i++) {
		if (t->text[i]) {
			t->by_text[t->n_text++] = (struct entry){ t->text[i], (int32_t)i };
			continue;
		}
		char buf[32];
		snprintf(buf, sizeof buf, "[PAD%lld]", (long long)i);
		if (!(t->pad[i] = strdup(buf)))
			return qc_err_set(t->err, QC_ENOMEM, p, NULL, -1, "out of memory");
		t->text[i] = t->pad[i];
		t->type[i] = 5; /* UNUSED */
	}
	qsort(t->by_text, t->n_text, sizeof *t->by_text, cmp_entry);
	for (size_t i = 1; i < t->n_text; i++)
		if (strcmp(t->by_text[i - 1].text, t->by_text[i].text) == 0)
			return qc_err_set(t->err, QC_EFORMAT, p, NULL, -1, "token '%.40s' has two ids (%d and %d)",
					  t->by_text[i].text, t->by_text[i - 1].id, t->by_text[i].id);
	return QC_OK;
}

/* A merge as "a b" (tokenizers writes either that string or ["a", "b"]). *owned is
 * set when the returned string was allocated. */
static const char *merge_text(const cJSON *m, char **owned)
{
	*owned = NULL;
	if (cJSON_IsString(m))
		return strchr(m->valuestring, ' ') ? m->valuestring : NULL;
	if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != 2)
		return NULL;
	const cJSON *a = cJSON_GetArrayItem(m, 0), *b = cJSON_GetArrayItem(m, 1);
	if (!cJSON_IsString(a) || !cJSON_IsString(b))
		return NULL;
	size_t la = strlen(a->valuestring), lb = strlen(b->valuestring);
	char *s = malloc(la + lb + 2);
	if (!s)
		return NULL;
	memcpy(s, a->valuestring, la);
	s[la] = ' ';
	memcpy(s + la + 1, b->valuestring, lb + 1);
	*owned = s;
	return s;
}

/* gpt2: merges verbatim. spm: scores from merge ranks. */
static int load_merges(struct tok *t, const cJSON *merges, struct qc_gguf_writer *w)
{
	const char *p = t->s->path;
	int n = cJSON_GetArraySize(merges);
	if (n > MAX_MERGES)
		return qc_err_set(t->err, QC_ERANGE, p, NULL, -1, "%d merges (limit %d)", n, MAX_MERGES);
	if (t->spm)
		for (int64_t i = 0; i < t->n; i++)
			t->score[i] = -1e9f; /* never produced by a merge: merged last */
	const char **ms = t->spm ? NULL : calloc((size_t)n + 1, sizeof *ms);
	char **owned = calloc((size_t)n + 1, sizeof *owned);
	int rc = QC_OK, i = 0;
	if ((!t->spm && !ms) || !owned) {
		rc = qc_err_set(t->err, QC_ENOMEM, p, NULL, -1, "out of memory");
		goto out;
	}
	const cJSON *m;
	cJSON_ArrayForEach(m, merges) {
		const char *s = merge_text(m, &owned[i]);
		if (!s) {
			rc = qc_err_set(t->err, QC_EFORMAT, p, NULL, -1, "merge %d is not \"a b\" or [\"a\", \"b\"]", i);
			goto out;
		}
		if (t->spm) {
			/* the merged token is the two halves without the separating space */
			const char *sp = strchr(s, ' ');
			size_t la = (size_t)(sp - s), lb = strlen(sp + 1);
			char stack[256], *joined = la + lb < sizeof stack ? stack : malloc(la + lb + 1);
			if (!joined) {
				rc = qc_err_set(t->err, QC_ENOMEM, p, NULL, -1, "out of memory");
				goto out;
			}
			memcpy(joined, s, la);
			memcpy(joined + la, sp + 1, lb + 1);
			int32_t id = lookup(t, joined);
			if (joined != stack)
				free(joined);
			if (id >= 0 && t->score[id] == -1e9f)
				t->score[id] = -(float)i;
		} else {
			ms[i] = s;
		}
		i++;
	}
	if (!t->spm)
		rc = qc_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", ms, (uint64_t)n, t->err);
out:
	for (int k = 0; owned && k < n; k++)
		free(owned[k]);
	free(owned);
	free(ms);
	return rc;
}

static int detect_pre(struct tok *t, const cJSON *pre, const char **name)
{
	const cJSON *split = find_type(pre, "Split", 0);
	if (split) {
		const cJSON *pat = get(split, "pattern");
		const cJSON *re = get(pat, "Regex");
		if (!cJSON_IsString(re))
			re = get(pat, "String");
		const char *r = cJSON_IsString(re) ? re->valuestring : "";
		if (strcmp(r, llama3_re) == 0)
			*name = "llama-bpe";
		else if (strcmp(r, qwen2_re) == 0)
			*name = "qwen2";
		else
			return qc_err_set(t->err, QC_EUNSUPPORTED, t->s->path, NULL, -1,
					  "unknown pre-tokenizer regex '%.120s' (known: Llama 3, Qwen2)", r);
		return QC_OK;
	}
	const cJSON *bl = find_type(pre, "ByteLevel", 0);
	if (bl && !cJSON_IsFalse(get(bl, "use_regex"))) {
		*name = find_type(pre, "Digits", 0) ? "starcoder" : "gpt-2";
		return QC_OK;
	}
	return qc_err_set(t->err, QC_EUNSUPPORTED, t->s->path, NULL, -1,
			  "byte-level BPE without a known pre-tokenizer (Split regex or ByteLevel use_regex)");
}

/* Token text of a tokenizer_config.json special ("<s>" or {"content": "<s>"}). */
static const char *special_text(const cJSON *x)
{
	if (cJSON_IsString(x))
		return x->valuestring;
	const cJSON *c = cJSON_IsObject(x) ? get(x, "content") : NULL;
	return cJSON_IsString(c) ? c->valuestring : NULL;
}

static bool cfg_id(const cJSON *cfg, const char *key, int64_t n, int64_t *id)
{
	const cJSON *x = get(cfg, key);
	if (cJSON_IsArray(x)) /* generation_config may list several eos ids; the first is the eos */
		x = cJSON_GetArrayItem(x, 0);
	return id_ok(x, id) && *id < n;
}

/* The first (or last) element of the post_processor's single-sequence template when
 * it is a special token, else NULL. */
static const char *template_edge(const cJSON *post, bool last)
{
	const cJSON *tp = find_type(post, "TemplateProcessing", 0);
	const cJSON *single = get(tp, "single");
	int n = cJSON_GetArraySize(single);
	const cJSON *e = n ? cJSON_GetArrayItem(single, last ? n - 1 : 0) : NULL;
	const cJSON *id = get(get(e, "SpecialToken"), "id");
	return cJSON_IsString(id) ? id->valuestring : NULL;
}

static int add_specials(struct tok *t, struct qc_gguf_writer *w)
{
	static const char *const kinds[][3] = {
		{ "bos_token", "bos_token_id", "tokenizer.ggml.bos_token_id" },
		{ "eos_token", "eos_token_id", "tokenizer.ggml.eos_token_id" },
		{ "unk_token", "unk_token_id", "tokenizer.ggml.unknown_token_id" },
		{ "pad_token", "pad_token_id", "tokenizer.ggml.padding_token_id" },
	};
	const struct qc_hf_tok_src *s = t->s;
	int32_t ids[4];
	int rc = QC_OK;
	for (size_t k = 0; !rc && k < 4; k++) {
		int64_t id = -1;
		const char *txt = special_text(get(s->tokenizer_config, kinds[k][0]));
		if (txt)
			id = lookup(t, txt);
		if (id < 0 && !cfg_id(s->config, kinds[k][1], t->n, &id) && !cfg_id(s->generation_config, kinds[k][1], t->n, &id))
			id = -1;
		if (k == 2 && id < 0) { /* SPM's unk is the model's unk_token */
			const cJSON *u = get(get(s->tokenizer, "model"), "unk_token");
			if (cJSON_IsString(u))
				id = lookup(t, u->valuestring);
		}
		ids[k] = (int32_t)id;
		if (id >= 0)
			rc = qc_gguf_writer_add_u32(w, kinds[k][2], (uint32_t)id, t->err);
		if (k == 2 && id >= 0 && t->spm)
			t->type[id] = 2; /* UNKNOWN */
	}
	const cJSON *post = get(s->tokenizer, "post_processor");
	const char *flags[][2] = { { "add_bos_token", "tokenizer.ggml.add_bos_token" },
				   { "add_eos_token", "tokenizer.ggml.add_eos_token" } };
	for (int k = 0; !rc && k < 2; k++) {
		const cJSON *x = get(s->tokenizer_config, flags[k][0]);
		bool v;
		if (cJSON_IsBool(x)) {
			v = cJSON_IsTrue(x);
		} else {
			const char *e = template_edge(post, k == 1);
			v = e && ids[k] >= 0 && lookup(t, e) == ids[k];
		}
		rc = qc_gguf_writer_add_bool(w, flags[k][1], v, t->err);
	}
	const cJSON *ct = get(s->tokenizer_config, "chat_template");
	if (!rc && cJSON_IsArray(ct)) { /* [{"name": ..., "template": ...}]: the default one */
		const cJSON *e, *pick = NULL;
		cJSON_ArrayForEach(e, ct)
			if (cJSON_IsString(get(e, "name")) && strcmp(get(e, "name")->valuestring, "default") == 0)
				pick = get(e, "template");
		ct = pick;
	}
	if (!rc && cJSON_IsString(ct))
		rc = qc_gguf_writer_add_str(w, "tokenizer.chat_template", ct->valuestring, t->err);
	return rc;
}

int qc_hf_tokenizer_to_gguf(const struct qc_hf_tok_src *s, struct qc_gguf_writer *w, struct qc_err *err)
{
	struct tok t = { .s = s, .err = err };
	const cJSON *model = get(s->tokenizer, "model");
	const cJSON *vocab = get(model, "vocab"), *merges = get(model, "merges");
	const cJSON *added = get(s->tokenizer, "added_tokens");
	const cJSON *pre = get(s->tokenizer, "pre_tokenizer");
	int rc;
	if (!is_type(model, "BPE"))
		return qc_err_set(err, QC_EUNSUPPORTED, s->path, NULL, -1,
				  "tokenizer model '%s' is not supported (BPE: byte-level or SentencePiece-style)",
				  cJSON_IsString(get(model, "type")) ? get(model, "type")->valuestring : "?");
	if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges) || (added && !cJSON_IsArray(added)))
		return qc_err_set(err, QC_EFORMAT, s->path, NULL, -1, "model.vocab, model.merges or added_tokens malformed");
	bool byte_level = find_type(pre, "ByteLevel", 0) || find_type(get(s->tokenizer, "decoder"), "ByteLevel", 0);
	const cJSON *norm = get(s->tokenizer, "normalizer");
	const cJSON *prepend = find_type(norm, "Prepend", 0), *meta = find_type(pre, "Metaspace", 0);
	t.spm = !byte_level && (cJSON_IsTrue(get(model, "byte_fallback")) || prepend || meta);
	if (!byte_level && !t.spm)
		return qc_err_set(err, QC_EUNSUPPORTED, s->path, NULL, -1,
				  "BPE tokenizer that is neither byte-level nor SentencePiece-style");
	const char *pre_name = NULL;
	if ((rc = load_tokens(&t, vocab, added)))
		goto out;
	if (!t.spm && (rc = detect_pre(&t, pre, &pre_name)))
		goto out;
	if (t.spm)
		for (int64_t i = 0; i < t.n; i++) {
			unsigned b;
			char tail;
			if (strlen(t.text[i]) == 6 && sscanf(t.text[i], "<0x%2X%c", &b, &tail) == 2 && tail == '>')
				t.type[i] = 6; /* BYTE */
		}
	if ((rc = qc_gguf_writer_add_str(w, "tokenizer.ggml.model", t.spm ? "llama" : "gpt2", err)) ||
	    (pre_name && (rc = qc_gguf_writer_add_str(w, "tokenizer.ggml.pre", pre_name, err))) ||
	    (rc = qc_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", t.text, (uint64_t)t.n, err)) ||
	    (rc = load_merges(&t, merges, w)) || (rc = add_specials(&t, w)))
		goto out;
	if (t.spm) {
		/* Prepend("▁") normalizer (Llama 2) or Metaspace prepend (newer exports) */
		const cJSON *scheme = get(meta, "prepend_scheme");
		bool space = prepend || (meta && !(cJSON_IsString(scheme) && strcmp(scheme->valuestring, "never") == 0) &&
					 !cJSON_IsFalse(get(meta, "add_prefix_space")));
		if ((rc = qc_gguf_writer_add_arr(w, "tokenizer.ggml.scores", QC_GGUF_FLOAT32, t.score, (uint64_t)t.n, err)) ||
		    (rc = qc_gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", space, err)))
			goto out;
	}
	rc = qc_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", QC_GGUF_INT32, t.type, (uint64_t)t.n, err);
out:
	if (rc && !err->path[0]) {
		char msg[QC_ERR_MSG_MAX];
		snprintf(msg, sizeof msg, "%s", err->msg);
		qc_err_set(err, rc, s->path, NULL, -1, "%s", msg);
	}
	for (int64_t i = 0; t.pad && i < t.n; i++)
		free(t.pad[i]);
	free(t.pad);
	free(t.text);
	free(t.type);
	free(t.score);
	free(t.by_text);
	return rc;
}
