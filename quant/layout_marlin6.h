/* layout_marlin6.h — marlin_i6 (layout id 6): q6_K's blocks in marlin_i4's tile order,
 * lossless.
 *
 * Owns: the byte geometry of marlin_i6, the pack of one [N rows, K] q6_K matrix, the
 * exact unpack back to q6_K blocks and the (zero) error of the kernel's values.
 * Byte layout (docs/layout-marlin.md §marlin_i6): stripes of 64 rows; per 32 k a
 * 1536-byte unit (two marlin_i4 tiles of low nibbles, then a 512-byte plane of the
 * codes' high two bits), then the stripe's int8 sub-block scales, then its fp16
 * super-block scales. Same bytes as ggml (K·210/256 a row), nothing rounded.
 * Only layout_marlin.c calls these: its public qc_marlin_* functions check the fit
 * (q6_K, K a multiple of 256, N of 64) and delegate here for QC_LAYOUT_MARLIN_I6.
 */
#ifndef QC_LAYOUT_MARLIN6_H
#define QC_LAYOUT_MARLIN6_H

#include <stdint.h>

#include "layout_marlin.h"

/* Bytes of one 64-row stripe for rows of k elements (k a multiple of 256):
 * 64 · k·210/256. */
uint64_t qc_marlin6_stripe_bytes(int64_t k);

/* Pack one slice: rows = ne[1] q6_K rows of ne[0] elements, out = ne[1]·ne[0]·210/256
 * bytes. Caller checked the fit. Any bits are kept (NaN/Inf d too); QC_ENOMEM for
 * its one-stripe code buffer. */
int qc_marlin6_pack_slice(const int64_t ne[4], const uint8_t *rows, uint8_t *out, struct qc_err *err);

/* q6_K rows [row0, row0+n_rows) of the flattened [ne[1]·ne[2]·ne[3], ne[0]] view back
 * from packed, into out. Caller checked the fit; never fails. */
void qc_marlin6_unpack_rows(const int64_t ne[4], const uint8_t *packed, uint64_t row0, uint64_t n_rows,
			    uint8_t *out);

/* *e over the whole tensor: the kernel's value (fp16→f32(d)·sc)·(q − 32), read from
 * the packed bytes, against ggml's decoder on the unpacked block. Max 0 for finite d
 * (NaN where d or the product is). Caller checked the fit. */
void qc_marlin6_error(const int64_t ne[4], const uint8_t *packed, struct qc_marlin_err *e);

#endif
