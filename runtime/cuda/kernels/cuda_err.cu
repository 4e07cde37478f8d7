/* cuda_err.cu — cudaError_t to struct qc_err (the one place CUDA errors are
 * turned into project errors). Non-goals: retries, device resets.
 * Every launcher calls qc_cuda_check(cudaGetLastError(), "<kernel>", err)
 * right after its launch, so a bad configuration names the kernel.
 */
#include "qc_cuda.h"

#include <cuda_runtime.h>

extern "C" int qc_cuda_check(cudaError_t e, const char *what, struct qc_err *err)
{
	if (e == cudaSuccess)
		return QC_OK;
	return qc_err_set(err, QC_ECUDA, NULL, NULL, -1, "%s: %s (%s)", what, cudaGetErrorString(e),
			  cudaGetErrorName(e));
}
