/* bench_gemv.c — timings of the GGML-layout GEMV (runtime/cuda/kernels/gemv_q.cu) on a GPU.
 *
 * A benchmark, not a test (test_kernels checks the results): for each weight
 * type and each Llama-3-8B matrix shape, the time of one y = W x with 1, 2,
 * 4 and 8 activation rows, as the median over 7 replays of a CUDA graph of
 * launches that rotate over enough copies of the weights to keep them out of
 * the L2 (>= 256 MB in all), and the weight bytes over that time.
 *   bench_gemv [TYPE ...]     (default: the types a GGUF keeps in ggml blocks
 *                              on --target sm90, plus q4_0 and q8_0)
 * Weights are random bytes with bit 6 of every byte cleared, so fp16 scales
 * stay finite (values do not change the work a decoder does).
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemv_q.h"
#include "qtype.h"

#define CK(x) \
	do { \
		cudaError_t e_ = (x); \
		if (e_ != cudaSuccess) { \
			fprintf(stderr, "bench_gemv: %s: %s\n", #x, cudaGetErrorString(e_)); \
			exit(1); \
		} \
	} while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int cmp_float(const void *a, const void *b)
{
	const float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

/* n bytes of device memory holding the random weight pattern (64 MiB repeated) */
static uint8_t *dev_weights(size_t n)
{
	static uint8_t *h;
	const size_t hn = 64u << 20;
	if (!h) {
		h = malloc(hn);
		if (!h)
			exit(1);
		for (size_t i = 0; i < hn; i += 8) {
			const uint64_t r = rnd() & 0xbfbfbfbfbfbfbfbfull;
			memcpy(h + i, &r, 8);
		}
	}
	uint8_t *d;
	CK(cudaMalloc((void **)&d, n + QC_CUDA_MM_PAD));
	for (size_t off = 0; off < n; off += hn)
		CK(cudaMemcpy(d + off, h, n - off < hn ? n - off : hn, cudaMemcpyHostToDevice));
	return d;
}

/* median microseconds of one launch over copies of a (n_out x n_in) matrix */
static double time_one(enum qc_type t, int64_t n_out, int64_t n_in, int64_t n_rows, cudaStream_t st)
{
	const uint64_t rb = (uint64_t)(n_in / qc_types[t].block_elems) * qc_types[t].block_bytes;
	const uint64_t mb = rb * (uint64_t)n_out;
	int copies = (int)((256ull << 20) / mb + 1);
	copies = copies > 64 ? 64 : copies;
	const int launches = copies < 24 ? 24 : copies;
	uint8_t *d_w = dev_weights(mb * (uint64_t)copies);
	float *d_x, *d_y;
	CK(cudaMalloc((void **)&d_x, sizeof(float) * (size_t)(n_in * n_rows)));
	CK(cudaMalloc((void **)&d_y, sizeof(float) * (size_t)(n_out * n_rows)));
	float *hx = malloc(sizeof(float) * (size_t)(n_in * n_rows));
	for (int64_t i = 0; i < n_in * n_rows; i++)
		hx[i] = (float)((double)(rnd() >> 11) * 0x1p-53 * 2.0 - 1.0);
	CK(cudaMemcpy(d_x, hx, sizeof(float) * (size_t)(n_in * n_rows), cudaMemcpyHostToDevice));
	free(hx);
	struct qc_cuda_mm_args a = {
		.type = t, .layout = QC_LAYOUT_GGML, .n_in = n_in, .n_out = n_out, .row_bytes = rb,
		.mat_stride = mb, .d_x = d_x, .ldx = n_in, .x_div = 1, .n_rows = n_rows, .d_y = d_y, .ldy = n_out,
	};
	struct qc_err err = {0};
	a.d_w = d_w;
	if (qc_cuda_gemv_q(&a, st, &err)) { /* eager first: module load, attributes */
		fprintf(stderr, "bench_gemv: %s\n", err.msg);
		exit(1);
	}
	CK(cudaStreamSynchronize(st));
	cudaGraph_t g;
	cudaGraphExec_t ge;
	CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
	for (int i = 0; i < launches; i++) {
		a.d_w = d_w + (uint64_t)(i % copies) * mb;
		if (qc_cuda_gemv_q(&a, st, &err)) {
			fprintf(stderr, "bench_gemv: %s\n", err.msg);
			exit(1);
		}
	}
	CK(cudaStreamEndCapture(st, &g));
	CK(cudaGraphInstantiate(&ge, g, 0));
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaGraphLaunch(ge, st)); /* warm-up */
	float us[7];
	for (int r = 0; r < 7; r++) {
		CK(cudaEventRecord(e0, st));
		CK(cudaGraphLaunch(ge, st));
		CK(cudaEventRecord(e1, st));
		CK(cudaEventSynchronize(e1));
		float ms;
		CK(cudaEventElapsedTime(&ms, e0, e1));
		us[r] = ms * 1000.0f / (float)launches;
	}
	qsort(us, 7, sizeof us[0], cmp_float);
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	CK(cudaGraphExecDestroy(ge));
	CK(cudaGraphDestroy(g));
	CK(cudaFree(d_w));
	CK(cudaFree(d_x));
	CK(cudaFree(d_y));
	return us[3];
}

int main(int argc, char **argv)
{
	static const char *const defaults[] = {"q4_0", "q8_0", "q4_K", "q5_K", "q6_K", "q2_K", "q3_K",
					       "iq4_xs", "iq2_xxs", "iq3_s", "hq4", "f16", "bf16"};
	const char *const *names = argc > 1 ? (const char *const *)(argv + 1) : defaults;
	const int n_names = argc > 1 ? argc - 1 : (int)(sizeof defaults / sizeof defaults[0]);
	static const int64_t shapes[][2] = {{4096, 4096}, {1024, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096}};
	cudaStream_t st;
	CK(cudaStreamCreate(&st));
	struct cudaDeviceProp p;
	CK(cudaGetDeviceProperties(&p, 0));
	printf("bench_gemv on %s: us per launch (median of 7 graph replays), weight bytes / time\n", p.name);
	for (int k = 0; k < n_names; k++) {
		enum qc_type t = QC_TYPE_COUNT;
		for (int i = 0; i < QC_TYPE_COUNT; i++)
			if (qc_types[i].name && !strcmp(qc_types[i].name, names[k]))
				t = (enum qc_type)i;
		if (t == QC_TYPE_COUNT || !qc_cuda_gemv_q_supports(t)) {
			printf("%-8s: no such type with a device decoder\n", names[k]);
			continue;
		}
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
			const int64_t n_out = shapes[s][0], n_in = shapes[s][1];
			if (n_in % qc_types[t].block_elems)
				continue;
			const double bytes = (double)(n_in / qc_types[t].block_elems) * qc_types[t].block_bytes * (double)n_out;
			printf("%-8s %6lldx%-6lld", qc_types[t].name, (long long)n_out, (long long)n_in);
			for (int64_t rows = 1; rows <= 8; rows *= 2) {
				const double us = time_one(t, n_out, n_in, rows, st);
				printf("  rows %lld: %8.2f us %5.2f TB/s", (long long)rows, us, bytes / us * 1e-6);
			}
			printf("\n");
			fflush(stdout);
		}
	}
	CK(cudaStreamDestroy(st));
	return 0;
}
