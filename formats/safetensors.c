/* safetensors.c — safetensors parser over a mapping (layout and checks: safetensors.h).
 *
 * The header is bounded before cJSON sees it: its length is capped by QC_ST_MAX_HEADER
 * and by the bytes in the file, and a pre-scan caps bracket nesting at QC_ST_MAX_DEPTH so
 * cJSON's own recursion (limit 1000) is never approached. Tables are sized from the
 * members cJSON actually parsed, never from a number in the file.
 */
#include "safetensors.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "arena.h"
#include "cursor.h"

static const struct {
	const char *name;
	uint32_t size;
} dtypes[QC_ST_DTYPE_COUNT] = {
	[QC_ST_BOOL] = {"BOOL", 1},       [QC_ST_U8] = {"U8", 1},
	[QC_ST_I8] = {"I8", 1},           [QC_ST_F8_E5M2] = {"F8_E5M2", 1},
	[QC_ST_F8_E4M3] = {"F8_E4M3", 1}, [QC_ST_F8_E8M0] = {"F8_E8M0", 1},
	[QC_ST_I16] = {"I16", 2},         [QC_ST_U16] = {"U16", 2},
	[QC_ST_F16] = {"F16", 2},         [QC_ST_BF16] = {"BF16", 2},
	[QC_ST_I32] = {"I32", 4},         [QC_ST_U32] = {"U32", 4},
	[QC_ST_F32] = {"F32", 4},         [QC_ST_F64] = {"F64", 8},
	[QC_ST_I64] = {"I64", 8},         [QC_ST_U64] = {"U64", 8},
};

const char *qc_st_dtype_name(enum qc_st_dtype d)
{
	return (unsigned)d < QC_ST_DTYPE_COUNT ? dtypes[d].name : "invalid";
}

uint32_t qc_st_dtype_size(enum qc_st_dtype d)
{
	return (unsigned)d < QC_ST_DTYPE_COUNT ? dtypes[d].size : 0;
}

bool qc_st_dtype_parse(const char *s, enum qc_st_dtype *d)
{
	for (int i = 0; i < QC_ST_DTYPE_COUNT; i++) {
		if (strcmp(s, dtypes[i].name) == 0) {
			*d = (enum qc_st_dtype)i;
			return true;
		}
	}
	return false;
}

/* Where the header keys are, for messages. cJSON keeps members in document order, so
 * each key is searched from just past the previous one (linear overall); once a key is
 * not found verbatim (an escaped name) the rest report offset 8 rather than rescan. */
struct key_scan {
	uint64_t pos;               /* header position to search from */
	bool lost;
};

static uint64_t key_off(const struct qc_st *st, struct key_scan *ks, const char *name)
{
	size_t n = strlen(name);
	const char *h = (const char *)st->map + 8;
	uint64_t len = st->header_len;
	while (!ks->lost && ks->pos < len) {
		const char *q = memchr(h + ks->pos, '"', (size_t)(len - ks->pos));
		if (!q)
			break;
		uint64_t i = (uint64_t)(q - h);
		if (len - i >= n + 2 && memcmp(q + 1, name, n) == 0 && q[1 + n] == '"') {
			ks->pos = i + n + 2;
			return 8 + i;
		}
		ks->pos = i + 1;
	}
	ks->lost = true;
	return 8;
}

/* Reject nesting deeper than QC_ST_MAX_DEPTH before cJSON recurses into it. */
static int check_depth(const struct qc_st *st, struct qc_err *err)
{
	const uint8_t *h = st->map + 8;
	int depth = 0;
	bool in_str = false;
	for (uint64_t i = 0; i < st->header_len; i++) {
		uint8_t ch = h[i];
		if (in_str) {
			if (ch == '\\')
				i++;
			else if (ch == '"')
				in_str = false;
		} else if (ch == '"') {
			in_str = true;
		} else if (ch == '{' || ch == '[') {
			if (++depth > QC_ST_MAX_DEPTH)
				return qc_err_set(err, QC_EFORMAT, st->path, NULL, (int64_t)(8 + i),
						  "header JSON nested deeper than %d levels", QC_ST_MAX_DEPTH);
		} else if (ch == '}' || ch == ']') {
			depth--;
		}
	}
	return QC_OK;
}

/* An exact non-negative integer below 2^53 (cJSON keeps numbers as doubles). */
static bool json_uint(const cJSON *j, uint64_t *v)
{
	if (!cJSON_IsNumber(j))
		return false;
	double d = j->valuedouble;
	if (!(d >= 0.0) || d >= QC_ST_MAX_INT || floor(d) != d)
		return false;
	*v = (uint64_t)d;
	return true;
}

static int parse_meta(struct qc_st *st, const cJSON *m, uint64_t off, struct qc_err *err)
{
	if (!cJSON_IsObject(m))
		return qc_err_set(err, QC_EFORMAT, st->path, NULL, (int64_t)off,
				  "\"__metadata__\" is not an object");
	uint64_t n = 0;
	for (const cJSON *c = m->child; c; c = c->next)
		n++;
	st->meta = qc_arena_calloc(st->arena, n ? n : 1, sizeof(*st->meta));
	if (!st->meta)
		return qc_err_set(err, QC_ENOMEM, st->path, NULL, -1, "out of memory");
	for (const cJSON *c = m->child; c; c = c->next) {
		if (!cJSON_IsString(c))
			return qc_err_set(err, QC_EFORMAT, st->path, NULL, (int64_t)off,
					  "\"__metadata__\" value of '%s' is not a string", c->string);
		struct qc_st_meta *e = &st->meta[st->n_meta++];
		e->key = qc_arena_strndup(st->arena, c->string, strlen(c->string));
		e->value = qc_arena_strndup(st->arena, c->valuestring, strlen(c->valuestring));
		if (!e->key || !e->value)
			return qc_err_set(err, QC_ENOMEM, st->path, NULL, -1, "out of memory");
	}
	return QC_OK;
}

static int parse_tensor(struct qc_st *st, const cJSON *j, uint64_t at, struct qc_st_tensor *t,
			struct qc_err *err)
{
	const char *name = j->string;
	t->hdr_off = at;
	if (!name[0])
		return qc_err_set(err, QC_EFORMAT, st->path, NULL, (int64_t)at, "empty tensor name");
	t->name = qc_arena_strndup(st->arena, name, strlen(name));
	if (!t->name)
		return qc_err_set(err, QC_ENOMEM, st->path, name, -1, "out of memory");
	if (!cJSON_IsObject(j))
		return qc_err_set(err, QC_EFORMAT, st->path, name, (int64_t)at, "entry is not an object");
	const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
	const cJSON *sh = cJSON_GetObjectItemCaseSensitive(j, "shape");
	const cJSON *of = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
	if (!cJSON_IsString(dt))
		return qc_err_set(err, QC_EFORMAT, st->path, name, (int64_t)at, "\"dtype\" missing or not a string");
	if (!qc_st_dtype_parse(dt->valuestring, &t->dtype))
		return qc_err_set(err, QC_EUNSUPPORTED, st->path, name, (int64_t)at,
				  "unknown dtype \"%.32s\"", dt->valuestring);
	if (!cJSON_IsArray(sh))
		return qc_err_set(err, QC_EFORMAT, st->path, name, (int64_t)at, "\"shape\" missing or not an array");
	uint64_t n_elems = 1;
	for (const cJSON *d = sh->child; d; d = d->next) {
		uint64_t v;
		if (t->n_dims == QC_ST_MAX_DIMS)
			return qc_err_set(err, QC_EUNSUPPORTED, st->path, name, (int64_t)at,
					  "more than %d dimensions", QC_ST_MAX_DIMS);
		if (!json_uint(d, &v))
			return qc_err_set(err, QC_EFORMAT, st->path, name, (int64_t)at,
					  "shape[%u] is not a non-negative integer below 2^53", t->n_dims);
		if (!qc_mul_ok(n_elems, v, &n_elems))
			return qc_err_set(err, QC_ERANGE, st->path, name, (int64_t)at,
					  "element count overflows 64 bits");
		t->shape[t->n_dims++] = v;
	}
	uint64_t n_bytes;
	if (!qc_mul_ok(n_elems, qc_st_dtype_size(t->dtype), &n_bytes))
		return qc_err_set(err, QC_ERANGE, st->path, name, (int64_t)at, "byte size overflows 64 bits");
	uint64_t begin, end;
	if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || !json_uint(of->child, &begin) ||
	    !json_uint(of->child->next, &end))
		return qc_err_set(err, QC_EFORMAT, st->path, name, (int64_t)at,
				  "\"data_offsets\" is not [begin, end] with non-negative integers below 2^53");
	uint64_t data_size = st->size - st->data_off;
	if (begin > end)
		return qc_err_set(err, QC_EFORMAT, st->path, name, (int64_t)at,
				  "data_offsets begin %llu > end %llu", (unsigned long long)begin,
				  (unsigned long long)end);
	if (end > data_size)
		return qc_err_set(err, QC_ERANGE, st->path, name, (int64_t)(st->data_off + (begin < data_size ? begin : data_size)),
				  "data [%llu, %llu) runs past the %llu-byte data section",
				  (unsigned long long)begin, (unsigned long long)end, (unsigned long long)data_size);
	if (end - begin != n_bytes)
		return qc_err_set(err, QC_EFORMAT, st->path, name, (int64_t)(st->data_off + begin),
				  "shape × %s size is %llu bytes, data_offsets span %llu", qc_st_dtype_name(t->dtype),
				  (unsigned long long)n_bytes, (unsigned long long)(end - begin));
	t->n_elems = n_elems;
	t->n_bytes = n_bytes;
	t->begin = begin;
	t->data_off = st->data_off + begin;
	return QC_OK;
}

static int cmp_off(const void *a, const void *b)
{
	const struct qc_st_tensor *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return (x->n_bytes > y->n_bytes) - (x->n_bytes < y->n_bytes);
}

static int cmp_name(const void *a, const void *b)
{
	const struct qc_st_tensor *const *x = a, *const *y = b;
	return strcmp((*x)->name, (*y)->name);
}

static int check_tables(struct qc_st *st, struct qc_err *err)
{
	qsort(st->tensors, st->n_tensors, sizeof(*st->tensors), cmp_off);
	const struct qc_st_tensor *prev = NULL;
	for (uint64_t i = 0; i < st->n_tensors; i++) {
		const struct qc_st_tensor *t = &st->tensors[i];
		if (!t->n_bytes)
			continue;
		if (prev && t->begin < prev->begin + prev->n_bytes)
			return qc_err_set(err, QC_EFORMAT, st->path, t->name, (int64_t)t->data_off,
					  "data [%llu, %llu) overlaps tensor '%s' [%llu, %llu)",
					  (unsigned long long)t->begin, (unsigned long long)(t->begin + t->n_bytes),
					  prev->name, (unsigned long long)prev->begin,
					  (unsigned long long)(prev->begin + prev->n_bytes));
		prev = t;
	}
	st->by_name = qc_arena_calloc(st->arena, st->n_tensors ? st->n_tensors : 1, sizeof(*st->by_name));
	if (!st->by_name)
		return qc_err_set(err, QC_ENOMEM, st->path, NULL, -1, "out of memory");
	for (uint64_t i = 0; i < st->n_tensors; i++)
		st->by_name[i] = &st->tensors[i];
	qsort(st->by_name, st->n_tensors, sizeof(*st->by_name), cmp_name);
	for (uint64_t i = 1; i < st->n_tensors; i++) {
		const struct qc_st_tensor *a = st->by_name[i - 1], *b = st->by_name[i];
		if (strcmp(a->name, b->name) == 0) /* report the later key (qsort is not stable) */
			return qc_err_set(err, QC_EFORMAT, st->path, b->name,
					  (int64_t)(a->hdr_off > b->hdr_off ? a->hdr_off : b->hdr_off),
					  "duplicate tensor name in header (JSON key repeated)");
	}
	return QC_OK;
}

static int parse(struct qc_st *st, struct qc_err *err)
{
	struct qc_cursor c = {.p = st->map, .len = st->size, .path = st->path};
	uint64_t n;
	int rc = qc_cur_u64(&c, &n, "header length", err);
	if (rc)
		return rc;
	if (n > QC_ST_MAX_HEADER || n > st->size - 8)
		return qc_err_set(err, n > QC_ST_MAX_HEADER ? QC_ERANGE : QC_EFORMAT, st->path, NULL, 0,
				  "header length %llu exceeds %s (%llu bytes)", (unsigned long long)n,
				  n > QC_ST_MAX_HEADER ? "the header cap" : "the bytes left in the file",
				  n > QC_ST_MAX_HEADER ? QC_ST_MAX_HEADER : (unsigned long long)(st->size - 8));
	st->header_len = n;
	st->data_off = 8 + n;
	if (n == 0 || st->map[8] != '{')
		return qc_err_set(err, QC_EFORMAT, st->path, NULL, 8, "header is not a JSON object");
	rc = check_depth(st, err);
	if (rc)
		return rc;
	const char *h = (const char *)st->map + 8, *end = NULL;
	cJSON *root = cJSON_ParseWithLengthOpts(h, (size_t)n, &end, 0);
	if (!root) {
		uint64_t pos = end && end >= h && end <= h + n ? (uint64_t)(end - h) : 0;
		return qc_err_set(err, QC_EFORMAT, st->path, NULL, (int64_t)(8 + pos), "header is not valid JSON");
	}
	for (const char *p = end; p && p < h + n; p++) {
		if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
			rc = qc_err_set(err, QC_EFORMAT, st->path, NULL, (int64_t)(8 + (uint64_t)(p - h)),
					"bytes after the header JSON object");
			goto out_free_json;
		}
	}
	if (!cJSON_IsObject(root)) {
		rc = qc_err_set(err, QC_EFORMAT, st->path, NULL, 8, "header is not a JSON object");
		goto out_free_json;
	}
	uint64_t count = 0;
	for (const cJSON *j = root->child; j; j = j->next)
		count++;
	st->tensors = qc_arena_calloc(st->arena, count ? count : 1, sizeof(*st->tensors));
	if (!st->tensors) {
		rc = qc_err_set(err, QC_ENOMEM, st->path, NULL, -1, "out of memory");
		goto out_free_json;
	}
	bool seen_meta = false;
	struct key_scan ks = {.pos = 1};
	for (const cJSON *j = root->child; j; j = j->next) {
		uint64_t at = key_off(st, &ks, j->string);
		if (strcmp(j->string, "__metadata__") == 0) {
			if (seen_meta) {
				rc = qc_err_set(err, QC_EFORMAT, st->path, NULL, (int64_t)at,
						"duplicate \"__metadata__\"");
				goto out_free_json;
			}
			seen_meta = true;
			rc = parse_meta(st, j, at, err);
		} else {
			rc = parse_tensor(st, j, at, &st->tensors[st->n_tensors++], err);
		}
		if (rc)
			goto out_free_json;
	}
	rc = check_tables(st, err);
out_free_json:
	cJSON_Delete(root);
	return rc;
}

static struct qc_st *st_new(const char *name, struct qc_err *err)
{
	struct qc_st *st = calloc(1, sizeof(*st));
	if (st) {
		st->file.fd = -1;
		st->path = strdup(name ? name : "(memory)");
		st->arena = qc_arena_new();
	}
	if (!st || !st->path || !st->arena) {
		qc_st_close(st);
		qc_err_set(err, QC_ENOMEM, name, NULL, -1, "out of memory");
		return NULL;
	}
	return st;
}

static int open_common(struct qc_st *st, struct qc_st **out, struct qc_err *err)
{
	int rc = parse(st, err);
	if (rc) {
		qc_st_close(st);
		return rc;
	}
	*out = st;
	return QC_OK;
}

int qc_st_open(const char *path, struct qc_st **out, struct qc_err *err)
{
	*out = NULL;
	struct qc_st *st = st_new(path, err);
	if (!st)
		return QC_ENOMEM;
	int rc = qc_map_open(path, &st->file, err);
	if (rc) {
		qc_st_close(st);
		return rc;
	}
	st->map = st->file.p;
	st->size = st->file.size;
	return open_common(st, out, err);
}

int qc_st_open_mem(const void *buf, uint64_t len, const char *name, struct qc_st **out,
		   struct qc_err *err)
{
	*out = NULL;
	struct qc_st *st = st_new(name, err);
	if (!st)
		return QC_ENOMEM;
	st->map = buf;
	st->size = len;
	return open_common(st, out, err);
}

void qc_st_close(struct qc_st *st)
{
	if (!st)
		return;
	qc_map_close(&st->file);
	qc_arena_free(st->arena);
	free(st->path);
	free(st);
}

const struct qc_st_tensor *qc_st_find(const struct qc_st *st, const char *name)
{
	uint64_t lo = 0, hi = st->n_tensors;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		int c = strcmp(st->by_name[mid]->name, name);
		if (c == 0)
			return st->by_name[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const uint8_t *qc_st_data(const struct qc_st *st, const struct qc_st_tensor *t)
{
	return st->map + t->data_off;
}

const char *qc_st_meta_get(const struct qc_st *st, const char *key)
{
	for (uint64_t i = 0; i < st->n_meta; i++)
		if (strcmp(st->meta[i].key, key) == 0)
			return st->meta[i].value;
	return NULL;
}
