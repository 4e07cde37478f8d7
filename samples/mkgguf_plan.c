/* mkgguf_plan.c — mkgguf's tensor plan: llama.cpp's tensor names, shapes and types.
 *
 * Owns: the list of tensors for llama/mixtral/qwen2/qwen3/qwen2moe/qwen3moe
 * (llama-arch.cpp / llama-model.cpp load_tensors), with optional q/k/v biases, q/k
 * norms, stacked experts, a shared expert and Llama 3.1's rope_freqs.weight factors;
 * gemma2's and gemma3's post-attention/post-FFN norms (post_attention_norm,
 * post_ffw_norm) and always-tied output (llama.cpp reads token_embd for them),
 * gemma3's q/k norms; phi3's fused
 * attn_qkv (q rows, k rows, v rows) and ffn_up (n_ff gate rows, then n_ff up
 * rows; no ffn_gate), and its LongRoPE rope_factors_long/short.weight tables,
 * written first as convert_hf_to_gguf's generate_extra_tensors yields them.
 * Norms, biases and routers stay f32 (as llama.cpp's converter and quantizer keep
 * them); every other matrix has the chosen type, or a mix's (mkgguf_mix.c); with f8_a8
 * (W8A8 FP8) token_embd and output are f16, as W8A8 checkpoints keep them. Each tensor's seed comes from
 * --seed and its name, so plans of any layer count agree on shared tensors.
 */
#include "mkgguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cursor.h"

#define WEIGHT_STD 0.02                     /* std of every generated value */

static int plan_add(struct tensor_plan *p, size_t *n, size_t cap, const char *name, enum qc_type type,
		    enum init init, uint32_t n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
		    uint64_t seed, struct qc_err *err)
{
	QC_ASSERT(*n < cap);
	struct tensor_plan *t = &p[(*n)++];
	memset(t, 0, sizeof *t);
	snprintf(t->name, sizeof t->name, "%s", name);
	t->n_dims = n_dims;
	t->ne[0] = ne0;
	t->ne[1] = ne1;
	t->ne[2] = ne2;
	t->ne[3] = 1;
	/* W8A8 checkpoints quantize the linear layers only: llm-compressor's recipes leave
	   the embedding (not a Linear) and lm_head in float */
	if (qc_types[type].family == QC_FAMILY_W8A8 && (!strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight")))
		type = QC_TYPE_F16;
	t->type = type;
	t->init = init;
	t->seed = mix64(seed ^ fnv1a(name));
	int rc = qc_type_row_bytes(type, (uint64_t)ne0, &t->row_bytes);
	if (rc)
		return qc_err_set(err, QC_EINVAL, NULL, name, -1,
				  "row length %lld is not a multiple of %s's block size %lld",
				  (long long)ne0, qc_types[type].name, (long long)qc_types[type].block_elems);
	t->n_rows = (uint64_t)(ne1 * ne2);
	if (!qc_mul_ok(t->row_bytes, t->n_rows, &t->n_bytes))
		return qc_err_set(err, QC_ERANGE, NULL, name, -1, "tensor size overflows");
	return QC_OK;
}

/* Tensors per layer, for sizing the plan array. */
#define PER_LAYER_MAX 18

/* Llama 3.1 rope factors as convert_hf_to_gguf computes them (low/high frequency
 * factors 1 and 4, original context rope_orig_ctx), one per rotated pair. Static:
 * the plan points at it and mkgguf writes one model per run. */
static float rope_freqs_buf[MAX_ROPE_FREQS];
static float rope_short_buf[MAX_ROPE_FREQS], rope_long_buf[MAX_ROPE_FREQS];

static void llama3_rope_factors(const struct hparams *hp, const struct hparams_x *hx, int64_t hd)
{
	const double lo = 1.0, hi = 4.0, f = hx->rope_factor;
	const double old = (double)(hx->rope_orig_ctx ? hx->rope_orig_ctx : hp->n_ctx);
	for (int64_t i = 0; i < hd / 2; i++) {
		double freq = 1.0 / pow((double)hp->rope_base, (double)(2 * i) / (double)hd);
		double wavelen = 2.0 * M_PI / freq, r;
		if (wavelen < old / hi)
			r = 1.0;
		else if (wavelen > old / lo)
			r = f;
		else {
			double smooth = (old / wavelen - lo) / (hi - lo);
			r = 1.0 / ((1.0 - smooth) / f + smooth);
		}
		rope_freqs_buf[i] = (float)r;
	}
}

/* Synthetic LongRoPE tables (real ones come from a search, not a formula): both
 * rise linearly from 1 over the n = hd / 2 rotated pairs, short to 1.5, long to
 * rope_factor, so the two differ where the angles of short prompts matter. */
static void longrope_factors(const struct hparams_x *hx, int64_t hd)
{
	const int64_t n = hd / 2;
	for (int64_t i = 0; i < n; i++) {
		const double r = n > 1 ? (double)i / (double)(n - 1) : 0.0;
		rope_short_buf[i] = (float)(1.0 + 0.5 * r);
		rope_long_buf[i] = (float)(1.0 + ((double)hx->rope_factor - 1.0) * r);
	}
}

/* The two LongRoPE tables, first in the file as the converter writes them. */
static int plan_longrope(struct tensor_plan *p, size_t *n, size_t cap, const struct hparams_x *hx, int64_t hd,
			 uint64_t seed, struct qc_err *err)
{
	longrope_factors(hx, hd);
	int rc = plan_add(p, n, cap, "rope_factors_long.weight", QC_TYPE_F32, INIT_FIXED, 1, hd / 2, 1, 1, seed, err);
	if (rc)
		return rc;
	p[*n - 1].fixed = rope_long_buf;
	rc = plan_add(p, n, cap, "rope_factors_short.weight", QC_TYPE_F32, INIT_FIXED, 1, hd / 2, 1, 1, seed, err);
	if (!rc)
		p[*n - 1].fixed = rope_short_buf;
	return rc;
}

int qc_mkgguf_plan_tensors(const struct hparams *hp, const struct hparams_x *hx, enum qc_type wt,
			   const struct mix *mix, uint64_t seed, struct tensor_plan **out, size_t *n_out,
			   struct qc_err *err)
{
	size_t cap = 4 + (size_t)hp->n_layer * PER_LAYER_MAX, n = 0;
	struct tensor_plan *p = calloc(cap, sizeof *p);
	if (!p)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory planning tensors");
	int64_t e = hp->n_embd, ff = hp->n_ff, hd = hp->n_embd / hp->n_head;
	int64_t kv = hd * hp->n_head_kv, x = hp->n_expert;
	int64_t sh = hx->n_ff_shexp ? hx->n_ff_shexp : ff;
	const bool bias = hp->arch == ARCH_QWEN2 || hp->arch == ARCH_QWEN2MOE;
	const bool gemma3 = hp->arch == ARCH_GEMMA3;
	const bool qk_norm = hp->arch == ARCH_QWEN3 || hp->arch == ARCH_QWEN3MOE || gemma3;
	/* gemma2 and gemma3 share the post norms and the always-tied output */
	const bool gemma = hp->arch == ARCH_GEMMA2 || gemma3, phi3 = hp->arch == ARCH_PHI3;
	const enum qc_type f32 = QC_TYPE_F32;
	char nm[QC_GGUF_MAX_NAME];
	int rc = QC_OK;
	if (hx->rope_scaling == ROPE_LONGROPE)
		rc = plan_longrope(p, &n, cap, hx, hd, seed, err);
	if (!rc)
		rc = plan_add(p, &n, cap, "token_embd.weight", wt, INIT_WEIGHT, 2, e, hp->n_vocab, 1, seed, err);
	if (!rc && hx->rope_scaling == ROPE_LLAMA3) {
		llama3_rope_factors(hp, hx, hd);
		rc = plan_add(p, &n, cap, "rope_freqs.weight", f32, INIT_FIXED, 1, hd / 2, 1, 1, seed, err);
		p[n - 1].fixed = rope_freqs_buf;
	}
	for (int64_t l = 0; l < hp->n_layer && !rc; l++) {
#define T(suffix, type, init, nd, a, b, c)                                                       \
		if (!rc) {                                                                        \
			snprintf(nm, sizeof nm, "blk.%lld." suffix, (long long)l);                \
			rc = plan_add(p, &n, cap, nm, type, init, nd, a, b, c, seed, err);         \
		}
		T("attn_norm.weight", f32, INIT_NORM, 1, e, 1, 1)
		if (phi3) {
			T("attn_qkv.weight", wt, INIT_WEIGHT, 2, e, hd * hp->n_head + 2 * kv, 1)
		} else {
			T("attn_q.weight", wt, INIT_WEIGHT, 2, e, hd * hp->n_head, 1)
			T("attn_k.weight", wt, INIT_WEIGHT, 2, e, kv, 1)
			T("attn_v.weight", wt, INIT_WEIGHT, 2, e, kv, 1)
		}
		if (bias) {
			T("attn_q.bias", f32, INIT_BIAS, 1, e, 1, 1)
			T("attn_k.bias", f32, INIT_BIAS, 1, kv, 1, 1)
			T("attn_v.bias", f32, INIT_BIAS, 1, kv, 1, 1)
		}
		if (qk_norm) {
			T("attn_q_norm.weight", f32, INIT_NORM, 1, hd, 1, 1)
			T("attn_k_norm.weight", f32, INIT_NORM, 1, hd, 1, 1)
		}
		T("attn_output.weight", wt, INIT_WEIGHT, 2, hd * hp->n_head, e, 1)
		if (gemma)
			T("post_attention_norm.weight", f32, INIT_NORM, 1, e, 1, 1)
		T("ffn_norm.weight", f32, INIT_NORM, 1, e, 1, 1)
		if (x) {
			/* router stays f32, as llama.cpp's converter and quantizer keep it */
			T("ffn_gate_inp.weight", f32, INIT_WEIGHT, 2, e, x, 1)
			T("ffn_gate_exps.weight", wt, INIT_WEIGHT, 3, e, ff, x)
			T("ffn_up_exps.weight", wt, INIT_WEIGHT, 3, e, ff, x)
			T("ffn_down_exps.weight", wt, INIT_WEIGHT, 3, ff, e, x)
		}
		if (x && hp->arch == ARCH_QWEN2MOE) {
			/* shared expert; its gate is one f32 row, kept f32 as the quantizer does */
			T("ffn_gate_inp_shexp.weight", f32, INIT_WEIGHT, 1, e, 1, 1)
			T("ffn_gate_shexp.weight", wt, INIT_WEIGHT, 2, e, sh, 1)
			T("ffn_up_shexp.weight", wt, INIT_WEIGHT, 2, e, sh, 1)
			T("ffn_down_shexp.weight", wt, INIT_WEIGHT, 2, sh, e, 1)
		}
		if (phi3) {
			T("ffn_up.weight", wt, INIT_WEIGHT, 2, e, 2 * ff, 1)
			T("ffn_down.weight", wt, INIT_WEIGHT, 2, ff, e, 1)
		} else if (!x) {
			T("ffn_gate.weight", wt, INIT_WEIGHT, 2, e, ff, 1)
			T("ffn_up.weight", wt, INIT_WEIGHT, 2, e, ff, 1)
			T("ffn_down.weight", wt, INIT_WEIGHT, 2, ff, e, 1)
		}
		if (gemma)
			T("post_ffw_norm.weight", f32, INIT_NORM, 1, e, 1, 1)
#undef T
	}
	if (!rc)
		rc = plan_add(p, &n, cap, "output_norm.weight", f32, INIT_NORM, 1, e, 1, 1, seed, err);
	if (!rc && !hx->tie_embeddings && !gemma)
		rc = plan_add(p, &n, cap, "output.weight", wt, INIT_WEIGHT, 2, e, hp->n_vocab, 1, seed, err);
	if (!rc && mix)
		rc = qc_mkgguf_mix_apply(mix, hp, p, n, err);
	if (rc) {
		free(p);
		return rc;
	}
	for (size_t i = 0; i < n; i++)
		p[i].std = p[i].init == INIT_NORM || hx->weight_std <= 0 ? WEIGHT_STD : hx->weight_std;
	*out = p;
	*n_out = n;
	return QC_OK;
}

uint64_t qc_mkgguf_plan_bytes(const struct tensor_plan *p, size_t n)
{
	uint64_t s = 0;
	for (size_t i = 0; i < n; i++)
		s += p[i].n_bytes;
	return s;
}
