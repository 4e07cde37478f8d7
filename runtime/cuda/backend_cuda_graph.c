/* backend_cuda_graph.c — see backend_cuda_graph.h. */
#include "backend_cuda_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/qc_cuda.h"

struct entry {
	int64_t a, b;
	cudaGraphExec_t exec;   /* NULL: capture failed, run eagerly */
	bool used;
};

struct qc_cuda_graphs {
	struct entry *e;
	int n, next;            /* slots, round-robin eviction cursor */
};

struct qc_cuda_graphs *qc_cuda_graphs_new(int max_entries)
{
	const char *env = getenv("QC_CUDA_GRAPHS");
	if ((env && !strcmp(env, "0")) || max_entries < 1)
		return NULL;
	struct qc_cuda_graphs *g = calloc(1, sizeof *g);
	if (g && !(g->e = calloc((size_t)max_entries, sizeof *g->e))) {
		free(g);
		return NULL;
	}
	if (g)
		g->n = max_entries;
	return g;
}

void qc_cuda_graphs_free(struct qc_cuda_graphs *g)
{
	if (!g)
		return;
	for (int i = 0; i < g->n; i++)
		if (g->e[i].used && g->e[i].exec)
			cudaGraphExecDestroy(g->e[i].exec);
	free(g->e);
	free(g);
}

static struct entry *find(struct qc_cuda_graphs *g, int64_t a, int64_t b)
{
	for (int i = 0; i < g->n; i++)
		if (g->e[i].used && g->e[i].a == a && g->e[i].b == b)
			return &g->e[i];
	return NULL;
}

/* A slot for a new shape, evicting round-robin when full. */
static struct entry *slot(struct qc_cuda_graphs *g)
{
	struct entry *e = &g->e[g->next];
	g->next = (g->next + 1) % g->n;
	if (e->used && e->exec)
		cudaGraphExecDestroy(e->exec);
	memset(e, 0, sizeof *e);
	return e;
}

/* Capture body into e->exec. QC_OK with e->exec NULL when the graph machinery
 * refused (said once); a body error is returned. */
static int capture(struct entry *e, cudaStream_t s, qc_cuda_graph_body body, void *ctx, struct qc_err *err)
{
	cudaGraph_t graph = NULL;
	cudaError_t ce = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
	int rc = QC_OK;
	if (ce == cudaSuccess) {
		rc = body(ctx, s, err);
		ce = cudaStreamEndCapture(s, &graph); /* always: the stream must leave capture mode */
	}
	if (rc == QC_OK && ce == cudaSuccess)
		ce = cudaGraphInstantiate(&e->exec, graph, 0);
	if (graph)
		cudaGraphDestroy(graph);
	if (rc != QC_OK || ce != cudaSuccess) {
		(void)cudaGetLastError(); /* a capture failure is not sticky; clear it */
		e->exec = NULL;
		if (rc == QC_OK || ce != cudaSuccess) {
			QC_WARN_ONCE("cuda: a forward could not be captured as a CUDA graph (%s): such steps run "
				     "kernel by kernel", ce != cudaSuccess ? cudaGetErrorString(ce) : "body failed");
			return QC_OK;
		}
		return rc;
	}
	return QC_OK;
}

int qc_cuda_graphs_run(struct qc_cuda_graphs *g, int64_t a, int64_t b, cudaStream_t s, qc_cuda_graph_body body,
		       void *ctx, struct qc_err *err)
{
	if (!g)
		return body(ctx, s, err);
	struct entry *e = find(g, a, b);
	if (!e) {
		e = slot(g);
		e->a = a;
		e->b = b;
		e->used = true;
		int rc = capture(e, s, body, ctx, err);
		if (rc) {
			e->used = false; /* a body error says nothing about the shape */
			return rc;
		}
	}
	if (!e->exec)
		return body(ctx, s, err);
	return qc_cuda_check(cudaGraphLaunch(e->exec, s), "cudaGraphLaunch", err);
}
