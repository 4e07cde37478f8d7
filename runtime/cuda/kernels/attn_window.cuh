/* attn_window.cuh — the two score rules Gemma 2 / Gemma 3 / Phi-3 (and Mistral's,
 * Qwen2's window) add to causal attention, shared by the attention kernels
 * (paged_attn.cu's one-block and split paths, flash_attn.cu): the first position
 * a token sees through a sliding window, and the soft-cap of a scaled score.
 * A window of W: positions max(0, pos - W + 1)..pos (llama.cpp's SWA mask, the
 * CPU backend's qc_ref_attn_token); positions before it are never read, so their
 * blocks may be released (a table entry there may be negative).
 * Reference: runtime/ops/paged_attn.c. */
#ifndef QC_CUDA_ATTN_WINDOW_CUH
#define QC_CUDA_ATTN_WINDOW_CUH

#include <stdint.h>

#include "paged_attn.h"
#include "softcap.cuh"

/* First position token at pos sees (window 0: 0). */
static __device__ __forceinline__ int32_t qc_attn_win_start(const struct qc_cuda_paged_attn_args &a, int32_t pos)
{
	return a.window > 0 && pos >= a.window ? pos - a.window + 1 : 0;
}

/* A scaled score s (q . k * scale) as the softmax takes it: soft-capped when asked. */
static __device__ __forceinline__ float qc_attn_cap(const struct qc_cuda_paged_attn_args &a, float s)
{
	return a.softcap > 0.0f ? qc_softcap1(s, a.softcap) : s;
}

#endif
