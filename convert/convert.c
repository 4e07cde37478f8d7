/* convert.c — GGUF to bundle, streaming:
 *   open source → hash source files → config/tokenizer/metadata → plan tensors →
 *   for each tensor { stream parts (fused: per expert, gate rows then up rows) →
 *   hash → write } → manifest → fsync → rename.
 * Tensor bytes are copied file to file in the kernel and hashed through the mapping,
 * whose windows are dropped from RSS as soon as they are done, so peak memory does
 * not grow with the model. Output is byte-identical across runs (no
 * timestamps, paths reduced to base names). */
#include "convert.h"
#include "pack_par.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "arch.h"
#include "bundle.h"
#include "bundle_tp.h"
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

/* The output must not be one of the inputs under another name (the same path, a
 * symlink or a hard link): the final rename would replace the source with the
 * bundle. Identity is st_dev/st_ino, so every spelling of the same file matches. */
static int refuse_same(const struct stat *out, const char *out_path, const struct stat *in, const char *in_path,
		       struct qc_err *err)
{
	if (out->st_dev != in->st_dev || out->st_ino != in->st_ino)
		return QC_OK;
	return qc_err_set(err, QC_EINVAL, out_path, NULL, -1,
			  "output is the input file %s (the same file, or a link to it); it would be replaced: "
			  "choose another -o", in_path);
}

/* Every regular file under dir (symlinks followed, depth-limited: an HF folder is
 * flat, a snapshot cache one or two levels deep). */
static int check_dir(const struct stat *out, const char *out_path, const char *dir, int depth, struct qc_err *err)
{
	DIR *dp = opendir(dir);
	if (!dp)
		return QC_OK; /* unreadable members are reported by the reader itself */
	int rc = QC_OK;
	struct dirent *e;
	while (!rc && (e = readdir(dp))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char p[4096];
		struct stat st;
		if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= sizeof p || stat(p, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode))
			rc = depth > 0 ? check_dir(out, out_path, p, depth - 1, err) : QC_OK;
		else
			rc = refuse_same(out, out_path, &st, p, err);
	}
	closedir(dp);
	return rc;
}

int qc_convert_check_out(const char *out, const char *in, struct qc_err *err)
{
	struct stat so, si;
	if (stat(out, &so) != 0 || stat(in, &si) != 0)
		return QC_OK; /* a new output (or dangling link) cannot be an input */
	if (S_ISDIR(si.st_mode))
		return check_dir(&so, out, in, 3, err);
	return refuse_same(&so, out, &si, in, err);
}

/* The same for every file of an opened (possibly split) GGUF, through its fds. */
static int check_out_files(const char *out, const struct qc_gguf_model *m, struct qc_err *err)
{
	struct stat so, si;
	if (stat(out, &so) != 0)
		return QC_OK;
	for (int f = 0; f < m->n_files; f++) {
		const struct qc_gguf *g = m->files[f];
		if (g->file.fd < 0 || fstat(g->file.fd, &si) != 0)
			continue;
		int rc = refuse_same(&so, out, &si, g->path, err);
		if (rc)
			return rc;
	}
	return QC_OK;
}

/* Whole-file XXH3 of every source file, on its own thread: it only reads the mapping,
 * so it overlaps the tensor copy (the other core) instead of adding to it. */
struct hash_job {
	const struct qc_gguf_model *m;
	uint64_t *hashes;          /* one per file, filled by the thread */
	int rc;
};

static void *hash_sources(void *arg)
{
	struct hash_job *j = arg;
	XXH3_state_t *st = XXH3_createState();
	j->rc = st ? QC_OK : QC_ENOMEM;
	for (int f = 0; st && f < j->m->n_files; f++) {
		const struct qc_gguf *g = j->m->files[f];
		XXH3_64bits_reset(st);
		for (uint64_t o = 0; o < g->size; o += QC_STREAM_CHUNK) {
			uint64_t n = g->size - o < QC_STREAM_CHUNK ? g->size - o : QC_STREAM_CHUNK;
			XXH3_64bits_update(st, g->map + o, (size_t)n);
			qc_map_release(&g->file, o, n);
		}
		j->hashes[f] = XXH3_64bits_digest(st);
	}
	XXH3_freeState(st);
	return NULL;
}

static void add_source_files(const struct qc_gguf_model *m, const uint64_t *hashes, cJSON *src)
{
	cJSON *files = cJSON_AddArrayToObject(src, "files");
	for (int f = 0; f < m->n_files; f++) {
		char hex[17];
		qc_bundle_hash_hex(hashes[f], hex);
		cJSON *e = cJSON_CreateObject();
		cJSON_AddItemToArray(files, e);
		cJSON_AddStringToObject(e, "name", base_name(m->files[f]->path));
		cJSON_AddNumberToObject(e, "size", (double)m->files[f]->size);
		cJSON_AddStringToObject(e, "xxh3", hex);
	}
}

/* Copy [off, off+n) of source file g into the open member in bounded chunks: the
 * kernel copies file to file (copy_file_range) while XXH3 reads the same bytes
 * through the mapping; each window is then dropped from RSS. */
static int stream(struct qc_bundle_writer *w, const struct qc_gguf *g, uint64_t off, uint64_t n,
		  struct qc_progress *pr, struct qc_err *err)
{
	while (n) {
		uint64_t k = n < QC_STREAM_CHUNK ? n : QC_STREAM_CHUNK;
		int rc = g->file.fd >= 0 ? qc_bundle_writer_copy(w, g->map + off, g->file.fd, off, k, err)
					 : qc_bundle_writer_write(w, g->map + off, k, err);
		if (rc)
			return rc;
		qc_map_release(&g->file, off, k);
		qc_progress_add(pr, k);
		off += k;
		n -= k;
	}
	return QC_OK;
}

/* Fold one slice's kernel-value error e into t->lay_err (reported by inspect). */
static void add_layout_error(struct qc_plan_tensor *t, const struct qc_marlin_err *pe)
{
	const struct qc_marlin_err e = *pe;
	struct qc_marlin_err *a = &t->lay_err;
	double n = (double)a->n, m = (double)e.n;
	a->rms = sqrt((a->rms * a->rms * n + e.rms * e.rms * m) / (n + m));
	a->rms_w = sqrt((a->rms_w * a->rms_w * n + e.rms_w * e.rms_w * m) / (n + m));
	a->max_abs = e.max_abs > a->max_abs || e.max_abs != e.max_abs ? e.max_abs : a->max_abs;
	a->n += e.n;
}

/* A layout other than ggml: gather each ne[2]*ne[3] slice's ggml rows (parts in
 * order) into memory, repack it, write it. Memory: two slices. */
static int write_packed(const struct qc_gguf_model *m, struct qc_bundle_writer *w, struct qc_plan_tensor *t,
			uint64_t row, struct qc_progress *pr, struct qc_err *err)
{
	uint64_t slice = row * (uint64_t)t->ne[1], slices = (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
	uint64_t packed = t->size / slices; /* a layout may keep more than the ggml bytes */
	uint8_t *in = malloc((size_t)slice + 1), *out = malloc((size_t)packed + 1);
	int rc = in && out ? QC_OK : qc_err_set(err, QC_ENOMEM, NULL, t->name, -1, "out of memory packing a slice");
	for (uint64_t sl = 0; !rc && sl < slices; sl++) {
		qc_plan_gather_slice(m, t, sl, row, in);
		/* i4z/i8z round scale/offset to fp16: measure what that costs */
		const bool measure = qc_marlin_has_offsets(t->layout);
		struct qc_marlin_err e;
		rc = qc_pack_slice_par(t->layout, t->type, t->ne[0], t->ne[1], in, row, out, measure ? &e : NULL, 0,
				       err);
		if (!rc && measure)
			add_layout_error(t, &e);
		if (!rc)
			rc = qc_bundle_writer_write(w, out, packed, err);
		qc_progress_add(pr, packed);
	}
	free(in);
	free(out);
	return rc;
}

/* Layout ggml, made of parts (fused, or a --tp shard's cut): per slice, per part, its
 * rows; whole rows are streamed as one span, a column range of each row (a column
 * shard) is gathered into a bounded buffer first. */
static int write_parts(const struct qc_gguf_model *m, struct qc_bundle_writer *w, const struct qc_plan_tensor *t,
		       struct qc_progress *pr, struct qc_err *err)
{
	const uint64_t slices = (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
	uint8_t *buf = NULL;
	int rc = QC_OK;
	for (uint64_t sl = 0; !rc && sl < slices; sl++)
		for (int k = 0; !rc && k < t->n_parts; k++) {
			const struct qc_plan_part *pp = &t->parts[k];
			const struct qc_gguf_tensor *s = pp->src;
			const struct qc_gguf *g = m->files[s->file_idx];
			const struct qc_type_traits *tt = qc_type_get(s->type);
			uint64_t src_row;
			QC_ASSERT(qc_type_row_bytes(s->type, (uint64_t)s->ne[0], &src_row) == QC_OK);
			const uint64_t c0 = (uint64_t)(pp->col0 / tt->block_elems) * tt->block_bytes;
			const uint64_t cn = (uint64_t)(pp->n_cols / tt->block_elems) * tt->block_bytes;
			const uint64_t base = s->data_off + (sl * (uint64_t)s->ne[1] + (uint64_t)pp->src_row0) * src_row;
			if (cn == src_row) {
				rc = stream(w, g, base, (uint64_t)pp->n_rows * src_row, pr, err);
				continue;
			}
			const uint64_t per = cn < QC_STREAM_CHUNK ? QC_STREAM_CHUNK / cn : 1;
			if (!buf && !(buf = malloc((size_t)(per * cn)))) {
				rc = qc_err_set(err, QC_ENOMEM, NULL, t->name, -1, "out of memory gathering columns");
				break;
			}
			for (uint64_t r = 0; !rc && r < (uint64_t)pp->n_rows; r += per) {
				const uint64_t nr = (uint64_t)pp->n_rows - r < per ? (uint64_t)pp->n_rows - r : per;
				for (uint64_t i = 0; i < nr; i++)
					memcpy(buf + i * cn, g->map + base + (r + i) * src_row + c0, (size_t)cn);
				qc_map_release(&g->file, base + r * src_row, nr * src_row);
				rc = qc_bundle_writer_write(w, buf, nr * cn, err);
				qc_progress_add(pr, nr * cn);
			}
		}
	free(buf);
	return rc;
}

static int write_tensor(const struct qc_gguf_model *m, struct qc_bundle_writer *w, struct qc_plan_tensor *t,
			struct qc_progress *pr, struct qc_err *err)
{
	int rc = qc_bundle_writer_begin(w, t->name, t->size, &t->off, err);
	if (rc)
		return rc;
	uint64_t row;
	QC_ASSERT(qc_type_row_bytes(t->type, (uint64_t)t->ne[0], &row) == QC_OK);
	if (t->layout != QC_LAYOUT_GGML) {
		rc = write_packed(m, w, t, row, pr, err);
	} else if (qc_plan_tensor_whole(t)) {
		const struct qc_gguf_tensor *s = t->parts[0].src;
		rc = stream(w, m->files[s->file_idx], s->data_off, s->n_bytes, pr, err);
	} else {
		rc = write_parts(m, w, t, pr, err);
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
	if (t->lay_err.n) {
		cJSON *le = cJSON_AddObjectToObject(j, "layout_error");
		cJSON_AddNumberToObject(le, "max_abs", t->lay_err.max_abs);
		cJSON_AddNumberToObject(le, "rms", t->lay_err.rms);
		cJSON_AddNumberToObject(le, "rms_weights", t->lay_err.rms_w);
	}
	cJSON_AddNumberToObject(j, "offset", (double)t->off);
	cJSON_AddNumberToObject(j, "size", (double)t->size);
	qc_bundle_hash_hex(t->xxh3, hex);
	cJSON_AddStringToObject(j, "xxh3", hex);
	if (t->fused) {
		cJSON *parts = cJSON_AddArrayToObject(j, "parts");
		for (int k = 0; k < t->n_parts; k++) {
			cJSON *p = cJSON_CreateObject();
			char pn[QC_PLAN_NAME_MAX + QC_TP_PREFIX_MAX];
			snprintf(pn, sizeof pn, "%.*s%s", t->base_off, t->name, t->parts[k].src->name); /* "tp<r>." */
			cJSON_AddItemToArray(parts, p);
			cJSON_AddStringToObject(p, "name", pn);
			cJSON_AddNumberToObject(p, "row0", (double)t->parts[k].row0);
			cJSON_AddNumberToObject(p, "rows", (double)t->parts[k].n_rows);
		}
	}
	return j;
}

/* An architecture the runtime cannot run still converts (a later qrun may run the
 * bundle), but say so now, naming what is missing, rather than only at load. */
static void warn_arch(const char *in, const cJSON *man)
{
	struct qc_arch_desc d;
	char list[1024];
	qc_arch_describe(man, &d);
	const uint64_t missing = qc_arch_missing(&d);
	if (!d.arch)
		fprintf(stderr, "%s: note: architecture '%s' does not run in this qrun/qserve: it is not a known architecture\n",
			in, d.name);
	else if (missing)
		fprintf(stderr, "%s: note: architecture '%s' does not run in this qrun/qserve yet: missing %s\n", in, d.name,
			qc_arch_feat_list(missing, list, sizeof list));
	else
		for (int b = 0; b < QC_ARCH_BACKEND_COUNT; b++)
			if (qc_arch_missing_on(&d, (enum qc_arch_backend)b))
				fprintf(stderr, "%s: note: architecture '%s' does not run on the %s backend yet: missing %s\n",
					in, d.name, qc_arch_backends[b].name,
					qc_arch_feat_list(qc_arch_missing_on(&d, (enum qc_arch_backend)b), list, sizeof list));
}

/* --tp N: the plan's shards, cut by the widths of the config the manifest will hold. */
static int shard_plan(const struct qc_gguf_model *m, struct qc_plan *plan, const struct qc_convert_opts *o,
		      struct qc_err *err)
{
	cJSON *scratch = cJSON_CreateObject();
	int rc = scratch ? qc_meta_from_gguf(m, scratch, err) : qc_err_set(err, QC_ENOMEM, o->in, NULL, -1, "out of memory");
	if (!rc)
		rc = qc_plan_shard(plan, m, o->target, o->tp, cJSON_GetObjectItemCaseSensitive(scratch, "config"), err);
	cJSON_Delete(scratch);
	if (rc && !err->path[0])
		qc_err_set(err, rc, o->in_label ? o->in_label : o->in, err->tensor, err->off, "%s", err->msg);
	return rc;
}

/* The manifest's "tp" object (bundle_tp.h reads it back). */
static int add_tp(cJSON *man, const struct qc_plan *plan)
{
	cJSON *tp = cJSON_AddObjectToObject(man, "tp");
	cJSON *voc = tp && cJSON_AddNumberToObject(tp, "size", plan->tp_size) ? cJSON_AddArrayToObject(tp, "vocab") : NULL;
	if (!voc)
		return QC_ENOMEM;
	for (int r = 0; r < plan->tp_size; r++) {
		const double v[2] = { (double)plan->tp_vocab[r][0], (double)plan->tp_vocab[r][1] };
		cJSON *e = cJSON_CreateDoubleArray(v, 2);
		if (!e || !cJSON_AddItemToArray(voc, e))
			return QC_ENOMEM;
	}
	return QC_OK;
}

int qc_convert_gguf(const struct qc_convert_opts *o, struct qc_convert_stats *st, struct qc_err *err)
{
	struct qc_gguf_model *m = NULL;
	struct qc_plan *plan = NULL;
	struct qc_bundle_writer *w = NULL;
	struct qc_progress pr;
	double t0 = qc_now();
	if (o->out_fd)
		*o->out_fd = -1;
	cJSON *man = cJSON_CreateObject();
	if (!man)
		return qc_err_set(err, QC_ENOMEM, o->in, NULL, -1, "out of memory");
	int rc = qc_gguf_model_open(o->in, &m, err);
	if (!rc && !o->out_fd)
		rc = check_out_files(o->out, m, err);
	if (rc)
		goto out;
	rc = qc_plan_build(m, o->target, o->plan_flags, &plan, err);
	if (!rc && o->tp)
		rc = shard_plan(m, plan, o, err);
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
	qc_progress_init(&pr, "converting", plan->total_bytes);
	struct hash_job hj = { .m = m, .hashes = calloc((size_t)m->n_files, sizeof(uint64_t)) };
	pthread_t th;
	bool threaded = !o->source && hj.hashes && pthread_create(&th, NULL, hash_sources, &hj) == 0;
	if (!hj.hashes) {
		rc = qc_err_set(err, QC_ENOMEM, o->in, NULL, -1, "out of memory");
		goto out;
	}
	if (!threaded && !o->source) {
		QC_WARN_ONCE("cannot start the hashing thread; hashing the source inline");
		hash_sources(&hj);
	}

	cJSON_AddStringToObject(man, "format", "qconvert-bundle");
	cJSON *ver = cJSON_AddArrayToObject(man, "version");
	cJSON_AddItemToArray(ver, cJSON_CreateNumber(QC_BUNDLE_MAJOR));
	cJSON_AddItemToArray(ver, cJSON_CreateNumber(QC_BUNDLE_MINOR));
	cJSON *conv = cJSON_AddObjectToObject(man, "converter");
	cJSON_AddStringToObject(conv, "name", "qconvert");
	cJSON_AddStringToObject(conv, "version", QC_VERSION);
	cJSON_AddStringToObject(man, "target", qc_target_name(o->target));
	cJSON_AddNumberToObject(man, "alignment", o->alignment);
	cJSON *src = o->source ? cJSON_Duplicate(o->source, 1) : cJSON_CreateObject();
	if (!src || !cJSON_AddItemToObject(man, "source", src)) {
		cJSON_Delete(src);
		rc = qc_err_set(err, QC_ENOMEM, o->in, NULL, -1, "out of memory");
		src = NULL;
	}
	if (src && !o->source) {
		cJSON_AddStringToObject(src, "format", "gguf");
		cJSON_AddNumberToObject(src, "gguf_version", m->files[0]->version);
	}
	if (!rc)
		rc = qc_meta_from_gguf(m, man, err);
	if (!rc && plan->tp_size && add_tp(man, plan))
		rc = qc_err_set(err, QC_ENOMEM, o->in, NULL, -1, "out of memory");
	if (!rc && o->verbose)
		warn_arch(o->in_label ? o->in_label : o->in, man);
	if (!rc)
		rc = o->out_fd ? qc_bundle_writer_open_unnamed(o->out, o->alignment, o->out_fd, &w, err)
			       : qc_bundle_writer_open(o->out, o->alignment, &w, err);
	cJSON *tensors = cJSON_AddArrayToObject(man, "tensors");
	for (uint64_t i = 0; !rc && i < plan->n; i++) {
		rc = write_tensor(m, w, &plan->t[i], &pr, err);
		if (!rc && !cJSON_AddItemToArray(tensors, tensor_json(&plan->t[i])))
			rc = qc_err_set(err, QC_ENOMEM, o->out, NULL, -1, "out of memory");
	}
	if (threaded)
		pthread_join(th, NULL);
	if (!rc && hj.rc)
		rc = qc_err_set(err, QC_ENOMEM, o->in, NULL, -1, "out of memory hashing the source");
	if (!rc && !o->source)
		add_source_files(m, hj.hashes, src);
	free(hj.hashes);
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
	if (rc && o->out_fd && *o->out_fd >= 0) {
		close(*o->out_fd);
		*o->out_fd = -1;
	}
	qc_plan_free(plan);
	qc_gguf_model_close(m);
	cJSON_Delete(man);
	return rc;
}
