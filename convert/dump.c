/* dump.c — dequantize a tensor to float32 (see dump.h). Works a bounded number of
 * rows at a time; all decoding goes through the type-traits table. A bundle weight
 * with a "<base>.act_perm" tensor (I32 [K], GPTQ/compressed-tensors act-order,
 * convert/hf_quant.h) is written with its columns back in the checkpoint's order. */
#include "dump.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ROWS_BUF_BYTES (4u << 20)

/* As qc_dump_rows; perm (ne0 entries, or NULL): stored column j is column perm[j]. */
static int dump_rows_perm(enum qc_type type, int64_t ne0, const uint8_t *rows, uint64_t n_rows,
			  const int32_t *perm, FILE *out, struct qc_err *err)
{
	const struct qc_type_traits *tt = qc_type_get(type);
	uint64_t row_bytes;
	if (qc_type_row_bytes(type, (uint64_t)ne0, &row_bytes))
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "row length %lld does not fit %s", (long long)ne0,
				  tt->name);
	float *buf = malloc((size_t)ne0 * sizeof(float) * (perm ? 2 : 1) + 1);
	if (!buf)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory for a %lld-element row", (long long)ne0);
	float *row = perm ? buf + ne0 : buf;
	int rc = QC_OK;
	for (uint64_t r = 0; r < n_rows; r++) {
		tt->dequant_row(rows + r * row_bytes, buf, ne0);
		for (int64_t j = 0; perm && j < ne0; j++)
			row[perm[j]] = buf[j];
		if (fwrite(row, sizeof(float), (size_t)ne0, out) != (size_t)ne0) {
			rc = qc_err_set(err, QC_EIO, NULL, NULL, -1, "write failed: %s", strerror(errno));
			break;
		}
	}
	free(buf);
	return rc;
}

int qc_dump_rows(enum qc_type type, int64_t ne0, const uint8_t *rows, uint64_t n_rows, FILE *out,
		 struct qc_err *err)
{
	return dump_rows_perm(type, ne0, rows, n_rows, NULL, out, err);
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
		     const int32_t *perm, FILE *out, struct qc_err *err)
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
			rc = dump_rows_perm(t->type, t->ne[0], buf, k, perm, out, err);
	}
	free(buf);
	return rc;
}

/* The act_perm of weight `name` ("x.weight" -> "x.act_perm"), checked to be an I32
 * permutation of t's ne[0] columns, one per ne[2] slice for stacked experts
 * ([K, n_expert], hf_convert.c; or [K] shared by all); *perm NULL when there is none,
 * else *n_perm (1 or the slice count) permutations of ne[0] entries. */
static int load_act_perm(const struct qc_bundle *b, const char *name, const struct qc_bundle_tensor *t,
			 int32_t **perm, int64_t *n_perm, struct qc_err *err)
{
	char pn[512];
	size_t n = strlen(name);
	*perm = NULL;
	if (n > 7 && strcmp(name + n - 7, ".weight") == 0)
		n -= 7;
	if (n + sizeof ".act_perm" > sizeof pn)
		return QC_OK;
	memcpy(pn, name, n);
	memcpy(pn + n, ".act_perm", sizeof ".act_perm");
	const struct qc_bundle_tensor *p = qc_bundle_find(b, pn);
	if (!p)
		return QC_OK;
	const int64_t k = t->ne[0], slices = t->ne[2] * t->ne[3];
	if (p->type != QC_TYPE_I32 || p->ne[0] != k || (p->ne[1] != 1 && p->ne[1] != slices) || p->ne[2] != 1 ||
	    p->ne[3] != 1)
		return qc_err_set(err, QC_EFORMAT, b->path, pn, (int64_t)p->off, "act_perm must be i32 [%lld] or [%lld, %lld]",
				  (long long)k, (long long)k, (long long)slices);
	const int64_t np = p->ne[1];
	int32_t *v = malloc((size_t)(k * np) * sizeof *v + 1);
	uint8_t *seen = calloc((size_t)k + 1, 1);
	int rc = v && seen ? qc_layout_unpack_rows(p->layout, p->type, p->ne, qc_bundle_data(b, p), 0, (uint64_t)np,
						   (uint8_t *)v, err)
			   : qc_err_set(err, QC_ENOMEM, b->path, pn, -1, "out of memory");
	for (int64_t j = 0; !rc && j < k * np; j++) {
		if (j % k == 0)
			memset(seen, 0, (size_t)k);
		if (v[j] < 0 || v[j] >= k || seen[v[j]]++)
			rc = qc_err_set(err, QC_EFORMAT, b->path, pn, (int64_t)p->off + 4 * j,
					"act_perm[%lld] = %d is out of range or repeated", (long long)j, v[j]);
	}
	*n_perm = np;
	free(seen);
	if (rc)
		free(v);
	else
		*perm = v;
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
	/* a fused part shares its fused tensor's permutation (hf_quant.h: pairs only fuse with equal ones) */
	int32_t *perm = NULL;
	int64_t n_perm = 1;
	int rc = load_act_perm(b, name, t, &perm, &n_perm, err);
	if (!rc && !perm && part)
		rc = load_act_perm(b, t->name, t, &perm, &n_perm, err);
	if (rc) {
		free(perm);
		return rc;
	}
	uint64_t slices = (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
	if (!part && n_perm == 1) {
		uint64_t rows = (uint64_t)t->ne[1] * slices;
		rc = dump_span(b, t, 0, t->ne[0] ? rows : 0, perm, out, err);
	} else {
		uint64_t row0 = part ? (uint64_t)part->row0 : 0, n = part ? (uint64_t)part->n_rows : (uint64_t)t->ne[1];
		for (uint64_t s = 0; !rc && s < slices; s++)
			rc = dump_span(b, t, s * (uint64_t)t->ne[1] + row0, n,
				       perm && n_perm > 1 ? perm + s * (uint64_t)t->ne[0] : perm, out, err);
	}
	free(perm);
	if (rc)
		qc_err_set(err, rc, b->path, t->name, (int64_t)t->off, "%s", err->msg);
	return rc;
}
