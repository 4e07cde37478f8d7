/* softcap.h — entry point of softcap.cu (scaling and soft-capping of float rows). */
#ifndef QC_CUDA_SOFTCAP_H
#define QC_CUDA_SOFTCAP_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qc_cuda_softcap_args {
	float *d_x;                /* (n) in place */
	int64_t n;
	float scale;               /* x *= scale first (1: unchanged, exactly) */
	float cap;                 /* then x = tanh(x / cap) * cap; 0: none */
};

/* x = softcap(x * scale): Gemma's embedding scale (scale sqrt(n_embd), cap 0) and
 * Gemma 2's final-logit soft-cap (scale 1). QC_EINVAL on n < 0, cap < 0 or a
 * scale / cap that is not finite. */
int qc_cuda_softcap(const struct qc_cuda_softcap_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
