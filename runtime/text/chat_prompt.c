/* chat_prompt.c — choosing and applying a model's chat template (see chat_prompt.h).
 *
 * The probe that decides the fallback renders one user message "Hello" with the
 * generation prompt: every real template accepts that, so a failure means the
 * template uses something the interpreter lacks, not that the conversation was
 * refused. strftime_now sees the wall clock in UTC.
 */
#include "chat_prompt.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja.h"

enum src { SRC_NONE, SRC_MODEL, SRC_FILE, SRC_BUILTIN, SRC_FALLBACK };

struct qc_chat_prompt {
	enum src src;
	enum qc_chat_family fam;
	struct qc_jinja *jinja;
	char *bos, *eos;
	bool strip_bos;
	bool jinja_tools; /* the template's text names "tools": it may have a tools section */
	char desc[64];
};

static char *dup0(const char *s)
{
	return strdup(s ? s : "");
}

static int read_file(const char *path, size_t max, char **out, size_t *len, struct qc_err *err)
{
	FILE *f = fopen(path, "rb");
	*out = NULL;
	if (!f)
		return qc_err_set(err, QC_EIO, path, NULL, -1, "cannot open: %m");
	char *s = malloc(max + 2);
	size_t n = s ? fread(s, 1, max + 1, f) : 0;
	int bad = ferror(f);
	fclose(f);
	if (!s)
		return qc_err_set(err, QC_ENOMEM, path, NULL, -1, "out of memory");
	if (bad || n > max) {
		free(s);
		return bad ? qc_err_set(err, QC_EIO, path, NULL, -1, "read failed")
			   : qc_err_set(err, QC_ERANGE, path, NULL, -1, "chat template larger than %zu bytes", max);
	}
	s[n] = '\0';
	*out = s;
	*len = n;
	return QC_OK;
}

static int jinja_apply(const struct qc_chat_prompt *p, const struct qc_jinja *t, const struct qc_chat_msg *msgs,
		       size_t n, const struct qc_chat_extra *x, size_t max_bytes, char **out, size_t *out_len,
		       struct qc_err *err)
{
	struct qc_jinja_chat ch = {.msgs = msgs, .n_msgs = n, .add_generation_prompt = true, .bos_token = p->bos,
				   .eos_token = p->eos, .now_unix = (int64_t)time(NULL),
				   .tools_json = x ? x->tools_json : NULL, .kwargs_json = x ? x->kwargs_json : NULL};
	int rc = qc_jinja_render(t, &ch, out, out_len, err);
	if (rc)
		return rc;
	size_t bl = strlen(p->bos);
	if (p->strip_bos && bl && *out_len >= bl && !memcmp(*out, p->bos, bl)) {
		memmove(*out, *out + bl, *out_len - bl + 1);
		*out_len -= bl;
	}
	if (*out_len > max_bytes) {
		free(*out);
		*out = NULL;
		*out_len = 0;
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "messages: rendered prompt longer than %zu bytes",
				  max_bytes);
	}
	return QC_OK;
}

/* parse + probe; 0 when usable */
static int try_jinja(struct qc_chat_prompt *p, const char *src, size_t len, struct qc_jinja **out, struct qc_err *err)
{
	struct qc_chat_msg probe = {"user", "Hello"};
	char *text = NULL;
	size_t tl;
	int rc = qc_jinja_parse(src, len, NULL, out, err);
	if (!rc)
		rc = jinja_apply(p, *out, &probe, 1, NULL, (size_t)1 << 24, &text, &tl, err);
	p->jinja_tools = memmem(src, len, "tools", 5) != NULL;
	free(text);
	if (rc) {
		qc_jinja_free(*out);
		*out = NULL;
	}
	return rc;
}

int qc_chat_prompt_new(const struct qc_chat_prompt_opts *o, struct qc_chat_prompt **out, struct qc_err *err)
{
	*out = NULL;
	if (o->family && o->template_file)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "--chat-template and --chat-template-file: give one");
	struct qc_chat_prompt *p = calloc(1, sizeof *p);
	if (!p || !(p->bos = dup0(o->bos_token)) || !(p->eos = dup0(o->eos_token))) {
		qc_chat_prompt_free(p);
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	}
	p->strip_bos = o->tokenizer_adds_bos;
	int rc = QC_OK;
	if (o->family) {
		if ((p->fam = qc_chat_family_by_name(o->family)) == QC_CHAT_NONE) {
			rc = qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
					"--chat-template '%s': unknown (llama-2 llama-3 mistral chatml qwen phi-3 gemma deepseek)",
					o->family);
			goto out;
		}
		p->src = SRC_BUILTIN;
	} else if (o->template_file) {
		struct qc_jinja_limits lim;
		char *src = NULL;
		size_t len = 0;
		qc_jinja_limits_default(&lim);
		if ((rc = read_file(o->template_file, lim.max_template_bytes, &src, &len, err)))
			goto out;
		rc = try_jinja(p, src, len, &p->jinja, err);
		free(src);
		if (rc) {
			snprintf(err->path, sizeof err->path, "%s", o->template_file);
			goto out;
		}
		p->src = SRC_FILE;
	} else if (o->model_template) {
		struct qc_err why = {0};
		if (!try_jinja(p, o->model_template, strlen(o->model_template), &p->jinja, &why)) {
			p->src = SRC_MODEL;
		} else if ((p->fam = qc_chat_detect(o->model_template)) != QC_CHAT_NONE) {
			/* the one log line of this fallback: it names why and what replaces it */
			fprintf(o->log ? o->log : stderr,
				"%s: warning: the model's chat template cannot be used (%s); falling back to the "
				"built-in '%s' format, which may differ from it in details\n",
				o->log_prefix ? o->log_prefix : "chat", why.msg, qc_chat_family_name(p->fam));
			p->src = SRC_FALLBACK;
		} else {
			rc = qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
					"tokenizer.chat_template cannot be used (%s) and is not a built-in family; pass "
					"--chat-template NAME or --chat-template-file PATH",
					why.msg);
			goto out;
		}
	}
	static const char *const kinds[] = {"none", "jinja (model)", "jinja (file)", "built-in", "fallback"};
	if (p->src == SRC_BUILTIN || p->src == SRC_FALLBACK)
		snprintf(p->desc, sizeof p->desc, "%s (%s)", qc_chat_family_name(p->fam), kinds[p->src]);
	else
		snprintf(p->desc, sizeof p->desc, "%s", kinds[p->src]);
out:
	if (rc) {
		qc_chat_prompt_free(p);
		return rc;
	}
	*out = p;
	return QC_OK;
}

void qc_chat_prompt_free(struct qc_chat_prompt *p)
{
	if (!p)
		return;
	qc_jinja_free(p->jinja);
	free(p->bos);
	free(p->eos);
	free(p);
}

bool qc_chat_prompt_enabled(const struct qc_chat_prompt *p)
{
	return p && p->src != SRC_NONE;
}

const char *qc_chat_prompt_describe(const struct qc_chat_prompt *p)
{
	return p ? p->desc : "none";
}

int qc_chat_prompt_render(const struct qc_chat_prompt *p, const struct qc_chat_msg *msgs, size_t n, size_t max_bytes,
			  char **out, size_t *out_len, struct qc_err *err)
{
	return qc_chat_prompt_render_tools(p, msgs, n, NULL, max_bytes, out, out_len, err);
}

int qc_chat_prompt_render_tools(const struct qc_chat_prompt *p, const struct qc_chat_msg *msgs, size_t n,
				const char *tools_json, size_t max_bytes, char **out, size_t *out_len, struct qc_err *err)
{
	const struct qc_chat_extra x = {.tools_json = tools_json};
	return qc_chat_prompt_render_ex(p, msgs, n, &x, max_bytes, out, out_len, err);
}

int qc_chat_prompt_render_ex(const struct qc_chat_prompt *p, const struct qc_chat_msg *msgs, size_t n,
			     const struct qc_chat_extra *x, size_t max_bytes, char **out, size_t *out_len,
			     struct qc_err *err)
{
	const char *tools_json = x ? x->tools_json : NULL;
	*out = NULL;
	*out_len = 0;
	if (!qc_chat_prompt_enabled(p))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "no chat template");
	if (n == 0)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "messages: empty");
	/* tools the template cannot show would be dropped without a word: refuse instead */
	if (tools_json && (!p->jinja || !p->jinja_tools))
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "tools: this model's chat template (%s) has no tools section", p->desc);
	if (p->jinja) {
		int rc = jinja_apply(p, p->jinja, msgs, n, x, max_bytes, out, out_len, err);
		/* a template's raise_exception or type error is about these messages */
		if (rc && rc != QC_ENOMEM && strncmp(err->msg, "messages", 8) && strncmp(err->msg, "tools", 5)) {
			char m[QC_ERR_MSG_MAX];
			snprintf(m, sizeof m, "%s", err->msg);
			qc_err_set(err, rc == QC_ERANGE ? QC_ERANGE : QC_EINVAL, NULL, NULL, -1, "messages: %s", m);
			rc = err->code;
		}
		return rc;
	}
	return qc_chat_render(p->fam, msgs, n, max_bytes, out, out_len, err);
}
