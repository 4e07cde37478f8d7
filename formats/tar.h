/* tar.h — the few ustar/pax records a bundle is made of.
 * Owns: formatting 512-byte ustar headers (GNU base-256 sizes past 8 GiB),
 * pax "comment" padding records that move the next member's data to an
 * alignment boundary, and parsing a header back for validation.
 * Non-goal: general tar reading (libarchive does that in tests and for inputs). */
#ifndef QC_TAR_H
#define QC_TAR_H

#include <stdbool.h>
#include <stdint.h>

#define QC_TAR_BLOCK 512

/* Fill hdr[512] for a regular file member (mode 0644, mtime 0, owner 0/0, so output is
 * reproducible). name must be < 100 bytes. */
void qc_tar_file_header(uint8_t hdr[QC_TAR_BLOCK], const char *name, uint64_t size);

/* Bytes of padding (header + data, a multiple of 512) to put at pos (a multiple of 512)
 * so that a member header written after it has its data at a multiple of align. */
uint64_t qc_tar_gap(uint64_t pos, uint64_t align);

/* Write a pax extended header carrying only a comment that fills exactly gap bytes
 * (gap a multiple of 512, >= 512) into buf. */
void qc_tar_pad_member(uint8_t *buf, uint64_t gap);

/* Parse a member header: true when the checksum and ustar magic are right; fills the name
 * (NUL-terminated, 100 bytes max), size and type flag. */
bool qc_tar_parse_header(const uint8_t hdr[QC_TAR_BLOCK], char name[101], uint64_t *size, char *type);

#endif
