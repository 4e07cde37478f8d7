/* mkgguf_out.c — mkgguf's output files: one GGUF, or gguf-split's shards.
 *
 * Owns: the run of a model (plan, scratch rows, vocab, then one writer per file), the
 * plan printed instead (--dry-run), and gguf-split's shard convention: all keys in
 * the first shard, split.no/count/tensors.count in every one, tensors in order
 * balanced by bytes. Files appear atomically (the writer's temp file + rename);
 * missing parent directories are made.
 */
#include "mkgguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir -p of path's directory, so "-o samples/out/x.gguf" works in a fresh checkout. */
static int make_parent_dirs(const char *path, struct qc_err *err)
{
	char *dir = strdup(path);
	int rc = QC_OK;
	if (!dir)
		return qc_err_set(err, QC_ENOMEM, path, NULL, -1, "out of memory");
	for (char *p = dir + 1; *p && !rc; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(dir, 0777) && errno != EEXIST)
			rc = qc_err_set(err, QC_EIO, path, NULL, -1, "cannot create directory %s: %s", dir,
					strerror(errno));
		*p = '/';
	}
	free(dir);
	return rc;
}

/* One file holding tensors [t0, t1) of the plan; split_count 0 means an unsplit file. */
static int write_one(const struct opts *o, const struct vocab *v, struct tensor_plan *p, size_t n_all,
		     size_t t0, size_t t1, int split_no, int split_count, const char *path,
		     struct gen *g, struct qc_err *err)
{
	struct qc_gguf_writer *w = qc_gguf_writer_new(3, 0);
	if (!w)
		return qc_err_set(err, QC_ENOMEM, path, NULL, -1, "out of memory");
	int rc = QC_OK;
	if (split_no == 0)
		rc = qc_mkgguf_add_metadata(w, o, v, err);
	if (!rc && split_count) {
		rc = qc_gguf_writer_add_u16(w, "split.no", (uint16_t)split_no, err);
		if (!rc)
			rc = qc_gguf_writer_add_u16(w, "split.count", (uint16_t)split_count, err);
		if (!rc)
			rc = qc_gguf_writer_add_i32(w, "split.tensors.count", (int32_t)n_all, err);
	}
	for (size_t i = t0; i < t1 && !rc; i++)
		rc = qc_gguf_writer_add_tensor_fill(w, p[i].name, p[i].type, p[i].n_dims, p[i].ne,
						    qc_mkgguf_fill_tensor, &p[i], err);
	if (!rc) {
		g->label = path;
		rc = qc_gguf_writer_write_file(w, path, err);
	}
	if (rc && !err->path[0])
		qc_err_set(err, err->code, path, err->tensor, err->off, "%s", err->msg);
	qc_gguf_writer_free(w);
	return rc;
}

/* Shard s gets the tensors whose cumulative size ends in (s/N, (s+1)/N] of the total,
 * at least one each; returns the first tensor of shard s. */
static size_t shard_start(const struct tensor_plan *p, size_t n, int n_split, int s)
{
	if (s == 0)
		return 0;
	if (s == n_split)
		return n;
	uint64_t total = qc_mkgguf_plan_bytes(p, n), acc = 0;
	size_t i = 0;
	while (i < n && acc + p[i].n_bytes <= total / (uint64_t)n_split * (uint64_t)s)
		acc += p[i++].n_bytes;
	size_t lo = (size_t)s, hi = n - (size_t)(n_split - s);  /* leave one per shard */
	return i < lo ? lo : i > hi ? hi : i;
}

int qc_mkgguf_print_plan(const struct opts *o, FILE *f, struct qc_err *err)
{
	struct tensor_plan *p;
	size_t n;
	int rc = qc_mkgguf_plan_tensors(&o->hp, &o->hx, o->type, o->mix, o->seed, &p, &n, err);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%s %s %lld %lld %lld %llu\n", p[i].name, qc_types[p[i].type].name, (long long)p[i].ne[0],
			(long long)p[i].ne[1], (long long)p[i].ne[2], (unsigned long long)p[i].n_bytes);
	fprintf(f, "total %llu bytes in %zu tensors\n", (unsigned long long)qc_mkgguf_plan_bytes(p, n), n);
	free(p);
	return QC_OK;
}

int qc_mkgguf_write_model(const struct opts *o, struct qc_err *err)
{
	struct vocab v = { 0 };
	struct tensor_plan *p = NULL;
	size_t n = 0;
	struct gen g = { .n_threads = o->n_threads, .tty = isatty(2) };
	int rc = qc_mkgguf_plan_tensors(&o->hp, &o->hx, o->type, o->mix, o->seed, &p, &n, err);
	if (rc)
		return rc;
	if (o->split > 0 && (size_t)o->split > n) {
		rc = qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "--split %d exceeds the %zu tensors",
				o->split, n);
		goto out_free_plan;
	}
	g.max_row = o->hp.n_embd > o->hp.n_ff ? o->hp.n_embd : o->hp.n_ff;
	uint64_t max_row_bytes = 0;
	for (size_t i = 0; i < n; i++) {
		p[i].g = &g;
		if (p[i].row_bytes > max_row_bytes)
			max_row_bytes = p[i].row_bytes;
		if (p[i].ne[0] > g.max_row)
			g.max_row = p[i].ne[0];
	}
	bool scratch_ok = (g.edge = malloc(max_row_bytes)) != NULL;
	for (int i = 0; i < g.n_threads; i++)
		scratch_ok &= (g.rows[i] = malloc((size_t)g.max_row * sizeof(float))) != NULL;
	if (!scratch_ok) {
		rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory for scratch rows");
		goto out_free_rows;
	}
	rc = qc_mkgguf_vocab_build(&v, (uint64_t)o->hp.n_vocab, err);
	if (rc)
		goto out_free_rows;
	rc = make_parent_dirs(o->out, err);
	if (rc)
		goto out_free_vocab;
	g.total = qc_mkgguf_plan_bytes(p, n);
	g.t_start = qc_mkgguf_now_s();
	if (o->split <= 1) {
		rc = write_one(o, &v, p, n, 0, n, 0, 0, o->out, &g, err);
	} else {
		size_t len = strlen(o->out);
		size_t stem = len > 5 && strcmp(o->out + len - 5, ".gguf") == 0 ? len - 5 : len;
		char *path = malloc(stem + 32);
		if (!path) {
			rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
			goto out_free_vocab;
		}
		for (int s = 0; s < o->split && !rc; s++) {
			snprintf(path, stem + 32, "%.*s-%05d-of-%05d.gguf", (int)stem, o->out, s + 1, o->split);
			rc = write_one(o, &v, p, n, shard_start(p, n, o->split, s),
				       shard_start(p, n, o->split, s + 1), s, o->split, path, &g, err);
		}
		free(path);
	}
	if (!rc)
		qc_mkgguf_progress(&g, NULL, true);
	else if (g.tty)
		fputc('\n', stderr);

out_free_vocab:
	qc_mkgguf_vocab_free(&v);
out_free_rows:
	for (int i = 0; i < g.n_threads; i++)
		free(g.rows[i]);
	free(g.edge);
out_free_plan:
	free(p);
	return rc;
}
