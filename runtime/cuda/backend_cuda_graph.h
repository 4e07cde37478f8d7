/* backend_cuda_graph.h — CUDA graphs of the forward, one per step shape.
 *
 * Owns: a small cache of instantiated graphs keyed by the step's shape (rows fed,
 * logit rows), capture of a forward body into one, and the keys whose capture
 * failed (they run eagerly, said once). A decode step is hundreds of small kernel
 * launches; replaying them as one graph removes the per-launch host cost. Valid
 * because every launch parameter of the body depends on the key alone: the plan's
 * arrays live at fixed device addresses and block tables use a fixed stride.
 * QC_CUDA_GRAPHS=0 turns them off. Non-goals: graphs for prefill-sized steps
 * (launch cost is amortized there), updating graphs in place.
 */
#ifndef QC_BACKEND_CUDA_GRAPH_H
#define QC_BACKEND_CUDA_GRAPH_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

#include "qc_err.h"

struct qc_cuda_graphs;

/* The forward's device work for one step, queued on stream s (no host sync). */
typedef int (*qc_cuda_graph_body)(void *ctx, cudaStream_t s, struct qc_err *err);

/* NULL (graphs off) when QC_CUDA_GRAPHS=0 or out of memory. */
struct qc_cuda_graphs *qc_cuda_graphs_new(int max_entries);
void qc_cuda_graphs_free(struct qc_cuda_graphs *g);

/* Run body for the step shape (a, b) on s: replay its graph, capturing it first
 * when new. When g is NULL or the shape's capture failed before, body runs
 * eagerly. A body error is returned as it is; a capture that fails for a reason of
 * the graph machinery is logged once and the step runs eagerly. */
int qc_cuda_graphs_run(struct qc_cuda_graphs *g, int64_t a, int64_t b, cudaStream_t s, qc_cuda_graph_body body,
		       void *ctx, struct qc_err *err);

#endif
