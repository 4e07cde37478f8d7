/* tp_group.h — the ranks of one tensor-parallel run meeting in one process.
 *
 * Owns: struct qc_tp_group: size ranks (one thread each, backend_tp.c), a barrier,
 * the host all-reduce the CPU backend sums partial results with, and a small
 * shared slot a device backend passes its start-up data through (the CUDA
 * backend: rank 0's ncclUniqueId).
 * Why a host all-reduce at all: the CPU backend runs every rank's shard in one
 * process, which is how the sharding math is tested without GPUs (docs/tp.md).
 * The sum is taken in rank order 0, 1, .., size-1 for every element and written
 * to every rank's buffer, so all ranks hold the same bits afterwards (they make
 * the same decisions: routing, norms) and the result does not depend on timing.
 * Non-goals: the device all-reduce (runtime/cuda: NCCL), scheduling.
 */
#ifndef QC_TP_GROUP_H
#define QC_TP_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include "qc_err.h"

#define QC_TP_MAX 8          /* most ranks (--tp 1, 2, 4, 8) */
#define QC_TP_SLOT_BYTES 256 /* shared start-up data (an ncclUniqueId is 128) */

struct qc_tp_group;

/* A group of size ranks (1..QC_TP_MAX). QC_OK and *out, QC_EINVAL, QC_ENOMEM. */
int qc_tp_group_new(int size, struct qc_tp_group **out, struct qc_err *err);
void qc_tp_group_free(struct qc_tp_group *g); /* accepts NULL */
int qc_tp_group_size(const struct qc_tp_group *g);

/* Every rank calls it; returns when all have. */
void qc_tp_barrier(struct qc_tp_group *g);

/* Every rank calls it with its own buf of the same n floats; on return every
 * buf holds the element-wise sum over ranks, added in rank order (same bits on
 * every rank). Size 1: returns at once. QC_OK, or QC_ENOMEM (scratch), which
 * every rank then returns. */
int qc_tp_allreduce_f32(struct qc_tp_group *g, int rank, float *buf, int64_t n, struct qc_err *err);

/* QC_TP_SLOT_BYTES shared bytes: one rank writes, qc_tp_barrier, the others read. */
void *qc_tp_group_slot(struct qc_tp_group *g);

#endif
