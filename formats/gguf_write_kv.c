/* gguf_write_kv.c — the GGUF writer's KV pairs: typed values encoded as they are added.
 *
 * KV pairs are encoded into one growing byte buffer the moment they are added (the
 * version fixes every field width up front), so a failed add just truncates it back
 * and leaves the writer as it was. Owns the scalar, string and (nested) array adders
 * and general.alignment's special rules (u32, power of two; it sets the alignment).
 * Bloat: no key lookup or removal (keys are written in the order added).
 * Layout matched: llama.cpp ggml/src/gguf.cpp gguf_write_to_buf (v1 u32 lengths,
 * u64 from v2 on).
 */
#include "gguf_write_int.h"

#include <stdlib.h>
#include <string.h>

#include "cursor.h"

static uint64_t vtype_size(enum qc_gguf_vtype t)
{
	switch (t) {
	case QC_GGUF_UINT8: case QC_GGUF_INT8: case QC_GGUF_BOOL: return 1;
	case QC_GGUF_UINT16: case QC_GGUF_INT16: return 2;
	case QC_GGUF_UINT32: case QC_GGUF_INT32: case QC_GGUF_FLOAT32: return 4;
	case QC_GGUF_UINT64: case QC_GGUF_INT64: case QC_GGUF_FLOAT64: return 8;
	case QC_GGUF_STRING: case QC_GGUF_ARRAY: case QC_GGUF_VTYPE_COUNT: break;
	}
	return 0;
}

static int bytes_reserve(struct bytes *b, size_t extra)
{
	size_t need;
	if (__builtin_add_overflow(b->len, extra, &need))
		return QC_ENOMEM;
	if (need <= b->cap)
		return QC_OK;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < need) {
		if (cap > SIZE_MAX / 2)
			return QC_ENOMEM;
		cap *= 2;
	}
	uint8_t *p = realloc(b->p, cap);
	if (!p)
		return QC_ENOMEM;
	b->p = p;
	b->cap = cap;
	return QC_OK;
}

static int bytes_put(struct bytes *b, const void *src, uint64_t n)
{
	if (n > SIZE_MAX || bytes_reserve(b, (size_t)n))
		return QC_ENOMEM;
	if (n)
		memcpy(b->p + b->len, src, (size_t)n);
	b->len += (size_t)n;
	return QC_OK;
}

static int bytes_u32(struct bytes *b, uint32_t v)
{
	return bytes_put(b, &v, 4);
}

/* A count, string length, array length or dim: u32 in v1, u64 from v2 on. */
static int put_len(const struct qc_gguf_writer *w, struct bytes *b, uint64_t v)
{
	if (w->version == 1) {
		if (v > UINT32_MAX)
			return QC_ERANGE;
		return bytes_u32(b, (uint32_t)v);
	}
	return bytes_put(b, &v, 8);
}

static int put_str(const struct qc_gguf_writer *w, struct bytes *b, const char *s, uint64_t n)
{
	int rc = put_len(w, b, n);
	return rc ? rc : bytes_put(b, s, n);
}

/* ---- KV pairs ----------------------------------------------------------------- */

/* Validate key and append "key, type"; *mark is where to truncate back on failure. */
static int kv_begin(struct qc_gguf_writer *w, const char *key, enum qc_gguf_vtype type,
		    size_t *mark, struct qc_err *err)
{
	if (!key || !key[0])
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "GGUF key must be a non-empty string");
	size_t n = strlen(key);
	if (n > UINT32_MAX)
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "GGUF key of %zu bytes is too long", n);
	if (qc_gguf_name_set_has(w, NAME_KEY, key, n))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "duplicate GGUF key '%s'", key);
	if (strcmp(key, ALIGNMENT_KEY) == 0 && type != QC_GGUF_UINT32)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "'%s' must be a u32 (llama.cpp reads it as one)", key);
	if (w->n_kv == w->keys_cap) {
		uint64_t cap = w->keys_cap ? w->keys_cap * 2 : 32;
		uint64_t *off = realloc(w->key_off, cap * sizeof *off);
		if (!off)
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory adding key '%s'", key);
		w->key_off = off;
		uint32_t *len = realloc(w->key_len, cap * sizeof *len);
		if (!len)
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory adding key '%s'", key);
		w->key_len = len;
		w->keys_cap = cap;
	}
	*mark = w->kv.len;
	int rc = put_str(w, &w->kv, key, n);
	if (!rc)
		rc = bytes_u32(&w->kv, (uint32_t)type);
	if (rc) {
		w->kv.len = *mark;
		return qc_err_set(err, rc, NULL, NULL, -1, "cannot add key '%s'", key);
	}
	w->key_off[w->n_kv] = *mark + len_width(w);
	w->key_len[w->n_kv] = (uint32_t)n;
	return QC_OK;
}

/* Message for an encoder failure that has none yet (no memory, or a v1 u32 overflow). */
static int enc_fail(const struct qc_gguf_writer *w, const char *key, int rc, struct qc_err *err)
{
	if (rc == QC_ERANGE)
		return qc_err_set(err, rc, NULL, NULL, -1, "key '%s': a length does not fit GGUF v%u",
				  key, w->version);
	return qc_err_set(err, rc, NULL, NULL, -1, "key '%s': %s", key, qc_status_name(rc));
}

/* Finish a record begun by kv_begin; rc is the value encoder's result (err already set). */
static int kv_end(struct qc_gguf_writer *w, const char *key, size_t mark, int rc, struct qc_err *err)
{
	if (!rc && qc_gguf_name_set_insert(w, NAME_KEY, w->n_kv, w->n_kv + 1))
		rc = enc_fail(w, key, QC_ENOMEM, err);
	if (rc) {
		w->kv.len = mark;
		return rc;
	}
	w->n_kv++;
	return QC_OK;
}

static int add_scalar(struct qc_gguf_writer *w, const char *key, enum qc_gguf_vtype type,
		      const void *v, struct qc_err *err)
{
	size_t mark;
	int rc = kv_begin(w, key, type, &mark, err);
	if (rc)
		return rc;
	rc = bytes_put(&w->kv, v, vtype_size(type));
	return kv_end(w, key, mark, rc ? enc_fail(w, key, rc, err) : QC_OK, err);
}

int qc_gguf_writer_add_u8(struct qc_gguf_writer *w, const char *key, uint8_t v, struct qc_err *err)
{
	return add_scalar(w, key, QC_GGUF_UINT8, &v, err);
}

int qc_gguf_writer_add_i8(struct qc_gguf_writer *w, const char *key, int8_t v, struct qc_err *err)
{
	return add_scalar(w, key, QC_GGUF_INT8, &v, err);
}

int qc_gguf_writer_add_u16(struct qc_gguf_writer *w, const char *key, uint16_t v, struct qc_err *err)
{
	return add_scalar(w, key, QC_GGUF_UINT16, &v, err);
}

int qc_gguf_writer_add_i16(struct qc_gguf_writer *w, const char *key, int16_t v, struct qc_err *err)
{
	return add_scalar(w, key, QC_GGUF_INT16, &v, err);
}

int qc_gguf_writer_add_u32(struct qc_gguf_writer *w, const char *key, uint32_t v, struct qc_err *err)
{
	bool is_align = key && strcmp(key, ALIGNMENT_KEY) == 0;
	if (is_align && (!is_pow2(v) || v > QC_GGUF_WRITER_MAX_ALIGNMENT))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "%s %u is not a power of two <= %u", ALIGNMENT_KEY, v,
				  QC_GGUF_WRITER_MAX_ALIGNMENT);
	int rc = add_scalar(w, key, QC_GGUF_UINT32, &v, err);
	if (!rc && is_align) {
		w->alignment = v;
		w->have_alignment_key = true;
	}
	return rc;
}

int qc_gguf_writer_add_i32(struct qc_gguf_writer *w, const char *key, int32_t v, struct qc_err *err)
{
	return add_scalar(w, key, QC_GGUF_INT32, &v, err);
}

int qc_gguf_writer_add_u64(struct qc_gguf_writer *w, const char *key, uint64_t v, struct qc_err *err)
{
	return add_scalar(w, key, QC_GGUF_UINT64, &v, err);
}

int qc_gguf_writer_add_i64(struct qc_gguf_writer *w, const char *key, int64_t v, struct qc_err *err)
{
	return add_scalar(w, key, QC_GGUF_INT64, &v, err);
}

int qc_gguf_writer_add_f32(struct qc_gguf_writer *w, const char *key, float v, struct qc_err *err)
{
	return add_scalar(w, key, QC_GGUF_FLOAT32, &v, err);
}

int qc_gguf_writer_add_f64(struct qc_gguf_writer *w, const char *key, double v, struct qc_err *err)
{
	return add_scalar(w, key, QC_GGUF_FLOAT64, &v, err);
}

int qc_gguf_writer_add_bool(struct qc_gguf_writer *w, const char *key, bool v, struct qc_err *err)
{
	uint8_t b = v ? 1 : 0;
	return add_scalar(w, key, QC_GGUF_BOOL, &b, err);
}

int qc_gguf_writer_add_strn(struct qc_gguf_writer *w, const char *key, const char *s, uint64_t len,
			    struct qc_err *err)
{
	if (!s && len)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "NULL string for key '%s'",
				  key ? key : "(null)");
	size_t mark;
	int rc = kv_begin(w, key, QC_GGUF_STRING, &mark, err);
	if (rc)
		return rc;
	rc = put_str(w, &w->kv, s, len);
	return kv_end(w, key, mark, rc ? enc_fail(w, key, rc, err) : QC_OK, err);
}

int qc_gguf_writer_add_str(struct qc_gguf_writer *w, const char *key, const char *s, struct qc_err *err)
{
	if (!s)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "NULL string for key '%s'",
				  key ? key : "(null)");
	return qc_gguf_writer_add_strn(w, key, s, strlen(s), err);
}

/* Encode one array value (elem type, length, elements), recursing for nested arrays.
 * Fills err on every failure; key is for messages. */
static int put_arr(const struct qc_gguf_writer *w, struct bytes *b, const char *key,
		   const struct qc_gguf_warr *a, int depth, struct qc_err *err)
{
	if (depth > QC_GGUF_WRITER_MAX_DEPTH)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "key '%s': arrays nested deeper than %d",
				  key, QC_GGUF_WRITER_MAX_DEPTH);
	if ((unsigned)a->elem >= QC_GGUF_VTYPE_COUNT)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "key '%s': invalid array element type %d",
				  key, (int)a->elem);
	if (a->n && !a->data)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "key '%s': array of %llu elements with NULL data", key,
				  (unsigned long long)a->n);
	int rc = bytes_u32(b, (uint32_t)a->elem);
	if (!rc)
		rc = put_len(w, b, a->n);
	if (!rc && a->elem == QC_GGUF_STRING) {
		const char *const *str = a->data;
		for (uint64_t i = 0; i < a->n && !rc; i++) {
			if (!str[i])
				return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
						  "key '%s': string %llu of the array is NULL", key,
						  (unsigned long long)i);
			rc = put_str(w, b, str[i], strlen(str[i]));
		}
	} else if (!rc && a->elem == QC_GGUF_ARRAY) {
		const struct qc_gguf_warr *sub = a->data;
		for (uint64_t i = 0; i < a->n; i++) {
			int sub_rc = put_arr(w, b, key, &sub[i], depth + 1, err);
			if (sub_rc)
				return sub_rc;
		}
	} else if (!rc) {
		uint64_t n_bytes;
		rc = qc_mul_ok(a->n, vtype_size(a->elem), &n_bytes) ? bytes_put(b, a->data, n_bytes)
								    : QC_ERANGE;
	}
	return rc ? enc_fail(w, key, rc, err) : QC_OK;
}

int qc_gguf_writer_add_arr_nested(struct qc_gguf_writer *w, const char *key,
				  const struct qc_gguf_warr *arr, struct qc_err *err)
{
	if (!arr)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "NULL array for key '%s'",
				  key ? key : "(null)");
	size_t mark;
	int rc = kv_begin(w, key, QC_GGUF_ARRAY, &mark, err);
	if (rc)
		return rc;
	return kv_end(w, key, mark, put_arr(w, &w->kv, key, arr, 1, err), err);
}

int qc_gguf_writer_add_arr(struct qc_gguf_writer *w, const char *key, enum qc_gguf_vtype elem,
			   const void *data, uint64_t n, struct qc_err *err)
{
	if (!vtype_size(elem))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "key '%s': qc_gguf_writer_add_arr takes numeric or bool elements, not type %d",
				  key ? key : "(null)", (int)elem);
	struct qc_gguf_warr a = { .elem = elem, .n = n, .data = data };
	return qc_gguf_writer_add_arr_nested(w, key, &a, err);
}

int qc_gguf_writer_add_arr_str(struct qc_gguf_writer *w, const char *key, const char *const *strs,
			       uint64_t n, struct qc_err *err)
{
	struct qc_gguf_warr a = { .elem = QC_GGUF_STRING, .n = n, .data = strs };
	return qc_gguf_writer_add_arr_nested(w, key, &a, err);
}
