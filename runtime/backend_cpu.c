/* backend_cpu.c — the plain-C backend: llama forward over a scheduler plan.
 *
 * Owns: the float K/V pool (n_blocks blocks, each [layer][K,V][token][kv_dim]
 * floats, values rounded through binary16 as llama.cpp's f16 cache stores them)
 * and the activation buffers, all sized once at create.
 * Matmul: each weight row is decoded once through qc_types[t].dequant_row and
 * dotted with every token of the batch, so a row's result never depends on the
 * batch it ran in (batched == alone, bit for bit). With QC_ACT_ROUND_GGML the
 * activations are first rounded as ggml's x86 CPU vec_dot_type would (f16/bf16
 * for those weights, q8_0 for 32-element blocks, q8_K for 256-element
 * super-blocks), Q·K uses f16-rounded Q and the softmax weights are f16-rounded
 * before ·V, as ggml's mul_mat does with an f16 cache. q4_1/q5_1 pair with
 * q8_1, whose block also stores s = fp16(d * sum q); ggml's dot adds m * s, so
 * the engine adds m * (s - d16 * sum q) per block to the decoded-value dot.
 * Dots: double sums of exact float products in 16 fixed lanes (AVX2 clones
 * picked at run time compute the same IEEE operations as the portable code);
 * q8_0 weights x q8_0 codes use exact integer block sums. Weight rows are
 * software-prefetched.
 * Threads: each matmul's output rows are split into n_threads contiguous ranges,
 * one per thread of a pool made at create (the caller runs range 0); every
 * output is computed by exactly the same code whatever thread runs it, so
 * results are bit-identical for any thread count. Everything else runs on the
 * caller's thread.
 * Non-goals: SIMD intrinsics, flash attention.
 * Reference: llama.cpp c392e50 build_llama, llm_build_kqv, llm_build_moe_ffn;
 * ggml rms_norm (double sum), rope NORM/NEOX cache (theta *= base^(-2/n_rot)), silu.
 */
#include "backend.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "qblock.h"
#include "ref/fp16.h"

struct cpu;

/* sum of a[i] * b[i] over n doubles (see dot_dd_body) */
typedef double (*dot_dd_fn)(const double *a, const double *b, int64_t n);
/* the same with a as floats (dot_fd_body) */
typedef double (*dot_fd_fn)(const float *a, const double *b, int64_t n);
/* q8_0 weight blocks . q8_0 activation codes (dot_q8_body) */
typedef double (*dot_q8_fn)(const struct qc_block_Q8_0 *w, const int8_t *xq, const float *xd,
			    int64_t nb);

/* One matmul, split by output rows across the pool. */
struct mm_job {
	const struct qc_mat *w;
	int64_t e;                    /* expert index */
	const float *xa;              /* (n_rows, w->n_in) activations, rounded */
	int64_t n_rows;
	float *y;                     /* y[t * ldy + r] */
	int64_t ldy;
	bool q81;                     /* add the q8_1 block-sum correction */
	bool q8;                      /* q8_0 weights x q8_0 codes (xq, xqd) */
};

struct worker {
	struct cpu *c;
	int idx;                      /* 1..n_threads-1; range 0 is the caller's */
	pthread_t th;
	bool started;
};

struct cpu {
	const struct qc_model *m;
	struct qc_backend_params p;
	int64_t kv_dim, q_dim, max_in;
	size_t block_floats;          /* floats per K/V block */
	float *kv;                    /* (n_blocks, n_layer, 2, block_tokens, kv_dim) */
	float *x, *xn;                /* (max_tokens, n_embd) residual / normed */
	float *q, *k, *v, *att;       /* (max_tokens, q_dim | kv_dim) */
	float *fa, *fb;               /* (max_tokens, n_ff) gate / up */
	float *xr;                    /* (max_tokens, max_in) rounded activations */
	double *sdelta;               /* (max_tokens, max_in / 32) q8_1 blocks: s - d16 * sum q */
	int8_t *xq;                   /* (max_tokens, max_in) q8_0 activation codes */
	float *xqd;                   /* (max_tokens, max_in / 32) their d16 */
	uint8_t *qbuf;                /* one quantized activation row */
	float *row;                   /* (n_threads, max_in) one decoded weight row per thread */
	double *rowd;                 /* (n_threads, max_in) the same row widened */
	double *xd;                   /* (max_tokens * n_expert_used, max_in) activations widened */
	/* pool: workers spin a while, then sleep on go, until gen changes; run
	 * their range of job; count pending down. The caller spins (yielding after
	 * a while) until pending is 0. A wake through the condition variable alone
	 * cost ~70 us per matmul on the development VM. */
	struct worker *workers;       /* (n_threads - 1) */
	pthread_mutex_t mu;           /* guards n_sleep and the sleep/wake handshake */
	pthread_cond_t go;
	bool pool_init;
	int n_sleep;                  /* workers blocked on go */
	_Atomic uint64_t gen;         /* bumped once per dispatched job (and at quit) */
	_Atomic int pending;          /* ranges not yet finished */
	_Atomic bool quit;
	struct mm_job job;
	dot_dd_fn dot_dd;             /* chosen once at create */
	dot_fd_fn dot_fd;
	dot_q8_fn dot_q8;
	float *scores;                /* (max_ctx) attention weights */
	float *qh;                    /* (head_dim) rounded query */
	/* MoE */
	float *router;                /* (max_tokens, n_expert) */
	int32_t *sel;                 /* (max_tokens, n_expert_used) */
	float *selw;                  /* (max_tokens, n_expert_used) */
	int32_t *etok;                /* (max_tokens * n_expert_used) token of each gathered row */
	int32_t *eslot;
	float *ex, *eout;             /* (max_tokens, n_embd) gathered input / expert output */
	float *moe;                   /* (max_tokens, n_expert_used, n_embd) */
	float *lx;                    /* (max_logits, n_embd) rows that need logits */
};

/* ---- leaf math ----------------------------------------------------------- */

/* Double accumulation: ggml's quantized dots sum exact integer products per
 * block, so its results sit closer to the exact sum than a float running sum;
 * with float sums, one-ulp differences flip later 8-bit activation roundings
 * and a random tiny model amplifies that to 0.1 logits (measured). */
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

/* Weight rows stream from the mapped file once per token; this machine's
 * hardware prefetch did not keep up (q8_0 decode 17 tokens/s without, 51 at
 * 3 KiB ahead, 57 at 16 KiB: consecutive rows are contiguous).
 * A prefetch never faults, so running past the end of the row is harmless;
 * the address is formed as an integer to stay clear of pointer-overflow UB. */
static inline void prefetch_ahead(const void *p, size_t bytes)
{
	__builtin_prefetch((const void *)((uintptr_t)p + bytes));
}

/* Matmul dot of float values held as doubles: the products are exact (24-bit
 * mantissas), summed in 16 lanes (lane k takes i = k mod 16, plus the tail in
 * lane 0) combined by a fixed tree. Every build computes exactly these IEEE
 * operations (a fused multiply-add equals multiply-then-add here, the product
 * being exact), so the AVX2 clone and the portable one agree bit for bit. */
typedef double v4d __attribute__((vector_size(32)));

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

/* The same sums with a given as floats (widened exactly in the loop): one
 * token against a weight row needs no widened copy of the row. */
typedef float v4f __attribute__((vector_size(16)));

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

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) static double dot_fd_avx2(const float *a, const double *b,
							      int64_t n)
{
	return dot_fd_body(a, b, n);
}

__attribute__((target("avx2,fma"))) static double dot_dd_avx2(const double *a, const double *b,
							      int64_t n)
{
	return dot_dd_body(a, b, n);
}
#endif

static double dot_dd_generic(const double *a, const double *b, int64_t n)
{
	return dot_dd_body(a, b, n);
}

static double dot_fd_generic(const float *a, const double *b, int64_t n)
{
	return dot_fd_body(a, b, n);
}

static bool have_avx2(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
	return false;
#endif
}

static dot_fd_fn pick_dot_fd(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (have_avx2())
		return dot_fd_avx2;
#endif
	return dot_fd_generic;
}

static dot_dd_fn pick_dot_dd(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (have_avx2())
		return dot_dd_avx2;
#endif
	return dot_dd_generic;
}

/* qc_fp16_to_f32 of every binary16 pattern (ggml keeps the same table),
 * filled once by the first cpu_create. */
static float qc_f16_table[1 << 16];
static pthread_once_t qc_f16_once = PTHREAD_ONCE_INIT;

static void fill_f16_table(void)
{
	for (uint32_t h = 0; h < (1u << 16); h++)
		qc_f16_table[h] = qc_fp16_to_f32((uint16_t)h);
}

/* q8_0 weight blocks . q8_0 activation codes: exact integer block sums, each
 * times d_w * d_x (exact in double), summed in double over blocks in 4 lanes
 * (lane b mod 4) then (l0 + l1) + (l2 + l3). This is the
 * decoded-value dot with the rounding moved to the block sums; any build
 * computes the same IEEE operations. */
/* Block b's term: exact integer sum times d_w * d_x, all exact in double. */
static inline __attribute__((always_inline)) double q8_block(const struct qc_block_Q8_0 *w,
							     const int8_t *xq, const float *xd,
							     int64_t b)
{
	const int8_t *a = w[b].qs, *x = xq + b * 32;
	int32_t isum = 0;
	prefetch_ahead(w + b, 16384);
	for (int k = 0; k < 32; k++)
		isum += (int32_t)a[k] * (int32_t)x[k];
	return (double)qc_f16_table[w[b].d] * (double)xd[b] * (double)isum;
}

static inline __attribute__((always_inline)) double dot_q8_body(const struct qc_block_Q8_0 *w,
								const int8_t *xq, const float *xd,
								int64_t nb)
{
	double l0 = 0.0, l1 = 0.0, l2 = 0.0, l3 = 0.0; /* lane b mod 4 */
	int64_t b = 0;
	for (; b + 4 <= nb; b += 4) {
		l0 += q8_block(w, xq, xd, b);
		l1 += q8_block(w, xq, xd, b + 1);
		l2 += q8_block(w, xq, xd, b + 2);
		l3 += q8_block(w, xq, xd, b + 3);
	}
	if (b < nb)
		l0 += q8_block(w, xq, xd, b++);
	if (b < nb)
		l1 += q8_block(w, xq, xd, b++);
	if (b < nb)
		l2 += q8_block(w, xq, xd, b++);
	return (l0 + l1) + (l2 + l3);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) static double dot_q8_avx2(const struct qc_block_Q8_0 *w,
							      const int8_t *xq, const float *xd,
							      int64_t nb)
{
	return dot_q8_body(w, xq, xd, nb);
}
#endif

static double dot_q8_generic(const struct qc_block_Q8_0 *w, const int8_t *xq, const float *xd,
			     int64_t nb)
{
	return dot_q8_body(w, xq, xd, nb);
}

static dot_q8_fn pick_dot_q8(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (have_avx2())
		return dot_q8_avx2;
#endif
	return dot_q8_generic;
}

static float f16_round(float x)
{
	return qc_fp16_to_f32(qc_f32_to_fp16(x));
}

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
 * codes/dcodes the int8 codes and d16 are kept too (the q8_0 x q8_0 path). */
static void round_q8_x86(const float *x, float *y, double *sdelta, int8_t *codes, float *dcodes,
			 int64_t n)
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
		if (dcodes)
			dcodes[b / 32] = d;
		if (sdelta) {
			const float s = qc_fp16_to_f32(qc_f32_to_fp16(d32 * (float)sum));
			sdelta[b / 32] = (double)s - (double)d * (double)sum;
		}
	}
}

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

/* Activation rounding for weights of type wt (see the header). Returns x itself
 * when nothing is rounded, else c->xr. */
static const float *round_act(struct cpu *c, enum qc_type wt, const float *x, int64_t n_in,
			      int64_t n_rows)
{
	const struct qc_type_traits *tt = &qc_types[wt];
	enum qc_type at;

	if (c->p.act_round != QC_ACT_ROUND_GGML || wt == QC_TYPE_F32)
		return x;
	if (tt->family == QC_FAMILY_FLOAT)
		at = wt;
	else if (tt->block_elems == 32)
		at = QC_TYPE_Q8_0;
	else if (tt->block_elems == 256)
		at = QC_TYPE_Q8_K;
	else
		return x;
	for (int64_t t = 0; t < n_rows; t++) {
		const float *src = x + t * n_in;
		float *dst = c->xr + t * n_in;
		if (at == QC_TYPE_Q8_K) {
			round_q8_k(src, dst, n_in);
		} else if (at == QC_TYPE_Q8_0) {
			const bool codes = wt == QC_TYPE_Q8_0;
			round_q8_x86(src, dst, pairs_q8_1(wt) ? c->sdelta + t * (n_in / 32) : NULL,
				     codes ? c->xq + t * n_in : NULL, codes ? c->xqd + t * (n_in / 32) : NULL,
				     n_in);
		} else if (qc_types[at].quant_row) {
			qc_types[at].quant_row(src, c->qbuf, n_in);
			qc_types[at].dequant_row(c->qbuf, dst, n_in);
		} else {
			QC_WARN_ONCE("no activation encoder for %s weights: float activations", tt->name);
			return x;
		}
	}
	return c->xr;
}

/* Rows [r0, r1) of job j, decoding into row (one thread's buffer). */
static void matmul_rows(const struct cpu *c, const struct mm_job *j, int64_t r0, int64_t r1,
			float *row, double *rowd)
{
	const struct qc_mat *w = j->w;
	const struct qc_type_traits *tt = &qc_types[w->type];
	const int64_t nb = w->n_in / 32, n_in = w->n_in;
	const dot_dd_fn dd = c->dot_dd;
	const dot_fd_fn fd = c->dot_fd;
	const bool raw = w->type == QC_TYPE_F32; /* f32 rows need no decoding */
	const bool widen = j->n_rows > 1;

	if (j->q8) {
		for (int64_t r = r0; r < r1; r++) {
			const struct qc_block_Q8_0 *wb = (const void *)qc_mat_row(w, j->e, r);
			for (int64_t t = 0; t < j->n_rows; t++)
				j->y[t * j->ldy + r] =
					(float)c->dot_q8(wb, c->xq + t * n_in, c->xqd + t * nb, nb);
		}
		return;
	}
	for (int64_t r = r0; r < r1; r++) {
		const uint8_t *wr = qc_mat_row(w, j->e, r);
		const float *rf = row;
		if (raw)
			rf = (const float *)(const void *)wr;
		else
			tt->dequant_row(wr, row, n_in);
		for (int64_t i = 0; widen && i < n_in; i++)
			rowd[i] = (double)rf[i];
		for (int64_t t = 0; t < j->n_rows; t++) {
			const double *xt = c->xd + t * n_in;
			double acc = widen ? dd(rowd, xt, n_in) : fd(rf, xt, n_in);
			for (int64_t b = 0; j->q81 && b < nb; b++)
				acc += (double)block_min(tt, wr, b) * c->sdelta[t * nb + b];
			j->y[t * j->ldy + r] = (float)acc;
		}
	}
}

/* Range k of n_threads over the job's output rows. */
static void run_range(struct cpu *c, int k)
{
	const int64_t n = c->job.w->n_out, nt = c->p.n_threads;
	const size_t off = (size_t)k * (size_t)c->max_in;
	matmul_rows(c, &c->job, n * k / nt, n * (k + 1) / nt, c->row + off, c->rowd + off);
}

#define SPIN_ITERS 20000

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void *worker_main(void *arg)
{
	struct worker *wk = arg;
	struct cpu *c = wk->c;
	uint64_t seen = 0;

	for (;;) {
		uint64_t g;
		int spins = 0;
		while ((g = atomic_load_explicit(&c->gen, memory_order_acquire)) == seen) {
			if (++spins < SPIN_ITERS) {
				cpu_relax();
				continue;
			}
			pthread_mutex_lock(&c->mu);
			c->n_sleep++;
			while (atomic_load_explicit(&c->gen, memory_order_acquire) == seen)
				pthread_cond_wait(&c->go, &c->mu);
			c->n_sleep--;
			pthread_mutex_unlock(&c->mu);
			spins = 0;
		}
		seen = g;
		if (atomic_load_explicit(&c->quit, memory_order_acquire))
			break;
		run_range(c, wk->idx);
		atomic_fetch_sub_explicit(&c->pending, 1, memory_order_release);
	}
	return NULL;
}

/* Bump gen (publishing job / quit) and wake sleeping workers. */
static void pool_kick(struct cpu *c)
{
	atomic_fetch_add_explicit(&c->gen, 1, memory_order_release);
	pthread_mutex_lock(&c->mu);
	if (c->n_sleep)
		pthread_cond_broadcast(&c->go);
	pthread_mutex_unlock(&c->mu);
}

/* Below this many multiply-adds a matmul stays on the caller's thread: waking
 * the pool costs more (the split does not change any result either way). */
#define MT_MIN_MACS (1 << 16)

/* y[t*ldy + r] = W_e[r] . x[t] for n_rows tokens (x rows are w->n_in long). */
static void matmul(struct cpu *c, const struct qc_mat *w, int64_t e, const float *x,
		   int64_t n_rows, float *y, int64_t ldy)
{
	const float *xa = round_act(c, w->type, x, w->n_in, n_rows);
	const struct mm_job j = {.w = w, .e = e, .xa = xa, .n_rows = n_rows, .y = y, .ldy = ldy,
				 .q81 = xa == c->xr && pairs_q8_1(w->type),
				 .q8 = xa == c->xr && w->type == QC_TYPE_Q8_0};

	for (int64_t i = 0; !j.q8 && i < n_rows * w->n_in; i++)
		c->xd[i] = (double)xa[i];
	if (c->p.n_threads < 2 || w->n_out < c->p.n_threads ||
	    w->n_out * w->n_in * n_rows < MT_MIN_MACS) {
		matmul_rows(c, &j, 0, w->n_out, c->row, c->rowd);
		return;
	}
	c->job = j;
	atomic_store_explicit(&c->pending, c->p.n_threads - 1, memory_order_relaxed);
	pool_kick(c);
	run_range(c, 0);
	for (int spins = 0; atomic_load_explicit(&c->pending, memory_order_acquire) > 0;) {
		if (++spins < SPIN_ITERS)
			cpu_relax();
		else
			sched_yield();
	}
}

/* ggml rms_norm (sum of squares in double) then multiply by the weight. */
static void rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps)
{
	double sum = 0.0;
	for (int64_t i = 0; i < n; i++)
		sum += (double)(x[i] * x[i]);
	const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
	for (int64_t i = 0; i < n; i++)
		y[i] = (x[i] * scale) * w[i];
}

/* RoPE: rotate pairs of the first n_rot dims of each of n_heads heads by
 * pos * scale * base^(-2i/n_rot), the angle advanced by repeated multiplication
 * as ggml's rope cache does. NORM pairs (x[2i], x[2i+1]); NEOX pairs
 * (x[i], x[i + n_rot/2]). */
static void rope(float *x, int n_heads, int hd, int n_rot, int32_t pos, float base, float scale,
		 enum qc_rope_mode mode)
{
	const float theta_scale = powf(base, -2.0f / (float)n_rot);
	const int stride = mode == QC_ROPE_NEOX ? n_rot / 2 : 1;
	float theta = (float)pos;
	for (int i0 = 0; i0 < n_rot; i0 += 2) {
		const float th = scale * theta;
		const float cs = cosf(th), sn = sinf(th);
		const int j = mode == QC_ROPE_NEOX ? i0 / 2 : i0;
		for (int h = 0; h < n_heads; h++) {
			float *p = x + (int64_t)h * hd + j;
			const float x0 = p[0], x1 = p[stride];
			p[0] = x0 * cs - x1 * sn;
			p[stride] = x0 * sn + x1 * cs;
		}
		theta *= theta_scale;
	}
}

static float silu(float x)
{
	return x / (1.0f + expf(-x));
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

/* ---- K/V pool ------------------------------------------------------------ */

static float *kv_at(struct cpu *c, int32_t block, int il, int which, int32_t off)
{
	const int32_t bt = c->p.block_tokens;
	return c->kv + (size_t)block * c->block_floats +
	       (((size_t)il * 2 + (size_t)which) * (size_t)bt + (size_t)off) * (size_t)c->kv_dim;
}

static void kv_copy(struct cpu *c, int32_t src, int32_t dst, int32_t n_tokens)
{
	for (int il = 0; il < c->m->cfg.n_layer; il++)
		for (int w = 0; w < 2; w++)
			memcpy(kv_at(c, dst, il, w, 0), kv_at(c, src, il, w, 0),
			       (size_t)n_tokens * (size_t)c->kv_dim * sizeof(float));
}

/* ---- layer pieces -------------------------------------------------------- */

static void add_bias(float *y, const float *b, int64_t n_rows, int64_t n)
{
	if (!b)
		return;
	for (int64_t t = 0; t < n_rows; t++)
		for (int64_t i = 0; i < n; i++)
			y[t * n + i] += b[i];
}

static void head_norm(float *x, const float *w, int n_heads, int hd, float eps)
{
	if (!w)
		return;
	for (int h = 0; h < n_heads; h++)
		rmsnorm(x + (int64_t)h * hd, x + (int64_t)h * hd, w, hd, eps);
}

/* Attention of token t (entry i) over its sequence's cached positions 0..pos. */
static void attend(struct cpu *c, const struct qc_sched_plan *plan, int il, int32_t i, int32_t t)
{
	const struct qc_model_config *cfg = &c->m->cfg;
	const int hd = cfg->head_dim, group = cfg->n_head / cfg->n_head_kv;
	const int32_t bt = plan->block_tokens, n_ctx = plan->positions[t] + 1;
	const int32_t *table = plan->block_tables + (size_t)i * (size_t)plan->table_stride;
	const float scale = 1.0f / sqrtf((float)hd);
	const bool r16 = c->p.act_round == QC_ACT_ROUND_GGML;

	for (int h = 0; h < cfg->n_head; h++) {
		const float *q = c->q + (int64_t)t * c->q_dim + (int64_t)h * hd;
		const int64_t kvo = (int64_t)(h / group) * hd;
		float *out = c->att + (int64_t)t * c->q_dim + (int64_t)h * hd;

		for (int d = 0; d < hd; d++)
			c->qh[d] = r16 ? f16_round(q[d]) : q[d];
		for (int32_t j = 0; j < n_ctx; j++) {
			const float *kj = kv_at(c, table[j / bt], il, 0, j % bt) + kvo;
			c->scores[j] = (float)dot(c->qh, kj, hd) * scale;
		}
		softmax(c->scores, n_ctx);
		memset(out, 0, (size_t)hd * sizeof *out);
		for (int32_t j = 0; j < n_ctx; j++) {
			const float pj = r16 ? f16_round(c->scores[j]) : c->scores[j];
			const float *vj = kv_at(c, table[j / bt], il, 1, j % bt) + kvo;
			for (int d = 0; d < hd; d++)
				out[d] += pj * vj[d];
		}
	}
}

static void attention_block(struct cpu *c, const struct qc_sched_plan *plan, int il)
{
	const struct qc_model_config *cfg = &c->m->cfg;
	const struct qc_layer *L = &c->m->layers[il];
	const int32_t T = plan->n_tokens;
	const int64_t E = cfg->n_embd;

	for (int32_t t = 0; t < T; t++)
		rmsnorm(c->xn + t * E, c->x + t * E, L->attn_norm, E, cfg->norm_eps);
	matmul(c, &L->wq, 0, c->xn, T, c->q, c->q_dim);
	matmul(c, &L->wk, 0, c->xn, T, c->k, c->kv_dim);
	matmul(c, &L->wv, 0, c->xn, T, c->v, c->kv_dim);
	add_bias(c->q, L->bq, T, c->q_dim);
	add_bias(c->k, L->bk, T, c->kv_dim);
	add_bias(c->v, L->bv, T, c->kv_dim);
	for (int32_t t = 0; t < T; t++) {
		float *q = c->q + t * c->q_dim, *k = c->k + t * c->kv_dim, *v = c->v + t * c->kv_dim;
		head_norm(q, L->q_norm, cfg->n_head, cfg->head_dim, cfg->norm_eps);
		head_norm(k, L->k_norm, cfg->n_head_kv, cfg->head_dim, cfg->norm_eps);
		rope(q, cfg->n_head, cfg->head_dim, cfg->rope_dim, plan->positions[t],
		     cfg->rope_freq_base, cfg->rope_freq_scale, cfg->rope_mode);
		rope(k, cfg->n_head_kv, cfg->head_dim, cfg->rope_dim, plan->positions[t],
		     cfg->rope_freq_base, cfg->rope_freq_scale, cfg->rope_mode);
		const int32_t slot = plan->slots[t];
		float *kd = kv_at(c, slot / plan->block_tokens, il, 0, slot % plan->block_tokens);
		float *vd = kv_at(c, slot / plan->block_tokens, il, 1, slot % plan->block_tokens);
		for (int64_t d = 0; d < c->kv_dim; d++) {
			kd[d] = f16_round(k[d]);
			vd[d] = f16_round(v[d]);
		}
	}
	for (int32_t i = 0; i < plan->n_seqs; i++)
		for (int32_t t = plan->tok_start[i]; t < plan->tok_start[i + 1]; t++)
			attend(c, plan, il, i, t);
	matmul(c, &L->wo, 0, c->att, T, c->xn, E);
	for (int64_t n = 0; n < (int64_t)T * E; n++)
		c->x[n] += c->xn[n];
}

/* SiLU(gate) * up -> down for n rows of in (n_embd each) with expert e. */
static void ffn_swiglu(struct cpu *c, const struct qc_mat *gate, const struct qc_mat *up,
		       const struct qc_mat *down, int64_t e, const float *in, int64_t n, float *out)
{
	const int64_t F = gate->n_out;
	matmul(c, gate, e, in, n, c->fa, F);
	matmul(c, up, e, in, n, c->fb, F);
	for (int64_t i = 0; i < n * F; i++)
		c->fa[i] = silu(c->fa[i]) * c->fb[i];
	matmul(c, down, e, c->fa, n, out, down->n_out);
}

/* Mixtral routing as llm_build_moe_ffn(norm_w = true, softmax gating): softmax
 * over all experts, top-k by probability, weights renormalized over the k, then
 * the weighted expert outputs summed in rank order. */
static void moe_block(struct cpu *c, const struct qc_layer *L, int32_t T)
{
	const struct qc_model_config *cfg = &c->m->cfg;
	const int64_t E = cfg->n_embd, X = cfg->n_expert, K = cfg->n_expert_used;

	matmul(c, &L->gate_inp, 0, c->xn, T, c->router, X);
	for (int32_t t = 0; t < T; t++) {
		float *pr = c->router + t * X;
		int32_t *sel = c->sel + t * K;
		float *w = c->selw + t * K;
		softmax(pr, X);
		for (int64_t s = 0; s < K; s++) { /* k passes of selection: X is small */
			int32_t best = -1;
			for (int32_t e = 0; e < X; e++) {
				bool taken = false;
				for (int64_t u = 0; u < s; u++)
					taken |= sel[u] == e;
				if (!taken && (best < 0 || pr[e] > pr[best]))
					best = e;
			}
			sel[s] = best;
			w[s] = pr[best];
		}
		float sum = 0.0f;
		for (int64_t s = 0; s < K; s++)
			sum += w[s];
		for (int64_t s = 0; s < K; s++)
			w[s] /= sum;
	}
	for (int32_t e = 0; e < X; e++) {
		int64_t n = 0;
		for (int32_t t = 0; t < T; t++)
			for (int64_t s = 0; s < K; s++)
				if (c->sel[t * K + s] == e) {
					memcpy(c->ex + n * E, c->xn + t * E, (size_t)E * sizeof(float));
					c->etok[n] = t;
					c->eslot[n] = (int32_t)s;
					n++;
				}
		if (!n)
			continue;
		ffn_swiglu(c, &L->gate_exps, &L->up_exps, &L->down_exps, e, c->ex, n, c->eout);
		for (int64_t r = 0; r < n; r++) {
			const int64_t t = c->etok[r], s = c->eslot[r];
			const float w = c->selw[t * K + s];
			float *dst = c->moe + (t * K + s) * E;
			for (int64_t d = 0; d < E; d++)
				dst[d] = c->eout[r * E + d] * w;
		}
	}
	for (int32_t t = 0; t < T; t++)
		for (int64_t s = 0; s < K; s++)
			for (int64_t d = 0; d < E; d++)
				c->x[t * E + d] += c->moe[(t * K + s) * E + d];
}

static void ffn_block(struct cpu *c, const struct qc_sched_plan *plan, int il)
{
	const struct qc_model_config *cfg = &c->m->cfg;
	const struct qc_layer *L = &c->m->layers[il];
	const int32_t T = plan->n_tokens;
	const int64_t E = cfg->n_embd;

	for (int32_t t = 0; t < T; t++)
		rmsnorm(c->xn + t * E, c->x + t * E, L->ffn_norm, E, cfg->norm_eps);
	if (cfg->n_expert) {
		moe_block(c, L, T);
		return;
	}
	ffn_swiglu(c, &L->ffn_gate, &L->ffn_up, &L->ffn_down, 0, c->xn, T, c->att);
	for (int64_t n = 0; n < (int64_t)T * E; n++)
		c->x[n] += c->att[n];
}

/* ---- ops ----------------------------------------------------------------- */

static int cpu_forward(void *state, const struct qc_sched_plan *plan, float *logits,
		       struct qc_err *err)
{
	struct cpu *c = state;
	const struct qc_model *m = c->m;
	const struct qc_model_config *cfg = &m->cfg;
	const int32_t T = plan->n_tokens;
	const int64_t E = cfg->n_embd;

	if (T > c->p.max_tokens || plan->n_logits > c->p.max_logits ||
	    plan->block_tokens != c->p.block_tokens)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "plan of %d tokens / %d logits / block %d exceeds the backend's %d / %d / %d",
				  T, plan->n_logits, plan->block_tokens, c->p.max_tokens,
				  c->p.max_logits, c->p.block_tokens);
	for (int32_t k = 0; k < plan->n_cow; k++)
		kv_copy(c, plan->cow_src[k], plan->cow_dst[k], plan->cow_n_tokens[k]);
	for (int32_t t = 0; t < T; t++) {
		const int32_t pos = plan->positions[t], id = plan->tokens[t];
		if (id < 0 || id >= cfg->n_vocab || pos < 0 || pos >= c->p.max_ctx ||
		    plan->slots[t] < 0 || plan->slots[t] / plan->block_tokens >= c->p.n_blocks)
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
					  "token %d: id %d, position %d or slot %d out of range", t, id,
					  pos, plan->slots[t]);
		qc_types[m->token_embd.type].dequant_row(qc_mat_row(&m->token_embd, 0, id),
							 c->x + t * E, E);
	}
	if (!T)
		return QC_OK;
	for (int il = 0; il < cfg->n_layer; il++) {
		attention_block(c, plan, il);
		ffn_block(c, plan, il);
	}
	int32_t n = 0;
	for (int32_t i = 0; i < plan->n_seqs; i++) {
		if (!plan->need_logits[i])
			continue;
		const int32_t t = plan->tok_start[i + 1] - 1;
		rmsnorm(c->lx + n * E, c->x + t * E, m->output_norm, E, cfg->norm_eps);
		n++;
	}
	matmul(c, &m->output, 0, c->lx, n, logits, cfg->n_vocab);
	return QC_OK;
}

static void cpu_destroy(void *state)
{
	struct cpu *c = state;
	if (!c)
		return;
	if (c->pool_init) {
		atomic_store_explicit(&c->quit, true, memory_order_release);
		pool_kick(c);
		for (int k = 0; c->workers && k < c->p.n_threads - 1; k++)
			if (c->workers[k].started)
				pthread_join(c->workers[k].th, NULL);
		pthread_cond_destroy(&c->go);
		pthread_mutex_destroy(&c->mu);
	}
	free(c->workers);
	free(c->kv);
	free(c->x);
	free(c->xn);
	free(c->q);
	free(c->k);
	free(c->v);
	free(c->att);
	free(c->fa);
	free(c->fb);
	free(c->xr);
	free(c->sdelta);
	free(c->xq);
	free(c->xqd);
	free(c->qbuf);
	free(c->row);
	free(c->rowd);
	free(c->xd);
	free(c->scores);
	free(c->qh);
	free(c->router);
	free(c->sel);
	free(c->selw);
	free(c->etok);
	free(c->eslot);
	free(c->ex);
	free(c->eout);
	free(c->moe);
	free(c->lx);
	free(c);
}

static void *falloc(size_t n)
{
	return malloc((n ? n : 1) * sizeof(float));
}

static int cpu_create(const struct qc_model *m, const struct qc_backend_params *p, void **state,
		      struct qc_err *err)
{
	const struct qc_model_config *cfg = &m->cfg;
	struct cpu *c;

	*state = NULL;
	if (p->n_blocks < 1 || p->block_tokens < 1 || p->max_tokens < 1 || p->max_logits < 1 ||
	    p->max_ctx < 1)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "backend parameters must be positive");
	c = calloc(1, sizeof *c);
	if (!c)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	c->m = m;
	c->p = *p;
	if (c->p.n_threads < 1)
		c->p.n_threads = 1;
	c->kv_dim = (int64_t)cfg->n_head_kv * cfg->head_dim;
	c->q_dim = (int64_t)cfg->n_head * cfg->head_dim;
	c->max_in = cfg->n_embd;
	if (c->q_dim > c->max_in)
		c->max_in = c->q_dim;
	if (cfg->n_ff > c->max_in)
		c->max_in = cfg->n_ff;
	c->block_floats = (size_t)cfg->n_layer * 2 * (size_t)p->block_tokens * (size_t)c->kv_dim;

	const size_t T = (size_t)p->max_tokens, E = (size_t)cfg->n_embd, F = (size_t)cfg->n_ff;
	const size_t X = (size_t)cfg->n_expert, K = (size_t)cfg->n_expert_used;
	const size_t wide = c->q_dim > cfg->n_embd ? (size_t)c->q_dim : E;
	c->kv = falloc((size_t)p->n_blocks * c->block_floats);
	c->x = falloc(T * E);
	c->xn = falloc(T * wide);
	c->q = falloc(T * (size_t)c->q_dim);
	c->k = falloc(T * (size_t)c->kv_dim);
	c->v = falloc(T * (size_t)c->kv_dim);
	c->att = falloc(T * wide);
	c->fa = falloc(T * (K ? K : 1) * F);
	c->fb = falloc(T * (K ? K : 1) * F);
	c->xr = falloc(T * (K ? K : 1) * (size_t)c->max_in);
	c->xq = malloc(T * (K ? K : 1) * (size_t)c->max_in + 1);
	c->xqd = falloc(T * (K ? K : 1) * (size_t)c->max_in / 32);
	c->sdelta = malloc(sizeof(double) * (T * (K ? K : 1) * (size_t)c->max_in / 32 + 1));
	c->qbuf = malloc((size_t)c->max_in * 8 + 64);
	c->row = falloc((size_t)c->p.n_threads * (size_t)c->max_in);
	c->rowd = malloc(sizeof(double) * ((size_t)c->p.n_threads * (size_t)c->max_in + 1));
	c->xd = malloc(sizeof(double) * (T * (K ? K : 1) * (size_t)c->max_in + 1));
	c->dot_dd = pick_dot_dd();
	c->dot_fd = pick_dot_fd();
	c->dot_q8 = pick_dot_q8();
	pthread_once(&qc_f16_once, fill_f16_table);
	c->scores = falloc((size_t)p->max_ctx);
	c->qh = falloc((size_t)cfg->head_dim);
	c->router = falloc(T * X);
	c->sel = malloc(sizeof(int32_t) * (T * K + 1));
	c->selw = falloc(T * K);
	c->etok = malloc(sizeof(int32_t) * (T * K + 1));
	c->eslot = malloc(sizeof(int32_t) * (T * K + 1));
	c->ex = falloc(T * K * E);
	c->eout = falloc(T * K * E);
	c->moe = falloc(T * K * E);
	c->lx = falloc((size_t)p->max_logits * E);
	if (!c->kv || !c->x || !c->xn || !c->q || !c->k || !c->v || !c->att || !c->fa || !c->fb ||
	    !c->xr || !c->sdelta || !c->xq || !c->xqd || !c->qbuf || !c->row || !c->rowd || !c->xd || !c->scores ||
	    !c->qh || !c->router || !c->sel ||
	    !c->selw || !c->etok || !c->eslot || !c->ex || !c->eout || !c->moe || !c->lx) {
		const size_t bb = c->block_floats * sizeof(float);
		cpu_destroy(c);
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1,
				  "out of memory for the CPU backend (%d K/V blocks of %zu bytes)",
				  p->n_blocks, bb);
	}
	if (c->p.n_threads > 1) {
		c->workers = calloc((size_t)c->p.n_threads - 1, sizeof *c->workers);
		if (!c->workers || pthread_mutex_init(&c->mu, NULL))
			goto out_threads;
		if (pthread_cond_init(&c->go, NULL)) {
			pthread_mutex_destroy(&c->mu);
			goto out_threads;
		}
		c->pool_init = true;
		for (int k = 0; k < c->p.n_threads - 1; k++) {
			c->workers[k].c = c;
			c->workers[k].idx = k + 1;
			if (pthread_create(&c->workers[k].th, NULL, worker_main, &c->workers[k]))
				goto out_threads;
			c->workers[k].started = true;
		}
	}
	*state = c;
	return QC_OK;

out_threads:
	cpu_destroy(c);
	return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "cannot start %d CPU worker threads",
			  p->n_threads - 1);
}

const struct qc_backend_ops qc_backend_cpu = {
	.name = "cpu",
	.create = cpu_create,
	.forward = cpu_forward,
	.destroy = cpu_destroy,
};

int qc_backend_block_bytes(const struct qc_model *m, int32_t block_tokens, uint64_t *out,
			   struct qc_err *err)
{
	return qc_kv_block_bytes(m->cfg.n_layer, m->cfg.n_head_kv, m->cfg.head_dim, sizeof(float),
				 block_tokens, out, err);
}
