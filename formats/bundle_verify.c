/* bundle_verify.c — see bundle_verify.h. */
#include "bundle_verify.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <xxhash.h>

#define MAX_THREADS 64

struct qc_bundle_verify_job {
	const struct qc_bundle *b;
	uint64_t *order;              /* tensor indices by offset */
	atomic_uint_fast64_t next;    /* next position in order */
	atomic_uint_fast64_t first_bad; /* lowest bad position in order; n_tensors: none */
	uint64_t *got;                /* the hash of each bad tensor, by position */
	int n_threads;
	pthread_t th[MAX_THREADS];
};

struct pos_key {
	uint64_t off, idx;
};

static int by_offset(const void *x, const void *y)
{
	const uint64_t a = ((const struct pos_key *)x)->off, c = ((const struct pos_key *)y)->off;
	return a < c ? -1 : a > c;
}

static void *worker(void *arg)
{
	struct qc_bundle_verify_job *j = arg;
	const uint64_t n = j->b->n_tensors;
	for (;;) {
		const uint64_t pos = atomic_fetch_add(&j->next, 1);
		if (pos >= n || pos > atomic_load(&j->first_bad))
			break; /* a bad tensor earlier in the file already decides the answer */
		const struct qc_bundle_tensor *t = &j->b->tensors[j->order[pos]];
		const uint64_t h = XXH3_64bits(j->b->map + t->off, (size_t)t->size);
		if (h == t->xxh3)
			continue;
		j->got[pos] = h;
		uint_fast64_t cur = atomic_load(&j->first_bad);
		while (pos < cur && !atomic_compare_exchange_weak(&j->first_bad, &cur, pos))
			;
	}
	return NULL;
}

uint64_t qc_bundle_verify_bytes(const struct qc_bundle *b)
{
	uint64_t s = 0;
	for (uint64_t i = 0; i < b->n_tensors; i++)
		s += b->tensors[i].size;
	return s;
}

int qc_bundle_verify_start(const struct qc_bundle *b, int n_threads, struct qc_bundle_verify_job **out,
			   struct qc_err *err)
{
	*out = NULL;
	if (n_threads < 1)
		n_threads = 1;
	if (n_threads > MAX_THREADS)
		n_threads = MAX_THREADS;
	struct qc_bundle_verify_job *j = calloc(1, sizeof *j);
	if (!j || !(j->order = malloc(sizeof *j->order * (b->n_tensors ? b->n_tensors : 1))) ||
	    !(j->got = calloc(b->n_tensors ? b->n_tensors : 1, sizeof *j->got))) {
		if (j) {
			free(j->order);
			free(j);
		}
		return qc_err_set(err, QC_ENOMEM, b->path, NULL, -1, "out of memory");
	}
	j->b = b;
	struct pos_key *k = malloc(sizeof *k * (b->n_tensors ? b->n_tensors : 1));
	if (!k) {
		free(j->order);
		free(j->got);
		free(j);
		return qc_err_set(err, QC_ENOMEM, b->path, NULL, -1, "out of memory");
	}
	for (uint64_t i = 0; i < b->n_tensors; i++)
		k[i] = (struct pos_key){b->tensors[i].off, i};
	qsort(k, (size_t)b->n_tensors, sizeof *k, by_offset);
	for (uint64_t i = 0; i < b->n_tensors; i++)
		j->order[i] = k[i].idx;
	free(k);
	atomic_init(&j->next, 0);
	atomic_init(&j->first_bad, b->n_tensors);
	for (int i = 0; i < n_threads; i++) {
		if (pthread_create(&j->th[i], NULL, worker, j)) {
			j->n_threads = i;
			atomic_store(&j->next, b->n_tensors); /* stop the ones started */
			struct qc_err ignore = {0};
			qc_bundle_verify_finish(j, &ignore);
			return qc_err_set(err, QC_EIO, b->path, NULL, -1, "cannot start verification thread %d", i);
		}
		j->n_threads = i + 1;
	}
	*out = j;
	return QC_OK;
}

int qc_bundle_verify_finish(struct qc_bundle_verify_job *j, struct qc_err *err)
{
	if (!j)
		return QC_OK;
	for (int i = 0; i < j->n_threads; i++)
		pthread_join(j->th[i], NULL);
	int rc = QC_OK;
	const uint64_t bad = atomic_load(&j->first_bad);
	if (bad < j->b->n_tensors) {
		const struct qc_bundle_tensor *t = &j->b->tensors[j->order[bad]];
		rc = qc_err_set(err, QC_ECHECKSUM, j->b->path, t->name, (int64_t)t->off,
				"checksum mismatch: stored %016llx, data hashes to %016llx (the bundle is not "
				"the one qconvert wrote; --no-verify loads it anyway)",
				(unsigned long long)t->xxh3, (unsigned long long)j->got[bad]);
	}
	free(j->order);
	free(j->got);
	free(j);
	return rc;
}
