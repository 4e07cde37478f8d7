/* test_hf_window.c — a Hugging Face sliding_window becomes <arch>.attention.sliding_window
 * as transformers applies it (convert/hf_config.c parse_window; docs/hf.md):
 * - Mistral: sliding_window 8 (< max_position_embeddings 256) is written; 256 (cuts
 *   nothing) and null are not;
 * - Qwen2: written only with use_sliding_window true and max_window_layers 0; not with
 *   use_sliding_window false, nor when max_window_layers >= num_hidden_layers (2: no
 *   layer is windowed); 0 < max_window_layers < num_hidden_layers (full-attention
 *   layers under windowed ones) is refused naming max_window_layers, leaving nothing.
 * Inputs are patched copies of tests/data/hf/mistral and qwen2, converted by the
 * qconvert binary; the key is read back from the bundle's manifest metadata.
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "hf_util.h"

/* A fresh copy of every file of tests/data/hf/<name> in dir. */
static bool copy_model(const char *name, const char *dir)
{
	char from[512], a[800], b[800];
	snprintf(from, sizeof from, "tests/data/hf/%s", name);
	rm_rf(dir);
	DIR *d = opendir(from);
	bool ok = d && mkdir(dir, 0755) == 0;
	struct dirent *e;
	while (ok && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(a, sizeof a, "%s/%s", from, e->d_name);
		snprintf(b, sizeof b, "%s/%s", dir, e->d_name);
		ok = copy_file(a, b);
	}
	if (d)
		closedir(d);
	return ok;
}

/* Convert dir; the window key's value in the bundle (-1: absent), or -2 when the
 * conversion failed (its message in msg, NUL-terminated, up to len bytes). */
static long convert_window(const char *dir, const char *key, char *msg, size_t len)
{
	char out[600], errp[600];
	snprintf(out, sizeof out, "%s.qb", dir);
	snprintf(errp, sizeof errp, "%s.err", dir);
	const char *args[] = { dir, "--target", "cpu", "-o", out, NULL };
	int rc = run_cli(args, errp);
	char *m = check_read_file(errp, NULL);
	snprintf(msg, len, "%s", m ? m : "");
	free(m);
	if (rc != 0)
		return -2;
	struct qc_bundle *b = NULL;
	struct qc_err err = { 0 };
	long v = -3;
	if (qc_bundle_open(out, &b, &err) == QC_OK) {
		const cJSON *md = cJSON_GetObjectItemCaseSensitive(b->manifest, "metadata");
		const cJSON *w = cJSON_GetObjectItemCaseSensitive(md, key);
		v = cJSON_IsNumber(w) ? (long)w->valuedouble : -1;
		qc_bundle_close(b);
	}
	unlink(out);
	return v;
}

struct window_case {
	const char *what, *model;
	const char *patches[3][2];   /* same-length replacements in config.json */
	long want;                   /* key value; -1 absent; -2 refused */
	const char *needle;          /* refused: the message names it */
};

static const struct window_case cases[] = {
	{"mistral, window 8", "mistral", {{"\"sliding_window\": null", "\"sliding_window\": 8   "}}, 8, NULL},
	{"mistral, window 256 = context", "mistral", {{"\"sliding_window\": null", "\"sliding_window\": 256 "}}, -1, NULL},
	{"mistral, window null", "mistral", {{NULL, NULL}}, -1, NULL},
	{"qwen2, use_sliding_window false", "qwen2",
	 {{"\"sliding_window\": 4096", "\"sliding_window\": 16  "},
	  {"\"max_window_layers\": 28", "\"max_window_layers\": 0 "}}, -1, NULL},
	{"qwen2, windowed from layer 0", "qwen2",
	 {{"\"sliding_window\": 4096", "\"sliding_window\": 16  "},
	  {"\"use_sliding_window\": false", "\"use_sliding_window\": true "},
	  {"\"max_window_layers\": 28", "\"max_window_layers\": 0 "}}, 16, NULL},
	{"qwen2, max_window_layers 2 = layers", "qwen2",
	 {{"\"sliding_window\": 4096", "\"sliding_window\": 16  "},
	  {"\"use_sliding_window\": false", "\"use_sliding_window\": true "},
	  {"\"max_window_layers\": 28", "\"max_window_layers\": 2 "}}, -1, NULL},
	{"qwen2, layer 0 full and layer 1 windowed", "qwen2",
	 {{"\"sliding_window\": 4096", "\"sliding_window\": 16  "},
	  {"\"use_sliding_window\": false", "\"use_sliding_window\": true "},
	  {"\"max_window_layers\": 28", "\"max_window_layers\": 1 "}}, -2, "max_window_layers"},
};

static void run_case(const struct window_case *k)
{
	char dir[512], cfg[600], msg[1024];
	snprintf(dir, sizeof dir, "%s/m", tmpdir);
	snprintf(cfg, sizeof cfg, "%s/config.json", dir);
	CHECK(copy_model(k->model, dir), "%s: copy", k->what);
	for (int i = 0; i < 3 && k->patches[i][0]; i++)
		CHECK(patch_file(cfg, k->patches[i][0], k->patches[i][1]), "%s: patch '%s'", k->what, k->patches[i][0]);
	const char *key = strcmp(k->model, "qwen2") ? "llama.attention.sliding_window" : "qwen2.attention.sliding_window";
	long v = convert_window(dir, key, msg, sizeof msg);
	CHECK(v == k->want, "%s: %s = %ld, %ld expected (%s)", k->what, key, v, k->want, msg);
	if (k->needle)
		CHECK(strstr(msg, k->needle) && strstr(msg, "config.json"), "%s: message should name config.json and %s: %s",
		      k->what, k->needle, msg);
	if (k->want == -2)
		CHECK(count_extra(tmpdir, (const char *const[]){ "m", "m.err", NULL }) == 0,
		      "%s: something was left beside the output", k->what);
	printf("  %-42s %s = %ld%s%s", k->what, key, v, v == -2 ? ": " : "\n", v == -2 ? msg : "");
}

int main(void)
{
	if (!hf_test_init("qc-test-hf-window"))
		return 1;
	printf("sliding_window from Hugging Face configs (-1: no key, -2: refused)\n");
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		run_case(&cases[i]);
	rm_rf(tmpdir);
	return check_report("test_hf_window");
}
