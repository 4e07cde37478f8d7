/* kernels_attn.c — test_kernels, attention: kv_store bit for bit, paged attention over
 * shuffled block tables (prefill and decode sequences, GQA, long contexts split in
 * chunks) and flash prefill attention (runs of several sequences per step, GQA 1-16,
 * head dims 32-256) against the C reference, with fa_tol's first-order bound; all
 * paths again with soft-capped scores and sliding windows (test_attn_cap_window).
 */
#include "kernels_harness.h"
#include "kernels/flash_attn.h"
#include "kernels/kv_store.h"
#include "kernels/paged_attn.h"
#include "fp16.h"

/* K/V store + paged attention over shuffled block tables: 3 sequences, one
 * prefilling several tokens, two decoding; GQA. */
void test_attention(int bt, int hd, int n_head, int n_head_kv, int long_ctx)
{
	/* context lengths after this step; long_ctx: enough positions for many split-K chunks */
	const int lens[3] = {long_ctx ? (quick ? 200 : 1500) : quick ? 20 : 70, 1 + bt, 3};
	const int new_toks[3] = {lens[0], 1, 1};          /* seq 0 prefills from 0 */
	const int max_len = lens[0] > lens[1] ? lens[0] : lens[1];
	const int stride = (max_len + bt - 1) / bt;
	const int n_layer = 2, layer = 1, n_blocks = 3 * stride + 4, kv_dim = n_head_kv * hd, q_dim = n_head * hd;
	int32_t *tables = malloc(sizeof(int32_t) * 3 * (size_t)stride);
	int *perm = malloc(sizeof(int) * (size_t)n_blocks);
	for (int i = 0; i < n_blocks; i++)
		perm[i] = i;
	for (int i = n_blocks - 1; i > 0; i--) {
		int j = (int)(rnd() % (uint32_t)(i + 1)), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	int used = 0;
	for (int s = 0; s < 3; s++)
		for (int b = 0; b < stride; b++)
			tables[s * stride + b] = b * bt < lens[s] ? perm[used++] : -1;
	const size_t pool_n = (size_t)n_blocks * n_layer * 2 * bt * kv_dim;
	uint16_t *pool = malloc(2 * pool_n), *gpool = malloc(2 * pool_n);
	for (size_t i = 0; i < pool_n; i++)
		pool[i] = qc_f32_to_fp16(frand(-2, 2));
	/* this step's tokens */
	int T = 0;
	const int n_new = new_toks[0] + new_toks[1] + new_toks[2];
	int32_t *pos = malloc(sizeof(int32_t) * (size_t)n_new), *seq = malloc(sizeof(int32_t) * (size_t)n_new);
	int32_t *slots = malloc(sizeof(int32_t) * (size_t)n_new);
	for (int s = 0; s < 3; s++)
		for (int k = 0; k < new_toks[s]; k++) {
			pos[T] = lens[s] - new_toks[s] + k;
			seq[T] = s;
			slots[T] = tables[s * stride + pos[T] / bt] * bt + pos[T] % bt;
			T++;
		}
	float *k = malloc(sizeof(float) * (size_t)T * kv_dim), *v = malloc(sizeof(float) * (size_t)T * kv_dim);
	float *q = malloc(sizeof(float) * (size_t)T * q_dim);
	fill(k, (size_t)T * kv_dim, -2, 2);
	fill(v, (size_t)T * kv_dim, -2, 2);
	fill(q, (size_t)T * q_dim, -2, 2);
	uint16_t *d_pool = up(pool, 2 * pool_n);
	qc_ref_kv_store(k, v, slots, T, pool, layer, n_layer, bt, kv_dim);
	float *d_k = up(k, sizeof(float) * (size_t)T * kv_dim), *d_v = up(v, sizeof(float) * (size_t)T * kv_dim);
	int32_t *d_slots = up(slots, sizeof(int32_t) * (size_t)T), *d_pos = up(pos, sizeof(int32_t) * (size_t)T);
	int32_t *d_seq = up(seq, sizeof(int32_t) * (size_t)T), *d_tab = up(tables, sizeof(int32_t) * 3 * (size_t)stride);
	struct qc_err err = {0};
	const struct qc_cuda_kv_store_args ka = {d_k, d_v, d_slots, T, d_pool, layer, n_layer, bt, kv_dim};
	CHECK(qc_cuda_kv_store(&ka, 0, &err) == QC_OK, "kv_store: %s", err.msg);
	down(gpool, d_pool, 2 * pool_n);
	CHECK(!memcmp(gpool, pool, 2 * pool_n), "kv_store: pool differs from the reference");

	float *want = malloc(sizeof(float) * (size_t)T * q_dim), *got = malloc(sizeof(float) * (size_t)T * q_dim);
	const float scale = 1.0f / sqrtf((float)hd);
	qc_ref_paged_attn(q, want, pool, layer, n_layer, bt, n_head, n_head_kv, hd, pos, seq, tables, stride, T, scale);
	float *d_q = up(q, sizeof(float) * (size_t)T * q_dim), *d_o = poisoned(sizeof(float) * (size_t)T * q_dim);
	/* both paths: one block per (token, head), then split-K with scratch (fresh poison each);
	 * the flash path (test_flash_attn) off, so the prefill tokens take them too */
	const uint64_t wsb = qc_cuda_paged_attn_ws_bytes(T, n_head, hd, max_len);
	void *d_ws = NULL;
	CHECK(wsb > 0 && cudaMalloc(&d_ws, wsb) == cudaSuccess, "paged_attn scratch of %llu bytes",
	      (unsigned long long)wsb);
	/* split 2: the merge inside the split kernel (arrival counters): split 1's bits */
	const int64_t nfl = (int64_t)T * n_head_kv;
	uint32_t *d_fl = up(NULL, sizeof(uint32_t) * (size_t)nfl), *hfl = malloc(sizeof(uint32_t) * (size_t)nfl);
	float *got1 = malloc(sizeof(float) * (size_t)T * q_dim);
	cudaMemset(d_fl, 0, sizeof(uint32_t) * (size_t)nfl);
	/* splits 3, 4: 2 and 1 with the rows below each token's own loaded before the PDL
	   wait (old_ctx; every row here is written before the launch): the same bits */
	for (int split = 0; split < 5; split++) {
		if (split)
			cudaMemset(d_o, 0xff, sizeof(float) * (size_t)T * q_dim);
		const struct qc_cuda_paged_attn_args pa = {
			.d_q = d_q, .d_out = d_o, .d_pool = d_pool, .layer = layer, .n_layer = n_layer, .block_tokens = bt,
			.n_head = n_head, .n_head_kv = n_head_kv, .hd = hd, .d_pos = d_pos, .d_tok_seq = d_seq,
			.d_tables = d_tab, .table_stride = stride, .n_tok = T, .max_ctx = max_len, .scale = scale,
			.d_ws = split ? d_ws : NULL, .ws_bytes = split ? wsb : 0, .flash = QC_CUDA_ATTN_FLASH_OFF,
			.d_flags = split % 2 == 0 && split ? d_fl : NULL, .n_flags = split % 2 == 0 && split ? nfl : 0,
			.old_ctx = split >= 3,
		};
		CHECK(qc_cuda_paged_attn(&pa, 0, &err) == QC_OK, "paged_attn: %s", err.msg);
		down(got, d_o, sizeof(float) * (size_t)T * q_dim);
		char what[128];
		static const char *const path[] = {"", " split-K", " split-K, merged in-kernel", " split-K, early loads",
						   " split-K, early loads, merged in-kernel"};
		snprintf(what, sizeof what, "paged_attn%s bt %d hd %d heads %d/%d, %d tokens, ctx %d", path[split], bt, hd,
			 n_head, n_head_kv, T, max_len);
		const double tol = 2e-5 * 2;
		CHECK(report(what, compare(got, want, (size_t)T * q_dim, tol), tol), "%s", what);
		if (split == 1)
			memcpy(got1, got, sizeof(float) * (size_t)T * q_dim);
		if (split >= 2) {
			down(hfl, d_fl, sizeof(uint32_t) * (size_t)nfl);
			int64_t left = 0;
			for (int64_t i = 0; i < nfl; i++)
				left += hfl[i] != 0;
			CHECK(!memcmp(got, got1, sizeof(float) * (size_t)T * q_dim) && left == 0,
			      "%s: the merge kernel's bits (%s), counters left %lld", what,
			      memcmp(got, got1, sizeof(float) * (size_t)T * q_dim) ? "differ" : "same", (long long)left);
		}
	}
	cudaFree(d_fl);
	free(hfl);
	free(got1);
	cudaFree(d_ws);
	free(tables);
	free(perm);
	free(pos);
	free(seq);
	free(slots);
	free(pool);
	free(gpool);
	free(k);
	free(v);
	free(q);
	free(want);
	free(got);
	cudaFree(d_pool);
	cudaFree(d_k);
	cudaFree(d_v);
	cudaFree(d_slots);
	cudaFree(d_pos);
	cudaFree(d_seq);
	cudaFree(d_tab);
	cudaFree(d_q);
	cudaFree(d_o);
}

/* Bound on |flash_attn - reference| per output, first order (u = 2^-11, the
 * binary16 unit roundoff; vmax = max |v|; S = max over tokens, heads and keys of
 * scale * sum_d |q_d k_d|; n = the longest context):
 * - P is rounded to binary16 and normalized by the sum of the rounded values:
 *   a weight moves by at most 2u relative, the output by 2u vmax;
 * - a score error d (fp32 tensor-core sums of hd terms, 2^-23 each; plus
 *   q_u S when the reference was fed the unrounded q, whose binary16 rounding
 *   the kernel adds) moves every weight by at most e^(2d) - 1 relative; exp2 on
 *   the approximate unit and a key tile's rescale factors add 2^-22 each;
 * - the P V, softmax and reference sums in float: n 2^-21 vmax in all.
 * Worst cases (typical errors are 10-100x smaller); the bit-exact and done-flag
 * checks catch what a loose bound could hide (a wrong key, a wrong mask). */
double fa_tol(double vmax, double S, int hd, int n, double q_u)
{
	const double u = 0x1p-11, d = (hd + 2) * 0x1p-23 * S + q_u * S;
	return vmax * (expm1(2 * d + (n / 32.0 + 2) * 0x1p-22) + 2.2 * u + n * 0x1p-21) + 1e-6;
}

/* qc_cuda_flash_attn against qc_ref_flash_attn (done flags equal, other rows
 * left poisoned, tokens of runs within fa_tol: tight against the reference fed
 * the binary16-rounded q, looser against the float q); a run cut 5 tokens later
 * (other tiles) bit-equal; then qc_cuda_paged_attn, which dispatches to it:
 * flash rows bit-equal, every row within the bound, and with QC_CUDA_FLASH=0
 * every row within the split-K tolerance. */
void test_flash_attn(int bt, int hd, int n_head, int n_head_kv, const struct fa_entry *ent, int n_ent)
{
	const int n_layer = 2, layer = 1, kv_dim = n_head_kv * hd, q_dim = n_head * hd, group = n_head / n_head_kv;
	const int min_run = 16, cut = 5;
	const float scale = 1.0f / sqrtf((float)hd), c = scale * 1.4426950408889634f;
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
		int j = (int)(rnd() % (uint32_t)(i + 1)), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	int used = 0;
	for (int e = 0; e < n_ent; e++)
		for (int b = 0; b < stride; b++)
			tables[e * stride + b] = b * bt < ent[e].start + ent[e].n ? perm[used++] : -1;
	/* pool NaN but the cached positions of this layer: a read past a context shows */
	const size_t pool_n = (size_t)n_blocks * n_layer * 2 * bt * kv_dim;
	uint16_t *pool = malloc(2 * pool_n);
	memset(pool, 0xff, 2 * pool_n);
	double vmax = 0;
	for (int e = 0; e < n_ent; e++)
		for (int j = 0; j < ent[e].start + ent[e].n; j++)
			for (int w = 0; w < 2; w++)
				for (int d = 0; d < kv_dim; d++) {
					const size_t b = (size_t)tables[e * stride + j / bt];
					const uint16_t h = qc_f32_to_fp16(frand(-2, 2));
					pool[(((b * n_layer + layer) * 2 + w) * bt + j % bt) * kv_dim + d] = h;
					vmax = w && fabs(qc_fp16_to_f32(h)) > vmax ? fabs(qc_fp16_to_f32(h)) : vmax;
				}
	int32_t *pos = malloc(sizeof(int32_t) * (size_t)T), *seq = malloc(sizeof(int32_t) * (size_t)T);
	T = 0;
	for (int e = 0; e < n_ent; e++)
		for (int k = 0; k < ent[e].n; k++) {
			pos[T] = ent[e].start + k;
			seq[T++] = e;
		}
	const size_t qn = (size_t)T * q_dim;
	float *q = malloc(sizeof(float) * qn), *q16 = malloc(sizeof(float) * qn);
	fill(q, qn, -2, 2);
	for (size_t i = 0; i < qn; i++) /* what the kernel feeds its tensor cores, scale undone */
		q16[i] = qc_fp16_to_f32(qc_f32_to_fp16(q[i] * c)) / c;
	double S = 0;
	for (int t = 0; t < T; t++)
		for (int h = 0; h < n_head; h++)
			for (int j = 0; j <= pos[t]; j++) {
				const size_t b = (size_t)tables[seq[t] * stride + j / bt];
				const uint16_t *k = pool + (((b * n_layer + layer) * 2) * bt + j % bt) * kv_dim + (h / group) * hd;
				double s = 0;
				for (int d = 0; d < hd; d++)
					s += fabs((double)q[(size_t)t * q_dim + (size_t)h * hd + d] * qc_fp16_to_f32(k[d]));
				S = s * scale > S ? s * scale : S;
			}
	float *want = malloc(sizeof(float) * qn), *want16 = malloc(sizeof(float) * qn);
	float *got = malloc(sizeof(float) * qn), *got2 = malloc(sizeof(float) * qn);
	int32_t *done = malloc(sizeof(int32_t) * (size_t)T), *gdone = malloc(sizeof(int32_t) * (size_t)T);
	qc_ref_paged_attn(q, want, pool, layer, n_layer, bt, n_head, n_head_kv, hd, pos, seq, tables, stride, T, scale);
	memset(want16, 0xff, sizeof(float) * qn);
	qc_ref_flash_attn(q16, want16, done, pool, layer, n_layer, bt, n_head, n_head_kv, hd, pos, seq, tables, stride,
			  T, max_len, scale, min_run);

	uint16_t *d_pool = up(pool, 2 * pool_n);
	int32_t *d_pos = up(pos, sizeof(int32_t) * (size_t)T), *d_seq = up(seq, sizeof(int32_t) * (size_t)T);
	int32_t *d_tab = up(tables, sizeof(int32_t) * (size_t)n_ent * (size_t)stride);
	float *d_q = up(q, sizeof(float) * qn), *d_o = poisoned(sizeof(float) * qn), *d_o2 = poisoned(sizeof(float) * qn);
	int32_t *d_done = poisoned(sizeof(int32_t) * (size_t)T);
	const uint64_t fwsb = qc_cuda_flash_attn_ws_bytes(T);
	const uint64_t wsb = qc_cuda_paged_attn_ws_bytes(T, n_head, hd, max_len) + fwsb + 4 * (uint64_t)T + 512;
	void *d_fws = up(NULL, fwsb), *d_ws = up(NULL, wsb);
	struct qc_err err = {0};
	struct qc_cuda_paged_attn_args pa = {
		.d_q = d_q, .d_out = d_o, .d_pool = d_pool, .layer = layer, .n_layer = n_layer, .block_tokens = bt,
		.n_head = n_head, .n_head_kv = n_head_kv, .hd = hd, .d_pos = d_pos, .d_tok_seq = d_seq,
		.d_tables = d_tab, .table_stride = stride, .n_tok = T, .max_ctx = max_len, .scale = scale,
	};
	const struct qc_cuda_flash_attn_args fa = {pa, min_run, d_done, d_fws, fwsb};
	CHECK(qc_cuda_flash_attn(&fa, 0, &err) == QC_OK, "flash_attn: %s", err.msg);
	down(got, d_o, sizeof(float) * qn);
	down(gdone, d_done, sizeof(int32_t) * (size_t)T);
	char what[160];
	snprintf(what, sizeof what, "flash_attn bt %d hd %d heads %d/%d, %d tokens, ctx %d", bt, hd, n_head, n_head_kv,
		 T, max_len);
	/* done flags exact; rows of other tokens untouched (still the poison bits) */
	int n_done = 0, first_flag = -1, first_touched = -1;
	for (int t = 0; t < T; t++) {
		n_done += done[t] == 1;
		if (gdone[t] != done[t] && first_flag < 0)
			first_flag = t;
		for (int i = 0; !done[t] && i < q_dim && first_touched < 0; i++)
			if (qc_f32_to_bits(got[(size_t)t * q_dim + i]) != 0xffffffffu)
				first_touched = t;
	}
	CHECK(first_flag < 0, "%s: done flag of token %d is %d, want %d", what, first_flag,
	      first_flag < 0 ? 0 : gdone[first_flag], first_flag < 0 ? 0 : done[first_flag]);
	CHECK(first_touched < 0, "%s: token %d is not in a run of %d but its output was written", what, first_touched,
	      min_run);
	CHECK(n_done > 0, "%s: no run of %d tokens in the plan", what, min_run);
	/* the taken rows, packed */
	float *gf = malloc(sizeof(float) * qn), *wf = malloc(sizeof(float) * qn), *w16f = malloc(sizeof(float) * qn);
	size_t nf = 0;
	for (int t = 0; t < T; t++)
		if (done[t]) {
			memcpy(gf + nf, got + (size_t)t * q_dim, sizeof(float) * q_dim);
			memcpy(wf + nf, want + (size_t)t * q_dim, sizeof(float) * q_dim);
			memcpy(w16f + nf, want16 + (size_t)t * q_dim, sizeof(float) * q_dim);
			nf += (size_t)q_dim;
		}
	const double tol16 = fa_tol(vmax, S, hd, max_len, 0), tolq = fa_tol(vmax, S, hd, max_len, 0x1p-11);
	char w2[200];
	snprintf(w2, sizeof w2, "%s (%d taken) vs binary16 q", what, n_done);
	CHECK(report(w2, compare(gf, w16f, nf, tol16), tol16), "%s", w2);
	snprintf(w2, sizeof w2, "%s vs float q", what);
	CHECK(report(w2, compare(gf, wf, nf, tolq), tolq), "%s", w2);

	/* the first run cut `cut` tokens later: other query tiles, the same rows bit for bit */
	if (ent[0].n - cut >= min_run) {
		struct qc_cuda_flash_attn_args fb = fa;
		fb.attn.d_q = d_q + (size_t)cut * q_dim;
		fb.attn.d_out = d_o2 + (size_t)cut * q_dim;
		fb.attn.d_pos = d_pos + cut;
		fb.attn.d_tok_seq = d_seq + cut;
		fb.attn.n_tok = ent[0].n - cut;
		CHECK(qc_cuda_flash_attn(&fb, 0, &err) == QC_OK, "flash_attn: %s", err.msg);
		down(got2, d_o2, sizeof(float) * qn);
		const size_t off = (size_t)cut * q_dim, n = (size_t)(ent[0].n - cut) * q_dim;
		CHECK(!memcmp(got2 + off, got + off, sizeof(float) * n),
		      "%s: a run cut %d tokens later gives other rows", what, cut);
	}

	/* through qc_cuda_paged_attn: its flash rows are these bit for bit, every row within bounds */
	pa.d_ws = d_ws;
	pa.ws_bytes = wsb;
	cudaMemset(d_o, 0xff, sizeof(float) * qn);
	CHECK(qc_cuda_paged_attn(&pa, 0, &err) == QC_OK, "paged_attn: %s", err.msg);
	down(got2, d_o, sizeof(float) * qn);
	int first_diff = -1;
	for (int t = 0; t < T && first_diff < 0; t++)
		if (done[t] && memcmp(got2 + (size_t)t * q_dim, got + (size_t)t * q_dim, sizeof(float) * q_dim))
			first_diff = t;
	CHECK(first_diff < 0, "%s: paged_attn's row of token %d is not flash_attn's", what, first_diff);
	snprintf(w2, sizeof w2, "paged_attn + flash bt %d hd %d heads %d/%d, %d tokens", bt, hd, n_head, n_head_kv, T);
	CHECK(report(w2, compare(got2, want, qn, tolq), tolq), "%s", w2);
	struct qc_cuda_paged_attn_args pa_off = pa;
	pa_off.flash = QC_CUDA_ATTN_FLASH_OFF;
	cudaMemset(d_o, 0xff, sizeof(float) * qn);
	CHECK(qc_cuda_paged_attn(&pa_off, 0, &err) == QC_OK, "paged_attn: %s", err.msg);
	down(got2, d_o, sizeof(float) * qn);
	snprintf(w2, sizeof w2, "paged_attn flash off bt %d hd %d heads %d/%d", bt, hd, n_head, n_head_kv);
	const double tol = 2e-5 * 2;
	CHECK(report(w2, compare(got2, want, qn, tol), tol), "%s", w2);

	free(tables);
	free(perm);
	free(pool);
	free(pos);
	free(seq);
	free(q);
	free(q16);
	free(want);
	free(want16);
	free(got);
	free(got2);
	free(done);
	free(gdone);
	free(gf);
	free(wf);
	free(w16f);
	cudaFree(d_pool);
	cudaFree(d_pos);
	cudaFree(d_seq);
	cudaFree(d_tab);
	cudaFree(d_q);
	cudaFree(d_o);
	cudaFree(d_o2);
	cudaFree(d_done);
	cudaFree(d_fws);
	cudaFree(d_ws);
}

/* Soft-capped scores and a sliding window (Gemma 2/3, Phi-3) through every path of
 * qc_cuda_paged_attn: one block per (token, head), split-K (merge kernel, and merged
 * in-kernel), and flash prefill, against qc_ref_attn_token (the CPU backend's
 * attention: cap on the scaled score, positions max(0, pos - W + 1)..pos). Three
 * sequences: a prefill run of 50 tokens after 30 cached (flash), a decode token far
 * into its sequence (many chunks of its window), a short run of 3 at the start.
 * Block-table columns wholly before a sequence's first window point at a NaN block,
 * as a released column would be unreadable: a read before a window shows as NaN.
 * The checkers must be able to fail: the reference without the cap (softcap > 0) and
 * without the window (one shorter than the context) must each be outside the split-K
 * tolerance and flash's tight bound. */
void test_attn_cap_window(int bt, int hd, int n_head, int n_head_kv, float softcap, int window)
{
	const int n_seq = 3, starts[3] = {30, quick ? 200 : 700, 5}, news[3] = {50, 1, 3};
	const int n_layer = 2, layer = 1, kv_dim = n_head_kv * hd, q_dim = n_head * hd;
	int max_len = 0, T = 0;
	for (int s = 0; s < n_seq; s++) {
		max_len = starts[s] + news[s] > max_len ? starts[s] + news[s] : max_len;
		T += news[s];
	}
	const int stride = (max_len + bt - 1) / bt + 1, nan_blk = 0; /* block 0: all NaN */
	const int n_blocks = 1 + n_seq * stride;
	int32_t *tables = malloc(sizeof(int32_t) * (size_t)n_seq * (size_t)stride);
	const size_t pool_n = (size_t)n_blocks * n_layer * 2 * bt * kv_dim;
	uint16_t *pool = malloc(2 * pool_n);
	memset(pool, 0xff, 2 * pool_n);
	int next = 1;
	for (int s = 0; s < n_seq; s++) {
		const int first = window > 0 && starts[s] >= window ? starts[s] - window + 1 : 0; /* first token's window */
		for (int b = 0; b < stride; b++) {
			int32_t id = -1;
			if (b * bt < starts[s] + news[s])
				id = (b + 1) * bt <= first ? nan_blk : next++;
			tables[s * stride + b] = id;
			if (id <= 0)
				continue;
			for (int w = 0; w < 2; w++)
				for (size_t i = 0; i < (size_t)bt * kv_dim; i++)
					pool[(((size_t)id * n_layer + layer) * 2 + w) * bt * kv_dim + i] = qc_f32_to_fp16(frand(-2, 2));
		}
	}
	int32_t *pos = malloc(sizeof(int32_t) * (size_t)T), *seq = malloc(sizeof(int32_t) * (size_t)T);
	for (int s = 0, t = 0; s < n_seq; s++)
		for (int k = 0; k < news[s]; k++, t++) {
			pos[t] = starts[s] + k;
			seq[t] = s;
		}
	float *q = malloc(sizeof(float) * (size_t)T * q_dim);
	fill(q, (size_t)T * q_dim, -2, 2);
	const float scale = 1.0f / sqrtf((float)hd);
	float *want = malloc(sizeof(float) * (size_t)T * q_dim), *alt = malloc(sizeof(float) * (size_t)T * q_dim);
	float *got = malloc(sizeof(float) * (size_t)T * q_dim), *fl = malloc(sizeof(float) * (size_t)T * q_dim);
	float *scratch = malloc(sizeof(float) * (size_t)(2 * hd + max_len));
	struct qc_ref_attn_args ra = {
		.pool = {.f16 = pool, .n_layer = n_layer, .bt = bt, .kv_dim = kv_dim}, .layer = layer, .n_head = n_head,
		.n_head_kv = n_head_kv, .hd = hd, .scale = scale, .round = QC_REF_ATTN_F32, .softcap = softcap,
		.window = window, .n_seq_tokens = 2,
	};
	for (int t = 0; t < T; t++)
		qc_ref_attn_token(&ra, q + (size_t)t * q_dim, want + (size_t)t * q_dim, pos[t],
				  tables + (size_t)seq[t] * stride, scratch);
	/* what flash feeds its tensor cores (q * scale * log2 e in binary16), scale undone:
	   its rows against this reference get the tight bound, and so do the negatives */
	const float c2 = scale * 1.4426950408889634f;
	float *q16 = malloc(sizeof(float) * (size_t)T * q_dim), *want16 = malloc(sizeof(float) * (size_t)T * q_dim);
	for (size_t i = 0; i < (size_t)T * q_dim; i++)
		q16[i] = qc_fp16_to_f32(qc_f32_to_fp16(q[i] * c2)) / c2;
	for (int t = 0; t < T; t++)
		qc_ref_attn_token(&ra, q16 + (size_t)t * q_dim, want16 + (size_t)t * q_dim, pos[t],
				  tables + (size_t)seq[t] * stride, scratch);
	const double tol = 2e-5 * 2;
	char what[160];
	snprintf(what, sizeof what, "cap %g window %d bt %d hd %d heads %d/%d", (double)softcap, window, bt, hd, n_head,
		 n_head_kv);
	/* S for fa_tol: the largest scale * sum |q k| over the keys each token sees */
	double S = 0;
	for (int t = 0; t < T; t++) {
		const int j0 = window > 0 && pos[t] >= window ? pos[t] - window + 1 : 0;
		for (int h = 0; h < n_head; h++)
			for (int j = j0; j <= pos[t]; j++) {
				const int64_t b = tables[seq[t] * stride + j / bt];
				const uint16_t *k = pool + (((size_t)b * n_layer + layer) * 2 * bt + (size_t)(j % bt)) * kv_dim +
						    (size_t)(h / (n_head / n_head_kv)) * hd;
				double s = 0;
				for (int d = 0; d < hd; d++)
					s += fabs((double)q[(size_t)t * q_dim + (size_t)h * hd + d] * qc_fp16_to_f32(k[d]));
				S = s * scale > S ? s * scale : S;
			}
	}
	const double ftol16 = fa_tol(2.0, S, hd, max_len, 0), ftol = fa_tol(2.0, S, hd, max_len, 0x1p-11);
	for (int neg = 0; neg < 2; neg++) { /* the checkers can fail (split-K's bound and flash's tight one) */
		struct qc_ref_attn_args rb = ra;
		if (neg == 0 && softcap > 0)
			rb.softcap = 0;
		else if (neg == 1 && window > 0 && window < max_len) /* a window that cuts something */
			rb.window = 0;
		else
			continue;
		for (int t = 0; t < T; t++)
			qc_ref_attn_token(&rb, q + (size_t)t * q_dim, alt + (size_t)t * q_dim, pos[t],
					  tables + (size_t)seq[t] * stride, scratch);
		/* without the window the reference may read the NaN block: that fails too */
		const struct cmp c = compare(alt, want, (size_t)T * q_dim, tol);
		CHECK(c.first_bad >= 0, "%s: the reference without the %s is within tolerance", what,
		      neg ? "window" : "cap");
		for (int t = 0; t < news[0]; t++) /* the flash rows (seq 0), from the rounded q */
			qc_ref_attn_token(&rb, q16 + (size_t)t * q_dim, alt + (size_t)t * q_dim, pos[t],
					  tables + (size_t)seq[t] * stride, scratch);
		const struct cmp c16 = compare(alt, want16, (size_t)news[0] * q_dim, ftol16);
		CHECK(c16.first_bad >= 0, "%s: the flash reference without the %s is within flash's tight bound %.3g",
		      what, neg ? "window" : "cap", ftol16);
	}

	uint16_t *d_pool = up(pool, 2 * pool_n);
	float *d_q = up(q, sizeof(float) * (size_t)T * q_dim), *d_o = poisoned(sizeof(float) * (size_t)T * q_dim);
	int32_t *d_pos = up(pos, sizeof(int32_t) * (size_t)T), *d_seq = up(seq, sizeof(int32_t) * (size_t)T);
	int32_t *d_tab = up(tables, sizeof(int32_t) * (size_t)n_seq * stride);
	const uint64_t wsb = qc_cuda_paged_attn_ws_bytes(T, n_head, hd, max_len) + qc_cuda_flash_attn_ws_bytes(T) +
			     ((uint64_t)T * 4 + 255) / 256 * 256;
	void *d_ws = NULL;
	CHECK(cudaMalloc(&d_ws, wsb) == cudaSuccess, "scratch of %llu bytes", (unsigned long long)wsb);
	const int64_t nfl = (int64_t)T * n_head_kv;
	uint32_t *d_fl = up(NULL, sizeof(uint32_t) * (size_t)nfl);
	cudaMemset(d_fl, 0, sizeof(uint32_t) * (size_t)nfl);
	struct qc_err err = {0};
	const struct qc_cuda_paged_attn_args base = {
		.d_q = d_q, .d_out = d_o, .d_pool = d_pool, .layer = layer, .n_layer = n_layer, .block_tokens = bt,
		.n_head = n_head, .n_head_kv = n_head_kv, .hd = hd, .d_pos = d_pos, .d_tok_seq = d_seq, .d_tables = d_tab,
		.table_stride = stride, .n_tok = T, .max_ctx = max_len, .scale = scale, .softcap = softcap,
		.window = window, .flash = QC_CUDA_ATTN_FLASH_OFF,
	};
	static const char *const path[3] = {"one block", "split-K", "split-K merged in-kernel"};
	for (int p = 0; p < 3; p++) {
		struct qc_cuda_paged_attn_args pa = base;
		if (p) {
			pa.d_ws = d_ws;
			pa.ws_bytes = wsb;
		}
		if (p == 2) {
			pa.d_flags = d_fl;
			pa.n_flags = nfl;
		}
		cudaMemset(d_o, 0xff, sizeof(float) * (size_t)T * q_dim);
		CHECK(qc_cuda_paged_attn(&pa, 0, &err) == QC_OK, "paged_attn %s: %s", path[p], err.msg);
		down(got, d_o, sizeof(float) * (size_t)T * q_dim);
		char w2[220];
		snprintf(w2, sizeof w2, "paged_attn %s, %s", path[p], what);
		CHECK(report(w2, compare(got, want, (size_t)T * q_dim, tol), tol), "%s", w2);
	}
	/* flash: the prefill run's rows (done), the others untouched; then through
	   paged_attn, whose flash rows are these bit for bit */
	if (qc_cuda_flash_attn_shape_ok(hd, n_head, n_head_kv)) {
		int32_t *d_done = poisoned(sizeof(int32_t) * (size_t)T), *done = malloc(sizeof(int32_t) * (size_t)T);
		cudaMemset(d_o, 0xff, sizeof(float) * (size_t)T * q_dim);
		const struct qc_cuda_flash_attn_args fa = {base, 16, d_done, d_ws, qc_cuda_flash_attn_ws_bytes(T)};
		CHECK(qc_cuda_flash_attn(&fa, 0, &err) == QC_OK, "flash_attn: %s", err.msg);
		down(fl, d_o, sizeof(float) * (size_t)T * q_dim);
		down(done, d_done, sizeof(int32_t) * (size_t)T);
		int n_done = 0;
		bool flags_ok = true, others_nan = true;
		for (int t = 0; t < T; t++) {
			flags_ok = flags_ok && done[t] == (seq[t] == 0);
			n_done += done[t] == 1;
			for (int i = 0; !done[t] && i < q_dim; i++)
				others_nan = others_nan && isnan(fl[(size_t)t * q_dim + i]);
		}
		CHECK(flags_ok && others_nan, "flash_attn %s: done flags %s, other rows %s", what, flags_ok ? "ok" : "wrong",
		      others_nan ? "untouched" : "written");
		char w2[220];
		/* seq 0's tokens come first: the flash rows are the first n_done */
		snprintf(w2, sizeof w2, "flash_attn %s, rounded q", what);
		CHECK(report(w2, compare(fl, want16, (size_t)n_done * q_dim, ftol16), ftol16), "%s", w2);
		snprintf(w2, sizeof w2, "flash_attn %s", what);
		CHECK(report(w2, compare(fl, want, (size_t)n_done * q_dim, ftol), ftol), "%s", w2);
		struct qc_cuda_paged_attn_args pa = base;
		pa.d_ws = d_ws;
		pa.ws_bytes = wsb;
		pa.flash = QC_CUDA_ATTN_FLASH_AUTO;
		cudaMemset(d_o, 0xff, sizeof(float) * (size_t)T * q_dim);
		CHECK(qc_cuda_paged_attn(&pa, 0, &err) == QC_OK, "paged_attn + flash: %s", err.msg);
		down(got, d_o, sizeof(float) * (size_t)T * q_dim);
		CHECK(!memcmp(got, fl, sizeof(float) * (size_t)n_done * q_dim), "%s: paged_attn's flash rows differ", what);
		snprintf(w2, sizeof w2, "paged_attn + flash, decode rows, %s", what);
		CHECK(report(w2, compare(got + (size_t)n_done * q_dim, want + (size_t)n_done * q_dim,
					 (size_t)(T - n_done) * q_dim, tol), tol), "%s", w2);
		cudaFree(d_done);
		free(done);
	}
	cudaFree(d_ws);
	cudaFree(d_fl);
	cudaFree(d_pool);
	cudaFree(d_q);
	cudaFree(d_o);
	cudaFree(d_pos);
	cudaFree(d_seq);
	cudaFree(d_tab);
	free(tables);
	free(pool);
	free(pos);
	free(seq);
	free(q);
	free(want);
	free(alt);
	free(got);
	free(fl);
	free(q16);
	free(want16);
	free(scratch);
}

/* RoPE and the K/V store inside the decode attention (fuse_rope): n_seq sequences of
 * one token each (what old_ctx promises), their earlier rows already in the pool,
 * the step's own rows poison. Against rope_kv (fp8: rope_kv_e4m3) + the split path on
 * the same inputs: the attention's bits, the pool's bytes, and q, k left unrotated.
 * mode: QC_ROPE_*; nr < hd: partial rotary; long_ctx: own rows past the first 64
 * positions of a chunk; fp8: the e4m3 pool (codes and exponents). */
void test_attn_rope_fused(int bt, int hd, int n_head, int n_head_kv, int nr, int mode, int n_seq, int long_ctx,
			  int fp8)
{
	const int n_layer = 2, layer = 1, kv_dim = n_head_kv * hd, q_dim = n_head * hd, T = n_seq;
	const int max_len = long_ctx ? (quick ? 700 : 3000) : 150, stride = (max_len + bt - 1) / bt;
	const int n_blocks = n_seq * stride + 2;
	int32_t *tables = malloc(sizeof(int32_t) * (size_t)n_seq * (size_t)stride);
	int32_t *pos = malloc(sizeof(int32_t) * (size_t)T), *seq = malloc(sizeof(int32_t) * (size_t)T);
	int32_t *slots = malloc(sizeof(int32_t) * (size_t)T);
	int *perm = malloc(sizeof(int) * (size_t)n_blocks);
	for (int i = 0; i < n_blocks; i++)
		perm[i] = i;
	for (int i = n_blocks - 1; i > 0; i--) {
		const int j = (int)(rnd() % (uint32_t)(i + 1)), x = perm[i];
		perm[i] = perm[j];
		perm[j] = x;
	}
	for (int e = 0; e < n_seq; e++) {
		for (int b = 0; b < stride; b++)
			tables[e * stride + b] = perm[e * stride + b];
		pos[e] = e == 0 ? max_len - 1 : (int32_t)(rnd() % (uint32_t)max_len); /* one at the longest */
		seq[e] = e;
		slots[e] = tables[e * stride + pos[e] / bt] * bt + pos[e] % bt;
	}
	/* the pool's bytes: binary16 values, or fp8 codes then one exponent per row and head */
	const size_t pool_n = (size_t)n_blocks * n_layer * 2 * bt * kv_dim, exp_n = pool_n / (size_t)hd;
	const size_t pool_b = fp8 ? pool_n + exp_n : 2 * pool_n;
	uint8_t *pool = malloc(pool_b), *pa_pool = malloc(pool_b), *pb_pool = malloc(pool_b);
	for (size_t i = 0; i < pool_n; i++) {
		if (fp8) {
			uint8_t c = (uint8_t)(rnd() % 256);
			pool[i] = (c & 0x7f) == 0x7f ? c ^ 1 : c; /* no NaN codes */
		} else {
			const uint16_t h = qc_f32_to_fp16(-1.0f + 2.0f * (float)(rnd() % 65536) / 65536.0f);
			memcpy(pool + 2 * i, &h, 2);
		}
	}
	for (size_t i = 0; fp8 && i < exp_n; i++)
		pool[pool_n + i] = (uint8_t)(int8_t)(-(int)(rnd() % 12));
	for (int t = 0; t < T; t++) /* the step's own rows: poison until stored */
		for (int w = 0; w < 2; w++) {
			const size_t b = (size_t)slots[t] / bt, o = (size_t)slots[t] % bt;
			const size_t r = ((b * n_layer + layer) * 2 + w) * bt + o;
			memset(pool + (fp8 ? 1 : 2) * r * kv_dim, 0xff, (fp8 ? 1 : 2) * (size_t)kv_dim);
			if (fp8)
				memset(pool + pool_n + r * n_head_kv, 0x55, (size_t)n_head_kv);
		}
	const size_t qn = (size_t)T * q_dim, kn = (size_t)T * kv_dim;
	float *q = malloc(sizeof(float) * qn), *k = malloc(sizeof(float) * kn), *v = malloc(sizeof(float) * kn);
	fill(q, qn, -2, 2);
	fill(k, kn, -2, 2);
	fill(v, kn, -2, 2);
	const float scale = 1.0f / sqrtf((float)hd);
	float *d_qa = up(q, sizeof(float) * qn), *d_ka = up(k, sizeof(float) * kn), *d_v = up(v, sizeof(float) * kn);
	float *d_qb = up(q, sizeof(float) * qn), *d_kb = up(k, sizeof(float) * kn);
	uint8_t *d_poola = up(pool, pool_b), *d_poolb = up(pool, pool_b);
	int32_t *d_pos = up(pos, sizeof(int32_t) * (size_t)T), *d_seq = up(seq, sizeof(int32_t) * (size_t)T);
	int32_t *d_slots = up(slots, sizeof(int32_t) * (size_t)T);
	int32_t *d_tab = up(tables, sizeof(int32_t) * (size_t)n_seq * (size_t)stride);
	float *d_oa = poisoned(sizeof(float) * qn), *d_ob = poisoned(sizeof(float) * qn);
	const uint64_t wsb = qc_cuda_paged_attn_ws_bytes(T, n_head, hd, max_len);
	void *d_ws = up(NULL, wsb);
	const int64_t nfl = (int64_t)T * n_head_kv;
	uint32_t *d_fl = up(NULL, sizeof(uint32_t) * (size_t)nfl);
	cudaMemset(d_fl, 0, sizeof(uint32_t) * (size_t)nfl);
	struct qc_err err = {0};
	const struct qc_cuda_rope_args ra = {.d_pos = d_pos, .n_tok = T, .hd = hd, .n_rot = nr, .mode = mode,
					     .theta_scale = powf(10000.0f, -2.0f / (float)nr), .freq_scale = 1.0f,
					     .mscale = 1.0f};
	struct qc_cuda_rope_kv_args rka = {.rope = ra, .d_q = d_qa, .n_head = n_head, .d_k = d_ka, .d_v = d_v,
					   .n_head_kv = n_head_kv, .d_slots = d_slots, .layer = layer,
					   .n_layer = n_layer, .block_tokens = bt};
	if (fp8) {
		rka.d_pool8 = d_poola;
		rka.d_pool8_exp = (int8_t *)(d_poola + pool_n);
	} else {
		rka.d_pool = (uint16_t *)d_poola;
	}
	CHECK((fp8 ? qc_cuda_rope_kv_e4m3(&rka, 0, &err) : qc_cuda_rope_kv(&rka, 0, &err)) == QC_OK, "rope_kv: %s",
	      err.msg);
	const struct qc_cuda_paged_attn_args base = {
		.d_q = d_qa, .d_out = d_oa, .d_pool = fp8 ? NULL : (const uint16_t *)d_poola,
		.d_pool8 = fp8 ? d_poola : NULL, .d_pool8_exp = fp8 ? (const int8_t *)(d_poola + pool_n) : NULL,
		.layer = layer, .n_layer = n_layer, .block_tokens = bt,
		.n_head = n_head, .n_head_kv = n_head_kv, .hd = hd, .d_pos = d_pos, .d_tok_seq = d_seq,
		.d_tables = d_tab, .table_stride = stride, .n_tok = T, .max_ctx = max_len, .scale = scale,
		.d_ws = d_ws, .ws_bytes = wsb, .old_ctx = 1,
	};
	CHECK(qc_cuda_paged_attn(&base, 0, &err) == QC_OK, "paged_attn: %s", err.msg);
	float *want = malloc(sizeof(float) * qn), *got = malloc(sizeof(float) * qn);
	float *gq = malloc(sizeof(float) * qn), *gk = malloc(sizeof(float) * kn);
	down(want, d_oa, sizeof(float) * qn);
	down(pa_pool, d_poola, pool_b);
	char what[200];
	for (int merged = 0; merged < 2; merged++) {
		struct qc_cuda_paged_attn_args fa = base;
		fa.d_q = d_qb;
		fa.d_out = d_ob;
		fa.d_pool = fp8 ? NULL : (const uint16_t *)d_poolb;
		fa.d_pool8 = fp8 ? d_poolb : NULL;
		fa.d_pool8_exp = fp8 ? (const int8_t *)(d_poolb + pool_n) : NULL;
		fa.fuse_rope = 1;
		fa.rope_kv = rka;
		fa.rope_kv.d_q = d_qb;
		fa.rope_kv.d_k = d_kb;
		fa.rope_kv.d_pool = fp8 ? NULL : (uint16_t *)d_poolb;
		fa.rope_kv.d_pool8 = fp8 ? d_poolb : NULL;
		fa.rope_kv.d_pool8_exp = fp8 ? (int8_t *)(d_poolb + pool_n) : NULL;
		fa.d_flags = merged ? d_fl : NULL;
		fa.n_flags = merged ? nfl : 0;
		cudaMemset(d_ob, 0xff, sizeof(float) * qn);
		cudaMemcpy(d_poolb, pool, pool_b, cudaMemcpyHostToDevice);
		CHECK(qc_cuda_paged_attn(&fa, 0, &err) == QC_OK, "paged_attn with RoPE: %s", err.msg);
		down(got, d_ob, sizeof(float) * qn);
		down(pb_pool, d_poolb, pool_b);
		down(gq, d_qb, sizeof(float) * qn);
		down(gk, d_kb, sizeof(float) * kn);
		snprintf(what, sizeof what, "paged_attn%s, RoPE %s n_rot %d inside%s, bt %d hd %d heads %d/%d, %d "
			 "sequences, ctx %d", fp8 ? " fp8" : "", mode == QC_ROPE_NEOX ? "neox" : "norm", nr,
			 merged ? ", merged in-kernel" : "", bt, hd, n_head, n_head_kv, T, max_len);
		int first = -1;
		for (size_t i = 0; i < qn && first < 0; i++)
			if (qc_f32_to_bits(got[i]) != qc_f32_to_bits(want[i]))
				first = (int)i;
		CHECK(first < 0, "%s: output %d is %g, rope_kv + attention gives %g", what, first,
		      first < 0 ? 0.0 : (double)got[first], first < 0 ? 0.0 : (double)want[first]);
		CHECK(!memcmp(pb_pool, pa_pool, pool_b), "%s: the pool differs from rope_kv's", what);
		CHECK(!memcmp(gq, q, sizeof(float) * qn) && !memcmp(gk, k, sizeof(float) * kn),
		      "%s: q or k was changed", what);
		printf("  %s: same bits as rope_kv + split\n", what);
	}
	cudaFree(d_qa);
	cudaFree(d_ka);
	cudaFree(d_v);
	cudaFree(d_qb);
	cudaFree(d_kb);
	cudaFree(d_poola);
	cudaFree(d_poolb);
	cudaFree(d_pos);
	cudaFree(d_seq);
	cudaFree(d_slots);
	cudaFree(d_tab);
	cudaFree(d_oa);
	cudaFree(d_ob);
	cudaFree(d_ws);
	cudaFree(d_fl);
	free(tables);
	free(pos);
	free(seq);
	free(slots);
	free(perm);
	free(pool);
	free(pa_pool);
	free(pb_pool);
	free(q);
	free(k);
	free(v);
	free(want);
	free(got);
	free(gq);
	free(gk);
}
