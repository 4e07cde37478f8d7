/* tokenize_bpe.c — byte-level BPE: pre-tokenizer split, byte alphabet, merges.
 *
 * Owns: the tokenizer.ggml.pre table and its split rules (compiled with PCRE2),
 * splitting text into words, and rank-ordered merging. Matches llama.cpp
 * llm_tokenizer_bpe / unicode_regex_split where it differs from a plain regex
 * engine: the GPT-2 and Llama-3 rules run as its hand-written splitters (quirks
 * at word ends included); other rules using \p{N,L,P,M,S} run on "collapsed"
 * text, one class byte per non-ASCII code point (so \p{S} misses ASCII '~' and
 * non-ASCII white space reads as \v); rules without classes run on code points
 * with non-ASCII white space as \v. \s is ASCII-only, as std::regex in the C
 * locale. Each rule refines the previous rule's words; unmatched text stays a word.
 */
#define QC_VOCAB_INTERNAL
#include "vocab.h"

#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* ---- byte alphabet: printable Latin-1 maps to itself, the other 68 bytes to
 * U+0100.. in byte order (the GPT-2 bytes_to_unicode table) ---- */

uint32_t qc_bpe_byte_to_cp(uint8_t b)
{
	if (b <= 0x20)
		return 0x100 + b;
	if (b >= 0x7f && b <= 0xa0)
		return 0x100 + 0x21 + (b - 0x7f);
	if (b == 0xad)
		return 0x100 + 0x21 + 0x22;
	return b;
}

int qc_bpe_cp_to_byte(uint32_t cp)
{
	if (cp < 0x100)
		return cp <= 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad ? -1 : (int)cp;
	if (cp < 0x121)
		return (int)(cp - 0x100);
	if (cp < 0x143)
		return (int)(cp - 0x121 + 0x7f);
	return cp == 0x143 ? 0xad : -1;
}

/* ---- the pre-tokenizers ---- */

enum {
	PRE_KEEP_SPACES = 1 << 0,  /* detokenize without the " ," clean-up */
	PRE_IGNORE_MERGES = 1 << 1,
	PRE_ADD_BOS = 1 << 2,
	PRE_NO_BOS = 1 << 3,
};

static const struct {
	const char *name;
	enum qc_vocab_pre pre;
	unsigned flags;
} pre_names[] = {
	{ "default", QC_PRE_DEFAULT, 0 },
	{ "llama3", QC_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS },
	{ "llama-v3", QC_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS },
	{ "llama-bpe", QC_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS },
	{ "falcon3", QC_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS },
	{ "deepseek-llm", QC_PRE_DEEPSEEK_LLM, PRE_KEEP_SPACES },
	{ "deepseek-coder", QC_PRE_DEEPSEEK_CODER, PRE_KEEP_SPACES },
	{ "deepseek-v3", QC_PRE_DEEPSEEK3_LLM, PRE_KEEP_SPACES },
	{ "falcon", QC_PRE_FALCON, 0 },
	{ "mpt", QC_PRE_MPT, 0 },
	{ "starcoder", QC_PRE_STARCODER, 0 },
	{ "gpt-2", QC_PRE_GPT2, 0 },
	{ "phi-2", QC_PRE_GPT2, 0 },
	{ "jina-es", QC_PRE_GPT2, 0 },
	{ "jina-de", QC_PRE_GPT2, 0 },
	{ "gigachat", QC_PRE_GPT2, 0 },
	{ "jina-v1-en", QC_PRE_GPT2, 0 },
	{ "jina-v2-es", QC_PRE_GPT2, 0 },
	{ "jina-v2-de", QC_PRE_GPT2, 0 },
	{ "jina-v2-code", QC_PRE_GPT2, 0 },
	{ "roberta-bpe", QC_PRE_GPT2, 0 },
	{ "refact", QC_PRE_REFACT, 0 },
	{ "command-r", QC_PRE_COMMAND_R, PRE_KEEP_SPACES },
	{ "qwen2", QC_PRE_QWEN2, PRE_KEEP_SPACES },
	{ "deepseek-r1-qwen", QC_PRE_QWEN2, PRE_KEEP_SPACES },
	{ "stablelm2", QC_PRE_STABLELM2, 0 },
	{ "olmo", QC_PRE_OLMO, 0 },
	{ "dbrx", QC_PRE_DBRX, 0 },
	{ "smaug-bpe", QC_PRE_SMAUG, 0 },
	{ "poro-chat", QC_PRE_PORO, PRE_KEEP_SPACES },
	{ "chatglm-bpe", QC_PRE_CHATGLM4, PRE_NO_BOS },
	{ "viking", QC_PRE_VIKING, PRE_KEEP_SPACES },
	{ "jais", QC_PRE_JAIS, 0 },
	{ "tekken", QC_PRE_TEKKEN, PRE_KEEP_SPACES | PRE_IGNORE_MERGES | PRE_ADD_BOS },
	{ "smollm", QC_PRE_SMOLLM, PRE_KEEP_SPACES },
	{ "codeshell", QC_PRE_CODESHELL, 0 },
	{ "bloom", QC_PRE_BLOOM, 0 },
	{ "gpt3-finnish", QC_PRE_GPT3_FINNISH, 0 },
	{ "exaone", QC_PRE_EXAONE, 0 },
	{ "chameleon", QC_PRE_CHAMELEON, PRE_ADD_BOS | PRE_KEEP_SPACES },
	{ "minerva-7b", QC_PRE_MINERVA, 0 },
	{ "megrez", QC_PRE_QWEN2, 0 }, /* qwen2 split, but llama.cpp keeps the clean-up on */
};

/* The split rules, from the models' tokenizer.json as llama.cpp adapted them.
 * These two are recognized by text and run by the hand-written splitters below. */
#define RX_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RX_LLAMA3                                                                                \
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
	"\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_QWEN2                                                                                 \
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
	"\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
#define RX_NORDIC " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"

#define MAX_STEPS 6

static const char *const pre_steps[QC_PRE_COUNT][MAX_STEPS] = {
	[QC_PRE_DEFAULT] = { "[\\p{P}\\$\\+<=>\\^~\\|]+", RX_GPT2, "\\p{N}+", "[0-9][0-9][0-9]" },
	[QC_PRE_LLAMA3] = { RX_LLAMA3 },
	[QC_PRE_DBRX] = { RX_LLAMA3 },
	[QC_PRE_SMAUG] = { RX_LLAMA3 },
	[QC_PRE_CHATGLM4] = { RX_LLAMA3 },
	[QC_PRE_DEEPSEEK_LLM] = {
		"[\r\n]",
		"\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
		"\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
		"\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"
		"\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"
		"\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"
		"\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
		"\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"
		"\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"
		"\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"
		"\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"
		"\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}"
		"\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
		"\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}"
		"\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"
		"\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"
		"\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"
		"\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"
		"\\x{1E900}-\\x{1E943}]+",
		"\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
		"\\s+$",
		RX_CJK,
		"\\p{N}+",
	},
	[QC_PRE_DEEPSEEK3_LLM] = {
		"\\p{N}{1,3}",
		"[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
		"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
		" ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
	},
	[QC_PRE_DEEPSEEK_CODER] = { "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RX_CJK, "\\p{N}" },
	[QC_PRE_FALCON] = { "[\\p{P}\\$\\+<=>\\^~\\|`]+", RX_GPT2, "[0-9][0-9][0-9]" },
	[QC_PRE_STARCODER] = { "\\p{N}", RX_GPT2 },
	[QC_PRE_REFACT] = { "\\p{N}", RX_GPT2 },
	[QC_PRE_COMMAND_R] = { "\\p{N}", RX_GPT2 },
	[QC_PRE_SMOLLM] = { "\\p{N}", RX_GPT2 },
	[QC_PRE_CODESHELL] = { "\\p{N}", RX_GPT2 },
	[QC_PRE_EXAONE] = { "\\p{N}", RX_GPT2 },
	[QC_PRE_MINERVA] = { "\\p{N}", RX_GPT2 },
	[QC_PRE_GPT2] = { RX_GPT2 },
	[QC_PRE_MPT] = { RX_GPT2 },
	[QC_PRE_OLMO] = { RX_GPT2 },
	[QC_PRE_JAIS] = { RX_GPT2 },
	[QC_PRE_STABLELM2] = { RX_QWEN2 },
	[QC_PRE_QWEN2] = { RX_QWEN2 },
	[QC_PRE_PORO] = { RX_NORDIC },
	[QC_PRE_BLOOM] = { RX_NORDIC },
	[QC_PRE_GPT3_FINNISH] = { RX_NORDIC },
	[QC_PRE_VIKING] = { RX_NORDIC, "\\p{N}" },
	[QC_PRE_TEKKEN] = {
		"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|"
		"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|"
		"\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	},
	[QC_PRE_CHAMELEON] = {
		"<sentinel:[0-9]+>",
		"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
		"([\\t\\n]|    |  )",
		"\\p{N}",
		"[\\p{P}!-/:-@\\[-`{-~]",
		RX_GPT2,
	},
};

int qc_bpe_pre_resolve(struct qc_vocab *v, const char *name, size_t len, const char *src,
		       struct qc_err *err)
{
	if (len == 0) {
		name = "default";
		len = 7;
	}
	for (size_t i = 0; i < sizeof pre_names / sizeof pre_names[0]; i++) {
		if (strlen(pre_names[i].name) != len || memcmp(pre_names[i].name, name, len) != 0)
			continue;
		v->pre = pre_names[i].pre;
		unsigned f = pre_names[i].flags;
		if (f & PRE_KEEP_SPACES)
			v->clean_spaces = false;
		if (f & PRE_IGNORE_MERGES)
			v->ignore_merges = true;
		if (f & PRE_ADD_BOS)
			v->add_bos = true;
		if (f & PRE_NO_BOS)
			v->special[QC_SPECIAL_BOS] = QC_TOKEN_NULL;
		return QC_OK;
	}
	return qc_err_set(err, QC_EFORMAT, src, NULL, -1, "unknown pre-tokenizer type '%.*s'",
			  (int)(len > 64 ? 64 : len), name);
}

/* ---- compiling the rules ---- */

enum step_kind {
	STEP_GPT2,      /* hand-written RX_GPT2 */
	STEP_LLAMA3,    /* hand-written RX_LLAMA3 */
	STEP_COLLAPSED, /* PCRE2 over one byte per code point */
	STEP_CODEPOINT, /* PCRE2 (UTF) over code points */
};

struct qc_bpe_pre {
	int n_steps;
	struct {
		enum step_kind kind;
		pcre2_code *re;
	} step[MAX_STEPS];
	bool need_collapsed, need_codepoint;
};

/* Collapsed-text bytes standing for a non-ASCII code point of each class. */
enum {
	COLL_OTHER = 0xd0,
	COLL_NUMBER = 0xd1,
	COLL_LETTER = 0xd2,
	COLL_PUNCT = 0xd3,
	COLL_MARK = 0xd4,
	COLL_SYMBOL = 0xd5,
	COLL_SPACE = 0x0b,
};

/* What \p{X} becomes in a collapsed rule: the class byte plus the ASCII members
 * llama.cpp lists for X (its lists, not Unicode's: '~' is not a symbol there). */
static const struct {
	char cat;
	const char *set;
} coll_class[] = {
	{ 'N', "\\xd1\\x30-\\x39" },
	{ 'L', "\\xd2\\x41-\\x5a\\x61-\\x7a" },
	{ 'P', "\\xd3\\x21-\\x23\\x25-\\x2a\\x2c-\\x2f\\x3a-\\x3b\\x3f-\\x40\\x5b-\\x5d\\x5f\\x7b\\x7d" },
	{ 'M', "\\xd4" },
	{ 'S', "\\xd5\\x24\\x2b\\x3c-\\x3e\\x5e\\x60\\x7c" },
};

static const char *coll_set(const char *rx)
{
	if (rx[0] != '\\' || rx[1] != 'p' || rx[2] != '{' || !rx[3] || rx[4] != '}')
		return NULL;
	for (size_t k = 0; k < sizeof coll_class / sizeof coll_class[0]; k++)
		if (coll_class[k].cat == rx[3])
			return coll_class[k].set;
	return NULL;
}

static bool uses_classes(const char *rx)
{
	for (; *rx; rx++)
		if (coll_set(rx))
			return true;
	return false;
}

/* Rewrite \p{X} into collapsed-byte classes. Bracket tracking is deliberately the
 * naive "[ or ] not preceded by a backslash" that llama.cpp uses. Returns a
 * malloc'd pattern or NULL on OOM. */
static char *collapse_rule(const char *rx)
{
	size_t n = strlen(rx), cap = n + 1, o = 0;
	for (size_t i = 0; i < n; i++) {
		const char *set = coll_set(rx + i);
		if (set)
			cap += strlen(set) + 2;
	}
	char *out = malloc(cap);
	if (!out)
		return NULL;
	bool inside = false;
	for (size_t i = 0; i < n; i++) {
		const char *set;
		if (rx[i] == '[' && (i == 0 || rx[i - 1] != '\\')) {
			inside = true;
		} else if (inside && rx[i] == ']' && rx[i - 1] != '\\') {
			inside = false;
		} else if ((set = coll_set(rx + i)) != NULL) {
			size_t sl = strlen(set);
			if (!inside)
				out[o++] = '[';
			memcpy(out + o, set, sl);
			o += sl;
			if (!inside)
				out[o++] = ']';
			i += 4;
			continue;
		}
		out[o++] = rx[i];
	}
	out[o] = '\0';
	return out;
}

void qc_bpe_pre_free(struct qc_bpe_pre *p)
{
	if (!p)
		return;
	for (int i = 0; i < p->n_steps; i++)
		pcre2_code_free(p->step[i].re);
	free(p);
}

int qc_bpe_pre_new(const struct qc_vocab *v, struct qc_bpe_pre **out, struct qc_err *err)
{
	int rc = QC_OK;
	struct qc_bpe_pre *p = calloc(1, sizeof(*p));
	if (!p)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	for (int i = 0; i < MAX_STEPS && pre_steps[v->pre][i]; i++) {
		const char *rx = pre_steps[v->pre][i];
		p->n_steps = i + 1;
		if (strcmp(rx, RX_GPT2) == 0) {
			p->step[i].kind = STEP_GPT2;
			continue;
		}
		if (strcmp(rx, RX_LLAMA3) == 0) {
			p->step[i].kind = STEP_LLAMA3;
			continue;
		}
		/* $ means end of the word being split, as in ECMAScript, not "before a final \n" */
		uint32_t opts = PCRE2_DOLLAR_ENDONLY;
		char *pat = NULL;
		if (uses_classes(rx)) {
			p->step[i].kind = STEP_COLLAPSED;
			p->need_collapsed = true;
			pat = collapse_rule(rx);
			if (!pat) {
				rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
				goto out_free;
			}
		} else {
			p->step[i].kind = STEP_CODEPOINT;
			p->need_codepoint = true;
			opts |= PCRE2_UTF;
		}
		int ec;
		PCRE2_SIZE eo;
		const char *src = pat ? pat : rx;
		p->step[i].re = pcre2_compile((PCRE2_SPTR)src, PCRE2_ZERO_TERMINATED, opts, &ec, &eo, NULL);
		free(pat);
		if (!p->step[i].re) {
			PCRE2_UCHAR msg[128];
			pcre2_get_error_message(ec, msg, sizeof msg);
			rc = qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
					"pre-tokenizer '%s' rule %d: PCRE2 error at %zu: %s", v->pre_name, i,
					(size_t)eo, (const char *)msg);
			goto out_free;
		}
		/* JIT only speeds matching up; without it PCRE2 interprets the same pattern */
		(void)pcre2_jit_compile(p->step[i].re, PCRE2_JIT_COMPLETE);
	}
	QC_ASSERT(p->n_steps > 0); /* every enum qc_vocab_pre has a row in pre_steps */
	*out = p;
	return QC_OK;
out_free:
	qc_bpe_pre_free(p);
	return rc;
}

/* ---- splitting ---- */

/* Word boundaries as lengths in code points, one list per rule applied. */
struct seglist {
	uint32_t *len;
	size_t n, cap;
};

static int seg_push(struct seglist *s, size_t len, struct qc_err *err)
{
	if (len == 0)
		return QC_OK;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 256;
		uint32_t *p = realloc(s->len, cap * sizeof(*p));
		if (!p)
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory splitting text");
		s->len = p;
		s->cap = cap;
	}
	s->len[s->n++] = (uint32_t)len;
	return QC_OK;
}

struct split {
	const uint32_t *cp;      /* (n) code points */
	const uint16_t *fl;      /* (n) qc_uc_flags */
	size_t n;
	char *coll;              /* (n) collapsed text, when a rule needs it */
	char *utf;               /* code point text for PCRE2 UTF rules */
	size_t *boff;            /* (n + 1) byte offset of code point i in utf */
	pcre2_match_data *md;
};

#define OUT_OF_WORD 0xffffffffu

/* One word [ini, end) being split by a hand-written rule; outside it every code
 * point reads as "no class" and OUT_OF_WORD, which is what makes llama.cpp's
 * splitters stop at word edges. */
struct cur {
	const struct split *sp;
	size_t ini, end, prev;
	struct seglist *out;
	int rc;
	struct qc_err *err;
};

static unsigned cur_fl(const struct cur *c, size_t pos)
{
	return pos >= c->ini && pos < c->end ? c->sp->fl[pos] : 0;
}

static uint32_t cur_cp(const struct cur *c, size_t pos)
{
	return pos >= c->ini && pos < c->end ? c->sp->cp[pos] : OUT_OF_WORD;
}

static size_t cur_emit(struct cur *c, size_t end)
{
	size_t len = end - c->prev;
	if (len && !c->rc)
		c->rc = seg_push(c->out, len, c->err);
	c->prev = end;
	return len;
}

#define WLN (QC_UC_WHITESPACE | QC_UC_LETTER | QC_UC_NUMBER)

/* Trailing white space: "\s+(?!\S)" leaves the last space for the next word
 * unless the word ends there; returns false when there is none. */
static bool cur_spaces(struct cur *c, size_t *pos)
{
	size_t nws = 0;
	while (cur_fl(c, *pos + nws) & QC_UC_WHITESPACE)
		nws++;
	if (nws > 1 && cur_cp(c, *pos + nws) != OUT_OF_WORD) {
		*pos += nws - 1;
		cur_emit(c, *pos);
		return true;
	}
	if (nws > 0) {
		*pos += nws;
		cur_emit(c, *pos);
		return true;
	}
	return false;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
static void split_gpt2(struct cur *c)
{
	for (size_t pos = c->ini; pos < c->end;) {
		uint32_t cp = cur_cp(c, pos);
		unsigned f = cur_fl(c, pos);
		if (cp == '\'' && pos + 1 < c->end) {
			uint32_t a = cur_cp(c, pos + 1);
			if (a == 's' || a == 't' || a == 'm' || a == 'd') {
				pos += cur_emit(c, pos + 2);
				continue;
			}
			if (pos + 2 < c->end) {
				uint32_t b = cur_cp(c, pos + 2);
				if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
					pos += cur_emit(c, pos + 3);
					continue;
				}
			}
		}
		unsigned f2 = cp == ' ' ? cur_fl(c, pos + 1) : f;
		if (f2 & (QC_UC_LETTER | QC_UC_NUMBER)) {
			unsigned want = f2 & QC_UC_LETTER ? QC_UC_LETTER : QC_UC_NUMBER;
			pos += cp == ' ';
			while (f2 & want)
				f2 = cur_fl(c, ++pos);
			cur_emit(c, pos);
			continue;
		}
		if (!(f2 & WLN) && f2) {
			pos += cp == ' ';
			while (!(f2 & WLN) && f2)
				f2 = cur_fl(c, ++pos);
			cur_emit(c, pos);
			continue;
		}
		if (cur_spaces(c, &pos))
			continue;
		cur_emit(c, ++pos);
	}
}

static bool is_rn(uint32_t cp)
{
	return cp == '\r' || cp == '\n';
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static void split_llama3(struct cur *c)
{
	for (size_t pos = c->ini; pos < c->end;) {
		uint32_t cp = cur_cp(c, pos);
		unsigned f = cur_fl(c, pos);
		if (cp == '\'' && pos + 1 < c->end) {
			uint32_t a = qc_uc_tolower(cur_cp(c, pos + 1));
			if (a == 's' || a == 't' || a == 'm' || a == 'd') {
				pos += cur_emit(c, pos + 2);
				continue;
			}
			if (pos + 2 < c->end) {
				uint32_t b = qc_uc_tolower(cur_cp(c, pos + 2));
				if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
					pos += cur_emit(c, pos + 3);
					continue;
				}
			}
		}
		if (!is_rn(cp) && !(f & QC_UC_NUMBER) &&
		    ((f & QC_UC_LETTER) || (cur_fl(c, pos + 1) & QC_UC_LETTER))) {
			pos++;
			while (cur_fl(c, pos) & QC_UC_LETTER)
				pos++;
			cur_emit(c, pos);
			continue;
		}
		if (f & QC_UC_NUMBER) {
			size_t run = pos;
			while (cur_fl(c, pos) & QC_UC_NUMBER) {
				if (++pos - run >= 3) {
					cur_emit(c, pos);
					run = pos;
				}
			}
			cur_emit(c, pos);
			continue;
		}
		unsigned f2 = cp == ' ' ? cur_fl(c, pos + 1) : f;
		/* llama.cpp tests the first character's flags here, not f2: a lone ' ' at
		 * the end of a word takes this branch */
		if (!(f2 & WLN) && f) {
			pos += cp == ' ';
			while (!(f2 & WLN) && f2)
				f2 = cur_fl(c, ++pos);
			while (is_rn(cur_cp(c, pos)))
				pos++;
			cur_emit(c, pos);
			continue;
		}
		size_t nws = 0, last_rn = 0;
		while (cur_fl(c, pos + nws) & QC_UC_WHITESPACE) {
			if (is_rn(cur_cp(c, pos + nws)))
				last_rn = pos + nws + 1;
			nws++;
		}
		if (last_rn) {
			pos = last_rn;
			cur_emit(c, pos);
			continue;
		}
		if (cur_spaces(c, &pos))
			continue;
		cur_emit(c, ++pos);
	}
}

static size_t cp_at_byte(const struct split *sp, size_t lo, size_t hi, size_t b)
{
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (sp->boff[mid] < b)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Split word [ini, ini+len) at every match of re, keeping unmatched text as words. */
static int split_regex(struct split *sp, pcre2_code *re, bool collapsed, size_t ini, size_t len,
		       struct seglist *out, struct qc_err *err)
{
	const char *subj = collapsed ? sp->coll + ini : sp->utf + sp->boff[ini];
	size_t blen = collapsed ? len : sp->boff[ini + len] - sp->boff[ini];
	size_t base = collapsed ? 0 : sp->boff[ini];
	size_t prev = 0, start = 0; /* prev in code points, start in bytes, both word-relative */
	uint32_t mopts = collapsed ? 0 : PCRE2_NO_UTF_CHECK;
	int rc;
	while (start <= blen) {
		int m = pcre2_match(re, (PCRE2_SPTR)subj, blen, start, mopts, sp->md, NULL);
		/* long words can overflow the JIT's fixed stack; the interpreter keeps its
		 * backtracking state on the heap and gives the same answer */
		if (m == PCRE2_ERROR_JIT_STACKLIMIT)
			m = pcre2_match(re, (PCRE2_SPTR)subj, blen, start, mopts | PCRE2_NO_JIT, sp->md, NULL);
		if (m == PCRE2_ERROR_NOMATCH)
			break;
		if (m < 0) {
			PCRE2_UCHAR msg[128];
			pcre2_get_error_message(m, msg, sizeof msg);
			return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "pre-tokenizer on a %zu-byte word: %s",
					  blen, (const char *)msg);
		}
		const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sp->md);
		size_t ms = ov[0], me = ov[1];
		if (!collapsed) {
			ms = cp_at_byte(sp, ini, ini + len, base + ms) - ini;
			me = cp_at_byte(sp, ini, ini + len, base + me) - ini;
		}
		if ((rc = seg_push(out, ms - prev, err)) || (rc = seg_push(out, me - ms, err)))
			return rc;
		prev = me;
		if (ov[1] > ov[0]) {
			start = ov[1];
			continue;
		}
		/* none of the rules can match empty; if one did, step over a character */
		if (ov[1] >= blen)
			break;
		start = ov[1] + (collapsed ? 1 : qc_uc_lead_len((unsigned char)subj[ov[1]]));
	}
	return seg_push(out, len - prev, err);
}

static int prepare_texts(struct split *sp, const struct qc_bpe_pre *p, struct qc_err *err)
{
	if (p->need_collapsed) {
		sp->coll = malloc(sp->n ? sp->n : 1);
		if (!sp->coll)
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		for (size_t i = 0; i < sp->n; i++) {
			unsigned f = sp->fl[i];
			unsigned char b;
			if (sp->cp[i] < 0x80)
				b = (unsigned char)sp->cp[i];
			else if (f & QC_UC_WHITESPACE)
				b = COLL_SPACE;
			else if ((f & QC_UC_CATEGORIES) == QC_UC_NUMBER)
				b = COLL_NUMBER;
			else if ((f & QC_UC_CATEGORIES) == QC_UC_LETTER)
				b = COLL_LETTER;
			else if ((f & QC_UC_CATEGORIES) == QC_UC_PUNCT)
				b = COLL_PUNCT;
			else if ((f & QC_UC_CATEGORIES) == QC_UC_MARK)
				b = COLL_MARK;
			else if ((f & QC_UC_CATEGORIES) == QC_UC_SYMBOL)
				b = COLL_SYMBOL;
			else
				b = COLL_OTHER;
			sp->coll[i] = (char)b;
		}
	}
	if (p->need_codepoint) {
		sp->utf = malloc(sp->n * 4 + 1);
		sp->boff = malloc((sp->n + 1) * sizeof(*sp->boff));
		if (!sp->utf || !sp->boff)
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		size_t o = 0;
		for (size_t i = 0; i < sp->n; i++) {
			uint32_t cp = sp->cp[i];
			if (cp >= 0x80 && (sp->fl[i] & QC_UC_WHITESPACE))
				cp = 0x0b;      /* as llama.cpp: std::wregex \s is ASCII-only */
			else if (cp >= 0xd800 && cp <= 0xdfff)
				cp = 0xffff;    /* UTF-8 cannot carry surrogates; no rule names either */
			sp->boff[i] = o;
			o += qc_uc_encode(cp, sp->utf + o);
		}
		sp->boff[sp->n] = o;
	}
	return QC_OK;
}

static int split_words(const struct qc_bpe_pre *p, struct split *sp, struct seglist *words,
		       struct qc_err *err)
{
	struct seglist next = { 0 };
	int rc = seg_push(words, sp->n, err);
	if (rc)
		return rc;
	for (int s = 0; s < p->n_steps; s++) {
		next.n = 0;
		size_t ini = 0;
		for (size_t w = 0; w < words->n && !rc; w++) {
			size_t len = words->len[w];
			if (p->step[s].kind == STEP_GPT2 || p->step[s].kind == STEP_LLAMA3) {
				struct cur c = { .sp = sp, .ini = ini, .end = ini + len, .prev = ini,
						 .out = &next, .err = err };
				if (p->step[s].kind == STEP_GPT2)
					split_gpt2(&c);
				else
					split_llama3(&c);
				rc = c.rc;
			} else {
				rc = split_regex(sp, p->step[s].re, p->step[s].kind == STEP_COLLAPSED, ini, len,
						 &next, err);
			}
			ini += len;
		}
		struct seglist t = *words;
		*words = next;
		next = t;
		if (rc)
			break;
	}
	free(next.len);
	return rc;
}

/* ---- merging ---- */

struct sym {
	int prev, next;
	uint32_t off, n; /* bytes of the encoded word */
};

struct bigram {
	int left, right;
	int32_t rank;
	uint32_t size;
};

struct bpe_work {
	char *word;              /* byte-level encoded word */
	size_t word_cap;
	struct sym *sym;
	size_t sym_cap;
	struct bigram *heap;
	size_t n_heap, heap_cap;
};

/* Lowest rank first; among equal ranks the leftmost pair (llama.cpp's order). */
static bool heap_before(const struct bigram *a, const struct bigram *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static int heap_push(struct bpe_work *w, struct bigram b, struct qc_err *err)
{
	if (w->n_heap == w->heap_cap) {
		size_t cap = w->heap_cap ? w->heap_cap * 2 : 64;
		struct bigram *h = realloc(w->heap, cap * sizeof(*h));
		if (!h)
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		w->heap = h;
		w->heap_cap = cap;
	}
	size_t i = w->n_heap++;
	while (i > 0) {
		size_t up = (i - 1) / 2;
		if (!heap_before(&b, &w->heap[up]))
			break;
		w->heap[i] = w->heap[up];
		i = up;
	}
	w->heap[i] = b;
	return QC_OK;
}

static struct bigram heap_pop(struct bpe_work *w)
{
	struct bigram top = w->heap[0], last = w->heap[--w->n_heap];
	size_t i = 0, n = w->n_heap;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && heap_before(&w->heap[c + 1], &w->heap[c]))
			c++;
		if (!heap_before(&w->heap[c], &last))
			break;
		w->heap[i] = w->heap[c];
		i = c;
	}
	if (n)
		w->heap[i] = last;
	return top;
}

static int try_pair(const struct qc_vocab *v, struct bpe_work *w, int l, int r, struct qc_err *err)
{
	if (l < 0 || r < 0)
		return QC_OK;
	const struct sym *a = &w->sym[l], *b = &w->sym[r];
	int32_t rank = qc_vocab_merge_rank(v, w->word + a->off, a->n, w->word + b->off, b->n);
	if (rank < 0)
		return QC_OK;
	return heap_push(w, (struct bigram){ .left = l, .right = r, .rank = rank, .size = a->n + b->n }, err);
}

static int emit_symbol(const struct qc_vocab *v, const char *s, size_t n, struct qc_ids *out,
		       struct qc_err *err)
{
	int32_t id = qc_vocab_lookup(v, s, n);
	if (id != QC_TOKEN_NULL)
		return qc_ids_push(out, id, err);
	/* llama.cpp falls back to single raw bytes, which byte-level vocabs rarely
	 * hold, so such a symbol usually vanishes; we do the same */
	for (size_t i = 0; i < n; i++) {
		id = qc_vocab_lookup(v, s + i, 1);
		if (id != QC_TOKEN_NULL) {
			int rc = qc_ids_push(out, id, err);
			if (rc)
				return rc;
		}
	}
	return QC_OK;
}

static int merge_word(const struct qc_vocab *v, struct bpe_work *w, size_t n, struct qc_ids *out,
		      struct qc_err *err)
{
	int rc;
	if (v->ignore_merges && qc_vocab_lookup(v, w->word, n) != QC_TOKEN_NULL)
		return emit_symbol(v, w->word, n, out, err);
	if (w->sym_cap < n) {
		struct sym *s = realloc(w->sym, n * sizeof(*s));
		if (!s)
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		w->sym = s;
		w->sym_cap = n;
	}
	int ns = 0;
	for (size_t off = 0; off < n; ns++) {
		size_t len = qc_uc_lead_len((unsigned char)w->word[off]);
		if (len > n - off)
			len = n - off;
		w->sym[ns] = (struct sym){ .prev = ns - 1, .next = off + len == n ? -1 : ns + 1,
					   .off = (uint32_t)off, .n = (uint32_t)len };
		off += len;
	}
	w->n_heap = 0;
	for (int i = 1; i < ns; i++)
		if ((rc = try_pair(v, w, i - 1, i, err)))
			return rc;
	while (w->n_heap) {
		struct bigram b = heap_pop(w);
		struct sym *l = &w->sym[b.left], *r = &w->sym[b.right];
		/* sizes only grow, so an unchanged total means neither side merged since */
		if (!l->n || !r->n || l->n + r->n != b.size)
			continue;
		l->n += r->n;
		r->n = 0;
		l->next = r->next;
		if (r->next >= 0)
			w->sym[r->next].prev = b.left;
		if ((rc = try_pair(v, w, l->prev, b.left, err)) || (rc = try_pair(v, w, b.left, l->next, err)))
			return rc;
	}
	for (int i = 0; i < ns; i++)
		if (w->sym[i].n && (rc = emit_symbol(v, w->word + w->sym[i].off, w->sym[i].n, out, err)))
			return rc;
	return QC_OK;
}

/* Byte-level encode code points [ini, ini+len): UTF-8 bytes, each as its alphabet
 * character. Returns the encoded length. */
static int encode_word(struct bpe_work *w, const uint32_t *cp, size_t len, size_t *n, struct qc_err *err)
{
	if (w->word_cap < len * 8) {
		char *p = realloc(w->word, len * 8);
		if (!p)
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		w->word = p;
		w->word_cap = len * 8;
	}
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		char u[4];
		size_t k = qc_uc_encode(cp[i], u);
		for (size_t j = 0; j < k; j++)
			o += qc_uc_encode(qc_bpe_byte_to_cp((uint8_t)u[j]), w->word + o);
	}
	*n = o;
	return QC_OK;
}

int qc_bpe_tokenize(const struct qc_vocab *v, const char *text, size_t len, struct qc_ids *out,
		    struct qc_err *err)
{
	int rc = QC_OK;
	struct split sp = { 0 };
	struct seglist words = { 0 };
	struct bpe_work w = { 0 };
	uint32_t *cp = malloc((len ? len : 1) * sizeof(*cp));
	uint16_t *fl = malloc((len ? len : 1) * sizeof(*fl));
	if (!cp || !fl) {
		rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory for %zu bytes of text", len);
		goto out_free;
	}
	size_t n = 0;
	for (size_t i = 0; i < len;) {
		cp[n] = qc_uc_decode(text, len, &i);
		fl[n] = (uint16_t)qc_uc_flags(cp[n]);
		n++;
	}
	if (!n)
		goto out_free;
	sp = (struct split){ .cp = cp, .fl = fl, .n = n };
	if ((rc = prepare_texts(&sp, v->bpe, err)))
		goto out_free;
	sp.md = pcre2_match_data_create(4, NULL);
	if (!sp.md) {
		rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		goto out_free;
	}
	if ((rc = split_words(v->bpe, &sp, &words, err)))
		goto out_free;
	size_t ini = 0;
	for (size_t k = 0; k < words.n; k++) {
		size_t wn = 0;
		if ((rc = encode_word(&w, cp + ini, words.len[k], &wn, err)) ||
		    (rc = merge_word(v, &w, wn, out, err)))
			goto out_free;
		ini += words.len[k];
	}
out_free:
	pcre2_match_data_free(sp.md);
	free(sp.coll);
	free(sp.utf);
	free(sp.boff);
	free(words.len);
	free(w.word);
	free(w.sym);
	free(w.heap);
	free(fl);
	free(cp);
	return rc;
}
