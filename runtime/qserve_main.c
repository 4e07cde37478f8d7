/* qserve_main.c — the qserve command: an OpenAI-compatible HTTP server.
 *   qserve MODEL [--host 127.0.0.1] [--port 8000] [--api-key KEY] [--device cpu|cuda]
 *          [--max-queue N] [--max-running N] [--ctx N] [--threads T] [--kv-mem MIB]
 *          [--chat-template NAME] [--model-name NAME] [--max-body BYTES]
 *          [--max-conns N] [--drain-timeout S] [--gpu-mem-util F]
 * MODEL is a .qb bundle or a .gguf (converted to a private temp bundle first,
 * as qrun does). The chat template is --chat-template, else detected from the
 * model's tokenizer.chat_template; a template qserve does not know stops the
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

#include "backend_cuda.h"
#include "bundle.h"
#include "chat_template.h"
#include "convert.h"
#include "engine.h"
#include "plan.h"
#include "server.h"
#include "vocab.h"

static const char *prog = "qserve";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s MODEL [--host 127.0.0.1] [--port 8000] [--api-key KEY] [--device cpu|cuda]\n"
		"              [--max-queue N] [--max-running N] [--ctx N] [--threads T] [--kv-mem MIB]\n"
		"              [--chat-template NAME] [--model-name NAME] [--max-body BYTES]\n"
		"              [--max-conns N] [--drain-timeout S] [--gpu-mem-util F]\n"
		"MODEL: a .qb bundle or a .gguf. Chat templates: llama-2 llama-3 mistral chatml (qwen)\n"
		"phi-3 gemma deepseek; detected from the model when --chat-template is absent.\n"
		"--port 0 picks a free port (printed on stderr). Endpoints: POST /v1/completions,\n"
		"POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics.\n",
		prog);
}

static bool is_gguf(const char *path)
{
	unsigned char m[4] = {0};
	FILE *f = fopen(path, "rb");
	if (!f)
		return false;
	size_t r = fread(m, 1, 4, f);
	fclose(f);
	return r == 4 && !memcmp(m, "GGUF", 4);
}

/* A GGUF goes through a temp bundle that is unlinked as soon as it is mapped. */
static int open_engine(const char *path, const struct qc_engine_opts *o, struct qc_engine **e, struct qc_err *err)
{
	if (!is_gguf(path))
		return qc_engine_new(path, o, e, err);
	const char *td = getenv("TMPDIR");
	char dir[4096], out[4200];
	snprintf(dir, sizeof dir, "%s/qserve-XXXXXX", td && *td ? td : "/tmp");
	if (!mkdtemp(dir))
		return qc_err_set(err, QC_EIO, dir, NULL, -1, "mkdtemp: %s", strerror(errno));
	snprintf(out, sizeof out, "%s/model.qb", dir);
	struct qc_convert_opts co = {.in = path, .out = out, .target = QC_TARGET_CPU,
				     .alignment = QC_BUNDLE_ALIGN, .plan_flags = QC_PLAN_FUSE_MOE};
	int rc = qc_convert_gguf(&co, NULL, err);
	if (!rc)
		rc = qc_engine_new(out, o, e, err);
	unlink(out);
	rmdir(dir);
	return rc;
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

/* Integer argument in [lo, hi]; false (and a message) otherwise. */
static bool arg_long(const char *flag, const char *v, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long x = strtol(v, &end, 10);
	if (errno || end == v || *end || x < lo || x > hi) {
		fprintf(stderr, "%s: %s '%s': expected an integer in %ld..%ld\n", prog, flag, v, lo, hi);
		return false;
	}
	*out = x;
	return true;
}

int main(int argc, char **argv)
{
	const char *model = NULL, *device = "cpu", *tmpl_name = NULL, *name = NULL;
	struct server_config sc = {.host = "127.0.0.1", .port = 8000, .max_queue = 256, .max_body = 1 << 20,
				   .max_header = 64 << 10, .max_conns = 512};
	long v, drain = 30, max_running = 8, ctx = 0, threads = 0, kv_mib = 0;
	float gpu_mem_util = 0.0f;
	struct qc_err err = {0};

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const bool has = i + 1 < argc;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--host") && has) {
			sc.host = argv[++i];
		} else if (!strcmp(a, "--port") && has) {
			if (!arg_long(a, argv[++i], 0, 65535, &v))
				return 1;
			sc.port = (int)v;
		} else if (!strcmp(a, "--api-key") && has) {
			sc.api_key = argv[++i];
		} else if (!strcmp(a, "--device") && has) {
			device = argv[++i];
		} else if (!strcmp(a, "--max-queue") && has) {
			if (!arg_long(a, argv[++i], 0, 1 << 20, &v))
				return 1;
			sc.max_queue = (int32_t)v;
		} else if (!strcmp(a, "--max-running") && has) {
			if (!arg_long(a, argv[++i], 1, 1024, &max_running))
				return 1;
		} else if (!strcmp(a, "--ctx") && has) {
			if (!arg_long(a, argv[++i], 16, 1 << 20, &ctx))
				return 1;
		} else if (!strcmp(a, "--threads") && has) {
			if (!arg_long(a, argv[++i], 1, 256, &threads))
				return 1;
		} else if (!strcmp(a, "--kv-mem") && has) {
			if (!arg_long(a, argv[++i], 1, 1 << 20, &kv_mib))
				return 1;
		} else if (!strcmp(a, "--chat-template") && has) {
			tmpl_name = argv[++i];
		} else if (!strcmp(a, "--model-name") && has) {
			name = argv[++i];
		} else if (!strcmp(a, "--max-body") && has) {
			if (!arg_long(a, argv[++i], 1024, 1L << 30, &v))
				return 1;
			sc.max_body = (size_t)v;
		} else if (!strcmp(a, "--max-conns") && has) {
			if (!arg_long(a, argv[++i], 1, 65536, &v))
				return 1;
			sc.max_conns = (unsigned)v;
		} else if (!strcmp(a, "--gpu-mem-util") && has) {
			char *end;
			gpu_mem_util = strtof(argv[++i], &end);
			if (*end || !(gpu_mem_util > 0.0f && gpu_mem_util <= 1.0f)) {
				fprintf(stderr, "%s: --gpu-mem-util '%s': expected a fraction in (0, 1]\n", prog, argv[i]);
				return 1;
			}
		} else if (!strcmp(a, "--drain-timeout") && has) {
			if (!arg_long(a, argv[++i], 0, 86400, &drain))
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
	if (strcmp(device, "cpu") && strcmp(device, "cuda")) {
		fprintf(stderr, "%s: unknown device '%s' (cpu or cuda)\n", prog, device);
		return 1;
	}
	enum qc_chat_family fam = QC_CHAT_NONE;
	if (tmpl_name && (fam = qc_chat_family_by_name(tmpl_name)) == QC_CHAT_NONE) {
		fprintf(stderr, "%s: --chat-template '%s': unknown (llama-2 llama-3 mistral chatml qwen phi-3 gemma "
				"deepseek)\n", prog, tmpl_name);
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
	eo.max_running = (int32_t)max_running;
	eo.max_seq_tokens = (int32_t)ctx;
	eo.n_threads = (int32_t)threads;
	eo.kv_budget_bytes = (uint64_t)kv_mib << 20;
	if (!strcmp(device, "cuda")) {
		/* the CUDA backend computes in float: no ggml activation-rounding emulation */
		eo.backend = &qc_backend_cuda;
		eo.act_round = QC_ACT_ROUND_NONE;
		eo.gpu_mem_util = gpu_mem_util;
	}
	struct qc_engine *e = NULL;
	if (open_engine(model, &eo, &e, &err)) {
		/* 2: no CUDA in this build or no device, as qrun says it */
		if (!strcmp(device, "cuda") && (err.code == QC_ECUDA || err.code == QC_EUNSUPPORTED)) {
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
	const char *tmpl = qc_vocab_chat_template(voc);
	if (!tmpl_name && tmpl) {
		fam = qc_chat_detect(tmpl);
		if (fam == QC_CHAT_NONE) {
			qc_err_set(&err, QC_EUNSUPPORTED, model, NULL, -1,
				   "tokenizer.chat_template is not one qserve knows (llama-2 llama-3 mistral chatml "
				   "phi-3 gemma deepseek); pass --chat-template NAME to choose one");
			goto out_err;
		}
	}
	if (fam == QC_CHAT_NONE)
		fprintf(stderr, "%s: the model has no chat template: /v1/chat/completions answers 400 "
				"(start with --chat-template NAME to enable it)\n", prog);

	char model_name[256];
	default_name(model, model_name, sizeof model_name);
	sc.model_name = name ? name : model_name;
	sc.chat = fam;
	sc.max_running = (int32_t)max_running;
	const struct qc_model_config *mc = &qc_engine_model(e)->cfg;
	sc.ctx_tokens = ctx ? (int32_t)ctx : mc->n_ctx_train > 0 && mc->n_ctx_train < 4096 ? mc->n_ctx_train : 4096;

	struct server *srv = NULL;
	if (server_start(&sc, e, &srv, &err))
		goto out_err;
	fprintf(stderr, "%s: listening on http://%s:%d (model '%s', chat template %s, context %d, running %ld, "
			"queue %d)\n", prog, sc.host, server_port(srv), sc.model_name, qc_chat_family_name(fam),
		sc.ctx_tokens, max_running, sc.max_queue);
	fflush(stderr);
	int sig = 0;
	sigwait(&set, &sig);
	fprintf(stderr, "%s: %s: draining in-flight requests (up to %ld s)\n", prog, strsignal(sig), drain);
	server_stop(srv, (double)drain);
	qc_engine_free(e);
	fprintf(stderr, "%s: stopped\n", prog);
	return 0;

out_err:
	qc_err_print(&err, prog, stderr);
	qc_engine_free(e);
	return 1;
}
