/* test_qserve_fields.c — the OpenAI/vLLM request fields and endpoints of issue 17
 * (deliverable 3) on the CPU backend with stories260K, through the curl CLI:
 * logit_bias, stop_token_ids, min_tokens, response_format, echo, /tokenize,
 * /detokenize, /v1/models/{id}, and the flags --api-key-file / QSERVE_API_KEY,
 * --allow-origin, --log-requests, --version. Expected tokens
 * come from llama.cpp's greedy reference ids (fixtures/reference/stories260K.json)
 * and their pieces through the vocab, never from the server's own output; the
 * server's ids are read back through logprobs with return_tokens_as_token_ids.
 */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "../tests/check.h"
#include "qc_config.h"
#include "qserve_util.h"

#define AUTH "-H 'Authorization: Bearer sk-test'"
#define ONCE "\"prompt\":\"Once upon a time\",\"temperature\":0,\"ignore_eos\":true"

static const char *piece(const struct qc_vocab *v, int32_t id)
{
	static char buf[64];
	size_t k = qc_token_to_piece(v, id, buf, sizeof buf - 1, 0);
	buf[k < sizeof buf ? k : 0] = '\0';
	return buf;
}

/* The "token_id:N" tokens of choice 0's completions logprobs into ids; their count. */
static int lp_ids(const cJSON *j, int32_t *ids, int cap)
{
	const cJSON *toks = cJSON_GetObjectItem(
		cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "logprobs"), "tokens");
	int n = 0;
	for (const cJSON *it = toks ? toks->child : NULL; it && n < cap; it = it->next)
		if (cJSON_IsString(it) && !strncmp(it->valuestring, "token_id:", 9))
			ids[n++] = atoi(it->valuestring + 9);
	return n;
}

/* A 400 whose error names param ("": none) and whose message contains what. */
static void want_400(const struct srv *s, const char *path, const char *body, const char *param, const char *what)
{
	int st;
	cJSON *j = post_json(s, path, body, AUTH, &st);
	const char *p = jstr(j, "error.param"), *m = jstr(j, "error.message");
	CHECK(st == 400 && (param[0] ? p && !strcmp(p, param) : !p || !p[0]) && m && strstr(m, what), "%s %s: %d param '%s' message '%s'", path,
	      body, st, p ? p : "(none)", m ? m : "(none)");
	cJSON_Delete(j);
}

static void test_logit_bias(const struct srv *s, const struct qc_vocab *v, const int32_t *ref)
{
	char body[1024];
	int st;
	int32_t ids[64];

	/* -100 bans the reference's first token; greedy (no logprobs: the argmax path)
	   and greedy with logprobs agree on the text */
	snprintf(body, sizeof body, "{" ONCE ",\"max_tokens\":6,\"logit_bias\":{\"%d\":-100}}", ref[0]);
	cJSON *a = post_json(s, "/v1/completions", body, AUTH, &st);
	snprintf(body, sizeof body,
		 "{" ONCE ",\"max_tokens\":6,\"logit_bias\":{\"%d\":-100},\"logprobs\":0,\"return_tokens_as_token_ids\":true}",
		 ref[0]);
	cJSON *b = post_json(s, "/v1/completions", body, AUTH, &st);
	int n = lp_ids(b, ids, 64);
	bool seen = false;
	for (int i = 0; i < n; i++)
		seen |= ids[i] == ref[0];
	CHECK(st == 200 && n == 6 && !seen, "logit_bias -100 on %d: %d ids, banned id seen %d", ref[0], n, seen);
	CHECK(jstr(a, "choices.0.text") && jstr(b, "choices.0.text") &&
		      !strcmp(jstr(a, "choices.0.text"), jstr(b, "choices.0.text")),
	      "biased greedy text differs with and without logprobs: '%s' vs '%s'",
	      jstr(a, "choices.0.text") ? jstr(a, "choices.0.text") : "", jstr(b, "choices.0.text") ? jstr(b, "choices.0.text") : "");
	cJSON_Delete(a);
	cJSON_Delete(b);

	/* +100 on one token: it is chosen every time, greedy and sampled, on both endpoints */
	const int32_t x = ref[5];
	char want[256] = "";
	for (int i = 0; i < 3; i++)
		strncat(want, piece(v, x), sizeof want - strlen(want) - 1);
	snprintf(body, sizeof body, "{" ONCE ",\"max_tokens\":3,\"logit_bias\":{\"%d\":100}}", x);
	a = post_json(s, "/v1/completions", body, AUTH, &st);
	CHECK(st == 200 && jstr(a, "choices.0.text") && !strcmp(jstr(a, "choices.0.text"), want),
	      "logit_bias +100 on %d (greedy): '%s' want '%s'", x, jstr(a, "choices.0.text") ? jstr(a, "choices.0.text") : "", want);
	cJSON_Delete(a);
	snprintf(body, sizeof body,
		 "{\"prompt\":\"Once upon a time\",\"max_tokens\":3,\"temperature\":1,\"top_k\":5,\"seed\":3,\"ignore_eos\":true,"
		 "\"logit_bias\":{\"%d\":100}}", x);
	a = post_json(s, "/v1/completions", body, AUTH, &st);
	CHECK(st == 200 && jstr(a, "choices.0.text") && !strcmp(jstr(a, "choices.0.text"), want),
	      "logit_bias +100 on %d (top_k 5): '%s' want '%s'", x, jstr(a, "choices.0.text") ? jstr(a, "choices.0.text") : "", want);
	cJSON_Delete(a);
	snprintf(body, sizeof body,
		 "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3,\"temperature\":0,\"ignore_eos\":true,"
		 "\"logit_bias\":{\"%d\":100}}", x);
	a = post_json(s, "/v1/chat/completions", body, AUTH, &st);
	CHECK(st == 200 && jstr(a, "choices.0.message.content") && !strcmp(jstr(a, "choices.0.message.content"), want),
	      "chat logit_bias +100 on %d: %d '%s' want '%s'", x, st,
	      jstr(a, "choices.0.message.content") ? jstr(a, "choices.0.message.content") : "", want);
	cJSON_Delete(a);

	/* refusals name the field and the key */
	want_400(s, "/v1/completions", "{\"prompt\":\"a\",\"logit_bias\":{\"abc\":1}}", "logit_bias", "\"abc\"");
	want_400(s, "/v1/completions", "{\"prompt\":\"a\",\"logit_bias\":{\"-3\":1}}", "logit_bias", "\"-3\"");
	want_400(s, "/v1/completions", "{\"prompt\":\"a\",\"logit_bias\":{\"99999\":1}}", "logit_bias", "99999");
	want_400(s, "/v1/completions", "{\"prompt\":\"a\",\"logit_bias\":{\"5\":100.5}}", "logit_bias", "token 5");
	want_400(s, "/v1/completions", "{\"prompt\":\"a\",\"logit_bias\":{\"5\":\"1\"}}", "logit_bias", "token 5");
	want_400(s, "/v1/completions", "{\"prompt\":\"a\",\"logit_bias\":{\"5\":1,\"05\":2}}", "logit_bias", "twice");
	want_400(s, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logit_bias\":[1]}",
		 "logit_bias", "object");
	/* the empty map is no bias */
	a = post_json(s, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1,\"logit_bias\":{}}", AUTH, &st);
	CHECK(st == 200, "empty logit_bias: %d", st);
	cJSON_Delete(a);
}

static void test_stop_ids_min_tokens(const struct srv *s, const struct qc_vocab *v, const int32_t *ref)
{
	char body[1024];
	int st;
	int32_t ids[64];

	/* stop_token_ids: ends at the reference's 4th token (even with ignore_eos), not shown, counted */
	char want[256] = "";
	for (int i = 0; i < 3; i++)
		strncat(want, piece(v, ref[i]), sizeof want - strlen(want) - 1);
	snprintf(body, sizeof body, "{" ONCE ",\"max_tokens\":16,\"stop_token_ids\":[%d,%d]}", 9999 % 500, ref[3]);
	cJSON *a = post_json(s, "/v1/completions", body, AUTH, &st);
	bool early = false;
	for (int i = 0; i < 3; i++)
		early |= ref[i] == 9999 % 500 || ref[i] == ref[3];
	CHECK(!early, "test premise: the stop ids occur before position 3 of the reference");
	CHECK(st == 200 && jstr(a, "choices.0.text") && !strcmp(jstr(a, "choices.0.text"), want) &&
		      jstr(a, "choices.0.finish_reason") && !strcmp(jstr(a, "choices.0.finish_reason"), "stop") &&
		      jnum(a, "usage", "completion_tokens") == 4,
	      "stop_token_ids [%d]: %d '%s' want '%s', finish %s, %g tokens", ref[3], st,
	      jstr(a, "choices.0.text") ? jstr(a, "choices.0.text") : "", want,
	      jstr(a, "choices.0.finish_reason") ? jstr(a, "choices.0.finish_reason") : "", jnum(a, "usage", "completion_tokens"));
	cJSON_Delete(a);
	snprintf(body, sizeof body, "{" ONCE ",\"max_tokens\":16,\"stop_token_ids\":[%d],\"stream\":true}", ref[3]);
	char *b = http(s, "POST", "/v1/completions", body, AUTH, &st);
	struct sse ev;
	parse_sse(b, &ev);
	CHECK(st == 200 && ev.done_last && !strcmp(ev.text, want) && !strcmp(ev.finish, "stop"),
	      "streamed stop_token_ids: '%s' finish '%s'", ev.text, ev.finish);
	free(b);

	/* min_tokens 5 with the 4th reference token as a stop id: the first three are
	   the reference's, the 4th is held back (another token), at least 5 come */
	snprintf(body, sizeof body,
		 "{" ONCE ",\"max_tokens\":8,\"stop_token_ids\":[%d],\"min_tokens\":5,\"logprobs\":0,"
		 "\"return_tokens_as_token_ids\":true}", ref[3]);
	a = post_json(s, "/v1/completions", body, AUTH, &st);
	int n = lp_ids(a, ids, 64);
	bool held = n >= 5 && ids[0] == ref[0] && ids[1] == ref[1] && ids[2] == ref[2];
	for (int i = 0; held && i < 5; i++)
		held = ids[i] != ref[3];
	CHECK(st == 200 && held, "min_tokens 5: %d ids (%d %d %d %d ...), stop id %d", n, n > 0 ? ids[0] : -1,
	      n > 1 ? ids[1] : -1, n > 2 ? ids[2] : -1, n > 3 ? ids[3] : -1, ref[3]);
	cJSON_Delete(a);

	want_400(s, "/v1/completions", "{\"prompt\":\"a\",\"stop_token_ids\":[1,-2]}", "stop_token_ids", "token ids");
	want_400(s, "/v1/completions", "{\"prompt\":\"a\",\"stop_token_ids\":5}", "stop_token_ids", "array");
	want_400(s, "/v1/completions", "{\"prompt\":\"a\",\"stop_token_ids\":[123456]}", "stop_token_ids", "123456");
	want_400(s, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":2,\"min_tokens\":3}", "min_tokens", "max_tokens");
	want_400(s, "/v1/completions", "{\"prompt\":\"a\",\"min_tokens\":-1}", "min_tokens", "outside");
	want_400(s, "/v1/completions", "{\"prompt\":\"a\",\"ignore_eos\":1}", "ignore_eos", "boolean");
	want_400(s, "/v1/chat/completions",
		 "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"json_object\"}}",
		 "response_format", "text");
	a = post_json(s, "/v1/chat/completions",
		      "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":1,\"response_format\":{\"type\":\"text\"}}",
		      AUTH, &st);
	CHECK(st == 200, "response_format text: %d", st);
	cJSON_Delete(a);
}

static void test_echo(const struct srv *s, const char *ref_text)
{
	int st;
	char want[512];
	/* the reference text's first 4 tokens are not known as text here: compare with
	   the same request without echo */
	cJSON *plain = post_json(s, "/v1/completions", "{" ONCE ",\"max_tokens\":4}", AUTH, &st);
	const char *gen = jstr(plain, "choices.0.text");
	CHECK(st == 200 && gen && !strncmp(ref_text, gen, strlen(gen)) && gen[0], "plain: '%s'", gen ? gen : "");
	snprintf(want, sizeof want, "Once upon a time%s", gen ? gen : "");
	cJSON *a = post_json(s, "/v1/completions", "{" ONCE ",\"max_tokens\":4,\"echo\":true}", AUTH, &st);
	CHECK(st == 200 && jstr(a, "choices.0.text") && !strcmp(jstr(a, "choices.0.text"), want) &&
		      jnum(a, "usage", "completion_tokens") == 4,
	      "echo: '%s' want '%s'", jstr(a, "choices.0.text") ? jstr(a, "choices.0.text") : "", want);
	cJSON_Delete(a);
	/* the prompt as ids: the detokenized prompt, BOS dropped */
	a = post_json(s, "/v1/completions",
		      "{\"prompt\":[1,403,407,261,378],\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":true,\"echo\":true}",
		      AUTH, &st);
	CHECK(st == 200 && jstr(a, "choices.0.text") && !strcmp(jstr(a, "choices.0.text"), want),
	      "echo of ids: '%s' want '%s'", jstr(a, "choices.0.text") ? jstr(a, "choices.0.text") : "", want);
	cJSON_Delete(a);
	/* streamed: the first chunk leads with the prompt */
	char *b = http(s, "POST", "/v1/completions", "{" ONCE ",\"max_tokens\":4,\"echo\":true,\"stream\":true}", AUTH, &st);
	struct sse ev;
	parse_sse(b, &ev);
	CHECK(st == 200 && ev.done_last && !strcmp(ev.text, want), "streamed echo: '%s' want '%s'", ev.text, want);
	free(b);
	cJSON_Delete(plain);

	want_400(s, "/v1/completions", "{\"prompt\":\"a\",\"echo\":true,\"logprobs\":1}", "echo", "logprobs");
	want_400(s, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"echo\":true}", "echo",
		 "/v1/completions");
	want_400(s, "/v1/completions", "{\"prompt\":\"a\",\"echo\":\"yes\"}", "echo", "boolean");
}

/* /tokenize against the reference prompt ids (llama.cpp's), /detokenize back,
 * /v1/models/{id}. */
/* chat_template_kwargs: an object whose members the template sees (the rendering
 * itself is checked against transformers in test_chat_jinja); wrong shapes, the
 * renderer's own names and the completions endpoint are 400s naming the field */
static void test_template_kwargs(const struct srv *s)
{
	int st;
	cJSON *a = post_json(s, "/v1/chat/completions",
			     "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":2,"
			     "\"chat_template_kwargs\":{\"enable_thinking\":false,\"x\":[1,{\"y\":null}]}}",
			     AUTH, &st);
	CHECK(st == 200 && jstr(a, "choices.0.message.content"), "chat with chat_template_kwargs: %d", st);
	cJSON_Delete(a);
	want_400(s, "/v1/chat/completions",
		 "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"chat_template_kwargs\":[1]}",
		 "chat_template_kwargs", "must be an object");
	want_400(s, "/v1/chat/completions",
		 "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],"
		 "\"chat_template_kwargs\":{\"messages\":[]}}",
		 "chat_template_kwargs.messages", "set by the server");
	want_400(s, "/v1/completions", "{\"prompt\":\"a\",\"chat_template_kwargs\":{\"enable_thinking\":true}}",
		 "chat_template_kwargs", "only /v1/chat/completions");
}

static void test_tokenize(const struct srv *s)
{
	static const int32_t once[] = {1, 403, 407, 261, 378}; /* "Once upon a time", BOS first */
	int st;
	cJSON *j = post_json(s, "/tokenize", "{\"model\":\"stories260K\",\"prompt\":\"Once upon a time\"}", AUTH, &st);
	const cJSON *t = cJSON_GetObjectItem(j, "tokens");
	bool same = cJSON_GetArraySize(t) == 5;
	for (int i = 0; same && i < 5; i++)
		same = cJSON_GetArrayItem(t, i)->valuedouble == once[i];
	CHECK(st == 200 && same && jnum(j, "count", NULL) == -1, "tokenize: %d, tokens %s", st,
	      same ? "equal" : "differ");
	CHECK(cJSON_GetObjectItem(j, "count") && cJSON_GetObjectItem(j, "count")->valuedouble == 5 &&
		      cJSON_GetObjectItem(j, "max_model_len") && cJSON_GetObjectItem(j, "max_model_len")->valuedouble > 5,
	      "tokenize count / max_model_len");
	cJSON_Delete(j);
	j = post_json(s, "/tokenize", "{\"prompt\":\"Once upon a time\",\"add_special_tokens\":false}", AUTH, &st);
	t = cJSON_GetObjectItem(j, "tokens");
	CHECK(st == 200 && cJSON_GetArraySize(t) == 4 && cJSON_GetArrayItem(t, 0)->valuedouble == once[1],
	      "tokenize without BOS: %d, %d tokens", st, cJSON_GetArraySize(t));
	cJSON_Delete(j);
	/* messages: the chat template's rendering, as a chat request would feed */
	j = post_json(s, "/tokenize", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", AUTH, &st);
	const cJSON *cnt = cJSON_GetObjectItem(j, "count");
	CHECK(st == 200 && cJSON_IsNumber(cnt) && cnt->valuedouble > 5, "tokenize messages: %d", st);
	cJSON_Delete(j);

	j = post_json(s, "/detokenize", "{\"tokens\":[403,407,261,378]}", AUTH, &st);
	CHECK(st == 200 && jstr(j, "prompt") && !strcmp(jstr(j, "prompt"), "Once upon a time"), "detokenize: %d '%s'", st,
	      jstr(j, "prompt") ? jstr(j, "prompt") : "");
	cJSON_Delete(j);

	want_400(s, "/tokenize", "{\"prompt\":5}", "prompt", "string");
	want_400(s, "/tokenize", "{\"prompt\":\"a\",\"messages\":[]}", "prompt", "either");
	want_400(s, "/tokenize", "{\"prompt\":\"a\",\"add_special_tokens\":\"no\"}", "add_special_tokens", "boolean");
	want_400(s, "/tokenize", "{\"prompt\":\"a\\u0000b\"}", "prompt", "NUL");
	want_400(s, "/detokenize", "{\"tokens\":[1,99999]}", "tokens", "tokens[1]");
	want_400(s, "/detokenize", "{\"tokens\":\"abc\"}", "tokens", "array");
	want_400(s, "/detokenize", "[1]", "", "object");
	j = post_json(s, "/tokenize", "{\"model\":\"gpt-4\",\"prompt\":\"a\"}", AUTH, &st);
	CHECK(st == 404 && jstr(j, "error.param") && !strcmp(jstr(j, "error.param"), "model"), "tokenize wrong model: %d", st);
	cJSON_Delete(j);
	char *b = http(s, "POST", "/tokenize", "{\"prompt\":\"a\"}", NULL, &st);
	CHECK(st == 401, "tokenize without the key: %d", st);
	free(b);
	b = http(s, "GET", "/tokenize", NULL, AUTH, &st);
	CHECK(st == 405, "GET /tokenize: %d", st);
	free(b);

	b = http(s, "GET", "/v1/models/stories260K", NULL, AUTH, &st);
	j = cJSON_Parse(b);
	CHECK(st == 200 && jstr(j, "id") && !strcmp(jstr(j, "id"), "stories260K") && jstr(j, "object") &&
		      !strcmp(jstr(j, "object"), "model"), "GET /v1/models/stories260K: %d %s", st, b);
	cJSON_Delete(j);
	free(b);
	b = http(s, "GET", "/v1/models/gpt-4", NULL, AUTH, &st);
	j = cJSON_Parse(b);
	CHECK(st == 404 && jstr(j, "error.message") && strstr(jstr(j, "error.message"), "gpt-4") && jstr(j, "error.type"),
	      "GET /v1/models/gpt-4: %d %s", st, b);
	cJSON_Delete(j);
	free(b);
	b = http(s, "GET", "/v1/models/stories260K", NULL, NULL, &st);
	CHECK(st == 401, "GET /v1/models/{id} without the key: %d", st);
	free(b);
}

/* Write text to a fresh temp file; its path in path (cap 64). */
static void temp_file(char *path, const char *text)
{
	snprintf(path, 64, "/tmp/qc_qserve_key.XXXXXX");
	int fd = mkstemp(path);
	if (fd >= 0 && write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		CHECK(0, "short write to %s", path);
	if (fd >= 0)
		close(fd);
}

/* Headers and body of one curl -i call. */
static char *http_i(const struct srv *s, const char *method, const char *path, const char *extra)
{
	char cmd[1024];
	int st;
	snprintf(cmd, sizeof cmd, "curl -s -i --max-time 60 -X %s %s 'http://127.0.0.1:%d%s'", method, extra ? extra : "",
		 s->port, path);
	return sh(cmd, &st);
}

/* --api-key-file beats $QSERVE_API_KEY; $QSERVE_API_KEY alone works; bad key
 * sources stop the start-up with exit 2; --allow-origin answers preflights and
 * marks responses; --log-requests writes one line per request without the key;
 * --version. */
static void test_flags(const char *model)
{
	char kf[64], empty[64], two[64], args[2048];
	int st;
	struct srv s;
	temp_file(kf, "sk-file\n");
	temp_file(empty, " \n");
	temp_file(two, "sk-a\nsk-b\n");

	setenv("QSERVE_API_KEY", "sk-env", 1);
	snprintf(args, sizeof args, "%s --api-key-file %s --allow-origin https://example.org --log-requests", model, kf);
	if (srv_start(&s, args)) {
		char *b = http(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer sk-file'", &st);
		CHECK(st == 200, "key from the file: %d", st);
		free(b);
		b = http(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer sk-env'", &st);
		CHECK(st == 401, "--api-key-file must beat QSERVE_API_KEY: %d", st);
		free(b);
		cJSON *j = post_json(&s, "/v1/completions", "{" ONCE ",\"max_tokens\":2}", "-H 'Authorization: Bearer sk-file'",
				     &st);
		CHECK(st == 200, "completion: %d", st);
		cJSON_Delete(j);
		b = http(&s, "POST", "/v1/completions", "{" ONCE ",\"max_tokens\":3,\"stream\":true}",
			 "-H 'Authorization: Bearer sk-file'", &st);
		CHECK(st == 200, "streamed completion: %d", st);
		free(b);

		/* a preflight needs no key; every response carries the origin */
		b = http_i(&s, "OPTIONS", "/v1/chat/completions",
			   "-H 'Origin: https://example.org' -H 'Access-Control-Request-Method: POST'");
		CHECK(strstr(b, " 204") && strstr(b, "Access-Control-Allow-Origin: https://example.org") &&
			      strstr(b, "Access-Control-Allow-Headers: Authorization, Content-Type") &&
			      strstr(b, "Access-Control-Allow-Methods:"), "preflight:\n%s", b);
		free(b);
		b = http_i(&s, "GET", "/v1/models", "-H 'Origin: https://example.org'");
		CHECK(strstr(b, " 401") && strstr(b, "Access-Control-Allow-Origin: https://example.org"),
		      "a 401 without the CORS header:\n%s", b);
		free(b);
		b = http_i(&s, "GET", "/health", NULL);
		CHECK(strstr(b, " 200") && strstr(b, "Access-Control-Allow-Origin: https://example.org"), "health:\n%s", b);
		free(b);

		char *log = check_read_file(s.log, NULL);
		CHECK(log && strstr(log, "qserve: POST /v1/completions 200 prompt_tokens=5 completion_tokens=2 ms=") &&
			      strstr(log, "qserve: POST /v1/completions 200 prompt_tokens=5 completion_tokens=3 ms=") &&
			      strstr(log, "qserve: GET /v1/models 401 prompt_tokens=0 completion_tokens=0 ms=") &&
			      strstr(log, "qserve: OPTIONS /v1/chat/completions 204 ") && strstr(log, "API key from --api-key-file"),
		      "access log:\n%s", log ? log : "");
		CHECK(log && !strstr(log, "sk-file") && !strstr(log, "sk-env"), "the key appears in the log");
		free(log);
		CHECK(srv_stop(&s) == 0, "qserve did not exit 0 on SIGTERM (a sanitizer report?)");
	} else {
		srv_failed(&s, "qserve --api-key-file");
	}

	/* the environment alone; no --allow-origin: no CORS header, OPTIONS is 405 */
	snprintf(args, sizeof args, "%s", model);
	if (srv_start(&s, args)) {
		char *b = http(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer sk-env'", &st);
		CHECK(st == 200, "key from QSERVE_API_KEY: %d", st);
		free(b);
		b = http(&s, "GET", "/v1/models", NULL, NULL, &st);
		CHECK(st == 401, "QSERVE_API_KEY set, no key sent: %d", st);
		free(b);
		b = http_i(&s, "OPTIONS", "/v1/models", "-H 'Authorization: Bearer sk-env'");
		CHECK(strstr(b, " 405") && !strstr(b, "Access-Control"), "OPTIONS without --allow-origin:\n%s", b);
		free(b);
		char *log = check_read_file(s.log, NULL);
		CHECK(log && !strstr(log, "prompt_tokens=") && strstr(log, "API key from QSERVE_API_KEY"),
		      "no --log-requests, yet an access log, or no key source:\n%s", log ? log : "");
		free(log);
		CHECK(srv_stop(&s) == 0, "qserve did not exit 0 on SIGTERM (a sanitizer report?)");
	} else {
		srv_failed(&s, "qserve with QSERVE_API_KEY");
	}

	/* refused key sources: exit 2 before the model is loaded, the key never printed */
	struct { const char *env, *flags, *says; } bad[] = {
		{"sk-env", "--api-key-file /nonexistent/key", "/nonexistent/key"},
		{NULL, "--api-key-file EMPTY", "empty"},
		{NULL, "--api-key-file TWO", "more than one line"},
		{NULL, "--api-key sk-x --api-key-file KF", "only one"},
		{"", "", "QSERVE_API_KEY is empty"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char flags[256], cmd[2048];
		snprintf(flags, sizeof flags, "%s", bad[i].flags);
		char *at;
		if ((at = strstr(flags, "EMPTY")))
			snprintf(at, sizeof flags - (size_t)(at - flags), "%s", empty);
		else if ((at = strstr(flags, "TWO")))
			snprintf(at, sizeof flags - (size_t)(at - flags), "%s", two);
		else if ((at = strstr(flags, "KF")))
			snprintf(at, sizeof flags - (size_t)(at - flags), "%s", kf);
		if (bad[i].env)
			setenv("QSERVE_API_KEY", bad[i].env, 1);
		else
			unsetenv("QSERVE_API_KEY");
		snprintf(cmd, sizeof cmd, "%s/qserve %s %s --port 0 2>&1; echo \"exit=$?\"", bin(), model, flags);
		char *out = sh(cmd, &st);
		CHECK(strstr(out, "exit=2") && strstr(out, bad[i].says) && !strstr(out, "sk-a") && !strstr(out, "listening"),
		      "qserve %s (QSERVE_API_KEY %s): %s", flags, bad[i].env ? bad[i].env : "unset", out);
		free(out);
	}
	unsetenv("QSERVE_API_KEY");
	unlink(kf);
	unlink(empty);
	unlink(two);

	char cmd[1024];
	snprintf(cmd, sizeof cmd, "%s/qserve --version && %s/qrun --version", bin(), bin());
	char *out = sh(cmd, &st);
	CHECK(st == 0 && strstr(out, "qserve " QC_VERSION "\n") && strstr(out, "qrun " QC_VERSION "\n"), "--version: %s", out);
	free(out);
}

int main(void)
{
	int32_t ref[64];
	char ref_text[4096], path[1024];
	snprintf(path, sizeof path, "%s/gguf/stories260K.gguf", check_fixtures());
	if (!check_have_fixtures("test_qserve_fields"))
		return check_report("test_qserve_fields");
	int n_ref = ref_ids(ref, ref_text, sizeof ref_text);
	struct qc_gguf *gg = NULL;
	struct qc_vocab *v = NULL;
	struct qc_err err = {0};
	if (n_ref != 32 || qc_gguf_open(path, &gg, &err) || qc_vocab_from_gguf(gg, &v, &err)) {
		CHECK(0, "fixture %s or its reference unusable (%d ids): %s", path, n_ref, err.msg);
		qc_gguf_close(gg);
		return check_report("test_qserve_fields");
	}
	struct srv s;
	char args[2048];
	snprintf(args, sizeof args, "%s --chat-template chatml --api-key sk-test", path);
	if (srv_start(&s, args)) {
		test_logit_bias(&s, v, ref);
		test_stop_ids_min_tokens(&s, v, ref);
		test_echo(&s, ref_text);
		test_tokenize(&s);
		test_template_kwargs(&s);
		CHECK(srv_stop(&s) == 0, "qserve did not exit 0 on SIGTERM (a sanitizer report?)");
	} else {
		srv_failed(&s, "qserve");
	}
	test_flags(path);
	qc_vocab_free(v);
	qc_gguf_close(gg);
	return check_report("test_qserve_fields");
}
