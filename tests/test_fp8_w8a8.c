/* test_fp8_w8a8.c — W8A8 FP8 (f8_a8) on the host: the activation rounding, the fp8_rows
 * layout and the reference GEMM the CUDA kernel is held to.
 *
 * Checks:
 *  - quant/act_fp8.h against compressed-tensors (tests/data/act_fp8_ref.safetensors,
 *    tests/gen/make_hf_quant.py make_act_fp8_ref: calculate_qparams + fake_quantize on
 *    rows of e4m3 ties, subnormals, saturating values, zeros): every rounded value and
 *    every dynamic scale bit for bit;
 *  - fp8_rows: pack then unpack gives the f8_a8 blocks back byte for byte; the geometry;
 *    rows whose scales vary, blocks that disagree on the activation scale, stacked
 *    experts and bad shapes are refused with a reason; sm89 / sm90 / sm100 pick it,
 *    cpu / sm80 / sm86 keep ggml;
 *  - qc_ref_fp8_gemm (reads the packed bytes by docs/layout-fp8.md's offsets) against
 *    the CPU matmul on the unpacked blocks (its own rounding and double sums), static and
 *    dynamic, on fresh random weights, within float roundings of each other, and both
 *    far from the weight-only product (the activation rounding is really applied).
 */
#include <math.h>

#include "check.h"
#include "act_fp8.h"
#include "dequant_hfq.h"
#include "layout.h"
#include "layout_fp8.h"
#include "matmul_cpu_int.h"
#include "ops.h"
#include "qblock.h"
#include "safetensors.h"

#define REF "tests/data/act_fp8_ref.safetensors"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}
static float frnd(void)
{
	return (float)(rnd() % 20001) / 10000.0f - 1.0f;
}

static bool bits_equal(float a, float b)
{
	return memcmp(&a, &b, sizeof a) == 0;
}

static void act_vs_library(void)
{
	struct qc_st *st = NULL;
	struct qc_err err;
	if (qc_st_open(REF, &st, &err)) {
		CHECK(0, "%s: %s", REF, err.msg);
		return;
	}
	const struct qc_st_tensor *tx = qc_st_find(st, "x"), *ts = qc_st_find(st, "static"),
				  *td = qc_st_find(st, "dynamic"), *tds = qc_st_find(st, "dyn_scale"),
				  *tss = qc_st_find(st, "static_scale");
	CHECK(tx && ts && td && tds && tss, "reference tensors");
	if (!tx || !ts || !td || !tds || !tss) {
		qc_st_close(st);
		return;
	}
	const int64_t rows = (int64_t)tx->shape[0], n = (int64_t)tx->shape[1];
	const float *x = (const float *)qc_st_data(st, tx), *ws = (const float *)qc_st_data(st, ts),
		    *wd = (const float *)qc_st_data(st, td), *wds = (const float *)qc_st_data(st, tds);
	float a;
	memcpy(&a, qc_st_data(st, tss), 4);
	float got[256];
	int64_t bad_s = 0, bad_d = 0, bad_scale = 0, saturated = 0;
	for (int64_t r = 0; r < rows && n <= 256; r++) {
		qc_act_fp8_row(x + r * n, n, a, NULL, got);
		for (int64_t i = 0; i < n; i++) {
			bad_s += !bits_equal(got[i], ws[r * n + i]);
			saturated += fabsf(got[i]) == QC_FP8_MAX * a;
		}
		const float s = qc_act_fp8_row(x + r * n, n, 0.0f, NULL, got);
		bad_scale += !bits_equal(s, wds[r]);
		for (int64_t i = 0; i < n; i++)
			bad_d += !bits_equal(got[i], wd[r * n + i]);
	}
	CHECK(rows >= 9 && n == 64, "reference shape %lld x %lld", (long long)rows, (long long)n);
	CHECK(bad_s == 0, "static rounding: %lld of %lld values differ from compressed-tensors", (long long)bad_s,
	      (long long)(rows * n));
	CHECK(bad_d == 0 && bad_scale == 0, "dynamic rounding: %lld values, %lld scales differ", (long long)bad_d,
	      (long long)bad_scale);
	CHECK(saturated >= 1, "the saturating value is in the reference");
	qc_st_close(st);
}

/* n rows of k: f8_a8 blocks with one scale per row and activation scale a; codes avoid NaN. */
static void make_rows(uint8_t *rows, int64_t n, int64_t k, float a)
{
	struct qc_block_F8A8 b;
	qc_hfq_put_f32(b.a, a);
	for (int64_t r = 0; r < n; r++) {
		qc_hfq_put_f32(b.d, 0.001f + (float)(rnd() % 1000) * 1e-5f);
		for (int64_t i = 0; i < k / 32; i++) {
			for (int j = 0; j < 32; j++) {
				uint8_t c = (uint8_t)rnd();
				b.qs[j] = (c & 0x7f) == 0x7f ? (uint8_t)(c ^ 1) : c;
			}
			memcpy(rows + ((uint64_t)r * (uint64_t)(k / 32) + (uint64_t)i) * sizeof b, &b, sizeof b);
		}
	}
}

static void layout_round_trip(void)
{
	const int64_t shapes[][2] = { { 32, 1 }, { 64, 3 }, { 96, 5 }, { 4096 + 32, 7 } };
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		const int64_t k = shapes[s][0], n = shapes[s][1], ne[4] = { k, n, 1, 1 };
		const uint64_t rb = (uint64_t)(k / 32) * sizeof(struct qc_block_F8A8);
		uint8_t *rows = malloc(rb * (uint64_t)n), *back = malloc(rb * (uint64_t)n);
		uint64_t bytes = 0, row = 0;
		struct qc_fp8_rows_geom g;
		struct qc_err err;
		make_rows(rows, n, k, s % 2 ? 0.0f : 0.0625f);
		CHECK(qc_layout_bytes(QC_LAYOUT_FP8_ROWS, QC_TYPE_F8A8, ne, &bytes) == QC_OK &&
			      qc_fp8_rows_geom(QC_TYPE_F8A8, ne, &g) == QC_OK && bytes == g.bytes &&
			      g.scale_off == (uint64_t)(n * k) && g.act_off == g.scale_off + (uint64_t)((4 * n + 15) / 16 * 16) &&
			      g.bytes == g.act_off + 16 && g.scale_off % 16 == 0 && g.act_off % 16 == 0,
		      "geometry of %lld x %lld", (long long)n, (long long)k);
		CHECK(qc_layout_row_bytes(QC_LAYOUT_FP8_ROWS, QC_TYPE_F8A8, k, &row) == QC_OK && row == (uint64_t)k,
		      "row bytes");
		const char *why = "unset";
		CHECK(qc_fp8_rows_data_fits(QC_TYPE_F8A8, ne, rows, &why) && why == NULL, "data fits");
		uint8_t *pk = malloc(bytes);
		memset(pk, 0xa5, bytes);
		int rc = qc_layout_pack_slice(QC_LAYOUT_FP8_ROWS, QC_TYPE_F8A8, ne, rows, pk, &err);
		CHECK(rc == QC_OK, "pack: %s", rc ? err.msg : "");
		bool pad0 = true;
		for (uint64_t i = g.scale_off + 4 * (uint64_t)n; i < g.bytes; i++)
			pad0 &= i < g.act_off || i >= g.act_off + 4 ? pk[i] == 0 : true;
		CHECK(pad0, "padding bytes are 0");
		rc = qc_layout_unpack_rows(QC_LAYOUT_FP8_ROWS, QC_TYPE_F8A8, ne, pk, 0, (uint64_t)n, back, &err);
		CHECK(rc == QC_OK && memcmp(rows, back, rb * (uint64_t)n) == 0, "unpack(pack(x)) == x");
		if (n > 2) { /* a row range alone */
			rc = qc_layout_unpack_rows(QC_LAYOUT_FP8_ROWS, QC_TYPE_F8A8, ne, pk, 1, 2, back, &err);
			CHECK(rc == QC_OK && memcmp(rows + rb, back, 2 * rb) == 0, "rows 1..2");
		}
		CHECK(qc_layout_unpack_rows(QC_LAYOUT_FP8_ROWS, QC_TYPE_F8A8, ne, pk, (uint64_t)n, 1, back, &err) ==
			      QC_ERANGE,
		      "a row past the end is refused");
		/* a scale that varies along a row, an activation scale that differs: refused */
		if (k >= 64) {
			struct qc_block_F8A8 b;
			memcpy(&b, rows + sizeof b, sizeof b);
			qc_hfq_put_f32(b.d, 2.0f);
			memcpy(rows + sizeof b, &b, sizeof b);
			CHECK(!qc_fp8_rows_data_fits(QC_TYPE_F8A8, ne, rows, &why) && why && strstr(why, "vary"),
			      "a varying row scale is seen (%s)", why ? why : "");
			CHECK(qc_layout_pack_slice(QC_LAYOUT_FP8_ROWS, QC_TYPE_F8A8, ne, rows, pk, &err) == QC_EFORMAT &&
				      strstr(err.msg, "row 0"),
			      "pack names the row: %s", err.msg);
			make_rows(rows, n, k, 0.5f);
			memcpy(&b, rows + (uint64_t)(n - 1) * rb, sizeof b);
			qc_hfq_put_f32(b.a, 0.25f);
			memcpy(rows + (uint64_t)(n - 1) * rb, &b, sizeof b);
			CHECK(!qc_fp8_rows_data_fits(QC_TYPE_F8A8, ne, rows, &why) && why && strstr(why, "activation"),
			      "a differing activation scale is seen");
		}
		free(pk);
		free(rows);
		free(back);
	}
	const struct { int64_t ne[4]; uint32_t dims; enum qc_type t; } bad[] = {
		{ { 64, 8, 4, 1 }, 3, QC_TYPE_F8A8 },  /* stacked experts */
		{ { 48, 8, 1, 1 }, 2, QC_TYPE_F8A8 },  /* K not a multiple of 32 */
		{ { 64, 0, 1, 1 }, 2, QC_TYPE_F8A8 },  /* no rows */
		{ { 64, 8, 1, 1 }, 2, QC_TYPE_F8E4M3 }, /* weight-only FP8 */
		{ { 64, 1, 1, 1 }, 1, QC_TYPE_F8A8 },  /* a vector */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *why = NULL;
		uint64_t b;
		CHECK(!qc_fp8_rows_fits(bad[i].t, bad[i].ne, bad[i].dims, &why) && why != NULL, "misfit %zu refused", i);
		CHECK(bad[i].dims == 1 || qc_layout_bytes(QC_LAYOUT_FP8_ROWS, bad[i].t, bad[i].ne, &b) == QC_EFORMAT,
		      "bytes of misfit %zu", i);
	}
	const int64_t ne[4] = { 4096, 4096, 1, 1 };
	for (int t = 0; t < QC_TARGET_COUNT; t++) {
		const enum qc_layout l = qc_target_layout_for((enum qc_target)t, QC_TYPE_F8A8, ne, 2, NULL);
		const bool fp8 = t == QC_TARGET_SM89 || t == QC_TARGET_SM90 || t == QC_TARGET_SM100;
		CHECK(l == (fp8 ? QC_LAYOUT_FP8_ROWS : QC_LAYOUT_GGML), "target %s: layout %s", qc_target_name((enum qc_target)t),
		      qc_layout_name(l));
	}
	CHECK(QC_LAYOUT_FP8_ROWS == 7 && QC_TYPE_F8A8 == 134, "on-disk ids are frozen");
}

/* The reference GEMM on packed bytes vs the CPU matmul on the blocks. */
static void gemm_vs_cpu(float a)
{
	const int64_t k = 256, n = 19, t = 5, ldx = k + 3, ldy = n + 2, ne[4] = { k, n, 1, 1 };
	const uint64_t rb = (uint64_t)(k / 32) * sizeof(struct qc_block_F8A8);
	uint8_t *rows = malloc(rb * (uint64_t)n);
	uint64_t bytes;
	qc_layout_bytes(QC_LAYOUT_FP8_ROWS, QC_TYPE_F8A8, ne, &bytes);
	uint8_t *pk = malloc(bytes);
	float *x = malloc(sizeof(float) * (size_t)(t * ldx)), *xd = malloc(sizeof(float) * (size_t)(t * k));
	float *y_ref = malloc(sizeof(float) * (size_t)(t * ldy)), *y_cpu = malloc(sizeof(float) * (size_t)(t * n));
	float *wrow = malloc(sizeof(float) * (size_t)k);
	struct qc_err err;
	make_rows(rows, n, k, a);
	for (int64_t i = 0; i < t * ldx; i++)
		x[i] = frnd() * (i % 11 == 0 ? 3.0f : 0.5f);
	for (int64_t i = 0; i < t * ldy; i++)
		y_ref[i] = NAN;
	CHECK(qc_layout_pack_slice(QC_LAYOUT_FP8_ROWS, QC_TYPE_F8A8, ne, rows, pk, &err) == QC_OK, "pack");
	CHECK(qc_ref_fp8_rows_act_scale(pk, k, n) == a, "the activation scale is read back");
	CHECK(qc_ref_fp8_gemm(pk, k, n, x, ldx, t, y_ref, ldy) == QC_OK, "reference gemm");
	for (int64_t r = 0; r < t; r++)
		memcpy(xd + r * k, x + r * ldx, sizeof(float) * (size_t)k);
	struct qc_matmul *mm = NULL;
	struct qc_mat w = { .data = rows, .type = QC_TYPE_F8A8, .n_in = k, .n_out = n, .n_mat = 1, .row_bytes = rb,
			    .mat_stride = rb * (uint64_t)n };
	CHECK(qc_matmul_new(k, t, 1, QC_ACT_ROUND_NONE, &mm, &err) == QC_OK, "matmul");
	qc_matmul_prepare(mm, &w, 0, xd, t, y_cpu, n);
	qc_matmul_rows(mm, 0, 0, n);
	double worst = 0, apart = 0;
	bool gaps = true;
	for (int64_t r = 0; r < t; r++) {
		for (int64_t o = 0; o < n; o++) {
			/* the weight-only product: how far the rounding moves the result */
			qc_types[QC_TYPE_F8A8].dequant_row(rows + (uint64_t)o * rb, wrow, k);
			double wo = 0, mag = 0;
			for (int64_t i = 0; i < k; i++) {
				wo += (double)wrow[i] * (double)x[r * ldx + i];
				mag += fabs((double)wrow[i] * (double)x[r * ldx + i]);
			}
			/* the CPU multiplies fl(e4m3 * d) by fl(e4m3 * s): two float roundings a term
			   (and 2x for the activations' own deviation), the reference none */
			const double d = fabs((double)y_ref[r * ldy + o] - (double)y_cpu[r * n + o]) /
					 (mag * 0x1p-21 + fabs((double)y_ref[r * ldy + o]) * 0x1p-24 + 1e-30);
			worst = d > worst ? d : worst;
			apart = fmax(apart, fabs(wo - (double)y_ref[r * ldy + o]) / (fabs(wo) + 1e-30));
		}
		gaps &= isnan(y_ref[r * ldy + n]) && isnan(y_ref[r * ldy + n + 1]);
	}
	CHECK(worst <= 1.0, "a=%g: reference and CPU matmul differ by %.3g x their bound (2^-21 sum |w x|)", (double)a, worst);
	CHECK(gaps, "the reference wrote outside its rows");
	CHECK(apart > 1e-3, "a=%g: the rounded activations change the result (%.3g relative)", (double)a, apart);
	qc_matmul_free(mm);
	free(rows);
	free(pk);
	free(x);
	free(xd);
	free(y_ref);
	free(y_cpu);
	free(wrow);
}

int main(void)
{
	act_vs_library();
	layout_round_trip();
	gemm_vs_cpu(0.0f);
	gemm_vs_cpu(0.01171875f);
	return check_report("test_fp8_w8a8");
}
