/* verify.h — re-check a bundle: structure (done by qc_bundle_open), every tensor's
 * XXH3, and with deep set, that every value decodes to a finite float. */
#ifndef QC_VERIFY_H
#define QC_VERIFY_H

#include <stdbool.h>

#include "bundle.h"

/* Stops at the first bad tensor, named in err. *n_ok counts tensors that passed. */
int qc_verify_bundle(const struct qc_bundle *b, bool deep, uint64_t *n_ok, struct qc_err *err);

#endif
