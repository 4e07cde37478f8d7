/* fuzz_gguf.c — libFuzzer entry for the GGUF reader (formats/gguf.c).
 *
 * Any byte string goes to qc_gguf_open_mem. When it opens, every KV pair and
 * tensor record is touched the way callers do: each key through every typed getter,
 * array elements through the element readers, string bytes read, and each tensor's
 * first and last data byte read and its first row dequantized through the type
 * table, so an out-of-range pointer handed out by the reader trips ASan (libFuzzer
 * passes a buffer of exactly `size` bytes). Build and run: tests/fuzz/run.sh.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

#define MAX_ROW_ELEMS (1 << 22)      /* bound the float row buffer, not the input */
#define MAX_ARRAY_TOUCH 64

static volatile uint64_t sink;

static void touch_value(const struct qc_gguf_value *v, int depth)
{
	if (v->type == QC_GGUF_STRING) {
		if (v->s.len)
			sink += (uint8_t)v->s.p[0] + (uint8_t)v->s.p[v->s.len - 1];
		return;
	}
	if (v->type != QC_GGUF_ARRAY) {
		int64_t i;
		double d;
		sink += qc_gguf_value_as_i64(v, &i) ? (uint64_t)i : 0;
		sink += qc_gguf_value_as_f64(v, &d) ? (uint64_t)(d == d) : 0;
		return;
	}
	uint64_t n = v->arr.n;
	for (uint64_t k = 0; k < n; k = (k < MAX_ARRAY_TOUCH || k + 1 == n) ? k + 1 : n - 1) {
		if (qc_gguf_vtype_size(v->arr.elem)) {
			int64_t i;
			double d;
			sink += qc_gguf_arr_i64(v, k, &i) ? (uint64_t)i : 0;
			sink += qc_gguf_arr_f64(v, k, &d) ? (uint64_t)(d == d) : 0;
		} else if (depth < 16) {
			touch_value(&v->arr.items[k], depth + 1);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct qc_gguf *g = NULL;
	struct qc_err err = {0};
	char msg[2 * QC_ERR_MSG_MAX];
	if (qc_gguf_open_mem(data, size, "fuzz.gguf", &g, &err) != QC_OK) {
		/* a rejection must carry a message and an offset inside (or at the end of) the input */
		qc_err_format(&err, msg, sizeof msg);
		if (!err.msg[0] || err.off > (int64_t)size) {
			fprintf(stderr, "bad error record: off %lld of %zu: %s\n", (long long)err.off, size, msg);
			abort();
		}
		return 0;
	}
	for (uint64_t i = 0; i < g->n_kv; i++) {
		const struct qc_gguf_kv *kv = &g->kv[i];
		const char *key = kv->key.p;
		uint64_t u;
		int64_t s;
		double d;
		bool b;
		struct qc_gguf_str str;
		if (qc_gguf_find(g, key) == NULL)
			abort(); /* every key read must be findable by its own name */
		sink += qc_gguf_get_u64(g, key, &u, &err) == QC_OK ? u : 0;
		sink += qc_gguf_get_i64(g, key, &s, &err) == QC_OK ? (uint64_t)s : 0;
		sink += qc_gguf_get_f64(g, key, &d, &err) == QC_OK ? (uint64_t)(d == d) : 0;
		sink += qc_gguf_get_bool(g, key, &b, &err) == QC_OK ? b : 0;
		if (qc_gguf_get_str(g, key, &str, &err) == QC_OK && str.len)
			sink += (uint8_t)str.p[str.len - 1];
		const struct qc_gguf_value *arr = qc_gguf_get_arr(g, key);
		if (arr)
			touch_value(arr, 0);
		touch_value(&kv->val, 0);
		sink += qc_gguf_vtype_name(kv->val.type)[0];
	}
	float *row = NULL;
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		const struct qc_gguf_tensor *t = &g->tensors[i];
		sink += strlen(t->name) + (uint64_t)t->ne[0] + t->n_dims;
		if (!t->n_bytes)
			continue;
		if (t->data_off + t->n_bytes > size)
			abort(); /* the reader promised the range is inside the file */
		sink += g->map[t->data_off] + g->map[t->data_off + t->n_bytes - 1];
		const struct qc_type_traits *tt = qc_type_get(t->type);
		uint64_t rb;
		if (t->ne[0] > MAX_ROW_ELEMS || qc_type_row_bytes(t->type, (uint64_t)t->ne[0], &rb) != QC_OK ||
		    rb > t->n_bytes)
			continue;
		float *r = realloc(row, (size_t)t->ne[0] * sizeof(float));
		if (!r)
			break;
		row = r;
		tt->dequant_row(g->map + t->data_off, row, t->ne[0]);
		sink += (uint64_t)(row[0] == row[0]);
	}
	free(row);
	sink += (uint64_t)qc_gguf_get_u64(g, "general.alignment", &(uint64_t){0}, NULL);
	qc_gguf_close(g);
	return 0;
}
