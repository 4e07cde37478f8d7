/* backend_cuda_tp.c — one tensor-parallel rank of the CUDA backend: its NCCL
 * communicator and the all-reduce the forward sums partial rows with (docs/tp.md;
 * docs/cuda.md "Tensor parallelism").
 *
 * Owns: the rank's start-up (NCCL loaded, rank 0's unique id through the group's
 * slot, ncclCommInitRank on every rank's own thread at once, a warm-up all-reduce
 * whose sum is checked), the in-place all-reduce on c->st, and the end.
 * Start-up is all or nothing, in two agreements (qc_nccl_agree): each rank first
 * finishes its own create (weights, buffers, device) and says whether it did, so
 * a rank that failed never leaves the others blocked in ncclCommInitRank; after
 * the communicators and the warm-up, a second agreement, and on any failure every
 * rank that made a communicator aborts it (ncclCommAbort is an intra-node
 * collective: all of them are at that point together).
 * The warm-up also connects the peers (NCCL connects lazily, per algorithm) at
 * the largest size the forward reduces, outside any graph capture.
 * Non-goals: loading NCCL (backend_cuda_nccl.c), where the all-reduces sit in the
 * forward (backend_cuda.c).
 */
#include <cuda_runtime_api.h>
#include <string.h>

#include "backend_cuda_int.h"

int qc_cuda_be_allreduce(struct cu *c, float *d, int64_t n, struct qc_err *err)
{
	return qc_nccl_check(c->nccl,
			     c->nccl->all_reduce(d, d, (size_t)n, QC_NCCL_FLOAT32, QC_NCCL_SUM, c->comm, c->st),
			     "ncclAllReduce", c->comm, err);
}

/* Rank r puts r + 1 in d_x[0] and zeros in the rest of the forward's largest
 * reduction (max_tokens x n_embd floats); one all-reduce of 1 float, one of all
 * of them: every rank must then read size * S in d_x[0] (S = size (size + 1) / 2,
 * exact in floats) and 0 in d_x[1]. Leaves c->st idle. */
static int warm_up(struct cu *c, int size, int rank, struct qc_err *err)
{
	const int64_t n = (int64_t)c->p.max_tokens * c->m->cfg.n_embd;
	const float mine = (float)(rank + 1);
	float back[2] = {-1.0f, -1.0f};
	int rc;
	if ((rc = qc_cuda_be_ck(cudaMemsetAsync(c->d_x, 0, (size_t)n * sizeof(float), c->st), "cudaMemsetAsync", err)) ||
	    (rc = qc_cuda_be_ck(cudaMemcpyAsync(c->d_x, &mine, sizeof mine, cudaMemcpyHostToDevice, c->st),
				"cudaMemcpyAsync", err)) ||
	    (rc = qc_cuda_be_allreduce(c, c->d_x, 1, err)) || (rc = qc_cuda_be_allreduce(c, c->d_x, n, err)) ||
	    (rc = qc_cuda_be_ck(cudaMemcpyAsync(back, c->d_x, n > 1 ? sizeof back : sizeof back[0],
						cudaMemcpyDeviceToHost, c->st), "cudaMemcpyAsync", err)) ||
	    (rc = qc_cuda_be_ck(cudaStreamSynchronize(c->st), "cudaStreamSynchronize (NCCL warm-up)", err)))
		return rc;
	const float want = (float)size * (float)(size * (size + 1) / 2);
	if (back[0] != want || (n > 1 && back[1] != 0.0f))
		return qc_err_set(err, QC_ECUDA, NULL, NULL, -1,
				  "NCCL warm-up on rank %d of %d: the all-reduce gave %g and %g, want %g and 0", rank, size,
				  (double)back[0], (double)back[1], (double)want);
	return QC_OK;
}

int qc_cuda_be_tp_start(struct cu *c, const struct qc_backend_params *p, int rc, struct qc_err *err)
{
	struct qc_tp_group *g = p->tp;
	const int size = qc_tp_group_size(g), rank = p->tp_rank;
	const struct qc_nccl *n = NULL;
	struct qc_nccl_id id;
	QC_ASSERT(rank >= 0 && rank < size); /* backend_tp.c numbers its ranks */
	memset(&id, 0, sizeof id);
	if (!rc)
		rc = qc_nccl_load(c->env.nccl_lib, &n, err);
	if (!rc && rank == 0)
		rc = qc_nccl_check(n, n->get_unique_id(&id), "ncclGetUniqueId", NULL, err);
	int bad = qc_nccl_agree(g, rank, rc == QC_OK, &id);
	if (rc)
		return rc;
	if (bad >= 0)
		return qc_err_set(err, QC_ECUDA, NULL, NULL, -1,
				  "tensor parallel: rank %d of %d could not start, so rank %d stops too", bad, size, rank);
	c->nccl = n;
	qc_nccl_comm_t comm = NULL;
	/* every rank at once, each on its own thread with its device current (NCCL's rule) */
	rc = qc_nccl_check(n, n->comm_init_rank(&comm, size, id, rank), "ncclCommInitRank", NULL, err);
	if (!rc) {
		c->comm = comm;
		rc = warm_up(c, size, rank, err);
	}
	bad = qc_nccl_agree(g, rank, rc == QC_OK, &id);
	if (!rc && bad < 0)
		return QC_OK;
	if (c->comm) {
		cudaStreamSynchronize(c->st);
		n->comm_abort(c->comm);
		c->comm = NULL;
	}
	if (rc)
		return rc;
	return qc_err_set(err, QC_ECUDA, NULL, NULL, -1,
			  "tensor parallel: NCCL start-up failed on rank %d of %d, so rank %d stops too", bad, size, rank);
}

void qc_cuda_be_tp_end(struct cu *c)
{
	if (!c->comm)
		return;
	c->nccl->comm_destroy(c->comm);
	c->comm = NULL;
}
