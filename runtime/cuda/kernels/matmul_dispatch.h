/* matmul_dispatch.h — the (layout, type) -> matmul kernels table the backend uses.
 *
 * Owns: struct qc_cuda_mm_args (one weight matrix, or a stack of experts picked
 * per activation row, times float activations), struct qc_cuda_mm_kernels (a
 * small-batch GEMV and a large-batch GEMM per (layout, type)) and the lookup.
 * QC_LAYOUT_GGML rows come from qtype.def (every type with a device decoder,
 * runtime/cuda/kernels/decode.cuh); other layouts register one line each in
 * runtime/cuda/kernels/matmul_layouts.def (e.g. Marlin tiles), nothing else changes.
 * Contract of every kernel: y[r * ldy + o] = W_{e(r)}[o] . x[(r / x_div) * ldx]
 * for r < n_rows, o < n_out, e(r) = d_expert ? d_expert[r] : 0, float sums.
 * Weights may be read in aligned 16-byte units: the unit holding d_w's first
 * byte and QC_CUDA_MM_PAD bytes past the last matrix must be readable (device
 * allocations are 256-byte aligned; the backend pads its weight region).
 * A kernel that cannot do a case (experts, a shape) returns QC_EUNSUPPORTED.
 * Non-goals: choosing between gemv and gemm (the backend does), activation
 * quantization, epilogues.
 */
#ifndef QC_CUDA_MATMUL_DISPATCH_H
#define QC_CUDA_MATMUL_DISPATCH_H

#include <stdint.h>

#include "qc_cuda.h" /* first: wraps layout.h, qtype.h, qc_err.h in extern "C" */

#ifdef __cplusplus
extern "C" {
#endif

#define QC_CUDA_MM_PAD 16 /* readable bytes after a weight stack's end */

struct qc_cuda_mm_args {
	const uint8_t *d_w;        /* matrix 0 in its layout's bytes */
	enum qc_type type;
	enum qc_layout layout;
	int64_t n_in, n_out;       /* elements per row, rows per matrix */
	uint64_t row_bytes;        /* GGML layout: bytes per row */
	uint64_t mat_stride;       /* bytes from matrix e to e + 1 */
	const float *d_x;          /* activations, row (r / x_div) at d_x + (r / x_div) * ldx */
	int64_t ldx;               /* floats */
	int32_t x_div;             /* >= 1; K for MoE rows (t, slot) reading token t */
	const int32_t *d_expert;   /* (n_rows) matrix of each row, NULL: matrix 0 */
	int64_t n_rows;
	float *d_y;                /* (n_rows, ldy) */
	int64_t ldy;               /* floats */
	void *d_ws;                /* gemm scratch of ws_bytes(n_in, n_out, n_rows) bytes */
	uint64_t ws_bytes;
	void *blas;                /* cublasHandle_t bound to the launch stream (gemm) */
};

typedef int (*qc_cuda_mm_fn)(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err);
typedef uint64_t (*qc_cuda_mm_ws_fn)(int64_t n_in, int64_t n_out, int64_t n_rows);

struct qc_cuda_mm_kernels {
	const char *name;          /* for logs: "gemv_q/cublas" */
	qc_cuda_mm_fn gemv;        /* any n_rows, experts allowed; never NULL */
	qc_cuda_mm_fn gemm;        /* large n_rows, no experts; NULL when none */
	qc_cuda_mm_ws_fn ws_bytes; /* scratch gemm needs; NULL when none */
};

/* Kernels for weights of this layout and type, or NULL when none exists
 * (the caller then needs a host conversion, and must say so once). */
const struct qc_cuda_mm_kernels *qc_cuda_mm_find(enum qc_layout l, enum qc_type t);

/* Declarations of the functions matmul_layouts.def names. */
#define QC_CUDA_MM(LAYOUT, TYPE, NAME, GEMV, GEMM, WS) \
	int GEMV(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err); \
	int GEMM(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err); \
	uint64_t WS(int64_t n_in, int64_t n_out, int64_t n_rows);
#include "matmul_layouts.def"
#undef QC_CUDA_MM

#ifdef __cplusplus
}
#endif

#endif
