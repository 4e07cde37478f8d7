/* decode_ternary.cuh — device decoders of the ternary types tq1_0 and tq2_0
 * (qc_dev<T> specializations; x = (float)(t - 1) * d).
 *
 * Owns: dec32 of those two types; included by decode.cuh (uses its qc_dev
 * template and ld_f16).
 * Invariants: bit-exact with quant/dequant_ternary.c (one float product
 * per element, exact small integers times the fp16 scale). tq1_0 trit n of a
 * byte is ((uint8_t)(byte * 3^n) * 3) >> 8; elements 32n + m come from trit n
 * of qs[m] (m < 32), 160 + 16n + m from qs[32 + m] (m < 16), 240 + 4n + m from
 * qh[m]. tq2_0 chunk c is plane c % 4 of the 32-byte half c / 4.
 * Reference: llama.cpp dequantize_row_tq1_0 / dequantize_row_tq2_0
 * (ggml-quants.c), block layouts in quant/qblock.h.
 */
#ifndef QC_CUDA_DECODE_TERNARY_CUH
#define QC_CUDA_DECODE_TERNARY_CUH

/* (float)(trit n of byte - 1) * d, n < 5 */
static __device__ __forceinline__ float tq1_val(unsigned byte, int n, float d)
{
	const unsigned pow3 = n == 0 ? 1 : n == 1 ? 3 : n == 2 ? 9 : n == 3 ? 27 : 81;
	return qc_i2f((int)((((byte * pow3) & 0xffu) * 3) >> 8) - 1) * d;
}

/* tq1_0: qs 0 (48, 5 trits per byte), qh 48 (4, 4 trits), d 52 */
template <> struct qc_dev<QC_TYPE_TQ1_0> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 256, BYTES = 54;
	static __device__ void dec32(const uint8_t *b, int c, float *o)
	{
		const float d = ld_f16(b + 52);
		if (c < 5) { /* elements 32c + m: trit c of qs[m] */
			for (int m = 0; m < 32; m++)
				o[m] = tq1_val(b[m], c, d);
		} else if (c < 7) { /* 160 + 16n + m: trits n = 2(c-5), 2(c-5) + 1 of qs[32 + m] */
			for (int m = 0; m < 16; m++) {
				o[m] = tq1_val(b[32 + m], 2 * (c - 5), d);
				o[m + 16] = tq1_val(b[32 + m], 2 * (c - 5) + 1, d);
			}
		} else { /* trit 4 of qs[32 + m], then 240 + 4n + m: trit n of qh[m] */
			for (int m = 0; m < 16; m++)
				o[m] = tq1_val(b[32 + m], 4, d);
			for (int k = 0; k < 16; k++)
				o[16 + k] = tq1_val(b[48 + k % 4], k / 4, d);
		}
	}
};

/* tq2_0: qs 0 (64: two 32-byte halves, 4 bit planes each), d 64 */
template <> struct qc_dev<QC_TYPE_TQ2_0> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 256, BYTES = 66;
	static __device__ void dec32(const uint8_t *b, int c, float *o)
	{
		const float d = ld_f16(b + 64);
		const uint8_t *q = b + 32 * (c / 4);
		const int shift = 2 * (c % 4);
		for (int l = 0; l < 32; l++)
			o[l] = qc_i2f(((q[l] >> shift) & 3) - 1) * d;
	}
};

#endif
