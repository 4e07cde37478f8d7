/* bench_copy.c — the device's copy rate, the roofline every decode number is put against.
 *
 * A benchmark, not a test: one device-to-device cudaMemcpy of SIZE bytes (default
 * 1 GiB, far past the L2), timed with events over 20 copies after 3 warm-ups,
 * median of 5 such rounds. The rate counts bytes read plus bytes written (a copy
 * moves 2 x SIZE through device memory): the ceiling a kernel that streams its
 * weights can hope for, which tools/gpu_compare.sh divides each decode step's
 * weight bytes per second by (the roofline %).
 *   bench_copy [MiB]
 * Last line: "copy rate (read + write): X GB/s" (GB = 1e9 bytes).
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x) \
	do { \
		cudaError_t e_ = (x); \
		if (e_ != cudaSuccess) { \
			fprintf(stderr, "bench_copy: %s: %s\n", #x, cudaGetErrorString(e_)); \
			exit(1); \
		} \
	} while (0)

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
	if (mib < 64 || mib > 16384) {
		fprintf(stderr, "usage: bench_copy [MiB, 64..16384]\n");
		return 2;
	}
	size_t n = mib << 20;
	void *d_a, *d_b;
	CK(cudaMalloc(&d_a, n));
	CK(cudaMalloc(&d_b, n));
	/* not zeros: a copy engine need not care, but nothing here should run on zeros */
	CK(cudaMemset(d_a, 0x5a, n));
	cudaEvent_t t0, t1;
	CK(cudaEventCreate(&t0));
	CK(cudaEventCreate(&t1));
	for (int i = 0; i < 3; i++)
		CK(cudaMemcpy(d_b, d_a, n, cudaMemcpyDeviceToDevice));
	float rate[5];
	for (int r = 0; r < 5; r++) {
		CK(cudaEventRecord(t0, 0));
		for (int i = 0; i < 20; i++)
			CK(cudaMemcpyAsync(i & 1 ? d_a : d_b, i & 1 ? d_b : d_a, n, cudaMemcpyDeviceToDevice, 0));
		CK(cudaEventRecord(t1, 0));
		CK(cudaEventSynchronize(t1));
		float ms;
		CK(cudaEventElapsedTime(&ms, t0, t1));
		rate[r] = (float)(2.0 * 20.0 * (double)n / (ms * 1e-3) / 1e9);
		printf("round %d: %.1f GB/s\n", r, rate[r]);
	}
	qsort(rate, 5, sizeof rate[0], cmp_float);
	struct cudaDeviceProp p;
	CK(cudaGetDeviceProperties(&p, 0));
	printf("device: %s\n", p.name);
	printf("copy rate (read + write): %.1f GB/s\n", rate[2]);
	CK(cudaFree(d_a));
	CK(cudaFree(d_b));
	return 0;
}
