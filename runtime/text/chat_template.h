/* chat_template.h — built-in chat renderers and detection from a Jinja template.
 *
 * Owns: the table of supported families (llama-2, llama-3, mistral, chatml,
 * phi-3, gemma, deepseek), detection of a family from a model's
 * tokenizer.chat_template text by its distinctive markers, and rendering a list
 * of {role, content} messages into the prompt text, generation prompt included.
 * These are the --chat-template NAME renderers and the fallback when a model's own
 * template can't run in the Jinja interpreter (jinja.h; the choice: chat_prompt.h).
 * Non-goals: tools/function calling, images. The rendered text never starts with BOS: the
 * caller tokenizes it with add_special, which adds BOS when the vocab asks.
 * References (facts only): llama.cpp src/llama-chat.cpp (llm_chat_detect_template,
 * llm_chat_apply_template) and each model card's published prompt format.
 */
#ifndef QC_CHAT_TEMPLATE_H
#define QC_CHAT_TEMPLATE_H

#include <stddef.h>

#include "qc_err.h"

enum qc_chat_family {
	QC_CHAT_NONE = 0,
	QC_CHAT_LLAMA2,
	QC_CHAT_LLAMA3,
	QC_CHAT_MISTRAL,
	QC_CHAT_CHATML,
	QC_CHAT_PHI3,
	QC_CHAT_GEMMA,
	QC_CHAT_DEEPSEEK,
	QC_CHAT_FAMILY_COUNT
};

struct qc_chat_msg {
	const char *role;    /* "system", "user" or "assistant" (checked by the renderer) */
	const char *content; /* UTF-8, NUL-terminated */
};

/* Family by its --chat-template name ("llama-2", "llama-3", "mistral", "chatml",
 * "qwen" (= chatml), "phi-3", "gemma", "deepseek"); QC_CHAT_NONE when unknown. */
enum qc_chat_family qc_chat_family_by_name(const char *name);

/* The canonical name of f ("none" for QC_CHAT_NONE). */
const char *qc_chat_family_name(enum qc_chat_family f);

/* Family whose markers appear in a Jinja template text; QC_CHAT_NONE when none
 * matches (the caller turns that into a start-up error). */
enum qc_chat_family qc_chat_detect(const char *tmpl);

/* Render msgs (n >= 1) in family f, ending with the assistant generation prompt.
 * *out is a malloc'd NUL-terminated string the caller frees. QC_EINVAL (naming
 * the message index) for an unknown role, a system message not first, or a
 * family without a renderer; QC_ERANGE when the text would exceed max_bytes;
 * QC_ENOMEM. */
int qc_chat_render(enum qc_chat_family f, const struct qc_chat_msg *msgs, size_t n, size_t max_bytes,
		   char **out, size_t *out_len, struct qc_err *err);

#endif
