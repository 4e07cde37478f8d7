/* marlin_mm.cu — the marlin layouts' entry in the CUDA matmul table
 * (matmul_layouts.def): adapts struct qc_cuda_mm_args (float activation rows with
 * a stride and an x_div, MoE expert per row, strided float output) to
 * qc_cuda_marlin_gemm (fp16 activations): the rows are rounded to fp16 into the
 * scratch, then one GEMM writes y directly (its split-K partials follow the fp16
 * rows in the same scratch). Rounding activations to fp16 is what the tensor
 * cores take; it is the one rounding this path adds over a float GEMV.
 * Two kinds of the layout table live here: QC_KERNEL_MMA (qc_cuda_marlin_mm, the
 * GEMM above) and QC_KERNEL_F16_BLAS (qc_cuda_marlin_f16: the weight decoded to
 * fp16 by marlin_dequant.cu, then cuBLAS; same weight values, faster than
 * mma.sync from 128 rows). Each runs what it is asked for or fails. Both take
 * the SwiGLU product (QC_MM_FUSE_SILU) in the rounding to fp16: silu(x) * x2 is
 * never written as floats (at 256 rows of an 8B model the down projection's input
 * was 15 MB written by silu_mul and read back).
 * Non-goals: choosing the kind (qc_layout_kernel, asked by the backend).
 */
#include "marlin_gemm.cuh"
#include "pdl.cuh"
#include "marlin_dequant.h"
#include "matmul_dispatch.h"
#include "silu.cuh"
#include "f16_pack.cuh"

extern "C" {
#include "layout_marlin.h"
}

#include <cublas_v2.h>
#include <cuda_fp16.h>

namespace {

/* a[r][k] = fp16(x[(r / x_div) * ldx + k]); SILU: of qc_silu_mul(x, x2) at the same
 * place (silu_mul's float, then the same rounding: the bits of silu_mul and this) */
template <bool SILU>
__global__ void rows_to_f16(const float *x, const float *x2, int64_t ldx, int32_t x_div, int64_t n_rows, int64_t n_in,
			    __half *a)
{
	qc_pdl_enter();
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n_rows * n_in)
		return;
	const int64_t r = i / n_in, k = i % n_in, at = (r / x_div) * ldx + k;
	a[i] = __float2half_rn(SILU ? qc_silu_mul(x[at], x2[at]) : x[at]);
}

/* the same, 8 values a thread (one 16-byte store): n_in % 8 == 0, ldx % 4 == 0, x
 * (and x2) 16-byte aligned. One value a thread took 6-19 us per matrix at 256 rows
 * of an 8B model on an H200, for 2-7 MB. */
template <bool SILU>
__global__ void rows_to_f16_x8(const float *x, const float *x2, int64_t ldx, int32_t x_div, int64_t n_rows,
			       int64_t n_in, __half *a)
{
	qc_pdl_enter();
	const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
	if (i >= n_rows * n_in)
		return;
	const int64_t r = i / n_in, k = i % n_in, at = (r / x_div) * ldx + k;
	float4 u = ((const float4 *)(x + at))[0], v = ((const float4 *)(x + at))[1];
	if (SILU) {
		const float4 u2 = ((const float4 *)(x2 + at))[0], v2 = ((const float4 *)(x2 + at))[1];
		u = make_float4(qc_silu_mul(u.x, u2.x), qc_silu_mul(u.y, u2.y), qc_silu_mul(u.z, u2.z), qc_silu_mul(u.w, u2.w));
		v = make_float4(qc_silu_mul(v.x, v2.x), qc_silu_mul(v.y, v2.y), qc_silu_mul(v.z, v2.z), qc_silu_mul(v.w, v2.w));
	}
	qc_store_f16x8(a + i, u, v);
}

uint64_t act_bytes(int64_t n_rows, int64_t n_in)
{
	return ((uint64_t)n_rows * (uint64_t)n_in * 2 + 255) & ~(uint64_t)255;
}

/* Whether the table can pick the fp16 path for up to n_rows rows of this matrix
 * (qc_layout_kernel: from blas_min_rows rows on, matrices of at most
 * f16_max_elems elements; the vocabulary matrix keeps the GEMM, its fp16 copy
 * would be ~1 GB of scratch). */
bool f16_reachable(int64_t n_in, int64_t n_out, int64_t n_rows, const struct qc_kernel_rows *r)
{
	return n_rows >= r->blas_min_rows && n_in * n_out <= r->f16_max_elems;
}

int blas_check(cublasStatus_t st, const char *what, struct qc_err *err)
{
	if (st == CUBLAS_STATUS_SUCCESS)
		return QC_OK;
	return qc_err_set(err, QC_ECUDA, NULL, NULL, -1, "%s: cuBLAS status %d (%s)", what, (int)st,
			  cublasGetStatusString(st));
}

} /* namespace */

/* Scratch for n_rows rows: fp16 activations + the largest split-K workspace the
 * GEMM picks on the current device for any marlin layout whose encoding fits
 * n_in x n_out (the plan depends on bits, offsets and the shape), with or without
 * experts. 0 when the device cannot be asked (the call then reports the need). */
extern "C" uint64_t qc_cuda_marlin_mm_ws(int64_t n_in, int64_t n_out, int64_t n_rows, const struct qc_kernel_rows *r)
{
	static const int32_t one_expert = 0;
	static const struct {
		enum qc_layout l;
		enum qc_type t;
	} forms[] = { { QC_LAYOUT_MARLIN_I4, QC_TYPE_Q4_0 }, { QC_LAYOUT_MARLIN_I8, QC_TYPE_Q8_0 },
		      { QC_LAYOUT_MARLIN_I4Z, QC_TYPE_Q4_1 }, { QC_LAYOUT_MARLIN_I8Z, QC_TYPE_Q5_K },
		      { QC_LAYOUT_MARLIN_I8Z, QC_TYPE_HQ8 }, { QC_LAYOUT_MARLIN_I6, QC_TYPE_Q6_K } };
	uint64_t most = 0;
	for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++)
		for (int e = 0; e < 2; e++) {
			const int64_t ne[4] = { n_in, n_out, 1, 1 };
			uint64_t row;
			if (!qc_marlin_fits(forms[f].l, forms[f].t, ne, 2, NULL) ||
			    qc_marlin_row_bytes(forms[f].l, forms[f].t, n_in, &row))
				continue; /* no matrix of this form has this shape */
			struct qc_marlin_gemm_args g = {};
			g.layout = forms[f].l;
			g.type = forms[f].t;
			g.m = n_rows;
			g.n = n_out;
			g.k = n_in;
			g.a = g.w = &one_expert; /* the shape check wants non-NULL; nothing is read */
			g.expert = e ? &one_expert : NULL;
			g.mat_stride = (uint64_t)n_out * row; /* one slice: what the check asks */
			size_t b;
			if (qc_cuda_marlin_gemm_workspace(&g, &b, NULL))
				return 0;
			most = b > most ? b : most;
		}
	{ /* the wgmma plan at fewer rows than n_rows may split K further */
		const uint64_t wg = qc_cuda_marlin_gemm_wgmma_ws(n_in, n_out, n_rows);
		most = wg > most ? wg : most;
	}
	if (f16_reachable(n_in, n_out, n_rows, r)) { /* the fp16 weight takes the partials' place */
		const uint64_t w16 = (uint64_t)n_in * (uint64_t)n_out * 2;
		most = w16 > most ? w16 : most;
	}
	return act_bytes(n_rows, n_in) + most;
}

/* The activation rows to fp16 at the scratch's start (both kinds). */
static int rows_in(const struct qc_cuda_mm_args *a, uint64_t ab, const char *what, cudaStream_t s, struct qc_err *err)
{
	if (!a->d_ws || a->ws_bytes < ab || a->x_div < 1)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "%s: %lld rows of %lld need %llu scratch bytes for fp16 activations, got %llu", what,
				  (long long)a->n_rows, (long long)a->n_in, (unsigned long long)ab,
				  (unsigned long long)a->ws_bytes);
	const int64_t total = a->n_rows * a->n_in;
	const bool x8 = a->n_in % 8 == 0 && a->ldx % 4 == 0 && (uintptr_t)a->d_x % 16 == 0 &&
			(uintptr_t)a->d_x2 % 16 == 0 && (uintptr_t)a->d_ws % 16 == 0;
	const dim3 grid((unsigned)(((x8 ? total / 8 : total) + 255) / 256));
	void (*const fn)(const float *, const float *, int64_t, int32_t, int64_t, int64_t, __half *) =
		x8 ? (a->d_x2 ? rows_to_f16_x8<true> : rows_to_f16_x8<false>)
		   : (a->d_x2 ? rows_to_f16<true> : rows_to_f16<false>);
	(void)qc_launch(fn, grid, dim3(256), 0, s, a->d_x, a->d_x2, a->ldx, a->x_div, a->n_rows, a->n_in,
			(__half *)a->d_ws);
	return qc_cuda_check(cudaGetLastError(), "marlin_mm: rows_to_f16", err);
}

/* Matrix i of a launch: the args' own (i = 0), then a->more[i - 1]. */
struct mm_mat {
	const uint8_t *d_w;
	int64_t n_out;
	float *d_y;
	int64_t ldy;
};
static struct mm_mat mat_of(const struct qc_cuda_mm_args *a, int i)
{
	if (i == 0)
		return {a->d_w, a->n_out, a->d_y, a->ldy};
	return {a->more[i - 1].d_w, a->more[i - 1].n_out, a->more[i - 1].d_y, a->more[i - 1].ldy};
}

/* Whether the launch's matrices lie one after the other (the parts of a fused
 * tensor: qconvert's Q|K|V and gate|up, docs/bundle.md): then they are one matrix
 * of their summed width, whose column ranges have outputs of their own. */
static bool one_matrix(const struct qc_cuda_mm_args *a)
{
	if (a->n_more < 1 || a->n_more > QC_MARLIN_MAX_PARTS || a->d_expert)
		return false;
	const uint8_t *end = a->d_w + (uint64_t)a->n_out * a->row_bytes;
	for (int i = 0; i < a->n_more; i++) {
		if (a->more[i].d_w != end)
			return false;
		end += (uint64_t)a->more[i].n_out * a->row_bytes;
	}
	return true;
}

/* QC_KERNEL_F16_BLAS: y = W x with W decoded to fp16 after the activations in the
 * scratch, one cuBLAS GemmEx; with n_more, each matrix in turn on the same fp16
 * activations (the decoded weight's scratch reused: stream order; a fused tensor's
 * parts decoded in one launch where the scratch holds them all). No experts; the
 * scratch must hold the activations and the largest matrix. */
extern "C" int qc_cuda_marlin_f16(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err)
{
	if (qc_cuda_mm_check_fuse(a, QC_MM_FUSE_SILU | QC_MM_FUSE_MULTI, "marlin_f16", err))
		return QC_EUNSUPPORTED;
	if (a->n_rows == 0)
		return QC_OK;
	if (a->n_more < 0 || a->n_more > QC_CUDA_MM_MORE)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "marlin_f16: %d more matrices (at most %d)",
				  (int)a->n_more, QC_CUDA_MM_MORE);
	int64_t most = 0, all = 0;
	for (int i = 0; i <= a->n_more; i++) {
		most = mat_of(a, i).n_out > most ? mat_of(a, i).n_out : most;
		all += mat_of(a, i).n_out;
	}
	const uint64_t ab = act_bytes(a->n_rows, a->n_in), wb = (uint64_t)a->n_in * (uint64_t)most * 2;
	/* one fused matrix: decoded once, then each part's product from its rows */
	const bool once = one_matrix(a) && a->ws_bytes >= ab + (uint64_t)a->n_in * (uint64_t)all * 2;
	if (a->d_expert || !a->blas || a->n_rows > INT32_MAX || a->n_in > INT32_MAX || most > INT32_MAX ||
	    a->ws_bytes < ab + wb)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "marlin_f16: %s %lld x %lld x %lld: experts, no cuBLAS handle or scratch %llu < %llu",
				  qc_layout_name(a->layout), (long long)a->n_rows, (long long)most,
				  (long long)a->n_in, (unsigned long long)a->ws_bytes, (unsigned long long)(ab + wb));
	int rc = rows_in(a, ab, "marlin_f16", s, err);
	if (rc)
		return rc;
	cublasHandle_t h = (cublasHandle_t)a->blas;
	uint16_t *w16 = (uint16_t *)((uint8_t *)a->d_ws + ab);
	/* only when it differs: cublasSetStream drops a workspace set with cublasSetWorkspace */
	cudaStream_t cur = NULL;
	if ((rc = blas_check(cublasGetStream(h, &cur), "cublasGetStream", err)) ||
	    (cur != s && (rc = blas_check(cublasSetStream(h, s), "cublasSetStream", err))))
		return rc;
	const float one = 1.0f, zero = 0.0f;
	const int n = (int)a->n_rows, k = (int)a->n_in;
	if (once && (rc = qc_cuda_marlin_to_f16(a->layout, a->type, a->d_w, all, a->n_in, w16, s, err)))
		return rc;
	for (int i = 0, row0 = 0; i <= a->n_more; row0 += (int)mat_of(a, i).n_out, i++) {
		const struct mm_mat w = mat_of(a, i);
		const uint16_t *wi = once ? w16 + (size_t)row0 * (size_t)k : w16;
		if ((!once && (rc = qc_cuda_marlin_to_f16(a->layout, a->type, w.d_w, w.n_out, a->n_in, w16, s, err))) ||
		    (rc = blas_check(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)w.n_out, n, k, &one, wi, CUDA_R_16F,
						  k, a->d_ws, CUDA_R_16F, k, &zero, w.d_y, CUDA_R_32F, (int)w.ldy,
						  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
				     "marlin_mm: cublasGemmEx", err)))
			return rc;
	}
	return QC_OK;
}

/* QC_KERNEL_MMA: y = W x through the marlin tensor-core GEMM (experts allowed); with
 * n_more, one GEMM where the matrices are one fused tensor's parts (one_matrix), else
 * each matrix in turn on the same fp16 activations. */
extern "C" int qc_cuda_marlin_mm(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err)
{
	if (qc_cuda_mm_check_fuse(a, QC_MM_FUSE_SILU | QC_MM_FUSE_MULTI, "marlin_mm", err))
		return QC_EUNSUPPORTED;
	if (a->n_rows == 0)
		return QC_OK;
	if (a->n_more < 0 || a->n_more > QC_CUDA_MM_MORE || (a->n_more && a->d_expert))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "marlin_mm: %d more matrices%s (at most %d, no experts)",
				  (int)a->n_more, a->d_expert ? " with experts" : "", QC_CUDA_MM_MORE);
	const uint64_t ab = act_bytes(a->n_rows, a->n_in);
	int rc = rows_in(a, ab, "marlin_mm", s, err);
	if (rc)
		return rc;
	const bool one = one_matrix(a);
	for (int i = 0; i <= (one ? 0 : a->n_more); i++) {
		struct mm_mat w = mat_of(a, i);
		struct qc_marlin_gemm_args g = {};
		for (int j = 0; one && j < a->n_more; j++) { /* the fused matrix's parts */
			g.part_col0[j] = w.n_out;
			g.part_c[j] = a->more[j].d_y;
			g.part_ldc[j] = a->more[j].ldy;
			w.n_out += a->more[j].n_out;
		}
		g.n_parts = one ? a->n_more : 0;
		g.layout = a->layout;
		g.type = a->type;
		g.m = a->n_rows;
		g.n = w.n_out;
		g.k = a->n_in;
		g.a = a->d_ws;
		g.w = w.d_w;
		g.c = w.d_y;
		g.ldc = w.ldy;
		g.c_type = QC_MARLIN_C_F32;
		g.split = QC_MARLIN_SPLIT_AUTO;
		g.expert = a->d_expert;
		g.mat_stride = a->mat_stride;
		g.workspace = (uint8_t *)a->d_ws + ab;
		g.workspace_bytes = a->ws_bytes - ab;
		if ((rc = qc_cuda_marlin_gemm(&g, s, err)))
			return rc;
	}
	return QC_OK;
}
