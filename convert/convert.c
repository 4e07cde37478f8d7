/* convert.c — GGUF to bundle, streaming:
 *   open source → hash source files → config/tokenizer/metadata → plan tensors →
 *   for each tensor { stream parts (fused: per expert, gate rows then up rows) →
 *   hash → write } → manifest → fsync → rename.
 * Source bytes go through one reused buffer (pread), so peak memory does not grow
 * with the model. Output is byte-identical across runs (no
 * timestamps, paths reduced to base names). */
#include "convert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "bundle.h"
#include "gguf_meta.h"
#include "plan.h"
#include "progress.h"
#include "qc_config.h"

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

void qc_convert_default_out(const char *in, enum qc_target tgt, char *buf, size_t len)
{
	const char *b = base_name(in);
	size_t n = strlen(b);
	size_t dir = (size_t)(b - in);
	const char *ext = ".gguf";
	if (n > 5 && strcmp(b + n - 5, ext) == 0)
		n -= 5;
	int no, cnt;
	if (n > 15 && sscanf(b + n - 15, "-%5d-of-%5d", &no, &cnt) == 2)
		n -= 15;
	snprintf(buf, len, "%.*s%.*s.%s.qb", (int)dir, in, (int)n, b, qc_target_name(tgt));
}

static int hash_sources(const struct qc_gguf_model *m, cJSON *src, uint8_t *buf, struct qc_progress *pr,
			struct qc_err *err)
{
	cJSON *files = cJSON_AddArrayToObject(src, "files");
	XXH3_state_t *st = XXH3_createState();
	int rc = QC_OK;
	if (!files || !st) {
		XXH3_freeState(st);
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	}
	for (int f = 0; !rc && f < m->n_files; f++) {
		const struct qc_gguf *g = m->files[f];
		XXH3_64bits_reset(st);
		for (uint64_t o = 0; !rc && o < g->size; o += QC_STREAM_CHUNK) {
			uint64_t n = g->size - o < QC_STREAM_CHUNK ? g->size - o : QC_STREAM_CHUNK;
			rc = qc_map_pread(&g->file, buf, o, n, err);
			if (!rc)
				XXH3_64bits_update(st, buf, (size_t)n);
			qc_progress_add(pr, n);
		}
		char hex[17];
		qc_bundle_hash_hex(XXH3_64bits_digest(st), hex);
		cJSON *e = cJSON_CreateObject();
		cJSON_AddItemToArray(files, e);
		cJSON_AddStringToObject(e, "name", base_name(g->path));
		cJSON_AddNumberToObject(e, "size", (double)g->size);
		cJSON_AddStringToObject(e, "xxh3", hex);
	}
	XXH3_freeState(st);
	return rc;
}

/* Copy [off, off+n) of source file g into the open member through buf, in bounded
 * chunks. pread into one reused buffer beats faulting the mapping in: the bytes are
 * touched once by the kernel copy, then hashed and written while still in cache. */
static int stream(struct qc_bundle_writer *w, const struct qc_gguf *g, uint64_t off, uint64_t n, uint8_t *buf,
		  struct qc_progress *pr, struct qc_err *err)
{
	while (n) {
		uint64_t k = n < QC_STREAM_CHUNK ? n : QC_STREAM_CHUNK;
		const uint8_t *src = g->map + off;
		if (g->file.fd >= 0) {
			int rc = qc_map_pread(&g->file, buf, off, k, err);
			if (rc)
				return rc;
			src = buf;
		}
		int rc = qc_bundle_writer_write(w, src, k, err);
		if (rc)
			return rc;
		qc_progress_add(pr, k);
		off += k;
		n -= k;
	}
	return QC_OK;
}

static int write_tensor(const struct qc_gguf_model *m, struct qc_bundle_writer *w, struct qc_plan_tensor *t,
			uint8_t *buf, struct qc_progress *pr, struct qc_err *err)
{
	int rc = qc_bundle_writer_begin(w, t->name, t->size, &t->off, err);
	if (rc)
		return rc;
	uint64_t row;
	QC_ASSERT(t->layout == QC_LAYOUT_GGML); /* other layouts pack through a buffer (CUDA issue) */
	QC_ASSERT(qc_type_row_bytes(t->type, (uint64_t)t->ne[0], &row) == QC_OK);
	if (t->n_parts == 1) {
		const struct qc_gguf_tensor *s = t->parts[0].src;
		rc = stream(w, m->files[s->file_idx], s->data_off, s->n_bytes, buf, pr, err);
	} else {
		uint64_t slices = (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
		for (uint64_t sl = 0; !rc && sl < slices; sl++)
			for (int k = 0; !rc && k < t->n_parts; k++) {
				const struct qc_plan_part *pp = &t->parts[k];
				uint64_t span = (uint64_t)pp->n_rows * row;
				rc = stream(w, m->files[pp->src->file_idx], pp->src->data_off + sl * span, span, buf, pr, err);
			}
	}
	if (!rc)
		rc = qc_bundle_writer_end(w, &t->xxh3, err);
	return rc;
}

static cJSON *tensor_json(const struct qc_plan_tensor *t)
{
	cJSON *j = cJSON_CreateObject();
	char hex[17];
	cJSON_AddStringToObject(j, "name", t->name);
	cJSON *ne = cJSON_AddArrayToObject(j, "ne");
	for (uint32_t d = 0; d < t->n_dims; d++)
		cJSON_AddItemToArray(ne, cJSON_CreateNumber((double)t->ne[d]));
	cJSON *enc = cJSON_AddObjectToObject(j, "encoding");
	cJSON_AddStringToObject(enc, "type", qc_type_get(t->type)->name);
	cJSON_AddStringToObject(enc, "layout", qc_layout_name(t->layout));
	cJSON_AddNumberToObject(enc, "layout_id", t->layout);
	cJSON_AddObjectToObject(enc, "params");
	cJSON_AddNumberToObject(j, "offset", (double)t->off);
	cJSON_AddNumberToObject(j, "size", (double)t->size);
	qc_bundle_hash_hex(t->xxh3, hex);
	cJSON_AddStringToObject(j, "xxh3", hex);
	if (t->n_parts > 1) {
		cJSON *parts = cJSON_AddArrayToObject(j, "parts");
		for (int k = 0; k < t->n_parts; k++) {
			cJSON *p = cJSON_CreateObject();
			cJSON_AddItemToArray(parts, p);
			cJSON_AddStringToObject(p, "name", t->parts[k].src->name);
			cJSON_AddNumberToObject(p, "row0", (double)t->parts[k].row0);
			cJSON_AddNumberToObject(p, "rows", (double)t->parts[k].n_rows);
		}
	}
	return j;
}

int qc_convert_gguf(const struct qc_convert_opts *o, struct qc_convert_stats *st, struct qc_err *err)
{
	struct qc_gguf_model *m = NULL;
	struct qc_plan *plan = NULL;
	struct qc_bundle_writer *w = NULL;
	struct qc_progress pr;
	double t0 = qc_now();
	cJSON *man = cJSON_CreateObject();
	uint8_t *buf = malloc(QC_STREAM_CHUNK);
	if (!man || !buf)
		return qc_err_set(err, QC_ENOMEM, o->in, NULL, -1, "out of memory");
	int rc = qc_gguf_model_open(o->in, &m, err);
	if (rc)
		goto out;
	rc = qc_plan_build(m, o->target, o->plan_flags, &plan, err);
	if (rc) {
		if (!err->path[0])
			qc_err_set(err, rc, o->in, err->tensor, err->off, "%s", err->msg);
		goto out;
	}
	if (o->verbose)
		for (int i = 0; i < plan->n_notes; i++)
			fprintf(stderr, "qconvert: note: %s\n", plan->notes[i]);
	uint64_t in_total = 0;
	for (int f = 0; f < m->n_files; f++)
		in_total += m->files[f]->size;
	qc_progress_init(&pr, "converting", in_total + plan->total_bytes);

	cJSON_AddStringToObject(man, "format", "qconvert-bundle");
	cJSON *ver = cJSON_AddArrayToObject(man, "version");
	cJSON_AddItemToArray(ver, cJSON_CreateNumber(QC_BUNDLE_MAJOR));
	cJSON_AddItemToArray(ver, cJSON_CreateNumber(QC_BUNDLE_MINOR));
	cJSON *conv = cJSON_AddObjectToObject(man, "converter");
	cJSON_AddStringToObject(conv, "name", "qconvert");
	cJSON_AddStringToObject(conv, "version", QC_VERSION);
	cJSON_AddStringToObject(man, "target", qc_target_name(o->target));
	cJSON_AddNumberToObject(man, "alignment", o->alignment);
	cJSON *src = cJSON_AddObjectToObject(man, "source");
	cJSON_AddStringToObject(src, "format", "gguf");
	cJSON_AddNumberToObject(src, "gguf_version", m->files[0]->version);
	rc = hash_sources(m, src, buf, &pr, err);
	if (!rc)
		rc = qc_meta_from_gguf(m, man, err);
	if (!rc)
		rc = qc_bundle_writer_open(o->out, o->alignment, &w, err);
	cJSON *tensors = cJSON_AddArrayToObject(man, "tensors");
	for (uint64_t i = 0; !rc && i < plan->n; i++) {
		rc = write_tensor(m, w, &plan->t[i], buf, &pr, err);
		if (!rc && !cJSON_AddItemToArray(tensors, tensor_json(&plan->t[i])))
			rc = qc_err_set(err, QC_ENOMEM, o->out, NULL, -1, "out of memory");
	}
	if (!rc) {
		rc = qc_bundle_writer_finish(w, man, err);
		w = NULL;
	}
	qc_progress_done(&pr);
	if (!rc && st) {
		st->in_bytes = in_total;
		st->out_bytes = plan->total_bytes;
		st->n_tensors = plan->n;
		st->seconds = qc_now() - t0;
	}
out:
	qc_bundle_writer_abort(w);
	qc_plan_free(plan);
	qc_gguf_model_close(m);
	cJSON_Delete(man);
	free(buf);
	return rc;
}
