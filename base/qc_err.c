/* qc_err.c — filling and formatting struct qc_err. See qc_err.h. */
#include "qc_err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static void copy_name(char *dst, const char *src)
{
	if (!src) {
		dst[0] = '\0';
		return;
	}
	size_t n = strlen(src);
	if (n >= QC_ERR_NAME_MAX)
		n = QC_ERR_NAME_MAX - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

int qc_err_set_at(struct qc_err *err, const char *src_file, int src_line, int code,
		  const char *path, const char *tensor, int64_t off, const char *fmt, ...)
{
	if (!err)
		return code;
	err->code = code;
	err->off = off;
	err->src_file = src_file;
	err->src_line = src_line;
	/* path/tensor may alias err's own fields when re-raising */
	if (path != err->path)
		copy_name(err->path, path);
	if (tensor != err->tensor)
		copy_name(err->tensor, tensor);
	char tmp[QC_ERR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	memcpy(err->msg, tmp, sizeof tmp);
	return code;
}

void qc_err_format(const struct qc_err *err, char *buf, size_t len)
{
	size_t n = 0;
	if (!len)
		return;
	buf[0] = '\0';
	if (err->path[0])
		n += (size_t)snprintf(buf + n, len - n, "%s: ", err->path);
	if (n < len && err->tensor[0])
		n += (size_t)snprintf(buf + n, len - n, "tensor '%s'%s", err->tensor, err->off >= 0 ? " " : "");
	if (n < len && err->off >= 0)
		n += (size_t)snprintf(buf + n, len - n, "at offset 0x%llx (%lld)",
				      (unsigned long long)err->off, (long long)err->off);
	if (n < len && (err->tensor[0] || err->off >= 0))
		n += (size_t)snprintf(buf + n, len - n, ": ");
	if (n < len)
		snprintf(buf + n, len - n, "%s", err->msg);
}

void qc_err_print(const struct qc_err *err, const char *prog, FILE *f)
{
	char buf[QC_ERR_MSG_MAX * 2 + 64];
	qc_err_format(err, buf, sizeof buf);
	fprintf(f, "%s: %s\n", prog, buf);
	if (getenv("QC_DEBUG") && err->src_file)
		fprintf(f, "%s: (raised at %s:%d, %s)\n", prog, err->src_file, err->src_line,
			qc_status_name(err->code));
}

const char *qc_status_name(int code)
{
	switch (code) {
	case QC_OK: return "ok";
	case QC_EIO: return "I/O error";
	case QC_EFORMAT: return "format error";
	case QC_ERANGE: return "out of range";
	case QC_ENOMEM: return "out of memory";
	case QC_EUNSUPPORTED: return "unsupported";
	case QC_ECUDA: return "CUDA error";
	case QC_EINVAL: return "invalid argument";
	case QC_ECHECKSUM: return "checksum mismatch";
	case QC_ENOTFOUND: return "not found";
	}
	return "unknown error";
}

void qc_assert_fail(const char *file, int line, const char *what)
{
	fprintf(stderr, "qconvert: internal error at %s:%d: assertion '%s' failed\n", file, line, what);
	abort();
}

void qc_warn_prefix(void)
{
	fprintf(stderr, "%s: warning: ", program_invocation_short_name);
}
