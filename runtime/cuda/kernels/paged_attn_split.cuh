/* paged_attn_split.cuh — split-K ("flash-decoding") attention over paged K/V (fp16 or fp8),
 * the path paged_attn.cu takes when the caller gives scratch for the partials.
 *
 * Each block owns one token, one K/V head (all n_head / n_head_kv query heads of
 * it, so a K/V row is loaded once for the group) and one chunk of context
 * positions; a second kernel merges the chunks' (max, sum, unnormalized P V) in
 * chunk order. The chunk length is a function of the token's own context length,
 * so its result never depends on the other tokens of the step (batch invariance).
 * Scores and P V run on the tensor cores (mma.sync, the G query heads as the
 * MMA's M for the scores and its N for P V; q and P as two binary16 terms, so
 * the sums are fp32-level, paged_attn_split.cu), K and V loaded straight into the
 * fragments' registers, 64 positions' loads in flight at once; the warps' P V
 * partials meet in warp order (deterministic). The CUDA-core passes before them
 * were most of a block's time at 256 rows (docs/perf-notes.md, twelfth session).
 * Limits (else the caller uses the one-block-per-head kernel): hd a multiple of
 * 8 and at most 256, at most 16 query heads per K/V head.
 */
#ifndef QC_CUDA_PAGED_ATTN_SPLIT_CUH
#define QC_CUDA_PAGED_ATTN_SPLIT_CUH

#include <stdint.h>

#define QC_ATTN_SPLIT_MAX 32   /* chunks per token at most */
#define QC_ATTN_CHUNK_MIN 64   /* positions per chunk at least */
#define QC_ATTN_GROUP_MAX 16   /* query heads per K/V head */
#define QC_ATTN_MAX_HD 256     /* head dims a lane-strided register row holds (both paths) */

#ifdef __CUDACC__
#define QC_ATTN_HD __host__ __device__
#else
#define QC_ATTN_HD
#endif

/* Positions per chunk of a token that sees n_ctx positions (a multiple of 32,
 * non-decreasing in n_ctx): short contexts get short chunks, so a batch-1
 * decode still spreads over many blocks. A function of the token's own context
 * only: its result never depends on the other tokens of the step. */
static inline QC_ATTN_HD int32_t qc_attn_chunk(int32_t n_ctx)
{
	int32_t c = (n_ctx + QC_ATTN_SPLIT_MAX - 1) / QC_ATTN_SPLIT_MAX;
	c = (c + 31) / 32 * 32;
	return c < QC_ATTN_CHUNK_MIN ? QC_ATTN_CHUNK_MIN : c;
}

/* Chunks of a token that sees n_ctx positions (at most QC_ATTN_SPLIT_MAX). */
static inline QC_ATTN_HD int32_t qc_attn_n_chunks(int32_t n_ctx)
{
	const int32_t c = qc_attn_chunk(n_ctx);
	return (n_ctx + c - 1) / c;
}

/* Chunk slots per token for contexts up to max_ctx: every n_ctx <= max_ctx has
 * at most this many chunks (each chunk is >= QC_ATTN_CHUNK_MIN long). */
static inline int32_t qc_attn_splits(int32_t max_ctx)
{
	const int32_t n = (max_ctx + QC_ATTN_CHUNK_MIN - 1) / QC_ATTN_CHUNK_MIN;
	return n < QC_ATTN_SPLIT_MAX ? n : QC_ATTN_SPLIT_MAX;
}

#ifdef __CUDACC__
#include <cuda_runtime.h>

#include "paged_attn.h"

/* The split path (paged_attn_split.cu) for a (the scratch a->d_ws its own), tokens
 * with skip[t] set (NULL: none) left alone; QC_EUNSUPPORTED when the shape is
 * outside its limits (the caller then runs the one-block kernel). */
int qc_cuda_paged_attn_split(const struct qc_cuda_paged_attn_args *a, const int32_t *skip, cudaStream_t s,
			     struct qc_err *err);
#endif

#endif
