/* backend_cuda_stub.c — qc_backend_cuda in a build without nvcc: every create
 * fails with QC_EUNSUPPORTED saying so (no silent CPU fallback). Linked
 * instead of backend_cuda.c by the Makefile (libqc_nocuda.a).
 */
#include "backend_cuda.h"

static int stub_create(const struct qc_model *m, const struct qc_backend_params *p, void **state,
		       struct qc_err *err)
{
	(void)m;
	(void)p;
	*state = NULL;
	return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
			  "this build has no CUDA backend (nvcc was not found when it was built); "
			  "use --device cpu");
}

static int stub_forward(void *state, const struct qc_sched_plan *plan, float *logits, struct qc_err *err)
{
	(void)state;
	(void)plan;
	(void)logits;
	return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "no CUDA backend in this build");
}

static void stub_destroy(void *state)
{
	(void)state;
}

const struct qc_backend_ops qc_backend_cuda = {
	.name = "cuda",
	.create = stub_create,
	.forward = stub_forward,
	.destroy = stub_destroy,
};
