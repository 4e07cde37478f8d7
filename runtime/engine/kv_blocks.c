/* kv_blocks.c — paged KV block manager: free list, refcounts, block tables.
 *
 * Owns: the id pool behind kv_blocks.h. Every array is sized in qc_kv_new from
 * the config (pool size, max_seqs, table width) and never grows, so no request
 * can make this module allocate. Block ids come off a LIFO free stack, which
 * keeps recently freed (cache-warm) blocks in use first.
 * Copy-on-write follows PagedAttention §4.4: sharing is by refcount, and the only
 * block ever written after a fork is a shared partial last block, copied lazily
 * by the first sequence that appends to it.
 */
#include "kv_blocks.h"

#include <stdlib.h>
#include <string.h>

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
	int32_t *free_seqs;   /* (max_seqs) stack of dead rows */
	int32_t *scratch;     /* (2, n_blocks) qc_kv_check's counters, preallocated */
};

void qc_kv_config_init(struct qc_kv_config *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	cfg->block_tokens = QC_KV_BLOCK_TOKENS_DEFAULT;
	cfg->max_seqs = 256;
	cfg->max_seq_tokens = 4096;
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
	kv->free_seqs = malloc((size_t)kv->max_seqs * sizeof *kv->free_seqs);
	if (!kv->free_ids || !kv->refcnt || !kv->scratch || !kv->tables || !kv->seq_len ||
	    !kv->seq_nb || !kv->free_seqs) {
		rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1,
				"kv: out of memory for %llu blocks", (unsigned long long)nb);
		goto out_free;
	}
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
	free(kv->free_seqs);
	free(kv);
}

int32_t qc_kv_blocks_total(const struct qc_kv *kv) { return kv->n_blocks; }
int32_t qc_kv_blocks_free(const struct qc_kv *kv) { return kv->n_free; }
int32_t qc_kv_blocks_used(const struct qc_kv *kv) { return kv->n_blocks - kv->n_free; }
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

static int32_t pop_block(struct qc_kv *kv)
{
	QC_ASSERT(kv->n_free > 0);
	int32_t b = kv->free_ids[--kv->n_free];
	QC_ASSERT(kv->refcnt[b] == 0);
	kv->refcnt[b] = 1;
	return b;
}

static void release_block(struct qc_kv *kv, int32_t b)
{
	QC_ASSERT(kv->refcnt[b] > 0);
	if (--kv->refcnt[b] == 0)
		kv->free_ids[kv->n_free++] = b;
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
	return QC_OK;
}

void qc_kv_seq_free(struct qc_kv *kv, int32_t seq)
{
	if (!qc_kv_seq_live(kv, seq))
		return;
	int32_t *t = row(kv, seq);
	for (int32_t i = 0; i < kv->seq_nb[seq]; i++) {
		release_block(kv, t[i]);
		t[i] = -1;
	}
	kv->seq_nb[seq] = 0;
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
		kv->refcnt[src[i]]++;
	}
	kv->seq_nb[*child] = kv->seq_nb[parent];
	kv->seq_len[*child] = kv->seq_len[parent];
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
	if (need > kv->n_free)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1,
				  "kv: sequence %d needs %d blocks, %d free", seq, need, kv->n_free);
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
		int32_t len = kv->seq_len[s], nb = kv->seq_nb[s];
		if (len < 0) {
			if (nb != 0 || t[0] != -1)
				return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
						  "kv check: dead row %d still holds blocks", s);
			continue;
		}
		n_live++;
		if (len > kv->width * kv->bt || nb != (len + kv->bt - 1) / kv->bt)
			return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
					  "kv check: row %d has %d tokens in %d blocks", s, len, nb);
		for (int32_t i = 0; i < kv->width; i++) {
			int32_t b = t[i];
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
		if (b < 0 || b >= kv->n_blocks || stamp[b] == -2 || count[b] != 0)
			return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
					  "kv check: free-list entry %d (block %d) is out of range, repeated or referenced",
					  i, b);
		stamp[b] = -2;
	}
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
	if (n_zero != kv->n_free)
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1,
				  "kv check: %d unreferenced blocks but %d on the free list", n_zero,
				  kv->n_free);
	return QC_OK;
}
