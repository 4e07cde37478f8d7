/* block_reduce.cuh — block-wide float sum / max for the row kernels.
 *
 * Owns: two device helpers over a whole thread block (blockDim.x a multiple
 * of 32, at most 1024): warp shuffle tree, then warp 0 over the per-warp
 * partials in shared memory. Fixed order, so results are deterministic.
 * Every thread gets the result. Non-goals: other operators, partial blocks.
 */
#ifndef QC_CUDA_BLOCK_REDUCE_CUH
#define QC_CUDA_BLOCK_REDUCE_CUH

enum qc_red_op { QC_RED_SUM, QC_RED_MAX };

template <enum qc_red_op OP> static __device__ __forceinline__ float red2(float a, float b)
{
	if constexpr (OP == QC_RED_SUM)
		return a + b;
	else
		return fmaxf(a, b);
}

template <enum qc_red_op OP> static __device__ float block_reduce(float v)
{
	__shared__ float part[32];
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	for (int off = 16; off > 0; off >>= 1)
		v = red2<OP>(v, __shfl_xor_sync(0xffffffffu, v, off));
	__syncthreads(); /* part may still be read by a previous call */
	if (lane == 0)
		part[w] = v;
	__syncthreads();
	if (w == 0) {
		v = lane < nw ? part[lane] : (OP == QC_RED_SUM ? 0.0f : -INFINITY);
		for (int off = 16; off > 0; off >>= 1)
			v = red2<OP>(v, __shfl_xor_sync(0xffffffffu, v, off));
		if (lane == 0)
			part[0] = v;
	}
	__syncthreads();
	return part[0];
}

#endif
