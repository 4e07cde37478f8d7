/* test_engine_hf.c — Hugging Face checkpoints of Gemma 2, Gemma 3 (text, and inside
 * Gemma3ForConditionalGeneration) and Phi-3 (plain, LongRoPE, and Phi-4-mini's RoPE on
 * 3/4 of each head), converted by qconvert and run on the CPU engine, against
 * transformers.
 *
 * The checkpoints and references come from transformers' own classes
 * (tests/gen/make_hf_arch_ref.py and make_gemma3_ref.py, pinned in
 * tests/gen/requirements-gemma3.txt; tests/data/ref/README.md): each folder of
 * tests/data/hf/ is converted with qc_convert_hf and greedy-decoded with float
 * activations; ids must equal transformers' up to its first margin below
 * MARGIN_MIN, first-step top-10 logits within TOL_FLOAT and log-probs within
 * TOL_LOGPROB (why wider than test_engine_arch.c's: below). Then one feature at a
 * time is broken in the loaded model, each standing for a conversion fact the
 * converter must get right (Gemma's 1 + w norms, gate before up in Phi-3's
 * gate_up_proj, which LongRoPE table a context gets, the attention factor, the
 * rotated part of a head (partial_rotary_factor), the soft-caps, the window), and
 * the comparison must fail: the reference can tell.
 * The JSON reader, the run and the comparison rules are engine_ref.h's.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "engine_ref.h"
#include "convert.h"
#include "engine.h"
#include "gguf.h"
#include "hf_convert.h"

#define TOL_FLOAT 5e-3   /* test_engine_arch.c: float weights */
/* First-step log-probs of the top 10: transformers keeps K/V in float32, this
 * engine in binary16 (as llama.cpp); on gemma3-bf16 that alone moves log-probs by
 * up to 2.8e-3 (test_engine_gemma3.c), so the bound is its 5e-3 here too. */
#define TOL_LOGPROB 5e-3

/* ---- breakers: one conversion fact undone in a loaded model ---------------- */

/* A vector of the model as writable floats (vec_store is the model's own heap). */
static float *wr(const float *v)
{
	return (float *)(uintptr_t)v;
}

static void sub_one(const float *v, int64_t n)
{
	for (int64_t i = 0; v && i < n; i++)
		wr(v)[i] -= 1.0f;
}

/* Gemma norms as HF stores them (w, not 1 + w): what skipping the + 1 would give */
static void norms_without_one(struct qc_model *m)
{
	const struct qc_model_config *c = &m->cfg;
	for (int l = 0; l < c->n_layer; l++) {
		struct qc_layer *L = &m->layers[l];
		sub_one(L->attn_norm, c->n_embd);
		sub_one(L->ffn_norm, c->n_embd);
		sub_one(L->attn_post_norm, c->n_embd);
		sub_one(L->ffn_post_norm, c->n_embd);
		sub_one(L->q_norm, c->head_dim);
		sub_one(L->k_norm, c->head_dim);
	}
	sub_one(m->output_norm, c->n_embd);
}

static void no_attn_softcap(struct qc_model *m)
{
	m->cfg.attn_softcap = 0.0f;
}

static void no_final_softcap(struct qc_model *m)
{
	m->cfg.final_softcap = 0.0f;
}

static void no_window(struct qc_model *m)
{
	m->cfg.sliding_window = 0;
}

/* gate_up_proj's halves taken the other way round */
static void gate_up_swapped(struct qc_model *m)
{
	for (int l = 0; l < m->cfg.n_layer; l++) {
		struct qc_mat t = m->layers[l].ffn_gate;
		m->layers[l].ffn_gate = m->layers[l].ffn_up;
		m->layers[l].ffn_up = t;
	}
}

/* the other LongRoPE table for the same context */
static void tables_swapped(struct qc_model *m)
{
	const float *t = m->rope_long;
	m->rope_long = m->rope_short;
	m->rope_short = t;
}

static void no_attn_factor(struct qc_model *m)
{
	m->cfg.rope_attn_factor = 1.0f;
}

/* RoPE over the whole head, as a converter that ignored partial_rotary_factor would
 * make it; the tables' last factor stands in for the pairs they do not have */
static void whole_head_rotated(struct qc_model *m)
{
	static float tab[2][256];
	const float *src[2] = {m->rope_long, m->rope_short};
	const int n = m->cfg.rope_dim / 2, hn = m->cfg.head_dim / 2;
	if (hn > 256)
		return; /* not broken: the comparison then passes and the blind check reports it */
	for (int k = 0; k < 2 && src[k]; k++)
		for (int i = 0; i < hn; i++)
			tab[k][i] = src[k][i < n ? i : n - 1];
	if (m->rope_long) {
		m->rope_long = tab[0];
		m->rope_short = tab[1];
	}
	m->cfg.rope_dim = m->cfg.head_dim;
}

struct breaker {
	ref_breaker_fn fn;
	const char *what;
};

#define MAX_BREAKERS 4

static const struct hf_case {
	const char *folder;        /* tests/data/hf/<folder> */
	const char *ref;           /* tests/data/ref/<ref>.json */
	int32_t seq_tokens;        /* the engine's per-sequence context */
	struct breaker breakers[MAX_BREAKERS];
} cases[] = {
	{"gemma2", "hf-gemma2", 128,
	 {{norms_without_one, "norms as w, not 1 + w"}, {no_attn_softcap, "no attention soft-cap"},
	  {no_final_softcap, "no final soft-cap"}, {no_window, "no sliding window"}}},
	{"gemma3", "gemma3-bf16", 128, {{norms_without_one, "norms as w, not 1 + w"}, {no_window, "no sliding window"}}},
	{"gemma3-cg", "gemma3-bf16", 128, {{norms_without_one, "norms as w, not 1 + w"}}},
	{"phi3", "hf-phi3", 128, {{gate_up_swapped, "gate_up_proj halves swapped"}, {no_window, "no sliding window"}}},
	/* 64 = original_max_position_embeddings: the short table, as transformers for
	 * sequences of at most 64 positions */
	{"phi3-longrope", "hf-phi3-longrope-short", 64,
	 {{tables_swapped, "the long table at a short context"}, {no_attn_factor, "attention factor 1"},
	  {gate_up_swapped, "gate_up_proj halves swapped"}}},
	{"phi3-longrope", "hf-phi3-longrope-long", 128,
	 {{tables_swapped, "the short table at a long context"}, {no_attn_factor, "attention factor 1"}}},
	/* Phi-4-mini's shape: RoPE on 12 of 16 dims per head, tables of 6 factors */
	{"phi3-partial", "hf-phi3-partial-short", 64,
	 {{whole_head_rotated, "RoPE on the whole head"}, {tables_swapped, "the long table at a short context"},
	  {no_attn_factor, "attention factor 1"}}},
	{"phi3-partial", "hf-phi3-partial-long", 128,
	 {{whole_head_rotated, "RoPE on the whole head"}, {tables_swapped, "the short table at a long context"}}},
};

static void run_case(const char *tmpdir, const struct hf_case *k)
{
	char in[256], refp[256], bundle[512];
	struct ref ref;
	struct outcome good, bad;
	struct qc_err err = {0};

	snprintf(in, sizeof in, "tests/data/hf/%s", k->folder);
	snprintf(refp, sizeof refp, "tests/data/ref/%s.json", k->ref);
	snprintf(bundle, sizeof bundle, "%s/%s.qb", tmpdir, k->folder);
	CHECK(load_ref(refp, &ref) == 0, "%s unreadable or malformed", refp);
	for (int p = 0; p < ref.n; p++)
		CHECK(!isnan(ref.p[p].lse), "%s: prompt %d has no first_step_logsumexp", refp, p);
	struct qc_convert_opts co = {.in = in, .out = bundle, .target = QC_TARGET_CPU, .alignment = QC_BUNDLE_ALIGN};
	int rc = qc_convert_hf(&co, NULL, &err);
	CHECK(rc == QC_OK, "convert %s: %s", in, err.msg);
	if (rc || ref_run_bundle(bundle, &ref, NULL, k->seq_tokens, &good) != QC_OK)
		return;
	CHECK(good.mismatches == 0, "%s: ids differ from transformers in %d of %d prompts", k->ref, good.mismatches, ref.n);
	CHECK(good.top10_err <= TOL_FLOAT, "%s: first-step top-10 error %.2e > %.0e", k->ref, good.top10_err, TOL_FLOAT);
	CHECK(good.logprob_err <= TOL_LOGPROB, "%s: first-step log-prob error %.2e > %.0e", k->ref, good.logprob_err,
	      TOL_LOGPROB);
	printf("  %-14s %-24s ids %d/%d prompts, %3d steps; top10 max err %.2e; log-prob max err %.2e\n", k->folder,
	       k->ref, ref.n - good.mismatches, ref.n, good.compared, good.top10_err, good.logprob_err);
	for (int i = 0; i < MAX_BREAKERS && k->breakers[i].fn; i++) {
		if (ref_run_bundle(bundle, &ref, k->breakers[i].fn, k->seq_tokens, &bad) != QC_OK)
			continue;
		CHECK(bad.mismatches > 0 || bad.top10_err > 10 * TOL_FLOAT,
		      "%s with %s still matches transformers (err %.2e): the check is blind", k->ref, k->breakers[i].what,
		      bad.top10_err);
		printf("    broken (%s): err %.2e, %d prompts differ\n", k->breakers[i].what, bad.top10_err, bad.mismatches);
	}
	unlink(bundle);
}

/* The GGUF path of Phi-4-mini's shape: the normalized GGUF states the rotated dims as
 * rope.dimension_count (12 of head_dim 16) and holds LongRoPE tables of 12 / 2, as
 * llama.cpp's Phi-4-mini converter writes them (n_rot / 2; c392e50 had n_embd_head / 2
 * and no partial rotation); that GGUF, converted as any GGUF is, runs as transformers. */
static void partial_via_gguf(const char *tmpdir)
{
	static const char *const tables[] = {"rope_factors_long.weight", "rope_factors_short.weight"};
	char g[512], bundle[512];
	struct qc_err err = {0};
	struct qc_gguf_model *gm = NULL;
	struct ref ref;
	struct outcome good;
	uint64_t rot = 0;
	snprintf(g, sizeof g, "%s/phi3-partial.gguf", tmpdir);
	snprintf(bundle, sizeof bundle, "%s/phi3-partial-gguf.qb", tmpdir);
	int rc = qc_hf_to_gguf("tests/data/hf/phi3-partial", g, NULL, 0, &err);
	if (!rc)
		rc = qc_gguf_model_open(g, &gm, &err);
	CHECK(rc == QC_OK, "phi3-partial: normalized GGUF: %s", err.msg);
	if (rc)
		goto out;
	CHECK(!qc_gguf_get_u64(gm->files[0], "phi3.rope.dimension_count", &rot, NULL) && rot == 12,
	      "phi3-partial: phi3.rope.dimension_count %llu, 12 expected", (unsigned long long)rot);
	for (int k = 0; k < 2; k++) {
		const struct qc_gguf_tensor *t = qc_gguf_model_find(gm, tables[k]);
		CHECK(t && t->n_dims == 1 && t->ne[0] == 6, "phi3-partial: %s: %lld factors, 6 expected", tables[k],
		      t ? (long long)t->ne[0] : -1ll);
	}
	struct qc_convert_opts co = {.in = g, .out = bundle, .target = QC_TARGET_CPU, .alignment = QC_BUNDLE_ALIGN};
	rc = qc_convert_gguf(&co, NULL, &err);
	CHECK(rc == QC_OK, "phi3-partial: convert the GGUF: %s", err.msg);
	if (rc || load_ref("tests/data/ref/hf-phi3-partial-short.json", &ref) != 0 ||
	    ref_run_bundle(bundle, &ref, NULL, 64, &good) != QC_OK)
		goto out;
	CHECK(good.mismatches == 0 && good.top10_err <= TOL_FLOAT && good.logprob_err <= TOL_LOGPROB,
	      "phi3-partial via GGUF: %d prompts differ, top-10 error %.2e, log-prob error %.2e", good.mismatches,
	      good.top10_err, good.logprob_err);
	printf("  phi3-partial via its GGUF (rope.dimension_count %llu, tables of 6): ids %d/%d prompts; top10 max err "
	       "%.2e\n", (unsigned long long)rot, ref.n - good.mismatches, ref.n, good.top10_err);
out:
	qc_gguf_model_close(gm);
	unlink(g);
	unlink(bundle);
}

int main(void)
{
	char tmpl[] = "/tmp/qc-test-engine-hf-XXXXXX";
	const char *tmpdir = mkdtemp(tmpl);
	CHECK(tmpdir != NULL, "mkdtemp");
	if (!tmpdir)
		return check_report("test_engine_hf");
	printf("HF checkpoints vs transformers (ids: prompts equal up to the first margin < %.2f; tol %g logits, %g log-probs)\n",
	       MARGIN_MIN, TOL_FLOAT, TOL_LOGPROB);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		run_case(tmpdir, &cases[i]);
	partial_via_gguf(tmpdir);
	rmdir(tmpdir);
	return check_report("test_engine_hf");
}
