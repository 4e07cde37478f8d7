/* qrun_main.c — the qrun command: generate text from a bundle or a GGUF.
 *
 *   qrun MODEL -p TEXT [-n N] [--n-choices N] [sampling flags] [--stop S]... [--json] [--ignore-eos]
 *        [engine flags]
 *   qrun MODEL --tokenize TEXT [--bos]
 *   qrun bench MODEL --requests N --concurrency C --in I --out O [--warmup W] [--shared-prefix P]
 *              [sampling flags] [engine flags]
 *   qrun perplexity MODEL -f TEXT_FILE [--chunks N] [--ctx N] [--score-all] [engine flags]
 *
 * MODEL is a .qb bundle or a .gguf; a GGUF of a supported architecture is converted
 * first (target cpu) into an unnamed file in $TMPDIR (engine_cli.c), so no exit,
 * signal or crash leaves anything behind. `-p -` reads the prompt's raw bytes from stdin. BOS is added exactly
 * when the vocabulary asks for it (llama.cpp's add_special). --n-choices N: the
 * prompt is prefilled once and N continuations are drawn from it
 * (qc_engine_add_n), choice i with seed + i as qserve's n does, each with its
 * own stop strings; they print once all are done. The engine flags
 * (device, threads, K/V pool, chunked prefill) are engine_cli.h's, shared with
 * qserve. bench: N requests of I synthetic prompt ids and O tokens each (greedy
 * unless sampling flags are given, request i drawing with seed + i; EOS
 * ignored), all queued at once, C at a time, after W untimed warm-up rounds (as
 * llama-bench does); prints prompt and decode tokens/s, TTFT and inter-token
 * latency p50/p99. --shared-prefix P: every prompt, warm-up included, starts
 * with the same P ids (a system prompt the server has seen before), so the
 * prefix cache's effect shows against --no-prefix-cache. perplexity: as
 * llama-perplexity (llama.cpp examples/perplexity, perplexity()): the file
 * tokenized once (BOS as the vocabulary asks), cut into min(--chunks, n/ctx)
 * windows of --ctx tokens (default 512), a window's first token replaced by BOS
 * when the vocabulary adds it, and only the second half scored: the logits at
 * positions ctx/2..ctx-2 predict tokens ctx/2+1..ctx-1 (ctx - 1 - ctx/2 per
 * window); prints the mean NLL per predicted token and exp of it (its "Final
 * estimate: PPL"). --score-all: every position but the first of each window
 * (first = 0), the rule docs/serve.md's fp8 table was measured with.
 * Non-goals: chat templates, interactive mode.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bundle.h"
#include "gguf.h"
#include "engine.h"
#include "engine_cli.h"
#include "qc_config.h"
#include "serve_buf.h"
#include "serve_text.h"
#include "utf8.h"
#include "vocab.h"

static const char *prog = "qrun";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s MODEL -p TEXT [-n N] [--n-choices N] [sampling] [--stop S]... [--json] [--ignore-eos]\n"
		"                [engine]\n"
		"       %s MODEL --tokenize TEXT [--bos]\n"
		"       %s --version\n"
		"       %s perplexity MODEL -f TEXT_FILE [--chunks N] [--score-all] [engine] (--ctx: window, default 512;\n"
		"                scored as llama-perplexity: BOS (if the vocab adds it) at each window's start, only the\n"
		"                second half predicted; --score-all: every position but the first)\n"
		"       %s bench MODEL --requests N --concurrency C --in I --out O [--warmup W] [--shared-prefix P]\n"
		"                [sampling] [engine]\n"
		"MODEL: a .qb bundle or a .gguf (converted first into an unnamed file in $TMPDIR).\n"
		"-p - (and --tokenize -) read raw bytes from stdin. -n: tokens to generate (32).\n"
		"--tokenize prints ids without BOS; --bos adds it, also when the vocabulary says add_bos=false.\n"
		"--json prints {\"prompt_ids\":[...],\"ids\":[...],\"text\":\"...\",\"finish\":\"...\"}\n"
		"(text as plain output prints it: control tokens such as </s> left out, their ids listed).\n"
		"--stop S: end when the text contains S (up to 4; S itself is not printed).\n"
		"--n-choices N (1..16): N continuations of the prompt, prefilled once; choice i samples\n"
		"with seed S + i (as qserve's n), --stop ends each alone; printed when all are done, each\n"
		"after a line \"--- choice i ---\", or with --json as an array of the objects above,\n"
		"\"index\":i added. --max-running defaults to N.\n"
		"sampling:\n"
		"  --temp T (0 = greedy, the default)  --seed S  --top-k K  --top-p P  --min-p P\n"
		"  --repeat-penalty R  --presence-penalty P  --frequency-penalty F  --penalty-last-n N\n"
		"engine:\n%s"
		"bench: N requests of I pseudo-random prompt ids and O tokens each (EOS ignored; greedy\n"
		"unless sampling flags are given, request i with seed S + i), C at a time; prints prompt and decode tokens/s, TTFT and inter-token latency p50/p99. First W\n"
		"untimed warm-up rounds (default 1; 0: none) of C requests of I prompt + 2 tokens: the\n"
		"first use of a kernel (module loading, cuBLAS setup, graph capture) is not timed.\n"
		"--shared-prefix P: every prompt (warm-up too) starts with the same P ids, as a common\n"
		"system prompt does; compare with --no-prefix-cache.\n",
		prog, prog, prog, prog, prog, qc_engine_cli_help);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *read_all(FILE *f, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	while (buf) {
		if (n == cap) {
			char *p = realloc(buf, cap * 2);
			if (!p)
				break;
			buf = p;
			cap *= 2;
		}
		size_t r = fread(buf + n, 1, cap - n, f);
		n += r;
		if (r == 0) {
			*len = n;
			return buf;
		}
	}
	free(buf);
	return NULL;
}

/* --tokenize needs only the vocabulary: read it straight from the GGUF (vocab-only
 * files have no weights to convert) or from the bundle's manifest. Special-token
 * text is not parsed, as llama.cpp's tokenizer tests do; --bos adds BOS (and the
 * vocabulary's other specials), BOS even when it says add_bos = false. */
static int tokenize_only(const char *path, const char *text, size_t len, bool bos, int32_t **ids, size_t *n,
			 struct qc_err *err)
{
	struct qc_gguf *g = NULL;
	struct qc_bundle *b = NULL;
	struct qc_vocab *v = NULL;
	int rc;
	if (qc_path_is_gguf(path)) {
		rc = qc_gguf_open(path, &g, err);
		if (!rc)
			rc = qc_vocab_from_gguf(g, &v, err);
	} else {
		rc = qc_bundle_open(path, &b, err);
		const cJSON *tok = b ? cJSON_GetObjectItemCaseSensitive(b->manifest, "tokenizer") : NULL;
		if (!rc && !tok)
			rc = qc_err_set(err, QC_EUNSUPPORTED, path, NULL, -1, "bundle has no tokenizer");
		if (!rc)
			rc = qc_vocab_from_json(tok, &v, err);
	}
	if (!rc)
		rc = qc_tokenize(v, text, len, bos ? QC_TOK_ADD_SPECIAL : (enum qc_tok_flags)0, ids, n, err);
	/* --bos forces BOS, also where the vocabulary says add_bos = false */
	const int32_t b_id = v ? qc_vocab_bos(v) : -1;
	if (!rc && bos && b_id >= 0 && (*n == 0 || (*ids)[0] != b_id)) {
		int32_t *p = realloc(*ids, (*n + 1) * sizeof *p);
		if (!p)
			rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		if (p) {
			memmove(p + 1, p, *n * sizeof *p);
			p[0] = b_id;
			*ids = p;
			(*n)++;
		}
	}
	qc_vocab_free(v);
	qc_gguf_close(g);
	qc_bundle_close(b);
	return rc;
}

/* Append n bytes to the NUL-terminated growable string *s. */
static int append(char **s, size_t *len, size_t *cap, const char *p, size_t n, struct qc_err *err)
{
	if (*len + n + 1 > *cap) {
		size_t c = *cap ? *cap : 256;
		while (c < *len + n + 1)
			c *= 2;
		char *q = realloc(*s, c);
		if (!q)
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		*s = q;
		*cap = c;
	}
	memcpy(*s + *len, p, n);
	*len += n;
	(*s)[*len] = '\0';
	return QC_OK;
}

/* Append the bytes token id stands for. */
static int append_piece(const struct qc_vocab *v, int32_t id, enum qc_piece_flags flags, char **s,
			size_t *len, size_t *cap, struct qc_err *err)
{
	char buf[256];
	size_t n = qc_token_to_piece(v, id, buf, sizeof buf, flags);
	if (n <= sizeof buf)
		return append(s, len, cap, buf, n, err);
	char *big = malloc(n);
	if (!big)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	size_t m = qc_token_to_piece(v, id, big, n, flags);
	int rc = append(s, len, cap, big, m < n ? m : n, err);
	free(big);
	return rc;
}

/* gen with room for n ids (kept on failure: NULL is returned and the caller frees the old one). */
static int32_t *gen_grow(int32_t *gen, size_t *cap, int32_t n)
{
	if ((size_t)n <= *cap)
		return gen;
	size_t c = *cap ? *cap : 64;
	while (c < (size_t)n)
		c *= 2;
	int32_t *p = realloc(gen, c * sizeof *p);
	if (p)
		*cap = c;
	return p;
}

static void print_ids(const int32_t *ids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%s%d", i ? " " : "", ids[i]);
	printf("\n");
}

static void print_json_ids(const int32_t *ids, size_t n)
{
	putchar('[');
	for (size_t i = 0; i < n; i++)
		printf("%s%d", i ? "," : "", ids[i]);
	putchar(']');
}

/* Make bytes [*done, n) of p valid UTF-8: complete sequences as they are, every
 * other byte as one U+FFFD each (what llama.cpp's reference texts show: "e7 a6 !"
 * gives two U+FFFD), handing each run to out. Unless final, a sequence cut off
 * by the end of p is held back (*done stops before it) for the next call. */
static void utf8_sanitize(const char *p, size_t n, size_t *done, bool final,
			  void (*out)(void *ctx, const char *s, size_t len), void *ctx)
{
	const unsigned char *u = (const unsigned char *)p;
	size_t i = *done;
	while (i < n) {
		const int l = qc_utf8_char(u + i, n - i);
		if (l > 0) {
			out(ctx, p + i, (size_t)l);
			i += (size_t)l;
		} else if (l == 0 && !final) {
			break;
		} else {
			out(ctx, "\xef\xbf\xbd", 3);
			i += 1;
		}
	}
	*done = i;
}

static void out_stdout(void *ctx, const char *s, size_t len)
{
	(void)ctx;
	fwrite(s, 1, len, stdout);
}

struct strbuf {
	char *s;
	size_t len, cap;
	int rc;
	struct qc_err *err;
};

static void out_strbuf(void *ctx, const char *s, size_t len)
{
	struct strbuf *b = ctx;
	if (!b->rc)
		b->rc = append(&b->s, &b->len, &b->cap, s, len, b->err);
}

/* A JSON string of n bytes of valid UTF-8 (NUL included): quotes, backslashes
 * and control characters escaped. */
static void print_json_string(const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	putchar('"');
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '"' || s[i] == '\\')
			printf("\\%c", s[i]);
		else if (s[i] < 0x20)
			printf("\\u%04x", s[i]);
		else
			putchar(s[i]);
	}
	putchar('"');
}


static int cmp_dbl(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Nearest-rank percentile p (0..1] of v (sorted here); 0 when empty. */
static double percentile(double *v, size_t n, double p)
{
	if (!n)
		return 0.0;
	qsort(v, n, sizeof *v, cmp_dbl);
	size_t k = (size_t)(p * (double)n + 0.999999);
	return v[k ? k - 1 : 0];
}

struct bench_req {
	uint64_t id;
	int32_t seen;              /* generated tokens observed so far */
	double t_last;             /* when the last of them was observed */
};

/* qrun bench: see the header. Prompt tokens/s counts the steps that gave some
 * request its first token (prefill steps), decode tokens/s the tokens of the
 * other steps over their time; with C = 1 these are llama-bench's pp and tg. */
/* Untimed rounds of min(conc, n_req) requests shaped like the run's (same
 * prompt length, 2 generated tokens), released at once. */
static int bench_warmup(struct qc_engine *e, int rounds, int n, const int32_t *prompt, int n_in,
			struct qc_err *err)
{
	for (int w = 0; w < rounds; w++) {
		uint64_t ids[1024];
		int added = 0, rc = QC_OK;
		for (; added < n && rc == QC_OK; added++) {
			struct qc_engine_request q = {.prompt = prompt, .n_prompt = n_in, .max_tokens = 2,
						      .ignore_eos = true};
			qc_sampler_params_init(&q.sampling);
			q.sampling.temperature = 0.0f;
			if ((rc = qc_engine_add(e, &q, &ids[added], err)))
				break;
		}
		while (rc == QC_OK && qc_engine_has_work(e))
			rc = qc_engine_step(e, err);
		for (int i = 0; i < added; i++)
			qc_engine_release(e, ids[i]);
		if (rc)
			return rc;
	}
	return QC_OK;
}

/* Fixed pseudo-random ids, never 0: prompt[from..n) from the generator *lcg. */
static void bench_ids(int32_t *prompt, int from, int n, int32_t n_vocab, uint64_t *lcg)
{
	for (int j = from; j < n; j++) {
		*lcg = *lcg * 6364136223846793005u + 1442695040888963407u;
		prompt[j] = 1 + (int32_t)((*lcg >> 33) % (uint64_t)(n_vocab > 1 ? n_vocab - 1 : 1));
	}
}

static int run_bench(const char *model, int n_req, int conc, int n_in, int n_out, int warmup,
		     int n_shared, const struct qc_sampler_params *sp, const struct qc_engine_cli *cli,
		     struct qc_err *err)
{
	struct qc_engine_opts o;
	struct qc_engine *e = NULL;
	struct bench_req *rq = calloc((size_t)n_req, sizeof *rq);
	int32_t *prompt = malloc(sizeof(int32_t) * (size_t)n_in);
	double *ttft = malloc(sizeof(double) * (size_t)n_req);
	double *itl = malloc(sizeof(double) * (size_t)n_req * (size_t)n_out + 1);
	size_t n_ttft = 0, n_itl = 0;
	uint64_t pre_tok = 0, dec_tok = 0;
	double pre_s = 0.0, dec_s = 0.0;
	int rc;

	if (!rq || !prompt || !ttft || !itl) {
		rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		goto out;
	}
	qc_engine_opts_init(&o);
	o.max_running = conc;
	o.max_seq_tokens = n_in + n_out;
	o.max_batch_tokens = n_in * conc > 512 ? n_in * conc : 512;
	o.max_prefill_tokens = o.max_batch_tokens; /* throughput: prompts in one step, as before */
	qc_engine_cli_apply(cli, &o); /* explicit flags win over the sizes above */
	if ((rc = qc_engine_open_path(model, "qrun", &o, &e, err)))
		goto out;
	const int32_t n_vocab = qc_engine_model(e)->cfg.n_vocab;
	uint64_t lcg = 0x9e3779b97f4a7c15u;
	bench_ids(prompt, 0, n_in, n_vocab, &lcg); /* the warm-up prompt: ids of the same kind */
	if ((rc = bench_warmup(e, warmup, conc < n_req ? conc : n_req, prompt, n_in, err)))
		goto out;
	struct qc_sched_stats st0;
	qc_engine_stats(e, &st0);
	for (int i = 0; i < n_req; i++) {
		bench_ids(prompt, n_shared, n_in, n_vocab, &lcg); /* the first n_shared stay */
		struct qc_engine_request q = {.prompt = prompt, .n_prompt = n_in, .max_tokens = n_out,
					      .ignore_eos = true, .sampling = *sp};
		q.sampling.seed = sp->seed + (uint64_t)i; /* each request its own draws */
		if ((rc = qc_engine_add(e, &q, &rq[i].id, err)))
			goto out;
	}
	const double t0 = now_s();
	double t_prev = t0;
	while (qc_engine_has_work(e)) {
		if ((rc = qc_engine_step(e, err)))
			goto out;
		const double t = now_s();
		int firsts = 0, later = 0;
		for (int i = 0; i < n_req; i++) {
			const int32_t *ids;
			int32_t n = 0;
			enum qc_sched_finish fin;
			if (qc_engine_output(e, rq[i].id, &ids, &n, &fin) || n <= rq[i].seen)
				continue;
			if (rq[i].seen == 0) {
				ttft[n_ttft++] = t - t0;
				firsts++;
				later += n - 1;
			} else {
				for (int32_t k = rq[i].seen; k < n; k++)
					itl[n_itl++] = (t - rq[i].t_last) / (double)(n - rq[i].seen);
				later += n - rq[i].seen;
			}
			rq[i].seen = n;
			rq[i].t_last = t;
		}
		if (firsts) {
			pre_tok += (uint64_t)firsts * (uint64_t)n_in;
			pre_s += t - t_prev;
		} else {
			dec_tok += (uint64_t)later;
			dec_s += t - t_prev;
		}
		t_prev = t;
	}
	const double wall = t_prev - t0;
	if (cli->threads > 0)
		printf("requests %d, concurrency %d, in %d, out %d, threads %ld\n", n_req, conc, n_in, n_out, cli->threads);
	else
		printf("requests %d, concurrency %d, in %d, out %d, threads all\n", n_req, conc, n_in, n_out);
	printf("K/V pool: %lld tokens (%s)\n", (long long)qc_engine_kv_tokens(e), qc_kv_dtype_name(o.kv_dtype));
	printf("prompt: %llu tokens in %.3f s = %.2f tokens/s\n", (unsigned long long)pre_tok, pre_s,
	       pre_s > 0 ? (double)pre_tok / pre_s : 0.0);
	printf("decode: %llu tokens in %.3f s = %.2f tokens/s\n", (unsigned long long)dec_tok, dec_s,
	       dec_s > 0 ? (double)dec_tok / dec_s : 0.0);
	printf("TTFT ms: p50 %.2f p99 %.2f\n", 1e3 * percentile(ttft, n_ttft, 0.5),
	       1e3 * percentile(ttft, n_ttft, 0.99));
	printf("inter-token ms: p50 %.2f p99 %.2f\n", 1e3 * percentile(itl, n_itl, 0.5),
	       1e3 * percentile(itl, n_itl, 0.99));
	printf("total: %.3f s, %.2f generated tokens/s\n", wall,
	       wall > 0 ? (double)((uint64_t)n_req * (uint64_t)n_out) / wall : 0.0);
	struct qc_sched_stats st;
	qc_engine_stats(e, &st);
	printf("prefix cache: %llu of %llu admitted prompt tokens from the cache\n",
	       (unsigned long long)(st.prefix_hit_tokens - st0.prefix_hit_tokens),
	       (unsigned long long)(st.prefix_queried_tokens - st0.prefix_queried_tokens));
out:
	qc_engine_free(e);
	free(rq);
	free(prompt);
	free(ttft);
	free(itl);
	return rc;
}

/* qrun perplexity MODEL -f FILE ...: argv[0] is "perplexity"; see the header. */
static int perplexity_main(int argc, char **argv)
{
	const char *model = NULL, *file = NULL;
	long chunks = 0;
	bool score_all = false;
	struct qc_engine_cli cli;
	struct qc_err err = {0};
	struct qc_engine *e = NULL;
	char *text = NULL;
	int32_t *ids = NULL;
	size_t n_ids = 0, len = 0;
	int rc;

	qc_engine_cli_init(&cli);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int r;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if ((r = qc_engine_cli_parse(&cli, prog, argc, argv, &i))) {
			if (r < 0)
				return 1;
		} else if (!strcmp(a, "-f") && i + 1 < argc) {
			file = argv[++i];
		} else if (!strcmp(a, "--score-all")) {
			score_all = true;
		} else if (!strcmp(a, "--chunks") && i + 1 < argc) {
			if (!qc_cli_long(prog, a, argv[++i], 1, 1L << 20, &chunks))
				return 1;
		} else if (a[0] != '-' && !model) {
			model = a;
		} else {
			fprintf(stderr, "%s perplexity: unknown or incomplete argument '%s'\n", prog, a);
			usage(stderr);
			return 1;
		}
	}
	if (!model || !file) {
		fprintf(stderr, "%s perplexity: need MODEL and -f TEXT_FILE\n", prog);
		return 1;
	}
	FILE *f = fopen(file, "rb");
	if (!f) {
		fprintf(stderr, "%s: %s: %s\n", prog, file, strerror(errno));
		return 1;
	}
	text = read_all(f, &len);
	fclose(f);
	if (!text) {
		fprintf(stderr, "%s: %s: cannot read\n", prog, file);
		return 1;
	}
	struct qc_engine_opts o;
	qc_engine_opts_init(&o);
	o.max_running = 64; /* positions scored per forward (qc_engine_score) */
	o.max_seq_tokens = 512;
	qc_engine_cli_apply(&cli, &o);
	const int32_t ctx = o.max_seq_tokens;
	if ((rc = qc_engine_open_path(model, "qrun", &o, &e, &err))) {
		qc_err_print(&err, prog, stderr);
		qc_engine_free(e);
		free(text);
		return qc_engine_cli_open_status(&cli, &err);
	}
	if ((rc = qc_engine_tokenize(e, text, len, true, &ids, &n_ids, &err)))
		goto out;
	long n_win = (long)(n_ids / (size_t)ctx);
	if (chunks && chunks < n_win)
		n_win = chunks;
	if (n_win < 1) {
		rc = qc_err_set(&err, QC_EINVAL, file, NULL, -1, "%zu tokens: fewer than one window of %d", n_ids,
				ctx);
		goto out;
	}
	if (ctx < 2) {
		rc = qc_err_set(&err, QC_EINVAL, NULL, NULL, -1, "--ctx %d: need at least 2", ctx);
		goto out;
	}
	const struct qc_vocab *v = qc_engine_vocab(e);
	const bool bos = v && qc_vocab_add_bos(v);
	const int32_t first = score_all ? 0 : ctx / 2, per_win = ctx - 1 - first;
	double nll = 0.0, t0 = now_s();
	for (long w = 0; w < n_win; w++) {
		int32_t *win = ids + w * ctx, saved = win[0];
		double one;
		if (bos && !score_all)
			win[0] = qc_vocab_bos(v); /* llama-perplexity's BOS at each window's start */
		rc = qc_engine_score(e, win, ctx, first, &one, &err);
		win[0] = saved;
		if (rc)
			goto out;
		nll += one;
		fprintf(stderr, "[%ld] %.4f\n", w + 1, exp(one / per_win));
	}
	const double n_pred = (double)n_win * per_win, mean = nll / n_pred;
	printf("%s: %ld windows of %d tokens (%zu in the file), %.0f predicted (%s), kv %s: mean NLL %.6f, "
	       "perplexity %.4f (%.1f s)\n", file, n_win, ctx, n_ids, n_pred,
	       score_all ? "every position but the first" : "second halves, as llama-perplexity",
	       qc_kv_dtype_name(o.kv_dtype), mean, exp(mean), now_s() - t0);
out:
	if (rc)
		qc_err_print(&err, prog, stderr);
	free(ids);
	free(text);
	qc_engine_free(e);
	return rc ? 1 : 0;
}

/* qrun bench MODEL ...: argv[0] is "bench". */
static int sampling_flag(struct qc_sampler_params *sp, int argc, char **argv, int *i);

static int bench_main(int argc, char **argv)
{
	const char *model = NULL;
	long n_req = 0, conc = 0, n_in = 0, n_out = 0, warmup = 1, n_shared = 0;
	struct qc_engine_cli cli;
	struct qc_sampler_params sp;
	struct qc_err err = {0};

	qc_engine_cli_init(&cli);
	qc_sampler_params_init(&sp);
	sp.temperature = 0.0f; /* greedy unless --temp says otherwise */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const bool has = i + 1 < argc;
		int r;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if ((r = qc_engine_cli_parse(&cli, prog, argc, argv, &i)) ||
			   (r = sampling_flag(&sp, argc, argv, &i))) {
			if (r < 0)
				return 1;
		} else if (!strcmp(a, "--requests") && has) {
			if (!qc_cli_long(prog, a, argv[++i], 1, 1024, &n_req))
				return 1;
		} else if (!strcmp(a, "--concurrency") && has) {
			if (!qc_cli_long(prog, a, argv[++i], 1, 1024, &conc))
				return 1;
		} else if (!strcmp(a, "--in") && has) {
			if (!qc_cli_long(prog, a, argv[++i], 1, 65536, &n_in))
				return 1;
		} else if (!strcmp(a, "--out") && has) {
			if (!qc_cli_long(prog, a, argv[++i], 1, 65536, &n_out))
				return 1;
		} else if (!strcmp(a, "--warmup") && has) {
			if (!qc_cli_long(prog, a, argv[++i], 0, 16, &warmup))
				return 1;
		} else if (!strcmp(a, "--shared-prefix") && has) {
			if (!qc_cli_long(prog, a, argv[++i], 0, 65536, &n_shared))
				return 1;
		} else if (a[0] != '-' && !model) {
			model = a;
		} else {
			fprintf(stderr, "%s bench: unknown or incomplete argument '%s'\n", prog, a);
			usage(stderr);
			return 1;
		}
	}
	if (!model || !n_req || !conc || !n_in || !n_out) {
		fprintf(stderr, "%s bench: need MODEL and --requests 1..1024 --concurrency 1..1024 "
				"--in 1..65536 --out 1..65536\n", prog);
		return 1;
	}
	if (n_shared > n_in) {
		fprintf(stderr, "%s bench: --shared-prefix %ld is longer than --in %ld\n", prog, n_shared, n_in);
		return 1;
	}
	if (run_bench(model, (int)n_req, (int)conc, (int)n_in, (int)n_out, (int)warmup, (int)n_shared, &sp, &cli,
		      &err)) {
		qc_err_print(&err, prog, stderr);
		return qc_engine_cli_open_status(&cli, &err);
	}
	return 0;
}

/* One choice of a generate run (--n-choices: several of one prompt). */
struct choice {
	uint64_t id;               /* qc_engine_add_n's id */
	struct serve_text st;      /* --stop holdback, per choice */
	struct serve_buf vis;
	char *raw;                 /* (raw_len) bytes of text so far, NUL-terminated */
	size_t raw_len, raw_cap, raw_done; /* raw_done: bytes already printed */
	int32_t *gen;              /* (n) generated ids, kept past the request's release */
	size_t gen_cap;
	int32_t n;
	enum qc_sched_finish fin;
	bool done;
};

/* Take choice c's new ids after a step: text through the stop-string holdback
 * (with --stop) or as pieces; a matched stop string releases the choice at once.
 * The continuation's pieces are as llama.cpp's common_token_to_piece gives them
 * (no leading-space strip: it is not a sequence start), control tokens (</s>,
 * <|im_end|>) silent, so the streamed text and --json's "text" are the same
 * (its "ids" still list them); with --stop the text is the server's, so qrun
 * and qserve stop alike. QC_OK or QC_ENOMEM. */
static int choice_take(struct qc_engine *e, struct choice *c, int n_stops, struct qc_err *err)
{
	const int32_t *ids = NULL;
	int32_t n_now = 0;
	int rc = QC_OK;
	if (c->done || qc_engine_output(e, c->id, &ids, &n_now, &c->fin))
		return QC_OK;
	if (n_now > c->n) {
		int32_t *g = gen_grow(c->gen, &c->gen_cap, n_now);
		if (!g)
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		c->gen = g;
	}
	for (; c->n < n_now && !c->st.stopped; c->n++) {
		c->gen[c->n] = ids[c->n];
		if (!n_stops) {
			if ((rc = append_piece(qc_engine_vocab(e), ids[c->n], 0, &c->raw, &c->raw_len, &c->raw_cap, err)))
				return rc;
			continue;
		}
		if (serve_text_push(&c->st, ids[c->n], &c->vis))
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		if ((rc = append(&c->raw, &c->raw_len, &c->raw_cap, c->vis.p ? c->vis.p : "", c->vis.len, err)))
			return rc;
		serve_buf_consume(&c->vis, c->vis.len);
	}
	if (c->st.stopped) { /* the stop string is complete: end this choice now */
		c->fin = QC_SCHED_FINISH_STOP_STRING;
		c->done = true;
		qc_engine_release(e, c->id);
		return QC_OK;
	}
	if (c->fin == QC_SCHED_FINISH_NONE)
		return QC_OK;
	c->done = true;
	if (!n_stops)
		return QC_OK;
	if (serve_text_finish(&c->st, &c->vis))
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	rc = append(&c->raw, &c->raw_len, &c->raw_cap, c->vis.p ? c->vis.p : "", c->vis.len, err);
	serve_buf_consume(&c->vis, c->vis.len);
	return rc;
}

/* Print choice c (index i) once generation is over: the rest of the streamed
 * text, or with --n-choices a "--- choice i ---" header and its text, or its
 * --json object (with --n-choices one element of the array, "index" added). */
static int choice_print(struct choice *c, int i, const int32_t *pids, size_t n_pids, bool json, bool n_given,
			struct qc_err *err)
{
	if (!json) {
		if (n_given)
			printf("--- choice %d ---\n", i);
		utf8_sanitize(c->raw, c->raw_len, &c->raw_done, true, out_stdout, NULL);
		printf("\n");
		return QC_OK;
	}
	struct strbuf txt = {.err = err};
	utf8_sanitize(c->raw, c->raw_len, &c->raw_done, true, out_strbuf, &txt);
	if (txt.rc) {
		free(txt.s);
		return txt.rc;
	}
	if (n_given)
		printf("%s{\"index\":%d,", i ? "," : "", i);
	else
		printf("{");
	printf("\"prompt_ids\":");
	print_json_ids(pids, n_pids);
	printf(",\"ids\":");
	print_json_ids(c->gen, (size_t)c->n);
	printf(",\"text\":");
	print_json_string(txt.s ? txt.s : "", txt.len);
	printf(",\"finish\":\"%s\"}%s", qc_sched_finish_name(c->fin), n_given ? "" : "\n");
	free(txt.s);
	return QC_OK;
}

static void choice_deinit(struct choice *c)
{
	serve_text_deinit(&c->st);
	serve_buf_deinit(&c->vis);
	free(c->raw);
	free(c->gen);
}

/* The sampling flags of a generate run; 1 consumed, -1 bad value, 0 not one of them. */
static int sampling_flag(struct qc_sampler_params *sp, int argc, char **argv, int *i)
{
	static const struct {
		const char *flag;
		size_t off;
		double lo, hi;
	} floats[] = {
		{"--temp", offsetof(struct qc_sampler_params, temperature), 0.0, 100.0},
		{"--top-p", offsetof(struct qc_sampler_params, top_p), 0.0, 1.0},
		{"--min-p", offsetof(struct qc_sampler_params, min_p), 0.0, 1.0},
		{"--repeat-penalty", offsetof(struct qc_sampler_params, repeat_penalty), 0.01, 100.0},
		{"--presence-penalty", offsetof(struct qc_sampler_params, presence_penalty), -2.0, 2.0},
		{"--frequency-penalty", offsetof(struct qc_sampler_params, frequency_penalty), -2.0, 2.0},
	};
	const char *a = argv[*i];
	const bool is_int = !strcmp(a, "--top-k") || !strcmp(a, "--seed") || !strcmp(a, "--penalty-last-n");
	size_t k = 0;
	while (k < sizeof floats / sizeof floats[0] && strcmp(a, floats[k].flag))
		k++;
	if (!is_int && k == sizeof floats / sizeof floats[0])
		return 0;
	if (*i + 1 >= argc) {
		fprintf(stderr, "%s: %s needs a value\n", prog, a);
		return -1;
	}
	const char *v = argv[++*i];
	long x;
	if (!strcmp(a, "--seed")) {
		char *end;
		errno = 0;
		unsigned long long u = strtoull(v, &end, 10);
		if (errno || end == v || *end || v[0] == '-') {
			fprintf(stderr, "%s: --seed '%s': expected an unsigned integer\n", prog, v);
			return -1;
		}
		sp->seed = u;
		return 1;
	}
	if (!strcmp(a, "--top-k")) {
		if (!qc_cli_long(prog, a, v, 0, 1L << 24, &x))
			return -1;
		sp->top_k = (int32_t)x;
		return 1;
	}
	if (!strcmp(a, "--penalty-last-n")) {
		if (!qc_cli_long(prog, a, v, -1, QC_SAMPLER_MAX_HISTORY, &x))
			return -1;
		sp->penalty_last_n = (int32_t)x;
		return 1;
	}
	return qc_cli_float(prog, a, v, floats[k].lo, floats[k].hi, (float *)((char *)sp + floats[k].off)) ? 1 : -1;
}

int main(int argc, char **argv)
{
	const char *model = NULL, *prompt = NULL, *tok_text = NULL;
	const char *stops[SERVE_MAX_STOPS];
	int n_stops = 0, json = 0, bos = 0, ignore_eos = 0, n_given = 0;
	long n_gen = 32, n_choices = 1;
	struct qc_engine_cli cli;
	struct qc_sampler_params sp;
	struct qc_err err = {0};
	int rc = 0;

	if (argc > 1 && !strcmp(argv[1], "--version")) {
		printf("%s %s\n", prog, QC_VERSION);
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "bench"))
		return bench_main(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "perplexity"))
		return perplexity_main(argc - 1, argv + 1);
	qc_engine_cli_init(&cli);
	qc_sampler_params_init(&sp);
	sp.temperature = 0.0f; /* greedy unless --temp says otherwise */
	sp.seed = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool has = i + 1 < argc;
		int r;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if ((r = qc_engine_cli_parse(&cli, prog, argc, argv, &i)) ||
			   (r = sampling_flag(&sp, argc, argv, &i))) {
			if (r < 0)
				return 1;
		} else if (!strcmp(a, "-p") && has) {
			prompt = argv[++i];
		} else if (!strcmp(a, "-n") && has) {
			if (!qc_cli_long(prog, a, argv[++i], 1, 1L << 20, &n_gen))
				return 1;
		} else if (!strcmp(a, "--stop") && has) {
			const char *st = argv[++i];
			if (!*st || strlen(st) > SERVE_MAX_STOP_BYTES || n_stops == SERVE_MAX_STOPS) {
				fprintf(stderr, "%s: --stop: at most %d non-empty strings of up to %d bytes\n", prog,
					SERVE_MAX_STOPS, SERVE_MAX_STOP_BYTES);
				return 1;
			}
			stops[n_stops++] = st;
		} else if (!strcmp(a, "--n-choices") && has) {
			if (!qc_cli_long(prog, a, argv[++i], 1, QC_SCHED_MAX_CHOICES, &n_choices))
				return 1;
			n_given = 1;
		} else if (!strcmp(a, "--tokenize") && has) {
			tok_text = argv[++i];
		} else if (!strcmp(a, "--json")) {
			json = 1;
		} else if (!strcmp(a, "--bos")) {
			bos = 1;
		} else if (!strcmp(a, "--ignore-eos")) {
			ignore_eos = 1;
		} else if (a[0] != '-' && !model) {
			model = a;
		} else {
			fprintf(stderr, "%s: unknown or incomplete argument '%s'\n", prog, a);
			usage(stderr);
			return 1;
		}
	}
	if (!model || (!prompt && !tok_text)) {
		usage(stderr);
		return 1;
	}
	if (!cli.max_running)
		cli.max_running = n_choices; /* one request: its choices are the running set */

	struct qc_engine *e = NULL;
	const char *text = NULL;
	char *stdin_buf = NULL;
	int32_t *pids = NULL;
	size_t n_pids = 0, text_len = 0;
	struct choice ch[QC_SCHED_MAX_CHOICES] = {0};
	int n_ch = 0; /* choices whose serve_text is initialized */

	if (tok_text) {
		size_t tl = strlen(tok_text);
		if (!strcmp(tok_text, "-")) {
			stdin_buf = read_all(stdin, &tl);
			if (!stdin_buf) {
				rc = qc_err_set(&err, QC_EIO, "<stdin>", NULL, -1, "cannot read the text");
				goto out_err;
			}
			tok_text = stdin_buf;
		}
		if ((rc = tokenize_only(model, tok_text, tl, bos, &pids, &n_pids, &err)))
			goto out_err;
		print_ids(pids, n_pids);
		goto out;
	}
	struct qc_engine_opts eo;
	qc_engine_opts_init(&eo);
	qc_engine_cli_apply(&cli, &eo);
	if ((rc = qc_engine_open_path(model, "qrun", &eo, &e, &err))) {
		qc_err_print(&err, prog, stderr);
		qc_engine_free(e);
		free(stdin_buf);
		return qc_engine_cli_open_status(&cli, &err);
	}
	if (!strcmp(prompt, "-")) {
		stdin_buf = read_all(stdin, &text_len);
		if (!stdin_buf) {
			rc = qc_err_set(&err, QC_EIO, "<stdin>", NULL, -1, "cannot read the prompt");
			goto out_err;
		}
		text = stdin_buf;
	} else {
		text = prompt;
		text_len = strlen(prompt);
	}
	if ((rc = qc_engine_tokenize(e, text, text_len, true, &pids, &n_pids, &err)))
		goto out_err;
	if (n_pids == 0) {
		rc = qc_err_set(&err, QC_EINVAL, NULL, NULL, -1,
				"empty prompt and the vocabulary adds no BOS: nothing to condition on");
		goto out_err;
	}

	struct qc_engine_request q = {.prompt = pids, .n_prompt = (int32_t)n_pids,
				      .max_tokens = (int32_t)n_gen, .ignore_eos = ignore_eos, .sampling = sp};
	uint64_t ids_n[QC_SCHED_MAX_CHOICES];
	if ((rc = qc_engine_add_n(e, &q, (int32_t)n_choices, ids_n, &err)))
		goto out_err;
	for (long c = 0; c < n_choices; c++) {
		ch[c].id = ids_n[c];
		serve_text_init(&ch[c].st, qc_engine_vocab(e), stops, n_stops);
	}
	n_ch = (int)n_choices;
	/* Without --n-choices the one choice streams as it completes. */
	const bool stream = !json && !n_given;
	double t0 = now_s(), t_first = 0.0;
	while (qc_engine_has_work(e)) {
		if ((rc = qc_engine_step(e, &err)))
			goto out_err;
		bool live = false;
		for (int c = 0; c < n_ch; c++) {
			if ((rc = choice_take(e, &ch[c], n_stops, &err)))
				goto out_err;
			if (ch[c].n > 0 && t_first == 0.0)
				t_first = now_s();
			live |= !ch[c].done;
			if (stream) {
				utf8_sanitize(ch[c].raw, ch[c].raw_len, &ch[c].raw_done, false, out_stdout, NULL);
				fflush(stdout);
			}
		}
		if (!live)
			break;
	}
	double t1 = now_s();
	int32_t n_total = 0;
	if (json && n_given)
		printf("[");
	for (int c = 0; c < n_ch; c++) {
		n_total += ch[c].n;
		if ((rc = choice_print(&ch[c], c, pids, n_pids, json, n_given, &err)))
			goto out_err;
	}
	if (json && n_given)
		printf("]\n");
	fprintf(stderr, "%s: %zu prompt tokens, %d generated in %.3f s (first token %.3f s, %.1f tokens/s after it); "
			"K/V pool %lld tokens (%s)\n",
		prog, n_pids, n_total, t1 - t0, t_first > 0 ? t_first - t0 : 0.0,
		n_total > n_ch && t1 > t_first ? (double)(n_total - n_ch) / (t1 - t_first) : 0.0,
		(long long)qc_engine_kv_tokens(e), qc_kv_dtype_name(eo.kv_dtype));
	goto out;

out_err:
	qc_err_print(&err, prog, stderr);
out:
	for (int c = 0; c < n_ch; c++)
		choice_deinit(&ch[c]);
	free(pids);
	free(stdin_buf);
	qc_engine_free(e);
	return rc ? 1 : 0;
}
