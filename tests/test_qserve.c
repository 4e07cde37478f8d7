/* test_qserve.c — qserve's HTTP API as clients see it, on the CPU backend with
 * stories260K, through the curl CLI. Expected greedy output comes from llama.cpp's
 * reference ids (fixtures/reference/stories260K.json) and from qrun --json; the server's
 * ids are read back through logprobs with return_tokens_as_token_ids. Also: chat
 * template detection/rendering against the published formats, stop strings (plain ==
 * streamed), seeds, every 4xx path, /metrics, start-up errors, the model's own template.
 * Limits, connections and failing requests: test_qserve_limits.c; the official openai
 * Python client: test_qserve_openai.c.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "../tests/check.h"
#include "chat_template.h"
#include "qserve_util.h"

/* ---- unit checks: chat templates --------------------------------------------------------- */

static void test_chat_templates(void)
{
	/* fragments in the shape of the models' published tokenizer_config templates */
	static const struct { const char *tmpl; enum qc_chat_family f; } det[] = {
		{"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
		 "'<|im_end|>' + '\\n'}}{% endfor %}", QC_CHAT_CHATML},
		{"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + "
		 "'<|eot_id|>' }}", QC_CHAT_LLAMA3},
		{"{% if message['role'] == 'user' %}{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n' + "
		 "'<|assistant|>' + '\\n'}}{% endif %}", QC_CHAT_PHI3},
		{"{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}", QC_CHAT_GEMMA},
		{"{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}"
		 "{% elif message['role'] == 'system' %}{{ '<<SYS>>\\n' + message['content'] + '\\n<</SYS>>\\n\\n' }}",
		 QC_CHAT_LLAMA2},
		{"{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
		 "message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token}}{% endif %}",
		 QC_CHAT_MISTRAL},
		{"{{'<\xef\xbd\x9cUser\xef\xbd\x9c>' + message['content']}}{{'<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>'}}",
		 QC_CHAT_DEEPSEEK},
		{"{% for m in messages %}### {{ m.role }}: {{ m.content }}{% endfor %}", QC_CHAT_NONE},
		{"", QC_CHAT_NONE},
	};
	for (size_t i = 0; i < sizeof det / sizeof det[0]; i++)
		CHECK(qc_chat_detect(det[i].tmpl) == det[i].f, "template %zu detected as %s, want %s", i,
		      qc_chat_family_name(qc_chat_detect(det[i].tmpl)), qc_chat_family_name(det[i].f));
	CHECK(qc_chat_family_by_name("qwen") == QC_CHAT_CHATML, "qwen is chatml");
	CHECK(qc_chat_family_by_name("vicuna") == QC_CHAT_NONE, "unknown name accepted");

	const struct qc_chat_msg conv[] = {{"system", "S"}, {"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}};
	/* each expected string written out from the family's published prompt format */
	static const struct { enum qc_chat_family f; const char *want; } rend[] = {
		{QC_CHAT_CHATML, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\n"
				 "A1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n"},
		{QC_CHAT_LLAMA3, "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user"
				 "<|end_header_id|>\n\nU1<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA1"
				 "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU2<|eot_id|>"
				 "<|start_header_id|>assistant<|end_header_id|>\n\n"},
		{QC_CHAT_LLAMA2, "[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST] A1 </s><s>[INST] U2 [/INST]"},
		{QC_CHAT_GEMMA, "<start_of_turn>user\nS\n\nU1<end_of_turn>\n<start_of_turn>model\nA1<end_of_turn>\n"
				"<start_of_turn>user\nU2<end_of_turn>\n<start_of_turn>model\n"},
		{QC_CHAT_PHI3, "<|system|>\nS<|end|>\n<|user|>\nU1<|end|>\n<|assistant|>\nA1<|end|>\n<|user|>\nU2<|end|>\n"
			       "<|assistant|>\n"},
	};
	for (size_t i = 0; i < sizeof rend / sizeof rend[0]; i++) {
		char *out = NULL;
		size_t len = 0;
		struct qc_err err = {0};
		int rc = qc_chat_render(rend[i].f, conv, 4, 1 << 20, &out, &len, &err);
		CHECK(rc == 0 && out && !strcmp(out, rend[i].want) && len == strlen(rend[i].want),
		      "%s rendered as '%s'", qc_chat_family_name(rend[i].f), out ? out : err.msg);
		free(out);
	}
	/* refusals: unknown role, system not first, output cap */
	const struct qc_chat_msg badrole[] = {{"user", "x"}, {"tool", "y"}};
	const struct qc_chat_msg latesys[] = {{"user", "x"}, {"system", "y"}};
	char *out = NULL;
	size_t len;
	struct qc_err err = {0};
	CHECK(qc_chat_render(QC_CHAT_CHATML, badrole, 2, 1 << 20, &out, &len, &err) == QC_EINVAL &&
		      strstr(err.msg, "messages[1].role"), "unknown role: %s", err.msg);
	CHECK(qc_chat_render(QC_CHAT_CHATML, latesys, 2, 1 << 20, &out, &len, &err) == QC_EINVAL,
	      "late system message accepted");
	CHECK(qc_chat_render(QC_CHAT_CHATML, conv, 4, 16, &out, &len, &err) == QC_ERANGE && !out,
	      "cap ignored");
}

/* ---- the server --------------------------------------------------------------------------- */

#define GREEDY "\"prompt\":\"Once upon a time\",\"max_tokens\":32,\"temperature\":0,\"ignore_eos\":true"

static void test_main_server(const struct srv *s, const int32_t *ref, int n_ref, const char *ref_text)
{
	int st;
	char body[8192];
	const char *auth = "-H 'Authorization: Bearer sk-test'";

	char *b = http(s, "GET", "/health", NULL, NULL, &st);
	CHECK(st == 200 && strstr(b, "\"ok\""), "health %d %s", st, b);
	free(b);
	b = http(s, "GET", "/v1/models", NULL, auth, &st);
	CHECK(st == 200 && strstr(b, "\"id\":\"stories260K\""), "models %d %s", st, b);
	free(b);

	/* auth on /v1/ only */
	b = http(s, "POST", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1}", NULL, &st);
	CHECK(st == 401 && strstr(b, "authentication_error"), "no key: %d %s", st, b);
	free(b);
	b = http(s, "POST", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1}",
		 "-H 'Authorization: Bearer sk-wrong'", &st);
	CHECK(st == 401, "wrong key: %d", st);
	free(b);

	/* greedy: llama.cpp's ids, via logprobs tokens "token_id:N" */
	snprintf(body, sizeof body, "{" GREEDY ",\"logprobs\":0,\"return_tokens_as_token_ids\":true}");
	cJSON *j = post_json(s, "/v1/completions", body, auth, &st);
	const cJSON *toks = cJSON_GetObjectItem(
		cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "logprobs"), "tokens");
	int n_same = 0;
	for (int i = 0; i < n_ref && i < cJSON_GetArraySize(toks); i++) {
		char want[32];
		snprintf(want, sizeof want, "token_id:%d", ref[i]);
		n_same += !strcmp(cJSON_GetArrayItem(toks, i)->valuestring, want);
	}
	CHECK(st == 200 && n_ref == 32 && cJSON_GetArraySize(toks) == 32 && n_same == 32,
	      "greedy ids: %d of %d equal llama.cpp's (status %d)", n_same, n_ref, st);
	CHECK(jstr(j, "choices.0.text") && !strcmp(jstr(j, "choices.0.text"), ref_text), "greedy text '%s' != '%s'",
	      jstr(j, "choices.0.text") ? jstr(j, "choices.0.text") : "(none)", ref_text);
	CHECK(jnum(j, "usage", "prompt_tokens") == 5 && jnum(j, "usage", "completion_tokens") == 32 &&
		      jnum(j, "usage", "total_tokens") == 37, "usage");
	CHECK(jstr(j, "choices.0.finish_reason") && !strcmp(jstr(j, "choices.0.finish_reason"), "length"),
	      "finish_reason");
	CHECK(jstr(j, "object") && !strcmp(jstr(j, "object"), "text_completion"), "object");

	/* the same ids as qrun --json on the same model */
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "%s/qrun %s/gguf/stories260K.gguf -p 'Once upon a time' -n 32 --temp 0 --ignore-eos "
				  "--json --threads 1 2>/dev/null", bin(), check_fixtures());
	char *q = sh(cmd, &st);
	cJSON *qj = cJSON_Parse(q);
	const cJSON *qids = cJSON_GetObjectItem(qj, "ids");
	n_same = 0;
	for (int i = 0; i < cJSON_GetArraySize(qids) && i < cJSON_GetArraySize(toks); i++) {
		char want[32];
		snprintf(want, sizeof want, "token_id:%d", (int)cJSON_GetArrayItem(qids, i)->valuedouble);
		n_same += !strcmp(cJSON_GetArrayItem(toks, i)->valuestring, want);
	}
	CHECK(st == 0 && cJSON_GetArraySize(qids) == 32 && n_same == 32, "qrun ids: %d of 32 equal the server's",
	      n_same);
	cJSON_Delete(qj);
	free(q);
	cJSON_Delete(j);

	/* prompt as ids, the same continuation */
	j = post_json(s, "/v1/completions",
		      "{\"prompt\":[1,403,407,261,378],\"max_tokens\":32,\"temperature\":0,\"ignore_eos\":true}", auth, &st);
	CHECK(st == 200 && jstr(j, "choices.0.text") && !strcmp(jstr(j, "choices.0.text"), ref_text),
	      "prompt given as ids");
	cJSON_Delete(j);

	/* streamed: same text, [DONE] last, usage */
	struct sse ev;
	b = http(s, "POST", "/v1/completions",
		 "{" GREEDY ",\"stream\":true,\"stream_options\":{\"include_usage\":true}}", auth, &st);
	parse_sse(b, &ev);
	CHECK(st == 200 && !ev.error && ev.done_last && !strcmp(ev.text, ref_text), "stream: '%s' done %d", ev.text,
	      ev.done_last);
	CHECK(!strcmp(ev.finish, "length") && ev.usage_completion == 32, "stream finish '%s' usage %d", ev.finish,
	      ev.usage_completion);
	free(b);

	/* stop strings: text before the first match; plain and streamed agree;
	 * " gi" + "rl" style splits are what the holdback is for */
	/* mid-token starts ("ittle gi"), and a long near-miss that is withheld
	 * for several tokens and must then come out whole ("little girl named Bob") */
	static const char *const stops[] = {" girl", "Lily", ". She", "ZZZ", "ittle gi", "little girl named Bob"};
	for (size_t k = 0; k < sizeof stops / sizeof stops[0]; k++) {
		const char *at = strstr(ref_text, stops[k]);
		char want[4096];
		snprintf(want, sizeof want, "%.*s", at ? (int)(at - ref_text) : (int)strlen(ref_text), ref_text);
		snprintf(body, sizeof body, "{" GREEDY ",\"stop\":[\"%s\",\"qqqq\"]}", stops[k]);
		j = post_json(s, "/v1/completions", body, auth, &st);
		CHECK(st == 200 && jstr(j, "choices.0.text") && !strcmp(jstr(j, "choices.0.text"), want),
		      "stop '%s': '%s' want '%s'", stops[k], jstr(j, "choices.0.text") ? jstr(j, "choices.0.text") : "",
		      want);
		CHECK(jstr(j, "choices.0.finish_reason") &&
			      !strcmp(jstr(j, "choices.0.finish_reason"), at ? "stop" : "length"),
		      "stop '%s' finish", stops[k]);
		CHECK(!at || jnum(j, "usage", "completion_tokens") < 32, "stop '%s' did not end generation", stops[k]);
		cJSON_Delete(j);
		snprintf(body, sizeof body, "{" GREEDY ",\"stop\":\"%s\",\"stream\":true}", stops[k]);
		b = http(s, "POST", "/v1/completions", body, auth, &st);
		parse_sse(b, &ev);
		CHECK(st == 200 && ev.done_last && !strcmp(ev.text, want), "streamed stop '%s': '%s'", stops[k], ev.text);
		free(b);
	}

	/* seeds */
	const char *sampled = "{\"prompt\":\"Once upon a time\",\"max_tokens\":24,\"temperature\":1,\"ignore_eos\":true,"
			      "\"seed\":%d}";
	char t1[4096] = "", t2[4096] = "", t3[4096] = "";
	char *outs[] = {t1, t2, t3};
	const int seeds[] = {7, 7, 8};
	for (int k = 0; k < 3; k++) {
		snprintf(body, sizeof body, sampled, seeds[k]);
		j = post_json(s, "/v1/completions", body, auth, &st);
		snprintf(outs[k], 4096, "%s", jstr(j, "choices.0.text") ? jstr(j, "choices.0.text") : "");
		cJSON_Delete(j);
	}
	CHECK(t1[0] && !strcmp(t1, t2), "same seed differs: '%s' '%s'", t1, t2);
	CHECK(strcmp(t1, t3), "different seeds agree: '%s'", t1);

	/* chat: plain == streamed, role first */
	const char *chat = "{\"model\":\"stories260K\",\"messages\":[{\"role\":\"user\",\"content\":\"Tell a story.\"}],"
			   "\"max_tokens\":16,\"temperature\":0%s}";
	snprintf(body, sizeof body, chat, "");
	j = post_json(s, "/v1/chat/completions", body, auth, &st);
	const char *content = jstr(j, "choices.0.message.content");
	CHECK(st == 200 && content && jstr(j, "choices.0.message.role") &&
		      !strcmp(jstr(j, "object"), "chat.completion"), "chat %d", st);
	snprintf(body, sizeof body, chat, ",\"stream\":true");
	b = http(s, "POST", "/v1/chat/completions", body, auth, &st);
	parse_sse(b, &ev);
	CHECK(st == 200 && ev.done_last && content && !strcmp(ev.text, content), "streamed chat '%s' vs '%s'", ev.text,
	      content ? content : "");
	CHECK(strstr(b, "\"role\":\"assistant\"") && strstr(b, "chat.completion.chunk"), "chat chunks");
	free(b);
	cJSON_Delete(j);

	/* errors: each names its field */
	static const struct { const char *path, *body; int status; const char *param; } errs[] = {
		{"/v1/completions", "{\"prompt\":", 400, NULL},
		{"/v1/completions", "[1,2]", 400, NULL},
		{"/v1/completions", "{\"prompt\":\"a\"} {\"x\":1}", 400, NULL},
		{"/v1/completions", "{\"max_tokens\":4}", 400, "prompt"},
		{"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":\"4\"}", 400, "max_tokens"},
		{"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":0}", 400, "max_tokens"},
		{"/v1/completions", "{\"prompt\":\"a\",\"temperature\":3}", 400, "temperature"},
		{"/v1/completions", "{\"prompt\":\"a\",\"top_p\":\"x\"}", 400, "top_p"},
		{"/v1/completions", "{\"prompt\":\"a\",\"n\":17}", 400, "n"},
		{"/v1/completions", "{\"prompt\":\"a\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 400, "stop"},
		{"/v1/completions", "{\"prompt\":\"a\",\"stop\":7}", 400, "stop"},
		{"/v1/completions", "{\"prompt\":\"a\",\"logit_bias\":{\"5\":101}}", 400, "logit_bias"},
		{"/v1/completions", "{\"prompt\":\"a\",\"echo\":true,\"logprobs\":0}", 400, "echo"},
		{"/v1/completions", "{\"prompt\":\"a\",\"stream\":\"yes\"}", 400, "stream"},
		{"/v1/completions", "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":true}}", 400, "stream_options"},
		{"/v1/completions", "{\"prompt\":[1,2,99999]}", 400, "prompt"},
		{"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":2047}", 400, "max_tokens"},
		{"/v1/completions", "{\"prompt\":\"a\",\"model\":\"gpt-4\"}", 404, "model"},
		{"/v1/chat/completions", "{\"messages\":[]}", 400, "messages"},
		{"/v1/chat/completions", "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", 400, "messages[0].role"},
		{"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\"}]}", 400, "messages[0].content"},
		{"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{}]}", 400,
		 "tools[0].type"},
		{"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}", 400,
		 "tools"},
		{"/v1/completions", "{\"prompt\":\"a\",\"tools\":[]}", 400, "tools"},
		{"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", 400,
		 "top_logprobs"},
		/* U+0000 is refused, naming the field, not cut off (issue 15) */
		{"/v1/completions", "{\"prompt\":\"a\\u0000b\"}", 400, "prompt"},
		{"/v1/completions", "{\"prompt\":[\"a\\u0000b\"]}", 400, "prompt"},
		{"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\\u0000y\"}]}", 400,
		 "messages"},
		{"/v1/nothing", "{}", 404, NULL},
	};
	for (size_t k = 0; k < sizeof errs / sizeof errs[0]; k++) {
		j = post_json(s, errs[k].path, errs[k].body, auth, &st);
		const char *param = jstr(j, "error.param");
		CHECK(st == errs[k].status && jstr(j, "error.message") && jstr(j, "error.type") &&
			      (!errs[k].param || (param && !strcmp(param, errs[k].param))),
		      "%s %s: status %d param %s", errs[k].path, errs[k].body, st, param ? param : "(null)");
		cJSON_Delete(j);
	}
	/* an escaped backslash before "u0000" is text, not a NUL */
	j = post_json(s, "/v1/completions", "{\"prompt\":\"a\\\\u0000b\",\"max_tokens\":1}", auth, &st);
	CHECK(st == 200, "prompt with a literal \\u0000: %d", st);
	cJSON_Delete(j);
	/* integer limits print as integers */
	j = post_json(s, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":2000000000}", auth, &st);
	CHECK(st == 400 && jstr(j, "error.message") && strstr(jstr(j, "error.message"), "[1, 1073741824]") &&
		      !strstr(jstr(j, "error.message"), "e+"), "max_tokens limit: %d %s", st,
	      jstr(j, "error.message") ? jstr(j, "error.message") : "");
	cJSON_Delete(j);
	/* temperatures under the greedy threshold (1e-5), subnormal ones included,
	 * give llama.cpp's greedy text with finite logprobs (issue 15) */
	static const char *const tiny_t[] = {"1e-45", "1e-38", "9e-6"};
	for (size_t k = 0; k < sizeof tiny_t / sizeof tiny_t[0]; k++) {
		snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time\",\"max_tokens\":32,\"temperature\":%s,"
			 "\"ignore_eos\":true,\"logprobs\":1,\"seed\":%zu}", tiny_t[k], k + 3);
		j = post_json(s, "/v1/completions", body, auth, &st);
		const cJSON *lps = cJSON_GetObjectItem(
			cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "logprobs"),
			"token_logprobs");
		int n_fin = 0;
		for (int i = 0; i < cJSON_GetArraySize(lps); i++) {
			double v = cJSON_GetArrayItem(lps, i)->valuedouble;
			n_fin += v <= 0.0 && v > -100.0;
		}
		CHECK(st == 200 && jstr(j, "choices.0.text") && !strcmp(jstr(j, "choices.0.text"), ref_text) && n_fin == 32,
		      "temperature %s: status %d, %d finite logprobs, text '%s'", tiny_t[k], st, n_fin,
		      jstr(j, "choices.0.text") ? jstr(j, "choices.0.text") : "(none)");
		cJSON_Delete(j);
	}
	/* a prompt longer than the context (2048): 2100 ids */
	{
		size_t cap = 2100 * 4 + 64, len = 0;
		char *big = malloc(cap);
		len += (size_t)snprintf(big, cap, "{\"prompt\":[");
		for (int i = 0; i < 2100; i++)
			len += (size_t)snprintf(big + len, cap - len, "%s5", i ? "," : "");
		snprintf(big + len, cap - len, "]}");
		j = post_json(s, "/v1/completions", big, auth, &st);
		CHECK(st == 400 && jstr(j, "error.param") && !strcmp(jstr(j, "error.param"), "prompt") &&
			      strstr(jstr(j, "error.message"), "context"), "long prompt: %d", st);
		cJSON_Delete(j);
		free(big);
	}
	/* GET on a POST route; a body over --max-body (64 KiB); a 100 KB header */
	b = http(s, "GET", "/v1/completions", NULL, auth, &st);
	CHECK(st == 405, "GET completions: %d", st);
	free(b);
	{
		char *big = malloc(100000);
		memset(big, ' ', 99999);
		big[0] = '{';
		big[99998] = '}';
		big[99999] = '\0';
		b = http(s, "POST", "/v1/completions", big, auth, &st);
		CHECK(st == 413 && strstr(b, "larger than"), "big body: %d", st);
		free(b);
		char hpath[] = "/tmp/qc_qserve_hdr.XXXXXX", opt[64];
		int fd = mkstemp(hpath);
		FILE *hf = fd >= 0 ? fdopen(fd, "w") : NULL;
		if (hf) {
			fputs("X-Big: ", hf);
			for (int i = 0; i < 90000; i++)
				fputc('a', hf);
			fputc('\n', hf);
			fclose(hf);
		}
		snprintf(opt, sizeof opt, "-H @%s", hpath);
		b = http(s, "GET", "/health", NULL, opt, &st);
		CHECK(st == 413 || st == 431, "big header: %d", st);
		free(b);
		unlink(hpath);
		free(big);
	}
	b = http(s, "GET", "/health", NULL, NULL, &st);
	CHECK(st == 200, "alive after the refusals: %d", st);
	free(b);

	/* metrics: the families, and no block held once idle */
	b = http(s, "GET", "/metrics", NULL, NULL, &st);
	static const char *const fams[] = {
		"qserve_requests_total{endpoint=\"/v1/completions\",status=\"200\"}",
		"qserve_requests_total{endpoint=\"/v1/completions\",status=\"400\"}",
		"qserve_prompt_tokens_total", "qserve_generation_tokens_total", "qserve_num_requests_running",
		"qserve_num_requests_waiting", "qserve_kv_blocks_used", "qserve_kv_blocks_free", "qserve_preemptions_total",
		"qserve_time_to_first_token_seconds_bucket{le=\"+Inf\"}", "qserve_inter_token_latency_seconds_count"};
	for (size_t k = 0; k < sizeof fams / sizeof fams[0]; k++)
		CHECK(st == 200 && strstr(b, fams[k]), "metrics lack %s", fams[k]);
	free(b);
	CHECK(metric(s, "qserve_kv_blocks_used") == 0 && metric(s, "qserve_kv_blocks_free") > 0, "blocks held when idle");
}

static void test_startup_errors(void)
{
	static const struct { const char *args; int status; const char *msg; } cases[] = {
		{"%s/gguf/stories260K.gguf --chat-template vicuna", 1, "unknown"},
		{"%s/gguf/stories260K.gguf --port 70000", 1, "--port"},
		{"%s/gguf/no-such-model.gguf", 1, "no-such-model"},
		{"%s/gguf/stories260K.gguf --bogus", 1, "--bogus"},
		{"%s/gguf/stories260K.gguf --api-key ''", 2, "--api-key"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char args[1024], cmd[2048];
		snprintf(args, sizeof args, cases[i].args, check_fixtures());
		snprintf(cmd, sizeof cmd, "%s/qserve %s 2>&1", bin(), args);
		int st;
		char *out = sh(cmd, &st);
		CHECK(st == cases[i].status && strstr(out, cases[i].msg), "'%s': exit %d: %s", args, st, out);
		free(out);
	}
	/* --device cuda: serves where a GPU is, else exit 2 naming CUDA */
	char args[1024];
	struct srv s;
	snprintf(args, sizeof args, "%s/gguf/stories260K.gguf --device cuda", check_fixtures());
	if (srv_start(&s, args)) {
		int st;
		cJSON *j = post_json(&s, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":4}", NULL, &st);
		CHECK(st == 200 && jstr(j, "choices.0.text"), "cuda completion: %d", st);
		cJSON_Delete(j);
		CHECK(srv_stop(&s) == 0, "cuda exit status");
	} else {
		char *log = check_read_file(s.log, NULL);
		CHECK(s.status == 2 && log && strcasestr(log, "cuda"), "--device cuda: exit %d: %s", s.status,
		      log ? log : "");
		free(log);
		unlink(s.log);
	}
}

/* A copy of the fixture with tokenizer.chat_template = tmpl inserted as the first
 * KV. The entry is padded to 4096 bytes so the tensor data keeps its alignment
 * and every tensor offset (relative to the data section) stays valid. */
static bool write_with_template(const char *tmpl, char *out_path)
{
	char src[1024];
	snprintf(src, sizeof src, "%s/gguf/stories260K.gguf", check_fixtures());
	size_t n;
	unsigned char *g = (unsigned char *)check_read_file(src, &n);
	if (!g || n < 24)
		return false;
	const char *key = "tokenizer.chat_template";
	uint64_t klen = strlen(key), vlen = 4096 - (8 + klen + 4 + 8);
	size_t tl = strlen(tmpl);
	unsigned char *kv = calloc(1, 4096), *p = kv;
	memcpy(p, &klen, 8);
	memcpy(p + 8, key, klen);
	p += 8 + klen;
	uint32_t type = 8; /* GGUF string */
	memcpy(p, &type, 4);
	memcpy(p + 4, &vlen, 8);
	memset(p + 12, ' ', vlen);
	memcpy(p + 12, tmpl, tl < vlen ? tl : vlen);
	uint64_t n_kv;
	memcpy(&n_kv, g + 16, 8);
	n_kv++;
	memcpy(g + 16, &n_kv, 8);
	int fd = mkstemp(out_path);
	FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
	bool ok = f && fwrite(g, 1, 24, f) == 24 && fwrite(kv, 1, 4096, f) == 4096 &&
		  fwrite(g + 24, 1, n - 24, f) == n - 24;
	if (f)
		ok = !fclose(f) && ok;
	free(kv);
	free(g);
	return ok;
}

/* The model's own template runs through the Jinja interpreter; one it cannot run
 * falls back to the built-in family its markers name (logged), and one with no
 * family either stops the start-up; --chat-template-file overrides the model's. */
static void test_model_template(void)
{
	char known[] = "/tmp/qc_qserve_chatml.XXXXXX", unknown[] = "/tmp/qc_qserve_jinja.XXXXXX";
	char fallback[] = "/tmp/qc_qserve_fallback.XXXXXX", tfile[] = "/tmp/qc_qserve_tfile.XXXXXX";
	/* the key is padded with spaces: the final "-}}" strips them, as Jinja does */
	bool ok = write_with_template("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + "
				      "'<|im_end|>\\n'}}{% endfor %}{{ '' -}}", known) &&
		  write_with_template("{% macro m() %}{% endmacro %}### {{ messages }}", unknown) &&
		  write_with_template("{% macro m() %}{% endmacro %}<|im_start|>{{ messages }}", fallback);
	CHECK(ok, "cannot write the template GGUFs");
	int tfd = mkstemp(tfile);
	static const char ttext[] = "{% for m in messages %}### {{ m.role }}: {{ m.content }}\n{% endfor %}";
	CHECK(tfd >= 0 && write(tfd, ttext, sizeof ttext - 1) == (ssize_t)(sizeof ttext - 1), "template file");
	if (tfd >= 0)
		close(tfd);
	char cmd[2048];
	int st;
	snprintf(cmd, sizeof cmd, "%s/qserve %s --port 0 2>&1", bin(), unknown);
	char *out = sh(cmd, &st);
	CHECK(st == 1 && strstr(out, "cannot be used") && strstr(out, "macro") && strstr(out, "--chat-template-file"),
	      "unusable template: exit %d: %s", st, out);
	free(out);
	struct srv s;
	if (srv_start(&s, fallback)) {
		char *log = check_read_file(s.log, NULL);
		CHECK(log && strstr(log, "falling back to the built-in 'chatml'") && strstr(log, "macro") &&
			      strstr(log, "chat template chatml (fallback)"),
		      "fallback not logged: %s", log ? log : "");
		free(log);
		CHECK(srv_stop(&s) == 0, "exit status");
	} else {
		srv_failed(&s, "qserve on a model whose template falls back");
	}
	snprintf(cmd, sizeof cmd, "%s --chat-template-file %s", unknown, tfile);
	if (srv_start(&s, cmd)) {
		char *log = check_read_file(s.log, NULL);
		CHECK(log && strstr(log, "chat template jinja (file)"), "--chat-template-file: %s", log ? log : "");
		free(log);
		cJSON *j = post_json(&s, "/v1/chat/completions",
				     "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}", NULL, &st);
		CHECK(st == 200, "chat with --chat-template-file: %d", st);
		cJSON_Delete(j);
		CHECK(srv_stop(&s) == 0, "exit status");
	} else {
		srv_failed(&s, "qserve --chat-template-file");
	}
	if (srv_start(&s, known)) {
		char *log = check_read_file(s.log, NULL);
		CHECK(log && strstr(log, "chat template jinja (model)"), "model template not used: %s", log ? log : "");
		free(log);
		cJSON *j = post_json(&s, "/v1/chat/completions",
				     "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4}", NULL, &st);
		CHECK(st == 200 && jstr(j, "choices.0.message.content"), "chat with the detected template: %d", st);
		cJSON_Delete(j);
		CHECK(srv_stop(&s) == 0, "exit status");
	} else {
		srv_failed(&s, "qserve on a model with a chatml template");
	}
	/* no template at all: chat answers a 400 that says how to fix it (with a
	 * matmul worker thread, which must not take the SIGTERM meant for the drain) */
	snprintf(cmd, sizeof cmd, "%s/gguf/stories260K.gguf --threads 2", check_fixtures());
	if (!srv_start(&s, cmd)) {
		srv_failed(&s, "qserve without a chat template");
	} else {
		cJSON *j = post_json(&s, "/v1/chat/completions",
				     "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", NULL, &st);
		CHECK(st == 400 && jstr(j, "error.message") && strstr(jstr(j, "error.message"), "--chat-template"),
		      "chat without a template: %d", st);
		cJSON_Delete(j);
		CHECK(srv_stop(&s) == 0, "exit status");
	}
	unlink(known);
	unlink(unknown);
	unlink(fallback);
	unlink(tfile);
}

/* tools reach a template with a tools section (Qwen2.5's, via --chat-template-file):
 * accepted, and /tokenize counts the tool block; bad entries are a 400 naming the
 * entry; a template without a tools section refuses them instead of dropping them */
static void test_tools(void)
{
	static const char msgs[] = "\"messages\":[{\"role\":\"user\",\"content\":\"What is the weather?\"}]";
	static const char tools[] = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
				    "\"description\":\"Weather in a city\",\"parameters\":{\"type\":\"object\","
				    "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}]";
	char cmd[1024], body[8192];
	int st;
	struct srv s;
	snprintf(cmd, sizeof cmd, "%s/gguf/stories260K.gguf --chat-template-file %s", check_fixtures(),
		 "tests/data/chat/Qwen-Qwen2.5-7B-Instruct.jinja");
	if (!srv_start(&s, cmd)) {
		srv_failed(&s, "qserve with the Qwen2.5 template");
		return;
	}
	snprintf(body, sizeof body, "{%s,%s,\"tool_choice\":\"auto\",\"max_tokens\":2}", msgs, tools);
	cJSON *j = post_json(&s, "/v1/chat/completions", body, NULL, &st);
	CHECK(st == 200 && jstr(j, "choices.0.message.content"), "chat with tools: %d %s", st,
	      jstr(j, "error.message") ? jstr(j, "error.message") : "");
	cJSON_Delete(j);
	snprintf(body, sizeof body, "{%s}", msgs);
	j = post_json(&s, "/tokenize", body, NULL, &st);
	double plain = cJSON_IsNumber(cJSON_GetObjectItem(j, "count")) ? cJSON_GetObjectItem(j, "count")->valuedouble : -1;
	cJSON_Delete(j);
	snprintf(body, sizeof body, "{%s,%s}", msgs, tools);
	j = post_json(&s, "/tokenize", body, NULL, &st);
	double with = cJSON_IsNumber(cJSON_GetObjectItem(j, "count")) ? cJSON_GetObjectItem(j, "count")->valuedouble : -1;
	cJSON_Delete(j);
	CHECK(st == 200 && plain > 0 && with > plain + 20, "tokenize: %g tokens without tools, %g with", plain, with);
	static const struct { const char *extra, *param; } bad[] = {
		{"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"ok\"}},{\"type\":\"function\","
		 "\"function\":{\"name\":\"has space\"}}]", "tools[1].function.name"},
		{"\"tools\":[{\"type\":\"retrieval\"}]", "tools[0].type"},
		{"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]",
		 "tools[0].function.parameters"},
		{"\"tools\":[\"f\"]", "tools[0]"},
		{"\"tool_choice\":\"required\"", "tool_choice"},
	};
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		snprintf(body, sizeof body, "{%s,%s}", msgs, bad[k].extra);
		j = post_json(&s, "/v1/chat/completions", body, NULL, &st);
		const char *param = jstr(j, "error.param");
		CHECK(st == 400 && param && !strcmp(param, bad[k].param), "%s: %d param %s", bad[k].extra, st,
		      param ? param : "(null)");
		cJSON_Delete(j);
	}
	/* more than 128 tools */
	size_t at = (size_t)snprintf(body, sizeof body, "{%s,\"tools\":[", msgs);
	for (int k = 0; k < 129 && at + 64 < sizeof body; k++)
		at += (size_t)snprintf(body + at, sizeof body - at, "%s{\"type\":\"function\"}", k ? "," : "");
	snprintf(body + at, sizeof body - at, "]}");
	j = post_json(&s, "/v1/chat/completions", body, NULL, &st);
	CHECK(st == 400 && jstr(j, "error.param") && !strncmp(jstr(j, "error.param"), "tools", 5), "129 tools: %d", st);
	cJSON_Delete(j);
	CHECK(srv_stop(&s) == 0, "exit status");

	/* a template that never names tools: refused, not dropped */
	snprintf(cmd, sizeof cmd, "%s/gguf/stories260K.gguf --chat-template-file %s", check_fixtures(),
		 "tests/data/chat/smollm2-135m-instruct.jinja");
	if (!srv_start(&s, cmd)) {
		srv_failed(&s, "qserve with the SmolLM2 template");
		return;
	}
	snprintf(body, sizeof body, "{%s,%s}", msgs, tools);
	j = post_json(&s, "/v1/chat/completions", body, NULL, &st);
	CHECK(st == 400 && jstr(j, "error.param") && !strcmp(jstr(j, "error.param"), "tools") &&
		      strstr(jstr(j, "error.message"), "no tools section"),
	      "tools on a template without them: %d %s", st, jstr(j, "error.message") ? jstr(j, "error.message") : "");
	cJSON_Delete(j);
	CHECK(srv_stop(&s) == 0, "exit status");
}

int main(void)
{
	int32_t ref[64];
	char ref_text[4096];
	test_chat_templates();

	char path[1024];
	snprintf(path, sizeof path, "%s/gguf/stories260K.gguf", check_fixtures());
	if (!check_have_fixtures("test_qserve"))
		return check_report("test_qserve");
	if (access(path, R_OK)) {
		CHECK(0, "fixture %s missing", path);
		return check_report("test_qserve");
	}
	int n_ref = ref_ids(ref, ref_text, sizeof ref_text);
	CHECK(n_ref == 32 && strchr(ref_text, '\'') == NULL, "reference ids/text unusable (%d)", n_ref);
	test_startup_errors();

	struct srv s;
	char args[2048];
	snprintf(args, sizeof args, "%s --chat-template chatml --api-key sk-test --max-body 65536", path);
	if (!srv_start(&s, args)) {
		srv_failed(&s, "qserve");
		return check_report("test_qserve");
	}
	test_main_server(&s, ref, n_ref, ref_text);
	CHECK(srv_stop(&s) == 0, "qserve did not exit 0 on SIGTERM");
	test_model_template();
	test_tools();
	return check_report("test_qserve");
}
