/* test_bad_input.c — hostile input is rejected with a full qc_err, never a crash.
 *
 * Every bad input is a real fixture (gguf/, gguf-quant/) or a bundle made from one by
 * the CLI, patched in memory; fixtures are never written. Expected offsets come from
 * walk_gguf() below, a small independent GGUF walker, and from where this file put
 * the bytes it changed — never from the reader under test. Each check is named after
 * the behaviour it asserts and has a valid near-miss input that must pass, so every
 * checker can fail. Covers: GGUF reader (truncation of every fixture, header, KV,
 * tensor-info corruption), bundle reader (truncation, header/manifest/data damage,
 * valid-JSON-but-wrong manifests) and the qconvert CLI (exit codes, messages, no
 * output or temp files left behind). Runs in seconds, also under ASan.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <archive.h>
#include <archive_entry.h>
#include <cjson/cJSON.h>

#include "../tests/check.h"
#include "bundle.h"
#include "gguf.h"
#include "model.h"
#include "tar.h"

extern char **environ;

/* ---- byte buffers ------------------------------------------------------------ */

struct blob {
	uint8_t *p;
	size_t len, cap;
};

static void put(struct blob *b, const void *src, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n)
			cap *= 2;
		uint8_t *p = realloc(b->p, cap);
		if (!p) {
			fprintf(stderr, "test_bad_input: out of memory\n");
			exit(1);
		}
		b->p = p;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->len, src, n);
	b->len += n;
}

static void put_le(struct blob *b, uint64_t v, int n)
{
	uint8_t t[8];
	for (int i = 0; i < n; i++)
		t[i] = (uint8_t)(v >> (8 * i));
	put(b, t, (size_t)n);
}

static void put_str(struct blob *b, const char *s, size_t n)
{
	put_le(b, n, 8);
	put(b, s, n);
}

static void put_zeros(struct blob *b, size_t n)
{
	static const uint8_t z[512];
	while (n) {
		size_t k = n < sizeof z ? n : sizeof z;
		put(b, z, k);
		n -= k;
	}
}

static void blob_free(struct blob *b)
{
	free(b->p);
	*b = (struct blob){0};
}

static void set_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	struct blob b = {0};
	uint8_t tmp[65536];
	size_t n;
	while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
		put(&b, tmp, n);
	fclose(f);
	*len = b.len;
	if (!b.p)
		put(&b, "", 1);
	return b.p;
}

static bool spit(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return false;
	bool ok = fwrite(p, 1, n, f) == n;
	return fclose(f) == 0 && ok;
}

static uint8_t *dup_bytes(const uint8_t *p, size_t n)
{
	uint8_t *d = malloc(n ? n : 1);
	if (!d) {
		fprintf(stderr, "test_bad_input: out of memory\n");
		exit(1);
	}
	memcpy(d, p, n);
	return d;
}

/* ---- an independent GGUF v2/v3 walker (intact files only) -------------------- */

#define WALK_MAX_DIMS 4

struct walk_kv {
	uint64_t off;      /* record start: key length */
	uint64_t type_off; /* value type field */
	uint64_t val_off;  /* value */
	uint32_t type;
	char key[96];
};

struct walk_tensor {
	uint64_t off;      /* record start: name length */
	uint64_t ndims_off, dims_off, type_off, offset_off, end;
	char name[96];
	uint32_t n_dims;
	uint64_t ne[WALK_MAX_DIMS];
	uint32_t type;
	uint64_t rel;      /* offset relative to the data section */
};

struct walk {
	uint32_t version;
	uint64_t n_kv, n_tensors;
	struct walk_kv *kv;
	struct walk_tensor *t;
	uint64_t kv_end, info_end, data_off;
	uint32_t align;
};

struct rd {
	const uint8_t *p;
	uint64_t len, off;
	bool ok;
};

static uint64_t rd_u(struct rd *r, int n)
{
	if (!r->ok || r->len - r->off < (uint64_t)n) {
		r->ok = false;
		return 0;
	}
	uint64_t v = get_le(r->p + r->off, n);
	r->off += (uint64_t)n;
	return v;
}

static void rd_skip(struct rd *r, uint64_t n)
{
	if (!r->ok || r->len - r->off < n)
		r->ok = false;
	else
		r->off += n;
}

/* GGUF spec value sizes: u8 i8 u16 i16 u32 i32 f32 bool str arr u64 i64 f64 */
static const unsigned spec_vsize[13] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };

static void rd_value(struct rd *r, uint32_t t, int depth)
{
	if (t > 12 || depth > 16) {
		r->ok = false;
	} else if (t == 8) {
		rd_skip(r, rd_u(r, 8));
	} else if (t == 9) {
		uint32_t et = (uint32_t)rd_u(r, 4);
		uint64_t n = rd_u(r, 8);
		if (et > 12) {
			r->ok = false;
		} else if (spec_vsize[et]) {
			if (n > r->len / spec_vsize[et])
				r->ok = false;
			else
				rd_skip(r, n * spec_vsize[et]);
		} else {
			for (uint64_t i = 0; r->ok && i < n; i++)
				rd_value(r, et, depth + 1);
		}
	} else {
		rd_skip(r, spec_vsize[t]);
	}
}

static void walk_free(struct walk *w)
{
	free(w->kv);
	free(w->t);
	*w = (struct walk){0};
}

static bool walk_gguf(const uint8_t *p, size_t len, struct walk *w)
{
	struct rd r = { p, len, 0, true };
	*w = (struct walk){0};
	if (len < 24 || memcmp(p, "GGUF", 4) != 0)
		return false;
	r.off = 4;
	w->version = (uint32_t)rd_u(&r, 4);
	if (w->version != 2 && w->version != 3)
		return false;
	w->n_tensors = rd_u(&r, 8);
	w->n_kv = rd_u(&r, 8);
	if (w->n_kv > len / 13 || w->n_tensors > len / 24)
		return false;
	w->kv = calloc((size_t)w->n_kv + 1, sizeof(*w->kv));
	w->t = calloc((size_t)w->n_tensors + 1, sizeof(*w->t));
	if (!w->kv || !w->t)
		goto fail;
	w->align = 32;
	for (uint64_t i = 0; r.ok && i < w->n_kv; i++) {
		struct walk_kv *kv = &w->kv[i];
		kv->off = r.off;
		uint64_t kl = rd_u(&r, 8);
		if (!r.ok || kl > r.len - r.off)
			goto fail;
		snprintf(kv->key, sizeof kv->key, "%.*s", (int)kl, (const char *)p + r.off);
		r.off += kl;
		kv->type_off = r.off;
		kv->type = (uint32_t)rd_u(&r, 4);
		kv->val_off = r.off;
		rd_value(&r, kv->type, 0);
		if (r.ok && strcmp(kv->key, "general.alignment") == 0 && kv->type == 4)
			w->align = (uint32_t)get_le(p + kv->val_off, 4);
	}
	w->kv_end = r.off;
	for (uint64_t i = 0; r.ok && i < w->n_tensors; i++) {
		struct walk_tensor *t = &w->t[i];
		t->off = r.off;
		uint64_t nl = rd_u(&r, 8);
		if (!r.ok || nl > r.len - r.off || nl >= sizeof t->name)
			goto fail;
		memcpy(t->name, p + r.off, nl);
		r.off += nl;
		t->ndims_off = r.off;
		t->n_dims = (uint32_t)rd_u(&r, 4);
		if (t->n_dims > WALK_MAX_DIMS)
			goto fail;
		t->dims_off = r.off;
		for (uint32_t d = 0; d < t->n_dims; d++)
			t->ne[d] = rd_u(&r, 8);
		t->type_off = r.off;
		t->type = (uint32_t)rd_u(&r, 4);
		t->offset_off = r.off;
		t->rel = rd_u(&r, 8);
		t->end = r.off;
	}
	if (!r.ok)
		goto fail;
	w->info_end = r.off;
	w->data_off = (w->info_end + w->align - 1) / w->align * w->align;
	return true;
fail:
	walk_free(w);
	return false;
}

static const struct walk_kv *walk_find_kv(const struct walk *w, const char *key)
{
	for (uint64_t i = 0; i < w->n_kv; i++)
		if (strcmp(w->kv[i].key, key) == 0)
			return &w->kv[i];
	return NULL;
}

static const struct walk_tensor *walk_find_tensor(const struct walk *w, const char *name)
{
	for (uint64_t i = 0; i < w->n_tensors; i++)
		if (strcmp(w->t[i].name, name) == 0)
			return &w->t[i];
	return NULL;
}

/* ---- fixtures ------------------------------------------------------------------ */

struct fixture {
	char path[1024];
	char name[256];    /* base name, used as the in-memory file's name */
	uint8_t *buf;
	size_t len;
	struct walk w;
};

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

/* ---- expectations ---------------------------------------------------------------- */

enum off_rule { OFF_EXACT, OFF_AT_MOST };

/* true when err says code, path, tensor ("" = none expected, NULL = don't care) and
 * offset (exact, or within [0, off]); the formatted message must show all of them. */
static bool err_matches(const char *what, int rc, const struct qc_err *err, const char *path, int code,
			int64_t off, enum off_rule rule, const char *tensor, bool quiet)
{
	char msg[2 * QC_ERR_MSG_MAX + 64], want_off[64], want_t[QC_ERR_NAME_MAX + 16];
	qc_err_format(err, msg, sizeof msg);
	bool off_ok = rule == OFF_EXACT ? err->off == off : (err->off >= 0 && err->off <= off);
	snprintf(want_off, sizeof want_off, "offset 0x%llx", (unsigned long long)err->off);
	bool ok = rc == code && err->code == code && off_ok && strcmp(err->path, path) == 0 &&
		  strstr(msg, path) && strstr(msg, want_off) && err->msg[0];
	if (tensor) {
		snprintf(want_t, sizeof want_t, "tensor '%s'", tensor);
		ok = ok && strcmp(err->tensor, tensor) == 0 && (!tensor[0] || strstr(msg, want_t));
	}
	if (!ok && !quiet)
		fprintf(stderr, "  %s: want %s at offset %s%lld%s%s%s; got rc %d (%s): %s\n", what, qc_status_name(code),
			rule == OFF_AT_MOST ? "<= " : "", (long long)off, tensor && tensor[0] ? " naming '" : "",
			tensor && tensor[0] ? tensor : "", tensor && tensor[0] ? "'" : "", rc, qc_status_name(rc), msg);
	return ok;
}

static bool gguf_fails_q(const char *what, const char *name, const uint8_t *p, size_t len, int code, int64_t off,
			 enum off_rule rule, const char *tensor, bool quiet)
{
	struct qc_err err = {0};
	struct qc_gguf *g = (struct qc_gguf *)1;
	int rc = qc_gguf_open_mem(p, len, name, &g, &err);
	bool ok = err_matches(what, rc, &err, name, code, off, rule, tensor, quiet) && g == NULL;
	qc_gguf_close(rc ? NULL : g);
	return ok;
}

static bool gguf_fails(const char *what, const char *name, const uint8_t *p, size_t len, int code, int64_t off,
		       const char *tensor)
{
	return gguf_fails_q(what, name, p, len, code, off, OFF_EXACT, tensor, false);
}

static bool gguf_opens(const char *what, const char *name, const uint8_t *p, size_t len)
{
	struct qc_err err = {0};
	struct qc_gguf *g = NULL;
	int rc = qc_gguf_open_mem(p, len, name, &g, &err);
	if (rc) {
		char msg[2 * QC_ERR_MSG_MAX + 64];
		qc_err_format(&err, msg, sizeof msg);
		fprintf(stderr, "  %s: valid input rejected: %s\n", what, msg);
	}
	qc_gguf_close(g);
	return rc == QC_OK;
}

/* ---- rebuilding a GGUF with edits --------------------------------------------------
 * header + original KV records + extra KV records + a tensor-info section given by the
 * caller + padding to the alignment + the original data section. Tensor offsets are
 * relative to the data section, so any change of header length keeps them valid. */

struct rebuilt {
	struct blob b;
	uint64_t extra_off;  /* where the extra KV records start */
	uint64_t info_off;   /* where the tensor-info section starts */
};

static void gguf_rebuild(const struct fixture *f, const struct blob *extra, uint64_t n_extra, const struct blob *infos,
			 uint64_t n_tensors, uint32_t align, struct rebuilt *out)
{
	const struct walk *w = &f->w;
	struct blob *b = &out->b;
	*out = (struct rebuilt){0};
	put(b, f->buf, 8);
	put_le(b, n_tensors, 8);
	put_le(b, w->n_kv + n_extra, 8);
	put(b, f->buf + 24, (size_t)(w->kv_end - 24));
	out->extra_off = b->len;
	if (extra)
		put(b, extra->p, extra->len);
	out->info_off = b->len;
	put(b, infos->p, infos->len);
	put_zeros(b, (size_t)((align - b->len % align) % align));
	put(b, f->buf + w->data_off, f->len - (size_t)w->data_off);
}

/* The original tensor-info records, with record `idx` replaced by rep (idx < 0: none). */
static void infos_with(const struct fixture *f, int64_t idx, const struct blob *rep, struct blob *out)
{
	*out = (struct blob){0};
	for (uint64_t i = 0; i < f->w.n_tensors; i++) {
		const struct walk_tensor *t = &f->w.t[i];
		if ((int64_t)i == idx)
			put(out, rep->p, rep->len);
		else
			put(out, f->buf + t->off, (size_t)(t->end - t->off));
	}
}

static void tensor_rec(struct blob *b, const char *name, size_t name_len, uint32_t n_dims, const uint64_t *ne,
		       uint32_t type, uint64_t rel)
{
	put_str(b, name, name_len);
	put_le(b, n_dims, 4);
	for (uint32_t d = 0; d < n_dims; d++)
		put_le(b, ne[d], 8);
	put_le(b, type, 4);
	put_le(b, rel, 8);
}

/* Rebuild f with one extra KV record (bytes in kv); *rec_off = where it landed. */
static void with_extra_kv(const struct fixture *f, const struct blob *kv, struct rebuilt *out)
{
	struct blob infos;
	infos_with(f, -1, NULL, &infos);
	gguf_rebuild(f, kv, 1, &infos, f->w.n_tensors, f->w.align, out);
	blob_free(&infos);
}

/* Rebuild f with tensor idx's record replaced. */
static void with_tensor_rec(const struct fixture *f, int64_t idx, const struct blob *rec, struct rebuilt *out)
{
	struct blob infos;
	infos_with(f, idx, rec, &infos);
	gguf_rebuild(f, NULL, 0, &infos, f->w.n_tensors, f->w.align, out);
	blob_free(&infos);
}

static uint64_t rebuilt_tensor_off(const struct fixture *f, const struct rebuilt *r, uint64_t idx)
{
	return r->info_off + (f->w.t[idx].off - f->w.t[0].off);
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

/* ---- bundles ------------------------------------------------------------------------- */

static bool bundle_fails_q(const char *what, const char *name, const uint8_t *p, size_t len, int code, int64_t off,
			   enum off_rule rule, const char *tensor, bool quiet)
{
	struct qc_err err = {0};
	struct qc_bundle *b = (struct qc_bundle *)1;
	int rc = qc_bundle_open_mem(p, len, name, &b, &err);
	bool ok = err_matches(what, rc, &err, name, code, off, rule, tensor, quiet) && b == NULL;
	qc_bundle_close(rc ? NULL : b);
	return ok;
}

static bool bundle_fails(const char *what, const char *name, const uint8_t *p, size_t len, int code, int64_t off,
			 const char *tensor)
{
	return bundle_fails_q(what, name, p, len, code, off, OFF_EXACT, tensor, false);
}

static bool bundle_opens(const char *what, const char *name, const uint8_t *p, size_t len)
{
	struct qc_err err = {0};
	struct qc_bundle *b = NULL;
	int rc = qc_bundle_open_mem(p, len, name, &b, &err);
	if (rc) {
		char msg[2 * QC_ERR_MSG_MAX + 64];
		qc_err_format(&err, msg, sizeof msg);
		fprintf(stderr, "  %s: valid bundle rejected: %s\n", what, msg);
	}
	qc_bundle_close(b);
	return rc == QC_OK;
}

#define HDR QC_TAR_BLOCK /* the bundle header's file offset */

static void bundle_rehash(uint8_t *p)
{
	set_le(p + HDR + 48, XXH3_64bits(p + HDR, 48), 8);
}

/* The bundle with its manifest replaced by json: same member order, new manifest
 * member header, size, hashes and file size (as the writer lays them out). */
static void bundle_with_manifest(const uint8_t *src, const char *json, struct blob *out)
{
	uint64_t moff = get_le(src + HDR + 16, 8), mlen = strlen(json);
	uint8_t th[QC_TAR_BLOCK];
	*out = (struct blob){0};
	put(out, src, (size_t)(moff - QC_TAR_BLOCK));
	qc_tar_file_header(th, "manifest.json", mlen);
	put(out, th, sizeof th);
	put(out, json, (size_t)mlen);
	put_zeros(out, (size_t)((QC_TAR_BLOCK - mlen % QC_TAR_BLOCK) % QC_TAR_BLOCK + 2 * QC_TAR_BLOCK));
	set_le(out->p + HDR + 24, mlen, 8);
	set_le(out->p + HDR + 32, XXH3_64bits(json, (size_t)mlen), 8);
	set_le(out->p + HDR + 40, out->len, 8);
	bundle_rehash(out->p);
}

static cJSON *bundle_manifest(const uint8_t *p)
{
	uint64_t moff = get_le(p + HDR + 16, 8), mlen = get_le(p + HDR + 24, 8);
	return cJSON_ParseWithLength((const char *)p + moff, (size_t)mlen);
}

static cJSON *manifest_tensor(cJSON *m, int i)
{
	return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(m, "tensors"), i);
}

static void set_num(cJSON *o, const char *key, double v)
{
	cJSON_ReplaceItemInObjectCaseSensitive(o, key, cJSON_CreateNumber(v));
}

static void set_str(cJSON *o, const char *key, const char *v)
{
	cJSON_ReplaceItemInObjectCaseSensitive(o, key, cJSON_CreateString(v));
}

static double num(const cJSON *o, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(o, key)->valuedouble;
}

enum mf_edit {
	MF_NONE, MF_MISALIGN, MF_SIZE, MF_OVERLAP, MF_PAST_MANIFEST, MF_TYPE, MF_LAYOUT, MF_LAYOUT_ID, MF_DUP_NAME,
	MF_NEG_DIM, MF_FIVE_DIMS, MF_BAD_HASH, MF_NO_TENSORS_KEY, MF_COUNT
};

/* The first aligned offset at or after the manifest's start. */
static uint64_t past_manifest(const uint8_t *p)
{
	uint64_t moff = get_le(p + HDR + 16, 8);
	return (moff + QC_BUNDLE_ALIGN - 1) / QC_BUNDLE_ALIGN * QC_BUNDLE_ALIGN;
}

/* Apply one edit to tensor 1 of the manifest; returns the edited bundle. */
static void manifest_edit(const uint8_t *src, enum mf_edit e, struct blob *out)
{
	cJSON *m = bundle_manifest(src);
	cJSON *t0 = manifest_tensor(m, 0), *t1 = manifest_tensor(m, 1);
	cJSON *enc = cJSON_GetObjectItemCaseSensitive(t1, "encoding");
	switch (e) {
	case MF_NONE: break;
	case MF_MISALIGN: set_num(t1, "offset", num(t1, "offset") + 512); break;
	case MF_SIZE: set_num(t1, "size", num(t1, "size") - 4); break;
	case MF_OVERLAP: set_num(t1, "offset", num(t0, "offset") + QC_BUNDLE_ALIGN); break;
	case MF_PAST_MANIFEST: set_num(t1, "offset", (double)past_manifest(src)); break;
	case MF_TYPE: set_str(enc, "type", "q9_9"); break;
	case MF_LAYOUT: set_str(enc, "layout", "marlin_v9"); break;
	case MF_LAYOUT_ID: set_num(enc, "layout_id", 7); break;
	case MF_DUP_NAME: set_str(t1, "name", cJSON_GetObjectItemCaseSensitive(t0, "name")->valuestring); break;
	case MF_NEG_DIM: cJSON_ReplaceItemInArray(cJSON_GetObjectItemCaseSensitive(t1, "ne"), 0, cJSON_CreateNumber(-64)); break;
	case MF_FIVE_DIMS: {
		cJSON *ne = cJSON_GetObjectItemCaseSensitive(t1, "ne");
		while (cJSON_GetArraySize(ne) < 5)
			cJSON_AddItemToArray(ne, cJSON_CreateNumber(1));
		break;
	}
	case MF_BAD_HASH: set_str(t1, "xxh3", "0123456789abcdeg"); break;
	case MF_NO_TENSORS_KEY: cJSON_DeleteItemFromObjectCaseSensitive(m, "tensors"); break;
	case MF_COUNT: break;
	}
	char *json = cJSON_PrintUnformatted(m);
	bundle_with_manifest(src, json, out);
	free(json);
	cJSON_Delete(m);
}

static void bundle_checks(const uint8_t *good, size_t len, const char *nm)
{
	CHECK(bundle_opens("converted bundle", nm, good, len), "bundle_opens_converted_bundle");
	uint64_t moff = get_le(good + HDR + 16, 8), mlen = get_le(good + HDR + 24, 8);
	/* truncation: every byte of the first 1.5 KB, ~300 spread, around the manifest */
	int bad = 0, n_cuts = 0;
	for (uint64_t L = 0; L < len; L = L < 1536 ? L + 1 : L + len / 300) {
		uint64_t cuts[4] = { L, 0, 0, 0 };
		int k = 1;
		if (L == 0) {
			cuts[k++] = moff - 1;
			cuts[k++] = moff + mlen / 2;
			cuts[k++] = len - 1;
		}
		for (int i = 0; i < k; i++) {
			uint8_t *p = dup_bytes(good, (size_t)cuts[i]);
			char what[64];
			snprintf(what, sizeof what, "bundle cut at %llu", (unsigned long long)cuts[i]);
			if (!bundle_fails_q(what, nm, p, (size_t)cuts[i], QC_EFORMAT, (int64_t)cuts[i], OFF_AT_MOST, NULL, bad >= 3))
				bad++;
			n_cuts++;
			free(p);
		}
	}
	CHECK(bad == 0 && n_cuts > 1800, "bundle_rejects_truncated_file: %d of %d cuts wrong", bad, n_cuts);
	CHECK(!bundle_fails_q("uncut", nm, good, len, QC_EFORMAT, (int64_t)len, OFF_AT_MOST, NULL, true),
	      "bundle_truncation_checker_passes_whole_file");

	uint8_t *p = dup_bytes(good, len);
	/* every byte of header bytes 0..55 flipped: magic -> not a bundle, major -> unsupported,
	 * the rest -> header checksum */
	bad = 0;
	for (int i = 0; i < 56; i++) {
		p[HDR + i] ^= 0x5a;
		int code = i < 8 ? QC_EFORMAT : i < 10 ? QC_EUNSUPPORTED : QC_ECHECKSUM;
		int64_t off = i < 8 ? 0 : i < 10 ? HDR + 8 : HDR;
		char what[64];
		snprintf(what, sizeof what, "header byte %d flipped", i);
		if (!bundle_fails_q(what, nm, p, len, code, off, OFF_EXACT, "", bad >= 3))
			bad++;
		p[HDR + i] ^= 0x5a;
	}
	CHECK(bad == 0, "bundle_rejects_flipped_header_bytes: %d wrong", bad);
	/* major 2 with a correct header hash: the version check fires */
	set_le(p + HDR + 8, 2, 2);
	bundle_rehash(p);
	CHECK(bundle_fails("major 2", nm, p, len, QC_EUNSUPPORTED, HDR + 8, ""), "bundle_rejects_unknown_major_version");
	set_le(p + HDR + 8, 0xffff, 2);
	bundle_rehash(p);
	CHECK(bundle_fails("major 65535", nm, p, len, QC_EUNSUPPORTED, HDR + 8, ""), "bundle_rejects_major_65535");
	set_le(p + HDR + 8, QC_BUNDLE_MAJOR, 2);
	set_le(p + HDR + 10, QC_BUNDLE_MINOR + 1, 2);
	bundle_rehash(p);
	CHECK(bundle_opens("newer minor", nm, p, len), "bundle_accepts_newer_minor_version");
	memcpy(p, good, len);
	/* rehashed but wrong header fields */
	set_le(p + HDR + 12, 4096 + 512, 4);
	bundle_rehash(p);
	CHECK(bundle_fails("alignment 4608", nm, p, len, QC_EFORMAT, HDR + 12, ""), "bundle_rejects_bad_alignment");
	memcpy(p, good, len);
	set_le(p + HDR + 24, len, 8);
	bundle_rehash(p);
	CHECK(bundle_fails("manifest size", nm, p, len, QC_EFORMAT, HDR + 16, ""), "bundle_rejects_manifest_past_eof");
	memcpy(p, good, len);
	set_le(p + HDR + 16, UINT64_MAX - 8, 8);
	bundle_rehash(p);
	CHECK(bundle_fails("manifest offset wraps", nm, p, len, QC_EFORMAT, HDR + 16, ""), "bundle_rejects_manifest_offset_wrap");
	memcpy(p, good, len);
	/* manifest bytes flipped */
	uint64_t spots[] = { moff, moff + mlen / 2, moff + mlen - 1 };
	for (int i = 0; i < 3; i++) {
		p[spots[i]] ^= 0x01;
		CHECK(bundle_fails("manifest byte", nm, p, len, QC_ECHECKSUM, (int64_t)moff, ""),
		      "bundle_rejects_flipped_manifest_byte at %llu", (unsigned long long)spots[i]);
		p[spots[i]] ^= 0x01;
	}
	free(p);

	/* valid JSON, wrong content */
	cJSON *m = bundle_manifest(good);
	cJSON *t0j = manifest_tensor(m, 0), *t1j = manifest_tensor(m, 1);
	char t0[128], t1[128];
	snprintf(t0, sizeof t0, "%s", cJSON_GetObjectItemCaseSensitive(t0j, "name")->valuestring);
	snprintf(t1, sizeof t1, "%s", cJSON_GetObjectItemCaseSensitive(t1j, "name")->valuestring);
	uint64_t t1off = (uint64_t)num(t1j, "offset");
	uint64_t t0off = (uint64_t)num(t0j, "offset");
	cJSON_Delete(m);
	struct {
		enum mf_edit e;
		const char *name;
		int code;
		int64_t off;          /* -2: the manifest offset or none (JSON-level problem) */
		const char *tensor;
	} cases[] = {
		{ MF_NONE, "bundle_accepts_reserialized_manifest", QC_OK, 0, NULL },
		{ MF_MISALIGN, "bundle_rejects_misaligned_tensor_offset", QC_EFORMAT, (int64_t)(t1off + 512), t1 },
		{ MF_SIZE, "bundle_rejects_size_not_matching_shape", QC_EFORMAT, (int64_t)t1off, t1 },
		{ MF_OVERLAP, "bundle_rejects_overlapping_tensors", QC_EFORMAT, (int64_t)(t0off + QC_BUNDLE_ALIGN), t1 },
		{ MF_PAST_MANIFEST, "bundle_rejects_tensor_overlapping_manifest", QC_EFORMAT,
		  (int64_t)past_manifest(good), t1 },
		{ MF_TYPE, "bundle_rejects_unknown_encoding_type", QC_EUNSUPPORTED, -2, t1 },
		{ MF_LAYOUT, "bundle_rejects_unknown_layout", QC_EUNSUPPORTED, -2, t1 },
		{ MF_LAYOUT_ID, "bundle_rejects_layout_id_mismatch", QC_EUNSUPPORTED, -2, t1 },
		{ MF_DUP_NAME, "bundle_rejects_duplicate_tensor_name", QC_EFORMAT, -2, t0 },
		{ MF_NEG_DIM, "bundle_rejects_negative_dimension", QC_EFORMAT, -2, t1 },
		{ MF_FIVE_DIMS, "bundle_rejects_five_dimensions", QC_EFORMAT, -2, t1 },
		{ MF_BAD_HASH, "bundle_rejects_non_hex_xxh3", QC_EFORMAT, -2, t1 },
		{ MF_NO_TENSORS_KEY, "bundle_rejects_manifest_without_tensors", QC_EFORMAT, (int64_t)moff, "" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct blob eb;
		manifest_edit(good, cases[i].e, &eb);
		if (cases[i].code == QC_OK) {
			CHECK(bundle_opens(cases[i].name, nm, eb.p, eb.len), "%s", cases[i].name);
		} else if (cases[i].off != -2) {
			CHECK(bundle_fails(cases[i].name, nm, eb.p, eb.len, cases[i].code, cases[i].off, cases[i].tensor), "%s",
			      cases[i].name);
		} else {
			/* JSON-level: the tensor must be named; the offset, when given, is the manifest's */
			struct qc_err err = {0};
			struct qc_bundle *b = NULL;
			int rc = qc_bundle_open_mem(eb.p, eb.len, nm, &b, &err);
			CHECK(rc == cases[i].code && strcmp(err.tensor, cases[i].tensor) == 0 &&
			      (err.off == -1 || err.off == (int64_t)moff) && strcmp(err.path, nm) == 0,
			      "%s: rc %d tensor '%s' off %lld: %s", cases[i].name, rc, err.tensor, (long long)err.off, err.msg);
			qc_bundle_close(b);
		}
		blob_free(&eb);
	}

	/* tensor data byte flipped: opens (data is not hashed on open), verify names it */
	struct qc_bundle *b = NULL;
	struct qc_err err = {0};
	if (qc_bundle_open_mem(good, len, nm, &b, &err) == QC_OK) {
		int ok_all = 0;
		for (uint64_t i = 0; i < b->n_tensors; i++)
			ok_all += qc_bundle_verify_tensor(b, &b->tensors[i], NULL) == QC_OK;
		CHECK(ok_all == (int)b->n_tensors, "bundle_verify_passes_intact_tensors (%d of %llu)", ok_all,
		      (unsigned long long)b->n_tensors);
		uint64_t pick[] = { 0, b->n_tensors / 2, b->n_tensors - 1 };
		for (int i = 0; i < 3; i++) {
			const struct qc_bundle_tensor *t = &b->tensors[pick[i]];
			uint64_t spot[] = { t->off, t->off + t->size / 2, t->off + t->size - 1 };
			for (int s = 0; s < 3; s++) {
				uint8_t *q = dup_bytes(good, len);
				q[spot[s]] ^= 0x80;
				struct qc_bundle *bq = NULL;
				struct qc_err e2 = {0};
				int rc = qc_bundle_open_mem(q, len, nm, &bq, &e2);
				CHECK(rc == QC_OK, "bundle_opens_with_flipped_data_byte: %s", e2.msg);
				if (!rc) {
					const struct qc_bundle_tensor *tq = &bq->tensors[pick[i]];
					rc = qc_bundle_verify_tensor(bq, tq, &e2);
					CHECK(err_matches("flipped data", rc, &e2, nm, QC_ECHECKSUM, (int64_t)t->off, OFF_EXACT, t->name,
							  false), "bundle_verify_rejects_flipped_data_byte in %s at %llu", t->name,
					      (unsigned long long)spot[s]);
					/* the neighbours still verify */
					if (pick[i] + 1 < bq->n_tensors)
						CHECK(qc_bundle_verify_tensor(bq, tq + 1, NULL) == QC_OK,
						      "bundle_verify_passes_neighbour_of_flipped_tensor");
				}
				qc_bundle_close(bq);
				free(q);
			}
		}
	}
	qc_bundle_close(b);
}

/* ---- the CLI ---------------------------------------------------------------------------- */

static char qc_bin[1024];

static void find_bin(void)
{
	const char *dir = getenv("QC_BIN");
	char tmp[512];
	if (!dir || !*dir) {
		const char *build = getenv("QC_BUILD");
		snprintf(tmp, sizeof tmp, "%s/bin", build && *build ? build : "build");
		dir = tmp;
	}
	snprintf(qc_bin, sizeof qc_bin, "%s/qconvert", dir);
}

/* Run qconvert with args; stderr goes to err_path. Returns the exit status, or
 * 128 + signal when it died. */
static int run_cli(const char *const *args, const char *err_path)
{
	const char *argv[16] = { qc_bin };
	int n = 1;
	for (; args[n - 1] && n < 15; n++)
		argv[n] = args[n - 1];
	argv[n] = NULL;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	pid_t pid;
	int rc = posix_spawn(&pid, qc_bin, &fa, NULL, (char *const *)(uintptr_t)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0) {
		fprintf(stderr, "  cannot run %s: %s\n", qc_bin, strerror(rc));
		return -1;
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static bool file_exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* Any "<base>.tmp.*" left in dir? */
static bool temp_left(const char *dir, const char *base)
{
	char pre[256];
	snprintf(pre, sizeof pre, "%s.tmp.", base);
	DIR *dp = opendir(dir);
	bool found = false;
	struct dirent *e;
	while (dp && (e = readdir(dp)))
		if (strncmp(e->d_name, pre, strlen(pre)) == 0)
			found = true;
	if (dp)
		closedir(dp);
	return found;
}

static void rm_tree_files(const char *dir)
{
	DIR *dp = opendir(dir);
	struct dirent *e;
	char path[1024];
	while (dp && (e = readdir(dp))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		unlink(path);
	}
	if (dp)
		closedir(dp);
	rmdir(dir);
}

static void cli_checks(const char *dir, const struct fixture *st, const struct fixture *q8, const char *bundle)
{
	char errp[1024], in[1024], out[1024], base[64];
	snprintf(errp, sizeof errp, "%s/stderr.txt", dir);
	/* ~6 bad GGUFs built from stories260K, plus the real unaligned q8_0 file */
	struct bad_file {
		const char *name;
		const char *tensor; /* expected in stderr, or NULL */
	} files[] = {
		{ "bad-magic.gguf", NULL }, { "truncated.gguf", NULL }, { "version4.gguf", NULL },
		{ "misaligned.gguf", NULL }, { "past-end.gguf", NULL }, { "n-dims-5.gguf", NULL },
		{ "absurd-count.gguf", NULL }, { NULL, "blk.0.ffn_down.weight" },
	};
	const struct walk_tensor *te = walk_find_tensor(&st->w, "token_embd.weight");
	CHECK(te != NULL, "stories260K.gguf has token_embd.weight");
	if (!te)
		return;
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		uint8_t *p = dup_bytes(st->buf, st->len);
		size_t len = st->len;
		const char *nm = files[i].name;
		if (!nm) {
			snprintf(in, sizeof in, "%s", q8->path);
		} else {
			if (strcmp(nm, "bad-magic.gguf") == 0)
				p[0] = 'X';
			else if (strcmp(nm, "truncated.gguf") == 0)
				len = (size_t)(st->w.t[3].off + 5);
			else if (strcmp(nm, "version4.gguf") == 0)
				set_le(p + 4, 4, 4);
			else if (strcmp(nm, "misaligned.gguf") == 0)
				set_le(p + te->offset_off, te->rel + 4, 8);
			else if (strcmp(nm, "past-end.gguf") == 0)
				set_le(p + te->offset_off, 1ull << 40, 8);
			else if (strcmp(nm, "n-dims-5.gguf") == 0)
				set_le(p + te->ndims_off, 5, 4);
			else
				set_le(p + 8, 1ull << 62, 8);
			snprintf(in, sizeof in, "%s/%s", dir, nm);
			CHECK(spit(in, p, len), "write %s", in);
			if (strcmp(nm, "misaligned.gguf") == 0 || strcmp(nm, "past-end.gguf") == 0 ||
			    strcmp(nm, "n-dims-5.gguf") == 0)
				files[i].tensor = "token_embd.weight";
		}
		free(p);
		snprintf(base, sizeof base, "out%zu.qb", i);
		snprintf(out, sizeof out, "%s/%s", dir, base);
		const char *args[] = { in, "--target", "cpu", "-o", out, NULL };
		int rc = run_cli(args, errp);
		size_t elen = 0;
		char *e = (char *)slurp(errp, &elen);
		bool names = e && strstr(e, in) && strstr(e, "offset 0x") &&
			     (!files[i].tensor || strstr(e, files[i].tensor));
		CHECK(rc == 1 && names, "cli_convert_rejects_bad_gguf %s: exit %d, stderr: %s", nm ? nm : in, rc, e ? e : "");
		CHECK(!file_exists(out) && !temp_left(dir, base), "cli_convert_leaves_no_output %s", nm ? nm : in);
		free(e);
		const char *iargs[] = { "inspect", in, NULL };
		rc = run_cli(iargs, errp);
		e = (char *)slurp(errp, &elen);
		CHECK(rc == 1 && e && strstr(e, in) && strstr(e, "offset 0x"), "cli_inspect_rejects_bad_gguf %s: exit %d, stderr: %s",
		      nm ? nm : in, rc, e ? e : "");
		free(e);
	}
	/* the same command on a valid file succeeds (so the checker can fail) */
	snprintf(out, sizeof out, "%s/good-again.qb", dir);
	const char *okargs[] = { st->path, "--target", "cpu", "-q", "-o", out, NULL };
	CHECK(run_cli(okargs, errp) == 0 && file_exists(out) && !temp_left(dir, "good-again.qb"),
	      "cli_convert_accepts_valid_gguf");

	/* verify: intact bundle passes; one flipped data byte fails naming the tensor */
	const char *vargs[] = { "verify", bundle, NULL };
	CHECK(run_cli(vargs, errp) == 0, "cli_verify_accepts_intact_bundle");
	size_t blen;
	uint8_t *bb = slurp(bundle, &blen);
	struct qc_bundle *b = NULL;
	if (bb && qc_bundle_open_mem(bb, blen, bundle, &b, NULL) == QC_OK) {
		const struct qc_bundle_tensor *t = &b->tensors[b->n_tensors / 2];
		char tname[256];
		snprintf(tname, sizeof tname, "'%s'", t->name);
		uint8_t *q = dup_bytes(bb, blen);
		q[t->off + t->size / 3] ^= 0x10;
		snprintf(in, sizeof in, "%s/flipped.qb", dir);
		CHECK(spit(in, q, blen), "write %s", in);
		free(q);
		const char *fargs[] = { "verify", in, NULL };
		int rc = run_cli(fargs, errp);
		size_t elen;
		char *e = (char *)slurp(errp, &elen);
		CHECK(rc == 1 && e && strstr(e, tname) && strstr(e, in), "cli_verify_rejects_flipped_data_byte: exit %d, stderr: %s",
		      rc, e ? e : "");
		free(e);
	}
	qc_bundle_close(b);
	free(bb);

	/* usage errors exit 2 */
	const char *u1[] = { NULL };
	const char *u2[] = { st->path, NULL };
	const char *u3[] = { st->path, "--target", "bogus", NULL };
	const char *u4[] = { st->path, "--target", "cpu", "--bogus", NULL };
	const char *u5[] = { st->path, "--target", NULL };
	const char *u6[] = { "verify", NULL };
	const char *u7[] = { "dump", st->path, NULL };
	const char *u8[] = { st->path, "--target", "cpu", "--align", "1000", NULL };
	const char *const *usage[] = { u1, u2, u3, u4, u5, u6, u7, u8 };
	for (size_t i = 0; i < sizeof usage / sizeof usage[0]; i++)
		CHECK(run_cli(usage[i], errp) == 2, "cli_usage_error_exits_2 (case %zu)", i + 1);
	const char *help[] = { "--help", NULL };
	CHECK(run_cli(help, errp) == 0, "cli_help_exits_0");
}

/* Copy file src to dst (small test inputs only). */
static bool copy_file(const char *src, const char *dst)
{
	size_t n = 0;
	uint8_t *p = slurp(src, &n);
	bool ok = p && spit(dst, p, n);
	free(p);
	return ok;
}

/* Fresh inputs in dir: self.gguf (stories260K), sym.qb -> self.gguf, hard.qb (a
 * hard link to it), hf/ (a copy of tests/data/hf/llama) and hf-config-link.qb (a
 * hard link to hf/config.json). Made again for every case, so a case that
 * replaced an input (before the fix) cannot break the next one. */
static bool make_inputs(const char *dir, const struct fixture *st)
{
	static const char *const hf_files[] = { "config.json", "model.safetensors", "tokenizer.json",
						"tokenizer_config.json", "generation_config.json" };
	char a[1100], b[1100], src[512];
	const char *plain[] = { "self.gguf", "sym.qb", "hard.qb", "hf-config-link.qb" };
	for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
		snprintf(a, sizeof a, "%s/%s", dir, plain[i]);
		unlink(a);
	}
	snprintf(a, sizeof a, "%s/hf", dir);
	rm_tree_files(a);
	snprintf(a, sizeof a, "%s/self.gguf", dir);
	snprintf(b, sizeof b, "%s/hard.qb", dir);
	bool ok = spit(a, st->buf, st->len) && link(a, b) == 0;
	snprintf(b, sizeof b, "%s/sym.qb", dir);
	ok = ok && symlink("self.gguf", b) == 0;
	snprintf(a, sizeof a, "%s/hf", dir);
	ok = ok && mkdir(a, 0755) == 0;
	for (size_t i = 0; ok && i < sizeof hf_files / sizeof hf_files[0]; i++) {
		snprintf(src, sizeof src, "tests/data/hf/llama/%s", hf_files[i]);
		snprintf(a, sizeof a, "%s/hf/%s", dir, hf_files[i]);
		ok = copy_file(src, a);
	}
	snprintf(a, sizeof a, "%s/hf/config.json", dir);
	snprintf(b, sizeof b, "%s/hf-config-link.qb", dir);
	return ok && link(a, b) == 0;
}

/* issue 15 #1: an output that is an input, under any name, is refused (exit 1, a
 * message naming the output and calling it the input) before anything is written,
 * and the input is intact. */
static void cli_refuses_output_that_is_input(const char *dir, const struct fixture *st)
{
	char errp[1024], self[1024], sym[1024], hard[1024], hf[1024], member[1100], cfg_path[1100], hfhard[1024];
	char fresh[1100];
	snprintf(errp, sizeof errp, "%s/stderr.txt", dir);
	snprintf(self, sizeof self, "%s/self.gguf", dir);
	snprintf(sym, sizeof sym, "%s/sym.qb", dir);
	snprintf(hard, sizeof hard, "%s/hard.qb", dir);
	snprintf(hf, sizeof hf, "%s/hf", dir);
	snprintf(member, sizeof member, "%s/model.safetensors", hf);
	snprintf(cfg_path, sizeof cfg_path, "%s/config.json", hf);
	snprintf(hfhard, sizeof hfhard, "%s/hf-config-link.qb", dir);
	size_t cfg_len = 0, st_len = 0;
	uint8_t *cfg = slurp("tests/data/hf/llama/config.json", &cfg_len);
	uint8_t *safet = slurp("tests/data/hf/llama/model.safetensors", &st_len);
	struct { const char *what, *in, *out, *victim; const uint8_t *want; size_t want_len; } cases[] = {
		{ "same path", self, self, self, st->buf, st->len },
		{ "symlink to the input", self, sym, self, st->buf, st->len },
		{ "hard link to the input", self, hard, self, st->buf, st->len },
		{ "HF folder member", hf, member, member, safet, st_len },
		{ "hard link to an HF folder member", hf, hfhard, cfg_path, cfg, cfg_len },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		bool ok = cfg && safet && make_inputs(dir, st);
		CHECK(ok, "cli_refuses_output_that_is_input: cannot set up %s: %s", dir, strerror(errno));
		if (!ok)
			break;
		const char *args[] = { cases[i].in, "--target", "cpu", "-q", "-o", cases[i].out, NULL };
		int rc = run_cli(args, errp);
		size_t elen = 0, vlen = 0;
		char *e = (char *)slurp(errp, &elen);
		uint8_t *v = slurp(cases[i].victim, &vlen);
		bool intact = v && vlen == cases[i].want_len && memcmp(v, cases[i].want, vlen) == 0;
		CHECK(rc == 1 && e && strstr(e, "input") && strstr(e, cases[i].out) && intact,
		      "cli_refuses_output_that_is_input (%s): exit %d, input %s, stderr: %s", cases[i].what, rc,
		      intact ? "intact" : "REPLACED", e ? e : "");
		free(e);
		free(v);
		const char *b = strrchr(cases[i].out, '/') + 1;
		char d[1024];
		snprintf(d, sizeof d, "%.*s", (int)(b - 1 - cases[i].out), cases[i].out);
		CHECK(!temp_left(d, b), "cli_refuses_output_that_is_input (%s): a temp file is left", cases[i].what);
	}
	/* the near miss: a fresh output beside the same inputs converts */
	snprintf(fresh, sizeof fresh, "%s/fresh.qb", dir);
	const char *okargs[] = { hf, "--target", "cpu", "-q", "-o", fresh, NULL };
	CHECK(make_inputs(dir, st) && run_cli(okargs, errp) == 0 && file_exists(fresh),
	      "cli_converts_hf_folder_to_a_fresh_output");
	free(cfg);
	free(safet);
	rm_tree_files(hf);
}

/* issue 15 #6 at convert: hyper-parameters that contradict the tensors, or are not
 * finite and positive, are refused naming the file and the key (exit 1, no output);
 * the same edits with consistent values convert. Values come from the fixture's own
 * tensors as the independent walker reads them (5 layers, ffn_down 172 wide, rows
 * of 64), not from our reader. */
static void cli_refuses_inconsistent_hparams(const char *dir, const struct fixture *st)
{
	char errp[1024], in[1100], out[1100];
	snprintf(errp, sizeof errp, "%s/stderr.txt", dir);
	const struct walk_tensor *down = walk_find_tensor(&st->w, "blk.4.ffn_down.weight");
	const struct walk_tensor *emb = walk_find_tensor(&st->w, "token_embd.weight");
	CHECK(down && emb && !walk_find_tensor(&st->w, "blk.5.attn_norm.weight") && down->ne[0] == 172 && emb->ne[0] == 64,
	      "stories260K: 5 layers, n_ff 172, n_embd 64 by the walker");
	static const struct {
		const char *file, *key;    /* key: "llama.<...>", set in place (u32) or added (f32) */
		bool add_f32;
		double value;
		bool refused;
	} cases[] = {
		{ "block-count-4.gguf", "llama.block_count", false, 4, true },
		{ "block-count-6.gguf", "llama.block_count", false, 6, true },
		{ "rope-base-nan.gguf", "llama.rope.freq_base", true, NAN, true },
		{ "rope-base-0.gguf", "llama.rope.freq_base", true, 0, true },
		{ "rope-dim-0.gguf", "llama.rope.dimension_count", false, 0, true },
		{ "ffn-0.gguf", "llama.feed_forward_length", false, 0, true },
		{ "ffn-171.gguf", "llama.feed_forward_length", false, 171, true },
		{ "embd-63.gguf", "llama.embedding_length", false, 63, true },
		{ "block-count-5.gguf", "llama.block_count", false, 5, false },
		{ "rope-base-500k.gguf", "llama.rope.freq_base", true, 500000, false },
		{ "ffn-172.gguf", "llama.feed_forward_length", false, 172, false },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct rebuilt r = {0};
		if (cases[i].add_f32) {
			struct blob kv = {0};
			float f = (float)cases[i].value;
			uint32_t bits;
			memcpy(&bits, &f, 4);
			put_str(&kv, cases[i].key, strlen(cases[i].key));
			put_le(&kv, QC_GGUF_FLOAT32, 4);
			put_le(&kv, bits, 4);
			with_extra_kv(st, &kv, &r);
			blob_free(&kv);
		} else {
			const struct walk_kv *kv = walk_find_kv(&st->w, cases[i].key);
			CHECK(kv && kv->type == QC_GGUF_UINT32, "stories260K has %s as u32", cases[i].key);
			if (!kv || kv->type != QC_GGUF_UINT32)
				continue;
			r.b.p = dup_bytes(st->buf, st->len);
			r.b.len = st->len;
			set_le(r.b.p + kv->val_off, (uint64_t)cases[i].value, 4);
		}
		snprintf(in, sizeof in, "%s/%s", dir, cases[i].file);
		snprintf(out, sizeof out, "%s/%s.qb", dir, cases[i].file);
		CHECK(spit(in, r.b.p, r.b.len), "write %s", in);
		blob_free(&r.b);
		const char *args[] = { in, "--target", "cpu", "-q", "-o", out, NULL };
		int rc = run_cli(args, errp);
		size_t elen = 0;
		char *e = (char *)slurp(errp, &elen);
		const char *key = cases[i].key + 6; /* the message names it; "llama." may be spelled either way */
		if (cases[i].refused)
			CHECK(rc == 1 && e && strstr(e, in) && strstr(e, key) && !file_exists(out),
			      "cli_convert_refuses_inconsistent_hparams %s: exit %d, stderr: %s", cases[i].file, rc, e ? e : "");
		else
			CHECK(rc == 0 && file_exists(out), "cli_convert_accepts_consistent_hparams %s: exit %d, stderr: %s",
			      cases[i].file, rc, e ? e : "");
		free(e);
		unlink(out);
		unlink(in);
	}
}

/* issue 15 #6 at load: a bundle whose config contradicts its tensors or holds a
 * non-finite / non-positive value is refused by the runtime, naming the field; the
 * unedited manifest, re-serialized the same way, loads. */
static void model_refuses_inconsistent_config(const uint8_t *good, const char *nm)
{
	static const struct { const char *field; double value; bool null; bool refused; } cases[] = {
		{ "n_layer", 4, false, true },         /* tensors for 5 layers */
		{ "rope_freq_base", 0, true, true },   /* a NaN, as cJSON writes it */
		{ "rope_freq_base", -1, false, true },
		{ "rope_dim", 0, false, true },
		{ "n_ff", 0, false, true },
		{ "n_ff", 171, false, true },          /* ffn_down is 172 wide */
		{ "n_ctx_train", 0, false, true },
		{ NULL, 0, false, false },
		{ "rope_freq_base", 500000, false, false },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		cJSON *m = bundle_manifest(good);
		cJSON *cfg = cJSON_GetObjectItemCaseSensitive(m, "config");
		if (cases[i].field && cases[i].null)
			cJSON_ReplaceItemInObjectCaseSensitive(cfg, cases[i].field, cJSON_CreateNull());
		else if (cases[i].field)
			set_num(cfg, cases[i].field, cases[i].value);
		char *json = cJSON_PrintUnformatted(m);
		cJSON_Delete(m);
		struct blob out;
		bundle_with_manifest(good, json, &out);
		free(json);
		struct qc_bundle *b = NULL;
		struct qc_model *md = NULL;
		struct qc_err err = {0};
		int rc = qc_bundle_open_mem(out.p, out.len, nm, &b, &err);
		CHECK(rc == QC_OK, "edited bundle opens: %s", err.msg);
		if (!rc)
			rc = qc_model_from_bundle(b, &md, &err);
		char want[64];
		snprintf(want, sizeof want, "'%s'", cases[i].field ? cases[i].field : "");
		if (cases[i].refused)
			CHECK(rc == QC_EFORMAT && strcmp(err.path, nm) == 0 && strstr(err.msg, want),
			      "model_refuses_inconsistent_config %s = %s%g: rc %d: %s", cases[i].field,
			      cases[i].null ? "null " : "", cases[i].value, rc, err.msg);
		else
			CHECK(rc == QC_OK, "model_loads_consistent_config (%s): %s", cases[i].field ? cases[i].field : "unedited",
			      err.msg);
		qc_model_close(md);
		qc_bundle_close(b);
		blob_free(&out);
	}
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF), as RFC 8259 wants. */
static bool utf8_valid(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint8_t c = p[i];
		size_t k;
		uint32_t cp, min;
		if (c < 0x80) {
			i++;
			continue;
		} else if ((c & 0xe0) == 0xc0) {
			k = 1, cp = c & 0x1fu, min = 0x80;
		} else if ((c & 0xf0) == 0xe0) {
			k = 2, cp = c & 0x0fu, min = 0x800;
		} else if ((c & 0xf8) == 0xf0) {
			k = 3, cp = c & 0x07u, min = 0x10000;
		} else {
			return false;
		}
		if (n - i <= k)
			return false;
		for (size_t j = 1; j <= k; j++) {
			if ((p[i + j] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (p[i + j] & 0x3fu);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += k + 1;
	}
	return true;
}

/* Members of the bundle (read by libarchive, not by tar.c) whose path escapes the
 * archive: absolute, or with a ".." component. Returns the count, -1 if unreadable. */
static int tar_escaping_members(const uint8_t *p, size_t n, char *first, size_t first_len)
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	int bad = 0;
	archive_read_support_format_tar(a);
	if (archive_read_open_memory(a, p, n) != ARCHIVE_OK) {
		archive_read_free(a);
		return -1;
	}
	while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
		const char *path = archive_entry_pathname(e);
		bool esc = path && path[0] == '/';
		for (const char *c = path; c && !esc; c = strchr(c, '/') ? strchr(c, '/') + 1 : NULL)
			esc = strncmp(c, "..", 2) == 0 && (c[2] == '/' || c[2] == '\0');
		if (esc && !bad++)
			snprintf(first, first_len, "%s", path);
		archive_read_data_skip(a);
	}
	archive_read_free(a);
	return bad;
}

/* A GGUF the reader accepts but whose names are hostile: convert must either refuse it
 * (exit 1, naming the file) or write a bundle whose manifest is valid UTF-8 and whose
 * tar members stay inside the archive. */
static void cli_hostile_names(const char *dir, const struct fixture *st)
{
	char in[1024], out[1024], errp[1024];
	snprintf(errp, sizeof errp, "%s/stderr.txt", dir);
	const struct walk_tensor *t1 = &st->w.t[1];
	struct blob x = {0};
	struct rebuilt r;
	struct { const char *file; const char *key; size_t key_len; const char *tname; } cases[] = {
		{ "ok-names.gguf", "qc.test.key", 11, "qc.test.tensor" },
		{ "key-not-utf8.gguf", "bad\xff\xfekey", 9, NULL },
		{ "key-ctrl.gguf", "bad\x01\n\"key", 9, NULL },
		{ "tensor-not-utf8.gguf", NULL, 0, "out\xffput\xc0\xafnorm" },
		{ "tensor-dotdot.gguf", NULL, 0, "../../../../tmp/qc_bad_input_escape" },
		{ "tensor-absolute.gguf", NULL, 0, "/tmp/qc_bad_input_escape" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		x.len = 0;
		if (cases[i].key) {
			put_str(&x, cases[i].key, cases[i].key_len);
			put_le(&x, QC_GGUF_UINT32, 4);
			put_le(&x, 1, 4);
		}
		struct blob infos = {0}, rec = {0};
		if (cases[i].tname)
			tensor_rec(&rec, cases[i].tname, strlen(cases[i].tname), t1->n_dims, t1->ne, t1->type, t1->rel);
		infos_with(st, cases[i].tname ? 1 : -1, &rec, &infos);
		gguf_rebuild(st, cases[i].key ? &x : NULL, cases[i].key ? 1 : 0, &infos, st->w.n_tensors, st->w.align, &r);
		blob_free(&infos);
		blob_free(&rec);
		CHECK(gguf_opens(cases[i].file, cases[i].file, r.b.p, r.b.len), "reader accepts %s", cases[i].file);
		snprintf(in, sizeof in, "%s/%s", dir, cases[i].file);
		snprintf(out, sizeof out, "%s/hostile%zu.qb", dir, i);
		CHECK(spit(in, r.b.p, r.b.len), "write %s", in);
		blob_free(&r.b);
		const char *args[] = { in, "--target", "cpu", "-q", "-o", out, NULL };
		int rc = run_cli(args, errp);
		size_t elen = 0, blen = 0;
		char *e = (char *)slurp(errp, &elen);
		if (rc == 1) {
			CHECK(i > 0 && e && strstr(e, in) && !file_exists(out),
			      "cli_convert_refuses_hostile_names %s cleanly: stderr: %s", cases[i].file, e ? e : "");
		} else {
			uint8_t *b = rc == 0 ? slurp(out, &blen) : NULL;
			CHECK(b != NULL, "cli_convert_hostile_names %s: exit %d: %s", cases[i].file, rc, e ? e : "");
			if (b) {
				uint64_t moff = get_le(b + HDR + 16, 8), mlen = get_le(b + HDR + 24, 8);
				CHECK(moff + mlen <= blen && utf8_valid(b + moff, (size_t)mlen),
				      "cli_convert_writes_utf8_manifest: %s gives a manifest that is not UTF-8", cases[i].file);
				char first[256] = "";
				int esc = tar_escaping_members(b, blen, first, sizeof first);
				CHECK(esc == 0, "cli_convert_keeps_tar_members_inside: %s gives %d escaping member(s), first '%s'",
				      cases[i].file, esc, first);
				free(b);
			}
		}
		free(e);
	}
	blob_free(&x);
}

int main(void)
{
	struct fixture *fx = NULL;
	const bool have_fx = check_have_fixtures("test_bad_input");
	int n = have_fx ? load_fixtures(&fx) : 0;
	CHECK(!have_fx || n >= 20, "found %d GGUF fixtures under %s", n, check_fixtures());
	const struct fixture *st = fixture_named(fx, n, "stories260K.gguf");
	const struct fixture *q8 = fixture_named(fx, n, "tinyllamas-stories-260k-q8_0.gguf");
	const struct fixture *v2 = q8;

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

	/* a bundle made by the CLI, and the CLI itself */
	find_bin();
	char dir[] = "/tmp/qc_bad_input.XXXXXX";
	bool have_bin = access(qc_bin, X_OK) == 0;
	CHECK(have_bin, "qconvert binary at %s (set QC_BIN to its directory)", qc_bin);
	if (have_bin && st && q8 && mkdtemp(dir)) {
		char bundle[1100], errp[1100];
		snprintf(bundle, sizeof bundle, "%s/stories260K.qb", dir);
		snprintf(errp, sizeof errp, "%s/stderr.txt", dir);
		const char *args[] = { st->path, "--target", "cpu", "-q", "-o", bundle, NULL };
		int rc = run_cli(args, errp);
		CHECK(rc == 0, "cli_converts_stories260K (exit %d)", rc);
		size_t blen = 0;
		uint8_t *bb = rc == 0 ? slurp(bundle, &blen) : NULL;
		if (bb) {
			bundle_checks(bb, blen, "stories260K.qb");
			model_refuses_inconsistent_config(bb, "stories260K.qb");
			free(bb);
		}
		cli_checks(dir, st, q8, bundle);
		cli_hostile_names(dir, st);
		cli_refuses_output_that_is_input(dir, st);
		cli_refuses_inconsistent_hparams(dir, st);
		rm_tree_files(dir);
	}

	for (int i = 0; i < n; i++) {
		free(fx[i].buf);
		walk_free(&fx[i].w);
	}
	free(fx);
	return check_report("test_bad_input");
}
