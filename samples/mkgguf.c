/* mkgguf.c — synthetic, llama.cpp-loadable GGUF checkpoints for tests, samples, benchmarks.
 *
 * Owns: the command line (usage, option parsing, preset + override merging, shape
 * checks, bench presets' layer count) and main. The model itself: presets and
 * architectures (mkgguf_presets.c), the tensor plan (mkgguf_plan.c), seeded weights
 * (mkgguf_weights.c), the vocab (mkgguf_vocab.c), the keys (mkgguf_meta.c) and the
 * files (mkgguf_out.c); shared types in mkgguf.h.
 * Same seed, same bytes, whatever --split or --threads.
 * Non-goals: real tokenizers (BPE merges), trained weights, llama-quantize's own
 * K-quant search (mkgguf's K-quant encoder is a plain min/max one, quant/quant_k.c).
 */
#include "mkgguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define PROG "mkgguf"
#define MAX_SPLIT 65535                     /* split.count is a u16 */
#define TYPE_CHOICES "f32|f16|bf16|q8_0|q4_0|q4_k|q5_k|q6_k|q4_k_m|f8_a8"

/* ---- command line -------------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " --preset NAME -o OUT.gguf [options]\n"
		"       " PROG " --preset NAME --dry-run [options]\n"
		"\n"
		"Write a synthetic GGUF v3 checkpoint that llama.cpp can load: llama.cpp tensor\n"
		"names and shapes, the hparam keys it reads, a SentencePiece-style vocab\n"
		"(<unk> <s> </s>, <0x00>..<0xFF>, word pieces), and seeded weights (~N(0, 0.02);\n"
		"norm weights ~1 + N(0, 0.02)). Norms and biases (and the MoE router) are f32,\n"
		"every other matrix is --type. The same seed gives the same bytes whatever\n"
		"--split or --threads. The file appears atomically (temp file + rename);\n"
		"missing parent directories of OUT are created.\n"
		"\n"
		"presets:\n");
	for (size_t i = 0; i < qc_mkgguf_n_presets; i++)
		fprintf(f, "  %-10s %s\n", qc_mkgguf_presets[i].name, qc_mkgguf_presets[i].desc);
	fprintf(f,
		"\n"
		"options:\n"
		"  --type T         " TYPE_CHOICES " for the matrices (default f16);\n"
		"                   K-quants come from a plain min/max encoder (not llama-quantize's\n"
		"                   search); q4_k_m is llama-quantize's Q4_K_M mix for dense llama:\n"
		"                   output Q6_K, attn_v and ffn_down Q6_K on the first and last\n"
		"                   eighth of the layers and every third between (else Q4_K; attn_v\n"
		"                   Q5_K on 80-layer GQA models, llama.cpp's 70B), the rest Q4_K;\n"
		"                   rows must be multiples of 256 for K-quants; f8_a8 is W8A8 FP8\n"
		"                   (llm-compressor's FP8_DYNAMIC: a scale per row, dynamic per-token\n"
		"                   activations), this project's own type id 134: qconvert and qrun read\n"
		"                   such a file, llama.cpp does not (for benchmarks of the FP8 path)\n"
		"  --seed N         weight seed, unsigned 64-bit (default 0)\n"
		"  --split N        N shards OUT-00001-of-0000N.gguf ... (llama.cpp gguf-split\n"
		"                   layout: all keys in the first, split.no/count/tensors.count\n"
		"                   in every shard, tensors in order balanced by bytes);\n"
		"                   N <= 1 writes one plain file\n"
		"  --threads N      generator threads (default: online CPUs, at most %d)\n"
		"  --arch A         llama|mixtral|qwen2|qwen3|qwen2moe|qwen3moe|gemma2|phi3|gemma3 (mixtral = llama\n"
		"                   with experts, 8 experts / 2 used unless given; qwen2 adds q/k/v\n"
		"                   biases, qwen3 adds q/k norms; the moe variants add stacked\n"
		"                   experts (n_ff each), qwen2moe also a shared expert with a\n"
		"                   sigmoid gate; gemma2 adds post-attention/FFN norms, soft-caps\n"
		"                   and a window, ties its output, and needs --n-layer 26, 42\n"
		"                   or 46 to load in llama.cpp; phi3 fuses q|k|v into attn_qkv and\n"
		"                   gate|up into ffn_up and states a window and an original\n"
		"                   context; gemma3 is gemma2 with q/k norms and no soft-caps (a\n"
		"                   window, 5 local layers of 6 in the reader); the vocab is always\n"
		"                   the SPM one)\n"
		"  --attn-softcap F --final-softcap F  gemma2 soft-caps (default 50, 30)\n"
		"  --sliding-window N  gemma2/phi3/gemma3 window in tokens (default 4096 / 2047 / 512);\n"
		"                   other archs: write <arch>.attention.sliding_window (Mistral, Qwen2)\n"
		"  --rope-scaling S none|linear|yarn|llama3|longrope (llama3: a rope_freqs.weight\n"
		"                   tensor of Llama 3.1 factors, low/high frequency factors 1 and 4;\n"
		"                   longrope, phi3 only: rope_factors_short.weight 1 + 0.5 i/(n-1)\n"
		"                   and rope_factors_long.weight 1 + (F - 1) i/(n-1) for pair i of n,\n"
		"                   attn_factor sqrt(1 + ln(ctx/orig) / ln(orig)) as convert_hf_to_gguf)\n"
		"  --rope-factor F  scaling factor (default 4)\n"
		"  --weight-std F   std of matrices and biases (default 0.02; norms keep 0.02)\n"
		"  --tie-embeddings no output.weight (llama.cpp then uses token_embd)\n"
		"  --dry-run        write nothing: print the plan, one line per tensor (name, type,\n"
		"                   ne0 ne1 ne2, bytes), then \"total BYTES bytes in N tensors\"\n"
		"                   (tensor data, without the header and alignment padding)\n"
		"  --n-embd N  --n-layer N  --n-ff N  --n-head N  --n-head-kv N  --n-vocab N\n"
		"  --n-expert N  --n-expert-used N  --ctx N  --n-ff-shexp N (qwen2moe; default n_ff)\n"
		"  --rope-orig-ctx N  yarn/llama3/phi3 original context (default --ctx)\n"
		"                   override the preset's value (bench4g: an explicit --n-layer\n"
		"                   wins over its size rule)\n"
		"  -h, --help       this text\n"
		"\n"
		"Progress goes to stderr when it is a terminal; nothing is printed otherwise.\n"
		"Exit status: 0 ok, 1 failure, 2 bad usage.\n",
		MAX_THREADS);
}

static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
	char *end;
	if (!s || !*s)
		return false;
	long long v = strtoll(s, &end, 10);
	if (*end || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

static bool parse_u64(const char *s, uint64_t *out)
{
	char *end;
	if (!s || !*s || *s == '-')
		return false;
	unsigned long long v = strtoull(s, &end, 0);
	if (*end)
		return false;
	*out = v;
	return true;
}

/* Check the shape is one llama.cpp accepts and our quant types can encode. */
static int check_hparams(const struct opts *o, struct qc_err *err)
{
	const struct hparams *hp = &o->hp;
	int64_t be = qc_types[o->type].block_elems;
	if (hp->n_embd % hp->n_head || (hp->n_embd / hp->n_head) % 2)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "n_embd %lld must be n_head %lld times an even head size",
				  (long long)hp->n_embd, (long long)hp->n_head);
	if (hp->n_head % hp->n_head_kv)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "n_head %lld not a multiple of n_head_kv %lld",
				  (long long)hp->n_head, (long long)hp->n_head_kv);
	if (hp->n_embd % be || hp->n_ff % be)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "n_embd %lld and n_ff %lld must be multiples of %s's block size %lld",
				  (long long)hp->n_embd, (long long)hp->n_ff, qc_types[o->type].name,
				  (long long)be);
	if (hp->n_vocab < 259)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "n_vocab %lld < 259 (3 specials + 256 byte tokens)", (long long)hp->n_vocab);
	if (hp->n_expert_used > hp->n_expert || (hp->n_expert && !hp->n_expert_used))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "need 0 < n_expert_used <= n_expert, got %lld/%lld",
				  (long long)hp->n_expert_used, (long long)hp->n_expert);
	if (hp->n_expert && hp->arch != ARCH_LLAMA && !qc_mkgguf_has_experts(hp->arch))
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "experts are only generated for mixtral/qwen2moe/qwen3moe, not %s",
				  qc_mkgguf_arch_names[hp->arch]);
	if (qc_mkgguf_has_experts(hp->arch) && !hp->n_expert)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "--arch %s needs --n-expert > 0",
				  qc_mkgguf_arch_names[hp->arch]);
	if ((o->hx.rope_scaling == ROPE_LLAMA3 || o->hx.rope_scaling == ROPE_LONGROPE) &&
	    hp->n_embd / hp->n_head / 2 > MAX_ROPE_FREQS)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "head size too large for rope factors");
	/* llama.cpp's phi3 loader requires output.weight; its factor tables are phi3's */
	if (hp->arch == ARCH_PHI3 && o->hx.tie_embeddings)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "phi3 has an output.weight (llama.cpp requires it)");
	if ((o->hx.rope_scaling == ROPE_LONGROPE) != (hp->arch == ARCH_PHI3) && o->hx.rope_scaling != ROPE_NONE)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "--rope-scaling longrope is for --arch phi3, "
				  "and phi3 takes only longrope (its converter writes no rope.scaling.type)");
	return QC_OK;
}

/* bench-style presets: grow n_layer until the file reaches the preset's size. */
static int size_layers(struct opts *o, uint64_t min_bytes, struct qc_err *err)
{
	struct tensor_plan *p;
	size_t n;
	o->hp.n_layer = 1;
	int rc = qc_mkgguf_plan_tensors(&o->hp, &o->hx, o->type, o->mix, o->seed, &p, &n, err);
	if (rc)
		return rc;
	uint64_t one = qc_mkgguf_plan_bytes(p, n);
	free(p);
	o->hp.n_layer = 2;
	rc = qc_mkgguf_plan_tensors(&o->hp, &o->hx, o->type, o->mix, o->seed, &p, &n, err);
	if (rc)
		return rc;
	uint64_t per_layer = qc_mkgguf_plan_bytes(p, n) - one, fixed = one - per_layer;
	free(p);
	o->hp.n_layer = min_bytes > fixed ? (int64_t)((min_bytes - fixed + per_layer - 1) / per_layer) : 1;
	if (o->hp.n_layer < 1)
		o->hp.n_layer = 1;
	/* a mix's layers differ in size (use_more_bits): grow until the plan is big enough */
	for (;;) {
		rc = qc_mkgguf_plan_tensors(&o->hp, &o->hx, o->type, o->mix, o->seed, &p, &n, err);
		if (rc)
			return rc;
		uint64_t bytes = qc_mkgguf_plan_bytes(p, n);
		free(p);
		if (bytes >= min_bytes || !o->mix)
			return QC_OK;
		o->hp.n_layer++;
	}
}

static int parse_args(int argc, char **argv, struct opts *o, bool *help)
{
	const struct preset *pre = NULL;
	struct hparams ov;          /* overrides; -1 = not given */
	struct hparams_x ovx;
	int64_t *fields[] = { &ov.n_embd, &ov.n_layer, &ov.n_ff, &ov.n_head, &ov.n_head_kv,
			      &ov.n_vocab, &ov.n_expert, &ov.n_expert_used, &ov.n_ctx,
			      &ovx.n_ff_shexp, &ovx.rope_orig_ctx };
	static const char *const names[] = { "--n-embd", "--n-layer", "--n-ff", "--n-head",
					     "--n-head-kv", "--n-vocab", "--n-expert",
					     "--n-expert-used", "--ctx", "--n-ff-shexp",
					     "--rope-orig-ctx" };
	static const int64_t lo[] = { 2, 1, 1, 1, 1, 259, 0, 0, 1, 1, 1 };
	int rope_scaling = -1;
	double rope_factor = 4.0, weight_std = 0.0;
	bool tie = false;
	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
		*fields[i] = -1;
	int arch = -1;
	bool mixtral = false;
	const char *type_name = "f16";
	memset(o, 0, sizeof *o);
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	o->n_threads = ncpu < 1 ? 1 : ncpu > MAX_THREADS ? MAX_THREADS : (int)ncpu;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		int64_t x;
		bool matched = false;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			*help = true;
			return 0;
		}
		if (!strcmp(a, "--tie-embeddings")) {
			tie = true;
			continue;
		}
		if (!strcmp(a, "--dry-run")) {
			o->dry_run = true;
			continue;
		}
		for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
			if (strcmp(a, names[f]))
				continue;
			if (!parse_i64(val, lo[f], INT32_MAX, &x)) {
				fprintf(stderr, PROG ": %s needs an integer >= %lld\n", a, (long long)lo[f]);
				return 2;
			}
			*fields[f] = x;
			matched = true;
			i++;
		}
		if (matched)
			continue;
		if (!val && a[0] == '-') {
			fprintf(stderr, PROG ": %s: missing value or unknown option (try --help)\n", a);
			return 2;
		}
		if (!strcmp(a, "--preset")) {
			pre = NULL;
			for (size_t p = 0; p < qc_mkgguf_n_presets; p++)
				if (!strcmp(qc_mkgguf_presets[p].name, val))
					pre = &qc_mkgguf_presets[p];
			if (!pre) {
				fprintf(stderr, PROG ": unknown preset '%s' (try --help)\n", val);
				return 2;
			}
		} else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
			o->out = val;
		} else if (!strcmp(a, "--type")) {
			type_name = val;
		} else if (!strcmp(a, "--seed")) {
			if (!parse_u64(val, &o->seed)) {
				fprintf(stderr, PROG ": --seed needs an unsigned integer\n");
				return 2;
			}
		} else if (!strcmp(a, "--split")) {
			if (!parse_i64(val, 0, MAX_SPLIT, &x)) {
				fprintf(stderr, PROG ": --split needs an integer in 0..%d\n", MAX_SPLIT);
				return 2;
			}
			o->split = (int)x;
		} else if (!strcmp(a, "--threads")) {
			if (!parse_i64(val, 1, MAX_THREADS, &x)) {
				fprintf(stderr, PROG ": --threads needs an integer in 1..%d\n", MAX_THREADS);
				return 2;
			}
			o->n_threads = (int)x;
		} else if (!strcmp(a, "--arch")) {
			mixtral = !strcmp(val, "mixtral");
			arch = mixtral ? ARCH_LLAMA : -1;
			for (int k = 0; k < (int)(sizeof qc_mkgguf_arch_names / sizeof qc_mkgguf_arch_names[0]); k++)
				if (!strcmp(val, qc_mkgguf_arch_names[k]))
					arch = k;
			if (arch < 0) {
				fprintf(stderr, PROG ": unknown --arch '%s' (llama|mixtral|qwen2|qwen3|qwen2moe|qwen3moe|gemma2|phi3|gemma3)\n",
					val);
				return 2;
			}
		} else if (!strcmp(a, "--rope-scaling")) {
			static const char *const rs[] = { "none", "linear", "yarn", "llama3", "longrope" };
			rope_scaling = -1;
			for (int k = 0; k < (int)(sizeof rs / sizeof rs[0]); k++)
				if (!strcmp(val, rs[k]))
					rope_scaling = k;
			if (rope_scaling < 0) {
				fprintf(stderr, PROG ": unknown --rope-scaling '%s' (none|linear|yarn|llama3|longrope)\n", val);
				return 2;
			}
		} else if (!strcmp(a, "--attn-softcap") || !strcmp(a, "--final-softcap")) {
			char *end;
			double v = strtod(val, &end);
			if (*end || !(v > 0 && v < 1e6)) {
				fprintf(stderr, PROG ": %s needs a positive number\n", a);
				return 2;
			}
			*(!strcmp(a, "--attn-softcap") ? &o->hx.attn_softcap : &o->hx.final_softcap) = (float)v;
		} else if (!strcmp(a, "--sliding-window")) {
			if (!parse_i64(val, 1, INT32_MAX, &x)) {
				fprintf(stderr, PROG ": --sliding-window needs a positive integer\n");
				return 2;
			}
			o->hx.sliding_window = x;
		} else if (!strcmp(a, "--rope-factor") || !strcmp(a, "--weight-std")) {
			char *end;
			double v = strtod(val, &end);
			if (*end || !(v > 0 && v < 1e6)) {
				fprintf(stderr, PROG ": %s needs a positive number\n", a);
				return 2;
			}
			*(!strcmp(a, "--rope-factor") ? &rope_factor : &weight_std) = v;
		} else {
			fprintf(stderr, PROG ": unknown option '%s' (try --help)\n", a);
			return 2;
		}
		i++;
	}
	if (!pre || (!o->out && !o->dry_run)) {
		fprintf(stderr, PROG ": %s is required (try --help)\n", !pre ? "--preset" : "-o");
		return 2;
	}
	for (size_t m = 0; m < qc_mkgguf_n_mixes; m++)
		if (!strcasecmp(type_name, qc_mkgguf_mixes[m].name))
			o->mix = &qc_mkgguf_mixes[m];
	int t = o->mix ? (int)o->mix->base : qc_type_from_name(type_name);
	if (t < 0 || !qc_types[t].quant_row) {
		fprintf(stderr, PROG ": --type '%s' has no encoder (" TYPE_CHOICES ")\n", type_name);
		return 2;
	}
	o->type = (enum qc_type)t;
	o->preset = pre->name;
	o->hp = pre->hp;
	if (arch >= 0)
		o->hp.arch = (enum arch)arch;
	if (qc_mkgguf_has_experts(o->hp.arch))
		mixtral = true; /* the same expert defaults */
	if (mixtral && !o->hp.n_expert && ov.n_expert < 0) {
		o->hp.n_expert = 8;
		o->hp.n_expert_used = 2;
	}
	int64_t *dst[] = { &o->hp.n_embd, &o->hp.n_layer, &o->hp.n_ff, &o->hp.n_head, &o->hp.n_head_kv,
			   &o->hp.n_vocab, &o->hp.n_expert, &o->hp.n_expert_used, &o->hp.n_ctx,
			   &o->hx.n_ff_shexp, &o->hx.rope_orig_ctx };
	if (rope_scaling >= 0)
		o->hx.rope_scaling = (enum rope_scaling)rope_scaling;
	o->hx.rope_factor = (float)rope_factor;
	o->hx.weight_std = weight_std;
	o->hx.tie_embeddings = tie;
	for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++)
		if (*fields[f] >= 0)
			*dst[f] = *fields[f];
	if (mixtral && !o->hp.n_expert && ov.n_expert < 0)
		o->hp.n_expert = 8;
	if (mixtral && !o->hp.n_expert) {
		fprintf(stderr, PROG ": --arch %s needs --n-expert > 0\n",
			qc_mkgguf_has_experts(o->hp.arch) ? qc_mkgguf_arch_names[o->hp.arch] : "mixtral");
		return 2;
	}
	/* experts without an explicit used count: Mixtral's 2 (or all, if fewer) */
	if (ov.n_expert_used < 0 && o->hp.n_expert && !o->hp.n_expert_used)
		o->hp.n_expert_used = 2;
	if (ov.n_expert_used < 0 && o->hp.n_expert_used > o->hp.n_expert)
		o->hp.n_expert_used = o->hp.n_expert;
	o->min_file_bytes = ov.n_layer < 0 ? pre->min_file_bytes : 0;
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	struct qc_err err = { 0 };
	bool help = false;
	int rc = parse_args(argc, argv, &o, &help);
	if (help) {
		usage(stdout);
		return 0;
	}
	if (rc)
		return rc;
	if (o.min_file_bytes)
		o.hp.n_layer = 1;   /* placeholder until size_layers; check_hparams ignores it */
	rc = check_hparams(&o, &err);
	if (!rc && o.min_file_bytes)
		rc = size_layers(&o, o.min_file_bytes, &err);
	if (!rc)
		rc = o.dry_run ? qc_mkgguf_print_plan(&o, stdout, &err) : qc_mkgguf_write_model(&o, &err);
	if (rc) {
		qc_err_print(&err, PROG, stderr);
		return rc == QC_EINVAL || rc == QC_EUNSUPPORTED ? 2 : 1;
	}
	return 0;
}
