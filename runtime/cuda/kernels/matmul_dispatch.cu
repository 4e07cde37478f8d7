/* matmul_dispatch.cu — builds the (layout, type) table of matmul_dispatch.h.
 *
 * QC_LAYOUT_GGML: gemv = the fused-dequant GEMV (gemv_q.cu), gemm = dequantize
 * to fp16 + cuBLAS (gemm_f16.cu), for every type gemv_q has a decoder for
 * (generated from qtype.def there). Other layouts: matmul_layouts.def rows.
 * Non-goals: picking gemv vs gemm, tuning.
 */
#include "matmul_dispatch.h"

#include "gemm_f16.h"
#include "gemv_q.h"

static const struct qc_cuda_mm_kernels ggml_kernels = {
	"gemv_q/cublas", qc_cuda_gemv_q, qc_cuda_gemm_f16, qc_cuda_gemm_f16_ws_bytes,
};

extern "C" const struct qc_cuda_mm_kernels *qc_cuda_mm_find(enum qc_layout l, enum qc_type t)
{
	if (l == QC_LAYOUT_GGML)
		return qc_cuda_gemv_q_supports(t) ? &ggml_kernels : NULL;
#define QC_CUDA_MM(LAYOUT, TYPE, NAME, GEMV, GEMM, WS) \
	if (l == (LAYOUT) && t == (TYPE)) { \
		static const struct qc_cuda_mm_kernels k = {NAME, GEMV, GEMM, WS}; \
		return &k; \
	}
#include "matmul_layouts.def"
#undef QC_CUDA_MM
	return NULL;
}
