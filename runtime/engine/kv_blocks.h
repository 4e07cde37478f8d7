/* kv_blocks.h — paged KV block manager (PagedAttention bookkeeping, no data).
 *
 * Owns: a pool of fixed-size block ids sized once from a memory budget, the free
 * list, per-block reference counts and per-sequence block tables. The K/V bytes
 * live elsewhere (the backend allocates n_blocks * block_bytes); attention reaches
 * them only through the int32 block tables kept here.
 * Prefix cache (cfg.prefix_cache): a full block whose K/V is written
 * (qc_kv_seq_cache) is keyed by XXH3-128(predecessor's key || its tokens, seed =
 * cfg.prefix_salt: the caller's model identity and K/V dtype); a new sequence
 * takes the longest run of cached blocks (qc_kv_prefix_match, qc_kv_seq_attach).
 * A match also compares the block's tokens and its predecessor's (id, generation),
 * so it is exact whatever the hash does; the 128-bit key only finds candidates.
 * Cached blocks no table names are "idle": they stay on an LRU, count as free,
 * and are evicted (least recently released first) only when no plain free block
 * is left. Cached blocks are full, hence never written again.
 * Non-goals: the K/V data itself, which request to preempt (the scheduler does),
 * persistence of the cache, thread safety (one owner thread).
 * Invariants: free + idle + used == total; refcount[b] == number of live tables
 * naming b; a refcount-0 block is on the free list (uncached) or the LRU (cached);
 * a table holds exactly ceil(len / block_tokens) columns, of which the first
 * seq_lo may be released (QC_KV_BLOCK_DROPPED: positions no layer's window
 * reaches any more, qc_kv_seq_drop_before) and the rest name blocks; a block never
 * appears twice in one table. Nothing is allocated after qc_kv_new.
 * References: Kwon et al., "Efficient Memory Management for LLM Serving with
 * PagedAttention" (SOSP'23) §4.2-4.4; vLLM BlockSpaceManager and automatic prefix
 * caching (behaviour only).
 */
#ifndef QC_KV_BLOCKS_H
#define QC_KV_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>

#include "qc_err.h"

#define QC_KV_BLOCK_TOKENS_DEFAULT 16
#define QC_KV_BLOCK_TOKENS_MAX 1024
#define QC_KV_MAX_BLOCKS (1 << 24)     /* 16M ids: bookkeeping stays under 200 MiB
					 (prefix cache: + 4 * block_tokens bytes a block) */
#define QC_KV_MAX_SEQS 65536
/* A released table column (qc_kv_seq_drop_before): columns keep their indexing
 * (column i holds positions i * block_tokens ..), so attention finds position j
 * where it always did; nothing may read a released column, which lies wholly
 * before every window of the sequence's next queries. Distinct from the -1 past
 * the last column so qc_kv_check can tell them apart. */
#define QC_KV_BLOCK_DROPPED (-2)

struct qc_kv;   /* opaque */

struct qc_kv_config {
	uint64_t budget_bytes;   /* bytes of (device) memory granted to the K/V pool */
	uint64_t block_bytes;    /* bytes one block occupies; see qc_kv_block_bytes */
	int32_t block_tokens;    /* tokens per block, 1..QC_KV_BLOCK_TOKENS_MAX */
	int32_t max_seqs;        /* live sequences at once (block-table rows) */
	int32_t max_seq_tokens;  /* longest sequence in tokens; sets the table width */
	bool prefix_cache;       /* keep full blocks for reuse by later sequences */
	uint64_t prefix_salt;    /* seeds every key: whatever else changes a block's
				    K/V for the same tokens (model, K/V dtype) */
};

/* One copy-on-write the backend must perform before the forward that writes the
 * new slots: copy token rows [0, n_tokens) of block src into block dst, for every
 * layer, K and V. */
struct qc_kv_cow {
	int32_t src;        /* block id still shared with another sequence */
	int32_t dst;        /* fresh block now in this sequence's table */
	int32_t n_tokens;   /* valid leading token rows of src to copy */
};

/* Fill cfg with defaults: block_tokens 16, max_seqs 256, max_seq_tokens 4096,
 * prefix cache off, budget and block_bytes 0 (the caller must set both). Never fails. */
void qc_kv_config_init(struct qc_kv_config *cfg);

/* *out = n_layers * 2 (K and V) * n_kv_heads * head_dim * elem_bytes * block_tokens.
 * Returns QC_OK, QC_EINVAL for a zero or negative factor, QC_ERANGE on overflow. */
int qc_kv_block_bytes(int32_t n_layers, int32_t n_kv_heads, int32_t head_dim,
		      uint32_t elem_bytes, int32_t block_tokens, uint64_t *out,
		      struct qc_err *err);

/* Create the manager: n_blocks = min(budget_bytes / block_bytes, QC_KV_MAX_BLOCKS,
 * INT32_MAX / block_tokens); table width = ceil(max_seq_tokens / block_tokens),
 * which may exceed n_blocks. All bookkeeping is allocated here and nowhere else.
 * Returns QC_OK and *out, or QC_EINVAL (bad config, budget below one block),
 * QC_ENOMEM. *out is NULL on failure. */
int qc_kv_new(const struct qc_kv_config *cfg, struct qc_kv **out, struct qc_err *err);

/* Release everything. Accepts NULL. Live sequences are dropped with it. */
void qc_kv_free(struct qc_kv *kv);

/* Pool geometry and occupancy; kv must not be NULL. used counts blocks with
 * refcount > 0, so a block shared by several sequences counts once; free counts
 * plain free blocks and idle cached ones (evicted on demand). */
int32_t qc_kv_blocks_total(const struct qc_kv *kv);
int32_t qc_kv_blocks_free(const struct qc_kv *kv);
int32_t qc_kv_blocks_used(const struct qc_kv *kv);
/* Blocks in the prefix cache, and those of them no table names (idle). */
int32_t qc_kv_blocks_cached(const struct qc_kv *kv);
int32_t qc_kv_blocks_idle(const struct qc_kv *kv);
bool qc_kv_prefix_cache_on(const struct qc_kv *kv);
/* True when b is in the prefix cache (never written again while it is). */
bool qc_kv_block_cached(const struct qc_kv *kv, int32_t b);
int32_t qc_kv_block_tokens(const struct qc_kv *kv);
int32_t qc_kv_max_seqs(const struct qc_kv *kv);
/* Columns of a block table: the most blocks one sequence can hold. */
int32_t qc_kv_table_width(const struct qc_kv *kv);
/* Longest sequence the tables can describe: table_width * block_tokens. */
int32_t qc_kv_max_seq_tokens(const struct qc_kv *kv);
/* Reference count of block b, or -1 when b is out of range. */
int32_t qc_kv_block_refcount(const struct qc_kv *kv, int32_t b);

/* Open an empty sequence (no blocks) and return its id in *seq, 0..max_seqs-1.
 * Returns QC_OK or QC_ERANGE when all max_seqs rows are live. */
int qc_kv_seq_new(struct qc_kv *kv, int32_t *seq, struct qc_err *err);

/* Return every block of seq at once (decrement; refcount 0 goes to the free list)
 * and close the row. Accepts a dead or out-of-range seq as a no-op. */
void qc_kv_seq_free(struct qc_kv *kv, int32_t seq);

/* Fork: *child gets a new row whose table names the same blocks as parent (each
 * refcount + 1) and the same length. Copy-on-write: full shared blocks are never
 * written again (the cache is append-only), so only a shared, partially filled
 * last block must be copied, and that happens lazily in qc_kv_seq_append of
 * whichever sequence writes into it first, which reports the copy. Freeing either
 * side leaves the other intact. Returns QC_OK, QC_EINVAL (dead parent), QC_ERANGE. */
int qc_kv_seq_fork(struct qc_kv *kv, int32_t parent, int32_t *child, struct qc_err *err);

/* True when seq names a live row. */
bool qc_kv_seq_live(const struct qc_kv *kv, int32_t seq);

/* Tokens stored for seq (0 for a dead row). */
int32_t qc_kv_seq_len(const struct qc_kv *kv, int32_t seq);

/* seq's block table: *n_blocks ids, valid until the next append/free/fork on kv.
 * NULL with *n_blocks = 0 for a dead row. The row is padded with -1 to the width;
 * its first qc_kv_seq_first_block columns are QC_KV_BLOCK_DROPPED. */
const int32_t *qc_kv_seq_table(const struct qc_kv *kv, int32_t seq, int32_t *n_blocks);

/* New blocks (copy-on-write included) that appending n tokens to seq needs;
 * -1 when seq is dead, n < 0, or the result would exceed the table width. */
int32_t qc_kv_seq_blocks_needed(const struct qc_kv *kv, int32_t seq, int32_t n);

/* Most tokens seq can take while allocating at most max_new_blocks new blocks
 * (copy-on-write counted), capped by the table width. 0 for a dead row. */
int32_t qc_kv_seq_room(const struct qc_kv *kv, int32_t seq, int32_t max_new_blocks);

/* Reserve the next n token slots of seq, allocating blocks as needed, all or
 * nothing. slots (n entries, caller-owned, may be NULL when n == 0) receives
 * slot = block_id * block_tokens + offset for positions len .. len+n-1. When the
 * last block was shared and partial, it is replaced by a fresh block and *cow
 * describes the copy (cow->src = -1 when none; cow may be NULL only if the caller
 * never forks). Returns QC_OK, QC_EINVAL (dead seq, n < 0), QC_ERANGE (past the
 * table width) or QC_ENOMEM (not enough free blocks; nothing changed). */
int qc_kv_seq_append(struct qc_kv *kv, int32_t seq, int32_t n, int32_t *slots,
		     struct qc_kv_cow *cow, struct qc_err *err);

/* Sliding windows (all layers attend to the last W positions only): the next
 * query of seq is at its length or later, so positions below lo = len - W + 1
 * are never read again. Release every block of seq lying wholly below lo
 * (clamped to the length): its column becomes QC_KV_BLOCK_DROPPED and its
 * refcount drops by one, so a block another sequence (fork) or the prefix cache
 * holds stays theirs (idle cached blocks go to the LRU, plain ones to the free
 * list). Columns keep their indexing; length, appends and copy-on-write are
 * unchanged. Called after every forward, it bounds what a sequence holds while
 * n new tokens are written to ceil((W + n - 2) / block_tokens) + 1 blocks (the
 * positions len - W + 1 .. len + n - 1; decode, n = 1: ceil((W - 1) / bt) + 1),
 * whatever the length (a prefix-cache attach holds its blocks until then).
 * Returns the blocks released (0 for a dead row or lo <= 0). */
int32_t qc_kv_seq_drop_before(struct qc_kv *kv, int32_t seq, int32_t lo);

/* Columns of seq released by qc_kv_seq_drop_before (its first live column); 0 for a dead row. */
int32_t qc_kv_seq_first_block(const struct qc_kv *kv, int32_t seq);

/* Blocks seq's table still names (columns less released ones); 0 for a dead row. */
int32_t qc_kv_seq_blocks_held(const struct qc_kv *kv, int32_t seq);

/* Longest run of cached blocks matching tokens[0..n_tokens) from the start, at
 * most (n_tokens - 1) / block_tokens of them (the last token is always left to
 * compute, for its logits) and the table width. ids (table width entries,
 * caller-owned) receives them; *n_idle how many of them are idle (attaching
 * those takes them off the free count). Returns the count; 0 with the cache off.
 * Changes nothing (the matched blocks may be evicted until attached). */
int32_t qc_kv_prefix_match(struct qc_kv *kv, const int32_t *tokens, int32_t n_tokens,
			   int32_t *ids, int32_t *n_idle);

/* Put n blocks just returned by qc_kv_prefix_match at the start of the live,
 * empty seq (refcount + 1 each; idle ones leave the LRU); its length becomes
 * n * block_tokens. Returns QC_OK or QC_EINVAL (seq not live and empty, an id
 * not cached; nothing changed). */
int qc_kv_seq_attach(struct qc_kv *kv, int32_t seq, const int32_t *ids, int32_t n,
		     struct qc_err *err);

/* Enter into the cache every full block of seq below min(n_tokens, its length)
 * not entered yet; tokens[0..n_tokens) are the tokens seq's K/V was computed
 * from. Call only once the K/V of those tokens is written (after the forward).
 * A block whose twin is already cached stays private. No-op with the cache off. */
void qc_kv_seq_cache(struct qc_kv *kv, int32_t seq, const int32_t *tokens, int32_t n_tokens);

/* Evict every idle cached block now (tests; a model or dtype change). */
void qc_kv_cache_drop_idle(struct qc_kv *kv);

/* Split a slot into block id and offset. */
static inline int32_t qc_kv_slot_block(const struct qc_kv *kv, int32_t slot)
{
	return slot / qc_kv_block_tokens(kv);
}

static inline int32_t qc_kv_slot_offset(const struct qc_kv *kv, int32_t slot)
{
	return slot % qc_kv_block_tokens(kv);
}

/* Verify every invariant above from scratch (O(blocks + table entries)).
 * Returns QC_OK or QC_EFORMAT naming the first violation. For tests and debug
 * builds; a violation is a bug in this module or memory corruption. */
int qc_kv_check(const struct qc_kv *kv, struct qc_err *err);

#endif
