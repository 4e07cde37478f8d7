/* jinja_eval.c — evaluating expressions of a parsed template (see jinja.h).
 *
 * Owns: variable lookup through the frame chain, expression evaluation with
 * Python's semantics for the operators (int overflow turns into float instead of
 * wrapping), indexing and slicing (strings by code point), the depth counter
 * (statements and the render entry are in jinja_exec.c).
 * Undefined names evaluate to Undefined: it prints as "", is false, iterates as
 * empty; reading an attribute or item of it is an error, as in Jinja2.
 */
#include "jinja_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int jinja_fail(struct jctx *c, const struct jn *at, int code, const char *fmt, ...)
{
	char m[400];
	va_list ap;
	if (c->rc)
		return c->rc;
	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	if (code == QC_EINVAL) /* raise_exception: the template's own words */
		c->rc = qc_err_set(c->err, code, NULL, NULL, -1, "chat template raised: %s", m);
	else if (at)
		c->rc = qc_err_set(c->err, code, NULL, NULL, -1, "chat template line %d col %d: %s", at->line, at->col, m);
	else
		c->rc = qc_err_set(c->err, code, NULL, NULL, -1, "chat template: %s", m);
	return c->rc;
}

static bool arena_ok(struct jctx *c, const struct jn *at)
{
	if (!c->ar.oom)
		return true;
	if (c->ar.oom == QC_ERANGE)
		jinja_fail(c, at, QC_ERANGE, "render needs more than %zu bytes of scratch memory",
			   c->t->lim.max_scratch_bytes);
	else
		jinja_fail(c, at, QC_ENOMEM, "out of memory");
	return false;
}

struct jv *jinja_lookup(struct jctx *c, const char *name)
{
	for (struct jframe *f = c->top; f; f = f->up) {
		struct jv *v = jdict_get(&f->vars, name, strlen(name));
		if (v)
			return v;
	}
	return NULL;
}

void jinja_set(struct jctx *c, const char *name, struct jv v)
{
	jdict_set(&c->ar, &c->top->vars, jv_str(name, strlen(name)), v);
}

static struct jv undefined_use(struct jctx *c, const struct jn *at, const struct jv *v)
{
	if (v->name)
		jinja_fail(c, at, QC_EFORMAT, "'%s' is undefined", v->name);
	else
		jinja_fail(c, at, QC_EFORMAT, "attribute or item of an undefined value");
	return jv_undef(NULL);
}

/* Python index normalisation; false when out of range */
static bool norm_index(int64_t i, size_t n, size_t *out)
{
	if (i < 0)
		i += (int64_t)n;
	if (i < 0 || (uint64_t)i >= n)
		return false;
	*out = (size_t)i;
	return true;
}

/* byte offset of code point cp in s (n bytes); n when past the end */
static size_t cp_off(const char *s, size_t n, size_t cp)
{
	size_t i = 0;
	for (; i < n; i++)
		if (((unsigned char)s[i] & 0xc0) != 0x80 && cp-- == 0)
			return i;
	return n;
}

static struct jv loop_attr(const struct jloop *l, const char *a)
{
	if (!strcmp(a, "index0")) return jv_int((int64_t)l->idx);
	if (!strcmp(a, "index")) return jv_int((int64_t)l->idx + 1);
	if (!strcmp(a, "revindex0")) return jv_int((int64_t)(l->len - l->idx - 1));
	if (!strcmp(a, "revindex")) return jv_int((int64_t)(l->len - l->idx));
	if (!strcmp(a, "first")) return jv_bool(l->idx == 0);
	if (!strcmp(a, "last")) return jv_bool(l->idx + 1 == l->len);
	if (!strcmp(a, "length")) return jv_int((int64_t)l->len);
	return jv_undef(NULL);
}

static struct jv get_item(struct jctx *c, const struct jn *at, const struct jv *o, const struct jv *k)
{
	size_t i;
	if (o->k == V_UNDEF)
		return undefined_use(c, at, o);
	if (o->k == V_DICT) {
		struct jv *v = k->k == V_STR ? jdict_get(o->u.d, k->u.s, k->n) : NULL;
		if (!v && k->k != V_STR)
			for (size_t j = 0; j < o->u.d->n; j++)
				if (jv_equal(&o->u.d->keys[j], k))
					v = &o->u.d->vals[j];
		return v ? *v : jv_undef(NULL);
	}
	if (o->k == V_LOOP && k->k == V_STR)
		return loop_attr(o->u.loop, k->u.s);
	if (k->k != V_INT)
		return jv_undef(NULL);
	if (o->k == V_LIST)
		return norm_index(k->u.i, o->n, &i) ? o->u.items[i] : jv_undef(NULL);
	if (o->k == V_STR && norm_index(k->u.i, jutf8_len(o->u.s, o->n), &i)) {
		size_t a = cp_off(o->u.s, o->n, i), b = cp_off(o->u.s, o->n, i + 1);
		return jv_str(o->u.s + a, b - a);
	}
	return jv_undef(NULL);
}

static bool slice_bound(struct jctx *c, const struct jn *e, int64_t dflt, int64_t *out)
{
	if (!e) {
		*out = dflt;
		return true;
	}
	struct jv v = jinja_eval(c, e);
	if (v.k == V_NONE || v.k == V_UNDEF) {
		*out = dflt;
		return !c->rc;
	}
	if (v.k != V_INT)
		return jinja_fail(c, e, QC_EFORMAT, "slice bound is a %s, not an int", jv_type_name(&v)), false;
	*out = v.u.i;
	return true;
}

static struct jv slice(struct jctx *c, const struct jn *e)
{
	struct jv o = jinja_eval(c, e->a);
	int64_t step, lo, hi;
	if (c->rc)
		return o;
	if (o.k == V_UNDEF)
		return undefined_use(c, e, &o);
	if (o.k != V_LIST && o.k != V_STR)
		return jinja_fail(c, e, QC_EFORMAT, "cannot slice a %s", jv_type_name(&o)), jv_undef(NULL);
	if (!slice_bound(c, e->cond, 1, &step))
		return o;
	if (step == 0)
		return jinja_fail(c, e, QC_EFORMAT, "slice step cannot be zero"), jv_undef(NULL);
	int64_t n = (int64_t)(o.k == V_LIST ? o.n : jutf8_len(o.u.s, o.n));
	if (!slice_bound(c, e->b, step > 0 ? 0 : n - 1, &lo) || !slice_bound(c, e->c, step > 0 ? n : -n - 1, &hi))
		return o;
	/* Python's clamping of start/stop */
	if (e->b && lo < 0)
		lo += n;
	if (e->c && hi < 0)
		hi += n;
	if (step > 0) {
		lo = lo < 0 ? 0 : lo > n ? n : lo;
		hi = hi < 0 ? 0 : hi > n ? n : hi;
	} else {
		lo = lo < -1 ? -1 : lo > n - 1 ? n - 1 : lo;
		hi = hi < -1 ? -1 : hi > n - 1 ? n - 1 : hi;
	}
	size_t cnt = 0;
	for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step)
		cnt++;
	if (o.k == V_LIST) {
		struct jv *it = jarena_alloc(&c->ar, (cnt ? cnt : 1) * sizeof *it);
		if (!arena_ok(c, e))
			return o;
		size_t k = 0;
		for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step)
			it[k++] = o.u.items[i];
		return jv_list(it, cnt);
	}
	char *s = jarena_alloc(&c->ar, o.n + 1);
	if (!arena_ok(c, e))
		return o;
	size_t len = 0;
	for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
		size_t a = cp_off(o.u.s, o.n, (size_t)i), b = cp_off(o.u.s, o.n, (size_t)i + 1);
		memcpy(s + len, o.u.s + a, b - a);
		len += b - a;
	}
	return jv_str(s, len);
}

static struct jv concat(struct jctx *c, const struct jn *at, const struct jv *a, const struct jv *b)
{
	struct jv x = jv_to_str(&c->ar, a), y = jv_to_str(&c->ar, b);
	char *s = jarena_alloc(&c->ar, x.n + y.n + 1);
	if (!arena_ok(c, at))
		return jv_undef(NULL);
	memcpy(s, x.u.s, x.n);
	memcpy(s + x.n, y.u.s, y.n);
	return jv_str(s, x.n + y.n);
}

static bool contains(const struct jv *hay, const struct jv *needle, bool *ok)
{
	*ok = true;
	if (hay->k == V_STR && needle->k == V_STR)
		return needle->n == 0 || memmem(hay->u.s, hay->n, needle->u.s, needle->n) != NULL;
	if (hay->k == V_LIST) {
		for (size_t i = 0; i < hay->n; i++)
			if (jv_equal(&hay->u.items[i], needle))
				return true;
		return false;
	}
	if (hay->k == V_DICT) {
		for (size_t i = 0; i < hay->u.d->n; i++)
			if (jv_equal(&hay->u.d->keys[i], needle))
				return true;
		return false;
	}
	if (hay->k == V_UNDEF)
		return false;
	*ok = false;
	return false;
}

static struct jv arith(struct jctx *c, const struct jn *e, const char *op, struct jv a, struct jv b)
{
	bool ints = (a.k == V_INT || a.k == V_BOOL) && (b.k == V_INT || b.k == V_BOOL);
	bool nums = (a.k == V_INT || a.k == V_FLOAT || a.k == V_BOOL) && (b.k == V_INT || b.k == V_FLOAT || b.k == V_BOOL);
	int64_t x = a.k == V_BOOL ? a.u.b : a.u.i, y = b.k == V_BOOL ? b.u.b : b.u.i;
	double fx = a.k == V_FLOAT ? a.u.f : (double)x, fy = b.k == V_FLOAT ? b.u.f : (double)y;
	if (!strcmp(op, "+")) {
		if (ints)
			return __builtin_add_overflow(x, y, &x) ? jv_float((double)fx + fy) : jv_int(x);
		if (nums)
			return jv_float(fx + fy);
		if (a.k == V_STR && b.k == V_STR)
			return concat(c, e, &a, &b);
		if (a.k == V_LIST && b.k == V_LIST) {
			struct jv *it = jarena_alloc(&c->ar, (a.n + b.n + 1) * sizeof *it);
			if (!arena_ok(c, e))
				return a;
			memcpy(it, a.u.items, a.n * sizeof *it);
			memcpy(it + a.n, b.u.items, b.n * sizeof *it);
			return jv_list(it, a.n + b.n);
		}
	} else if (!strcmp(op, "-") && nums) {
		return ints && !__builtin_sub_overflow(x, y, &x) ? jv_int(x) : jv_float(fx - fy);
	} else if (!strcmp(op, "*")) {
		if (ints)
			return __builtin_mul_overflow(x, y, &x) ? jv_float(fx * fy) : jv_int(x);
		if (nums)
			return jv_float(fx * fy);
		if ((a.k == V_INT || a.k == V_BOOL) && b.k == V_STR) {
			struct jv t = a;
			a = b;
			b = t;
			y = b.k == V_BOOL ? b.u.b : b.u.i;
		}
		if (a.k == V_STR && (b.k == V_INT || b.k == V_BOOL)) {
			size_t rep = y > 0 ? (size_t)y : 0;
			if (rep && a.n > c->t->lim.max_output_bytes / rep)
				return jinja_fail(c, e, QC_ERANGE, "string repetition past the output limit"), a;
			char *s = jarena_alloc(&c->ar, a.n * rep + 1);
			if (!arena_ok(c, e))
				return a;
			for (size_t i = 0; i < rep; i++)
				memcpy(s + i * a.n, a.u.s, a.n);
			return jv_str(s, a.n * rep);
		}
	} else if (!strcmp(op, "/") && nums) {
		if (fy == 0)
			return jinja_fail(c, e, QC_EFORMAT, "division by zero"), a;
		return jv_float(fx / fy);
	} else if ((!strcmp(op, "//") || !strcmp(op, "%")) && nums) {
		if (fy == 0)
			return jinja_fail(c, e, QC_EFORMAT, "division by zero"), a;
		if (ints) { /* Python floors */
			if (x == INT64_MIN && y == -1)
				return jv_float(-(double)x);
			int64_t q = x / y, r = x % y;
			if (r && ((r < 0) != (y < 0))) {
				q--;
				r += y;
			}
			return jv_int(op[0] == '/' ? q : r);
		}
		double q = floor(fx / fy);
		return jv_float(op[0] == '/' ? q : fx - q * fy);
	} else if (!strcmp(op, "**") && nums) {
		if (ints && y >= 0) {
			int64_t r = 1;
			for (int64_t i = 0; i < y; i++)
				if (__builtin_mul_overflow(r, x, &r))
					return jv_float(pow(fx, fy));
			return jv_int(r);
		}
		return jv_float(pow(fx, fy));
	}
	if (a.k == V_UNDEF || b.k == V_UNDEF)
		return undefined_use(c, e, a.k == V_UNDEF ? &a : &b);
	jinja_fail(c, e, QC_EFORMAT, "unsupported operand types for %s: %s and %s", op, jv_type_name(&a),
		   jv_type_name(&b));
	return a;
}

static struct jv binop(struct jctx *c, const struct jn *e)
{
	struct jv a = jinja_eval(c, e->a);
	struct jv b = c->rc ? a : jinja_eval(c, e->b);
	const char *op = e->s;
	if (c->rc)
		return a;
	if (!strcmp(op, "~"))
		return concat(c, e, &a, &b);
	if (!strcmp(op, "=="))
		return jv_bool(jv_equal(&a, &b));
	if (!strcmp(op, "!="))
		return jv_bool(!jv_equal(&a, &b));
	if (!strcmp(op, "in") || !strcmp(op, "not in")) {
		bool ok, r = contains(&b, &a, &ok);
		if (!ok)
			return jinja_fail(c, e, QC_EFORMAT, "'in' needs a string, list or dict on the right, not %s",
					  jv_type_name(&b)), a;
		return jv_bool(op[0] == 'n' ? !r : r);
	}
	if (op[0] == '<' || op[0] == '>') {
		int r = jv_cmp(&a, &b);
		if (r == -2)
			return jinja_fail(c, e, QC_EFORMAT, "cannot compare %s with %s", jv_type_name(&a),
					  jv_type_name(&b)), a;
		bool eq = op[1] == '=';
		return jv_bool(op[0] == '<' ? (r < 0 || (eq && r == 0)) : (r > 0 || (eq && r == 0)));
	}
	return arith(c, e, op, a, b);
}

static bool eval_args(struct jctx *c, const struct jn *e, struct jv **out)
{
	*out = jarena_alloc(&c->ar, (e->n_args + 1) * sizeof **out);
	if (!arena_ok(c, e))
		return false;
	for (size_t i = 0; i < e->n_args && !c->rc; i++)
		(*out)[i] = jinja_eval(c, e->args[i]);
	return !c->rc;
}

static struct jv eval(struct jctx *c, const struct jn *e)
{
	struct jv a, b, *args, r = jv_undef(NULL);
	switch (e->k) {
	case N_LIT:
		return e->lit;
	case N_NAME: {
		struct jv *v = jinja_lookup(c, e->s);
		return v ? *v : jv_undef(e->s);
	}
	case N_LIST:
		if (!eval_args(c, e, &args))
			return r;
		r = jv_list(args, e->n_args);
		r.tuple = e->s != NULL;
		return r;
	case N_DICT:
		r = jv_dict_new(&c->ar);
		for (size_t i = 0; i + 1 < e->n_args && arena_ok(c, e); i += 2) {
			a = jinja_eval(c, e->args[i]);
			b = jinja_eval(c, e->args[i + 1]);
			if (c->rc)
				return r;
			jdict_set(&c->ar, r.u.d, a, b);
		}
		return r;
	case N_ATTR:
		a = jinja_eval(c, e->a);
		if (c->rc)
			return a;
		b = jv_str(e->s, strlen(e->s));
		return get_item(c, e, &a, &b);
	case N_INDEX:
		a = jinja_eval(c, e->a);
		b = c->rc ? a : jinja_eval(c, e->b);
		return c->rc ? a : get_item(c, e, &a, &b);
	case N_SLICE:
		return slice(c, e);
	case N_CALL:
		if (e->a->k == N_ATTR) {
			a = jinja_eval(c, e->a->a);
			if (c->rc || !eval_args(c, e, &args))
				return r;
			if (a.k == V_UNDEF)
				return undefined_use(c, e, &a);
			jinja_method(c, e, &a, e->a->s, args, e->kw, e->n_args, &r);
			return r;
		}
		if (e->a->k != N_NAME)
			return jinja_fail(c, e, QC_EFORMAT, "this value cannot be called"), r;
		if (!eval_args(c, e, &args))
			return r;
		jinja_func(c, e, e->a->s, args, e->kw, e->n_args, &r);
		return r;
	case N_FILTER:
		a = jinja_eval(c, e->a);
		if (c->rc || !eval_args(c, e, &args))
			return r;
		jinja_filter(c, e, e->s, &a, args, e->kw, e->n_args, &r);
		return r;
	case N_TEST: {
		bool t = false;
		a = jinja_eval(c, e->a);
		if (c->rc || !eval_args(c, e, &args))
			return r;
		jinja_test(c, e, e->s, &a, args, e->n_args, &t);
		return jv_bool(t);
	}
	case N_UNARY:
		a = jinja_eval(c, e->a);
		if (c->rc)
			return a;
		if (e->s[0] == '+' && (a.k == V_INT || a.k == V_FLOAT))
			return a;
		if (a.k == V_INT && a.u.i != INT64_MIN)
			return jv_int(-a.u.i);
		if (a.k == V_FLOAT)
			return jv_float(-a.u.f);
		return jinja_fail(c, e, QC_EFORMAT, "bad operand for unary %s: %s", e->s, jv_type_name(&a)), a;
	case N_BIN:
		return binop(c, e);
	case N_AND:
		a = jinja_eval(c, e->a);
		return c->rc || !jv_truthy(&a) ? a : jinja_eval(c, e->b);
	case N_OR:
		a = jinja_eval(c, e->a);
		return c->rc || jv_truthy(&a) ? a : jinja_eval(c, e->b);
	case N_NOT:
		a = jinja_eval(c, e->a);
		return jv_bool(!jv_truthy(&a));
	case N_COND:
		a = jinja_eval(c, e->a);
		if (c->rc)
			return a;
		if (jv_truthy(&a))
			return jinja_eval(c, e->b);
		return e->c ? jinja_eval(c, e->c) : jv_undef(NULL);
	default:
		jinja_fail(c, e, QC_EFORMAT, "statement where an expression was expected");
		return r;
	}
}

struct jv jinja_eval(struct jctx *c, const struct jn *e)
{
	if (c->rc)
		return jv_undef(NULL);
	if (++c->depth > c->t->lim.max_depth) {
		jinja_fail(c, e, QC_ERANGE, "nested deeper than %zu", c->t->lim.max_depth);
		return jv_undef(NULL);
	}
	struct jv v = eval(c, e);
	c->depth--;
	arena_ok(c, e);
	return v;
}
