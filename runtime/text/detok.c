/* detok.c — token ids back to bytes: single pieces, whole sequences, streaming.
 *
 * Owns: a token's piece (SPM/WPM: U+2581 -> ' ', <0xXX> -> that byte; BPE: each
 * alphabet character -> its byte; special tokens -> their text or nothing),
 * llama.cpp's whole-text clean-up (" ?" -> "?", " ' " -> "'", " 's" -> "'s", ...),
 * and the streaming detokenizer that only ever hands out valid UTF-8.
 * Matches llama.cpp llama_vocab::impl::token_to_piece and ::detokenize (the
 * leading-space strip after an SPM prefix, remove_special, the three clean-up
 * passes including their quirks). A BPE piece holding a character outside the
 * byte alphabet renders as llama.cpp's "[UNK_BYTE_0x..<text>]".
 * Streaming validity follows Unicode's "maximal subpart" rule for U+FFFD.
 */
#define QC_VOCAB_INTERNAL
#include "utf8.h"
#include "vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Output that either fills a fixed buffer (counting what did not fit) or grows. */
struct sink {
	char *p;
	size_t n, cap;
	bool grow;
	bool oom;
	bool strip; /* drop the next byte if it is a space (one-shot) */
};

static void put(struct sink *s, const char *b, size_t k)
{
	if (s->strip && k) {
		s->strip = false;
		if (b[0] == ' ') {
			b++;
			k--;
		}
	}
	if (!k)
		return;
	if (s->grow && s->n + k > s->cap && !s->oom) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		while (cap < s->n + k)
			cap *= 2;
		char *p = realloc(s->p, cap);
		if (p) {
			s->p = p;
			s->cap = cap;
		} else {
			s->oom = true;
		}
	}
	if (s->n < s->cap) {
		size_t room = s->cap - s->n;
		memcpy(s->p + s->n, b, k < room ? k : room);
	}
	s->n += k;
}

static void put_spm_normal(struct sink *s, const char *t, size_t n)
{
	size_t i = 0, run = 0;
	while (i < n) {
		if (n - i >= 3 && memcmp(t + i, "\xe2\x96\x81", 3) == 0) {
			put(s, t + run, i - run);
			put(s, " ", 1);
			i += 3;
			run = i;
		} else {
			i++;
		}
	}
	put(s, t + run, n - run);
}

static void put_spm_byte(struct sink *s, const char *t, size_t n)
{
	char hex[3] = { 0 };
	if (n < 3)
		return; /* not <0xXX>; llama.cpp would throw */
	memcpy(hex, t + 3, n - 3 < 2 ? n - 3 : 2);
	char b = (char)strtol(hex, NULL, 16);
	put(s, &b, 1);
}

static void put_bpe_normal(struct sink *s, const char *t, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint32_t cp = qc_uc_decode(t, n, &i);
		int b = qc_bpe_cp_to_byte(cp);
		if (b >= 0) {
			char c = (char)b;
			put(s, &c, 1);
			continue;
		}
		char u[4], hex[12];
		size_t k = qc_uc_encode(cp, u);
		put(s, "[UNK_BYTE_0x", 12);
		for (size_t j = 0; j < k; j++) {
			snprintf(hex, sizeof hex, "%02x", (unsigned char)u[j]);
			put(s, hex, 2);
		}
		put(s, t, n);
		put(s, "]", 1);
	}
}

static void put_piece(const struct qc_vocab *v, int32_t id, enum qc_piece_flags flags, struct sink *s)
{
	const struct qc_vocab_token *t = &v->tok[id];
	const uint32_t special = QC_TOKEN_ATTR_UNKNOWN | QC_TOKEN_ATTR_CONTROL;
	s->strip = flags & QC_PIECE_LSTRIP;
	if (!(flags & QC_PIECE_SPECIAL) && (t->attr & special))
		goto out;
	if (t->attr & (special | QC_TOKEN_ATTR_USER_DEFINED))
		put(s, t->text, t->len);
	else if ((t->attr & QC_TOKEN_ATTR_NORMAL) && v->type == QC_VOCAB_BPE)
		put_bpe_normal(s, t->text, t->len);
	else if (t->attr & QC_TOKEN_ATTR_NORMAL)
		put_spm_normal(s, t->text, t->len);
	else if ((t->attr & QC_TOKEN_ATTR_BYTE) && v->type != QC_VOCAB_BPE)
		put_spm_byte(s, t->text, t->len);
	/* unused/undefined tokens (and BPE byte tokens) render as nothing, as llama.cpp */
out:
	s->strip = false;
}

size_t qc_token_to_piece(const struct qc_vocab *v, int32_t id, char *buf, size_t cap,
			 enum qc_piece_flags flags)
{
	if (id < 0 || (uint32_t)id >= v->n_tokens)
		return 0;
	struct sink s = { .p = buf, .cap = buf ? cap : 0 };
	put_piece(v, id, flags, &s);
	return s.n;
}

/* llama.cpp's three clean-up passes, in place; each reads the pass's input and
 * compacts behind itself. Returns the new length. */
static size_t clean_spaces(char *t, size_t n)
{
	if (n < 2)
		return n;
	/* 1: " ?" " !" " ." " ," lose the space */
	size_t o = 1;
	for (size_t i = 1; i < n; i++) {
		char x = t[i];
		if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
			o--;
		t[o++] = x;
	}
	n = o;
	/* 2: " ' " becomes "'"; the swallowed right space is zeroed so that it cannot
	 * count as a left space for the next character */
	o = 1;
	for (size_t i = 1; i < n; i++) {
		char x = t[i];
		if (x == '\'' && i + 1 < n && t[i - 1] == ' ' && t[i + 1] == ' ') {
			o--;
			t[++i] = '\0';
		}
		t[o++] = x;
	}
	n = o;
	/* 3: " 's" " 'm" " 're" " 've" lose the space (" 't" " 'd" " 'll" keep it) */
	o = 1;
	for (size_t i = 1; i < n; i++) {
		char x = t[i];
		if (t[i - 1] == ' ' && x == '\'' && i + 1 < n) {
			char a = t[i + 1], b = i + 2 < n ? t[i + 2] : '\0';
			if (a == 's' || a == 'm' || (i + 2 < n && (a == 'r' || a == 'v') && b == 'e'))
				o--;
		}
		t[o++] = x;
	}
	return o;
}

int qc_detokenize(const struct qc_vocab *v, const int32_t *ids, size_t n, enum qc_detok_flags flags,
		  char **text, size_t *len, struct qc_err *err)
{
	struct sink s = { .grow = true };
	bool strip = v->add_space_prefix;
	*text = NULL;
	*len = 0;
	if ((flags & QC_DETOK_REMOVE_SPECIAL) && v->add_bos && n && ids[0] == v->special[QC_SPECIAL_BOS]) {
		strip = false;
		ids++;
		n--;
	}
	if ((flags & QC_DETOK_REMOVE_SPECIAL) && v->add_eos && n && ids[n - 1] == v->special[QC_SPECIAL_EOS])
		n--;
	enum qc_piece_flags pf = flags & QC_DETOK_UNPARSE_SPECIAL ? QC_PIECE_SPECIAL : 0;
	for (size_t i = 0; i < n; i++) {
		if (ids[i] < 0 || (uint32_t)ids[i] >= v->n_tokens) {
			free(s.p);
			return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "token id %d at position %zu not in 0..%u",
					  ids[i], i, v->n_tokens - 1);
		}
		put_piece(v, ids[i], pf | (strip ? QC_PIECE_LSTRIP : 0), &s);
		strip = false;
	}
	put(&s, "", 1); /* room for the NUL */
	if (s.oom) {
		free(s.p);
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory detokenizing %zu ids", n);
	}
	size_t k = s.n - 1;
	if (v->clean_spaces)
		k = clean_spaces(s.p, k);
	s.p[k] = '\0';
	*text = s.p;
	*len = k;
	return QC_OK;
}

/* ---- streaming ---- */

struct qc_detok {
	const struct qc_vocab *v;
	enum qc_detok_flags flags;
	bool started;
	unsigned char hold[4];  /* a valid but incomplete UTF-8 prefix */
	size_t n_hold;
	struct sink piece;      /* scratch for the current piece */
	char *out;              /* what push/flush hand back */
	size_t out_cap;
};

int qc_detok_new(const struct qc_vocab *v, enum qc_detok_flags flags, struct qc_detok **out,
		 struct qc_err *err)
{
	*out = calloc(1, sizeof(**out));
	if (!*out)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	(*out)->v = v;
	(*out)->flags = flags;
	(*out)->piece.grow = true;
	return QC_OK;
}

void qc_detok_free(struct qc_detok *d)
{
	if (!d)
		return;
	free(d->piece.p);
	free(d->out);
	free(d);
}

static int out_reserve(struct qc_detok *d, size_t n, struct qc_err *err)
{
	if (n <= d->out_cap)
		return QC_OK;
	size_t cap = d->out_cap ? d->out_cap : 64;
	while (cap < n)
		cap *= 2;
	char *p = realloc(d->out, cap);
	if (!p)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	d->out = p;
	d->out_cap = cap;
	return QC_OK;
}

int qc_detok_push(struct qc_detok *d, int32_t id, const char **text, size_t *len, struct qc_err *err)
{
	const struct qc_vocab *v = d->v;
	bool remove = d->flags & QC_DETOK_REMOVE_SPECIAL;
	*text = "";
	*len = 0;
	if (id < 0 || (uint32_t)id >= v->n_tokens)
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "token id %d not in 0..%u", id, v->n_tokens - 1);
	bool first = !d->started;
	d->started = true;
	if (remove && first && v->add_bos && id == v->special[QC_SPECIAL_BOS])
		return QC_OK; /* and, as in qc_detokenize, no space strip after it */
	if (remove && v->add_eos && id == v->special[QC_SPECIAL_EOS])
		return QC_OK;
	enum qc_piece_flags pf = d->flags & QC_DETOK_UNPARSE_SPECIAL ? QC_PIECE_SPECIAL : 0;
	if (first && v->add_space_prefix)
		pf |= QC_PIECE_LSTRIP;
	d->piece.n = 0;
	put(&d->piece, (const char *)d->hold, d->n_hold);
	put_piece(v, id, pf, &d->piece);
	if (d->piece.oom) {
		d->piece.oom = false;
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	}
	/* worst case every byte becomes a 3-byte U+FFFD */
	int rc = out_reserve(d, d->piece.n * 3 + 1, err);
	if (rc)
		return rc;
	const unsigned char *s = (const unsigned char *)d->piece.p;
	size_t n = d->piece.n, i = 0, o = 0;
	d->n_hold = 0;
	while (i < n) {
		int k = qc_utf8_char(s + i, n - i);
		if (k > 0) {
			memcpy(d->out + o, s + i, (size_t)k);
			o += (size_t)k;
			i += (size_t)k;
		} else if (k < 0) {
			memcpy(d->out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i += (size_t)-k;
		} else {
			memcpy(d->hold, s + i, n - i);
			d->n_hold = n - i;
			break;
		}
	}
	*text = d->out;
	*len = o;
	return QC_OK;
}

void qc_detok_flush(struct qc_detok *d, const char **text, size_t *len)
{
	*text = d->n_hold ? "\xef\xbf\xbd" : "";
	*len = d->n_hold ? 3 : 0;
	d->n_hold = 0;
	d->started = false;
}
