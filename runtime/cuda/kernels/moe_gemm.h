/* moe_gemm.h — entry points of moe_gemm.cu (grouped MoE GEMM, GGML layout). */
#ifndef QC_CUDA_MOE_GEMM_H
#define QC_CUDA_MOE_GEMM_H

#include <stdbool.h>

#include "matmul_dispatch.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qc_cuda_moe_gemm_args {
	struct qc_cuda_mm_args mm; /* the matmul_dispatch.h contract; layout QC_LAYOUT_GGML;
				      d_expert NULL: every row reads matrix 0; d_ws/ws_bytes: at
				      least qc_cuda_moe_gemm_ws_bytes(n_rows, n_experts); blas unused */
	int64_t n_experts;         /* matrices in the stack, 1..QC_CUDA_MOE_GEMM_MAX_EXPERTS; a row
				      whose expert is outside [0, n_experts) gets NaN outputs */
};

#define QC_CUDA_MOE_GEMM_MAX_EXPERTS 1024

/* true when T has a device decoder (decode.cuh): the same set as gemv_q. */
bool qc_cuda_moe_gemm_supports(enum qc_type t);

/* Scratch bytes (the row sort and the tile list) for n_rows rows over
 * n_experts matrices; independent of n_in and n_out. */
uint64_t qc_cuda_moe_gemm_ws_bytes(int64_t n_rows, int64_t n_experts);

/* y = W_e(r) x for every row, weights and activations rounded to fp16, fp32
 * tensor-core sums; no host synchronization (graph-capturable). QC_EUNSUPPORTED
 * for a type without a decoder, n_in not a multiple of 32, another layout or a
 * shape out of range; QC_EINVAL for a short scratch; QC_ECUDA on a launch
 * failure. n_rows 0 launches nothing. */
int qc_cuda_moe_gemm(const struct qc_cuda_moe_gemm_args *a, cudaStream_t s, struct qc_err *err);

/* The ggml layout's QC_KERNEL_MOE_GEMM entry (matmul_dispatch.cu): qc_cuda_moe_gemm
 * over a->n_mat matrices, and its scratch in qc_cuda_mm_moe_ws_fn's form. */
int qc_cuda_moe_gemm_mm(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err);
uint64_t qc_cuda_moe_gemm_ws(int64_t n_in, int64_t n_out, int64_t n_rows, int64_t n_mat);

#ifdef __cplusplus
}
#endif

#endif
