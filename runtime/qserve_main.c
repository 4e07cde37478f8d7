/* qserve_main.c — the qserve command: an OpenAI-compatible HTTP server.
 *   qserve MODEL [--host 127.0.0.1] [--port 8000] [--api-key KEY] [--max-queue N]
 *          [--chat-template NAME | --chat-template-file PATH] [--model-name NAME] [--max-body BYTES]
 *          [--max-conns N] [--max-conns-per-addr N] [--header-timeout S]
 *          [--idle-timeout S] [--drain-timeout S] [--api-key-file PATH]
 *          [--allow-origin ORIGIN] [--log-requests] [--version] [engine flags: engine_cli.h]
 * MODEL is a .qb bundle or a .gguf (converted to a private temp bundle first,
 * as qrun does). Chat prompts come from the model's tokenizer.chat_template run by
 * the Jinja interpreter, or --chat-template-file, or the built-in --chat-template
 * NAME (chat_prompt.h: a model template that cannot run falls back to the built-in
 * family its markers name, logged once); a template neither can handle stops the
 * start-up (exit 1) instead of producing garbage per request. SIGTERM/SIGINT:
 * stop accepting, let in-flight requests finish (up to --drain-timeout), exit 0.
 * Non-goals: TLS, multiple models, hot reload. Details: docs/serve.md.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat_prompt.h"
#include "chat_template.h"
#include "engine.h"
#include "engine_cli.h"
#include "qc_config.h"
#include "serve_key.h"
#include "server.h"
#include "vocab.h"

static const char *prog = "qserve";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s MODEL [--host 127.0.0.1] [--port 8000] [--api-key KEY] [--max-queue N]\n"
		"              [--chat-template NAME | --chat-template-file PATH] [--model-name NAME]\n"
		"              [--max-body BYTES]\n"
		"              [--max-conns N] [--max-conns-per-addr N] [--header-timeout S]\n"
		"              [--idle-timeout S] [--drain-timeout S] [--api-key-file PATH]\n"
		"              [--allow-origin ORIGIN] [--log-requests] [--version] [engine flags]\n"
		"--max-conns 512: connections in all; --max-conns-per-addr 64: from one client address\n"
		"(more are closed at once); --header-timeout 10: seconds a connection may sit idle before\n"
		"its request is complete; --idle-timeout 300: idle seconds once it is (waiting, streaming,\n"
		"keep-alive after a response: header timeout again). The API key: --api-key KEY, else\n"
		"--api-key-file PATH (one line; keeps the key out of ps), else $QSERVE_API_KEY; not both\n"
		"flags; an empty key is an error. --allow-origin ORIGIN: CORS for that origin ('*': any).\n"
		"--log-requests: one line per request on stderr (method path status tokens ms).\n"
		"MODEL: a .qb bundle or a .gguf. Chat: the model's own Jinja template by default;\n"
		"--chat-template-file PATH runs another; --chat-template NAME picks a built-in: llama-2\n"
		"llama-3 mistral chatml (qwen) phi-3 gemma deepseek (docs/serve.md, chat templates).\n"
		"--port 0 picks a free port (printed on stderr). Endpoints: POST /v1/completions,\n"
		"POST /v1/chat/completions, GET /v1/models, GET /v1/models/ID, POST /tokenize,\n"
		"POST /detokenize, GET /health, GET /metrics (docs/serve.md).\n"
		"engine flags (--max-running defaults to 8):\n%s",
		prog, qc_engine_cli_help);
}

/* The model id: the file name without directory and extension. */
static void default_name(const char *path, char *buf, size_t cap)
{
	const char *b = strrchr(path, '/');
	b = b ? b + 1 : path;
	snprintf(buf, cap, "%s", b);
	char *dot = strrchr(buf, '.');
	if (dot && dot != buf && (!strcmp(dot, ".qb") || !strcmp(dot, ".gguf")))
		*dot = '\0';
}

int main(int argc, char **argv)
{
	const char *model = NULL, *tmpl_name = NULL, *tmpl_file = NULL, *name = NULL, *key_file = NULL;
	char *key = NULL;
	struct qc_chat_prompt *chat = NULL;
	struct server_config sc = {.host = "127.0.0.1", .port = 8000, .max_queue = 256, .max_body = 1 << 20,
				   .max_header = 64 << 10, .max_conns = 512, .max_conns_per_addr = 64,
				   .header_timeout_s = 10, .idle_timeout_s = 300};
	long v, drain = 30;
	struct qc_engine_cli cli;
	struct qc_err err = {0};

	qc_engine_cli_init(&cli);
	cli.max_running = 8;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const bool has = i + 1 < argc;
		int r;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--version")) {
			printf("%s %s\n", prog, QC_VERSION);
			return 0;
		} else if ((r = qc_engine_cli_parse(&cli, prog, argc, argv, &i))) {
			if (r < 0)
				return 1;
		} else if (!strcmp(a, "--host") && has) {
			sc.host = argv[++i];
		} else if (!strcmp(a, "--port") && has) {
			if (!qc_cli_long(prog, a, argv[++i], 0, 65535, &v))
				return 1;
			sc.port = (int)v;
		} else if (!strcmp(a, "--api-key") && has) {
			sc.api_key = argv[++i];
			if (!sc.api_key[0]) {
				fprintf(stderr, "%s: --api-key '': an empty key would let an empty Bearer token in; "
						"give a key or leave the flag out\n", prog);
				return 2;
			}
		} else if (!strcmp(a, "--api-key-file") && has) {
			key_file = argv[++i];
		} else if (!strcmp(a, "--allow-origin") && has) {
			sc.allow_origin = argv[++i];
		} else if (!strcmp(a, "--log-requests")) {
			sc.log_requests = true;
		} else if (!strcmp(a, "--max-queue") && has) {
			if (!qc_cli_long(prog, a, argv[++i], 0, 1 << 20, &v))
				return 1;
			sc.max_queue = (int32_t)v;
		} else if (!strcmp(a, "--chat-template") && has) {
			tmpl_name = argv[++i];
		} else if (!strcmp(a, "--chat-template-file") && has) {
			tmpl_file = argv[++i];
		} else if (!strcmp(a, "--model-name") && has) {
			name = argv[++i];
		} else if (!strcmp(a, "--max-body") && has) {
			if (!qc_cli_long(prog, a, argv[++i], 1024, 1L << 30, &v))
				return 1;
			sc.max_body = (size_t)v;
		} else if (!strcmp(a, "--max-conns") && has) {
			if (!qc_cli_long(prog, a, argv[++i], 1, 65536, &v))
				return 1;
			sc.max_conns = (unsigned)v;
		} else if (!strcmp(a, "--max-conns-per-addr") && has) {
			if (!qc_cli_long(prog, a, argv[++i], 1, 65536, &v))
				return 1;
			sc.max_conns_per_addr = (unsigned)v;
		} else if (!strcmp(a, "--header-timeout") && has) {
			if (!qc_cli_long(prog, a, argv[++i], 1, 3600, &v))
				return 1;
			sc.header_timeout_s = (unsigned)v;
		} else if (!strcmp(a, "--idle-timeout") && has) {
			if (!qc_cli_long(prog, a, argv[++i], 1, 86400, &v))
				return 1;
			sc.idle_timeout_s = (unsigned)v;
		} else if (!strcmp(a, "--drain-timeout") && has) {
			if (!qc_cli_long(prog, a, argv[++i], 0, 86400, &drain))
				return 1;
		} else if (a[0] != '-' && !model) {
			model = a;
		} else {
			fprintf(stderr, "%s: unknown or incomplete argument '%s'\n", prog, a);
			usage(stderr);
			return 1;
		}
	}
	if (!model) {
		usage(stderr);
		return 1;
	}
	const char *key_from;
	if (serve_key_load(sc.api_key, key_file, getenv("QSERVE_API_KEY"), &key, &key_from, &err)) {
		qc_err_print(&err, prog, stderr);
		return 2;
	}
	sc.api_key = key;
	if (tmpl_name && qc_chat_family_by_name(tmpl_name) == QC_CHAT_NONE) {
		fprintf(stderr, "%s: --chat-template '%s': unknown (llama-2 llama-3 mistral chatml qwen phi-3 gemma "
				"deepseek)\n", prog, tmpl_name);
		free(key);
		return 1;
	}

	/* blocked before any thread exists (the engine starts matmul workers), so
	 * every thread inherits the mask and only sigwait below receives them */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	struct qc_engine_opts eo;
	qc_engine_opts_init(&eo);
	qc_engine_cli_apply(&cli, &eo);
	eo.bad_logits = QC_BAD_LOGITS_FAIL_REQUEST; /* one request's NaN must not stop the others */
	struct qc_engine *e = NULL;
	if (qc_engine_open_path(model, "qserve", &eo, &e, &err)) {
		/* 2: no CUDA in this build or no device, as qrun says it */
		if (qc_engine_cli_open_status(&cli, &err) == 2) {
			qc_err_print(&err, prog, stderr);
			return 2;
		}
		goto out_err;
	}
	const struct qc_vocab *voc = qc_engine_vocab(e);
	if (!voc) {
		qc_err_set(&err, QC_EUNSUPPORTED, model, NULL, -1, "the model has no tokenizer; qserve needs one");
		goto out_err;
	}
	size_t tl;
	const struct qc_chat_prompt_opts co = {
		.family = tmpl_name, .template_file = tmpl_file, .model_template = qc_vocab_chat_template(voc),
		.bos_token = qc_vocab_token_text(voc, qc_vocab_bos(voc), &tl),
		.eos_token = qc_vocab_token_text(voc, qc_vocab_eos(voc), &tl),
		.tokenizer_adds_bos = qc_vocab_add_bos(voc), .log_prefix = prog};
	if (qc_chat_prompt_new(&co, &chat, &err)) {
		if (!err.path[0])
			snprintf(err.path, sizeof err.path, "%s", model);
		goto out_err;
	}
	if (!qc_chat_prompt_enabled(chat))
		fprintf(stderr, "%s: the model has no chat template: /v1/chat/completions answers 400 "
				"(start with --chat-template NAME or --chat-template-file PATH to enable it)\n", prog);

	char model_name[256];
	default_name(model, model_name, sizeof model_name);
	sc.model_name = name ? name : model_name;
	sc.chat = chat;
	sc.max_running = (int32_t)cli.max_running;
	const struct qc_model_config *mc = &qc_engine_model(e)->cfg;
	sc.ctx_tokens = cli.ctx ? (int32_t)cli.ctx : mc->n_ctx_train > 0 && mc->n_ctx_train < 4096 ? mc->n_ctx_train : 4096;

	struct server *srv = NULL;
	if (server_start(&sc, e, &srv, &err))
		goto out_err;
	fprintf(stderr, "%s: listening on http://%s:%d (model '%s', chat template %s, context %d, running %ld, "
			"queue %d, K/V pool %lld tokens %s, API key from %s)\n", prog, sc.host, server_port(srv),
		sc.model_name, qc_chat_prompt_describe(chat), sc.ctx_tokens, cli.max_running, sc.max_queue,
		(long long)qc_engine_kv_tokens(e), qc_kv_dtype_name(cli.kv_dtype), key_from);
	fflush(stderr);
	int sig = 0;
	sigwait(&set, &sig);
	fprintf(stderr, "%s: %s: draining in-flight requests (up to %ld s)\n", prog, strsignal(sig), drain);
	server_stop(srv, (double)drain);
	qc_engine_free(e);
	free(key);
	qc_chat_prompt_free(chat);
	fprintf(stderr, "%s: stopped\n", prog);
	return 0;

out_err:
	qc_err_print(&err, prog, stderr);
	qc_engine_free(e);
	free(key);
	qc_chat_prompt_free(chat);
	return 1;
}
