/* test_qserve_openai.c — qserve through the official openai Python client
 * (tests/serve/openai_client.py, in the venv tools/pyenv.sh builds), on the CPU backend
 * with stories260K, chat template chatml and an API key: completions, chat, streaming,
 * logprobs, n=2 (indices 0 and 1, choice 1 = seed + 1), logit_bias, echo, stop_token_ids
 * and min_tokens (extra_body), response_format, models.retrieve, and errors as the
 * client parses them; the greedy text must be llama.cpp's
 * (fixtures/reference/stories260K.json). The client prints its own "N passed" line;
 * this binary counts one check for it. The API through curl: test_qserve.c.
 */
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "../tests/check.h"
#include "qserve_util.h"

static void test_openai_client(const struct srv *s, const char *ref_text)
{
	int st;
	char *py = sh("sh tools/pyenv.sh 2>/dev/null", &st);
	char *nl = strchr(py, '\n');
	if (nl)
		*nl = '\0';
	CHECK(st == 0 && py[0], "tools/pyenv.sh failed (%d): needs python3-venv and PyPI", st);
	if (st || !py[0]) {
		free(py);
		return;
	}
	char cmd[4096];
	snprintf(cmd, sizeof cmd, "%s tests/serve/openai_client.py http://127.0.0.1:%d/v1 sk-test stories260K '%s' 2>&1",
		 py, s->port, ref_text);
	char *out = sh(cmd, &st);
	const char *line = strstr(out, "openai_client: ");
	CHECK(st == 0 && line && strstr(line, " 0 failed"), "openai client (exit %d):\n%s", st, out);
	if (line)
		printf("%s", line);
	free(out);
	free(py);
}

int main(void)
{
	int32_t ref[64];
	char ref_text[4096];
	char path[1024];
	snprintf(path, sizeof path, "%s/gguf/stories260K.gguf", check_fixtures());
	if (!check_have_fixtures("test_qserve_openai"))
		return check_report("test_qserve_openai");
	if (access(path, R_OK)) {
		CHECK(0, "fixture %s missing", path);
		return check_report("test_qserve_openai");
	}
	int n_ref = ref_ids(ref, ref_text, sizeof ref_text);
	if (n_ref != 32 || strchr(ref_text, '\''))
		CHECK(0, "reference ids/text unusable (%d)", n_ref); /* counted once, by test_qserve */

	struct srv s;
	char args[2048];
	snprintf(args, sizeof args, "%s --chat-template chatml --api-key sk-test --max-body 65536", path);
	if (!srv_start(&s, args)) {
		srv_failed(&s, "qserve");
		return check_report("test_qserve_openai");
	}
	test_openai_client(&s, ref_text);
	srv_stop(&s); /* its exit status on SIGTERM is checked once, by test_qserve */
	return check_report("test_qserve_openai");
}
