/* test_cuda_nccl.c — the CUDA backend's NCCL loader and rank start-up agreement
 * (runtime/cuda/backend_cuda_nccl.c), on the CPU: no GPU or CUDA header needed.
 *
 * Checks: version codes read as NCCL prints them (both encodings); a library that
 * is not NCCL is refused naming the missing symbol; a QC_NCCL_LIB that does not
 * exist is named in the error (or, when the loader finds NCCL anyway, the load
 * succeeds); where the CUDA toolkit's libnccl.so.2 is on this machine (or
 * $QC_NCCL_TEST_LIB names one), loading it through the folder form of the hint
 * resolves every function, sets NCCL_NVLS_ENABLE=0 when unset, keeps a value
 * that was set, and turns an NCCL error code into text naming the call.
 * The agreement: over 1, 2 and 5 threads of a tp group, many rounds in a row,
 * every rank gets rank 0's id and the same lowest failing rank (-1 when none):
 * computed independently from the pattern each round uses.
 */
#include "../runtime/cuda/backend_cuda_nccl.c"

#include <pthread.h>

#include "check.h"

static void test_version_str(void)
{
	char b[16];
	CHECK(!strcmp(qc_nccl_version_str(22809, b, sizeof b), "2.28.9"), "22809 -> %s", b);
	CHECK(!strcmp(qc_nccl_version_str(21800, b, sizeof b), "2.18.0"), "21800 -> %s", b);
	CHECK(!strcmp(qc_nccl_version_str(2803, b, sizeof b), "2.8.3"), "2803 -> %s", b);
	CHECK(!strcmp(qc_nccl_version_str(30001, b, sizeof b), "3.0.1"), "30001 -> %s", b);
}

static void test_not_nccl(void)
{
	const struct qc_nccl *n = (const struct qc_nccl *)1;
	struct qc_err err = {0};
	qc_nccl_unload();
	/* the C library's math part: loads, but has no NCCL symbol */
	int rc = qc_nccl_load("libm.so.6", &n, &err);
	CHECK(rc == QC_ECUDA && n == NULL, "libm as NCCL: rc %d", rc);
	CHECK(strstr(err.msg, "not an NCCL library: no ncclGetVersion") != NULL, "message: %s", err.msg);
	/* the result is kept: a second call says the same without searching again */
	struct qc_err err2 = {0};
	CHECK(qc_nccl_load(NULL, &n, &err2) == QC_ECUDA && !strcmp(err.msg, err2.msg), "cached: %s", err2.msg);
	qc_nccl_unload();
}

static void test_missing(void)
{
	const struct qc_nccl *n = NULL;
	struct qc_err err = {0};
	qc_nccl_unload();
	const int rc = qc_nccl_load("/nonexistent/qc-nccl-dir/libnccl.so.2", &n, &err);
	if (rc) { /* nothing on the loader's path either: both attempts and the way out named */
		CHECK(rc == QC_ECUDA, "rc %d", rc);
		CHECK(strstr(err.msg, "QC_NCCL_LIB=/nonexistent/qc-nccl-dir/libnccl.so.2") != NULL, "names the hint: %s",
		      err.msg);
		CHECK(strstr(err.msg, "pip install nvidia-nccl-cu13") != NULL, "says how to install: %s", err.msg);
		printf("missing NCCL: %s\n", err.msg);
	} else { /* the default search found one (LD_LIBRARY_PATH): the start-up line named it */
		CHECK(n && n->version >= QC_NCCL_MIN_VERSION && !strcmp(n->path, NCCL_SONAME), "found %s",
		      n ? n->path : "?");
	}
	qc_nccl_unload();
}

/* The toolkit's library, when this machine has one. */
static void test_real(void)
{
	const char *p = getenv("QC_NCCL_TEST_LIB");
	char dir[512];
	snprintf(dir, sizeof dir, "%s", p && *p ? p : "/usr/local/cuda/lib64");
	char file[600];
	snprintf(file, sizeof file, "%s/" NCCL_SONAME, dir);
	if (access(file, R_OK)) {
		printf("SKIP real NCCL: no %s (set QC_NCCL_TEST_LIB to a folder holding it)\n", file);
		return;
	}
	const struct qc_nccl *n = NULL;
	struct qc_err err = {0};
	char v[16];
	for (int pass = 0; pass < 2; pass++) {
		qc_nccl_unload();
		if (pass == 0)
			unsetenv("NCCL_NVLS_ENABLE");
		else
			setenv("NCCL_NVLS_ENABLE", "1", 1); /* set by the user: kept */
		int rc = qc_nccl_load(dir, &n, &err);
		CHECK(rc == QC_OK, "load %s: %s", dir, err.msg);
		if (rc)
			return;
		CHECK(!strcmp(n->path, file), "loaded %s, wanted %s", n->path, file);
		CHECK(n->version >= QC_NCCL_MIN_VERSION, "version %d", n->version);
		CHECK(n->get_unique_id && n->comm_init_rank && n->all_reduce && n->comm_destroy && n->comm_abort &&
		      n->get_error_string && n->get_last_error, "a function is missing");
		const char *nv = getenv("NCCL_NVLS_ENABLE");
		CHECK(nv && !strcmp(nv, pass == 0 ? "0" : "1"), "NCCL_NVLS_ENABLE=%s on pass %d", nv ? nv : "(unset)",
		      pass);
		int again = 0;
		CHECK(n->get_version(&again) == 0 && again == n->version, "ncclGetVersion %d", again);
		/* ncclInvalidArgument (4): the call is named, with NCCL's own text */
		rc = qc_nccl_check(n, 4, "ncclAllReduce", NULL, &err);
		const char *s = n->get_error_string(4);
		CHECK(rc == QC_ECUDA && strstr(err.msg, "NCCL ncclAllReduce: ") && s && strstr(err.msg, s),
		      "message: %s", err.msg);
		CHECK(qc_nccl_check(n, 0, "ncclAllReduce", NULL, &err) == QC_OK, "success is QC_OK");
		const struct qc_nccl *n2 = NULL;
		CHECK(qc_nccl_load(NULL, &n2, &err) == QC_OK && n2 == n, "second load returns the same library");
	}
	printf("real NCCL: %s from %s\n", qc_nccl_version_str(n->version, v, sizeof v), n->path);
	unsetenv("NCCL_NVLS_ENABLE");
	qc_nccl_unload();
}

/* The agreement over size threads: round k, rank r says ok unless pattern(k, r). */
#define ROUNDS 200

struct agree_arg {
	struct qc_tp_group *g;
	int rank, size;
	int bad[ROUNDS];
	char id0[ROUNDS];
};

static bool fails(int k, int r, int size)
{
	return k % 3 != 0 && (k * 7 + r * 3) % (size + 2) == 0;
}

static void *agree_thread(void *p)
{
	struct agree_arg *a = p;
	for (int k = 0; k < ROUNDS; k++) {
		struct qc_nccl_id id;
		memset(&id, a->rank == 0 ? 'a' + k % 26 : 'z' + 1, sizeof id);
		a->bad[k] = qc_nccl_agree(a->g, a->rank, !fails(k, a->rank, a->size), &id);
		a->id0[k] = id.internal[k % QC_NCCL_ID_BYTES];
	}
	return NULL;
}

static void test_agree(int size)
{
	struct qc_tp_group *g = NULL;
	struct qc_err err = {0};
	CHECK(qc_tp_group_new(size, &g, &err) == QC_OK, "group: %s", err.msg);
	if (!g)
		return;
	struct agree_arg a[QC_TP_MAX];
	pthread_t th[QC_TP_MAX];
	for (int r = 0; r < size; r++) {
		a[r] = (struct agree_arg){.g = g, .rank = r, .size = size};
		CHECK(pthread_create(&th[r], NULL, agree_thread, &a[r]) == 0, "thread %d", r);
	}
	for (int r = 0; r < size; r++)
		pthread_join(th[r], NULL);
	int wrong = 0, n_fail_rounds = 0;
	for (int k = 0; k < ROUNDS; k++) {
		int want = -1;
		for (int r = size - 1; r >= 0; r--)
			if (fails(k, r, size))
				want = r;
		n_fail_rounds += want >= 0;
		for (int r = 0; r < size; r++)
			wrong += a[r].bad[k] != want || a[r].id0[k] != 'a' + k % 26;
	}
	CHECK(wrong == 0, "size %d: %d (round, rank) answers differ from the pattern", size, wrong);
	CHECK(size == 1 || n_fail_rounds > 0, "size %d: the pattern never fails a rank", size);
	qc_tp_group_free(g);
}

int main(void)
{
	test_version_str();
	test_not_nccl();
	test_missing();
	test_real();
	test_agree(1);
	test_agree(2);
	test_agree(5);
	return check_report("test_cuda_nccl");
}
