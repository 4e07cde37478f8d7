/* hf_names.c — the per-architecture tensor list (see hf_names.h). */
#include "hf_names.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct list {
	struct qc_hf_tspec *v;
	size_t n, cap;
};

static struct qc_hf_tspec *add(struct list *l, enum qc_hf_tkind kind, int64_t ne0, int64_t ne1, const char *gguf,
			       const char *hf_fmt, ...) __attribute__((format(printf, 6, 7)));
static struct qc_hf_tspec *add(struct list *l, enum qc_hf_tkind kind, int64_t ne0, int64_t ne1, const char *gguf,
			       const char *hf_fmt, ...)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		struct qc_hf_tspec *v = realloc(l->v, cap * sizeof *v);
		if (!v)
			return NULL;
		l->v = v;
		l->cap = cap;
	}
	struct qc_hf_tspec *s = &l->v[l->n++];
	memset(s, 0, sizeof *s);
	snprintf(s->gguf, sizeof s->gguf, "%s", gguf);
	va_list ap;
	va_start(ap, hf_fmt);
	vsnprintf(s->hf, sizeof s->hf, hf_fmt, ap);
	va_end(ap);
	s->kind = kind;
	s->ne0 = ne0;
	s->ne1 = ne1;
	s->pair = -1;
	return s;
}

/* Widths a per-layer table row names (resolved per config by dim_of). */
enum dim { D_E, D_Q, D_KV, D_HD, D_FF, D_QKV, D_FF2, D_ONE };

/* Tensors of one layer of a family without experts or biases: the GGUF suffix
 * after "blk.N.", the HF name after "<root>.layers.N." (a matrix: its module), the
 * ggml shape, and whether the row needs the arch's q/k norms. */
struct layer_row {
	const char *gguf, *hf;
	enum qc_hf_tkind kind;
	enum dim ne0, ne1;
	bool qk_norm_only;
};

/* Gemma 2/3 (llama.cpp tensor_mapping: the pre-FFN norm is ffn_norm). */
static const struct layer_row gemma_layer[] = {
	{"attn_norm.weight", "input_layernorm.weight", QC_HF_T_VECTOR, D_E, D_ONE, false},
	{"attn_q.weight", "self_attn.q_proj", QC_HF_T_MATRIX, D_E, D_Q, false},
	{"attn_k.weight", "self_attn.k_proj", QC_HF_T_MATRIX, D_E, D_KV, false},
	{"attn_v.weight", "self_attn.v_proj", QC_HF_T_MATRIX, D_E, D_KV, false},
	{"attn_output.weight", "self_attn.o_proj", QC_HF_T_MATRIX, D_Q, D_E, false},
	{"attn_q_norm.weight", "self_attn.q_norm.weight", QC_HF_T_VECTOR, D_HD, D_ONE, true},
	{"attn_k_norm.weight", "self_attn.k_norm.weight", QC_HF_T_VECTOR, D_HD, D_ONE, true},
	{"post_attention_norm.weight", "post_attention_layernorm.weight", QC_HF_T_VECTOR, D_E, D_ONE, false},
	{"ffn_norm.weight", "pre_feedforward_layernorm.weight", QC_HF_T_VECTOR, D_E, D_ONE, false},
	{"ffn_gate.weight", "mlp.gate_proj", QC_HF_T_MATRIX, D_E, D_FF, false},
	{"ffn_up.weight", "mlp.up_proj", QC_HF_T_MATRIX, D_E, D_FF, false},
	{"ffn_down.weight", "mlp.down_proj", QC_HF_T_MATRIX, D_FF, D_E, false},
	{"post_ffw_norm.weight", "post_feedforward_layernorm.weight", QC_HF_T_VECTOR, D_E, D_ONE, false},
};

/* Phi-3: qkv_proj holds q, k, v rows and gate_up_proj the gate rows then the up
 * rows, the order llama.cpp's attn_qkv and ffn_up keep (no reordering). */
static const struct layer_row phi3_layer[] = {
	{"attn_norm.weight", "input_layernorm.weight", QC_HF_T_VECTOR, D_E, D_ONE, false},
	{"attn_qkv.weight", "self_attn.qkv_proj", QC_HF_T_MATRIX, D_E, D_QKV, false},
	{"attn_output.weight", "self_attn.o_proj", QC_HF_T_MATRIX, D_Q, D_E, false},
	{"ffn_norm.weight", "post_attention_layernorm.weight", QC_HF_T_VECTOR, D_E, D_ONE, false},
	{"ffn_up.weight", "mlp.gate_up_proj", QC_HF_T_MATRIX, D_E, D_FF2, false},
	{"ffn_down.weight", "mlp.down_proj", QC_HF_T_MATRIX, D_FF, D_E, false},
};

static const struct {
	enum qc_hf_layer_names names;
	const struct layer_row *rows;
	size_t n;
} layer_tables[] = {
	{QC_HF_NAMES_GEMMA, gemma_layer, sizeof gemma_layer / sizeof gemma_layer[0]},
	{QC_HF_NAMES_PHI3, phi3_layer, sizeof phi3_layer / sizeof phi3_layer[0]},
};

static int64_t dim_of(const struct qc_hf_config *c, enum dim d)
{
	const int64_t q = c->n_head * c->head_dim, kv = c->n_head_kv * c->head_dim;
	const int64_t v[] = {
		[D_E] = c->n_embd, [D_Q] = q, [D_KV] = kv, [D_HD] = c->head_dim,
		[D_FF] = c->n_ff, [D_QKV] = q + 2 * kv, [D_FF2] = 2 * c->n_ff, [D_ONE] = 1,
	};
	return v[d];
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* One layer from a table (names other than QC_HF_NAMES_LLAMA). */
static int add_table_layer(struct list *l, const struct qc_hf_config *c, int il, const struct layer_row *rows, size_t n)
{
	char g[QC_HF_NAME_MAX];
	for (size_t i = 0; i < n; i++) {
		const struct layer_row *r = &rows[i];
		if (r->qk_norm_only && !c->arch->qk_norm)
			continue;
		snprintf(g, sizeof g, "blk.%d.%s", il, r->gguf);
		struct qc_hf_tspec *s = add(l, r->kind, dim_of(c, r->ne0), dim_of(c, r->ne1), g, "%s.layers.%d.%s", c->root,
					    il, r->hf);
		if (!s)
			return QC_ENOMEM;
		s->plus_one = c->arch->norm_plus_one && r->kind == QC_HF_T_VECTOR && ends_with(r->gguf, "norm.weight");
	}
	return QC_OK;
}

#define GG(fmt) (snprintf(g, sizeof g, fmt, il), g)

static int add_layer(struct list *l, const struct qc_hf_config *c, int il)
{
	char g[QC_HF_NAME_MAX];
	const struct qc_hf_arch *a = c->arch;
	int64_t E = c->n_embd, hd = c->head_dim, q = c->n_head * hd, kv = c->n_head_kv * hd;
	char L[64];
	snprintf(L, sizeof L, "%s.layers", c->root);
	for (size_t i = 0; i < sizeof layer_tables / sizeof layer_tables[0]; i++)
		if (layer_tables[i].names == a->names)
			return add_table_layer(l, c, il, layer_tables[i].rows, layer_tables[i].n);
	struct qc_hf_tspec *s;
	int perm_q = a->permute_qk ? (int)c->n_head : 0, perm_k = a->permute_qk ? (int)c->n_head_kv : 0;

	if (!add(l, QC_HF_T_VECTOR, E, 1, GG("blk.%d.attn_norm.weight"), "%s.%d.input_layernorm.weight", L, il))
		return QC_ENOMEM;
	if (!(s = add(l, QC_HF_T_MATRIX, E, q, GG("blk.%d.attn_q.weight"), "%s.%d.self_attn.q_proj", L, il)))
		return QC_ENOMEM;
	s->perm_heads = perm_q;
	if (!(s = add(l, QC_HF_T_MATRIX, E, kv, GG("blk.%d.attn_k.weight"), "%s.%d.self_attn.k_proj", L, il)))
		return QC_ENOMEM;
	s->perm_heads = perm_k;
	if (!add(l, QC_HF_T_MATRIX, E, kv, GG("blk.%d.attn_v.weight"), "%s.%d.self_attn.v_proj", L, il) ||
	    !add(l, QC_HF_T_MATRIX, q, E, GG("blk.%d.attn_output.weight"), "%s.%d.self_attn.o_proj", L, il))
		return QC_ENOMEM;
	if (c->attn_bias) {
		if (!(s = add(l, QC_HF_T_VECTOR, q, 1, GG("blk.%d.attn_q.bias"), "%s.%d.self_attn.q_proj.bias", L, il)))
			return QC_ENOMEM;
		s->perm_heads = perm_q;
		if (!(s = add(l, QC_HF_T_VECTOR, kv, 1, GG("blk.%d.attn_k.bias"), "%s.%d.self_attn.k_proj.bias", L, il)))
			return QC_ENOMEM;
		s->perm_heads = perm_k;
		if (!add(l, QC_HF_T_VECTOR, kv, 1, GG("blk.%d.attn_v.bias"), "%s.%d.self_attn.v_proj.bias", L, il))
			return QC_ENOMEM;
	}
	/* Llama's attention_bias also puts a bias on o_proj (Qwen's q/k/v biases do not) */
	if (c->attn_bias && !a->qkv_bias &&
	    !add(l, QC_HF_T_VECTOR, E, 1, GG("blk.%d.attn_output.bias"), "%s.%d.self_attn.o_proj.bias", L, il))
		return QC_ENOMEM;
	if (a->qk_norm &&
	    (!add(l, QC_HF_T_VECTOR, hd, 1, GG("blk.%d.attn_q_norm.weight"), "%s.%d.self_attn.q_norm.weight", L, il) ||
	     !add(l, QC_HF_T_VECTOR, hd, 1, GG("blk.%d.attn_k_norm.weight"), "%s.%d.self_attn.k_norm.weight", L, il)))
		return QC_ENOMEM;
	if (!add(l, QC_HF_T_VECTOR, E, 1, GG("blk.%d.ffn_norm.weight"), "%s.%d.post_attention_layernorm.weight", L, il))
		return QC_ENOMEM;

	if (a->moe == QC_HF_MOE_NONE) {
		if (!add(l, QC_HF_T_MATRIX, E, c->n_ff, GG("blk.%d.ffn_gate.weight"), "%s.%d.mlp.gate_proj", L, il) ||
		    !add(l, QC_HF_T_MATRIX, E, c->n_ff, GG("blk.%d.ffn_up.weight"), "%s.%d.mlp.up_proj", L, il) ||
		    !add(l, QC_HF_T_MATRIX, c->n_ff, E, GG("blk.%d.ffn_down.weight"), "%s.%d.mlp.down_proj", L, il))
			return QC_ENOMEM;
		return QC_OK;
	}
	/* experts: Mixtral w1 = gate, w3 = up, w2 = down */
	bool mx = a->moe == QC_HF_MOE_MIXTRAL;
	const char *blk = mx ? "block_sparse_moe" : "mlp";
	const char *gate = mx ? "w1" : "gate_proj", *up = mx ? "w3" : "up_proj", *down = mx ? "w2" : "down_proj";
	int64_t F = c->n_ff_expert, X = c->n_expert;
	if (!add(l, QC_HF_T_MATRIX, E, X, GG("blk.%d.ffn_gate_inp.weight"), "%s.%d.%s.gate", L, il, blk))
		return QC_ENOMEM;
	size_t gi = l->n;
	if (!(s = add(l, QC_HF_T_MATRIX, E, F, GG("blk.%d.ffn_gate_exps.weight"), "%s.%d.%s.experts.%%d.%s", L, il, blk, gate)))
		return QC_ENOMEM;
	s->n_expert = (int)X;
	if (!(s = add(l, QC_HF_T_MATRIX, E, F, GG("blk.%d.ffn_up_exps.weight"), "%s.%d.%s.experts.%%d.%s", L, il, blk, up)))
		return QC_ENOMEM;
	s->n_expert = (int)X;
	l->v[gi].pair = (int)(l->n - 1);
	if (!(s = add(l, QC_HF_T_MATRIX, F, E, GG("blk.%d.ffn_down_exps.weight"), "%s.%d.%s.experts.%%d.%s", L, il, blk, down)))
		return QC_ENOMEM;
	s->n_expert = (int)X;
	if (a->shared_expert) {
		int64_t S = c->n_ff_shared;
		if (!add(l, QC_HF_T_MATRIX, E, 1, GG("blk.%d.ffn_gate_inp_shexp.weight"), "%s.%d.mlp.shared_expert_gate", L, il) ||
		    !add(l, QC_HF_T_MATRIX, E, S, GG("blk.%d.ffn_gate_shexp.weight"), "%s.%d.mlp.shared_expert.gate_proj", L, il) ||
		    !add(l, QC_HF_T_MATRIX, E, S, GG("blk.%d.ffn_up_shexp.weight"), "%s.%d.mlp.shared_expert.up_proj", L, il) ||
		    !add(l, QC_HF_T_MATRIX, S, E, GG("blk.%d.ffn_down_shexp.weight"), "%s.%d.mlp.shared_expert.down_proj", L, il))
			return QC_ENOMEM;
	}
	return QC_OK;
}

#undef GG

int qc_hf_names_build(const struct qc_hf_config *c, struct qc_hf_tspec **out, size_t *n, struct qc_err *err)
{
	struct list l = { 0 };
	int rc = QC_OK;
	*out = NULL;
	*n = 0;
	struct qc_hf_tspec *s;
	if (!add(&l, QC_HF_T_MATRIX, c->n_embd, c->n_vocab, "token_embd.weight", "%s.embed_tokens", c->root))
		rc = QC_ENOMEM;
	for (int il = 0; !rc && il < c->n_layer; il++)
		rc = add_layer(&l, c, il);
	if (!rc && !(s = add(&l, QC_HF_T_VECTOR, c->n_embd, 1, "output_norm.weight", "%s.norm.weight", c->root)))
		rc = QC_ENOMEM;
	if (!rc)
		s->plus_one = c->arch->norm_plus_one;
	/* tied: transformers ignores a stored lm_head, so do we */
	if (!rc && !c->tie_embeddings && !add(&l, QC_HF_T_MATRIX, c->n_embd, c->n_vocab, "output.weight", "%s", c->head))
		rc = QC_ENOMEM;
	if (rc) {
		free(l.v);
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	}
	*out = l.v;
	*n = l.n;
	return QC_OK;
}

void qc_hf_names_expert(const struct qc_hf_tspec *s, int e, char *buf, size_t len)
{
	const char *p = strstr(s->hf, "%d");
	if (!p) {
		snprintf(buf, len, "%s", s->hf);
		return;
	}
	snprintf(buf, len, "%.*s%d%s", (int)(p - s->hf), s->hf, e, p + 2);
}

int64_t qc_hf_perm_src(int64_t r, int64_t hd)
{
	int64_t h = r / hd, k = r % hd, half = hd / 2;
	/* GGUF index k = i*2 + j holds HF index j*half + i */
	return h * hd + (k % 2) * half + k / 2;
}
