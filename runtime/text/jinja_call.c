/* jinja_call.c — methods on strings and dicts, and the global functions.
 *
 * Owns: str.strip/lstrip/rstrip([chars]), split([sep[, maxsplit]]) with
 * Python's whitespace rule when sep is absent, startswith/endswith (a string or
 * a list of them), upper/lower/title/capitalize (ASCII), replace(old, new[, n]);
 * dict.get(key[, default]), items(), keys(), values(); and the functions
 * range (its length counts against the loop budget), namespace(**kw),
 * dict(**kw), raise_exception(msg) (the render fails with msg, QC_EINVAL) and
 * strftime_now(fmt) (the caller's now_unix in UTC, through strftime(3), as
 * Python's datetime.strftime does on Linux).
 * Non-goals: list mutation (append/pop), str.format, anything else (a clear error).
 */
#include "jinja_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool split(struct jctx *c, const struct jn *at, const struct jv *s, const struct jv *sep, int64_t max,
		  struct jv *out)
{
	size_t cap = 8, n = 0, i = 0;
	struct jv *it = jarena_alloc(&c->ar, cap * sizeof *it);
	if (sep && sep->k == V_STR && sep->n == 0)
		return jinja_fail(c, at, QC_EFORMAT, "split: empty separator"), false;
	for (;;) {
		if (!it)
			return false;
		size_t a, b, next;
		if (!sep || sep->k != V_STR) {
			while (i < s->n && jinja_is_ws(s->u.s[i]))
				i++;
			if (i >= s->n)
				break;
			a = i;
			if (max >= 0 && (int64_t)n >= max) {
				b = s->n;
				while (b > a && jinja_is_ws(s->u.s[b - 1]))
					b--;
				next = s->n;
			} else {
				while (i < s->n && !jinja_is_ws(s->u.s[i]))
					i++;
				b = next = i;
			}
		} else {
			const char *hit = max >= 0 && (int64_t)n >= max
						  ? NULL
						  : memmem(s->u.s + i, s->n - i, sep->u.s, sep->n);
			a = i;
			b = hit ? (size_t)(hit - s->u.s) : s->n;
			next = hit ? b + sep->n : s->n + 1;
		}
		if (n == cap) {
			struct jv *g = jarena_alloc(&c->ar, 2 * cap * sizeof *g);
			if (!g)
				return false;
			memcpy(g, it, n * sizeof *g);
			it = g;
			cap *= 2;
		}
		it[n++] = jv_str(s->u.s + a, b - a);
		i = next;
		if (i > s->n)
			break;
	}
	*out = jv_list(it, n);
	return true;
}

static bool affix(const struct jv *s, const struct jv *p, bool end)
{
	if (p->k == V_LIST) {
		for (size_t i = 0; i < p->n; i++)
			if (affix(s, &p->u.items[i], end))
				return true;
		return false;
	}
	if (p->k != V_STR || p->n > s->n)
		return false;
	return !memcmp(s->u.s + (end ? s->n - p->n : 0), p->u.s, p->n);
}

static bool str_method(struct jctx *c, const struct jn *at, struct jv *self, const char *name,
		       const struct jv *args, const char **kw, size_t n, struct jv *out)
{
	const struct jv *a0 = jinja_arg(args, kw, n, 0, NULL), *a1 = jinja_arg(args, kw, n, 1, NULL);
	if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
		size_t a = 0, b = self->n;
		bool l = name[0] != 'r', r = name[0] != 'l';
		const struct jv *set = a0 && a0->k == V_STR ? a0 : NULL;
		while (l && a < b && (set ? memchr(set->u.s, self->u.s[a], set->n) != NULL : jinja_is_ws(self->u.s[a])))
			a++;
		while (r && b > a && (set ? memchr(set->u.s, self->u.s[b - 1], set->n) != NULL : jinja_is_ws(self->u.s[b - 1])))
			b--;
		*out = jv_str(self->u.s + a, b - a);
		return true;
	}
	if (!strcmp(name, "split")) {
		const struct jv *mx = jinja_arg(args, kw, n, 1, "maxsplit");
		return split(c, at, self, jinja_arg(args, kw, n, 0, "sep"), mx && mx->k == V_INT ? mx->u.i : -1, out);
	}
	if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
		if (!a0)
			return jinja_fail(c, at, QC_EFORMAT, "%s needs an argument", name), false;
		*out = jv_bool(affix(self, a0, name[0] == 'e'));
		return true;
	}
	if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") || !strcmp(name, "capitalize")) {
		char *d = jarena_alloc(&c->ar, self->n + 1);
		bool prev_alpha = false;
		if (!d)
			return false;
		for (size_t i = 0; i < self->n; i++) {
			unsigned char ch = (unsigned char)self->u.s[i];
			bool up = name[0] == 'u' || (name[0] == 'c' && i == 0) || (name[0] == 't' && !prev_alpha);
			bool ascii_alpha = (ch | 32) >= 'a' && (ch | 32) <= 'z';
			d[i] = (char)(!ascii_alpha ? ch : up ? (ch & ~32) : (ch | 32));
			prev_alpha = ascii_alpha || ch >= 0x80;
		}
		*out = jv_str(d, self->n);
		return true;
	}
	if (!strcmp(name, "replace")) {
		const struct jv *cnt = jinja_arg(args, kw, n, 2, "count");
		if (!a0 || !a1 || a0->k != V_STR || a1->k != V_STR)
			return jinja_fail(c, at, QC_EFORMAT, "replace needs two strings"), false;
		int64_t max = cnt && cnt->k == V_INT ? cnt->u.i : -1;
		struct jbuf b = {.max = c->t->lim.max_output_bytes};
		size_t i = 0;
		for (int64_t done = 0;; done++) {
			const char *hit = (max < 0 || done < max) && a0->n
						  ? memmem(self->u.s + i, self->n - i, a0->u.s, a0->n)
						  : NULL;
			if (!hit)
				break;
			jbuf_put(&b, self->u.s + i, (size_t)(hit - self->u.s) - i);
			jbuf_put(&b, a1->u.s, a1->n);
			i = (size_t)(hit - self->u.s) + a0->n;
		}
		jbuf_put(&b, self->u.s + i, self->n - i);
		int rc = b.rc;
		if (!rc)
			*out = jv_strdup(&c->ar, b.s ? b.s : "", b.len);
		jbuf_deinit(&b);
		if (rc)
			return jinja_fail(c, at, rc, "replace: result longer than %zu bytes", c->t->lim.max_output_bytes),
			       false;
		return true;
	}
	jinja_fail(c, at, QC_EFORMAT, "unknown string method '%s'", name);
	return false;
}

bool jinja_method(struct jctx *c, const struct jn *at, struct jv *self, const char *name, const struct jv *args,
		  const char **kw, size_t n, struct jv *out)
{
	*out = jv_undef(NULL);
	if (self->k == V_STR)
		return str_method(c, at, self, name, args, kw, n, out);
	if (self->k == V_DICT) {
		const struct jdict *d = self->u.d;
		if (!strcmp(name, "get")) {
			const struct jv *k = jinja_arg(args, kw, n, 0, NULL), *dv = jinja_arg(args, kw, n, 1, NULL);
			struct jv *v = k && k->k == V_STR ? jdict_get(d, k->u.s, k->n) : NULL;
			*out = v ? *v : dv ? *dv : jv_none();
			return true;
		}
		if (!strcmp(name, "keys") || !strcmp(name, "values")) {
			*out = jv_list(name[0] == 'k' ? d->keys : d->vals, d->n);
			return true;
		}
		if (!strcmp(name, "items")) {
			struct jv *it = jarena_alloc(&c->ar, (d->n + 1) * sizeof *it);
			struct jv *pairs = jarena_alloc(&c->ar, (2 * d->n + 1) * sizeof *pairs);
			if (!it || !pairs)
				return false;
			for (size_t i = 0; i < d->n; i++) {
				pairs[2 * i] = d->keys[i];
				pairs[2 * i + 1] = d->vals[i];
				it[i] = jv_list(&pairs[2 * i], 2);
				it[i].tuple = true;
			}
			*out = jv_list(it, d->n);
			return true;
		}
	}
	jinja_fail(c, at, QC_EFORMAT, "a %s has no method '%s'", jv_type_name(self), name);
	return false;
}

static bool kw_dict(struct jctx *c, const struct jn *at, const struct jv *args, const char **kw, size_t n,
		    struct jv *out)
{
	*out = jv_dict_new(&c->ar);
	if (out->k != V_DICT)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (kw && kw[i]) {
			jdict_set(&c->ar, out->u.d, jv_str(kw[i], strlen(kw[i])), args[i]);
		} else if (args[i].k == V_DICT) { /* namespace(mapping): copy it */
			for (size_t k = 0; k < args[i].u.d->n; k++)
				jdict_set(&c->ar, out->u.d, args[i].u.d->keys[k], args[i].u.d->vals[k]);
		} else {
			return jinja_fail(c, at, QC_EFORMAT, "namespace()/dict() take keyword arguments"), false;
		}
	}
	return true;
}

bool jinja_func(struct jctx *c, const struct jn *at, const char *name, const struct jv *args, const char **kw,
		size_t n, struct jv *out)
{
	*out = jv_undef(NULL);
	if (!strcmp(name, "raise_exception")) {
		struct jv m = n ? jv_to_str(&c->ar, &args[0]) : jv_str("", 0);
		jinja_fail(c, at, QC_EINVAL, "%.*s", (int)(m.n > 300 ? 300 : m.n), m.u.s);
		return false;
	}
	if (!strcmp(name, "namespace") || !strcmp(name, "dict"))
		return kw_dict(c, at, args, kw, n, out);
	if (!strcmp(name, "range")) {
		int64_t lo = 0, hi, step = 1;
		for (size_t i = 0; i < n; i++)
			if (args[i].k != V_INT)
				return jinja_fail(c, at, QC_EFORMAT, "range needs integers"), false;
		if (n < 1 || n > 3)
			return jinja_fail(c, at, QC_EFORMAT, "range takes 1 to 3 arguments"), false;
		hi = args[n == 1 ? 0 : 1].u.i;
		if (n > 1)
			lo = args[0].u.i;
		if (n == 3)
			step = args[2].u.i;
		if (step == 0)
			return jinja_fail(c, at, QC_EFORMAT, "range step cannot be zero"), false;
		size_t cnt = 0;
		if (step > 0 && hi > lo)
			cnt = (size_t)(((uint64_t)hi - (uint64_t)lo - 1) / (uint64_t)step + 1);
		else if (step < 0 && lo > hi)
			cnt = (size_t)(((uint64_t)lo - (uint64_t)hi - 1) / (uint64_t)(-(step + 1) + 1) + 1);
		if (cnt > c->t->lim.max_loop_iters)
			return jinja_fail(c, at, QC_ERANGE, "range of %zu items: more than the %zu loop iterations allowed",
					  cnt, c->t->lim.max_loop_iters), false;
		struct jv *it = jarena_alloc(&c->ar, (cnt + 1) * sizeof *it);
		if (!it)
			return false;
		for (size_t i = 0; i < cnt; i++)
			it[i] = jv_int(lo + (int64_t)i * step);
		*out = jv_list(it, cnt);
		return true;
	}
	if (!strcmp(name, "strftime_now")) {
		char buf[256];
		struct tm tm;
		time_t t = (time_t)c->chat->now_unix;
		if (!n || args[0].k != V_STR || args[0].n >= 64)
			return jinja_fail(c, at, QC_EFORMAT, "strftime_now needs a format string"), false;
		char fmt[64];
		memcpy(fmt, args[0].u.s, args[0].n);
		fmt[args[0].n] = '\0';
		if (!gmtime_r(&t, &tm))
			return jinja_fail(c, at, QC_EFORMAT, "strftime_now: time out of range"), false;
		size_t len = strftime(buf, sizeof buf, fmt, &tm);
		*out = jv_strdup(&c->ar, buf, len);
		return true;
	}
	jinja_fail(c, at, QC_EFORMAT, "unknown function '%s'", name);
	return false;
}
