/* gguf_walk.h — an independent GGUF v2/v3 walker (intact files only) and the in-memory
 * GGUF rebuilds the hostile-input tests (tests/test_bad_*.c) make from real fixtures:
 * expected offsets come from here and from where a test put the bytes it changed, never
 * from the reader under test. Also: one fixture read into memory and walked, and the
 * GGUF-reader expectations (fails at an offset / opens). Header-only, static functions.
 * Bloat: no writer of its own — a rebuild copies the fixture's own records around the edit.
 */
#ifndef QC_GGUF_WALK_H
#define QC_GGUF_WALK_H

#include "bad_input_util.h"
#include "gguf.h"

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

static inline uint64_t rd_u(struct rd *r, int n)
{
	if (!r->ok || r->len - r->off < (uint64_t)n) {
		r->ok = false;
		return 0;
	}
	uint64_t v = get_le(r->p + r->off, n);
	r->off += (uint64_t)n;
	return v;
}

static inline void rd_skip(struct rd *r, uint64_t n)
{
	if (!r->ok || r->len - r->off < n)
		r->ok = false;
	else
		r->off += n;
}

/* GGUF spec value sizes: u8 i8 u16 i16 u32 i32 f32 bool str arr u64 i64 f64 */
static const unsigned spec_vsize[13] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };

static inline void rd_value(struct rd *r, uint32_t t, int depth)
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

static inline void walk_free(struct walk *w)
{
	free(w->kv);
	free(w->t);
	*w = (struct walk){0};
}

static inline bool walk_gguf(const uint8_t *p, size_t len, struct walk *w)
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

static inline const struct walk_kv *walk_find_kv(const struct walk *w, const char *key)
{
	for (uint64_t i = 0; i < w->n_kv; i++)
		if (strcmp(w->kv[i].key, key) == 0)
			return &w->kv[i];
	return NULL;
}

static inline const struct walk_tensor *walk_find_tensor(const struct walk *w, const char *name)
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

/* fixtures/<sub>/<name> read and walked into f (no checks counted: test_bad_gguf counts
 * the loading of every fixture); false when it is missing or the walker cannot read it. */
static inline bool fixture_load(struct fixture *f, const char *sub, const char *name)
{
	memset(f, 0, sizeof(*f));
	snprintf(f->path, sizeof f->path, "%s/%s/%s", check_fixtures(), sub, name);
	snprintf(f->name, sizeof f->name, "%s", name);
	f->buf = slurp(f->path, &f->len);
	if (f->buf && walk_gguf(f->buf, f->len, &f->w))
		return true;
	free(f->buf);
	f->buf = NULL;
	return false;
}

static inline void fixture_free(struct fixture *f)
{
	free(f->buf);
	walk_free(&f->w);
	f->buf = NULL;
}

/* stories260K read, walked and converted to a bundle in a fresh temp folder (from
 * the mkdtemp template dir_tmpl): the start of test_bad_bundle and test_bad_hparams.
 * Failures are CHECKs that count only when they fail, since test_bad_gguf and
 * test_bad_cli count them once. r->bb (may be NULL) holds the bundle's bytes,
 * r->have_dir says the folder exists; stories_close frees and removes both. */
struct stories_run {
	struct fixture st;
	char dir[64];
	bool have_dir;
	uint8_t *bb;
	size_t blen;
};

static inline void stories_open(struct stories_run *r, const char *dir_tmpl)
{
	memset(r, 0, sizeof *r);
	if (!fixture_load(&r->st, "gguf", "stories260K.gguf"))
		CHECK(0, "cannot read and walk %s", r->st.path); /* counted once, by test_bad_gguf */
	find_bin();
	snprintf(r->dir, sizeof r->dir, "%s", dir_tmpl);
	bool have_bin = access(qc_bin, X_OK) == 0;
	if (!have_bin)
		CHECK(0, "qconvert binary at %s (set QC_BIN to its directory)", qc_bin); /* counted once, by test_bad_cli */
	if (!have_bin || !r->st.buf || !mkdtemp(r->dir))
		return;
	r->have_dir = true;
	char bundle[1100];
	int rc = convert_stories(r->st.path, r->dir, bundle, sizeof bundle);
	if (rc != 0)
		CHECK(0, "qconvert %s (exit %d)", r->st.path, rc); /* counted once, by test_bad_cli */
	r->bb = rc == 0 ? slurp(bundle, &r->blen) : NULL;
}

static inline void stories_close(struct stories_run *r)
{
	free(r->bb);
	if (r->have_dir)
		rm_tree_files(r->dir);
	fixture_free(&r->st);
}

static inline bool gguf_fails_q(const char *what, const char *name, const uint8_t *p, size_t len, int code, int64_t off,
			 enum off_rule rule, const char *tensor, bool quiet)
{
	struct qc_err err = {0};
	struct qc_gguf *g = (struct qc_gguf *)1;
	int rc = qc_gguf_open_mem(p, len, name, &g, &err);
	bool ok = err_matches(what, rc, &err, name, code, off, rule, tensor, quiet) && g == NULL;
	qc_gguf_close(rc ? NULL : g);
	return ok;
}

static inline bool gguf_fails(const char *what, const char *name, const uint8_t *p, size_t len, int code, int64_t off,
		       const char *tensor)
{
	return gguf_fails_q(what, name, p, len, code, off, OFF_EXACT, tensor, false);
}

static inline bool gguf_opens(const char *what, const char *name, const uint8_t *p, size_t len)
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

static inline void gguf_rebuild(const struct fixture *f, const struct blob *extra, uint64_t n_extra,
				const struct blob *infos, uint64_t n_tensors, uint32_t align, struct rebuilt *out)
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
static inline void infos_with(const struct fixture *f, int64_t idx, const struct blob *rep, struct blob *out)
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

static inline void tensor_rec(struct blob *b, const char *name, size_t name_len, uint32_t n_dims, const uint64_t *ne,
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
static inline void with_extra_kv(const struct fixture *f, const struct blob *kv, struct rebuilt *out)
{
	struct blob infos;
	infos_with(f, -1, NULL, &infos);
	gguf_rebuild(f, kv, 1, &infos, f->w.n_tensors, f->w.align, out);
	blob_free(&infos);
}

/* Rebuild f with tensor idx's record replaced. */
static inline void with_tensor_rec(const struct fixture *f, int64_t idx, const struct blob *rec, struct rebuilt *out)
{
	struct blob infos;
	infos_with(f, idx, rec, &infos);
	gguf_rebuild(f, NULL, 0, &infos, f->w.n_tensors, f->w.align, out);
	blob_free(&infos);
}

static inline uint64_t rebuilt_tensor_off(const struct fixture *f, const struct rebuilt *r, uint64_t idx)
{
	return r->info_off + (f->w.t[idx].off - f->w.t[0].off);
}

#endif
