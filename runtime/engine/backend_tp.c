/* backend_tp.c — the tensor-parallel backend (backend_tp.h, docs/tp.md).
 *
 * Threads: one per rank, started at open and living until free, each waiting on
 * one condition variable for the next command (a generation counter), running it
 * on its own rank (the inner backend's call, its own buffers), counting pending
 * down and signalling the caller when it is the last. The caller posts a command
 * to every rank and waits for all of them: one forward is one round trip.
 * Logits: each rank writes its rows of its own vocabulary columns into its own
 * buffer; the caller's row k is rank 0's row k, then rank 1's, ... (the ranges
 * follow each other from 0). One rank: the inner backend writes the caller's
 * buffers directly, and forward_top passes straight through.
 * forward_top with 2+ ranks: each rank is asked for m_r = min(max(want, 2), n_r)
 * of its n_r columns (2 at least so that values come back; 0, its whole slice,
 * when n_r < 2), its ids shifted by its vocab0, and the lists merged to the row's
 * best want (larger logit, then lower id). A rank whose slice it flags (-1) wrote
 * that slice: a NaN or +inf in it flags the whole row (-1), and the caller's row
 * then holds every slice a rank wrote and zeros for the slices no rank wrote
 * (those ranks sent candidates only; the host sampler then names the bad logit,
 * which zeros never are); a slice of only -inf gives its first ids with -inf
 * (the row is flagged only when every slice is all -inf, as one backend would).
 * Errors and why a forward that fails on every rank leaves the backend usable:
 * backend_tp.h.
 */
#include "backend_tp.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tp_group.h"

enum cmd { CMD_NONE, CMD_KV, CMD_CREATE, CMD_FORWARD, CMD_TOP, CMD_DESTROY, CMD_QUIT };

struct qc_backend_tp;

struct rank {
	struct qc_backend_tp *tp;
	int r;
	pthread_t th;
	bool started;
	struct qc_model *m;        /* this rank's shard */
	void *state;               /* the inner backend, NULL until created */
	float *logits;             /* (max_logits, n_vocab) own rows (2+ ranks) */
	int32_t *want;             /* (max_logits) asked of the inner forward_top */
	int32_t *top_ids;          /* (max_logits, QC_BACKEND_TOP_MAX) local ids */
	float *top_logits;         /* (max_logits, QC_BACKEND_TOP_MAX) */
	/* this command's buffers: the ones above, or the caller's with one rank */
	float *out_logits;
	const int32_t *out_want;
	int32_t *out_ids;
	float *out_vals;
	uint64_t block_bytes, max_bytes; /* CMD_KV's answer */
	int rc;
	struct qc_err err;
};

struct qc_backend_tp {
	const struct qc_backend_ops *inner;
	struct qc_backend_ops ops;  /* what the engine calls (qc_backend_tp_ops) */
	struct qc_tp_group *g;
	int n;
	struct rank rk[QC_TP_MAX];
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	bool sync_init;
	uint64_t gen;              /* bumped per command */
	int pending;               /* ranks still running the command */
	enum cmd cmd;
	/* the command's arguments */
	struct qc_backend_params p; /* CMD_KV, CMD_CREATE: the engine's, before each rank's own */
	float mem_util;
	const struct qc_sched_plan *plan;
	int32_t max_logits;
	/* a forward that failed on some ranks only: every later one fails with it */
	bool broken;
	int broken_rc;
	struct qc_err broken_err;
	/* merge scratch: one candidate list per rank */
	int32_t cid[QC_TP_MAX][QC_BACKEND_TOP_MAX];
	float cval[QC_TP_MAX][QC_BACKEND_TOP_MAX];
};

/* ---- the rank threads ---------------------------------------------------- */

static struct qc_backend_params rank_params(const struct qc_backend_tp *tp, int r)
{
	struct qc_backend_params p = tp->p;
	p.tp = tp->g;
	p.tp_rank = r;
	p.device = r;
	p.n_threads = p.n_threads / tp->n > 1 ? p.n_threads / tp->n : 1;
	return p;
}

static void rank_destroy(struct rank *k)
{
	if (k->state)
		k->tp->inner->destroy(k->state);
	k->state = NULL;
}

static int rank_create(struct rank *k)
{
	struct qc_backend_tp *tp = k->tp;
	const struct qc_backend_params p = rank_params(tp, k->r);
	if (tp->n > 1) {
		const size_t rows = (size_t)p.max_logits;
		k->logits = malloc(sizeof(float) * rows * (size_t)k->m->cfg.n_vocab);
		k->want = calloc(rows, sizeof *k->want);
		k->top_ids = calloc(rows * QC_BACKEND_TOP_MAX, sizeof *k->top_ids);
		k->top_logits = calloc(rows * QC_BACKEND_TOP_MAX, sizeof *k->top_logits);
		if (!k->logits || !k->want || !k->top_ids || !k->top_logits)
			return qc_err_set(&k->err, QC_ENOMEM, NULL, NULL, -1, "out of memory (rank %d's logits)", k->r);
	}
	return tp->inner->create(k->m, &p, &k->state, &k->err);
}

static int rank_run(struct rank *k, enum cmd cmd)
{
	struct qc_backend_tp *tp = k->tp;
	switch (cmd) {
	case CMD_KV: {
		const struct qc_backend_params p = rank_params(tp, k->r);
		k->max_bytes = 0;
		if (tp->inner->kv_limits)
			return tp->inner->kv_limits(k->m, &p, tp->mem_util, &k->block_bytes, &k->max_bytes, &k->err);
		return qc_backend_block_bytes(k->m, p.block_tokens, p.kv_dtype, &k->block_bytes, &k->err);
	}
	case CMD_CREATE:
		return rank_create(k);
	case CMD_FORWARD:
		return tp->inner->forward(k->state, tp->plan, k->out_logits, &k->err);
	case CMD_TOP:
		return tp->inner->forward_top(k->state, tp->plan, k->out_want, k->out_logits, k->out_ids, k->out_vals,
					      &k->err);
	case CMD_DESTROY:
		rank_destroy(k);
		return QC_OK;
	case CMD_NONE:
	case CMD_QUIT:
		break;
	}
	return QC_OK;
}

static void *rank_main(void *arg)
{
	struct rank *k = arg;
	struct qc_backend_tp *tp = k->tp;
	uint64_t seen = 0;
	for (;;) {
		pthread_mutex_lock(&tp->mu);
		while (tp->gen == seen)
			pthread_cond_wait(&tp->go, &tp->mu);
		seen = tp->gen;
		const enum cmd cmd = tp->cmd;
		pthread_mutex_unlock(&tp->mu);
		if (cmd == CMD_QUIT) { /* the inner backend goes in the thread that made it */
			rank_destroy(k);
			return NULL;
		}
		k->rc = rank_run(k, cmd);
		pthread_mutex_lock(&tp->mu);
		if (--tp->pending == 0)
			pthread_cond_signal(&tp->done);
		pthread_mutex_unlock(&tp->mu);
	}
}

/* Runs cmd on every rank and waits for all. Returns how many failed; *first is
 * the lowest failing rank (-1: none). */
static int dispatch(struct qc_backend_tp *tp, enum cmd cmd, int *first)
{
	pthread_mutex_lock(&tp->mu);
	tp->cmd = cmd;
	tp->pending = tp->n;
	tp->gen++;
	pthread_cond_broadcast(&tp->go);
	while (tp->pending > 0)
		pthread_cond_wait(&tp->done, &tp->mu);
	pthread_mutex_unlock(&tp->mu);
	int n_fail = 0;
	*first = -1;
	for (int r = tp->n - 1; r >= 0; r--)
		if (tp->rk[r].rc) {
			n_fail++;
			*first = r;
		}
	return n_fail;
}

/* The first failing rank's error into err (its code). */
static int rank_error(const struct qc_backend_tp *tp, int r, struct qc_err *err)
{
	if (err)
		*err = tp->rk[r].err;
	return tp->rk[r].rc;
}

/* ---- open / limits / create / free --------------------------------------- */

void qc_backend_tp_free(struct qc_backend_tp *tp)
{
	if (!tp)
		return;
	if (tp->sync_init) {
		pthread_mutex_lock(&tp->mu);
		tp->cmd = CMD_QUIT;
		tp->gen++;
		pthread_cond_broadcast(&tp->go);
		pthread_mutex_unlock(&tp->mu);
		for (int r = 0; r < tp->n; r++)
			if (tp->rk[r].started)
				pthread_join(tp->rk[r].th, NULL);
		pthread_cond_destroy(&tp->done);
		pthread_cond_destroy(&tp->go);
		pthread_mutex_destroy(&tp->mu);
	}
	for (int r = 0; r < tp->n; r++) {
		struct rank *k = &tp->rk[r];
		qc_model_close(k->m);
		free(k->logits);
		free(k->want);
		free(k->top_ids);
		free(k->top_logits);
	}
	qc_tp_group_free(tp->g);
	free(tp);
}

static void tp_destroy(void *state)
{
	qc_backend_tp_free(state);
}

static int tp_forward(void *state, const struct qc_sched_plan *plan, float *logits, struct qc_err *err);
static int tp_forward_top(void *state, const struct qc_sched_plan *plan, const int32_t *want, float *logits,
			  int32_t *top_ids, float *top_logits, struct qc_err *err);

int qc_backend_tp_open(const struct qc_backend_ops *inner, const struct qc_model *whole, struct qc_backend_tp **out,
		       struct qc_err *err)
{
	int rc;
	*out = NULL;
	if (whole->tp.size < 1 || whole->tp.size > QC_TP_MAX)
		return qc_err_set(err, QC_EINVAL, whole->bundle->path, NULL, -1, "tensor parallel size %d: 1..%d",
				  whole->tp.size, QC_TP_MAX);
	struct qc_backend_tp *tp = calloc(1, sizeof *tp);
	if (!tp)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	tp->inner = inner;
	tp->n = whole->tp.size;
	tp->ops = (struct qc_backend_ops){
		.name = inner->name,
		.prefill_chunk = inner->prefill_chunk,
		.forward = tp_forward,
		.forward_top = inner->forward_top ? tp_forward_top : NULL,
		.destroy = tp_destroy,
	};
	if ((rc = qc_tp_group_new(tp->n, &tp->g, err)))
		goto out_free;
	for (int r = 0; r < tp->n; r++) {
		tp->rk[r].tp = tp;
		tp->rk[r].r = r;
		if ((rc = qc_model_rank_open(whole, r, &tp->rk[r].m, err)))
			goto out_free;
	}
	if (pthread_mutex_init(&tp->mu, NULL)) {
		rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "pthread_mutex_init failed");
		goto out_free;
	}
	if (pthread_cond_init(&tp->go, NULL)) {
		pthread_mutex_destroy(&tp->mu);
		rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "pthread_cond_init failed");
		goto out_free;
	}
	if (pthread_cond_init(&tp->done, NULL)) {
		pthread_cond_destroy(&tp->go);
		pthread_mutex_destroy(&tp->mu);
		rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "pthread_cond_init failed");
		goto out_free;
	}
	tp->sync_init = true;
	for (int r = 0; r < tp->n; r++) {
		if (pthread_create(&tp->rk[r].th, NULL, rank_main, &tp->rk[r])) {
			rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "cannot start the thread of rank %d", r);
			goto out_free;
		}
		tp->rk[r].started = true;
	}
	*out = tp;
	return QC_OK;

out_free:
	qc_backend_tp_free(tp);
	return rc;
}

int qc_backend_tp_kv_limits(struct qc_backend_tp *tp, const struct qc_backend_params *p, float mem_util,
			    uint64_t *block_bytes, uint64_t *max_bytes, struct qc_err *err)
{
	int first;
	tp->p = *p;
	tp->mem_util = mem_util;
	if (dispatch(tp, CMD_KV, &first))
		return rank_error(tp, first, err);
	*block_bytes = 0;
	*max_bytes = 0;
	for (int r = 0; r < tp->n; r++) {
		const struct rank *k = &tp->rk[r];
		*block_bytes = k->block_bytes > *block_bytes ? k->block_bytes : *block_bytes;
		if (k->max_bytes && (!*max_bytes || k->max_bytes < *max_bytes))
			*max_bytes = k->max_bytes;
	}
	return QC_OK;
}

int qc_backend_tp_create(struct qc_backend_tp *tp, const struct qc_backend_params *p, struct qc_err *err)
{
	int first;
	tp->p = *p;
	tp->max_logits = p->max_logits;
	if (dispatch(tp, CMD_CREATE, &first)) {
		const int rc = rank_error(tp, first, err);
		dispatch(tp, CMD_DESTROY, &first); /* the ranks that were made */
		return rc;
	}
	return QC_OK;
}

const struct qc_backend_ops *qc_backend_tp_ops(const struct qc_backend_tp *tp)
{
	return &tp->ops;
}

int qc_backend_tp_size(const struct qc_backend_tp *tp)
{
	return tp->n;
}

const struct qc_model *qc_backend_tp_rank_model(const struct qc_backend_tp *tp, int r)
{
	return tp->rk[r].m;
}

/* ---- forward ------------------------------------------------------------- */

/* After a forward command: QC_OK, or the first failing rank's error; failures on
 * some ranks only break the backend (see the header). */
static int forward_result(struct qc_backend_tp *tp, int n_fail, int first, struct qc_err *err)
{
	if (!n_fail)
		return QC_OK;
	const int rc = rank_error(tp, first, err);
	if (n_fail < tp->n) {
		tp->broken = true;
		tp->broken_rc = rc;
		tp->broken_err = tp->rk[first].err;
	}
	return rc;
}

static int check_usable(const struct qc_backend_tp *tp, const struct qc_sched_plan *plan, struct qc_err *err)
{
	if (tp->broken)
		return qc_err_set(err, tp->broken_rc, NULL, NULL, -1, "tensor parallel: the ranks are out of step since "
				  "a forward failed on some of them only (%s)", tp->broken_err.msg);
	if (plan->n_logits > tp->max_logits)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "plan of %d logits exceeds the backend's %d",
				  plan->n_logits, tp->max_logits);
	return QC_OK;
}

/* Caller's row k of n_vocab_all columns from the ranks' rows k; a rank whose
 * slice was not written (written[r] false; written NULL: all were) gets zeros. */
static void place_row(const struct qc_backend_tp *tp, int32_t k, const bool *written, float *row)
{
	for (int r = 0; r < tp->n; r++) {
		const struct rank *rk = &tp->rk[r];
		const size_t nv = (size_t)rk->m->cfg.n_vocab;
		if (!written || written[r])
			memcpy(row + rk->m->tp.vocab0, rk->logits + (size_t)k * nv, sizeof(float) * nv);
		else
			memset(row + rk->m->tp.vocab0, 0, sizeof(float) * nv);
	}
}

static int tp_forward(void *state, const struct qc_sched_plan *plan, float *logits, struct qc_err *err)
{
	struct qc_backend_tp *tp = state;
	int first, rc;
	if ((rc = check_usable(tp, plan, err)))
		return rc;
	tp->plan = plan;
	for (int r = 0; r < tp->n; r++)
		tp->rk[r].out_logits = tp->n == 1 ? logits : tp->rk[r].logits;
	const int n_fail = dispatch(tp, CMD_FORWARD, &first);
	if ((rc = forward_result(tp, n_fail, first, err)) || tp->n == 1)
		return rc;
	const size_t V = (size_t)tp->rk[0].m->tp.n_vocab_all;
	for (int32_t k = 0; k < plan->n_logits; k++)
		place_row(tp, k, NULL, logits + (size_t)k * V);
	return QC_OK;
}

static bool better(float v, int32_t i, float w, int32_t j)
{
	return v > w || (v == w && i < j);
}

int32_t qc_backend_tp_merge_top(int n_src, const int32_t *const *ids, const float *const *vals, const int32_t *n,
				int32_t m, int32_t *out_ids, float *out_vals)
{
	int32_t pos[QC_TP_MAX] = {0};
	int32_t k = 0;
	QC_ASSERT(n_src >= 0 && n_src <= QC_TP_MAX);
	for (; k < m; k++) {
		int b = -1;
		for (int s = 0; s < n_src; s++)
			if (pos[s] < n[s] &&
			    (b < 0 || better(vals[s][pos[s]], ids[s][pos[s]], vals[b][pos[b]], ids[b][pos[b]])))
				b = s;
		if (b < 0)
			break;
		out_ids[k] = ids[b][pos[b]];
		out_vals[k] = vals[b][pos[b]];
		pos[b]++;
	}
	return k;
}

/* The best m of a slice of n values with no NaN or +inf (a flagged all -inf
 * slice, or one too narrow to ask for two), ids shifted by v0: repeated scans,
 * as runtime/ops qc_ref_topk selects. Returns the count. */
static int32_t slice_top(const float *row, int32_t n, int32_t m, int32_t v0, int32_t *ids, float *vals)
{
	int32_t pi = -1, s = 0;
	float pv = INFINITY;
	for (; s < m && s < n; s++) {
		int32_t bi = -1;
		for (int32_t i = 0; i < n; i++)
			if ((pi < 0 || better(pv, pi, row[i], i)) && (bi < 0 || better(row[i], i, row[bi], bi)))
				bi = i;
		ids[s] = bi + v0;
		vals[s] = row[bi];
		pv = row[bi];
		pi = bi;
	}
	return s;
}

static bool slice_bad(const float *row, int32_t n)
{
	for (int32_t i = 0; i < n; i++)
		if (isnan(row[i]) || row[i] == INFINITY)
			return true;
	return false;
}

/* Row k of a forward_top with 2+ ranks: merge or flag (see the top). */
static void merge_row(struct qc_backend_tp *tp, int32_t k, int32_t want, float *row, int32_t *ids, float *vals)
{
	const int32_t *src_ids[QC_TP_MAX];
	const float *src_vals[QC_TP_MAX];
	int32_t n_src[QC_TP_MAX];
	bool written[QC_TP_MAX], bad = false;
	for (int r = 0; r < tp->n; r++) {
		const struct rank *rk = &tp->rk[r];
		const int32_t nv = rk->m->cfg.n_vocab, v0 = rk->m->tp.vocab0, m_r = rk->want[k];
		const int32_t *lid = rk->top_ids + (size_t)k * QC_BACKEND_TOP_MAX;
		const float *lv = rk->top_logits + (size_t)k * QC_BACKEND_TOP_MAX;
		const float *slice = rk->logits + (size_t)k * (size_t)nv;
		written[r] = m_r == 0 || lid[0] < 0;
		src_ids[r] = tp->cid[r];
		src_vals[r] = tp->cval[r];
		if (written[r]) {
			bad |= slice_bad(slice, nv);
			n_src[r] = bad ? 0 : slice_top(slice, nv, want, v0, tp->cid[r], tp->cval[r]);
			continue;
		}
		for (int32_t i = 0; i < m_r; i++)
			tp->cid[r][i] = lid[i] + v0;
		src_vals[r] = lv;
		n_src[r] = m_r;
	}
	if (!bad) {
		const int32_t got = qc_backend_tp_merge_top(tp->n, src_ids, src_vals, n_src, want, ids, vals);
		if (got > 0 && vals[0] > -INFINITY)
			return;
	}
	ids[0] = -1; /* a NaN or +inf somewhere, or only -inf: the host reads the row */
	place_row(tp, k, written, row);
}

static int tp_forward_top(void *state, const struct qc_sched_plan *plan, const int32_t *want, float *logits,
			  int32_t *top_ids, float *top_logits, struct qc_err *err)
{
	struct qc_backend_tp *tp = state;
	int first, rc;
	if ((rc = check_usable(tp, plan, err)))
		return rc;
	tp->plan = plan;
	for (int r = 0; r < tp->n; r++) {
		struct rank *k = &tp->rk[r];
		if (tp->n == 1) { /* straight through */
			k->out_want = want;
			k->out_logits = logits;
			k->out_ids = top_ids;
			k->out_vals = top_logits;
			continue;
		}
		const int32_t nv = k->m->cfg.n_vocab;
		for (int32_t i = 0; i < plan->n_logits; i++) {
			const int32_t m = want[i] > 2 ? want[i] : 2;
			k->want[i] = want[i] <= 0 || nv < 2 ? 0 : m < nv ? m : nv;
		}
		k->out_want = k->want;
		k->out_logits = k->logits;
		k->out_ids = k->top_ids;
		k->out_vals = k->top_logits;
	}
	const int n_fail = dispatch(tp, CMD_TOP, &first);
	if ((rc = forward_result(tp, n_fail, first, err)) || tp->n == 1)
		return rc;
	const size_t V = (size_t)tp->rk[0].m->tp.n_vocab_all;
	for (int32_t k = 0; k < plan->n_logits; k++) {
		float *row = logits + (size_t)k * V;
		if (want[k] <= 0)
			place_row(tp, k, NULL, row);
		else
			merge_row(tp, k, want[k] < QC_BACKEND_TOP_MAX ? want[k] : QC_BACKEND_TOP_MAX, row,
				  top_ids + (size_t)k * QC_BACKEND_TOP_MAX, top_logits + (size_t)k * QC_BACKEND_TOP_MAX);
	}
	return QC_OK;
}
