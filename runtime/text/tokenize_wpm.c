/* tokenize_wpm.c — BERT WordPiece, as llama.cpp's llm_tokenizer_wpm_session.
 *
 * Owns: normalizing text into words and greedy longest-match tokenizing each.
 * Normalization, exactly llama.cpp's (not HF's BasicTokenizer): each code point
 * is replaced by the first code point of its NFD (so "é" -> "e", accents go),
 * white space splits words, NUL / U+FFFD / control characters are dropped, the
 * rest is lowercased; punctuation, ASCII symbols and CJK ideographs become
 * one-character words. Each word is matched with a leading U+2581 (the GGUF
 * converter stores word-initial pieces as "▁piece" and continuations bare, in
 * place of BERT's "##"); a word with an unmatchable position becomes [UNK].
 */
#define QC_VOCAB_INTERNAL
#include "vocab.h"

#include <stdlib.h>
#include <string.h>

/* The CJK ranges BERT isolates (including HF's 0x2B920 lower bound quirk). */
static bool is_cjk(uint32_t cp)
{
	return (cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0x3400 && cp <= 0x4dbf) ||
	       (cp >= 0x20000 && cp <= 0x2a6df) || (cp >= 0x2a700 && cp <= 0x2b73f) ||
	       (cp >= 0x2b740 && cp <= 0x2b81f) || (cp >= 0x2b920 && cp <= 0x2ceaf) ||
	       (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0x2f800 && cp <= 0x2fa1f);
}

struct words {
	char *buf;          /* word bytes, each word preceded by U+2581 */
	size_t n, cap;
	size_t *start;      /* (n_words + 1) offsets of each word's U+2581 */
	size_t n_words, cap_words;
	bool open;          /* the last word is still being appended to */
};

#define PHANTOM "\xe2\x96\x81"

static int words_put(struct words *w, const char *s, size_t n, struct qc_err *err)
{
	if (w->n + n > w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 256;
		while (cap < w->n + n)
			cap *= 2;
		char *p = realloc(w->buf, cap);
		if (!p)
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		w->buf = p;
		w->cap = cap;
	}
	memcpy(w->buf + w->n, s, n);
	w->n += n;
	return QC_OK;
}

static int word_open(struct words *w, struct qc_err *err)
{
	if (w->n_words + 2 > w->cap_words) {
		size_t cap = w->cap_words ? w->cap_words * 2 : 64;
		size_t *p = realloc(w->start, cap * sizeof(*p));
		if (!p)
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		w->start = p;
		w->cap_words = cap;
	}
	w->start[w->n_words++] = w->n;
	w->open = true;
	return words_put(w, PHANTOM, 3, err);
}

static int normalize(const char *text, size_t len, struct words *w, struct qc_err *err)
{
	int rc;
	for (size_t i = 0; i < len;) {
		uint32_t cp = qc_uc_nfd_first(qc_uc_decode(text, len, &i));
		unsigned f = qc_uc_flags(cp);
		if (f & QC_UC_WHITESPACE) {
			w->open = false;
			continue;
		}
		if (cp == 0 || cp == 0xfffd || (f & QC_UC_CONTROL))
			continue;
		char s[4];
		size_t sn = qc_uc_encode(qc_uc_tolower(cp), s);
		bool alone = (f & QC_UC_PUNCT) || (cp < 0x7f && (f & QC_UC_SYMBOL)) || is_cjk(cp);
		if (alone || !w->open)
			if ((rc = word_open(w, err)))
				return rc;
		if ((rc = words_put(w, s, sn, err)))
			return rc;
		if (alone)
			w->open = false;
	}
	if (w->n_words)
		w->start[w->n_words] = w->n;
	return QC_OK;
}

static int match_word(const struct qc_vocab *v, const char *s, size_t n, struct qc_ids *out,
		      struct qc_err *err)
{
	size_t mark = out->n;
	for (size_t i = 0; i < n; i++) {
		size_t j = i + v->max_token_len + 1 < n ? i + v->max_token_len + 1 : n;
		int32_t id = QC_TOKEN_NULL;
		for (; j > i; j--)
			if ((id = qc_vocab_lookup(v, s + i, j - i)) != QC_TOKEN_NULL)
				break;
		if (id == QC_TOKEN_NULL) {
			out->n = mark; /* one miss discards the whole word */
			break;
		}
		int rc = qc_ids_push(out, id, err);
		if (rc)
			return rc;
		i = j - 1;
	}
	/* llama.cpp emits the UNK id even when the vocab has none (-1); we emit nothing */
	if (out->n == mark && v->special[QC_SPECIAL_UNK] != QC_TOKEN_NULL)
		return qc_ids_push(out, v->special[QC_SPECIAL_UNK], err);
	return QC_OK;
}

int qc_wpm_tokenize(const struct qc_vocab *v, const char *text, size_t len, struct qc_ids *out,
		    struct qc_err *err)
{
	struct words w = { 0 };
	int rc = normalize(text, len, &w, err);
	for (size_t k = 0; !rc && k < w.n_words; k++)
		rc = match_word(v, w.buf + w.start[k], w.start[k + 1] - w.start[k], out, err);
	free(w.buf);
	free(w.start);
	return rc;
}
