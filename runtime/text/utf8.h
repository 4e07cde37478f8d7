/* utf8.h — one UTF-8 sequence check shared by the detokenizer, qrun and qserve. */
#ifndef QC_UTF8_H
#define QC_UTF8_H

#include <stddef.h>

/* Length of the valid UTF-8 character at s (1..4; n > 0 bytes available); 0 when
 * the n bytes are a valid but unfinished prefix; -k when the first k bytes are a
 * maximal invalid subpart (Unicode's "maximal subpart" rule: overlongs,
 * surrogates and values above U+10FFFF are invalid). */
int qc_utf8_char(const unsigned char *s, size_t n);

#endif
