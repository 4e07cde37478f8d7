/* test_safetensors.c — the safetensors reader and the Hugging Face source.
 * Good inputs: tests/data/st/ made by the reference safetensors writer
 * (tests/gen/make_safetensors_fixtures.py); every tensor's dtype, shape and XXH3 of
 * its bytes must match expected.json, which the script computed from the numpy arrays.
 * The same sharded folder is read as a directory, .tar (mapped in place), .tar.gz and
 * .zip. Bad inputs: headers built here, each checker next to a valid twin that passes;
 * every rejection is checked for its code, tensor name and byte offset. Run from the
 * repo root. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "../tests/check.h"
#include "hf_source.h"
#include "safetensors.h"

#define DIR_ST "tests/data/st"

/* dtype, shape and XXH3 of one tensor against its expected.json entry. */
static void check_tensor(const char *what, const char *name, const struct qc_st_tensor *t,
			 const uint8_t *data, const cJSON *want)
{
	CHECK(t != NULL, "%s: tensor %s missing", what, name);
	if (!t)
		return;
	const cJSON *dt = cJSON_GetObjectItem(want, "dtype"), *sh = cJSON_GetObjectItem(want, "shape");
	const cJSON *h = cJSON_GetObjectItem(want, "xxh3");
	CHECK(strcmp(qc_st_dtype_name(t->dtype), dt->valuestring) == 0, "%s: %s dtype %s, want %s", what,
	      name, qc_st_dtype_name(t->dtype), dt->valuestring);
	bool same = (int)t->n_dims == cJSON_GetArraySize(sh);
	for (uint32_t i = 0; same && i < t->n_dims; i++)
		same = t->shape[i] == (uint64_t)cJSON_GetArrayItem(sh, (int)i)->valuedouble;
	CHECK(same, "%s: %s shape differs", what, name);
	uint64_t got = XXH3_64bits(data, (size_t)t->n_bytes), exp = strtoull(h->valuestring, NULL, 16);
	CHECK(got == exp, "%s: %s bytes hash %016llx, want %016llx", what, name, (unsigned long long)got,
	      (unsigned long long)exp);
}

static void st_reads_reference_file(const cJSON *expected)
{
	struct qc_st *st = NULL;
	struct qc_err err = {0};
	const cJSON *want = cJSON_GetObjectItem(expected, "tiny");
	int rc = qc_st_open(DIR_ST "/tiny/model.safetensors", &st, &err);
	CHECK(rc == QC_OK, "open tiny: %s", err.msg);
	if (rc)
		return;
	CHECK((int)st->n_tensors == cJSON_GetArraySize(want), "tiny: %llu tensors", (unsigned long long)st->n_tensors);
	for (const cJSON *w = want->child; w; w = w->next) {
		const struct qc_st_tensor *t = qc_st_find(st, w->string);
		check_tensor("tiny", w->string, t, t ? qc_st_data(st, t) : NULL, w);
	}
	for (uint64_t i = 1; i < st->n_tensors; i++)
		CHECK(st->tensors[i - 1].begin <= st->tensors[i].begin, "tensors not in data-offset order at %llu",
		      (unsigned long long)i);
	const char *fmt = qc_st_meta_get(st, "format");
	CHECK(fmt && strcmp(fmt, "np") == 0, "metadata format: %s", fmt ? fmt : "(none)");
	CHECK(qc_st_meta_get(st, "absent") == NULL, "absent metadata key found");
	CHECK(qc_st_find(st, "nope") == NULL, "absent tensor found");
	const struct qc_st_tensor *s = qc_st_find(st, "scalar");
	CHECK(s && s->n_dims == 0 && s->n_elems == 1, "scalar has 0 dims and 1 element");
	const struct qc_st_tensor *e = qc_st_find(st, "empty");
	CHECK(e && e->n_bytes == 0 && e->n_dims == 2, "empty tensor has 0 bytes");
	qc_st_close(st);
	qc_st_close(NULL);
}

static void st_rejects_every_truncation(void)
{
	size_t len;
	char *buf = check_read_file(DIR_ST "/tiny/model.safetensors", &len);
	CHECK(buf != NULL, "read tiny");
	if (!buf)
		return;
	int bad = 0, passed = 0;
	for (size_t cut = 0; cut <= len; cut++) {
		struct qc_st *st = NULL;
		struct qc_err err = {0};
		int rc = qc_st_open_mem(buf, cut, "cut.safetensors", &st, &err);
		if (cut == len) {
			CHECK(rc == QC_OK, "whole file must open: %s", err.msg);
		} else if (rc == QC_OK || !err.msg[0] || err.off < 0 || err.off > (int64_t)len ||
			   strcmp(err.path, "cut.safetensors") != 0) {
			bad++;
			if (bad < 5)
				fprintf(stderr, "cut at %zu: rc %d off %lld msg %s\n", cut, rc, (long long)err.off, err.msg);
		} else {
			passed++;
		}
		qc_st_close(st);
	}
	CHECK(bad == 0, "%d truncations accepted or rejected without file and offset", bad);
	CHECK(passed == (int)len, "%d of %zu truncations rejected", passed, len);
	free(buf);
}

/* Build u64 N + header + data_len zero bytes. */
static uint8_t *build(const char *json, uint64_t n_override, size_t data_len, size_t *len)
{
	size_t n = strlen(json);
	*len = 8 + n + data_len;
	uint8_t *b = calloc(1, *len);
	uint64_t nn = n_override ? n_override : n;
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(nn >> (8 * i));
	memcpy(b + 8, json, n);
	return b;
}

struct bad_case {
	const char *name;
	const char *json;
	size_t data_len;
	uint64_t n_override;     /* header length to write instead of strlen(json); 0: none */
	int code;                /* QC_OK: the valid twin */
	const char *tensor;      /* expected err.tensor, NULL: "" */
	int64_t off;             /* expected err.off; relative to the data section when data_rel */
	int data_rel;
};

#define A16 "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}"

static const struct bad_case cases[] = {
	{"st_accepts_valid_two_tensors", "{" A16 ",\"b\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[16,20]}}", 20, 0, QC_OK, NULL, 0, 0},
	{"st_accepts_padded_header_and_metadata", "{\"__metadata__\":{\"format\":\"pt\"}," A16 "}    ", 16, 0, QC_OK, NULL, 0, 0},
	{"st_accepts_all_new_dtypes", "{\"a\":{\"dtype\":\"F8_E8M0\",\"shape\":[2],\"data_offsets\":[0,2]},\"b\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[2,4]}}", 4, 0, QC_OK, NULL, 0, 0},
	{"st_rejects_header_len_past_eof", "{" A16 "}", 16, 1000, QC_EFORMAT, NULL, 0, 0},
	{"st_rejects_header_len_absurd", "{" A16 "}", 16, 1ull << 63, QC_ERANGE, NULL, 0, 0},
	{"st_rejects_json_array", "[1,2]", 0, 0, QC_EFORMAT, NULL, 8, 0},
	{"st_rejects_json_string", "\"x\"", 0, 0, QC_EFORMAT, NULL, 8, 0},
	{"st_rejects_invalid_json", "{\"a\":}", 0, 0, QC_EFORMAT, NULL, 13, 0},
	{"st_rejects_garbage_after_json", "{" A16 "}x", 16, 0, QC_EFORMAT, NULL, 8 + 57, 0},
	{"st_rejects_unknown_dtype", "{\"a\":{\"dtype\":\"F7\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 16, 0, QC_EUNSUPPORTED, "a", 9, 0},
	{"st_rejects_size_mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,16]}}", 16, 0, QC_EFORMAT, "a", 0, 1},
	{"st_rejects_dtype_size_mismatch", "{\"a\":{\"dtype\":\"F64\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 16, 0, QC_EFORMAT, "a", 0, 1},
	{"st_rejects_span_past_end", "{" A16 ",\"b\":{\"dtype\":\"I8\",\"shape\":[5],\"data_offsets\":[16,21]}}", 20, 0, QC_ERANGE, "b", 16, 1},
	{"st_rejects_overlap", "{" A16 ",\"b\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[12,16]}}", 20, 0, QC_EFORMAT, "b", 12, 1},
	{"st_rejects_begin_after_end", "{\"a\":{\"dtype\":\"I8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, 0, QC_EFORMAT, "a", 9, 0},
	{"st_rejects_negative_shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2,-2],\"data_offsets\":[0,16]}}", 16, 0, QC_EFORMAT, "a", 9, 0},
	{"st_rejects_fractional_shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5,2],\"data_offsets\":[0,16]}}", 16, 0, QC_EFORMAT, "a", 9, 0},
	{"st_rejects_shape_overflow", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4503599627370496,4503599627370496],\"data_offsets\":[0,16]}}", 16, 0, QC_ERANGE, "a", 9, 0},
	{"st_rejects_duplicate_name", "{" A16 ",\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[16,32]}}", 32, 0, QC_EFORMAT, "a", 8 + 57, 0},
	{"st_rejects_empty_name", "{\"\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 16, 0, QC_EFORMAT, NULL, 9, 0},
	{"st_rejects_deep_json", "{\"a\":[[[[[[[[[[1]]]]]]]]]]}", 0, 0, QC_EFORMAT, NULL, 8 + 12, 0},
	{"st_rejects_metadata_not_string", "{\"__metadata__\":{\"k\":1}," A16 "}", 16, 0, QC_EFORMAT, NULL, 9, 0},
	{"st_rejects_bad_offsets_array", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0]}}", 16, 0, QC_EFORMAT, "a", 9, 0},
};

static void st_bad_headers(void)
{
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const struct bad_case *bc = &cases[i];
		size_t len;
		uint8_t *b = build(bc->json, bc->n_override, bc->data_len, &len);
		struct qc_st *st = NULL;
		struct qc_err err = {0};
		int rc = qc_st_open_mem(b, len, "bad.safetensors", &st, &err);
		CHECK(rc == bc->code, "%s: rc %d (%s), want %d", bc->name, rc, err.msg, bc->code);
		if (rc != QC_OK && rc == bc->code) {
			int64_t off = bc->data_rel ? (int64_t)(8 + strlen(bc->json)) + bc->off : bc->off;
			CHECK(err.off == off, "%s: offset %lld, want %lld (%s)", bc->name, (long long)err.off,
			      (long long)off, err.msg);
			CHECK(strcmp(err.tensor, bc->tensor ? bc->tensor : "") == 0, "%s: tensor '%s'", bc->name, err.tensor);
			CHECK(strcmp(err.path, "bad.safetensors") == 0, "%s: path '%s'", bc->name, err.path);
		}
		CHECK((st != NULL) == (rc == QC_OK), "%s: handle only on success", bc->name);
		qc_st_close(st);
		free(b);
	}
}

static void hf_reads(const cJSON *expected, const char *path, const char *model, enum qc_hf_kind kind,
		     const char *quant)
{
	struct qc_hf_source *src = NULL;
	struct qc_err err = {0};
	const cJSON *want = cJSON_GetObjectItem(expected, model);
	int rc = qc_hf_open(path, &src, &err);
	CHECK(rc == QC_OK, "hf open %s: %s: %s", path, err.path, err.msg);
	if (rc)
		return;
	CHECK(src->kind == kind, "%s: kind %d, want %d", path, src->kind, kind);
	CHECK(src->config && cJSON_GetObjectItem(src->config, "model_type"), "%s: config.json", path);
	CHECK(strcmp(qc_hf_quant_method(src), quant) == 0, "%s: quant %s", path, qc_hf_quant_method(src));
	CHECK((int)src->n_tensors == cJSON_GetArraySize(want), "%s: %llu tensors", path,
	      (unsigned long long)src->n_tensors);
	for (const cJSON *w = want->child; w; w = w->next) {
		const struct qc_hf_tensor *t = qc_hf_find(src, w->string);
		check_tensor(path, w->string, t ? t->t : NULL, t ? t->data : NULL, w);
	}
	if (strcmp(model, "sharded") == 0) {
		CHECK(src->n_shards == 3 && src->index && src->generation_config, "%s: 3 shards + index", path);
	} else {
		CHECK(src->n_shards == 1 && !src->index && src->tokenizer_config, "%s: one file", path);
	}
	qc_hf_close(src);
}

static void hf_rejects(const char *path, int code, const char *tensor, const char *a, const char *b)
{
	struct qc_hf_source *src = NULL;
	struct qc_err err = {0};
	char msg[2 * QC_ERR_MSG_MAX];
	int rc = qc_hf_open(path, &src, &err);
	qc_err_format(&err, msg, sizeof msg);
	CHECK(rc == code && src == NULL, "%s: rc %d, want %d: %s", path, rc, code, msg);
	CHECK(strcmp(err.tensor, tensor) == 0, "%s: tensor '%s', want '%s'", path, err.tensor, tensor);
	CHECK(strstr(msg, a) && (!b || strstr(msg, b)), "%s: message names %s%s%s: %s", path, a,
	      b ? " and " : "", b ? b : "", msg);
}

/* Archives cut inside their members must fail cleanly (message, no handle, no leak). */
static void hf_rejects_truncated_archives(void)
{
	const char *names[] = {DIR_ST "/sharded.tar", DIR_ST "/sharded.tar.gz", DIR_ST "/sharded.zip"};
	for (size_t i = 0; i < 3; i++) {
		size_t len;
		char *buf = check_read_file(names[i], &len);
		CHECK(buf != NULL, "read %s", names[i]);
		if (!buf)
			continue;
		for (int k = 1; k < 10; k++) {
			char tmp[] = "/tmp/qc-st-cut-XXXXXX";
			int fd = mkstemp(tmp);
			size_t cut = len * (size_t)k / 20;
			CHECK(fd >= 0 && write(fd, buf, cut) == (ssize_t)cut, "write %s", tmp);
			if (fd >= 0)
				close(fd);
			struct qc_hf_source *src = NULL;
			struct qc_err err = {0};
			int rc = qc_hf_open(tmp, &src, &err);
			CHECK(rc != QC_OK && src == NULL && err.msg[0] && err.path[0],
			      "%s cut at %zu: rc %d: %s", names[i], cut, rc, err.msg);
			qc_hf_close(src);
			unlink(tmp);
		}
		free(buf);
	}
}

int main(void)
{
	size_t len;
	char *js = check_read_file(DIR_ST "/expected.json", &len);
	cJSON *expected = js ? cJSON_Parse(js) : NULL;
	CHECK(expected != NULL, "read " DIR_ST "/expected.json (run from the repo root)");
	if (!expected)
		return check_report("test_safetensors");
	st_reads_reference_file(expected);
	st_rejects_every_truncation();
	st_bad_headers();
	hf_reads(expected, DIR_ST "/tiny", "tiny", QC_HF_KIND_DIR, "none");
	hf_reads(expected, DIR_ST "/sharded", "sharded", QC_HF_KIND_DIR, "gptq");
	hf_reads(expected, DIR_ST "/sharded.tar", "sharded", QC_HF_KIND_TAR, "gptq");
	hf_reads(expected, DIR_ST "/sharded.tar.gz", "sharded", QC_HF_KIND_ARCHIVE, "gptq");
	hf_reads(expected, DIR_ST "/sharded.zip", "sharded", QC_HF_KIND_ARCHIVE, "gptq");
	hf_rejects_truncated_archives();
	hf_rejects(DIR_ST "/bad-missing-shard", QC_ENOTFOUND, "", "s2.safetensors", NULL);
	hf_rejects(DIR_ST "/bad-missing-tensor", QC_EFORMAT, "c.weight", "s2.safetensors", NULL);
	hf_rejects(DIR_ST "/bad-dup-tensor", QC_EFORMAT, "a.weight", "s1.safetensors", "s2.safetensors");
	hf_rejects(DIR_ST "/nonexistent", QC_EIO, "", "nonexistent", NULL);
	hf_rejects(DIR_ST "/expected.json", QC_EFORMAT, "", "expected.json", NULL);
	cJSON_Delete(expected);
	free(js);
	return check_report("test_safetensors");
}
