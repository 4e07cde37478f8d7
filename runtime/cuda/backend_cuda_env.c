/* backend_cuda_env.c — the one place the CUDA backend reads its knobs (see
 * backend_cuda_env.h; documented in docs/cuda.md "Environment"). Each knob keeps
 * the spelling and parse it had when a kernel read it, so scripts stay valid.
 */
#include "backend_cuda_env.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* $name as a number, or def when unset or empty. */
static int64_t env_i64(const char *name, int64_t def)
{
	const char *v = getenv(name);
	return v && *v ? strtoll(v, NULL, 10) : def;
}

void qc_cuda_env_read(struct qc_cuda_env *e)
{
	const struct qc_cuda_mm_tuning def = QC_CUDA_MM_TUNING_DEFAULT;
	e->mm = def;
	/* matmuls of more rows than this leave the GEMV columns; huge: every ggml
	 * matmul stays on the batch-invariant GEMV (the batched-equals-single test) */
	e->mm.rows.gemv_max_rows = env_i64("QC_CUDA_GEMV_MAX_ROWS", def.rows.gemv_max_rows);
	/* first row count of the >= 128 column (marlin: fp16 decode + cuBLAS); 0 or
	 * less: never */
	e->mm.rows.blas_min_rows = env_i64("QC_MARLIN_CUBLAS_ROWS", def.rows.blas_min_rows);
	e->cublas_rows_given = getenv("QC_MARLIN_CUBLAS_ROWS") && *getenv("QC_MARLIN_CUBLAS_ROWS");
	if (e->mm.rows.blas_min_rows <= 0)
		e->mm.rows.blas_min_rows = INT64_MAX;
	/* marlin matmuls of at least this many rows run on the Hopper wgmma GEMM
	 * (compute capability 9.0); 0 or less: never (the mma.sync GEMM); with it the
	 * backend starts the f16+cublas column at 193 rows (wgmma_setup) */
	e->mm.wgmma_rows = env_i64("QC_MARLIN_WGMMA_ROWS", def.wgmma_rows);
	e->wgmma_rows_given = getenv("QC_MARLIN_WGMMA_ROWS") && *getenv("QC_MARLIN_WGMMA_ROWS");
	/* "stages,warpgroups,split_free,form": the wgmma kernel's shape (A/B runs) */
	const char *wt = getenv("QC_MARLIN_WGMMA_TUNE");
	if (wt && *wt) {
		int v[4] = { def.wgmma_stages, def.wgmma_groups, def.wgmma_split_free, def.wgmma_form };
		const char *q = wt;
		for (int i = 0; i < 4 && *q; i++) {
			char *end;
			v[i] = (int)strtol(q, &end, 10);
			q = *end == ',' ? end + 1 : end;
		}
		e->mm.wgmma_stages = v[0];
		e->mm.wgmma_groups = v[1];
		e->mm.wgmma_split_free = v[2];
		e->mm.wgmma_form = v[3];
	}
	/* the grouped marlin MoE GEMM's tile rows (16, 32, 64, 128; 0: by rows per expert) */
	e->mm.moe_rows = (int)env_i64("QC_MARLIN_MOE_ROWS", def.moe_rows);
	/* N: marlin layouts run their GEMV up to N rows (batch-invariant runs) */
	e->mm.rows.mma_gemv_rows = env_i64("QC_MARLIN_GEMV_ROWS", 0);
	/* one row of a matrix of at most this many elements: the GEMV over the 1-row mma */
	e->mm.rows.gemv_small_elems = env_i64("QC_MARLIN_GEMV_SMALL", def.rows.gemv_small_elems);
	const char *kt = getenv("QC_MARLIN_GEMV_KTW");
	/* "stream" (the default), or 4 / 8: the load-once kernel's tiles per warp */
	if (kt && *kt && strcmp(kt, "stream"))
		e->mm.gemv_kt = atoi(kt) == 8 ? QC_CUDA_GEMV_KT8 : QC_CUDA_GEMV_KT4;
	/* "blocks,tiles": the streaming GEMV's partition (A/B runs) */
	const char *st = getenv("QC_MARLIN_GEMV_STREAM_TUNE");
	if (st && *st) {
		char *end = NULL;
		e->mm.stream_blocks = (int)strtol(st, &end, 10);
		e->mm.stream_min_wt = end && *end == ',' ? atoi(end + 1) : def.stream_min_wt;
	}
	/* 1: the streaming GEMV's split-K sum through a thread-block cluster (A/B runs) */
	const char *cl = getenv("QC_MARLIN_GEMV_CLUSTER");
	e->mm.stream_cluster = cl && !strcmp(cl, "1");
	/* 1 / 0: the one-row streaming GEMV's weights in flight through a shared-memory
	 * ring or registers (unset: each width's default) */
	const char *rg = getenv("QC_MARLIN_GEMV_RING");
	e->mm.stream_ring = rg && *rg ? atoi(rg) != 0 : def.stream_ring;
	/* 1 / 0: the streaming partition's blocks along K rounded down (one wave where
	 * it fits) or to the nearest (unset: each width's default) */
	const char *wv = getenv("QC_MARLIN_GEMV_WAVE");
	e->mm.stream_wave = wv && *wv ? atoi(wv) != 0 : def.stream_wave;
	/* 1 / 0: the persistent GEMV or the streaming one (unset: each width's default) */
	const char *ps = getenv("QC_MARLIN_GEMV_PERSIST");
	e->mm.stream_persist = ps && *ps ? atoi(ps) != 0 : def.stream_persist;
	/* 0 / 8 / 16: the streaming GEMV's activations as floats or integer codes for
	 * every weight width (unset: each width's default) */
	e->mm.stream_xq = (int)env_i64("QC_MARLIN_GEMV_XQ", def.stream_xq);
	if (e->mm.stream_xq != 0 && e->mm.stream_xq != 8 && e->mm.stream_xq != 16 && e->mm.stream_xq != def.stream_xq) {
		QC_WARN_ONCE("cuda: QC_MARLIN_GEMV_XQ=%d is not 0, 8 or 16; ignored", e->mm.stream_xq);
		e->mm.stream_xq = def.stream_xq;
	}
	/* 0: the GEMV prologue reads x twice (row sum, then staging), as before */
	const char *no = getenv("QC_MARLIN_GEMV_NORM_ONCE");
	e->mm.norm_once = !(no && !strcmp(no, "0"));
	const char *fl = getenv("QC_CUDA_FLASH");
	e->flash = fl && !strcmp(fl, "0") ? QC_CUDA_ATTN_FLASH_OFF : QC_CUDA_ATTN_FLASH_AUTO;
	const char *pdl = getenv("QC_CUDA_PDL");
	e->pdl = pdl && *pdl ? atoi(pdl) != 0 : -1;
	/* the split attention's in-kernel merge for steps of up to this many rows
	   (QC_CUDA_ATTN_MERGE=0: never, the merge kernel always) */
	const char *am = getenv("QC_CUDA_ATTN_MERGE");
	e->attn_merge_rows = am && !strcmp(am, "0") ? 0 : env_i64("QC_CUDA_ATTN_MERGE_ROWS", QC_CUDA_ATTN_MERGE_ROWS);
	/* 0: decode attention loads every K/V row after its PDL wait (the A/B of the
	   early loads, docs/perf-notes.md) */
	const char *ae = getenv("QC_CUDA_ATTN_EARLY");
	e->attn_early = !(ae && !strcmp(ae, "0"));
	/* 0: decode steps run rope_kv before the attention instead of RoPE inside it */
	const char *ar = getenv("QC_CUDA_ATTN_ROPE");
	e->attn_rope = !(ar && !strcmp(ar, "0"));
	/* MB of the weights read next that each GEMV launch asks L2 to prefetch; off
	 * by default: 16 and 32 measured 3-9% slower on an H100 (docs/perf-notes.md) */
	const int64_t mb = env_i64("QC_CUDA_L2_PREFETCH", 0);
	e->l2_bytes = mb > 0 && mb < 1024 ? mb << 20 : 0;
	const char *fn = getenv("QC_CUDA_FUSE_NORM");
	e->fuse_norm = !(fn && !strcmp(fn, "0"));
	/* tensor parallelism: small all-reduces peer to peer (off: NCCL for all) */
	const char *tp = getenv("QC_CUDA_TP_P2P");
	e->tp_p2p = tp && !strcmp(tp, "1");
	/* tensor parallelism: where NCCL is (read here, loaded by backend_cuda_nccl.c) */
	e->nccl_lib = getenv("QC_NCCL_LIB");
}
