/* test_kv_blocks.c — paged KV block manager: sizing, slot mapping, refcounts,
 * copy-on-write after fork, all-or-nothing appends, and a randomized run against
 * a shadow K/V store that would expose any write landing in another live
 * sequence's block. Includes the .c to corrupt internals so qc_kv_check must trip.
 * Expected sizes come from published model figures (Llama-2-7B fp16: 0.5 MiB of
 * K/V per token; Llama-3-8B with GQA: 128 KiB per token); slot values are worked
 * out by hand from the layout rule slot = block * block_tokens + offset.
 */
#include "kv_blocks.c"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static struct qc_kv *make_kv(int32_t n_blocks, int32_t bt, int32_t max_seqs, int32_t max_tokens)
{
	struct qc_kv_config c;
	struct qc_kv *kv = NULL;
	struct qc_err err = { 0 };
	qc_kv_config_init(&c);
	c.block_bytes = 1000;
	c.budget_bytes = (uint64_t)n_blocks * 1000 + 999;   /* remainder must be ignored */
	c.block_tokens = bt;
	c.max_seqs = max_seqs;
	c.max_seq_tokens = max_tokens;
	int rc = qc_kv_new(&c, &kv, &err);
	CHECK(rc == QC_OK && kv, "qc_kv_new: %s", err.msg);
	return kv;
}

static bool kv_ok(const struct qc_kv *kv)
{
	struct qc_err err = { 0 };
	int rc = qc_kv_check(kv, &err);
	if (rc)
		fprintf(stderr, "  qc_kv_check: %s\n", err.msg);
	return rc == QC_OK && qc_kv_blocks_free(kv) + qc_kv_blocks_used(kv) == qc_kv_blocks_total(kv);
}

static void block_bytes_match_published_model_sizes(void)
{
	uint64_t b = 0;
	struct qc_err err = { 0 };
	/* Llama-2-7B: 32 layers, 32 KV heads, head_dim 128, fp16 -> 512 KiB/token */
	CHECK(qc_kv_block_bytes(32, 32, 128, 2, 16, &b, &err) == QC_OK && b == 16u * 512 * 1024,
	      "llama-2-7b block bytes %llu", (unsigned long long)b);
	/* Llama-3-8B: 32 layers, 8 KV heads (GQA), head_dim 128, fp16 -> 128 KiB/token */
	CHECK(qc_kv_block_bytes(32, 8, 128, 2, 16, &b, &err) == QC_OK && b == 16u * 128 * 1024,
	      "llama-3-8b block bytes %llu", (unsigned long long)b);
	CHECK(qc_kv_block_bytes(0, 8, 128, 2, 16, &b, &err) == QC_EINVAL, "zero layers accepted");
	CHECK(qc_kv_block_bytes(32, 8, 128, 0, 16, &b, &err) == QC_EINVAL, "zero elem accepted");
	CHECK(qc_kv_block_bytes(INT32_MAX, INT32_MAX, INT32_MAX, 8, 1024, &b, &err) == QC_ERANGE,
	      "overflow not caught: %llu", (unsigned long long)b);
}

static void new_sizes_pool_from_budget_and_rejects_bad_config(void)
{
	struct qc_kv_config c;
	struct qc_kv *kv = NULL;
	struct qc_err err = { 0 };

	qc_kv_config_init(&c);
	CHECK(c.block_tokens == 16, "default block tokens %d", c.block_tokens);
	c.block_bytes = 8u << 20;
	c.budget_bytes = (10u << 23) + (4u << 20);   /* 10.5 blocks */
	CHECK(qc_kv_new(&c, &kv, &err) == QC_OK, "new: %s", err.msg);
	CHECK(kv && qc_kv_blocks_total(kv) == 10, "10.5 blocks of budget gave %d",
	      kv ? qc_kv_blocks_total(kv) : -1);
	CHECK(kv && qc_kv_blocks_free(kv) == 10 && qc_kv_blocks_used(kv) == 0, "fresh pool not free");
	CHECK(kv && qc_kv_table_width(kv) == 4096 / 16, "width from max_seq_tokens: %d",
	      kv ? qc_kv_table_width(kv) : -1);
	qc_kv_free(kv);

	c.budget_bytes = c.block_bytes - 1;
	CHECK(qc_kv_new(&c, &kv, &err) == QC_EINVAL && !kv, "budget below a block accepted");
	c.budget_bytes = c.block_bytes;
	c.block_tokens = 0;
	CHECK(qc_kv_new(&c, &kv, &err) == QC_EINVAL && !kv, "block_tokens 0 accepted");
	c.block_tokens = 16;
	c.max_seqs = 0;
	CHECK(qc_kv_new(&c, &kv, &err) == QC_EINVAL && !kv, "max_seqs 0 accepted");
	c.max_seqs = 4;
	c.block_bytes = 0;
	CHECK(qc_kv_new(&c, &kv, &err) == QC_EINVAL && !kv, "block_bytes 0 accepted");
	qc_kv_free(NULL);
}

static bool table_is(const struct qc_kv *kv, int32_t seq, const int32_t *want, int32_t n)
{
	int32_t nb;
	const int32_t *t = qc_kv_seq_table(kv, seq, &nb);
	if (nb != n)
		return false;
	for (int32_t i = 0; i < n; i++)
		if (t[i] != want[i])
			return false;
	return true;
}

static void append_maps_slots_block_by_block(void)
{
	struct qc_kv *kv = make_kv(8, 4, 4, 64);
	struct qc_err err = { 0 };
	int32_t a = -1, b = -1, slots[8];
	struct qc_kv_cow cow;

	CHECK(qc_kv_seq_new(kv, &a, &err) == QC_OK && qc_kv_seq_new(kv, &b, &err) == QC_OK,
	      "seq_new: %s", err.msg);
	CHECK(qc_kv_seq_blocks_needed(kv, a, 5) == 2, "5 tokens need 2 blocks of 4");
	CHECK(qc_kv_seq_append(kv, a, 5, slots, &cow, &err) == QC_OK, "append: %s", err.msg);
	/* blocks 0 and 1: slots 0..3, then block 1 offset 0 = 4 */
	CHECK(slots[0] == 0 && slots[3] == 3 && slots[4] == 4, "a slots %d %d %d", slots[0],
	      slots[3], slots[4]);
	CHECK(cow.src == -1, "unexpected copy-on-write");
	CHECK(qc_kv_seq_append(kv, b, 2, slots, &cow, &err) == QC_OK, "append b");
	CHECK(slots[0] == 8 && slots[1] == 9, "b lands in block 2: %d %d", slots[0], slots[1]);
	CHECK(qc_kv_seq_blocks_needed(kv, a, 3) == 0, "3 more fit the partial block");
	CHECK(qc_kv_seq_append(kv, a, 3, slots, &cow, &err) == QC_OK, "append a 3");
	CHECK(slots[0] == 5 && slots[1] == 6 && slots[2] == 7, "a fills block 1: %d %d %d",
	      slots[0], slots[1], slots[2]);
	CHECK(qc_kv_seq_append(kv, a, 1, slots, &cow, &err) == QC_OK && slots[0] == 12,
	      "a opens block 3: slot %d", slots[0]);
	CHECK(table_is(kv, a, (const int32_t[]){ 0, 1, 3 }, 3), "a table");
	CHECK(qc_kv_seq_len(kv, a) == 9 && qc_kv_seq_len(kv, b) == 2, "lengths");
	CHECK(qc_kv_slot_block(kv, 12) == 3 && qc_kv_slot_offset(kv, 7) == 3, "slot split");
	CHECK(qc_kv_blocks_used(kv) == 4 && qc_kv_blocks_free(kv) == 4, "used %d",
	      qc_kv_blocks_used(kv));
	CHECK(kv_ok(kv), "invariants after appends");

	qc_kv_seq_free(kv, a);
	CHECK(qc_kv_blocks_used(kv) == 1 && qc_kv_blocks_free(kv) == 7,
	      "free returns all 3 blocks at once: used %d", qc_kv_blocks_used(kv));
	CHECK(!qc_kv_seq_live(kv, a) && qc_kv_seq_len(kv, a) == 0, "a still live");
	qc_kv_seq_free(kv, a);   /* double free is a no-op */
	qc_kv_seq_free(kv, 999);
	CHECK(kv_ok(kv), "invariants after free");
	CHECK(qc_kv_seq_append(kv, a, 1, slots, &cow, &err) == QC_EINVAL, "append to dead row");
	qc_kv_free(kv);
}

static void append_is_all_or_nothing_and_bounded(void)
{
	struct qc_kv *kv = make_kv(4, 4, 2, 12);   /* width 3 blocks */
	struct qc_err err = { 0 };
	int32_t a, b, c, slots[16];
	struct qc_kv_cow cow;

	CHECK(qc_kv_table_width(kv) == 3 && qc_kv_max_seq_tokens(kv) == 12, "width %d",
	      qc_kv_table_width(kv));
	qc_kv_seq_new(kv, &a, &err);
	qc_kv_seq_new(kv, &b, &err);
	CHECK(qc_kv_seq_new(kv, &c, &err) == QC_ERANGE && c == -1, "third row of 2 granted");
	CHECK(qc_kv_seq_append(kv, a, 13, slots, &cow, &err) == QC_ERANGE, "past width accepted");
	CHECK(qc_kv_seq_blocks_needed(kv, a, 13) == -1, "needed past width");
	CHECK(qc_kv_seq_append(kv, a, 10, slots, &cow, &err) == QC_OK, "10 tokens");
	CHECK(qc_kv_seq_room(kv, b, 1) == 4, "room of an empty row with 1 block");
	CHECK(qc_kv_seq_room(kv, a, 1) == 2, "room capped by width: %d", qc_kv_seq_room(kv, a, 1));
	CHECK(qc_kv_seq_append(kv, b, 5, slots, &cow, &err) == QC_ENOMEM, "5 tokens with 1 block free");
	CHECK(qc_kv_seq_len(kv, b) == 0 && qc_kv_blocks_free(kv) == 1, "failed append changed state");
	CHECK(kv_ok(kv), "invariants after refused append");
	CHECK(qc_kv_seq_append(kv, b, 4, slots, &cow, &err) == QC_OK, "4 tokens into last block");
	CHECK(qc_kv_blocks_free(kv) == 0 && qc_kv_seq_room(kv, b, 0) == 0, "pool full");
	qc_kv_seq_free(kv, b);
	CHECK(qc_kv_seq_new(kv, &c, &err) == QC_OK, "row reused after free");
	CHECK(qc_kv_seq_append(kv, c, 0, NULL, NULL, &err) == QC_OK, "empty append");
	CHECK(kv_ok(kv), "invariants at the end");
	qc_kv_free(kv);
}

static void fork_shares_blocks_and_copies_partial_last_on_write(void)
{
	struct qc_kv *kv = make_kv(8, 4, 4, 64);
	struct qc_err err = { 0 };
	int32_t p, ch, ch2, slots[8];
	struct qc_kv_cow cow;

	qc_kv_seq_new(kv, &p, &err);
	qc_kv_seq_append(kv, p, 6, slots, &cow, &err);         /* blocks 0,1; block 1 half full */
	CHECK(qc_kv_seq_fork(kv, p, &ch, &err) == QC_OK, "fork: %s", err.msg);
	CHECK(qc_kv_block_refcount(kv, 0) == 2 && qc_kv_block_refcount(kv, 1) == 2,
	      "refcounts after fork %d %d", qc_kv_block_refcount(kv, 0), qc_kv_block_refcount(kv, 1));
	CHECK(qc_kv_blocks_used(kv) == 2, "fork allocated blocks");
	CHECK(qc_kv_seq_len(kv, ch) == 6, "child length");
	CHECK(kv_ok(kv), "invariants after fork");

	CHECK(qc_kv_seq_blocks_needed(kv, ch, 1) == 1, "write into shared partial block needs a copy");
	CHECK(qc_kv_seq_room(kv, ch, 0) == 0 && qc_kv_seq_room(kv, ch, 1) == 2, "room with copy");
	CHECK(qc_kv_seq_append(kv, ch, 1, slots, NULL, &err) == QC_EINVAL,
	      "copy-on-write needed but caller took no cow record");
	CHECK(qc_kv_seq_append(kv, ch, 1, slots, &cow, &err) == QC_OK, "child append");
	CHECK(cow.src == 1 && cow.dst == 2 && cow.n_tokens == 2, "cow %d->%d x%d", cow.src,
	      cow.dst, cow.n_tokens);
	CHECK(slots[0] == 2 * 4 + 2, "child's token 6 goes to block 2 offset 2: %d", slots[0]);
	CHECK(table_is(kv, ch, (const int32_t[]){ 0, 2 }, 2), "child table");
	CHECK(table_is(kv, p, (const int32_t[]){ 0, 1 }, 2), "parent table untouched");
	CHECK(qc_kv_block_refcount(kv, 0) == 2 && qc_kv_block_refcount(kv, 1) == 1 &&
	      qc_kv_block_refcount(kv, 2) == 1, "refcounts after cow");
	CHECK(qc_kv_seq_append(kv, p, 1, slots, &cow, &err) == QC_OK && cow.src == -1 &&
	      slots[0] == 6, "parent writes in place once unshared: slot %d cow %d", slots[0], cow.src);

	/* a full shared last block needs no copy */
	qc_kv_seq_append(kv, p, 1, slots, &cow, &err);          /* p len 8, blocks 0,1 full */
	CHECK(qc_kv_seq_fork(kv, p, &ch2, &err) == QC_OK, "second fork");
	CHECK(qc_kv_seq_blocks_needed(kv, ch2, 1) == 1, "one fresh block, no copy");
	CHECK(qc_kv_seq_append(kv, ch2, 1, slots, &cow, &err) == QC_OK && cow.src == -1,
	      "copy of a full block");
	CHECK(qc_kv_block_refcount(kv, 0) == 3, "block 0 shared three ways: %d",
	      qc_kv_block_refcount(kv, 0));
	CHECK(kv_ok(kv), "invariants with three sharers");

	qc_kv_seq_free(kv, p);
	CHECK(qc_kv_block_refcount(kv, 0) == 2 && qc_kv_block_refcount(kv, 1) == 1,
	      "freeing the parent keeps shared blocks: %d %d", qc_kv_block_refcount(kv, 0),
	      qc_kv_block_refcount(kv, 1));
	CHECK(qc_kv_seq_len(kv, ch) == 7 && kv_ok(kv), "child intact");
	CHECK(qc_kv_seq_fork(kv, p, &ch2, &err) == QC_EINVAL, "fork of a dead row");
	qc_kv_seq_free(kv, ch);
	for (int32_t r = 0; r < 4; r++)
		qc_kv_seq_free(kv, r);
	CHECK(qc_kv_blocks_used(kv) == 0 && kv_ok(kv), "all returned: used %d", qc_kv_blocks_used(kv));
	qc_kv_free(kv);
}


static struct qc_kv *make_kv_pc(int32_t n_blocks, int32_t bt, int32_t max_seqs, int32_t max_tokens,
				uint64_t salt)
{
	struct qc_kv_config c;
	struct qc_kv *kv = NULL;
	struct qc_err err = { 0 };
	qc_kv_config_init(&c);
	c.block_bytes = 1000;
	c.budget_bytes = (uint64_t)n_blocks * 1000;
	c.block_tokens = bt;
	c.max_seqs = max_seqs;
	c.max_seq_tokens = max_tokens;
	c.prefix_cache = true;
	c.prefix_salt = salt;
	int rc = qc_kv_new(&c, &kv, &err);
	CHECK(rc == QC_OK && kv, "qc_kv_new with prefix cache: %s", err.msg);
	return kv;
}

/* Open a row holding tokens[0..n) (as if computed and committed) and cache it. */
static int32_t put_seq(struct qc_kv *kv, const int32_t *tokens, int32_t n)
{
	struct qc_err err = { 0 };
	int32_t seq, slots[64];
	struct qc_kv_cow cow;
	CHECK(qc_kv_seq_new(kv, &seq, &err) == QC_OK, "seq_new: %s", err.msg);
	CHECK(qc_kv_seq_append(kv, seq, n, slots, &cow, &err) == QC_OK, "append: %s", err.msg);
	qc_kv_seq_cache(kv, seq, tokens, n);
	return seq;
}

/* Hand-worked: 4-token blocks, a 10-token sequence caches its 2 full blocks (not
 * the partial third); matches stop at the first differing block, leave the last
 * token's block alone, and are exact (a token change in block 0 kills both). */
static void prefix_match_takes_full_blocks_only(void)
{
	struct qc_kv *kv = make_kv_pc(8, 4, 4, 64, 7);
	struct qc_err err = { 0 };
	int32_t t[12] = { 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 }, ids[16], idle;

	int32_t a = put_seq(kv, t, 10);
	CHECK(qc_kv_blocks_cached(kv) == 2 && qc_kv_blocks_idle(kv) == 0,
	      "10 tokens of 4-token blocks: %d cached, %d idle", qc_kv_blocks_cached(kv),
	      qc_kv_blocks_idle(kv));
	const int32_t *ta;
	int32_t nb;
	ta = qc_kv_seq_table(kv, a, &nb);
	CHECK(qc_kv_prefix_match(kv, t, 12, ids, &idle) == 2 && ids[0] == ta[0] && ids[1] == ta[1] &&
	      idle == 0, "12-token query should hit a's 2 blocks");
	CHECK(qc_kv_prefix_match(kv, t, 9, ids, &idle) == 2, "9 tokens: 2 blocks, 1 left to feed");
	CHECK(qc_kv_prefix_match(kv, t, 8, ids, &idle) == 1, "8 tokens: the last block holds the fed token");
	CHECK(qc_kv_prefix_match(kv, t, 1, ids, &idle) == 0, "1 token: nothing to take");
	int32_t u[12];
	memcpy(u, t, sizeof u);
	u[5] = 99;
	CHECK(qc_kv_prefix_match(kv, u, 12, ids, &idle) == 1, "second block differs: 1 hit");
	u[5] = 10;
	u[0] = 99;
	CHECK(qc_kv_prefix_match(kv, u, 12, ids, &idle) == 0, "first block differs: no hit");

	qc_kv_seq_free(kv, a);
	CHECK(qc_kv_blocks_idle(kv) == 2 && qc_kv_blocks_used(kv) == 0 && qc_kv_blocks_free(kv) == 8,
	      "freed cached blocks must be idle and count as free");
	CHECK(kv_ok(kv), "after free");
	int32_t b;
	qc_kv_seq_new(kv, &b, &err);
	int32_t n = qc_kv_prefix_match(kv, t, 12, ids, &idle);
	CHECK(n == 2 && idle == 2, "idle hits: %d (%d idle)", n, idle);
	CHECK(qc_kv_seq_attach(kv, b, ids, n, &err) == QC_OK, "attach: %s", err.msg);
	CHECK(qc_kv_seq_len(kv, b) == 8 && qc_kv_blocks_idle(kv) == 0 && qc_kv_blocks_used(kv) == 2,
	      "attach: len %d", qc_kv_seq_len(kv, b));
	CHECK(qc_kv_seq_attach(kv, b, ids, n, &err) == QC_EINVAL, "attach to a non-empty row");
	int32_t slots[4];
	struct qc_kv_cow cow;
	CHECK(qc_kv_seq_append(kv, b, 4, slots, &cow, &err) == QC_OK && cow.src < 0 &&
	      slots[0] / 4 != ids[0] && slots[0] / 4 != ids[1], "append after a hit writes a fresh block");
	qc_kv_seq_cache(kv, b, t, 12);
	CHECK(qc_kv_blocks_cached(kv) == 3, "third block entered after the hit: %d",
	      qc_kv_blocks_cached(kv));
	CHECK(kv_ok(kv), "after attach");

	/* the salt (model identity, K/V dtype) seeds every key: the same tokens key
	 * differently under another salt, identically under the same one */
	struct qc_kv *kv2 = make_kv_pc(8, 4, 4, 64, 8), *kv3 = make_kv_pc(8, 4, 4, 64, 7);
	const uint64_t zero[2] = { 0, 0 };
	uint64_t k7[2], k8[2], k7b[2];
	block_key(kv, zero, t, k7);
	block_key(kv2, zero, t, k8);
	block_key(kv3, zero, t, k7b);
	CHECK((k7[0] != k8[0] || k7[1] != k8[1]) && k7[0] == k7b[0] && k7[1] == k7b[1],
	      "salt does not separate keys");
	qc_kv_free(kv2);
	qc_kv_free(kv3);
	qc_kv_free(kv);
}

/* Idle cached blocks are evicted only when no plain free block is left, the
 * least recently released chain first, tail block before its predecessors. */
static void eviction_is_lru_and_on_demand(void)
{
	struct qc_kv *kv = make_kv_pc(6, 2, 4, 64, 1);
	struct qc_err err = { 0 };
	int32_t x[4] = { 1, 2, 3, 4 }, y[4] = { 5, 6, 7, 8 }, ids[8], idle, slots[8];
	struct qc_kv_cow cow;

	int32_t a = put_seq(kv, x, 4), b = put_seq(kv, y, 4);
	qc_kv_seq_free(kv, a);      /* x released first: evicted first */
	qc_kv_seq_free(kv, b);
	CHECK(qc_kv_blocks_idle(kv) == 4 && qc_kv_blocks_free(kv) == 6, "4 idle");
	int32_t c;
	qc_kv_seq_new(kv, &c, &err);
	CHECK(qc_kv_seq_append(kv, c, 4, slots, &cow, &err) == QC_OK, "append: %s", err.msg);
	CHECK(qc_kv_blocks_cached(kv) == 4, "2 plain free blocks used before any eviction");
	CHECK(qc_kv_seq_append(kv, c, 2, slots, &cow, &err) == QC_OK, "append: %s", err.msg);
	CHECK(qc_kv_blocks_cached(kv) == 3, "one eviction");
	CHECK(qc_kv_prefix_match(kv, x, 5, ids, &idle) == 1, "x's tail block went first, its head stays");
	CHECK(qc_kv_prefix_match(kv, y, 5, ids, &idle) == 2, "y untouched");
	CHECK(qc_kv_seq_append(kv, c, 2, slots, &cow, &err) == QC_OK, "append: %s", err.msg);
	CHECK(qc_kv_prefix_match(kv, x, 5, ids, &idle) == 0, "x's head evicted next");
	CHECK(kv_ok(kv), "after evictions");
	/* a block evicted and reused under new content must not resurrect the old chain */
	qc_kv_seq_free(kv, c);
	qc_kv_cache_drop_idle(kv);
	CHECK(qc_kv_blocks_cached(kv) == 0 && qc_kv_blocks_free(kv) == 6 && kv_ok(kv), "drop_idle");
	qc_kv_free(kv);
}

/* The checker must trip on each kind of corruption (SQLite bitvec opcode 5). */
static void check_trips_on_corrupted_state(void)
{
	struct qc_kv *kv = make_kv(8, 4, 4, 64);
	struct qc_err err = { 0 };
	int32_t a, b, slots[8];
	struct qc_kv_cow cow;

	qc_kv_seq_new(kv, &a, &err);
	qc_kv_seq_new(kv, &b, &err);
	qc_kv_seq_append(kv, a, 6, slots, &cow, &err);
	qc_kv_seq_append(kv, b, 3, slots, &cow, &err);
	CHECK(qc_kv_check(kv, &err) == QC_OK, "clean state fails: %s", err.msg);

	kv->refcnt[0]++;
	CHECK(qc_kv_check(kv, &err) == QC_EFORMAT, "refcount drift not caught");
	kv->refcnt[0]--;

	int32_t saved = row(kv, b)[0];
	row(kv, b)[0] = row(kv, a)[0];     /* b's table now names a's block */
	CHECK(qc_kv_check(kv, &err) == QC_EFORMAT, "block in two tables without refcount");
	row(kv, b)[0] = saved;

	kv->n_free--;                       /* a free block vanishes: leak */
	CHECK(qc_kv_check(kv, &err) == QC_EFORMAT, "leak not caught");
	kv->n_free++;

	saved = kv->free_ids[0];
	kv->free_ids[0] = kv->free_ids[1];  /* duplicate on the free list */
	CHECK(qc_kv_check(kv, &err) == QC_EFORMAT, "duplicate free entry not caught");
	kv->free_ids[0] = saved;

	kv->seq_len[a] = 9;                 /* length disagrees with block count */
	CHECK(qc_kv_check(kv, &err) == QC_EFORMAT, "length/blocks mismatch not caught");
	kv->seq_len[a] = 6;

	row(kv, a)[1] = row(kv, a)[0];      /* same block twice in one table */
	CHECK(qc_kv_check(kv, &err) == QC_EFORMAT, "duplicate within a table not caught");
	row(kv, a)[1] = 1;
	CHECK(qc_kv_check(kv, &err) == QC_OK, "restored state fails: %s", err.msg);
	qc_kv_free(kv);

	/* the prefix cache's structures */
	kv = make_kv_pc(8, 2, 4, 64, 3);
	int32_t t[6] = { 1, 2, 3, 4, 5, 6 };
	int32_t s1 = put_seq(kv, t, 6), s2 = put_seq(kv, t + 1, 4);
	qc_kv_seq_free(kv, s1);   /* 3 idle cached blocks */
	CHECK(qc_kv_check(kv, &err) == QC_OK, "clean cached state fails: %s", err.msg);
	int32_t h = kv->lru_head;
	kv->n_idle++;
	CHECK(qc_kv_check(kv, &err) == QC_EFORMAT, "idle count drift not caught");
	kv->n_idle--;
	kv->cached[h] = 0;
	CHECK(qc_kv_check(kv, &err) == QC_EFORMAT, "uncached block on the LRU not caught");
	kv->cached[h] = 1;
	kv->lru_prev[kv->lru_next[h]] = -1;
	CHECK(qc_kv_check(kv, &err) == QC_EFORMAT, "broken LRU link not caught");
	kv->lru_prev[kv->lru_next[h]] = h;
	int32_t held = row(kv, s2)[0];
	kv->key[2 * held] ^= 1;     /* a cached block filed under the wrong bucket */
	CHECK(qc_kv_check(kv, &err) == QC_EFORMAT, "misfiled cached block not caught");
	kv->key[2 * held] ^= 1;
	kv->n_cached--;
	CHECK(qc_kv_check(kv, &err) == QC_EFORMAT, "cached count drift not caught");
	kv->n_cached++;
	kv->row_nchain[s2] = 3;
	CHECK(qc_kv_check(kv, &err) == QC_EFORMAT, "row chain past its blocks not caught");
	kv->row_nchain[s2] = 2;
	CHECK(qc_kv_check(kv, &err) == QC_OK, "restored cached state fails: %s", err.msg);
	/* a released column that still names a block, or a release count past the length */
	qc_kv_seq_drop_before(kv, s2, 2);
	CHECK(qc_kv_check(kv, &err) == QC_OK, "state after a release fails: %s", err.msg);
	int32_t was = row(kv, s2)[0];
	row(kv, s2)[0] = 0;
	CHECK(qc_kv_check(kv, &err) == QC_EFORMAT, "released column naming block 0 not caught");
	row(kv, s2)[0] = was;
	kv->seq_lo[s2] += 100;
	CHECK(qc_kv_check(kv, &err) == QC_EFORMAT, "release count past the length not caught");
	kv->seq_lo[s2] -= 100;
	CHECK(qc_kv_check(kv, &err) == QC_OK, "restored released state fails: %s", err.msg);
	qc_kv_free(kv);
}

/* ---- sliding windows: blocks behind every window are released ---- */

/* A window of W = 10 over 4-token blocks, decoding 200 tokens one at a time and
 * releasing after each as the engine does: the row holds at most
 * ceil((W - 1) / 4) + 1 = 4 blocks (worked out: positions len - 9 .. len span at
 * most 4 blocks), the pool never more, and the table's indexing is kept (column
 * i still holds positions 4i..4i+3). Without the release it would hold 50. */
static void window_bounds_blocks_per_sequence(void)
{
	const int32_t W = 10, bt = 4, n = 200;
	struct qc_kv *kv = make_kv(64, bt, 2, 256);
	struct qc_err err = { 0 };
	int32_t seq, slot, worst = 0, worst_pool = 0, bad_slot = 0;
	CHECK(qc_kv_seq_new(kv, &seq, &err) == QC_OK, "seq_new: %s", err.msg);
	for (int32_t len = 0; len < n; len++) {
		CHECK(qc_kv_seq_append(kv, seq, 1, &slot, NULL, &err) == QC_OK, "append at %d: %s", len,
		      err.msg);
		int32_t nb;
		const int32_t *t = qc_kv_seq_table(kv, seq, &nb);
		bad_slot += slot != t[len / bt] * bt + len % bt;
		if (qc_kv_seq_blocks_held(kv, seq) > worst)
			worst = qc_kv_seq_blocks_held(kv, seq);
		if (qc_kv_blocks_used(kv) > worst_pool)
			worst_pool = qc_kv_blocks_used(kv);
		qc_kv_seq_drop_before(kv, seq, len + 1 - W + 1);
	}
	CHECK(worst == 4 && worst_pool == 4, "held at most %d blocks (pool %d), expected 4", worst,
	      worst_pool);
	CHECK(bad_slot == 0, "%d slots outside their column", bad_slot);
	int32_t nb;
	const int32_t *t = qc_kv_seq_table(kv, seq, &nb);
	int32_t lo = qc_kv_seq_first_block(kv, seq);
	/* after 200 tokens: positions 191..199 are still read, 188.. in column 47 */
	CHECK(nb == 50 && lo == 47 && t[46] == QC_KV_BLOCK_DROPPED && t[47] >= 0 && t[0] == QC_KV_BLOCK_DROPPED,
	      "table: %d columns, %d released, t[46] %d, t[47] %d", nb, lo, t[46], t[47]);
	CHECK(kv_ok(kv), "invariants after the windowed run");
	/* a drop past the length is clamped; a dead or non-positive one is a no-op */
	CHECK(qc_kv_seq_drop_before(kv, seq, 1000) == 3 && qc_kv_seq_blocks_held(kv, seq) == 0,
	      "drop past the length: %d held", qc_kv_seq_blocks_held(kv, seq));
	CHECK(qc_kv_seq_drop_before(kv, seq, 0) == 0 && qc_kv_seq_drop_before(kv, 1, 50) == 0,
	      "no-op drops released something");
	qc_kv_seq_free(kv, seq);
	CHECK(qc_kv_blocks_used(kv) == 0 && kv_ok(kv), "free after drops leaves %d used",
	      qc_kv_blocks_used(kv));
	qc_kv_free(kv);
}

/* Released columns are the releasing row's only: a fork's child and the prefix
 * cache keep the shared blocks (refcounts), a later request still matches them,
 * and a row whose unentered block was released stops entering. */
static void window_release_keeps_shared_and_cached_blocks(void)
{
	struct qc_kv *kv = make_kv_pc(16, 4, 4, 64, 5);
	struct qc_err err = { 0 };
	const int32_t tok[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
	int32_t a = put_seq(kv, tok, 12), b, ids[16], n_idle = 0;
	CHECK(qc_kv_blocks_cached(kv) == 3, "%d cached", qc_kv_blocks_cached(kv));
	CHECK(qc_kv_seq_fork(kv, a, &b, &err) == QC_OK, "fork: %s", err.msg);
	int32_t nb;
	int32_t b0 = qc_kv_seq_table(kv, a, &nb)[0], b1 = qc_kv_seq_table(kv, a, &nb)[1];
	CHECK(qc_kv_seq_drop_before(kv, a, 9) == 2, "drop below 9 releases 2 blocks");
	CHECK(qc_kv_block_refcount(kv, b0) == 1 && qc_kv_block_refcount(kv, b1) == 1 &&
	      qc_kv_blocks_used(kv) == 3, "shared blocks after a's release: refs %d %d, used %d",
	      qc_kv_block_refcount(kv, b0), qc_kv_block_refcount(kv, b1), qc_kv_blocks_used(kv));
	CHECK(qc_kv_seq_table(kv, b, &nb)[0] == b0 && qc_kv_seq_first_block(kv, b) == 0,
	      "the child's table changed");
	CHECK(kv_ok(kv), "invariants with a half-released fork");
	/* a fork of the released row releases nothing twice */
	int32_t c;
	CHECK(qc_kv_seq_fork(kv, a, &c, &err) == QC_OK && qc_kv_seq_first_block(kv, c) == 2 &&
	      qc_kv_block_refcount(kv, b0) == 1 && kv_ok(kv), "fork of a released row");
	qc_kv_seq_free(kv, c);
	qc_kv_seq_free(kv, b);
	/* b0, b1 are now idle cached, still matched by the same prompt */
	CHECK(qc_kv_blocks_idle(kv) == 2 && qc_kv_prefix_match(kv, tok, 12, ids, &n_idle) == 2 &&
	      ids[0] == b0 && ids[1] == b1 && n_idle == 2,
	      "released cached blocks: %d idle, match %d", qc_kv_blocks_idle(kv), n_idle);
	qc_kv_seq_free(kv, a);
	CHECK(kv_ok(kv) && qc_kv_blocks_used(kv) == 0, "after freeing all");

	/* released before entered: the row stops entering rather than read a hole */
	int32_t d, slots[12];
	CHECK(qc_kv_seq_new(kv, &d, &err) == QC_OK && qc_kv_seq_append(kv, d, 12, slots, NULL, &err) == QC_OK,
	      "d: %s", err.msg);
	const int32_t tok2[12] = {9, 9, 9, 9, 8, 8, 8, 8, 7, 7, 7, 7};
	int32_t cached0 = qc_kv_blocks_cached(kv);
	qc_kv_seq_drop_before(kv, d, 5);
	qc_kv_seq_cache(kv, d, tok2, 12);
	CHECK(qc_kv_blocks_cached(kv) == cached0 && kv_ok(kv), "a released unentered block was entered");
	qc_kv_seq_free(kv, d);
	qc_kv_free(kv);
}

/* ---- randomized run against a shadow K/V store ---- */

#define R_BLOCKS 48
#define R_BT 4
#define R_SEQS 12
#define R_MAXTOK 64

struct shadow {
	int32_t store[R_BLOCKS * R_BT];        /* what the "backend" holds per slot */
	int32_t content[R_SEQS][R_MAXTOK];     /* what each live sequence must read back */
	int32_t len[R_SEQS];
	int32_t lo[R_SEQS];                    /* positions below are released (windows) */
	bool live[R_SEQS];
};

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint32_t rnd(uint32_t n)
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(rng_state >> 33) % n;
}

/* Returns mismatching positions: each live sequence reads its own history back
 * through its block table. */
static int shadow_verify(const struct qc_kv *kv, const struct shadow *sh)
{
	int bad = 0;
	for (int32_t s = 0; s < R_SEQS; s++) {
		if (!sh->live[s])
			continue;
		int32_t nb;
		const int32_t *t = qc_kv_seq_table(kv, s, &nb);
		if (!t || qc_kv_seq_len(kv, s) != sh->len[s]) {
			bad++;
			continue;
		}
		for (int32_t pos = sh->lo[s]; pos < sh->len[s]; pos++)
			if (sh->store[t[pos / R_BT] * R_BT + pos % R_BT] != sh->content[s][pos])
				bad++;
	}
	return bad;
}

static void random_ops_never_clobber_a_live_sequence(void)
{
	struct qc_kv *kv = make_kv(R_BLOCKS, R_BT, R_SEQS, R_MAXTOK);
	struct shadow *sh = calloc(1, sizeof *sh);
	struct qc_err err = { 0 };
	int32_t slots[R_MAXTOK], next_val = 1;
	int bad_verify = 0, bad_check = 0, n_cow = 0, n_enomem = 0, n_drop = 0;

	for (int step = 0; step < 20000; step++) {
		uint32_t op = rnd(10);
		int32_t s = (int32_t)rnd(R_SEQS);
		if (op < 2 && !sh->live[s]) {
			int32_t id;
			if (qc_kv_seq_new(kv, &id, &err) == QC_OK) {
				sh->live[id] = true;
				sh->len[id] = sh->lo[id] = 0;
			}
		} else if (op < 7 && sh->live[s]) {
			int32_t n = (int32_t)rnd(9);
			struct qc_kv_cow cow;
			int rc = qc_kv_seq_append(kv, s, n, slots, &cow, &err);
			if (rc == QC_OK) {
				if (cow.src >= 0) {
					n_cow++;
					memcpy(&sh->store[cow.dst * R_BT], &sh->store[cow.src * R_BT],
					       (size_t)cow.n_tokens * sizeof sh->store[0]);
				}
				for (int32_t i = 0; i < n; i++) {
					sh->store[slots[i]] = next_val;
					sh->content[s][sh->len[s] + i] = next_val++;
				}
				sh->len[s] += n;
			} else {
				n_enomem += rc == QC_ENOMEM;
				bad_check += rc != QC_ENOMEM && rc != QC_ERANGE;
			}
		} else if (op < 8 && sh->live[s]) {
			int32_t ch;
			if (qc_kv_seq_fork(kv, s, &ch, &err) == QC_OK) {
				sh->live[ch] = true;
				sh->len[ch] = sh->len[s];
				sh->lo[ch] = sh->lo[s];
				memcpy(sh->content[ch], sh->content[s], sizeof sh->content[s]);
			}
		} else if (op < 9 && sh->live[s]) {
			/* a window of 1..12 positions has passed the rest */
			int32_t lo = sh->len[s] - (int32_t)rnd(12);
			n_drop += qc_kv_seq_drop_before(kv, s, lo);
			if (lo > sh->lo[s])
				sh->lo[s] = lo;
		} else if (sh->live[s] && rnd(2)) {
			qc_kv_seq_free(kv, s);
			sh->live[s] = false;
		}
		bad_verify += shadow_verify(kv, sh);
		bad_check += !kv_ok(kv);
	}
	CHECK(bad_verify == 0, "%d reads returned another sequence's data", bad_verify);
	CHECK(bad_check == 0, "%d invariant failures", bad_check);
	CHECK(n_cow > 50 && n_enomem > 50 && n_drop > 50, "random run too tame: %d copies, %d refusals, %d released",
	      n_cow, n_enomem, n_drop);

	/* the shadow checker itself must trip when a live sequence's data is clobbered */
	for (int32_t s = 0; s < R_SEQS; s++) {
		int32_t nb;
		const int32_t *t = qc_kv_seq_table(kv, s, &nb);
		if (!sh->live[s] || sh->len[s] == 0 || sh->lo[s] > 0)
			continue;
		sh->store[t[0] * R_BT] ^= 0x5555;
		CHECK(shadow_verify(kv, sh) > 0, "clobbered slot not detected");
		sh->store[t[0] * R_BT] ^= 0x5555;
		break;
	}
	CHECK(shadow_verify(kv, sh) == 0, "restored store fails");
	free(sh);
	qc_kv_free(kv);
}

int main(void)
{
	block_bytes_match_published_model_sizes();
	new_sizes_pool_from_budget_and_rejects_bad_config();
	append_maps_slots_block_by_block();
	append_is_all_or_nothing_and_bounded();
	fork_shares_blocks_and_copies_partial_last_on_write();
	prefix_match_takes_full_blocks_only();
	eviction_is_lru_and_on_demand();
	check_trips_on_corrupted_state();
	window_bounds_blocks_per_sequence();
	window_release_keeps_shared_and_cached_blocks();
	random_ops_never_clobber_a_live_sequence();
	return check_report("test_kv_blocks");
}
