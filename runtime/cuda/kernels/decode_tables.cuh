/* decode_tables.cuh — the device copy of the i-quant, iq4 and MXFP4 lookup tables.
 *
 * Owns: one include of quant/iq_tables.c, the tables' only definition
 * (tools/gen_iq_tables.py). Under nvcc qblock.h's QC_TABLE_BEGIN makes each a
 * `static const __device__` array of the including translation unit: global
 * memory read through __ldg (qc_iq_level, qc_dev_grid), as the decoders index
 * per thread and __constant__ memory serializes divergent indices. No
 * relocatable device code: each .cu including decode.cuh has its ~9 KiB copy.
 * Invariant: host (quant/dequant_iq.c, dequant_fp4.c) and device decoders
 * read the same data; nothing is copied by hand.
 * Reference: llama.cpp ggml-common.h (iq*_grid, kvalues_iq4nl, kvalues_mxfp4).
 */
#ifndef QC_CUDA_DECODE_TABLES_CUH
#define QC_CUDA_DECODE_TABLES_CUH

#include "iq_tables.c"

/* Row i of a compact grid (iq_tables.h encoding), through the read-only cache. */
static __device__ __forceinline__ uint16_t qc_dev_grid(const uint16_t *grid, unsigned i)
{
	return __ldg(grid + i);
}

#endif
