/* test_engine_window.c — sliding windows in the paged K/V, end to end on the CPU.
 *
 * Models from mkgguf (random weights, f32): a llama stating
 * llama.attention.sliding_window W = 8 (what qconvert writes for a Hugging Face
 * Mistral with that window), a qwen2 stating qwen2.attention.sliding_window (a
 * Qwen2 with use_sliding_window and no full-attention layers), the same
 * generator runs without the key (the same weights), and a gemma2 (window on
 * alternate layers only).
 * - Memory: 72 tokens generated past a 10-token prompt (10 windows) in 4-token
 *   blocks: a windowed model's pool names at most ceil(W / 4) + 1 = 3 blocks after
 *   every step; with kv_keep_passed it grows to all 20 (80 positions); gemma2,
 *   whose global layers need every position, keeps all 20.
 * - Bits: every logit of every step equal with and without the release.
 * - The window itself, against an independent reference: transformers' mask lets
 *   position p see p - W + 1 .. p. With one layer, attention is the only mixing
 *   and RoPE scores depend on p - j alone (up to rounding), so the windowed
 *   model's logits at p must equal, within TOL_SHIFT, those of the no-window model
 *   fed only tokens p - W + 1 .. p from position 0; fed W - 1 or W + 1 tokens they
 *   must not (an off-by-one window fails). Below W both models agree bit for bit.
 * - Preemption: 6 windowed requests on a pool of 9 blocks each equal their solo
 *   run, logits bit for bit, and some were preempted.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "convert.h"
#include "engine.h"
#include "plan.h"

#define W 8
#define BT 4
#define N_PROMPT 10
#define N_GEN 72
/* Logits here are about 2.5 in size. Rotated at shifted positions, q and the K/V
 * round differently to binary16 (as llama.cpp's f16 cache, CPU backend): measured
 * at most 1.7e-3 apart; one token more or less in the window moves them by 0.27
 * or more (weight std 0.1: no single token dominates the attention). */
#define TOL_SHIFT 5e-3
#define MIN_APART 0.1
#define MAX_V 512

static const char *bin_dir(void)
{
	const char *b = getenv("QC_BIN");
	return b && *b ? b : "build/bin";
}

/* mkgguf with args (NULL-terminated) into dir/name.gguf, converted to dir/name.qb. */
static int make_model(const char *dir, const char *name, const char *const *args, char *qb, size_t len)
{
	char gguf[512], bin[512], errp[512];
	const char *argv[16];
	int n = 0;
	snprintf(gguf, sizeof gguf, "%s/%s.gguf", dir, name);
	snprintf(bin, sizeof bin, "%s/mkgguf", bin_dir());
	snprintf(errp, sizeof errp, "%s/%s.err", dir, name);
	argv[n++] = "--preset";
	argv[n++] = "tiny";
	argv[n++] = "--type";
	argv[n++] = "f32";
	for (; *args && n < 12; args++)
		argv[n++] = *args;
	CHECK(!*args, "%s: more mkgguf arguments than check_spawn takes", name);
	argv[n++] = "-o";
	argv[n++] = gguf;
	argv[n] = NULL;
	int rc = check_spawn(bin, argv, errp);
	CHECK(rc == 0, "%s: mkgguf exit %d", name, rc);
	unlink(errp);
	if (rc)
		return -1;
	snprintf(qb, len, "%s/%s.qb", dir, name);
	struct qc_convert_opts o = {.in = gguf, .out = qb, .target = QC_TARGET_CPU, .alignment = QC_BUNDLE_ALIGN};
	struct qc_err err = {0};
	rc = qc_convert_gguf(&o, NULL, &err);
	CHECK(rc == QC_OK, "convert %s: %s", name, err.msg);
	unlink(gguf);
	return rc;
}

/* Every logit row a run produced, in order, and the pool's peak after a step. */
struct trace {
	float *rows;      /* (cap, n_vocab) */
	int n, cap, n_vocab;
	int32_t most_used;  /* blocks named by tables after any step */
	uint64_t preemptions;
};

static void on_logits(void *ctx, uint64_t id, int32_t step, const float *logits, int32_t n_vocab)
{
	struct trace *t = ctx;
	(void)id;
	(void)step;
	if (t->n >= t->cap || n_vocab > MAX_V)
		return;
	t->n_vocab = n_vocab;
	memcpy(t->rows + (size_t)t->n * MAX_V, logits, sizeof(float) * (size_t)n_vocab);
	t->n++;
}

struct setup {
	bool keep;            /* kv_keep_passed */
	int32_t max_running;
	int32_t budget_blocks; /* 0: the engine's default */
	int32_t prefill;       /* max_prefill_tokens, 0: default */
};

/* Greedy runs of the prompts (all queued at once) through one engine. */
static int run(const char *qb, const struct setup *su, const int32_t *const *prompts, int n_req, int32_t n_prompt,
	       int32_t max_tokens, struct trace *t)
{
	struct qc_engine_opts o;
	struct qc_engine *e = NULL;
	struct qc_err err = {0};
	qc_engine_opts_init(&o);
	o.block_tokens = BT;
	o.max_seq_tokens = 128;
	o.max_running = su->max_running;
	o.max_prefill_tokens = su->prefill;
	o.kv_keep_passed = su->keep;
	o.prefix_cache = false;
	o.on_logits = on_logits;
	o.cb_ctx = t;
	if (su->budget_blocks) {
		struct qc_model *m = NULL;
		uint64_t bb = 0;
		if (qc_model_open(qb, &m, &err) == QC_OK)
			qc_backend_block_bytes(m, BT, QC_KV_F16, &bb, &err);
		qc_model_close(m);
		o.kv_budget_bytes = (uint64_t)su->budget_blocks * bb;
	}
	t->n = 0;
	t->most_used = 0;
	int rc = qc_engine_new(qb, &o, &e, &err);
	CHECK(rc == QC_OK, "engine %s: %s", qb, err.msg);
	for (int i = 0; rc == QC_OK && i < n_req; i++) {
		struct qc_engine_request q = {.prompt = prompts[i], .n_prompt = n_prompt, .max_tokens = max_tokens,
					      .ignore_eos = true};
		qc_sampler_params_init(&q.sampling);
		q.sampling.temperature = 0.0f;
		uint64_t id;
		rc = qc_engine_add(e, &q, &id, &err);
		CHECK(rc == QC_OK, "add: %s", err.msg);
	}
	while (rc == QC_OK && qc_engine_has_work(e)) {
		rc = qc_engine_step(e, &err);
		struct qc_sched_stats st;
		qc_engine_stats(e, &st);
		if (st.blocks_used > t->most_used)
			t->most_used = st.blocks_used;
		t->preemptions = st.n_preemptions;
	}
	CHECK(rc == QC_OK, "run %s: %s", qb, err.msg);
	qc_engine_free(e);
	return rc;
}

static struct trace trace_new(int cap)
{
	struct trace t = {.cap = cap};
	t.rows = calloc((size_t)cap * MAX_V, sizeof(float));
	return t;
}

static bool same_bits(const struct trace *a, const struct trace *b)
{
	return a->n == b->n && a->n > 0 && !memcmp(a->rows, b->rows, sizeof(float) * (size_t)a->n * MAX_V);
}

static void make_prompts(int32_t p[][N_PROMPT], int n, uint32_t seed)
{
	for (int i = 0; i < n; i++)
		for (int j = 0; j < N_PROMPT; j++)
			p[i][j] = 3 + (int32_t)((seed + (uint32_t)i * 7919u + (uint32_t)j * 104729u) % 250u);
}

/* Memory bound and bit-identity for one model; want_bound: whether its pool may
 * stop growing (a window on every layer). */
static void memory_and_bits(const char *qb, const char *name, bool want_bound)
{
	int32_t p[1][N_PROMPT];
	make_prompts(p, 1, 11);
	const int32_t *pp[1] = {p[0]};
	struct trace freed = trace_new(N_GEN), kept = trace_new(N_GEN);
	const struct setup s_free = {.max_running = 1}, s_keep = {.max_running = 1, .keep = true};
	if (run(qb, &s_free, pp, 1, N_PROMPT, N_GEN, &freed) || run(qb, &s_keep, pp, 1, N_PROMPT, N_GEN, &kept))
		goto out;
	/* stats come after a commit: the last one retires the request, so the
	 * most named is after the K/V of N_PROMPT + N_GEN - 2 tokens */
	const int32_t all = (N_PROMPT + N_GEN - 2 + BT - 1) / BT, bound = (W + BT - 1) / BT + 1;
	CHECK(kept.most_used == all, "%s kept: %d blocks at most, expected all %d", name, kept.most_used, all);
	if (want_bound)
		CHECK(freed.most_used <= bound, "%s: %d blocks at most, the bound is %d", name, freed.most_used, bound);
	else
		CHECK(freed.most_used == all, "%s (global layers): %d blocks at most, expected all %d", name,
		      freed.most_used, all);
	CHECK(same_bits(&freed, &kept), "%s: logits differ with and without the release (%d / %d rows)", name,
	      freed.n, kept.n);
	printf("  %s: %d logit rows bit-identical; pool peak %d blocks released, %d kept\n", name, freed.n,
	       freed.most_used, kept.most_used);
	/* the comparison can fail: one flipped bit */
	freed.rows[5] = nextafterf(freed.rows[5], INFINITY);
	CHECK(!same_bits(&freed, &kept), "a changed logit compares equal");
out:
	free(freed.rows);
	free(kept.rows);
}

static double max_diff(const float *a, const float *b, int n)
{
	double d = 0;
	for (int i = 0; i < n; i++)
		d = fmax(d, fabs((double)a[i] - (double)b[i]));
	return d;
}

/* Last-position logits of a prompt (max_tokens 1: the prompt's own logits). */
static int last_logits(const char *qb, const int32_t *ids, int32_t n, float *out)
{
	struct trace t = trace_new(1);
	const struct setup su = {.max_running = 1};
	const int32_t *pp[1] = {ids};
	int rc = run(qb, &su, pp, 1, n, 1, &t);
	if (!rc && t.n == 1)
		memcpy(out, t.rows, sizeof(float) * (size_t)t.n_vocab);
	rc = rc ? rc : t.n == 1 ? 0 : -1;
	free(t.rows);
	return rc;
}

/* The 1-layer window check of the header, at positions W .. W + 12. */
static void window_matches_shifted_context(const char *win_qb, const char *full_qb, const char *name)
{
	int32_t ids[64];
	float a[MAX_V], b[MAX_V];
	int bad = 0, apart_lo = 0, apart_hi = 0, n_vocab = 300, checked = 0;
	double worst = 0;
	for (int i = 0; i < 64; i++)
		ids[i] = 3 + (int32_t)((uint32_t)(i * 2654435761u) % 250u);
	/* below the window: both models see the same positions, bit for bit */
	if (last_logits(win_qb, ids, W, a) || last_logits(full_qb, ids, W, b))
		return;
	CHECK(!memcmp(a, b, sizeof(float) * (size_t)n_vocab), "%s: logits at position %d differ from the no-window model",
	      name, W - 1);
	for (int32_t p = W; p <= W + 12; p++) {
		float c[MAX_V], d[MAX_V];
		if (last_logits(win_qb, ids, p + 1, a) || last_logits(full_qb, ids + p - W + 1, W, b) ||
		    last_logits(full_qb, ids + p - W + 2, W - 1, c) || last_logits(full_qb, ids + p - W, W + 1, d))
			return;
		double e = max_diff(a, b, n_vocab);
		worst = fmax(worst, e);
		bad += e > TOL_SHIFT;
		apart_lo += max_diff(a, c, n_vocab) > MIN_APART;
		apart_hi += max_diff(a, d, n_vocab) > MIN_APART;
		checked++;
	}
	CHECK(checked == 13 && bad == 0, "%s: %d of %d positions off the shifted window's logits (worst %.2e)", name,
	      bad, checked, worst);
	CHECK(apart_lo == checked && apart_hi == checked,
	      "%s: W - 1 tokens told apart at %d, W + 1 at %d of %d positions", name, apart_lo, apart_hi, checked);
	printf("  %s: window %d = the last %d positions (13 positions, worst %.2e against the shifted context)\n",
	       name, W, W, worst);
}

/* Preemption by recompute on a tight pool: every request as it runs alone. */
static void preemption_equals_solo(const char *qb)
{
	enum { NR = 6, GEN = 40 };
	int32_t p[NR][N_PROMPT];
	make_prompts(p, NR, 5);
	const int32_t *pp[NR];
	for (int i = 0; i < NR; i++)
		pp[i] = p[i];
	struct trace batch = trace_new(NR * GEN), solo = trace_new(GEN);
	const struct setup tight = {.max_running = NR, .budget_blocks = 9, .prefill = 4};
	const struct setup alone = {.max_running = 1, .prefill = 4};
	if (run(qb, &tight, pp, NR, N_PROMPT, GEN, &batch))
		goto out;
	int same = 0;
	/* rows arrive interleaved: match each solo row in the batch trace, in order */
	for (int i = 0; i < NR; i++) {
		if (run(qb, &alone, pp + i, 1, N_PROMPT, GEN, &solo))
			goto out;
		int k = 0;
		for (int r = 0; r < batch.n && k < solo.n; r++)
			k += !memcmp(batch.rows + (size_t)r * MAX_V, solo.rows + (size_t)k * MAX_V,
				     sizeof(float) * (size_t)solo.n_vocab);
		same += k == GEN && solo.n == GEN;
	}
	CHECK(same == NR, "%d of %d requests equal their solo runs on a 9-block pool", same, NR);
	CHECK(batch.preemptions > 0 && batch.most_used <= 9, "tight pool: %llu preemptions, %d blocks",
	      (unsigned long long)batch.preemptions, batch.most_used);
	printf("  preemption: %d of %d requests bit-identical to their solo runs, %llu preemptions\n", same, NR,
	       (unsigned long long)batch.preemptions);
out:
	free(batch.rows);
	free(solo.rows);
}

int main(void)
{
	char tmpl[] = "/tmp/qc-test-window-XXXXXX";
	const char *dir = mkdtemp(tmpl);
	char llama[600], qwen2[600], gemma2[600], l1w[600], l1f[600], q1w[600], q1f[600];
	CHECK(dir != NULL, "mkdtemp");
	if (!dir)
		return check_report("test_engine_window");
	const char *a_llama[] = {"--seed", "3", "--sliding-window", "8", NULL};
	const char *a_qwen2[] = {"--arch", "qwen2", "--seed", "4", "--sliding-window", "8", NULL};
	const char *a_gemma2[] = {"--arch", "gemma2", "--seed", "5", "--sliding-window", "8", NULL};
	const char *a_l1w[] = {"--seed", "6", "--n-layer", "1", "--weight-std", "0.1", "--sliding-window", "8", NULL};
	const char *a_l1f[] = {"--seed", "6", "--n-layer", "1", "--weight-std", "0.1", NULL};
	const char *a_q1w[] = {"--arch", "qwen2", "--n-layer", "1", "--weight-std", "0.1", "--sliding-window", "8", NULL};
	const char *a_q1f[] = {"--arch", "qwen2", "--n-layer", "1", "--weight-std", "0.1", NULL};
	if (!make_model(dir, "llama-w8", a_llama, llama, sizeof llama))
		memory_and_bits(llama, "llama (Mistral-style) window 8", true);
	if (!make_model(dir, "qwen2-w8", a_qwen2, qwen2, sizeof qwen2))
		memory_and_bits(qwen2, "qwen2 window 8", true);
	if (!make_model(dir, "gemma2-w8", a_gemma2, gemma2, sizeof gemma2))
		memory_and_bits(gemma2, "gemma2 window 8 on even layers", false);
	if (!make_model(dir, "l1w", a_l1w, l1w, sizeof l1w) && !make_model(dir, "l1f", a_l1f, l1f, sizeof l1f))
		window_matches_shifted_context(l1w, l1f, "llama, 1 layer");
	if (!make_model(dir, "q1w", a_q1w, q1w, sizeof q1w) && !make_model(dir, "q1f", a_q1f, q1f, sizeof q1f))
		window_matches_shifted_context(q1w, q1f, "qwen2, 1 layer");
	preemption_equals_solo(llama);
	const char *qbs[] = {llama, qwen2, gemma2, l1w, l1f, q1w, q1f};
	for (size_t i = 0; i < sizeof qbs / sizeof qbs[0]; i++)
		unlink(qbs[i]);
	rmdir(dir);
	return check_report("test_engine_window");
}
