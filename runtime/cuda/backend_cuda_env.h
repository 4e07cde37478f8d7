/* backend_cuda_env.h — the CUDA backend's environment block, read once at create.
 *
 * Owns: struct qc_cuda_env, every knob of the CUDA backend and its kernels in one
 * place (docs/cuda.md "Environment"). Kernels never read the environment: the
 * values travel in their args structs (matmul_dispatch.h, paged_attn.h).
 * Non-goals: QC_CUDA_GRAPHS and QC_PROFILE (read where graphs and profiling are
 * made, backend_cuda_graph.c / backend_cuda_prof.c, also once per create).
 */
#ifndef QC_BACKEND_CUDA_ENV_H
#define QC_BACKEND_CUDA_ENV_H

#include <stdbool.h>
#include "kernels/matmul_dispatch.h"
#include "kernels/paged_attn.h"

/* Rows up to which a decode step's split attention merges its chunks in its last
 * chunk block (a fence, an atomic and the merge's loads on that block's chain),
 * past them in a kernel of its own: the in-kernel merge saves a launch where one
 * launch's latency is the step, and lengthens every block's chain where blocks
 * queue for the SMs (H200, 8B Q4_0: the merge kernel +1.5% at 8 rows, +0.9% at 64,
 * +1.6% at 128, +3.0% at 256; docs/perf-notes.md, thirteenth session). */
#define QC_CUDA_ATTN_MERGE_ROWS 1

struct qc_cuda_env {
	struct qc_cuda_mm_tuning mm;   /* QC_CUDA_GEMV_MAX_ROWS, QC_MARLIN_CUBLAS_ROWS,
					  QC_MARLIN_GEMV_ROWS, QC_MARLIN_GEMV_KTW */
	enum qc_cuda_attn_flash flash; /* QC_CUDA_FLASH=0: OFF */
	int pdl;                       /* QC_CUDA_PDL: 1 or unset (-1) programmatic dependent launch
					  (pdl.h) where the device has it, 0 plain launches */
	int64_t attn_merge_rows;       /* steps of up to this many rows: the split attention's last
					  chunk block merges (arrival counters); more rows: the merge
					  kernel (QC_CUDA_ATTN_MERGE_ROWS; QC_CUDA_ATTN_MERGE=0: 0) */
	int attn_rope;                 /* QC_CUDA_ATTN_ROPE=0: decode steps run rope_kv, not RoPE and the
					  K/V store inside the attention (binary16 pool; on by default) */
	int attn_early;                /* QC_CUDA_ATTN_EARLY=0: decode attention's old K/V rows load after
					  its PDL wait, not before (on by default) */
	int64_t l2_bytes;              /* QC_CUDA_L2_PREFETCH=MB: each GEMV launch's L2 hint (the weights
					  read next, backend_cuda_l2.c); 0: no hints */
	int fuse_norm;                 /* QC_CUDA_FUSE_NORM=0: the attention/FFN RMSNorm as a kernel of
					  its own even where the GEMV could take it */
	int tp_p2p;                    /* QC_CUDA_TP_P2P=1: tensor-parallel all-reduces of at most
					  QC_CUDA_TP_P2P_BYTES through tp_allreduce.cu (peer to peer)
					  instead of NCCL (backend_cuda_tp.c) */
	bool cublas_rows_given;        /* QC_MARLIN_CUBLAS_ROWS was set (else the backend moves the
					  f16+cublas column where the wgmma GEMM runs) */
	bool wgmma_rows_given;         /* QC_MARLIN_WGMMA_ROWS was set (else compute capability 9.0
					  runs the warp-specialized wgmma GEMM for 65-256 rows) */
	const char *nccl_lib;          /* QC_NCCL_LIB: libnccl.so.2, or the folder holding it, for
					  tensor parallelism (backend_cuda_nccl.h); NULL: the loader's
					  search. Points into the environment. */
};

/* Fill *e from the environment (unset or empty: the defaults). Never fails: a
 * value that does not parse reads as its C library conversion does (strtoll/atoi). */
void qc_cuda_env_read(struct qc_cuda_env *e);

#endif
