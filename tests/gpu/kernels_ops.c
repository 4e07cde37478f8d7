/* kernels_ops.c — test_kernels, the small ops against their C references: rms_norm,
 * rope, add and silu_mul, act_gather, argmax, top-k (relative max error, indices exact),
 * and MoE routing and combine (moe_route, moe_combine; combine bit for bit); the fused
 * ones (add_rms_norm, rope_kv) also bit for bit against the kernels they replace;
 * Gemma's gelu_mul and softcap (scale bit for bit), RoPE with a LongRoPE table.
 */
#include "kernels_harness.h"

#include <float.h>

#include "kernels/act_gather.h"
#include "kernels/add.h"
#include "kernels/argmax.h"
#include "kernels/kv_store.h"
#include "kernels/moe_combine.h"
#include "kernels/moe_route.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/rope_kv.h"
#include "kernels/gelu_mul.h"
#include "kernels/silu_mul.h"
#include "kernels/softcap.h"
#include "kernels/topk.h"
#include "fp16.h"

/* ---- small ops ----------------------------------------------------------- */

void test_rms_norm(void)
{
	const int64_t shapes[][2] = {{1, 64}, {5, 33}, {3, 4096}, {7, 100}};
	for (size_t s = 0; s < 4; s++) {
		const int64_t R = shapes[s][0], n = shapes[s][1], ldx = n + 3, ldy = n + 1;
		float *x = malloc(sizeof(float) * (size_t)(R * ldx * 2)), *w = malloc(sizeof(float) * (size_t)n);
		float *want = calloc((size_t)(R * ldy), sizeof(float)), *got = calloc((size_t)(R * ldy), sizeof(float));
		fill(x, (size_t)(R * ldx * 2), -3, 3);
		fill(w, (size_t)n, -2, 2);
		int32_t rows[8];
		for (int64_t r = 0; r < R; r++)
			rows[r] = (int32_t)(rnd() % (2 * R));
		qc_ref_rms_norm(x, ldx, rows, w, want, ldy, R, n, 1e-5f);
		float *d_x = up(x, sizeof(float) * (size_t)(R * ldx * 2)), *d_w = up(w, sizeof(float) * (size_t)n);
		int32_t *d_rows = up(rows, sizeof rows);
		float *d_y = poisoned(sizeof(float) * (size_t)(R * ldy));
		struct qc_err err = {0};
		const struct qc_cuda_rms_norm_args a = {d_x, ldx, d_rows, d_w, d_y, ldy, R, n, 1e-5f};
		CHECK(qc_cuda_rms_norm(&a, 0, &err) == QC_OK, "rms_norm: %s", err.msg);
		down(got, d_y, sizeof(float) * (size_t)(R * ldy));
		for (int64_t r = 0; r < R; r++)
			for (int64_t i = n; i < ldy; i++)
				got[r * ldy + i] = want[r * ldy + i] = 0;
		char what[64];
		snprintf(what, sizeof what, "rms_norm %lld rows of %lld", (long long)R, (long long)n);
		const struct cmp c = compare(got, want, (size_t)(R * ldy), 0);
		const double tol = 4e-6 * c.ref_max;
		CHECK(report(what, compare(got, want, (size_t)(R * ldy), tol), tol), "%s", what);
		free(x);
		free(w);
		free(want);
		free(got);
		cudaFree(d_x);
		cudaFree(d_w);
		cudaFree(d_rows);
		cudaFree(d_y);
	}
}

/* Where y lives in an add_rms_norm case: its own buffer, or sharing the
 * residual's (the matmul output that is both the delta and the norm's output)
 * or x's storage (rms_norm.h: then no row list and ldy == ldx). */
enum y_at { Y_OWN, Y_RES, Y_X };

/* One case of test_add_rms_norm: R rows of n (gathered from 2R rows when
 * gather, each once), eps 1e-5. */
static void add_rms_case(int64_t R, int64_t n, bool gather, enum y_at at)
{
	const int64_t NX = gather ? 2 * R : R, ldx = at == Y_OWN ? n + 3 : n + 2, ldy = at == Y_OWN ? n + 1 : ldx;
	const size_t xb = sizeof(float) * (size_t)(NX * ldx), yb = sizeof(float) * (size_t)(R * ldy);
	float *x = malloc(xb), *res = malloc(xb), *xa = malloc(xb), *w = malloc(sizeof(float) * (size_t)n);
	float *want = calloc((size_t)(R * ldy), sizeof(float)), *got = malloc(yb);
	float *gx = malloc(xb), *gx2 = malloc(xb), *gy = malloc(yb), *gy2 = malloc(yb);
	int32_t *rows = malloc(sizeof(int32_t) * (size_t)NX);
	fill(x, (size_t)(NX * ldx), -3, 3);
	fill(res, (size_t)(NX * ldx), -3, 3);
	fill(w, (size_t)n, -2, 2);
	for (int64_t i = 0; i < NX; i++) /* distinct rows, shuffled: the residual goes to each once */
		rows[i] = (int32_t)i;
	for (int64_t i = NX - 1; gather && i > 0; i--) {
		const int64_t j = rnd() % (uint32_t)(i + 1);
		const int32_t t = rows[i];
		rows[i] = rows[j];
		rows[j] = t;
	}
	/* reference: the residual added on the host (x of the rows not gathered stays), then the norm */
	memcpy(xa, x, xb);
	for (int64_t r = 0; r < R; r++)
		qc_ref_add(xa + rows[r] * ldx, res + rows[r] * ldx, n, n);
	qc_ref_rms_norm(xa, ldx, gather ? rows : NULL, w, want, ldy, R, n, 1e-5f);

	float *d_w = up(w, sizeof(float) * (size_t)n);
	int32_t *d_rows = gather ? up(rows, sizeof(int32_t) * (size_t)R) : NULL;
	float *d_x = up(x, xb), *d_res = up(res, xb), *d_x2 = up(x, xb), *d_res2 = up(res, xb);
	float *d_own = at == Y_OWN ? poisoned(yb) : NULL, *d_own2 = at == Y_OWN ? poisoned(yb) : NULL;
	float *d_y = at == Y_RES ? d_res : at == Y_X ? d_x : d_own;
	float *d_y2 = at == Y_RES ? d_res2 : at == Y_X ? d_x2 : d_own2;
	struct qc_err err = {0};
	const struct qc_cuda_add_rms_norm_args a = {d_x, ldx, d_rows, d_w, d_y, ldy, R, n, 1e-5f, d_res};
	CHECK(qc_cuda_add_rms_norm(&a, 0, &err) == QC_OK, "add_rms_norm: %s", err.msg);
	/* the kernels it replaces: the residual add of each row, then the plain norm */
	for (int64_t r = 0; r < R; r++) {
		const struct qc_cuda_add_args aa = {d_x2 + rows[r] * ldx, d_res2 + rows[r] * ldx, n, n};
		CHECK(qc_cuda_add(&aa, 0, &err) == QC_OK, "add: %s", err.msg);
	}
	const struct qc_cuda_rms_norm_args a2 = {d_x2, ldx, d_rows, d_w, d_y2, ldy, R, n, 1e-5f};
	CHECK(qc_cuda_rms_norm(&a2, 0, &err) == QC_OK, "rms_norm: %s", err.msg);
	down(gx, d_x, xb);
	down(gx2, d_x2, xb);
	down(gy, d_y, yb);
	down(gy2, d_y2, yb);

	char what[96];
	snprintf(what, sizeof what, "add_rms_norm %lld rows of %lld%s%s", (long long)R, (long long)n,
		 gather ? ", gathered" : "", at == Y_RES ? ", y = res" : at == Y_X ? ", y = x" : "");
	const bool same_x = !memcmp(gx, gx2, xb), same_y = !memcmp(gy, gy2, yb);
	printf("  %s: x %s, y %s the add + rms_norm kernels'\n", what, same_x ? "equal to" : "DIFFERENT from",
	       same_y ? "equal to" : "DIFFERENT from");
	CHECK(same_x && same_y, "%s: not bit for bit the separate kernels' (x %d, y %d)", what, same_x, same_y);
	if (at != Y_X) /* x after the add: one float add, exact on both sides */
		CHECK(!memcmp(gx, xa, xb), "%s: x after the add differs from the host's", what);
	memcpy(got, gy, yb);
	for (int64_t r = 0; r < R; r++)
		for (int64_t i = n; i < ldy; i++)
			got[r * ldy + i] = want[r * ldy + i] = 0;
	const double tol = 4e-6 * compare(got, want, (size_t)(R * ldy), 0).ref_max;
	CHECK(report(what, compare(got, want, (size_t)(R * ldy), tol), tol), "%s", what);
	free(x);
	free(res);
	free(xa);
	free(w);
	free(want);
	free(got);
	free(gx);
	free(gx2);
	free(gy);
	free(gy2);
	free(rows);
	cudaFree(d_w);
	cudaFree(d_rows);
	cudaFree(d_x);
	cudaFree(d_res);
	cudaFree(d_x2);
	cudaFree(d_res2);
	cudaFree(d_own);
	cudaFree(d_own2);
}

/* add_rms_norm (the residual add fused into the norm) vs the C references (host
 * add, qc_ref_rms_norm) and bit for bit vs qc_cuda_add + qc_cuda_rms_norm; the
 * aliasings rms_norm.h forbids and a missing residual must be refused. */
void test_add_rms_norm(void)
{
	add_rms_case(1, 4096, false, Y_RES); /* decode: wo's output is the delta and the norm's output */
	add_rms_case(5, 576, false, Y_OWN);
	add_rms_case(4, 576, true, Y_OWN);
	add_rms_case(7, 1001, false, Y_RES);
	add_rms_case(3, 1025, false, Y_RES);
	add_rms_case(3, 4096, true, Y_OWN);
	add_rms_case(6, 33, false, Y_X);
	add_rms_case(2, 4097, true, Y_OWN);
	add_rms_case(quick ? 9 : 200, 4096, false, Y_RES);

	/* refused before any launch: y = res with a row list or another stride, y = x
	 * with a row list, res = x, no residual */
	float *d_a = poisoned(sizeof(float) * 64 * 4), *d_b = poisoned(sizeof(float) * 64 * 4);
	int32_t *d_rows = poisoned(sizeof(int32_t) * 2);
	struct qc_err err = {0};
	const struct qc_cuda_add_rms_norm_args bad[] = {
		{d_a, 64, d_rows, d_b, d_b, 64, 2, 64, 1e-5f, d_b},
		{d_a, 64, NULL, d_b, d_b, 65, 2, 64, 1e-5f, d_b},
		{d_a, 64, d_rows, d_b, d_a, 64, 2, 64, 1e-5f, d_b},
		{d_a, 64, NULL, d_b, d_b, 64, 2, 64, 1e-5f, d_a},
		{d_a, 64, NULL, d_b, d_b, 64, 2, 64, 1e-5f, NULL},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECK(qc_cuda_add_rms_norm(&bad[i], 0, &err) == QC_EINVAL, "add_rms_norm: bad case %zu accepted", i);
	cudaFree(d_a);
	cudaFree(d_b);
	cudaFree(d_rows);
}

void test_rope(void)
{
	/* heads, hd, n_rot, mode, extras (0 plain, 1 YaRN, 2 llama3 divisors, 3 both; 6
	 * LongRoPE: Phi-3's divisor table and its attn_factor on cos/sin, as the backend
	 * passes qc_model_rope_factors' table and cfg.rope_attn_factor) */
	const int cfg[][5] = {{3, 64, 64, 0, 0}, {5, 100, 64, 2, 0}, {2, 128, 128, 2, 0}, {4, 48, 32, 0, 0},
			      {4, 64, 64, 0, 1}, {3, 128, 128, 2, 1}, {4, 64, 64, 0, 2}, {2, 128, 96, 2, 3},
			      {4, 96, 96, 2, 6}};
	for (size_t s = 0; s < sizeof cfg / sizeof cfg[0]; s++) {
		const int H = cfg[s][0], hd = cfg[s][1], nr = cfg[s][2], mode = cfg[s][3], xt = cfg[s][4];
		const int64_t T = 9, n = T * H * hd;
		float *x = malloc(sizeof(float) * (size_t)n), *want = malloc(sizeof(float) * (size_t)n);
		float *got = malloc(sizeof(float) * (size_t)n);
		float ff[64];
		int32_t pos[9];
		for (int t = 0; t < T; t++)
			pos[t] = (int32_t)(rnd() % 4000);
		fill(x, (size_t)n, -2, 2);
		fill(ff, 64, 1, xt & 4 ? 60 : 8); /* LongRoPE long factors reach ~60 (Phi-3.5-mini) */
		memcpy(want, x, sizeof(float) * (size_t)n);
		const float ts = powf(10000.0f, -2.0f / (float)nr), fs = s == 3 || xt & 1 ? 0.25f : 1.0f;
		struct qc_ref_rope_ext ext = {.mscale = 1.0f};
		if (xt & 1) { /* YaRN as model.c sets it up for factor 4: ramp over pairs 5..20 */
			ext.ext_factor = 1.0f;
			ext.mscale = 1.0f * (1.0f + 0.1f * logf(1.0f / fs));
			ext.corr[0] = 5.0f;
			ext.corr[1] = 20.0f;
		}
		float *d_ff = NULL;
		if (xt & 2) {
			ext.ff = ff;
			d_ff = up(ff, sizeof ff);
		}
		if (xt & 4) /* Phi-3 128k's LongRoPE attn_factor sqrt(1 + ln(32) / ln(4096)) */
			ext.mscale = 1.1902380714238083f;
		qc_ref_rope(want, pos, T, H, hd, nr, mode, ts, fs, &ext);
		float *d_x = up(x, sizeof(float) * (size_t)n);
		int32_t *d_pos = up(pos, sizeof pos);
		struct qc_err err = {0};
		const struct qc_cuda_rope_args a = {.d_x = d_x, .d_pos = d_pos, .n_tok = T, .n_heads = H, .hd = hd,
						    .n_rot = nr, .mode = mode, .theta_scale = ts, .freq_scale = fs,
						    .ext_factor = ext.ext_factor, .mscale = ext.mscale,
						    .corr = {ext.corr[0], ext.corr[1]}, .d_ff = d_ff};
		CHECK(qc_cuda_rope(&a, 0, &err) == QC_OK, "rope: %s", err.msg);
		down(got, d_x, sizeof(float) * (size_t)n);
		char what[80];
		snprintf(what, sizeof what, "rope %s heads %d hd %d n_rot %d%s%s", mode ? "neox" : "norm", H, hd, nr,
			 xt & 1 ? " yarn" : "", xt & 4 ? " longrope" : xt & 2 ? " factors" : "");
		const double tol = 1e-5 * 4;
		CHECK(report(what, compare(got, want, (size_t)n, tol), tol), "%s", what);
		free(x);
		free(want);
		free(got);
		cudaFree(d_x);
		cudaFree(d_pos);
		cudaFree(d_ff);
	}
}

/* One case of test_rope_kv: T tokens in distinct random slots of a 2-layer pool
 * of bt-token blocks, layer 1; xt as test_rope (1 YaRN, 2 llama3 divisors). */
static void rope_kv_case(int H, int HKV, int hd, int nr, int mode, int xt, int bt, int T)
{
	const int n_layer = 2, layer = 1, kv_dim = HKV * hd, n_blocks = (T + bt - 1) / bt + 3;
	const int64_t nq = (int64_t)T * H * hd, nk = (int64_t)T * kv_dim, pool_rows = (int64_t)n_blocks * n_layer * 2 * bt;
	const size_t pool_n = (size_t)(pool_rows * kv_dim), qb = sizeof(float) * (size_t)nq, kb = sizeof(float) * (size_t)nk;
	float *q = malloc(qb), *k = malloc(kb), *v = malloc(kb), *qr = malloc(qb), *kr = malloc(kb);
	float *gq = malloc(qb), *gq2 = malloc(qb), *gk = malloc(kb), *gk2 = malloc(kb);
	uint16_t *pool = malloc(2 * pool_n), *gpool = malloc(2 * pool_n), *gpool2 = malloc(2 * pool_n);
	int32_t *pos = malloc(sizeof(int32_t) * (size_t)T), *slots = malloc(sizeof(int32_t) * (size_t)n_blocks * bt);
	bool *written = calloc((size_t)pool_rows, 1);
	float ff[4096];
	fill(q, (size_t)nq, -2, 2);
	fill(k, (size_t)nk, -2, 2);
	fill(v, (size_t)nk, -2, 2);
	fill(ff, (size_t)nr / 2, 1, 8);
	for (int i = 0; i < n_blocks * bt; i++) /* every slot once, shuffled: tokens land in scattered blocks */
		slots[i] = i;
	for (int i = n_blocks * bt - 1; i > 0; i--) {
		const int j = (int)(rnd() % (uint32_t)(i + 1)), t = slots[i];
		slots[i] = slots[j];
		slots[j] = t;
	}
	for (int t = 0; t < T; t++)
		pos[t] = (int32_t)(rnd() % 4000);
	const float ts = powf(10000.0f, -2.0f / (float)nr), fs = xt & 1 ? 0.25f : 1.0f;
	struct qc_ref_rope_ext ext = {.mscale = 1.0f};
	if (xt & 1) { /* YaRN as test_rope sets it up */
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
	/* reference: rope of q and k, then the fp16 store into a pool of poison (0xffff) */
	memcpy(qr, q, qb);
	memcpy(kr, k, kb);
	qc_ref_rope(qr, pos, T, H, hd, nr, mode, ts, fs, &ext);
	qc_ref_rope(kr, pos, T, HKV, hd, nr, mode, ts, fs, &ext);
	memset(pool, 0xff, 2 * pool_n);
	qc_ref_kv_store(kr, v, slots, T, pool, layer, n_layer, bt, kv_dim);

	float *d_q = up(q, qb), *d_k = up(k, kb), *d_v = up(v, kb), *d_q2 = up(q, qb), *d_k2 = up(k, kb);
	int32_t *d_pos = up(pos, sizeof(int32_t) * (size_t)T), *d_slots = up(slots, sizeof(int32_t) * (size_t)T);
	uint16_t *d_pool = poisoned(2 * pool_n), *d_pool2 = poisoned(2 * pool_n);
	const struct qc_cuda_rope_args ra = {.d_pos = d_pos, .n_tok = T, .hd = hd, .n_rot = nr, .mode = mode,
					     .theta_scale = ts, .freq_scale = fs, .ext_factor = ext.ext_factor,
					     .mscale = ext.mscale, .corr = {ext.corr[0], ext.corr[1]}, .d_ff = d_ff};
	struct qc_err err = {0};
	const struct qc_cuda_rope_kv_args a = {.rope = ra, .d_q = d_q, .n_head = H, .d_k = d_k, .d_v = d_v,
					       .n_head_kv = HKV, .d_slots = d_slots, .d_pool = d_pool,
					       .layer = layer, .n_layer = n_layer, .block_tokens = bt};
	CHECK(qc_cuda_rope_kv(&a, 0, &err) == QC_OK, "rope_kv: %s", err.msg);
	/* the kernels it replaces: rope of q, rope of k, kv_store */
	struct qc_cuda_rope_args rq = ra, rk = ra;
	rq.d_x = d_q2;
	rq.n_heads = H;
	rk.d_x = d_k2;
	rk.n_heads = HKV;
	const struct qc_cuda_kv_store_args ka = {d_k2, d_v, d_slots, T, d_pool2, layer, n_layer, bt, kv_dim};
	CHECK(qc_cuda_rope(&rq, 0, &err) == QC_OK, "rope q: %s", err.msg);
	CHECK(qc_cuda_rope(&rk, 0, &err) == QC_OK, "rope k: %s", err.msg);
	CHECK(qc_cuda_kv_store(&ka, 0, &err) == QC_OK, "kv_store: %s", err.msg);
	down(gq, d_q, qb);
	down(gq2, d_q2, qb);
	down(gk, d_k, kb);
	down(gk2, d_k2, kb);
	down(gpool, d_pool, 2 * pool_n);
	down(gpool2, d_pool2, 2 * pool_n);

	char what[112];
	snprintf(what, sizeof what, "rope_kv %s heads %d/%d hd %d n_rot %d%s%s, %d tokens, bt %d", mode ? "neox" : "norm",
		 H, HKV, hd, nr, xt & 1 ? " yarn" : "", xt & 2 ? " factors" : "", T, bt);
	const bool same_q = !memcmp(gq, gq2, qb), same_k = !memcmp(gk, gk2, kb);
	const bool same_pool = !memcmp(gpool, gpool2, 2 * pool_n);
	printf("  %s: q, k, pool %s the rope, rope, kv_store kernels'\n", what,
	       same_q && same_k && same_pool ? "equal to" : "DIFFERENT from");
	CHECK(same_q && same_k && same_pool, "%s: not bit for bit the separate kernels' (q %d, k %d, pool %d)", what,
	      same_q, same_k, same_pool);
	/* vs the references: q and k as test_rope; the written pool rows decoded, within
	 * that plus one fp16 step (the two roundings may land either side); the rest poison */
	const double tol = 1e-5 * 4;
	CHECK(report(what, compare(gq, qr, (size_t)nq, tol), tol), "%s (q)", what);
	CHECK(report("  (k)", compare(gk, kr, (size_t)nk, tol), tol), "%s (k)", what);
	float *pw = malloc(2 * kb), *pg = malloc(2 * kb);
	for (int t = 0; t < T; t++)
		for (int kv = 0; kv < 2; kv++) {
			const int64_t row = (((int64_t)(slots[t] / bt) * n_layer + layer) * 2 + kv) * bt + slots[t] % bt;
			written[row] = true;
			for (int d = 0; d < kv_dim; d++) {
				pw[((int64_t)t * 2 + kv) * kv_dim + d] = qc_fp16_to_f32(pool[row * kv_dim + d]);
				pg[((int64_t)t * 2 + kv) * kv_dim + d] = qc_fp16_to_f32(gpool[row * kv_dim + d]);
			}
		}
	const double ptol = tol + compare(pg, pw, (size_t)(2 * nk), 0).ref_max / 1024;
	CHECK(report("  (pool)", compare(pg, pw, (size_t)(2 * nk), ptol), ptol), "%s (pool)", what);
	int64_t touched = 0;
	for (int64_t row = 0; row < pool_rows; row++)
		for (int d = 0; d < kv_dim && !written[row]; d++)
			touched += gpool[row * kv_dim + d] != 0xffff;
	CHECK(touched == 0, "%s: %lld pool elements outside this step's slots written", what, (long long)touched);
	/* no pool (the fp8 pool's RoPE): the same q and k, d_v and d_slots never read */
	struct qc_cuda_rope_kv_args a0 = a;
	cudaMemcpy(d_q2, q, qb, cudaMemcpyHostToDevice);
	cudaMemcpy(d_k2, k, kb, cudaMemcpyHostToDevice);
	a0.d_q = d_q2;
	a0.d_k = d_k2;
	a0.d_v = NULL;
	a0.d_slots = NULL;
	a0.d_pool = NULL;
	CHECK(qc_cuda_rope_kv(&a0, 0, &err) == QC_OK, "rope_kv without a pool: %s", err.msg);
	down(gq2, d_q2, qb);
	down(gk2, d_k2, kb);
	CHECK(!memcmp(gq, gq2, qb) && !memcmp(gk, gk2, kb), "%s: without a pool, q or k differ", what);
	free(q);
	free(k);
	free(v);
	free(qr);
	free(kr);
	free(gq);
	free(gq2);
	free(gk);
	free(gk2);
	free(pool);
	free(gpool);
	free(gpool2);
	free(pos);
	free(slots);
	free(written);
	free(pw);
	free(pg);
	cudaFree(d_ff);
	cudaFree(d_q);
	cudaFree(d_k);
	cudaFree(d_v);
	cudaFree(d_q2);
	cudaFree(d_k2);
	cudaFree(d_pos);
	cudaFree(d_slots);
	cudaFree(d_pool);
	cudaFree(d_pool2);
}

/* RoPE of q and k + the K/V store in one kernel vs the C references (qc_ref_rope,
 * qc_ref_kv_store) and bit for bit vs qc_cuda_rope twice + qc_cuda_kv_store:
 * NORM and NEOX, partial rotary, YaRN and llama3 divisors, GQA, one token to
 * many; bad arguments refused, no tokens no launch. */
void test_rope_kv(void)
{
	/* heads, kv heads, hd, n_rot, mode, extras, block tokens, tokens */
	const int cfg[][8] = {
		{8, 2, 64, 64, QC_ROPE_NORM, 0, 16, 9},     {8, 2, 128, 128, QC_ROPE_NEOX, 1, 16, 9},
		{4, 4, 100, 64, QC_ROPE_NEOX, 0, 7, 5},     {8, 2, 64, 32, QC_ROPE_NORM, 3, 16, 1},
		{6, 1, 128, 96, QC_ROPE_NEOX, 2, 16, 17},   {5, 5, 48, 32, QC_ROPE_NORM, 1, 7, 12},
		{32, 8, 128, 128, QC_ROPE_NEOX, 2, 16, 1},  {32, 8, 128, 128, QC_ROPE_NORM, 0, 16, quick ? 40 : 300},
	};
	for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++)
		rope_kv_case(cfg[i][0], cfg[i][1], cfg[i][2], cfg[i][3], cfg[i][4], cfg[i][5], cfg[i][6], cfg[i][7]);

	struct qc_err err = {0};
	const struct qc_cuda_rope_args ra = {.n_tok = 4, .hd = 64, .n_rot = 64, .mode = QC_ROPE_NORM,
					     .theta_scale = 0.5f, .freq_scale = 1.0f, .mscale = 1.0f};
	const struct qc_cuda_rope_kv_args ok = {.rope = ra, .n_head = 8, .n_head_kv = 2, .layer = 1, .n_layer = 2,
						.block_tokens = 16};
	struct qc_cuda_rope_kv_args bad[5] = {ok, ok, ok, ok, ok};
	bad[0].n_head_kv = 0;
	bad[1].layer = 2;
	bad[2].rope.n_rot = 66;
	bad[3].rope.mode = 1;
	bad[4].block_tokens = 0;
	for (int i = 0; i < 5; i++)
		CHECK(qc_cuda_rope_kv(&bad[i], 0, &err) == QC_EINVAL, "rope_kv: bad arguments %d accepted", i);
	struct qc_cuda_rope_kv_args none = ok; /* no tokens: no launch, so the NULL buffers are never read */
	none.rope.n_tok = 0;
	CHECK(qc_cuda_rope_kv(&none, 0, &err) == QC_OK && cudaDeviceSynchronize() == cudaSuccess,
	      "rope_kv: no tokens: %s", err.msg);
}

void test_elementwise(void)
{
	const int64_t n = quick ? 1001 : 100003, nx = 77;
	float *g = malloc(sizeof(float) * (size_t)n), *u = malloc(sizeof(float) * (size_t)n);
	float *want = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
	fill(g, (size_t)n, -12, 12);
	fill(u, (size_t)n, -3, 3);
	qc_ref_silu_mul(g, u, want, n);
	float *d_g = up(g, sizeof(float) * (size_t)n), *d_u = up(u, sizeof(float) * (size_t)n);
	float *d_y = poisoned(sizeof(float) * (size_t)n);
	struct qc_err err = {0};
	const struct qc_cuda_silu_mul_args sa = {d_g, d_u, d_y, n};
	CHECK(qc_cuda_silu_mul(&sa, 0, &err) == QC_OK, "silu_mul: %s", err.msg);
	down(got, d_y, sizeof(float) * (size_t)n);
	CHECK(report("silu_mul", compare(got, want, (size_t)n, 1e-5), 1e-5), "silu_mul");

	memcpy(want, u, sizeof(float) * (size_t)n);
	qc_ref_add(want, g, n, nx);
	const struct qc_cuda_add_args aa = {d_u, d_g, n, nx};
	CHECK(qc_cuda_add(&aa, 0, &err) == QC_OK, "add: %s", err.msg);
	down(got, d_u, sizeof(float) * (size_t)n);
	CHECK(!memcmp(got, want, sizeof(float) * (size_t)n), "add (bias period %lld) not exact", (long long)nx);
	free(g);
	free(u);
	free(want);
	free(got);
	cudaFree(d_g);
	cudaFree(d_u);
	cudaFree(d_y);
}

/* Gemma's elementwise ops vs runtime/ops: gelu_mul against QC_REF_GELU_EXACT (the
 * CPU backend's float path) over +-12, its tails included; softcap.cu as the
 * embedding scale (one multiply: bit for bit) and as the final-logit soft-cap
 * (tanhf: a small relative error; values past the cap saturate). Outputs poisoned;
 * the soft-cap's checker must trip on the uncapped values. */
void test_gemma_elementwise(void)
{
	const int64_t n = quick ? 1001 : 100003;
	float *g = malloc(sizeof(float) * (size_t)n), *u = malloc(sizeof(float) * (size_t)n);
	float *want = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
	fill(g, (size_t)n, -12, 12);
	fill(u, (size_t)n, -3, 3);
	qc_ref_gelu_mul(g, u, want, n, QC_REF_GELU_EXACT);
	float *d_g = up(g, sizeof(float) * (size_t)n), *d_u = up(u, sizeof(float) * (size_t)n);
	float *d_y = poisoned(sizeof(float) * (size_t)n);
	struct qc_err err = {0};
	const struct qc_cuda_gelu_mul_args ga = {d_g, d_u, d_y, n};
	CHECK(qc_cuda_gelu_mul(&ga, 0, &err) == QC_OK, "gelu_mul: %s", err.msg);
	down(got, d_y, sizeof(float) * (size_t)n);
	/* tanhf: 2 ulp on the device, 1 in glibc, times 0.5 |g u| <= 18; the product's rounding */
	const double gtol = 18.0 * 3 * FLT_EPSILON + 36.0 * FLT_EPSILON;
	CHECK(report("gelu_mul", compare(got, want, (size_t)n, gtol), gtol), "gelu_mul");

	/* embedding scale sqrt(2304) (Gemma 2 2B): exact */
	const float es = sqrtf(2304.0f);
	memcpy(want, g, sizeof(float) * (size_t)n);
	qc_ref_scale(want, n, es);
	float *d_x = up(g, sizeof(float) * (size_t)n);
	const struct qc_cuda_softcap_args sa = {d_x, n, es, 0.0f};
	CHECK(qc_cuda_softcap(&sa, 0, &err) == QC_OK, "softcap (scale): %s", err.msg);
	down(got, d_x, sizeof(float) * (size_t)n);
	CHECK(!memcmp(got, want, sizeof(float) * (size_t)n), "softcap as the embedding scale: not qc_ref_scale's bits");

	/* final-logit cap 30 (Gemma 2) over logits to +-120 */
	for (int64_t i = 0; i < n; i++)
		g[i] *= 10.0f;
	memcpy(want, g, sizeof(float) * (size_t)n);
	qc_ref_softcap(want, n, 30.0f);
	cudaMemcpy(d_x, g, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice);
	const struct qc_cuda_softcap_args ca = {d_x, n, 1.0f, 30.0f};
	CHECK(qc_cuda_softcap(&ca, 0, &err) == QC_OK, "softcap: %s", err.msg);
	down(got, d_x, sizeof(float) * (size_t)n);
	const double ctol = 30.0 * 4 * FLT_EPSILON; /* tanhf's 3 ulp between the two, times the cap; the multiply */
	CHECK(report("softcap 30", compare(got, want, (size_t)n, ctol), ctol), "softcap");
	struct cmp bad = compare(g, want, (size_t)n, ctol); /* the uncapped logits must fail */
	CHECK(bad.first_bad >= 0, "softcap's checker passes uncapped logits");
	const struct qc_cuda_softcap_args neg = {d_x, n, 1.0f, -1.0f};
	CHECK(qc_cuda_softcap(&neg, 0, &err) == QC_EINVAL, "softcap: a negative cap accepted");
	free(g);
	free(u);
	free(want);
	free(got);
	cudaFree(d_g);
	cudaFree(d_u);
	cudaFree(d_y);
	cudaFree(d_x);
}

/* act_gather vs the reference: a shared permutation with strided rows, and one
 * permutation per expert with rows (token, slot) reading token r / x_div. Exact. */
void test_act_gather(void)
{
	const int64_t K = 200, ldx = 211, NT = 7, E = 3, XD = 2, R = NT * XD;
	int32_t *perm = malloc(sizeof(int32_t) * (size_t)(E * K)), ex[14];
	float *x = malloc(sizeof(float) * (size_t)(NT * ldx)), *want = malloc(sizeof(float) * (size_t)(R * K));
	float *got = malloc(sizeof(float) * (size_t)(R * K));
	fill(x, (size_t)(NT * ldx), -3, 3);
	for (int64_t e = 0; e < E; e++) { /* Fisher-Yates */
		int32_t *p = perm + e * K;
		for (int64_t i = 0; i < K; i++)
			p[i] = (int32_t)i;
		for (int64_t i = K - 1; i > 0; i--) {
			const int64_t j = rnd() % (uint32_t)(i + 1);
			const int32_t t = p[i];
			p[i] = p[j];
			p[j] = t;
		}
	}
	for (int64_t r = 0; r < R; r++)
		ex[r] = (int32_t)(rnd() % E);
	float *d_x = up(x, sizeof(float) * (size_t)(NT * ldx));
	int32_t *d_perm = up(perm, sizeof(int32_t) * (size_t)(E * K)), *d_ex = up(ex, sizeof ex);
	float *d_o = poisoned(sizeof(float) * (size_t)(R * K));
	struct qc_err err = {0};
	for (int pass = 0; pass < 2; pass++) {
		const bool experts = pass == 1;
		const int64_t rows = experts ? R : NT;
		qc_ref_act_gather(x, ldx, experts ? (int32_t)XD : 1, experts ? ex : NULL, perm, experts ? K : 0, rows, K, want);
		const struct qc_cuda_act_gather_args a = {d_x, ldx, experts ? (int32_t)XD : 1, experts ? d_ex : NULL, d_perm,
							  experts ? K : 0, rows, K, d_o};
		CHECK(qc_cuda_act_gather(&a, 0, &err) == QC_OK, "act_gather: %s", err.msg);
		down(got, d_o, sizeof(float) * (size_t)(rows * K));
		const bool ok = !memcmp(got, want, sizeof(float) * (size_t)(rows * K));
		printf("  act_gather %s, %lld rows of %lld: %s\n", experts ? "per-expert permutations" : "shared permutation",
		       (long long)rows, (long long)K, ok ? "equal" : "DIFFERENT");
		CHECK(ok, "act_gather (%s) differs from the reference", experts ? "experts" : "shared");
	}
	free(perm);
	free(x);
	free(want);
	free(got);
	cudaFree(d_x);
	cudaFree(d_perm);
	cudaFree(d_ex);
	cudaFree(d_o);
}

/* Device argmax vs the reference scan: random rows, rows with ties on the
 * maximum (the lowest index must win), a NaN row, a +inf row, an all -inf row,
 * and a vocabulary of odd size. Exact. */
void test_argmax(int32_t n)
{
	const int64_t R = 19;
	float *x = malloc(sizeof(float) * (size_t)(R * n));
	int32_t want[19], got[19];
	fill(x, (size_t)(R * n), -20, 20);
	for (int r = 1; r < 8; r++) { /* ties: the maximum copied to later and earlier places */
		float *row = x + r * n;
		const int32_t a = (int32_t)(rnd() % (uint32_t)n), b = (int32_t)(rnd() % (uint32_t)n);
		row[a] = row[b] = 25.0f + (float)r;
		if (r & 1)
			row[n - 1] = row[a];
	}
	x[8 * n + n / 2] = NAN;
	x[9 * n + 3] = INFINITY;
	for (int32_t i = 0; i < n; i++)
		x[10 * n + i] = -INFINITY;
	x[11 * n + n - 1] = 1e30f; /* the largest value last */
	qc_ref_argmax(x, R, n, want);
	CHECK(want[8] == -1 && want[9] == -1 && want[10] == -1 && want[11] == n - 1, "argmax reference edge rows");
	float *d_x = up(x, sizeof(float) * (size_t)(R * n));
	int32_t *d_o = poisoned(sizeof(int32_t) * (size_t)R);
	struct qc_err err = {0};
	const struct qc_cuda_argmax_args aa = {d_x, d_o, R, n};
	CHECK(qc_cuda_argmax(&aa, 0, &err) == QC_OK, "argmax: %s", err.msg);
	down(got, d_o, sizeof(int32_t) * (size_t)R);
	int bad = -1;
	for (int r = 0; r < R && bad < 0; r++)
		if (got[r] != want[r])
			bad = r;
	printf("  argmax %lld rows of %d: %s\n", (long long)R, n, bad < 0 ? "equal" : "DIFFERENT");
	CHECK(bad < 0, "argmax row %d: device %d, reference %d", bad, bad < 0 ? 0 : got[bad], bad < 0 ? 0 : want[bad]);
	free(x);
	cudaFree(d_x);
	cudaFree(d_o);
}

/* top-k candidates: rows with k 0 / 1 (untouched), 2..128; ties (quantized
 * values), -0 next to +0, -inf filling a row with fewer finite values than k,
 * NaN / +inf / all -inf rows flagged; bit-exact ids and values. */
void test_topk(int32_t n)
{
	enum { R = 12, S = QC_CUDA_TOPK_MAX };
	const int32_t kk[R] = {0, 1, 2, 40, 128, 7, 64, 3, 40, 40, 100, 128};
	float *x = malloc(sizeof(float) * (size_t)(R * n));
	int32_t *want_i = malloc(sizeof(int32_t) * R * S), *got_i = malloc(sizeof(int32_t) * R * S);
	float *want_v = malloc(sizeof(float) * R * S), *got_v = malloc(sizeof(float) * R * S);
	fill(x, (size_t)(R * n), -20, 20);
	for (int32_t i = 0; i < n; i++) {
		x[3 * n + i] = floorf(x[3 * n + i]);          /* many ties at every value */
		x[6 * n + i] = (float)(int)(rnd() % 3) - 1.0f; /* -1, 0, 1 only */
		x[7 * n + i] = i % 2 ? -0.0f : 0.0f;           /* -0 == +0: lowest ids win */
		x[10 * n + i] = i < 5 ? (float)i : -INFINITY;  /* 5 finite, k 100 */
		x[11 * n + i] = -INFINITY;                     /* all -inf: flagged */
	}
	x[8 * n + n / 2] = NAN;
	x[9 * n + 3] = INFINITY;
	for (int32_t i = 0; i < R * S; i++) {
		want_i[i] = got_i[i] = -7;
		want_v[i] = got_v[i] = 0.0f;
	}
	int32_t k[R];
	for (int r = 0; r < R; r++)
		k[r] = kk[r] < n ? kk[r] : n;
	qc_ref_topk(x, R, n, k, S, want_i, want_v);
	CHECK(want_i[8 * S] == -1 && want_i[9 * S] == -1 && want_i[11 * S] == -1 && want_i[0] == -7 &&
	      want_i[S] == -7, "topk reference edge rows");
	float *d_x = up(x, sizeof(float) * (size_t)(R * n));
	int32_t *d_k = up(k, sizeof k), *d_i = up(got_i, sizeof(int32_t) * R * S);
	float *d_v = poisoned(sizeof(float) * R * S);
	cudaMemcpy(d_v, got_v, sizeof(float) * R * S, cudaMemcpyHostToDevice);
	struct qc_err err = {0};
	const struct qc_cuda_topk_args ta = {d_x, d_k, d_i, d_v, R, n, S};
	CHECK(qc_cuda_topk(&ta, 0, &err) == QC_OK, "topk: %s", err.msg);
	down(got_i, d_i, sizeof(int32_t) * R * S);
	down(got_v, d_v, sizeof(float) * R * S);
	int bad = -1;
	for (int i = 0; i < R * S && bad < 0; i++)
		if (got_i[i] != want_i[i] || memcmp(&got_v[i], &want_v[i], sizeof(float)))
			bad = i;
	printf("  topk %d rows of %d (k up to %d): %s\n", R, n, S, bad < 0 ? "equal" : "DIFFERENT");
	CHECK(bad < 0, "topk entry %d (row %d): device %d %g, reference %d %g", bad, bad / S, bad < 0 ? 0 : got_i[bad],
	      bad < 0 ? 0.0 : (double)got_v[bad], bad < 0 ? 0 : want_i[bad], bad < 0 ? 0.0 : (double)want_v[bad]);
	free(x);
	free(want_i);
	free(got_i);
	free(want_v);
	free(got_v);
	cudaFree(d_x);
	cudaFree(d_k);
	cudaFree(d_i);
	cudaFree(d_v);
}

void test_moe(int n_expert, int k, int norm)
{
	const int64_t T = 13, n = 96;
	float *lg = malloc(sizeof(float) * (size_t)(T * n_expert));
	fill(lg, (size_t)(T * n_expert), -4, 4);
	lg[3] = lg[4]; /* a tie: first index must win */
	int32_t sel[13 * 8], gsel[13 * 8];
	float w[13 * 8], gw[13 * 8];
	qc_ref_moe_route(lg, T, n_expert, k, norm, sel, w);
	float *d_lg = up(lg, sizeof(float) * (size_t)(T * n_expert));
	int32_t *d_sel = poisoned(sizeof sel);
	float *d_w = poisoned(sizeof w);
	struct qc_err err = {0};
	const struct qc_cuda_moe_route_args ra = {d_lg, T, n_expert, k, d_sel, d_w, norm};
	CHECK(qc_cuda_moe_route(&ra, 0, &err) == QC_OK, "moe_route: %s", err.msg);
	down(gsel, d_sel, sizeof(int32_t) * (size_t)(T * k));
	down(gw, d_w, sizeof(float) * (size_t)(T * k));
	CHECK(!memcmp(gsel, sel, sizeof(int32_t) * (size_t)(T * k)), "moe_route %d/%d: selection differs", k, n_expert);
	char what[64];
	snprintf(what, sizeof what, "moe_route top-%d of %d%s", k, n_expert, norm ? " norm" : "");
	CHECK(report(what, compare(gw, w, (size_t)(T * k), 1e-6), 1e-6), "%s", what);

	float *x = malloc(sizeof(float) * (size_t)(T * n)), *eo = malloc(sizeof(float) * (size_t)(T * k * n));
	float *want = malloc(sizeof(float) * (size_t)(T * n)), *got = malloc(sizeof(float) * (size_t)(T * n));
	fill(x, (size_t)(T * n), -1, 1);
	fill(eo, (size_t)(T * k * n), -1, 1);
	memcpy(want, x, sizeof(float) * (size_t)(T * n));
	qc_ref_moe_combine(want, eo, w, T, n, k, NULL, NULL);
	float *d_x = up(x, sizeof(float) * (size_t)(T * n)), *d_eo = up(eo, sizeof(float) * (size_t)(T * k * n));
	float *d_w2 = up(w, sizeof(float) * (size_t)(T * k));
	struct qc_cuda_moe_combine_args ca = {d_x, d_eo, d_w2, T, n, k, NULL, NULL};
	CHECK(qc_cuda_moe_combine(&ca, 0, &err) == QC_OK, "moe_combine: %s", err.msg);
	down(got, d_x, sizeof(float) * (size_t)(T * n));
	CHECK(!memcmp(got, want, sizeof(float) * (size_t)(T * n)), "moe_combine not exact");
	/* with a shared expert: the gate's expf may differ from glibc's by an ulp */
	float *sh = malloc(sizeof(float) * (size_t)(T * n)), shg[13];
	fill(sh, (size_t)(T * n), -1, 1);
	fill(shg, 13, -6, 6);
	memcpy(want, x, sizeof(float) * (size_t)(T * n));
	qc_ref_moe_combine(want, eo, w, T, n, k, sh, shg);
	float *d_sh = up(sh, sizeof(float) * (size_t)(T * n)), *d_shg = up(shg, sizeof shg);
	cudaMemcpy(d_x, x, sizeof(float) * (size_t)(T * n), cudaMemcpyHostToDevice);
	ca.d_sh = d_sh;
	ca.d_shg = d_shg;
	CHECK(qc_cuda_moe_combine(&ca, 0, &err) == QC_OK, "moe_combine (shared expert): %s", err.msg);
	down(got, d_x, sizeof(float) * (size_t)(T * n));
	snprintf(what, sizeof what, "moe_combine top-%d + shared expert", k);
	CHECK(report(what, compare(got, want, (size_t)(T * n), 4e-6), 4e-6), "%s", what);
	ca.d_shg = NULL;
	CHECK(qc_cuda_moe_combine(&ca, 0, &err) == QC_EINVAL, "moe_combine: shared expert without gate accepted");
	free(sh);
	cudaFree(d_sh);
	cudaFree(d_shg);
	free(lg);
	free(x);
	free(eo);
	free(want);
	free(got);
	cudaFree(d_lg);
	cudaFree(d_sel);
	cudaFree(d_w);
	cudaFree(d_x);
	cudaFree(d_eo);
	cudaFree(d_w2);
}
