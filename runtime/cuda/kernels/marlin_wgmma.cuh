/* marlin_wgmma.cuh — the Hopper (sm_90a) variant of the marlin GEMM, for
 * marlin_gemm.cu's planner: whether this device runs it, blocks per SM, and the
 * launch over the same kernel arguments (kparams), 64 or 128 tokens a block, K
 * splits as planned there. Kernel and the operand mapping: marlin_wgmma.cu.
 */
#ifndef QC_MARLIN_WGMMA_CUH
#define QC_MARLIN_WGMMA_CUH

#include "qc_cuda.h"
#include "marlin_gemm_frag.cuh"

namespace qc_mrl {

/* *yes: the current device is compute capability 9.0 (the sm_90a kernels run). */
int wg_supported(bool *yes, struct qc_err *err);
/* Pipeline stages of the kernel (4, loaded 2 ahead; or 6, loaded 4 ahead) and
 * warpgroups per block (1: 64 tokens, each warp all 8 n8 tiles of its stripe;
 * 2: 128 tokens, each warpgroup half of them). */
void wg_tune(int stages, int warpgroups);
/* Warpgroups a block for m tokens (64 tokens each): the tuned count, or 1 where
 * 128-token blocks would waste more tokens than 64-token ones. */
int wg_groups_for(int64_t m);
/* Blocks of (bits, offsets, warpgroups) one SM holds; raises the kernel's
 * shared-memory limit. */
int wg_occupancy(int bits, bool zp, int wgs, int *per_sm, struct qc_err *err);
/* Launch over grid (m blocks of 64·wgs tokens, n blocks of 4 stripes, K splits). */
int wg_launch(int bits, bool zp, int wgs, const kparams &p, dim3 grid, cudaStream_t s, struct qc_err *err);

} /* namespace qc_mrl */

#endif
