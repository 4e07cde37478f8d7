/* serve_key.h — where qserve's API key comes from.
 *
 * Owns: the precedence --api-key, then --api-key-file PATH, then the
 * QSERVE_API_KEY environment variable (both flags at once is an error: one of
 * them would be silently ignored), and reading the key file: one line, trailing
 * CR/LF/spaces/tabs dropped. The file and the environment keep the key
 * out of `ps`. The key itself is never put in an error message or a log line.
 * Non-goals: several keys, key rotation, checking the file's permissions.
 */
#ifndef QC_SERVE_KEY_H
#define QC_SERVE_KEY_H

#include "qc_err.h"

#define SERVE_KEY_MAX 4096  /* bytes of a key file read; a longer first line is refused */

/* flag_key (--api-key or NULL), key_file (--api-key-file or NULL), env_key
 * (getenv("QSERVE_API_KEY") or NULL; the caller reads the environment). *out
 * is a malloc'd key (caller frees) or NULL for no auth; *source names where it
 * came from ("--api-key", "--api-key-file", "QSERVE_API_KEY", or "none").
 * QC_EINVAL (both flags, an empty key from any source, a file with more than
 * one non-empty line or a line over SERVE_KEY_MAX bytes), QC_EIO (unreadable
 * file, the path and errno text in err), QC_ENOMEM. */
int serve_key_load(const char *flag_key, const char *key_file, const char *env_key, char **out, const char **source,
		   struct qc_err *err);

#endif
