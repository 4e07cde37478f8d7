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
 * before ·V, as ggml's mul_mat does with an f16 cache. Not emulated: the fp16
 * block sum of q8_1 (ggml's q4_1/q5_1 dots add m * fp16(d * sum q)).
 * Non-goals: SIMD intrinsics, threads (single-threaded reference), flash attention.
 * Reference: llama.cpp c392e50 build_llama, llm_build_kqv, llm_build_moe_ffn;
 * ggml rms_norm (double sum), rope NORM/NEOX cache (theta *= base^(-2/n_rot)), silu.
 */
#include "backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/fp16.h"

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
	uint8_t *qbuf;                /* one quantized activation row */
	float *row;                   /* (max_in) one decoded weight row */
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
static float dot(const float *a, const float *b, int64_t n)
{
	double acc[4] = {0};
	int64_t i = 0;
	for (; i + 4 <= n; i += 4)
		for (int j = 0; j < 4; j++)
			acc[j] += (double)a[i + j] * (double)b[i + j];
	for (; i < n; i++)
		acc[0] += (double)a[i] * (double)b[i];
	return (float)((acc[0] + acc[1]) + (acc[2] + acc[3]));
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

/* ggml's x86 quantize_row_q8_0 (AVX2 path, what llama.cpp's CPU build runs):
 * per 32 values id = 127 / amax, q = rint(x * id), d = fp16(amax / 127). The
 * reference encoder (qc_quant_row_Q8_0: id = 1 / d, roundf) picks a different
 * code now and then, which these random models amplify to 0.05 logits. */
static void round_q8_0_x86(const float *x, float *y, int64_t n)
{
	for (int64_t b = 0; b < n; b += 32) {
		float amax = 0.0f;
		for (int j = 0; j < 32; j++)
			amax = fmaxf(amax, fabsf(x[b + j]));
		const float d = qc_fp16_to_f32(qc_f32_to_fp16(amax / 127.0f));
		const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
		for (int j = 0; j < 32; j++)
			y[b + j] = d * rintf(x[b + j] * id);
	}
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
			round_q8_0_x86(src, dst, n_in);
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

/* y[t*ldy + r] = W_e[r] . x[t] for n_rows tokens (x rows are w->n_in long). */
static void matmul(struct cpu *c, const struct qc_mat *w, int64_t e, const float *x,
		   int64_t n_rows, float *y, int64_t ldy)
{
	const qc_dequant_row_fn dq = qc_types[w->type].dequant_row;
	const float *xa = round_act(c, w->type, x, w->n_in, n_rows);

	for (int64_t r = 0; r < w->n_out; r++) {
		dq(qc_mat_row(w, e, r), c->row, w->n_in);
		for (int64_t t = 0; t < n_rows; t++)
			y[t * ldy + r] = dot(c->row, xa + t * w->n_in, w->n_in);
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
			c->scores[j] = dot(c->qh, kj, hd) * scale;
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
	free(c->qbuf);
	free(c->row);
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
	c->qbuf = malloc((size_t)c->max_in * 8 + 64);
	c->row = falloc((size_t)c->max_in);
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
	    !c->xr || !c->qbuf || !c->row || !c->scores || !c->qh || !c->router || !c->sel ||
	    !c->selw || !c->etok || !c->eslot || !c->ex || !c->eout || !c->moe || !c->lx) {
		const size_t bb = c->block_floats * sizeof(float);
		cpu_destroy(c);
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1,
				  "out of memory for the CPU backend (%d K/V blocks of %zu bytes)",
				  p->n_blocks, bb);
	}
	*state = c;
	return QC_OK;
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
