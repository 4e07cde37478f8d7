/* kv_blocks.c — paged KV block manager: free list, refcounts, block tables.
 *
 * Owns: the id pool behind kv_blocks.h. Every array is sized in qc_kv_new from
 * the config (pool size, max_seqs, table width) and never grows, so no request
 * can make this module allocate. Block ids come off a LIFO free stack, which
 * keeps recently freed (cache-warm) blocks in use first.
 * Copy-on-write follows PagedAttention §4.4: sharing is by refcount, and the only
 * block ever written after a fork is a shared partial last block, copied lazily
 * by the first sequence that appends to it.
 * Prefix cache (vLLM automatic prefix caching, behaviour only): a full block whose
 * K/V is written is entered in an open hash table under a 128-bit XXH3 key chained
 * over (predecessor's key, its tokens) with the pool's salt as seed. A lookup
 * accepts a block only when key, tokens and (predecessor id, predecessor
 * generation) all match, so a hit is exact by induction from the first block and
 * never rests on the hash alone. Cached blocks nobody holds sit on an LRU list and
 * count as free; pop_block takes a plain free block first and evicts the LRU head
 * only when there is none.
 */
#include "kv_blocks.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Tables larger than this many int32 entries (1 GiB) are a config mistake. */
#define KV_MAX_TABLE_ENTRIES (1u << 28)

struct qc_kv {
	int32_t bt;           /* tokens per block */
	int32_t n_blocks;     /* pool size */
	int32_t max_seqs;     /* table rows */
	int32_t width;        /* table columns (blocks per sequence at most) */
	int32_t n_free;       /* valid entries of free_ids */
	int32_t n_free_seqs;  /* valid entries of free_seqs */
	int32_t *free_ids;    /* (n_blocks) stack of free block ids, top at n_free-1 */
	int32_t *refcnt;      /* (n_blocks) live tables naming each block */
	int32_t *tables;      /* (max_seqs, width) block ids, -1 past seq_nb */
	int32_t *seq_len;     /* (max_seqs) tokens stored; -1 marks a dead row */
	int32_t *seq_nb;      /* (max_seqs) blocks in the row's table */
	int32_t *seq_lo;      /* (max_seqs) leading columns released by qc_kv_seq_drop_before
				 (QC_KV_BLOCK_DROPPED there); live blocks are [seq_lo, seq_nb) */
	int32_t *free_seqs;   /* (max_seqs) stack of dead rows */
	int32_t *scratch;     /* (2, n_blocks) qc_kv_check's counters, preallocated */
	/* prefix cache; every array NULL when cfg.prefix_cache is off */
	bool pc;
	uint64_t salt;        /* XXH3 seed: model identity and K/V dtype, from the caller */
	int32_t n_cached;     /* blocks in the hash table */
	int32_t n_idle;       /* of those, refcount 0 (on the LRU, counted as free) */
	int32_t lru_head, lru_tail;  /* head = least recently released, evicted first */
	int32_t *lru_prev, *lru_next;  /* (n_blocks) links of idle cached blocks */
	uint8_t *cached;      /* (n_blocks) 1 = in the hash table */
	uint64_t *key;        /* (n_blocks, 2) lo, hi of each cached block's key */
	int32_t *parent;      /* (n_blocks) cached predecessor's id, -1 for a first block */
	uint32_t *parent_gen; /* (n_blocks) gen[parent] when the block was entered */
	uint32_t *gen;        /* (n_blocks) bumped when the block leaves the cache */
	int32_t *btok;        /* (n_blocks, bt) tokens of each cached block */
	int32_t *hnext;       /* (n_blocks) next block in the same bucket, -1 at the end */
	int32_t *bucket;      /* (bmask + 1) first block of each bucket, -1 empty */
	uint32_t bmask;
	int32_t *row_nchain;  /* (max_seqs) leading blocks of the row whose identity is known */
	int32_t *row_cblk;    /* (max_seqs) canonical cached block of the last of those, -1 */
	uint32_t *row_cgen;   /* (max_seqs) its generation */
	uint64_t *row_ckey;   /* (max_seqs, 2) its key */
	uint8_t *hbuf;        /* (16 + 4 * bt) hash input: predecessor key, tokens */
};

void qc_kv_config_init(struct qc_kv_config *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	cfg->block_tokens = QC_KV_BLOCK_TOKENS_DEFAULT;
	cfg->max_seqs = 256;
	cfg->max_seq_tokens = 4096;
	cfg->prefix_cache = false;
}

int qc_kv_block_bytes(int32_t n_layers, int32_t n_kv_heads, int32_t head_dim,
		      uint32_t elem_bytes, int32_t block_tokens, uint64_t *out,
		      struct qc_err *err)
{
	uint64_t v = 2;

	*out = 0;
	if (n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0 || elem_bytes == 0 ||
	    block_tokens <= 0)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "kv: block size factors must be positive (layers %d, kv heads %d, "
				  "head_dim %d, elem %u bytes, block %d tokens)",
				  n_layers, n_kv_heads, head_dim, elem_bytes, block_tokens);
	if (__builtin_mul_overflow(v, (uint64_t)n_layers, &v) ||
	    __builtin_mul_overflow(v, (uint64_t)n_kv_heads, &v) ||
	    __builtin_mul_overflow(v, (uint64_t)head_dim, &v) ||
	    __builtin_mul_overflow(v, (uint64_t)elem_bytes, &v) ||
	    __builtin_mul_overflow(v, (uint64_t)block_tokens, &v))
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1,
				  "kv: block size overflows 64 bits");
	*out = v;
	return QC_OK;
}

static int check_config(const struct qc_kv_config *cfg, struct qc_err *err)
{
	if (cfg->block_tokens < 1 || cfg->block_tokens > QC_KV_BLOCK_TOKENS_MAX)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "kv: block_tokens %d outside 1..%d", cfg->block_tokens,
				  QC_KV_BLOCK_TOKENS_MAX);
	if (cfg->max_seqs < 1 || cfg->max_seqs > QC_KV_MAX_SEQS)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "kv: max_seqs %d outside 1..%d", cfg->max_seqs, QC_KV_MAX_SEQS);
	if (cfg->max_seq_tokens < 1)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "kv: max_seq_tokens %d must be positive", cfg->max_seq_tokens);
	if (cfg->block_bytes == 0)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "kv: block_bytes is 0");
	if (cfg->budget_bytes < cfg->block_bytes)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "kv: budget of %llu bytes holds no %llu-byte block",
				  (unsigned long long)cfg->budget_bytes,
				  (unsigned long long)cfg->block_bytes);
	return QC_OK;
}

/* The prefix cache's arrays, all sized here: bucket count is the power of two at
 * or above n_blocks, so chains stay about one block long. */
static int cache_alloc(struct qc_kv *kv, const struct qc_kv_config *cfg, struct qc_err *err)
{
	size_t nb = (size_t)kv->n_blocks, ns = (size_t)kv->max_seqs;
	uint32_t nbk = 1;

	while (nbk < (uint32_t)kv->n_blocks)
		nbk <<= 1;
	kv->pc = true;
	kv->salt = cfg->prefix_salt;
	kv->bmask = nbk - 1;
	kv->lru_prev = malloc(nb * sizeof *kv->lru_prev);
	kv->lru_next = malloc(nb * sizeof *kv->lru_next);
	kv->cached = calloc(nb, 1);
	kv->key = calloc(2 * nb, sizeof *kv->key);
	kv->parent = malloc(nb * sizeof *kv->parent);
	kv->parent_gen = calloc(nb, sizeof *kv->parent_gen);
	kv->gen = calloc(nb, sizeof *kv->gen);
	kv->btok = malloc(nb * (size_t)kv->bt * sizeof *kv->btok);
	kv->hnext = malloc(nb * sizeof *kv->hnext);
	kv->bucket = malloc((size_t)nbk * sizeof *kv->bucket);
	kv->row_nchain = calloc(ns, sizeof *kv->row_nchain);
	kv->row_cblk = malloc(ns * sizeof *kv->row_cblk);
	kv->row_cgen = calloc(ns, sizeof *kv->row_cgen);
	kv->row_ckey = calloc(2 * ns, sizeof *kv->row_ckey);
	kv->hbuf = malloc(16 + 4 * (size_t)kv->bt);
	if (!kv->lru_prev || !kv->lru_next || !kv->cached || !kv->key || !kv->parent ||
	    !kv->parent_gen || !kv->gen || !kv->btok || !kv->hnext || !kv->bucket ||
	    !kv->row_nchain || !kv->row_cblk || !kv->row_cgen || !kv->row_ckey || !kv->hbuf)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1,
				  "kv: out of memory for the prefix cache of %zu blocks", nb);
	for (size_t i = 0; i < nb; i++)
		kv->lru_prev[i] = kv->lru_next[i] = kv->parent[i] = kv->hnext[i] = -1;
	for (uint32_t i = 0; i < nbk; i++)
		kv->bucket[i] = -1;
	for (size_t i = 0; i < ns; i++)
		kv->row_cblk[i] = -1;
	return QC_OK;
}

int qc_kv_new(const struct qc_kv_config *cfg, struct qc_kv **out, struct qc_err *err)
{
	struct qc_kv *kv;
	uint64_t nb, entries;
	int rc;

	*out = NULL;
	rc = check_config(cfg, err);
	if (rc)
		return rc;

	nb = cfg->budget_bytes / cfg->block_bytes;
	if (nb > QC_KV_MAX_BLOCKS)
		nb = QC_KV_MAX_BLOCKS;
	/* slot ids (block * block_tokens + offset) must fit int32 */
	if (nb > (uint64_t)(INT32_MAX / cfg->block_tokens))
		nb = (uint64_t)(INT32_MAX / cfg->block_tokens);

	kv = calloc(1, sizeof *kv);
	if (!kv)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "kv: out of memory");
	kv->bt = cfg->block_tokens;
	kv->n_blocks = (int32_t)nb;
	kv->max_seqs = cfg->max_seqs;
	/* ceil(max_seq_tokens / bt). Deliberately not capped at the pool: a context
	 * longer than the pool is legal, a sequence just cannot grow past the pool
	 * while alone (the scheduler fails it then). */
	kv->width = (int32_t)(((int64_t)cfg->max_seq_tokens + kv->bt - 1) / kv->bt);
	entries = (uint64_t)kv->max_seqs * (uint64_t)kv->width;
	if (entries > KV_MAX_TABLE_ENTRIES) {
		rc = qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				"kv: %d sequences x %d blocks of table exceed %u entries",
				kv->max_seqs, kv->width, KV_MAX_TABLE_ENTRIES);
		goto out_free;
	}

	kv->free_ids = malloc(nb * sizeof *kv->free_ids);
	kv->refcnt = calloc(nb, sizeof *kv->refcnt);
	kv->scratch = malloc(2 * nb * sizeof *kv->scratch);
	kv->tables = malloc(entries * sizeof *kv->tables);
	kv->seq_len = malloc((size_t)kv->max_seqs * sizeof *kv->seq_len);
	kv->seq_nb = calloc((size_t)kv->max_seqs, sizeof *kv->seq_nb);
	kv->seq_lo = calloc((size_t)kv->max_seqs, sizeof *kv->seq_lo);
	kv->free_seqs = malloc((size_t)kv->max_seqs * sizeof *kv->free_seqs);
	if (!kv->free_ids || !kv->refcnt || !kv->scratch || !kv->tables || !kv->seq_len ||
	    !kv->seq_nb || !kv->seq_lo || !kv->free_seqs) {
		rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1,
				"kv: out of memory for %llu blocks", (unsigned long long)nb);
		goto out_free;
	}
	kv->lru_head = kv->lru_tail = -1;
	if (cfg->prefix_cache && (rc = cache_alloc(kv, cfg, err)))
		goto out_free;
	/* stacks are filled in reverse so ids come out 0, 1, 2, ...: deterministic
	 * and easy to read in test failures */
	for (int32_t i = 0; i < kv->n_blocks; i++)
		kv->free_ids[i] = kv->n_blocks - 1 - i;
	kv->n_free = kv->n_blocks;
	for (int32_t i = 0; i < kv->max_seqs; i++) {
		kv->free_seqs[i] = kv->max_seqs - 1 - i;
		kv->seq_len[i] = -1;
	}
	kv->n_free_seqs = kv->max_seqs;
	for (uint64_t i = 0; i < entries; i++)
		kv->tables[i] = -1;
	*out = kv;
	return QC_OK;

out_free:
	qc_kv_free(kv);
	return rc;
}

void qc_kv_free(struct qc_kv *kv)
{
	if (!kv)
		return;
	free(kv->free_ids);
	free(kv->refcnt);
	free(kv->scratch);
	free(kv->tables);
	free(kv->seq_len);
	free(kv->seq_nb);
	free(kv->seq_lo);
	free(kv->free_seqs);
	free(kv->lru_prev);
	free(kv->lru_next);
	free(kv->cached);
	free(kv->key);
	free(kv->parent);
	free(kv->parent_gen);
	free(kv->gen);
	free(kv->btok);
	free(kv->hnext);
	free(kv->bucket);
	free(kv->row_nchain);
	free(kv->row_cblk);
	free(kv->row_cgen);
	free(kv->row_ckey);
	free(kv->hbuf);
	free(kv);
}

int32_t qc_kv_blocks_total(const struct qc_kv *kv) { return kv->n_blocks; }
int32_t qc_kv_blocks_free(const struct qc_kv *kv) { return kv->n_free + kv->n_idle; }
int32_t qc_kv_blocks_used(const struct qc_kv *kv) { return kv->n_blocks - kv->n_free - kv->n_idle; }
int32_t qc_kv_blocks_cached(const struct qc_kv *kv) { return kv->n_cached; }
int32_t qc_kv_blocks_idle(const struct qc_kv *kv) { return kv->n_idle; }
bool qc_kv_prefix_cache_on(const struct qc_kv *kv) { return kv->pc; }

bool qc_kv_block_cached(const struct qc_kv *kv, int32_t b)
{
	return kv->pc && b >= 0 && b < kv->n_blocks && kv->cached[b];
}
int32_t qc_kv_block_tokens(const struct qc_kv *kv) { return kv->bt; }
int32_t qc_kv_max_seqs(const struct qc_kv *kv) { return kv->max_seqs; }
int32_t qc_kv_table_width(const struct qc_kv *kv) { return kv->width; }
int32_t qc_kv_max_seq_tokens(const struct qc_kv *kv) { return kv->width * kv->bt; }

int32_t qc_kv_block_refcount(const struct qc_kv *kv, int32_t b)
{
	if (b < 0 || b >= kv->n_blocks)
		return -1;
	return kv->refcnt[b];
}

bool qc_kv_seq_live(const struct qc_kv *kv, int32_t seq)
{
	return seq >= 0 && seq < kv->max_seqs && kv->seq_len[seq] >= 0;
}

static int32_t *row(const struct qc_kv *kv, int32_t seq)
{
	return kv->tables + (size_t)seq * (size_t)kv->width;
}

/* ---- prefix cache: LRU of idle cached blocks, hash table ---- */

static void lru_remove(struct qc_kv *kv, int32_t b)
{
	int32_t p = kv->lru_prev[b], n = kv->lru_next[b];
	if (p >= 0)
		kv->lru_next[p] = n;
	else
		kv->lru_head = n;
	if (n >= 0)
		kv->lru_prev[n] = p;
	else
		kv->lru_tail = p;
	kv->lru_prev[b] = kv->lru_next[b] = -1;
	kv->n_idle--;
}

static void lru_push_tail(struct qc_kv *kv, int32_t b)
{
	kv->lru_prev[b] = kv->lru_tail;
	kv->lru_next[b] = -1;
	if (kv->lru_tail >= 0)
		kv->lru_next[kv->lru_tail] = b;
	else
		kv->lru_head = b;
	kv->lru_tail = b;
	kv->n_idle++;
}

static uint32_t bucket_of(const struct qc_kv *kv, uint64_t lo)
{
	return (uint32_t)lo & kv->bmask;
}

/* Take b out of the hash table; its generation changes, so any cached block
 * entered with b as predecessor can no longer match a lookup through b. */
static void unhash(struct qc_kv *kv, int32_t b)
{
	int32_t *pp = &kv->bucket[bucket_of(kv, kv->key[2 * b])];
	while (*pp != b) {
		QC_ASSERT(*pp >= 0);
		pp = &kv->hnext[*pp];
	}
	*pp = kv->hnext[b];
	kv->hnext[b] = -1;
	kv->cached[b] = 0;
	kv->parent[b] = -1;
	kv->gen[b]++;
	kv->n_cached--;
}

/* Key of the block after one keyed prev (0, 0 for the first) holding tokens[0..bt). */
static void block_key(struct qc_kv *kv, const uint64_t prev[2], const int32_t *tokens,
		      uint64_t out[2])
{
	memcpy(kv->hbuf, prev, 16);
	memcpy(kv->hbuf + 16, tokens, 4 * (size_t)kv->bt);
	XXH128_hash_t h = XXH3_128bits_withSeed(kv->hbuf, 16 + 4 * (size_t)kv->bt, kv->salt);
	out[0] = h.low64;
	out[1] = h.high64;
}

/* The cached block with this key, predecessor (id, generation) and tokens, or -1. */
static int32_t find_cached(const struct qc_kv *kv, const uint64_t k[2], int32_t parent,
			   uint32_t pgen, const int32_t *tokens)
{
	for (int32_t b = kv->bucket[bucket_of(kv, k[0])]; b >= 0; b = kv->hnext[b])
		if (kv->key[2 * b] == k[0] && kv->key[2 * b + 1] == k[1] && kv->parent[b] == parent &&
		    (parent < 0 || kv->parent_gen[b] == pgen) &&
		    !memcmp(kv->btok + (size_t)b * (size_t)kv->bt, tokens, 4 * (size_t)kv->bt))
			return b;
	return -1;
}

static int32_t pop_block(struct qc_kv *kv)
{
	int32_t b;
	if (kv->n_free > 0) {
		b = kv->free_ids[--kv->n_free];
	} else {
		/* the pool needs a block: evict the least recently released cached one */
		QC_ASSERT(kv->n_idle > 0);
		b = kv->lru_head;
		lru_remove(kv, b);
		unhash(kv, b);
	}
	QC_ASSERT(kv->refcnt[b] == 0);
	kv->refcnt[b] = 1;
	return b;
}

static void release_block(struct qc_kv *kv, int32_t b)
{
	QC_ASSERT(kv->refcnt[b] > 0);
	if (--kv->refcnt[b] > 0)
		return;
	if (kv->pc && kv->cached[b])
		lru_push_tail(kv, b);
	else
		kv->free_ids[kv->n_free++] = b;
}

static void row_chain_reset(struct qc_kv *kv, int32_t seq)
{
	if (!kv->pc)
		return;
	kv->row_nchain[seq] = 0;
	kv->row_cblk[seq] = -1;
	kv->row_cgen[seq] = 0;
	kv->row_ckey[2 * seq] = kv->row_ckey[2 * seq + 1] = 0;
}

int32_t qc_kv_prefix_match(struct qc_kv *kv, const int32_t *tokens, int32_t n_tokens,
			   int32_t *ids, int32_t *n_idle)
{
	uint64_t k[2] = {0, 0};
	int32_t parent = -1, n = 0;
	uint32_t pgen = 0;

	*n_idle = 0;
	if (!kv->pc || n_tokens < 1)
		return 0;
	/* (n_tokens - 1) / bt: the last prompt token is always fed, for its logits */
	int32_t max = (n_tokens - 1) / kv->bt;
	if (max > kv->width)
		max = kv->width;
	for (; n < max; n++) {
		const int32_t *t = tokens + (size_t)n * (size_t)kv->bt;
		block_key(kv, k, t, k);
		int32_t b = find_cached(kv, k, parent, pgen, t);
		if (b < 0)
			break;
		ids[n] = b;
		*n_idle += kv->refcnt[b] == 0;
		parent = b;
		pgen = kv->gen[b];
	}
	return n;
}

int qc_kv_seq_attach(struct qc_kv *kv, int32_t seq, const int32_t *ids, int32_t n,
		     struct qc_err *err)
{
	if (!qc_kv_seq_live(kv, seq) || kv->seq_len[seq] != 0 || n < 0 || n > kv->width)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "kv: attach of %d cached blocks to sequence %d (must be live and empty)",
				  n, seq);
	for (int32_t i = 0; i < n; i++)
		if (!qc_kv_block_cached(kv, ids[i]))
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
					  "kv: block %d is not in the prefix cache", ids[i]);
	int32_t *t = row(kv, seq);
	for (int32_t i = 0; i < n; i++) {
		int32_t b = ids[i];
		if (kv->refcnt[b]++ == 0)
			lru_remove(kv, b);
		t[i] = b;
	}
	kv->seq_nb[seq] = n;
	kv->seq_lo[seq] = 0;
	kv->seq_len[seq] = n * kv->bt;
	if (n > 0) {
		int32_t b = ids[n - 1];
		kv->row_nchain[seq] = n;
		kv->row_cblk[seq] = b;
		kv->row_cgen[seq] = kv->gen[b];
		kv->row_ckey[2 * seq] = kv->key[2 * b];
		kv->row_ckey[2 * seq + 1] = kv->key[2 * b + 1];
	}
	return QC_OK;
}

void qc_kv_seq_cache(struct qc_kv *kv, int32_t seq, const int32_t *tokens, int32_t n_tokens)
{
	if (!kv->pc || !qc_kv_seq_live(kv, seq))
		return;
	int32_t full = n_tokens < kv->seq_len[seq] ? n_tokens : kv->seq_len[seq];
	full /= kv->bt;
	const int32_t *t = row(kv, seq);
	for (int32_t i = kv->row_nchain[seq]; i < full; i++) {
		const int32_t *tok = tokens + (size_t)i * (size_t)kv->bt;
		uint64_t k[2];
		block_key(kv, kv->row_ckey + 2 * seq, tok, k);
		int32_t parent = kv->row_cblk[seq];
		uint32_t pgen = kv->row_cgen[seq];
		int32_t b = t[i];
		if (b < 0)
			break; /* released before it was entered: nothing left to name */
		int32_t c = find_cached(kv, k, parent, pgen, tok);
		if (c < 0 && !kv->cached[b]) {
			/* enter b; a block computed twice at once (c >= 0) stays private and
			 * the chain goes on through the copy already cached */
			kv->cached[b] = 1;
			kv->key[2 * b] = k[0];
			kv->key[2 * b + 1] = k[1];
			kv->parent[b] = parent;
			kv->parent_gen[b] = pgen;
			memcpy(kv->btok + (size_t)b * (size_t)kv->bt, tok, 4 * (size_t)kv->bt);
			uint32_t h = bucket_of(kv, k[0]);
			kv->hnext[b] = kv->bucket[h];
			kv->bucket[h] = b;
			kv->n_cached++;
			c = b;
		} else if (c < 0) {
			/* b is cached under another chain (a fork's shared block): the
			 * chain cannot name it, so stop entering this row */
			break;
		}
		kv->row_nchain[seq] = i + 1;
		kv->row_cblk[seq] = c;
		kv->row_cgen[seq] = kv->gen[c];
		kv->row_ckey[2 * seq] = k[0];
		kv->row_ckey[2 * seq + 1] = k[1];
	}
}

void qc_kv_cache_drop_idle(struct qc_kv *kv)
{
	while (kv->pc && kv->lru_head >= 0) {
		int32_t b = kv->lru_head;
		lru_remove(kv, b);
		unhash(kv, b);
		kv->free_ids[kv->n_free++] = b;
	}
}

int qc_kv_seq_new(struct qc_kv *kv, int32_t *seq, struct qc_err *err)
{
	*seq = -1;
	if (kv->n_free_seqs == 0)
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1,
				  "kv: all %d sequence rows are live", kv->max_seqs);
	*seq = kv->free_seqs[--kv->n_free_seqs];
	kv->seq_len[*seq] = 0;
	kv->seq_nb[*seq] = 0;
	kv->seq_lo[*seq] = 0;
	row_chain_reset(kv, *seq);
	return QC_OK;
}

void qc_kv_seq_free(struct qc_kv *kv, int32_t seq)
{
	if (!qc_kv_seq_live(kv, seq))
		return;
	int32_t *t = row(kv, seq);
	/* last block first: a cached tail lands on the LRU before its predecessors,
	 * so eviction takes chains from the end and never strands a child */
	for (int32_t i = kv->seq_nb[seq] - 1; i >= 0; i--) {
		if (i >= kv->seq_lo[seq])
			release_block(kv, t[i]);
		t[i] = -1;
	}
	row_chain_reset(kv, seq);
	kv->seq_nb[seq] = 0;
	kv->seq_lo[seq] = 0;
	kv->seq_len[seq] = -1;
	kv->free_seqs[kv->n_free_seqs++] = seq;
}

int qc_kv_seq_fork(struct qc_kv *kv, int32_t parent, int32_t *child, struct qc_err *err)
{
	int rc;

	*child = -1;
	if (!qc_kv_seq_live(kv, parent))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "kv: fork of dead sequence %d", parent);
	rc = qc_kv_seq_new(kv, child, err);
	if (rc)
		return rc;
	const int32_t *src = row(kv, parent);
	int32_t *dst = row(kv, *child);
	for (int32_t i = 0; i < kv->seq_nb[parent]; i++) {
		dst[i] = src[i];
		if (i >= kv->seq_lo[parent])
			kv->refcnt[src[i]]++;
	}
	kv->seq_nb[*child] = kv->seq_nb[parent];
	kv->seq_lo[*child] = kv->seq_lo[parent];
	kv->seq_len[*child] = kv->seq_len[parent];
	if (kv->pc) {
		kv->row_nchain[*child] = kv->row_nchain[parent];
		kv->row_cblk[*child] = kv->row_cblk[parent];
		kv->row_cgen[*child] = kv->row_cgen[parent];
		kv->row_ckey[2 * *child] = kv->row_ckey[2 * parent];
		kv->row_ckey[2 * *child + 1] = kv->row_ckey[2 * parent + 1];
	}
	return QC_OK;
}

int32_t qc_kv_seq_len(const struct qc_kv *kv, int32_t seq)
{
	return qc_kv_seq_live(kv, seq) ? kv->seq_len[seq] : 0;
}

const int32_t *qc_kv_seq_table(const struct qc_kv *kv, int32_t seq, int32_t *n_blocks)
{
	if (!qc_kv_seq_live(kv, seq)) {
		*n_blocks = 0;
		return NULL;
	}
	*n_blocks = kv->seq_nb[seq];
	return row(kv, seq);
}

/* The last block is partial and someone else also points at it: writing the
 * next token there would corrupt their cache. */
static bool needs_cow(const struct qc_kv *kv, int32_t seq)
{
	int32_t nb = kv->seq_nb[seq];
	return kv->seq_len[seq] % kv->bt != 0 && kv->refcnt[row(kv, seq)[nb - 1]] > 1;
}

int32_t qc_kv_seq_blocks_needed(const struct qc_kv *kv, int32_t seq, int32_t n)
{
	if (!qc_kv_seq_live(kv, seq) || n < 0)
		return -1;
	int64_t total = (int64_t)kv->seq_len[seq] + n;
	int64_t nb_after = (total + kv->bt - 1) / kv->bt;
	if (nb_after > kv->width)
		return -1;
	int32_t need = (int32_t)nb_after - kv->seq_nb[seq];
	if (n > 0 && needs_cow(kv, seq))
		need++;
	return need;
}

int32_t qc_kv_seq_room(const struct qc_kv *kv, int32_t seq, int32_t max_new_blocks)
{
	if (!qc_kv_seq_live(kv, seq) || max_new_blocks < 0)
		return 0;
	int32_t len = kv->seq_len[seq];
	int32_t partial = len % kv->bt;
	int64_t avail = max_new_blocks, tokens = 0;
	if (partial) {
		if (needs_cow(kv, seq)) {
			if (avail == 0)
				return 0;
			avail--;
		}
		tokens = kv->bt - partial;
	}
	tokens += avail * kv->bt;
	int64_t cap = (int64_t)kv->width * kv->bt - len;
	return (int32_t)(tokens < cap ? tokens : cap);
}

int qc_kv_seq_append(struct qc_kv *kv, int32_t seq, int32_t n, int32_t *slots,
		     struct qc_kv_cow *cow, struct qc_err *err)
{
	if (cow)
		*cow = (struct qc_kv_cow){ .src = -1, .dst = -1, .n_tokens = 0 };
	if (!qc_kv_seq_live(kv, seq) || n < 0)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "kv: append of %d tokens to dead sequence %d", n, seq);
	int32_t need = qc_kv_seq_blocks_needed(kv, seq, n);
	if (need < 0)
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1,
				  "kv: sequence %d would exceed %d tokens (%d stored + %d)",
				  seq, kv->width * kv->bt, kv->seq_len[seq], n);
	if (need > qc_kv_blocks_free(kv))
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1,
				  "kv: sequence %d needs %d blocks, %d free", seq, need,
				  qc_kv_blocks_free(kv));
	if (n == 0)
		return QC_OK;

	int32_t *t = row(kv, seq);
	int32_t len = kv->seq_len[seq];
	if (needs_cow(kv, seq)) {
		if (!cow)
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
					  "kv: sequence %d shares its last block but the caller takes no copy-on-write",
					  seq);
		int32_t last = kv->seq_nb[seq] - 1;
		int32_t dst = pop_block(kv);
		*cow = (struct qc_kv_cow){ .src = t[last], .dst = dst, .n_tokens = len % kv->bt };
		release_block(kv, t[last]);
		t[last] = dst;
	}
	for (int32_t i = 0; i < n; i++) {
		int32_t pos = len + i;
		int32_t bi = pos / kv->bt;
		if (bi == kv->seq_nb[seq])
			t[kv->seq_nb[seq]++] = pop_block(kv);
		slots[i] = t[bi] * kv->bt + pos % kv->bt;
	}
	kv->seq_len[seq] = len + n;
	return QC_OK;
}

int32_t qc_kv_seq_drop_before(struct qc_kv *kv, int32_t seq, int32_t lo)
{
	if (!qc_kv_seq_live(kv, seq) || lo <= 0)
		return 0;
	if (lo > kv->seq_len[seq])
		lo = kv->seq_len[seq]; /* only what is stored can have been passed */
	int32_t *t = row(kv, seq), n = 0;
	/* release_block decrements: a block another row or the cache still holds
	   stays theirs; ours only loses its name in this table */
	for (int32_t i = kv->seq_lo[seq]; (int64_t)(i + 1) * kv->bt <= lo; i++, n++) {
		release_block(kv, t[i]);
		t[i] = QC_KV_BLOCK_DROPPED;
	}
	kv->seq_lo[seq] += n;
	return n;
}

int32_t qc_kv_seq_first_block(const struct qc_kv *kv, int32_t seq)
{
	return qc_kv_seq_live(kv, seq) ? kv->seq_lo[seq] : 0;
}

int32_t qc_kv_seq_blocks_held(const struct qc_kv *kv, int32_t seq)
{
	return qc_kv_seq_live(kv, seq) ? kv->seq_nb[seq] - kv->seq_lo[seq] : 0;
}

/* The prefix cache's half of qc_kv_check: the LRU holds exactly the idle cached
 * blocks (stamped -2 like free ones), the buckets exactly the cached blocks, each
 * in the bucket of its key, and no row's chain runs past its blocks. */
static int check_cache(const struct qc_kv *kv, const int32_t *count, int32_t *stamp,
		       struct qc_err *err)
{
	int32_t n = 0, prev = -1, n_flag = 0;

	if (!kv->pc)
		return kv->n_idle == 0 && kv->n_cached == 0 ? QC_OK
			: qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
				     "kv check: cache off but %d cached, %d idle", kv->n_cached,
				     kv->n_idle);
	for (int32_t b = kv->lru_head; b >= 0; b = kv->lru_next[b]) {
		if (b >= kv->n_blocks || ++n > kv->n_blocks || kv->lru_prev[b] != prev ||
		    !kv->cached[b] || count[b] != 0 || stamp[b] == -2)
			return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
					  "kv check: LRU broken at block %d (entry %d): must be cached, idle, once",
					  b, n);
		stamp[b] = -2;
		prev = b;
	}
	if (n != kv->n_idle || prev != kv->lru_tail)
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
				  "kv check: LRU holds %d blocks, idle count says %d", n, kv->n_idle);
	n = 0;
	for (uint32_t h = 0; h <= kv->bmask; h++)
		for (int32_t b = kv->bucket[h]; b >= 0; b = kv->hnext[b]) {
			if (b >= kv->n_blocks || ++n > kv->n_blocks || !kv->cached[b] ||
			    bucket_of(kv, kv->key[2 * b]) != h)
				return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
						  "kv check: bucket %u names block %d, not cached under it",
						  h, b);
		}
	for (int32_t b = 0; b < kv->n_blocks; b++) {
		n_flag += kv->cached[b];
		if (kv->cached[b] && count[b] == 0 && stamp[b] != -2)
			return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
					  "kv check: cached block %d is idle but not on the LRU", b);
	}
	if (n != kv->n_cached || n_flag != kv->n_cached)
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
				  "kv check: %d blocks in buckets, %d flagged, count says %d", n,
				  n_flag, kv->n_cached);
	for (int32_t s = 0; s < kv->max_seqs; s++)
		if (kv->seq_len[s] >= 0 && kv->row_nchain[s] * kv->bt > kv->seq_len[s])
			return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
					  "kv check: row %d chains %d blocks past its %d tokens", s,
					  kv->row_nchain[s], kv->seq_len[s]);
	return QC_OK;
}

int qc_kv_check(const struct qc_kv *kv, struct qc_err *err)
{
	int32_t *count = kv->scratch;              /* table references per block */
	int32_t *stamp = kv->scratch + kv->n_blocks; /* last row seen, -2 = in free list */
	int32_t n_live = 0, n_zero = 0;

	if (kv->n_free < 0 || kv->n_free > kv->n_blocks)
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
				  "kv check: free count %d outside 0..%d", kv->n_free, kv->n_blocks);
	for (int32_t b = 0; b < kv->n_blocks; b++) {
		count[b] = 0;
		stamp[b] = -1;
	}
	for (int32_t s = 0; s < kv->max_seqs; s++) {
		const int32_t *t = row(kv, s);
		int32_t len = kv->seq_len[s], nb = kv->seq_nb[s], lo = kv->seq_lo[s];
		if (len < 0) {
			if (nb != 0 || lo != 0 || t[0] != -1)
				return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
						  "kv check: dead row %d still holds blocks", s);
			continue;
		}
		n_live++;
		if (len > kv->width * kv->bt || nb != (len + kv->bt - 1) / kv->bt || lo < 0 ||
		    (int64_t)lo * kv->bt > len)
			return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
					  "kv check: row %d has %d tokens in %d blocks, %d released", s, len,
					  nb, lo);
		for (int32_t i = 0; i < kv->width; i++) {
			int32_t b = t[i];
			if (i < lo) {
				if (b != QC_KV_BLOCK_DROPPED)
					return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
							  "kv check: row %d column %d below its %d released is %d",
							  s, i, lo, b);
				continue;
			}
			if (i >= nb) {
				if (b != -1)
					return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
							  "kv check: row %d column %d past its %d blocks is %d",
							  s, i, nb, b);
				continue;
			}
			if (b < 0 || b >= kv->n_blocks)
				return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
						  "kv check: row %d names block %d of %d", s, b,
						  kv->n_blocks);
			if (stamp[b] == s)
				return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
						  "kv check: row %d names block %d twice", s, b);
			stamp[b] = s;
			count[b]++;
		}
	}
	if (n_live + kv->n_free_seqs != kv->max_seqs)
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
				  "kv check: %d live rows + %d free rows != %d", n_live,
				  kv->n_free_seqs, kv->max_seqs);
	for (int32_t i = 0; i < kv->n_free; i++) {
		int32_t b = kv->free_ids[i];
		if (b < 0 || b >= kv->n_blocks || stamp[b] == -2 || count[b] != 0 ||
		    qc_kv_block_cached(kv, b))
			return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
					  "kv check: free-list entry %d (block %d) is out of range, repeated, referenced or cached",
					  i, b);
		stamp[b] = -2;
	}
	int rc = check_cache(kv, count, stamp, err);
	if (rc)
		return rc;
	for (int32_t b = 0; b < kv->n_blocks; b++) {
		if (kv->refcnt[b] != count[b])
			return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
					  "kv check: block %d refcount %d but %d tables name it", b,
					  kv->refcnt[b], count[b]);
		if (count[b] == 0) {
			n_zero++;
			if (stamp[b] != -2)
				return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
						  "kv check: block %d is unreferenced and not free (leak)", b);
		}
	}
	if (n_zero != kv->n_free + kv->n_idle)
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
				  "kv check: %d unreferenced blocks but %d on the free list + %d idle cached",
				  n_zero, kv->n_free, kv->n_idle);
	return QC_OK;
}
