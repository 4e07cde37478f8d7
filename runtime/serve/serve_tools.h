/* serve_tools.h — the chat request's "tools" and "tool_choice" fields.
 *
 * Owns: checking that tools is an array of OpenAI function tools
 * ({"type": "function", "function": {"name", "description"?, "parameters"?,
 * "strict"?}}), within SERVE_MAX_TOOLS entries and SERVE_MAX_TOOLS_BYTES of JSON,
 * and turning it into the JSON text the chat template gets as its "tools"
 * variable (chat_prompt.h qc_chat_prompt_render_tools), keys in request order.
 * Non-goals: parsing tool calls out of the model's output (the reply is plain
 * text), tool_choice other than "auto", the legacy functions/function_call.
 */
#ifndef QC_SERVE_TOOLS_H
#define QC_SERVE_TOOLS_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "qc_err.h"

#define SERVE_MAX_TOOLS 128                  /* OpenAI's own limit */
#define SERVE_MAX_TOOLS_BYTES ((size_t)1 << 20) /* the tools array as compact JSON */

/* Validate o's "tools" and "tool_choice". *json: malloc'd compact JSON of the
 * tools array, or NULL when tools is absent, null or empty (an empty list is
 * "no tools": Llama 3.1's template would otherwise announce a tool environment
 * with no tools in it). On a bad value: QC_EINVAL, field (cap bytes) names it,
 * e.g. "tools[2].function.name"; QC_ENOMEM. */
int serve_tools_parse(const cJSON *o, char **json, char *field, size_t cap, struct qc_err *err);

#endif
