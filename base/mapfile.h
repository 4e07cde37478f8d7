/* mapfile.h — read-only whole-file mappings.
 * Owns: an fd and a PROT_READ mapping. The mapping is the only view of file
 * bytes parsers use; callers drop pages they streamed through with
 * qc_map_release so converting a large model keeps RSS bounded. */
#ifndef QC_MAPFILE_H
#define QC_MAPFILE_H

#include <stdint.h>

#include "qc_err.h"

struct qc_map {
	int fd;
	const uint8_t *p;  /* NULL for an empty file */
	uint64_t size;
};

int qc_map_open(const char *path, struct qc_map *m, struct qc_err *err);
void qc_map_close(struct qc_map *m); /* accepts a zeroed/closed map */
/* Tell the kernel the process is done with [off, off+len) for now (drops it from
 * RSS; the page cache keeps it). Never fails visibly. */
void qc_map_release(const struct qc_map *m, uint64_t off, uint64_t len);
/* Copy [off, off+n) of the file into buf with pread (the mapping is not touched). */
int qc_map_pread(const struct qc_map *m, void *buf, uint64_t off, uint64_t n, struct qc_err *err);
/* Hint sequential access over [off, off+len). */
void qc_map_will_need(const struct qc_map *m, uint64_t off, uint64_t len);

#endif
