/* vocab_json.c — build a struct qc_vocab from the bundle manifest's "tokenizer".
 *
 * Owns: reading and validating the schema below, which the bundle writer emits
 * and whose fields mirror the GGUF tokenizer.* keys one to one. Absent optional
 * fields keep llama.cpp's per-model defaults, exactly as absent GGUF keys do;
 * unknown members are ignored so newer writers stay readable.
 * Non-goal: parsing JSON text (the caller hands over a cJSON tree).
 */

/* Schema (field: type — GGUF key):
 *   "model"   string, required        tokenizer.ggml.model ("llama", "gpt2", "bert")
 *   "pre"     string                  tokenizer.ggml.pre
 *   "tokens"  array, required: a string, or {"hex": "<bytes>"} for a token that
 *             is not valid UTF-8      tokenizer.ggml.tokens
 *   "scores"  number array            tokenizer.ggml.scores      (one per token)
 *   "token_types" integer array       tokenizer.ggml.token_type  (one per token)
 *   "merges"  string array            tokenizer.ggml.merges
 *   "special" {"bos","eos","unk","sep","pad","cls","mask","eot","eom": id}, only
 *             those the source had    tokenizer.ggml.*_token_id
 *   "add_bos", "add_eos", "add_space_prefix", "remove_extra_whitespaces": bool
 *   "chat_template" string            tokenizer.chat_template
 */
#define QC_VOCAB_INTERNAL
#include "vocab.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#define SRC "manifest tokenizer"

static const cJSON *member(const cJSON *o, const char *name)
{
	return cJSON_GetObjectItemCaseSensitive(o, name);
}

static int bad(struct qc_err *err, const char *field, long idx, const char *what)
{
	if (idx >= 0)
		return qc_err_set(err, QC_EFORMAT, SRC, NULL, -1, "\"%s\"[%ld]: %s", field, idx, what);
	return qc_err_set(err, QC_EFORMAT, SRC, NULL, -1, "\"%s\": %s", field, what);
}

static bool as_int(const cJSON *x, int64_t *out)
{
	if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble != floor(x->valuedouble) ||
	    fabs(x->valuedouble) > 9007199254740992.0)
		return false;
	*out = (int64_t)x->valuedouble;
	return true;
}

/* Optional array member that must have n entries (n = -1: any count). */
static int opt_array(const cJSON *tok, const char *name, long n, const cJSON **out, struct qc_err *err)
{
	*out = member(tok, name);
	if (!*out)
		return QC_OK;
	if (!cJSON_IsArray(*out))
		return bad(err, name, -1, "not an array");
	if (n >= 0 && cJSON_GetArraySize(*out) != n)
		return qc_err_set(err, QC_EFORMAT, SRC, NULL, -1, "\"%s\" has %d entries for %ld tokens", name,
				  cJSON_GetArraySize(*out), n);
	return QC_OK;
}

static int hex_val(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c |= 0x20;
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Token text from a string or {"hex": ...}; *buf is scratch the caller frees. */
static int token_text(const cJSON *t, long i, char **buf, size_t *cap, const char **s, size_t *n,
		      struct qc_err *err)
{
	if (cJSON_IsString(t)) {
		*s = t->valuestring;
		*n = strlen(t->valuestring);
		return QC_OK;
	}
	const cJSON *h = cJSON_IsObject(t) ? member(t, "hex") : NULL;
	if (!cJSON_IsString(h))
		return bad(err, "tokens", i, "neither a string nor {\"hex\": string}");
	size_t hl = strlen(h->valuestring);
	if (hl % 2)
		return bad(err, "tokens", i, "odd number of hex digits");
	if (hl / 2 + 1 > *cap) {
		char *p = realloc(*buf, hl / 2 + 1);
		if (!p)
			return qc_err_set(err, QC_ENOMEM, SRC, NULL, -1, "out of memory");
		*buf = p;
		*cap = hl / 2 + 1;
	}
	for (size_t k = 0; k < hl; k += 2) {
		int a = hex_val(h->valuestring[k]), b = hex_val(h->valuestring[k + 1]);
		if (a < 0 || b < 0)
			return bad(err, "tokens", i, "bad hex digit");
		(*buf)[k / 2] = (char)(a << 4 | b);
	}
	*s = *buf;
	*n = hl / 2;
	return QC_OK;
}

static int load_tokens(struct qc_vocab *v, const cJSON *tok, struct qc_err *err)
{
	const cJSON *toks, *scores, *types, *t;
	char *buf = NULL;
	size_t cap = 0;
	int rc = opt_array(tok, "tokens", -1, &toks, err);
	if (rc)
		return rc;
	if (!toks)
		return bad(err, "tokens", -1, "missing");
	long n = cJSON_GetArraySize(toks);
	if ((rc = qc_vocab_alloc_tokens(v, (uint64_t)(n > 0 ? n : 0), SRC, err)) ||
	    (rc = opt_array(tok, "scores", n, &scores, err)) || (rc = opt_array(tok, "token_types", n, &types, err)))
		return rc;
	/* walk the three lists together: cJSON_GetArrayItem is linear per call */
	const cJSON *sc = scores ? scores->child : NULL, *ty = types ? types->child : NULL;
	long i = 0;
	cJSON_ArrayForEach(t, toks) {
		float score = 0.0f;
		int64_t type = QC_TOKEN_TYPE_NORMAL;
		const char *s = NULL;
		size_t len = 0;
		if (sc) {
			if (!cJSON_IsNumber(sc)) {
				rc = bad(err, "scores", i, "not a number");
				break;
			}
			score = (float)sc->valuedouble;
			sc = sc->next;
		}
		if (ty) {
			if (!as_int(ty, &type)) {
				rc = bad(err, "token_types", i, "not an integer");
				break;
			}
			ty = ty->next;
		}
		if ((rc = token_text(t, i, &buf, &cap, &s, &len, err)) ||
		    (rc = qc_vocab_set_token(v, (uint32_t)i, s, len, score, type, err)))
			break;
		i++;
	}
	free(buf);
	return rc;
}

static int load_merges(struct qc_vocab *v, const cJSON *tok, struct qc_err *err)
{
	const cJSON *m, *x;
	int rc = opt_array(tok, "merges", -1, &m, err);
	if (rc || !m)
		return rc;
	if ((rc = qc_vocab_alloc_merges(v, (uint64_t)cJSON_GetArraySize(m), SRC, err)))
		return rc;
	uint32_t i = 0;
	cJSON_ArrayForEach(x, m) {
		if (!cJSON_IsString(x))
			return bad(err, "merges", i, "not a string");
		if ((rc = qc_vocab_set_merge(v, i, x->valuestring, strlen(x->valuestring), err)))
			return rc;
		i++;
	}
	return QC_OK;
}

static int load_keys(struct qc_vocab *v, const cJSON *tok, struct qc_err *err)
{
	static const struct {
		const char *name;
		enum qc_special which;
	} ids[] = {
		{ "bos", QC_SPECIAL_BOS }, { "eos", QC_SPECIAL_EOS }, { "unk", QC_SPECIAL_UNK },
		{ "sep", QC_SPECIAL_SEP }, { "pad", QC_SPECIAL_PAD }, { "cls", QC_SPECIAL_CLS },
		{ "mask", QC_SPECIAL_MASK }, { "eot", QC_SPECIAL_EOT }, { "eom", QC_SPECIAL_EOM },
	};
	const cJSON *sp = member(tok, "special");
	if (sp && !cJSON_IsObject(sp))
		return bad(err, "special", -1, "not an object");
	for (size_t k = 0; sp && k < sizeof ids / sizeof ids[0]; k++) {
		const cJSON *x = member(sp, ids[k].name);
		int64_t id;
		if (!x)
			continue;
		if (!as_int(x, &id))
			return bad(err, "special", -1, "ids must be integers");
		qc_vocab_set_special(v, ids[k].which, id, ids[k].name);
	}
	const struct {
		const char *name;
		bool *dst;
	} flags[] = {
		{ "add_bos", &v->add_bos },
		{ "add_eos", &v->add_eos },
		{ "add_space_prefix", &v->add_space_prefix },
		{ "remove_extra_whitespaces", &v->remove_extra_ws },
	};
	for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++) {
		const cJSON *x = member(tok, flags[k].name);
		if (!x)
			continue;
		if (!cJSON_IsBool(x))
			return bad(err, flags[k].name, -1, "not a bool");
		*flags[k].dst = cJSON_IsTrue(x);
	}
	const cJSON *tmpl = member(tok, "chat_template");
	if (!tmpl)
		return QC_OK;
	if (!cJSON_IsString(tmpl))
		return bad(err, "chat_template", -1, "not a string");
	return qc_vocab_set_chat_template(v, tmpl->valuestring, strlen(tmpl->valuestring), err);
}

int qc_vocab_from_json(const struct cJSON *tok, struct qc_vocab **out, struct qc_err *err)
{
	struct qc_vocab *v = NULL;
	int rc;

	*out = NULL;
	if (!cJSON_IsObject(tok))
		return qc_err_set(err, QC_EFORMAT, SRC, NULL, -1, "not a JSON object");
	const cJSON *model = member(tok, "model"), *pre = member(tok, "pre");
	if (!cJSON_IsString(model))
		return bad(err, "model", -1, "missing or not a string");
	if (pre && !cJSON_IsString(pre))
		return bad(err, "pre", -1, "not a string");
	if ((rc = qc_vocab_begin(model->valuestring, strlen(model->valuestring), pre ? pre->valuestring : NULL,
				 pre ? strlen(pre->valuestring) : 0, SRC, &v, err)))
		return rc;
	if ((rc = load_tokens(v, tok, err)) || (rc = load_merges(v, tok, err)) || (rc = load_keys(v, tok, err)) ||
	    (rc = qc_vocab_finish(v, NULL, SRC, err)))
		goto out_free;
	*out = v;
	v = NULL;
out_free:
	qc_vocab_free(v);
	return rc;
}
