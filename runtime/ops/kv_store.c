/* kv_store.c — reference of runtime/cuda/kernels/kv_store.cu: K/V rows to their
 * binary16 slots (round to nearest even), pool laid out as the CPU backend's. */
#include "fp16.h"
#include "ops.h"

void qc_ref_kv_store(const float *k, const float *v, const int32_t *slots, int64_t n_tok,
		     uint16_t *pool, int layer, int n_layer, int bt, int kv_dim)
{
	for (int64_t t = 0; t < n_tok; t++) {
		const int64_t b = slots[t] / bt, o = slots[t] % bt;
		uint16_t *kd = pool + (((b * n_layer + layer) * 2 + 0) * bt + o) * kv_dim;
		uint16_t *vd = pool + (((b * n_layer + layer) * 2 + 1) * bt + o) * kv_dim;
		for (int d = 0; d < kv_dim; d++) {
			kd[d] = qc_f32_to_fp16(k[t * kv_dim + d]);
			vd[d] = qc_f32_to_fp16(v[t * kv_dim + d]);
		}
	}
}
