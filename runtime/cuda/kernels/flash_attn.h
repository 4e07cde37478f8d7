/* flash_attn.h — entry point of flash_attn.cu (causal prefill attention over
 * paged fp16 K/V, tensor cores, one pass over a run's keys per query tile). */
#ifndef QC_CUDA_FLASH_ATTN_H
#define QC_CUDA_FLASH_ATTN_H

#include <stdbool.h>

#include "paged_attn.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qc_cuda_flash_attn_args {
	struct qc_cuda_paged_attn_args attn; /* inputs and output as qc_cuda_paged_attn (its d_ws,
						ws_bytes are not used) */
	int32_t min_run;   /* runs shorter than this are left to the caller, >= 1 */
	int32_t *d_done;   /* (n_tok) out: 1 where this call wrote the token's output rows, else 0 */
	void *d_ws;        /* scratch, 16-byte aligned, >= qc_cuda_flash_attn_ws_bytes(n_tok) bytes */
	uint64_t ws_bytes;
};

/* Whether the kernel has an instantiation for this shape: hd a multiple of 16
 * in 16..256, n_head a multiple of n_head_kv, at most 64 query heads per K/V head. */
bool qc_cuda_flash_attn_shape_ok(int32_t hd, int32_t n_head, int32_t n_head_kv);

/* Scratch bytes for n_tok tokens (the run list; a multiple of 256). */
uint64_t qc_cuda_flash_attn_ws_bytes(int64_t n_tok);

/* A run: consecutive plan tokens of one sequence (d_tok_seq) at consecutive
 * positions, each position in 0..max_ctx-1. For every token of a run of at
 * least min_run tokens: out = softmax(q K^T * scale) V over positions 0..pos
 * (all query heads, GQA as paged_attn), and d_done = 1; other tokens' output
 * rows are not touched (d_done = 0). Runs are found on the device (no host
 * synchronization). QC_EINVAL on a bad shape or scratch, QC_EUNSUPPORTED
 * outside qc_cuda_flash_attn_shape_ok, QC_ECUDA on a launch failure. */
int qc_cuda_flash_attn(const struct qc_cuda_flash_attn_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
