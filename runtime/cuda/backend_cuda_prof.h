/* backend_cuda_prof.h — where a CUDA forward's device time goes, when asked.
 *
 * Owns: CUDA events recorded at phase boundaries of a forward and the per-phase
 * totals they add up to, printed once when the backend is destroyed. Enabled by
 * QC_PROFILE=1 in the environment (qc_cuda_prof_new returns NULL otherwise, and
 * every call accepts NULL, so the forward pays nothing by default). Profiling
 * runs the forward eagerly (no graph replay): events inside a captured graph
 * would time the replay, not the phases.
 * Non-goals: per-kernel timing (ncu does that), host-side engine time (engine.c).
 */
#ifndef QC_BACKEND_CUDA_PROF_H
#define QC_BACKEND_CUDA_PROF_H

#include <cuda_runtime_api.h>
#include <stdio.h>

enum qc_prof_phase {
	QC_PROF_UPLOAD,   /* plan arrays to the device, embedding */
	QC_PROF_NORM,     /* RMSNorms, SiLU*mul, residual adds */
	QC_PROF_QKV,      /* Q, K, V matmuls (+ biases) */
	QC_PROF_ATTN,     /* q/k norms, RoPE, K/V store, paged attention */
	QC_PROF_WO,       /* attention output matmul */
	QC_PROF_FFN_UP,   /* gate and up matmuls (and MoE routing) */
	QC_PROF_FFN_DOWN, /* down matmul (and MoE combine) */
	QC_PROF_HEAD,     /* final norm and the vocabulary matmul */
	QC_PROF_LOGITS,   /* logits to the host */
	QC_PROF_COUNT,
};

struct qc_cuda_prof;

/* NULL unless QC_PROFILE is set (or on any CUDA error: profiling is best effort). */
struct qc_cuda_prof *qc_cuda_prof_new(void);
/* Start a forward of n_tokens rows: records the first event. */
void qc_cuda_prof_begin(struct qc_cuda_prof *p, cudaStream_t s, int n_tokens);
/* The device work queued since the previous mark belongs to phase ph. */
void qc_cuda_prof_mark(struct qc_cuda_prof *p, cudaStream_t s, enum qc_prof_phase ph);
/* After the forward's stream sync: add the segments to the totals. */
void qc_cuda_prof_end(struct qc_cuda_prof *p);
/* Print the totals to f (when any forward ran) and free. Accepts NULL. */
void qc_cuda_prof_free(struct qc_cuda_prof *p, FILE *f);

#endif
