/* jinja.h — a bounded, sandboxed interpreter for the Jinja subset chat templates use.
 *
 * Owns: parsing a tokenizer.chat_template text once (qc_jinja_parse) and
 * rendering it for a list of {role, content} messages (qc_jinja_render) the way
 * transformers' apply_chat_template does: trim_blocks and lstrip_blocks on,
 * loop controls on, tojson(ensure_ascii=False), raise_exception, strftime_now.
 * Non-goals: macros, call blocks, includes, {% raw %}, autoescape, '%' string
 * formatting, Unicode case mapping (upper/lower/title are ASCII-only). A template
 * using them fails to parse or render with an error naming line and column.
 * Sandbox: every render is bounded by struct qc_jinja_limits (template bytes,
 * output bytes, loop iterations, nesting depth, scratch memory); a breach is a
 * QC_ERANGE error, never a crash. Nothing reaches files, the clock (unless
 * strftime_now is called: the time comes from the caller) or the environment.
 * References (facts only): Jinja2 3.1 "Template Designer Documentation";
 * transformers utils/chat_template_utils.py (the environment chat templates run in).
 */
#ifndef QC_JINJA_H
#define QC_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat_template.h"
#include "qc_err.h"

struct qc_jinja_limits {
	size_t max_template_bytes; /* source text */
	size_t max_output_bytes;   /* rendered text */
	size_t max_loop_iters;     /* for-loop bodies run, summed over the render */
	size_t max_depth;          /* statement + expression nesting */
	size_t max_scratch_bytes;  /* values built while rendering */
};

/* Defaults: 1 MiB template, 16 MiB output, 1e6 iterations, depth 200, 256 MiB scratch. */
void qc_jinja_limits_default(struct qc_jinja_limits *l);

struct qc_jinja; /* a parsed template */

/* Parse src (len bytes, need not be NUL-terminated) into *out (free with
 * qc_jinja_free). lim NULL: defaults. QC_EFORMAT with "line L col C: ..." for
 * malformed or unsupported syntax, QC_ERANGE past a limit, QC_ENOMEM. */
int qc_jinja_parse(const char *src, size_t len, const struct qc_jinja_limits *lim, struct qc_jinja **out,
		   struct qc_err *err);

/* Frees t; NULL is fine. */
void qc_jinja_free(struct qc_jinja *t);

/* What a chat render sees. NULL token strings render as "". */
struct qc_jinja_chat {
	const struct qc_chat_msg *msgs;
	size_t n_msgs;
	bool add_generation_prompt;
	const char *bos_token;
	const char *eos_token;
	int64_t now_unix; /* strftime_now's time (UTC); tests pin it */
	const char *tools_json; /* JSON text of the tools list (a request's "tools"); NULL: tools is none */
	/* JSON text of an object whose members become top-level variables after the
	 * ones above (a request's chat_template_kwargs, e.g. {"enable_thinking": false});
	 * NULL: none. The caller refuses the names above. */
	const char *kwargs_json;
};

/* Render t for c. *out is a malloc'd NUL-terminated string the caller frees.
 * QC_EINVAL for raise_exception (the message is the template's), QC_EFORMAT for a
 * runtime type error ("line L col C: ..."), QC_ERANGE past a limit, QC_ENOMEM. */
int qc_jinja_render(const struct qc_jinja *t, const struct qc_jinja_chat *c, char **out, size_t *out_len,
		    struct qc_err *err);

#endif
