/* tp_group.c — qc_tp_group (tp_group.h). */
#include "tp_group.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct qc_tp_group {
	int size;
	pthread_barrier_t bar;
	float *bufs[QC_TP_MAX];   /* each rank's buffer during an all-reduce */
	float *sum;               /* the sums, before every rank copies them back */
	int64_t cap;              /* floats in sum */
	int fail;                 /* set by rank 0 when sum could not grow */
	_Alignas(16) unsigned char slot[QC_TP_SLOT_BYTES];
};

int qc_tp_group_new(int size, struct qc_tp_group **out, struct qc_err *err)
{
	*out = NULL;
	if (size < 1 || size > QC_TP_MAX)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "tensor parallel size %d: 1..%d", size, QC_TP_MAX);
	struct qc_tp_group *g = calloc(1, sizeof *g);
	if (!g)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	g->size = size;
	if (pthread_barrier_init(&g->bar, NULL, (unsigned)size)) {
		free(g);
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "pthread_barrier_init failed");
	}
	*out = g;
	return QC_OK;
}

void qc_tp_group_free(struct qc_tp_group *g)
{
	if (!g)
		return;
	pthread_barrier_destroy(&g->bar);
	free(g->sum);
	free(g);
}

int qc_tp_group_size(const struct qc_tp_group *g)
{
	return g->size;
}

void qc_tp_barrier(struct qc_tp_group *g)
{
	if (g->size > 1)
		pthread_barrier_wait(&g->bar);
}

void *qc_tp_group_slot(struct qc_tp_group *g)
{
	return g->slot;
}

int qc_tp_allreduce_f32(struct qc_tp_group *g, int rank, float *buf, int64_t n, struct qc_err *err)
{
	if (g->size == 1 || n <= 0)
		return QC_OK;
	g->bufs[rank] = buf;
	if (rank == 0) { /* only rank 0 touches sum/cap/fail between barriers */
		g->fail = 0;
		if (n > g->cap) {
			float *s = realloc(g->sum, (size_t)n * sizeof(float));
			if (s) {
				g->sum = s;
				g->cap = n;
			} else {
				g->fail = 1;
			}
		}
	}
	pthread_barrier_wait(&g->bar); /* every buffer posted, sum sized */
	if (g->fail) {
		pthread_barrier_wait(&g->bar); /* nobody leaves before all have read fail */
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory (tensor-parallel all-reduce of %lld floats)",
				  (long long)n);
	}
	/* rank r sums its share of the elements, always in rank order */
	const int64_t lo = n * rank / g->size, hi = n * (rank + 1) / g->size;
	for (int64_t i = lo; i < hi; i++) {
		float s = g->bufs[0][i];
		for (int k = 1; k < g->size; k++)
			s += g->bufs[k][i];
		g->sum[i] = s;
	}
	pthread_barrier_wait(&g->bar); /* all sums written; no buffer written yet */
	memcpy(buf, g->sum, (size_t)n * sizeof(float));
	pthread_barrier_wait(&g->bar); /* nobody reuses sum or a buffer before all copied */
	return QC_OK;
}
