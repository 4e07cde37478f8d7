/* test_layout_marlin.c — the marlin layouts (formats/layout_marlin.c).
 * Random q4_0/q8_0 tensors (random bytes: any code, any scale bits, NaN too) of
 * several shapes: pack then unpack gives the input back byte for byte, for whole
 * tensors and arbitrary row spans; shapes that do not fit stay ggml with a reason;
 * hand-placed elements sit where docs/layout-marlin.md says (an independent
 * source: the doc's formulas, not this code); a flipped packed byte is caught; the
 * GEMM reference, reading the packed bytes by the doc's formulas, equals a matmul
 * over the ggml decoder's values; a fixture converted for sm90 holds marlin
 * tensors and dumps identical to the GGUF.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tests/check.h"
#include "bundle.h"
#include "convert.h"
#include "dump.h"
#include "layout_marlin.h"
#include "pack_par.h"
#include "plan.h"
#include "ref/fp16.h"
#include "ref/marlin_gemm.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static uint64_t ggml_size(enum qc_type t, const int64_t ne[4])
{
	uint64_t row;
	QC_ASSERT(qc_type_row_bytes(t, (uint64_t)ne[0], &row) == QC_OK);
	return row * (uint64_t)(ne[1] * ne[2] * ne[3]);
}

/* pack every slice, unpack everything and random spans, compare */
static void roundtrip(enum qc_type t, int64_t K, int64_t N, int64_t S)
{
	const int64_t ne[4] = { K, N, S, 1 };
	enum qc_layout l = qc_target_layout_for(QC_TARGET_SM90, t, ne, S > 1 ? 3 : 2, NULL);
	CHECK(l == qc_marlin_layout_for(t) && qc_marlin_is(l), "%s [%lld,%lld] should fit marlin",
	      qc_type_get(t)->name, (long long)K, (long long)N);
	uint64_t size = ggml_size(t, ne), psize = 0, slice = size / (uint64_t)S, row = slice / (uint64_t)N, prow = 0;
	CHECK(qc_layout_bytes(l, t, ne, &psize) == QC_OK && qc_layout_row_bytes(l, t, K, &prow) == QC_OK &&
	      psize == prow * (uint64_t)(N * S), "packed size %llu != %llu rows of %llu", (unsigned long long)psize,
	      (unsigned long long)(N * S), (unsigned long long)prow);
	/* no padding: equal to ggml unless a header must be kept (q4_K, hq4) */
	CHECK(psize == size || l == QC_LAYOUT_MARLIN_I4Z, "packed size %llu != ggml %llu", (unsigned long long)psize,
	      (unsigned long long)size);
	uint64_t pslice = psize / (uint64_t)S;
	uint8_t *src = malloc(size), *pk = malloc(psize), *back = malloc(size);
	for (uint64_t i = 0; i < size; i++)
		src[i] = (uint8_t)rnd();
	struct qc_err err = {0};
	int rc = QC_OK;
	for (int64_t s = 0; s < S && !rc; s++)
		rc = qc_layout_pack_slice(l, t, ne, src + (uint64_t)s * slice, pk + (uint64_t)s * pslice, &err);
	CHECK(rc == QC_OK, "pack: %s", err.msg);
	CHECK(psize != size || memcmp(src, pk, size) != 0, "packing changed nothing");
	memset(back, 0xAB, size);
	rc = qc_layout_unpack_rows(l, t, ne, pk, 0, (uint64_t)(N * S), back, &err);
	CHECK(rc == QC_OK && memcmp(src, back, size) == 0, "%s [%lld,%lld,%lld]: unpack(pack(x)) != x",
	      qc_type_get(t)->name, (long long)K, (long long)N, (long long)S);
	for (int i = 0; i < 8; i++) {
		uint64_t r0 = rnd() % (uint64_t)(N * S), n = 1 + rnd() % ((uint64_t)(N * S) - r0);
		rc = qc_layout_unpack_rows(l, t, ne, pk, r0, n, back, &err);
		CHECK(rc == QC_OK && memcmp(src + r0 * row, back, n * row) == 0, "rows [%llu, +%llu) differ",
		      (unsigned long long)r0, (unsigned long long)n);
	}
	/* a checker that can fail: one flipped packed byte changes the unpacked rows */
	uint64_t flip;
	do /* a byte the unpack reads: not an i4z scale or offset (the kernel's, rebuilt from headers) */
		flip = rnd() % psize;
	while (l == QC_LAYOUT_MARLIN_I4Z && t != QC_TYPE_Q4_1 && (flip % (prow * 64)) >= (uint64_t)K / 16 * 512 &&
	       (flip % (prow * 64)) < (uint64_t)K / 16 * 512 + (uint64_t)K / 32 * 64 * 4);
	pk[flip] ^= 0x10;
	qc_layout_unpack_rows(l, t, ne, pk, 0, (uint64_t)(N * S), back, &err);
	CHECK(memcmp(src, back, size) != 0, "a flipped packed byte went unnoticed");
	free(src);
	free(pk);
	free(back);
}

static void rejects(enum qc_type t, int64_t K, int64_t N, uint32_t n_dims)
{
	const int64_t ne[4] = { K, N, 1, 1 };
	const char *why = NULL;
	enum qc_layout l = qc_target_layout_for(QC_TARGET_SM80, t, ne, n_dims, &why);
	CHECK(l == QC_LAYOUT_GGML && why != NULL, "%s [%lld,%lld] should stay ggml with a reason",
	      qc_type_get(t)->name, (long long)K, (long long)N);
	uint64_t b;
	CHECK(qc_layout_bytes(qc_marlin_layout_for(t), t, ne, &b) == QC_EFORMAT, "bytes accepted a misfit");
	struct qc_err err = {0};
	uint8_t dummy[64];
	CHECK(qc_layout_unpack_rows(qc_marlin_layout_for(t), t, ne, dummy, 0, 1, dummy, &err) == QC_EFORMAT,
	      "unpack accepted a misfit");
}

/* Positions straight from docs/layout-marlin.md: stripe nt at nt * S * row_bytes,
 * tile kt of it at kt*512, lane = 4*(n%8) + (k%8)/2 owns 16 bytes at lane*16;
 * the stripe's scales follow its K/16 tiles. */
static void doc_positions(void)
{
	enum { K = 64, N = 128 };
	const int64_t ne[4] = { K, N, 1, 1 };
	struct { int n, k, byte, shift; } i4[] = {
		{ 0, 0, 0, 0 },      /* lane 0, word 0, nibble 0 */
		{ 0, 1, 2, 0 },      /* k odd: nibble 4 = byte 2 low */
		{ 0, 8, 0, 4 },      /* k+8: nibble 1 = byte 0 high */
		{ 0, 9, 2, 4 },      /* nibble 5 */
		{ 8, 0, 1, 0 },      /* n8 tile 1: nibble 2 */
		{ 8, 8, 1, 4 },      /* nibble 3 */
		{ 16, 0, 4, 0 },     /* n8 tile 2: word 1 */
		{ 1, 0, 64, 0 },     /* lane 4 */
		{ 0, 2, 16, 0 },     /* lane 1 */
		{ 0, 16, 512, 0 },   /* k tile 1 */
		{ 64, 0, 2304, 0 },  /* stripe 1 = 64 rows x 36 bytes on */
		{ 63, 31, 512 + 31 * 16 + 15, 4 },  /* lane 31, word 3, nibble 7 */
	};
	uint8_t rows[N * (K / 32) * 18], pk[sizeof rows];
	for (size_t c = 0; c < sizeof i4 / sizeof i4[0]; c++) {
		memset(rows, 0, sizeof rows);
		int blk = i4[c].n * (K / 32) + i4[c].k / 32, e = i4[c].k % 32;
		rows[blk * 18 + 2 + e % 16] = (uint8_t)(0x9 << (4 * (e / 16)));
		qc_layout_pack_slice(QC_LAYOUT_MARLIN_I4, QC_TYPE_Q4_0, ne, rows, pk, NULL);
		int nz = 0;
		for (size_t b = 0; b < sizeof pk; b++)
			nz += pk[b] != 0;
		CHECK(nz == 1 && pk[i4[c].byte] == 0x9 << i4[c].shift, "i4 (n=%d,k=%d) not at byte %d<<%d",
		      i4[c].n, i4[c].k, i4[c].byte, i4[c].shift);
	}
	/* scales: after the stripe's codes, per group 64 fp16; column n at 8*(n%8) + n/8 */
	memset(rows, 0, sizeof rows);
	rows[(9 * (K / 32) + 1) * 18] = 0x34; /* n = 9, group 1 */
	qc_layout_pack_slice(QC_LAYOUT_MARLIN_I4, QC_TYPE_Q4_0, ne, rows, pk, NULL);
	CHECK(pk[2048 + 2 * (64 + 8 * 1 + 1)] == 0x34, "i4 scale of (n=9, g=1) misplaced");

	struct { int n, k, byte; } i8[] = {
		{ 0, 0, 0 }, { 0, 1, 1 }, { 0, 8, 2 }, { 0, 9, 3 }, { 8, 0, 4 }, { 24, 9, 15 },
		{ 1, 0, 64 }, { 0, 2, 16 }, { 0, 16, 512 }, { 32, 0, 2176 },
	};
	uint8_t r8[N * (K / 32) * 34], p8[sizeof r8];
	for (size_t c = 0; c < sizeof i8 / sizeof i8[0]; c++) {
		memset(r8, 0, sizeof r8);
		r8[(i8[c].n * (K / 32) + i8[c].k / 32) * 34 + 2 + i8[c].k % 32] = 0x81;
		qc_layout_pack_slice(QC_LAYOUT_MARLIN_I8, QC_TYPE_Q8_0, ne, r8, p8, NULL);
		int nz = 0;
		for (size_t b = 0; b < sizeof p8; b++)
			nz += p8[b] != 0;
		CHECK(nz == 1 && p8[i8[c].byte] == 0x81, "i8 (n=%d,k=%d) not at byte %d", i8[c].n, i8[c].k, i8[c].byte);
	}
	memset(r8, 0, sizeof r8);
	r8[(33 * (K / 32) + 0) * 34 + 1] = 0x77; /* n = 33 (stripe 1, nn 1), group 0, high byte of d */
	qc_layout_pack_slice(QC_LAYOUT_MARLIN_I8, QC_TYPE_Q8_0, ne, r8, p8, NULL);
	CHECK(p8[2176 + 2048 + 2 * (0 * 32 + 4 * 1 + 0) + 1] == 0x77, "i8 scale of (n=33, g=0) misplaced");
}

/* kernels/ref/marlin_gemm.c on packed W == plain double matmul on the ggml decoder's W */
static void gemm_ref(enum qc_type t, int64_t M, int64_t K, int64_t N)
{
	const int64_t ne[4] = { K, N, 1, 1 };
	enum qc_layout l = qc_marlin_layout_for(t);
	uint64_t size = ggml_size(t, ne), row = size / (uint64_t)N;
	uint8_t *src = malloc(size), *pk = malloc(size);
	float *wf = malloc((size_t)(K * N) * sizeof(float)), *xf = malloc((size_t)K * sizeof(float));
	uint16_t *ah = malloc((size_t)(M * K) * 2);
	double *ref = malloc((size_t)(M * N) * sizeof(double));
	for (int64_t i = 0; i < K * N; i++)
		wf[i] = (float)((int)(rnd() % 2001) - 1000) / 700.0f;
	qc_type_get(t)->quant_row(wf, src, K * N);
	for (int64_t i = 0; i < M * K; i++)
		ah[i] = qc_f32_to_fp16((float)((int)(rnd() % 2001) - 1000) / 1000.0f);
	struct qc_err err = {0};
	CHECK(qc_layout_pack_slice(l, t, ne, src, pk, &err) == QC_OK, "pack: %s", err.msg);
	struct qc_marlin_gemm_args a = { .layout = l, .type = t, .m = M, .n = N, .k = K, .a = ah, .w = pk };
	CHECK(qc_marlin_gemm_ref(&a, QC_MARLIN_PREC_F64, ref, &err) == QC_OK, "ref: %s", err.msg);
	int bad = 0;
	for (int64_t n = 0; n < N; n++) {
		qc_type_get(t)->dequant_row(src + (uint64_t)n * row, wf, K);
		for (int64_t m = 0; m < M; m++) {
			double s = 0;
			for (int64_t k = 0; k < K; k++)
				s += (double)qc_fp16_to_f32(ah[m * K + k]) * (double)wf[k];
			bad += s != ref[m * N + n];
		}
	}
	CHECK(bad == 0, "%s m=%lld k=%lld n=%lld: %d outputs differ from the ggml-decoded matmul",
	      qc_type_get(t)->name, (long long)M, (long long)K, (long long)N, bad);
	/* the reference must notice a wrong layout: swap two packed tiles */
	memcpy(src, pk, 512);
	memcpy(pk, pk + 512, 512);
	memcpy(pk + 512, src, 512);
	double *ref2 = malloc((size_t)(M * N) * sizeof(double));
	qc_marlin_gemm_ref(&a, QC_MARLIN_PREC_F64, ref2, &err);
	CHECK(memcmp(ref, ref2, (size_t)(M * N) * sizeof(double)) != 0, "swapped tiles went unnoticed");
	a.n = N + 8;
	CHECK(qc_marlin_gemm_ref(&a, QC_MARLIN_PREC_F64, ref2, &err) == QC_EUNSUPPORTED, "odd n accepted");
	free(src);
	free(pk);
	free(wf);
	free(xf);
	free(ah);
	free(ref);
	free(ref2);
}

/* Stripe-aligned row ranges are packed matrices of their own at row0 * row_bytes
 * (how fused MoE halves and experts are addressed). */
static void row_ranges(void)
{
	const int64_t ne[4] = { 128, 256, 1, 1 }, half[4] = { 128, 128, 1, 1 };
	uint64_t size = ggml_size(QC_TYPE_Q4_0, ne), row = size / 256;
	uint8_t *src = malloc(size), *pk = malloc(size), *ph = malloc(size / 2);
	for (uint64_t i = 0; i < size; i++)
		src[i] = (uint8_t)rnd();
	qc_layout_pack_slice(QC_LAYOUT_MARLIN_I4, QC_TYPE_Q4_0, ne, src, pk, NULL);
	qc_layout_pack_slice(QC_LAYOUT_MARLIN_I4, QC_TYPE_Q4_0, half, src + 128 * row, ph, NULL);
	CHECK(memcmp(pk + 128 * row, ph, size / 2) == 0, "rows 128..256 packed alone differ from their bytes in the whole");
	free(src);
	free(pk);
	free(ph);
}

/* i4z: the reference (code·s + o with the stored fp16 s, o) stays within fp16
 * rounding of the ggml decoder's exact values; random blocks with sane scales. */
static void gemm_ref_z(enum qc_type t, int64_t M, int64_t K, int64_t N)
{
	const int64_t ne[4] = { K, N, 1, 1 };
	enum qc_layout l = qc_marlin_layout_for(t);
	uint64_t size = ggml_size(t, ne), row = size / (uint64_t)N, psize;
	QC_ASSERT(qc_layout_bytes(l, t, ne, &psize) == QC_OK);
	const int64_t bb = qc_type_get(t)->block_bytes, nb = (int64_t)(size / (uint64_t)bb);
	uint8_t *src = malloc(size), *pk = malloc(psize);
	for (uint64_t i = 0; i < size; i++)
		src[i] = (uint8_t)rnd();
	for (int64_t b = 0; b < nb; b++) { /* scales in a weight-like range; codes, 6-bit scales, zeros random */
		uint8_t *p = src + b * bb;
		if (t == QC_TYPE_HQ4) {
			float d = 0.001f * (float)(1 + rnd() % 16);
			int16_t z = (int16_t)(rnd() % 16);
			memcpy(p, &d, 4);
			memcpy(p + 4, &z, 2);
		} else { /* q4_1: d, m; q4_K: d, dmin */
			uint16_t d = qc_f32_to_fp16(0.0003f * (float)(1 + rnd() % 16));
			uint16_t m = qc_f32_to_fp16(t == QC_TYPE_Q4_1 ? -0.01f * (float)(rnd() % 8) : 0.0002f * (float)(rnd() % 16));
			memcpy(p, &d, 2);
			memcpy(p + 2, &m, 2);
		}
	}
	uint16_t *ah = malloc((size_t)(M * K) * 2);
	for (int64_t i = 0; i < M * K; i++)
		ah[i] = qc_f32_to_fp16((float)((int)(rnd() % 2001) - 1000) / 1000.0f);
	double *ref = malloc((size_t)(M * N) * sizeof(double));
	float *wf = malloc((size_t)K * sizeof(float));
	struct qc_err err = {0};
	CHECK(qc_layout_pack_slice(l, t, ne, src, pk, &err) == QC_OK, "pack: %s", err.msg);
	struct qc_marlin_gemm_args a = { .layout = l, .type = t, .m = M, .n = N, .k = K, .a = ah, .w = pk };
	CHECK(qc_marlin_gemm_ref(&a, QC_MARLIN_PREC_F64, ref, &err) == QC_OK, "ref: %s", err.msg);
	double e2 = 0, t2 = 0;
	for (int64_t n = 0; n < N; n++) {
		qc_type_get(t)->dequant_row(src + (uint64_t)n * row, wf, K);
		for (int64_t m = 0; m < M; m++) {
			double x = 0;
			for (int64_t k = 0; k < K; k++)
				x += (double)qc_fp16_to_f32(ah[m * K + k]) * (double)wf[k];
			e2 += (x - ref[m * N + n]) * (x - ref[m * N + n]);
			t2 += x * x;
		}
	}
	double rel = sqrt(e2 / t2);
	CHECK(rel < 2e-3 && rel == rel, "%s: reference %.3g from the ggml-decoded matmul", qc_type_get(t)->name, rel);
	struct qc_marlin_err me;
	CHECK(qc_marlin_error(l, t, ne, pk, &me, &err) == QC_OK && me.n == (uint64_t)(K * N) &&
	      me.max_abs < 1e-2 * me.rms_w + 1e-6 && me.rms > 0, "%s: layout error max %g rms %g (weights %g)",
	      qc_type_get(t)->name, me.max_abs, me.rms, me.rms_w);
	free(src);
	free(pk);
	free(ah);
	free(ref);
	free(wf);
}

/* qc_pack_slice_par: the whole-slice packer's bytes and error, whatever the
 * thread count (an uneven split: 21 stripes over 16 ranges). */
static void parallel_pack(enum qc_type t, int64_t K, int64_t N)
{
	const int64_t ne[4] = { K, N, 1, 1 };
	enum qc_layout l = qc_marlin_layout_for(t);
	uint64_t size = ggml_size(t, ne), row = size / (uint64_t)N, psize;
	QC_ASSERT(qc_layout_bytes(l, t, ne, &psize) == QC_OK);
	const int64_t bb = qc_type_get(t)->block_bytes, nb = (int64_t)(size / (uint64_t)bb);
	uint8_t *src = malloc(size), *whole = malloc(psize), *par = malloc(psize);
	for (uint64_t i = 0; i < size; i++)
		src[i] = (uint8_t)rnd();
	for (int64_t b = 0; b < nb; b++) { /* finite scales: d, dmin (q4_K) or d, m (q4_1) */
		uint16_t d = qc_f32_to_fp16(0.0003f * (float)(1 + rnd() % 16));
		uint16_t m = qc_f32_to_fp16(0.0002f * (float)(rnd() % 16));
		memcpy(src + b * bb, &d, 2);
		memcpy(src + b * bb + 2, &m, 2);
	}
	struct qc_err err = {0};
	struct qc_marlin_err ew, ep[3];
	CHECK(qc_layout_pack_slice(l, t, ne, src, whole, &err) == QC_OK, "pack: %s", err.msg);
	CHECK(qc_marlin_error(l, t, ne, whole, &ew, &err) == QC_OK, "error: %s", err.msg);
	static const int threads[3] = { 1, 2, 5 };
	for (int i = 0; i < 3; i++) {
		memset(par, 0xa5, psize);
		CHECK(qc_pack_slice_par(l, t, K, N, src, row, par, &ep[i], threads[i], &err) == QC_OK, "par: %s", err.msg);
		CHECK(!memcmp(par, whole, psize), "%s: %d-thread pack differs from the whole-slice pack", qc_type_get(t)->name,
		      threads[i]);
		CHECK(!memcmp(&ep[i], &ep[0], sizeof ep[0]), "%s: error with %d threads differs from 1 thread",
		      qc_type_get(t)->name, threads[i]);
	}
	CHECK(ep[0].n == ew.n && ep[0].max_abs == ew.max_abs && fabs(ep[0].rms - ew.rms) <= 1e-12 * ew.rms &&
	      fabs(ep[0].rms_w - ew.rms_w) <= 1e-12 * ew.rms_w,
	      "%s: ranged error (n %llu max %g rms %g) differs from the whole (n %llu max %g rms %g)",
	      qc_type_get(t)->name, (unsigned long long)ep[0].n, ep[0].max_abs, ep[0].rms, (unsigned long long)ew.n,
	      ew.max_abs, ew.rms);
	free(src);
	free(whole);
	free(par);
}

static void targets(void)
{
	const int64_t ne[4] = { 4096, 14336, 1, 1 };
	CHECK(qc_target_layout_for(QC_TARGET_CPU, QC_TYPE_Q4_0, ne, 2, NULL) == QC_LAYOUT_GGML, "cpu gets ggml");
	for (int t = QC_TARGET_SM80; t < QC_TARGET_COUNT; t++) {
		CHECK(qc_target_layout_for((enum qc_target)t, QC_TYPE_Q4_0, ne, 2, NULL) == QC_LAYOUT_MARLIN_I4,
		      "%s q4_0 -> marlin_i4", qc_target_name((enum qc_target)t));
		CHECK(qc_target_layout_for((enum qc_target)t, QC_TYPE_Q8_0, ne, 2, NULL) == QC_LAYOUT_MARLIN_I8,
		      "%s q8_0 -> marlin_i8", qc_target_name((enum qc_target)t));
	}
	const char *why = "x";
	CHECK(qc_target_layout_for(QC_TARGET_SM90, QC_TYPE_Q4_K, ne, 2, NULL) == QC_LAYOUT_MARLIN_I4Z &&
	      qc_target_layout_for(QC_TARGET_SM80, QC_TYPE_Q4_1, ne, 2, NULL) == QC_LAYOUT_MARLIN_I4Z &&
	      qc_target_layout_for(QC_TARGET_SM86, QC_TYPE_HQ4, ne, 2, NULL) == QC_LAYOUT_MARLIN_I4Z, "i4z types");
	CHECK(qc_target_layout_for(QC_TARGET_SM90, QC_TYPE_Q6_K, ne, 2, &why) == QC_LAYOUT_GGML && why == NULL,
	      "q6_K has no marlin form and that is no give-up");
	CHECK(qc_layout_from_name("marlin_i4") == QC_LAYOUT_MARLIN_I4 &&
	      qc_layout_from_name("marlin_i8") == QC_LAYOUT_MARLIN_I8, "layout names");
	CHECK(QC_LAYOUT_MARLIN_I4 == 1 && QC_LAYOUT_MARLIN_I8 == 2 && QC_LAYOUT_MARLIN_I4Z == 3, "on-disk ids are frozen");
}

/* A real fixture through qconvert --target sm90: marlin tensors, identical dumps. */
static void fixture(const char *file, enum qc_layout want)
{
	char in[1024], out[] = "/tmp/qc_test_marlin_XXXXXX";
	snprintf(in, sizeof in, "%s/gguf-quant/%s", check_fixtures(), file);
	int fd = mkstemp(out);
	CHECK(fd >= 0, "mkstemp");
	close(fd);
	struct qc_convert_opts o = { .in = in, .out = out, .target = QC_TARGET_SM90, .alignment = 4096,
				     .plan_flags = QC_PLAN_FUSE_MOE };
	struct qc_err err = {0};
	int rc = qc_convert_gguf(&o, NULL, &err);
	CHECK(rc == QC_OK, "convert %s: %s", in, err.msg);
	struct qc_bundle *b = NULL;
	struct qc_gguf_model *m = NULL;
	if (rc || qc_bundle_open(out, &b, &err) || qc_gguf_model_open(in, &m, &err)) {
		CHECK(0, "open %s: %s", in, err.msg);
		goto out;
	}
	int n_marlin = 0;
	for (uint64_t i = 0; i < b->n_tensors; i++)
		n_marlin += b->tensors[i].layout == want;
	CHECK(n_marlin >= 5, "%s: only %d tensors in %s", file, n_marlin, qc_layout_name(want));
	for (uint64_t i = 0; i < m->n_tensors; i++) {
		char *da = NULL, *db = NULL;
		size_t la = 0, lb = 0;
		FILE *fa = open_memstream(&da, &la), *fb = open_memstream(&db, &lb);
		int ra = qc_dump_gguf(m, m->tensors[i]->name, fa, &err);
		int rb = qc_dump_bundle(b, m->tensors[i]->name, fb, &err);
		fclose(fa);
		fclose(fb);
		CHECK(ra == 0 && rb == 0 && la == lb && memcmp(da, db, la) == 0, "%s: %s dumps differ", file,
		      m->tensors[i]->name);
		free(da);
		free(db);
	}
out:
	qc_bundle_close(b);
	qc_gguf_model_close(m);
	unlink(out);
}

int main(void)
{
	roundtrip(QC_TYPE_Q4_0, 32, 64, 1);
	roundtrip(QC_TYPE_Q4_0, 96, 192, 3);
	roundtrip(QC_TYPE_Q4_0, 4096, 128, 1);
	roundtrip(QC_TYPE_Q8_0, 32, 32, 1);
	roundtrip(QC_TYPE_Q8_0, 160, 96, 2);
	roundtrip(QC_TYPE_Q8_0, 1024, 256, 1);
	roundtrip(QC_TYPE_Q4_1, 64, 128, 2);
	roundtrip(QC_TYPE_Q4_K, 512, 128, 1);
	roundtrip(QC_TYPE_Q4_K, 256, 64, 3);
	roundtrip(QC_TYPE_HQ4, 96, 192, 2);
	rejects(QC_TYPE_Q4_0, 64, 96, 2);   /* 96 rows: not whole 64-column tiles */
	rejects(QC_TYPE_Q4_0, 32, 40, 2);
	rejects(QC_TYPE_Q8_0, 64, 48, 2);
	rejects(QC_TYPE_Q8_0, 256, 1, 1);   /* a vector */
	rejects(QC_TYPE_Q4_K, 256, 96, 2);
	doc_positions();
	row_ranges();
	gemm_ref(QC_TYPE_Q4_0, 3, 96, 128);
	gemm_ref(QC_TYPE_Q8_0, 5, 160, 96);
	gemm_ref_z(QC_TYPE_Q4_K, 3, 512, 128);
	gemm_ref_z(QC_TYPE_Q4_1, 2, 96, 64);
	gemm_ref_z(QC_TYPE_HQ4, 4, 160, 128);
	parallel_pack(QC_TYPE_Q4_K, 512, 21 * 64);
	parallel_pack(QC_TYPE_Q4_1, 96, 21 * 64);
	targets();
	fixture("tiny-llama-256-Q4_0.gguf", QC_LAYOUT_MARLIN_I4);
	fixture("tiny-llama-256-Q8_0.gguf", QC_LAYOUT_MARLIN_I8);
	fixture("tiny-moe-256-Q4_0.gguf", QC_LAYOUT_MARLIN_I4);
	fixture("tiny-llama-256-Q4_K_S.gguf", QC_LAYOUT_MARLIN_I4Z);
	fixture("tiny-llama-256-Q4_1.gguf", QC_LAYOUT_MARLIN_I4Z);
	return check_report("test_layout_marlin");
}
