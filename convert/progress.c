/* progress.c — see progress.h. Redraws at most 10 times a second. */
#include "progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

double qc_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void draw(struct qc_progress *p, double now)
{
	double frac = p->total ? (double)p->done / (double)p->total : 1.0;
	int w = 30, fill = (int)(frac * w);
	double el = now - p->t0;
	fprintf(stderr, "\r%s [", p->label);
	for (int i = 0; i < w; i++)
		fputc(i < fill ? '#' : '.', stderr);
	/* MB for small jobs, GB for big ones: "0.00/0.00 GB" tells nobody anything */
	double unit = p->total >= 1000000000ull ? 1e9 : 1e6;
	const char *un = unit == 1e9 ? "GB" : "MB";
	fprintf(stderr, "] %5.1f%%  %.2f/%.2f %s  %.2f GB/s ", 100.0 * frac, (double)p->done / unit,
		(double)p->total / unit, un, el > 0 ? (double)p->done / 1e9 / el : 0.0);
	fflush(stderr);
}

void qc_progress_init(struct qc_progress *p, const char *label, uint64_t total)
{
	p->label = label;
	p->total = total;
	p->done = 0;
	p->t0 = p->last = qc_now();
	p->enabled = isatty(2);
}

void qc_progress_add(struct qc_progress *p, uint64_t n)
{
	p->done += n;
	if (!p->enabled)
		return;
	double now = qc_now();
	if (now - p->last >= 0.1) {
		p->last = now;
		draw(p, now);
	}
}

void qc_progress_done(struct qc_progress *p)
{
	if (!p->enabled)
		return;
	draw(p, qc_now());
	fputc('\n', stderr);
}
