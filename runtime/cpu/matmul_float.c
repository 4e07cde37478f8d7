/* matmul_float.c — the CPU matmul's float kernel: f32/f16 weights, float lanes.
 *
 * Rows decoded to float once per tile of FR rows (f32 read in place, f16 through
 * F16C), dotted with FT tokens at a time, k in chunks of KC; each dot is 16 float
 * lanes (lane = k mod 16, zero-padded tail) of fused multiply-adds, then a fixed
 * tree. As ggml (float sums); no activation rounding beyond the weight type's.
 * Not bf16: its 8-bit activation rounding turns float-ulp differences into flips;
 * with float sums stories260K-BF16 left llama.cpp by 1.3e-2 logits (measured), past
 * the 5e-3 that double sums keep (matmul_ref.c).
 * The AVX2+FMA and AVX-512VL clones do the same IEEE operations, bit for bit.
 * Reference: llamafile sgemm's tiling idea (tinyBLAS: register tiles of rows x tokens).
 */
#include "matmul_cpu_int.h"

#include <math.h>

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
void qc_matmul_ftile_generic(const float *const *w, int nr, const float *x, int64_t ldx, int nt,
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
__attribute__((target(F512_TARGET))) void
qc_matmul_ftile_avx2vl(const float *const *w, int nr, const float *x, int64_t ldx, int nt,
		       int64_t k0, int64_t k1, int64_t n, float *lanes, float *out)
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

__attribute__((target("avx2,fma"))) void
qc_matmul_ftile_avx2(const float *const *w, int nr, const float *x, int64_t ldx, int nt,
		     int64_t k0, int64_t k1, int64_t n, float *lanes, float *out)
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

bool qc_matmul_float_kernel(enum qc_type t)
{
	for (size_t i = 0; i < sizeof float_types / sizeof float_types[0]; i++)
		if (float_types[i] == t)
			return true;
	return false;
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

void qc_matmul_rows_float(struct qc_matmul *mm, const struct mm_part *p, struct slot *s, int64_t r0,
			  int64_t r1)
{
	const struct qc_mat *w = p->w;
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
							p->y[(t + j) * p->ldy + r + i] = out[j * FR + i];
				}
			}
		}
	}
}
