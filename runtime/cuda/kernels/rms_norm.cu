/* rms_norm.cu — RMSNorm of rows times a weight (attention/FFN/output norms and
 * the per-head q/k norms of qwen3, as rows of head_dim), plain or after the
 * residual add (x += res stored back into x): fused, the add saves its own
 * launch in every layer.
 *
 * One block per row; the sum of squares is a fixed-order float tree (the C
 * reference sums in double, as ggml's CPU rms_norm). An optional row list
 * gathers the rows that need logits. The fused add is add.cu's one float add,
 * so x and y are bit for bit those of qc_cuda_add followed by the plain norm.
 * Non-goals: a residual with its own stride or rows.
 * Reference: runtime/ops/rms_norm.c (after runtime/ops/add.c for the residual).
 */
#include "rms_norm.h"

#include <cuda_runtime.h>

#include "block_reduce.cuh"
#include "pdl.cuh"

/* d_res NULL: the plain norm, x only read */
static __global__ void rms_norm_kernel(const struct qc_cuda_add_rms_norm_args a)
{
	qc_pdl_enter();
	const int64_t r = blockIdx.x, src = a.d_rows ? a.d_rows[r] : r;
	float *x = a.d_x + src * a.ldx;
	float *y = a.d_y + r * a.ldy;
	float s = 0.0f;
	for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) {
		float v = x[i];
		if (a.d_res) {
			v = v + a.d_res[src * a.ldx + i]; /* add_kernel's y += x: same operands, same order */
			x[i] = v;
		}
		s = fmaf(v, v, s);
	}
	/* The reduction's __syncthreads also orders every thread's residual loads and
	 * x stores above before any y store below, so y may share storage with res
	 * or x (rms_norm.h). Both loops also give each thread the same elements, so
	 * no thread overwrites a value another has still to read. */
	s = block_reduce<QC_RED_SUM>(s);
	const float scale = 1.0f / sqrtf(s / (float)a.n + a.eps);
	for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x)
		y[i] = (x[i] * scale) * a.d_w[i];
}

static int launch(const struct qc_cuda_add_rms_norm_args *a, const char *op, cudaStream_t s, struct qc_err *err)
{
	if (a->n < 1 || a->n_rows < 0 || a->n_rows > INT32_MAX || a->ldx < a->n || a->ldy < a->n)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "%s: %lld rows of %lld (ld %lld/%lld)", op,
				  (long long)a->n_rows, (long long)a->n, (long long)a->ldx, (long long)a->ldy);
	const bool y_shared = a->d_y == a->d_x || (a->d_res && a->d_y == a->d_res);
	if (y_shared && (a->d_rows || a->ldy != a->ldx))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "%s: y is %s, which needs no row list (%s) and ldy == ldx (%lld/%lld)", op,
				  a->d_y == a->d_x ? "x" : "the residual", a->d_rows ? "given" : "none",
				  (long long)a->ldy, (long long)a->ldx);
	if (!a->n_rows)
		return QC_OK;
	return qc_cuda_check(qc_launch(rms_norm_kernel, dim3((unsigned)a->n_rows), dim3(a->n >= 1024 ? 512 : 128), 0, s, *a),
			     "rms_norm_kernel", err);
}

extern "C" int qc_cuda_rms_norm(const struct qc_cuda_rms_norm_args *a, cudaStream_t s, struct qc_err *err)
{
	/* the kernel writes x only with a residual: none here */
	const struct qc_cuda_add_rms_norm_args f = {const_cast<float *>(a->d_x), a->ldx, a->d_rows, a->d_w, a->d_y,
						    a->ldy, a->n_rows, a->n, a->eps, NULL};
	return launch(&f, "rms_norm", s, err);
}

extern "C" int qc_cuda_add_rms_norm(const struct qc_cuda_add_rms_norm_args *a, cudaStream_t s, struct qc_err *err)
{
	if (!a->d_res || a->d_res == a->d_x)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "add_rms_norm: the residual is %s",
				  a->d_res ? "x itself" : "NULL");
	return launch(a, "add_rms_norm", s, err);
}
