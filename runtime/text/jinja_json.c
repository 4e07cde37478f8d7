/* jinja_json.c — a JSON value (the request's tools) as a Jinja value.
 *
 * Owns: turning parsed JSON into the value kinds a template sees, the way
 * transformers hands json.loads output to the template: objects are dicts in
 * their key order (tojson prints them back in that order), arrays are lists,
 * integers are ints. cJSON keeps one double per number, so a number with an
 * integral value within +-2^53 becomes an int (Python would keep 1.0 a float:
 * the one place this differs, and tool schemas use integers or none).
 * Non-goals: JSON text with NUL bytes inside strings (cJSON stops at them).
 */
#include "jinja_int.h"

#include <math.h>
#include <string.h>

#include <cjson/cJSON.h>

/* depth is bounded by the caller's max_depth, so hostile nesting cannot recurse far */
static int conv(struct jctx *c, const cJSON *j, struct jv *out, size_t depth)
{
	if (depth > c->t->lim.max_depth)
		return QC_ERANGE;
	if (cJSON_IsNull(j))
		*out = jv_none();
	else if (cJSON_IsBool(j))
		*out = jv_bool(cJSON_IsTrue(j));
	else if (cJSON_IsNumber(j)) {
		double d = j->valuedouble;
		*out = (d == floor(d) && fabs(d) <= 9007199254740992.0) ? jv_int((int64_t)d) : jv_float(d);
	} else if (cJSON_IsString(j))
		*out = jv_strdup(&c->ar, j->valuestring, strlen(j->valuestring));
	else if (cJSON_IsArray(j)) {
		size_t n = (size_t)cJSON_GetArraySize(j), i = 0;
		struct jv *items = jarena_alloc(&c->ar, (n + 1) * sizeof *items);
		if (!items)
			return c->ar.oom;
		for (const cJSON *it = j->child; it; it = it->next, i++) {
			int rc = conv(c, it, &items[i], depth + 1);
			if (rc)
				return rc;
		}
		*out = jv_list(items, n);
	} else if (cJSON_IsObject(j)) {
		*out = jv_dict_new(&c->ar);
		if (out->k != V_DICT)
			return c->ar.oom;
		for (const cJSON *it = j->child; it; it = it->next) {
			struct jv v;
			int rc = conv(c, it, &v, depth + 1);
			if (rc)
				return rc;
			jdict_set(&c->ar, out->u.d, jv_strdup(&c->ar, it->string, strlen(it->string)), v);
		}
	} else
		return QC_EINVAL;
	return c->ar.oom;
}

int jinja_json_value(struct jctx *c, const char *json, struct jv *out)
{
	cJSON *j = cJSON_Parse(json);
	if (!j)
		return QC_EINVAL;
	int rc = conv(c, j, out, 0);
	cJSON_Delete(j);
	return rc;
}
