/* backend_cuda_upload.c — the bundle's tensor bytes to the device as one region,
 * by UPLOADERS threads at once (load rate printed).
 *
 * Why threads: one thread copying the mapped file into a pinned buffer moved
 * 5-7 GB/s on the H100 machine (page-cache reads and page faults, one core),
 * below the PCIe / host link and below what the load-time XXH3 check, running
 * beside it on other cores, reaches (docs/perf-notes.md). Chunk k of the region goes to
 * thread k % UPLOADERS, which owns two pinned buffers and a stream: while one
 * buffer's copy to the device is in flight it fills the other.
 * Non-goals: the hashing (formats/bundle_verify.c), what the bytes mean
 * (backend_cuda_weights.c).
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backend_cuda_int.h"

#define UPLOADERS 4
#define STAGE_BYTES ((size_t)32 << 20) /* each of a thread's two pinned buffers */

struct uploader {
	const uint8_t *src; /* the region on the host (the mapping) */
	uint8_t *dst;       /* the region on the device */
	uint64_t n;
	int id, device;
	int rc;
	struct qc_err err;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *upload_chunks(void *arg)
{
	struct uploader *u = arg;
	uint8_t *stage[2] = {NULL, NULL};
	cudaEvent_t done[2] = {NULL, NULL};
	cudaStream_t st = NULL;
	struct qc_err *err = &u->err;
	int rc;
	if ((rc = qc_cuda_be_ck(cudaSetDevice(u->device), "cudaSetDevice", err)) ||
	    (rc = qc_cuda_be_ck(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate", err)))
		goto out;
	for (int i = 0; i < 2; i++)
		if ((rc = qc_cuda_be_ck(cudaMallocHost((void **)&stage[i], STAGE_BYTES), "cudaMallocHost", err)) ||
		    (rc = qc_cuda_be_ck(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming), "cudaEventCreate", err)))
			goto out;
	int k = 0; /* chunks this thread has sent */
	for (uint64_t off = (uint64_t)u->id * STAGE_BYTES; off < u->n; off += (uint64_t)UPLOADERS * STAGE_BYTES, k++) {
		const size_t len = u->n - off < STAGE_BYTES ? (size_t)(u->n - off) : STAGE_BYTES;
		const int s = k % 2;
		if (k >= 2 && (rc = qc_cuda_be_ck(cudaEventSynchronize(done[s]), "cudaEventSynchronize", err)))
			goto out;
		memcpy(stage[s], u->src + off, len);
		if ((rc = qc_cuda_be_ck(cudaMemcpyAsync(u->dst + off, stage[s], len, cudaMemcpyHostToDevice, st),
					"cudaMemcpyAsync (weights)", err)) ||
		    (rc = qc_cuda_be_ck(cudaEventRecord(done[s], st), "cudaEventRecord", err)))
			goto out;
	}
	rc = st ? qc_cuda_be_ck(cudaStreamSynchronize(st), "cudaStreamSynchronize (weights)", err) : QC_OK;
out:
	if (st && rc)
		cudaStreamSynchronize(st); /* no copy may still read a buffer freed below */
	for (int i = 0; i < 2; i++) {
		if (done[i])
			cudaEventDestroy(done[i]);
		if (stage[i])
			cudaFreeHost(stage[i]);
	}
	if (st)
		cudaStreamDestroy(st);
	u->rc = rc;
	return NULL;
}

int qc_cuda_be_upload_file(struct cu *c, struct qc_err *err)
{
	const struct qc_bundle *b = c->m->bundle;
	void *d;
	int rc;
	c->file_lo = c->m->data_lo; /* the model's tensors: a tensor-parallel rank's own members */
	c->file_hi = c->m->data_hi;
	if (c->file_lo > c->file_hi || c->file_hi > b->size)
		return qc_err_set(err, QC_EINVAL, b->path, NULL, -1, "tensor range [%llu, %llu) outside the file",
				  (unsigned long long)c->file_lo, (unsigned long long)c->file_hi);
	const uint64_t n = c->file_hi - c->file_lo;
	if ((rc = qc_cuda_be_dalloc(c, n + QC_CUDA_MM_PAD, &d, err))) /* the matmuls' 16-byte loads may pass the end */
		return rc;
	c->d_file = d;
	int device = 0;
	if ((rc = qc_cuda_be_ck(cudaGetDevice(&device), "cudaGetDevice", err)))
		return rc;
	const double t0 = now_s();
	struct uploader u[UPLOADERS];
	pthread_t th[UPLOADERS];
	int started = 0;
	for (int i = 0; i < UPLOADERS; i++) {
		u[i] = (struct uploader){.src = b->map + c->file_lo, .dst = d, .n = n, .id = i, .device = device};
		if (pthread_create(&th[i], NULL, upload_chunks, &u[i]))
			break;
		started++;
	}
	/* a thread that did not start leaves its chunks unsent: this one sends them */
	for (int i = started; i < UPLOADERS; i++)
		upload_chunks(&u[i]);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	if (started < UPLOADERS)
		cudaSetDevice(device);
	for (int i = 0; i < UPLOADERS; i++)
		if (u[i].rc) {
			if (err)
				*err = u[i].err;
			return u[i].rc;
		}
	const double dt = now_s() - t0;
	char who[64] = ""; /* a tensor-parallel rank says which it is */
	if (c->p.tp)
		snprintf(who, sizeof who, ", rank %d of %d on device %d", c->p.tp_rank, qc_tp_group_size(c->p.tp),
			 device);
	fprintf(stderr, "cuda: weights %.3f GB to the device in %.3f s (%.2f GB/s, %d threads%s)\n", (double)n / 1e9,
		dt, dt > 0 ? (double)n / 1e9 / dt : 0.0, UPLOADERS, who);
	return QC_OK;
}
