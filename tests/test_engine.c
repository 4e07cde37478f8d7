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
 * Each checker also gets a deliberately wrong expectation that must fail.
 * Includes runtime/backend_cpu.c to test its RoPE against the formula.
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

/* reach the backend's statics (rope); this TU then provides qc_backend_cpu */
#include "../runtime/backend_cpu.c"

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
 * path does (q8_0 with id = 127/amax and rint, q8_K reference) and then agrees
 * to ~1e-6 (checked below: median <= 1e-4 and >= 90% of runs <= 1e-3 over all
 * quantized runs). But 8-bit rounding is discontinuous: when a dot product lands
 * within float rounding of a code boundary, ggml (float sums of exact integer
 * block sums) and this engine (double sums of decoded values) can pick adjacent
 * codes, and these random-weight models amplify one such flip to ~0.1 logits.
 * Known systematic gap: q4_1/q5_1 dot with q8_1 activations whose block sum s is
 * stored as fp16 (ggml adds m * fp16(d * sum q)); the engine uses the exact sum.
 * The bound for a single run is therefore the size of the activation
 * quantization effect itself: logits with and without 8-bit activations differ
 * by up to 0.18 on these fixtures, so 0.15. Ids are compared up to the first
 * reference margin below MARGIN_MIN; an earlier divergence passes only as a
 * near-tie on both sides (llama.cpp's margin and ours between the two ids both
 * below 2 x tol: only then can logits within tol disagree on the argmax), and
 * is marked in the summary. */
#define TOL_FLOAT 5e-3
#define TOL_QUANT 0.15
#define MEDIAN_QUANT 1e-4
#define CLOSE_QUANT 1e-3      /* "no flip" level */
#define CLOSE_FRACTION 0.9    /* share of quantized runs that must be that close */

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
		int cmp = steps_to_compare(&rp[p], MARGIN_MIN);
		int bad = first_mismatch(ids, n, rp[p].ids, cmp);
		/* a divergence is legitimate only at a near-tie on both sides: llama.cpp's
		 * margin and ours between the two ids both within 2 x tol */
		bool tie = bad >= 0 && bad < n && rp[p].margins[bad] < 2 * tol &&
			   r.ours_gap[p][bad] < 2 * tol;
		CHECK(bad < 0 || tie, "%s prompt %d: id %d at step %d, llama.cpp %d (margins %.4f / ours %.4f)",
		      gguf, p, bad >= 0 && bad < n ? ids[bad] : -1, bad, bad >= 0 ? rp[p].ids[bad] : -1,
		      bad >= 0 ? rp[p].margins[bad] : 0.0, bad >= 0 && bad < N_GEN ? r.ours_gap[p][bad] : 0.0);
		double te = top10_err(r.first[p], &rp[p]);
		CHECK(te <= tol, "%s prompt %d: first-step top-10 logit error %.5f > %.5f", gguf, p, te, tol);
		maxe = te > maxe ? te : maxe;
		if (!fl && n_quant_err < 256)
			quant_err[n_quant_err++] = te;
		off += snprintf(line + off, sizeof line - (size_t)off, " %2d/%-2d%s", bad < 0 ? cmp : bad, cmp,
				bad < 0 ? " " : "*");
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
	qc_backend_block_bytes(m, 4, &bb, &err);
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
	rope(b, NH, HD, HD, pos, (float)base, (float)scale, QC_ROPE_NORM);
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
	rope(c, NH, HD, HD, pos, (float)base, (float)scale, QC_ROPE_NEOX);
	int same = 1;
	for (int h = 0; h < NH; h++)
		for (int i = 0; i < HD / 2; i++)
			same &= c[h * HD + i] == b[h * HD + 2 * i] &&
				c[h * HD + i + HD / 2] == b[h * HD + 2 * i + 1];
	CHECK(same, "rope NEOX != NORM under the pairing permutation");
	memcpy(c, a, sizeof a);
	rope(c, NH, HD, HD, pos, (float)base, (float)scale, QC_ROPE_NEOX);
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
	engine_rejects_bad_input(fx, tmpdir);

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
	printf("fixture (steps matched / steps before the first margin < 0.05, per prompt; * = near-tie divergence)\n");
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
	rmdir(tmpdir);
	printf("worst first-step top-10 error %.2e; %.1f s CPU\n", worst,
	       (double)(clock() - t0) / CLOCKS_PER_SEC);
	return check_report("test_engine");
}
