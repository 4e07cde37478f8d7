/* tar.c — ustar/pax records for bundles (see tar.h; POSIX.1-2001 pax, ustar). */
#include "tar.h"

#include <stdio.h>
#include <string.h>

static void octal(char *dst, size_t width, uint64_t v)
{
	/* width-1 digits then NUL, as ustar wants */
	char tmp[32];
	snprintf(tmp, sizeof tmp, "%0*llo", (int)(width - 1), (unsigned long long)v);
	memcpy(dst, tmp, width - 1);
	dst[width - 1] = '\0';
}

static void set_size(uint8_t *field, uint64_t size)
{
	if (size < 077777777777ULL) {
		octal((char *)field, 12, size);
		return;
	}
	/* GNU base-256: high bit set, big-endian binary in the rest */
	memset(field, 0, 12);
	field[0] = 0x80;
	for (int i = 11; i >= 4; i--, size >>= 8)
		field[i] = (uint8_t)size;
}

static void finish(uint8_t *h)
{
	unsigned sum = 0;
	memset(h + 148, ' ', 8);
	for (int i = 0; i < QC_TAR_BLOCK; i++)
		sum += h[i];
	char tmp[8];
	snprintf(tmp, sizeof tmp, "%06o", sum);
	memcpy(h + 148, tmp, 7); /* six digits, NUL, then the space already there */
}

static void header(uint8_t *h, const char *name, uint64_t size, char type)
{
	memset(h, 0, QC_TAR_BLOCK);
	size_t n = strlen(name);
	memcpy(h, name, n < 100 ? n : 99);
	octal((char *)h + 100, 8, 0644);
	octal((char *)h + 108, 8, 0);
	octal((char *)h + 116, 8, 0);
	set_size(h + 124, size);
	octal((char *)h + 136, 12, 0);
	h[156] = (uint8_t)type;
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	finish(h);
}

void qc_tar_file_header(uint8_t hdr[QC_TAR_BLOCK], const char *name, uint64_t size)
{
	header(hdr, name, size, '0');
}

uint64_t qc_tar_gap(uint64_t pos, uint64_t align)
{
	uint64_t data = (pos + QC_TAR_BLOCK + align - 1) & ~(align - 1);
	return data - QC_TAR_BLOCK - pos;
}

void qc_tar_pad_member(uint8_t *buf, uint64_t gap)
{
	uint64_t len = gap - QC_TAR_BLOCK; /* pax data bytes, a multiple of 512 */
	header(buf, "././@PaxHeader", len, 'x');
	if (!len)
		return;
	/* one record "<len> comment=<fill>\n" of exactly len bytes */
	uint8_t *d = buf + QC_TAR_BLOCK;
	int w = snprintf((char *)d, 32, "%llu comment=", (unsigned long long)len);
	memset(d + w, '.', len - (uint64_t)w - 1);
	d[len - 1] = '\n';
}

bool qc_tar_parse_header(const uint8_t hdr[QC_TAR_BLOCK], char name[101], uint64_t *size, char *type)
{
	if (memcmp(hdr + 257, "ustar", 5) != 0)
		return false;
	unsigned stored = 0, sum = 0;
	for (int i = 148; i < 156 && hdr[i] >= '0' && hdr[i] <= '7'; i++)
		stored = stored * 8 + (hdr[i] - '0');
	for (int i = 0; i < QC_TAR_BLOCK; i++)
		sum += (i >= 148 && i < 156) ? ' ' : hdr[i];
	if (sum != stored)
		return false;
	memcpy(name, hdr, 100);
	name[100] = '\0';
	if (hdr[124] & 0x80) {
		uint64_t v = 0;
		for (int i = 4; i < 12; i++)
			v = (v << 8) | hdr[124 + i];
		*size = v;
	} else {
		uint64_t v = 0;
		for (int i = 124; i < 136 && hdr[i] >= '0' && hdr[i] <= '7'; i++)
			v = v * 8 + (uint64_t)(hdr[i] - '0');
		*size = v;
	}
	*type = (char)hdr[156];
	return true;
}
