/* rope.cu — rotary position embedding, NORM (adjacent pairs, llama) and NEOX
 * (x[i], x[i + n_rot/2], qwen) pairing, in place.
 *
 * One thread per (token, head, pair). The angle of pair i is advanced by i
 * float multiplications from pos, as ggml's rope cache and the CPU backend do,
 * so both see the same theta; cosf/sinf may differ from glibc by an ulp.
 * Products are rounded separately (no fma) as in the C code. YaRN (ramp
 * between the scaled and unscaled angle, mscale on cos/sin) and llama3
 * frequency divisors as ggml rope_yarn / the CPU backend's rope_ext.
 * Reference: runtime/ops/rope.c.
 */
#include "rope.h"

#include <cuda_runtime.h>

extern "C" {
#include "ops.h" /* enum qc_rope_mode */
}

static __global__ void rope_kernel(const struct qc_cuda_rope_args a)
{
	const int half = a.n_rot / 2;
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= a.n_tok * a.n_heads * half)
		return;
	const int p = (int)(i % half);
	const int64_t th = i / half, t = th / a.n_heads, h = th % a.n_heads;
	float theta = (float)a.d_pos[t];
	for (int k = 0; k < p; k++)
		theta *= a.theta_scale;
	const float extrap = a.d_ff ? __fdiv_rn(theta, a.d_ff[p]) : theta;
	const float interp = __fmul_rn(a.freq_scale, extrap);
	float ang = interp;
	if (a.ext_factor != 0.0f) {
		const float y = __fdiv_rn(__fsub_rn((float)p, a.corr[0]), fmaxf(0.001f, __fsub_rn(a.corr[1], a.corr[0])));
		const float mix = __fmul_rn(1.0f - fminf(1.0f, fmaxf(0.0f, y)), a.ext_factor);
		ang = __fadd_rn(__fmul_rn(interp, __fsub_rn(1.0f, mix)), __fmul_rn(extrap, mix));
	}
	const float cs = __fmul_rn(cosf(ang), a.mscale), sn = __fmul_rn(sinf(ang), a.mscale);
	const int stride = a.mode == QC_ROPE_NEOX ? half : 1;
	const int j = a.mode == QC_ROPE_NEOX ? p : 2 * p;
	float *x = a.d_x + (t * a.n_heads + h) * a.hd + j;
	const float x0 = x[0], x1 = x[stride];
	x[0] = __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn));
	x[stride] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, cs));
}

extern "C" int qc_cuda_rope(const struct qc_cuda_rope_args *a, cudaStream_t s, struct qc_err *err)
{
	if (a->n_rot < 2 || a->n_rot % 2 || a->n_rot > a->hd || a->n_heads < 1 || a->n_tok < 0 ||
	    (a->mode != QC_ROPE_NORM && a->mode != QC_ROPE_NEOX) || !(a->mscale > 0.0f))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "rope: n_rot %d, head dim %d, %d heads, mode %d, mscale %g",
				  a->n_rot, a->hd, a->n_heads, a->mode, (double)a->mscale);
	const int64_t n = a->n_tok * a->n_heads * (a->n_rot / 2);
	if (!n)
		return QC_OK;
	rope_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(*a);
	return qc_cuda_check(cudaGetLastError(), "rope_kernel", err);
}
