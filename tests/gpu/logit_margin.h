/* logit_margin.h — what the GPU end-to-end tests record of a CPU logits row to tell
 * a real divergence from a near-tie: the gap between the two largest logits and
 * the largest magnitude (test_e2e.c, test_tp.c). */
#ifndef QC_TEST_LOGIT_MARGIN_H
#define QC_TEST_LOGIT_MARGIN_H

#include <math.h>
#include <stdint.h>

static inline void logit_margin(const float *lg, int32_t n, float *margin, float *maxabs)
{
	float a = -INFINITY, b = -INFINITY, mx = 0;
	for (int32_t i = 0; i < n; i++) {
		if (lg[i] > a) {
			b = a;
			a = lg[i];
		} else if (lg[i] > b) {
			b = lg[i];
		}
		mx = fabsf(lg[i]) > mx ? fabsf(lg[i]) : mx;
	}
	*margin = a - b;
	*maxabs = mx;
}

#endif
