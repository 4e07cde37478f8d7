/* moe_combine.cu — add the routing-weighted expert outputs (and the
 * sigmoid-gated shared expert, Qwen2-MoE) to the residual in the CPU backend's
 * order: acc = w0*e0, acc += ws*es for the other slots in rank order, acc +=
 * sh * silu(g)/g, then x += acc; every product rounded before its add (no fma).
 * One thread per (token, element).
 * Reference: runtime/ops/moe_combine.c.
 */
#include "moe_combine.h"
#include "pdl.cuh"

#include <cuda_runtime.h>

static __global__ void moe_combine_kernel(const struct qc_cuda_moe_combine_args a)
{
	qc_pdl_enter();
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= a.n_tok * a.n)
		return;
	const int64_t t = i / a.n, d = i % a.n;
	float acc = __fmul_rn(a.d_eout[t * a.k * a.n + d], a.d_w[t * a.k]);
	for (int s = 1; s < a.k; s++)
		acc = __fadd_rn(acc, __fmul_rn(a.d_eout[(t * a.k + s) * a.n + d], a.d_w[t * a.k + s]));
	if (a.d_sh) {
		/* the CPU's sigmoid: ggml's silu(g) / g */
		const float g = a.d_shg[t], gs = __fdiv_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), g);
		acc = __fadd_rn(acc, __fmul_rn(a.d_sh[i], gs));
	}
	a.d_x[i] = __fadd_rn(a.d_x[i], acc);
}

extern "C" int qc_cuda_moe_combine(const struct qc_cuda_moe_combine_args *a, cudaStream_t s, struct qc_err *err)
{
	if (a->n_tok < 0 || a->n < 1 || a->k < 1 || !a->d_sh != !a->d_shg)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "moe_combine: %lld tokens of %lld, k %d%s",
				  (long long)a->n_tok, (long long)a->n, a->k,
				  !a->d_sh != !a->d_shg ? ", shared expert output without its gate" : "");
	const int64_t n = a->n_tok * a->n;
	if (!n)
		return QC_OK;
	(void)qc_launch(moe_combine_kernel, dim3((unsigned)((n + 255) / 256)), dim3(256), 0, s, *a);
	return qc_cuda_check(cudaGetLastError(), "moe_combine_kernel", err);
}
