/* moe_route.c — reference of runtime/cuda/kernels/moe_route.cu, and the CPU
 * backend's router: softmax over experts (sum in double), k passes of arg-max
 * (first index wins ties), weights renormalized when norm by their sum taken in
 * double (ggml sum_rows) and clamped to the smallest normal binary16 (llama.cpp
 * clamps it against a division by 0): llm_build_moe_ffn's softmax (+ norm_w). */
#include <math.h>
#include <stdbool.h>

#include "ops.h"

void qc_ref_moe_route(const float *logits, int64_t n_tok, int n_expert, int k, int norm, int32_t *sel,
		      float *w)
{
	for (int64_t t = 0; t < n_tok; t++) {
		const float *l = logits + t * n_expert;
		float p[n_expert];
		float mx = -INFINITY;
		for (int e = 0; e < n_expert; e++)
			mx = l[e] > mx ? l[e] : mx;
		double sum = 0.0;
		for (int e = 0; e < n_expert; e++) {
			p[e] = expf(l[e] - mx);
			sum += (double)p[e];
		}
		const float inv = (float)(1.0 / sum);
		for (int e = 0; e < n_expert; e++)
			p[e] *= inv;
		int32_t *s = sel + t * k;
		float *ws = w + t * k;
		double wsum = 0.0;
		for (int i = 0; i < k; i++) {
			int best = -1;
			for (int e = 0; e < n_expert; e++) {
				bool taken = false;
				for (int u = 0; u < i; u++)
					taken |= s[u] == e;
				if (!taken && (best < 0 || p[e] > p[best]))
					best = e;
			}
			s[i] = best;
			ws[i] = p[best];
			wsum += (double)p[best];
		}
		const float fs = fmaxf((float)wsum, 6.103515625e-5f);
		for (int i = 0; norm && i < k; i++)
			ws[i] /= fs;
	}
}
