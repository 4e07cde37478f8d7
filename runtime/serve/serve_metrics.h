/* serve_metrics.h — qserve's counters, gauges and histograms, Prometheus text.
 *
 * Owns: request counts by endpoint and status, token counters, the engine's
 * scheduler snapshot (running, waiting, KV blocks, preemptions) and the TTFT
 * and inter-token latency histograms; one mutex guards them all (updates are
 * a few per token, far below contention). Rendering follows the Prometheus text
 * exposition format 0.0.4 (cumulative _bucket{le=...}, _sum, _count).
 * Non-goals: labels beyond endpoint/status, summaries/quantiles.
 */
#ifndef QC_SERVE_METRICS_H
#define QC_SERVE_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "scheduler.h"
#include "serve_buf.h"

#define SERVE_HIST_BUCKETS 14
#define SERVE_MAX_STATUS 24

enum serve_endpoint { EP_COMPLETIONS, EP_CHAT, EP_MODELS, EP_HEALTH, EP_METRICS, EP_TOKENIZE, EP_DETOKENIZE,
		      EP_OTHER, EP_COUNT };

struct serve_hist {
	uint64_t counts[SERVE_HIST_BUCKETS + 1]; /* per bucket, last = +Inf; not cumulative */
	double sum;                              /* seconds */
	uint64_t n;
};

struct serve_metrics {
	pthread_mutex_t mu;
	struct { int status; uint64_t n; } req[EP_COUNT][SERVE_MAX_STATUS];
	uint64_t prompt_tokens, generated_tokens, cancelled, rejected_full;
	uint64_t failed_logits;                  /* requests ended by non-finite logits (500) */
	struct qc_sched_stats sched;             /* last snapshot from the engine thread */
	int32_t in_flight;
	int64_t kv_pool_tokens;                  /* K/V pool capacity (qc_engine_kv_tokens), set at start */
	struct serve_hist ttft, itl;
};

void serve_metrics_init(struct serve_metrics *m);
void serve_metrics_deinit(struct serve_metrics *m);
/* One finished HTTP request. */
void serve_metrics_request(struct serve_metrics *m, enum serve_endpoint ep, int status);
/* Seconds into a histogram. */
void serve_metrics_observe(struct serve_metrics *m, struct serve_hist *h, double seconds);
/* Render everything; 0 or -1 (out of memory). */
int serve_metrics_render(struct serve_metrics *m, struct serve_buf *out);

#endif
