/* engine_cli.c — see engine_cli.h. */
#include "engine_cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_cuda.h"
#include "bundle.h"
#include "convert.h"
#include "gguf.h"
#include "model.h"
#include "plan.h"

const char qc_engine_cli_help[] =
	"  --device cpu|cuda        backend (default cpu); cuda: --gpu-mem-util F (0..1, default 0.9)\n"
	"  --threads T              CPU matmul threads (default: online CPUs; results do not depend on it)\n"
	"  --kv-mem MIB             paged K/V pool size (default: room for every running sequence)\n"
	"  --kv-dtype f16|fp8       K/V cache storage (default f16); fp8: E4M3 with a power-of-two scale\n"
	"                           per token and K/V head, ~2x the tokens of a binary16 pool\n"
	"  --max-running N          sequences decoded together\n"
	"  --ctx N                  longest sequence, prompt + output (default: the model's, at most 4096;\n"
	"                           above the model's context length: allowed, with a warning)\n"
	"  --max-batch-tokens N     tokens per forward step (default 512)\n"
	"  --max-prefill-tokens N   prompt tokens per step: longer prompts are prefilled in chunks, and a\n"
	"                           running stream waits at most one such step (default: cpu 128,\n"
	"                           cuda --max-batch-tokens)\n"
	"  --tp N                   tensor parallel ranks (1..8): must equal the bundle's (qconvert\n"
	"                           --tp N; a plain bundle is 1); default: the bundle's own. One thread and\n"
	"                           backend instance per rank (cuda: GPU r), each with its own K/V pool\n"
	"                           (--kv-mem is per rank); --threads is shared out among the ranks\n"
	"  --no-prefix-cache        do not reuse the K/V of earlier requests' identical prompt prefixes\n"
	"  --no-verify              load without checking every tensor's XXH3 against the manifest (the\n"
	"                           check runs on threads beside the load and refuses a bundle whose bytes\n"
	"                           changed after qconvert wrote it, naming the tensor)\n";

void qc_engine_cli_init(struct qc_engine_cli *c)
{
	memset(c, 0, sizeof *c);
	c->device = "cpu";
}

bool qc_cli_long(const char *prog, const char *flag, const char *v, long lo, long hi, long *out)
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

bool qc_cli_float(const char *prog, const char *flag, const char *v, double lo, double hi, float *out)
{
	char *end;
	errno = 0;
	double x = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(x) || x < lo || x > hi) {
		fprintf(stderr, "%s: %s '%s': expected a number in %g..%g\n", prog, flag, v, lo, hi);
		return false;
	}
	*out = (float)x;
	return true;
}

int qc_engine_cli_parse(struct qc_engine_cli *c, const char *prog, int argc, char **argv, int *i)
{
	static const struct {
		const char *flag;
		size_t off;
		long lo, hi;
	} longs[] = {
		{"--threads", offsetof(struct qc_engine_cli, threads), 1, 256},
		{"--kv-mem", offsetof(struct qc_engine_cli, kv_mib), 1, 1L << 24},
		{"--max-running", offsetof(struct qc_engine_cli, max_running), 1, 1024},
		{"--ctx", offsetof(struct qc_engine_cli, ctx), 16, 1L << 20},
		{"--max-batch-tokens", offsetof(struct qc_engine_cli, max_batch), 1, 1L << 16},
		{"--max-prefill-tokens", offsetof(struct qc_engine_cli, max_prefill), 1, 1L << 16},
		{"--tp", offsetof(struct qc_engine_cli, tp), 1, QC_TP_MAX},
	};
	const char *a = argv[*i];
	if (!strcmp(a, "--no-verify")) {
		c->no_verify = true;
		return 1;
	}
	if (!strcmp(a, "--no-prefix-cache")) {
		c->no_prefix_cache = true;
		return 1;
	}
	const bool known = !strcmp(a, "--device") || !strcmp(a, "--gpu-mem-util") || !strcmp(a, "--kv-dtype");
	size_t k = 0;
	while (k < sizeof longs / sizeof longs[0] && strcmp(a, longs[k].flag))
		k++;
	if (!known && k == sizeof longs / sizeof longs[0])
		return 0;
	if (*i + 1 >= argc) {
		fprintf(stderr, "%s: %s needs a value\n", prog, a);
		return -1;
	}
	const char *v = argv[++*i];
	if (!strcmp(a, "--device")) {
		if (strcmp(v, "cpu") && strcmp(v, "cuda")) {
			fprintf(stderr, "%s: --device '%s': expected cpu or cuda\n", prog, v);
			return -1;
		}
		c->device = v;
		return 1;
	}
	if (!strcmp(a, "--kv-dtype")) {
		if (strcmp(v, "f16") && strcmp(v, "fp8")) {
			fprintf(stderr, "%s: --kv-dtype '%s': expected f16 or fp8\n", prog, v);
			return -1;
		}
		c->kv_dtype = strcmp(v, "fp8") ? QC_KV_F16 : QC_KV_FP8;
		return 1;
	}
	if (!strcmp(a, "--gpu-mem-util"))
		return qc_cli_float(prog, a, v, 0.01, 1.0, &c->gpu_mem_util) ? 1 : -1;
	return qc_cli_long(prog, a, v, longs[k].lo, longs[k].hi, (long *)((char *)c + longs[k].off)) ? 1 : -1;
}

void qc_engine_cli_apply(const struct qc_engine_cli *c, struct qc_engine_opts *o)
{
	if (!strcmp(c->device, "cuda")) {
		o->backend = &qc_backend_cuda;
		o->act_round = QC_ACT_ROUND_NONE;
		o->gpu_mem_util = c->gpu_mem_util;
	}
	o->kv_dtype = c->kv_dtype;
	if (c->threads)
		o->n_threads = (int32_t)c->threads;
	if (c->kv_mib)
		o->kv_budget_bytes = (uint64_t)c->kv_mib << 20;
	if (c->max_running)
		o->max_running = (int32_t)c->max_running;
	if (c->ctx)
		o->max_seq_tokens = (int32_t)c->ctx;
	if (c->max_batch)
		o->max_batch_tokens = (int32_t)c->max_batch;
	if (c->max_prefill)
		o->max_prefill_tokens = (int32_t)c->max_prefill;
	if (c->no_prefix_cache)
		o->prefix_cache = false;
	o->no_verify = c->no_verify;
	o->tp = (int32_t)c->tp;
}

bool qc_path_is_gguf(const char *path)
{
	unsigned char m[4] = {0};
	FILE *f = fopen(path, "rb");
	if (!f)
		return false;
	size_t r = fread(m, 1, 4, f);
	fclose(f);
	return r == 4 && !memcmp(m, "GGUF", 4);
}

/* The GGUF's general.architecture must be one the engine runs: checked on the
 * metadata alone, so an unsupported file is refused at once, naming it, instead
 * of after a full conversion naming the temp bundle. */
static int check_arch(const char *path, struct qc_err *err)
{
	struct qc_gguf *g = NULL;
	struct qc_gguf_str a;
	char arch[64];
	int rc = qc_gguf_open(path, &g, err);
	if (rc)
		return rc;
	rc = qc_gguf_get_str(g, "general.architecture", &a, err);
	if (rc == QC_ENOTFOUND)
		rc = qc_err_set(err, QC_EFORMAT, path, NULL, -1, "general.architecture is missing");
	if (!rc) {
		snprintf(arch, sizeof arch, "%.*s", (int)(a.len < sizeof arch ? a.len : sizeof arch - 1), a.p);
		if (a.len >= sizeof arch || !qc_model_arch_supported(arch))
			rc = qc_err_set(err, QC_EUNSUPPORTED, path, NULL, -1, "architecture '%s' not supported", arch);
	}
	qc_gguf_close(g);
	return rc;
}

/* A longer sequence than the model was trained on runs, but positions past its
 * context length were never seen in training: say so once, at open. */
static void warn_ctx(const char *prog, const struct qc_engine_opts *o, const struct qc_engine *e)
{
	const int32_t n_ctx = qc_engine_model(e)->cfg.n_ctx_train;
	if (o->max_seq_tokens > n_ctx)
		fprintf(stderr, "%s: warning: --ctx %d is above the model's context length %d; positions past it "
			"were never trained and output degrades\n", prog, o->max_seq_tokens, n_ctx);
}

static int open_gguf(const char *path, const struct qc_engine_opts *o, struct qc_engine **e, struct qc_err *err);

void qc_engine_cli_print_ranks(const struct qc_engine *e, const struct qc_engine_opts *o, const char *tag, FILE *f)
{
	const int n = qc_engine_tp_size(e);
	const bool cuda = o->backend == &qc_backend_cuda;
	for (int r = 0; r < n; r++) {
		const struct qc_model *m = qc_engine_rank_model(e, r);
		const struct qc_model_config *c = &m->cfg;
		char dev[32];
		snprintf(dev, sizeof dev, cuda ? "cuda:%d" : "cpu", r);
		fprintf(f, "%s: tensor parallel rank %d of %d on %s: %d heads, %d K/V heads, FFN %d, vocabulary [%d, %d), "
			   "%.1f MiB of weights\n", tag, r, n, dev, c->n_head, c->n_head_kv, c->n_ff, m->tp.vocab0,
			m->tp.vocab0 + c->n_vocab, (double)(m->data_hi - m->data_lo) / (1024.0 * 1024.0));
	}
}

int qc_engine_open_path(const char *path, const char *tag, const struct qc_engine_opts *o,
			struct qc_engine **e, struct qc_err *err)
{
	int rc = qc_path_is_gguf(path) ? open_gguf(path, o, e, err) : qc_engine_new(path, o, e, err);
	if (!rc) {
		warn_ctx(tag, o, *e);
		qc_engine_cli_print_ranks(*e, o, tag, stderr);
	}
	return rc;
}

static int open_gguf(const char *path, const struct qc_engine_opts *o, struct qc_engine **e, struct qc_err *err)
{
	int rc = check_arch(path, err);
	if (rc)
		return rc;
	const char *td = getenv("TMPDIR");
	int fd = -1;
	struct qc_convert_opts co = {.in = path, .out = td && *td ? td : "/tmp", .out_fd = &fd,
				     .target = QC_TARGET_CPU, .alignment = QC_BUNDLE_ALIGN,
				     .plan_flags = QC_PLAN_FUSE_MOE};
	rc = qc_convert_gguf(&co, NULL, err);
	if (!rc) {
		char proc[64];
		snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
		rc = qc_engine_new(proc, o, e, err);
		if (rc && !strcmp(err->path, proc)) { /* name the user's file; the offset was the bundle's */
			char tensor[QC_ERR_NAME_MAX], msg[QC_ERR_MSG_MAX];
			snprintf(tensor, sizeof tensor, "%s", err->tensor);
			snprintf(msg, sizeof msg, "%s", err->msg);
			qc_err_set(err, rc, path, tensor[0] ? tensor : NULL, -1, "%s", msg);
		}
	}
	if (fd >= 0)
		close(fd); /* the engine maps the bundle; its last reference goes with the mapping */
	return rc;
}

int qc_engine_cli_open_status(const struct qc_engine_cli *c, const struct qc_err *err)
{
	return !strcmp(c->device, "cuda") && (err->code == QC_ECUDA || err->code == QC_EUNSUPPORTED) ? 2 : 1;
}
