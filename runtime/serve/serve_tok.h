/* serve_tok.h — vLLM's POST /tokenize and POST /detokenize bodies.
 *
 * Owns: their request schemas and response shapes, with vLLM's field names:
 * tokenize {"model"?, "prompt" | "messages", "add_special_tokens"?} ->
 * {"count", "max_model_len", "tokens"}; detokenize {"model"?, "tokens"} ->
 * {"prompt"}. Messages render through the same chat template and checks as
 * /v1/chat/completions (serve_req.c), and add_special_tokens defaults to true
 * for both forms, so "count" is exactly what a generation request would feed.
 * Non-goals: HTTP (server.c); vLLM's return_token_strs and tools fields.
 * Reference: vLLM entrypoints/openai protocol (TokenizeRequest, DetokenizeRequest).
 */
#ifndef QC_SERVE_TOK_H
#define QC_SERVE_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat_prompt.h"
#include "serve_buf.h"

struct qc_engine;

struct serve_tok_ctx {
	const struct qc_engine *e;   /* borrowed; only its tokenizer is used (thread-safe reads) */
	const struct qc_chat_prompt *chat; /* renders "messages" (serve_req_parse refuses them without a template) */
	const char *model_name;      /* a "model" naming anything else gets 404 */
	int32_t max_model_len;       /* reported as is */
	int32_t n_vocab;             /* detokenize checks ids against it */
};

/* Answer a tokenize (detok false) or detokenize (detok true) body of len bytes.
 * Returns the HTTP status: 200 with the JSON in *out; else 400 / 404 / 503 with
 * the message in msg and the blamed field in param ("" when none). */
int serve_tok_answer(const struct serve_tok_ctx *c, bool detok, const char *body, size_t len,
		     struct serve_buf *out, char *msg, size_t msg_cap, char *param, size_t param_cap);

#endif
