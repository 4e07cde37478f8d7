/* bad_input_util.h — what the hostile-input tests (tests/test_bad_*.c) share: byte
 * buffers, the error expectation (code, path, tensor and offset all in the qc_err and
 * in its formatted message), the qconvert runner and the bundle-header accessors used
 * to rewrite a converted bundle's manifest. Header-only with static functions, as
 * check.h is; the GGUF side (independent walker, fixtures, rebuilds) is gguf_walk.h.
 * Bloat: no parsing here — the readers under test do that.
 */
#ifndef QC_BAD_INPUT_UTIL_H
#define QC_BAD_INPUT_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <cjson/cJSON.h>

#include "../tests/check.h"
#include "bundle.h"
#include "tar.h"

extern char **environ;

/* ---- byte buffers ------------------------------------------------------------ */

struct blob {
	uint8_t *p;
	size_t len, cap;
};

static inline void put(struct blob *b, const void *src, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n)
			cap *= 2;
		uint8_t *p = realloc(b->p, cap);
		if (!p) {
			fprintf(stderr, "bad_input_util: out of memory\n");
			exit(1);
		}
		b->p = p;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->len, src, n);
	b->len += n;
}

static inline void put_le(struct blob *b, uint64_t v, int n)
{
	uint8_t t[8];
	for (int i = 0; i < n; i++)
		t[i] = (uint8_t)(v >> (8 * i));
	put(b, t, (size_t)n);
}

static inline void put_str(struct blob *b, const char *s, size_t n)
{
	put_le(b, n, 8);
	put(b, s, n);
}

static inline void put_zeros(struct blob *b, size_t n)
{
	static const uint8_t z[512];
	while (n) {
		size_t k = n < sizeof z ? n : sizeof z;
		put(b, z, k);
		n -= k;
	}
}

static inline void blob_free(struct blob *b)
{
	free(b->p);
	*b = (struct blob){0};
}

static inline void set_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static inline uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	struct blob b = {0};
	uint8_t tmp[65536];
	size_t n;
	while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
		put(&b, tmp, n);
	fclose(f);
	*len = b.len;
	if (!b.p)
		put(&b, "", 1);
	return b.p;
}

static inline bool spit(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return false;
	bool ok = fwrite(p, 1, n, f) == n;
	return fclose(f) == 0 && ok;
}

static inline uint8_t *dup_bytes(const uint8_t *p, size_t n)
{
	uint8_t *d = malloc(n ? n : 1);
	if (!d) {
		fprintf(stderr, "bad_input_util: out of memory\n");
		exit(1);
	}
	memcpy(d, p, n);
	return d;
}

/* ---- expectations ---------------------------------------------------------------- */

enum off_rule { OFF_EXACT, OFF_AT_MOST };

/* true when err says code, path, tensor ("" = none expected, NULL = don't care) and
 * offset (exact, or within [0, off]); the formatted message must show all of them. */
static inline bool err_matches(const char *what, int rc, const struct qc_err *err, const char *path, int code,
			int64_t off, enum off_rule rule, const char *tensor, bool quiet)
{
	char msg[2 * QC_ERR_MSG_MAX + 64], want_off[64], want_t[QC_ERR_NAME_MAX + 16];
	qc_err_format(err, msg, sizeof msg);
	bool off_ok = rule == OFF_EXACT ? err->off == off : (err->off >= 0 && err->off <= off);
	snprintf(want_off, sizeof want_off, "offset 0x%llx", (unsigned long long)err->off);
	bool ok = rc == code && err->code == code && off_ok && strcmp(err->path, path) == 0 &&
		  strstr(msg, path) && strstr(msg, want_off) && err->msg[0];
	if (tensor) {
		snprintf(want_t, sizeof want_t, "tensor '%s'", tensor);
		ok = ok && strcmp(err->tensor, tensor) == 0 && (!tensor[0] || strstr(msg, want_t));
	}
	if (!ok && !quiet)
		fprintf(stderr, "  %s: want %s at offset %s%lld%s%s%s; got rc %d (%s): %s\n", what, qc_status_name(code),
			rule == OFF_AT_MOST ? "<= " : "", (long long)off, tensor && tensor[0] ? " naming '" : "",
			tensor && tensor[0] ? tensor : "", tensor && tensor[0] ? "'" : "", rc, qc_status_name(rc), msg);
	return ok;
}

/* ---- the CLI ---------------------------------------------------------------------------- */

static char qc_bin[1024];

static inline void find_bin(void)
{
	const char *dir = getenv("QC_BIN");
	char tmp[512];
	if (!dir || !*dir) {
		const char *build = getenv("QC_BUILD");
		snprintf(tmp, sizeof tmp, "%s/bin", build && *build ? build : "build");
		dir = tmp;
	}
	snprintf(qc_bin, sizeof qc_bin, "%s/qconvert", dir);
}

/* Run qconvert with args; stderr goes to err_path. Returns the exit status, or
 * 128 + signal when it died. */
static inline int run_cli(const char *const *args, const char *err_path)
{
	return check_spawn(qc_bin, args, err_path);
}

static inline bool file_exists(const char *path)
{
	return check_exists(path);
}

/* Any "<base>.tmp.*" left in dir? */
static inline bool temp_left(const char *dir, const char *base)
{
	char pre[256];
	snprintf(pre, sizeof pre, "%s.tmp.", base);
	DIR *dp = opendir(dir);
	bool found = false;
	struct dirent *e;
	while (dp && (e = readdir(dp)))
		if (strncmp(e->d_name, pre, strlen(pre)) == 0)
			found = true;
	if (dp)
		closedir(dp);
	return found;
}

static inline void rm_tree_files(const char *dir)
{
	DIR *dp = opendir(dir);
	struct dirent *e;
	char path[1400]; /* dir may be 1100 long (make_inputs) */
	while (dp && (e = readdir(dp))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		unlink(path);
	}
	if (dp)
		closedir(dp);
	rmdir(dir);
}

/* qconvert <stories260K.gguf> --target cpu -q -o <dir>/stories260K.qb, the bundle the
 * bundle and hyper-parameter tests edit; bundle (len bytes) gets its path. The exit status. */
static inline int convert_stories(const char *gguf, const char *dir, char *bundle, size_t len)
{
	char errp[1100];
	snprintf(bundle, len, "%s/stories260K.qb", dir);
	snprintf(errp, sizeof errp, "%s/stderr.txt", dir);
	const char *args[] = { gguf, "--target", "cpu", "-q", "-o", bundle, NULL };
	return run_cli(args, errp);
}

/* ---- a converted bundle's header and manifest ---------------------------------------- */

#define HDR QC_TAR_BLOCK /* the bundle header's file offset */

static inline void bundle_rehash(uint8_t *p)
{
	set_le(p + HDR + 48, XXH3_64bits(p + HDR, 48), 8);
}

/* The bundle with its manifest replaced by json: same member order, new manifest
 * member header, size, hashes and file size (as the writer lays them out). */
static inline void bundle_with_manifest(const uint8_t *src, const char *json, struct blob *out)
{
	uint64_t moff = get_le(src + HDR + 16, 8), mlen = strlen(json);
	uint8_t th[QC_TAR_BLOCK];
	*out = (struct blob){0};
	put(out, src, (size_t)(moff - QC_TAR_BLOCK));
	qc_tar_file_header(th, "manifest.json", mlen);
	put(out, th, sizeof th);
	put(out, json, (size_t)mlen);
	put_zeros(out, (size_t)((QC_TAR_BLOCK - mlen % QC_TAR_BLOCK) % QC_TAR_BLOCK + 2 * QC_TAR_BLOCK));
	set_le(out->p + HDR + 24, mlen, 8);
	set_le(out->p + HDR + 32, XXH3_64bits(json, (size_t)mlen), 8);
	set_le(out->p + HDR + 40, out->len, 8);
	bundle_rehash(out->p);
}

static inline cJSON *bundle_manifest(const uint8_t *p)
{
	uint64_t moff = get_le(p + HDR + 16, 8), mlen = get_le(p + HDR + 24, 8);
	return cJSON_ParseWithLength((const char *)p + moff, (size_t)mlen);
}

static inline void set_num(cJSON *o, const char *key, double v)
{
	cJSON_ReplaceItemInObjectCaseSensitive(o, key, cJSON_CreateNumber(v));
}

#endif
