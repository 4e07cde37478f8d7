/* rope.h — entry point of rope.cu (rotary position embedding in place). */
#ifndef QC_CUDA_ROPE_H
#define QC_CUDA_ROPE_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qc_cuda_rope_args {
	float *d_x;                /* (n_tok, n_heads * hd), rotated in place */
	const int32_t *d_pos;      /* (n_tok) positions */
	int64_t n_tok;
	int32_t n_heads, hd, n_rot;
	int32_t mode;              /* enum qc_rope_mode: QC_ROPE_NORM or QC_ROPE_NEOX */
	float theta_scale;         /* base^(-2/n_rot), computed by the caller with powf */
	float freq_scale;          /* 1 / linear scaling factor */
};

/* Rotate the first n_rot dims of each head by pos * freq_scale *
 * theta_scale^i (theta advanced by repeated multiplication, as ggml).
 * QC_EINVAL on odd n_rot or n_rot > hd. */
int qc_cuda_rope(const struct qc_cuda_rope_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
