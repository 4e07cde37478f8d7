/* layout.h — how a tensor's bytes are arranged in a bundle, and per-target choices.
 *
 * Owns: enum qc_layout (append-only: ids are on disk), the target list and the rule
 * that picks a layout for (target, type). Every layout can be undone back to plain
 * ggml rows, which is what `qconvert dump` and the CPU backend read.
 * cpu stores ggml blocks as-is; sm80+ store q4_0/q8_0/q4_1/q4_K/hq4/q5_K/hq8/q6_K matrices in
 * the marlin tensor-core layouts (layout_marlin.h, docs/layout-marlin.md) when the shape fits.
 * sm100 also stores nvfp4 matrices with CUTLASS block-scale tiles (nvfp4_swz,
 * layout_nvfp4.h, docs/layout-nvfp4.md); sm80..sm90 keep nvfp4 ggml. sm89+ store W8A8
 * FP8 (f8_a8) matrices as fp8_rows for FP8 tensor cores (layout_fp8.h, docs/layout-fp8.md).
 * The layout table (qc_layouts, layout.c) is the one place per-layout facts live:
 * sizes, alignment, pack/unpack, fusing, and which kernel kind runs for how many
 * activation rows (qc_layout_kernel). Code elsewhere asks it instead of switching.
 */
#ifndef QC_LAYOUT_H
#define QC_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "qc_err.h"
#include "qtype.h"

enum qc_layout {
	QC_LAYOUT_GGML = 0, /* ggml blocks, rows in order, ne[0] fastest: byte-identical to GGUF */
	QC_LAYOUT_MARLIN_I4 = 1, /* 4-bit codes in mma B-fragment order + group-32 fp16 scales */
	QC_LAYOUT_MARLIN_I8 = 2, /* 8-bit codes, likewise */
	QC_LAYOUT_MARLIN_I4Z = 3, /* 4-bit codes + fp16 scale and offset per group (+ exact headers) */
	QC_LAYOUT_MARLIN_I8Z = 4, /* 8-bit codes (i8 order) + fp16 scale and offset per group (+ exact headers) */
	QC_LAYOUT_NVFP4_SWZ = 5, /* nvfp4: code rows + e4m3 scales in CUTLASS sm100 128x4 tiles + global scales */
	QC_LAYOUT_MARLIN_I6 = 6, /* q6_K, lossless: low nibbles as i4 tiles + a plane of high bits, int8 and fp16 scales */
	QC_LAYOUT_FP8_ROWS = 7,  /* f8_a8 (W8A8 FP8): e4m3 code rows + a scale per row + the activation scale */
	QC_LAYOUT_COUNT,
};

enum qc_target {
	QC_TARGET_CPU = 0,
	QC_TARGET_SM80,
	QC_TARGET_SM86,
	QC_TARGET_SM89,
	QC_TARGET_SM90,
	QC_TARGET_SM100,           /* sm90's choices, and nvfp4 in nvfp4_swz */
	QC_TARGET_COUNT,
};

/* What runs a matmul on weights of a layout, by the number of activation rows.
 * The CUDA side maps each kind to its functions (runtime/cuda/kernels/matmul_dispatch.h);
 * docs/cuda.md "Which kernel runs" repeats the table and tests/test_layout_table.c
 * checks that the two agree. Append-only like the layouts. */
enum qc_kernel_kind {
	QC_KERNEL_NONE = 0,        /* no kernel (the table says so; never chosen for a matmul) */
	QC_KERNEL_GEMV,            /* float activations on CUDA cores, the layout read directly; experts allowed */
	QC_KERNEL_MMA,             /* tensor-core GEMM on the layout itself (activations rounded to fp16;
				      fp8_rows: to e4m3 by the weights' W8A8 scheme) */
	QC_KERNEL_F16_BLAS,        /* weights decoded to fp16 (every call) + cuBLAS GemmEx, fp32 accumulation */
	QC_KERNEL_MOE_GEMM,        /* grouped GEMM over rows sorted by expert (moe_gemm.cu) */
	QC_KERNEL_COUNT,
};

/* The row-count columns of the table; the boundaries are struct qc_kernel_rows'. */
enum qc_rows_class {
	QC_ROWS_1 = 0,             /* one activation row: a decode step of one sequence */
	QC_ROWS_2_8,               /* 2 .. gemv_max_rows */
	QC_ROWS_9_127,             /* gemv_max_rows + 1 .. blas_min_rows - 1 */
	QC_ROWS_128,               /* blas_min_rows and more */
	QC_ROWS_COUNT,
};

/* One row of the layout table: everything that depends on the layout alone. The
 * functions take the layout id so one function can serve several layouts (marlin). */
struct qc_layout_traits {
	const char *name;          /* on-disk manifest name */
	int row_align;             /* rows per addressable unit: a row range [r0, r1) on multiples of it is
				      a matrix of its own at r0 * row bytes; 0: row ranges are not addressable */
	bool fusable;              /* MoE gate|up halves may be stored as one tensor (each half then starts
				      on row_align) */
	bool (*fits)(enum qc_layout l, enum qc_type type, const int64_t ne[4], uint32_t n_dims, const char **why);
	int (*row_bytes)(enum qc_layout l, enum qc_type type, int64_t ne0, uint64_t *bytes);
	int (*bytes)(enum qc_layout l, enum qc_type type, const int64_t ne[4], uint64_t *bytes);
	int (*pack_slice)(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *rows,
			  uint8_t *out, struct qc_err *err);
	int (*unpack_rows)(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *packed,
			   uint64_t row0, uint64_t n_rows, uint8_t *out, struct qc_err *err);
	enum qc_kernel_kind kernel[QC_ROWS_COUNT]; /* one matrix, by activation rows */
	enum qc_kernel_kind experts;               /* stacked experts (a matrix per row) past gemv_max_rows
						      rows; up to there, the GEMV; QC_KERNEL_NONE: the
						      layout never holds experts (fits refuses them) */
};

extern const struct qc_layout_traits qc_layouts[QC_LAYOUT_COUNT];

/* Where the row columns split, and the overrides of the table. Defaults:
 * QC_KERNEL_ROWS_DEFAULT; the CUDA backend reads its environment block once at create
 * (runtime/cuda/backend_cuda_env.c, docs/cuda.md). */
struct qc_kernel_rows {
	int64_t gemv_max_rows;     /* last row count of the 2-8 column (8) */
	int64_t blas_min_rows;     /* first row count of the >= 128 column (128) */
	int64_t mma_gemv_rows;     /* 0: the table; N != 0: layouts with a tensor-core GEMM run the GEMV
				      up to min(N, gemv_max_rows) rows and their larger-batch kernel past
				      N (N < 0: never the GEMV) */
	int64_t f16_max_elems;     /* a matrix of more elements keeps its 9-127 kernel at >= 128 rows
				      when that differs (its fp16 copy would not fit the scratch: the
				      vocabulary matrix); 2^27 */
	int64_t gemv_small_elems;  /* one row of a matrix of at most this many elements runs the GEMV
				      where the 1-row column says mma and the layout has a GEMV: 2^32
				      (every matrix of a real model: the streaming GEMV beat the 1-row
				      mma on the 8B Q8_0 shape, docs/perf-notes.md), 0: never */
};
#define QC_KERNEL_ROWS_DEFAULT { 8, 128, 0, (int64_t)1 << 27, (int64_t)1 << 32 }

/* "gemv", "mma", "f16+cublas", "moe_gemm" ("none"; "unknown" out of range). */
const char *qc_kernel_kind_name(enum qc_kernel_kind k);

/* The column n_rows falls in under r (0 rows: the 1-row column). */
enum qc_rows_class qc_kernel_rows_class(int64_t n_rows, const struct qc_kernel_rows *r);

/* The kernel kind for n_rows activation rows of one matrix (experts false) or of a
 * stack of n_in x n_out experts picked per row (experts true), from the table and r.
 * The one place that decides; 0 rows take the 1-row column (a no-op call);
 * QC_KERNEL_NONE for a bad layout id or n_rows < 0. */
enum qc_kernel_kind qc_layout_kernel(enum qc_layout l, int64_t n_rows, bool experts, int64_t n_in, int64_t n_out,
				     const struct qc_kernel_rows *r);

/* Rows per addressable unit of layout l (qc_layouts[l].row_align; 0 for a bad id). */
int qc_layout_row_align(enum qc_layout l);

/* Whether MoE gate|up halves may be fused into one tensor in layout l. */
bool qc_layout_fusable(enum qc_layout l);

const char *qc_layout_name(enum qc_layout l);
int qc_layout_from_name(const char *name);            /* -1 when unknown */
const char *qc_target_name(enum qc_target t);
int qc_target_from_name(const char *name);            /* -1 when unknown */

/* Layout the target's kernels want for a tensor of this type (shape not considered). */
enum qc_layout qc_target_layout(enum qc_target tgt, enum qc_type type, uint32_t n_dims);

/* Layout qconvert writes for this tensor: qc_target_layout when the shape fits it,
 * else QC_LAYOUT_GGML with *why (may be NULL; static text) saying what did not fit;
 * *why is NULL when nothing was given up. */
enum qc_layout qc_target_layout_for(enum qc_target tgt, enum qc_type type, const int64_t ne[4], uint32_t n_dims,
				    const char **why);

/* Bytes per row in layout l (ggml rows: the row size; marlin: a stripe's bytes over
 * its rows): a slice is ne[1] of them, row r of a stripe-aligned range starts at
 * r * row bytes. nvfp4_swz: K/2, the code bytes of a row; its slice is longer (the
 * padded scale tiles and global scales follow the codes: qc_layout_bytes of one
 * slice) and its rows are not addressable as matrices of their own.
 * QC_EFORMAT when ne0 does not fit. */
int qc_layout_row_bytes(enum qc_layout l, enum qc_type type, int64_t ne0, uint64_t *bytes);

/* Pack one ne[0] x ne[1] slice: rows holds its ne[1] ggml rows, out receives
 * qc_layout_bytes of that one slice (ne[1] * qc_layout_row_bytes but for nvfp4_swz)
 * in layout l. Caller checked the shape (qc_layout_bytes); nvfp4_swz also fails
 * (QC_EFORMAT) on scales it cannot keep exactly (qc_nvfp4_swz_data_fits says first). */
int qc_layout_pack_slice(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *rows,
			 uint8_t *out, struct qc_err *err);

/* Bytes a tensor of shape ne occupies in layout l; QC_EFORMAT if the shape does not
 * fit the layout, QC_ERANGE on overflow. */
int qc_layout_bytes(enum qc_layout l, enum qc_type type, const int64_t ne[4], uint64_t *bytes);

/* Undo layout l: write rows [row0, row0+n_rows) of the flattened [rows, ne[0]] view as
 * plain ggml blocks into out (n_rows * row_bytes). */
int qc_layout_unpack_rows(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *packed,
			  uint64_t row0, uint64_t n_rows, uint8_t *out, struct qc_err *err);

#endif
