/* test_tp.c — tensor parallelism on CUDA (docs/tp.md, docs/cuda.md "Tensor parallelism").
 *
 * (a) NCCL as the backend uses it (runtime/cuda/backend_cuda_nccl.c): loaded at
 *     run time ($QC_NCCL_LIB or the loader's search), its ABI values against
 *     nccl.h where that header exists; one rank on GPU 0, then every visible GPU
 *     (at most 8; the multi-rank part is skipped, saying so, below 2), one thread
 *     per rank with the backend's start-up agreement (qc_nccl_agree): in-place
 *     all-reduces of 7 and 2^20 + 3 random floats must equal the double sum within
 *     its rounding bound and be the same bits on every rank (the replicated router
 *     and norms rely on that), and an all-reduce captured into a CUDA graph
 *     between two programmatic-dependent-launch kernels (add.cu, with PDL on where
 *     the GPU has it) must give its exact integer sums on two replays.
 * (a') The one-shot peer-to-peer all-reduce (kernels/tp_allreduce.cu, what
 *     QC_CUDA_TP_P2P=1 takes for small sums) on every visible GPU (at most 8) and
 *     on 2 (skipped, saying so, below 2 GPUs or without peer access), one thread
 *     per rank with peer access on: 200 calls queued back to back in turn of 7,
 *     4096, the staging cap, 1, 4099, 33 and 4100 floats (both staging buffers,
 *     many epochs, aligned and one-off regions), then 7, 4096 and cap floats
 *     captured into a CUDA graph and replayed 3 times on fresh inputs: every
 *     value must equal the host's rank-order float sum bit for bit on every rank,
 *     the NaN guards after each region must stay NaN, the staging buffers start
 *     NaN (a read of data no rank wrote shows), and with 3+ ranks the reverse
 *     order must differ somewhere (the inputs tell the order apart).
 * (b) The embedding with a vocabulary range (kernels/embed.cu) against
 *     qc_ref_embed on random rows of several types, ids on both sides of the
 *     range and its edges, output poisoned with NaN: bit for bit; the reference
 *     itself checked against a direct decode (rows in range) and +0.0 (others);
 *     a range of 0 rows refused.
 * (c) End to end through the programs ($QC_BIN/qconvert, qrun), when qrun lists
 *     --tp (backend_tp.c merged; else said and skipped): each model of $QC_GPU_GEN
 *     and a few fixtures converted plain and with --tp 2 (and --tp N for N GPUs
 *     above 2; sm90 layouts too), greedy 16 tokens with qrun --json on cuda plain,
 *     --tp 1 (the plain bundle through the rank path), --tp N and --tp 2 with
 *     QC_CUDA_TP_P2P=1 (qrun must say it took it), against the CPU
 *     backend's run of the same prompt ids in process (float activations): equal
 *     up to the first step where the CPU's top-2 margin is below test_e2e's fp16
 *     bound (a near-tie). Models the converter cannot split are named and skipped;
 *     at least one dense and one MoE model must have run at --tp 2.
 */
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <pthread.h>

#include "kernels_harness.h"
#include "logit_margin.h"

#include "backend.h"
#include "backend_cuda_nccl.h"
#include "engine.h"
#include "kernels/add.h"
#include "kernels/embed.h"
#include "kernels/pdl.h"
#include "kernels/tp_allreduce.h"
#include "model.h"

#if defined(__has_include)
#if __has_include(<nccl.h>)
#include <nccl.h>
/* the types backend_cuda_nccl.h declares itself, as this NCCL's header has them */
_Static_assert(sizeof(ncclUniqueId) == sizeof(struct qc_nccl_id), "ncclUniqueId size");
_Static_assert(ncclFloat32 == QC_NCCL_FLOAT32, "ncclFloat32");
_Static_assert(ncclSum == QC_NCCL_SUM, "ncclSum");
_Static_assert(ncclSuccess == 0, "ncclSuccess");
_Static_assert(sizeof(ncclDataType_t) == sizeof(int) && sizeof(ncclResult_t) == sizeof(int), "enums are ints");
#define TP_HAVE_NCCL_H 1
#endif
#endif
#ifndef TP_HAVE_NCCL_H
#define TP_HAVE_NCCL_H 0
#endif

int check_passed_, check_failed_;
uint64_t rng = 0x2545f4914f6cdd1dull;
bool quick;

/* ---- (a) NCCL on device buffers ------------------------------------------------ */

#define SMALL_N 7
#define LARGE_N ((1 << 20) + 3)
#define GRAPH_N 4099

struct rank_arg {
	struct qc_tp_group *g;
	const struct qc_nccl *n;
	int rank, size;
	const float *h_in;      /* (size, SMALL_N + LARGE_N): every rank's input */
	float *h_out;           /* (size, SMALL_N + LARGE_N): what each rank read back */
	float graph_got[2];     /* the graph check's value after each replay (min over the buffer) */
	float graph_max[2];     /* and the max: both must be the exact sum */
	int fail_line;          /* 0, or the line of the first failed step */
	char msg[QC_ERR_MSG_MAX + 128];
};

#define STEP(a, ok, ...) \
	do { \
		if (!(a)->fail_line && !(ok)) { \
			(a)->fail_line = __LINE__; \
			snprintf((a)->msg, sizeof (a)->msg, __VA_ARGS__); \
		} \
	} while (0)

static void *rank_main(void *p)
{
	struct rank_arg *a = p;
	const struct qc_nccl *n = a->n;
	struct qc_err err = {0};
	cudaStream_t st = NULL;
	qc_nccl_comm_t comm = NULL;
	float *d = NULL, *d_y = NULL, *d_x = NULL;
	struct qc_nccl_id id;
	memset(&id, 0, sizeof id);
	const size_t per = SMALL_N + LARGE_N;

	STEP(a, cudaSetDevice(a->rank) == cudaSuccess, "cudaSetDevice(%d)", a->rank);
	STEP(a, cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess, "stream");
	if (a->rank == 0)
		STEP(a, qc_nccl_check(n, n->get_unique_id(&id), "ncclGetUniqueId", NULL, &err) == QC_OK, "%s", err.msg);
	/* the backend's start-up: everyone's word, rank 0's id to all */
	const int bad = qc_nccl_agree(a->g, a->rank, !a->fail_line, &id);
	if (bad >= 0) {
		STEP(a, 0, "rank %d failed before ncclCommInitRank", bad);
		goto out;
	}
	STEP(a, qc_nccl_check(n, n->comm_init_rank(&comm, a->size, id, a->rank), "ncclCommInitRank", NULL, &err) == QC_OK,
	     "%s", err.msg);
	if (a->fail_line)
		goto out; /* the others may hang in init: the test reports this one */
	STEP(a, cudaMalloc((void **)&d, per * sizeof(float)) == cudaSuccess, "cudaMalloc");
	if (!a->fail_line) {
		cudaMemcpy(d, a->h_in + (size_t)a->rank * per, per * sizeof(float), cudaMemcpyHostToDevice);
		STEP(a, qc_nccl_check(n, n->all_reduce(d, d, SMALL_N, QC_NCCL_FLOAT32, QC_NCCL_SUM, comm, st),
				      "ncclAllReduce", comm, &err) == QC_OK, "%s", err.msg);
		STEP(a, qc_nccl_check(n, n->all_reduce(d + SMALL_N, d + SMALL_N, LARGE_N, QC_NCCL_FLOAT32, QC_NCCL_SUM,
						       comm, st), "ncclAllReduce", comm, &err) == QC_OK, "%s", err.msg);
		STEP(a, cudaStreamSynchronize(st) == cudaSuccess, "sync: %s", cudaGetErrorString(cudaGetLastError()));
		cudaMemcpy(a->h_out + (size_t)a->rank * per, d, per * sizeof(float), cudaMemcpyDeviceToHost);
	}
	/* a graph: y += x (PDL launch), all-reduce y, y += x (PDL launch), all-reduce y;
	   y = rank + 1 and x = 1 everywhere: exact integers, y ends at
	   size * (size * (size + 1) / 2 + size + 1) */
	STEP(a, cudaMalloc((void **)&d_y, GRAPH_N * sizeof(float)) == cudaSuccess, "cudaMalloc");
	STEP(a, cudaMalloc((void **)&d_x, GRAPH_N * sizeof(float)) == cudaSuccess, "cudaMalloc");
	float *h = malloc(GRAPH_N * sizeof(float));
	cudaGraph_t graph = NULL;
	cudaGraphExec_t exec = NULL;
	if (!a->fail_line && h) {
		const struct qc_cuda_add_args add = {d_y, d_x, GRAPH_N, GRAPH_N};
		STEP(a, cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "begin capture");
		const int r1 = qc_cuda_add(&add, st, &err);
		const int r2 = qc_nccl_check(n, n->all_reduce(d_y, d_y, GRAPH_N, QC_NCCL_FLOAT32, QC_NCCL_SUM, comm, st),
					     "ncclAllReduce (captured)", comm, &err);
		const int r3 = qc_cuda_add(&add, st, &err);
		const int r4 = qc_nccl_check(n, n->all_reduce(d_y, d_y, GRAPH_N, QC_NCCL_FLOAT32, QC_NCCL_SUM, comm, st),
					     "ncclAllReduce (captured)", comm, &err);
		const cudaError_t ce = cudaStreamEndCapture(st, &graph);
		STEP(a, !r1 && !r2 && !r3 && !r4 && ce == cudaSuccess, "capture: %s / %s", err.msg, cudaGetErrorString(ce));
		STEP(a, !a->fail_line && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");
		for (int rep = 0; rep < 2 && !a->fail_line; rep++) {
			for (int i = 0; i < GRAPH_N; i++)
				h[i] = (float)(a->rank + 1);
			cudaMemcpyAsync(d_y, h, GRAPH_N * sizeof(float), cudaMemcpyHostToDevice, st);
			for (int i = 0; i < GRAPH_N; i++)
				h[i] = 1.0f;
			cudaMemcpyAsync(d_x, h, GRAPH_N * sizeof(float), cudaMemcpyHostToDevice, st);
			cudaStreamSynchronize(st); /* h is reused below */
			STEP(a, cudaGraphLaunch(exec, st) == cudaSuccess, "graph launch");
			STEP(a, cudaStreamSynchronize(st) == cudaSuccess, "graph run: %s",
			     cudaGetErrorString(cudaGetLastError()));
			cudaMemcpy(h, d_y, GRAPH_N * sizeof(float), cudaMemcpyDeviceToHost);
			float lo = h[0], hi = h[0];
			for (int i = 1; i < GRAPH_N; i++) {
				lo = h[i] < lo ? h[i] : lo;
				hi = h[i] > hi ? h[i] : hi;
			}
			a->graph_got[rep] = lo;
			a->graph_max[rep] = hi;
		}
	}
	if (exec)
		cudaGraphExecDestroy(exec);
	if (graph)
		cudaGraphDestroy(graph);
	free(h);
out:
	if (st)
		cudaStreamSynchronize(st);
	if (comm)
		n->comm_destroy(comm); /* every rank at once: an intra-node collective */
	cudaFree(d);
	cudaFree(d_y);
	cudaFree(d_x);
	if (st)
		cudaStreamDestroy(st);
	return NULL;
}

static void nccl_ranks(const struct qc_nccl *n, int size)
{
	const size_t per = SMALL_N + LARGE_N;
	float *in = malloc(sizeof(float) * per * (size_t)size), *out = malloc(sizeof(float) * per * (size_t)size);
	struct qc_tp_group *g = NULL;
	struct qc_err err = {0};
	if (!in || !out || qc_tp_group_new(size, &g, &err)) {
		CHECK(0, "setup for %d ranks: %s", size, err.msg);
		goto done;
	}
	fill(in, per * (size_t)size, -2.0f, 2.0f);
	for (size_t i = 0; i < per * (size_t)size; i++)
		out[i] = NAN;
	struct rank_arg a[QC_TP_MAX];
	pthread_t th[QC_TP_MAX];
	for (int r = 0; r < size; r++) {
		a[r] = (struct rank_arg){.g = g, .n = n, .rank = r, .size = size, .h_in = in, .h_out = out};
		if (pthread_create(&th[r], NULL, rank_main, &a[r])) {
			CHECK(0, "thread %d", r); /* the others would wait for it: stop here */
			abort();
		}
	}
	for (int r = 0; r < size; r++)
		pthread_join(th[r], NULL);
	int failed = 0;
	for (int r = 0; r < size; r++) {
		CHECK(!a[r].fail_line, "%d ranks, rank %d: line %d: %s", size, r, a[r].fail_line, a[r].msg);
		failed |= a[r].fail_line != 0;
	}
	if (failed)
		goto done;
	/* the sums against double, within n * eps * sum |x|; every rank the same bits */
	long worst_i = -1, differ = 0;
	double worst = 0;
	for (size_t i = 0; i < per; i++) {
		double s = 0, s_abs = 0;
		for (int r = 0; r < size; r++) {
			s += in[(size_t)r * per + i];
			s_abs += fabs(in[(size_t)r * per + i]);
		}
		const double got = out[i], tol = (double)size * 0x1p-24 * s_abs;
		const double e = fabs(got - s) / (tol > 0 ? tol : 1);
		if (!(e <= 1.0) && worst_i < 0)
			worst_i = (long)i;
		worst = e > worst ? e : worst;
		for (int r = 1; r < size; r++)
			differ += memcmp(&out[(size_t)r * per + i], &out[i], sizeof(float)) != 0;
	}
	printf("  %d rank(s): all-reduce of %d and %d floats: worst error %.3g of its bound, %ld element(s) "
	       "differ between ranks\n", size, SMALL_N, LARGE_N, worst, differ);
	CHECK(worst_i < 0, "%d ranks: element %ld off its double sum by more than the rounding bound", size, worst_i);
	CHECK(differ == 0, "%d ranks: %ld element(s) not the same bits on every rank", size, differ);
	const float want = (float)size * ((float)(size * (size + 1) / 2) + (float)size + 1.0f);
	for (int r = 0; r < size; r++)
		for (int rep = 0; rep < 2; rep++)
			CHECK(a[r].graph_got[rep] == want && a[r].graph_max[rep] == want,
			      "%d ranks, rank %d, replay %d: graph with PDL kernels around the all-reduce gave %g..%g, "
			      "want %g", size, r, rep, (double)a[r].graph_got[rep], (double)a[r].graph_max[rep],
			      (double)want);
	printf("  %d rank(s): all-reduce captured between PDL kernels (PDL %s): %g on two replays\n", size,
	       qc_cuda_pdl_on() ? "on" : "off", (double)a[0].graph_got[1]);
done:
	qc_tp_group_free(g);
	free(in);
	free(out);
}

static void test_nccl(int n_dev)
{
	const struct qc_nccl *n = NULL;
	struct qc_err err = {0};
	printf("NCCL (%s):\n", TP_HAVE_NCCL_H ? "ABI values checked against nccl.h" : "no nccl.h: ABI values unchecked");
	const int rc = qc_nccl_load(getenv("QC_NCCL_LIB"), &n, &err);
	CHECK(rc == QC_OK, "load NCCL: %s", err.msg);
	if (rc)
		return;
	const char *nv = getenv("NCCL_NVLS_ENABLE");
	CHECK(nv != NULL, "NCCL_NVLS_ENABLE not set by the loader");
	/* PDL as the backend sets it: on where the GPU has it (compute capability 9+) */
	int major = 0;
	cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
	qc_cuda_pdl_set(major >= 9);
	nccl_ranks(n, 1);
	const int size = n_dev < QC_TP_MAX ? n_dev : QC_TP_MAX;
	if (size < 2) {
		printf("  SKIP multi-rank NCCL: %d GPU visible (needs 2 or more)\n", n_dev);
	} else {
		nccl_ranks(n, size);
		if (size > 2)
			nccl_ranks(n, 2);
	}
	qc_cuda_pdl_set(0);
}

/* ---- (a') the one-shot peer-to-peer all-reduce (kernels/tp_allreduce.cu) ---------- */

#define P2P_CALLS 200
#define P2P_GUARD 4              /* NaN floats after each call's region: must stay NaN */
#define P2P_GRAPH 3              /* calls captured into the graph: 7, 4096, cap floats */
#define P2P_REPLAYS 3
#define P2P_CAP ((int64_t)(QC_CUDA_TP_P2P_BYTES / sizeof(float)))

/* The calls' sizes in turn (parity and epoch both move; the cap is the largest
 * a staging buffer takes) and where each region starts: 16-byte aligned (the
 * kernel's float4 path) except every third, one float off (its scalar path). */
static const int64_t p2p_sizes[] = {7, 4096, P2P_CAP, 1, 4099, 33, 4096 + 4};

static int64_t p2p_size(int c)
{
	return c < P2P_CALLS ? p2p_sizes[c % (int)(sizeof p2p_sizes / sizeof p2p_sizes[0])]
			     : (int64_t[]){7, 4096, P2P_CAP}[(c - P2P_CALLS) % P2P_GRAPH];
}

/* offsets of calls 0 .. P2P_CALLS + P2P_GRAPH - 1 and the total, in floats */
static int64_t p2p_layout(int64_t *off)
{
	int64_t at = 0;
	for (int c = 0; c < P2P_CALLS + P2P_GRAPH; c++) {
		at = (at + 3) / 4 * 4 + (c % 3 == 2);
		off[c] = at;
		at += p2p_size(c) + P2P_GUARD;
	}
	return at;
}

struct p2p_table {                /* what the ranks publish to each other (host memory) */
	float *stage[QC_TP_MAX][2];
	uint32_t *flags[QC_TP_MAX];
};

struct p2p_arg {
	struct qc_tp_group *g;
	struct p2p_table *t;
	int rank, size;
	int64_t total;
	const int64_t *off;
	const float *h_in;          /* (total) this rank's inputs; guards NaN */
	float *h_eager, *h_graph;   /* (total) the eager calls' results; (P2P_REPLAYS, total) the graph's */
	int fail_line;
	char msg[QC_ERR_MSG_MAX + 128];
};

static void *p2p_rank_main(void *p)
{
	struct p2p_arg *a = p;
	struct qc_err err = {0};
	cudaStream_t st = NULL;
	float *d = NULL, *stage[2] = {NULL, NULL};
	uint32_t *flags = NULL, *epoch = NULL;
	cudaGraph_t graph = NULL;
	cudaGraphExec_t exec = NULL;
	const size_t bytes = (size_t)a->total * sizeof(float);

	STEP(a, cudaSetDevice(a->rank) == cudaSuccess, "cudaSetDevice(%d)", a->rank);
	STEP(a, cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess, "stream");
	STEP(a, cudaMalloc((void **)&d, bytes) == cudaSuccess && cudaMalloc((void **)&stage[0], QC_CUDA_TP_P2P_BYTES) ==
		cudaSuccess && cudaMalloc((void **)&stage[1], QC_CUDA_TP_P2P_BYTES) == cudaSuccess &&
		cudaMalloc((void **)&flags, QC_TP_MAX * sizeof(uint32_t)) == cudaSuccess &&
		cudaMalloc((void **)&epoch, sizeof(uint32_t)) == cudaSuccess, "cudaMalloc");
	if (!a->fail_line) { /* staging poisoned: a read of a buffer no rank wrote shows as NaN */
		cudaMemset(stage[0], 0xff, QC_CUDA_TP_P2P_BYTES);
		cudaMemset(stage[1], 0xff, QC_CUDA_TP_P2P_BYTES);
		cudaMemset(flags, 0, QC_TP_MAX * sizeof(uint32_t));
		cudaMemset(epoch, 0, sizeof(uint32_t));
		STEP(a, cudaDeviceSynchronize() == cudaSuccess, "memset");
	}
	a->t->stage[a->rank][0] = stage[0];
	a->t->stage[a->rank][1] = stage[1];
	a->t->flags[a->rank] = flags;
	for (int q = 0; q < a->size; q++) {
		if (q == a->rank)
			continue;
		cudaError_t e = cudaDeviceEnablePeerAccess(q, 0);
		if (e == cudaErrorPeerAccessAlreadyEnabled) {
			(void)cudaGetLastError();
			e = cudaSuccess;
		}
		STEP(a, e == cudaSuccess, "cudaDeviceEnablePeerAccess(%d): %s", q, cudaGetErrorString(e));
	}
	qc_tp_barrier(a->g); /* every rank's buffers published and its peer access on */
	struct qc_cuda_tp_allreduce_args ar = {.rank = a->rank, .n_ranks = a->size, .cap = P2P_CAP, .d_epoch = epoch};
	bool all = true;
	for (int q = 0; q < a->size; q++) {
		ar.d_stage[q][0] = a->t->stage[q][0];
		ar.d_stage[q][1] = a->t->stage[q][1];
		ar.d_flags[q] = a->t->flags[q];
		all &= ar.d_stage[q][0] && ar.d_stage[q][1] && ar.d_flags[q];
	}
	qc_tp_barrier(a->g); /* every rank has read the table */
	STEP(a, all, "a rank has no buffers: it failed before the barrier");
	if (a->fail_line)
		goto out; /* every rank saw the same table: all stop here */
	/* eager: 200 calls queued back to back, one synchronization */
	STEP(a, cudaMemcpyAsync(d, a->h_in, bytes, cudaMemcpyHostToDevice, st) == cudaSuccess, "upload");
	for (int c = 0; c < P2P_CALLS && !a->fail_line; c++) {
		ar.d = d + a->off[c];
		ar.n = p2p_size(c);
		STEP(a, qc_cuda_tp_allreduce(&ar, st, &err) == QC_OK, "call %d: %s", c, err.msg);
	}
	STEP(a, cudaStreamSynchronize(st) == cudaSuccess, "eager calls: %s", cudaGetErrorString(cudaGetLastError()));
	STEP(a, cudaMemcpy(a->h_eager, d, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "download");
	if (a->fail_line)
		goto out; /* a trapped kernel leaves nothing usable */
	/* a graph of 7, 4096 and cap floats, replayed P2P_REPLAYS times on fresh inputs */
	STEP(a, cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "begin capture");
	int rc = QC_OK;
	for (int c = P2P_CALLS; c < P2P_CALLS + P2P_GRAPH && !rc; c++) {
		ar.d = d + a->off[c];
		ar.n = p2p_size(c);
		rc = qc_cuda_tp_allreduce(&ar, st, &err);
	}
	const cudaError_t ce = cudaStreamEndCapture(st, &graph);
	STEP(a, !rc && ce == cudaSuccess, "capture: %s / %s", err.msg, cudaGetErrorString(ce));
	STEP(a, !a->fail_line && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");
	for (int rep = 0; rep < P2P_REPLAYS && !a->fail_line; rep++) {
		STEP(a, cudaMemcpyAsync(d, a->h_in, bytes, cudaMemcpyHostToDevice, st) == cudaSuccess, "upload");
		STEP(a, cudaGraphLaunch(exec, st) == cudaSuccess, "graph launch");
		STEP(a, cudaStreamSynchronize(st) == cudaSuccess, "replay %d: %s", rep,
		     cudaGetErrorString(cudaGetLastError()));
		STEP(a, cudaMemcpy(a->h_graph + (size_t)rep * (size_t)a->total, d, bytes, cudaMemcpyDeviceToHost) ==
			cudaSuccess, "download");
	}
out:
	/* nobody frees its staging while a peer may still read it */
	if (st)
		cudaStreamSynchronize(st);
	qc_tp_barrier(a->g);
	if (exec)
		cudaGraphExecDestroy(exec);
	if (graph)
		cudaGraphDestroy(graph);
	cudaFree(d);
	cudaFree(stage[0]);
	cudaFree(stage[1]);
	cudaFree(flags);
	cudaFree(epoch);
	if (st)
		cudaStreamDestroy(st);
	return NULL;
}

/* Each call's region of got against the rank-order sum of the ranks' inputs,
 * bit for bit, guards still NaN; calls [c0, c1). Counts into *bad / *guard. */
static void p2p_compare(const float *const *in, int size, const float *got, const int64_t *off, int c0, int c1,
			long *bad, long *guard, long *reverse)
{
	for (int c = c0; c < c1; c++) {
		const int64_t n = p2p_size(c);
		for (int64_t i = 0; i < n; i++) {
			const size_t at = (size_t)(off[c] + i);
			float want = in[0][at], rev = in[size - 1][at];
			for (int r = 1; r < size; r++) {
				want += in[r][at];
				rev += in[size - 1 - r][at];
			}
			*bad += memcmp(&got[at], &want, sizeof want) != 0;
			*reverse += memcmp(&rev, &want, sizeof want) != 0;
		}
		for (int64_t i = 0; i < P2P_GUARD; i++)
			*guard += !isnan(got[off[c] + n + i]);
	}
}

static void p2p_ranks(int size)
{
	int64_t off[P2P_CALLS + P2P_GRAPH];
	const int64_t total = p2p_layout(off);
	struct qc_tp_group *g = NULL;
	struct qc_err err = {0};
	struct p2p_table t;
	struct p2p_arg a[QC_TP_MAX];
	float *in[QC_TP_MAX] = {0}, *eager[QC_TP_MAX] = {0}, *graph[QC_TP_MAX] = {0};
	memset(&t, 0, sizeof t);
	bool ok = qc_tp_group_new(size, &g, &err) == QC_OK;
	for (int r = 0; r < size && ok; r++) {
		in[r] = malloc(sizeof(float) * (size_t)total);
		eager[r] = malloc(sizeof(float) * (size_t)total);
		graph[r] = malloc(sizeof(float) * (size_t)total * P2P_REPLAYS);
		ok = in[r] && eager[r] && graph[r];
		for (int64_t i = 0; ok && i < total; i++) /* magnitudes 2^-8 .. 2^12: the order shows */
			in[r][i] = ldexpf(frand(1.0f, 2.0f), (int)(rnd() % 21) - 8) * (rnd() & 1 ? -1.0f : 1.0f);
		for (int c = 0; ok && c < P2P_CALLS + P2P_GRAPH; c++)
			for (int64_t i = 0; i < P2P_GUARD; i++)
				in[r][off[c] + p2p_size(c) + i] = NAN;
	}
	CHECK(ok, "setup for %d ranks: %s", size, err.msg);
	if (!ok)
		goto done;
	pthread_t th[QC_TP_MAX];
	for (int r = 0; r < size; r++) {
		a[r] = (struct p2p_arg){.g = g, .t = &t, .rank = r, .size = size, .total = total, .off = off,
					.h_in = in[r], .h_eager = eager[r], .h_graph = graph[r]};
		if (pthread_create(&th[r], NULL, p2p_rank_main, &a[r])) {
			CHECK(0, "thread %d", r);
			abort();
		}
	}
	for (int r = 0; r < size; r++)
		pthread_join(th[r], NULL);
	int failed = 0;
	for (int r = 0; r < size; r++) {
		CHECK(!a[r].fail_line, "P2P %d ranks, rank %d: line %d: %s", size, r, a[r].fail_line, a[r].msg);
		failed |= a[r].fail_line != 0;
	}
	if (failed)
		goto done;
	long bad = 0, guard = 0, reverse = 0, apart = 0, gbad = 0, gguard = 0, grev = 0;
	for (int r = 0; r < size; r++) {
		p2p_compare((const float *const *)in, size, eager[r], off, 0, P2P_CALLS, &bad, &guard, &reverse);
		for (int rep = 0; rep < P2P_REPLAYS; rep++)
			p2p_compare((const float *const *)in, size, graph[r] + (size_t)rep * (size_t)total, off, P2P_CALLS,
				    P2P_CALLS + P2P_GRAPH, &gbad, &gguard, &grev);
		for (int c = 0; c < P2P_CALLS; c++)
			for (int64_t i = 0; i < p2p_size(c); i++)
				apart += memcmp(&eager[r][off[c] + i], &eager[0][off[c] + i], sizeof(float)) != 0;
	}
	printf("  %d ranks: %d P2P all-reduces (7 .. %lld floats) and a graph of %d replayed %d times: %ld and %ld "
	       "value(s) off the rank-order sum, %ld guard(s) written, %ld differ between ranks (%ld differ in "
	       "reverse order)\n", size, P2P_CALLS, (long long)P2P_CAP, P2P_GRAPH, P2P_REPLAYS, bad, gbad,
	       guard + gguard, apart, reverse / size);
	CHECK(bad == 0 && gbad == 0, "P2P %d ranks: %ld eager and %ld graph value(s) differ from the rank-order sum",
	      size, bad, gbad);
	CHECK(guard == 0 && gguard == 0, "P2P %d ranks: %ld guard float(s) past a call's n written", size,
	      guard + gguard);
	CHECK(apart == 0, "P2P %d ranks: %ld value(s) not the same bits on every rank", size, apart);
	if (size >= 3)
		CHECK(reverse > 0, "P2P %d ranks: the inputs do not tell the summation order apart", size);
done:
	for (int r = 0; r < size; r++) {
		free(in[r]);
		free(eager[r]);
		free(graph[r]);
	}
	qc_tp_group_free(g);
}

static void test_p2p(int n_dev)
{
	const int size = n_dev < QC_TP_MAX ? n_dev : QC_TP_MAX;
	printf("peer-to-peer all-reduce (tp_allreduce.cu, QC_CUDA_TP_P2P=1's kernel):\n");
	if (size < 2) {
		printf("  SKIP: %d GPU visible (needs 2 or more)\n", n_dev);
		return;
	}
	for (int i = 0; i < size; i++)
		for (int j = 0; j < size; j++) {
			int can = 0;
			if (i != j && (cudaDeviceCanAccessPeer(&can, i, j) != cudaSuccess || !can)) {
				printf("  SKIP: GPU %d has no peer access to GPU %d\n", i, j);
				return;
			}
		}
	p2p_ranks(size);
	if (size > 2)
		p2p_ranks(2);
}

/* ---- (b) embedding with a vocabulary range --------------------------------------- */

static void embed_range(enum qc_type t)
{
	const struct qc_type_traits *tt = &qc_types[t];
	const int64_t be = tt->block_elems < 32 ? 32 : tt->block_elems;
	const int64_t n = tt->block_elems == 1 ? 172 : 3 * be; /* 172: a plain row's short last chunk */
	const int64_t vocab0 = 37, n_rows = 29, n_vocab_all = 100, n_tok = 40;
	const uint64_t rb = (uint64_t)(n / tt->block_elems) * (uint64_t)tt->block_bytes;
	uint8_t *w = malloc(rb * (size_t)n_rows);
	int32_t ids[40];
	float *want = malloc(sizeof(float) * (size_t)(n * n_tok)), *got = malloc(sizeof(float) * (size_t)(n * n_tok));
	float *row = malloc(sizeof(float) * (size_t)n);
	rand_blocks(t, w, n * n_rows);
	/* the edges of the range and the vocabulary, then random ids of both kinds */
	const int32_t edges[] = {0, 36, 37, 38, 64, 65, 66, 99};
	for (int i = 0; i < n_tok; i++)
		ids[i] = i < 8 ? edges[i] : (int32_t)(rnd() % n_vocab_all);
	qc_ref_embed(w, t, rb, n, ids, n_tok, vocab0, n_rows, want);
	/* the reference against a direct decode: rows in range, +0.0 elsewhere */
	int ref_bad = 0, n_in = 0;
	for (int i = 0; i < n_tok; i++) {
		const bool in = ids[i] >= vocab0 && ids[i] < vocab0 + n_rows;
		n_in += in;
		if (in)
			tt->dequant_row(w + (uint64_t)(ids[i] - vocab0) * rb, row, n);
		for (int64_t k = 0; k < n; k++) {
			const float v = want[i * n + k];
			ref_bad += in ? memcmp(&v, &row[k], sizeof v) != 0 : (v != 0.0f || signbit(v));
		}
	}
	CHECK(ref_bad == 0 && n_in > 2 && n_in < n_tok - 2, "qc_ref_embed %s: %d wrong values (%d ids in range)",
	      tt->name, ref_bad, n_in);
	uint8_t *d_w = up(w, rb * (size_t)n_rows);
	int32_t *d_ids = up(ids, sizeof ids);
	float *d_out = poisoned(sizeof(float) * (size_t)(n * n_tok));
	struct qc_err err = {0};
	struct qc_cuda_embed_args ea = {d_w, t, rb, n, d_ids, n_tok, d_out, vocab0, n_rows};
	CHECK(qc_cuda_embed(&ea, 0, &err) == QC_OK, "embed %s: %s", tt->name, err.msg);
	down(got, d_out, sizeof(float) * (size_t)(n * n_tok));
	long first = -1;
	for (int64_t i = 0; i < n * n_tok && first < 0; i++)
		if (memcmp(&got[i], &want[i], sizeof(float)))
			first = (long)i;
	CHECK(first < 0, "embed %s, ids from %lld (%lld rows): first difference at %ld (token %ld): %g vs %g", tt->name,
	      (long long)vocab0, (long long)n_rows, first, first < 0 ? 0 : first / (long)n, first < 0 ? 0.0 : got[first],
	      first < 0 ? 0.0 : want[first]);
	printf("  %-44s %d of %lld ids in [%lld, %lld): bit-exact\n", tt->name, n_in, (long long)n_tok,
	       (long long)vocab0, (long long)(vocab0 + n_rows));
	ea.n_rows = 0;
	CHECK(qc_cuda_embed(&ea, 0, &err) == QC_EINVAL, "embed %s: a range of 0 rows accepted", tt->name);
	free(w);
	free(want);
	free(got);
	free(row);
	cudaFree(d_w);
	cudaFree(d_ids);
	cudaFree(d_out);
}

static void test_embed(void)
{
	printf("embedding of a vocabulary range (embed.cu vs qc_ref_embed):\n");
	const enum qc_type types[] = {QC_TYPE_F32, QC_TYPE_F16, QC_TYPE_BF16, QC_TYPE_Q8_0, QC_TYPE_Q4_0, QC_TYPE_Q4_K,
				      QC_TYPE_Q6_K};
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
		embed_range(types[i]);
}

/* ---- (c) end to end through qconvert and qrun ------------------------------------ */

#define N_GEN 16
#define FP16_REL 0x1p-7 /* test_e2e's bound: docs/cuda.md "The end-to-end bound, derived" */
#define MAX_IDS 256

static const char *qc_bin(void)
{
	const char *b = getenv("QC_BIN");
	return b && *b ? b : "build/bin";
}

/* argv[0] (a path) with argv; stdout to out_path, stderr to err_path. The exit
 * status, 128 + signal, or -1. */
static int run_to(const char *const *argv, const char *out_path, const char *err_path)
{
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	pid_t pid;
	int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)(uintptr_t)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc)
		return -1;
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The last line of a file (for messages), in buf. */
static const char *last_line(const char *path, char *buf, size_t len)
{
	char *s = check_read_file(path, NULL);
	buf[0] = '\0';
	if (s) {
		size_t l = strlen(s);
		while (l && (s[l - 1] == '\n' || s[l - 1] == '\r'))
			s[--l] = '\0';
		const char *p = strrchr(s, '\n');
		snprintf(buf, len, "%s", p ? p + 1 : s);
		free(s);
	}
	return buf;
}

/* The integers of the JSON array after "key": in s, into ids (at most MAX_IDS); -1 when absent. */
static int json_ids(const char *s, const char *key, int32_t *ids)
{
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\":[", key);
	const char *p = strstr(s, pat);
	if (!p)
		return -1;
	p += strlen(pat);
	int n = 0;
	while (*p && *p != ']' && n < MAX_IDS) {
		char *end;
		const long v = strtol(p, &end, 10);
		if (end == p)
			return -1;
		ids[n++] = (int32_t)v;
		p = end;
		if (*p == ',')
			p++;
	}
	return *p == ']' ? n : -1;
}

struct cpu_trace {
	int32_t ids[N_GEN];
	float margin[N_GEN], maxabs[N_GEN];
	int32_t n;
};

static void on_logits(void *ctx, uint64_t id, int32_t step, const float *lg, int32_t n_vocab)
{
	struct cpu_trace *tr = ctx;
	(void)id;
	if (step >= N_GEN)
		return;
	logit_margin(lg, n_vocab, &tr->margin[step], &tr->maxabs[step]);
}

/* Greedy N_GEN tokens of prompt on the CPU backend, float activations. */
static int cpu_run(const char *bundle, const int32_t *prompt, int n_prompt, struct cpu_trace *tr, struct qc_err *err)
{
	struct qc_engine_opts o;
	struct qc_engine *e = NULL;
	uint64_t id;
	int rc;
	qc_engine_opts_init(&o);
	o.backend = &qc_backend_cpu;
	o.act_round = QC_ACT_ROUND_NONE;
	o.max_running = 1;
	o.max_seq_tokens = 256;
	o.on_logits = on_logits;
	o.cb_ctx = tr;
	o.n_threads = 4;
	if ((rc = qc_engine_new(bundle, &o, &e, err)))
		return rc;
	struct qc_engine_request q = {.prompt = prompt, .n_prompt = n_prompt, .max_tokens = N_GEN, .ignore_eos = true};
	qc_sampler_params_init(&q.sampling);
	q.sampling.temperature = 0.0f;
	if (!(rc = qc_engine_add(e, &q, &id, err)))
		while (qc_engine_has_work(e) && !rc)
			rc = qc_engine_step(e, err);
	if (!rc) {
		const int32_t *ids;
		enum qc_sched_finish fin;
		qc_engine_output(e, id, &ids, &tr->n, &fin);
		memcpy(tr->ids, ids, sizeof(int32_t) * (size_t)(tr->n < N_GEN ? tr->n : N_GEN));
	}
	qc_engine_free(e);
	return rc;
}

/* A divergence at step k is allowed when the CPU's margin there is a near-tie. */
static bool near_tie(const struct cpu_trace *cpu, int k)
{
	return k >= N_GEN || cpu->margin[k] < FP16_REL * (1.0f + cpu->maxabs[k]);
}

static int first_diff(const int32_t *a, int na, const int32_t *b, int nb)
{
	for (int i = 0; i < N_GEN; i++)
		if (i >= na || i >= nb || a[i] != b[i])
			return i;
	return N_GEN;
}

/* qconvert in -> out (target, tp 0: plain). QC_OK, or the converter's status with its last line. */
static int convert(const char *in, const char *out, const char *target, int tp, const char *tmp, char *why, size_t len)
{
	char tps[16], ep[1200], op[1200], qc[1024];
	snprintf(tps, sizeof tps, "%d", tp);
	snprintf(qc, sizeof qc, "%s/qconvert", qc_bin());
	snprintf(ep, sizeof ep, "%s/convert.err", tmp);
	snprintf(op, sizeof op, "%s/convert.out", tmp);
	const char *argv[] = {qc, in, "--target", target, "-o", out, tp ? "--tp" : NULL, tps, NULL};
	const int rc = run_to(argv, op, ep);
	if (rc)
		last_line(ep, why, len);
	return rc;
}

/* qrun bundle on cuda (tp 0: no --tp); greedy N_GEN ids and the prompt's ids. */
static int qrun(const char *bundle, int tp, const char *tmp, int32_t *prompt, int *n_prompt, int32_t *ids, int *n_ids,
		char *why, size_t len)
{
	char tps[16], ep[1200], op[1200], qr[1024], ng[16];
	snprintf(tps, sizeof tps, "%d", tp);
	snprintf(ng, sizeof ng, "%d", N_GEN);
	snprintf(qr, sizeof qr, "%s/qrun", qc_bin());
	snprintf(ep, sizeof ep, "%s/qrun.err", tmp);
	snprintf(op, sizeof op, "%s/qrun.out", tmp);
	const char *argv[] = {qr, bundle, "-p", "Once upon a time, in a land far away, there lived a small dragon who "
			      "loved to read old books about the sea.", "-n", ng, "--ignore-eos", "--json", "--device", "cuda",
			      "--ctx", "256", "--kv-mem", "256", tp ? "--tp" : NULL, tps, NULL};
	const int rc = run_to(argv, op, ep);
	if (rc) {
		last_line(ep, why, len);
		return rc;
	}
	char *s = check_read_file(op, NULL);
	*n_prompt = s ? json_ids(s, "prompt_ids", prompt) : -1;
	*n_ids = s ? json_ids(s, "ids", ids) : -1;
	free(s);
	if (*n_prompt < 1 || *n_ids < 0) {
		snprintf(why, len, "no prompt_ids / ids in qrun's --json output");
		return -1;
	}
	return 0;
}

/* Whether qrun takes --tp (backend_tp.c is in this build). */
static bool qrun_has_tp(const char *tmp)
{
	char qr[1024], ep[1200], op[1200];
	snprintf(qr, sizeof qr, "%s/qrun", qc_bin());
	snprintf(ep, sizeof ep, "%s/help.err", tmp);
	snprintf(op, sizeof op, "%s/help.out", tmp);
	const char *argv[] = {qr, "--help", NULL};
	run_to(argv, op, ep);
	char *a = check_read_file(op, NULL), *b = check_read_file(ep, NULL);
	const bool has = (a && strstr(a, "--tp")) || (b && strstr(b, "--tp"));
	free(a);
	free(b);
	return has;
}

static int n_dense_tp2, n_moe_tp2;

/* One run against the CPU trace: the first difference must be at a near-tie. */
static void against_cpu(const char *label, const struct cpu_trace *cpu, const int32_t *ids, int n_ids)
{
	const int k = first_diff(cpu->ids, cpu->n, ids, n_ids);
	if (k == N_GEN)
		printf("    %-36s %d/%d equal to the cpu\n", label, N_GEN, N_GEN);
	else
		printf("    %-36s first difference at step %d: cpu margin %.4g, bound %.4g -> %s\n", label, k,
		       cpu->margin[k], FP16_REL * (1.0f + cpu->maxabs[k]), near_tie(cpu, k) ? "tolerated" : "FAIL");
	CHECK(near_tie(cpu, k), "%s: differs from the cpu at step %d with margin %.4g", label, k,
	      k < N_GEN ? cpu->margin[k] : 0.0);
}

/* The same --tp 2 run with QC_CUDA_TP_P2P=1: qrun must say it took the P2P
 * all-reduce (or which GPU pair has no peer access: then NCCL, said and
 * skipped), and its ids must meet the cpu's and the NCCL run's like any run
 * (NCCL's sum order may differ from the kernel's rank order: near-ties only). */
static void qrun_p2p(const char *name, const char *bundle, const char *label, const char *tmp, const int32_t *prompt,
		     int n_prompt, const struct cpu_trace *cpu, const int32_t *ids_nccl, int n_nccl)
{
	char why[512], lab[300], ep[1200];
	int32_t p2[MAX_IDS], ids[MAX_IDS];
	int n_p2 = 0, n_ids = 0;
	snprintf(lab, sizeof lab, "%s P2P", label);
	setenv("QC_CUDA_TP_P2P", "1", 1);
	const int rc = qrun(bundle, 2, tmp, p2, &n_p2, ids, &n_ids, why, sizeof why);
	unsetenv("QC_CUDA_TP_P2P");
	CHECK(rc == 0, "%s: qrun %s: %s", name, lab, why);
	if (rc)
		return;
	snprintf(ep, sizeof ep, "%s/qrun.err", tmp);
	char *e = check_read_file(ep, NULL);
	const bool on = e && strstr(e, "peer to peer (QC_CUDA_TP_P2P=1)"), none = e && strstr(e, "has no peer access");
	free(e);
	if (none) {
		printf("    %-36s skipped: no peer access between the GPUs (NCCL ran)\n", lab);
		return;
	}
	CHECK(on, "%s: %s: qrun did not say it took the P2P all-reduce", name, lab);
	CHECK(n_p2 == n_prompt && !memcmp(p2, prompt, sizeof(int32_t) * (size_t)n_prompt), "%s: %s: prompt ids differ",
	      name, lab);
	against_cpu(lab, cpu, ids, n_ids);
	const int k = first_diff(ids_nccl, n_nccl, ids, n_ids);
	CHECK(near_tie(cpu, k), "%s: %s differs from NCCL's at step %d (cpu margin %.4g)", name, lab, k,
	      k < N_GEN ? cpu->margin[k] : 0.0);
}

static void e2e_model(const char *dir, const char *name, const char *tmp, int n_dev)
{
	char in[1024], plain[1200], tpb[1200], why[512], label[256];
	int32_t prompt[MAX_IDS], ids[MAX_IDS], ids_tp1[MAX_IDS], p2[MAX_IDS];
	int n_prompt = 0, n_ids = 0, n_tp1 = 0, n_p2 = 0;
	struct qc_err err = {0};
	snprintf(in, sizeof in, "%s/%s", dir, name);
	snprintf(plain, sizeof plain, "%s/plain.qb", tmp);
	snprintf(tpb, sizeof tpb, "%s/tp.qb", tmp);
	printf("  %s\n", name);
	if (convert(in, plain, "cpu", 0, tmp, why, sizeof why)) {
		printf("    skipped: not convertible (%s)\n", why);
		return;
	}
	/* cuda plain: the prompt's ids come from here (qrun's tokenizer) */
	int rc = qrun(plain, 0, tmp, prompt, &n_prompt, ids, &n_ids, why, sizeof why);
	CHECK(rc == 0, "%s: qrun cuda: %s", name, why);
	if (rc)
		goto out;
	struct cpu_trace cpu = {0};
	rc = cpu_run(plain, prompt, n_prompt, &cpu, &err);
	CHECK(rc == QC_OK, "%s: cpu: %s", name, err.msg);
	if (rc)
		goto out;
	against_cpu("cuda", &cpu, ids, n_ids);
	rc = qrun(plain, 1, tmp, p2, &n_p2, ids_tp1, &n_tp1, why, sizeof why);
	CHECK(rc == 0, "%s: qrun --tp 1: %s", name, why);
	if (!rc) {
		CHECK(n_p2 == n_prompt && !memcmp(p2, prompt, sizeof(int32_t) * (size_t)n_prompt), "%s: prompt ids differ",
		      name);
		against_cpu("cuda --tp 1 (plain bundle)", &cpu, ids_tp1, n_tp1);
	}
	const int sizes[] = {2, n_dev > 2 ? (n_dev < QC_TP_MAX ? n_dev : QC_TP_MAX) : 0};
	const char *targets[] = {"cpu", "sm90"};
	for (size_t si = 0; si < 2; si++) {
		if (sizes[si] < 2 || sizes[si] > n_dev)
			continue;
		for (int ti = 0; ti < 2; ti++) {
			snprintf(label, sizeof label, "cuda --tp %d [%s bundle]", sizes[si], targets[ti]);
			if (convert(in, tpb, targets[ti], sizes[si], tmp, why, sizeof why)) {
				printf("    %-36s skipped: the converter refuses (%s)\n", label, why);
				continue;
			}
			rc = qrun(tpb, sizes[si], tmp, p2, &n_p2, ids, &n_ids, why, sizeof why);
			CHECK(rc == 0, "%s: qrun %s: %s", name, label, why);
			if (!rc && sizes[si] == 2)
				qrun_p2p(name, tpb, label, tmp, prompt, n_prompt, &cpu, ids, n_ids);
			unlink(tpb);
			if (rc)
				continue;
			CHECK(n_p2 == n_prompt && !memcmp(p2, prompt, sizeof(int32_t) * (size_t)n_prompt),
			      "%s: %s: prompt ids differ", name, label);
			against_cpu(label, &cpu, ids, n_ids);
			/* against --tp 1 as well: both differ from the cpu only after a near-tie */
			const int k = first_diff(ids_tp1, n_tp1, ids, n_ids);
			CHECK(near_tie(&cpu, k), "%s: %s differs from --tp 1 at step %d (cpu margin %.4g)", name, label, k,
			      k < N_GEN ? cpu.margin[k] : 0.0);
			if (sizes[si] == 2 && ti == 0) {
				struct qc_model *m = NULL;
				if (qc_model_open(plain, &m, &err) == QC_OK) {
					n_moe_tp2 += m->cfg.n_expert > 0;
					n_dense_tp2 += m->cfg.n_expert == 0;
				}
				qc_model_close(m);
			}
		}
	}
out:
	unlink(plain);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void test_e2e(int n_dev)
{
	char tmp[] = "/tmp/qc-gpu-tp-XXXXXX";
	if (n_dev < 2) {
		printf("end to end: SKIP: %d GPU visible (--tp 2 needs 2)\n", n_dev);
		return;
	}
	if (!mkdtemp(tmp)) {
		CHECK(0, "mkdtemp");
		return;
	}
	if (!qrun_has_tp(tmp)) {
		printf("end to end: SKIP: %s/qrun has no --tp (runtime/engine/backend_tp.c not in this build)\n", qc_bin());
		rmdir(tmp);
		return;
	}
	printf("end to end (greedy %d tokens; qrun --json on cuda: plain, --tp 1, --tp N; cpu in process):\n", N_GEN);
	const char *gen = getenv("QC_GPU_GEN");
	if (gen && *gen) {
		DIR *d = opendir(gen);
		struct dirent *de;
		char *names[64];
		int n = 0;
		while (d && (de = readdir(d)) && n < 64) {
			const size_t l = strlen(de->d_name);
			if (l > 5 && !strcmp(de->d_name + l - 5, ".gguf"))
				names[n++] = strdup(de->d_name);
		}
		if (d)
			closedir(d);
		qsort(names, (size_t)n, sizeof names[0], cmp_str);
		for (int i = 0; i < n; i++) {
			e2e_model(gen, names[i], tmp, n_dev);
			free(names[i]);
		}
	} else {
		printf("  (no $QC_GPU_GEN: tests/gpu/run.sh writes the mkgguf models there)\n");
	}
	char fq[1024];
	snprintf(fq, sizeof fq, "%s/gguf-quant", check_fixtures());
	const char *fx[] = {"tiny-llama-256-Q8_0.gguf", "tiny-llama-256-Q4_0.gguf", "tiny-moe-256-Q8_0.gguf",
			    "tiny-moe-256-Q4_0.gguf", "stories260K-F16.gguf"};
	for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
		char p[1200];
		snprintf(p, sizeof p, "%s/%s", fq, fx[i]);
		if (check_exists(p))
			e2e_model(fq, fx[i], tmp, n_dev);
		else
			printf("  %s: not found under %s\n", fx[i], fq);
	}
	CHECK(n_dense_tp2 >= 1 && n_moe_tp2 >= 1, "--tp 2 ran on %d dense and %d MoE models (want one of each at least)",
	      n_dense_tp2, n_moe_tp2);
	char p[1200];
	const char *junk[] = {"convert.err", "convert.out", "qrun.err", "qrun.out", "help.err", "help.out"};
	for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
		snprintf(p, sizeof p, "%s/%s", tmp, junk[i]);
		unlink(p);
	}
	rmdir(tmp);
}

int main(void)
{
	int n_dev = 0;
	if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1) {
		CHECK(0, "no CUDA device: test_tp needs one (make test-gpu runs on the GPU machine)");
		return check_report("test_tp");
	}
	/* the near-tie rule must refuse a divergence at a clear margin */
	{
		struct cpu_trace t = {0};
		t.margin[3] = 5.0f;
		t.maxabs[3] = 10.0f;
		CHECK(!near_tie(&t, 3), "a divergence at margin 5 passed");
		t.margin[3] = 1e-4f;
		CHECK(near_tie(&t, 3), "a divergence at margin 1e-4 failed");
	}
	printf("%d CUDA device(s)\n", n_dev);
	test_nccl(n_dev);
	test_p2p(n_dev);
	test_embed();
	test_e2e(n_dev);
	return check_report("test_tp");
}
