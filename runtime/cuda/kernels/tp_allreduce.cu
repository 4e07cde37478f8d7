/* tp_allreduce.cu — the one-shot peer-to-peer all-reduce of small messages
 * (QC_CUDA_TP_P2P=1): one block per rank copies its partial into its own staging
 * buffer, signals every peer, waits for every peer's signal, then reads all the
 * ranks' staging buffers over NVLink and sums them in rank order into d.
 * Reference: runtime/ops/tp_sum.c (qc_ref_tp_sum); the CPU backend's
 * qc_tp_allreduce_f32 adds in the same order, so every rank gets the same bits.
 *
 * Why it is safe with two staging buffers and one barrier per call:
 * - Epochs: each rank counts its calls in its own device word (e = ++epoch), so
 *   graph replays and eager calls keep counting; every rank issues the same
 *   sequence of all-reduces, so equal epochs are the same call everywhere.
 * - Barrier: rank r writes d into stage[r][e & 1], makes it visible system-wide
 *   (__syncthreads, then thread 0's __threadfence_system and a release store),
 *   stores e into flags[q][r] of every peer q, then waits until its own
 *   flags[r][q] >= e for every q (acquire loads). After that, every peer's
 *   stage[q][e & 1] holds its epoch-e data.
 * - Reuse: rank q writes stage[q][e & 1] again only at epoch e + 2. It gets there
 *   only after passing the barrier of e + 1, which needs rank r's e + 1 signal,
 *   which r gives only in its epoch e + 1 kernel, which starts after r's epoch-e
 *   kernel (stream order) finished reading stage[q][e & 1]. So no buffer is
 *   overwritten while a peer still reads it; the e + 1 writes go to the other
 *   buffer, which nobody reads at epoch e.
 * - Flags compare as >= (wrapping): a peer may already be one epoch ahead (it
 *   passed epoch e, wrote e + 1 here) while this rank still waits for e; it
 *   cannot be two ahead (its e + 1 barrier needs this rank's e + 1 signal).
 * - Reads of peer buffers bypass L1 (ld.cv): no line cached at an earlier epoch
 *   is ever used.
 * A peer that never arrives (a rank that failed, a mismatched call sequence)
 * makes thread 0 print the rank, peer and epoch after QC_CUDA_TP_P2P_TIMEOUT_NS
 * and trap: an error on the stream instead of a hang.
 * Non-goals: large messages (NCCL, bandwidth-bound), more than one block (one
 * block is what the latency-bound sizes under QC_CUDA_TP_P2P_BYTES want, and it
 * makes the barrier one thread's work).
 */
#include "tp_allreduce.h"
#include "pdl.cuh"

#include <cuda_runtime.h>
#include <stdio.h>

#define THREADS 1024

static __device__ __forceinline__ void st_release_sys(uint32_t *p, uint32_t v)
{
	asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

static __device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t *p)
{
	uint32_t v;
	asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

static __device__ __forceinline__ uint64_t now_ns()
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

static __global__ void __launch_bounds__(THREADS) tp_allreduce_kernel(const struct qc_cuda_tp_allreduce_args a)
{
	__shared__ uint32_t s_e;
	__shared__ const float *s_src[QC_CUDA_TP_P2P_RANKS];
	qc_pdl_enter(); /* d is the previous kernel's output */
	if (threadIdx.x == 0) {
		const uint32_t e = *a.d_epoch + 1; /* only this rank's stream touches it */
		*a.d_epoch = e;
		s_e = e;
	}
	__syncthreads();
	const uint32_t e = s_e;
	const int par = (int)(e & 1u);
	if ((int)threadIdx.x < a.n_ranks)
		s_src[threadIdx.x] = a.d_stage[threadIdx.x][par];
	const bool vec = (a.n & 3) == 0 && ((uintptr_t)a.d & 15) == 0; /* stage buffers are cudaMalloc-aligned */
	float *mine = a.d_stage[a.rank][par];
	if (vec) {
		const float4 *x = (const float4 *)a.d;
		float4 *y = (float4 *)mine;
		for (int64_t i = threadIdx.x; i < a.n / 4; i += THREADS)
			y[i] = x[i];
	} else {
		for (int64_t i = threadIdx.x; i < a.n; i += THREADS)
			mine[i] = a.d[i];
	}
	__syncthreads(); /* every thread's copy is in before thread 0 publishes it */
	if (threadIdx.x == 0) {
		__threadfence_system();
		for (int q = 0; q < a.n_ranks; q++)
			if (q != a.rank)
				st_release_sys(a.d_flags[q] + a.rank, e);
		const uint32_t *f = a.d_flags[a.rank];
		const uint64_t t0 = now_ns();
		for (int q = 0; q < a.n_ranks; q++) {
			if (q == a.rank)
				continue;
			for (uint32_t polls = 1; (int32_t)(ld_acquire_sys(f + q) - e) < 0; polls++)
				if (!(polls & 1023u) && now_ns() - t0 > QC_CUDA_TP_P2P_TIMEOUT_NS) {
					printf("qc tp_allreduce: rank %d of %d waited %.0f s for rank %d at epoch %u "
					       "(it signalled %u): trap\n", a.rank, a.n_ranks,
					       (double)QC_CUDA_TP_P2P_TIMEOUT_NS * 1e-9, q, e, ld_acquire_sys(f + q));
					__trap();
				}
		}
	}
	__syncthreads(); /* thread 0 saw every peer's epoch-e data published */
	const int nr = a.n_ranks;
	if (vec) {
		float4 *y = (float4 *)a.d;
		for (int64_t i = threadIdx.x; i < a.n / 4; i += THREADS) {
			float4 s = __ldcv((const float4 *)s_src[0] + i);
			for (int r = 1; r < nr; r++) {
				const float4 v = __ldcv((const float4 *)s_src[r] + i);
				s.x += v.x;
				s.y += v.y;
				s.z += v.z;
				s.w += v.w;
			}
			y[i] = s;
		}
	} else {
		for (int64_t i = threadIdx.x; i < a.n; i += THREADS) {
			float s = __ldcv(s_src[0] + i);
			for (int r = 1; r < nr; r++)
				s += __ldcv(s_src[r] + i);
			a.d[i] = s;
		}
	}
}

extern "C" int qc_cuda_tp_allreduce(const struct qc_cuda_tp_allreduce_args *a, cudaStream_t s, struct qc_err *err)
{
	bool bufs = a->d_epoch != NULL && a->n_ranks >= 1 && a->n_ranks <= QC_CUDA_TP_P2P_RANKS;
	for (int q = 0; bufs && q < a->n_ranks; q++)
		bufs = a->d_stage[q][0] && a->d_stage[q][1] && a->d_flags[q];
	if (!bufs || a->rank < 0 || a->rank >= a->n_ranks || a->n < 0 || a->n > a->cap || (a->n && !a->d))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "tp_allreduce: rank %d of %d, %lld floats (staging %lld)%s", a->rank, a->n_ranks,
				  (long long)a->n, (long long)a->cap, bufs ? "" : ", a buffer missing");
	if (!a->n || a->n_ranks == 1) /* the sum of one rank is its own d */
		return QC_OK;
	(void)qc_launch(tp_allreduce_kernel, dim3(1), dim3(THREADS), 0, s, *a);
	return qc_cuda_check(cudaGetLastError(), "tp_allreduce_kernel", err);
}
