/* check.h — the whole test harness: CHECK counts, prints file:line on failure.
 * Each test binary ends with check_report(), which prints "N passed, N failed"
 * and returns the exit status; tests/run.sh adds the binaries' counts up. */
#ifndef QC_CHECK_H
#define QC_CHECK_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* A binary built from several files (tests/gpu/test_kernels) defines CHECK_SHARED_COUNTERS
 * before including this in each of them, and defines the two counters once, beside main(). */
#ifdef CHECK_SHARED_COUNTERS
extern int check_passed_, check_failed_;
#else
static int check_passed_, check_failed_;
#endif

#define CHECK(cond, ...) \
	do { \
		if (cond) { \
			check_passed_++; \
		} else { \
			check_failed_++; \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__); \
			fputc('\n', stderr); \
		} \
	} while (0)

static inline int check_report(const char *name)
{
	printf("%s: %d passed, %d failed\n", name, check_passed_, check_failed_);
	return check_failed_ ? 1 : 0;
}

/* Fixture root: $QC_FIXTURES, else ../shared/fixtures beside the checkout. */
static inline const char *check_fixtures(void)
{
	const char *e = getenv("QC_FIXTURES");
	return e && *e ? e : "../shared/fixtures";
}

/* True when the fixture root is there. Otherwise prints "SKIP name: ..." (once per
 * call site that asks) and returns false: a clone without ../shared/fixtures runs
 * every check that needs none, and skips the rest instead of failing or crashing. */
static inline bool check_have_fixtures(const char *name)
{
	if (access(check_fixtures(), R_OK | X_OK) == 0)
		return true;
	printf("SKIP %s: no fixtures at %s (set QC_FIXTURES); the checks that need them are not run\n", name,
	       check_fixtures());
	return false;
}

/* Whole file as a NUL-terminated heap string (caller frees); NULL if unreadable.
 * *len (may be NULL) gets the byte count. */
static inline char *check_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
	if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
		free(b);
		b = NULL;
	}
	if (b)
		b[n] = '\0';
	fclose(f);
	if (b && len)
		*len = (size_t)n;
	return b;
}

#endif
