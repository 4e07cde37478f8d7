/* fuzz_bundle.c — libFuzzer entry for the bundle reader (formats/bundle_read.c).
 *
 * Each input is opened twice with qc_bundle_open_mem: as given, then (when it is at
 * least two tar blocks) with the ustar checksum of member 0, the file size, the
 * manifest hash and the header hash recomputed, so mutations reach the manifest
 * JSON checks instead of dying at a checksum. Whatever opens is used like the
 * runtime uses it: every tensor verified, found by name (and by part), and its
 * first and last rows unpacked and dequantized via qc_types[type].dequant_row,
 * whatever the hash said. The buffer is exactly the input size, so any range the
 * reader wrongly accepts trips ASan. Build and run: tests/fuzz/run.sh.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "bundle.h"
#include "tar.h"

#define MAX_ROW_ELEMS (1 << 22)

static volatile uint64_t sink;

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Recompute what a mutation breaks first: tar header checksum (bytes 148..155 of
 * block 0), file size, manifest XXH3 (when its range is inside), header XXH3. */
static void fix_hashes(uint8_t *p, size_t n)
{
	unsigned sum = 0;
	char tmp[8];
	memset(p + 148, ' ', 8);
	for (int i = 0; i < QC_TAR_BLOCK; i++)
		sum += p[i];
	snprintf(tmp, sizeof tmp, "%06o", sum & 0777777u);
	memcpy(p + 148, tmp, 7);
	uint8_t *h = p + QC_TAR_BLOCK;
	put64(h + 40, n);
	uint64_t moff = get64(h + 16), msz = get64(h + 24);
	if (moff <= n && msz <= n - moff)
		put64(h + 32, XXH3_64bits(p + moff, (size_t)msz));
	put64(h + 48, XXH3_64bits(h, 48));
}

static void use_tensor(const struct qc_bundle *b, const struct qc_bundle_tensor *t, float **row)
{
	struct qc_err err = {0};
	const struct qc_bundle_part *part = NULL;
	sink += (uint64_t)(qc_bundle_verify_tensor(b, t, &err) == QC_OK);
	if (qc_bundle_find(b, t->name) == NULL)
		abort(); /* every listed tensor is findable by name */
	for (int k = 0; k < t->n_parts; k++)
		sink += (uint64_t)(qc_bundle_find_part(b, t->parts[k].name, &part) != NULL);
	if (!t->size)
		return;
	if (t->off + t->size > b->size)
		abort(); /* the reader promised the range is inside the file */
	const uint8_t *d = qc_bundle_data(b, t);
	sink += d[0] + d[t->size - 1];
	uint64_t rb, rows = 1;
	if (t->ne[0] <= 0 || t->ne[0] > MAX_ROW_ELEMS || qc_type_row_bytes(t->type, (uint64_t)t->ne[0], &rb) != QC_OK ||
	    !rb)
		return;
	for (int i = 1; i < 4; i++)
		rows *= (uint64_t)t->ne[i]; /* fits: size == rows * rb was checked on open */
	if (!rows)
		return;
	uint8_t *raw = malloc((size_t)rb);
	float *r = realloc(*row, (size_t)t->ne[0] * sizeof(float));
	if (r)
		*row = r;
	if (raw && r) {
		uint64_t pick[2] = { 0, rows - 1 };
		for (int i = 0; i < 2; i++)
			if (qc_layout_unpack_rows(t->layout, t->type, t->ne, d, pick[i], 1, raw, &err) == QC_OK) {
				qc_types[t->type].dequant_row(raw, *row, t->ne[0]);
				sink += (uint64_t)((*row)[0] == (*row)[0]);
			}
	}
	free(raw);
}

static void open_and_use(const uint8_t *data, size_t size)
{
	struct qc_bundle *b = NULL;
	struct qc_err err = {0};
	if (qc_bundle_open_mem(data, size, "fuzz.qb", &b, &err) != QC_OK) {
		/* (err.off may name a bogus manifest offset outside the input, so only the text is required) */
		if (!err.msg[0]) {
			fprintf(stderr, "error record without a message (code %d)\n", err.code);
			abort();
		}
		return;
	}
	float *row = NULL;
	sink += b->target ? (uint8_t)b->target[0] : 0;
	for (uint64_t i = 0; i < b->n_tensors; i++)
		use_tensor(b, &b->tensors[i], &row);
	free(row);
	qc_bundle_close(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	open_and_use(data, size);
	if (size < 2 * QC_TAR_BLOCK)
		return 0;
	uint8_t *p = malloc(size);
	if (!p)
		return 0;
	memcpy(p, data, size);
	fix_hashes(p, size);
	open_and_use(p, size);
	free(p);
	return 0;
}
