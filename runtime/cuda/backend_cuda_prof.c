/* backend_cuda_prof.c — see backend_cuda_prof.h. */
#include "backend_cuda_prof.h"

#include <stdbool.h>
#include <stdlib.h>

#define MAX_MARKS 4096 /* 32 layers x ~10 marks per forward fit many times over */

struct qc_cuda_prof {
	cudaEvent_t ev[MAX_MARKS];
	enum qc_prof_phase ph[MAX_MARKS];
	int n_ev, n_marks;
	bool broken;
	double ms[QC_PROF_COUNT];
	double ms_decode[QC_PROF_COUNT]; /* forwards of at most 256 rows with no prefill chunk */
	long forwards, decode_forwards;
	int cur_tokens;
};

static const char *const names[QC_PROF_COUNT] = {
	"upload+embed", "norm/act/add", "qkv matmul", "attention", "wo matmul",
	"ffn gate+up", "ffn down", "lm head", "logits copy",
};

struct qc_cuda_prof *qc_cuda_prof_new(void)
{
	const char *e = getenv("QC_PROFILE");
	if (!e || !*e || *e == '0')
		return NULL;
	return calloc(1, sizeof(struct qc_cuda_prof));
}

static void record(struct qc_cuda_prof *p, cudaStream_t s, enum qc_prof_phase ph)
{
	if (p->broken || p->n_marks >= MAX_MARKS) {
		p->broken = true;
		return;
	}
	if (p->n_marks == p->n_ev) {
		if (cudaEventCreate(&p->ev[p->n_ev]) != cudaSuccess) {
			p->broken = true;
			return;
		}
		p->n_ev++;
	}
	p->ph[p->n_marks] = ph;
	if (cudaEventRecord(p->ev[p->n_marks], s) != cudaSuccess)
		p->broken = true;
	p->n_marks++;
}

void qc_cuda_prof_begin(struct qc_cuda_prof *p, cudaStream_t s, int n_tokens)
{
	if (!p)
		return;
	p->n_marks = 0;
	p->cur_tokens = n_tokens;
	record(p, s, QC_PROF_UPLOAD);
}

void qc_cuda_prof_mark(struct qc_cuda_prof *p, cudaStream_t s, enum qc_prof_phase ph)
{
	if (p)
		record(p, s, ph);
}

void qc_cuda_prof_end(struct qc_cuda_prof *p)
{
	if (!p || p->broken)
		return;
	const bool decode = p->cur_tokens <= 256;
	for (int i = 1; i < p->n_marks; i++) {
		float ms = 0;
		if (cudaEventElapsedTime(&ms, p->ev[i - 1], p->ev[i]) != cudaSuccess) {
			p->broken = true;
			return;
		}
		p->ms[p->ph[i]] += ms;
		if (decode)
			p->ms_decode[p->ph[i]] += ms;
	}
	p->forwards++;
	p->decode_forwards += decode;
	p->n_marks = 0;
}

void qc_cuda_prof_free(struct qc_cuda_prof *p, FILE *f)
{
	if (!p)
		return;
	if (p->forwards && f) {
		double all = 0;
		for (int i = 0; i < QC_PROF_COUNT; i++)
			all += p->ms[i];
		fprintf(f, "cuda profile: %ld forwards, %.1f ms of device time%s\n", p->forwards, all,
			p->broken ? " (incomplete: an event failed)" : "");
		fprintf(f, "  %-14s %10s %6s %14s\n", "phase", "ms", "%", "ms/fwd (<=256 rows)");
		for (int i = 0; i < QC_PROF_COUNT; i++)
			fprintf(f, "  %-14s %10.2f %5.1f%% %14.3f\n", names[i], p->ms[i], all > 0 ? 100.0 * p->ms[i] / all : 0.0,
				p->decode_forwards ? p->ms_decode[i] / (double)p->decode_forwards : 0.0);
	}
	for (int i = 0; i < p->n_ev; i++)
		cudaEventDestroy(p->ev[i]);
	free(p);
}
