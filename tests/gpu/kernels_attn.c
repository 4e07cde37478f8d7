/* kernels_attn.c — test_kernels, attention: kv_store bit for bit, paged attention over
 * shuffled block tables (prefill and decode sequences, GQA, long contexts split in
 * chunks) and flash prefill attention (runs of several sequences per step, GQA 1-16,
 * head dims 32-256) against the C reference, with fa_tol's first-order bound.
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
	for (int split = 0; split < 3; split++) {
		if (split)
			cudaMemset(d_o, 0xff, sizeof(float) * (size_t)T * q_dim);
		const struct qc_cuda_paged_attn_args pa = {
			.d_q = d_q, .d_out = d_o, .d_pool = d_pool, .layer = layer, .n_layer = n_layer, .block_tokens = bt,
			.n_head = n_head, .n_head_kv = n_head_kv, .hd = hd, .d_pos = d_pos, .d_tok_seq = d_seq,
			.d_tables = d_tab, .table_stride = stride, .n_tok = T, .max_ctx = max_len, .scale = scale,
			.d_ws = split ? d_ws : NULL, .ws_bytes = split ? wsb : 0, .flash = QC_CUDA_ATTN_FLASH_OFF,
			.d_flags = split == 2 ? d_fl : NULL, .n_flags = split == 2 ? nfl : 0,
		};
		CHECK(qc_cuda_paged_attn(&pa, 0, &err) == QC_OK, "paged_attn: %s", err.msg);
		down(got, d_o, sizeof(float) * (size_t)T * q_dim);
		char what[128];
		snprintf(what, sizeof what, "paged_attn%s bt %d hd %d heads %d/%d, %d tokens, ctx %d",
			 split == 2 ? " split-K, merged in-kernel" : split ? " split-K" : "", bt, hd, n_head, n_head_kv,
			 T, max_len);
		const double tol = 2e-5 * 2;
		CHECK(report(what, compare(got, want, (size_t)T * q_dim, tol), tol), "%s", what);
		if (split == 1)
			memcpy(got1, got, sizeof(float) * (size_t)T * q_dim);
		if (split == 2) {
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
