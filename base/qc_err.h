/* qc_err.h — error codes and the caller-owned error record.
 *
 * Owns: the QC_E* codes and struct qc_err, filled by every fallible call.
 * Non-goals: logging policy (callers decide whether and how to print).
 * Invariant: actions return int (QC_OK or a negative code) and fill *err on
 * failure; predicates return bool. Library code never exits.
 * Message shape: "<path>: tensor '<name>' at offset 0x<off>: <what>".
 */
#ifndef QC_ERR_H
#define QC_ERR_H

#include <stdint.h>
#include <stdio.h>

enum qc_status {
	QC_OK = 0,
	QC_EIO = -1,          /* open/read/write/mmap failed (errno text in msg) */
	QC_EFORMAT = -2,      /* input violates its format */
	QC_ERANGE = -3,       /* a size, count or offset is out of range */
	QC_ENOMEM = -4,
	QC_EUNSUPPORTED = -5, /* valid input we do not handle */
	QC_ECUDA = -6,
	QC_EINVAL = -7,       /* bad argument from the caller */
	QC_ECHECKSUM = -8,    /* stored checksum does not match */
	QC_ENOTFOUND = -9,
};

#define QC_ERR_MSG_MAX 512
#define QC_ERR_NAME_MAX 256

struct qc_err {
	int code;
	int64_t off;                      /* byte offset in path, -1 when none */
	char path[QC_ERR_NAME_MAX];       /* file the problem is in, "" if none */
	char tensor[QC_ERR_NAME_MAX];     /* tensor involved, "" if none */
	char msg[QC_ERR_MSG_MAX];         /* what went wrong, no prefix */
	const char *src_file;             /* where it was raised (debug aid) */
	int src_line;
};

/* Fill err (may be NULL) and return code. path/tensor may be NULL; off < 0
 * means "no offset". Always returns code so callers can `return qc_err_set(...)`. */
int qc_err_set_at(struct qc_err *err, const char *src_file, int src_line, int code,
		  const char *path, const char *tensor, int64_t off, const char *fmt, ...)
	__attribute__((format(printf, 8, 9)));

#define qc_err_set(err, code, path, tensor, off, ...) \
	qc_err_set_at((err), __FILE__, __LINE__, (code), (path), (tensor), (off), __VA_ARGS__)

/* Format the whole user-facing message into buf (always NUL-terminated). */
void qc_err_format(const struct qc_err *err, char *buf, size_t len);

/* Print "prog: <formatted message>\n" to f. */
void qc_err_print(const struct qc_err *err, const char *prog, FILE *f);

const char *qc_status_name(int code);

/* Invariant violations (bugs, never bad input): abort with file:line. */
#define QC_ASSERT(x) \
	do { if (!(x)) qc_assert_fail(__FILE__, __LINE__, #x); } while (0)
void qc_assert_fail(const char *file, int line, const char *what) __attribute__((noreturn));

/* A deliberate slow or alternative path logs once per call site. */
#define QC_WARN_ONCE(...) \
	do { static int warned_; if (!warned_) { warned_ = 1; qc_warn_prefix(); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
/* Prints "<program>: warning: " to stderr. */
void qc_warn_prefix(void);

#endif
