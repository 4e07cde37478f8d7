/* test_chat_jinja.c — the Jinja chat-template interpreter against transformers.
 *
 * tests/data/chat/expected.json (tests/gen/make_chat_template_ref.py) holds, for
 * each real template in tests/data/chat (Llama 3.1/3.2, Qwen2.5, Qwen3, Gemma 2/3, Phi-3.5,
 * SmolLM2, DeepSeek R1/V2, Mistral v1/v3/v7/Nemo, ...) and for features.jinja,
 * transformers' render of each conversation with add_generation_prompt on and
 * off, or the message its raise_exception gave. Every render here must match
 * byte for byte. Then: error paths (raise_exception, each sandbox limit,
 * malformed templates naming line and column, undefined attribute access) and a
 * deliberately wrong expectation that must fail the comparator.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "chat_prompt.h"
#include "jinja.h"

#define DIR "tests/data/chat/"

static int64_t now_unix;

static struct qc_chat_msg *conv_msgs(const cJSON *convs, const char *name, size_t *n)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(convs, name);
	*n = (size_t)cJSON_GetArraySize(a);
	struct qc_chat_msg *m = calloc(*n + 1, sizeof *m);
	size_t i = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, a)
	{
		m[i].role = cJSON_GetObjectItemCaseSensitive(it, "role")->valuestring;
		m[i].content = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
		i++;
	}
	return m;
}

/* render src for one case; the result or the error message in *got (malloc'd) */
/* chat_template_kwargs (JSON text) of the oracle case being rendered, or NULL */
static const char *case_kwargs;

static int render(const char *src, size_t len, const struct qc_jinja_limits *lim, const struct qc_chat_msg *m,
		  size_t n, bool agp, const char *bos, const char *eos, const char *tools, char **got,
		  struct qc_err *err)
{
	struct qc_jinja *t = NULL;
	struct qc_jinja_chat ch = {.msgs = m, .n_msgs = n, .add_generation_prompt = agp, .bos_token = bos,
				   .eos_token = eos, .now_unix = now_unix, .tools_json = tools,
				   .kwargs_json = case_kwargs};
	size_t out_len;
	*got = NULL;
	int rc = qc_jinja_parse(src, len, lim, &t, err);
	if (!rc)
		rc = qc_jinja_render(t, &ch, got, &out_len, err);
	qc_jinja_free(t);
	return rc;
}

/* first differing byte, for a readable failure */
static size_t diff_at(const char *a, const char *b)
{
	size_t i = 0;
	while (a[i] && a[i] == b[i])
		i++;
	return i;
}

static void test_oracle(void)
{
	size_t len;
	char *js = check_read_file(DIR "expected.json", &len);
	CHECK(js != NULL, "cannot read " DIR "expected.json");
	if (!js)
		return;
	cJSON *root = cJSON_Parse(js);
	CHECK(root != NULL, "expected.json does not parse");
	const cJSON *convs = cJSON_GetObjectItemCaseSensitive(root, "conversations"), *tmpl;
	now_unix = (int64_t)cJSON_GetObjectItemCaseSensitive(root, "now_unix")->valuedouble;
	/* the tools list goes to the renderer as JSON text, as qserve passes a request's tools */
	char *tools = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(root, "tools"));
	CHECK(tools != NULL, "expected.json has no tools list");
	int files = 0, identical = 0, tool_cases = 0, kwargs_cases = 0;
	cJSON_ArrayForEach(tmpl, cJSON_GetObjectItemCaseSensitive(root, "templates"))
	{
		const char *file = cJSON_GetObjectItemCaseSensitive(tmpl, "file")->valuestring;
		const char *bos = cJSON_GetObjectItemCaseSensitive(tmpl, "bos_token")->valuestring;
		const char *eos = cJSON_GetObjectItemCaseSensitive(tmpl, "eos_token")->valuestring;
		char path[512];
		snprintf(path, sizeof path, DIR "%s", file);
		size_t slen;
		char *src = check_read_file(path, &slen);
		CHECK(src != NULL, "cannot read %s", path);
		if (!src)
			continue;
		const cJSON *cs;
		int ok = 0, all = 0;
		cJSON_ArrayForEach(cs, cJSON_GetObjectItemCaseSensitive(tmpl, "cases"))
		{
			const char *conv = cJSON_GetObjectItemCaseSensitive(cs, "conv")->valuestring;
			bool agp = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cs, "add_generation_prompt"));
			bool with_tools = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cs, "tools"));
			const cJSON *want = cJSON_GetObjectItemCaseSensitive(cs, "out");
			const cJSON *werr = cJSON_GetObjectItemCaseSensitive(cs, "error");
			size_t n;
			struct qc_chat_msg *m = conv_msgs(convs, conv, &n);
			struct qc_err err = {0};
			char *got;
			/* chat_template_kwargs as qserve passes them: the object's JSON text */
			const cJSON *kw = cJSON_GetObjectItemCaseSensitive(cs, "kwargs");
			char *kwj = kw ? cJSON_PrintUnformatted(kw) : NULL;
			case_kwargs = kwj;
			int rc = render(src, slen, NULL, m, n, agp, bos, eos, with_tools ? tools : NULL, &got, &err);
			case_kwargs = NULL;
			free(kwj);
			all++;
			tool_cases += with_tools;
			kwargs_cases += kw != NULL;
			if (want) {
				bool same = !rc && !strcmp(got, want->valuestring);
				CHECK(same, "%s [%s%s%s, agp=%d]: %s", file, conv, with_tools ? "+tools" : "",
				      kw ? "+kwargs" : "", agp, rc ? err.msg : "output differs from transformers");
				if (!same && !rc) {
					size_t at = diff_at(got, want->valuestring);
					fprintf(stderr, "  at byte %zu:\n  got:  '%.80s'\n  want: '%.80s'\n", at, got + at,
						want->valuestring + at);
				}
				ok += same;
			} else {
				char expect[600];
				snprintf(expect, sizeof expect, "chat template raised: %s", werr->valuestring);
				bool same = rc == QC_EINVAL && !strcmp(err.msg, expect);
				CHECK(same, "%s [%s, agp=%d]: want the error '%s', got rc %d '%s'", file, conv, agp,
				      werr->valuestring, rc, rc ? err.msg : got);
				ok += same;
			}
			free(got);
			free(m);
		}
		files++;
		identical += ok == all;
		printf("  %-50s %d/%d identical\n", file, ok, all);
		free(src);
	}
	CHECK(files >= 15, "only %d templates in expected.json", files);
	CHECK(tool_cases >= 12, "only %d cases with tools in expected.json", tool_cases);
	CHECK(kwargs_cases >= 6, "only %d cases with chat_template_kwargs in expected.json", kwargs_cases);
	free(tools);
	printf("  %d of %d templates byte-identical in every case\n", identical, files);
	cJSON_Delete(root);
	free(js);
}

static int render_str(const char *src, const struct qc_jinja_limits *lim, char **got, struct qc_err *err)
{
	struct qc_chat_msg m[] = {{"system", "S"}, {"user", "U"}};
	return render(src, strlen(src), lim, m, 2, true, "<s>", "</s>", NULL, got, err);
}

static void test_errors(void)
{
	struct qc_err err = {0};
	char *got = NULL;
	struct qc_jinja_limits lim;

	CHECK(render_str("{{ raise_exception('no system role') }}", NULL, &got, &err) == QC_EINVAL &&
		      strstr(err.msg, "no system role"),
	      "raise_exception: %s", err.msg);
	free(got);

	/* tools: bad JSON is an error naming tools; a good list reaches the template as values */
	struct qc_chat_msg um[] = {{"user", "U"}};
	const char *tsrc = "{% for t in tools %}{{ t.function.name }}:{{ t.n + 1 }}:{{ t.x is none }};{% endfor %}";
	memset(&err, 0, sizeof err);
	CHECK(render(tsrc, strlen(tsrc), NULL, um, 1, true, "", "", "[{\"function\":", &got, &err) == QC_EINVAL &&
		      strstr(err.msg, "tools"),
	      "bad tools JSON: %s", err.msg);
	free(got);
	memset(&err, 0, sizeof err);
	int trc = render(tsrc, strlen(tsrc), NULL, um, 1, true, "", "",
			 "[{\"function\":{\"name\":\"f\"},\"n\":41,\"x\":null}]", &got, &err);
	CHECK(trc == QC_OK && !strcmp(got, "f:42:True;"), "tools values: rc %d '%s'", trc, trc ? err.msg : got);
	free(got);

	/* malformed templates name line and column */
	static const struct {
		const char *src, *where;
	} bad[] = {
		{"{% if x %}open", "line 1 col 1"},
		{"ok\n{{ 1 + }}", "line 2 col 8"},
		{"a\nb\n  {% for %}{% endfor %}", "line 3 col 10"},
		{"{{ 'unterminated }}", "line 1 col 4"},
		{"{% endif %}", "line 1 col 4"},
		{"{{ x", "line 1 col 1"},
		{"{% macro m() %}{% endmacro %}", "line 1 col 4"},
		{"{{ a ? b }}", "line 1 col 6"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		memset(&err, 0, sizeof err);
		int rc = render_str(bad[i].src, NULL, &got, &err);
		CHECK(rc == QC_EFORMAT && strstr(err.msg, bad[i].where), "'%s': rc %d '%s' (want %s)", bad[i].src, rc,
		      err.msg, bad[i].where);
		free(got);
	}

	/* runtime errors: attribute of an undefined name, unknown filter, type error */
	static const char *const rt[] = {"{{ nope.attr }}", "{{ 'x' | nofilter }}", "{{ 1 + 'a' }}",
					 "{% for x in 5 %}{% endfor %}", "{{ 'a'.nomethod() }}", "{{ 1 // 0 }}"};
	for (size_t i = 0; i < sizeof rt / sizeof rt[0]; i++) {
		memset(&err, 0, sizeof err);
		int rc = render_str(rt[i], NULL, &got, &err);
		CHECK(rc == QC_EFORMAT && strstr(err.msg, "line 1 col"), "'%s': rc %d '%s'", rt[i], rc, err.msg);
		free(got);
	}

	/* each limit is an error, never a crash */
	qc_jinja_limits_default(&lim);
	lim.max_output_bytes = 100;
	CHECK(render_str("{% for i in range(50) %}0123456789{% endfor %}", &lim, &got, &err) == QC_ERANGE &&
		      strstr(err.msg, "longer than 100 bytes"),
	      "output limit: %s", err.msg);
	free(got);
	qc_jinja_limits_default(&lim);
	lim.max_loop_iters = 30;
	CHECK(render_str("{% for i in range(10) %}{% for j in range(10) %}{% endfor %}{% endfor %}", &lim, &got,
			 &err) == QC_ERANGE && strstr(err.msg, "30 loop iterations"),
	      "loop limit: %s", err.msg);
	free(got);
	CHECK(render_str("{% for i in range(100000000) %}{% endfor %}", &lim, &got, &err) == QC_ERANGE,
	      "range limit: %s", err.msg);
	free(got);
	qc_jinja_limits_default(&lim);
	lim.max_template_bytes = 10;
	CHECK(render_str("0123456789A", &lim, &got, &err) == QC_ERANGE, "template size limit: %s", err.msg);
	free(got);
	qc_jinja_limits_default(&lim);
	lim.max_scratch_bytes = 1 << 20;
	CHECK(render_str("{% set s = namespace(x='0123456789') %}{% for i in range(20) %}{% set s.x = s.x ~ s.x %}"
			 "{% endfor %}",
			 &lim, &got, &err) == QC_ERANGE,
	      "scratch limit: %s", err.msg);
	free(got);
	/* deep nesting: parse-time recursion is bounded */
	size_t depth = 100000;
	char *deep = malloc(2 * depth + 8);
	memcpy(deep, "{{ ", 3);
	memset(deep + 3, '(', depth);
	deep[3 + depth] = '1';
	memset(deep + 4 + depth, ')', depth);
	memcpy(deep + 4 + 2 * depth, " }}", 4);
	CHECK(render_str(deep, NULL, &got, &err) == QC_ERANGE && strstr(err.msg, "nested deeper"), "depth: %s",
	      err.msg);
	free(got);
	free(deep);
	/* a template whose content is exactly at the limit still renders */
	qc_jinja_limits_default(&lim);
	lim.max_output_bytes = 10;
	CHECK(render_str("0123456789", &lim, &got, &err) == QC_OK && got && !strcmp(got, "0123456789"),
	      "exact output limit: %s", err.msg);
	free(got);
}

/* The comparator must be able to fail: a render compared with another case's output. */
static void test_wrong_expectation_fails(void)
{
	size_t len;
	char *src = check_read_file(DIR "smollm2-135m-instruct.jinja", &len);
	struct qc_err err = {0};
	char *got = NULL;
	struct qc_chat_msg m[] = {{"user", "Hello"}};
	CHECK(src && render(src, len, NULL, m, 1, true, "", "", NULL, &got, &err) == QC_OK, "%s", err.msg);
	/* what chatml without the default system prompt would give: must not match */
	CHECK(got && strcmp(got, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n") != 0,
	      "SmolLM2 render lost its default system prompt");
	CHECK(got && strstr(got, "You are a helpful AI assistant named SmolLM"), "SmolLM2 default system prompt");
	free(got);
	free(src);
}

/* chat_prompt.c: the BOS rule, the fallback rule and its one log line, the file override */
static void test_chat_prompt(void)
{
	static const char llama[] = "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}"
				    "<|end_header_id|>\n\n{{ m.content }}<|eot_id|>{% endfor %}"
				    "<|start_header_id|>assistant<|end_header_id|>\n\n";
	struct qc_chat_msg m[] = {{"user", "Hi"}};
	struct qc_err err = {0};
	struct qc_chat_prompt *p = NULL;
	char *out = NULL;
	size_t len;
	for (int adds = 0; adds < 2; adds++) {
		struct qc_chat_prompt_opts o = {.model_template = llama, .bos_token = "<|begin_of_text|>",
						.tokenizer_adds_bos = adds};
		CHECK(qc_chat_prompt_new(&o, &p, &err) == QC_OK && !strcmp(qc_chat_prompt_describe(p), "jinja (model)"),
		      "%s", err.msg);
		CHECK(qc_chat_prompt_render(p, m, 1, 1 << 20, &out, &len, &err) == QC_OK, "%s", err.msg);
		bool starts = out && !strncmp(out, "<|begin_of_text|>", 17);
		CHECK(starts == !adds, "tokenizer %s BOS: the render %s with it", adds ? "adds" : "does not add",
		      starts ? "starts" : "does not start");
		CHECK(out && strstr(out, "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"), "render: %s", out);
		free(out);
		qc_chat_prompt_free(p);
	}

	/* a template the interpreter cannot run, with chatml markers: fallback, logged once */
	FILE *log = tmpfile();
	struct qc_chat_prompt_opts fb = {.model_template = "{% macro x() %}{% endmacro %}<|im_start|>", .log = log,
					 .log_prefix = "t"};
	CHECK(qc_chat_prompt_new(&fb, &p, &err) == QC_OK && !strcmp(qc_chat_prompt_describe(p), "chatml (fallback)"),
	      "fallback: %s", err.msg);
	CHECK(qc_chat_prompt_render(p, m, 1, 1 << 20, &out, &len, &err) == QC_OK &&
		      !strcmp(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
	      "fallback render: %s", out ? out : err.msg);
	free(out);
	/* tools a built-in family cannot show are refused, never dropped */
	CHECK(qc_chat_prompt_render_tools(p, m, 1, "[]", 1 << 20, &out, &len, &err) == QC_EUNSUPPORTED &&
		      !strncmp(err.msg, "tools: ", 7),
	      "tools on a built-in: %s", err.msg);
	qc_chat_prompt_free(p);
	char buf[1024] = {0};
	rewind(log);
	size_t got = fread(buf, 1, sizeof buf - 1, log);
	fclose(log);
	CHECK(got && strstr(buf, "falling back to the built-in 'chatml'") && strstr(buf, "macro") &&
		      strchr(buf, '\n') == buf + got - 1,
	      "one fallback line naming why: '%s'", buf);

	/* no family either: refused, naming why and the two flags */
	struct qc_chat_prompt_opts none = {.model_template = "{% macro x() %}{% endmacro %}"};
	CHECK(qc_chat_prompt_new(&none, &p, &err) == QC_EUNSUPPORTED && !p && strstr(err.msg, "--chat-template-file"),
	      "unusable template: %s", err.msg);
	/* the template's own refusal is a request error, not a fallback */
	struct qc_chat_prompt_opts gem = {.model_template = "{% if messages[0].role == 'system' %}"
							    "{{ raise_exception('System role not supported') }}{% endif %}ok"};
	struct qc_chat_msg sys[] = {{"system", "S"}, {"user", "U"}};
	CHECK(qc_chat_prompt_new(&gem, &p, &err) == QC_OK, "%s", err.msg);
	CHECK(qc_chat_prompt_render(p, sys, 2, 1 << 20, &out, &len, &err) == QC_EINVAL &&
		      !strncmp(err.msg, "messages: ", 10) && strstr(err.msg, "System role not supported"),
	      "raise_exception through chat_prompt: %s", err.msg);
	qc_chat_prompt_free(p);
	/* a built-in name and a file together are refused; a missing file is QC_EIO */
	struct qc_chat_prompt_opts both = {.family = "chatml", .template_file = "x.jinja"};
	CHECK(qc_chat_prompt_new(&both, &p, &err) == QC_EINVAL, "family + file");
	struct qc_chat_prompt_opts nofile = {.template_file = "/nonexistent/t.jinja", .model_template = llama};
	CHECK(qc_chat_prompt_new(&nofile, &p, &err) == QC_EIO, "missing file: %s", err.msg);
	struct qc_chat_prompt_opts file = {.template_file = DIR "smollm2-135m-instruct.jinja", .model_template = llama};
	CHECK(qc_chat_prompt_new(&file, &p, &err) == QC_OK && !strcmp(qc_chat_prompt_describe(p), "jinja (file)"),
	      "file: %s", err.msg);
	CHECK(qc_chat_prompt_render(p, m, 1, 1 << 20, &out, &len, &err) == QC_OK && strstr(out, "SmolLM"),
	      "the file wins over the model's template: %s", out ? out : err.msg);
	free(out);
	/* SmolLM2's template never names tools: refused, not silently dropped */
	CHECK(qc_chat_prompt_render_tools(p, m, 1, "[]", 1 << 20, &out, &len, &err) == QC_EUNSUPPORTED &&
		      strstr(err.msg, "no tools section"),
	      "tools on a template without them: %s", err.msg);
	qc_chat_prompt_free(p);
	/* a template with a tools section gets them; bad JSON names tools */
	struct qc_chat_prompt_opts qw = {.template_file = DIR "Qwen-Qwen2.5-7B-Instruct.jinja"};
	CHECK(qc_chat_prompt_new(&qw, &p, &err) == QC_OK, "qwen: %s", err.msg);
	CHECK(qc_chat_prompt_render_tools(p, m, 1, "[{\"type\":\"function\",\"function\":{\"name\":\"zz_fn\"}}]",
					  1 << 20, &out, &len, &err) == QC_OK &&
		      strstr(out, "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"zz_fn\"}}\n</tools>"),
	      "tools render: %s", out ? out : err.msg);
	free(out);
	CHECK(qc_chat_prompt_render_tools(p, m, 1, "[{", 1 << 20, &out, &len, &err) == QC_EINVAL &&
		      !strncmp(err.msg, "tools: ", 7),
	      "bad tools JSON through chat_prompt: %s", err.msg);
	qc_chat_prompt_free(p);
	/* no template anywhere: disabled */
	struct qc_chat_prompt_opts empty = {0};
	CHECK(qc_chat_prompt_new(&empty, &p, &err) == QC_OK && !qc_chat_prompt_enabled(p), "no template");
	qc_chat_prompt_free(p);
}

int main(void)
{
	test_chat_prompt();
	test_oracle();
	test_errors();
	test_wrong_expectation_fails();
	return check_report("test_chat_jinja");
}
