/* sampler.c — penalties, top-k/top-p/min-p, temperature, seeded draws, logprobs.
 *
 * Owns: the chain documented in sampler.h. Candidates are (logit, id) pairs in the
 * workspace; "better" means higher logit, then lower id, so every cut and every
 * draw order is deterministic even with ties. Top-k is a size-k min-heap over
 * the row (O(V log k), no quickselect worst case). Top-p without top-k needs no
 * sort: one pass histograms probability mass into logit buckets, the walk from
 * the top bucket finds the bucket where the mass crosses p, and only that bucket
 * is sorted. Softmax sums accumulate in double.
 * Formulas: llama-sampling.cpp llama_sampler_{penalties,top_k,top_p,min_p,temp}
 * (facts only). PRNG: Vigna's splitmix64 + xoshiro256** (prng.di.unimi.it).
 */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOP_P_BUCKETS 4096     /* logit histogram resolution for top-p */
#define TOP_P_RANGE 40.0f      /* logits further below the max carry < e^-40 mass */

struct cand {
	float logit;
	int32_t id;
};

struct qc_sampler {
	struct qc_sampler_params p;
	uint64_t rng[4];          /* xoshiro256** state */
	int32_t hist_cap;         /* penalty window, tokens; 0 = penalties off */
	int32_t hist_n;           /* valid entries of hist */
	int32_t hist_pos;         /* next write index (ring) */
	int32_t *hist;            /* (hist_cap) last accepted tokens, ring */
	int32_t *scratch;         /* (hist_cap) sorted copy for counting */
	int32_t n_drawn;          /* tokens this sampler picked (min_tokens counts these) */
};

struct qc_sampler_ws {
	int32_t n_vocab;          /* capacity */
	float *x;                 /* (n_vocab) penalized logits */
	struct cand *cand;        /* (n_vocab) live candidates */
	struct cand *tmp;         /* (n_vocab) selection output */
	float *w;                 /* (n_vocab) softmax weights exp(l - max) */
	int32_t *bucket;          /* (n_vocab) top-p bucket of each candidate */
	double mass[TOP_P_BUCKETS];   /* top-p: weight per bucket */
	int32_t count[TOP_P_BUCKETS]; /* top-p: candidates per bucket */
};

/* ---- PRNG ---- */

static uint64_t splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t xoshiro_next(uint64_t s[4])
{
	uint64_t r = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

static void rng_seed(uint64_t s[4], uint64_t seed)
{
	/* splitmix64 never yields four zero words, so the state is valid */
	for (int i = 0; i < 4; i++)
		s[i] = splitmix64(&seed);
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4])
{
	return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53;
}

/* ---- lifecycle ---- */

void qc_sampler_params_init(struct qc_sampler_params *p)
{
	memset(p, 0, sizeof *p);
	p->temperature = 1.0f;
	p->top_p = 1.0f;
	p->repeat_penalty = 1.0f;
	p->penalty_last_n = 64;
}

static int check_params(const struct qc_sampler_params *p, int32_t max_history,
			struct qc_err *err)
{
	const char *bad = NULL;

	if (isnan(p->temperature) || isinf(p->temperature))
		bad = "temperature must be finite";
	else if (!(p->top_p >= 0.0f) || isinf(p->top_p))
		bad = "top_p must be finite and >= 0";
	else if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
		bad = "min_p must be in [0, 1]";
	else if (!(p->repeat_penalty > 0.0f) || isinf(p->repeat_penalty))
		bad = "repeat_penalty must be finite and > 0";
	else if (!isfinite(p->frequency_penalty) || !isfinite(p->presence_penalty))
		bad = "frequency/presence penalties must be finite";
	else if (p->penalty_last_n < -1)
		bad = "penalty_last_n must be >= -1";
	else if (p->n_logprobs < 0 || p->n_logprobs > QC_SAMPLER_MAX_LOGPROBS)
		bad = "n_logprobs must be in 0..20";
	else if (max_history < 0 || max_history > QC_SAMPLER_MAX_HISTORY)
		bad = "max_history must be in 0..1048576";
	else if (p->n_bias < 0 || p->n_bias > QC_SAMPLER_MAX_BIAS)
		bad = "n_bias must be in 0..1024";
	else if (p->min_tokens < 0 || p->n_min_ban < 0 || p->n_min_ban > QC_SAMPLER_MAX_BAN)
		bad = "min_tokens must be >= 0 and n_min_ban in 0..32";
	for (int32_t i = 0; !bad && i < p->n_bias; i++)
		if (p->bias_ids[i] < 0 || !(fabsf(p->bias[i]) <= QC_SAMPLER_MAX_BIAS_ABS))
			bad = "a logit bias needs an id >= 0 and a value in [-100, 100]";
	for (int32_t i = 0; !bad && i < p->n_min_ban; i++)
		if (p->min_ban_ids[i] < 0)
			bad = "min_ban ids must be >= 0";
	if (bad)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "sampler: %s", bad);
	return QC_OK;
}

int qc_sampler_new(const struct qc_sampler_params *p, int32_t max_history,
		   struct qc_sampler **out, struct qc_err *err)
{
	struct qc_sampler *s;
	int rc;

	*out = NULL;
	rc = check_params(p, max_history, err);
	if (rc)
		return rc;
	s = calloc(1, sizeof *s);
	if (!s)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "sampler: out of memory");
	s->p = *p;
	if (s->p.temperature < QC_SAMPLER_GREEDY_BELOW)
		s->p.temperature = 0.0f; /* greedy from here on: every test below reads <= 0 */
	s->hist_cap = p->penalty_last_n < 0 ? max_history :
		      p->penalty_last_n < max_history ? p->penalty_last_n : max_history;
	if (s->hist_cap > 0) {
		s->hist = malloc((size_t)s->hist_cap * sizeof *s->hist);
		s->scratch = malloc((size_t)s->hist_cap * sizeof *s->scratch);
		if (!s->hist || !s->scratch) {
			rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1,
					"sampler: out of memory for a %d-token window", s->hist_cap);
			goto out_free;
		}
	}
	rng_seed(s->rng, p->seed);
	*out = s;
	return QC_OK;

out_free:
	qc_sampler_free(s);
	return rc;
}

void qc_sampler_free(struct qc_sampler *s)
{
	if (!s)
		return;
	free(s->hist);
	free(s->scratch);
	free(s);
}

void qc_sampler_accept(struct qc_sampler *s, const int32_t *tokens, int32_t n)
{
	if (s->hist_cap == 0)
		return;
	for (int32_t i = 0; i < n; i++) {
		if (tokens[i] < 0)
			continue;
		s->hist[s->hist_pos] = tokens[i];
		s->hist_pos = (s->hist_pos + 1) % s->hist_cap;
		if (s->hist_n < s->hist_cap)
			s->hist_n++;
	}
}

int qc_sampler_ws_new(int32_t n_vocab, struct qc_sampler_ws **out, struct qc_err *err)
{
	struct qc_sampler_ws *ws;

	*out = NULL;
	if (n_vocab < 1 || n_vocab > QC_SAMPLER_MAX_VOCAB)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sampler: n_vocab %d outside 1..%d", n_vocab, QC_SAMPLER_MAX_VOCAB);
	ws = calloc(1, sizeof *ws);
	if (!ws)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "sampler: out of memory");
	ws->n_vocab = n_vocab;
	ws->x = malloc((size_t)n_vocab * sizeof *ws->x);
	ws->cand = malloc((size_t)n_vocab * sizeof *ws->cand);
	ws->tmp = malloc((size_t)n_vocab * sizeof *ws->tmp);
	ws->w = malloc((size_t)n_vocab * sizeof *ws->w);
	ws->bucket = malloc((size_t)n_vocab * sizeof *ws->bucket);
	if (!ws->x || !ws->cand || !ws->tmp || !ws->w || !ws->bucket) {
		qc_sampler_ws_free(ws);
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1,
				  "sampler: out of memory for a %d-token workspace", n_vocab);
	}
	*out = ws;
	return QC_OK;
}

void qc_sampler_ws_free(struct qc_sampler_ws *ws)
{
	if (!ws)
		return;
	free(ws->x);
	free(ws->cand);
	free(ws->tmp);
	free(ws->w);
	free(ws->bucket);
	free(ws);
}

/* ---- penalties ---- */

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return (x > y) - (x < y);
}

/* llama_sampler_penalties_apply: the divide-or-multiply keeps a repeated token
 * from becoming more likely when its logit is negative. */
static void apply_penalties(const struct qc_sampler *s, float *x, int32_t n_vocab)
{
	const struct qc_sampler_params *p = &s->p;
	if (s->hist_n == 0 || (p->repeat_penalty == 1.0f && p->frequency_penalty == 0.0f &&
			       p->presence_penalty == 0.0f))
		return;
	int32_t n = s->hist_n;
	memcpy(s->scratch, s->hist, (size_t)n * sizeof *s->scratch);
	qsort(s->scratch, (size_t)n, sizeof *s->scratch, cmp_i32);
	for (int32_t i = 0; i < n;) {
		int32_t t = s->scratch[i], c = 0;
		while (i < n && s->scratch[i] == t) {
			c++;
			i++;
		}
		if (t >= n_vocab)
			continue;
		if (x[t] <= 0.0f)
			x[t] *= p->repeat_penalty;
		else
			x[t] /= p->repeat_penalty;
		x[t] -= (float)c * p->frequency_penalty + p->presence_penalty;
	}
}

/* ---- row edits (logit_bias, min_tokens) ---- */

static bool ban_active(const struct qc_sampler *s)
{
	return s->n_drawn < s->p.min_tokens && s->p.n_min_ban > 0;
}

static bool has_edits(const struct qc_sampler *s)
{
	return s->p.n_bias > 0 || ban_active(s);
}

/* After the penalties; false when nothing is left to pick (every finite
 * logit banned). */
static bool apply_edits(const struct qc_sampler *s, float *x, int32_t n_vocab)
{
	const struct qc_sampler_params *p = &s->p;
	for (int32_t i = 0; i < p->n_bias; i++)
		if (p->bias_ids[i] < n_vocab)
			x[p->bias_ids[i]] += p->bias[i];
	if (!ban_active(s))
		return true;
	for (int32_t i = 0; i < p->n_min_ban; i++)
		if (p->min_ban_ids[i] < n_vocab)
			x[p->min_ban_ids[i]] = -INFINITY;
	for (int32_t i = 0; i < n_vocab; i++)
		if (x[i] > -INFINITY)
			return true;
	return false;
}

/* ---- selection ---- */

static bool better(struct cand a, struct cand b)
{
	return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

/* Min-heap on "better": h[0] is the worst of the kept m. */
static void sift_down(struct cand *h, int32_t n, int32_t i)
{
	for (;;) {
		int32_t l = 2 * i + 1, r = l + 1, w = i;
		if (l < n && better(h[w], h[l]))
			w = l;
		if (r < n && better(h[w], h[r]))
			w = r;
		if (w == i)
			return;
		struct cand t = h[i];
		h[i] = h[w];
		h[w] = t;
		i = w;
	}
}

static void heap_offer(struct cand *h, int32_t *n, int32_t m, struct cand c)
{
	if (*n < m) {
		int32_t i = (*n)++;
		h[i] = c;
		while (i > 0) {
			int32_t up = (i - 1) / 2;
			if (!better(h[up], h[i]))
				break;
			struct cand t = h[i];
			h[i] = h[up];
			h[up] = t;
			i = up;
		}
	} else if (better(c, h[0])) {
		h[0] = c;
		sift_down(h, m, 0);
	}
}

/* Turn the heap into descending ("best first") order in place. */
static void heap_sort_desc(struct cand *h, int32_t n)
{
	for (int32_t end = n - 1; end > 0; end--) {
		struct cand t = h[0];
		h[0] = h[end];
		h[end] = t;
		sift_down(h, end, 0);
	}
}

/* Top m of src[0..n) into dst[0..m), best first. */
static int32_t select_top(const struct cand *src, int32_t n, int32_t m, struct cand *dst)
{
	int32_t k = 0;
	if (m > n)
		m = n;
	for (int32_t i = 0; i < n; i++)
		heap_offer(dst, &k, m, src[i]);
	heap_sort_desc(dst, k);
	return k;
}

/* Candidate list state while the chain runs. */
struct cset {
	struct cand *c;       /* ws->cand or ws->tmp */
	struct cand *spare;   /* the other buffer */
	int32_t n;
	bool sorted;          /* best first */
};

static void cset_swap(struct cset *cs)
{
	struct cand *t = cs->c;
	cs->c = cs->spare;
	cs->spare = t;
}

static void top_k(struct cset *cs, int32_t k)
{
	if (k <= 0 || k >= cs->n)
		return;
	cs->n = select_top(cs->c, cs->n, k, cs->spare);
	cset_swap(cs);
	cs->sorted = true;
}

static float max_logit(const struct cset *cs)
{
	if (cs->sorted)
		return cs->c[0].logit;
	float m = -INFINITY;
	for (int32_t i = 0; i < cs->n; i++)
		if (cs->c[i].logit > m)
			m = cs->c[i].logit;
	return m;
}

static int cmp_better(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	return better(*x, *y) ? -1 : better(*y, *x) ? 1 : 0;
}

/* Smallest best-first prefix whose mass reaches p (llama_sampler_top_p with
 * min_keep 1); if rounding keeps the total below p, everything stays. */
static void top_p(struct cset *cs, struct qc_sampler_ws *ws, float p)
{
	if (p >= 1.0f)
		return;
	float m = max_logit(cs), lo = m;
	double sum = 0.0;
	for (int32_t i = 0; i < cs->n; i++) {
		ws->w[i] = expf(cs->c[i].logit - m);
		sum += ws->w[i];
		if (cs->c[i].logit < lo && cs->c[i].logit > -INFINITY)
			lo = cs->c[i].logit;
	}
	double target = (double)p * sum, cum = 0.0;
	if (cs->sorted) {
		for (int32_t i = 0; i < cs->n; i++) {
			cum += ws->w[i];
			if (cum >= target) {
				cs->n = i + 1;
				return;
			}
		}
		return;
	}

	/* buckets span the row's own finite range so flat rows still spread out;
	 * higher logit -> lower bucket, equal logits share one */
	float range = m - lo < TOP_P_RANGE ? m - lo : TOP_P_RANGE;
	float scale = range > 0.0f ? (float)(TOP_P_BUCKETS - 1) / range : 0.0f;
	memset(ws->mass, 0, sizeof ws->mass);
	memset(ws->count, 0, sizeof ws->count);
	for (int32_t i = 0; i < cs->n; i++) {
		float d = (m - cs->c[i].logit) * scale;
		int32_t b = d < (float)(TOP_P_BUCKETS - 1) ? (int32_t)d : TOP_P_BUCKETS - 1;
		ws->bucket[i] = b;
		ws->mass[b] += ws->w[i];
		ws->count[b]++;
	}
	int32_t bb = 0;
	while (bb < TOP_P_BUCKETS - 1 && cum + ws->mass[bb] < target)
		cum += ws->mass[bb++];

	/* everything above the boundary bucket stays (row order), then the boundary
	 * bucket sorted best-first until the mass is reached */
	int32_t k = 0, nb = 0;
	struct cand *edge = cs->spare + cs->n - ws->count[bb];
	for (int32_t i = 0; i < cs->n; i++) {
		if (ws->bucket[i] < bb)
			cs->spare[k++] = cs->c[i];
		else if (ws->bucket[i] == bb)
			edge[nb++] = cs->c[i];
	}
	qsort(edge, (size_t)nb, sizeof *edge, cmp_better);
	for (int32_t i = 0; i < nb; i++) {
		cs->spare[k++] = edge[i];
		cum += expf(edge[i].logit - m);
		if (cum >= target)
			break;
	}
	cset_swap(cs);
	cs->n = k;
	cs->sorted = false;
}

/* Keep p_i >= min_p * p_max, i.e. logit >= max + log(min_p); order preserved. */
static void min_p(struct cset *cs, float p)
{
	if (p <= 0.0f)
		return;
	float thr = max_logit(cs) + logf(p);
	int32_t k = 0;
	for (int32_t i = 0; i < cs->n; i++)
		if (cs->c[i].logit >= thr)
			cs->c[k++] = cs->c[i];
	cs->n = k;
}

static int32_t draw(struct cset *cs, float *w, float temp, uint64_t rng[4])
{
	/* weights exp(l/T - m/T); when m/T overflows (|logit| > 3e33 at the smallest
	 * temperature) (l - m)/T instead, which is <= 0 and never gives inf - inf */
	const float m = max_logit(cs), mt = m / temp;
	const bool wide = isinf(mt);
	double sum = 0.0;
	for (int32_t i = 0; i < cs->n; i++) {
		const float l = cs->c[i].logit;
		w[i] = wide ? expf((l - m) / temp) : expf(l / temp - mt);
		sum += w[i];
	}
	double target = rng_uniform(rng) * sum, cum = 0.0;
	for (int32_t i = 0; i < cs->n; i++) {
		cum += w[i];
		if (cum > target)
			return cs->c[i].id;
	}
	/* target within rounding of sum: the last token with any mass */
	for (int32_t i = cs->n - 1; i > 0; i--)
		if (cs->c[i].logit > -INFINITY)
			return cs->c[i].id;
	return cs->c[0].id;
}

/* ---- logprobs ---- */

static void fill_logprobs(const struct qc_sampler *s, struct qc_sampler_ws *ws,
			  int32_t n_vocab, struct qc_sample_result *res)
{
	const float *x = ws->x;
	float inv_t = s->p.temperature > 0.0f ? 1.0f / s->p.temperature : 1.0f;
	float m = -INFINITY;
	for (int32_t i = 0; i < n_vocab; i++)
		if (x[i] > m)
			m = x[i];
	double sum = 0.0;
	for (int32_t i = 0; i < n_vocab; i++)
		sum += expf((x[i] - m) * inv_t);
	double lse = (double)m * inv_t + log(sum);
	res->logprob = (float)((double)x[res->token] * inv_t - lse);

	int32_t k = 0, want = s->p.n_logprobs;
	struct cand *h = ws->tmp;
	res->n_top = 0;
	if (want == 0)
		return;
	for (int32_t i = 0; i < n_vocab; i++)
		heap_offer(h, &k, want, (struct cand){ x[i], i });
	heap_sort_desc(h, k);
	res->n_top = k;
	for (int32_t i = 0; i < k; i++) {
		res->top_ids[i] = h[i].id;
		res->top_logprobs[i] = (float)((double)h[i].logit * inv_t - lse);
	}
}

/* ---- the chain ---- */

bool qc_sampler_is_greedy(const struct qc_sampler *s)
{
	const struct qc_sampler_params *p = &s->p;
	return p->temperature <= 0.0f && !p->logprobs && p->n_logprobs <= 0 && !has_edits(s) &&
	       (s->hist_n == 0 || (p->repeat_penalty == 1.0f && p->frequency_penalty == 0.0f &&
				   p->presence_penalty == 0.0f));
}

void qc_sampler_take(struct qc_sampler *s, int32_t token, struct qc_sample_result *res)
{
	memset(res, 0, sizeof *res);
	res->logprob = NAN;
	res->token = token;
	s->n_drawn++;
	qc_sampler_accept(s, &res->token, 1);
}

int32_t qc_sampler_top_need(const struct qc_sampler *s, int32_t n_vocab)
{
	const struct qc_sampler_params *p = &s->p;
	if (qc_sampler_is_greedy(s))
		return 1;
	const bool plain = p->temperature > 0.0f && !p->logprobs && p->n_logprobs <= 0 && !has_edits(s) &&
			   (s->hist_n == 0 || (p->repeat_penalty == 1.0f && p->frequency_penalty == 0.0f &&
					       p->presence_penalty == 0.0f));
	return plain && p->top_k >= 2 && p->top_k < n_vocab ? p->top_k : 0;
}

int qc_sampler_sample_top(struct qc_sampler *s, struct qc_sampler_ws *ws, const int32_t *ids,
			  const float *logits, int32_t n, struct qc_sample_result *res, struct qc_err *err)
{
	if (n < 2 || n > ws->n_vocab || n != s->p.top_k || qc_sampler_top_need(s, INT32_MAX) != n)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sampler: %d candidates given, this request needs %s", n,
				  qc_sampler_top_need(s, INT32_MAX) > 1 ? "top_k of them" : "the whole row");
	struct cset cs = { ws->cand, ws->tmp, n, true };
	for (int32_t i = 0; i < n; i++) {
		if (isnan(logits[i]) || logits[i] == INFINITY)
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "sampler: logit of token %d is %f", ids[i],
					  (double)logits[i]);
		cs.c[i] = (struct cand){ logits[i], ids[i] };
	}
	/* what top_k leaves in the full chain: these n, best first */
	memset(res, 0, sizeof *res);
	res->logprob = NAN;
	top_p(&cs, ws, s->p.top_p);
	min_p(&cs, s->p.min_p);
	res->token = draw(&cs, ws->w, s->p.temperature, s->rng);
	s->n_drawn++;
	qc_sampler_accept(s, &res->token, 1);
	return QC_OK;
}

int qc_sampler_sample(struct qc_sampler *s, struct qc_sampler_ws *ws, const float *logits,
		      int32_t n_vocab, struct qc_sample_result *res, struct qc_err *err)
{
	const struct qc_sampler_params *p = &s->p;
	float *x = ws->x;
	bool any = false;

	if (n_vocab < 1 || n_vocab > ws->n_vocab)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sampler: row of %d logits, workspace holds %d", n_vocab,
				  ws->n_vocab);
	if (qc_sampler_is_greedy(s)) {
		/* plain greedy: one pass that checks and takes the argmax (lowest id on ties),
		 * the same token the general path picks, with no copy of the row */
		int32_t best = -1;
		float bv = -INFINITY;
		bool bad = false;
		for (int32_t i = 0; i < n_vocab; i++) {
			const float v = logits[i];
			bad |= isnan(v) | (v == INFINITY);
			if (v > bv) {
				bv = v;
				best = i;
			}
		}
		if (!bad && best >= 0) {
			qc_sampler_take(s, best, res);
			return QC_OK;
		}
		/* a bad row: the general path below names the offending logit */
	}
	for (int32_t i = 0; i < n_vocab; i++) {
		float v = logits[i];
		if (isnan(v) || v == INFINITY)
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
					  "sampler: logit of token %d is %f", i, (double)v);
		any |= v > -INFINITY;
	}
	if (!any)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sampler: all %d logits are -inf", n_vocab);

	memcpy(x, logits, (size_t)n_vocab * sizeof *x);
	apply_penalties(s, x, n_vocab);
	if (!apply_edits(s, x, n_vocab))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sampler: min_tokens bans every token of the %d left", n_vocab);

	memset(res, 0, sizeof *res);
	res->logprob = NAN;
	if (p->temperature <= 0.0f) {
		/* every filter keeps the maximum, so greedy skips the chain */
		int32_t best = 0;
		for (int32_t i = 1; i < n_vocab; i++)
			if (x[i] > x[best])
				best = i;
		res->token = best;
	} else {
		struct cset cs = { ws->cand, ws->tmp, n_vocab, false };
		for (int32_t i = 0; i < n_vocab; i++)
			cs.c[i] = (struct cand){ x[i], i };
		top_k(&cs, p->top_k);
		top_p(&cs, ws, p->top_p);
		min_p(&cs, p->min_p);
		res->token = draw(&cs, ws->w, p->temperature, s->rng);
	}
	if (p->logprobs || p->n_logprobs > 0)
		fill_logprobs(s, ws, n_vocab, res);
	s->n_drawn++;
	qc_sampler_accept(s, &res->token, 1);
	return QC_OK;
}
