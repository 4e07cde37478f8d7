/* hfq_ct.c — compressed-tensors checkpoints (llm-compressor output) into hq4 / hq8 /
 * f8_e4m3 / nvfp4 rows.
 *
 * Owns: config_groups / ignore / format parsing, target matching (exact name, class
 * "Linear", "re:" = Python re.match through PCRE2, the library's precedence) and the
 * per-format tensor layouts (listed above load()).
 * W8A8 FP8 groups (float 8-bit weights per tensor or channel with float 8-bit
 * input_activations, static per tensor or dynamic per token) become f8_a8 rows that
 * carry the activation scale.
 * Non-goals: other activation schemes (int8 W8A8, W4A4, per-group activations: refused,
 * since running them weight-only is not the calibrated model), kv-cache schemes
 * (ignored: the runtime's K/V cache has its own), sparse formats, dynamic weights.
 * Behaviour matched: compressed-tensors compressors (pack_to_int32, pack_fp4_to_uint8),
 * apply_quantization_config, forward.py _dequantize (facts only).
 */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hfq_scheme.h"

enum ct_strategy { CT_TENSOR, CT_CHANNEL, CT_GROUP, CT_BLOCK, CT_TENSOR_GROUP };
enum ct_format { CT_PACK, CT_NAIVE, CT_FLOAT, CT_NVFP4, CT_DENSE };

static const char *const strategy_names[] = { "tensor", "channel", "group", "block", "tensor_group" };
static const struct {
	const char *name;
	enum ct_format f;
} formats[] = {
	{ "pack-quantized", CT_PACK },   { "naive-quantized", CT_NAIVE }, { "int-quantized", CT_NAIVE },
	{ "float-quantized", CT_FLOAT }, { "nvfp4-pack-quantized", CT_NVFP4 }, { "dense", CT_DENSE },
};

static const char *format_name(int f)
{
	for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
		if ((int)formats[i].f == f)
			return formats[i].name;
	return "?";
}

static int parse_format(const cJSON *f, int def, int *out, const char *path, struct qc_err *err)
{
	if (!f || cJSON_IsNull(f)) {
		*out = def;
		return def < 0 ? qc_err_set(err, QC_EFORMAT, path, NULL, -1, "compressed-tensors: no format") : QC_OK;
	}
	if (!cJSON_IsString(f))
		return qc_err_set(err, QC_EFORMAT, path, NULL, -1, "compressed-tensors format is not a string");
	for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
		if (strcmp(formats[i].name, f->valuestring) == 0) {
			*out = formats[i].f;
			return QC_OK;
		}
	}
	return qc_err_set(err, QC_EUNSUPPORTED, path, NULL, -1, "compressed-tensors format \"%.48s\" is not supported",
			  f->valuestring);
}

static int parse_group(const cJSON *g, const char *gname, int def_format, struct qc_hfq_ct_group *o,
		       const char *path, struct qc_err *err)
{
	const cJSON *w = cJSON_GetObjectItemCaseSensitive(g, "weights");
	const cJSON *targets;
	if (!cJSON_IsObject(g) || !cJSON_IsObject(w))
		return qc_err_set(err, QC_EUNSUPPORTED, path, NULL, -1,
				  "config_groups.%.64s: no weights scheme (activation-only quantization)", gname);
	int rc = qc_hfq_strings(g, "targets", &targets, path, err);
	if (rc)
		return rc;
	o->targets = targets;
	int64_t bits, gs;
	bool dynamic = false;
	rc = qc_hfq_int(w, "num_bits", 8, 1, 8, &bits, path, err);
	if (!rc)
		rc = qc_hfq_bool(w, "symmetric", true, &o->symmetric, path, err);
	if (!rc)
		rc = qc_hfq_int(w, "group_size", 0, 0, 1 << 20, &gs, path, err);
	if (!rc)
		rc = qc_hfq_bool(w, "dynamic", false, &dynamic, path, err);
	if (!rc)
		rc = parse_format(cJSON_GetObjectItemCaseSensitive(g, "format"), def_format, &o->format, path, err);
	if (rc)
		return rc;
	if (dynamic)
		return qc_err_set(err, QC_EUNSUPPORTED, path, NULL, -1, "config_groups.%.64s: dynamic weight quantization",
				  gname);
	o->num_bits = (int)bits;
	o->group_size = gs;
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(w, "type");
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(w, "strategy");
	if (!cJSON_IsString(type) || (strcmp(type->valuestring, "int") != 0 && strcmp(type->valuestring, "float") != 0))
		return qc_err_set(err, QC_EUNSUPPORTED, path, NULL, -1, "config_groups.%.64s: weights type must be int or float",
				  gname);
	o->is_float = strcmp(type->valuestring, "float") == 0;
	o->strategy = -1;
	for (int i = 0; cJSON_IsString(st) && i < (int)(sizeof strategy_names / sizeof strategy_names[0]); i++)
		if (strcmp(st->valuestring, strategy_names[i]) == 0)
			o->strategy = i;
	if (o->strategy < 0)
		return qc_err_set(err, QC_EUNSUPPORTED, path, NULL, -1, "config_groups.%.64s: weights strategy \"%.32s\"",
				  gname, cJSON_IsString(st) ? st->valuestring : "?");
	if ((o->strategy == CT_GROUP || o->strategy == CT_TENSOR_GROUP) && gs <= 0)
		return qc_err_set(err, QC_EFORMAT, path, NULL, -1, "config_groups.%.64s: group strategy without group_size",
				  gname);
	if (o->strategy == CT_BLOCK) {
		/* [rows, cols] in recent releases, "RxC" in older ones */
		const cJSON *bs = cJSON_GetObjectItemCaseSensitive(w, "block_structure");
		const cJSON *a = cJSON_GetArrayItem(bs, 0), *b = cJSON_GetArrayItem(bs, 1);
		double r = -1, c = -1;
		if (cJSON_IsArray(bs) && cJSON_GetArraySize(bs) == 2 && cJSON_IsNumber(a) && cJSON_IsNumber(b)) {
			r = a->valuedouble;
			c = b->valuedouble;
		} else if (cJSON_IsString(bs)) {
			unsigned long long ur, uc;
			char tail;
			if (sscanf(bs->valuestring, "%llux%llu%c", &ur, &uc, &tail) == 2 && ur <= 1u << 20 && uc <= 1u << 20) {
				r = (double)ur;
				c = (double)uc;
			}
		}
		if (!(r >= 1 && r <= 1 << 20 && c >= 1 && c <= 1 << 20) || r != (double)(int64_t)r || c != (double)(int64_t)c)
			return qc_err_set(err, QC_EFORMAT, path, NULL, -1,
					  "config_groups.%.64s: block_structure must be [rows, cols] or \"RxC\"", gname);
		o->block_n = (int64_t)r;
		o->block_k = (int64_t)c;
	}
	/* which (format, type, strategy) combinations this decoder knows */
	const bool ok = o->format == CT_DENSE ||
			(o->format == CT_NVFP4 ? o->is_float && bits == 4 && o->strategy == CT_TENSOR_GROUP && gs == 16
			 : o->is_float ? bits == 8 && o->strategy != CT_TENSOR_GROUP && (o->format == CT_FLOAT || o->format == CT_NAIVE)
				       : o->strategy != CT_TENSOR_GROUP && o->strategy != CT_BLOCK &&
						 (o->format == CT_PACK || o->format == CT_NAIVE));
	if (!ok)
		return qc_err_set(err, QC_EUNSUPPORTED, path, NULL, -1,
				  "config_groups.%.64s: %s %lld-bit %s weights in format %s", gname, o->is_float ? "float" : "int",
				  (long long)bits, strategy_names[o->strategy], format_name(o->format));
	/* Quantized activations: W8A8 FP8 (float 8-bit weights per tensor or channel, float
	   8-bit activations with a static per-tensor input_scale or dynamic per-token
	   scales) becomes f8_a8, whose every matmul rounds its activations the same way
	   (quant/act_fp8.h). Any other activation scheme would run weight-only, not as the
	   checkpoint was calibrated, so it is refused. */
	const cJSON *ia = cJSON_GetObjectItemCaseSensitive(g, "input_activations");
	o->act = 0;
	if (ia && !cJSON_IsNull(ia)) {
		const cJSON *at = cJSON_GetObjectItemCaseSensitive(ia, "type");
		const cJSON *ab = cJSON_GetObjectItemCaseSensitive(ia, "num_bits");
		const cJSON *as = cJSON_GetObjectItemCaseSensitive(ia, "strategy");
		const cJSON *ad = cJSON_GetObjectItemCaseSensitive(ia, "dynamic");
		const bool dyn = cJSON_IsTrue(ad) || (cJSON_IsString(ad) && strcmp(ad->valuestring, "local") == 0);
		const bool a_fp8 = cJSON_IsString(at) && strcmp(at->valuestring, "float") == 0 && cJSON_IsNumber(ab) &&
				   ab->valuedouble == 8 && cJSON_IsString(as);
		const bool w_fp8 = o->is_float && bits == 8 && o->format != CT_NVFP4 && o->format != CT_DENSE &&
				   (o->strategy == CT_TENSOR || o->strategy == CT_CHANNEL);
		if (a_fp8 && w_fp8 && !dyn && strcmp(as->valuestring, "tensor") == 0 && !cJSON_IsTrue(ad))
			o->act = 1;
		else if (a_fp8 && w_fp8 && cJSON_IsTrue(ad) && strcmp(as->valuestring, "token") == 0)
			o->act = 2;
		else
			return qc_err_set(err, QC_EUNSUPPORTED, path, NULL, -1,
					  "config_groups.%.64s: quantized activations (input_activations: %.16s %d-bit, "
					  "%.16s, %s) with %s %lld-bit %s weights: of the activation schemes only W8A8 FP8 "
					  "runs (float 8-bit weights per tensor or channel, float 8-bit activations static "
					  "per tensor or dynamic per token); running this one weight-only would not be the "
					  "model it was calibrated as",
					  gname, cJSON_IsString(at) ? at->valuestring : "?",
					  cJSON_IsNumber(ab) ? (int)ab->valuedouble : 0, cJSON_IsString(as) ? as->valuestring : "?",
					  dyn ? "dynamic scales" : "static input_scale", o->is_float ? "float" : "int",
					  (long long)bits, strategy_names[o->strategy]);
	}
	return QC_OK;
}

static int parse(struct qc_hfq *q, const char *path, struct qc_err *err)
{
	int def_format = -1;
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(q->cfg, "format");
	int rc = (f && !cJSON_IsNull(f)) ? parse_format(f, -1, &def_format, path, err) : QC_OK;
	if (!rc)
		rc = qc_hfq_strings(q->cfg, "ignore", &q->ignore, path, err);
	if (rc)
		return rc;
	const cJSON *status = cJSON_GetObjectItemCaseSensitive(q->cfg, "quantization_status");
	if (cJSON_IsString(status) && strcmp(status->valuestring, "compressed") != 0)
		return qc_err_set(err, QC_EUNSUPPORTED, path, NULL, -1,
				  "quantization_status \"%.32s\" (only compressed checkpoints)", status->valuestring);
	const cJSON *sp = cJSON_GetObjectItemCaseSensitive(q->cfg, "sparsity_config");
	const cJSON *spf = cJSON_GetObjectItemCaseSensitive(sp, "format");
	if (cJSON_IsObject(sp) && cJSON_IsString(spf) && strcmp(spf->valuestring, "dense") != 0)
		return qc_err_set(err, QC_EUNSUPPORTED, path, NULL, -1, "sparsity_config format \"%.32s\"", spf->valuestring);
	const cJSON *groups = cJSON_GetObjectItemCaseSensitive(q->cfg, "config_groups");
	if (!cJSON_IsObject(groups))
		return qc_err_set(err, QC_EFORMAT, path, NULL, -1, "compressed-tensors: config_groups missing");
	const cJSON *g;
	cJSON_ArrayForEach(g, groups) {
		if (q->n_groups == QC_HFQ_MAX_GROUPS)
			return qc_err_set(err, QC_EUNSUPPORTED, path, NULL, -1, "more than %d config_groups", QC_HFQ_MAX_GROUPS);
		rc = parse_group(g, g->string ? g->string : "?", def_format, &q->groups[q->n_groups], path, err);
		if (rc)
			return rc;
		q->n_groups++;
	}
	return QC_OK;
}

/* compressed-tensors is_match for a linear module: name, "re:" prefix match, class. */
static bool target_match(const char *t, const char *module)
{
	if (strcmp(t, "Linear") == 0 || strcmp(t, module) == 0)
		return true;
	if (strncmp(t, "re:", 3) != 0)
		return false;
	int ec;
	PCRE2_SIZE eo;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)(t + 3), PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
	if (!re)
		return false; /* an invalid pattern matches nothing (the fuzz harness feeds these) */
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
	bool hit = md && pcre2_match(re, (PCRE2_SPTR)module, PCRE2_ZERO_TERMINATED, 0, PCRE2_ANCHORED, md, NULL) >= 0;
	pcre2_match_data_free(md);
	pcre2_code_free(re);
	return hit;
}

static bool list_match(const cJSON *list, const char *module)
{
	const cJSON *e;
	cJSON_ArrayForEach(e, list)
		if (target_match(e->valuestring, module))
			return true;
	return false;
}

/* compressed-tensors' precedence (apply_quantization_config): each target string maps
 * to the last group listing it; of the targets matching a module, names and classes
 * come before "re:" patterns, then byte order; the first decides. */
static bool target_before(const char *a, const char *b)
{
	const bool ra = strncmp(a, "re:", 3) == 0, rb = strncmp(b, "re:", 3) == 0;
	return ra != rb ? !ra : strcmp(a, b) <= 0;
}

static const struct qc_hfq_ct_group *group_of(const struct qc_hfq *q, const char *module)
{
	if (q->ignore && list_match(q->ignore, module))
		return NULL;
	const struct qc_hfq_ct_group *best = NULL;
	const char *best_t = NULL;
	for (int i = 0; i < q->n_groups; i++) {
		const cJSON *e;
		cJSON_ArrayForEach(e, q->groups[i].targets) {
			if (target_match(e->valuestring, module) && (!best_t || target_before(e->valuestring, best_t))) {
				best = &q->groups[i];
				best_t = e->valuestring;
			}
		}
	}
	return best && best->format != CT_DENSE ? best : NULL;
}

static bool rule(const struct qc_hfq *q, const char *module)
{
	return group_of(q, module) != NULL;
}

static bool present(const struct qc_hfq *q, const struct qc_hf_source *src, const char *module)
{
	(void)q;
	return qc_hfq_find(src, module, "weight_packed") || qc_hfq_find(src, module, "weight_scale");
}

/* Scale / zero-point tensor shape of a strategy: [rows, cols] (tensor: 1 element). */
static int param_shape(const struct qc_hfq_ct_group *g, int64_t n, int64_t k, int64_t *rows, int64_t *cols)
{
	*rows = n;
	*cols = 1;
	if (g->strategy == CT_TENSOR) {
		*rows = 1;
	} else if (g->strategy == CT_GROUP || g->strategy == CT_TENSOR_GROUP) {
		*cols = (k + g->group_size - 1) / g->group_size;
	} else if (g->strategy == CT_BLOCK) {
		*rows = (n + g->block_n - 1) / g->block_n;
		*cols = (k + g->block_k - 1) / g->block_k;
	}
	return QC_OK;
}

/* weight_scale / weight_zero_point: the strategy's element count, as [r, c], [r] or []. */
static int need_param(const struct qc_hf_source *src, const char *module, const char *suffix, uint32_t dtypes,
		      int64_t rows, int64_t cols, const struct qc_hf_tensor **t, struct qc_err *err)
{
	const int64_t want[2] = { rows, cols };
	const struct qc_hf_tensor *x = qc_hfq_find(src, module, suffix);
	if (x && (x->t->n_dims < 2 && x->t->n_elems == (uint64_t)(rows * cols) && (cols == 1 || rows == 1))) {
		const int64_t w1[1] = { rows * cols };
		return x->t->n_dims == 0 ? qc_hfq_need(src, module, suffix, dtypes, 0, w1, t, err)
					 : qc_hfq_need(src, module, suffix, dtypes, 1, w1, t, err);
	}
	return qc_hfq_need(src, module, suffix, dtypes, 2, want, t, err);
}

/* Tensors per module, by format:
 *   pack-quantized: weight_packed I32 [N, ceil(K/(32/b))], value c at bits b*(c%per) of
 *     word c/per, stored q + 2^(b-1); weight_shape [2]; weight_zero_point packed the
 *     same way along N ([ceil(N/per), G]) or plain int8; weight_g_idx I32 [K] (actorder)
 *   naive-quantized / int-quantized: weight I8 [N, K] (signed q), plain zero points
 *   float-quantized: weight F8_E4M3 [N, K]; weight_scale per tensor [1], channel [N, 1],
 *     group [N, K/g] or block [ceil(N/bn), ceil(K/bk)]; W8A8 static: input_scale [1]
 *   nvfp4-pack-quantized: weight_packed U8 [N, K/2] (element 2j low nibble),
 *     weight_scale F8_E4M3 [N, K/16], weight_global_scale F32 [1];
 *     W = e2m1(q) * (f32(scale) / global_scale), the per-16 quotient kept in the block.
 * Int dequantization is (q - zp) * scale; float, q * scale. */
static int load(const struct qc_hfq *q, const struct qc_hf_source *src, const char *module,
		struct qc_hfq_tensor *out, struct qc_err *err)
{
	const struct qc_hfq_ct_group *g = group_of(q, module);
	const int bits = g->num_bits, per = 32 / bits, offset = 1 << (bits - 1);
	const int64_t any2[2] = { -1, -1 };
	const struct qc_hf_tensor *w, *sc, *zp = NULL, *gi = NULL, *gsc = NULL;
	int64_t n, k;
	int rc;
	if (g->format == CT_PACK) {
		const struct qc_hf_tensor *shape;
		const int64_t want2[1] = { 2 };
		rc = qc_hfq_need(src, module, "weight_shape", QC_HFQ_DT(QC_ST_I64) | QC_HFQ_DT(QC_ST_I32), 1, want2, &shape, err);
		if (rc)
			return rc;
		n = qc_hfq_int_at(shape, 0);
		k = qc_hfq_int_at(shape, 1);
		if (n <= 0 || k <= 0 || n > (1 << 30) || k > (1 << 30))
			return qc_err_set(err, QC_EFORMAT, qc_hfq_file(src, shape), shape->name, (int64_t)shape->t->data_off,
					  "weight_shape [%lld, %lld] out of range", (long long)n, (long long)k);
		const int64_t want_w[2] = { n, (k + per - 1) / per };
		rc = qc_hfq_need(src, module, "weight_packed", QC_HFQ_DT(QC_ST_I32), 2, want_w, &w, err);
	} else if (g->format == CT_NVFP4) {
		rc = qc_hfq_need(src, module, "weight_packed", QC_HFQ_DT(QC_ST_U8), 2, any2, &w, err);
		n = rc ? 0 : (int64_t)w->t->shape[0];
		k = rc ? 0 : (int64_t)w->t->shape[1] * 2;
	} else {
		rc = qc_hfq_need(src, module, "weight", QC_HFQ_DT(g->is_float ? QC_ST_F8_E4M3 : QC_ST_I8), 2, any2, &w, err);
		n = rc ? 0 : (int64_t)w->t->shape[0];
		k = rc ? 0 : (int64_t)w->t->shape[1];
	}
	if (rc)
		return rc;
	const char *file = qc_hfq_file(src, w);
	int64_t pr, pc;
	param_shape(g, n, k, &pr, &pc);
	if ((g->strategy == CT_GROUP || g->strategy == CT_TENSOR_GROUP) && k % g->group_size)
		return qc_err_set(err, QC_EUNSUPPORTED, file, w->name, (int64_t)w->t->hdr_off,
				  "group_size %lld does not divide in_features %lld", (long long)g->group_size, (long long)k);
	if (g->strategy == CT_BLOCK && g->block_k % 32)
		return qc_err_set(err, QC_EUNSUPPORTED, file, w->name, (int64_t)w->t->hdr_off,
				  "block_structure columns %lld are not a multiple of 32", (long long)g->block_k);
	rc = need_param(src, module, "weight_scale", g->format == CT_NVFP4 ? QC_HFQ_DT(QC_ST_F8_E4M3) : QC_HFQ_DT_FLOAT,
			pr, pc, &sc, err);
	if (!rc && g->format == CT_NVFP4)
		rc = need_param(src, module, "weight_global_scale", QC_HFQ_DT_FLOAT, 1, 1, &gsc, err);
	if (!rc && !g->is_float && !g->symmetric) {
		const struct qc_hf_tensor *z = qc_hfq_find(src, module, "weight_zero_point");
		const bool packed = g->format == CT_PACK && z && z->t->dtype == QC_ST_I32 && g->strategy != CT_TENSOR;
		if (packed) {
			const int64_t want_z[2] = { (n + per - 1) / per, pc };
			rc = qc_hfq_need(src, module, "weight_zero_point", QC_HFQ_DT(QC_ST_I32), 2, want_z, &zp, err);
		} else {
			rc = need_param(src, module, "weight_zero_point", QC_HFQ_DT(QC_ST_I8) | QC_HFQ_DT(QC_ST_I32), pr, pc, &zp, err);
		}
	}
	if (!rc && qc_hfq_find(src, module, "weight_g_idx")) {
		const int64_t want_g[1] = { k };
		rc = qc_hfq_need(src, module, "weight_g_idx", QC_HFQ_DT(QC_ST_I32) | QC_HFQ_DT(QC_ST_I64), 1, want_g, &gi, err);
		if (!rc && g->strategy != CT_GROUP)
			rc = qc_err_set(err, QC_EUNSUPPORTED, file, gi->name, (int64_t)gi->t->hdr_off,
					"weight_g_idx with strategy %s", strategy_names[g->strategy]);
	}
	const struct qc_hf_tensor *isc = NULL;
	float a = 0.0f;
	if (!rc && g->act == 1) {
		rc = need_param(src, module, "input_scale", QC_HFQ_DT_FLOAT, 1, 1, &isc, err);
		a = rc ? 0.0f : qc_hfq_f32_at(isc, 0);
		if (!rc && !(a > 0.0f && a < 3.0e38f)) /* also refuses NaN */
			rc = qc_err_set(err, QC_EFORMAT, qc_hfq_file(src, isc), isc->name, (int64_t)isc->t->data_off,
					"input_scale %g is not a positive finite number", (double)a);
	}
	if (rc)
		return rc;
	const bool fp = g->format == CT_NVFP4;
	struct qc_hfq_dense dn;
	rc = qc_hfq_dense_new(&dn, n, k, fp ? 16 : 32, !g->is_float, file, w->name, err);
	if (rc)
		return rc;
	const int64_t nb = k / 32;
	int32_t *bgroup = malloc((size_t)nb * sizeof *bgroup);
	if (!bgroup) {
		qc_hfq_dense_free(&dn);
		return qc_err_set(err, QC_ENOMEM, file, w->name, -1, "out of memory");
	}
	if (g->strategy == CT_GROUP)
		rc = qc_hfq_groups(src, gi, k, g->group_size, pc, &dn.perm, bgroup, err);
	if (rc)
		goto out;
	const float gscale = gsc ? qc_hfq_f32_at(gsc, 0) : 1.0f;
	for (int64_t r = 0; r < n; r++) {
		uint8_t *c = dn.codes + r * k;
		for (int64_t j = 0; j < k; j++) {
			const int64_t col = dn.perm ? dn.perm[j] : j;
			if (g->format == CT_PACK) {
				uint32_t word;
				memcpy(&word, w->data + ((uint64_t)r * (uint64_t)((k + per - 1) / per) + (uint64_t)(col / per)) * 4, 4);
				c[j] = (uint8_t)((word >> (bits * (col % per))) & ((1u << bits) - 1));
			} else if (fp) {
				const uint8_t byte = w->data[(uint64_t)r * (uint64_t)(k / 2) + (uint64_t)col / 2];
				c[j] = col % 2 ? byte >> 4 : byte & 0xf;
			} else if (g->is_float) {
				c[j] = w->data[(uint64_t)r * (uint64_t)k + (uint64_t)col];
			} else {
				const uint64_t at = (uint64_t)r * (uint64_t)k + (uint64_t)col;
				const int v = (int8_t)w->data[at] + offset;
				if (v < 0 || v >= 1 << bits) {
					rc = qc_err_set(err, QC_EFORMAT, file, w->name, (int64_t)(w->t->data_off + at),
							"value %d outside the %d-bit range", v - offset, bits);
					goto out;
				}
				c[j] = (uint8_t)v;
			}
		}
		for (int64_t b = 0; b < (fp ? 2 * nb : nb); b++) {
			int64_t pi; /* index of this block's scale in the [pr, pc] parameter */
			if (fp)
				pi = r * pc + b * 16 / g->group_size;
			else if (g->strategy == CT_TENSOR)
				pi = 0;
			else if (g->strategy == CT_CHANNEL)
				pi = r;
			else if (g->strategy == CT_GROUP)
				pi = r * pc + bgroup[b];
			else
				pi = (r / g->block_n) * pc + b * 32 / g->block_k;
			const float s = qc_hfq_f32_at(sc, (uint64_t)pi);
			dn.d[r * (fp ? 2 * nb : nb) + b] = fp ? s / gscale : s;
			if (g->is_float)
				continue;
			int64_t z = offset;
			if (zp && zp->t->dtype == QC_ST_I32 && zp->t->n_dims == 2 && g->format == CT_PACK &&
			    g->strategy != CT_TENSOR) {
				uint32_t word;
				const int64_t gcol = pi % pc;
				memcpy(&word, zp->data + ((uint64_t)(r / per) * (uint64_t)pc + (uint64_t)gcol) * 4, 4);
				z = (word >> (bits * (r % per))) & ((1u << bits) - 1);
			} else if (zp) {
				z = qc_hfq_int_at(zp, (uint64_t)pi) + offset;
			}
			dn.z[r * nb + b] = (int16_t)z;
		}
	}
	dn.a = a;
	rc = qc_hfq_emit(&dn, fp ? QC_TYPE_NVFP4 : g->act ? QC_TYPE_F8A8 : g->is_float ? QC_TYPE_F8E4M3
							     : bits <= 4 ? QC_TYPE_HQ4 : QC_TYPE_HQ8,
			 out, err);
out:
	free(bgroup);
	qc_hfq_dense_free(&dn);
	return rc;
}

const struct qc_hfq_ops qc_hfq_ct_ops = { "compressed-tensors", parse, rule, present, load };
