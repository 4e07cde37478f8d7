/* decode_fp4.cuh — device decoder of MXFP4 (OCP Microscaling v1.0: E2M1
 * elements, one E8M0 exponent per 32) as a qc_dev<QC_TYPE_MXFP4> specialization.
 *
 * Owns: dec32 of MXFP4; included by decode.cuh (uses its qc_dev template).
 * Invariants: bit-exact with quant/dequant_fp4.c: the doubled E2M1
 * value of iq_tables.c's qc_mxfp4_values (decode_tables.cuh) times the halved
 * E8M0 scale (fp16.h qc_e8m0_to_f32_half, shared with the host: e = 255 is
 * 2^127, not NaN; e < 2 gives subnormal scales, kept since nvcc does not
 * flush without -ftz). Blocks are 17 bytes, so they sit at any address: read
 * bytewise. Element order as q4_0: byte j = element j (low), j + 16 (high).
 * Reference: llama.cpp dequantize_row_mxfp4 (ggml-quants.c), gguf-py MXFP4.
 */
#ifndef QC_CUDA_DECODE_FP4_CUH
#define QC_CUDA_DECODE_FP4_CUH

#include "decode_tables.cuh"
#include "iq_tables.h"

/* mxfp4: e 0, codes 1 (16) */
template <> struct qc_dev<QC_TYPE_MXFP4> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 32, BYTES = 17;
	static __device__ void dec32(const uint8_t *b, int, float *o)
	{
		const float d = qc_e8m0_to_f32_half(b[0]);
#pragma unroll
		for (int j = 0; j < 16; j++) {
			o[j] = __fmul_rn(qc_i2f(qc_iq_level(qc_mxfp4_values, b[1 + j] & 0xfu)), d);
			o[j + 16] = __fmul_rn(qc_i2f(qc_iq_level(qc_mxfp4_values, b[1 + j] >> 4)), d);
		}
	}
};

#endif
