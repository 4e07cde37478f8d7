/* hf_convert.c — Hugging Face input → temporary GGUF → bundle (see hf_convert.h).
 *
 * Each GGUF tensor is a list of byte segments in output order: unquantized data is
 * borrowed from the shard mappings (a RoPE permutation is one segment per row, a
 * stack of experts one segment per expert), so an unquantized model costs no copy in
 * RAM. A quantized module is decoded once up front (its encoding, size, act_perm and
 * fusion cost must be known before the GGUF header) and dropped, then decoded again
 * while its bytes are written ("lazy" segments), so at most one decoded module is
 * held at a time: decoding costs two passes (three for fused MoE pairs) instead of
 * the model's size in RAM. Every HF tensor must be used: an unquantized
 * checkpoint with a tensor the architecture does not know is an error, not a silent
 * drop (rotary_emb.inv_freq, and lm_head when tied, are the documented exceptions).
 */
#include "hf_convert.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "gguf_write.h"
#include "hf_config.h"
#include "hf_names.h"
#include "hf_quant.h"
#include "hf_source.h"
#include "hf_tokenizer.h"
#include "qc_config.h"

/* A quantized module, decoded again on demand while its tensor is written. */
struct lazy {
	char module[QC_HF_NAME_MAX];
	char partner[QC_HF_NAME_MAX]; /* the other half of a load_pair, "" when loaded alone */
	bool is_up;                /* the up half of a pair */
	uint64_t size;             /* decoded bytes, as in the first pass */
	uint8_t *data;             /* only while its bytes are being written */
};

struct seg {
	const uint8_t *p;          /* borrowed bytes, or NULL with lz set */
	struct lazy *lz;
	uint64_t off, n;           /* lz: byte offset inside the decoded module */
};

struct conv;

struct otensor {
	char name[QC_HF_NAME_MAX + 16];
	struct seg *segs;
	size_t n_segs, cap;
	size_t cur;                /* fill cursor: segs[cur] starts at output byte cur_base */
	uint64_t cur_base, total;
	struct lazy *live;         /* the decoded module fill is reading */
	struct conv *c;
};

struct conv {
	const struct qc_hf_source *src;
	struct qc_hfq *q;
	struct qc_hf_config cfg;
	struct qc_gguf_writer *w;
	struct qc_err *err;
	struct otensor *ot;        /* (cap_ot), never reallocated: the writer keeps pointers */
	size_t n_ot, cap_ot;
	void **owned;
	size_t n_owned, cap_owned;
	bool *used;                /* (src->n_tensors) */
	struct qc_err fill_err;    /* what a lazy decode inside fill() reported */
};

/* ---- buffers and segments ------------------------------------------------------ */

static int own(struct conv *c, void *p)
{
	if (c->n_owned == c->cap_owned) {
		size_t cap = c->cap_owned ? 2 * c->cap_owned : 64;
		void **v = realloc(c->owned, cap * sizeof *v);
		if (!v) {
			free(p);
			return qc_err_set(c->err, QC_ENOMEM, c->src->path, NULL, -1, "out of memory");
		}
		c->owned = v;
		c->cap_owned = cap;
	}
	c->owned[c->n_owned++] = p;
	return QC_OK;
}

static struct otensor *new_ot(struct conv *c, const char *name)
{
	QC_ASSERT(c->n_ot < c->cap_ot);
	struct otensor *o = &c->ot[c->n_ot++];
	snprintf(o->name, sizeof o->name, "%s", name);
	o->c = c;
	return o;
}

/* n bytes at p, or (p NULL) at offset off of lazy module lz. */
static int seg_put(struct conv *c, struct otensor *o, const uint8_t *p, struct lazy *lz, uint64_t off, uint64_t n)
{
	struct seg *last = o->n_segs ? &o->segs[o->n_segs - 1] : NULL;
	if (last && last->lz == lz && (lz ? last->off + last->n == off : last->p + last->n == p)) {
		last->n += n; /* contiguous: extend */
		o->total += n;
		return QC_OK;
	}
	if (o->n_segs == o->cap) {
		size_t cap = o->cap ? 2 * o->cap : 8;
		struct seg *s = realloc(o->segs, cap * sizeof *s);
		if (!s)
			return qc_err_set(c->err, QC_ENOMEM, c->src->path, o->name, -1, "out of memory");
		o->segs = s;
		o->cap = cap;
	}
	o->segs[o->n_segs++] = (struct seg){ p, lz, off, n };
	o->total += n;
	return QC_OK;
}

static int seg_add(struct conv *c, struct otensor *o, const uint8_t *p, uint64_t n)
{
	return seg_put(c, o, p, NULL, 0, n);
}

/* n_rows rows of row_bytes at base (or, base NULL, of lazy module lz), in GGUF
 * order: permuted per head when perm_heads. */
static int add_rows(struct conv *c, struct otensor *o, const uint8_t *base, struct lazy *lz, uint64_t row_bytes,
		    int64_t n_rows, int perm_heads)
{
	if (!perm_heads)
		return seg_put(c, o, base, lz, 0, row_bytes * (uint64_t)n_rows);
	int64_t hd = n_rows / perm_heads;
	for (int64_t r = 0; r < n_rows; r++) {
		uint64_t off = (uint64_t)qc_hf_perm_src(r, hd) * row_bytes;
		int rc = seg_put(c, o, base ? base + off : NULL, lz, off, row_bytes);
		if (rc)
			return rc;
	}
	return QC_OK;
}

/* Decode lz again (the same call as the first pass); the result must have its size. */
static int lazy_load(struct conv *c, struct lazy *lz)
{
	struct qc_hfq_tensor a = { 0 }, b = { 0 };
	struct qc_hfq_fuse_stats st;
	int rc;
	if (!lz->partner[0])
		rc = qc_hfq_load(c->q, c->src, lz->module, &a, &c->fill_err);
	else if (lz->is_up)
		rc = qc_hfq_load_pair(c->q, c->src, lz->partner, lz->module, &b, &a, &st, &c->fill_err);
	else
		rc = qc_hfq_load_pair(c->q, c->src, lz->module, lz->partner, &a, &b, &st, &c->fill_err);
	qc_hfq_tensor_free(&b);
	if (!rc && a.size != lz->size)
		rc = qc_err_set(&c->fill_err, QC_EFORMAT, c->src->path, lz->module, -1,
				"decoded to %llu bytes, %llu the first time", (unsigned long long)a.size,
				(unsigned long long)lz->size);
	if (!rc) {
		lz->data = a.data;
		a.data = NULL;
	}
	qc_hfq_tensor_free(&a);
	return rc;
}

static void lazy_drop(struct otensor *o)
{
	if (o->live) {
		free(o->live->data);
		o->live->data = NULL;
		o->live = NULL;
	}
}

static int fill(void *ctx, uint64_t off, void *buf, size_t n)
{
	struct otensor *o = ctx;
	uint8_t *dst = buf;
	if (off < o->cur_base) {
		o->cur = 0;
		o->cur_base = 0;
	}
	while (n) {
		while (o->cur < o->n_segs && off >= o->cur_base + o->segs[o->cur].n) {
			o->cur_base += o->segs[o->cur].n;
			o->cur++;
		}
		if (o->cur == o->n_segs)
			return QC_ERANGE;
		const struct seg *s = &o->segs[o->cur];
		const uint8_t *src = s->p;
		if (s->lz) {
			if (o->live != s->lz) {
				lazy_drop(o);
				int rc = lazy_load(o->c, s->lz);
				if (rc)
					return rc;
				o->live = s->lz;
			}
			src = s->lz->data + s->off;
		}
		uint64_t in = off - o->cur_base, k = s->n - in < n ? s->n - in : n;
		memcpy(dst, src + in, (size_t)k);
		dst += k;
		off += k;
		n -= (size_t)k;
	}
	if (off == o->total)
		lazy_drop(o); /* the tensor is done */
	return QC_OK;
}

static int emit(struct conv *c, struct otensor *o, enum qc_type type, uint32_t n_dims, const int64_t *ne)
{
	if (o->n_segs == 1 && !o->segs[0].lz)
		return qc_gguf_writer_add_tensor(c->w, o->name, type, n_dims, ne, o->segs[0].p, c->err);
	return qc_gguf_writer_add_tensor_fill(c->w, o->name, type, n_dims, ne, fill, o, c->err);
}

/* ---- source tensors ------------------------------------------------------------ */

static const char *shard_path(const struct conv *c, const struct qc_hf_tensor *t)
{
	return c->src->shards[t->shard].st->path;
}

static bool float_type(enum qc_st_dtype d, enum qc_type *t)
{
	if (d == QC_ST_F16)
		*t = QC_TYPE_F16;
	else if (d == QC_ST_BF16)
		*t = QC_TYPE_BF16;
	else if (d == QC_ST_F32)
		*t = QC_TYPE_F32;
	else
		return false;
	return true;
}

/* Find name, mark it used, require a float dtype and the HF shape [ne1, ne0] (vectors:
 * [ne0]). */
static int find_float(struct conv *c, const char *name, const char *gguf, int64_t ne0, int64_t ne1, bool vector,
		      const struct qc_hf_tensor **out, enum qc_type *type)
{
	const struct qc_hf_tensor *t = qc_hf_find(c->src, name);
	*out = NULL;
	if (!t)
		return qc_err_set(c->err, QC_ENOTFOUND, c->src->path, name, -1, "tensor missing (needed for %s by %s)", gguf,
				  c->cfg.arch->hf_name);
	c->used[t - c->src->tensors] = true;
	if (!float_type(t->t->dtype, type))
		return qc_err_set(c->err, QC_EUNSUPPORTED, shard_path(c, t), name, (int64_t)t->t->hdr_off,
				  "dtype %s without a quantization_config (F16, BF16 or F32 expected)",
				  qc_st_dtype_name(t->t->dtype));
	bool ok = vector ? t->t->n_dims == 1 && (int64_t)t->t->shape[0] == ne0
			 : t->t->n_dims == 2 && (int64_t)t->t->shape[0] == ne1 && (int64_t)t->t->shape[1] == ne0;
	if (!ok) {
		char got[64] = "";
		for (uint32_t d = 0, k = 0; d < t->t->n_dims && k < sizeof got - 24; d++)
			k += (uint32_t)snprintf(got + k, sizeof got - k, "%s%llu", d ? ", " : "", (unsigned long long)t->t->shape[d]);
		if (vector)
			return qc_err_set(c->err, QC_EFORMAT, shard_path(c, t), name, (int64_t)t->t->hdr_off,
					  "shape [%s] where [%lld] expected from config.json", got, (long long)ne0);
		return qc_err_set(c->err, QC_EFORMAT, shard_path(c, t), name, (int64_t)t->t->hdr_off,
				  "shape [%s] where [%lld, %lld] expected from config.json", got, (long long)ne1, (long long)ne0);
	}
	*out = t;
	return QC_OK;
}

static void mark_module(struct conv *c, const char *module)
{
	size_t n = strlen(module);
	for (uint64_t i = 0; i < c->src->n_tensors; i++)
		if (strncmp(c->src->tensors[i].name, module, n) == 0 && c->src->tensors[i].name[n] == '.')
			c->used[i] = true;
}

/* ---- one GGUF tensor per spec ------------------------------------------------- */

static void base_name(const char *gguf, char *buf, size_t len)
{
	size_t n = strlen(gguf);
	if (n > 7 && strcmp(gguf + n - 7, ".weight") == 0)
		n -= 7;
	snprintf(buf, len, "%.*s.act_perm", (int)n, gguf);
}

static int vector(struct conv *c, const struct qc_hf_tspec *s)
{
	const struct qc_hf_tensor *t;
	enum qc_type type;
	int rc = find_float(c, s->hf, s->gguf, s->ne0, 1, true, &t, &type);
	if (rc)
		return rc;
	float *v = malloc(sizeof(float) * (size_t)s->ne0), *p = NULL;
	if (!v || (rc = own(c, v)))
		return v ? rc : qc_err_set(c->err, QC_ENOMEM, c->src->path, s->gguf, -1, "out of memory");
	qc_types[type].dequant_row(t->data, v, s->ne0);
	/* Gemma: the runtime's RMSNorm multiplies by the stored weight, as llama.cpp's,
	 * whose converter stores 1 + w (the bf16/f16 w upcast first, the sum in float32) */
	for (int64_t i = 0; s->plus_one && i < s->ne0; i++)
		v[i] += 1.0f;
	if (s->perm_heads) {
		if (!(p = malloc(sizeof(float) * (size_t)s->ne0)) || (rc = own(c, p)))
			return p ? rc : qc_err_set(c->err, QC_ENOMEM, c->src->path, s->gguf, -1, "out of memory");
		int64_t hd = s->ne0 / s->perm_heads;
		for (int64_t r = 0; r < s->ne0; r++)
			p[r] = v[qc_hf_perm_src(r, hd)];
		v = p;
	}
	struct otensor *o = new_ot(c, s->gguf);
	int64_t ne[1] = { s->ne0 };
	if ((rc = seg_add(c, o, (const uint8_t *)v, sizeof(float) * (uint64_t)s->ne0)))
		return rc;
	return emit(c, o, QC_TYPE_F32, 1, ne);
}

/* Per GGUF matrix being assembled (a plain matrix or a stack of experts). */
struct mat {
	struct otensor *o;
	enum qc_type type;
	bool have_type;
	int32_t *perm;             /* (ne0 * n_mat) act_perm, owned by c once set */
	int n_perm;
};

static int mat_type(struct conv *c, const struct qc_hf_tspec *s, struct mat *m, enum qc_type type, const char *module)
{
	if (m->have_type && m->type != type)
		return qc_err_set(c->err, QC_EUNSUPPORTED, c->src->path, module, -1,
				  "%s: experts stored in different encodings (%s and %s)", s->gguf, qc_type_get(m->type)->name,
				  qc_type_get(type)->name);
	m->type = type;
	m->have_type = true;
	return QC_OK;
}

static int new_lazy(struct conv *c, const char *module, const char *partner, bool is_up, uint64_t size,
		    struct lazy **out)
{
	struct lazy *lz = calloc(1, sizeof *lz);
	int rc = lz ? own(c, lz) : qc_err_set(c->err, QC_ENOMEM, c->src->path, module, -1, "out of memory");
	if (rc)
		return rc;
	snprintf(lz->module, sizeof lz->module, "%s", module);
	snprintf(lz->partner, sizeof lz->partner, "%s", partner ? partner : "");
	lz->is_up = is_up;
	lz->size = size;
	*out = lz;
	return QC_OK;
}

/* Append one decoded module (rows of s->ne0 columns) to m as a lazy segment: its
 * bytes are dropped now and decoded again while written (partner: the other module
 * of a load_pair, else NULL). Frees qt. */
static int add_decoded(struct conv *c, const struct qc_hf_tspec *s, struct mat *m, const char *module,
		       const char *partner, bool is_up, struct qc_hfq_tensor *qt, int e)
{
	int rc;
	if (qt->n_rows != s->ne1 || qt->n_cols != s->ne0) {
		rc = qc_err_set(c->err, QC_EFORMAT, c->src->path, module, -1,
				"decoded shape [%lld, %lld] where [%lld, %lld] expected from config.json",
				(long long)qt->n_rows, (long long)qt->n_cols, (long long)s->ne1, (long long)s->ne0);
		qc_hfq_tensor_free(qt);
		return rc;
	}
	if ((rc = mat_type(c, s, m, qt->type, module))) {
		qc_hfq_tensor_free(qt);
		return rc;
	}
	uint64_t rb;
	if (qc_type_row_bytes(qt->type, (uint64_t)s->ne0, &rb) || rb * (uint64_t)s->ne1 != qt->size) {
		qc_hfq_tensor_free(qt);
		return qc_err_set(c->err, QC_EFORMAT, c->src->path, module, -1, "decoded size does not match its shape");
	}
	int32_t *perm = qt->act_perm;
	struct lazy *lz;
	qt->act_perm = NULL;
	rc = new_lazy(c, module, partner, is_up, qt->size, &lz);
	qc_hfq_tensor_free(qt);
	if (rc) {
		free(perm);
		return rc;
	}
	if (perm && e == 0) {
		int n_mat = s->n_expert ? s->n_expert : 1;
		m->perm = calloc((size_t)s->ne0 * (size_t)n_mat, sizeof *m->perm);
		if (!m->perm) {
			free(perm);
			return qc_err_set(c->err, QC_ENOMEM, c->src->path, module, -1, "out of memory");
		}
		if ((rc = own(c, m->perm))) {
			free(perm);
			return rc;
		}
	}
	if (perm && m->perm) {
		memcpy(m->perm + (size_t)e * (size_t)s->ne0, perm, sizeof(int32_t) * (size_t)s->ne0);
		m->n_perm++;
	}
	bool had = perm != NULL;
	free(perm);
	if ((m->perm ? m->n_perm : 0) != (m->perm ? e + 1 : 0) || (had && !m->perm))
		return qc_err_set(c->err, QC_EUNSUPPORTED, c->src->path, module, -1,
				  "%s: act-order permutation present on some experts only", s->gguf);
	return add_rows(c, m->o, NULL, lz, rb, s->ne1, s->perm_heads);
}

static int add_plain(struct conv *c, const struct qc_hf_tspec *s, struct mat *m, const char *module)
{
	char name[QC_HF_NAME_MAX + 8];
	snprintf(name, sizeof name, "%s.weight", module);
	const struct qc_hf_tensor *t;
	enum qc_type type;
	int rc = find_float(c, name, s->gguf, s->ne0, s->ne1, false, &t, &type);
	if (rc || (rc = mat_type(c, s, m, type, module)))
		return rc;
	return add_rows(c, m->o, t->data, NULL, (uint64_t)s->ne0 * qc_types[type].block_bytes, s->ne1, s->perm_heads);
}

static int finish_mat(struct conv *c, const struct qc_hf_tspec *s, struct mat *m)
{
	int64_t ne[3] = { s->ne0, s->ne1, s->n_expert };
	int rc = emit(c, m->o, m->type, s->n_expert ? 3 : 2, ne);
	if (rc || !m->perm)
		return rc;
	char pn[QC_HF_NAME_MAX + 16];
	base_name(s->gguf, pn, sizeof pn);
	struct otensor *po = new_ot(c, pn);
	int64_t pne[2] = { s->ne0, s->n_expert ? s->n_expert : 1 };
	if ((rc = seg_add(c, po, (const uint8_t *)m->perm, sizeof(int32_t) * (uint64_t)(pne[0] * pne[1]))))
		return rc;
	return emit(c, po, QC_TYPE_I32, s->n_expert ? 2 : 1, pne);
}

static double sqrt_mean(double sum_sq, int n)
{
	return n > 0 ? sqrt(sum_sq / n) : 0.0;
}

/* A matrix or a stack of experts; gate experts with a pair load gate and up together
 * (the scheme may unify their scales) and record what that cost. */
static int matrix(struct conv *c, const struct qc_hf_tspec *specs, size_t i, bool *done)
{
	const struct qc_hf_tspec *s = &specs[i];
	const struct qc_hf_tspec *u = s->pair >= 0 ? &specs[s->pair] : NULL;
	int n_mat = s->n_expert ? s->n_expert : 1;
	char mod[QC_HF_NAME_MAX], umod[QC_HF_NAME_MAX];
	qc_hf_names_expert(s, 0, mod, sizeof mod);
	bool quant = qc_hfq_is_quantized(c->q, c->src, mod);
	struct mat m = { .o = new_ot(c, s->gguf) }, um = { 0 };
	bool pair = false;
	if (u && quant) {
		qc_hf_names_expert(u, 0, umod, sizeof umod);
		pair = qc_hfq_is_quantized(c->q, c->src, umod);
	}
	if (pair)
		um.o = new_ot(c, u->gguf);
	double max_err = 0, sum_sq = 0;
	bool requant = false;
	int rc = QC_OK;
	for (int e = 0; !rc && e < n_mat; e++) {
		qc_hf_names_expert(s, e, mod, sizeof mod);
		if (qc_hfq_is_quantized(c->q, c->src, mod) != quant)
			return qc_err_set(c->err, QC_EUNSUPPORTED, c->src->path, mod, -1,
					  "%s: some experts quantized and some not", s->gguf);
		if (!quant) {
			rc = add_plain(c, s, &m, mod);
			continue;
		}
		mark_module(c, mod);
		struct qc_hfq_tensor gt = { 0 }, ut = { 0 };
		if (!pair) {
			if (!(rc = qc_hfq_load(c->q, c->src, mod, &gt, c->err)))
				rc = add_decoded(c, s, &m, mod, NULL, false, &gt, e);
			continue;
		}
		struct qc_hfq_fuse_stats st = { 0 };
		qc_hf_names_expert(u, e, umod, sizeof umod);
		mark_module(c, umod);
		if (!qc_hfq_is_quantized(c->q, c->src, umod))
			return qc_err_set(c->err, QC_EUNSUPPORTED, c->src->path, umod, -1,
					  "%s: some experts quantized and some not", u->gguf);
		rc = qc_hfq_load_pair(c->q, c->src, mod, umod, &gt, &ut, &st, c->err);
		bool paired = rc != QC_EUNSUPPORTED;
		if (rc == QC_EUNSUPPORTED) {
			/* hf_quant.h: the halves need different act-order permutations; each keeps
			 * its own <base>.act_perm, which dump (and the runtime) find by part name */
			QC_WARN_ONCE("%s: gate and up experts have different act-order permutations; loaded separately",
				      s->gguf);
			memset(&st, 0, sizeof st);
			rc = qc_hfq_load(c->q, c->src, mod, &gt, c->err);
			if (!rc && (rc = qc_hfq_load(c->q, c->src, umod, &ut, c->err)))
				qc_hfq_tensor_free(&gt);
		}
		if (rc)
			break;
		max_err = st.max_abs_err > max_err ? st.max_abs_err : max_err;
		sum_sq += st.rms_err * st.rms_err;
		requant |= st.requantized;
		rc = add_decoded(c, s, &m, mod, paired ? umod : NULL, false, &gt, e);
		if (!rc)
			rc = add_decoded(c, u, &um, umod, paired ? mod : NULL, true, &ut, e);
		qc_hfq_tensor_free(&ut);
	}
	if (!rc)
		rc = finish_mat(c, s, &m);
	if (!rc && pair) {
		done[s->pair] = true;
		rc = finish_mat(c, u, &um);
		/* per fused tensor: [max |err|, rms err, re-quantized 0/1] over all experts */
		long layer = -1;
		sscanf(s->gguf, "blk.%ld.", &layer);
		char key[160];
		snprintf(key, sizeof key, "qconvert.fuse_error.blk.%ld.ffn_gate_up_exps.weight", layer);
		double v[3] = { max_err, sqrt_mean(sum_sq, n_mat), requant ? 1.0 : 0.0 };
		if (!rc)
			rc = qc_gguf_writer_add_arr(c->w, key, QC_GGUF_FLOAT64, v, 3, c->err);
	}
	return rc;
}

/* ---- the rest of the model ------------------------------------------------------ */

static int rope_freqs(struct conv *c)
{
	int64_t n = c->cfg.head_dim / 2;
	float *f = malloc(sizeof(float) * (size_t)n);
	int rc;
	if (!f)
		return qc_err_set(c->err, QC_ENOMEM, c->src->path, NULL, -1, "out of memory");
	if ((rc = own(c, f)))
		return rc;
	qc_hf_config_llama3_rope_factors(&c->cfg, f);
	struct otensor *o = new_ot(c, "rope_freqs.weight");
	if ((rc = seg_add(c, o, (const uint8_t *)f, sizeof(float) * (uint64_t)n)))
		return rc;
	return emit(c, o, QC_TYPE_F32, 1, &n);
}

/* LongRoPE's two tables as F32 tensors (llama.cpp's rope_factors_long/short.weight). */
static int rope_factor_tables(struct conv *c)
{
	static const char *const names[2] = {"rope_factors_long.weight", "rope_factors_short.weight"};
	const cJSON *tables[2] = {c->cfg.rope.long_factor, c->cfg.rope.short_factor};
	int64_t n = c->cfg.rope_dim / 2; /* one divisor per rotated pair (Phi-4-mini: 3/4 of a head) */
	int rc = QC_OK;
	for (int k = 0; k < 2 && !rc; k++) {
		float *f = malloc(sizeof(float) * (size_t)n);
		if (!f)
			return qc_err_set(c->err, QC_ENOMEM, c->src->path, names[k], -1, "out of memory");
		if ((rc = own(c, f)))
			return rc;
		qc_hf_config_rope_factors(tables[k], n, f);
		struct otensor *o = new_ot(c, names[k]);
		if (!(rc = seg_add(c, o, (const uint8_t *)f, sizeof(float) * (uint64_t)n)))
			rc = emit(c, o, QC_TYPE_F32, 1, &n);
	}
	return rc;
}

/* A tensor of a part no converter reads (a vision tower): its prefix is listed. */
static bool dropped(const struct conv *c, const char *name)
{
	for (const char *const *p = c->cfg.dropped; p && *p; p++)
		if (strncmp(name, *p, strlen(*p)) == 0)
			return true;
	return false;
}

static bool ignorable(const struct conv *c, const char *name)
{
	size_t n = strlen(name);
	static const char inv[] = ".rotary_emb.inv_freq";
	char head[sizeof c->cfg.head + 8];
	if (n > sizeof inv - 1 && strcmp(name + n - (sizeof inv - 1), inv) == 0)
		return true;
	snprintf(head, sizeof head, "%s.weight", c->cfg.head);
	return (c->cfg.tie_embeddings && strcmp(name, head) == 0) || dropped(c, name);
}

static int check_all_used(const struct conv *c)
{
	uint64_t n_dropped = 0;
	for (uint64_t i = 0; i < c->src->n_tensors; i++)
		n_dropped += !c->used[i] && dropped(c, c->src->tensors[i].name);
	if (n_dropped) /* said whatever the verbosity: part of the checkpoint is not in the bundle */
		fprintf(stderr, "qconvert: note: %s: %s: the text model only; %llu tensors of the vision tower and its "
			"projector are not converted\n", c->src->path, c->cfg.arch->hf_name, (unsigned long long)n_dropped);
	const size_t nh = strlen(c->cfg.head);
	for (uint64_t i = 0; i < c->src->n_tensors; i++) {
		const struct qc_hf_tensor *t = &c->src->tensors[i];
		/* a packed head (GPTQModel's lm_head=True) in a tied model: transformers would
		 * multiply by it, while the bundle reads the output from token_embd */
		if (!c->used[i] && c->cfg.tie_embeddings && strncmp(t->name, c->cfg.head, nh) == 0 &&
		    t->name[nh] == '.' && !ignorable(c, t->name))
			return qc_err_set(c->err, QC_EUNSUPPORTED, shard_path(c, t), t->name, (int64_t)t->t->hdr_off,
					  "a quantized output head (quant method %s) in a model with tied embeddings: "
					  "%s reads the output from the embedding; an output head of its own is not supported",
					  qc_hfq_method(c->q), c->cfg.arch->hf_name);
		if (!c->used[i] && !ignorable(c, t->name))
			return qc_err_set(c->err, QC_EUNSUPPORTED, shard_path(c, t), t->name, (int64_t)t->t->hdr_off,
					  "tensor not used by the %s converter (quant method %s); refusing to drop it",
					  c->cfg.arch->hf_name, qc_hfq_method(c->q));
	}
	return QC_OK;
}

static int tokenizer(struct conv *c)
{
	if (!c->src->tokenizer) {
		QC_WARN_ONCE("%s: no tokenizer.json; the bundle will have no tokenizer", c->src->path);
		return QC_OK;
	}
	char path[QC_ERR_NAME_MAX];
	snprintf(path, sizeof path, "%s/tokenizer.json", c->src->path);
	struct qc_hf_tok_src ts = {
		.tokenizer = c->src->tokenizer, .tokenizer_config = c->src->tokenizer_config,
		.config = c->src->config, .generation_config = c->src->generation_config,
		.path = path, .n_vocab = c->cfg.n_vocab,
	};
	return qc_hf_tokenizer_to_gguf(&ts, c->w, c->err);
}

/* ---- manifest source ------------------------------------------------------------ */

/* Base name of p without trailing slashes, into buf. */
static const char *base_of(const char *p, char *buf, size_t len)
{
	size_t n = strlen(p);
	while (n > 1 && p[n - 1] == '/')
		n--;
	const char *s = p + n;
	while (s > p && s[-1] != '/')
		s--;
	snprintf(buf, len, "%.*s", (int)(p + n - s), s);
	return buf;
}

static void add_file(cJSON *files, const char *name, uint64_t size, uint64_t h)
{
	char hex[17];
	snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
	cJSON *e = cJSON_CreateObject();
	cJSON_AddItemToArray(files, e);
	cJSON_AddStringToObject(e, "name", name);
	cJSON_AddNumberToObject(e, "size", (double)size);
	cJSON_AddStringToObject(e, "xxh3", hex);
}

/* XXH3-64 of a whole file read in chunks; QC_ENOTFOUND when absent. */
static int hash_file(const char *path, uint64_t *size, uint64_t *h, struct qc_err *err)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return errno == ENOENT ? QC_ENOTFOUND : qc_err_set(err, QC_EIO, path, NULL, -1, "cannot open: %s", strerror(errno));
	XXH3_state_t *st = XXH3_createState();
	char *buf = malloc(1 << 20);
	int rc = QC_OK;
	*size = 0;
	if (!st || !buf) {
		rc = qc_err_set(err, QC_ENOMEM, path, NULL, -1, "out of memory");
		goto out;
	}
	XXH3_64bits_reset(st);
	size_t n;
	while ((n = fread(buf, 1, 1 << 20, f)) > 0) {
		XXH3_64bits_update(st, buf, n);
		*size += n;
	}
	if (ferror(f))
		rc = qc_err_set(err, QC_EIO, path, NULL, -1, "read failed");
	*h = XXH3_64bits_digest(st);
out:
	free(buf);
	XXH3_freeState(st);
	fclose(f);
	return rc;
}

/* {"format": "hf", "architecture", "quant_method", "files": [{name, size, xxh3}]}:
 * a folder lists its JSON files and shards (names relative to it), an archive itself. */
static int source_json(const struct conv *c, cJSON **out, struct qc_err *err)
{
	cJSON *s = cJSON_CreateObject();
	if (!s)
		return qc_err_set(err, QC_ENOMEM, c->src->path, NULL, -1, "out of memory");
	cJSON_AddStringToObject(s, "format", "hf");
	cJSON_AddStringToObject(s, "architecture", c->cfg.arch->hf_name);
	cJSON_AddStringToObject(s, "quant_method", qc_hfq_method(c->q));
	cJSON *files = cJSON_AddArrayToObject(s, "files");
	uint64_t size, h;
	int rc = QC_OK;
	if (c->src->kind != QC_HF_KIND_DIR) {
		char b[256];
		if ((rc = hash_file(c->src->path, &size, &h, err)) == QC_OK)
			add_file(files, base_of(c->src->path, b, sizeof b), size, h);
	} else {
		static const char *const json[] = {
			"config.json", "generation_config.json", "model.safetensors.index.json",
			"quantize_config.json", "tokenizer.json", "tokenizer_config.json",
		};
		char p[4096];
		for (size_t i = 0; !rc && i < sizeof json / sizeof json[0]; i++) {
			snprintf(p, sizeof p, "%s/%s", c->src->path, json[i]);
			rc = hash_file(p, &size, &h, err);
			if (rc == QC_ENOTFOUND)
				rc = QC_OK;
			else if (!rc)
				add_file(files, json[i], size, h);
		}
		for (int i = 0; !rc && i < c->src->n_shards; i++) {
			const struct qc_st *st = c->src->shards[i].st;
			add_file(files, c->src->shards[i].name, st->size, XXH3_64bits(st->map, (size_t)st->size));
		}
	}
	if (rc) {
		cJSON_Delete(s);
		return rc;
	}
	*out = s;
	return QC_OK;
}

/* ---- entry points ------------------------------------------------------------- */

/* Re-address err to path (keeping tensor, offset and message). */
static void reblame(struct qc_err *err, int code, const char *path)
{
	char tensor[QC_ERR_NAME_MAX], msg[QC_ERR_MSG_MAX];
	snprintf(tensor, sizeof tensor, "%s", err->tensor);
	snprintf(msg, sizeof msg, "%s", err->msg);
	qc_err_set(err, code, path, tensor[0] ? tensor : NULL, err->off, "%s", msg);
}

int qc_hf_to_gguf(const char *in, const char *gguf_path, cJSON **source, int verbose, struct qc_err *err)
{
	struct conv c = { .err = err };
	struct qc_hf_source *src = NULL;
	struct qc_hf_tspec *specs = NULL;
	bool *done = NULL;
	size_t n_specs = 0;
	int rc = qc_hf_open(in, &src, err);
	if (source)
		*source = NULL;
	if (rc)
		return rc;
	c.src = src;
	if ((rc = qc_hfq_open(src, &c.q, err)) || (rc = qc_hf_config_parse(src, &c.cfg, err)) ||
	    (rc = qc_hf_names_build(&c.cfg, &specs, &n_specs, err)))
		goto out;
	c.cap_ot = 2 * n_specs + 6;
	c.ot = calloc(c.cap_ot, sizeof *c.ot);
	c.used = calloc((size_t)src->n_tensors + 1, sizeof *c.used);
	done = calloc(n_specs + 1, sizeof *done);
	c.w = qc_gguf_writer_new(3, 0);
	if (!c.ot || !c.used || !done || !c.w) {
		rc = qc_err_set(err, QC_ENOMEM, in, NULL, -1, "out of memory");
		goto out;
	}
	qc_gguf_writer_set_flags(c.w, QC_GGUF_WRITE_DEFAULT);
	char name[256];
	base_of(in, name, sizeof name);
	if ((rc = qc_hf_config_to_gguf(&c.cfg, c.w, err)) ||
	    (rc = qc_gguf_writer_add_str(c.w, "general.name", name, err)) || (rc = tokenizer(&c)))
		goto out;
	for (size_t i = 0; !rc && i < n_specs; i++) {
		if (done[i])
			continue;
		rc = specs[i].kind == QC_HF_T_VECTOR ? vector(&c, &specs[i]) : matrix(&c, specs, i, done);
		if (!rc && i == 0 && c.cfg.rope.type == QC_HF_ROPE_LLAMA3)
			rc = rope_freqs(&c);
		if (!rc && i == 0 && c.cfg.rope.type == QC_HF_ROPE_LONGROPE)
			rc = rope_factor_tables(&c);
	}
	if (!rc)
		rc = check_all_used(&c);
	if (!rc && verbose && c.cfg.tie_embeddings)
		fprintf(stderr, "qconvert: note: %s: tied embeddings (no output.weight)\n", name);
	if (!rc) {
		rc = qc_gguf_writer_write_file(c.w, gguf_path, err);
		if (rc && c.fill_err.code) /* a decode inside fill: its message says more */
			*err = c.fill_err;
	}
	if (!rc && source)
		rc = source_json(&c, source, err);
out:
	if (rc && !err->path[0])
		reblame(err, rc, in);
	qc_gguf_writer_free(c.w);
	for (size_t i = 0; c.ot && i < c.n_ot; i++) {
		lazy_drop(&c.ot[i]);
		free(c.ot[i].segs);
	}
	free(c.ot);
	for (size_t i = 0; i < c.n_owned; i++)
		free(c.owned[i]);
	free(c.owned);
	free(c.used);
	free(done);
	free(specs);
	qc_hfq_close(c.q);
	qc_hf_close(src);
	return rc;
}

static char tmp_path[4096];
static volatile int tmp_live;

const char *qc_hf_convert_tmp_path(void)
{
	return tmp_live ? tmp_path : NULL;
}

int qc_convert_hf(const struct qc_convert_opts *o, struct qc_convert_stats *st, struct qc_err *err)
{
	/* the temporary GGUF lives beside the output, so it is on the same filesystem */
	const char *slash = strrchr(o->out, '/');
	int dir_len = slash ? (int)(slash - o->out) + 1 : 0;
	if ((size_t)snprintf(tmp_path, sizeof tmp_path, "%.*s.%s.hf-gguf.XXXXXX", dir_len, o->out,
			     o->out + dir_len) >= sizeof tmp_path)
		return qc_err_set(err, QC_EINVAL, o->out, NULL, -1, "output path too long");
	int fd = mkstemp(tmp_path);
	if (fd < 0)
		return qc_err_set(err, QC_EIO, o->out, NULL, -1, "cannot create a temporary file beside it: %s",
				  strerror(errno));
	close(fd);
	tmp_live = 1;
	cJSON *source = NULL;
	int rc = qc_hf_to_gguf(o->in, tmp_path, &source, o->verbose, err);
	if (!rc) {
		struct qc_convert_opts g = *o;
		g.in = tmp_path;
		g.in_label = o->in;
		g.source = source;
		rc = qc_convert_gguf(&g, st, err);
		if (rc && strcmp(err->path, tmp_path) == 0) /* name the user's input, not our temp file */
			reblame(err, rc, o->in);
		if (!rc && st) { /* report the input's size, not the temporary GGUF's */
			const cJSON *f;
			st->in_bytes = 0;
			cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(source, "files"))
				st->in_bytes += (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(f, "size"));
		}
	}
	unlink(tmp_path);
	tmp_live = 0;
	cJSON_Delete(source);
	return rc;
}

void qc_hf_default_out(const char *in, enum qc_target tgt, char *buf, size_t len)
{
	size_t n = strlen(in);
	while (n > 1 && in[n - 1] == '/')
		n--;
	static const char *const ext[] = { ".tar.gz", ".tgz", ".tar.xz", ".tar.zst", ".tar", ".zip" };
	for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
		size_t e = strlen(ext[i]);
		if (n > e && strncmp(in + n - e, ext[i], e) == 0) {
			n -= e;
			break;
		}
	}
	snprintf(buf, len, "%.*s.%s.qb", (int)n, in, qc_target_name(tgt));
}
