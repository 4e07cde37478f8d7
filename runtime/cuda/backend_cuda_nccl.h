/* backend_cuda_nccl.h — NCCL, loaded at run time, for the CUDA backend's tensor
 * parallelism (docs/tp.md, docs/cuda.md "Tensor parallelism").
 *
 * Owns: finding and loading libnccl.so.2 once per process ($QC_NCCL_LIB, a file or
 * the folder holding it, then the loader's default search: the CUDA toolkit's
 * packaged build, or NVIDIA's nvidia-nccl-cu13 wheel on LD_LIBRARY_PATH), the few
 * functions the backend calls, the version floor, NCCL_NVLS_ENABLE=0 before any
 * NCCL code runs, error text naming the call, and the start-up agreement of the
 * ranks of a group (every rank says whether it got this far; rank 0's unique id
 * travels through the group's slot).
 * Why at run time: a build on a machine without NCCL (CI) still builds and runs
 * every single-GPU path; only --tp needs the library, and says how to get it.
 * The types are declared here with NCCL's ABI values (nccl.h: ncclUniqueId is 128
 * bytes, ncclFloat32 = 7, ncclSum = 0, results and enums are ints, cudaStream_t
 * a pointer), so no NCCL header is needed to build (tests/gpu/test_tp.c checks
 * them against nccl.h where it exists). No CUDA header either: tests/test_cuda_nccl.c
 * runs this file on the CPU.
 * Non-goals: the communicator's life and the all-reduces (backend_cuda_tp.c).
 */
#ifndef QC_BACKEND_CUDA_NCCL_H
#define QC_BACKEND_CUDA_NCCL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qc_err.h"
#include "tp_group.h"

/* 2.18.0: the oldest release this backend relies on: stream capture of collectives
 * into CUDA graphs mixed with eager calls on one communicator (2.9+, mixing 2.14+),
 * ncclCommInitRank from one thread per rank in one process, ncclGetLastError
 * (2.13+), and ncclCommDestroy / ncclCommAbort as intra-node collectives. */
#define QC_NCCL_MIN_VERSION 21800

#define QC_NCCL_ID_BYTES 128  /* NCCL_UNIQUE_ID_BYTES */
#define QC_NCCL_FLOAT32 7     /* ncclFloat32 */
#define QC_NCCL_SUM 0         /* ncclSum */

struct qc_nccl_id {
	char internal[QC_NCCL_ID_BYTES];
};

typedef struct qc_nccl_comm *qc_nccl_comm_t; /* ncclComm_t */

/* The loaded library: the functions the backend calls, with NCCL's signatures
 * (ncclResult_t, ncclDataType_t, ncclRedOp_t as int; cudaStream_t as void *). */
struct qc_nccl {
	int version;               /* ncclGetVersion's code, e.g. 22809 for 2.28.9 */
	char path[512];            /* what was loaded ("libnccl.so.2": the loader's search) */
	int (*get_version)(int *version);
	int (*get_unique_id)(struct qc_nccl_id *id);
	int (*comm_init_rank)(qc_nccl_comm_t *comm, int nranks, struct qc_nccl_id id, int rank);
	int (*all_reduce)(const void *send, void *recv, size_t count, int dtype, int op, qc_nccl_comm_t comm,
			  void *stream);
	int (*comm_destroy)(qc_nccl_comm_t comm);
	int (*comm_abort)(qc_nccl_comm_t comm);
	const char *(*get_error_string)(int result);
	const char *(*get_last_error)(qc_nccl_comm_t comm);
};

/* The process's NCCL, loaded on the first call (every later call, from any thread,
 * gets the same result: the library or the same error). lib: $QC_NCCL_LIB as the
 * environment block read it (a file, or a folder holding libnccl.so.2), or NULL /
 * "" for the loader's search only. Sets NCCL_NVLS_ENABLE=0 first unless it is set
 * (NVLink multicast stays off on shared hosts). Prints one line on success:
 * "cuda: NCCL 2.28.9 (path), NCCL_NVLS_ENABLE=0". QC_OK and *out, or QC_ECUDA
 * naming what was tried and how to install NCCL, or a version below
 * QC_NCCL_MIN_VERSION. */
int qc_nccl_load(const char *lib, const struct qc_nccl **out, struct qc_err *err);

/* Test hook: forget the loaded library and the cached result (the next
 * qc_nccl_load searches again). Not for use while a communicator is alive. */
void qc_nccl_unload(void);

/* "2.28.9" from a version code (both encodings: X*1000+Y*100+Z before 2.9,
 * X*10000+Y*100+Z since) into buf (16 bytes is enough); returns buf. */
const char *qc_nccl_version_str(int code, char *buf, size_t len);

/* QC_OK when result is ncclSuccess (0); else QC_ECUDA "NCCL what: <its string>
 * (<ncclGetLastError(comm)> when there is one)". n may be NULL only when result is 0. */
int qc_nccl_check(const struct qc_nccl *n, int result, const char *what, qc_nccl_comm_t comm, struct qc_err *err);

/* What the ranks of a group share at start-up, in qc_tp_group_slot. */
struct qc_nccl_boot {
	struct qc_nccl_id id;      /* rank 0's ncclGetUniqueId */
	int32_t fail[QC_TP_MAX];   /* 1: that rank could not go on */
};
_Static_assert(sizeof(struct qc_nccl_boot) <= QC_TP_SLOT_BYTES, "the boot data fits the group's slot");

/* Every rank of g calls it at the same point, ok saying whether it got there
 * intact; rank 0 passes its id in *id (others' *id is overwritten), and every
 * rank gets rank 0's id back in *id. Returns the lowest rank that said !ok, or
 * -1 when all did. Two barriers: nobody writes the slot again before everyone
 * has read it. */
int qc_nccl_agree(struct qc_tp_group *g, int rank, bool ok, struct qc_nccl_id *id);

#endif
