/* layout.c — layout and target tables (see layout.h). */
#include "layout.h"

#include <string.h>
#include <strings.h>

#include "cursor.h"

static const char *const layout_names[QC_LAYOUT_COUNT] = {
	[QC_LAYOUT_GGML] = "ggml",
};

static const char *const target_names[QC_TARGET_COUNT] = {
	[QC_TARGET_CPU] = "cpu", [QC_TARGET_SM80] = "sm80", [QC_TARGET_SM86] = "sm86",
	[QC_TARGET_SM89] = "sm89", [QC_TARGET_SM90] = "sm90",
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
	(void)tgt;
	(void)type;
	(void)n_dims;
	return QC_LAYOUT_GGML;
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
	default:
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "layout id %d is not known to this build",
				  (int)l);
	}
}
