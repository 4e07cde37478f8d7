/* jinja_stmt.c — statements, and the parsed template's lifetime (see jinja.h).
 *
 * Owns: the statement grammar on top of jinja_parse.c's expressions: text,
 * {{ }}, if/elif/else (elif nests as an if in the else branch), for/else with an
 * inline "if" filter and two-name unpacking, set to a name, to "a, b" or to
 * ns.attr, break/continue, and transformers' {% generation %} marker (its body
 * renders as is); then qc_jinja_parse/qc_jinja_free and the default limits.
 * Non-goals: macros, call/filter blocks, block set, include/extends/import: each
 * is an "unsupported statement" error naming line and column.
 */
#include "jinja_int.h"

#include <stdlib.h>
#include <string.h>

static bool tag_end(struct ps *p)
{
	if (jp_cur(p)->k == T_BLOCK_END) {
		p->i++;
		return true;
	}
	jp_pfail(p, jp_cur(p), "expected '%%}'");
	return false;
}

static struct jn *body(struct ps *p, const char *const *ends, const char **hit);

static struct jn *stmt_if(struct ps *p, const struct jtoken *t)
{
	static const char *const ends[] = {"elif", "else", "endif", NULL};
	struct jn *n = jp_node(p, N_IF, t);
	const char *hit = NULL;
	if (!n || !(n->a = jp_expr(p)) || !tag_end(p) || !(n->b = body(p, ends, &hit)))
		return NULL;
	if (!strcmp(hit, "elif")) {
		/* elif chains nest as an if in the else branch */
		struct jn *b = jinja_tree_alloc(p->t, sizeof *b);
		struct jn **one = jinja_tree_alloc(p->t, sizeof *one);
		if (!b || !one || !(one[0] = stmt_if(p, &p->tk->v[p->i - 1])))
			return jp_pfail(p, t, "out of memory"), NULL;
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
	struct jn *n = jp_node(p, N_FOR, t);
	const char *hit = NULL;
	if (!n)
		return NULL;
	if (jp_cur(p)->k != T_NAME || !(n->s = jp_dup_tok(p, jp_cur(p))))
		return jp_pfail(p, jp_cur(p), "expected a loop variable"), NULL;
	p->i++;
	if (jp_accept_op(p, ",")) {
		if (jp_cur(p)->k != T_NAME || !(n->var2 = jp_dup_tok(p, jp_cur(p))))
			return jp_pfail(p, jp_cur(p), "expected a second loop variable"), NULL;
		p->i++;
	}
	if (!jp_accept_name(p, "in"))
		return jp_pfail(p, jp_cur(p), "expected 'in'"), NULL;
	/* the iterable stops before an inline "if": parse below the ternary level */
	if (!(n->a = jp_logic(p, true)))
		return NULL;
	if (jp_accept_name(p, "if") && !(n->cond = jp_logic(p, true)))
		return NULL;
	if (jp_accept_name(p, "recursive"))
		return jp_pfail(p, t, "recursive loops are not supported"), NULL;
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
	struct jn *n = jp_node(p, N_SET, t);
	if (!n)
		return NULL;
	if (jp_cur(p)->k != T_NAME || !(n->s = jp_dup_tok(p, jp_cur(p))))
		return jp_pfail(p, jp_cur(p), "expected a name to set"), NULL;
	p->i++;
	if (jp_accept_op(p, ".")) {
		if (jp_cur(p)->k != T_NAME || !(n->attr = jp_dup_tok(p, jp_cur(p))))
			return jp_pfail(p, jp_cur(p), "expected an attribute name"), NULL;
		p->i++;
	} else if (jp_accept_op(p, ",")) {
		if (jp_cur(p)->k != T_NAME || !(n->var2 = jp_dup_tok(p, jp_cur(p))))
			return jp_pfail(p, jp_cur(p), "expected a second name"), NULL;
		p->i++;
	}
	if (!jp_is_op(jp_cur(p), "="))
		return jp_pfail(p, jp_cur(p), "block {%% set %%} is not supported; expected '='"), NULL;
	p->i++;
	if (!(n->a = jp_expr(p)))
		return NULL;
	return tag_end(p) ? n : NULL;
}

static struct jn *body(struct ps *p, const char *const *ends, const char **hit)
{
	struct nlist l = {0};
	const struct jtoken *first = jp_cur(p);
	if (!jp_enter(p))
		return NULL;
	for (;;) {
		const struct jtoken *t = jp_cur(p);
		struct jn *n = NULL;
		if (t->k == T_EOF) {
			if (ends) {
				jp_pfail(p, first, "block opened here is never closed (expected {%% %s %%})",
				      ends[0] && ends[1] ? ends[1] : ends[0]);
				return NULL;
			}
			break;
		}
		if (t->k == T_TEXT) {
			p->i++;
			if (!(n = jp_node(p, N_TEXT, t)))
				return NULL;
			n->lit = jv_str(t->s, t->n);
		} else if (t->k == T_VAR_BEGIN) {
			p->i++;
			if (!(n = jp_node(p, N_OUT, t)) || !(n->a = jp_expr(p)))
				return NULL;
			if (jp_cur(p)->k != T_VAR_END)
				return jp_pfail(p, jp_cur(p), "expected '}}'"), NULL;
			p->i++;
		} else if (t->k == T_BLOCK_BEGIN) {
			p->i++;
			const struct jtoken *kw = jp_cur(p);
			if (kw->k != T_NAME)
				return jp_pfail(p, kw, "expected a statement name"), NULL;
			bool end = false;
			for (int k = 0; ends && ends[k]; k++)
				if (jp_is_name(kw, ends[k])) {
					*hit = ends[k];
					end = true;
				}
			if (end) {
				p->i++;
				break;
			}
			p->i++;
			if (jp_is_name(kw, "if")) {
				n = stmt_if(p, kw);
			} else if (jp_is_name(kw, "for")) {
				n = stmt_for(p, kw);
			} else if (jp_is_name(kw, "set")) {
				n = stmt_set(p, kw);
			} else if (jp_is_name(kw, "break") || jp_is_name(kw, "continue")) {
				if ((n = jp_node(p, jp_is_name(kw, "break") ? N_BREAK : N_CONTINUE, kw)) && !tag_end(p))
					return NULL;
			} else if (jp_is_name(kw, "generation") || jp_is_name(kw, "endgeneration")) {
				if (!tag_end(p))
					return NULL;
				continue;
			} else {
				return jp_pfail(p, kw, "unsupported or unexpected statement '%.*s'", (int)kw->n, kw->s),
				       NULL;
			}
			if (!n)
				return NULL;
		} else {
			return jp_pfail(p, t, "unexpected token"), NULL;
		}
		if (!jp_nl_push(p, &l, n, NULL))
			return NULL;
	}
	p->t->depth--;
	struct jn *b = jp_node(p, N_BODY, first);
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
	jinja_tree_free(t);
	free(t);
}
