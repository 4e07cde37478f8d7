/* test_kv_fp8.c — the fp8 (E4M3FN) K/V cache of the CPU backend (--kv-dtype fp8).
 *
 * E4M3: encode/decode against the OCP 8-bit floating point spec's table (v1.0,
 * table 1 and section 5.3: max finite 448 = S.1111.110, smallest subnormal
 * 2^-9 = S.0000.001, NaN = S.1111.111, no infinities), not against our output.
 * Scales (ops.h qc_ref_kv_e4m3_exp): no value saturates, on random rows of every
 * magnitude and on adversarial ones (float's largest values, exact powers of two
 * times 448, one spike among tiny values); the error is E4M3's half step.
 * Rotation (ops.h qc_ref_kv_rotate): equal to the Hadamard matrix built from its
 * definition, its own inverse, q . k kept; fp8 attention within E4M3's bound of
 * the float one, and an unrotated-K pool stands out.
 * Engine, on the fixtures (skipped without them): the same --kv-mem holds at
 * least twice the tokens; batched == solo with fp8 under preemption; greedy ids
 * with fp8 equal f16's up to the first step whose f16 top-2 margin is < MARGIN.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "convert.h"
#include "engine.h"
#include "fp16.h"
#include "ops.h"
#include "plan.h"

/* A near-tie for fp8. No worst-case bound helps here: test_e2e's fp16 rule,
 * 2^-7 (1 + max |logit|) (unit roundoff 2^-11 x 16), scaled to E4M3's unit
 * roundoff 2^-4 is (1 + max |logit|), more than any margin. So MARGIN is
 * measured: with the rotated-K scheme every step with an f16 top-2 margin of 0.2
 * or more keeps f16's id on all fixtures (flips seen before the rotation at
 * margins 0.05..0.105; with K rotated at head_dim 8, one at 0.77, hence no
 * rotation below blocks of 16). 0.2 is about 2x the largest flip margin seen. */
#define MARGIN 0.2
#define N_GEN 24

static bool is_nan_code(uint8_t c)
{
	return (c & 0x7f) == 0x7f;
}

static void e4m3_matches_the_spec_table(void)
{
	static const struct {
		uint8_t code;
		float value;
	} tab[] = {
		{0x00, 0.0f}, {0x01, 0x1p-9f}, {0x07, 7 * 0x1p-9f}, {0x08, 0x1p-6f}, {0x38, 1.0f},
		{0x3f, 1.875f}, {0x40, 2.0f}, {0x77, 240.0f}, {0x7e, 448.0f}, {0xfe, -448.0f},
		{0x81, -0x1p-9f}, {0xb8, -1.0f},
	};
	for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
		CHECK(qc_e4m3_to_f32(tab[i].code) == tab[i].value, "decode 0x%02x = %g, spec %g", tab[i].code,
		      (double)qc_e4m3_to_f32(tab[i].code), (double)tab[i].value);
		CHECK(qc_f32_to_e4m3(tab[i].value) == tab[i].code, "encode %g = 0x%02x, spec 0x%02x",
		      (double)tab[i].value, qc_f32_to_e4m3(tab[i].value), tab[i].code);
	}
	CHECK(isnan(qc_e4m3_to_f32(0x7f)) && isnan(qc_e4m3_to_f32(0xff)), "S.1111.111 is NaN");
	CHECK(is_nan_code(qc_f32_to_e4m3(NAN)) && is_nan_code(qc_f32_to_e4m3(INFINITY)) &&
	      qc_f32_to_e4m3(-INFINITY) == 0xff, "NaN and inf encode as NaN (no infinities)");
	/* round to nearest even: ties between neighbours */
	CHECK(qc_f32_to_e4m3(464.0f) == 0x7e, "464 (448/480 tie) -> 448, the even side");
	CHECK(is_nan_code(qc_f32_to_e4m3(464.5f)), "past 464: NaN, not a silent 448");
	CHECK(qc_f32_to_e4m3(1.0625f) == 0x38 && qc_f32_to_e4m3(1.1875f) == 0x3a, "ties to even mantissa");
	CHECK(qc_f32_to_e4m3(0x1p-10f) == 0x00 && qc_f32_to_e4m3(3 * 0x1p-10f) == 0x02, "subnormal ties");
	CHECK(qc_f32_to_e4m3(15 * 0x1p-10f) == 0x08, "7.5 subnormal units round up to 2^-6");
	/* every finite code round-trips */
	int bad = 0;
	for (int c = 0; c < 256; c++)
		if (!is_nan_code((uint8_t)c) && qc_f32_to_e4m3(qc_e4m3_to_f32((uint8_t)c)) != c)
			bad++;
	CHECK(bad == 0, "%d finite codes do not round-trip", bad);
	/* the checker itself must trip: 0x7e is not 480 */
	CHECK(qc_e4m3_to_f32(0x7e) != 480.0f, "a wrong table value must not match");
}

static uint64_t rng = 0x243f6a8885a308d3u;

static double uni(void)
{
	rng = rng * 6364136223846793005u + 1442695040888963407u;
	return (double)(rng >> 11) * 0x1p-53;
}

/* Entry (i, j) of qc_ref_kv_rotate's matrix, from its definition (block-diagonal
 * Sylvester Hadamard blocks of the largest power of two n dividing hd, none
 * below 16, over sqrt(n)), not
 * from the butterfly. */
static double wht_entry(int i, int j, int hd)
{
	const int n = (hd & -hd) >= 16 ? hd & -hd : 1;
	if (i / n != j / n)
		return 0.0;
	return (__builtin_popcount((unsigned)((i % n) & (j % n))) & 1 ? -1.0 : 1.0) / sqrt((double)n);
}

/* Store one token of n_kv heads of hd values as both K and V and check each head:
 * no NaN code, the head's largest |x| (K: of the rotated head, in double from
 * wht_entry) lands in (224, 448] after scaling, and every value within E4M3's
 * half step (2^-4 relative for normals, 2^-10 * 2^exp absolute for subnormals;
 * K: plus the float butterfly's rounding, 2^-20 of the head's largest value).
 * Returns the count of failing values. */
static int store_and_check(const float *x, int n_kv, int hd)
{
	uint8_t codes[2 * 8 * 128];
	int8_t exps[2 * 8];
	const int32_t slot = 0;
	const int kv_dim = n_kv * hd;
	qc_ref_kv_store_e4m3(x, x, &slot, 1, codes, exps, 0, 1, 1, kv_dim, hd);
	int bad = 0;
	for (int w = 0; w < 2; w++)
		for (int h = 0; h < n_kv; h++) {
			double want[128], amax = 0.0, xmax = 0.0;
			for (int d = 0; d < hd; d++) {
				want[d] = 0.0;
				for (int j = 0; j < hd; j++)
					want[d] += w == 0 ? wht_entry(d, j, hd) * x[h * hd + j] : (d == j) * (double)x[h * hd + j];
				amax = fmax(amax, fabs(want[d]));
				xmax = fmax(xmax, fabs(x[h * hd + d]));
			}
			const int8_t ex = exps[w * n_kv + h];
			const double s = ldexp(1.0, ex);
			if (amax > 0 && !(amax / s <= 448.0 * (1 + 0x1p-20) && (amax / s > 224.0 || ex == -128)))
				bad++;
			for (int d = 0; d < hd; d++) {
				const uint8_t c = codes[w * kv_dim + h * hd + d];
				const double got = (double)qc_e4m3_to_f32(c) * s;
				const double tol = fmax(fabs(want[d]) * 0x1p-4, 0x1p-10 * s) + (w == 0) * xmax * 0x1p-20;
				if (is_nan_code(c) || fabs(got - want[d]) > tol)
					bad++;
			}
		}
	return bad;
}

/* Largest |H - M| over the entries of the matrix M that rotate applies (its
 * columns: rotate of the unit vectors), H from wht_entry. */
static double rotation_error(void (*rotate)(float *, int), int hd)
{
	double worst = 0.0;
	float col[256];
	for (int j = 0; j < hd; j++) {
		for (int i = 0; i < hd; i++)
			col[i] = i == j;
		rotate(col, hd);
		for (int i = 0; i < hd; i++)
			worst = fmax(worst, fabs(col[i] - wht_entry(i, j, hd)));
	}
	return worst;
}

/* A rotation missing its 1/sqrt(n): must fail rotation_error. */
static void unscaled_rotate(float *x, int hd)
{
	const float s = sqrtf((float)qc_ref_kv_rot_block(hd));
	qc_ref_kv_rotate(x, hd);
	for (int i = 0; i < hd; i++)
		x[i] *= s;
}

static double dot_d(const float *a, const float *b, int n)
{
	double s = 0.0;
	for (int i = 0; i < n; i++)
		s += (double)a[i] * b[i];
	return s;
}

/* qc_ref_kv_rotate is the orthonormal block Hadamard matrix (so H^T H = I by the
 * definition), its own inverse in float to 2^-20, and keeps q . k to 2^-20 of
 * |q| |k|; head dims that are not powers of two rotate in blocks. */
static void rotation_is_orthonormal(void)
{
	static const int hds[] = {1, 3, 8, 64, 80, 96, 128, 256};
	for (size_t k = 0; k < sizeof hds / sizeof hds[0]; k++) {
		const int hd = hds[k];
		CHECK(rotation_error(qc_ref_kv_rotate, hd) < 1e-7, "hd %d: rotation is not the Hadamard matrix (%g)",
		      hd, rotation_error(qc_ref_kv_rotate, hd));
		int trip = 0, dot_bad = 0;
		for (int it = 0; it < 200; it++) {
			float x[256], y[256], q[256], qr[256];
			for (int i = 0; i < hd; i++) {
				x[i] = y[i] = (float)((uni() * 2 - 1) * ldexp(1.0, (int)(uni() * 20) - 10));
				q[i] = qr[i] = (float)(uni() * 2 - 1);
			}
			const double nx = sqrt(dot_d(x, x, hd)), nq = sqrt(dot_d(q, q, hd)), qk = dot_d(q, x, hd);
			qc_ref_kv_rotate(y, hd);
			qc_ref_kv_rotate(qr, hd);
			if (fabs(dot_d(qr, y, hd) - qk) > 0x1p-20 * nq * nx)
				dot_bad++;
			qc_ref_kv_rotate(y, hd);
			for (int i = 0; i < hd; i++)
				trip += fabs((double)y[i] - x[i]) > 0x1p-20 * nx;
		}
		CHECK(trip == 0, "hd %d: rotating twice is off the identity at %d values", hd, trip);
		CHECK(dot_bad == 0, "hd %d: q . k changed by rotation in %d of 200 draws", hd, dot_bad);
	}
	CHECK(qc_ref_kv_rot_block(64) == 64 && qc_ref_kv_rot_block(80) == 16 && qc_ref_kv_rot_block(96) == 32 &&
	      qc_ref_kv_rot_block(7) == 1 && qc_ref_kv_rot_block(8) == 1, "rotation blocks: largest power of two dividing head_dim");
	CHECK(rotation_error(unscaled_rotate, 64) > 0.5, "a rotation without 1/sqrt(n) must fail the check");
}

/* Attention of q over positions 0..n-1 on an fp8 pool (K rotated) against the
 * same on a float pool of the unquantized K/V, per output value within the bound
 * E4M3's rounding gives: each score moves by at most ds = 2^-4 sum |q'_i k'_i|
 * * scale (+ the subnormal step), so each softmax weight by a factor within
 * exp(+-2 ds_max), and V's values by 2^-4 relative:
 * |out8 - out| <= (exp(2 ds_max) * (1 + 2^-4) - 1) max |v| + 1e-6. unrotated_k:
 * the pool's K rows replaced by unrotated codes (stored as V rows). Returns the
 * number of values past the bound; the largest error goes to *worst_out. */
static int attn_fp8_vs_float(int unrotated_k, double *worst_out)
{
	enum { HD = 64, NH = 2, NKV = 1, N = 40, BT = 16, NB = 3 };
	static float kf[N * NKV * HD], vf[N * NKV * HD], pool32[NB * 2 * BT * NKV * HD];
	static uint8_t codes[NB * 2 * BT * NKV * HD];
	static int8_t exps[NB * 2 * BT * NKV];
	const int32_t table[NB] = {2, 0, 1};
	float q[NH * HD], out8[NH * HD], out32[NH * HD], scratch[2 * HD + N];
	for (int i = 0; i < N * NKV * HD; i++) {
		kf[i] = (float)((uni() * 2 - 1) * (i % HD == 5 ? 20.0 : 1.0)); /* an outlier channel */
		vf[i] = (float)(uni() * 2 - 1);
	}
	for (int i = 0; i < NH * HD; i++)
		q[i] = (float)((uni() * 2 - 1) * (i % HD == 5 ? 8.0 : 1.0));
	for (int32_t j = 0; j < N; j++) {
		const int32_t slot = table[j / BT] * BT + j % BT;
		const int64_t rk = ((int64_t)table[j / BT] * 2 + 0) * BT + j % BT;
		qc_ref_kv_store_e4m3(kf + j * HD, vf + j * HD, &slot, 1, codes, exps, 0, 1, BT, NKV * HD, HD);
		if (unrotated_k) { /* K's codes as an unrotated (V) row, V's kept */
			uint8_t vc[HD];
			const int8_t ve = exps[rk + BT];
			memcpy(vc, codes + (rk + BT) * HD, HD);
			qc_ref_kv_store_e4m3(vf + j * HD, kf + j * HD, &slot, 1, codes, exps, 0, 1, BT, NKV * HD, HD);
			memcpy(codes + rk * HD, codes + (rk + BT) * HD, HD);
			exps[rk] = exps[rk + BT];
			memcpy(codes + (rk + BT) * HD, vc, HD);
			exps[rk + BT] = ve;
		}
		memcpy(pool32 + rk * HD, kf + j * HD, sizeof(float) * HD);
		memcpy(pool32 + (rk + BT) * HD, vf + j * HD, sizeof(float) * HD);
	}
	const float scale = 0.125f;
	struct qc_ref_attn_args a = {
		.pool = {.e4m3 = codes, .e4m3_exp = exps, .n_layer = 1, .bt = BT, .kv_dim = NKV * HD},
		.layer = 0, .n_head = NH, .n_head_kv = NKV, .hd = HD, .scale = scale, .round = QC_REF_ATTN_F32,
	};
	qc_ref_attn_token(&a, q, out8, N - 1, table, scratch);
	a.pool = (struct qc_ref_kv_pool){.f32 = pool32, .n_layer = 1, .bt = BT, .kv_dim = NKV * HD};
	qc_ref_attn_token(&a, q, out32, N - 1, table, scratch);
	int bad = 0;
	for (int h = 0; h < NH; h++) {
		float qr[HD];
		memcpy(qr, q + h * HD, sizeof qr);
		qc_ref_kv_rotate(qr, HD);
		double ds = 0.0, vmax = 0.0;
		for (int32_t j = 0; j < N; j++) {
			float kr[HD];
			memcpy(kr, kf + j * HD, sizeof kr);
			qc_ref_kv_rotate(kr, HD);
			double s = 0.0, ql = 0.0, km = 0.0;
			for (int d = 0; d < HD; d++) {
				s += fabs((double)qr[d] * kr[d]);
				ql += fabs((double)qr[d]);
				km = fmax(km, fabs((double)kr[d]));
				vmax = fmax(vmax, fabs(vf[j * HD + d]));
			}
			/* 2^-4 relative (plus 2^-20 for the butterfly), and the subnormal step
			 * 2^-10 * 2^exp, 2^exp < max |k'| / 224 */
			ds = fmax(ds, ((0x1p-4 + 0x1p-20) * s + ql * 0x1p-10 * km / 224) * scale);
		}
		const double bound = (exp(2 * ds) * (1 + 0x1p-4) - 1) * vmax + 1e-6;
		double worst = 0;
		for (int d = 0; d < HD; d++) {
			bad += !(fabs((double)out8[h * HD + d] - out32[h * HD + d]) <= bound);
			worst = fmax(worst, fabs((double)out8[h * HD + d] - out32[h * HD + d]));
		}
		*worst_out = fmax(*worst_out, worst);
	}
	return bad;
}

static void attention_rotates_q_as_k(void)
{
	int bad = 0;
	double worst = 0.0, worst_unrot = 0.0;
	for (int it = 0; it < 20; it++)
		bad += attn_fp8_vs_float(0, &worst);
	CHECK(bad == 0, "fp8 attention off the float one past the E4M3 bound at %d values", bad);
	/* the worst-case bound is loose (about 2 here); a pool whose K rows were
	 * not rotated must show as an error many times the rotated pool's */
	for (int it = 0; it < 5; it++)
		attn_fp8_vs_float(1, &worst_unrot);
	CHECK(worst_unrot > 4 * worst, "unrotated K rows must stand out: error %g vs %g", worst_unrot, worst);
}

static void scales_never_saturate(void)
{
	enum { HD = 64, NKV = 4 };
	float x[NKV * HD];
	int bad = 0;
	for (int it = 0; it < 2000; it++) {
		const int e = (int)(uni() * 200) - 100; /* magnitudes 2^-100 .. 2^107, all normal floats */
		for (int i = 0; i < NKV * HD; i++)
			x[i] = (float)ldexp((uni() * 2 - 1) * (1 + 7 * uni()), e + (int)(uni() * 8));
		bad += store_and_check(x, NKV, HD);
	}
	CHECK(bad == 0, "random rows: %d values saturated or off by more than half a step", bad);
	/* adversarial: float's extremes, 448 * 2^k exactly, just above it, one spike */
	const float adv[] = {3.4028235e38f, -3.4028235e38f, 448.0f, 448.0f * 0x1p20f, 449.0f, 464.0f, 465.0f,
			     0x1p-126f, 1e-45f, 65504.0f, -1e30f};
	for (size_t k = 0; k < sizeof adv / sizeof adv[0]; k++) {
		for (int i = 0; i < NKV * HD; i++)
			x[i] = (float)((uni() * 2 - 1) * 1e-3);
		x[(int)(uni() * HD)] = adv[k];
		for (int d = 0; d < HD; d++)
			x[HD + d] = adv[k] * (float)(d % 2 ? 1 : -1);
		int b = store_and_check(x, NKV, HD);
		CHECK(b == 0, "adversarial value %g: %d values saturated or off", (double)adv[k], b);
	}
	for (int i = 0; i < HD; i++)
		x[i] = 0.0f;
	CHECK(qc_ref_kv_e4m3_exp(x, HD) == 0, "a zero head gets exponent 0");
	/* the checker must trip on a saturating store: 449 as a raw code is 448 */
	x[0] = 449.0f;
	uint8_t c = qc_f32_to_e4m3(x[0] * 2.0f);
	CHECK(is_nan_code(c), "unscaled 898 must not encode as a finite value");
}

static int convert_to(const char *in, const char *out)
{
	struct qc_convert_opts o = {.in = in, .out = out, .target = QC_TARGET_CPU,
				    .alignment = QC_BUNDLE_ALIGN, .plan_flags = QC_PLAN_FUSE_MOE};
	struct qc_err err = {0};
	int rc = qc_convert_gguf(&o, NULL, &err);
	CHECK(rc == QC_OK, "convert %s: %s", in, err.msg);
	return rc;
}

struct margins {
	uint64_t id[4];
	double m[4][N_GEN];
};

static void on_logits(void *ctx, uint64_t id, int32_t step, const float *lg, int32_t n)
{
	struct margins *mg = ctx;
	float a = -INFINITY, b = -INFINITY;
	for (int32_t i = 0; i < n; i++) {
		if (lg[i] > a) {
			b = a;
			a = lg[i];
		} else if (lg[i] > b) {
			b = lg[i];
		}
	}
	for (int p = 0; p < 4; p++)
		if (mg->id[p] == id && step >= 0 && step < N_GEN)
			mg->m[p][step] = (double)a - (double)b;
}

/* n_req requests of prompts (lengths 3 + 5 i, ids from a fixed sequence), greedy,
 * N_GEN tokens each, all at once with max_running; ids out. */
static int run_engine(const char *bundle, enum qc_kv_dtype dt, int max_running, uint64_t kv_bytes, int block,
		      int n_req, int32_t out[][N_GEN], struct margins *mg, int64_t *pool_tokens)
{
	struct qc_engine_opts o;
	struct qc_engine *e = NULL;
	struct qc_err err = {0};
	qc_engine_opts_init(&o);
	o.kv_dtype = dt;
	o.max_running = max_running;
	o.max_seq_tokens = 64;
	o.block_tokens = block;
	o.kv_budget_bytes = kv_bytes;
	o.on_logits = mg ? on_logits : NULL;
	o.cb_ctx = mg;
	int rc = qc_engine_new(bundle, &o, &e, &err);
	CHECK(rc == QC_OK, "%s engine: %s", qc_kv_dtype_name(dt), err.msg);
	if (rc)
		return rc;
	if (pool_tokens)
		*pool_tokens = qc_engine_kv_tokens(e);
	const int32_t n_vocab = qc_engine_model(e)->cfg.n_vocab;
	uint64_t id[16];
	for (int i = 0; rc == QC_OK && i < n_req; i++) {
		int32_t prompt[40];
		const int np = 3 + 5 * (i % 4);
		for (int j = 0; j < np; j++)
			prompt[j] = 1 + (int32_t)((uint32_t)(j * 7919 + i * 104729 + 13) % (uint32_t)(n_vocab - 1));
		struct qc_engine_request q = {.prompt = prompt, .n_prompt = np, .max_tokens = N_GEN,
					      .ignore_eos = true};
		qc_sampler_params_init(&q.sampling);
		q.sampling.temperature = 0.0f;
		rc = qc_engine_add(e, &q, &id[i], &err);
		if (mg && i < 4)
			mg->id[i] = id[i];
	}
	while (rc == QC_OK && qc_engine_has_work(e))
		rc = qc_engine_step(e, &err);
	CHECK(rc == QC_OK, "%s run: %s", qc_kv_dtype_name(dt), err.msg);
	for (int i = 0; rc == QC_OK && i < n_req; i++) {
		const int32_t *ids;
		int32_t n = 0;
		enum qc_sched_finish fin;
		qc_engine_output(e, id[i], &ids, &n, &fin);
		CHECK(n == N_GEN, "request %d: %d tokens", i, n);
		memcpy(out[i], ids, sizeof(int32_t) * (size_t)(n < N_GEN ? n : N_GEN));
	}
	qc_engine_free(e);
	return rc;
}

static uint64_t block_bytes(const char *bundle, enum qc_kv_dtype dt, int block)
{
	struct qc_model *m = NULL;
	struct qc_err err = {0};
	uint64_t bb = 0;
	if (qc_model_open(bundle, &m, &err) == QC_OK) {
		const struct qc_model_config *c = &m->cfg;
		/* the layout's own arithmetic: 2 (K, V) x layers x tokens x (kv_dim values
		 * of 4 bytes | kv_dim codes + one exponent byte per kv head) */
		const uint64_t per_tok = dt == QC_KV_FP8 ? (uint64_t)c->n_head_kv * ((uint64_t)c->head_dim + 1)
							: (uint64_t)c->n_head_kv * (uint64_t)c->head_dim * 4;
		bb = 2 * (uint64_t)c->n_layer * (uint64_t)block * per_tok;
		uint64_t got = 0;
		qc_backend_block_bytes(m, block, dt, &got, &err);
		CHECK(got == bb, "%s block bytes %llu, layout says %llu", qc_kv_dtype_name(dt), (unsigned long long)got,
		      (unsigned long long)bb);
	}
	qc_model_close(m);
	return bb;
}

/* stories260K: pool tokens for one --kv-mem, and 16 requests over a pool that
 * forces preemption equal to each run alone, with fp8. */
static void pool_and_batching(const char *fx, const char *tmpdir)
{
	char in[1024], bundle[1024];
	snprintf(in, sizeof in, "%s/gguf/stories260K.gguf", fx);
	snprintf(bundle, sizeof bundle, "%s/s.qb", tmpdir);
	if (access(in, R_OK) || convert_to(in, bundle))
		return;
	const uint64_t mem = 1u << 20;
	int64_t t16 = 0, t8 = 0;
	int32_t ids[16][N_GEN], solo[16][N_GEN], one[1][N_GEN];
	run_engine(bundle, QC_KV_F16, 1, mem, 16, 1, one, NULL, &t16);
	run_engine(bundle, QC_KV_FP8, 1, mem, 16, 1, one, NULL, &t8);
	const uint64_t b16 = block_bytes(bundle, QC_KV_F16, 16), b8 = block_bytes(bundle, QC_KV_FP8, 16);
	const uint64_t b8_4 = block_bytes(bundle, QC_KV_FP8, 4);
	CHECK(b16 && t16 == (int64_t)(mem / b16) * 16 && b8 && t8 == (int64_t)(mem / b8) * 16,
	      "pool tokens %lld / %lld for 1 MiB, expected %llu / %llu", (long long)t16, (long long)t8,
	      (unsigned long long)(b16 ? mem / b16 * 16 : 0), (unsigned long long)(b8 ? mem / b8 * 16 : 0));
	CHECK(t8 >= 2 * t16, "fp8 pool %lld tokens, f16 %lld: not twice", (long long)t8, (long long)t16);
	printf("  1 MiB K/V pool: f16 %lld tokens, fp8 %lld tokens (x%.2f; x%.2f of a binary16 pool)\n",
	       (long long)t16, (long long)t8, (double)t8 / (double)t16, (double)t8 / (double)t16 / 2.0);

	int same = 0;
	{
		struct qc_engine_opts o;
		struct qc_engine *e = NULL;
		struct qc_err err = {0};
		qc_engine_opts_init(&o);
		o.kv_dtype = QC_KV_FP8;
		o.max_running = 8;
		o.max_seq_tokens = 64;
		o.block_tokens = 4;
		o.kv_budget_bytes = 24 * b8_4;
		int rc = qc_engine_new(bundle, &o, &e, &err);
		CHECK(rc == QC_OK, "batched fp8 engine: %s", err.msg);
		if (rc == QC_OK) {
			const int32_t n_vocab = qc_engine_model(e)->cfg.n_vocab;
			uint64_t id[16];
			for (int i = 0; rc == QC_OK && i < 16; i++) {
				int32_t prompt[40];
				const int np = 3 + 5 * (i % 4);
				for (int j = 0; j < np; j++)
					prompt[j] = 1 + (int32_t)((uint32_t)(j * 7919 + i * 104729 + 13) %
								  (uint32_t)(n_vocab - 1));
				struct qc_engine_request q = {.prompt = prompt, .n_prompt = np, .max_tokens = N_GEN,
							      .ignore_eos = true};
				qc_sampler_params_init(&q.sampling);
				q.sampling.temperature = 0.0f;
				rc = qc_engine_add(e, &q, &id[i], &err);
				/* the same request alone, in an engine of its own */
				struct qc_engine *e1 = NULL;
				struct qc_engine_opts o1 = o;
				o1.max_running = 1;
				o1.kv_budget_bytes = 0;
				if (qc_engine_new(bundle, &o1, &e1, &err) == QC_OK) {
					uint64_t id1;
					int r1 = qc_engine_add(e1, &q, &id1, &err);
					while (r1 == QC_OK && qc_engine_has_work(e1))
						r1 = qc_engine_step(e1, &err);
					const int32_t *s;
					int32_t n = 0;
					enum qc_sched_finish fin;
					qc_engine_output(e1, id1, &s, &n, &fin);
					CHECK(r1 == QC_OK && n == N_GEN, "solo %d: %s", i, err.msg);
					memcpy(solo[i], s, sizeof(int32_t) * (size_t)(n < N_GEN ? n : N_GEN));
				}
				qc_engine_free(e1);
			}
			while (rc == QC_OK && qc_engine_has_work(e))
				rc = qc_engine_step(e, &err);
			CHECK(rc == QC_OK, "batched fp8 run: %s", err.msg);
			struct qc_sched_stats st;
			qc_engine_stats(e, &st);
			CHECK(st.n_preemptions > 0, "a pool of 24 blocks must force preemption");
			for (int i = 0; rc == QC_OK && i < 16; i++) {
				const int32_t *s;
				int32_t n = 0;
				enum qc_sched_finish fin;
				qc_engine_output(e, id[i], &s, &n, &fin);
				memcpy(ids[i], s, sizeof(int32_t) * (size_t)(n < N_GEN ? n : N_GEN));
				const bool eq = n == N_GEN && !memcmp(ids[i], solo[i], sizeof ids[i]);
				CHECK(eq, "fp8 request %d: batched differs from alone", i);
				same += eq;
			}
			printf("  fp8 batched: %d/16 requests equal to their solo runs, %llu preemptions\n", same,
			       (unsigned long long)st.n_preemptions);
		}
		qc_engine_free(e);
	}
	unlink(bundle);
}

/* Every quantized fixture: 4 greedy requests with f16 and with fp8; fp8's ids
 * must equal f16's up to the first step whose f16 margin is below MARGIN. */
static void greedy_fp8_equals_f16(const char *fx, const char *tmpdir)
{
	static const char *names[] = {"stories260K-F16", "tiny-llama-256-Q4_0", "tiny-llama-256-Q4_K_M-mix",
				      "tiny-llama-256-Q8_0", "tiny-llama-256-IQ4_XS", "tiny-moe-256-Q4_K_M-mix"};
	int runs = 0, steps = 0, cmp_total = 0;
	for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
		char in[1024], bundle[1024];
		snprintf(in, sizeof in, "%s/gguf-quant/%s.gguf", fx, names[k]);
		snprintf(bundle, sizeof bundle, "%s/g.qb", tmpdir);
		if (access(in, R_OK) || convert_to(in, bundle))
			continue;
		int32_t a[4][N_GEN], b[4][N_GEN];
		struct margins mg;
		memset(&mg, 0, sizeof mg);
		if (run_engine(bundle, QC_KV_F16, 4, 0, 16, 4, a, &mg, NULL) == QC_OK &&
		    run_engine(bundle, QC_KV_FP8, 4, 0, 16, 4, b, NULL, NULL) == QC_OK) {
			for (int p = 0; p < 4; p++) {
				int cmp = 0;
				while (cmp < N_GEN && mg.m[p][cmp] >= MARGIN)
					cmp++;
				int s = 0;
				while (s < cmp && a[p][s] == b[p][s])
					s++;
				CHECK(s == cmp, "%s prompt %d: fp8 id %d at step %d, f16 %d (f16 margin %.3f)", names[k], p,
				      s < N_GEN ? b[p][s] : -1, s, s < N_GEN ? a[p][s] : -1, s < N_GEN ? mg.m[p][s] : 0.0);
				runs++;
				steps += s;
				cmp_total += cmp;
			}
		}
		unlink(bundle);
	}
	printf("  greedy fp8 == f16: %d runs, %d of %d steps before the first f16 margin < %.2f\n", runs, steps,
	       cmp_total, MARGIN);
	CHECK(runs >= 20, "only %d fixture runs compared", runs);
}

int main(void)
{
	e4m3_matches_the_spec_table();
	scales_never_saturate();
	rotation_is_orthonormal();
	attention_rotates_q_as_k();
	char tmpl[] = "/tmp/qc-test-kv-fp8-XXXXXX";
	if (!check_have_fixtures("test_kv_fp8"))
		return check_report("test_kv_fp8");
	const char *tmpdir = mkdtemp(tmpl);
	CHECK(tmpdir != NULL, "mkdtemp");
	if (!tmpdir)
		return check_report("test_kv_fp8");
	pool_and_batching(check_fixtures(), tmpdir);
	greedy_fp8_equals_f16(check_fixtures(), tmpdir);
	rmdir(tmpdir);
	return check_report("test_kv_fp8");
}
