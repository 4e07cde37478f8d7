/* kernels_kv8.c — test_kernels, the fp8 (E4M3FN) K/V pool: qc_cuda_kv_store_e4m3
 * bit for bit against qc_ref_kv_store_e4m3 (codes, exponents, and q's heads rotated
 * as qc_ref_kv_rotate), on heads of every magnitude; the fused RoPE + store
 * (qc_cuda_rope_kv_e4m3) bit for bit against the C store of the RoPE'd K and
 * against the two launches it replaces; then attention reading that
 * pool (one block per head, split-K, split-K merged in-kernel, flash prefill)
 * against the C reference reading the same bytes, fed the unrotated q (it rotates
 * q itself: the kernels must take the device-rotated q to agree).
 */
#include "kernels_harness.h"
#include "kernels/flash_attn.h"
#include "kernels/kv_store.h"
#include "kernels/paged_attn.h"
#include "kernels/rope_kv.h"
#include "fp16.h"

#define EXP_POISON 0x7f /* exponent bytes nothing wrote (codes: 0xff, the NaN code) */

/* A value of magnitude about 2^e (|x| < 2^(e+1)), e in -150..126. */
static float wide(int e)
{
	return ldexpf(frand(-1, 1), e);
}

/* qc_cuda_kv_store_e4m3 vs qc_ref_kv_store_e4m3: T tokens into distinct random
 * slots of a pool of n_blocks, heads scaled from subnormal to 2^110, zero heads,
 * heads of one large value among tiny ones; q rotated alongside. */
void test_kv_store_e4m3(int bt, int hd, int n_head, int n_head_kv)
{
	const int T = quick ? 9 : 37, n_layer = 3, layer = 2, n_blocks = (T + bt - 1) / bt + 3;
	const int kv_dim = n_head_kv * hd, q_dim = n_head * hd;
	const size_t pool_n = (size_t)n_blocks * n_layer * 2 * bt * kv_dim, exp_n = pool_n / (size_t)hd;
	int32_t *slots = malloc(sizeof(int32_t) * (size_t)n_blocks * bt);
	for (int i = 0; i < n_blocks * bt; i++)
		slots[i] = i;
	for (int i = n_blocks * bt - 1; i > 0; i--) {
		const int j = (int)(rnd() % (uint32_t)(i + 1)), t = slots[i];
		slots[i] = slots[j];
		slots[j] = t;
	}
	float *k = malloc(sizeof(float) * (size_t)T * kv_dim), *v = malloc(sizeof(float) * (size_t)T * kv_dim);
	float *q = malloc(sizeof(float) * (size_t)T * q_dim), *qr = malloc(sizeof(float) * (size_t)T * q_dim);
	for (int t = 0; t < T; t++)
		for (int w = 0; w < 2; w++)
			for (int h = 0; h < n_head_kv; h++) {
				float *x = (w ? v : k) + (size_t)t * kv_dim + (size_t)h * hd;
				const int kind = (int)(rnd() % 8), e = (int)(rnd() % 260) - 150;
				for (int d = 0; d < hd; d++)
					x[d] = kind == 0 ? 0.0f : kind == 1 ? wide(e - 30) : wide(e > 110 ? 110 : e);
				if (kind == 1) /* one large value among tiny ones */
					x[rnd() % (uint32_t)hd] = wide(e > 110 ? 110 : e);
			}
	for (size_t i = 0; i < (size_t)T * q_dim; i++)
		q[i] = wide((int)(rnd() % 40) - 20);
	memcpy(qr, q, sizeof(float) * (size_t)T * q_dim);
	for (int i = 0; i < T * n_head; i++)
		qc_ref_kv_rotate(qr + (size_t)i * hd, hd);
	uint8_t *codes = malloc(pool_n), *gcodes = malloc(pool_n);
	int8_t *exps = malloc(exp_n), *gexps = malloc(exp_n);
	float *gq = malloc(sizeof(float) * (size_t)T * q_dim);
	memset(codes, 0xff, pool_n);
	memset(exps, EXP_POISON, exp_n);
	uint8_t *d_codes = up(codes, pool_n);
	int8_t *d_exps = up(exps, exp_n);
	qc_ref_kv_store_e4m3(k, v, slots, T, codes, exps, layer, n_layer, bt, kv_dim, hd);
	float *d_k = up(k, sizeof(float) * (size_t)T * kv_dim), *d_v = up(v, sizeof(float) * (size_t)T * kv_dim);
	float *d_q = up(q, sizeof(float) * (size_t)T * q_dim);
	int32_t *d_slots = up(slots, sizeof(int32_t) * (size_t)T);
	struct qc_err err = {0};
	const struct qc_cuda_kv_store_e4m3_args a = {
		.d_k = d_k, .d_v = d_v, .d_q = d_q, .n_head = n_head, .d_slots = d_slots, .n_tok = T, .d_codes = d_codes,
		.d_exps = d_exps, .layer = layer, .n_layer = n_layer, .block_tokens = bt, .kv_dim = kv_dim, .hd = hd,
	};
	CHECK(qc_cuda_kv_store_e4m3(&a, 0, &err) == QC_OK, "kv_store_e4m3: %s", err.msg);
	down(gcodes, d_codes, pool_n);
	down(gexps, d_exps, exp_n);
	down(gq, d_q, sizeof(float) * (size_t)T * q_dim);
	long bad_c = -1, bad_e = -1, bad_q = -1, written = 0;
	for (size_t i = 0; i < pool_n; i++)
		if (gcodes[i] != codes[i] && bad_c < 0)
			bad_c = (long)i;
	for (size_t i = 0; i < exp_n; i++) {
		written += exps[i] != EXP_POISON;
		if (gexps[i] != exps[i] && bad_e < 0)
			bad_e = (long)i;
	}
	for (size_t i = 0; i < (size_t)T * q_dim; i++)
		if (qc_f32_to_bits(gq[i]) != qc_f32_to_bits(qr[i]) && bad_q < 0)
			bad_q = (long)i;
	printf("  kv_store_e4m3 bt %d hd %d heads %d/%d, %d tokens: %ld heads written\n", bt, hd, n_head, n_head_kv,
	       T, written);
	CHECK(written > 0, "kv_store_e4m3: the reference wrote no exponent (the test is broken)");
	CHECK(bad_c < 0, "kv_store_e4m3 hd %d: code %ld is 0x%02x, want 0x%02x", hd, bad_c,
	      bad_c < 0 ? 0 : gcodes[bad_c], bad_c < 0 ? 0 : codes[bad_c]);
	CHECK(bad_e < 0, "kv_store_e4m3 hd %d: exponent %ld is %d, want %d", hd, bad_e, bad_e < 0 ? 0 : gexps[bad_e],
	      bad_e < 0 ? 0 : exps[bad_e]);
	CHECK(bad_q < 0, "kv_store_e4m3 hd %d: rotated q[%ld] is %a, want %a", hd, bad_q,
	      bad_q < 0 ? 0.0 : (double)gq[bad_q], bad_q < 0 ? 0.0 : (double)qr[bad_q]);
	free(slots);
	free(k);
	free(v);
	free(q);
	free(qr);
	free(codes);
	free(gcodes);
	free(exps);
	free(gexps);
	free(gq);
	cudaFree(d_codes);
	cudaFree(d_exps);
	cudaFree(d_k);
	cudaFree(d_v);
	cudaFree(d_q);
	cudaFree(d_slots);
}

/* First byte at which a and b differ, or -1. */
static long first_diff(const void *a, const void *b, size_t n)
{
	const uint8_t *x = a, *y = b;
	for (size_t i = 0; i < n; i++)
		if (x[i] != y[i])
			return (long)i;
	return -1;
}

/* One case of test_rope_kv_e4m3: T tokens (positions < 4000) in distinct random
 * slots of a 3-layer pool, layer 2; xt 1: YaRN, 2: llama3 divisors (test_rope's). */
static void rope_kv8_case(int H, int HKV, int hd, int nr, int mode, int xt, int bt, int T)
{
	const int n_layer = 3, layer = 2, kv_dim = HKV * hd, q_dim = H * hd, n_blocks = (T + bt - 1) / bt + 3;
	const size_t pool_n = (size_t)n_blocks * n_layer * 2 * bt * kv_dim, exp_n = pool_n / (size_t)hd;
	const size_t qb = sizeof(float) * (size_t)T * q_dim, kb = sizeof(float) * (size_t)T * kv_dim;
	float *q = malloc(qb), *k = malloc(kb), *v = malloc(kb), *kr = malloc(kb), *qw = malloc(qb);
	float *gq = malloc(qb), *gk = malloc(kb), *gv = malloc(kb), *gq2 = malloc(qb), *gk2 = malloc(kb);
	float *gq3 = malloc(qb), *gk3 = malloc(kb), ff[512];
	int32_t *pos = malloc(sizeof(int32_t) * (size_t)T), *slots = malloc(sizeof(int32_t) * (size_t)n_blocks * bt);
	uint8_t *codes = malloc(pool_n), *gcodes = malloc(pool_n), *gcodes2 = malloc(pool_n);
	int8_t *exps = malloc(exp_n), *gexps = malloc(exp_n), *gexps2 = malloc(exp_n);
	for (int i = 0; i < n_blocks * bt; i++)
		slots[i] = i;
	for (int i = n_blocks * bt - 1; i > 0; i--) {
		const int j = (int)(rnd() % (uint32_t)(i + 1)), t = slots[i];
		slots[i] = slots[j];
		slots[j] = t;
	}
	for (int t = 0; t < T; t++) {
		pos[t] = (int32_t)(rnd() % 4000);
		for (int w = 0; w < 2; w++) /* heads as test_kv_store_e4m3's: every magnitude */
			for (int h = 0; h < HKV; h++) {
				float *x = (w ? v : k) + (size_t)t * kv_dim + (size_t)h * hd;
				const int kind = (int)(rnd() % 8), e = (int)(rnd() % 260) - 150;
				for (int d = 0; d < hd; d++)
					x[d] = kind == 0 ? 0.0f : kind == 1 ? wide(e - 30) : wide(e > 110 ? 110 : e);
				if (kind == 1)
					x[rnd() % (uint32_t)hd] = wide(e > 110 ? 110 : e);
			}
	}
	for (size_t i = 0; i < (size_t)T * q_dim; i++)
		q[i] = wide((int)(rnd() % 40) - 20);
	fill(ff, (size_t)nr / 2, 1, 8);
	const float ts = powf(10000.0f, -2.0f / (float)nr), fs = xt & 1 ? 0.25f : 1.0f;
	struct qc_ref_rope_ext ext = {.mscale = 1.0f};
	if (xt & 1) {
		ext.ext_factor = 1.0f;
		ext.mscale = 1.0f + 0.1f * logf(1.0f / fs);
		ext.corr[0] = 5.0f;
		ext.corr[1] = 20.0f;
	}
	float *d_ff = NULL;
	if (xt & 2) {
		ext.ff = ff;
		d_ff = up(ff, sizeof(float) * (size_t)nr / 2);
	}
	float *d_q = up(q, qb), *d_k = up(k, kb), *d_v = up(v, kb), *d_q2 = up(q, qb), *d_k2 = up(k, kb);
	float *d_q3 = up(q, qb), *d_k3 = up(k, kb);
	int32_t *d_pos = up(pos, sizeof(int32_t) * (size_t)T), *d_slots = up(slots, sizeof(int32_t) * (size_t)T);
	memset(codes, 0xff, pool_n); /* the poison both pools start from */
	memset(exps, EXP_POISON, exp_n);
	uint8_t *d_codes = up(codes, pool_n), *d_codes2 = up(codes, pool_n);
	int8_t *d_exps = up(exps, exp_n), *d_exps2 = up(exps, exp_n);
	struct qc_err err = {0};
	const struct qc_cuda_rope_args ra = {.d_pos = d_pos, .n_tok = T, .hd = hd, .n_rot = nr, .mode = mode,
					     .theta_scale = ts, .freq_scale = fs, .ext_factor = ext.ext_factor,
					     .mscale = ext.mscale, .corr = {ext.corr[0], ext.corr[1]}, .d_ff = d_ff};
	const struct qc_cuda_rope_kv_args a = {.rope = ra, .d_q = d_q, .n_head = H, .d_k = d_k, .d_v = d_v,
					       .n_head_kv = HKV, .d_slots = d_slots, .d_pool8 = d_codes,
					       .d_pool8_exp = d_exps, .layer = layer, .n_layer = n_layer, .block_tokens = bt};
	CHECK(qc_cuda_rope_kv_e4m3(&a, 0, &err) == QC_OK, "rope_kv_e4m3: %s", err.msg);
	/* the two launches it replaces: rope_kv without a pool, then the fp8 store */
	struct qc_cuda_rope_kv_args a2 = a;
	a2.d_q = d_q2;
	a2.d_k = d_k2;
	a2.d_pool8 = NULL;
	a2.d_pool8_exp = NULL;
	CHECK(qc_cuda_rope_kv(&a2, 0, &err) == QC_OK, "rope_kv without a pool: %s", err.msg);
	const struct qc_cuda_kv_store_e4m3_args ka = {
		.d_k = d_k2, .d_v = d_v, .d_q = d_q2, .n_head = H, .d_slots = d_slots, .n_tok = T, .d_codes = d_codes2,
		.d_exps = d_exps2, .layer = layer, .n_layer = n_layer, .block_tokens = bt, .kv_dim = kv_dim, .hd = hd,
	};
	CHECK(qc_cuda_kv_store_e4m3(&ka, 0, &err) == QC_OK, "kv_store_e4m3: %s", err.msg);
	/* RoPE alone (qc_cuda_rope, which test_rope holds to qc_ref_rope): the floats
	   the C store and rotation take, since device and libm cos/sin may differ in
	   the last bit */
	struct qc_cuda_rope_args rq = ra, rk = ra;
	rq.d_x = d_q3;
	rq.n_heads = H;
	rk.d_x = d_k3;
	rk.n_heads = HKV;
	CHECK(qc_cuda_rope(&rq, 0, &err) == QC_OK, "rope q: %s", err.msg);
	CHECK(qc_cuda_rope(&rk, 0, &err) == QC_OK, "rope k: %s", err.msg);
	down(gq, d_q, qb);
	down(gk, d_k, kb);
	down(gv, d_v, kb);
	down(gq2, d_q2, qb);
	down(gk2, d_k2, kb);
	down(gq3, d_q3, qb);
	down(gk3, d_k3, kb);
	down(gcodes, d_codes, pool_n);
	down(gexps, d_exps, exp_n);
	down(gcodes2, d_codes2, pool_n);
	down(gexps2, d_exps2, exp_n);
	/* the C reference on the RoPE'd floats: the store of (k, v), q's heads rotated */
	qc_ref_kv_store_e4m3(gk3, v, slots, T, codes, exps, layer, n_layer, bt, kv_dim, hd);
	memcpy(qw, gq3, qb);
	for (int i = 0; i < T * H; i++)
		qc_ref_kv_rotate(qw + (size_t)i * hd, hd);
	/* and RoPE against qc_ref_rope, per head relative to its largest input (the
	   heads span 2^-180 .. 2^111): cos/sin within a few ulp, two roundings */
	memcpy(kr, k, kb);
	qc_ref_rope(kr, pos, T, HKV, hd, nr, mode, ts, fs, &ext);
	long bad_rope = -1;
	for (int i = 0; i < T * HKV && bad_rope < 0; i++) {
		double m = 0;
		for (int d = 0; d < hd; d++)
			m = fabs(k[(size_t)i * hd + d]) > m ? fabs(k[(size_t)i * hd + d]) : m;
		for (int d = 0; d < hd; d++) {
			const size_t j = (size_t)i * hd + d;
			if (!(fabs((double)gk[j] - kr[j]) <= m * ext.mscale * 0x1p-19 + 0x1p-147))
				bad_rope = (long)j;
		}
	}
	long written = 0;
	for (size_t i = 0; i < exp_n; i++)
		written += exps[i] != EXP_POISON;
	const long dc = first_diff(gcodes, codes, pool_n), de = first_diff(gexps, exps, exp_n);
	const long dq = first_diff(gq, qw, qb), dk = first_diff(gk, gk3, kb);
	const long d2 = first_diff(gcodes, gcodes2, pool_n) >= 0 || first_diff(gexps, gexps2, exp_n) >= 0 ||
				first_diff(gq, gq2, qb) >= 0 || first_diff(gk, gk2, kb) >= 0;
	char what[120];
	snprintf(what, sizeof what, "rope_kv_e4m3 %s heads %d/%d hd %d n_rot %d%s%s, %d tokens, bt %d",
		 mode ? "neox" : "norm", H, HKV, hd, nr, xt & 1 ? " yarn" : "", xt & 2 ? " factors" : "", T, bt);
	printf("  %s: %ld heads written; codes, exponents, q, k %s the C store's / rotation's, %s the two launches'\n",
	       what, written, dc < 0 && de < 0 && dq < 0 && dk < 0 ? "equal to" : "DIFFERENT from",
	       d2 ? "DIFFERENT from" : "equal to");
	CHECK(written > 0, "%s: the reference wrote no exponent (the test is broken)", what);
	CHECK(dc < 0, "%s: code %ld is 0x%02x, want 0x%02x", what, dc, dc < 0 ? 0 : gcodes[dc], dc < 0 ? 0 : codes[dc]);
	CHECK(de < 0, "%s: exponent %ld is %d, want %d", what, de, de < 0 ? 0 : gexps[de], de < 0 ? 0 : exps[de]);
	CHECK(dq < 0, "%s: q[%ld] is %a, want %a (RoPE then qc_ref_kv_rotate)", what, dq / 4,
	      dq < 0 ? 0.0 : (double)gq[dq / 4], dq < 0 ? 0.0 : (double)qw[dq / 4]);
	CHECK(dk < 0, "%s: k[%ld] is %a, want %a (qc_cuda_rope's, unrotated)", what, dk / 4,
	      dk < 0 ? 0.0 : (double)gk[dk / 4], dk < 0 ? 0.0 : (double)gk3[dk / 4]);
	CHECK(!d2, "%s: not bit for bit rope_kv + kv_store_e4m3", what);
	CHECK(first_diff(gv, v, kb) < 0, "%s: v was written", what);
	CHECK(bad_rope < 0, "%s: k[%ld] is %a, qc_ref_rope gives %a", what, bad_rope,
	      bad_rope < 0 ? 0.0 : (double)gk[bad_rope], bad_rope < 0 ? 0.0 : (double)kr[bad_rope]);
	/* the checker trips on one wrong code of a written row (SQLite's deliberate fault) */
	for (size_t i = 0; i < pool_n; i++)
		if (codes[i] != 0xff) {
			codes[i] ^= 1;
			break;
		}
	CHECK(first_diff(gcodes, codes, pool_n) >= 0, "%s: a flipped code went unnoticed", what);
	free(q);
	free(k);
	free(v);
	free(kr);
	free(qw);
	free(gq);
	free(gk);
	free(gv);
	free(gq2);
	free(gk2);
	free(gq3);
	free(gk3);
	free(pos);
	free(slots);
	free(codes);
	free(gcodes);
	free(gcodes2);
	free(exps);
	free(gexps);
	free(gexps2);
	cudaFree(d_ff);
	cudaFree(d_q);
	cudaFree(d_k);
	cudaFree(d_v);
	cudaFree(d_q2);
	cudaFree(d_k2);
	cudaFree(d_q3);
	cudaFree(d_k3);
	cudaFree(d_pos);
	cudaFree(d_slots);
	cudaFree(d_codes);
	cudaFree(d_codes2);
	cudaFree(d_exps);
	cudaFree(d_exps2);
}

/* RoPE + the fp8 store + q's rotation in one launch (qc_cuda_rope_kv_e4m3): NORM
 * and NEOX, partial rotary, YaRN and llama3 divisors, GQA, heads of 8 (no
 * rotation), 80 (blocks of 16), 100 (none), 128, 256, 384 (blocks of 128 past the
 * registers' 256 values: kv8_rotate's shared-memory stages); one token to many (the 8B
 * decode shape at 256 tokens); bad arguments refused, no tokens no launch. */
void test_rope_kv_e4m3(void)
{
	/* heads, kv heads, hd, n_rot, mode, extras, block tokens, tokens */
	const int cfg[][8] = {
		{8, 2, 64, 64, QC_ROPE_NORM, 0, 16, 9},      {8, 2, 128, 128, QC_ROPE_NEOX, 1, 16, 9},
		{6, 6, 100, 64, QC_ROPE_NEOX, 0, 7, 5},      {8, 2, 64, 32, QC_ROPE_NORM, 3, 16, 1},
		{28, 4, 80, 80, QC_ROPE_NEOX, 2, 16, 17},    {4, 2, 8, 8, QC_ROPE_NORM, 0, 16, 4},
		{16, 1, 256, 256, QC_ROPE_NEOX, 0, 7, 3},    {12, 4, 96, 96, QC_ROPE_NORM, 1, 16, 6},
		{32, 8, 128, 128, QC_ROPE_NEOX, 2, 16, 1},   {32, 8, 128, 128, QC_ROPE_NORM, 0, 16, quick ? 40 : 256},
		{4, 2, 384, 128, QC_ROPE_NEOX, 0, 16, 3},
	};
	for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++)
		rope_kv8_case(cfg[i][0], cfg[i][1], cfg[i][2], cfg[i][3], cfg[i][4], cfg[i][5], cfg[i][6], cfg[i][7]);

	struct qc_err err = {0};
	uint8_t *d_c = up(NULL, 16);
	int8_t *d_e = up(NULL, 16);
	const struct qc_cuda_rope_args ra = {.n_tok = 4, .hd = 64, .n_rot = 64, .mode = QC_ROPE_NORM,
					     .theta_scale = 0.5f, .freq_scale = 1.0f, .mscale = 1.0f};
	const struct qc_cuda_rope_kv_args ok = {.rope = ra, .n_head = 8, .n_head_kv = 2, .d_pool8 = d_c,
						.d_pool8_exp = d_e, .layer = 1, .n_layer = 2, .block_tokens = 16};
	struct qc_cuda_rope_kv_args bad[6] = {ok, ok, ok, ok, ok, ok};
	bad[0].n_head_kv = 0;
	bad[1].layer = 2;
	bad[2].rope.n_rot = 66;
	bad[3].d_pool8_exp = NULL;
	bad[4].d_pool = (uint16_t *)d_c; /* two pools */
	bad[5].rope.hd = bad[5].rope.n_rot = 2048;
	for (int i = 0; i < 6; i++)
		CHECK(qc_cuda_rope_kv_e4m3(&bad[i], 0, &err) == QC_EINVAL, "rope_kv_e4m3: bad arguments %d accepted", i);
	struct qc_cuda_rope_kv_args f16 = ok; /* the binary16 kernel refuses the fp8 pool */
	CHECK(qc_cuda_rope_kv(&f16, 0, &err) == QC_EINVAL, "rope_kv: an fp8 pool accepted");
	struct qc_cuda_rope_kv_args none = ok; /* no tokens: no launch, so the NULL buffers are never read */
	none.rope.n_tok = 0;
	CHECK(qc_cuda_rope_kv_e4m3(&none, 0, &err) == QC_OK && cudaDeviceSynchronize() == cudaSuccess,
	      "rope_kv_e4m3: no tokens: %s", err.msg);
	cudaFree(d_c);
	cudaFree(d_e);
}

/* The C reference on the fp8 pool, QC_REF_ATTN_F32, q unrotated. */
static void ref_attn_fp8(const float *q, float *out, const uint8_t *codes, const int8_t *exps, int layer,
			 int n_layer, int bt, int n_head, int n_head_kv, int hd, const int32_t *pos, const int32_t *seq,
			 const int32_t *tables, int stride, int T, float scale)
{
	const struct qc_ref_attn_args a = {
		.pool = {.e4m3 = codes, .e4m3_exp = exps, .n_layer = n_layer, .bt = bt, .kv_dim = n_head_kv * hd},
		.layer = layer, .n_head = n_head, .n_head_kv = n_head_kv, .hd = hd, .scale = scale,
		.round = QC_REF_ATTN_F32,
	};
	const size_t q_dim = (size_t)n_head * hd;
	for (int t = 0; t < T; t++) {
		float *scratch = malloc(sizeof(float) * (size_t)(2 * hd + pos[t] + 1));
		qc_ref_attn_token(&a, q + t * q_dim, out + t * q_dim, pos[t], tables + (size_t)seq[t] * stride, scratch);
		free(scratch);
	}
}

/* Decoded value of pool element i (codes and exponents as stored). */
static double dec(const uint8_t *codes, const int8_t *exps, size_t i, int hd)
{
	return ldexp(qc_e4m3_to_f32(codes[i]), exps[i / (size_t)hd]);
}

/* Sequences ent[e]: positions 0..start-1 cached (written by the C store), this
 * step's tokens start..start+n-1 stored by qc_cuda_kv_store_e4m3 (bit-equal to
 * the C store, q rotated on the device); then attention on the device pool with
 * that q against the reference with the plain q: one block per head, split-K,
 * split-K merged in-kernel (flash off); where a run of 16+ tokens and the shape
 * allow, qc_cuda_flash_attn (done flags, rows it does not own untouched, rows
 * within fa_tol) and qc_cuda_paged_attn with flash on (every row within fa_tol). */
void test_attention_fp8(int bt, int hd, int n_head, int n_head_kv, const struct fa_entry *ent, int n_ent)
{
	const int n_layer = 2, layer = 1, kv_dim = n_head_kv * hd, q_dim = n_head * hd, group = n_head / n_head_kv;
	const int min_run = 16;
	const float scale = 1.0f / sqrtf((float)hd);
	int T = 0, max_len = 1, n_blocks = 3;
	for (int e = 0; e < n_ent; e++) {
		T += ent[e].n;
		max_len = ent[e].start + ent[e].n > max_len ? ent[e].start + ent[e].n : max_len;
		n_blocks += (ent[e].start + ent[e].n + bt - 1) / bt;
	}
	const int stride = (max_len + bt - 1) / bt + 1; /* -1 padded, as the scheduler's */
	int32_t *tables = malloc(sizeof(int32_t) * (size_t)n_ent * (size_t)stride);
	int *perm = malloc(sizeof(int) * (size_t)n_blocks);
	for (int i = 0; i < n_blocks; i++)
		perm[i] = i;
	for (int i = n_blocks - 1; i > 0; i--) {
		const int j = (int)(rnd() % (uint32_t)(i + 1)), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	int used = 0;
	for (int e = 0; e < n_ent; e++)
		for (int b = 0; b < stride; b++)
			tables[e * stride + b] = b * bt < ent[e].start + ent[e].n ? perm[used++] : -1;
	const size_t pool_n = (size_t)n_blocks * n_layer * 2 * bt * kv_dim, exp_n = pool_n / (size_t)hd;
	uint8_t *codes = malloc(pool_n), *gcodes = malloc(pool_n);
	int8_t *exps = malloc(exp_n), *gexps = malloc(exp_n);
	memset(codes, 0xff, pool_n); /* NaN: a read of a slot nothing wrote shows */
	memset(exps, 0, exp_n);
	/* cached positions, one token at a time through the C store */
	float *row_k = malloc(sizeof(float) * (size_t)kv_dim), *row_v = malloc(sizeof(float) * (size_t)kv_dim);
	for (int e = 0; e < n_ent; e++)
		for (int j = 0; j < ent[e].start; j++) {
			const int32_t slot = tables[e * stride + j / bt] * bt + j % bt;
			fill(row_k, (size_t)kv_dim, -2, 2);
			fill(row_v, (size_t)kv_dim, -2, 2);
			qc_ref_kv_store_e4m3(row_k, row_v, &slot, 1, codes, exps, layer, n_layer, bt, kv_dim, hd);
		}
	uint8_t *d_codes = up(codes, pool_n);
	int8_t *d_exps = up(exps, exp_n);
	/* this step's tokens */
	int32_t *pos = malloc(sizeof(int32_t) * (size_t)T), *seq = malloc(sizeof(int32_t) * (size_t)T);
	int32_t *slots = malloc(sizeof(int32_t) * (size_t)T);
	T = 0;
	for (int e = 0; e < n_ent; e++)
		for (int i = 0; i < ent[e].n; i++) {
			pos[T] = ent[e].start + i;
			seq[T] = e;
			slots[T] = tables[e * stride + pos[T] / bt] * bt + pos[T] % bt;
			T++;
		}
	const size_t qn = (size_t)T * q_dim, kn = (size_t)T * kv_dim;
	float *k = malloc(sizeof(float) * kn), *v = malloc(sizeof(float) * kn), *q = malloc(sizeof(float) * qn);
	fill(k, kn, -2, 2);
	fill(v, kn, -2, 2);
	fill(q, qn, -2, 2);
	float *d_k = up(k, sizeof(float) * kn), *d_v = up(v, sizeof(float) * kn), *d_q = up(q, sizeof(float) * qn);
	int32_t *d_slots = up(slots, sizeof(int32_t) * (size_t)T), *d_pos = up(pos, sizeof(int32_t) * (size_t)T);
	int32_t *d_seq = up(seq, sizeof(int32_t) * (size_t)T);
	int32_t *d_tab = up(tables, sizeof(int32_t) * (size_t)n_ent * (size_t)stride);
	struct qc_err err = {0};
	const struct qc_cuda_kv_store_e4m3_args ka = {
		.d_k = d_k, .d_v = d_v, .d_q = d_q, .n_head = n_head, .d_slots = d_slots, .n_tok = T, .d_codes = d_codes,
		.d_exps = d_exps, .layer = layer, .n_layer = n_layer, .block_tokens = bt, .kv_dim = kv_dim, .hd = hd,
	};
	CHECK(qc_cuda_kv_store_e4m3(&ka, 0, &err) == QC_OK, "kv_store_e4m3: %s", err.msg);
	qc_ref_kv_store_e4m3(k, v, slots, T, codes, exps, layer, n_layer, bt, kv_dim, hd);
	down(gcodes, d_codes, pool_n);
	down(gexps, d_exps, exp_n);
	char what[200];
	snprintf(what, sizeof what, "fp8 bt %d hd %d heads %d/%d, %d tokens, ctx %d", bt, hd, n_head, n_head_kv, T,
		 max_len);
	CHECK(!memcmp(gcodes, codes, pool_n) && !memcmp(gexps, exps, exp_n),
	      "%s: the device store's pool differs from qc_ref_kv_store_e4m3's", what);

	float *want = malloc(sizeof(float) * qn), *got = malloc(sizeof(float) * qn), *got1 = malloc(sizeof(float) * qn);
	ref_attn_fp8(q, want, codes, exps, layer, n_layer, bt, n_head, n_head_kv, hd, pos, seq, tables, stride, T, scale);
	float *d_o = poisoned(sizeof(float) * qn);
	const uint64_t fwsb = qc_cuda_flash_attn_ws_bytes(T);
	const uint64_t wsb = qc_cuda_paged_attn_ws_bytes(T, n_head, hd, max_len) + fwsb + 4 * (uint64_t)T + 512;
	void *d_ws = up(NULL, wsb);
	const int64_t nfl = (int64_t)T * n_head_kv;
	uint32_t *d_fl = up(NULL, sizeof(uint32_t) * (size_t)nfl);
	cudaMemset(d_fl, 0, sizeof(uint32_t) * (size_t)nfl);
	struct qc_cuda_paged_attn_args pa = {
		.d_q = d_q, .d_out = d_o, .d_pool = NULL, .layer = layer, .n_layer = n_layer, .block_tokens = bt,
		.n_head = n_head, .n_head_kv = n_head_kv, .hd = hd, .d_pos = d_pos, .d_tok_seq = d_seq,
		.d_tables = d_tab, .table_stride = stride, .n_tok = T, .max_ctx = max_len, .scale = scale,
		.flash = QC_CUDA_ATTN_FLASH_OFF, .d_pool8 = d_codes, .d_pool8_exp = d_exps,
	};
	const double tol = 2e-5 * 2; /* the binary16 pool's split-K tolerance: the values are exact here too */
	/* splits 3, 4: 1 and 2 with the rows below each token's own loaded before the PDL
	   wait (old_ctx): the same bits */
	for (int split = 0; split < 5; split++) {
		cudaMemset(d_o, 0xff, sizeof(float) * qn);
		pa.d_ws = split ? d_ws : NULL;
		pa.ws_bytes = split ? wsb : 0;
		pa.d_flags = split == 2 || split == 4 ? d_fl : NULL;
		pa.n_flags = split == 2 || split == 4 ? nfl : 0;
		pa.old_ctx = split >= 3;
		CHECK(qc_cuda_paged_attn(&pa, 0, &err) == QC_OK, "paged_attn fp8: %s", err.msg);
		down(got, d_o, sizeof(float) * qn);
		char w2[260];
		static const char *const path[] = {"", " split-K", " split-K merged", " split-K early",
						   " split-K early merged"};
		snprintf(w2, sizeof w2, "paged_attn%s %s", path[split], what);
		CHECK(report(w2, compare(got, want, qn, tol), tol), "%s", w2);
		if (split == 1)
			memcpy(got1, got, sizeof(float) * qn);
		if (split >= 2)
			CHECK(!memcmp(got, got1, sizeof(float) * qn), "%s: not the plain split path's bits", w2);
	}
	pa.old_ctx = 0;
	/* both pools, or none: refused */
	pa.d_pool = (const uint16_t *)d_codes;
	CHECK(qc_cuda_paged_attn(&pa, 0, &err) == QC_EINVAL, "paged_attn with two pools was not refused");
	pa.d_pool = NULL;

	/* flash: runs of min_run+ tokens of one sequence at consecutive positions */
	int32_t *done = malloc(sizeof(int32_t) * (size_t)T), *gdone = malloc(sizeof(int32_t) * (size_t)T);
	int n_done = 0;
	for (int t0 = 0; t0 < T;) {
		int t1 = t0 + 1;
		while (t1 < T && seq[t1] == seq[t1 - 1] && pos[t1] == pos[t1 - 1] + 1)
			t1++;
		for (int t = t0; t < t1; t++)
			done[t] = t1 - t0 >= min_run;
		n_done += t1 - t0 >= min_run ? t1 - t0 : 0;
		t0 = t1;
	}
	if (n_done && qc_cuda_flash_attn_shape_ok(hd, n_head, n_head_kv)) {
		/* fa_tol's inputs on what the kernel multiplies: decoded V, rotated q . rotated K */
		float *qr = malloc(sizeof(float) * qn);
		down(qr, d_q, sizeof(float) * qn);
		double vmax = 0, S = 0;
		for (size_t i = 0; i < pool_n; i++)
			if ((i / ((size_t)bt * kv_dim)) % 2 == 1 && (codes[i] & 0x7f) != 0x7f)
				vmax = fabs(dec(codes, exps, i, hd)) > vmax ? fabs(dec(codes, exps, i, hd)) : vmax;
		for (int t = 0; t < T; t++)
			for (int h = 0; h < n_head; h++)
				for (int j = 0; j <= pos[t]; j++) {
					const size_t b = (size_t)tables[seq[t] * stride + j / bt];
					const size_t at = (((b * n_layer + layer) * 2) * bt + j % bt) * kv_dim + (size_t)(h / group) * hd;
					double s = 0;
					for (int d = 0; d < hd; d++)
						s += fabs((double)qr[(size_t)t * q_dim + (size_t)h * hd + d] * dec(codes, exps, at + d, hd));
					S = s * scale > S ? s * scale : S;
				}
		const double tolq = fa_tol(vmax, S, hd, max_len, 0x1p-11);
		void *d_fws = up(NULL, fwsb);
		int32_t *d_done = poisoned(sizeof(int32_t) * (size_t)T);
		cudaMemset(d_o, 0xff, sizeof(float) * qn);
		const struct qc_cuda_flash_attn_args fa = {pa, min_run, d_done, d_fws, fwsb};
		CHECK(qc_cuda_flash_attn(&fa, 0, &err) == QC_OK, "flash_attn fp8: %s", err.msg);
		down(got, d_o, sizeof(float) * qn);
		down(gdone, d_done, sizeof(int32_t) * (size_t)T);
		int bad_flag = -1, touched = -1;
		float *gf = malloc(sizeof(float) * qn), *wf = malloc(sizeof(float) * qn);
		size_t nf = 0;
		for (int t = 0; t < T; t++) {
			if (gdone[t] != done[t] && bad_flag < 0)
				bad_flag = t;
			for (int i = 0; !done[t] && i < q_dim && touched < 0; i++)
				if (qc_f32_to_bits(got[(size_t)t * q_dim + i]) != 0xffffffffu)
					touched = t;
			if (done[t]) {
				memcpy(gf + nf, got + (size_t)t * q_dim, sizeof(float) * q_dim);
				memcpy(wf + nf, want + (size_t)t * q_dim, sizeof(float) * q_dim);
				nf += (size_t)q_dim;
			}
		}
		CHECK(bad_flag < 0, "flash_attn %s: done flag of token %d wrong", what, bad_flag);
		CHECK(touched < 0, "flash_attn %s: token %d not in a run but written", what, touched);
		char w2[260];
		snprintf(w2, sizeof w2, "flash_attn %s (%d taken)", what, n_done);
		CHECK(report(w2, compare(gf, wf, nf, tolq), tolq), "%s", w2);
		/* through qc_cuda_paged_attn with flash on: every row within the bound */
		pa.d_ws = d_ws;
		pa.ws_bytes = wsb;
		pa.d_flags = NULL;
		pa.n_flags = 0;
		pa.flash = QC_CUDA_ATTN_FLASH_AUTO;
		cudaMemset(d_o, 0xff, sizeof(float) * qn);
		CHECK(qc_cuda_paged_attn(&pa, 0, &err) == QC_OK, "paged_attn fp8: %s", err.msg);
		down(got, d_o, sizeof(float) * qn);
		snprintf(w2, sizeof w2, "paged_attn + flash %s", what);
		CHECK(report(w2, compare(got, want, qn, tolq), tolq), "%s", w2);
		free(qr);
		free(gf);
		free(wf);
		cudaFree(d_fws);
		cudaFree(d_done);
	}

	free(tables);
	free(perm);
	free(codes);
	free(gcodes);
	free(exps);
	free(gexps);
	free(row_k);
	free(row_v);
	free(pos);
	free(seq);
	free(slots);
	free(k);
	free(v);
	free(q);
	free(want);
	free(got);
	free(got1);
	free(done);
	free(gdone);
	cudaFree(d_codes);
	cudaFree(d_exps);
	cudaFree(d_k);
	cudaFree(d_v);
	cudaFree(d_q);
	cudaFree(d_slots);
	cudaFree(d_pos);
	cudaFree(d_seq);
	cudaFree(d_tab);
	cudaFree(d_o);
	cudaFree(d_ws);
	cudaFree(d_fl);
}
