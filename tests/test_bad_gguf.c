/* test_bad_gguf.c — the GGUF reader rejects hostile input with a full qc_err, never a
 * crash: every fixture (gguf/, gguf-quant/) cut at many offsets, and header, KV and
 * tensor-info corruption patched in memory (fixtures are never written), plus the real
 * llama.cpp-era file with unaligned q8_0 rows. Expected offsets come from gguf_walk.h's
 * independent walker and from where this file put the bytes it changed — never from the
 * reader under test. Each check has a valid near-miss input that must pass.
 * The bundle reader is test_bad_bundle.c, the CLI test_bad_cli.c, hyper-parameter
 * consistency test_bad_hparams.c.
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/check.h"
#include "gguf.h"
#include "gguf_walk.h"

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every *.gguf under fixtures/gguf and fixtures/gguf-quant, sorted. */
static int load_fixtures(struct fixture **out)
{
	static const char *const dirs[] = { "gguf", "gguf-quant" };
	struct fixture *fx = NULL;
	int n = 0;
	for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
		char dir[512 - 16];
		snprintf(dir, sizeof dir, "%s/%s", check_fixtures(), dirs[d]);
		DIR *dp = opendir(dir);
		CHECK(dp != NULL, "fixture directory %s: %s", dir, strerror(errno));
		if (!dp)
			continue;
		char *names[256];
		int k = 0;
		struct dirent *e;
		while ((e = readdir(dp)) && k < 256) {
			size_t l = strlen(e->d_name);
			if (l > 5 && strcmp(e->d_name + l - 5, ".gguf") == 0)
				names[k++] = strdup(e->d_name);
		}
		closedir(dp);
		qsort(names, (size_t)k, sizeof names[0], cmp_str);
		for (int i = 0; i < k; i++) {
			struct fixture *nf = realloc(fx, (size_t)(n + 1) * sizeof(*fx));
			if (!nf)
				exit(1);
			fx = nf;
			struct fixture *f = &fx[n];
			memset(f, 0, sizeof(*f));
			snprintf(f->path, sizeof f->path, "%s/%s", dir, names[i]);
			free(names[i]);
			f->buf = slurp(f->path, &f->len);
			CHECK(f->buf != NULL, "cannot read fixture %s", f->path);
			if (!f->buf)
				continue;
			snprintf(f->name, sizeof f->name, "%s", strrchr(f->path, '/') + 1);
			CHECK(walk_gguf(f->buf, f->len, &f->w), "independent walker cannot read %s", f->path);
			n++;
		}
	}
	*out = fx;
	return n;
}

static const struct fixture *fixture_named(const struct fixture *fx, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (strcmp(fx[i].name, name) == 0)
			return &fx[i];
	return NULL;
}

/* ---- GGUF checks --------------------------------------------------------------------- */

/* The walker and the reader agree on every record offset of every intact fixture. */
static void gguf_reader_offsets_match_independent_walker(const struct fixture *fx, int n)
{
	for (int i = 0; i < n; i++) {
		const struct fixture *f = &fx[i];
		struct qc_gguf *g = NULL;
		struct qc_err err = {0};
		int rc = qc_gguf_open_mem(f->buf, f->len, f->name, &g, &err);
		if (strcmp(f->name, "tinyllamas-stories-260k-q8_0.gguf") == 0) {
			CHECK(rc != QC_OK, "gguf_rejects_unaligned_rows: %s opened", f->name);
			qc_gguf_close(g);
			continue;
		}
		CHECK(rc == QC_OK, "gguf_opens_every_valid_fixture: %s: %s", f->name, err.msg);
		if (rc)
			continue;
		bool same = g->n_kv == f->w.n_kv && g->n_tensors == f->w.n_tensors && g->data_off == f->w.data_off;
		for (uint64_t k = 0; same && k < g->n_kv; k++)
			same = g->kv[k].off == f->w.kv[k].off;
		for (uint64_t k = 0; same && k < g->n_tensors; k++)
			same = g->tensors[k].info_off == f->w.t[k].off &&
			       strcmp(g->tensors[k].name, f->w.t[k].name) == 0 &&
			       g->tensors[k].data_off == f->w.data_off + f->w.t[k].rel;
		CHECK(same, "gguf_record_offsets_match_walker: %s", f->name);
		qc_gguf_close(g);
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Cut f at each offset in cuts; each prefix must fail naming an offset <= the cut. */
static int truncations_fail(const struct fixture *f, uint64_t *cuts, size_t n_cuts, int *tested)
{
	int bad = 0;
	qsort(cuts, n_cuts, sizeof *cuts, cmp_u64);
	for (size_t i = 0; i < n_cuts; i++) {
		uint64_t L = cuts[i];
		if (L >= f->len || (i && cuts[i - 1] == L))
			continue;
		/* a private copy of exactly L bytes, so ASan catches any read past the cut */
		uint8_t *p = dup_bytes(f->buf, (size_t)L);
		(*tested)++;
		char what[96];
		snprintf(what, sizeof what, "cut at %llu", (unsigned long long)L);
		if (!gguf_fails_q(what, f->name, p, (size_t)L, QC_EFORMAT, (int64_t)L, OFF_AT_MOST, NULL, bad >= 3))
			bad++;
		free(p);
	}
	return bad;
}

static void gguf_rejects_truncated_files(const struct fixture *fx, int n)
{
	long total = 0;
	for (int i = 0; i < n; i++) {
		const struct fixture *f = &fx[i];
		size_t cap = 4096 + 200 + 8 * (size_t)f->w.n_tensors + 64 + (size_t)(f->w.info_end - f->w.kv_end) + 8;
		uint64_t *cuts = malloc(cap * sizeof *cuts);
		size_t k = 0;
		for (int j = 0; j < 200; j++)
			cuts[k++] = (uint64_t)j * f->len / 200;
		for (uint64_t t = 0; t < f->w.n_tensors; t++) {
			const struct walk_tensor *wt = &f->w.t[t];
			cuts[k++] = wt->off - 1;
			cuts[k++] = wt->off;
			cuts[k++] = wt->off + 1;
			cuts[k++] = f->w.data_off + wt->rel; /* data start */
		}
		for (uint64_t t = 0; t < f->w.n_kv && t < 8; t++)
			cuts[k++] = f->w.kv[t].off + 1;
		cuts[k++] = f->w.kv_end;
		cuts[k++] = f->w.info_end;
		cuts[k++] = f->w.data_off;
		cuts[k++] = f->len - 1;
		/* the tensors' data ends, from the reader on the intact file */
		struct qc_gguf *g = NULL;
		if (qc_gguf_open_mem(f->buf, f->len, f->name, &g, NULL) == QC_OK) {
			for (uint64_t t = 0; t < g->n_tensors && k + 3 <= cap; t++) {
				uint64_t end = g->tensors[t].data_off + g->tensors[t].n_bytes;
				cuts[k++] = end - 1;
				cuts[k++] = end;
				cuts[k++] = end + 1;
			}
		}
		qc_gguf_close(g);
		/* every byte of the first 4 KB and of the tensor-info section for two files
		 * (one v3, one v2), so every header field is cut inside */
		bool every = strcmp(f->name, "stories260K.gguf") == 0 ||
			     strcmp(f->name, "tinyllamas-stories-260k-q8_0.gguf") == 0;
		uint64_t *all = NULL;
		size_t n_all = 0;
		if (every) {
			n_all = 4096 + (size_t)(f->w.info_end - f->w.kv_end) + 64;
			all = malloc((k + n_all) * sizeof *all);
			memcpy(all, cuts, k * sizeof *cuts);
			size_t m = k;
			for (uint64_t L = 0; L < 4096; L++)
				all[m++] = L;
			for (uint64_t L = f->w.kv_end; L < f->w.data_off + 32 && m < k + n_all; L++)
				all[m++] = L;
			n_all = m;
		}
		int tested = 0;
		int bad = every ? truncations_fail(f, all, n_all, &tested) : truncations_fail(f, cuts, k, &tested);
		CHECK(bad == 0 && tested >= (every ? 4096 : 200),
		      "gguf_rejects_truncated_file: %s: %d of %d cuts did not fail with an offset <= the cut", f->name, bad,
		      tested);
		total += tested;
		free(all);
		free(cuts);
	}
	if (getenv("QC_TEST_VERBOSE"))
		printf("gguf truncation: %ld cuts over %d files\n", total, n);
	/* the checker can fail: the whole file is not a truncation */
	const struct fixture *f = fixture_named(fx, n, "stories260K.gguf");
	if (f)
		CHECK(!gguf_fails_q("uncut", f->name, f->buf, f->len, QC_EFORMAT, (int64_t)f->len, OFF_AT_MOST, NULL,
				    true), "gguf_truncation_checker_passes_whole_file");
}

static void gguf_rejects_bad_header(const struct fixture *f)
{
	uint8_t *p = dup_bytes(f->buf, f->len);
	const char *nm = f->name;
	p[3] = 'X';
	CHECK(gguf_fails("magic GGUX", nm, p, f->len, QC_EFORMAT, 0, ""), "gguf_rejects_bad_magic");
	p[3] = 'F';
	static const uint32_t bad_versions[] = { 0, 4, 0x03000000u, 0xffffffffu };
	for (size_t i = 0; i < sizeof bad_versions / sizeof bad_versions[0]; i++) {
		set_le(p + 4, bad_versions[i], 4);
		char what[64];
		snprintf(what, sizeof what, "version 0x%x", bad_versions[i]);
		CHECK(gguf_fails(what, nm, p, f->len, QC_EUNSUPPORTED, 4, ""), "gguf_rejects_unknown_version 0x%x",
		      bad_versions[i]);
	}
	set_le(p + 4, 0x03000000u, 4);
	struct qc_err err = {0};
	struct qc_gguf *g = NULL;
	qc_gguf_open_mem(p, f->len, nm, &g, &err);
	CHECK(strstr(err.msg, "big-endian") != NULL, "gguf_names_big_endian_version: %s", err.msg);
	qc_gguf_close(g);
	set_le(p + 4, 2, 4); /* v2 and v3 share the little-endian layout */
	CHECK(gguf_opens("version 2", nm, p, f->len), "gguf_accepts_v3_file_relabelled_v2");
	set_le(p + 4, f->w.version, 4);

	static const uint64_t absurd[] = { 1ull << 40, 1ull << 63, UINT64_MAX };
	for (size_t i = 0; i < sizeof absurd / sizeof absurd[0]; i++) {
		set_le(p + 8, absurd[i], 8);
		CHECK(gguf_fails("n_tensors absurd", nm, p, f->len, QC_EFORMAT, 8, ""),
		      "gguf_rejects_absurd_tensor_count %llu", (unsigned long long)absurd[i]);
		set_le(p + 8, f->w.n_tensors, 8);
		set_le(p + 16, absurd[i], 8);
		struct qc_err e2 = {0};
		int rc = qc_gguf_open_mem(p, f->len, nm, &g, &e2);
		/* the reader names the start of the two counts (8) or the KV count itself (16) */
		CHECK(rc == QC_EFORMAT && (e2.off == 8 || e2.off == 16) && strcmp(e2.path, nm) == 0,
		      "gguf_rejects_absurd_kv_count %llu: rc %d off %lld: %s", (unsigned long long)absurd[i], rc,
		      (long long)e2.off, e2.msg);
		qc_gguf_close(g);
		set_le(p + 16, f->w.n_kv, 8);
	}
	CHECK(gguf_opens("counts restored", nm, p, f->len), "gguf_header_checks_pass_intact_header");
	free(p);
}

static void gguf_rejects_bad_kv(const struct fixture *f)
{
	const char *nm = f->name;
	uint8_t *p = dup_bytes(f->buf, f->len);
	const struct walk_kv *k0 = &f->w.kv[0];
	/* key length one past the bytes left */
	set_le(p + k0->off, f->len - (k0->off + 8) + 1, 8);
	CHECK(gguf_fails("key length past EOF", nm, p, f->len, QC_EFORMAT, (int64_t)k0->off, ""),
	      "gguf_rejects_key_length_past_eof");
	set_le(p + k0->off, 1ull << 63, 8);
	CHECK(gguf_fails("key length 2^63", nm, p, f->len, QC_EFORMAT, (int64_t)k0->off, ""),
	      "gguf_rejects_key_length_2e63");
	memcpy(p, f->buf, f->len);
	/* a string value's length past EOF */
	const struct walk_kv *arch = walk_find_kv(&f->w, "general.architecture");
	CHECK(arch && arch->type == QC_GGUF_STRING, "fixture %s has general.architecture", nm);
	if (arch) {
		set_le(p + arch->val_off, f->len, 8);
		CHECK(gguf_fails("string value length past EOF", nm, p, f->len, QC_EFORMAT, (int64_t)arch->val_off, ""),
		      "gguf_rejects_string_length_past_eof");
		memcpy(p, f->buf, f->len);
	}
	/* an invalid value type */
	set_le(p + k0->type_off, 13, 4);
	CHECK(gguf_fails("value type 13", nm, p, f->len, QC_EFORMAT, (int64_t)k0->type_off, ""),
	      "gguf_rejects_unknown_value_type");
	memcpy(p, f->buf, f->len);
	/* absurd array lengths: strings (min 8 bytes each) and f32 */
	const struct walk_kv *tok = walk_find_kv(&f->w, "tokenizer.ggml.tokens");
	const struct walk_kv *sc = walk_find_kv(&f->w, "tokenizer.ggml.scores");
	CHECK(tok && sc && tok->type == QC_GGUF_ARRAY && sc->type == QC_GGUF_ARRAY, "fixture %s has a vocab", nm);
	static const uint64_t absurd[] = { 1ull << 40, 1ull << 61, 1ull << 62, UINT64_MAX };
	for (size_t i = 0; tok && sc && i < sizeof absurd / sizeof absurd[0]; i++) {
		set_le(p + tok->val_off + 4, absurd[i], 8);
		CHECK(gguf_fails("string array length", nm, p, f->len, QC_EFORMAT, (int64_t)tok->val_off, ""),
		      "gguf_rejects_absurd_array_length strings %llu", (unsigned long long)absurd[i]);
		memcpy(p, f->buf, f->len);
		set_le(p + sc->val_off + 4, absurd[i], 8);
		CHECK(gguf_fails("f32 array length", nm, p, f->len, QC_EFORMAT, (int64_t)sc->val_off, ""),
		      "gguf_rejects_absurd_array_length f32 %llu", (unsigned long long)absurd[i]);
		memcpy(p, f->buf, f->len);
	}
	if (tok) {
		set_le(p + tok->val_off, 13, 4);
		CHECK(gguf_fails("array elem type 13", nm, p, f->len, QC_EFORMAT, (int64_t)tok->val_off, ""),
		      "gguf_rejects_unknown_array_element_type");
		memcpy(p, f->buf, f->len);
	}
	free(p);

	/* records appended to the KV section */
	struct blob kv = {0};
	struct rebuilt r;
	const char *flag = "qc.test.flag";
	uint64_t val_at = 8 + strlen(flag) + 4;
	for (unsigned v = 0; v < 4; v++) {
		kv.len = 0;
		put_str(&kv, flag, strlen(flag));
		put_le(&kv, QC_GGUF_BOOL, 4);
		put_le(&kv, v == 3 ? 0xff : v, 1);
		with_extra_kv(f, &kv, &r);
		if (v <= 1)
			CHECK(gguf_opens("bool 0/1", nm, r.b.p, r.b.len), "gguf_accepts_bool_%u", v);
		else
			CHECK(gguf_fails("bool value", nm, r.b.p, r.b.len, QC_EFORMAT, (int64_t)(r.extra_off + val_at), ""),
			      "gguf_rejects_bool_not_0_or_1 (%u)", v == 3 ? 0xff : v);
		blob_free(&r.b);
	}
	for (int bad = 0; bad < 2; bad++) {
		kv.len = 0;
		put_str(&kv, flag, strlen(flag));
		put_le(&kv, QC_GGUF_ARRAY, 4);
		put_le(&kv, QC_GGUF_BOOL, 4);
		put_le(&kv, 3, 8);
		put(&kv, bad ? "\1\0\2" : "\1\0\1", 3);
		with_extra_kv(f, &kv, &r);
		if (bad)
			CHECK(gguf_fails("bool array elem", nm, r.b.p, r.b.len, QC_EFORMAT,
					 (int64_t)(r.extra_off + val_at + 12 + 2), ""), "gguf_rejects_bool_array_element_2");
		else
			CHECK(gguf_opens("bool array", nm, r.b.p, r.b.len), "gguf_accepts_bool_array");
		blob_free(&r.b);
	}
	/* nesting: 8 array levels are allowed, the 9th header is rejected at its offset */
	for (int levels = 8; levels <= 9; levels++) {
		kv.len = 0;
		put_str(&kv, "qc.test.nested", 14);
		put_le(&kv, QC_GGUF_ARRAY, 4);
		for (int l = 0; l < levels - 1; l++) {
			put_le(&kv, QC_GGUF_ARRAY, 4);
			put_le(&kv, 1, 8);
		}
		put_le(&kv, QC_GGUF_UINT8, 4);
		put_le(&kv, 1, 8);
		put_le(&kv, 7, 1);
		with_extra_kv(f, &kv, &r);
		if (levels == 8) {
			CHECK(gguf_opens("8 nested arrays", nm, r.b.p, r.b.len), "gguf_accepts_arrays_nested_8_deep");
		} else {
			uint64_t at = r.extra_off + 8 + 14 + 4 + 8 * 12;
			CHECK(gguf_fails("9 nested arrays", nm, r.b.p, r.b.len, QC_EFORMAT, (int64_t)at, ""),
			      "gguf_rejects_arrays_nested_too_deep");
			struct qc_err err = {0};
			struct qc_gguf *g = NULL;
			qc_gguf_open_mem(r.b.p, r.b.len, nm, &g, &err);
			CHECK(strstr(err.msg, "nested") != NULL, "gguf_names_nesting_error: %s", err.msg);
			qc_gguf_close(g);
		}
		blob_free(&r.b);
	}
	/* a very deep nesting claim in few bytes must not recurse without bound */
	kv.len = 0;
	put_str(&kv, "qc.test.deep", 12);
	put_le(&kv, QC_GGUF_ARRAY, 4);
	for (int l = 0; l < 4000; l++) {
		put_le(&kv, QC_GGUF_ARRAY, 4);
		put_le(&kv, 1, 8);
	}
	with_extra_kv(f, &kv, &r);
	CHECK(gguf_fails("4000 nested arrays", nm, r.b.p, r.b.len, QC_EFORMAT, (int64_t)(r.extra_off + 8 + 12 + 4 + 8 * 12),
			 ""), "gguf_rejects_arrays_nested_4000_deep");
	blob_free(&r.b);
	/* duplicate key: the second occurrence is named */
	kv.len = 0;
	put_str(&kv, "general.architecture", 20);
	put_le(&kv, QC_GGUF_STRING, 4);
	put_str(&kv, "llama", 5);
	with_extra_kv(f, &kv, &r);
	CHECK(gguf_fails("duplicate key", nm, r.b.p, r.b.len, QC_EFORMAT, (int64_t)r.extra_off, ""),
	      "gguf_rejects_duplicate_key");
	blob_free(&r.b);
	kv.len = 0;
	put_str(&kv, "general.architecturf", 20);
	put_le(&kv, QC_GGUF_STRING, 4);
	put_str(&kv, "llama", 5);
	with_extra_kv(f, &kv, &r);
	CHECK(gguf_opens("near-duplicate key", nm, r.b.p, r.b.len), "gguf_accepts_distinct_similar_key");
	blob_free(&r.b);
	/* general.alignment: u32 power of two only */
	struct { uint32_t type; uint64_t v; bool ok; } al[] = {
		{ QC_GGUF_UINT32, 32, true }, { QC_GGUF_UINT32, 48, false }, { QC_GGUF_UINT32, 0, false },
		{ QC_GGUF_UINT32, 0x80000001u, false }, { QC_GGUF_UINT64, 32, false }, { QC_GGUF_INT32, 32, false },
		{ QC_GGUF_STRING, 32, false },
	};
	for (size_t i = 0; i < sizeof al / sizeof al[0]; i++) {
		kv.len = 0;
		put_str(&kv, "general.alignment", 17);
		put_le(&kv, al[i].type, 4);
		if (al[i].type == QC_GGUF_STRING)
			put_str(&kv, "32", 2);
		else
			put_le(&kv, al[i].v, (int)qc_gguf_vtype_size(al[i].type));
		with_extra_kv(f, &kv, &r);
		if (al[i].ok)
			CHECK(gguf_opens("alignment 32", nm, r.b.p, r.b.len), "gguf_accepts_general_alignment_32");
		else
			CHECK(gguf_fails("alignment", nm, r.b.p, r.b.len, QC_EFORMAT, (int64_t)r.extra_off, ""),
			      "gguf_rejects_bad_general_alignment (%s %llu)", qc_gguf_vtype_name(al[i].type),
			      (unsigned long long)al[i].v);
		blob_free(&r.b);
	}
	blob_free(&kv);
}

static void gguf_rejects_bad_tensor_info(const struct fixture *f)
{
	const char *nm = f->name;
	uint8_t *p = dup_bytes(f->buf, f->len);
	const struct walk_tensor *te = walk_find_tensor(&f->w, "token_embd.weight");
	const struct walk_tensor *fd = walk_find_tensor(&f->w, "blk.0.ffn_down.weight");
	CHECK(te && fd && te->n_dims == 2 && te->type == QC_TYPE_F32 && fd->ne[0] % 32 != 0,
	      "fixture %s has f32 token_embd.weight and ffn_down rows of 172", nm);
	if (!te || !fd || te->n_dims != 2) {
		free(p);
		return;
	}
	const char *tn = te->name;
	/* name length past EOF, and a 64-byte name read in place */
	set_le(p + te->off, 1ull << 62, 8);
	CHECK(gguf_fails("tensor name length", nm, p, f->len, QC_EFORMAT, (int64_t)te->off, ""),
	      "gguf_rejects_tensor_name_length_past_eof");
	set_le(p + te->off, 64, 8);
	CHECK(gguf_fails("tensor name 64 bytes in place", nm, p, f->len, QC_EFORMAT, (int64_t)te->off, ""),
	      "gguf_rejects_tensor_name_64_bytes_in_place");
	memcpy(p, f->buf, f->len);
	/* n_dims */
	static const uint32_t bad_nd[] = { 5, 0xffffffffu };
	for (size_t i = 0; i < 2; i++) {
		set_le(p + te->ndims_off, bad_nd[i], 4);
		CHECK(gguf_fails("n_dims", nm, p, f->len, QC_EFORMAT, (int64_t)te->ndims_off, tn), "gguf_rejects_n_dims %u",
		      bad_nd[i]);
	}
	memcpy(p, f->buf, f->len);
	/* dimensions: product past INT64_MAX, wrap-around, negative */
	struct { uint64_t ne0, ne1; int bad_dim; const char *what; } dims[] = {
		{ 1ull << 32, 1ull << 31, 1, "product 2^63" },
		{ 1ull << 62, 4, 1, "product wraps to 0" },
		{ 1ull << 32, 1ull << 32, 1, "product 2^64" },
		{ 64, (uint64_t)-1, 1, "ne1 = -1" },
		{ 1ull << 63, 512, 0, "ne0 = INT64_MIN" },
		{ 512, 64, -1, "swapped, valid" },
	};
	for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
		set_le(p + te->dims_off, dims[i].ne0, 8);
		set_le(p + te->dims_off + 8, dims[i].ne1, 8);
		if (dims[i].bad_dim < 0)
			CHECK(gguf_opens(dims[i].what, nm, p, f->len), "gguf_accepts_dims_%s", dims[i].what);
		else
			CHECK(gguf_fails(dims[i].what, nm, p, f->len, QC_EFORMAT, (int64_t)(te->dims_off + 8 * (uint64_t)dims[i].bad_dim),
					 tn), "gguf_rejects_bad_dimension (%s)", dims[i].what);
	}
	memcpy(p, f->buf, f->len);
	/* type ids */
	static const uint32_t bad_types[] = { 4, 5, 31, 36, 40, 99, 1u << 31, 0xffffffffu };
	for (size_t i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++) {
		set_le(p + te->type_off, bad_types[i], 4);
		CHECK(gguf_fails("type id", nm, p, f->len, QC_EFORMAT, (int64_t)te->type_off, tn),
		      "gguf_rejects_unknown_type_id %u", bad_types[i]);
	}
	set_le(p + te->type_off, QC_TYPE_F16, 4);
	CHECK(gguf_opens("f32 -> f16", nm, p, f->len), "gguf_accepts_known_type_id");
	memcpy(p, f->buf, f->len);
	/* rows not a multiple of the block size: ffn_down (ne0 172) as q8_0 */
	set_le(p + fd->type_off, QC_TYPE_Q8_0, 4);
	CHECK(gguf_fails("172-wide rows as q8_0", nm, p, f->len, QC_EFORMAT, (int64_t)fd->off, fd->name),
	      "gguf_rejects_rows_not_multiple_of_block");
	memcpy(p, f->buf, f->len);
	set_le(p + te->type_off, QC_TYPE_Q8_0, 4);
	CHECK(gguf_opens("64-wide rows as q8_0", nm, p, f->len), "gguf_accepts_rows_multiple_of_block");
	memcpy(p, f->buf, f->len);
	/* data offsets */
	set_le(p + te->offset_off, te->rel + 1, 8);
	CHECK(gguf_fails("offset + 1", nm, p, f->len, QC_EFORMAT, (int64_t)te->offset_off, tn),
	      "gguf_rejects_unaligned_tensor_offset (+1)");
	set_le(p + te->offset_off, te->rel + 16, 8);
	CHECK(gguf_fails("offset + 16", nm, p, f->len, QC_EFORMAT, (int64_t)te->offset_off, tn),
	      "gguf_rejects_unaligned_tensor_offset (+16)");
	static const uint64_t far[] = { 1ull << 40, UINT64_MAX - 31, (1ull << 63) };
	for (size_t i = 0; i < sizeof far / sizeof far[0]; i++) {
		set_le(p + te->offset_off, far[i], 8);
		CHECK(gguf_fails("offset past end", nm, p, f->len, QC_EFORMAT, (int64_t)te->off, tn),
		      "gguf_rejects_offset_past_end %llu", (unsigned long long)far[i]);
	}
	memcpy(p, f->buf, f->len);
	/* the tensor whose data ends at EOF, moved by one alignment unit */
	const struct walk_tensor *last = &f->w.t[0];
	for (uint64_t i = 1; i < f->w.n_tensors; i++)
		if (f->w.t[i].rel > last->rel)
			last = &f->w.t[i];
	set_le(p + last->offset_off, last->rel + f->w.align, 8);
	CHECK(gguf_fails("last tensor + align", nm, p, f->len, QC_EFORMAT, (int64_t)last->off, last->name),
	      "gguf_rejects_data_one_alignment_past_eof");
	memcpy(p, f->buf, f->len);
	/* overlap: the tensor after token_embd moved one alignment unit into it */
	const struct walk_tensor *t1 = &f->w.t[1];
	CHECK(t1->rel > te->rel, "fixture order");
	set_le(p + t1->offset_off, te->rel + f->w.align, 8);
	CHECK(gguf_fails("overlap", nm, p, f->len, QC_EFORMAT, (int64_t)t1->off, t1->name), "gguf_rejects_overlapping_tensors");
	memcpy(p, f->buf, f->len);
	/* a name changed in place stays unique: valid */
	p[t1->off + 8 + strlen(t1->name) - 1] ^= 0x20;
	CHECK(gguf_opens("renamed in place", nm, p, f->len), "gguf_accepts_unique_names");
	free(p);

	/* rebuilt records */
	struct blob rec = {0};
	struct rebuilt r;
	uint64_t idx_te = (uint64_t)(te - f->w.t);
	char name[80];
	for (int L = 63; L <= 64; L++) {
		memset(name, 'a', sizeof name);
		rec.len = 0;
		tensor_rec(&rec, name, (size_t)L, te->n_dims, te->ne, te->type, te->rel);
		with_tensor_rec(f, (int64_t)idx_te, &rec, &r);
		if (L == 63)
			CHECK(gguf_opens("63-byte name", nm, r.b.p, r.b.len), "gguf_accepts_tensor_name_63_bytes");
		else
			CHECK(gguf_fails("64-byte name", nm, r.b.p, r.b.len, QC_EFORMAT,
					 (int64_t)rebuilt_tensor_off(f, &r, idx_te), ""), "gguf_rejects_tensor_name_64_bytes");
		blob_free(&r.b);
	}
	rec.len = 0;
	tensor_rec(&rec, "tok\0embd", 8, te->n_dims, te->ne, te->type, te->rel);
	with_tensor_rec(f, (int64_t)idx_te, &rec, &r);
	CHECK(gguf_fails("NUL in name", nm, r.b.p, r.b.len, QC_EFORMAT, (int64_t)rebuilt_tensor_off(f, &r, idx_te), ""),
	      "gguf_rejects_nul_in_tensor_name");
	blob_free(&r.b);
	/* n_dims 4 (trailing 1s) is valid; 5 is not */
	uint64_t ne5[5] = { te->ne[0], te->ne[1], 1, 1, 1 };
	for (uint32_t nd = 4; nd <= 5; nd++) {
		rec.len = 0;
		tensor_rec(&rec, tn, strlen(tn), nd, ne5, te->type, te->rel);
		with_tensor_rec(f, (int64_t)idx_te, &rec, &r);
		uint64_t at = rebuilt_tensor_off(f, &r, idx_te) + 8 + strlen(tn);
		if (nd == 4)
			CHECK(gguf_opens("n_dims 4", nm, r.b.p, r.b.len), "gguf_accepts_n_dims_4");
		else
			CHECK(gguf_fails("n_dims 5", nm, r.b.p, r.b.len, QC_EFORMAT, (int64_t)at, tn), "gguf_rejects_n_dims_5");
		blob_free(&r.b);
	}
	/* duplicate name: tensor 1 renamed to tensor 0's name; the later record is named */
	const struct walk_tensor *t0 = &f->w.t[0];
	rec.len = 0;
	tensor_rec(&rec, t0->name, strlen(t0->name), t1->n_dims, t1->ne, t1->type, t1->rel);
	with_tensor_rec(f, 1, &rec, &r);
	CHECK(gguf_fails("duplicate tensor", nm, r.b.p, r.b.len, QC_EFORMAT, (int64_t)(r.info_off + (t0->end - t0->off)),
			 t0->name), "gguf_rejects_duplicate_tensor_name");
	blob_free(&r.b);
	blob_free(&rec);
}

/* The real llama.cpp-era file whose ffn_down rows (172) are not q8_0-block aligned. */
static void gguf_rejects_real_unaligned_q8_0(const struct fixture *fx, int n)
{
	const struct fixture *f = fixture_named(fx, n, "tinyllamas-stories-260k-q8_0.gguf");
	CHECK(f != NULL, "fixture tinyllamas-stories-260k-q8_0.gguf present");
	if (!f)
		return;
	const struct walk_tensor *t = walk_find_tensor(&f->w, "blk.0.ffn_down.weight");
	CHECK(t && t->type == QC_TYPE_Q8_0 && t->ne[0] == 172, "walker finds q8_0 blk.0.ffn_down.weight [172, ...]");
	if (t)
		CHECK(gguf_fails("real q8_0 file", f->name, f->buf, f->len, QC_EFORMAT, (int64_t)t->off, t->name),
		      "gguf_rejects_real_file_with_unaligned_q8_0_rows");
	const struct fixture *ok = fixture_named(fx, n, "tiny-llama-256-Q8_0.gguf");
	if (ok)
		CHECK(gguf_opens("aligned q8_0", ok->name, ok->buf, ok->len), "gguf_accepts_aligned_q8_0_rows");
}

int main(void)
{
	struct fixture *fx = NULL;
	const bool have_fx = check_have_fixtures("test_bad_gguf");
	int n = have_fx ? load_fixtures(&fx) : 0;
	CHECK(!have_fx || n >= 20, "found %d GGUF fixtures under %s", n, check_fixtures());
	const struct fixture *st = fixture_named(fx, n, "stories260K.gguf");
	const struct fixture *v2 = fixture_named(fx, n, "tinyllamas-stories-260k-q8_0.gguf");

	gguf_reader_offsets_match_independent_walker(fx, n);
	gguf_rejects_truncated_files(fx, n);
	if (st) {
		gguf_rejects_bad_header(st);
		gguf_rejects_bad_kv(st);
		gguf_rejects_bad_tensor_info(st);
	}
	if (v2) {
		uint8_t *p = dup_bytes(v2->buf, v2->len);
		set_le(p + 8, 1ull << 63, 8);
		CHECK(gguf_fails("v2 absurd tensor count", v2->name, p, v2->len, QC_EFORMAT, 8, ""),
		      "gguf_v2_rejects_absurd_tensor_count");
		free(p);
	}
	if (have_fx)
		gguf_rejects_real_unaligned_q8_0(fx, n);

	for (int i = 0; i < n; i++) {
		free(fx[i].buf);
		walk_free(&fx[i].w);
	}
	free(fx);
	return check_report("test_bad_gguf");
}
