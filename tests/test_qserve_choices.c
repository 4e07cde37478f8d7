/* test_qserve_choices.c — qserve's n and best_of (issue 19), over loopback.
 *
 * Expectation from an independent source: greedy choices all equal llama.cpp's
 * 32 ids after "Once upon a time" (qserve_util.h ref_ids), whatever their
 * seeds. n = 3 non-streamed: three choices, indices 0..2, each llama.cpp's text,
 * usage = the prompt once + 3 x 32. Streamed: every chunk names an index in
 * 0..2, each index finishes exactly once, text per index is llama.cpp's. best_of
 * = 3, n = 1: one choice, usage counts the 3 generated. Range errors are 400s
 * naming the field. The checks fail on a wrong expectation: n = 1 gives one choice.
 */
#include <stdio.h>
#include <stdlib.h>

#include "qserve_util.h"

#define GREEDY "\"prompt\":\"Once upon a time\",\"max_tokens\":32,\"temperature\":0,\"ignore_eos\":true"

static int n_choices(const cJSON *j)
{
	return cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices"));
}

static void non_streamed(const struct srv *s, const char *ref_text, int n_prompt)
{
	int st;
	cJSON *j = post_json(s, "/v1/completions", "{" GREEDY ",\"n\":3}", NULL, &st);
	CHECK(st == 200 && n_choices(j) == 3, "n=3: status %d, %d choices", st, n_choices(j));
	for (int i = 0; i < 3; i++) {
		char path[64];
		const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), i);
		snprintf(path, sizeof path, "choices.%d.text", i);
		CHECK(jstr(j, path) && !strcmp(jstr(j, path), ref_text), "choice %d text '%s'", i,
		      jstr(j, path) ? jstr(j, path) : "(none)");
		CHECK(cJSON_GetObjectItem(c, "index") && cJSON_GetObjectItem(c, "index")->valuedouble == i,
		      "choice %d index", i);
		snprintf(path, sizeof path, "choices.%d.finish_reason", i);
		CHECK(jstr(j, path) && !strcmp(jstr(j, path), "length"), "choice %d finish", i);
	}
	CHECK(jnum(j, "usage", "prompt_tokens") == n_prompt && jnum(j, "usage", "completion_tokens") == 3 * 32,
	      "usage %g prompt, %g completion", jnum(j, "usage", "prompt_tokens"),
	      jnum(j, "usage", "completion_tokens"));
	cJSON_Delete(j);

	/* the wrong expectation must fail: n = 1 is one choice */
	j = post_json(s, "/v1/completions", "{" GREEDY ",\"n\":1}", NULL, &st);
	CHECK(st == 200 && n_choices(j) == 1 && n_choices(j) != 3, "n=1: %d choices", n_choices(j));
	cJSON_Delete(j);

	/* chat, n = 2, sampled: two choices, each with a message */
	j = post_json(s, "/v1/chat/completions",
		      "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":8,\"n\":2,\"seed\":5}",
		      NULL, &st);
	CHECK(st == 200 && n_choices(j) == 2 && jstr(j, "choices.1.message.content"), "chat n=2: %d, %d choices", st,
	      n_choices(j));
	CHECK(jnum(j, "usage", "completion_tokens") <= 16, "chat n=2 usage %g", jnum(j, "usage", "completion_tokens"));
	cJSON_Delete(j);

	/* best_of 3, n 1: one choice (the best of three), usage counts all three */
	j = post_json(s, "/v1/completions",
		      "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"temperature\":1,\"ignore_eos\":true,"
		      "\"best_of\":3,\"n\":1,\"seed\":11}",
		      NULL, &st);
	CHECK(st == 200 && n_choices(j) == 1 && jstr(j, "choices.0.text"), "best_of=3: %d, %d choices", st,
	      n_choices(j));
	CHECK(jnum(j, "usage", "completion_tokens") == 24 && jnum(j, "usage", "prompt_tokens") == n_prompt,
	      "best_of usage %g", jnum(j, "usage", "completion_tokens"));
	CHECK(!cJSON_IsObject(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "logprobs")),
	      "best_of reported logprobs nobody asked for");
	cJSON_Delete(j);
}

static void streamed(const struct srv *s, const char *ref_text)
{
	int st;
	char *b = http(s, "POST", "/v1/completions",
		       "{" GREEDY ",\"n\":3,\"stream\":true,\"stream_options\":{\"include_usage\":true}}", NULL, &st);
	char text[3][4096] = {{0}};
	int finishes[3] = {0}, bad_index = 0, usage = -1;
	bool done_last = false;
	const char *p = b;
	while (p && *p) {
		const char *end = strstr(p, "\n\n");
		if (!end || strncmp(p, "data: ", 6))
			break;
		char *ev = strndup(p + 6, (size_t)(end - p - 6));
		done_last = !strcmp(ev, "[DONE]");
		cJSON *j = done_last ? NULL : cJSON_Parse(ev);
		const cJSON *ch = j ? cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0) : NULL;
		if (ch) {
			const cJSON *ix = cJSON_GetObjectItem(ch, "index");
			int i = cJSON_IsNumber(ix) ? (int)ix->valuedouble : -1;
			if (i < 0 || i > 2) {
				bad_index++;
			} else {
				const cJSON *t = cJSON_GetObjectItem(ch, "text");
				if (cJSON_IsString(t))
					strncat(text[i], t->valuestring, sizeof text[i] - strlen(text[i]) - 1);
				finishes[i] += cJSON_IsString(cJSON_GetObjectItem(ch, "finish_reason"));
			}
		}
		if (j && cJSON_IsObject(cJSON_GetObjectItem(j, "usage")))
			usage = (int)jnum(j, "usage", "completion_tokens");
		cJSON_Delete(j);
		free(ev);
		p = end + 2;
	}
	CHECK(st == 200 && done_last && bad_index == 0, "stream n=3: %d, done %d, %d bad indices", st, done_last,
	      bad_index);
	for (int i = 0; i < 3; i++) {
		CHECK(finishes[i] == 1, "index %d finished %d times", i, finishes[i]);
		CHECK(!strcmp(text[i], ref_text), "index %d streamed '%s'", i, text[i]);
	}
	CHECK(usage == 3 * 32, "stream usage %d", usage);
	free(b);
}

static void errors(const struct srv *s)
{
	static const struct { const char *body, *param; } errs[] = {
		{"{\"prompt\":\"a\",\"n\":0}", "n"},
		{"{\"prompt\":\"a\",\"n\":17}", "n"},
		{"{\"prompt\":\"a\",\"n\":1.5}", "n"},
		{"{\"prompt\":\"a\",\"best_of\":17}", "best_of"},
		{"{\"prompt\":\"a\",\"n\":3,\"best_of\":2}", "best_of"},
		{"{\"prompt\":\"a\",\"best_of\":2,\"stream\":true}", "best_of"},
	};
	for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
		int st;
		cJSON *j = post_json(s, "/v1/completions", errs[i].body, NULL, &st);
		const char *param = jstr(j, "error.param");
		CHECK(st == 400 && param && !strcmp(param, errs[i].param), "%s: %d, param %s", errs[i].body, st,
		      param ? param : "(none)");
		cJSON_Delete(j);
	}
}

int main(void)
{
	int32_t ref[64];
	char ref_text[4096], path[1024], args[2048];
	snprintf(path, sizeof path, "%s/gguf/stories260K.gguf", check_fixtures());
	if (!check_have_fixtures("test_qserve_choices"))
		return check_report("test_qserve_choices");
	int n_ref = ref_ids(ref, ref_text, sizeof ref_text);
	CHECK(n_ref == 32, "reference ids unusable (%d)", n_ref);
	struct srv s;
	snprintf(args, sizeof args, "%s --chat-template chatml", path);
	if (!srv_start(&s, args)) {
		srv_failed(&s, "qserve");
		return check_report("test_qserve_choices");
	}
	int st;
	cJSON *one = post_json(&s, "/v1/completions", "{" GREEDY "}", NULL, &st);
	int n_prompt = (int)jnum(one, "usage", "prompt_tokens");
	cJSON_Delete(one);
	non_streamed(&s, ref_text, n_prompt);
	streamed(&s, ref_text);
	errors(&s);
	CHECK(srv_stop(&s) == 0, "qserve did not exit 0 on SIGTERM");
	return check_report("test_qserve_choices");
}
