/* mkgguf_vocab.c — mkgguf's synthetic SentencePiece vocab.
 *
 * <unk> <s> </s>, the 256 byte tokens "<0xXX>", common pieces, then generated
 * "▁word"/"word" pairs, with scores and token types as llama-vocab.cpp reads them;
 * every piece unique, as llama.cpp's token_to_id map requires.
 * Non-goals: a real tokenizer (no BPE merges, no trained scores).
 */
#include "mkgguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPM_SPACE "\xe2\x96\x81"            /* U+2581, SentencePiece's word-start mark */

/* llama.cpp token types (LLAMA_TOKEN_TYPE_*) used by the synthetic vocab. */
enum { TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_BYTE = 6 };

/* Common SentencePiece pieces, most frequent first; the rest are generated. */
static const char *const spm_pieces[] = {
	SPM_SPACE "t", "er", "in", SPM_SPACE "a", "en", "on", SPM_SPACE "th", "es", SPM_SPACE "the",
	SPM_SPACE "s", "at", "or", SPM_SPACE "c", "is", SPM_SPACE "w", "an", "re", SPM_SPACE "o",
	SPM_SPACE "f", "ing", SPM_SPACE "b", SPM_SPACE "p", SPM_SPACE "and", SPM_SPACE "m",
	SPM_SPACE "to", SPM_SPACE "of", SPM_SPACE "in", "ed", "ar", SPM_SPACE "d", SPM_SPACE "is",
	SPM_SPACE "h", "ou", "it", "le", "al", SPM_SPACE "l", SPM_SPACE "I", SPM_SPACE "n",
	SPM_SPACE "that", SPM_SPACE "it", SPM_SPACE, "e", "t", "a", "o", "i", "n", "s", "r", "h",
	"l", "d", "c", "u", "m", "f", "p", "g", "w", "y", "b", ".", ",", "v", "k", "-", "'", "x",
	"j", "q", "z", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", SPM_SPACE "be",
	SPM_SPACE "for", SPM_SPACE "with", SPM_SPACE "on", SPM_SPACE "as", SPM_SPACE "was",
	SPM_SPACE "he", SPM_SPACE "you", SPM_SPACE "are", SPM_SPACE "this", SPM_SPACE "by",
	SPM_SPACE "model", SPM_SPACE "token", "ly", "ion", "tion", "ent", "ation", SPM_SPACE "The",
};

/* ---- vocab ---------------------------------------------------------------------------- */

void qc_mkgguf_vocab_free(struct vocab *v)
{
	for (uint64_t i = 0; v->tok && i < v->n; i++)
		free(v->tok[i]);
	free(v->tok);
	free(v->score);
	free(v->ttype);
	memset(v, 0, sizeof *v);
}

static bool is_fixed_piece(const char *s)
{
	for (size_t i = 0; i < sizeof spm_pieces / sizeof spm_pieces[0]; i++)
		if (strcmp(spm_pieces[i], s) == 0)
			return true;
	return false;
}

/* k-th word of the bijective base-26 sequence a, b, .., z, aa, ab, ... */
static void word_of(uint64_t k, char *buf)
{
	char tmp[16];
	int n = 0;
	for (k++; k; k = (k - 1) / 26)
		tmp[n++] = (char)('a' + (k - 1) % 26);
	for (int i = 0; i < n; i++)
		buf[i] = tmp[n - 1 - i];
	buf[n] = '\0';
}

/* <unk> <s> </s>, the 256 byte tokens, the fixed pieces, then "▁word"/"word" pairs
 * until n tokens; every piece unique, as llama.cpp's token_to_id map requires. */
int qc_mkgguf_vocab_build(struct vocab *v, uint64_t n, struct qc_err *err)
{
	const size_t n_fixed = sizeof spm_pieces / sizeof spm_pieces[0];
	v->n = n;
	v->tok = calloc(n, sizeof *v->tok);
	v->score = calloc(n, sizeof *v->score);
	v->ttype = calloc(n, sizeof *v->ttype);
	if (!v->tok || !v->score || !v->ttype)
		goto out_nomem;
	char buf[32];
	uint64_t word = 0;
	for (uint64_t i = 0; i < n; i++) {
		if (i < 3) {
			snprintf(buf, sizeof buf, "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
			v->ttype[i] = i == 0 ? TOK_UNKNOWN : TOK_CONTROL;
		} else if (i < 259) {
			snprintf(buf, sizeof buf, "<0x%02X>", (unsigned)(i - 3));
			v->ttype[i] = TOK_BYTE;
		} else {
			uint64_t k = i - 259;
			if (k < n_fixed) {
				snprintf(buf, sizeof buf, "%s", spm_pieces[k]);
			} else {
				do {
					char w[16];
					word_of(word / 2, w);
					snprintf(buf, sizeof buf, "%s%s", word % 2 ? "" : SPM_SPACE, w);
					word++;
				} while (is_fixed_piece(buf));
			}
			v->ttype[i] = TOK_NORMAL;
			/* negation, not 0 - k: gcc and clang disagree on the sign of 0.0f - 0.0f
			 * after the u64 conversion; -(float)0 is -0.0 for both */
			v->score[i] = -(float)k;
		}
		v->tok[i] = strdup(buf);
		if (!v->tok[i])
			goto out_nomem;
	}
	return QC_OK;

out_nomem:
	qc_mkgguf_vocab_free(v);
	return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory building the vocab");
}
