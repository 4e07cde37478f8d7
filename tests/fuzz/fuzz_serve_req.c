/* fuzz_serve_req.c — libFuzzer entry for qserve's request-body parser
 * (runtime/serve/serve_req.c serve_req_parse, chat rendering through chat_prompt.c:
 * the built-in families and one Jinja template).
 *
 * Byte 0 picks the schema (completions or chat), the chat template and a wrapper:
 * the rest is the body as is, or spliced into a valid request ({"prompt":"x", ...}
 * or {"messages":[...], ...}) so the fuzzer reaches the field checks without
 * first having to discover JSON. Invariants: a rejection is QC_EINVAL/QC_ENOMEM
 * with a message; an acceptance has exactly one prompt form, in-range sampling
 * parameters, at most 4 non-empty stop strings, and frees cleanly.
 * Build and run: tests/fuzz/run.sh SECONDS tests/fuzz/fuzz_serve_req.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the modules under test are not in the fuzz library: compile them in */
#include "../../runtime/text/chat_template.c"
#include "../../runtime/engine/sampler.c"
#include "../../runtime/serve/serve_buf.c"
#include "../../runtime/serve/serve_req.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const bool chat = data[0] & 1;
	/* one prompt object per built-in family, plus a Jinja one; made once */
	static struct qc_chat_prompt *prompts[QC_CHAT_FAMILY_COUNT + 1];
	static bool made;
	if (!made) {
		struct qc_err e0 = {0};
		for (int f = QC_CHAT_NONE + 1; f < QC_CHAT_FAMILY_COUNT; f++) {
			struct qc_chat_prompt_opts o = {.family = qc_chat_family_name((enum qc_chat_family)f)};
			if (qc_chat_prompt_new(&o, &prompts[f], &e0))
				abort();
		}
		struct qc_chat_prompt_opts o = {
			.model_template = "{% for m in messages %}{% if loop.first and m.role != 'system' %}"
					  "{{ '<|im_start|>system\\nDefault<|im_end|>\\n' }}{% endif %}"
					  "{{ '<|im_start|>' + m['role'] + '\\n' + m.content | trim + '<|im_end|>\\n' }}"
					  "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
			.bos_token = "<s>", .tokenizer_adds_bos = true};
		if (qc_chat_prompt_new(&o, &prompts[QC_CHAT_FAMILY_COUNT], &e0))
			abort();
		made = true;
	}
	const struct qc_chat_prompt *tmpl = prompts[(data[0] >> 1) % (QC_CHAT_FAMILY_COUNT + 1)];
	const int wrap = (data[0] >> 5) % 3;
	static const char *const pre[] = {"", "{\"prompt\":\"x\",", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"};
	size_t pl = strlen(pre[wrap]), n = size - 1;
	char *body = malloc(pl + n + 2);
	if (!body)
		return 0;
	memcpy(body, pre[wrap], pl);
	memcpy(body + pl, data + 1, n);
	if (wrap)
		body[pl + n++] = '}';
	struct serve_params p;
	struct qc_err err = {0};
	char param[64];
	int rc = serve_req_parse(body, pl + n, chat, tmpl, &p, param, sizeof param, &err);
	if (rc) {
		if ((rc != QC_EINVAL && rc != QC_ENOMEM) || !err.msg[0]) {
			fprintf(stderr, "bad rejection: rc %d msg '%s'\n", rc, err.msg);
			abort();
		}
	} else {
		const struct qc_sampler_params *s = &p.sampling;
		if ((p.prompt != NULL) == (p.prompt_ids != NULL) || p.n_stops > SERVE_MAX_STOPS ||
		    !(s->temperature >= 0 && s->temperature <= 2) || !(s->top_p > 0 && s->top_p <= 1) ||
		    p.top_logprobs < 0 || p.top_logprobs > QC_SAMPLER_MAX_LOGPROBS || p.max_tokens < 0 ||
		    (chat && !qc_chat_prompt_enabled(tmpl)))
			abort();
		for (int i = 0; i < p.n_stops; i++)
			if (!p.stops[i][0])
				abort();
	}
	serve_params_deinit(&p);
	free(body);
	return 0;
}
