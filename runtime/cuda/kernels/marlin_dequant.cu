/* marlin_dequant.cu — a marlin-packed slice (docs/layout-marlin.md) to a row-major
 * fp16 matrix W[n][k], for the large-batch path of marlin_mm.cu: at a few hundred
 * rows cuBLAS on fp16 weights (wgmma) beats the mma.sync marlin GEMM even after
 * paying this decode (H200, 14336x4096: marlin 244 us at 512 rows; decode ~40 us
 * + cuBLAS ~93 us).
 * Values are the marlin GEMM's: fp16(d·(q−8)), fp16(d·q), fp16(q·s + o) (i8z: q signed);
 * marlin_i6: fp16((d·sc)·(q−32)).
 * A block of KB warps takes KB consecutive k16 tiles of one stripe: lane l of a
 * warp decodes its 16 code bytes (8 or 4 columns x k = 2c, 2c+1, 2c+8, 2c+9) into
 * the block's shared rows, then the block writes each of the stripe's S rows as
 * KB x 32 contiguous bytes in 16-byte stores. Writing the half2 straight from the
 * fragments (8 rows x 16 bytes per warp store) reached ~1.8 TB/s on an H200, 40% of
 * a 256-row decode step (docs/perf-notes.md, twelfth session).
 * Reference: the layout formulas (runtime/ops/marlin_gemm.c uses the same).
 */
#include "marlin_dequant.h"

extern "C" {
#include "layout_marlin.h"
}

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace {

struct dparams {
	const uint8_t *w;
	__half *out;
	uint64_t stripe_bytes;
	int64_t n_tiles; /* stripes x KT */
	int k, kt_per_stripe, groups;
};

__device__ __forceinline__ float h2f(uint32_t w, int hi)
{
	return __half2float(__ushort_as_half((unsigned short)(hi ? w >> 16 : w & 0xffff)));
}

constexpr int KB = 8;               /* k16 tiles (warps) a block takes */
constexpr int RS = KB * 16 + 8;     /* halves per shared row: 16 bytes of padding, so a
				       warp's 8 rows x 4 lanes hit 32 banks */

/* Block (stripe, kb): its warps' tiles kt = KB kb + warp, those that exist. */
struct btile {
	int64_t stripe;
	int kt0, nkt, kt; /* first tile, tiles of the block, this warp's */
};
__device__ __forceinline__ btile block_tile(const dparams &p)
{
	const int nkb = (p.kt_per_stripe + KB - 1) / KB;
	btile b;
	b.stripe = blockIdx.x / nkb;
	b.kt0 = (int)(blockIdx.x % nkb) * KB;
	b.nkt = min(KB, p.kt_per_stripe - b.kt0);
	b.kt = b.kt0 + (int)(threadIdx.x >> 5);
	return b;
}

/* row 8j + r, k = 2c, 2c+1 and 2c+8, 2c+9 of warp w's tile, into the shared rows */
__device__ __forceinline__ void put4(__half *sm, int w, int row, int c, float x0, float x1, float x2, float x3)
{
	__half2 *o = (__half2 *)(sm + row * RS + w * 16 + 2 * c);
	o[0] = __floats2half2_rn(x0, x1);
	o[4] = __floats2half2_rn(x2, x3); /* k + 8 */
}

/* The block's S rows, nkt x 16 halves each, to out (16-byte stores, a row's run contiguous). */
template <int S> __device__ __forceinline__ void write_rows(const dparams &p, const btile &b, const __half *sm)
{
	__syncthreads();
	const int per_row = b.nkt * 2; /* 16-byte pieces */
	for (int i = threadIdx.x; i < S * per_row; i += blockDim.x) {
		const int row = i / per_row, pc = i % per_row;
		const uint4 v = *(const uint4 *)(sm + row * RS + pc * 8);
		*(uint4 *)(p.out + (b.stripe * S + row) * (int64_t)p.k + (int64_t)b.kt0 * 16 + pc * 8) = v;
	}
}

template <int BITS, bool ZP> __global__ void __launch_bounds__(KB * 32) marlin_to_f16_kernel(const dparams p)
{
	constexpr int S = BITS == 4 ? 64 : 32, NJ = S / 8;
	__shared__ __align__(16) __half sm[S * RS];
	const btile b = block_tile(p);
	const int lane = threadIdx.x & 31, r = lane / 4, c = lane % 4, wp = (int)(threadIdx.x >> 5);
	const int64_t stripe = b.stripe;
	const int kt = b.kt, g = kt / 2;
	if (kt < b.kt0 + b.nkt) {
		const uint8_t *w = p.w + (uint64_t)stripe * p.stripe_bytes;
		const uint8_t *sc = w + (size_t)p.kt_per_stripe * 512;
		const uint4 v = ((const uint4 *)(w + (size_t)kt * 512))[lane];
		const uint32_t wd[4] = {v.x, v.y, v.z, v.w};
		uint32_t sw[4], ow[4] = {0, 0, 0, 0};
		if constexpr (BITS == 4) {
			const uint4 s4 = *(const uint4 *)(sc + 2 * ((size_t)g * S + NJ * r));
			sw[0] = s4.x, sw[1] = s4.y, sw[2] = s4.z, sw[3] = s4.w;
			if constexpr (ZP) {
				const uint4 o4 = *(const uint4 *)(sc + 2 * ((size_t)p.groups * S + (size_t)g * S + NJ * r));
				ow[0] = o4.x, ow[1] = o4.y, ow[2] = o4.z, ow[3] = o4.w;
			}
		} else {
			const uint2 s2 = *(const uint2 *)(sc + 2 * ((size_t)g * S + NJ * r));
			sw[0] = s2.x, sw[1] = s2.y, sw[2] = sw[3] = 0;
			if constexpr (ZP) {
				const uint2 o2 = *(const uint2 *)(sc + 2 * ((size_t)p.groups * S + (size_t)g * S + NJ * r));
				ow[0] = o2.x, ow[1] = o2.y;
			}
		}
#pragma unroll
		for (int j = 0; j < NJ; j++) {
			float q[4]; /* k = 2c, 2c+1, 2c+8, 2c+9 */
			if constexpr (BITS == 4) {
				const uint32_t word = wd[j / 2] >> (8 * (j % 2));
				q[0] = (float)(word & 15);
				q[1] = (float)((word >> 16) & 15);
				q[2] = (float)((word >> 4) & 15);
				q[3] = (float)((word >> 20) & 15);
			} else {
				q[0] = (float)(int8_t)(wd[j] & 0xff);
				q[1] = (float)(int8_t)((wd[j] >> 8) & 0xff);
				q[2] = (float)(int8_t)((wd[j] >> 16) & 0xff);
				q[3] = (float)(int8_t)(wd[j] >> 24);
			}
			const float d = h2f(sw[j / 2], j % 2);
			float x[4];
#pragma unroll
			for (int e = 0; e < 4; e++) {
				if constexpr (ZP)
					x[e] = fmaf(q[e], d, h2f(ow[j / 2], j % 2));
				else
					x[e] = d * (BITS == 4 ? q[e] - 8.0f : q[e]);
			}
			put4(sm, wp, 8 * j + r, c, x[0], x[1], x[2], x[3]);
		}
	}
	write_rows<S>(p, b, sm);
}

/* marlin_i6 (q6_K): the same walk; a tile's low nibbles sit where marlin_i4's
 * codes do, its high bits in the group's plane after the two tiles, and each
 * tile has its own int8 scale per column under a fp16 d per 256 (docs/
 * layout-marlin.md). Value fp16((d·sc)·(q − 32)): ggml's float order, d·sc
 * exact, one float rounding of the product, then the one to fp16. */
__global__ void __launch_bounds__(KB * 32) marlin6_to_f16_kernel(const dparams p)
{
	__shared__ __align__(16) __half sm[64 * RS];
	const btile b = block_tile(p);
	const int lane = threadIdx.x & 31, r = lane / 4, c = lane % 4, wp = (int)(threadIdx.x >> 5);
	const int64_t stripe = b.stripe;
	const int kt = b.kt, g = kt / 2, h = kt % 2;
	if (kt < b.kt0 + b.nkt) {
		const uint8_t *w = p.w + (uint64_t)stripe * p.stripe_bytes;
		const uint8_t *unit = w + (size_t)g * 1536; /* tile 2g, tile 2g + 1, their high bits */
		const uint8_t *sc = w + (size_t)p.groups * 1536;
		const uint4 v = ((const uint4 *)(unit + 512 * h))[lane];
		const uint2 hb = *(const uint2 *)(unit + 1024 + 16 * lane + 8 * h);
		const uint2 s8 = *(const uint2 *)(sc + (size_t)g * 128 + 16 * r + 8 * h);
		const uint4 d4 = *(const uint4 *)(sc + (size_t)p.groups * 128 + (size_t)(kt / 16) * 128 + 16 * r);
		const uint32_t wd[4] = {v.x, v.y, v.z, v.w}, sw[2] = {s8.x, s8.y}, dw[4] = {d4.x, d4.y, d4.z, d4.w};
#pragma unroll
		for (int j = 0; j < 8; j++) {
			/* nibbles of n8 tile j in word j/2, shifted by 8 (j % 2); each nibble's
			 * two high bits at 2 (2 (word % 2) + half) in the same byte of high word word / 2 */
			const int wi = j / 2;
			const uint32_t word = wd[wi] >> (8 * (j % 2)), hw = (wi < 2 ? hb.x : hb.y) >> (8 * (j % 2));
			const int sh = 4 * (wi % 2); /* bits of the low nibble's high part: sh, sh + 1; the high nibble's sh + 2, + 3 */
			float q[4]; /* k = 2c, 2c+1, 2c+8, 2c+9: nibbles p = 0, 4 (low), 1, 5 (high) of the shifted word */
			q[0] = (float)((int)((word & 15) | ((hw >> sh) & 3) << 4) - 32);
			q[1] = (float)((int)(((word >> 16) & 15) | ((hw >> (sh + 16)) & 3) << 4) - 32);
			q[2] = (float)((int)(((word >> 4) & 15) | ((hw >> (sh + 2)) & 3) << 4) - 32);
			q[3] = (float)((int)(((word >> 20) & 15) | ((hw >> (sh + 18)) & 3) << 4) - 32);
			const float ds = h2f(dw[j / 2], j % 2) * (float)(int8_t)((sw[j / 4] >> (8 * (j % 4))) & 0xff);
			put4(sm, wp, 8 * j + r, c, ds * q[0], ds * q[1], ds * q[2], ds * q[3]);
		}
	}
	write_rows<64>(p, b, sm);
}

int64_t n_blocks(const dparams &p)
{
	return p.n_tiles / p.kt_per_stripe * ((p.kt_per_stripe + KB - 1) / KB);
}

template <int BITS, bool ZP> int launch(const dparams &p, cudaStream_t s, struct qc_err *err)
{
	marlin_to_f16_kernel<BITS, ZP><<<(unsigned)n_blocks(p), KB * 32, 0, s>>>(p);
	return qc_cuda_check(cudaGetLastError(), "marlin_to_f16_kernel", err);
}

} /* namespace */

extern "C" int qc_cuda_marlin_to_f16(enum qc_layout layout, enum qc_type type, const uint8_t *d_w, int64_t n,
				     int64_t k, uint16_t *d_out, cudaStream_t s, struct qc_err *err)
{
	const int S = qc_marlin_stripe(layout);
	uint64_t row;
	if (S <= 0 || qc_marlin_row_bytes(layout, type, k, &row) != QC_OK || k % 32 || n % S || k > INT32_MAX ||
	    (n / S) * (k / 16) > INT32_MAX || (uintptr_t)d_w % 16 || (uintptr_t)d_out % 16)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "marlin_to_f16: %s %s %lld x %lld not supported",
				  qc_layout_name(layout), qc_types[type].name, (long long)n, (long long)k);
	dparams p;
	p.w = d_w;
	p.out = (__half *)d_out;
	p.stripe_bytes = (uint64_t)S * row;
	p.kt_per_stripe = (int)(k / 16);
	p.n_tiles = (n / S) * (k / 16);
	p.k = (int)k;
	p.groups = (int)(k / 32);
	if (!p.n_tiles)
		return QC_OK;
	/* (bits, offsets) picks the instantiation; qc_marlin_stripe refused other ids */
	const bool zp = qc_marlin_has_offsets(layout);
	if (qc_marlin_bits(layout) == 6) {
		marlin6_to_f16_kernel<<<(unsigned)n_blocks(p), KB * 32, 0, s>>>(p);
		return qc_cuda_check(cudaGetLastError(), "marlin6_to_f16_kernel", err);
	}
	if (qc_marlin_bits(layout) == 4)
		return zp ? launch<4, true>(p, s, err) : launch<4, false>(p, s, err);
	return zp ? launch<8, true>(p, s, err) : launch<8, false>(p, s, err);
}
