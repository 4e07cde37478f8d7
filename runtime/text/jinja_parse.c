/* jinja_parse.c — expressions: tokens to syntax-tree nodes (see jinja_int.h).
 *
 * Owns: the tree's allocations, the parser helpers jinja_stmt.c shares, and the
 * expression grammar with Jinja2's precedence, loosest first: "a if c else b",
 * or, and, not, comparisons and (not) in, + -, ~, * / // %, **, unary - +, then
 * postfix . [] [a:b:c] (), "| filter(args)" and "is [not] test" (a test may take
 * one literal argument without parentheses: "is divisibleby 3").
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

void jinja_tree_free(struct qc_jinja *t)
{
	for (struct blk *b = t->blocks, *nx; b; b = nx) {
		nx = b->next;
		free(b);
	}
	t->blocks = NULL;
}

const struct jtoken *jp_cur(struct ps *p) { return &p->tk->v[p->i]; }

int jp_pfail(struct ps *p, const struct jtoken *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int jp_pfail(struct ps *p, const struct jtoken *at, const char *fmt, ...)
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

bool jp_is_op(const struct jtoken *t, const char *op)
{
	return t->k == T_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n);
}

bool jp_is_name(const struct jtoken *t, const char *nm)
{
	return t->k == T_NAME && t->n == strlen(nm) && !memcmp(t->s, nm, t->n);
}

bool jp_accept_op(struct ps *p, const char *op)
{
	if (jp_is_op(jp_cur(p), op)) {
		p->i++;
		return true;
	}
	return false;
}

bool jp_accept_name(struct ps *p, const char *nm)
{
	if (jp_is_name(jp_cur(p), nm)) {
		p->i++;
		return true;
	}
	return false;
}

bool jp_expect_op(struct ps *p, const char *op)
{
	if (jp_accept_op(p, op))
		return true;
	jp_pfail(p, jp_cur(p), "expected '%s'", op);
	return false;
}

char *jp_dup_tok(struct ps *p, const struct jtoken *t)
{
	char *s = jinja_tree_alloc(p->t, t->n + 1);
	if (s)
		memcpy(s, t->s, t->n);
	else if (!p->rc)
		p->rc = qc_err_set(p->err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	return s;
}

struct jn *jp_node(struct ps *p, enum jnode k, const struct jtoken *at)
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

bool jp_nl_push(struct ps *p, struct nlist *l, struct jn *n, const char *kw)
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

struct jn *jp_expr(struct ps *p);

bool jp_enter(struct ps *p)
{
	if ((size_t)++p->t->depth > p->t->lim.max_depth) {
		if (!p->rc)
			p->rc = qc_err_set(p->err, QC_ERANGE, NULL, NULL, -1,
					   "chat template line %d col %d: nested deeper than %zu", jp_cur(p)->line,
					   jp_cur(p)->col, p->t->lim.max_depth);
		return false;
	}
	return true;
}

/* "(a, k=v)" after the opening parenthesis was consumed */
static bool call_args(struct ps *p, struct jn *n)
{
	struct nlist l = {0};
	while (!jp_accept_op(p, ")")) {
		if (l.n && !jp_expect_op(p, ","))
			return false;
		if (jp_accept_op(p, ")"))
			break;
		const char *kw = NULL;
		if (jp_cur(p)->k == T_NAME && jp_is_op(&p->tk->v[p->i + 1], "=")) {
			if (!(kw = jp_dup_tok(p, jp_cur(p))))
				return false;
			p->i += 2;
		}
		struct jn *a = jp_expr(p);
		if (!a || !jp_nl_push(p, &l, a, kw))
			return false;
	}
	n->args = l.v;
	n->kw = l.kw;
	n->n_args = l.n;
	return true;
}

static struct jn *primary(struct ps *p)
{
	const struct jtoken *t = jp_cur(p);
	struct jn *n;
	switch (t->k) {
	case T_NAME:
		p->i++;
		if (!(n = jp_node(p, N_LIT, t)))
			return NULL;
		if (jp_is_name(t, "true") || jp_is_name(t, "True"))
			n->lit = jv_bool(true);
		else if (jp_is_name(t, "false") || jp_is_name(t, "False"))
			n->lit = jv_bool(false);
		else if (jp_is_name(t, "none") || jp_is_name(t, "None"))
			n->lit = jv_none();
		else if (n->k = N_NAME, !(n->s = jp_dup_tok(p, t)))
			return NULL;
		return n;
	case T_STR: {
		/* adjacent literals concatenate, as in Python */
		size_t total = 0, j;
		for (j = p->i; p->tk->v[j].k == T_STR; j++)
			total += p->tk->v[j].n;
		char *s = jinja_tree_alloc(p->t, total + 1);
		if (!s || !(n = jp_node(p, N_LIT, t)))
			return jp_pfail(p, t, "out of memory"), NULL;
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
		if (!(n = jp_node(p, N_LIT, t)))
			return NULL;
		n->lit = t->k == T_INT ? jv_int(t->i) : jv_float(t->f);
		return n;
	case T_OP:
		if (jp_accept_op(p, "(")) {
			struct jn *e = jp_expr(p);
			if (!e)
				return NULL;
			if (!jp_is_op(jp_cur(p), ","))
				return jp_expect_op(p, ")") ? e : NULL;
			/* a tuple: evaluated as a list */
			struct nlist l = {0};
			if (!jp_nl_push(p, &l, e, NULL))
				return NULL;
			while (jp_accept_op(p, ",") && !jp_is_op(jp_cur(p), ")"))
				if (!(e = jp_expr(p)) || !jp_nl_push(p, &l, e, NULL))
					return NULL;
			if (!jp_expect_op(p, ")") || !(n = jp_node(p, N_LIST, t)))
				return NULL;
			n->s = "tuple";
			n->args = l.v;
			n->n_args = l.n;
			return n;
		}
		if (jp_accept_op(p, "[") || jp_accept_op(p, "{")) {
			bool dict = jp_is_op(t, "{");
			struct nlist l = {0};
			while (!jp_accept_op(p, dict ? "}" : "]")) {
				if (l.n && !jp_expect_op(p, ","))
					return NULL;
				if (jp_accept_op(p, dict ? "}" : "]"))
					break;
				struct jn *e = jp_expr(p);
				if (!e || !jp_nl_push(p, &l, e, NULL))
					return NULL;
				if (dict && (!jp_expect_op(p, ":") || !(e = jp_expr(p)) || !jp_nl_push(p, &l, e, NULL)))
					return NULL;
			}
			if (!(n = jp_node(p, dict ? N_DICT : N_LIST, t)))
				return NULL;
			n->args = l.v;
			n->n_args = l.n;
			return n;
		}
		break;
	default:
		break;
	}
	jp_pfail(p, t, "expected an expression");
	return NULL;
}

static struct jn *postfix(struct ps *p, struct jn *n)
{
	for (;;) {
		const struct jtoken *t = jp_cur(p);
		struct jn *m;
		if (jp_accept_op(p, ".")) {
			if (jp_cur(p)->k != T_NAME && jp_cur(p)->k != T_INT)
				return jp_pfail(p, jp_cur(p), "expected an attribute name after '.'"), NULL;
			if (!(m = jp_node(p, N_ATTR, t)))
				return NULL;
			if (jp_cur(p)->k == T_INT) { /* x.0 is x[0] */
				m->k = N_INDEX;
				if (!(m->b = jp_node(p, N_LIT, jp_cur(p))))
					return NULL;
				m->b->lit = jv_int(jp_cur(p)->i);
			} else if (!(m->s = jp_dup_tok(p, jp_cur(p)))) {
				return NULL;
			}
			p->i++;
			m->a = n;
		} else if (jp_accept_op(p, "[")) {
			struct jn *parts[3] = {0};
			int np = 0;
			bool slice = false;
			for (;;) {
				if (!jp_is_op(jp_cur(p), ":") && !jp_is_op(jp_cur(p), "]") && !(parts[np] = jp_expr(p)))
					return NULL;
				if (np < 2 && jp_accept_op(p, ":")) {
					slice = true;
					np++;
					continue;
				}
				break;
			}
			if (!jp_expect_op(p, "]") || !(m = jp_node(p, slice ? N_SLICE : N_INDEX, t)))
				return NULL;
			if (!slice && !parts[0])
				return jp_pfail(p, t, "empty subscript"), NULL;
			m->a = n;
			m->b = parts[0];
			m->c = parts[1];
			m->cond = parts[2];
		} else if (jp_accept_op(p, "(")) {
			if (!(m = jp_node(p, N_CALL, t)))
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
		const struct jtoken *t = jp_cur(p);
		bool neg = false;
		struct jn *m;
		if (jp_accept_op(p, "|")) {
			if (!(m = jp_node(p, N_FILTER, t)))
				return NULL;
		} else if (jp_accept_name(p, "is")) {
			neg = jp_accept_name(p, "not");
			if (!(m = jp_node(p, N_TEST, t)))
				return NULL;
		} else {
			return n;
		}
		if (jp_cur(p)->k != T_NAME)
			return jp_pfail(p, jp_cur(p), "expected a %s name", m->k == N_TEST ? "test" : "filter"), NULL;
		if (!(m->s = jp_dup_tok(p, jp_cur(p))))
			return NULL;
		p->i++;
		m->a = n;
		if (jp_accept_op(p, "(")) {
			if (!call_args(p, m))
				return NULL;
		} else if (m->k == N_TEST && (jp_cur(p)->k == T_STR || jp_cur(p)->k == T_INT || jp_cur(p)->k == T_FLOAT)) {
			struct jn *arg = primary(p);
			struct nlist l = {0};
			if (!arg || !jp_nl_push(p, &l, arg, NULL))
				return NULL;
			m->args = l.v;
			m->kw = l.kw;
			m->n_args = 1;
		}
		if (neg) {
			struct jn *x = jp_node(p, N_NOT, t);
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
	const struct jtoken *t = jp_cur(p);
	struct jn *n;
	if (!jp_enter(p))
		return NULL;
	if (jp_accept_op(p, "-") || jp_accept_op(p, "+")) {
		if ((n = jp_node(p, N_UNARY, t))) {
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
		const struct jtoken *t = jp_cur(p);
		const char *op = NULL;
		for (int k = 0; levels[lv][k]; k++)
			if (jp_is_op(t, levels[lv][k]))
				op = levels[lv][k];
		if (!op)
			break;
		p->i++;
		struct jn *n = jp_node(p, N_BIN, t);
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
		const struct jtoken *t = jp_cur(p);
		const char *op = NULL;
		for (int k = 0; cmp[k]; k++)
			if (jp_is_op(t, cmp[k]))
				op = cmp[k];
		if (op) {
			p->i++;
		} else if (jp_is_name(t, "in")) {
			p->i++;
			op = "in";
		} else if (jp_is_name(t, "not") && jp_is_name(&p->tk->v[p->i + 1], "in")) {
			p->i += 2;
			op = "not in";
		} else {
			break;
		}
		struct jn *n = jp_node(p, N_BIN, t);
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
	const struct jtoken *t = jp_cur(p);
	if (!jp_is_name(t, "not"))
		return compare(p);
	p->i++;
	struct jn *n = jp_node(p, N_NOT, t);
	if (!n || !jp_enter(p))
		return NULL;
	n->a = not_expr(p);
	p->t->depth--;
	return n->a ? n : NULL;
}

struct jn *jp_logic(struct ps *p, bool is_or)
{
	struct jn *l = is_or ? jp_logic(p, false) : not_expr(p);
	while (l && jp_is_name(jp_cur(p), is_or ? "or" : "and")) {
		struct jn *n = jp_node(p, is_or ? N_OR : N_AND, jp_cur(p));
		p->i++;
		if (!n)
			return NULL;
		n->a = l;
		if (!(n->b = is_or ? jp_logic(p, false) : not_expr(p)))
			return NULL;
		l = n;
	}
	return l;
}

struct jn *jp_expr(struct ps *p)
{
	if (!jp_enter(p))
		return NULL;
	struct jn *e = jp_logic(p, true);
	while (e && jp_is_name(jp_cur(p), "if")) {
		struct jn *n = jp_node(p, N_COND, jp_cur(p));
		p->i++;
		if (!n || !(n->a = jp_logic(p, true)))
			return NULL;
		n->b = e;
		if (jp_accept_name(p, "else") && !(n->c = jp_expr(p)))
			return NULL;
		e = n;
	}
	p->t->depth--;
	return e;
}

