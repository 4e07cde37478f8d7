/* model_int.h — what model.c and model_tp.c share to build a model: the
 * config, the weight views and the data range, each over tensors named with a
 * prefix ("" in a plain bundle, "tp<r>." for rank r of a --tp bundle).
 * Non-goals: anything a backend or the engine calls (model.h is theirs).
 */
#ifndef QC_MODEL_INT_H
#define QC_MODEL_INT_H

#include "model.h"

/* The whole model's config into c: the manifest's "config", and the FFN widths of
 * the tensors named pfx + name times n_ranks (a rank holds 1/n_ranks of them).
 * c->n_vocab stays 0. QC_OK, QC_EFORMAT, QC_EUNSUPPORTED (naming key or tensor). */
int qc_model_read_cfg(const struct qc_bundle *b, const char *pfx, int n_ranks, struct qc_model_config *c,
		      struct qc_err *err);

/* Every weight view and small vector of m (m->bundle and m->cfg set; layers and
 * vec_store allocated here, freed by qc_model_close) over the tensors named pfx +
 * llama.cpp's name, their shapes checked against m->cfg's widths. m->cfg.n_vocab:
 * 0 takes token_embd's rows, else they must equal it. Fills tied_embeddings. */
int qc_model_load_weights(struct qc_model *m, const char *pfx, struct qc_err *err);

/* m->data_lo..data_hi: the bytes of the members whose names start with pfx. */
void qc_model_data_range(struct qc_model *m, const char *pfx);

/* The weightless whole of a --tp bundle (model_tp.c): b is borrowed. */
int qc_model_tp_whole(struct qc_bundle *b, struct qc_model **out, struct qc_err *err);

#endif
