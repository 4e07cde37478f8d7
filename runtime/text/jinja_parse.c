/* jinja_parse.c — tokens to a syntax tree, and the template's lifetime (see jinja.h).
 *
 * Owns: statements (text, {{ }}, if/elif/else, for/else with an inline "if",
 * set to a name, to "a, b" or to ns.attr, break/continue, transformers'
 * {% generation %} marker which renders nothing) and expressions with Jinja2's
 * precedence, loosest first: "a if c else b", or, and, not, comparisons and
 * (not) in, + -, ~, * / // %, **, unary - +, then postfix . [] [a:b:c] (),
 * "| filter(args)" and "is [not] test".
 * Non-goals: macros, call/filter blocks, block set, include/extends/import.
 * Invariant: recursion is bounded by lim.max_depth, so hostile nesting is an
 * error, not a stack overflow.
 */
#include "jinja_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct blk {
	struct blk *next;
	max_align_t data[];
};

void *jinja_tree_alloc(struct qc_jinja *t, size_t n)
{
	struct blk *b = calloc(1, sizeof *b + n);
	if (!b)
		return NULL;
	b->next = t->blocks;
	t->blocks = b;
	return b->data;
}

struct ps {
	struct qc_jinja *t;
	const struct jtokens *tk;
	size_t i;
	struct qc_err *err;
	int rc;
};

static const struct jtoken *cur(struct ps *p) { return &p->tk->v[p->i]; }

static int pfail(struct ps *p, const struct jtoken *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pfail(struct ps *p, const struct jtoken *at, const char *fmt, ...)
{
	char m[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	if (!p->rc)
		p->rc = qc_err_set(p->err, QC_EFORMAT, NULL, NULL, -1, "chat template line %d col %d: %s", at->line,
				   at->col, m);
	return p->rc;
}

static bool is_op(const struct jtoken *t, const char *op)
{
	return t->k == T_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n);
}

static bool is_name(const struct jtoken *t, const char *nm)
{
	return t->k == T_NAME && t->n == strlen(nm) && !memcmp(t->s, nm, t->n);
}

static bool accept_op(struct ps *p, const char *op)
{
	if (is_op(cur(p), op)) {
		p->i++;
		return true;
	}
	return false;
}

static bool accept_name(struct ps *p, const char *nm)
{
	if (is_name(cur(p), nm)) {
		p->i++;
		return true;
	}
	return false;
}

static bool expect_op(struct ps *p, const char *op)
{
	if (accept_op(p, op))
		return true;
	pfail(p, cur(p), "expected '%s'", op);
	return false;
}

static char *dup_tok(struct ps *p, const struct jtoken *t)
{
	char *s = jinja_tree_alloc(p->t, t->n + 1);
	if (s)
		memcpy(s, t->s, t->n);
	else if (!p->rc)
		p->rc = qc_err_set(p->err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	return s;
}

static struct jn *node(struct ps *p, enum jnode k, const struct jtoken *at)
{
	struct jn *n = jinja_tree_alloc(p->t, sizeof *n);
	if (!n) {
		if (!p->rc)
			p->rc = qc_err_set(p->err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		return NULL;
	}
	n->k = k;
	n->line = at->line;
	n->col = at->col;
	return n;
}

/* A growable node list, copied into the tree at the end. */
struct nlist {
	struct jn **v;
	const char **kw;
	size_t n, cap;
};

static bool nl_push(struct ps *p, struct nlist *l, struct jn *n, const char *kw)
{
	if (l->n == l->cap) {
		size_t c = l->cap ? l->cap * 2 : 8;
		struct jn **v = jinja_tree_alloc(p->t, c * sizeof *v);
		const char **k = jinja_tree_alloc(p->t, c * sizeof *k);
		if (!v || !k) {
			if (!p->rc)
				p->rc = qc_err_set(p->err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
			return false;
		}
		if (l->n) {
			memcpy(v, l->v, l->n * sizeof *v);
			memcpy(k, l->kw, l->n * sizeof *k);
		}
		l->v = v;
		l->kw = k;
		l->cap = c;
	}
	l->v[l->n] = n;
	l->kw[l->n++] = kw;
	return true;
}

static struct jn *expr(struct ps *p);

static bool enter(struct ps *p)
{
	if ((size_t)++p->t->depth > p->t->lim.max_depth) {
		if (!p->rc)
			p->rc = qc_err_set(p->err, QC_ERANGE, NULL, NULL, -1,
					   "chat template line %d col %d: nested deeper than %zu", cur(p)->line,
					   cur(p)->col, p->t->lim.max_depth);
		return false;
	}
	return true;
}

/* "(a, k=v)" after the opening parenthesis was consumed */
static bool call_args(struct ps *p, struct jn *n)
{
	struct nlist l = {0};
	while (!accept_op(p, ")")) {
		if (l.n && !expect_op(p, ","))
			return false;
		if (accept_op(p, ")"))
			break;
		const char *kw = NULL;
		if (cur(p)->k == T_NAME && is_op(&p->tk->v[p->i + 1], "=")) {
			if (!(kw = dup_tok(p, cur(p))))
				return false;
			p->i += 2;
		}
		struct jn *a = expr(p);
		if (!a || !nl_push(p, &l, a, kw))
			return false;
	}
	n->args = l.v;
	n->kw = l.kw;
	n->n_args = l.n;
	return true;
}

static struct jn *primary(struct ps *p)
{
	const struct jtoken *t = cur(p);
	struct jn *n;
	switch (t->k) {
	case T_NAME:
		p->i++;
		if (!(n = node(p, N_LIT, t)))
			return NULL;
		if (is_name(t, "true") || is_name(t, "True"))
			n->lit = jv_bool(true);
		else if (is_name(t, "false") || is_name(t, "False"))
			n->lit = jv_bool(false);
		else if (is_name(t, "none") || is_name(t, "None"))
			n->lit = jv_none();
		else if (n->k = N_NAME, !(n->s = dup_tok(p, t)))
			return NULL;
		return n;
	case T_STR: {
		/* adjacent literals concatenate, as in Python */
		size_t total = 0, j;
		for (j = p->i; p->tk->v[j].k == T_STR; j++)
			total += p->tk->v[j].n;
		char *s = jinja_tree_alloc(p->t, total + 1);
		if (!s || !(n = node(p, N_LIT, t)))
			return pfail(p, t, "out of memory"), NULL;
		total = 0;
		for (; p->i < j; p->i++) {
			memcpy(s + total, p->tk->v[p->i].s, p->tk->v[p->i].n);
			total += p->tk->v[p->i].n;
		}
		n->lit = jv_str(s, total);
		return n;
	}
	case T_INT:
	case T_FLOAT:
		p->i++;
		if (!(n = node(p, N_LIT, t)))
			return NULL;
		n->lit = t->k == T_INT ? jv_int(t->i) : jv_float(t->f);
		return n;
	case T_OP:
		if (accept_op(p, "(")) {
			struct jn *e = expr(p);
			if (!e)
				return NULL;
			if (!is_op(cur(p), ","))
				return expect_op(p, ")") ? e : NULL;
			/* a tuple: evaluated as a list */
			struct nlist l = {0};
			if (!nl_push(p, &l, e, NULL))
				return NULL;
			while (accept_op(p, ",") && !is_op(cur(p), ")"))
				if (!(e = expr(p)) || !nl_push(p, &l, e, NULL))
					return NULL;
			if (!expect_op(p, ")") || !(n = node(p, N_LIST, t)))
				return NULL;
			n->s = "tuple";
			n->args = l.v;
			n->n_args = l.n;
			return n;
		}
		if (accept_op(p, "[") || accept_op(p, "{")) {
			bool dict = is_op(t, "{");
			struct nlist l = {0};
			while (!accept_op(p, dict ? "}" : "]")) {
				if (l.n && !expect_op(p, ","))
					return NULL;
				if (accept_op(p, dict ? "}" : "]"))
					break;
				struct jn *e = expr(p);
				if (!e || !nl_push(p, &l, e, NULL))
					return NULL;
				if (dict && (!expect_op(p, ":") || !(e = expr(p)) || !nl_push(p, &l, e, NULL)))
					return NULL;
			}
			if (!(n = node(p, dict ? N_DICT : N_LIST, t)))
				return NULL;
			n->args = l.v;
			n->n_args = l.n;
			return n;
		}
		break;
	default:
		break;
	}
	pfail(p, t, "expected an expression");
	return NULL;
}

static struct jn *postfix(struct ps *p, struct jn *n)
{
	for (;;) {
		const struct jtoken *t = cur(p);
		struct jn *m;
		if (accept_op(p, ".")) {
			if (cur(p)->k != T_NAME && cur(p)->k != T_INT)
				return pfail(p, cur(p), "expected an attribute name after '.'"), NULL;
			if (!(m = node(p, N_ATTR, t)))
				return NULL;
			if (cur(p)->k == T_INT) { /* x.0 is x[0] */
				m->k = N_INDEX;
				if (!(m->b = node(p, N_LIT, cur(p))))
					return NULL;
				m->b->lit = jv_int(cur(p)->i);
			} else if (!(m->s = dup_tok(p, cur(p)))) {
				return NULL;
			}
			p->i++;
			m->a = n;
		} else if (accept_op(p, "[")) {
			struct jn *parts[3] = {0};
			int np = 0;
			bool slice = false;
			for (;;) {
				if (!is_op(cur(p), ":") && !is_op(cur(p), "]") && !(parts[np] = expr(p)))
					return NULL;
				if (np < 2 && accept_op(p, ":")) {
					slice = true;
					np++;
					continue;
				}
				break;
			}
			if (!expect_op(p, "]") || !(m = node(p, slice ? N_SLICE : N_INDEX, t)))
				return NULL;
			if (!slice && !parts[0])
				return pfail(p, t, "empty subscript"), NULL;
			m->a = n;
			m->b = parts[0];
			m->c = parts[1];
			m->cond = parts[2];
		} else if (accept_op(p, "(")) {
			if (!(m = node(p, N_CALL, t)))
				return NULL;
			m->a = n;
			if (!call_args(p, m))
				return NULL;
		} else {
			return n;
		}
		n = m;
	}
}

/* filters and tests after a postfix expression */
static struct jn *filtered(struct ps *p, struct jn *n)
{
	for (;;) {
		const struct jtoken *t = cur(p);
		bool neg = false;
		struct jn *m;
		if (accept_op(p, "|")) {
			if (!(m = node(p, N_FILTER, t)))
				return NULL;
		} else if (accept_name(p, "is")) {
			neg = accept_name(p, "not");
			if (!(m = node(p, N_TEST, t)))
				return NULL;
		} else {
			return n;
		}
		if (cur(p)->k != T_NAME)
			return pfail(p, cur(p), "expected a %s name", m->k == N_TEST ? "test" : "filter"), NULL;
		if (!(m->s = dup_tok(p, cur(p))))
			return NULL;
		p->i++;
		m->a = n;
		if (accept_op(p, "(")) {
			if (!call_args(p, m))
				return NULL;
		} else if (m->k == N_TEST && (cur(p)->k == T_STR || cur(p)->k == T_INT || cur(p)->k == T_FLOAT)) {
			struct jn *arg = primary(p);
			struct nlist l = {0};
			if (!arg || !nl_push(p, &l, arg, NULL))
				return NULL;
			m->args = l.v;
			m->kw = l.kw;
			m->n_args = 1;
		}
		if (neg) {
			struct jn *x = node(p, N_NOT, t);
			if (!x)
				return NULL;
			x->a = m;
			m = x;
		}
		n = m;
	}
}

static struct jn *unary(struct ps *p)
{
	const struct jtoken *t = cur(p);
	struct jn *n;
	if (!enter(p))
		return NULL;
	if (accept_op(p, "-") || accept_op(p, "+")) {
		if ((n = node(p, N_UNARY, t))) {
			n->s = t->s;
			n->a = unary(p);
			if (!n->a)
				n = NULL;
		}
	} else {
		n = primary(p);
		if (n)
			n = postfix(p, n);
		if (n)
			n = filtered(p, n);
	}
	p->t->depth--;
	return n;
}

/* left-associative binary levels, tightest last */
static const char *const levels[][5] = {
	{"+", "-", NULL}, {"~", NULL}, {"*", "/", "//", "%", NULL}, {"**", NULL},
};

static struct jn *binary(struct ps *p, int lv)
{
	if (lv == 4)
		return unary(p);
	struct jn *l = binary(p, lv + 1);
	while (l) {
		const struct jtoken *t = cur(p);
		const char *op = NULL;
		for (int k = 0; levels[lv][k]; k++)
			if (is_op(t, levels[lv][k]))
				op = levels[lv][k];
		if (!op)
			break;
		p->i++;
		struct jn *n = node(p, N_BIN, t);
		if (!n)
			return NULL;
		n->s = op;
		n->a = l;
		if (!(n->b = binary(p, lv + 1)))
			return NULL;
		l = n;
	}
	return l;
}

static struct jn *compare(struct ps *p)
{
	static const char *const cmp[] = {"==", "!=", "<=", ">=", "<", ">", NULL};
	struct jn *l = binary(p, 0);
	while (l) {
		const struct jtoken *t = cur(p);
		const char *op = NULL;
		for (int k = 0; cmp[k]; k++)
			if (is_op(t, cmp[k]))
				op = cmp[k];
		if (op) {
			p->i++;
		} else if (is_name(t, "in")) {
			p->i++;
			op = "in";
		} else if (is_name(t, "not") && is_name(&p->tk->v[p->i + 1], "in")) {
			p->i += 2;
			op = "not in";
		} else {
			break;
		}
		struct jn *n = node(p, N_BIN, t);
		if (!n)
			return NULL;
		n->s = op;
		n->a = l;
		if (!(n->b = binary(p, 0)))
			return NULL;
		l = n;
	}
	return l;
}

static struct jn *not_expr(struct ps *p)
{
	const struct jtoken *t = cur(p);
	if (!is_name(t, "not"))
		return compare(p);
	p->i++;
	struct jn *n = node(p, N_NOT, t);
	if (!n || !enter(p))
		return NULL;
	n->a = not_expr(p);
	p->t->depth--;
	return n->a ? n : NULL;
}

static struct jn *logic(struct ps *p, bool is_or)
{
	struct jn *l = is_or ? logic(p, false) : not_expr(p);
	while (l && is_name(cur(p), is_or ? "or" : "and")) {
		struct jn *n = node(p, is_or ? N_OR : N_AND, cur(p));
		p->i++;
		if (!n)
			return NULL;
		n->a = l;
		if (!(n->b = is_or ? logic(p, false) : not_expr(p)))
			return NULL;
		l = n;
	}
	return l;
}

static struct jn *expr(struct ps *p)
{
	if (!enter(p))
		return NULL;
	struct jn *e = logic(p, true);
	while (e && is_name(cur(p), "if")) {
		struct jn *n = node(p, N_COND, cur(p));
		p->i++;
		if (!n || !(n->a = logic(p, true)))
			return NULL;
		n->b = e;
		if (accept_name(p, "else") && !(n->c = expr(p)))
			return NULL;
		e = n;
	}
	p->t->depth--;
	return e;
}

static bool tag_end(struct ps *p)
{
	if (cur(p)->k == T_BLOCK_END) {
		p->i++;
		return true;
	}
	pfail(p, cur(p), "expected '%%}'");
	return false;
}

static struct jn *body(struct ps *p, const char *const *ends, const char **hit);

static struct jn *stmt_if(struct ps *p, const struct jtoken *t)
{
	static const char *const ends[] = {"elif", "else", "endif", NULL};
	struct jn *n = node(p, N_IF, t);
	const char *hit = NULL;
	if (!n || !(n->a = expr(p)) || !tag_end(p) || !(n->b = body(p, ends, &hit)))
		return NULL;
	if (!strcmp(hit, "elif")) {
		/* elif chains nest as an if in the else branch */
		struct jn *b = jinja_tree_alloc(p->t, sizeof *b);
		struct jn **one = jinja_tree_alloc(p->t, sizeof *one);
		if (!b || !one || !(one[0] = stmt_if(p, &p->tk->v[p->i - 1])))
			return pfail(p, t, "out of memory"), NULL;
		b->k = N_BODY;
		b->args = one;
		b->n_args = 1;
		n->c = b;
		return n;
	}
	if (!strcmp(hit, "else")) {
		static const char *const e2[] = {"endif", NULL};
		if (!tag_end(p) || !(n->c = body(p, e2, &hit)))
			return NULL;
	}
	return tag_end(p) ? n : NULL;
}

static struct jn *stmt_for(struct ps *p, const struct jtoken *t)
{
	static const char *const ends[] = {"else", "endfor", NULL};
	struct jn *n = node(p, N_FOR, t);
	const char *hit = NULL;
	if (!n)
		return NULL;
	if (cur(p)->k != T_NAME || !(n->s = dup_tok(p, cur(p))))
		return pfail(p, cur(p), "expected a loop variable"), NULL;
	p->i++;
	if (accept_op(p, ",")) {
		if (cur(p)->k != T_NAME || !(n->var2 = dup_tok(p, cur(p))))
			return pfail(p, cur(p), "expected a second loop variable"), NULL;
		p->i++;
	}
	if (!accept_name(p, "in"))
		return pfail(p, cur(p), "expected 'in'"), NULL;
	/* the iterable stops before an inline "if": parse below the ternary level */
	if (!(n->a = logic(p, true)))
		return NULL;
	if (accept_name(p, "if") && !(n->cond = logic(p, true)))
		return NULL;
	if (accept_name(p, "recursive"))
		return pfail(p, t, "recursive loops are not supported"), NULL;
	if (!tag_end(p) || !(n->b = body(p, ends, &hit)))
		return NULL;
	if (!strcmp(hit, "else")) {
		static const char *const e2[] = {"endfor", NULL};
		if (!tag_end(p) || !(n->c = body(p, e2, &hit)))
			return NULL;
	}
	return tag_end(p) ? n : NULL;
}

static struct jn *stmt_set(struct ps *p, const struct jtoken *t)
{
	struct jn *n = node(p, N_SET, t);
	if (!n)
		return NULL;
	if (cur(p)->k != T_NAME || !(n->s = dup_tok(p, cur(p))))
		return pfail(p, cur(p), "expected a name to set"), NULL;
	p->i++;
	if (accept_op(p, ".")) {
		if (cur(p)->k != T_NAME || !(n->attr = dup_tok(p, cur(p))))
			return pfail(p, cur(p), "expected an attribute name"), NULL;
		p->i++;
	} else if (accept_op(p, ",")) {
		if (cur(p)->k != T_NAME || !(n->var2 = dup_tok(p, cur(p))))
			return pfail(p, cur(p), "expected a second name"), NULL;
		p->i++;
	}
	if (!is_op(cur(p), "="))
		return pfail(p, cur(p), "block {%% set %%} is not supported; expected '='"), NULL;
	p->i++;
	if (!(n->a = expr(p)))
		return NULL;
	return tag_end(p) ? n : NULL;
}

static struct jn *body(struct ps *p, const char *const *ends, const char **hit)
{
	struct nlist l = {0};
	const struct jtoken *first = cur(p);
	if (!enter(p))
		return NULL;
	for (;;) {
		const struct jtoken *t = cur(p);
		struct jn *n = NULL;
		if (t->k == T_EOF) {
			if (ends) {
				pfail(p, first, "block opened here is never closed (expected {%% %s %%})",
				      ends[0] && ends[1] ? ends[1] : ends[0]);
				return NULL;
			}
			break;
		}
		if (t->k == T_TEXT) {
			p->i++;
			if (!(n = node(p, N_TEXT, t)))
				return NULL;
			n->lit = jv_str(t->s, t->n);
		} else if (t->k == T_VAR_BEGIN) {
			p->i++;
			if (!(n = node(p, N_OUT, t)) || !(n->a = expr(p)))
				return NULL;
			if (cur(p)->k != T_VAR_END)
				return pfail(p, cur(p), "expected '}}'"), NULL;
			p->i++;
		} else if (t->k == T_BLOCK_BEGIN) {
			p->i++;
			const struct jtoken *kw = cur(p);
			if (kw->k != T_NAME)
				return pfail(p, kw, "expected a statement name"), NULL;
			bool end = false;
			for (int k = 0; ends && ends[k]; k++)
				if (is_name(kw, ends[k])) {
					*hit = ends[k];
					end = true;
				}
			if (end) {
				p->i++;
				break;
			}
			p->i++;
			if (is_name(kw, "if")) {
				n = stmt_if(p, kw);
			} else if (is_name(kw, "for")) {
				n = stmt_for(p, kw);
			} else if (is_name(kw, "set")) {
				n = stmt_set(p, kw);
			} else if (is_name(kw, "break") || is_name(kw, "continue")) {
				if ((n = node(p, is_name(kw, "break") ? N_BREAK : N_CONTINUE, kw)) && !tag_end(p))
					return NULL;
			} else if (is_name(kw, "generation") || is_name(kw, "endgeneration")) {
				if (!tag_end(p))
					return NULL;
				continue;
			} else {
				return pfail(p, kw, "unsupported or unexpected statement '%.*s'", (int)kw->n, kw->s),
				       NULL;
			}
			if (!n)
				return NULL;
		} else {
			return pfail(p, t, "unexpected token"), NULL;
		}
		if (!nl_push(p, &l, n, NULL))
			return NULL;
	}
	p->t->depth--;
	struct jn *b = node(p, N_BODY, first);
	if (!b)
		return NULL;
	b->args = l.v;
	b->n_args = l.n;
	return b;
}

void qc_jinja_limits_default(struct qc_jinja_limits *l)
{
	l->max_template_bytes = 1u << 20;
	l->max_output_bytes = 16u << 20;
	l->max_loop_iters = 1000000;
	l->max_depth = 200;
	l->max_scratch_bytes = 256u << 20;
}

int qc_jinja_parse(const char *src, size_t len, const struct qc_jinja_limits *lim, struct qc_jinja **out,
		   struct qc_err *err)
{
	*out = NULL;
	struct qc_jinja *t = calloc(1, sizeof *t);
	if (!t)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	if (lim)
		t->lim = *lim;
	else
		qc_jinja_limits_default(&t->lim);
	if (len > t->lim.max_template_bytes) {
		size_t max = t->lim.max_template_bytes;
		qc_jinja_free(t);
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "chat template: %zu bytes, more than the limit %zu",
				  len, max);
	}
	/* Jinja2's default keep_trailing_newline=False drops one final newline */
	if (len && src[len - 1] == '\n')
		len--;
	struct jtokens tk = {0};
	int rc = jinja_lex(t, src, len, &tk, err);
	if (!rc) {
		struct ps p = {.t = t, .tk = &tk, .err = err};
		t->root = body(&p, NULL, NULL);
		rc = p.rc ? p.rc : t->root ? QC_OK : qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "chat template: parse error");
	}
	jinja_tokens_deinit(&tk);
	if (rc) {
		qc_jinja_free(t);
		return rc;
	}
	*out = t;
	return QC_OK;
}

void qc_jinja_free(struct qc_jinja *t)
{
	if (!t)
		return;
	for (struct blk *b = t->blocks, *nx; b; b = nx) {
		nx = b->next;
		free(b);
	}
	free(t);
}
