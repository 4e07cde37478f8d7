/* serve_text.h — generated ids to the text a client sees: UTF-8 and stop strings.
 *
 * Owns: per request, the raw piece bytes not yet valid UTF-8 (a character split
 * across tokens waits for its end; bytes that can never complete become U+FFFD)
 * and the stop-string holdback: text that could still be the start of a stop
 * string is withheld until it either completes one (the text before it is
 * emitted and generation ends, the stop string itself never shown) or diverges.
 * So a streamed concatenation equals the non-streamed text exactly.
 * Pieces are llama.cpp's token_to_piece without the sequence-start space strip
 * (a continuation is not a sequence start); control tokens render as nothing.
 * Non-goals: the whole-text clean-up of qc_detokenize; thread safety.
 */
#ifndef QC_SERVE_TEXT_H
#define QC_SERVE_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "serve_buf.h"

#define SERVE_MAX_STOPS 4        /* OpenAI's limit */
#define SERVE_MAX_STOP_BYTES 256

struct qc_vocab;

struct serve_text {
	const struct qc_vocab *vocab;   /* borrowed */
	const char *stops[SERVE_MAX_STOPS]; /* borrowed, non-empty, NUL-terminated */
	int n_stops;
	struct serve_buf raw;           /* piece bytes not yet valid UTF-8 */
	struct serve_buf held;          /* valid text withheld for the stop check */
	bool stopped;                   /* a stop string matched; later pushes are ignored */
};

/* stops are borrowed and must outlive t. Never fails. */
void serve_text_init(struct serve_text *t, const struct qc_vocab *v, const char *const *stops, int n_stops);
void serve_text_deinit(struct serve_text *t);

/* Feed one generated id; append what became visible to out. Returns 0, or -1
 * when out of memory. t->stopped tells whether a stop string just matched. */
int serve_text_push(struct serve_text *t, int32_t id, struct serve_buf *out);

/* End of generation (not after a stop): flush every withheld byte to out. */
int serve_text_finish(struct serve_text *t, struct serve_buf *out);

/* The valid UTF-8 form of piece bytes s[0, n) into out (U+FFFD for bad bytes). */
int serve_utf8_clean(const char *s, size_t n, struct serve_buf *out);

#endif
