/* test_engine_choices.c — n choices of one prompt (qc_engine_add_n) on the CPU engine.
 *
 * Expected values come from the block arithmetic of PagedAttention sharing and
 * from solo runs, never from the group run itself:
 * - blocks in use while all n choices hold L > n_prompt tokens of K/V are
 *   floor(n_prompt / bt) shared prompt blocks + n * (ceil(L / bt) - that), and
 *   ceil(n_prompt / bt) right after the prompt (everything still shared);
 * - choice i's tokens are bit-identical to a solo qc_engine_add of the same
 *   request with seed + i (CPU backend, stories260K, temperature 1).
 * The negative checks: choice 1 differs from choice 0's solo run (the seed
 * matters), and the no-sharing count (n * ceil(L / bt)) is not what we see.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "convert.h"
#include "engine.h"
#include "plan.h"

#define N_CH 8
#define MAX_TOK 12
#define BT 4

static int convert_to(const char *in, const char *out)
{
	struct qc_convert_opts o = {.in = in, .out = out, .target = QC_TARGET_CPU,
				    .alignment = QC_BUNDLE_ALIGN, .plan_flags = QC_PLAN_FUSE_MOE};
	struct qc_err err = {0};
	int rc = qc_convert_gguf(&o, NULL, &err);
	CHECK(rc == QC_OK, "convert %s: %s", in, err.msg);
	return rc;
}

static struct qc_engine *open_engine(const char *bundle, int32_t max_running)
{
	struct qc_engine_opts o;
	struct qc_engine *e = NULL;
	struct qc_err err = {0};
	qc_engine_opts_init(&o);
	o.max_running = max_running;
	o.max_seq_tokens = 64;
	o.block_tokens = BT;
	int rc = qc_engine_new(bundle, &o, &e, &err);
	CHECK(rc == QC_OK, "engine: %s", err.msg);
	return e;
}

static void request(struct qc_engine_request *r, const int32_t *prompt, int32_t n, uint64_t seed)
{
	memset(r, 0, sizeof *r);
	r->prompt = prompt;
	r->n_prompt = n;
	r->max_tokens = MAX_TOK;
	r->ignore_eos = true;
	qc_sampler_params_init(&r->sampling);
	r->sampling.temperature = 1.0f;
	r->sampling.seed = seed;
}

static int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

/* Run prompt alone with seed; out receives MAX_TOK ids. */
static void solo(struct qc_engine *e, const int32_t *prompt, int32_t n, uint64_t seed, int32_t *out)
{
	struct qc_engine_request r;
	struct qc_err err = {0};
	uint64_t id;
	const int32_t *ids;
	int32_t n_ids = 0;
	enum qc_sched_finish fin;
	request(&r, prompt, n, seed);
	int rc = qc_engine_add(e, &r, &id, &err);
	while (rc == QC_OK && qc_engine_has_work(e))
		rc = qc_engine_step(e, &err);
	CHECK(rc == QC_OK && qc_engine_output(e, id, &ids, &n_ids, &fin) == QC_OK && n_ids == MAX_TOK,
	      "solo seed %llu: %s (%d tokens)", (unsigned long long)seed, err.msg, n_ids);
	memset(out, -1, sizeof(int32_t) * MAX_TOK);
	if (n_ids == MAX_TOK)
		memcpy(out, ids, sizeof(int32_t) * MAX_TOK);
	qc_engine_release(e, id);
}

static void choices_share_prompt_and_equal_solo(const char *bundle, const int32_t *prompt, int32_t n_prompt)
{
	const uint64_t seed = 1234;
	int32_t alone[N_CH][MAX_TOK];
	struct qc_engine *e = open_engine(bundle, N_CH);
	if (!e)
		return;
	for (int i = 0; i < N_CH; i++)
		solo(e, prompt, n_prompt, seed + (uint64_t)i, alone[i]);
	qc_engine_free(e);

	e = open_engine(bundle, N_CH);
	if (!e)
		return;
	struct qc_engine_request r;
	struct qc_err err = {0};
	uint64_t ids[N_CH];
	request(&r, prompt, n_prompt, seed);
	int rc = qc_engine_add_n(e, &r, N_CH, ids, &err);
	CHECK(rc == QC_OK, "add_n: %s", err.msg);
	const int32_t full = n_prompt / BT;
	int steps_checked = 0, steps_bad = 0, nosharing_seen = 0;
	while (rc == QC_OK && qc_engine_has_work(e)) {
		rc = qc_engine_step(e, &err);
		CHECK(rc == QC_OK, "step: %s", err.msg);
		const int32_t *out;
		int32_t n_out[N_CH];
		enum qc_sched_finish fin;
		bool live = true;
		for (int i = 0; i < N_CH; i++) {
			qc_engine_output(e, ids[i], &out, &n_out[i], &fin);
			live = live && fin == QC_SCHED_FINISH_NONE && n_out[i] == n_out[0];
		}
		if (!live || n_out[0] == 0)
			continue;
		/* K/V holds the prompt and every sampled token but the last */
		const int32_t L = n_prompt + n_out[0] - 1;
		const int32_t want = L == n_prompt ? ceil_div(n_prompt, BT)
						   : full + N_CH * (ceil_div(L, BT) - full);
		struct qc_sched_stats st;
		qc_engine_stats(e, &st);
		steps_checked++;
		steps_bad += st.blocks_used != want;
		nosharing_seen += st.blocks_used == N_CH * ceil_div(L, BT);
		CHECK(st.blocks_used == want, "prompt %d, L %d: %d blocks in use, want %d", n_prompt, L,
		      st.blocks_used, want);
	}
	CHECK(steps_checked >= MAX_TOK - 1 && steps_bad == 0, "%d steps checked", steps_checked);
	CHECK(nosharing_seen == 0, "a step used the blocks of %d unshared sequences", N_CH);
	int distinct = 0;
	for (int i = 0; i < N_CH; i++) {
		const int32_t *out = NULL;
		int32_t n = 0;
		enum qc_sched_finish fin;
		qc_engine_output(e, ids[i], &out, &n, &fin);
		CHECK(n == MAX_TOK && fin == QC_SCHED_FINISH_LENGTH && !memcmp(out, alone[i], sizeof alone[i]),
		      "prompt %d choice %d: %d tokens (%s), differs from its solo run (seed + %d)", n_prompt, i, n,
		      qc_sched_finish_name(fin), i);
		if (i > 0 && n == MAX_TOK)
			distinct += memcmp(out, alone[0], sizeof alone[0]) != 0;
	}
	/* the negative: with seed + i the choices do not all repeat choice 0 */
	CHECK(distinct > 0, "all %d choices equal choice 0's solo run: seeds ignored", N_CH);
	struct qc_sched_stats st;
	qc_engine_stats(e, &st);
	CHECK(st.blocks_used == 0, "%d blocks still used after every choice finished", st.blocks_used);
	qc_engine_free(e);
}

static void add_n_refuses_and_cancels(const char *bundle)
{
	const int32_t prompt[] = {1, 403, 407, 261, 378};
	struct qc_engine *e = open_engine(bundle, 4);
	if (!e)
		return;
	struct qc_engine_request r;
	struct qc_err err = {0};
	uint64_t ids[17];
	request(&r, prompt, 5, 7);
	CHECK(qc_engine_add_n(e, &r, 0, ids, &err) == QC_EINVAL, "0 choices accepted");
	CHECK(qc_engine_add_n(e, &r, 17, ids, &err) == QC_EINVAL, "17 choices accepted");
	CHECK(qc_engine_add_n(e, &r, 5, ids, &err) == QC_EINVAL && strstr(err.msg, "max_running"),
	      "5 choices over max_running 4: %s", err.msg);
	/* releasing choice 0 before its prompt ran cancels the others */
	int rc = qc_engine_add_n(e, &r, 3, ids, &err);
	CHECK(rc == QC_OK, "add_n: %s", err.msg);
	qc_engine_release(e, ids[0]);
	for (int i = 1; rc == QC_OK && i < 3; i++) {
		const int32_t *out;
		int32_t n;
		enum qc_sched_finish fin;
		CHECK(qc_engine_output(e, ids[i], &out, &n, &fin) == QC_OK && fin == QC_SCHED_FINISH_CANCELLED &&
			      n == 0, "choice %d after its parent's release: %s", i, qc_sched_finish_name(fin));
		qc_engine_release(e, ids[i]);
	}
	CHECK(!qc_engine_has_work(e), "work left after cancelling the group");
	/* releasing choice 2 early leaves choices 0 and 1 running to the end */
	rc = qc_engine_add_n(e, &r, 3, ids, &err);
	qc_engine_release(e, ids[2]);
	while (rc == QC_OK && qc_engine_has_work(e))
		rc = qc_engine_step(e, &err);
	for (int i = 0; rc == QC_OK && i < 2; i++) {
		const int32_t *out;
		int32_t n = 0;
		enum qc_sched_finish fin = QC_SCHED_FINISH_NONE;
		qc_engine_output(e, ids[i], &out, &n, &fin);
		CHECK(n == MAX_TOK && fin == QC_SCHED_FINISH_LENGTH, "choice %d: %d tokens, %s", i, n,
		      qc_sched_finish_name(fin));
	}
	CHECK(qc_engine_output(e, ids[2], NULL, NULL, NULL) == QC_ENOTFOUND, "released choice still known");
	struct qc_sched_stats st;
	qc_engine_stats(e, &st);
	CHECK(rc == QC_OK && st.blocks_used == 0, "%s; %d blocks left", err.msg, st.blocks_used);
	qc_engine_free(e);
}

int main(void)
{
	char tmpl[] = "/tmp/qc-test-choices-XXXXXX", in[1024], bundle[1024];
	const char *fx = check_fixtures();
	if (!check_have_fixtures("test_engine_choices"))
		return check_report("test_engine_choices");
	const char *tmpdir = mkdtemp(tmpl);
	CHECK(tmpdir != NULL, "mkdtemp");
	if (!tmpdir)
		return check_report("test_engine_choices");
	snprintf(in, sizeof in, "%s/gguf/stories260K.gguf", fx);
	snprintf(bundle, sizeof bundle, "%s/c.qb", tmpdir);
	if (!convert_to(in, bundle)) {
		/* 5 tokens: a partial last block (copy-on-write); 8: whole blocks only */
		const int32_t p5[] = {1, 403, 407, 261, 378};
		const int32_t p8[] = {1, 403, 407, 261, 378, 403, 407, 261};
		choices_share_prompt_and_equal_solo(bundle, p5, 5);
		choices_share_prompt_and_equal_solo(bundle, p8, 8);
		add_n_refuses_and_cancels(bundle);
		unlink(bundle);
	}
	rmdir(tmpdir);
	return check_report("test_engine_choices");
}
