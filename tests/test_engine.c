/* test_engine.c — the CPU engine against llama.cpp's own greedy outputs.
 *
 * References: fixtures/reference/NAME.json, written by llama.cpp c392e50 (never by
 * this project): for every GGUF fixture with weights, 4 prompts' prompt_ids, 32
 * greedy ids, per-step margins and the first step's top-10 logits.
 * Per fixture (converted in-process to a temp cpu bundle): feed llama.cpp's
 * prompt_ids, decode 32 greedy tokens, require the ids to equal llama.cpp's up to
 * the first step whose reference margin is below MARGIN_MIN (after a near-tie
 * both continuations are legitimate), and the first step's top-10 logits within
 * a tolerance (see tol_for). Batched run: 16 requests over a KV pool small enough
 * to force preemption must each produce exactly their solo tokens.
 * Matmul threads: every logit bit-identical for 1, 2 and 3 threads (the SIMD
 * kernels against the portable ones: test_matmul_cpu.c).
 * Each checker also gets a deliberately wrong expectation that must fail.
 * RoPE: the CPU backend's (runtime/ops qc_ref_rope) against the formula.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "convert.h"
#include "engine.h"
#include "plan.h"
#include "ops.h"

/* reach the backend's statics (cpu_forward, struct cpu) for the forward_top
 * wrapper; this TU then provides qc_backend_cpu */
#include "../runtime/cpu/backend_cpu.c"


#define N_GEN 32
#define N_PROMPTS 4
#define MARGIN_MIN 0.05
#define MAX_PROMPT 64

struct ref_prompt {
	int32_t prompt[MAX_PROMPT];
	int32_t n_prompt;
	int32_t ids[N_GEN];
	double margins[N_GEN];
	int32_t top_ids[10];
	double top_logits[10];
};

struct run {
	uint64_t id[N_PROMPTS];
	const struct ref_prompt *ref[N_PROMPTS];
	float *first[N_PROMPTS];   /* (n_vocab) logits of the first generated step */
	double ours_gap[N_PROMPTS][N_GEN]; /* our max logit - our logit of llama.cpp's id */
	int32_t n_vocab;
};

static int load_ref(const char *path, struct ref_prompt *rp, char *gguf, size_t gguf_len)
{
	char *txt = check_read_file(path, NULL);
	cJSON *j = txt ? cJSON_Parse(txt) : NULL;
	int ok = 0;
	free(txt);
	if (!j)
		return -1;
	const cJSON *file = cJSON_GetObjectItem(j, "file");
	const cJSON *g = cJSON_GetObjectItem(j, "greedy");
	if (!cJSON_IsString(file) || cJSON_GetArraySize(g) != N_PROMPTS)
		goto out;
	snprintf(gguf, gguf_len, "%s", file->valuestring);
	for (int p = 0; p < N_PROMPTS; p++) {
		const cJSON *e = cJSON_GetArrayItem(g, p);
		const cJSON *pi = cJSON_GetObjectItem(e, "prompt_ids");
		const cJSON *ids = cJSON_GetObjectItem(e, "ids");
		const cJSON *mg = cJSON_GetObjectItem(e, "margins");
		const cJSON *top = cJSON_GetObjectItem(e, "first_step_top10");
		int np = cJSON_GetArraySize(pi);
		if (np < 1 || np > MAX_PROMPT || cJSON_GetArraySize(ids) != N_GEN ||
		    cJSON_GetArraySize(mg) != N_GEN || cJSON_GetArraySize(top) != 10)
			goto out;
		rp[p].n_prompt = np;
		for (int i = 0; i < np; i++)
			rp[p].prompt[i] = (int32_t)cJSON_GetArrayItem(pi, i)->valuedouble;
		for (int i = 0; i < N_GEN; i++) {
			rp[p].ids[i] = (int32_t)cJSON_GetArrayItem(ids, i)->valuedouble;
			rp[p].margins[i] = cJSON_GetArrayItem(mg, i)->valuedouble;
		}
		for (int i = 0; i < 10; i++) {
			const cJSON *t = cJSON_GetArrayItem(top, i);
			rp[p].top_ids[i] = (int32_t)cJSON_GetObjectItem(t, "id")->valuedouble;
			rp[p].top_logits[i] = cJSON_GetObjectItem(t, "logit")->valuedouble;
		}
	}
	ok = 1;
out:
	cJSON_Delete(j);
	return ok ? 0 : -1;
}

/* Steps compared: those before the first reference margin below min_margin. */
static int steps_to_compare(const struct ref_prompt *rp, double min_margin)
{
	int n = 0;
	while (n < N_GEN && rp->margins[n] >= min_margin)
		n++;
	return n;
}

/* Index of the first differing id among the first n, or -1 when all agree. */
static int first_mismatch(const int32_t *got, int32_t n_got, const int32_t *want, int n)
{
	for (int i = 0; i < n; i++)
		if (i >= n_got || got[i] != want[i])
			return i;
	return -1;
}

/* Largest |ours - llama.cpp| over the reference top-10. */
static double top10_err(const float *logits, const struct ref_prompt *rp)
{
	double e = 0.0;
	for (int i = 0; i < 10; i++) {
		double d = fabs((double)logits[rp->top_ids[i]] - rp->top_logits[i]);
		e = d > e ? d : e;
	}
	return e;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_dbl);
	return n ? v[n / 2] : 0.0;
}

static void on_logits(void *ctx, uint64_t id, int32_t step, const float *logits, int32_t n_vocab)
{
	struct run *r = ctx;
	for (int p = 0; p < N_PROMPTS; p++) {
		if (r->id[p] != id || step >= N_GEN)
			continue;
		float mx = logits[0];
		for (int32_t i = 1; i < n_vocab; i++)
			mx = logits[i] > mx ? logits[i] : mx;
		r->ours_gap[p][step] = (double)mx - (double)logits[r->ref[p]->ids[step]];
		if (step == 0 && r->first[p])
			memcpy(r->first[p], logits, sizeof(float) * (size_t)n_vocab);
	}
}

/* Tolerance on first-step logits, absolute.
 * Float weights (f32/f16/bf16): ggml and this engine both round activations to
 * the weight type and keep an f16 K/V cache; what remains is summation order
 * over <= 5 layers: 5e-3 on logits of magnitude <= 20 (measured <= 2.7e-3, f16).
 * Quantized weights: the engine rounds activations exactly as ggml's x86 CPU
 * path does (q8_0 with id = 127/amax and rint; q8_1 the same plus the fp16 block
 * sum s that q4_1/q5_1 dots multiply by m; q8_K reference) and then agrees to
 * ~1e-6: measured maximum 1.6e-5 (Q4_K_S), median 1.4e-6 over 112 runs, so 1e-4.
 * What remains is summation order (ggml: float sums of exact integer block
 * dots; here: double sums of decoded float weights), i.e. ulps of an
 * activation. Rounding (8-bit codes, f16 K/V and softmax weights) is
 * discontinuous, so an ulp matters when a value lands within an ulp of a
 * boundary; the runs in known_flips are such cases, each with the evidence, and
 * get the size of one flip instead (0.1 logits on these random models). Ids must equal llama.cpp's up to the first reference
 * margin below MARGIN_MIN, with no other leeway. */
#define TOL_FLOAT 5e-3
#define TOL_QUANT 1e-4
#define TOL_FLIP 0.1
#define MEDIAN_QUANT 1e-5
#define CLOSE_QUANT 1e-4      /* "no flip" level */
#define CLOSE_FRACTION 0.95   /* share of quantized runs that must be that close */

struct known_flip {
	const char *file;         /* fixture file name */
	int prompt;
	double tol;               /* first-step top-10 tolerance for this run */
	int ids_from;             /* ids compared only before this step (N_GEN: all) */
	const char *why;
};

/* Found with a temporary probe: list every rounding in the run that lies within
 * a few float ulps of a boundary (8-bit activation codes: x * id near k + 0.5;
 * f16 roundings of Q, K, V and softmax weights: x near the midpoint of two
 * binary16 values), force each one the other way in turn, and keep the one
 * that reproduces llama.cpp. Each is a genuine tie: a value one float ulp from
 * a rounding midpoint, where the two programs' summation orders differ by that
 * ulp. Neither is in the 8-bit activation quantization: both are f16 roundings
 * (llama.cpp's f16 K/V cache and f16 softmax weights). */
static const struct known_flip known_flips[] = {
	/* layer 0, prompt position 3, K dim 97 after RoPE: k = 1.17431653, 1 float
	 * ulp (1.19e-7) above 1.17431640625, the midpoint of binary16 1.173828125
	 * and 1.1748046875; stored as the upper here. Storing the lower (llama.cpp's
	 * side of the midpoint) gives first-step top-10 error 9.8e-7 instead of
	 * 0.0907; no 8-bit code flip within 6e-5 of a boundary changes it. Ids still
	 * agree up to the margin cut. */
	{"tiny-llama-256-Q4_K_M-mix.gguf", 1, TOL_FLIP, N_GEN,
	 "f16 K cache tie: 1.17431653 vs midpoint 1.17431640625"},
	/* first step within 1.4e-6; ids differ at step 17 (ours 141, llama.cpp 306,
	 * whose margin there is 0.090). Run alone (qrun -p "The little dog",
	 * bit-identical to the batched run): a layer-0 V value -1.39306629, 1 float
	 * ulp from the binary16 midpoint -1.39306640625, and a softmax weight
	 * 0.248718262, exactly on the midpoint 0.24871826171875 (ties to even here;
	 * llama.cpp's value must sit an ulp away); forcing either the other way
	 * reproduces llama.cpp's ids 17..20 exactly. Steps before 17 are compared. */
	{"tiny-moe-256-Q8_0.gguf", 1, TOL_QUANT, 17,
	 "f16 V cache / softmax weight ties before step 17"},
};

static const struct known_flip *find_flip(const char *file, int prompt)
{
	for (size_t i = 0; i < sizeof known_flips / sizeof known_flips[0]; i++)
		if (!strcmp(known_flips[i].file, file) && known_flips[i].prompt == prompt)
			return &known_flips[i];
	return NULL;
}

static bool all_float(const struct qc_model *m)
{
	const struct qc_layer *L = &m->layers[0];
	const struct qc_mat *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_gate, &L->ffn_up,
				     &L->ffn_down, &L->gate_exps, &L->up_exps, &L->down_exps,
				     &m->output, &m->token_embd};
	for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
		if (ws[i]->data && qc_types[ws[i]->type].family != QC_FAMILY_FLOAT)
			return false;
	return true;
}

static double quant_err[256];
static int n_quant_err;

static int convert_to(const char *in, const char *out, unsigned flags)
{
	struct qc_convert_opts o = {.in = in, .out = out, .target = QC_TARGET_CPU,
				    .alignment = QC_BUNDLE_ALIGN, .plan_flags = flags};
	struct qc_err err = {0};
	int rc = qc_convert_gguf(&o, NULL, &err);
	CHECK(rc == QC_OK, "convert %s: %s", in, err.msg);
	return rc;
}

static void run_fixture(const char *fx, const char *tmpdir, const char *refname, unsigned flags,
			double *worst_err)
{
	struct ref_prompt rp[N_PROMPTS];
	char path[1024], gguf[512], in[1024], bundle[1024];
	struct qc_err err = {0};

	snprintf(path, sizeof path, "%s/reference/%s", fx, refname);
	CHECK(load_ref(path, rp, gguf, sizeof gguf) == 0, "%s: unreadable reference", path);
	snprintf(in, sizeof in, "%s/%s", fx, gguf);
	snprintf(bundle, sizeof bundle, "%s/m.qb", tmpdir);
	if (convert_to(in, bundle, flags))
		return;

	struct run r = {0};
	struct qc_engine_opts o;
	qc_engine_opts_init(&o);
	o.max_running = N_PROMPTS;
	o.max_seq_tokens = 128;
	o.on_logits = on_logits;
	o.cb_ctx = &r;
	struct qc_engine *e = NULL;
	int rc = qc_engine_new(bundle, &o, &e, &err);
	unlink(bundle);
	CHECK(rc == QC_OK, "%s: engine: %s", gguf, err.msg);
	if (rc)
		return;
	r.n_vocab = qc_engine_model(e)->cfg.n_vocab;
	for (int p = 0; p < N_PROMPTS; p++) {
		struct qc_engine_request q = {.prompt = rp[p].prompt, .n_prompt = rp[p].n_prompt,
					      .max_tokens = N_GEN, .ignore_eos = true};
		qc_sampler_params_init(&q.sampling);
		q.sampling.temperature = 0.0f;
		r.first[p] = calloc((size_t)r.n_vocab, sizeof(float));
		r.ref[p] = &rp[p];
		rc = qc_engine_add(e, &q, &r.id[p], &err);
		CHECK(rc == QC_OK, "%s: add: %s", gguf, err.msg);
	}
	while (rc == QC_OK && qc_engine_has_work(e))
		rc = qc_engine_step(e, &err);
	CHECK(rc == QC_OK, "%s: step: %s", gguf, err.msg);

	const bool fl = all_float(qc_engine_model(e));
	const double tol = fl ? TOL_FLOAT : TOL_QUANT;
	char line[256];
	int off = snprintf(line, sizeof line, "  %-31s%s", strchr(gguf, '/') ? strchr(gguf, '/') + 1 : gguf,
			   flags ? "          " : " (unfused)");
	double maxe = 0.0;
	for (int p = 0; p < N_PROMPTS; p++) {
		const int32_t *ids = NULL;
		int32_t n = 0;
		enum qc_sched_finish fin;
		CHECK(qc_engine_output(e, r.id[p], &ids, &n, &fin) == QC_OK && n == N_GEN,
		      "%s prompt %d: %d tokens", gguf, p, n);
		const char *base = strchr(gguf, '/') ? strchr(gguf, '/') + 1 : gguf;
		const struct known_flip *kf = fl ? NULL : find_flip(base, p);
		int cmp = steps_to_compare(&rp[p], MARGIN_MIN);
		if (kf && kf->ids_from < cmp)
			cmp = kf->ids_from;
		int bad = first_mismatch(ids, n, rp[p].ids, cmp);
		CHECK(bad < 0, "%s prompt %d: id %d at step %d, llama.cpp %d (margins %.4f / ours %.4f)",
		      gguf, p, bad >= 0 && bad < n ? ids[bad] : -1, bad, bad >= 0 ? rp[p].ids[bad] : -1,
		      bad >= 0 ? rp[p].margins[bad] : 0.0, bad >= 0 && bad < N_GEN ? r.ours_gap[p][bad] : 0.0);
		const double ptol = kf ? kf->tol : tol;
		double te = top10_err(r.first[p], &rp[p]);
		CHECK(te <= ptol, "%s prompt %d: first-step top-10 logit error %.2e > %.0e", gguf, p, te, ptol);
		maxe = te > maxe ? te : maxe;
		if (!fl && n_quant_err < 256)
			quant_err[n_quant_err++] = te;
		off += snprintf(line + off, sizeof line - (size_t)off, " %2d/%-2d%s", bad < 0 ? cmp : bad, cmp,
				kf ? "*" : " ");
		free(r.first[p]);
	}
	printf("%s  top10 max err %.2e (tol %g)\n", line, maxe, tol);
	if (maxe > *worst_err)
		*worst_err = maxe;
	qc_engine_free(e);
}

/* The checkers must trip on wrong expectations. */
static void checkers_fail_on_wrong_input(void)
{
	struct ref_prompt rp = {0};
	int32_t got[N_GEN];
	for (int i = 0; i < N_GEN; i++) {
		rp.ids[i] = got[i] = i;
		rp.margins[i] = 1.0;
	}
	rp.margins[20] = 0.01;
	CHECK(steps_to_compare(&rp, MARGIN_MIN) == 20, "margin cut");
	CHECK(first_mismatch(got, N_GEN, rp.ids, 20) < 0, "equal ids");
	got[7] = 99;
	CHECK(first_mismatch(got, N_GEN, rp.ids, 20) == 7, "wrong id must be caught");
	CHECK(first_mismatch(got, 5, rp.ids, 20) == 5, "short output must be caught");
	float lg[16] = {0};
	for (int i = 0; i < 10; i++) {
		rp.top_ids[i] = i;
		rp.top_logits[i] = 1.0;
		lg[i] = 1.0f;
	}
	CHECK(top10_err(lg, &rp) == 0.0, "equal logits");
	lg[3] = 1.2f;
	CHECK(top10_err(lg, &rp) > TOL_QUANT, "a logit off by 0.2 must fail the quantized tolerance");
	CHECK(find_flip("tiny-llama-256-Q4_K_M-mix.gguf", 1) && !find_flip("tiny-llama-256-Q4_K_M-mix.gguf", 0),
	      "known flips loosen only the listed run");
	double e3[3] = {1e-6, 0.1, 2e-6};
	CHECK(median(e3, 3) == 2e-6, "median");
}

/* 16 requests (4 prompts, 16 lengths), concurrency 8, a pool of 24 blocks of 4
 * tokens (a full request needs up to 10): preemption must happen and must not
 * change any request's tokens compared with running it alone. */
static void batched_equals_alone(const char *fx, const char *tmpdir)
{
	struct ref_prompt rp[N_PROMPTS];
	char path[1024], gguf[512], in[1024], bundle[1024];
	struct qc_err err = {0};
	enum { N_REQ = 16 };
	int32_t alone[N_REQ][N_GEN], n_alone[N_REQ];
	int rc;

	snprintf(path, sizeof path, "%s/reference/stories260K.json", fx);
	if (load_ref(path, rp, gguf, sizeof gguf))
		return;
	snprintf(in, sizeof in, "%s/%s", fx, gguf);
	snprintf(bundle, sizeof bundle, "%s/b.qb", tmpdir);
	if (convert_to(in, bundle, QC_PLAN_FUSE_MOE))
		return;

	struct qc_engine_request q[N_REQ];
	for (int i = 0; i < N_REQ; i++) {
		memset(&q[i], 0, sizeof q[i]);
		q[i].prompt = rp[i % N_PROMPTS].prompt;
		q[i].n_prompt = rp[i % N_PROMPTS].n_prompt;
		q[i].max_tokens = 4 + (i * 7) % 29;
		q[i].ignore_eos = true;
		qc_sampler_params_init(&q[i].sampling);
		q[i].sampling.temperature = 0.0f;
	}

	struct qc_engine_opts o;
	qc_engine_opts_init(&o);
	o.max_running = 1;
	o.max_seq_tokens = 64;
	struct qc_engine *e = NULL;
	rc = qc_engine_new(bundle, &o, &e, &err);
	CHECK(rc == QC_OK, "solo engine: %s", err.msg);
	for (int i = 0; rc == QC_OK && i < N_REQ; i++) {
		uint64_t id;
		const int32_t *ids;
		enum qc_sched_finish fin;
		rc = qc_engine_add(e, &q[i], &id, &err);
		while (rc == QC_OK && qc_engine_has_work(e))
			rc = qc_engine_step(e, &err);
		CHECK(rc == QC_OK && qc_engine_output(e, id, &ids, &n_alone[i], &fin) == QC_OK,
		      "solo %d: %s", i, err.msg);
		if (rc)
			break;
		memcpy(alone[i], ids, sizeof(int32_t) * (size_t)n_alone[i]);
		CHECK(n_alone[i] == q[i].max_tokens, "solo %d: %d tokens", i, n_alone[i]);
		qc_engine_release(e, id);
	}
	qc_engine_free(e);
	/* the solo prompt-0 run is llama.cpp's sequence (margins are all large here) */
	CHECK(first_mismatch(alone[0], n_alone[0], rp[0].ids, n_alone[0]) < 0, "solo run 0 vs llama.cpp");

	o.max_running = 8;
	o.block_tokens = 4;
	uint64_t bb;
	struct qc_model *m = NULL;
	rc = qc_model_open(bundle, &m, &err);
	CHECK(rc == QC_OK, "%s", err.msg);
	if (rc) {
		unlink(bundle);
		return;
	}
	qc_backend_block_bytes(m, 4, QC_KV_F16, &bb, &err);
	qc_model_close(m);
	o.kv_budget_bytes = 24 * bb;
	rc = qc_engine_new(bundle, &o, &e, &err);
	unlink(bundle);
	CHECK(rc == QC_OK, "batched engine: %s", err.msg);
	if (rc)
		return;
	uint64_t id[N_REQ];
	for (int i = 0; rc == QC_OK && i < N_REQ; i++)
		rc = qc_engine_add(e, &q[i], &id[i], &err);
	while (rc == QC_OK && qc_engine_has_work(e))
		rc = qc_engine_step(e, &err);
	CHECK(rc == QC_OK, "batched run: %s", err.msg);
	struct qc_sched_stats st;
	qc_engine_stats(e, &st);
	CHECK(st.n_preemptions > 0, "pool of 24 blocks must force preemption");
	int same = 0;
	for (int i = 0; i < N_REQ; i++) {
		const int32_t *ids = NULL;
		int32_t n = 0;
		enum qc_sched_finish fin;
		qc_engine_output(e, id[i], &ids, &n, &fin);
		bool eq = n == n_alone[i] && first_mismatch(ids, n, alone[i], n) < 0;
		CHECK(eq, "request %d: batched differs from alone (%d vs %d tokens)", i, n, n_alone[i]);
		CHECK(fin == QC_SCHED_FINISH_LENGTH, "request %d finished with %s", i,
		      qc_sched_finish_name(fin));
		same += eq;
	}
	printf("  batched: %d/%d requests equal to their solo runs, %llu preemptions, %llu steps\n",
	       same, N_REQ, (unsigned long long)st.n_preemptions, (unsigned long long)st.n_steps);
	qc_engine_free(e);
}


/* Prefix cache: requests sharing prefixes give the same ids and logprobs, bit for
 * bit, with the cache on as with it off: run one at a time (later ones hit, some
 * hits ending inside a block), and all at once on a pool small enough to force
 * eviction and preemption. The reference is the cache-off run of the same
 * engine, whose correctness the fixture runs above check against llama.cpp. */
enum { PC_REQ = 10, PC_GEN = 6, PC_MAXP = 96 };

struct pc_out {
	int32_t ids[PC_GEN], n;
	float lp[PC_GEN];
	float top[PC_GEN][3];
};

static int pc_run(const char *bundle, const struct qc_engine_opts *o, struct qc_engine_request *q,
		  bool one_by_one, struct pc_out *out, struct qc_sched_stats *st)
{
	struct qc_engine *e = NULL;
	struct qc_err err = {0};
	uint64_t id[PC_REQ];
	int rc = qc_engine_new(bundle, o, &e, &err);
	CHECK(rc == QC_OK, "prefix-cache engine: %s", err.msg);
	for (int i = 0; rc == QC_OK && i < PC_REQ; i++) {
		rc = qc_engine_add(e, &q[i], &id[i], &err);
		while (one_by_one && rc == QC_OK && qc_engine_has_work(e))
			rc = qc_engine_step(e, &err);
	}
	while (rc == QC_OK && qc_engine_has_work(e))
		rc = qc_engine_step(e, &err);
	CHECK(rc == QC_OK, "prefix-cache run: %s", err.msg);
	for (int i = 0; rc == QC_OK && i < PC_REQ; i++) {
		const int32_t *ids;
		const struct qc_sample_result *res;
		int32_t n, nl;
		enum qc_sched_finish fin;
		qc_engine_output(e, id[i], &ids, &n, &fin);
		qc_engine_logprobs(e, id[i], &res, &nl);
		out[i].n = n;
		for (int32_t k = 0; k < n && k < PC_GEN; k++) {
			out[i].ids[k] = ids[k];
			out[i].lp[k] = res[k].logprob;
			for (int j = 0; j < 3; j++)
				out[i].top[k][j] = res[k].top_logprobs[j];
		}
	}
	if (e)
		qc_engine_stats(e, st);
	qc_engine_free(e);
	return rc;
}

static void prefix_cache_bit_identical(const char *fx, const char *tmpdir)
{
	struct ref_prompt rp[N_PROMPTS];
	char path[1024], gguf[512], in[1024], bundle[1024];
	int32_t prompts[PC_REQ][PC_MAXP];
	struct qc_engine_request q[PC_REQ];

	snprintf(path, sizeof path, "%s/reference/stories260K.json", fx);
	if (load_ref(path, rp, gguf, sizeof gguf))
		return;
	snprintf(in, sizeof in, "%s/%s", fx, gguf);
	snprintf(bundle, sizeof bundle, "%s/pc.qb", tmpdir);
	if (convert_to(in, bundle, QC_PLAN_FUSE_MOE))
		return;
	/* a shared head of the 4 reference prompts back to back, then request i's
	 * own tail: i % 3 == 0 repeats the head only (a hit as long as the whole-
	 * block rule allows), others cut it at 13 + i tokens (hits ending inside a
	 * block of 4) and go on with another prompt's ids */
	int32_t head[PC_MAXP], n_head = 0;
	for (int k = 0; k < N_PROMPTS; k++)
		for (int j = 0; j < rp[k].n_prompt && n_head < 48; j++)
			head[n_head++] = rp[k].prompt[j];
	for (int i = 0; i < PC_REQ; i++) {
		int32_t cut = 13 + i < n_head ? 13 + i : n_head - 1;
		int32_t n = i % 3 == 0 ? n_head : cut;
		memcpy(prompts[i], head, sizeof(int32_t) * (size_t)n);
		const struct ref_prompt *t = &rp[(i + 1) % N_PROMPTS];
		for (int j = 0; i % 3 && j < t->n_prompt && n < cut + 10; j++)
			prompts[i][n++] = t->prompt[j];
		memset(&q[i], 0, sizeof q[i]);
		q[i].prompt = prompts[i];
		q[i].n_prompt = n;
		q[i].max_tokens = PC_GEN;
		q[i].ignore_eos = true;
		qc_sampler_params_init(&q[i].sampling);
		q[i].sampling.temperature = 0.7f;   /* sampled, so logprobs matter everywhere */
		q[i].sampling.seed = 100 + (uint64_t)i;
		q[i].sampling.logprobs = true;
		q[i].sampling.n_logprobs = 3;
	}
	struct qc_engine_opts o;
	qc_engine_opts_init(&o);
	o.max_running = 1;
	o.block_tokens = 4;
	o.max_seq_tokens = 64;
	o.prefix_cache = false;
	struct pc_out off[PC_REQ], on[PC_REQ], tight[PC_REQ];
	struct qc_sched_stats st_off, st_on, st_tight;
	if (pc_run(bundle, &o, q, true, off, &st_off)) {
		unlink(bundle);
		return;
	}
	o.prefix_cache = true;
	pc_run(bundle, &o, q, true, on, &st_on);
	uint64_t bb;
	struct qc_model *m = NULL;
	struct qc_err err = {0};
	if (qc_model_open(bundle, &m, &err) == QC_OK) {
		qc_backend_block_bytes(m, 4, QC_KV_F16, &bb, &err);
		qc_model_close(m);
		o.max_running = 4;
		o.kv_budget_bytes = 20 * bb;   /* 20 blocks for 4 x up to 14: evict and preempt */
		pc_run(bundle, &o, q, false, tight, &st_tight);
	}
	unlink(bundle);
	int same_on = 0, same_tight = 0;
	for (int i = 0; i < PC_REQ; i++) {
		same_on += on[i].n == off[i].n && !memcmp(on[i].ids, off[i].ids, sizeof on[i].ids) &&
			   !memcmp(on[i].lp, off[i].lp, sizeof on[i].lp) &&
			   !memcmp(on[i].top, off[i].top, sizeof on[i].top);
		same_tight += tight[i].n == off[i].n && !memcmp(tight[i].ids, off[i].ids, sizeof tight[i].ids) &&
			      !memcmp(tight[i].lp, off[i].lp, sizeof tight[i].lp) &&
			      !memcmp(tight[i].top, off[i].top, sizeof tight[i].top);
	}
	CHECK(off[0].n == PC_GEN && st_off.prefix_hit_tokens == 0, "cache-off run: %d tokens, %llu hits",
	      off[0].n, (unsigned long long)st_off.prefix_hit_tokens);
	CHECK(same_on == PC_REQ, "one by one: %d/%d requests bit-identical with the cache", same_on, PC_REQ);
	CHECK(same_tight == PC_REQ, "tight pool: %d/%d requests bit-identical with the cache", same_tight,
	      PC_REQ);
	CHECK(st_on.prefix_hit_tokens >= 9 * 12, "one by one: only %llu tokens hit",
	      (unsigned long long)st_on.prefix_hit_tokens);
	CHECK(st_tight.prefix_hit_tokens > 0 && st_tight.n_preemptions > 0,
	      "tight pool: %llu hit tokens, %llu preemptions (both needed for the test to mean anything)",
	      (unsigned long long)st_tight.prefix_hit_tokens, (unsigned long long)st_tight.n_preemptions);
	/* the comparison must be able to fail: one flipped logprob bit */
	on[1].lp[2] = nextafterf(on[1].lp[2], 0.0f);
	CHECK(memcmp(on[1].lp, off[1].lp, sizeof on[1].lp) != 0, "a changed logprob compares equal");
	printf("  prefix cache: %d + %d of %d requests bit-identical; hits %llu of %llu tokens (one by one), "
	       "%llu of %llu with %llu preemptions\n", same_on, same_tight, PC_REQ,
	       (unsigned long long)st_on.prefix_hit_tokens, (unsigned long long)st_on.prefix_queried_tokens,
	       (unsigned long long)st_tight.prefix_hit_tokens, (unsigned long long)st_tight.prefix_queried_tokens,
	       (unsigned long long)st_tight.n_preemptions);
}

/* A backend with forward_top (as the CUDA one has), built on the CPU forward:
 * logit rows the engine did not ask for are overwritten with NaN (it must not
 * read them), and every third row it wanted the best ids of is reported as bad
 * (-1) with its row intact (the engine must then sample from the row). The
 * selection comes from runtime/ops (argmax, topk). */
static struct {
	long rows_taken, rows_topk, rows_wanted, rows_flagged;
} wrap;

static int wrap_forward_top(void *state, const struct qc_sched_plan *plan, const int32_t *want, float *logits,
			    int32_t *top_ids, float *top_logits, struct qc_err *err)
{
	int rc = cpu_forward(state, plan, logits, err);
	if (rc)
		return rc;
	const struct cpu *c = state;
	const int32_t V = c->m->cfg.n_vocab;
	for (int32_t k = 0; k < plan->n_logits; k++) {
		float *row = logits + (size_t)k * (size_t)V;
		int32_t *ids = top_ids + (size_t)k * QC_BACKEND_TOP_MAX;
		if (!want[k]) {
			wrap.rows_wanted++;
			continue;
		}
		if (want[k] == 1)
			qc_ref_argmax(row, 1, V, ids);
		else
			qc_ref_topk(row, 1, V, &want[k], QC_BACKEND_TOP_MAX, ids,
				    top_logits + (size_t)k * QC_BACKEND_TOP_MAX);
		wrap.rows_topk += want[k] > 1;
		if (wrap.rows_taken++ % 3 == 2) {
			ids[0] = -1;
			wrap.rows_flagged++;
		} else {
			for (int32_t i = 0; i < V; i++)
				row[i] = NAN;
		}
	}
	return QC_OK;
}

/* Mixed requests (plain greedy, greedy with logprobs, greedy with a repetition
 * penalty, seeded top-k sampling with and without top-p/min-p, top-k above what
 * the backend selects) through a backend with forward_top give exactly the
 * tokens and logprobs of the plain CPU backend. */
static void argmax_backend_equals_host(const char *fx, const char *tmpdir)
{
	struct ref_prompt rp[N_PROMPTS];
	char path[1024], gguf[512], in[1024], bundle[1024];
	struct qc_err err = {0};
	enum { N_REQ = 10, N_TOK = 20 };
	struct qc_backend_ops wrap_ops = qc_backend_cpu;
	wrap_ops.name = "cpu+top";
	wrap_ops.forward_top = wrap_forward_top;

	snprintf(path, sizeof path, "%s/reference/stories260K.json", fx);
	if (load_ref(path, rp, gguf, sizeof gguf))
		return;
	snprintf(in, sizeof in, "%s/%s", fx, gguf);
	snprintf(bundle, sizeof bundle, "%s/a.qb", tmpdir);
	if (convert_to(in, bundle, QC_PLAN_FUSE_MOE))
		return;
	struct qc_engine_request q[N_REQ];
	for (int i = 0; i < N_REQ; i++) {
		memset(&q[i], 0, sizeof q[i]);
		q[i].prompt = rp[i % N_PROMPTS].prompt;
		q[i].n_prompt = rp[i % N_PROMPTS].n_prompt;
		q[i].max_tokens = N_TOK;
		q[i].ignore_eos = true;
		qc_sampler_params_init(&q[i].sampling);
		q[i].sampling.temperature = 0.0f;
	}
	q[1].sampling.logprobs = true;
	q[1].sampling.n_logprobs = 3;
	q[2].sampling.repeat_penalty = 1.3f;
	q[3].sampling.temperature = 0.8f;
	q[3].sampling.seed = 7;
	q[3].sampling.top_k = 20;
	q[4].sampling.temperature = 1.0f;
	q[4].sampling.seed = 3;
	q[4].sampling.top_k = 50;
	q[4].sampling.top_p = 0.9f;
	q[4].sampling.min_p = 0.05f;
	q[5].sampling.temperature = 1.2f;
	q[5].sampling.seed = 11;
	q[5].sampling.top_k = QC_BACKEND_TOP_MAX + 1; /* more than forward_top gives: the whole row */
	q[6].sampling.temperature = 0.7f;
	q[6].sampling.seed = 5;
	q[6].sampling.top_k = QC_BACKEND_TOP_MAX;
	/* logit_bias on a greedy and a top-k request: a device argmax/top-k would
	   miss the bias, so these must come back whole (the wrapper NaNs rows the
	   engine did not ask for) and match the host; the greedy one bans the
	   reference's first token of prompt 0, so its output differs from it */
	q[8].prompt = rp[0].prompt;
	q[8].n_prompt = rp[0].n_prompt;
	q[8].sampling.n_bias = 2;
	q[8].sampling.bias_ids[0] = rp[0].ids[0];
	q[8].sampling.bias[0] = -100.0f;
	q[8].sampling.bias_ids[1] = rp[0].ids[3];
	q[8].sampling.bias[1] = 0.5f;
	q[9].sampling = q[8].sampling;
	q[9].sampling.temperature = 0.9f;
	q[9].sampling.seed = 13;
	q[9].sampling.top_k = 20;

	int32_t out[2][N_REQ][N_TOK];
	float lp[2][N_TOK];
	for (int pass = 0; pass < 2; pass++) {
		struct qc_engine_opts o;
		qc_engine_opts_init(&o);
		o.max_running = 4;
		o.max_seq_tokens = 64;
		o.backend = pass ? &wrap_ops : &qc_backend_cpu;
		struct qc_engine *e = NULL;
		uint64_t id[N_REQ];
		int rc = qc_engine_new(bundle, &o, &e, &err);
		CHECK(rc == QC_OK, "engine (%s): %s", o.backend->name, err.msg);
		for (int i = 0; rc == QC_OK && i < N_REQ; i++)
			rc = qc_engine_add(e, &q[i], &id[i], &err);
		while (rc == QC_OK && qc_engine_has_work(e))
			rc = qc_engine_step(e, &err);
		CHECK(rc == QC_OK, "run (%s): %s", o.backend->name, err.msg);
		for (int i = 0; rc == QC_OK && i < N_REQ; i++) {
			const int32_t *ids = NULL;
			int32_t n = 0;
			enum qc_sched_finish fin;
			qc_engine_output(e, id[i], &ids, &n, &fin);
			CHECK(n == N_TOK, "request %d (%s): %d tokens", i, o.backend->name, n);
			memcpy(out[pass][i], ids, sizeof(int32_t) * (size_t)(n < N_TOK ? n : N_TOK));
		}
		const struct qc_sample_result *res = NULL;
		int32_t nl = 0;
		if (rc == QC_OK && qc_engine_logprobs(e, id[1], &res, &nl) == QC_OK && nl == N_TOK)
			for (int k = 0; k < N_TOK; k++)
				lp[pass][k] = res[k].logprob;
		else
			CHECK(0, "no logprobs for request 1 (%s)", o.backend->name);
		qc_engine_free(e);
	}
	unlink(bundle);
	bool banned_seen = false;
	for (int k = 0; k < N_TOK; k++)
		banned_seen |= out[0][8][k] == rp[0].ids[0] || out[0][9][k] == rp[0].ids[0];
	CHECK(out[0][0][0] == rp[0].ids[0] && !banned_seen,
	      "logit_bias -100 on token %d: plain greedy starts %d, the biased requests still chose it", rp[0].ids[0],
	      out[0][0][0]);
	CHECK(!memcmp(out[0], out[1], sizeof out[0]), "forward_top run differs from the host-sampled run");
	CHECK(!memcmp(lp[0], lp[1], sizeof lp[0]), "logprobs differ through forward_top");
	CHECK(wrap.rows_taken > 0 && wrap.rows_topk > 0 && wrap.rows_flagged > 0 && wrap.rows_wanted > 0,
	      "forward_top path not exercised: %ld taken (%ld top-k), %ld flagged, %ld sampled on the host",
	      wrap.rows_taken, wrap.rows_topk, wrap.rows_flagged, wrap.rows_wanted);
	printf("  forward_top: %ld rows chosen from the backend's best ids (%ld of them top-k sampled, %ld "
	       "flagged bad and sampled from the row), %ld rows sampled on the host; tokens and logprobs "
	       "equal to the host-only run\n",
	       wrap.rows_taken, wrap.rows_topk, wrap.rows_flagged, wrap.rows_wanted);
}

/* A backend whose logits turn NaN for chosen requests (as a NaN weight row
 * makes them): every row of a request in poison_ids gets logit 55 = NaN. */
static uint64_t poison_ids[4];
static int n_poison;

static int poison_forward(void *state, const struct qc_sched_plan *plan, float *logits, struct qc_err *err)
{
	int rc = cpu_forward(state, plan, logits, err);
	if (rc)
		return rc;
	const int32_t V = ((const struct cpu *)state)->m->cfg.n_vocab;
	for (int32_t i = 0, k = 0; i < plan->n_seqs; i++) {
		if (!plan->need_logits[i])
			continue;
		for (int p = 0; p < n_poison; p++)
			if (plan->seq_ids[i] == poison_ids[p])
				logits[(size_t)k * (size_t)V + 55] = NAN;
		k++;
	}
	return QC_OK;
}

/* Issue 15: with QC_BAD_LOGITS_FAIL_REQUEST a request whose logits are not
 * finite finishes alone with FINISH_ERROR naming the logit, whichever sampling
 * path its row takes (greedy, temperature through the parallel sampler, the
 * on_logits path); the others, running in the same steps, give exactly the
 * tokens of a clean run, and later requests still run. The default mode still
 * fails the step (what qrun reports). */
static void on_logits_nop(void *ctx, uint64_t id, int32_t step, const float *logits, int32_t n_vocab)
{
	(void)ctx, (void)id, (void)step, (void)logits, (void)n_vocab;
}

static void bad_logits_fail_only_their_request(const char *fx, const char *tmpdir)
{
	char in[1024], bundle[1024];
	struct qc_err err = {0};
	enum { N_REQ = 6, N_TOK = 8 };
	struct qc_backend_ops pois_ops = qc_backend_cpu;
	pois_ops.name = "cpu+nan";
	pois_ops.forward = poison_forward;
	snprintf(in, sizeof in, "%s/gguf/stories260K.gguf", fx);
	snprintf(bundle, sizeof bundle, "%s/p.qb", tmpdir);
	if (convert_to(in, bundle, QC_PLAN_FUSE_MOE))
		return;
	int32_t prompt[3] = {1, 400, 30};
	struct qc_engine_request q[N_REQ];
	for (int i = 0; i < N_REQ; i++) {
		memset(&q[i], 0, sizeof q[i]);
		q[i].prompt = prompt;
		q[i].n_prompt = 3;
		q[i].max_tokens = N_TOK;
		q[i].ignore_eos = true;
		qc_sampler_params_init(&q[i].sampling);
		q[i].sampling.temperature = i % 2 ? 0.8f : 0.0f; /* greedy and sampled rows */
		q[i].sampling.seed = (uint64_t)i;
	}
	/* pass 0: clean; 1: requests 1 and 2 poisoned; 2: same with on_logits
	 * (rows sampled one by one); 3: default mode, the step fails */
	int32_t out[N_REQ][N_TOK];
	for (int pass = 0; pass < 4; pass++) {
		struct qc_engine_opts o;
		qc_engine_opts_init(&o);
		o.max_running = N_REQ;
		o.max_seq_tokens = 64;
		o.n_threads = 1;
		o.backend = &pois_ops;
		o.bad_logits = pass == 3 ? QC_BAD_LOGITS_FAIL_STEP : QC_BAD_LOGITS_FAIL_REQUEST;
		o.on_logits = pass == 2 ? on_logits_nop : NULL;
		struct qc_engine *e = NULL;
		uint64_t id[N_REQ + 1];
		n_poison = 0;
		int rc = qc_engine_new(bundle, &o, &e, &err);
		CHECK(rc == QC_OK, "engine: %s", err.msg);
		for (int i = 0; rc == QC_OK && i < N_REQ; i++)
			rc = qc_engine_add(e, &q[i], &id[i], &err);
		if (pass) {
			poison_ids[n_poison++] = id[1];
			poison_ids[n_poison++] = id[2];
		}
		int steps = 0;
		while (rc == QC_OK && qc_engine_has_work(e) && steps++ < 1000)
			rc = qc_engine_step(e, &err);
		if (pass == 3) {
			CHECK(rc == QC_EINVAL && strstr(err.msg, "token 55") && strstr(err.msg, "nan"),
			      "default mode: step %d '%s'", rc, err.msg);
			qc_engine_free(e);
			continue;
		}
		CHECK(rc == QC_OK, "pass %d: step failed: %s", pass, err.msg);
		for (int i = 0; rc == QC_OK && i < N_REQ; i++) {
			const int32_t *ids = NULL;
			int32_t n = 0;
			enum qc_sched_finish fin = QC_SCHED_FINISH_NONE;
			qc_engine_output(e, id[i], &ids, &n, &fin);
			const char *why = qc_engine_failure(e, id[i]);
			if (pass && (i == 1 || i == 2)) {
				CHECK(fin == QC_SCHED_FINISH_ERROR && n == 0 && why && strstr(why, "token 55") &&
				      strstr(why, "nan"), "pass %d: poisoned request %d: finish %s, %d tokens, '%s'",
				      pass, i, qc_sched_finish_name(fin), n, why ? why : "(none)");
				continue;
			}
			CHECK(fin == QC_SCHED_FINISH_LENGTH && n == N_TOK && !why, "pass %d: request %d: %s, %d tokens",
			      pass, i, qc_sched_finish_name(fin), n);
			if (!pass)
				memcpy(out[i], ids, sizeof out[i]);
			else
				CHECK(n == N_TOK && !memcmp(out[i], ids, sizeof out[i]),
				      "pass %d: request %d's tokens changed beside the failed ones", pass, i);
		}
		/* the engine goes on: a later request runs to its end */
		if (rc == QC_OK && pass)
			rc = qc_engine_add(e, &q[0], &id[N_REQ], &err);
		while (rc == QC_OK && qc_engine_has_work(e))
			rc = qc_engine_step(e, &err);
		if (pass) {
			const int32_t *ids = NULL;
			int32_t n = 0;
			enum qc_sched_finish fin = QC_SCHED_FINISH_NONE;
			CHECK(rc == QC_OK && !qc_engine_output(e, id[N_REQ], &ids, &n, &fin) && n == N_TOK &&
			      !memcmp(ids, out[0], sizeof out[0]), "pass %d: a request after the failure: %d tokens",
			      pass, n);
		}
		qc_engine_free(e);
	}
	unlink(bundle);
}

static void hash_logits(void *ctx, uint64_t id, int32_t step, const float *logits, int32_t n_vocab)
{
	uint64_t *h = ctx;
	const unsigned char *b = (const unsigned char *)logits;
	*h = (*h ^ (id * 1000003u + (uint64_t)step)) * 1099511628211u;
	for (size_t i = 0; i < sizeof(float) * (size_t)n_vocab; i++)
		*h = (*h ^ b[i]) * 1099511628211u; /* FNV-1a */
}

/* Every logit of every step is bit-identical for 1, 2 and 3 matmul threads
 * ($QC_THREADS, read by qc_engine_new), dense and MoE, q8_1-paired weights. */
static void threads_bit_identical(const char *fx, const char *tmpdir)
{
	static const char *files[] = {"gguf-quant/tiny-llama-256-Q5_1.gguf",
				      "gguf-quant/tiny-llama-256-Q8_0.gguf",
				      "gguf-quant/tiny-moe-256-Q4_K_M-mix.gguf"};
	const char *saved = getenv("QC_THREADS");
	char *keep = saved ? strdup(saved) : NULL;
	for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
		char in[1024], bundle[1024];
		uint64_t h[3] = {0};
		snprintf(in, sizeof in, "%s/%s", fx, files[f]);
		snprintf(bundle, sizeof bundle, "%s/t.qb", tmpdir);
		if (access(in, R_OK) || convert_to(in, bundle, QC_PLAN_FUSE_MOE))
			continue;
		for (int nt = 1; nt <= 3; nt++) {
			struct qc_err err = {0};
			struct qc_engine *e = NULL;
			struct qc_engine_opts o;
			char v[8];
			snprintf(v, sizeof v, "%d", nt);
			setenv("QC_THREADS", v, 1);
			qc_engine_opts_init(&o);
			o.max_running = 3;
			o.max_seq_tokens = 64;
			o.on_logits = hash_logits;
			o.cb_ctx = &h[nt - 1];
			h[nt - 1] = 14695981039346656037u;
			int rc = qc_engine_new(bundle, &o, &e, &err);
			CHECK(rc == QC_OK, "%s: %s", files[f], err.msg);
			int32_t prompt[9] = {1, 15, 27, 99, 3, 250, 7, 42, 11};
			for (int i = 0; rc == QC_OK && i < 3; i++) {
				uint64_t id;
				struct qc_engine_request q = {.prompt = prompt, .n_prompt = 3 + 3 * i,
							      .max_tokens = 12, .ignore_eos = true};
				qc_sampler_params_init(&q.sampling);
				q.sampling.temperature = 0.0f;
				rc = qc_engine_add(e, &q, &id, &err);
			}
			while (rc == QC_OK && qc_engine_has_work(e))
				rc = qc_engine_step(e, &err);
			CHECK(rc == QC_OK, "%s threads %d: %s", files[f], nt, err.msg);
			qc_engine_free(e);
		}
		unlink(bundle);
		CHECK(h[0] == h[1] && h[0] == h[2], "%s: logits differ across 1/2/3 threads", files[f]);
		printf("  threads 1/2/3: all logits bit-identical (%s)\n", files[f]);
	}
	if (keep)
		setenv("QC_THREADS", keep, 1);
	else
		unsetenv("QC_THREADS");
	free(keep);
}

/* RoPE against the published formula in double (RoFormer eq. 34; NORM pairs
 * adjacent dims, NEOX pairs i with i + n/2) and against each other through the
 * pairing permutation. */
static void rope_matches_formula(void)
{
	enum { HD = 16, NH = 2 };
	float a[NH * HD], b[NH * HD], c[NH * HD];
	const int32_t pos = 37;
	const double base = 10000.0, scale = 0.5;
	double worst = 0.0;
	for (int i = 0; i < NH * HD; i++)
		a[i] = (float)sin(1.7 * i + 0.3);
	memcpy(b, a, sizeof a);
	qc_ref_rope(b, &pos, 1, NH, HD, HD, QC_ROPE_NORM, powf((float)base, -2.0f / HD), (float)scale, NULL);
	for (int h = 0; h < NH; h++)
		for (int i = 0; i < HD / 2; i++) {
			double th = pos * scale * pow(base, -2.0 * i / HD);
			double x0 = a[h * HD + 2 * i], x1 = a[h * HD + 2 * i + 1];
			double y0 = x0 * cos(th) - x1 * sin(th), y1 = x0 * sin(th) + x1 * cos(th);
			worst = fmax(worst, fmax(fabs(y0 - b[h * HD + 2 * i]), fabs(y1 - b[h * HD + 2 * i + 1])));
		}
	CHECK(worst < 1e-4, "rope NORM vs formula: %.2e", worst);
	/* NEOX on the de-interleaved vector equals NORM, re-interleaved */
	for (int h = 0; h < NH; h++)
		for (int i = 0; i < HD / 2; i++) {
			c[h * HD + i] = a[h * HD + 2 * i];
			c[h * HD + i + HD / 2] = a[h * HD + 2 * i + 1];
		}
	qc_ref_rope(c, &pos, 1, NH, HD, HD, QC_ROPE_NEOX, powf((float)base, -2.0f / HD), (float)scale, NULL);
	int same = 1;
	for (int h = 0; h < NH; h++)
		for (int i = 0; i < HD / 2; i++)
			same &= c[h * HD + i] == b[h * HD + 2 * i] &&
				c[h * HD + i + HD / 2] == b[h * HD + 2 * i + 1];
	CHECK(same, "rope NEOX != NORM under the pairing permutation");
	memcpy(c, a, sizeof a);
	qc_ref_rope(c, &pos, 1, NH, HD, HD, QC_ROPE_NEOX, powf((float)base, -2.0f / HD), (float)scale, NULL);
	CHECK(memcmp(c, b, sizeof b) != 0, "NEOX applied to the interleaved vector must differ");
}

/* Bad inputs come back as errors, never as a crash or a silent run. */
static void engine_rejects_bad_input(const char *fx, const char *tmpdir)
{
	char in[1024], bundle[1024];
	struct qc_err err = {0};
	struct qc_engine *e = NULL;

	CHECK(qc_engine_new("/nonexistent/model.qb", NULL, &e, &err) != QC_OK && e == NULL,
	      "missing bundle must fail");
	snprintf(in, sizeof in, "%s/gguf/stories260K.gguf", fx);
	snprintf(bundle, sizeof bundle, "%s/n.qb", tmpdir);
	if (convert_to(in, bundle, QC_PLAN_FUSE_MOE))
		return;
	int rc = qc_engine_new(bundle, NULL, &e, &err);
	unlink(bundle);
	CHECK(rc == QC_OK, "%s", err.msg);
	if (rc)
		return;
	int32_t bad_tok[2] = {1, 512}, ok_tok[1] = {1};
	uint64_t id;
	struct qc_engine_request q = {.prompt = bad_tok, .n_prompt = 2, .max_tokens = 4};
	qc_sampler_params_init(&q.sampling);
	CHECK(qc_engine_add(e, &q, &id, &err) == QC_EINVAL, "token id = n_vocab must be refused");
	q.prompt = ok_tok;
	q.n_prompt = 1;
	q.max_tokens = 0;
	CHECK(qc_engine_add(e, &q, &id, &err) != QC_OK, "max_tokens 0 must be refused");
	q.max_tokens = 3;
	CHECK(qc_engine_add(e, &q, &id, &err) == QC_OK, "%s", err.msg);
	qc_engine_release(e, id); /* cancel while waiting */
	const int32_t *ids;
	int32_t n;
	enum qc_sched_finish fin;
	CHECK(qc_engine_output(e, id, &ids, &n, &fin) == QC_ENOTFOUND, "released id is gone");
	CHECK(!qc_engine_has_work(e), "cancelled request leaves no work");
	qc_engine_free(e);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(void)
{
	const char *fx = check_fixtures();
	char refdir[1024], tmpl[] = "/tmp/qc-test-engine-XXXXXX";
	clock_t t0 = clock();

	checkers_fail_on_wrong_input();
	rope_matches_formula();
	const char *tmpdir = mkdtemp(tmpl);
	CHECK(tmpdir != NULL, "mkdtemp");
	if (!tmpdir)
		return check_report("test_engine");
	if (!check_have_fixtures("test_engine")) {
		rmdir(tmpdir);
		return check_report("test_engine");
	}
	engine_rejects_bad_input(fx, tmpdir);
	bad_logits_fail_only_their_request(fx, tmpdir);

	snprintf(refdir, sizeof refdir, "%s/reference", fx);
	DIR *d = opendir(refdir);
	CHECK(d != NULL, "no reference directory %s", refdir);
	char *names[256];
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)) && n < 256) {
		size_t l = strlen(de->d_name);
		if (l > 5 && !strcmp(de->d_name + l - 5, ".json"))
			names[n++] = strdup(de->d_name);
	}
	if (d)
		closedir(d);
	qsort(names, (size_t)n, sizeof names[0], cmp_str);
	CHECK(n >= 29, "expected 29 reference files, found %d", n);

	double worst = 0.0;
	printf("fixture (steps matched / steps before the first margin < 0.05, per prompt; * = known flip, see known_flips)\n");
	for (int i = 0; i < n; i++) {
		run_fixture(fx, tmpdir, names[i], QC_PLAN_FUSE_MOE, &worst);
		if (!strncmp(names[i], "tiny-moe-", 9)) /* separate gate/up experts too */
			run_fixture(fx, tmpdir, names[i], 0, &worst);
		free(names[i]);
	}
	int close = 0;
	for (int i = 0; i < n_quant_err; i++)
		close += quant_err[i] <= CLOSE_QUANT;
	CHECK(close >= CLOSE_FRACTION * n_quant_err, "only %d of %d quantized runs within %.0e",
	      close, n_quant_err, CLOSE_QUANT);
	printf("quantized runs within %.0e of llama.cpp: %d of %d\n", CLOSE_QUANT, close, n_quant_err);
	double med = median(quant_err, n_quant_err);
	CHECK(n_quant_err >= 100 && med <= MEDIAN_QUANT,
	      "median first-step error over %d quantized runs %.2e > %.0e", n_quant_err, med, MEDIAN_QUANT);
	printf("quantized runs: median first-step top-10 error %.2e over %d runs\n", med, n_quant_err);
	batched_equals_alone(fx, tmpdir);
	prefix_cache_bit_identical(fx, tmpdir);
	argmax_backend_equals_host(fx, tmpdir);
	threads_bit_identical(fx, tmpdir);
	rmdir(tmpdir);
	printf("worst first-step top-10 error %.2e; %.1f s CPU\n", worst,
	       (double)(clock() - t0) / CLOCKS_PER_SEC);
	return check_report("test_engine");
}
