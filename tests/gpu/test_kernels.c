/* test_kernels.c — every CUDA op in runtime/cuda/kernels/ against its same-named C
 * reference in runtime/ops/, on fresh random inputs of several shapes (odd ones
 * included), device outputs poisoned with NaN before every launch.
 * Rules: decoders (embed, dequant_f16), kv_store and moe_combine must match bit
 * for bit; matmuls must satisfy FA2's rule against an fp64 truth:
 * err(gpu) <= 2 * err(plain same-precision C reference) + n_in * 2^-24 * sum|w x|
 * (the last term: the textbook bound of any float summation order); the other
 * ops a relative max error. Prints max abs error, NMSE and the first bad index.
 * Every type with a device decoder is covered by looping over QC_TYPE_COUNT.
 * The comparator gets a deliberately wrong output that must fail.
 * QC_GPU_TEST_QUICK=1 shrinks the shapes (for compute-sanitizer runs);
 * QC_GPU_TEST_ONLY=attention runs the attention kernels' tests alone (a
 * sanitizer run of a changed attention kernel in a short device call).
 * One binary: this file (main, the order of the tests) + kernels_harness.h +
 * kernels_matmul.c, kernels_ops.c, kernels_attn.c.
 */
#include "kernels_harness.h"

/* the counters every file's CHECK adds to (check.h, CHECK_SHARED_COUNTERS) */
int check_passed_, check_failed_;
uint64_t rng = 0x243f6a8885a308d3u;
bool quick;

int main(void)
{
	int n_dev = 0;
	quick = getenv("QC_GPU_TEST_QUICK") && *getenv("QC_GPU_TEST_QUICK") == '1';
	if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1) {
		CHECK(0, "no CUDA device: test_kernels needs one (make test-gpu runs on the GPU machine)");
		return check_report("test_kernels");
	}
	/* the comparator must catch a wrong value and a NaN */
	{
		float a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3.01f, 4}, c[4] = {1, NAN, 3, 4};
		CHECK(compare(b, a, 4, 1e-3).first_bad == 2, "comparator misses a wrong element");
		CHECK(compare(c, a, 4, 1e9).first_bad == 1, "comparator misses a NaN");
	}
	const char *only = getenv("QC_GPU_TEST_ONLY");
	const bool attn_only = only && !strcmp(only, "attention");
	if (only && *only && !attn_only) {
		CHECK(0, "QC_GPU_TEST_ONLY=%s: only 'attention' is known", only);
		return check_report("test_kernels");
	}
	cublasHandle_t blas;
	CHECK(cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
	if (attn_only)
		goto attention;
	printf("decoders (embed, dequant_f16) vs qc_dequant_row_*:\n");
	for (int t = 0; t < QC_TYPE_COUNT; t++)
		if (has_decoder((enum qc_type)t))
			test_decoders((enum qc_type)t);
	printf("matmuls vs fp64 truth (tol = 2 x plain reference + float bound):\n");
	for (int t = 0; t < QC_TYPE_COUNT; t++)
		if (has_decoder((enum qc_type)t))
			test_matmul_type((enum qc_type)t, blas);
	printf("nvfp4_swz (CUTLASS block-scale tiles) vs fp64 truth (same rule):\n");
	test_nvfp4_swz(blas);
	printf("W8A8 FP8 (fp8_rows, cuBLASLt) vs the reference's double sums:\n");
	test_fp8_gemm(blas);
	printf("grouped MoE GEMM vs fp64 truth (same rule, plain reference with fp16 operands):\n");
	test_moe_gemm();
	printf("other ops:\n");
	test_rms_norm();
	test_rope();
	test_add_rms_norm();
	test_rope_kv();
	test_elementwise();
	test_gemma_elementwise();
	test_act_gather();
	test_argmax(128256);
	test_argmax(1001);
	test_argmax(7);
	test_topk(128256);
	test_topk(1001);
	test_topk(130);
attention:
	test_attention(16, 64, 8, 2, 0);
	test_attention(7, 100, 6, 6, 0);  /* hd 100: the split path refuses it, the one-block path runs twice */
	test_attention(32, 128, 4, 1, 0);
	test_attention(16, 128, 8, 2, 1); /* long context: many chunks */
	test_attention(16, 80, 28, 4, 1); /* 7 query heads per K/V head, hd 80 */
	test_attention(16, 96, 12, 4, 1); /* hd 96 (Phi-3): three 32-dim segments, a half 64-dim group */
	test_attention(8, 256, 16, 1, 0); /* hd 256, 16 query heads per K/V head: both 8-head MMA tiles */
	test_attention(16, 128, 24, 2, 1); /* 12 query heads per K/V head: the second 8-head tile half used */
	test_attention(16, 256, 4, 2, 0);  /* hd 256 with few query heads (Gemma): the big build, one tile */
	for (int fp8 = 0; fp8 < 2; fp8++) { /* RoPE and the store inside decode attention */
		test_attn_rope_fused(16, 128, 32, 8, 128, QC_ROPE_NORM, 5, 0, fp8); /* Llama-3-8B's heads */
		test_attn_rope_fused(16, 128, 32, 8, 128, QC_ROPE_NORM, 3, 1, fp8); /* own rows past 64 */
		test_attn_rope_fused(16, 64, 9, 3, 64, QC_ROPE_NEOX, 4, 0, fp8);    /* SmolLM2's heads, neox */
		test_attn_rope_fused(7, 128, 8, 2, 64, QC_ROPE_NEOX, 6, 1, fp8);    /* partial rotary, bt 7 */
		test_attn_rope_fused(16, 96, 12, 4, 32, QC_ROPE_NORM, 3, 0, fp8);   /* hd 96, 32 rotated */
	}
	test_attn_cap_window(16, 64, 8, 2, 3.0f, 24);    /* cap and window, GQA 4 */
	test_attn_cap_window(7, 128, 4, 4, 5.0f, 40);    /* 7-token blocks: the first columns released */
	test_attn_cap_window(16, 256, 8, 4, 3.0f, 33);   /* Gemma 2 2B's heads (hd 256, GQA 2) */
	test_attn_cap_window(16, 256, 8, 4, 4.0f, 0);    /* Gemma 2's global layers: cap only */
	test_attn_cap_window(16, 96, 32, 32, 0.0f, 40);  /* Phi-3 mini's heads: window only */
	test_attn_cap_window(16, 64, 8, 2, 0.0f, 4096);  /* a window past the context: plain attention */
	{
		/* runs of 16, 33, 200, 700 from position 0 and later, decode tokens, a run
		 * of 15 (below the flash minimum) right before another sequence whose
		 * positions continue it (no run across sequences) */
		const int L = quick ? 120 : 700, M = quick ? 64 : 200;
		const struct fa_entry e1[] = {{0, 15}, {15, 17}, {0, 16}, {40, 33}, {99, 1}, {7, 1}};
		const struct fa_entry e2[] = {{0, M}, {300, 1}, {150, L}, {30, 15}, {0, 1}};
		const struct fa_entry e3[] = {{0, 33}, {500, M}, {5, 16}, {64, 1}};
		const struct fa_entry e4[] = {{0, L}, {90, 33}, {20, 1}};
		const struct fa_entry e5[] = {{3, M}, {0, 17}, {31, 1}};
		const struct fa_entry e6[] = {{0, 100}, {60, 40}, {10, 1}};
		const struct fa_entry e7[] = {{10, 50}, {0, 1}, {0, 16}};
		test_flash_attn(16, 64, 2, 2, e1, 6);    /* GQA 1 */
		test_flash_attn(7, 128, 8, 2, e2, 5);    /* GQA 4, 7-token blocks */
		test_flash_attn(16, 128, 16, 2, e3, 4);  /* GQA 8 */
		test_flash_attn(7, 64, 8, 1, e4, 3);     /* GQA 8, one K/V head */
		test_flash_attn(16, 80, 28, 4, e5, 3);   /* GQA 7 (9-token tiles), hd 80 */
		test_flash_attn(7, 256, 4, 2, e6, 3);    /* hd 256: Q re-read from shared memory */
		test_flash_attn(16, 32, 16, 1, e7, 3);   /* GQA 16 (4-token tiles), hd 32 */
		test_flash_attn(16, 128, 4, 4, e4, 3);   /* GQA 1, hd 128 */
		/* the fp8 pool: its store bit for bit (hd 8 and 100: no rotation, blocks
		 * under 16; hd 80: blocks of 16), then every attention path reading it */
		test_kv_store_e4m3(16, 64, 8, 2);
		test_kv_store_e4m3(7, 100, 6, 6);
		test_kv_store_e4m3(16, 128, 32, 8);
		test_kv_store_e4m3(8, 80, 28, 4);
		test_kv_store_e4m3(16, 8, 4, 2);
		test_kv_store_e4m3(16, 96, 12, 4);
		test_kv_store_e4m3(16, 256, 16, 1);
		test_kv_store_e4m3(8, 384, 4, 2); /* past the registers' 256: kv8_rotate's shared-memory stages */
		test_rope_kv_e4m3();
		const struct fa_entry d1[] = {{quick ? 180 : 1400, 1}, {0, 20}, {17, 1}, {5, 1}};
		const struct fa_entry d2[] = {{0, 12}, {30, 1}, {2, 1}};
		test_attention_fp8(16, 64, 2, 2, e1, 6);    /* flash GQA 1, decode tokens */
		test_attention_fp8(7, 128, 8, 2, e2, 5);    /* GQA 4, 7-token blocks */
		test_attention_fp8(16, 80, 28, 4, e5, 3);   /* GQA 7, hd 80 */
		test_attention_fp8(7, 256, 4, 2, e6, 3);    /* hd 256 */
		test_attention_fp8(16, 128, 8, 2, d1, 4);   /* long context: many split-K chunks */
		test_attention_fp8(7, 100, 6, 6, d2, 3);    /* hd 100: one block per head only */
	}
	if (!attn_only) {
		test_moe(8, 2, 1);
		test_moe(60, 4, 0);
	}
	cublasDestroy(blas);
	return check_report("test_kernels");
}
