/* layout_fp8.c — fp8_rows pack and unpack (layout_fp8.h, docs/layout-fp8.md).
 *
 * Nothing is re-quantized: the codes are copied, and a tensor whose blocks do not
 * share one scale per row (or one activation scale) is refused here and kept ggml by
 * plan.c, so the layout holds exactly what the ggml blocks hold.
 */
#include "layout_fp8.h"

#include <stddef.h>
#include <string.h>

#include "qblock.h"
#include "dequant_hfq.h"

#define MAX_K ((int64_t)1 << 24)
#define MAX_N ((int64_t)1 << 30)
#define BLK ((uint64_t)sizeof(struct qc_block_F8A8))

bool qc_fp8_rows_fits(enum qc_type type, const int64_t ne[4], uint32_t n_dims, const char **why)
{
	const char *w = NULL;
	if (type != QC_TYPE_F8A8)
		w = "fp8_rows holds f8_a8 (W8A8 FP8) weights only";
	else if (n_dims != 2 || ne[2] != 1 || ne[3] != 1)
		w = "not a single matrix (stacked experts keep ggml blocks)";
	else if (ne[0] <= 0 || ne[0] % 32 || ne[0] > MAX_K)
		w = "rows are not a multiple of 32 elements up to 2^24";
	else if (ne[1] <= 0 || ne[1] > MAX_N)
		w = "no rows, or more than 2^30";
	if (why)
		*why = w;
	return w == NULL;
}

int qc_fp8_rows_geom(enum qc_type type, const int64_t ne[4], struct qc_fp8_rows_geom *g)
{
	if (!qc_fp8_rows_fits(type, ne, ne[2] == 1 && ne[3] == 1 ? 2 : 3, NULL))
		return QC_EFORMAT;
	g->n = ne[1];
	g->k = ne[0];
	g->scale_off = (uint64_t)g->n * (uint64_t)g->k; /* < 2^54 */
	g->act_off = g->scale_off + (((uint64_t)g->n * 4 + 15) & ~(uint64_t)15);
	g->bytes = g->act_off + 16;
	return QC_OK;
}

int qc_fp8_rows_row_bytes(enum qc_type type, int64_t ne0, uint64_t *bytes)
{
	const int64_t ne[4] = { ne0, 1, 1, 1 };
	if (!qc_fp8_rows_fits(type, ne, 2, NULL))
		return QC_EFORMAT;
	*bytes = (uint64_t)ne0;
	return QC_OK;
}

int qc_fp8_rows_bytes(enum qc_type type, const int64_t ne[4], uint64_t *bytes)
{
	struct qc_fp8_rows_geom g;
	int rc = qc_fp8_rows_geom(type, ne, &g);
	if (!rc)
		*bytes = g.bytes;
	return rc;
}

/* Row r's first problem: 0 none, 1 a weight scale differs, 2 an activation scale. */
static int row_problem(const uint8_t *row, int64_t nb, const uint16_t a0[2])
{
	struct qc_block_F8A8 b0, b;
	memcpy(&b0, row, sizeof b0);
	for (int64_t i = 0; i < nb; i++) {
		memcpy(&b, row + (uint64_t)i * BLK, sizeof b);
		if (memcmp(b.a, a0, sizeof b.a) != 0)
			return 2;
		if (memcmp(b.d, b0.d, sizeof b.d) != 0)
			return 1;
	}
	return 0;
}

static const char *const problems[] = {
	NULL,
	"its weight scales vary along a row (group or block FP8; fp8_rows keeps one per row)",
	"its blocks disagree on the activation scale",
};

bool qc_fp8_rows_data_fits(enum qc_type type, const int64_t ne[4], const uint8_t *rows, const char **why)
{
	const char *w = NULL;
	if (!qc_fp8_rows_fits(type, ne, 2, &w)) {
		*why = w;
		return false;
	}
	const int64_t nb = ne[0] / 32;
	uint16_t a0[2];
	memcpy(a0, rows + offsetof(struct qc_block_F8A8, a), sizeof a0);
	for (int64_t r = 0; r < ne[1]; r++) {
		const int p = row_problem(rows + (uint64_t)r * (uint64_t)nb * BLK, nb, a0);
		if (p) {
			*why = problems[p];
			return false;
		}
	}
	*why = NULL;
	return true;
}

int qc_fp8_rows_pack(enum qc_type type, const int64_t ne[4], const uint8_t *rows, uint8_t *out, struct qc_err *err)
{
	struct qc_fp8_rows_geom g;
	if (qc_fp8_rows_geom(type, ne, &g))
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "%s [%lld, %lld] does not fit fp8_rows",
				  qc_type_get(type)->name, (long long)ne[0], (long long)ne[1]);
	const int64_t nb = g.k / 32;
	uint16_t a0[2];
	memcpy(a0, rows + offsetof(struct qc_block_F8A8, a), sizeof a0);
	memset(out + g.scale_off, 0, (size_t)(g.bytes - g.scale_off));
	for (int64_t r = 0; r < g.n; r++) {
		const uint8_t *row = rows + (uint64_t)r * (uint64_t)nb * BLK;
		const int p = row_problem(row, nb, a0);
		if (p)
			return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "f8_a8 row %lld: %s", (long long)r, problems[p]);
		for (int64_t i = 0; i < nb; i++)
			memcpy(out + (uint64_t)r * (uint64_t)g.k + (uint64_t)i * 32,
			       row + (uint64_t)i * BLK + offsetof(struct qc_block_F8A8, qs), 32);
		memcpy(out + g.scale_off + (uint64_t)r * 4, row + offsetof(struct qc_block_F8A8, d), 4);
	}
	memcpy(out + g.act_off, a0, 4);
	return QC_OK;
}

int qc_fp8_rows_unpack_rows(enum qc_type type, const int64_t ne[4], const uint8_t *packed, uint64_t row0,
			    uint64_t n_rows, uint8_t *out, struct qc_err *err)
{
	struct qc_fp8_rows_geom g;
	if (qc_fp8_rows_geom(type, ne, &g))
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "%s [%lld, %lld] does not fit fp8_rows",
				  qc_type_get(type)->name, (long long)ne[0], (long long)ne[1]);
	if (row0 > (uint64_t)g.n || n_rows > (uint64_t)g.n - row0)
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "rows [%llu, +%llu) past %lld", (unsigned long long)row0,
				  (unsigned long long)n_rows, (long long)g.n);
	const int64_t nb = g.k / 32;
	struct qc_block_F8A8 b;
	memcpy(b.a, packed + g.act_off, sizeof b.a);
	for (uint64_t r = row0; r < row0 + n_rows; r++) {
		memcpy(b.d, packed + g.scale_off + r * 4, sizeof b.d);
		for (int64_t i = 0; i < nb; i++) {
			memcpy(b.qs, packed + r * (uint64_t)g.k + (uint64_t)i * 32, 32);
			memcpy(out + ((r - row0) * (uint64_t)nb + (uint64_t)i) * BLK, &b, sizeof b);
		}
	}
	return QC_OK;
}
