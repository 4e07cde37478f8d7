/* gemm_f16.cu — large-batch matmul: weights decoded to fp16, cuBLAS GemmEx.
 *
 * Owns: Y = X W^T for n_rows activation rows as one cuBLAS call with fp16
 * inputs and fp32 accumulation (CUBLAS_COMPUTE_32F); F32 weights stay fp32
 * (GemmEx fp32, no TF32) and F16 weights are used in place. The weight is
 * decoded into the scratch on every call: this session's simple path, memory
 * traffic 2x the weight per prefill step.
 * Non-goals: a fused dequant GEMM (Marlin-style layouts go through
 * matmul_layouts.def), experts (MoE rows take the GEMV).
 * Reference: runtime/ops/gemm_f16.c (fp16-rounded weights and activations,
 * float products summed in double).
 */
#include "gemm_f16.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "dequant_f16.h"

static uint64_t align256(uint64_t n)
{
	return (n + 255) & ~(uint64_t)255;
}

extern "C" uint64_t qc_cuda_gemm_f16_ws_bytes(int64_t n_in, int64_t n_out, int64_t n_rows)
{
	return align256((uint64_t)n_in * (uint64_t)n_out * 2) + align256((uint64_t)n_in * (uint64_t)n_rows * 2);
}

static int blas_check(cublasStatus_t st, const char *what, struct qc_err *err)
{
	if (st == CUBLAS_STATUS_SUCCESS)
		return QC_OK;
	return qc_err_set(err, QC_ECUDA, NULL, NULL, -1, "%s: cuBLAS status %d (%s)", what, (int)st,
			  cublasGetStatusString(st));
}

extern "C" int qc_cuda_gemm_f16(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err)
{
	if (qc_cuda_mm_check_fuse(a, 0, "gemm_f16", err))
		return QC_EUNSUPPORTED;
	cublasHandle_t h = (cublasHandle_t)a->blas;
	const float one = 1.0f, zero = 0.0f;
	int rc;

	if (a->d_expert || a->x_div != 1 || !h || a->n_in > INT32_MAX || a->n_out > INT32_MAX ||
	    a->n_rows > INT32_MAX)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "gemm_f16: experts, x_div %d or shape %lld x %lld x %lld not supported",
				  a->x_div, (long long)a->n_rows, (long long)a->n_out, (long long)a->n_in);
	if (a->ws_bytes < qc_cuda_gemm_f16_ws_bytes(a->n_in, a->n_out, a->n_rows))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "gemm_f16: scratch of %llu bytes too small",
				  (unsigned long long)a->ws_bytes);
	/* only when it differs: cublasSetStream also drops a workspace set with
	 * cublasSetWorkspace, which graph capture relies on */
	cudaStream_t cur = NULL;
	if ((rc = blas_check(cublasGetStream(h, &cur), "cublasGetStream", err)) ||
	    (cur != s && (rc = blas_check(cublasSetStream(h, s), "cublasSetStream", err))))
		return rc;
	const int m = (int)a->n_out, n = (int)a->n_rows, k = (int)a->n_in;
	if (a->type == QC_TYPE_F32)
		return blas_check(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, a->d_w, CUDA_R_32F,
					       (int)(a->row_bytes / 4), a->d_x, CUDA_R_32F, (int)a->ldx, &zero,
					       a->d_y, CUDA_R_32F, (int)a->ldy, CUBLAS_COMPUTE_32F_PEDANTIC,
					       CUBLAS_GEMM_DEFAULT),
				  "cublasGemmEx f32", err);

	uint16_t *w16 = (uint16_t *)a->d_ws;
	uint16_t *x16 = (uint16_t *)((uint8_t *)a->d_ws + align256((uint64_t)a->n_in * (uint64_t)a->n_out * 2));
	const void *w = a->d_w;
	int ldw = (int)(a->row_bytes / 2);
	if (a->type != QC_TYPE_F16) {
		const struct qc_cuda_dequant_f16_args dw = {a->d_w, a->type, a->row_bytes, a->n_out, a->n_in, w16};
		if ((rc = qc_cuda_dequant_f16(&dw, s, err)))
			return rc;
		w = w16;
		ldw = k;
	}
	const struct qc_cuda_dequant_f16_args dx = {(const uint8_t *)a->d_x, QC_TYPE_F32,
						    (uint64_t)a->ldx * 4, a->n_rows, a->n_in, x16};
	if ((rc = qc_cuda_dequant_f16(&dx, s, err)))
		return rc;
	return blas_check(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, w, CUDA_R_16F, ldw, x16,
				       CUDA_R_16F, k, &zero, a->d_y, CUDA_R_32F, (int)a->ldy,
				       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
			  "cublasGemmEx f16", err);
}
