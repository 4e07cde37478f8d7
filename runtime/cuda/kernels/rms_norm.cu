/* rms_norm.cu — RMSNorm of rows times a weight (attention/FFN/output norms and
 * the per-head q/k norms of qwen3, as rows of head_dim).
 *
 * One block per row; the sum of squares is a fixed-order float tree (the C
 * reference sums in double, as ggml's CPU rms_norm). An optional row list
 * gathers the rows that need logits. Non-goals: fused residual add.
 * Reference: runtime/ops/rms_norm.c.
 */
#include "rms_norm.h"

#include <cuda_runtime.h>

#include "block_reduce.cuh"

static __global__ void rms_norm_kernel(const struct qc_cuda_rms_norm_args a)
{
	const int64_t r = blockIdx.x;
	const float *x = a.d_x + (a.d_rows ? a.d_rows[r] : r) * a.ldx;
	float *y = a.d_y + r * a.ldy;
	float s = 0.0f;
	for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x)
		s = fmaf(x[i], x[i], s);
	s = block_reduce<QC_RED_SUM>(s);
	const float scale = 1.0f / sqrtf(s / (float)a.n + a.eps);
	for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x)
		y[i] = (x[i] * scale) * a.d_w[i];
}

extern "C" int qc_cuda_rms_norm(const struct qc_cuda_rms_norm_args *a, cudaStream_t s, struct qc_err *err)
{
	if (a->n < 1 || a->n_rows < 0 || a->n_rows > INT32_MAX || a->ldx < a->n || a->ldy < a->n)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "rms_norm: %lld rows of %lld (ld %lld/%lld)",
				  (long long)a->n_rows, (long long)a->n, (long long)a->ldx, (long long)a->ldy);
	if (!a->n_rows)
		return QC_OK;
	rms_norm_kernel<<<(unsigned)a->n_rows, a->n >= 1024 ? 512 : 128, 0, s>>>(*a);
	return qc_cuda_check(cudaGetLastError(), "rms_norm_kernel", err);
}
