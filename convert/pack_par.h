/* pack_par.h — repack one slice into a tensor-core layout on several threads. */
#ifndef QC_PACK_PAR_H
#define QC_PACK_PAR_H

#include <stdbool.h>
#include <stdint.h>

#include "layout.h"
#include "layout_marlin.h"
#include "qc_err.h"
#include "qtype.h"

/* out = slice `in` ({K = ne0, N = ne1} ggml rows of in_row bytes) packed in
 * layout l (not ggml); with e non-NULL also the kernel-value error of the
 * result (qc_marlin_error). The slice is cut into a fixed number of
 * stripe-aligned row ranges (each a packed matrix of its own), shared out to
 * up to n_threads threads (0: $QC_THREADS, else online CPUs), and their errors are combined in
 * range order: the bytes and the numbers do not depend on the thread count.
 * A layout that is not marlin (nvfp4_swz) is packed in one piece on this thread.
 * QC_OK, or the packer's error (the first range's in order). */
int qc_pack_slice_par(enum qc_layout l, enum qc_type type, int64_t ne0, int64_t ne1, const uint8_t *in,
		      uint64_t in_row, uint8_t *out, struct qc_marlin_err *e, int n_threads, struct qc_err *err);

#endif
