/* nvfp4_swz.c — reference of runtime/cuda/kernels/nvfp4_swz.cu: y = W x with W in the
 * nvfp4_swz layout, decoded on the host straight from the packed bytes with the
 * formulas of docs/layout-nvfp4.md (written out here, not the packer's code, so it
 * also checks the layout): weight (n, k) = fl(e2m1(q)·fl(e4m3(s)/g)), the nvfp4
 * ggml decoder's value bit for bit. Precision as the args say: F32 a float running
 * sum (the GEMV's precision class), F64 the truth, F16 weights and activations
 * rounded to fp16 with double sums (the cuBLAS path's). Rows of at most 2^24.
 */
#include <stdlib.h>
#include <string.h>

#include "dequant_hfq.h"
#include "fp16.h"
#include "ops.h"

/* row o of the slice at w (n_in = K, n_out = N) as floats */
static void decode_row(const uint8_t *w, int64_t n_in, int64_t n_out, int64_t o, float *out)
{
	const int64_t np = (n_out + 127) / 128 * 128, kgp = (n_in / 16 + 3) / 4 * 4;
	const uint8_t *codes = w + (uint64_t)o * (uint64_t)(n_in / 2);
	const uint8_t *sc = w + (uint64_t)n_out * (uint64_t)(n_in / 2);
	float g;
	memcpy(&g, sc + (uint64_t)np * (uint64_t)kgp + 4 * (uint64_t)o, 4);
	for (int64_t c = 0; c < n_in / 16; c++) {
		const uint64_t tile = (uint64_t)(o / 128) * (uint64_t)(kgp / 4) + (uint64_t)(c / 4);
		const uint8_t s = sc[tile * 512 + (uint64_t)(o % 32) * 16 + (uint64_t)((o % 128) / 32) * 4 + (uint64_t)(c % 4)];
		const float d = qc_e4m3_to_f32(s) / g;
		for (int j = 0; j < 16; j++) {
			const uint8_t byte = codes[c * 8 + j / 2];
			out[c * 16 + j] = qc_e2m1[j % 2 ? byte >> 4 : byte & 0xf] * d;
		}
	}
}

static float r16(float v)
{
	return qc_fp16_to_f32(qc_f32_to_fp16(v));
}

void qc_ref_nvfp4_swz(const uint8_t *w, int64_t n_in, int64_t n_out, uint64_t mat_stride, const float *x,
		      int64_t ldx, int x_div, const int32_t *expert, int64_t n_rows, float *y, int64_t ldy,
		      enum qc_ref_prec prec)
{
	float *row = malloc(sizeof(float) * (size_t)n_in);
	if (!row)
		return;
	for (int64_t r = 0; r < n_rows; r++) {
		const int64_t e = expert ? expert[r] : 0;
		const float *xr = x + (r / x_div) * ldx;
		for (int64_t o = 0; o < n_out; o++) {
			decode_row(w + (uint64_t)e * mat_stride, n_in, n_out, o, row);
			double sd = 0.0;
			float sf = 0.0f;
			for (int64_t i = 0; i < n_in; i++) {
				if (prec == QC_REF_F16)
					sd += (double)r16(row[i]) * (double)r16(xr[i]);
				else
					sd += (double)row[i] * (double)xr[i];
				sf += row[i] * xr[i];
			}
			y[r * ldy + o] = prec == QC_REF_F32 ? sf : (float)sd;
		}
	}
	free(row);
}
