/* progress.h — a one-line progress bar on stderr, only when stderr is a TTY. */
#ifndef QC_PROGRESS_H
#define QC_PROGRESS_H

#include <stdint.h>

struct qc_progress {
	const char *label;
	uint64_t total, done;
	double t0, last;
	int enabled;
};

void qc_progress_init(struct qc_progress *p, const char *label, uint64_t total);
void qc_progress_add(struct qc_progress *p, uint64_t n);
void qc_progress_done(struct qc_progress *p);
double qc_now(void); /* monotonic seconds */

#endif
