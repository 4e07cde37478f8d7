/* marlin_gemm.h — C = A · Wᵀ with W in a marlin layout: the argument struct shared by
 * the CUDA kernel (runtime/cuda/kernels/marlin_gemm.cu) and its C reference (marlin_gemm.c).
 *
 * Owns: struct qc_marlin_gemm_args and the reference entry point. A is fp16 (m, k)
 * row-major activations; W is one packed slice (k = ggml ne[0], n = ne[1]); C is
 * (m, n) row-major. Value of a weight: i4: d·(code − 8) (q4_0), i8: d·code (q8_0),
 * i4z: code·s + o (q4_1, q4_K, hq4; fp16 s and o per group), i8z: the same with
 * a signed int8 code (q5_K: code = q − 16), i6: q6_K's own (d·sc)·(q − 32) (fp16 d
 * per 256, int8 sc per 16, 6-bit q).
 * The reference dequantizes straight from the packed bytes with the formulas of
 * docs/layout-marlin.md (not the packer's tables), so it also checks the layout.
 * Plain C; the CUDA side includes it too.
 */
#ifndef QC_MARLIN_GEMM_H
#define QC_MARLIN_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "layout.h"
#include "qtype.h"

enum qc_marlin_c_type {
	QC_MARLIN_C_F32 = 0,
	QC_MARLIN_C_F16 = 1,
};

/* How the kernel splits K across blocks (partials summed in a fixed order). */
enum qc_marlin_split {
	QC_MARLIN_SPLIT_AUTO = 0,  /* chosen from the shape and the SM count */
	QC_MARLIN_SPLIT_FIXED = 1, /* exactly split_k parts (clamped to the group count) */
};

#define QC_MARLIN_MAX_PARTS 2 /* column ranges past the first (qc_marlin_gemm_args.n_parts) */

struct qc_marlin_gemm_args {
	enum qc_layout layout;        /* QC_LAYOUT_MARLIN_I4, _I8, _I4Z, _I8Z or _I6 */
	enum qc_type type;            /* the packed encoding (fixes the stripe size: i4z keeps headers) */
	int64_t m, n, k;              /* tokens; output columns; input length (multiple of 32; 256 for
					 the K-quants) */
	const void *a;                /* (m, k) fp16 bits, row-major, 16-byte aligned */
	const void *w;                /* one packed slice, n * qc_marlin_row_bytes bytes, 16-byte aligned */
	void *c;                      /* (m, ldc) row-major, c_type; columns >= n untouched */
	int64_t ldc;                  /* elements from one row of c to the next, >= n */
	enum qc_marlin_c_type c_type;
	const int32_t *expert;        /* (m) slice used by each row (MoE), NULL: every row uses w */
	uint64_t mat_stride;          /* bytes from slice e to e + 1 when expert is set */
	enum qc_marlin_split split;
	int split_k;                  /* parts when split == QC_MARLIN_SPLIT_FIXED */
	void *workspace;              /* device only: fp32 partials, qc_cuda_marlin_gemm_workspace bytes */
	size_t workspace_bytes;
	/* Grouped rows (MoE, device only, never split): a's m rows are sorted by expert
	 * (runtime/cuda/kernels/moe_sort.cuh); tile i < *n_tiles (at most max_tiles)
	 * multiplies rows tiles[2i+1] .. (at most group_rows, ending before
	 * seg_end[tiles[2i] + 1]) by slice tiles[2i] (mat_stride apart), and sorted row
	 * s goes to c's row rows[s] (s < *n_sorted: the rows the tiles hold). group_rows
	 * 16, 32 or 64: the mma.sync kernel's tiles (K may be split; the partials are
	 * summed into the rows' own places); QC_MARLIN_GROUP_ROWS_WS (128): Hopper's
	 * warp-specialized kernel, never split. NULL tiles: off (expert must then be
	 * NULL). The reference ignores them. */
	const int32_t *tiles, *n_tiles, *seg_end, *rows, *n_sorted;
	int64_t max_tiles, group_rows;
	/* Outputs of their own for column ranges (device only; a fused Q|K|V or gate|up
	 * matrix, one GEMM for its parts): columns from part_col0[i] on (ascending, in
	 * (0, n), multiples of 8) go to part_c[i] at column − part_col0[i], row stride
	 * part_ldc[i] (even, >= the range's width; 8-byte aligned c), for i < n_parts;
	 * the columns before part_col0[0] to c. 0: every column to c. Not with expert or
	 * tiles. The reference ignores them. */
	int n_parts;
	int64_t part_col0[QC_MARLIN_MAX_PARTS];
	void *part_c[QC_MARLIN_MAX_PARTS];
	int64_t part_ldc[QC_MARLIN_MAX_PARTS];
};

/* Precision of the reference: F64 is the truth (exact weights, double sums);
 * F16 is a plain fp16 GEMM (weights rounded to fp16, products summed in float).
 * XQ16_* / XQ8_*: each 32-block of a row's activations first rounded to integer
 * codes as the streaming GEMV's XQ modes round (16: d = amax / 32767; 8: the CPU
 * backend's ggml rounding, d = fp16(amax / 127); q = rint(x * (qmax / amax)),
 * x = d q), then exact weights summed in double (_F64: the truth of that mode) or
 * in float in k order (_F32). */
enum qc_marlin_prec {
	QC_MARLIN_PREC_F64 = 0,
	QC_MARLIN_PREC_F16 = 1,
	QC_MARLIN_PREC_XQ8_F64 = 2,
	QC_MARLIN_PREC_XQ8_F32 = 3,
	QC_MARLIN_PREC_XQ16_F64 = 4,
	QC_MARLIN_PREC_XQ16_F32 = 5,
};

/* Shape/layout checks shared by the kernel and the reference; QC_EINVAL or
 * QC_EUNSUPPORTED with the shape in err. */
int qc_marlin_gemm_check(const struct qc_marlin_gemm_args *a, struct qc_err *err);

/* out (m, n) doubles = A · Wᵀ from host pointers a->a, a->w and a->expert (c, ldc,
 * c_type and the workspace are ignored). QC_ENOMEM, or the check's codes. */
int qc_marlin_gemm_ref(const struct qc_marlin_gemm_args *a, enum qc_marlin_prec prec, double *out,
		       struct qc_err *err);

#endif
