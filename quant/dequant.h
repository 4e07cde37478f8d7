/* dequant.h — reference C block decoders/encoders, one per qtype.def row.
 *
 * Contract for every qc_dequant_row_<T>(src, dst, n): src holds n/block_elems
 * consecutive blocks (any alignment), dst receives n floats in logical order,
 * n is a multiple of block_elems (caller checks). Results are bit-exact with
 * llama.cpp's to_float for the same blocks. No allocation, no failure.
 * qc_quant_row_<T>: float -> blocks, round-to-nearest reference encoders.
 */
#ifndef QC_DEQUANT_H
#define QC_DEQUANT_H

#include <stdint.h>

#define QC_TYPE(E, id, name, be, bb, fam, q, tol) \
	void qc_dequant_row_##E(const void *src, float *dst, int64_t n);
#include "qtype.def"
#undef QC_TYPE

void qc_quant_row_F32(const float *src, void *dst, int64_t n);
void qc_quant_row_F16(const float *src, void *dst, int64_t n);
void qc_quant_row_BF16(const float *src, void *dst, int64_t n);
void qc_quant_row_Q8_0(const float *src, void *dst, int64_t n);
void qc_quant_row_Q4_0(const float *src, void *dst, int64_t n);
/* one whole row (per-row scale), activation scale 0 */
void qc_quant_row_F8A8(const float *src, void *dst, int64_t n);
/* quant_k.c: plain min/max K-quant encoders (not llama.cpp's search) */
void qc_quant_row_Q4_K(const float *src, void *dst, int64_t n);
void qc_quant_row_Q5_K(const float *src, void *dst, int64_t n);
void qc_quant_row_Q6_K(const float *src, void *dst, int64_t n);

#endif
