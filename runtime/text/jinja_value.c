/* jinja_value.c — render-time values: arena, output buffer, comparisons, str() and tojson.
 *
 * Owns: the per-render bump arena (bounded by max_scratch_bytes), the bounded
 * output buffer, Python's truthiness/equality/ordering over the value kinds, and
 * the two text forms a template can ask for: Python str()/repr() (what {{ x }}
 * prints) and json.dumps(x, ensure_ascii=False, indent=N, sort_keys=B), which is
 * the tojson transformers installs.
 * Non-goals: float formatting past what repr() does for ordinary magnitudes.
 */
#include "jinja_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ablk {
	struct ablk *next;
	size_t used, cap;
	max_align_t data[];
};

void *jarena_alloc(struct jarena *a, size_t n)
{
	struct ablk *b = a->blocks;
	n = (n + 15) & ~(size_t)15;
	if (a->oom)
		return NULL;
	if (!b || b->cap - b->used < n) {
		size_t cap = n > 65536 ? n : 65536;
		if (a->used + cap > a->cap_total) {
			a->oom = QC_ERANGE;
			return NULL;
		}
		b = malloc(sizeof *b + cap);
		if (!b) {
			a->oom = QC_ENOMEM;
			return NULL;
		}
		b->next = a->blocks;
		b->used = 0;
		b->cap = cap;
		a->blocks = b;
		a->used += cap;
	}
	void *p = (char *)b->data + b->used;
	b->used += n;
	memset(p, 0, n);
	return p;
}

void jarena_deinit(struct jarena *a)
{
	for (struct ablk *b = a->blocks, *nx; b; b = nx) {
		nx = b->next;
		free(b);
	}
	a->blocks = NULL;
}

struct jv jv_undef(const char *name) { return (struct jv){.k = V_UNDEF, .name = name}; }
struct jv jv_none(void) { return (struct jv){.k = V_NONE}; }
struct jv jv_bool(bool b) { return (struct jv){.k = V_BOOL, .u.b = b}; }
struct jv jv_int(int64_t i) { return (struct jv){.k = V_INT, .u.i = i}; }
struct jv jv_float(double f) { return (struct jv){.k = V_FLOAT, .u.f = f}; }
struct jv jv_str(const char *s, size_t n) { return (struct jv){.k = V_STR, .n = n, .u.s = s}; }
struct jv jv_list(struct jv *items, size_t n) { return (struct jv){.k = V_LIST, .n = n, .u.items = items}; }

struct jv jv_strdup(struct jarena *a, const char *s, size_t n)
{
	char *d = jarena_alloc(a, n + 1);
	if (!d)
		return jv_str("", 0); /* a->oom is set; the caller reports it */
	memcpy(d, s, n);
	return jv_str(d, n);
}

struct jv jv_dict_new(struct jarena *a)
{
	struct jdict *d = jarena_alloc(a, sizeof *d);
	return d ? (struct jv){.k = V_DICT, .u.d = d} : jv_none();
}

struct jv *jdict_get(const struct jdict *d, const char *k, size_t n)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->keys[i].k == V_STR && d->keys[i].n == n && !memcmp(d->keys[i].u.s, k, n))
			return &d->vals[i];
	return NULL;
}

int jdict_set(struct jarena *a, struct jdict *d, struct jv key, struct jv val)
{
	for (size_t i = 0; i < d->n; i++)
		if (jv_equal(&d->keys[i], &key)) {
			d->vals[i] = val;
			return QC_OK;
		}
	if (d->n == d->cap) {
		size_t c = d->cap ? d->cap * 2 : 8;
		struct jv *k = jarena_alloc(a, c * sizeof *k), *v = jarena_alloc(a, c * sizeof *v);
		if (!k || !v)
			return a->oom;
		if (d->n) {
			memcpy(k, d->keys, d->n * sizeof *k);
			memcpy(v, d->vals, d->n * sizeof *v);
		}
		d->keys = k;
		d->vals = v;
		d->cap = c;
	}
	d->keys[d->n] = key;
	d->vals[d->n++] = val;
	return QC_OK;
}

bool jv_truthy(const struct jv *v)
{
	switch (v->k) {
	case V_UNDEF: case V_NONE: return false;
	case V_BOOL: return v->u.b;
	case V_INT: return v->u.i != 0;
	case V_FLOAT: return v->u.f != 0.0;
	case V_STR: case V_LIST: return v->n != 0;
	case V_DICT: return v->u.d->n != 0;
	case V_LOOP: return true;
	}
	return false;
}

static bool numeric(const struct jv *v) { return v->k == V_INT || v->k == V_FLOAT || v->k == V_BOOL; }

static double num(const struct jv *v)
{
	return v->k == V_FLOAT ? v->u.f : v->k == V_INT ? (double)v->u.i : (double)v->u.b;
}

bool jv_equal(const struct jv *a, const struct jv *b)
{
	if (numeric(a) && numeric(b)) {
		if (a->k != V_FLOAT && b->k != V_FLOAT)
			return (a->k == V_INT ? a->u.i : a->u.b) == (b->k == V_INT ? b->u.i : b->u.b);
		return num(a) == num(b);
	}
	if (a->k != b->k)
		return false;
	switch (a->k) {
	case V_UNDEF: case V_NONE: return true;
	case V_STR: return a->n == b->n && !memcmp(a->u.s, b->u.s, a->n);
	case V_LIST:
		if (a->n != b->n)
			return false;
		for (size_t i = 0; i < a->n; i++)
			if (!jv_equal(&a->u.items[i], &b->u.items[i]))
				return false;
		return true;
	case V_DICT: {
		const struct jdict *x = a->u.d, *y = b->u.d;
		if (x->n != y->n)
			return false;
		for (size_t i = 0; i < x->n; i++) {
			const struct jv *o = x->keys[i].k == V_STR ? jdict_get(y, x->keys[i].u.s, x->keys[i].n) : NULL;
			if (!o || !jv_equal(&x->vals[i], o))
				return false;
		}
		return true;
	}
	default: return a->u.loop == b->u.loop;
	}
}

int jv_cmp(const struct jv *a, const struct jv *b)
{
	if (numeric(a) && numeric(b)) {
		double x = num(a), y = num(b);
		return x < y ? -1 : x > y ? 1 : 0;
	}
	if (a->k == V_STR && b->k == V_STR) {
		size_t n = a->n < b->n ? a->n : b->n;
		int c = memcmp(a->u.s, b->u.s, n);
		return c < 0 ? -1 : c > 0 ? 1 : a->n < b->n ? -1 : a->n > b->n ? 1 : 0;
	}
	if (a->k == V_LIST && b->k == V_LIST) {
		for (size_t i = 0; i < a->n && i < b->n; i++) {
			int c = jv_cmp(&a->u.items[i], &b->u.items[i]);
			if (c)
				return c;
		}
		return a->n < b->n ? -1 : a->n > b->n ? 1 : 0;
	}
	return -2;
}

const char *jv_type_name(const struct jv *v)
{
	static const char *const n[] = {"undefined", "none", "bool", "int", "float", "string", "list", "dict", "loop"};
	return n[v->k];
}

size_t jutf8_len(const char *s, size_t n)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++)
		c += ((unsigned char)s[i] & 0xc0) != 0x80;
	return c;
}

static void put_float(struct jbuf *b, double f)
{
	char s[40];
	if (isnan(f)) {
		jbuf_put(b, "nan", 3);
		return;
	}
	if (isinf(f)) {
		jbuf_put(b, f < 0 ? "-inf" : "inf", f < 0 ? 4 : 3);
		return;
	}
	/* Python repr: the shortest text that reads back to the same double */
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(s, sizeof s, "%.*g", prec, f);
		if (strtod(s, NULL) == f)
			break;
	}
	jbuf_put(b, s, strlen(s));
	if (!strpbrk(s, ".en"))
		jbuf_put(b, ".0", 2);
}

static void put_int(struct jbuf *b, int64_t i)
{
	char s[24];
	int n = snprintf(s, sizeof s, "%lld", (long long)i);
	jbuf_put(b, s, (size_t)n);
}

static void put_repr_str(struct jbuf *b, const char *s, size_t n)
{
	char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
	jbuf_putc(b, q);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char e[8];
		if (c == '\\' || c == (unsigned char)q) {
			e[0] = '\\';
			e[1] = (char)c;
			jbuf_put(b, e, 2);
		} else if (c == '\n') {
			jbuf_put(b, "\\n", 2);
		} else if (c == '\r') {
			jbuf_put(b, "\\r", 2);
		} else if (c == '\t') {
			jbuf_put(b, "\\t", 2);
		} else if (c < 0x20 || c == 0x7f) {
			snprintf(e, sizeof e, "\\x%02x", c);
			jbuf_put(b, e, 4);
		} else {
			jbuf_putc(b, (char)c);
		}
	}
	jbuf_putc(b, q);
}

static void repr(struct jbuf *b, const struct jv *v, int depth)
{
	if (depth > 64) {
		jbuf_put(b, "...", 3);
		return;
	}
	if (v->k == V_STR) {
		put_repr_str(b, v->u.s, v->n);
	} else if (v->k == V_LIST) {
		jbuf_putc(b, v->tuple ? '(' : '[');
		for (size_t i = 0; i < v->n; i++) {
			if (i)
				jbuf_put(b, ", ", 2);
			repr(b, &v->u.items[i], depth + 1);
		}
		if (v->tuple && v->n == 1)
			jbuf_putc(b, ',');
		jbuf_putc(b, v->tuple ? ')' : ']');
	} else if (v->k == V_DICT) {
		jbuf_putc(b, '{');
		for (size_t i = 0; i < v->u.d->n; i++) {
			if (i)
				jbuf_put(b, ", ", 2);
			repr(b, &v->u.d->keys[i], depth + 1);
			jbuf_put(b, ": ", 2);
			repr(b, &v->u.d->vals[i], depth + 1);
		}
		jbuf_putc(b, '}');
	} else {
		jv_str_out(b, v);
	}
}

void jv_str_out(struct jbuf *b, const struct jv *v)
{
	switch (v->k) {
	case V_UNDEF: break;
	case V_NONE: jbuf_put(b, "None", 4); break;
	case V_BOOL: jbuf_put(b, v->u.b ? "True" : "False", v->u.b ? 4 : 5); break;
	case V_INT: put_int(b, v->u.i); break;
	case V_FLOAT: put_float(b, v->u.f); break;
	case V_STR: jbuf_put(b, v->u.s, v->n); break;
	case V_LIST: case V_DICT: repr(b, v, 0); break;
	case V_LOOP: jbuf_put(b, "<LoopContext>", 13); break;
	}
}

struct jv jv_to_str(struct jarena *a, const struct jv *v)
{
	if (v->k == V_STR)
		return *v;
	struct jbuf b = {.max = (size_t)1 << 30};
	jv_str_out(&b, v);
	struct jv r = jv_strdup(a, b.s ? b.s : "", b.len);
	if (b.rc && !a->oom)
		a->oom = b.rc;
	jbuf_deinit(&b);
	return r;
}

static void json_str(struct jbuf *b, const char *s, size_t n)
{
	jbuf_putc(b, '"');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char e[8];
		switch (c) {
		case '"': jbuf_put(b, "\\\"", 2); break;
		case '\\': jbuf_put(b, "\\\\", 2); break;
		case '\n': jbuf_put(b, "\\n", 2); break;
		case '\r': jbuf_put(b, "\\r", 2); break;
		case '\t': jbuf_put(b, "\\t", 2); break;
		case '\b': jbuf_put(b, "\\b", 2); break;
		case '\f': jbuf_put(b, "\\f", 2); break;
		default:
			if (c < 0x20) {
				snprintf(e, sizeof e, "\\u%04x", c);
				jbuf_put(b, e, 6);
			} else {
				jbuf_putc(b, (char)c);
			}
		}
	}
	jbuf_putc(b, '"');
}

static void newline(struct jbuf *b, int indent, int level)
{
	jbuf_putc(b, '\n');
	for (int i = 0; i < indent * level; i++)
		jbuf_putc(b, ' ');
}

static int key_cmp(const void *x, const void *y)
{
	const struct jv *a = *(const struct jv *const *)x, *b = *(const struct jv *const *)y;
	return jv_cmp(a, b);
}

int jv_json_out(struct jbuf *b, const struct jv *v, int indent, bool sort_keys, int depth)
{
	if (depth > 64)
		return QC_ERANGE;
	int rc = QC_OK;
	switch (v->k) {
	case V_UNDEF: return QC_EINVAL; /* json.dumps fails on Undefined */
	case V_NONE: jbuf_put(b, "null", 4); break;
	case V_BOOL: jbuf_put(b, v->u.b ? "true" : "false", v->u.b ? 4 : 5); break;
	case V_INT: put_int(b, v->u.i); break;
	case V_FLOAT:
		if (isnan(v->u.f) || isinf(v->u.f))
			jbuf_put(b, isnan(v->u.f) ? "NaN" : v->u.f < 0 ? "-Infinity" : "Infinity",
				 isnan(v->u.f) ? 3 : v->u.f < 0 ? 9 : 8);
		else
			put_float(b, v->u.f);
		break;
	case V_STR: json_str(b, v->u.s, v->n); break;
	case V_LIST:
		jbuf_putc(b, '[');
		for (size_t i = 0; i < v->n && !rc; i++) {
			if (i)
				jbuf_put(b, indent >= 0 ? "," : ", ", indent >= 0 ? 1 : 2);
			if (indent >= 0)
				newline(b, indent, depth + 1);
			rc = jv_json_out(b, &v->u.items[i], indent, sort_keys, depth + 1);
		}
		if (indent >= 0 && v->n)
			newline(b, indent, depth);
		jbuf_putc(b, ']');
		break;
	case V_DICT: {
		const struct jdict *d = v->u.d;
		const struct jv **order = malloc((d->n ? d->n : 1) * sizeof *order);
		if (!order)
			return QC_ENOMEM;
		for (size_t i = 0; i < d->n; i++)
			order[i] = &d->keys[i];
		if (sort_keys)
			qsort(order, d->n, sizeof *order, key_cmp);
		jbuf_putc(b, '{');
		for (size_t i = 0; i < d->n && !rc; i++) {
			size_t k = (size_t)(order[i] - d->keys);
			if (i)
				jbuf_put(b, indent >= 0 ? "," : ", ", indent >= 0 ? 1 : 2);
			if (indent >= 0)
				newline(b, indent, depth + 1);
			if (d->keys[k].k == V_STR) {
				json_str(b, d->keys[k].u.s, d->keys[k].n);
			} else {
				jbuf_putc(b, '"');
				jv_str_out(b, &d->keys[k]);
				jbuf_putc(b, '"');
			}
			jbuf_put(b, ": ", 2);
			rc = jv_json_out(b, &d->vals[k], indent, sort_keys, depth + 1);
		}
		free(order);
		if (indent >= 0 && d->n)
			newline(b, indent, depth);
		jbuf_putc(b, '}');
		break;
	}
	case V_LOOP: return QC_EINVAL;
	}
	return rc;
}
