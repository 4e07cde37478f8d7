/* convert.h — the qconvert pipeline: source model in, bundle out. */
#ifndef QC_CONVERT_H
#define QC_CONVERT_H

#include <stdint.h>

#include "layout.h"
#include "qc_err.h"

struct qc_convert_opts {
	const char *in;            /* .gguf (any shard of a split set) */
	const char *out;           /* bundle path; written via temp + rename */
	enum qc_target target;
	uint32_t alignment;        /* tensor data alignment, >= 4096 */
	unsigned plan_flags;       /* enum qc_plan_flags */
	int verbose;               /* print plan notes and a summary to stderr */
	int *out_fd;               /* NULL: write the bundle at out. Else out is a directory
				    * and the bundle is written there with no name
				    * (qc_bundle_writer_open_unnamed); *out_fd gets its
				    * descriptor, which the caller closes (-1 on failure) */
	const struct cJSON *source; /* NULL: describe and hash the GGUF input; else the
				     * manifest "source" object verbatim (borrowed), as
				     * hf_convert.c passes for its temporary GGUF */
	const char *in_label;      /* NULL: notes name in; else the name the user gave
				    * (hf_convert.c: the checkpoint, not its temporary GGUF) */
	int tp;                    /* 0: a plain bundle; 1..QC_TP_MAX: shards for that many ranks
				    * (docs/tp.md, plan.h qc_plan_shard) */
};

/* Stats a caller may report. */
struct qc_convert_stats {
	uint64_t in_bytes, out_bytes, n_tensors;
	double seconds;
};

struct cJSON;

int qc_convert_gguf(const struct qc_convert_opts *o, struct qc_convert_stats *st, struct qc_err *err);

/* QC_EINVAL naming out when out exists and is in (a file), or any file under in
 * (a folder), by st_dev/st_ino: a symlink or hard link to an input counts. QC_OK
 * when out does not exist. qc_convert_gguf also checks every shard of a split set. */
int qc_convert_check_out(const char *out, const char *in, struct qc_err *err);

/* Default output name: "<input without .gguf / -0000i-of-0000n.gguf>.<target>.qb". */
void qc_convert_default_out(const char *in, enum qc_target tgt, char *buf, size_t len);

#endif
