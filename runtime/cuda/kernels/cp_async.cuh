/* cp_async.cuh — Ampere+ asynchronous global -> shared copies (cp.async).
 *
 * Owns: the PTX wrappers the pipelined kernels share: a 16-byte copy
 * (zero-filled when !ok: src is then not read), an 8-byte one, commit of the
 * copies issued so far as one group, and a wait until at most N groups are
 * pending. A thread's
 * copies are visible to the other threads of its warp (block) only after its
 * wait and a __syncwarp (__syncthreads).
 */
#ifndef QC_CUDA_CP_ASYNC_CUH
#define QC_CUDA_CP_ASYNC_CUH

#include <stdint.h>

static __device__ __forceinline__ void cp_async16(void *dst, const void *src, bool ok)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
			     (uint32_t)__cvta_generic_to_shared(dst)),
		     "l"(src), "r"(ok ? 16 : 0)
		     : "memory");
}

/* An 8-byte copy (cp.async's .cg takes 16 bytes only; .ca allocates in L1). */
static __device__ __forceinline__ void cp_async8(void *dst, const void *src)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"((uint32_t)__cvta_generic_to_shared(dst)),
		     "l"(src)
		     : "memory");
}

static __device__ __forceinline__ void cp_async_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N> static __device__ __forceinline__ void cp_async_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#endif
