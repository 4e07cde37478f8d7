/* tokenize_spm.c — SentencePiece-style ("llama") tokenizer over escaped text.
 *
 * Owns: splitting text into UTF-8 characters, merging the adjacent pair whose
 * concatenation is the best-scoring token until none is left, and byte fallback
 * (<0xXX> tokens) for whatever did not become a token.
 * The caller (tokenize.c) has already added the leading space and turned every
 * ' ' into U+2581, as llama.cpp does before its SPM session.
 * Matches llama.cpp llm_tokenizer_spm_session: highest score first, ties to the
 * leftmost pair; a pair is stale once either side has grown. Characters are cut
 * by lead byte only (no validation), so invalid UTF-8 falls back to bytes.
 * Non-goal: sampling/unigram (UGM) segmentation.
 */
#define QC_VOCAB_INTERNAL
#include "vocab.h"

#include <stdlib.h>

int32_t qc_spm_byte_token(const struct qc_vocab *v, uint8_t b)
{
	static const char hex[] = "0123456789ABCDEF";
	char name[6] = { '<', '0', 'x', hex[b >> 4], hex[b & 15], '>' };
	int32_t id = qc_vocab_lookup(v, name, sizeof name);
	if (id != QC_TOKEN_NULL)
		return id;
	char raw = (char)b;
	return qc_vocab_lookup(v, &raw, 1);
}

struct spm_sym {
	int prev, next;
	uint32_t off, n; /* bytes of text */
};

struct spm_pair {
	int left, right;
	float score;
	uint32_t size;
};

struct spm_heap {
	struct spm_pair *p;
	size_t n, cap;
};

/* Best score first; equal scores: leftmost first. */
static bool pair_before(const struct spm_pair *a, const struct spm_pair *b)
{
	return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int heap_push(struct spm_heap *h, struct spm_pair x, struct qc_err *err)
{
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 64;
		struct spm_pair *p = realloc(h->p, cap * sizeof(*p));
		if (!p)
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		h->p = p;
		h->cap = cap;
	}
	size_t i = h->n++;
	while (i > 0 && pair_before(&x, &h->p[(i - 1) / 2])) {
		h->p[i] = h->p[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h->p[i] = x;
	return QC_OK;
}

static struct spm_pair heap_pop(struct spm_heap *h)
{
	struct spm_pair top = h->p[0], last = h->p[--h->n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && pair_before(&h->p[c + 1], &h->p[c]))
			c++;
		if (!pair_before(&h->p[c], &last))
			break;
		h->p[i] = h->p[c];
		i = c;
	}
	if (h->n)
		h->p[i] = last;
	return top;
}

static int try_pair(const struct qc_vocab *v, const char *text, const struct spm_sym *sym,
		    struct spm_heap *h, int l, int r, struct qc_err *err)
{
	if (l < 0 || r < 0)
		return QC_OK;
	uint32_t size = sym[l].n + sym[r].n;
	int32_t id = qc_vocab_lookup(v, text + sym[l].off, size);
	if (id == QC_TOKEN_NULL)
		return QC_OK;
	return heap_push(h, (struct spm_pair){ .left = l, .right = r, .score = v->tok[id].score, .size = size },
			 err);
}

int qc_spm_tokenize(const struct qc_vocab *v, const char *text, size_t len, struct qc_ids *out,
		    struct qc_err *err)
{
	int rc = QC_OK;
	struct spm_heap h = { 0 };
	if (!len)
		return QC_OK;
	struct spm_sym *sym = malloc(len * sizeof(*sym));
	if (!sym)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory for %zu bytes of text", len);
	int n = 0;
	for (size_t off = 0; off < len; n++) {
		size_t cl = qc_uc_lead_len((unsigned char)text[off]);
		if (cl > len - off)
			cl = len - off;
		sym[n] = (struct spm_sym){ .prev = n - 1, .next = off + cl == len ? -1 : n + 1,
					   .off = (uint32_t)off, .n = (uint32_t)cl };
		off += cl;
	}
	for (int i = 1; i < n; i++)
		if ((rc = try_pair(v, text, sym, &h, i - 1, i, err)))
			goto out_free;
	while (h.n) {
		struct spm_pair p = heap_pop(&h);
		struct spm_sym *l = &sym[p.left], *r = &sym[p.right];
		if (!l->n || !r->n || l->n + r->n != p.size)
			continue;
		l->n += r->n;
		r->n = 0;
		l->next = r->next;
		if (r->next >= 0)
			sym[r->next].prev = p.left;
		if ((rc = try_pair(v, text, sym, &h, l->prev, p.left, err)) ||
		    (rc = try_pair(v, text, sym, &h, p.left, l->next, err)))
			goto out_free;
	}
	/* Merged symbols are tokens by construction; single characters may not be. */
	for (int i = 0; i != -1; i = sym[i].next) {
		int32_t id = qc_vocab_lookup(v, text + sym[i].off, sym[i].n);
		if (id != QC_TOKEN_NULL) {
			if ((rc = qc_ids_push(out, id, err)))
				goto out_free;
			continue;
		}
		for (uint32_t k = 0; k < sym[i].n; k++) {
			uint8_t b = (uint8_t)text[sym[i].off + k];
			id = qc_spm_byte_token(v, b);
			if (id == QC_TOKEN_NULL) {
				rc = qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
						"vocab has no byte-fallback token for 0x%02X", b);
				goto out_free;
			}
			if ((rc = qc_ids_push(out, id, err)))
				goto out_free;
		}
	}
out_free:
	free(h.p);
	free(sym);
	return rc;
}
