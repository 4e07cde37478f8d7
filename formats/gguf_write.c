/* gguf_write.c — GGUF writer: KV pairs serialized as added, tensor data streamed.
 *
 * KV pairs are encoded into one growing byte buffer the moment they are added (the
 * version fixes every field width up front), so a failed add just truncates it back.
 * Tensor infos and offsets are laid out at write time. Tensor bytes flow from the
 * caller's pointer or fill callback into one of two STAGE_BYTES buffers while a
 * background thread write(2)s the other (write_file), or straight into the output
 * buffer (write_mem): memory stays bounded and fill cost overlaps disk time.
 * Bloat: no mmap output, no O_DIRECT, no in-place editing.
 * Layout matched: llama.cpp ggml/src/gguf.cpp gguf_write_to_buf (padding after every
 * tensor, data section aligned, n_dims as given).
 */
#include "gguf_write.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cursor.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "GGUF writer assumes a little-endian host");

#define STAGE_BYTES (8u << 20)      /* each of write_file's two staging buffers */
#define TMP_TRIES 64                /* attempts at an unused "<path>.tmp.XXXXXX" name */
#define ALIGNMENT_KEY "general.alignment"

struct bytes {
	uint8_t *p;
	size_t len, cap;
};

struct wtensor {
	char name[QC_GGUF_MAX_NAME];    /* NUL-terminated */
	uint32_t n_dims;
	int64_t ne[QC_GGUF_MAX_DIMS];   /* elements per dim, ne[0] contiguous; unused = 1 */
	enum qc_type type;
	uint64_t n_bytes;
	const void *data;               /* borrowed; NULL when fill is set */
	qc_gguf_fill_fn fill;
	void *fill_ctx;                 /* borrowed */
};

/* Open-addressing set of indexes (slot = index + 1, 0 = empty) over names stored
 * elsewhere; power-of-two capacity, at most half full. */
struct name_set {
	uint64_t *slot;
	uint64_t cap;
};

enum name_kind { NAME_KEY, NAME_TENSOR };

struct qc_gguf_writer {
	uint32_t version;
	uint32_t alignment;
	unsigned flags;
	struct bytes kv;                /* n_kv encoded { key, type, value } records */
	uint64_t n_kv;
	uint64_t *key_off;              /* (n_kv) offset of each key's bytes in kv.p */
	uint32_t *key_len;              /* (n_kv) key length in bytes */
	uint64_t keys_cap;
	struct name_set key_set;
	bool have_alignment_key;
	struct wtensor *tensors;        /* (n_tensors) in insertion order */
	uint64_t n_tensors, tensors_cap;
	struct name_set tensor_set;
};

/* ---- small helpers ---------------------------------------------------------- */

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

static bool is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

static uint64_t fnv1a(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
	return h;
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

static uint64_t len_width(const struct qc_gguf_writer *w)
{
	return w->version == 1 ? 4 : 8;
}

/* ---- name sets --------------------------------------------------------------- */

static const char *name_at(const struct qc_gguf_writer *w, enum name_kind k, uint64_t idx,
			   size_t *len)
{
	if (k == NAME_KEY) {
		*len = w->key_len[idx];
		return (const char *)w->kv.p + w->key_off[idx];
	}
	*len = strlen(w->tensors[idx].name);
	return w->tensors[idx].name;
}

static const struct name_set *set_of(const struct qc_gguf_writer *w, enum name_kind k)
{
	return k == NAME_KEY ? &w->key_set : &w->tensor_set;
}

static bool set_has(const struct qc_gguf_writer *w, enum name_kind k, const char *s, size_t n)
{
	const struct name_set *set = set_of(w, k);
	if (!set->cap)
		return false;
	for (uint64_t i = fnv1a(s, n) & (set->cap - 1);; i = (i + 1) & (set->cap - 1)) {
		uint64_t v = set->slot[i];
		if (!v)
			return false;
		size_t len;
		const char *p = name_at(w, k, v - 1, &len);
		if (len == n && memcmp(p, s, n) == 0)
			return true;
	}
}

static void set_place(const struct qc_gguf_writer *w, enum name_kind k, uint64_t *slot, uint64_t cap,
		      uint64_t idx)
{
	size_t len;
	const char *p = name_at(w, k, idx, &len);
	uint64_t i = fnv1a(p, len) & (cap - 1);
	while (slot[i])
		i = (i + 1) & (cap - 1);
	slot[i] = idx + 1;
}

/* Record name number idx (0..n-1, already stored); n is the new element count. */
static int set_insert(struct qc_gguf_writer *w, enum name_kind k, uint64_t idx, uint64_t n)
{
	struct name_set *set = k == NAME_KEY ? &w->key_set : &w->tensor_set;
	if (2 * n > set->cap) {
		uint64_t cap = set->cap ? set->cap * 2 : 64;
		uint64_t *slot = calloc(cap, sizeof *slot);
		if (!slot)
			return QC_ENOMEM;
		for (uint64_t i = 0; i < idx; i++)
			set_place(w, k, slot, cap, i);
		free(set->slot);
		set->slot = slot;
		set->cap = cap;
	}
	set_place(w, k, set->slot, set->cap, idx);
	return QC_OK;
}

/* ---- lifetime ----------------------------------------------------------------- */

struct qc_gguf_writer *qc_gguf_writer_new(uint32_t version, uint32_t alignment)
{
	if (version < 1 || version > 3)
		return NULL;
	if (alignment == 0)
		alignment = QC_GGUF_DEFAULT_ALIGNMENT;
	if (!is_pow2(alignment) || alignment > QC_GGUF_WRITER_MAX_ALIGNMENT)
		return NULL;
	struct qc_gguf_writer *w = calloc(1, sizeof *w);
	if (!w)
		return NULL;
	w->version = version;
	w->alignment = QC_GGUF_DEFAULT_ALIGNMENT;
	if (alignment != QC_GGUF_DEFAULT_ALIGNMENT &&
	    qc_gguf_writer_add_u32(w, ALIGNMENT_KEY, alignment, NULL)) {
		qc_gguf_writer_free(w);
		return NULL;
	}
	return w;
}

void qc_gguf_writer_free(struct qc_gguf_writer *w)
{
	if (!w)
		return;
	free(w->kv.p);
	free(w->key_off);
	free(w->key_len);
	free(w->key_set.slot);
	free(w->tensors);
	free(w->tensor_set.slot);
	free(w);
}

void qc_gguf_writer_set_flags(struct qc_gguf_writer *w, unsigned flags)
{
	w->flags = flags;
}

uint64_t qc_gguf_writer_n_kv(const struct qc_gguf_writer *w)
{
	return w->n_kv;
}

uint64_t qc_gguf_writer_n_tensors(const struct qc_gguf_writer *w)
{
	return w->n_tensors;
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
	if (set_has(w, NAME_KEY, key, n))
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
	if (!rc && set_insert(w, NAME_KEY, w->n_kv, w->n_kv + 1))
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

/* ---- tensors ------------------------------------------------------------------- */

/* Validate name, type and shape into t and compute its byte size; adds nothing. */
static int size_tensor(const struct qc_gguf_writer *w, const char *name, enum qc_type type,
		       uint32_t n_dims, const int64_t *ne, struct wtensor *t, struct qc_err *err)
{
	size_t n = name ? strlen(name) : 0;
	if (!n || n >= QC_GGUF_MAX_NAME)
		return qc_err_set(err, QC_EINVAL, NULL, name, -1,
				  "tensor name must be 1..%d bytes, got %zu", QC_GGUF_MAX_NAME - 1, n);
	if (set_has(w, NAME_TENSOR, name, n))
		return qc_err_set(err, QC_EINVAL, NULL, name, -1, "duplicate tensor name");
	if (!qc_type_valid((uint32_t)type))
		return qc_err_set(err, QC_EINVAL, NULL, name, -1, "invalid tensor type id %d", (int)type);
	if (n_dims > QC_GGUF_MAX_DIMS || (n_dims && !ne))
		return qc_err_set(err, QC_EINVAL, NULL, name, -1, "invalid n_dims %u", n_dims);
	memcpy(t->name, name, n + 1);
	t->type = type;
	t->n_dims = n_dims;
	uint64_t n_elems = 1;
	for (uint32_t i = 0; i < QC_GGUF_MAX_DIMS; i++) {
		t->ne[i] = i < n_dims ? ne[i] : 1;
		if (t->ne[i] < 0)
			return qc_err_set(err, QC_EINVAL, NULL, name, -1, "ne[%u] = %lld is negative", i,
					  (long long)t->ne[i]);
		if (w->version == 1 && (uint64_t)t->ne[i] > UINT32_MAX)
			return qc_err_set(err, QC_ERANGE, NULL, name, -1,
					  "ne[%u] = %lld does not fit GGUF v1's u32 dims", i, (long long)t->ne[i]);
		if (!qc_mul_ok(n_elems, (uint64_t)t->ne[i], &n_elems) || n_elems >= (uint64_t)INT64_MAX)
			return qc_err_set(err, QC_ERANGE, NULL, name, -1, "element count overflows int64");
	}
	const struct qc_type_traits *tt = qc_type_get(type);
	uint64_t row_bytes;
	int rc = qc_type_row_bytes(type, (uint64_t)t->ne[0], &row_bytes);
	if (rc == QC_EFORMAT)
		return qc_err_set(err, QC_EINVAL, NULL, name, -1,
				  "row length %lld not a multiple of block size %lld (%s)",
				  (long long)t->ne[0], (long long)tt->block_elems, tt->name);
	uint64_t n_rows = t->ne[0] ? n_elems / (uint64_t)t->ne[0] : 0;
	if (rc || !qc_mul_ok(row_bytes, n_rows, &t->n_bytes))
		return qc_err_set(err, QC_ERANGE, NULL, name, -1, "tensor byte size overflows");
	return QC_OK;
}

static int push_tensor(struct qc_gguf_writer *w, const struct wtensor *t, struct qc_err *err)
{
	if (w->n_tensors == w->tensors_cap) {
		uint64_t cap = w->tensors_cap ? w->tensors_cap * 2 : 64;
		struct wtensor *p = realloc(w->tensors, cap * sizeof *p);
		if (!p)
			return qc_err_set(err, QC_ENOMEM, NULL, t->name, -1, "out of memory adding tensor");
		w->tensors = p;
		w->tensors_cap = cap;
	}
	w->tensors[w->n_tensors] = *t;
	if (set_insert(w, NAME_TENSOR, w->n_tensors, w->n_tensors + 1))
		return qc_err_set(err, QC_ENOMEM, NULL, t->name, -1, "out of memory adding tensor");
	w->n_tensors++;
	return QC_OK;
}

int qc_gguf_writer_add_tensor(struct qc_gguf_writer *w, const char *name, enum qc_type type,
			      uint32_t n_dims, const int64_t *ne, const void *data, struct qc_err *err)
{
	struct wtensor t = { .data = data };
	int rc = size_tensor(w, name, type, n_dims, ne, &t, err);
	if (rc)
		return rc;
	if (!data && t.n_bytes)
		return qc_err_set(err, QC_EINVAL, NULL, name, -1, "NULL data for a tensor of %llu bytes",
				  (unsigned long long)t.n_bytes);
	return push_tensor(w, &t, err);
}

int qc_gguf_writer_add_tensor_fill(struct qc_gguf_writer *w, const char *name, enum qc_type type,
				   uint32_t n_dims, const int64_t *ne, qc_gguf_fill_fn fill, void *ctx,
				   struct qc_err *err)
{
	if (!fill)
		return qc_err_set(err, QC_EINVAL, NULL, name, -1, "NULL fill callback");
	struct wtensor t = { .fill = fill, .fill_ctx = ctx };
	int rc = size_tensor(w, name, type, n_dims, ne, &t, err);
	return rc ? rc : push_tensor(w, &t, err);
}

/* ---- layout --------------------------------------------------------------------- */

struct layout {
	uint64_t info_bytes;    /* magic .. end of tensor infos */
	uint64_t data_off;      /* start of the data section */
	uint64_t total;         /* file size */
};

static int compute_layout(const struct qc_gguf_writer *w, struct layout *lo, struct qc_err *err)
{
	uint64_t lw = len_width(w);
	uint64_t off = 8 + 2 * lw + w->kv.len;
	if (w->version == 1 && (w->n_kv > UINT32_MAX || w->n_tensors > UINT32_MAX))
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "too many keys or tensors for GGUF v1");
	for (uint64_t i = 0; i < w->n_tensors; i++) {
		const struct wtensor *t = &w->tensors[i];
		/* name, n_dims, dims, type, offset */
		off += lw + strlen(t->name) + 4 + t->n_dims * lw + 4 + 8;
	}
	lo->info_bytes = off;
	if (!qc_align_ok(off, w->alignment, &lo->data_off))
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "header size overflows");
	uint64_t end = lo->data_off;
	for (uint64_t i = 0; i < w->n_tensors; i++) {
		uint64_t padded;
		if (!qc_align_ok(w->tensors[i].n_bytes, w->alignment, &padded) || !qc_add_ok(end, padded, &end))
			return qc_err_set(err, QC_ERANGE, NULL, w->tensors[i].name, -1,
					  "file size overflows 64 bits");
	}
	if (end > (uint64_t)INT64_MAX)
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "file size exceeds INT64_MAX");
	lo->total = end;
	return QC_OK;
}

int qc_gguf_writer_file_size(const struct qc_gguf_writer *w, uint64_t *n_bytes, struct qc_err *err)
{
	struct layout lo;
	int rc = compute_layout(w, &lo, err);
	if (!rc)
		*n_bytes = lo.total;
	return rc;
}

/* ---- output sink ------------------------------------------------------------------- */

/* Background writer for write_file: write(2) of one staging buffer overlaps the fill
 * of the other, so an expensive fill callback and a slow disk cost max(), not sum(). */
struct flusher {
	pthread_t tid;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int fd;
	const uint8_t *job;     /* bytes being written; NULL when idle (guarded by mu) */
	size_t job_n;
	bool stop;
	uint64_t off;           /* file offset of the next job */
	int err_no;             /* errno of the first failed write, 0 if none */
	uint64_t err_off;       /* file offset where it failed */
};

static void *flusher_main(void *arg)
{
	struct flusher *f = arg;
	pthread_mutex_lock(&f->mu);
	for (;;) {
		while (!f->job && !f->stop)
			pthread_cond_wait(&f->cv, &f->mu);
		if (!f->job)
			break;
		const uint8_t *p = f->job;
		size_t n = f->job_n;
		uint64_t at = f->off;
		int e = f->err_no;  /* after a failure, later jobs are dropped */
		pthread_mutex_unlock(&f->mu);
		while (n && !e) {
			ssize_t k = write(f->fd, p, n > (1u << 30) ? (1u << 30) : n);
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0) {
				e = k < 0 ? errno : EIO;
				break;
			}
			p += k;
			n -= (size_t)k;
			at += (uint64_t)k;
		}
		pthread_mutex_lock(&f->mu);
		if (e && !f->err_no) {
			f->err_no = e;
			f->err_off = at;
		}
		f->off += f->job_n;
		f->job = NULL;
		pthread_cond_broadcast(&f->cv);
	}
	pthread_mutex_unlock(&f->mu);
	return NULL;
}

/* Wait until the previous job is written; its error, if any, as errno. */
static int flusher_wait(struct flusher *f, uint64_t *err_off)
{
	pthread_mutex_lock(&f->mu);
	while (f->job)
		pthread_cond_wait(&f->cv, &f->mu);
	int e = f->err_no;
	*err_off = f->err_off;
	pthread_mutex_unlock(&f->mu);
	return e;
}

static void flusher_submit(struct flusher *f, const uint8_t *p, size_t n)
{
	pthread_mutex_lock(&f->mu);
	QC_ASSERT(!f->job);
	f->job = p;
	f->job_n = n;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static int flusher_start(struct flusher *f, int fd)
{
	memset(f, 0, sizeof *f);
	f->fd = fd;
	if (pthread_mutex_init(&f->mu, NULL))
		return QC_ENOMEM;
	if (pthread_cond_init(&f->cv, NULL))
		goto out_mutex;
	if (pthread_create(&f->tid, NULL, flusher_main, f))
		goto out_cond;
	return QC_OK;

out_cond:
	pthread_cond_destroy(&f->cv);
out_mutex:
	pthread_mutex_destroy(&f->mu);
	return QC_ENOMEM;
}

/* Finish the pending job, then end the thread. */
static void flusher_stop(struct flusher *f)
{
	pthread_mutex_lock(&f->mu);
	f->stop = true;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
	pthread_join(f->tid, NULL);
	pthread_cond_destroy(&f->cv);
	pthread_mutex_destroy(&f->mu);
}

struct sink {
	struct flusher *fl; /* NULL: memory sink, buf is the whole output of cap bytes */
	uint8_t *buf;       /* buffer being filled */
	uint8_t *spare;     /* the other staging buffer (file sinks) */
	size_t cap, used;
	uint64_t flushed;   /* bytes handed to the flusher */
	const char *path;   /* the destination, for messages */
};

static uint64_t sink_pos(const struct sink *s)
{
	return s->flushed + s->used;
}

static int sink_wait(struct sink *s, struct qc_err *err)
{
	uint64_t at;
	int e = flusher_wait(s->fl, &at);
	if (e)
		return qc_err_set(err, QC_EIO, s->path, NULL, (int64_t)at, "write failed: %s", strerror(e));
	return QC_OK;
}

/* Hand n bytes at p to the flusher once it is idle. */
static int sink_submit(struct sink *s, const uint8_t *p, size_t n, struct qc_err *err)
{
	int rc = sink_wait(s, err);
	if (rc)
		return rc;
	flusher_submit(s->fl, p, n);
	s->flushed += n;
	return QC_OK;
}

/* Queue the filled staging buffer and continue in the spare one. */
static int sink_flush(struct sink *s, struct qc_err *err)
{
	if (!s->fl || !s->used)
		return QC_OK;
	int rc = sink_submit(s, s->buf, s->used, err);
	if (rc)
		return rc;
	uint8_t *t = s->buf;
	s->buf = s->spare;
	s->spare = t;
	s->used = 0;
	return QC_OK;
}

/* Make room for at least one byte. A full memory sink means the layout was computed
 * wrong, a bug. */
static int sink_room(struct sink *s, struct qc_err *err)
{
	if (s->used < s->cap)
		return QC_OK;
	QC_ASSERT(s->fl);
	return sink_flush(s, err);
}

static int sink_put(struct sink *s, const void *src, uint64_t n, struct qc_err *err)
{
	const uint8_t *p = src;
	if (!n)
		return QC_OK;
	if (!s->fl) {
		QC_ASSERT(n <= s->cap - s->used);
		memcpy(s->buf + s->used, p, (size_t)n);
		s->used += (size_t)n;
		return QC_OK;
	}
	if (n >= s->cap) {  /* big borrowed tensors go straight from the caller's memory */
		int rc = sink_flush(s, err);
		if (!rc)
			rc = sink_submit(s, p, (size_t)n, err);
		return rc ? rc : sink_wait(s, err);
	}
	while (n) {
		int rc = sink_room(s, err);
		if (rc)
			return rc;
		size_t k = s->cap - s->used < n ? s->cap - s->used : (size_t)n;
		memcpy(s->buf + s->used, p, k);
		s->used += k;
		p += k;
		n -= k;
	}
	return QC_OK;
}

static int sink_zero(struct sink *s, uint64_t n, struct qc_err *err)
{
	while (n) {
		int rc = sink_room(s, err);
		if (rc)
			return rc;
		size_t k = s->cap - s->used < n ? s->cap - s->used : (size_t)n;
		memset(s->buf + s->used, 0, k);
		s->used += k;
		n -= k;
	}
	return QC_OK;
}

/* Let the callback write straight into the staging buffer, chunk by chunk. */
static int sink_fill(struct sink *s, const struct wtensor *t, struct qc_err *err)
{
	uint64_t off = 0;
	while (off < t->n_bytes) {
		int rc = sink_room(s, err);
		if (rc)
			return rc;
		uint64_t left = t->n_bytes - off;
		size_t k = s->cap - s->used < left ? s->cap - s->used : (size_t)left;
		rc = t->fill(t->fill_ctx, off, s->buf + s->used, k);
		if (rc)
			return qc_err_set(err, rc < 0 ? rc : QC_EIO, s->path, t->name, (int64_t)sink_pos(s),
					  "fill callback failed (%s) for tensor bytes [%llu, %llu)",
					  qc_status_name(rc < 0 ? rc : QC_EIO), (unsigned long long)off,
					  (unsigned long long)(off + k));
		s->used += k;
		off += k;
	}
	return QC_OK;
}

/* ---- serialization ------------------------------------------------------------------ */

#define INFO_MAX (8 + QC_GGUF_MAX_NAME + 4 + 8 * QC_GGUF_MAX_DIMS + 4 + 8)  /* one tensor info */

/* Little-endian u32/u64 or version-width length at p; returns bytes written. Widths
 * were range-checked when the value was added (dims) or laid out (counts). */
static size_t enc_u32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
	return 4;
}

static size_t enc_u64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
	return 8;
}

static size_t enc_len(const struct qc_gguf_writer *w, uint8_t *p, uint64_t v)
{
	return w->version == 1 ? enc_u32(p, (uint32_t)v) : enc_u64(p, v);
}

static size_t enc_info(const struct qc_gguf_writer *w, const struct wtensor *t, uint64_t rel_off,
		       uint8_t *p)
{
	size_t n = strlen(t->name), k = enc_len(w, p, n);
	memcpy(p + k, t->name, n);
	k += n;
	k += enc_u32(p + k, t->n_dims);
	for (uint32_t d = 0; d < t->n_dims; d++)
		k += enc_len(w, p + k, (uint64_t)t->ne[d]);
	k += enc_u32(p + k, (uint32_t)t->type);
	k += enc_u64(p + k, rel_off);
	return k;
}

static uint64_t pad_to(uint64_t n, uint32_t align)
{
	return (align - n % align) % align;
}

static int emit(const struct qc_gguf_writer *w, const struct layout *lo, struct sink *s,
		struct qc_err *err)
{
	uint8_t hdr[INFO_MAX];
	size_t k = 0;
	memcpy(hdr, "GGUF", 4);
	k = 4 + enc_u32(hdr + 4, w->version);
	k += enc_len(w, hdr + k, w->n_tensors);
	k += enc_len(w, hdr + k, w->n_kv);
	int rc = sink_put(s, hdr, k, err);
	if (!rc)
		rc = sink_put(s, w->kv.p, w->kv.len, err);
	uint64_t rel = 0;
	for (uint64_t i = 0; i < w->n_tensors && !rc; i++) {
		const struct wtensor *t = &w->tensors[i];
		rc = sink_put(s, hdr, enc_info(w, t, rel, hdr), err);
		rel += t->n_bytes + pad_to(t->n_bytes, w->alignment);
	}
	if (rc)
		return rc;
	QC_ASSERT(sink_pos(s) == lo->info_bytes);
	rc = sink_zero(s, lo->data_off - lo->info_bytes, err);
	for (uint64_t i = 0; i < w->n_tensors && !rc; i++) {
		const struct wtensor *t = &w->tensors[i];
		if (t->fill)
			rc = sink_fill(s, t, err);
		else
			rc = sink_put(s, t->data, t->n_bytes, err);
		if (!rc)
			rc = sink_zero(s, pad_to(t->n_bytes, w->alignment), err);
	}
	if (!rc)
		rc = sink_flush(s, err);
	if (!rc && s->fl)
		rc = sink_wait(s, err);
	if (!rc)
		QC_ASSERT(sink_pos(s) == lo->total);
	return rc;
}

int qc_gguf_writer_write_mem(const struct qc_gguf_writer *w, uint8_t **buf, size_t *len, struct qc_err *err)
{
	struct layout lo;
	*buf = NULL;
	*len = 0;
	int rc = compute_layout(w, &lo, err);
	if (rc)
		return rc;
	if (lo.total > SIZE_MAX)
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "file of %llu bytes does not fit memory",
				  (unsigned long long)lo.total);
	struct sink s = { .cap = (size_t)lo.total, .path = "(memory)" };
	s.buf = malloc(s.cap ? s.cap : 1);
	if (!s.buf)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "cannot allocate %llu bytes",
				  (unsigned long long)lo.total);
	rc = emit(w, &lo, &s, err);
	if (rc) {
		free(s.buf);
		return rc;
	}
	*buf = s.buf;
	*len = s.cap;
	return QC_OK;
}

/* Create "<path>.tmp.XXXXXX" with a fresh suffix; returns the fd or -1 (errno set). */
static int open_tmp(const char *path, char *tmp, size_t tmp_len)
{
	static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
	static unsigned counter;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 16);
	for (int tries = 0; tries < TMP_TRIES; tries++) {
		char sfx[7];
		x += 0x9e3779b97f4a7c15ull + counter++;
		uint64_t z = x;
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		for (int i = 0; i < 6; i++, z /= 62)
			sfx[i] = digits[z % 62];
		sfx[6] = '\0';
		if ((size_t)snprintf(tmp, tmp_len, "%s.tmp.%s", path, sfx) >= tmp_len) {
			errno = ENAMETOOLONG;
			return -1;
		}
		int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (fd >= 0 || errno != EEXIST)
			return fd;
	}
	return -1;
}

int qc_gguf_writer_write_file(const struct qc_gguf_writer *w, const char *path, struct qc_err *err)
{
	struct layout lo;
	struct flusher fl;
	int fd, rc = compute_layout(w, &lo, err);
	if (rc)
		return rc;
	size_t tmp_len = strlen(path) + 16;
	char *tmp = malloc(tmp_len);
	struct sink s = { .cap = STAGE_BYTES, .path = path };
	s.buf = malloc(s.cap);
	s.spare = malloc(s.cap);
	if (!tmp || !s.buf || !s.spare) {
		rc = qc_err_set(err, QC_ENOMEM, path, NULL, -1, "cannot allocate 2 x %u-byte write buffers",
				STAGE_BYTES);
		goto out_free;
	}
	fd = open_tmp(path, tmp, tmp_len);
	if (fd < 0) {
		rc = qc_err_set(err, QC_EIO, path, NULL, -1, "cannot create temporary file: %s",
				strerror(errno));
		goto out_free;
	}
	if (flusher_start(&fl, fd)) {
		rc = qc_err_set(err, QC_ENOMEM, path, NULL, -1, "cannot start the writer thread");
		goto out_close;
	}
	s.fl = &fl;
	rc = emit(w, &lo, &s, err);
	flusher_stop(&fl);
	if (rc)
		goto out_close;
	if ((w->flags & QC_GGUF_WRITE_FSYNC) && fsync(fd)) {
		rc = qc_err_set(err, QC_EIO, path, NULL, -1, "fsync failed: %s", strerror(errno));
		goto out_close;
	}
	if (close(fd)) {
		rc = qc_err_set(err, QC_EIO, path, NULL, -1, "close failed: %s", strerror(errno));
		goto out_unlink;
	}
	if (rename(tmp, path)) {
		rc = qc_err_set(err, QC_EIO, path, NULL, -1, "cannot rename %s into place: %s", tmp,
				strerror(errno));
		goto out_unlink;
	}
	goto out_free;

out_close:
	close(fd);
out_unlink:
	unlink(tmp);
out_free:
	free(s.spare);
	free(s.buf);
	free(tmp);
	return rc;
}
