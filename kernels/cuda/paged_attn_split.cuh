/* paged_attn_split.cuh — split-K ("flash-decoding") attention over paged fp16 K/V,
 * the path paged_attn.cu takes when the caller gives scratch for the partials.
 *
 * Each block owns one token, one K/V head (all n_head / n_head_kv query heads of
 * it, so a K/V row is loaded once for the group) and one chunk of context
 * positions; a second kernel merges the chunks' (max, sum, unnormalized P V) in
 * chunk order. The chunk length is a function of max_ctx alone, so a token's
 * result never depends on the other tokens of the step (batch invariance holds).
 * Scores: 8 lanes per position, each reading 16-byte vectors of the K row; P V:
 * threads over dimension pairs, positions in order.
 * Limits (else the caller uses the one-block-per-head kernel): hd a multiple of
 * 8 and at most 256, at most 16 query heads per K/V head.
 */
#ifndef QC_CUDA_PAGED_ATTN_SPLIT_CUH
#define QC_CUDA_PAGED_ATTN_SPLIT_CUH

#include <stdint.h>

#define QC_ATTN_SPLIT_MAX 32   /* chunks per token at most */
#define QC_ATTN_CHUNK_MIN 64   /* positions per chunk at least */
#define QC_ATTN_GROUP_MAX 16   /* query heads per K/V head */

/* Positions per chunk for a context bound of max_ctx (a multiple of 32). */
static inline int32_t qc_attn_chunk(int32_t max_ctx)
{
	int32_t c = (max_ctx + QC_ATTN_SPLIT_MAX - 1) / QC_ATTN_SPLIT_MAX;
	c = (c + 31) / 32 * 32;
	return c < QC_ATTN_CHUNK_MIN ? QC_ATTN_CHUNK_MIN : c;
}

static inline int32_t qc_attn_splits(int32_t max_ctx)
{
	const int32_t c = qc_attn_chunk(max_ctx);
	return (max_ctx + c - 1) / c;
}

#endif
