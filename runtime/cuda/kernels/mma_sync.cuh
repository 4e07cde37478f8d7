/* mma_sync.cuh — the one warp-level tensor-core instruction the sm_80-era kernels
 * use (flash_attn.cu, marlin_gemm.cu, paged_attn_split.cu): c (16 x 8, fp32) += a (16 x 16
 * binary16, row) * b (16 x 8 binary16, col), fragments as the PTX ISA lays them out
 * for mma.m16n8k16 (lane = 4 * group + t: a0 row group cols 2t, 2t + 1; a1 row
 * group + 8; a2, a3 cols + 8; b0 rows 2t, 2t + 1 col group, b1 rows + 8; c0, c1 row
 * group cols 2t, 2t + 1, c2, c3 row group + 8). */
#ifndef QC_CUDA_MMA_SYNC_CUH
#define QC_CUDA_MMA_SYNC_CUH

#include <stdint.h>

static __device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
		     "{%8, %9}, {%0, %1, %2, %3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#endif
