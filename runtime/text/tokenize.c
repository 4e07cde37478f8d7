/* tokenize.c — qc_tokenize: special-token partitioning, then per-model tokenizing.
 *
 * Owns: cutting the input at occurrences of special-token texts (user-defined
 * tokens always; control/unknown tokens only with QC_TOK_PARSE_SPECIAL), the SPM
 * space prefix and U+2581 escaping, and adding BOS/EOS (CLS/SEP for BERT).
 * Matches llama.cpp llama_vocab::impl::tokenize and tokenizer_st_partition:
 * special tokens are tried longest text first; each one splits every remaining
 * text fragment at all its non-overlapping occurrences, left to right;
 * LSTRIP/RSTRIP tokens swallow adjacent ASCII white space.
 * Non-goal: any normalization beyond what llama.cpp does.
 */
#define QC_VOCAB_INTERNAL
#include "vocab.h"

#include <stdlib.h>
#include <string.h>

/* A piece of the input: a special token, or raw text [off, off + len). */
struct frag {
	int32_t tok; /* QC_TOKEN_NULL for raw text */
	size_t off, len;
};

struct frags {
	struct frag *p;
	size_t n, cap;
};

static int frag_push(struct frags *f, int32_t tok, size_t off, size_t len, struct qc_err *err)
{
	if (f->n == f->cap) {
		size_t cap = f->cap ? f->cap * 2 : 16;
		struct frag *p = realloc(f->p, cap * sizeof(*p));
		if (!p)
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		f->p = p;
		f->cap = cap;
	}
	f->p[f->n++] = (struct frag){ .tok = tok, .off = off, .len = len };
	return QC_OK;
}

/* isspace() in the C locale, which is what llama.cpp's strip uses. */
static bool c_space(char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Split every raw fragment of *cur at each occurrence of token id into *next. */
static int split_at(const struct qc_vocab *v, int32_t id, const char *text, struct frags *cur,
		    struct frags *next, struct qc_err *err)
{
	const struct qc_vocab_token *t = &v->tok[id];
	int rc;
	next->n = 0;
	for (size_t k = 0; k < cur->n; k++) {
		struct frag f = cur->p[k];
		if (f.tok != QC_TOKEN_NULL) {
			if ((rc = frag_push(next, f.tok, 0, 0, err)))
				return rc;
			continue;
		}
		size_t pos = f.off, end = f.off + f.len;
		const char *m;
		while (pos < end && (m = memmem(text + pos, end - pos, t->text, t->len)) != NULL) {
			size_t at = (size_t)(m - text), left = at - pos;
			if (t->attr & QC_TOKEN_ATTR_LSTRIP)
				while (left && c_space(text[pos + left - 1]))
					left--;
			if (left && (rc = frag_push(next, QC_TOKEN_NULL, pos, left, err)))
				return rc;
			if ((rc = frag_push(next, id, 0, 0, err)))
				return rc;
			pos = at + t->len;
			if ((t->attr & QC_TOKEN_ATTR_RSTRIP) && pos < end)
				while (pos < end && c_space(text[pos]))
					pos++;
		}
		if (pos < end && (rc = frag_push(next, QC_TOKEN_NULL, pos, end - pos, err)))
			return rc;
	}
	return QC_OK;
}

static int partition(const struct qc_vocab *v, const char *text, size_t len, bool parse_special,
		     struct frags *out, struct qc_err *err)
{
	struct frags tmp = { 0 };
	int rc = QC_OK;
	if (len && (rc = frag_push(out, QC_TOKEN_NULL, 0, len, err)))
		return rc;
	for (uint32_t i = 0; i < v->n_partition && out->n; i++) {
		int32_t id = v->partition[i];
		const struct qc_vocab_token *t = &v->tok[id];
		if (!parse_special && (t->attr & (QC_TOKEN_ATTR_CONTROL | QC_TOKEN_ATTR_UNKNOWN)))
			continue;
		if ((rc = split_at(v, id, text, out, &tmp, err)))
			break;
		struct frags s = *out;
		*out = tmp;
		tmp = s;
	}
	free(tmp.p);
	return rc;
}

/* SPM input: optional leading space, then every ' ' as U+2581. */
static int spm_fragment(const struct qc_vocab *v, const char *s, size_t n, bool prefix,
			struct qc_ids *out, struct qc_err *err)
{
	size_t spaces = prefix;
	for (size_t i = 0; i < n; i++)
		spaces += s[i] == ' ';
	char *buf = malloc(n + 2 * spaces + 1);
	if (!buf)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	size_t o = 0;
	if (prefix) {
		memcpy(buf, "\xe2\x96\x81", 3);
		o = 3;
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] == ' ') {
			memcpy(buf + o, "\xe2\x96\x81", 3);
			o += 3;
		} else {
			buf[o++] = s[i];
		}
	}
	int rc = qc_spm_tokenize(v, buf, o, out, err);
	free(buf);
	return rc;
}

static int push_special(const struct qc_vocab *v, enum qc_special which, const char *what,
			struct qc_ids *out, struct qc_err *err)
{
	if (v->special[which] == QC_TOKEN_NULL)
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
				  "the vocab asks for a %s token but has none", what);
	return qc_ids_push(out, v->special[which], err);
}

int qc_tokenize(const struct qc_vocab *v, const char *text, size_t len, enum qc_tok_flags flags,
		int32_t **ids, size_t *n_ids, struct qc_err *err)
{
	struct qc_ids out = { 0 };
	struct frags fr = { 0 };
	bool add_special = flags & QC_TOK_ADD_SPECIAL;
	int rc;

	*ids = NULL;
	*n_ids = 0;
	if (len > QC_TOK_MAX_TEXT)
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "text of %zu bytes exceeds the %u byte limit",
				  len, QC_TOK_MAX_TEXT);
	if ((rc = partition(v, text, len, flags & QC_TOK_PARSE_SPECIAL, &fr, err)))
		goto out_free;

	bool bos = v->type == QC_VOCAB_WPM ? add_special : add_special && v->add_bos;
	bool eos = add_special && v->add_eos && v->type != QC_VOCAB_WPM;
	if (bos && (rc = push_special(v, QC_SPECIAL_BOS, "BOS", &out, err)))
		goto out_free;

	bool after_special = true; /* SPM: text at the start or after a special token gets " " */
	for (size_t k = 0; k < fr.n; k++) {
		const struct frag *f = &fr.p[k];
		if (f->tok != QC_TOKEN_NULL) {
			rc = qc_ids_push(&out, f->tok, err);
			after_special = true;
		} else if (v->type == QC_VOCAB_SPM) {
			rc = spm_fragment(v, text + f->off, f->len, v->add_space_prefix && after_special, &out,
					  err);
			after_special = false;
		} else if (v->type == QC_VOCAB_BPE) {
			rc = qc_bpe_tokenize(v, text + f->off, f->len, &out, err);
		} else {
			rc = qc_wpm_tokenize(v, text + f->off, f->len, &out, err);
		}
		if (rc)
			goto out_free;
	}

	if (eos && (rc = push_special(v, QC_SPECIAL_EOS, "EOS", &out, err)))
		goto out_free;
	if (add_special && v->type == QC_VOCAB_WPM && (rc = push_special(v, QC_SPECIAL_SEP, "SEP", &out, err)))
		goto out_free;

	*ids = out.p;
	*n_ids = out.n;
	out.p = NULL;
out_free:
	free(out.p);
	free(fr.p);
	return rc;
}
