/* fuzz_jinja.c — libFuzzer entry for the chat-template interpreter (runtime/text/jinja_*.c).
 *
 * The input is a template: parse it under small limits and, when it parses, render
 * it for a fixed three-message conversation. Invariants: parse and render either
 * succeed with a NUL-terminated output within the output limit, or fail with a
 * known code and a message; no crash, leak or hang (the limits bound the work).
 * Seeds: the .jinja files in tests/data/chat. Build and run: tests/fuzz/run.sh SECONDS tests/fuzz/fuzz_jinja.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct qc_chat_msg msgs[] = {
		{"system", "sys"}, {"user", "Hi {{ x }} \xc3\xa9"}, {"assistant", "  yo  "}};
	struct qc_jinja_limits lim;
	qc_jinja_limits_default(&lim);
	lim.max_output_bytes = 1 << 16;
	lim.max_loop_iters = 10000;
	lim.max_scratch_bytes = 8 << 20;
	struct qc_jinja *t = NULL;
	struct qc_err err = {0};
	int rc = qc_jinja_parse((const char *)data, size, &lim, &t, &err);
	if (rc) {
		if ((rc != QC_EFORMAT && rc != QC_ERANGE && rc != QC_ENOMEM) || !err.msg[0] || t) {
			fprintf(stderr, "bad parse rejection: rc %d msg '%s'\n", rc, err.msg);
			abort();
		}
		return 0;
	}
	struct qc_jinja_chat ch = {.msgs = msgs, .n_msgs = 3, .add_generation_prompt = true, .bos_token = "<s>",
				   .eos_token = "</s>", .now_unix = 1721952000};
	char *out = NULL;
	size_t len = 0;
	rc = qc_jinja_render(t, &ch, &out, &len, &err);
	if (rc) {
		if ((rc != QC_EFORMAT && rc != QC_ERANGE && rc != QC_ENOMEM && rc != QC_EINVAL) || !err.msg[0] || out) {
			fprintf(stderr, "bad render rejection: rc %d msg '%s'\n", rc, err.msg);
			abort();
		}
	} else if (!out || out[len] != '\0' || len > lim.max_output_bytes) {
		abort();
	}
	free(out);
	qc_jinja_free(t);
	return 0;
}
