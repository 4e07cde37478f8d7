/* act_fp8.h — the activation rounding of W8A8 FP8 weights (f8_a8), shared by the
 * CPU matmul and the CUDA kernel so both pick the same e4m3 code for the same float.
 *
 * Owns: the scale of one activation row and its e4m3 codes. The scheme is
 * compressed-tensors' forward_quantize for float 8-bit input_activations:
 *   static (strategy tensor, a > 0): s = a, the checkpoint's input_scale;
 *   dynamic (strategy token, a == 0): s = max(amax(|x|) / 448, 2^-23), per row
 *     (calculate_qparams: symmetric, max over the row, clamped to float32's eps);
 *   code = e4m3(clamp(x / s, -448, 448)), round to nearest even; value = e4m3(code) * s.
 * Every step is one IEEE float operation (the max is exact), so a host and a device
 * given the same floats give the same codes and scale.
 * Non-goals: per-group (block FP8) activation scales, int8 activations.
 */
#ifndef QC_ACT_FP8_H
#define QC_ACT_FP8_H

#include <stdint.h>

#include "fp16.h"

#define QC_FP8_MAX 448.0f
#define QC_FP8_MIN_SCALE 0x1p-23f /* torch.finfo(float32).eps */

/* Scale of a dynamic row from its largest magnitude. */
static inline QC_HOSTDEV float qc_act_fp8_dyn_scale(float amax)
{
	const float s = amax / QC_FP8_MAX;
	return s > QC_FP8_MIN_SCALE ? s : QC_FP8_MIN_SCALE;
}

/* The e4m3 code of x under scale s (saturating: the clamp comes first). */
static inline QC_HOSTDEV uint8_t qc_act_fp8_code(float x, float s)
{
	float v = x / s;
	v = v > QC_FP8_MAX ? QC_FP8_MAX : v < -QC_FP8_MAX ? -QC_FP8_MAX : v;
	return qc_f32_to_e4m3(v);
}

/* Host: the scale of row x[0..n) (a > 0: a; else dynamic) and, when codes is not
 * NULL, its codes; when deq is not NULL, the rounded values e4m3(code) * s. */
static inline float qc_act_fp8_row(const float *x, int64_t n, float a, uint8_t *codes, float *deq)
{
	float s = a;
	if (!(a > 0.0f)) {
		float amax = 0.0f;
		for (int64_t i = 0; i < n; i++) {
			const float m = x[i] < 0.0f ? -x[i] : x[i];
			amax = m > amax ? m : amax;
		}
		s = qc_act_fp8_dyn_scale(amax);
	}
	for (int64_t i = 0; i < n; i++) {
		const uint8_t c = qc_act_fp8_code(x[i], s);
		if (codes)
			codes[i] = c;
		if (deq)
			deq[i] = qc_e4m3_to_f32(c) * s;
	}
	return s;
}

#endif
