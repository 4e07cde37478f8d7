/* scheduler.h — continuous batching over a paged KV pool (no model inside).
 *
 * Owns: the waiting and running queues, per-request token history, and the batch
 * plan of each step. Engine loop: qc_sched_step -> forward over the plan (K/V
 * reached only through plan->block_tables) -> sample each entry with need_logits
 * -> qc_sched_commit. One commit follows each step (a no-op for an empty plan).
 * Policy (vLLM-style, iteration level): running sequences first, oldest first,
 * one decode token each or the next prefill chunk; then FCFS admission of waiting
 * requests while max_running, max_batch_tokens, max_prefill_tokens allow and the
 * free blocks (less watermark_blocks) hold the request's whole prefill.
 * Chunked prefill is fair (stall-free, Sarathi-Serve): a prefill chunk never takes
 * the batch tokens the running decodes need, so every decoding stream gets its
 * token every step; and while a request waits that memory and max_running would
 * admit, running prefills together take at most half of max_prefill_tokens, so
 * a short request arriving during a long prefill is admitted in the next step
 * (its first token then comes within two steps) and the oldest prefill still
 * progresses by half a chunk a step.
 * Prefix cache (when the kv pool has it on): at admission the request takes the
 * longest run of cached full blocks matching its tokens (at most all but the
 * last token's block) and prefills only the rest; after each commit the newly
 * completed full blocks are entered. Cached blocks nobody holds count as free and
 * are evicted by the kv pool only when it needs them (kv_blocks.h).
 * Sliding window (cfg.window W > 0, the model's window on every layer): after
 * a request's forward is committed (and its full blocks entered in the cache)
 * the blocks wholly before position n_computed - W + 1 are released, so a
 * request holds at most ceil((W + chunk - 2) / block_tokens) + 1 blocks,
 * however long it runs; admission and qc_sched_add count that peak. A
 * preempted request re-prefills from its first token as without a window.
 * Out of blocks: the most recently admitted running sequence is preempted by
 * recompute (blocks freed, back to the front of the waiting queue, later
 * re-prefilled over prompt + generated tokens, from the cache where it still
 * holds them). The oldest running sequence always progresses; if it cannot fit
 * even alone it fails with QC_SCHED_FINISH_NO_MEMORY (plan->failed_ids).
 * Forking (n choices of one prompt): qc_sched_add_group queues a request that
 * reserves running rows for its choices; qc_sched_fork, between the step that
 * completes its prompt and that step's commit, opens each other choice on the
 * prompt's K/V blocks (qc_kv_seq_fork: shared, copy-on-write of the partial
 * last block), so the prompt is prefilled once for all choices.
 * Non-goals: stop strings (detokenizer calls qc_sched_finish), sampling, beam
 * search, priorities, waiting for a running request to fill the cache before
 * admitting one with the same prefix, thread safety (one engine thread owns it).
 * Reference: Yu et al., Orca (OSDI'22) iteration-level scheduling; Kwon et al.,
 * PagedAttention (SOSP'23) §4.5 preemption by recomputation; Agrawal et al.,
 * Sarathi-Serve (OSDI'24) stall-free batching.
 */
#ifndef QC_SCHEDULER_H
#define QC_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "kv_blocks.h"
#include "qc_err.h"

#define QC_SCHED_MAX_STOP_IDS 24 /* the engine's 16 caller ids + EOS/EOT/EOM */

struct qc_sched;   /* opaque */

/* Why a sequence left the scheduler. Values are stable (logged, exported). */
enum qc_sched_finish {
	QC_SCHED_FINISH_NONE = 0,         /* still live */
	QC_SCHED_FINISH_STOP = 1,         /* sampled eos_id or one of stop_ids */
	QC_SCHED_FINISH_LENGTH = 2,       /* generated max_tokens */
	QC_SCHED_FINISH_STOP_STRING = 3,  /* detokenizer matched a stop string */
	QC_SCHED_FINISH_CANCELLED = 4,    /* qc_sched_cancel */
	QC_SCHED_FINISH_NO_MEMORY = 5,    /* cannot fit the KV pool even alone */
	QC_SCHED_FINISH_ERROR = 6,        /* its own step failed (non-finite logits); others go on */
};

struct qc_sched_config {
	int32_t max_running;        /* sequences in the running set, 1..kv max_seqs */
	int32_t max_waiting;        /* queued requests before qc_sched_add refuses */
	int32_t max_batch_tokens;   /* tokens fed per step, prefill + decode */
	int32_t max_prefill_tokens; /* of those, prefill tokens per step (chunk budget): a
				       running stream waits at most one step of this many */
	int32_t watermark_blocks;   /* free blocks admission leaves for running decodes
				       (ignored when nothing runs); 0 = none */
	int32_t window;             /* tokens every layer attends back over (a sliding
				       window on all layers), 0 = unlimited: after each
				       commit the blocks behind it are released
				       (qc_kv_seq_drop_before) and admission counts a
				       request's peak, not its length */
};

struct qc_sched_request {
	const int32_t *prompt;      /* (n_prompt) token ids, copied by qc_sched_add */
	int32_t n_prompt;           /* >= 1 */
	int32_t max_tokens;         /* tokens to generate at most, >= 1 */
	int32_t eos_id;             /* finish on this token; -1 for none */
	int32_t n_stop_ids;         /* 0..QC_SCHED_MAX_STOP_IDS */
	int32_t stop_ids[QC_SCHED_MAX_STOP_IDS];  /* more finishing token ids */
	void *user;                 /* opaque, returned by qc_sched_seq_user */
};

/* One step's work. Structure of arrays, allocated once by qc_sched_new at the
 * config's maxima, so a backend can upload the arrays as they are. Owned by the
 * scheduler; valid until the next qc_sched_step. "entry" = scheduled sequence. */
struct qc_sched_plan {
	int32_t n_seqs;             /* entries this step */
	int32_t n_tokens;           /* tokens fed this step, all entries */
	int32_t n_logits;           /* entries with need_logits set */
	int32_t block_tokens;       /* tokens per KV block */
	int32_t table_stride;       /* columns of block_tables: max blocks of any entry */
	/* per token, (n_tokens); entry i owns tokens [tok_start[i], tok_start[i+1]) */
	int32_t *tokens;            /* token ids to feed */
	int32_t *positions;         /* absolute position in the sequence, from 0 */
	int32_t *slots;             /* KV slot this token's K/V is written to:
				       block_id * block_tokens + offset */
	/* per entry, (n_seqs) unless noted */
	uint64_t *seq_ids;          /* ids from qc_sched_add */
	int32_t *tok_start;         /* (n_seqs + 1) prefix sums, cu_seqlens style */
	int32_t *ctx_lens;          /* KV tokens attention sees incl. this step's */
	uint8_t *need_logits;       /* 1: sample from the entry's last token */
	int32_t *block_tables;      /* (n_seqs, table_stride) block ids, -1 padded */
	uint8_t *accepted;          /* set by commit: 1 = sampled token appended */
	uint8_t *finish;            /* set by commit: enum qc_sched_finish */
	/* block copies to do before the forward, (n_cow); none unless sequences fork */
	int32_t n_cow;
	int32_t *cow_src, *cow_dst, *cow_n_tokens;
	/* sequences this step retired with QC_SCHED_FINISH_NO_MEMORY, (n_failed) */
	int32_t n_failed;
	uint64_t *failed_ids;
};

struct qc_sched_stats {
	int32_t n_running, n_waiting;
	int32_t blocks_used, blocks_free, blocks_total;
	uint64_t n_steps;           /* qc_sched_step calls that built a plan */
	uint64_t n_preemptions;     /* running sequences sent back to waiting */
	uint64_t n_finished;        /* retired for any reason, failures included */
	uint64_t n_failed;          /* retired with QC_SCHED_FINISH_NO_MEMORY */
	uint64_t prefix_queried_tokens; /* tokens to prefill at every admission (re-admissions too) */
	uint64_t prefix_hit_tokens;     /* of those, taken from the prefix cache */
	int32_t blocks_cached;      /* K/V blocks in the prefix cache (held or idle) */
};

/* Fill cfg with defaults: max_running 64, max_waiting 1024, max_batch_tokens
 * 2048, max_prefill_tokens 2048, watermark_blocks 0. Never fails. */
void qc_sched_config_init(struct qc_sched_config *cfg);

/* Create a scheduler over kv. kv is borrowed, must be empty, must outlive the
 * scheduler, and has no other writer while attached. Allocates the plan at its
 * maxima (max_running x table width block ids). Returns QC_OK and *out, or
 * QC_EINVAL (bad config, max_running above kv max_seqs, kv not empty), QC_ENOMEM. */
int qc_sched_new(const struct qc_sched_config *cfg, struct qc_kv *kv,
		 struct qc_sched **out, struct qc_err *err);

/* Free the scheduler and every request still queued (their kv rows too).
 * Accepts NULL. kv itself is not freed. */
void qc_sched_free(struct qc_sched *s);

/* Queue a request at the back of the waiting queue; the prompt is copied. *id
 * receives a nonzero id, never reused within this scheduler's lifetime of 2^32
 * adds. Returns QC_OK, QC_EINVAL (empty prompt, max_tokens < 1, negative token,
 * too many stop ids), QC_ERANGE (prompt + max_tokens longer than the KV table
 * allows, or prompt alone larger than the whole pool, or waiting queue full;
 * the message says which), QC_ENOMEM. */
int qc_sched_add(struct qc_sched *s, const struct qc_sched_request *req, uint64_t *id,
		 struct qc_err *err);

/* Request ids are (serial << 32) | slot with slot < 2^QC_SCHED_ID_SLOT_BITS, so
 * an id with any of bits QC_SCHED_ID_SLOT_BITS..31 set is never issued (the
 * engine names choices not yet forked with such ids). */
#define QC_SCHED_ID_SLOT_BITS 20

/* Most choices one group may ask for (qserve's n / best_of limit). */
#define QC_SCHED_MAX_CHOICES 16

/* qc_sched_add for a request that will fork into n_choices sequences (1..
 * QC_SCHED_MAX_CHOICES, at most max_running): it is admitted only when the
 * running set has room for all of them (and the free pool for its prompt plus
 * one copy-on-write block per extra choice), and those rows stay reserved
 * until qc_sched_fork. n_choices 1 is qc_sched_add. Returns qc_sched_add's
 * codes, and QC_EINVAL for n_choices out of range (the message says which). */
int qc_sched_add_group(struct qc_sched *s, const struct qc_sched_request *req, int32_t n_choices,
		       uint64_t *id, struct qc_err *err);

/* One choice opened by qc_sched_fork. */
struct qc_sched_child {
	int32_t first_token;        /* in: the choice's token sampled from the prompt's logits */
	void *user;                 /* in: returned by qc_sched_seq_user */
	uint64_t id;                /* out: the choice's request id */
	enum qc_sched_finish finish; /* out: NONE, or STOP / LENGTH when first_token ends it
					(then id is already retired) */
};

/* Fork plan entry `entry` (of the pending plan: after qc_sched_step, before
 * qc_sched_commit) into n_kids more choices. The entry must belong to a group
 * request (qc_sched_add_group) whose forward in this plan completes its prompt
 * (need_logits, nothing generated yet), and n_kids <= its reserved choices - 1
 * (unused reservations are given back). Each child gets the parent's blocks
 * (refcount + 1; no K/V is computed again: the in-flight forward writes them),
 * the prompt plus kids[i].first_token as history, and the parent's eos, stop
 * ids and max_tokens; it is appended to the running set. The parent itself is
 * committed as usual. Returns QC_OK, QC_EINVAL (no plan pending, bad entry, not
 * a group at its prompt's end, too many kids, negative token; nothing changed). */
int qc_sched_fork(struct qc_sched *s, const struct qc_sched_plan *plan, int32_t entry,
		  struct qc_sched_child *kids, int32_t n_kids, struct qc_err *err);

/* Build the next batch. *plan points at the scheduler's plan (n_seqs may be 0
 * when nothing can run). KV slots for every planned token are reserved here.
 * Returns QC_OK or QC_EINVAL when the previous plan was not committed. */
int qc_sched_step(struct qc_sched *s, struct qc_sched_plan **plan, struct qc_err *err);

/* Account for the forward over plan (which must be the last step's plan; an
 * empty plan commits as a no-op, a plan committed twice is refused).
 * sampled (n_seqs entries, indexed like plan entries; NULL allowed when
 * n_logits == 0) holds the token sampled for each entry with need_logits; other
 * entries are ignored. Appends tokens, checks eos/stop ids and max_tokens, and
 * retires finished sequences at once, freeing their blocks; results land in
 * plan->accepted and plan->finish. Entries whose sequence was cancelled/finished
 * after the step are skipped (accepted = 0). Returns QC_OK, QC_EINVAL (stale or
 * committed plan, negative sampled token; nothing changed). */
int qc_sched_commit(struct qc_sched *s, struct qc_sched_plan *plan, const int32_t *sampled,
		    struct qc_err *err);

/* Retire a live request now with reason (STOP_STRING from the detokenizer, or
 * any other finish value except NONE), freeing its blocks. Blocks freed between
 * step and commit are reused no earlier than the next step, so an in-flight
 * forward may still write them harmlessly. Returns QC_OK, QC_ENOTFOUND (unknown
 * or already retired id), QC_EINVAL (reason NONE or out of range). */
int qc_sched_finish(struct qc_sched *s, uint64_t id, enum qc_sched_finish reason,
		    struct qc_err *err);

/* qc_sched_finish(s, id, QC_SCHED_FINISH_CANCELLED, err); valid at any time. */
int qc_sched_cancel(struct qc_sched *s, uint64_t id, struct qc_err *err);

/* True while any request is waiting or running. */
bool qc_sched_has_work(const struct qc_sched *s);

/* Snapshot counters into *out. */
void qc_sched_get_stats(const struct qc_sched *s, struct qc_sched_stats *out);

/* Live request lookups; NULL / false for unknown or retired ids. Token history
 * (prompt then generated, *n_tokens long, *n_prompt of them prompt) stays at the
 * same address until the request retires. */
void *qc_sched_seq_user(const struct qc_sched *s, uint64_t id);
const int32_t *qc_sched_seq_tokens(const struct qc_sched *s, uint64_t id,
				   int32_t *n_tokens, int32_t *n_prompt);
bool qc_sched_seq_live(const struct qc_sched *s, uint64_t id);

/* Verify the scheduler's and the KV pool's invariants (O(live requests +
 * blocks)). Returns QC_OK or QC_EFORMAT naming the first violation. */
int qc_sched_check(const struct qc_sched *s, struct qc_err *err);

/* "none", "stop", "length", "stop_string", "cancelled", "no_memory", "error". */
const char *qc_sched_finish_name(enum qc_sched_finish reason);

#endif
