/* chat_prompt.h — how one model's chat messages become its prompt text.
 *
 * Owns: the choice between the model's own Jinja template (jinja.h, the
 * default), a --chat-template-file, and a built-in family (chat_template.h);
 * the fallback rule (the model's template fails to parse or to render a probe
 * conversation -> the family its markers name, logged once with the reason);
 * and the BOS rule the built-ins keep: the rendered text never starts with the
 * BOS text when the tokenizer adds BOS itself (a template that writes
 * {{ bos_token }} first has that one copy dropped, as llama.cpp does), so the
 * prompt gets exactly one BOS.
 * Non-goals: parsing tool calls out of the output, images, continue_final_message;
 * a template's own raise_exception for a conversation is an error for that
 * request, not a fallback.
 */
#ifndef QC_CHAT_PROMPT_H
#define QC_CHAT_PROMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "chat_template.h"
#include "qc_err.h"

struct qc_chat_prompt_opts {
	const char *family;         /* --chat-template NAME: a built-in, wins over the rest; or NULL */
	const char *template_file;  /* --chat-template-file PATH; or NULL */
	const char *model_template; /* tokenizer.chat_template; or NULL */
	const char *bos_token;      /* token texts from the vocab; NULL: "" */
	const char *eos_token;
	bool tokenizer_adds_bos;    /* qc_vocab_add_bos */
	FILE *log;                  /* where the one fallback line goes (NULL: stderr) */
	const char *log_prefix;     /* e.g. "qserve" */
};

struct qc_chat_prompt; /* opaque */

/* Decide how to render. QC_EINVAL for an unknown family name or both family and
 * file; QC_EIO for an unreadable file; the parse/probe error of a
 * --chat-template-file (no fallback: the user asked for it); QC_EUNSUPPORTED when
 * the model's template fails and no built-in family matches it. A model without
 * any template gives a prompt object whose qc_chat_prompt_enabled is false. */
int qc_chat_prompt_new(const struct qc_chat_prompt_opts *o, struct qc_chat_prompt **out, struct qc_err *err);
void qc_chat_prompt_free(struct qc_chat_prompt *p); /* accepts NULL */

bool qc_chat_prompt_enabled(const struct qc_chat_prompt *p);
/* e.g. "jinja (model)", "jinja (file)", "chatml (built-in)", "chatml (fallback)", "none" */
const char *qc_chat_prompt_describe(const struct qc_chat_prompt *p);

/* Render msgs (n >= 1) with the generation prompt; *out malloc'd, caller frees.
 * Errors as qc_chat_render / qc_jinja_render (the message says which). */
int qc_chat_prompt_render(const struct qc_chat_prompt *p, const struct qc_chat_msg *msgs, size_t n, size_t max_bytes,
			  char **out, size_t *out_len, struct qc_err *err);

/* The same with a request's tools: tools_json is the JSON text of a list of
 * tool definitions, given to the template as its "tools" variable (NULL: none,
 * as qc_chat_prompt_render). QC_EUNSUPPORTED ("tools: ...") when the template is
 * a built-in family or its text never names tools, so tools are never dropped
 * silently; "tools: not valid JSON" (QC_EINVAL) for bad text. */
int qc_chat_prompt_render_tools(const struct qc_chat_prompt *p, const struct qc_chat_msg *msgs, size_t n,
				const char *tools_json, size_t max_bytes, char **out, size_t *out_len, struct qc_err *err);

/* What a request adds to the messages: tools (as above) and chat_template_kwargs,
 * the JSON text of an object whose members become template variables (vLLM's
 * field; e.g. {"enable_thinking": false} for Qwen3). Either may be NULL. A
 * built-in family has no variables: it renders without the kwargs, as a Jinja
 * template that never names them does. */
struct qc_chat_extra {
	const char *tools_json;
	const char *kwargs_json;
};
int qc_chat_prompt_render_ex(const struct qc_chat_prompt *p, const struct qc_chat_msg *msgs, size_t n,
			     const struct qc_chat_extra *x, size_t max_bytes, char **out, size_t *out_len,
			     struct qc_err *err);

#endif
