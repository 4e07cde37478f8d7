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
	/* YaRN and llama3 factors (plain RoPE: ext_factor 0, mscale 1, d_ff NULL) */
	float ext_factor;          /* YaRN ramp mix, 0: off */
	float mscale;              /* cos/sin multiplier: attn_factor (* (1 + 0.1 ln(1/freq_scale)) with YaRN) */
	float corr[2];             /* YaRN ramp bounds in rotated pairs */
	const float *d_ff;         /* (n_rot / 2) frequency divisors (llama3 rope_freqs), or NULL */
};

/* Rotate the first n_rot dims of each head by pos * freq_scale *
 * theta_scale^i / ff[i] (theta advanced by repeated multiplication, as ggml),
 * blended with the unscaled angle by the YaRN ramp when ext_factor != 0, cos
 * and sin times mscale. QC_EINVAL on odd n_rot, n_rot > hd, mscale <= 0. */
int qc_cuda_rope(const struct qc_cuda_rope_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
