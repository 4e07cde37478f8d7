/* kernels_harness.h — the shared harness of tests/gpu/test_kernels (one binary built from
 * test_kernels.c and kernels_*.c): one random stream (rng, so the inputs do not depend on
 * how the files are split), QC_GPU_TEST_QUICK's flag, device copies, NaN-poisoned output
 * buffers, random in-range blocks of any type, and the comparator (max abs error, NMSE,
 * first bad index; NaN counts). Declares each file's test entry points, which main() in
 * test_kernels.c calls in a fixed order. CHECK counts are shared (check.h,
 * CHECK_SHARED_COUNTERS). Bloat: no tolerances here — each op states its own rule.
 */
#ifndef QC_KERNELS_HARNESS_H
#define QC_KERNELS_HARNESS_H

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_SHARED_COUNTERS
#include "../check.h"
#include "kernels/gemv_q.h"
#include "ops.h"

#include <cublas_v2.h>

/* the one xorshift state (test_kernels.c), and QC_GPU_TEST_QUICK=1: smaller shapes */
extern uint64_t rng;
extern bool quick;

static inline uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static inline float frand(float lo, float hi)
{
	return lo + (hi - lo) * (float)(rnd() & 0xffffff) / (float)0x1000000;
}

static inline void fill(float *x, size_t n, float lo, float hi)
{
	for (size_t i = 0; i < n; i++)
		x[i] = frand(lo, hi);
}

/* device copy of n bytes of h */
static inline void *up(const void *h, size_t n)
{
	void *d = NULL;
	if (cudaMalloc(&d, n ? n : 16) != cudaSuccess)
		return NULL;
	if (h)
		cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);
	return d;
}

/* n bytes of device memory filled with 0xff: NaN as float, NaN as fp16 */
static inline void *poisoned(size_t n)
{
	void *d = up(NULL, n);
	if (d)
		cudaMemset(d, 0xff, n);
	return d;
}

static inline void down(void *h, const void *d, size_t n)
{
	cudaDeviceSynchronize();
	cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost);
}

struct cmp {
	double max_abs, nmse, ref_max;
	long first_bad;            /* first index over tol, -1 when none */
	bool nan;
};

/* got vs want: max |diff|, NMSE, first index where |diff| > tol (NaN counts). */
static inline struct cmp compare(const float *got, const float *want, size_t n, double tol)
{
	struct cmp c = {0, 0, 0, -1, false};
	double se = 0, sw = 0;
	for (size_t i = 0; i < n; i++) {
		const double d = fabs((double)got[i] - (double)want[i]);
		if (!(d == d) || !isfinite(got[i])) {
			c.nan = true;
			if (c.first_bad < 0)
				c.first_bad = (long)i;
			continue;
		}
		c.max_abs = d > c.max_abs ? d : c.max_abs;
		c.ref_max = fabs(want[i]) > c.ref_max ? fabs(want[i]) : c.ref_max;
		se += d * d;
		sw += (double)want[i] * want[i];
		if (d > tol && c.first_bad < 0)
			c.first_bad = (long)i;
	}
	c.nmse = sw > 0 ? se / sw : se;
	return c;
}

static inline bool report(const char *what, struct cmp c, double tol)
{
	const bool ok = c.first_bad < 0 && !c.nan;
	printf("  %-44s max_abs %.3g (tol %.3g) nmse %.3g%s", what, c.max_abs, tol, c.nmse, ok ? "\n" : "");
	if (!ok)
		printf("  FIRST BAD at %ld%s\n", c.first_bad, c.nan ? " (NaN/inf)" : "");
	return ok;
}

/* true when the block at blk decodes to finite values of at most 1e4 (weights
 * are never near the fp16 range: huge values overflow the fp16 GEMM feed) */
static inline bool block_in_range(const struct qc_type_traits *tt, const uint8_t *blk)
{
	float tmp[256];
	tt->dequant_row(blk, tmp, tt->block_elems);
	for (int64_t i = 0; i < tt->block_elems; i++)
		if (!isfinite(tmp[i]) || fabsf(tmp[i]) > 1e4f)
			return false;
	return true;
}

/* Random blocks of type t: random bytes; a block out of range has bit 6 of
 * every byte cleared (fp16 and f32 scales then stay below 2), and one still out
 * of range (an MXFP4 E8M0 exponent keeps its top bit) is drawn again. */
static inline void rand_blocks(enum qc_type t, uint8_t *dst, int64_t n_elems)
{
	const struct qc_type_traits *tt = &qc_types[t];
	const int64_t nb = n_elems / tt->block_elems;
	for (int64_t b = 0; b < nb; b++) {
		uint8_t *blk = dst + b * tt->block_bytes;
		for (int tries = 0; tries < 100; tries++) {
			for (int64_t i = 0; i < tt->block_bytes; i++)
				blk[i] = (uint8_t)rnd();
			if (tt->family == QC_FAMILY_FLOAT) { /* plain floats: keep them in [-2, 2] */
				float v = frand(-2.0f, 2.0f);
				tt->quant_row(&v, blk, 1);
				break;
			}
			if (block_in_range(tt, blk))
				break;
			for (int64_t i = 0; i < tt->block_bytes; i++)
				blk[i] &= 0xbf;
			if (block_in_range(tt, blk))
				break;
		}
	}
}

static inline bool has_decoder(enum qc_type t)
{
	return qc_types[t].block_elems && qc_cuda_gemv_q_supports(t);
}

/* Flash prefill attention: one step's entries, each n tokens of its own
 * sequence at positions start..start+n-1 (positions before start cached). */
struct fa_entry {
	int start, n;
};

/* kernels_matmul.c: weight decoders (bit-exact) and every matmul vs an fp64 truth */
void test_decoders(enum qc_type t);
void test_matmul_type(enum qc_type t, cublasHandle_t blas);
void test_nvfp4_swz(cublasHandle_t blas);
void test_fp8_gemm(cublasHandle_t blas);  /* kernels_fp8.c: W8A8 FP8 on cuBLASLt */
void test_moe_gemm(void);
/* kernels_ops.c: norms, RoPE, the fused add + norm and RoPE + K/V store, elementwise,
 * gathers, argmax/top-k, MoE routing */
void test_rms_norm(void);
void test_rope(void);
void test_add_rms_norm(void);
void test_rope_kv(void);
void test_elementwise(void);
void test_gemma_elementwise(void);
void test_act_gather(void);
void test_argmax(int32_t n);
void test_topk(int32_t n);
void test_moe(int n_expert, int k, int norm);
/* kernels_attn.c: K/V store, paged attention, flash prefill attention */
void test_attention(int bt, int hd, int n_head, int n_head_kv, int long_ctx);
void test_attn_cap_window(int bt, int hd, int n_head, int n_head_kv, float softcap, int window);
void test_attn_rope_fused(int bt, int hd, int n_head, int n_head_kv, int nr, int mode, int n_seq, int long_ctx,
			  int fp8);
void test_flash_attn(int bt, int hd, int n_head, int n_head_kv, const struct fa_entry *ent, int n_ent);
/* flash attention's first-order error bound (kernels_attn.c, derived there) */
double fa_tol(double vmax, double S, int hd, int n, double q_u);
void test_kv_store_e4m3(int bt, int hd, int n_head, int n_head_kv);
void test_rope_kv_e4m3(void);
void test_attention_fp8(int bt, int hd, int n_head, int n_head_kv, const struct fa_entry *ent, int n_ent);

#endif
