/* gguf_write.c — the GGUF writer object: lifetime, name sets, the tensor list.
 *
 * Owns: qc_gguf_writer_new/free and its counters, the open-addressing sets that keep
 * keys and tensor names unique, and adding tensors (name, type, shape checked and the
 * byte size computed here; bytes borrowed or produced by a fill callback later).
 * KV pairs are encoded in gguf_write_kv.c; layout and output in gguf_write_emit.c,
 * through the staging sink of gguf_write_sink.c (internal header: gguf_write_int.h).
 * Bloat: no mmap output, no O_DIRECT, no in-place editing.
 * Layout matched: llama.cpp ggml/src/gguf.cpp gguf_write_to_buf (padding after every
 * tensor, data section aligned, n_dims as given).
 */
#include "gguf_write_int.h"

#include <stdlib.h>
#include <string.h>

#include "cursor.h"

static uint64_t fnv1a(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
	return h;
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

bool qc_gguf_name_set_has(const struct qc_gguf_writer *w, enum name_kind k, const char *s, size_t n)
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

int qc_gguf_name_set_insert(struct qc_gguf_writer *w, enum name_kind k, uint64_t idx, uint64_t n)
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

/* ---- tensors ------------------------------------------------------------------- */

/* Validate name, type and shape into t and compute its byte size; adds nothing. */
static int size_tensor(const struct qc_gguf_writer *w, const char *name, enum qc_type type,
		       uint32_t n_dims, const int64_t *ne, struct wtensor *t, struct qc_err *err)
{
	size_t n = name ? strlen(name) : 0;
	if (!n || n >= QC_GGUF_MAX_NAME)
		return qc_err_set(err, QC_EINVAL, NULL, name, -1,
				  "tensor name must be 1..%d bytes, got %zu", QC_GGUF_MAX_NAME - 1, n);
	if (qc_gguf_name_set_has(w, NAME_TENSOR, name, n))
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
	if (qc_gguf_name_set_insert(w, NAME_TENSOR, w->n_tensors, w->n_tensors + 1))
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
