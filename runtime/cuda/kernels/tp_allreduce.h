/* tp_allreduce.h — entry point of tp_allreduce.cu: the one-shot peer-to-peer
 * all-reduce of a tensor-parallel rank (QC_CUDA_TP_P2P=1; docs/cuda.md "Tensor
 * parallelism"). The backend (backend_cuda_tp.c) allocates the buffers, enables
 * peer access and hands every rank the same table of peer pointers.
 */
#ifndef QC_CUDA_TP_ALLREDUCE_H
#define QC_CUDA_TP_ALLREDUCE_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QC_CUDA_TP_P2P_RANKS 8              /* most ranks (tp_group.h's QC_TP_MAX) */
#define QC_CUDA_TP_P2P_BYTES (256u << 10)   /* one staging buffer; larger sums go to NCCL */
#define QC_CUDA_TP_P2P_TIMEOUT_NS 20000000000ull /* a barrier waiting longer traps (a peer gone) */

struct qc_cuda_tp_allreduce_args {
	float *d;                  /* (n) this rank's partial in, the rank-order sum out */
	int64_t n;                 /* floats, at most cap */
	int rank, n_ranks;         /* this rank, ranks of the group (1..QC_CUDA_TP_P2P_RANKS) */
	int64_t cap;               /* floats per staging buffer (every rank's the same) */
	/* device addresses of every rank's buffers (peer access enabled both ways):
	   two staging buffers (cap floats each, used by epoch parity) and a flag array
	   (n_ranks words: flags[q] = the last epoch rank q signalled here) */
	float *d_stage[QC_CUDA_TP_P2P_RANKS][2];
	uint32_t *d_flags[QC_CUDA_TP_P2P_RANKS];
	uint32_t *d_epoch;         /* this rank's own counter (one word): all-reduces so far */
};

/* d[i] = sum over ranks 0..n_ranks-1 of each rank's d[i], added in rank order
 * (qc_ref_tp_sum), the same bits on every rank; one block on s. Every rank must
 * issue the same sequence of calls (sizes may differ between calls, not between
 * ranks). QC_EINVAL for a bad rank, size or a missing buffer; n == 0 launches
 * nothing. A peer that does not arrive within QC_CUDA_TP_P2P_TIMEOUT_NS makes
 * the kernel print the rank and epoch and trap (an error on s, not a hang). */
int qc_cuda_tp_allreduce(const struct qc_cuda_tp_allreduce_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
