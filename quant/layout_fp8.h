/* layout_fp8.h — fp8_rows: W8A8 FP8 matrices (f8_a8) as FP8 tensor cores read them.
 *
 * Owns: whether an f8_a8 tensor fits, its sizes, the pack of its ggml blocks and the
 * exact unpack back to them. The tensor (docs/layout-fp8.md), N rows of K elements:
 *   1. codes: N rows of K e4m3 bytes, K fastest (row r at r*K): the K-major operand
 *      cuBLASLt's FP8 GEMM takes as the transposed A;
 *   2. scales at N*K: N f32, row r's weight scale d (one per row: per-tensor and
 *      per-channel checkpoints), padded with 0 to a multiple of 4;
 *   3. at the end, 16 bytes: the f32 activation scale a (> 0 static, 0 dynamic per
 *      token; quant/act_fp8.h), then 12 zero bytes.
 * Invariants: unpack(pack(x)) == x byte for byte; every region is 16-byte aligned.
 * Non-goals: scales that vary along a row (group or 128x128 block FP8: they stay
 * ggml), stacked experts, row ranges as matrices of their own.
 */
#ifndef QC_LAYOUT_FP8_H
#define QC_LAYOUT_FP8_H

#include <stdbool.h>
#include <stdint.h>

#include "layout.h"

/* Byte offsets inside a tensor of n rows of k elements. */
struct qc_fp8_rows_geom {
	int64_t n, k;
	uint64_t scale_off;        /* n*k */
	uint64_t act_off;          /* scale_off + 4*n rounded up to 16 */
	uint64_t bytes;            /* act_off + 16 */
};

/* Whether an f8_a8 tensor of this shape can be stored as fp8_rows (2 dims, K a
 * positive multiple of 32 up to 2^24, N from 1 up to 2^30). On false, *why (may be
 * NULL) gets a static sentence. */
bool qc_fp8_rows_fits(enum qc_type type, const int64_t ne[4], uint32_t n_dims, const char **why);

/* Geometry; QC_EFORMAT when the type or shape does not fit. */
int qc_fp8_rows_geom(enum qc_type type, const int64_t ne[4], struct qc_fp8_rows_geom *g);

/* K, the code bytes of a row; QC_EFORMAT on a misfit. */
int qc_fp8_rows_row_bytes(enum qc_type type, int64_t ne0, uint64_t *bytes);

/* Bytes of the whole tensor; QC_EFORMAT on a misfit. */
int qc_fp8_rows_bytes(enum qc_type type, const int64_t ne[4], uint64_t *bytes);

/* Whether f8_a8 ggml rows hold one weight scale per row and one activation scale for
 * the matrix, i.e. whether pack will succeed. On false, *why gets a static sentence. */
bool qc_fp8_rows_data_fits(enum qc_type type, const int64_t ne[4], const uint8_t *rows, const char **why);

/* Pack ne[1] f8_a8 ggml rows into out (bytes of qc_fp8_rows_bytes). QC_EFORMAT,
 * naming the row, when a row's scales differ or a block's activation scale does. */
int qc_fp8_rows_pack(enum qc_type type, const int64_t ne[4], const uint8_t *rows, uint8_t *out, struct qc_err *err);

/* Rows [row0, row0 + n_rows) back to f8_a8 ggml blocks. QC_ERANGE past the tensor. */
int qc_fp8_rows_unpack_rows(enum qc_type type, const int64_t ne[4], const uint8_t *packed, uint64_t row0,
			    uint64_t n_rows, uint8_t *out, struct qc_err *err);

#endif
