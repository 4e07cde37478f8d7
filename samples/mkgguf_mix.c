/* mkgguf_mix.c — llama-quantize's per-tensor type mixes, as rule tables (--type q4_k_m).
 *
 * Owns: which type each matrix of a mixed model gets. The rules are facts read in
 * llama.cpp c392e50 src/llama-quant.cpp, llama_tensor_get_type, for a dense llama
 * model (no code copied):
 *   - output.weight is Q6_K; with no output.weight (tied), token_embd.weight takes
 *     that rule instead (qs.has_output);
 *   - attn_v.weight and ffn_down.weight are Q6_K on the layers use_more_bits picks:
 *     i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2 (n layers; the first and last
 *     eighth and every third layer between), Q4_K elsewhere;
 *   - on llama.cpp's LLM_TYPE_70B (llama-model.cpp: llama, 80 layers, n_head_kv <
 *     n_head) an attn_v that would be Q4_K is Q5_K ("8 heads share attn_v");
 *   - every other matrix, token_embd included, is the mix's default Q4_K; norms and
 *     1-D tensors stay f32 (mkgguf_plan.c never gives them the matrix type).
 * Non-goals: other architectures and experts (llama.cpp has further rules for
 * 8-expert models, Falcon, fused attn_qkv, rows not a multiple of 256; they are
 * refused here rather than guessed), the other ftypes.
 */
#include "mkgguf.h"

#include <stdio.h>
#include <string.h>

#include "cursor.h"

/* One row: the matrix named `name`, less any "blk.N." (NULL: every other matrix). */
struct mix_rule {
	const char *name;
	enum qc_type type;          /* the usual choice */
	enum qc_type more_bits;     /* on layers use_more_bits picks */
	enum qc_type big;           /* replaces `type` (not more_bits) on LLM_TYPE_70B */
};

#define Q4K QC_TYPE_Q4_K
#define Q5K QC_TYPE_Q5_K
#define Q6K QC_TYPE_Q6_K

static const struct mix_rule q4_k_m_rules[] = {
	{ "output.weight",   Q6K, Q6K, Q6K },
	{ "attn_v.weight",   Q4K, Q6K, Q5K },
	{ "ffn_down.weight", Q4K, Q6K, Q4K },
	{ NULL,              Q4K, Q4K, Q4K },
};

const struct mix qc_mkgguf_mixes[] = {
	{ "q4_k_m", QC_TYPE_Q4_K, 15 /* LLAMA_FTYPE_MOSTLY_Q4_K_M */, q4_k_m_rules },
};

const size_t qc_mkgguf_n_mixes = sizeof qc_mkgguf_mixes / sizeof qc_mkgguf_mixes[0];

#undef Q4K
#undef Q5K
#undef Q6K

bool qc_mkgguf_use_more_bits(int64_t i_layer, int64_t n_layer)
{
	return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

static const struct mix_rule *find_rule(const struct mix_rule *r, const char *name)
{
	for (; r->name; r++)
		if (!strcmp(name, r->name))
			return r;
	return r;
}

enum qc_type qc_mkgguf_mix_type(const struct mix *mix, const struct hparams *hp, const char *name,
				bool has_output)
{
	const bool big = hp->arch == ARCH_LLAMA && hp->n_layer == 80 && hp->n_head_kv < hp->n_head;
	long long layer = -1;
	int at = 0;
	if (sscanf(name, "blk.%lld.%n", &layer, &at) < 1 || !at)
		layer = -1;
	const char *base = layer >= 0 ? name + at : name;
	if (!has_output && !strcmp(base, "token_embd.weight"))
		base = "output.weight";
	const struct mix_rule *r = find_rule(mix->rules, base);
	if (layer >= 0 && qc_mkgguf_use_more_bits(layer, hp->n_layer))
		return r->more_bits;
	return big ? r->big : r->type;
}

int qc_mkgguf_mix_apply(const struct mix *mix, const struct hparams *hp, struct tensor_plan *p,
			size_t n, struct qc_err *err)
{
	if (hp->arch != ARCH_LLAMA || hp->n_expert)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "--type %s follows llama-quantize's rules for dense llama models only, not %s%s",
				  mix->name, hp->n_expert ? "experts of " : "", qc_mkgguf_arch_names[hp->arch]);
	bool has_output = false;
	for (size_t i = 0; i < n; i++)
		has_output |= !strcmp(p[i].name, "output.weight");
	for (size_t i = 0; i < n; i++) {
		struct tensor_plan *t = &p[i];
		if (t->type != mix->base)
			continue;   /* norms, biases, routers, rope factors: f32 */
		t->type = qc_mkgguf_mix_type(mix, hp, t->name, has_output);
		if (qc_type_row_bytes(t->type, (uint64_t)t->ne[0], &t->row_bytes))
			return qc_err_set(err, QC_EINVAL, NULL, t->name, -1,
					  "row length %lld is not a multiple of %s's block size %lld",
					  (long long)t->ne[0], qc_types[t->type].name,
					  (long long)qc_types[t->type].block_elems);
		if (!qc_mul_ok(t->row_bytes, t->n_rows, &t->n_bytes))
			return qc_err_set(err, QC_ERANGE, NULL, t->name, -1, "tensor size overflows");
	}
	return QC_OK;
}
