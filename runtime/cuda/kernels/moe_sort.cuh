/* moe_sort.cuh — the row sort the grouped MoE GEMMs share (moe_sort.cu): activation
 * rows ordered by expert, on the device, with no host synchronization (graph-
 * capturable although the row -> expert map exists only there).
 *   1. hist: per chunk of QC_MOE_SORT_CHUNK rows, rows per expert;
 *   2. scan (one block, a thread per expert): each expert's first sorted position,
 *      each chunk's first position within the expert, and the tile list (expert,
 *      first sorted row) of tile_rows-row tiles that never mix experts;
 *   3. scatter: a stable placement (rank among the chunk's earlier rows of the same
 *      expert), so the sorted order, and every result, is the same run to run.
 * The sort is the vLLM/SGLang fused-MoE idea (moe_align_block_size: tokens sorted
 * by expert, padded to the tile height); the code is ours.
 * Users: moe_gemm.cu (ggml experts, 64-row tiles) and marlin_moe.cu (marlin experts
 * on the Hopper GEMM, its block's tokens a tile).
 */
#ifndef QC_MOE_SORT_CUH
#define QC_MOE_SORT_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "matmul_dispatch.h"

#define QC_MOE_SORT_CHUNK 256       /* rows per sort chunk: threads of hist and scatter */
#define QC_MOE_SORT_MAX_EXPERTS 1024 /* scan: one thread per expert */

/* The sort's arrays in the scratch (int32 each). */
struct qc_moe_sort {
	int32_t *hist;    /* (n_chunks, nx) rows of expert e in chunk c; after the scan: the
			     sorted position of the chunk's first row of e */
	int32_t *sorted;  /* (n_rows) row ids by expert, stable */
	int32_t *off;     /* (nx + 1) first sorted position of each expert; off[nx]: valid rows */
	int32_t *tiles;   /* (max_tiles, 2) expert, first sorted position */
	int32_t *n_tiles; /* (1) tiles in use */
	int32_t nx, n_chunks, max_tiles, tile_rows;
};

/* Tiles of tile_rows rows the sort may list for n_rows rows over nx experts: each
 * expert wastes at most one partial tile, and at most n_rows experts have rows. */
int64_t qc_moe_sort_max_tiles(int64_t n_rows, int64_t nx, int tile_rows);

/* Scratch bytes of the sort (its arrays at base, 256-byte aligned sections); base
 * NULL: the size only. */
uint64_t qc_moe_sort_carve(int64_t n_rows, int64_t nx, int tile_rows, uint8_t *base, struct qc_moe_sort *v);

/* Launches the three sort kernels on s for the rows of a (a->d_expert, NULL: every
 * row expert 0; a->n_rows >= 1). A row whose expert is outside [0, nx) gets NaN in
 * its a->n_out outputs at a->d_y and takes no further part. QC_ECUDA on a launch
 * failure. */
int qc_moe_sort_run(const struct qc_cuda_mm_args *a, const struct qc_moe_sort *v, cudaStream_t s,
		    struct qc_err *err);

#endif
