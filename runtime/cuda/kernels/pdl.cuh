/* pdl.cuh — programmatic dependent launch (Hopper, sm_90+): the next kernel of a
 * decode step is launched, and runs its independent prologue (its weight loads),
 * while the previous one drains, instead of waiting for its last block to exit.
 *
 * Why: a decode step is hundreds of small kernels; inside a CUDA graph each still
 * costs its launch plus the tail of the kernel before it (docs/perf-notes.md).
 * Contract for a kernel launched through qc_launch: it calls qc_pdl_trigger()
 * (lets the next kernel be scheduled; safe anywhere, it publishes nothing) and
 * qc_pdl_wait() before its first access to memory an earlier kernel of the
 * stream writes or reads (activations, the K/V pool, scratch, counters): the wait
 * returns when every earlier grid has completed and its writes are visible. Only
 * read-only data (weights, scales) may be touched before it. Without the launch
 * attribute (qc_cuda_pdl_set(0), pre-Hopper devices) both are no-ops and the
 * launch is the plain stream-ordered one.
 * Non-goals: kernels that are not ours (cuBLAS) keep plain launches; a PDL launch
 * after them waits for their completion as stream order says.
 */
#ifndef QC_CUDA_PDL_CUH
#define QC_CUDA_PDL_CUH

#include <cuda_runtime.h>
#include <utility>

#include "pdl.h"

static __device__ __forceinline__ void qc_pdl_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

static __device__ __forceinline__ void qc_pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Both, for kernels whose every memory access depends on earlier kernels. */
static __device__ __forceinline__ void qc_pdl_enter()
{
	qc_pdl_trigger();
	qc_pdl_wait();
}

/* The launch both helpers below make: the programmatic-serialization attribute
 * while qc_cuda_pdl_on(), and a cluster of *cluster blocks when cluster != NULL. */
template <typename... P, typename... A>
static inline cudaError_t qc_launch_with(void (*kernel)(P...), dim3 grid, const dim3 *cluster, dim3 block, size_t smem,
					 cudaStream_t s, A &&...args)
{
	cudaLaunchAttribute at[2];
	unsigned n = 0;
	if (cluster) {
		at[n].id = cudaLaunchAttributeClusterDimension;
		at[n].val.clusterDim.x = cluster->x;
		at[n].val.clusterDim.y = cluster->y;
		at[n].val.clusterDim.z = cluster->z;
		n++;
	}
	if (qc_cuda_pdl_on()) {
		at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		at[n].val.programmaticStreamSerializationAllowed = 1;
		n++;
	}
	cudaLaunchConfig_t cfg = {};
	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = s;
	cfg.attrs = at;
	cfg.numAttrs = n;
	return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

/* kernel<<<grid, block, smem, s>>>(args...), with the programmatic-serialization
 * attribute while qc_cuda_pdl_on(). Returns the launch's error (then also in
 * cudaGetLastError, as for <<<>>>). */
template <typename... P, typename... A>
static inline cudaError_t qc_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
				    A &&...args)
{
	return qc_launch_with(kernel, grid, nullptr, block, smem, s, std::forward<A>(args)...);
}

/* The same with a thread-block cluster of cluster_dim blocks (sm_90+; grid a
 * multiple of it in each dimension). */
template <typename... P, typename... A>
static inline cudaError_t qc_launch_cluster(void (*kernel)(P...), dim3 grid, dim3 cluster_dim, dim3 block,
					    size_t smem, cudaStream_t s, A &&...args)
{
	return qc_launch_with(kernel, grid, &cluster_dim, block, smem, s, std::forward<A>(args)...);
}

#endif
