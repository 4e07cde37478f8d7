/* bench_fp8.c — per-GEMM timings of the W8A8 FP8 GEMM (runtime/cuda/kernels/fp8_gemm.cu)
 * against cuBLAS fp16 on the same shapes, on a GPU.
 *
 * A benchmark, not a test (test_kernels checks the results). For each Llama-3-8B matrix
 * (N x K: 4096x4096, 6144x4096, 28672x4096, 4096x14336, 128256x4096) and M activation
 * rows (1, 16, 64, 256, 1024, 4096):
 *   fp8    qc_cuda_fp8_gemm as the backend calls it (the activations rounded to e4m3,
 *          dynamic per row, then cuBLASLt with per-row scales), float x in, float y out;
 *   fp16   cublasGemmEx, fp16 weights and activations, fp32 accumulation and out (the
 *          f16+cuBLAS path without its decode step);
 *   gemv   qc_cuda_fp8_gemv (M <= 8: the rounded codes times the weight codes on CUDA
 *          cores; the table's kind up to 8 rows);
 *   act    the activation rounding alone (step 1 of both), so the GEMM alone is fp8 - act;
 * each the median of 7 replays of a CUDA graph of 10 back-to-back calls (CUDA events), so
 * host work per call (descriptors, the algorithm lookup) is not timed: the engine
 * replays graphs too.
 *   bench_fp8 [M ...]          (default: the list above)
 * Prints one row per (shape, M): the times in us, fp16 over the faster fp8 kind, and that
 * kind's rate in TFLOP/s.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>

#include "kernels/fp8_act.h"
#include "kernels/matmul_dispatch.h"
#include "layout_fp8.h"

#define CK(x) \
	do { \
		cudaError_t e_ = (x); \
		if (e_ != cudaSuccess) { \
			fprintf(stderr, "bench_fp8: %s: %s\n", #x, cudaGetErrorString(e_)); \
			exit(1); \
		} \
	} while (0)

#define REPS 10
#define SAMPLES 7

static int cmp_f(const void *a, const void *b)
{
	const float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

static cudaStream_t st;

struct fp8_run {
	struct qc_cuda_mm_args a;
};

static int run_fp8(void *p)
{
	struct qc_err err = {0};
	int rc = qc_cuda_fp8_gemm(&((struct fp8_run *)p)->a, st, &err);
	if (rc)
		fprintf(stderr, "bench_fp8: fp8_gemm: %s\n", err.msg);
	return rc;
}

struct f16_run {
	cublasHandle_t h;
	int m, n, k;
	const void *w, *x;
	float *y;
};

static int run_gemv(void *p)
{
	struct qc_err err = {0};
	int rc = qc_cuda_fp8_gemv(&((struct fp8_run *)p)->a, st, &err);
	if (rc)
		fprintf(stderr, "bench_fp8: fp8_gemv: %s\n", err.msg);
	return rc;
}

static int run_act(void *p)
{
	const struct qc_cuda_mm_args *a = &((struct fp8_run *)p)->a;
	struct qc_err err = {0};
	/* the weights' activation scale is at the layout's end (0 here: dynamic) */
	const uint64_t act_off = (uint64_t)(a->n_out * a->n_in) + (((uint64_t)a->n_out * 4 + 15) & ~(uint64_t)15);
	uint8_t *ws = (uint8_t *)a->d_ws;
	int rc = qc_cuda_fp8_act_quant(a->d_x, a->ldx, a->n_rows, a->n_in, (const float *)(a->d_w + act_off),
				       ws + qc_cuda_fp8_ws_codes(), (float *)(ws + qc_cuda_fp8_ws_scales(a->n_in, a->n_rows)),
				       st, &err);
	if (rc)
		fprintf(stderr, "bench_fp8: act_quant: %s\n", err.msg);
	return rc;
}

static int run_f16(void *p)
{
	const struct f16_run *r = p;
	const float one = 1.0f, zero = 0.0f;
	if (cublasSetStream(r->h, st) != CUBLAS_STATUS_SUCCESS)
		return 1;
	return cublasGemmEx(r->h, CUBLAS_OP_T, CUBLAS_OP_N, r->n, r->m, r->k, &one, r->w, CUDA_R_16F, r->k, r->x,
			    CUDA_R_16F, r->k, &zero, r->y, CUDA_R_32F, r->n, CUBLAS_COMPUTE_32F,
			    CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS;
}

/* median microseconds of one call of f, from graph replays of REPS calls */
static float time_us(int (*f)(void *), void *p)
{
	cudaEvent_t e0, e1;
	cudaGraph_t g;
	cudaGraphExec_t ge;
	float t[SAMPLES];
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	if (f(p)) /* outside the capture first: the algorithm lookups happen here */
		exit(1);
	CK(cudaStreamSynchronize(st));
	CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
	for (int i = 0; i < REPS; i++)
		if (f(p))
			exit(1);
	CK(cudaStreamEndCapture(st, &g));
	CK(cudaGraphInstantiate(&ge, g, 0));
	CK(cudaGraphLaunch(ge, st));
	for (int s = 0; s < SAMPLES; s++) {
		CK(cudaEventRecord(e0, st));
		CK(cudaGraphLaunch(ge, st));
		CK(cudaEventRecord(e1, st));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&t[s], e0, e1));
		t[s] *= 1000.0f / REPS;
	}
	CK(cudaGraphExecDestroy(ge));
	CK(cudaGraphDestroy(g));
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	qsort(t, SAMPLES, sizeof t[0], cmp_f);
	return t[SAMPLES / 2];
}

int main(int argc, char **argv)
{
	static const int64_t shapes[][2] = {{4096, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}};
	int64_t ms[16] = {1, 2, 4, 8, 16, 64, 256, 1024, 4096};
	int n_m = 9;
	if (argc > 1) {
		n_m = 0;
		for (int i = 1; i < argc && n_m < 16; i++)
			ms[n_m++] = atoll(argv[i]);
	}
	int64_t max_m = 0;
	for (int i = 0; i < n_m; i++)
		max_m = ms[i] > max_m ? ms[i] : max_m;
	struct cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	cublasHandle_t h;
	if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
		return 1;
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	printf("bench_fp8 on %s: W8A8 FP8 (act quant + cuBLASLt, per-row scales) vs cuBLAS fp16 GemmEx\n", prop.name);
	printf("%-14s %6s %10s %10s %8s %10s %8s %9s\n", "N x K", "M", "gemm us", "gemv us", "act us", "fp16 us",
	       "fp16/fp8", "fp8 TF/s");
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		const int64_t n = shapes[s][0], k = shapes[s][1], ne[4] = {k, n, 1, 1};
		uint64_t bytes = 0;
		qc_layout_bytes(QC_LAYOUT_FP8_ROWS, QC_TYPE_F8A8, ne, &bytes);
		uint8_t *h_w = malloc(bytes);
		/* codes 0x00-0x77 positive and negative finite values; row scales 1/64; a = 0 */
		for (uint64_t i = 0; i < (uint64_t)(n * k); i++)
			h_w[i] = (uint8_t)((i * 2654435761u >> 13) & 0xf7);
		const float d = 1.0f / 64;
		for (int64_t r = 0; r < n; r++)
			memcpy(h_w + (uint64_t)(n * k) + 4 * (uint64_t)r, &d, 4);
		memset(h_w + (uint64_t)(n * k) + (((uint64_t)n * 4 + 15) & ~(uint64_t)15), 0, 16);
		uint8_t *d_w;
		CK(cudaMalloc((void **)&d_w, bytes + QC_CUDA_MM_PAD));
		CK(cudaMemcpy(d_w, h_w, bytes, cudaMemcpyHostToDevice));
		free(h_w);
		void *d_w16, *d_x16, *d_ws;
		float *d_x, *d_y;
		CK(cudaMalloc(&d_w16, (size_t)(n * k) * 2));
		CK(cudaMemset(d_w16, 0x21, (size_t)(n * k) * 2));
		CK(cudaMalloc(&d_x16, (size_t)(max_m * k) * 2));
		CK(cudaMemset(d_x16, 0x22, (size_t)(max_m * k) * 2));
		CK(cudaMalloc((void **)&d_x, (size_t)(max_m * k) * 4));
		CK(cudaMemset(d_x, 0x3e, (size_t)(max_m * k) * 4));
		CK(cudaMalloc((void **)&d_y, (size_t)(max_m * n) * 4));
		const uint64_t wsb = qc_cuda_fp8_gemm_ws(k, n, max_m, NULL);
		CK(cudaMalloc(&d_ws, wsb));
		for (int i = 0; i < n_m; i++) {
			const int64_t m = ms[i];
			struct fp8_run f = {{0}};
			f.a.d_w = d_w;
			f.a.type = QC_TYPE_F8A8;
			f.a.layout = QC_LAYOUT_FP8_ROWS;
			f.a.n_in = k;
			f.a.n_out = n;
			f.a.row_bytes = (uint64_t)k;
			f.a.mat_stride = bytes;
			f.a.d_x = d_x;
			f.a.ldx = k;
			f.a.x_div = 1;
			f.a.n_rows = m;
			f.a.d_y = d_y;
			f.a.ldy = n;
			f.a.d_ws = d_ws;
			f.a.ws_bytes = wsb;
			f.a.blas = h;
			struct f16_run g = {h, (int)m, (int)n, (int)k, d_w16, d_x16, d_y};
			const float tg = time_us(run_fp8, &f), tv = m <= 8 ? time_us(run_gemv, &f) : 0.0f;
			const float ta = time_us(run_act, &f), t16 = time_us(run_f16, &g);
			const float t8 = tv > 0.0f && tv < tg ? tv : tg; /* the faster of the two kinds */
			printf("%6lldx%-7lld %6lld %10.1f %10.1f %8.1f %10.1f %8.2f %9.1f\n", (long long)n, (long long)k,
			       (long long)m, tg, tv, ta, t16, t16 / t8,
			       2.0 * (double)m * (double)n * (double)k / (t8 * 1e-6) / 1e12);
			fflush(stdout);
		}
		cudaFree(d_w);
		cudaFree(d_w16);
		cudaFree(d_x16);
		cudaFree(d_x);
		cudaFree(d_y);
		cudaFree(d_ws);
	}
	cublasDestroy(h);
	return 0;
}
