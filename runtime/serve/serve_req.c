/* serve_req.c — request body validation (see serve_req.h).
 *
 * Owns: one small getter per JSON kind (each names its field on error), the
 * refused-field table, the vLLM/OpenAI extras (logit_bias, stop_token_ids,
 * min_tokens, echo; ids checked against the vocabulary later, by server.c),
 * and the prompt/messages forms: prompt is a string, a
 * one-element array of strings, an array of ids, or a one-element array of id
 * arrays; message content is a string or an array of {"type":"text"} parts
 * (joined); tools and tool_choice go through serve_tools.c, chat_template_kwargs
 * become template variables. Ranges follow the OpenAI API reference (temperature 0..2,
 * penalties -2..2, top_logprobs 0..20, at most 4 stop strings).
 * Non-goals: fields that only describe the caller (user, metadata, store, ...)
 * are accepted and ignored; so is any field not named here.
 */
#include "serve_req.h"
#include "serve_tools.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MESSAGES 4096
#define MAX_PROMPT_BYTES ((size_t)16 << 20)

struct ctx {
	char *param;
	size_t param_cap;
	struct qc_err *err;
};

static int bad(struct ctx *c, const char *field, const char *what)
{
	snprintf(c->param, c->param_cap, "%s", field);
	return qc_err_set(c->err, QC_EINVAL, NULL, NULL, -1, "%s: %s", field, what);
}

static const cJSON *get(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return v && !cJSON_IsNull(v) ? v : NULL;
}

/* Optional number in [lo, hi]; integer when want_int. 1 when present, 0 absent, <0 error. */
static int num(struct ctx *c, const cJSON *o, const char *k, double lo, double hi, bool want_int, double *out)
{
	const cJSON *v = get(o, k);
	char msg[128];
	if (!v)
		return 0;
	if (!cJSON_IsNumber(v))
		return bad(c, k, want_int ? "must be an integer" : "must be a number");
	double d = v->valuedouble;
	if (!isfinite(d) || (want_int && d != floor(d)))
		return bad(c, k, want_int ? "must be an integer" : "must be a finite number");
	if (d < lo || d > hi) {
		/* integer fields print as integers (1073741824, not 1.07374e+09) */
		if (want_int && fabs(d) < 9e15)
			snprintf(msg, sizeof msg, "%.0f is outside [%.0f, %.0f]", d, lo, hi);
		else if (want_int)
			snprintf(msg, sizeof msg, "%g is outside [%.0f, %.0f]", d, lo, hi);
		else
			snprintf(msg, sizeof msg, "%g is outside [%g, %g]", d, lo, hi);
		return bad(c, k, msg);
	}
	*out = d;
	return 1;
}

static int boolean(struct ctx *c, const cJSON *o, const char *k, bool *out)
{
	const cJSON *v = get(o, k);
	if (!v)
		return 0;
	if (!cJSON_IsBool(v))
		return bad(c, k, "must be a boolean");
	*out = cJSON_IsTrue(v);
	return 1;
}

/* cJSON decodes "\u0000" into a NUL byte inside a C string, so everything
 * after it would vanish without a word (issue 15: "a\u0000b" became "a").
 * NUL is refused instead: find the first \u0000 escape (or raw NUL byte) in
 * the JSON text and the top-level key it sits under. Escapes are skipped in
 * pairs, so "\\u0000" (a backslash, then text) is not a NUL. */
static bool find_nul(const char *body, size_t len, char *key, size_t key_cap)
{
	int depth = 0;
	bool in_str = false;
	size_t str_at = 0;
	key[0] = '\0';
	for (size_t i = 0; i < len; i++) {
		const char ch = body[i];
		if (ch == '\0')
			return true;
		if (in_str) {
			if (ch == '\\' && i + 1 < len) {
				if (body[i + 1] == 'u' && i + 5 < len && !memcmp(body + i + 2, "0000", 4))
					return true;
				i++;
			} else if (ch == '"') {
				in_str = false;
				size_t j = i + 1; /* a depth-1 string followed by ':' is a top-level key */
				while (j < len && (body[j] == ' ' || body[j] == '\t' || body[j] == '\r' || body[j] == '\n'))
					j++;
				if (depth == 1 && j < len && body[j] == ':')
					snprintf(key, key_cap, "%.*s", (int)(i - str_at), body + str_at);
			}
		} else if (ch == '"') {
			in_str = true;
			str_at = i + 1;
		} else if (ch == '{' || ch == '[') {
			depth++;
		} else if (ch == '}' || ch == ']') {
			depth--;
		}
	}
	return false;
}

static char *dup_n(const char *s, size_t n)
{
	char *d = malloc(n + 1);
	if (d) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

static int oom(struct ctx *c)
{
	return qc_err_set(c->err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
}

/* n (choices returned) and best_of (choices generated, the n with the highest
 * cumulative logprob returned): 1..SERVE_MAX_CHOICES, n <= best_of, and best_of
 * > n only without stream (OpenAI's and vLLM's rules). p->stream is parsed. */
static int parse_choices(struct ctx *c, const cJSON *o, struct serve_params *p)
{
	double d;
	int r;
	p->n_choices = p->best_of = 1;
	if ((r = num(c, o, "n", 1, SERVE_MAX_CHOICES, true, &d)) < 0)
		return r;
	if (r)
		p->n_choices = p->best_of = (int32_t)d;
	if ((r = num(c, o, "best_of", 1, SERVE_MAX_CHOICES, true, &d)) < 0)
		return r;
	if (!r)
		return QC_OK;
	if ((int32_t)d < p->n_choices)
		return bad(c, "best_of", "must be at least n");
	p->best_of = (int32_t)d;
	if (p->best_of > p->n_choices && p->stream)
		return bad(c, "best_of", "best_of > n cannot be streamed (set stream to false)");
	return QC_OK;
}

/* Fields whose presence (with a non-default value) would change the output. */
static int refuse_unsupported(struct ctx *c, const cJSON *o)
{
	static const char *const never[] = {"functions", "function_call",
					    "audio", "modalities", "prediction", "guided_json",
					    "guided_regex", "guided_choice", "guided_grammar"};
	for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
		if (get(o, never[i]))
			return bad(c, never[i], "not supported by qserve");
	const cJSON *v = get(o, "suffix");
	if (v && !(cJSON_IsString(v) && !v->valuestring[0]))
		return bad(c, "suffix", "not supported by qserve");
	v = get(o, "response_format");
	if (v) {
		const cJSON *t = cJSON_IsObject(v) ? get(v, "type") : NULL;
		if (!cJSON_IsString(t) || strcmp(t->valuestring, "text"))
			return bad(c, "response_format", "only {\"type\": \"text\"} is supported");
	}
	return 0;
}

static int parse_stop(struct ctx *c, const cJSON *o, struct serve_params *p)
{
	const cJSON *v = get(o, "stop");
	if (!v)
		return 0;
	const cJSON *one[1] = {v};
	const cJSON *it;
	int n = 0;
	if (cJSON_IsString(v)) {
		it = one[0];
	} else if (cJSON_IsArray(v)) {
		if (cJSON_GetArraySize(v) > SERVE_MAX_STOPS)
			return bad(c, "stop", "at most 4 stop strings");
		it = v->child;
	} else {
		return bad(c, "stop", "must be a string or an array of strings");
	}
	for (; it; it = cJSON_IsString(v) ? NULL : it->next) {
		if (!cJSON_IsString(it))
			return bad(c, "stop", "must be a string or an array of strings");
		size_t l = strlen(it->valuestring);
		if (l > SERVE_MAX_STOP_BYTES)
			return bad(c, "stop", "a stop string is longer than 256 bytes");
		if (!l)
			continue;
		if (!(p->stops[n] = dup_n(it->valuestring, l)))
			return oom(c);
		p->n_stops = ++n;
	}
	return 0;
}

/* "prompt" of a completion request. */
static int parse_prompt(struct ctx *c, const cJSON *o, struct serve_params *p)
{
	const cJSON *v = get(o, "prompt");
	if (!v)
		return bad(c, "prompt", "is required");
	if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && (cJSON_IsString(v->child) || cJSON_IsArray(v->child)))
		v = v->child;
	if (cJSON_IsString(v)) {
		size_t l = strlen(v->valuestring);
		if (l > MAX_PROMPT_BYTES)
			return bad(c, "prompt", "longer than 16 MiB");
		if (!(p->prompt = dup_n(v->valuestring, l)))
			return oom(c);
		p->prompt_len = l;
		return 0;
	}
	if (!cJSON_IsArray(v))
		return bad(c, "prompt", "must be a string, an array of token ids, or a one-element array of either");
	int n = cJSON_GetArraySize(v);
	if (n < 1)
		return bad(c, "prompt", "must not be empty");
	if (n > SERVE_MAX_PROMPT_IDS)
		return bad(c, "prompt", "too many token ids");
	if (!(p->prompt_ids = malloc(sizeof(int32_t) * (size_t)n)))
		return oom(c);
	int i = 0;
	for (const cJSON *it = v->child; it; it = it->next, i++) {
		if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0 ||
		    it->valuedouble > 2147483647.0)
			return bad(c, "prompt", "a prompt array must hold strings or non-negative integer token ids");
		p->prompt_ids[i] = (int32_t)it->valuedouble;
	}
	p->n_prompt_ids = n;
	return 0;
}

/* Text of a message's content: a string, or the concatenated text parts. */
static int content_text(struct ctx *c, const cJSON *v, int idx, struct serve_buf *b)
{
	char field[64];
	snprintf(field, sizeof field, "messages[%d].content", idx);
	if (!v)
		return bad(c, field, "is required");
	if (cJSON_IsString(v))
		return serve_buf_put(b, v->valuestring, strlen(v->valuestring)) ? oom(c) : 0;
	if (!cJSON_IsArray(v))
		return bad(c, field, "must be a string or an array of text parts");
	for (const cJSON *it = v->child; it; it = it->next) {
		const cJSON *t = cJSON_IsObject(it) ? get(it, "type") : NULL;
		const cJSON *x = cJSON_IsObject(it) ? get(it, "text") : NULL;
		if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") || !cJSON_IsString(x))
			return bad(c, field, "only {\"type\": \"text\", \"text\": ...} parts are supported");
		if (serve_buf_put(b, x->valuestring, strlen(x->valuestring)))
			return oom(c);
	}
	return 0;
}

/* chat_template_kwargs (vLLM's field): an object whose members the chat template
 * sees as variables, e.g. {"enable_thinking": false} for Qwen3; *out its JSON
 * text (NULL when absent). The names the renderer sets itself are refused: a
 * request cannot replace its own messages or tools through them. */
static int template_kwargs(struct ctx *c, const cJSON *v, char **out)
{
	static const char *const reserved[] = {"messages", "tools", "add_generation_prompt", "bos_token",
					       "eos_token", "documents"};
	*out = NULL;
	if (!v)
		return QC_OK;
	if (!cJSON_IsObject(v))
		return bad(c, "chat_template_kwargs", "must be an object");
	for (const cJSON *it = v->child; it; it = it->next)
		for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
			if (!strcmp(it->string, reserved[i])) {
				char field[96];
				snprintf(field, sizeof field, "chat_template_kwargs.%s", reserved[i]);
				return bad(c, field, "is set by the server (use the request's own field)");
			}
	if (!(*out = cJSON_PrintUnformatted(v)))
		return oom(c);
	return QC_OK;
}

static int parse_messages(struct ctx *c, const cJSON *o, const struct qc_chat_prompt *chat, struct serve_params *p)
{
	const cJSON *v = get(o, "messages");
	if (!v)
		return bad(c, "messages", "is required");
	if (!cJSON_IsArray(v) || !v->child)
		return bad(c, "messages", "must be a non-empty array");
	int n = cJSON_GetArraySize(v);
	if (n > MAX_MESSAGES)
		return bad(c, "messages", "more than 4096 messages");
	if (!qc_chat_prompt_enabled(chat))
		return bad(c, "messages", "this model has no chat template qserve knows; restart qserve with "
					  "--chat-template NAME or --chat-template-file PATH, or use /v1/completions");
	char *tools = NULL, *kwargs = NULL;
	int rc = serve_tools_parse(o, &tools, c->param, c->param_cap, c->err);
	if (rc)
		return rc;
	if ((rc = template_kwargs(c, get(o, "chat_template_kwargs"), &kwargs))) {
		free(tools);
		return rc;
	}
	struct qc_chat_msg *m = calloc((size_t)n, sizeof *m);
	struct serve_buf *texts = calloc((size_t)n, sizeof *texts);
	int i = 0;
	if (!m || !texts) {
		rc = oom(c);
		goto out;
	}
	for (const cJSON *it = v->child; it; it = it->next, i++) {
		char field[64];
		const cJSON *role = cJSON_IsObject(it) ? get(it, "role") : NULL;
		snprintf(field, sizeof field, "messages[%d].role", i);
		if (!cJSON_IsObject(it)) {
			snprintf(field, sizeof field, "messages[%d]", i);
			rc = bad(c, field, "must be an object");
			goto out;
		}
		if (!cJSON_IsString(role)) {
			rc = bad(c, field, "must be a string");
			goto out;
		}
		if ((rc = content_text(c, get(it, "content"), i, &texts[i])))
			goto out;
		if ((rc = serve_buf_put(&texts[i], "", 0))) {
			rc = oom(c);
			goto out;
		}
		m[i].role = role->valuestring;
		m[i].content = texts[i].p;
	}
	const struct qc_chat_extra extra = {.tools_json = tools, .kwargs_json = kwargs};
	if ((rc = qc_chat_prompt_render_ex(chat, m, (size_t)n, &extra, MAX_PROMPT_BYTES, &p->prompt, &p->prompt_len,
					   c->err))) {
		/* the renderer's message starts with the field it blames */
		const char *msg = c->err->msg, *colon = strchr(msg, ':');
		size_t l = colon ? (size_t)(colon - msg) : strlen("messages");
		snprintf(c->param, c->param_cap, "%.*s", (int)l, colon ? msg : "messages");
	}
out:
	for (int k = 0; texts && k < n; k++)
		serve_buf_deinit(&texts[k]);
	free(texts);
	free(m);
	free(tools);
	free(kwargs);
	return rc;
}

/* logit_bias: {"token id": bias}; keys are decimal ids (OpenAI sends them as
 * strings), values in [-100, 100]. Ids are checked against the vocabulary by
 * the server, which knows it. */
static int parse_logit_bias(struct ctx *c, const cJSON *o, struct qc_sampler_params *s)
{
	const cJSON *v = get(o, "logit_bias");
	char msg[160];
	if (!v)
		return 0;
	if (!cJSON_IsObject(v))
		return bad(c, "logit_bias", "must be an object mapping token ids to numbers");
	if (cJSON_GetArraySize(v) > QC_SAMPLER_MAX_BIAS)
		return bad(c, "logit_bias", "at most 1024 entries");
	for (const cJSON *it = v->child; it; it = it->next) {
		const char *k = it->string;
		char *end = NULL;
		long id = k && k[0] >= '0' && k[0] <= '9' ? strtol(k, &end, 10) : -1;
		if (id < 0 || id > INT32_MAX || !end || *end || strlen(k) > 10) {
			snprintf(msg, sizeof msg, "key \"%.32s\" is not a token id (a decimal integer >= 0)", k ? k : "");
			return bad(c, "logit_bias", msg);
		}
		if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || fabs(it->valuedouble) > 100.0) {
			snprintf(msg, sizeof msg, "the bias of token %ld must be a number in [-100, 100]", id);
			return bad(c, "logit_bias", msg);
		}
		for (int32_t i = 0; i < s->n_bias; i++)
			if (s->bias_ids[i] == (int32_t)id) {
				snprintf(msg, sizeof msg, "token %ld is given twice", id);
				return bad(c, "logit_bias", msg);
			}
		s->bias_ids[s->n_bias] = (int32_t)id;
		s->bias[s->n_bias++] = (float)it->valuedouble;
	}
	return 0;
}

/* stop_token_ids (vLLM): ids that end the request, reported as "stop". */
static int parse_stop_ids(struct ctx *c, const cJSON *o, struct serve_params *p)
{
	const cJSON *v = get(o, "stop_token_ids");
	if (!v)
		return 0;
	if (!cJSON_IsArray(v))
		return bad(c, "stop_token_ids", "must be an array of token ids");
	if (cJSON_GetArraySize(v) > SERVE_MAX_STOP_IDS)
		return bad(c, "stop_token_ids", "at most 16 ids");
	for (const cJSON *it = v->child; it; it = it->next) {
		if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0 ||
		    it->valuedouble > 2147483647.0)
			return bad(c, "stop_token_ids", "must hold integer token ids >= 0");
		p->stop_ids[p->n_stop_ids++] = (int32_t)it->valuedouble;
	}
	return 0;
}

/* echo (completions): the prompt text leads the output. Prompt logprobs would
 * need a scoring pass the engine does not run per request, so echo with
 * logprobs is refused rather than answered with the prompt's logprobs missing. */
static int parse_echo(struct ctx *c, const cJSON *o, struct serve_params *p)
{
	int r;
	if ((r = boolean(c, o, "echo", &p->echo)) < 0)
		return r;
	if (p->echo && p->chat)
		return bad(c, "echo", "echo is supported on /v1/completions only");
	if (p->echo && p->logprobs)
		return bad(c, "echo", "echo together with logprobs is not supported (qserve does not compute "
				      "prompt logprobs); drop one of them");
	return 0;
}

static int parse_logprobs(struct ctx *c, const cJSON *o, struct serve_params *p)
{
	double d;
	int r;
	if (p->chat) {
		if ((r = boolean(c, o, "logprobs", &p->logprobs)) < 0)
			return r;
		if ((r = num(c, o, "top_logprobs", 0, QC_SAMPLER_MAX_LOGPROBS, true, &d)) < 0)
			return r;
		if (r) {
			if (!p->logprobs)
				return bad(c, "top_logprobs", "needs logprobs = true");
			p->top_logprobs = (int32_t)d;
		}
		return 0;
	}
	/* completions: logprobs is the number of alternatives (0..5 in OpenAI; we allow 20) */
	if ((r = num(c, o, "logprobs", 0, QC_SAMPLER_MAX_LOGPROBS, true, &d)) < 0)
		return r;
	if (r) {
		p->logprobs = true;
		p->top_logprobs = (int32_t)d;
	}
	return 0;
}

int serve_req_parse(const char *body, size_t len, bool chat, const struct qc_chat_prompt *tmpl, struct serve_params *p,
		    char *param, size_t param_cap, struct qc_err *err)
{
	struct ctx c = {.param = param, .param_cap = param_cap, .err = err};
	cJSON *o;
	double d;
	int r, rc = 0;

	memset(p, 0, sizeof *p);
	p->chat = chat;
	qc_sampler_params_init(&p->sampling);
	p->sampling.penalty_last_n = -1; /* OpenAI penalties count the whole text so far */
	if (param_cap)
		param[0] = '\0';
	/* the parse end, not cJSON_GetErrorPtr: that one is a process-wide global */
	const char *end = NULL;
	o = cJSON_ParseWithLengthOpts(body, len, &end, false);
	size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
	while (o && at < len && (body[at] == ' ' || body[at] == '\t' || body[at] == '\r' || body[at] == '\n'))
		at++;
	if (!o || at != len) {
		cJSON_Delete(o);
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "request body is not valid JSON (at byte %zu)", at);
	}
	if (!cJSON_IsObject(o)) {
		rc = qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "request body must be a JSON object");
		goto out;
	}
	char nul_key[64];
	if (find_nul(body, len, nul_key, sizeof nul_key)) {
		rc = bad(&c, nul_key[0] ? nul_key : "body", "contains U+0000 (NUL), which qserve does not accept in text");
		goto out;
	}
	if ((rc = refuse_unsupported(&c, o)))
		goto out;
	const cJSON *model = get(o, "model");
	if (model && !cJSON_IsString(model)) {
		rc = bad(&c, "model", "must be a string");
		goto out;
	}
	if (model && !(p->model = dup_n(model->valuestring, strlen(model->valuestring)))) {
		rc = oom(&c);
		goto out;
	}
	/* tools feed a chat template; a raw completion has nowhere to put them */
	if (!chat && (get(o, "tools") || get(o, "tool_choice"))) {
		rc = bad(&c, get(o, "tools") ? "tools" : "tool_choice", "only /v1/chat/completions takes tools");
		goto out;
	}
	if (!chat && get(o, "chat_template_kwargs")) {
		rc = bad(&c, "chat_template_kwargs", "only /v1/chat/completions renders a chat template");
		goto out;
	}
	if ((rc = chat ? parse_messages(&c, o, tmpl, p) : parse_prompt(&c, o, p)))
		goto out;
	/* max_completion_tokens is the chat API's newer name; either is accepted */
	if ((r = num(&c, o, chat ? "max_completion_tokens" : "max_tokens", 1, 1 << 30, true, &d)) < 0 ||
	    (!r && chat && (r = num(&c, o, "max_tokens", 1, 1 << 30, true, &d)) < 0)) {
		rc = r;
		goto out;
	}
	if (r)
		p->max_tokens = (int32_t)d;
	struct qc_sampler_params *s = &p->sampling;
	if ((r = num(&c, o, "temperature", 0, 2, false, &d)) < 0)
		goto fail;
	if (r)
		s->temperature = (float)d;
	if ((r = num(&c, o, "top_p", 0, 1, false, &d)) < 0)
		goto fail;
	if (r && d <= 0) {
		rc = bad(&c, "top_p", "must be greater than 0");
		goto out;
	}
	if (r)
		s->top_p = (float)d;
	if ((r = num(&c, o, "top_k", -1, 1 << 24, true, &d)) < 0)
		goto fail;
	if (r)
		s->top_k = d < 0 ? 0 : (int32_t)d;
	if ((r = num(&c, o, "min_p", 0, 1, false, &d)) < 0)
		goto fail;
	if (r)
		s->min_p = (float)d;
	if ((r = num(&c, o, "presence_penalty", -2, 2, false, &d)) < 0)
		goto fail;
	if (r)
		s->presence_penalty = (float)d;
	if ((r = num(&c, o, "frequency_penalty", -2, 2, false, &d)) < 0)
		goto fail;
	if (r)
		s->frequency_penalty = (float)d;
	if ((r = num(&c, o, "repetition_penalty", 0.01, 100, false, &d)) < 0)
		goto fail;
	if (r)
		s->repeat_penalty = (float)d;
	if ((r = num(&c, o, "seed", -9007199254740991.0, 9007199254740991.0, true, &d)) < 0)
		goto fail;
	if (r) {
		s->seed = (uint64_t)(int64_t)d;
		p->seed_given = true;
	}
	if ((r = boolean(&c, o, "ignore_eos", &p->ignore_eos)) < 0 ||
	    (r = boolean(&c, o, "return_tokens_as_token_ids", &p->tokens_as_ids)) < 0)
		goto fail;
	if ((rc = parse_stop(&c, o, p)) || (rc = parse_logprobs(&c, o, p)) || (rc = parse_echo(&c, o, p)) ||
	    (rc = parse_stop_ids(&c, o, p)) || (rc = parse_logit_bias(&c, o, s)))
		goto out;
	/* vLLM's rule: min_tokens at most max_tokens (when that is given) */
	if ((r = num(&c, o, "min_tokens", 0, 1 << 30, true, &d)) < 0)
		goto fail;
	if (r && p->max_tokens && d > p->max_tokens) {
		rc = bad(&c, "min_tokens", "must not exceed max_tokens");
		goto out;
	}
	if (r)
		s->min_tokens = (int32_t)d;
	s->logprobs = p->logprobs;
	s->n_logprobs = p->top_logprobs;
	if ((r = boolean(&c, o, "stream", &p->stream)) < 0)
		goto fail;
	if ((rc = parse_choices(&c, o, p)))
		goto out;
	const cJSON *so = get(o, "stream_options");
	if (so) {
		if (!cJSON_IsObject(so)) {
			rc = bad(&c, "stream_options", "must be an object");
			goto out;
		}
		if (!p->stream) {
			rc = bad(&c, "stream_options", "only allowed when stream is true");
			goto out;
		}
		if ((r = boolean(&c, so, "include_usage", &p->include_usage)) < 0) {
			snprintf(param, param_cap, "stream_options.include_usage");
			goto fail;
		}
	}
	goto out;
fail:
	rc = r;
out:
	cJSON_Delete(o);
	return rc;
}

void serve_params_deinit(struct serve_params *p)
{
	free(p->prompt);
	free(p->prompt_ids);
	free(p->model);
	for (int i = 0; i < p->n_stops; i++)
		free(p->stops[i]);
	memset(p, 0, sizeof *p);
}
