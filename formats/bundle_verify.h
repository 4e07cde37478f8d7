/* bundle_verify.h — every tensor's XXH3 checked on worker threads, beside whatever
 * the loader does meanwhile (the device upload, the tokenizer).
 *
 * Owns: a verification job over an open bundle: start spawns threads that take
 * tensors in file order and hash each straight from the mapping; finish joins them
 * and reports the first mismatching tensor in file order (the same one whatever the
 * thread count). Why threads and not the copy loop: the device upload copies the
 * tensor region through pinned staging on one thread; hashing on the others keeps
 * the load at the copy's speed (docs/serve.md "Verified loading").
 * Non-goals: the deep decode pass of `qconvert verify --deep`; dropping pages from
 * the process (the CPU backend computes from this same mapping).
 */
#ifndef QC_BUNDLE_VERIFY_H
#define QC_BUNDLE_VERIFY_H

#include "bundle.h"

struct qc_bundle_verify_job;

/* Start hashing b's tensors on n_threads (1..64) threads. b must outlive the job.
 * QC_OK and *out, or QC_ENOMEM / QC_EIO (thread creation) with *out NULL. */
int qc_bundle_verify_start(const struct qc_bundle *b, int n_threads, struct qc_bundle_verify_job **out,
			   struct qc_err *err);

/* Wait for the job and free it (accepts NULL: QC_OK). QC_OK when every tensor
 * hashes to its manifest XXH3; else QC_ECHECKSUM naming the first bad tensor in
 * file order, its offset and both hashes. */
int qc_bundle_verify_finish(struct qc_bundle_verify_job *j, struct qc_err *err);

/* Bytes the job hashes (the sum of the tensor sizes): for the caller's rate line. */
uint64_t qc_bundle_verify_bytes(const struct qc_bundle *b);

#endif
