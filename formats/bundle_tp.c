/* bundle_tp.c — the manifest's "tp" object and the ranks' members (see bundle_tp.h).
 * Nothing is trusted: numbers must be exact integers in range, and the ranks' byte
 * ranges are computed from the (already validated) tensor table, not read. */
#include "bundle_tp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An exact integer in [lo, hi]. */
static bool json_int(const cJSON *x, double lo, double hi, int64_t *v)
{
	if (!cJSON_IsNumber(x))
		return false;
	const double d = x->valuedouble;
	if (!(d >= lo && d <= hi) || floor(d) != d)
		return false;
	*v = (int64_t)d;
	return true;
}

int qc_bundle_tp_rank_of(const char *name, const char **base)
{
	*base = name;
	if (strncmp(name, "tp", 2) != 0 || name[2] < '0' || name[2] > '9')
		return -1;
	int r = 0, i = 2;
	for (; name[i] >= '0' && name[i] <= '9' && i < 5; i++)
		r = r * 10 + (name[i] - '0');
	if (name[i] != '.' || !name[i + 1] || (name[2] == '0' && i > 3))
		return -1; /* "tp01." is no rank's name: one spelling per rank */
	*base = name + i + 1;
	return r;
}

static int vocab_ranges(const struct qc_bundle *b, const cJSON *o, struct qc_bundle_tp *tp, struct qc_err *err)
{
	const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(b->manifest, "config");
	const int64_t at = (int64_t)b->manifest_off; /* the manifest holds the "tp" object */
	int64_t nv, v, n, next = 0;
	if (!json_int(cJSON_GetObjectItemCaseSensitive(cfg, "n_vocab"), 1, INT32_MAX, &nv))
		return qc_err_set(err, QC_EFORMAT, b->path, NULL, at,
				  "manifest 'tp': config 'n_vocab' must be an integer in 1..%d for the vocabulary split",
				  INT32_MAX);
	const cJSON *voc = cJSON_GetObjectItemCaseSensitive(o, "vocab");
	if (!cJSON_IsArray(voc) || cJSON_GetArraySize(voc) != tp->size)
		return qc_err_set(err, QC_EFORMAT, b->path, NULL, at,
				  "manifest 'tp': 'vocab' must be an array of %d [first, count] ranges (one per rank)",
				  tp->size);
	for (int r = 0; r < tp->size; r++) {
		const cJSON *e = cJSON_GetArrayItem(voc, r);
		if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 ||
		    !json_int(cJSON_GetArrayItem(e, 0), 0, INT32_MAX, &v) ||
		    !json_int(cJSON_GetArrayItem(e, 1), 1, INT32_MAX, &n))
			return qc_err_set(err, QC_EFORMAT, b->path, NULL, at,
					  "manifest 'tp': vocab[%d] must be [first, count] with 0 <= first and 1 <= count <= %d",
					  r, INT32_MAX);
		if (v != next || v + n > nv)
			return qc_err_set(err, QC_EFORMAT, b->path, NULL, at,
					  "manifest 'tp': vocab[%d] = [%lld, %lld] does not continue at %lld inside the %lld-token vocabulary",
					  r, (long long)v, (long long)n, (long long)next, (long long)nv);
		tp->vocab0[r] = (int32_t)v;
		tp->n_vocab[r] = (int32_t)n;
		next = v + n;
	}
	if (next != nv)
		return qc_err_set(err, QC_EFORMAT, b->path, NULL, at,
				  "manifest 'tp': the vocabulary ranges cover %lld of config n_vocab %lld tokens",
				  (long long)next, (long long)nv);
	tp->n_vocab_all = (int32_t)nv;
	return QC_OK;
}

/* Every member belongs to a rank; rank r's members lie before rank r+1's. */
static int member_ranges(const struct qc_bundle *b, struct qc_bundle_tp *tp, struct qc_err *err)
{
	for (int r = 0; r < tp->size; r++)
		tp->lo[r] = UINT64_MAX;
	for (uint64_t i = 0; i < b->n_tensors; i++) {
		const struct qc_bundle_tensor *t = &b->tensors[i];
		const char *base;
		const int r = qc_bundle_tp_rank_of(t->name, &base);
		if (r < 0 || r >= tp->size)
			return qc_err_set(err, QC_EFORMAT, b->path, t->name, (int64_t)t->off,
					  "a --tp %d bundle's members are named tp<rank>.<name> with rank < %d", tp->size,
					  tp->size);
		tp->lo[r] = t->off < tp->lo[r] ? t->off : tp->lo[r];
		tp->hi[r] = t->off + t->size > tp->hi[r] ? t->off + t->size : tp->hi[r];
		tp->n_tensors[r]++;
	}
	for (int r = 0; r < tp->size; r++) {
		if (!tp->n_tensors[r])
			return qc_err_set(err, QC_EFORMAT, b->path, NULL, (int64_t)b->manifest_off,
					  "manifest 'tp': rank %d has no members", r);
		if (r > 0 && tp->lo[r] < tp->hi[r - 1])
			return qc_err_set(err, QC_EFORMAT, b->path, NULL, (int64_t)tp->lo[r],
					  "rank %d's members are not one byte range after rank %d's (they interleave)", r,
					  r - 1);
	}
	return QC_OK;
}

int qc_bundle_tp_read(const struct qc_bundle *b, struct qc_bundle_tp *tp, struct qc_err *err)
{
	memset(tp, 0, sizeof *tp);
	const cJSON *o = cJSON_GetObjectItemCaseSensitive(b->manifest, "tp");
	if (!o)
		return QC_OK;
	int64_t size;
	if (!cJSON_IsObject(o) || !json_int(cJSON_GetObjectItemCaseSensitive(o, "size"), 1, QC_TP_MAX, &size))
		return qc_err_set(err, QC_EFORMAT, b->path, NULL, (int64_t)b->manifest_off,
				  "manifest 'tp' must be an object whose 'size' is an integer in 1..%d", QC_TP_MAX);
	tp->size = (int32_t)size;
	int rc = vocab_ranges(b, o, tp, err);
	if (!rc)
		rc = member_ranges(b, tp, err);
	if (rc)
		memset(tp, 0, sizeof *tp);
	return rc;
}

const struct qc_bundle_tensor *qc_bundle_tp_find(const struct qc_bundle *b, int rank, const char *name)
{
	char n[QC_TP_PREFIX_MAX + 256];
	if ((size_t)snprintf(n, sizeof n, "tp%d.%s", rank, name) >= sizeof n)
		return NULL;
	return qc_bundle_find(b, n);
}

const struct qc_bundle_tensor *qc_bundle_tp_find_part(const struct qc_bundle *b, int rank, const char *name,
						      const struct qc_bundle_part **part)
{
	char n[QC_TP_PREFIX_MAX + 256];
	if ((size_t)snprintf(n, sizeof n, "tp%d.%s", rank, name) >= sizeof n)
		return NULL;
	return qc_bundle_find_part(b, n, part);
}
