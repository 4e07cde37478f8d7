/* hfq_awq.c — AWQ GEMM checkpoints (AutoAWQ WQLinear_GEMM) into hq4 rows.
 *
 * Tensors per module: qweight I32 [K, N/8], qzeros I32 [K/group, N/8], scales
 * F16/BF16/F32 [K/group, N]. Nibble i of a word holds column 8*word + order[i],
 * order = {0, 2, 4, 6, 1, 3, 5, 7} (AWQ's interleave), zeros the same; W[n,k] =
 * s*(q - z) with the stored z (no v1-style offset). Only version "gemm" with
 * zero_point true; GEMV/exllama/marlin layouts are QC_EUNSUPPORTED.
 * Behaviour matched: AutoAWQ WQLinear_GEMM.from_linear and
 * awq/utils/packing_utils.dequantize_gemm (facts only).
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hfq_scheme.h"

static int parse(struct qc_hfq *q, const char *path, struct qc_err *err)
{
	int64_t bits, gs;
	/* transformers spells them bits/group_size, AutoAWQ's own config w_bit/q_group_size */
	const char *kb = cJSON_GetObjectItemCaseSensitive(q->cfg, "w_bit") ? "w_bit" : "bits";
	const char *kg = cJSON_GetObjectItemCaseSensitive(q->cfg, "q_group_size") ? "q_group_size" : "group_size";
	int rc = qc_hfq_int(q->cfg, kb, 4, 4, 4, &bits, path, err);
	if (!rc)
		rc = qc_hfq_int(q->cfg, kg, 128, 1, 1 << 20, &gs, path, err);
	if (!rc)
		rc = qc_hfq_bool(q->cfg, "zero_point", true, &q->awq_zero_point, path, err);
	if (!rc)
		rc = qc_hfq_strings(q->cfg, "modules_to_not_convert", &q->skip, path, err);
	if (rc)
		return rc;
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(q->cfg, "version");
	if (v && !cJSON_IsString(v))
		return qc_err_set(err, QC_EFORMAT, path, NULL, -1, "AWQ version is not a string");
	if (v && strcasecmp(v->valuestring, "gemm") != 0)
		return qc_err_set(err, QC_EUNSUPPORTED, path, NULL, -1, "AWQ version \"%.32s\" (only gemm)", v->valuestring);
	if (!q->awq_zero_point)
		return qc_err_set(err, QC_EUNSUPPORTED, path, NULL, -1, "AWQ without zero_point");
	q->bits = 4;
	q->group_size = gs;
	return QC_OK;
}

static bool rule(const struct qc_hfq *q, const char *module)
{
	return !q->skip || !qc_hfq_skip_match(q->skip, module);
}

static bool present(const struct qc_hfq *q, const struct qc_hf_source *src, const char *module)
{
	(void)q;
	return qc_hfq_find(src, module, "qweight") != NULL;
}

/* nibble position of column n%8 inside its word: the inverse of {0,2,4,6,1,3,5,7} */
static const int awq_pos[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };

static uint8_t nib(const uint8_t *row, int64_t n)
{
	uint32_t w;
	memcpy(&w, row + (n / 8) * 4, 4);
	return (uint8_t)((w >> (4 * awq_pos[n % 8])) & 0xf);
}

static int load(const struct qc_hfq *q, const struct qc_hf_source *src, const char *module,
		struct qc_hfq_tensor *out, struct qc_err *err)
{
	const int64_t any2[2] = { -1, -1 };
	const struct qc_hf_tensor *qw, *qz, *sc;
	int rc = qc_hfq_need(src, module, "qweight", QC_HFQ_DT(QC_ST_I32), 2, any2, &qw, err);
	if (rc)
		return rc;
	const char *file = qc_hfq_file(src, qw);
	const int64_t k = (int64_t)qw->t->shape[0], n8 = (int64_t)qw->t->shape[1], n = n8 * 8;
	if (k % q->group_size)
		return qc_err_set(err, QC_EUNSUPPORTED, file, qw->name, (int64_t)qw->t->hdr_off,
				  "group_size %lld does not divide in_features %lld", (long long)q->group_size, (long long)k);
	const int64_t g = k / q->group_size;
	const int64_t want_s[2] = { g, n }, want_z[2] = { g, n8 };
	rc = qc_hfq_need(src, module, "scales", QC_HFQ_DT_FLOAT, 2, want_s, &sc, err);
	if (!rc)
		rc = qc_hfq_need(src, module, "qzeros", QC_HFQ_DT(QC_ST_I32), 2, want_z, &qz, err);
	if (rc)
		return rc;
	struct qc_hfq_dense dn;
	rc = qc_hfq_dense_new(&dn, n, k, 32, true, file, qw->name, err);
	if (rc)
		return rc;
	int32_t *bgroup = malloc((size_t)(k / 32) * sizeof *bgroup);
	if (!bgroup) {
		qc_hfq_dense_free(&dn);
		return qc_err_set(err, QC_ENOMEM, file, qw->name, -1, "out of memory");
	}
	rc = qc_hfq_groups(src, NULL, k, q->group_size, g, &dn.perm, bgroup, err);
	if (rc)
		goto out;
	const int64_t nb = k / 32;
	for (int64_t c = 0; c < k; c++) {
		const uint8_t *row = qw->data + (uint64_t)c * (uint64_t)n8 * 4;
		for (int64_t r = 0; r < n; r++)
			dn.codes[r * k + c] = nib(row, r);
	}
	for (int64_t r = 0; r < n; r++) {
		for (int64_t b = 0; b < nb; b++) {
			const uint64_t gr = (uint64_t)bgroup[b];
			dn.d[r * nb + b] = qc_hfq_f32_at(sc, gr * (uint64_t)n + (uint64_t)r);
			dn.z[r * nb + b] = nib(qz->data + gr * (uint64_t)n8 * 4, r);
		}
	}
	rc = qc_hfq_emit(&dn, QC_TYPE_HQ4, out, err);
out:
	free(bgroup);
	qc_hfq_dense_free(&dn);
	return rc;
}

const struct qc_hfq_ops qc_hfq_awq_ops = { "awq", parse, rule, present, load };
