/* embed.h — entry point of embed.cu (token embedding gather, optionally of one
 * vocabulary range: a tensor-parallel rank's rows, docs/tp.md). */
#ifndef QC_CUDA_EMBED_H
#define QC_CUDA_EMBED_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qc_cuda_embed_args {
	const uint8_t *d_w;        /* (n_rows) rows of GGML blocks: token ids vocab0.. */
	enum qc_type type;
	uint64_t row_bytes;
	int64_t n_embd;            /* whole blocks of type */
	const int32_t *d_ids;      /* (n_tok) token ids, checked by the caller */
	int64_t n_tok;
	float *d_out;              /* (n_tok, n_embd) */
	int64_t vocab0;            /* the id of row 0 (0 unless tensor parallel) */
	int64_t n_rows;            /* rows in d_w (the vocabulary unless tensor parallel) */
};

/* out[t] = decode(w[ids[t] - vocab0]) for ids in [vocab0, vocab0 + n_rows), zeros
 * for the others (the rank that holds them writes them; the all-reduce sums).
 * QC_EUNSUPPORTED for a type without a decoder, QC_EINVAL for n_rows < 1. */
int qc_cuda_embed(const struct qc_cuda_embed_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
