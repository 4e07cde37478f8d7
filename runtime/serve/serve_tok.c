/* serve_tok.c — /tokenize and /detokenize (see serve_tok.h).
 *
 * Owns: the two handlers. A tokenize body goes through serve_req_parse (chat
 * mode for "messages"), which validates and renders it exactly as a generation
 * request would; a "prompt" must be a string (ids need no tokenizing). Token ids in a
 * detokenize body are bounded by the vocabulary and by the body cap (each id
 * costs at least two bytes of JSON).
 */
#include "serve_tok.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "serve_req.h"
#include "vocab.h"

#define MAX_DETOK_IDS (1 << 20)

static int fail(int status, char *msg, size_t msg_cap, char *param, size_t param_cap, const char *field,
		const char *text)
{
	snprintf(param, param_cap, "%s", field);
	snprintf(msg, msg_cap, "%s%s%s", field, field[0] ? ": " : "", text);
	return status;
}

/* Append the cJSON object o (consumed) to out; 200 or 503. */
static int emit(cJSON *o, struct serve_buf *out, char *msg, size_t msg_cap)
{
	char *txt = o ? cJSON_PrintUnformatted(o) : NULL;
	cJSON_Delete(o);
	int rc = !txt || serve_buf_put(out, txt, strlen(txt));
	cJSON_free(txt);
	if (rc) {
		snprintf(msg, msg_cap, "out of memory");
		return 503;
	}
	return 200;
}

static int tokenize(const struct serve_tok_ctx *c, const cJSON *o, const char *body, size_t len,
		    struct serve_buf *out, char *msg, size_t msg_cap, char *param, size_t param_cap)
{
	const cJSON *pr = cJSON_GetObjectItemCaseSensitive(o, "prompt");
	const cJSON *ms = cJSON_GetObjectItemCaseSensitive(o, "messages");
	const cJSON *as = cJSON_GetObjectItemCaseSensitive(o, "add_special_tokens");
	bool add_special = true;
	if (as && !cJSON_IsNull(as)) {
		if (!cJSON_IsBool(as))
			return fail(400, msg, msg_cap, param, param_cap, "add_special_tokens", "must be a boolean");
		add_special = cJSON_IsTrue(as);
	}
	if ((pr && !cJSON_IsNull(pr)) == (ms && !cJSON_IsNull(ms)))
		return fail(400, msg, msg_cap, param, param_cap, "prompt", "give either prompt or messages");
	/* both forms through the completion/chat parser: the same checks (NUL
	   refused, messages rendered by the template) as a generation request */
	const bool chat = ms && !cJSON_IsNull(ms);
	struct serve_params p;
	struct qc_err err = {0};
	int rc = serve_req_parse(body, len, chat, c->chat, &p, param, param_cap, &err);
	if (!rc && !p.prompt)
		rc = fail(400, msg, msg_cap, param, param_cap, "prompt", "must be a string");
	else if (rc)
		snprintf(msg, msg_cap, "%s", err.msg);
	if (rc) {
		serve_params_deinit(&p);
		return rc == QC_ENOMEM ? 503 : 400;
	}
	int32_t *ids = NULL;
	size_t n = 0;
	rc = qc_engine_tokenize(c->e, p.prompt, p.prompt_len, add_special, &ids, &n, &err);
	serve_params_deinit(&p);
	if (rc) {
		char m[QC_ERR_MSG_MAX + 64];
		qc_err_format(&err, m, sizeof m);
		free(ids);
		return fail(rc == QC_ENOMEM ? 503 : 400, msg, msg_cap, param, param_cap, chat ? "messages" : "prompt", m);
	}
	cJSON *r = cJSON_CreateObject();
	cJSON *a = r ? cJSON_AddArrayToObject(r, "tokens") : NULL;
	bool ok = a && cJSON_AddNumberToObject(r, "count", (double)n) &&
		  cJSON_AddNumberToObject(r, "max_model_len", c->max_model_len);
	for (size_t i = 0; ok && i < n; i++) {
		cJSON *v = cJSON_CreateNumber(ids[i]);
		ok = v && cJSON_AddItemToArray(a, v);
	}
	free(ids);
	if (!ok) {
		cJSON_Delete(r);
		r = NULL;
	}
	return emit(r, out, msg, msg_cap);
}

static int detokenize(const struct serve_tok_ctx *c, const cJSON *o, struct serve_buf *out, char *msg,
		      size_t msg_cap, char *param, size_t param_cap)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "tokens");
	const struct qc_vocab *v = qc_engine_vocab(c->e);
	char m[QC_ERR_MSG_MAX + 64];
	if (!cJSON_IsArray(t))
		return fail(400, msg, msg_cap, param, param_cap, "tokens", "must be an array of token ids");
	int n = cJSON_GetArraySize(t);
	if (n > MAX_DETOK_IDS)
		return fail(400, msg, msg_cap, param, param_cap, "tokens", "more than 1048576 ids");
	if (!v)
		return fail(400, msg, msg_cap, param, param_cap, "tokens", "this model has no tokenizer");
	int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
	if (!ids)
		return fail(503, msg, msg_cap, param, param_cap, "", "out of memory");
	int i = 0;
	for (const cJSON *it = t->child; it; it = it->next, i++) {
		if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0 ||
		    it->valuedouble >= c->n_vocab) {
			snprintf(m, sizeof m, "tokens[%d] is not a token id in 0..%d", i, c->n_vocab - 1);
			free(ids);
			return fail(400, msg, msg_cap, param, param_cap, "tokens", m);
		}
		ids[i] = (int32_t)it->valuedouble;
	}
	/* special tokens render as their text, as vLLM's tokenizer.decode does */
	struct qc_err err = {0};
	char *text = NULL;
	size_t len = 0;
	int rc = qc_detokenize(v, ids, (size_t)n, QC_DETOK_UNPARSE_SPECIAL, &text, &len, &err);
	free(ids);
	if (rc) {
		qc_err_format(&err, m, sizeof m);
		return fail(rc == QC_ENOMEM ? 503 : 400, msg, msg_cap, param, param_cap, "tokens", m);
	}
	cJSON *r = cJSON_CreateObject();
	/* cJSON strings end at NUL: a NUL piece would cut the text, so refuse it */
	if (r && memchr(text ? text : "", '\0', len)) {
		free(text);
		cJSON_Delete(r);
		return fail(400, msg, msg_cap, param, param_cap, "tokens", "the text would contain U+0000 (NUL)");
	}
	bool ok = r && cJSON_AddStringToObject(r, "prompt", text ? text : "");
	free(text);
	if (!ok) {
		cJSON_Delete(r);
		r = NULL;
	}
	return emit(r, out, msg, msg_cap);
}

int serve_tok_answer(const struct serve_tok_ctx *c, bool detok, const char *body, size_t len,
		     struct serve_buf *out, char *msg, size_t msg_cap, char *param, size_t param_cap)
{
	if (param_cap)
		param[0] = '\0';
	cJSON *o = cJSON_ParseWithLength(body, len);
	int st;
	if (!cJSON_IsObject(o)) {
		st = fail(400, msg, msg_cap, param, param_cap, "", "request body must be a JSON object");
		goto out;
	}
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model");
	if (model && !cJSON_IsNull(model) && (!cJSON_IsString(model) || strcmp(model->valuestring, c->model_name))) {
		snprintf(param, param_cap, "model");
		snprintf(msg, msg_cap, "model: '%.200s' is not served here (this server has '%.200s')",
			 cJSON_IsString(model) ? model->valuestring : "?", c->model_name);
		st = 404;
		goto out;
	}
	st = detok ? detokenize(c, o, out, msg, msg_cap, param, param_cap)
		   : tokenize(c, o, body, len, out, msg, msg_cap, param, param_cap);
out:
	cJSON_Delete(o);
	return st;
}
