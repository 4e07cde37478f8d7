/* model_tp.c — the models of a --tp bundle (docs/tp.md): the weightless whole
 * qc_model_open returns, and each rank's shard (qc_model_rank_open).
 *
 * Owns: reading and checking the manifest's "tp" object {"size": N, "vocab":
 * [[v0, n0], ...]} (1..QC_TP_MAX ranks, one contiguous range per rank, together
 * [0, V)); the whole's config (the manifest's, FFN widths from rank 0's tensors
 * times N, n_vocab = V); a rank's config (the whole's with n_head, n_head_kv,
 * n_ff, n_ff_shexp divided by N and n_vocab its own rows) and its views over the
 * members "tp<r>.<name>", shapes checked against those local widths (model.c).
 * The whole has no weights: its layers are zeroed views and no backend takes it
 * (rank -1); the engine runs it through backend_tp.c, one rank model per thread.
 * A plain bundle's rank 0 of 1 is the plain model again (the same views).
 * Non-goals: the split itself (qconvert --tp), any compute.
 */
#include "model.h"
#include "model_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tp_group.h"

#define MAX_VOCAB (1 << 24)

struct tp_plan {
	int size;
	int32_t v0[QC_TP_MAX], n[QC_TP_MAX];
	int32_t n_vocab;           /* the whole vocabulary */
};

static int tp_int(const cJSON *it, int64_t lo, int64_t hi, int64_t *out)
{
	if (!cJSON_IsNumber(it) || it->valuedouble != (double)(int64_t)it->valuedouble ||
	    it->valuedouble < (double)lo || it->valuedouble > (double)hi)
		return -1;
	*out = (int64_t)it->valuedouble;
	return 0;
}

/* The manifest's "tp" object into t. QC_OK or QC_EFORMAT naming what is wrong. */
static int tp_read(const struct qc_bundle *b, struct tp_plan *t, struct qc_err *err)
{
	const cJSON *tp = cJSON_GetObjectItemCaseSensitive(b->manifest, "tp");
	const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(tp, "vocab");
	int64_t size, end = 0;
	if (!cJSON_IsObject(tp) || tp_int(cJSON_GetObjectItemCaseSensitive(tp, "size"), 1, QC_TP_MAX, &size))
		return qc_err_set(err, QC_EFORMAT, b->path, NULL, -1,
				  "manifest \"tp\": an object with \"size\" 1..%d expected", QC_TP_MAX);
	if (!cJSON_IsArray(vocab) || cJSON_GetArraySize(vocab) != size)
		return qc_err_set(err, QC_EFORMAT, b->path, NULL, -1,
				  "manifest \"tp\": \"vocab\" must hold one [v0, n] range per rank (%lld)", (long long)size);
	t->size = (int)size;
	for (int r = 0; r < t->size; r++) {
		const cJSON *rg = cJSON_GetArrayItem(vocab, r);
		int64_t v0, n;
		if (!cJSON_IsArray(rg) || cJSON_GetArraySize(rg) != 2 || tp_int(cJSON_GetArrayItem(rg, 0), 0, MAX_VOCAB, &v0) ||
		    tp_int(cJSON_GetArrayItem(rg, 1), 1, MAX_VOCAB, &n) || v0 != end || v0 + n > MAX_VOCAB)
			return qc_err_set(err, QC_EFORMAT, b->path, NULL, -1,
					  "manifest \"tp\": vocab range of rank %d is not [%lld, n] with n >= 1 (the ranges "
					  "must follow each other from 0)", r, (long long)end);
		t->v0[r] = (int32_t)v0;
		t->n[r] = (int32_t)n;
		end = v0 + n;
	}
	t->n_vocab = (int32_t)end;
	return QC_OK;
}

int qc_model_tp_whole(struct qc_bundle *b, struct qc_model **out, struct qc_err *err)
{
	struct tp_plan t;
	int rc;

	*out = NULL;
	if ((rc = tp_read(b, &t, err)))
		return rc;
	struct qc_model *m = calloc(1, sizeof *m);
	if (!m)
		return qc_err_set(err, QC_ENOMEM, b->path, NULL, -1, "out of memory");
	m->bundle = b;
	struct qc_model_config *c = &m->cfg;
	if ((rc = qc_model_read_cfg(b, "tp0.", t.size, c, err)))
		goto out_free;
	if (c->n_head % t.size || c->n_head_kv % t.size) {
		rc = qc_err_set(err, QC_EFORMAT, b->path, NULL, -1, "manifest \"tp\" size %d does not divide n_head %d "
				"and n_head_kv %d", t.size, c->n_head, c->n_head_kv);
		goto out_free;
	}
	c->n_vocab = t.n_vocab;
	const struct qc_arch *a = qc_arch_find(c->arch);
	c->tied_embeddings = !qc_bundle_find(b, "tp0.output.weight") || (a && (a->feats & QC_AF(TIED_EMBD)));
	m->layers = calloc((size_t)c->n_layer, sizeof *m->layers); /* zeroed: no weights here */
	if (!m->layers) {
		rc = qc_err_set(err, QC_ENOMEM, b->path, NULL, -1, "out of memory");
		goto out_free;
	}
	m->tp = (struct qc_model_tp){.rank = -1, .size = t.size, .vocab0 = 0, .n_vocab_all = t.n_vocab};
	qc_model_data_range(m, "");
	*out = m;
	return QC_OK;

out_free:
	m->bundle = NULL;
	qc_model_close(m);
	return rc;
}

int qc_model_rank_open(const struct qc_model *whole, int rank, struct qc_model **out, struct qc_err *err)
{
	const struct qc_bundle *b = whole->bundle;
	struct tp_plan t = {.size = 1, .v0 = {0}, .n = {whole->cfg.n_vocab}, .n_vocab = whole->cfg.n_vocab};
	char pfx[16] = "";
	int rc;

	*out = NULL;
	if (whole->tp.rank > 0 || (whole->tp.rank == 0 && whole->tp.size != 1))
		return qc_err_set(err, QC_EINVAL, b->path, NULL, -1, "rank %d's shard is not a whole model", whole->tp.rank);
	if (rank < 0 || rank >= whole->tp.size)
		return qc_err_set(err, QC_EINVAL, b->path, NULL, -1, "rank %d of a bundle sharded for %d", rank,
				  whole->tp.size);
	if (whole->tp.rank < 0) { /* a --tp bundle: its own ranges, its own members */
		if ((rc = tp_read(b, &t, err)))
			return rc;
		snprintf(pfx, sizeof pfx, "tp%d.", rank);
	}
	struct qc_model *m = calloc(1, sizeof *m);
	if (!m)
		return qc_err_set(err, QC_ENOMEM, b->path, NULL, -1, "out of memory");
	m->bundle = whole->bundle; /* borrowed (own_bundle false) */
	struct qc_model_config *c = &m->cfg;
	*c = whole->cfg;
	const int32_t N = t.size;
	if (c->n_head % N || c->n_head_kv % N || c->n_ff % N || c->n_ff_shexp % N) {
		rc = qc_err_set(err, QC_EFORMAT, b->path, NULL, -1, "%d ranks do not divide n_head %d, n_head_kv %d, "
				"n_ff %d, n_ff_shexp %d", N, c->n_head, c->n_head_kv, c->n_ff, c->n_ff_shexp);
		goto out_free;
	}
	c->n_head /= N;
	c->n_head_kv /= N;
	c->n_ff /= N;
	c->n_ff_shexp /= N;
	c->n_vocab = t.n[rank];
	if ((rc = qc_model_load_weights(m, pfx, err)))
		goto out_free;
	m->tp = (struct qc_model_tp){.rank = rank, .size = N, .vocab0 = t.v0[rank], .n_vocab_all = t.n_vocab};
	if (N == 1 && !pfx[0]) {
		m->data_lo = whole->data_lo;
		m->data_hi = whole->data_hi;
	} else {
		qc_model_data_range(m, pfx);
	}
	*out = m;
	return QC_OK;

out_free:
	qc_model_close(m);
	return rc;
}
