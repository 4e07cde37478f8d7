/* test_engine_arch.c — the CPU engine's architectures beyond llama, against llama.cpp.
 *
 * Models: tests/data/ref/models.tsv lists synthetic GGUFs (qwen2, qwen3 tied,
 * qwen2moe with a shared expert, qwen3moe, llama + YaRN, llama + llama3 rope
 * factors, gemma2, phi3 with and without LongRoPE tables (the long one chosen
 * at the test's context 128 and llama.cpp's 256 when the original context is 32,
 * the short one at 384); f32 and quantized, K-quants from mkgguf's own encoder too),
 * each regenerated here with mkgguf and checked
 * against its recorded size and XXH3 (the generator must not drift), converted
 * to a cpu bundle (MoE: fused and unfused) and run: ids must equal
 * tests/data/ref/NAME.json (llama.cpp's own greedy run, tools/llref) up to the
 * first reference margin below MARGIN_MIN, first-step top-10 logits within the
 * tolerance test_engine.c uses. Each model also runs once with the feature it
 * exercises switched off (biases, q/k norms, renormalization, shared expert,
 * YaRN, rope factors; gemma2: its window, its attention soft-cap; phi3: its window,
 * the order of its fused gate|up halves, the LongRoPE table chosen for the
 * context, the LongRoPE attention factor) and must then fail that comparison: the reference can
 * tell. Act-order: a model whose weight columns are permuted, with the
 * "<base>.act_perm" tensors, gives the unpermuted model's logits bit for bit;
 * without the permutation, or with its inverse, it does not; a non-permutation
 * is refused at load.
 * A real trained model too: a models.tsv row whose ARGS read "fetch SCRIPT" takes
 * its GGUF from SCRIPT (SmolLM2-135M-Instruct Q4_1, tools/fetch_smollm2.sh; a SKIP
 * line when it cannot be fetched). Its reference also gives first-step log-probs
 * (first_step_logsumexp): ours must be within TOL_LOGPROB (docs/accuracy.md), and
 * its perplexity (qrun perplexity's rule, which is llama-perplexity's) on the text,
 * chunks and window of tests/data/ref/NAME-ppl.txt within TOL_PPL of the
 * llama-perplexity estimate recorded there; with its breaker, off by more.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <xxhash.h>

#include "check.h"
#include "engine_ref.h"
#include "convert.h"
#include "engine.h"
#include "gguf.h"
#include "gguf_write.h"
#include "plan.h"
#include "vocab.h"

#define TOL_FLOAT 5e-3 /* test_engine.c: f32/f16/bf16 weights */
#define TOL_QUANT 1e-4 /* test_engine.c: quantized weights, activations rounded as ggml */
#define TOL_LOGPROB 1e-3 /* first-step log-probs of the top 10, where the reference has them */
#define TOL_PPL 1e-3     /* perplexity relative to llama-perplexity's (issue 20: within 0.1%) */

static int convert_to(const char *in, const char *out, unsigned flags)
{
	struct qc_convert_opts o = {.in = in, .out = out, .target = QC_TARGET_CPU,
				    .alignment = QC_BUNDLE_ALIGN, .plan_flags = flags};
	struct qc_err err = {0};
	int rc = qc_convert_gguf(&o, NULL, &err);
	CHECK(rc == QC_OK, "convert %s: %s", in, err.msg);
	return rc;
}

/* Breakers (ref_breaker_fn): a feature switched off in a loaded model (the negative control). */
static void no_biases(struct qc_model *m)
{
	for (int l = 0; l < m->cfg.n_layer; l++)
		m->layers[l].bq = m->layers[l].bk = m->layers[l].bv = NULL;
}

static void no_qk_norm(struct qc_model *m)
{
	for (int l = 0; l < m->cfg.n_layer; l++)
		m->layers[l].q_norm = m->layers[l].k_norm = NULL;
}

static void flip_norm_w(struct qc_model *m)
{
	m->cfg.expert_norm_w = !m->cfg.expert_norm_w;
}

static void no_shared_expert(struct qc_model *m)
{
	for (int l = 0; l < m->cfg.n_layer; l++)
		m->layers[l].gate_shexp.data = NULL;
}

static void no_linear_scaling(struct qc_model *m)
{
	m->cfg.rope_freq_scale = 1.0f;
}

static void no_yarn(struct qc_model *m)
{
	m->cfg.rope_ext_factor = 0.0f;
}

static void no_rope_factors(struct qc_model *m)
{
	m->rope_freqs = NULL;
}

static void no_window(struct qc_model *m)
{
	m->cfg.sliding_window = 0;
}

static void no_attn_softcap(struct qc_model *m)
{
	m->cfg.attn_softcap = 0.0f;
}

/* Phi-3: the fused ffn_up's halves taken the other way round */
static void gate_up_swapped(struct qc_model *m)
{
	for (int l = 0; l < m->cfg.n_layer; l++) {
		const struct qc_mat g = m->layers[l].ffn_gate;
		m->layers[l].ffn_gate = m->layers[l].ffn_up;
		m->layers[l].ffn_up = g;
	}
}

/* Phi-3 LongRoPE: the other table than llama.cpp's choice, or no attn_factor */
static void short_for_long(struct qc_model *m)
{
	m->rope_long = m->rope_short;
}

static void long_for_short(struct qc_model *m)
{
	m->rope_short = m->rope_long;
}

static void no_rope_attn_factor(struct qc_model *m)
{
	m->cfg.rope_attn_factor = 1.0f;
}

static void rope_base_1e4(struct qc_model *m)
{
	m->cfg.rope_freq_base = 10000.0f;
}

/* Greedy-decode every reference prompt on bundle; breaker (may be NULL) edits
 * the model first. Returns QC_OK and *out, or an engine error. */
static int run_bundle(const char *bundle, const struct ref *ref, ref_breaker_fn breaker,
		      struct outcome *out, bool *all_float)
{
	struct run r = {.n = ref->n};
	struct qc_engine_opts o;
	struct qc_engine *e = NULL;
	struct qc_model *m = NULL;

	memset(out, 0, sizeof *out);
	qc_engine_opts_init(&o);
	o.max_running = ref->n;
	o.max_seq_tokens = 128;
	o.n_threads = 1;
	/* decode steps summed as llama.cpp sums them (matters on the real model only) */
	o.attn_order = QC_ATTN_ORDER_LLAMA;
	int rc = ref_engine_open(bundle, &o, &r, breaker, &e, &m);
	if (rc)
		return rc;
	const struct qc_layer *L = &m->layers[0];
	const struct qc_mat *ws[] = {&L->wq, &L->ffn_up, &L->up_exps, &m->output};
	*all_float = true;
	for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
		if (ws[i]->data && qc_types[ws[i]->type].family != QC_FAMILY_FLOAT)
			*all_float = false;
	rc = ref_score_prompts(e, m, ref, &r, out, bundle);
	qc_engine_free(e);
	return rc;
}

struct model_case {
	const char *name;     /* tests/data/ref/NAME.json, models.tsv row */
	ref_breaker_fn breaker;   /* the feature this model checks, switched off */
	const char *broken;   /* what the breaker does */
};

/* ---- perplexity on the real model ------------------------------------------ */

/* tests/data/ref/NAME-ppl.txt: "# ..." comments (the llama-perplexity command)
 * and one line "FILE CHUNKS CTX PPL": llama-perplexity's final estimate. */
struct ppl_ref {
	char file[256];
	int chunks, ctx;
	double ppl;
};

static int load_ppl_ref(const char *path, struct ppl_ref *r)
{
	FILE *f = fopen(path, "r");
	char line[512];
	int n = 0;
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (line[0] != '#' && line[0] != '\n' &&
		    sscanf(line, "%255s %d %d %lf", r->file, &r->chunks, &r->ctx, &r->ppl) == 4)
			n++;
	fclose(f);
	return n == 1 ? 0 : -1;
}

/* qrun perplexity's computation (runtime/qrun_main.c): windows of ctx tokens, BOS
 * first when the vocabulary adds it, second halves scored. Returns the perplexity
 * or -1 on an engine error (reported). */
static double bundle_ppl(const char *bundle, const struct ppl_ref *pr, ref_breaker_fn breaker)
{
	struct qc_engine_opts o;
	struct qc_err err = {0};
	struct qc_engine *e = NULL;
	int32_t *ids = NULL;
	size_t n_ids = 0, len = 0;
	double nll = 0.0, ppl = -1.0;
	char *text = check_read_file(pr->file, &len);
	CHECK(text != NULL, "%s unreadable", pr->file);
	if (!text)
		return -1.0;
	qc_engine_opts_init(&o);
	o.max_running = 64; /* as qrun perplexity */
	o.max_seq_tokens = pr->ctx;
	o.n_threads = 2;
	int rc = qc_engine_new(bundle, &o, &e, &err);
	CHECK(rc == QC_OK, "%s: engine: %s", bundle, err.msg);
	if (rc)
		goto out;
	if (breaker)
		breaker((struct qc_model *)(uintptr_t)qc_engine_model(e));
	rc = qc_engine_tokenize(e, text, len, true, &ids, &n_ids, &err);
	CHECK(rc == QC_OK, "%s: tokenize: %s", pr->file, err.msg);
	CHECK(rc || n_ids >= (size_t)pr->chunks * (size_t)pr->ctx, "%s: %zu tokens, fewer than %d windows",
	      pr->file, n_ids, pr->chunks);
	if (rc || n_ids < (size_t)pr->chunks * (size_t)pr->ctx)
		goto out;
	const struct qc_vocab *v = qc_engine_vocab(e);
	const int32_t first = pr->ctx / 2;
	for (int w = 0; w < pr->chunks && rc == QC_OK; w++) {
		int32_t *win = ids + (size_t)w * (size_t)pr->ctx;
		double one = 0.0;
		if (v && qc_vocab_add_bos(v))
			win[0] = qc_vocab_bos(v);
		rc = qc_engine_score(e, win, pr->ctx, first, &one, &err);
		nll += one;
	}
	CHECK(rc == QC_OK, "%s: score: %s", bundle, err.msg);
	if (rc == QC_OK)
		ppl = exp(nll / ((double)pr->chunks * (pr->ctx - 1 - first)));
out:
	qc_engine_free(e);
	free(ids);
	free(text);
	return ppl;
}

/* Within TOL_PPL (relative) of llama-perplexity's; with breaker, off by more. */
static void check_ppl(const char *bundle, const struct model_case *mc)
{
	struct ppl_ref pr;
	char path[512];
	snprintf(path, sizeof path, "tests/data/ref/%s-ppl.txt", mc->name);
	CHECK(load_ppl_ref(path, &pr) == 0, "%s unreadable or not one FILE CHUNKS CTX PPL line", path);
	if (access(pr.file, R_OK)) {
		printf("  %-18s perplexity SKIP: %s not readable\n", mc->name, pr.file);
		return;
	}
	const double good = bundle_ppl(bundle, &pr, NULL);
	if (good < 0)
		return;
	const double rel = fabs(good / pr.ppl - 1.0);
	CHECK(rel <= TOL_PPL, "%s: perplexity %.4f, llama-perplexity %.4f (%.3f%% off, tol %.1f%%)", mc->name,
	      good, pr.ppl, 100 * rel, 100 * TOL_PPL);
	const double bad = bundle_ppl(bundle, &pr, mc->breaker);
	const double rel_bad = fabs(bad / pr.ppl - 1.0);
	CHECK(bad >= 0 && rel_bad > TOL_PPL, "%s with %s: perplexity %.4f still within %.1f%%: the check is blind",
	      mc->name, mc->broken, bad, 100 * TOL_PPL);
	printf("  %-18s perplexity %.4f, llama-perplexity %.4f (%d x %d, %s): %.4f%% off (tol %.1f%%); %s: %.4f\n",
	       mc->name, good, pr.ppl, pr.chunks, pr.ctx, pr.file, 100 * rel, 100 * TOL_PPL, mc->broken, bad);
}

/* Each models.tsv row must have a case here (and the reverse). */
static const struct model_case cases[] = {
	{"qwen2-f32", no_biases, "no q/k/v biases"},
	{"qwen2-q8_0", no_biases, "no q/k/v biases"},
	{"qwen2-linear-f32", no_linear_scaling, "no linear rope scaling"},
	{"qwen3-f32", no_qk_norm, "no q/k norms"},
	{"qwen3-q4_0", no_qk_norm, "no q/k norms"},
	{"qwen2moe-f32", no_shared_expert, "no shared expert"},
	{"qwen2moe-q8_0", flip_norm_w, "top-k weights renormalized"},
	{"qwen3moe-f32", flip_norm_w, "top-k weights not renormalized"},
	{"qwen3moe-q4_0", flip_norm_w, "top-k weights not renormalized"},
	{"llama-yarn-f32", no_yarn, "no YaRN ramp"},
	{"llama-yarn-q4_0", no_yarn, "no YaRN ramp"},
	{"llama3-rope-f32", no_rope_factors, "no rope factors"},
	{"llama3-rope-q8_0", no_rope_factors, "no rope factors"},
	{"llama-yarn-q4_k_m", no_yarn, "no YaRN ramp"},
	{"llama-yarn-q5_k", no_yarn, "no YaRN ramp"},
	{"gemma2-f32", no_window, "no sliding window"},
	{"gemma2-q8_0", no_attn_softcap, "no attention soft-cap"},
	{"phi3-f32", no_window, "no sliding window"},
	{"phi3-q8_0", gate_up_swapped, "ffn_up halves swapped"},
	{"phi3-longrope-f32", short_for_long, "short rope factors at a long context"},
	{"phi3-longrope-q4_0", no_rope_attn_factor, "no LongRoPE attention factor"},
	{"phi3-shortrope-f32", long_for_short, "long rope factors at a short context"},
	{"smollm2-q4_1", rope_base_1e4, "rope base 1e4 instead of 1e5"},
};

static const struct model_case *find_case(const char *name)
{
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		if (!strcmp(cases[i].name, name))
			return &cases[i];
	return NULL;
}

static const char *bin_dir(void)
{
	const char *b = getenv("QC_BIN");
	return b && *b ? b : "build/bin";
}

/* Regenerate tmpdir/NAME.gguf with mkgguf; its bytes must be the recorded ones. */
/* ARGS "fetch SCRIPT": the GGUF SCRIPT prints (a download cache, never deleted);
 * 1 (after a SKIP line) when it cannot be fetched, else 0 or -1 as make_gguf. */
static int fetch_gguf(const char *name, const char *script, char *path, size_t path_len)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "sh %s", script);
	FILE *f = popen(cmd, "r");
	path[0] = 0;
	if (f && !fgets(path, (int)path_len, f))
		path[0] = 0;
	const int st = f ? pclose(f) : -1;
	path[strcspn(path, "\n")] = 0;
	if (st != 0 || !path[0]) {
		printf("  %-18s SKIP: %s could not fetch it (exit %d; no network?)\n", name, script,
		       st > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : st);
		return 1;
	}
	return 0;
}

static int make_gguf(const char *tmpdir, const char *name, const char *args, uint64_t want_size,
		     uint64_t want_xxh3, char *path, size_t path_len)
{
	char cmd[2048];
	const bool fetched = !strncmp(args, "fetch ", 6);
	int st;
	if (fetched) {
		if ((st = fetch_gguf(name, args + 6, path, path_len)))
			return st;
	} else {
		snprintf(path, path_len, "%s/%s.gguf", tmpdir, name);
		snprintf(cmd, sizeof cmd, "%s/mkgguf %s --threads 1 -o %s", bin_dir(), args, path);
		st = system(cmd);
		CHECK(st == 0, "%s failed (%d)", cmd, st);
	}
	size_t len = 0;
	char *data = st ? NULL : check_read_file(path, &len);
	CHECK(st || data != NULL, "%s unreadable", path);
	if (!data) {
		if (!fetched)
			unlink(path);
		return -1;
	}
	uint64_t h = XXH3_64bits(data, len);
	free(data);
	CHECK(len == want_size && h == want_xxh3,
	      "%s: %zu bytes, XXH3 %016llx; recorded %llu bytes, %016llx (mkgguf output drifted: "
	      "regenerate tests/data/ref, see its README)",
	      name, len, (unsigned long long)h, (unsigned long long)want_size,
	      (unsigned long long)want_xxh3);
	if (len == want_size && h == want_xxh3)
		return 0;
	if (!fetched)
		unlink(path);
	return -1;
}

static void run_model(const char *tmpdir, const struct model_case *mc, const char *args,
		      uint64_t size, uint64_t xxh3)
{
	char gguf[512], refp[512], bundle[512];
	struct ref ref;

	snprintf(refp, sizeof refp, "tests/data/ref/%s.json", mc->name);
	CHECK(load_ref(refp, &ref) == 0, "%s unreadable", refp);
	if (make_gguf(tmpdir, mc->name, args, size, xxh3, gguf, sizeof gguf))
		return;
	const bool fetched = !strncmp(args, "fetch ", 6);
	const bool moe = strstr(mc->name, "moe") != NULL;
	for (int fused = 1; fused >= (moe ? 0 : 1); fused--) {
		snprintf(bundle, sizeof bundle, "%s/%s.qb", tmpdir, mc->name);
		if (convert_to(gguf, bundle, fused ? QC_PLAN_FUSE_MOE : 0))
			break;
		struct outcome good, bad;
		bool fl = true;
		if (run_bundle(bundle, &ref, NULL, &good, &fl) == QC_OK) {
			const double tol = fl ? TOL_FLOAT : TOL_QUANT;
			CHECK(good.mismatches == 0, "%s: ids differ from llama.cpp in %d of %d prompts",
			      mc->name, good.mismatches, ref.n);
			CHECK(good.top10_err <= tol, "%s: first-step top-10 error %.2e > %.0e", mc->name,
			      good.top10_err, tol);
			CHECK(good.logprob_err <= TOL_LOGPROB, "%s: first-step log-prob error %.2e > %.0e",
			      mc->name, good.logprob_err, TOL_LOGPROB);
			printf("  %-18s%s ids %d/%d prompts, %3d steps; top10 max err %.2e (tol %g)", mc->name,
			       fused ? "" : " (unfused)", ref.n - good.mismatches, ref.n, good.compared,
			       good.top10_err, tol);
			if (good.logprob_err > 0.0)
				printf("; log-prob max err %.2e (tol %g)", good.logprob_err, TOL_LOGPROB);
			if (fused && run_bundle(bundle, &ref, mc->breaker, &bad, &fl) == QC_OK) {
				CHECK(bad.mismatches > 0 || bad.top10_err > 100 * tol,
				      "%s with %s still matches llama.cpp (err %.2e): the check is blind",
				      mc->name, mc->broken, bad.top10_err);
				printf("\n    broken (%s): err %.2e, %d prompts differ", mc->broken,
				       bad.top10_err, bad.mismatches);
			}
			printf("\n");
		}
		if (fetched && fused)
			check_ppl(bundle, mc);
		unlink(bundle);
	}
	if (!fetched)
		unlink(gguf);
}

/* ---- act-order permutations ------------------------------------------------ */

/* Copy every key of g into w (values as stored). */
static int copy_kvs(const struct qc_gguf *g, struct qc_gguf_writer *w, struct qc_err *err)
{
	int rc = QC_OK;
	for (uint64_t i = 0; i < g->n_kv && !rc; i++) {
		const struct qc_gguf_kv *kv = &g->kv[i];
		char key[256];
		snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.p);
		const struct qc_gguf_value *v = &kv->val;
		switch (v->type) { /* the value types mkgguf writes */
		case QC_GGUF_UINT32: rc = qc_gguf_writer_add_u32(w, key, (uint32_t)v->u, err); break;
		case QC_GGUF_INT32: rc = qc_gguf_writer_add_i32(w, key, (int32_t)v->i, err); break;
		case QC_GGUF_UINT16: rc = qc_gguf_writer_add_u16(w, key, (uint16_t)v->u, err); break;
		case QC_GGUF_FLOAT32: rc = qc_gguf_writer_add_f32(w, key, (float)v->f, err); break;
		case QC_GGUF_BOOL: rc = qc_gguf_writer_add_bool(w, key, v->b, err); break;
		case QC_GGUF_STRING: rc = qc_gguf_writer_add_strn(w, key, v->s.p, v->s.len, err); break;
		case QC_GGUF_ARRAY:
			if (v->arr.elem == QC_GGUF_STRING) {
				char **s = calloc(v->arr.n, sizeof *s);
				for (uint64_t k = 0; s && k < v->arr.n; k++)
					s[k] = strndup(v->arr.items[k].s.p, v->arr.items[k].s.len);
				rc = s ? qc_gguf_writer_add_arr_str(w, key, (const char *const *)s, v->arr.n, err)
				       : QC_ENOMEM;
				for (uint64_t k = 0; s && k < v->arr.n; k++)
					free(s[k]);
				free(s);
			} else {
				rc = qc_gguf_writer_add_arr(w, key, v->arr.elem, v->arr.raw, v->arr.n, err);
			}
			break;
		default:
			rc = qc_err_set(err, QC_EUNSUPPORTED, g->path, NULL, -1, "key %s: type %d", key,
					(int)v->type);
		}
	}
	return rc;
}

enum perm_mode {
	PERM_RIGHT,   /* columns permuted, the permutation written */
	PERM_MISSING, /* columns permuted, no permutation written */
	PERM_INVERSE, /* columns permuted, the inverse written */
	PERM_BROKEN,  /* a permutation tensor with a repeated index */
};

/* Which weights get permuted, and whether each expert gets its own order. */
static const struct { const char *name; bool per_expert; } permuted[] = {
	{"blk.0.attn_q.weight", false},         {"blk.0.attn_output.weight", false},
	{"blk.0.ffn_down_exps.weight", true},   {"blk.1.ffn_gate_exps.weight", false},
	{"blk.1.ffn_up_exps.weight", false},    {"blk.1.ffn_down_shexp.weight", false},
	{"output.weight", false},
};

static uint32_t lcg(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return *s >> 8;
}

/* Fisher-Yates with a seed; gate and up of one layer must share their order, so
 * the seed comes from the layer-and-kind part of the name only. */
static void make_perm(int32_t *p, int64_t n, uint32_t seed)
{
	for (int64_t i = 0; i < n; i++)
		p[i] = (int32_t)i;
	for (int64_t i = n - 1; i > 0; i--) {
		int64_t j = (int64_t)(lcg(&seed) % (uint32_t)(i + 1));
		int32_t t = p[i];
		p[i] = p[j];
		p[j] = t;
	}
}

/* Write src with the permuted[] weights' columns reordered: W'[r][i] = W[r][p[i]],
 * so that W' . x[p] = W . x, and (per mode) their "<base>.act_perm" tensors. */
static int write_permuted(const char *src, const char *dst, enum perm_mode mode)
{
	struct qc_err err = {0};
	struct qc_gguf_model *gm = NULL;
	int rc = qc_gguf_model_open(src, &gm, &err);
	CHECK(rc == QC_OK, "%s: %s", src, err.msg);
	if (rc)
		return rc;
	struct qc_gguf_writer *w = qc_gguf_writer_new(3, 0);
	void *owned[64];
	int n_owned = 0;
	rc = w ? copy_kvs(gm->files[0], w, &err) : QC_ENOMEM;
	for (uint64_t i = 0; i < gm->n_tensors && !rc; i++) {
		const struct qc_gguf_tensor *t = gm->tensors[i];
		const void *data = qc_gguf_model_data(gm, t);
		size_t k = 0;
		while (k < sizeof permuted / sizeof permuted[0] && strcmp(permuted[k].name, t->name))
			k++;
		if (k < sizeof permuted / sizeof permuted[0]) {
			/* one element per block (f32, bf16): columns move as whole elements */
			const size_t es = (size_t)qc_types[t->type].block_bytes;
			QC_ASSERT(qc_types[t->type].block_elems == 1 && n_owned + 3 <= 64);
			const int64_t K = t->ne[0], R = t->ne[1], X = t->ne[2];
			const int64_t n_perm = permuted[k].per_expert ? X : 1;
			int32_t *perm = malloc(sizeof(int32_t) * (size_t)(K * n_perm));
			uint8_t *wd = malloc(t->n_bytes);
			owned[n_owned++] = perm;
			owned[n_owned++] = wd;
			if (!perm || !wd) {
				rc = QC_ENOMEM;
				break;
			}
			const char *kind = strchr(t->name + 4, '.') ? strchr(t->name + 4, '.') : t->name;
			uint32_t seed = 7;
			for (const char *c = t->name; c < kind; c++) /* "blk.N" part */
				seed = seed * 31u + (uint8_t)*c;
			seed += strstr(t->name, "down") ? 1000u : strstr(t->name, "attn") ? 2000u : 0u;
			seed += strstr(t->name, "output") ? 3000u : 0u;
			for (int64_t e = 0; e < n_perm; e++)
				make_perm(perm + e * K, K, seed + (uint32_t)e);
			const uint8_t *sw = data;
			for (int64_t e = 0; e < X; e++)
				for (int64_t r = 0; r < R; r++)
					for (int64_t c = 0; c < K; c++) {
						const int32_t *p = perm + (n_perm > 1 ? e : 0) * K;
						memcpy(wd + (size_t)((e * R + r) * K + c) * es,
						       sw + (size_t)((e * R + r) * K + p[c]) * es, es);
					}
			rc = qc_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, wd, &err);
			if (mode == PERM_INVERSE) { /* inv[p[i]] = i, per expert */
				int32_t *inv = malloc(sizeof(int32_t) * (size_t)(K * n_perm));
				owned[n_owned++] = inv;
				for (int64_t e = 0; inv && e < n_perm; e++)
					for (int64_t c = 0; c < K; c++)
						inv[e * K + perm[e * K + c]] = (int32_t)c;
				perm = inv;
			}
			if (mode == PERM_BROKEN && perm)
				perm[K - 1] = perm[0];
			if (!rc && mode != PERM_MISSING) {
				char pn[QC_GGUF_MAX_NAME];
				snprintf(pn, sizeof pn, "%.*s.act_perm", (int)(strlen(t->name) - 7), t->name);
				int64_t ne[4] = {K, n_perm, 1, 1};
				rc = perm ? qc_gguf_writer_add_tensor(w, pn, QC_TYPE_I32, n_perm > 1 ? 2 : 1, ne,
								      perm, &err)
					  : QC_ENOMEM;
			}
		} else {
			rc = qc_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, data, &err);
		}
	}
	if (!rc)
		rc = qc_gguf_writer_write_file(w, dst, &err);
	CHECK(rc == QC_OK, "writing %s: %s", dst, err.msg);
	qc_gguf_writer_free(w);
	for (int i = 0; i < n_owned; i++)
		free(owned[i]);
	qc_gguf_model_close(gm);
	return rc;
}

struct logit_log {
	uint64_t id[4];
	float *rows;      /* (4 prompts, 8 steps, n_vocab) */
	int32_t n_vocab;
};

static void log_logits(void *ctx, uint64_t id, int32_t step, const float *logits, int32_t n_vocab)
{
	struct logit_log *l = ctx;
	for (int p = 0; p < 4; p++)
		if (l->id[p] == id && step < 8)
			memcpy(l->rows + ((size_t)p * 8 + (size_t)step) * (size_t)n_vocab, logits,
			       sizeof(float) * (size_t)n_vocab);
}

/* Float activations, 1 thread, 4 prompts x 8 steps; logits into l (caller frees). */
static int run_logits(const char *bundle, struct logit_log *l, struct qc_err *err)
{
	static const int32_t prompt[] = {1, 270, 280, 290, 265, 100, 5, 17};
	struct qc_engine_opts o;
	struct qc_engine *e = NULL;
	qc_engine_opts_init(&o);
	o.act_round = QC_ACT_ROUND_NONE;
	o.n_threads = 1;
	o.max_running = 4;
	o.max_seq_tokens = 64;
	o.on_logits = log_logits;
	o.cb_ctx = l;
	int rc = qc_engine_new(bundle, &o, &e, err);
	if (rc)
		return rc;
	l->n_vocab = qc_engine_model(e)->cfg.n_vocab;
	l->rows = calloc((size_t)4 * 8 * (size_t)l->n_vocab, sizeof(float));
	for (int p = 0; p < 4 && !rc; p++) {
		struct qc_engine_request q = {.prompt = prompt, .n_prompt = 2 + 2 * p, .max_tokens = 8,
					      .ignore_eos = true};
		qc_sampler_params_init(&q.sampling);
		q.sampling.temperature = 0.0f;
		rc = qc_engine_add(e, &q, &l->id[p], err);
	}
	while (!rc && qc_engine_has_work(e))
		rc = qc_engine_step(e, err);
	qc_engine_free(e);
	return rc;
}

static double max_diff(const struct logit_log *a, const struct logit_log *b)
{
	double d = 0.0;
	for (size_t i = 0; i < (size_t)4 * 8 * (size_t)a->n_vocab; i++)
		d = fmax(d, fabs((double)a->rows[i] - (double)b->rows[i]));
	return d;
}

/* The permuted model against the plain one (a qwen2moe: dense, stacked-expert
 * [K, E], fused gate/up and shared-expert weights, output). bf16 weights take the
 * double-sum kernel, whose result does not depend on the order of the terms
 * (exact products, rounded once to float): equal bit for bit. f32 weights take
 * the float-lane kernel, where reordering columns reorders float additions:
 * equal within TOL_FLOAT. A missing or inverted gather is off by whole logits. */
static void act_perm_gathers(const char *tmpdir, const char *type)
{
	char gguf[512], pg[512], bundle[512], cmd[1024];
	struct qc_err err = {0};
	struct logit_log base = {0};
	const bool exact = !strcmp(type, "bf16");

	snprintf(gguf, sizeof gguf, "%s/perm-base.gguf", tmpdir);
	snprintf(cmd, sizeof cmd, "%s/mkgguf --preset tiny --arch qwen2moe --n-expert 4 --n-expert-used 2 "
		 "--n-ff 64 --n-ff-shexp 128 --type %s --weight-std 0.5 --seed 13 --threads 1 -o %s",
		 bin_dir(), type, gguf);
	int st = system(cmd);
	CHECK(st == 0, "%s failed (%d)", cmd, st);
	if (st)
		return;
	snprintf(bundle, sizeof bundle, "%s/perm.qb", tmpdir);
	snprintf(pg, sizeof pg, "%s/perm.gguf", tmpdir);
	if (convert_to(gguf, bundle, QC_PLAN_FUSE_MOE) == QC_OK) {
		int rc = run_logits(bundle, &base, &err);
		CHECK(rc == QC_OK, "unpermuted: %s", err.msg);
	}
	static const char *const what[] = {"with the permutation", "without the permutation",
					   "with the inverse permutation", "with a broken permutation"};
	for (int mode = PERM_RIGHT; base.rows && mode <= PERM_BROKEN; mode++) {
		struct logit_log got = {0};
		if (write_permuted(gguf, pg, (enum perm_mode)mode) ||
		    convert_to(pg, bundle, QC_PLAN_FUSE_MOE))
			continue;
		memset(&err, 0, sizeof err);
		int rc = run_logits(bundle, &got, &err);
		if (mode == PERM_BROKEN) {
			CHECK(rc == QC_EFORMAT && strstr(err.tensor, ".act_perm"),
			      "a repeated index must be refused at load, naming the tensor (rc %d: %s)", rc,
			      err.msg);
			printf("  act_perm %s %s: refused (%s)\n", type, what[mode], err.msg);
		} else if (rc == QC_OK) {
			const double d = max_diff(&base, &got);
			if (mode == PERM_RIGHT && exact)
				CHECK(d == 0.0, "%s act-order model differs from the plain one by %.3g", type, d);
			else if (mode == PERM_RIGHT)
				CHECK(d <= TOL_FLOAT, "%s act-order model differs from the plain one by %.3g",
				      type, d);
			else
				CHECK(d > 100 * TOL_FLOAT, "%s %s: logits still match (max diff %.3g): blind",
				      type, what[mode], d);
			printf("  act_perm %s %s: max logit diff vs unpermuted %.3g\n", type, what[mode], d);
		} else {
			CHECK(rc == QC_OK, "%s: %s", what[mode], err.msg);
		}
		free(got.rows);
	}
	free(base.rows);
	unlink(bundle);
	unlink(pg);
	unlink(gguf);
}

/* The comparison helpers must trip on wrong expectations. */
static void checkers_fail_on_wrong_input(void)
{
	struct ref_prompt rp = {0};
	int32_t got[N_GEN];
	for (int i = 0; i < N_GEN; i++) {
		rp.ids[i] = got[i] = i;
		rp.margins[i] = 1.0;
	}
	rp.margins[9] = 0.01;
	CHECK(steps_to_compare(&rp) == 9, "margin cut");
	got[4] = 77;
	CHECK(first_mismatch(got, N_GEN, rp.ids, 9) == 4, "a wrong id must be caught");
	got[4] = 4;
	got[12] = 77;
	CHECK(first_mismatch(got, N_GEN, rp.ids, 9) < 0, "after the margin cut ids are free");
	float lg[16] = {0};
	for (int i = 0; i < 10; i++) {
		rp.top_ids[i] = i;
		rp.top_logits[i] = 2.0;
		lg[i] = 2.0f;
	}
	lg[6] = 2.01f;
	CHECK(top10_err(lg, &rp) > TOL_FLOAT, "a logit off by 0.01 must fail the float tolerance");
	rp.lse = NAN;
	CHECK(logprob_err(lg, 16, &rp) == 0.0, "no reference log-sum-exp: nothing to compare");
	lg[6] = 2.0f;
	rp.lse = 2.0 + log(10.0 + 6.0 * exp(-2.0)); /* lg: ten 2s, six 0s */
	CHECK(logprob_err(lg, 16, &rp) < 1e-6, "log-probs of a known distribution (%.2e)",
	      logprob_err(lg, 16, &rp));
	rp.lse += 0.002;
	CHECK(logprob_err(lg, 16, &rp) > TOL_LOGPROB, "a log-sum-exp off by 2e-3 must fail");
}

int main(void)
{
	char tmpl[] = "/tmp/qc-test-arch-XXXXXX";
	clock_t t0 = clock();

	checkers_fail_on_wrong_input();
	const char *tmpdir = mkdtemp(tmpl);
	CHECK(tmpdir != NULL, "mkdtemp");
	char *tsv = check_read_file("tests/data/ref/models.tsv", NULL);
	CHECK(tsv != NULL, "tests/data/ref/models.tsv unreadable (run from the repository root)");
	if (!tmpdir || !tsv) {
		free(tsv);
		return check_report("test_engine_arch");
	}
	int n_rows = 0;
	printf("model (ids: prompts equal to llama.cpp up to the first margin < %.2f)\n", MARGIN_MIN);
	for (char *line = strtok(tsv, "\n"); line; line = strtok(NULL, "\n")) {
		char name[64], hash[32], llama[64];
		unsigned long long size;
		int off = 0;
		if (line[0] == '#')
			continue;
		if (sscanf(line, "%63s %llu %31s %63s %n", name, &size, hash, llama, &off) != 4 || !off) {
			CHECK(0, "models.tsv: bad row '%s'", line);
			continue;
		}
		const uint64_t h = strtoull(hash, NULL, 16);
		const struct model_case *mc = find_case(name);
		CHECK(mc != NULL, "models.tsv row %s has no case in this test", name);
		if (mc)
			run_model(tmpdir, mc, line + off, size, h);
		n_rows++;
	}
	act_perm_gathers(tmpdir, "bf16");
	act_perm_gathers(tmpdir, "f32");
	CHECK(n_rows == (int)(sizeof cases / sizeof cases[0]), "models.tsv has %d rows, %d cases",
	      n_rows, (int)(sizeof cases / sizeof cases[0]));
	free(tsv);
	rmdir(tmpdir);
	printf("%.1f s CPU\n", (double)(clock() - t0) / CLOCKS_PER_SEC);
	return check_report("test_engine_arch");
}
