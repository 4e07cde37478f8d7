/* dequant_hfq.h — lookup tables and scalar helpers of the Hugging Face scheme
 * encodings (qtype.def ids 128+): bitsandbytes NF4/FP4 codebooks, OCP E2M1 and
 * E4M3FN decoding, and the f32-in-two-uint16 scale fields of their blocks.
 * Tables are the values the reference libraries serialize: bnb's get_4bit_type
 * (the checkpoint's weight.quant_map, and the constants of bnb's CUDA kernels),
 * compressed-tensors' kE2M1ToFloat. Decoders live in dequant_hfq.c.
 */
#ifndef QC_DEQUANT_HFQ_H
#define QC_DEQUANT_HFQ_H

#include <stdint.h>
#include <string.h>

#include "fp16.h" /* qc_e4m3_to_f32 */
#include "qblock.h"

QC_TABLE_EXTERN(float, qc_bnb_nf4, 16)
QC_TABLE_EXTERN(float, qc_bnb_fp4, 16)
QC_TABLE_EXTERN(float, qc_e2m1, 16)

/* f32 stored as two uint16_t (low half first). */
static inline QC_HOSTDEV float qc_hfq_get_f32(const uint16_t *d)
{
	uint32_t u = (uint32_t)d[0] | ((uint32_t)d[1] << 16);
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static inline QC_HOSTDEV void qc_hfq_put_f32(uint16_t *d, float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	d[0] = (uint16_t)(u & 0xffff);
	d[1] = (uint16_t)(u >> 16);
}

#endif
