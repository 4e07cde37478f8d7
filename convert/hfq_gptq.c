/* hfq_gptq.c — GPTQ checkpoints (AutoGPTQ / GPTQModel / optimum layout) into hq4
 * (2, 3, 4 bits) or hq8 (8 bits) rows.
 *
 * Tensors per module: qweight I32 [K*bits/32, N] (value k of column n at bit
 * (k/32)*32*bits + (k%32)*bits of that column's words, so 3-bit values cross words),
 * qzeros I32 [G, N*bits/32] (same packing along N), scales F16/BF16/F32 [G, N],
 * g_idx I32 [K] (optional; k / group_size when absent). W[n,k] = s*(q - z) with
 * z = stored + 1 for checkpoint_format "gptq" (v1 stores z-1) and z = stored for
 * "gptq_v2". A non-monotonic g_idx (desc_act) is resolved by a stable sort of the
 * columns by group, returned as act_perm.
 * Behaviour matched: AutoGPTQ qlinear_cuda QuantLinear.pack and its torch forward;
 * GPTQModel convert_gptq_v1_to_v2_format (facts only).
 */
#include <stdlib.h>
#include <string.h>

#include "hfq_scheme.h"

static int parse(struct qc_hfq *q, const char *path, struct qc_err *err)
{
	int64_t bits, gs;
	int rc = qc_hfq_int(q->cfg, "bits", 4, 2, 8, &bits, path, err);
	if (!rc && (bits == 5 || bits == 6 || bits == 7))
		rc = qc_err_set(err, QC_EUNSUPPORTED, path, NULL, -1, "GPTQ bits %lld (2, 3, 4 or 8)", (long long)bits);
	if (!rc)
		rc = qc_hfq_int(q->cfg, "group_size", -1, -1, 1 << 20, &gs, path, err);
	if (!rc && gs == 0)
		rc = qc_err_set(err, QC_EUNSUPPORTED, path, NULL, -1, "GPTQ group_size 0");
	if (!rc)
		rc = qc_hfq_bool(q->cfg, "desc_act", false, &q->desc_act, path, err);
	if (!rc)
		rc = qc_hfq_bool(q->cfg, "sym", true, &q->sym, path, err);
	if (!rc)
		rc = qc_hfq_bool(q->cfg, "static_groups", false, &q->static_groups, path, err);
	if (!rc)
		rc = qc_hfq_strings(q->cfg, "modules_to_not_convert", &q->skip, path, err);
	if (rc)
		return rc;
	bool marlin = false;
	rc = qc_hfq_bool(q->cfg, "is_marlin_format", false, &marlin, path, err);
	if (rc)
		return rc;
	const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(q->cfg, "checkpoint_format");
	const char *f = cJSON_IsString(fmt) ? fmt->valuestring : "gptq";
	if (fmt && !cJSON_IsNull(fmt) && !cJSON_IsString(fmt))
		return qc_err_set(err, QC_EFORMAT, path, NULL, -1, "checkpoint_format is not a string");
	if (marlin || (strcmp(f, "gptq") != 0 && strcmp(f, "gptq_v2") != 0))
		return qc_err_set(err, QC_EUNSUPPORTED, path, NULL, -1,
				  "GPTQ checkpoint_format \"%.32s\" (gptq or gptq_v2)", marlin ? "marlin" : f);
	q->bits = (int)bits;
	q->group_size = gs;
	q->v2_zeros = strcmp(f, "gptq_v2") == 0;
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

/* Field idx (bits wide) of a sequence packed 32 values per `bits` words; word(i)
 * returns the i-th word of that sequence. */
static uint32_t field(const uint8_t *base, uint64_t stride, uint64_t idx, int bits)
{
	const uint64_t bit = (idx / 32) * 32 * (uint64_t)bits + (idx % 32) * (uint64_t)bits;
	const uint64_t w = bit / 32;
	const unsigned s = (unsigned)(bit % 32);
	uint32_t lo, hi = 0;
	memcpy(&lo, base + w * stride, 4);
	uint32_t v = lo >> s;
	if (s + (unsigned)bits > 32) {
		memcpy(&hi, base + (w + 1) * stride, 4);
		v |= hi << (32 - s);
	}
	return v & ((1u << bits) - 1);
}

static int load(const struct qc_hfq *q, const struct qc_hf_source *src, const char *module,
		struct qc_hfq_tensor *out, struct qc_err *err)
{
	const int bits = q->bits;
	const int64_t any2[2] = { -1, -1 };
	const struct qc_hf_tensor *qw, *qz, *sc, *gi = NULL;
	int rc = qc_hfq_need(src, module, "qweight", QC_HFQ_DT(QC_ST_I32), 2, any2, &qw, err);
	if (rc)
		return rc;
	const char *file = qc_hfq_file(src, qw);
	const int64_t rows = (int64_t)qw->t->shape[0], n = (int64_t)qw->t->shape[1];
	if (rows <= 0 || n <= 0 || (rows * 32) % bits || (n * bits) % 32)
		return qc_err_set(err, QC_EFORMAT, file, qw->name, (int64_t)qw->t->hdr_off,
				  "shape [%lld, %lld] is empty or does not pack %d-bit values", (long long)rows, (long long)n, bits);
	const int64_t k = rows * 32 / bits;
	const int64_t gs = q->group_size > 0 ? q->group_size : k;
	const int64_t g = (k + gs - 1) / gs;
	const int64_t want_s[2] = { g, n }, want_z[2] = { g, n * bits / 32 }, want_g[1] = { k };
	rc = qc_hfq_need(src, module, "scales", QC_HFQ_DT_FLOAT, 2, want_s, &sc, err);
	if (!rc)
		rc = qc_hfq_need(src, module, "qzeros", QC_HFQ_DT(QC_ST_I32), 2, want_z, &qz, err);
	if (!rc && qc_hfq_find(src, module, "g_idx"))
		rc = qc_hfq_need(src, module, "g_idx", QC_HFQ_DT(QC_ST_I32) | QC_HFQ_DT(QC_ST_I64), 1, want_g, &gi, err);
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
	rc = qc_hfq_groups(src, gi, k, gs, g, &dn.perm, bgroup, err);
	if (rc)
		goto out;
	const int add = q->v2_zeros ? 0 : 1;
	const int64_t nb = k / 32;
	for (int64_t r = 0; r < n; r++) {
		uint8_t *c = dn.codes + r * k;
		for (int64_t j = 0; j < k; j++)
			c[j] = (uint8_t)field(qw->data + r * 4, (uint64_t)n * 4, (uint64_t)(dn.perm ? dn.perm[j] : j), bits);
		for (int64_t b = 0; b < nb; b++) {
			const uint64_t gr = (uint64_t)bgroup[b];
			dn.d[r * nb + b] = qc_hfq_f32_at(sc, gr * (uint64_t)n + (uint64_t)r);
			dn.z[r * nb + b] = (int16_t)(field(qz->data + gr * (uint64_t)want_z[1] * 4, 4, (uint64_t)r, bits) + add);
		}
	}
	rc = qc_hfq_emit(&dn, bits <= 4 ? QC_TYPE_HQ4 : QC_TYPE_HQ8, out, err);
out:
	free(bgroup);
	qc_hfq_dense_free(&dn);
	return rc;
}

const struct qc_hfq_ops qc_hfq_gptq_ops = { "gptq", parse, rule, present, load };
