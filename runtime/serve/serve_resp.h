/* serve_resp.h — OpenAI response bodies: completions, chat, stream chunks, errors.
 *
 * Owns: the JSON shapes of text_completion, chat.completion and
 * chat.completion.chunk objects, usage, both logprobs layouts (completions:
 * tokens / token_logprobs / top_logprobs / text_offset; chat: content[] with
 * token, logprob, bytes, top_logprobs) and the error object
 * {"error": {"message", "type", "param", "code"}}.
 * Non-goals: deciding text or finish reasons (server.c), HTTP framing beyond
 * the SSE "data: ...\n\n" line. Reference: the OpenAI API reference (schemas).
 */
#ifndef QC_SERVE_RESP_H
#define QC_SERVE_RESP_H

#include <stdbool.h>
#include <stdint.h>

#include "sampler.h"
#include "serve_buf.h"

struct qc_vocab;

struct serve_resp {
	bool chat;
	char id[48];                 /* "cmpl-..." / "chatcmpl-..." */
	long long created;           /* unix seconds */
	const char *model;           /* borrowed */
	const struct qc_vocab *vocab;/* borrowed; token strings for logprobs */
	int32_t top_n;               /* alternatives per token in logprobs */
	bool tokens_as_ids;          /* logprobs tokens as "token_id:N" (vLLM extension) */
	int32_t text_offset;         /* completions logprobs: bytes of pieces so far */
	int32_t index;               /* the choice's "index" (n > 1: one serve_resp per choice) */
};

/* One choice of a non-streamed body with n > 1. */
struct serve_choice {
	const char *text;
	size_t len;
	const char *finish;          /* "stop", "length" */
	const int32_t *ids;          /* (n_ids) */
	const struct qc_sample_result *lp; /* (n_ids) or NULL */
	int32_t n_ids;
};

/* Whole non-streamed body with choices ch[0..n) as indices 0..n-1; usage counts
 * prompt_tokens once and completion_tokens (the caller's sum: every choice
 * generated, best_of included). 0 or -1 (out of memory). */
int serve_resp_final_n(struct serve_resp *r, const struct serve_choice *ch, int32_t n, int32_t prompt_tokens,
		       int32_t completion_tokens, struct serve_buf *out);

/* Tokens [from, to) of ids/lp as a logprobs object appended to parent under
 * "logprobs" (lp NULL: JSON null). Returns 0 or -1 (out of memory). */
struct cJSON;
int serve_resp_add_logprobs(struct serve_resp *r, struct cJSON *parent, const int32_t *ids,
			    const struct qc_sample_result *lp, int32_t from, int32_t to);

/* Whole non-streamed body. finish: "stop", "length" (or NULL while unknown). */
int serve_resp_final(struct serve_resp *r, const char *text, size_t len, const char *finish,
		     const int32_t *ids, const struct qc_sample_result *lp, int32_t n_ids,
		     int32_t prompt_tokens, struct serve_buf *out);

/* One SSE event "data: {chunk}\n\n". text may be NULL (no content), finish NULL
 * while generating; first adds the chat role; include_usage adds "usage": null. */
int serve_resp_chunk(struct serve_resp *r, const char *text, size_t len, const char *finish, bool first,
		     bool include_usage, const int32_t *ids, const struct qc_sample_result *lp, int32_t from,
		     int32_t to, struct serve_buf *out);

/* The stream_options.include_usage event: "choices": [] and the usage. */
int serve_resp_usage_chunk(struct serve_resp *r, int32_t prompt_tokens, int32_t completion_tokens,
			   struct serve_buf *out);

/* {"error": ...} for status (type chosen from it); param may be NULL or "". */
int serve_resp_error(int status, const char *msg, const char *param, struct serve_buf *out);

#endif
