/* moe_route.cu — Mixtral routing on the device: softmax over the experts,
 * top-k by probability (first index wins ties), weights renormalized over the
 * k when asked, as llm_build_moe_ffn(softmax gating, norm_w).
 * One thread per token (n_expert <= 256 fits in its registers/local memory);
 * routing is a sliver of a MoE layer's work. The softmax sum and the
 * renormalizing sum are in double, as ggml's soft_max and sum_rows (and the CPU
 * backend, which runs the reference) do. Reference: runtime/ops/moe_route.c.
 */
#include "moe_route.h"
#include "pdl.cuh"

#include <cuda_runtime.h>

#define MAX_EXPERTS 256

static __global__ void moe_route_kernel(const struct qc_cuda_moe_route_args a)
{
	qc_pdl_enter();
	const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (t >= a.n_tok)
		return;
	const float *l = a.d_logits + t * a.n_expert;
	float p[MAX_EXPERTS];
	float mx = -INFINITY;
	for (int e = 0; e < a.n_expert; e++)
		mx = l[e] > mx ? l[e] : mx;
	double sum = 0.0;
	for (int e = 0; e < a.n_expert; e++) {
		p[e] = expf(l[e] - mx);
		sum += (double)p[e];
	}
	const float inv = (float)(1.0 / sum);
	for (int e = 0; e < a.n_expert; e++)
		p[e] *= inv;
	int32_t *sel = a.d_sel + t * a.k;
	float *w = a.d_w + t * a.k;
	uint32_t taken[MAX_EXPERTS / 32] = {0};
	double wsum = 0.0; /* ggml sum_rows: double, clamped as llama.cpp does */
	for (int s = 0; s < a.k; s++) {
		int best = -1;
		for (int e = 0; e < a.n_expert; e++)
			if (!(taken[e / 32] >> (e % 32) & 1) && (best < 0 || p[e] > p[best]))
				best = e;
		taken[best / 32] |= 1u << (best % 32);
		sel[s] = best;
		w[s] = p[best];
		wsum += (double)p[best];
	}
	const float fs = fmaxf((float)wsum, 6.103515625e-5f);
	for (int s = 0; a.norm && s < a.k; s++)
		w[s] /= fs;
}

extern "C" int qc_cuda_moe_route(const struct qc_cuda_moe_route_args *a, cudaStream_t s, struct qc_err *err)
{
	if (a->n_expert < 1 || a->n_expert > MAX_EXPERTS || a->k < 1 || a->k > a->n_expert || a->n_tok < 0)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "moe_route: %d of %d experts",
				  a->k, a->n_expert);
	if (!a->n_tok)
		return QC_OK;
	(void)qc_launch(moe_route_kernel, dim3((unsigned)((a->n_tok + 63) / 64)), dim3(64), 0, s, *a);
	return qc_cuda_check(cudaGetLastError(), "moe_route_kernel", err);
}
