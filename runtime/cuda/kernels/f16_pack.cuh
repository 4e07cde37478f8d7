/* f16_pack.cuh — eight floats to fp16 in one 16-byte store: the activation rounding
 * the marlin tensor-core paths add (marlin_mm.cu's rows_to_f16_x8, marlin_moe.cu's
 * gather of the sorted expert rows), one definition so both round alike. */
#ifndef QC_CUDA_F16_PACK_CUH
#define QC_CUDA_F16_PACK_CUH

#include <cuda_fp16.h>
#include <stdint.h>

/* dst[0..7] = fp16 (round to nearest even) of u.x .. u.w, v.x .. v.w; dst 16-byte aligned. */
static __device__ __forceinline__ void qc_store_f16x8(__half *dst, float4 u, float4 v)
{
	union {
		__half2 h[4];
		uint4 q;
	} o;
	o.h[0] = __floats2half2_rn(u.x, u.y);
	o.h[1] = __floats2half2_rn(u.z, u.w);
	o.h[2] = __floats2half2_rn(v.x, v.y);
	o.h[3] = __floats2half2_rn(v.z, v.w);
	*(uint4 *)dst = o.q;
}

#endif
