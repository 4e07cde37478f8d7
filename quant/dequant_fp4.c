/* dequant_fp4.c — decoder for MXFP4 (OCP Microscaling v1.0, E2M1 elements
 * with one E8M0 exponent per 32).
 *
 * Matches ggml's dequantize_row_mxfp4 and gguf-py's MXFP4.dequantize_blocks
 * (llama.cpp after the fixtures' commit): value = e2m1x2[q] * 2^(e-128),
 * i.e. the doubled E2M1 table times the halved E8M0 scale, one float
 * product per element. e = 255 decodes as 2^127 scale, not NaN, as in ggml.
 * Element order as q4_0: byte j = element j (low nibble), j+16 (high).
 * Non-goals: NVFP4 and other FP4 flavours.
 */
#include <string.h>

#include "dequant.h"
#include "fp16.h"
#include "iq_tables.h"

void qc_dequant_row_MXFP4(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t ib = 0; ib < n / QC_QK32; ib++, p += sizeof(struct qc_block_MXFP4), dst += QC_QK32) {
		struct qc_block_MXFP4 b;
		memcpy(&b, p, sizeof b);
		const float d = qc_e8m0_to_f32_half(b.e);
		for (int j = 0; j < 16; j++) {
			dst[j] = (float)qc_mxfp4_values[b.qs[j] & 0xf] * d;
			dst[j + 16] = (float)qc_mxfp4_values[b.qs[j] >> 4] * d;
		}
	}
}
