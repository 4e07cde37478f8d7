/* embed.c — reference of runtime/cuda/kernels/embed.cu: decode the rows of the ids
 * a vocabulary range holds, zeros for the others (a tensor-parallel rank's share). */
#include "ops.h"

#include <string.h>

void qc_ref_embed(const uint8_t *w, enum qc_type type, uint64_t row_bytes, int64_t n_embd,
		  const int32_t *ids, int64_t n_tok, int64_t vocab0, int64_t n_rows, float *out)
{
	for (int64_t t = 0; t < n_tok; t++) {
		const int64_t r = (int64_t)ids[t] - vocab0;
		if (r < 0 || r >= n_rows)
			memset(out + t * n_embd, 0, sizeof(float) * (size_t)n_embd);
		else
			qc_types[type].dequant_row(w + (uint64_t)r * row_bytes, out + t * n_embd, n_embd);
	}
}
