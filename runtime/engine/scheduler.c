/* scheduler.c — continuous batching: queues, admission, preemption, the plan.
 *
 * Owns: request slots (fixed array sized max_running + max_waiting, linked into
 * the waiting or running list by index), per-request token buffers (allocated at
 * add, bounded by the KV table width), and the step plan (allocated once).
 * A request's state is (tokens[0..n_tokens), n_computed): the first n_computed
 * tokens have K/V in the pool; each step feeds tokens[n_computed ..] and logits
 * are needed exactly when that chunk reaches n_tokens. Decode and recompute after
 * preemption are the same rule, so a preempted request resumes bit-identically.
 * Invariant after every commit: kv length of a running request == n_computed <
 * n_tokens; waiting requests hold no kv row; a block in a running table is the
 * row's own (refcount 1), a full cached block, or shared between the choices of
 * one group (qc_sched_fork; kv refcounts say by how many); no planned slot lies
 * in a cached block, nor in a shared one outside the step that forks. A
 * prefix-cache hit at admission only starts n_computed above 0 (whole blocks, at
 * least one token left), so the rest of the rule, and bit-identical output, are
 * unchanged.
 * Groups: a request added with n_choices > 1 holds n_fork = n_choices - 1 running
 * rows in reserve from its admission to its fork (n_reserved sums them over the
 * running set), so the fork always finds rows: running + n_reserved <= max_running.
 */
#include "scheduler.h"

#include <stdlib.h>
#include <string.h>

/* Live request slots above this are a config mistake (and slot ids must fit the
 * low 32 bits of a request id). */
#define SCHED_MAX_SLOTS (1 << QC_SCHED_ID_SLOT_BITS)

enum seq_state { SEQ_FREE = 0, SEQ_WAITING, SEQ_RUNNING };

struct seq {
	uint64_t id;              /* 0 while the slot is free */
	int32_t *tokens;          /* (cap) prompt, then generated tokens */
	int32_t cap;              /* n_prompt + max_tokens */
	int32_t n_tokens;         /* valid entries of tokens */
	int32_t n_prompt;
	int32_t n_computed;       /* leading tokens whose K/V is committed */
	int32_t n_prefill;        /* n_tokens at (re)admission: positions below are prefill */
	int32_t max_tokens;
	int32_t eos_id;
	int32_t n_stop;
	int32_t stop_ids[QC_SCHED_MAX_STOP_IDS];
	int32_t n_fork;           /* choices still to fork off this one (groups), else 0 */
	int32_t kv_seq;           /* kv row while running, -1 otherwise */
	int32_t prev, next;       /* neighbours in its list, -1 at the ends */
	enum seq_state state;
	void *user;
};

struct seq_list {
	int32_t head, tail, n;    /* head = oldest */
};

struct qc_sched {
	struct qc_sched_config cfg;
	struct qc_kv *kv;             /* borrowed */
	struct seq *seqs;             /* (cap) request slots */
	int32_t cap;
	int32_t *free_slots;          /* (cap) stack of free slot indices */
	int32_t n_free_slots;
	struct seq_list waiting, running;
	uint32_t serial;              /* high half of the next id */
	struct qc_sched_plan plan;
	int32_t *plan_slot;           /* (max_running) request slot of each plan entry */
	int32_t *match_ids;           /* (kv table width) cached blocks a waiting head matches */
	bool plan_pending;            /* stepped, not yet committed */
	bool fork_pending;            /* a group forked since the step: its planned slots are shared */
	int32_t n_reserved;           /* running rows held for forks: sum of running n_fork */
	struct qc_sched_stats st;     /* counters; occupancy fields filled on demand */
};

void qc_sched_config_init(struct qc_sched_config *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	cfg->max_running = 64;
	cfg->max_waiting = 1024;
	cfg->max_batch_tokens = 2048;
	cfg->max_prefill_tokens = 2048;
}

const char *qc_sched_finish_name(enum qc_sched_finish reason)
{
	switch (reason) {
	case QC_SCHED_FINISH_NONE: return "none";
	case QC_SCHED_FINISH_STOP: return "stop";
	case QC_SCHED_FINISH_LENGTH: return "length";
	case QC_SCHED_FINISH_STOP_STRING: return "stop_string";
	case QC_SCHED_FINISH_CANCELLED: return "cancelled";
	case QC_SCHED_FINISH_NO_MEMORY: return "no_memory";
	case QC_SCHED_FINISH_ERROR: return "error";
	}
	return "unknown";
}

/* ---- intrusive lists over slot indices ---- */

static void list_push_back(struct qc_sched *s, struct seq_list *l, int32_t i)
{
	struct seq *q = &s->seqs[i];
	q->prev = l->tail;
	q->next = -1;
	if (l->tail >= 0)
		s->seqs[l->tail].next = i;
	else
		l->head = i;
	l->tail = i;
	l->n++;
}

static void list_push_front(struct qc_sched *s, struct seq_list *l, int32_t i)
{
	struct seq *q = &s->seqs[i];
	q->prev = -1;
	q->next = l->head;
	if (l->head >= 0)
		s->seqs[l->head].prev = i;
	else
		l->tail = i;
	l->head = i;
	l->n++;
}

static void list_remove(struct qc_sched *s, struct seq_list *l, int32_t i)
{
	struct seq *q = &s->seqs[i];
	if (q->prev >= 0)
		s->seqs[q->prev].next = q->next;
	else
		l->head = q->next;
	if (q->next >= 0)
		s->seqs[q->next].prev = q->prev;
	else
		l->tail = q->prev;
	q->prev = q->next = -1;
	l->n--;
}

/* ---- lifecycle ---- */

static int check_config(const struct qc_sched_config *c, const struct qc_kv *kv,
			struct qc_err *err)
{
	if (c->max_running < 1 || c->max_running > qc_kv_max_seqs(kv))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sched: max_running %d outside 1..%d (kv max_seqs)",
				  c->max_running, qc_kv_max_seqs(kv));
	if (c->max_waiting < 1 ||
	    (int64_t)c->max_running + c->max_waiting > SCHED_MAX_SLOTS)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sched: max_waiting %d outside 1..%d", c->max_waiting,
				  SCHED_MAX_SLOTS - c->max_running);
	if (c->max_batch_tokens < 1)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sched: max_batch_tokens %d must be positive", c->max_batch_tokens);
	if (c->max_prefill_tokens < 1 || c->max_prefill_tokens > c->max_batch_tokens)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sched: max_prefill_tokens %d outside 1..max_batch_tokens (%d)",
				  c->max_prefill_tokens, c->max_batch_tokens);
	if (c->window < 0)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "sched: window %d is negative", c->window);
	if (c->watermark_blocks < 0 || c->watermark_blocks >= qc_kv_blocks_total(kv))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sched: watermark_blocks %d outside 0..%d", c->watermark_blocks,
				  qc_kv_blocks_total(kv) - 1);
	if (qc_kv_blocks_used(kv) != 0)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sched: kv pool already has %d blocks in use", qc_kv_blocks_used(kv));
	for (int32_t r = 0; r < qc_kv_max_seqs(kv); r++)
		if (qc_kv_seq_live(kv, r))
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
					  "sched: kv row %d is already live", r);
	return QC_OK;
}

int qc_sched_new(const struct qc_sched_config *cfg, struct qc_kv *kv,
		 struct qc_sched **out, struct qc_err *err)
{
	struct qc_sched *s;
	struct qc_sched_plan *p;
	int rc;

	*out = NULL;
	rc = check_config(cfg, kv, err);
	if (rc)
		return rc;
	s = calloc(1, sizeof *s);
	if (!s)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "sched: out of memory");
	s->cfg = *cfg;
	s->kv = kv;
	s->cap = cfg->max_running + cfg->max_waiting;
	s->waiting = (struct seq_list){ -1, -1, 0 };
	s->running = (struct seq_list){ -1, -1, 0 };

	size_t nt = (size_t)cfg->max_batch_tokens, ns = (size_t)cfg->max_running;
	size_t ntab = ns * (size_t)qc_kv_table_width(kv);
	p = &s->plan;
	s->seqs = calloc((size_t)s->cap, sizeof *s->seqs);
	s->free_slots = malloc((size_t)s->cap * sizeof *s->free_slots);
	s->plan_slot = malloc(ns * sizeof *s->plan_slot);
	s->match_ids = malloc((size_t)qc_kv_table_width(kv) * sizeof *s->match_ids);
	p->tokens = malloc(nt * sizeof *p->tokens);
	p->positions = malloc(nt * sizeof *p->positions);
	p->slots = malloc(nt * sizeof *p->slots);
	p->seq_ids = malloc(ns * sizeof *p->seq_ids);
	p->tok_start = malloc((ns + 1) * sizeof *p->tok_start);
	p->ctx_lens = malloc(ns * sizeof *p->ctx_lens);
	p->need_logits = malloc(ns);
	p->block_tables = malloc(ntab * sizeof *p->block_tables);
	p->accepted = malloc(ns);
	p->finish = malloc(ns);
	p->cow_src = malloc(ns * sizeof *p->cow_src);
	p->cow_dst = malloc(ns * sizeof *p->cow_dst);
	p->cow_n_tokens = malloc(ns * sizeof *p->cow_n_tokens);
	p->failed_ids = malloc(ns * sizeof *p->failed_ids);
	if (!s->seqs || !s->free_slots || !s->plan_slot || !s->match_ids || !p->tokens || !p->positions ||
	    !p->slots || !p->seq_ids || !p->tok_start || !p->ctx_lens || !p->need_logits ||
	    !p->block_tables || !p->accepted || !p->finish || !p->cow_src || !p->cow_dst ||
	    !p->cow_n_tokens || !p->failed_ids) {
		rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1,
				"sched: out of memory for %d slots, %zu plan tokens", s->cap, nt);
		goto out_free;
	}
	for (int32_t i = 0; i < s->cap; i++) {
		s->seqs[i].kv_seq = -1;
		s->seqs[i].prev = s->seqs[i].next = -1;
		s->free_slots[i] = s->cap - 1 - i;
	}
	s->n_free_slots = s->cap;
	p->block_tokens = qc_kv_block_tokens(kv);
	p->tok_start[0] = 0;
	*out = s;
	return QC_OK;

out_free:
	qc_sched_free(s);
	return rc;
}

void qc_sched_free(struct qc_sched *s)
{
	if (!s)
		return;
	if (s->seqs) {
		for (int32_t i = 0; i < s->cap; i++) {
			if (s->seqs[i].state == SEQ_FREE)
				continue;
			qc_kv_seq_free(s->kv, s->seqs[i].kv_seq);
			free(s->seqs[i].tokens);
		}
	}
	struct qc_sched_plan *p = &s->plan;
	free(p->tokens);
	free(p->positions);
	free(p->slots);
	free(p->seq_ids);
	free(p->tok_start);
	free(p->ctx_lens);
	free(p->need_logits);
	free(p->block_tables);
	free(p->accepted);
	free(p->finish);
	free(p->cow_src);
	free(p->cow_dst);
	free(p->cow_n_tokens);
	free(p->failed_ids);
	free(s->plan_slot);
	free(s->match_ids);
	free(s->free_slots);
	free(s->seqs);
	free(s);
}

/* ---- requests ---- */

static struct seq *lookup(const struct qc_sched *s, uint64_t id)
{
	uint32_t slot = (uint32_t)id;
	if (id == 0 || slot >= (uint32_t)s->cap || s->seqs[slot].id != id)
		return NULL;
	return &s->seqs[slot];
}

static int32_t blocks_for(const struct qc_sched *s, int64_t tokens)
{
	int64_t bt = qc_kv_block_tokens(s->kv);
	return (int32_t)((tokens + bt - 1) / bt);
}

/* Blocks a request of n tokens holds at once: all of them, or with a window on
 * every layer those of one window and one chunk (kv_blocks.h's bound; a chunk
 * is at most max_prefill_tokens, a decode step 1). */
static int32_t peak_blocks(const struct qc_sched *s, int64_t n)
{
	int32_t all = blocks_for(s, n);
	if (s->cfg.window <= 0)
		return all;
	int32_t win = blocks_for(s, (int64_t)s->cfg.window + s->cfg.max_prefill_tokens - 2) + 1;
	return win < all ? win : all;
}

int qc_sched_add(struct qc_sched *s, const struct qc_sched_request *req, uint64_t *id,
		 struct qc_err *err)
{
	*id = 0;
	if (!req->prompt || req->n_prompt < 1 || req->max_tokens < 1)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sched: request needs a prompt (got %d tokens) and max_tokens >= 1 (got %d)",
				  req->n_prompt, req->max_tokens);
	if (req->n_stop_ids < 0 || req->n_stop_ids > QC_SCHED_MAX_STOP_IDS || req->eos_id < -1)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sched: %d stop ids (max %d), eos %d", req->n_stop_ids,
				  QC_SCHED_MAX_STOP_IDS, req->eos_id);
	int64_t total = (int64_t)req->n_prompt + req->max_tokens;
	int32_t ctx = qc_kv_max_seq_tokens(s->kv);
	if (total > ctx)
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1,
				  "sched: prompt of %d tokens + max_tokens %d exceeds the %d-token context",
				  req->n_prompt, req->max_tokens, ctx);
	if (peak_blocks(s, req->n_prompt) > qc_kv_blocks_total(s->kv))
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1,
				  "sched: prompt of %d tokens needs %d KV blocks, the pool has %d",
				  req->n_prompt, peak_blocks(s, req->n_prompt),
				  qc_kv_blocks_total(s->kv));
	if (s->waiting.n >= s->cfg.max_waiting || s->n_free_slots == 0)
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1,
				  "sched: waiting queue full (%d requests)", s->waiting.n);
	for (int32_t i = 0; i < req->n_prompt; i++)
		if (req->prompt[i] < 0)
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
					  "sched: prompt token %d is %d", i, req->prompt[i]);
	for (int32_t i = 0; i < req->n_stop_ids; i++)
		if (req->stop_ids[i] < 0)
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
					  "sched: stop id %d is %d", i, req->stop_ids[i]);

	int32_t *tokens = malloc((size_t)total * sizeof *tokens);
	if (!tokens)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1,
				  "sched: out of memory for %lld tokens", (long long)total);
	memcpy(tokens, req->prompt, (size_t)req->n_prompt * sizeof *tokens);

	int32_t slot = s->free_slots[--s->n_free_slots];
	if (++s->serial == 0)
		s->serial = 1;
	struct seq *q = &s->seqs[slot];
	*q = (struct seq){
		.id = ((uint64_t)s->serial << 32) | (uint32_t)slot,
		.tokens = tokens,
		.cap = (int32_t)total,
		.n_tokens = req->n_prompt,
		.n_prompt = req->n_prompt,
		.n_prefill = req->n_prompt,
		.max_tokens = req->max_tokens,
		.eos_id = req->eos_id,
		.n_stop = req->n_stop_ids,
		.kv_seq = -1,
		.prev = -1,
		.next = -1,
		.state = SEQ_WAITING,
		.user = req->user,
	};
	memcpy(q->stop_ids, req->stop_ids, sizeof q->stop_ids);
	list_push_back(s, &s->waiting, slot);
	*id = q->id;
	return QC_OK;
}

static void retire(struct qc_sched *s, int32_t slot, enum qc_sched_finish reason)
{
	struct seq *q = &s->seqs[slot];
	if (q->state == SEQ_RUNNING)
		s->n_reserved -= q->n_fork;
	list_remove(s, q->state == SEQ_RUNNING ? &s->running : &s->waiting, slot);
	qc_kv_seq_free(s->kv, q->kv_seq);
	free(q->tokens);
	*q = (struct seq){ .kv_seq = -1, .prev = -1, .next = -1, .state = SEQ_FREE };
	s->free_slots[s->n_free_slots++] = slot;
	s->st.n_finished++;
	if (reason == QC_SCHED_FINISH_NO_MEMORY)
		s->st.n_failed++;
}

int qc_sched_finish(struct qc_sched *s, uint64_t id, enum qc_sched_finish reason,
		    struct qc_err *err)
{
	if (reason <= QC_SCHED_FINISH_NONE || reason > QC_SCHED_FINISH_ERROR)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sched: finish reason %d is not a finish", (int)reason);
	struct seq *q = lookup(s, id);
	if (!q)
		return qc_err_set(err, QC_ENOTFOUND, NULL, NULL, -1,
				  "sched: request %#llx is not live", (unsigned long long)id);
	retire(s, (int32_t)(q - s->seqs), reason);
	return QC_OK;
}

int qc_sched_cancel(struct qc_sched *s, uint64_t id, struct qc_err *err)
{
	return qc_sched_finish(s, id, QC_SCHED_FINISH_CANCELLED, err);
}

/* ---- step ---- */

/* Recompute preemption (PagedAttention §4.5): drop the K/V, keep the tokens. */
static void preempt(struct qc_sched *s, int32_t slot)
{
	struct seq *q = &s->seqs[slot];
	list_remove(s, &s->running, slot);
	s->n_reserved -= q->n_fork;
	qc_kv_seq_free(s->kv, q->kv_seq);
	q->kv_seq = -1;
	q->n_computed = 0;
	q->state = SEQ_WAITING;
	/* front of the queue: it was admitted before everything still waiting */
	list_push_front(s, &s->waiting, slot);
	s->st.n_preemptions++;
}

/* Append entry for slot feeding `chunk` tokens from n_computed; the caller has
 * checked that the pool has room, so a kv failure here is a bug. */
static void plan_entry(struct qc_sched *s, int32_t slot, int32_t chunk)
{
	struct qc_sched_plan *p = &s->plan;
	struct seq *q = &s->seqs[slot];
	struct qc_kv_cow cow;
	int32_t e = p->n_seqs, t0 = p->n_tokens;

	int rc = qc_kv_seq_append(s->kv, q->kv_seq, chunk, p->slots + t0, &cow, NULL);
	QC_ASSERT(rc == QC_OK);
	if (cow.src >= 0) {
		p->cow_src[p->n_cow] = cow.src;
		p->cow_dst[p->n_cow] = cow.dst;
		p->cow_n_tokens[p->n_cow] = cow.n_tokens;
		p->n_cow++;
	}
	for (int32_t i = 0; i < chunk; i++) {
		p->tokens[t0 + i] = q->tokens[q->n_computed + i];
		p->positions[t0 + i] = q->n_computed + i;
	}
	p->seq_ids[e] = q->id;
	s->plan_slot[e] = slot;
	p->ctx_lens[e] = q->n_computed + chunk;
	p->need_logits[e] = q->n_computed + chunk == q->n_tokens;
	p->n_logits += p->need_logits[e];
	p->accepted[e] = 0;
	p->finish[e] = QC_SCHED_FINISH_NONE;
	p->n_tokens += chunk;
	p->tok_start[e + 1] = p->n_tokens;
	p->n_seqs++;
}

static int32_t min32(int32_t a, int32_t b) { return a < b ? a : b; }

static bool is_decode(const struct seq *q) { return q->n_computed >= q->n_prefill; }

/* Running requests, oldest first. Fairness (Sarathi-style stall-free batching):
 * a prefill chunk never takes the batch tokens that the running decodes not yet
 * planned need (dec_left), nor the `reserve` prefill tokens kept for admitting
 * the waiting head this step; so a long prefill neither stalls a newer decoding
 * stream nor keeps a short request from starting. Returns true when anything
 * was preempted. */
static bool schedule_running(struct qc_sched *s, int32_t *budget, int32_t *prefill_budget,
			     int32_t reserve)
{
	struct qc_sched_plan *p = &s->plan;
	bool preempted = false;
	int32_t cur = s->running.head, dec_left = 0;

	for (int32_t i = s->running.head; i >= 0; i = s->seqs[i].next)
		dec_left += is_decode(&s->seqs[i]);
	while (cur >= 0) {
		struct seq *q = &s->seqs[cur];
		bool prefill = !is_decode(q);
		int32_t chunk = min32(q->n_tokens - q->n_computed, *budget);
		if (prefill)
			chunk = min32(chunk, min32(*prefill_budget - reserve, *budget - dec_left));
		if (chunk <= 0) {
			dec_left -= !prefill;
			cur = q->next;
			continue;
		}
		int32_t room = qc_kv_seq_room(s->kv, q->kv_seq, qc_kv_blocks_free(s->kv));
		if (room == 0) {
			if (s->running.tail != cur) {
				/* victim is newer than q, hence not in the plan yet */
				dec_left -= is_decode(&s->seqs[s->running.tail]);
				preempt(s, s->running.tail);
				preempted = true;
				continue;
			}
			if (s->running.head == cur) {
				/* alone and the pool is all its own: it can never fit */
				p->failed_ids[p->n_failed++] = q->id;
				retire(s, cur, QC_SCHED_FINISH_NO_MEMORY);
			} else {
				preempt(s, cur);
				preempted = true;
			}
			break;   /* q was the tail */
		}
		/* a prefill chunk shrinks to what fits rather than evicting anyone */
		chunk = min32(chunk, room);
		plan_entry(s, cur, chunk);
		*budget -= chunk;
		if (prefill)
			*prefill_budget -= chunk;
		else
			dec_left--;
		cur = q->next;
	}
	return preempted;
}

/* Strict FCFS: stop at the first waiting request that does not fit, so nothing
 * overtakes the head (no starvation of long prompts). A request is admitted only
 * when the free pool (less the watermark) holds its whole (re)prefill: admitting
 * on a sliver of memory would only get it evicted by the next decode (vLLM V0
 * can_allocate). With nothing running the head always goes in (with what fits),
 * so the queue cannot stall behind it; the running loop fails it if it cannot
 * progress alone. */
static void admit_waiting(struct qc_sched *s, int32_t *budget, int32_t *prefill_budget)
{
	int32_t bt = qc_kv_block_tokens(s->kv);

	while (s->waiting.n > 0 && s->running.n < s->cfg.max_running && *budget > 0 &&
	       *prefill_budget > 0) {
		int32_t slot = s->waiting.head;
		struct seq *q = &s->seqs[slot];
		/* prefix cache: whole cached blocks of the (re)prefill are taken as they
		 * are; attaching idle ones takes them off the free count */
		int32_t n_idle = 0;
		int32_t hit = qc_kv_prefix_match(s->kv, q->tokens, q->n_tokens, s->match_ids, &n_idle);
		int32_t free_blocks = qc_kv_blocks_free(s->kv) - n_idle;
		/* a group comes in with rows for all its choices (see the top) */
		if (s->running.n + s->n_reserved + 1 + q->n_fork > s->cfg.max_running)
			break;
		if (s->running.n > 0) {
			free_blocks -= s->cfg.watermark_blocks;
			if (peak_blocks(s, q->n_tokens) - hit + q->n_fork > free_blocks)
				break;
		} else if (free_blocks <= 0 && hit > 0) {
			/* alone, and its own hits fill the pool: start from scratch,
			 * evicting them as needed, as without the cache */
			hit = 0;
			free_blocks = qc_kv_blocks_free(s->kv);
		}
		if (free_blocks <= 0)
			break;
		/* rows >= max_running and only running requests hold one */
		int rc = qc_kv_seq_new(s->kv, &q->kv_seq, NULL);
		QC_ASSERT(rc == QC_OK);
		rc = qc_kv_seq_attach(s->kv, q->kv_seq, s->match_ids, hit, NULL);
		QC_ASSERT(rc == QC_OK);
		list_remove(s, &s->waiting, slot);
		list_push_back(s, &s->running, slot);
		q->state = SEQ_RUNNING;
		s->n_reserved += q->n_fork;
		q->n_computed = hit * bt;
		q->n_prefill = q->n_tokens;
		s->st.prefix_queried_tokens += (uint64_t)q->n_tokens;
		s->st.prefix_hit_tokens += (uint64_t)q->n_computed;
		int32_t chunk = min32(min32(q->n_tokens - q->n_computed, *budget), *prefill_budget);
		chunk = min32(chunk, qc_kv_seq_room(s->kv, q->kv_seq, qc_kv_blocks_free(s->kv)));
		if (chunk <= 0)
			break;   /* cannot happen: free_blocks > 0 leaves room for a token */
		plan_entry(s, slot, chunk);
		*budget -= chunk;
		*prefill_budget -= chunk;
	}
}

static void fill_tables(struct qc_sched *s)
{
	struct qc_sched_plan *p = &s->plan;
	int32_t stride = 0, nb;

	for (int32_t e = 0; e < p->n_seqs; e++) {
		qc_kv_seq_table(s->kv, s->seqs[s->plan_slot[e]].kv_seq, &nb);
		if (nb > stride)
			stride = nb;
	}
	for (int32_t e = 0; e < p->n_seqs; e++) {
		const int32_t *t = qc_kv_seq_table(s->kv, s->seqs[s->plan_slot[e]].kv_seq, &nb);
		int32_t *dst = p->block_tables + (size_t)e * (size_t)stride;
		memcpy(dst, t, (size_t)nb * sizeof *dst);
		for (int32_t j = nb; j < stride; j++)
			dst[j] = -1;
	}
	p->table_stride = stride;
}

/* Prefill tokens running prefills leave for admission this step: half the chunk
 * budget (at most the head's prompt) when a request waits that admission would
 * take (a free row, and blocks for its whole prefill, cache hits not counted).
 * The oldest prefill still gets the other half, so it cannot starve. */
static int32_t admit_reserve(const struct qc_sched *s, int32_t prefill_budget)
{
	if (s->waiting.n == 0 || s->running.n == 0 || s->running.n >= s->cfg.max_running)
		return 0;
	const struct seq *h = &s->seqs[s->waiting.head];
	if (peak_blocks(s, h->n_tokens) > qc_kv_blocks_free(s->kv) - s->cfg.watermark_blocks)
		return 0;
	return min32(prefill_budget / 2, h->n_tokens);
}

int qc_sched_step(struct qc_sched *s, struct qc_sched_plan **plan, struct qc_err *err)
{
	struct qc_sched_plan *p = &s->plan;
	int32_t budget = s->cfg.max_batch_tokens;
	int32_t prefill_budget = s->cfg.max_prefill_tokens;

	*plan = NULL;
	if (s->plan_pending)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sched: step before the previous plan (%d entries) was committed",
				  p->n_seqs);
	p->n_seqs = p->n_tokens = p->n_logits = p->n_cow = p->n_failed = 0;
	p->table_stride = 0;
	/* admitting right after evicting would only evict again (vLLM does the same) */
	if (!schedule_running(s, &budget, &prefill_budget, admit_reserve(s, prefill_budget)))
		admit_waiting(s, &budget, &prefill_budget);
	fill_tables(s);
	s->plan_pending = p->n_seqs > 0;
	s->st.n_steps++;
	*plan = p;
	return QC_OK;
}

/* ---- commit ---- */

static bool is_stop(const struct seq *q, int32_t t)
{
	if (t == q->eos_id)
		return true;
	for (int32_t i = 0; i < q->n_stop; i++)
		if (q->stop_ids[i] == t)
			return true;
	return false;
}

int qc_sched_commit(struct qc_sched *s, struct qc_sched_plan *plan, const int32_t *sampled,
		    struct qc_err *err)
{
	if (plan == &s->plan && !s->plan_pending && plan->n_seqs == 0)
		return QC_OK;   /* an empty step has nothing to account for */
	if (plan != &s->plan || !s->plan_pending)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sched: commit of a plan that is not the pending one");
	if (plan->n_logits > 0 && !sampled)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sched: %d entries need sampled tokens, got none", plan->n_logits);
	for (int32_t e = 0; e < plan->n_seqs; e++)
		if (plan->need_logits[e] && sampled[e] < 0)
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
					  "sched: sampled token %d for entry %d", sampled[e], e);

	for (int32_t e = 0; e < plan->n_seqs; e++) {
		int32_t slot = s->plan_slot[e];
		struct seq *q = &s->seqs[slot];
		plan->accepted[e] = 0;
		plan->finish[e] = QC_SCHED_FINISH_NONE;
		if (q->id != plan->seq_ids[e] || q->state != SEQ_RUNNING)
			continue;   /* retired after the step */
		q->n_computed += plan->tok_start[e + 1] - plan->tok_start[e];
		QC_ASSERT(q->n_computed == qc_kv_seq_len(s->kv, q->kv_seq));
		/* the forward has written these K/V: full blocks become reusable */
		qc_kv_seq_cache(s->kv, q->kv_seq, q->tokens, q->n_computed);
		/* then the next query (at n_computed or later) reads no position
		   before n_computed - window + 1 in any layer */
		if (s->cfg.window > 0)
			qc_kv_seq_drop_before(s->kv, q->kv_seq, q->n_computed - s->cfg.window + 1);
		if (!plan->need_logits[e])
			continue;
		QC_ASSERT(q->n_tokens < q->cap);
		int32_t t = sampled[e];
		q->tokens[q->n_tokens++] = t;
		plan->accepted[e] = 1;
		enum qc_sched_finish reason = QC_SCHED_FINISH_NONE;
		if (is_stop(q, t))
			reason = QC_SCHED_FINISH_STOP;
		else if (q->n_tokens - q->n_prompt >= q->max_tokens)
			reason = QC_SCHED_FINISH_LENGTH;
		if (reason != QC_SCHED_FINISH_NONE) {
			plan->finish[e] = (uint8_t)reason;
			retire(s, slot, reason);
		}
	}
	s->plan_pending = false;
	s->fork_pending = false;
	return QC_OK;
}

/* ---- groups (n choices of one prompt) ---- */

int qc_sched_add_group(struct qc_sched *s, const struct qc_sched_request *req, int32_t n_choices,
		       uint64_t *id, struct qc_err *err)
{
	*id = 0;
	if (n_choices < 1 || n_choices > QC_SCHED_MAX_CHOICES || n_choices > s->cfg.max_running)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sched: %d choices outside 1..%d (the most of %d and max_running %d)",
				  n_choices,
				  s->cfg.max_running < QC_SCHED_MAX_CHOICES ? s->cfg.max_running
									    : QC_SCHED_MAX_CHOICES,
				  QC_SCHED_MAX_CHOICES, s->cfg.max_running);
	int rc = qc_sched_add(s, req, id, err);
	if (rc)
		return rc;
	lookup(s, *id)->n_fork = n_choices - 1;
	return QC_OK;
}

int qc_sched_fork(struct qc_sched *s, const struct qc_sched_plan *plan, int32_t entry,
		  struct qc_sched_child *kids, int32_t n_kids, struct qc_err *err)
{
	if (plan != &s->plan || !s->plan_pending || entry < 0 || entry >= plan->n_seqs)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sched: fork of entry %d outside the pending plan", entry);
	struct seq *q = lookup(s, plan->seq_ids[entry]);
	if (!q || q->state != SEQ_RUNNING || !plan->need_logits[entry] || q->n_tokens != q->n_prompt)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sched: entry %d does not complete a live request's prompt", entry);
	if (n_kids < 0 || n_kids > q->n_fork)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "sched: %d choices to fork, the request reserved %d", n_kids, q->n_fork);
	for (int32_t i = 0; i < n_kids; i++)
		if (kids[i].first_token < 0)
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
					  "sched: first token of choice %d is %d", i, kids[i].first_token);

	s->n_reserved -= q->n_fork;
	q->n_fork = 0;
	s->fork_pending = true;
	for (int32_t i = 0; i < n_kids; i++) {
		struct qc_sched_child *k = &kids[i];
		k->id = 0;
		k->finish = QC_SCHED_FINISH_NONE;
		int32_t *tokens = malloc((size_t)q->cap * sizeof *tokens);
		if (!tokens) {
			/* the choice cannot start; the caller sees a retired id 0 */
			k->finish = QC_SCHED_FINISH_NO_MEMORY;
			s->st.n_failed++;
			continue;
		}
		memcpy(tokens, q->tokens, (size_t)q->n_prompt * sizeof *tokens);
		tokens[q->n_prompt] = k->first_token;
		/* the reservation guarantees a slot and a kv row (see the top) */
		QC_ASSERT(s->n_free_slots > 0);
		int32_t slot = s->free_slots[--s->n_free_slots];
		if (++s->serial == 0)
			s->serial = 1;
		struct seq *c = &s->seqs[slot];
		*c = *q;
		c->id = ((uint64_t)s->serial << 32) | (uint32_t)slot;
		c->tokens = tokens;
		c->n_tokens = q->n_prompt + 1;
		/* the forward of this plan computes the prompt's K/V into the
		   blocks the child now shares */
		c->n_computed = c->n_prefill = q->n_prompt;
		c->user = k->user;
		c->prev = c->next = -1;
		int rc = qc_kv_seq_fork(s->kv, q->kv_seq, &c->kv_seq, NULL);
		QC_ASSERT(rc == QC_OK);
		list_push_back(s, &s->running, slot);
		k->id = c->id;
		if (is_stop(c, k->first_token))
			k->finish = QC_SCHED_FINISH_STOP;
		else if (c->max_tokens <= 1)
			k->finish = QC_SCHED_FINISH_LENGTH;
		if (k->finish != QC_SCHED_FINISH_NONE)
			retire(s, slot, k->finish);
	}
	return QC_OK;
}

/* ---- queries ---- */

bool qc_sched_has_work(const struct qc_sched *s)
{
	return s->running.n + s->waiting.n > 0;
}

void qc_sched_get_stats(const struct qc_sched *s, struct qc_sched_stats *out)
{
	*out = s->st;
	out->n_running = s->running.n;
	out->n_waiting = s->waiting.n;
	out->blocks_used = qc_kv_blocks_used(s->kv);
	out->blocks_free = qc_kv_blocks_free(s->kv);
	out->blocks_total = qc_kv_blocks_total(s->kv);
	out->blocks_cached = qc_kv_blocks_cached(s->kv);
}

void *qc_sched_seq_user(const struct qc_sched *s, uint64_t id)
{
	const struct seq *q = lookup(s, id);
	return q ? q->user : NULL;
}

const int32_t *qc_sched_seq_tokens(const struct qc_sched *s, uint64_t id,
				   int32_t *n_tokens, int32_t *n_prompt)
{
	const struct seq *q = lookup(s, id);
	*n_tokens = q ? q->n_tokens : 0;
	*n_prompt = q ? q->n_prompt : 0;
	return q ? q->tokens : NULL;
}

bool qc_sched_seq_live(const struct qc_sched *s, uint64_t id)
{
	return lookup(s, id) != NULL;
}

static int check_list(const struct qc_sched *s, const struct seq_list *l,
		      enum seq_state want, const char *name, struct qc_err *err)
{
	int32_t n = 0, prev = -1;
	for (int32_t i = l->head; i >= 0; i = s->seqs[i].next) {
		const struct seq *q = &s->seqs[i];
		if (++n > s->cap || q->state != want || q->prev != prev)
			return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
					  "sched check: %s list broken at slot %d", name, i);
		prev = i;
	}
	if (n != l->n || prev != l->tail)
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
				  "sched check: %s list holds %d, count says %d", name, n, l->n);
	return QC_OK;
}

/* The backend contract a cache hit must keep: a pending plan writes no slot of a
 * cached or shared block, and each entry's positions run contiguously up to its
 * ctx_len, starting where the request's committed K/V ends. */
static int check_plan_slots(const struct qc_sched *s, struct qc_err *err)
{
	const struct qc_sched_plan *p = &s->plan;
	if (!s->plan_pending)
		return QC_OK;
	for (int32_t e = 0; e < p->n_seqs; e++) {
		const struct seq *q = &s->seqs[s->plan_slot[e]];
		if (q->id != p->seq_ids[e] || q->state != SEQ_RUNNING)
			continue;   /* retired after the step */
		int32_t t0 = p->tok_start[e], t1 = p->tok_start[e + 1];
		if (p->positions[t0] != q->n_computed || p->ctx_lens[e] != q->n_computed + t1 - t0)
			return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
					  "sched check: entry %d starts at %d (ctx %d), request has %d computed",
					  e, p->positions[t0], p->ctx_lens[e], q->n_computed);
		for (int32_t t = t0; t < t1; t++) {
			int32_t b = qc_kv_slot_block(s->kv, p->slots[t]);
			if (p->positions[t] != q->n_computed + t - t0 ||
			    qc_kv_block_cached(s->kv, b) || (qc_kv_block_refcount(s->kv, b) != 1 && !s->fork_pending))
				return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
						  "sched check: entry %d token %d writes slot %d of block %d (refcount %d, cached %d)",
						  e, t - t0, p->slots[t], b, qc_kv_block_refcount(s->kv, b),
						  qc_kv_block_cached(s->kv, b));
		}
	}
	return QC_OK;
}

int qc_sched_check(const struct qc_sched *s, struct qc_err *err)
{
	int32_t n_live = 0, n_rows = 0, n_fork = 0;
	int rc;

	rc = qc_kv_check(s->kv, err);
	if (rc)
		return rc;
	rc = check_list(s, &s->running, SEQ_RUNNING, "running", err);
	if (rc)
		return rc;
	rc = check_list(s, &s->waiting, SEQ_WAITING, "waiting", err);
	if (rc)
		return rc;
	if (s->running.n > s->cfg.max_running)
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
				  "sched check: %d running > max %d", s->running.n,
				  s->cfg.max_running);
	for (int32_t i = 0; i < s->cap; i++) {
		const struct seq *q = &s->seqs[i];
		if (q->state == SEQ_FREE)
			continue;
		n_live++;
		if ((uint32_t)q->id != (uint32_t)i || q->n_prompt < 1 || q->n_tokens > q->cap ||
		    q->n_tokens - q->n_prompt > q->max_tokens || q->n_prefill > q->n_tokens ||
		    q->n_computed >= q->n_tokens)
			return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
					  "sched check: slot %d counters: %d tokens (%d prompt, cap %d), %d computed, %d prefill",
					  i, q->n_tokens, q->n_prompt, q->cap, q->n_computed,
					  q->n_prefill);
		if (q->state == SEQ_WAITING) {
			if (q->kv_seq != -1 || q->n_computed != 0)
				return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
						  "sched check: waiting slot %d holds kv row %d, %d computed",
						  i, q->kv_seq, q->n_computed);
			continue;
		}
		int32_t len = qc_kv_seq_len(s->kv, q->kv_seq), nb;
		bool ok = qc_kv_seq_live(s->kv, q->kv_seq) &&
			  (s->plan_pending ? len >= q->n_computed && len <= q->n_tokens
					   : len == q->n_computed);
		if (!ok)
			return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
					  "sched check: running slot %d: kv row %d holds %d tokens, %d computed",
					  i, q->kv_seq, len, q->n_computed);
		const int32_t *t = qc_kv_seq_table(s->kv, q->kv_seq, &nb);
		/* a block is the row's own, a cached one, or shared by the choices of
		   one group (so by no more holders than a group has choices) */
		for (int32_t j = qc_kv_seq_first_block(s->kv, q->kv_seq); j < nb; j++)
			if (qc_kv_block_refcount(s->kv, t[j]) != 1 && !qc_kv_block_cached(s->kv, t[j]) &&
			    qc_kv_block_refcount(s->kv, t[j]) > QC_SCHED_MAX_CHOICES)
				return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
						  "sched check: block %d of slot %d is shared (refcount %d) but not cached",
						  t[j], i, qc_kv_block_refcount(s->kv, t[j]));
		n_fork += q->n_fork;
	}
	if (n_fork != s->n_reserved || s->running.n + s->n_reserved > s->cfg.max_running)
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
				  "sched check: %d rows reserved for forks (running sets sum to %d), %d running, max %d",
				  s->n_reserved, n_fork, s->running.n, s->cfg.max_running);
	rc = check_plan_slots(s, err);
	if (rc)
		return rc;
	for (int32_t r = 0; r < qc_kv_max_seqs(s->kv); r++)
		n_rows += qc_kv_seq_live(s->kv, r);
	if (n_live != s->running.n + s->waiting.n || n_live + s->n_free_slots != s->cap ||
	    n_rows != s->running.n)
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
				  "sched check: %d live slots, %d running, %d waiting, %d free slots, %d kv rows",
				  n_live, s->running.n, s->waiting.n, s->n_free_slots, n_rows);
	return QC_OK;
}
