/* jinja_exec.c — executing statements and qc_jinja_render (see jinja.h).
 *
 * Owns: text and {{ }} output into the bounded buffer, if/elif/else, for loops
 * (the inline "if" filters before loop.index/length are counted, as in Jinja2;
 * "for k, v in pairs" unpacks two-item lists; a dict iterates its keys), set
 * (to a name, to "a, b", or to a namespace attribute), break/continue, the loop
 * iteration budget, and the globals a chat render gets: messages,
 * add_generation_prompt, bos_token, eos_token, tools (the caller's JSON list, or
 * none) and documents = none (transformers passes both, so "tools is defined" holds).
 * Scoping: each loop iteration gets a fresh frame, so a set inside a loop does not
 * leak out (Jinja2's rule; templates carry state out with namespace()).
 */
#include "jinja_int.h"

#include <stdlib.h>
#include <string.h>

static void exec(struct jctx *c, const struct jn *s);

static bool push_frame(struct jctx *c)
{
	struct jframe *f = jarena_alloc(&c->ar, sizeof *f);
	if (!f) {
		jinja_fail(c, NULL, c->ar.oom, "render needs more than %zu bytes of scratch memory",
			   c->t->lim.max_scratch_bytes);
		return false;
	}
	f->up = c->top;
	c->top = f;
	return true;
}

static bool bind_target(struct jctx *c, const struct jn *s, const char *v1, const char *v2, const struct jv *v)
{
	if (!v2) {
		jinja_set(c, v1, *v);
		return true;
	}
	if (v->k != V_LIST || v->n != 2) {
		jinja_fail(c, s, QC_EFORMAT, "cannot unpack a %s into '%s, %s'", jv_type_name(v), v1, v2);
		return false;
	}
	jinja_set(c, v1, v->u.items[0]);
	jinja_set(c, v2, v->u.items[1]);
	return true;
}

/* the values a for loop walks over (jinja_int.h) */
bool jinja_iter_items(struct jctx *c, const struct jn *s, const struct jv *v, struct jv **items, size_t *n)
{
	*items = NULL;
	*n = 0;
	switch (v->k) {
	case V_UNDEF:
		return true;
	case V_LIST:
		*items = v->u.items;
		*n = v->n;
		return true;
	case V_DICT:
		*items = v->u.d->keys;
		*n = v->u.d->n;
		return true;
	case V_STR: {
		size_t cnt = jutf8_len(v->u.s, v->n), k = 0;
		struct jv *it = jarena_alloc(&c->ar, (cnt + 1) * sizeof *it);
		if (!it)
			return jinja_fail(c, s, QC_ERANGE, "out of scratch memory"), false;
		for (size_t i = 0; i < v->n;) {
			size_t j = i + 1;
			while (j < v->n && ((unsigned char)v->u.s[j] & 0xc0) == 0x80)
				j++;
			it[k++] = jv_str(v->u.s + i, j - i);
			i = j;
		}
		*items = it;
		*n = k;
		return true;
	}
	default:
		jinja_fail(c, s, QC_EFORMAT, "a %s is not iterable", jv_type_name(v));
		return false;
	}
}

static bool count_iter(struct jctx *c, const struct jn *s)
{
	if (++c->iters > c->t->lim.max_loop_iters) {
		jinja_fail(c, s, QC_ERANGE, "more than %zu loop iterations", c->t->lim.max_loop_iters);
		return false;
	}
	return true;
}

static void exec_for(struct jctx *c, const struct jn *s)
{
	struct jv seq = jinja_eval(c, s->a), *items;
	size_t n;
	struct jframe *outer = c->top;
	if (c->rc || !jinja_iter_items(c, s, &seq, &items, &n))
		return;
	if (s->cond) { /* filter first: loop.length counts what passes */
		struct jv *kept = jarena_alloc(&c->ar, (n + 1) * sizeof *kept);
		size_t k = 0;
		if (!kept || !push_frame(c))
			return;
		for (size_t i = 0; i < n && !c->rc; i++) {
			if (!count_iter(c, s) || !bind_target(c, s, s->s, s->var2, &items[i]))
				break;
			struct jv t = jinja_eval(c, s->cond);
			if (jv_truthy(&t))
				kept[k++] = items[i];
		}
		c->top = outer;
		items = kept;
		n = k;
	}
	struct jloop *lp = jarena_alloc(&c->ar, sizeof *lp);
	if (!lp || c->rc)
		return;
	lp->len = n;
	for (size_t i = 0; i < n && !c->rc; i++) {
		if (!count_iter(c, s) || !push_frame(c))
			break;
		lp->idx = i;
		jinja_set(c, "loop", (struct jv){.k = V_LOOP, .u.loop = lp});
		if (bind_target(c, s, s->s, s->var2, &items[i]))
			exec(c, s->b);
		c->top = outer;
		if (c->flow == FLOW_BREAK) {
			c->flow = FLOW_NONE;
			break;
		}
		c->flow = FLOW_NONE;
	}
	if (!n && s->c && !c->rc)
		exec(c, s->c);
}

static void exec_set(struct jctx *c, const struct jn *s)
{
	struct jv v = jinja_eval(c, s->a);
	if (c->rc)
		return;
	if (!s->attr) {
		bind_target(c, s, s->s, s->var2, &v);
		return;
	}
	struct jv *ns = jinja_lookup(c, s->s);
	if (!ns || ns->k != V_DICT) {
		jinja_fail(c, s, QC_EFORMAT, "'%s' is not a namespace: cannot set '%s.%s'", s->s, s->s, s->attr);
		return;
	}
	jdict_set(&c->ar, ns->u.d, jv_str(s->attr, strlen(s->attr)), v);
}

static void exec(struct jctx *c, const struct jn *s)
{
	if (c->rc)
		return;
	if (++c->depth > c->t->lim.max_depth) {
		jinja_fail(c, s, QC_ERANGE, "nested deeper than %zu", c->t->lim.max_depth);
		return;
	}
	switch (s->k) {
	case N_BODY:
		for (size_t i = 0; i < s->n_args && !c->rc && c->flow == FLOW_NONE; i++)
			exec(c, s->args[i]);
		break;
	case N_TEXT:
		jbuf_put(&c->out, s->lit.u.s, s->lit.n);
		break;
	case N_OUT: {
		struct jv v = jinja_eval(c, s->a);
		if (!c->rc)
			jv_str_out(&c->out, &v);
		break;
	}
	case N_IF: {
		struct jv v = jinja_eval(c, s->a);
		if (c->rc)
			break;
		if (jv_truthy(&v))
			exec(c, s->b);
		else if (s->c)
			exec(c, s->c);
		break;
	}
	case N_FOR:
		exec_for(c, s);
		break;
	case N_SET:
		exec_set(c, s);
		break;
	case N_BREAK:
	case N_CONTINUE:
		c->flow = s->k == N_BREAK ? FLOW_BREAK : FLOW_CONTINUE;
		break;
	default:
		jinja_fail(c, s, QC_EFORMAT, "expression where a statement was expected");
	}
	c->depth--;
	if (c->out.rc == QC_ERANGE)
		jinja_fail(c, s, QC_ERANGE, "rendered text longer than %zu bytes", c->t->lim.max_output_bytes);
	else if (c->out.rc)
		jinja_fail(c, s, c->out.rc, "out of memory");
	if (c->ar.oom)
		jinja_fail(c, s, c->ar.oom, "render needs more than %zu bytes of scratch memory",
			   c->t->lim.max_scratch_bytes);
}

static struct jv cstr(const char *s) { return jv_str(s ? s : "", s ? strlen(s) : 0); }

static int globals(struct jctx *c, const struct qc_jinja_chat *ch)
{
	struct jv *msgs = jarena_alloc(&c->ar, (ch->n_msgs + 1) * sizeof *msgs);
	if (!msgs || !push_frame(c))
		return c->ar.oom ? c->ar.oom : QC_ENOMEM;
	for (size_t i = 0; i < ch->n_msgs; i++) {
		msgs[i] = jv_dict_new(&c->ar);
		if (msgs[i].k != V_DICT)
			return c->ar.oom;
		jdict_set(&c->ar, msgs[i].u.d, cstr("role"), cstr(ch->msgs[i].role));
		jdict_set(&c->ar, msgs[i].u.d, cstr("content"), cstr(ch->msgs[i].content));
	}
	jinja_set(c, "messages", jv_list(msgs, ch->n_msgs));
	jinja_set(c, "add_generation_prompt", jv_bool(ch->add_generation_prompt));
	jinja_set(c, "bos_token", cstr(ch->bos_token));
	jinja_set(c, "eos_token", cstr(ch->eos_token));
	struct jv tools = jv_none();
	if (ch->tools_json) {
		int rc = jinja_json_value(c, ch->tools_json, &tools);
		if (rc)
			return rc;
	}
	jinja_set(c, "tools", tools);
	jinja_set(c, "documents", jv_none());
	if (ch->kwargs_json) {
		struct jv kw;
		int rc = jinja_json_value(c, ch->kwargs_json, &kw);
		if (rc)
			return rc;
		if (kw.k != V_DICT)
			return QC_EINVAL;
		for (size_t i = 0; i < kw.u.d->n; i++)
			jdict_set(&c->ar, &c->top->vars, kw.u.d->keys[i], kw.u.d->vals[i]);
	}
	return c->ar.oom;
}

int qc_jinja_render(const struct qc_jinja *t, const struct qc_jinja_chat *ch, char **out, size_t *out_len,
		    struct qc_err *err)
{
	*out = NULL;
	*out_len = 0;
	struct jctx c = {.t = t, .chat = ch, .err = err};
	c.ar.cap_total = t->lim.max_scratch_bytes;
	c.out.max = t->lim.max_output_bytes;
	int rc = globals(&c, ch);
	if (rc)
		rc = qc_err_set(err, rc, NULL, NULL, -1, "%s",
				rc == QC_EINVAL ? (ch->tools_json && !ch->kwargs_json ? "tools: not valid JSON"
							: "tools or chat_template_kwargs: not valid JSON (kwargs: an object)")
						: "chat template: out of scratch memory (or nesting) for the messages or tools");
	if (!rc) {
		exec(&c, t->root);
		rc = c.rc;
	}
	if (!rc)
		jbuf_put(&c.out, "", 0);
	if (!rc && !c.out.s) {
		c.out.s = calloc(1, 1);
		if (!c.out.s)
			rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	}
	jarena_deinit(&c.ar);
	if (rc) {
		jbuf_deinit(&c.out);
		return rc;
	}
	*out = c.out.s;
	*out_len = c.out.len;
	return QC_OK;
}
