/* hfq_bnb.c — bitsandbytes checkpoints (transformers BitsAndBytesConfig) into
 * bnb_nf4 / bnb_fp4 rows (4-bit) or hq8 rows (LLM.int8).
 *
 * Owns: the serialized QuantState (tensors listed above load4), double-quant
 * resolution in float32 as bnb does it, the quant_map check, llm_int8_skip_modules.
 * 8-bit: W = q*SCB/127 stored as hq8 with d = SCB*(1/127), ≤ 1 ulp from bnb's
 * (q*SCB)*(1/127) (docs/hf-quant.md). Non-goals: quant_storage other than bytes.
 * Behaviour matched: bitsandbytes functional.dequantize_4bit / dequantize_blockwise /
 * int8_vectorwise_dequant, transformers replace_with_bnb_linear skip rule (facts only).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dequant_hfq.h"
#include "cursor.h"
#include "hfq_scheme.h"

#define QS_JSON_MAX (1u << 20)

static int parse(struct qc_hfq *q, const char *path, struct qc_err *err)
{
	int rc = qc_hfq_bool(q->cfg, "load_in_4bit", false, &q->bnb_4bit, path, err);
	if (!rc)
		rc = qc_hfq_bool(q->cfg, "load_in_8bit", false, &q->bnb_8bit, path, err);
	if (!rc)
		rc = qc_hfq_strings(q->cfg, "llm_int8_skip_modules", &q->skip, path, err);
	if (rc)
		return rc;
	if (q->bnb_4bit == q->bnb_8bit)
		return qc_err_set(err, QC_EFORMAT, path, NULL, -1,
				  "bitsandbytes: exactly one of load_in_4bit and load_in_8bit must be true");
	return QC_OK;
}

static bool rule(const struct qc_hfq *q, const char *module)
{
	return !q->skip || !qc_hfq_skip_match(q->skip, module);
}

static const char *state_suffix(const struct qc_hf_source *src, const char *module, const float **table,
				enum qc_type *type)
{
	if (qc_hfq_find(src, module, "weight.quant_state.bitsandbytes__nf4")) {
		*table = qc_bnb_nf4;
		*type = QC_TYPE_BNB_NF4;
		return "weight.quant_state.bitsandbytes__nf4";
	}
	if (qc_hfq_find(src, module, "weight.quant_state.bitsandbytes__fp4")) {
		*table = qc_bnb_fp4;
		*type = QC_TYPE_BNB_FP4;
		return "weight.quant_state.bitsandbytes__fp4";
	}
	return NULL;
}

static bool present(const struct qc_hfq *q, const struct qc_hf_source *src, const char *module)
{
	const float *table;
	enum qc_type type;
	if (q->bnb_8bit)
		return qc_hfq_find(src, module, "SCB") != NULL;
	return state_suffix(src, module, &table, &type) != NULL;
}

/* Exact non-negative integer member of the quant-state JSON. */
static int js_int(const cJSON *o, const char *key, bool need, int64_t lo, int64_t hi, int64_t *v,
		  const struct qc_hf_source *src, const struct qc_hf_tensor *t, struct qc_err *err)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!it && !need)
		return QC_OK;
	const double x = cJSON_IsNumber(it) ? it->valuedouble : NAN;
	if (!(x >= (double)lo && x <= (double)hi) || x != floor(x))
		return qc_err_set(err, QC_EFORMAT, qc_hfq_file(src, t), t->name, (int64_t)t->t->data_off,
				  "quant state \"%s\": want an integer in [%lld, %lld]", key, (long long)lo, (long long)hi);
	*v = (int64_t)x;
	return QC_OK;
}

struct qstate {
	int64_t blocksize, nested_blocksize, n, k;
	float offset;
	bool nested;
};

static int read_state(const struct qc_hf_source *src, const struct qc_hf_tensor *t, const char *qtype,
		      struct qstate *s, struct qc_err *err)
{
	const char *file = qc_hfq_file(src, t);
	if (t->t->dtype != QC_ST_U8 || t->t->n_bytes > QS_JSON_MAX)
		return qc_err_set(err, QC_EFORMAT, file, t->name, (int64_t)t->t->hdr_off,
				  "quant state must be U8 JSON of at most %u bytes", QS_JSON_MAX);
	cJSON *j = cJSON_ParseWithLength((const char *)t->data, t->t->n_bytes);
	if (!cJSON_IsObject(j)) {
		cJSON_Delete(j);
		return qc_err_set(err, QC_EFORMAT, file, t->name, (int64_t)t->t->data_off, "quant state is not a JSON object");
	}
	int rc = QC_OK;
	const cJSON *qt = cJSON_GetObjectItemCaseSensitive(j, "quant_type");
	const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
	if (!cJSON_IsString(qt) || strcmp(qt->valuestring, qtype) != 0)
		rc = qc_err_set(err, QC_EFORMAT, file, t->name, (int64_t)t->t->data_off,
				"quant state quant_type is not \"%s\"", qtype);
	else if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != 2)
		rc = qc_err_set(err, QC_EFORMAT, file, t->name, (int64_t)t->t->data_off,
				"quant state shape: want [out_features, in_features]");
	if (!rc)
		rc = js_int(j, "blocksize", true, 1, 1 << 20, &s->blocksize, src, t, err);
	if (!rc) {
		const cJSON *a = cJSON_GetArrayItem(shape, 0), *b = cJSON_GetArrayItem(shape, 1);
		const double x = cJSON_IsNumber(a) ? a->valuedouble : -1, y = cJSON_IsNumber(b) ? b->valuedouble : -1;
		if (!(x >= 1 && x <= 1 << 30 && y >= 1 && y <= 1 << 30) || x != floor(x) || y != floor(y))
			rc = qc_err_set(err, QC_EFORMAT, file, t->name, (int64_t)t->t->data_off,
					"quant state shape entries must be integers in [1, 2^30]");
		s->n = (int64_t)x;
		s->k = (int64_t)y;
	}
	s->nested = cJSON_GetObjectItemCaseSensitive(j, "nested_blocksize") != NULL;
	if (!rc && s->nested) {
		rc = js_int(j, "nested_blocksize", true, 1, 1 << 20, &s->nested_blocksize, src, t, err);
		const cJSON *off = cJSON_GetObjectItemCaseSensitive(j, "nested_offset");
		if (!rc && (!cJSON_IsNumber(off) || !isfinite(off->valuedouble)))
			rc = qc_err_set(err, QC_EFORMAT, file, t->name, (int64_t)t->t->data_off,
					"quant state nested_offset is not a finite number");
		if (!rc)
			s->offset = (float)off->valuedouble; /* bnb wrote offset.item() of a float32 */
	}
	if (!rc && s->blocksize % 32)
		rc = qc_err_set(err, QC_EUNSUPPORTED, file, t->name, (int64_t)t->t->data_off,
				"blocksize %lld is not a multiple of 32", (long long)s->blocksize);
	cJSON_Delete(j);
	return rc;
}

/* 4-bit tensors per module (bnb QuantState.as_dict(packed=True)): weight (bytes:
 * element 2j in the high nibble of byte j over the flattened [N, K] weight),
 * weight.quant_state.bitsandbytes__<nf4|fp4> (U8 JSON: quant_type, blocksize, shape,
 * dtype, nested_blocksize, nested_offset), weight.absmax (F32 [blocks], or U8 codes
 * with double quant), weight.quant_map (F32 [16], must be bnb's table bit for bit),
 * weight.nested_absmax (F32 [ceil(blocks/nested_blocksize)]), weight.nested_quant_map
 * (F32 [256]); absmax = nested_quant_map[c] * nested_absmax[i / nested_blocksize]
 * + nested_offset, in float32. */
static int load4(const struct qc_hf_source *src, const char *module, struct qc_hfq_tensor *out, struct qc_err *err)
{
	const float *table;
	enum qc_type type;
	const char *suffix = state_suffix(src, module, &table, &type);
	const struct qc_hf_tensor *st = qc_hfq_find(src, module, suffix), *w, *am, *qm, *nam = NULL, *nqm = NULL;
	struct qstate s = { 0 };
	int rc = read_state(src, st, type == QC_TYPE_BNB_NF4 ? "nf4" : "fp4", &s, err);
	if (rc)
		return rc;
	const char *file = qc_hfq_file(src, st);
	struct qc_hfq_dense dn;
	rc = qc_hfq_dense_new(&dn, s.n, s.k, 32, false, file, st->name, err);
	if (rc)
		return rc;
	const uint64_t nk = (uint64_t)s.n * (uint64_t)s.k, nblk = (nk + (uint64_t)s.blocksize - 1) / (uint64_t)s.blocksize;
	const int64_t want_q[1] = { 16 }, want_a[1] = { (int64_t)nblk }, want_nq[1] = { 256 };
	const int64_t any2[2] = { -1, -1 };
	rc = qc_hfq_need(src, module, "weight", ~0u, 2, any2, &w, err);
	if (!rc && w->t->n_bytes != nk / 2)
		rc = qc_err_set(err, QC_EFORMAT, qc_hfq_file(src, w), w->name, (int64_t)w->t->hdr_off,
				"%llu bytes, want %llu (two 4-bit codes per byte of [%lld, %lld])",
				(unsigned long long)w->t->n_bytes, (unsigned long long)(nk / 2), (long long)s.n, (long long)s.k);
	if (!rc)
		rc = qc_hfq_need(src, module, "weight.quant_map", QC_HFQ_DT(QC_ST_F32), 1, want_q, &qm, err);
	if (!rc)
		rc = qc_hfq_need(src, module, "weight.absmax", QC_HFQ_DT(s.nested ? QC_ST_U8 : QC_ST_F32), 1, want_a,
				 &am, err);
	if (!rc && s.nested) {
		const int64_t want_na[1] = { (int64_t)((nblk + (uint64_t)s.nested_blocksize - 1) / (uint64_t)s.nested_blocksize) };
		rc = qc_hfq_need(src, module, "weight.nested_absmax", QC_HFQ_DT(QC_ST_F32), 1, want_na, &nam, err);
		if (!rc)
			rc = qc_hfq_need(src, module, "weight.nested_quant_map", QC_HFQ_DT(QC_ST_F32), 1, want_nq, &nqm, err);
	}
	for (int i = 0; !rc && i < 16; i++) {
		const float v = qc_hfq_f32_at(qm, (uint64_t)i);
		if (memcmp(&v, &table[i], sizeof v) != 0)
			rc = qc_err_set(err, QC_EUNSUPPORTED, qc_hfq_file(src, qm), qm->name, (int64_t)(qm->t->data_off + 4u * (unsigned)i),
					"quant_map[%d] = %.9g is not bitsandbytes' %s value %.9g", i, v,
					qc_types[type].name, table[i]);
	}
	if (rc)
		goto out;
	for (uint64_t e = 0; e < nk; e += 2) {
		const uint8_t byte = w->data[e / 2];
		dn.codes[e] = byte >> 4;
		dn.codes[e + 1] = byte & 0xf;
	}
	for (uint64_t b = 0; b < nk / 32; b++) {
		const uint64_t blk = b * 32 / (uint64_t)s.blocksize;
		float a;
		if (s.nested) {
			a = qc_hfq_f32_at(nqm, am->data[blk]) * qc_hfq_f32_at(nam, blk / (uint64_t)s.nested_blocksize);
			a += s.offset;
		} else {
			a = qc_hfq_f32_at(am, blk);
		}
		dn.d[b] = a;
	}
	rc = qc_hfq_emit(&dn, type, out, err);
out:
	qc_hfq_dense_free(&dn);
	return rc;
}

static int load8(const struct qc_hf_source *src, const char *module, struct qc_hfq_tensor *out, struct qc_err *err)
{
	const int64_t any2[2] = { -1, -1 };
	const struct qc_hf_tensor *w, *scb;
	int rc = qc_hfq_need(src, module, "weight", QC_HFQ_DT(QC_ST_I8), 2, any2, &w, err);
	if (rc)
		return rc;
	const int64_t n = (int64_t)w->t->shape[0], k = (int64_t)w->t->shape[1], want[1] = { n };
	rc = qc_hfq_need(src, module, "SCB", QC_HFQ_DT_FLOAT, 1, want, &scb, err);
	if (rc)
		return rc;
	struct qc_hfq_dense dn;
	rc = qc_hfq_dense_new(&dn, n, k, 32, true, qc_hfq_file(src, w), w->name, err);
	if (rc)
		return rc;
	const uint64_t nk = (uint64_t)n * (uint64_t)k;
	for (uint64_t e = 0; e < nk; e++)
		dn.codes[e] = (uint8_t)((int8_t)w->data[e] + 128);
	for (int64_t r = 0; r < n; r++) {
		const float d = qc_hfq_f32_at(scb, (uint64_t)r) * (1.0f / 127.0f);
		for (int64_t b = 0; b < k / 32; b++) {
			dn.d[r * (k / 32) + b] = d;
			dn.z[r * (k / 32) + b] = 128;
		}
	}
	rc = qc_hfq_emit(&dn, QC_TYPE_HQ8, out, err);
	qc_hfq_dense_free(&dn);
	return rc;
}

static int load(const struct qc_hfq *q, const struct qc_hf_source *src, const char *module,
		struct qc_hfq_tensor *out, struct qc_err *err)
{
	return q->bnb_8bit ? load8(src, module, out, err) : load4(src, module, out, err);
}

const struct qc_hfq_ops qc_hfq_bnb_ops = { "bitsandbytes", parse, rule, present, load };
