/* matmul_dispatch.h — the (layout, type) -> matmul kernels table the backend uses.
 *
 * Owns: struct qc_cuda_mm_args (one weight matrix, or a stack of experts picked
 * per activation row, times float activations), struct qc_cuda_mm_kernels (the
 * function of each kernel kind, enum qc_kernel_kind of quant/layout.h, per
 * (layout, type)) and the lookup. Which kind runs is the layout table's
 * (qc_layout_kernel); a kind's function runs that kernel for any row count it is
 * given and never hands the call to another kind.
 * QC_LAYOUT_GGML rows come from qtype.def (every type with a device decoder,
 * runtime/cuda/kernels/decode.cuh); other layouts register one line each in
 * runtime/cuda/kernels/matmul_layouts.def (e.g. Marlin tiles), nothing else changes.
 * Contract of every kernel: y[r * ldy + o] = W_{e(r)}[o] . x[(r / x_div) * ldx]
 * for r < n_rows, o < n_out, e(r) = d_expert ? d_expert[r] : 0, float sums.
 * Weights may be read in aligned 16-byte units: the unit holding d_w's first
 * byte and QC_CUDA_MM_PAD bytes past the last matrix must be readable (device
 * allocations are 256-byte aligned; the backend pads its weight region).
 * A kernel that cannot do a case (experts, a shape) returns QC_EUNSUPPORTED.
 * Non-goals: choosing the kind (qc_layout_kernel does, asked by the backend),
 * activation quantization, epilogues.
 */
#ifndef QC_CUDA_MATMUL_DISPATCH_H
#define QC_CUDA_MATMUL_DISPATCH_H

#include <stdint.h>

#include "qc_cuda.h" /* first: wraps layout.h, qtype.h, qc_err.h in extern "C" */

#ifdef __cplusplus
extern "C" {
#endif

#define QC_CUDA_MM_PAD 16 /* readable bytes after a weight stack's end */
#define QC_CUDA_MM_MORE 2 /* most extra matrices of one multi-matrix launch */
#define QC_CUDA_L2_RANGES 4 /* most byte ranges of one L2 prefetch hint */

/* An L2 prefetch hint: the weight bytes the decode step reads after this launch's
 * own (n ranges, each 16-byte aligned and a multiple of 16 bytes). A kernel that
 * takes hints (the streaming marlin GEMV) asks L2 to fetch them with sm_90 bulk
 * prefetches once its own weight loads are out, so the memory system works
 * through the latency-bound kernels that follow (RoPE, attention, the split-K
 * sums) instead of idling. Only a hint: results never depend on it, and kernels
 * without it ignore it. n = 0: none. */
struct qc_cuda_l2_hint {
	const uint8_t *d[QC_CUDA_L2_RANGES];
	uint64_t bytes[QC_CUDA_L2_RANGES];
	int32_t n;
};

/* The marlin GEMV's K partition (fixed for the process, so a row's result stays
 * batch-invariant): warps of 4 or 8 k16 tiles that load once and exit
 * (marlin_gemv.cu), or blocks that stream a long K range through a ring of loads
 * (marlin_gemv_stream.cu; MoE rows keep KT4). The backend's default is STREAM;
 * a zeroed args struct means KT4. */
enum qc_cuda_gemv_kt {
	QC_CUDA_GEMV_KT4 = 0,
	QC_CUDA_GEMV_KT8 = 1,
	QC_CUDA_GEMV_STREAM = 2,
};

struct qc_cuda_mm_args {
	const uint8_t *d_w;        /* matrix 0 in its layout's bytes */
	enum qc_type type;
	enum qc_layout layout;
	int64_t n_in, n_out;       /* elements per row, rows per matrix */
	uint64_t row_bytes;        /* bytes per row (qc_layout_row_bytes: rows r0.. of a marlin
				      matrix start at r0 * row_bytes on a stripe) */
	uint64_t mat_stride;       /* bytes from matrix e to e + 1 */
	const float *d_x;          /* activations, row (r / x_div) at d_x + (r / x_div) * ldx */
	int64_t ldx;               /* floats */
	int32_t x_div;             /* >= 1; K for MoE rows (t, slot) reading token t */
	const int32_t *d_expert;   /* (n_rows) matrix of each row, NULL: matrix 0 */
	int64_t n_mat;             /* matrices in the stack (the grouped kinds sort rows by them) */
	int64_t n_rows;
	float *d_y;                /* (n_rows, ldy) */
	int64_t ldy;               /* floats */
	void *d_ws;                /* gemm scratch of ws_bytes(n_in, n_out, n_rows) bytes */
	uint64_t ws_bytes;
	void *blas;                /* cublasHandle_t bound to the launch stream (f16+cublas) */
	enum qc_cuda_gemv_kt gemv_kt; /* marlin GEMV: k16 tiles per warp (QC_MARLIN_GEMV_KTW) */
	/* Zeroed arrival counters for a split-K GEMV's in-kernel sum (the last block of
	 * a column range to finish sums the partials in block order, then re-zeroes its
	 * counter): NULL or fewer than the kernel needs, a second kernel sums instead.
	 * Same bits either way. Owned by the caller, never shared with d_ws. */
	uint32_t *d_flags;
	int64_t n_flags;
	/* Fusions, for the kinds whose qc_cuda_mm_kernels.fuse has their bit (any other
	 * kind refuses them with QC_EUNSUPPORTED): */
	const float *d_x2;         /* QC_MM_FUSE_SILU: activations are silu(x) * x2, x2 at the same
				      ldx and x_div (silu.cuh: silu_mul's bits) */
	int32_t accumulate;        /* QC_MM_FUSE_ACC: y += W x (the residual add; add.cu's bits) */
	/* QC_MM_FUSE_MULTI: n_more more matrices of the same layout, type and n_in, each
	 * with its own weights, n_out, y and ldy, times the same activations in the same
	 * launch (Q, K and V; gate and up): one kernel instead of up to three (GEMV), or
	 * the activations rounded to fp16 once for all of them (MMA, F16_BLAS), and one
	 * GEMM where they are one fused tensor's parts, each after the last (MMA). */
	/* QC_MM_FUSE_NORM: x is RMSNorm(x) * norm_w first (norm over the whole row of n_in,
	 * eps norm_eps; rms_norm.cu's formula, its own fixed summation order) */
	const float *d_norm_w;
	float norm_eps;
	int32_t n_more;
	struct qc_cuda_mm_more {
		const uint8_t *d_w;
		int64_t n_out;
		float *d_y;
		int64_t ldy;
	} more[QC_CUDA_MM_MORE];
	struct qc_cuda_l2_hint l2; /* bytes to prefetch into L2 (a hint; see above) */
};

/* What a kernel kind can fuse (qc_cuda_mm_kernels.fuse). */
enum {
	QC_MM_FUSE_SILU = 1,
	QC_MM_FUSE_ACC = 2,
	QC_MM_FUSE_MULTI = 4,
	QC_MM_FUSE_NORM = 8,
};

/* The matmul knobs, read once by the backend (runtime/cuda/backend_cuda_env.c):
 * where the layout table's row columns split, and the marlin GEMV's K partition. */
struct qc_cuda_mm_tuning {
	struct qc_kernel_rows rows;
	enum qc_cuda_gemv_kt gemv_kt;
	/* QC_CUDA_GEMV_STREAM's partition (qc_cuda_marlin_gemv_stream_tune): blocks a
	 * launch aims at, k16 tiles per warp at least; 0: each weight width's default */
	int stream_blocks, stream_min_wt;
	int stream_cluster; /* qc_cuda_marlin_gemv_stream_cluster */
	int stream_xq;      /* qc_cuda_marlin_gemv_stream_xq; -1: each width's default */
	int stream_ring;    /* qc_cuda_marlin_gemv_stream_ring; -1: each width's default */
	int stream_persist; /* qc_cuda_marlin_gemv_stream_persist; -1: each width's default */
	int stream_wave;    /* qc_cuda_marlin_gemv_stream_wave; -1: each width's default */
	int norm_once;      /* qc_cuda_marlin_gemv_norm_once */
	int64_t wgmma_rows; /* qc_cuda_marlin_gemm_wgmma_rows */
	int wgmma_stages, wgmma_groups, wgmma_split_free, wgmma_form; /* qc_cuda_marlin_gemm_wgmma_tune */
	int moe_rows;       /* qc_cuda_marlin_moe_rows; 0: by the rows an expert gets */
};
#define QC_CUDA_MM_TUNING_DEFAULT { QC_KERNEL_ROWS_DEFAULT, QC_CUDA_GEMV_STREAM, 0, 0, 0, -1, -1, -1, -1, 1, 0, 6, 2, 1, 2, 0 }

/* Marlin GEMMs of one slice with min_rows .. max_rows tokens run on the Hopper
 * wgmma kernel (marlin_wgmma.cu) on compute capability 9.0, others on the mma.sync
 * kernel; min_rows 0 or less: never. Process-wide, set by the backend at create
 * (QC_MARLIN_WGMMA_ROWS, wgmma_setup). */
void qc_cuda_marlin_gemm_wgmma_rows(int64_t min_rows, int64_t max_rows);
/* The wgmma kernel's pipeline stages (4 or 6), warpgroups per block (1: 64
 * tokens, 2: 128), split_free = 1: K splits that fill the SMs without capping
 * the partials at the weights' size, and its form: 0, the weights decoded into
 * the multiplying warpgroups' registers (marlin_wgmma.cu); 1, a producer
 * warpgroup decoding into shared memory for two that multiply
 * (marlin_wgmma_ws.cu), split by a time model (A/B runs;
 * QC_MARLIN_WGMMA_TUNE="stages,warpgroups,split_free,form"). */
void qc_cuda_marlin_gemm_wgmma_tune(int stages, int warpgroups, int split_free, int form);
/* The streaming GEMV's partition (marlin_gemv_stream.cu): about `blocks` blocks per
 * launch, at least min_warp_tiles k16 tiles per warp (even), for both weight widths;
 * out-of-range values take each width's default (int4 264,8; int8 132,8).
 * Process-wide, set by the backend at create before any launch: batch invariance
 * holds among launches with the same numbers. */
void qc_cuda_marlin_gemv_stream_tune(int blocks, int min_warp_tiles);
/* 1: the streaming GEMV's kb blocks along K (2..8) form one thread-block cluster and
 * sum their partials through distributed shared memory (sm_90+), the same bits as
 * the global partials; 0 (default): global partials and arrival counters.
 * Process-wide like the partition. */
void qc_cuda_marlin_gemv_stream_cluster(int on);
/* The streaming GEMV's activations, for both weight widths: 0 floats (no
 * rounding); 16: each 32-element block as 16-bit codes and a float scale
 * amax / 32767 (dp2a); 8: as int8 codes and an fp16 scale, the CPU backend's ggml
 * rounding (runtime/cpu/matmul_round.c; dp4a); -1: each width's default (int4 16,
 * int8 0). Process-wide like the partition; QC_EINVAL for other values. The
 * reference is qc_marlin_gemm_ref's QC_MARLIN_PREC_XQ*. */
int qc_cuda_marlin_gemv_stream_xq(int bits);
/* 1: a one-row streaming GEMV keeps its weight tiles in flight in a shared-memory
 * ring filled by cp.async (more bytes in flight per SM than the registers hold);
 * 0: in registers; -1: each width's default. Same arithmetic, same bits. */
void qc_cuda_marlin_gemv_stream_ring(int on);
/* 1 (default): a one-row marlin GEMV launch with the RMSNorm folded in and k <= 4096
 * reads x and the norm's weights once for the row sum and the staging
 * (marlin_gemv.cuh norm_stage_1row); 0: twice (the earlier prologue). The same bits
 * either way. Process-wide, set by the backend at create. */
void qc_cuda_marlin_gemv_norm_once(int on);
/* 1: one-row and ROWS-row launches without experts take the persistent GEMV
 * (marlin_gemv_persist.cu: a grid of `blocks` blocks, each warp an equal run of
 * the launch's 32-k groups across stripes, partial stripes summed in warp order);
 * 0: the streaming kernel; -1: each width's default. Batch-invariant like the
 * partition (one partition for 1 and ROWS rows), but other bits than the
 * streaming kernel's. Process-wide. */
void qc_cuda_marlin_gemv_stream_persist(int on);
/* 1: the streaming partition rounds blocks along K down (a launch that fits one
 * wave of `blocks` stays in it); 0: to the nearest (the rule before 2026-11-27's
 * fourth session); -1: each width's default. Process-wide like the partition. */
void qc_cuda_marlin_gemv_stream_wave(int on);

typedef int (*qc_cuda_mm_fn)(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err);
/* Scratch bytes for n_rows rows: the most any kind the table can pick for up to
 * n_rows rows of an n_in x n_out matrix needs under t. */
typedef uint64_t (*qc_cuda_mm_ws_fn)(int64_t n_in, int64_t n_out, int64_t n_rows, const struct qc_cuda_mm_tuning *t);
/* Scratch bytes of the QC_KERNEL_MOE_GEMM kind for n_rows rows over a stack of n_mat
 * matrices of n_out x n_in. */
typedef uint64_t (*qc_cuda_mm_moe_ws_fn)(int64_t n_in, int64_t n_out, int64_t n_rows, int64_t n_mat);

struct qc_cuda_mm_kernels {
	const char *name;                    /* for logs: "gemv_q/cublas" */
	qc_cuda_mm_fn run[QC_KERNEL_COUNT];  /* by kind; NULL where the layout has none */
	qc_cuda_mm_ws_fn ws_bytes;           /* never NULL */
	qc_cuda_mm_moe_ws_fn moe_ws;         /* with run[QC_KERNEL_MOE_GEMM]; NULL without */
	unsigned fuse[QC_KERNEL_COUNT];      /* QC_MM_FUSE_* bits each kind takes */
};

/* QC_EUNSUPPORTED naming the kernel when a asks for a fusion outside `have`. */
int qc_cuda_mm_check_fuse(const struct qc_cuda_mm_args *a, unsigned have, const char *kernel, struct qc_err *err);

/* Kernels for weights of this layout and type, or NULL when none exists
 * (the caller then needs a host conversion, and must say so once). */
const struct qc_cuda_mm_kernels *qc_cuda_mm_find(enum qc_layout l, enum qc_type t);

/* The functions matmul_layouts.def names (marlin_gemv.cu, marlin_mm.cu, nvfp4_swz.cu,
 * fp8_gemv.cu, fp8_gemm.cu). */
int qc_cuda_marlin_gemv(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err);
int qc_cuda_marlin_mm(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err);
int qc_cuda_marlin_f16(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err);
int qc_cuda_marlin_moe(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err);
/* The grouped marlin GEMM's tile height: 16, 32, 64 (mma.sync) or 128 (Hopper's
 * warp-specialized kernel, compute capability 9.0 only); anything else: chosen by
 * the mean rows an expert gets (QC_MARLIN_MOE_ROWS). */
void qc_cuda_marlin_moe_rows(int rows);
uint64_t qc_cuda_marlin_moe_ws(int64_t n_in, int64_t n_out, int64_t n_rows, int64_t n_mat);
uint64_t qc_cuda_marlin_ws(int64_t n_in, int64_t n_out, int64_t n_rows, const struct qc_cuda_mm_tuning *t);
int qc_cuda_nvfp4_swz_gemv(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err);
int qc_cuda_nvfp4_swz_gemm(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err);
uint64_t qc_cuda_nvfp4_swz_ws(int64_t n_in, int64_t n_out, int64_t n_rows, const struct qc_cuda_mm_tuning *t);
int qc_cuda_fp8_gemm(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err);
int qc_cuda_fp8_gemv(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err);
uint64_t qc_cuda_fp8_gemm_ws(int64_t n_in, int64_t n_out, int64_t n_rows, const struct qc_cuda_mm_tuning *t);

#ifdef __cplusplus
}
#endif

#endif
