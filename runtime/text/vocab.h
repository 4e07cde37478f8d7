/* vocab.h — tokenizer vocabulary and the tokenize / detokenize entry points.
 *
 * Owns: struct qc_vocab (tokens, scores, attributes, special ids, BPE merges,
 * compiled pre-tokenizer), built from a GGUF (vocab_gguf.c) or the bundle
 * manifest's "tokenizer" object (vocab_json.c); qc_tokenize (tokenize.c) and the
 * detokenizers (detok.c). Invariant: ids equal llama.cpp's llama_tokenize for the
 * same vocab, text and flags (tests/test_tokenizer.c, llama.cpp's own vectors).
 * Matches llama.cpp src/llama-vocab.cpp and src/unicode.cpp at c392e50 (Feb 2025),
 * read for facts. Non-goals: UGM (T5) and RWKV vocabs (QC_EUNSUPPORTED), chat
 * templating. A finished vocab is read-only: tokenize from any number of threads;
 * a struct qc_detok belongs to one thread.
 */
#ifndef QC_VOCAB_H
#define QC_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qc_err.h"

struct qc_gguf;
struct cJSON;
struct qc_vocab;
struct qc_detok;

#define QC_TOKEN_NULL (-1)
/* qc_tokenize refuses longer inputs (QC_ERANGE); llama.cpp takes an int32 length. */
#define QC_TOK_MAX_TEXT (1u << 30)

enum qc_vocab_type {
	QC_VOCAB_SPM = 1, /* "llama": SentencePiece-style, score-driven merges, byte fallback */
	QC_VOCAB_BPE = 2, /* "gpt2": byte-level BPE with a regex pre-tokenizer */
	QC_VOCAB_WPM = 3, /* "bert": WordPiece */
};

/* GGUF tokenizer.ggml.token_type values (and the manifest's "token_types"). */
enum qc_token_type {
	QC_TOKEN_TYPE_UNDEFINED = 0,
	QC_TOKEN_TYPE_NORMAL = 1,
	QC_TOKEN_TYPE_UNKNOWN = 2,
	QC_TOKEN_TYPE_CONTROL = 3,
	QC_TOKEN_TYPE_USER_DEFINED = 4,
	QC_TOKEN_TYPE_UNUSED = 5,
	QC_TOKEN_TYPE_BYTE = 6,
};

/* Per-token attribute bits, numerically equal to llama.cpp's llama_token_attr. */
enum qc_token_attr {
	QC_TOKEN_ATTR_UNKNOWN = 1 << 0,
	QC_TOKEN_ATTR_UNUSED = 1 << 1,
	QC_TOKEN_ATTR_NORMAL = 1 << 2,
	QC_TOKEN_ATTR_CONTROL = 1 << 3,
	QC_TOKEN_ATTR_USER_DEFINED = 1 << 4,
	QC_TOKEN_ATTR_BYTE = 1 << 5,
	QC_TOKEN_ATTR_NORMALIZED = 1 << 6,
	QC_TOKEN_ATTR_LSTRIP = 1 << 7,     /* eat whitespace left of the token when partitioning */
	QC_TOKEN_ATTR_RSTRIP = 1 << 8,     /* eat whitespace right of it */
	QC_TOKEN_ATTR_SINGLE_WORD = 1 << 9,
};

enum qc_special {
	QC_SPECIAL_BOS,
	QC_SPECIAL_EOS,
	QC_SPECIAL_EOT,
	QC_SPECIAL_EOM,
	QC_SPECIAL_UNK,
	QC_SPECIAL_SEP,
	QC_SPECIAL_PAD,
	QC_SPECIAL_CLS,
	QC_SPECIAL_MASK,
	QC_SPECIAL_NL,      /* the token "\n" becomes (linefeed); derived, not loaded */
	QC_SPECIAL_FIM_PRE,
	QC_SPECIAL_FIM_SUF,
	QC_SPECIAL_FIM_MID,
	QC_SPECIAL_FIM_PAD,
	QC_SPECIAL_FIM_REP,
	QC_SPECIAL_FIM_SEP,
	QC_SPECIAL_COUNT,
};

enum qc_tok_flags {
	QC_TOK_ADD_SPECIAL = 1 << 0,   /* add BOS/EOS (SPM, BPE) or CLS/SEP (WPM) per the vocab's flags */
	QC_TOK_PARSE_SPECIAL = 1 << 1, /* match control tokens' text in the input; user-defined
					* tokens are always matched, as in llama.cpp */
};

enum qc_piece_flags {
	QC_PIECE_SPECIAL = 1 << 0, /* render control/unknown tokens' text instead of "" */
	QC_PIECE_LSTRIP = 1 << 1,  /* drop one leading space (first token after an SPM prefix) */
};

enum qc_detok_flags {
	QC_DETOK_REMOVE_SPECIAL = 1 << 0,  /* drop a leading BOS / trailing EOS the vocab would add */
	QC_DETOK_UNPARSE_SPECIAL = 1 << 1, /* render control tokens as their text */
};

/* ---- building --------------------------------------------------------------- */

/* Build from g's tokenizer.* keys. The vocab copies what it needs: g may be closed
 * afterwards. QC_EFORMAT (naming the key) on malformed metadata, QC_EUNSUPPORTED for
 * UGM/RWKV/no-vocab models, QC_ENOMEM. On failure *out is NULL. */
int qc_vocab_from_gguf(const struct qc_gguf *g, struct qc_vocab **out, struct qc_err *err);

/* Build from the bundle manifest's "tokenizer" object (schema in vocab_json.c).
 * Same error contract as qc_vocab_from_gguf; tok is only read. */
int qc_vocab_from_json(const struct cJSON *tok, struct qc_vocab **out, struct qc_err *err);

void qc_vocab_free(struct qc_vocab *v); /* accepts NULL */

/* ---- queries (v must be non-NULL) ------------------------------------------- */

enum qc_vocab_type qc_vocab_type(const struct qc_vocab *v);
uint32_t qc_vocab_n_tokens(const struct qc_vocab *v);
/* The tokenizer.ggml.pre string ("" when absent); valid until qc_vocab_free. */
const char *qc_vocab_pre_name(const struct qc_vocab *v);
/* Id of a special token, or QC_TOKEN_NULL when the vocab has none. */
int32_t qc_vocab_special(const struct qc_vocab *v, enum qc_special which);
int32_t qc_vocab_bos(const struct qc_vocab *v);
int32_t qc_vocab_eos(const struct qc_vocab *v);
int32_t qc_vocab_eot(const struct qc_vocab *v);
/* Whether QC_TOK_ADD_SPECIAL prepends BOS / appends EOS (model default, then GGUF key). */
bool qc_vocab_add_bos(const struct qc_vocab *v);
bool qc_vocab_add_eos(const struct qc_vocab *v);
/* End of generation: EOS, EOT, EOM and the end-of-turn tokens llama.cpp knows by text. */
bool qc_vocab_is_eog(const struct qc_vocab *v, int32_t id);
/* The whole end-of-generation set, ascending (*n ids); valid until qc_vocab_free. */
const int32_t *qc_vocab_eog_ids(const struct qc_vocab *v, size_t *n);
/* enum qc_token_attr bits of id; 0 when id is out of range. */
uint32_t qc_vocab_token_attr(const struct qc_vocab *v, int32_t id);
/* The token's stored text (NUL-terminated, *len bytes) or NULL when out of range. */
const char *qc_vocab_token_text(const struct qc_vocab *v, int32_t id, size_t *len);
float qc_vocab_token_score(const struct qc_vocab *v, int32_t id);
/* Exact lookup of a stored token text; QC_TOKEN_NULL when absent. */
int32_t qc_vocab_find(const struct qc_vocab *v, const char *text, size_t len);
/* tokenizer.chat_template, or NULL. Valid until qc_vocab_free. */
const char *qc_vocab_chat_template(const struct qc_vocab *v);

/* ---- tokenize (tokenize.c) -------------------------------------------------- */

/* Tokenize len bytes of text (need not be NUL-terminated or valid UTF-8).
 * On success *ids is a malloc'd array the caller frees (NULL when *n_ids == 0).
 * QC_ERANGE for len > QC_TOK_MAX_TEXT, QC_EFORMAT when the vocab lacks a byte
 * token the input needs (llama.cpp throws there), QC_ENOMEM. */
int qc_tokenize(const struct qc_vocab *v, const char *text, size_t len, enum qc_tok_flags flags,
		int32_t **ids, size_t *n_ids, struct qc_err *err);

/* ---- detokenize (detok.c) --------------------------------------------------- */

/* The bytes token id stands for, as llama_token_to_piece: writes at most cap bytes
 * to buf (no NUL) and returns the full length, so a return > cap means "retry
 * with a bigger buffer". Returns 0 for ids out of range. */
size_t qc_token_to_piece(const struct qc_vocab *v, int32_t id, char *buf, size_t cap,
			 enum qc_piece_flags flags);

/* Whole-sequence detokenize, as llama_detokenize: pieces, the SPM leading-space
 * strip and the vocab's clean-up of " ," " ." " '" etc. On success *text is a
 * malloc'd NUL-terminated string of *len bytes the caller frees.
 * QC_ERANGE naming the position of an id out of range, QC_ENOMEM. */
int qc_detokenize(const struct qc_vocab *v, const int32_t *ids, size_t n, enum qc_detok_flags flags,
		  char **text, size_t *len, struct qc_err *err);

/* Streaming detokenizer: push one id at a time; each call hands back only complete,
 * valid UTF-8 (a character split across tokens is held back until it completes;
 * bytes that can never complete come out as U+FFFD). No whole-text clean-up is
 * applied (llama.cpp's server streams raw pieces the same way); with
 * QC_DETOK_REMOVE_SPECIAL a leading BOS is skipped and every EOS is dropped. */
int qc_detok_new(const struct qc_vocab *v, enum qc_detok_flags flags, struct qc_detok **out,
		 struct qc_err *err);
/* text, len: what became printable; valid until the next call on d. QC_ERANGE for
 * an id out of range (d is unchanged), QC_ENOMEM. */
int qc_detok_push(struct qc_detok *d, int32_t id, const char **text, size_t *len,
		  struct qc_err *err);
/* End of stream: returns any held-back bytes as U+FFFD and resets d for reuse. */
void qc_detok_flush(struct qc_detok *d, const char **text, size_t *len);
void qc_detok_free(struct qc_detok *d); /* accepts NULL */

/* ==== module-internal: shared by runtime/vocab*.c, tokenize*.c, detok.c ========
 * Not an API: define QC_VOCAB_INTERNAL before including to see it. */
#ifdef QC_VOCAB_INTERNAL

struct qc_arena;
struct qc_bpe_pre;

/* Pre-tokenizer kinds, as llama.cpp's LLAMA_VOCAB_PRE_TYPE_* (numbering ours). */
enum qc_vocab_pre {
	QC_PRE_DEFAULT,
	QC_PRE_LLAMA3,
	QC_PRE_DEEPSEEK_LLM,
	QC_PRE_DEEPSEEK_CODER,
	QC_PRE_DEEPSEEK3_LLM,
	QC_PRE_FALCON,
	QC_PRE_MPT,
	QC_PRE_STARCODER,
	QC_PRE_GPT2,
	QC_PRE_REFACT,
	QC_PRE_COMMAND_R,
	QC_PRE_STABLELM2,
	QC_PRE_QWEN2,
	QC_PRE_OLMO,
	QC_PRE_DBRX,
	QC_PRE_SMAUG,
	QC_PRE_PORO,
	QC_PRE_CHATGLM4,
	QC_PRE_VIKING,
	QC_PRE_JAIS,
	QC_PRE_TEKKEN,
	QC_PRE_SMOLLM,
	QC_PRE_CODESHELL,
	QC_PRE_BLOOM,
	QC_PRE_GPT3_FINNISH,
	QC_PRE_EXAONE,
	QC_PRE_CHAMELEON,
	QC_PRE_MINERVA,
	QC_PRE_COUNT,
};

struct qc_vocab_token {
	const char *text;  /* arena copy, NUL-terminated, len bytes */
	uint32_t len;
	uint32_t attr;     /* enum qc_token_attr bits */
	float score;       /* SPM merge priority; 0 when the source has no scores */
};

/* A merge line "left right" as stored: left = text[0, split), right = text(split, len). */
struct qc_vocab_merge {
	const char *text;
	uint32_t len, split;
};

struct qc_vocab {
	enum qc_vocab_type type;
	enum qc_vocab_pre pre;
	const char *pre_name;              /* as given; "" when absent */
	uint32_t n_tokens;
	struct qc_vocab_token *tok;        /* (n_tokens) */
	uint32_t max_token_len;            /* bytes, longest token text */
	uint64_t *tok_slot;                /* (tok_mask + 1) open addressing: hash high 32 bits << 32
					    * | (id + 1); 0 = empty */
	size_t tok_mask;
	bool has_merges;                   /* the source had a merges list (maybe empty) */
	uint32_t n_merges;
	struct qc_vocab_merge *merge;      /* (n_merges), rank = index */
	uint64_t *merge_slot;              /* (merge_mask + 1): as tok_slot, with rank + 1 */
	size_t merge_mask;
	int32_t special[QC_SPECIAL_COUNT]; /* QC_TOKEN_NULL when absent */
	bool add_bos, add_eos;
	bool add_space_prefix;             /* SPM: prefix " " to text that follows BOS/special/start */
	bool ignore_merges;                /* BPE: a pre-token that is a whole token skips merging */
	bool clean_spaces;                 /* detokenize: " ?" -> "?" etc. */
	bool remove_extra_ws;              /* loaded for completeness; only UGM uses it */
	uint32_t n_partition;
	int32_t *partition;                /* (n_partition) control/user-defined/unknown ids, longest first */
	uint32_t n_eog;
	int32_t *eog;                      /* (n_eog) sorted ascending */
	const char *chat_template;         /* NULL when absent */
	struct qc_bpe_pre *bpe;            /* compiled pre-tokenizer, BPE only */
	struct qc_arena *arena;            /* owns every array and string above */
};

/* Growable id list used by the tokenizers. */
struct qc_ids {
	int32_t *p;
	size_t n, cap;
};
int qc_ids_push(struct qc_ids *ids, int32_t id, struct qc_err *err);

/* -- building (vocab.c), in this order: begin, tokens, merges, keys, finish -- */

/* Start a vocab for tokenizer model `model` and pre-tokenizer `pre` (NULL when the
 * source has none), with llama.cpp's per-model defaults. src names the source in
 * messages. */
int qc_vocab_begin(const char *model, size_t model_len, const char *pre, size_t pre_len,
		   const char *src, struct qc_vocab **out, struct qc_err *err);
int qc_vocab_alloc_tokens(struct qc_vocab *v, uint64_t n, const char *src, struct qc_err *err);
/* Token id: copies text; type is a QC_TOKEN_TYPE_* value (others: undefined). */
int qc_vocab_set_token(struct qc_vocab *v, uint32_t id, const char *text, size_t len, float score,
		       int64_t type, struct qc_err *err);
int qc_vocab_alloc_merges(struct qc_vocab *v, uint64_t n, const char *src, struct qc_err *err);
int qc_vocab_set_merge(struct qc_vocab *v, uint32_t rank, const char *text, size_t len,
		       struct qc_err *err);
/* A special id from the source; out of range ids are ignored with a warning, as
 * llama.cpp does. */
void qc_vocab_set_special(struct qc_vocab *v, enum qc_special which, int64_t id, const char *key);
int qc_vocab_set_chat_template(struct qc_vocab *v, const char *s, size_t len, struct qc_err *err);
/* Hash tables, derived special ids, attribute fixups, pre-tokenizer. model_name is
 * general.name (NULL when unknown). On failure the caller frees v. */
int qc_vocab_finish(struct qc_vocab *v, const char *model_name, const char *src, struct qc_err *err);

/* -- lookups (vocab.c) -- */
int32_t qc_vocab_lookup(const struct qc_vocab *v, const char *text, size_t len);
/* Rank of merge (left, right), or -1. */
int32_t qc_vocab_merge_rank(const struct qc_vocab *v, const char *l, size_t l_len, const char *r,
			    size_t r_len);

/* -- codepoints as llama.cpp sees them (vocab.c) -- */
enum qc_uc_flag {
	QC_UC_UNDEFINED = 0x001,   /* unassigned in Unicode 15.1 */
	QC_UC_NUMBER = 0x002,      /* \p{N} */
	QC_UC_LETTER = 0x004,      /* \p{L} */
	QC_UC_SEPARATOR = 0x008,   /* \p{Z} */
	QC_UC_MARK = 0x010,        /* \p{M} */
	QC_UC_PUNCT = 0x020,       /* \p{P} */
	QC_UC_SYMBOL = 0x040,      /* \p{S} */
	QC_UC_CONTROL = 0x080,     /* Cc Cf Co Cs */
	QC_UC_WHITESPACE = 0x100,  /* White_Space property */
};
#define QC_UC_CATEGORIES 0xff
/* Decode one code point at s[*i] the way llama.cpp's unicode_cpt_from_utf8 does
 * (overlong forms and surrogates pass; a bad or truncated sequence yields U+FFFD
 * and consumes one byte). Values above U+10FFFF become U+FFFD. */
uint32_t qc_uc_decode(const char *s, size_t n, size_t *i);
size_t qc_uc_encode(uint32_t cp, char out[4]);    /* cp <= 0x10FFFF */
size_t qc_uc_lead_len(unsigned char b);           /* 1..4 from the lead byte alone */
unsigned qc_uc_flags(uint32_t cp);
uint32_t qc_uc_tolower(uint32_t cp);
uint32_t qc_uc_nfd_first(uint32_t cp);            /* first code point of NFD(cp) */

/* -- byte-level BPE alphabet (tokenize_bpe.c) -- */
uint32_t qc_bpe_byte_to_cp(uint8_t b);
int qc_bpe_cp_to_byte(uint32_t cp);               /* -1 when cp is not in the alphabet */

/* -- per-model pieces -- */
/* Map a tokenizer.ggml.pre name to its kind and flags; QC_EFORMAT when unknown. */
int qc_bpe_pre_resolve(struct qc_vocab *v, const char *name, size_t len, const char *src,
		       struct qc_err *err);
int qc_bpe_pre_new(const struct qc_vocab *v, struct qc_bpe_pre **out, struct qc_err *err);
void qc_bpe_pre_free(struct qc_bpe_pre *p);
int qc_bpe_tokenize(const struct qc_vocab *v, const char *text, size_t len, struct qc_ids *out,
		    struct qc_err *err);
int qc_spm_tokenize(const struct qc_vocab *v, const char *text, size_t len, struct qc_ids *out,
		    struct qc_err *err);
int32_t qc_spm_byte_token(const struct qc_vocab *v, uint8_t b);
int qc_wpm_tokenize(const struct qc_vocab *v, const char *text, size_t len, struct qc_ids *out,
		    struct qc_err *err);

#endif /* QC_VOCAB_INTERNAL */

#endif
