/* topk.h — entry point of topk.cu (a sampler's top-k candidates on the device). */
#ifndef QC_CUDA_TOPK_H
#define QC_CUDA_TOPK_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QC_CUDA_TOPK_MAX 128 /* most candidates per row */

struct qc_cuda_topk_args {
	const float *d_x;          /* (n_rows, n) logits */
	const int32_t *d_k;        /* (n_rows) candidates wanted; rows with k < 2 are skipped */
	int32_t *d_ids;            /* (n_rows, stride) */
	float *d_vals;             /* (n_rows, stride) */
	int64_t n_rows;
	int32_t n, stride;         /* stride >= every k (at most QC_CUDA_TOPK_MAX) */
};

/* For each row with k >= 2 (k > QC_CUDA_TOPK_MAX or > n: clamped), the k best
 * (id, value) pairs best first (larger value, then lower id; -0 == +0) at
 * d_ids/d_vals + r * stride, or d_ids[r * stride] = -1 when the row holds a
 * NaN or +inf or only -inf. No host synchronization: d_k is read on the
 * device, so the launch is graph-safe. QC_EINVAL on a bad shape. */
int qc_cuda_topk(const struct qc_cuda_topk_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
