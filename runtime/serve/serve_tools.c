/* serve_tools.c — the chat request's "tools" and "tool_choice" (see serve_tools.h).
 *
 * The shape follows the OpenAI chat API reference: a function name is 1..64 of
 * [A-Za-z0-9_-], parameters is a JSON Schema object. The schema itself is not
 * checked further: the template only prints it.
 */
#include "serve_tools.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bad(char *field, size_t cap, struct qc_err *err, const char *what, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static int bad(char *field, size_t cap, struct qc_err *err, const char *what, const char *fmt, ...)
{
	char f[96];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(f, sizeof f, fmt, ap);
	va_end(ap);
	if (cap)
		snprintf(field, cap, "%s", f);
	return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "%s: %s", f, what);
}

static const cJSON *get(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool good_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
		      s[i] == '_' || s[i] == '-'))
			return false;
	return true;
}

static int check_tool(const cJSON *t, int i, char *field, size_t cap, struct qc_err *err)
{
	if (!cJSON_IsObject(t))
		return bad(field, cap, err, "must be an object", "tools[%d]", i);
	const cJSON *ty = get(t, "type"), *fn = get(t, "function");
	if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function"))
		return bad(field, cap, err, "must be \"function\"", "tools[%d].type", i);
	if (!cJSON_IsObject(fn))
		return bad(field, cap, err, "must be an object", "tools[%d].function", i);
	const cJSON *nm = get(fn, "name"), *d = get(fn, "description"), *pa = get(fn, "parameters");
	const cJSON *st = get(fn, "strict");
	if (!cJSON_IsString(nm) || !good_name(nm->valuestring))
		return bad(field, cap, err, "must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -",
			   "tools[%d].function.name", i);
	if (d && !cJSON_IsString(d))
		return bad(field, cap, err, "must be a string", "tools[%d].function.description", i);
	if (pa && !cJSON_IsObject(pa))
		return bad(field, cap, err, "must be a JSON Schema object", "tools[%d].function.parameters", i);
	if (st && !cJSON_IsBool(st))
		return bad(field, cap, err, "must be a boolean", "tools[%d].function.strict", i);
	return 0;
}

int serve_tools_parse(const cJSON *o, char **json, char *field, size_t cap, struct qc_err *err)
{
	*json = NULL;
	const cJSON *tc = get(o, "tool_choice");
	/* "auto" is what a model does anyway; anything else would need a tool-call parser */
	if (tc && (!cJSON_IsString(tc) || strcmp(tc->valuestring, "auto")))
		return bad(field, cap, err, "only \"auto\" is supported (qserve does not parse tool calls)",
			   "tool_choice");
	const cJSON *v = get(o, "tools");
	if (!v)
		return 0;
	if (!cJSON_IsArray(v))
		return bad(field, cap, err, "must be an array of {\"type\": \"function\", \"function\": {...}}", "tools");
	int n = cJSON_GetArraySize(v), i = 0;
	if (n > SERVE_MAX_TOOLS)
		return bad(field, cap, err, "more than 128 tools", "tools");
	for (const cJSON *t = v->child; t; t = t->next, i++) {
		int rc = check_tool(t, i, field, cap, err);
		if (rc)
			return rc;
	}
	if (n == 0)
		return 0;
	char *s = cJSON_PrintUnformatted(v);
	if (!s)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	if (strlen(s) > SERVE_MAX_TOOLS_BYTES) {
		free(s);
		return bad(field, cap, err, "longer than 1 MiB as JSON", "tools");
	}
	*json = s;
	return 0;
}
