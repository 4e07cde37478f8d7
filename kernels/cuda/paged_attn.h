/* paged_attn.h — entry point of paged_attn.cu (causal attention over paged fp16 K/V). */
#ifndef QC_CUDA_PAGED_ATTN_H
#define QC_CUDA_PAGED_ATTN_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qc_cuda_paged_attn_args {
	const float *d_q;          /* (n_tok, n_head * hd), after RoPE */
	float *d_out;              /* (n_tok, n_head * hd) */
	const uint16_t *d_pool;    /* kv_store.h layout */
	int32_t layer, n_layer, block_tokens;
	int32_t n_head, n_head_kv, hd;
	const int32_t *d_pos;      /* (n_tok) position; token t sees positions 0..pos */
	const int32_t *d_tok_seq;  /* (n_tok) plan entry of each token */
	const int32_t *d_tables;   /* (n_seqs, table_stride) block ids */
	int32_t table_stride;
	int64_t n_tok;
	int32_t max_ctx;           /* bound on pos + 1 (sizes shared memory) */
	float scale;               /* 1 / sqrt(hd) */
};

/* out = softmax(q K^T * scale) V per token and head, K/V read only through
 * the block tables (GQA: head h reads kv head h / (n_head / n_head_kv)).
 * QC_EUNSUPPORTED when max_ctx scores do not fit in shared memory. */
int qc_cuda_paged_attn(const struct qc_cuda_paged_attn_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
