/* jinja_lex.c — template text to tokens (see jinja_int.h).
 *
 * Owns: the split into text / {{ }} / {% %} / {# #}, whitespace control
 * ("-" strips all whitespace on that side, "+" keeps it) and the two options
 * transformers turns on: trim_blocks (the first newline after a block or comment
 * tag goes) and lstrip_blocks (spaces and tabs between a line start and a block
 * or comment tag go). Inside tags: names, numbers, quoted strings with Python
 * escapes, operators. "}}" closes an expression tag only outside brackets.
 * Non-goals: {% raw %}, line statements, custom delimiters, \r\n normalisation.
 */
#include "jinja_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct lx {
	struct qc_jinja *t;
	const char *s;
	size_t len, pos;
	struct jtokens *out;
	struct qc_err *err;
	size_t lc_off; /* line/col cache: position of (line, col) */
	int line, col;
};

static void linecol(struct lx *l, size_t off, int *line, int *col)
{
	if (off < l->lc_off) {
		l->lc_off = 0;
		l->line = 1;
		l->col = 1;
	}
	for (; l->lc_off < off; l->lc_off++) {
		if (l->s[l->lc_off] == '\n') {
			l->line++;
			l->col = 1;
		} else {
			l->col++;
		}
	}
	*line = l->line;
	*col = l->col;
}

static int lfail(struct lx *l, size_t off, const char *what)
{
	int line, col;
	linecol(l, off, &line, &col);
	return qc_err_set(l->err, QC_EFORMAT, NULL, NULL, -1, "chat template line %d col %d: %s", line, col, what);
}

static struct jtoken *push(struct lx *l, enum jtok k, size_t off)
{
	struct jtokens *o = l->out;
	if (o->n == o->cap) {
		size_t c = o->cap ? o->cap * 2 : 256;
		struct jtoken *v = realloc(o->v, c * sizeof *v);
		if (!v)
			return NULL;
		o->v = v;
		o->cap = c;
	}
	struct jtoken *tk = &o->v[o->n++];
	memset(tk, 0, sizeof *tk);
	tk->k = k;
	linecol(l, off, &tk->line, &tk->col);
	return tk;
}

static int push_text(struct lx *l, size_t off, const char *p, size_t n)
{
	if (!n)
		return QC_OK;
	char *c = jinja_tree_alloc(l->t, n + 1);
	struct jtoken *tk = c ? push(l, T_TEXT, off) : NULL;
	if (!tk)
		return qc_err_set(l->err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	memcpy(c, p, n);
	tk->s = c;
	tk->n = n;
	return QC_OK;
}

static void put_utf8(char *d, size_t *n, uint32_t cp)
{
	if (cp < 0x80) {
		d[(*n)++] = (char)cp;
	} else if (cp < 0x800) {
		d[(*n)++] = (char)(0xc0 | cp >> 6);
		d[(*n)++] = (char)(0x80 | (cp & 0x3f));
	} else if (cp < 0x10000) {
		d[(*n)++] = (char)(0xe0 | cp >> 12);
		d[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
		d[(*n)++] = (char)(0x80 | (cp & 0x3f));
	} else {
		d[(*n)++] = (char)(0xf0 | cp >> 18);
		d[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
		d[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
		d[(*n)++] = (char)(0x80 | (cp & 0x3f));
	}
}

/* A quoted string at l->pos; the decoded text is never longer than the source. */
static int lex_string(struct lx *l)
{
	size_t start = l->pos;
	char q = l->s[l->pos++];
	char *d = jinja_tree_alloc(l->t, l->len - start + 1);
	size_t n = 0;
	if (!d)
		return qc_err_set(l->err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	for (;;) {
		if (l->pos >= l->len)
			return lfail(l, start, "unterminated string");
		char ch = l->s[l->pos++];
		if (ch == q)
			break;
		if (ch != '\\') {
			d[n++] = ch;
			continue;
		}
		if (l->pos >= l->len)
			return lfail(l, start, "unterminated string");
		char e = l->s[l->pos++];
		switch (e) {
		case 'n': d[n++] = '\n'; break;
		case 't': d[n++] = '\t'; break;
		case 'r': d[n++] = '\r'; break;
		case '0': d[n++] = '\0'; break;
		case '\\': case '\'': case '"': d[n++] = e; break;
		case '\n': break; /* a line continuation */
		case 'x': case 'u': case 'U': {
			int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
			uint32_t cp = 0;
			if (l->len - l->pos < (size_t)nd)
				return lfail(l, l->pos, "bad escape in string");
			for (int i = 0; i < nd; i++) {
				int c = (unsigned char)l->s[l->pos++];
				if (!isxdigit(c))
					return lfail(l, l->pos - 1, "bad escape in string");
				cp = cp * 16 + (uint32_t)(isdigit(c) ? c - '0' : (tolower(c) - 'a' + 10));
			}
			if (cp > 0x10ffff)
				return lfail(l, l->pos, "bad escape in string");
			put_utf8(d, &n, cp); /* at most 4 bytes for >= 4 source bytes */
			break;
		}
		default: /* Python keeps an unknown escape as written */
			d[n++] = '\\';
			d[n++] = e;
		}
	}
	struct jtoken *tk = push(l, T_STR, start);
	if (!tk)
		return qc_err_set(l->err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	tk->s = d;
	tk->n = n;
	return QC_OK;
}

static int lex_number(struct lx *l)
{
	size_t start = l->pos;
	bool flt = false;
	char buf[64];
	size_t n = 0;
	while (l->pos < l->len) {
		char ch = l->s[l->pos];
		if (isdigit((unsigned char)ch) || ch == '_') {
			/* digits */
		} else if (ch == '.' && !flt && l->pos + 1 < l->len && isdigit((unsigned char)l->s[l->pos + 1])) {
			flt = true;
		} else if ((ch == 'e' || ch == 'E') && n > 0) {
			flt = true;
			if (l->pos + 1 < l->len && (l->s[l->pos + 1] == '-' || l->s[l->pos + 1] == '+')) {
				buf[n++] = ch;
				l->pos++;
				ch = l->s[l->pos];
			}
		} else {
			break;
		}
		if (ch != '_') {
			if (n + 1 >= sizeof buf)
				return lfail(l, start, "number too long");
			buf[n++] = ch;
		}
		l->pos++;
	}
	buf[n] = '\0';
	struct jtoken *tk = push(l, flt ? T_FLOAT : T_INT, start);
	if (!tk)
		return qc_err_set(l->err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	char *end;
	if (flt) {
		tk->f = strtod(buf, &end);
	} else {
		errno = 0;
		tk->i = strtoll(buf, &end, 10);
		if (errno)
			return lfail(l, start, "integer out of range");
	}
	if (*end)
		return lfail(l, start, "bad number");
	return QC_OK;
}

static const char *const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
				  "(", ")", "[", "]", "{", "}", ".", ",", ":", "|", "=", NULL};

/* Tokens of one tag up to its closing delimiter; *strip_after is set by "-%}" / "-}}". */
static int lex_tag(struct lx *l, size_t open, bool var, bool *strip_after, bool *keep_after, size_t *close_off)
{
	const char *close = var ? "}}" : "%}";
	int depth = 0;
	for (;;) {
		while (l->pos < l->len && isspace((unsigned char)l->s[l->pos]))
			l->pos++;
		if (l->pos >= l->len)
			return lfail(l, open, var ? "'{{' without '}}'" : "'{%' without '%}'");
		const char *p = l->s + l->pos;
		size_t left = l->len - l->pos;
		*close_off = l->pos;
		if (depth == 0 && left >= 3 && (p[0] == '-' || p[0] == '+') && !memcmp(p + 1, close, 2)) {
			*strip_after = p[0] == '-';
			*keep_after = p[0] == '+';
			l->pos += 3;
			break;
		}
		if (depth == 0 && left >= 2 && !memcmp(p, close, 2)) {
			l->pos += 2;
			break;
		}
		char ch = *p;
		int rc;
		if (ch == '\'' || ch == '"') {
			if ((rc = lex_string(l)))
				return rc;
			continue;
		}
		if (isdigit((unsigned char)ch)) {
			if ((rc = lex_number(l)))
				return rc;
			continue;
		}
		if (isalpha((unsigned char)ch) || ch == '_') {
			size_t s = l->pos;
			while (l->pos < l->len && (isalnum((unsigned char)l->s[l->pos]) || l->s[l->pos] == '_'))
				l->pos++;
			struct jtoken *tk = push(l, T_NAME, s);
			if (!tk)
				return qc_err_set(l->err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
			tk->s = l->s + s;
			tk->n = l->pos - s;
			continue;
		}
		size_t k;
		for (k = 0; ops[k]; k++)
			if (left >= strlen(ops[k]) && !memcmp(p, ops[k], strlen(ops[k])))
				break;
		if (!ops[k])
			return lfail(l, l->pos, "unexpected character");
		if (ch == '(' || ch == '[' || ch == '{')
			depth++;
		else if ((ch == ')' || ch == ']' || ch == '}') && depth > 0)
			depth--;
		struct jtoken *tk = push(l, T_OP, l->pos);
		if (!tk)
			return qc_err_set(l->err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		tk->s = ops[k];
		tk->n = strlen(ops[k]);
		l->pos += tk->n;
	}
	return QC_OK;
}

int jinja_lex(struct qc_jinja *t, const char *src, size_t len, struct jtokens *out, struct qc_err *err)
{
	struct lx l = {.t = t, .s = src, .len = len, .out = out, .err = err, .line = 1, .col = 1};
	bool strip_next = false, trim_next = false;
	int rc;
	while (l.pos <= len) {
		size_t tag = l.pos;
		while (tag + 1 < len && !(src[tag] == '{' && (src[tag + 1] == '{' || src[tag + 1] == '%' ||
							      src[tag + 1] == '#')))
			tag++;
		if (tag + 1 >= len)
			tag = len;
		size_t a = l.pos, b = tag;
		if (strip_next)
			while (a < b && isspace((unsigned char)src[a]))
				a++;
		else if (trim_next && a < b && src[a] == '\n')
			a++;
		strip_next = trim_next = false;
		if (tag == len) {
			if ((rc = push_text(&l, a, src + a, b - a)))
				return rc;
			break;
		}
		char kind = src[tag + 1], mod = tag + 2 < len ? src[tag + 2] : 0;
		if (mod == '-') {
			while (b > a && isspace((unsigned char)src[b - 1]))
				b--;
		} else if (mod != '+' && kind != '{') {
			/* lstrip_blocks: only blanks between the line start and the tag */
			size_t ls = b;
			while (ls > a && (src[ls - 1] == ' ' || src[ls - 1] == '\t'))
				ls--;
			if (ls == 0 || src[ls - 1] == '\n')
				b = ls;
		}
		if ((rc = push_text(&l, a, src + a, b - a)))
			return rc;
		l.pos = tag + 2 + (mod == '-' || mod == '+');
		if (kind == '#') {
			const char *e = NULL;
			for (size_t i = l.pos; i + 1 < len; i++)
				if (src[i] == '#' && src[i + 1] == '}') {
					e = src + i;
					break;
				}
			if (!e)
				return lfail(&l, tag, "'{#' without '#}'");
			size_t end = (size_t)(e - src);
			strip_next = end > l.pos && src[end - 1] == '-';
			trim_next = !strip_next && !(end > l.pos && src[end - 1] == '+');
			l.pos = end + 2;
			continue;
		}
		bool var = kind == '{', keep = false;
		size_t close_off = tag;
		if (!push(&l, var ? T_VAR_BEGIN : T_BLOCK_BEGIN, tag))
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		if ((rc = lex_tag(&l, tag, var, &strip_next, &keep, &close_off)))
			return rc;
		if (!push(&l, var ? T_VAR_END : T_BLOCK_END, close_off))
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		trim_next = !var && !strip_next && !keep;
	}
	if (!push(&l, T_EOF, len))
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	return QC_OK;
}

void jinja_tokens_deinit(struct jtokens *t)
{
	if (t) {
		free(t->v);
		t->v = NULL;
		t->n = t->cap = 0;
	}
}
