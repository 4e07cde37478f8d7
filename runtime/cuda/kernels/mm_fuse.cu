/* mm_fuse.cu — the refusal every matmul kernel gives a fusion it cannot do
 * (matmul_dispatch.h, qc_cuda_mm_args.d_x2 / accumulate): in a file of its own so
 * that a program linking one kernel (tests/gpu/marlin_gemm_test.c) needs no other. */
#include "matmul_dispatch.h"

extern "C" int qc_cuda_mm_check_fuse(const struct qc_cuda_mm_args *a, unsigned have, const char *kernel,
				      struct qc_err *err)
{
	const unsigned want = (a->d_x2 ? (unsigned)QC_MM_FUSE_SILU : 0u) | (a->accumulate ? (unsigned)QC_MM_FUSE_ACC : 0u) |
			      (a->n_more ? (unsigned)QC_MM_FUSE_MULTI : 0u) | (a->d_norm_w ? (unsigned)QC_MM_FUSE_NORM : 0u);
	if (!(want & ~have))
		return QC_OK;
	return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "%s: cannot fuse%s%s%s%s (a backend bug: "
			  "qc_cuda_mm_kernels.fuse says which kinds can)", kernel,
			  (want & ~have & QC_MM_FUSE_SILU) ? " silu(x)*x2" : "",
			  (want & ~have & QC_MM_FUSE_ACC) ? " y +=" : "",
			  (want & ~have & QC_MM_FUSE_MULTI) ? " several matrices" : "",
			  (want & ~have & QC_MM_FUSE_NORM) ? " RMSNorm" : "");
}
