/* test_layout_nvfp4.c — the nvfp4_swz layout (quant/layout_nvfp4.c) and its C
 * reference GEMV (runtime/ops/nvfp4_swz.c).
 * - The scale offset against two independent index computations: vLLM's
 *   swizzle_blockscale done literally (pad, reshape to (B, Np/128, 4, 32, Kgp/4, 4),
 *   permute (0, 1, 4, 3, 2, 5), walk the output in order) and CUTLASS's
 *   SfKMajorAtom ((32,4),(16,4)):((16,4),(0,1)) tiled K-mode first; a deliberately
 *   wrong formula must fail the same comparison.
 * - pack -> unpack gives the nvfp4 blocks back byte for byte on odd shapes (N not a
 *   multiple of 128, K/16 not of 4), several slices, row spans; padding is zero.
 * - Refusals: shapes that cannot fit, blocks whose scales are not e4m3/g (pack
 *   fails; plan keeps the tensor ggml with a note); targets and names.
 * - The reference GEMV equals the nvfp4 decode-then-dot (qc_ref_gemv_q,
 *   qc_ref_gemm_f16 on the ggml rows).
 * - The NVFP4 Hugging Face fixtures converted with --target sm100: nvfp4_swz tensors
 *   that unpack to the GGUF's bytes, dumps equal to the cpu bundle's, verify --deep
 *   passes, the stored codes are the checkpoint's E4M3 scales times a power of two.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tests/check.h"
#include "bundle.h"
#include "convert.h"
#include "dump.h"
#include "gguf_write.h"
#include "hf_convert.h"
#include "layout_nvfp4.h"
#include "plan.h"
#include "dequant_hfq.h"
#include "ops.h"
#include "safetensors.h"
#include "verify.h"

#define DIR_HFQ "tests/data/hfq"
#define BLK sizeof(struct qc_block_NVFP4)

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void)
{
	return check_xorshift(&rng);
}

static float frand(float lo, float hi)
{
	return lo + (hi - lo) * (float)(rnd() & 0xffffff) / (float)0x1000000;
}

/* ---- the swizzle formula --------------------------------------------------- */

typedef uint64_t (*off_fn)(int64_t r, int64_t c, int64_t kgp);

/* vLLM swizzle_blockscale, literally: the padded [Np, Kgp] scale matrix viewed as
 * (1, Np/128, 4, 32, Kgp/4, 4) (row = a*128 + b*32 + i, col = d*4 + e), permuted to
 * (0, 1, 4, 3, 2, 5) = (batch, a, d, i, b, e) and made contiguous: walking that
 * order gives the output bytes one by one. where[row * Kgp + col] = output index. */
static void vllm_positions(int64_t np, int64_t kgp, uint64_t *where)
{
	uint64_t pos = 0;
	for (int64_t a = 0; a < np / 128; a++)
		for (int64_t d = 0; d < kgp / 4; d++)
			for (int64_t i = 0; i < 32; i++)
				for (int64_t b = 0; b < 4; b++)
					for (int64_t e = 0; e < 4; e++)
						where[(a * 128 + b * 32 + i) * kgp + d * 4 + e] = pos++;
}

/* CUTLASS Sm1xxBlockScaledBasicChunk<16>::SfKMajorAtom, shape ((32,4),(16,4)),
 * stride ((16,4),(0,1)), at element (m, k) of a 128 x 64 atom; atoms tiled with the
 * K mode first (tile_to_shape(..., Step<_2,_1,_3>)), 512 bytes each. */
static uint64_t cutlass_off(int64_t m, int64_t k, int64_t kgp)
{
	const int64_t mi = m % 128, ki = k % 64;
	const int64_t atom = (mi % 32) * 16 + (mi / 32) * 4 + (ki % 16) * 0 + (ki / 16) * 1;
	return (uint64_t)(((m / 128) * (kgp / 4) + k / 64) * 512 + atom);
}

/* a plausible mistake: row-major 128x4 tiles (r % 128) * 4 + c */
static uint64_t wrong_off(int64_t r, int64_t c, int64_t kgp)
{
	return ((uint64_t)(r / 128) * (uint64_t)(kgp / 4) + (uint64_t)(c / 4)) * 512 + (uint64_t)(r % 128) * 4 +
	       (uint64_t)(c % 4);
}

/* f agrees with both independent computations on every padded position */
static bool formula_agrees(off_fn f, int64_t n, int64_t kg)
{
	const int64_t np = (n + 127) / 128 * 128, kgp = (kg + 3) / 4 * 4;
	uint64_t *where = malloc(sizeof(uint64_t) * (size_t)(np * kgp));
	bool ok = where != NULL;
	if (where)
		vllm_positions(np, kgp, where);
	for (int64_t r = 0; ok && r < np; r++)
		for (int64_t c = 0; ok && c < kgp; c++) {
			ok = f(r, c, kgp) == where[r * kgp + c];
			for (int64_t k = c * 16; ok && k < c * 16 + 16; k++)
				ok = f(r, c, kgp) == cutlass_off(r, k, kgp);
		}
	free(where);
	return ok;
}

static void swizzle_formula(void)
{
	static const int64_t shapes[][2] = { { 1, 2 }, { 128, 4 }, { 130, 6 }, { 257, 12 }, { 384, 8 }, { 33, 258 } };
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
		CHECK(formula_agrees(qc_nvfp4_swz_scale_off, shapes[i][0], shapes[i][1]),
		      "scale offset of [%lld, %lld] differs from vLLM's swizzle / CUTLASS's atom",
		      (long long)shapes[i][0], (long long)shapes[i][1]);
	CHECK(!formula_agrees(wrong_off, 130, 6), "the comparison accepts a wrong formula");
	/* the wording: a 512-byte tile ordered (32, 4, 4) */
	CHECK(qc_nvfp4_swz_scale_off(0, 0, 8) == 0 && qc_nvfp4_swz_scale_off(1, 0, 8) == 16 &&
	      qc_nvfp4_swz_scale_off(32, 0, 8) == 4 && qc_nvfp4_swz_scale_off(0, 3, 8) == 3 &&
	      qc_nvfp4_swz_scale_off(0, 4, 8) == 512 && qc_nvfp4_swz_scale_off(128, 0, 8) == 1024 &&
	      qc_nvfp4_swz_scale_off(127, 3, 8) == 31 * 16 + 3 * 4 + 3, "hand-placed scales");
}

/* ---- pack / unpack ----------------------------------------------------------- */

enum gen_mode {
	GEN_SLICE_G = 0,           /* one global scale per slice (compressed-tensors) */
	GEN_ROW_G = 1,             /* a global scale per row: the per-row fallback */
	GEN_SPECIAL = 2,           /* as 0 with +0, -0, negative and NaN scale codes */
};

/* n rows of nvfp4 blocks as hfq_ct.c writes them: d = fl(e4m3(s)/G), random codes */
static void gen_rows(uint8_t *rows, int64_t k, int64_t n, enum gen_mode mode)
{
	float G = frand(0.5f, 4096.0f);
	for (int64_t r = 0; r < n; r++) {
		if (mode == GEN_ROW_G)
			G = frand(0.5f, 4096.0f);
		for (int64_t b = 0; b < k / 32; b++) {
			struct qc_block_NVFP4 blk;
			for (int j = 0; j < 2; j++) {
				uint8_t s = (uint8_t)(rnd() % 127);
				if (mode == GEN_SPECIAL) {
					static const uint8_t sp[] = { 0x00, 0x80, 0x7f, 0xb8, 0xfe };
					const uint32_t u = rnd() % 16;
					s = u < sizeof sp ? sp[u] : s;
				}
				qc_hfq_put_f32(blk.d + 2 * j, qc_e4m3_to_f32(s) / G);
			}
			for (int j = 0; j < 16; j++)
				blk.qs[j] = (uint8_t)rnd();
			memcpy(rows + ((uint64_t)r * (uint64_t)(k / 32) + (uint64_t)b) * BLK, &blk, BLK);
		}
	}
}

static void roundtrip(int64_t k, int64_t n, int64_t slices, enum gen_mode mode)
{
	const int64_t ne[4] = { k, n, slices, 1 };
	struct qc_nvfp4_swz_geom g;
	uint64_t size = 0, rb = 0;
	CHECK(qc_target_layout_for(QC_TARGET_SM100, QC_TYPE_NVFP4, ne, slices > 1 ? 3 : 2, NULL) == QC_LAYOUT_NVFP4_SWZ,
	      "[%lld, %lld] should fit nvfp4_swz", (long long)k, (long long)n);
	if (qc_nvfp4_swz_geom(QC_TYPE_NVFP4, ne, &g) || qc_layout_bytes(QC_LAYOUT_NVFP4_SWZ, QC_TYPE_NVFP4, ne, &size) ||
	    qc_layout_row_bytes(QC_LAYOUT_NVFP4_SWZ, QC_TYPE_NVFP4, k, &rb)) {
		CHECK(0, "geometry of [%lld, %lld]", (long long)k, (long long)n);
		return;
	}
	const int64_t np = (n + 127) / 128 * 128, kgp = (k / 16 + 3) / 4 * 4;
	CHECK(size == g.slice_bytes * (uint64_t)slices && rb == (uint64_t)k / 2 &&
	      g.slice_bytes == (uint64_t)(n * k / 2 + np * kgp + 4 * np) && g.slice_bytes % 16 == 0,
	      "sizes of [%lld, %lld]: slice %llu", (long long)k, (long long)n, (unsigned long long)g.slice_bytes);
	const uint64_t grow = (uint64_t)(k / 32) * BLK, rows = (uint64_t)(n * slices);
	uint8_t *src = malloc(grow * rows), *pk = malloc(size), *back = malloc(grow * rows);
	gen_rows(src, k, n * slices, mode);
	struct qc_err err = {0};
	int rc = QC_OK;
	for (int64_t s = 0; !rc && s < slices; s++) {
		const int64_t one[4] = { k, n, 1, 1 };
		CHECK(qc_nvfp4_swz_data_fits(QC_TYPE_NVFP4, one, src + (uint64_t)s * grow * (uint64_t)n, NULL),
		      "data of slice %lld should fit", (long long)s);
		rc = qc_layout_pack_slice(QC_LAYOUT_NVFP4_SWZ, QC_TYPE_NVFP4, one, src + (uint64_t)s * grow * (uint64_t)n,
					  pk + (uint64_t)s * g.slice_bytes, &err);
		CHECK(rc == QC_OK, "pack [%lld, %lld] mode %d: %s", (long long)k, (long long)n, mode, err.msg);
	}
	rc = rc ? rc : qc_layout_unpack_rows(QC_LAYOUT_NVFP4_SWZ, QC_TYPE_NVFP4, ne, pk, 0, rows, back, &err);
	CHECK(rc == QC_OK && memcmp(src, back, grow * rows) == 0, "[%lld, %lld] x%lld mode %d: unpack != input",
	      (long long)k, (long long)n, (long long)slices, mode);
	for (int t = 0; !rc && t < 8; t++) { /* row spans, across slices too */
		const uint64_t r0 = rnd() % rows, cnt = 1 + rnd() % (rows - r0);
		rc = qc_layout_unpack_rows(QC_LAYOUT_NVFP4_SWZ, QC_TYPE_NVFP4, ne, pk, r0, cnt, back, &err);
		CHECK(rc == QC_OK && memcmp(src + r0 * grow, back, cnt * grow) == 0, "span %llu+%llu",
		      (unsigned long long)r0, (unsigned long long)cnt);
	}
	/* padding: scale bytes of rows >= N or groups >= K/16, and g of rows >= N, are 0;
	 * a slice of one global scale keeps one g */
	for (int64_t s = 0; !rc && s < slices; s++) {
		const uint8_t *base = pk + (uint64_t)s * g.slice_bytes;
		bool pad0 = true, one_g = true;
		for (int64_t r = 0; r < np; r++)
			for (int64_t c = 0; c < kgp; c++)
				if (r >= n || c >= k / 16)
					pad0 = pad0 && base[g.scale_off + qc_nvfp4_swz_scale_off(r, c, kgp)] == 0;
		float g0, gr;
		memcpy(&g0, base + g.gs_off, 4);
		for (int64_t r = 0; r < np; r++) {
			memcpy(&gr, base + g.gs_off + 4 * (uint64_t)r, 4);
			pad0 = pad0 && (r < n || gr == 0);
			one_g = one_g && (r >= n || memcmp(&gr, &g0, 4) == 0);
		}
		CHECK(pad0, "[%lld, %lld] slice %lld: padding is not zero", (long long)k, (long long)n, (long long)s);
		CHECK(mode == GEN_ROW_G || one_g, "[%lld, %lld] slice %lld: several g for one global scale", (long long)k,
		      (long long)n, (long long)s);
	}
	/* a flipped scale code is seen by the unpack */
	if (!rc) {
		pk[g.scale_off] ^= 0x08;
		qc_layout_unpack_rows(QC_LAYOUT_NVFP4_SWZ, QC_TYPE_NVFP4, ne, pk, 0, 1, back, &err);
		CHECK(memcmp(src, back, grow) != 0, "a flipped scale code unpacks to the same row");
	}
	free(src);
	free(pk);
	free(back);
}

/* ---- refusals, targets, names --------------------------------------------- */

static void refusals(void)
{
	static const struct { int64_t ne[4]; uint32_t nd; enum qc_type t; } bad[] = {
		{ { 64, 8, 1, 1 }, 1, QC_TYPE_NVFP4 },         /* a vector */
		{ { 16, 8, 1, 1 }, 2, QC_TYPE_NVFP4 },         /* K not a multiple of 32 */
		{ { 64, 0, 1, 1 }, 2, QC_TYPE_NVFP4 },         /* no rows */
		{ { (int64_t)1 << 25, 8, 1, 1 }, 2, QC_TYPE_NVFP4 }, /* K past 2^24 */
		{ { 64, ((int64_t)1 << 30) + 1, 1, 1 }, 2, QC_TYPE_NVFP4 },
		{ { 64, 8, 1, 1 }, 2, QC_TYPE_Q4_0 },          /* not nvfp4 */
	};
	uint8_t dummy[64] = { 0 };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *why = NULL;
		uint64_t b;
		struct qc_err err = {0};
		CHECK(!qc_nvfp4_swz_fits(bad[i].t, bad[i].ne, bad[i].nd, &why) && why, "shape %zu accepted", i);
		if (bad[i].nd >= 2) {
			CHECK(qc_layout_bytes(QC_LAYOUT_NVFP4_SWZ, bad[i].t, bad[i].ne, &b) == QC_EFORMAT, "bytes of %zu", i);
			CHECK(qc_layout_unpack_rows(QC_LAYOUT_NVFP4_SWZ, bad[i].t, bad[i].ne, dummy, 0, 1, dummy, &err) != QC_OK,
			      "unpack of %zu", i);
		}
		if (bad[i].t == QC_TYPE_NVFP4) {
			why = NULL;
			CHECK(qc_target_layout_for(QC_TARGET_SM100, QC_TYPE_NVFP4, bad[i].ne, bad[i].nd, &why) ==
				      QC_LAYOUT_GGML && why, "sm100 takes misfit %zu without a reason", i);
		}
	}
	/* rows past the tensor */
	const int64_t ne[4] = { 32, 2, 1, 1 };
	uint8_t rows[2 * BLK], pk[2048]; /* a slice of 2 rows: 32 + 512 + 512 bytes */
	struct qc_err err = {0};
	gen_rows(rows, 32, 2, GEN_SLICE_G);
	CHECK(qc_layout_pack_slice(QC_LAYOUT_NVFP4_SWZ, QC_TYPE_NVFP4, ne, rows, pk, &err) == QC_OK, "%s", err.msg);
	CHECK(qc_layout_unpack_rows(QC_LAYOUT_NVFP4_SWZ, QC_TYPE_NVFP4, ne, pk, 1, 2, rows, &err) == QC_ERANGE,
	      "rows past the end unpacked");
	/* scales that are no e4m3 code over one g: d = 1 and the next float in a row */
	gen_rows(rows, 32, 2, GEN_SLICE_G);
	struct qc_block_NVFP4 blk;
	memcpy(&blk, rows + BLK, BLK);
	qc_hfq_put_f32(blk.d, 1.0f);
	qc_hfq_put_f32(blk.d + 2, nextafterf(1.0f, 2.0f));
	memcpy(rows + BLK, &blk, BLK);
	const char *why = NULL;
	CHECK(!qc_nvfp4_swz_data_fits(QC_TYPE_NVFP4, ne, rows, &why) && why, "inexact scales accepted");
	CHECK(qc_layout_pack_slice(QC_LAYOUT_NVFP4_SWZ, QC_TYPE_NVFP4, ne, rows, pk, &err) == QC_EFORMAT &&
	      strstr(err.msg, "row 1"), "pack of inexact scales: %s", err.msg);
}

static void targets(void)
{
	const int64_t ne[4] = { 4096, 14336, 1, 1 };
	const char *why = "x";
	CHECK(qc_target_from_name("sm100") == QC_TARGET_SM100 && strcmp(qc_target_name(QC_TARGET_SM100), "sm100") == 0,
	      "target sm100");
	CHECK(QC_LAYOUT_NVFP4_SWZ == 5 && qc_layout_from_name("nvfp4_swz") == QC_LAYOUT_NVFP4_SWZ &&
	      strcmp(qc_layout_name(QC_LAYOUT_NVFP4_SWZ), "nvfp4_swz") == 0, "layout id 5 is nvfp4_swz (frozen)");
	CHECK(qc_target_layout_for(QC_TARGET_SM100, QC_TYPE_NVFP4, ne, 2, &why) == QC_LAYOUT_NVFP4_SWZ && !why,
	      "sm100 nvfp4 -> nvfp4_swz");
	for (int t = QC_TARGET_CPU; t <= QC_TARGET_SM90; t++) {
		why = "x";
		CHECK(qc_target_layout_for((enum qc_target)t, QC_TYPE_NVFP4, ne, 2, &why) == QC_LAYOUT_GGML && !why,
		      "%s keeps nvfp4 ggml, no give-up", qc_target_name((enum qc_target)t));
	}
	CHECK(qc_target_layout_for(QC_TARGET_SM100, QC_TYPE_Q4_0, ne, 2, NULL) ==
		      qc_target_layout_for(QC_TARGET_SM90, QC_TYPE_Q4_0, ne, 2, NULL) &&
	      qc_target_layout_for(QC_TARGET_SM100, QC_TYPE_Q6_K, ne, 2, NULL) == QC_LAYOUT_MARLIN_I6 &&
	      qc_target_layout_for(QC_TARGET_SM100, QC_TYPE_Q3_K, ne, 2, NULL) == QC_LAYOUT_GGML,
	      "sm100 takes sm90's choices for the other types");
}

/* plan: an nvfp4 tensor with exact scales takes nvfp4_swz on sm100, one without
 * stays ggml with a note naming it; sm90 keeps both ggml */
static void plan_keeps_inexact_ggml(void)
{
	char path[] = "/tmp/qc_test_nvfp4_plan_XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0, "mkstemp");
	close(fd);
	const int64_t ne[2] = { 64, 8 };
	uint8_t good[8 * 2 * BLK], bad[8 * 2 * BLK];
	gen_rows(good, 64, 8, GEN_SLICE_G);
	gen_rows(bad, 64, 8, GEN_SLICE_G);
	struct qc_block_NVFP4 blk;
	memcpy(&blk, bad + 5 * BLK, BLK);
	qc_hfq_put_f32(blk.d, nextafterf(qc_hfq_get_f32(blk.d), INFINITY));
	memcpy(bad + 5 * BLK, &blk, BLK);
	struct qc_err err = {0};
	struct qc_gguf_writer *w = qc_gguf_writer_new(3, 0);
	int rc = !w || qc_gguf_writer_add_str(w, "general.architecture", "llama", &err) ||
		 qc_gguf_writer_add_tensor(w, "blk.0.ffn_down.weight", QC_TYPE_NVFP4, 2, ne, good, &err) ||
		 qc_gguf_writer_add_tensor(w, "blk.0.ffn_up.weight", QC_TYPE_NVFP4, 2, ne, bad, &err) ||
		 qc_gguf_writer_write_file(w, path, &err);
	qc_gguf_writer_free(w);
	CHECK(rc == 0, "write gguf: %s", err.msg);
	struct qc_gguf_model *m = NULL;
	if (rc || qc_gguf_model_open(path, &m, &err)) {
		CHECK(0, "open %s: %s", path, err.msg);
		unlink(path);
		return;
	}
	for (int tg = 0; tg < 2; tg++) {
		struct qc_plan *p = NULL;
		rc = qc_plan_build(m, tg ? QC_TARGET_SM100 : QC_TARGET_SM90, 0, &p, &err);
		CHECK(rc == QC_OK && p->n == 2, "plan: %s", err.msg);
		if (rc)
			continue;
		bool noted = false;
		for (int i = 0; i < p->n_notes; i++)
			noted = noted || (strstr(p->notes[i], "blk.0.ffn_up.weight") && strstr(p->notes[i], "nvfp4_swz"));
		for (uint64_t i = 0; i < p->n; i++) {
			const bool is_bad = strcmp(p->t[i].name, "blk.0.ffn_up.weight") == 0;
			CHECK(p->t[i].layout == (tg && !is_bad ? QC_LAYOUT_NVFP4_SWZ : QC_LAYOUT_GGML), "%s: %s for %s",
			      p->t[i].name, qc_layout_name(p->t[i].layout), tg ? "sm100" : "sm90");
		}
		CHECK(noted == (tg == 1), "note about the inexact tensor: %d for %s", noted, tg ? "sm100" : "sm90");
		qc_plan_free(p);
	}
	qc_gguf_model_close(m);
	unlink(path);
}

/* ---- the reference GEMV -------------------------------------------------------- */

static void reference(int64_t k, int64_t n, int n_mat)
{
	const int64_t ne1[4] = { k, n, 1, 1 }, n_rows = 5, ldx = k + 3, ldy = n + 2;
	struct qc_nvfp4_swz_geom g;
	QC_ASSERT(qc_nvfp4_swz_geom(QC_TYPE_NVFP4, ne1, &g) == QC_OK);
	const uint64_t grow = (uint64_t)(k / 32) * BLK, gms = grow * (uint64_t)n;
	uint8_t *src = malloc(gms * (uint64_t)n_mat), *pk = malloc(g.slice_bytes * (uint64_t)n_mat);
	float *x = malloc(sizeof(float) * (size_t)(n_rows * ldx));
	float *a = calloc((size_t)(n_rows * ldy), sizeof(float)), *b = calloc((size_t)(n_rows * ldy), sizeof(float));
	gen_rows(src, k, n * n_mat, GEN_SLICE_G);
	for (int64_t i = 0; i < n_rows * ldx; i++)
		x[i] = frand(-1, 1);
	struct qc_err err = {0};
	for (int s = 0; s < n_mat; s++)
		CHECK(qc_layout_pack_slice(QC_LAYOUT_NVFP4_SWZ, QC_TYPE_NVFP4, ne1, src + (uint64_t)s * gms,
					   pk + (uint64_t)s * g.slice_bytes, &err) == QC_OK, "%s", err.msg);
	const int32_t ex[5] = { 2 % n_mat, 0, 1 % n_mat, 1 % n_mat, 0 };
	/* float and fp64 sums over the same weights in the same order: equal bit for bit */
	for (int truth = 0; truth < 2; truth++) {
		qc_ref_nvfp4_swz(pk, k, n, g.slice_bytes, x, ldx, 1, n_mat > 1 ? ex : NULL, n_rows, a, ldy,
				 truth ? QC_REF_F64 : QC_REF_F32);
		qc_ref_gemv_q(src, QC_TYPE_NVFP4, k, n, grow, gms, x, ldx, 1, n_mat > 1 ? ex : NULL, n_rows, b, ldy, truth);
		CHECK(memcmp(a, b, sizeof(float) * (size_t)(n_rows * ldy)) == 0,
		      "nvfp4_swz ref [%lld, %lld] x%d (%s) != nvfp4 decode-then-dot", (long long)k, (long long)n, n_mat,
		      truth ? "f64" : "f32");
	}
	if (n_mat == 1) { /* fp16 weights and activations, double sums: the cuBLAS path's class */
		qc_ref_nvfp4_swz(pk, k, n, g.slice_bytes, x, ldx, 1, NULL, n_rows, a, ldy, QC_REF_F16);
		qc_ref_gemm_f16(src, QC_TYPE_NVFP4, k, n, grow, x, ldx, n_rows, b, ldy);
		CHECK(memcmp(a, b, sizeof(float) * (size_t)(n_rows * ldy)) == 0, "f16 ref [%lld, %lld] != gemm_f16 ref",
		      (long long)k, (long long)n);
	}
	/* the comparison sees a wrong scale */
	pk[g.scale_off + qc_nvfp4_swz_scale_off(n - 1, k / 16 - 1, g.kgp)] ^= 0x10;
	qc_ref_nvfp4_swz(pk, k, n, g.slice_bytes, x, ldx, 1, NULL, 1, a, ldy, QC_REF_F32);
	qc_ref_gemv_q(src, QC_TYPE_NVFP4, k, n, grow, gms, x, ldx, 1, NULL, 1, b, ldy, 0);
	CHECK(a[n - 1] != b[n - 1], "a flipped scale code leaves the reference unchanged");
	free(src);
	free(pk);
	free(x);
	free(a);
	free(b);
}

/* ---- the Hugging Face NVFP4 fixtures through the converter ---------------------- */

static char *dump_mem(bool bundle, const void *src, const char *name, size_t *len)
{
	char *buf = NULL;
	struct qc_err err = {0};
	FILE *f = open_memstream(&buf, len);
	const int rc = bundle ? qc_dump_bundle(src, name, f, &err) : qc_dump_gguf(src, name, f, &err);
	fclose(f);
	if (rc) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* The stored codes of blk.0.ffn_down.weight (rows in checkpoint order) are the
 * checkpoint's weight_scale values times g/global_scale, a power of two. */
static void codes_match_checkpoint(const char *fx, const struct qc_bundle *b)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s/model.safetensors", DIR_HFQ, fx);
	struct qc_st *st = NULL;
	struct qc_err err = {0};
	const struct qc_bundle_tensor *t = qc_bundle_find(b, "blk.0.ffn_down.weight");
	if (qc_st_open(path, &st, &err) || !t || t->layout != QC_LAYOUT_NVFP4_SWZ) {
		CHECK(0, "%s: no checkpoint or no nvfp4_swz ffn_down (%s)", fx, err.msg);
		qc_st_close(st);
		return;
	}
	const struct qc_st_tensor *sc = qc_st_find(st, "model.layers.0.mlp.down_proj.weight_scale");
	const struct qc_st_tensor *gl = qc_st_find(st, "model.layers.0.mlp.down_proj.weight_global_scale");
	struct qc_nvfp4_swz_geom g;
	if (!sc || !gl || qc_nvfp4_swz_geom(t->type, t->ne, &g) || sc->n_elems != (uint64_t)(g.n * g.k / 16)) {
		CHECK(0, "%s: down_proj scales missing or of another shape", fx);
		qc_st_close(st);
		return;
	}
	float global, gr;
	memcpy(&global, qc_st_data(st, gl), 4);
	const uint8_t *data = qc_bundle_data(b, t), *ck = qc_st_data(st, sc);
	bool ok = true;
	for (int64_t r = 0; r < g.n; r++) {
		memcpy(&gr, data + g.gs_off + 4 * (uint64_t)r, 4);
		int e;
		const double ratio = (double)gr / (double)global;
		ok = ok && frexp(ratio, &e) == 0.5;
		for (int64_t c = 0; ok && c < g.k / 16; c++)
			ok = (double)qc_e4m3_to_f32(data[g.scale_off + qc_nvfp4_swz_scale_off(r, c, g.kgp)]) ==
			     (double)qc_e4m3_to_f32(ck[r * (g.k / 16) + c]) * ratio;
	}
	CHECK(ok, "%s: stored scale codes are not the checkpoint's times a power of two", fx);
	qc_st_close(st);
}

static void fixture(const char *fx, int min_swz)
{
	char dir[256], tmp[128], gg[160], qb[2][160];
	snprintf(dir, sizeof dir, "%s/%s", DIR_HFQ, fx);
	snprintf(tmp, sizeof tmp, "/tmp/qc_test_nvfp4_%d", (int)getpid());
	snprintf(gg, sizeof gg, "%s.gguf", tmp);
	cJSON *source = NULL;
	struct qc_err err = {0};
	int rc = qc_hf_to_gguf(dir, gg, &source, 0, &err);
	CHECK(rc == QC_OK, "%s: to gguf: %s", fx, err.msg);
	struct qc_bundle *b[2] = { NULL, NULL };
	struct qc_gguf_model *m = NULL;
	for (int i = 0; !rc && i < 2; i++) {
		snprintf(qb[i], sizeof qb[i], "%s.%s.qb", tmp, i ? "sm100" : "cpu");
		struct qc_convert_opts o = { .in = gg, .out = qb[i], .target = i ? QC_TARGET_SM100 : QC_TARGET_CPU,
					     .alignment = 4096, .plan_flags = QC_PLAN_FUSE_MOE, .source = source };
		rc = qc_convert_gguf(&o, NULL, &err) || qc_bundle_open(qb[i], &b[i], &err);
		CHECK(rc == QC_OK, "%s: convert/open for %s: %s", fx, i ? "sm100" : "cpu", err.msg);
	}
	if (rc || qc_gguf_model_open(gg, &m, &err)) {
		CHECK(0, "%s: %s", fx, err.msg);
		goto out;
	}
	int n_swz = 0, n_nvfp4 = 0;
	for (uint64_t i = 0; i < b[1]->n_tensors; i++) {
		const struct qc_bundle_tensor *t = &b[1]->tensors[i];
		n_nvfp4 += t->type == QC_TYPE_NVFP4;
		if (t->layout != QC_LAYOUT_NVFP4_SWZ)
			continue;
		n_swz++;
		CHECK(t->n_parts == 0, "%s: %s is a fused nvfp4_swz tensor", fx, t->name);
		const struct qc_gguf_tensor *gt = qc_gguf_model_find(m, t->name);
		uint8_t *raw = gt ? malloc((size_t)gt->n_bytes) : NULL;
		const int ru = raw ? qc_layout_unpack_rows(t->layout, t->type, t->ne, qc_bundle_data(b[1], t), 0,
							   (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]), raw, &err)
				   : QC_ENOTFOUND;
		CHECK(ru == QC_OK && memcmp(raw, qc_gguf_model_data(m, gt), (size_t)gt->n_bytes) == 0,
		      "%s: %s unpacks to other bytes than the GGUF's", fx, t->name);
		free(raw);
		/* compressed-tensors has one global scale per matrix: one g per slice */
		struct qc_nvfp4_swz_geom g;
		bool one_g = qc_nvfp4_swz_geom(t->type, t->ne, &g) == QC_OK;
		for (int64_t s = 0; one_g && s < t->ne[2] * t->ne[3]; s++) {
			const uint8_t *gs = qc_bundle_data(b[1], t) + (uint64_t)s * g.slice_bytes + g.gs_off;
			for (int64_t r = 1; one_g && r < g.n; r++)
				one_g = memcmp(gs, gs + 4 * r, 4) == 0;
		}
		CHECK(one_g, "%s: %s has several global scales in a slice", fx, t->name);
	}
	CHECK(n_swz >= min_swz && n_swz == n_nvfp4, "%s: %d of %d nvfp4 tensors in nvfp4_swz (want >= %d, all)", fx,
	      n_swz, n_nvfp4, min_swz);
	/* dumps: every source tensor the same from the gguf, the cpu and the sm100 bundle */
	for (uint64_t i = 0; i < m->n_tensors; i++) {
		size_t l0 = 0, l1 = 0, l2 = 0;
		const char *nm = m->tensors[i]->name;
		char *d0 = dump_mem(false, m, nm, &l0), *d1 = dump_mem(true, b[0], nm, &l1), *d2 = dump_mem(true, b[1], nm, &l2);
		CHECK(d0 && d1 && d2 && l0 == l1 && l1 == l2 && memcmp(d0, d1, l0) == 0 && memcmp(d0, d2, l0) == 0,
		      "%s: dumps of %s differ (gguf / cpu / sm100)", fx, nm);
		free(d0);
		free(d1);
		free(d2);
	}
	uint64_t n_ok = 0;
	CHECK(qc_verify_bundle(b[1], true, &n_ok, &err) == QC_OK && n_ok == b[1]->n_tensors, "%s: verify --deep: %s", fx,
	      err.msg);
	if (strncmp(fx, "moe_", 4) == 0)
		CHECK(qc_bundle_find(b[1], "blk.0.ffn_gate_exps.weight") && qc_bundle_find(b[0], "blk.0.ffn_gate_up_exps.weight"),
		      "%s: sm100 keeps gate/up experts apart, cpu fuses them", fx);
	else
		codes_match_checkpoint(fx, b[1]);
out:
	qc_gguf_model_close(m);
	for (int i = 0; i < 2; i++) {
		qc_bundle_close(b[i]);
		unlink(qb[i]);
	}
	unlink(gg);
	cJSON_Delete(source);
}

int main(void)
{
	swizzle_formula();
	roundtrip(32, 1, 1, GEN_SLICE_G);
	roundtrip(64, 128, 1, GEN_SLICE_G);
	roundtrip(96, 130, 1, GEN_SLICE_G);   /* K/16 = 6 -> 8, N 130 -> 256 */
	roundtrip(160, 257, 3, GEN_SLICE_G);  /* K/16 = 10 -> 12, three slices */
	roundtrip(96, 33, 2, GEN_ROW_G);
	roundtrip(224, 129, 2, GEN_SPECIAL);
	refusals();
	targets();
	plan_keeps_inexact_ggml();
	reference(96, 130, 1);
	reference(256, 64, 3);
	fixture("ct_nvfp4", 14);
	fixture("moe_ct_nvfp4", 6);
	return check_report("test_layout_nvfp4");
}
