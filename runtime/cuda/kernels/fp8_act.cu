/* fp8_act.cu — W8A8 FP8 activations to e4m3 codes (fp8_act.h), for fp8_gemm.cu and
 * fp8_gemv.cu.
 *
 * One block per activation row: with a dynamic scale a max over the row first (a fixed
 * reduction order), then every element through quant/act_fp8.h's qc_act_fp8_code, the
 * same IEEE operations as the reference, so the codes are the reference's bit for bit.
 * Rows whose stride and start allow it are read as float4 (a warp reads 512 contiguous
 * bytes) and written as 4 codes a store; others one float at a time. The second pass
 * re-reads the row, which the first left in L1/L2. Launched with programmatic dependent
 * launch (pdl.cuh) like the kernels around it, so the GEMV after it starts its weight
 * loads while this runs.
 * Reference: runtime/ops/fp8_act.c.
 */
#include "fp8_act.h"

extern "C" {
#include "act_fp8.h"
}
#include "block_reduce.cuh"
#include "pdl.cuh"

#include <cuda_runtime.h>

namespace {

constexpr int QT = 256; /* threads a row */

__device__ __forceinline__ uint32_t pack4(float a, float b, float c, float d, float s)
{
	return (uint32_t)qc_act_fp8_code(a, s) | (uint32_t)qc_act_fp8_code(b, s) << 8 |
	       (uint32_t)qc_act_fp8_code(c, s) << 16 | (uint32_t)qc_act_fp8_code(d, s) << 24;
}

template <bool VEC>
__global__ void act_quant(const float *__restrict__ x, int64_t ldx, int k, const float *__restrict__ a_ptr,
			  uint8_t *__restrict__ codes, float *__restrict__ scales)
{
	const int64_t r = blockIdx.x;
	const float *xr = x + r * ldx;
	const float a = *a_ptr; /* the weights' bytes: read-only, before the wait */
	qc_pdl_enter();
	float s = a;
	if (!(a > 0.0f)) {
		float m = 0.0f;
		if (VEC) {
			for (int i = threadIdx.x * 4; i < k; i += QT * 4) {
				const float4 v = *(const float4 *)(xr + i);
				m = fmaxf(fmaxf(m, fmaxf(fabsf(v.x), fabsf(v.y))), fmaxf(fabsf(v.z), fabsf(v.w)));
			}
		} else {
			for (int i = threadIdx.x; i < k; i += QT)
				m = fmaxf(m, fabsf(xr[i]));
		}
		m = block_reduce<QC_RED_MAX>(m);
		s = qc_act_fp8_dyn_scale(m);
	}
	uint32_t *out = (uint32_t *)(codes + r * (int64_t)k); /* k % 32 == 0: 16-byte rows */
	for (int i = threadIdx.x * 4; i < k; i += QT * 4) {
		if (VEC) {
			const float4 v = *(const float4 *)(xr + i);
			out[i / 4] = pack4(v.x, v.y, v.z, v.w, s);
		} else {
			out[i / 4] = pack4(xr[i], xr[i + 1], xr[i + 2], xr[i + 3], s);
		}
	}
	if (threadIdx.x == 0)
		scales[r] = s;
}

} // namespace

extern "C" int qc_cuda_fp8_act_quant(const float *d_x, int64_t ldx, int64_t n_rows, int64_t k, const float *d_a,
				     uint8_t *d_codes, float *d_scales, cudaStream_t s, struct qc_err *err)
{
	if (n_rows < 0 || n_rows > INT32_MAX || k <= 0 || k % 32 || k > ((int64_t)1 << 24) || ldx < k)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "fp8_act_quant: %lld rows of %lld (ldx %lld)",
				  (long long)n_rows, (long long)k, (long long)ldx);
	if (n_rows == 0)
		return QC_OK;
	const bool vec = ldx % 4 == 0 && (uintptr_t)d_x % 16 == 0;
	const int kk = (int)k;
	const cudaError_t e = vec ? qc_launch(act_quant<true>, dim3((unsigned)n_rows), dim3(QT), 0, s, d_x, ldx, kk, d_a,
					      d_codes, d_scales)
				  : qc_launch(act_quant<false>, dim3((unsigned)n_rows), dim3(QT), 0, s, d_x, ldx, kk, d_a,
					      d_codes, d_scales);
	return qc_cuda_check(e, "fp8_act_quant launch", err);
}
