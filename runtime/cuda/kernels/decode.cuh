/* decode.cuh — device block decoders: 32 consecutive elements at a time.
 *
 * Owns: template qc_dev<T> (T an enum qc_type value). A specialization exists
 * for every type with a device decoder and provides:
 *   ok = true; QK (elements per block, 32 for plain float types: a "block" of 32
 *   elements), BYTES (bytes of such a block), dec32(blk, c, out[32]) decoding
 *   elements [32c, 32c + 32) of the block at blk; PLAIN (one element per ggml
 *   block: rows of any length, the tail past the last 32 read by dec1(row, i)).
 * Here: float, legacy, K-quant and Hugging Face scheme types (hq4, hq8,
 * bnb_nf4/fp4 with code books in constant memory, f8_e4m3, nvfp4); i-quants in
 * decode_iq.cuh, tq1_0/tq2_0 in decode_ternary.cuh, MXFP4 in decode_fp4.cuh
 * (tables: decode_tables.cuh, the host's quant/iq_tables.c). F64, the
 * integer types and Q8_1/Q8_K (llama.cpp's activation formats) have none
 * (ok = false): the backend dequantizes them on the host at load (logged once).
 * Loads: plain float rows use 16-byte vector loads when the chunk is 16-byte
 * aligned; ggml blocks (2-byte aligned, except MXFP4's 17 bytes) are read
 * bytewise from wherever the caller put them (gemv_q.cu first copies them to
 * shared memory with 16-byte loads). Integers become floats through qc_i2f and
 * binary16 through qc_dev_f16: both exact, both cheaper than the plain casts.
 * Invariant: bit-exact with quant/dequant_*.c (llama.cpp's to_float):
 * the same roundings in the same order, written with __fmul_rn/__fsub_rn so
 * nvcc cannot fuse them into an fma.
 * Reference: quant/qblock.h (layouts), quant/dequant_*.c.
 */
#ifndef QC_CUDA_DECODE_CUH
#define QC_CUDA_DECODE_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "qblock.h"
#include "qc_cuda.h"
#include "dequant_hfq.h"
#include "fp16.h"

template <int T> struct qc_dev {
	static constexpr bool ok = false;
	static constexpr bool PLAIN = false;
};

/* binary16 bits -> float in one conversion instruction: exact, the value of
 * qc_fp16_to_f32 (the bit-twiddling version costs ~10 integer ops, and it was
 * what held F16 rows at half of BF16's GEMV rate). NaN payloads may differ;
 * weights are finite. */
static __device__ __forceinline__ float qc_dev_f16(uint16_t h)
{
	return __half2float(__ushort_as_half(h));
}

/* (float)v, exact for |v| < 2^22, in two full-rate ops (integer-to-float
 * conversion issues at a quarter of the FMA rate, and every decoder does one
 * per weight): the float 1.5 * 2^23 + v carries v in its low mantissa bits. */
static __device__ __forceinline__ float qc_i2f(int v)
{
	return __int_as_float(0x4B400000 + v) - 12582912.0f;
}

static __device__ __forceinline__ float ld_f16(const uint8_t *p)
{
	return qc_dev_f16((uint16_t)(p[0] | p[1] << 8));
}

/* K-quant 6-bit scale/min of sub-block s (see dequant_k.c scale_min_k4). */
static __device__ __forceinline__ void scale_min_k4(const uint8_t *sc, int s, int *d, int *m)
{
	if (s < 4) {
		*d = sc[s] & 63;
		*m = sc[s + 4] & 63;
	} else {
		*d = (sc[s + 4] & 0xf) | (sc[s - 4] >> 6) << 4;
		*m = (sc[s + 4] >> 4) | (sc[s] >> 6) << 4;
	}
}

/* Plain float rows (F32, F16, BF16): dec16(p, o) decodes the 16 aligned bytes
 * at p (VEC elements) with one vector load. The two 2-byte types share their
 * code through the element conversion CV. */
struct qc_cv_f16 {
	static __device__ __forceinline__ float cv(uint16_t h) { return qc_dev_f16(h); }
};
struct qc_cv_bf16 {
	static __device__ __forceinline__ float cv(uint16_t h) { return qc_bf16_to_f32(h); }
};

template <typename CV> struct qc_dev_half {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = true;
	static constexpr int QK = 32, BYTES = 64, VEC = 8;
	static __device__ float dec1(const uint8_t *row, int64_t i)
	{
		return CV::cv(((const uint16_t *)row)[i]);
	}
	static __device__ __forceinline__ void dec16(const uint8_t *p, float *o)
	{
		const uint4 q = *(const uint4 *)p;
		const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
		for (int k = 0; k < 4; k++) {
			o[2 * k] = CV::cv((uint16_t)(w[k] & 0xffff));
			o[2 * k + 1] = CV::cv((uint16_t)(w[k] >> 16));
		}
	}
	static __device__ void dec32(const uint8_t *b, int, float *o)
	{
		if (!((uintptr_t)b & 15)) { /* 16-byte loads when the row allows */
#pragma unroll
			for (int i = 0; i < 4; i++)
				dec16(b + 16 * i, o + 8 * i);
			return;
		}
		const uint16_t *h = (const uint16_t *)b;
		for (int i = 0; i < 32; i++)
			o[i] = CV::cv(h[i]);
	}
};

template <> struct qc_dev<QC_TYPE_F16> : qc_dev_half<qc_cv_f16> {};
template <> struct qc_dev<QC_TYPE_BF16> : qc_dev_half<qc_cv_bf16> {};

template <> struct qc_dev<QC_TYPE_F32> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = true;
	static constexpr int QK = 32, BYTES = 128, VEC = 4;
	static __device__ float dec1(const uint8_t *row, int64_t i)
	{
		return ((const float *)row)[i];
	}
	static __device__ __forceinline__ void dec16(const uint8_t *p, float *o)
	{
		const float4 q = *(const float4 *)p;
		o[0] = q.x;
		o[1] = q.y;
		o[2] = q.z;
		o[3] = q.w;
	}
	static __device__ void dec32(const uint8_t *b, int, float *o)
	{
		if (!((uintptr_t)b & 15)) { /* 16-byte loads when the row allows */
#pragma unroll
			for (int i = 0; i < 8; i++)
				dec16(b + 16 * i, o + 4 * i);
			return;
		}
		const float *f = (const float *)b;
		for (int i = 0; i < 32; i++)
			o[i] = f[i];
	}
};

/* q4_0: d at 0, nibbles at 2; x = (q - 8) * d */
template <> struct qc_dev<QC_TYPE_Q4_0> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 32, BYTES = 18;
	static __device__ void dec32(const uint8_t *b, int, float *o)
	{
		const float d = ld_f16(b);
		for (int j = 0; j < 16; j++) {
			o[j] = qc_i2f((b[2 + j] & 0xf) - 8) * d;
			o[j + 16] = qc_i2f((b[2 + j] >> 4) - 8) * d;
		}
	}
};

/* q4_1: d 0, m 2, nibbles 4; x = q * d + m */
template <> struct qc_dev<QC_TYPE_Q4_1> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 32, BYTES = 20;
	static __device__ void dec32(const uint8_t *b, int, float *o)
	{
		const float d = ld_f16(b), m = ld_f16(b + 2);
		for (int j = 0; j < 16; j++) {
			o[j] = __fadd_rn(__fmul_rn(qc_i2f(b[4 + j] & 0xf), d), m);
			o[j + 16] = __fadd_rn(__fmul_rn(qc_i2f(b[4 + j] >> 4), d), m);
		}
	}
};

/* q5_0: d 0, qh 2..5 (LE u32), nibbles 6; x = (q - 16) * d */
template <> struct qc_dev<QC_TYPE_Q5_0> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 32, BYTES = 22;
	static __device__ void dec32(const uint8_t *b, int, float *o)
	{
		const float d = ld_f16(b);
		const uint32_t hi = b[2] | b[3] << 8 | b[4] << 16 | (uint32_t)b[5] << 24;
		for (int j = 0; j < 16; j++) {
			const int q0 = (b[6 + j] & 0xf) | ((hi >> j) & 1) << 4;
			const int q1 = (b[6 + j] >> 4) | ((hi >> (j + 16)) & 1) << 4;
			o[j] = qc_i2f(q0 - 16) * d;
			o[j + 16] = qc_i2f(q1 - 16) * d;
		}
	}
};

/* q5_1: d 0, m 2, qh 4..7, nibbles 8; x = q * d + m */
template <> struct qc_dev<QC_TYPE_Q5_1> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 32, BYTES = 24;
	static __device__ void dec32(const uint8_t *b, int, float *o)
	{
		const float d = ld_f16(b), m = ld_f16(b + 2);
		const uint32_t hi = b[4] | b[5] << 8 | b[6] << 16 | (uint32_t)b[7] << 24;
		for (int j = 0; j < 16; j++) {
			const uint32_t q0 = (b[8 + j] & 0xfu) | ((hi >> j) & 1) << 4;
			const uint32_t q1 = (b[8 + j] >> 4) | ((hi >> (j + 16)) & 1) << 4;
			o[j] = __fadd_rn(__fmul_rn(qc_i2f((int)q0), d), m);
			o[j + 16] = __fadd_rn(__fmul_rn(qc_i2f((int)q1), d), m);
		}
	}
};

/* q8_0: d 0, int8 at 2; x = q * d */
template <> struct qc_dev<QC_TYPE_Q8_0> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 32, BYTES = 34;
	static __device__ void dec32(const uint8_t *b, int, float *o)
	{
		const float d = ld_f16(b);
		for (int j = 0; j < 32; j++)
			o[j] = qc_i2f((int8_t)b[2 + j]) * d;
	}
};

/* q2_K: scales 0 (16), qs 16 (64), d 80, dmin 82. Chunk c: elements 32c+l sit
 * in plane c%4 of qs[32*(c/4) + l]; sub-block scale 2c + l/16. */
template <> struct qc_dev<QC_TYPE_Q2_K> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 256, BYTES = 84;
	static __device__ void dec32(const uint8_t *b, int c, float *o)
	{
		const float d = ld_f16(b + 80), dmin = ld_f16(b + 82);
		for (int h = 0; h < 2; h++) {
			const uint8_t sc = b[2 * c + h];
			const float dl = d * (float)(sc & 0xf), ml = dmin * (float)(sc >> 4);
			for (int l = 16 * h; l < 16 * h + 16; l++) {
				const int q = (b[16 + 32 * (c / 4) + l] >> (2 * (c % 4))) & 3;
				o[l] = __fsub_rn(__fmul_rn(qc_i2f(q), dl), ml);
			}
		}
	}
};

/* q3_K: hmask 0 (32), qs 32 (64), scales 96 (12), d 108. */
template <> struct qc_dev<QC_TYPE_Q3_K> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 256, BYTES = 110;
	static __device__ void dec32(const uint8_t *b, int c, float *o)
	{
		const float d = ld_f16(b + 108);
		for (int h = 0; h < 2; h++) {
			const int s = 2 * c + h;
			const int lo = (b[96 + s % 8] >> (4 * (s / 8))) & 0xf;
			const int hi = (b[96 + 8 + s % 4] >> (2 * (s / 4))) & 3;
			const float dl = d * (float)((lo | hi << 4) - 32);
			for (int l = 16 * h; l < 16 * h + 16; l++) {
				const int q = (b[32 + 32 * (c / 4) + l] >> (2 * (c % 4))) & 3;
				const int high = (b[l] >> c) & 1;
				o[l] = dl * qc_i2f(q - (high ? 0 : 4));
			}
		}
	}
};

/* q4_K: d 0, dmin 2, scales 4 (12), qs 16 (128); sub-block = chunk. */
template <> struct qc_dev<QC_TYPE_Q4_K> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 256, BYTES = 144;
	static __device__ void dec32(const uint8_t *b, int c, float *o)
	{
		int sc, mn;
		scale_min_k4(b + 4, c, &sc, &mn);
		const float dl = ld_f16(b) * (float)sc, ml = ld_f16(b + 2) * (float)mn;
		const uint8_t *q = b + 16 + 32 * (c / 2);
		const int shift = 4 * (c % 2);
		for (int l = 0; l < 32; l++)
			o[l] = __fsub_rn(__fmul_rn(qc_i2f((q[l] >> shift) & 0xf), dl), ml);
	}
};

/* q5_K: d 0, dmin 2, scales 4 (12), qh 16 (32), qs 48 (128). */
template <> struct qc_dev<QC_TYPE_Q5_K> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 256, BYTES = 176;
	static __device__ void dec32(const uint8_t *b, int c, float *o)
	{
		int sc, mn;
		scale_min_k4(b + 4, c, &sc, &mn);
		const float dl = ld_f16(b) * (float)sc, ml = ld_f16(b + 2) * (float)mn;
		const uint8_t *q = b + 48 + 32 * (c / 2);
		const int shift = 4 * (c % 2);
		for (int l = 0; l < 32; l++) {
			const int v = ((q[l] >> shift) & 0xf) | ((b[16 + l] >> c) & 1) << 4;
			o[l] = __fsub_rn(__fmul_rn(qc_i2f(v), dl), ml);
		}
	}
};

/* q6_K: ql 0 (128), qh 128 (64), scales 192 (16 x int8), d 208. */
template <> struct qc_dev<QC_TYPE_Q6_K> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 256, BYTES = 210;
	static __device__ void dec32(const uint8_t *b, int c, float *o)
	{
		const float d = ld_f16(b + 208);
		const int h = c / 4, k = c % 4;
		for (int l = 0; l < 32; l++) {
			const int lo = (b[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0xf;
			const int hi = (b[128 + 32 * h + l] >> (2 * k)) & 3;
			const float dl = d * qc_i2f((int8_t)b[192 + (32 * c + l) / 16]);
			o[l] = dl * qc_i2f((lo | hi << 4) - 32);
		}
	}
};

/* ---- Hugging Face scheme encodings (quant/dequant_hfq.c) ---- */

/* bitsandbytes NF4 / FP4 code books, the same float32 values as the C tables
 * (FP4: the integers over 12, divided in float32 here as there) */
static __device__ __constant__ float qc_dev_bnb_nf4[16] = {
	-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
	-0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
	0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
	0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f,
};
static __device__ __constant__ float qc_dev_bnb_fp4[16] = {
	0.0f, 0.0625f / 12.0f, 8.0f / 12.0f, 1.0f, 4.0f / 12.0f, 6.0f / 12.0f, 2.0f / 12.0f, 3.0f / 12.0f,
	0.0f, -0.0625f / 12.0f, -8.0f / 12.0f, -1.0f, -4.0f / 12.0f, -6.0f / 12.0f, -2.0f / 12.0f, -3.0f / 12.0f,
};

/* OCP E2M1 by arithmetic (exact): s.ee.m -> m/2 (e = 0) or (1 + m/2)·2^(e-1) */
static __device__ __forceinline__ float qc_dev_e2m1(int q)
{
	const int e = (q >> 1) & 3, m = q & 1;
	const float v = e ? (1.0f + 0.5f * (float)m) * (float)(1 << (e - 1)) : 0.5f * (float)m;
	return q & 8 ? -v : v;
}

static __device__ __forceinline__ float ld_f32_2x16(const uint8_t *p)
{
	return qc_hfq_get_f32((const uint16_t *)p); /* blocks are 2-byte aligned */
}

/* hq4: f32 d at 0, int16 z at 4, nibbles at 6 (j low, j + 16 high); x = d*(q - z) */
template <> struct qc_dev<QC_TYPE_HQ4> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 32, BYTES = 22;
	static __device__ void dec32(const uint8_t *b, int, float *o)
	{
		const float d = ld_f32_2x16(b);
		const int z = *(const int16_t *)(b + 4);
		for (int j = 0; j < 16; j++) {
			o[j] = d * qc_i2f((b[6 + j] & 0xf) - z);
			o[j + 16] = d * qc_i2f((b[6 + j] >> 4) - z);
		}
	}
};

/* hq8: f32 d at 0, int16 z at 4, codes at 6; x = d*(q - z) */
template <> struct qc_dev<QC_TYPE_HQ8> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 32, BYTES = 38;
	static __device__ void dec32(const uint8_t *b, int, float *o)
	{
		const float d = ld_f32_2x16(b);
		const int z = *(const int16_t *)(b + 4);
		for (int j = 0; j < 32; j++)
			o[j] = d * qc_i2f(b[6 + j] - z);
	}
};

/* bnb 4-bit: f32 absmax at 0, codes at 4 (element 2j high nibble, 2j+1 low); x = code[q]*absmax */
template <int T> struct qc_dev_bnb4 {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 32, BYTES = 20;
	static __device__ void dec32(const uint8_t *b, int, float *o)
	{
		const float d = ld_f32_2x16(b);
		const float *tab = T == QC_TYPE_BNB_NF4 ? qc_dev_bnb_nf4 : qc_dev_bnb_fp4;
		for (int j = 0; j < 16; j++) {
			o[2 * j] = tab[b[4 + j] >> 4] * d;
			o[2 * j + 1] = tab[b[4 + j] & 0xf] * d;
		}
	}
};
template <> struct qc_dev<QC_TYPE_BNB_NF4> : qc_dev_bnb4<QC_TYPE_BNB_NF4> {};
template <> struct qc_dev<QC_TYPE_BNB_FP4> : qc_dev_bnb4<QC_TYPE_BNB_FP4> {};

/* f8_e4m3: f32 d at 0, e4m3fn codes at 4; x = e4m3(q)*d */
template <> struct qc_dev<QC_TYPE_F8E4M3> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 32, BYTES = 36;
	static __device__ void dec32(const uint8_t *b, int, float *o)
	{
		const float d = ld_f32_2x16(b);
		for (int j = 0; j < 32; j++)
			o[j] = qc_e4m3_to_f32(b[4 + j]) * d;
	}
};

/* nvfp4: two f32 group scales at 0 and 4, e2m1 codes at 8 (element 2j low nibble,
 * 2j+1 high); x = e2m1(q)*d[j/16] */
template <> struct qc_dev<QC_TYPE_NVFP4> {
	static constexpr bool ok = true;
	static constexpr bool PLAIN = false;
	static constexpr int QK = 32, BYTES = 24;
	static __device__ void dec32(const uint8_t *b, int, float *o)
	{
		const float d0 = ld_f32_2x16(b), d1 = ld_f32_2x16(b + 4);
		for (int j = 0; j < 16; j++) {
			const float d = j < 8 ? d0 : d1;
			o[2 * j] = qc_dev_e2m1(b[8 + j] & 0xf) * d;
			o[2 * j + 1] = qc_dev_e2m1(b[8 + j] >> 4) * d;
		}
	}
};

#include "decode_fp4.cuh"
#include "decode_iq.cuh"
#include "decode_ternary.cuh"

/* Address of the 32-element chunk j (0-based along the row) of a row. */
template <int T> static __device__ __forceinline__ const uint8_t *chunk_ptr(const uint8_t *row, int64_t j,
									    int *c)
{
	constexpr int cpb = qc_dev<T>::QK / 32;
	*c = (int)(j % cpb);
	return row + (j / cpb) * qc_dev<T>::BYTES;
}

#endif
