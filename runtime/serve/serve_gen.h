/* serve_gen.h — one request's consumer side, run in its connection thread.
 *
 * Owns: waiting for the job's next ids (the client socket is polled for a
 * hang-up every ~50 ms, busy or idle, so a vanished client is noticed fast), copying them out under the job
 * mutex, running them through serve_text (UTF-8, stop strings), cancelling the
 * job when a stop string ends it, and the OpenAI finish_reason. The usage
 * count is the ids consumed up to and including the one that completed a stop
 * string; a stop_token_ids id is counted but not shown (vLLM).
 * Non-goals: JSON (serve_resp.c), HTTP (server.c).
 */
#ifndef QC_SERVE_GEN_H
#define QC_SERVE_GEN_H

#include <stdbool.h>
#include <stdint.h>

#include "serve_buf.h"
#include "serve_engine.h"
#include "serve_text.h"

struct serve_gen {
	struct serve_engine *se;      /* borrowed */
	struct serve_job *job;        /* one reference, dropped by deinit */
	int fd;                       /* client socket, polled for hang-up; -1: none */
	double next_poll;             /* monotonic seconds of the next hang-up poll */
	struct serve_text text;
	int32_t *ids;                 /* (n) ids consumed so far */
	struct qc_sample_result *lp;  /* (n) when logprobs were asked, else NULL */
	int32_t n, cap;
	bool finished;                /* no more output */
	const char *finish;           /* "stop" / "length" once finished without error */
	int err_status;               /* non-zero: finished by failure */
	char err_msg[256];
};

/* Takes over the caller's job reference. stops are borrowed. */
void serve_gen_init(struct serve_gen *g, struct serve_engine *se, struct serve_job *job, int fd,
		    const struct qc_vocab *v, const char *const *stops, int n_stops);
/* Cancels the job if it is still live, drops the reference. */
void serve_gen_deinit(struct serve_gen *g);

/* Wait for and consume the next ids: new visible text is appended to text_out,
 * and [*from, *to) is the range of g->ids consumed by this call. Returns 0,
 * 1 when the client hung up (the job is cancelled), -1 when out of memory. */
int serve_gen_pull(struct serve_gen *g, struct serve_buf *text_out, int32_t *from, int32_t *to);

#endif
