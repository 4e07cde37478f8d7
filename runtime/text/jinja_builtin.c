/* jinja_builtin.c — the filters, tests, methods and functions templates may call.
 *
 * Owns: filters (trim tojson length/count upper lower capitalize title replace
 * join list first last default/d string int float items selectattr rejectattr
 * select reject map reverse safe abs), tests (defined undefined none string
 * mapping iterable sequence number integer float boolean true false odd even
 * divisibleby equalto/eq ne lt gt le ge in), str methods (strip lstrip rstrip
 * split startswith endswith upper lower replace title capitalize), dict methods
 * (get items keys values) and the functions range, namespace, dict,
 * raise_exception and strftime_now (UTC, from the caller's now_unix).
 * Non-goals: anything else is a clear "unknown filter/test/method/function"
 * error. Case mapping is ASCII-only (Python's is Unicode); documented.
 */
#include "jinja_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* positional argument i, else keyword name, else NULL (jinja_int.h) */
const struct jv *jinja_arg(const struct jv *a, const char **kw, size_t n, size_t i, const char *name)
{
	size_t pos = 0;
	for (size_t k = 0; k < n; k++) {
		if (kw && kw[k]) {
			if (name && !strcmp(kw[k], name))
				return &a[k];
		} else if (pos++ == i) {
			return &a[k];
		}
	}
	return NULL;
}

static bool want_str(struct jctx *c, const struct jn *at, const char *what, const struct jv *v)
{
	if (v && v->k == V_STR)
		return true;
	jinja_fail(c, at, QC_EFORMAT, "%s needs a string, not %s", what, v ? jv_type_name(v) : "nothing");
	return false;
}

/* v as a list, as a for loop walks it (strings: their characters) */
static bool list_of(struct jctx *c, const struct jn *at, const struct jv *v, struct jv *out)
{
	struct jv *items;
	size_t n;
	if (!jinja_iter_items(c, at, v, &items, &n))
		return false;
	*out = jv_list(items, n);
	return true;
}

/* attribute path "a.b" of v (Jinja's environment.getitem on each part) */
static struct jv attr_path(const struct jv *v, const struct jv *path)
{
	struct jv cur = *v;
	size_t i = 0;
	while (i <= path->n) {
		const char *dot = memchr(path->u.s + i, '.', path->n - i);
		size_t len = dot ? (size_t)(dot - path->u.s) - i : path->n - i;
		if (cur.k != V_DICT)
			return jv_undef(NULL);
		struct jv *x = jdict_get(cur.u.d, path->u.s + i, len);
		if (!x)
			return jv_undef(NULL);
		cur = *x;
		if (!dot)
			break;
		i += len + 1;
	}
	return cur;
}

static bool select_items(struct jctx *c, const struct jn *at, const char *name, const struct jv *v,
			 const struct jv *a, size_t n, struct jv *out)
{
	bool by_attr = strstr(name, "attr") != NULL, reject = name[0] == 'r';
	struct jv seq;
	if (!list_of(c, at, v, &seq))
		return false;
	if (by_attr && (n < 1 || a[0].k != V_STR))
		return jinja_fail(c, at, QC_EFORMAT, "%s needs an attribute name", name), false;
	const struct jv *test = n > (size_t)by_attr ? &a[by_attr] : NULL;
	if (test && test->k != V_STR)
		return jinja_fail(c, at, QC_EFORMAT, "%s: the test name must be a string", name), false;
	struct jv *it = jarena_alloc(&c->ar, (seq.n + 1) * sizeof *it);
	size_t k = 0;
	if (!it)
		return false;
	for (size_t i = 0; i < seq.n; i++) {
		struct jv x = by_attr ? attr_path(&seq.u.items[i], &a[0]) : seq.u.items[i];
		bool ok;
		if (test) {
			char tn[64];
			snprintf(tn, sizeof tn, "%.*s", (int)test->n, test->u.s);
			if (!jinja_test(c, at, tn, &x, test + 1, n - (size_t)by_attr - 1, &ok))
				return false;
		} else {
			ok = jv_truthy(&x);
		}
		if (ok != reject)
			it[k++] = seq.u.items[i];
	}
	*out = jv_list(it, k);
	return true;
}

static bool join(struct jctx *c, const struct jn *at, const struct jv *v, const struct jv *sep,
		 const struct jv *attr, struct jv *out)
{
	struct jv seq;
	if (!list_of(c, at, v, &seq) || (sep && !want_str(c, at, "join's separator", sep)))
		return false;
	struct jbuf b = {.max = c->t->lim.max_output_bytes};
	for (size_t i = 0; i < seq.n; i++) {
		if (i && sep)
			jbuf_put(&b, sep->u.s, sep->n);
		struct jv x = attr && attr->k == V_STR ? attr_path(&seq.u.items[i], attr) : seq.u.items[i];
		jv_str_out(&b, &x);
	}
	*out = jv_strdup(&c->ar, b.s ? b.s : "", b.len);
	int rc = b.rc;
	jbuf_deinit(&b);
	if (rc)
		return jinja_fail(c, at, rc, "join: result longer than %zu bytes", c->t->lim.max_output_bytes), false;
	return true;
}

static bool to_int(const struct jv *v, const struct jv *dflt, struct jv *out)
{
	*out = dflt ? *dflt : jv_int(0);
	if (v->k == V_INT) {
		*out = *v;
	} else if (v->k == V_BOOL) {
		*out = jv_int(v->u.b);
	} else if (v->k == V_FLOAT && v->u.f > -9.2e18 && v->u.f < 9.2e18) {
		*out = jv_int((int64_t)v->u.f);
	} else if (v->k == V_STR && v->n && v->n < 64) {
		char buf[64], *end;
		memcpy(buf, v->u.s, v->n);
		buf[v->n] = '\0';
		long long x = strtoll(buf, &end, 10);
		if (!*end)
			*out = jv_int(x);
	}
	return true;
}

bool jinja_filter(struct jctx *c, const struct jn *at, const char *name, struct jv *v, const struct jv *args,
		  const char **kw, size_t n, struct jv *out)
{
	const struct jv *a0 = jinja_arg(args, kw, n, 0, NULL);
	*out = *v;
	if (!strcmp(name, "safe"))
		return true;
	if (!strcmp(name, "default") || !strcmp(name, "d")) {
		const struct jv *b = jinja_arg(args, kw, n, 1, "boolean");
		const struct jv *dv = jinja_arg(args, kw, n, 0, "default_value");
		if (v->k == V_UNDEF || (b && jv_truthy(b) && !jv_truthy(v)))
			*out = dv ? *dv : jv_str("", 0);
		return true;
	}
	if (!strcmp(name, "length") || !strcmp(name, "count")) {
		if (v->k == V_STR)
			*out = jv_int((int64_t)jutf8_len(v->u.s, v->n));
		else if (v->k == V_LIST || v->k == V_UNDEF)
			*out = jv_int((int64_t)v->n);
		else if (v->k == V_DICT)
			*out = jv_int((int64_t)v->u.d->n);
		else
			return jinja_fail(c, at, QC_EFORMAT, "a %s has no length", jv_type_name(v)), false;
		return true;
	}
	if (!strcmp(name, "string")) {
		*out = jv_to_str(&c->ar, v);
		return true;
	}
	if (!strcmp(name, "int"))
		return to_int(v, jinja_arg(args, kw, n, 0, "default"), out);
	if (!strcmp(name, "float")) {
		struct jv i;
		if (v->k == V_FLOAT)
			return true;
		to_int(v, NULL, &i);
		*out = v->k == V_STR ? jv_float(strtod(jv_strdup(&c->ar, v->u.s, v->n).u.s, NULL)) : jv_float((double)i.u.i);
		return true;
	}
	if (!strcmp(name, "abs")) {
		if (v->k == V_INT)
			*out = jv_int(v->u.i < 0 && v->u.i != INT64_MIN ? -v->u.i : v->u.i);
		else if (v->k == V_FLOAT)
			*out = jv_float(v->u.f < 0 ? -v->u.f : v->u.f);
		else
			return jinja_fail(c, at, QC_EFORMAT, "abs of a %s", jv_type_name(v)), false;
		return true;
	}
	if (!strcmp(name, "tojson")) {
		const struct jv *ind = jinja_arg(args, kw, n, 0, "indent"), *sk = jinja_arg(args, kw, n, 99, "sort_keys");
		int indent = ind && ind->k == V_INT && ind->u.i >= 0 && ind->u.i <= 64 ? (int)ind->u.i : -1;
		struct jbuf b = {.max = c->t->lim.max_output_bytes};
		int rc = jv_json_out(&b, v, indent, sk && jv_truthy(sk), 0);
		rc = rc ? rc : b.rc;
		if (!rc)
			*out = jv_strdup(&c->ar, b.s ? b.s : "", b.len);
		jbuf_deinit(&b);
		if (rc)
			return jinja_fail(c, at, rc == QC_ENOMEM ? rc : QC_EFORMAT, "tojson: cannot serialise this %s",
					  jv_type_name(v)), false;
		return true;
	}
	if (!strcmp(name, "items")) {
		if (v->k == V_UNDEF) {
			*out = jv_list(NULL, 0);
			return true;
		}
		return jinja_method(c, at, v, "items", NULL, NULL, 0, out);
	}
	if (!strcmp(name, "list"))
		return list_of(c, at, v, out);
	if (!strcmp(name, "first") || !strcmp(name, "last") || !strcmp(name, "reverse")) {
		struct jv seq;
		if (!list_of(c, at, v, &seq))
			return false;
		if (name[0] == 'r') {
			struct jv *it = jarena_alloc(&c->ar, (seq.n + 1) * sizeof *it);
			if (!it)
				return false;
			for (size_t i = 0; i < seq.n; i++)
				it[i] = seq.u.items[seq.n - 1 - i];
			*out = jv_list(it, seq.n);
			if (v->k == V_STR)
				return join(c, at, out, NULL, NULL, out);
			return true;
		}
		*out = seq.n ? seq.u.items[name[0] == 'f' ? 0 : seq.n - 1] : jv_undef(NULL);
		return true;
	}
	if (!strcmp(name, "join"))
		return join(c, at, v, jinja_arg(args, kw, n, 0, "d"), jinja_arg(args, kw, n, 1, "attribute"), out);
	if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr") || !strcmp(name, "select") ||
	    !strcmp(name, "reject"))
		return select_items(c, at, name, v, args, n, out);
	if (!strcmp(name, "map")) {
		struct jv seq;
		const struct jv *attr = jinja_arg(args, kw, n, 99, "attribute"), *dflt = jinja_arg(args, kw, n, 99, "default");
		if (!list_of(c, at, v, &seq))
			return false;
		if (!attr && (!a0 || a0->k != V_STR))
			return jinja_fail(c, at, QC_EFORMAT, "map needs attribute= or a filter name"), false;
		struct jv *it = jarena_alloc(&c->ar, (seq.n + 1) * sizeof *it);
		if (!it)
			return false;
		for (size_t i = 0; i < seq.n; i++) {
			if (attr) {
				it[i] = attr_path(&seq.u.items[i], attr);
				if (it[i].k == V_UNDEF && dflt)
					it[i] = *dflt;
			} else {
				char fn[64];
				snprintf(fn, sizeof fn, "%.*s", (int)a0->n, a0->u.s);
				if (!jinja_filter(c, at, fn, &seq.u.items[i], args + 1, kw ? kw + 1 : NULL, n - 1, &it[i]))
					return false;
			}
		}
		*out = jv_list(it, seq.n);
		return true;
	}
	/* the rest work on strings and share the str methods */
	if (!strcmp(name, "trim") || !strcmp(name, "upper") || !strcmp(name, "lower") ||
	    !strcmp(name, "capitalize") || !strcmp(name, "title") || !strcmp(name, "replace")) {
		struct jv s = v->k == V_STR ? *v : jv_to_str(&c->ar, v);
		return jinja_method(c, at, &s, !strcmp(name, "trim") ? "strip" : name, args, kw, n, out);
	}
	jinja_fail(c, at, QC_EFORMAT, "unknown filter '%s'", name);
	return false;
}

bool jinja_test(struct jctx *c, const struct jn *at, const char *name, const struct jv *v, const struct jv *args,
		size_t n, bool *out)
{
	const struct jv *a = n ? &args[0] : NULL;
	enum jkind k = v->k;
	if (!strcmp(name, "defined")) *out = k != V_UNDEF;
	else if (!strcmp(name, "undefined")) *out = k == V_UNDEF;
	else if (!strcmp(name, "none")) *out = k == V_NONE;
	else if (!strcmp(name, "string")) *out = k == V_STR;
	else if (!strcmp(name, "mapping")) *out = k == V_DICT;
	else if (!strcmp(name, "iterable")) *out = k == V_STR || k == V_LIST || k == V_DICT || k == V_UNDEF;
	else if (!strcmp(name, "sequence")) *out = k == V_STR || k == V_LIST || k == V_DICT;
	else if (!strcmp(name, "number")) *out = k == V_INT || k == V_FLOAT || k == V_BOOL;
	else if (!strcmp(name, "integer")) *out = k == V_INT;
	else if (!strcmp(name, "float")) *out = k == V_FLOAT;
	else if (!strcmp(name, "boolean")) *out = k == V_BOOL;
	else if (!strcmp(name, "true")) *out = k == V_BOOL && v->u.b;
	else if (!strcmp(name, "false")) *out = k == V_BOOL && !v->u.b;
	else if (!strcmp(name, "callable")) *out = false;
	else if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
		int64_t d = name[0] == 'd' ? (a && a->k == V_INT ? a->u.i : 0) : 2;
		if (k != V_INT || d == 0)
			return jinja_fail(c, at, QC_EFORMAT, "test '%s' needs integers", name), false;
		int64_t r = d == -1 ? 0 : v->u.i % d;
		*out = name[0] == 'o' ? r != 0 : r == 0;
	} else if (a && (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "sameas"))) {
		*out = jv_equal(v, a);
	} else if (a && !strcmp(name, "ne")) {
		*out = !jv_equal(v, a);
	} else if (a && (!strcmp(name, "lt") || !strcmp(name, "gt") || !strcmp(name, "le") || !strcmp(name, "ge"))) {
		int r = jv_cmp(v, a);
		if (r == -2)
			return jinja_fail(c, at, QC_EFORMAT, "cannot compare %s with %s", jv_type_name(v), jv_type_name(a)),
			       false;
		*out = name[0] == 'l' ? (r < 0 || (name[1] == 'e' && r == 0)) : (r > 0 || (name[1] == 'e' && r == 0));
	} else if (a && !strcmp(name, "in")) {
		*out = false;
		if (a->k == V_LIST || a->k == V_DICT)
			for (size_t i = 0; i < (a->k == V_LIST ? a->n : a->u.d->n); i++)
				*out |= jv_equal(a->k == V_LIST ? &a->u.items[i] : &a->u.d->keys[i], v);
		else if (a->k == V_STR && k == V_STR)
			*out = memmem(a->u.s, a->n, v->u.s, v->n) != NULL;
	} else {
		jinja_fail(c, at, QC_EFORMAT, "unknown test '%s'", name);
		return false;
	}
	return true;
}

bool jinja_is_ws(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}
