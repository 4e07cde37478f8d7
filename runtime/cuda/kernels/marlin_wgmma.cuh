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
/* Pipeline stages of the kernel (4, loaded 2 ahead; or 6, loaded 4 ahead),
 * warpgroups per block (1: 64 tokens, each warp all 8 n8 tiles of its stripe;
 * 2: 128 tokens, each warpgroup half of them) and the form: 0, the weights decoded
 * into registers by the warpgroups that multiply (marlin_wgmma.cu); 1, a producer
 * warpgroup decoding into shared memory for two that multiply (marlin_wgmma_ws.cu;
 * "warpgroups" then names the tokens a block: 64 or 128). */
void wg_tune(int stages, int warpgroups, int form);
/* The form wg_tune set (0 or 1). */
int wg_form_now(void);
/* Tokens a block for m tokens: form 0, 64 per warpgroup (the tuned count, or one
 * where 128-token blocks would waste more tokens than 64-token ones); form 1, 128
 * or 256 by the same rule. */
int wg_block_tokens(int64_t m);
/* Output columns a block: form 0, 4 stripes; form 1, 128. */
int wg_block_cols(int bits);
/* Blocks of (bits, offsets, tokens a block) one SM holds; raises the kernel's
 * shared-memory limit. */
int wg_occupancy(int bits, bool zp, int tokens, int *per_sm, struct qc_err *err);
/* Launch over grid (m blocks of `tokens`, n blocks of wg_block_cols, K splits). */
int wg_launch(int bits, bool zp, int tokens, const kparams &p, const c_parts &cp, dim3 grid, cudaStream_t s,
	      struct qc_err *err);

/* marlin_wgmma_ws.cu's kernel (form 1): blocks an SM holds, and its launch; raw
 * stages as wg_tune's (fewer where shared memory says), 128 or 256 tokens a block. */
int ws_occupancy(int bits, bool zp, int stages, int tokens, int *per_sm, struct qc_err *err);
void ws_set_form2(int on); /* form 2: the consumers decode (marlin_ws2_kernel) where it fits */
int ws_launch(int bits, bool zp, int stages, int tokens, const kparams &p, const c_parts &cp, dim3 grid, cudaStream_t s,
	      struct qc_err *err);

} /* namespace qc_mrl */

#endif
