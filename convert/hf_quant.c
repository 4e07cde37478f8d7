/* hf_quant.c — entry points of hf_quant.h: pick the scheme from quant_method,
 * dispatch through its ops (hfq_gptq.c, hfq_awq.c, hfq_bnb.c, hfq_ct.c), load plain
 * modules, and load fused pairs.
 * Fused pairs need no scale unification: every normalized block carries its own f32
 * scale, so gate and up rows of different (per-tensor, global) scales sit side by
 * side exactly; only a differing act_perm keeps a pair apart (docs/hf-quant.md).
 * Non-goals: model architecture and names (hf_convert.c).
 */
#include "hf_quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hfq_scheme.h"

static bool none_rule(const struct qc_hfq *q, const char *module)
{
	(void)q;
	(void)module;
	return false;
}

static bool none_present(const struct qc_hfq *q, const struct qc_hf_source *src, const char *module)
{
	(void)q;
	(void)src;
	(void)module;
	return false;
}

const struct qc_hfq_ops qc_hfq_none_ops = { "none", NULL, none_rule, none_present, NULL };

static const struct qc_hfq_ops *const schemes[] = {
	&qc_hfq_none_ops, &qc_hfq_gptq_ops, &qc_hfq_awq_ops, &qc_hfq_bnb_ops, &qc_hfq_ct_ops,
};

int qc_hfq_parse(const cJSON *qcfg, const cJSON *quantize_cfg, struct qc_hfq **out, struct qc_err *err)
{
	*out = NULL;
	const char *path = "config.json";
	const cJSON *cfg = qcfg;
	if (cfg && !cJSON_IsObject(cfg))
		return qc_err_set(err, QC_EFORMAT, path, NULL, -1, "quantization_config is not an object");
	if (!cfg && quantize_cfg) {
		/* AutoGPTQ's quantize_config.json; older ones have no quant_method */
		if (!cJSON_IsObject(quantize_cfg))
			return qc_err_set(err, QC_EFORMAT, "quantize_config.json", NULL, -1, "not a JSON object");
		cfg = quantize_cfg;
		path = "quantize_config.json";
	}
	const char *method = "none";
	if (cfg) {
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(cfg, "quant_method");
		if (m && !cJSON_IsString(m))
			return qc_err_set(err, QC_EFORMAT, path, NULL, -1, "quant_method is not a string");
		method = m ? m->valuestring : cfg == quantize_cfg ? "gptq" : "";
	}
	const struct qc_hfq_ops *ops = NULL;
	for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
		if (strcmp(schemes[i]->name, method) == 0)
			ops = schemes[i];
	if (!ops)
		return qc_err_set(err, QC_EUNSUPPORTED, path, NULL, -1,
				  "quant_method \"%.64s\" is not supported (gptq, awq, bitsandbytes, compressed-tensors)",
				  method);
	struct qc_hfq *q = calloc(1, sizeof *q);
	if (!q)
		return qc_err_set(err, QC_ENOMEM, path, NULL, -1, "out of memory");
	q->ops = ops;
	if (cfg) {
		q->cfg = cJSON_Duplicate(cfg, 1);
		if (!q->cfg) {
			free(q);
			return qc_err_set(err, QC_ENOMEM, path, NULL, -1, "out of memory");
		}
	}
	if (ops->parse) {
		int rc = ops->parse(q, path, err);
		if (rc) {
			qc_hfq_close(q);
			return rc;
		}
	}
	*out = q;
	return QC_OK;
}

int qc_hfq_open(const struct qc_hf_source *src, struct qc_hfq **out, struct qc_err *err)
{
	const cJSON *qcfg = cJSON_GetObjectItemCaseSensitive(src->config, "quantization_config");
	if (cJSON_IsNull(qcfg))
		qcfg = NULL;
	return qc_hfq_parse(qcfg, src->quantize_config, out, err);
}

void qc_hfq_close(struct qc_hfq *q)
{
	if (!q)
		return;
	cJSON_Delete(q->cfg);
	free(q);
}

const char *qc_hfq_method(const struct qc_hfq *q)
{
	return q->ops->name;
}

bool qc_hfq_rule(const struct qc_hfq *q, const char *module)
{
	return q->ops->rule(q, module);
}

bool qc_hfq_is_quantized(const struct qc_hfq *q, const struct qc_hf_source *src, const char *module)
{
	return q->ops->rule(q, module) && q->ops->present(q, src, module);
}

int qc_hfq_load(const struct qc_hfq *q, const struct qc_hf_source *src, const char *module,
		struct qc_hfq_tensor *out, struct qc_err *err)
{
	memset(out, 0, sizeof *out);
	int rc = qc_hfq_is_quantized(q, src, module) ? q->ops->load(q, src, module, out, err)
						     : qc_hfq_load_plain(src, module, out, err);
	if (rc)
		qc_hfq_tensor_free(out);
	return rc;
}

static bool same_perm(const struct qc_hfq_tensor *a, const struct qc_hfq_tensor *b)
{
	if (!a->act_perm || !b->act_perm)
		return a->act_perm == b->act_perm;
	return memcmp(a->act_perm, b->act_perm, (size_t)a->n_cols * sizeof *a->act_perm) == 0;
}

int qc_hfq_load_pair(const struct qc_hfq *q, const struct qc_hf_source *src, const char *gate_module,
		     const char *up_module, struct qc_hfq_tensor *gate, struct qc_hfq_tensor *up,
		     struct qc_hfq_fuse_stats *st, struct qc_err *err)
{
	memset(st, 0, sizeof *st);
	memset(up, 0, sizeof *up);
	int rc = qc_hfq_load(q, src, gate_module, gate, err);
	if (rc)
		return rc;
	rc = qc_hfq_load(q, src, up_module, up, err);
	if (rc) {
		qc_hfq_tensor_free(gate);
		return rc;
	}
	if (gate->type != up->type || gate->n_cols != up->n_cols)
		rc = qc_err_set(err, QC_EUNSUPPORTED, src->path, up_module, -1,
				"cannot fuse with %s: %s [%lld x %lld] vs %s [%lld x %lld]", gate_module,
				qc_types[gate->type].name, (long long)gate->n_rows, (long long)gate->n_cols,
				qc_types[up->type].name, (long long)up->n_rows, (long long)up->n_cols);
	else if (!same_perm(gate, up))
		rc = qc_err_set(err, QC_EUNSUPPORTED, src->path, up_module, -1,
				"cannot fuse with %s: act-order permutations differ", gate_module);
	if (rc) {
		qc_hfq_tensor_free(gate);
		qc_hfq_tensor_free(up);
	}
	return rc;
}

void qc_hfq_tensor_free(struct qc_hfq_tensor *t)
{
	if (!t)
		return;
	free(t->data);
	free(t->act_perm);
	memset(t, 0, sizeof *t);
}
