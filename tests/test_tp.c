/* test_tp.c — tensor parallelism on the CPU backend (docs/tp.md), no GPU.
 *
 * - The candidate merge (qc_backend_tp_merge_top) against a full-row sort:
 *   random rows with many ties and -inf, cut into 1..8 slices of random widths,
 *   each slice's top m from runtime/ops qc_ref_topk, ids shifted, merged; the
 *   result must equal the row's own best m (larger, then lower id) exactly.
 * - The models: qc_model_rank_open on a plain bundle gives the same views; on a
 *   --tp bundle the whole is weightless (rank -1, refused by the CPU backend) and
 *   each rank has the local widths, its vocabulary range and its own byte range.
 * - The sharding math: mkgguf families (dense llama, GQA, tied embeddings, MoE
 *   fused and unfused, qwen2 biases, qwen2moe's shared expert, qwen3 q/k norms,
 *   gemma2 and gemma3 post-norms and soft-caps, phi3's fused sections, q8_0
 *   weights), cut 2 and 4 ways (tests/tp_shard.h, apart from qconvert), run with
 *   the same prompts through qc_engine (CPU backend): every logits row along the
 *   way must equal the plain model's within TOL of the row's largest magnitude,
 *   and the greedy ids must equal up to a step where the plain model's own
 *   margin between the two ids is below that tolerance (a near-tie).
 * - --tp 1 on a plain bundle: every logit bit-identical to no --tp. Batched ==
 *   solo under --tp 2, bit for bit. The K/V pool: per rank, of the rank's K/V
 *   heads. forward_top through the ranks (an inner backend that selects, and
 *   flags every third slice with its row intact) samples exactly as the full
 *   rows do; a NaN in one rank's slice fails that request alone, naming it.
 * - Errors: a rank whose create fails fails qc_engine_new with its message; a
 *   forward every rank refuses (before any all-reduce) leaves the backend usable,
 *   one that fails on one rank only makes every later forward fail.
 * - The command line: qrun --tp 2 on a plain bundle and --tp 3 on a 2-rank
 *   bundle are refused with a message, qrun bench --tp 2 runs, --help lists --tp.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_tp.h"
#include "check.h"
#include "convert.h"
#include "engine.h"
#include "ops.h"
#include "plan.h"
#include "tp_shard.h"

/* reach cpu_forward for an inner backend with forward_top (as test_engine.c does) */
#include "../runtime/cpu/backend_cpu.c"

/* Logits of a plain run and a sharded run of the same model differ by float
 * summation order only: the O and down projections (and the MoE combine, the
 * embedding) become sums of per-rank partial dot products, ~1e-7 relative apart.
 * The K/V cache, q and the softmax weights are rounded to binary16 (llama.cpp's
 * f16 cache, emulated under QC_ACT_ROUND_GGML), so now and then such a
 * difference moves an element across a binary16 rounding boundary: one step is
 * 2^-11 = 4.9e-4 of it. TOL is two such steps of the row's largest magnitude;
 * measured worst 1.3e-4 (qwen3, qwen2moe), 0 for q8_0 weights, 0 for one rank.
 * A wrong cut (every rank with rank 0's V heads: TP_FLAW_ATTN_V) must exceed it. */
#define TOL 1e-3
#define N_PROMPTS 3
#define N_PROMPT 9
#define N_GEN 8
#define MAX_V 512

static const char *bin_dir(void)
{
	const char *b = getenv("QC_BIN");
	return b && *b ? b : "build/bin";
}

/* ---- the merge ------------------------------------------------------------ */

static int cmp_best(const void *a, const void *b, const float *row)
{
	const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
	if (row[i] != row[j])
		return row[i] > row[j] ? -1 : 1;
	return i < j ? -1 : i > j;
}

static const float *sort_row;
static int cmp_sort(const void *a, const void *b)
{
	return cmp_best(a, b, sort_row);
}

static uint64_t lcg(uint64_t *s)
{
	*s = *s * 6364136223846793005u + 1442695040888963407u;
	return *s >> 33;
}

static void merge_matches_sort(void)
{
	enum { N = 700, ROWS = 300 };
	uint64_t s = 42;
	float row[N];
	int32_t order[N], lid[QC_TP_MAX][QC_BACKEND_TOP_MAX], gid[QC_TP_MAX][QC_BACKEND_TOP_MAX];
	float lv[QC_TP_MAX][QC_BACKEND_TOP_MAX], out_v[QC_BACKEND_TOP_MAX];
	int32_t out_i[QC_BACKEND_TOP_MAX];
	long bad = 0, rows_done = 0;
	for (int t = 0; t < ROWS; t++) {
		const int32_t n = 2 + (int32_t)(lcg(&s) % (N - 2));
		const int levels = t % 3 == 0 ? 4 : 1000; /* few distinct values: ties everywhere */
		for (int32_t i = 0; i < n; i++) {
			const uint64_t u = lcg(&s);
			row[i] = u % 17 == 0 ? -INFINITY : (float)(int)(u % (uint64_t)levels) * 0.25f - 3.0f;
			if (u % 29 == 0)
				row[i] = -0.0f; /* -0 == +0: a tie broken by id */
		}
		row[lcg(&s) % (uint64_t)n] = 5.0f; /* at least one finite value */
		const int n_src = 1 + (int)(lcg(&s) % QC_TP_MAX);
		const int32_t m = 1 + (int32_t)(lcg(&s) % QC_BACKEND_TOP_MAX);
		/* slice bounds: random cuts, every slice at least 1 wide (n_src <= n) */
		int32_t cut[QC_TP_MAX + 1];
		const int ns = n_src < n ? n_src : n;
		cut[0] = 0;
		for (int k = 1; k < ns; k++) {
			const int32_t lo = cut[k - 1] + 1, hi = n - (ns - k);
			cut[k] = lo + (int32_t)(lcg(&s) % (uint64_t)(hi - lo + 1));
		}
		cut[ns] = n;
		const int32_t *ids[QC_TP_MAX];
		const float *vals[QC_TP_MAX];
		int32_t cnt[QC_TP_MAX];
		for (int k = 0; k < ns; k++) {
			const int32_t w = cut[k + 1] - cut[k], want = m > 2 ? m : 2;
			const int32_t mk = want < w ? want : w;
			bool all_ninf = true;
			for (int32_t i = cut[k]; i < cut[k + 1]; i++)
				all_ninf &= row[i] == -INFINITY;
			if (w < 2 || all_ninf) { /* as backend_tp's host selection: the slice itself, sorted */
				for (int32_t i = 0; i < w; i++)
					order[i] = cut[k] + i;
				sort_row = row;
				qsort(order, (size_t)w, sizeof *order, cmp_sort);
				for (int32_t i = 0; i < mk; i++) {
					gid[k][i] = order[i];
					lv[k][i] = row[order[i]];
				}
			} else {
				qc_ref_topk(row + cut[k], 1, w, &mk, QC_BACKEND_TOP_MAX, lid[k], lv[k]);
				for (int32_t i = 0; i < mk; i++)
					gid[k][i] = lid[k][i] + cut[k];
			}
			ids[k] = gid[k];
			vals[k] = lv[k];
			cnt[k] = mk;
		}
		const int32_t got = qc_backend_tp_merge_top(ns, ids, vals, cnt, m, out_i, out_v);
		for (int32_t i = 0; i < n; i++)
			order[i] = i;
		sort_row = row;
		qsort(order, (size_t)n, sizeof *order, cmp_sort);
		const int32_t want_n = m < n ? m : n;
		bool ok = got == want_n;
		for (int32_t i = 0; ok && i < want_n; i++)
			ok = out_i[i] == order[i] && (out_v[i] == row[order[i]]);
		bad += !ok;
		rows_done++;
	}
	CHECK(bad == 0, "merge: %ld of %ld rows differ from the full-row sort", bad, rows_done);
	/* the check can fail: a merge that loses the tie order */
	const int32_t i0[2] = {5, 9}, i1[2] = {3, 8};
	const float v0[2] = {1.0f, 0.5f}, v1[2] = {1.0f, 0.5f};
	const int32_t *ii[2] = {i0, i1};
	const float *vv[2] = {v0, v1};
	const int32_t nn[2] = {2, 2};
	int32_t oi[4];
	float ov[4];
	const int32_t got = qc_backend_tp_merge_top(2, ii, vv, nn, 4, oi, ov);
	CHECK(got == 4 && oi[0] == 3 && oi[1] == 5 && oi[2] == 8 && oi[3] == 9,
	      "ties: merged %d: %d %d %d %d, expected 3 5 8 9", got, oi[0], oi[1], oi[2], oi[3]);
	printf("  merge: %ld random rows (ties, -0, -inf; 1..%d slices; m 1..%d) equal their full-row sort\n", rows_done,
	       QC_TP_MAX, QC_BACKEND_TOP_MAX);
}

/* ---- fixtures ------------------------------------------------------------- */

/* gguf converted into qb (target cpu), sharded n ways by qconvert --tp n (0: plain). */
static int convert_tp(const char *gguf, bool fuse, int n, const char *qb)
{
	struct qc_convert_opts o = {.in = gguf, .out = qb, .target = QC_TARGET_CPU, .alignment = QC_BUNDLE_ALIGN,
				    .plan_flags = fuse ? QC_PLAN_FUSE_MOE : 0, .tp = n};
	struct qc_err err = {0};
	int rc = qc_convert_gguf(&o, NULL, &err);
	CHECK(rc == QC_OK, "convert %s --tp %d: %s", gguf, n, err.msg);
	return rc ? -1 : 0;
}

/* mkgguf --preset preset --type type args... into dir/name.gguf (kept), converted to dir/name.qb. */
static int make_model(const char *dir, const char *name, const char *preset, const char *type, const char *const *args,
		      bool fuse, char *qb, size_t len)
{
	char gguf[512], bin[512], errp[512];
	const char *argv[16];
	int n = 0;
	snprintf(gguf, sizeof gguf, "%s/%s.gguf", dir, name);
	snprintf(bin, sizeof bin, "%s/mkgguf", bin_dir());
	snprintf(errp, sizeof errp, "%s/%s.err", dir, name);
	argv[n++] = "--preset";
	argv[n++] = preset;
	argv[n++] = "--type";
	argv[n++] = type;
	argv[n++] = "--weight-std";
	argv[n++] = "0.1";
	for (; args && *args && n < 12; args++)
		argv[n++] = *args;
	argv[n++] = "-o";
	argv[n++] = gguf;
	argv[n] = NULL;
	int rc = check_spawn(bin, argv, errp);
	CHECK(rc == 0, "%s: mkgguf exit %d", name, rc);
	if (rc)
		return -1;
	unlink(errp);
	snprintf(qb, len, "%s/%s.qb", dir, name);
	return convert_tp(gguf, fuse, 0, qb);
}

/* dir/name.tpN.qb from qb by the test sharder. */
static int shard(const char *qb, int n, char *out, size_t len)
{
	char msg[512] = "";
	snprintf(out, len, "%.*s.tp%d.qb", (int)(strlen(qb) - 3), qb, n);
	int rc = tp_shard(qb, out, n, 32, TP_FLAW_NONE, msg, sizeof msg);
	CHECK(rc == 0, "shard %s %d ways: %s", qb, n, msg);
	return rc;
}

/* ---- engine runs ---------------------------------------------------------- */

struct run {
	int32_t V;
	int n_req;
	uint64_t id[N_PROMPTS * 2];
	float *lg[N_PROMPTS * 2];   /* (N_GEN, V) logits of each step */
	int32_t ids[N_PROMPTS * 2][N_GEN];
	int32_t n_ids[N_PROMPTS * 2];
	char fail[N_PROMPTS * 2][QC_ERR_MSG_MAX];
	int64_t kv_tokens;          /* qc_engine_kv_tokens */
};

static void on_logits(void *ctx, uint64_t id, int32_t step, const float *logits, int32_t n_vocab)
{
	struct run *r = ctx;
	for (int i = 0; i < r->n_req; i++)
		if (r->id[i] == id && step < N_GEN && n_vocab == r->V)
			memcpy(r->lg[i] + (size_t)step * (size_t)n_vocab, logits, sizeof(float) * (size_t)n_vocab);
}

static void prompts(int32_t V, int32_t p[N_PROMPTS][N_PROMPT])
{
	uint64_t s = 7;
	for (int i = 0; i < N_PROMPTS; i++)
		for (int j = 0; j < N_PROMPT; j++)
			p[i][j] = 1 + (int32_t)(lcg(&s) % (uint64_t)(V - 1));
}

struct run_opts {
	int tp;                     /* qc_engine_opts.tp */
	bool solo;                  /* one request at a time */
	bool record;                /* logits through on_logits (else forward_top may run) */
	const struct qc_backend_ops *backend;
	int reps;                   /* requests per prompt (1 or 2) */
	bool fail_request;
	uint64_t kv_budget;
};

static void run_free(struct run *r)
{
	for (int i = 0; i < N_PROMPTS * 2; i++)
		free(r->lg[i]);
	memset(r, 0, sizeof *r);
}

/* The prompts through bundle qb, greedy, N_GEN tokens each (prompt 2: top-k 5
 * sampling with a seed when !record, so forward_top selects more than one). */
static int run_model(const char *qb, const struct run_opts *ro, struct run *r, struct qc_err *err)
{
	struct qc_engine_opts o;
	struct qc_engine *e = NULL;
	int32_t p[N_PROMPTS][N_PROMPT];
	int rc;
	memset(r, 0, sizeof *r);
	qc_engine_opts_init(&o);
	o.tp = ro->tp;
	o.n_threads = 2;
	o.max_running = 6;
	o.max_seq_tokens = 64;
	o.backend = ro->backend;
	o.kv_budget_bytes = ro->kv_budget;
	o.bad_logits = ro->fail_request ? QC_BAD_LOGITS_FAIL_REQUEST : QC_BAD_LOGITS_FAIL_STEP;
	if (ro->record) {
		o.on_logits = on_logits;
		o.cb_ctx = r;
	}
	if ((rc = qc_engine_new(qb, &o, &e, err)))
		return rc;
	r->V = qc_engine_model(e)->cfg.n_vocab;
	r->kv_tokens = qc_engine_kv_tokens(e);
	prompts(r->V, p);
	r->n_req = N_PROMPTS * (ro->reps > 1 ? 2 : 1);
	for (int i = 0; i < r->n_req; i++)
		r->lg[i] = calloc((size_t)N_GEN * (size_t)r->V, sizeof(float));
	for (int i = 0; i < r->n_req && !rc; i++) {
		struct qc_engine_request q = {.prompt = p[i % N_PROMPTS], .n_prompt = N_PROMPT - (i % N_PROMPTS),
					      .max_tokens = N_GEN, .ignore_eos = true};
		qc_sampler_params_init(&q.sampling);
		q.sampling.temperature = 0.0f;
		if (!ro->record && i % N_PROMPTS == 2) {
			q.sampling.temperature = 0.9f;
			q.sampling.top_k = 5;
			q.sampling.seed = 11 + (uint64_t)i;
		}
		if ((rc = qc_engine_add(e, &q, &r->id[i], err)))
			break;
		if (ro->solo)
			while (!rc && qc_engine_has_work(e))
				rc = qc_engine_step(e, err);
	}
	while (!rc && qc_engine_has_work(e))
		rc = qc_engine_step(e, err);
	for (int i = 0; i < r->n_req && !rc; i++) {
		const int32_t *ids;
		int32_t n;
		enum qc_sched_finish fin;
		qc_engine_output(e, r->id[i], &ids, &n, &fin);
		r->n_ids[i] = n;
		memcpy(r->ids[i], ids, sizeof(int32_t) * (size_t)(n < N_GEN ? n : N_GEN));
		const char *f = qc_engine_failure(e, r->id[i]);
		snprintf(r->fail[i], sizeof r->fail[i], "%s", f ? f : "");
	}
	qc_engine_free(e);
	return rc;
}

/* How far the sharded run s is from the plain run p: the worst logit error over
 * the rows both computed in the same context (relative to the row's largest
 * magnitude), and the id mismatches that are not near-ties. Returns the worst;
 * checks and prints only when close is expected. */
static double compare_runs(const char *what, const struct run *p, const struct run *s, bool expect_close)
{
	double worst = 0.0;
	int bad_ids = 0, ties = 0, rows = 0;
	for (int i = 0; i < p->n_req; i++) {
		for (int k = 0; k < N_GEN && k < p->n_ids[i]; k++) {
			const float *a = p->lg[i] + (size_t)k * (size_t)p->V, *b = s->lg[i] + (size_t)k * (size_t)p->V;
			double mag = 0.0, err = 0.0;
			for (int32_t v = 0; v < p->V; v++) {
				mag = fabs(a[v]) > mag ? fabs(a[v]) : mag;
				err = fabs((double)a[v] - b[v]) > err ? fabs((double)a[v] - b[v]) : err;
			}
			worst = err / mag > worst ? err / mag : worst;
			rows++;
			if (p->ids[i][k] == s->ids[i][k])
				continue;
			const double margin = fabs((double)a[p->ids[i][k]] - a[s->ids[i][k]]);
			if (margin <= TOL * mag)
				ties++;
			else
				bad_ids++;
			break; /* the contexts differ from here on */
		}
	}
	if (!expect_close)
		return worst;
	CHECK(worst <= TOL, "%s: logits %.3g of the row's magnitude from the plain model's (tolerance %g)", what,
	      worst, TOL);
	CHECK(bad_ids == 0, "%s: %d greedy ids differ from the plain model's by more than a near-tie", what, bad_ids);
	CHECK(rows == N_PROMPTS * N_GEN, "%s: %d rows compared", what, rows);
	printf("  %-22s %3d rows, worst %.2e of the row's magnitude, %d near-tie%s\n", what, rows, worst, ties,
	       ties == 1 ? "" : "s");
	return worst;
}

/* Whether every logit and id of requests [a0, a0 + n) of a and [b0, b0 + n) of b are the same bits. */
static bool runs_identical(const struct run *a, int a0, const struct run *b, int b0, int n)
{
	if (a->V != b->V)
		return false;
	for (int i = 0; i < n; i++)
		if (a->n_ids[a0 + i] != b->n_ids[b0 + i] || memcmp(a->ids[a0 + i], b->ids[b0 + i], sizeof a->ids[0]) ||
		    (a->lg[a0 + i] && b->lg[b0 + i] &&
		     memcmp(a->lg[a0 + i], b->lg[b0 + i], sizeof(float) * (size_t)N_GEN * (size_t)a->V)))
			return false;
	return true;
}

/* ---- the families ---------------------------------------------------------- */

struct family {
	const char *name, *preset, *type;
	const char *args[8];
	bool fuse;
	int max_tp;                 /* cut 2 and, when 4, 4 ways */
};

static const struct family families[] = {
	{"llama", "tiny", "f32", {"--n-head", "4", "--n-head-kv", "4"}, false, 4},
	{"gqa", "tiny", "f32", {"--n-head", "8", "--n-head-kv", "4"}, false, 4},
	{"tied", "tiny", "f32", {"--tie-embeddings"}, false, 2},
	{"moe-fused", "tiny-moe", "f32", {"--n-head", "8", "--n-head-kv", "4"}, true, 4},
	{"moe-unfused", "tiny-moe", "f32", {NULL}, false, 2},
	{"qwen2", "tiny", "f32", {"--arch", "qwen2"}, false, 2},
	{"qwen2moe", "tiny", "f32", {"--arch", "qwen2moe", "--n-expert", "4", "--n-expert-used", "2"}, true, 2},
	{"qwen3", "tiny", "f32", {"--arch", "qwen3"}, false, 2},
	{"gemma2", "tiny", "f32", {"--arch", "gemma2"}, false, 2},
	{"gemma3", "tiny", "f32", {"--arch", "gemma3"}, false, 2},
	{"phi3", "tiny", "f32", {"--arch", "phi3"}, false, 2},
	{"q8_0", "tiny", "q8_0", {"--n-embd", "128", "--n-ff", "256"}, false, 2},
};

/* Per family and n: qconvert --tp n's bundle against the plain one (within TOL),
 * and the test sharder's against qconvert's (the same cut: bit for bit). */
static void family_runs(const char *dir, const struct family *f)
{
	char qb[512], cq[512], tq[512], gguf[512], what[64];
	struct qc_err err = {0};
	struct run plain, conv, sh;
	const struct run_opts ro = {.record = true};
	if (make_model(dir, f->name, f->preset, f->type, f->args, f->fuse, qb, sizeof qb))
		return;
	snprintf(gguf, sizeof gguf, "%s/%s.gguf", dir, f->name);
	int rc = run_model(qb, &ro, &plain, &err);
	CHECK(rc == QC_OK, "%s plain: %s", f->name, err.msg);
	for (int n = 1; n <= f->max_tp && !rc; n *= 2) {
		snprintf(cq, sizeof cq, "%s/%s.conv%d.qb", dir, f->name, n);
		if (convert_tp(gguf, f->fuse, n, cq))
			continue;
		rc = run_model(cq, &ro, &conv, &err);
		CHECK(rc == QC_OK, "%s qconvert --tp %d: %s", f->name, n, err.msg);
		snprintf(what, sizeof what, "%s --tp %d", f->name, n);
		if (!rc)
			compare_runs(what, &plain, &conv, true);
		if (!rc && !shard(qb, n, tq, sizeof tq)) {
			rc = run_model(tq, &ro, &sh, &err);
			CHECK(rc == QC_OK, "%s sharded %d ways: %s", f->name, n, err.msg);
			CHECK(rc || runs_identical(&conv, 0, &sh, 0, N_PROMPTS),
			      "%s --tp %d: qconvert's bundle and the test sharder's run differently", f->name, n);
			run_free(&sh);
			unlink(tq);
		}
		run_free(&conv);
		unlink(cq);
		rc = 0;
	}
	run_free(&plain);
	unlink(qb);
	unlink(gguf);
}

/* ---- the models ------------------------------------------------------------ */

static void models(const char *qb, const char *tq)
{
	struct qc_err err = {0};
	struct qc_model *plain = NULL, *r0 = NULL, *whole = NULL, *rk[2] = {NULL, NULL};
	int rc = qc_model_open(qb, &plain, &err);
	CHECK(rc == QC_OK, "open %s: %s", qb, err.msg);
	if (rc)
		return;
	rc = qc_model_rank_open(plain, 0, &r0, &err);
	CHECK(rc == QC_OK, "rank 0 of a plain bundle: %s", err.msg);
	if (!rc) {
		CHECK(r0->token_embd.data == plain->token_embd.data && r0->output.data == plain->output.data &&
		      r0->layers[1].wq.data == plain->layers[1].wq.data && r0->layers[1].ffn_down.data == plain->layers[1].ffn_down.data &&
		      !memcmp(&r0->cfg, &plain->cfg, sizeof r0->cfg) && r0->tp.size == 1 && r0->tp.rank == 0 &&
		      r0->data_lo == plain->data_lo && r0->data_hi == plain->data_hi,
		      "rank 0 of a plain bundle is not the plain model's views");
		CHECK(!r0->own_bundle && r0->bundle == plain->bundle, "rank 0 does not borrow the bundle");
	}
	qc_model_close(r0);
	struct qc_model *tmp = NULL;
	CHECK(qc_model_rank_open(plain, 1, &tmp, &err) == QC_EINVAL && !tmp, "rank 1 of a plain bundle accepted");

	rc = qc_model_open(tq, &whole, &err);
	CHECK(rc == QC_OK, "open %s: %s", tq, err.msg);
	if (rc)
		goto out;
	const struct qc_model_config *c = &whole->cfg;
	CHECK(whole->tp.rank == -1 && whole->tp.size == 2 && whole->tp.n_vocab_all == plain->cfg.n_vocab &&
	      c->n_vocab == plain->cfg.n_vocab && c->n_head == plain->cfg.n_head && c->n_head_kv == plain->cfg.n_head_kv &&
	      c->n_ff == plain->cfg.n_ff && c->head_dim == plain->cfg.head_dim,
	      "the whole of a --tp 2 bundle: rank %d size %d, vocab %d, heads %d/%d, ff %d", whole->tp.rank,
	      whole->tp.size, c->n_vocab, c->n_head, c->n_head_kv, c->n_ff);
	CHECK(whole->layers && !whole->layers[0].wq.data && !whole->token_embd.data && !whole->output_norm,
	      "the whole has weight views");
	const struct qc_backend_params bp = {.n_blocks = 4, .block_tokens = 16, .max_tokens = 16, .max_logits = 4,
					     .max_ctx = 64, .n_threads = 1};
	void *st = NULL;
	rc = qc_backend_cpu.create(whole, &bp, &st, &err);
	CHECK(rc == QC_EINVAL && !st && strstr(err.msg, "no weights"), "the CPU backend took the whole (%d: %s)", rc,
	      err.msg);
	for (int r = 0; r < 2; r++) {
		rc = qc_model_rank_open(whole, r, &rk[r], &err);
		CHECK(rc == QC_OK, "rank %d: %s", r, err.msg);
		if (rc)
			goto out;
		const struct qc_model_config *l = &rk[r]->cfg;
		CHECK(l->n_head == c->n_head / 2 && l->n_head_kv == c->n_head_kv / 2 && l->n_ff == c->n_ff / 2 &&
		      l->head_dim == c->head_dim && rk[r]->tp.rank == r && rk[r]->tp.size == 2 &&
		      rk[r]->tp.n_vocab_all == c->n_vocab && rk[r]->layers[0].wq.n_out == (int64_t)l->n_head * l->head_dim &&
		      rk[r]->layers[0].wo.n_in == (int64_t)l->n_head * l->head_dim,
		      "rank %d: heads %d/%d, ff %d, q rows %lld", r, l->n_head, l->n_head_kv, l->n_ff,
		      (long long)rk[r]->layers[0].wq.n_out);
		CHECK(rk[r]->data_lo < rk[r]->data_hi && rk[r]->data_hi <= rk[r]->bundle->manifest_off,
		      "rank %d's byte range [%llu, %llu)", r, (unsigned long long)rk[r]->data_lo,
		      (unsigned long long)rk[r]->data_hi);
		rc = qc_backend_cpu.create(rk[r], &bp, &st, &err); /* a shard needs its group */
		CHECK(rc == QC_EINVAL && !st, "the CPU backend ran rank %d without its group", r);
	}
	CHECK(rk[0]->tp.vocab0 == 0 && rk[1]->tp.vocab0 == rk[0]->cfg.n_vocab &&
	      rk[0]->cfg.n_vocab + rk[1]->cfg.n_vocab == c->n_vocab,
	      "vocabulary ranges [%d, +%d) [%d, +%d) of %d", rk[0]->tp.vocab0, rk[0]->cfg.n_vocab, rk[1]->tp.vocab0,
	      rk[1]->cfg.n_vocab, c->n_vocab);
	CHECK(rk[0]->data_hi <= rk[1]->data_lo, "rank byte ranges overlap");
	CHECK(qc_model_rank_open(whole, 2, &tmp, &err) == QC_EINVAL && !tmp, "rank 2 of 2 accepted");
	CHECK(qc_model_rank_open(rk[0], 0, &tmp, &err) == QC_EINVAL && !tmp, "a shard of a shard accepted");
out:
	qc_model_close(rk[0]);
	qc_model_close(rk[1]);
	qc_model_close(whole);
	qc_model_close(plain);
}

/* A wrong cut is caught, and so is a manifest whose ranges leave a gap. */
static void flaws(const char *qb, const char *dir)
{
	char tq[512], msg[512] = "";
	struct qc_err err = {0};
	struct run plain, sh;
	const struct run_opts ro = {.record = true};
	snprintf(tq, sizeof tq, "%s/flawed.qb", dir);
	if (tp_shard(qb, tq, 2, 32, TP_FLAW_ATTN_V, msg, sizeof msg)) {
		CHECK(0, "flawed shard: %s", msg);
		return;
	}
	int rc = run_model(qb, &ro, &plain, &err);
	if (!rc)
		rc = run_model(tq, &ro, &sh, &err);
	CHECK(rc == QC_OK, "flawed runs: %s", err.msg);
	if (!rc) {
		const double w = compare_runs("flawed", &plain, &sh, false);
		CHECK(w > 10 * TOL, "a wrong cut (rank 0's V heads on every rank) is only %.3g off", w);
		printf("  a wrong cut (every rank with rank 0's V heads): %.2e of the row's magnitude off\n", w);
	}
	run_free(&plain);
	run_free(&sh);
	unlink(tq);
	if (tp_shard(qb, tq, 2, 32, TP_FLAW_GAP, msg, sizeof msg)) {
		CHECK(0, "gap shard: %s", msg);
		return;
	}
	struct qc_model *m = NULL;
	rc = qc_model_open(tq, &m, &err);
	CHECK(rc == QC_EFORMAT && !m && strstr(err.msg, "vocab[1]"), "a vocabulary gap: %d %s", rc, err.msg);
	qc_model_close(m);
	unlink(tq);
}

/* --tp 1 on a plain bundle = no --tp, bit for bit; the bundle's own size by default;
 * batched = solo under --tp 2; the K/V pool per rank. */
static void identities(const char *qb, const char *tq)
{
	struct qc_err err = {0};
	struct run a, b, c;
	struct run_opts ro = {.record = true};
	int rc = run_model(qb, &ro, &a, &err);
	ro.tp = 1;
	if (!rc)
		rc = run_model(qb, &ro, &b, &err);
	CHECK(rc == QC_OK, "plain runs: %s", err.msg);
	if (!rc)
		CHECK(runs_identical(&a, 0, &b, 0, N_PROMPTS), "--tp 1 on a plain bundle differs from no --tp");
	run_free(&a);
	run_free(&b);

	ro = (struct run_opts){.record = true, .solo = true};
	rc = run_model(tq, &ro, &a, &err);
	ro = (struct run_opts){.record = true, .reps = 2};
	if (!rc)
		rc = run_model(tq, &ro, &b, &err);
	ro = (struct run_opts){.record = true, .tp = 2};
	if (!rc)
		rc = run_model(tq, &ro, &c, &err);
	CHECK(rc == QC_OK, "--tp 2 runs: %s", err.msg);
	if (!rc) {
		CHECK(runs_identical(&a, 0, &b, 0, N_PROMPTS) && runs_identical(&a, 0, &b, N_PROMPTS, N_PROMPTS),
		      "--tp 2: %d requests together differ from each alone", 2 * N_PROMPTS);
		CHECK(runs_identical(&a, 0, &c, 0, N_PROMPTS), "--tp 2 asked differs from the bundle's own size");
		printf("  --tp 1 = no --tp, bit for bit; --tp 2: %d requests together = each alone, bit for bit\n",
		       2 * N_PROMPTS);
	}
	run_free(&a);
	run_free(&b);
	run_free(&c);

	/* the same budget holds twice the tokens per rank: each has half the K/V heads */
	ro = (struct run_opts){.record = false, .kv_budget = 1 << 20};
	rc = run_model(qb, &ro, &a, &err);
	if (!rc)
		rc = run_model(tq, &ro, &b, &err);
	CHECK(rc == QC_OK, "K/V runs: %s", err.msg);
	if (!rc)
		CHECK(b.kv_tokens == 2 * a.kv_tokens, "K/V pool of 1 MiB: %lld tokens plain, %lld per rank of 2",
		      (long long)a.kv_tokens, (long long)b.kv_tokens);
	run_free(&a);
	run_free(&b);
}

/* ---- forward_top through the ranks ----------------------------------------- */

static _Atomic long top_taken, top_flagged;
static uint64_t poison_seq; /* a request whose rank-1 slice gets a NaN at its third step */

/* The CPU forward plus a selection on this rank's own columns, as a device
 * backend's would: rows the engine wanted are NaN afterwards unless flagged
 * (their slice then intact); flagged when the local best id is a multiple of 3. */
static int sel_forward_top(void *state, const struct qc_sched_plan *plan, const int32_t *want, float *logits,
			   int32_t *top_ids, float *top_logits, struct qc_err *err)
{
	int rc = cpu_forward(state, plan, logits, err);
	if (rc)
		return rc;
	const struct cpu *c = state;
	const int32_t V = c->m->cfg.n_vocab;
	for (int32_t i = 0, k = 0; i < plan->n_seqs; i++) {
		if (!plan->need_logits[i])
			continue;
		float *row = logits + (size_t)k * (size_t)V;
		int32_t *ids = top_ids + (size_t)k * QC_BACKEND_TOP_MAX;
		const int32_t pos = plan->positions[plan->tok_start[i + 1] - 1];
		if (c->m->tp.rank == 1 && plan->seq_ids[i] == poison_seq && pos == N_PROMPT + 1)
			row[3] = NAN;
		if (want[k] == 1)
			qc_ref_argmax(row, 1, V, ids);
		else if (want[k] >= 2)
			qc_ref_topk(row, 1, V, &want[k], QC_BACKEND_TOP_MAX, ids, top_logits + (size_t)k * QC_BACKEND_TOP_MAX);
		if (want[k] > 0 && ids[0] >= 0) {
			top_taken++;
			if (ids[0] % 3 == 0) {
				ids[0] = -1;
				top_flagged++;
			} else {
				for (int32_t v = 0; v < V; v++)
					row[v] = NAN;
			}
		}
		k++;
	}
	return QC_OK;
}

static void forward_top(const char *tq)
{
	struct qc_err err = {0};
	struct run host, dev, pois;
	struct qc_backend_ops sel = qc_backend_cpu;
	sel.name = "cpu+top";
	sel.forward_top = sel_forward_top;
	struct run_opts ro = {.reps = 2};
	int rc = run_model(tq, &ro, &host, &err);
	CHECK(rc == QC_OK, "host-sampled run: %s", err.msg);
	ro.backend = &sel;
	if (!rc)
		rc = run_model(tq, &ro, &dev, &err);
	CHECK(rc == QC_OK, "forward_top run: %s", err.msg);
	if (!rc) {
		CHECK(runs_identical(&host, 0, &dev, 0, host.n_req), "forward_top through 2 ranks samples otherwise");
		CHECK(top_taken > 0 && top_flagged > 0, "forward_top not exercised: %ld rows selected, %ld flagged",
		      (long)top_taken, (long)top_flagged);
		printf("  forward_top, 2 ranks: %ld rank rows selected on the ranks (%ld flagged with their slice), "
		       "merged: the same %d requests' tokens as full rows sampled on the host\n", (long)top_taken,
		       (long)top_flagged, host.n_req);
	}
	/* a NaN in rank 1's slice: that request fails alone, naming the logit */
	ro.fail_request = true;
	poison_seq = host.id[1];
	if (!rc)
		rc = run_model(tq, &ro, &pois, &err);
	CHECK(rc == QC_OK, "poisoned run: %s", err.msg);
	if (!rc) {
		CHECK(strstr(pois.fail[1], "nan") != NULL, "request 1: failure '%s'", pois.fail[1]);
		bool others = true;
		for (int i = 0; i < pois.n_req; i++)
			if (i != 1)
				others &= !pois.fail[i][0] && runs_identical(&host, i, &pois, i, 1);
		CHECK(others, "a NaN in one request's rank-1 slice changed the other requests");
		printf("  a NaN in rank 1's slice: that request fails (%s), the others go on\n", pois.fail[1]);
	}
	run_free(&host);
	run_free(&dev);
	run_free(&pois);
}

/* ---- errors ------------------------------------------------------------------ */

/* An inner backend that fails: create on rank 1 (mode 1); the first forward on
 * every rank, before any all-reduce (mode 2); the first forward on rank 1 only,
 * after its all-reduces (mode 3). Each rank thread touches only its own counter. */
static int fail_mode;
static int fail_calls[QC_TP_MAX];

static int flaky_create(const struct qc_model *m, const struct qc_backend_params *p, void **state, struct qc_err *err)
{
	if (fail_mode == 1 && m->tp.rank == 1)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "test: rank 1 cannot be made");
	return cpu_create(m, p, state, err);
}

static int flaky_forward(void *state, const struct qc_sched_plan *plan, float *logits, struct qc_err *err)
{
	const struct cpu *c = state;
	const int r = c->m->tp.rank, first = fail_calls[r]++ == 0;
	if (fail_mode == 2 && first)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "test: rank %d refuses the plan", r);
	int rc = cpu_forward(state, plan, logits, err);
	if (!rc && fail_mode == 3 && first && r == 1)
		return qc_err_set(err, QC_EIO, NULL, NULL, -1, "test: rank 1 failed after its all-reduces");
	return rc;
}

static void errors(const char *tq)
{
	struct qc_err err = {0};
	struct qc_engine *e = NULL;
	struct qc_engine_opts o;
	struct qc_backend_ops flaky = qc_backend_cpu;
	flaky.name = "cpu-flaky";
	flaky.create = flaky_create;
	flaky.forward = flaky_forward;
	int32_t ids[24];
	uint64_t s = 3;
	for (int i = 0; i < 24; i++)
		ids[i] = 1 + (int32_t)(lcg(&s) % 200);
	double clean = 0.0, nll = 0.0;

	qc_engine_opts_init(&o);
	o.n_threads = 2;
	o.max_seq_tokens = 64;
	int rc = qc_engine_new(tq, &o, &e, &err);
	if (!rc)
		rc = qc_engine_score(e, ids, 24, 0, &clean, &err);
	CHECK(rc == QC_OK, "clean score: %s", err.msg);
	qc_engine_free(e);
	e = NULL;

	o.backend = &flaky;
	fail_mode = 1;
	rc = qc_engine_new(tq, &o, &e, &err);
	CHECK(rc == QC_ENOMEM && !e && strstr(err.msg, "rank 1 cannot be made"), "a rank's failed create: %d %s", rc,
	      err.msg);

	fail_mode = 2;
	memset(fail_calls, 0, sizeof fail_calls);
	rc = qc_engine_new(tq, &o, &e, &err);
	CHECK(rc == QC_OK, "engine: %s", err.msg);
	if (!rc) {
		rc = qc_engine_score(e, ids, 24, 0, &nll, &err);
		CHECK(rc == QC_EINVAL && strstr(err.msg, "rank 0 refuses"), "every rank failing: %d %s (rank 0's first)",
		      rc, err.msg);
		rc = qc_engine_score(e, ids, 24, 0, &nll, &err);
		CHECK(rc == QC_OK && nll == clean, "after a forward every rank refused: %d %s, nll %.9g vs %.9g", rc,
		      err.msg, nll, clean);
	}
	qc_engine_free(e);
	e = NULL;

	fail_mode = 3;
	memset(fail_calls, 0, sizeof fail_calls);
	rc = qc_engine_new(tq, &o, &e, &err);
	CHECK(rc == QC_OK, "engine: %s", err.msg);
	if (!rc) {
		rc = qc_engine_score(e, ids, 24, 0, &nll, &err);
		CHECK(rc == QC_EIO && strstr(err.msg, "rank 1 failed"), "one rank failing: %d %s", rc, err.msg);
		rc = qc_engine_score(e, ids, 24, 0, &nll, &err);
		CHECK(rc == QC_EIO && strstr(err.msg, "out of step"), "after one rank failed: %d %s", rc, err.msg);
	}
	qc_engine_free(e); /* joins the idle rank threads */
	fail_mode = 0;
	printf("  errors: a rank's create failure is returned; a forward every rank refuses leaves the backend usable "
	       "(score %.6f again); one rank failing stops every later forward\n", clean);
}

/* ---- the command line ------------------------------------------------------- */

static int run_cli(const char *const *args, const char *errp, char **err_text)
{
	char bin[512];
	snprintf(bin, sizeof bin, "%s/qrun", bin_dir());
	const int rc = check_spawn(bin, args, errp);
	*err_text = check_read_file(errp, NULL);
	if (!*err_text)
		*err_text = calloc(1, 1);
	return rc;
}

static void cli(const char *qb, const char *tq, const char *dir)
{
	char errp[512];
	char *txt = NULL;
	snprintf(errp, sizeof errp, "%s/cli.err", dir);
	const char *a1[] = {qb, "-p", "hello", "-n", "2", "--tp", "2", NULL};
	int rc = run_cli(a1, errp, &txt);
	CHECK(rc == 1 && strstr(txt, "not sharded") && strstr(txt, "qconvert --tp 2"),
	      "qrun --tp 2 on a plain bundle: exit %d, '%s'", rc, txt);
	free(txt);
	const char *a2[] = {tq, "-p", "hello", "-n", "2", "--tp", "3", NULL};
	rc = run_cli(a2, errp, &txt);
	CHECK(rc == 1 && strstr(txt, "sharded for 2 ranks"), "qrun --tp 3 on a 2-rank bundle: exit %d, '%s'", rc, txt);
	free(txt);
	const char *a3[] = {tq, "-p", "hello", "-n", "2", "--tp", "16", NULL};
	rc = run_cli(a3, errp, &txt);
	CHECK(rc == 1 && strstr(txt, "--tp"), "qrun --tp 16: exit %d, '%s'", rc, txt);
	free(txt);
	const char *a4[] = {tq, "-p", "hello", "-n", "3", "--threads", "2", NULL};
	rc = run_cli(a4, errp, &txt);
	CHECK(rc == 0 && strstr(txt, "tensor parallel rank 0 of 2 on cpu") && strstr(txt, "tensor parallel rank 1 of 2"),
	      "qrun on a 2-rank bundle: exit %d, '%s'", rc, txt);
	free(txt);
	const char *a5[] = {"bench", tq, "--tp", "2", "--requests", "3", "--concurrency", "2", "--in", "5", "--out", "4",
			    "--threads", "2", NULL};
	rc = run_cli(a5, errp, &txt);
	CHECK(rc == 0, "qrun bench --tp 2: exit %d, '%s'", rc, txt);
	free(txt);
	const char *a6[] = {"--help", NULL};
	rc = run_cli(a6, errp, &txt);
	free(txt);
	char out[512], bin[512];
	snprintf(out, sizeof out, "%s/help.out", dir);
	snprintf(bin, sizeof bin, "%s/qrun", bin_dir());
	/* --help goes to stdout: through a shell to catch it */
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "%s --help > %s 2>&1 && %s/qserve --help >> %s 2>&1", bin, out, bin_dir(), out);
	rc = system(cmd);
	txt = check_read_file(out, NULL);
	CHECK(rc == 0 && txt && strstr(txt, "--tp N") && strstr(strstr(txt, "--tp N") + 1, "--tp N"),
	      "--help of qrun and qserve do not both list --tp N");
	free(txt);
	unlink(out);
	unlink(errp);
}

int main(void)
{
	char dir[] = "/tmp/qc_test_tp_XXXXXX", qb[512], tq[512], gguf[512];
	merge_matches_sort();
	if (!mkdtemp(dir)) {
		CHECK(0, "mkdtemp");
		return check_report("test_tp");
	}
	for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
		family_runs(dir, &families[i]);
	const char *gqa[] = {"--n-head", "8", "--n-head-kv", "4", NULL};
	snprintf(tq, sizeof tq, "%s/base.tp2.qb", dir);
	snprintf(gguf, sizeof gguf, "%s/base.gguf", dir);
	if (!make_model(dir, "base", "tiny", "f32", gqa, false, qb, sizeof qb) && !convert_tp(gguf, false, 2, tq)) {
		models(qb, tq);
		flaws(qb, dir);
		identities(qb, tq);
		forward_top(tq);
		errors(tq);
		cli(qb, tq, dir);
		unlink(tq);
	}
	unlink(qb);
	unlink(gguf);
	rmdir(dir);
	return check_report("test_tp");
}
