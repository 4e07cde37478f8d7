/* dump.c — dequantize a tensor to float32 (see dump.h). Works a bounded number of
 * rows at a time; all decoding goes through the type-traits table. */
#include "dump.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ROWS_BUF_BYTES (4u << 20)

int qc_dump_rows(enum qc_type type, int64_t ne0, const uint8_t *rows, uint64_t n_rows, FILE *out,
		 struct qc_err *err)
{
	const struct qc_type_traits *tt = qc_type_get(type);
	uint64_t row_bytes;
	if (qc_type_row_bytes(type, (uint64_t)ne0, &row_bytes))
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "row length %lld does not fit %s", (long long)ne0,
				  tt->name);
	float *buf = malloc((size_t)ne0 * sizeof(float) + 1);
	if (!buf)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory for a %lld-element row", (long long)ne0);
	int rc = QC_OK;
	for (uint64_t r = 0; r < n_rows; r++) {
		tt->dequant_row(rows + r * row_bytes, buf, ne0);
		if (fwrite(buf, sizeof(float), (size_t)ne0, out) != (size_t)ne0) {
			rc = qc_err_set(err, QC_EIO, NULL, NULL, -1, "write failed: %s", strerror(errno));
			break;
		}
	}
	free(buf);
	return rc;
}

int qc_dump_gguf(const struct qc_gguf_model *m, const char *name, FILE *out, struct qc_err *err)
{
	const struct qc_gguf_tensor *t = qc_gguf_model_find(m, name);
	if (!t)
		return qc_err_set(err, QC_ENOTFOUND, m->files[0]->path, name, -1, "no such tensor");
	uint64_t rows = t->ne[0] ? t->n_elems / (uint64_t)t->ne[0] : 0;
	int rc = qc_dump_rows(t->type, t->ne[0], qc_gguf_model_data(m, t), rows, out, err);
	if (rc)
		qc_err_set(err, rc, m->files[t->file_idx]->path, name, (int64_t)t->data_off, "%s", err->msg);
	return rc;
}

/* Rows [row0, row0+n) of t's flattened [rows, ne0] view, unpacked then decoded. */
static int dump_span(const struct qc_bundle *b, const struct qc_bundle_tensor *t, uint64_t row0, uint64_t n,
		     FILE *out, struct qc_err *err)
{
	uint64_t row_bytes;
	QC_ASSERT(qc_type_row_bytes(t->type, (uint64_t)t->ne[0], &row_bytes) == QC_OK);
	uint64_t per = row_bytes ? ROWS_BUF_BYTES / row_bytes : n;
	if (per == 0)
		per = 1;
	uint8_t *buf = malloc((size_t)((per < n ? per : n) * row_bytes) + 1);
	if (!buf)
		return qc_err_set(err, QC_ENOMEM, b->path, t->name, -1, "out of memory");
	int rc = QC_OK;
	for (uint64_t r = 0; !rc && r < n; r += per) {
		uint64_t k = n - r < per ? n - r : per;
		rc = qc_layout_unpack_rows(t->layout, t->type, t->ne, qc_bundle_data(b, t), row0 + r, k, buf, err);
		if (!rc)
			rc = qc_dump_rows(t->type, t->ne[0], buf, k, out, err);
	}
	free(buf);
	return rc;
}

int qc_dump_bundle(const struct qc_bundle *b, const char *name, FILE *out, struct qc_err *err)
{
	const struct qc_bundle_part *part = NULL;
	const struct qc_bundle_tensor *t = qc_bundle_find(b, name);
	if (!t)
		t = qc_bundle_find_part(b, name, &part);
	if (!t)
		return qc_err_set(err, QC_ENOTFOUND, b->path, name, -1, "no such tensor (nor a part of a fused one)");
	int rc;
	if (!part) {
		uint64_t rows = (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
		rc = dump_span(b, t, 0, t->ne[0] ? rows : 0, out, err);
	} else {
		uint64_t slices = (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
		rc = QC_OK;
		for (uint64_t s = 0; !rc && s < slices; s++)
			rc = dump_span(b, t, s * (uint64_t)t->ne[1] + (uint64_t)part->row0, (uint64_t)part->n_rows, out, err);
	}
	if (rc)
		qc_err_set(err, rc, b->path, t->name, (int64_t)t->off, "%s", err->msg);
	return rc;
}
