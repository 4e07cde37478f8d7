/* fp8_gemm.c — reference of runtime/cuda/kernels/fp8_gemm.cu: y = W x for W8A8 FP8
 * weights in the fp8_rows layout, read straight from the packed bytes with the
 * offsets of docs/layout-fp8.md (written out here, not the packer's code, so it also
 * checks the layout). Each activation row is rounded to e4m3 by fp8_act.c (the codes
 * and scale the CUDA kernels must reproduce bit for bit), then
 *   y[t][o] = d[o] * s[t] * sum_i e4m3(w[o][i]) * e4m3(xc[t][i]),
 * the products exact and summed in double: the truth the tensor cores' fp32 sums
 * are held to. Also the reference of fp8_gemv.cu (the same arithmetic, other sums).
 */
#include <stdlib.h>
#include <string.h>

#include "act_fp8.h"
#include "ops.h"

int qc_ref_fp8_gemm(const uint8_t *w, int64_t n_in, int64_t n_out, const float *x, int64_t ldx, int64_t n_rows,
		    float *y, int64_t ldy)
{
	const float a = qc_ref_fp8_rows_act_scale(w, n_in, n_out);
	uint8_t *xc = malloc((size_t)(n_rows * n_in) + 1);
	float *xs = malloc(sizeof(float) * (size_t)n_rows + 1);
	double *wv = malloc(sizeof(double) * (size_t)n_in);
	if (!xc || !xs || !wv) {
		free(xc);
		free(xs);
		free(wv);
		return QC_ENOMEM;
	}
	qc_ref_fp8_act_quant(x, ldx, n_rows, n_in, a, xc, xs);
	const uint8_t *sc = w + (uint64_t)n_out * (uint64_t)n_in;
	for (int64_t o = 0; o < n_out; o++) {
		float d;
		memcpy(&d, sc + 4 * (uint64_t)o, 4);
		for (int64_t i = 0; i < n_in; i++)
			wv[i] = (double)qc_e4m3_to_f32(w[(uint64_t)o * (uint64_t)n_in + (uint64_t)i]);
		for (int64_t t = 0; t < n_rows; t++) {
			double acc = 0.0;
			for (int64_t i = 0; i < n_in; i++)
				acc += wv[i] * (double)qc_e4m3_to_f32(xc[t * n_in + i]);
			y[t * ldy + o] = (float)(acc * (double)d * (double)xs[t]);
		}
	}
	free(xc);
	free(xs);
	free(wv);
	return QC_OK;
}
