/* vocab.c — the vocab object: token and merge hash tables, special ids, token
 * attributes, and the code point classes the tokenizers share.
 *
 * Owns: building a struct qc_vocab from loader pieces (qc_vocab_begin ...
 * qc_vocab_finish, used by vocab_gguf.c and vocab_json.c) and all queries on it.
 * Matches llama.cpp llama_vocab::impl::load: per-model defaults, special ids found
 * by text (EOT, EOM, FIM), the end-of-generation set, attribute overrides, the
 * partition list. Code point classes are llama.cpp's unicode-data (Unicode 15.1
 * categories, White_Space, simple lowercase, first code point of NFD), read from
 * ICU and pinned to 15.1 whatever ICU's own version.
 * Invariants: token texts are unique; hash tables stay at most half full.
 */
#define QC_VOCAB_INTERNAL
#include "vocab.h"

#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/utf16.h>

#include "arena.h"

/* Token counts above this are refused before allocating (llama.cpp ids are int32). */
#define MAX_TOKENS (1u << 24)
#define MAX_MERGES (1u << 24)

int qc_ids_push(struct qc_ids *ids, int32_t id, struct qc_err *err)
{
	if (ids->n == ids->cap) {
		size_t cap = ids->cap ? ids->cap * 2 : 64;
		int32_t *p = realloc(ids->p, cap * sizeof(*p));
		if (!p)
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory for %zu token ids", cap);
		ids->p = p;
		ids->cap = cap;
	}
	ids->p[ids->n++] = id;
	return QC_OK;
}

/* ---- hashing ---------------------------------------------------------------- */

static uint64_t mix64(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

static uint64_t hash_bytes(const char *p, size_t n, uint64_t seed)
{
	uint64_t h = seed ^ ((uint64_t)n * 0x9e3779b97f4a7c15ULL);
	uint64_t w;
	for (; n >= 8; p += 8, n -= 8) {
		memcpy(&w, p, 8);
		h = (h ^ mix64(w)) * 0x9e3779b97f4a7c15ULL;
	}
	w = 0;
	if (n)
		memcpy(&w, p, n);
	return mix64(h ^ mix64(w + n));
}

static size_t table_size(uint64_t n)
{
	size_t sz = 16;
	while (sz < 2 * n)
		sz *= 2;
	return sz;
}

/* A slot keeps the top half of the hash beside the index, so a probe only touches
 * the entry itself when the tags agree (the tables are too big for cache). */
#define SLOT_TAG(h) ((h) & 0xffffffff00000000ULL)
#define SLOT_IDX(s) ((uint32_t)(s) - 1)

int32_t qc_vocab_lookup(const struct qc_vocab *v, const char *text, size_t len)
{
	uint64_t h = hash_bytes(text, len, 0);
	for (size_t i = h & v->tok_mask;; i = (i + 1) & v->tok_mask) {
		uint64_t s = v->tok_slot[i];
		if (!s)
			return QC_TOKEN_NULL;
		if (SLOT_TAG(s) != SLOT_TAG(h))
			continue;
		const struct qc_vocab_token *t = &v->tok[SLOT_IDX(s)];
		if (t->len == len && memcmp(t->text, text, len) == 0)
			return (int32_t)SLOT_IDX(s);
	}
}

static uint64_t merge_hash(const char *l, size_t ln, const char *r, size_t rn)
{
	return hash_bytes(r, rn, hash_bytes(l, ln, 0x5bd1e995));
}

static bool merge_is(const struct qc_vocab_merge *m, const char *l, size_t ln, const char *r, size_t rn)
{
	return m->split == ln && m->len - m->split - 1 == rn && memcmp(m->text, l, ln) == 0 &&
	       memcmp(m->text + ln + 1, r, rn) == 0;
}

int32_t qc_vocab_merge_rank(const struct qc_vocab *v, const char *l, size_t ln, const char *r, size_t rn)
{
	if (!v->n_merges)
		return -1;
	uint64_t h = merge_hash(l, ln, r, rn);
	for (size_t i = h & v->merge_mask;; i = (i + 1) & v->merge_mask) {
		uint64_t s = v->merge_slot[i];
		if (!s)
			return -1;
		if (SLOT_TAG(s) == SLOT_TAG(h) && merge_is(&v->merge[SLOT_IDX(s)], l, ln, r, rn))
			return (int32_t)SLOT_IDX(s);
	}
}

/* ---- building ----------------------------------------------------------------- */

static bool str_is(const char *s, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

int qc_vocab_begin(const char *model, size_t model_len, const char *pre, size_t pre_len,
		   const char *src, struct qc_vocab **out, struct qc_err *err)
{
	*out = NULL;
	if (str_is(model, model_len, "t5") || str_is(model, model_len, "rwkv") ||
	    str_is(model, model_len, "no_vocab") || str_is(model, model_len, "none"))
		return qc_err_set(err, QC_EUNSUPPORTED, src, NULL, -1,
				  "tokenizer model '%.*s' is not supported (only llama, gpt2, bert)",
				  (int)model_len, model);

	enum qc_vocab_type type;
	if (str_is(model, model_len, "llama"))
		type = QC_VOCAB_SPM;
	else if (str_is(model, model_len, "gpt2"))
		type = QC_VOCAB_BPE;
	else if (str_is(model, model_len, "bert"))
		type = QC_VOCAB_WPM;
	else
		return qc_err_set(err, QC_EFORMAT, src, NULL, -1, "unknown tokenizer model '%.*s'",
				  (int)(model_len > 64 ? 64 : model_len), model);

	struct qc_vocab *v = calloc(1, sizeof(*v));
	if (!v)
		return qc_err_set(err, QC_ENOMEM, src, NULL, -1, "out of memory");
	v->arena = qc_arena_new();
	if (!v->arena) {
		free(v);
		return qc_err_set(err, QC_ENOMEM, src, NULL, -1, "out of memory");
	}
	v->type = type;
	v->pre = QC_PRE_DEFAULT;
	for (int i = 0; i < QC_SPECIAL_COUNT; i++)
		v->special[i] = QC_TOKEN_NULL;
	v->pre_name = qc_arena_strndup(v->arena, pre ? pre : "", pre ? pre_len : 0);
	if (!v->pre_name) {
		qc_vocab_free(v);
		return qc_err_set(err, QC_ENOMEM, src, NULL, -1, "out of memory");
	}

	/* llama.cpp's per-model defaults; GGUF keys override them later. */
	switch (type) {
	case QC_VOCAB_SPM:
		v->special[QC_SPECIAL_BOS] = 1;
		v->special[QC_SPECIAL_EOS] = 2;
		v->special[QC_SPECIAL_UNK] = 0;
		v->add_space_prefix = true;
		v->add_bos = true;
		break;
	case QC_VOCAB_WPM:
		v->special[QC_SPECIAL_BOS] = 101;
		v->special[QC_SPECIAL_UNK] = 100;
		v->special[QC_SPECIAL_SEP] = 102;
		v->special[QC_SPECIAL_PAD] = 0;
		v->special[QC_SPECIAL_MASK] = 103;
		v->clean_spaces = true;
		v->add_bos = true;
		break;
	case QC_VOCAB_BPE: {
		v->special[QC_SPECIAL_BOS] = 11;
		v->special[QC_SPECIAL_EOS] = 11;
		v->clean_spaces = true;
		int rc = qc_bpe_pre_resolve(v, pre ? pre : "default", pre ? pre_len : 7, src, err);
		if (rc) {
			qc_vocab_free(v);
			return rc;
		}
		if (!pre)
			QC_WARN_ONCE("%s: no tokenizer.ggml.pre; using the 'default' pre-tokenizer "
				     "(llama.cpp warns that quality degrades)", src ? src : "vocab");
		break;
	}
	}
	*out = v;
	return QC_OK;
}

int qc_vocab_alloc_tokens(struct qc_vocab *v, uint64_t n, const char *src, struct qc_err *err)
{
	if (n == 0 || n > MAX_TOKENS)
		return qc_err_set(err, QC_ERANGE, src, NULL, -1, "token count %llu not in 1..%u",
				  (unsigned long long)n, MAX_TOKENS);
	v->tok = qc_arena_calloc(v->arena, (size_t)n, sizeof(*v->tok));
	if (!v->tok)
		return qc_err_set(err, QC_ENOMEM, src, NULL, -1, "out of memory for %llu tokens",
				  (unsigned long long)n);
	v->n_tokens = (uint32_t)n;
	return QC_OK;
}

static uint32_t type_to_attr(int64_t type)
{
	switch (type) {
	case QC_TOKEN_TYPE_UNKNOWN: return QC_TOKEN_ATTR_UNKNOWN;
	case QC_TOKEN_TYPE_UNUSED: return QC_TOKEN_ATTR_UNUSED;
	case QC_TOKEN_TYPE_NORMAL: return QC_TOKEN_ATTR_NORMAL;
	case QC_TOKEN_TYPE_CONTROL: return QC_TOKEN_ATTR_CONTROL;
	case QC_TOKEN_TYPE_USER_DEFINED: return QC_TOKEN_ATTR_USER_DEFINED;
	case QC_TOKEN_TYPE_BYTE: return QC_TOKEN_ATTR_BYTE;
	default: return 0; /* undefined: rendered as "" and never matched, as llama.cpp */
	}
}

int qc_vocab_set_token(struct qc_vocab *v, uint32_t id, const char *text, size_t len, float score,
		       int64_t type, struct qc_err *err)
{
	QC_ASSERT(id < v->n_tokens);
	char empty[32];
	if (len == 0) {
		/* llama.cpp renames empty tokens so every id keeps a distinct text */
		len = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%u]", id);
		text = empty;
	}
	if (len > UINT32_MAX / 2)
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "token %u is %zu bytes long", id, len);
	struct qc_vocab_token *t = &v->tok[id];
	t->text = qc_arena_strndup(v->arena, text, len);
	if (!t->text)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory for token %u", id);
	t->len = (uint32_t)len;
	t->score = score;
	t->attr = type_to_attr(type);
	return QC_OK;
}

int qc_vocab_alloc_merges(struct qc_vocab *v, uint64_t n, const char *src, struct qc_err *err)
{
	if (n > MAX_MERGES)
		return qc_err_set(err, QC_ERANGE, src, NULL, -1, "merge count %llu above %u",
				  (unsigned long long)n, MAX_MERGES);
	v->has_merges = true;
	if (n == 0)
		return QC_OK;
	v->merge = qc_arena_calloc(v->arena, (size_t)n, sizeof(*v->merge));
	if (!v->merge)
		return qc_err_set(err, QC_ENOMEM, src, NULL, -1, "out of memory for %llu merges",
				  (unsigned long long)n);
	v->n_merges = (uint32_t)n;
	return QC_OK;
}

int qc_vocab_set_merge(struct qc_vocab *v, uint32_t rank, const char *text, size_t len, struct qc_err *err)
{
	QC_ASSERT(rank < v->n_merges);
	if (len > UINT32_MAX / 2)
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "merge %u is %zu bytes long", rank, len);
	struct qc_vocab_merge *m = &v->merge[rank];
	m->text = qc_arena_strndup(v->arena, text, len);
	if (!m->text)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory for merge %u", rank);
	m->len = (uint32_t)len;
	/* the separator is the first space after the first byte, as llama.cpp splits;
	 * a line without one keeps split = 0 and is never looked up */
	const char *sp = len > 1 ? memchr(text + 1, ' ', len - 1) : NULL;
	m->split = sp ? (uint32_t)(sp - text) : 0;
	return QC_OK;
}

void qc_vocab_set_special(struct qc_vocab *v, enum qc_special which, int64_t id, const char *key)
{
	if (id < 0 || id >= (int64_t)v->n_tokens) {
		QC_WARN_ONCE("bad special token %s = %lld (vocab has %u tokens); keeping the default",
			     key, (long long)id, v->n_tokens);
		return;
	}
	v->special[which] = (int32_t)id;
}

int qc_vocab_set_chat_template(struct qc_vocab *v, const char *s, size_t len, struct qc_err *err)
{
	v->chat_template = qc_arena_strndup(v->arena, s, len);
	if (!v->chat_template)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory for the chat template");
	return QC_OK;
}

/* Building probes ~400k random slots of multi-MB tables: hash a batch ahead and
 * prefetch its slots so the cache misses overlap instead of queueing. */
#define BATCH 16

static int build_token_table(struct qc_vocab *v, const char *src, struct qc_err *err)
{
	size_t sz = table_size(v->n_tokens);
	uint64_t hb[BATCH];
	v->tok_slot = qc_arena_calloc(v->arena, sz, sizeof(*v->tok_slot));
	if (!v->tok_slot)
		return qc_err_set(err, QC_ENOMEM, src, NULL, -1, "out of memory for the token table");
	v->tok_mask = sz - 1;
	for (uint32_t id = 0; id < v->n_tokens; id++) {
		if (id % BATCH == 0)
			for (uint32_t k = 0; k < BATCH && id + k < v->n_tokens; k++) {
				const struct qc_vocab_token *t = &v->tok[id + k];
				hb[k] = hash_bytes(t->text, t->len, 0);
				__builtin_prefetch(&v->tok_slot[hb[k] & v->tok_mask], 1);
			}
		const struct qc_vocab_token *t = &v->tok[id];
		uint64_t h = hb[id % BATCH], s;
		size_t i = h & v->tok_mask;
		for (; (s = v->tok_slot[i]) != 0; i = (i + 1) & v->tok_mask) {
			const struct qc_vocab_token *o = &v->tok[SLOT_IDX(s)];
			if (SLOT_TAG(s) == SLOT_TAG(h) && o->len == t->len && memcmp(o->text, t->text, t->len) == 0)
				return qc_err_set(err, QC_EFORMAT, src, NULL, -1,
						  "tokens %u and %u have the same text '%.*s'", SLOT_IDX(s), id,
						  (int)(t->len > 40 ? 40 : t->len), t->text);
		}
		v->tok_slot[i] = SLOT_TAG(h) | (id + 1);
		if (t->len > v->max_token_len)
			v->max_token_len = t->len;
	}
	return QC_OK;
}

static uint64_t merge_line_hash(const struct qc_vocab_merge *m)
{
	if (!m->split)
		return 0; /* never inserted */
	return merge_hash(m->text, m->split, m->text + m->split + 1, m->len - m->split - 1);
}

static int build_merge_table(struct qc_vocab *v, const char *src, struct qc_err *err)
{
	if (!v->n_merges)
		return QC_OK;
	size_t sz = table_size(v->n_merges);
	uint64_t hb[BATCH];
	v->merge_slot = qc_arena_calloc(v->arena, sz, sizeof(*v->merge_slot));
	if (!v->merge_slot)
		return qc_err_set(err, QC_ENOMEM, src, NULL, -1, "out of memory for the merge table");
	v->merge_mask = sz - 1;
	for (uint32_t r = 0; r < v->n_merges; r++) {
		if (r % BATCH == 0)
			for (uint32_t k = 0; k < BATCH && r + k < v->n_merges; k++) {
				hb[k] = merge_line_hash(&v->merge[r + k]);
				__builtin_prefetch(&v->merge_slot[hb[k] & v->merge_mask], 1);
			}
		const struct qc_vocab_merge *m = &v->merge[r];
		if (!m->split)
			continue;
		const char *rt = m->text + m->split + 1;
		size_t rn = m->len - m->split - 1;
		uint64_t h = hb[r % BATCH], s;
		size_t i = h & v->merge_mask;
		bool seen = false;
		for (; !seen && (s = v->merge_slot[i]) != 0; i = (i + 1) & v->merge_mask)
			seen = SLOT_TAG(s) == SLOT_TAG(h) && merge_is(&v->merge[SLOT_IDX(s)], m->text, m->split, rt, rn);
		/* a repeated line keeps its first (best) rank, as llama.cpp's emplace */
		if (!seen)
			v->merge_slot[i] = SLOT_TAG(h) | (r + 1);
	}
	return QC_OK;
}

/* Texts llama.cpp recognizes special tokens by when the source does not name them.
 * Where several are present we take the first listed (llama.cpp takes whichever its
 * hash map yields first). */
static const struct {
	enum qc_special which;
	const char *texts[8];
} by_text[] = {
	{ QC_SPECIAL_EOT, { "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
			    "<EOT>", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>" } },
	{ QC_SPECIAL_EOM, { "<|eom_id|>" } },
	{ QC_SPECIAL_FIM_PRE, { "<|fim_prefix|>", "<fim-prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
				"<PRE>" } },
	{ QC_SPECIAL_FIM_SUF, { "<|fim_suffix|>", "<fim-suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>",
				"<SUF>" } },
	{ QC_SPECIAL_FIM_MID, { "<|fim_middle|>", "<fim-middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
				"<MID>" } },
	{ QC_SPECIAL_FIM_PAD, { "<|fim_pad|>", "<fim-pad>", "<PAD>" } },
	{ QC_SPECIAL_FIM_REP, { "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>" } },
	{ QC_SPECIAL_FIM_SEP, { "<|file_sep|>" } },
};

/* Every token with one of these texts ends generation. */
static const char *const eog_texts[] = {
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>",
};

static int32_t find_cstr(const struct qc_vocab *v, const char *s)
{
	return qc_vocab_lookup(v, s, strlen(s));
}

/* llama.cpp retypes end-of-turn-looking tokens that the converter left normal. */
static void force_control(struct qc_vocab *v, int32_t id)
{
	if (!(v->tok[id].attr & QC_TOKEN_ATTR_CONTROL))
		v->tok[id].attr = QC_TOKEN_ATTR_CONTROL;
}

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return (x > y) - (x < y);
}

static int find_special_by_text(struct qc_vocab *v, const char *src, struct qc_err *err)
{
	for (size_t k = 0; k < sizeof by_text / sizeof by_text[0]; k++) {
		if (v->special[by_text[k].which] != QC_TOKEN_NULL)
			continue;
		for (int j = 0; j < 8 && by_text[k].texts[j]; j++) {
			int32_t id = find_cstr(v, by_text[k].texts[j]);
			if (id != QC_TOKEN_NULL) {
				v->special[by_text[k].which] = id;
				force_control(v, id);
				break;
			}
		}
	}

	/* the end-of-generation set: at most 3 FIM + 7 by text + EOS/EOT/EOM */
	int32_t eog[16];
	uint32_t n = 0;
	const enum qc_special from_ids[] = { QC_SPECIAL_FIM_PAD, QC_SPECIAL_FIM_REP, QC_SPECIAL_FIM_SEP,
					     QC_SPECIAL_EOS, QC_SPECIAL_EOT, QC_SPECIAL_EOM };
	for (size_t k = 0; k < sizeof eog_texts / sizeof eog_texts[0]; k++) {
		int32_t id = find_cstr(v, eog_texts[k]);
		if (id != QC_TOKEN_NULL) {
			eog[n++] = id;
			force_control(v, id);
		}
	}
	for (size_t k = 0; k < sizeof from_ids / sizeof from_ids[0]; k++)
		if (v->special[from_ids[k]] != QC_TOKEN_NULL)
			eog[n++] = v->special[from_ids[k]];
	qsort(eog, n, sizeof eog[0], cmp_i32);
	uint32_t u = 0;
	for (uint32_t i = 0; i < n; i++)
		if (!u || eog[u - 1] != eog[i])
			eog[u++] = eog[i];
	v->eog = qc_arena_calloc(v->arena, u ? u : 1, sizeof(*v->eog));
	if (!v->eog)
		return qc_err_set(err, QC_ENOMEM, src, NULL, -1, "out of memory");
	memcpy(v->eog, eog, u * sizeof(*eog));
	v->n_eog = u;
	return QC_OK;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static int build_partition(struct qc_vocab *v, const char *src, struct qc_err *err)
{
	const uint32_t kinds = QC_TOKEN_ATTR_CONTROL | QC_TOKEN_ATTR_USER_DEFINED | QC_TOKEN_ATTR_UNKNOWN;
	uint32_t n = 0;
	for (uint32_t id = 0; id < v->n_tokens; id++)
		n += (v->tok[id].attr & kinds) != 0;
	v->partition = qc_arena_calloc(v->arena, n ? n : 1, sizeof(*v->partition));
	uint64_t *key = malloc((n ? n : 1) * sizeof(*key));
	if (!v->partition || !key) {
		free(key);
		return qc_err_set(err, QC_ENOMEM, src, NULL, -1, "out of memory");
	}
	/* Longest text first so "<|im_start|>" wins over "<|im". llama.cpp's std::sort
	 * leaves equal lengths in an unspecified order; we break ties by id. */
	n = 0;
	for (uint32_t id = 0; id < v->n_tokens; id++)
		if (v->tok[id].attr & kinds)
			key[n++] = (uint64_t)(UINT32_MAX - v->tok[id].len) << 32 | id;
	qsort(key, n, sizeof(*key), cmp_u64);
	for (uint32_t i = 0; i < n; i++)
		v->partition[i] = (int32_t)(key[i] & UINT32_MAX);
	v->n_partition = n;
	free(key);
	return QC_OK;
}

static bool contains_ci(const char *hay, const char *needle)
{
	size_t n = strlen(needle);
	for (; *hay; hay++) {
		size_t i = 0;
		while (i < n && hay[i] && tolower((unsigned char)hay[i]) == needle[i])
			i++;
		if (i == n)
			return true;
	}
	return false;
}

static void set_attr(struct qc_vocab *v, const char *text, uint32_t attr, bool on)
{
	int32_t id = find_cstr(v, text);
	if (id == QC_TOKEN_NULL)
		return;
	if (on)
		v->tok[id].attr |= attr;
	else
		v->tok[id].attr &= ~attr;
}

/* llama.cpp sets a few per-model attributes by name (GGUF does not carry them). */
static void model_attr_fixups(struct qc_vocab *v, const char *model_name)
{
	if (strstr(v->pre_name, "jina-v2-de") || strstr(v->pre_name, "jina-v2-es") ||
	    strstr(v->pre_name, "jina-v2-code")) {
		set_attr(v, "<mask>", QC_TOKEN_ATTR_LSTRIP, true);
	} else if (model_name && (contains_ci(model_name, "phi-3") || contains_ci(model_name, "phi3"))) {
		for (uint32_t i = 0; i < v->n_partition; i++)
			v->tok[v->partition[i]].attr |= QC_TOKEN_ATTR_RSTRIP;
		set_attr(v, "</s>", QC_TOKEN_ATTR_RSTRIP, true);
		set_attr(v, "<unk>", QC_TOKEN_ATTR_RSTRIP, false);
		set_attr(v, "<s>", QC_TOKEN_ATTR_RSTRIP, false);
		set_attr(v, "<|endoftext|>", QC_TOKEN_ATTR_RSTRIP, false);
	}
}

static int find_linefeed(struct qc_vocab *v, struct qc_err *err)
{
	int32_t nl = QC_TOKEN_NULL;
	if (v->type == QC_VOCAB_SPM) {
		nl = qc_spm_byte_token(v, '\n');
	} else if (v->type == QC_VOCAB_BPE) {
		struct qc_ids ids = { 0 };
		int rc = qc_bpe_tokenize(v, "\n", 1, &ids, err);
		if (rc) {
			free(ids.p);
			return rc;
		}
		if (ids.n)
			nl = ids.p[0];
		free(ids.p);
	}
	v->special[QC_SPECIAL_NL] = nl != QC_TOKEN_NULL ? nl : v->special[QC_SPECIAL_PAD];
	return QC_OK;
}

int qc_vocab_finish(struct qc_vocab *v, const char *model_name, const char *src, struct qc_err *err)
{
	int rc;
	if (v->type == QC_VOCAB_BPE && !v->has_merges)
		return qc_err_set(err, QC_EFORMAT, src, NULL, -1, "BPE (gpt2) vocab without a merges list");
	if ((rc = build_token_table(v, src, err)) || (rc = build_merge_table(v, src, err)))
		return rc;
	/* defaults that do not fit this vocab would index past the token array */
	for (int i = 0; i < QC_SPECIAL_COUNT; i++)
		if (v->special[i] >= (int32_t)v->n_tokens)
			v->special[i] = QC_TOKEN_NULL;
	if (v->special[QC_SPECIAL_CLS] == QC_TOKEN_NULL)
		v->special[QC_SPECIAL_CLS] = v->special[QC_SPECIAL_BOS]; /* llama_vocab_cls() is BOS */
	if ((rc = find_special_by_text(v, src, err)) || (rc = build_partition(v, src, err)))
		return rc;
	model_attr_fixups(v, model_name);
	if (v->type == QC_VOCAB_BPE && (rc = qc_bpe_pre_new(v, &v->bpe, err)))
		return rc;
	return find_linefeed(v, err);
}

void qc_vocab_free(struct qc_vocab *v)
{
	if (!v)
		return;
	qc_bpe_pre_free(v->bpe);
	qc_arena_free(v->arena);
	free(v);
}

/* ---- queries ------------------------------------------------------------------ */

enum qc_vocab_type qc_vocab_type(const struct qc_vocab *v)
{
	return v->type;
}

uint32_t qc_vocab_n_tokens(const struct qc_vocab *v)
{
	return v->n_tokens;
}

const char *qc_vocab_pre_name(const struct qc_vocab *v)
{
	return v->pre_name;
}

int32_t qc_vocab_special(const struct qc_vocab *v, enum qc_special which)
{
	return (unsigned)which < QC_SPECIAL_COUNT ? v->special[which] : QC_TOKEN_NULL;
}

int32_t qc_vocab_bos(const struct qc_vocab *v)
{
	return v->special[QC_SPECIAL_BOS];
}

int32_t qc_vocab_eos(const struct qc_vocab *v)
{
	return v->special[QC_SPECIAL_EOS];
}

int32_t qc_vocab_eot(const struct qc_vocab *v)
{
	return v->special[QC_SPECIAL_EOT];
}

bool qc_vocab_add_bos(const struct qc_vocab *v)
{
	return v->add_bos;
}

bool qc_vocab_add_eos(const struct qc_vocab *v)
{
	return v->add_eos;
}

bool qc_vocab_is_eog(const struct qc_vocab *v, int32_t id)
{
	return id != QC_TOKEN_NULL && bsearch(&id, v->eog, v->n_eog, sizeof(*v->eog), cmp_i32) != NULL;
}

const int32_t *qc_vocab_eog_ids(const struct qc_vocab *v, size_t *n)
{
	*n = v->n_eog;
	return v->eog;
}

uint32_t qc_vocab_token_attr(const struct qc_vocab *v, int32_t id)
{
	return id >= 0 && (uint32_t)id < v->n_tokens ? v->tok[id].attr : 0;
}

const char *qc_vocab_token_text(const struct qc_vocab *v, int32_t id, size_t *len)
{
	if (id < 0 || (uint32_t)id >= v->n_tokens)
		return NULL;
	if (len)
		*len = v->tok[id].len;
	return v->tok[id].text;
}

float qc_vocab_token_score(const struct qc_vocab *v, int32_t id)
{
	return id >= 0 && (uint32_t)id < v->n_tokens ? v->tok[id].score : 0.0f;
}

int32_t qc_vocab_find(const struct qc_vocab *v, const char *text, size_t len)
{
	return qc_vocab_lookup(v, text, len);
}

const char *qc_vocab_chat_template(const struct qc_vocab *v)
{
	return v->chat_template;
}

/* ---- code points -------------------------------------------------------------- */

uint32_t qc_uc_decode(const char *s, size_t n, size_t *i)
{
	const unsigned char *p = (const unsigned char *)s + *i;
	size_t left = n - *i;
	uint32_t cp;
	size_t len;
	if (p[0] < 0x80) {
		*i += 1;
		return p[0];
	}
	if (!(p[0] & 0x40))
		goto bad;
	if (!(p[0] & 0x20)) {
		len = 2;
		cp = p[0] & 0x1f;
	} else if (!(p[0] & 0x10)) {
		len = 3;
		cp = p[0] & 0x0f;
	} else if (!(p[0] & 0x08)) {
		len = 4;
		cp = p[0] & 0x07;
	} else {
		goto bad;
	}
	if (left < len)
		goto bad;
	for (size_t k = 1; k < len; k++) {
		if ((p[k] & 0xc0) != 0x80)
			goto bad;
		cp = (cp << 6) | (p[k] & 0x3f);
	}
	*i += len;
	/* llama.cpp decodes F5..F7 leads past U+10FFFF and then throws while re-encoding;
	 * we keep going with the replacement character */
	return cp <= 0x10ffff ? cp : 0xfffd;
bad:
	*i += 1;
	return 0xfffd;
}

size_t qc_uc_encode(uint32_t cp, char out[4])
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

size_t qc_uc_lead_len(unsigned char b)
{
	static const unsigned char by_high_nibble[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
	return by_high_nibble[b >> 4];
}

/* How ICU's Unicode version compares with 15.1: -1 older, 0 same, 1 newer. */
static int icu_vs_15_1(void)
{
	static _Atomic int cached = 2; /* 2 = not yet known; the value is idempotent */
	int c = atomic_load_explicit(&cached, memory_order_relaxed);
	if (c != 2)
		return c;
	UVersionInfo u;
	u_getUnicodeVersion(u);
	c = u[0] != 15 ? (u[0] > 15 ? 1 : -1) : (u[1] > 1 ? 1 : u[1] < 1 ? -1 : 0);
	atomic_store_explicit(&cached, c, memory_order_relaxed);
	return c;
}

/* Assigned after 15.1: llama.cpp's tables treat it as unassigned. */
static bool after_15_1(uint32_t cp)
{
	if (icu_vs_15_1() <= 0)
		return false;
	UVersionInfo age;
	u_charAge((UChar32)cp, age);
	return age[0] > 15 || (age[0] == 15 && age[1] > 1);
}

/* The characters Unicode 15.1 added (an ICU before 74 lacks them). */
static unsigned added_in_15_1(uint32_t cp)
{
	if ((cp >= 0x2ffc && cp <= 0x2fff) || cp == 0x31ef)
		return QC_UC_SYMBOL;     /* ideographic description characters, CJK stroke */
	if (cp >= 0x2ebf0 && cp <= 0x2ee5d)
		return QC_UC_LETTER;     /* CJK Unified Ideographs Extension I */
	return 0;
}

unsigned qc_uc_flags(uint32_t cp)
{
	if (cp > 0x10ffff)
		return QC_UC_UNDEFINED;
	unsigned f;
	switch (u_charType((UChar32)cp)) {
	case U_UPPERCASE_LETTER: case U_LOWERCASE_LETTER: case U_TITLECASE_LETTER:
	case U_MODIFIER_LETTER: case U_OTHER_LETTER:
		f = QC_UC_LETTER;
		break;
	case U_NON_SPACING_MARK: case U_ENCLOSING_MARK: case U_COMBINING_SPACING_MARK:
		f = QC_UC_MARK;
		break;
	case U_DECIMAL_DIGIT_NUMBER: case U_LETTER_NUMBER: case U_OTHER_NUMBER:
		f = QC_UC_NUMBER;
		break;
	case U_SPACE_SEPARATOR: case U_LINE_SEPARATOR: case U_PARAGRAPH_SEPARATOR:
		f = QC_UC_SEPARATOR;
		break;
	case U_CONTROL_CHAR: case U_FORMAT_CHAR: case U_PRIVATE_USE_CHAR: case U_SURROGATE:
		f = QC_UC_CONTROL;
		break;
	case U_DASH_PUNCTUATION: case U_START_PUNCTUATION: case U_END_PUNCTUATION:
	case U_CONNECTOR_PUNCTUATION: case U_OTHER_PUNCTUATION: case U_INITIAL_PUNCTUATION:
	case U_FINAL_PUNCTUATION:
		f = QC_UC_PUNCT;
		break;
	case U_MATH_SYMBOL: case U_CURRENCY_SYMBOL: case U_MODIFIER_SYMBOL: case U_OTHER_SYMBOL:
		f = QC_UC_SYMBOL;
		break;
	default:
		f = QC_UC_UNDEFINED;
		if (icu_vs_15_1() < 0 && added_in_15_1(cp))
			f = added_in_15_1(cp);
		break;
	}
	if (f != QC_UC_UNDEFINED && after_15_1(cp))
		f = QC_UC_UNDEFINED;
	if (u_isUWhiteSpace((UChar32)cp))
		f |= QC_UC_WHITESPACE;
	return f;
}

uint32_t qc_uc_tolower(uint32_t cp)
{
	if (cp > 0x10ffff || after_15_1(cp))
		return cp;
	return (uint32_t)u_tolower((UChar32)cp);
}

uint32_t qc_uc_nfd_first(uint32_t cp)
{
	if (cp < 0xc0 || cp > 0x10ffff || after_15_1(cp))
		return cp; /* nothing below U+00C0 decomposes */
	UErrorCode st = U_ZERO_ERROR;
	const UNormalizer2 *nfd = unorm2_getNFDInstance(&st);
	if (U_FAILURE(st)) {
		QC_WARN_ONCE("ICU has no NFD data (%s); BERT accent folding is off", u_errorName(st));
		return cp;
	}
	UChar buf[32];
	int32_t n = unorm2_getDecomposition(nfd, (UChar32)cp, buf, 32, &st);
	if (U_FAILURE(st) || n <= 0)
		return cp;
	UChar32 first;
	int32_t k = 0;
	U16_NEXT(buf, k, n, first);
	return (uint32_t)first;
}
