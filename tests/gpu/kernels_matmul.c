/* kernels_matmul.c — test_kernels, quantized weights: the decoders (embed, dequant_f16)
 * bit for bit against qc_dequant_row_*, and every matmul (gemv_q and the fp16 GEMM per
 * type with a device decoder, nvfp4_swz's CUTLASS block-scale tiles, the grouped MoE
 * GEMM) against an fp64 truth under FA2's rule: err(gpu) <= 2 * err(plain
 * same-precision C reference) + n_in * 2^-24 * sum|w x|.
 */
#include "kernels_harness.h"
#include "kernels/dequant_f16.h"
#include "kernels/embed.h"
#include "kernels/gemm_f16.h"
#include "kernels/gemv_q.h"
#include "kernels/matmul_dispatch.h"
#include "kernels/moe_gemm.h"
#include "layout_nvfp4.h"
#include "dequant_hfq.h"
#include "fp16.h"

/* ---- matmuls ------------------------------------------------------------- */

/* max over outputs of sum |w_i x_i| (the scale of the float summation bound) */
static double abs_mag(const uint8_t *w, enum qc_type t, int64_t n_in, int64_t n_out, uint64_t rb,
		      uint64_t ms, const float *x, int64_t ldx, int x_div, const int32_t *ex, int64_t n_rows)
{
	float *row = malloc(sizeof(float) * (size_t)n_in);
	double mag = 0;
	for (int64_t r = 0; r < n_rows; r++)
		for (int64_t o = 0; o < n_out; o++) {
			qc_types[t].dequant_row(w + (uint64_t)(ex ? ex[r] : 0) * ms + (uint64_t)o * rb, row, n_in);
			double s = 0;
			for (int64_t i = 0; i < n_in; i++)
				s += fabs((double)row[i] * x[(r / x_div) * ldx + i]);
			mag = s > mag ? s : mag;
		}
	free(row);
	return mag;
}

void test_matmul_type(enum qc_type t, cublasHandle_t blas)
{
	const struct qc_type_traits *tt = &qc_types[t];
	const int64_t be = tt->block_elems < 32 ? 32 : tt->block_elems;
	const bool odd = tt->block_elems == 1; /* float rows of any length: odd sizes */
	/* the last: rows longer than one staged activation tile (8192 elements) */
	const int64_t ins[] = {odd ? 8 : be, odd ? 172 : 3 * be, quick ? 2 * be : (be == 32 ? 4096 + 32 : 2304),
			       odd ? 8192 + 45 : (be == 32 ? 8192 + 96 : 8448)};
	const int64_t outs[] = {1, 7, 33, quick ? 20 : 130};
	const int64_t rows_list[] = {1, 2, 3, 8, 9, quick ? 12 : 40}; /* every G of gemv_q: 1, 2, 4, groups of 4 */
	for (size_t ii = 0; ii < (quick ? 3u : 4u); ii++)
		for (size_t oi = 0; oi < (ii == 3 ? 2u : 4u); oi++) {
			const int64_t n_in = ins[ii], n_out = outs[oi], n_mat = 3;
			const uint64_t rb = (uint64_t)(n_in / tt->block_elems) * (uint64_t)tt->block_bytes;
			const uint64_t ms = rb * (uint64_t)n_out;
			uint8_t *w = malloc(ms * (uint64_t)n_mat);
			rand_blocks(t, w, n_in * n_out * n_mat);
			/* the matrices start skew bytes into their allocation (0, 4, 8, 12: rows
			 * of every 16-byte alignment) and end QC_CUDA_MM_PAD bytes before its end,
			 * the least the matmul contract allows (matmul_dispatch.h) */
			const size_t skew = 4 * ((ii + oi) % 4);
			uint8_t *d_alloc = up(NULL, skew + ms * (uint64_t)n_mat + QC_CUDA_MM_PAD), *d_w = d_alloc + skew;
			cudaMemcpy(d_w, w, ms * (uint64_t)n_mat, cudaMemcpyHostToDevice);
			for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ri++) {
				const int64_t n_rows = rows_list[ri];
				for (int mode = 0; mode < 3; mode++) { /* 0 dense gemv, 1 experts gemv, 2 gemm */
					if (mode == 2 && n_rows < 9)
						continue;
					const int x_div = mode == 1 ? 2 : 1;
					const int64_t ldx = n_in + 5, ldy = n_out + 3, xr = (n_rows + x_div - 1) / x_div;
					float *x = malloc(sizeof(float) * (size_t)(xr * ldx));
					fill(x, (size_t)(xr * ldx), -1, 1);
					int32_t ex[64];
					for (int64_t r = 0; r < n_rows; r++)
						ex[r] = (int32_t)(rnd() % n_mat);
					const int32_t *exp = mode == 1 ? ex : NULL;
					const size_t ny = (size_t)(n_rows * ldy);
					float *truth = calloc(ny, sizeof(float)), *plain = calloc(ny, sizeof(float));
					float *got = calloc(ny, sizeof(float));
					qc_ref_gemv_q(w, t, n_in, n_out, rb, ms, x, ldx, x_div, exp, n_rows, truth, ldy, 1);
					if (mode == 2)
						qc_ref_gemm_f16(w, t, n_in, n_out, rb, x, ldx, n_rows, plain, ldy);
					else
						qc_ref_gemv_q(w, t, n_in, n_out, rb, ms, x, ldx, x_div, exp, n_rows, plain, ldy, 0);
					float *d_x = up(x, sizeof(float) * (size_t)(xr * ldx));
					int32_t *d_ex = up(ex, sizeof ex);
					float *d_y = poisoned(sizeof(float) * ny);
					const uint64_t wsb = qc_cuda_gemm_f16_ws_bytes(n_in, n_out, n_rows);
					void *d_ws = poisoned(wsb);
					const struct qc_cuda_mm_args a = {
						.d_w = d_w, .type = t, .layout = QC_LAYOUT_GGML, .n_in = n_in, .n_out = n_out,
						.row_bytes = rb, .mat_stride = ms, .d_x = d_x, .ldx = ldx, .x_div = x_div,
						.d_expert = mode == 1 ? d_ex : NULL, .n_rows = n_rows, .d_y = d_y, .ldy = ldy,
						.d_ws = d_ws, .ws_bytes = wsb, .blas = blas,
					};
					struct qc_err err = {0};
					const int rc = mode == 2 ? qc_cuda_gemm_f16(&a, 0, &err) : qc_cuda_gemv_q(&a, 0, &err);
					CHECK(rc == QC_OK, "%s: %s", tt->name, err.msg);
					down(got, d_y, sizeof(float) * ny);
					/* only the written columns: the ld padding is not output */
					for (int64_t r = 0; r < n_rows; r++)
						for (int64_t o = n_out; o < ldy; o++)
							got[r * ldy + o] = truth[r * ldy + o] = plain[r * ldy + o] = 0.0f;
					const double mag = abs_mag(w, t, n_in, n_out, rb, ms, x, ldx, x_div, exp, n_rows);
					const struct cmp cp = compare(plain, truth, ny, INFINITY);
					const double tol = 2 * cp.max_abs + (double)n_in * 0x1p-24 * mag;
					char what[96];
					snprintf(what, sizeof what, "%s %s %lldx%lld rows %lld", tt->name,
						 mode == 0 ? "gemv" : mode == 1 ? "gemv experts" : "gemm_f16",
						 (long long)n_out, (long long)n_in, (long long)n_rows);
					const struct cmp cg = compare(got, truth, ny, tol);
					const bool ok = report(what, cg, tol);
					CHECK(ok, "%s", what);
					free(x);
					free(truth);
					free(plain);
					free(got);
					cudaFree(d_x);
					cudaFree(d_ex);
					cudaFree(d_y);
					cudaFree(d_ws);
				}
			}
			free(w);
			cudaFree(d_alloc);
		}
}

/* ---- grouped MoE GEMM ------------------------------------------------------ */

/* qc_cuda_moe_gemm vs the fp64 truth (qc_ref_gemv_q) under the matmul rule, the
 * plain same-precision reference being qc_ref_moe_gemm (fp16 operands, double
 * sums); x_div = k (rows (token, slot)). dist 0: experts uniform; 1: even
 * experts only (the odd ones get no rows); 2: most rows on the last expert
 * (several tiles of one expert); 3: as 0 with row 0's expert out of range (its
 * outputs must be NaN, the other rows still right). graph: the same call
 * captured in a CUDA graph must give the same bits (no host sync inside; a
 * stable sort, so run to run equal). */
static void test_moe_gemm_case(enum qc_type t, int64_t n_in, int64_t n_out, int64_t n_rows, int n_mat, int k,
			       int dist, bool graph)
{
	const struct qc_type_traits *tt = &qc_types[t];
	const uint64_t rb = (uint64_t)(n_in / tt->block_elems) * (uint64_t)tt->block_bytes, ms = rb * (uint64_t)n_out;
	/* an odd ldx takes the kernel's scalar loads, an even one its float2 loads */
	const int64_t ldx = n_in + (n_rows & 1 ? 5 : 6), ldy = n_out + 3, xr = (n_rows + k - 1) / k;
	const size_t nx = (size_t)(xr * ldx), ny = (size_t)(n_rows * ldy);
	uint8_t *w = malloc(ms * (uint64_t)n_mat);
	float *x = malloc(sizeof(float) * nx);
	int32_t *ex = malloc(sizeof(int32_t) * (size_t)n_rows), *ex_ok = malloc(sizeof(int32_t) * (size_t)n_rows);
	rand_blocks(t, w, n_in * n_out * n_mat);
	fill(x, nx, -1, 1);
	for (int64_t r = 0; r < n_rows; r++) {
		const int32_t u = (int32_t)(rnd() % (uint32_t)n_mat);
		ex[r] = dist == 1 ? u & ~1 : dist == 2 && rnd() % 5 ? n_mat - 1 : u;
		ex_ok[r] = ex[r];
	}
	if (dist == 3) {
		ex[0] = n_mat; /* out of range: NaN outputs */
		ex_ok[0] = 0;
	}
	float *truth = calloc(ny, sizeof(float)), *plain = calloc(ny, sizeof(float));
	float *got = calloc(ny, sizeof(float)), *got2 = calloc(ny, sizeof(float));
	qc_ref_gemv_q(w, t, n_in, n_out, rb, ms, x, ldx, k, ex_ok, n_rows, truth, ldy, 1);
	qc_ref_moe_gemm(w, t, n_in, n_out, rb, ms, n_mat, x, ldx, k, ex, n_rows, plain, ldy);
	uint8_t *d_w = up(w, ms * (uint64_t)n_mat);
	float *d_x = up(x, sizeof(float) * nx);
	int32_t *d_ex = up(ex, sizeof(int32_t) * (size_t)n_rows);
	float *d_y = poisoned(sizeof(float) * ny);
	const uint64_t wsb = qc_cuda_moe_gemm_ws_bytes(n_rows, n_mat);
	void *d_ws = poisoned(wsb); /* the sort must write everything it reads */
	struct qc_cuda_moe_gemm_args a = {
		.mm = {.d_w = d_w, .type = t, .layout = QC_LAYOUT_GGML, .n_in = n_in, .n_out = n_out,
		       .row_bytes = rb, .mat_stride = ms, .d_x = d_x, .ldx = ldx, .x_div = k, .d_expert = d_ex,
		       .n_rows = n_rows, .d_y = d_y, .ldy = ldy, .d_ws = d_ws, .ws_bytes = wsb},
		.n_experts = n_mat,
	};
	struct qc_err err = {0};
	char what[96];
	snprintf(what, sizeof what, "%s moe_gemm %lldx%lld rows %lld of %d top-%d%s", tt->name, (long long)n_out,
		 (long long)n_in, (long long)n_rows, n_mat, k, dist == 1 ? " (empty experts)" : dist == 2 ? " (skewed)" : "");
	CHECK(qc_cuda_moe_gemm(&a, 0, &err) == QC_OK, "%s: %s", what, err.msg);
	down(got, d_y, sizeof(float) * ny);
	if (graph) {
		cudaStream_t st = NULL;
		cudaGraph_t g = NULL;
		cudaGraphExec_t ge = NULL;
		float *d_y2 = poisoned(sizeof(float) * ny);
		a.mm.d_y = d_y2;
		cudaMemset(d_ws, 0xff, wsb);
		bool ok = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess &&
			  cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
		const int rc = ok ? qc_cuda_moe_gemm(&a, st, &err) : QC_ECUDA;
		ok = ok && cudaStreamEndCapture(st, &g) == cudaSuccess && rc == QC_OK &&
		     cudaGraphInstantiate(&ge, g, 0) == cudaSuccess && cudaGraphLaunch(ge, st) == cudaSuccess &&
		     cudaStreamSynchronize(st) == cudaSuccess;
		CHECK(ok, "%s: graph capture / replay failed (%s)", what, rc ? err.msg : "CUDA");
		down(got2, d_y2, sizeof(float) * ny);
		CHECK(!memcmp(got, got2, sizeof(float) * ny), "%s: graph replay differs from the eager run", what);
		if (ge)
			cudaGraphExecDestroy(ge);
		if (g)
			cudaGraphDestroy(g);
		if (st)
			cudaStreamDestroy(st);
		cudaFree(d_y2);
	}
	if (dist == 3) {
		bool nan_row = true;
		for (int64_t o = 0; o < n_out; o++)
			nan_row &= isnan(got[o]) && isnan(plain[o]);
		CHECK(nan_row, "%s: the row of an out-of-range expert is not NaN", what);
		for (int64_t o = 0; o < ldy; o++)
			got[o] = plain[o] = truth[o] = 0.0f;
	}
	/* only the written columns: the ld padding is not output */
	for (int64_t r = 0; r < n_rows; r++)
		for (int64_t o = n_out; o < ldy; o++)
			got[r * ldy + o] = truth[r * ldy + o] = plain[r * ldy + o] = 0.0f;
	const double mag = abs_mag(w, t, n_in, n_out, rb, ms, x, ldx, k, ex_ok, n_rows);
	const struct cmp cp = compare(plain, truth, ny, INFINITY);
	const double tol = 2 * cp.max_abs + (double)n_in * 0x1p-24 * mag;
	CHECK(report(what, compare(got, truth, ny, tol), tol), "%s", what);
	free(w);
	free(x);
	free(ex);
	free(ex_ok);
	free(truth);
	free(plain);
	free(got);
	free(got2);
	cudaFree(d_w);
	cudaFree(d_x);
	cudaFree(d_ex);
	cudaFree(d_y);
	cudaFree(d_ws);
}

/* Every type with a decoder on the small shapes; one type per family on all
 * (n_rows 1..300, n_out 8..172, 4..64 experts, top-1..8); then the refusals. */
void test_moe_gemm(void)
{
	static const struct {
		int64_t n_rows, n_out;
		int n_mat, k, dist;
	} cs[] = {
		{1, 8, 4, 1, 0},      /* one row: three experts without rows */
		{7, 100, 8, 1, 1},
		{37, 172, 16, 4, 3},  /* + a row with an expert out of range; run in a graph too */
		{300, 172, 64, 8, 1},
		{300, 100, 4, 2, 2},  /* one expert with ~4 tiles */
		{300, 8, 60, 8, 0},
	};
	static const enum qc_type full[] = {QC_TYPE_F32, QC_TYPE_F16, QC_TYPE_Q4_0, QC_TYPE_Q8_0, QC_TYPE_Q4_K,
					    QC_TYPE_Q6_K};
	for (int t = 0; t < QC_TYPE_COUNT; t++) {
		if (!has_decoder((enum qc_type)t))
			continue;
		bool all = false;
		for (size_t i = 0; i < sizeof full / sizeof full[0]; i++)
			all |= t == (int)full[i];
		const int64_t be = qc_types[t].block_elems < 32 ? 32 : qc_types[t].block_elems;
		for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
			if ((!all && ci >= 3) || (quick && cs[ci].n_rows > 40))
				continue;
			/* a K tail (96: one and a half BK steps), or a long row */
			const int64_t n_in = ci % 2 ? (be == 32 ? 96 : be) : quick ? 2 * be : be == 32 ? 1056 : 2304;
			test_moe_gemm_case((enum qc_type)t, n_in, cs[ci].n_out, cs[ci].n_rows, cs[ci].n_mat, cs[ci].k,
					   cs[ci].dist, ci == 2);
		}
	}
	/* refusals: n_in not a multiple of 32, no experts, a short scratch */
	struct qc_err err = {0};
	const uint64_t wsb = qc_cuda_moe_gemm_ws_bytes(4, 2);
	void *d_ws = poisoned(wsb);
	float *d_y = poisoned(sizeof(float) * 4 * 40);
	const float *d_x = (const float *)d_y;
	struct qc_cuda_moe_gemm_args a = {
		.mm = {.d_w = (const uint8_t *)d_ws, .type = QC_TYPE_F16, .layout = QC_LAYOUT_GGML, .n_in = 40,
		       .n_out = 4, .row_bytes = 80, .mat_stride = 320, .d_x = d_x, .ldx = 40, .x_div = 1,
		       .n_rows = 4, .d_y = d_y, .ldy = 4, .d_ws = d_ws, .ws_bytes = wsb},
		.n_experts = 2,
	};
	CHECK(qc_cuda_moe_gemm(&a, 0, &err) == QC_EUNSUPPORTED, "moe_gemm: n_in 40 accepted");
	a.mm.n_in = 32;
	a.n_experts = 0;
	CHECK(qc_cuda_moe_gemm(&a, 0, &err) == QC_EUNSUPPORTED, "moe_gemm: 0 experts accepted");
	a.n_experts = 2;
	a.mm.ws_bytes = wsb - 1;
	CHECK(qc_cuda_moe_gemm(&a, 0, &err) == QC_EINVAL, "moe_gemm: a short scratch accepted");
	cudaFree(d_ws);
	cudaFree(d_y);
}

/* ---- decoders: embed and dequant_f16, bit-exact ---------------------------- */

void test_decoders(enum qc_type t)
{
	const struct qc_type_traits *tt = &qc_types[t];
	const int64_t be = tt->block_elems < 32 ? 32 : tt->block_elems;
	const int64_t n = tt->block_elems == 1 ? 172 : 5 * be, n_vocab = 37, n_tok = 11;
	const uint64_t rb = (uint64_t)(n / tt->block_elems) * (uint64_t)tt->block_bytes;
	uint8_t *w = malloc(rb * n_vocab);
	rand_blocks(t, w, n * n_vocab);
	int32_t ids[11];
	for (int i = 0; i < n_tok; i++)
		ids[i] = (int32_t)(rnd() % n_vocab);
	float *want = malloc(sizeof(float) * (size_t)(n * n_tok)), *got = malloc(sizeof(float) * (size_t)(n * n_tok));
	qc_ref_embed(w, t, rb, n, ids, n_tok, 0, n_vocab, want);
	uint8_t *d_w = up(w, rb * n_vocab);
	int32_t *d_ids = up(ids, sizeof ids);
	float *d_out = poisoned(sizeof(float) * (size_t)(n * n_tok));
	struct qc_err err = {0};
	const struct qc_cuda_embed_args ea = {d_w, t, rb, n, d_ids, n_tok, d_out, 0, n_vocab};
	CHECK(qc_cuda_embed(&ea, 0, &err) == QC_OK, "embed %s: %s", tt->name, err.msg);
	down(got, d_out, sizeof(float) * (size_t)(n * n_tok));
	CHECK(!memcmp(got, want, sizeof(float) * (size_t)(n * n_tok)), "embed %s not bit-exact with qc_dequant_row_%s",
	      tt->name, tt->name);

	uint16_t *h16 = malloc(2 * (size_t)(n * n_vocab)), *g16 = malloc(2 * (size_t)(n * n_vocab));
	qc_ref_dequant_f16(w, t, rb, n_vocab, n, h16);
	uint16_t *d16 = poisoned(2 * (size_t)(n * n_vocab));
	const struct qc_cuda_dequant_f16_args da = {d_w, t, rb, n_vocab, n, d16};
	CHECK(qc_cuda_dequant_f16(&da, 0, &err) == QC_OK, "dequant_f16 %s: %s", tt->name, err.msg);
	down(g16, d16, 2 * (size_t)(n * n_vocab));
	CHECK(!memcmp(g16, h16, 2 * (size_t)(n * n_vocab)), "dequant_f16 %s not bit-exact", tt->name);
	printf("  %-44s bit-exact\n", tt->name);
	free(w);
	free(want);
	free(got);
	free(h16);
	free(g16);
	cudaFree(d_w);
	cudaFree(d_ids);
	cudaFree(d_out);
	cudaFree(d16);
}

/* ---- nvfp4_swz (the sm100 layout; its kernels are built for every arch) ---- */

/* n rows of nvfp4 blocks as hfq_ct.c writes them: d = fl(e4m3(s)/G), one G per
 * matrix of rows_per_mat rows; random codes */
static void nvfp4_rows(uint8_t *dst, int64_t n_in, int64_t rows_per_mat, int n_mat)
{
	for (int e = 0; e < n_mat; e++) {
		const float G = frand(16.0f, 1024.0f);
		for (int64_t r = 0; r < rows_per_mat; r++)
			for (int64_t b = 0; b < n_in / 32; b++) {
				struct qc_block_NVFP4 blk;
				for (int j = 0; j < 2; j++)
					qc_hfq_put_f32(blk.d + 2 * j, qc_e4m3_to_f32((uint8_t)(rnd() % 127)) / G);
				for (int j = 0; j < 16; j++)
					blk.qs[j] = (uint8_t)rnd();
				memcpy(dst + (((uint64_t)e * (uint64_t)rows_per_mat + (uint64_t)r) * (uint64_t)(n_in / 32) +
					      (uint64_t)b) * sizeof blk, &blk, sizeof blk);
			}
	}
}

/* qc_cuda_nvfp4_swz_gemv (dense and expert rows) and _gemm against the fp64 truth
 * of runtime/ops/nvfp4_swz.c under the matmul rule (plain reference: F32 for the
 * GEMV, F16 operands for the cuBLAS GEMM); outputs poisoned, the ld padding must
 * stay NaN; each GEMV row alone must equal its batched result bit for bit. */
void test_nvfp4_swz(cublasHandle_t blas)
{
	const int64_t ins[] = {32, 96, quick ? 256 : 4096 + 64};
	const int64_t outs[] = {1, 7, 130, quick ? 20 : 300};
	const int64_t rows_list[] = {1, 3, 8, 9, quick ? 12 : 40};
	const int n_mat = 3;
	for (size_t ii = 0; ii < 3; ii++)
		for (size_t oi = 0; oi < 4; oi++) {
			const int64_t n_in = ins[ii], n_out = outs[oi], ne1[4] = {n_in, n_out, 1, 1};
			struct qc_nvfp4_swz_geom g;
			QC_ASSERT(qc_nvfp4_swz_geom(QC_TYPE_NVFP4, ne1, &g) == QC_OK);
			const uint64_t rb = (uint64_t)(n_in / 32) * sizeof(struct qc_block_NVFP4), gms = rb * (uint64_t)n_out;
			uint8_t *src = malloc(gms * n_mat), *pk = malloc(g.slice_bytes * n_mat);
			nvfp4_rows(src, n_in, n_out, n_mat);
			struct qc_err err = {0};
			for (int e = 0; e < n_mat; e++)
				CHECK(qc_layout_pack_slice(QC_LAYOUT_NVFP4_SWZ, QC_TYPE_NVFP4, ne1, src + e * gms,
							   pk + e * g.slice_bytes, &err) == QC_OK, "pack: %s", err.msg);
			uint8_t *d_w = up(pk, g.slice_bytes * n_mat);
			for (size_t ri = 0; ri < 5; ri++)
				for (int mode = 0; mode < 3; mode++) { /* 0 dense gemv, 1 experts gemv, 2 gemm */
					const int64_t n_rows = rows_list[ri];
					if (mode == 2 && n_rows < 9)
						continue;
					const int x_div = mode == 1 ? 2 : 1;
					const int64_t ldx = n_in + 5, ldy = n_out + 3, xr = (n_rows + x_div - 1) / x_div;
					const size_t ny = (size_t)(n_rows * ldy);
					float *x = malloc(sizeof(float) * (size_t)(xr * ldx));
					fill(x, (size_t)(xr * ldx), -1, 1);
					int32_t ex[64];
					for (int64_t r = 0; r < n_rows; r++)
						ex[r] = (int32_t)(rnd() % n_mat);
					const int32_t *exp = mode == 1 ? ex : NULL;
					float *truth = calloc(ny, sizeof(float)), *plain = calloc(ny, sizeof(float));
					float *got = calloc(ny, sizeof(float)), *alone = calloc(ny, sizeof(float));
					qc_ref_nvfp4_swz(pk, n_in, n_out, g.slice_bytes, x, ldx, x_div, exp, n_rows, truth, ldy,
							 QC_REF_F64);
					qc_ref_nvfp4_swz(pk, n_in, n_out, g.slice_bytes, x, ldx, x_div, exp, n_rows, plain, ldy,
							 mode == 2 ? QC_REF_F16 : QC_REF_F32);
					float *d_x = up(x, sizeof(float) * (size_t)(xr * ldx));
					int32_t *d_ex = up(ex, sizeof ex);
					float *d_y = poisoned(sizeof(float) * ny);
					const struct qc_cuda_mm_tuning tune = QC_CUDA_MM_TUNING_DEFAULT;
					const uint64_t wsb = qc_cuda_nvfp4_swz_ws(n_in, n_out, n_rows, &tune);
					void *d_ws = poisoned(wsb);
					struct qc_cuda_mm_args a = {
						.d_w = d_w, .type = QC_TYPE_NVFP4, .layout = QC_LAYOUT_NVFP4_SWZ, .n_in = n_in,
						.n_out = n_out, .row_bytes = g.row_bytes, .mat_stride = g.slice_bytes, .d_x = d_x,
						.ldx = ldx, .x_div = x_div, .d_expert = exp ? d_ex : NULL, .n_rows = n_rows,
						.d_y = d_y, .ldy = ldy, .d_ws = d_ws, .ws_bytes = wsb, .blas = blas,
					};
					int rc = mode == 2 ? qc_cuda_nvfp4_swz_gemm(&a, 0, &err) : qc_cuda_nvfp4_swz_gemv(&a, 0, &err);
					CHECK(rc == QC_OK, "nvfp4_swz: %s", err.msg);
					down(got, d_y, sizeof(float) * ny);
					bool pad_nan = true; /* the ld padding is not output: still poisoned */
					for (int64_t r = 0; r < n_rows; r++)
						for (int64_t o = n_out; o < ldy; o++) {
							pad_nan = pad_nan && isnan(got[r * ldy + o]);
							got[r * ldy + o] = truth[r * ldy + o] = plain[r * ldy + o] = 0.0f;
						}
					CHECK(pad_nan, "nvfp4_swz mode %d wrote past n_out", mode);
					const double mag = abs_mag(src, QC_TYPE_NVFP4, n_in, n_out, rb, gms, x, ldx, x_div, exp, n_rows);
					const double tol = 2 * compare(plain, truth, ny, INFINITY).max_abs + (double)n_in * 0x1p-24 * mag;
					char what[96];
					snprintf(what, sizeof what, "nvfp4_swz %s %lldx%lld rows %lld",
						 mode == 0 ? "gemv" : mode == 1 ? "gemv experts" : "gemm", (long long)n_out,
						 (long long)n_in, (long long)n_rows);
					CHECK(report(what, compare(got, truth, ny, tol), tol), "%s", what);
					for (int64_t r = 0; mode < 2 && n_rows > 1 && r < n_rows; r++) { /* batch-invariant */
						struct qc_cuda_mm_args one = a;
						one.d_x = d_x + (r / x_div) * ldx;
						one.x_div = 1;
						one.d_expert = exp ? d_ex + r : NULL;
						one.n_rows = 1;
						one.d_y = d_y + r * ldy;
						rc = qc_cuda_nvfp4_swz_gemv(&one, 0, &err);
						CHECK(rc == QC_OK, "nvfp4_swz alone: %s", err.msg);
					}
					if (mode < 2 && n_rows > 1) {
						down(alone, d_y, sizeof(float) * ny);
						for (int64_t r = 0; r < n_rows; r++)
							for (int64_t o = n_out; o < ldy; o++)
								alone[r * ldy + o] = 0.0f;
						CHECK(memcmp(alone, got, sizeof(float) * ny) == 0, "%s: a row alone differs from batched",
						      what);
					}
					free(x);
					free(truth);
					free(plain);
					free(got);
					free(alone);
					cudaFree(d_x);
					cudaFree(d_ex);
					cudaFree(d_y);
					cudaFree(d_ws);
				}
			/* the GEMM refuses experts (the table's contract) */
			struct qc_cuda_mm_args bad = {.d_w = d_w, .type = QC_TYPE_NVFP4, .layout = QC_LAYOUT_NVFP4_SWZ,
						      .n_in = n_in, .n_out = n_out, .mat_stride = g.slice_bytes,
						      .x_div = 1, .d_expert = (const int32_t *)d_w, .n_rows = 1, .blas = blas};
			CHECK(qc_cuda_nvfp4_swz_gemm(&bad, 0, &err) == QC_EUNSUPPORTED, "nvfp4_swz_gemm took experts");
			free(src);
			free(pk);
			cudaFree(d_w);
		}
}
