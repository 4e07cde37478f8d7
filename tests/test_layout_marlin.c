/* test_layout_marlin.c — the marlin layouts (quant/layout_marlin.c).
 * Random q4_0/q8_0/q4_1/q4_K/hq4/q5_K tensors (random bytes: any code, any scale bits, NaN too) of
 * several shapes: pack then unpack gives the input back byte for byte, for whole
 * tensors and arbitrary row spans; shapes that do not fit stay ggml with a reason;
 * hand-placed elements sit where docs/layout-marlin.md says (an independent
 * source: the doc's formulas, not this code); a flipped packed byte is caught; the
 * GEMM reference, reading the packed bytes by the doc's formulas, equals a matmul
 * over the ggml decoder's values (i4z/i8z: within their one fp16 rounding of scale
 * and offset); a fixture converted for sm90 holds marlin tensors (q6_K ones in
 * marlin_i6 too), unpacks to the GGUF's bytes, dumps identical to the GGUF and
 * passes a deep verify. marlin_i6's own checks: tests/test_layout_marlin6.c.
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
#include "fp16.h"
#include "verify.h"
#include "marlin_gemm.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
	return check_xorshift(&rng);
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
	/* no padding: equal to ggml unless a header must be kept (q4_K, hq4, q5_K) */
	CHECK(psize == size || qc_marlin_has_offsets(l), "packed size %llu != ggml %llu", (unsigned long long)psize,
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
	const uint64_t SW = (uint64_t)qc_marlin_stripe(l);
	do /* a byte the unpack reads: not an i4z/i8z scale or offset (the kernel's, rebuilt from headers) */
		flip = rnd() % psize;
	while (qc_marlin_has_offsets(l) && t != QC_TYPE_Q4_1 && (flip % (prow * SW)) >= (uint64_t)K / 16 * 512 &&
	       (flip % (prow * SW)) < (uint64_t)K / 16 * 512 + (uint64_t)K / 32 * SW * 4);
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

/* marlin_i8z (q5_K) from docs/layout-marlin.md: codes at the i8 positions holding
 * q - 16 as int8; per stripe of 32 rows (K = 256: 304 bytes a row, 9728 a stripe)
 * the codes (8192), scales (512), offsets (512), then a 16-byte header per block
 * at 9216 + 16 * (column in stripe). Expected bytes worked out by hand. */
static void doc_positions_i8z(void)
{
	enum { K = 256, N = 64, BB = 176 };
	const int64_t ne[4] = { K, N, 1, 1 };
	static uint8_t rows[N * BB], pk[N * 304];
	uint64_t rb = 0;
	CHECK(qc_layout_row_bytes(QC_LAYOUT_MARLIN_I8Z, QC_TYPE_Q5_K, K, &rb) == QC_OK && rb == 304,
	      "q5_K i8z row bytes %llu, want 256 * 19 / 16 = 304", (unsigned long long)rb);
	struct { int n, k, byte; } at[] = {
		{ 0, 0, 0 }, { 0, 1, 1 }, { 0, 8, 2 }, { 0, 9, 3 }, { 8, 0, 4 }, { 1, 0, 64 }, { 0, 2, 16 },
		{ 0, 16, 512 }, { 0, 200, 12 * 512 + 2 }, { 33, 0, 9728 + 64 }, { 31, 255, 15 * 512 + 16 * 31 + 15 },
	};
	for (size_t c = 0; c < sizeof at / sizeof at[0]; c++) {
		memset(rows, 0, sizeof rows); /* every q = 0: code -16 (0xf0) */
		uint8_t *blk = rows + at[c].n * BB;
		int e = at[c].k, sb = e / 32, l = e % 32;
		blk[16 + 32 + 32 * (sb / 2) + l] = (uint8_t)(5 << (4 * (sb % 2))); /* low nibble 5 */
		blk[16 + l] = (uint8_t)(1 << sb);                                     /* qh: +16, q = 21 */
		qc_layout_pack_slice(QC_LAYOUT_MARLIN_I8Z, QC_TYPE_Q5_K, ne, rows, pk, NULL);
		int odd = 0, where = -1;
		for (int st = 0; st < 2; st++)
			for (int b = 0; b < 8192; b++)
				if (pk[st * 9728 + b] != 0xf0) {
					odd++;
					where = st * 9728 + b;
				}
		CHECK(odd == 1 && where == at[c].byte && pk[at[c].byte] == 0x05,
		      "i8z (n=%d,k=%d): q 21 not stored as 0x05 at byte %d (%d odd codes, last at %d)", at[c].n, at[c].k,
		      at[c].byte, odd, where);
	}
	/* n = 9 (nn 9: r 1, j 1), sub-block 3: d 0.5, dmin 0.25, sc 5, m 3 ->
	 * s = 2.5 (0x4100), o = 16 * 2.5 - 0.75 = 39.25 (0x50e8) */
	memset(rows, 0, sizeof rows);
	uint8_t *blk = rows + 9 * BB;
	blk[0] = 0x00, blk[1] = 0x38, blk[2] = 0x00, blk[3] = 0x34;
	blk[4 + 3] = 5, blk[4 + 7] = 3;
	qc_layout_pack_slice(QC_LAYOUT_MARLIN_I8Z, QC_TYPE_Q5_K, ne, rows, pk, NULL);
	const int sc_at = 8192 + 2 * (3 * 32 + 4 * 1 + 1);
	CHECK(pk[sc_at] == 0x00 && pk[sc_at + 1] == 0x41, "i8z scale of (n=9, g=3) not 0x4100 at %d", sc_at);
	CHECK(pk[sc_at + 512] == 0xe8 && pk[sc_at + 513] == 0x50, "i8z offset of (n=9, g=3) not 0x50e8 at %d",
	      sc_at + 512);
	CHECK(memcmp(pk + 9216 + 9 * 16, blk, 16) == 0, "i8z header of n=9 not kept verbatim at %d", 9216 + 9 * 16);
}

/* runtime/ops/marlin_gemm.c on packed W == plain double matmul on the ggml decoder's W */
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
	/* the integer-activation precisions (the streaming GEMV's XQ modes): x rounded
	 * per 32-block as specified (8: ggml's x86 q8 rounding, d = fp16(amax / 127);
	 * 16: d = amax / 32767; q = rint(x * (qmax / amax))), then the same double
	 * matmul; each rounded value within d / 2 (+ d's own fp16 rounding) of x */
	for (int xq = 8; xq <= 16; xq += 8) {
		const float qmax = xq == 8 ? 127.0f : 32767.0f;
		CHECK(qc_marlin_gemm_ref(&a, xq == 8 ? QC_MARLIN_PREC_XQ8_F64 : QC_MARLIN_PREC_XQ16_F64, ref, &err) ==
			      QC_OK,
		      "ref xq%d: %s", xq, err.msg);
		double *xr = malloc((size_t)K * sizeof(double));
		int bad_x = 0, bad_y = 0;
		for (int64_t m = 0; m < M; m++) {
			for (int64_t b0 = 0; b0 < K; b0 += 32) {
				float amax = 0.0f;
				for (int j = 0; j < 32; j++)
					amax = fmaxf(amax, fabsf(qc_fp16_to_f32(ah[m * K + b0 + j])));
				const float d = xq == 8 ? qc_fp16_to_f32(qc_f32_to_fp16(amax / 127.0f)) : amax / 32767.0f;
				for (int j = 0; j < 32; j++) {
					const float x = qc_fp16_to_f32(ah[m * K + b0 + j]);
					xr[b0 + j] = (double)d * (double)rintf(x * (amax != 0.0f ? qmax / amax : 0.0f));
					bad_x += fabs(xr[b0 + j] - x) > amax * (0.5 / qmax + (xq == 8 ? 0x1p-11 : 0x1p-20));
				}
			}
			for (int64_t n = 0; n < N; n++) {
				qc_type_get(t)->dequant_row(src + (uint64_t)n * row, wf, K);
				double s = 0;
				for (int64_t k = 0; k < K; k++)
					s += xr[k] * (double)wf[k];
				bad_y += fabs(s - ref[m * N + n]) > 1e-12 * (1 + fabs(s));
			}
		}
		CHECK(bad_x == 0 && bad_y == 0, "%s xq%d: %d activations past the rounding bound, %d outputs differ",
		      qc_type_get(t)->name, xq, bad_x, bad_y);
		free(xr);
	}
	qc_marlin_gemm_ref(&a, QC_MARLIN_PREC_F64, ref, &err);
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
		if (t == QC_TYPE_HQ4 || t == QC_TYPE_HQ8) {
			float d = 0.001f * (float)(1 + rnd() % 16);
			int16_t z = (int16_t)(t == QC_TYPE_HQ4 ? rnd() % 16 : 118 + rnd() % 20);
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
	/* the reference must notice a wrong layout (two code tiles swapped) and a bad n */
	double *ref2 = malloc((size_t)(M * N) * sizeof(double));
	uint8_t tile[512];
	memcpy(tile, pk, 512);
	memcpy(pk, pk + 512, 512);
	memcpy(pk + 512, tile, 512);
	qc_marlin_gemm_ref(&a, QC_MARLIN_PREC_F64, ref2, &err);
	CHECK(memcmp(ref, ref2, (size_t)(M * N) * sizeof(double)) != 0, "%s: swapped tiles went unnoticed",
	      qc_type_get(t)->name);
	a.n = N + 8;
	CHECK(qc_marlin_gemm_ref(&a, QC_MARLIN_PREC_F64, ref2, &err) == QC_EUNSUPPORTED, "%s: odd n accepted",
	      qc_type_get(t)->name);
	free(ref2);
	free(src);
	free(pk);
	free(ah);
	free(ref);
	free(wf);
}

/* 6-bit scale and min of sub-block s in a q4_K/q5_K 12-byte field (ggml's
 * get_scale_min_k4, written out from the format description in quant/qblock.h). */
static void k4_scale_min(const uint8_t q[12], int s, int *sc, int *m)
{
	*sc = s < 4 ? q[s] & 63 : (q[s + 4] & 15) | (q[s - 4] >> 6) << 4;
	*m = s < 4 ? q[s + 4] & 63 : (q[s + 4] >> 4) | (q[s] >> 6) << 4;
}

/* q5_K in i8z: every output of the reference (code·s + o with the stored fp16 s, o)
 * is within the bound one fp16 rounding of s = d·sc and o = 16·d·sc − dmin·m
 * allows, Σ_k |a_k| · 2^-11 · (16·|d·sc| + |16·d·sc − dmin·m|), plus the float
 * roundings of ggml's decoder and of the reference, of a matmul over the ggml
 * decoder's values;
 * a column whose offsets forgot the centring must break the bound. */
static void gemm_ref_q5_k_bound(int64_t M, int64_t K, int64_t N)
{
	const int64_t ne[4] = { K, N, 1, 1 };
	const enum qc_type t = QC_TYPE_Q5_K;
	const enum qc_layout l = QC_LAYOUT_MARLIN_I8Z;
	uint64_t size = ggml_size(t, ne), row = size / (uint64_t)N, psize;
	QC_ASSERT(qc_layout_bytes(l, t, ne, &psize) == QC_OK);
	const int64_t nb = (int64_t)(size / 176);
	uint8_t *src = malloc(size), *pk = malloc(psize);
	for (uint64_t i = 0; i < size; i++)
		src[i] = (uint8_t)rnd();
	for (int64_t b = 0; b < nb; b++) { /* d, dmin in a weight-like range; codes and 6-bit scales random */
		uint16_t d = qc_f32_to_fp16(0.0003f * (float)(1 + rnd() % 16));
		uint16_t m = qc_f32_to_fp16(0.0004f * (float)(rnd() % 16));
		memcpy(src + b * 176, &d, 2);
		memcpy(src + b * 176 + 2, &m, 2);
	}
	uint16_t *ah = malloc((size_t)(M * K) * 2);
	for (int64_t i = 0; i < M * K; i++)
		ah[i] = qc_f32_to_fp16((float)((int)(rnd() % 2001) - 1000) / 1000.0f);
	double *ref = malloc((size_t)(M * N) * sizeof(double)), *ref2 = malloc((size_t)(M * N) * sizeof(double));
	float *wf = malloc((size_t)K * sizeof(float));
	double *eb = malloc((size_t)K * sizeof(double)); /* per element: the bound's weight factor */
	struct qc_err err = {0};
	CHECK(qc_layout_pack_slice(l, t, ne, src, pk, &err) == QC_OK, "pack: %s", err.msg);
	struct qc_marlin_gemm_args a = { .layout = l, .type = t, .m = M, .n = N, .k = K, .a = ah, .w = pk };
	CHECK(qc_marlin_gemm_ref(&a, QC_MARLIN_PREC_F64, ref, &err) == QC_OK, "ref: %s", err.msg);
	/* the deliberate bug: column n = 5 with uncentred offsets (o - 16·s, as if the
	 * codes were q, not q - 16) */
	for (int64_t g = 0; g < K / 32; g++) {
		const uint64_t s_at = (uint64_t)K / 16 * 512 + 2 * (uint64_t)(g * 32 + 4 * 5 + 0);
		const uint64_t o_at = s_at + 2 * (uint64_t)(K / 32 * 32);
		uint16_t sh, oh;
		memcpy(&sh, pk + s_at, 2);
		memcpy(&oh, pk + o_at, 2);
		oh = qc_f32_to_fp16(qc_fp16_to_f32(oh) - 16.0f * qc_fp16_to_f32(sh));
		memcpy(pk + o_at, &oh, 2);
	}
	CHECK(qc_marlin_gemm_ref(&a, QC_MARLIN_PREC_F64, ref2, &err) == QC_OK, "ref: %s", err.msg);
	int64_t bad = 0, bad2 = 0;
	double worst = 0;
	for (int64_t n = 0; n < N; n++) {
		const uint8_t *r = src + (uint64_t)n * row;
		qc_type_get(t)->dequant_row(r, wf, K);
		for (int64_t k = 0; k < K; k++) {
			const uint8_t *blk = r + (k / 256) * 176;
			uint16_t dh, mh;
			memcpy(&dh, blk, 2);
			memcpy(&mh, blk + 2, 2);
			int sc, mn;
			k4_scale_min(blk + 4, (int)(k % 256 / 32), &sc, &mn);
			const double S = (double)qc_fp16_to_f32(dh) * sc, Mn = (double)qc_fp16_to_f32(mh) * mn;
			/* fp16 rounding of s and o (half an ulp: 2^-11 relative, 2^-25 below
			 * 2^-14), ggml's float difference and the reference's float value */
			eb[k] = 0x1p-11 * (16 * S + fabs(16 * S - Mn)) + 0x1p-23 * (31 * S + Mn) + 0x1p-24;
		}
		for (int64_t m = 0; m < M; m++) {
			double x = 0, bound = 0;
			for (int64_t k = 0; k < K; k++) {
				const double av = (double)qc_fp16_to_f32(ah[m * K + k]);
				x += av * (double)wf[k];
				bound += fabs(av) * eb[k];
			}
			const double e = fabs(x - ref[m * N + n]);
			bad += !(e <= bound);
			bad2 += !(fabs(x - ref2[m * N + n]) <= bound);
			worst = e / bound > worst ? e / bound : worst;
		}
	}
	CHECK(bad == 0, "q5_K i8z m=%lld k=%lld n=%lld: %lld outputs outside the fp16 rounding bound (worst %.2f of it)",
	      (long long)M, (long long)K, (long long)N, (long long)bad, worst);
	CHECK(bad2 > 0, "q5_K i8z: uncentred offsets stayed within the bound");
	free(src);
	free(pk);
	free(ah);
	free(ref);
	free(ref2);
	free(wf);
	free(eb);
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
	CHECK(qc_target_layout_for(QC_TARGET_SM90, QC_TYPE_Q3_K, ne, 2, &why) == QC_LAYOUT_GGML && why == NULL,
	      "q3_K has no marlin form and that is no give-up");
	CHECK(qc_target_layout_for(QC_TARGET_SM90, QC_TYPE_Q6_K, ne, 2, NULL) == QC_LAYOUT_MARLIN_I6,
	      "q6_K -> marlin_i6 (tests/test_layout_marlin6.c has the rest)");
	CHECK(qc_target_layout_for(QC_TARGET_CPU, QC_TYPE_Q5_K, ne, 2, NULL) == QC_LAYOUT_GGML, "cpu keeps q5_K ggml");
	for (int t = QC_TARGET_SM80; t < QC_TARGET_COUNT; t++)
		CHECK(qc_target_layout_for((enum qc_target)t, QC_TYPE_Q5_K, ne, 2, NULL) == QC_LAYOUT_MARLIN_I8Z,
		      "%s q5_K -> marlin_i8z", qc_target_name((enum qc_target)t));
	CHECK(qc_marlin_stripe(QC_LAYOUT_MARLIN_I8Z) == 32 && qc_marlin_bits(QC_LAYOUT_MARLIN_I8Z) == 8 &&
	      qc_marlin_has_offsets(QC_LAYOUT_MARLIN_I8Z) && !qc_marlin_has_offsets(QC_LAYOUT_MARLIN_I8),
	      "i8z geometry: 32-column stripes of int8 codes with offsets");
	CHECK(qc_layout_from_name("marlin_i4") == QC_LAYOUT_MARLIN_I4 &&
	      qc_layout_from_name("marlin_i8") == QC_LAYOUT_MARLIN_I8 &&
	      qc_layout_from_name("marlin_i8z") == QC_LAYOUT_MARLIN_I8Z, "layout names");
	CHECK(QC_LAYOUT_MARLIN_I4 == 1 && QC_LAYOUT_MARLIN_I8 == 2 && QC_LAYOUT_MARLIN_I4Z == 3 &&
	      QC_LAYOUT_MARLIN_I8Z == 4, "on-disk ids are frozen");
}

/* A real fixture through qconvert --target sm90: at least min_n tensors in layout
 * want, every marlin tensor unpacks to the GGUF's bytes, identical dumps, and a deep
 * verify (every tensor's checksum, every row unpacked and decoded) passes. */
static void fixture(const char *file, enum qc_layout want, int min_n)
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
	for (uint64_t i = 0; i < b->n_tensors; i++) {
		const struct qc_bundle_tensor *bt = &b->tensors[i];
		n_marlin += bt->layout == want;
		const struct qc_gguf_tensor *gt = qc_gguf_model_find(m, bt->name);
		if (!qc_marlin_is(bt->layout) || bt->n_parts || !gt)
			continue;
		/* unpacked back to ggml blocks: the GGUF's bytes exactly */
		uint8_t *raw = malloc((size_t)gt->n_bytes);
		int ru = qc_layout_unpack_rows(bt->layout, bt->type, bt->ne, qc_bundle_data(b, bt), 0,
					       (uint64_t)(bt->ne[1] * bt->ne[2] * bt->ne[3]), raw, &err);
		CHECK(ru == QC_OK && memcmp(raw, qc_gguf_model_data(m, gt), (size_t)gt->n_bytes) == 0,
		      "%s: %s unpacks to other bytes than the GGUF's", file, bt->name);
		free(raw);
		/* i4z/i8z: the fp16 rounding of scale and offset was measured and is small */
		const cJSON *le = cJSON_GetObjectItemCaseSensitive(bt->json, "layout_error");
		const cJSON *rms = cJSON_GetObjectItemCaseSensitive(le, "rms");
		const cJSON *rw = cJSON_GetObjectItemCaseSensitive(le, "rms_weights");
		CHECK(!qc_marlin_has_offsets(bt->layout) ||
		      (cJSON_IsNumber(rms) && cJSON_IsNumber(rw) && rms->valuedouble > 0 &&
		       rms->valuedouble < 2e-3 * rw->valuedouble),
		      "%s: %s has no sane layout_error in the manifest", file, bt->name);
	}
	CHECK(n_marlin >= min_n, "%s: only %d tensors in %s (want %d)", file, n_marlin, qc_layout_name(want), min_n);
	uint64_t n_ok = 0;
	CHECK(qc_verify_bundle(b, true, &n_ok, &err) == QC_OK && n_ok == b->n_tensors, "%s: deep verify: %s", file,
	      err.msg);
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
	roundtrip(QC_TYPE_Q5_K, 256, 32, 1);
	roundtrip(QC_TYPE_HQ8, 96, 64, 2);
	roundtrip(QC_TYPE_HQ8, 1056, 32, 1);
	roundtrip(QC_TYPE_Q5_K, 512, 96, 2);
	roundtrip(QC_TYPE_Q5_K, 768, 64, 3);
	rejects(QC_TYPE_Q4_0, 64, 96, 2);   /* 96 rows: not whole 64-column tiles */
	rejects(QC_TYPE_Q4_0, 32, 40, 2);
	rejects(QC_TYPE_Q8_0, 64, 48, 2);
	rejects(QC_TYPE_Q8_0, 256, 1, 1);   /* a vector */
	rejects(QC_TYPE_Q4_K, 256, 96, 2);
	rejects(QC_TYPE_Q5_K, 256, 48, 2);  /* not whole 32-column tiles */
	rejects(QC_TYPE_Q5_K, 256, 1, 1);   /* a vector */
	doc_positions();
	doc_positions_i8z();
	row_ranges();
	gemm_ref(QC_TYPE_Q4_0, 3, 96, 128);
	gemm_ref(QC_TYPE_Q8_0, 5, 160, 96);
	gemm_ref_z(QC_TYPE_Q4_K, 3, 512, 128);
	gemm_ref_z(QC_TYPE_Q4_1, 2, 96, 64);
	gemm_ref_z(QC_TYPE_HQ4, 4, 160, 128);
	gemm_ref_z(QC_TYPE_Q5_K, 3, 512, 96);
	gemm_ref_z(QC_TYPE_HQ8, 4, 544, 64);
	gemm_ref_q5_k_bound(3, 768, 64);
	parallel_pack(QC_TYPE_Q4_K, 512, 21 * 64);
	parallel_pack(QC_TYPE_Q4_1, 96, 21 * 64);
	parallel_pack(QC_TYPE_Q5_K, 512, 21 * 32);
	targets();
	if (check_have_fixtures("test_layout_marlin")) {
		fixture("tiny-llama-256-Q4_0.gguf", QC_LAYOUT_MARLIN_I4, 5);
		fixture("tiny-llama-256-Q8_0.gguf", QC_LAYOUT_MARLIN_I8, 5);
		fixture("tiny-moe-256-Q4_0.gguf", QC_LAYOUT_MARLIN_I4, 5);
		fixture("tiny-llama-256-Q4_K_S.gguf", QC_LAYOUT_MARLIN_I4Z, 5);
		fixture("tiny-llama-256-Q4_1.gguf", QC_LAYOUT_MARLIN_I4Z, 5);
		fixture("tiny-llama-256-Q5_K_S.gguf", QC_LAYOUT_MARLIN_I8Z, 5);
		/* every matrix but token_embd: output, q, k, v, o, gate, up, down */
		fixture("tiny-llama-256-Q6_K.gguf", QC_LAYOUT_MARLIN_I6, 8);
		/* llama-quantize's Q4_K_M mix: output, attn_v and ffn_down in q6_K */
		fixture("tiny-llama-256-Q4_K_M-mix.gguf", QC_LAYOUT_MARLIN_I6, 3);
		fixture("tiny-llama-256-Q4_K_M-mix.gguf", QC_LAYOUT_MARLIN_I4Z, 5);
	}
	return check_report("test_layout_marlin");
}
