/* gguf.c — GGUF v1/v2/v3 parser over a mapping (layout: gguf.h).
 *
 * Everything read from the file is bounded by the cursor; counts are checked
 * against the bytes left before any allocation (each KV pair, array element and
 * tensor record has a minimum encoded size), so a hostile count cannot make us
 * allocate more than the file could describe. Tensor ranges must lie inside the
 * file, be aligned, and not overlap. Nested arrays are capped at depth 8.
 * Matches llama.cpp's gguf_init_from_file_impl checks, plus v1 support and a
 * looser but safe data-layout rule (any aligned, non-overlapping order).
 */
#include "gguf.h"

#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "cursor.h"

#define MAX_ARRAY_DEPTH 8

struct parser {
	struct qc_cursor c;
	struct qc_arena *arena;
	uint32_t version;
	const char *key;           /* key being parsed, for messages */
};

static const uint32_t vtype_size[QC_GGUF_VTYPE_COUNT] = {
	[QC_GGUF_UINT8] = 1, [QC_GGUF_INT8] = 1, [QC_GGUF_UINT16] = 2, [QC_GGUF_INT16] = 2,
	[QC_GGUF_UINT32] = 4, [QC_GGUF_INT32] = 4, [QC_GGUF_FLOAT32] = 4, [QC_GGUF_BOOL] = 1,
	[QC_GGUF_UINT64] = 8, [QC_GGUF_INT64] = 8, [QC_GGUF_FLOAT64] = 8,
};

static const char *const vtype_names[QC_GGUF_VTYPE_COUNT] = {
	"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

uint32_t qc_gguf_vtype_size(enum qc_gguf_vtype t)
{
	return (unsigned)t < QC_GGUF_VTYPE_COUNT ? vtype_size[t] : 0;
}

const char *qc_gguf_vtype_name(enum qc_gguf_vtype t)
{
	return (unsigned)t < QC_GGUF_VTYPE_COUNT ? vtype_names[t] : "invalid";
}

bool qc_gguf_str_eq(struct qc_gguf_str s, const char *c)
{
	size_t n = strlen(c);
	return s.len == n && memcmp(s.p, c, n) == 0;
}

/* v1 stores counts/lengths as u32, v2+ as u64. */
static int read_count(struct parser *ps, uint64_t *v, const char *what, struct qc_err *err)
{
	if (ps->version == 1) {
		uint32_t v32 = 0;
		int rc = qc_cur_u32(&ps->c, &v32, what, err);
		*v = v32;
		return rc;
	}
	return qc_cur_u64(&ps->c, v, what, err);
}

static int read_str(struct parser *ps, struct qc_gguf_str *s, const char *what, struct qc_err *err)
{
	uint64_t len;
	uint64_t at = qc_cur_pos(&ps->c);
	int rc = read_count(ps, &len, what, err);
	if (rc)
		return rc;
	if (len > ps->c.len - ps->c.off)
		return qc_err_set(err, QC_EFORMAT, ps->c.path, NULL, (int64_t)at,
				  "%s%s%s: string length %llu exceeds the %llu bytes left in the file",
				  what, ps->key ? " of key " : "", ps->key ? ps->key : "",
				  (unsigned long long)len, (unsigned long long)(ps->c.len - ps->c.off));
	s->p = (const char *)ps->c.p + ps->c.off;
	s->len = len;
	ps->c.off += len;
	return QC_OK;
}

static int read_scalar(struct parser *ps, enum qc_gguf_vtype t, struct qc_gguf_value *v,
		       struct qc_err *err)
{
	uint8_t b[8] = {0};
	int rc = qc_cur_read(&ps->c, b, vtype_size[t], "value", err);
	if (rc)
		return rc;
	v->type = t;
	switch (t) {
	case QC_GGUF_UINT8: v->u = b[0]; break;
	case QC_GGUF_INT8: v->i = (int8_t)b[0]; break;
	case QC_GGUF_UINT16: { uint16_t x; memcpy(&x, b, 2); v->u = x; break; }
	case QC_GGUF_INT16: { int16_t x; memcpy(&x, b, 2); v->i = x; break; }
	case QC_GGUF_UINT32: { uint32_t x; memcpy(&x, b, 4); v->u = x; break; }
	case QC_GGUF_INT32: { int32_t x; memcpy(&x, b, 4); v->i = x; break; }
	case QC_GGUF_FLOAT32: { float x; memcpy(&x, b, 4); v->f = x; break; }
	case QC_GGUF_BOOL:
		if (b[0] > 1)
			return qc_err_set(err, QC_EFORMAT, ps->c.path, NULL, (int64_t)qc_cur_pos(&ps->c) - 1,
					  "key %s: bool value %u is neither 0 nor 1", ps->key, b[0]);
		v->b = b[0];
		break;
	case QC_GGUF_UINT64: memcpy(&v->u, b, 8); break;
	case QC_GGUF_INT64: memcpy(&v->i, b, 8); break;
	case QC_GGUF_FLOAT64: memcpy(&v->f, b, 8); break;
	default: QC_ASSERT(0);
	}
	return QC_OK;
}

static int read_value(struct parser *ps, enum qc_gguf_vtype t, struct qc_gguf_value *v, int depth,
		      struct qc_err *err);

static int read_array(struct parser *ps, struct qc_gguf_value *v, int depth, struct qc_err *err)
{
	uint32_t et;
	uint64_t n, at = qc_cur_pos(&ps->c);
	int rc = qc_cur_u32(&ps->c, &et, "array element type", err);
	if (!rc)
		rc = read_count(ps, &n, "array length", err);
	if (rc)
		return rc;
	if (et >= QC_GGUF_VTYPE_COUNT)
		return qc_err_set(err, QC_EFORMAT, ps->c.path, NULL, (int64_t)at,
				  "key %s: array element type %u is not a GGUF value type", ps->key, et);
	if (depth >= MAX_ARRAY_DEPTH)
		return qc_err_set(err, QC_EFORMAT, ps->c.path, NULL, (int64_t)at,
				  "key %s: arrays nested deeper than %d", ps->key, MAX_ARRAY_DEPTH);
	v->type = QC_GGUF_ARRAY;
	v->arr.elem = (enum qc_gguf_vtype)et;
	v->arr.n = n;
	uint64_t left = ps->c.len - ps->c.off;
	/* minimum encoded bytes per element bounds n before we allocate */
	uint64_t min_each = vtype_size[et] ? vtype_size[et]
			  : et == QC_GGUF_STRING ? (ps->version == 1 ? 4u : 8u)
			  : (ps->version == 1 ? 8u : 12u);
	uint64_t need;
	if (!qc_mul_ok(n, min_each, &need) || need > left)
		return qc_err_set(err, QC_EFORMAT, ps->c.path, NULL, (int64_t)at,
				  "key %s: array of %llu %s elements does not fit in the %llu bytes left",
				  ps->key, (unsigned long long)n, vtype_names[et], (unsigned long long)left);
	if (vtype_size[et]) {
		v->arr.raw = ps->c.p + ps->c.off;
		if (et == QC_GGUF_BOOL)
			for (uint64_t i = 0; i < n; i++)
				if (v->arr.raw[i] > 1)
					return qc_err_set(err, QC_EFORMAT, ps->c.path, NULL,
							  (int64_t)(qc_cur_pos(&ps->c) + i),
							  "key %s: bool element %llu is neither 0 nor 1",
							  ps->key, (unsigned long long)i);
		ps->c.off += need;
		return QC_OK;
	}
	v->arr.items = n ? qc_arena_calloc(ps->arena, (size_t)n, sizeof(*v->arr.items)) : NULL;
	if (n && !v->arr.items)
		return qc_err_set(err, QC_ENOMEM, ps->c.path, NULL, (int64_t)at,
				  "key %s: out of memory for %llu array elements", ps->key, (unsigned long long)n);
	for (uint64_t i = 0; i < n; i++) {
		rc = read_value(ps, (enum qc_gguf_vtype)et, &v->arr.items[i], depth + 1, err);
		if (rc)
			return rc;
	}
	return QC_OK;
}

static int read_value(struct parser *ps, enum qc_gguf_vtype t, struct qc_gguf_value *v, int depth,
		      struct qc_err *err)
{
	if (t == QC_GGUF_STRING) {
		v->type = t;
		return read_str(ps, &v->s, "string", err);
	}
	if (t == QC_GGUF_ARRAY)
		return read_array(ps, v, depth, err);
	return read_scalar(ps, t, v, err);
}

static int cmp_key(const void *a, const void *b)
{
	const struct qc_gguf_kv *x = *(struct qc_gguf_kv *const *)a, *y = *(struct qc_gguf_kv *const *)b;
	uint64_t n = x->key.len < y->key.len ? x->key.len : y->key.len;
	int c = memcmp(x->key.p, y->key.p, n);
	return c ? c : (x->key.len > y->key.len) - (x->key.len < y->key.len);
}

/* llama.cpp rejects duplicate keys, so do we; sorted, so 10^5 keys stay cheap. */
static int check_dup_keys(struct qc_gguf *g, struct qc_err *err)
{
	if (g->n_kv < 2)
		return QC_OK;
	struct qc_gguf_kv **v = malloc((size_t)g->n_kv * sizeof(*v));
	if (!v)
		return qc_err_set(err, QC_ENOMEM, g->path, NULL, -1, "out of memory");
	for (uint64_t i = 0; i < g->n_kv; i++)
		v[i] = &g->kv[i];
	qsort(v, (size_t)g->n_kv, sizeof(*v), cmp_key);
	int rc = QC_OK;
	for (uint64_t i = 1; i < g->n_kv; i++)
		if (cmp_key(&v[i - 1], &v[i]) == 0) {
			const struct qc_gguf_kv *later = v[i]->off > v[i - 1]->off ? v[i] : v[i - 1];
			rc = qc_err_set(err, QC_EFORMAT, g->path, NULL, (int64_t)later->off, "duplicate key '%s'", later->key.p);
			break;
		}
	free(v);
	return rc;
}

static int parse_kv(struct parser *ps, struct qc_gguf *g, struct qc_err *err)
{
	for (uint64_t i = 0; i < g->n_kv; i++) {
		struct qc_gguf_kv *kv = &g->kv[i];
		kv->off = qc_cur_pos(&ps->c);
		int rc = read_str(ps, &kv->key, "key", err);
		if (rc)
			return rc;
		char *key = qc_arena_strndup(ps->arena, kv->key.p, (size_t)kv->key.len);
		if (!key)
			return qc_err_set(err, QC_ENOMEM, ps->c.path, NULL, (int64_t)kv->off, "out of memory");
		kv->key.p = key; /* NUL-terminated copy, so keys can be printed */
		ps->key = key;
		uint32_t t;
		uint64_t toff = qc_cur_pos(&ps->c);
		rc = qc_cur_u32(&ps->c, &t, "value type", err);
		if (rc)
			return rc;
		if (t >= QC_GGUF_VTYPE_COUNT)
			return qc_err_set(err, QC_EFORMAT, ps->c.path, NULL, (int64_t)toff,
					  "key '%s' has invalid value type %u", key, t);
		rc = read_value(ps, (enum qc_gguf_vtype)t, &kv->val, 0, err);
		if (rc)
			return rc;
	}
	ps->key = NULL;
	return check_dup_keys(g, err);
}

static int parse_alignment(struct qc_gguf *g, struct qc_err *err)
{
	const struct qc_gguf_kv *kv = qc_gguf_find(g, "general.alignment");
	g->alignment = QC_GGUF_DEFAULT_ALIGNMENT;
	if (!kv)
		return QC_OK;
	if (kv->val.type != QC_GGUF_UINT32)
		return qc_err_set(err, QC_EFORMAT, g->path, NULL, (int64_t)kv->off,
				  "general.alignment has type %s, expected u32", vtype_names[kv->val.type]);
	uint64_t a = kv->val.u;
	if (a == 0 || (a & (a - 1)))
		return qc_err_set(err, QC_EFORMAT, g->path, NULL, (int64_t)kv->off,
				  "general.alignment %llu is not a power of two", (unsigned long long)a);
	g->alignment = (uint32_t)a;
	return QC_OK;
}

static int parse_tensor_info(struct parser *ps, struct qc_gguf *g, uint64_t i, struct qc_err *err)
{
	struct qc_gguf_tensor *t = &g->tensors[i];
	struct qc_gguf_str name;
	t->info_off = qc_cur_pos(&ps->c);
	int rc = read_str(ps, &name, "tensor name", err);
	if (rc)
		return rc;
	if (name.len >= QC_GGUF_MAX_NAME)
		return qc_err_set(err, QC_EFORMAT, ps->c.path, NULL, (int64_t)t->info_off,
				  "tensor %llu: name is %llu bytes, the limit is %d",
				  (unsigned long long)i, (unsigned long long)name.len, QC_GGUF_MAX_NAME - 1);
	memcpy(t->name, name.p, name.len);
	t->name[name.len] = '\0';
	if (memchr(t->name, '\0', name.len))
		return qc_err_set(err, QC_EFORMAT, ps->c.path, NULL, (int64_t)t->info_off,
				  "tensor %llu: name contains a NUL byte", (unsigned long long)i);
	uint64_t at = qc_cur_pos(&ps->c);
	rc = qc_cur_u32(&ps->c, &t->n_dims, "tensor n_dims", err);
	if (rc)
		return rc;
	if (t->n_dims > QC_GGUF_MAX_DIMS)
		return qc_err_set(err, QC_EFORMAT, ps->c.path, t->name, (int64_t)at,
				  "%u dimensions, at most %d are allowed", t->n_dims, QC_GGUF_MAX_DIMS);
	uint64_t n = 1;
	for (uint32_t d = 0; d < QC_GGUF_MAX_DIMS; d++) {
		uint64_t ne = 1;
		if (d < t->n_dims) {
			at = qc_cur_pos(&ps->c);
			rc = read_count(ps, &ne, "tensor dimension", err);
			if (rc)
				return rc;
			if (ne > (uint64_t)INT64_MAX)
				return qc_err_set(err, QC_EFORMAT, ps->c.path, t->name, (int64_t)at,
						  "dimension %u is negative (%lld)", d, (long long)(int64_t)ne);
		}
		t->ne[d] = (int64_t)ne;
		if (!qc_mul_ok(n, ne, &n) || n > (uint64_t)INT64_MAX)
			return qc_err_set(err, QC_EFORMAT, ps->c.path, t->name, (int64_t)at,
					  "element count overflows (shape %lld x %lld x %lld x %lld)",
					  (long long)t->ne[0], (long long)(d > 0 ? t->ne[1] : 1),
					  (long long)(d > 1 ? t->ne[2] : 1), (long long)(d > 2 ? t->ne[3] : 1));
	}
	t->n_elems = n;
	uint32_t type;
	at = qc_cur_pos(&ps->c);
	rc = qc_cur_u32(&ps->c, &type, "tensor type", err);
	if (rc)
		return rc;
	if (!qc_type_valid(type))
		return qc_err_set(err, QC_EFORMAT, ps->c.path, t->name, (int64_t)at,
				  "unknown ggml type id %u", type);
	t->type = (enum qc_type)type;
	const struct qc_type_traits *tt = qc_type_get(t->type);
	uint64_t row_bytes;
	rc = qc_type_row_bytes(t->type, (uint64_t)t->ne[0], &row_bytes);
	if (rc == QC_EFORMAT)
		return qc_err_set(err, QC_EFORMAT, ps->c.path, t->name, (int64_t)t->info_off,
				  "row length %lld not a multiple of block size %lld (%s)",
				  (long long)t->ne[0], (long long)tt->block_elems, tt->name);
	if (rc || !qc_mul_ok(row_bytes, n / ((uint64_t)t->ne[0] ? (uint64_t)t->ne[0] : 1), &t->n_bytes))
		return qc_err_set(err, QC_EFORMAT, ps->c.path, t->name, (int64_t)t->info_off,
				  "byte size overflows");
	if (t->ne[0] == 0)
		t->n_bytes = 0;
	at = qc_cur_pos(&ps->c);
	rc = qc_cur_u64(&ps->c, &t->data_off, "tensor offset", err);
	if (rc)
		return rc;
	if (t->data_off % g->alignment)
		return qc_err_set(err, QC_EFORMAT, ps->c.path, t->name, (int64_t)at,
				  "data offset %llu is not a multiple of the alignment %u",
				  (unsigned long long)t->data_off, g->alignment);
	return QC_OK;
}

static int cmp_off(const void *a, const void *b)
{
	const struct qc_gguf_tensor *x = *(struct qc_gguf_tensor *const *)a;
	const struct qc_gguf_tensor *y = *(struct qc_gguf_tensor *const *)b;
	return x->data_off < y->data_off ? -1 : x->data_off > y->data_off;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp((*(struct qc_gguf_tensor *const *)a)->name, (*(struct qc_gguf_tensor *const *)b)->name);
}

/* Relative offsets become absolute; every range must be inside the file,
 * names unique, and ranges disjoint. */
static int check_tensors(struct qc_gguf *g, struct qc_err *err)
{
	int rc = QC_OK;
	if (!g->n_tensors)
		return QC_OK;
	struct qc_gguf_tensor **v = malloc((size_t)g->n_tensors * sizeof(*v));
	if (!v)
		return qc_err_set(err, QC_ENOMEM, g->path, NULL, -1, "out of memory");
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		struct qc_gguf_tensor *t = &g->tensors[i];
		uint64_t abs, end;
		if (!qc_add_ok(g->data_off, t->data_off, &abs) || !qc_add_ok(abs, t->n_bytes, &end) ||
		    end > g->size) {
			rc = qc_err_set(err, QC_EFORMAT, g->path, t->name, (int64_t)t->info_off,
					"data [%llu, +%llu) runs past the end of the %llu-byte file",
					(unsigned long long)(g->data_off + t->data_off),
					(unsigned long long)t->n_bytes, (unsigned long long)g->size);
			goto out;
		}
		t->data_off = abs;
		v[i] = t;
	}
	qsort(v, (size_t)g->n_tensors, sizeof(*v), cmp_name);
	for (uint64_t i = 1; i < g->n_tensors; i++)
		if (strcmp(v[i - 1]->name, v[i]->name) == 0) {
			const struct qc_gguf_tensor *later = v[i]->info_off > v[i - 1]->info_off ? v[i] : v[i - 1];
			rc = qc_err_set(err, QC_EFORMAT, g->path, later->name, (int64_t)later->info_off,
					"duplicate tensor name");
			goto out;
		}
	qsort(v, (size_t)g->n_tensors, sizeof(*v), cmp_off);
	for (uint64_t i = 1; i < g->n_tensors; i++)
		if (v[i - 1]->n_bytes && v[i - 1]->data_off + v[i - 1]->n_bytes > v[i]->data_off) {
			rc = qc_err_set(err, QC_EFORMAT, g->path, v[i]->name, (int64_t)v[i]->info_off,
					"data overlaps tensor '%s'", v[i - 1]->name);
			goto out;
		}
out:
	free(v);
	return rc;
}

static int parse(struct qc_gguf *g, struct qc_err *err)
{
	struct parser ps = {
		.c = { .p = g->map, .len = g->size, .path = g->path },
		.arena = g->arena,
	};
	uint8_t magic[4];
	int rc = qc_cur_read(&ps.c, magic, 4, "magic", err);
	if (rc)
		return rc;
	if (memcmp(magic, "GGUF", 4) != 0)
		return qc_err_set(err, QC_EFORMAT, g->path, NULL, 0,
				  "not a GGUF file: magic is %02x %02x %02x %02x, expected 'GGUF'",
				  magic[0], magic[1], magic[2], magic[3]);
	rc = qc_cur_u32(&ps.c, &g->version, "version", err);
	if (rc)
		return rc;
	if (g->version && !(g->version & 0xffff))
		return qc_err_set(err, QC_EUNSUPPORTED, g->path, NULL, 4,
				  "big-endian GGUF (version field 0x%08x) is not supported", g->version);
	if (g->version < 1 || g->version > 3)
		return qc_err_set(err, QC_EUNSUPPORTED, g->path, NULL, 4,
				  "unknown GGUF version %u (supported: 1, 2, 3)", g->version);
	ps.version = g->version;
	uint64_t at = qc_cur_pos(&ps.c);
	rc = read_count(&ps, &g->n_tensors, "tensor count", err);
	if (!rc)
		rc = read_count(&ps, &g->n_kv, "key/value count", err);
	if (rc)
		return rc;
	/* minimum bytes per record: KV = key len + type + 1-byte value; tensor = name len + n_dims +
	 * type + offset. Counts beyond what the file could hold are rejected before allocating. */
	uint64_t len_sz = ps.version == 1 ? 4 : 8, left = g->size - ps.c.off, need_kv, need_t, need;
	if (!qc_mul_ok(g->n_kv, len_sz + 5, &need_kv) || !qc_mul_ok(g->n_tensors, len_sz + 16, &need_t) ||
	    !qc_add_ok(need_kv, need_t, &need) || need > left)
		return qc_err_set(err, QC_EFORMAT, g->path, NULL, (int64_t)at,
				  "absurd counts: %llu tensors and %llu key/value pairs cannot fit in %llu bytes",
				  (unsigned long long)g->n_tensors, (unsigned long long)g->n_kv,
				  (unsigned long long)left);
	g->kv = g->n_kv ? qc_arena_calloc(g->arena, (size_t)g->n_kv, sizeof(*g->kv)) : NULL;
	g->tensors = g->n_tensors ? qc_arena_calloc(g->arena, (size_t)g->n_tensors, sizeof(*g->tensors)) : NULL;
	if ((g->n_kv && !g->kv) || (g->n_tensors && !g->tensors))
		return qc_err_set(err, QC_ENOMEM, g->path, NULL, -1, "out of memory");
	rc = parse_kv(&ps, g, err);
	if (!rc)
		rc = parse_alignment(g, err);
	for (uint64_t i = 0; !rc && i < g->n_tensors; i++)
		rc = parse_tensor_info(&ps, g, i, err);
	if (rc)
		return rc;
	if (!qc_align_ok(qc_cur_pos(&ps.c), g->alignment, &g->data_off))
		return qc_err_set(err, QC_EFORMAT, g->path, NULL, (int64_t)qc_cur_pos(&ps.c), "bad data offset");
	return check_tensors(g, err);
}

static int open_common(struct qc_gguf *g, struct qc_gguf **out, struct qc_err *err)
{
	int rc = parse(g, err);
	if (rc) {
		qc_gguf_close(g);
		*out = NULL;
		return rc;
	}
	*out = g;
	return QC_OK;
}

static struct qc_gguf *gguf_new(const char *name, struct qc_err *err)
{
	struct qc_gguf *g = calloc(1, sizeof(*g));
	if (g) {
		g->file.fd = -1;
		g->path = strdup(name ? name : "(memory)");
		g->arena = qc_arena_new();
	}
	if (!g || !g->path || !g->arena) {
		qc_gguf_close(g);
		qc_err_set(err, QC_ENOMEM, name, NULL, -1, "out of memory");
		return NULL;
	}
	return g;
}

int qc_gguf_open(const char *path, struct qc_gguf **out, struct qc_err *err)
{
	*out = NULL;
	struct qc_gguf *g = gguf_new(path, err);
	if (!g)
		return QC_ENOMEM;
	int rc = qc_map_open(path, &g->file, err);
	if (rc) {
		qc_gguf_close(g);
		return rc;
	}
	g->map = g->file.p;
	g->size = g->file.size;
	return open_common(g, out, err);
}

int qc_gguf_open_mem(const void *buf, uint64_t len, const char *name, struct qc_gguf **out,
		     struct qc_err *err)
{
	*out = NULL;
	struct qc_gguf *g = gguf_new(name, err);
	if (!g)
		return QC_ENOMEM;
	g->map = buf;
	g->size = len;
	return open_common(g, out, err);
}

void qc_gguf_close(struct qc_gguf *g)
{
	if (!g)
		return;
	qc_map_close(&g->file);
	qc_arena_free(g->arena);
	free(g->path);
	free(g);
}

/* ---- lookups ---------------------------------------------------------------- */

const struct qc_gguf_kv *qc_gguf_find(const struct qc_gguf *g, const char *key)
{
	for (uint64_t i = 0; i < g->n_kv; i++)
		if (strcmp(g->kv[i].key.p, key) == 0)
			return &g->kv[i];
	return NULL;
}

bool qc_gguf_value_as_i64(const struct qc_gguf_value *v, int64_t *out)
{
	switch (v->type) {
	case QC_GGUF_UINT8: case QC_GGUF_UINT16: case QC_GGUF_UINT32:
		*out = (int64_t)v->u;
		return true;
	case QC_GGUF_UINT64:
		if (v->u > (uint64_t)INT64_MAX)
			return false;
		*out = (int64_t)v->u;
		return true;
	case QC_GGUF_INT8: case QC_GGUF_INT16: case QC_GGUF_INT32: case QC_GGUF_INT64:
		*out = v->i;
		return true;
	case QC_GGUF_BOOL:
		*out = v->b;
		return true;
	default:
		return false;
	}
}

bool qc_gguf_value_as_f64(const struct qc_gguf_value *v, double *out)
{
	int64_t i;
	if (v->type == QC_GGUF_FLOAT32 || v->type == QC_GGUF_FLOAT64) {
		*out = v->f;
		return true;
	}
	if (v->type == QC_GGUF_UINT64) {
		*out = (double)v->u;
		return true;
	}
	if (!qc_gguf_value_as_i64(v, &i))
		return false;
	*out = (double)i;
	return true;
}

static bool arr_elem(const struct qc_gguf_value *arr, uint64_t i, struct qc_gguf_value *v)
{
	uint32_t sz = qc_gguf_vtype_size(arr->arr.elem);
	if (arr->type != QC_GGUF_ARRAY || !sz || i >= arr->arr.n)
		return false;
	struct parser ps = { .c = { .p = arr->arr.raw + i * sz, .len = sz } };
	return read_scalar(&ps, arr->arr.elem, v, NULL) == QC_OK;
}

bool qc_gguf_arr_i64(const struct qc_gguf_value *arr, uint64_t i, int64_t *out)
{
	struct qc_gguf_value v;
	return arr_elem(arr, i, &v) && qc_gguf_value_as_i64(&v, out);
}

bool qc_gguf_arr_f64(const struct qc_gguf_value *arr, uint64_t i, double *out)
{
	struct qc_gguf_value v;
	return arr_elem(arr, i, &v) && qc_gguf_value_as_f64(&v, out);
}

static int find_typed(const struct qc_gguf *g, const char *key, const struct qc_gguf_kv **kv,
		      struct qc_err *err)
{
	*kv = qc_gguf_find(g, key);
	if (!*kv)
		return qc_err_set(err, QC_ENOTFOUND, g->path, NULL, -1, "key '%s' not found", key);
	return QC_OK;
}

static int wrong_type(const struct qc_gguf *g, const struct qc_gguf_kv *kv, const char *want,
		      struct qc_err *err)
{
	return qc_err_set(err, QC_EFORMAT, g->path, NULL, (int64_t)kv->off, "key '%s' has type %s, expected %s",
			  kv->key.p, vtype_names[kv->val.type], want);
}

int qc_gguf_get_i64(const struct qc_gguf *g, const char *key, int64_t *v, struct qc_err *err)
{
	const struct qc_gguf_kv *kv;
	int rc = find_typed(g, key, &kv, err);
	if (rc)
		return rc;
	if (kv->val.type == QC_GGUF_BOOL || !qc_gguf_value_as_i64(&kv->val, v))
		return wrong_type(g, kv, "an integer", err);
	return QC_OK;
}

int qc_gguf_get_u64(const struct qc_gguf *g, const char *key, uint64_t *v, struct qc_err *err)
{
	const struct qc_gguf_kv *kv;
	int rc = find_typed(g, key, &kv, err);
	if (rc)
		return rc;
	if (kv->val.type == QC_GGUF_UINT64) {
		*v = kv->val.u;
		return QC_OK;
	}
	int64_t i;
	if (kv->val.type == QC_GGUF_BOOL || !qc_gguf_value_as_i64(&kv->val, &i) || i < 0)
		return wrong_type(g, kv, "a non-negative integer", err);
	*v = (uint64_t)i;
	return QC_OK;
}

int qc_gguf_get_f64(const struct qc_gguf *g, const char *key, double *v, struct qc_err *err)
{
	const struct qc_gguf_kv *kv;
	int rc = find_typed(g, key, &kv, err);
	if (rc)
		return rc;
	if (kv->val.type == QC_GGUF_BOOL || !qc_gguf_value_as_f64(&kv->val, v))
		return wrong_type(g, kv, "a number", err);
	return QC_OK;
}

int qc_gguf_get_bool(const struct qc_gguf *g, const char *key, bool *v, struct qc_err *err)
{
	const struct qc_gguf_kv *kv;
	int rc = find_typed(g, key, &kv, err);
	if (rc)
		return rc;
	if (kv->val.type != QC_GGUF_BOOL)
		return wrong_type(g, kv, "bool", err);
	*v = kv->val.b;
	return QC_OK;
}

int qc_gguf_get_str(const struct qc_gguf *g, const char *key, struct qc_gguf_str *v, struct qc_err *err)
{
	const struct qc_gguf_kv *kv;
	int rc = find_typed(g, key, &kv, err);
	if (rc)
		return rc;
	if (kv->val.type != QC_GGUF_STRING)
		return wrong_type(g, kv, "string", err);
	*v = kv->val.s;
	return QC_OK;
}

const struct qc_gguf_value *qc_gguf_get_arr(const struct qc_gguf *g, const char *key)
{
	const struct qc_gguf_kv *kv = qc_gguf_find(g, key);
	return kv && kv->val.type == QC_GGUF_ARRAY ? &kv->val : NULL;
}
