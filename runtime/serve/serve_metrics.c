/* serve_metrics.c — metric updates and the Prometheus text rendering.
 *
 * Owns: the bucket bounds (seconds, log-spaced 1 ms .. 10 s, as vLLM's TTFT
 * and TPOT histograms span) and the exposition text. Non-goals: a registry.
 */
#include "serve_metrics.h"

#include <string.h>

static const double bounds[SERVE_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
						  0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 30.0};
static const char *const ep_names[EP_COUNT] = {"/v1/completions", "/v1/chat/completions", "/v1/models",
					       "/health", "/metrics", "/tokenize", "/detokenize", "other"};

void serve_metrics_init(struct serve_metrics *m)
{
	memset(m, 0, sizeof *m);
	pthread_mutex_init(&m->mu, NULL);
}

void serve_metrics_deinit(struct serve_metrics *m)
{
	pthread_mutex_destroy(&m->mu);
}

void serve_metrics_request(struct serve_metrics *m, enum serve_endpoint ep, int status)
{
	pthread_mutex_lock(&m->mu);
	for (int i = 0; i < SERVE_MAX_STATUS; i++) {
		if (m->req[ep][i].status == status || m->req[ep][i].status == 0) {
			m->req[ep][i].status = status;
			m->req[ep][i].n++;
			break;
		}
	}
	pthread_mutex_unlock(&m->mu);
}

void serve_metrics_observe(struct serve_metrics *m, struct serve_hist *h, double seconds)
{
	int b = 0;
	while (b < SERVE_HIST_BUCKETS && seconds > bounds[b])
		b++;
	pthread_mutex_lock(&m->mu);
	h->counts[b]++;
	h->sum += seconds;
	h->n++;
	pthread_mutex_unlock(&m->mu);
}

static int hist(struct serve_buf *o, const char *name, const char *help, const struct serve_hist *h)
{
	uint64_t cum = 0;
	int rc = serve_buf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (int b = 0; b < SERVE_HIST_BUCKETS && !rc; b++) {
		cum += h->counts[b];
		rc = serve_buf_printf(o, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[b], (unsigned long long)cum);
	}
	cum += h->counts[SERVE_HIST_BUCKETS];
	if (!rc)
		rc = serve_buf_printf(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
				      (unsigned long long)cum, name, h->sum, name, (unsigned long long)h->n);
	return rc;
}

#define GAUGE(name, help, fmt, v) \
	serve_buf_printf(out, "# HELP " name " " help "\n# TYPE " name " gauge\n" name " " fmt "\n", v)
#define COUNTER(name, help, v) \
	serve_buf_printf(out, "# HELP " name " " help "\n# TYPE " name " counter\n" name " %llu\n", \
			 (unsigned long long)(v))

int serve_metrics_render(struct serve_metrics *m, struct serve_buf *out)
{
	int rc;
	pthread_mutex_lock(&m->mu);
	rc = serve_buf_printf(out, "# HELP qserve_requests_total HTTP requests by endpoint and status.\n"
				   "# TYPE qserve_requests_total counter\n");
	for (int e = 0; e < EP_COUNT && !rc; e++)
		for (int i = 0; i < SERVE_MAX_STATUS && m->req[e][i].status && !rc; i++)
			rc = serve_buf_printf(out, "qserve_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
					      ep_names[e], m->req[e][i].status, (unsigned long long)m->req[e][i].n);
	rc = rc ? rc : COUNTER("qserve_prompt_tokens_total", "Prompt tokens of accepted requests.", m->prompt_tokens);
	rc = rc ? rc : COUNTER("qserve_generation_tokens_total", "Generated tokens.", m->generated_tokens);
	rc = rc ? rc : COUNTER("qserve_cancelled_total", "Requests cancelled by client disconnect.", m->cancelled);
	rc = rc ? rc : COUNTER("qserve_rejected_queue_full_total", "Requests refused with 429.", m->rejected_full);
	rc = rc ? rc : COUNTER("qserve_request_failures_bad_logits_total",
			       "Requests failed alone with 500 because their logits were not finite.", m->failed_logits);
	rc = rc ? rc : COUNTER("qserve_preemptions_total", "Sequences preempted by recomputation.",
			       m->sched.n_preemptions);
	rc = rc ? rc : COUNTER("qserve_prefix_cache_queried_tokens_total",
			       "Prompt tokens looked up in the prefix cache at admission (re-admissions too).",
			       m->sched.prefix_queried_tokens);
	rc = rc ? rc : COUNTER("qserve_prefix_cache_hit_tokens_total",
			       "Of those, tokens whose K/V came from the prefix cache.", m->sched.prefix_hit_tokens);
	rc = rc ? rc : GAUGE("qserve_kv_blocks_cached", "KV cache blocks in the prefix cache (held or idle).", "%d",
			     m->sched.blocks_cached);
	rc = rc ? rc : GAUGE("qserve_requests_in_flight", "Accepted requests not finished.", "%d", m->in_flight);
	rc = rc ? rc : GAUGE("qserve_num_requests_running", "Sequences in the running set.", "%d", m->sched.n_running);
	rc = rc ? rc : GAUGE("qserve_num_requests_waiting", "Sequences waiting for admission.", "%d", m->sched.n_waiting);
	rc = rc ? rc : GAUGE("qserve_kv_blocks_used", "KV cache blocks in use.", "%d", m->sched.blocks_used);
	rc = rc ? rc : GAUGE("qserve_kv_blocks_free", "KV cache blocks free.", "%d", m->sched.blocks_free);
	rc = rc ? rc : GAUGE("qserve_kv_blocks_total", "KV cache blocks in the pool.", "%d", m->sched.blocks_total);
	rc = rc ? rc : GAUGE("qserve_kv_pool_tokens", "Tokens the KV cache pool holds (blocks x block size).", "%lld",
			     (long long)m->kv_pool_tokens);
	rc = rc ? rc : hist(out, "qserve_time_to_first_token_seconds", "Submit to first generated token.", &m->ttft);
	rc = rc ? rc : hist(out, "qserve_inter_token_latency_seconds", "Time between generated tokens.", &m->itl);
	pthread_mutex_unlock(&m->mu);
	return rc;
}
