/* ktrace.c — a CUPTI injection library that writes every kernel a CUDA program runs
 * (its name, the launch it belongs to, its graph node, start and end on the GPU
 * clock) to a TSV, for graph-node traces of decode steps.
 *
 * Why: ncu times one kernel at a time with graphs and programmatic dependent launch
 * (PDL) effectively off, so it cannot show what a decode step costs as it really
 * runs: kernels overlapping their neighbours' tails, launch gaps, idle time between
 * graph replays. CUPTI's kernel activity records carry the graph id, the node id and
 * the correlation id of the cudaGraphLaunch, which is enough to rebuild each replay.
 *
 * Use (any CUDA program, no rebuild of it):
 *   CUDA_INJECTION64_PATH=$PWD/build/lib/libqc_ktrace.so QC_KTRACE_OUT=trace.tsv \
 *       qrun bench model.qb --device cuda --requests 1 --out 128
 *   python3 tools/ktrace_report.py trace.tsv
 * Columns: corr graph node start_ns end_ns grid block name (mangled).
 * The CUDA driver calls InitializeInjection at cuInit; records are written as CUPTI
 * hands buffers back and the rest at exit. Errors go to stderr once and disable the
 * trace; the traced program runs on either way.
 * Non-goals: memcpy/memset records, metrics (ncu does those).
 */
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define BUF_BYTES (8u << 20)

static FILE *out;

static void fail(const char *what, CUptiResult r)
{
	const char *msg = "?";
	cuptiGetResultString(r, &msg);
	fprintf(stderr, "ktrace: %s: %s; no trace\n", what, msg);
	if (out && out != stderr)
		fclose(out);
	out = NULL;
}

static void CUPTIAPI buf_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
	*buf = aligned_alloc(8, BUF_BYTES);
	*size = *buf ? BUF_BYTES : 0;
	*max_records = 0;
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid)
{
	(void)ctx, (void)stream, (void)size;
	CUpti_Activity *rec = NULL;
	while (out && cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
		if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
			continue;
		const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
		fprintf(out, "%u\t%u\t%llu\t%llu\t%llu\t%d,%d,%d\t%d,%d,%d\t%s\n", k->correlationId, k->graphId,
			(unsigned long long)k->graphNodeId, (unsigned long long)k->start, (unsigned long long)k->end,
			k->gridX, k->gridY, k->gridZ, k->blockX, k->blockY, k->blockZ, k->name ? k->name : "?");
	}
	size_t dropped = 0;
	if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
		fprintf(stderr, "ktrace: %zu records dropped\n", dropped);
	free(buf);
}

static void at_exit(void)
{
	if (!out)
		return;
	cuptiActivityFlushAll(1);
	if (out != stderr)
		fclose(out);
	out = NULL;
}

int InitializeInjection(void);
int InitializeInjection(void)
{
	const char *path = getenv("QC_KTRACE_OUT");
	out = path && *path ? fopen(path, "w") : stderr;
	if (!out) {
		perror(path);
		return 1;
	}
	fprintf(out, "corr\tgraph\tnode\tstart\tend\tgrid\tblock\tname\n");
	CUptiResult r;
	if ((r = cuptiActivityRegisterCallbacks(buf_requested, buf_completed)) != CUPTI_SUCCESS) {
		fail("cuptiActivityRegisterCallbacks", r);
		return 1;
	}
	if ((r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) != CUPTI_SUCCESS) {
		fail("cuptiActivityEnable(CONCURRENT_KERNEL)", r);
		return 1;
	}
	atexit(at_exit);
	return 1;
}
