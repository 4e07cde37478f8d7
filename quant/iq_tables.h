/* iq_tables.h — lookup tables of the i-quant, iq4 and MXFP4 decoders, in a
 * compact form, and the inline helpers that expand them.
 *
 * Encoding (made by tools/gen_iq_tables.py, defined in iq_tables.c): each
 * lattice grid row is one uint16 of level indices — 8 elements x 2 bits
 * (iq2xxs, iq2xs, iq2s, iq1s) or 4 elements x 3 bits (iq3xxs, iq3s), element
 * j in bits [b*j, b*j+b) — and qc_<grid>_levels maps an index to its value.
 * ~9 KiB instead of ~33 KiB. Sign bytes are 7 stored bits + even parity.
 * Invariant: the levels arrays are padded to 1 << bits entries, so any index
 * a corrupt block can produce stays in bounds.
 * Host and device share this file: under nvcc QC_TABLE_EXTERN declares nothing
 * and a .cu gets the tables by including iq_tables.c (runtime/cuda/kernels/
 * decode_tables.cuh); the helpers are QC_HOSTDEV and read levels through the
 * read-only data cache on the device.
 * Reference: llama.cpp ggml-common.h (iq*_grid, ksigns_iq2xs), OCP MX v1.0.
 */
#ifndef QC_IQ_TABLES_H
#define QC_IQ_TABLES_H

#include <stdint.h>

#include "qblock.h"

QC_TABLE_EXTERN(int8_t, qc_iq2xxs_levels, 4)
QC_TABLE_EXTERN(uint16_t, qc_iq2xxs_grid, 256)
QC_TABLE_EXTERN(int8_t, qc_iq2xs_levels, 4)
QC_TABLE_EXTERN(uint16_t, qc_iq2xs_grid, 512)
QC_TABLE_EXTERN(int8_t, qc_iq2s_levels, 4)
QC_TABLE_EXTERN(uint16_t, qc_iq2s_grid, 1024)
QC_TABLE_EXTERN(int8_t, qc_iq3xxs_levels, 8)
QC_TABLE_EXTERN(uint16_t, qc_iq3xxs_grid, 256)
QC_TABLE_EXTERN(int8_t, qc_iq3s_levels, 8)
QC_TABLE_EXTERN(uint16_t, qc_iq3s_grid, 512)
QC_TABLE_EXTERN(int8_t, qc_iq1s_levels, 4)
QC_TABLE_EXTERN(uint16_t, qc_iq1s_grid, 2048)
/* (16) iq4_nl/iq4_xs 4-bit code -> value, to be multiplied by the scale */
QC_TABLE_EXTERN(int8_t, qc_iq4nl_values, 16)
/* (16) E2M1 code -> 2 * value; pairs with qc_e8m0_to_f32_half() */
QC_TABLE_EXTERN(int8_t, qc_mxfp4_values, 16)

/* levels[i] (or any int8 table of this file); on the device an __ldg: the
 * tables are __device__ globals there (per-thread indices, which __constant__
 * memory would serialize). */
static inline QC_HOSTDEV int8_t qc_iq_level(const int8_t *levels, unsigned i)
{
#ifdef __CUDA_ARCH__
	return __ldg(levels + i);
#else
	return levels[i];
#endif
}

/* Expand grid row `code` of an 8-wide, 2-bit grid into out[0..7]. */
static inline QC_HOSTDEV void qc_iq_row8(uint16_t code, const int8_t *levels, int8_t out[8])
{
	for (int j = 0; j < 8; j++)
		out[j] = qc_iq_level(levels, (code >> (2 * j)) & 3u);
}

/* Expand grid row `code` of a 4-wide, 3-bit grid into out[0..3]. */
static inline QC_HOSTDEV void qc_iq_row4(uint16_t code, const int8_t *levels, int8_t out[4])
{
	for (int j = 0; j < 4; j++)
		out[j] = qc_iq_level(levels, (code >> (3 * j)) & 7u);
}

/* 8 sign bits from a 7-bit stored index: bit 7 makes the popcount even
 * (the quantizer flips the least important sign to get there). */
static inline QC_HOSTDEV uint8_t qc_iq_signs7(uint32_t idx7)
{
	uint32_t p = idx7 & 0x7f;
	p ^= p >> 4;
	p ^= p >> 2;
	p ^= p >> 1;
	return (uint8_t)((idx7 & 0x7f) | ((p & 1) << 7));
}

#endif
