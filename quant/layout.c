/* layout.c — layout and target tables (see layout.h). */
#include "layout.h"

#include <string.h>
#include <strings.h>

#include "cursor.h"
#include "layout_marlin.h"
#include "layout_nvfp4.h"

static const char *const layout_names[QC_LAYOUT_COUNT] = {
	[QC_LAYOUT_GGML] = "ggml",
	[QC_LAYOUT_MARLIN_I4] = "marlin_i4",
	[QC_LAYOUT_MARLIN_I8] = "marlin_i8",
	[QC_LAYOUT_MARLIN_I4Z] = "marlin_i4z",
	[QC_LAYOUT_MARLIN_I8Z] = "marlin_i8z",
	[QC_LAYOUT_NVFP4_SWZ] = "nvfp4_swz",
};

static const char *const target_names[QC_TARGET_COUNT] = {
	[QC_TARGET_CPU] = "cpu", [QC_TARGET_SM80] = "sm80", [QC_TARGET_SM86] = "sm86",
	[QC_TARGET_SM89] = "sm89", [QC_TARGET_SM90] = "sm90", [QC_TARGET_SM100] = "sm100",
};

const char *qc_layout_name(enum qc_layout l)
{
	return (unsigned)l < QC_LAYOUT_COUNT ? layout_names[l] : "unknown";
}

int qc_layout_from_name(const char *name)
{
	for (int i = 0; i < QC_LAYOUT_COUNT; i++)
		if (strcmp(layout_names[i], name) == 0)
			return i;
	return -1;
}

const char *qc_target_name(enum qc_target t)
{
	return (unsigned)t < QC_TARGET_COUNT ? target_names[t] : "unknown";
}

int qc_target_from_name(const char *name)
{
	for (int i = 0; i < QC_TARGET_COUNT; i++)
		if (strcasecmp(target_names[i], name) == 0)
			return i;
	return -1;
}

enum qc_layout qc_target_layout(enum qc_target tgt, enum qc_type type, uint32_t n_dims)
{
	/* mma.sync m16n8k16 exists from sm80 on; every sm8x/sm90/sm100 target gets marlin */
	(void)n_dims; /* a 1-D tensor is refused by the fit check, with a reason */
	if (tgt == QC_TARGET_CPU)
		return QC_LAYOUT_GGML;
	/* sm100's block-scaled tensor cores read NVFP4 with CUTLASS's scale tiles */
	if (tgt == QC_TARGET_SM100 && type == QC_TYPE_NVFP4)
		return QC_LAYOUT_NVFP4_SWZ;
	return qc_marlin_layout_for(type);
}

enum qc_layout qc_target_layout_for(enum qc_target tgt, enum qc_type type, const int64_t ne[4], uint32_t n_dims,
				    const char **why)
{
	enum qc_layout l = qc_target_layout(tgt, type, n_dims);
	if (why)
		*why = NULL;
	if (qc_marlin_is(l) && !qc_marlin_fits(l, type, ne, n_dims, why))
		return QC_LAYOUT_GGML;
	if (l == QC_LAYOUT_NVFP4_SWZ && !qc_nvfp4_swz_fits(type, ne, n_dims, why))
		return QC_LAYOUT_GGML;
	return l;
}

static int ggml_bytes(enum qc_type type, const int64_t ne[4], uint64_t *bytes)
{
	uint64_t row, rows = 1;
	int rc = qc_type_row_bytes(type, (uint64_t)ne[0], &row);
	if (rc)
		return rc;
	for (int d = 1; d < 4; d++)
		if (!qc_mul_ok(rows, (uint64_t)ne[d], &rows))
			return QC_ERANGE;
	return qc_mul_ok(row, rows, bytes) ? QC_OK : QC_ERANGE;
}

int qc_layout_bytes(enum qc_layout l, enum qc_type type, const int64_t ne[4], uint64_t *bytes)
{
	switch (l) {
	case QC_LAYOUT_GGML:
		return ggml_bytes(type, ne, bytes);
	case QC_LAYOUT_MARLIN_I4:
	case QC_LAYOUT_MARLIN_I8:
	case QC_LAYOUT_MARLIN_I4Z:
	case QC_LAYOUT_MARLIN_I8Z:
		return qc_marlin_bytes(l, type, ne, bytes);
	case QC_LAYOUT_NVFP4_SWZ:
		return qc_nvfp4_swz_bytes(type, ne, bytes);
	default:
		return QC_EUNSUPPORTED;
	}
}

int qc_layout_unpack_rows(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *packed,
			  uint64_t row0, uint64_t n_rows, uint8_t *out, struct qc_err *err)
{
	uint64_t row;
	if (qc_type_row_bytes(type, (uint64_t)ne[0], &row))
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "bad row length %lld", (long long)ne[0]);
	switch (l) {
	case QC_LAYOUT_GGML:
		memcpy(out, packed + row0 * row, n_rows * row);
		return QC_OK;
	case QC_LAYOUT_MARLIN_I4:
	case QC_LAYOUT_MARLIN_I8:
	case QC_LAYOUT_MARLIN_I4Z:
	case QC_LAYOUT_MARLIN_I8Z:
		return qc_marlin_unpack_rows(l, type, ne, packed, row0, n_rows, out, err);
	case QC_LAYOUT_NVFP4_SWZ:
		return qc_nvfp4_swz_unpack_rows(type, ne, packed, row0, n_rows, out, err);
	default:
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "layout id %d is not known to this build",
				  (int)l);
	}
}

int qc_layout_pack_slice(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *rows,
			 uint8_t *out, struct qc_err *err)
{
	uint64_t row;
	const char *why;
	if (qc_type_row_bytes(type, (uint64_t)ne[0], &row))
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "bad row length %lld", (long long)ne[0]);
	switch (l) {
	case QC_LAYOUT_GGML:
		memcpy(out, rows, (size_t)(row * (uint64_t)ne[1]));
		return QC_OK;
	case QC_LAYOUT_MARLIN_I4:
	case QC_LAYOUT_MARLIN_I8:
	case QC_LAYOUT_MARLIN_I4Z:
	case QC_LAYOUT_MARLIN_I8Z:
		if (!qc_marlin_fits(l, type, ne, 2, &why))
			return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "%s in layout %s: %s",
					  qc_type_get(type)->name, qc_layout_name(l), why);
		return qc_marlin_pack_slice(l, type, ne, rows, out, err);
	case QC_LAYOUT_NVFP4_SWZ:
		return qc_nvfp4_swz_pack_slice(type, ne, rows, out, err);
	default:
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "layout id %d is not known to this build",
				  (int)l);
	}
}

int qc_layout_row_bytes(enum qc_layout l, enum qc_type type, int64_t ne0, uint64_t *bytes)
{
	if (l == QC_LAYOUT_GGML)
		return qc_type_row_bytes(type, (uint64_t)ne0, bytes);
	if (qc_marlin_is(l))
		return qc_marlin_row_bytes(l, type, ne0, bytes);
	if (l == QC_LAYOUT_NVFP4_SWZ)
		return qc_nvfp4_swz_row_bytes(type, ne0, bytes);
	return QC_EUNSUPPORTED;
}
