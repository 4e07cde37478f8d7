/* fuzz_tokenizer.c — libFuzzer harness for the tokenizers and detokenizers.
 * The first input byte picks one of four real vocabularies (SPM, byte-level BPE
 * with the Llama 3 pre-tokenizer, GPT-2 BPE, WordPiece), the second the tokenize
 * flags; the rest is arbitrary bytes (invalid UTF-8 included). Every id produced
 * must be in range; detokenizing them whole and streamed must succeed, and the
 * streamed output must be valid UTF-8. Vocabularies load once from $QC_FIXTURES
 * (default ../shared/fixtures). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const names[] = { "llama-spm", "llama-bpe", "gpt-2", "bert-bge" };
static struct qc_vocab *vocabs[4];

static void load(void)
{
	const char *root = getenv("QC_FIXTURES");
	for (int i = 0; i < 4; i++) {
		char p[1024];
		snprintf(p, sizeof p, "%s/vocab/ggml-vocab-%s.gguf", root && *root ? root : "../shared/fixtures", names[i]);
		struct qc_gguf *g = NULL;
		struct qc_err err = {0};
		if (qc_gguf_open(p, &g, &err) || qc_vocab_from_gguf(g, &vocabs[i], &err)) {
			fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s\n", p, err.msg);
			abort();
		}
		qc_gguf_close(g); /* the vocab keeps its own copies */
	}
}

static int utf8_valid(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned c = s[i];
		size_t k = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 9;
		if (k == 9 || i + k >= n)
			return 0;
		for (size_t j = 1; j <= k; j++)
			if ((s[i + j] & 0xc0) != 0x80)
				return 0;
		i += k + 1;
	}
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!vocabs[0])
		load();
	if (size < 2)
		return 0;
	const struct qc_vocab *v = vocabs[data[0] & 3];
	enum qc_tok_flags flags = (enum qc_tok_flags)(data[1] & (QC_TOK_ADD_SPECIAL | QC_TOK_PARSE_SPECIAL));
	int32_t *ids = NULL;
	size_t n = 0;
	struct qc_err err = {0};
	if (qc_tokenize(v, (const char *)data + 2, size - 2, flags, &ids, &n, &err) != QC_OK)
		return 0;
	int32_t nv = (int32_t)qc_vocab_n_tokens(v);
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= nv)
			abort();
	char *text = NULL;
	size_t len = 0;
	if (qc_detokenize(v, ids, n, (enum qc_detok_flags)0, &text, &len, &err) != QC_OK)
		abort();
	free(text);
	struct qc_detok *d = NULL;
	if (qc_detok_new(v, (enum qc_detok_flags)0, &d, &err) != QC_OK)
		abort();
	for (size_t i = 0; i < n; i++) {
		const char *t;
		size_t tl;
		if (qc_detok_push(d, ids[i], &t, &tl, &err) != QC_OK || !utf8_valid((const unsigned char *)t, tl))
			abort();
	}
	const char *t;
	size_t tl;
	qc_detok_flush(d, &t, &tl);
	if (!utf8_valid((const unsigned char *)t, tl))
		abort();
	qc_detok_free(d);
	free(ids);
	return 0;
}
