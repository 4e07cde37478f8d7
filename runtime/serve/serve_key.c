/* serve_key.c — the API key from a flag, a file or the environment (see serve_key.h).
 *
 * Owns: the precedence and the file read. An empty key is always an error, from
 * whichever source: it would let an empty Bearer token in, which no operator
 * who set a key means.
 */
#include "serve_key.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool blank(char c)
{
	return c == '\n' || c == '\r' || c == ' ' || c == '\t';
}

static int read_file(const char *path, char **out, struct qc_err *err)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return qc_err_set(err, QC_EIO, path, NULL, -1, "--api-key-file: cannot open: %s", strerror(errno));
	char *buf = malloc(SERVE_KEY_MAX + 2);
	if (!buf) {
		fclose(f);
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	}
	size_t n = fread(buf, 1, SERVE_KEY_MAX + 1, f);
	int bad_read = ferror(f);
	fclose(f);
	if (bad_read) {
		free(buf);
		return qc_err_set(err, QC_EIO, path, NULL, -1, "--api-key-file: read error");
	}
	while (n && blank(buf[n - 1]))
		n--;
	buf[n] = '\0';
	const char *why = n == 0 ? "is empty (an empty key would let an empty Bearer token in)"
			  : n > SERVE_KEY_MAX ? "is longer than 4096 bytes"
			  : memchr(buf, '\n', n) || memchr(buf, '\r', n) ? "has more than one line; put only the key in it"
			  : memchr(buf, '\0', n) ? "contains a NUL byte"
			  : NULL;
	if (why) {
		free(buf);
		return qc_err_set(err, QC_EINVAL, path, NULL, -1, "--api-key-file: the key %s", why);
	}
	*out = buf;
	return QC_OK;
}

int serve_key_load(const char *flag_key, const char *key_file, const char *env_key, char **out, const char **source,
		   struct qc_err *err)
{
	*out = NULL;
	*source = "none";
	if (flag_key && key_file)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "--api-key and --api-key-file: give only one");
	if (key_file) {
		*source = "--api-key-file";
		return read_file(key_file, out, err);
	}
	const char *k = flag_key ? flag_key : env_key;
	if (!k)
		return QC_OK;
	*source = flag_key ? "--api-key" : "QSERVE_API_KEY";
	if (!k[0])
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "%s is empty: an empty key would let an empty Bearer token in; give a key or unset it",
				  *source);
	if (!(*out = strdup(k)))
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	return QC_OK;
}
