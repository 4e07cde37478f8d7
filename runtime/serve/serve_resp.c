/* serve_resp.c — builds the response JSON with cJSON (see serve_resp.h).
 *
 * Owns: object layout only. Token strings in logprobs are the piece made valid
 * UTF-8 (a byte-fallback piece shows U+FFFD; "bytes" carries the raw bytes).
 * Non-goals: streaming state (server.c keeps it).
 */
#include "serve_resp.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_text.h"
#include "vocab.h"

/* The piece of id, raw (*n bytes, at most cap). */
static size_t piece(const struct qc_vocab *v, int32_t id, char *buf, size_t cap)
{
	size_t n = qc_token_to_piece(v, id, buf, cap, QC_PIECE_SPECIAL);
	return n > cap ? cap : n;
}

static cJSON *token_str(const struct serve_resp *r, int32_t id, char *raw, size_t *n_raw)
{
	struct serve_buf b = {0};
	*n_raw = piece(r->vocab, id, raw, 256);
	if (r->tokens_as_ids) {
		char t[32];
		snprintf(t, sizeof t, "token_id:%d", id);
		return cJSON_CreateString(t);
	}
	if (serve_utf8_clean(raw, *n_raw, &b))
		return NULL;
	cJSON *s = cJSON_CreateString(b.p ? b.p : "");
	serve_buf_deinit(&b);
	return s;
}

static double lp_val(float x)
{
	/* JSON has no -inf: a token of probability 0 reports the most negative float */
	return isfinite(x) ? (double)x : -9999.0;
}

static cJSON *bytes_arr(const char *raw, size_t n)
{
	cJSON *a = cJSON_CreateArray();
	for (size_t i = 0; a && i < n; i++)
		if (!cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)raw[i]))) {
			cJSON_Delete(a);
			return NULL;
		}
	return a;
}

/* One chat logprobs entry {token, logprob, bytes[, top_logprobs]}. */
static cJSON *chat_entry(const struct serve_resp *r, int32_t id, float lp)
{
	char raw[256];
	size_t n;
	cJSON *e = cJSON_CreateObject(), *t = token_str(r, id, raw, &n);
	if (!e || !t || !cJSON_AddItemToObject(e, "token", t) || !cJSON_AddNumberToObject(e, "logprob", lp_val(lp)) ||
	    !cJSON_AddItemToObject(e, "bytes", bytes_arr(raw, n))) {
		if (!e || !cJSON_GetObjectItem(e, "token"))
			cJSON_Delete(t);
		cJSON_Delete(e);
		return NULL;
	}
	return e;
}

int serve_resp_add_logprobs(struct serve_resp *r, cJSON *parent, const int32_t *ids,
			    const struct qc_sample_result *lp, int32_t from, int32_t to)
{
	if (!lp)
		return cJSON_AddNullToObject(parent, "logprobs") ? 0 : -1;
	cJSON *o = cJSON_AddObjectToObject(parent, "logprobs");
	if (!o)
		return -1;
	if (r->chat) {
		cJSON *content = cJSON_AddArrayToObject(o, "content");
		for (int32_t i = from; content && i < to; i++) {
			cJSON *e = chat_entry(r, ids[i], lp[i].logprob);
			cJSON *tops = e ? cJSON_AddArrayToObject(e, "top_logprobs") : NULL;
			for (int32_t k = 0; tops && k < lp[i].n_top && k < r->top_n; k++) {
				cJSON *t = chat_entry(r, lp[i].top_ids[k], lp[i].top_logprobs[k]);
				if (!t || !cJSON_AddItemToArray(tops, t)) {
					cJSON_Delete(t);
					tops = NULL;
				}
			}
			if (!tops || !cJSON_AddItemToArray(content, e)) {
				cJSON_Delete(e);
				return -1;
			}
		}
		return content ? 0 : -1;
	}
	cJSON *toks = cJSON_AddArrayToObject(o, "tokens"), *tlp = cJSON_AddArrayToObject(o, "token_logprobs");
	cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
	if (!toks || !tlp || !tops || !offs)
		return -1;
	for (int32_t i = from; i < to; i++) {
		char raw[256];
		size_t n;
		cJSON *t = token_str(r, ids[i], raw, &n);
		if (!t || !cJSON_AddItemToArray(toks, t)) {
			cJSON_Delete(t);
			return -1;
		}
		cJSON_AddItemToArray(tlp, cJSON_CreateNumber(lp_val(lp[i].logprob)));
		cJSON_AddItemToArray(offs, cJSON_CreateNumber(r->text_offset));
		r->text_offset += (int32_t)n;
		cJSON *alt = cJSON_CreateObject();
		for (int32_t k = 0; alt && k < lp[i].n_top && k < r->top_n; k++) {
			char raw2[256];
			size_t n2;
			cJSON *s = token_str(r, lp[i].top_ids[k], raw2, &n2);
			if (s && !cJSON_GetObjectItemCaseSensitive(alt, s->valuestring))
				cJSON_AddNumberToObject(alt, s->valuestring, lp_val(lp[i].top_logprobs[k]));
			cJSON_Delete(s);
		}
		if (!alt || !cJSON_AddItemToArray(tops, alt)) {
			cJSON_Delete(alt);
			return -1;
		}
	}
	return 0;
}

static cJSON *head(struct serve_resp *r, const char *object)
{
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	cJSON_AddStringToObject(o, "id", r->id);
	cJSON_AddStringToObject(o, "object", object);
	cJSON_AddNumberToObject(o, "created", (double)r->created);
	cJSON_AddStringToObject(o, "model", r->model);
	return o;
}

static cJSON *usage(int32_t p, int32_t c)
{
	cJSON *u = cJSON_CreateObject();
	if (u) {
		cJSON_AddNumberToObject(u, "prompt_tokens", p);
		cJSON_AddNumberToObject(u, "completion_tokens", c);
		cJSON_AddNumberToObject(u, "total_tokens", p + c);
	}
	return u;
}

/* Print o (consumed) into out, optionally as an SSE event. */
static int emit(cJSON *o, bool sse, struct serve_buf *out)
{
	char *s = o ? cJSON_PrintUnformatted(o) : NULL;
	int rc = -1;
	cJSON_Delete(o);
	if (!s)
		return -1;
	if (sse)
		rc = serve_buf_printf(out, "data: %s\n\n", s);
	else
		rc = serve_buf_put(out, s, strlen(s));
	cJSON_free(s);
	return rc;
}

static cJSON *str_n(const char *s, size_t n)
{
	/* text never holds a NUL from the detokenizer path, but a piece could */
	char *tmp = malloc(n + 1);
	if (!tmp)
		return NULL;
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	cJSON *j = cJSON_CreateString(tmp);
	free(tmp);
	return j;
}

/* A response object of the given kind with one choice (index 0): *choice is
 * inside the returned object, which the caller owns. NULL when out of memory. */
static cJSON *with_choice(struct serve_resp *r, const char *object, cJSON **choice)
{
	cJSON *o = head(r, object);
	cJSON *choices = o ? cJSON_AddArrayToObject(o, "choices") : NULL;
	cJSON *c = cJSON_CreateObject();
	if (!choices || !c || !cJSON_AddItemToArray(choices, c)) {
		cJSON_Delete(c);
		cJSON_Delete(o);
		return NULL;
	}
	cJSON_AddNumberToObject(c, "index", r->index);
	*choice = c;
	return o;
}

int serve_resp_final(struct serve_resp *r, const char *text, size_t len, const char *finish,
		     const int32_t *ids, const struct qc_sample_result *lp, int32_t n_ids,
		     int32_t prompt_tokens, struct serve_buf *out)
{
	cJSON *c, *o = with_choice(r, r->chat ? "chat.completion" : "text_completion", &c);
	if (!o)
		return -1;
	if (r->chat) {
		cJSON *m = cJSON_AddObjectToObject(c, "message");
		if (!m) {
			cJSON_Delete(o);
			return -1;
		}
		cJSON_AddStringToObject(m, "role", "assistant");
		cJSON_AddItemToObject(m, "content", str_n(text ? text : "", len));
	} else {
		cJSON_AddItemToObject(c, "text", str_n(text ? text : "", len));
	}
	if (serve_resp_add_logprobs(r, c, ids, lp, 0, n_ids)) {
		cJSON_Delete(o);
		return -1;
	}
	if (finish)
		cJSON_AddStringToObject(c, "finish_reason", finish);
	else
		cJSON_AddNullToObject(c, "finish_reason");
	cJSON_AddItemToObject(o, "usage", usage(prompt_tokens, n_ids));
	return emit(o, false, out);
}

int serve_resp_final_n(struct serve_resp *r, const struct serve_choice *ch, int32_t n, int32_t prompt_tokens,
		       int32_t completion_tokens, struct serve_buf *out)
{
	cJSON *o = head(r, r->chat ? "chat.completion" : "text_completion");
	cJSON *choices = o ? cJSON_AddArrayToObject(o, "choices") : NULL;
	if (!choices) {
		cJSON_Delete(o);
		return -1;
	}
	for (int32_t i = 0; i < n; i++) {
		cJSON *c = cJSON_CreateObject();
		if (!c || !cJSON_AddItemToArray(choices, c)) {
			cJSON_Delete(c);
			cJSON_Delete(o);
			return -1;
		}
		cJSON_AddNumberToObject(c, "index", i);
		if (r->chat) {
			cJSON *m = cJSON_AddObjectToObject(c, "message");
			if (!m) {
				cJSON_Delete(o);
				return -1;
			}
			cJSON_AddStringToObject(m, "role", "assistant");
			cJSON_AddItemToObject(m, "content", str_n(ch[i].text ? ch[i].text : "", ch[i].len));
		} else {
			cJSON_AddItemToObject(c, "text", str_n(ch[i].text ? ch[i].text : "", ch[i].len));
		}
		r->text_offset = 0; /* each choice's text starts at 0 */
		if (serve_resp_add_logprobs(r, c, ch[i].ids, ch[i].lp, 0, ch[i].n_ids)) {
			cJSON_Delete(o);
			return -1;
		}
		if (ch[i].finish)
			cJSON_AddStringToObject(c, "finish_reason", ch[i].finish);
		else
			cJSON_AddNullToObject(c, "finish_reason");
	}
	cJSON_AddItemToObject(o, "usage", usage(prompt_tokens, completion_tokens));
	return emit(o, false, out);
}

int serve_resp_chunk(struct serve_resp *r, const char *text, size_t len, const char *finish, bool first,
		     bool include_usage, const int32_t *ids, const struct qc_sample_result *lp, int32_t from,
		     int32_t to, struct serve_buf *out)
{
	cJSON *c, *o = with_choice(r, r->chat ? "chat.completion.chunk" : "text_completion", &c);
	if (!o)
		return -1;
	if (r->chat) {
		cJSON *d = cJSON_AddObjectToObject(c, "delta");
		if (!d) {
			cJSON_Delete(o);
			return -1;
		}
		if (first)
			cJSON_AddStringToObject(d, "role", "assistant");
		if (text)
			cJSON_AddItemToObject(d, "content", str_n(text, len));
	} else {
		cJSON_AddItemToObject(c, "text", str_n(text ? text : "", text ? len : 0));
	}
	if (serve_resp_add_logprobs(r, c, ids, lp && to > from ? lp : NULL, from, to)) {
		cJSON_Delete(o);
		return -1;
	}
	if (finish)
		cJSON_AddStringToObject(c, "finish_reason", finish);
	else
		cJSON_AddNullToObject(c, "finish_reason");
	if (include_usage)
		cJSON_AddNullToObject(o, "usage");
	return emit(o, true, out);
}

int serve_resp_usage_chunk(struct serve_resp *r, int32_t prompt_tokens, int32_t completion_tokens,
			   struct serve_buf *out)
{
	cJSON *o = head(r, r->chat ? "chat.completion.chunk" : "text_completion");
	if (!o || !cJSON_AddArrayToObject(o, "choices")) {
		cJSON_Delete(o);
		return -1;
	}
	cJSON_AddItemToObject(o, "usage", usage(prompt_tokens, completion_tokens));
	return emit(o, true, out);
}

int serve_resp_error(int status, const char *msg, const char *param, struct serve_buf *out)
{
	const char *type = status == 401 ? "authentication_error"
			   : status == 404 ? "not_found_error"
			   : status == 429 ? "rate_limit_error"
			   : status >= 500 ? "server_error"
					   : "invalid_request_error";
	cJSON *o = cJSON_CreateObject();
	cJSON *e = o ? cJSON_AddObjectToObject(o, "error") : NULL;
	if (!e) {
		cJSON_Delete(o);
		return -1;
	}
	struct serve_buf clean = {0};
	if (serve_utf8_clean(msg, strlen(msg), &clean)) {
		cJSON_Delete(o);
		return -1;
	}
	cJSON_AddStringToObject(e, "message", clean.p ? clean.p : "");
	serve_buf_deinit(&clean);
	cJSON_AddStringToObject(e, "type", type);
	if (param && *param)
		cJSON_AddStringToObject(e, "param", param);
	else
		cJSON_AddNullToObject(e, "param");
	cJSON_AddNumberToObject(e, "code", status);
	return emit(o, false, out);
}
