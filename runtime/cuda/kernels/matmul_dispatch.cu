/* matmul_dispatch.cu — builds the (layout, type) table of matmul_dispatch.h.
 *
 * QC_LAYOUT_GGML: GEMV = the fused-dequant GEMV (gemv_q.cu), F16_BLAS = dequantize
 * to fp16 + cuBLAS (gemm_f16.cu), MOE_GEMM = the grouped expert GEMM (moe_gemm.cu,
 * the same decoders), for every type gemv_q has a decoder for
 * (generated from qtype.def there). Other layouts: matmul_layouts.def rows.
 * Non-goals: picking the kind (qc_layout_kernel), tuning.
 */
#include "matmul_dispatch.h"

/* the kernels array is initialized in enum order */
static_assert(QC_KERNEL_NONE == 0 && QC_KERNEL_GEMV == 1 && QC_KERNEL_MMA == 2 && QC_KERNEL_F16_BLAS == 3 &&
		      QC_KERNEL_MOE_GEMM == 4 && QC_KERNEL_COUNT == 5,
	      "matmul_dispatch.cu lists run[] positionally");

#include "gemm_f16.h"
#include "gemv_q.h"
#include "moe_gemm.h"

static uint64_t ggml_ws(int64_t n_in, int64_t n_out, int64_t n_rows, const struct qc_cuda_mm_tuning *t)
{
	(void)t; /* gemv_q needs none; gemm_f16 the same at any boundary */
	return qc_cuda_gemm_f16_ws_bytes(n_in, n_out, n_rows);
}

static const struct qc_cuda_mm_kernels ggml_kernels = {
	"gemv_q/cublas", {NULL, qc_cuda_gemv_q, NULL, qc_cuda_gemm_f16, qc_cuda_moe_gemm_mm}, ggml_ws, qc_cuda_moe_gemm_ws,
	{0, 0, 0, 0, 0},
};

extern "C" const struct qc_cuda_mm_kernels *qc_cuda_mm_find(enum qc_layout l, enum qc_type t)
{
	if (l == QC_LAYOUT_GGML)
		return qc_cuda_gemv_q_supports(t) ? &ggml_kernels : NULL;
#define QC_CUDA_MM(LAYOUT, TYPE, NAME, GEMV, MMA, F16, MOE, MOE_WS, WS, GEMV_FUSE, GEMM_FUSE) \
	if (l == (LAYOUT) && t == (TYPE)) { \
		static const struct qc_cuda_mm_kernels k = {NAME, {NULL, GEMV, MMA, F16, MOE}, WS, MOE_WS, {0, GEMV_FUSE, GEMM_FUSE, GEMM_FUSE, 0}}; \
		return &k; \
	}
#include "matmul_layouts.def"
#undef QC_CUDA_MM
	return NULL;
}
