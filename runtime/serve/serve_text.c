/* serve_text.c — UTF-8 completion and stop-string holdback (see serve_text.h).
 *
 * Owns: the per-token push: piece -> raw bytes -> longest valid UTF-8 prefix ->
 * held text -> stop search -> emit all but the longest suffix that is a prefix
 * of some stop string. Cost per token is O(held * stops), held < 256 bytes.
 * Non-goals: stop token ids (the engine's eos/stop ids handle those).
 * UTF-8 validity is RFC 3629 (no overlongs, surrogates, > U+10FFFF).
 */
#include "serve_text.h"
#include "utf8.h"

#include <string.h>

#include "vocab.h"

void serve_text_init(struct serve_text *t, const struct qc_vocab *v, const char *const *stops, int n_stops)
{
	memset(t, 0, sizeof *t);
	t->vocab = v;
	for (int i = 0; i < n_stops && i < SERVE_MAX_STOPS; i++)
		if (stops[i] && stops[i][0])
			t->stops[t->n_stops++] = stops[i];
}

void serve_text_deinit(struct serve_text *t)
{
	serve_buf_deinit(&t->raw);
	serve_buf_deinit(&t->held);
}

/* Move the valid prefix of raw to out; keep a cut-off tail unless final. */
static int drain_utf8(struct serve_buf *raw, bool final, struct serve_buf *out)
{
	const unsigned char *u = (const unsigned char *)raw->p;
	size_t i = 0;
	while (i < raw->len) {
		const int l = qc_utf8_char(u + i, raw->len - i);
		if (l > 0) {
			if (serve_buf_put(out, u + i, (size_t)l))
				return -1;
			i += (size_t)l;
		} else if (l == 0 && !final) {
			break;
		} else {
			if (serve_buf_put(out, "\xef\xbf\xbd", 3))
				return -1;
			i++;
		}
	}
	serve_buf_consume(raw, i);
	return 0;
}

int serve_utf8_clean(const char *s, size_t n, struct serve_buf *out)
{
	struct serve_buf tmp = {0};
	int rc = serve_buf_put(&tmp, s, n);
	if (!rc)
		rc = drain_utf8(&tmp, true, out);
	serve_buf_deinit(&tmp);
	return rc;
}

/* Emit held text up to where a stop string could still begin. */
static int release_held(struct serve_text *t, struct serve_buf *out)
{
	const char *h = t->held.p;
	size_t n = t->held.len, cut = n, keep = 0;
	for (int s = 0; s < t->n_stops; s++) {
		const char *m = n ? memmem(h, n, t->stops[s], strlen(t->stops[s])) : NULL;
		if (m && (size_t)(m - h) < cut) {
			cut = (size_t)(m - h);
			t->stopped = true;
		}
	}
	if (t->stopped) {
		int rc = serve_buf_put(out, h, cut);
		t->held.len = 0;
		return rc;
	}
	for (int s = 0; s < t->n_stops; s++) {
		size_t sl = strlen(t->stops[s]);
		for (size_t k = sl - 1 < n ? sl - 1 : n; k > keep; k--)
			if (!memcmp(h + n - k, t->stops[s], k)) {
				keep = k;
				break;
			}
	}
	if (serve_buf_put(out, h, n - keep))
		return -1;
	serve_buf_consume(&t->held, n - keep);
	return 0;
}

int serve_text_push(struct serve_text *t, int32_t id, struct serve_buf *out)
{
	char buf[256];
	if (t->stopped)
		return 0;
	size_t n = qc_token_to_piece(t->vocab, id, buf, sizeof buf, 0);
	if (n > sizeof buf)
		n = sizeof buf; /* no real piece is this long; cut rather than allocate */
	if (serve_buf_put(&t->raw, buf, n))
		return -1;
	if (drain_utf8(&t->raw, false, t->n_stops ? &t->held : out))
		return -1;
	return t->n_stops ? release_held(t, out) : 0;
}

int serve_text_finish(struct serve_text *t, struct serve_buf *out)
{
	if (t->stopped)
		return 0;
	if (drain_utf8(&t->raw, true, t->n_stops ? &t->held : out))
		return -1;
	if (!t->n_stops)
		return 0;
	if (release_held(t, out))
		return -1;
	int rc = serve_buf_put(out, t->held.p, t->held.len);
	t->held.len = 0;
	return rc;
}
