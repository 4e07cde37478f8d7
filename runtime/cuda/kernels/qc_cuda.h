/* qc_cuda.h — what every CUDA op shares: the error bridge and launch checks.
 *
 * Owns: qc_cuda_check (cudaError_t -> QC_ECUDA with the call named) and the
 * include set a C caller of an op needs (cuda_runtime_api.h, qc_err.h).
 * Every op's entry point follows STYLE §12: int qc_cuda_<op>(const struct
 * qc_cuda_<op>_args *a, cudaStream_t s, struct qc_err *err), validating shapes
 * (QC_EINVAL / QC_EUNSUPPORTED with the shape in the message) before launching.
 * Non-goals: device selection, memory management (runtime/cuda/backend_cuda.c).
 */
#ifndef QC_CUDA_H
#define QC_CUDA_H

#include <cuda_runtime_api.h>
#include <stdint.h>

/* the project's C headers carry no extern "C" of their own */
#ifdef __cplusplus
extern "C" {
#endif
#include "layout.h"
#include "qc_err.h"
#include "qtype.h"

/* QC_OK when e == cudaSuccess, else fills err with "what: <cuda error text>"
 * and returns QC_ECUDA. */
int qc_cuda_check(cudaError_t e, const char *what, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
