/* test_gguf_write.c — GGUF writer: exact bytes, round trips through the reader, failures.
 *
 * Expected bytes for the smallest files are assembled by hand from the GGUF spec (not
 * from the writer); everything else is written with gguf_write.h and read back with the
 * independent reader in gguf.h: every value type, nested arrays, v1/v2/v3, alignments
 * 32/64/4096, insertion order, streamed tensors, atomic file output, split shards.
 * Every rejection path of the writer gets an input that must trip it, and corrupted
 * writer output must trip the reader.
 */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "gguf.h"
#include "gguf_write.h"

static char tmpdir[] = "/tmp/qc_test_gguf_write.XXXXXX";

/* ---- helpers ------------------------------------------------------------------ */

static struct qc_gguf *open_mem_ok(const uint8_t *buf, size_t len)
{
	struct qc_gguf *g = NULL;
	struct qc_err err = { 0 };
	int rc = qc_gguf_open_mem(buf, len, "mem.gguf", &g, &err);
	CHECK(rc == QC_OK, "reader rejected writer output: %s", err.msg);
	return g;
}

static bool str_is(struct qc_gguf_str s, const char *p, size_t n)
{
	return s.len == n && memcmp(s.p, p, n) == 0;
}

static int count_dir_entries(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d));)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

static void path_in_tmp(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", tmpdir, name);
}

/* ---- exact bytes, from the spec ----------------------------------------------- */

/* {"a": u32 7}, tensor "t" f32 [2] = {1, 2}, alignment 32. */
static struct qc_gguf_writer *minimal_writer(uint32_t version)
{
	static const float data[2] = { 1.0f, 2.0f };
	static const int64_t ne[1] = { 2 };
	struct qc_gguf_writer *w = qc_gguf_writer_new(version, 0);
	CHECK(w != NULL, "writer_new(%u, 0)", version);
	CHECK(qc_gguf_writer_add_u32(w, "a", 7, NULL) == QC_OK, "add_u32");
	CHECK(qc_gguf_writer_add_tensor(w, "t", QC_TYPE_F32, 1, ne, data, NULL) == QC_OK, "add_tensor");
	return w;
}

static void writer_matches_hand_assembled_bytes(void)
{
	static const uint8_t v3[128] = {
		'G', 'G', 'U', 'F', 3, 0, 0, 0,
		1, 0, 0, 0, 0, 0, 0, 0,                 /* n_tensors u64 */
		1, 0, 0, 0, 0, 0, 0, 0,                 /* n_kv u64 */
		1, 0, 0, 0, 0, 0, 0, 0, 'a',            /* key */
		4, 0, 0, 0, 7, 0, 0, 0,                 /* UINT32, 7 */
		1, 0, 0, 0, 0, 0, 0, 0, 't',            /* tensor name */
		1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,     /* n_dims 1, ne[0] = 2 (u64) */
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,     /* type F32, offset 0 (u64) */
		[96] = 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40,  /* data at 96 = align32(74) */
	};
	static const uint8_t v1[96] = {
		'G', 'G', 'U', 'F', 1, 0, 0, 0,
		1, 0, 0, 0, 1, 0, 0, 0,                 /* n_tensors, n_kv: u32 */
		1, 0, 0, 0, 'a', 4, 0, 0, 0, 7, 0, 0, 0,
		1, 0, 0, 0, 't', 1, 0, 0, 0, 2, 0, 0, 0, /* name, n_dims, ne[0] u32 */
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,     /* type, offset (u64 in v1 too) */
		[64] = 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40,  /* data at 64 = align32(54) */
	};
	const struct { uint32_t version; const uint8_t *want; size_t len; } cases[] = {
		{ 3, v3, sizeof v3 }, { 1, v1, sizeof v1 },
	};
	for (size_t c = 0; c < 2; c++) {
		struct qc_gguf_writer *w = minimal_writer(cases[c].version);
		uint8_t *buf = NULL;
		size_t len = 0;
		uint64_t predicted = 0;
		struct qc_err err = { 0 };
		CHECK(qc_gguf_writer_file_size(w, &predicted, &err) == QC_OK, "file_size: %s", err.msg);
		int rc = qc_gguf_writer_write_mem(w, &buf, &len, &err);
		CHECK(rc == QC_OK, "write_mem v%u: %s", cases[c].version, err.msg);
		CHECK(len == cases[c].len && predicted == len, "v%u: %zu bytes (predicted %llu), want %zu",
		      cases[c].version, len, (unsigned long long)predicted, cases[c].len);
		for (size_t i = 0; buf && i < len && i < cases[c].len; i++)
			if (buf[i] != cases[c].want[i]) {
				CHECK(0, "v%u: byte %zu is 0x%02x, want 0x%02x", cases[c].version, i, buf[i],
				      cases[c].want[i]);
				break;
			}
		free(buf);
		qc_gguf_writer_free(w);
	}
}

/* ---- KV round trips ----------------------------------------------------------- */

static const char nul_str[] = { 'x', '\0', 'y' };

static void add_all_scalars(struct qc_gguf_writer *w)
{
	int rc = 0;
	rc |= qc_gguf_writer_add_u8(w, "s.u8", 200, NULL);
	rc |= qc_gguf_writer_add_i8(w, "s.i8", -100, NULL);
	rc |= qc_gguf_writer_add_u16(w, "s.u16", 60000, NULL);
	rc |= qc_gguf_writer_add_i16(w, "s.i16", -30000, NULL);
	rc |= qc_gguf_writer_add_u32(w, "s.u32", 4000000000u, NULL);
	rc |= qc_gguf_writer_add_i32(w, "s.i32", -2000000000, NULL);
	rc |= qc_gguf_writer_add_u64(w, "s.u64", (1ull << 63) + 5, NULL);
	rc |= qc_gguf_writer_add_i64(w, "s.i64", INT64_MIN + 1, NULL);
	rc |= qc_gguf_writer_add_f32(w, "s.f32", 0.15625f, NULL);
	rc |= qc_gguf_writer_add_f64(w, "s.f64", -1e300, NULL);
	rc |= qc_gguf_writer_add_bool(w, "s.true", true, NULL);
	rc |= qc_gguf_writer_add_bool(w, "s.false", false, NULL);
	rc |= qc_gguf_writer_add_str(w, "s.str", "\xe2\x96\x81the <0x0A>", NULL);
	rc |= qc_gguf_writer_add_str(w, "s.empty", "", NULL);
	rc |= qc_gguf_writer_add_strn(w, "s.nul", nul_str, sizeof nul_str, NULL);
	CHECK(rc == 0, "a scalar add failed");
}

static void check_all_scalars(const struct qc_gguf *g, uint32_t version)
{
	const struct { const char *key; enum qc_gguf_vtype type; } want[] = {
		{ "s.u8", QC_GGUF_UINT8 }, { "s.i8", QC_GGUF_INT8 }, { "s.u16", QC_GGUF_UINT16 },
		{ "s.i16", QC_GGUF_INT16 }, { "s.u32", QC_GGUF_UINT32 }, { "s.i32", QC_GGUF_INT32 },
		{ "s.u64", QC_GGUF_UINT64 }, { "s.i64", QC_GGUF_INT64 }, { "s.f32", QC_GGUF_FLOAT32 },
		{ "s.f64", QC_GGUF_FLOAT64 }, { "s.true", QC_GGUF_BOOL }, { "s.false", QC_GGUF_BOOL },
		{ "s.str", QC_GGUF_STRING }, { "s.empty", QC_GGUF_STRING }, { "s.nul", QC_GGUF_STRING },
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		const struct qc_gguf_kv *kv = qc_gguf_find(g, want[i].key);
		CHECK(kv && kv->val.type == want[i].type, "v%u: key %s missing or type %d, want %d", version,
		      want[i].key, kv ? (int)kv->val.type : -1, (int)want[i].type);
	}
	const struct qc_gguf_kv *kv;
	if ((kv = qc_gguf_find(g, "s.u8")))
		CHECK(kv->val.u == 200, "u8 %llu", (unsigned long long)kv->val.u);
	if ((kv = qc_gguf_find(g, "s.i8")))
		CHECK(kv->val.i == -100, "i8 %lld", (long long)kv->val.i);
	if ((kv = qc_gguf_find(g, "s.u16")))
		CHECK(kv->val.u == 60000, "u16 %llu", (unsigned long long)kv->val.u);
	if ((kv = qc_gguf_find(g, "s.i16")))
		CHECK(kv->val.i == -30000, "i16 %lld", (long long)kv->val.i);
	if ((kv = qc_gguf_find(g, "s.u32")))
		CHECK(kv->val.u == 4000000000u, "u32 %llu", (unsigned long long)kv->val.u);
	if ((kv = qc_gguf_find(g, "s.i32")))
		CHECK(kv->val.i == -2000000000, "i32 %lld", (long long)kv->val.i);
	if ((kv = qc_gguf_find(g, "s.u64")))
		CHECK(kv->val.u == (1ull << 63) + 5, "u64 %llu", (unsigned long long)kv->val.u);
	if ((kv = qc_gguf_find(g, "s.i64")))
		CHECK(kv->val.i == INT64_MIN + 1, "i64 %lld", (long long)kv->val.i);
	if ((kv = qc_gguf_find(g, "s.f32")))
		CHECK(kv->val.f == 0.15625, "f32 %g", kv->val.f);
	if ((kv = qc_gguf_find(g, "s.f64")))
		CHECK(kv->val.f == -1e300, "f64 %g", kv->val.f);
	if ((kv = qc_gguf_find(g, "s.true")))
		CHECK(kv->val.b == true, "bool true");
	if ((kv = qc_gguf_find(g, "s.false")))
		CHECK(kv->val.b == false, "bool false");
	if ((kv = qc_gguf_find(g, "s.str")))
		CHECK(qc_gguf_str_eq(kv->val.s, "\xe2\x96\x81the <0x0A>"), "utf-8 string");
	if ((kv = qc_gguf_find(g, "s.empty")))
		CHECK(kv->val.s.len == 0, "empty string has %llu bytes", (unsigned long long)kv->val.s.len);
	if ((kv = qc_gguf_find(g, "s.nul")))
		CHECK(str_is(kv->val.s, nul_str, sizeof nul_str), "string with an embedded NUL");
}

static const uint8_t a_u8[] = { 0, 1, 255 };
static const int8_t a_i8[] = { -128, 0, 127 };
static const uint16_t a_u16[] = { 0, 65535 };
static const int16_t a_i16[] = { -32768, 32767, 5 };
static const uint32_t a_u32[] = { 1, 2, 3, 0xffffffffu };
static const int32_t a_i32[] = { INT32_MIN, -1, INT32_MAX };
static const uint64_t a_u64[] = { UINT64_MAX, 0 };
static const int64_t a_i64[] = { INT64_MIN, INT64_MAX, -7 };
static const float a_f32[] = { -0.0f, 1.5f, 3.25e-5f };
static const double a_f64[] = { 1e-300, -2.5 };
static const uint8_t a_bool[] = { 1, 0, 1, 1 };

static const struct { const char *key; enum qc_gguf_vtype elem; const void *data; uint64_t n; size_t size; }
num_arrays[] = {
	{ "a.u8", QC_GGUF_UINT8, a_u8, 3, 1 }, { "a.i8", QC_GGUF_INT8, a_i8, 3, 1 },
	{ "a.u16", QC_GGUF_UINT16, a_u16, 2, 2 }, { "a.i16", QC_GGUF_INT16, a_i16, 3, 2 },
	{ "a.u32", QC_GGUF_UINT32, a_u32, 4, 4 }, { "a.i32", QC_GGUF_INT32, a_i32, 3, 4 },
	{ "a.u64", QC_GGUF_UINT64, a_u64, 2, 8 }, { "a.i64", QC_GGUF_INT64, a_i64, 3, 8 },
	{ "a.f32", QC_GGUF_FLOAT32, a_f32, 3, 4 }, { "a.f64", QC_GGUF_FLOAT64, a_f64, 2, 8 },
	{ "a.bool", QC_GGUF_BOOL, a_bool, 4, 1 }, { "a.empty", QC_GGUF_UINT32, NULL, 0, 4 },
};

static const char *const strs[] = { "<unk>", "", "\xe2\x96\x81the", "<0xFF>" };
static const char *const strs2[] = { "x" };

static void add_all_arrays(struct qc_gguf_writer *w)
{
	int rc = 0;
	for (size_t i = 0; i < sizeof num_arrays / sizeof num_arrays[0]; i++)
		rc |= qc_gguf_writer_add_arr(w, num_arrays[i].key, num_arrays[i].elem, num_arrays[i].data,
					     num_arrays[i].n, NULL);
	rc |= qc_gguf_writer_add_arr_str(w, "a.str", strs, 4, NULL);
	/* [[1,2,3,0xffffffff], [], [1]] */
	const struct qc_gguf_warr inner[3] = {
		{ QC_GGUF_UINT32, 4, a_u32 }, { QC_GGUF_UINT32, 0, NULL }, { QC_GGUF_UINT32, 1, a_u32 },
	};
	const struct qc_gguf_warr outer = { QC_GGUF_ARRAY, 3, inner };
	rc |= qc_gguf_writer_add_arr_nested(w, "a.nested", &outer, NULL);
	/* [[["<unk>", "", "▁the", "<0xFF>"], ["x"]]] : three levels, strings at the bottom */
	const struct qc_gguf_warr leaves[2] = { { QC_GGUF_STRING, 4, strs }, { QC_GGUF_STRING, 1, strs2 } };
	const struct qc_gguf_warr mid = { QC_GGUF_ARRAY, 2, leaves };
	const struct qc_gguf_warr top = { QC_GGUF_ARRAY, 1, &mid };
	rc |= qc_gguf_writer_add_arr_nested(w, "a.deep", &top, NULL);
	CHECK(rc == 0, "an array add failed");
}

static void check_str_items(const struct qc_gguf_value *v, const char *const *want, uint64_t n,
			    const char *what)
{
	CHECK(v->type == QC_GGUF_ARRAY && v->arr.elem == QC_GGUF_STRING && v->arr.n == n,
	      "%s: not a string array of %llu", what, (unsigned long long)n);
	if (v->type != QC_GGUF_ARRAY || v->arr.elem != QC_GGUF_STRING || v->arr.n != n)
		return;
	for (uint64_t i = 0; i < n; i++)
		CHECK(v->arr.items[i].type == QC_GGUF_STRING && qc_gguf_str_eq(v->arr.items[i].s, want[i]),
		      "%s[%llu] differs", what, (unsigned long long)i);
}

static void check_all_arrays(const struct qc_gguf *g, uint32_t version)
{
	for (size_t i = 0; i < sizeof num_arrays / sizeof num_arrays[0]; i++) {
		const struct qc_gguf_value *v = qc_gguf_get_arr(g, num_arrays[i].key);
		CHECK(v && v->arr.elem == num_arrays[i].elem && v->arr.n == num_arrays[i].n,
		      "v%u: array %s missing or wrong elem/length", version, num_arrays[i].key);
		if (v && v->arr.n == num_arrays[i].n && num_arrays[i].n)
			CHECK(memcmp(v->arr.raw, num_arrays[i].data, num_arrays[i].n * num_arrays[i].size) == 0,
			      "v%u: array %s bytes differ", version, num_arrays[i].key);
	}
	const struct qc_gguf_value *v = qc_gguf_get_arr(g, "a.u32");
	int64_t x;
	CHECK(v && qc_gguf_arr_i64(v, 3, &x) && x == 0xffffffffll, "a.u32[3] via qc_gguf_arr_i64");
	if ((v = qc_gguf_get_arr(g, "a.str")))
		check_str_items(v, strs, 4, "a.str");
	else
		CHECK(0, "a.str missing");

	v = qc_gguf_get_arr(g, "a.nested");
	CHECK(v && v->arr.elem == QC_GGUF_ARRAY && v->arr.n == 3, "a.nested shape");
	if (v && v->arr.elem == QC_GGUF_ARRAY && v->arr.n == 3) {
		const uint64_t lens[3] = { 4, 0, 1 };
		for (int i = 0; i < 3; i++) {
			const struct qc_gguf_value *in = &v->arr.items[i];
			CHECK(in->type == QC_GGUF_ARRAY && in->arr.elem == QC_GGUF_UINT32 && in->arr.n == lens[i],
			      "a.nested[%d] shape", i);
			if (in->arr.n == lens[i] && lens[i])
				CHECK(memcmp(in->arr.raw, a_u32, lens[i] * 4) == 0, "a.nested[%d] values", i);
		}
	}
	v = qc_gguf_get_arr(g, "a.deep");
	CHECK(v && v->arr.elem == QC_GGUF_ARRAY && v->arr.n == 1, "a.deep top");
	if (v && v->arr.elem == QC_GGUF_ARRAY && v->arr.n == 1) {
		const struct qc_gguf_value *mid = &v->arr.items[0];
		CHECK(mid->type == QC_GGUF_ARRAY && mid->arr.elem == QC_GGUF_ARRAY && mid->arr.n == 2,
		      "a.deep[0] shape");
		if (mid->arr.elem == QC_GGUF_ARRAY && mid->arr.n == 2) {
			check_str_items(&mid->arr.items[0], strs, 4, "a.deep[0][0]");
			check_str_items(&mid->arr.items[1], strs2, 1, "a.deep[0][1]");
		}
	}
}

static void every_value_type_round_trips_in_v1_v2_v3(void)
{
	for (uint32_t version = 1; version <= 3; version++) {
		struct qc_gguf_writer *w = qc_gguf_writer_new(version, 0);
		add_all_scalars(w);
		add_all_arrays(w);
		uint8_t *buf;
		size_t len;
		struct qc_err err = { 0 };
		CHECK(qc_gguf_writer_write_mem(w, &buf, &len, &err) == QC_OK, "v%u write: %s", version, err.msg);
		struct qc_gguf *g = open_mem_ok(buf, len);
		if (g) {
			CHECK(g->version == version, "version %u, want %u", g->version, version);
			CHECK(g->n_kv == qc_gguf_writer_n_kv(w), "n_kv %llu", (unsigned long long)g->n_kv);
			CHECK(g->n_tensors == 0 && g->data_off == len, "no tensors: data_off %llu, len %zu",
			      (unsigned long long)g->data_off, len);
			check_all_scalars(g, version);
			check_all_arrays(g, version);
		}
		qc_gguf_close(g);
		free(buf);
		qc_gguf_writer_free(w);
	}
}

/* ---- tensors, order, alignment ------------------------------------------------ */

static void keys_and_tensors_keep_insertion_order(void)
{
	static const char *const keys[] = { "zeta", "alpha", "mu", "general.architecture" };
	static const char *const names[] = { "c.weight", "a.weight", "b.bias" };
	static const float data[4] = { 1, 2, 3, 4 };
	const int64_t ne[1] = { 4 };
	struct qc_gguf_writer *w = qc_gguf_writer_new(3, 0);
	for (int i = 0; i < 4; i++)
		CHECK(qc_gguf_writer_add_i32(w, keys[i], i, NULL) == QC_OK, "add %s", keys[i]);
	for (int i = 0; i < 3; i++)
		CHECK(qc_gguf_writer_add_tensor(w, names[i], QC_TYPE_F32, 1, ne, data, NULL) == QC_OK,
		      "add %s", names[i]);
	uint8_t *buf;
	size_t len;
	CHECK(qc_gguf_writer_write_mem(w, &buf, &len, NULL) == QC_OK, "write");
	struct qc_gguf *g = open_mem_ok(buf, len);
	if (g && g->n_kv == 4 && g->n_tensors == 3) {
		for (int i = 0; i < 4; i++)
			CHECK(qc_gguf_str_eq(g->kv[i].key, keys[i]) && g->kv[i].val.i == i, "key %d is not %s", i,
			      keys[i]);
		for (int i = 0; i < 3; i++)
			CHECK(strcmp(g->tensors[i].name, names[i]) == 0, "tensor %d is %s, want %s", i,
			      g->tensors[i].name, names[i]);
		for (int i = 1; i < 3; i++)
			CHECK(g->tensors[i].data_off > g->tensors[i - 1].data_off, "data not in insertion order");
	} else {
		CHECK(0, "counts differ");
	}
	qc_gguf_close(g);
	free(buf);
	qc_gguf_writer_free(w);
}

/* Tensors of awkward byte sizes so every one needs padding. */
static void tensors_are_aligned_and_intact(void)
{
	static const uint32_t aligns[] = { 32, 64, 4096 };
	float f3[3] = { 0.5f, -1.0f, 2.0f };
	uint8_t q8[3 * 34], f16[2 * 5 * 2 * 3], i8[7];
	for (size_t i = 0; i < sizeof q8; i++)
		q8[i] = (uint8_t)(i * 7 + 1);
	for (size_t i = 0; i < sizeof f16; i++)
		f16[i] = (uint8_t)(i ^ 0x5a);
	for (size_t i = 0; i < sizeof i8; i++)
		i8[i] = (uint8_t)(200 + i);
	const int64_t ne_f3[1] = { 3 }, ne_q8[2] = { 32, 3 }, ne_f16[4] = { 5, 1, 2, 3 }, ne_i8[1] = { 7 };
	const struct { const char *name; enum qc_type type; uint32_t n_dims; const int64_t *ne;
		       const void *data; size_t bytes; } ts[] = {
		{ "f32.three", QC_TYPE_F32, 1, ne_f3, f3, sizeof f3 },
		{ "q8_0.rows", QC_TYPE_Q8_0, 2, ne_q8, q8, sizeof q8 },
		{ "f16.4d", QC_TYPE_F16, 4, ne_f16, f16, sizeof f16 },
		{ "i8.seven", QC_TYPE_I8, 1, ne_i8, i8, sizeof i8 },
	};
	for (uint32_t version = 1; version <= 3; version++)
		for (size_t a = 0; a < 3; a++) {
			uint32_t al = aligns[a];
			struct qc_gguf_writer *w = qc_gguf_writer_new(version, al);
			CHECK(w != NULL, "writer_new(%u, %u)", version, al);
			if (!w)
				continue;
			qc_gguf_writer_add_str(w, "general.architecture", "llama", NULL);
			for (size_t i = 0; i < 4; i++)
				CHECK(qc_gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne,
								ts[i].data, NULL) == QC_OK, "add %s", ts[i].name);
			uint8_t *buf;
			size_t len;
			CHECK(qc_gguf_writer_write_mem(w, &buf, &len, NULL) == QC_OK, "write");
			CHECK(len % al == 0, "v%u align %u: file size %zu not padded", version, al, len);
			struct qc_gguf *g = open_mem_ok(buf, len);
			if (!g) {
				free(buf);
				qc_gguf_writer_free(w);
				continue;
			}
			const struct qc_gguf_kv *kv = qc_gguf_find(g, "general.alignment");
			CHECK(al == 32 ? kv == NULL : (kv && kv->val.type == QC_GGUF_UINT32 && kv->val.u == al),
			      "v%u: general.alignment key for %u", version, al);
			CHECK(g->alignment == al && g->data_off % al == 0, "v%u: alignment %u, data_off %llu",
			      version, g->alignment, (unsigned long long)g->data_off);
			for (size_t i = 0; i < 4 && i < g->n_tensors; i++) {
				const struct qc_gguf_tensor *t = &g->tensors[i];
				CHECK(t->data_off % al == 0, "v%u align %u: %s at %llu", version, al, t->name,
				      (unsigned long long)t->data_off);
				CHECK(t->type == ts[i].type && t->n_dims == ts[i].n_dims && t->n_bytes == ts[i].bytes,
				      "v%u: %s type/dims/bytes", version, t->name);
				for (uint32_t d = 0; d < QC_GGUF_MAX_DIMS; d++)
					CHECK(t->ne[d] == (d < ts[i].n_dims ? ts[i].ne[d] : 1), "%s ne[%u]", t->name, d);
				CHECK(memcmp(buf + t->data_off, ts[i].data, ts[i].bytes) == 0, "v%u: %s bytes",
				      version, t->name);
				/* the padding after each tensor is zeros */
				for (uint64_t p = t->data_off + t->n_bytes; p < len && p % al; p++)
					if (buf[p]) {
						CHECK(0, "non-zero padding at %llu", (unsigned long long)p);
						break;
					}
			}
			qc_gguf_close(g);
			free(buf);
			qc_gguf_writer_free(w);
		}
}

static void alignment_key_added_explicitly_sets_alignment(void)
{
	static const float one = 1.0f;
	const int64_t ne[1] = { 1 };
	struct qc_gguf_writer *w = qc_gguf_writer_new(3, 0);
	CHECK(qc_gguf_writer_add_u32(w, "general.alignment", 64, NULL) == QC_OK, "add alignment 64");
	qc_gguf_writer_add_tensor(w, "a", QC_TYPE_F32, 1, ne, &one, NULL);
	qc_gguf_writer_add_tensor(w, "b", QC_TYPE_F32, 1, ne, &one, NULL);
	uint8_t *buf;
	size_t len;
	CHECK(qc_gguf_writer_write_mem(w, &buf, &len, NULL) == QC_OK, "write");
	struct qc_gguf *g = open_mem_ok(buf, len);
	if (g && g->n_tensors == 2)
		CHECK(g->alignment == 64 && g->tensors[1].data_off - g->tensors[0].data_off == 64,
		      "alignment %u, tensor stride %llu", g->alignment,
		      (unsigned long long)(g->tensors[1].data_off - g->tensors[0].data_off));
	qc_gguf_close(g);
	free(buf);
	qc_gguf_writer_free(w);
}

/* ---- streaming ---------------------------------------------------------------- */

struct fill_log {
	uint64_t next;      /* expected next byte_off */
	uint64_t calls, max_n;
	bool in_order;
	int fail_at_call;   /* 1-based call that returns an error; 0 = never */
};

static uint8_t pattern(uint64_t i)
{
	return (uint8_t)((i * 2654435761u) >> 13);
}

static int fill_pattern(void *ctx, uint64_t off, void *buf, size_t n)
{
	struct fill_log *lg = ctx;
	lg->calls++;
	if (lg->fail_at_call && (int)lg->calls == lg->fail_at_call)
		return QC_EIO;
	lg->in_order &= off == lg->next;
	lg->next = off + n;
	if (n > lg->max_n)
		lg->max_n = n;
	uint8_t *p = buf;
	for (size_t i = 0; i < n; i++)
		p[i] = pattern(off + i);
	return QC_OK;
}

static void fill_callback_streams_big_tensor_in_chunks(void)
{
	const int64_t ne[2] = { 1024, 5 * 1024 + 3 };   /* 20 MiB + 12 KiB of f32 */
	const uint64_t n_bytes = (uint64_t)ne[0] * (uint64_t)ne[1] * 4;
	static const float small[3] = { 1, 2, 3 };
	const int64_t ne_small[1] = { 3 };
	struct fill_log lg = { .in_order = true };
	char path[256];
	path_in_tmp(path, sizeof path, "big.gguf");
	struct qc_gguf_writer *w = qc_gguf_writer_new(3, 0);
	qc_gguf_writer_add_tensor(w, "small.before", QC_TYPE_F32, 1, ne_small, small, NULL);
	CHECK(qc_gguf_writer_add_tensor_fill(w, "big", QC_TYPE_F32, 2, ne, fill_pattern, &lg, NULL) == QC_OK,
	      "add_tensor_fill");
	qc_gguf_writer_add_tensor(w, "small.after", QC_TYPE_F32, 1, ne_small, small, NULL);
	struct qc_err err = { 0 };
	CHECK(qc_gguf_writer_write_file(w, path, &err) == QC_OK, "write_file: %s", err.msg);
	CHECK(lg.in_order && lg.next == n_bytes, "fill calls out of order or short: next %llu",
	      (unsigned long long)lg.next);
	CHECK(lg.calls >= 3 && lg.max_n <= (64u << 20), "%llu calls, largest %llu bytes: not chunked",
	      (unsigned long long)lg.calls, (unsigned long long)lg.max_n);
	struct qc_gguf *g = NULL;
	CHECK(qc_gguf_open(path, &g, &err) == QC_OK, "open: %s", err.msg);
	if (g && g->n_tensors == 3) {
		const struct qc_gguf_tensor *t = &g->tensors[1];
		CHECK(t->n_bytes == n_bytes, "big has %llu bytes", (unsigned long long)t->n_bytes);
		uint64_t bad = UINT64_MAX;
		for (uint64_t i = 0; i < n_bytes && bad == UINT64_MAX; i++)
			if (g->map[t->data_off + i] != pattern(i))
				bad = i;
		CHECK(bad == UINT64_MAX, "big differs at byte %llu", (unsigned long long)bad);
		CHECK(memcmp(g->map + g->tensors[2].data_off, small, sizeof small) == 0, "small.after bytes");
	}
	qc_gguf_close(g);
	unlink(path);
	qc_gguf_writer_free(w);
}

/* ---- files -------------------------------------------------------------------- */

static void write_file_is_atomic_silent_and_cleans_up(void)
{
	char path[256], nodir[256];
	path_in_tmp(path, sizeof path, "model.gguf");
	path_in_tmp(nodir, sizeof nodir, "no/such/dir/model.gguf");
	struct qc_err err = { 0 };

	/* stdout goes to a file while we write; it must stay empty */
	char out_path[256];
	path_in_tmp(out_path, sizeof out_path, "stdout.txt");
	fflush(stdout);
	int saved = dup(1), fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	dup2(fd, 1);
	struct qc_gguf_writer *good = minimal_writer(3);
	int rc = qc_gguf_writer_write_file(good, path, &err);
	fflush(stdout);
	dup2(saved, 1);
	close(saved);
	close(fd);
	struct stat st;
	CHECK(rc == QC_OK, "write_file: %s", err.msg);
	CHECK(stat(out_path, &st) == 0 && st.st_size == 0, "write_file printed %lld bytes on stdout",
	      (long long)st.st_size);
	unlink(out_path);
	CHECK(stat(path, &st) == 0 && st.st_size == 128, "model.gguf size %lld", (long long)st.st_size);
	mode_t mask = umask(0);
	umask(mask);
	CHECK((st.st_mode & 0777) == (0666 & ~mask), "mode %o with umask %o", (unsigned)(st.st_mode & 0777),
	      (unsigned)mask);
	CHECK(count_dir_entries(tmpdir) == 1, "temp files left behind after success");

	/* a failing fill callback: error names the tensor, the old file survives, no temp file */
	const int64_t ne[1] = { 1 << 22 };
	struct fill_log lg = { .in_order = true, .fail_at_call = 2 };
	struct qc_gguf_writer *bad = qc_gguf_writer_new(3, 0);
	qc_gguf_writer_add_tensor_fill(bad, "blk.3.ffn_up.weight", QC_TYPE_F32, 1, ne, fill_pattern, &lg, NULL);
	memset(&err, 0, sizeof err);
	rc = qc_gguf_writer_write_file(bad, path, &err);
	CHECK(rc == QC_EIO, "failing fill gave %d", rc);
	CHECK(strcmp(err.tensor, "blk.3.ffn_up.weight") == 0 && err.off > 0 && strcmp(err.path, path) == 0,
	      "error lacks tensor/offset/path: '%s' %lld '%s'", err.tensor, (long long)err.off, err.path);
	CHECK(stat(path, &st) == 0 && st.st_size == 128, "old file clobbered on failure");
	CHECK(count_dir_entries(tmpdir) == 1, "temp file left behind after failure");

	memset(&err, 0, sizeof err);
	CHECK(qc_gguf_writer_write_file(good, nodir, &err) == QC_EIO && err.path[0], "missing dir: %d", err.code);
	CHECK(count_dir_entries(tmpdir) == 1, "stray files after a failed create");

	/* write_mem gives the same bytes as write_file */
	uint8_t *buf;
	size_t len;
	struct qc_gguf *g = NULL;
	CHECK(qc_gguf_writer_write_mem(good, &buf, &len, NULL) == QC_OK, "write_mem");
	CHECK(qc_gguf_open(path, &g, &err) == QC_OK && g->size == len && memcmp(g->map, buf, len) == 0,
	      "write_file and write_mem differ");
	qc_gguf_close(g);
	free(buf);
	unlink(path);
	qc_gguf_writer_free(bad);
	qc_gguf_writer_free(good);
}

/* Shards named and keyed as llama.cpp's gguf-split writes them read back as one model. */
static void split_shards_open_as_one_model(void)
{
	static const float data[4] = { 1, 2, 3, 4 };
	const int64_t ne[1] = { 4 };
	const char *names[3] = { "token_embd.weight", "blk.0.attn_q.weight", "output.weight" };
	char path[256];
	for (int s = 0; s < 2; s++) {
		struct qc_gguf_writer *w = qc_gguf_writer_new(3, 0);
		if (s == 0)
			qc_gguf_writer_add_str(w, "general.architecture", "llama", NULL);
		qc_gguf_writer_add_u16(w, "split.no", (uint16_t)s, NULL);
		qc_gguf_writer_add_u16(w, "split.count", 2, NULL);
		qc_gguf_writer_add_i32(w, "split.tensors.count", 3, NULL);
		for (int i = s == 0 ? 0 : 2; i < (s == 0 ? 2 : 3); i++)
			qc_gguf_writer_add_tensor(w, names[i], QC_TYPE_F32, 1, ne, data, NULL);
		snprintf(path, sizeof path, "%s/m-%05d-of-%05d.gguf", tmpdir, s + 1, 2);
		CHECK(qc_gguf_writer_write_file(w, path, NULL) == QC_OK, "shard %d", s);
		qc_gguf_writer_free(w);
	}
	struct qc_gguf_model *m = NULL;
	struct qc_err err = { 0 };
	snprintf(path, sizeof path, "%s/m-%05d-of-%05d.gguf", tmpdir, 1, 2);
	CHECK(qc_gguf_model_open(path, &m, &err) == QC_OK, "model_open: %s", err.msg);
	if (m) {
		CHECK(m->n_files == 2 && m->n_tensors == 3, "%d files, %llu tensors", m->n_files,
		      (unsigned long long)m->n_tensors);
		const struct qc_gguf_tensor *t = qc_gguf_model_find(m, "output.weight");
		CHECK(t && t->file_idx == 1 && memcmp(qc_gguf_model_data(m, t), data, sizeof data) == 0,
		      "output.weight in shard 2");
	}
	qc_gguf_model_close(m);
	for (int s = 0; s < 2; s++) {
		snprintf(path, sizeof path, "%s/m-%05d-of-%05d.gguf", tmpdir, s + 1, 2);
		unlink(path);
	}
}

/* ---- rejections ---------------------------------------------------------------- */

static void writer_rejects_bad_input_and_stays_usable(void)
{
	static const float f[64] = { 0 };
	const int64_t ne1[1] = { 4 }, ne33[1] = { 33 }, neg[2] = { 4, -1 }, big[2] = { 1ll << 32, 1 };
	const int64_t ne5[5] = { 1, 1, 1, 1, 1 };
	char long_name[QC_GGUF_MAX_NAME + 1];
	memset(long_name, 'n', sizeof long_name - 1);
	long_name[QC_GGUF_MAX_NAME] = '\0';
	struct qc_err err = { 0 };

	CHECK(qc_gguf_writer_new(0, 0) == NULL, "version 0 accepted");
	CHECK(qc_gguf_writer_new(4, 0) == NULL, "version 4 accepted");
	CHECK(qc_gguf_writer_new(3, 48) == NULL, "alignment 48 accepted");
	CHECK(qc_gguf_writer_new(3, 1u << 31) == NULL, "alignment 2^31 accepted");

	struct qc_gguf_writer *w = qc_gguf_writer_new(3, 0);
	CHECK(qc_gguf_writer_add_u32(w, "k", 1, &err) == QC_OK, "first k");
	CHECK(qc_gguf_writer_add_str(w, "k", "again", &err) == QC_EINVAL && strstr(err.msg, "'k'"),
	      "duplicate key: %s", err.msg);
	CHECK(qc_gguf_writer_add_u32(w, "", 1, &err) == QC_EINVAL, "empty key accepted");
	CHECK(qc_gguf_writer_add_u32(w, NULL, 1, &err) == QC_EINVAL, "NULL key accepted");
	CHECK(qc_gguf_writer_add_str(w, "general.alignment", "64", &err) == QC_EINVAL,
	      "string general.alignment accepted");
	CHECK(qc_gguf_writer_add_u32(w, "general.alignment", 48, &err) == QC_EINVAL,
	      "general.alignment 48 accepted");
	CHECK(qc_gguf_writer_add_str(w, "s", NULL, &err) == QC_EINVAL, "NULL string accepted");
	CHECK(qc_gguf_writer_add_arr(w, "a", QC_GGUF_STRING, strs, 1, &err) == QC_EINVAL,
	      "add_arr with STRING elements accepted");
	CHECK(qc_gguf_writer_add_arr(w, "a", QC_GGUF_UINT32, NULL, 3, &err) == QC_EINVAL,
	      "NULL array data accepted");
	const struct qc_gguf_warr badelem = { (enum qc_gguf_vtype)13, 0, NULL };
	CHECK(qc_gguf_writer_add_arr_nested(w, "a", &badelem, &err) == QC_EINVAL, "elem type 13 accepted");
	const char *const with_null[2] = { "ok", NULL };
	CHECK(qc_gguf_writer_add_arr_str(w, "a", with_null, 2, &err) == QC_EINVAL, "NULL string in array");
	struct qc_gguf_warr chain[QC_GGUF_WRITER_MAX_DEPTH + 1];
	for (int i = 0; i <= QC_GGUF_WRITER_MAX_DEPTH; i++)
		chain[i] = i < QC_GGUF_WRITER_MAX_DEPTH ? (struct qc_gguf_warr){ QC_GGUF_ARRAY, 1, &chain[i + 1] }
							: (struct qc_gguf_warr){ QC_GGUF_UINT8, 1, a_u8 };
	/* the writer nests deeper than our reader (depth 8) so reader caps can be tested */
	struct qc_gguf_writer *wd = qc_gguf_writer_new(3, 0);
	CHECK(qc_gguf_writer_add_arr_nested(wd, "deep", &chain[0], &err) == QC_EINVAL,
	      "nesting past the limit accepted");
	CHECK(qc_gguf_writer_add_arr_nested(wd, "deep", &chain[1], &err) == QC_OK,
	      "nesting at the limit rejected: %s", err.msg);
	qc_gguf_writer_free(wd);
	CHECK(qc_gguf_writer_n_kv(w) == 1, "failed adds left %llu keys", (unsigned long long)qc_gguf_writer_n_kv(w));

	CHECK(qc_gguf_writer_add_tensor(w, "t", QC_TYPE_F32, 1, ne1, f, &err) == QC_OK, "first t");
	CHECK(qc_gguf_writer_add_tensor(w, "t", QC_TYPE_F32, 1, ne1, f, &err) == QC_EINVAL, "duplicate tensor");
	CHECK(qc_gguf_writer_add_tensor(w, long_name, QC_TYPE_F32, 1, ne1, f, &err) == QC_EINVAL,
	      "64-byte name accepted");
	long_name[QC_GGUF_MAX_NAME - 1] = '\0';
	CHECK(qc_gguf_writer_add_tensor(w, long_name, QC_TYPE_F32, 1, ne1, f, &err) == QC_OK,
	      "63-byte name rejected: %s", err.msg);
	CHECK(qc_gguf_writer_add_tensor(w, "", QC_TYPE_F32, 1, ne1, f, &err) == QC_EINVAL, "empty name");
	CHECK(qc_gguf_writer_add_tensor(w, "q", QC_TYPE_Q8_0, 1, ne33, f, &err) == QC_EINVAL &&
	      strstr(err.msg, "block size"), "q8_0 row of 33 accepted: %s", err.msg);
	CHECK(qc_gguf_writer_add_tensor(w, "r", (enum qc_type)4, 1, ne1, f, &err) == QC_EINVAL,
	      "retired type id 4 accepted");
	CHECK(qc_gguf_writer_add_tensor(w, "r", (enum qc_type)QC_TYPE_COUNT, 1, ne1, f, &err) == QC_EINVAL,
	      "type id QC_TYPE_COUNT accepted");
	CHECK(qc_gguf_writer_add_tensor(w, "d", QC_TYPE_F32, 5, ne5, f, &err) == QC_EINVAL, "5 dims accepted");
	CHECK(qc_gguf_writer_add_tensor(w, "n", QC_TYPE_F32, 2, neg, f, &err) == QC_EINVAL, "ne -1 accepted");
	CHECK(qc_gguf_writer_add_tensor(w, "z", QC_TYPE_F32, 1, ne1, NULL, &err) == QC_EINVAL,
	      "NULL data accepted");
	CHECK(qc_gguf_writer_add_tensor_fill(w, "z", QC_TYPE_F32, 1, ne1, NULL, NULL, &err) == QC_EINVAL,
	      "NULL fill accepted");
	CHECK(qc_gguf_writer_n_tensors(w) == 2, "failed adds left %llu tensors",
	      (unsigned long long)qc_gguf_writer_n_tensors(w));

	uint8_t *buf;
	size_t len;
	CHECK(qc_gguf_writer_write_mem(w, &buf, &len, &err) == QC_OK, "write after rejections: %s", err.msg);
	struct qc_gguf *g = open_mem_ok(buf, len);
	CHECK(g && g->n_kv == 1 && g->n_tensors == 2, "file after rejections has the wrong contents");
	qc_gguf_close(g);
	free(buf);
	qc_gguf_writer_free(w);

	struct qc_gguf_writer *w1 = qc_gguf_writer_new(1, 0);
	CHECK(qc_gguf_writer_add_tensor(w1, "wide", QC_TYPE_I8, 2, big, f, &err) == QC_ERANGE,
	      "v1 accepted a dim of 2^32");
	qc_gguf_writer_free(w1);
	qc_gguf_writer_free(NULL);
}

/* Corrupting writer output must trip the reader: the round trips above are not vacuous. */
static void corrupted_output_is_rejected_by_reader(void)
{
	struct qc_gguf_writer *w = qc_gguf_writer_new(3, 0);
	const int64_t ne[1] = { 64 };
	static const float f[64] = { 1 };
	qc_gguf_writer_add_u32(w, "general.alignment", 32, NULL);
	qc_gguf_writer_add_bool(w, "flag", true, NULL);
	qc_gguf_writer_add_tensor(w, "t", QC_TYPE_F32, 1, ne, f, NULL);
	uint8_t *buf;
	size_t len;
	CHECK(qc_gguf_writer_write_mem(w, &buf, &len, NULL) == QC_OK, "write");
	uint8_t *bad = malloc(len);
	struct qc_gguf *g = NULL;
	struct qc_err err;

	memcpy(bad, buf, len);
	bad[0] = 'X';
	CHECK(qc_gguf_open_mem(bad, len, "bad", &g, &err) == QC_EFORMAT, "bad magic accepted");

	/* value of general.alignment: key record starts at 24; len 8 + 17 bytes + type 4 */
	memcpy(bad, buf, len);
	CHECK(memcmp(bad + 32, "general.alignment", 17) == 0, "layout assumption");
	bad[24 + 8 + 17 + 4] = 48;
	CHECK(qc_gguf_open_mem(bad, len, "bad", &g, &err) == QC_EFORMAT && err.off > 0,
	      "alignment 48 accepted");

	/* bool byte of "flag" := 2 */
	memcpy(bad, buf, len);
	size_t flag_val = 24 + (8 + 17 + 4 + 4) + (8 + 4 + 4);
	CHECK(bad[flag_val] == 1, "layout assumption (flag)");
	bad[flag_val] = 2;
	CHECK(qc_gguf_open_mem(bad, len, "bad", &g, &err) == QC_EFORMAT, "bool 2 accepted");

	memcpy(bad, buf, len);
	CHECK(qc_gguf_open_mem(bad, len - 1, "bad", &g, &err) == QC_EFORMAT && err.off >= 0,
	      "truncated tensor data accepted");
	CHECK(qc_gguf_open_mem(bad, len, "good", &g, &err) == QC_OK, "untouched copy rejected: %s", err.msg);
	qc_gguf_close(g);
	free(bad);
	free(buf);
	qc_gguf_writer_free(w);
}

int main(void)
{
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	writer_matches_hand_assembled_bytes();
	every_value_type_round_trips_in_v1_v2_v3();
	keys_and_tensors_keep_insertion_order();
	tensors_are_aligned_and_intact();
	alignment_key_added_explicitly_sets_alignment();
	fill_callback_streams_big_tensor_in_chunks();
	write_file_is_atomic_silent_and_cleans_up();
	split_shards_open_as_one_model();
	writer_rejects_bad_input_and_stays_usable();
	corrupted_output_is_rejected_by_reader();
	CHECK(count_dir_entries(tmpdir) == 0, "test left files in %s", tmpdir);
	rmdir(tmpdir);
	return check_report("test_gguf_write");
}
