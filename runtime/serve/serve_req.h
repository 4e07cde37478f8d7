/* serve_req.h — an OpenAI completions / chat request body to validated parameters.
 *
 * Owns: the request schema qserve accepts (docs/serve.md lists it): types and
 * ranges of every field, the fields refused because they would change the output
 * in a way qserve does not implement (suffix, echo on chat, echo with logprobs,
 * tools, functions, response_format other than text), and chat rendering
 * through chat_prompt.h. Errors name the field (OpenAI's error "param").
 * Non-goals: tokenization and context-length checks (they need the engine:
 * server.c), HTTP.
 */
#ifndef QC_SERVE_REQ_H
#define QC_SERVE_REQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat_prompt.h"
#include "qc_err.h"
#include "sampler.h"
#include "serve_text.h"

#define SERVE_MAX_PROMPT_IDS (1 << 20)
#define SERVE_MAX_CHOICES 16            /* n and best_of: QC_SCHED_MAX_CHOICES */
#define SERVE_MAX_STOP_IDS 16           /* stop_token_ids: QC_ENGINE_MAX_STOP_IDS */

struct serve_params {
	bool chat;
	bool stream, include_usage;
	int32_t n_choices;              /* n: choices returned, 1..SERVE_MAX_CHOICES */
	int32_t best_of;                /* choices generated, n..SERVE_MAX_CHOICES */
	char *prompt;                   /* owned: the prompt text (chat: rendered) or NULL */
	size_t prompt_len;
	int32_t *prompt_ids;            /* owned: a prompt given as token ids, or NULL */
	int32_t n_prompt_ids;
	int32_t max_tokens;             /* 0: not given (the server picks) */
	bool ignore_eos;
	bool echo;                      /* completions: the prompt text leads each choice's text */
	int32_t n_stop_ids;             /* stop_token_ids: ids >= 0, not yet checked against the vocab */
	int32_t stop_ids[SERVE_MAX_STOP_IDS];
	struct qc_sampler_params sampling; /* logit_bias and min_tokens land here too */
	bool seed_given;
	char *stops[SERVE_MAX_STOPS];   /* owned, non-empty */
	int n_stops;
	bool logprobs;
	int32_t top_logprobs;           /* 0..20 */
	bool tokens_as_ids;             /* vLLM's return_tokens_as_token_ids: "token_id:N" in logprobs */
	char *model;                    /* owned, or NULL when absent */
};

/* Parse len bytes of JSON. chat selects the chat schema; tmpl renders messages
 * (NULL or disabled: a chat request is refused, the message says how to fix it).
 * On failure: QC_EINVAL (400) or QC_ENOMEM, err's message says what is wrong and
 * param (param_cap bytes) receives the field name ("" when none). *p is always
 * left safe to serve_params_deinit. */
int serve_req_parse(const char *body, size_t len, bool chat, const struct qc_chat_prompt *tmpl, struct serve_params *p,
		    char *param, size_t param_cap, struct qc_err *err);

void serve_params_deinit(struct serve_params *p);

#endif
