/* layout.c — the layout table, the target table and the kernel-kind rule (see layout.h).
 *
 * Owns: qc_layouts (one row per enum qc_layout: name, row alignment, fusing, the
 * size/pack/unpack functions and the kernel kind per activation-row column) and
 * qc_layout_kernel, the one place that turns (layout, rows, experts) into a kernel
 * kind. The per-layout work lives in layout_marlin.c, layout_nvfp4.c and layout_fp8.c; this file
 * only routes through the table, so a new layout is a row here plus its file.
 */
#include "layout.h"

#include <string.h>
#include <strings.h>

#include "cursor.h"
#include "layout_marlin.h"
#include "layout_nvfp4.h"
#include "layout_fp8.h"

static const char *const target_names[QC_TARGET_COUNT] = {
	[QC_TARGET_CPU] = "cpu", [QC_TARGET_SM80] = "sm80", [QC_TARGET_SM86] = "sm86",
	[QC_TARGET_SM89] = "sm89", [QC_TARGET_SM90] = "sm90", [QC_TARGET_SM100] = "sm100",
};

const char *qc_layout_name(enum qc_layout l)
{
	return (unsigned)l < QC_LAYOUT_COUNT ? qc_layouts[l].name : "unknown";
}

int qc_layout_from_name(const char *name)
{
	for (int i = 0; i < QC_LAYOUT_COUNT; i++)
		if (strcmp(qc_layouts[i].name, name) == 0)
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
	/* FP8 tensor cores exist from sm89 on; older targets keep W8A8 ggml (and the CUDA
	   backend refuses it there rather than run it weight-only) */
	if (type == QC_TYPE_F8A8)
		return tgt >= QC_TARGET_SM89 ? QC_LAYOUT_FP8_ROWS : QC_LAYOUT_GGML;
	return qc_marlin_layout_for(type);
}

enum qc_layout qc_target_layout_for(enum qc_target tgt, enum qc_type type, const int64_t ne[4], uint32_t n_dims,
				    const char **why)
{
	enum qc_layout l = qc_target_layout(tgt, type, n_dims);
	if (why)
		*why = NULL;
	return qc_layouts[l].fits(l, type, ne, n_dims, why) ? l : QC_LAYOUT_GGML;
}

int qc_layout_bytes(enum qc_layout l, enum qc_type type, const int64_t ne[4], uint64_t *bytes)
{
	if ((unsigned)l >= QC_LAYOUT_COUNT)
		return QC_EUNSUPPORTED;
	return qc_layouts[l].bytes(l, type, ne, bytes);
}

int qc_layout_unpack_rows(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *packed,
			  uint64_t row0, uint64_t n_rows, uint8_t *out, struct qc_err *err)
{
	uint64_t row;
	if (qc_type_row_bytes(type, (uint64_t)ne[0], &row))
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "bad row length %lld", (long long)ne[0]);
	if ((unsigned)l >= QC_LAYOUT_COUNT)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "layout id %d is not known to this build",
				  (int)l);
	return qc_layouts[l].unpack_rows(l, type, ne, packed, row0, n_rows, out, err);
}

int qc_layout_pack_slice(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *rows,
			 uint8_t *out, struct qc_err *err)
{
	uint64_t row;
	if (qc_type_row_bytes(type, (uint64_t)ne[0], &row))
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "bad row length %lld", (long long)ne[0]);
	if ((unsigned)l >= QC_LAYOUT_COUNT)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "layout id %d is not known to this build",
				  (int)l);
	return qc_layouts[l].pack_slice(l, type, ne, rows, out, err);
}

int qc_layout_row_bytes(enum qc_layout l, enum qc_type type, int64_t ne0, uint64_t *bytes)
{
	if ((unsigned)l >= QC_LAYOUT_COUNT)
		return QC_EUNSUPPORTED;
	return qc_layouts[l].row_bytes(l, type, ne0, bytes);
}

int qc_layout_row_align(enum qc_layout l)
{
	return (unsigned)l < QC_LAYOUT_COUNT ? qc_layouts[l].row_align : 0;
}

bool qc_layout_fusable(enum qc_layout l)
{
	return (unsigned)l < QC_LAYOUT_COUNT && qc_layouts[l].fusable;
}

static const char *const kind_names[QC_KERNEL_COUNT] = {
	[QC_KERNEL_NONE] = "none", [QC_KERNEL_GEMV] = "gemv", [QC_KERNEL_MMA] = "mma",
	[QC_KERNEL_F16_BLAS] = "f16+cublas", [QC_KERNEL_MOE_GEMM] = "moe_gemm",
};

const char *qc_kernel_kind_name(enum qc_kernel_kind k)
{
	return (unsigned)k < QC_KERNEL_COUNT ? kind_names[k] : "unknown";
}

enum qc_rows_class qc_kernel_rows_class(int64_t n_rows, const struct qc_kernel_rows *r)
{
	if (n_rows <= r->gemv_max_rows)
		return n_rows <= 1 ? QC_ROWS_1 : QC_ROWS_2_8;
	return n_rows >= r->blas_min_rows ? QC_ROWS_128 : QC_ROWS_9_127;
}

static bool has_kind(const struct qc_layout_traits *t, enum qc_kernel_kind k)
{
	for (int c = 0; c < QC_ROWS_COUNT; c++)
		if (t->kernel[c] == k)
			return true;
	return false;
}

/* Whether the layout has a GEMV: a column names it, or it holds stacked experts (their
 * rows up to gemv_max_rows always take the GEMV). */
static bool has_gemv(const struct qc_layout_traits *t)
{
	return has_kind(t, QC_KERNEL_GEMV) || t->experts != QC_KERNEL_NONE;
}

/* The rules, in the order they were measured (docs/cuda.md "Which kernel runs"):
 * past gemv_max_rows the larger-batch columns; up to it the GEMV where the table
 * says so, else the larger-batch kernel for this row count (on the default
 * boundaries that is the same entry, 9-127). The GEMV split stays a function of
 * the row count and the layout alone, so a decode row's result does not depend on
 * which requests share its step beyond that count. */
enum qc_kernel_kind qc_layout_kernel(enum qc_layout l, int64_t n_rows, bool experts, int64_t n_in, int64_t n_out,
				     const struct qc_kernel_rows *r)
{
	if ((unsigned)l >= QC_LAYOUT_COUNT || n_rows < 0)
		return QC_KERNEL_NONE;
	const struct qc_layout_traits *t = &qc_layouts[l];
	if (experts) {
		if (t->experts == QC_KERNEL_NONE) /* the layout never holds stacked experts */
			return QC_KERNEL_NONE;
		if (n_rows <= r->gemv_max_rows)
			return QC_KERNEL_GEMV;
		/* the grouped GEMM decodes whole 32-element chunks of a row */
		if (t->experts == QC_KERNEL_MOE_GEMM && n_in % 32)
			return QC_KERNEL_GEMV;
		return t->experts;
	}
	enum qc_kernel_kind big = t->kernel[n_rows >= r->blas_min_rows ? QC_ROWS_128 : QC_ROWS_9_127];
	if (n_rows >= r->blas_min_rows && big != t->kernel[QC_ROWS_9_127] && n_in * n_out > r->f16_max_elems)
		big = t->kernel[QC_ROWS_9_127];
	if (n_rows > r->gemv_max_rows)
		return big;
	if (r->mma_gemv_rows != 0 && has_kind(t, QC_KERNEL_MMA) && has_gemv(t))
		return n_rows <= r->mma_gemv_rows ? QC_KERNEL_GEMV : big;
	/* H100, one decode row, marlin_i8 (docs/perf-notes.md): SmolLM2's 576-wide
	 * matrices 431 -> 721 tok/s on the GEMV; Llama-3-8B's 14336 x 4096 ones 4% slower */
	if (n_rows <= 1 && t->kernel[QC_ROWS_1] == QC_KERNEL_MMA && n_in * n_out <= r->gemv_small_elems && has_gemv(t))
		return QC_KERNEL_GEMV;
	return t->kernel[n_rows <= 1 ? QC_ROWS_1 : QC_ROWS_2_8] == QC_KERNEL_GEMV ? QC_KERNEL_GEMV : big;
}

/* The ggml layout: rows as GGUF has them. */
static bool ggml_fits(enum qc_layout l, enum qc_type type, const int64_t ne[4], uint32_t n_dims, const char **why)
{
	(void)l, (void)type, (void)ne, (void)n_dims, (void)why;
	return true;
}

static int ggml_row_bytes(enum qc_layout l, enum qc_type type, int64_t ne0, uint64_t *bytes)
{
	(void)l;
	return qc_type_row_bytes(type, (uint64_t)ne0, bytes);
}

static int ggml_bytes(enum qc_layout l, enum qc_type type, const int64_t ne[4], uint64_t *bytes)
{
	uint64_t row, rows = 1;
	(void)l;
	int rc = qc_type_row_bytes(type, (uint64_t)ne[0], &row);
	if (rc)
		return rc;
	for (int d = 1; d < 4; d++)
		if (!qc_mul_ok(rows, (uint64_t)ne[d], &rows))
			return QC_ERANGE;
	return qc_mul_ok(row, rows, bytes) ? QC_OK : QC_ERANGE;
}

/* Callers checked the row length (qc_layout_pack_slice / _unpack_rows). */
static int ggml_pack(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *rows, uint8_t *out,
		     struct qc_err *err)
{
	uint64_t row;
	(void)l, (void)err;
	qc_type_row_bytes(type, (uint64_t)ne[0], &row);
	memcpy(out, rows, (size_t)(row * (uint64_t)ne[1]));
	return QC_OK;
}

static int ggml_unpack(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *packed,
		       uint64_t row0, uint64_t n_rows, uint8_t *out, struct qc_err *err)
{
	uint64_t row;
	(void)l, (void)err;
	qc_type_row_bytes(type, (uint64_t)ne[0], &row);
	memcpy(out, packed + row0 * row, n_rows * row);
	return QC_OK;
}

/* marlin: the fit is checked again before a pack (a caller may not have asked). */
static int marlin_pack(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *rows, uint8_t *out,
		       struct qc_err *err)
{
	const char *why;
	if (!qc_marlin_fits(l, type, ne, 2, &why))
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "%s in layout %s: %s", qc_type_get(type)->name,
				  qc_layout_name(l), why);
	return qc_marlin_pack_slice(l, type, ne, rows, out, err);
}

/* nvfp4_swz has one layout id: its functions do not take it. */
static bool nvfp4_fits(enum qc_layout l, enum qc_type type, const int64_t ne[4], uint32_t n_dims, const char **why)
{
	(void)l;
	return qc_nvfp4_swz_fits(type, ne, n_dims, why);
}

static int nvfp4_row_bytes(enum qc_layout l, enum qc_type type, int64_t ne0, uint64_t *bytes)
{
	(void)l;
	return qc_nvfp4_swz_row_bytes(type, ne0, bytes);
}

static int nvfp4_bytes(enum qc_layout l, enum qc_type type, const int64_t ne[4], uint64_t *bytes)
{
	(void)l;
	return qc_nvfp4_swz_bytes(type, ne, bytes);
}

static int nvfp4_pack(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *rows, uint8_t *out,
		      struct qc_err *err)
{
	(void)l;
	return qc_nvfp4_swz_pack_slice(type, ne, rows, out, err);
}

static int nvfp4_unpack(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *packed,
			uint64_t row0, uint64_t n_rows, uint8_t *out, struct qc_err *err)
{
	(void)l;
	return qc_nvfp4_swz_unpack_rows(type, ne, packed, row0, n_rows, out, err);
}

/* fp8_rows has one layout id, like nvfp4_swz */
static bool fp8_fits(enum qc_layout l, enum qc_type type, const int64_t ne[4], uint32_t n_dims, const char **why)
{
	(void)l;
	return qc_fp8_rows_fits(type, ne, n_dims, why);
}

static int fp8_row_bytes(enum qc_layout l, enum qc_type type, int64_t ne0, uint64_t *bytes)
{
	(void)l;
	return qc_fp8_rows_row_bytes(type, ne0, bytes);
}

static int fp8_bytes(enum qc_layout l, enum qc_type type, const int64_t ne[4], uint64_t *bytes)
{
	(void)l;
	return qc_fp8_rows_bytes(type, ne, bytes);
}

static int fp8_pack(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *rows, uint8_t *out,
		    struct qc_err *err)
{
	(void)l;
	return qc_fp8_rows_pack(type, ne, rows, out, err);
}

static int fp8_unpack(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *packed,
		      uint64_t row0, uint64_t n_rows, uint8_t *out, struct qc_err *err)
{
	(void)l;
	return qc_fp8_rows_unpack_rows(type, ne, packed, row0, n_rows, out, err);
}

#define GGML_FNS ggml_fits, ggml_row_bytes, ggml_bytes, ggml_pack, ggml_unpack
#define MARLIN_FNS qc_marlin_fits, qc_marlin_row_bytes, qc_marlin_bytes, marlin_pack, qc_marlin_unpack_rows
#define NVFP4_FNS nvfp4_fits, nvfp4_row_bytes, nvfp4_bytes, nvfp4_pack, nvfp4_unpack
#define FP8_FNS fp8_fits, fp8_row_bytes, fp8_bytes, fp8_pack, fp8_unpack
#define K_GEMV QC_KERNEL_GEMV
#define K_MMA QC_KERNEL_MMA
#define K_F16 QC_KERNEL_F16_BLAS

/* The layout table. Kernel columns: 1 | 2-8 | 9-127 | >= 128 rows of one matrix
 * (boundaries: struct qc_kernel_rows), then stacked experts past the GEMV rows.
 * Why these (H200, Llama-3-8B shapes, docs/bench.md): the marlin tensor-core GEMM
 * beats its GEMV from 2 rows on (14336x4096: 4 rows GEMV 45 us, GEMM's 16-row tile
 * ~20 us), and at 1 row for int8 (GEMV 26 us, GEMM 21); from 128 rows fp16 decode +
 * cuBLAS (wgmma) beats mma.sync (512 rows: 244 us vs ~40 + 93 us). The ggml GEMV
 * (gemv_q.cu) takes up to 8 rows in row groups; past that its blocks are decoded to
 * fp16 for cuBLAS. Stacked experts past the GEMV rows take a grouped GEMM (rows
 * sorted by expert): moe_gemm.cu for ggml blocks, marlin_moe.cu for the marlin
 * layouts (the marlin GEMM's tiles of one expert). plan.c writes marlin experts for
 * --target sm90 only. */
const struct qc_layout_traits qc_layouts[QC_LAYOUT_COUNT] = {
	[QC_LAYOUT_GGML] = { "ggml", 1, true, GGML_FNS, { K_GEMV, K_GEMV, K_F16, K_F16 }, QC_KERNEL_MOE_GEMM },
	[QC_LAYOUT_MARLIN_I4] = { "marlin_i4", QC_MARLIN_STRIPE_I4, true, MARLIN_FNS,
				  { K_GEMV, K_MMA, K_MMA, K_F16 }, QC_KERNEL_MOE_GEMM },
	[QC_LAYOUT_MARLIN_I8] = { "marlin_i8", QC_MARLIN_STRIPE_I8, true, MARLIN_FNS,
				  { K_MMA, K_MMA, K_MMA, K_F16 }, QC_KERNEL_MOE_GEMM },
	[QC_LAYOUT_MARLIN_I4Z] = { "marlin_i4z", QC_MARLIN_STRIPE_I4, true, MARLIN_FNS,
				   { K_GEMV, K_MMA, K_MMA, K_F16 }, QC_KERNEL_MOE_GEMM },
	[QC_LAYOUT_MARLIN_I8Z] = { "marlin_i8z", QC_MARLIN_STRIPE_I8, true, MARLIN_FNS,
				   { K_MMA, K_MMA, K_MMA, K_F16 }, QC_KERNEL_MOE_GEMM },
	/* its scale tiles span a whole slice: no row ranges, no fused halves */
	[QC_LAYOUT_NVFP4_SWZ] = { "nvfp4_swz", 0, false, NVFP4_FNS, { K_GEMV, K_GEMV, K_F16, K_F16 }, K_GEMV },
	/* q6_K: the same kinds as marlin_i4 (its tensor-core GEMM decodes the 6-bit
	 * codes in registers; the vocabulary matrix keeps it past 128 rows) */
	[QC_LAYOUT_MARLIN_I6] = { "marlin_i6", QC_MARLIN_STRIPE_I6, true, MARLIN_FNS,
				  { K_GEMV, K_MMA, K_MMA, K_F16 }, QC_KERNEL_MOE_GEMM },
	/* W8A8 FP8: the activations rounded to e4m3 by the weights' scheme for both kinds (a
	 * float GEMV would not be the checkpoint's arithmetic): one row on the GEMV over the
	 * rounded codes (fp8_gemv.cu; H200 4096x4096: 8.9 us against cuBLASLt's 16.2), more
	 * on the FP8 tensor-core GEMM (fp8_gemm.cu, cuBLASLt; at 4 rows the GEMV is already
	 * level or slower: its conversions outrun the bytes); 2-D only: no experts (none) */
	[QC_LAYOUT_FP8_ROWS] = { "fp8_rows", 0, false, FP8_FNS, { K_GEMV, K_MMA, K_MMA, K_MMA }, QC_KERNEL_NONE },
};
