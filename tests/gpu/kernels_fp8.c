/* kernels_fp8.c — test_kernels, W8A8 FP8 (fp8_gemm.cu) against runtime/ops/fp8_gemm.c:
 * the activation codes and scales bit for bit (static and dynamic, rows with zeros, tiny
 * and saturating values), then whole GEMMs through the dispatch table on fresh random
 * fp8_rows weights with NaN-poisoned outputs (gaps between rows must stay NaN) against the
 * reference's double sums: |gpu - ref| <= (2^-10 + 2^-22 (n_in/32 + 4)) sum |w x|. The
 * first term is the hardware's (for the GEMM; the GEMV up to 8 rows sums exact products
 * in fp32, well inside it): Hopper's FP8 MMA keeps ~14 bits of its running sum inside
 * an instruction (fp8_gemm.cu's header; measured up to 2^-11.4 sum |w x| at K = 64, H200),
 * the second fp32 sums in any order. A wrong scale or row moves y by O(|y|), far past it;
 * the activation codes themselves are checked bit for bit first.
 */
#include "kernels_harness.h"
#include "kernels/fp8_act.h"
#include "kernels/matmul_dispatch.h"
#include "act_fp8.h"
#include "dequant_hfq.h"
#include "layout.h"
#include "layout_fp8.h"
#include "qblock.h"

/* n rows of k f8_a8 blocks, one scale per row, activation scale a; no NaN codes */
static uint8_t *fp8_weights(int64_t n, int64_t k, float a)
{
	const uint64_t rb = (uint64_t)(k / 32) * sizeof(struct qc_block_F8A8);
	uint8_t *rows = malloc(rb * (uint64_t)n);
	struct qc_block_F8A8 b;
	qc_hfq_put_f32(b.a, a);
	for (int64_t r = 0; r < n; r++) {
		qc_hfq_put_f32(b.d, frand(0.0005f, 0.01f));
		for (int64_t i = 0; i < k / 32; i++) {
			for (int j = 0; j < 32; j++) {
				const uint8_t c = (uint8_t)rnd();
				b.qs[j] = (c & 0x7f) == 0x7f ? (uint8_t)(c ^ 1) : c;
			}
			memcpy(rows + (uint64_t)r * rb + (uint64_t)i * sizeof b, &b, sizeof b);
		}
	}
	return rows;
}

/* sum_i |w[o][i] xq[i]| for row o of the f8_a8 blocks `rows` (k elements) and the rounded
 * activations xq; wrow: k floats of room */
static double row_mag(const uint8_t *rows, int64_t k, int64_t o, const float *xq, float *wrow)
{
	qc_types[QC_TYPE_F8A8].dequant_row(rows + (uint64_t)o * (uint64_t)(k / 32) * sizeof(struct qc_block_F8A8), wrow, k);
	double mag = 0;
	for (int64_t i = 0; i < k; i++)
		mag += fabs((double)wrow[i] * (double)xq[i]);
	return mag;
}

static void act_codes(void)
{
	const int64_t k = 4096 + 32, n_rows = 37, ldx = k + 7;
	float *x = malloc(sizeof(float) * (size_t)(n_rows * ldx));
	fill(x, (size_t)(n_rows * ldx), -3, 3);
	for (int64_t i = 0; i < ldx; i++)
		x[5 * ldx + i] = 0.0f; /* an all-zero row: the eps scale */
	for (int64_t i = 0; i < ldx; i++)
		x[6 * ldx + i] *= 1e-30f;
	x[7 * ldx + 3] = 5000.0f; /* saturates under the static scale */
	uint8_t *want = malloc((size_t)(n_rows * k)), *got = malloc((size_t)(n_rows * k));
	float ws[64], gs[64];
	const float as[2] = {0.0f, 0.00390625f};
	float *d_x = up(x, sizeof(float) * (size_t)(n_rows * ldx)), *d_a = up(NULL, 4), *d_s = poisoned(4 * 64);
	uint8_t *d_c = poisoned((size_t)(n_rows * k));
	struct qc_err err = {0};
	for (int m = 0; m < 2; m++) {
		cudaMemcpy(d_a, &as[m], 4, cudaMemcpyHostToDevice);
		qc_ref_fp8_act_quant(x, ldx, n_rows, k, as[m], want, ws);
		int rc = qc_cuda_fp8_act_quant(d_x, ldx, n_rows, k, d_a, d_c, d_s, 0, &err);
		CHECK(rc == QC_OK, "fp8_act_quant: %s", err.msg);
		down(got, d_c, (size_t)(n_rows * k));
		down(gs, d_s, 4 * (size_t)n_rows);
		int64_t bad = 0;
		for (int64_t i = 0; i < n_rows * k; i++)
			bad += got[i] != want[i];
		CHECK(bad == 0 && memcmp(gs, ws, 4 * (size_t)n_rows) == 0,
		      "fp8_act_quant (%s): %lld codes differ, scales %s", m ? "static" : "dynamic", (long long)bad,
		      memcmp(gs, ws, 4 * (size_t)n_rows) ? "differ" : "equal");
	}
	printf("  fp8_act_quant: %lld rows x %lld, static and dynamic: codes and scales bit for bit\n",
	       (long long)n_rows, (long long)k);
	cudaFree(d_x);
	cudaFree(d_a);
	cudaFree(d_s);
	cudaFree(d_c);
	free(x);
	free(want);
	free(got);
}

static void gemm_case(int64_t k, int64_t n, int64_t n_rows, float a, int64_t pad, cublasHandle_t blas, double *worst)
{
	const int64_t ne[4] = {k, n, 1, 1}, ldx = k + 5, ldy = n + pad;
	uint8_t *rows = fp8_weights(n, k, a);
	uint64_t bytes = 0;
	struct qc_err err = {0};
	qc_layout_bytes(QC_LAYOUT_FP8_ROWS, QC_TYPE_F8A8, ne, &bytes);
	uint8_t *pk = malloc(bytes);
	CHECK(qc_layout_pack_slice(QC_LAYOUT_FP8_ROWS, QC_TYPE_F8A8, ne, rows, pk, &err) == QC_OK, "pack: %s", err.msg);
	float *x = malloc(sizeof(float) * (size_t)(n_rows * ldx));
	fill(x, (size_t)(n_rows * ldx), -2, 2);
	const size_t ny = (size_t)(n_rows * ldy);
	float *want = malloc(sizeof(float) * ny), *got = malloc(sizeof(float) * ny);
	CHECK(qc_ref_fp8_gemm(pk, k, n, x, ldx, n_rows, want, ldy) == QC_OK, "reference");
	const struct qc_cuda_mm_kernels *kk = qc_cuda_mm_find(QC_LAYOUT_FP8_ROWS, QC_TYPE_F8A8);
	const struct qc_kernel_rows kr = QC_KERNEL_ROWS_DEFAULT;
	const struct qc_cuda_mm_tuning tun = QC_CUDA_MM_TUNING_DEFAULT;
	enum qc_kernel_kind kind = qc_layout_kernel(QC_LAYOUT_FP8_ROWS, n_rows, false, k, n, &kr);
	CHECK(kk && kind == (n_rows <= 1 ? QC_KERNEL_GEMV : QC_KERNEL_MMA) && kk->run[kind],
	      "the table's kernel for fp8_rows, %lld rows", (long long)n_rows);
	if (!kk || !kk->run[kind])
		return;
	const uint64_t wsb = kk->ws_bytes(k, n, n_rows, &tun);
	uint8_t *d_w = up(pk, bytes + QC_CUDA_MM_PAD);
	float *d_x = up(x, sizeof(float) * (size_t)(n_rows * ldx)), *d_y = poisoned(sizeof(float) * ny);
	void *d_ws = up(NULL, wsb);
	struct qc_cuda_mm_args ar = {0};
	ar.d_w = d_w;
	ar.type = QC_TYPE_F8A8;
	ar.layout = QC_LAYOUT_FP8_ROWS;
	ar.n_in = k;
	ar.n_out = n;
	ar.row_bytes = (uint64_t)k;
	ar.mat_stride = bytes;
	ar.d_x = d_x;
	ar.ldx = ldx;
	ar.x_div = 1;
	ar.n_rows = n_rows;
	ar.d_y = d_y;
	ar.ldy = ldy;
	ar.d_ws = d_ws;
	ar.ws_bytes = wsb;
	ar.blas = blas;
	const int rc = kk->run[kind](&ar, 0, &err);
	CHECK(rc == QC_OK, "fp8_gemm %lld x %lld x %lld: %s", (long long)n_rows, (long long)n, (long long)k, err.msg);
	down(got, d_y, sizeof(float) * ny);
	double e = 0;
	bool gaps = true;
	float *wrow = malloc(sizeof(float) * (size_t)k);
	float *xq = malloc(sizeof(float) * (size_t)k);
	for (int64_t t = 0; t < n_rows; t++) {
		qc_act_fp8_row(x + t * ldx, k, a, NULL, xq);
		for (int64_t o = 0; o < n; o++) {
			const double mag = row_mag(rows, k, o, xq, wrow);
			const double bound = (0x1p-10 + 0x1p-22 * ((double)k / 32.0 + 4.0)) * mag + 1e-30;
			const double r = fabs((double)got[t * ldy + o] - (double)want[t * ldy + o]) / bound;
			e = !(r <= e) ? (isnan(r) ? INFINITY : r) : e;
		}
		for (int64_t o = n; o < ldy; o++)
			gaps &= isnan(got[t * ldy + o]);
	}
	CHECK(e <= 1.0, "fp8_gemm %lld x %lld x %lld (a %g, ldy %lld): error %.3g x the bound", (long long)n_rows,
	      (long long)n, (long long)k, (double)a, (long long)ldy, e);
	CHECK(gaps, "fp8_gemm wrote between rows");
	/* the GEMV takes any row count (the table gives it one; a row boundary may give it
	   more, in launches of 8): up to 9 rows it runs too, against the same reference,
	   and each row alone gives the batch's bits */
	if (n_rows <= 9 && kk->run[QC_KERNEL_GEMV]) {
		double e2 = 0;
		for (size_t i = 0; i < ny; i++)
			got[i] = NAN;
		cudaMemset(d_y, 0xff, sizeof(float) * ny);
		CHECK(kk->run[QC_KERNEL_GEMV](&ar, 0, &err) == QC_OK, "fp8_gemv: %s", err.msg);
		down(got, d_y, sizeof(float) * ny);
		for (int64_t t = 0; t < n_rows; t++) {
			qc_act_fp8_row(x + t * ldx, k, a, NULL, xq);
			for (int64_t o = 0; o < n; o++) {
				const double mag = row_mag(rows, k, o, xq, wrow);
				/* exact products, fp32 sums: the float bound alone */
				const double r = fabs((double)got[t * ldy + o] - (double)want[t * ldy + o]) /
						 (0x1p-22 * ((double)k / 32.0 + 4.0) * mag + 1e-30);
				e2 = !(r <= e2) ? (isnan(r) ? INFINITY : r) : e2;
			}
		}
		CHECK(e2 <= 1.0, "fp8_gemv %lld x %lld x %lld: error %.3g x the float bound", (long long)n_rows,
		      (long long)n, (long long)k, e2);
		kind = QC_KERNEL_GEMV;
	}
	if (kind == QC_KERNEL_GEMV) {
		bool alone = true;
		float *one = malloc(sizeof(float) * (size_t)n);
		for (int64_t t = 0; t < n_rows; t++) {
			struct qc_cuda_mm_args a1 = ar;
			a1.d_x = d_x + t * ldx;
			a1.n_rows = 1;
			CHECK(kk->run[kind](&a1, 0, &err) == QC_OK, "fp8_gemv alone: %s", err.msg);
			down(one, d_y, sizeof(float) * (size_t)n);
			alone &= memcmp(one, got + t * ldy, sizeof(float) * (size_t)n) == 0;
		}
		CHECK(alone, "fp8_gemv %lld x %lld x %lld: a row alone differs from the batch", (long long)n_rows,
		      (long long)n, (long long)k);
		free(one);
	}
	*worst = e > *worst ? e : *worst;
	cudaFree(d_w);
	cudaFree(d_x);
	cudaFree(d_y);
	cudaFree(d_ws);
	free(rows);
	free(pk);
	free(x);
	free(want);
	free(got);
	free(wrow);
	free(xq);
}

void test_fp8_gemm(cublasHandle_t blas)
{
	act_codes();
	const int64_t shapes[][2] = {{64, 32}, {256, 96}, {4096, 1024}, {1024, 48}, {quick ? 2048 : 14336, 256}};
	const int64_t rows[] = {1, 2, 3, 7, 8, 9, 16, 33, 128, 300};
	double worst = 0;
	int n = 0;
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
		for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
			for (int m = 0; m < 2; m++) {
				gemm_case(shapes[s][0], shapes[s][1], rows[r], m ? 0.0078125f : 0.0f, (int64_t)((r + s) % 2 ? 4 : 3),
					  blas, &worst);
				n++;
			}
	printf("  fp8_gemv (<= 8 rows) / fp8_gemm: %d cases (static and dynamic, 1..300 rows, ldy = n + 3 and n + 4), worst "
	       "%.3f of the bound\n",
	       n, worst);
	CHECK(worst > 0.0, "the errors are measured (a bound never approached proves nothing about the check)");
}
