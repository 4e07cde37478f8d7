/* dump.c — dequantize a tensor to float32 (see dump.h). Works a bounded number of
 * rows at a time; all decoding goes through the type-traits table. A bundle weight
 * with a "<base>.act_perm" tensor (I32 [K], GPTQ/compressed-tensors act-order,
 * convert/hf_quant.h) is written with its columns back in the checkpoint's order. */
#include "dump.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bundle_tp.h"
#include "tp_rules.h"

#define ROWS_BUF_BYTES (4u << 20)

/* As qc_dump_rows; perm (ne0 entries, or NULL): stored column j is column perm[j]. */
static int dump_rows_perm(enum qc_type type, int64_t ne0, const uint8_t *rows, uint64_t n_rows,
			  const int32_t *perm, FILE *out, struct qc_err *err)
{
	const struct qc_type_traits *tt = qc_type_get(type);
	uint64_t row_bytes;
	if (qc_type_row_bytes(type, (uint64_t)ne0, &row_bytes))
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "row length %lld does not fit %s", (long long)ne0,
				  tt->name);
	float *buf = malloc((size_t)ne0 * sizeof(float) * (perm ? 2 : 1) + 1);
	if (!buf)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory for a %lld-element row", (long long)ne0);
	float *row = perm ? buf + ne0 : buf;
	int rc = QC_OK;
	for (uint64_t r = 0; r < n_rows; r++) {
		tt->dequant_row(rows + r * row_bytes, buf, ne0);
		for (int64_t j = 0; perm && j < ne0; j++)
			row[perm[j]] = buf[j];
		if (fwrite(row, sizeof(float), (size_t)ne0, out) != (size_t)ne0) {
			rc = qc_err_set(err, QC_EIO, NULL, NULL, -1, "write failed: %s", strerror(errno));
			break;
		}
	}
	free(buf);
	return rc;
}

int qc_dump_rows(enum qc_type type, int64_t ne0, const uint8_t *rows, uint64_t n_rows, FILE *out,
		 struct qc_err *err)
{
	return dump_rows_perm(type, ne0, rows, n_rows, NULL, out, err);
}

int qc_dump_gguf(const struct qc_gguf_model *m, const char *name, FILE *out, struct qc_err *err)
{
	const struct qc_gguf_tensor *t = qc_gguf_model_find(m, name);
	if (!t)
		return qc_err_set(err, QC_ENOTFOUND, m->files[0]->path, name, -1, "no such tensor");
	uint64_t rows = t->ne[0] ? t->n_elems / (uint64_t)t->ne[0] : 0;
	int rc = qc_dump_rows(t->type, t->ne[0], qc_gguf_model_data(m, t), rows, out, err);
	if (rc)
		qc_err_set(err, rc, m->files[t->file_idx]->path, name, (int64_t)t->data_off, "%s", err->msg);
	return rc;
}

/* Rows [row0, row0+n) of t's flattened [rows, ne0] view, unpacked then decoded. */
static int dump_span(const struct qc_bundle *b, const struct qc_bundle_tensor *t, uint64_t row0, uint64_t n,
		     const int32_t *perm, FILE *out, struct qc_err *err)
{
	uint64_t row_bytes;
	QC_ASSERT(qc_type_row_bytes(t->type, (uint64_t)t->ne[0], &row_bytes) == QC_OK);
	uint64_t per = row_bytes ? ROWS_BUF_BYTES / row_bytes : n;
	if (per == 0)
		per = 1;
	uint8_t *buf = malloc((size_t)((per < n ? per : n) * row_bytes) + 1);
	if (!buf)
		return qc_err_set(err, QC_ENOMEM, b->path, t->name, -1, "out of memory");
	int rc = QC_OK;
	for (uint64_t r = 0; !rc && r < n; r += per) {
		uint64_t k = n - r < per ? n - r : per;
		rc = qc_layout_unpack_rows(t->layout, t->type, t->ne, qc_bundle_data(b, t), row0 + r, k, buf, err);
		if (!rc)
			rc = dump_rows_perm(t->type, t->ne[0], buf, k, perm, out, err);
	}
	free(buf);
	return rc;
}

/* The act_perm of weight `name` ("x.weight" -> "x.act_perm"), checked to be an I32
 * permutation of t's ne[0] columns, one per ne[2] slice for stacked experts
 * ([K, n_expert], hf_convert.c; or [K] shared by all); *perm NULL when there is none,
 * else *n_perm (1 or the slice count) permutations of ne[0] entries. */
static int load_act_perm(const struct qc_bundle *b, const char *name, const struct qc_bundle_tensor *t,
			 int32_t **perm, int64_t *n_perm, struct qc_err *err)
{
	char pn[512];
	size_t n = strlen(name);
	*perm = NULL;
	if (n > 7 && strcmp(name + n - 7, ".weight") == 0)
		n -= 7;
	if (n + sizeof ".act_perm" > sizeof pn)
		return QC_OK;
	memcpy(pn, name, n);
	memcpy(pn + n, ".act_perm", sizeof ".act_perm");
	const struct qc_bundle_tensor *p = qc_bundle_find(b, pn);
	if (!p)
		return QC_OK;
	const int64_t k = t->ne[0], slices = t->ne[2] * t->ne[3];
	if (p->type != QC_TYPE_I32 || p->ne[0] != k || (p->ne[1] != 1 && p->ne[1] != slices) || p->ne[2] != 1 ||
	    p->ne[3] != 1)
		return qc_err_set(err, QC_EFORMAT, b->path, pn, (int64_t)p->off, "act_perm must be i32 [%lld] or [%lld, %lld]",
				  (long long)k, (long long)k, (long long)slices);
	const int64_t np = p->ne[1];
	int32_t *v = malloc((size_t)(k * np) * sizeof *v + 1);
	uint8_t *seen = calloc((size_t)k + 1, 1);
	int rc = v && seen ? qc_layout_unpack_rows(p->layout, p->type, p->ne, qc_bundle_data(b, p), 0, (uint64_t)np,
						   (uint8_t *)v, err)
			   : qc_err_set(err, QC_ENOMEM, b->path, pn, -1, "out of memory");
	for (int64_t j = 0; !rc && j < k * np; j++) {
		if (j % k == 0)
			memset(seen, 0, (size_t)k);
		if (v[j] < 0 || v[j] >= k || seen[v[j]]++)
			rc = qc_err_set(err, QC_EFORMAT, b->path, pn, (int64_t)p->off + 4 * j,
					"act_perm[%lld] = %d is out of range or repeated", (long long)j, v[j]);
	}
	*n_perm = np;
	free(seen);
	if (rc)
		free(v);
	else
		*perm = v;
	return rc;
}

/* A member (or a fused part of one) and its act-order permutation, for dumping rows. */
struct member {
	const struct qc_bundle_tensor *t;
	const struct qc_bundle_part *part;  /* NULL: the whole member */
	int32_t *perm;                      /* NULL or n_perm permutations of ne[0] */
	int64_t n_perm;
};

static int member_open(const struct qc_bundle *b, const char *name, struct member *mb, struct qc_err *err)
{
	memset(mb, 0, sizeof *mb);
	mb->n_perm = 1;
	mb->t = qc_bundle_find(b, name);
	if (!mb->t)
		mb->t = qc_bundle_find_part(b, name, &mb->part);
	if (!mb->t)
		return qc_err_set(err, QC_ENOTFOUND, b->path, name, -1, "no such tensor (nor a part of a fused one)");
	/* a fused part shares its fused tensor's permutation (hf_quant.h: pairs only fuse with equal ones) */
	int rc = load_act_perm(b, name, mb->t, &mb->perm, &mb->n_perm, err);
	if (!rc && !mb->perm && mb->part)
		rc = load_act_perm(b, mb->t->name, mb->t, &mb->perm, &mb->n_perm, err);
	return rc;
}

static void member_close(struct member *mb)
{
	free(mb->perm);
	mb->perm = NULL;
}

/* Rows of the member's rows [r0, r0 + n) of slice s (a part: counted from its row0). */
static int member_rows(const struct qc_bundle *b, const struct member *mb, uint64_t s, uint64_t r0, uint64_t n,
		       FILE *out, struct qc_err *err)
{
	const struct qc_bundle_tensor *t = mb->t;
	const uint64_t row0 = (mb->part ? (uint64_t)mb->part->row0 : 0) + r0;
	return dump_span(b, t, s * (uint64_t)t->ne[1] + row0, n,
			 mb->perm && mb->n_perm > 1 ? mb->perm + s * (uint64_t)t->ne[0] : mb->perm, out, err);
}

/* Rows of a member a slice holds (a fused part's, or all of its ne[1]). */
static uint64_t member_n_rows(const struct member *mb)
{
	return mb->part ? (uint64_t)mb->part->n_rows : (uint64_t)mb->t->ne[1];
}

static int dump_member(const struct qc_bundle *b, const char *name, FILE *out, struct qc_err *err)
{
	struct member mb;
	int rc = member_open(b, name, &mb, err);
	if (rc) {
		member_close(&mb);
		return rc;
	}
	const struct qc_bundle_tensor *t = mb.t;
	const uint64_t slices = (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
	if (!mb.part && mb.n_perm == 1)
		rc = dump_span(b, t, 0, t->ne[0] ? (uint64_t)t->ne[1] * slices : 0, mb.perm, out, err);
	else
		for (uint64_t s = 0; !rc && s < slices; s++)
			rc = member_rows(b, &mb, s, 0, member_n_rows(&mb), out, err);
	member_close(&mb);
	if (rc)
		qc_err_set(err, rc, b->path, t->name, (int64_t)t->off, "%s", err->msg);
	return rc;
}

/* ---- a --tp bundle: an original tensor put back together from the ranks' shards --- */

struct tp_ctx {
	const struct qc_bundle *b;
	int n;
};

/* A layer's FFN width: rank 0's down matrix (split by columns) times the ranks. */
static int64_t tp_ff(const void *ctx, long layer, enum qc_tp_unit u)
{
	const struct tp_ctx *c = ctx;
	static const char *const down[QC_TP_U_COUNT] = {
		[QC_TP_U_FF] = "ffn_down.weight",
		[QC_TP_U_FF_EXP] = "ffn_down_exps.weight",
		[QC_TP_U_FF_SHEXP] = "ffn_down_shexp.weight",
	};
	char n[128];
	if ((unsigned)u >= QC_TP_U_COUNT || !down[u])
		return -1;
	snprintf(n, sizeof n, "blk.%ld.%s", layer, down[u]);
	const struct qc_bundle_tensor *t = qc_bundle_tp_find(c->b, 0, n);
	return t ? t->ne[0] * c->n : -1;
}

static int64_t cfg_num(const cJSON *cfg, const char *key, int64_t def)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(cfg, key);
	return cJSON_IsNumber(x) ? (int64_t)x->valuedouble : def;
}

/* A 1-D tensor split by elements: each rank's vector decoded whole, then the
 * sections' parts in order. */
static int tp_vector(const struct qc_bundle *b, const struct qc_bundle_tp *tp, const char *name,
		     const struct qc_tp_cut *c, FILE *out, struct qc_err *err)
{
	const int n = tp->size;
	float *v[QC_TP_MAX] = { NULL };
	int rc = QC_OK;
	for (int r = 0; !rc && r < n; r++) {
		const struct qc_bundle_tensor *t = qc_bundle_tp_find(b, r, name);
		uint64_t rb;
		uint8_t *row = NULL;
		if (!t || t->n_dims != 1 || qc_type_row_bytes(t->type, (uint64_t)t->ne[0], &rb)) {
			rc = qc_err_set(err, QC_EFORMAT, b->path, name, -1, "rank %d's shard is missing or not a vector", r);
			break;
		}
		v[r] = malloc((size_t)t->ne[0] * sizeof(float) + 1);
		row = malloc((size_t)rb + 1);
		rc = v[r] && row ? qc_layout_unpack_rows(t->layout, t->type, t->ne, qc_bundle_data(b, t), 0, 1, row, err)
				 : qc_err_set(err, QC_ENOMEM, b->path, name, -1, "out of memory");
		if (!rc)
			qc_type_get(t->type)->dequant_row(row, v[r], t->ne[0]);
		free(row);
	}
	for (int s = 0; !rc && s < c->n_sections; s++)
		for (int r = 0; !rc && r < n; r++) {
			const int64_t w = c->size[s] / n, at = c->off[s] / n; /* rank r's section s in its shard */
			if (fwrite(v[r] + at, sizeof(float), (size_t)w, out) != (size_t)w)
				rc = qc_err_set(err, QC_EIO, NULL, NULL, -1, "write failed: %s", strerror(errno));
		}
	for (int r = 0; r < n; r++)
		free(v[r]);
	return rc;
}

/* Split by input columns: per slice, per chunk of rows, each rank's rows unpacked to
 * ggml blocks and laid side by side (the cut is on block boundaries, so the
 * concatenated bytes are the original row), then decoded. */
static int tp_cols(const struct qc_bundle *b, const struct member *mb, int n, FILE *out, struct qc_err *err)
{
	const struct qc_bundle_tensor *t0 = mb[0].t;
	uint64_t rb, ne0 = 0, rows = member_n_rows(&mb[0]);
	for (int r = 0; r < n; r++) {
		if (mb[r].perm || mb[r].part || mb[r].t->type != t0->type || mb[r].t->ne[1] != t0->ne[1] ||
		    mb[r].t->ne[2] != t0->ne[2] || mb[r].t->ne[3] != t0->ne[3])
			return qc_err_set(err, QC_EFORMAT, b->path, mb[r].t->name, -1,
					  "column shards of different shapes or encodings (or permuted)");
		ne0 += (uint64_t)mb[r].t->ne[0];
	}
	if (qc_type_row_bytes(t0->type, ne0, &rb))
		return qc_err_set(err, QC_EFORMAT, b->path, t0->name, -1, "columns do not add up to whole blocks");
	const uint64_t per = rb && rb < ROWS_BUF_BYTES ? ROWS_BUF_BYTES / rb : 1;
	const uint64_t slices = (uint64_t)t0->ne[2] * (uint64_t)t0->ne[3];
	uint8_t *whole = malloc((size_t)(per * rb) + 1), *part = malloc((size_t)(per * rb) + 1);
	int rc = whole && part ? QC_OK : qc_err_set(err, QC_ENOMEM, b->path, t0->name, -1, "out of memory");
	for (uint64_t s = 0; !rc && s < slices; s++)
		for (uint64_t i = 0; !rc && i < rows; i += per) {
			const uint64_t k = rows - i < per ? rows - i : per;
			uint64_t at = 0;
			for (int r = 0; !rc && r < n; r++) {
				const struct qc_bundle_tensor *t = mb[r].t;
				uint64_t prb;
				QC_ASSERT(qc_type_row_bytes(t->type, (uint64_t)t->ne[0], &prb) == QC_OK);
				rc = qc_layout_unpack_rows(t->layout, t->type, t->ne, qc_bundle_data(b, t),
							   s * (uint64_t)t->ne[1] + i, k, part, err);
				for (uint64_t j = 0; !rc && j < k; j++)
					memcpy(whole + j * rb + at, part + j * prb, (size_t)prb);
				at += prb;
			}
			if (!rc)
				rc = qc_dump_rows(t0->type, (int64_t)ne0, whole, k, out, err);
		}
	free(whole);
	free(part);
	return rc;
}

/* Split by rows: per slice, per section, each rank's part of it, in order. */
static int tp_rows(const struct qc_bundle *b, const struct member *mb, int n, const struct qc_tp_cut *c, FILE *out,
		   struct qc_err *err)
{
	const uint64_t slices = (uint64_t)mb[0].t->ne[2] * (uint64_t)mb[0].t->ne[3];
	int rc = QC_OK;
	for (uint64_t s = 0; !rc && s < slices; s++)
		for (int k = 0; !rc && k < c->n_sections; k++)
			for (int r = 0; !rc && r < n; r++)
				rc = member_rows(b, &mb[r], s, (uint64_t)(c->off[k] / n), (uint64_t)(c->size[k] / n), out,
						 err);
	return rc;
}

static int dump_tp(const struct qc_bundle *b, const struct qc_bundle_tp *tp, const char *name, FILE *out,
		   struct qc_err *err)
{
	const int n = tp->size;
	const struct qc_tp_rule *rule = qc_tp_rule_of(name);
	const struct qc_bundle_part *part;
	char m0[QC_TP_PREFIX_MAX + 256];
	snprintf(m0, sizeof m0, "tp0.%s", name);
	if (!rule || (!qc_bundle_find(b, m0) && !qc_bundle_tp_find_part(b, 0, name, &part)))
		return qc_err_set(err, QC_ENOTFOUND, b->path, name, -1,
				  "no such tensor (nor a part of a fused one, nor an original tensor of this --tp %d bundle)", n);
	if (rule->split == QC_TP_REPLICATE || rule->split == QC_TP_PERM)
		return dump_member(b, m0, out, err); /* the same on every rank */
	struct member mb[QC_TP_MAX];
	int rc = QC_OK, opened = 0;
	for (; !rc && opened < n; opened++) {
		char nm[QC_TP_PREFIX_MAX + 256];
		snprintf(nm, sizeof nm, "tp%d.%s", opened, name);
		rc = member_open(b, nm, &mb[opened], err);
	}
	if (!rc && rule->split == QC_TP_VOCAB) {
		for (int r = 0; !rc && r < n; r++)
			for (uint64_t s = 0; !rc && s < (uint64_t)(mb[r].t->ne[2] * mb[r].t->ne[3]); s++)
				rc = member_rows(b, &mb[r], s, 0, member_n_rows(&mb[r]), out, err);
	} else if (!rc && rule->split == QC_TP_COLS) {
		rc = tp_cols(b, mb, n, out, err);
	} else if (!rc) { /* rows: cut the whole tensor's extent as the converter did */
		const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(b->manifest, "config");
		const struct tp_ctx ctx = { b, n };
		const int64_t hk = cfg_num(cfg, "head_dim_k", 0);
		const struct qc_tp_dims d = { cfg_num(cfg, "n_head", 0), cfg_num(cfg, "n_head_kv", cfg_num(cfg, "n_head", 0)),
					      hk, cfg_num(cfg, "head_dim_v", hk), tp_ff, &ctx };
		const struct qc_bundle_tensor *t = mb[0].t;
		int64_t ne[4] = { t->ne[0], (int64_t)member_n_rows(&mb[0]), t->ne[2], t->ne[3] };
		ne[t->n_dims == 1 ? 0 : 1] *= n;
		struct qc_tp_cut c;
		rc = qc_tp_cut(name, ne, t->n_dims, &d, n, &c, err);
		if (!rc)
			rc = t->n_dims == 1 ? tp_vector(b, tp, name, &c, out, err) : tp_rows(b, mb, n, &c, out, err);
	}
	for (int r = 0; r < opened; r++)
		member_close(&mb[r]);
	if (rc && !err->path[0])
		qc_err_set(err, rc, b->path, name, -1, "%s", err->msg);
	return rc;
}

int qc_dump_bundle(const struct qc_bundle *b, const char *name, FILE *out, struct qc_err *err)
{
	struct qc_bundle_tp tp;
	const struct qc_bundle_part *part;
	int rc = qc_bundle_tp_read(b, &tp, err);
	if (rc)
		return rc;
	if (tp.size && !qc_bundle_find(b, name) && !qc_bundle_find_part(b, name, &part))
		return dump_tp(b, &tp, name, out, err);
	return dump_member(b, name, out, err);
}
