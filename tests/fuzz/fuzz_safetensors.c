/* fuzz_safetensors.c — libFuzzer entry for the safetensors reader (formats/safetensors.c).
 *
 * Any byte string goes to qc_st_open_mem. A rejection must carry a message and an
 * offset inside the input. When it opens, every tensor is touched the way callers do:
 * found again by name, its first and last data byte read through qc_st_data (libFuzzer
 * passes a buffer of exactly `size` bytes, so a range outside it trips ASan), spans
 * checked to be in data-offset order and disjoint, and every metadata pair read.
 * Build and run: tests/fuzz/run.sh.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct qc_st *st = NULL;
	struct qc_err err = {0};
	char msg[2 * QC_ERR_MSG_MAX];
	if (qc_st_open_mem(data, size, "fuzz.safetensors", &st, &err) != QC_OK) {
		qc_err_format(&err, msg, sizeof msg);
		if (!err.msg[0] || err.off > (int64_t)size || st) {
			fprintf(stderr, "bad error record: off %lld of %zu: %s\n", (long long)err.off, size, msg);
			abort();
		}
		return 0;
	}
	uint64_t prev_end = st->data_off;
	for (uint64_t i = 0; i < st->n_tensors; i++) {
		const struct qc_st_tensor *t = &st->tensors[i];
		if (qc_st_find(st, t->name) != t || !t->name[0])
			abort(); /* names are unique and findable */
		if (t->data_off + t->n_bytes > size || t->n_bytes != t->n_elems * qc_st_dtype_size(t->dtype))
			abort(); /* the reader promised the range is inside the input and sized by shape */
		sink += strlen(qc_st_dtype_name(t->dtype)) + t->n_dims;
		if (!t->n_bytes)
			continue;
		if (t->data_off < prev_end)
			abort(); /* spans are sorted and disjoint */
		prev_end = t->data_off + t->n_bytes;
		const uint8_t *p = qc_st_data(st, t);
		sink += p[0] + p[t->n_bytes - 1];
	}
	for (uint64_t i = 0; i < st->n_meta; i++)
		sink += strlen(st->meta[i].key) + strlen(st->meta[i].value) +
			(qc_st_meta_get(st, st->meta[i].key) != NULL);
	qc_st_close(st);
	return 0;
}
