/* dev_once.cuh — "done on this device" flags for the setup a launcher makes once
 * (raising a kernel's shared-memory limit, its carveout preference).
 *
 * Why per device: cudaFuncSetAttribute sets an attribute of the function on the
 * current device only. A process that drives several GPUs (a tensor-parallel run:
 * one rank per GPU, each on its own thread) must make it on every one; a
 * process-wide "done" flag would leave every GPU but the first without it, and
 * their launches failing or slower. Two threads racing on one device may both
 * make the (idempotent) call. Devices past 63 make it at every launch.
 */
#ifndef QC_CUDA_DEV_ONCE_CUH
#define QC_CUDA_DEV_ONCE_CUH

#include <atomic>
#include <cstdint>
#include <cuda_runtime.h>

struct qc_dev_once {
	std::atomic<uint64_t> done{0}; /* bit d: made on device d */
};

/* f() (a cudaError_t) unless it succeeded on the current device before; its
 * error, or cudaSuccess. */
template <typename F> static inline cudaError_t qc_dev_once_run(qc_dev_once &o, F &&f)
{
	int dev = 0;
	cudaError_t e = cudaGetDevice(&dev);
	if (e != cudaSuccess)
		return e;
	const uint64_t bit = dev >= 0 && dev < 64 ? (uint64_t)1 << dev : 0;
	if (bit && (o.done.load(std::memory_order_acquire) & bit))
		return cudaSuccess;
	e = f();
	if (e == cudaSuccess && bit)
		o.done.fetch_or(bit, std::memory_order_release);
	return e;
}

#endif
