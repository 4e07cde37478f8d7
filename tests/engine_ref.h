/* engine_ref.h — the reference files of the engine-vs-reference tests
 * (test_engine_arch.c against llama.cpp, test_engine_gemma3.c against
 * transformers): tools/llref's JSON format (per prompt: prompt_ids, 32 greedy
 * ids with the reference's top-2 margins, first-step top 10 and, where the file
 * has it, the first step's log-sum-exp), and the comparison rules both apply:
 * ids up to the first margin below MARGIN_MIN, the worst top-10 logit error, the
 * worst top-10 log-prob error; ref_run_bundle runs a bundle on them (the
 * transformers-referenced tests). Header-only, static functions.
 */
#ifndef QC_TEST_ENGINE_REF_H
#define QC_TEST_ENGINE_REF_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "engine.h"

#define N_GEN 32
#define MAX_PROMPTS 8
#define MAX_PROMPT 80
#define MARGIN_MIN 0.05

struct ref_prompt {
	int32_t prompt[MAX_PROMPT];
	int32_t n_prompt;
	int32_t ids[N_GEN];
	double margins[N_GEN];
	int32_t top_ids[10];
	double top_logits[10];
	double lse;                /* first_step_logsumexp, NAN when the file has none */
};

struct ref {
	struct ref_prompt p[MAX_PROMPTS];
	int n;
};

/* How far one run is from the reference. */
struct outcome {
	double top10_err;     /* worst first-step top-10 logit error over the prompts */
	double logprob_err;   /* same for log-probs (0 when the reference has none) */
	int mismatches;       /* prompts whose ids differ before the margin cut */
	int compared;         /* steps compared, all prompts */
};

/* The first-step logits of each prompt's request (qc_engine's logits callback). */
struct run {
	uint64_t id[MAX_PROMPTS];
	float *first[MAX_PROMPTS]; /* (n_vocab) first-step logits */
	int n;
};

static inline double ref_num_at(const cJSON *arr, int i)
{
	const cJSON *it = cJSON_GetArrayItem(arr, i);
	return cJSON_IsNumber(it) ? it->valuedouble : NAN;
}

/* One "greedy" entry into rp; false when a field is missing or mis-sized. */
static inline bool ref_load_prompt(const cJSON *e, struct ref_prompt *rp)
{
	const cJSON *pi = cJSON_GetObjectItem(e, "prompt_ids"), *ids = cJSON_GetObjectItem(e, "ids");
	const cJSON *mg = cJSON_GetObjectItem(e, "margins"), *top = cJSON_GetObjectItem(e, "first_step_top10");
	const cJSON *lse = cJSON_GetObjectItem(e, "first_step_logsumexp");
	const int np = cJSON_GetArraySize(pi);
	if (np < 1 || np > MAX_PROMPT || cJSON_GetArraySize(ids) != N_GEN || cJSON_GetArraySize(mg) != N_GEN ||
	    cJSON_GetArraySize(top) != 10)
		return false;
	rp->n_prompt = np;
	for (int i = 0; i < np; i++)
		rp->prompt[i] = (int32_t)ref_num_at(pi, i);
	for (int i = 0; i < N_GEN; i++) {
		rp->ids[i] = (int32_t)ref_num_at(ids, i);
		rp->margins[i] = ref_num_at(mg, i);
	}
	for (int i = 0; i < 10; i++) {
		const cJSON *t = cJSON_GetArrayItem(top, i);
		const cJSON *id = cJSON_GetObjectItem(t, "id"), *lg = cJSON_GetObjectItem(t, "logit");
		if (!cJSON_IsNumber(id) || !cJSON_IsNumber(lg))
			return false;
		rp->top_ids[i] = (int32_t)id->valuedouble;
		rp->top_logits[i] = lg->valuedouble;
	}
	rp->lse = cJSON_IsNumber(lse) ? lse->valuedouble : NAN;
	return true;
}

/* path's prompts into r; -1 when the file is missing or malformed. */
static inline int load_ref(const char *path, struct ref *r)
{
	char *txt = check_read_file(path, NULL);
	cJSON *j = txt ? cJSON_Parse(txt) : NULL;
	free(txt);
	const cJSON *g = cJSON_GetObjectItem(j, "greedy");
	r->n = cJSON_GetArraySize(g);
	bool ok = j && r->n >= 1 && r->n <= MAX_PROMPTS;
	for (int p = 0; ok && p < r->n; p++)
		ok = ref_load_prompt(cJSON_GetArrayItem(g, p), &r->p[p]);
	cJSON_Delete(j);
	return ok ? 0 : -1;
}

/* Steps before the reference's first top-2 margin below MARGIN_MIN. */
static inline int steps_to_compare(const struct ref_prompt *rp)
{
	int n = 0;
	while (n < N_GEN && rp->margins[n] >= MARGIN_MIN)
		n++;
	return n;
}

/* The first step where got (n_got ids) differs from want within n steps, or -1. */
static inline int first_mismatch(const int32_t *got, int32_t n_got, const int32_t *want, int n)
{
	for (int i = 0; i < n; i++)
		if (i >= n_got || got[i] != want[i])
			return i;
	return -1;
}

static inline double top10_err(const float *logits, const struct ref_prompt *rp)
{
	double e = 0.0;
	for (int i = 0; i < 10; i++)
		e = fmax(e, fabs((double)logits[rp->top_ids[i]] - rp->top_logits[i]));
	return e;
}

/* Worst first-step top-10 log-prob error (log-sum-exp over n_vocab in double);
 * 0 when the reference has no log-sum-exp. */
static inline double logprob_err(const float *logits, int32_t n_vocab, const struct ref_prompt *rp)
{
	if (isnan(rp->lse))
		return 0.0;
	float mx = logits[0];
	for (int32_t i = 1; i < n_vocab; i++)
		mx = logits[i] > mx ? logits[i] : mx;
	double sum = 0.0;
	for (int32_t i = 0; i < n_vocab; i++)
		sum += exp((double)logits[i] - (double)mx);
	const double lse = (double)mx + log(sum);
	double e = 0.0;
	for (int i = 0; i < 10; i++)
		e = fmax(e, fabs(((double)logits[rp->top_ids[i]] - lse) - (rp->top_logits[i] - rp->lse)));
	return e;
}

static inline void on_logits(void *ctx, uint64_t id, int32_t step, const float *logits, int32_t n_vocab)
{
	struct run *r = ctx;
	for (int p = 0; p < r->n; p++)
		if (r->id[p] == id && step == 0)
			memcpy(r->first[p], logits, sizeof(float) * (size_t)n_vocab);
}

/* Every prompt of ref through engine e (model m, greedy, N_GEN tokens, e's
 * on_logits callback filling r), scored into *out (zeroed by the caller): ids up
 * to the margin cut, worst top-10 logit and log-prob errors. Frees r's rows. */
static inline int ref_score_prompts(struct qc_engine *e, const struct qc_model *m, const struct ref *ref,
				    struct run *r, struct outcome *out, const char *what)
{
	struct qc_err err = {0};
	int rc = QC_OK;
	for (int p = 0; p < ref->n && rc == QC_OK; p++) {
		struct qc_engine_request q = {.prompt = ref->p[p].prompt, .n_prompt = ref->p[p].n_prompt,
					      .max_tokens = N_GEN, .ignore_eos = true};
		qc_sampler_params_init(&q.sampling);
		q.sampling.temperature = 0.0f;
		r->first[p] = calloc((size_t)m->cfg.n_vocab, sizeof(float));
		rc = qc_engine_add(e, &q, &r->id[p], &err);
	}
	while (rc == QC_OK && qc_engine_has_work(e))
		rc = qc_engine_step(e, &err);
	CHECK(rc == QC_OK, "%s: run: %s", what, err.msg);
	for (int p = 0; p < ref->n; p++) {
		const int32_t *ids = NULL;
		int32_t n = 0;
		enum qc_sched_finish fin;
		if (rc == QC_OK && r->first[p] && qc_engine_output(e, r->id[p], &ids, &n, &fin) == QC_OK) {
			const int cmp = steps_to_compare(&ref->p[p]);
			out->mismatches += first_mismatch(ids, n, ref->p[p].ids, cmp) >= 0;
			out->compared += cmp;
			out->top10_err = fmax(out->top10_err, top10_err(r->first[p], &ref->p[p]));
			out->logprob_err = fmax(out->logprob_err, logprob_err(r->first[p], m->cfg.n_vocab, &ref->p[p]));
		}
		free(r->first[p]);
		r->first[p] = NULL;
	}
	return rc;
}

/* Edits a loaded model so that one feature is off (a test's breaker). */
typedef void (*ref_breaker_fn)(struct qc_model *m);

/* An engine on bundle with options o (its logits callback filling r), the
 * breaker (may be NULL) applied to the loaded model: QC_OK with *e and *m, or an
 * engine error (counted). A breaker may widen a window after the engine released
 * the blocks behind it, so breaker runs keep every block. */
static inline int ref_engine_open(const char *bundle, struct qc_engine_opts *o, struct run *r, ref_breaker_fn breaker,
				  struct qc_engine **e, struct qc_model **m)
{
	struct qc_err err = {0};
	o->on_logits = on_logits;
	o->cb_ctx = r;
	o->kv_keep_passed = breaker != NULL;
	int rc = qc_engine_new(bundle, o, e, &err);
	CHECK(rc == QC_OK, "%s: engine: %s", bundle, err.msg);
	if (rc)
		return rc;
	/* the backend reads the model at every forward: a test may edit it first */
	*m = (struct qc_model *)(uintptr_t)qc_engine_model(*e);
	if (breaker)
		breaker(*m);
	return QC_OK;
}

/* Greedy-decode every reference prompt on bundle with float activations and a
 * per-sequence context of seq_tokens; breaker (may be NULL) edits the model first.
 * Returns QC_OK and *out, or an engine error. */
static inline int ref_run_bundle(const char *bundle, const struct ref *ref, ref_breaker_fn breaker, int32_t seq_tokens,
				 struct outcome *out)
{
	struct run r = {.n = ref->n};
	struct qc_engine_opts o;
	struct qc_engine *e = NULL;
	struct qc_model *m = NULL;

	memset(out, 0, sizeof *out);
	qc_engine_opts_init(&o);
	o.act_round = QC_ACT_ROUND_NONE; /* the reference is float32 throughout */
	o.max_running = ref->n;
	o.max_seq_tokens = seq_tokens;
	o.n_threads = 2;
	int rc = ref_engine_open(bundle, &o, &r, breaker, &e, &m);
	if (rc)
		return rc;
	rc = ref_score_prompts(e, m, ref, &r, out, bundle);
	qc_engine_free(e);
	return rc;
}

#endif
