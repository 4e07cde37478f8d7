/* topk.cu — per row, the k best logits (k <= 128) for a sampler whose chain
 * starts with top-k, so the step brings back k (id, logit) pairs instead of the
 * vocabulary.
 *
 * One block per row. The k-th largest value is found by a radix select on an
 * order-preserving 32-bit key (4 passes of 8-bit histograms over the row); the
 * elements above it are gathered, then the ties at it by lowest id (a
 * block-wide scan in id order), and the <= 128 candidates are ranked in shared
 * memory. Invariant: "larger value, then lower id" is a total order with -0 ==
 * +0 (the key maps both to one value), so the set and its order equal the
 * host's heap selection (runtime/engine/sampler.c). Reference: runtime/ops/topk.c.
 */
#include "topk.h"
#include "pdl.cuh"

#include <cuda_runtime.h>
#include <math.h>

#define THREADS 1024
#define WARPS (THREADS / 32)

/* float -> uint32 whose unsigned order is the float order, -0 mapped to +0 */
static __device__ __forceinline__ uint32_t fkey(float v)
{
	uint32_t u = __float_as_uint(v);
	if (u == 0x80000000u)
		u = 0;
	return u & 0x80000000u ? ~u : u | 0x80000000u;
}

static __device__ __forceinline__ bool better(float v, int32_t i, float w, int32_t j)
{
	return v > w || (v == w && i < j);
}

static __global__ void __launch_bounds__(THREADS) topk_kernel(const struct qc_cuda_topk_args a)
{
	qc_pdl_enter();
	__shared__ uint32_t hist[256];
	__shared__ uint32_t s_prefix, s_need;
	__shared__ int s_bad, s_any, s_cnt;
	__shared__ int32_t s_wsum[WARPS];
	__shared__ float cv[QC_CUDA_TOPK_MAX];
	__shared__ int32_t ci[QC_CUDA_TOPK_MAX];
	const int64_t row = blockIdx.x;
	int32_t m = a.d_k[row];
	if (m < 2)
		return; /* uniform: the whole block leaves */
	m = m < a.n ? m : a.n;
	m = m < a.stride ? m : a.stride;
	const float *x = a.d_x + row * a.n;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	if (tid == 0) {
		s_prefix = 0;
		s_need = (uint32_t)m;
		s_bad = 0;
		s_any = 0;
		s_cnt = 0;
	}
	/* radix select: after the pass of shift s, s_prefix holds the top bits of the
	   m-th largest key and s_need how many keys with that prefix are still wanted */
	uint32_t mask = 0;
	for (int shift = 24; shift >= 0; shift -= 8) {
		for (int b = tid; b < 256; b += THREADS)
			hist[b] = 0;
		__syncthreads();
		const uint32_t prefix = s_prefix;
		int bad = 0, any = 0;
		/* whole warps per chunk: lanes with one bin add once (logits of one row
		   share their top bits, so the first pass would serialize on a bin) */
		for (int32_t base = 0; base < a.n; base += THREADS) {
			const int32_t i = base + tid;
			uint32_t bin = 256; /* none */
			if (i < a.n) {
				const float v = x[i];
				if (shift == 24) {
					bad |= isnan(v) || v == INFINITY;
					any |= v > -INFINITY;
				}
				const uint32_t key = fkey(v);
				if ((key & mask) == prefix)
					bin = (key >> shift) & 255u;
			}
			const uint32_t same = __match_any_sync(0xffffffffu, bin);
			if (bin < 256 && lane == __ffs(same) - 1)
				atomicAdd(&hist[bin], (uint32_t)__popc(same));
		}
		if (shift == 24) {
			if (__any_sync(0xffffffffu, bad) && lane == 0)
				atomicOr(&s_bad, 1);
			if (__any_sync(0xffffffffu, any) && lane == 0)
				atomicOr(&s_any, 1);
		}
		__syncthreads();
		if (tid == 0) {
			uint32_t need = s_need, cum = 0;
			for (int b = 255; b >= 0; b--) {
				if (cum + hist[b] >= need) {
					s_prefix = prefix | (uint32_t)b << shift;
					s_need = need - cum;
					break;
				}
				cum += hist[b];
			}
		}
		mask |= 255u << shift;
		__syncthreads();
	}
	int32_t *ids = a.d_ids + row * a.stride;
	float *vals = a.d_vals + row * a.stride;
	if (s_bad || !s_any) {
		if (tid == 0)
			ids[0] = -1;
		return;
	}
	const uint32_t thr = s_prefix;
	const int32_t need = (int32_t)s_need, above = m - need;
	/* every key above the threshold (fewer than m of them) */
	for (int32_t i = tid; i < a.n; i += THREADS) {
		const float v = x[i];
		if (fkey(v) > thr) {
			const int slot = atomicAdd(&s_cnt, 1);
			if (slot < above) {
				cv[slot] = v;
				ci[slot] = i;
			}
		}
	}
	/* the ties at the threshold, lowest ids first: chunks of THREADS ids in order */
	int32_t taken = 0;
	for (int32_t base = 0; base < a.n && taken < need; base += THREADS) {
		const int32_t i = base + tid;
		const bool eq = i < a.n && fkey(x[i]) == thr;
		const uint32_t bal = __ballot_sync(0xffffffffu, eq);
		if (lane == 0)
			s_wsum[warp] = __popc(bal);
		__syncthreads();
		int32_t before = 0, total = 0;
		for (int w = 0; w < WARPS; w++) {
			before += w < warp ? s_wsum[w] : 0;
			total += s_wsum[w];
		}
		const int32_t rank = taken + before + __popc(bal & ((1u << lane) - 1u));
		if (eq && rank < need) {
			cv[above + rank] = x[i];
			ci[above + rank] = i;
		}
		taken += total;
		__syncthreads(); /* s_wsum is rewritten by the next chunk */
	}
	__syncthreads();
	/* rank the m candidates: position = how many beat it */
	if (tid < m) {
		const float v = cv[tid];
		const int32_t id = ci[tid];
		int r = 0;
		for (int j = 0; j < m; j++)
			r += better(cv[j], ci[j], v, id);
		ids[r] = id;
		vals[r] = v;
	}
}

extern "C" int qc_cuda_topk(const struct qc_cuda_topk_args *a, cudaStream_t s, struct qc_err *err)
{
	if (a->n_rows < 0 || a->n_rows > INT32_MAX || a->n < 1 || a->stride < 1 || a->stride > QC_CUDA_TOPK_MAX)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "topk: %lld rows of %d, stride %d",
				  (long long)a->n_rows, a->n, a->stride);
	if (!a->n_rows)
		return QC_OK;
	(void)qc_launch(topk_kernel, dim3((unsigned)a->n_rows), dim3(THREADS), 0, s, *a);
	return qc_cuda_check(cudaGetLastError(), "topk_kernel", err);
}
