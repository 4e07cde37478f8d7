/* fp8_gemm.cu — y = W x for W8A8 FP8 weights in the fp8_rows layout (quant/layout_fp8.h,
 * docs/layout-fp8.md) on FP8 tensor cores: the matmul_layouts.def row of
 * QC_LAYOUT_FP8_ROWS, for every row count.
 *
 * Two steps on the launch stream:
 *  1. fp8_act.cu rounds the activations to e4m3 (the static scale a read from the
 *     weights' bytes, or each row's amax / 448), codes (n_rows, K) and row scales into
 *     the scratch (qc_cuda_fp8_ws_codes / _scales).
 *  2. cuBLASLt: D (n_out x n_rows, column-major = y row-major with ldy) =
 *     (A^T B) * d[o] * s[t], A = the weight codes (K-major, "T"), B = the activation
 *     codes, fp32 accumulation, fp32 out; the per-row scales of both operands as
 *     cuBLASLt's outer-vector scale modes (CUDA 12.9+ on sm_90). Where cuBLASLt has no
 *     algorithm for that (another card, a stride it refuses), it multiplies with unit
 *     scales into the scratch and `rescale` applies d[o] * s[t] on the way to y (logged
 *     once: an extra pass over the output).
 * The cuBLASLt handle is the cuBLAS handle (cuBLAS documents the cast). Algorithms are
 * looked up once per (device, shape, alignment) and kept.
 * Precision: the e4m3 products are exact, but Hopper's FP8 tensor cores keep only about
 * 14 bits of a running sum inside an instruction (DeepSeek-V3 report, "Increasing
 * Accumulation Precision"); with fast accumulation off cuBLASLt adds those partials in
 * fp32. Measured on an H200 (test_kernels): |y - exact| up to 2^-11.4 sum |w x| at
 * K = 64, 2^-14 at K = 4096.
 * Not batch-invariant across row counts (cuBLASLt's tiling depends on the row count,
 * like the f16+cuBLAS path); the activation codes of a row never depend on other rows.
 * Non-goals: experts (fp8_rows holds single matrices), fusions, sm < 8.9.
 * Reference: runtime/ops/fp8_gemm.c (same rounding, double sums).
 */
#include "fp8_act.h"
#include "matmul_dispatch.h"

extern "C" {
#include "layout_fp8.h"
#include "act_fp8.h"
}

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <stdio.h>

namespace {

constexpr uint64_t LT_WS = (uint64_t)32 << 20; /* cuBLASLt workspace */

uint64_t align256(uint64_t n)
{
	return (n + 255) & ~(uint64_t)255;
}

/* The scratch: activation codes, row scales, the unit-scale result, cuBLASLt's own. */
struct ws_plan {
	uint64_t codes, scales, tmp, lt, bytes;
};

ws_plan plan_ws(int64_t n_in, int64_t n_out, int64_t n_rows)
{
	ws_plan p;
	p.codes = qc_cuda_fp8_ws_codes();
	p.scales = qc_cuda_fp8_ws_scales(n_in, n_rows);
	p.tmp = p.scales + align256((uint64_t)n_rows * 4);
	p.lt = p.tmp + align256((uint64_t)n_rows * (uint64_t)((n_out + 3) & ~(int64_t)3) * 4);
	p.bytes = p.lt + LT_WS;
	return p;
}

/* y[t][o] = tmp[t][o] * d[o] * s[t] (the unit-scale result's scales) */
__global__ void rescale(const float *__restrict__ tmp, int64_t ldt, const float *__restrict__ d,
			const float *__restrict__ s, float *__restrict__ y, int64_t ldy, int64_t n_out, int64_t n_rows)
{
	for (int64_t t = blockIdx.y; t < n_rows; t += gridDim.y)
		for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < n_out;
		     o += (int64_t)gridDim.x * blockDim.x)
			y[t * ldy + o] = tmp[t * ldt + o] * d[o] * s[t];
}

int lt_check(cublasStatus_t st, const char *what, struct qc_err *err)
{
	if (st == CUBLAS_STATUS_SUCCESS)
		return QC_OK;
	return qc_err_set(err, QC_ECUDA, NULL, NULL, -1, "fp8_gemm: %s: cuBLAS status %d (%s)", what, (int)st,
			  cublasGetStatusString(st));
}

/* The alignment cuBLASLt may assume of a pointer plus every multiple of `stride`
 * bytes: the lowest set bit of both, up to 256. */
uint32_t align_of(const void *p, uint64_t stride)
{
	const uint64_t u = (uint64_t)(uintptr_t)p | stride | 256;
	return (uint32_t)(u & (~u + 1));
}

/* One matmul's descriptors; owns them. */
struct lt_call {
	cublasLtMatmulDesc_t op = nullptr;
	cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
	~lt_call()
	{
		if (ld)
			cublasLtMatrixLayoutDestroy(ld);
		if (lb)
			cublasLtMatrixLayoutDestroy(lb);
		if (la)
			cublasLtMatrixLayoutDestroy(la);
		if (op)
			cublasLtMatmulDescDestroy(op);
	}
};

/* Build the descriptors: outer = per-row scales of both operands, else none (unit). */
int lt_build(lt_call &c, bool outer, const float *w_scales, const float *x_scales, int64_t k, int64_t n, int64_t m,
	     int64_t ldd, struct qc_err *err)
{
	const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
	const int8_t fast_accum = 0; /* the default, said: partial sums promoted to fp32 (see the header) */
	int rc;
	if ((rc = lt_check(cublasLtMatmulDescCreate(&c.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc", err)) ||
	    (rc = lt_check(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum,
							  sizeof fast_accum), "fast accumulation", err)) ||
	    (rc = lt_check(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "transa",
			   err)) ||
	    (rc = lt_check(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "transb",
			   err)))
		return rc;
	if (outer) {
		const cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
		if ((rc = lt_check(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode,
								  sizeof mode), "A scale mode", err)) ||
		    (rc = lt_check(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
								  sizeof mode), "B scale mode", err)) ||
		    (rc = lt_check(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales,
								  sizeof w_scales), "A scales", err)) ||
		    (rc = lt_check(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales,
								  sizeof x_scales), "B scales", err)))
			return rc;
	}
	if ((rc = lt_check(cublasLtMatrixLayoutCreate(&c.la, CUDA_R_8F_E4M3, (uint64_t)k, (uint64_t)n, k), "A layout",
			   err)) ||
	    (rc = lt_check(cublasLtMatrixLayoutCreate(&c.lb, CUDA_R_8F_E4M3, (uint64_t)k, (uint64_t)m, k), "B layout",
			   err)) ||
	    (rc = lt_check(cublasLtMatrixLayoutCreate(&c.ld, CUDA_R_32F, (uint64_t)n, (uint64_t)m, ldd), "D layout", err)))
		return rc;
	return QC_OK;
}

/* Kept algorithms: key = device, shape, output stride, alignments, scale mode. */
struct algo_key {
	int dev;
	int64_t k, n, m, ldd;
	uint32_t al_a, al_b, al_d;
	bool outer;
	bool operator==(const algo_key &o) const
	{
		return dev == o.dev && k == o.k && n == o.n && m == o.m && ldd == o.ldd && al_a == o.al_a &&
		       al_b == o.al_b && al_d == o.al_d && outer == o.outer;
	}
};
struct algo_entry {
	algo_key key;
	bool found;
	cublasLtMatmulAlgo_t algo;
};
constexpr int N_ALGOS = 256;
std::mutex algo_mu;
algo_entry algos[N_ALGOS];
int n_algos, next_evict;

/* The heuristic's first algorithm for c (found false: none). */
int lt_algo(cublasLtHandle_t h, const lt_call &c, const algo_key &key, bool *found, cublasLtMatmulAlgo_t *algo,
	    struct qc_err *err)
{
	{
		std::lock_guard<std::mutex> g(algo_mu);
		for (int i = 0; i < n_algos; i++)
			if (algos[i].key == key) {
				*found = algos[i].found;
				*algo = algos[i].algo;
				return QC_OK;
			}
	}
	cublasLtMatmulPreference_t pref = nullptr;
	const uint64_t ws = LT_WS;
	int rc = lt_check(cublasLtMatmulPreferenceCreate(&pref), "preference", err);
	if (!rc)
		rc = lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
								   sizeof ws), "workspace preference", err);
	if (!rc)
		rc = lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
								   &key.al_a, sizeof key.al_a), "alignment A", err);
	if (!rc)
		rc = lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
								   &key.al_b, sizeof key.al_b), "alignment B", err);
	if (!rc)
		rc = lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
								   &key.al_d, sizeof key.al_d), "alignment C", err);
	if (!rc)
		rc = lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
								   &key.al_d, sizeof key.al_d), "alignment D", err);
	cublasLtMatmulHeuristicResult_t res = {};
	int n_res = 0;
	if (!rc) {
		/* "not supported" is an answer (no algorithm), not an error */
		const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, c.op, c.la, c.lb, c.ld, c.ld, pref, 1, &res,
									 &n_res);
		if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
			rc = lt_check(st, "algorithm heuristic", err);
	}
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	if (rc)
		return rc;
	*found = n_res > 0 && res.state == CUBLAS_STATUS_SUCCESS;
	*algo = res.algo;
	std::lock_guard<std::mutex> g(algo_mu);
	const int at = n_algos < N_ALGOS ? n_algos++ : (next_evict++ % N_ALGOS);
	algos[at] = {key, *found, *algo};
	return QC_OK;
}

int lt_run(cublasLtHandle_t h, bool outer, const float *w_scales, const float *x_scales, const uint8_t *wc,
	   const uint8_t *xc, float *d, int64_t ldd, int64_t k, int64_t n, int64_t m, void *lt_ws, cudaStream_t s,
	   bool *ran, struct qc_err *err)
{
	lt_call c;
	int rc = lt_build(c, outer, w_scales, x_scales, k, n, m, ldd, err);
	if (rc)
		return rc;
	algo_key key = {};
	if ((rc = qc_cuda_check(cudaGetDevice(&key.dev), "cudaGetDevice", err)))
		return rc;
	key.k = k;
	key.n = n;
	key.m = m;
	key.ldd = ldd;
	key.al_a = align_of(wc, (uint64_t)k);
	key.al_b = align_of(xc, (uint64_t)k);
	key.al_d = align_of(d, (uint64_t)ldd * 4);
	key.outer = outer;
	cublasLtMatmulAlgo_t algo;
	bool found = false;
	if ((rc = lt_algo(h, c, key, &found, &algo, err)))
		return rc;
	*ran = found;
	if (!found)
		return QC_OK;
	const float one = 1.0f, zero = 0.0f;
	return lt_check(cublasLtMatmul(h, c.op, &one, wc, c.la, xc, c.lb, &zero, d, c.ld, d, c.ld, &algo, lt_ws, LT_WS,
				       s),
			"cublasLtMatmul", err);
}

std::atomic<bool> warned_unit{false};

} // namespace

extern "C" uint64_t qc_cuda_fp8_gemm_ws(int64_t n_in, int64_t n_out, int64_t n_rows, const struct qc_cuda_mm_tuning *t)
{
	(void)t;
	return plan_ws(n_in, n_out, n_rows).bytes;
}

extern "C" int qc_cuda_fp8_gemm(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err)
{
	if (qc_cuda_mm_check_fuse(a, 0, "fp8_gemm", err))
		return QC_EUNSUPPORTED;
	if (a->n_rows == 0)
		return QC_OK;
	const int64_t ne[4] = {a->n_in, a->n_out, 1, 1};
	struct qc_fp8_rows_geom g;
	if (a->d_expert || a->x_div != 1 || !a->blas || qc_fp8_rows_geom(a->type, ne, &g) || a->n_rows > INT32_MAX ||
	    a->n_rows < 0)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "fp8_gemm: experts, x_div %d or shape %lld x %lld x %lld (%s) not supported", a->x_div,
				  (long long)a->n_rows, (long long)a->n_out, (long long)a->n_in, qc_types[a->type].name);
	const ws_plan p = plan_ws(a->n_in, a->n_out, a->n_rows);
	if (a->ws_bytes < p.bytes || !a->d_ws)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "fp8_gemm: scratch of %llu bytes, %llu needed",
				  (unsigned long long)a->ws_bytes, (unsigned long long)p.bytes);
	uint8_t *ws = (uint8_t *)a->d_ws;
	uint8_t *xc = ws + p.codes;
	float *xs = (float *)(ws + p.scales), *tmp = (float *)(ws + p.tmp);
	const float *w_scales = (const float *)(a->d_w + g.scale_off);
	int rc = qc_cuda_fp8_act_quant(a->d_x, a->ldx, a->n_rows, a->n_in, (const float *)(a->d_w + g.act_off), xc, xs,
				       s, err);
	if (rc)
		return rc;
	cublasLtHandle_t h = (cublasLtHandle_t)a->blas;
	bool ran = false;
	rc = lt_run(h, true, w_scales, xs, a->d_w, xc, a->d_y, a->ldy, a->n_in, a->n_out, a->n_rows, ws + p.lt, s, &ran,
		    err);
	if (rc || ran)
		return rc;
	/* no outer-vector algorithm for this card or stride: unit scales, then rescale */
	if (!warned_unit.exchange(true)) {
		fprintf(stderr, "qc: warning: fp8_gemm: cuBLASLt has no per-row-scaled FP8 algorithm for %lld x %lld x %lld "
				"(ldy %lld): unit scales and a rescale pass instead\n",
			(long long)a->n_rows, (long long)a->n_out, (long long)a->n_in, (long long)a->ldy);
	}
	const int64_t ldt = (a->n_out + 3) & ~(int64_t)3;
	if ((rc = lt_run(h, false, nullptr, nullptr, a->d_w, xc, tmp, ldt, a->n_in, a->n_out, a->n_rows, ws + p.lt, s,
			 &ran, err)))
		return rc;
	if (!ran)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "fp8_gemm: cuBLASLt has no FP8 algorithm for %lld x %lld x %lld on this device (FP8 tensor "
				  "cores need compute capability 8.9 or later)",
				  (long long)a->n_rows, (long long)a->n_out, (long long)a->n_in);
	const dim3 grid((unsigned)((a->n_out + 255) / 256 < 64 ? (a->n_out + 255) / 256 : 64),
			(unsigned)(a->n_rows < 65535 ? a->n_rows : 65535));
	rescale<<<grid, 256, 0, s>>>(tmp, ldt, w_scales, xs, a->d_y, a->ldy, a->n_out, a->n_rows);
	return qc_cuda_check(cudaGetLastError(), "fp8_gemm rescale launch", err);
}
