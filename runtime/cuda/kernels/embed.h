/* embed.h — entry point of embed.cu (token embedding gather). */
#ifndef QC_CUDA_EMBED_H
#define QC_CUDA_EMBED_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qc_cuda_embed_args {
	const uint8_t *d_w;        /* (n_vocab) rows of GGML blocks */
	enum qc_type type;
	uint64_t row_bytes;
	int64_t n_embd;            /* whole blocks of type */
	const int32_t *d_ids;      /* (n_tok) token ids, checked by the caller */
	int64_t n_tok;
	float *d_out;              /* (n_tok, n_embd) */
};

/* out[t] = decode(w[ids[t]]). QC_EUNSUPPORTED for a type without a decoder. */
int qc_cuda_embed(const struct qc_cuda_embed_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
