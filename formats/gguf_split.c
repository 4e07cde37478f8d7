/* gguf_split.c — a model spread over "<prefix>-0000i-of-0000n.gguf" read as one.
 *
 * The first shard carries the metadata; every shard carries split.no (u16),
 * split.count (u16) and split.tensors.count (i32) as llama.cpp's gguf-split
 * writes them. Shard i's name is derived from the path given, which must be
 * one of the shards (any of them; the set is opened from shard 1).
 * Non-goal: writing splits (samples/mkgguf does that for tests).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

#define MAX_SPLITS 9999

/* "<prefix>-00002-of-00005.gguf" -> prefix length, count. false if not that pattern. */
static bool split_pattern(const char *path, size_t *prefix_len, int *count)
{
	size_t n = strlen(path);
	const char *tail = "-00000-of-00000.gguf";
	size_t tl = strlen(tail);
	if (n < tl)
		return false;
	const char *s = path + n - tl;
	int no, cnt;
	char junk;
	if (sscanf(s, "-%5d-of-%5d.gguf%c", &no, &cnt, &junk) != 2)
		return false;
	*prefix_len = (size_t)(s - path);
	*count = cnt;
	return true;
}

static int get_split_key(const struct qc_gguf *g, const char *key, int64_t *v, struct qc_err *err)
{
	int rc = qc_gguf_get_i64(g, key, v, err);
	if (rc == QC_ENOTFOUND)
		*v = -1;
	return rc == QC_ENOTFOUND ? QC_OK : rc;
}

static int add_file(struct qc_gguf_model *m, struct qc_gguf *g, struct qc_err *err)
{
	struct qc_gguf **files = realloc(m->files, (size_t)(m->n_files + 1) * sizeof(*files));
	if (!files) {
		qc_gguf_close(g);
		return qc_err_set(err, QC_ENOMEM, g->path, NULL, -1, "out of memory");
	}
	m->files = files;
	m->files[m->n_files++] = g;
	return QC_OK;
}

static int collect_tensors(struct qc_gguf_model *m, struct qc_err *err)
{
	uint64_t total = 0;
	for (int f = 0; f < m->n_files; f++)
		total += m->files[f]->n_tensors;
	m->tensors = total ? calloc((size_t)total, sizeof(*m->tensors)) : NULL;
	if (total && !m->tensors)
		return qc_err_set(err, QC_ENOMEM, m->files[0]->path, NULL, -1, "out of memory");
	for (int f = 0; f < m->n_files; f++)
		for (uint64_t i = 0; i < m->files[f]->n_tensors; i++) {
			struct qc_gguf_tensor *t = &m->files[f]->tensors[i];
			t->file_idx = f;
			if (f > 0 && qc_gguf_model_find(m, t->name))
				return qc_err_set(err, QC_EFORMAT, m->files[f]->path, t->name,
						  (int64_t)t->info_off, "tensor also present in an earlier split");
			m->tensors[m->n_tensors++] = t;
		}
	return QC_OK;
}

int qc_gguf_model_open(const char *path, struct qc_gguf_model **out, struct qc_err *err)
{
	struct qc_gguf *g = NULL;
	char *name = NULL;
	int64_t count, no, tcount;
	*out = NULL;
	struct qc_gguf_model *m = calloc(1, sizeof(*m));
	if (!m)
		return qc_err_set(err, QC_ENOMEM, path, NULL, -1, "out of memory");
	int rc = qc_gguf_open(path, &g, err);
	if (!rc)
		rc = get_split_key(g, "split.count", &count, err);
	if (rc)
		goto fail;
	if (count <= 1) {
		rc = add_file(m, g, err);
		g = NULL;
		goto done;
	}
	size_t plen;
	int pc;
	if (count > MAX_SPLITS || !split_pattern(path, &plen, &pc) || pc != count) {
		rc = qc_err_set(err, QC_EFORMAT, path, NULL, -1,
				"split.count is %lld but the name does not follow '<prefix>-%05lld-of-%05lld.gguf'",
				(long long)count, 1LL, (long long)count);
		goto fail;
	}
	qc_gguf_close(g);
	g = NULL;
	name = malloc(plen + 64);
	if (!name) {
		rc = qc_err_set(err, QC_ENOMEM, path, NULL, -1, "out of memory");
		goto fail;
	}
	for (int64_t i = 1; i <= count; i++) {
		memcpy(name, path, plen);
		snprintf(name + plen, 64, "-%05d-of-%05d.gguf", (int)i, (int)count);
		rc = qc_gguf_open(name, &g, err);
		if (!rc)
			rc = get_split_key(g, "split.no", &no, err);
		if (!rc)
			rc = get_split_key(g, "split.count", &tcount, err);
		if (rc)
			goto fail;
		if (no != i - 1 || tcount != count) {
			rc = qc_err_set(err, QC_EFORMAT, name, NULL, -1,
					"split.no %lld / split.count %lld, expected %lld / %lld",
					(long long)no, (long long)tcount, (long long)(i - 1), (long long)count);
			goto fail;
		}
		rc = add_file(m, g, err);
		g = NULL;
		if (rc)
			goto fail;
	}
done:
	if (!rc)
		rc = collect_tensors(m, err);
	if (!rc && m->n_files > 1) {
		rc = get_split_key(m->files[0], "split.tensors.count", &tcount, err);
		if (!rc && tcount >= 0 && (uint64_t)tcount != m->n_tensors)
			rc = qc_err_set(err, QC_EFORMAT, m->files[0]->path, NULL, -1,
					"split.tensors.count is %lld but the splits hold %llu tensors",
					(long long)tcount, (unsigned long long)m->n_tensors);
	}
	if (rc)
		goto fail;
	free(name);
	*out = m;
	return QC_OK;
fail:
	free(name);
	qc_gguf_close(g);
	qc_gguf_model_close(m);
	return rc;
}

void qc_gguf_model_close(struct qc_gguf_model *m)
{
	if (!m)
		return;
	for (int i = 0; i < m->n_files; i++)
		qc_gguf_close(m->files[i]);
	free(m->files);
	free(m->tensors);
	free(m);
}

const struct qc_gguf_tensor *qc_gguf_model_find(const struct qc_gguf_model *m, const char *name)
{
	for (uint64_t i = 0; i < m->n_tensors; i++)
		if (strcmp(m->tensors[i]->name, name) == 0)
			return m->tensors[i];
	return NULL;
}

const uint8_t *qc_gguf_model_data(const struct qc_gguf_model *m, const struct qc_gguf_tensor *t)
{
	return m->files[t->file_idx]->map + t->data_off;
}
