/* kv_pool.cuh — the two K/V pools on the device: how the attention kernels read
 * an element of either, and the fp8 store's per-head arithmetic.
 *
 * Owns: kv_f16 / kv_fp8, one trait per pool dtype (a row of hd values of one
 * position and K/V head: its address, then 8 values at a time or one), and
 * kv8_store_staged / kv8_store_head / kv8_rotate, the fp8 store of one head by
 * one warp (from shared memory the caller filled, or from global memory).
 * fp8 pool (runtime/ops/ops.h qc_ref_kv_store_e4m3): codes (n_blocks, n_layer,
 * 2, bt, kv_dim) E4M3FN, exps (n_blocks, n_layer, 2, bt, n_head_kv) int8; value =
 * e4m3(code) * 2^exp, exact in float (4 significant bits, exponents -137..135).
 * K heads are stored rotated by a Walsh-Hadamard transform H; H is its own
 * inverse, so attention takes q rotated the same way (qc_cuda_kv_store_e4m3
 * does it) and q . k is unchanged: no kernel here un-rotates anything.
 * Invariants: kv8_store_head gives qc_ref_kv_store_e4m3's bytes bit for bit
 * (the same roundings in the same order, __f*_rn so nvcc fuses nothing; the
 * one exception is the sign of a NaN code, which follows the platform's NaN).
 * Non-goals: other fp8 formats, scales other than powers of two.
 * Reference: runtime/ops/kv_store.c, runtime/ops/paged_attn.c kv_row.
 */
#ifndef QC_CUDA_KV_POOL_CUH
#define QC_CUDA_KV_POOL_CUH

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "fp16.h"
#include "paged_attn.h"

/* 2^k as a float, k in -149..127 (below -126: the exact subnormal power). */
static __device__ __forceinline__ float kv8_pow2(int k)
{
	return k >= -126 ? __uint_as_float((uint32_t)(k + 127) << 23) : __uint_as_float(1u << (k + 149));
}

/* x * 2^k rounded once, as C's ldexpf: for k in -149..127 one multiplication by
 * the exact power (the only rounding is the product's); k > 127 scales up in two
 * exact steps (or overflows to inf, as ldexpf); k < -149 never comes from the
 * store (its exponents keep k in -149..148) and is scaled in two steps. */
static __device__ __forceinline__ float kv8_ldexp(float x, int k)
{
	if (k > 127)
		return __fmul_rn(__fmul_rn(x, kv8_pow2(127)), kv8_pow2(k - 127));
	if (k < -149)
		return __fmul_rn(__fmul_rn(x, kv8_pow2(-149)), kv8_pow2(k + 149 < -149 ? -149 : k + 149));
	return __fmul_rn(x, kv8_pow2(k));
}

/* frexpf's exponent of a finite a > 0 (a = f * 2^e, f in [0.5, 1)), and whether
 * f <= 0.875 (448 = 0.875 * 2^9: the test qc_ref_kv_e4m3_exp makes). */
static __device__ __forceinline__ int kv8_frexp(float a, bool *le875)
{
	const uint32_t u = __float_as_uint(a);
	int e;
	uint32_t mant;
	if (u >> 23) {
		e = (int)(u >> 23) - 126;
		mant = u & 0x7fffffu;
	} else { /* subnormal: move the leading 1 to bit 23 */
		const int sh = __clz(u) - 8;
		e = -125 - sh;
		mant = (u << sh) & 0x7fffffu;
	}
	*le875 = mant <= 0x600000u; /* f = (1 + mant / 2^23) / 2 */
	return e;
}

/* The warp's largest |y[d]| as bits, d < n, NaN skipped; inf too when !keep_inf
 * (qc_ref_kv_e4m3_exp skips both, the rotation's pre-scale keeps inf). */
static __device__ __forceinline__ uint32_t kv8_amax_bits(const float *y, int n, bool keep_inf)
{
	const int lane = threadIdx.x & 31;
	uint32_t m = 0;
	for (int d = lane; d < n; d += 32) {
		const uint32_t u = __float_as_uint(y[d]) & 0x7fffffffu;
		if (u < 0x7f800000u || (keep_inf && u == 0x7f800000u))
			m = u > m ? u : m;
	}
	return __reduce_max_sync(0xffffffffu, m);
}

/* qc_ref_kv_e4m3_exp of the warp's y (n values): every lane gets it. */
static __device__ __forceinline__ int kv8_e4m3_exp(const float *y, int n)
{
	const uint32_t m = kv8_amax_bits(y, n, false);
	if (!m)
		return 0;
	bool le;
	const int e2 = kv8_frexp(__uint_as_float(m), &le);
	const int e = le ? e2 - 9 : e2 - 8;
	return e < -128 ? -128 : e;
}

/* y (hd floats of the warp's shared memory) <- H y: qc_ref_kv_rotate's butterfly,
 * a pair's two sums made as the C loop makes them (u + v, u - v), then the scale
 * 1 / sqrt(block). No-op below a block of 16. Heads of up to KV8_ROT_REGS * 32
 * values run in registers: lane l holds y[l + 32 i], the stages of len < 32 pair
 * it with lane l ^ len (shuffles), the longer ones pair registers i and i + len / 32
 * of the same lane. The stages through shared memory (longer heads) were the fp8
 * store's cost: per stage a division and three modulos per pair and a warp barrier
 * (rope_kv8 took twice rope_kv's time, docs/perf-notes.md). Same sums either way. */
#define KV8_ROT_REGS 8
static __device__ void kv8_rotate(float *y, int hd)
{
	const int n = hd & -hd, lane = threadIdx.x & 31;
	if (n < 16)
		return;
	const float s = __fdiv_rn(1.0f, __fsqrt_rn((float)n));
	if (hd <= 32 * KV8_ROT_REGS) {
		float v[KV8_ROT_REGS];
#pragma unroll
		for (int i = 0; i < KV8_ROT_REGS; i++)
			v[i] = lane + 32 * i < hd ? y[lane + 32 * i] : 0.0f;
		for (int len = 1; len < n && len < 32; len <<= 1) {
			const bool hi = lane & len; /* this lane holds the pair's second value */
#pragma unroll
			for (int i = 0; i < KV8_ROT_REGS; i++) {
				const float p = __shfl_xor_sync(0xffffffffu, v[i], len);
				v[i] = hi ? __fsub_rn(p, v[i]) : __fadd_rn(v[i], p);
			}
		}
#pragma unroll
		for (int li = 1; li < KV8_ROT_REGS; li <<= 1) {
			if (n <= 32 * li)
				break;
#pragma unroll
			for (int i = 0; i < KV8_ROT_REGS; i++)
				if (!(i & li)) {
					const float u = v[i], w = v[i + li];
					v[i] = __fadd_rn(u, w);
					v[i + li] = __fsub_rn(u, w);
				}
		}
		__syncwarp(); /* every lane's reads of y done before the writes */
#pragma unroll
		for (int i = 0; i < KV8_ROT_REGS; i++)
			if (lane + 32 * i < hd)
				y[lane + 32 * i] = __fmul_rn(v[i], s);
		__syncwarp();
		return;
	}
	const int half = n / 2;
	for (int len = 1; len < n; len <<= 1) {
		for (int p = lane; p < hd / 2; p += 32) {
			const int b = p / half, r = p % half;
			const int j = b * n + r / len * 2 * len + r % len;
			const float u = y[j], v = y[j + len];
			y[j] = __fadd_rn(u, v);
			y[j + len] = __fsub_rn(u, v);
		}
		__syncwarp();
	}
	for (int d = lane; d < hd; d += 32)
		y[d] = __fmul_rn(y[d], s);
	__syncwarp();
}

/* Whether the fp8 store rotates a head first (qc_ref_kv_store_e4m3: K yes, V no). */
enum kv8_rot { KV8_ROT_NONE = 0, KV8_ROT_WHT = 1 };

/* One head of hd floats already staged in y (shared memory of this warp's own,
 * written and __syncwarp'ed by the caller) into hd codes and one exponent, by the
 * calling warp (all 32 lanes); y is scratch afterwards. Bit for bit
 * runtime/ops/kv_store.c store_e4m3_head. Staged by the caller so a kernel that
 * computes the head (rope_kv8.cu: RoPE first) stores it without a round trip. */
static __device__ void kv8_store_staged(float *y, uint8_t *codes, int8_t *exp, int hd, enum kv8_rot rot)
{
	const int lane = threadIdx.x & 31;
	int e0 = 0;
	if (rot == KV8_ROT_WHT) {
		/* divided by 2^e0 first (exact): the butterfly's sums stay far from float's range */
		const uint32_t m = kv8_amax_bits(y, hd, true);
		bool le;
		if (m && m < 0x7f800000u)
			e0 = kv8_frexp(__uint_as_float(m), &le);
		for (int d = lane; d < hd; d += 32)
			y[d] = kv8_ldexp(y[d], -e0);
		__syncwarp();
		kv8_rotate(y, hd);
	}
	const int e1 = kv8_e4m3_exp(y, hd);
	int e = e0 + e1;
	e = e < -128 ? -128 : e > 127 ? 127 : e;
	if (lane == 0)
		*exp = (int8_t)e;
	for (int d = lane; d < hd; d += 32)
		codes[d] = qc_f32_to_e4m3(kv8_ldexp(y[d], e0 - e));
	__syncwarp(); /* y is the next head's */
}

/* kv8_store_staged of the head at x (global memory): copied to y first. */
static __device__ void kv8_store_head(const float *x, uint8_t *codes, int8_t *exp, int hd, enum kv8_rot rot,
				      float *y)
{
	for (int d = threadIdx.x & 31; d < hd; d += 32)
		y[d] = x[d];
	__syncwarp();
	kv8_store_staged(y, codes, exp, hd, rot);
}

/* ---- element loads for the attention kernels ------------------------------ */

/* binary16 pool (kv_store.h layout). */
struct kv_f16 {
	struct row {
		const __half *p;
	};
	typedef uint4 raw; /* 8 values as loaded */

	static __device__ __forceinline__ row at(const struct qc_cuda_paged_attn_args &a, const int32_t *table,
						 int32_t j, int which, int kvh)
	{
		const int64_t b = table[j / a.block_tokens], o = j % a.block_tokens;
		const int64_t kv_dim = (int64_t)a.n_head_kv * a.hd;
		return {(const __half *)a.d_pool +
			(((b * a.n_layer + a.layer) * 2 + which) * a.block_tokens + o) * kv_dim + (int64_t)kvh * a.hd};
	}
	static __device__ __forceinline__ float get(const row &r, int d)
	{
		return __half2float(r.p[d]);
	}
	/* values 8i .. 8i + 7 of the row (16-byte aligned when hd % 8 == 0) */
	static __device__ __forceinline__ raw load8(const row &r, int i)
	{
		return ((const uint4 *)r.p)[i];
	}
	static __device__ __forceinline__ raw zero8()
	{
		return make_uint4(0u, 0u, 0u, 0u);
	}
	/* values 8i .. 8i + 7 of a row held in shared memory in the pool's own encoding
	 * (rows: hd binary16; e unused) */
	static __device__ __forceinline__ raw smem8(const void *row, int i, int e)
	{
		(void)e;
		return ((const uint4 *)row)[i];
	}
	static __device__ __forceinline__ void unpack8(const raw &v, float f[8])
	{
		const __half2 *h2 = (const __half2 *)&v;
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const float2 x = __half22float2(h2[e]);
			f[2 * e] = x.x;
			f[2 * e + 1] = x.y;
		}
	}
	/* unscaled pool: the values themselves, scale 1 (see kv_fp8) */
	static constexpr bool SCALED = false;
	static __device__ __forceinline__ uint4 h8(const raw &v)
	{
		return v;
	}
	static __device__ __forceinline__ float scale(const raw &)
	{
		return 1.0f;
	}
};

/* fp8 pool: a row is its codes and its head's scale 2^exp; values decoded in
 * registers (E4M3 -> binary16 exact, -> float exact, times the power of two exact). */
struct kv_fp8 {
	struct row {
		const uint8_t *p;
		float s;
	};
	struct raw {
		uint2 c; /* 8 codes */
		float s;
	};

	static __device__ __forceinline__ row at(const struct qc_cuda_paged_attn_args &a, const int32_t *table,
						 int32_t j, int which, int kvh)
	{
		const int64_t b = table[j / a.block_tokens], o = j % a.block_tokens;
		const int64_t r = ((b * a.n_layer + a.layer) * 2 + which) * a.block_tokens + o;
		return {a.d_pool8 + r * a.n_head_kv * a.hd + (int64_t)kvh * a.hd,
			kv8_pow2(a.d_pool8_exp[r * a.n_head_kv + kvh])};
	}
	static __device__ __forceinline__ float2 dec2(uint32_t two)
	{
		__half2_raw h;
		h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two, __NV_E4M3);
		return __half22float2(*(const __half2 *)&h);
	}
	static __device__ __forceinline__ float get(const row &r, int d)
	{
		return __fmul_rn(qc_e4m3_to_f32(r.p[d]), r.s);
	}
	static __device__ __forceinline__ raw load8(const row &r, int i)
	{
		return {((const uint2 *)r.p)[i], r.s};
	}
	static __device__ __forceinline__ raw zero8()
	{
		return {make_uint2(0u, 0u), 0.0f};
	}
	/* codes 8i .. 8i + 7 of a row held in shared memory (hd codes), its exponent e */
	static __device__ __forceinline__ raw smem8(const void *row, int i, int e)
	{
		return {((const uint2 *)row)[i], kv8_pow2(e)};
	}
	static __device__ __forceinline__ void unpack8(const raw &v, float f[8])
	{
		const uint32_t w[2] = {v.c.x, v.c.y};
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const float2 x = dec2((w[e >> 1] >> (16 * (e & 1))) & 0xffffu);
			f[2 * e] = __fmul_rn(x.x, v.s);
			f[2 * e + 1] = __fmul_rn(x.y, v.s);
		}
	}
	/* The codes' values as binary16 (exact: E4M3 fits it) without the row's power
	 * of two, which the caller applies once per row: to a position's q . k and to
	 * the softmax weight p of a V row (paged_attn_split.cu's tensor-core passes). */
	static constexpr bool SCALED = true;
	static __device__ __forceinline__ uint32_t h2(uint32_t two)
	{
		const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two, __NV_E4M3);
		return (uint32_t)h.x | (uint32_t)h.y << 16;
	}
	static __device__ __forceinline__ uint4 h8(const raw &v)
	{
		return make_uint4(h2(v.c.x & 0xffffu), h2(v.c.x >> 16), h2(v.c.y & 0xffffu), h2(v.c.y >> 16));
	}
	static __device__ __forceinline__ float scale(const raw &v)
	{
		return v.s;
	}
};

/* 8 values of an fp8 head (codes and the row's scale, as loaded) as binary16 (flash_attn.cu's
 * tiles): exact wherever the f16 pool holds the value exactly (|x| in binary16's
 * normal range, or its subnormals' grid), rounded as the f16 pool would be
 * elsewhere (past 65504: inf, as an f16 pool stores it). */
static __device__ __forceinline__ uint4 kv8_half8_raw(const kv_fp8::raw &v)
{
	float f[8];
	kv_fp8::unpack8(v, f);
	uint4 out;
	__half2 *h = (__half2 *)&out;
#pragma unroll
	for (int e = 0; e < 4; e++)
		h[e] = __floats2half2_rn(f[2 * e], f[2 * e + 1]);
	return out;
}

#endif
