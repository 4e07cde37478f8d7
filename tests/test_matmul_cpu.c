/* test_matmul_cpu.c — the CPU matmul kernels against an fp64 truth, and their invariants.
 *
 * For every weight type with a decoder (random weights: the type's encoder where it
 * has one, else random blocks whose decoded values are finite), both activation
 * modes and odd shapes (rows, tokens and lengths that are not multiples of any
 * tile): outputs NaN-poisoned first, each within the kernel's bound of
 * sum_k w[k] * x[k] in double (x as the kernel rounds it); rows split over two
 * slots, each token alone and the portable kernels all give the same bits.
 * q4_1 / q5_1 with ggml rounding take the q8_1 kernel (ggml's float order), bounded as
 * float chains; q4_K / q5_K / q6_K the K-quant kernel (exact codes: bounded by the
 * roundings of the float activations and dequantized weights the truth uses). Engine: the logits of every step are bit-identical whether the 100-token
 * prompt runs as one prefill or one token per forward (decode-shaped).
 * Includes runtime/cpu/matmul_cpu_int.h to force the portable kernels and read the job.
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

#include "matmul_cpu_int.h"

static uint64_t rng = 88172645463325252u;

static uint32_t rnd(void)
{
	return check_xorshift(&rng);
}

static float frnd(void)
{
	return (float)((double)rnd() / 4294967296.0 * 2.0 - 1.0);
}

/* A weight matrix of type t: encoder output, or random blocks re-drawn until
 * each decodes to finite values of magnitude <= 1e3. False if none found. */
static bool make_weights(enum qc_type t, int64_t n_in, int64_t n_out, uint8_t *data, float *dec)
{
	const struct qc_type_traits *tt = &qc_types[t];
	const int64_t nb = n_in / tt->block_elems;
	float tmp[256];
	for (int64_t r = 0; r < n_out; r++) {
		uint8_t *row = data + (size_t)r * (size_t)nb * tt->block_bytes;
		if (tt->quant_row) {
			for (int64_t k = 0; k < n_in; k++)
				dec[r * n_in + k] = frnd();
			tt->quant_row(dec + r * n_in, row, n_in);
		} else {
			for (int64_t b = 0; b < nb; b++) {
				uint8_t *blk = row + b * tt->block_bytes;
				bool ok = false;
				for (int tries = 0; !ok && tries < 1000; tries++) {
					for (int64_t i = 0; i < (int64_t)tt->block_bytes; i++)
						blk[i] = (uint8_t)rnd();
					tt->dequant_row(blk, tmp, tt->block_elems);
					ok = true;
					for (int64_t k = 0; k < tt->block_elems; k++)
						ok &= isfinite(tmp[k]) && fabsf(tmp[k]) <= 1e3f;
				}
				if (!ok)
					return false;
			}
		}
		tt->dequant_row(row, dec + r * n_in, n_in);
	}
	return true;
}

/* Bit-equal over the n_tok x n_out outputs at stride ldy. */
static bool same_bits(const float *a, const float *b, int64_t n_tok, int64_t n_out, int64_t ldy)
{
	for (int64_t t = 0; t < n_tok; t++)
		if (memcmp(a + t * ldy, b + t * ldy, (size_t)n_out * sizeof(float)))
			return false;
	return true;
}

/* Worst |y - truth| / bound over the outputs; > 1 fails. The float kernel's
 * bound is that of 16-lane fma chains plus the tree, (n/16 + 8) u sum |w x|;
 * the double kernels round once to float: u |truth| (+ double-level slack). */
static double err_ratio(const struct qc_matmul *mm, const float *dec, const float *y,
			int64_t n_in, int64_t n_out, int64_t n_tok, int64_t ldy, int64_t *first_bad)
{
	const struct qc_type_traits *tt = &qc_types[mm->parts[0].w->type];
	const double u = 0x1p-24;
	double worst = 0.0;
	*first_bad = -1;
	for (int64_t t = 0; t < n_tok; t++)
		for (int64_t r = 0; r < n_out; r++) {
			double truth = 0.0, mag = 0.0;
			for (int64_t k = 0; k < n_in; k++) {
				const double p = (double)dec[r * n_in + k] * (double)mm->xa[t * n_in + k];
				truth += p;
				mag += fabs(p);
			}
			for (int64_t b = 0; mm->q81 && b < n_in / 32; b++) {
				const uint8_t *wr = qc_mat_row(mm->parts[0].w, 0, r);
				const double p = (double)block_min(tt, wr, b) * mm->sdelta[t * (n_in / 32) + b];
				truth += p;
				mag += fabs(p);
			}
			const double bound = mm->kind == MM_FLOAT
						     ? ((double)n_in / 16.0 + 8.0) * u * mag + 1e-30
					     : mm->kind == MM_Q81 /* 8 fma chains of n/256, n/32 adds */
						     ? ((double)n_in / 32.0 + 8.0) * u * mag + 1e-30
					     : mm->kind == MM_KQ /* exact d_x q where truth has xa = fl(d_x q),
								    and dequant's rounding of d sc q - dmin m */
						     ? u * fabs(truth) + 2.0 * u * mag + 1e-30
						     : u * fabs(truth) + 1e-12 * mag + 1e-30;
			const double e = fabs((double)y[t * ldy + r] - truth) / bound;
			if (!(e <= 1.0) && *first_bad < 0)
				*first_bad = t * n_out + r;
			if (!(e <= worst))
				worst = isnan(e) ? INFINITY : e;
		}
	return worst;
}

static void force_portable(struct qc_matmul *mm)
{
	mm->avx2 = false;
	mm->vnni = false; /* and no in-place VNNI decode kernel (dot16): the repack + generic tile */
	mm->ftile = qc_matmul_ftile_generic;
	mm->itile = qc_matmul_itile_generic;
	mm->dot_dd = qc_matmul_dot_dd_generic;
	mm->dot_fd = qc_matmul_dot_fd_generic;
}

struct shape {
	int64_t n_in, n_out, n_tok;
};

/* One type, one rounding mode, one shape: every invariant. */
static void check_case(enum qc_type t, enum qc_act_round ar, struct shape sh, double *worst)
{
	const struct qc_type_traits *tt = &qc_types[t];
	const int64_t n_in = sh.n_in, n_out = sh.n_out, n_tok = sh.n_tok, ldy = n_out + 3;
	const size_t row_bytes = (size_t)(n_in / tt->block_elems) * tt->block_bytes;
	uint8_t *data = malloc(row_bytes * (size_t)n_out);
	float *dec = malloc(sizeof(float) * (size_t)(n_in * n_out));
	float *x = malloc(sizeof(float) * (size_t)(n_in * n_tok));
	float *y = malloc(sizeof(float) * (size_t)(ldy * n_tok));
	float *y2 = malloc(sizeof(float) * (size_t)(ldy * n_tok));
	float *yg = malloc(sizeof(float) * (size_t)(3 * ldy * n_tok));
	struct qc_matmul *mm = NULL, *mp = NULL;
	struct qc_err err = {0};

	if (!data || !dec || !x || !y || !y2 || !yg || !make_weights(t, n_in, n_out, data, dec)) {
		CHECK(0, "%s: no weights for %lld x %lld", tt->name, (long long)n_out, (long long)n_in);
		goto out;
	}
	for (int64_t i = 0; i < n_in * n_tok; i++)
		x[i] = frnd() * (i % 7 == 0 ? 4.0f : 1.0f);
	struct qc_mat w = {.data = data, .type = t, .n_in = n_in, .n_out = n_out, .n_mat = 1,
			   .row_bytes = row_bytes, .mat_stride = row_bytes * (size_t)n_out};
	if (qc_matmul_new(n_in, n_tok, 2, ar, &mm, &err) || qc_matmul_new(n_in, n_tok, 1, ar, &mp, &err)) {
		CHECK(0, "qc_matmul_new: %s", err.msg);
		goto out;
	}
	force_portable(mp);

	/* all rows, poisoned output with gaps that must stay NaN */
	for (int64_t i = 0; i < ldy * n_tok; i++)
		y[i] = NAN;
	qc_matmul_prepare(mm, &w, 0, x, n_tok, y, ldy);
	CHECK(ar != QC_ACT_ROUND_GGML || !qc_matmul_kq_kernel(t) || mm->kind == MM_KQ,
	      "%s: ggml-rounded activations must take the K-quant kernel", tt->name);
	CHECK(ar != QC_ACT_ROUND_GGML || !qc_matmul_find_int8(t) || mm->kind == MM_INT8,
	      "%s: ggml-rounded activations must take the int8 kernel", tt->name);
	qc_matmul_rows(mm, 0, 0, n_out);
	int64_t bad;
	const double e = err_ratio(mm, dec, y, n_in, n_out, n_tok, ldy, &bad);
	CHECK(e <= 1.0, "%s (%s, %lld x %lld, %lld tokens): error %.3g x the bound, first at output %lld",
	      tt->name, ar == QC_ACT_ROUND_GGML ? "ggml" : "none", (long long)n_out, (long long)n_in,
	      (long long)n_tok, e, (long long)bad);
	bool gaps = true;
	for (int64_t tk = 0; tk < n_tok; tk++)
		for (int64_t r = n_out; r < ldy; r++)
			gaps &= isnan(y[tk * ldy + r]);
	CHECK(gaps, "%s: wrote outside its rows", tt->name);
	if (e > *worst)
		*worst = e;

	/* rows split over two slots */
	for (int64_t i = 0; i < ldy * n_tok; i++)
		y2[i] = NAN;
	qc_matmul_prepare(mm, &w, 0, x, n_tok, y2, ldy);
	qc_matmul_rows(mm, 1, 0, n_out / 3);
	qc_matmul_rows(mm, 0, n_out / 3, n_out);
	CHECK(same_bits(y, y2, n_tok, n_out, ldy), "%s: split rows differ", tt->name);

	/* the matrix three times as one group (Q, K, V), its job rows split over two
	   slots inside the second part: each part equals the single job */
	for (int64_t i = 0; i < 3 * ldy * n_tok; i++)
		yg[i] = NAN;
	const struct qc_mat *gw[3] = {&w, &w, &w};
	float *gy[3] = {yg, yg + ldy * n_tok, yg + 2 * ldy * n_tok};
	const int64_t gl[3] = {ldy, ldy, ldy};
	qc_matmul_prepare_group(mm, 3, gw, 0, x, n_tok, gy, gl);
	CHECK(qc_matmul_job_rows(mm) == 3 * n_out, "%s: group of 3 has %lld rows", tt->name,
	      (long long)qc_matmul_job_rows(mm));
	qc_matmul_rows(mm, 1, 0, n_out + n_out / 3);
	qc_matmul_rows(mm, 0, n_out + n_out / 3, 3 * n_out);
	for (int i = 0; i < 3; i++)
		CHECK(same_bits(y, gy[i], n_tok, n_out, ldy), "%s: part %d of a group differs", tt->name, i);

	/* the activations rounded in two token ranges on two slots (a prefill's split) */
	for (int64_t i = 0; i < ldy * n_tok; i++)
		y2[i] = NAN;
	qc_matmul_plan_group(mm, 1, gw, 0, x, n_tok, &y2, &ldy);
	qc_matmul_round(mm, 1, n_tok / 2, n_tok);
	qc_matmul_round(mm, 0, 0, n_tok / 2);
	qc_matmul_rows(mm, 0, 0, n_out);
	CHECK(same_bits(y, y2, n_tok, n_out, ldy), "%s: split rounding differs", tt->name);

	/* each token alone (decode) equals its row of the batch (prefill) */
	bool alone = true;
	for (int64_t tk = 0; tk < n_tok; tk++) {
		qc_matmul_prepare(mm, &w, 0, x + tk * n_in, 1, y2, ldy);
		qc_matmul_rows(mm, 0, 0, n_out);
		alone &= !memcmp(y2, y + tk * ldy, sizeof(float) * (size_t)n_out);
	}
	CHECK(alone, "%s (%s, %lld tokens): a token alone differs from the batch", tt->name,
	      ar == QC_ACT_ROUND_GGML ? "ggml" : "none", (long long)n_tok);

	/* the portable kernels give the same bits */
	qc_matmul_prepare(mp, &w, 0, x, n_tok, y2, ldy);
	qc_matmul_rows(mp, 0, 0, n_out);
	CHECK(same_bits(y, y2, n_tok, n_out, ldy), "%s (%s): SIMD kernels differ from the portable ones",
	      tt->name, ar == QC_ACT_ROUND_GGML ? "ggml" : "none");
out:
	qc_matmul_free(mm);
	qc_matmul_free(mp);
	free(data);
	free(dec);
	free(x);
	free(y);
	free(y2);
	free(yg);
}

static bool weight_family(enum qc_family f)
{
	return f != QC_FAMILY_NONE && f != QC_FAMILY_PLAIN_INT;
}

static void every_type(void)
{
	int n_types = 0;
	for (int t = 0; t < QC_TYPE_COUNT; t++) {
		const struct qc_type_traits *tt = &qc_types[t];
		if (!tt->block_elems || !tt->dequant_row || !weight_family(tt->family))
			continue;
		const int64_t be = tt->block_elems;
		const int64_t lens[3] = {be == 1 ? 7 : be, be == 1 ? 33 : 3 * be, be == 1 ? 300 : 11 * be};
		const struct shape shapes[] = {
			{lens[0], 5, 1}, {lens[1], 37, 13}, {lens[2], 17, 37}, {lens[1], 1, 2},
			{be == 1 ? 3 * KC + 44 : be * ((2 * KC) / be + 3), 11, 5}, /* k in chunks */
		};
		double worst[2] = {0, 0};
		for (int m = 0; m < 2; m++)
			for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
				check_case((enum qc_type)t, m ? QC_ACT_ROUND_GGML : QC_ACT_ROUND_NONE, shapes[s],
					   &worst[m]);
		printf("  %-8s worst error / bound: float activations %.3f, ggml-rounded %.3f\n", tt->name,
		       worst[0], worst[1]);
		n_types++;
	}
	CHECK(n_types >= 30, "only %d weight types tested", n_types);
}

/* The checkers must trip: one flipped bit, a wrong truth. */
static void checkers_fail_on_wrong_input(void)
{
	float a[6] = {1, 2, 3, 4, 5, 6}, b[6];
	memcpy(b, a, sizeof a);
	CHECK(same_bits(a, b, 2, 3, 3), "equal outputs");
	uint32_t u;
	memcpy(&u, &b[4], sizeof u);
	u ^= 1;
	memcpy(&b[4], &u, sizeof u);
	CHECK(!same_bits(a, b, 2, 3, 3), "a one-ulp change must be caught");

	enum { N = 64 };
	static uint8_t data[N * 34];
	static float dec[N], x[N], y[1];
	struct qc_matmul *mm = NULL;
	struct qc_err err = {0};
	for (int k = 0; k < N; k++)
		x[k] = frnd();
	make_weights(QC_TYPE_Q8_0, N, 1, data, dec);
	struct qc_mat w = {.data = data, .type = QC_TYPE_Q8_0, .n_in = N, .n_out = 1, .n_mat = 1,
			   .row_bytes = 68, .mat_stride = 68};
	if (qc_matmul_new(N, 1, 1, QC_ACT_ROUND_GGML, &mm, &err) != QC_OK) {
		CHECK(0, "%s", err.msg);
		return;
	}
	qc_matmul_prepare(mm, &w, 0, x, 1, y, 1);
	qc_matmul_rows(mm, 0, 0, 1);
	int64_t bad;
	CHECK(err_ratio(mm, dec, y, N, 1, 1, 1, &bad) <= 1.0, "q8_0 dot within bound");
	dec[3] += 0.5f;
	CHECK(err_ratio(mm, dec, y, N, 1, 1, 1, &bad) > 1.0 && bad == 0, "a wrong truth must fail");
	y[0] = NAN;
	dec[3] -= 0.5f;
	CHECK(err_ratio(mm, dec, y, N, 1, 1, 1, &bad) > 1.0, "a NaN output must fail");
	qc_matmul_free(mm);
}

struct hash {
	uint64_t h[8];                /* per step */
	int n;
};

static void hash_logits(void *ctx, uint64_t id, int32_t step, const float *logits, int32_t n_vocab)
{
	struct hash *hs = ctx;
	(void)id;
	if (step < 0 || step >= 8)
		return;
	uint64_t h = 14695981039346656037u;
	const unsigned char *b = (const unsigned char *)logits;
	for (size_t i = 0; i < sizeof(float) * (size_t)n_vocab; i++)
		h = (h ^ b[i]) * 1099511628211u; /* FNV-1a */
	hs->h[step] = h;
	if (step + 1 > hs->n)
		hs->n = step + 1;
}

/* A 100-token prompt as one prefill, and one token per forward: every step's
 * logits bit-identical (the last prompt token's included). */
static void prefill_equals_decode(const char *fx, const char *tmpdir)
{
	static const char *files[] = {"gguf/stories260K.gguf", "gguf-quant/tiny-llama-256-Q8_0.gguf",
				      "gguf-quant/tiny-llama-256-Q4_0.gguf",
				      "gguf-quant/stories260K-F16.gguf",
				      "gguf-quant/tiny-llama-256-Q4_K_S.gguf"};
	for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
		char in[1024], bundle[1024];
		struct qc_err err = {0};
		snprintf(in, sizeof in, "%s/%s", fx, files[f]);
		snprintf(bundle, sizeof bundle, "%s/p.qb", tmpdir);
		struct qc_convert_opts co = {.in = in, .out = bundle, .target = QC_TARGET_CPU,
					     .alignment = QC_BUNDLE_ALIGN, .plan_flags = QC_PLAN_FUSE_MOE};
		if (qc_convert_gguf(&co, NULL, &err) != QC_OK) {
			CHECK(0, "convert %s: %s", in, err.msg);
			continue;
		}
		struct hash hs[2];
		memset(hs, 0, sizeof hs);
		for (int mode = 0; mode < 2; mode++) {
			struct qc_engine_opts o;
			struct qc_engine *e = NULL;
			qc_engine_opts_init(&o);
			o.max_running = 1;
			o.max_seq_tokens = 128;
			o.max_batch_tokens = mode ? 1 : 0;
			o.n_threads = 2;
			o.on_logits = hash_logits;
			o.cb_ctx = &hs[mode];
			int rc = qc_engine_new(bundle, &o, &e, &err);
			CHECK(rc == QC_OK, "%s: %s", files[f], err.msg);
			if (rc)
				continue;
			int32_t prompt[100];
			const int32_t nv = qc_engine_model(e)->cfg.n_vocab;
			for (int i = 0; i < 100; i++)
				prompt[i] = 1 + (i * 37) % (nv - 1);
			struct qc_engine_request q = {.prompt = prompt, .n_prompt = 100, .max_tokens = 4,
						      .ignore_eos = true};
			qc_sampler_params_init(&q.sampling);
			q.sampling.temperature = 0.0f;
			uint64_t id;
			rc = qc_engine_add(e, &q, &id, &err);
			while (rc == QC_OK && qc_engine_has_work(e))
				rc = qc_engine_step(e, &err);
			CHECK(rc == QC_OK, "%s: %s", files[f], err.msg);
			struct qc_sched_stats st;
			qc_engine_stats(e, &st);
			CHECK(mode ? st.n_steps >= 100 : st.n_steps <= 4, "%s: %llu steps", files[f],
			      (unsigned long long)st.n_steps);
			qc_engine_free(e);
		}
		unlink(bundle);
		CHECK(hs[0].n == 4 && hs[1].n == 4 && !memcmp(hs[0].h, hs[1].h, sizeof hs[0].h),
		      "%s: logits differ between one prefill and token-by-token", files[f]);
		printf("  %s: prefill of 100 tokens == 100 one-token forwards, 4 steps bit-identical\n",
		       files[f]);
	}
}

int main(void)
{
	char tmpl[] = "/tmp/qc-test-matmul-XXXXXX";
	checkers_fail_on_wrong_input();
	every_type();
	const char *tmpdir = mkdtemp(tmpl);
	CHECK(tmpdir != NULL, "mkdtemp");
	if (tmpdir) {
		if (check_have_fixtures("test_matmul_cpu"))
			prefill_equals_decode(check_fixtures(), tmpdir);
		rmdir(tmpdir);
	}
	return check_report("test_matmul_cpu");
}
