/* test_tp_group.c — the tensor-parallel rank group (runtime/engine/tp_group.c).
 *
 * For every size 1..QC_TP_MAX, one thread per rank runs 40 all-reduces of random
 * lengths (0, 1, odd, growing past the scratch and shrinking again) over values
 * of mixed magnitudes (so float addition order shows): every rank's result must
 * equal, bit for bit, the sum this test takes itself in rank order 0, 1, ..,
 * size-1, and every rank must hold the same bits. The reverse-order sum must
 * differ somewhere (the inputs do tell the order apart, so the check can fail).
 * The barrier and the shared slot: rank 0 writes, every rank reads it after a
 * barrier. Sizes 0 and QC_TP_MAX + 1 are refused.
 * The device all-reduce's C reference (runtime/ops qc_ref_tp_sum, tp_allreduce.cu's)
 * must give the host all-reduce's bits on every call, and on 1, 2^24, -2^24 the
 * rank-order 0 where the reverse order gives 1.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ops.h"
#include "tp_group.h"

#define N_CALLS 40
#define MAX_N 5000

struct rank_arg {
	struct qc_tp_group *g;
	int rank, size;
	const int64_t *lens;         /* (N_CALLS) */
	float *in;                   /* (N_CALLS, MAX_N) this rank's inputs */
	float *out;                  /* (N_CALLS, MAX_N) its results */
	int rc;
	int slot_ok;
};

static uint64_t lcg_next(uint64_t *s)
{
	*s = *s * 6364136223846793005u + 1442695040888963407u;
	return *s >> 11;
}

/* A value of magnitude 2^-10 .. 2^20 with a random sign: sums of such depend on order. */
static float mixed(uint64_t *s)
{
	const double u = (double)(lcg_next(s) & 0xffffff) / (double)0x1000000;
	const int e = (int)(lcg_next(s) % 31) - 10;
	const double v = (1.0 + u) * (double)(1LL << (e + 10)) / 1024.0;
	return (float)(lcg_next(s) & 1 ? -v : v);
}

static void *rank_main(void *p)
{
	struct rank_arg *a = p;
	struct qc_err err = {0};
	unsigned char *slot = qc_tp_group_slot(a->g);
	if (a->rank == 0)
		for (int i = 0; i < QC_TP_SLOT_BYTES; i++)
			slot[i] = (unsigned char)(i * 7 + a->size);
	qc_tp_barrier(a->g);
	a->slot_ok = 1;
	for (int i = 0; i < QC_TP_SLOT_BYTES; i++)
		a->slot_ok &= slot[i] == (unsigned char)(i * 7 + a->size);
	qc_tp_barrier(a->g); /* nobody writes the slot again before all have read it */
	for (int c = 0; c < N_CALLS && !a->rc; c++) {
		float *buf = a->out + (size_t)c * MAX_N;
		memcpy(buf, a->in + (size_t)c * MAX_N, sizeof(float) * (size_t)a->lens[c]);
		a->rc = qc_tp_allreduce_f32(a->g, a->rank, buf, a->lens[c], &err);
	}
	return NULL;
}

static void run_size(int size, uint64_t seed)
{
	struct qc_tp_group *g = NULL;
	struct qc_err err = {0};
	int rc = qc_tp_group_new(size, &g, &err);
	CHECK(rc == QC_OK && g && qc_tp_group_size(g) == size, "group of %d: %s", size, err.msg);
	if (rc)
		return;
	int64_t lens[N_CALLS];
	uint64_t s = seed;
	for (int c = 0; c < N_CALLS; c++) /* 0, 1, random, with a big one in the middle */
		lens[c] = c == 0 ? 0 : c == 1 ? 1 : c == N_CALLS / 2 ? MAX_N : (int64_t)(lcg_next(&s) % (MAX_N / 2));
	struct rank_arg a[QC_TP_MAX];
	pthread_t th[QC_TP_MAX];
	for (int r = 0; r < size; r++) {
		a[r] = (struct rank_arg){.g = g, .rank = r, .size = size, .lens = lens};
		a[r].in = malloc(sizeof(float) * N_CALLS * MAX_N);
		a[r].out = malloc(sizeof(float) * N_CALLS * MAX_N);
		for (size_t i = 0; i < (size_t)N_CALLS * MAX_N; i++)
			a[r].in[i] = mixed(&s);
	}
	for (int r = 0; r < size; r++)
		pthread_create(&th[r], NULL, rank_main, &a[r]);
	for (int r = 0; r < size; r++)
		pthread_join(th[r], NULL);
	long bad = 0, apart = 0, reverse_differs = 0, compared = 0;
	for (int r = 0; r < size; r++) {
		CHECK(a[r].rc == QC_OK, "size %d rank %d: all-reduce failed (%d)", size, r, a[r].rc);
		CHECK(a[r].slot_ok, "size %d rank %d: the slot did not hold rank 0's bytes", size, r);
	}
	for (int c = 0; c < N_CALLS; c++)
		for (int64_t i = 0; i < lens[c]; i++) {
			const size_t at = (size_t)c * MAX_N + (size_t)i;
			float want = a[0].in[at], rev = a[size - 1].in[at];
			for (int r = 1; r < size; r++) {
				want += a[r].in[at];
				rev += a[size - 1 - r].in[at];
			}
			reverse_differs += memcmp(&want, &rev, sizeof want) != 0;
			compared++;
			for (int r = 0; r < size; r++) {
				bad += memcmp(&a[r].out[at], &want, sizeof want) != 0;
				apart += memcmp(&a[r].out[at], &a[0].out[at], sizeof want) != 0;
			}
		}
	/* qc_ref_tp_sum (the device kernel's reference) against the host all-reduce */
	long ref_bad = 0;
	float *ref = malloc(sizeof(float) * MAX_N);
	for (int c = 0; c < N_CALLS && ref; c++) {
		const float *x[QC_TP_MAX];
		for (int r = 0; r < size; r++)
			x[r] = a[r].in + (size_t)c * MAX_N;
		qc_ref_tp_sum(x, size, lens[c], ref);
		for (int64_t i = 0; i < lens[c]; i++)
			ref_bad += memcmp(&ref[i], &a[0].out[(size_t)c * MAX_N + (size_t)i], sizeof(float)) != 0;
	}
	CHECK(ref && ref_bad == 0, "size %d: qc_ref_tp_sum differs from the host all-reduce in %ld values", size, ref_bad);
	free(ref);
	CHECK(bad == 0, "size %d: %ld results differ from the rank-order sum", size, bad);
	CHECK(apart == 0, "size %d: %ld results differ between ranks", size, apart);
	if (size >= 3)
		CHECK(reverse_differs > 0, "size %d: the inputs do not tell the summation order apart", size);
	printf("  size %d: %ld sums over %d calls, bit-identical to the rank-order sum on every rank (%ld of them "
	       "differ in reverse order)\n", size, compared, N_CALLS, reverse_differs);
	for (int r = 0; r < size; r++) {
		free(a[r].in);
		free(a[r].out);
	}
	qc_tp_group_free(g);
}

int main(void)
{
	struct qc_tp_group *g = NULL;
	struct qc_err err = {0};
	CHECK(qc_tp_group_new(0, &g, &err) == QC_EINVAL && !g, "size 0 accepted");
	CHECK(qc_tp_group_new(QC_TP_MAX + 1, &g, &err) == QC_EINVAL && !g, "size %d accepted", QC_TP_MAX + 1);
	qc_tp_group_free(NULL);
	{ /* 2^24 + 1 rounds to 2^24 (ties to even): the order shows */
		const float x0[] = {1.0f}, x1[] = {0x1p24f}, x2[] = {-0x1p24f};
		const float *fwd[] = {x0, x1, x2}, *rev[] = {x2, x1, x0};
		float y = -1.0f, z = -1.0f;
		qc_ref_tp_sum(fwd, 3, 1, &y);
		qc_ref_tp_sum(rev, 3, 1, &z);
		CHECK(y == 0.0f && z == 1.0f, "qc_ref_tp_sum: 1 + 2^24 - 2^24 gave %g (want 0), reversed %g (want 1)",
		      (double)y, (double)z);
	}
	for (int size = 1; size <= QC_TP_MAX; size++)
		run_size(size, 0x1234567u + (uint64_t)size);
	return check_report("test_tp_group");
}
