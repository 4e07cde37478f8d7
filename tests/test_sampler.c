/* test_sampler.c — sampling chain against independent references.
 *
 * References: the PRNG against hand-stepped xoshiro256** / splitmix64 values
 * (Vigna's reference algorithms); top-k/top-p/min-p cuts against a brute-force
 * full sort with double softmax in this file; penalty results against values
 * computed by hand from llama.cpp's formula; draw frequencies against the
 * renormalized target distribution with a 5-sigma binomial bound at fixed seeds;
 * logprobs against a double log-sum-exp. Each checker (frequency, set, sequence)
 * is also given a wrong expectation that must fail. Includes the .c for statics.
 */
#include "sampler.c"

#include <stdio.h>
#include <time.h>

#include "check.h"

/* ---- checkers ---- */

/* Every category within 5 binomial sigmas; zero-probability ones never drawn. */
static bool freq_ok(const int *counts, const double *want, int n, int draws)
{
	for (int i = 0; i < n; i++) {
		double mean = draws * want[i];
		if (want[i] == 0.0) {
			if (counts[i] != 0)
				return false;
			continue;
		}
		double sd = sqrt(draws * want[i] * (1.0 - want[i]));
		if (fabs(counts[i] - mean) > 5.0 * sd + 0.5)
			return false;
	}
	return true;
}

static int cmp_cand_ref(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->logit != y->logit)
		return x->logit > y->logit ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int32_t *)a, y = *(const int32_t *)b;
	return (x > y) - (x < y);
}

/* Same ids as a set. */
static bool same_set(const struct cand *c, int32_t n, const int32_t *ids, int32_t m)
{
	if (n != m)
		return false;
	int32_t *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)m * sizeof *b);
	for (int32_t i = 0; i < n; i++)
		a[i] = c[i].id;
	memcpy(b, ids, (size_t)m * sizeof *b);
	qsort(a, (size_t)n, sizeof *a, cmp_int);
	qsort(b, (size_t)m, sizeof *b, cmp_int);
	bool ok = memcmp(a, b, (size_t)n * sizeof *a) == 0;
	free(a);
	free(b);
	return ok;
}

/* ---- helpers ---- */

static struct qc_sampler *mk(const struct qc_sampler_params *p)
{
	struct qc_sampler *s = NULL;
	struct qc_err err = { 0 };
	CHECK(qc_sampler_new(p, 4096, &s, &err) == QC_OK, "sampler_new: %s", err.msg);
	return s;
}

static uint64_t lcg = 12345;

static double urand(void)
{
	lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(lcg >> 11) * 0x1.0p-53;
}

static double nrand(void)
{
	double u = urand() + 1e-12, v = urand();
	return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Draw `draws` tokens from logits with params p; counts[n]. */
static void draw_counts(const struct qc_sampler_params *p, const float *logits, int32_t n,
			int draws, int *counts)
{
	struct qc_sampler *s = mk(p);
	struct qc_sampler_ws *ws = NULL;
	struct qc_sample_result r;
	qc_sampler_ws_new(n, &ws, NULL);
	memset(counts, 0, (size_t)n * sizeof *counts);
	for (int i = 0; i < draws; i++) {
		if (qc_sampler_sample(s, ws, logits, n, &r, NULL) == QC_OK)
			counts[r.token]++;
	}
	qc_sampler_ws_free(ws);
	qc_sampler_free(s);
}

/* probabilities 0.5 0.2 0.15 0.1 0.05 placed at shuffled ids */
static const int32_t perm5[5] = { 3, 0, 4, 1, 2 };
static const double probs5[5] = { 0.5, 0.2, 0.15, 0.1, 0.05 };

static void logits5(float *l)
{
	for (int i = 0; i < 5; i++)
		l[perm5[i]] = (float)log(probs5[i]);
}

/* want[id] for the top `keep` ranks of probs5, renormalized, optionally ^ (1/T) */
static void want5(double *want, int keep, double temp)
{
	double z = 0;
	for (int i = 0; i < 5; i++)
		want[i] = 0;
	for (int i = 0; i < keep; i++)
		z += pow(probs5[i], 1.0 / temp);
	for (int i = 0; i < keep; i++)
		want[perm5[i]] = pow(probs5[i], 1.0 / temp) / z;
}

/* ---- tests ---- */

static void prng_matches_reference_algorithms(void)
{
	uint64_t st[4] = { 1, 2, 3, 4 };
	/* xoshiro256** from state {1,2,3,4}, stepped by hand:
	 * rotl(2*5,7)*9 = 11520; then s1 = 0 -> 0; then rotl(262149*5,7)*9 */
	uint64_t a = xoshiro_next(st), b = xoshiro_next(st), c = xoshiro_next(st);
	CHECK(a == 11520u && b == 0 && c == 1509978240u, "xoshiro256** %llu %llu %llu",
	      (unsigned long long)a, (unsigned long long)b, (unsigned long long)c);
	uint64_t z = 0;
	uint64_t v = splitmix64(&z);
	CHECK(v == 0xe220a8397b1dcdafull, "splitmix64(0) = %#llx", (unsigned long long)v);
	rng_seed(st, 7);
	double u = rng_uniform(st);
	CHECK(u >= 0.0 && u < 1.0, "uniform %f", u);
}

static void greedy_is_argmax_with_ties_to_lowest_id(void)
{
	const float l[6] = { 1.0f, 3.0f, -INFINITY, 3.0f, 2.0f, 3.0f };
	struct qc_sampler_params p;
	struct qc_sampler_ws *ws = NULL;
	struct qc_sample_result r;
	qc_sampler_params_init(&p);
	qc_sampler_ws_new(6, &ws, NULL);
	for (int k = 0; k < 2; k++) {
		p.temperature = k ? -1.0f : 0.0f;
		p.seed = (uint64_t)k * 99;
		struct qc_sampler *s = mk(&p);
		CHECK(qc_sampler_sample(s, ws, l, 6, &r, NULL) == QC_OK && r.token == 1,
		      "greedy temp %.0f chose %d", (double)p.temperature, r.token);
		CHECK(isnan(r.logprob) && r.n_top == 0, "logprobs reported unasked");
		qc_sampler_free(s);
	}
	qc_sampler_ws_free(ws);
}

static void top_k_one_equals_greedy(void)
{
	enum { N = 1000 };
	float l[N];
	struct qc_sampler_params p;
	struct qc_sampler_ws *ws = NULL;
	struct qc_sample_result r;
	int bad = 0;
	qc_sampler_params_init(&p);
	p.top_k = 1;
	p.temperature = 1.5f;
	p.penalty_last_n = 0;
	qc_sampler_ws_new(N, &ws, NULL);
	for (int row = 0; row < 200; row++) {
		int32_t best = 0;
		for (int i = 0; i < N; i++) {
			l[i] = (float)nrand();
			if (l[i] > l[best])
				best = i;
		}
		p.seed = (uint64_t)row;
		struct qc_sampler *s = mk(&p);
		qc_sampler_sample(s, ws, l, N, &r, NULL);
		bad += r.token != best;
		qc_sampler_free(s);
	}
	CHECK(bad == 0, "top-k 1 differed from argmax in %d rows", bad);
	qc_sampler_ws_free(ws);
}

/* Fill n candidates with logits quantized to few levels (many ties). */
static void fill_cands(struct cand *c, struct cand *ref, int32_t n, double scale, int quant)
{
	for (int32_t i = 0; i < n; i++) {
		double v = nrand() * scale;
		if (quant)
			v = floor(v * quant) / quant;
		c[i] = ref[i] = (struct cand){ (float)v, i };
	}
	qsort(ref, (size_t)n, sizeof *ref, cmp_cand_ref);
}

static void cuts_match_brute_force_on_128k_vocab(void)
{
	enum { N = 128256 };
	struct cand *c = malloc(N * sizeof *c), *spare = malloc(N * sizeof *spare);
	struct cand *ref = malloc(N * sizeof *ref);
	int32_t *ids = malloc(N * sizeof *ids);
	struct qc_sampler_ws *ws = NULL;
	qc_sampler_ws_new(N, &ws, NULL);

	/* top-k, with ties broken toward the lower id */
	const int32_t ks[3] = { 1, 40, 5000 };
	for (int t = 0; t < 3; t++) {
		fill_cands(c, ref, N, 2.0, 8);
		struct cset cs = { c, spare, N, false };
		top_k(&cs, ks[t]);
		bool order = true;
		for (int32_t i = 0; i < cs.n; i++)
			order &= cs.c[i].id == ref[i].id;
		CHECK(cs.n == ks[t] && cs.sorted && order, "top-k %d differs from the full sort",
		      ks[t]);
	}

	/* top-p on a peaked row, a flat row, and one with wide tie groups */
	const double scales[3] = { 4.0, 0.01, 2.0 };
	const float ps[3] = { 0.9f, 0.5f, 0.7f };
	for (int t = 0; t < 3; t++) {
		fill_cands(c, ref, N, scales[t], t == 2 ? 4 : 0);   /* t 2: ties cut by id */
		double m = ref[0].logit, z = 0, cum = 0;
		for (int32_t i = 0; i < N; i++)
			z += exp(ref[i].logit - m);
		int32_t keep = N;
		for (int32_t i = 0; i < N; i++) {
			cum += exp(ref[i].logit - m) / z;
			if (cum >= ps[t]) {
				keep = i + 1;
				break;
			}
		}
		for (int32_t i = 0; i < keep; i++)
			ids[i] = ref[i].id;
		struct cset cs = { c, spare, N, false };
		top_p(&cs, ws, ps[t]);
		CHECK(same_set(cs.c, cs.n, ids, keep), "top-p %.2f kept %d, brute force %d",
		      (double)ps[t], cs.n, keep);
		if (t == 0)
			CHECK(!same_set(cs.c, cs.n, ids, keep - 1), "set checker accepted a short set");
	}

	/* min-p keeps exactly p_i >= min_p * p_max */
	fill_cands(c, ref, N, 3.0, 0);
	int32_t keep = 0;
	for (int32_t i = 0; i < N; i++)
		if ((double)ref[i].logit - ref[0].logit >= log(0.05))
			ids[keep++] = ref[i].id;
	struct cset cs = { c, spare, N, false };
	min_p(&cs, 0.05f);
	CHECK(same_set(cs.c, cs.n, ids, keep), "min-p kept %d, brute force %d", cs.n, keep);
	qc_sampler_ws_free(ws);
	free(c);
	free(spare);
	free(ref);
	free(ids);
}

static void draws_follow_the_truncated_distribution(void)
{
	enum { D = 20000 };
	float l[5];
	int counts[5];
	double want[5];
	struct qc_sampler_params p;
	logits5(l);

	qc_sampler_params_init(&p);
	p.seed = 1;
	draw_counts(&p, l, 5, D, counts);
	want5(want, 5, 1.0);
	CHECK(freq_ok(counts, want, 5, D), "temperature 1: %d %d %d %d %d", counts[0], counts[1],
	      counts[2], counts[3], counts[4]);
	double wrong[5];
	memcpy(wrong, want, sizeof wrong);
	wrong[perm5[0]] -= 0.03;   /* 0.47 instead of 0.5: 12 sigma off at 20000 draws */
	wrong[perm5[4]] += 0.03;
	CHECK(!freq_ok(counts, wrong, 5, D), "frequency checker accepted a wrong distribution");

	p.temperature = 0.5f;
	draw_counts(&p, l, 5, D, counts);
	want5(want, 5, 0.5);
	CHECK(freq_ok(counts, want, 5, D), "temperature 0.5 is not p^2: %d %d %d %d %d",
	      counts[0], counts[1], counts[2], counts[3], counts[4]);

	p.temperature = 1.0f;
	p.top_k = 2;
	draw_counts(&p, l, 5, D, counts);
	want5(want, 2, 1.0);
	CHECK(freq_ok(counts, want, 5, D), "top-k 2");

	/* smallest set with mass >= 0.8 is {0.5, 0.2, 0.15} (0.85) */
	p.top_k = 0;
	p.top_p = 0.8f;
	draw_counts(&p, l, 5, D, counts);
	want5(want, 3, 1.0);
	CHECK(freq_ok(counts, want, 5, D), "top-p 0.8: %d %d %d %d %d", counts[0], counts[1],
	      counts[2], counts[3], counts[4]);
	want5(wrong, 4, 1.0);
	CHECK(!freq_ok(counts, wrong, 5, D), "checker accepted a 4-token nucleus");
	p.top_p = 0.45f;
	draw_counts(&p, l, 5, D, counts);
	CHECK(counts[perm5[0]] == D, "top-p below the first mass keeps only it");
	p.top_p = 0.999f;
	draw_counts(&p, l, 5, D, counts);
	want5(want, 5, 1.0);
	CHECK(freq_ok(counts, want, 5, D), "top-p 0.999 keeps all");

	/* top-p after top-k renormalizes over the k kept: top-4 masses 0.5 0.2 0.15 0.1
	 * become 0.526 0.211 ..., so 0.6 is reached with two tokens */
	p.top_k = 4;
	p.top_p = 0.6f;
	draw_counts(&p, l, 5, D, counts);
	want5(want, 2, 1.0);
	CHECK(freq_ok(counts, want, 5, D), "top-k 4 then top-p 0.6: %d %d %d %d %d", counts[0],
	      counts[1], counts[2], counts[3], counts[4]);
	p.top_k = 0;

	/* min-p 0.25: threshold 0.125 keeps 0.5, 0.2, 0.15 */
	p.top_p = 1.0f;
	p.min_p = 0.25f;
	draw_counts(&p, l, 5, D, counts);
	want5(want, 3, 1.0);
	CHECK(freq_ok(counts, want, 5, D), "min-p 0.25");

	/* temperature applies last (llama.cpp order): top-p 0.8 cuts on T=1 masses,
	 * then T=2 flattens the kept three */
	p.min_p = 0.0f;
	p.top_p = 0.8f;
	p.temperature = 2.0f;
	draw_counts(&p, l, 5, D, counts);
	want5(want, 3, 2.0);
	CHECK(freq_ok(counts, want, 5, D), "top-p then temperature 2");
}

static void penalties_match_hand_computed_values(void)
{
	struct qc_sampler_params p;
	struct qc_sampler *s;
	float x[6] = { 2.0f, -1.0f, 0.5f, 3.0f, -0.5f, 0.0f };
	const int32_t hist[8] = { 0, 1, 1, 3, 3, 3, 5, 7 };   /* 7 is outside the vocab */

	qc_sampler_params_init(&p);
	p.repeat_penalty = 1.5f;
	p.frequency_penalty = 0.1f;
	p.presence_penalty = 0.2f;
	p.penalty_last_n = 64;
	s = mk(&p);
	qc_sampler_accept(s, hist, 8);
	apply_penalties(s, x, 6);
	/* l>0: l/1.5 ; l<=0: l*1.5 ; then - (c*0.1 + 0.2) */
	const float want[6] = { 2.0f / 1.5f - 0.3f, -1.5f - 0.4f, 0.5f, 2.0f - 0.5f, -0.5f,
				0.0f - 0.3f };
	int bad = 0;
	for (int i = 0; i < 6; i++)
		bad += fabsf(x[i] - want[i]) > 1e-6f;
	CHECK(bad == 0, "penalized %f %f %f %f %f %f", (double)x[0], (double)x[1], (double)x[2],
	      (double)x[3], (double)x[4], (double)x[5]);
	qc_sampler_free(s);

	/* window of the last 3 accepted tokens: only token 3 (x3) remains */
	p.penalty_last_n = 3;
	s = mk(&p);
	qc_sampler_accept(s, hist, 6);
	float y[6] = { 2.0f, -1.0f, 0.5f, 3.0f, -0.5f, 0.0f };
	apply_penalties(s, y, 6);
	CHECK(y[0] == 2.0f && y[1] == -1.0f && fabsf(y[3] - 1.5f) < 1e-6f,
	      "window 3: %f %f %f", (double)y[0], (double)y[1], (double)y[3]);
	qc_sampler_free(s);

	/* end to end: sampled tokens join the history; greedy repeats are pushed down */
	qc_sampler_params_init(&p);
	p.temperature = 0.0f;
	p.presence_penalty = 5.0f;
	s = mk(&p);
	struct qc_sampler_ws *ws = NULL;
	struct qc_sample_result r;
	const float l[4] = { 4.0f, 3.0f, 2.0f, 1.0f };
	int32_t got[4];
	qc_sampler_ws_new(4, &ws, NULL);
	for (int i = 0; i < 4; i++) {
		qc_sampler_sample(s, ws, l, 4, &r, NULL);
		got[i] = r.token;
	}
	CHECK(got[0] == 0 && got[1] == 1 && got[2] == 2 && got[3] == 3,
	      "presence penalty walk %d %d %d %d", got[0], got[1], got[2], got[3]);
	qc_sampler_free(s);

	/* penalties reach the reported logprobs: lp = x' - logsumexp(x') */
	qc_sampler_params_init(&p);
	p.temperature = 0.0f;
	p.logprobs = true;
	p.repeat_penalty = 2.0f;
	s = mk(&p);
	qc_sampler_accept(s, (const int32_t[]){ 0 }, 1);
	qc_sampler_sample(s, ws, l, 4, &r, NULL);
	double lse = log(exp(2.0) + exp(3.0) + exp(2.0) + exp(1.0));
	CHECK(r.token == 1 && fabs(r.logprob - (3.0 - lse)) < 1e-5, "penalized logprob %f vs %f",
	      (double)r.logprob, 3.0 - lse);
	qc_sampler_free(s);
	qc_sampler_ws_free(ws);
}

static void logprobs_are_log_softmax_of_scaled_logits(void)
{
	const float l[5] = { 2.0f, 1.0f, 0.0f, -1.0f, 1.0f };
	struct qc_sampler_params p;
	struct qc_sampler_ws *ws = NULL;
	struct qc_sample_result r;
	qc_sampler_ws_new(5, &ws, NULL);
	for (int k = 0; k < 2; k++) {
		double t = k ? 2.0 : 1.0;
		qc_sampler_params_init(&p);
		p.temperature = (float)t;
		p.top_k = 1;              /* truncation must not change the report */
		p.n_logprobs = 3;
		struct qc_sampler *s = mk(&p);
		qc_sampler_sample(s, ws, l, 5, &r, NULL);
		double z = 0;
		for (int i = 0; i < 5; i++)
			z += exp(l[i] / t);
		double lz = log(z);
		CHECK(r.token == 0 && fabs(r.logprob - (2.0 / t - lz)) < 1e-5,
		      "T=%.0f logprob %f vs %f", t, (double)r.logprob, 2.0 / t - lz);
		/* ties (ids 1 and 4 at logit 1) list the lower id first */
		CHECK(r.n_top == 3 && r.top_ids[0] == 0 && r.top_ids[1] == 1 && r.top_ids[2] == 4,
		      "top ids %d %d %d", r.top_ids[0], r.top_ids[1], r.top_ids[2]);
		CHECK(fabs(r.top_logprobs[1] - (1.0 / t - lz)) < 1e-5 &&
		      r.top_logprobs[1] == r.top_logprobs[2], "top logprobs %f %f",
		      (double)r.top_logprobs[1], (double)r.top_logprobs[2]);
		qc_sampler_free(s);
	}
	qc_sampler_ws_free(ws);
}

/* Temperatures in (0, QC_SAMPLER_GREEDY_BELOW) act as greedy (issue 15): the
 * argmax with ties to the lowest id, and logprobs of the unscaled row (the
 * greedy report), here log-softmax of {2, 1, 0, -1, 2} by hand. Subnormal 1e-45
 * and 1e-38 used to make 1/T infinite and every weight NaN. Just above the
 * threshold, huge logits (1e35, where l/T overflows) still draw the best. */
static void tiny_temperatures_are_greedy(void)
{
	const float l[5] = { 1.0f, 2.0f, 0.0f, -1.0f, 2.0f };
	const float temps[] = { 1e-45f, 1e-38f, 1e-20f, 1e-6f, 9.9e-6f };
	struct qc_sampler_params p;
	struct qc_sampler_ws *ws = NULL;
	struct qc_sample_result r;
	qc_sampler_ws_new(5, &ws, NULL);
	double lz = log(exp(1.0) + 2 * exp(2.0) + exp(0.0) + exp(-1.0));
	for (size_t k = 0; k < sizeof temps / sizeof temps[0]; k++) {
		for (uint64_t seed = 0; seed < 8; seed++) {
			qc_sampler_params_init(&p);
			p.temperature = temps[k];
			p.seed = seed;
			p.n_logprobs = 2;
			struct qc_sampler *s = mk(&p);
			int rc = qc_sampler_sample(s, ws, l, 5, &r, NULL);
			CHECK(rc == QC_OK && r.token == 1, "T=%g seed %llu chose %d (greedy: 1)", (double)temps[k],
			      (unsigned long long)seed, r.token);
			CHECK(fabs(r.logprob - (2.0 - lz)) < 1e-5 && r.n_top == 2 && r.top_ids[1] == 4 &&
			      fabs(r.top_logprobs[1] - (2.0 - lz)) < 1e-5,
			      "T=%g logprob %f, want %f", (double)temps[k], (double)r.logprob, 2.0 - lz);
			qc_sampler_free(s);
		}
	}
	const float big[4] = { 1e35f, 9e34f, -1e35f, 0.0f };
	for (uint64_t seed = 0; seed < 8; seed++) {
		qc_sampler_params_init(&p);
		p.temperature = 2e-5f;
		p.seed = seed;
		p.logprobs = true;
		struct qc_sampler *s = mk(&p);
		int rc = qc_sampler_sample(s, ws, big, 4, &r, NULL);
		CHECK(rc == QC_OK && r.token == 0 && r.logprob == 0.0f, "T=2e-5 on 1e35 logits: token %d logprob %g",
		      r.token, (double)r.logprob);
		qc_sampler_free(s);
	}
	qc_sampler_ws_free(ws);
}

static int sequence(uint64_t seed, int32_t *out, int n)
{
	enum { NV = 1000 };
	static float l[NV];
	struct qc_sampler_params p;
	struct qc_sampler_ws *ws = NULL;
	struct qc_sample_result r;
	for (int i = 0; i < NV; i++)
		l[i] = (float)(i % 17) * 0.05f;   /* nearly flat: every draw matters */
	qc_sampler_params_init(&p);
	p.seed = seed;
	p.top_k = 500;
	p.top_p = 0.95f;
	struct qc_sampler *s = mk(&p);
	qc_sampler_ws_new(NV, &ws, NULL);
	for (int i = 0; i < n; i++) {
		qc_sampler_sample(s, ws, l, NV, &r, NULL);
		out[i] = r.token;
	}
	qc_sampler_ws_free(ws);
	qc_sampler_free(s);
	return n;
}

static int n_equal(const int32_t *a, const int32_t *b, int n)
{
	int k = 0;
	for (int i = 0; i < n; i++)
		k += a[i] == b[i];
	return k;
}

static void same_seed_same_draws_different_seed_different(void)
{
	int32_t a[200], b[200], c[200];
	sequence(42, a, 200);
	sequence(42, b, 200);
	sequence(43, c, 200);
	CHECK(n_equal(a, b, 200) == 200, "same seed diverged");
	CHECK(n_equal(a, c, 200) < 20, "different seeds agree on %d of 200", n_equal(a, c, 200));
	b[17] = (b[17] + 1) % 1000;
	CHECK(n_equal(a, b, 200) != 200, "sequence checker missed a changed draw");
}

static void bad_rows_and_params_are_refused(void)
{
	struct qc_sampler_params p;
	struct qc_sampler *s = NULL;
	struct qc_sampler_ws *ws = NULL;
	struct qc_sample_result r;
	struct qc_err err = { 0 };
	float l[4] = { 0.0f, 1.0f, 2.0f, 3.0f };

	qc_sampler_params_init(&p);
	s = mk(&p);
	CHECK(qc_sampler_ws_new(0, &ws, &err) == QC_EINVAL && !ws, "zero vocab workspace");
	qc_sampler_ws_new(4, &ws, &err);
	CHECK(qc_sampler_sample(s, ws, l, 5, &r, &err) == QC_EINVAL, "row wider than workspace");
	l[2] = NAN;
	CHECK(qc_sampler_sample(s, ws, l, 4, &r, &err) == QC_EINVAL && strstr(err.msg, "token 2"),
	      "NaN logit: %s", err.msg);
	l[2] = INFINITY;
	CHECK(qc_sampler_sample(s, ws, l, 4, &r, &err) == QC_EINVAL, "+inf logit");
	for (int i = 0; i < 4; i++)
		l[i] = -INFINITY;
	CHECK(qc_sampler_sample(s, ws, l, 4, &r, &err) == QC_EINVAL, "all -inf");
	l[3] = 0.0f;
	CHECK(qc_sampler_sample(s, ws, l, 4, &r, &err) == QC_OK && r.token == 3,
	      "only finite token not chosen");
	qc_sampler_free(s);
	qc_sampler_ws_free(ws);

	struct qc_sampler_params bad;
	const char *names[7] = { "temperature", "top_p", "min_p", "repeat_penalty",
				 "penalty_last_n", "n_logprobs", "frequency" };
	for (int k = 0; k < 7; k++) {
		qc_sampler_params_init(&bad);
		switch (k) {
		case 0: bad.temperature = NAN; break;
		case 1: bad.top_p = -0.1f; break;
		case 2: bad.min_p = 1.5f; break;
		case 3: bad.repeat_penalty = 0.0f; break;
		case 4: bad.penalty_last_n = -2; break;
		case 5: bad.n_logprobs = 21; break;
		case 6: bad.frequency_penalty = INFINITY; break;
		}
		s = NULL;
		CHECK(qc_sampler_new(&bad, 64, &s, &err) == QC_EINVAL && !s &&
		      strstr(err.msg, names[k]), "bad %s accepted (%s)", names[k], err.msg);
	}
	qc_sampler_params_init(&bad);
	CHECK(qc_sampler_new(&bad, -1, &s, &err) == QC_EINVAL, "negative max_history");
	bad.penalty_last_n = -1;
	CHECK(qc_sampler_new(&bad, 100, &s, &err) == QC_OK && s->hist_cap == 100,
	      "last_n -1 means max_history");
	qc_sampler_free(s);
	qc_sampler_free(NULL);
	qc_sampler_ws_free(NULL);
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void large_vocab_sampling_is_fast(void)
{
	enum { N = 128256, ROWS = 50 };
	float *l = malloc(N * sizeof *l);
	struct qc_sampler_params p;
	struct qc_sampler_ws *ws = NULL;
	struct qc_sample_result r;
	double ms[3];
	for (int32_t i = 0; i < N; i++)
		l[i] = (float)(nrand() * 3.0);
	qc_sampler_ws_new(N, &ws, NULL);
	for (int mode = 0; mode < 3; mode++) {
		qc_sampler_params_init(&p);
		p.penalty_last_n = 64;
		p.repeat_penalty = 1.1f;
		if (mode == 0) {
			p.top_k = 40;
			p.top_p = 0.95f;
			p.min_p = 0.05f;
			p.temperature = 0.8f;
		} else if (mode == 1) {
			p.top_p = 0.9f;            /* no top-k: the widening selection */
		} else {
			p.n_logprobs = 5;          /* plain temperature with logprobs */
		}
		struct qc_sampler *s = mk(&p);
		double t0 = now_ms();
		int ok = 0;
		for (int i = 0; i < ROWS; i++)
			ok += qc_sampler_sample(s, ws, l, N, &r, NULL) == QC_OK;
		ms[mode] = (now_ms() - t0) / ROWS;
		CHECK(ok == ROWS, "mode %d failed rows", mode);
		qc_sampler_free(s);
	}
	printf("  128k vocab, ms/row: top-k+top-p+min-p %.3f, top-p only %.3f, full+logprobs %.3f\n",
	       ms[0], ms[1], ms[2]);
	CHECK(ms[0] < 50 && ms[1] < 100 && ms[2] < 100, "sampling far too slow");
	qc_sampler_ws_free(ws);
	free(l);
}

/* A backend that selects the row's top_k best (forward_top) hands the sampler
 * only those: qc_sampler_sample_top must give the full row's tokens and PRNG
 * advance, draw after draw, with ties in the row (quantized logits). */
static void top_candidates_give_the_full_rows_draws(void)
{
	enum { N = 32000, DRAWS = 300 };
	struct { int32_t k; float temp, top_p, min_p; } cfg[] = {
		{2, 1.0f, 1.0f, 0.0f}, {40, 0.8f, 0.95f, 0.0f}, {128, 1.3f, 1.0f, 0.05f}, {17, 0.5f, 0.5f, 0.1f}};
	struct cand *c = malloc(N * sizeof *c), *ref = malloc(N * sizeof *ref);
	float *row = malloc(N * sizeof *row);
	int32_t ids[128];
	float vals[128];
	struct qc_sampler_ws *ws = NULL;
	struct qc_err err = {0};
	CHECK(qc_sampler_ws_new(N, &ws, &err) == QC_OK, "ws: %s", err.msg);
	for (size_t t = 0; t < sizeof cfg / sizeof cfg[0]; t++) {
		struct qc_sampler_params p;
		qc_sampler_params_init(&p);
		p.temperature = cfg[t].temp;
		p.top_k = cfg[t].k;
		p.top_p = cfg[t].top_p;
		p.min_p = cfg[t].min_p;
		p.seed = 1000 + t;
		struct qc_sampler *full = NULL, *top = NULL, *off = NULL;
		CHECK(qc_sampler_new(&p, 64, &full, &err) == QC_OK && qc_sampler_new(&p, 64, &top, &err) == QC_OK &&
		      qc_sampler_new(&p, 64, &off, &err) == QC_OK, "sampler: %s", err.msg);
		CHECK(qc_sampler_top_need(top, N) == cfg[t].k, "top_need %d, want %d", qc_sampler_top_need(top, N),
		      cfg[t].k);
		int same = 0, wrong_same = 0;
		for (int d = 0; d < DRAWS; d++) {
			fill_cands(c, ref, N, 3.0, d % 2 ? 8 : 0); /* ref: best first */
			for (int32_t i = 0; i < N; i++)
				row[i] = c[i].logit;
			struct qc_sample_result a, b, o;
			/* a wrong selection (the best left out) must show: off's draws differ */
			for (int32_t i = 0; i < cfg[t].k; i++) {
				ids[i] = ref[i + 1].id;
				vals[i] = ref[i + 1].logit;
			}
			CHECK(qc_sampler_sample_top(off, ws, ids, vals, cfg[t].k, &o, &err) == QC_OK, "off: %s", err.msg);
			for (int32_t i = 0; i < cfg[t].k; i++) {
				ids[i] = ref[i].id;
				vals[i] = ref[i].logit;
			}
			CHECK(qc_sampler_sample(full, ws, row, N, &a, &err) == QC_OK, "full: %s", err.msg);
			CHECK(qc_sampler_sample_top(top, ws, ids, vals, cfg[t].k, &b, &err) == QC_OK, "top: %s", err.msg);
			same += a.token == b.token;
			wrong_same += a.token == o.token;
		}
		CHECK(same == DRAWS, "top_k %d: %d of %d draws equal to the full row's", cfg[t].k, same, DRAWS);
		CHECK(wrong_same < DRAWS, "top_k %d: a selection without the best token gave the same draws", cfg[t].k);
		struct qc_sample_result r;
		CHECK(qc_sampler_sample_top(top, ws, ids, vals, cfg[t].k - 1, &r, &err) == QC_EINVAL,
		      "%d candidates for top_k %d accepted", cfg[t].k - 1, cfg[t].k);
		qc_sampler_free(full);
		qc_sampler_free(top);
		qc_sampler_free(off);
	}
	/* what needs the whole row */
	struct qc_sampler_params p;
	qc_sampler_params_init(&p);
	struct qc_sampler *s = NULL;
	struct { float temp; int32_t k; bool lp; float rep; int32_t want; } need[] = {
		{0.0f, 0, false, 1.0f, 1}, {0.8f, 40, false, 1.0f, 40}, {0.8f, 0, false, 1.0f, 0},
		{0.8f, 40, true, 1.0f, 0}, {0.8f, 40, false, 1.3f, 0}, {0.8f, N, false, 1.0f, 0},
		{0.8f, 1, false, 1.0f, 0}, {0.0f, 40, false, 1.3f, 0}};
	const int32_t hist[3] = {5, 6, 7};
	for (size_t t = 0; t < sizeof need / sizeof need[0]; t++) {
		p.temperature = need[t].temp;
		p.top_k = need[t].k;
		p.logprobs = need[t].lp;
		p.repeat_penalty = need[t].rep;
		CHECK(qc_sampler_new(&p, 64, &s, &err) == QC_OK, "sampler: %s", err.msg);
		qc_sampler_accept(s, hist, 3);
		CHECK(qc_sampler_top_need(s, N) == need[t].want, "case %zu: top_need %d, want %d", t,
		      qc_sampler_top_need(s, N), need[t].want);
		qc_sampler_free(s);
	}
	qc_sampler_ws_free(ws);
	free(c);
	free(ref);
	free(row);
}

/* logit_bias is added after the penalties, also for greedy, and makes the
 * sampler ask for the whole row; min_tokens bans its ids for exactly that many
 * draws. Expected tokens worked out by hand from the row. */
static void bias_and_min_tokens_edit_the_row(void)
{
	const float l[6] = { 1.0f, 3.0f, -INFINITY, 2.5f, 2.0f, 0.0f };
	struct qc_sampler_params p;
	struct qc_sampler_ws *ws = NULL;
	struct qc_sample_result r;
	struct qc_err err = {0};
	qc_sampler_params_init(&p);
	qc_sampler_ws_new(6, &ws, NULL);
	p.temperature = 0.0f;
	struct qc_sampler *s = mk(&p);
	CHECK(qc_sampler_is_greedy(s) && qc_sampler_top_need(s, 6) == 1, "plain greedy is a device argmax");
	qc_sampler_free(s);

	/* -100 on the argmax (1): 3 wins; +1 on 4: 2 + 1 = 3 > 2.5, so 4 wins */
	p.n_bias = 1;
	p.bias_ids[0] = 1;
	p.bias[0] = -100.0f;
	s = mk(&p);
	CHECK(!qc_sampler_is_greedy(s) && qc_sampler_top_need(s, 6) == 0, "a biased greedy sampler needs the row");
	CHECK(qc_sampler_sample(s, ws, l, 6, &r, NULL) == QC_OK && r.token == 3, "bias -100 on 1: chose %d", r.token);
	qc_sampler_free(s);
	p.n_bias = 2;
	p.bias_ids[1] = 4;
	p.bias[1] = 1.0f;
	s = mk(&p);
	CHECK(qc_sampler_sample(s, ws, l, 6, &r, NULL) == QC_OK && r.token == 4, "bias +1 on 4: chose %d", r.token);
	qc_sampler_free(s);
	/* a top-k sampler with a bias: whole row too */
	p.temperature = 0.8f;
	p.top_k = 3;
	s = mk(&p);
	CHECK(qc_sampler_top_need(s, 6) == 0, "a biased top-k sampler needs the row");
	qc_sampler_free(s);

	/* min_tokens 2 banning 1 and 3: 4, 4, then 1 again */
	qc_sampler_params_init(&p);
	p.temperature = 0.0f;
	p.min_tokens = 2;
	p.n_min_ban = 2;
	p.min_ban_ids[0] = 1;
	p.min_ban_ids[1] = 3;
	s = mk(&p);
	int32_t got[3];
	for (int i = 0; i < 3; i++) {
		CHECK(i < 2 ? qc_sampler_top_need(s, 6) == 0 : qc_sampler_top_need(s, 6) == 1,
		      "draw %d: top_need %d", i, qc_sampler_top_need(s, 6));
		got[i] = qc_sampler_sample(s, ws, l, 6, &r, NULL) == QC_OK ? r.token : -1;
	}
	CHECK(got[0] == 4 && got[1] == 4 && got[2] == 1, "min_tokens 2: %d %d %d, want 4 4 1", got[0], got[1], got[2]);
	qc_sampler_free(s);

	/* refusals: bias out of range, NaN, a row where the ban leaves nothing */
	qc_sampler_params_init(&p);
	p.n_bias = 1;
	p.bias_ids[0] = 0;
	p.bias[0] = 100.5f;
	CHECK(qc_sampler_new(&p, 8, &s, &err) == QC_EINVAL, "bias 100.5 accepted");
	p.bias[0] = NAN;
	CHECK(qc_sampler_new(&p, 8, &s, &err) == QC_EINVAL, "bias NaN accepted");
	p.bias[0] = 0.0f;
	p.bias_ids[0] = -1;
	CHECK(qc_sampler_new(&p, 8, &s, &err) == QC_EINVAL, "bias id -1 accepted");
	qc_sampler_params_init(&p);
	p.min_tokens = 1;
	p.n_min_ban = 1;
	p.min_ban_ids[0] = 0;
	const float one[2] = { 0.0f, -INFINITY };
	s = mk(&p);
	CHECK(qc_sampler_sample(s, ws, one, 2, &r, &err) == QC_EINVAL, "a row banned empty was sampled");
	qc_sampler_free(s);
	qc_sampler_ws_free(ws);
}

int main(void)
{
	prng_matches_reference_algorithms();
	bias_and_min_tokens_edit_the_row();
	greedy_is_argmax_with_ties_to_lowest_id();
	top_k_one_equals_greedy();
	cuts_match_brute_force_on_128k_vocab();
	draws_follow_the_truncated_distribution();
	penalties_match_hand_computed_values();
	logprobs_are_log_softmax_of_scaled_logits();
	tiny_temperatures_are_greedy();
	same_seed_same_draws_different_seed_different();
	bad_rows_and_params_are_refused();
	large_vocab_sampling_is_fast();
	top_candidates_give_the_full_rows_draws();
	return check_report("test_sampler");
}
