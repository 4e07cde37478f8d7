/* layout_nvfp4.c — nvfp4_swz pack and unpack (layout_nvfp4.h, docs/layout-nvfp4.md).
 *
 * An nvfp4 ggml block keeps d = fl(e4m3/global) per 16 elements (hfq_ct.c divides
 * once, in float), not the E4M3 code and the global scale: pack recovers them. The
 * largest |d| of a slice comes from its largest E4M3 value; scaling the global scale
 * by a power of two (exact) moves that value into the top binade, where it is one of
 * 8 values v, so g = v/dmax lies within 2 ulps of an exact solution. Each d then gives
 * its code by rounding |d|*g to E4M3. Nothing is trusted: a (code, g) pair is kept
 * only if fl(e4m3(code)/g) has d's bits, else the slice falls back to one g per row,
 * and a row no g fits is refused (plan.c keeps such tensors ggml).
 */
#include "layout_nvfp4.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cursor.h"
#include "qblock.h"
#include "dequant_hfq.h"

#define MAX_K ((int64_t)1 << 24)
#define MAX_N ((int64_t)1 << 30)
#define BLK ((uint64_t)sizeof(struct qc_block_NVFP4))
#define N_TOP 8
#define N_NEAR 5                   /* g0 and two f32 neighbours each way */

static uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

/* fl(e4m3(c) / g): the block scale code c stands for */
static float quot(uint8_t c, float g)
{
	return qc_e4m3_to_f32(c) / g;
}

/* Positive E4M3 code nearest to t >= 0 (codes 0..126 are the finite values,
 * increasing); the caller tries its neighbours too. */
static int nearest_code(double t)
{
	if (!(t < 448.0))
		return 126;
	if (t < 0x1p-6) /* subnormal: m/8 * 2^-6; code 8 is 2^-6 itself */
		return (int)lround(t * 512.0);
	int e;
	const double f = frexp(t, &e); /* t = 2f * 2^(e-1), 2f in [1, 2) */
	const int c = ((e - 1 + 7) << 3) + (int)lround((2.0 * f - 1.0) * 8.0);
	return c > 126 ? 126 : c;
}

/* The code c with fl(e4m3(c)/g) == d bit for bit, or -1. */
static int code_for(float d, float g)
{
	const uint32_t want = f32_bits(d);
	if (isnan(d)) {
		for (int c = 0x7f; c <= 0xff; c += 0x80)
			if (f32_bits(quot((uint8_t)c, g)) == want)
				return c;
		return -1;
	}
	const int sign = want >> 31 ? 0x80 : 0, c0 = nearest_code(fabs((double)d) * (double)g);
	for (int c = c0 > 0 ? c0 - 1 : 0; c <= c0 + 1 && c <= 126; c++)
		if (f32_bits(quot((uint8_t)(c | sign), g)) == want)
			return c | sign;
	return -1;
}

static void block_d(const uint8_t *row, int64_t b, float d[2])
{
	struct qc_block_NVFP4 blk;
	memcpy(&blk, row + (uint64_t)b * BLK, sizeof blk);
	d[0] = qc_hfq_get_f32(blk.d);
	d[1] = qc_hfq_get_f32(blk.d + 2);
}

/* every block scale of rows [0, n) is fl(e4m3/g) for some code */
static bool g_fits(const uint8_t *rows, int64_t n, int64_t k, float g)
{
	const uint64_t rb = (uint64_t)(k / 32) * BLK;
	for (int64_t r = 0; r < n; r++)
		for (int64_t b = 0; b < k / 32; b++) {
			float d[2];
			block_d(rows + (uint64_t)r * rb, b, d);
			if (code_for(d[0], g) < 0 || code_for(d[1], g) < 0)
				return false;
		}
	return true;
}

/* Candidate global scales for rows [0, n): v/dmax for the top-binade E4M3 values v
 * (448 = 1.75·2^8 is the largest; 1.875 only exists as 240), and neighbours. */
static int candidates(const uint8_t *rows, int64_t n, int64_t k, float out[N_TOP * N_NEAR])
{
	static const float top[N_TOP] = { 256, 288, 320, 352, 384, 416, 448, 240 };
	const uint64_t rb = (uint64_t)(k / 32) * BLK;
	float dmax = 0;
	for (int64_t r = 0; r < n; r++)
		for (int64_t b = 0; b < k / 32; b++) {
			float d[2];
			block_d(rows + (uint64_t)r * rb, b, d);
			for (int j = 0; j < 2; j++)
				if (isfinite(d[j]) && fabsf(d[j]) > dmax)
					dmax = fabsf(d[j]);
		}
	int m = 0;
	if (dmax == 0) { /* zeros and NaNs only: any g */
		out[m++] = 1.0f;
		return m;
	}
	for (int i = 0; i < N_TOP; i++) {
		const float g0 = (float)((double)top[i] / (double)dmax);
		const float dn = nextafterf(g0, 0), up = nextafterf(g0, INFINITY);
		const float near[N_NEAR] = { g0, dn, up, nextafterf(dn, 0), nextafterf(up, INFINITY) };
		for (int j = 0; j < N_NEAR; j++)
			if (isfinite(near[j]) && near[j] >= FLT_MIN)
				out[m++] = near[j];
	}
	return m;
}

/* One global scale per row of a slice into g (may be NULL: check only): one for
 * the whole slice when one fits, else row by row. false with *bad = the first row
 * no g fits. */
static bool find_g(const uint8_t *rows, int64_t n, int64_t k, float *g, int64_t *bad)
{
	const uint64_t rb = (uint64_t)(k / 32) * BLK;
	float cand[N_TOP * N_NEAR];
	int m = candidates(rows, n, k, cand);
	for (int i = 0; i < m; i++)
		if (g_fits(rows, n, k, cand[i])) {
			for (int64_t r = 0; g && r < n; r++)
				g[r] = cand[i];
			return true;
		}
	float prev = 0;
	for (int64_t r = 0; r < n; r++) {
		const uint8_t *row = rows + (uint64_t)r * rb;
		if (!(prev > 0 && g_fits(row, 1, k, prev))) {
			m = candidates(row, 1, k, cand);
			int i = 0;
			while (i < m && !g_fits(row, 1, k, cand[i]))
				i++;
			if (i == m) {
				*bad = r;
				return false;
			}
			prev = cand[i];
		}
		if (g)
			g[r] = prev;
	}
	return true;
}

bool qc_nvfp4_swz_fits(enum qc_type type, const int64_t ne[4], uint32_t n_dims, const char **why)
{
	const char *w = NULL;
	if (type != QC_TYPE_NVFP4)
		w = "encoding is not nvfp4";
	else if (n_dims < 2)
		w = "1-D tensor is not a matrix";
	else if (ne[0] <= 0 || ne[0] % 32 || ne[0] > MAX_K)
		w = "ne[0] (K) is not a positive multiple of 32 up to 2^24";
	else if (ne[1] <= 0 || ne[1] > MAX_N)
		w = "ne[1] (N) is not in 1..2^30";
	else if (ne[2] <= 0 || ne[3] <= 0)
		w = "empty tensor";
	if (why)
		*why = w;
	return w == NULL;
}

int qc_nvfp4_swz_geom(enum qc_type type, const int64_t ne[4], struct qc_nvfp4_swz_geom *g)
{
	if (!qc_nvfp4_swz_fits(type, ne, 2, NULL))
		return QC_EFORMAT;
	/* within the limits above every size stays below 2^55 */
	g->n = ne[1];
	g->k = ne[0];
	g->np = (g->n + QC_NVFP4_TILE_ROWS - 1) / QC_NVFP4_TILE_ROWS * QC_NVFP4_TILE_ROWS;
	g->kgp = (g->k / QC_NVFP4_GROUP + QC_NVFP4_TILE_SCALES - 1) / QC_NVFP4_TILE_SCALES * QC_NVFP4_TILE_SCALES;
	g->row_bytes = (uint64_t)g->k / 2;
	g->scale_off = (uint64_t)g->n * g->row_bytes;
	g->gs_off = g->scale_off + (uint64_t)g->np * (uint64_t)g->kgp;
	g->slice_bytes = g->gs_off + 4 * (uint64_t)g->np;
	return QC_OK;
}

uint64_t qc_nvfp4_swz_scale_off(int64_t r, int64_t c, int64_t kgp)
{
	const uint64_t tile = (uint64_t)(r / QC_NVFP4_TILE_ROWS) * (uint64_t)(kgp / QC_NVFP4_TILE_SCALES) +
			      (uint64_t)(c / QC_NVFP4_TILE_SCALES);
	return tile * QC_NVFP4_TILE_BYTES + (uint64_t)(r % 32) * 16 + (uint64_t)((r % QC_NVFP4_TILE_ROWS) / 32) * 4 +
	       (uint64_t)(c % QC_NVFP4_TILE_SCALES);
}

int qc_nvfp4_swz_row_bytes(enum qc_type type, int64_t ne0, uint64_t *bytes)
{
	const int64_t ne[4] = { ne0, 1, 1, 1 };
	if (!qc_nvfp4_swz_fits(type, ne, 2, NULL))
		return QC_EFORMAT;
	*bytes = (uint64_t)ne0 / 2;
	return QC_OK;
}

int qc_nvfp4_swz_bytes(enum qc_type type, const int64_t ne[4], uint64_t *bytes)
{
	struct qc_nvfp4_swz_geom g;
	uint64_t slices;
	if (qc_nvfp4_swz_geom(type, ne, &g))
		return QC_EFORMAT;
	if (!qc_mul_ok((uint64_t)ne[2], (uint64_t)ne[3], &slices) || !qc_mul_ok(g.slice_bytes, slices, bytes))
		return QC_ERANGE;
	return QC_OK;
}

bool qc_nvfp4_swz_data_fits(enum qc_type type, const int64_t ne[4], const uint8_t *rows, const char **why)
{
	struct qc_nvfp4_swz_geom g;
	int64_t bad;
	uint64_t slices;
	if (why)
		*why = NULL;
	if (qc_nvfp4_swz_geom(type, ne, &g) || !qc_mul_ok((uint64_t)ne[2], (uint64_t)ne[3], &slices)) {
		if (why)
			*why = "shape does not fit";
		return false;
	}
	const uint64_t slice = (uint64_t)g.n * (uint64_t)(g.k / 32) * BLK;
	for (uint64_t s = 0; s < slices; s++)
		if (!find_g(rows + s * slice, g.n, g.k, NULL, &bad)) {
			if (why)
				*why = "block scales are not e4m3 codes over one global scale per row";
			return false;
		}
	return true;
}

int qc_nvfp4_swz_pack_slice(enum qc_type type, const int64_t ne[4], const uint8_t *rows, uint8_t *out,
			    struct qc_err *err)
{
	struct qc_nvfp4_swz_geom g;
	if (qc_nvfp4_swz_geom(type, ne, &g))
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "nvfp4_swz: %s [%lld, %lld] does not fit",
				  qc_type_get(type)->name, (long long)ne[0], (long long)ne[1]);
	float *gs = malloc((size_t)g.n * sizeof *gs);
	if (!gs)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "nvfp4_swz: out of memory");
	int64_t bad = 0;
	if (!find_g(rows, g.n, g.k, gs, &bad)) {
		free(gs);
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
				  "nvfp4_swz: row %lld: block scales are not e4m3 codes over one global scale",
				  (long long)bad);
	}
	const int64_t nb = g.k / 32;
	memset(out, 0, (size_t)g.slice_bytes);
	for (int64_t r = 0; r < g.n; r++) {
		const uint8_t *row = rows + (uint64_t)r * (uint64_t)nb * BLK;
		for (int64_t b = 0; b < nb; b++) {
			struct qc_block_NVFP4 blk;
			memcpy(&blk, row + (uint64_t)b * BLK, sizeof blk);
			/* block qs byte j = elements 2j (low), 2j+1: already the code row's order */
			memcpy(out + (uint64_t)r * g.row_bytes + (uint64_t)b * 16, blk.qs, 16);
			const float d[2] = { qc_hfq_get_f32(blk.d), qc_hfq_get_f32(blk.d + 2) };
			for (int j = 0; j < 2; j++) {
				const int c = code_for(d[j], gs[r]);
				QC_ASSERT(c >= 0); /* find_g checked every block */
				out[g.scale_off + qc_nvfp4_swz_scale_off(r, 2 * b + j, g.kgp)] = (uint8_t)c;
			}
		}
		memcpy(out + g.gs_off + 4 * (uint64_t)r, &gs[r], 4);
	}
	free(gs);
	return QC_OK;
}

int qc_nvfp4_swz_unpack_rows(enum qc_type type, const int64_t ne[4], const uint8_t *packed, uint64_t row0,
			     uint64_t n_rows, uint8_t *out, struct qc_err *err)
{
	struct qc_nvfp4_swz_geom g;
	uint64_t slices, total, end;
	if (qc_nvfp4_swz_geom(type, ne, &g))
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "nvfp4_swz: %s [%lld, %lld] does not fit",
				  qc_type_get(type)->name, (long long)ne[0], (long long)ne[1]);
	if (!qc_mul_ok((uint64_t)ne[2], (uint64_t)ne[3], &slices) || !qc_mul_ok((uint64_t)ne[1], slices, &total) ||
	    !qc_add_ok(row0, n_rows, &end) || end > total)
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "nvfp4_swz: rows %llu..%llu outside the tensor",
				  (unsigned long long)row0, (unsigned long long)(row0 + n_rows));
	const int64_t nb = g.k / 32;
	for (uint64_t i = 0; i < n_rows; i++) {
		const uint64_t s = (row0 + i) / (uint64_t)g.n;
		const int64_t r = (int64_t)((row0 + i) % (uint64_t)g.n);
		const uint8_t *base = packed + s * g.slice_bytes;
		float gr;
		memcpy(&gr, base + g.gs_off + 4 * (uint64_t)r, 4);
		for (int64_t b = 0; b < nb; b++) {
			struct qc_block_NVFP4 blk;
			memcpy(blk.qs, base + (uint64_t)r * g.row_bytes + (uint64_t)b * 16, 16);
			for (int j = 0; j < 2; j++) {
				const uint8_t c = base[g.scale_off + qc_nvfp4_swz_scale_off(r, 2 * b + j, g.kgp)];
				qc_hfq_put_f32(blk.d + 2 * j, quot(c, gr));
			}
			memcpy(out + (i * (uint64_t)nb + (uint64_t)b) * BLK, &blk, sizeof blk);
		}
	}
	return QC_OK;
}
