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
 * QC_CUDA_TP_P2P=1 adds, between the warm-up and the second agreement, the
 * one-shot peer-to-peer all-reduce (kernels/tp_allreduce.cu) for sums of at most
 * QC_CUDA_TP_P2P_BYTES: every rank allocates its staging buffers, flags and
 * epoch on its own GPU, the pointers and devices go through the slot, every
 * rank enables peer access to every other rank's GPU; if some pair has none,
 * rank 0 says so and every rank stays on NCCL; else the warm-up runs again
 * through it. NCCL's sum order may differ from the kernel's rank order, so the
 * two can differ in the last bit (greedy ids only at near-ties).
 * Non-goals: loading NCCL (backend_cuda_nccl.c), where the all-reduces sit in the
 * forward (backend_cuda.c).
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "backend_cuda_int.h"

_Static_assert(QC_TP_MAX == QC_CUDA_TP_P2P_RANKS, "the kernel's table holds every rank");

int qc_cuda_be_allreduce(struct cu *c, float *d, int64_t n, struct qc_err *err)
{
	if (c->p2p_on && n <= c->p2p.cap) {
		struct qc_cuda_tp_allreduce_args a = c->p2p;
		a.d = d;
		a.n = n;
		return qc_cuda_tp_allreduce(&a, c->st, err);
	}
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

/* What the ranks swap through the group's slot to set up the P2P all-reduce. */
struct p2p_boot {
	float *stage[QC_TP_MAX][2];  /* every rank's two staging buffers (device addresses) */
	uint32_t *flags[QC_TP_MAX];  /* and its flag array (QC_TP_MAX words, zeroed) */
	int32_t device[QC_TP_MAX];   /* its GPU */
	int32_t word[QC_TP_MAX];     /* 0 ready, -1 failed (its own error), 1 + q: no peer access to rank q's GPU */
};
_Static_assert(sizeof(struct p2p_boot) <= QC_TP_SLOT_BYTES, "the P2P boot data fits the group's slot");

/* This rank's peer access to every other rank's GPU: 0, 1 + q for the first rank
 * q it cannot reach (or that shares its GPU), -1 with err filled. */
static int p2p_reach(const struct cu *c, const struct p2p_boot *b, int size, int rank, struct qc_err *err)
{
	for (int q = 0; q < size; q++) {
		if (q == rank)
			continue;
		int can = 0;
		if (b->device[q] == c->p.device)
			return 1 + q;
		if (qc_cuda_be_ck(cudaDeviceCanAccessPeer(&can, c->p.device, b->device[q]), "cudaDeviceCanAccessPeer", err))
			return -1;
		if (!can)
			return 1 + q;
		cudaError_t e = cudaDeviceEnablePeerAccess(b->device[q], 0);
		if (e == cudaErrorPeerAccessAlreadyEnabled) { /* NCCL's own P2P transport may have enabled it */
			(void)cudaGetLastError();
			e = cudaSuccess;
		}
		if (qc_cuda_be_ck(e, "cudaDeviceEnablePeerAccess", err))
			return -1;
	}
	return 0;
}

/* Every rank at once, after NCCL's warm-up (rc: how this rank got there; c is
 * set, the first agreement passed) and before the second agreement: the slot is
 * free (qc_nccl_agree's last barrier is behind every rank) and free again on
 * return (three barriers, the same on every rank whatever happens). QC_OK with
 * c->p2p_on and the warm-up passed through the kernel, or QC_OK with NCCL for all
 * (some pair has no peer access, said by rank 0; or another rank failed: its
 * error reaches every rank through the second agreement), or rc / this rank's
 * error. */
static int p2p_start(struct cu *c, struct qc_tp_group *g, int size, int rank, int rc, struct qc_err *err)
{
	struct p2p_boot *b = qc_tp_group_slot(g);
	float *stage[2] = {NULL, NULL};
	uint32_t *flags = NULL, *epoch = NULL;
	if (!rc &&
	    (!(rc = qc_cuda_be_dalloc(c, QC_CUDA_TP_P2P_BYTES, (void **)&stage[0], err)) &&
	     !(rc = qc_cuda_be_dalloc(c, QC_CUDA_TP_P2P_BYTES, (void **)&stage[1], err)) &&
	     !(rc = qc_cuda_be_dalloc(c, QC_TP_MAX * sizeof(uint32_t), (void **)&flags, err)) &&
	     !(rc = qc_cuda_be_dalloc(c, sizeof(uint32_t), (void **)&epoch, err))))
		if (!(rc = qc_cuda_be_ck(cudaMemsetAsync(flags, 0, QC_TP_MAX * sizeof(uint32_t), c->st), "cudaMemsetAsync",
					 err)) &&
		    !(rc = qc_cuda_be_ck(cudaMemsetAsync(epoch, 0, sizeof(uint32_t), c->st), "cudaMemsetAsync", err)))
			rc = qc_cuda_be_ck(cudaStreamSynchronize(c->st), "cudaStreamSynchronize (P2P flags)", err);
	b->stage[rank][0] = stage[0];
	b->stage[rank][1] = stage[1];
	b->flags[rank] = flags;
	b->device[rank] = c->p.device;
	qc_tp_barrier(g); /* every rank's buffers and GPU published */
	int word = rc ? -1 : p2p_reach(c, b, size, rank, err);
	if (word < 0 && !rc)
		rc = QC_ECUDA;
	b->word[rank] = word;
	struct qc_cuda_tp_allreduce_args a = {.rank = rank, .n_ranks = size,
					      .cap = QC_CUDA_TP_P2P_BYTES / sizeof(float), .d_epoch = epoch};
	for (int q = 0; q < size; q++) {
		a.d_stage[q][0] = b->stage[q][0];
		a.d_stage[q][1] = b->stage[q][1];
		a.d_flags[q] = b->flags[q];
	}
	qc_tp_barrier(g); /* every rank's word written */
	int failed = -1, far = -1;
	for (int r = 0; r < size; r++) {
		if (b->word[r] < 0 && failed < 0)
			failed = r;
		if (b->word[r] > 0 && far < 0)
			far = r;
	}
	const int far_q = far >= 0 ? b->word[far] - 1 : -1;
	const int far_dev = far >= 0 ? b->device[far] : -1, far_qdev = far >= 0 ? b->device[far_q] : -1;
	qc_tp_barrier(g); /* every rank has read: the slot may be written again */
	if (rc || failed >= 0)
		return rc;
	if (far >= 0) {
		if (rank == 0)
			fprintf(stderr, "cuda: QC_CUDA_TP_P2P=1, but rank %d's GPU %d has no peer access to rank %d's "
				"GPU %d: every all-reduce stays on NCCL\n", far, far_dev, far_q, far_qdev);
		return QC_OK;
	}
	c->p2p = a;
	c->p2p_on = true;
	if (rank == 0)
		fprintf(stderr, "cuda: tensor-parallel all-reduces of up to %u KB peer to peer (QC_CUDA_TP_P2P=1), "
			"larger ones through NCCL\n", QC_CUDA_TP_P2P_BYTES >> 10);
	return warm_up(c, size, rank, err);
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
	if (c->env.tp_p2p) /* the same on every rank: one environment */
		rc = p2p_start(c, g, size, rank, rc, err);
	bad = qc_nccl_agree(g, rank, rc == QC_OK, &id);
	if (!rc && bad < 0)
		return QC_OK;
	/* c->p2p_on stays as it is (the same on every rank): every rank's destroy
	   (cuda_create's, at once) waits at tp_end's barrier before its cudaFree */
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
	if (c->p2p_on) /* every rank's stream is idle after this: its staging may go */
		qc_tp_barrier(c->p.tp);
	c->p2p_on = false;
	if (!c->comm)
		return;
	c->nccl->comm_destroy(c->comm);
	c->comm = NULL;
}
