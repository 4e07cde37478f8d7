/* chat_template.c — the built-in chat renderers (see chat_template.h).
 *
 * Owns: one renderer per family, writing through a bounded string builder, and
 * the marker table detection walks (most specific markers first: llama-2 and
 * mistral share "[INST]" and differ by "<<SYS>>").
 * Non-goals: Jinja; per-model system-prompt defaults (none is injected).
 * Formats follow the models' published prompt formats as llama.cpp's
 * llm_chat_apply_template renders them (facts only, no code taken).
 */
#include "chat_template.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "jbuf.h"

/* append a NUL-terminated string */
static void sb_put(struct jbuf *b, const char *p)
{
	jbuf_put(b, p, strlen(p));
}

static const char *const fam_names[QC_CHAT_FAMILY_COUNT] = {
	[QC_CHAT_NONE] = "none",      [QC_CHAT_LLAMA2] = "llama-2", [QC_CHAT_LLAMA3] = "llama-3",
	[QC_CHAT_MISTRAL] = "mistral", [QC_CHAT_CHATML] = "chatml", [QC_CHAT_PHI3] = "phi-3",
	[QC_CHAT_GEMMA] = "gemma",    [QC_CHAT_DEEPSEEK] = "deepseek",
};

enum qc_chat_family qc_chat_family_by_name(const char *name)
{
	if (!name)
		return QC_CHAT_NONE;
	if (!strcmp(name, "qwen") || !strcmp(name, "chatml"))
		return QC_CHAT_CHATML;
	for (int f = QC_CHAT_NONE + 1; f < QC_CHAT_FAMILY_COUNT; f++)
		if (!strcmp(name, fam_names[f]))
			return (enum qc_chat_family)f;
	return QC_CHAT_NONE;
}

const char *qc_chat_family_name(enum qc_chat_family f)
{
	return f > QC_CHAT_NONE && f < QC_CHAT_FAMILY_COUNT ? fam_names[f] : "none";
}

/* Ordered: the first row whose markers all occur wins. */
static const struct {
	enum qc_chat_family f;
	const char *a, *b; /* b may be NULL */
} markers[] = {
	{QC_CHAT_CHATML, "<|im_start|>", NULL},
	{QC_CHAT_LLAMA3, "<|start_header_id|>", "<|end_header_id|>"},
	{QC_CHAT_PHI3, "<|assistant|>", "<|end|>"},
	{QC_CHAT_GEMMA, "<start_of_turn>", NULL},
	{QC_CHAT_DEEPSEEK, "<\xef\xbd\x9cUser\xef\xbd\x9c>", "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"},
	{QC_CHAT_LLAMA2, "[INST]", "<<SYS>>"},
	{QC_CHAT_MISTRAL, "[INST]", NULL},
};

enum qc_chat_family qc_chat_detect(const char *tmpl)
{
	if (!tmpl)
		return QC_CHAT_NONE;
	for (size_t i = 0; i < sizeof markers / sizeof markers[0]; i++)
		if (strstr(tmpl, markers[i].a) && (!markers[i].b || strstr(tmpl, markers[i].b)))
			return markers[i].f;
	return QC_CHAT_NONE;
}

enum role { R_SYSTEM, R_USER, R_ASSISTANT };

/* "[INST] " families: the system text goes into the first user turn. */
static void render_inst(struct jbuf *b, const struct qc_chat_msg *m, const enum role *r, size_t n, bool llama2)
{
	const char *sys = NULL;
	for (size_t i = 0; i < n; i++) {
		if (r[i] == R_SYSTEM) {
			sys = m[i].content;
		} else if (r[i] == R_USER) {
			sb_put(b, "[INST] ");
			if (sys && llama2) {
				sb_put(b, "<<SYS>>\n");
				sb_put(b, sys);
				sb_put(b, "\n<</SYS>>\n\n");
			} else if (sys) {
				sb_put(b, sys);
				sb_put(b, "\n\n");
			}
			sys = NULL;
			sb_put(b, m[i].content);
			sb_put(b, llama2 ? " [/INST]" : "[/INST]");
		} else {
			sb_put(b, " ");
			sb_put(b, m[i].content);
			sb_put(b, llama2 ? " </s><s>" : "</s>");
		}
	}
}

static void render(struct jbuf *b, enum qc_chat_family f, const struct qc_chat_msg *m, const enum role *r,
		   size_t n)
{
	static const char *const rn[] = {"system", "user", "assistant"};
	const char *sys = NULL;
	switch (f) {
	case QC_CHAT_LLAMA2:
	case QC_CHAT_MISTRAL:
		render_inst(b, m, r, n, f == QC_CHAT_LLAMA2);
		return;
	case QC_CHAT_CHATML:
		for (size_t i = 0; i < n; i++) {
			sb_put(b, "<|im_start|>");
			sb_put(b, rn[r[i]]);
			sb_put(b, "\n");
			sb_put(b, m[i].content);
			sb_put(b, "<|im_end|>\n");
		}
		sb_put(b, "<|im_start|>assistant\n");
		return;
	case QC_CHAT_LLAMA3:
		for (size_t i = 0; i < n; i++) {
			sb_put(b, "<|start_header_id|>");
			sb_put(b, rn[r[i]]);
			sb_put(b, "<|end_header_id|>\n\n");
			sb_put(b, m[i].content);
			sb_put(b, "<|eot_id|>");
		}
		sb_put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
		return;
	case QC_CHAT_PHI3:
		for (size_t i = 0; i < n; i++) {
			sb_put(b, "<|");
			sb_put(b, rn[r[i]]);
			sb_put(b, "|>\n");
			sb_put(b, m[i].content);
			sb_put(b, "<|end|>\n");
		}
		sb_put(b, "<|assistant|>\n");
		return;
	case QC_CHAT_GEMMA:
		/* no system role: its text opens the first user turn */
		for (size_t i = 0; i < n; i++) {
			if (r[i] == R_SYSTEM) {
				sys = m[i].content;
				continue;
			}
			sb_put(b, r[i] == R_USER ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
			if (sys && r[i] == R_USER) {
				sb_put(b, sys);
				sb_put(b, "\n\n");
				sys = NULL;
			}
			sb_put(b, m[i].content);
			sb_put(b, "<end_of_turn>\n");
		}
		sb_put(b, "<start_of_turn>model\n");
		return;
	case QC_CHAT_DEEPSEEK:
		for (size_t i = 0; i < n; i++) {
			if (r[i] == R_SYSTEM) {
				sb_put(b, m[i].content);
			} else if (r[i] == R_USER) {
				sb_put(b, "<\xef\xbd\x9cUser\xef\xbd\x9c>");
				sb_put(b, m[i].content);
			} else {
				sb_put(b, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>");
				sb_put(b, m[i].content);
				sb_put(b, "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
			}
		}
		sb_put(b, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>");
		return;
	case QC_CHAT_NONE:
	case QC_CHAT_FAMILY_COUNT:
		break;
	}
}

int qc_chat_render(enum qc_chat_family f, const struct qc_chat_msg *msgs, size_t n, size_t max_bytes,
		   char **out, size_t *out_len, struct qc_err *err)
{
	*out = NULL;
	*out_len = 0;
	if (f <= QC_CHAT_NONE || f >= QC_CHAT_FAMILY_COUNT)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "no chat template");
	if (n == 0)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "messages: empty");
	enum role *r = malloc(n * sizeof *r);
	if (!r)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	for (size_t i = 0; i < n; i++) {
		const char *s = msgs[i].role;
		if (!strcmp(s, "system") || !strcmp(s, "developer")) {
			r[i] = R_SYSTEM;
		} else if (!strcmp(s, "user")) {
			r[i] = R_USER;
		} else if (!strcmp(s, "assistant")) {
			r[i] = R_ASSISTANT;
		} else {
			free(r);
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
					  "messages[%zu].role: '%.40s' is not system, user or assistant", i, s);
		}
		if (r[i] == R_SYSTEM && i != 0) {
			free(r);
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
					  "messages[%zu].role: a system message must come first", i);
		}
	}
	struct jbuf b = {.max = max_bytes};
	render(&b, f, msgs, r, n);
	sb_put(&b, ""); /* a lone system message renders to nothing: still a string */
	free(r);
	if (b.rc) {
		free(b.s);
		return b.rc == QC_ERANGE
			       ? qc_err_set(err, QC_ERANGE, NULL, NULL, -1,
					    "messages: rendered prompt longer than %zu bytes", max_bytes)
			       : qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	}
	*out = b.s;
	*out_len = b.len;
	return QC_OK;
}
