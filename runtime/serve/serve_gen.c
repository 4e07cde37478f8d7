/* serve_gen.c — consume a job's ids in its connection thread (see serve_gen.h).
 *
 * Owns: the wait loop (50 ms condition-variable ticks; each tick polls the
 * client socket for POLLRDHUP/POLLHUP/POLLERR, which is how a disconnect
 * during a non-streamed or idle streamed request is seen) and the finish
 * bookkeeping. Non-goals: deciding HTTP status codes.
 */
#include "serve_gen.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TICK_NS 50000000L

void serve_gen_init(struct serve_gen *g, struct serve_engine *se, struct serve_job *job, int fd,
		    const struct qc_vocab *v, const char *const *stops, int n_stops)
{
	memset(g, 0, sizeof *g);
	g->se = se;
	g->job = job;
	g->fd = fd;
	serve_text_init(&g->text, v, stops, n_stops);
}

void serve_gen_deinit(struct serve_gen *g)
{
	if (g->job) {
		serve_engine_cancel(g->se, g->job);
		serve_job_unref(g->job);
	}
	serve_text_deinit(&g->text);
	free(g->ids);
	free(g->lp);
	memset(g, 0, sizeof *g);
}

/* True when the peer closed or the socket failed. */
static bool hung_up(int fd)
{
	if (fd < 0)
		return false;
	struct pollfd p = {.fd = fd, .events = POLLRDHUP};
	int r = poll(&p, 1, 0);
	return r > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static int grow(struct serve_gen *g, int32_t n, bool want_lp)
{
	if (n <= g->cap)
		return 0;
	int32_t cap = g->cap ? g->cap : 16;
	while (cap < n)
		cap *= 2;
	int32_t *p = realloc(g->ids, sizeof *p * (size_t)cap);
	if (!p)
		return -1;
	g->ids = p;
	if (want_lp) {
		struct qc_sample_result *l = realloc(g->lp, sizeof *l * (size_t)cap);
		if (!l)
			return -1;
		g->lp = l;
	}
	g->cap = cap;
	return 0;
}

static bool is_stop_id(const struct serve_job *j, int32_t id)
{
	for (int32_t i = 0; i < j->n_stop_ids; i++)
		if (j->stop_ids[i] == id)
			return true;
	return false;
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int serve_gen_pull(struct serve_gen *g, struct serve_buf *text_out, int32_t *from, int32_t *to)
{
	struct serve_job *j = g->job;
	*from = *to = g->n;
	if (g->finished)
		return 0;
	/* ids may arrive faster than the idle tick: poll on a clock too */
	const double now = mono_s();
	if (now >= g->next_poll) {
		g->next_poll = now + 1e-9 * (double)TICK_NS;
		if (hung_up(g->fd)) {
			serve_engine_cancel(g->se, j);
			g->finished = true;
			return 1;
		}
	}
	pthread_mutex_lock(&j->mu);
	while (j->n == g->n && !j->done) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += TICK_NS;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		int r = pthread_cond_timedwait(&j->cv, &j->mu, &ts);
		if (r == ETIMEDOUT && j->n == g->n && !j->done) {
			pthread_mutex_unlock(&j->mu);
			if (hung_up(g->fd)) {
				serve_engine_cancel(g->se, j);
				g->finished = true;
				return 1;
			}
			pthread_mutex_lock(&j->mu);
		}
	}
	int32_t n = j->n, old = g->n;
	bool want_lp = j->lp != NULL || j->sampling.logprobs;
	if (grow(g, n, want_lp)) {
		pthread_mutex_unlock(&j->mu);
		return -1;
	}
	/* a job that failed before its first id has no arrays at all (NULL + 0 is UB) */
	if (n > old)
		memcpy(g->ids + old, j->ids + old, sizeof(int32_t) * (size_t)(n - old));
	if (n > old && want_lp && j->lp)
		memcpy(g->lp + old, j->lp + old, sizeof *g->lp * (size_t)(n - old));
	bool done = j->done;
	enum qc_sched_finish fin = j->finish;
	int status = j->err_status;
	if (status)
		snprintf(g->err_msg, sizeof g->err_msg, "%s", j->err_msg);
	pthread_mutex_unlock(&j->mu);

	/* a stop_token_ids id ends the request and is not shown (vLLM); it can only be
	   the last id, so skipping it needs no look at done */
	int32_t k = old;
	for (; k < n && !g->text.stopped; k++)
		if (!is_stop_id(j, g->ids[k]) && serve_text_push(&g->text, g->ids[k], text_out))
			return -1;
	g->n = k;
	*to = k;
	if (g->text.stopped) {
		serve_engine_cancel(g->se, j);
		g->finished = true;
		g->finish = "stop";
		return 0;
	}
	if (done) {
		g->finished = true;
		if (status) {
			g->err_status = status;
			return 0;
		}
		if (serve_text_finish(&g->text, text_out))
			return -1;
		g->finish = fin == QC_SCHED_FINISH_LENGTH ? "length" : "stop";
	}
	return 0;
}
