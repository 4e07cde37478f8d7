/* matmul_int8.c — the CPU matmul's int8 kernel: q8_0 / q4_0 / q5_0 weights x q8_0 activation codes.
 *
 * Used with QC_ACT_ROUND_GGML. Owns the int8 weight types (per-encoding block
 * decoders to int8 codes), the repack of each tile of IR rows (4-byte groups of the
 * rows interleaved, codes + 128 as u8), and the integer tiles: 8-bit dot products
 * give exact integer block sums, each times d_w * d_x (exact in double) added to a
 * double in block order: the exact block dots ggml sums in float, summed in double.
 * Decode (few tokens) skips the repack and reduces each row's products in place:
 * the same integers, the same double operations. The AVX2 repack, the AVX2 tile and
 * the AVX-512 VNNI tiles
 * are bit-identical to the portable code.
 * Reference: ggml-cpu vec_dot_q8_0_q8_0.
 */
#include "matmul_cpu_int.h"

#include <pthread.h>

/* qc_fp16_to_f32 of every binary16 pattern, filled once. */
static float f16_table[1 << 16];
static pthread_once_t f16_once = PTHREAD_ONCE_INIT;

static void fill_f16_table(void)
{
	for (uint32_t h = 0; h < (1u << 16); h++)
		f16_table[h] = qc_fp16_to_f32((uint16_t)h);
}

static float codes_q8_0(const uint8_t *row, int64_t b, int8_t *codes)
{
	const struct qc_block_Q8_0 *blk = (const void *)(row + b * (int64_t)sizeof *blk);
	memcpy(codes, blk->qs, 32);
	return f16_table[blk->d];
}

static float codes_q4_0(const uint8_t *row, int64_t b, int8_t *codes)
{
	const struct qc_block_Q4_0 *blk = (const void *)(row + b * (int64_t)sizeof *blk);
	for (int j = 0; j < 16; j++) {
		codes[j] = (int8_t)((blk->qs[j] & 15) - 8);
		codes[j + 16] = (int8_t)((blk->qs[j] >> 4) - 8);
	}
	return f16_table[blk->d];
}

static float codes_q5_0(const uint8_t *row, int64_t b, int8_t *codes)
{
	const struct qc_block_Q5_0 *blk = (const void *)(row + b * (int64_t)sizeof *blk);
	uint32_t hi;
	memcpy(&hi, blk->qh, sizeof hi);
	for (int j = 0; j < 16; j++) {
		codes[j] = (int8_t)(((blk->qs[j] & 15) | ((hi >> j) & 1u) << 4) - 16);
		codes[j + 16] = (int8_t)(((blk->qs[j] >> 4) | ((hi >> (j + 16)) & 1u) << 4) - 16);
	}
	return f16_table[blk->d];
}

void qc_matmul_pack_generic(struct slot *s, const struct int8_type *it, const uint8_t *const *rows,
			    int64_t nb, const uint8_t *next)
{
	(void)next;
	const int64_t bb = (int64_t)qc_types[it->type].block_bytes;
	for (int64_t b = 0; b < nb; b++) {
		uint8_t *p = s->pk + b * IR * 32;
		for (int i = 0; i < IR; i++) {
			prefetch_ahead(rows[i] + b * bb, 2048);
			s->pkd[b * IR + i] = (double)it->codes(rows[i], b, s->codes);
			for (int g = 0; g < 8; g++)
				for (int j = 0; j < 4; j++)
					p[(g * IR + i) * 4 + j] = (uint8_t)((uint8_t)s->codes[g * 4 + j] ^ 0x80u);
		}
	}
}

#ifdef QC_X86
enum pack_kind { PACK_Q8_0, PACK_Q4_0, PACK_Q5_0 };

/* The same repack for q8_0, q4_0 or q5_0 blocks: codes + 128 of the 8 rows as 8
 * ymm (8 dwords each), then an 8 x 8 dword transpose. */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void
pack_avx2_body(struct slot *s, const uint8_t *const *rows, int64_t nb, const uint8_t *next,
	       const enum pack_kind kind)
{
	const int64_t bb = kind == PACK_Q4_0   ? (int64_t)sizeof(struct qc_block_Q4_0)
			   : kind == PACK_Q5_0 ? (int64_t)sizeof(struct qc_block_Q5_0)
					       : (int64_t)sizeof(struct qc_block_Q8_0);
	double *pkd = s->pkd;
	uint8_t *pk = s->pk;
	const uint8_t *rw[IR];
	memcpy(rw, rows, sizeof rw);
	for (int64_t b = 0; b < nb; b++) {
		__m256i r[IR], t[IR], u[IR];
		/* the next tile's rows follow this one's in memory: stream them in
		 * linearly, IR blocks' worth per block (one stream, not IR) */
		for (int64_t o = 0; o < IR * bb; o += 64)
			prefetch_ahead(next, (size_t)(b * IR * bb + o));
#pragma GCC unroll 16
		for (int i = 0; i < IR; i++) {
			const uint8_t *blk = rw[i] + b * bb;
			uint16_t d;
			memcpy(&d, blk, sizeof d);
			pkd[b * IR + i] = (double)f16_table[d];
			if (kind == PACK_Q4_0) { /* low nibbles are elements 0..15, high 16..31; u8 = q - 8 + 128 */
				const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(blk + 2));
				const __m128i m = _mm_set1_epi8(15);
				r[i] = _mm256_add_epi8(_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m),
									_mm_and_si128(q, m)),
						       _mm256_set1_epi8(120));
			} else if (kind == PACK_Q5_0) {
				/* nibbles as q4_0, bit j of qh to byte j (ggml bytes_from_bits_32:
				   spread, or the other bits in, compare with all ones) as 16;
				   u8 = q - 16 + 128 */
				const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(blk + 6));
				const __m128i m = _mm_set1_epi8(15);
				uint32_t qh;
				memcpy(&qh, blk + 2, sizeof qh);
				__m256i hb = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh),
								 _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
										   0x0101010101010101, 0));
				hb = _mm256_cmpeq_epi8(_mm256_or_si256(hb, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)),
						       _mm256_set1_epi64x(-1));
				const __m256i lo = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
				r[i] = _mm256_add_epi8(_mm256_or_si256(lo, _mm256_and_si256(hb, _mm256_set1_epi8(16))),
						       _mm256_set1_epi8(112));
			} else {
				r[i] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)(blk + 2)),
							_mm256_set1_epi8((char)0x80));
			}
		}
		/* per 8 rows h: 8 x 8 dword transpose, group g to p + g * 64 + h * 32 */
#pragma GCC unroll 16
		for (int i = 0; i < IR; i += 2) {
			t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
			t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
		}
#pragma GCC unroll 16
		for (int i = 0; i < IR; i += 4) {
			u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
			u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
			u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
			u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
		}
		uint8_t *p = pk + b * IR * 32;
#pragma GCC unroll 2
		for (int h = 0; h < IR / 8; h++)
#pragma GCC unroll 4
			for (int g = 0; g < 4; g++) {
				const __m256i *v = u + 8 * h;
				_mm256_storeu_si256((__m256i *)(void *)(p + g * IR * 4 + h * 32),
						    _mm256_permute2x128_si256(v[g], v[g + 4], 0x20));
				_mm256_storeu_si256((__m256i *)(void *)(p + (g + 4) * IR * 4 + h * 32),
						    _mm256_permute2x128_si256(v[g], v[g + 4], 0x31));
			}
	}
}

__attribute__((target("avx2"))) static void pack_q8_0_avx2(struct slot *s,
							    const struct int8_type *it,
							    const uint8_t *const *rows, int64_t nb,
							    const uint8_t *next)
{
	(void)it;
	pack_avx2_body(s, rows, nb, next, PACK_Q8_0);
}

__attribute__((target("avx2"))) static void pack_q4_0_avx2(struct slot *s,
							    const struct int8_type *it,
							    const uint8_t *const *rows, int64_t nb,
							    const uint8_t *next)
{
	(void)it;
	pack_avx2_body(s, rows, nb, next, PACK_Q4_0);
}

__attribute__((target("avx2"))) static void pack_q5_0_avx2(struct slot *s,
							    const struct int8_type *it,
							    const uint8_t *const *rows, int64_t nb,
							    const uint8_t *next)
{
	(void)it;
	pack_avx2_body(s, rows, nb, next, PACK_Q5_0);
}
#define PACK_SIMD(f) f
#else
#define PACK_SIMD(f) NULL
#endif

/* acc[t * IR + i] = sum over blocks b, in order, of isum * (d_w * d_x), in
 * double, where isum = sum of code products of block b (exact, int32): the
 * u8 codes carry +128, cancelled by starting from xs = -128 * sum x codes. */
void qc_matmul_itile_generic(const uint8_t *pk, const double *pkd, int64_t nb, const int8_t *xq,
			     const double *xqd, const int32_t *xs, int64_t n_in, int nt, double *acc)
{
	for (int t = 0; t < nt; t++) {
		double *a = acc + t * IR;
		for (int i = 0; i < IR; i++)
			a[i] = 0.0;
		for (int64_t b = 0; b < nb; b++) {
			const uint8_t *p = pk + b * IR * 32;
			const int8_t *x = xq + t * n_in + b * 32;
			const double dx = xqd[t * nb + b];
			for (int i = 0; i < IR; i++) {
				int32_t s = xs[t * nb + b];
				for (int g = 0; g < 8; g++)
					for (int j = 0; j < 4; j++)
						s += (int32_t)p[(g * IR + i) * 4 + j] * (int32_t)x[g * 4 + j];
				a[i] += (double)s * (pkd[b * IR + i] * dx);
			}
		}
	}
}

#ifdef QC_X86
/* The same tile with AVX2 only (no VNNI: e.g. AMD EPYC before Zen 4, where the
 * portable tile took a third of a SmolLM2 decode). Per 4-byte group the 16 rows'
 * codes are compared as signed bytes w = u8 ^ 0x80 (the code itself): |w| times
 * x carrying w's sign, in unsigned x signed byte pairs (|w| <= 128, |x| <= 127:
 * a pair sums to at most 32512, no int16 saturation), the pairs summed to int32:
 * sum w x for the group, exactly. sum over the block of w x equals the portable
 * tile's s = xs + sum (w + 128) x, so the block sums, and with them the double
 * operations (one product (double)s * (d_w * d_x), exact in double, then an
 * add: the fma below gives the same bits), are the portable tile's. */
__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) void
itile_avx2_body(const uint8_t *pk, const double *pkd, int64_t nb, const int8_t *xq, const double *xqd,
		int64_t n_in, const int NT, double *acc)
{
	const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
	__m256d ad[4][4];
#pragma GCC unroll 4
	for (int t = 0; t < NT; t++)
		ad[t][0] = ad[t][1] = ad[t][2] = ad[t][3] = _mm256_setzero_pd();
	for (int64_t b = 0; b < nb; b++) {
		const uint8_t *p = pk + b * IR * 32;
		__m256i s[4][2];
#pragma GCC unroll 4
		for (int t = 0; t < NT; t++)
			s[t][0] = s[t][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
		for (int g = 0; g < 8; g++) {
			const __m256i w0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)(p + g * IR * 4)), flip);
			const __m256i w1 =
				_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)(p + g * IR * 4 + 32)), flip);
			const __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);
#pragma GCC unroll 4
			for (int t = 0; t < NT; t++) {
				int32_t xv;
				memcpy(&xv, xq + t * n_in + b * 32 + g * 4, sizeof xv);
				const __m256i x = _mm256_set1_epi32(xv);
				s[t][0] = _mm256_add_epi32(s[t][0], _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(x, w0)), ones));
				s[t][1] = _mm256_add_epi32(s[t][1], _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(x, w1)), ones));
			}
		}
		__m256d dw[4];
		for (int q = 0; q < 4; q++)
			dw[q] = _mm256_loadu_pd(pkd + b * IR + 4 * q);
#pragma GCC unroll 4
		for (int t = 0; t < NT; t++) {
			const __m256d dx = _mm256_set1_pd(xqd[t * nb + b]);
			const __m256d i0 = _mm256_cvtepi32_pd(_mm256_castsi256_si128(s[t][0]));
			const __m256d i1 = _mm256_cvtepi32_pd(_mm256_extracti128_si256(s[t][0], 1));
			const __m256d i2 = _mm256_cvtepi32_pd(_mm256_castsi256_si128(s[t][1]));
			const __m256d i3 = _mm256_cvtepi32_pd(_mm256_extracti128_si256(s[t][1], 1));
			ad[t][0] = _mm256_fmadd_pd(i0, _mm256_mul_pd(dw[0], dx), ad[t][0]);
			ad[t][1] = _mm256_fmadd_pd(i1, _mm256_mul_pd(dw[1], dx), ad[t][1]);
			ad[t][2] = _mm256_fmadd_pd(i2, _mm256_mul_pd(dw[2], dx), ad[t][2]);
			ad[t][3] = _mm256_fmadd_pd(i3, _mm256_mul_pd(dw[3], dx), ad[t][3]);
		}
	}
#pragma GCC unroll 4
	for (int t = 0; t < NT; t++)
		for (int q = 0; q < 4; q++)
			_mm256_storeu_pd(acc + t * IR + 4 * q, ad[t][q]);
}

__attribute__((target("avx2,fma"))) void qc_matmul_itile_avx2(const uint8_t *pk, const double *pkd, int64_t nb,
							      const int8_t *xq, const double *xqd, const int32_t *xs,
							      int64_t n_in, int nt, double *acc)
{
	(void)xs; /* the signed codes need no offset correction */
	int t = 0;
	for (; t + 4 <= nt; t += 4)
		itile_avx2_body(pk, pkd, nb, xq + t * n_in, xqd + t * nb, n_in, 4, acc + t * IR);
	for (; t < nt; t++)
		itile_avx2_body(pk, pkd, nb, xq + t * n_in, xqd + t * nb, n_in, 1, acc + t * IR);
}

#define VNNI_TARGET "avx2,fma,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni"

__attribute__((target(VNNI_TARGET))) static inline __attribute__((always_inline)) void
itile_body(const uint8_t *pk, const double *pkd, int64_t nb, const int8_t *xq, const double *xqd,
	   const int32_t *xs, int64_t n_in, const int NT, double *acc)
{
	/* integer sums are exact in any order: few tokens get several chains of
	 * dot products so the latency of one chain does not bound the loop */
	const int NC = NT >= 8 ? 1 : NT >= 4 ? 2 : 4;
	__m512d ad[IT][2];
#pragma GCC unroll 8
	for (int t = 0; t < NT; t++)
		ad[t][0] = ad[t][1] = _mm512_setzero_pd();
	for (int64_t b = 0; b < nb; b++) {
		const uint8_t *p = pk + b * IR * 32;
		__m512i s[IT][4];
#pragma GCC unroll 8
		for (int t = 0; t < NT; t++) {
			s[t][0] = _mm512_set1_epi32(xs[t * nb + b]);
#pragma GCC unroll 4
			for (int c = 1; c < NC; c++)
				s[t][c] = _mm512_setzero_si512();
		}
#pragma GCC unroll 8
		for (int g = 0; g < 8; g++) {
			const __m512i wv = _mm512_loadu_si512((const void *)(p + g * IR * 4));
#pragma GCC unroll 8
			for (int t = 0; t < NT; t++) {
				int32_t xv;
				memcpy(&xv, xq + t * n_in + b * 32 + g * 4, sizeof xv);
				s[t][g % NC] = _mm512_dpbusd_epi32(s[t][g % NC], wv, _mm512_set1_epi32(xv));
			}
		}
		const __m512d dw0 = _mm512_loadu_pd(pkd + b * IR), dw1 = _mm512_loadu_pd(pkd + b * IR + 8);
#pragma GCC unroll 8
		for (int t = 0; t < NT; t++) {
#pragma GCC unroll 4
			for (int c = 1; c < NC; c++)
				s[t][0] = _mm512_add_epi32(s[t][0], s[t][c]);
			const __m512d dx = _mm512_set1_pd(xqd[t * nb + b]);
			const __m512d i0 = _mm512_cvtepi32_pd(_mm512_castsi512_si256(s[t][0]));
			const __m512d i1 = _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(s[t][0], 1));
			ad[t][0] = _mm512_fmadd_pd(i0, _mm512_mul_pd(dw0, dx), ad[t][0]);
			ad[t][1] = _mm512_fmadd_pd(i1, _mm512_mul_pd(dw1, dx), ad[t][1]);
		}
	}
#pragma GCC unroll 8
	for (int t = 0; t < NT; t++) {
		_mm512_storeu_pd(acc + t * IR, ad[t][0]);
		_mm512_storeu_pd(acc + t * IR + 8, ad[t][1]);
	}
}

__attribute__((target(VNNI_TARGET))) void
qc_matmul_itile_vnni(const uint8_t *pk, const double *pkd, int64_t nb, const int8_t *xq,
		     const double *xqd, const int32_t *xs, int64_t n_in, int nt, double *acc)
{
	int t = 0;
	for (; t + IT <= nt; t += IT)
		itile_body(pk, pkd, nb, xq + t * n_in, xqd + t * nb, xs + t * nb, n_in, IT, acc + t * IR);
	for (; t + 4 <= nt; t += 4)
		itile_body(pk, pkd, nb, xq + t * n_in, xqd + t * nb, xs + t * nb, n_in, 4, acc + t * IR);
	for (; t < nt; t++)
		itile_body(pk, pkd, nb, xq + t * n_in, xqd + t * nb, xs + t * nb, n_in, 1, acc + t * IR);
}

/* One token against IR rows straight from the weights, for decode: per block,
 * IR 8-lane dot products reduced to IR exact block sums (integer adds, any
 * order), then the same double operations as itile_body. */
__attribute__((target(VNNI_TARGET))) static inline __attribute__((always_inline)) void
dot16_body(const uint8_t *const *rows, int64_t nb, const int8_t *xq,
	   const double *xqd, const int32_t *xs, double *acc, const bool q4)
{
	const int64_t bb = q4 ? (int64_t)sizeof(struct qc_block_Q4_0) : (int64_t)sizeof(struct qc_block_Q8_0);
	const uint8_t *rw[IR];
	memcpy(rw, rows, sizeof rw);
	__m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
	for (int64_t b = 0; b < nb; b++) {
		const __m256i xb = _mm256_loadu_si256((const __m256i *)(const void *)(xq + b * 32));
		__m256i v[IR], h[IR / 2], g[IR / 4];
		double dw[IR];
#pragma GCC unroll 16
		for (int i = 0; i < IR; i++) {
			const uint8_t *blk = rw[i] + b * bb;
			uint16_t d;
			/* into L1, ~a line per row every other block, 512 B ahead: the
			 * best of the distances and hints tried here (10 GMAC/s against
			 * 8 with none, uncached 2048 x 2048) */
			if (b % 2 == 0)
				__builtin_prefetch((const void *)((uintptr_t)blk + 512), 0, 3);
			memcpy(&d, blk, sizeof d);
			dw[i] = (double)f16_table[d];
			__m256i wv;
			if (q4) {
				const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(blk + 2));
				const __m128i m = _mm_set1_epi8(15);
				wv = _mm256_add_epi8(_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m),
								      _mm_and_si128(q, m)),
						     _mm256_set1_epi8(120));
			} else {
				wv = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)(blk + 2)),
						      _mm256_set1_epi8((char)0x80));
			}
			v[i] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wv, xb);
		}
#pragma GCC unroll 8
		for (int j = 0; j < IR / 2; j++)
			h[j] = _mm256_hadd_epi32(v[2 * j], v[2 * j + 1]);
#pragma GCC unroll 4
		for (int j = 0; j < IR / 4; j++) /* [v4j .. v4j+3 lanes 0-3 | lanes 4-7] */
			g[j] = _mm256_hadd_epi32(h[2 * j], h[2 * j + 1]);
		const __m256i xsv = _mm256_set1_epi32(xs[b]);
		const __m256i s0 = _mm256_add_epi32(_mm256_add_epi32(_mm256_permute2x128_si256(g[0], g[1], 0x20),
								     _mm256_permute2x128_si256(g[0], g[1], 0x31)), xsv);
		const __m256i s1 = _mm256_add_epi32(_mm256_add_epi32(_mm256_permute2x128_si256(g[2], g[3], 0x20),
								     _mm256_permute2x128_si256(g[2], g[3], 0x31)), xsv);
		const __m512d dx = _mm512_set1_pd(xqd[b]);
		a0 = _mm512_fmadd_pd(_mm512_cvtepi32_pd(s0), _mm512_mul_pd(_mm512_loadu_pd(dw), dx), a0);
		a1 = _mm512_fmadd_pd(_mm512_cvtepi32_pd(s1), _mm512_mul_pd(_mm512_loadu_pd(dw + 8), dx), a1);
	}
	_mm512_storeu_pd(acc, a0);
	_mm512_storeu_pd(acc + 8, a1);
}

__attribute__((target(VNNI_TARGET))) static void dot16_q8_0_vnni(const uint8_t *const *rows,
								  int64_t nb, const int8_t *xq,
								  const double *xqd,
								  const int32_t *xs, double *acc)
{
	dot16_body(rows, nb, xq, xqd, xs, acc, false);
}

__attribute__((target(VNNI_TARGET))) static void dot16_q4_0_vnni(const uint8_t *const *rows,
								  int64_t nb, const int8_t *xq,
								  const double *xqd,
								  const int32_t *xs, double *acc)
{
	dot16_body(rows, nb, xq, xqd, xs, acc, true);
}
#define DOT16_VNNI(f) f
#else
#define DOT16_VNNI(f) NULL
#endif

static const struct int8_type int8_types[] = {
	{QC_TYPE_Q8_0, codes_q8_0, PACK_SIMD(pack_q8_0_avx2), DOT16_VNNI(dot16_q8_0_vnni)},
	{QC_TYPE_Q4_0, codes_q4_0, PACK_SIMD(pack_q4_0_avx2), DOT16_VNNI(dot16_q4_0_vnni)},
	{QC_TYPE_Q5_0, codes_q5_0, PACK_SIMD(pack_q5_0_avx2), NULL},
};

const struct int8_type *qc_matmul_find_int8(enum qc_type t)
{
	for (size_t i = 0; i < sizeof int8_types / sizeof int8_types[0]; i++)
		if (int8_types[i].type == t)
			return &int8_types[i];
	return NULL;
}

void qc_matmul_rows_int8(struct qc_matmul *mm, const struct mm_part *p, struct slot *s, int64_t r0,
			 int64_t r1)
{
	const struct qc_mat *w = p->w;
	const int64_t n = w->n_in, nb = n / 32;
	double acc[IT * IR];

	for (int64_t r = r0; r < r1; r += IR) {
		const int nr = r1 - r < IR ? (int)(r1 - r) : IR;
		const uint8_t *rows[IR];
		for (int i = 0; i < IR; i++) /* a short tile repeats its last row */
			rows[i] = qc_mat_row(w, mm->e, r + (i < nr ? i : nr - 1));
		const uint8_t *next = rows[0] + 2 * IR * w->row_bytes;
		if (mm->dot16) { /* few tokens: no repack */
			for (int64_t t = 0; t < mm->n_tok; t++) {
				mm->dot16(rows, nb, mm->xq + t * n, mm->xqd + t * nb, mm->xs + t * nb, acc);
				for (int i = 0; i < nr; i++)
					p->y[t * p->ldy + r + i] = (float)acc[i];
			}
			continue;
		}
		mm->pack(s, mm->i8, rows, nb, next);
		for (int64_t t = 0; t < mm->n_tok; t += IT) {
			const int nt = mm->n_tok - t < IT ? (int)(mm->n_tok - t) : IT;
			mm->itile(s->pk, s->pkd, nb, mm->xq + t * n, mm->xqd + t * nb, mm->xs + t * nb, n,
				  nt, acc);
			for (int j = 0; j < nt; j++)
				for (int i = 0; i < nr; i++)
					p->y[(t + j) * p->ldy + r + i] = (float)acc[j * IR + i];
		}
	}
}

void qc_matmul_int8_init(void)
{
	pthread_once(&f16_once, fill_f16_table);
}
