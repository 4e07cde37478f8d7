/* paged_attn.c — reference of runtime/cuda/kernels/paged_attn.cu: for each token and
 * head, softmax(q . k_j * scale) over positions 0..pos of its sequence (K/V
 * found through the block table), times V. Dots and the softmax sum in double,
 * as the CPU backend; the ·V sum in float. */
#include <math.h>

#include "fp16.h"
#include "ops.h"

void qc_ref_paged_attn(const float *q, float *out, const uint16_t *pool, int layer, int n_layer,
		       int bt, int n_head, int n_head_kv, int hd, const int32_t *pos,
		       const int32_t *tok_seq, const int32_t *tables, int stride, int64_t n_tok,
		       float scale)
{
	const int group = n_head / n_head_kv;
	const int64_t kv_dim = (int64_t)n_head_kv * hd, q_dim = (int64_t)n_head * hd;
	for (int64_t t = 0; t < n_tok; t++) {
		const int32_t n_ctx = pos[t] + 1, *table = tables + (int64_t)tok_seq[t] * stride;
		for (int h = 0; h < n_head; h++) {
			const float *qh = q + t * q_dim + (int64_t)h * hd;
			float *o = out + t * q_dim + (int64_t)h * hd;
			const int64_t kvo = (int64_t)(h / group) * hd;
			float mx = -INFINITY;
			float sc[n_ctx];
			for (int32_t j = 0; j < n_ctx; j++) {
				const int64_t b = table[j / bt], off = j % bt;
				const uint16_t *k = pool + (((b * n_layer + layer) * 2) * bt + off) * kv_dim + kvo;
				double s = 0.0;
				for (int d = 0; d < hd; d++)
					s += (double)qh[d] * (double)qc_fp16_to_f32(k[d]);
				sc[j] = (float)s * scale;
				mx = sc[j] > mx ? sc[j] : mx;
			}
			double sum = 0.0;
			for (int32_t j = 0; j < n_ctx; j++) {
				sc[j] = expf(sc[j] - mx);
				sum += (double)sc[j];
			}
			const float inv = (float)(1.0 / sum);
			for (int d = 0; d < hd; d++)
				o[d] = 0.0f;
			for (int32_t j = 0; j < n_ctx; j++) {
				const int64_t b = table[j / bt], off = j % bt;
				const uint16_t *v = pool + (((b * n_layer + layer) * 2 + 1) * bt + off) * kv_dim + kvo;
				const float p = sc[j] * inv;
				for (int d = 0; d < hd; d++)
					o[d] += p * qc_fp16_to_f32(v[d]);
			}
		}
	}
}
