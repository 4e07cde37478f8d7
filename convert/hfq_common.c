/* hfq_common.c — config-field readers, checked tensor lookups, act-order grouping
 * and plain float loads shared by the scheme decoders (see hfq_scheme.h).
 * Every size taken from a file goes through qc_mul_ok; every message names the
 * shard file, the tensor and a byte offset.
 * Non-goals: scheme rules (hfq_<scheme>.c), block layouts (hfq_emit.c).
 */
#include "hfq_scheme.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dequant_hfq.h"
#include "fp16.h"
#include "cursor.h"

int qc_hfq_int(const cJSON *o, const char *key, int64_t def, int64_t lo, int64_t hi, int64_t *v,
	       const char *path, struct qc_err *err)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!it || cJSON_IsNull(it)) {
		*v = def;
		return QC_OK;
	}
	const double x = cJSON_IsNumber(it) ? it->valuedouble : NAN;
	if (!(x >= (double)lo && x <= (double)hi) || x != floor(x))
		return qc_err_set(err, cJSON_IsNumber(it) ? QC_EUNSUPPORTED : QC_EFORMAT, path, NULL, -1,
				  "quantization_config.%s: want an integer in [%lld, %lld]", key, (long long)lo,
				  (long long)hi);
	*v = (int64_t)x;
	return QC_OK;
}

int qc_hfq_bool(const cJSON *o, const char *key, bool def, bool *v, const char *path, struct qc_err *err)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!it || cJSON_IsNull(it)) {
		*v = def;
		return QC_OK;
	}
	if (!cJSON_IsBool(it))
		return qc_err_set(err, QC_EFORMAT, path, NULL, -1, "quantization_config.%s: want true or false", key);
	*v = cJSON_IsTrue(it);
	return QC_OK;
}

int qc_hfq_strings(const cJSON *o, const char *key, const cJSON **v, const char *path, struct qc_err *err)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
	*v = NULL;
	if (!it || cJSON_IsNull(it))
		return QC_OK;
	if (!cJSON_IsArray(it))
		return qc_err_set(err, QC_EFORMAT, path, NULL, -1, "quantization_config.%s: want a list of strings", key);
	int n = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, it) {
		if (!cJSON_IsString(e) || ++n > QC_HFQ_MAX_PATTERNS)
			return qc_err_set(err, QC_EFORMAT, path, NULL, -1,
					  "quantization_config.%s: want at most %d strings", key, QC_HFQ_MAX_PATTERNS);
	}
	*v = it;
	return QC_OK;
}

const struct qc_hf_tensor *qc_hfq_find(const struct qc_hf_source *src, const char *module, const char *suffix)
{
	char name[QC_HFQ_NAME_MAX];
	if ((size_t)snprintf(name, sizeof name, "%s.%s", module, suffix) >= sizeof name)
		return NULL;
	return qc_hf_find(src, name);
}

const char *qc_hfq_file(const struct qc_hf_source *src, const struct qc_hf_tensor *t)
{
	return src->shards[t->shard].name;
}

static void shape_str(const struct qc_st_tensor *t, char *buf, size_t len)
{
	size_t o = (size_t)snprintf(buf, len, "[");
	for (uint32_t i = 0; i < t->n_dims && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%llu", i ? ", " : "", (unsigned long long)t->shape[i]);
	if (o < len)
		snprintf(buf + o, len - o, "]");
}

int qc_hfq_need(const struct qc_hf_source *src, const char *module, const char *suffix, uint32_t dtypes,
		uint32_t n_dims, const int64_t *want, const struct qc_hf_tensor **out, struct qc_err *err)
{
	char name[QC_HFQ_NAME_MAX];
	*out = NULL;
	if ((size_t)snprintf(name, sizeof name, "%s.%s", module, suffix) >= sizeof name)
		return qc_err_set(err, QC_EINVAL, src->path, module, -1, "module name too long");
	const struct qc_hf_tensor *t = qc_hf_find(src, name);
	if (!t)
		return qc_err_set(err, QC_ENOTFOUND, src->path, name, -1, "tensor missing (the scheme needs it)");
	const char *file = qc_hfq_file(src, t);
	if (!(dtypes & QC_HFQ_DT(t->t->dtype)))
		return qc_err_set(err, QC_EFORMAT, file, name, (int64_t)t->t->hdr_off, "unexpected dtype %s",
				  qc_st_dtype_name(t->t->dtype));
	bool ok = t->t->n_dims == n_dims;
	for (uint32_t i = 0; ok && i < n_dims; i++)
		ok = want[i] < 0 || t->t->shape[i] == (uint64_t)want[i];
	if (!ok) {
		char got[128], exp[128];
		shape_str(t->t, got, sizeof got);
		size_t o = (size_t)snprintf(exp, sizeof exp, "[");
		for (uint32_t i = 0; i < n_dims && o < sizeof exp; i++)
			o += want[i] < 0 ? (size_t)snprintf(exp + o, sizeof exp - o, "%s*", i ? ", " : "")
					 : (size_t)snprintf(exp + o, sizeof exp - o, "%s%lld", i ? ", " : "",
							    (long long)want[i]);
		if (o < sizeof exp)
			snprintf(exp + o, sizeof exp - o, "]");
		return qc_err_set(err, QC_EFORMAT, file, name, (int64_t)t->t->hdr_off, "shape %s, want %s", got, exp);
	}
	*out = t;
	return QC_OK;
}

float qc_hfq_f32_at(const struct qc_hf_tensor *t, uint64_t i)
{
	const uint8_t *p = t->data + i * qc_st_dtype_size(t->t->dtype);
	uint16_t h;
	float f;
	if (t->t->dtype == QC_ST_F32) {
		memcpy(&f, p, 4);
		return f;
	}
	if (t->t->dtype == QC_ST_F8_E4M3)
		return qc_e4m3_to_f32(*p);
	memcpy(&h, p, 2);
	return t->t->dtype == QC_ST_F16 ? qc_fp16_to_f32(h) : qc_bf16_to_f32(h);
}

int64_t qc_hfq_int_at(const struct qc_hf_tensor *t, uint64_t i)
{
	const uint32_t sz = qc_st_dtype_size(t->t->dtype);
	const uint8_t *p = t->data + i * sz;
	if (t->t->dtype == QC_ST_U8)
		return *p;
	if (t->t->dtype == QC_ST_I8)
		return (int8_t)*p;
	if (sz == 2) {
		int16_t v;
		memcpy(&v, p, 2);
		return v;
	}
	if (sz == 4) {
		int32_t v;
		memcpy(&v, p, 4);
		return v;
	}
	int64_t v;
	memcpy(&v, p, 8);
	return v;
}

int qc_hfq_groups(const struct qc_hf_source *src, const struct qc_hf_tensor *g_idx, int64_t k,
		  int64_t group_size, int64_t n_groups, int32_t **perm_out, int32_t *bgroup, struct qc_err *err)
{
	*perm_out = NULL;
	int32_t *g = malloc((size_t)k * sizeof *g);
	if (!g)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	bool sorted = true;
	for (int64_t c = 0; c < k; c++) {
		const int64_t v = g_idx ? qc_hfq_int_at(g_idx, (uint64_t)c) : c / group_size;
		if (v < 0 || v >= n_groups) {
			free(g);
			return qc_err_set(err, QC_EFORMAT, qc_hfq_file(src, g_idx), g_idx->name,
					  (int64_t)(g_idx->t->data_off + (uint64_t)c * qc_st_dtype_size(g_idx->t->dtype)),
					  "g_idx[%lld] = %lld outside [0, %lld)", (long long)c, (long long)v,
					  (long long)n_groups);
		}
		g[c] = (int32_t)v;
		if (c && g[c] < g[c - 1])
			sorted = false;
	}
	int32_t *perm = NULL;
	if (!sorted) {
		/* counting sort by group keeps ties in column order (stable) */
		int64_t *start = calloc((size_t)n_groups + 1, sizeof *start);
		perm = malloc((size_t)k * sizeof *perm);
		if (!start || !perm) {
			free(start);
			free(perm);
			free(g);
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		}
		for (int64_t c = 0; c < k; c++)
			start[g[c] + 1]++;
		for (int64_t i = 0; i < n_groups; i++)
			start[i + 1] += start[i];
		for (int64_t c = 0; c < k; c++)
			perm[start[g[c]]++] = (int32_t)c;
		free(start);
	}
	for (int64_t b = 0; b < k / 32; b++) {
		const int32_t g0 = g[perm ? perm[32 * b] : 32 * b];
		for (int j = 1; j < 32; j++) {
			if (g[perm ? perm[32 * b + j] : 32 * b + j] != g0) {
				free(g);
				free(perm);
				return qc_err_set(err, QC_EUNSUPPORTED, g_idx ? qc_hfq_file(src, g_idx) : src->path,
						  g_idx ? g_idx->name : NULL, g_idx ? (int64_t)g_idx->t->data_off : -1,
						  "quantization group changes inside 32-column block %lld (group size %lld "
						  "must be a multiple of 32 and groups must cover whole blocks)",
						  (long long)b, (long long)group_size);
			}
		}
		bgroup[b] = g0;
	}
	free(g);
	*perm_out = perm;
	return QC_OK;
}

int qc_hfq_load_plain(const struct qc_hf_source *src, const char *module, struct qc_hfq_tensor *out,
		      struct qc_err *err)
{
	static const int64_t any2[2] = { -1, -1 };
	const struct qc_hf_tensor *t;
	int rc = qc_hfq_need(src, module, "weight", QC_HFQ_DT_FLOAT, 2, any2, &t, err);
	if (rc)
		return rc;
	out->type = t->t->dtype == QC_ST_F32 ? QC_TYPE_F32 : t->t->dtype == QC_ST_F16 ? QC_TYPE_F16 : QC_TYPE_BF16;
	out->data = malloc(t->t->n_bytes ? t->t->n_bytes : 1);
	if (!out->data)
		return qc_err_set(err, QC_ENOMEM, NULL, t->name, -1, "out of memory");
	memcpy(out->data, t->data, t->t->n_bytes);
	out->size = t->t->n_bytes;
	out->n_rows = (int64_t)t->t->shape[0];
	out->n_cols = (int64_t)t->t->shape[1];
	return QC_OK;
}

bool qc_hfq_skip_match(const cJSON *list, const char *module)
{
	const cJSON *e;
	const char *leaf = strrchr(module, '.');
	leaf = leaf ? leaf + 1 : module;
	cJSON_ArrayForEach(e, list) {
		const char *s = e->valuestring;
		const size_t n = strlen(s);
		if (strcmp(s, leaf) == 0 || strcmp(s, module) == 0)
			return true;
		for (const char *p = strstr(module, s); n && p; p = strstr(p + 1, s))
			if (p[n] == '.')
				return true;
	}
	return false;
}
