/* test_layout_marlin6.c — marlin_i6, q6_K's lossless marlin layout (quant/layout_marlin6.c).
 * - single codes (low nibble and high bits), sub-block scales and super-block d placed
 *   through ggml's q6_K bit positions sit, after the pack, at the byte and bit that
 *   docs/layout-marlin.md §marlin_i6 gives (expected offsets worked out by hand from
 *   those formulas: an independent source), every other byte zero;
 * - unpack(pack(x)) == x byte for byte on random blocks (any ql/qh/scales bits, d
 *   random with NaN and Inf patterns forced in) for K 256..4096, N 64..192 and 3-D
 *   tensors, whole and in random row spans; a flipped packed byte is caught;
 * - the C reference (runtime/ops/marlin_gemm.c, reading by the doc's formulas) equals
 *   a double matmul over ggml's decoder values exactly, and its F16 mode a float
 *   matmul over those values rounded to fp16; a moved high-bit pair changes it;
 * - the error measurement reports 0 on finite blocks and NaN on a NaN d;
 * - the parallel packer writes the whole-slice packer's bytes;
 * - the target rule, fit, geometry and table row.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/check.h"
#include "fp16.h"
#include "layout_marlin.h"
#include "marlin_gemm.h"
#include "pack_par.h"
#include "qblock.h"

enum { BB = 210 }; /* q6_K bytes per 256 elements: ql 128, qh 64, scales 16, d 2 */

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void)
{
	return check_xorshift(&rng);
}

/* Code q of element e of a q6_K block, where ggml keeps it: low nibble in
 * ql[64h + 32(c%2) + l] (high nibble for c >= 2), high two bits at 2c of qh[32h + l],
 * h = e/128, c = e%128/32, l = e%32 (ggml-common.h's block_q6_K, dequantize_row_q6_K). */
static void put_code(uint8_t *blk, int e, int q)
{
	const int h = e / 128, c = e % 128 / 32, l = e % 32;
	blk[64 * h + 32 * (c % 2) + l] |= (uint8_t)((q & 15) << (4 * (c / 2)));
	blk[128 + 32 * h + l] |= (uint8_t)((q >> 4) << (2 * c));
}

/* K = 512 (2 super-blocks, 16 units), N = 128 (2 stripes): row 420 bytes, stripe
 * 26880, scales at CB = 16·1536 = 24576, d at DB = CB + 16·128 = 26624. */
static void doc_positions(void)
{
	enum { K = 512, N = 128, ROW = K / 256 * BB, SB = 64 * ROW };
	const int64_t ne[4] = { K, N, 1, 1 };
	static uint8_t rows[N * ROW], pk[N * ROW];
	uint64_t rb = 0;
	CHECK(qc_layout_row_bytes(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K, K, &rb) == QC_OK && rb == ROW,
	      "row bytes %llu, want 512 * 210 / 256 = 420", (unsigned long long)rb);
	/* (n, k) -> low nibble byte/shift, high bits byte/shift. E.g. (24, 9): j 3, r 0;
	 * kk 9: reg 1, c 0, second 1 -> lane 0, word 1, nibble p = 2 + 1 + 4 = 7 (byte 3,
	 * high half): byte 4 + 3 = 7 <<4; high word 2·0 + 1/2 = 0, m = 2·1 + 1 = 3: byte
	 * 1024 + 3, bits 6-7. (127, 300): stripe 1, j 7, r 7; kt 18, kk 12: reg 1, c 2,
	 * second 0 -> lane 30, word 3, p 3; unit 9 at 13824: 26880 + 13824 + 480 + 12 + 1. */
	static const struct { int n, k, lo, lo_sh, hi, hi_sh; } at[] = {
		{ 0, 0, 0, 0, 1024, 0 },         /* lane 0, word 0, nibble 0; high word 0 */
		{ 0, 1, 2, 0, 1026, 0 },         /* second of the pair: nibble 4 */
		{ 0, 8, 0, 4, 1024, 2 },         /* register 1: nibble 1, bit pair 1 */
		{ 8, 0, 1, 0, 1025, 0 },         /* n8 tile 1: nibble 2 */
		{ 16, 0, 4, 0, 1024, 4 },        /* n8 tile 2: word 1, bit pair 2 of high word 0 */
		{ 24, 9, 7, 4, 1027, 6 },
		{ 32, 0, 8, 0, 1028, 0 },        /* word 2: high word 1 */
		{ 48, 0, 12, 0, 1028, 4 },       /* word 3 */
		{ 1, 0, 64, 0, 1088, 0 },        /* lane 4 */
		{ 0, 2, 16, 0, 1040, 0 },        /* lane 1 */
		{ 0, 16, 512, 0, 1032, 0 },      /* tile 1 of unit 0: high words 2, 3 */
		{ 0, 32, 1536, 0, 2560, 0 },     /* unit 1 */
		{ 64, 0, SB, 0, SB + 1024, 0 },  /* stripe 1 */
		{ 63, 511, 24063, 4, 24575, 6 }, /* the last code byte of stripe 0 */
		{ 127, 300, 41197, 4, 42213, 6 },
	};
	for (size_t c = 0; c < sizeof at / sizeof at[0]; c++) {
		memset(rows, 0, sizeof rows); /* every code 0, scales 0, d 0: all-zero bytes */
		uint8_t *blk = rows + at[c].n * ROW + at[c].k / 256 * BB;
		put_code(blk, at[c].k % 256, 0x2d); /* low nibble 0xd, high bits 2 */
		/* the placement is ggml's: its decoder sees q = 0x2d there, 0 elsewhere */
		float v[256];
		blk[208] = 0x00, blk[209] = 0x3c; /* d = 1 */
		memset(blk + 192, 1, 16);          /* every sc 1 */
		qc_type_get(QC_TYPE_Q6_K)->dequant_row(blk, v, 256);
		int off = 0;
		for (int e = 0; e < 256; e++)
			off += v[e] != (e == at[c].k % 256 ? 0x2d - 32 : -32);
		CHECK(off == 0, "test's own q6_K placement of (n=%d,k=%d) disagrees with the decoder at %d elements",
		      at[c].n, at[c].k, off);
		memset(blk + 192, 0, 18);
		qc_layout_pack_slice(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K, ne, rows, pk, NULL);
		int nz = 0;
		for (size_t b = 0; b < sizeof pk; b++)
			nz += pk[b] != 0;
		CHECK(nz == 2 && pk[at[c].lo] == 0xd << at[c].lo_sh && pk[at[c].hi] == 2 << at[c].hi_sh,
		      "i6 (n=%d,k=%d): want 0x%x at %d and 0x%x at %d; got 0x%x, 0x%x (%d non-zero bytes)", at[c].n,
		      at[c].k, 0xd << at[c].lo_sh, at[c].lo, 2 << at[c].hi_sh, at[c].hi, pk[at[c].lo], pk[at[c].hi], nz);
	}
	/* int8 sc of (n, kt) at CB + (kt/2)·128 + 16r + 8(kt%2) + j: (9, 3): 24576 + 128 +
	 * 16 + 8 + 1; (70, 30): stripe 1, nn 6: 26880 + 24576 + 15·128 + 96 */
	static const struct { int n, kt, at; } sc[] = { { 9, 3, 24729 }, { 70, 30, 53472 } };
	for (size_t c = 0; c < 2; c++) {
		memset(rows, 0, sizeof rows);
		rows[sc[c].n * ROW + sc[c].kt / 16 * BB + 192 + sc[c].kt % 16] = 0xa5; /* sc = -91 */
		qc_layout_pack_slice(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K, ne, rows, pk, NULL);
		int nz = 0;
		for (size_t b = 0; b < sizeof pk; b++)
			nz += pk[b] != 0;
		CHECK(nz == 1 && pk[sc[c].at] == 0xa5, "i6 scale of (n=%d, kt=%d) not at %d", sc[c].n, sc[c].kt, sc[c].at);
	}
	/* fp16 d of (n, b) at DB + 128b + 16r + 2j: (9, 1): 26624 + 128 + 16 + 2; (127, 0):
	 * stripe 1, nn 63: 26880 + 26624 + 112 + 14 */
	static const struct { int n, b, at; } dd[] = { { 9, 1, 26770 }, { 127, 0, 53630 } };
	for (size_t c = 0; c < 2; c++) {
		memset(rows, 0, sizeof rows);
		rows[dd[c].n * ROW + dd[c].b * BB + 208] = 0x01; /* d = 0x7e01: a NaN, kept as bits */
		rows[dd[c].n * ROW + dd[c].b * BB + 209] = 0x7e;
		qc_layout_pack_slice(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K, ne, rows, pk, NULL);
		int nz = 0;
		for (size_t b = 0; b < sizeof pk; b++)
			nz += pk[b] != 0;
		CHECK(nz == 2 && pk[dd[c].at] == 0x01 && pk[dd[c].at + 1] == 0x7e, "i6 d of (n=%d, b=%d) not at %d",
		      dd[c].n, dd[c].b, dd[c].at);
	}
}

/* random q6_K blocks: every bit random, and d forced to Inf, -Inf, NaNs and 0 in some */
static void random_blocks(uint8_t *p, uint64_t n_blocks)
{
	static const uint16_t odd[] = { 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xffff, 0x0000, 0x8000, 0x0001 };
	for (uint64_t i = 0; i < n_blocks * BB; i++)
		p[i] = (uint8_t)rnd();
	for (uint64_t b = 0; b < n_blocks; b++)
		if (rnd() % 4 == 0)
			memcpy(p + b * BB + 208, &odd[rnd() % 8], 2);
}

static void roundtrip(int64_t K, int64_t N, int64_t S)
{
	const int64_t ne[4] = { K, N, S, 1 };
	const enum qc_layout l = qc_target_layout_for(QC_TARGET_SM90, QC_TYPE_Q6_K, ne, S > 1 ? 3 : 2, NULL);
	CHECK(l == QC_LAYOUT_MARLIN_I6, "q6_K [%lld,%lld,%lld] should fit marlin_i6", (long long)K, (long long)N,
	      (long long)S);
	const uint64_t row = (uint64_t)K / 256 * BB, size = row * (uint64_t)(N * S), slice = row * (uint64_t)N;
	uint64_t psize = 0;
	CHECK(qc_layout_bytes(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K, ne, &psize) == QC_OK && psize == size,
	      "packed size %llu, want the ggml size %llu", (unsigned long long)psize, (unsigned long long)size);
	uint8_t *src = malloc(size), *pk = malloc(size), *back = malloc(size);
	random_blocks(src, size / BB);
	struct qc_err err = {0};
	int rc = QC_OK;
	for (int64_t s = 0; s < S && !rc; s++)
		rc = qc_layout_pack_slice(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K, ne, src + (uint64_t)s * slice,
					  pk + (uint64_t)s * slice, &err);
	CHECK(rc == QC_OK, "pack: %s", err.msg);
	CHECK(memcmp(src, pk, size) != 0, "packing changed nothing");
	memset(back, 0xab, size);
	rc = qc_layout_unpack_rows(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K, ne, pk, 0, (uint64_t)(N * S), back, &err);
	CHECK(rc == QC_OK && memcmp(src, back, size) == 0, "q6_K [%lld,%lld,%lld]: unpack(pack(x)) != x",
	      (long long)K, (long long)N, (long long)S);
	for (int i = 0; i < 8; i++) {
		const uint64_t r0 = rnd() % (uint64_t)(N * S), n = 1 + rnd() % ((uint64_t)(N * S) - r0);
		rc = qc_layout_unpack_rows(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K, ne, pk, r0, n, back, &err);
		CHECK(rc == QC_OK && memcmp(src + r0 * row, back, n * row) == 0, "rows [%llu, +%llu) differ",
		      (unsigned long long)r0, (unsigned long long)n);
	}
	/* every packed bit is read back: one flipped byte changes the rows */
	pk[rnd() % size] ^= 0x41;
	qc_layout_unpack_rows(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K, ne, pk, 0, (uint64_t)(N * S), back, &err);
	CHECK(memcmp(src, back, size) != 0, "a flipped packed byte went unnoticed");
	free(src);
	free(pk);
	free(back);
}

/* random codes and scales, finite weight-like d */
static void finite_blocks(uint8_t *p, uint64_t n_blocks)
{
	for (uint64_t i = 0; i < n_blocks * BB; i++)
		p[i] = (uint8_t)rnd();
	for (uint64_t b = 0; b < n_blocks; b++) {
		const uint16_t d = qc_f32_to_fp16(0.00002f * (float)(1 + rnd() % 64));
		memcpy(p + b * BB + 208, &d, 2);
	}
}

/* qc_marlin_gemm_ref on the packed bytes against matmuls over ggml's decoder values. */
static void gemm_ref(int64_t M, int64_t K, int64_t N)
{
	const int64_t ne[4] = { K, N, 1, 1 };
	const uint64_t row = (uint64_t)K / 256 * BB, size = row * (uint64_t)N;
	uint8_t *src = malloc(size), *pk = malloc(size);
	float *wf = malloc((size_t)(K * N) * sizeof(float));
	uint16_t *ah = malloc((size_t)(M * K) * 2);
	double *ref = malloc((size_t)(M * N) * sizeof(double)), *r16 = malloc((size_t)(M * N) * sizeof(double));
	finite_blocks(src, size / BB);
	for (int64_t i = 0; i < M * K; i++)
		ah[i] = qc_f32_to_fp16((float)((int)(rnd() % 2001) - 1000) / 1000.0f);
	struct qc_err err = {0};
	CHECK(qc_layout_pack_slice(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K, ne, src, pk, &err) == QC_OK, "pack: %s", err.msg);
	struct qc_marlin_gemm_args a = { .layout = QC_LAYOUT_MARLIN_I6, .type = QC_TYPE_Q6_K, .m = M, .n = N, .k = K,
					 .a = ah, .w = pk };
	CHECK(qc_marlin_gemm_ref(&a, QC_MARLIN_PREC_F64, ref, &err) == QC_OK, "ref: %s", err.msg);
	CHECK(qc_marlin_gemm_ref(&a, QC_MARLIN_PREC_F16, r16, &err) == QC_OK, "ref f16: %s", err.msg);
	for (int64_t n = 0; n < N; n++)
		qc_type_get(QC_TYPE_Q6_K)->dequant_row(src + (uint64_t)n * row, wf + n * K, K);
	int bad = 0, bad16 = 0, zero = 0;
	for (int64_t m = 0; m < M; m++)
		for (int64_t n = 0; n < N; n++) {
			double s = 0;
			float s16 = 0;
			for (int64_t k = 0; k < K; k++) {
				const float x = qc_fp16_to_f32(ah[m * K + k]), w = wf[n * K + k];
				s += (double)x * (double)w;
				s16 += x * qc_fp16_to_f32(qc_f32_to_fp16(w));
			}
			/* the same values summed in the same order: equal, not close */
			bad += s != ref[m * N + n];
			bad16 += (double)s16 != r16[m * N + n];
			zero += s == 0;
		}
	CHECK(bad == 0 && zero < M * N, "m=%lld k=%lld n=%lld: %d of %lld outputs differ from the ggml-decoded matmul",
	      (long long)M, (long long)K, (long long)N, bad, (long long)(M * N));
	CHECK(bad16 == 0, "m=%lld k=%lld n=%lld: F16 mode: %d outputs differ from the matmul over fp16(ggml value)",
	      (long long)M, (long long)K, (long long)N, bad16);
	/* the reference reads the high-bit plane: a moved bit pair changes column 0 */
	double *ref2 = malloc((size_t)(M * N) * sizeof(double));
	pk[1024] ^= 0x03; /* (n 0, k 0)'s high bits */
	qc_marlin_gemm_ref(&a, QC_MARLIN_PREC_F64, ref2, &err);
	CHECK(ref2[0] != ref[0] && memcmp(ref + 1, ref2 + 1, (size_t)(N - 1) * sizeof(double)) == 0,
	      "a changed high-bit pair of (0, 0) changed output 0 only: %g -> %g", ref[0], ref2[0]);
	pk[1024] ^= 0x03;
	a.n = N + 8;
	CHECK(qc_marlin_gemm_ref(&a, QC_MARLIN_PREC_F64, ref2, &err) == QC_EUNSUPPORTED, "n not a stripe multiple accepted");
	a.n = N;
	a.k = K - 32; /* whole 32-groups but not whole 256-blocks */
	CHECK(qc_marlin_gemm_ref(&a, QC_MARLIN_PREC_F64, ref2, &err) == QC_EUNSUPPORTED, "k %% 256 != 0 accepted");
	a.k = K;
	a.type = QC_TYPE_Q4_K;
	CHECK(qc_marlin_gemm_ref(&a, QC_MARLIN_PREC_F64, ref2, &err) == QC_EUNSUPPORTED, "q4_K in marlin_i6 accepted");
	free(ref2);
	free(src);
	free(pk);
	free(wf);
	free(ah);
	free(ref);
	free(r16);
}

/* qc_marlin_error: lossless, so max 0 and rms 0 on finite blocks; NaN where d is NaN */
static void error_is_zero(void)
{
	enum { K = 768, N = 128 };
	const int64_t ne[4] = { K, N, 1, 1 };
	const uint64_t size = (uint64_t)K / 256 * BB * N;
	uint8_t *src = malloc(size), *pk = malloc(size);
	finite_blocks(src, size / BB);
	struct qc_err err = {0};
	struct qc_marlin_err e;
	qc_layout_pack_slice(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K, ne, src, pk, &err);
	CHECK(qc_marlin_error(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K, ne, pk, &e, &err) == QC_OK && e.n == (uint64_t)(K * N) &&
		      e.max_abs == 0 && e.rms == 0 && e.rms_w > 0,
	      "layout error n %llu max %g rms %g (weights %g), want max 0", (unsigned long long)e.n, e.max_abs, e.rms,
	      e.rms_w);
	const uint16_t nan = 0x7e00;
	memcpy(src + 5 * BB + 208, &nan, 2);
	qc_layout_pack_slice(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K, ne, src, pk, &err);
	qc_marlin_error(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K, ne, pk, &e, &err);
	CHECK(e.max_abs != e.max_abs, "a NaN d did not show in the layout error (max %g)", e.max_abs);
	free(src);
	free(pk);
}

/* qc_pack_slice_par: the whole-slice packer's bytes at 1, 2 and 5 threads (21 stripes
 * over 16 ranges: uneven) */
static void parallel_pack(void)
{
	enum { K = 512, N = 21 * 64 };
	const int64_t ne[4] = { K, N, 1, 1 };
	const uint64_t row = (uint64_t)K / 256 * BB, size = row * N;
	uint8_t *src = malloc(size), *whole = malloc(size), *par = malloc(size);
	random_blocks(src, size / BB);
	struct qc_err err = {0};
	CHECK(qc_layout_pack_slice(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K, ne, src, whole, &err) == QC_OK, "pack: %s", err.msg);
	static const int threads[3] = { 1, 2, 5 };
	for (int i = 0; i < 3; i++) {
		memset(par, 0xa5, size);
		CHECK(qc_pack_slice_par(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K, K, N, src, row, par, NULL, threads[i], &err) ==
			      QC_OK,
		      "par: %s", err.msg);
		CHECK(!memcmp(par, whole, size), "%d-thread pack differs from the whole-slice pack", threads[i]);
	}
	free(src);
	free(whole);
	free(par);
}

static void rejects(int64_t K, int64_t N, uint32_t n_dims, const char *want)
{
	const int64_t ne[4] = { K, N, 1, 1 };
	const char *why = NULL;
	const enum qc_layout l = qc_target_layout_for(QC_TARGET_SM90, QC_TYPE_Q6_K, ne, n_dims, &why);
	CHECK(l == QC_LAYOUT_GGML && why && strstr(why, want), "q6_K [%lld,%lld] %u-D: %s, reason \"%s\" (want \"%s\")",
	      (long long)K, (long long)N, n_dims, qc_layout_name(l), why ? why : "", want);
	uint64_t b;
	CHECK(qc_layout_bytes(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K, ne, &b) == QC_EFORMAT || n_dims < 2,
	      "bytes accepted a misfit");
}

static void targets_and_table(void)
{
	const int64_t ne[4] = { 4096, 128256, 1, 1 };
	const char *why = "x";
	CHECK(qc_target_layout_for(QC_TARGET_CPU, QC_TYPE_Q6_K, ne, 2, &why) == QC_LAYOUT_GGML && why == NULL,
	      "cpu keeps q6_K ggml");
	for (int t = QC_TARGET_SM80; t < QC_TARGET_COUNT; t++)
		CHECK(qc_target_layout_for((enum qc_target)t, QC_TYPE_Q6_K, ne, 2, NULL) == QC_LAYOUT_MARLIN_I6,
		      "%s q6_K -> marlin_i6", qc_target_name((enum qc_target)t));
	CHECK(qc_marlin_layout_for(QC_TYPE_Q6_K) == QC_LAYOUT_MARLIN_I6, "q6_K's marlin form");
	CHECK(QC_LAYOUT_MARLIN_I6 == 6 && QC_LAYOUT_NVFP4_SWZ == 5, "on-disk ids are frozen");
	CHECK(qc_marlin_is(QC_LAYOUT_MARLIN_I6) && qc_marlin_bits(QC_LAYOUT_MARLIN_I6) == 6 &&
		      qc_marlin_stripe(QC_LAYOUT_MARLIN_I6) == 64 && !qc_marlin_has_offsets(QC_LAYOUT_MARLIN_I6),
	      "i6 geometry: 64-column stripes of 6-bit codes, no offsets");
	CHECK(qc_layout_from_name("marlin_i6") == QC_LAYOUT_MARLIN_I6 && qc_layout_row_align(QC_LAYOUT_MARLIN_I6) == 64 &&
		      qc_layout_fusable(QC_LAYOUT_MARLIN_I6),
	      "table row: name, 64-row alignment, fusable");
	const struct qc_layout_traits *t = &qc_layouts[QC_LAYOUT_MARLIN_I6];
	CHECK(t->kernel[QC_ROWS_1] == QC_KERNEL_GEMV && t->kernel[QC_ROWS_2_8] == QC_KERNEL_MMA &&
		      t->kernel[QC_ROWS_9_127] == QC_KERNEL_MMA && t->kernel[QC_ROWS_128] == QC_KERNEL_F16_BLAS &&
		      t->experts == QC_KERNEL_MOE_GEMM,
	      "kernel columns gemv, mma, mma, f16+cublas; experts the grouped marlin GEMM (marlin_i4's)");
	{ /* the vocabulary matrix (over 2^27 elements) keeps the GEMM past 128 rows */
		const struct qc_kernel_rows kr = QC_KERNEL_ROWS_DEFAULT;
		CHECK(qc_layout_kernel(QC_LAYOUT_MARLIN_I6, 256, false, 4096, 128256, &kr) == QC_KERNEL_MMA &&
			      qc_layout_kernel(QC_LAYOUT_MARLIN_I6, 256, false, 14336, 4096, &kr) == QC_KERNEL_F16_BLAS &&
			      qc_layout_kernel(QC_LAYOUT_MARLIN_I6, 64, false, 4096, 128256, &kr) == QC_KERNEL_MMA,
		      "i6 at 256 rows: the vocabulary matrix on the GEMM, ffn_down on fp16 + cuBLAS");
	}
	uint64_t rb;
	CHECK(qc_layout_row_bytes(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K, 4096, &rb) == QC_OK && rb == 4096 / 256 * 210,
	      "row bytes of K 4096: %llu", (unsigned long long)rb);
	CHECK(qc_layout_row_bytes(QC_LAYOUT_MARLIN_I6, QC_TYPE_Q4_K, 4096, &rb) == QC_EFORMAT, "q4_K in marlin_i6");
	CHECK(!qc_marlin_fits(QC_LAYOUT_MARLIN_I4Z, QC_TYPE_Q6_K, ne, 2, NULL), "q6_K in marlin_i4z");
	rejects(256, 96, 2, "64-column tile");
	rejects(512, 32, 2, "64-column tile");
	rejects(256, 1, 1, "1-D");
}

int main(void)
{
	doc_positions();
	roundtrip(256, 64, 1);
	roundtrip(512, 128, 1);
	roundtrip(4096, 192, 1);
	roundtrip(4096, 64, 1);
	roundtrip(256, 192, 3);
	roundtrip(512, 128, 2);
	gemm_ref(3, 256, 64);
	gemm_ref(5, 512, 192);
	gemm_ref(2, 4096, 128);
	error_is_zero();
	parallel_pack();
	targets_and_table();
	return check_report("test_layout_marlin6");
}
