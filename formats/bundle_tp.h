/* bundle_tp.h — the tensor-parallel part of a bundle (`qconvert --tp N`, docs/tp.md):
 * the manifest's "tp" object and where each rank's members lie.
 *
 * Owns: reading and checking "tp": {"size": N, "vocab": [[v0, n0], ...]} against the
 * manifest (size 1..QC_TP_MAX; vocabulary ranges contiguous from 0, inside int32,
 * covering config "n_vocab"), the member names "tp<r>.<name>", and each rank's byte
 * range (its members written rank 0 first, so ranges are ascending and disjoint).
 * qc_bundle_open calls qc_bundle_tp_read, so an open bundle has a valid "tp" (or
 * none); the runtime calls it again to learn the ranks (it is cheap: no data read).
 * Non-goals: how a tensor was split (convert/tp_rules.h owns the split table).
 */
#ifndef QC_BUNDLE_TP_H
#define QC_BUNDLE_TP_H

#include <stddef.h>
#include <stdint.h>

#include "bundle.h"
#include "qc_err.h"

#define QC_TP_MAX 8                /* ranks a bundle may be sharded for */
#define QC_TP_PREFIX_MAX 8         /* "tp7." + NUL, with room */

struct qc_bundle_tp {
	int32_t size;              /* ranks; 0: a plain bundle (no "tp" object) */
	int32_t vocab0[QC_TP_MAX]; /* rank r's token ids are [vocab0[r], vocab0[r] + n_vocab[r]) */
	int32_t n_vocab[QC_TP_MAX];
	int32_t n_vocab_all;       /* config "n_vocab": the ranges' sum */
	uint64_t lo[QC_TP_MAX], hi[QC_TP_MAX]; /* file bytes [lo, hi) holding rank r's members
						  (first offset, end of the last) */
	uint64_t n_tensors[QC_TP_MAX];         /* members of rank r */
};

/* Fill *tp from bundle b's manifest. A bundle without "tp" gives size 0 and QC_OK.
 * Otherwise every check in the header comment, and: every member is named
 * "tp<r>.<name>" with r < size, every rank has members, and all of rank r's members
 * lie before rank r+1's. QC_EFORMAT naming the bundle (and the member) otherwise. */
int qc_bundle_tp_read(const struct qc_bundle *b, struct qc_bundle_tp *tp, struct qc_err *err);

/* The rank in member name `name` ("tp3.blk.0.attn_q.weight" -> 3, *base -> "blk.0...."),
 * or -1 when it has no rank prefix (base then name). */
int qc_bundle_tp_rank_of(const char *name, const char **base);

/* Rank r's member of original tensor `name` ("tp<r>.<name>"); NULL when absent. */
const struct qc_bundle_tensor *qc_bundle_tp_find(const struct qc_bundle *b, int rank, const char *name);

/* The fused member of rank r holding part `name` (as qc_bundle_find_part with the
 * "tp<r>." prefix); NULL when none. */
const struct qc_bundle_tensor *qc_bundle_tp_find_part(const struct qc_bundle *b, int rank, const char *name,
						      const struct qc_bundle_part **part);

#endif
