/* test_hf_bad.c — a bad Hugging Face folder is refused as a user sees it: qconvert exits
 * 1 naming the file and what is wrong (no config.json, an unknown architecture, a missing
 * tensor, a shape that contradicts config.json, an unknown pre-tokenizer regex, a
 * partial_rotary_factor that rotates no whole even number of dims) and leaves
 * nothing in the output folder; a good copy of the same folder converts, so every checker
 * can fail. Inputs are patched copies of tests/data/hf/llama (and phi3-partial) in a temp
 * folder.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "hf_util.h"

/* A fresh copy of tests/data/hf/phi3-partial (no tokenizer) in dir. */
static bool copy_phi3_partial(const char *dir)
{
	static const char *const files[] = { "config.json", "model.safetensors" };
	char a[512], b[512];
	if (mkdir(dir, 0755) && errno != EEXIST)
		return false;
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		snprintf(a, sizeof a, "tests/data/hf/phi3-partial/%s", files[i]);
		snprintf(b, sizeof b, "%s/%s", dir, files[i]);
		if (!copy_file(a, b))
			return false;
	}
	return true;
}

/* A fresh copy of tests/data/hf/llama in dir. */
static bool copy_llama(const char *dir)
{
	static const char *const files[] = { "config.json", "generation_config.json", "model.safetensors",
					     "tokenizer.json", "tokenizer_config.json" };
	char a[512], b[512];
	if (mkdir(dir, 0755) && errno != EEXIST)
		return false;
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		snprintf(a, sizeof a, "tests/data/hf/llama/%s", files[i]);
		snprintf(b, sizeof b, "%s/%s", dir, files[i]);
		if (!copy_file(a, b))
			return false;
	}
	return true;
}

static void expect_fail(const char *what, const char *dir, const char *needle1, const char *needle2)
{
	char out[600], errp[512], outdir[512];
	snprintf(outdir, sizeof outdir, "%s/out", tmpdir);
	mkdir(outdir, 0755);
	snprintf(out, sizeof out, "%s/bad.qb", outdir);
	snprintf(errp, sizeof errp, "%s/err.txt", tmpdir);
	const char *args[] = { dir, "--target", "cpu", "-o", out, NULL };
	int rc = run_cli(args, errp);
	char *msg = check_read_file(errp, NULL);
	CHECK(rc == 1, "%s: exit %d, 1 expected (%s)", what, rc, msg ? msg : "");
	CHECK(msg && strstr(msg, needle1) && (!needle2 || strstr(msg, needle2)),
	      "%s: message should name '%s'%s%s: %s", what, needle1, needle2 ? " and " : "", needle2 ? needle2 : "",
	      msg ? msg : "(none)");
	CHECK(count_extra(outdir, NULL) == 0, "%s: something was left in the output folder", what);
	printf("  %s: %s", what, msg ? msg : "\n");
	free(msg);
}

static void test_bad_input(void)
{
	char d[512], p[600];
	snprintf(d, sizeof d, "%s/bad-noconfig", tmpdir);
	CHECK(copy_llama(d), "copy");
	snprintf(p, sizeof p, "%s/config.json", d);
	unlink(p);
	expect_fail("missing config.json", d, "config.json", NULL);

	snprintf(d, sizeof d, "%s/bad-arch", tmpdir);
	CHECK(copy_llama(d), "copy");
	snprintf(p, sizeof p, "%s/config.json", d);
	CHECK(patch_file(p, "\"LlamaForCausalLM\"", "\"GPT2LMHeadModel\" "), "patch");
	expect_fail("unknown architecture", d, "config.json", "GPT2LMHeadModel");

	/* rename one tensor in the safetensors header: it goes missing (and an unknown one appears) */
	snprintf(d, sizeof d, "%s/bad-missing", tmpdir);
	CHECK(copy_llama(d), "copy");
	snprintf(p, sizeof p, "%s/model.safetensors", d);
	CHECK(patch_file(p, "model.layers.1.mlp.up_proj.weight", "model.layers.1.mlp.up_xxxx.weight"), "patch");
	expect_fail("missing tensor", d, "model.layers.1.mlp.up_proj.weight", "missing");

	snprintf(d, sizeof d, "%s/bad-shape", tmpdir);
	CHECK(copy_llama(d), "copy");
	snprintf(p, sizeof p, "%s/config.json", d);
	CHECK(patch_file(p, "\"intermediate_size\": 128", "\"intermediate_size\": 96 "), "patch");
	expect_fail("shape mismatch", d, "model.safetensors", "model.layers.0.mlp.gate_proj.weight");

	/* an unknown pre-tokenizer regex is refused, not tokenized some other way */
	snprintf(d, sizeof d, "%s/bad-regex", tmpdir);
	CHECK(copy_llama(d), "copy");
	char tp[600];
	snprintf(tp, sizeof tp, "%s/tokenizer.json", d);
	CHECK(copy_file("tests/data/hf/llama-tied/tokenizer.json", tp), "copy");
	CHECK(patch_file(tp, "(?i:'s|'t|", "(?i:'S|'t|"), "patch");
	snprintf(p, sizeof p, "%s/config.json", d);
	CHECK(patch_file(p, "\"vocab_size\": 512", "\"vocab_size\": 515"), "patch");
	expect_fail("unknown pre-tokenizer", d, "tokenizer.json", "regex");

	/* the checker itself: a good folder must not "fail" */
	snprintf(d, sizeof d, "%s/good", tmpdir);
	CHECK(copy_llama(d), "copy");
	char out[600], errp[600];
	snprintf(out, sizeof out, "%s/good.qb", tmpdir);
	snprintf(errp, sizeof errp, "%s/err.txt", tmpdir);
	const char *args[] = { d, "--target", "cpu", "-o", out, "-q", NULL };
	CHECK(run_cli(args, errp) == 0 && file_exists(out), "a good copy must convert");
	unlink(out);
}

/* Phi-4-mini's partial_rotary_factor (0.75 of head_dim 16: 12 rotated dims, LongRoPE
 * tables of 6): a factor outside (0, 1], one that rotates a fractional or odd number of
 * dims, and tables sized for other rotated dims are refused naming the key and value. */
static void test_bad_partial_rope(void)
{
	static const struct {
		const char *what, *to, *needle1, *needle2;
	} cases[] = {
		{"partial_rotary_factor above 1", "  \"partial_rotary_factor\": 1.75,", "partial_rotary_factor",
		 "1.75 is not in (0, 1]"},
		{"partial_rotary_factor 0", "  \"partial_rotary_factor\": 0.00,", "partial_rotary_factor", "0 is not in (0, 1]"},
		{"fractional rotated dims", "  \"partial_rotary_factor\": 0.70,", "\"partial_rotary_factor\" 0.7",
		 "not a whole even number"},
		{"odd rotated dims", " \"partial_rotary_factor\":0.5625,", "\"partial_rotary_factor\" 0.5625",
		 "not a whole even number"},
		{"tables sized for other rotated dims", "  \"partial_rotary_factor\": 0.25,", "rope_scaling.long_factor",
		 "list of 2 numbers (the rotated dims 4 / 2), not 6"},
	};
	char d[512], p[600];
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		snprintf(d, sizeof d, "%s/bad-partial-%zu", tmpdir, i);
		CHECK(copy_phi3_partial(d), "copy");
		snprintf(p, sizeof p, "%s/config.json", d);
		CHECK(patch_file(p, "  \"partial_rotary_factor\": 0.75,", cases[i].to), "patch %s", cases[i].what);
		expect_fail(cases[i].what, d, cases[i].needle1, cases[i].needle2);
	}
	/* the checker itself: the unpatched folder converts */
	snprintf(d, sizeof d, "%s/good-partial", tmpdir);
	CHECK(copy_phi3_partial(d), "copy");
	char out[600], errp[600];
	snprintf(out, sizeof out, "%s/good-partial.qb", tmpdir);
	snprintf(errp, sizeof errp, "%s/err.txt", tmpdir);
	const char *args[] = { d, "--target", "cpu", "-o", out, "-q", NULL };
	CHECK(run_cli(args, errp) == 0 && file_exists(out), "phi3-partial must convert");
	unlink(out);
}

int main(void)
{
	if (!hf_test_init("qc-test-hf-bad"))
		return 1;
	test_bad_input();
	test_bad_partial_rope();
	rm_rf(tmpdir);
	return check_report("test_hf_bad");
}
