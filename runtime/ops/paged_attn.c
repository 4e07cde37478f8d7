/* paged_attn.c — reference of runtime/cuda/kernels/paged_attn.cu, and the CPU
 * backend's attention: for each token and head, softmax(q . k_j * scale) over
 * positions 0..pos of its sequence (K/V found through the block table), times V;
 * optionally soft-capped scores and a sliding window (Gemma 2, Phi-3, Mistral,
 * Qwen2), whose positions before it are never read (their blocks may be released).
 * Dots in double with four partial sums (the CPU backend's order, which its
 * llama.cpp comparisons were measured with), softmax sum in double, the ·V sum
 * in float. QC_REF_ATTN_F16 rounds q and the softmax weights to binary16 first,
 * as ggml's mul_mat does against an f16 cache (llama.cpp's CPU numbers). On an
 * fp8 pool q is then rotated as its K rows were (qc_ref_kv_rotate).
 * On a float pool with QC_REF_ATTN_F16 and head_dim a multiple of 8 the whole token
 * is computed as llama.cpp's AVX2/FMA CPU build computes it, bit for bit: q.k and P.V
 * as llamafile's tinyBLAS f16 tiles (8 fma lanes, k mod 8, then hsum) when the sequence
 * has 2 or more tokens in the batch, else (tinyBLAS skips n < 2) as ggml_vec_dot_f16
 * (4 x 8 fma lanes over 32, reduced, leftovers in double); the softmax as
 * ggml_vec_soft_max_f32 (ggml_v_expf on 8 values at a time, each 8-sum added in
 * double). On a trained model (SmolLM2, docs/accuracy.md) a last-bit difference in P
 * flips its binary16 rounding and, a few layers on, logits by 0.1.
 * Reference: ggml soft_max (double sum), llama.cpp llm_build_kqv, ggml-cpu.c
 * ggml_v_expf / ggml_vec_soft_max_f32, llamafile sgemm.cpp tinyBLAS. */
#include <math.h>
#include <string.h>

#include "expf_ggml.h"
#include "fp16.h"
#include "ops.h"
#include "qc_err.h"

/* Exact products (24-bit x 24-bit mantissas fit a double) in four running sums,
 * combined pairwise. */
static double dot(const float *a, const float *b, int64_t n)
{
	double acc[4] = {0};
	int64_t i = 0;
	for (; i + 4 <= n; i += 4)
		for (int j = 0; j < 4; j++)
			acc[j] += (double)a[i + j] * (double)b[i + j];
	for (; i < n; i++)
		acc[0] += (double)a[i] * (double)b[i];
	return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/* The ggml-order helpers are inlined into both builds of attn_head_ggml (below):
 * the FMA one must see their fmaf calls. */
#define QC_INLINE inline __attribute__((always_inline))

static float f16_round(float x)
{
	return qc_fp16_to_f32(qc_f32_to_fp16(x));
}

/* x[0..n) rounded through binary16 in place. */
typedef void (*round_f16_fn)(float *x, int32_t n);

static void round_f16_sw(float *x, int32_t n)
{
	for (int32_t i = 0; i < n; i++)
		x[i] = f16_round(x[i]);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#include <stdbool.h>

/* FMA and F16C, asked once: cpuid traps to the hypervisor on a VM, too slow for
 * every head, and clang's __builtin_cpu_supports knows no "f16c". The relaxed
 * atomic makes the benign race (every thread stores the same answer) defined. */
static bool cpu_fma_f16c(void)
{
	static _Atomic int known; /* 0: not asked yet, 1: both, 2: not both */
	int k = atomic_load_explicit(&known, memory_order_relaxed);
	if (!k) {
		unsigned int eax, ebx, ecx = 0, edx;
		const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
		k = __builtin_cpu_supports("fma") && f16c ? 1 : 2;
		atomic_store_explicit(&known, k, memory_order_relaxed);
	}
	return k == 1;
}

/* The same with F16C, 8 at a time: round to nearest even, subnormals kept, as
 * qc_f32_to_fp16 (NaN payloads aside: the softmax weights have none). The
 * software conversion's branches were a tenth of a SmolLM2 prefill. */
static __attribute__((target("avx,f16c"))) void round_f16_f16c(float *x, int32_t n)
{
	int32_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
	for (; i < n; i++)
		x[i] = f16_round(x[i]);
}
#endif

/* The hd values of the K (which 0) or V (1) row of position j, kv head offset
 * kvo, as floats in dst (binary16 or fp8 pool) or in place (float pool). fp8:
 * e4m3(code) * 2^exp is exact in float (a code has 4 significant bits). */
static const float *kv_row(const struct qc_ref_kv_pool *p, int layer, const int32_t *table, int32_t j,
			   int which, int64_t kvo, int hd, float *dst)
{
	const int64_t b = table[j / p->bt], off = j % p->bt;
	/* a released column (kv_blocks.h QC_KV_BLOCK_DROPPED) lies before every
	   window that can read it: reaching one is a bug, not a read of garbage */
	QC_ASSERT(b >= 0);
	const int64_t row = ((b * p->n_layer + layer) * 2 + which) * p->bt + off;
	const int64_t at = row * p->kv_dim + kvo;
	if (p->f32)
		return p->f32 + at;
	if (p->e4m3) {
		const float s = ldexpf(1.0f, p->e4m3_exp[row * (p->kv_dim / hd) + kvo / hd]);
		for (int d = 0; d < hd; d++)
			dst[d] = qc_e4m3_to_f32(p->e4m3[at + d]) * s;
		return dst;
	}
	for (int d = 0; d < hd; d++)
		dst[d] = qc_fp16_to_f32(p->f16[at + d]);
	return dst;
}

/* ggml soft_max: max, exp(x - max) summed in double, scaled by 1/sum. */
static void softmax(float *x, int64_t n)
{
	float mx = -INFINITY;
	for (int64_t i = 0; i < n; i++)
		mx = x[i] > mx ? x[i] : mx;
	double sum = 0.0;
	for (int64_t i = 0; i < n; i++) {
		x[i] = expf(x[i] - mx);
		sum += (double)x[i];
	}
	const float inv = (float)(1.0 / sum);
	for (int64_t i = 0; i < n; i++)
		x[i] *= inv;
}

/* x86 hsum of 8 lanes (hsum_float_8, tinyBLAS hsum): high half + low half, then
 * (0 + 2) + (1 + 3). */
static QC_INLINE float hsum8(const float *a)
{
	float h[4];
	for (int j = 0; j < 4; j++)
		h[j] = a[j + 4] + a[j];
	return (h[0] + h[2]) + (h[1] + h[3]);
}

/* ggml_compute_forward_soft_max_f32 on AVX2/FMA: max, ggml_v_expf 8 at a time
 * (positions past n count as exp(-inf) = 0, as llama.cpp's padded, masked n_kv),
 * each 8-sum added in double, scaled by (float)(1 / sum). */
static QC_INLINE void softmax_ggml(float *x, int64_t n)
{
	float mx = -INFINITY;
	for (int64_t i = 0; i < n; i++)
		mx = x[i] > mx ? x[i] : mx;
	double sum = 0.0;
	for (int64_t c = 0; c < n; c += 8) {
		float v[8] = {0};
		for (int64_t i = c; i < c + 8 && i < n; i++)
			x[i] = v[i - c] = qc_expf_ggml_inline(x[i] - mx);
		sum += (double)hsum8(v);
	}
	const float inv = (float)(1.0 / sum);
	for (int64_t i = 0; i < n; i++)
		x[i] *= inv;
}

/* tinyBLAS's f16 dot as llama.cpp's AVX2 build runs q.k: 8 fma lanes, then hsum8. */
static QC_INLINE float dot_lanes8(const float *a, const float *b, int n)
{
	float acc[8] = {0};
	for (int i = 0; i < n; i += 8)
#pragma GCC unroll 8
		for (int l = 0; l < 8; l++)
			acc[l] = fmaf(a[i + l], b[i + l], acc[l]);
	return hsum8(acc);
}

/* ggml_vec_dot_f16's AVX2 reduction of its 4 x 8 lanes (GGML_F32x8_REDUCE): 0 += 2,
 * 1 += 3, 0 += 1, then low half + high half and two horizontal adds. */
static QC_INLINE float reduce32(float acc[4][8])
{
	float t[4];
	for (int l = 0; l < 8; l++) {
		acc[0][l] = acc[0][l] + acc[2][l];
		acc[1][l] = acc[1][l] + acc[3][l];
		acc[0][l] = acc[0][l] + acc[1][l];
	}
	for (int l = 0; l < 4; l++)
		t[l] = acc[0][l] + acc[0][l + 4];
	return (t[0] + t[1]) + (t[2] + t[3]);
}

/* ggml_vec_dot_f16 (AVX2): element i in lane i mod 8 of accumulator (i mod 32) / 8,
 * fma; the reduced float then the n mod 32 leftovers' float products in double. */
static QC_INLINE float dot_vec_f16(const float *a, const float *b, int n)
{
	float acc[4][8] = {{0}};
	const int np = n & ~31;
	for (int i = 0; i < np; i += 32)
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++)
#pragma GCC unroll 8
			for (int l = 0; l < 8; l++)
				acc[c][l] = fmaf(a[i + 8 * c + l], b[i + 8 * c + l], acc[c][l]);
	double s = reduce32(acc);
	for (int i = np; i < n; i++)
		s += (double)(a[i] * b[i]);
	return (float)s;
}

/* One head as llama.cpp's AVX2/FMA CPU build (float pool, hd % 8 == 0). P.V runs
 * over llama.cpp's padded n_kv (a multiple of 32): the zero weights past n_ctx add
 * nothing to any lane, and there are no leftovers. */
static QC_INLINE void attn_head_ggml(const struct qc_ref_attn_args *a, const float *qh, float *o, int32_t j0,
				      int32_t n_all, int64_t kvo, const int32_t *table, float *sc,
				      round_f16_fn round_p)
{
	/* positions before the window stay in the rows as -inf (ggml's mask), so the
	   8-lane sums group the same indices as llama.cpp's: exp(-inf) adds 0 */
	const int hd = a->hd, tiles = a->n_seq_tokens >= 2;
	for (int32_t j = 0; j < n_all; j++) {
		if (j < j0) {
			sc[j] = -INFINITY;
			continue;
		}
		const float *k = kv_row(&a->pool, a->layer, table, j, 0, kvo, hd, NULL);
		sc[j] = (tiles ? dot_lanes8(qh, k, hd) : dot_vec_f16(qh, k, hd)) * a->scale;
		if (a->softcap > 0.0f)
			sc[j] = qc_ref_softcap1(sc[j], a->softcap);
	}
	softmax_ggml(sc, n_all);
	round_p(sc, n_all);
	/* each (d, lane) accumulator sums over j in increasing order, as llama.cpp's
	   does; j runs outside so each V row is found once, not once per d, and the
	   accumulators of one lane lie along d, so a row's products are 8-wide fmas */
	float acc[4][8][hd];
	memset(acc, 0, sizeof acc);
	for (int32_t j = j0; j < n_all; j++) {
		float *ac = acc[tiles ? 0 : (j % 32) / 8][j % 8];
		const float p = sc[j];
		const float *v = kv_row(&a->pool, a->layer, table, j, 1, kvo, hd, NULL);
		for (int d = 0; d < hd; d += 8)
#pragma GCC unroll 8
			for (int l = 0; l < 8; l++)
				ac[d + l] = fmaf(p, v[d + l], ac[d + l]);
	}
	for (int d = 0; d < hd; d++) {
		float lanes[4][8];
		for (int r = 0; r < 4; r++)
			for (int l = 0; l < 8; l++)
				lanes[r][l] = acc[r][l][d];
		o[d] = tiles ? hsum8(lanes[0]) : reduce32(lanes);
	}
}

/* attn_head_ggml twice: compiled for FMA (x86-64 with the instruction: every fmaf
 * above becomes one vfmadd, 8 lanes wide where the loops allow, and the softmax
 * weights are rounded by F16C) and plain (fmaf through libm). fmaf is one correctly
 * rounded operation either way, so the two give the same bits; the FMA build only
 * stops paying a library call per product (42% of a SmolLM2 decode step was
 * attention, most of it in libm's fmaf: docs/bench.md). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
static __attribute__((target("fma"))) void attn_head_ggml_fma(const struct qc_ref_attn_args *a, const float *qh,
								 float *o, int32_t j0, int32_t n_all, int64_t kvo,
								 const int32_t *table, float *sc)
{
	attn_head_ggml(a, qh, o, j0, n_all, kvo, table, sc, round_f16_f16c);
}

#endif

static void attn_head_ggml_any(const struct qc_ref_attn_args *a, const float *qh, float *o, int32_t j0,
			       int32_t n_all, int64_t kvo, const int32_t *table, float *sc)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
	if (cpu_fma_f16c()) {
		attn_head_ggml_fma(a, qh, o, j0, n_all, kvo, table, sc);
		return;
	}
#endif
	attn_head_ggml(a, qh, o, j0, n_all, kvo, table, sc, round_f16_sw);
}

void qc_ref_attn_token(const struct qc_ref_attn_args *a, const float *q, float *out, int32_t pos,
		       const int32_t *table, float *scratch)
{
	qc_ref_attn_token_heads(a, q, out, pos, table, scratch, 0, a->n_head);
}

void qc_ref_attn_token_heads(const struct qc_ref_attn_args *a, const float *q, float *out, int32_t pos,
			     const int32_t *table, float *scratch, int h0, int h1)
{
	const int hd = a->hd, group = a->n_head / a->n_head_kv;
	const int32_t j0 = a->window > 0 && pos >= a->window ? pos - a->window + 1 : 0;
	const int32_t n_ctx = pos + 1 - j0;
	const int r16 = a->round == QC_REF_ATTN_F16;
	const int ggml = r16 && a->pool.f32 && hd % 8 == 0;
	float *qh = scratch, *row = scratch + hd, *sc = scratch + 2 * hd;

	for (int h = h0; h < h1; h++) {
		const float *qs = q + (int64_t)h * hd;
		float *o = out + (int64_t)h * hd;
		const int64_t kvo = (int64_t)(h / group) * hd;
		for (int d = 0; d < hd; d++)
			qh[d] = r16 ? f16_round(qs[d]) : qs[d];
		if (a->pool.e4m3) /* its K rows are rotated: H q . H k = q . k */
			qc_ref_kv_rotate(qh, hd);
		if (ggml) {
			attn_head_ggml_any(a, qh, o, j0, pos + 1, kvo, table, sc);
			continue;
		}
		for (int32_t j = 0; j < n_ctx; j++) {
			sc[j] = (float)dot(qh, kv_row(&a->pool, a->layer, table, j0 + j, 0, kvo, hd, row), hd) * a->scale;
			if (a->softcap > 0.0f)
				sc[j] = qc_ref_softcap1(sc[j], a->softcap);
		}
		softmax(sc, n_ctx);
		for (int d = 0; d < hd; d++)
			o[d] = 0.0f;
		for (int32_t j = 0; j < n_ctx; j++) {
			const float p = r16 ? f16_round(sc[j]) : sc[j];
			const float *v = kv_row(&a->pool, a->layer, table, j0 + j, 1, kvo, hd, row);
			for (int d = 0; d < hd; d++)
				o[d] += p * v[d];
		}
	}
}

void qc_ref_paged_attn(const float *q, float *out, const uint16_t *pool, int layer, int n_layer,
		       int bt, int n_head, int n_head_kv, int hd, const int32_t *pos,
		       const int32_t *tok_seq, const int32_t *tables, int stride, int64_t n_tok,
		       float scale)
{
	const struct qc_ref_attn_args a = {
		.pool = {.f16 = pool, .n_layer = n_layer, .bt = bt, .kv_dim = n_head_kv * hd},
		.layer = layer, .n_head = n_head, .n_head_kv = n_head_kv, .hd = hd, .scale = scale,
		.round = QC_REF_ATTN_F32,
	};
	const int64_t q_dim = (int64_t)n_head * hd;
	for (int64_t t = 0; t < n_tok; t++) {
		float scratch[2 * hd + pos[t] + 1];
		qc_ref_attn_token(&a, q + t * q_dim, out + t * q_dim, pos[t], tables + (int64_t)tok_seq[t] * stride,
				  scratch);
	}
}
