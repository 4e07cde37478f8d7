/* rope.cu — rotary position embedding, NORM (adjacent pairs, llama) and NEOX
 * (x[i], x[i + n_rot/2], qwen) pairing, in place.
 *
 * One thread per (token, head, pair). The angle of pair i is advanced by i
 * float multiplications from pos, as ggml's rope cache and the CPU backend do,
 * so both see the same theta; cosf/sinf may differ from glibc by an ulp.
 * Products are rounded separately (no fma) as in the C code. YaRN (ramp
 * between the scaled and unscaled angle, mscale on cos/sin) and llama3
 * frequency divisors as ggml rope_yarn / the CPU backend's rope_ext; that
 * per-pair math lives in rope_pair.cuh, shared with the fused rope_kv.cu.
 * Reference: runtime/ops/rope.c.
 */
#include "rope.h"

#include <cuda_runtime.h>

#include "rope_pair.cuh"

static __global__ void rope_kernel(const struct qc_cuda_rope_args a)
{
	const int half = a.n_rot / 2;
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= a.n_tok * a.n_heads * half)
		return;
	const int p = (int)(i % half);
	const int64_t th = i / half, t = th / a.n_heads, h = th % a.n_heads;
	const struct rope_cs r = rope_pair_cs(a, a.d_pos[t], p);
	const int stride = rope_pair_stride(a.mode, half);
	float *x = a.d_x + (t * a.n_heads + h) * a.hd + rope_pair_first(a.mode, p);
	const float2 y = rope_pair_rotate(x[0], x[stride], r);
	x[0] = y.x;
	x[stride] = y.y;
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
