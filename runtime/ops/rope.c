/* rope.c — reference of runtime/cuda/kernels/rope.cu: rotate pairs of the first n_rot
 * dims of each head; the angle of pair i is pos * theta_scale^i by repeated
 * float multiplication (ggml's rope cache), divided by ff[i] (llama3 factors),
 * times freq_scale; with YaRN blended with the unscaled angle by the ramp of
 * ggml rope_yarn, cos/sin times mscale. Mode 0 pairs (x[2i], x[2i+1]) (NORM),
 * mode 2 pairs (x[i], x[i + n_rot/2]) (NEOX). The rotation is fused as GCC compiles
 * ggml's rope_f32 for an FMA target (GNU C contracts by default): x0 cos - x1 sin is
 * fma(x0, cos, -(x1 sin)) and x0 sin + x1 cos is fma(x0, sin, x1 cos). Bit for bit the
 * same as llama.cpp's AVX2/FMA build (docs/accuracy.md: on SmolLM2 a last-bit difference
 * here moves logits by 0.1 a few layers later). */
#include <math.h>

#include "ops.h"

void qc_ref_rope(float *x, const int32_t *pos, int64_t n_tok, int n_heads, int hd, int n_rot,
		 int mode, float theta_scale, float freq_scale, const struct qc_ref_rope_ext *ext)
{
	const int neox = mode == 2, stride = neox ? n_rot / 2 : 1;
	const float ms = ext ? ext->mscale : 1.0f;
	for (int64_t t = 0; t < n_tok; t++) {
		float theta = (float)pos[t];
		for (int p = 0; p < n_rot / 2; p++) {
			const float extrap = ext && ext->ff ? theta / ext->ff[p] : theta;
			const float interp = freq_scale * extrap;
			float ang = interp;
			if (ext && ext->ext_factor != 0.0f) {
				const float y = ((float)p - ext->corr[0]) / fmaxf(0.001f, ext->corr[1] - ext->corr[0]);
				const float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * ext->ext_factor;
				ang = interp * (1 - mix) + extrap * mix;
			}
			const float cs = cosf(ang) * ms, sn = sinf(ang) * ms;
			const int j = neox ? p : 2 * p;
			for (int h = 0; h < n_heads; h++) {
				float *v = x + (t * n_heads + h) * hd + j;
				const float x0 = v[0], x1 = v[stride];
				v[0] = fmaf(x0, cs, -(x1 * sn));
				v[stride] = fmaf(x0, sn, x1 * cs);
			}
			theta *= theta_scale;
		}
	}
}
