/* server.c — libmicrohttpd glue and the OpenAI endpoints (see server.h).
 *
 * Owns: per-connection state (endpoint, body bytes), routing, the request
 * path {parse -> tokenize -> length checks -> submit -> wait (plain) or stream
 * (SSE)}, and the drain. A streamed response is a callback response whose
 * reader blocks in the connection's own thread (serve_gen_pull); the
 * callback's free hook cancels the job, so a client that disconnects mid-
 * stream frees its KV blocks as soon as the engine thread next looks.
 * Non-goals: keep-alive tuning, TLS. libmicrohttpd parses HTTP; nothing here does.
 */
#include "server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve_engine.h"
#include "serve_gen.h"
#include "serve_metrics.h"
#include "serve_req.h"
#include "serve_resp.h"
#include "serve_tok.h"
#include "vocab.h"

struct server {
	struct server_config cfg;
	struct qc_engine *e;           /* tokenize only from connection threads */
	const struct qc_vocab *vocab;
	int32_t n_vocab;
	struct MHD_Daemon *d;
	struct serve_engine *se;
	struct serve_metrics m;
	atomic_int open_streams;
	atomic_uint_fast64_t next_id;
	atomic_bool draining;
	int port;
	long long created;
};

struct conn {
	enum serve_endpoint ep;
	bool post;
	char model_id[256];            /* GET /v1/models/{id}: the id; "" for the list */
	bool model_id_long;            /* the id did not fit (so it is no id we serve) */
	/* the access-log line (--log-requests), written when the request completes */
	double t0;                     /* monotonic seconds at the first call */
	char method[8], path[96];      /* path: printable ASCII only, cut at 95 bytes */
	int status;                    /* the status sent; 0: none */
	int32_t prompt_tokens, completion_tokens;
	struct serve_buf body;
	bool too_large;
};

struct stream {
	struct server *s;
	struct conn *cn;               /* borrowed, for the access log; touched only while MHD reads
					  the stream (before the request completes) */
	struct serve_gen gen[SERVE_MAX_CHOICES];   /* (n_gen) one per choice (n) */
	struct serve_resp resp[SERVE_MAX_CHOICES]; /* (n_gen) index i, own text_offset */
	bool first[SERVE_MAX_CHOICES];             /* (n_gen) no chunk sent yet */
	int32_t n_gen, cur, n_done;                /* cur: the choice pulled next */
	struct serve_buf out;          /* SSE bytes not yet handed to MHD */
	bool include_usage, ended;
	int32_t n_prompt;
	char *stops[SERVE_MAX_STOPS];  /* owned; serve_gen's text state borrows them */
	int n_stops;
	char *echo;                    /* owned: echo's prompt text, led by each choice's first chunk */
	size_t echo_len;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CORS (--allow-origin): the origin on every response; a fixed origin also
 * tells caches the answer depends on Origin. */
static void add_cors(const struct server *s, struct MHD_Response *r)
{
	if (!s->cfg.allow_origin)
		return;
	MHD_add_response_header(r, "Access-Control-Allow-Origin", s->cfg.allow_origin);
	if (strcmp(s->cfg.allow_origin, "*"))
		MHD_add_response_header(r, "Vary", "Origin");
}

/* Queue body (consumed) with status and content type; records the metric and
 * the status for the access log. */
static enum MHD_Result reply(struct server *s, struct MHD_Connection *c, struct conn *cn, int status,
			     struct serve_buf *body, const char *ctype)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(body->len, body->p ? body->p : (char *)"",
								 body->p ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (!r) {
		serve_buf_deinit(body);
		return MHD_NO;
	}
	body->p = NULL;
	body->len = body->cap = 0;
	MHD_add_response_header(r, "Content-Type", ctype);
	if (status == 401)
		MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
	add_cors(s, r);
	enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
	MHD_destroy_response(r);
	serve_metrics_request(&s->m, cn->ep, status);
	cn->status = status;
	return ok;
}

/* A CORS preflight (OPTIONS with --allow-origin): 204, no key needed (browsers
 * send none on a preflight). */
static enum MHD_Result preflight(struct server *s, struct MHD_Connection *c, struct conn *cn)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(0, (char *)"", MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	add_cors(s, r);
	MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
	MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
	MHD_add_response_header(r, "Access-Control-Max-Age", "600");
	enum MHD_Result ok = MHD_queue_response(c, 204, r);
	MHD_destroy_response(r);
	serve_metrics_request(&s->m, cn->ep, 204);
	cn->status = 204;
	return ok;
}

static enum MHD_Result reply_error(struct server *s, struct MHD_Connection *c, struct conn *cn, int status,
				   const char *msg, const char *param)
{
	struct serve_buf b = {0};
	if (serve_resp_error(status, msg, param, &b)) {
		serve_buf_deinit(&b);
		return MHD_NO;
	}
	return reply(s, c, cn, status, &b, "application/json");
}

/* The endpoint of url; GET /v1/models/{id} is EP_MODELS with *model_id set
 * (pointing into url). */
static enum serve_endpoint route(const char *url, const char *method, bool *post, bool *method_ok,
				 const char **model_id)
{
	static const struct { const char *url; enum serve_endpoint ep; bool post; } routes[] = {
		{"/v1/completions", EP_COMPLETIONS, true}, {"/v1/chat/completions", EP_CHAT, true},
		{"/v1/models", EP_MODELS, false},          {"/health", EP_HEALTH, false},
		{"/metrics", EP_METRICS, false},           {"/tokenize", EP_TOKENIZE, true},
		{"/detokenize", EP_DETOKENIZE, true},
	};
	*post = !strcmp(method, "POST");
	*model_id = NULL;
	if (!strncmp(url, "/v1/models/", 11) && url[11]) {
		*model_id = url + 11;
		*method_ok = !strcmp(method, "GET") || !strcmp(method, "HEAD");
		return EP_MODELS;
	}
	for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
		if (!strcmp(url, routes[i].url)) {
			*method_ok = routes[i].post ? *post : !strcmp(method, "GET") || !strcmp(method, "HEAD");
			return routes[i].ep;
		}
	*method_ok = true;
	return EP_OTHER;
}

/* Constant-time comparison of the presented key with ours. */
static bool key_ok(const struct server *s, struct MHD_Connection *c)
{
	if (!s->cfg.api_key)
		return true;
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	if (!h || strncasecmp(h, "Bearer ", 7))
		return false;
	h += 7;
	size_t a = strlen(h), b = strlen(s->cfg.api_key);
	unsigned char diff = (unsigned char)(a != b);
	for (size_t i = 0; i < a && i < b; i++)
		diff |= (unsigned char)(h[i] ^ s->cfg.api_key[i]);
	return diff == 0;
}

static int client_fd(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	return ci ? ci->connect_fd : -1;
}

/* ---- streaming ------------------------------------------------------------ */

static void stream_free(void *cls)
{
	struct stream *st = cls;
	struct server *s = st->s;
	if (!st->ended) {
		pthread_mutex_lock(&s->m.mu);
		s->m.cancelled++;
		pthread_mutex_unlock(&s->m.mu);
	}
	for (int32_t i = 0; i < st->n_gen; i++)
		serve_gen_deinit(&st->gen[i]);
	serve_buf_deinit(&st->out);
	for (int i = 0; i < st->n_stops; i++)
		free(st->stops[i]);
	free(st->echo);
	free(st);
	atomic_fetch_sub(&s->open_streams, 1);
}

/* Produce the next SSE events into st->out; 1 on hang-up, -1 on failure. The
 * choices take turns (each pull waits for that choice's next ids; the engine
 * runs them all meanwhile); each chunk carries its choice's index, each choice
 * finishes once, and usage and [DONE] follow the last one. */
static int stream_fill(struct stream *st)
{
	struct serve_buf delta = {0};
	int32_t from, to, c = st->cur;
	for (int32_t k = 0; k < st->n_gen && st->gen[c].finished; k++)
		c = (c + 1) % st->n_gen;
	st->cur = (c + 1) % st->n_gen;
	struct serve_gen *g = &st->gen[c];
	int rc = st->first[c] && st->echo_len ? serve_buf_put(&delta, st->echo, st->echo_len) : 0;
	if (!rc)
		rc = serve_gen_pull(g, &delta, &from, &to);
	if (rc) {
		serve_buf_deinit(&delta);
		return rc;
	}
	const struct qc_sample_result *lp = g->lp;
	if (delta.len || (lp && to > from) || st->first[c]) {
		rc = serve_resp_chunk(&st->resp[c], delta.p ? delta.p : "", delta.len, NULL, st->first[c],
				      st->include_usage, g->ids, lp, from, to, &st->out);
		st->first[c] = false;
	}
	serve_buf_deinit(&delta);
	int32_t sum = 0;
	for (int32_t i = 0; i < st->n_gen; i++)
		sum += st->gen[i].n;
	st->cn->completion_tokens = sum;
	if (rc || !g->finished)
		return rc ? -1 : 0;
	if (g->err_status) {
		rc = serve_resp_error(g->err_status, g->err_msg, NULL, &st->out);
		if (!rc) {
			/* an error event is "data: {...}" like any other chunk */
			struct serve_buf ev = {0};
			rc = serve_buf_printf(&ev, "data: %.*s\n\n", (int)st->out.len, st->out.p);
			serve_buf_deinit(&st->out);
			st->out = ev;
		}
	} else {
		rc = serve_resp_chunk(&st->resp[c], NULL, 0, g->finish, false, st->include_usage, g->ids, NULL, 0,
				      0, &st->out);
		if (rc || ++st->n_done < st->n_gen)
			return rc ? -1 : 0;
		int32_t completion = 0;
		for (int32_t i = 0; i < st->n_gen; i++)
			completion += st->gen[i].n;
		if (st->include_usage)
			rc = serve_resp_usage_chunk(&st->resp[0], st->n_prompt, completion, &st->out);
	}
	if (!rc)
		rc = serve_buf_printf(&st->out, "data: [DONE]\n\n");
	st->ended = true;
	return rc ? -1 : 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct stream *st = cls;
	(void)pos;
	while (!st->out.len) {
		if (st->ended)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (stream_fill(st))
			return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	size_t n = st->out.len < max ? st->out.len : max;
	memcpy(buf, st->out.p, n);
	serve_buf_consume(&st->out, n);
	return (ssize_t)n;
}

/* ---- generation requests --------------------------------------------------- */

static uint64_t fresh_seed(struct server *s)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ (atomic_fetch_add(&s->next_id, 1) << 48);
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	return x ^ (x >> 33);
}

/* Tokens of the request's prompt (malloc'd). On failure a 400 was decided: *msg/param set. */
static int prompt_ids(struct server *s, const struct serve_params *p, int32_t **ids, int32_t *n, char *msg,
		      size_t cap)
{
	if (p->prompt_ids) {
		for (int32_t i = 0; i < p->n_prompt_ids; i++)
			if (p->prompt_ids[i] >= s->n_vocab) {
				snprintf(msg, cap, "prompt: token id %d at %d is outside the vocabulary (%d)",
					 p->prompt_ids[i], i, s->n_vocab);
				return -1;
			}
		*ids = malloc(sizeof(int32_t) * (size_t)p->n_prompt_ids);
		if (!*ids) {
			snprintf(msg, cap, "out of memory");
			return -2;
		}
		memcpy(*ids, p->prompt_ids, sizeof(int32_t) * (size_t)p->n_prompt_ids);
		*n = p->n_prompt_ids;
		return 0;
	}
	struct qc_err err = {0};
	size_t nn = 0;
	if (qc_engine_tokenize(s->e, p->prompt, p->prompt_len, true, ids, &nn, &err)) {
		char m[QC_ERR_MSG_MAX + 64];
		qc_err_format(&err, m, sizeof m);
		snprintf(msg, cap, "%s: cannot tokenize: %.400s", p->chat ? "messages" : "prompt", m);
		return err.code == QC_ENOMEM ? -2 : -1;
	}
	*n = (int32_t)nn;
	return 0;
}

/* The id-valued fields against the vocabulary; on failure *msg and *param say which. */
static bool ids_in_vocab(const struct server *s, const struct serve_params *p, char *msg, size_t cap,
			 const char **param)
{
	for (int32_t i = 0; i < p->sampling.n_bias; i++)
		if (p->sampling.bias_ids[i] >= s->n_vocab) {
			snprintf(msg, cap, "logit_bias: key \"%d\" is outside the vocabulary (token ids 0..%d)",
				 p->sampling.bias_ids[i], s->n_vocab - 1);
			*param = "logit_bias";
			return false;
		}
	for (int32_t i = 0; i < p->n_stop_ids; i++)
		if (p->stop_ids[i] >= s->n_vocab) {
			snprintf(msg, cap, "stop_token_ids: %d is outside the vocabulary (token ids 0..%d)", p->stop_ids[i],
				 s->n_vocab - 1);
			*param = "stop_token_ids";
			return false;
		}
	return true;
}

/* echo's text: the prompt as given, or its ids detokenized (BOS dropped); -1: out of memory. */
static int echo_text(const struct server *s, const struct serve_params *p, char **text, size_t *len)
{
	struct qc_err err = {0};
	*text = NULL;
	*len = 0;
	if (!p->echo)
		return 0;
	if (p->prompt) {
		if (!(*text = malloc(p->prompt_len + 1)))
			return -1;
		memcpy(*text, p->prompt, p->prompt_len);
		*len = p->prompt_len;
		return 0;
	}
	if (!s->vocab)
		return 0;
	/* past a leading BOS, as the text it came from: the SPM space prefix stripped */
	const int32_t *ids = p->prompt_ids;
	size_t n = (size_t)p->n_prompt_ids;
	if (n && ids[0] == qc_vocab_special(s->vocab, QC_SPECIAL_BOS)) {
		ids++;
		n--;
	}
	return qc_detokenize(s->vocab, ids, n, (enum qc_detok_flags)0, text, len, &err) ? -1 : 0;
}

static enum MHD_Result generate(struct server *s, struct MHD_Connection *c, struct conn *cn)
{
	const bool chat = cn->ep == EP_CHAT;
	const char *pfield = chat ? "messages" : "prompt";
	struct serve_params p;
	struct qc_err err = {0};
	char param[64], msg[600];
	int32_t *ids = NULL, n = 0;
	enum MHD_Result ok;
	int rc = serve_req_parse(cn->body.p ? cn->body.p : "", cn->body.len, chat, s->cfg.chat, &p, param,
				 sizeof param, &err);
	if (rc) {
		serve_params_deinit(&p);
		return reply_error(s, c, cn, rc == QC_ENOMEM ? 503 : 400, err.msg, param);
	}
	if (p.model && strcmp(p.model, s->cfg.model_name)) {
		snprintf(msg, sizeof msg, "model: '%.200s' is not served here (this server has '%.200s')", p.model,
			 s->cfg.model_name);
		serve_params_deinit(&p);
		return reply_error(s, c, cn, 404, msg, "model");
	}
	const char *bad_param = NULL;
	if (!ids_in_vocab(s, &p, msg, sizeof msg, &bad_param)) {
		serve_params_deinit(&p);
		return reply_error(s, c, cn, 400, msg, bad_param);
	}
	if ((rc = prompt_ids(s, &p, &ids, &n, msg, sizeof msg))) {
		serve_params_deinit(&p);
		return reply_error(s, c, cn, rc == -2 ? 503 : 400, msg, pfield);
	}
	cn->prompt_tokens = n;
	const int32_t ctx = s->cfg.ctx_tokens;
	if (n < 1 || n >= ctx) {
		snprintf(msg, sizeof msg, n < 1 ? "%s: empty, and the vocabulary adds no BOS"
					     : "%s: %d tokens; this model's context is %d tokens (prompt and output)",
			 pfield, n, ctx);
		free(ids);
		serve_params_deinit(&p);
		return reply_error(s, c, cn, 400, msg, pfield);
	}
	int32_t max_tokens = p.max_tokens;
	if (!max_tokens) /* OpenAI: 16 for completions, the rest of the context for chat */
		max_tokens = chat || ctx - n < 16 ? ctx - n : 16;
	if (max_tokens > ctx - n) {
		snprintf(msg, sizeof msg,
			 "max_tokens: %d prompt tokens + max_tokens %d exceed this model's context of %d tokens", n,
			 max_tokens, ctx);
		free(ids);
		serve_params_deinit(&p);
		return reply_error(s, c, cn, 400, msg, "max_tokens");
	}
	/* best_of jobs, one per generated choice, submitted as one group: one
	   prefill, choice i sampled with seed + i (docs/serve.md) */
	const int32_t k = p.best_of;
	struct serve_job *jobs[SERVE_MAX_CHOICES] = {0};
	bool oom = false;
	if (!p.seed_given)
		p.sampling.seed = fresh_seed(s);
	for (int32_t i = 0; i < k; i++) {
		struct serve_job *j = jobs[i] = serve_job_new(ids, n);
		if (!j) {
			oom = true;
			break;
		}
		j->max_tokens = max_tokens;
		j->ignore_eos = p.ignore_eos;
		j->n_stop_ids = p.n_stop_ids;
		memcpy(j->stop_ids, p.stop_ids, sizeof j->stop_ids);
		j->sampling = p.sampling;
		/* ranking best_of needs each token's logprob, asked or not */
		if (k > p.n_choices)
			j->sampling.logprobs = true;
	}
	free(ids);
	int st = oom ? 503 : serve_engine_submit_group(s->se, jobs, k);
	if (st) {
		for (int32_t i = 0; i < k; i++)
			serve_job_unref(jobs[i]);
		serve_params_deinit(&p);
		return reply_error(s, c, cn, st,
				   st == 429 ? "the request queue is full; retry later"
				   : oom     ? "out of memory"
					     : "the server is shutting down or its engine has failed",
				   NULL);
	}
	struct serve_resp resp = {.chat = chat, .created = (long long)time(NULL), .model = s->cfg.model_name,
				  .vocab = s->vocab, .top_n = p.top_logprobs, .tokens_as_ids = p.tokens_as_ids};
	snprintf(resp.id, sizeof resp.id, "%s-%016llx", chat ? "chatcmpl" : "cmpl",
		 (unsigned long long)atomic_fetch_add(&s->next_id, 1));

	if (p.stream) {
		struct stream *sm = calloc(1, sizeof *sm);
		if (sm && echo_text(s, &p, &sm->echo, &sm->echo_len)) {
			free(sm);
			sm = NULL;
		}
		if (!sm) {
			for (int32_t i = 0; i < k; i++) {
				serve_engine_cancel(s->se, jobs[i]);
				serve_job_unref(jobs[i]);
			}
			serve_params_deinit(&p);
			return reply_error(s, c, cn, 503, "out of memory", NULL);
		}
		sm->s = s;
		sm->cn = cn;
		sm->include_usage = p.include_usage;
		sm->n_prompt = n;
		/* the stop strings outlive this call: the stream takes them over */
		memcpy(sm->stops, p.stops, sizeof sm->stops);
		sm->n_stops = p.n_stops;
		p.n_stops = 0;

		sm->n_gen = k; /* no best_of > n when streaming (serve_req.c) */
		for (int32_t i = 0; i < k; i++) {
			sm->resp[i] = resp;
			sm->resp[i].index = i;
			sm->first[i] = true;
			serve_gen_init(&sm->gen[i], s->se, jobs[i], client_fd(c), s->vocab,
				       (const char *const *)sm->stops, sm->n_stops);
		}
		atomic_fetch_add(&s->open_streams, 1);
		struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, sm,
									   stream_free);
		serve_params_deinit(&p);
		if (!r) {
			stream_free(sm);
			return MHD_NO;
		}
		MHD_add_response_header(r, "Content-Type", "text/event-stream");
		MHD_add_response_header(r, "Cache-Control", "no-cache");
		add_cors(s, r);
		ok = MHD_queue_response(c, MHD_HTTP_OK, r);
		MHD_destroy_response(r);
		serve_metrics_request(&s->m, cn->ep, 200);
		cn->status = 200;
		return ok;
	}

	struct serve_gen *g = calloc((size_t)k, sizeof *g);
	struct serve_buf text[SERVE_MAX_CHOICES] = {{0}}, body = {0};
	int32_t from, to, failed = -1, completion = 0;
	char *echo = NULL;
	size_t echo_len = 0;
	rc = g && !echo_text(s, &p, &echo, &echo_len) ? 0 : -1;
	for (int32_t i = 0; !rc && echo_len && i < k; i++)
		rc = serve_buf_put(&text[i], echo, echo_len) ? -1 : 0;
	free(echo);
	for (int32_t i = 0; i < k; i++) {
		if (g)
			serve_gen_init(&g[i], s->se, jobs[i], client_fd(c), s->vocab, (const char *const *)p.stops,
				       p.n_stops);
		else
			serve_job_unref(jobs[i]);
	}
	/* the engine runs every choice at once; wait for them in turn */
	for (int32_t i = 0; !rc && i < k; i++) {
		while (!g[i].finished && !(rc = serve_gen_pull(&g[i], &text[i], &from, &to)))
			;
		if (!rc && g[i].err_status && failed < 0)
			failed = i;
		if (!rc)
			completion += g[i].n;
	}
	cn->completion_tokens = completion;
	/* best_of: the n choices with the highest cumulative logprob, best first */
	int32_t order[SERVE_MAX_CHOICES];
	double cum[SERVE_MAX_CHOICES];
	for (int32_t i = 0; !rc && i < k; i++) {
		order[i] = i;
		cum[i] = 0.0;
		for (int32_t t = 0; g[i].lp && t < g[i].n; t++)
			cum[i] += g[i].lp[t].logprob;
	}
	if (!rc && k > p.n_choices)
		for (int32_t i = 1; i < k; i++) /* insertion sort: stable, k <= 16 */
			for (int32_t x = i; x > 0 && cum[order[x]] > cum[order[x - 1]]; x--) {
				int32_t tmp = order[x];
				order[x] = order[x - 1];
				order[x - 1] = tmp;
			}
	struct serve_choice ch[SERVE_MAX_CHOICES];
	for (int32_t i = 0; !rc && i < p.n_choices; i++) {
		const struct serve_gen *gi = &g[order[i]];
		ch[i] = (struct serve_choice){.text = text[order[i]].p, .len = text[order[i]].len,
					      .finish = gi->finish, .ids = gi->ids,
					      .lp = p.logprobs ? gi->lp : NULL, .n_ids = gi->n};
	}
	if (rc == 1) { /* the client left: nobody to answer; 499 as nginx logs it */
		pthread_mutex_lock(&s->m.mu);
		s->m.cancelled++;
		pthread_mutex_unlock(&s->m.mu);
		serve_metrics_request(&s->m, cn->ep, 499);
		cn->status = 499;
		ok = MHD_NO;
	} else if (rc || failed >= 0) {
		ok = reply_error(s, c, cn, rc ? 503 : g[failed].err_status, rc ? "out of memory" : g[failed].err_msg,
				 NULL);
	} else if (serve_resp_final_n(&resp, ch, p.n_choices, n, completion, &body)) {
		ok = reply_error(s, c, cn, 503, "out of memory", NULL);
	} else {
		ok = reply(s, c, cn, 200, &body, "application/json");
	}
	serve_buf_deinit(&body);
	for (int32_t i = 0; i < k; i++) {
		serve_buf_deinit(&text[i]);
		if (g)
			serve_gen_deinit(&g[i]);
	}
	free(g);
	serve_params_deinit(&p);
	return ok;
}

/* ---- the other endpoints --------------------------------------------------- */

static enum MHD_Result tok_answer(struct server *s, struct MHD_Connection *c, struct conn *cn)
{
	const struct serve_tok_ctx tc = {.e = s->e, .chat = s->cfg.chat, .model_name = s->cfg.model_name,
					 .max_model_len = s->cfg.ctx_tokens, .n_vocab = s->n_vocab};
	struct serve_buf b = {0};
	char msg[600], param[64];
	int st = serve_tok_answer(&tc, cn->ep == EP_DETOKENIZE, cn->body.p ? cn->body.p : "", cn->body.len, &b, msg,
				  sizeof msg, param, sizeof param);
	if (st == 200)
		return reply(s, c, cn, 200, &b, "application/json");
	serve_buf_deinit(&b);
	return reply_error(s, c, cn, st, msg, param);
}

/* The model object /v1/models lists and /v1/models/{id} returns. */
static cJSON *model_object(const struct server *s)
{
	cJSON *m = cJSON_CreateObject();
	if (!m)
		return NULL;
	cJSON_AddStringToObject(m, "id", s->cfg.model_name);
	cJSON_AddStringToObject(m, "object", "model");
	cJSON_AddNumberToObject(m, "created", (double)s->created);
	cJSON_AddStringToObject(m, "owned_by", "qserve");
	cJSON_AddNumberToObject(m, "max_model_len", s->cfg.ctx_tokens);
	return m;
}

static enum MHD_Result simple_get(struct server *s, struct MHD_Connection *c, struct conn *cn)
{
	const enum serve_endpoint ep = cn->ep;
	struct serve_buf b = {0};
	int rc = 0;
	if (ep == EP_METRICS) {
		rc = serve_metrics_render(&s->m, &b);
		return rc ? reply_error(s, c, cn, 503, "out of memory", NULL)
			  : reply(s, c, cn, 200, &b, "text/plain; version=0.0.4");
	}
	if (ep == EP_HEALTH) {
		bool dr = atomic_load(&s->draining), failed = serve_engine_failed(s->se);
		rc = serve_buf_printf(&b, "{\"status\":\"%s\"}", failed ? "engine_failed" : dr ? "draining" : "ok");
		return rc ? MHD_NO : reply(s, c, cn, dr || failed ? 503 : 200, &b, "application/json");
	}
	cJSON *o;
	if (cn->model_id[0]) {
		if (cn->model_id_long || strcmp(cn->model_id, s->cfg.model_name)) {
			char msg[400];
			snprintf(msg, sizeof msg, "model '%.200s' does not exist (this server has '%.150s')", cn->model_id,
				 s->cfg.model_name);
			return reply_error(s, c, cn, 404, msg, "model");
		}
		if (!(o = model_object(s)))
			return reply_error(s, c, cn, 503, "out of memory", NULL);
	} else {
		o = cJSON_CreateObject();
		cJSON *data = o ? cJSON_AddArrayToObject(o, "data") : NULL;
		cJSON *m = model_object(s);
		if (!data || !m || !cJSON_AddItemToArray(data, m)) {
			cJSON_Delete(m);
			cJSON_Delete(o);
			return reply_error(s, c, cn, 503, "out of memory", NULL);
		}
		cJSON_AddStringToObject(o, "object", "list");
	}
	char *txt = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (!txt || serve_buf_put(&b, txt, strlen(txt))) {
		cJSON_free(txt);
		serve_buf_deinit(&b);
		return reply_error(s, c, cn, 503, "out of memory", NULL);
	}
	cJSON_free(txt);
	return reply(s, c, cn, 200, &b, "application/json");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
				  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
	struct server *s = cls;
	struct conn *cn = *con_cls;
	(void)version;
	if (!cn) {
		bool method_ok;
		cn = calloc(1, sizeof *cn);
		if (!cn)
			return MHD_NO;
		*con_cls = cn;
		const char *mid;
		cn->t0 = now_s();
		snprintf(cn->method, sizeof cn->method, "%s", method);
		size_t k = 0;
		for (const char *u = url; *u && k + 1 < sizeof cn->path; u++)
			cn->path[k++] = *u > ' ' && *u < 127 ? *u : '?'; /* no control bytes in the log */
		cn->path[k] = '\0';
		cn->ep = route(url, method, &cn->post, &method_ok, &mid);
		if (mid) {
			cn->model_id_long = strlen(mid) >= sizeof cn->model_id;
			snprintf(cn->model_id, sizeof cn->model_id, "%s", mid);
		}
		/* refusals before the body is read: nothing is allocated for it */
		if (cn->ep == EP_OTHER)
			return reply_error(s, c, cn, 404, "no such endpoint", NULL);
		if (s->cfg.allow_origin && !strcmp(method, "OPTIONS"))
			return preflight(s, c, cn);
		if (!method_ok)
			return reply_error(s, c, cn, 405, "method not allowed here", NULL);
		if (cn->ep != EP_HEALTH && cn->ep != EP_METRICS && !key_ok(s, c))
			return reply_error(s, c, cn, 401, "missing or wrong API key (Authorization: Bearer KEY)",
					   NULL);
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
		if (cl) {
			char *end;
			unsigned long long v = strtoull(cl, &end, 10);
			if (end == cl || v > s->cfg.max_body) {
				char msg[128];
				snprintf(msg, sizeof msg, "request body larger than %zu bytes", s->cfg.max_body);
				return reply_error(s, c, cn, 413, msg, NULL);
			}
		}
		return MHD_YES;
	}
	if (*upload_size) {
		if (!cn->too_large && cn->body.len + *upload_size > s->cfg.max_body)
			cn->too_large = true;
		if (!cn->too_large && serve_buf_put(&cn->body, upload, *upload_size))
			return MHD_NO;
		*upload_size = 0;
		return MHD_YES;
	}
	/* the request is complete: from now on the connection may wait on the
	 * engine or stream for long, so it gets the idle timeout instead of the
	 * header timeout that bounds clients which never finish a request */
	MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, s->cfg.idle_timeout_s);
	if (cn->too_large) {
		char msg[128];
		snprintf(msg, sizeof msg, "request body larger than %zu bytes", s->cfg.max_body);
		return reply_error(s, c, cn, 413, msg, NULL);
	}
	if (cn->ep == EP_COMPLETIONS || cn->ep == EP_CHAT) {
		if (atomic_load(&s->draining))
			return reply_error(s, c, cn, 503, "the server is shutting down", NULL);
		return generate(s, c, cn);
	}
	if (cn->ep == EP_TOKENIZE || cn->ep == EP_DETOKENIZE)
		return tok_answer(s, c, cn);
	return simple_get(s, c, cn);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t)
{
	struct conn *cn = *con_cls;
	const struct server *s = cls;
	(void)t;
	/* a kept-alive connection must send its next request within the header timeout */
	MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, s->cfg.header_timeout_s);
	if (!cn)
		return;
	/* one line, written at once (stderr is unbuffered; the line fits one write) */
	if (s->cfg.log_requests)
		fprintf(stderr, "qserve: %s %s %d prompt_tokens=%d completion_tokens=%d ms=%.1f\n", cn->method, cn->path,
			cn->status, cn->prompt_tokens, cn->completion_tokens, 1e3 * (now_s() - cn->t0));
	serve_buf_deinit(&cn->body);
	free(cn);
	*con_cls = NULL;
}

/* ---- lifetime ---------------------------------------------------------------- */

int server_start(const struct server_config *cfg, struct qc_engine *e, struct server **out, struct qc_err *err)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
	struct addrinfo *ai = NULL;
	char port[16];
	*out = NULL;
	if (cfg->port < 0 || cfg->port > 65535)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "--port %d: not in 0..65535", cfg->port);
	if (cfg->api_key && !cfg->api_key[0])
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "--api-key: an empty key would let an empty "
				  "Bearer token in; give a key or leave the flag out");
	if (!cfg->max_conns_per_addr || !cfg->header_timeout_s || !cfg->idle_timeout_s)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "connections per address, header and idle timeouts must be > 0");
	snprintf(port, sizeof port, "%d", cfg->port);
	int g = getaddrinfo(cfg->host, port, &hints, &ai);
	if (g)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "--host %s: %s", cfg->host, gai_strerror(g));
	struct server *s = calloc(1, sizeof *s);
	if (!s) {
		freeaddrinfo(ai);
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	}
	s->cfg = *cfg;
	s->e = e;
	s->vocab = qc_engine_vocab(e);
	s->n_vocab = qc_engine_model(e)->cfg.n_vocab;
	s->created = (long long)time(NULL);
	atomic_init(&s->open_streams, 0);
	atomic_init(&s->next_id, (uint64_t)time(NULL) << 20);
	atomic_init(&s->draining, false);
	serve_metrics_init(&s->m);
	s->m.kv_pool_tokens = qc_engine_kv_tokens(e);
	struct serve_engine_opts so = {.max_running = cfg->max_running, .max_queue = cfg->max_queue};
	int rc = serve_engine_start(e, &s->m, &so, &s->se, err);
	if (rc)
		goto out_free;
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC;
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	s->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, s,
				MHD_OPTION_SOCK_ADDR, ai->ai_addr,
				MHD_OPTION_CONNECTION_LIMIT, cfg->max_conns,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, cfg->max_header,
				MHD_OPTION_PER_IP_CONNECTION_LIMIT, cfg->max_conns_per_addr,
				MHD_OPTION_CONNECTION_TIMEOUT, cfg->header_timeout_s,
				MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
				MHD_OPTION_END);
	if (!s->d) {
		rc = qc_err_set(err, QC_EIO, NULL, NULL, -1, "cannot listen on %s:%d (in use, or not a local address?)",
				cfg->host, cfg->port);
		goto out_engine;
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
	s->port = di ? di->port : cfg->port;
	freeaddrinfo(ai);
	*out = s;
	return QC_OK;

out_engine:
	serve_engine_stop(s->se);
out_free:
	serve_metrics_deinit(&s->m);
	free(s);
	freeaddrinfo(ai);
	return rc;
}

int server_port(const struct server *s)
{
	return s->port;
}

void server_stop(struct server *s, double timeout_s)
{
	if (!s)
		return;
	atomic_store(&s->draining, true);
	serve_engine_drain(s->se);
	const double t0 = now_s();
	while ((serve_engine_in_flight(s->se) > 0 || atomic_load(&s->open_streams) > 0) && now_s() - t0 < timeout_s)
		usleep(20000);
	MHD_stop_daemon(s->d);
	serve_engine_stop(s->se);
	serve_metrics_deinit(&s->m);
	free(s);
}
