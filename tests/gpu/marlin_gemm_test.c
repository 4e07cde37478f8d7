/* marlin_gemm_test.c — runtime/cuda/kernels/marlin_gemm.cu against its C reference, then timings.
 *
 * Check (STYLE §14): fresh random q4_0/q8_0 weights (through the reference
 * quantizer; q4_1/q4_K/hq4 (i4z) and q5_K (i8z) as random blocks with weight-like
 * scales) and fp16 activations per case, packed by quant/layout_marlin.c;
 * odd token counts, odd group counts, auto and forced K splits, f32 and f16 out;
 * outputs poisoned with NaN before the launch. Truth = the C reference in fp64;
 * the kernel passes if its relative error is at most 2x that of a plain fp16
 * GEMM (the reference with fp16-rounded weights and float sums) + 1e-6, with no
 * NaN left. Timing: Llama-3-8B shapes, batch 1/16/64/512, against the byte
 * roofline from a device-to-device copy measured in the same run (and cuBLAS
 * fp16 on dequantized weights where built with it). Run by tools/gpu_marlin.sh.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h> /* the table entry's 128+-row path; QC_WITH_CUBLAS adds the fp16 timing comparison */
#include <cuda_runtime_api.h>

#include "layout_marlin.h"
#include "marlin_gemm.cuh"
#include "matmul_dispatch.h"
#include "pdl.h"
#include "add.h"
#include "silu_mul.h"
#include "rms_norm.h"
#include "fp16.h"

static int n_pass, n_fail;
/* check_case's expectation of the kernel qc_cuda_marlin_gemm picks (the wgmma
 * pass sets it and every case's rows to the wgmma kernel) */
static bool want_wgmma;

#define CU(x) \
	do { \
		cudaError_t e_ = (x); \
		if (e_ != cudaSuccess) { \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(2); \
		} \
	} while (0)

static uint64_t rng = 0x243f6a8885a308d3ull;
static double urand(void) /* [-1, 1) */
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

/* Encoding tested for a layout: i4z runs q4_K (the GGUF headline), q4_1 and hq4 in
 * turn; i8z q5_K, or hq8 while i8z_hq8 is set. */
static int z_turn, i8z_hq8;
static enum qc_type type_of(enum qc_layout l)
{
	static const enum qc_type z[3] = { QC_TYPE_Q4_K, QC_TYPE_Q4_1, QC_TYPE_HQ4 };
	if (l == QC_LAYOUT_MARLIN_I8Z)
		return i8z_hq8 ? QC_TYPE_HQ8 : QC_TYPE_Q5_K;
	if (l == QC_LAYOUT_MARLIN_I6)
		return QC_TYPE_Q6_K;
	return l == QC_LAYOUT_MARLIN_I4 ? QC_TYPE_Q4_0 : l == QC_LAYOUT_MARLIN_I8 ? QC_TYPE_Q8_0 : z[z_turn % 3];
}

/* Whether layout l's encoding (type_of) has whole blocks in k (q4_K, q5_K: 256). */
static int fits_k(enum qc_layout l, int64_t k)
{
	uint64_t row;
	return qc_marlin_row_bytes(l, type_of(l), k, &row) == QC_OK;
}

/* Random blocks of an encoding without a reference quantizer: random codes and
 * 6-bit scales, scales/offsets in a weight-like range (q4_K, q5_K: d, dmin). */
static void random_blocks(enum qc_type t, uint8_t *g, uint64_t bytes)
{
	const int64_t bb = qc_type_get(t)->block_bytes;
	for (uint64_t i = 0; i < bytes; i++)
		g[i] = (uint8_t)(urand() * 128.0 + 128.0);
	for (uint64_t b = 0; b < bytes / (uint64_t)bb; b++) {
		uint8_t *p = g + b * (uint64_t)bb;
		if (t == QC_TYPE_HQ4 || t == QC_TYPE_HQ8) {
			float d = (float)(0.002 * (1.5 + urand()));
			int16_t z = (int16_t)(t == QC_TYPE_HQ4 ? 8 + 7 * urand() : 118 + 20 * urand());
			memcpy(p, &d, 4);
			memcpy(p + 4, &z, 2);
		} else {
			uint16_t d = qc_f32_to_fp16((float)(0.0005 * (1.5 + urand())));
			uint16_t m = qc_f32_to_fp16((float)(t == QC_TYPE_Q4_1 ? -0.04 * (1.5 + urand()) : 0.0007 * (1.5 + urand())));
			memcpy(p, &d, 2);
			memcpy(p + 2, &m, 2);
		}
	}
}

/* Random packed weights (n, k) of layout l; returns host bytes, *bytes set. */
static uint8_t *make_weights(enum qc_layout l, int64_t n, int64_t k, uint64_t *bytes)
{
	enum qc_type t = type_of(l);
	const int64_t ne[4] = { k, n, 1, 1 };
	QC_ASSERT(qc_layout_bytes(l, t, ne, bytes) == QC_OK);
	uint64_t gb;
	QC_ASSERT(qc_layout_bytes(QC_LAYOUT_GGML, t, ne, &gb) == QC_OK);
	float *f = malloc((size_t)(n * k) * sizeof(float));
	uint8_t *g = malloc(gb), *p = malloc(*bytes);
	for (int64_t i = 0; i < n * k; i++) /* a few outliers per row, as real weights have */
		f[i] = (float)(urand() * (i % 97 == 0 ? 4.0 : 0.05));
	if (qc_type_get(t)->quant_row)
		qc_type_get(t)->quant_row(f, g, n * k);
	else
		random_blocks(t, g, gb);
	struct qc_err err = { 0 };
	QC_ASSERT(qc_layout_pack_slice(l, t, ne, g, p, &err) == QC_OK);
	free(f);
	free(g);
	return p;
}

/* E slices of make_weights, one after the other (*slice_bytes apart): stacked experts. */
static uint8_t *make_stack(enum qc_layout l, int64_t n, int64_t k, int64_t E, uint64_t *slice_bytes)
{
	uint8_t *w = NULL;
	for (int64_t e = 0; e < E; e++) {
		uint8_t *we = make_weights(l, n, k, slice_bytes);
		if (!w)
			w = malloc(*slice_bytes * (uint64_t)E);
		memcpy(w + (uint64_t)e * *slice_bytes, we, *slice_bytes);
		free(we);
	}
	return w;
}

static uint16_t *make_act(int64_t m, int64_t k)
{
	uint16_t *a = malloc((size_t)(m * k) * 2);
	for (int64_t i = 0; i < m * k; i++)
		a[i] = qc_f32_to_fp16((float)urand());
	return a;
}

/* The GEMM on device arguments dr, to completion; *wg: whether it ran the wgmma kernels. */
static int run_gemm(const struct qc_marlin_gemm_args *dr, bool *wg, struct qc_err *err)
{
	int rc = qc_cuda_marlin_gemm_plan_wgmma(dr, wg, err);
	if (rc == QC_OK)
		rc = qc_cuda_marlin_gemm(dr, 0, err);
	if (rc == QC_OK)
		rc = qc_cuda_check(cudaDeviceSynchronize(), "sync", err);
	return rc;
}

static void check_case(enum qc_layout l, int64_t m, int64_t n, int64_t k, enum qc_marlin_c_type ct,
		       enum qc_marlin_split sp, int split_k)
{
	uint64_t wb;
	uint8_t *w = make_weights(l, n, k, &wb);
	uint16_t *a = make_act(m, k);
	double *truth = malloc((size_t)(m * n) * sizeof(double)), *base = malloc((size_t)(m * n) * sizeof(double));
	struct qc_marlin_gemm_args ar = { .layout = l, .type = type_of(l), .m = m, .n = n, .k = k, .a = a, .w = w,
					  .ldc = n, .c_type = ct, .split = sp, .split_k = split_k };
	struct qc_err err = { 0 };
	QC_ASSERT(qc_marlin_gemm_ref(&ar, QC_MARLIN_PREC_F64, truth, &err) == QC_OK);
	QC_ASSERT(qc_marlin_gemm_ref(&ar, QC_MARLIN_PREC_F16, base, &err) == QC_OK);
	if (ct == QC_MARLIN_C_F16)
		for (int64_t i = 0; i < m * n; i++)
			base[i] = qc_fp16_to_f32(qc_f32_to_fp16((float)base[i]));

	size_t cb = (size_t)(m * n) * (ct == QC_MARLIN_C_F16 ? 2 : 4);
	void *d_a, *d_w, *d_c, *d_ws = NULL;
	size_t wsb;
	QC_ASSERT(qc_cuda_marlin_gemm_workspace(&ar, &wsb, &err) == QC_OK);
	CU(cudaMalloc(&d_a, (size_t)(m * k) * 2));
	CU(cudaMalloc(&d_w, wb));
	CU(cudaMalloc(&d_c, cb));
	if (wsb)
		CU(cudaMalloc(&d_ws, wsb));
	CU(cudaMemcpy(d_a, a, (size_t)(m * k) * 2, cudaMemcpyHostToDevice));
	CU(cudaMemcpy(d_w, w, wb, cudaMemcpyHostToDevice));
	CU(cudaMemset(d_c, 0xff, cb)); /* NaN in f32 and f16 */
	if (d_ws)
		CU(cudaMemset(d_ws, 0xff, wsb));
	struct qc_marlin_gemm_args dr = ar;
	dr.a = d_a;
	dr.w = d_w;
	dr.c = d_c;
	dr.workspace = d_ws;
	dr.workspace_bytes = wsb;
	bool wg = false;
	int rc = run_gemm(&dr, &wg, &err);
	void *hc = malloc(cb);
	CU(cudaMemcpy(hc, d_c, cb, cudaMemcpyDeviceToHost));
	double e_gpu = 0, e_base = 0, norm = 0, max_abs = 0;
	int64_t n_nan = 0, first_bad = -1;
	for (int64_t i = 0; i < m * n; i++) {
		double g = ct == QC_MARLIN_C_F16 ? qc_fp16_to_f32(((uint16_t *)hc)[i]) : ((float *)hc)[i];
		if (isnan(g)) {
			n_nan++;
			if (first_bad < 0)
				first_bad = i;
			continue;
		}
		double d = g - truth[i];
		e_gpu += d * d;
		e_base += (base[i] - truth[i]) * (base[i] - truth[i]);
		norm += truth[i] * truth[i];
		if (fabs(d) > max_abs)
			max_abs = fabs(d);
		if (first_bad < 0 && fabs(d) > 1e-2 * (1 + fabs(truth[i])))
			first_bad = i;
	}
	double rel_gpu = sqrt(e_gpu / norm), rel_base = sqrt(e_base / norm);
	/* the wgmma pass must run the wgmma kernel: a check of the other kernel
	 * would pass without testing it */
	int ok = rc == QC_OK && n_nan == 0 && rel_gpu <= 2 * rel_base + 1e-6 && wg == want_wgmma;
	printf("%s %-10s %-5s %-5s m=%-4lld n=%-5lld k=%-5lld c=%s split=%-5s ws=%-8zu rel_err %.3e (fp16 plain %.3e) max_abs %.3e nan %lld first_bad %lld%s%s\n",
	       ok ? "PASS" : "FAIL", qc_layout_name(l), qc_type_get(type_of(l))->name, wg ? "wgmma" : "mma", (long long)m, (long long)n,
	       (long long)k, ct == QC_MARLIN_C_F16 ? "f16" : "f32", sp == QC_MARLIN_SPLIT_AUTO ? "auto" : "fixed", wsb, rel_gpu,
	       rel_base, max_abs, (long long)n_nan, (long long)first_bad, rc ? " err: " : "", rc ? err.msg : "");
	ok ? n_pass++ : n_fail++;
	cudaFree(d_a);
	cudaFree(d_w);
	cudaFree(d_c);
	cudaFree(d_ws);
	free(hc);
	free(w);
	free(a);
	free(truth);
	free(base);
}

/* fp32 outputs y (rows x ldy, NaN-poisoned with 0xff bytes before the call) against
 * the reference truth and the plain fp16 GEMM base (rows x n): columns from n on must
 * keep the poison's bits; a row with nan_row[r] (NULL: none) must hold a NaN other
 * than the poison (the kernel's own); every other value is counted as a NaN or into
 * the relative errors. */
struct rows_cmp {
	double rel_gpu, rel_base;
	int64_t n_nan, n_touched, nan_rows_bad;
};
static struct rows_cmp compare_rows(const float *y, int64_t rows, int64_t n, int64_t ldy, const double *truth,
				    const double *base, const bool *nan_row)
{
	struct rows_cmp o = { 0 };
	double eg = 0, eb = 0, nrm = 0;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < ldy; c++) {
			const float g = y[r * ldy + c];
			uint32_t bits;
			memcpy(&bits, &g, 4);
			if (c >= n) {
				o.n_touched += bits != 0xffffffffu;
				continue;
			}
			if (nan_row && nan_row[r]) {
				o.nan_rows_bad += !isnan(g) || bits == 0xffffffffu;
				continue;
			}
			if (isnan(g)) {
				o.n_nan++;
				continue;
			}
			const double t = truth[r * n + c];
			eg += (g - t) * (g - t);
			eb += (base[r * n + c] - t) * (base[r * n + c] - t);
			nrm += t * t;
		}
	o.rel_gpu = sqrt(eg / nrm);
	o.rel_base = sqrt(eb / nrm);
	return o;
}

/* MoE rows: each row picks one of E stacked slices; c has ldc > n and the
 * columns past n must stay untouched (still NaN bits). */
static void check_experts(enum qc_layout l, int64_t m, int64_t n, int64_t k, int64_t E)
{
	uint64_t sb;
	uint8_t *w = make_stack(l, n, k, E, &sb);
	uint16_t *a = make_act(m, k);
	int32_t *ex = malloc((size_t)m * 4);
	for (int64_t r = 0; r < m; r++)
		ex[r] = (int32_t)((r * 7 + 2) % E);
	int64_t ldc = n + 6;
	double *truth = malloc((size_t)(m * n) * sizeof(double)), *base = malloc((size_t)(m * n) * sizeof(double));
	struct qc_marlin_gemm_args ar = { .layout = l, .type = type_of(l), .m = m, .n = n, .k = k, .a = a, .w = w,
					  .ldc = ldc, .expert = ex, .mat_stride = sb };
	struct qc_err err = { 0 };
	QC_ASSERT(qc_marlin_gemm_ref(&ar, QC_MARLIN_PREC_F64, truth, &err) == QC_OK);
	QC_ASSERT(qc_marlin_gemm_ref(&ar, QC_MARLIN_PREC_F16, base, &err) == QC_OK);
	size_t wsb, cb = (size_t)(m * ldc) * 4;
	QC_ASSERT(qc_cuda_marlin_gemm_workspace(&ar, &wsb, &err) == QC_OK);
	void *d_a, *d_w, *d_c, *d_ws = NULL, *d_ex;
	CU(cudaMalloc(&d_a, (size_t)(m * k) * 2));
	CU(cudaMalloc(&d_w, sb * (uint64_t)E));
	CU(cudaMalloc(&d_c, cb));
	CU(cudaMalloc(&d_ex, (size_t)m * 4));
	if (wsb)
		CU(cudaMalloc(&d_ws, wsb));
	CU(cudaMemcpy(d_a, a, (size_t)(m * k) * 2, cudaMemcpyHostToDevice));
	CU(cudaMemcpy(d_w, w, sb * (uint64_t)E, cudaMemcpyHostToDevice));
	CU(cudaMemcpy(d_ex, ex, (size_t)m * 4, cudaMemcpyHostToDevice));
	CU(cudaMemset(d_c, 0xff, cb));
	struct qc_marlin_gemm_args dr = ar;
	dr.a = d_a;
	dr.w = d_w;
	dr.c = d_c;
	dr.expert = d_ex;
	dr.workspace = d_ws;
	dr.workspace_bytes = wsb;
	int rc = qc_cuda_marlin_gemm(&dr, 0, &err);
	if (rc == QC_OK)
		rc = qc_cuda_check(cudaDeviceSynchronize(), "sync", &err);
	float *hc = malloc(cb);
	CU(cudaMemcpy(hc, d_c, cb, cudaMemcpyDeviceToHost));
	const struct rows_cmp cm = compare_rows(hc, m, n, ldc, truth, base, NULL);
	const double rg = cm.rel_gpu, rb = cm.rel_base;
	const int64_t n_nan = cm.n_nan, n_touched = cm.n_touched;
	int ok = rc == QC_OK && n_nan == 0 && n_touched == 0 && rg <= 2 * rb + 1e-6;
	printf("%s %-9s experts=%lld m=%-4lld n=%-5lld k=%-5lld ldc=%lld rel_err %.3e (fp16 plain %.3e) nan %lld written past n %lld%s%s\n",
	       ok ? "PASS" : "FAIL", qc_layout_name(l), (long long)E, (long long)m, (long long)n, (long long)k,
	       (long long)ldc, rg, rb, (long long)n_nan, (long long)n_touched, rc ? " err: " : "", rc ? err.msg : "");
	ok ? n_pass++ : n_fail++;
	cudaFree(d_a);
	cudaFree(d_w);
	cudaFree(d_c);
	cudaFree(d_ex);
	cudaFree(d_ws);
	free(hc);
	free(w);
	free(a);
	free(ex);
	free(truth);
	free(base);
}

/* One GEMM over a fused matrix whose column ranges have outputs of their own
 * (qc_marlin_gemm_args.part_*: qconvert's Q|K|V and gate|up): columns split at
 * c1 and c2 (multiples of 32 inside (0, n)) into three fp32 outputs, each with a row
 * stride 6 past its width and NaN-poisoned; each part against the reference's
 * columns, and nothing written past a part's width. */
static void check_parts(enum qc_layout l, int64_t m, int64_t n, int64_t k, enum qc_marlin_split sp, int split_k)
{
	const int64_t c1 = n / 2 / 32 * 32, c2 = n * 3 / 4 / 32 * 32;
	QC_ASSERT(c1 > 0 && c2 > c1 && c2 < n);
	const int64_t col0[3] = { 0, c1, c2 }, width[3] = { c1, c2 - c1, n - c2 };
	uint64_t wb;
	uint8_t *w = make_weights(l, n, k, &wb);
	uint16_t *a = make_act(m, k);
	double *truth = malloc((size_t)(m * n) * sizeof(double)), *base = malloc((size_t)(m * n) * sizeof(double));
	double *tp = malloc((size_t)(m * n) * sizeof(double)), *bp = malloc((size_t)(m * n) * sizeof(double));
	struct qc_marlin_gemm_args ar = { .layout = l, .type = type_of(l), .m = m, .n = n, .k = k, .a = a, .w = w,
					  .ldc = width[0] + 6, .split = sp, .split_k = split_k };
	struct qc_err err = { 0 };
	QC_ASSERT(qc_marlin_gemm_ref(&ar, QC_MARLIN_PREC_F64, truth, &err) == QC_OK);
	QC_ASSERT(qc_marlin_gemm_ref(&ar, QC_MARLIN_PREC_F16, base, &err) == QC_OK);
	size_t wsb;
	QC_ASSERT(qc_cuda_marlin_gemm_workspace(&ar, &wsb, &err) == QC_OK);
	void *d_a, *d_w, *d_ws = NULL, *d_c[3];
	CU(cudaMalloc(&d_a, (size_t)(m * k) * 2));
	CU(cudaMalloc(&d_w, wb));
	for (int i = 0; i < 3; i++) {
		CU(cudaMalloc(&d_c[i], (size_t)(m * (width[i] + 6)) * 4));
		CU(cudaMemset(d_c[i], 0xff, (size_t)(m * (width[i] + 6)) * 4));
	}
	if (wsb) {
		CU(cudaMalloc(&d_ws, wsb));
		CU(cudaMemset(d_ws, 0xff, wsb));
	}
	CU(cudaMemcpy(d_a, a, (size_t)(m * k) * 2, cudaMemcpyHostToDevice));
	CU(cudaMemcpy(d_w, w, wb, cudaMemcpyHostToDevice));
	struct qc_marlin_gemm_args dr = ar;
	dr.a = d_a;
	dr.w = d_w;
	dr.c = d_c[0];
	dr.workspace = d_ws;
	dr.workspace_bytes = wsb;
	dr.n_parts = 2;
	for (int i = 0; i < 2; i++) {
		dr.part_col0[i] = col0[i + 1];
		dr.part_c[i] = d_c[i + 1];
		dr.part_ldc[i] = width[i + 1] + 6;
	}
	bool wg = false;
	int rc = run_gemm(&dr, &wg, &err);
	int ok = rc == QC_OK && wg == want_wgmma;
	double worst = 0, worst_base = 0;
	int64_t n_nan = 0, n_touched = 0;
	for (int i = 0; i < 3; i++) {
		const int64_t ld = width[i] + 6;
		float *hc = malloc((size_t)(m * ld) * 4);
		CU(cudaMemcpy(hc, d_c[i], (size_t)(m * ld) * 4, cudaMemcpyDeviceToHost));
		for (int64_t r = 0; r < m; r++)
			for (int64_t c = 0; c < width[i]; c++) {
				tp[r * width[i] + c] = truth[r * n + col0[i] + c];
				bp[r * width[i] + c] = base[r * n + col0[i] + c];
			}
		const struct rows_cmp cm = compare_rows(hc, m, width[i], ld, tp, bp, NULL);
		ok = ok && cm.n_nan == 0 && cm.n_touched == 0 && cm.rel_gpu <= 2 * cm.rel_base + 1e-6;
		worst = cm.rel_gpu > worst ? cm.rel_gpu : worst;
		worst_base = cm.rel_base > worst_base ? cm.rel_base : worst_base;
		n_nan += cm.n_nan;
		n_touched += cm.n_touched;
		free(hc);
	}
	printf("%s %-10s %-5s parts m=%-4lld n=%lld+%lld+%lld k=%-5lld split=%-5s ws=%-8zu rel_err %.3e (fp16 plain %.3e) nan %lld written past a part %lld%s%s\n",
	       ok ? "PASS" : "FAIL", qc_layout_name(l), wg ? "wgmma" : "mma", (long long)m, (long long)width[0],
	       (long long)width[1], (long long)width[2], (long long)k, sp == QC_MARLIN_SPLIT_AUTO ? "auto" : "fixed", wsb,
	       worst, worst_base, (long long)n_nan, (long long)n_touched, rc ? " err: " : "", rc ? err.msg : "");
	ok ? n_pass++ : n_fail++;
	cudaFree(d_a);
	cudaFree(d_w);
	cudaFree(d_ws);
	for (int i = 0; i < 3; i++)
		cudaFree(d_c[i]);
	free(w);
	free(a);
	free(truth);
	free(base);
	free(tp);
	free(bp);
}

/* Stacked experts, many rows (the layout table's moe_gemm kind: marlin_moe.cu, the
 * grouped warp-specialized GEMM): float x of n_rows / x_div tokens with ldx > k,
 * row r reads token r / x_div and expert ex[r] by `pattern` (0 spread, 1 every
 * row the last expert, 2 random with experts 0 and 2 empty, 3 an expert out of
 * range on every 11th row: NaN there); y NaN-poisoned with ldy > n, columns past n
 * must stay untouched. Against the reference on the fp16-rounded rows with an
 * expert per row. */
static void check_moe_grouped(enum qc_layout l, int64_t n_rows, int64_t n, int64_t k, int64_t E, int x_div,
			      int pattern)
{
	uint64_t sb;
	uint8_t *w = make_stack(l, n, k, E, &sb);
	const int64_t n_tok = (n_rows + x_div - 1) / x_div, ldx = k + 8, ldy = n + 6;
	float *x = malloc((size_t)(n_tok * ldx) * 4);
	for (int64_t i = 0; i < n_tok * ldx; i++)
		x[i] = (float)urand();
	uint16_t *a = malloc((size_t)(n_rows * k) * 2); /* the reference's rows: fp16(x) */
	int32_t *ex = malloc((size_t)n_rows * 4), *ex_ref = malloc((size_t)n_rows * 4);
	for (int64_t r = 0; r < n_rows; r++) {
		for (int64_t c = 0; c < k; c++)
			a[r * k + c] = qc_f32_to_fp16(x[(r / x_div) * ldx + c]);
		int32_t e = pattern == 0 ? (int32_t)((r * 7 + 2) % E) : pattern == 1 ? (int32_t)(E - 1)
								       : (int32_t)((urand() + 1) * 0.5 * E);
		if (pattern == 2 && E > 3 && (e == 0 || e == 2))
			e = 1;
		e = e < 0 ? 0 : e >= E ? (int32_t)(E - 1) : e;
		ex_ref[r] = e;
		ex[r] = pattern == 3 && r % 11 == 5 ? (int32_t)E : e;
	}
	double *truth = malloc((size_t)(n_rows * n) * sizeof(double)), *base = malloc((size_t)(n_rows * n) * sizeof(double));
	struct qc_marlin_gemm_args ar = { .layout = l, .type = type_of(l), .m = n_rows, .n = n, .k = k, .a = a, .w = w,
					  .ldc = n, .expert = ex_ref, .mat_stride = sb };
	struct qc_err err = { 0 };
	QC_ASSERT(qc_marlin_gemm_ref(&ar, QC_MARLIN_PREC_F64, truth, &err) == QC_OK);
	QC_ASSERT(qc_marlin_gemm_ref(&ar, QC_MARLIN_PREC_F16, base, &err) == QC_OK);
	const uint64_t wsb = qc_cuda_marlin_moe_ws(k, n, n_rows, E);
	const size_t yb = (size_t)(n_rows * ldy) * 4;
	void *d_x, *d_w, *d_y, *d_ws, *d_ex;
	CU(cudaMalloc(&d_x, (size_t)(n_tok * ldx) * 4));
	CU(cudaMalloc(&d_w, sb * (uint64_t)E + QC_CUDA_MM_PAD));
	CU(cudaMalloc(&d_y, yb));
	CU(cudaMalloc(&d_ex, (size_t)n_rows * 4));
	CU(cudaMalloc(&d_ws, wsb));
	CU(cudaMemcpy(d_x, x, (size_t)(n_tok * ldx) * 4, cudaMemcpyHostToDevice));
	CU(cudaMemcpy(d_w, w, sb * (uint64_t)E, cudaMemcpyHostToDevice));
	CU(cudaMemcpy(d_ex, ex, (size_t)n_rows * 4, cudaMemcpyHostToDevice));
	CU(cudaMemset(d_y, 0xff, yb));
	CU(cudaMemset(d_ws, 0xff, wsb)); /* stale sort arrays and rows must not matter */
	uint64_t row;
	QC_ASSERT(qc_marlin_row_bytes(l, type_of(l), k, &row) == QC_OK);
	const struct qc_cuda_mm_args ma = { .d_w = d_w, .type = type_of(l), .layout = l, .n_in = k, .n_out = n,
					    .row_bytes = row, .mat_stride = sb, .d_x = d_x, .ldx = ldx, .x_div = x_div,
					    .d_expert = d_ex, .n_mat = E, .n_rows = n_rows, .d_y = d_y, .ldy = ldy,
					    .d_ws = d_ws, .ws_bytes = wsb };
	int rc = qc_cuda_marlin_moe(&ma, 0, &err);
	if (rc == QC_OK)
		rc = qc_cuda_check(cudaDeviceSynchronize(), "sync", &err);
	float *hy = malloc(yb);
	CU(cudaMemcpy(hy, d_y, yb, cudaMemcpyDeviceToHost));
	bool *nan_row = malloc((size_t)n_rows);
	for (int64_t r = 0; r < n_rows; r++)
		nan_row[r] = ex[r] != ex_ref[r]; /* the sort's NaN, not the poison */
	const struct rows_cmp cm = compare_rows(hy, n_rows, n, ldy, truth, base, nan_row);
	free(nan_row);
	const double rg = cm.rel_gpu, rb = cm.rel_base;
	const int64_t n_nan = cm.n_nan, n_touched = cm.n_touched, nan_rows_bad = cm.nan_rows_bad;
	int ok = rc == QC_OK && n_nan == 0 && n_touched == 0 && nan_rows_bad == 0 && rg <= 2 * rb + 1e-6;
	printf("%s grouped %-9s experts=%lld rows=%-4lld x_div=%d pattern=%d n=%-5lld k=%-5lld rel_err %.3e (fp16 plain "
	       "%.3e) nan %lld written past n %lld bad out-of-range rows %lld%s%s\n",
	       ok ? "PASS" : "FAIL", qc_layout_name(l), (long long)E, (long long)n_rows, x_div, pattern, (long long)n,
	       (long long)k, rg, rb, (long long)n_nan, (long long)n_touched, (long long)nan_rows_bad, rc ? " err: " : "",
	       rc ? err.msg : "");
	ok ? n_pass++ : n_fail++;
	cudaFree(d_x);
	cudaFree(d_w);
	cudaFree(d_y);
	cudaFree(d_ex);
	cudaFree(d_ws);
	free(hy);
	free(w);
	free(x);
	free(a);
	free(ex);
	free(ex_ref);
	free(truth);
	free(base);
}

/* The grouped cases, every layout: rows around the tiles, many experts with few
 * rows, top-2 rows (x_div 2) as the MoE layers have them; once per tile height of
 * `rows` (qc_cuda_marlin_moe_rows; 0: chosen by rows per expert). */
static void check_moe_grouped_cases(const int *rows, int n_rows_list)
{
	static const struct { enum qc_layout l; int64_t rows, n, k, E; int x_div, pattern; } c[] = {
		{ QC_LAYOUT_MARLIN_I4, 9, 256, 512, 4, 1, 0 },      { QC_LAYOUT_MARLIN_I4, 300, 512, 1024, 8, 2, 0 },
		{ QC_LAYOUT_MARLIN_I4, 129, 192, 512, 3, 1, 1 },    { QC_LAYOUT_MARLIN_I4, 600, 256, 1024, 8, 2, 2 },
		{ QC_LAYOUT_MARLIN_I4, 77, 128, 256, 5, 1, 3 },     { QC_LAYOUT_MARLIN_I8, 257, 384, 1024, 6, 2, 0 },
		{ QC_LAYOUT_MARLIN_I8, 40, 96, 4096, 16, 1, 2 },    { QC_LAYOUT_MARLIN_I4Z, 200, 256, 1024, 4, 2, 0 },
		{ QC_LAYOUT_MARLIN_I8Z, 150, 160, 1280, 3, 1, 2 },  { QC_LAYOUT_MARLIN_I6, 140, 192, 1024, 4, 2, 0 },
		{ QC_LAYOUT_MARLIN_I6, 12, 128, 4096, 8, 2, 2 },    { QC_LAYOUT_MARLIN_I4, 128, 64, 14336, 2, 1, 1 },
	};
	for (int ri = 0; ri < n_rows_list; ri++) {
		qc_cuda_marlin_moe_rows(rows[ri]);
		printf("grouped tiles of %d rows (0: chosen)\n", rows[ri]);
		for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
			z_turn = (int)i;
			if (type_of(c[i].l) == QC_TYPE_Q4_K && c[i].k % 256)
				z_turn++;
			if (!fits_k(c[i].l, c[i].k))
				continue;
			check_moe_grouped(c[i].l, c[i].rows, c[i].n, c[i].k, c[i].E, c[i].x_div, c[i].pattern);
		}
	}
	qc_cuda_marlin_moe_rows(0);
}

/* The backend's entry (the matmul_layouts.def row, runtime/cuda/kernels/marlin_mm.cu):
 * float rows with ldx and x_div, strided y; checked against the reference on
 * the fp16-rounded rows. (Called directly: the table itself links every
 * backend kernel, which `make test-gpu` covers.) */
static void check_table_entry(enum qc_layout l, int64_t rows, int64_t n, int64_t k, void *blas)
{
	uint64_t wb;
	uint8_t *w = make_weights(l, n, k, &wb);
	const int32_t x_div = 2;
	const int64_t ldx = k + 8, ldy = n + 4, xr = (rows + x_div - 1) / x_div;
	float *x = malloc((size_t)(xr * ldx) * 4);
	uint16_t *a16 = malloc((size_t)(rows * k) * 2);
	for (int64_t i = 0; i < xr * ldx; i++)
		x[i] = (float)urand();
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < k; c++)
			a16[r * k + c] = qc_f32_to_fp16(x[(r / x_div) * ldx + c]);
	double *truth = malloc((size_t)(rows * n) * sizeof(double)), *base = malloc((size_t)(rows * n) * sizeof(double));
	struct qc_marlin_gemm_args ar = { .layout = l, .type = type_of(l), .m = rows, .n = n, .k = k, .a = a16, .w = w,
					  .ldc = n };
	struct qc_err err = { 0 };
	QC_ASSERT(qc_marlin_gemm_ref(&ar, QC_MARLIN_PREC_F64, truth, &err) == QC_OK);
	QC_ASSERT(qc_marlin_gemm_ref(&ar, QC_MARLIN_PREC_F16, base, &err) == QC_OK);
	const struct qc_kernel_rows kr = QC_KERNEL_ROWS_DEFAULT;
	uint64_t wsb = qc_cuda_marlin_mm_ws(k, n, rows, &kr);
	void *d_w, *d_x, *d_y, *d_ws;
	CU(cudaMalloc(&d_w, wb));
	CU(cudaMalloc(&d_x, (size_t)(xr * ldx) * 4));
	CU(cudaMalloc(&d_y, (size_t)(rows * ldy) * 4));
	CU(cudaMalloc(&d_ws, wsb));
	CU(cudaMemcpy(d_w, w, wb, cudaMemcpyHostToDevice));
	CU(cudaMemcpy(d_x, x, (size_t)(xr * ldx) * 4, cudaMemcpyHostToDevice));
	CU(cudaMemset(d_y, 0xff, (size_t)(rows * ldy) * 4));
	struct qc_cuda_mm_args m = { .d_w = d_w, .type = type_of(l), .layout = l, .n_in = k, .n_out = n,
				     .d_x = d_x, .ldx = ldx, .x_div = x_div, .n_rows = rows, .d_y = d_y, .ldy = ldy,
				     .d_ws = d_ws, .ws_bytes = wsb, .blas = blas };
	/* with a cuBLAS handle the table's f16+cublas entry, else its mma entry */
	int rc = blas ? qc_cuda_marlin_f16(&m, 0, &err) : qc_cuda_marlin_mm(&m, 0, &err);
	if (!rc)
		rc = qc_cuda_check(cudaDeviceSynchronize(), "sync", &err);
	float *y = malloc((size_t)(rows * ldy) * 4);
	CU(cudaMemcpy(y, d_y, (size_t)(rows * ldy) * 4, cudaMemcpyDeviceToHost));
	double eg = 0, eb = 0, nrm = 0;
	int64_t bad = 0;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < n; c++) {
			double g = y[r * ldy + c], t = truth[r * n + c];
			bad += isnan(g);
			if (isnan(g))
				continue;
			eg += (g - t) * (g - t);
			eb += (base[r * n + c] - t) * (base[r * n + c] - t);
			nrm += t * t;
		}
	double rg = sqrt(eg / nrm), rb = sqrt(eb / nrm);
	/* the SwiGLU fusion (QC_MM_FUSE_SILU: silu(x) * x2 in the rounding to fp16)
	   against silu_mul then the plain entry: the same bits in every written y */
	int64_t fu_differ = -1;
	if (!rc) {
		const size_t nx = (size_t)(xr * ldx), ny = (size_t)(rows * ldy);
		float *x2 = malloc(nx * 4), *ya = malloc(ny * 4), *yb = malloc(ny * 4);
		for (size_t i = 0; i < nx; i++)
			x2[i] = (float)urand() * 3.0f;
		void *d_x2, *d_xs, *d_ya, *d_yb;
		CU(cudaMalloc(&d_x2, nx * 4));
		CU(cudaMalloc(&d_xs, nx * 4));
		CU(cudaMalloc(&d_ya, ny * 4));
		CU(cudaMalloc(&d_yb, ny * 4));
		CU(cudaMemcpy(d_x2, x2, nx * 4, cudaMemcpyHostToDevice));
		CU(cudaMemset(d_ya, 0xff, ny * 4));
		CU(cudaMemset(d_yb, 0xff, ny * 4));
		const struct qc_cuda_silu_mul_args sa = {d_x, d_x2, d_xs, (int64_t)nx};
		struct qc_cuda_mm_args mu = m, mf = m;
		mu.d_x = d_xs;
		mu.d_y = d_yb;
		mf.d_x2 = d_x2;
		mf.d_y = d_ya;
		rc = qc_cuda_silu_mul(&sa, 0, &err);
		if (!rc)
			rc = blas ? qc_cuda_marlin_f16(&mu, 0, &err) : qc_cuda_marlin_mm(&mu, 0, &err);
		if (!rc)
			rc = blas ? qc_cuda_marlin_f16(&mf, 0, &err) : qc_cuda_marlin_mm(&mf, 0, &err);
		if (!rc)
			rc = qc_cuda_check(cudaDeviceSynchronize(), "sync", &err);
		CU(cudaMemcpy(ya, d_ya, ny * 4, cudaMemcpyDeviceToHost));
		CU(cudaMemcpy(yb, d_yb, ny * 4, cudaMemcpyDeviceToHost));
		fu_differ = 0;
		for (int64_t r = 0; r < rows; r++)
			fu_differ += memcmp(ya + r * ldy, yb + r * ldy, (size_t)n * 4) != 0;
		cudaFree(d_x2);
		cudaFree(d_xs);
		cudaFree(d_ya);
		cudaFree(d_yb);
		free(x2);
		free(ya);
		free(yb);
	}
	/* several matrices on one x (QC_MM_FUSE_MULTI: Q, K, V): a second weight of
	   another width, then the first again, each output the bits of its matrix
	   run alone (the second's alone run into d_yb first); the scratch is the
	   group's, as the backend sizes it */
	int64_t mu_differ = -1, fused_bad = -1;
	if (!rc) {
		const int64_t n2 = n >= 128 ? n / 2 / 64 * 64 : n;
		uint64_t wb2;
		uint8_t *w2 = make_weights(l, n2, k, &wb2);
		const size_t ny = (size_t)(rows * ldy);
		float *ya = malloc(ny * 4), *yb = malloc(ny * 4), *yc = malloc(ny * 4);
		const uint64_t ws3 = qc_cuda_marlin_mm_ws(k, 2 * n + n2, rows, &kr);
		void *d_w2, *d_ya, *d_yb, *d_yc, *d_ws3;
		CU(cudaMalloc(&d_w2, wb2));
		CU(cudaMalloc(&d_ya, ny * 4));
		CU(cudaMalloc(&d_yb, ny * 4));
		CU(cudaMalloc(&d_yc, ny * 4));
		CU(cudaMalloc(&d_ws3, ws3));
		CU(cudaMemcpy(d_w2, w2, wb2, cudaMemcpyHostToDevice));
		CU(cudaMemset(d_ya, 0xff, ny * 4));
		CU(cudaMemset(d_yb, 0xff, ny * 4));
		CU(cudaMemset(d_yc, 0xff, ny * 4));
		struct qc_cuda_mm_args m2 = m, m3 = m;
		m2.d_w = d_w2;
		m2.n_out = n2;
		m2.d_y = d_yb;
		m3.d_y = d_ya;
		m3.d_ws = d_ws3;
		m3.ws_bytes = ws3;
		m3.n_more = 2;
		m3.more[0] = (struct qc_cuda_mm_more){d_w2, n2, d_yc, ldy};
		m3.more[1] = (struct qc_cuda_mm_more){d_w, n, d_y, ldy}; /* over y: the same bits */
		rc = blas ? qc_cuda_marlin_f16(&m2, 0, &err) : qc_cuda_marlin_mm(&m2, 0, &err);
		if (!rc)
			rc = blas ? qc_cuda_marlin_f16(&m3, 0, &err) : qc_cuda_marlin_mm(&m3, 0, &err);
		/* the two weights one after the other, as a fused tensor's parts: one GEMM
		   (marlin_mm.cu's one_matrix) whose outputs hold each matrix's products
		   (another K split than alone: within 1e-4 of the alone runs' values), and
		   nothing past n written */
		void *d_wf, *d_yf1, *d_yf2;
		CU(cudaMalloc(&d_wf, wb + wb2));
		CU(cudaMalloc(&d_yf1, ny * 4));
		CU(cudaMalloc(&d_yf2, ny * 4));
		CU(cudaMemcpy(d_wf, w, wb, cudaMemcpyHostToDevice));
		CU(cudaMemcpy((uint8_t *)d_wf + wb, w2, wb2, cudaMemcpyHostToDevice));
		CU(cudaMemset(d_yf1, 0xff, ny * 4));
		CU(cudaMemset(d_yf2, 0xff, ny * 4));
		struct qc_cuda_mm_args mf = m;
		mf.d_w = d_wf;
		mf.row_bytes = wb / (uint64_t)n;
		mf.d_y = d_yf1;
		mf.d_ws = d_ws3;
		mf.ws_bytes = ws3;
		mf.n_more = 1;
		mf.more[0] = (struct qc_cuda_mm_more){(const uint8_t *)d_wf + wb, n2, d_yf2, ldy};
		if (!rc)
			rc = blas ? qc_cuda_marlin_f16(&mf, 0, &err) : qc_cuda_marlin_mm(&mf, 0, &err);
		if (!rc)
			rc = qc_cuda_check(cudaDeviceSynchronize(), "sync", &err);
		float *yf1 = malloc(ny * 4), *yf2 = malloc(ny * 4);
		CU(cudaMemcpy(yf1, d_yf1, ny * 4, cudaMemcpyDeviceToHost));
		CU(cudaMemcpy(yf2, d_yf2, ny * 4, cudaMemcpyDeviceToHost));
		CU(cudaMemcpy(yb, d_yb, ny * 4, cudaMemcpyDeviceToHost));
		fused_bad = 0;
		for (int64_t r = 0; r < rows; r++)
			for (int64_t c = 0; c < ldy; c++) {
				const float *pairs[2][2] = {{yf1, y}, {yf2, yb}};
				const int64_t widths[2] = {n, n2};
				for (int q = 0; q < 2; q++) {
					const float g = pairs[q][0][r * ldy + c], t = pairs[q][1][r * ldy + c];
					uint32_t bits;
					memcpy(&bits, &g, 4);
					if (c >= widths[q])
						fused_bad += bits != 0xffffffffu;
					else
						fused_bad += !(fabsf(g - t) <= 1e-4f * (1.0f + fabsf(t)));
				}
			}
		free(yf1);
		free(yf2);
		cudaFree(d_wf);
		cudaFree(d_yf1);
		cudaFree(d_yf2);
		float *y1 = malloc(ny * 4);
		CU(cudaMemcpy(ya, d_ya, ny * 4, cudaMemcpyDeviceToHost));
		CU(cudaMemcpy(yb, d_yb, ny * 4, cudaMemcpyDeviceToHost));
		CU(cudaMemcpy(yc, d_yc, ny * 4, cudaMemcpyDeviceToHost));
		CU(cudaMemcpy(y1, d_y, ny * 4, cudaMemcpyDeviceToHost));
		mu_differ = 0;
		for (int64_t r = 0; r < rows; r++)
			mu_differ += (memcmp(ya + r * ldy, y + r * ldy, (size_t)n * 4) != 0) +
				     (memcmp(y1 + r * ldy, y + r * ldy, (size_t)n * 4) != 0) +
				     (memcmp(yc + r * ldy, yb + r * ldy, (size_t)n2 * 4) != 0);
		free(y1);
		cudaFree(d_w2);
		cudaFree(d_ya);
		cudaFree(d_yb);
		cudaFree(d_yc);
		cudaFree(d_ws3);
		free(w2);
		free(ya);
		free(yb);
		free(yc);
	}
	int ok = rc == QC_OK && bad == 0 && rg <= 2 * rb + 1e-6 && fu_differ == 0 && mu_differ == 0 && fused_bad == 0;
	printf("%s table entry %s %-9s rows=%lld n=%lld k=%lld (x_div 2, strided x and y%s) rel_err %.3e (fp16 plain %.3e) nan %lld, "
	       "silu fused: %lld rows differ, three matrices on one x: %lld rows differ, two parts of one tensor: %lld values off%s%s\n",
	       ok ? "PASS" : "FAIL", blas ? "qc_cuda_marlin_f16" : "qc_cuda_marlin_mm", qc_layout_name(l), (long long)rows, (long long)n, (long long)k,
	       blas ? ", fp16 decode + cuBLAS" : "", rg, rb,
	       (long long)bad, (long long)fu_differ, (long long)mu_differ, (long long)fused_bad, rc ? " err: " : "", rc ? err.msg : "");
	ok ? n_pass++ : n_fail++;
	cudaFree(d_w);
	cudaFree(d_x);
	cudaFree(d_y);
	cudaFree(d_ws);
	free(w);
	free(x);
	free(a16);
	free(truth);
	free(base);
	free(y);
}

/* |w| of every weight (n, k) of one packed slice (n x k floats), from the encoding's
 * own decoder on the unpacked ggml rows (the i4z / i8z kernels' values differ from
 * these by the fp16 rounding of scale and offset: callers allow 0.1% for it). */
static float *abs_weights(enum qc_layout l, int64_t n, int64_t k, const uint8_t *w)
{
	const enum qc_type t = type_of(l);
	const int64_t ne[4] = { k, n, 1, 1 };
	uint64_t rb;
	struct qc_err err = { 0 };
	QC_ASSERT(qc_type_row_bytes(t, (uint64_t)k, &rb) == QC_OK);
	uint8_t *g = malloc(rb * (uint64_t)n);
	float *f = malloc((size_t)(n * k) * 4);
	QC_ASSERT(qc_layout_unpack_rows(l, t, ne, w, 0, (uint64_t)n, g, &err) == QC_OK);
	for (int64_t r = 0; r < n; r++)
		qc_type_get(t)->dequant_row(g + (uint64_t)r * rb, f + r * k, k);
	for (int64_t i = 0; i < n * k; i++)
		f[i] = fabsf(f[i]);
	free(g);
	return f;
}

/* How far the norm-fused GEMV with xq-bit activation codes (8, 16) may be from the
 * rms_norm kernel + the GEMV at output (t, c): the two sum a row's squares in
 * different orders, so each normalized element and each 32-block's amax may differ
 * in their last bits: DELTA = 2^-17 relative covers two float sums of up to ~60
 * terms a thread (k <= 14336 over 256 threads) plus the shuffle trees, the square
 * root and the products, for each path. A code can then round the other
 * way only where x·(qmax/amax) lies within 3·DELTA of its magnitude of a rounding
 * boundary, and moves one step d of its block; every other product moves by at
 * most 4·DELTA of itself. xn: the rms_norm kernel's rows (ldx apart), aw: |w|.
 * Whether every output is within that, plus 1e-6 of the largest (float sums). */
static int norm_fused_within(const float *ya, const float *yb, int64_t ldy, const float *xn, int64_t ldx,
			     const float *aw, int64_t rows, int64_t n, int64_t k, int xq, double *worst)
{
	const double DELTA = 1.0 / 131072.0, qmax = xq == 8 ? 127.0 : 32767.0;
	double *step = malloc((size_t)k * sizeof(double)); /* per element: d if it may flip, else 0 */
	double mx = 0;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < n; c++)
			mx = fmax(mx, fabs(yb[r * ldy + c]));
	int ok = 1;
	*worst = 0;
	for (int64_t r = 0; r < rows; r++) {
		const float *x = xn + r * ldx;
		for (int64_t b = 0; b + 32 <= k; b += 32) {
			float amax = 0.0f;
			for (int j = 0; j < 32; j++)
				amax = fmaxf(amax, fabsf(x[b + j]));
			const double d = xq == 8 ? qc_fp16_to_f32(qc_f32_to_fp16(amax / 127.0f)) : amax / 32767.0;
			for (int j = 0; j < 32; j++) {
				const double v = amax > 0 ? fabs((double)x[b + j]) * (qmax / amax) : 0.0;
				const double dist = fabs(v - floor(v) - 0.5);
				step[b + j] = dist <= 3 * DELTA * v + 1e-9 ? d : 0.0;
			}
		}
		for (int64_t c = 0; c < n; c++) {
			double bound = 1e-6 * mx;
			const float *wr = aw + c * k;
			for (int64_t i = 0; i < k; i++)
				bound += 1.001 * wr[i] * (step[i] + 4 * DELTA * fabs((double)x[i]));
			const double diff = fabs((double)ya[r * ldy + c] - (double)yb[r * ldy + c]);
			if (!(diff <= bound))
				ok = 0;
			*worst = fmax(*worst, isnan(diff) ? INFINITY : diff / bound);
		}
	}
	free(step);
	return ok;
}

/* The decode GEMV (runtime/cuda/kernels/marlin_gemv.cu, the table's gemv entry): float
 * rows (on the fp16 grid, so the reference's fp16 A is the same numbers) with
 * a row stride, strided y, E > 1: an expert per row. Error against the F64
 * truth within 2x a plain fp16 GEMM's; nothing written past n; without
 * experts, each row run alone gives the batched row bit for bit. */
static enum qc_cuda_gemv_kt gemv_mode = QC_CUDA_GEMV_KT4; /* the K partition check_gemv runs */
static int gemv_xq;   /* check_gemv runs the streaming GEMV with 8- or 16-bit activation codes (0: floats) */
static int gemv_ring; /* ... and one row's tiles through the shared-memory ring */
static int gemv_persist; /* ... or the persistent kernel (marlin_gemv_persist.cu) */
static const char *mode_name(enum qc_cuda_gemv_kt m)
{
	if (m == QC_CUDA_GEMV_STREAM) {
		static const char *names[2][3] = {{"stream", "str-x8", "str-x16"}, {"str-rg", "str-rg-x8", "str-rg-x16"}};
		return names[gemv_ring != 0][gemv_xq / 8];
	}
	return m == QC_CUDA_GEMV_KT8 ? "kt8" : "kt4";
}

static void check_gemv(enum qc_layout l, int64_t rows, int64_t n, int64_t k, int64_t E)
{
	uint64_t sb;
	uint8_t *w = make_stack(l, n, k, E, &sb);
	const int64_t ldx = k + 8, ldy = n + 4;
	uint16_t *a16 = make_act(rows, k);
	float *x = calloc((size_t)(rows * ldx), 4);
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < k; c++)
			x[r * ldx + c] = qc_fp16_to_f32(a16[r * k + c]);
	int32_t *ex = malloc((size_t)rows * 4);
	for (int64_t r = 0; r < rows; r++)
		ex[r] = (int32_t)((r * 5 + 1) % E);
	double *truth = malloc((size_t)(rows * n) * sizeof(double)), *base = malloc((size_t)(rows * n) * sizeof(double));
	struct qc_marlin_gemm_args ar = { .layout = l, .type = type_of(l), .m = rows, .n = n, .k = k, .a = a16, .w = w,
					  .ldc = n, .expert = E > 1 ? ex : NULL, .mat_stride = sb };
	struct qc_err err = { 0 };
	/* integer activations (streaming rows without experts): the truth of that
	 * rounding, and a float sum of it as the yardstick */
	/* marlin_i6 always streams float activations through the register ring:
	 * the xq, ring and persist knobs set the int4 and int8 rows only */
	const bool i6 = l == QC_LAYOUT_MARLIN_I6;
	const int xq = gemv_mode == QC_CUDA_GEMV_STREAM && E == 1 && !i6 ? gemv_xq : 0;
	const int persist = gemv_persist && !i6;
	QC_ASSERT(qc_cuda_marlin_gemv_stream_xq(gemv_xq) == QC_OK);
	qc_cuda_marlin_gemv_stream_ring(gemv_ring);
	qc_cuda_marlin_gemv_stream_persist(gemv_persist);
	const enum qc_marlin_prec pt = xq == 16 ? QC_MARLIN_PREC_XQ16_F64 : xq == 8 ? QC_MARLIN_PREC_XQ8_F64 : QC_MARLIN_PREC_F64;
	const enum qc_marlin_prec pb = xq == 16 ? QC_MARLIN_PREC_XQ16_F32 : xq == 8 ? QC_MARLIN_PREC_XQ8_F32 : QC_MARLIN_PREC_F16;
	QC_ASSERT(qc_marlin_gemm_ref(&ar, pt, truth, &err) == QC_OK);
	QC_ASSERT(qc_marlin_gemm_ref(&ar, pb, base, &err) == QC_OK);
	uint64_t wsb = qc_cuda_marlin_gemv_ws(k, n, rows, gemv_mode);
	void *d_w, *d_x, *d_y, *d_ws = NULL, *d_ex;
	CU(cudaMalloc(&d_w, sb * (uint64_t)E));
	CU(cudaMalloc(&d_x, (size_t)(rows * ldx) * 4));
	CU(cudaMalloc(&d_y, (size_t)(rows * ldy) * 4));
	CU(cudaMalloc(&d_ex, (size_t)rows * 4));
	if (wsb)
		CU(cudaMalloc(&d_ws, wsb));
	CU(cudaMemcpy(d_w, w, sb * (uint64_t)E, cudaMemcpyHostToDevice));
	CU(cudaMemcpy(d_x, x, (size_t)(rows * ldx) * 4, cudaMemcpyHostToDevice));
	CU(cudaMemcpy(d_ex, ex, (size_t)rows * 4, cudaMemcpyHostToDevice));
	CU(cudaMemset(d_y, 0xff, (size_t)(rows * ldy) * 4));
	struct qc_cuda_mm_args m = { .d_w = d_w, .type = type_of(l), .layout = l, .n_in = k, .n_out = n,
				     .mat_stride = sb, .d_x = d_x, .ldx = ldx, .x_div = 1,
				     .d_expert = E > 1 ? d_ex : NULL, .n_rows = rows, .d_y = d_y, .ldy = ldy,
				     .d_ws = d_ws, .ws_bytes = wsb, .gemv_kt = gemv_mode };
	int rc = qc_cuda_marlin_gemv(&m, 0, &err);
	if (!rc)
		rc = qc_cuda_check(cudaDeviceSynchronize(), "sync", &err);
	float *y = malloc((size_t)(rows * ldy) * 4), *y1 = malloc((size_t)ldy * 4);
	CU(cudaMemcpy(y, d_y, (size_t)(rows * ldy) * 4, cudaMemcpyDeviceToHost));
	double eg = 0, eb = 0, nrm = 0;
	int64_t bad = 0, touched = 0, differ = 0;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < ldy; c++) {
			float g = y[r * ldy + c];
			uint32_t bits;
			memcpy(&bits, &g, 4);
			if (c >= n) {
				touched += bits != 0xffffffffu;
				continue;
			}
			double t = truth[r * n + c];
			bad += isnan(g);
			if (isnan(g))
				continue;
			eg += (g - t) * (g - t);
			eb += (base[r * n + c] - t) * (base[r * n + c] - t);
			nrm += t * t;
		}
	/* batch invariance: row r alone */
	for (int64_t r = 0; E == 1 && rows > 1 && r < rows && !rc; r++) {
		struct qc_cuda_mm_args m1 = m;
		m1.d_x = (const float *)d_x + r * ldx;
		m1.n_rows = 1;
		m1.d_y = (float *)d_y;
		CU(cudaMemset(d_y, 0xff, (size_t)ldy * 4));
		rc = qc_cuda_marlin_gemv(&m1, 0, &err);
		if (!rc)
			rc = qc_cuda_check(cudaDeviceSynchronize(), "sync", &err);
		CU(cudaMemcpy(y1, d_y, (size_t)ldy * 4, cudaMemcpyDeviceToHost));
		differ += memcmp(y1, y + r * ldy, (size_t)n * 4) != 0;
	}
	/* streaming: the split-K sum through a thread-block cluster (sm_90) gives the
	 * global partials' bits */
	int64_t cl_differ = 0, hint_differ = 0;
	if (!rc && gemv_mode == QC_CUDA_GEMV_STREAM && E == 1) {
		float *yc = malloc((size_t)(rows * ldy) * 4);
		CU(cudaMemset(d_y, 0xff, (size_t)(rows * ldy) * 4));
		qc_cuda_marlin_gemv_stream_cluster(1);
		qc_cuda_pdl_set(1);
		rc = qc_cuda_marlin_gemv(&m, 0, &err);
		qc_cuda_pdl_set(0);
		qc_cuda_marlin_gemv_stream_cluster(0);
		if (!rc)
			rc = qc_cuda_check(cudaDeviceSynchronize(), "sync (cluster)", &err);
		CU(cudaMemcpy(yc, d_y, (size_t)(rows * ldy) * 4, cudaMemcpyDeviceToHost));
		cl_differ = memcmp(yc, y, (size_t)(rows * ldy) * 4) != 0;
		/* with an L2 prefetch hint (two ranges: the weights, whose last partial
		 * 64 KB chunk is asked too, and x): the same bits, nothing else read */
		if (!rc) {
			struct qc_cuda_mm_args mh = m;
			mh.l2 = (struct qc_cuda_l2_hint){ .d = { d_w, d_x },
							  .bytes = { (sb * (uint64_t)E) & ~(uint64_t)15,
								     (uint64_t)(rows * ldx) * 4 & ~(uint64_t)15 },
							  .n = 2 };
			CU(cudaMemset(d_y, 0xff, (size_t)(rows * ldy) * 4));
			rc = qc_cuda_marlin_gemv(&mh, 0, &err);
			if (!rc)
				rc = qc_cuda_check(cudaDeviceSynchronize(), "sync (L2 hint)", &err);
			CU(cudaMemcpy(yc, d_y, (size_t)(rows * ldy) * 4, cudaMemcpyDeviceToHost));
			hint_differ = memcmp(yc, y, (size_t)(rows * ldy) * 4) != 0;
			/* a misaligned hint is refused, not followed */
			struct qc_err e2 = { 0 };
			mh.l2.bytes[1] += 4;
			hint_differ += qc_cuda_marlin_gemv(&mh, 0, &e2) != QC_EINVAL;
		}
		free(yc);
	}
	/* the in-kernel split-K sum (arrival counters), launched with programmatic
	 * dependent launch on a stream of its own, twice in a row (the counters must
	 * be back at zero): the same bits as the reduce kernel's, every counter 0 after */
	int64_t fl_differ = 0, fl_left = 0;
	if (!rc) {
		const int64_t nf = 4 * (n / 32 + 1);
		uint32_t *d_fl = NULL, *hf = malloc((size_t)nf * 4);
		float *y2 = malloc((size_t)(rows * ldy) * 4);
		cudaStream_t st;
		CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
		CU(cudaMalloc((void **)&d_fl, (size_t)nf * 4));
		CU(cudaMemset(d_fl, 0, (size_t)nf * 4));
		struct qc_cuda_mm_args mf = m;
		mf.d_flags = d_fl;
		mf.n_flags = nf;
		qc_cuda_pdl_set(1);
		for (int rep = 0; rep < 2 && !rc; rep++) {
			CU(cudaMemset(d_y, 0xff, (size_t)(rows * ldy) * 4));
			rc = qc_cuda_marlin_gemv(&mf, st, &err);
			if (!rc)
				rc = qc_cuda_check(cudaStreamSynchronize(st), "sync", &err);
			CU(cudaMemcpy(y2, d_y, (size_t)(rows * ldy) * 4, cudaMemcpyDeviceToHost));
			fl_differ += memcmp(y2, y, (size_t)(rows * ldy) * 4) != 0;
		}
		/* three matrices in one launch (the same weights: each must give y) */
		if (E == 1 && !rc) {
			void *d_y2, *d_y3;
			CU(cudaMalloc(&d_y2, (size_t)(rows * ldy) * 4));
			CU(cudaMalloc(&d_y3, (size_t)(rows * ldy) * 4));
			CU(cudaMemset(d_y, 0xff, (size_t)(rows * ldy) * 4));
			CU(cudaMemset(d_y2, 0xff, (size_t)(rows * ldy) * 4));
			CU(cudaMemset(d_y3, 0xff, (size_t)(rows * ldy) * 4));
			struct qc_cuda_mm_args m3 = mf;
			m3.n_more = 2;
			m3.more[0] = (struct qc_cuda_mm_more){d_w, n, d_y2, ldy};
			m3.more[1] = (struct qc_cuda_mm_more){d_w, n, d_y3, ldy};
			const uint64_t w3 = qc_cuda_marlin_gemv_ws(k, 3 * n, rows, gemv_mode);
			void *d_ws3 = NULL;
			if (w3)
				CU(cudaMalloc(&d_ws3, w3));
			m3.d_ws = d_ws3;
			m3.ws_bytes = w3;
			rc = qc_cuda_marlin_gemv(&m3, st, &err);
			if (!rc)
				rc = qc_cuda_check(cudaStreamSynchronize(st), "sync", &err);
			/* the load-once partition depends on K alone: each output is y's bits;
			 * the streaming one on the launch's width too (3n here): the three
			 * outputs are each other's bits and as close to the truth as y; the
			 * persistent one splits each matrix's stripes at other places: each
			 * output as close to the truth as y */
			void *const outs[3] = {d_y, d_y2, d_y3};
			float *y30 = malloc((size_t)(rows * ldy) * 4);
			for (int o = 0; o < 3 && !rc; o++) {
				CU(cudaMemcpy(y2, outs[o], (size_t)(rows * ldy) * 4, cudaMemcpyDeviceToHost));
				if (gemv_mode != QC_CUDA_GEMV_STREAM) {
					fl_differ += memcmp(y2, y, (size_t)(rows * ldy) * 4) != 0;
					continue;
				}
				if (o == 0 || persist) {
					if (o == 0)
						memcpy(y30, y2, (size_t)(rows * ldy) * 4);
					double e3 = 0, n3 = 0;
					for (int64_t r = 0; r < rows; r++)
						for (int64_t cc = 0; cc < n; cc++) {
							const double t = truth[r * n + cc], g = y2[r * ldy + cc];
							e3 += isnan(g) ? INFINITY : (g - t) * (g - t);
							n3 += t * t;
						}
					fl_differ += !(sqrt(e3 / n3) <= 2 * sqrt(eb / nrm) + 1e-6);
				} else {
					fl_differ += memcmp(y2, y30, (size_t)(rows * ldy) * 4) != 0;
				}
			}
			free(y30);
			cudaFree(d_y2);
			cudaFree(d_y3);
			cudaFree(d_ws3);
		}
		qc_cuda_pdl_set(0);
		CU(cudaMemcpy(hf, d_fl, (size_t)nf * 4, cudaMemcpyDeviceToHost));
		for (int64_t i = 0; i < nf; i++)
			fl_left += hf[i] != 0;
		cudaFree(d_fl);
		cudaStreamDestroy(st);
		free(hf);
		free(y2);
	}
	/* the fusions: silu(x) * x2 in the loads and y += in the store (with the
	 * counters and PDL) against silu_mul, the plain GEMV into a scratch and add:
	 * the same bits in every written element */
	int64_t fu_differ = 0;
	if (!rc) {
		const size_t nx = (size_t)(rows * ldx), ny = (size_t)(rows * ldy);
		float *x2 = malloc(nx * 4), *y0 = malloc(ny * 4), *ya = malloc(ny * 4), *yb = malloc(ny * 4);
		for (size_t i = 0; i < nx; i++)
			x2[i] = (float)((int)(i * 2654435761u % 2001u) - 1000) / 500.0f;
		for (size_t i = 0; i < ny; i++)
			y0[i] = (float)((int)(i * 40503u % 1001u) - 500) / 50.0f;
		void *d_x2, *d_xs, *d_t, *d_ya, *d_yb;
		uint32_t *d_fl;
		const int64_t nf = 4 * (n / 32 + 1);
		CU(cudaMalloc(&d_x2, nx * 4));
		CU(cudaMalloc(&d_xs, nx * 4));
		CU(cudaMalloc(&d_t, ny * 4));
		CU(cudaMalloc(&d_ya, ny * 4));
		CU(cudaMalloc(&d_yb, ny * 4));
		CU(cudaMalloc((void **)&d_fl, (size_t)nf * 4));
		CU(cudaMemset(d_fl, 0, (size_t)nf * 4));
		CU(cudaMemset(d_t, 0xff, ny * 4));
		CU(cudaMemcpy(d_x2, x2, nx * 4, cudaMemcpyHostToDevice));
		CU(cudaMemcpy(d_ya, y0, ny * 4, cudaMemcpyHostToDevice));
		CU(cudaMemcpy(d_yb, y0, ny * 4, cudaMemcpyHostToDevice));
		const struct qc_cuda_silu_mul_args sa = {d_x, d_x2, d_xs, (int64_t)nx};
		struct qc_cuda_mm_args mu = m;
		mu.d_x = d_xs;
		mu.d_y = d_t;
		const struct qc_cuda_add_args aa = {d_yb, d_t, (int64_t)ny, (int64_t)ny};
		struct qc_cuda_mm_args mf = m;
		mf.d_x2 = d_x2;
		mf.accumulate = 1;
		mf.d_y = d_ya;
		mf.d_flags = d_fl;
		mf.n_flags = nf;
		rc = qc_cuda_silu_mul(&sa, 0, &err);
		if (!rc)
			rc = qc_cuda_marlin_gemv(&mu, 0, &err);
		if (!rc)
			rc = qc_cuda_add(&aa, 0, &err);
		qc_cuda_pdl_set(1);
		if (!rc)
			rc = qc_cuda_marlin_gemv(&mf, 0, &err);
		qc_cuda_pdl_set(0);
		if (!rc)
			rc = qc_cuda_check(cudaDeviceSynchronize(), "sync", &err);
		CU(cudaMemcpy(ya, d_ya, ny * 4, cudaMemcpyDeviceToHost));
		CU(cudaMemcpy(yb, d_yb, ny * 4, cudaMemcpyDeviceToHost));
		for (int64_t r = 0; r < rows; r++)
			fu_differ += memcmp(ya + r * ldy, yb + r * ldy, (size_t)n * 4) != 0 ||
				     memcmp(ya + r * ldy + n, y0 + r * ldy + n, (size_t)(ldy - n) * 4) != 0;
		cudaFree(d_x2);
		cudaFree(d_xs);
		cudaFree(d_t);
		cudaFree(d_ya);
		cudaFree(d_yb);
		cudaFree(d_fl);
		free(x2);
		free(y0);
		free(ya);
		free(yb);
	}
	/* RMSNorm in the loads (whole-row sums in each block) against the rms_norm kernel
	 * then the plain GEMV: within 1e-5 of the largest output (the two sum the squares
	 * in different orders); with 8- or 16-bit codes within norm_fused_within's bound
	 * (an ulp of difference may round a code the other way: one product off by
	 * d_x |w|, which at small k or on an outlier weight passed any fixed share of the
	 * largest output); without experts each row alone gives the batched bits */
	double nm_err = 0, nm_bound = 0; /* nm_bound: the worst |diff| / bound with codes */
	int64_t nm_differ = 0;
	int nm_ok = 1;
	if (!rc && E == 1) {
		const size_t nx = (size_t)(rows * ldx), ny = (size_t)(rows * ldy);
		float *nw = malloc((size_t)k * 4), *ya = malloc(ny * 4), *yb = malloc(ny * 4), *y1r = malloc((size_t)ldy * 4);
		for (int64_t i = 0; i < k; i++)
			nw[i] = 0.5f + (float)(i * 7919 % 1000) / 1000.0f;
		void *d_nw, *d_xn, *d_ya, *d_yb;
		CU(cudaMalloc(&d_nw, (size_t)k * 4));
		CU(cudaMalloc(&d_xn, nx * 4));
		CU(cudaMalloc(&d_ya, ny * 4));
		CU(cudaMalloc(&d_yb, ny * 4));
		CU(cudaMemcpy(d_nw, nw, (size_t)k * 4, cudaMemcpyHostToDevice));
		CU(cudaMemset(d_ya, 0xff, ny * 4));
		CU(cudaMemset(d_yb, 0xff, ny * 4));
		const struct qc_cuda_rms_norm_args ra = {d_x, ldx, NULL, d_nw, d_xn, ldx, rows, k, 1e-5f};
		struct qc_cuda_mm_args mu = m, mn = m;
		mu.d_x = d_xn;
		mu.d_y = d_yb;
		mn.d_norm_w = d_nw;
		mn.norm_eps = 1e-5f;
		mn.d_y = d_ya;
		rc = qc_cuda_rms_norm(&ra, 0, &err);
		if (!rc)
			rc = qc_cuda_marlin_gemv(&mu, 0, &err);
		if (!rc)
			rc = qc_cuda_marlin_gemv(&mn, 0, &err);
		if (!rc)
			rc = qc_cuda_check(cudaDeviceSynchronize(), "sync", &err);
		CU(cudaMemcpy(ya, d_ya, ny * 4, cudaMemcpyDeviceToHost));
		CU(cudaMemcpy(yb, d_yb, ny * 4, cudaMemcpyDeviceToHost));
		/* the prologue that reads x twice (QC_MARLIN_GEMV_NORM_ONCE=0): the same bits */
		{
			void *d_yc;
			float *yc = malloc(ny * 4);
			CU(cudaMalloc(&d_yc, ny * 4));
			CU(cudaMemset(d_yc, 0xff, ny * 4));
			struct qc_cuda_mm_args m2 = mn;
			m2.d_y = d_yc;
			qc_cuda_marlin_gemv_norm_once(0);
			if (!rc)
				rc = qc_cuda_marlin_gemv(&m2, 0, &err);
			if (!rc)
				rc = qc_cuda_check(cudaDeviceSynchronize(), "sync", &err);
			qc_cuda_marlin_gemv_norm_once(1);
			CU(cudaMemcpy(yc, d_yc, ny * 4, cudaMemcpyDeviceToHost));
			for (int64_t r = 0; r < rows; r++)
				nm_differ += memcmp(yc + r * ldy, ya + r * ldy, (size_t)n * 4) != 0;
			cudaFree(d_yc);
			free(yc);
		}
		double mx = 0;
		for (int64_t r = 0; r < rows; r++)
			for (int64_t cc = 0; cc < n; cc++) {
				const double a = ya[r * ldy + cc], b = yb[r * ldy + cc];
				mx = fabs(b) > mx ? fabs(b) : mx;
				nm_err = isnan(a) || fabs(a - b) > nm_err ? (isnan(a) ? INFINITY : fabs(a - b)) : nm_err;
			}
		nm_err /= mx > 0 ? mx : 1;
		if (xq) { /* with codes: the bound of norm_fused_within, from the rms_norm kernel's x */
			float *xn = malloc(nx * 4), *aw = abs_weights(l, n, k, w);
			CU(cudaMemcpy(xn, d_xn, nx * 4, cudaMemcpyDeviceToHost));
			nm_ok = norm_fused_within(ya, yb, ldy, xn, ldx, aw, rows, n, k, xq, &nm_bound);
			free(xn);
			free(aw);
		} else { /* floats: only the row scale's last bits differ */
			nm_ok = nm_err <= 1e-5;
		}
		for (int64_t r = 0; r < rows && rows > 1 && !rc; r++) {
			struct qc_cuda_mm_args m1 = mn;
			m1.d_x = (const float *)d_x + r * ldx;
			m1.n_rows = 1;
			CU(cudaMemset(d_ya, 0xff, (size_t)ldy * 4));
			rc = qc_cuda_marlin_gemv(&m1, 0, &err);
			if (!rc)
				rc = qc_cuda_check(cudaDeviceSynchronize(), "sync", &err);
			CU(cudaMemcpy(y1r, d_ya, (size_t)ldy * 4, cudaMemcpyDeviceToHost));
			nm_differ += memcmp(y1r, ya + r * ldy, (size_t)n * 4) != 0;
		}
		cudaFree(d_nw);
		cudaFree(d_xn);
		cudaFree(d_ya);
		cudaFree(d_yb);
		free(nw);
		free(ya);
		free(yb);
		free(y1r);
	}
	double rg = sqrt(eg / nrm), rb = sqrt(eb / nrm);
	int ok = rc == QC_OK && bad == 0 && touched == 0 && differ == 0 && fl_differ == 0 && fl_left == 0 &&
		 cl_differ == 0 && hint_differ == 0 && fu_differ == 0 && nm_ok && nm_differ == 0 &&
		 rg <= 2 * rb + 1e-6;
	printf("%s gemv %-6s %-9s rows=%lld n=%lld k=%lld experts=%lld ws=%llu rel_err %.3e (fp16 plain %.3e) nan %lld "
	       "written past n %lld rows differing alone %lld in-kernel sum differing %lld counters left %lld "
	       "fused rows differing %lld norm-fused err %.2e (of bound %.2f) rows differing (alone, two-pass prologue) %lld cluster differs %lld "
	       "L2 hint differs %lld%s%s\n",
	       ok ? "PASS" : "FAIL", gemv_persist ? "persist" : mode_name(gemv_mode), qc_layout_name(l), (long long)rows, (long long)n,
	       (long long)k, (long long)E,
	       (unsigned long long)wsb, rg, rb, (long long)bad, (long long)touched, (long long)differ,
	       (long long)fl_differ, (long long)fl_left, (long long)fu_differ, nm_err, nm_bound, (long long)nm_differ,
	       (long long)cl_differ, (long long)hint_differ,
	       rc ? " err: " : "", rc ? err.msg : "");
	ok ? n_pass++ : n_fail++;
	qc_cuda_marlin_gemv_stream_xq(0);
	qc_cuda_marlin_gemv_stream_ring(0);
	qc_cuda_marlin_gemv_stream_persist(0);
	cudaFree(d_w);
	cudaFree(d_x);
	cudaFree(d_y);
	cudaFree(d_ws);
	cudaFree(d_ex);
	free(w);
	free(x);
	free(a16);
	free(ex);
	free(truth);
	free(base);
	free(y);
	free(y1);
}

/* The kernel must refuse what it cannot do, naming the shape, before launching. */
static void check_refusals(void)
{
	struct qc_err err = { 0 };
	char dummy[64] __attribute__((aligned(16)));
	struct qc_marlin_gemm_args a = { .layout = QC_LAYOUT_MARLIN_I4, .type = QC_TYPE_Q4_0, .m = 4, .n = 96, .k = 64,
					 .a = dummy, .w = dummy, .c = dummy, .ldc = 96 };
	int rc = qc_cuda_marlin_gemm(&a, 0, &err);
	printf("%s refuses n=96 for marlin_i4: %s\n", rc == QC_EUNSUPPORTED ? "PASS" : "FAIL", err.msg);
	rc == QC_EUNSUPPORTED ? n_pass++ : n_fail++;
	a.n = 64;
	a.layout = QC_LAYOUT_GGML;
	rc = qc_cuda_marlin_gemm(&a, 0, &err);
	printf("%s refuses layout ggml: %s\n", rc == QC_EUNSUPPORTED ? "PASS" : "FAIL", err.msg);
	rc == QC_EUNSUPPORTED ? n_pass++ : n_fail++;
	a.layout = QC_LAYOUT_MARLIN_I8Z; /* holds q5_K only, in whole 256-blocks */
	a.type = QC_TYPE_Q4_K;
	a.k = 256;
	rc = qc_cuda_marlin_gemm(&a, 0, &err);
	printf("%s refuses q4_K in marlin_i8z: %s\n", rc == QC_EUNSUPPORTED ? "PASS" : "FAIL", err.msg);
	rc == QC_EUNSUPPORTED ? n_pass++ : n_fail++;
	a.type = QC_TYPE_Q5_K;
	a.k = 288;
	rc = qc_cuda_marlin_gemm(&a, 0, &err);
	printf("%s refuses q5_K with k=288: %s\n", rc == QC_EUNSUPPORTED ? "PASS" : "FAIL", err.msg);
	rc == QC_EUNSUPPORTED ? n_pass++ : n_fail++;
	a.layout = QC_LAYOUT_MARLIN_I6; /* q6_K: whole 256-blocks only */
	a.type = QC_TYPE_Q6_K;
	a.k = 288;
	rc = qc_cuda_marlin_gemm(&a, 0, &err);
	printf("%s refuses q6_K with k=288: %s\n", rc == QC_EUNSUPPORTED ? "PASS" : "FAIL", err.msg);
	rc == QC_EUNSUPPORTED ? n_pass++ : n_fail++;
}

static int cmp_float(const void *x, const void *y)
{
	float a = *(const float *)x, b = *(const float *)y;
	return a < b ? -1 : a > b;
}

/* Time per launch: R launches (rotating inputs) captured into a CUDA graph, the
 * graph replayed `reps` times between events (median); the graph keeps host
 * launch overhead out of the numbers, as a serving loop's graphs would. */
#define R_PER_GRAPH 20
typedef int (*bench_fn)(void *ctx, int i, cudaStream_t s);
static cudaStream_t bench_stream;
/* QC_BENCH_PROFILE=1 (with --gemv-bench): no checks, each timing one eager launch
 * (its time not measured): a short run for a profiler (ncu) to trace per kernel */
static int bench_profile;
static float median_us(bench_fn f, void *ctx, int reps)
{
	if (bench_profile) {
		if (f(ctx, 0, bench_stream)) {
			fprintf(stderr, "bench launch failed\n");
			exit(2);
		}
		CU(cudaStreamSynchronize(bench_stream));
		return 1.0f;
	}
	cudaEvent_t e0, e1;
	cudaGraph_t g;
	cudaGraphExec_t ge;
	float t[64];
	CU(cudaEventCreate(&e0));
	CU(cudaEventCreate(&e1));
	CU(cudaStreamBeginCapture(bench_stream, cudaStreamCaptureModeRelaxed));
	for (int i = 0; i < R_PER_GRAPH; i++)
		if (f(ctx, i, bench_stream)) {
			fprintf(stderr, "bench launch failed\n");
			exit(2);
		}
	CU(cudaStreamEndCapture(bench_stream, &g));
	CU(cudaGraphInstantiate(&ge, g, 0));
	for (int i = 0; i < 2; i++)
		CU(cudaGraphLaunch(ge, bench_stream));
	for (int i = 0; i < reps; i++) {
		CU(cudaEventRecord(e0, bench_stream));
		CU(cudaGraphLaunch(ge, bench_stream));
		CU(cudaEventRecord(e1, bench_stream));
		CU(cudaEventSynchronize(e1));
		CU(cudaEventElapsedTime(&t[i], e0, e1));
	}
	qsort(t, (size_t)reps, sizeof(float), cmp_float);
	cudaGraphExecDestroy(ge);
	cudaGraphDestroy(g);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return t[reps / 2] * 1000.0f / R_PER_GRAPH;
}

struct copy_ctx {
	void *d_src, *d_dst;
	size_t bytes;
};


#define N_COPIES 16
struct mm_ctx {
	struct qc_marlin_gemm_args a;
	void *d_w[N_COPIES];   /* rotated so the weights come from HBM, not L2 */
	int n_copies;
#ifdef QC_WITH_CUBLAS
	cublasHandle_t h;
	void *d_wf16[N_COPIES];
#endif
};

static int run_marlin(void *ctx, int i, cudaStream_t s)
{
	struct mm_ctx *c = ctx;
	struct qc_marlin_gemm_args a = c->a;
	struct qc_err err = { 0 };
	a.w = c->d_w[i % c->n_copies];
	int rc = qc_cuda_marlin_gemm(&a, s, &err);
	if (rc)
		fprintf(stderr, "marlin: %s\n", err.msg);
	return rc;
}

#ifdef QC_WITH_CUBLAS
static int run_cublas(void *ctx, int i, cudaStream_t s)
{
	struct mm_ctx *c = ctx;
	const float one = 1.0f, zero = 0.0f;
	cublasSetStream(c->h, s);
	/* column-major view: C^T (n x m) = W (n x k, ld k, transposed) * A^T (k x m) */
	return cublasGemmEx(c->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)c->a.n, (int)c->a.m, (int)c->a.k, &one,
			    c->d_wf16[i % c->n_copies], CUDA_R_16F, (int)c->a.k, c->a.a, CUDA_R_16F, (int)c->a.k, &zero,
			    c->a.c, CUDA_R_32F, (int)c->a.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS;
}
#endif

static double copy_bw; /* bytes/s, read + write */
static bool bench_wgmma; /* bench_shape also times the wgmma kernel (compute capability 9.0) */
/* the wgmma kernels' tune for bench_shape (QC_MARLIN_WGMMA_TUNE): kernel 1 is form 0 at
 * these stages and warpgroups, kernel 2 the warp-specialized form (2 unless the form
 * given is 0 or 1) */
static int bench_tune[4] = { 6, 2, 1, 2 };

struct gv_ctx {
	struct qc_cuda_mm_args a;
	void *d_w[N_COPIES];
	int n_copies;
};

static int run_gemv(void *ctx, int i, cudaStream_t s)
{
	struct gv_ctx *c = ctx;
	struct qc_cuda_mm_args a = c->a;
	struct qc_err err = { 0 };
	a.d_w = c->d_w[i % c->n_copies];
	int rc = qc_cuda_marlin_gemv(&a, s, &err);
	if (rc)
		fprintf(stderr, "gemv: %s\n", err.msg);
	return rc;
}

/* The decode GEMV: time per call (weights rotated over > 512 MiB; the split-K
 * sum in the kernel, as the backend runs it), bytes moved (weights + scales)
 * over the copy bandwidth. fuse: 0 plain, 1 RMSNorm in the loads (Q|K|V,
 * gate|up), 2 silu(x)·x2 in the loads and y += (down). */
/* the streaming partitions timed (rows = 1): blocks aimed at, tiles per warp at least */
/* first: the default; 528,8 / 264,2 / 528,2 and the cluster sum were timed and
 * dropped (docs/perf-notes.md) */
/* third column: blocks along K rounded down (one wave where it fits) or, 0, to
 * the nearest (the rule before 2026-11-27's fourth session) */
static const int stream_tunes[][3] = { { 264, 8, 1 }, { 132, 8, 1 }, { 264, 8, 0 } };

static void bench_gemv(enum qc_layout l, int64_t n, int64_t k, int rows, int fuse)
{
	uint64_t wb;
	uint8_t *w = make_weights(l, n, k, &wb);
	struct gv_ctx c;
	memset(&c, 0, sizeof c);
	c.n_copies = (int)((512ull << 20) / wb + 1);
	if (c.n_copies > N_COPIES)
		c.n_copies = N_COPIES;
	for (int i = 0; i < c.n_copies; i++) {
		CU(cudaMalloc(&c.d_w[i], wb));
		CU(cudaMemcpy(c.d_w[i], w, wb, cudaMemcpyHostToDevice));
	}
	void *d_x, *d_x2, *d_nw, *d_y, *d_ws = NULL;
	uint32_t *d_fl;
	const int64_t nf = 4 * (n / 32 + 1);
	const int n_tunes = rows == 1 ? (int)(sizeof stream_tunes / sizeof stream_tunes[0]) : 1;
	uint64_t wsb = qc_cuda_marlin_gemv_ws(k, n, rows, QC_CUDA_GEMV_KT4);
	for (int t = 0; t < n_tunes; t++) {
		qc_cuda_marlin_gemv_stream_tune(stream_tunes[t][0], stream_tunes[t][1]);
		qc_cuda_marlin_gemv_stream_wave(stream_tunes[t][2]);
		const uint64_t b = qc_cuda_marlin_gemv_ws(k, n, rows, QC_CUDA_GEMV_STREAM);
		wsb = b > wsb ? b : wsb;
	}
	qc_cuda_marlin_gemv_stream_wave(-1);
	CU(cudaMalloc(&d_x, (size_t)(rows * k) * 4));
	CU(cudaMemset(d_x, 0, (size_t)(rows * k) * 4));
	CU(cudaMalloc(&d_x2, (size_t)(rows * k) * 4));
	CU(cudaMemset(d_x2, 0, (size_t)(rows * k) * 4));
	CU(cudaMalloc(&d_nw, (size_t)k * 4));
	CU(cudaMemset(d_nw, 0, (size_t)k * 4));
	CU(cudaMalloc(&d_y, (size_t)(rows * n) * 4));
	CU(cudaMemset(d_y, 0, (size_t)(rows * n) * 4));
	CU(cudaMalloc((void **)&d_fl, (size_t)nf * 4));
	CU(cudaMemset(d_fl, 0, (size_t)nf * 4));
	if (wsb)
		CU(cudaMalloc(&d_ws, wsb));
	/* -1: the load-once kernel (kt4); then each partition with float activations,
	 * 16-bit codes, 8-bit codes; then (one row) each with floats and 16-bit codes
	 * through the shared-memory ring; then the persistent kernel with 16-bit codes
	 * and floats. Sets: 0 float, 1 x16, 2 x8, 3 ring float, 4 ring x16, 5 persist
	 * x16, 6 persist float. */
	static const int sets1[] = { 0, 1, 2, 3, 4, 5, 6 }, setsn[] = { 0, 1, 2, 5, 6 };
	const int *sets = rows == 1 ? sets1 : setsn;
	const int n_sets = rows == 1 ? 7 : 5;
	const int n_runs = n_sets * n_tunes;
	for (int t = -1; t < n_runs; t++) {
		const enum qc_cuda_gemv_kt mode = t < 0 ? QC_CUDA_GEMV_KT4 : QC_CUDA_GEMV_STREAM;
		const int set = t < 0 ? 0 : sets[t / n_tunes];
		const int xq = set == 1 || set == 4 || set == 5 ? 16 : set == 2 ? 8 : 0;
		const int ti = t < 0 ? 0 : t % n_tunes;
		if (t >= 0) {
			qc_cuda_marlin_gemv_stream_tune(stream_tunes[ti][0], stream_tunes[ti][1]);
			qc_cuda_marlin_gemv_stream_wave(stream_tunes[ti][2]);
		}
		qc_cuda_marlin_gemv_stream_xq(xq);
		qc_cuda_marlin_gemv_stream_ring(set == 3 || set == 4);
		qc_cuda_marlin_gemv_stream_persist(set >= 5);
		c.a = (struct qc_cuda_mm_args){ .type = type_of(l), .layout = l, .n_in = k, .n_out = n, .d_x = d_x,
						.ldx = k, .x_div = 1, .n_rows = rows, .d_y = d_y, .ldy = n, .d_ws = d_ws,
						.ws_bytes = wsb, .gemv_kt = mode, .d_flags = d_fl, .n_flags = nf,
						.d_norm_w = fuse == 1 ? d_nw : NULL, .norm_eps = 1e-5f,
						.d_x2 = fuse == 2 ? d_x2 : NULL, .accumulate = fuse == 2 };
		float us = median_us(run_gemv, &c, 41);
		double gbs = (double)wb / (us * 1e-6) / 1e9;
		char tune[32] = "";
		if (t >= 0)
			snprintf(tune, sizeof tune, "%d,%d%s%s%s", stream_tunes[ti][0], stream_tunes[ti][1],
				 stream_tunes[ti][2] ? "" : ",nr",
				 xq == 16 ? ",x16" : xq == 8 ? ",x8" : "",
				 set == 3 || set == 4 ? ",rg" : set >= 5 ? ",ps" : "");
		printf("gemv %-6s %-8s %-9s %-5s n=%-6lld k=%-6lld rows=%d %-9s: %7.1f us, %6.0f GB/s, %3.0f%% of copy "
		       "bandwidth\n",
		       mode_name(mode), tune, qc_layout_name(l), qc_types[type_of(l)].name, (long long)n, (long long)k,
		       rows, fuse == 1 ? "+norm" : fuse == 2 ? "+silu+acc" : "", us, gbs, 100.0 * gbs * 1e9 / copy_bw);
	}
	qc_cuda_marlin_gemv_stream_tune(0, 0);
	qc_cuda_marlin_gemv_stream_wave(-1);
	qc_cuda_marlin_gemv_stream_xq(0);
	qc_cuda_marlin_gemv_stream_ring(0);
	qc_cuda_marlin_gemv_stream_persist(0);
	for (int i = 0; i < c.n_copies; i++)
		cudaFree(c.d_w[i]);
	cudaFree(d_x);
	cudaFree(d_x2);
	cudaFree(d_nw);
	cudaFree(d_y);
	cudaFree(d_fl);
	cudaFree(d_ws);
	free(w);
}

static void bench_shape(enum qc_layout l, int64_t n, int64_t k, const int *ms, int n_ms, const int *splits, int n_splits)
{
	uint64_t wb;
	uint8_t *w = make_weights(l, n, k, &wb);
	struct mm_ctx c;
	memset(&c, 0, sizeof c);
	c.n_copies = (int)((512ull << 20) / wb + 1); /* > 512 MiB of weights: far past the 50 MB L2 */
	if (c.n_copies > N_COPIES)
		c.n_copies = N_COPIES;
	for (int i = 0; i < c.n_copies; i++) {
		CU(cudaMalloc(&c.d_w[i], wb));
		CU(cudaMemcpy(c.d_w[i], w, wb, cudaMemcpyHostToDevice));
	}
	int64_t mmax = 1;
	for (int mi = 0; mi < n_ms; mi++)
		mmax = ms[mi] > mmax ? ms[mi] : mmax;
	uint16_t *a = make_act(mmax, k);
	void *d_a, *d_c, *d_ws = NULL;
	size_t ws_max = 0;
	CU(cudaMalloc(&d_a, (size_t)(mmax * k) * 2));
	CU(cudaMalloc(&d_c, (size_t)(mmax * n) * 4));
	CU(cudaMemcpy(d_a, a, (size_t)(mmax * k) * 2, cudaMemcpyHostToDevice));
#ifdef QC_WITH_CUBLAS
	CU(cudaMalloc(&c.d_wf16[0], (size_t)(n * k) * 2));
	{
		uint16_t *hf = malloc((size_t)(n * k) * 2);
		for (int64_t i = 0; i < n * k; i++)
			hf[i] = qc_f32_to_fp16((float)urand() * 0.05f);
		CU(cudaMemcpy(c.d_wf16[0], hf, (size_t)(n * k) * 2, cudaMemcpyHostToDevice));
		free(hf);
	}
	int fcopies = (int)((512ull << 20) / (uint64_t)(n * k * 2) + 1);
	fcopies = fcopies > c.n_copies ? c.n_copies : fcopies;
	for (int i = 1; i < fcopies; i++) {
		CU(cudaMalloc(&c.d_wf16[i], (size_t)(n * k) * 2));
		CU(cudaMemcpy(c.d_wf16[i], c.d_wf16[0], (size_t)(n * k) * 2, cudaMemcpyDeviceToDevice));
	}
	for (int i = fcopies; i < c.n_copies; i++)
		c.d_wf16[i] = c.d_wf16[i % fcopies];
	CU(cublasCreate(&c.h) == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown);
	void *d_blas_ws; /* a fixed workspace: cuBLAS must not allocate inside graph capture */
	CU(cudaMalloc(&d_blas_ws, 64u << 20));
	CU(cublasSetWorkspace(c.h, d_blas_ws, 64u << 20) == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown);
#endif
	for (int mi = 0; mi < n_ms; mi++) {
		int64_t m = ms[mi];
		/* kernel 0: mma.sync; 1: wgmma (Hopper), auto splits only; 2: its warp-specialized
		 * form, auto and fixed splits 1-8 from 64 rows (the split model's check) */
		static const int ws_splits[] = { 1, 2, 4, 8 };
		for (int kern = 0; kern < (bench_wgmma ? 3 : 1); kern++)
		for (int si = -1; si < (m == 1 && !kern ? n_splits : kern == 2 && m >= 64 ? 4 : 0); si++) {
			qc_cuda_marlin_gemm_wgmma_rows(kern ? 1 : 0, INT64_MAX);
			if (kern)
				qc_cuda_marlin_gemm_wgmma_tune(bench_tune[0], bench_tune[1], bench_tune[2],
							       kern == 2 ? (bench_tune[3] == 1 ? 1 : 2) : 0);
			c.a = (struct qc_marlin_gemm_args){ .layout = l, .type = type_of(l), .m = m, .n = n, .k = k,
							    .a = d_a, .c = d_c, .ldc = n, .c_type = QC_MARLIN_C_F32 };
			c.a.w = c.d_w[0];
			if (si >= 0) {
				c.a.split = QC_MARLIN_SPLIT_FIXED;
				c.a.split_k = kern == 2 ? ws_splits[si] : splits[si];
			}
			size_t wsb;
			struct qc_err err = { 0 };
			QC_ASSERT(qc_cuda_marlin_gemm_workspace(&c.a, &wsb, &err) == QC_OK);
			if (wsb > ws_max) {
				cudaFree(d_ws);
				CU(cudaMalloc(&d_ws, wsb));
				ws_max = wsb;
			}
			c.a.workspace = d_ws;
			c.a.workspace_bytes = ws_max;
			float us = median_us(run_marlin, &c, 41);
			/* what the kernel must read: codes, scales (+ offsets); not the i4z headers */
			double wread = (double)n * (double)k * (qc_marlin_bits(l) == 8 ? 1.0 : 0.5) +
				       (double)n * (double)(k / 32) * (qc_marlin_has_offsets(l) ? 4.0 : 2.0);
			double bytes = wread + (double)(m * k) * 2 + (double)(m * n) * 4;
			double floor_us = bytes / copy_bw * 1e6;
			double tflops = 2.0 * (double)m * (double)n * (double)k / (us * 1e-6) / 1e12;
			printf("BENCH %-9s %-5s n=%-6lld k=%-5lld m=%-4lld split=%-5s(%3zu) %9.1f us  %7.1f GB/s  roofline %7.1f us (%5.1f%%)  %6.1f TFLOP/s\n",
			       qc_layout_name(l), kern == 2 ? "wg-ws" : kern ? "wgmma" : "mma", (long long)n, (long long)k, (long long)m,
			       si < 0 ? "auto" : "fixed", wsb ? wsb / ((size_t)m * (size_t)n * 4) : 1, us,
			       bytes / (us * 1e-6) / 1e9, floor_us, 100.0 * floor_us / us, tflops);
		}
#ifdef QC_WITH_CUBLAS
		if (l == QC_LAYOUT_MARLIN_I4) {
			float us = median_us(run_cublas, &c, 41);
			double bytes = (double)(n * k) * 2 + (double)(m * k) * 2 + (double)(m * n) * 4;
			printf("BENCH cublas-f16      n=%-6lld k=%-5lld m=%-4lld                %9.1f us  %7.1f GB/s  roofline %7.1f us (%5.1f%%)  %6.1f TFLOP/s\n",
			       (long long)n, (long long)k, (long long)m, us, bytes / (us * 1e-6) / 1e9,
			       bytes / copy_bw * 1e6, 100.0 * bytes / copy_bw * 1e6 / us,
			       2.0 * (double)m * (double)n * (double)k / (us * 1e-6) / 1e12);
		}
#endif
	}
	qc_cuda_marlin_gemm_wgmma_rows(128, INT64_MAX);
#ifdef QC_WITH_CUBLAS
	cublasDestroy(c.h);
	cudaFree(d_blas_ws);
	for (int i = 0; i < fcopies; i++)
		cudaFree(c.d_wf16[i]);
#endif
	for (int i = 0; i < c.n_copies; i++)
		cudaFree(c.d_w[i]);
	cudaFree(d_a);
	cudaFree(d_c);
	cudaFree(d_ws);
	free(a);
	free(w);
}

/* The GEMM's cases on fresh random weights: every layout over odd token counts,
 * group counts and splits; q5_K and hq8 on their own shapes; q6_K's. */
static void check_gemm_cases(void)
{
	static const enum qc_layout layouts[] = { QC_LAYOUT_MARLIN_I4, QC_LAYOUT_MARLIN_I8, QC_LAYOUT_MARLIN_I4Z,
						  QC_LAYOUT_MARLIN_I8Z };
	const int n_layouts = (int)(sizeof layouts / sizeof layouts[0]);
	{
		static const struct { int64_t m, n, k; } cases[] = {
			{ 1, 256, 256 },   { 1, 4096, 14336 }, { 3, 512, 4096 },  { 7, 1024, 2080 }, { 16, 192, 512 },
			{ 17, 256, 96 },   { 33, 768, 1024 },  { 64, 256, 4096 }, { 100, 512, 800 }, { 130, 320, 96 },
			{ 511, 1024, 1024 }, { 1000, 256, 512 },
		};
		for (int li = 0; li < n_layouts; li++) {
			enum qc_layout l = layouts[li];
			for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
				enum qc_marlin_c_type ct = i % 2 ? QC_MARLIN_C_F16 : QC_MARLIN_C_F32;
				z_turn = (int)i;
				if (type_of(l) == QC_TYPE_Q4_K && cases[i].k % 256)
					z_turn++; /* q4_K blocks are 256 long */
				if (!fits_k(l, cases[i].k))
					continue; /* q5_K: k a multiple of 256 only */
				check_case(l, cases[i].m, cases[i].n, cases[i].k, ct, QC_MARLIN_SPLIT_AUTO, 0);
				if (i % 3 == 0)
					check_case(l, cases[i].m, cases[i].n, cases[i].k, ct ^ 1, QC_MARLIN_SPLIT_FIXED, 3);
			}
			check_case(l, 5, 512, 4096, QC_MARLIN_C_F32, QC_MARLIN_SPLIT_FIXED, 128); /* one group per split */
		}
		/* i8z (q5_K) on its own shapes: 3 stripes (an idle warp), odd m, 5 forced splits */
		check_case(QC_LAYOUT_MARLIN_I8Z, 7, 96, 768, QC_MARLIN_C_F16, QC_MARLIN_SPLIT_AUTO, 0);
		check_case(QC_LAYOUT_MARLIN_I8Z, 40, 160, 1280, QC_MARLIN_C_F32, QC_MARLIN_SPLIT_FIXED, 5);
		check_case(QC_LAYOUT_MARLIN_I8Z, 129, 224, 2304, QC_MARLIN_C_F32, QC_MARLIN_SPLIT_AUTO, 0);
		/* i8z with hq8 (GPTQ 8-bit, compressed-tensors int8): k any multiple of 32 */
		i8z_hq8 = 1;
		check_case(QC_LAYOUT_MARLIN_I8Z, 7, 96, 160, QC_MARLIN_C_F16, QC_MARLIN_SPLIT_AUTO, 0);
		check_case(QC_LAYOUT_MARLIN_I8Z, 33, 256, 1056, QC_MARLIN_C_F32, QC_MARLIN_SPLIT_FIXED, 3);
		i8z_hq8 = 0;
	}
	{ /* marlin_i6 (q6_K) on the tensor-core GEMM: k in whole 256-blocks; forced
	   * splits of 11 and 7 groups put a stage's two groups in two 256-blocks */
		static const struct { int64_t m, n, k; int split; } c6[] = {
			{ 1, 256, 256, 0 },  { 3, 512, 4096, 0 },  { 16, 192, 512, 0 },   { 17, 256, 768, 3 },
			{ 33, 768, 1024, 3 }, { 64, 256, 4096, 0 }, { 100, 512, 1280, 0 }, { 130, 320, 256, 0 },
			{ 64, 128, 1792, 8 }, { 511, 1024, 1024, 0 },
		};
		for (size_t i = 0; i < sizeof c6 / sizeof c6[0]; i++)
			check_case(QC_LAYOUT_MARLIN_I6, c6[i].m, c6[i].n, c6[i].k, i % 2 ? QC_MARLIN_C_F16 : QC_MARLIN_C_F32,
				   c6[i].split ? QC_MARLIN_SPLIT_FIXED : QC_MARLIN_SPLIT_AUTO, c6[i].split);
	}
	/* a fused matrix's parts to outputs of their own (Q|K|V, gate|up): forced and
	 * automatic K splits (the reduce routes the columns), the decode and ws row counts */
	for (int li = 0; li < n_layouts; li++) {
		z_turn = li;
		check_parts(layouts[li], 5, 512, 4096, QC_MARLIN_SPLIT_FIXED, 3);
		check_parts(layouts[li], 64, 768, 1024, QC_MARLIN_SPLIT_AUTO, 0);
		check_parts(layouts[li], 200, 1536, 2048, QC_MARLIN_SPLIT_AUTO, 0);
	}
	check_parts(QC_LAYOUT_MARLIN_I6, 130, 768, 1024, QC_MARLIN_SPLIT_AUTO, 0);
	check_parts(QC_LAYOUT_MARLIN_I4, 256, 6144, 4096, QC_MARLIN_SPLIT_AUTO, 0);
	/* token counts around the wgmma kernel's 64-token blocks; 3 stripes of 4 (an idle warp) */
	check_case(QC_LAYOUT_MARLIN_I4, 65, 192, 1024, QC_MARLIN_C_F16, QC_MARLIN_SPLIT_AUTO, 0);
	check_case(QC_LAYOUT_MARLIN_I4, 300, 448, 2048, QC_MARLIN_C_F32, QC_MARLIN_SPLIT_FIXED, 5);
	check_case(QC_LAYOUT_MARLIN_I8, 127, 96, 1024, QC_MARLIN_C_F32, QC_MARLIN_SPLIT_AUTO, 0);
}

int main(int argc, char **argv)
{
	/* --check: every check, no timings; --gemv-check: the decode GEMV's checks only
	 * (quick: the one compute-sanitizer runs); --gemv-bench: the GEMV's timings */
	int gemv_check = argc > 1 && strcmp(argv[1], "--gemv-check") == 0;
	/* --table-check: the backend's table entries alone (marlin_mm.cu's kinds and
	 * their fusions), with the experts and GEMV cases between them */
	const int table_check = argc > 1 && strcmp(argv[1], "--table-check") == 0;
	int do_bench = !(argc > 1 && (strcmp(argv[1], "--check") == 0 || strcmp(argv[1], "--gemm-check") == 0 ||
				      gemv_check || table_check));
	int gemv_only = argc > 1 && strcmp(argv[1], "--gemv-bench") == 0;
	/* --wg-bench: the GEMM timings on the 8B shapes at 1-4096 tokens, no checks;
	 * --gemm-check: the GEMM's cases alone (both kernels where the device has wgmma) */
	const int wg_bench = argc > 1 && strcmp(argv[1], "--wg-bench") == 0;
	const int gemm_check = argc > 1 && strcmp(argv[1], "--gemm-check") == 0;
	bench_profile = (gemv_only || (argc > 1 && !strcmp(argv[1], "--wg-bench"))) && getenv("QC_BENCH_PROFILE") &&
			!strcmp(getenv("QC_BENCH_PROFILE"), "1");
	/* the timings alone, when a check run of the same binary came first (a device
	 * call's time limit): QC_BENCH_SKIP_CHECKS=1 with --gemv-bench */
	const int skip_checks =
		gemv_only && getenv("QC_BENCH_SKIP_CHECKS") && !strcmp(getenv("QC_BENCH_SKIP_CHECKS"), "1");
	setvbuf(stdout, NULL, _IOLBF, 0); /* a log cut by a timeout still shows the last case */
	struct cudaDeviceProp prop;
	CU(cudaGetDeviceProperties(&prop, 0));
	printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

	static const enum qc_layout layouts[] = { QC_LAYOUT_MARLIN_I4, QC_LAYOUT_MARLIN_I8, QC_LAYOUT_MARLIN_I4Z,
						  QC_LAYOUT_MARLIN_I8Z };
	const int n_layouts = (int)(sizeof layouts / sizeof layouts[0]);
	const bool wgmma_dev = prop.major == 9 && prop.minor == 0;
	if (!gemv_check && !bench_profile && !skip_checks && !wg_bench) {
		qc_cuda_marlin_gemm_wgmma_rows(0, INT64_MAX); /* first every case on the mma.sync kernel */
		if (!table_check && (!getenv("QC_GEMM_CHECK_FROM") || atoi(getenv("QC_GEMM_CHECK_FROM")) == 0)) {
			static const int mma_rows[] = { 16, 64, 0 }; /* grouped: mma.sync tiles, then the rule */
			check_gemm_cases();
			check_moe_grouped_cases(mma_rows, 3);
		}
		if (wgmma_dev && !table_check) { /* the same cases on the Hopper kernels: form 0
				  * (marlin_wgmma.cu) at 2 warpgroups and 6 stages, then 1 and 4;
				  * then both token widths of the warp-specialized forms 1 and 2
				  * (marlin_wgmma_ws.cu; form 2 is the default, i4z and i6 take form 1) */
			static const int tunes[][4] = { { 6, 2, 1, 0 }, { 4, 1, 0, 0 }, { 6, 2, 1, 1 }, { 4, 1, 1, 1 },
							{ 6, 2, 1, 2 }, { 4, 1, 1, 2 } };
			static const char *const form_file[] = { "marlin_wgmma.cu", "marlin_wgmma_ws.cu",
								 "marlin_wgmma_ws.cu (form 2)" };
			/* QC_GEMM_CHECK_FROM=t: only passes t.. (1: the first wgmma pass), and not the
			 * mma.sync one unless t is 0 (a device call's time limit) */
			const char *from = getenv("QC_GEMM_CHECK_FROM");
			for (int t = from ? atoi(from) - 1 : 0; t < 6; t++) {
				if (t < 0)
					continue;
				printf("wgmma pass: every case on %s, %d stages, %d warpgroups, split_free %d\n",
				       form_file[tunes[t][3]], tunes[t][0], tunes[t][1], tunes[t][2]);
				qc_cuda_marlin_gemm_wgmma_tune(tunes[t][0], tunes[t][1], tunes[t][2], tunes[t][3]);
				qc_cuda_marlin_gemm_wgmma_rows(1, INT64_MAX);
				want_wgmma = true;
				check_gemm_cases();
				want_wgmma = false;
				if (tunes[t][3] >= 1 && tunes[t][0] == 6) { /* 128-row grouped tiles: each
									   * warp-specialized form */
					static const int ws_rows[] = { 128 };
					check_moe_grouped_cases(ws_rows, 1);
				}
			}
			qc_cuda_marlin_gemm_wgmma_tune(6, 2, 1, 2); /* the backend's defaults */
			qc_cuda_marlin_gemm_wgmma_rows(128, INT64_MAX);
		}
		if (gemm_check)
			goto checked;
		i8z_hq8 = 1;
		check_experts(QC_LAYOUT_MARLIN_I8Z, 5, 128, 544, 3);
		check_table_entry(QC_LAYOUT_MARLIN_I8Z, 3, 64, 320, NULL);
		check_gemv(QC_LAYOUT_MARLIN_I8Z, 1, 256, 1056, 1);
		check_gemv(QC_LAYOUT_MARLIN_I8Z, 6, 256, 512, 3);
		i8z_hq8 = 0;
		check_experts(QC_LAYOUT_MARLIN_I4, 9, 256, 512, 3);
		check_experts(QC_LAYOUT_MARLIN_I8, 5, 320, 1056, 4);
		z_turn = 0;
		check_experts(QC_LAYOUT_MARLIN_I4Z, 6, 192, 512, 2); /* q4_K */
		check_experts(QC_LAYOUT_MARLIN_I8Z, 7, 160, 768, 3); /* q5_K */
		check_table_entry(QC_LAYOUT_MARLIN_I4, 3, 512, 1024, NULL);
		check_table_entry(QC_LAYOUT_MARLIN_I8, 37, 256, 512, NULL);
		z_turn = 1;
		check_table_entry(QC_LAYOUT_MARLIN_I4Z, 20, 128, 256, NULL); /* q4_1 */
		check_table_entry(QC_LAYOUT_MARLIN_I8Z, 19, 96, 512, NULL);  /* q5_K */
		{
			check_experts(QC_LAYOUT_MARLIN_I6, 6, 192, 512, 3);
			check_table_entry(QC_LAYOUT_MARLIN_I6, 20, 128, 512, NULL);
			check_table_entry(QC_LAYOUT_MARLIN_I6, 70, 64, 4096, NULL);
		}
		{ /* 128+ rows: the weight decoded to fp16 (marlin_dequant.cu), then cuBLAS */
			cublasHandle_t h;
			if (cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) {
				check_table_entry(QC_LAYOUT_MARLIN_I4, 150, 512, 1024, h);
				check_table_entry(QC_LAYOUT_MARLIN_I8, 131, 256, 2080, h);
				for (z_turn = 0; z_turn < 3; z_turn++) /* q4_K, q4_1, hq4 */
					check_table_entry(QC_LAYOUT_MARLIN_I4Z, 200, 192, 512, h);
				check_table_entry(QC_LAYOUT_MARLIN_I8Z, 140, 160, 1024, h); /* q5_K */
				i8z_hq8 = 1;
				check_table_entry(QC_LAYOUT_MARLIN_I8Z, 150, 96, 544, h); /* hq8 */
				i8z_hq8 = 0;
				check_table_entry(QC_LAYOUT_MARLIN_I6, 128, 64, 256, h); /* q6_K */
				check_table_entry(QC_LAYOUT_MARLIN_I6, 140, 192, 1024, h);
				check_table_entry(QC_LAYOUT_MARLIN_I6, 129, 128, 4096, h);
				cublasDestroy(h);
			} else {
				printf("FAIL cublasCreate\n");
				n_fail++;
			}
		}
		if (table_check)
			goto checked;
	}
	if (bench_profile || skip_checks || wg_bench)
		goto checked;
	static const struct { int64_t rows, n, k, e; } gv[] = {
		{ 1, 256, 256, 1 }, { 1, 4096, 4096, 1 }, { 3, 512, 2080, 1 }, { 8, 192, 32, 1 },
		{ 11, 320, 1536, 1 }, { 1, 1024, 14336, 1 }, { 6, 256, 512, 3 }, { 13, 128, 1056, 4 },
	};
	/* both K partitions: load-once warps and streaming blocks (experts: load-once) */
	/* kt4; stream at the default partition and at 528,2, with float activations,
	 * 16-bit codes, 8-bit codes; then the shared-memory ring at the default
	 * partition with floats and 16-bit codes */
	/* then the persistent kernel with 16-bit codes and floats, at the default
	 * partition and at 528,2 (more blocks than are resident) */
	for (int mode = 0; mode < 13; mode++) {
		gemv_mode = mode ? QC_CUDA_GEMV_STREAM : QC_CUDA_GEMV_KT4;
		gemv_xq = mode == 8 || mode == 3 || mode == 4 || mode == 9 || mode == 10 ? 16
			  : mode == 5 || mode == 6				   ? 8
										   : 0;
		gemv_ring = mode == 7 || mode == 8;
		gemv_persist = mode >= 9;
		const bool alt = mode && mode % 2 == 0 && (mode < 7 || mode >= 9); /* 2, 4, 6, 10, 12 */
		qc_cuda_marlin_gemv_stream_tune(alt ? 528 : 0, alt ? 2 : 0);
		for (int li = 0; li < n_layouts; li++)
			for (size_t i = 0; i < sizeof gv / sizeof gv[0]; i++) {
				enum qc_layout l = layouts[li];
				z_turn = (int)i;
				if (type_of(l) == QC_TYPE_Q4_K && gv[i].k % 256)
					z_turn++; /* q4_K blocks are 256 long */
				if (gv[i].n % qc_marlin_stripe(l) || !fits_k(l, gv[i].k))
					continue;
				check_gemv(l, gv[i].rows, gv[i].n, gv[i].k, gv[i].e);
			}
		/* i8z (q5_K): several rows of 3 stripes (batch invariance), MoE rows of 4 experts */
		check_gemv(QC_LAYOUT_MARLIN_I8Z, 5, 96, 768, 1);
		check_gemv(QC_LAYOUT_MARLIN_I8Z, 9, 160, 512, 4);
		/* i6 (q6_K): one row, ROWS rows and a ragged chunk, long K, MoE rows */
		check_gemv(QC_LAYOUT_MARLIN_I6, 1, 256, 256, 1);
		check_gemv(QC_LAYOUT_MARLIN_I6, 1, 1024, 4096, 1);
		check_gemv(QC_LAYOUT_MARLIN_I6, 6, 192, 1536, 1);
		check_gemv(QC_LAYOUT_MARLIN_I6, 1, 512, 14336, 1);
		check_gemv(QC_LAYOUT_MARLIN_I6, 5, 128, 768, 3);
	}
	qc_cuda_marlin_gemv_stream_tune(0, 0);
	gemv_ring = 0;
	/* streaming: a block of 16 tiles over 2 k-tiles (7 idle warps), ragged last
	 * blocks, 2 row chunks, the 8B shapes' partitions; float and int8 activations */
	gemv_mode = QC_CUDA_GEMV_STREAM;
	/* floats, 8-bit, 16-bit codes; the ring with floats, 16-bit; the persistent
	 * kernel with 16-bit codes, floats */
	for (int xi = 0; xi < 7; xi++) {
		gemv_xq = xi < 3 ? xi * 8 : xi == 3 || xi == 6 ? 0 : 16;
		gemv_ring = xi == 3 || xi == 4;
		gemv_persist = xi >= 5;
		z_turn = 0;
		check_gemv(QC_LAYOUT_MARLIN_I4, 5, 64, 32, 1);
		check_gemv(QC_LAYOUT_MARLIN_I4, 2, 128, 4128, 1);
		check_gemv(QC_LAYOUT_MARLIN_I8, 6, 96, 1568, 1);
		if (!getenv("QC_GPU_TEST_QUICK")) { /* the sanitizer runs skip the big shapes */
			check_gemv(QC_LAYOUT_MARLIN_I4, 1, 6144, 4096, 1);
			check_gemv(QC_LAYOUT_MARLIN_I4, 4, 4096, 14336, 1);
			check_gemv(QC_LAYOUT_MARLIN_I4Z, 1, 28672, 4096, 1);
			check_gemv(QC_LAYOUT_MARLIN_I8, 1, 4096, 4096, 1);
			check_gemv(QC_LAYOUT_MARLIN_I8Z, 3, 2048, 4096, 1);
			check_gemv(QC_LAYOUT_MARLIN_I6, 1, 4096, 14336, 1); /* Q4_K_M's q6_K ffn_down */
			check_gemv(QC_LAYOUT_MARLIN_I6, 4, 1024, 4096, 1);  /* its q6_K attn_v */
			/* ROWS rows, one block along a 4096 K: the staged x and the epilogues'
			 * static arrays pass the default 48 KB of shared memory */
			check_gemv(QC_LAYOUT_MARLIN_I4, 4, 12288, 4096, 1);
		}
	}
	gemv_xq = 0;
	gemv_ring = 0;
	gemv_persist = 0;
	gemv_mode = QC_CUDA_GEMV_KT4;
	check_refusals();
checked:
	printf("marlin_gemm_test: %d passed, %d failed\n", n_pass, n_fail);
	if (!do_bench)
		return n_fail ? 1 : 0;
	if (n_fail)
		printf("(timings below are of a kernel that failed checks)\n");

	CU(cudaStreamCreate(&bench_stream));
	/* copy bandwidth: 1 GiB device to device, read + write counted */
	struct copy_ctx cc = { .bytes = 1ull << 30 };
	CU(cudaMalloc(&cc.d_src, cc.bytes));
	CU(cudaMalloc(&cc.d_dst, cc.bytes));
	CU(cudaMemset(cc.d_src, 0x5a, cc.bytes));
	/* timed eagerly, one copy between events (1 GiB dwarfs the launch); a graph
	 * of memcpy nodes measured lower than cuBLAS reads in the first runs */
	float ct[21];
	cudaEvent_t c0, c1;
	CU(cudaEventCreate(&c0));
	CU(cudaEventCreate(&c1));
	for (int i = 0; i < 24; i++) {
		CU(cudaEventRecord(c0, bench_stream));
		CU(cudaMemcpyAsync(cc.d_dst, cc.d_src, cc.bytes, cudaMemcpyDeviceToDevice, bench_stream));
		CU(cudaEventRecord(c1, bench_stream));
		CU(cudaEventSynchronize(c1));
		if (i >= 3)
			CU(cudaEventElapsedTime(&ct[i - 3], c0, c1));
	}
	qsort(ct, 21, sizeof(float), cmp_float);
	float cus = ct[10] * 1000.0f;
	copy_bw = 2.0 * (double)cc.bytes / (cus * 1e-6);
	printf("copy bandwidth: %.0f GB/s (1 GiB D2D, read + write)\n", copy_bw / 1e9);
	cudaFree(cc.d_src);
	cudaFree(cc.d_dst);

	if (gemv_only) {
		/* the Llama-3-8B decode shapes as the backend launches them: Q|K|V and
		 * gate|up in one launch with the norm, down with silu·x2 and the add */
		static const struct { enum qc_layout l; int64_t n, k; int fuse; } sh[] = {
			{ QC_LAYOUT_MARLIN_I4, 6144, 4096, 1 },   { QC_LAYOUT_MARLIN_I4, 4096, 4096, 0 },
			{ QC_LAYOUT_MARLIN_I4, 28672, 4096, 1 },  { QC_LAYOUT_MARLIN_I4, 4096, 14336, 2 },
			{ QC_LAYOUT_MARLIN_I4, 128256, 4096, 0 }, { QC_LAYOUT_MARLIN_I4, 14336, 4096, 0 },
			{ QC_LAYOUT_MARLIN_I8, 6144, 4096, 1 },   { QC_LAYOUT_MARLIN_I8, 4096, 4096, 0 },
			{ QC_LAYOUT_MARLIN_I8, 28672, 4096, 1 },  { QC_LAYOUT_MARLIN_I8, 4096, 14336, 2 },
			{ QC_LAYOUT_MARLIN_I4Z, 28672, 4096, 1 }, { QC_LAYOUT_MARLIN_I8Z, 14336, 4096, 0 },
			/* Q4_K_M's q6_K matrices: ffn_down, output, attn_v */
			{ QC_LAYOUT_MARLIN_I6, 4096, 14336, 2 },  { QC_LAYOUT_MARLIN_I6, 128256, 4096, 0 },
			{ QC_LAYOUT_MARLIN_I6, 1024, 4096, 1 },
			/* SmolLM2-135M's (int8): latency, not bandwidth */
			{ QC_LAYOUT_MARLIN_I8, 960, 576, 1 },     { QC_LAYOUT_MARLIN_I8, 576, 576, 0 },
			{ QC_LAYOUT_MARLIN_I8, 3072, 576, 1 },    { QC_LAYOUT_MARLIN_I8, 576, 1536, 2 },
			{ QC_LAYOUT_MARLIN_I8, 49152, 576, 0 },
		};
		for (int rows = 1; rows <= 4; rows += 3)
			for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
				if (rows > 1 && i > 5)
					break;
				z_turn = 0;
				bench_gemv(sh[i].l, sh[i].n, sh[i].k, rows, sh[i].fuse);
			}
		return n_fail ? 1 : 0;
	}
	bench_wgmma = wgmma_dev;
	{ /* QC_MARLIN_WGMMA_TUNE="stages,warpgroups,split_free,form", as the backend reads it */
		const char *wt = getenv("QC_MARLIN_WGMMA_TUNE");
		if (wt && *wt) {
			char *q = (char *)wt;
			for (int i = 0; i < 4 && *q; i++) {
				bench_tune[i] = (int)strtol(q, &q, 10);
				if (*q == ',')
					q++;
			}
			printf("wgmma tune: %d stages, %d warpgroups, split_free %d, form %d\n", bench_tune[0],
			       bench_tune[1], bench_tune[2], bench_tune[3]);
		}
		qc_cuda_marlin_gemm_wgmma_tune(bench_tune[0], bench_tune[1], bench_tune[2], bench_tune[3]);
	}
	static const int splits[] = { 1, 4, 8, 16, 32 };
	if (wg_bench) {
		/* issue #18's table: the 8B shapes, mma.sync and wgmma against cuBLAS fp16 */
		static const int wm[] = { 1, 16, 64, 256, 1024, 4096 };
		if (getenv("QC_WG_BENCH_QUICK")) { /* A/B of the kernel's variants: two shapes, 64-1024 tokens */
			bench_shape(QC_LAYOUT_MARLIN_I4, 4096, 4096, wm + 2, 3, splits, 0);
			bench_shape(QC_LAYOUT_MARLIN_I4, 28672, 4096, wm + 2, 3, splits, 0);
			return n_fail ? 1 : 0;
		}
		bench_shape(QC_LAYOUT_MARLIN_I4, 4096, 4096, wm, 6, splits, 0);    /* q / o */
		bench_shape(QC_LAYOUT_MARLIN_I4, 6144, 4096, wm, 6, splits, 0);    /* q|k|v */
		bench_shape(QC_LAYOUT_MARLIN_I4, 28672, 4096, wm, 6, splits, 0);   /* gate|up */
		bench_shape(QC_LAYOUT_MARLIN_I4, 4096, 14336, wm, 6, splits, 0);   /* down */
		bench_shape(QC_LAYOUT_MARLIN_I4, 128256, 4096, wm, 5, splits, 0);  /* vocabulary, to 1024 */
		bench_shape(QC_LAYOUT_MARLIN_I8, 28672, 4096, wm, 6, splits, 0);
		bench_shape(QC_LAYOUT_MARLIN_I8, 4096, 14336, wm, 6, splits, 0);
		z_turn = 0;
		bench_shape(QC_LAYOUT_MARLIN_I4Z, 28672, 4096, wm, 6, splits, 0); /* q4_K */
		bench_shape(QC_LAYOUT_MARLIN_I6, 4096, 14336, wm, 6, splits, 0);  /* q6_K */
		bench_shape(QC_LAYOUT_MARLIN_I8Z, 28672, 4096, wm, 6, splits, 0); /* q5_K */
		return n_fail ? 1 : 0;
	}
	static const int ms[] = { 1, 16, 64, 512 };
	bench_shape(QC_LAYOUT_MARLIN_I4, 14336, 4096, ms, 4, splits, 5); /* gate / up */
	bench_shape(QC_LAYOUT_MARLIN_I4, 4096, 14336, ms, 4, splits, 5); /* down */
	bench_shape(QC_LAYOUT_MARLIN_I4, 4096, 4096, ms, 4, splits, 0);  /* q / o */
	bench_shape(QC_LAYOUT_MARLIN_I4, 1024, 4096, ms, 4, splits, 0);  /* k / v */
	bench_shape(QC_LAYOUT_MARLIN_I8, 14336, 4096, ms, 4, splits, 5);
	bench_shape(QC_LAYOUT_MARLIN_I8, 4096, 14336, ms, 4, splits, 0);
	z_turn = 0;
	bench_shape(QC_LAYOUT_MARLIN_I4Z, 14336, 4096, ms, 4, splits, 0); /* q4_K */
	bench_shape(QC_LAYOUT_MARLIN_I8Z, 14336, 4096, ms, 4, splits, 0); /* q5_K */
	return n_fail ? 1 : 0;
}
