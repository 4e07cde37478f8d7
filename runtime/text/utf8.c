/* utf8.c — qc_utf8_char (utf8.h). */
#include "utf8.h"

int qc_utf8_char(const unsigned char *s, size_t n)
{
	unsigned char b = s[0];
	size_t need;
	unsigned char lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
	if (b < 0x80)
		return 1;
	if (b >= 0xc2 && b <= 0xdf)
		need = 2;
	else if (b >= 0xe0 && b <= 0xef)
		need = 3, lo = b == 0xe0 ? 0xa0 : 0x80, hi = b == 0xed ? 0x9f : 0xbf;
	else if (b >= 0xf0 && b <= 0xf4)
		need = 4, lo = b == 0xf0 ? 0x90 : 0x80, hi = b == 0xf4 ? 0x8f : 0xbf;
	else
		return -1;
	for (size_t k = 1; k < need; k++) {
		if (k >= n)
			return 0;
		unsigned char c = s[k];
		if (k == 1 ? (c < lo || c > hi) : (c & 0xc0) != 0x80)
			return -(int)k;
	}
	return (int)need;
}
