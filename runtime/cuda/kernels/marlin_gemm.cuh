/* marlin_gemm.cuh — entry point of runtime/cuda/kernels/marlin_gemm.cu: C = A · Wᵀ, fp16
 * activations times marlin-packed int4/int8 weights (group-32 fp16 scales; marlin_i6's
 * 6-bit codes with their int8 and fp16 scales),
 * fp32 or fp16 out, any token count. Arguments and the C reference:
 * runtime/ops/marlin_gemm.h. Layout: docs/layout-marlin.md.
 */
#ifndef QC_MARLIN_GEMM_CUH
#define QC_MARLIN_GEMM_CUH

#include "qc_cuda.h"
#include "matmul_dispatch.h" /* enum qc_cuda_gemv_kt */

#ifdef __cplusplus
extern "C" {
#endif
#include "marlin_gemm.h"

/* *bytes = device workspace a call with these arguments needs on the current
 * device (0 when K is not split); the split depends on the SM count and the
 * blocks one SM holds. The shape check's codes, or QC_ECUDA. */
int qc_cuda_marlin_gemm_workspace(const struct qc_marlin_gemm_args *a, size_t *bytes, struct qc_err *err);

/* Launch on stream s. Device pointers; a->workspace must hold
 * qc_cuda_marlin_gemm_workspace bytes.
 * QC_EUNSUPPORTED / QC_EINVAL (shape, alignment, workspace) before any launch;
 * QC_ECUDA naming the kernel if a launch fails. */
int qc_cuda_marlin_gemm(const struct qc_marlin_gemm_args *a, cudaStream_t s, struct qc_err *err);

/* group_rows of grouped rows (qc_marlin_gemm_args.tiles) that run on the
 * warp-specialized kernel: its blocks' tokens (16, 32, 64: the mma.sync kernel's). */
#define QC_MARLIN_GROUP_ROWS_WS 128

/* *yes: whether grouped rows of QC_MARLIN_GROUP_ROWS_WS run on this device (compute
 * capability 9.0 with the warp-specialized kernel's form). QC_ECUDA when the device
 * cannot be asked. */
int qc_cuda_marlin_gemm_grouped_ok(bool *yes, struct qc_err *err);

/* Workspace bytes the wgmma plan's K splits may need for some row count up to
 * n_rows (its partials are capped at the fp16 weight's size: n_in · n_out · 2);
 * 0 when the wgmma kernel does not run on this device or that many rows. */
uint64_t qc_cuda_marlin_gemm_wgmma_ws(int64_t n_in, int64_t n_out, int64_t n_rows);

/* *wgmma: whether qc_cuda_marlin_gemm runs these arguments on the wgmma kernel
 * (tests, traces). The shape check's codes, or QC_ECUDA. */
int qc_cuda_marlin_gemm_plan_wgmma(const struct qc_marlin_gemm_args *a, bool *wgmma, struct qc_err *err);

/* Scratch of the backend's table entries (matmul_layouts.def): marlin_mm.cu
 * (fp16 rows + the GEMM's split-K partials, or the fp16 weight from
 * r->blas_min_rows rows on for matrices up to r->f16_max_elems), marlin_gemv.cu
 * (its K partials for that partition); qc_cuda_marlin_ws takes the most. */
uint64_t qc_cuda_marlin_mm_ws(int64_t n_in, int64_t n_out, int64_t n_rows, const struct qc_kernel_rows *r);
uint64_t qc_cuda_marlin_gemv_ws(int64_t n_in, int64_t n_out, int64_t n_rows, enum qc_cuda_gemv_kt kt);

#ifdef __cplusplus
}
#endif

#endif
