/* embed.c — reference of runtime/cuda/kernels/embed.cu: decode the rows of the ids. */
#include "ops.h"

void qc_ref_embed(const uint8_t *w, enum qc_type type, uint64_t row_bytes, int64_t n_embd,
		  const int32_t *ids, int64_t n_tok, float *out)
{
	for (int64_t t = 0; t < n_tok; t++)
		qc_types[type].dequant_row(w + (uint64_t)ids[t] * row_bytes, out + t * n_embd, n_embd);
}
