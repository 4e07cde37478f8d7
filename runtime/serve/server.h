/* server.h — qserve's HTTP side: routes, auth, limits, OpenAI endpoints.
 *
 * Owns: the libmicrohttpd daemon (one thread per connection, so a connection
 * may block on its own job without touching the engine thread), the routes
 * POST /v1/completions, POST /v1/chat/completions, GET /v1/models,
 * GET /v1/models/{id}, POST /tokenize, POST /detokenize (serve_tok.c), GET /health,
 * GET /metrics, the Bearer-key check on every route but /health and /metrics, the caps on header bytes
 * (MHD's per-connection memory limit) and body bytes (Content-Length checked
 * before anything is read; chunked bodies cut at the cap), connections per
 * client address (MHD's per-IP limit), a short header timeout until a request
 * is complete and the idle timeout after it (MHD's per-connection timeout, set
 * at each step; its inactivity clock restarts on every byte, so a client that
 * trickles bytes is bounded by the per-address limit, not the timeout), and
 * drain-then-stop.
 * Non-goals: TLS (put a proxy in front), HTTP/2, batching across requests
 * (the engine does that). Reference: the OpenAI API reference; libmicrohttpd
 * 0.9.75 manual.
 */
#ifndef QC_SERVER_H
#define QC_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat_prompt.h"
#include "engine.h"
#include "qc_err.h"

struct server_config {
	const char *host;            /* numeric address or name; "127.0.0.1" by default */
	int port;                    /* 0: any free port (server_port tells which) */
	const char *api_key;         /* NULL: no auth; never logged */
	const char *allow_origin;    /* NULL: no CORS headers; else Access-Control-Allow-Origin's value,
					and OPTIONS preflights are answered (204) without the key */
	bool log_requests;           /* one access-log line per request on stderr */
	const char *model_name;      /* the id /v1/models lists and requests must name */
	const struct qc_chat_prompt *chat; /* NULL or disabled: chat requests get a 400; not owned */
	int32_t max_running;         /* the engine's running set */
	int32_t max_queue;           /* accepted requests beyond it before 429 */
	int32_t ctx_tokens;          /* prompt + max_tokens limit */
	size_t max_body;             /* request body cap, bytes */
	size_t max_header;           /* header bytes cap (MHD memory limit per connection) */
	unsigned max_conns;          /* concurrent connections */
	unsigned max_conns_per_addr; /* of those, from one client address (> 0); more are closed at once */
	unsigned header_timeout_s;   /* a connection that has not sent a complete request within this
					many idle seconds is closed (> 0) */
	unsigned idle_timeout_s;     /* once a request is complete: idle seconds before closing (> 0) */
};

struct server;

/* Start listening and the engine thread; e is borrowed and from now on driven
 * only by that thread (tokenization, read-only, happens in connection threads).
 * QC_EIO when the address cannot be bound, QC_EINVAL, QC_ENOMEM. */
int server_start(const struct server_config *cfg, struct qc_engine *e, struct server **out, struct qc_err *err);

/* The bound port. */
int server_port(const struct server *s);

/* Refuse new requests (503), wait up to timeout_s for in-flight ones to finish
 * and their responses to be written, then stop everything and free. Accepts NULL. */
void server_stop(struct server *s, double timeout_s);

#endif
