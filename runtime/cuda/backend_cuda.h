/* backend_cuda.h — the CUDA backend (backend_cuda.c) and its build-time stub.
 *
 * Owns: the qc_backend_cuda ops table. Built from backend_cuda.c when nvcc was
 * found at build time (QC_HAVE_CUDA; linked with libqc_cuda.a, cudart, cuBLAS),
 * else from backend_cuda_stub.c, whose create says the build has no CUDA.
 * On a machine without a GPU the real backend fails cleanly with QC_ECUDA
 * "no CUDA device". Environment: QC_CUDA_GEMV_MAX_ROWS (default 8) — matmuls
 * of more activation rows take the fp16 cuBLAS path; a huge value keeps every
 * matmul on the batch-invariant GEMV (the batched-equals-single test uses it).
 */
#ifndef QC_BACKEND_CUDA_H
#define QC_BACKEND_CUDA_H

#include "backend.h"

extern const struct qc_backend_ops qc_backend_cuda;

#endif
