/* test_kernels.c — every CUDA op in runtime/cuda/kernels/ against its same-named C
 * reference in runtime/ops/, on fresh random inputs of several shapes (odd ones
 * included), device outputs poisoned with NaN before every launch.
 * Rules: decoders (embed, dequant_f16), kv_store and moe_combine must match bit
 * for bit; matmuls must satisfy FA2's rule against an fp64 truth:
 * err(gpu) <= 2 * err(plain same-precision C reference) + n_in * 2^-24 * sum|w x|
 * (the last term: the textbook bound of any float summation order); the other
 * ops a relative max error. Prints max abs error, NMSE and the first bad index.
 * Every type with a device decoder is covered by looping over QC_TYPE_COUNT.
 * The comparator gets a deliberately wrong output that must fail.
 * QC_GPU_TEST_QUICK=1 shrinks the shapes (for compute-sanitizer runs).
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "kernels/act_gather.h"
#include "kernels/add.h"
#include "kernels/argmax.h"
#include "kernels/dequant_f16.h"
#include "kernels/embed.h"
#include "kernels/flash_attn.h"
#include "kernels/gemm_f16.h"
#include "kernels/gemv_q.h"
#include "kernels/kv_store.h"
#include "kernels/matmul_dispatch.h"
#include "kernels/moe_combine.h"
#include "kernels/moe_gemm.h"
#include "kernels/moe_route.h"
#include "kernels/paged_attn.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/silu_mul.h"
#include "kernels/topk.h"
#include "layout_nvfp4.h"
#include "dequant_hfq.h"
#include "fp16.h"
#include "ops.h"

#include <cublas_v2.h>

static uint64_t rng = 0x243f6a8885a308d3u;
static bool quick;

static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static float frand(float lo, float hi)
{
	return lo + (hi - lo) * (float)(rnd() & 0xffffff) / (float)0x1000000;
}

static void fill(float *x, size_t n, float lo, float hi)
{
	for (size_t i = 0; i < n; i++)
		x[i] = frand(lo, hi);
}

/* device copy of n bytes of h */
static void *up(const void *h, size_t n)
{
	void *d = NULL;
	if (cudaMalloc(&d, n ? n : 16) != cudaSuccess)
		return NULL;
	if (h)
		cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);
	return d;
}

/* n bytes of device memory filled with 0xff: NaN as float, NaN as fp16 */
static void *poisoned(size_t n)
{
	void *d = up(NULL, n);
	if (d)
		cudaMemset(d, 0xff, n);
	return d;
}

static void down(void *h, const void *d, size_t n)
{
	cudaDeviceSynchronize();
	cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost);
}

struct cmp {
	double max_abs, nmse, ref_max;
	long first_bad;            /* first index over tol, -1 when none */
	bool nan;
};

/* got vs want: max |diff|, NMSE, first index where |diff| > tol (NaN counts). */
static struct cmp compare(const float *got, const float *want, size_t n, double tol)
{
	struct cmp c = {0, 0, 0, -1, false};
	double se = 0, sw = 0;
	for (size_t i = 0; i < n; i++) {
		const double d = fabs((double)got[i] - (double)want[i]);
		if (!(d == d) || !isfinite(got[i])) {
			c.nan = true;
			if (c.first_bad < 0)
				c.first_bad = (long)i;
			continue;
		}
		c.max_abs = d > c.max_abs ? d : c.max_abs;
		c.ref_max = fabs(want[i]) > c.ref_max ? fabs(want[i]) : c.ref_max;
		se += d * d;
		sw += (double)want[i] * want[i];
		if (d > tol && c.first_bad < 0)
			c.first_bad = (long)i;
	}
	c.nmse = sw > 0 ? se / sw : se;
	return c;
}

static bool report(const char *what, struct cmp c, double tol)
{
	const bool ok = c.first_bad < 0 && !c.nan;
	printf("  %-44s max_abs %.3g (tol %.3g) nmse %.3g%s", what, c.max_abs, tol, c.nmse, ok ? "\n" : "");
	if (!ok)
		printf("  FIRST BAD at %ld%s\n", c.first_bad, c.nan ? " (NaN/inf)" : "");
	return ok;
}

/* true when the block at blk decodes to finite values of at most 1e4 (weights
 * are never near the fp16 range: huge values overflow the fp16 GEMM feed) */
static bool block_in_range(const struct qc_type_traits *tt, const uint8_t *blk)
{
	float tmp[256];
	tt->dequant_row(blk, tmp, tt->block_elems);
	for (int64_t i = 0; i < tt->block_elems; i++)
		if (!isfinite(tmp[i]) || fabsf(tmp[i]) > 1e4f)
			return false;
	return true;
}

/* Random blocks of type t: random bytes; a block out of range has bit 6 of
 * every byte cleared (fp16 and f32 scales then stay below 2), and one still out
 * of range (an MXFP4 E8M0 exponent keeps its top bit) is drawn again. */
static void rand_blocks(enum qc_type t, uint8_t *dst, int64_t n_elems)
{
	const struct qc_type_traits *tt = &qc_types[t];
	const int64_t nb = n_elems / tt->block_elems;
	for (int64_t b = 0; b < nb; b++) {
		uint8_t *blk = dst + b * tt->block_bytes;
		for (int tries = 0; tries < 100; tries++) {
			for (int64_t i = 0; i < tt->block_bytes; i++)
				blk[i] = (uint8_t)rnd();
			if (tt->family == QC_FAMILY_FLOAT) { /* plain floats: keep them in [-2, 2] */
				float v = frand(-2.0f, 2.0f);
				tt->quant_row(&v, blk, 1);
				break;
			}
			if (block_in_range(tt, blk))
				break;
			for (int64_t i = 0; i < tt->block_bytes; i++)
				blk[i] &= 0xbf;
			if (block_in_range(tt, blk))
				break;
		}
	}
}

static bool has_decoder(enum qc_type t)
{
	return qc_types[t].block_elems && qc_cuda_gemv_q_supports(t);
}

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

static void test_matmul_type(enum qc_type t, cublasHandle_t blas)
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
static void test_moe_gemm(void)
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

static void test_decoders(enum qc_type t)
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
	qc_ref_embed(w, t, rb, n, ids, n_tok, want);
	uint8_t *d_w = up(w, rb * n_vocab);
	int32_t *d_ids = up(ids, sizeof ids);
	float *d_out = poisoned(sizeof(float) * (size_t)(n * n_tok));
	struct qc_err err = {0};
	const struct qc_cuda_embed_args ea = {d_w, t, rb, n, d_ids, n_tok, d_out};
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

/* ---- small ops ----------------------------------------------------------- */

static void test_rms_norm(void)
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

static void test_rope(void)
{
	/* heads, hd, n_rot, mode, extras (0 plain, 1 YaRN, 2 llama3 divisors, 3 both) */
	const int cfg[][5] = {{3, 64, 64, 0, 0}, {5, 100, 64, 2, 0}, {2, 128, 128, 2, 0}, {4, 48, 32, 0, 0},
			      {4, 64, 64, 0, 1}, {3, 128, 128, 2, 1}, {4, 64, 64, 0, 2}, {2, 128, 96, 2, 3}};
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
		fill(ff, 64, 1, 8);
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
			 xt & 1 ? " yarn" : "", xt & 2 ? " factors" : "");
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

static void test_elementwise(void)
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

/* act_gather vs the reference: a shared permutation with strided rows, and one
 * permutation per expert with rows (token, slot) reading token r / x_div. Exact. */
static void test_act_gather(void)
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
static void test_argmax(int32_t n)
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
static void test_topk(int32_t n)
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

/* K/V store + paged attention over shuffled block tables: 3 sequences, one
 * prefilling several tokens, two decoding; GQA. */
static void test_attention(int bt, int hd, int n_head, int n_head_kv, int long_ctx)
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
	for (int split = 0; split < 2; split++) {
		if (split)
			cudaMemset(d_o, 0xff, sizeof(float) * (size_t)T * q_dim);
		const struct qc_cuda_paged_attn_args pa = {
			.d_q = d_q, .d_out = d_o, .d_pool = d_pool, .layer = layer, .n_layer = n_layer, .block_tokens = bt,
			.n_head = n_head, .n_head_kv = n_head_kv, .hd = hd, .d_pos = d_pos, .d_tok_seq = d_seq,
			.d_tables = d_tab, .table_stride = stride, .n_tok = T, .max_ctx = max_len, .scale = scale,
			.d_ws = split ? d_ws : NULL, .ws_bytes = split ? wsb : 0, .flash = QC_CUDA_ATTN_FLASH_OFF,
		};
		CHECK(qc_cuda_paged_attn(&pa, 0, &err) == QC_OK, "paged_attn: %s", err.msg);
		down(got, d_o, sizeof(float) * (size_t)T * q_dim);
		char what[128];
		snprintf(what, sizeof what, "paged_attn%s bt %d hd %d heads %d/%d, %d tokens, ctx %d",
			 split ? " split-K" : "", bt, hd, n_head, n_head_kv, T, max_len);
		const double tol = 2e-5 * 2;
		CHECK(report(what, compare(got, want, (size_t)T * q_dim, tol), tol), "%s", what);
	}
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

/* Flash prefill attention: one step's entries, each n tokens of its own
 * sequence at positions start..start+n-1 (positions before start cached). */
struct fa_entry {
	int start, n;
};

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
static double fa_tol(double vmax, double S, int hd, int n, double q_u)
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
static void test_flash_attn(int bt, int hd, int n_head, int n_head_kv, const struct fa_entry *ent, int n_ent)
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

static void test_moe(int n_expert, int k, int norm)
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
static void test_nvfp4_swz(cublasHandle_t blas)
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

int main(void)
{
	int n_dev = 0;
	quick = getenv("QC_GPU_TEST_QUICK") && *getenv("QC_GPU_TEST_QUICK") == '1';
	if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1) {
		CHECK(0, "no CUDA device: test_kernels needs one (make test-gpu runs on the GPU machine)");
		return check_report("test_kernels");
	}
	/* the comparator must catch a wrong value and a NaN */
	{
		float a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3.01f, 4}, c[4] = {1, NAN, 3, 4};
		CHECK(compare(b, a, 4, 1e-3).first_bad == 2, "comparator misses a wrong element");
		CHECK(compare(c, a, 4, 1e9).first_bad == 1, "comparator misses a NaN");
	}
	cublasHandle_t blas;
	CHECK(cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
	printf("decoders (embed, dequant_f16) vs qc_dequant_row_*:\n");
	for (int t = 0; t < QC_TYPE_COUNT; t++)
		if (has_decoder((enum qc_type)t))
			test_decoders((enum qc_type)t);
	printf("matmuls vs fp64 truth (tol = 2 x plain reference + float bound):\n");
	for (int t = 0; t < QC_TYPE_COUNT; t++)
		if (has_decoder((enum qc_type)t))
			test_matmul_type((enum qc_type)t, blas);
	printf("nvfp4_swz (CUTLASS block-scale tiles) vs fp64 truth (same rule):\n");
	test_nvfp4_swz(blas);
	printf("grouped MoE GEMM vs fp64 truth (same rule, plain reference with fp16 operands):\n");
	test_moe_gemm();
	printf("other ops:\n");
	test_rms_norm();
	test_rope();
	test_elementwise();
	test_act_gather();
	test_argmax(128256);
	test_argmax(1001);
	test_argmax(7);
	test_topk(128256);
	test_topk(1001);
	test_topk(130);
	test_attention(16, 64, 8, 2, 0);
	test_attention(7, 100, 6, 6, 0);  /* hd 100: the split path refuses it, the one-block path runs twice */
	test_attention(32, 128, 4, 1, 0);
	test_attention(16, 128, 8, 2, 1); /* long context: many chunks */
	test_attention(16, 80, 28, 4, 1); /* 7 query heads per K/V head, hd 80 */
	{
		/* runs of 16, 33, 200, 700 from position 0 and later, decode tokens, a run
		 * of 15 (below the flash minimum) right before another sequence whose
		 * positions continue it (no run across sequences) */
		const int L = quick ? 120 : 700, M = quick ? 64 : 200;
		const struct fa_entry e1[] = {{0, 15}, {15, 17}, {0, 16}, {40, 33}, {99, 1}, {7, 1}};
		const struct fa_entry e2[] = {{0, M}, {300, 1}, {150, L}, {30, 15}, {0, 1}};
		const struct fa_entry e3[] = {{0, 33}, {500, M}, {5, 16}, {64, 1}};
		const struct fa_entry e4[] = {{0, L}, {90, 33}, {20, 1}};
		const struct fa_entry e5[] = {{3, M}, {0, 17}, {31, 1}};
		const struct fa_entry e6[] = {{0, 100}, {60, 40}, {10, 1}};
		const struct fa_entry e7[] = {{10, 50}, {0, 1}, {0, 16}};
		test_flash_attn(16, 64, 2, 2, e1, 6);    /* GQA 1 */
		test_flash_attn(7, 128, 8, 2, e2, 5);    /* GQA 4, 7-token blocks */
		test_flash_attn(16, 128, 16, 2, e3, 4);  /* GQA 8 */
		test_flash_attn(7, 64, 8, 1, e4, 3);     /* GQA 8, one K/V head */
		test_flash_attn(16, 80, 28, 4, e5, 3);   /* GQA 7 (9-token tiles), hd 80 */
		test_flash_attn(7, 256, 4, 2, e6, 3);    /* hd 256: Q re-read from shared memory */
		test_flash_attn(16, 32, 16, 1, e7, 3);   /* GQA 16 (4-token tiles), hd 32 */
		test_flash_attn(16, 128, 4, 4, e4, 3);   /* GQA 1, hd 128 */
	}
	test_moe(8, 2, 1);
	test_moe(60, 4, 0);
	cublasDestroy(blas);
	return check_report("test_kernels");
}
