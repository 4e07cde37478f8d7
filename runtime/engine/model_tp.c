/* model_tp.c — the models of a --tp bundle (docs/tp.md): the weightless whole
 * qc_model_open returns, and each rank's shard (qc_model_rank_open).
 *
 * Owns: the whole's config (the manifest's, FFN widths from rank 0's tensors
 * times N, n_vocab = V); a rank's config (the whole's with n_head, n_head_kv,
 * n_ff, n_ff_shexp divided by N and n_vocab its own rows) and its views over the
 * members "tp<r>.<name>", shapes checked against those local widths (model.c).
 * The "tp" object (ranks, vocabulary ranges, each rank's byte range) is read and
 * checked by formats/bundle_tp.h, which qc_bundle_open has already run.
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

#include "bundle_tp.h"

int qc_model_tp_whole(struct qc_bundle *b, struct qc_model **out, struct qc_err *err)
{
	struct qc_bundle_tp t;
	int rc;

	*out = NULL;
	if ((rc = qc_bundle_tp_read(b, &t, err)))
		return rc;
	if (t.size < 1)
		return qc_err_set(err, QC_EFORMAT, b->path, NULL, -1, "manifest has no \"tp\" object");
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
	c->n_vocab = t.n_vocab_all;
	const struct qc_arch *a = qc_arch_find(c->arch);
	c->tied_embeddings = !qc_bundle_find(b, "tp0.output.weight") || (a && (a->feats & QC_AF(TIED_EMBD)));
	m->layers = calloc((size_t)c->n_layer, sizeof *m->layers); /* zeroed: no weights here */
	if (!m->layers) {
		rc = qc_err_set(err, QC_ENOMEM, b->path, NULL, -1, "out of memory");
		goto out_free;
	}
	m->tp = (struct qc_model_tp){.rank = -1, .size = t.size, .vocab0 = 0, .n_vocab_all = t.n_vocab_all};
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
	struct qc_bundle_tp t = {.size = 1, .vocab0 = {0}, .n_vocab = {whole->cfg.n_vocab},
				 .n_vocab_all = whole->cfg.n_vocab, .lo = {whole->data_lo}, .hi = {whole->data_hi}};
	char pfx[16] = ""; /* "tp<r>." */
	int rc;

	*out = NULL;
	if (whole->tp.rank > 0 || (whole->tp.rank == 0 && whole->tp.size != 1))
		return qc_err_set(err, QC_EINVAL, b->path, NULL, -1, "rank %d's shard is not a whole model", whole->tp.rank);
	if (rank < 0 || rank >= whole->tp.size)
		return qc_err_set(err, QC_EINVAL, b->path, NULL, -1, "rank %d of a bundle sharded for %d", rank,
				  whole->tp.size);
	if (whole->tp.rank < 0) { /* a --tp bundle: its own ranges, its own members */
		if ((rc = qc_bundle_tp_read(b, &t, err)))
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
	c->n_vocab = t.n_vocab[rank];
	if ((rc = qc_model_load_weights(m, pfx, err)))
		goto out_free;
	m->tp = (struct qc_model_tp){.rank = rank, .size = N, .vocab0 = t.vocab0[rank], .n_vocab_all = t.n_vocab_all};
	m->data_lo = t.lo[rank];
	m->data_hi = t.hi[rank];
	*out = m;
	return QC_OK;

out_free:
	qc_model_close(m);
	return rc;
}
