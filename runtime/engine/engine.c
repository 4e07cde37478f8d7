/* engine.c — the serving loop: plan -> forward -> sample -> commit.
 *
 * Owns: the per-request table and the glue between the leaf modules; no math.
 * Sizing at new: block bytes from the backend, K/V pool from the budget, one
 * K/V row per running sequence, plan maxima passed to the backend so it never
 * allocates in forward. Invariant: a request's output only grows by tokens the
 * scheduler accepted, so recompute after preemption never duplicates a token.
 * Backend threads: opts.n_threads, else $QC_THREADS when set (1..256), else the
 * online CPUs (results do not depend on it); as many (at most 16) sample the
 * rows that come back in full (sample_par.h), unless on_logits is set.
 * n choices (qc_engine_add_n): one scheduler group; the step whose forward ends
 * the prompt samples every choice from that one logits row (each with its own
 * sampler, seed + choice) and forks the others off the parent before the
 * commit. A request's id is its scheduler id; a choice other than the first has
 * none in the scheduler until its fork, so it is named by the first choice's
 * id with i in the bits the scheduler never sets (QC_SCHED_ID_SLOT_BITS) and
 * keeps that name; each req holds its scheduler id apart (sid).
 * Tensor parallelism (opts.tp, a --tp bundle): backend_tp.c wraps the chosen
 * backend, one rank thread and instance each; the K/V pool is sized from one
 * rank's block bytes (its K/V heads), every rank holding that many blocks; the
 * engine's model is then the weightless whole (config, vocabulary, tokenizer).
 */
#include "engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "backend_tp.h"
#include "bundle_verify.h"
#include "sample_par.h"
#include "vocab.h"

/* Worker threads for the backend's matmuls (see the header). */
static int32_t backend_threads(int32_t asked)
{
	const char *env = getenv("QC_THREADS");
	long n = asked > 0 ? asked : env && *env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
	return n < 1 ? 1 : n > 256 ? 256 : (int32_t)n;
}

/* Verification threads: every CPU but one for the loader's own copy (a device
 * upload), at most 8; the CPU backend computes from the mapping, so it gets all. */
static int verify_threads(const struct qc_engine_opts *o)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	const bool cpu = !o->backend || o->backend == &qc_backend_cpu;
	n = cpu ? n : n - 1;
	return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

struct req {
	uint64_t id;               /* the engine's id, returned by add (see the top) */
	uint64_t sid;              /* the scheduler's; 0 for a choice not forked yet */
	struct req *parent;        /* a choice not forked yet: the request it forks from */
	struct req **kids;         /* (n_kids) choices still to fork off this one, or NULL */
	int32_t n_kids;
	bool forks;                /* a group's first choice, until its fork */
	struct qc_sampler *sampler;
	int32_t *out;              /* (n_out) generated ids */
	int32_t n_out, cap;
	enum qc_sched_finish finish;
	struct qc_sample_result *lp; /* (n_out) when sampling.logprobs, else NULL */
	bool want_lp;
	char fail[QC_ERR_MSG_MAX];   /* why it finished with QC_SCHED_FINISH_ERROR */
};

struct qc_engine {
	struct qc_model *model;
	struct qc_vocab *vocab;
	const struct qc_backend_ops *be;
	void *be_state;
	struct qc_backend_tp *tp;  /* tensor parallel ranks around the chosen backend, or NULL */
	struct qc_kv *kv;
	struct qc_sched *sched;
	struct qc_sample_par *sp;  /* sampling workspaces and threads */
	struct qc_sample_job *jobs; /* (max_running) this step's rows sampled from the whole row */
	int32_t *job_entry;        /* (max_running) plan entry of each job */
	struct qc_engine_opts opts;
	struct qc_bundle_verify_job *verify; /* during qc_engine_new only */
	float *logits;             /* (max_running, n_vocab) */
	int32_t *want;             /* (max_running) per logit row: 0 the row, m the m best (forward_top) */
	int32_t *top_ids;          /* (max_running, QC_BACKEND_TOP_MAX) the backend's best ids per row */
	float *top_logits;         /* (max_running, QC_BACKEND_TOP_MAX) and their logits */
	int32_t *sampled;          /* (max_running) */
	struct req **entry_req;    /* (max_running) request of each plan entry */
	struct qc_sample_result *results; /* (max_running) this step's draws */
	struct req **reqs;         /* (n_reqs) live and finished, unreleased */
	size_t n_reqs, cap_reqs;
	struct qc_sched_child fork[QC_SCHED_MAX_CHOICES];       /* one fork's choices */
	struct qc_sample_result fork_res[QC_SCHED_MAX_CHOICES]; /* and their first draws */
	bool profile;              /* QC_PROFILE: host time per part of a step, printed at free */
	double t_sched, t_forward, t_sample, t_commit;
	long steps;
};

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *qc_kv_dtype_name(enum qc_kv_dtype dt)
{
	return dt == QC_KV_FP8 ? "fp8" : dt == QC_KV_F16 ? "f16" : "?";
}

void qc_engine_opts_init(struct qc_engine_opts *o)
{
	memset(o, 0, sizeof *o);
	o->act_round = QC_ACT_ROUND_GGML;
	o->prefix_cache = true;
}

static struct req *find_req(const struct qc_engine *e, uint64_t id)
{
	for (size_t i = 0; i < e->n_reqs; i++)
		if (e->reqs[i]->id == id)
			return e->reqs[i];
	return NULL;
}

static struct req *find_sid(const struct qc_engine *e, uint64_t sid)
{
	for (size_t i = 0; i < e->n_reqs; i++)
		if (e->reqs[i]->sid == sid)
			return e->reqs[i];
	return NULL;
}

/* q finished before its fork: its choices finish the same way (fail: the message). */
static void orphan_kids(struct req *q, enum qc_sched_finish reason, const char *fail)
{
	for (int32_t k = 0; k < q->n_kids; k++) {
		q->kids[k]->finish = reason;
		q->kids[k]->parent = NULL;
		if (fail)
			snprintf(q->kids[k]->fail, sizeof q->kids[k]->fail, "%s", fail);
	}
	free(q->kids);
	q->kids = NULL;
	q->n_kids = 0;
	q->forks = false;
}

static void req_free(struct req *r)
{
	if (!r)
		return;
	free(r->kids);
	qc_sampler_free(r->sampler);
	free(r->out);
	free(r->lp);
	free(r);
}

/* The prefix cache's key seed: everything besides the tokens that decides a K/V
 * block's bytes. The manifest names the weights (with their checksums), the
 * backend and rounding the arithmetic, the K/V dtype (named: block bytes alone
 * could coincide) and block bytes the storage. */
static uint64_t cache_salt(const struct qc_engine *e, const struct qc_engine_opts *op,
			   uint64_t block_bytes)
{
	const struct qc_bundle *b = e->model->bundle;
	const uint64_t geo[4] = {block_bytes, (uint64_t)op->act_round, (uint64_t)op->block_tokens,
				 (uint64_t)op->kv_dtype};
	uint64_t h = XXH3_64bits_withSeed(b->map + b->manifest_off, (size_t)b->manifest_size,
					  op->prefix_salt);
	h = XXH3_64bits_withSeed(e->be->name, strlen(e->be->name), h);
	return XXH3_64bits_withSeed(geo, sizeof geo, h);
}

/* A window no shorter than the longest sequence cuts nothing: every layer then
 * attends to all its positions, bit for bit as a global one (paged_attn's first
 * position is 0 either way), so the model runs as all-global and a backend
 * without windows (CUDA) may run it, as Mistral 7B v0.1 (window 4096) at the
 * default 4096-token context. */
static void no_uncut_window(struct qc_model *m, int32_t max_seq_tokens)
{
	struct qc_model_config *c = &m->cfg;
	if (c->sliding_window <= 0 || c->sliding_window < max_seq_tokens)
		return;
	c->sliding_window = 0;
	c->window_pattern = 0;
	c->feats &= ~QC_AF(SLIDING_WINDOW);
}

/* The ranks the model runs on (qc_engine_opts.tp): none for a plain bundle
 * unless asked; a --tp bundle always, with its own size. */
static int tp_open(struct qc_engine *e, const struct qc_engine_opts *op, struct qc_err *err)
{
	const struct qc_model *m = e->model;
	const char *path = m->bundle->path;
	if (op->tp < 0 || op->tp > QC_TP_MAX)
		return qc_err_set(err, QC_EINVAL, path, NULL, -1, "tensor parallel size %d: 0 (the bundle's own) or 1..%d",
				  op->tp, QC_TP_MAX);
	if (op->tp == 0 && m->tp.rank >= 0)
		return QC_OK;
	if (op->tp > 0 && op->tp != m->tp.size) {
		if (m->tp.rank >= 0)
			return qc_err_set(err, QC_EINVAL, path, NULL, -1, "tensor parallel size %d asked, but the bundle is "
					  "not sharded (a plain bundle runs as 1 rank): convert it with qconvert --tp %d",
					  op->tp, op->tp);
		return qc_err_set(err, QC_EINVAL, path, NULL, -1, "tensor parallel size %d asked, but the bundle was "
				  "sharded for %d ranks (qconvert --tp %d): run it with %d, or convert it again",
				  op->tp, m->tp.size, m->tp.size, m->tp.size);
	}
	return qc_backend_tp_open(e->be, m, &e->tp, err);
}

int qc_engine_new(const char *path, const struct qc_engine_opts *o, struct qc_engine **out,
		  struct qc_err *err)
{
	struct qc_engine *e;
	struct qc_engine_opts def;
	int rc;

	*out = NULL;
	if (!o) {
		qc_engine_opts_init(&def);
		o = &def;
	}
	e = calloc(1, sizeof *e);
	if (!e)
		return qc_err_set(err, QC_ENOMEM, path, NULL, -1, "out of memory");
	e->opts = *o;
	const char *prof_env = getenv("QC_PROFILE");
	e->profile = prof_env && *prof_env && *prof_env != '0';
	struct qc_engine_opts *op = &e->opts;
	e->be = op->backend ? op->backend : &qc_backend_cpu;

	/* model and tokenizer */
	if ((rc = qc_model_open(path, &e->model, err)))
		goto out_free;
	/* checksums on threads of their own while the tokenizer, the K/V pool and the
	 * backend (a device upload) are set up; joined once the backend exists */
	struct timespec v0;
	clock_gettime(CLOCK_MONOTONIC, &v0);
	if (!op->no_verify && (rc = qc_bundle_verify_start(e->model->bundle, verify_threads(op), &e->verify, err)))
		goto out_free;
	const struct qc_model_config *cfg = &e->model->cfg;
	const cJSON *tok = cJSON_GetObjectItemCaseSensitive(e->model->bundle->manifest, "tokenizer");
	if (tok && (rc = qc_vocab_from_json(tok, &e->vocab, err)))
		goto out_free;

	/* geometry */
	if (!op->block_tokens)
		op->block_tokens = QC_KV_BLOCK_TOKENS_DEFAULT;
	if (!op->max_running)
		op->max_running = 8;
	if (!op->max_seq_tokens)
		op->max_seq_tokens = cfg->n_ctx_train > 0 && cfg->n_ctx_train < 4096 ? cfg->n_ctx_train : 4096;
	if (!op->max_batch_tokens)
		op->max_batch_tokens = 512;
	no_uncut_window(e->model, op->max_seq_tokens);
	if ((rc = tp_open(e, op, err))) /* after the window: the ranks take the whole's config */
		goto out_free;
	uint64_t block_bytes, be_max = 0;
	const struct qc_backend_params lim = {
		.block_tokens = op->block_tokens,
		.max_tokens = op->max_batch_tokens,
		.max_logits = op->max_running,
		.max_ctx = op->max_seq_tokens,
		.act_round = op->act_round,
		.kv_dtype = op->kv_dtype,
	};
	if (e->tp) /* every rank's: the same blocks over each rank's K/V heads */
		rc = qc_backend_tp_kv_limits(e->tp, &lim, op->gpu_mem_util > 0 ? op->gpu_mem_util : 0.9f, &block_bytes,
					     &be_max, err);
	else if (e->be->kv_limits) /* a device backend: its block size and what fits beside the weights */
		rc = e->be->kv_limits(e->model, &lim, op->gpu_mem_util > 0 ? op->gpu_mem_util : 0.9f,
				      &block_bytes, &be_max, err);
	else
		rc = qc_backend_block_bytes(e->model, op->block_tokens, op->kv_dtype, &block_bytes, err);
	if (rc)
		goto out_free;
	if (!op->kv_budget_bytes) {
		/* max_running full sequences, but no more than 2 GiB (a device backend:
		 * than fits in gpu_mem_util) unless one sequence alone needs more; the
		 * scheduler preempts when the pool runs out */
		uint64_t blocks = ((uint64_t)op->max_seq_tokens + (uint64_t)op->block_tokens - 1) /
				  (uint64_t)op->block_tokens;
		uint64_t one = blocks * block_bytes, cap = be_max ? be_max : (uint64_t)2 << 30;
		op->kv_budget_bytes = one * (uint64_t)op->max_running;
		if (op->kv_budget_bytes > cap)
			op->kv_budget_bytes = one > cap ? one : cap;
	}

	/* paged K/V and the scheduler */
	struct qc_kv_config kc;
	qc_kv_config_init(&kc);
	kc.budget_bytes = op->kv_budget_bytes;
	kc.block_bytes = block_bytes;
	kc.block_tokens = op->block_tokens;
	kc.max_seqs = op->max_running;
	kc.max_seq_tokens = op->max_seq_tokens;
	kc.prefix_cache = op->prefix_cache;
	kc.prefix_salt = cache_salt(e, op, block_bytes);
	if ((rc = qc_kv_new(&kc, &e->kv, err)))
		goto out_free;
	struct qc_sched_config sc;
	qc_sched_config_init(&sc);
	sc.max_running = op->max_running;
	sc.max_batch_tokens = op->max_batch_tokens;
	if (!op->max_prefill_tokens)
		op->max_prefill_tokens = e->be->prefill_chunk;
	sc.max_prefill_tokens = op->max_prefill_tokens > 0 && op->max_prefill_tokens < op->max_batch_tokens
					? op->max_prefill_tokens : op->max_batch_tokens;
	sc.window = op->kv_keep_passed ? 0 : qc_model_window_all(cfg);
	if ((rc = qc_sched_new(&sc, e->kv, &e->sched, err)))
		goto out_free;

	/* backend */
	struct qc_backend_params bp = {
		.n_blocks = qc_kv_blocks_total(e->kv),
		.block_tokens = op->block_tokens,
		.max_tokens = op->max_batch_tokens,
		.max_logits = op->max_running,
		.max_ctx = qc_kv_max_seq_tokens(e->kv),
		.act_round = op->act_round,
		.attn_order = op->attn_order,
		.n_threads = backend_threads(op->n_threads),
		.kv_dtype = op->kv_dtype,
	};
	if (e->tp) {
		if ((rc = qc_backend_tp_create(e->tp, &bp, err)))
			goto out_free;
		e->be = qc_backend_tp_ops(e->tp);
		e->be_state = e->tp;
	} else if ((rc = e->be->create(e->model, &bp, &e->be_state, err))) {
		goto out_free;
	}
	if (e->verify) {
		struct qc_bundle_verify_job *j = e->verify;
		e->verify = NULL;
		if ((rc = qc_bundle_verify_finish(j, err)))
			goto out_free;
		struct timespec v1;
		clock_gettime(CLOCK_MONOTONIC, &v1);
		const double dt = (double)(v1.tv_sec - v0.tv_sec) + 1e-9 * (double)(v1.tv_nsec - v0.tv_nsec);
		const double gb = (double)qc_bundle_verify_bytes(e->model->bundle) / 1e9;
		fprintf(stderr, "verify: %llu tensors, %.3f GB checked (XXH3) during a %.3f s load (%.2f GB/s)\n",
			(unsigned long long)e->model->bundle->n_tensors, gb, dt, dt > 0 ? gb / dt : 0.0);
	}

	const int32_t sp_threads = bp.n_threads < 16 ? bp.n_threads : 16;
	if ((rc = qc_sample_par_new(sp_threads, cfg->n_vocab, &e->sp, err)))
		goto out_free;
	e->jobs = calloc((size_t)op->max_running, sizeof *e->jobs);
	e->job_entry = calloc((size_t)op->max_running, sizeof *e->job_entry);
	e->logits = malloc(sizeof(float) * (size_t)op->max_running * (size_t)cfg->n_vocab);
	e->sampled = calloc((size_t)op->max_running, sizeof *e->sampled);
	e->want = calloc((size_t)op->max_running, sizeof *e->want);
	e->top_ids = calloc((size_t)op->max_running * QC_BACKEND_TOP_MAX, sizeof *e->top_ids);
	e->top_logits = calloc((size_t)op->max_running * QC_BACKEND_TOP_MAX, sizeof *e->top_logits);
	e->entry_req = calloc((size_t)op->max_running, sizeof *e->entry_req);
	e->results = calloc((size_t)op->max_running, sizeof *e->results);
	if (!e->logits || !e->sampled || !e->want || !e->top_ids || !e->top_logits || !e->entry_req || !e->results ||
	    !e->jobs || !e->job_entry) {
		rc = qc_err_set(err, QC_ENOMEM, path, NULL, -1, "out of memory");
		goto out_free;
	}
	*out = e;
	return QC_OK;

out_free:
	qc_engine_free(e);
	return rc;
}

void qc_engine_free(struct qc_engine *e)
{
	if (!e)
		return;
	if (e->profile && e->steps) {
		const double all = e->t_sched + e->t_forward + e->t_sample + e->t_commit;
		fprintf(stderr, "engine profile: %ld steps, %.1f ms: schedule %.1f, forward %.1f (%.1f%%), "
				"sample %.1f, commit %.1f\n", e->steps, 1e3 * all, 1e3 * e->t_sched, 1e3 * e->t_forward,
			all > 0 ? 100.0 * e->t_forward / all : 0.0, 1e3 * e->t_sample, 1e3 * e->t_commit);
	}
	if (e->verify) { /* a failure during load: join the threads before the bundle goes */
		struct qc_err ignore = {0};
		qc_bundle_verify_finish(e->verify, &ignore);
	}
	for (size_t i = 0; i < e->n_reqs; i++)
		req_free(e->reqs[i]);
	free(e->reqs);
	free(e->logits);
	free(e->sampled);
	free(e->want);
	free(e->top_ids);
	free(e->top_logits);
	free(e->entry_req);
	free(e->results);
	qc_sample_par_free(e->sp);
	free(e->jobs);
	free(e->job_entry);
	if (e->tp)
		qc_backend_tp_free(e->tp); /* e->be_state, once created */
	else if (e->be && e->be_state)
		e->be->destroy(e->be_state);
	qc_sched_free(e->sched);
	qc_kv_free(e->kv);
	qc_vocab_free(e->vocab);
	qc_model_close(e->model);
	free(e);
}

/* log-softmax of row at id, sums in double (max first, as ggml's soft_max). */
static double log_prob(const float *row, int32_t n, int32_t id)
{
	float mx = -INFINITY;
	for (int32_t i = 0; i < n; i++)
		mx = row[i] > mx ? row[i] : mx;
	double sum = 0.0;
	for (int32_t i = 0; i < n; i++)
		sum += exp((double)row[i] - (double)mx);
	return (double)row[id] - (double)mx - log(sum);
}

int qc_engine_score(struct qc_engine *e, const int32_t *ids, int32_t n, int32_t first, double *nll,
		    struct qc_err *err)
{
	const int32_t n_vocab = e->model->cfg.n_vocab;
	int32_t per = e->opts.max_running < e->opts.max_batch_tokens ? e->opts.max_running : e->opts.max_batch_tokens;
	int32_t seq = -1, width = qc_kv_table_width(e->kv);
	struct qc_sched_plan pl = {0};
	int rc = QC_OK;

	*nll = 0.0;
	if (qc_engine_has_work(e))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "score: the engine has requests");
	if (n < 2 || n > qc_kv_max_seq_tokens(e->kv))
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "score: %d tokens, expected 2..%d", n,
				  qc_kv_max_seq_tokens(e->kv));
	if (first < 0 || first > n - 2)
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "score: first %d, expected 0..%d", first, n - 2);
	for (int32_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= n_vocab)
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "score: token %d: id %d out of range", i, ids[i]);
	pl.tokens = calloc((size_t)per, sizeof *pl.tokens);
	pl.positions = calloc((size_t)per, sizeof *pl.positions);
	pl.slots = calloc((size_t)per, sizeof *pl.slots);
	pl.seq_ids = calloc((size_t)per, sizeof *pl.seq_ids);
	pl.tok_start = calloc((size_t)per + 1, sizeof *pl.tok_start);
	pl.ctx_lens = calloc((size_t)per, sizeof *pl.ctx_lens);
	pl.need_logits = calloc((size_t)per, sizeof *pl.need_logits);
	pl.block_tables = calloc((size_t)per * (size_t)width, sizeof *pl.block_tables);
	if (!pl.tokens || !pl.positions || !pl.slots || !pl.seq_ids || !pl.tok_start || !pl.ctx_lens ||
	    !pl.need_logits || !pl.block_tables) {
		rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		goto out;
	}
	if ((rc = qc_kv_seq_new(e->kv, &seq, err)))
		goto out;
	/* Positions 0..n-2 go through, logits from first on: each token of a step is
	 * an entry of its own with the sequence's one block table. The backend stores all of a step's K/V
	 * before attention (backend.h), so entry i sees positions 0..pos[i]. */
	for (int32_t p0 = 0; p0 < n - 1; p0 += per) {
		const int32_t m = n - 1 - p0 < per ? n - 1 - p0 : per;
		if ((rc = qc_kv_seq_append(e->kv, seq, m, pl.slots, NULL, err)))
			goto out;
		int32_t nb;
		const int32_t *tab = qc_kv_seq_table(e->kv, seq, &nb);
		pl.n_seqs = pl.n_tokens = m;
		pl.n_logits = 0;
		pl.block_tokens = qc_kv_block_tokens(e->kv);
		pl.table_stride = width;
		for (int32_t i = 0; i < m; i++) {
			pl.tokens[i] = ids[p0 + i];
			pl.positions[i] = p0 + i;
			pl.seq_ids[i] = (uint64_t)seq;
			pl.tok_start[i] = i;
			pl.ctx_lens[i] = p0 + i + 1;
			pl.need_logits[i] = p0 + i >= first;
			pl.n_logits += pl.need_logits[i];
			memcpy(pl.block_tables + (size_t)i * (size_t)width, tab, sizeof(int32_t) * (size_t)width);
		}
		pl.tok_start[m] = m;
		if ((rc = e->be->forward(e->be_state, &pl, e->logits, err)))
			goto out;
		for (int32_t i = 0, k = 0; i < m; i++)
			if (pl.need_logits[i])
				*nll -= log_prob(e->logits + (size_t)k++ * (size_t)n_vocab, n_vocab, ids[p0 + i + 1]);
	}
out:
	qc_kv_seq_free(e->kv, seq);
	free(pl.tokens);
	free(pl.positions);
	free(pl.slots);
	free(pl.seq_ids);
	free(pl.tok_start);
	free(pl.ctx_lens);
	free(pl.need_logits);
	free(pl.block_tables);
	return rc;
}

int64_t qc_engine_kv_tokens(const struct qc_engine *e)
{
	return (int64_t)qc_kv_blocks_total(e->kv) * qc_kv_block_tokens(e->kv);
}

const struct qc_model *qc_engine_model(const struct qc_engine *e)
{
	return e->model;
}

int qc_engine_tp_size(const struct qc_engine *e)
{
	return e->tp ? qc_backend_tp_size(e->tp) : 0;
}

const struct qc_model *qc_engine_rank_model(const struct qc_engine *e, int r)
{
	return e->tp && r >= 0 && r < qc_backend_tp_size(e->tp) ? qc_backend_tp_rank_model(e->tp, r) : NULL;
}

const struct qc_vocab *qc_engine_vocab(const struct qc_engine *e)
{
	return e->vocab;
}

int qc_engine_tokenize(const struct qc_engine *e, const char *text, size_t len, bool add_special,
		       int32_t **ids, size_t *n_ids, struct qc_err *err)
{
	*ids = NULL;
	*n_ids = 0;
	if (!e->vocab)
		return qc_err_set(err, QC_EUNSUPPORTED, e->model->bundle->path, NULL, -1,
				  "bundle has no tokenizer");
	unsigned flags = QC_TOK_PARSE_SPECIAL | (add_special ? QC_TOK_ADD_SPECIAL : 0);
	return qc_tokenize(e->vocab, text, len, (enum qc_tok_flags)flags, ids, n_ids, err);
}

/* A request record with its own sampler (seed given), not yet in any table. */
static int req_new(const struct qc_engine *e, const struct qc_engine_request *r, uint64_t seed,
		   struct req **out, struct qc_err *err)
{
	struct qc_sampler_params sp = r->sampling;
	struct req *q = calloc(1, sizeof *q);
	int rc;

	*out = NULL;
	if (!q)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	sp.seed = seed;
	if ((rc = qc_sampler_new(&sp, e->opts.max_seq_tokens, &q->sampler, err))) {
		req_free(q);
		return rc;
	}
	qc_sampler_accept(q->sampler, r->prompt, r->n_prompt);
	q->want_lp = r->sampling.logprobs;
	*out = q;
	return QC_OK;
}

int qc_engine_add(struct qc_engine *e, const struct qc_engine_request *r, uint64_t *id,
		  struct qc_err *err)
{
	return qc_engine_add_n(e, r, 1, id, err);
}

int qc_engine_add_n(struct qc_engine *e, const struct qc_engine_request *r, int32_t n_choices,
		    uint64_t *ids, struct qc_err *err)
{
	struct req *q[QC_SCHED_MAX_CHOICES] = {0};
	int rc = QC_OK;

	if (n_choices < 1 || n_choices > QC_SCHED_MAX_CHOICES)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "%d choices outside 1..%d", n_choices,
				  QC_SCHED_MAX_CHOICES);
	for (int32_t i = 0; i < r->n_prompt; i++)
		if (r->prompt[i] < 0 || r->prompt[i] >= e->model->cfg.n_vocab)
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
					  "prompt token %d at %d outside the vocabulary (%d)",
					  r->prompt[i], i, e->model->cfg.n_vocab);
	while (e->n_reqs + (size_t)n_choices > e->cap_reqs) {
		size_t cap = e->cap_reqs ? 2 * e->cap_reqs : 16;
		struct req **p = realloc(e->reqs, cap * sizeof *p);
		if (!p)
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		e->reqs = p;
		e->cap_reqs = cap;
	}
	if (r->n_stop_ids < 0 || r->n_stop_ids > QC_ENGINE_MAX_STOP_IDS)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "%d stop ids (at most %d)", r->n_stop_ids,
				  QC_ENGINE_MAX_STOP_IDS);
	for (int32_t i = 0; i < r->n_stop_ids; i++)
		if (r->stop_ids[i] < 0 || r->stop_ids[i] >= e->model->cfg.n_vocab)
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "stop id %d outside the vocabulary (%d)",
					  r->stop_ids[i], e->model->cfg.n_vocab);
	for (int32_t i = 0; i < r->sampling.n_bias; i++)
		if (r->sampling.bias_ids[i] < 0 || r->sampling.bias_ids[i] >= e->model->cfg.n_vocab)
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "logit bias id %d outside the vocabulary (%d)",
					  r->sampling.bias_ids[i], e->model->cfg.n_vocab);
	struct qc_sched_request sr = {
		.prompt = r->prompt,
		.n_prompt = r->n_prompt,
		.max_tokens = r->max_tokens,
		.eos_id = -1,
	};
	if (!r->ignore_eos && e->vocab) {
		/* end of generation: EOS, EOT, EOM (llama_vocab_is_eog's fixed ids) */
		const enum qc_special eog[] = {QC_SPECIAL_EOS, QC_SPECIAL_EOT, QC_SPECIAL_EOM};
		sr.eos_id = qc_vocab_eos(e->vocab);
		for (size_t k = 0; k < sizeof eog / sizeof eog[0]; k++) {
			int32_t t = qc_vocab_special(e->vocab, eog[k]);
			if (t >= 0 && t != sr.eos_id && sr.n_stop_ids < QC_SCHED_MAX_STOP_IDS)
				sr.stop_ids[sr.n_stop_ids++] = t;
		}
	}
	/* the caller's ids finish it even with ignore_eos (vLLM's stop_token_ids) */
	for (int32_t i = 0; i < r->n_stop_ids; i++) {
		int32_t t = r->stop_ids[i];
		if (t == sr.eos_id)
			continue;
		sr.stop_ids[sr.n_stop_ids++] = t;
	}
	/* min_tokens holds back exactly the ids that would end the request */
	struct qc_engine_request rq = *r;
	rq.sampling.n_min_ban = 0;
	if (rq.sampling.min_tokens > 0) {
		if (sr.eos_id >= 0)
			rq.sampling.min_ban_ids[rq.sampling.n_min_ban++] = sr.eos_id;
		for (int32_t i = 0; i < sr.n_stop_ids && rq.sampling.n_min_ban < QC_SAMPLER_MAX_BAN; i++)
			rq.sampling.min_ban_ids[rq.sampling.n_min_ban++] = sr.stop_ids[i];
	}
	/* choice i draws from its own stream: seed + i (docs/serve.md) */
	for (int32_t i = 0; i < n_choices; i++)
		if ((rc = req_new(e, &rq, rq.sampling.seed + (uint64_t)i, &q[i], err)))
			goto out_free;
	if (n_choices > 1) {
		q[0]->kids = malloc(sizeof *q[0]->kids * (size_t)(n_choices - 1));
		if (!q[0]->kids) {
			rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
			goto out_free;
		}
		q[0]->n_kids = n_choices - 1;
		q[0]->forks = true;
		for (int32_t i = 1; i < n_choices; i++) {
			q[0]->kids[i - 1] = q[i];
			q[i]->parent = q[0];
		}
	}
	sr.user = q[0];
	if ((rc = qc_sched_add_group(e->sched, &sr, n_choices, &q[0]->sid, err)))
		goto out_free;
	for (int32_t i = 0; i < n_choices; i++) {
		q[i]->id = q[0]->sid | ((uint64_t)i << QC_SCHED_ID_SLOT_BITS);
		ids[i] = q[i]->id;
		e->reqs[e->n_reqs++] = q[i];
	}
	return QC_OK;
out_free:
	for (int32_t i = 0; i < n_choices; i++)
		req_free(q[i]);
	return rc;
}

/* res is kept only when the request asked for logprobs. */
static int append_out(struct req *q, const struct qc_sample_result *res, struct qc_err *err)
{
	if (q->n_out == q->cap) {
		int32_t cap = q->cap ? 2 * q->cap : 32;
		int32_t *p = realloc(q->out, sizeof *p * (size_t)cap);
		if (!p)
			return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
		q->out = p;
		if (q->want_lp) {
			struct qc_sample_result *l = realloc(q->lp, sizeof *l * (size_t)cap);
			if (!l)
				return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
			q->lp = l;
		}
		q->cap = cap;
	}
	if (q->want_lp)
		q->lp[q->n_out] = *res;
	q->out[q->n_out++] = res->token;
	return QC_OK;
}

/* The sampler refused q's row (rc, rerr). FAIL_STEP: the step's error. FAIL_REQUEST:
 * q alone finishes with ERROR now, so commit skips its entry; QC_OK. */
static int row_failed(struct qc_engine *e, struct req *q, int rc, const struct qc_err *rerr, struct qc_err *err)
{
	if (e->opts.bad_logits != QC_BAD_LOGITS_FAIL_REQUEST || rc != QC_EINVAL) {
		if (err && rerr != err)
			*err = *rerr;
		return rc;
	}
	snprintf(q->fail, sizeof q->fail, "%s", rerr->msg);
	q->finish = QC_SCHED_FINISH_ERROR;
	orphan_kids(q, QC_SCHED_FINISH_ERROR, q->fail);
	return q->sid ? qc_sched_finish(e->sched, q->sid, QC_SCHED_FINISH_ERROR, err) : QC_OK;
}

/* Entry i completed q's prompt and q has choices to fork: draw each choice's
 * first token from the same row (lg, full), then open them in the scheduler.
 * Runs before the commit, which still sees only q's entry. */
static int fork_kids(struct qc_engine *e, struct qc_sched_plan *plan, int32_t i, struct req *q,
		     const float *lg, struct qc_err *err)
{
	const int32_t V = e->model->cfg.n_vocab;
	struct qc_err rerr = {0};
	int32_t n = 0, rc;
	struct req *took[QC_SCHED_MAX_CHOICES];

	if (q->finish == QC_SCHED_FINISH_ERROR) { /* the row itself was refused */
		orphan_kids(q, QC_SCHED_FINISH_ERROR, q->fail);
		return QC_OK;
	}
	for (int32_t k = 0; k < q->n_kids; k++) {
		struct req *c = q->kids[k];
		if (e->opts.on_logits)
			e->opts.on_logits(e->opts.cb_ctx, c->id, 0, lg, V);
		rc = qc_sampler_sample(c->sampler, qc_sample_par_ws(e->sp), lg, V, &e->fork_res[n], &rerr);
		if (rc) {
			c->parent = NULL;
			if ((rc = row_failed(e, c, rc, &rerr, err)))
				return rc;
			continue;
		}
		e->fork[n] = (struct qc_sched_child){.first_token = e->fork_res[n].token, .user = c};
		took[n++] = c;
	}
	free(q->kids);
	q->kids = NULL;
	q->n_kids = 0;
	q->forks = false;
	if ((rc = qc_sched_fork(e->sched, plan, i, e->fork, n, err)))
		return rc;
	for (int32_t k = 0; k < n; k++) {
		struct req *c = took[k];
		c->parent = NULL;
		c->sid = e->fork[k].id;
		if (c->sid && (rc = append_out(c, &e->fork_res[k], err)))
			return rc;
		c->finish = e->fork[k].finish;
	}
	return QC_OK;
}

int qc_engine_step(struct qc_engine *e, struct qc_err *err)
{
	struct qc_sched_plan *plan;
	const int32_t V = e->model->cfg.n_vocab;
	struct qc_err rerr = {0}; /* a row's sampling error, before row_failed decides */
	int rc;

	const double t0 = e->profile ? mono_s() : 0.0;
	if ((rc = qc_sched_step(e->sched, &plan, err)))
		return rc;
	for (int32_t k = 0; k < plan->n_failed; k++) {
		struct req *q = find_sid(e, plan->failed_ids[k]);
		if (q) {
			q->finish = QC_SCHED_FINISH_NO_MEMORY;
			orphan_kids(q, QC_SCHED_FINISH_NO_MEMORY, NULL);
		}
	}
	if (plan->n_seqs == 0)
		return qc_sched_commit(e->sched, plan, NULL, err);
	const double t1 = e->profile ? mono_s() : 0.0;
	/* rows whose sampler reads only the row's best m logits (m = 1: greedy; m =
	   top_k) take them from the backend where it can select them (no row crosses) */
	int32_t n_top = 0, row = 0;
	for (int32_t i = 0; i < plan->n_seqs; i++) {
		struct req *q = qc_sched_seq_user(e->sched, plan->seq_ids[i]);
		e->entry_req[i] = q;
		if (!plan->need_logits[i])
			continue;
		/* a row that forks choices is sampled by each of them: keep it whole */
		const int32_t m = e->opts.on_logits || q->forks ? 0 : qc_sampler_top_need(q->sampler, V);
		e->want[row++] = m <= QC_BACKEND_TOP_MAX ? m : 0;
		n_top += e->want[row - 1] > 0;
	}
	const bool dev_top = e->be->forward_top && n_top > 0;
	if (dev_top)
		rc = e->be->forward_top(e->be_state, plan, e->want, e->logits, e->top_ids, e->top_logits, err);
	else
		rc = e->be->forward(e->be_state, plan, e->logits, err);
	if (rc)
		return rc;
	const double t2 = e->profile ? mono_s() : 0.0;

	row = 0;
	int32_t n_jobs = 0;
	for (int32_t i = 0; i < plan->n_seqs; i++) {
		struct req *q = e->entry_req[i];
		e->sampled[i] = 0;
		if (!plan->need_logits[i])
			continue;
		const int32_t k = row++;
		struct qc_sample_result *res = &e->results[i];
		const int32_t *tid = e->top_ids + (size_t)k * QC_BACKEND_TOP_MAX;
		if (dev_top && e->want[k] > 0 && tid[0] >= 0) {
			if (e->want[k] == 1)
				qc_sampler_take(q->sampler, tid[0], res);
			else if ((rc = qc_sampler_sample_top(q->sampler, qc_sample_par_ws(e->sp), tid,
							     e->top_logits + (size_t)k * QC_BACKEND_TOP_MAX,
							     e->want[k], res, &rerr)) &&
				 (rc = row_failed(e, q, rc, &rerr, err)))
				return rc;
			e->sampled[i] = q->finish == QC_SCHED_FINISH_ERROR ? 0 : res->token;
			continue;
		}
		const float *lg = e->logits + (size_t)k * (size_t)V;
		if (!e->opts.on_logits) { /* sampled below, rows in parallel */
			e->jobs[n_jobs] = (struct qc_sample_job){q->sampler, lg, res, QC_OK};
			e->job_entry[n_jobs++] = i;
			continue;
		}
		e->opts.on_logits(e->opts.cb_ctx, q->id, q->n_out, lg, V);
		if ((rc = qc_sampler_sample(q->sampler, qc_sample_par_ws(e->sp), lg, V, res, &rerr)) &&
		    (rc = row_failed(e, q, rc, &rerr, err)))
			return rc;
		e->sampled[i] = q->finish == QC_SCHED_FINISH_ERROR ? 0 : res->token;
	}
	if ((rc = qc_sample_par_run(e->sp, e->jobs, n_jobs, V, &rerr)) &&
	    e->opts.bad_logits != QC_BAD_LOGITS_FAIL_REQUEST) {
		*err = rerr;
		return rc;
	}
	for (int32_t j = 0; j < n_jobs; j++) {
		const int32_t i = e->job_entry[j];
		e->sampled[i] = e->results[i].token;
		if (!e->jobs[j].rc)
			continue;
		/* the sampler changes nothing on a refused row: sampling it again
		 * alone gives this row's own message */
		e->sampled[i] = 0;
		rc = qc_sampler_sample(e->jobs[j].s, qc_sample_par_ws(e->sp), e->jobs[j].logits, V, &e->results[i], &rerr);
		if (rc && (rc = row_failed(e, e->entry_req[i], rc, &rerr, err)))
			return rc;
	}
	row = 0;
	for (int32_t i = 0; i < plan->n_seqs; i++) {
		if (!plan->need_logits[i])
			continue;
		const int32_t k = row++;
		if (e->entry_req[i]->forks &&
		    (rc = fork_kids(e, plan, i, e->entry_req[i], e->logits + (size_t)k * (size_t)V, err)))
			return rc;
	}
	const double t3 = e->profile ? mono_s() : 0.0;
	if ((rc = qc_sched_commit(e->sched, plan, e->sampled, err)))
		return rc;
	if (e->profile) {
		e->t_sched += t1 - t0;
		e->t_forward += t2 - t1;
		e->t_sample += t3 - t2;
		e->t_commit += mono_s() - t3;
		e->steps++;
	}
	for (int32_t i = 0; i < plan->n_seqs; i++) {
		struct req *q = e->entry_req[i];
		if (plan->accepted[i] && (rc = append_out(q, &e->results[i], err)))
			return rc;
		if (plan->finish[i] != QC_SCHED_FINISH_NONE)
			q->finish = (enum qc_sched_finish)plan->finish[i];
	}
	return QC_OK;
}

bool qc_engine_has_work(const struct qc_engine *e)
{
	return qc_sched_has_work(e->sched);
}

int qc_engine_output(const struct qc_engine *e, uint64_t id, const int32_t **ids, int32_t *n,
		     enum qc_sched_finish *finish)
{
	const struct req *q = find_req(e, id);
	if (!q)
		return QC_ENOTFOUND;
	*ids = q->out;
	*n = q->n_out;
	*finish = q->finish;
	return QC_OK;
}

const char *qc_engine_failure(const struct qc_engine *e, uint64_t id)
{
	const struct req *q = find_req(e, id);
	return q && q->finish == QC_SCHED_FINISH_ERROR ? q->fail : NULL;
}

int qc_engine_logprobs(const struct qc_engine *e, uint64_t id, const struct qc_sample_result **res,
		       int32_t *n)
{
	const struct req *q = find_req(e, id);
	if (!q)
		return QC_ENOTFOUND;
	*res = q->lp;
	*n = q->want_lp ? q->n_out : 0;
	return QC_OK;
}

void qc_engine_release(struct qc_engine *e, uint64_t id)
{
	for (size_t i = 0; i < e->n_reqs; i++) {
		struct req *q = e->reqs[i];
		if (q->id != id)
			continue;
		if (q->parent) { /* a choice not forked yet: its parent forks one fewer */
			struct req *p = q->parent;
			for (int32_t k = 0; k < p->n_kids; k++)
				if (p->kids[k] == q) {
					p->kids[k] = p->kids[--p->n_kids];
					break;
				}
		}
		orphan_kids(q, QC_SCHED_FINISH_CANCELLED, NULL);
		if (q->sid && qc_sched_seq_live(e->sched, q->sid))
			qc_sched_cancel(e->sched, q->sid, NULL);
		req_free(e->reqs[i]);
		e->reqs[i] = e->reqs[--e->n_reqs];
		return;
	}
}

void qc_engine_stats(const struct qc_engine *e, struct qc_sched_stats *out)
{
	qc_sched_get_stats(e->sched, out);
}
