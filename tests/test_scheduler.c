/* test_scheduler.c — continuous batching driven by a mock model.
 *
 * The mock "model" keeps a fake K/V store indexed by slot: the forward writes
 * (token, position) for every planned token, then for each entry needing logits
 * reads the whole context back through the plan's block table and returns
 * hash(context) mod V. So a request's output equals the plain loop in ref_run()
 * (the independent reference) only if the scheduler fed every token once, in
 * order, and no block was handed to two live sequences. Runs: 20 requests on a
 * pool small enough to force preemption, a lone request too big for the pool,
 * queue/commit misuse, cancellation, and a randomized stress run with invariant
 * checks each step. Groups (qc_sched_fork): a choice finished by its first
 * token, a group preempted or cancelled before its fork, fork misuse, a group on
 * a cached prompt (the mock copies cow blocks and checks refcounts every step).
 * Sliding window: with g_window W the mock attends to the last W positions only
 * (its next token hashes them, as ref_run does), the scheduler releases the
 * blocks behind the window, and a stress run with preemption must still match
 * the reference while each sequence holds at most the bound of kv_blocks.h.
 * Every checker is also fed a deliberately wrong input.
 */
/* the .c itself: the fork tests corrupt a reservation count to see qc_sched_check trip */
#include "scheduler.c"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kv_blocks.h"

#define V 64              /* mock vocabulary */
#define MAX_REQ_TOKENS 256

/* ---- mock model ---- */

static uint32_t hash_tokens(const int32_t *t, int32_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a 64 over the token words */
	for (int32_t i = 0; i < n; i++) {
		h ^= (uint32_t)t[i];
		h *= 0x100000001b3ull;
	}
	h ^= h >> 29;
	return (uint32_t)(h ^ (h >> 32));
}

static int32_t g_window;      /* the mock model's window on every layer; 0: none */

/* The next token after t[0..n): a hash of what the last query attends to. */
static int32_t next_token(const int32_t *t, int32_t n)
{
	int32_t from = g_window > 0 && n > g_window ? n - g_window : 0;
	return (int32_t)(hash_tokens(t + from, n - from) % V);
}

struct req {
	uint64_t id;
	int32_t prompt[MAX_REQ_TOKENS];
	int32_t n_prompt;
	int32_t max_tokens;
	int32_t eos;
	int32_t n_stop;
	int32_t stop[2];
	int32_t out[MAX_REQ_TOKENS];
	int32_t n_out;
	int finish;             /* enum qc_sched_finish once done */
	bool done;
	int n_entries;          /* plan entries that carried this request */
	int max_chunk;
	long first_step;        /* run step that accepted its first token, 0 before */
	long last_step;         /* ... its latest token */
	long max_gap;           /* most steps between two of its tokens */
	/* groups (qc_sched_add_group / qc_sched_fork) */
	bool forced;            /* a forked choice: out[0] was given, not computed */
	int32_t first;          /* ... that token */
	struct req *kids[4];    /* a group's other choices, forked by run_step */
	int n_kids;
	int forks;              /* qc_sched_fork calls on it */
	int prefills;           /* plan entries that fed it from position 0 */
};

static int32_t hist_at(const struct req *r, int32_t pos)
{
	return pos < r->n_prompt ? r->prompt[pos] : r->out[pos - r->n_prompt];
}

/* Independent reference: the request run alone, no scheduler at all. */
static int32_t ref_run(const struct req *r, int32_t *out, int *finish)
{
	int32_t h[2 * MAX_REQ_TOKENS], n = r->n_prompt, k = 0;
	memcpy(h, r->prompt, (size_t)n * sizeof *h);
	*finish = QC_SCHED_FINISH_LENGTH;
	while (k < r->max_tokens) {
		int32_t t = k == 0 && r->forced ? r->first : next_token(h, n);
		h[n++] = t;
		out[k++] = t;
		if (t == r->eos || (r->n_stop > 0 && (t == r->stop[0] || t == r->stop[1]))) {
			*finish = QC_SCHED_FINISH_STOP;
			break;
		}
	}
	return k;
}

/* 0 when r's output and finish equal the reference; with allow_prefix (cancelled
 * requests) the output only has to be a prefix of it. */
static int compare_with_ref(const struct req *r, bool allow_prefix)
{
	int32_t want[MAX_REQ_TOKENS];
	int fin;
	int32_t n = ref_run(r, want, &fin);
	if (allow_prefix ? r->n_out > n : (r->n_out != n || r->finish != fin))
		return 1;
	for (int32_t i = 0; i < r->n_out; i++)
		if (r->out[i] != want[i])
			return 1;
	return 0;
}

struct mock {
	int32_t *kv_tok;        /* (n_slots) token whose K/V sits in the slot */
	int32_t *kv_pos;        /* (n_slots) its position */
	int32_t n_slots;
};

static void mock_init(struct mock *m, const struct qc_kv *kv)
{
	m->n_slots = qc_kv_blocks_total(kv) * qc_kv_block_tokens(kv);
	m->kv_tok = malloc((size_t)m->n_slots * sizeof *m->kv_tok);
	m->kv_pos = malloc((size_t)m->n_slots * sizeof *m->kv_pos);
	for (int32_t i = 0; i < m->n_slots; i++)
		m->kv_tok[i] = m->kv_pos[i] = -1;
}

static void mock_deinit(struct mock *m)
{
	free(m->kv_tok);
	free(m->kv_pos);
}

/* Reads entry e's context through its block table. Returns mismatches against
 * r's recorded history (and with it the next token in *tok). */
static int mock_read_context(const struct mock *m, const struct qc_sched_plan *p, int32_t e,
			     const struct req *r, int32_t *tok)
{
	int32_t ctx[2 * MAX_REQ_TOKENS], n = p->ctx_lens[e], bad = 0;
	const int32_t *tab = p->block_tables + (size_t)e * (size_t)p->table_stride;
	/* the window's positions only, as attention reads them */
	for (int32_t pos = g_window > 0 && n > g_window ? n - g_window : 0; pos < n; pos++) {
		int32_t blk = tab[pos / p->block_tokens];
		if (blk < 0) {
			bad++;
			ctx[pos] = -1;
			continue;
		}
		int32_t slot = blk * p->block_tokens + pos % p->block_tokens;
		ctx[pos] = m->kv_tok[slot];
		bad += m->kv_pos[slot] != pos || (r && ctx[pos] != hist_at(r, pos));
	}
	*tok = next_token(ctx, n);
	return bad;
}

/* The forward. requests[e] is entry e's record (NULL once cancelled). Writes
 * sampled[e]; returns the number of inconsistencies found in the plan. */
static int mock_forward(struct mock *m, const struct qc_sched_plan *p, struct req **requests,
			int32_t *sampled)
{
	int bad = 0;
	/* copy-on-write of a forked group's partial block, before any write */
	for (int32_t k = 0; k < p->n_cow; k++)
		for (int32_t j = 0; j < p->cow_n_tokens[k]; j++) {
			int32_t from = p->cow_src[k] * p->block_tokens + j, to = p->cow_dst[k] * p->block_tokens + j;
			m->kv_tok[to] = m->kv_tok[from];
			m->kv_pos[to] = m->kv_pos[from];
		}
	for (int32_t e = 0; e < p->n_seqs; e++) {
		const int32_t *tab = p->block_tables + (size_t)e * (size_t)p->table_stride;
		int32_t t0 = p->tok_start[e], t1 = p->tok_start[e + 1];
		bad += t1 <= t0 || p->positions[t1 - 1] + 1 != p->ctx_lens[e];
		for (int32_t t = t0; t < t1; t++) {
			int32_t pos = p->positions[t];
			int32_t blk = tab[pos / p->block_tokens];
			bad += t > t0 && pos != p->positions[t - 1] + 1;
			bad += blk < 0 || p->slots[t] != blk * p->block_tokens + pos % p->block_tokens;
			bad += p->slots[t] < 0 || p->slots[t] >= m->n_slots;
			if (requests[e])
				bad += p->tokens[t] != hist_at(requests[e], pos);
			if (p->slots[t] >= 0 && p->slots[t] < m->n_slots) {
				m->kv_tok[p->slots[t]] = p->tokens[t];
				m->kv_pos[p->slots[t]] = pos;
			}
		}
	}
	for (int32_t e = 0; e < p->n_seqs; e++) {
		sampled[e] = -1;
		if (p->need_logits[e])
			bad += mock_read_context(m, p, e, requests[e], &sampled[e]);
	}
	return bad;
}

/* ---- invariant checker over the KV pool, from the public API only ---- */

static bool g_groups;        /* the run forks groups: choices share blocks */

/* tables[r] / nbs[r]: the live rows' block tables. Returns violations: a block
 * named twice (the scheduler never shares), refcounts that disagree, counts that
 * do not add up. */
static int check_tables(const struct qc_kv *kv, const int32_t *const *tables, const int32_t *nbs,
			const int32_t *firsts, int32_t n_rows)
{
	int32_t total = qc_kv_blocks_total(kv), distinct = 0, bad = 0;
	int32_t *seen = calloc((size_t)total, sizeof *seen);
	for (int32_t r = 0; r < n_rows; r++)
		for (int32_t j = 0; j < nbs[r]; j++) {
			int32_t b = tables[r][j];
			if (b == QC_KV_BLOCK_DROPPED && g_window > 0 && j < firsts[r])
				continue; /* released behind the window */
			if (b < 0 || b >= total) {
				bad++;
				continue;
			}
			distinct += seen[b] == 0;
			/* only prefix-cache blocks (full, never written again) are shared,
			   and with groups the prompt blocks of one group's choices */
			bad += ++seen[b] > 1 && !qc_kv_block_cached(kv, b) && !g_groups;
		}
	for (int32_t b = 0; b < total; b++)
		bad += qc_kv_block_refcount(kv, b) != seen[b];
	bad += distinct != qc_kv_blocks_used(kv);
	bad += qc_kv_blocks_used(kv) + qc_kv_blocks_free(kv) != total;
	free(seen);
	return bad;
}

static int check_kv_live(const struct qc_kv *kv)
{
	int32_t n = qc_kv_max_seqs(kv), k = 0;
	const int32_t **tables = calloc((size_t)n, sizeof *tables);
	int32_t *nbs = calloc((size_t)n, sizeof *nbs), *firsts = calloc((size_t)n, sizeof *firsts);
	for (int32_t r = 0; r < n; r++)
		if (qc_kv_seq_live(kv, r)) {
			tables[k] = qc_kv_seq_table(kv, r, &nbs[k]);
			firsts[k] = qc_kv_seq_first_block(kv, r);
			k++;
		}
	int bad = check_tables(kv, tables, nbs, firsts, k);
	free(tables);
	free(nbs);
	free(firsts);
	return bad;
}

static int32_t max_i32(int32_t a, int32_t b) { return a > b ? a : b; }

/* The most blocks any live row's table names (released columns not counted). */
static int32_t most_held(const struct qc_kv *kv)
{
	int32_t most = 0;
	for (int32_t r = 0; r < qc_kv_max_seqs(kv); r++)
		most = max_i32(most, qc_kv_seq_blocks_held(kv, r));
	return most;
}

/* ---- a driver shared by the runs ---- */

struct run {
	struct qc_kv *kv;
	struct qc_sched *s;
	struct qc_sched_config cfg;
	struct mock m;
	int bad_plan, bad_check, bad_kv;
	int mixed_steps;        /* steps that held a decode and a multi-token prefill */
	int32_t max_held_step;  /* most blocks one row held while a step wrote */
	int32_t max_held_commit; /* ... after a commit (the released ones gone) */
	long steps;
	struct req *admits[64]; /* entries starting at position 0, in plan order */
	int n_admits;
};

static bool g_prefix_cache;  /* run_open's pools keep a prefix cache */

static void run_open(struct run *rn, int32_t n_blocks, int32_t bt, int32_t max_tokens,
		     int32_t max_running, int32_t batch, int32_t prefill)
{
	struct qc_kv_config kc;
	struct qc_err err = { 0 };
	memset(rn, 0, sizeof *rn);
	qc_kv_config_init(&kc);
	kc.block_bytes = 4096;
	kc.budget_bytes = (uint64_t)n_blocks * 4096;
	kc.block_tokens = bt;
	kc.max_seqs = max_running;
	kc.max_seq_tokens = max_tokens;
	kc.prefix_cache = g_prefix_cache;
	kc.prefix_salt = 42;
	CHECK(qc_kv_new(&kc, &rn->kv, &err) == QC_OK, "kv: %s", err.msg);
	qc_sched_config_init(&rn->cfg);
	rn->cfg.max_running = max_running;
	rn->cfg.max_waiting = 4096;
	rn->cfg.max_batch_tokens = batch;
	rn->cfg.max_prefill_tokens = prefill;
	rn->cfg.window = g_window;
	CHECK(qc_sched_new(&rn->cfg, rn->kv, &rn->s, &err) == QC_OK, "sched: %s", err.msg);
	mock_init(&rn->m, rn->kv);
}

static void run_close(struct run *rn)
{
	qc_sched_free(rn->s);
	qc_kv_free(rn->kv);
	mock_deinit(&rn->m);
}

static int add_req(struct run *rn, struct req *r)
{
	struct qc_sched_request q = { 0 };
	struct qc_err err = { 0 };
	q.prompt = r->prompt;
	q.n_prompt = r->n_prompt;
	q.max_tokens = r->max_tokens;
	q.eos_id = r->eos;
	q.n_stop_ids = r->n_stop;
	memcpy(q.stop_ids, r->stop, sizeof r->stop);
	q.user = r;
	int rc = qc_sched_add(rn->s, &q, &r->id, &err);
	if (rc)
		fprintf(stderr, "  add: %s\n", err.msg);
	return rc;
}

/* Fork group parent r (plan entry e, its prompt complete) into its kids, each
 * starting with its given first token; a kid that token finishes is done at once. */
static void fork_kids(struct run *rn, const struct qc_sched_plan *p, int32_t e, struct req *r)
{
	struct qc_sched_child kids[4];
	struct qc_err err = { 0 };
	for (int k = 0; k < r->n_kids; k++)
		kids[k] = (struct qc_sched_child){ .first_token = r->kids[k]->first, .user = r->kids[k] };
	int rc = qc_sched_fork(rn->s, p, e, kids, r->n_kids, &err);
	CHECK(rc == QC_OK, "fork: %s", err.msg);
	r->forks++;
	for (int k = 0; k < r->n_kids && !rc; k++) {
		struct req *c = r->kids[k];
		c->id = kids[k].id;
		c->out[c->n_out++] = c->first;
		if (kids[k].finish != QC_SCHED_FINISH_NONE) {
			c->done = true;
			c->finish = kids[k].finish;
			rn->bad_plan += qc_sched_seq_live(rn->s, c->id);
		}
	}
}

/* One engine iteration. cancel_mid: a request to cancel between step and commit. */
static void run_step(struct run *rn, struct req *cancel_mid)
{
	struct qc_sched_plan *p;
	struct qc_err err = { 0 };
	struct req *reqs[64];
	int32_t sampled[64];

	int rc = qc_sched_step(rn->s, &p, &err);
	CHECK(rc == QC_OK, "step: %s", err.msg);
	if (rc)
		return;
	rn->steps++;
	rn->bad_plan += p->n_seqs > rn->cfg.max_running || p->n_tokens > rn->cfg.max_batch_tokens ||
			p->n_seqs > 64;
	if (p->n_seqs == 0 || p->n_seqs > 64)
		return;
	bool has_decode = false, has_prefill = false;
	for (int32_t e = 0; e < p->n_seqs; e++) {
		reqs[e] = qc_sched_seq_user(rn->s, p->seq_ids[e]);
		rn->bad_plan += reqs[e] == NULL;
		int32_t chunk = p->tok_start[e + 1] - p->tok_start[e];
		if (reqs[e] && p->positions[p->tok_start[e]] == 0 && rn->n_admits < 64)
			rn->admits[rn->n_admits++] = reqs[e];
		if (reqs[e]) {
			reqs[e]->n_entries++;
			if (chunk > reqs[e]->max_chunk)
				reqs[e]->max_chunk = chunk;
			has_decode |= chunk == 1 && p->positions[p->tok_start[e]] >= reqs[e]->n_prompt;
		}
		has_prefill |= chunk > 1;
	}
	rn->mixed_steps += has_decode && has_prefill;
	rn->max_held_step = max_i32(rn->max_held_step, most_held(rn->kv));
	if (cancel_mid) {
		CHECK(qc_sched_cancel(rn->s, cancel_mid->id, &err) == QC_OK, "cancel: %s", err.msg);
		cancel_mid->done = true;
		cancel_mid->finish = QC_SCHED_FINISH_CANCELLED;
		for (int32_t e = 0; e < p->n_seqs; e++)
			if (reqs[e] == cancel_mid)
				reqs[e] = NULL;
	}
	rn->bad_plan += mock_forward(&rn->m, p, reqs, sampled);
	for (int32_t e = 0; e < p->n_seqs; e++)
		if (reqs[e])
			reqs[e]->prefills += p->positions[p->tok_start[e]] == 0;
	for (int32_t e = 0; e < p->n_seqs; e++)
		if (reqs[e] && reqs[e]->n_kids > 0 && p->need_logits[e] && reqs[e]->n_out == 0)
			fork_kids(rn, p, e, reqs[e]);
	rn->bad_check += qc_sched_check(rn->s, NULL) != QC_OK;
	rc = qc_sched_commit(rn->s, p, sampled, &err);
	CHECK(rc == QC_OK, "commit: %s", err.msg);
	for (int32_t e = 0; e < p->n_seqs; e++) {
		struct req *r = reqs[e];
		if (!r) {
			rn->bad_plan += p->accepted[e] != 0;
			continue;
		}
		if (p->accepted[e]) {
			r->out[r->n_out++] = sampled[e];
			if (r->first_step == 0)
				r->first_step = rn->steps;
			else if (rn->steps - r->last_step > r->max_gap)
				r->max_gap = rn->steps - r->last_step;
			r->last_step = rn->steps;
		}
		if (p->finish[e] != QC_SCHED_FINISH_NONE) {
			r->done = true;
			r->finish = p->finish[e];
			rn->bad_plan += qc_sched_seq_live(rn->s, r->id);
		}
	}
	rn->bad_check += qc_sched_check(rn->s, NULL) != QC_OK;
	rn->bad_kv += check_kv_live(rn->kv);
	rn->max_held_commit = max_i32(rn->max_held_commit, most_held(rn->kv));
}

static void make_prompt(struct req *r, uint32_t seed, int32_t n)
{
	r->n_prompt = n;
	for (int32_t i = 0; i < n; i++)
		r->prompt[i] = (int32_t)((seed * 2654435761u + (uint32_t)i * 40503u) % V);
}

/* ---- tests ---- */

static void requests_match_solo_runs_under_preemption(void)
{
	enum { N = 20 };
	static struct req reqs[N];
	struct run rn;
	struct qc_sched_stats st;
	/* 24 blocks x 4 tokens = 96 slots, far less than the 20 requests need */
	run_open(&rn, 24, 4, 96, 6, 32, 16);
	memset(reqs, 0, sizeof reqs);
	for (int i = 0; i < N; i++) {
		struct req *r = &reqs[i];
		make_prompt(r, (uint32_t)i + 1, i == 3 ? 70 : 1 + (i * 37) % 45);
		r->max_tokens = i == 3 ? 20 : 5 + (i * 13) % 36;
		r->eos = i % 3 == 0 ? -1 : 0;
		r->n_stop = i % 4 == 1 ? 2 : 0;
		r->stop[0] = 7;
		r->stop[1] = 11;
	}
	/* staggered arrivals: 12 now, the rest while the first ones decode */
	for (int i = 0; i < 12; i++)
		CHECK(add_req(&rn, &reqs[i]) == QC_OK, "add %d", i);
	for (int step = 0; qc_sched_has_work(rn.s) && step < 5000; step++) {
		if (step == 5)
			for (int i = 12; i < N; i++)
				CHECK(add_req(&rn, &reqs[i]) == QC_OK, "add %d", i);
		run_step(&rn, NULL);
	}
	qc_sched_get_stats(rn.s, &st);
	CHECK(!qc_sched_has_work(rn.s), "did not drain in 5000 steps");
	CHECK(st.n_preemptions > 0, "pool too small yet no preemption");
	CHECK(st.n_finished == N && st.n_failed == 0, "finished %llu failed %llu",
	      (unsigned long long)st.n_finished, (unsigned long long)st.n_failed);
	CHECK(st.blocks_used == 0 && st.blocks_free == 24, "blocks leaked: %d used", st.blocks_used);
	CHECK(rn.bad_plan == 0 && rn.bad_check == 0 && rn.bad_kv == 0,
	      "plan %d, sched check %d, kv %d inconsistencies", rn.bad_plan, rn.bad_check, rn.bad_kv);
	CHECK(rn.mixed_steps > 0, "chunked prefill never shared a step with a decode");
	CHECK(reqs[3].max_chunk <= 16 && reqs[3].n_entries >= 5 + reqs[3].n_out - 1,
	      "70-token prompt not chunked: max chunk %d over %d entries", reqs[3].max_chunk,
	      reqs[3].n_entries);
	int mism = 0, n_stop = 0;
	for (int i = 0; i < N; i++) {
		mism += !reqs[i].done || compare_with_ref(&reqs[i], false);
		n_stop += reqs[i].finish == QC_SCHED_FINISH_STOP;
	}
	CHECK(mism == 0, "%d requests differ from their solo run", mism);
	CHECK(n_stop > 0 && n_stop < N, "finish mix too uniform: %d stops", n_stop);
	printf("  20 requests: %ld steps, %llu preemptions, %d mixed steps\n", rn.steps,
	       (unsigned long long)st.n_preemptions, rn.mixed_steps);

	/* the comparator must reject a reordered output */
	struct req bad = reqs[0];
	if (bad.n_out >= 2) {
		int32_t t = bad.out[0];
		bad.out[0] = bad.out[1];
		bad.out[1] = t;
		if (bad.out[0] == bad.out[1])
			bad.out[0] = (bad.out[0] + 1) % V;
	} else {
		bad.n_out++;
	}
	CHECK(compare_with_ref(&bad, false) != 0, "reordered output passed the comparator");
	run_close(&rn);

	/* and through the scheduler alone with a roomy pool, the same outputs */
	int mism_alone = 0;
	for (int i = 0; i < N; i += 3) {
		struct req solo = reqs[i];
		solo.n_out = 0;
		solo.done = false;
		run_open(&rn, 64, 4, 256, 1, 32, 16);
		add_req(&rn, &solo);
		for (int step = 0; qc_sched_has_work(rn.s) && step < 1000; step++)
			run_step(&rn, NULL);
		mism_alone += solo.n_out != reqs[i].n_out ||
			      memcmp(solo.out, reqs[i].out, (size_t)solo.n_out * sizeof solo.out[0]);
		run_close(&rn);
	}
	CHECK(mism_alone == 0, "%d requests differ from a solo scheduler run", mism_alone);
}

static void lone_sequence_too_big_fails_instead_of_spinning(void)
{
	struct run rn;
	struct qc_err err = { 0 };
	struct req big = { 0 }, small = { 0 };
	struct qc_sched_stats st;
	run_open(&rn, 4, 4, 64, 2, 32, 32);      /* 16 KV tokens, 64-token context */
	make_prompt(&big, 99, 10);
	big.max_tokens = 40;
	big.eos = -1;
	make_prompt(&small, 5, 3);
	small.max_tokens = 4;
	small.eos = -1;
	CHECK(add_req(&rn, &big) == QC_OK && add_req(&rn, &small) == QC_OK, "adds");
	uint64_t failed = 0;
	int step;
	for (step = 0; qc_sched_has_work(rn.s) && step < 200; step++) {
		struct qc_sched_plan *p;
		int32_t sampled[8];
		struct req *reqs[8];
		CHECK(qc_sched_step(rn.s, &p, &err) == QC_OK, "step: %s", err.msg);
		if (p->n_failed) {
			failed = p->failed_ids[0];
			CHECK(p->n_failed == 1, "%d failures in one step", p->n_failed);
		}
		if (p->n_seqs == 0)
			continue;
		for (int32_t e = 0; e < p->n_seqs; e++)
			reqs[e] = qc_sched_seq_user(rn.s, p->seq_ids[e]);
		rn.bad_plan += mock_forward(&rn.m, p, reqs, sampled);
		CHECK(qc_sched_commit(rn.s, p, sampled, &err) == QC_OK, "commit: %s", err.msg);
		for (int32_t e = 0; e < p->n_seqs; e++) {
			if (p->accepted[e])
				reqs[e]->out[reqs[e]->n_out++] = sampled[e];
			if (p->finish[e])
				reqs[e]->finish = p->finish[e];
		}
	}
	qc_sched_get_stats(rn.s, &st);
	CHECK(step < 200 && !qc_sched_has_work(rn.s), "spun for %d steps", step);
	CHECK(failed == big.id && st.n_failed == 1, "big request not failed (failed id %llx)",
	      (unsigned long long)failed);
	/* 16 KV slots: prompt 10 + 6 fed generated tokens, the 7th cannot be fed */
	CHECK(big.n_out == 7, "big generated %d tokens before failing", big.n_out);
	CHECK(!qc_sched_seq_live(rn.s, big.id), "failed request still live");
	CHECK(small.finish == QC_SCHED_FINISH_LENGTH && compare_with_ref(&small, false) == 0,
	      "the request queued behind it did not complete correctly");
	CHECK(st.blocks_used == 0 && rn.bad_plan == 0, "leak %d / plan %d", st.blocks_used, rn.bad_plan);
	CHECK(strcmp(qc_sched_finish_name(QC_SCHED_FINISH_NO_MEMORY), "no_memory") == 0, "name");
	run_close(&rn);
}

/* A preempted request goes back to the front of the waiting queue: it was
 * admitted before anything still waiting, so it is re-admitted first. */
static void preempted_request_is_readmitted_before_later_arrivals(void)
{
	struct run rn;
	struct qc_sched_stats st;
	struct req a = { 0 }, b = { 0 }, c = { 0 };
	run_open(&rn, 6, 4, 64, 2, 64, 64);      /* 24 KV tokens, 2 running */
	make_prompt(&a, 11, 8);
	a.max_tokens = 14;                       /* alone it needs all 6 blocks */
	make_prompt(&b, 12, 4);
	b.max_tokens = 10;
	make_prompt(&c, 13, 4);
	c.max_tokens = 2;
	a.eos = b.eos = c.eos = -1;
	add_req(&rn, &a);
	add_req(&rn, &b);
	add_req(&rn, &c);
	while (qc_sched_has_work(rn.s) && rn.steps < 200)
		run_step(&rn, NULL);
	qc_sched_get_stats(rn.s, &st);
	CHECK(st.n_preemptions == 1, "expected exactly b preempted once, got %llu",
	      (unsigned long long)st.n_preemptions);
	CHECK(rn.n_admits == 4 && rn.admits[0] == &a && rn.admits[1] == &b &&
	      rn.admits[2] == &b && rn.admits[3] == &c,
	      "admission order wrong (%d admissions): want a b b c", rn.n_admits);
	CHECK(compare_with_ref(&a, false) == 0 && compare_with_ref(&b, false) == 0 &&
	      compare_with_ref(&c, false) == 0, "outputs differ from solo runs");
	CHECK(rn.bad_plan == 0 && rn.bad_check == 0 && rn.bad_kv == 0, "inconsistencies");
	run_close(&rn);
}

static void add_and_misuse_are_rejected(void)
{
	struct run rn;
	struct qc_err err = { 0 };
	struct qc_sched_request q = { 0 };
	struct qc_sched_plan *p;
	int32_t prompt[80] = { 0 };
	uint64_t id, id2;
	run_open(&rn, 8, 4, 32, 2, 16, 8);        /* 32 KV tokens, 32-token context */
	q.prompt = prompt;
	q.max_tokens = 4;
	q.eos_id = -1;
	q.n_prompt = 0;
	CHECK(qc_sched_add(rn.s, &q, &id, &err) == QC_EINVAL && id == 0, "empty prompt");
	q.n_prompt = 30;
	CHECK(qc_sched_add(rn.s, &q, &id, &err) == QC_ERANGE, "30 + 4 tokens > 32 context: %s",
	      err.msg);
	q.n_prompt = 4;
	q.max_tokens = 0;
	CHECK(qc_sched_add(rn.s, &q, &id, &err) == QC_EINVAL, "max_tokens 0");
	q.max_tokens = 4;
	q.n_stop_ids = QC_SCHED_MAX_STOP_IDS + 1;
	CHECK(qc_sched_add(rn.s, &q, &id, &err) == QC_EINVAL, "too many stop ids");
	q.n_stop_ids = 0;
	prompt[2] = -5;
	CHECK(qc_sched_add(rn.s, &q, &id, &err) == QC_EINVAL, "negative token");
	prompt[2] = 3;
	CHECK(!qc_sched_has_work(rn.s), "refused adds left work behind");
	CHECK(qc_sched_step(rn.s, &p, &err) == QC_OK && p->n_seqs == 0, "empty step");
	CHECK(qc_sched_commit(rn.s, p, NULL, &err) == QC_OK, "empty plan commit is a no-op");
	CHECK(qc_sched_add(rn.s, &q, &id, &err) == QC_OK && id != 0, "valid add: %s", err.msg);
	CHECK(qc_sched_add(rn.s, &q, &id2, &err) == QC_OK && id2 != id, "second add");
	CHECK(qc_sched_commit(rn.s, NULL, NULL, &err) == QC_EINVAL, "commit before step");
	CHECK(qc_sched_step(rn.s, &p, &err) == QC_OK && p->n_seqs == 2, "step");
	CHECK(qc_sched_step(rn.s, &p, &err) == QC_EINVAL && !p, "second step without commit");
	CHECK(qc_sched_step(rn.s, &p, &err) == QC_EINVAL, "still pending");
	qc_sched_cancel(rn.s, id, &err);
	CHECK(qc_sched_cancel(rn.s, id, &err) == QC_ENOTFOUND, "double cancel");
	CHECK(qc_sched_finish(rn.s, id2, QC_SCHED_FINISH_NONE, &err) == QC_EINVAL, "finish NONE");
	CHECK(qc_sched_finish(rn.s, id2, QC_SCHED_FINISH_STOP_STRING, &err) == QC_OK, "stop string");
	CHECK(qc_kv_blocks_used(rn.kv) == 0, "cancel/finish did not free blocks at once: %d used",
	      qc_kv_blocks_used(rn.kv));
	CHECK(qc_sched_check(rn.s, &err) == QC_OK, "check: %s", err.msg);
	run_close(&rn);

	/* waiting queue cap and kv sharing with another user are refused */
	struct qc_kv_config kc;
	struct qc_kv *kv;
	struct qc_sched *s;
	struct qc_sched_config sc;
	int32_t row;
	qc_kv_config_init(&kc);
	kc.block_bytes = 1;
	kc.budget_bytes = 8;
	kc.block_tokens = 4;
	kc.max_seqs = 2;
	CHECK(qc_kv_new(&kc, &kv, &err) == QC_OK, "kv");
	qc_sched_config_init(&sc);
	sc.max_running = 3;
	CHECK(qc_sched_new(&sc, kv, &s, &err) == QC_EINVAL && !s, "max_running > kv rows");
	sc.max_running = 2;
	sc.max_waiting = 1;
	qc_kv_seq_new(kv, &row, &err);
	CHECK(qc_sched_new(&sc, kv, &s, &err) == QC_EINVAL, "kv already in use");
	qc_kv_seq_free(kv, row);
	CHECK(qc_sched_new(&sc, kv, &s, &err) == QC_OK, "new: %s", err.msg);
	q.n_prompt = 4;
	CHECK(qc_sched_add(s, &q, &id, &err) == QC_OK, "first add");
	CHECK(qc_sched_add(s, &q, &id, &err) == QC_ERANGE, "waiting queue of 1 took 2");
	q.n_prompt = 40;     /* fits the 4096-token context, not the 8-block pool */
	q.max_tokens = 1;
	CHECK(qc_sched_add(s, &q, &id, &err) == QC_ERANGE && strstr(err.msg, "pool"),
	      "prompt larger than the pool: %s", err.msg);
	qc_sched_free(s);
	qc_kv_free(kv);
	qc_sched_free(NULL);
}

static void cancel_between_step_and_commit_drops_only_that_request(void)
{
	struct run rn;
	struct req a = { 0 }, b = { 0 };
	run_open(&rn, 32, 4, 64, 4, 32, 32);
	make_prompt(&a, 1, 9);
	make_prompt(&b, 2, 5);
	a.max_tokens = b.max_tokens = 12;
	a.eos = b.eos = -1;
	add_req(&rn, &a);
	add_req(&rn, &b);
	run_step(&rn, NULL);
	run_step(&rn, NULL);
	int32_t used_before = qc_kv_blocks_used(rn.kv);
	run_step(&rn, &a);     /* a cancelled after step, before commit */
	CHECK(qc_kv_blocks_used(rn.kv) < used_before, "cancelled blocks not freed");
	CHECK(!qc_sched_seq_live(rn.s, a.id), "cancelled request still live");
	while (qc_sched_has_work(rn.s) && rn.steps < 100)
		run_step(&rn, NULL);
	CHECK(compare_with_ref(&a, true) == 0 && a.n_out == 2, "cancelled output %d tokens", a.n_out);
	CHECK(b.done && compare_with_ref(&b, false) == 0, "neighbour of a cancel diverged");
	CHECK(rn.bad_plan == 0 && rn.bad_check == 0 && rn.bad_kv == 0, "inconsistencies %d %d %d",
	      rn.bad_plan, rn.bad_check, rn.bad_kv);
	CHECK(qc_kv_blocks_used(rn.kv) == 0, "leak");
	run_close(&rn);
}

/* The harness's own checkers must trip on wrong inputs. */
static void checkers_trip_on_wrong_inputs(void)
{
	struct run rn;
	struct req a = { 0 };
	run_open(&rn, 16, 4, 64, 2, 32, 32);
	make_prompt(&a, 3, 10);
	a.max_tokens = 8;
	a.eos = -1;
	add_req(&rn, &a);
	run_step(&rn, NULL);
	CHECK(check_kv_live(rn.kv) == 0, "clean pool fails the table checker");

	int32_t nb;
	const int32_t *t = qc_kv_seq_table(rn.kv, 0, &nb);
	const int32_t *dup_tables[2] = { t, t };
	int32_t dup_nbs[2] = { nb, nb };
	const int32_t no_release[2] = { 0, 0 };
	CHECK(check_tables(rn.kv, dup_tables, dup_nbs, no_release, 2) > 0, "block in two tables not flagged");
	const int32_t *missing[1] = { t };
	int32_t short_nb[1] = { nb - 1 };
	CHECK(check_tables(rn.kv, missing, short_nb, no_release, 1) > 0, "refcount without a table not flagged");

	/* the mock's context read must notice a clobbered slot */
	struct qc_sched_plan *p;
	struct qc_err err = { 0 };
	int32_t sampled[2], tok;
	struct req *reqs[2];
	CHECK(qc_sched_step(rn.s, &p, &err) == QC_OK && p->n_seqs == 1, "step");
	reqs[0] = &a;
	CHECK(mock_forward(&rn.m, p, reqs, sampled) == 0, "clean forward flagged");
	int32_t slot0 = p->block_tables[0] * p->block_tokens;
	rn.m.kv_tok[slot0] ^= 1;
	CHECK(mock_read_context(&rn.m, p, 0, &a, &tok) > 0, "clobbered K/V not detected");
	rn.m.kv_tok[slot0] ^= 1;
	p->slots[0] += 1;      /* a plan whose slot disagrees with its table */
	CHECK(mock_forward(&rn.m, p, reqs, sampled) > 0, "bad slot mapping not detected");
	p->slots[0] -= 1;
	CHECK(mock_forward(&rn.m, p, reqs, sampled) == 0, "restored plan flagged");
	CHECK(qc_sched_commit(rn.s, p, sampled, &err) == QC_OK, "commit");
	a.out[a.n_out++] = sampled[0];
	run_close(&rn);
}

/* Prefix cache, step by step: b shares a's first 20 tokens (2.5 blocks of 8) and
 * is admitted after a's prefill committed: it must feed from position 16 (the
 * partial third block is never shared), read a's cached K/V (the mock checks
 * every context token), and c, a's exact prompt of 24 (3 full blocks), must
 * still feed its last block: one token at least is fed for its logits. */
static void prefix_hits_feed_only_the_rest(void)
{
	struct run rn;
	struct req a = { 0 }, b = { 0 }, c = { 0 };
	g_prefix_cache = true;
	run_open(&rn, 32, 8, 128, 4, 64, 64);
	g_prefix_cache = false;
	make_prompt(&a, 11, 24);
	a.max_tokens = 3;
	a.eos = -1;
	b = a;
	make_prompt(&b, 12, 30);
	memcpy(b.prompt, a.prompt, 20 * sizeof *b.prompt);
	c = a;
	add_req(&rn, &a);
	run_step(&rn, NULL);                  /* a prefilled whole */
	add_req(&rn, &b);
	add_req(&rn, &c);
	rn.n_admits = 0;
	struct qc_sched_plan *p;
	struct qc_err err = { 0 };
	CHECK(qc_sched_step(rn.s, &p, &err) == QC_OK && p->n_seqs == 3, "step: %s", err.msg);
	CHECK(p->positions[p->tok_start[1]] == 16 && p->tok_start[2] - p->tok_start[1] == 14 &&
	      p->ctx_lens[1] == 30, "b fed from %d (%d tokens), want 16 (14)",
	      p->positions[p->tok_start[1]], p->tok_start[2] - p->tok_start[1]);
	CHECK(p->positions[p->tok_start[2]] == 16 && p->tok_start[3] - p->tok_start[2] == 8,
	      "c fed from %d, want 16 (its last full block is fed, not shared)",
	      p->positions[p->tok_start[2]]);
	struct req *reqs[3] = { &a, &b, &c };
	int32_t sampled[3];
	CHECK(mock_forward(&rn.m, p, reqs, sampled) == 0, "hit entries read wrong K/V");
	CHECK(qc_sched_check(rn.s, &err) == QC_OK, "check: %s", err.msg);
	/* the plan checker must trip on a plan that writes a cached block */
	int32_t saved = p->slots[p->tok_start[1]];
	int32_t nb;
	const int32_t *ta = qc_kv_seq_table(rn.kv, 0, &nb);
	p->slots[p->tok_start[1]] = ta[0] * 8;
	CHECK(qc_sched_check(rn.s, &err) == QC_EFORMAT, "write into a cached block not flagged");
	p->slots[p->tok_start[1]] = saved;
	CHECK(qc_sched_commit(rn.s, p, sampled, &err) == QC_OK, "commit: %s", err.msg);
	for (int i = 0; i < 3; i++)
		reqs[i]->out[reqs[i]->n_out++] = sampled[i];
	while (qc_sched_has_work(rn.s) && rn.steps < 100)
		run_step(&rn, NULL);
	struct qc_sched_stats st;
	qc_sched_get_stats(rn.s, &st);
	CHECK(st.prefix_hit_tokens == 32 && st.prefix_queried_tokens == 24 + 30 + 24,
	      "stats: %llu hit of %llu", (unsigned long long)st.prefix_hit_tokens,
	      (unsigned long long)st.prefix_queried_tokens);
	CHECK(compare_with_ref(&a, false) == 0 && compare_with_ref(&b, false) == 0 &&
	      compare_with_ref(&c, false) == 0, "outputs with cache hits differ from solo runs");
	CHECK(rn.bad_plan == 0 && rn.bad_check == 0, "inconsistencies %d %d", rn.bad_plan, rn.bad_check);
	run_close(&rn);
}

/* Fair chunked prefill, in steps: a 200-token prompt prefilled at 32 tokens a
 * step; a running stream older than it and one admitted during it get a token
 * every step, and a 5-token request arriving mid-prefill gets its first token
 * within two steps of arriving, while the long prompt is still prefilling. */
static void long_prefill_does_not_stall_others(void)
{
	struct run rn;
	struct req old = { 0 }, big = { 0 }, small = { 0 };
	run_open(&rn, 64, 8, 256, 4, 64, 32);
	make_prompt(&old, 21, 4);
	old.max_tokens = 40;
	old.eos = -1;
	make_prompt(&big, 22, 200);
	big.max_tokens = 2;
	big.eos = -1;
	make_prompt(&small, 23, 5);
	small.max_tokens = 20;
	small.eos = -1;
	add_req(&rn, &old);
	run_step(&rn, NULL);
	add_req(&rn, &big);
	run_step(&rn, NULL);
	run_step(&rn, NULL);
	long arrive = rn.steps;
	add_req(&rn, &small);
	while (qc_sched_has_work(rn.s) && rn.steps < 200)
		run_step(&rn, NULL);
	CHECK(small.first_step > 0 && small.first_step - arrive <= 2,
	      "5-token request arrived after step %ld, first token at step %ld", arrive,
	      small.first_step);
	CHECK(big.first_step > small.first_step + 3, "the long prefill (first token at %ld) was "
	      "not still running while small decoded: test is vacuous", big.first_step);
	CHECK(old.max_gap <= 1 && small.max_gap <= 1, "a decoding stream waited %ld / %ld steps",
	      old.max_gap, small.max_gap);
	CHECK(big.max_chunk <= 32, "chunk %d above the budget", big.max_chunk);
	CHECK(compare_with_ref(&old, false) == 0 && compare_with_ref(&big, false) == 0 &&
	      compare_with_ref(&small, false) == 0, "outputs differ from solo runs");
	CHECK(rn.bad_plan == 0 && rn.bad_check == 0, "inconsistencies %d %d", rn.bad_plan, rn.bad_check);
	run_close(&rn);
}

static uint64_t rs = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (uint32_t)(rs % n);
}

static int count_unfinished(const struct req *reqs, int n)
{
	int k = 0;
	for (int i = 0; i < n; i++)
		k += !reqs[i].done;
	return k;
}

/* Prompts from 3 families sharing up to 40 leading tokens, the rest own:
 * prefix-cache hits, partial-block hits and evictions on a 40-block pool. */
static void shared_prompt(struct req *r, uint32_t seed, int32_t n)
{
	make_prompt(r, seed, n);
	int32_t shared = (int32_t)rnd(41);
	uint32_t fam = rnd(3);
	for (int32_t i = 0; i < shared && i < n; i++)
		r->prompt[i] = (int32_t)((fam * 977u + (uint32_t)i * 131u) % V);
}

static void randomized_stress_keeps_invariants(bool cache)
{
	enum { MAXR = 3000, ARRIVE_STEPS = 6000 };
	struct req *reqs = calloc(MAXR, sizeof *reqs);
	struct run rn;
	struct qc_sched_stats st;
	struct qc_err err = { 0 };
	int n_req = 0, n_cancel = 0, n_stopstr = 0, refused = 0;
	/* 40 blocks x 8 tokens; prompts up to 90, context 160; with a window a
	 * row holds at most 7, so 16 blocks keep preemption going */
	g_prefix_cache = cache;
	run_open(&rn, g_window ? 16 : 40, 8, 160, 8, 48, 24);
	g_prefix_cache = false;
	for (long step = 0; step < 40000; step++) {
		if (step < ARRIVE_STEPS) {
			int arrivals = rnd(100) < 30 ? 1 + (int)rnd(2) : 0;
			for (int k = 0; k < arrivals && n_req < MAXR; k++) {
				struct req *r = &reqs[n_req];
				if (cache)
					shared_prompt(r, (uint32_t)n_req * 7 + 3, 1 + (int32_t)rnd(90));
				else
					make_prompt(r, (uint32_t)n_req * 7 + 3, 1 + (int32_t)rnd(90));
				r->max_tokens = 1 + (int32_t)rnd(60);
				r->eos = rnd(2) ? 0 : -1;
				r->n_stop = rnd(3) == 0 ? 2 : 0;
				r->stop[0] = (int32_t)rnd(V);
				r->stop[1] = (int32_t)rnd(V);
				if (add_req(&rn, r) == QC_OK)
					n_req++;
				else
					refused++;
			}
		} else if (!qc_sched_has_work(rn.s)) {
			break;
		}
		struct req *victim = NULL;
		if (n_req > 0 && rnd(100) < 4) {
			struct req *r = &reqs[rnd((uint32_t)n_req)];
			if (!r->done && qc_sched_seq_live(rn.s, r->id)) {
				if (rnd(2)) {
					victim = r;    /* cancelled between step and commit */
				} else if (rnd(2)) {
					CHECK(qc_sched_cancel(rn.s, r->id, &err) == QC_OK, "cancel");
					r->done = true;
					r->finish = QC_SCHED_FINISH_CANCELLED;
				} else {
					CHECK(qc_sched_finish(rn.s, r->id, QC_SCHED_FINISH_STOP_STRING,
							      &err) == QC_OK, "finish");
					r->done = true;
					r->finish = QC_SCHED_FINISH_STOP_STRING;
					n_stopstr++;
				}
				n_cancel++;
			}
		}
		run_step(&rn, victim);
		if (victim && !victim->done) {
			/* it was not in this plan: cancel now */
			qc_sched_cancel(rn.s, victim->id, &err);
			victim->done = true;
			victim->finish = QC_SCHED_FINISH_CANCELLED;
		}
	}
	qc_sched_get_stats(rn.s, &st);
	int unfinished = count_unfinished(reqs, n_req), mism = 0;
	for (int i = 0; i < n_req; i++) {
		struct req *r = &reqs[i];
		bool cut = r->finish == QC_SCHED_FINISH_CANCELLED ||
			   r->finish == QC_SCHED_FINISH_STOP_STRING;
		mism += compare_with_ref(r, cut);
	}
	CHECK(n_req > 1000, "only %d requests arrived", n_req);
	CHECK(unfinished == 0 && !qc_sched_has_work(rn.s), "%d requests never finished", unfinished);
	CHECK(mism == 0, "%d outputs reordered, dropped or wrong", mism);
	CHECK(rn.bad_plan == 0 && rn.bad_check == 0 && rn.bad_kv == 0,
	      "plan %d, sched check %d, kv %d inconsistencies", rn.bad_plan, rn.bad_check, rn.bad_kv);
	CHECK(st.n_preemptions > 10, "stress run never preempted (%llu)",
	      (unsigned long long)st.n_preemptions);
	CHECK(st.blocks_used == 0 && st.n_running == 0 && st.n_waiting == 0, "leftovers");
	CHECK(st.blocks_free == st.blocks_total, "%d of %d blocks free at the end", st.blocks_free,
	      st.blocks_total);
	CHECK(st.n_failed == 0, "%llu failures with prompts that fit", (unsigned long long)st.n_failed);
	/* kv_blocks.h's bound, worked out for 8-token blocks and chunks of 24:
	 * after a commit positions n - W + 1 .. n - 1 are held, ceil((W - 2) / 8) + 1
	 * blocks; while a step writes a chunk, ceil((W + 24 - 2) / 8) + 1 (a cache
	 * hit holds its attached blocks until its first forward) */
	if (g_window > 0)
		CHECK(rn.max_held_commit <= (g_window - 2 + 7) / 8 + 1 &&
		      (cache || rn.max_held_step <= (g_window + 24 - 2 + 7) / 8 + 1),
		      "window %d: a row held %d blocks after a commit, %d in a step", g_window,
		      rn.max_held_commit, rn.max_held_step);
	else
		CHECK(rn.max_held_commit >= 12, "no window, yet no row held more than %d blocks",
		      rn.max_held_commit);
	if (cache)
		/* a third of the queried tokens is a shared prefix on average; the
		 * whole-block rule and evictions take some of it (more of it on the
		 * windowed run's 16-block pool) */
		CHECK(st.prefix_hit_tokens * (g_window ? 20 : 10) > st.prefix_queried_tokens && st.blocks_cached > 0 &&
		      st.blocks_cached <= st.blocks_total,
		      "prefix cache: %llu of %llu tokens hit, %d blocks cached",
		      (unsigned long long)st.prefix_hit_tokens, (unsigned long long)st.prefix_queried_tokens,
		      st.blocks_cached);
	else
		CHECK(st.prefix_hit_tokens == 0 && st.blocks_cached == 0, "cache off but hits");
	printf("  stress%s%s: %d requests, %ld steps, %llu preemptions, %d cancels (%d stop strings), "
	       "%d refused, %llu of %llu prompt tokens from the cache, at most %d blocks a row\n", cache ? " (prefix cache)" : "",
	       g_window ? " (window 20)" : "",
	       n_req, rn.steps, (unsigned long long)st.n_preemptions, n_cancel, n_stopstr, refused,
	       (unsigned long long)st.prefix_hit_tokens, (unsigned long long)st.prefix_queried_tokens,
	       rn.max_held_step);

	/* the completion checker must notice a request left unfinished */
	reqs[0].done = false;
	CHECK(count_unfinished(reqs, n_req) == 1, "unfinished request not flagged");
	run_close(&rn);
	free(reqs);
}

/* ---- groups: qc_sched_fork's edge cases ---- */

static int add_group(struct run *rn, struct req *r, int32_t n_choices)
{
	struct qc_sched_request q = { 0 };
	struct qc_err err = { 0 };
	q.prompt = r->prompt;
	q.n_prompt = r->n_prompt;
	q.max_tokens = r->max_tokens;
	q.eos_id = r->eos;
	q.n_stop_ids = r->n_stop;
	memcpy(q.stop_ids, r->stop, sizeof r->stop);
	q.user = r;
	int rc = qc_sched_add_group(rn->s, &q, n_choices, &r->id, &err);
	if (rc)
		fprintf(stderr, "  add_group: %s\n", err.msg);
	return rc;
}

/* Make kids[0..n) the other choices of group r: its prompt and limits, choice k
 * starting with firsts[k]. */
static void make_kids(struct req *r, struct req *kids, int n, const int32_t *firsts)
{
	for (int k = 0; k < n; k++) {
		kids[k] = *r;
		kids[k].n_kids = 0;
		kids[k].forced = true;
		kids[k].first = firsts[k];
		r->kids[k] = &kids[k];
	}
	r->n_kids = n;
}

static void drain(struct run *rn, long max_steps)
{
	while (qc_sched_has_work(rn->s) && rn->steps < max_steps)
		run_step(rn, NULL);
	CHECK(!qc_sched_has_work(rn->s), "did not drain in %ld steps", max_steps);
}

/* The end of a group test: the scheduler, plan and kv checks held at every step,
 * no block is left, and the run is closed with groups switched back off. */
static void group_run_end(struct run *rn)
{
	CHECK(rn->bad_plan == 0 && rn->bad_check == 0 && rn->bad_kv == 0, "inconsistencies %d %d %d",
	      rn->bad_plan, rn->bad_check, rn->bad_kv);
	CHECK(qc_kv_blocks_used(rn->kv) == 0, "leak: %d blocks", qc_kv_blocks_used(rn->kv));
	run_close(rn);
	g_groups = false;
}

/* A choice whose first token is eos (or whose max_tokens is 1) is retired by the
 * fork itself: its references to the prompt's blocks are dropped at once, so
 * after that step the blocks are held by the parent and the live choice only. */
static void fork_choice_finished_by_first_token_is_retired_at_once(void)
{
	struct run rn;
	struct req g = { 0 }, kids[2], one = { 0 }, one_kid[1];
	g_groups = true;
	run_open(&rn, 32, 4, 64, 5, 32, 32);   /* 5 rows: both groups at once */
	make_prompt(&g, 21, 10);
	g.max_tokens = 6;
	int32_t t0 = next_token(g.prompt, g.n_prompt);  /* the parent's own first token */
	g.eos = (t0 + 1) % V;
	const int32_t firsts[2] = { g.eos, (t0 + 2) % V };
	make_kids(&g, kids, 2, firsts);
	make_prompt(&one, 22, 5);
	one.max_tokens = 1;
	one.eos = -1;
	const int32_t one_first[1] = { 3 };
	make_kids(&one, one_kid, 1, one_first);
	CHECK(add_group(&rn, &g, 3) == QC_OK && add_group(&rn, &one, 2) == QC_OK, "add groups");
	run_step(&rn, NULL);   /* both prompts whole: fork, commit */
	CHECK(g.forks == 1 && kids[0].done && kids[0].finish == QC_SCHED_FINISH_STOP &&
	      !qc_sched_seq_live(rn.s, kids[0].id) && kids[0].n_out == 1,
	      "eos choice: done %d finish %d", kids[0].done, kids[0].finish);
	CHECK(!kids[1].done && qc_sched_seq_live(rn.s, kids[1].id), "the other choice is not running");
	CHECK(one_kid[0].done && one_kid[0].finish == QC_SCHED_FINISH_LENGTH && one.done &&
	      one.finish == QC_SCHED_FINISH_LENGTH, "max_tokens 1: choice finish %d, parent %d",
	      one_kid[0].finish, one.finish);
	const struct seq *q = lookup(rn.s, g.id);
	int32_t nb = 0, refs2 = 0;
	const int32_t *tab = q ? qc_kv_seq_table(rn.kv, q->kv_seq, &nb) : NULL;
	for (int32_t j = 0; j < nb; j++)
		refs2 += qc_kv_block_refcount(rn.kv, tab[j]) == 2;
	/* 10 prompt tokens: blocks 0, 1 shared by parent and live choice; the third
	   (partial) is copied on the choice's first write, which has not happened yet */
	CHECK(nb == 3 && refs2 == 3, "prompt blocks: %d, %d with refcount 2 (want 3 and 3)", nb, refs2);
	CHECK(qc_kv_blocks_used(rn.kv) == 3, "%d blocks used after the step, want the group's 3",
	      qc_kv_blocks_used(rn.kv));
	drain(&rn, 200);
	CHECK(compare_with_ref(&g, false) == 0 && compare_with_ref(&kids[0], false) == 0 &&
	      compare_with_ref(&kids[1], false) == 0 && compare_with_ref(&one, false) == 0 &&
	      compare_with_ref(&one_kid[0], false) == 0, "a choice differs from its solo reference");
	group_run_end(&rn);
}

/* A group preempted during its chunked prefill (an older decode needs the
 * blocks) goes back to waiting with its reservation returned, is re-prefilled
 * once the pool has room, and forks exactly once, with every output unchanged.
 * 12 blocks of 4: a (20 prompt + 20) takes a block every 4 steps while g (18
 * prompt, 2 a step, admitted with a's 6 blocks taken) takes one every 2; in g's
 * 9th step, the one completing its prompt, they need 13. */
static void group_preempted_before_fork_forks_once(void)
{
	struct run rn;
	struct req a = { 0 }, g = { 0 }, kids[1];
	struct qc_sched_stats st;
	g_groups = true;
	run_open(&rn, 12, 4, 64, 4, 32, 2);
	make_prompt(&a, 31, 20);
	a.max_tokens = 20;
	a.eos = -1;
	make_prompt(&g, 32, 18);
	g.max_tokens = 6;
	g.eos = -1;
	const int32_t firsts[1] = { 5 };
	make_kids(&g, kids, 1, firsts);
	add_req(&rn, &a);
	while (a.n_out == 0 && rn.steps < 50)
		run_step(&rn, NULL);
	CHECK(add_group(&rn, &g, 2) == QC_OK, "add group");
	drain(&rn, 500);
	qc_sched_get_stats(rn.s, &st);
	CHECK(st.n_preemptions >= 1 && g.prefills >= 2, "group not preempted before its fork: %llu preemptions, "
	      "%d prefills from 0", (unsigned long long)st.n_preemptions, g.prefills);
	CHECK(g.forks == 1, "group forked %d times", g.forks);
	CHECK(compare_with_ref(&a, false) == 0 && compare_with_ref(&g, false) == 0 &&
	      compare_with_ref(&kids[0], false) == 0, "outputs changed by the preemption");
	group_run_end(&rn);
}

/* A group cancelled mid-prefill frees its blocks and gives its reserved rows
 * back: three plain requests then run together on max_running 3. */
static void group_cancelled_before_fork_returns_its_rows(void)
{
	struct run rn;
	struct req g = { 0 }, kids[2], r[3];
	g_groups = true;
	run_open(&rn, 32, 4, 64, 3, 32, 4);
	make_prompt(&g, 41, 16);
	g.max_tokens = 4;
	g.eos = -1;
	const int32_t firsts[2] = { 1, 2 };
	make_kids(&g, kids, 2, firsts);
	CHECK(add_group(&rn, &g, 3) == QC_OK, "add group");
	run_step(&rn, NULL);   /* 4 of 16 prompt tokens */
	CHECK(qc_kv_blocks_used(rn.kv) == 1 && rn.s->n_reserved == 2, "after one chunk: %d blocks, %d reserved",
	      qc_kv_blocks_used(rn.kv), rn.s->n_reserved);
	struct qc_err err = { 0 };
	CHECK(qc_sched_cancel(rn.s, g.id, &err) == QC_OK, "cancel: %s", err.msg);
	CHECK(qc_kv_blocks_used(rn.kv) == 0 && rn.s->n_reserved == 0 && !qc_sched_has_work(rn.s),
	      "cancelled group holds %d blocks, %d reserved rows", qc_kv_blocks_used(rn.kv), rn.s->n_reserved);
	CHECK(qc_sched_check(rn.s, &err) == QC_OK, "check: %s", err.msg);
	memset(r, 0, sizeof r);
	for (int i = 0; i < 3; i++) {
		make_prompt(&r[i], 42 + (uint32_t)i, 1);   /* 3 tokens: within the prefill budget of 4 */
		r[i].max_tokens = 5;
		r[i].eos = -1;
		add_req(&rn, &r[i]);
	}
	run_step(&rn, NULL);
	CHECK(r[0].n_entries == 1 && r[1].n_entries == 1 && r[2].n_entries == 1,
	      "three requests not admitted together after the cancel: %d %d %d", r[0].n_entries,
	      r[1].n_entries, r[2].n_entries);
	drain(&rn, 100);
	CHECK(g.forks == 0 && kids[0].n_out == 0, "a cancelled group forked");
	for (int i = 0; i < 3; i++)
		CHECK(compare_with_ref(&r[i], false) == 0, "request %d differs", i);
	CHECK(rn.bad_plan == 0 && rn.bad_check == 0 && rn.bad_kv == 0, "inconsistencies %d %d %d",
	      rn.bad_plan, rn.bad_check, rn.bad_kv);
	run_close(&rn);
	g_groups = false;
}

/* qc_sched_add_group / qc_sched_fork refuse bad calls with nothing changed, and
 * qc_sched_check trips on a corrupted reservation count. */
static void fork_misuse_is_refused_and_check_sees_reservations(void)
{
	struct run rn;
	struct req x = { 0 }, g = { 0 }, kids[2];
	struct qc_err err = { 0 };
	struct qc_sched_child c[3];
	g_groups = true;
	run_open(&rn, 32, 4, 64, 4, 32, 32);
	make_prompt(&x, 51, 6);
	x.max_tokens = 5;
	x.eos = -1;
	g = x;
	make_prompt(&g, 52, 6);
	const int32_t firsts[2] = { 7, 8 };
	make_kids(&g, kids, 2, firsts);
	CHECK(add_group(&rn, &g, 0) == QC_EINVAL && add_group(&rn, &g, QC_SCHED_MAX_CHOICES + 1) == QC_EINVAL &&
	      add_group(&rn, &g, 5) == QC_EINVAL && !qc_sched_has_work(rn.s),
	      "n_choices 0, 17, 5 > max_running 4 not all refused");
	CHECK(qc_sched_fork(rn.s, NULL, 0, c, 1, &err) == QC_EINVAL, "fork with no plan");
	add_req(&rn, &x);
	CHECK(add_group(&rn, &g, 3) == QC_OK, "add group");
	struct qc_sched_plan *p;
	CHECK(qc_sched_step(rn.s, &p, &err) == QC_OK && p->n_seqs == 2 && p->seq_ids[0] == x.id &&
	      p->seq_ids[1] == g.id, "step: both admitted, x first");
	CHECK(qc_sched_check(rn.s, &err) == QC_OK && rn.s->n_reserved == 2, "reserved %d", rn.s->n_reserved);
	/* the checker must trip on a reservation count that disagrees */
	rn.s->n_reserved++;
	CHECK(qc_sched_check(rn.s, &err) == QC_EFORMAT && strstr(err.msg, "reserved"),
	      "n_reserved + 1 not flagged: %s", err.msg);
	rn.s->n_reserved--;
	lookup(rn.s, g.id)->n_fork--;
	CHECK(qc_sched_check(rn.s, &err) == QC_EFORMAT, "a group's n_fork - 1 not flagged");
	lookup(rn.s, g.id)->n_fork++;
	CHECK(qc_sched_check(rn.s, &err) == QC_OK, "restored: %s", err.msg);

	struct req *reqs[2] = { &x, &g };
	int32_t sampled[2];
	CHECK(mock_forward(&rn.m, p, reqs, sampled) == 0, "forward");
	for (int k = 0; k < 3; k++)
		c[k] = (struct qc_sched_child){ .first_token = 4 + k };
	CHECK(qc_sched_fork(rn.s, p, 0, c, 1, &err) == QC_EINVAL, "fork of a plain request: %s", err.msg);
	CHECK(qc_sched_fork(rn.s, p, 1, c, 3, &err) == QC_EINVAL && strstr(err.msg, "reserved 2"),
	      "3 kids of a group of 3: %s", err.msg);
	CHECK(qc_sched_fork(rn.s, p, 2, c, 1, &err) == QC_EINVAL && qc_sched_fork(rn.s, p, -1, c, 1, &err) == QC_EINVAL,
	      "entry out of range");
	c[1].first_token = -1;
	CHECK(qc_sched_fork(rn.s, p, 1, c, 2, &err) == QC_EINVAL, "negative first token: %s", err.msg);
	CHECK(rn.s->n_reserved == 2 && rn.s->running.n == 2 && qc_sched_check(rn.s, &err) == QC_OK,
	      "a refused fork changed something: %d reserved, %d running", rn.s->n_reserved, rn.s->running.n);
	fork_kids(&rn, p, 1, &g);
	CHECK(g.forks == 1 && rn.s->running.n == 4 && rn.s->n_reserved == 0, "fork: %d running, %d reserved",
	      rn.s->running.n, rn.s->n_reserved);
	CHECK(qc_sched_fork(rn.s, p, 1, c, 1, &err) == QC_EINVAL, "second fork of the same group");
	CHECK(qc_sched_check(rn.s, &err) == QC_OK, "check after the fork: %s", err.msg);
	CHECK(qc_sched_commit(rn.s, p, sampled, &err) == QC_OK, "commit: %s", err.msg);
	x.out[x.n_out++] = sampled[0];
	g.out[g.n_out++] = sampled[1];
	CHECK(qc_sched_fork(rn.s, p, 1, c, 1, &err) == QC_EINVAL, "fork after the commit");
	CHECK(qc_sched_check(rn.s, &err) == QC_OK, "check after the commit: %s", err.msg);
	drain(&rn, 100);
	CHECK(compare_with_ref(&x, false) == 0 && compare_with_ref(&g, false) == 0 &&
	      compare_with_ref(&kids[0], false) == 0 && compare_with_ref(&kids[1], false) == 0,
	      "outputs differ from the references");
	CHECK(rn.bad_plan == 0 && rn.bad_check == 0 && rn.bad_kv == 0, "inconsistencies %d %d %d",
	      rn.bad_plan, rn.bad_check, rn.bad_kv);
	run_close(&rn);
	g_groups = false;
}

/* A group whose prompt the prefix cache holds (an earlier request's): it feeds
 * only the last partial block, forks on cached blocks (refcounts checked every
 * step), and every choice equals its reference and the cache-off run. */
static void run_cached_group(bool cache, struct req *a, struct req *g, struct req *kids)
{
	struct run rn;
	struct qc_sched_stats st;
	g_groups = true;
	g_prefix_cache = cache;
	run_open(&rn, 40, 4, 96, 4, 64, 64);
	g_prefix_cache = false;
	memset(a, 0, sizeof *a);
	make_prompt(a, 61, 22);
	a->max_tokens = 4;
	a->eos = -1;
	*g = *a;
	g->max_tokens = 8;
	const int32_t firsts[2] = { 1, 2 };
	make_kids(g, kids, 2, firsts);
	add_req(&rn, a);
	drain(&rn, 50);
	CHECK(add_group(&rn, g, 3) == QC_OK, "add group");
	drain(&rn, 100);
	qc_sched_get_stats(rn.s, &st);
	CHECK(st.prefix_hit_tokens == (cache ? 20u : 0u) && g->prefills == (cache ? 0 : 1),
	      "cache %d: %llu tokens hit, group fed from 0 %d times", cache,
	      (unsigned long long)st.prefix_hit_tokens, g->prefills);
	CHECK(g->forks == 1 && compare_with_ref(g, false) == 0 && compare_with_ref(&kids[0], false) == 0 &&
	      compare_with_ref(&kids[1], false) == 0, "cache %d: a choice differs from its reference", cache);
	CHECK(rn.bad_plan == 0 && rn.bad_check == 0 && rn.bad_kv == 0, "cache %d: inconsistencies %d %d %d",
	      cache, rn.bad_plan, rn.bad_check, rn.bad_kv);
	CHECK(qc_kv_blocks_used(rn.kv) == 0, "cache %d: %d blocks held at the end", cache, qc_kv_blocks_used(rn.kv));
	run_close(&rn);
	g_groups = false;
}

static void group_on_cached_prompt_matches_cache_off(void)
{
	struct req a[2], g[2], kids[2][2];
	run_cached_group(true, &a[0], &g[0], kids[0]);
	run_cached_group(false, &a[1], &g[1], kids[1]);
	bool same = g[0].n_out == g[1].n_out && !memcmp(g[0].out, g[1].out, sizeof g[0].out);
	for (int k = 0; k < 2; k++)
		same = same && kids[0][k].n_out == kids[1][k].n_out &&
		       !memcmp(kids[0][k].out, kids[1][k].out, sizeof kids[0][k].out);
	CHECK(same, "group outputs with the prefix cache differ from the cache-off run");
}

int main(void)
{
	requests_match_solo_runs_under_preemption();
	lone_sequence_too_big_fails_instead_of_spinning();
	preempted_request_is_readmitted_before_later_arrivals();
	add_and_misuse_are_rejected();
	cancel_between_step_and_commit_drops_only_that_request();
	checkers_trip_on_wrong_inputs();
	prefix_hits_feed_only_the_rest();
	long_prefill_does_not_stall_others();
	fork_choice_finished_by_first_token_is_retired_at_once();
	group_preempted_before_fork_forks_once();
	group_cancelled_before_fork_returns_its_rows();
	fork_misuse_is_refused_and_check_sees_reservations();
	group_on_cached_prompt_matches_cache_off();
	randomized_stress_keeps_invariants(false);
	randomized_stress_keeps_invariants(true);
	/* a window of 20 on every layer: 90-token prompts, up to 150 positions */
	g_window = 20;
	randomized_stress_keeps_invariants(false);
	randomized_stress_keeps_invariants(true);
	g_window = 0;
	return check_report("test_scheduler");
}
