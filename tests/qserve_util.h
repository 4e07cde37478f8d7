/* qserve_util.h — what the qserve tests (tests/test_qserve*.c) share: starting qserve
 * on a free loopback port and stopping it, HTTP through the curl CLI (JSON bodies, SSE
 * streams, /metrics values), and the expectation from an independent source: llama.cpp's
 * 32 greedy ids after "Once upon a time" (fixtures/reference/stories260K.json) and their
 * text through the vocab. Header-only with static functions, as check.h is.
 * Bloat: no HTTP client of its own — curl is what a user has.
 */
#ifndef QC_QSERVE_UTIL_H
#define QC_QSERVE_UTIL_H

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../tests/check.h"
#include "gguf.h"
#include "vocab.h"

static const char *bin(void)
{
	const char *b = getenv("QC_BIN");
	return b && *b ? b : "build/bin";
}

static inline void sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* Output of a shell command (stdout only), malloc'd; *status its exit code. */
static inline char *sh(const char *cmd, int *status)
{
	FILE *p = popen(cmd, "r");
	char *out = NULL;
	size_t len = 0, cap = 0;
	int c;
	while (p && (c = fgetc(p)) != EOF) {
		if (len + 2 > cap) {
			cap = cap ? cap * 2 : 4096;
			out = realloc(out, cap);
		}
		out[len++] = (char)c;
	}
	if (out)
		out[len] = '\0';
	int st = p ? pclose(p) : -1;
	*status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	return out ? out : strdup("");
}

/* ---- the server process ------------------------------------------------------ */

struct srv {
	pid_t pid;
	int port;
	int status;      /* exit status when it exited during start-up */
	char log[64];
};

/* Start qserve with args; wait for its "listening" line. */
static inline bool srv_start(struct srv *s, const char *args)
{
	s->status = -1;
	s->port = 0;
	snprintf(s->log, sizeof s->log, "/tmp/qc_qserve_log.XXXXXX");
	int fd = mkstemp(s->log);
	if (fd < 0)
		return false;
	char cmd[4096]; /* args may be 2 KB */
	snprintf(cmd, sizeof cmd, "exec %s/qserve %s --port 0%s", bin(), args, strstr(args, "--threads") ? "" : " --threads 1");
	s->pid = fork();
	if (s->pid == 0) {
		dup2(fd, 2);
		int nul = open("/dev/null", O_WRONLY);
		dup2(nul, 1);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	close(fd);
	for (int i = 0; i < 600; i++) { /* 60 s: a loaded machine converts slowly */
		char *log = check_read_file(s->log, NULL);
		const char *p = log ? strstr(log, "listening on http://127.0.0.1:") : NULL;
		if (p) {
			s->port = atoi(p + strlen("listening on http://127.0.0.1:"));
			free(log);
			return s->port > 0;
		}
		free(log);
		int ws;
		if (waitpid(s->pid, &ws, WNOHANG) == s->pid) {
			s->pid = -1;
			s->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
			return false;
		}
		sleep_ms(100);
	}
	kill(s->pid, SIGKILL); /* never said it listens: do not leave it behind */
	waitpid(s->pid, NULL, 0);
	s->pid = -1;
	return false;
}

/* A start that failed: show qserve's log, remove it, count one failure. */
static inline void srv_failed(struct srv *s, const char *what)
{
	char *log = check_read_file(s->log, NULL);
	CHECK(0, "%s did not start (exit %d): %s", what, s->status, log ? log : "");
	free(log);
	unlink(s->log);
}

/* SIGTERM, wait; the exit status (-1 when it did not exit normally). */
static inline int srv_stop(struct srv *s)
{
	int st = 0;
	if (s->pid <= 0)
		return -1;
	kill(s->pid, SIGTERM);
	waitpid(s->pid, &st, 0);
	s->pid = -1;
	unlink(s->log);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- HTTP through curl ---------------------------------------------------------- */

/* One request; returns the body (malloc'd), *status the HTTP status (0: none). */
static inline char *http(const struct srv *s, const char *method, const char *path, const char *body,
		  const char *extra, int *status)
{
	char in[] = "/tmp/qc_qserve_in.XXXXXX", out[] = "/tmp/qc_qserve_out.XXXXXX";
	int fi = mkstemp(in), fo = mkstemp(out);
	if (fi < 0 || fo < 0)
		return strdup("");
	if (body && write(fi, body, strlen(body)) != (ssize_t)strlen(body))
		fprintf(stderr, "short write\n");
	close(fi);
	close(fo);
	char cmd[4096];
	snprintf(cmd, sizeof cmd,
		 "curl -s -N --max-time 120 -X %s -o %s -w '%%{http_code}' -H 'Content-Type: application/json' "
		 "%s%s %s 'http://127.0.0.1:%d%s'",
		 method, out, body ? "--data-binary @" : "", body ? in : "", extra ? extra : "", s->port, path);
	int st;
	char *code = sh(cmd, &st);
	*status = atoi(code);
	free(code);
	char *b = check_read_file(out, NULL);
	unlink(in);
	unlink(out);
	return b ? b : strdup("");
}

static inline cJSON *post_json(const struct srv *s, const char *path, const char *body, const char *extra, int *status)
{
	char *b = http(s, "POST", path, body, extra, status);
	cJSON *j = cJSON_Parse(b);
	free(b);
	return j;
}

static const char *jstr(const cJSON *o, const char *path)
{
	/* dotted path with numeric components for arrays: "choices.0.text" */
	char buf[256];
	snprintf(buf, sizeof buf, "%s", path);
	const cJSON *cur = o;
	for (char *tok = strtok(buf, "."); tok && cur; tok = strtok(NULL, "."))
		cur = (*tok >= '0' && *tok <= '9') ? cJSON_GetArrayItem(cur, atoi(tok))
						   : cJSON_GetObjectItemCaseSensitive(cur, tok);
	return cJSON_IsString(cur) ? cur->valuestring : NULL;
}

static inline double jnum(const cJSON *o, const char *a, const char *b)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, a), b);
	return cJSON_IsNumber(x) ? x->valuedouble : -1;
}

/* An SSE body: concatenated text (choices[0].text or delta.content), the
 * last finish_reason, usage completion_tokens (-1 if none), [DONE] last. */
struct sse {
	char text[8192];
	char finish[32];
	int usage_completion;
	int n_events;
	bool done_last, error;
};

static inline void parse_sse(const char *body, struct sse *r)
{
	memset(r, 0, sizeof *r);
	r->usage_completion = -1;
	const char *p = body;
	while (p && *p) {
		const char *end = strstr(p, "\n\n");
		if (!end)
			break;
		if (strncmp(p, "data: ", 6)) {
			r->error = true;
			break;
		}
		size_t n = (size_t)(end - p - 6);
		char *ev = strndup(p + 6, n);
		r->n_events++;
		r->done_last = !strcmp(ev, "[DONE]");
		cJSON *j = r->done_last ? NULL : cJSON_Parse(ev);
		if (!r->done_last && !j)
			r->error = true;
		if (j && cJSON_GetObjectItem(j, "error"))
			r->error = true;
		const cJSON *ch = j ? cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0) : NULL;
		if (ch) {
			const cJSON *t = cJSON_GetObjectItem(ch, "text");
			const cJSON *d = cJSON_GetObjectItem(ch, "delta");
			if (d)
				t = cJSON_GetObjectItem(d, "content");
			if (cJSON_IsString(t))
				strncat(r->text, t->valuestring, sizeof r->text - strlen(r->text) - 1);
			const cJSON *f = cJSON_GetObjectItem(ch, "finish_reason");
			if (cJSON_IsString(f))
				snprintf(r->finish, sizeof r->finish, "%s", f->valuestring);
		}
		const cJSON *u = j ? cJSON_GetObjectItem(j, "usage") : NULL;
		if (cJSON_IsObject(u))
			r->usage_completion = (int)jnum(j, "usage", "completion_tokens");
		cJSON_Delete(j);
		free(ev);
		p = end + 2;
	}
}

/* The value of an unlabelled metric line "name value", or -1. */
static inline double metric(const struct srv *s, const char *name)
{
	int st;
	char *b = http(s, "GET", "/metrics", NULL, NULL, &st);
	double v = -1;
	char pat[128];
	snprintf(pat, sizeof pat, "\n%s ", name);
	const char *p = strstr(b, pat);
	if (st == 200 && p)
		v = strtod(p + strlen(pat), NULL);
	free(b);
	return v;
}

/* ---- expectations from independent sources ------------------------------------------ */

/* llama.cpp's 32 greedy ids after "Once upon a time" and their text through the vocab. */
static inline int ref_ids(int32_t *ids, char *text, size_t cap)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/reference/stories260K.json", check_fixtures());
	char *b = check_read_file(path, NULL);
	cJSON *j = b ? cJSON_Parse(b) : NULL;
	free(b);
	const cJSON *g = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "greedy"), 0);
	const cJSON *a = cJSON_GetObjectItem(g, "ids");
	int n = 0;
	if (!jstr(g, "prompt") || strcmp(jstr(g, "prompt"), "Once upon a time")) {
		cJSON_Delete(j);
		return 0;
	}
	for (const cJSON *it = a ? a->child : NULL; it && n < 64; it = it->next)
		ids[n++] = (int32_t)it->valuedouble;
	cJSON_Delete(j);

	snprintf(path, sizeof path, "%s/gguf/stories260K.gguf", check_fixtures());
	struct qc_gguf *gg = NULL;
	struct qc_vocab *v = NULL;
	struct qc_err err = {0};
	text[0] = '\0';
	if (qc_gguf_open(path, &gg, &err) || qc_vocab_from_gguf(gg, &v, &err)) {
		qc_gguf_close(gg);
		return 0;
	}
	size_t len = 0;
	for (int i = 0; i < n; i++) {
		char piece[64];
		size_t k = qc_token_to_piece(v, ids[i], piece, sizeof piece, 0);
		if (k <= sizeof piece && len + k < cap) {
			memcpy(text + len, piece, k);
			len += k;
		}
	}
	text[len] = '\0';
	qc_vocab_free(v);
	qc_gguf_close(gg);
	return n;
}

#endif
