/* flash_attn.c — reference of runtime/cuda/kernels/flash_attn.cu. It computes the same
 * function as paged_attn.c (and calls it, one token at a time) for the tokens
 * the kernel takes: runs of at least min_run consecutive plan tokens of one
 * sequence at consecutive positions, every position in 0..max_ctx-1; done[t]
 * says which. Other tokens' output rows are not touched. The kernel's binary16
 * rounding of q and P is not modelled here (the GPU test bounds it). */
#include <stdbool.h>

#include "ops.h"

static bool pos_ok(const int32_t *pos, int64_t t, int32_t max_ctx)
{
	return pos[t] >= 0 && pos[t] < max_ctx;
}

/* token t continues the run of token t - 1 */
static bool linked(const int32_t *pos, const int32_t *tok_seq, int64_t t, int32_t max_ctx)
{
	return t > 0 && tok_seq[t] == tok_seq[t - 1] && pos_ok(pos, t - 1, max_ctx) && pos_ok(pos, t, max_ctx) &&
	       pos[t] == pos[t - 1] + 1;
}

void qc_ref_flash_attn(const float *q, float *out, int32_t *done, const uint16_t *pool, int layer, int n_layer,
		       int bt, int n_head, int n_head_kv, int hd, const int32_t *pos, const int32_t *tok_seq,
		       const int32_t *tables, int stride, int64_t n_tok, int32_t max_ctx, float scale,
		       int32_t min_run)
{
	const int64_t q_dim = (int64_t)n_head * hd;
	for (int64_t r0 = 0; r0 < n_tok;) {
		int64_t r1 = r0 + 1;
		while (r1 < n_tok && linked(pos, tok_seq, r1, max_ctx))
			r1++;
		const bool take = r1 - r0 >= min_run && (r1 - r0 > 1 || pos_ok(pos, r0, max_ctx));
		for (int64_t t = r0; t < r1; t++) {
			done[t] = take;
			if (take)
				qc_ref_paged_attn(q + t * q_dim, out + t * q_dim, pool, layer, n_layer, bt, n_head,
						  n_head_kv, hd, pos + t, tok_seq + t, tables, stride, 1, scale);
		}
		r0 = r1;
	}
}
