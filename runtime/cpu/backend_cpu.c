/* backend_cpu.c — the plain-C backend: llama/Qwen/Gemma 2/Gemma 3/Phi-3 forward over a scheduler plan.
 *
 * Owns: the K/V pool (n_blocks blocks, each [layer][K,V][token][kv_dim]) and
 * the activation buffers, all sized once at create. f16: floats holding values
 * rounded through binary16, as llama.cpp's f16 cache stores them. fp8: E4M3FN
 * bytes plus, per [layer][K,V][token][kv head], one power-of-two scale exponent
 * (runtime/ops kv_store.c; attention decodes them as it reads).
 * Matmul: matmul_cpu.c (tiled kernels; activations rounded as ggml's x86 CPU
 * path does with QC_ACT_ROUND_GGML). Everything else is the plain-C op of
 * runtime/ops (ops.h), the same code the CUDA kernels are tested against:
 * norms, RoPE, SiLU, adds, embedding, routing, expert combine and attention
 * (Q.K with f16-rounded Q and f16-rounded softmax weights before .V under
 * QC_ACT_ROUND_GGML, as ggml's mul_mat does with an f16 cache).
 * Threads: each matmul's output rows are split into n_threads contiguous ranges,
 * one per thread of a pool made at create (the caller runs range 0); every
 * output is computed by exactly the same code whatever thread runs it, so
 * results are bit-identical for any thread count. Attention is split the same
 * way, by tokens, or by (token, head) pairs when there are few tokens (decode),
 * each with its thread's scratch, and so is a prefill's activation rounding (by
 * tokens); Q, K, V and gate, up go to the pool as one job each (qc_matmul groups);
 * everything else runs on the caller's thread.
 * Act-order weights (qc_mat.act_perm) get their activations gathered first.
 * MoE: softmax router, top-k, optional renormalization, expert outputs summed
 * in rank order then the sigmoid-gated shared expert, then the residual, in
 * build_moe_ffn's order of float additions.
 * Tensor parallelism (docs/tp.md; p->tp with 2+ ranks): this backend runs one
 * rank's shard (its heads, FFN columns, vocabulary rows: the model's local widths)
 * and sums partial rows over the group with qc_tp_allreduce_f32 (rank order, the
 * same bits on every rank): the embedding (rows of ids in its vocabulary range,
 * zeros for the rest), the O projection and the FFN down projection (before the
 * post-norm and the residual add), the MoE combine (into a zeroed buffer, then
 * added). Router and shared-expert gate are replicated, so every rank routes
 * alike. Logits: its own vocabulary columns. Every rank makes the same all-reduce
 * calls in the same order, and every check that can fail a forward comes before
 * the first of them and fails alike on every rank (the same plan): no rank is
 * left waiting at a barrier. Without p->tp (or with one rank) nothing changes.
 * Non-goals: flash attention.
 * Gemma 2 (build_gemma2): embeddings times sqrt(n_embd), q scaled after RoPE,
 * soft-capped scores, a window on even layers, post-attention/post-FFN norms
 * before each residual add, GELU-tanh (binary16 table as ggml's CPU under
 * QC_ACT_ROUND_GGML), soft-capped logits.
 * Phi-3 (build_phi3): q/k/v and gate/up are row views of the fused tensors
 * (model.c), q scaled after RoPE as Gemma 2's, a window on every layer, the
 * LongRoPE table for this backend's context (qc_model_rope_factors) with the
 * file's attn_factor on cos/sin (ggml rope mscale), as for any RoPE.
 * Gemma 3 (transformers Gemma3TextModel; llama.cpp build_gemma3 postdates c392e50):
 * Gemma 2's block without soft-caps, per-head q/k RMSNorm before RoPE, a window
 * and RoPE base 10000 (unscaled) on 5 layers of every 6, the file's base and
 * linear scaling on the others; GELU-tanh exact unless rounded as ggml's.
 * Reference: llama.cpp c392e50 build_llama, build_gemma2, build_phi3, llm_build_kqv, llm_build_moe_ffn,
 * build_qwen2moe (the op-level references are named in runtime/ops/).
 */
#include "backend.h"
#include "matmul_cpu.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fp16.h"
#include "ops.h"

struct cpu;

struct worker {
	struct cpu *c;
	int idx;                      /* 1..n_threads-1; range 0 is the caller's */
	pthread_t th;
	bool started;
};

struct cpu {
	const struct qc_model *m;
	struct qc_backend_params p;
	struct qc_tp_group *tp;       /* the group when this is one shard of 2+ ranks, else NULL */
	int64_t kv_dim, q_dim, max_in;
	size_t block_floats;          /* values per K/V block */
	float *kv;                    /* f16: (n_blocks, n_layer, 2, block_tokens, kv_dim), else NULL */
	uint8_t *kv8;                 /* fp8: the same shape in E4M3FN codes, else NULL */
	int8_t *kv8_exp;              /* fp8: (n_blocks, n_layer, 2, block_tokens, n_head_kv) scale exponents */
	float *x, *xn;                /* (max_tokens, n_embd) residual / normed */
	float *q, *k, *v, *att;       /* (max_tokens, q_dim | kv_dim) */
	float *fa, *fb;               /* (max_tokens * max(1, n_expert_used), max(n_ff, n_ff_shexp)) gate / up */
	float *xperm;                 /* (max_tokens * max(1, n_expert_used), max_in) act-order gathered x */
	float *shg;                   /* (max_tokens) shared expert gate */
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
	struct qc_matmul *mm;         /* activation buffers, kernels, the current job */
	enum { JOB_MATMUL, JOB_ROUND, JOB_ATTEND } job; /* what the pool runs now */
	int64_t job_rows;             /* matmul job: output rows; round job: tokens */
	const struct qc_sched_plan *job_plan; /* attention job: plan, layer */
	int job_il;
	bool job_heads;               /* attention job: split by (token, head), not by token */
	float *scratch;               /* (n_threads, 2 * head_dim + max_ctx) qc_ref_attn_token scratch */
	int32_t *lrows;               /* (max_logits) token of each logits row */
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

static float f16_round(float x)
{
	return qc_fp16_to_f32(qc_f32_to_fp16(x));
}

/* Range k of n_threads over the job's output rows, cut at multiples of 16 (the
 * int8 kernel's row tile; any cut gives the same bits, this one no partial tiles). */
static void attend_range(struct cpu *c, int k);

static void run_range(struct cpu *c, int k)
{
	const int64_t n = c->job_rows, nt = c->p.n_threads;
	if (c->job == JOB_ATTEND) {
		attend_range(c, k);
		return;
	}
	if (c->job == JOB_ROUND) {
		qc_matmul_round(c->mm, k, n * k / nt, n * (k + 1) / nt);
		return;
	}
	const int64_t r0 = k ? (n * k / nt) & ~(int64_t)15 : 0;
	const int64_t r1 = k + 1 < nt ? (n * (k + 1) / nt) & ~(int64_t)15 : n;
	qc_matmul_rows(c->mm, k, r0, r1);
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

/* x[act_perm] for weights converted with act-order (GPTQ desc_act): the weight's
 * columns are stored in that order. Returns x itself when w has no permutation. */
static const float *act_gather(struct cpu *c, const struct qc_mat *w, int64_t e, const float *x,
			       int64_t n_rows)
{
	if (!w->act_perm)
		return x;
	qc_ref_act_gather(x, w->n_in, 1, NULL, w->act_perm + e * w->perm_stride, 0, n_rows, w->n_in, c->xperm);
	return c->xperm;
}

/* Runs the published job's n_threads ranges (the caller takes range 0) and
 * waits for all of them. */
static void pool_run(struct cpu *c)
{
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

/* Below this many multiply-adds a matmul stays on the caller's thread: waking
 * the pool costs more (the split does not change any result either way). */
#define MT_MIN_MACS (1 << 16)

/* Below this many tokens per thread a job's activations are rounded on the
 * caller's thread (a decode step's: one more dispatch would cost more). */
#define MT_ROUND_MIN_TOK 4

/* Rounds the planned matmul job's activations and runs it, n_in wide rows for
 * n_tok tokens: on the pool, or on the caller's thread when it is small. */
static void matmul_run(struct cpu *c, int64_t n_in, int64_t n_tok)
{
	const int64_t rows = qc_matmul_job_rows(c->mm);
	if (c->p.n_threads < 2 || rows < c->p.n_threads || rows * n_in * n_tok < MT_MIN_MACS) {
		qc_matmul_round(c->mm, 0, 0, n_tok);
		qc_matmul_rows(c->mm, 0, 0, rows);
		return;
	}
	if (n_tok >= MT_ROUND_MIN_TOK * c->p.n_threads) {
		c->job = JOB_ROUND;
		c->job_rows = n_tok;
		pool_run(c);
	} else {
		qc_matmul_round(c->mm, 0, 0, n_tok);
	}
	c->job = JOB_MATMUL;
	c->job_rows = rows;
	pool_run(c);
}

/* y[t*ldy + r] = W_e[r] . x[t] for n_rows tokens (x rows are w->n_in long). */
static void matmul(struct cpu *c, const struct qc_mat *w, int64_t e, const float *x,
		   int64_t n_rows, float *y, int64_t ldy)
{
	x = act_gather(c, w, e, x, n_rows);
	qc_matmul_plan_group(c->mm, 1, &w, e, x, n_rows, &y, &ldy);
	matmul_run(c, w->n_in, n_rows);
}

/* matmul of each of the n matrices w[i] (expert e) into y[i] over the same x: runs
 * of consecutive matrices of one type go to the pool as one job (one dispatch and
 * one activation rounding for Q, K and V). Each output is computed as by matmul. */
static void matmul_group(struct cpu *c, int n, const struct qc_mat *const *w, int64_t e, const float *x,
			 int64_t n_rows, float *const *y, const int64_t *ldy)
{
	for (int i = 0, j; i < n; i = j) {
		for (j = i + 1; j < n && qc_matmul_groupable(w[i], w[j]); j++)
			;
		if (j - i == 1) {
			matmul(c, w[i], e, x, n_rows, y[i], ldy[i]);
			continue;
		}
		qc_matmul_plan_group(c->mm, j - i, w + i, e, x, n_rows, y + i, ldy + i);
		matmul_run(c, w[i]->n_in, n_rows);
	}
}

/* ---- K/V pool ------------------------------------------------------------ */

/* Row index of (block, layer, K/V, token offset): values start at row * kv_dim,
 * fp8 scale exponents at row * n_head_kv. */
static size_t kv_row(const struct cpu *c, int32_t block, int il, int which, int32_t off)
{
	const size_t bt = (size_t)c->p.block_tokens;
	return (((size_t)block * (size_t)c->m->cfg.n_layer + (size_t)il) * 2 + (size_t)which) * bt + (size_t)off;
}

static void kv_copy(struct cpu *c, int32_t src, int32_t dst, int32_t n_tokens)
{
	const size_t n = (size_t)n_tokens * (size_t)c->kv_dim, nh = (size_t)n_tokens * (size_t)c->m->cfg.n_head_kv;
	for (int il = 0; il < c->m->cfg.n_layer; il++)
		for (int w = 0; w < 2; w++) {
			const size_t rd = kv_row(c, dst, il, w, 0), rs = kv_row(c, src, il, w, 0);
			if (c->kv) {
				memcpy(c->kv + rd * (size_t)c->kv_dim, c->kv + rs * (size_t)c->kv_dim, n * sizeof(float));
				continue;
			}
			memcpy(c->kv8 + rd * (size_t)c->kv_dim, c->kv8 + rs * (size_t)c->kv_dim, n);
			memcpy(c->kv8_exp + rd * (size_t)c->m->cfg.n_head_kv,
			       c->kv8_exp + rs * (size_t)c->m->cfg.n_head_kv, nh);
		}
}

/* This step's K/V rows of layer il to their slots. */
static void kv_store(struct cpu *c, const struct qc_sched_plan *plan, int il)
{
	const int32_t T = plan->n_tokens, bt = plan->block_tokens;
	if (c->kv8) {
		qc_ref_kv_store_e4m3(c->k, c->v, plan->slots, T, c->kv8, c->kv8_exp, il, c->m->cfg.n_layer, bt,
				     (int)c->kv_dim, c->m->cfg.head_dim);
		return;
	}
	for (int32_t t = 0; t < T; t++) {
		const float *k = c->k + t * c->kv_dim, *v = c->v + t * c->kv_dim;
		const int32_t slot = plan->slots[t];
		float *kd = c->kv + kv_row(c, slot / bt, il, 0, slot % bt) * (size_t)c->kv_dim;
		float *vd = c->kv + kv_row(c, slot / bt, il, 1, slot % bt) * (size_t)c->kv_dim;
		for (int64_t d = 0; d < c->kv_dim; d++) {
			kd[d] = f16_round(k[d]);
			vd[d] = f16_round(v[d]);
		}
	}
}

/* ---- layer pieces -------------------------------------------------------- */

/* Sums n floats of buf over the ranks (tensor parallel); alone: nothing. */
static int tp_sum(struct cpu *c, float *buf, int64_t n, struct qc_err *err)
{
	return c->tp ? qc_tp_allreduce_f32(c->tp, c->p.tp_rank, buf, n, err) : QC_OK;
}

/* y[t * n + i] += b[i] for n_rows rows; no bias: nothing. */
static void add_bias(float *y, const float *b, int64_t n_rows, int64_t n)
{
	if (b)
		qc_ref_add(y, b, n_rows * n, n);
}

/* Per-head RMS norm (Qwen3 q_norm / k_norm) of n_tok rows of n_heads heads, in
 * place; no weight: nothing. */
static void head_norm(float *x, const float *w, int64_t n_tok, int n_heads, int hd, float eps)
{
	if (w)
		qc_ref_rms_norm(x, hd, NULL, w, x, hd, n_tok * n_heads, hd, eps);
}

/* Attention of heads h0..h1-1 of token t (entry i) over its sequence's cached
 * positions 0..pos, with thread k's scratch. */
static void attend(struct cpu *c, const struct qc_sched_plan *plan, int il, int32_t i, int32_t t,
		   int h0, int h1, int k)
{
	const struct qc_model_config *cfg = &c->m->cfg;
	const int hd = cfg->head_dim;
	const struct qc_ref_attn_args a = {
		.pool = {.f32 = c->kv, .e4m3 = c->kv8, .e4m3_exp = c->kv8_exp, .n_layer = cfg->n_layer, .bt = plan->block_tokens, .kv_dim = (int)c->kv_dim},
		.layer = il, .n_head = cfg->n_head, .n_head_kv = cfg->n_head_kv, .hd = hd,
		.scale = cfg->q_scale > 0.0f ? 1.0f : 1.0f / sqrtf((float)hd),
		.round = c->p.act_round == QC_ACT_ROUND_GGML ? QC_REF_ATTN_F16 : QC_REF_ATTN_F32,
		.softcap = cfg->attn_softcap,
		.window = qc_model_layer_windowed(cfg, il) ? cfg->sliding_window : 0,
		.n_seq_tokens = c->p.attn_order == QC_ATTN_ORDER_LLAMA
					? plan->tok_start[i + 1] - plan->tok_start[i]
					: 2, /* the tile order whatever the batch */
	};
	float *scratch = c->scratch + (size_t)k * (size_t)(2 * hd + c->p.max_ctx);
	qc_ref_attn_token_heads(&a, c->q + (int64_t)t * c->q_dim, c->att + (int64_t)t * c->q_dim,
				plan->positions[t], plan->block_tables + (size_t)i * (size_t)plan->table_stride,
				scratch, h0, h1);
}

/* Thread k's share of an attention job. Many tokens (prefill): tokens t with
 * t mod n_threads == k (interleaved: a token's cost grows with its position).
 * Few tokens (decode): the job's (token, head) pairs in n_threads contiguous
 * ranges, so one token's heads are shared out (its K/V head groups stay
 * together). Each head's result is computed by the same code whichever thread
 * runs it. */
static void attend_range(struct cpu *c, int k)
{
	const struct qc_sched_plan *plan = c->job_plan;
	const int nh = c->m->cfg.n_head, nt = c->p.n_threads;
	if (!c->job_heads) {
		for (int32_t i = 0; i < plan->n_seqs; i++)
			for (int32_t t = plan->tok_start[i]; t < plan->tok_start[i + 1]; t++)
				if (t % nt == k)
					attend(c, plan, c->job_il, i, t, 0, nh, k);
		return;
	}
	const int64_t n = (int64_t)plan->n_tokens * nh, p0 = n * k / nt, p1 = n * (k + 1) / nt;
	for (int32_t i = 0; i < plan->n_seqs; i++)
		for (int32_t t = plan->tok_start[i]; t < plan->tok_start[i + 1]; t++) {
			const int64_t b = (int64_t)t * nh; /* this token's pairs: [b, b + nh) */
			const int64_t lo = p0 > b ? p0 : b, hi = p1 < b + nh ? p1 : b + nh;
			if (lo < hi)
				attend(c, plan, c->job_il, i, t, (int)(lo - b), (int)(hi - b), k);
		}
}

/* Few tokens per thread: split by heads (see attend_range). */
#define ATTN_HEAD_SPLIT_TOK 4

static void attend_all(struct cpu *c, const struct qc_sched_plan *plan, int il)
{
	const int nh = c->m->cfg.n_head;
	if (c->p.n_threads < 2 || (int64_t)plan->n_tokens * nh < c->p.n_threads) {
		for (int32_t i = 0; i < plan->n_seqs; i++)
			for (int32_t t = plan->tok_start[i]; t < plan->tok_start[i + 1]; t++)
				attend(c, plan, il, i, t, 0, nh, 0);
		return;
	}
	c->job = JOB_ATTEND;
	c->job_plan = plan;
	c->job_il = il;
	c->job_heads = plan->n_tokens < ATTN_HEAD_SPLIT_TOK * c->p.n_threads;
	pool_run(c);
}

static int attention_block(struct cpu *c, const struct qc_sched_plan *plan, int il, struct qc_err *err)
{
	const struct qc_model_config *cfg = &c->m->cfg;
	const struct qc_layer *L = &c->m->layers[il];
	const int32_t T = plan->n_tokens;
	const int64_t E = cfg->n_embd;
	/* ggml rope_yarn: with YaRN, cos/sin also carry 1 + 0.1 ln(1/freq_scale) */
	float ms = cfg->rope_attn_factor;
	if (cfg->rope_ext_factor != 0.0f)
		ms *= 1.0f + 0.1f * logf(1.0f / cfg->rope_freq_scale);
	const struct qc_ref_rope_ext re = {.ext_factor = cfg->rope_ext_factor, .mscale = ms,
					   .corr = {cfg->rope_corr_dims[0], cfg->rope_corr_dims[1]},
					   .ff = qc_model_rope_factors(c->m, c->p.max_ctx)};
	/* Gemma 3's local layers rotate with their own base, unscaled */
	const bool local = qc_model_layer_local_rope(cfg, il);
	const float base = local ? cfg->rope_local_base : cfg->rope_freq_base;
	const float freq_scale = local ? 1.0f : cfg->rope_freq_scale;
	const float theta_scale = powf(base, -2.0f / (float)cfg->rope_dim);

	qc_ref_rms_norm(c->x, E, NULL, L->attn_norm, c->xn, E, T, E, cfg->norm_eps);
	const struct qc_mat *qkv[3] = {&L->wq, &L->wk, &L->wv};
	float *const qkv_y[3] = {c->q, c->k, c->v};
	const int64_t qkv_ld[3] = {c->q_dim, c->kv_dim, c->kv_dim};
	matmul_group(c, 3, qkv, 0, c->xn, T, qkv_y, qkv_ld);
	add_bias(c->q, L->bq, T, c->q_dim);
	add_bias(c->k, L->bk, T, c->kv_dim);
	add_bias(c->v, L->bv, T, c->kv_dim);
	head_norm(c->q, L->q_norm, T, cfg->n_head, cfg->head_dim, cfg->norm_eps);
	head_norm(c->k, L->k_norm, T, cfg->n_head_kv, cfg->head_dim, cfg->norm_eps);
	qc_ref_rope(c->q, plan->positions, T, cfg->n_head, cfg->head_dim, cfg->rope_dim, cfg->rope_mode,
		    theta_scale, freq_scale, &re);
	qc_ref_rope(c->k, plan->positions, T, cfg->n_head_kv, cfg->head_dim, cfg->rope_dim, cfg->rope_mode,
		    theta_scale, freq_scale, &re);
	if (cfg->q_scale > 0.0f) /* Gemma 2/3, Phi-3: q scaled after RoPE, scores then unscaled */
		qc_ref_scale(c->q, (int64_t)T * c->q_dim, cfg->q_scale);
	kv_store(c, plan, il);
	attend_all(c, plan, il);
	matmul(c, &L->wo, 0, c->att, T, c->xn, E);
	int rc = tp_sum(c, c->xn, (int64_t)T * E, err);
	if (rc)
		return rc;
	if (L->attn_post_norm)
		qc_ref_rms_norm(c->xn, E, NULL, L->attn_post_norm, c->xn, E, T, E, cfg->norm_eps);
	qc_ref_add(c->x, c->xn, (int64_t)T * E, (int64_t)T * E);
	return QC_OK;
}

/* SiLU(gate) * up -> down for n rows of in (n_embd each) with expert e. */
static void ffn_swiglu(struct cpu *c, const struct qc_mat *gate, const struct qc_mat *up,
		       const struct qc_mat *down, int64_t e, const float *in, int64_t n, float *out)
{
	const int64_t F = gate->n_out;
	const struct qc_mat *gu[2] = {gate, up};
	float *const gu_y[2] = {c->fa, c->fb};
	const int64_t gu_ld[2] = {F, F};
	matmul_group(c, 2, gu, e, in, n, gu_y, gu_ld);
	if (c->m->cfg.ffn_gelu)
		qc_ref_gelu_mul(c->fa, c->fb, c->fa, n * F,
				c->p.act_round == QC_ACT_ROUND_GGML ? QC_REF_GELU_F16_TABLE : QC_REF_GELU_EXACT);
	else
		qc_ref_silu_mul(c->fa, c->fb, c->fa, n * F);
	matmul(c, down, e, c->fa, n, out, down->n_out);
}

/* Routing as llm_build_moe_ffn(softmax gating): softmax over all experts, top-k
 * by probability, weights renormalized over the k when the arch says so
 * (Mixtral, Qwen3-MoE; not Qwen2-MoE), then the weighted expert outputs summed
 * in rank order, plus the shared expert scaled by sigmoid(gate . x) (Qwen2-MoE,
 * sigmoid as ggml's silu(g) / g), and only then added to the residual. */
static int moe_block(struct cpu *c, const struct qc_layer *L, int32_t T, struct qc_err *err)
{
	const struct qc_model_config *cfg = &c->m->cfg;
	const int64_t E = cfg->n_embd, X = cfg->n_expert, K = cfg->n_expert_used;

	matmul(c, &L->gate_inp, 0, c->xn, T, c->router, X);
	qc_ref_moe_route(c->router, T, (int)X, (int)K, cfg->expert_norm_w, c->sel, c->selw);
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
		for (int64_t r = 0; r < n; r++) /* to (token, rank) order, unweighted */
			memcpy(c->moe + (c->etok[r] * K + c->eslot[r]) * E, c->eout + r * E, (size_t)E * sizeof(float));
	}
	const bool shexp = L->gate_shexp.data != NULL;
	if (shexp) {
		ffn_swiglu(c, &L->gate_shexp, &L->up_shexp, &L->down_shexp, 0, c->xn, T, c->att);
		matmul(c, &L->gate_inp_shexp, 0, c->xn, T, c->shg, 1);
	}
	if (!c->tp) {
		qc_ref_moe_combine(c->x, c->moe, c->selw, T, E, (int)K, shexp ? c->att : NULL, shexp ? c->shg : NULL);
		return QC_OK;
	}
	/* a shard's partial sums: combined into zeros (xn is free now), summed, added */
	memset(c->xn, 0, sizeof(float) * (size_t)T * (size_t)E);
	qc_ref_moe_combine(c->xn, c->moe, c->selw, T, E, (int)K, shexp ? c->att : NULL, shexp ? c->shg : NULL);
	int rc = tp_sum(c, c->xn, (int64_t)T * E, err);
	if (rc)
		return rc;
	qc_ref_add(c->x, c->xn, (int64_t)T * E, (int64_t)T * E);
	return QC_OK;
}

static int ffn_block(struct cpu *c, const struct qc_sched_plan *plan, int il, struct qc_err *err)
{
	const struct qc_model_config *cfg = &c->m->cfg;
	const struct qc_layer *L = &c->m->layers[il];
	const int32_t T = plan->n_tokens;
	const int64_t E = cfg->n_embd;

	qc_ref_rms_norm(c->x, E, NULL, L->ffn_norm, c->xn, E, T, E, cfg->norm_eps);
	if (cfg->n_expert)
		return moe_block(c, L, T, err);
	ffn_swiglu(c, &L->ffn_gate, &L->ffn_up, &L->ffn_down, 0, c->xn, T, c->att);
	int rc = tp_sum(c, c->att, (int64_t)T * E, err);
	if (rc)
		return rc;
	if (L->ffn_post_norm)
		qc_ref_rms_norm(c->att, E, NULL, L->ffn_post_norm, c->att, E, T, E, cfg->norm_eps);
	qc_ref_add(c->x, c->att, (int64_t)T * E, (int64_t)T * E);
	return QC_OK;
}

/* The embeddings of the plan's tokens into c->x: a shard has the rows of its
 * vocabulary range only, writes zeros for the other ids and sums over the ranks
 * (exactly one rank holds each row, so the sum is that row). */
static int embed(struct cpu *c, const struct qc_sched_plan *plan, struct qc_err *err)
{
	const struct qc_model *m = c->m;
	const int64_t E = m->cfg.n_embd;
	const int32_t T = plan->n_tokens;
	qc_ref_embed(qc_mat_row(&m->token_embd, 0, 0), m->token_embd.type, m->token_embd.row_bytes, E, plan->tokens, T,
		     m->tp.vocab0, m->token_embd.n_out, c->x);
	if (!c->tp)
		return QC_OK;
	return tp_sum(c, c->x, (int64_t)T * E, err);
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
	int rc;

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
		if (id < 0 || id >= m->tp.n_vocab_all || pos < 0 || pos >= c->p.max_ctx ||
		    plan->slots[t] < 0 || plan->slots[t] / plan->block_tokens >= c->p.n_blocks)
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
					  "token %d: id %d, position %d or slot %d out of range", t, id,
					  pos, plan->slots[t]);
	}
	if (!T)
		return QC_OK;
	if ((rc = embed(c, plan, err)))
		return rc;
	if (cfg->embd_scale != 1.0f)
		qc_ref_scale(c->x, (int64_t)T * E, cfg->embd_scale);
	for (int il = 0; il < cfg->n_layer; il++)
		if ((rc = attention_block(c, plan, il, err)) || (rc = ffn_block(c, plan, il, err)))
			return rc;
	int32_t n = 0;
	for (int32_t i = 0; i < plan->n_seqs; i++)
		if (plan->need_logits[i])
			c->lrows[n++] = plan->tok_start[i + 1] - 1;
	qc_ref_rms_norm(c->x, E, c->lrows, m->output_norm, c->lx, E, n, E, cfg->norm_eps);
	matmul(c, &m->output, 0, c->lx, n, logits, cfg->n_vocab);
	if (cfg->final_softcap > 0.0f)
		qc_ref_softcap(logits, (int64_t)n * cfg->n_vocab, cfg->final_softcap);
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
	free(c->kv8);
	free(c->kv8_exp);
	free(c->x);
	free(c->xn);
	free(c->q);
	free(c->k);
	free(c->v);
	free(c->att);
	free(c->fa);
	free(c->fb);
	free(c->xperm);
	free(c->shg);
	qc_matmul_free(c->mm);
	free(c->scratch);
	free(c->lrows);
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
	int rc0 = qc_model_check_backend(m, QC_ARCH_BACKEND_CPU, err);
	if (rc0)
		return rc0;
	if (m->tp.rank < 0)
		return qc_err_set(err, QC_EINVAL, m->bundle->path, NULL, -1, "the whole model of a --tp %d bundle has no "
				  "weights: each rank runs its shard (qc_model_rank_open, backend_tp.c)", m->tp.size);
	if (m->tp.size > 1 && (!p->tp || qc_tp_group_size(p->tp) != m->tp.size || p->tp_rank != m->tp.rank))
		return qc_err_set(err, QC_EINVAL, m->bundle->path, NULL, -1, "rank %d of a %d-rank shard needs its "
				  "group (backend parameters tp %d ranks, rank %d)", m->tp.rank, m->tp.size,
				  p->tp ? qc_tp_group_size(p->tp) : 0, p->tp_rank);
	if (p->kv_dtype != QC_KV_F16 && p->kv_dtype != QC_KV_FP8)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "K/V dtype %d unknown", (int)p->kv_dtype);
	/* the CPU reads ggml rows in place; a GPU target's tensor-core tiles it cannot */
	for (uint64_t i = 0; i < m->bundle->n_tensors; i++)
		if (m->bundle->tensors[i].layout != QC_LAYOUT_GGML)
			return qc_err_set(err, QC_EUNSUPPORTED, m->bundle->path, m->bundle->tensors[i].name, -1,
					  "layout %s is for the GPU (bundle converted for %s): the CPU backend reads "
					  "ggml blocks only (convert with --target cpu, or run with --device cuda)",
					  qc_layout_name(m->bundle->tensors[i].layout),
					  m->bundle->target ? m->bundle->target : "a GPU");
	c = calloc(1, sizeof *c);
	if (!c)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	c->m = m;
	c->p = *p;
	c->tp = p->tp && qc_tp_group_size(p->tp) > 1 ? p->tp : NULL;
	if (c->p.n_threads < 1)
		c->p.n_threads = 1;
	c->kv_dim = (int64_t)cfg->n_head_kv * cfg->head_dim;
	c->q_dim = (int64_t)cfg->n_head * cfg->head_dim;
	c->max_in = cfg->n_embd;
	if (c->q_dim > c->max_in)
		c->max_in = c->q_dim;
	if (cfg->n_ff > c->max_in)
		c->max_in = cfg->n_ff;
	if (cfg->n_ff_shexp > c->max_in)
		c->max_in = cfg->n_ff_shexp;
	c->block_floats = (size_t)cfg->n_layer * 2 * (size_t)p->block_tokens * (size_t)c->kv_dim;

	const size_t T = (size_t)p->max_tokens, E = (size_t)cfg->n_embd;
	const size_t F = (size_t)(cfg->n_ff > cfg->n_ff_shexp ? cfg->n_ff : cfg->n_ff_shexp);
	const size_t X = (size_t)cfg->n_expert, K = (size_t)cfg->n_expert_used;
	const size_t wide = c->q_dim > cfg->n_embd ? (size_t)c->q_dim : E;
	const size_t n_kv = (size_t)p->n_blocks * c->block_floats;
	const size_t n_exp = n_kv / (size_t)cfg->head_dim;
	bool kv_ok;
	if (p->kv_dtype == QC_KV_FP8) {
		c->kv8 = malloc(n_kv);
		c->kv8_exp = malloc(n_exp);
		kv_ok = c->kv8 && c->kv8_exp;
	} else {
		c->kv = falloc(n_kv);
		kv_ok = c->kv != NULL;
	}
	c->x = falloc(T * E);
	c->xn = falloc(T * wide);
	c->q = falloc(T * (size_t)c->q_dim);
	c->k = falloc(T * (size_t)c->kv_dim);
	c->v = falloc(T * (size_t)c->kv_dim);
	c->att = falloc(T * wide);
	c->fa = falloc(T * (K ? K : 1) * F);
	c->fb = falloc(T * (K ? K : 1) * F);
	c->xperm = falloc(T * (K ? K : 1) * (size_t)c->max_in);
	c->shg = falloc(T);
	c->scratch = falloc((size_t)c->p.n_threads * (size_t)(2 * cfg->head_dim + p->max_ctx));
	c->lrows = malloc(sizeof(int32_t) * (size_t)p->max_logits);
	c->router = falloc(T * X);
	c->sel = malloc(sizeof(int32_t) * (T * K + 1));
	c->selw = falloc(T * K);
	c->etok = malloc(sizeof(int32_t) * (T * K + 1));
	c->eslot = malloc(sizeof(int32_t) * (T * K + 1));
	c->ex = falloc(T * K * E);
	c->eout = falloc(T * K * E);
	c->moe = falloc(T * K * E);
	c->lx = falloc((size_t)p->max_logits * E);
	if (!kv_ok || !c->x || !c->xn || !c->q || !c->k || !c->v || !c->att || !c->fa || !c->fb ||
	    !c->xperm || !c->shg ||
	    !c->scratch ||
	    !c->lrows || !c->router || !c->sel ||
	    !c->selw || !c->etok || !c->eslot || !c->ex || !c->eout || !c->moe || !c->lx) {
		const size_t bb = p->kv_dtype == QC_KV_FP8 ? c->block_floats + c->block_floats / (size_t)cfg->head_dim
							   : c->block_floats * sizeof(float);
		cpu_destroy(c);
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1,
				  "out of memory for the CPU backend (%d K/V blocks of %zu bytes)",
				  p->n_blocks, bb);
	}
	int rc = qc_matmul_new(c->max_in, (int64_t)(T * (K ? K : 1)), c->p.n_threads, p->act_round,
			       &c->mm, err);
	if (rc) {
		cpu_destroy(c);
		return rc;
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
	/* about 1-5 s of prefill per step for a 100M-class model on a few cores:
	 * larger chunks gain little matmul efficiency here and stall streams longer */
	.prefill_chunk = 128,
	.create = cpu_create,
	.forward = cpu_forward,
	.destroy = cpu_destroy,
};

int qc_backend_block_bytes(const struct qc_model *m, int32_t block_tokens, enum qc_kv_dtype dt, uint64_t *out,
			   struct qc_err *err)
{
	if (dt == QC_KV_FP8) /* head_dim code bytes + 1 exponent byte per kv head and token */
		return qc_kv_block_bytes(m->cfg.n_layer, m->cfg.n_head_kv, m->cfg.head_dim + 1, 1, block_tokens,
					 out, err);
	return qc_kv_block_bytes(m->cfg.n_layer, m->cfg.n_head_kv, m->cfg.head_dim, sizeof(float),
				 block_tokens, out, err);
}
