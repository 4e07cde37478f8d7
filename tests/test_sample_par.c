/* test_sample_par.c — rows sampled on worker threads give exactly what one
 * thread gives (tokens, logprobs, PRNG advance over several steps), for 1, 3
 * and 8 threads and more rows than threads; the error reported for bad rows is
 * the lowest failing row's, whatever the thread count; no rows is no work. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "sample_par.h"

enum { V = 32000, R = 37, STEPS = 4 };

static uint64_t rng = 0x9e3779b97f4a7c15u;

static float frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)(rng >> 40) / (float)(1u << 24);
}

/* R samplers with mixed settings, seeded by row */
static void make_samplers(struct qc_sampler **s)
{
	for (int r = 0; r < R; r++) {
		struct qc_sampler_params p;
		struct qc_err err = {0};
		qc_sampler_params_init(&p);
		p.temperature = r % 5 == 0 ? 0.0f : 0.5f + 0.1f * (float)(r % 7);
		p.top_p = r % 3 ? 0.9f : 1.0f;
		p.min_p = r % 4 == 1 ? 0.05f : 0.0f;
		p.top_k = r % 6 == 2 ? 40 : 0;
		p.repeat_penalty = r % 8 == 3 ? 1.2f : 1.0f;
		p.logprobs = r % 9 == 4;
		p.n_logprobs = r % 9 == 4 ? 3 : 0;
		p.seed = 1000 + (uint64_t)r;
		CHECK(qc_sampler_new(&p, 64, &s[r], &err) == QC_OK, "sampler %d: %s", r, err.msg);
		const int32_t hist[4] = {r, r + 1, 7, 7};
		qc_sampler_accept(s[r], hist, 4);
	}
}

int main(void)
{
	float *x = malloc(sizeof(float) * (size_t)R * V * STEPS);
	for (size_t i = 0; i < (size_t)R * V * STEPS; i++)
		x[i] = 8.0f * frand() - 4.0f;
	const int threads[] = {1, 3, 8};
	struct qc_sample_result want[STEPS][R];
	for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
		struct qc_sample_par *sp = NULL;
		struct qc_sampler *s[R];
		struct qc_err err = {0};
		CHECK(qc_sample_par_new(threads[t], V, &sp, &err) == QC_OK, "new: %s", err.msg);
		make_samplers(s);
		int same = 0;
		for (int st = 0; st < STEPS; st++) {
			struct qc_sample_result res[R];
			struct qc_sample_job jobs[R];
			memset(res, 0, sizeof res);
			for (int r = 0; r < R; r++)
				jobs[r] = (struct qc_sample_job){s[r], x + ((size_t)st * R + (size_t)r) * V, &res[r], QC_OK};
			CHECK(qc_sample_par_run(sp, jobs, R, V, &err) == QC_OK, "run: %s", err.msg);
			for (int r = 0; r < R; r++) {
				if (t == 0) {
					want[st][r] = res[r];
					continue;
				}
				const bool eq = res[r].token == want[st][r].token && res[r].n_top == want[st][r].n_top &&
						(isnan(res[r].logprob) ? isnan(want[st][r].logprob)
									: res[r].logprob == want[st][r].logprob);
				same += eq;
			}
		}
		if (t)
			CHECK(same == R * STEPS, "%d threads: %d of %d draws equal to one thread's", threads[t], same,
			      R * STEPS);
		/* bad rows 5 and 20 (NaN at different places): row 5's error, always */
		float *bad = malloc(sizeof(float) * (size_t)R * V);
		memcpy(bad, x, sizeof(float) * (size_t)R * V);
		bad[5 * V + 123] = NAN;
		bad[20 * V + 456] = NAN;
		struct qc_sample_result res[R];
		struct qc_sample_job jobs[R];
		for (int r = 0; r < R; r++)
			jobs[r] = (struct qc_sample_job){s[r], bad + (size_t)r * V, &res[r], QC_OK};
		CHECK(qc_sample_par_run(sp, jobs, R, V, &err) == QC_EINVAL && strstr(err.msg, "token 123"),
		      "%d threads: bad rows: '%s'", threads[t], err.msg);
		int n_bad = 0;
		for (int r = 0; r < R; r++)
			n_bad += jobs[r].rc != QC_OK;
		CHECK(n_bad == 2 && jobs[5].rc == QC_EINVAL && jobs[20].rc == QC_EINVAL,
		      "%d threads: %d rows flagged, rows 5/20: %d %d", threads[t], n_bad, jobs[5].rc, jobs[20].rc);
		CHECK(qc_sample_par_run(sp, jobs, 0, V, &err) == QC_OK, "no rows");
		printf("  %d thread(s): %d rows x %d steps%s; bad rows report row 5's logit\n", threads[t], R, STEPS,
		       t ? " equal to one thread's" : "");
		free(bad);
		for (int r = 0; r < R; r++)
			qc_sampler_free(s[r]);
		qc_sample_par_free(sp);
	}
	struct qc_sample_par *sp = NULL;
	struct qc_err err = {0};
	CHECK(qc_sample_par_new(0, V, &sp, &err) == QC_EINVAL && !sp, "0 threads accepted");
	qc_sample_par_free(NULL);
	free(x);
	return check_report("test_sample_par");
}
