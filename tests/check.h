/* check.h — the whole test harness: CHECK counts, prints file:line on failure.
 * Each test binary ends with check_report(), which prints "N passed, N failed"
 * and returns the exit status; tests/run.sh adds the binaries' counts up. */
#ifndef QC_CHECK_H
#define QC_CHECK_H

#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
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

/* xorshift64 step of *s, the tests' own reproducible generator (each test keeps its
 * seed): the top 48 bits' low 32 */
static inline uint32_t check_xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (uint32_t)(*s >> 16);
}

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

/* Run bin with args (NULL-terminated, at most 14), stdout to /dev/null and stderr
 * to err_path. Returns the exit status, 128 + signal when it died, -1 when it
 * could not be started. */
static inline int check_spawn(const char *bin, const char *const *args, const char *err_path)
{
	const char *argv[16] = { bin };
	int n = 1;
	for (; args[n - 1] && n < 15; n++)
		argv[n] = args[n - 1];
	argv[n] = NULL;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	pid_t pid;
	int rc = posix_spawn(&pid, bin, &fa, NULL, (char *const *)(uintptr_t)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0) {
		fprintf(stderr, "  cannot run %s: %s\n", bin, strerror(rc));
		return -1;
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static inline int check_exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

#endif
