/* test_hf_tokenizer.c — full-size Hugging Face tokenizer.json files
 * (tests/data/hf/tok/NAME.tokenizer.json.xz) converted to GGUF vocab keys and loaded by the
 * vocab, tokenizing llama.cpp's own test vectors (fixtures/vocab/ggml-vocab-*.gguf.inp /
 * .out) to the same ids; model type and pre-tokenizer are the expected ones. A negative
 * control (gpt-2's rules on starcoder's vectors) must differ. Skips when the fixtures
 * are missing.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <archive.h>
#include <archive_entry.h>
#include <cjson/cJSON.h>

#include "check.h"
#include "gguf.h"
#include "gguf_write.h"
#include "hf_tokenizer.h"
#include "vocab.h"

/* ---- full-size tokenizers vs llama.cpp's vectors ------------------------------- */

/* The decompressed bytes of an .xz/.gz file (libarchive's raw format), NUL-terminated. */
static char *decompress(const char *path)
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	archive_read_support_filter_all(a);
	archive_read_support_format_raw(a);
	if (archive_read_open_filename(a, path, 1 << 16) == ARCHIVE_OK && archive_read_next_header(a, &e) == ARCHIVE_OK) {
		for (;;) {
			if (cap - len < (1 << 16) + 1) {
				cap = cap ? 2 * cap : 1 << 20;
				char *nb = realloc(buf, cap);
				if (!nb)
					break;
				buf = nb;
			}
			la_ssize_t n = archive_read_data(a, buf + len, cap - len - 1);
			if (n <= 0)
				break;
			len += (size_t)n;
		}
	}
	archive_read_free(a);
	if (buf)
		buf[len] = '\0';
	return buf;
}

static void split_vectors(char *in, size_t in_len, char **texts, size_t *lens, size_t *n)
{
	const char *sep = "\n__ggml_vocab_test__\n";
	size_t sl = strlen(sep);
	*n = 0;
	for (size_t pos = 0; pos < in_len && *n < 256;) {
		char *next = memmem(in + pos, in_len - pos, sep, sl);
		if (!next)
			break;
		texts[*n] = in + pos;
		lens[(*n)++] = (size_t)(next - (in + pos));
		pos = (size_t)(next - in) + sl;
	}
}

/* Convert tok/<name>, tokenize the .inp vectors of fixture vocab <vecs>; with expect
 * they must all equal its .out, without (a negative control) some must differ. */
static void test_tokenizer(const char *name, const char *vecs, const char *model, const char *pre, bool expect)
{
	char p[512];
	snprintf(p, sizeof p, "tests/data/hf/tok/%s.tokenizer.json.xz", name);
	char *txt = decompress(p);
	cJSON *tok = txt ? cJSON_Parse(txt) : NULL;
	free(txt);
	CHECK(tok != NULL, "%s: cannot read %s", name, p);
	snprintf(p, sizeof p, "%s/vocab/ggml-vocab-%s.gguf", check_fixtures(), vecs);
	char ip[600], op[600];
	snprintf(ip, sizeof ip, "%s.inp", p);
	snprintf(op, sizeof op, "%s.out", p);
	size_t in_len = 0;
	char *in = check_read_file(ip, &in_len), *out = check_read_file(op, NULL);
	if (!tok || !in || !out) {
		printf("  %s: SKIP (fixtures missing: %s)\n", name, ip);
		goto out_free;
	}
	struct qc_err err = { 0 };
	struct qc_gguf_writer *w = qc_gguf_writer_new(3, 0);
	struct qc_hf_tok_src ts = { .tokenizer = tok, .path = name };
	uint8_t *g = NULL;
	size_t g_len = 0;
	struct qc_gguf *gf = NULL;
	struct qc_vocab *v = NULL;
	int rc = qc_hf_tokenizer_to_gguf(&ts, w, &err);
	if (!rc)
		rc = qc_gguf_writer_write_mem(w, &g, &g_len, &err);
	if (!rc)
		rc = qc_gguf_open_mem(g, g_len, name, &gf, &err);
	if (!rc)
		rc = qc_vocab_from_gguf(gf, &v, &err);
	CHECK(rc == QC_OK, "%s: convert/load: %s", name, err.msg);
	if (rc)
		goto out_vocab;
	CHECK(!strcmp(qc_vocab_type(v) == QC_VOCAB_SPM ? "llama" : "gpt2", model), "%s: model type", name);
	CHECK(!strcmp(qc_vocab_pre_name(v), pre), "%s: pre '%s', '%s' expected", name, qc_vocab_pre_name(v), pre);
	char *texts[256];
	size_t lens[256], n = 0, bad = 0;
	split_vectors(in, in_len, texts, lens, &n);
	char *line = out;
	for (size_t i = 0; i < n && line; i++) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		int32_t want[512];
		size_t n_want = 0;
		for (char *q = line, *e; n_want < 512; q = e) {
			long x = strtol(q, &e, 10);
			if (e == q)
				break;
			want[n_want++] = (int32_t)x;
		}
		int32_t *ids = NULL;
		size_t n_ids = 0;
		rc = qc_tokenize(v, texts[i], lens[i], 0, &ids, &n_ids, &err);
		if (rc || n_ids != n_want || (n_ids && memcmp(ids, want, n_ids * sizeof *ids))) {
			if (!bad++ && expect)
				fprintf(stderr, "  %s: vector %zu differs (%zu ids, %zu expected)\n", name, i, n_ids, n_want);
		}
		free(ids);
		line = nl ? nl + 1 : NULL;
	}
	if (expect) {
		CHECK(n == 46 && bad == 0, "%s: %zu of %zu llama.cpp vectors differ", name, bad, n);
		printf("  %s tokenizer.json: %zu/%zu llama.cpp test vectors reproduced\n", name, n - bad, n);
	} else {
		CHECK(n == 46 && bad > 0, "%s against %s's vectors: no difference found", name, vecs);
	}
out_vocab:
	qc_vocab_free(v);
	qc_gguf_close(gf);
	free(g);
	qc_gguf_writer_free(w);
out_free:
	free(in);
	free(out);
	cJSON_Delete(tok);
}

int main(void)
{
	test_tokenizer("llama-spm", "llama-spm", "llama", "", true);
	test_tokenizer("gpt-2", "gpt-2", "gpt2", "gpt-2", true);
	test_tokenizer("starcoder", "starcoder", "gpt2", "starcoder", true);
	test_tokenizer("llama-bpe", "llama-bpe", "gpt2", "llama-bpe", true);
	test_tokenizer("gpt-2", "starcoder", "gpt2", "gpt-2", false); /* digits split differently */
	return check_report("test_hf_tokenizer");
}
