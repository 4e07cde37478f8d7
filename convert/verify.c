/* verify.c — see verify.h. The deep pass decodes through the traits table and
 * reports the first non-finite value with its row and block index. */
#include "verify.h"

#include <math.h>
#include <stdlib.h>

#include "progress.h"

static int check_finite(const struct qc_bundle *b, const struct qc_bundle_tensor *t, struct qc_err *err)
{
	const struct qc_type_traits *tt = qc_type_get(t->type);
	uint64_t row_bytes, rows = (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
	QC_ASSERT(qc_type_row_bytes(t->type, (uint64_t)t->ne[0], &row_bytes) == QC_OK);
	uint8_t *raw = malloc((size_t)row_bytes + 1);
	float *f = malloc((size_t)t->ne[0] * sizeof(float) + 1);
	int rc = (!raw || !f) ? qc_err_set(err, QC_ENOMEM, b->path, t->name, -1, "out of memory") : QC_OK;
	for (uint64_t r = 0; !rc && t->ne[0] && r < rows; r++) {
		rc = qc_layout_unpack_rows(t->layout, t->type, t->ne, qc_bundle_data(b, t), r, 1, raw, err);
		if (rc)
			break;
		tt->dequant_row(raw, f, t->ne[0]);
		for (int64_t i = 0; i < t->ne[0]; i++)
			if (!isfinite(f[i])) {
				int64_t blk = i / tt->block_elems;
				rc = qc_err_set(err, QC_EFORMAT, b->path, t->name,
						(int64_t)(t->off + r * row_bytes + (uint64_t)blk * (uint64_t)tt->block_bytes),
						"row %llu, block %lld decodes to a non-finite value (%g)",
						(unsigned long long)r, (long long)blk, (double)f[i]);
				break;
			}
	}
	free(raw);
	free(f);
	return rc;
}

int qc_verify_bundle(const struct qc_bundle *b, bool deep, uint64_t *n_ok, struct qc_err *err)
{
	struct qc_progress pr;
	uint64_t total = 0;
	for (uint64_t i = 0; i < b->n_tensors; i++)
		total += b->tensors[i].size;
	qc_progress_init(&pr, "verifying", total);
	*n_ok = 0;
	int rc = QC_OK;
	for (uint64_t i = 0; !rc && i < b->n_tensors; i++) {
		rc = qc_bundle_verify_tensor(b, &b->tensors[i], err);
		if (!rc && deep)
			rc = check_finite(b, &b->tensors[i], err);
		if (!rc)
			(*n_ok)++;
		qc_progress_add(&pr, b->tensors[i].size);
	}
	qc_progress_done(&pr);
	return rc;
}
