/* matmul_cpu.c — y = W x on the CPU, tiled rows x tokens (see matmul_cpu.h).
 *
 * Index grammar: r output row (weight row), t token, k input element, b 32-element
 * block, i row inside a tile, g 4-byte group inside a block.
 * Three kernels, chosen per matmul from the weight type and enum qc_act_round:
 *  - float (f32/f16 weights): rows decoded to float once per tile of FR rows,
 *    dotted with FT tokens at a time, k in chunks of KC; each dot is 16 float
 *    lanes (lane = k mod 16, zero-padded tail) of fused multiply-adds, then a
 *    fixed tree. As ggml (float sums); no activation rounding beyond the weight
 *    type's.
 *    Not bf16: its 8-bit activation rounding turns float-ulp differences into
 *    flips; with float sums stories260K-BF16 left llama.cpp by 1.3e-2 logits
 *    (measured), past the 5e-3 that double sums keep.
 *  - int8 (q8_0 / q4_0 weights x q8_0 activation codes, QC_ACT_ROUND_GGML): each
 *    tile of IR rows is repacked once (4-byte groups of the rows interleaved,
 *    codes + 128 as u8) and multiplied with 8-bit dot products: exact integer
 *    block sums, each times d_w * d_x (exact in double) added to a double in block
 *    order: the exact block dots ggml sums in float, summed in double. Decode
 *    (few tokens) skips the repack and reduces each row's products in place:
 *    the same integers, the same double operations.
 *  - reference (every other case): each row decoded to float, dotted in double
 *    from exact products in 16 lanes; q4_1/q5_1 add the q8_1 block-sum term.
 * SIMD clones (AVX2+FMA, its 32-register AVX-512VL form; AVX-512 VNNI for int8)
 * are picked at run time and do the same IEEE operations as the portable code,
 * bit for bit.
 * Reference: ggml-cpu vec_dot_q8_0_q8_0, quantize_row_q8_0 (x86), llamafile
 * sgemm's tiling idea (tinyBLAS: register tiles of rows x tokens).
 */
#include "matmul_cpu.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "qblock.h"
#include "qtype.h"
#include "fp16.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define QC_X86 1
#endif

#define FR 8     /* float kernel: rows per register tile */
#define FT 3     /* float kernel: tokens per register tile */
#define KC 512   /* float kernel: k per chunk (a tile's rows stay in L1 across tokens) */
#define IR 16    /* int8 kernel: rows per packed tile (one per 32-bit lane of a zmm) */
#define IT 8     /* int8 kernel: tokens per register tile */
#define DOT16_MAX_TOK 4 /* int8 kernel: fewer tokens than this skip the repack */
#define TOK_L2 (1 << 20) /* bytes of activations kept hot while a row tile streams */

enum mm_kind { MM_REF, MM_FLOAT, MM_INT8 };

/* Codes of block b of a weight row as int8 (value = d * code), d returned. */
typedef float (*codes_fn)(const uint8_t *row, int64_t b, int8_t *codes);

struct slot {
	float *ftile;                 /* (FR, max_in) decoded float rows */
	float *lanes;                 /* (max_tok + FT, FR, 16) float kernel lanes between chunks */
	double *rowd;                 /* (max_in) a decoded row widened (reference) */
	uint8_t *pk;                  /* (max_in / 32, 8 groups, IR rows, 4) codes + 128 */
	double *pkd;                  /* (max_in / 32, IR) d_w per block and row */
	int8_t *codes;                /* (32) one block's codes */
};

struct int8_type;

/* see ftile_generic */
typedef void (*ftile_fn)(const float *const *w, int nr, const float *x, int64_t ldx, int nt,
			 int64_t k0, int64_t k1, int64_t n, float *lanes, float *out);

/* Repack rows[0..IR) (nb blocks each) into s->pk / s->pkd: group g of block b
 * holds the 4 codes k = 32b + 4g .. +3 of every row, as code + 128 (u8). */
typedef void (*pack_fn)(struct slot *s, const struct int8_type *it, const uint8_t *const *rows,
			int64_t nb, const uint8_t *next);

struct qc_matmul {
	enum qc_act_round ar;
	int64_t max_in, max_tok;
	int n_slots;
	struct slot *slots;           /* (n_slots) */
	float *xr;                    /* (max_tok, max_in) rounded activations */
	double *xd;                   /* (max_tok, max_in) activations widened (reference) */
	double *sdelta;               /* (max_tok, max_in / 32) q8_1: s - d16 * sum q */
	int8_t *xq;                   /* (max_tok, max_in) q8_0 activation codes */
	double *xqd;                  /* (max_tok, max_in / 32) their d16, widened */
	int32_t *xs;                  /* (max_tok, max_in / 32) -128 * sum of a block's codes */
	uint8_t *qbuf;                /* one quantized activation row */
	/* the prepared job */
	enum mm_kind kind;
	const struct qc_mat *w;
	int64_t e, n_tok, ldy;
	const float *xa;              /* (n_tok, n_in) activations as the kernel reads them */
	float *y;
	bool q81;
	const struct int8_type *i8;   /* the int8 kernel's weight type, or NULL */
	pack_fn pack;
	void (*dot16)(const uint8_t *const *rows, int64_t nb, const int8_t *xq, const double *xqd,
		      const int32_t *xs, double *acc);
	/* kernels, chosen once */
	bool avx2, vnni;
	ftile_fn ftile;
	void (*itile)(const uint8_t *pk, const double *pkd, int64_t nb, const int8_t *xq,
		      const double *xqd, const int32_t *xs, int64_t n_in, int nt, double *acc);
	double (*dot_dd)(const double *a, const double *b, int64_t n);
	double (*dot_fd)(const float *a, const double *b, int64_t n);
};

/* Weight rows stream from the mapped file; this machine's hardware prefetch did
 * not keep up (q8_0 decode 17 tokens/s without, 57 at 16 KiB ahead), and into
 * L2 beat into L1 here. A prefetch never faults; the address is formed as an
 * integer to stay clear of pointer-overflow UB. */
static inline void prefetch_ahead(const void *p, size_t bytes)
{
	__builtin_prefetch((const void *)((uintptr_t)p + bytes), 0, 2);
}

/* ---- float kernel --------------------------------------------------------- */

/* Lane sums -> one float: fold 16 -> 8 (l[j] + l[j+8]) -> 4 (+4), then
 * (s0 + s2) + (s1 + s3). */
static inline float reduce16(const float *l)
{
	float h[8], q[4];
	for (int j = 0; j < 8; j++)
		h[j] = l[j] + l[j + 8];
	for (int j = 0; j < 4; j++)
		q[j] = h[j] + h[j + 4];
	return (q[0] + q[2]) + (q[1] + q[3]);
}

/* The float kernel's contract (every variant): for i < nr <= FR, t < nt <= FT,
 * the 16 lanes of dot(w[i], x[t * ldx]) over k in [k0, k1): lane j takes k = j
 * mod 16, a chain of fused multiply-adds, zero-padded past n (fma(0, 0, l)
 * included). Lanes start at 0 when k0 == 0, else from lanes[(t * FR + i) * 16];
 * they are saved there when k1 < n, reduced into out[t * FR + i] when k1 == n.
 * k0 is a multiple of 16, k1 one or n. Chunking k changes no operation. */
static void ftile_generic(const float *const *w, int nr, const float *x, int64_t ldx, int nt,
			  int64_t k0, int64_t k1, int64_t n, float *lanes, float *out)
{
	for (int t = 0; t < nt; t++)
		for (int i = 0; i < nr; i++) {
			const float *a = w[i], *b = x + t * ldx;
			float *l = lanes + (t * FR + i) * 16;
			for (int j = 0; k0 == 0 && j < 16; j++)
				l[j] = 0.0f;
			for (int64_t k = k0; k < k1; k += 16)
				for (int j = 0; j < 16; j++) {
					const bool in = k + j < n;
					l[j] = fmaf(in ? a[k + j] : 0.0f, in ? b[k + j] : 0.0f, l[j]);
				}
			if (k1 == n)
				out[t * FR + i] = reduce16(l);
		}
}

#ifdef QC_X86
#define F512_TARGET "avx2,fma,avx512f,avx512vl,avx512bw,avx512dq"

__attribute__((target("avx2,fma"))) static inline float hsum16_avx2(__m256 lo, __m256 hi)
{
	const __m256 h = _mm256_add_ps(lo, hi);
	const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
	const __m128 p = _mm_add_ps(q, _mm_movehl_ps(q, q));
	return _mm_cvtss_f32(_mm_add_ss(p, _mm_shuffle_ps(p, p, 1)));
}

/* AVX2: two ymm of lanes per output (lanes 0-7, 8-15), NR (<= 4) rows x NT
 * (<= 3) tokens; 2 x 3 fits AVX2's 16 registers, 4 x 3 AVX-512VL's 32. */
__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) void
ftile256_body(const float *const *w, const int NR, const float *x, int64_t ldx, const int NT,
	      int64_t k0, int64_t k1, int64_t n, float *lanes, float *out)
{
	__m256 acc[4][3][2];
#pragma GCC unroll 4
	for (int i = 0; i < NR; i++)
#pragma GCC unroll 4
		for (int t = 0; t < NT; t++)
#pragma GCC unroll 2
			for (int h = 0; h < 2; h++)
				acc[i][t][h] = k0 ? _mm256_loadu_ps(lanes + (t * FR + i) * 16 + 8 * h)
						  : _mm256_setzero_ps();
	int64_t k = k0;
	for (; k + 16 <= k1; k += 16) {
#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			__m256 xv[3];
#pragma GCC unroll 4
			for (int t = 0; t < NT; t++)
				xv[t] = _mm256_loadu_ps(x + t * ldx + k + 8 * h);
#pragma GCC unroll 4
			for (int i = 0; i < NR; i++) {
				const __m256 wv = _mm256_loadu_ps(w[i] + k + 8 * h);
#pragma GCC unroll 4
				for (int t = 0; t < NT; t++)
					acc[i][t][h] = _mm256_fmadd_ps(wv, xv[t], acc[i][t][h]);
			}
		}
	}
	if (k < k1) { /* zero-padded tail: masked loads read zeros past k1 */
		static const int32_t ramp[24] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
						 -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
		const int64_t left = k1 - k;
		const __m256i m[2] = {
			_mm256_loadu_si256((const __m256i *)(const void *)(ramp + 16 - (left < 8 ? left : 8))),
			_mm256_loadu_si256((const __m256i *)(const void *)(ramp + 16 - (left > 8 ? left - 8 : 0)))};
#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			__m256 xv[3];
#pragma GCC unroll 4
			for (int t = 0; t < NT; t++)
				xv[t] = _mm256_maskload_ps(x + t * ldx + k + 8 * h, m[h]);
#pragma GCC unroll 4
			for (int i = 0; i < NR; i++) {
				const __m256 wv = _mm256_maskload_ps(w[i] + k + 8 * h, m[h]);
#pragma GCC unroll 4
				for (int t = 0; t < NT; t++)
					acc[i][t][h] = _mm256_fmadd_ps(wv, xv[t], acc[i][t][h]);
			}
		}
	}
#pragma GCC unroll 4
	for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
		for (int i = 0; i < NR; i++) {
			if (k1 < n) {
				_mm256_storeu_ps(lanes + (t * FR + i) * 16, acc[i][t][0]);
				_mm256_storeu_ps(lanes + (t * FR + i) * 16 + 8, acc[i][t][1]);
			} else {
				out[t * FR + i] = hsum16_avx2(acc[i][t][0], acc[i][t][1]);
			}
		}
}

/* On this project's VM a zmm FMA runs at half the rate of two ymm ones (one
 * 512-bit unit, lower clock: 45 against 59 GMAC/s measured), so with AVX-512VL
 * the float kernel stays in ymm and uses the 32 registers for a 4 x 3 tile. */
__attribute__((target(F512_TARGET))) static void ftile_avx2vl(const float *const *w, int nr,
							      const float *x, int64_t ldx, int nt,
							      int64_t k0, int64_t k1, int64_t n,
							      float *lanes, float *out)
{
	for (int i = 0; i < nr; i += 4) {
		if (i + 4 <= nr) { /* sub-tile at (0, i): the same lanes / out cells */
			if (nt == 3)
				ftile256_body(w + i, 4, x, ldx, 3, k0, k1, n, lanes + i * 16, out + i);
			else if (nt == 2)
				ftile256_body(w + i, 4, x, ldx, 2, k0, k1, n, lanes + i * 16, out + i);
			else
				ftile256_body(w + i, 4, x, ldx, 1, k0, k1, n, lanes + i * 16, out + i);
			continue;
		}
		for (int b = i; b < nr; b++)
			for (int a = 0; a < nt; a++)
				ftile256_body(w + b, 1, x + a * ldx, ldx, 1, k0, k1, n,
					      lanes + (a * FR + b) * 16, out + a * FR + b);
	}
}

__attribute__((target("avx2,fma"))) static void ftile_avx2(const float *const *w, int nr,
							   const float *x, int64_t ldx, int nt,
							   int64_t k0, int64_t k1, int64_t n,
							   float *lanes, float *out)
{
	for (int i = 0; i < nr; i += 2)
		for (int t = 0; t < nt; t += 3) {
			if (i + 2 <= nr && t + 3 <= nt) { /* sub-tile at (t, i): same lanes / out cells */
				ftile256_body(w + i, 2, x + t * ldx, ldx, 3, k0, k1, n,
					      lanes + (t * FR + i) * 16, out + t * FR + i);
				continue;
			}
			for (int b = i; b < nr && b < i + 2; b++)
				for (int a = t; a < nt && a < t + 3; a++)
					ftile256_body(w + b, 1, x + a * ldx, ldx, 1, k0, k1, n,
						      lanes + (a * FR + b) * 16, out + a * FR + b);
		}
}
#endif

/* Weight types the float kernel reads (f32 rows in place, the others decoded). */
static const enum qc_type float_types[] = {QC_TYPE_F32, QC_TYPE_F16};

static bool float_kernel(enum qc_type t)
{
	for (size_t i = 0; i < sizeof float_types / sizeof float_types[0]; i++)
		if (float_types[i] == t)
			return true;
	return false;
}

/* ---- int8 kernel ---------------------------------------------------------- */

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

/* Weight types the int8 kernel reads: value = d * int8 code per 32 elements. */
struct int8_type {
	enum qc_type type;
	codes_fn codes;               /* portable decoder */
	pack_fn pack_simd;            /* AVX2 repack, or NULL */
	/* AVX-512 VNNI: one token against IR rows in place (decode), or NULL */
	void (*dot16_vnni)(const uint8_t *const *rows, int64_t nb, const int8_t *xq,
			   const double *xqd, const int32_t *xs, double *acc);
};

static void pack_generic(struct slot *s, const struct int8_type *it, const uint8_t *const *rows,
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
/* The same repack for q8_0 (q4 false) or q4_0 blocks: codes + 128 of the 8
 * rows as 8 ymm (8 dwords each), then an 8 x 8 dword transpose. */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void
pack_avx2_body(struct slot *s, const uint8_t *const *rows, int64_t nb, const uint8_t *next,
	       const bool q4)
{
	const int64_t bb = q4 ? (int64_t)sizeof(struct qc_block_Q4_0) : (int64_t)sizeof(struct qc_block_Q8_0);
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
			if (q4) { /* low nibbles are elements 0..15, high 16..31; u8 = q - 8 + 128 */
				const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(blk + 2));
				const __m128i m = _mm_set1_epi8(15);
				r[i] = _mm256_add_epi8(_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m),
									_mm_and_si128(q, m)),
						       _mm256_set1_epi8(120));
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
	pack_avx2_body(s, rows, nb, next, false);
}

__attribute__((target("avx2"))) static void pack_q4_0_avx2(struct slot *s,
							    const struct int8_type *it,
							    const uint8_t *const *rows, int64_t nb,
							    const uint8_t *next)
{
	(void)it;
	pack_avx2_body(s, rows, nb, next, true);
}
#define PACK_SIMD(f) f
#else
#define PACK_SIMD(f) NULL
#endif

/* acc[t * IR + i] = sum over blocks b, in order, of isum * (d_w * d_x), in
 * double, where isum = sum of code products of block b (exact, int32): the
 * u8 codes carry +128, cancelled by starting from xs = -128 * sum x codes. */
static void itile_generic(const uint8_t *pk, const double *pkd, int64_t nb, const int8_t *xq,
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

__attribute__((target(VNNI_TARGET))) static void itile_vnni(const uint8_t *pk, const double *pkd,
							     int64_t nb, const int8_t *xq,
							     const double *xqd, const int32_t *xs,
							     int64_t n_in, int nt, double *acc)
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
};

static const struct int8_type *find_int8(enum qc_type t)
{
	for (size_t i = 0; i < sizeof int8_types / sizeof int8_types[0]; i++)
		if (int8_types[i].type == t)
			return &int8_types[i];
	return NULL;
}

/* ---- reference kernel ------------------------------------------------------ */

/* Matmul dot of float values held as doubles: the products are exact (24-bit
 * mantissas), summed in 16 lanes (lane k takes i = k mod 16, plus the tail in
 * lane 0) combined by a fixed tree; fused or not, the same IEEE result. */
typedef double v4d __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));

static inline __attribute__((always_inline)) double dot_dd_body(const double *a, const double *b,
								int64_t n)
{
	v4d s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		v4d a0, a1, a2, a3, b0, b1, b2, b3;
		memcpy(&a0, a + i, sizeof a0);
		memcpy(&a1, a + i + 4, sizeof a1);
		memcpy(&a2, a + i + 8, sizeof a2);
		memcpy(&a3, a + i + 12, sizeof a3);
		memcpy(&b0, b + i, sizeof b0);
		memcpy(&b1, b + i + 4, sizeof b1);
		memcpy(&b2, b + i + 8, sizeof b2);
		memcpy(&b3, b + i + 12, sizeof b3);
		s0 += a0 * b0;
		s1 += a1 * b1;
		s2 += a2 * b2;
		s3 += a3 * b3;
	}
	double t = 0.0;
	for (; i < n; i++)
		t += a[i] * b[i];
	const v4d s = (s0 + s1) + (s2 + s3);
	return ((s[0] + t) + s[1]) + (s[2] + s[3]);
}

/* The same sums with a given as floats (widened exactly in the loop). */
static inline __attribute__((always_inline)) double dot_fd_body(const float *a, const double *b,
								int64_t n)
{
	v4d s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		v4f a0, a1, a2, a3;
		v4d b0, b1, b2, b3;
		prefetch_ahead(a + i, 16384);
		memcpy(&a0, a + i, sizeof a0);
		memcpy(&a1, a + i + 4, sizeof a1);
		memcpy(&a2, a + i + 8, sizeof a2);
		memcpy(&a3, a + i + 12, sizeof a3);
		memcpy(&b0, b + i, sizeof b0);
		memcpy(&b1, b + i + 4, sizeof b1);
		memcpy(&b2, b + i + 8, sizeof b2);
		memcpy(&b3, b + i + 12, sizeof b3);
		s0 += __builtin_convertvector(a0, v4d) * b0;
		s1 += __builtin_convertvector(a1, v4d) * b1;
		s2 += __builtin_convertvector(a2, v4d) * b2;
		s3 += __builtin_convertvector(a3, v4d) * b3;
	}
	double t = 0.0;
	for (; i < n; i++)
		t += (double)a[i] * b[i];
	const v4d s = (s0 + s1) + (s2 + s3);
	return ((s[0] + t) + s[1]) + (s[2] + s[3]);
}

static double dot_dd_generic(const double *a, const double *b, int64_t n)
{
	return dot_dd_body(a, b, n);
}

static double dot_fd_generic(const float *a, const double *b, int64_t n)
{
	return dot_fd_body(a, b, n);
}

#ifdef QC_X86
__attribute__((target("avx2,fma"))) static double dot_dd_avx2(const double *a, const double *b,
							      int64_t n)
{
	return dot_dd_body(a, b, n);
}

__attribute__((target("avx2,fma"))) static double dot_fd_avx2(const float *a, const double *b,
							      int64_t n)
{
	return dot_fd_body(a, b, n);
}
#endif

/* ggml pairs these weights with q8_1 activations (type_traits_cpu vec_dot_type);
 * both blocks begin with fp16 d then fp16 m. */
static bool pairs_q8_1(enum qc_type t)
{
	return t == QC_TYPE_Q4_1 || t == QC_TYPE_Q5_1;
}
_Static_assert(offsetof(struct qc_block_Q4_1, m) == offsetof(struct qc_block_Q5_1, m),
	       "q4_1 and q5_1 keep m at the same offset");

/* Block minimum m of block b of a q8_1-paired weight row. */
static float block_min(const struct qc_type_traits *tt, const uint8_t *row, int64_t b)
{
	uint16_t h;
	memcpy(&h, row + b * tt->block_bytes + offsetof(struct qc_block_Q4_1, m), sizeof h);
	return qc_fp16_to_f32(h);
}

/* ---- activation rounding --------------------------------------------------- */

/* ggml quantize_row_q8_K_ref: per 256 values, d = max / -127 with max the
 * signed value of largest magnitude, q = min(127, rint(x / d)). Kept here until
 * qtype.def grows a q8_K encoder. */
static void round_q8_k(const float *x, float *y, int64_t n)
{
	for (int64_t b = 0; b < n; b += 256) {
		float amax = 0.0f, max = 0.0f;
		for (int j = 0; j < 256; j++) {
			float ax = fabsf(x[b + j]);
			if (ax > amax) {
				amax = ax;
				max = x[b + j];
			}
		}
		if (amax == 0.0f) {
			memset(y + b, 0, 256 * sizeof *y);
			continue;
		}
		const float iscale = -127.0f / max;
		const float d = 1.0f / iscale;
		for (int j = 0; j < 256; j++) {
			long q = lrintf(iscale * x[b + j]);
			y[b + j] = d * (float)(q < 127 ? q : 127);
		}
	}
}

/* ggml's x86 quantize_row_q8_0 / q8_1 (AVX2 path, what llama.cpp's CPU build
 * runs): per 32 values id = 127 / amax, q = rint(x * id), d = fp16(amax / 127).
 * The reference encoder (qc_quant_row_Q8_0: id = 1 / d, roundf) picks a
 * different code now and then, which these random models amplify to 0.05
 * logits. With sdelta (q8_1) each block also gets s - d16 * sum q, where
 * s = fp16(d * sum q) with the unrounded float d, as ggml stores it; with
 * codes the int8 codes, their d16 and -128 * sum q are kept (int8 kernel). */
static void round_q8_x86(const float *x, float *y, double *sdelta, int8_t *codes, double *dcodes,
			 int32_t *xs, int64_t n)
{
	for (int64_t b = 0; b < n; b += 32) {
		float amax = 0.0f;
		for (int j = 0; j < 32; j++)
			amax = fmaxf(amax, fabsf(x[b + j]));
		const float d32 = amax / 127.0f;
		const float d = qc_fp16_to_f32(qc_f32_to_fp16(d32));
		const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
		int32_t sum = 0;
		for (int j = 0; j < 32; j++) {
			const float q = rintf(x[b + j] * id);
			sum += (int32_t)q;
			y[b + j] = d * q;
			if (codes)
				codes[b + j] = (int8_t)q;
		}
		if (codes) {
			dcodes[b / 32] = d;
			xs[b / 32] = -128 * sum;
		}
		if (sdelta) {
			const float s = qc_fp16_to_f32(qc_f32_to_fp16(d32 * (float)sum));
			sdelta[b / 32] = (double)s - (double)d * (double)sum;
		}
	}
}

#ifdef QC_X86
/* round_q8_x86 for the int8 kernel (codes, no sdelta) with the same IEEE
 * operations per element: |x| max (exact), x * id, round to nearest even. */
__attribute__((target("avx2,fma"))) static void round_q8_codes_avx2(const float *x, float *y,
								     int8_t *codes, double *dcodes,
								     int32_t *xs, int64_t n)
{
	const __m256 sign = _mm256_set1_ps(-0.0f);
	const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	for (int64_t b = 0; b < n; b += 32) {
		__m256 v[4], m;
		for (int j = 0; j < 4; j++)
			v[j] = _mm256_loadu_ps(x + b + 8 * j);
		m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
				  _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
		__m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
		h = _mm_max_ps(h, _mm_movehl_ps(h, h));
		h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
		const float amax = _mm_cvtss_f32(h);
		const float d = qc_fp16_to_f32(qc_f32_to_fp16(amax / 127.0f));
		const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
		__m256i qi[4], sum = _mm256_setzero_si256();
		for (int j = 0; j < 4; j++) {
			const __m256 q = _mm256_round_ps(_mm256_mul_ps(v[j], id),
							 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
			_mm256_storeu_ps(y + b + 8 * j, _mm256_mul_ps(_mm256_set1_ps(d), q));
			qi[j] = _mm256_cvtps_epi32(q);
			sum = _mm256_add_epi32(sum, qi[j]);
		}
		const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]),
						     _mm256_packs_epi32(qi[2], qi[3]));
		_mm256_storeu_si256((__m256i *)(void *)(codes + b), _mm256_permutevar8x32_epi32(p, order));
		__m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
		s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
		s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
		dcodes[b / 32] = d;
		xs[b / 32] = -128 * _mm_cvtsi128_si32(s4);
	}
}
#endif

/* Rounds x for weights of type wt into mm->xr (and codes for the int8 kernel).
 * Returns x itself when nothing is rounded. */
static const float *round_act(struct qc_matmul *mm, enum qc_type wt, const float *x,
			      int64_t n_in, int64_t n_tok, bool codes)
{
	const struct qc_type_traits *tt = &qc_types[wt];
	enum qc_type at;

	if (mm->ar != QC_ACT_ROUND_GGML || wt == QC_TYPE_F32)
		return x;
	if (tt->family == QC_FAMILY_FLOAT)
		at = wt;
	else if (tt->block_elems == 32)
		at = QC_TYPE_Q8_0;
	else if (tt->block_elems == 256)
		at = QC_TYPE_Q8_K;
	else
		return x;
	for (int64_t t = 0; t < n_tok; t++) {
		const float *src = x + t * n_in;
		float *dst = mm->xr + t * n_in;
		const int64_t nb = n_in / 32;
		if (at == QC_TYPE_Q8_K) {
			round_q8_k(src, dst, n_in);
#ifdef QC_X86
		} else if (at == QC_TYPE_Q8_0 && codes && mm->avx2) {
			round_q8_codes_avx2(src, dst, mm->xq + t * n_in, mm->xqd + t * nb, mm->xs + t * nb,
					    n_in);
#endif
		} else if (at == QC_TYPE_Q8_0) {
			round_q8_x86(src, dst, pairs_q8_1(wt) ? mm->sdelta + t * nb : NULL,
				     codes ? mm->xq + t * n_in : NULL, mm->xqd + t * nb,
				     mm->xs + t * nb, n_in);
		} else if (qc_types[at].quant_row) {
			qc_types[at].quant_row(src, mm->qbuf, n_in);
			qc_types[at].dequant_row(mm->qbuf, dst, n_in);
		} else {
			QC_WARN_ONCE("no activation encoder for %s weights: float activations", tt->name);
			return x;
		}
	}
	return mm->xr;
}

/* ---- jobs ------------------------------------------------------------------ */

void qc_matmul_prepare(struct qc_matmul *mm, const struct qc_mat *w, int64_t e, const float *x,
		       int64_t n_tok, float *y, int64_t ldy)
{
	const struct int8_type *i8 = mm->ar == QC_ACT_ROUND_GGML ? find_int8(w->type) : NULL;

	mm->w = w;
	mm->e = e;
	mm->n_tok = n_tok;
	mm->y = y;
	mm->ldy = ldy;
	mm->i8 = i8;
	mm->pack = i8 && mm->avx2 && i8->pack_simd ? i8->pack_simd : pack_generic;
	mm->dot16 = i8 && mm->vnni && n_tok < DOT16_MAX_TOK ? i8->dot16_vnni : NULL;
	mm->xa = round_act(mm, w->type, x, w->n_in, n_tok, i8 != NULL);
	mm->kind = float_kernel(w->type) ? MM_FLOAT : i8 ? MM_INT8 : MM_REF;
	mm->q81 = mm->xa == mm->xr && pairs_q8_1(w->type);
	for (int64_t i = 0; mm->kind == MM_REF && i < n_tok * w->n_in; i++)
		mm->xd[i] = (double)mm->xa[i];
}

/* f16 -> f32 through F16C: exact, the same values as qc_dequant_row_F16 for
 * every finite input (the scalar decoder held f16 decode at 2 tokens/s). */
#ifdef QC_X86
__attribute__((target("avx2,f16c"))) static void f16_row_f16c(const uint8_t *src, float *dst,
							       int64_t n)
{
	int64_t k = 0;
	for (; k + 8 <= n; k += 8) {
		prefetch_ahead(src + 2 * k, 4096);
		_mm256_storeu_ps(dst + k, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + 2 * k))));
	}
	if (k < n)
		qc_types[QC_TYPE_F16].dequant_row(src + 2 * k, dst + k, n - k);
}
#else
static void f16_row_f16c(const uint8_t *src, float *dst, int64_t n)
{
	qc_types[QC_TYPE_F16].dequant_row(src, dst, n);
}
#endif

static void rows_float(struct qc_matmul *mm, struct slot *s, int64_t r0, int64_t r1)
{
	const struct qc_mat *w = mm->w;
	const struct qc_type_traits *tt = &qc_types[w->type];
	const int64_t n = w->n_in;
	int64_t tb = TOK_L2 / (n * (int64_t)sizeof(float));
	tb = tb < FT ? FT : tb - tb % FT;

	for (int64_t t0 = 0; t0 < mm->n_tok; t0 += tb) {
		const int64_t t1 = t0 + tb < mm->n_tok ? t0 + tb : mm->n_tok;
		for (int64_t r = r0; r < r1; r += FR) {
			const int nr = r1 - r < FR ? (int)(r1 - r) : FR;
			const float *rows[FR];
			for (int i = 0; i < nr; i++) {
				const uint8_t *wr = qc_mat_row(w, mm->e, r + i);
				if (w->type == QC_TYPE_F32) {
					rows[i] = (const float *)(const void *)wr;
				} else {
					if (w->type == QC_TYPE_F16 && mm->avx2)
						f16_row_f16c(wr, s->ftile + i * n, n);
					else
						tt->dequant_row(wr, s->ftile + i * n, n);
					rows[i] = s->ftile + i * n;
				}
			}
			for (int64_t k0 = 0; k0 < n; k0 += KC) {
				const int64_t k1 = k0 + KC < n ? k0 + KC : n;
				for (int64_t t = t0; t < t1; t += FT) {
					const int nt = t1 - t < FT ? (int)(t1 - t) : FT;
					float out[FR * FT];
					mm->ftile(rows, nr, mm->xa + t * n, n, nt, k0, k1, n,
						  s->lanes + (t - t0) * FR * 16, out);
					for (int j = 0; k1 == n && j < nt; j++)
						for (int i = 0; i < nr; i++)
							mm->y[(t + j) * mm->ldy + r + i] = out[j * FR + i];
				}
			}
		}
	}
}

static void rows_int8(struct qc_matmul *mm, struct slot *s, int64_t r0, int64_t r1)
{
	const struct qc_mat *w = mm->w;
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
					mm->y[t * mm->ldy + r + i] = (float)acc[i];
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
					mm->y[(t + j) * mm->ldy + r + i] = (float)acc[j * IR + i];
		}
	}
}

static void rows_ref(struct qc_matmul *mm, struct slot *s, int64_t r0, int64_t r1)
{
	const struct qc_mat *w = mm->w;
	const struct qc_type_traits *tt = &qc_types[w->type];
	const int64_t nb = w->n_in / 32, n = w->n_in;
	const bool widen = mm->n_tok > 1;
	float *row = s->ftile;

	for (int64_t r = r0; r < r1; r++) {
		const uint8_t *wr = qc_mat_row(w, mm->e, r);
		tt->dequant_row(wr, row, n);
		for (int64_t i = 0; widen && i < n; i++)
			s->rowd[i] = (double)row[i];
		for (int64_t t = 0; t < mm->n_tok; t++) {
			const double *xt = mm->xd + t * n;
			double acc = widen ? mm->dot_dd(s->rowd, xt, n) : mm->dot_fd(row, xt, n);
			for (int64_t b = 0; mm->q81 && b < nb; b++)
				acc += (double)block_min(tt, wr, b) * mm->sdelta[t * nb + b];
			mm->y[t * mm->ldy + r] = (float)acc;
		}
	}
}

void qc_matmul_rows(struct qc_matmul *mm, int slot, int64_t r0, int64_t r1)
{
	struct slot *s = &mm->slots[slot];
	if (mm->kind == MM_FLOAT)
		rows_float(mm, s, r0, r1);
	else if (mm->kind == MM_INT8)
		rows_int8(mm, s, r0, r1);
	else
		rows_ref(mm, s, r0, r1);
}

/* ---- lifetime -------------------------------------------------------------- */

static bool cpu_has(bool avx512)
{
#ifdef QC_X86
	unsigned int eax, ebx, ecx = 0, edx;
	const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !f16c)
		return false;
	return !avx512 || (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
			   __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
			   __builtin_cpu_supports("avx512vnni"));
#else
	(void)avx512;
	return false;
#endif
}

void qc_matmul_free(struct qc_matmul *mm)
{
	if (!mm)
		return;
	for (int k = 0; mm->slots && k < mm->n_slots; k++) {
		free(mm->slots[k].ftile);
		free(mm->slots[k].lanes);
		free(mm->slots[k].rowd);
		free(mm->slots[k].pk);
		free(mm->slots[k].pkd);
		free(mm->slots[k].codes);
	}
	free(mm->slots);
	free(mm->xr);
	free(mm->xd);
	free(mm->sdelta);
	free(mm->xq);
	free(mm->xqd);
	free(mm->xs);
	free(mm->qbuf);
	free(mm);
}

int qc_matmul_new(int64_t max_in, int64_t max_tok, int n_slots, enum qc_act_round ar,
		  struct qc_matmul **out, struct qc_err *err)
{
	*out = NULL;
	if (max_in < 1 || max_tok < 1 || n_slots < 1)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "matmul sizes must be positive");
	struct qc_matmul *mm = calloc(1, sizeof *mm);
	if (!mm)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	const size_t in = (size_t)max_in, tok = (size_t)max_tok, nb = in / 32 + 1;
	mm->ar = ar;
	mm->max_in = max_in;
	mm->max_tok = max_tok;
	mm->n_slots = n_slots;
	mm->slots = calloc((size_t)n_slots, sizeof *mm->slots);
	mm->xr = malloc(tok * in * sizeof(float));
	mm->xd = malloc(tok * in * sizeof(double));
	mm->sdelta = malloc(tok * nb * sizeof(double));
	mm->xq = malloc(tok * in);
	mm->xqd = malloc(tok * nb * sizeof(double));
	mm->xs = malloc(tok * nb * sizeof(int32_t));
	mm->qbuf = malloc(in * 8 + 64);
	bool ok = mm->slots && mm->xr && mm->xd && mm->sdelta && mm->xq && mm->xqd && mm->xs &&
		  mm->qbuf;
	for (int k = 0; ok && k < n_slots; k++) {
		struct slot *s = &mm->slots[k];
		s->ftile = malloc((size_t)FR * in * sizeof(float));
		s->lanes = malloc((tok + FT) * FR * 16 * sizeof(float));
		s->rowd = malloc(in * sizeof(double));
		s->pk = malloc(nb * IR * 32);
		s->pkd = malloc(nb * IR * sizeof(double));
		s->codes = malloc(32);
		ok = s->ftile && s->lanes && s->rowd && s->pk && s->pkd && s->codes;
	}
	if (!ok) {
		qc_matmul_free(mm);
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1,
				  "out of memory for matmul buffers (%lld x %lld)", (long long)max_tok,
				  (long long)max_in);
	}
	pthread_once(&f16_once, fill_f16_table);
	mm->ftile = ftile_generic;
	mm->itile = itile_generic;
	mm->dot_dd = dot_dd_generic;
	mm->dot_fd = dot_fd_generic;
#ifdef QC_X86
	if (cpu_has(false)) {
		mm->avx2 = true;
		mm->ftile = ftile_avx2;
		mm->dot_dd = dot_dd_avx2;
		mm->dot_fd = dot_fd_avx2;
	}
	if (cpu_has(true)) {
		mm->vnni = true;
		mm->ftile = ftile_avx2vl;
		mm->itile = itile_vnni;
	}
#endif
	*out = mm;
	return QC_OK;
}
