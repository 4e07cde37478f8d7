/* hf_source.c — Hugging Face model folder from a directory or an archive (see hf_source.h).
 *
 * Archives are read in one libarchive pass into a member list (JSON files as heap bytes,
 * shards as a range of the mapped tar or a memfd); the model root is then chosen and
 * every later lookup goes through find_member, so directory and archive share one path
 * from "name" to "bytes". Uncompressed-tar data offsets come from walking the ustar/pax
 * headers at archive_read_header_position and are confirmed against the first bytes
 * libarchive returns; v7 headers, sparse members or a mismatch make the member go into
 * a memfd instead (warned once); a member running past the end of the tar is an error.
 */
#include "hf_source.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cursor.h"
#include "tar.h"

static const char *const json_names[] = {
	"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
	"quantize_config.json", "model.safetensors.index.json",
};
#define N_JSON (sizeof(json_names) / sizeof(json_names[0]))

enum member_kind { MEMBER_BYTES, MEMBER_TAR_RANGE, MEMBER_MEMFD };

struct member {
	char *full;                 /* path inside the archive, "./" stripped */
	enum member_kind kind;
	uint8_t *bytes;             /* MEMBER_BYTES: heap copy */
	uint64_t off, len;          /* MEMBER_TAR_RANGE: range of src->archive; all: length */
	struct qc_map mem;          /* MEMBER_MEMFD: ownership moves to the shard on open */
};

struct ctx {
	struct qc_hf_source *src;
	struct member *m;
	size_t n, cap;
	const char *root;           /* archive prefix incl. trailing '/', "" for none */
};

static void ctx_free(struct ctx *c)
{
	for (size_t i = 0; i < c->n; i++) {
		free(c->m[i].full);
		free(c->m[i].bytes);
		qc_map_close(&c->m[i].mem);
	}
	free(c->m);
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

static bool ends_with(const char *s, const char *suf)
{
	size_t n = strlen(s), k = strlen(suf);
	return n >= k && strcmp(s + n - k, suf) == 0;
}

static bool wanted_json(const char *base)
{
	for (size_t i = 0; i < N_JSON; i++)
		if (strcmp(base, json_names[i]) == 0)
			return true;
	return false;
}

/* Copy the current entry's data into a fresh memfd and map it. */
static int copy_to_memfd(struct archive *a, const char *label, uint64_t size, const uint8_t *pre,
			 size_t pre_len, struct qc_map *m, struct qc_err *err)
{
	m->fd = memfd_create("qc-shard", MFD_CLOEXEC);
	m->p = NULL;
	m->size = 0;
	if (m->fd < 0)
		return qc_err_set(err, QC_EIO, label, NULL, -1, "memfd_create: %s", strerror(errno));
	if (pre_len && pwrite(m->fd, pre, pre_len, 0) != (ssize_t)pre_len)
		return qc_err_set(err, QC_EIO, label, NULL, 0, "memfd write: %s", strerror(errno));
	const void *buf;
	size_t n;
	la_int64_t at;
	uint64_t done = pre_len;
	int r;
	while ((r = archive_read_data_block(a, &buf, &n, &at)) == ARCHIVE_OK) {
		if (at < 0 || (uint64_t)at > size || n > size - (uint64_t)at)
			return qc_err_set(err, QC_EFORMAT, label, NULL, at, "member data past its size");
		if (pwrite(m->fd, buf, n, at) != (ssize_t)n)
			return qc_err_set(err, QC_EIO, label, NULL, at, "memfd write: %s", strerror(errno));
		done = (uint64_t)at + n > done ? (uint64_t)at + n : done;
	}
	if (r != ARCHIVE_EOF)
		return qc_err_set(err, QC_EFORMAT, label, NULL, (int64_t)done, "cannot read member: %s",
				  archive_error_string(a));
	if (ftruncate(m->fd, (off_t)size) != 0)
		return qc_err_set(err, QC_EIO, label, NULL, -1, "memfd truncate: %s", strerror(errno));
	m->size = size;
	if (size) {
		void *p = mmap(NULL, size, PROT_READ, MAP_SHARED, m->fd, 0);
		if (p == MAP_FAILED)
			return qc_err_set(err, QC_EIO, label, NULL, -1, "mmap memfd: %s", strerror(errno));
		m->p = p;
	}
	return QC_OK;
}

/* Data offset of the current member inside the mapped tar: 1 found (*off set), 0 headers
 * not understood (caller copies instead), -1 data past the end of the file (*off = where
 * it starts). */
static int tar_data_off(const struct qc_map *tar, int64_t hdr, uint64_t size, uint64_t *off)
{
	uint64_t pos = (uint64_t)hdr;
	for (int guard = 0; hdr >= 0 && guard < 8; guard++) {
		char name[101], type;
		uint64_t sz, skip;
		if (pos > tar->size || tar->size - pos < QC_TAR_BLOCK ||
		    !qc_tar_parse_header(tar->p + pos, name, &sz, &type))
			return 0;
		if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
			if (!qc_align_ok(sz, QC_TAR_BLOCK, &skip) || !qc_add_ok(pos, QC_TAR_BLOCK + skip, &pos))
				return 0;
			continue;
		}
		if (type != '0' && type != '\0' && type != '7')
			return 0; /* GNU sparse and the like: data is not stored contiguously */
		*off = pos + QC_TAR_BLOCK;
		return size > tar->size - pos - QC_TAR_BLOCK ? -1 : 1;
	}
	return 0;
}

/* Read the current member (declared size bytes) into heap memory, growing the buffer as
 * data arrives so a forged size cannot make us allocate more than the archive holds. */
static int read_bytes(struct archive *a, const char *label, uint64_t size, uint8_t **out,
		      struct qc_err *err)
{
	if (size > QC_HF_MAX_JSON)
		return qc_err_set(err, QC_ERANGE, label, NULL, -1, "%llu bytes exceeds the %llu-byte cap",
				  (unsigned long long)size, QC_HF_MAX_JSON);
	uint64_t cap = size < (1u << 20) ? size : (1u << 20), got = 0;
	*out = malloc(cap ? cap : 1);
	if (!*out)
		return qc_err_set(err, QC_ENOMEM, label, NULL, -1, "out of memory");
	while (got < size) {
		if (got == cap) {
			cap = cap * 2 < size ? cap * 2 : size;
			uint8_t *b = realloc(*out, cap);
			if (!b)
				return qc_err_set(err, QC_ENOMEM, label, NULL, -1, "out of memory");
			*out = b;
		}
		la_ssize_t r = archive_read_data(a, *out + got, (size_t)(cap - got));
		if (r <= 0)
			return qc_err_set(err, QC_EFORMAT, label, NULL, (int64_t)got, "cannot read member: %s",
					  r < 0 ? archive_error_string(a) : "shorter than its declared size");
		got += (uint64_t)r;
	}
	return QC_OK;
}

static int add_member(struct ctx *c, struct archive *a, struct archive_entry *e, bool in_place,
		      struct qc_err *err)
{
	const char *full = archive_entry_pathname(e);
	while (full && full[0] == '.' && full[1] == '/')
		full += 2;
	if (!full || archive_entry_filetype(e) != AE_IFREG || !archive_entry_size_is_set(e) ||
	    archive_entry_size(e) < 0)
		return QC_OK;
	const char *base = base_name(full);
	bool is_json = wanted_json(base), is_st = ends_with(base, ".safetensors");
	if (!is_json && !is_st)
		return QC_OK;
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 16;
		struct member *m = realloc(c->m, cap * sizeof(*m));
		if (!m)
			return qc_err_set(err, QC_ENOMEM, c->src->path, NULL, -1, "out of memory");
		c->m = m;
		c->cap = cap;
	}
	struct member *m = &c->m[c->n++];
	memset(m, 0, sizeof(*m));
	m->mem.fd = -1;
	m->full = strdup(full);
	if (!m->full)
		return qc_err_set(err, QC_ENOMEM, c->src->path, NULL, -1, "out of memory");
	uint64_t size = (uint64_t)archive_entry_size(e);
	m->len = size;
	char label[QC_ERR_NAME_MAX];
	snprintf(label, sizeof label, "%s:%s", c->src->path, full);
	if (is_json) {
		m->kind = MEMBER_BYTES;
		return read_bytes(a, label, size, &m->bytes, err);
	}
	bool sparse = archive_entry_sparse_count(e) > 0;   /* pax sparse maps: not contiguous */
	int where = in_place && !sparse ?
		    tar_data_off(&c->src->archive, archive_read_header_position(a), size, &m->off) : 0;
	if (where < 0)
		return qc_err_set(err, QC_EFORMAT, c->src->path, NULL, (int64_t)m->off,
				  "member '%s' (%llu bytes) runs past the end of the archive (truncated)",
				  full, (unsigned long long)size);
	uint8_t head[16];
	la_ssize_t k = 0;
	if (where > 0) {
		k = size < sizeof head ? (la_ssize_t)size : (la_ssize_t)sizeof head;
		la_ssize_t r = k ? archive_read_data(a, head, (size_t)k) : 0;
		if (r != k)
			return qc_err_set(err, QC_EFORMAT, label, NULL, 0, "cannot read member: %s",
					  r < 0 ? archive_error_string(a) : "short read");
		if (memcmp(head, c->src->archive.p + m->off, (size_t)k) == 0) {
			m->kind = MEMBER_TAR_RANGE;
			return QC_OK;
		}
	}
	if (in_place)
		QC_WARN_ONCE("%s: cannot map a tar member in place (v7 header, sparse or "
			     "moved data); copying such shards into memory", c->src->path);
	m->kind = MEMBER_MEMFD;
	return copy_to_memfd(a, label, size, head, (size_t)k, &m->mem, err);
}

static int scan_archive(struct ctx *c, struct qc_err *err)
{
	struct qc_hf_source *src = c->src;
	struct archive *a = archive_read_new();
	if (!a)
		return qc_err_set(err, QC_ENOMEM, src->path, NULL, -1, "out of memory");
	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	archive_read_support_format_zip(a);
	int rc = QC_OK;
	if (archive_read_open_filename(a, src->path, 1 << 16) != ARCHIVE_OK) {
		rc = qc_err_set(err, QC_EFORMAT, src->path, NULL, -1, "not a readable tar or zip: %s",
				archive_error_string(a));
		goto out_free;
	}
	struct archive_entry *e;
	int r;
	while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		if (c->n == 0 && src->kind == QC_HF_KIND_DIR) {
			bool plain_tar = archive_filter_code(a, 0) == ARCHIVE_FILTER_NONE &&
					 (archive_format(a) & ARCHIVE_FORMAT_BASE_MASK) == ARCHIVE_FORMAT_TAR;
			src->kind = plain_tar ? QC_HF_KIND_TAR : QC_HF_KIND_ARCHIVE;
			if (plain_tar) {
				rc = qc_map_open(src->path, &src->archive, err);
				if (rc)
					goto out_free;
			}
		}
		rc = add_member(c, a, e, src->kind == QC_HF_KIND_TAR, err);
		if (rc)
			goto out_free;
	}
	if (r != ARCHIVE_EOF)
		rc = qc_err_set(err, QC_EFORMAT, src->path, NULL, -1, "archive read failed: %s",
				archive_error_string(a));
	if (src->kind == QC_HF_KIND_DIR)
		src->kind = QC_HF_KIND_ARCHIVE;
out_free:
	archive_read_free(a);
	if (rc)
		return rc;
	/* root: the folder of the shallowest config.json */
	const struct member *best = NULL;
	for (size_t i = 0; i < c->n; i++) {
		if (strcmp(base_name(c->m[i].full), "config.json") == 0 &&
		    (!best || strlen(c->m[i].full) < strlen(best->full)))
			best = &c->m[i];
	}
	if (!best)
		return qc_err_set(err, QC_ENOTFOUND, src->path, NULL, -1, "no config.json in the archive");
	c->root = best->full;
	return QC_OK;
}

static struct member *find_member(struct ctx *c, const char *name)
{
	size_t rl = (size_t)(base_name(c->root) - c->root);
	for (size_t i = 0; i < c->n; i++) {
		const char *f = c->m[i].full;
		if (strncmp(f, c->root, rl) == 0 && strcmp(f + rl, name) == 0)
			return &c->m[i];
	}
	return NULL;
}

static char *join(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	char *p = malloc(a + b + 2);
	if (p)
		snprintf(p, a + b + 2, "%s/%s", dir, name);
	return p;
}

/* "dir/name" or "archive:root/name", for messages. */
static void member_label(const struct ctx *c, const char *name, char *buf, size_t len)
{
	if (c->src->kind == QC_HF_KIND_DIR)
		snprintf(buf, len, "%s/%s", c->src->path, name);
	else
		snprintf(buf, len, "%s:%.*s%s", c->src->path, (int)(base_name(c->root) - c->root), c->root, name);
}

/* Load name as JSON into *out; absent files leave *out NULL (QC_ENOTFOUND if required). */
static int load_json(struct ctx *c, const char *name, bool required, cJSON **out, struct qc_err *err)
{
	struct qc_hf_source *src = c->src;
	char label[QC_ERR_NAME_MAX];
	const uint8_t *bytes;
	uint64_t len;
	int rc = QC_OK;
	struct qc_map map = {.fd = -1};
	*out = NULL;
	if (src->kind == QC_HF_KIND_DIR) {
		char *p = join(src->path, name);
		if (!p)
			return qc_err_set(err, QC_ENOMEM, src->path, NULL, -1, "out of memory");
		snprintf(label, sizeof label, "%s", p);
		bool exists = access(p, F_OK) == 0;
		rc = exists ? qc_map_open(p, &map, err) : QC_OK;
		free(p);
		if (!exists)
			return required ? qc_err_set(err, QC_ENOTFOUND, label, NULL, -1, "missing") : QC_OK;
		if (rc)
			return rc;
		bytes = map.p;
		len = map.size;
	} else {
		struct member *m = find_member(c, name);
		member_label(c, name, label, sizeof label);
		if (!m)
			return required ? qc_err_set(err, QC_ENOTFOUND, label, NULL, -1, "missing") : QC_OK;
		bytes = m->bytes;
		len = m->len;
	}
	if (len > QC_HF_MAX_JSON) {
		rc = qc_err_set(err, QC_ERANGE, label, NULL, -1, "%llu bytes exceeds the JSON cap",
				(unsigned long long)len);
		goto out_unmap;
	}
	const char *end = NULL;
	*out = cJSON_ParseWithLengthOpts(bytes ? (const char *)bytes : "", (size_t)len, &end, 0);
	if (!*out) {
		const char *b = bytes ? (const char *)bytes : "";
		int64_t at = end && end >= b && end <= b + len ? end - b : 0;
		rc = qc_err_set(err, QC_EFORMAT, label, NULL, at, "not valid JSON");
	} else if (!cJSON_IsObject(*out)) {
		rc = qc_err_set(err, QC_EFORMAT, label, NULL, 0, "not a JSON object");
	}
out_unmap:
	qc_map_close(&map);
	return rc;
}

static int open_shard(struct ctx *c, const char *name, struct qc_hf_shard *sh, struct qc_err *err)
{
	struct qc_hf_source *src = c->src;
	sh->mem.fd = -1;
	sh->name = strdup(name);
	if (!sh->name)
		return qc_err_set(err, QC_ENOMEM, src->path, NULL, -1, "out of memory");
	if (strstr(name, "..") || name[0] == '/' || !name[0])
		return qc_err_set(err, QC_EFORMAT, src->path, NULL, -1, "shard name '%s' leaves the model folder", name);
	if (src->kind == QC_HF_KIND_DIR) {
		char *p = join(src->path, name);
		if (!p)
			return qc_err_set(err, QC_ENOMEM, src->path, NULL, -1, "out of memory");
		int rc = access(p, F_OK) == 0 ? qc_st_open(p, &sh->st, err)
					      : qc_err_set(err, QC_ENOTFOUND, p, NULL, -1, "shard file missing");
		free(p);
		return rc;
	}
	char label[QC_ERR_NAME_MAX];
	member_label(c, name, label, sizeof label);
	struct member *m = find_member(c, name);
	if (!m || m->kind == MEMBER_BYTES)
		return qc_err_set(err, QC_ENOTFOUND, label, NULL, -1, "shard file missing from the archive");
	if (m->kind == MEMBER_TAR_RANGE)
		return qc_st_open_mem(src->archive.p + m->off, m->len, label, &sh->st, err);
	if (m->mem.fd < 0)
		return qc_err_set(err, QC_EFORMAT, label, NULL, -1, "shard listed twice");
	sh->mem = m->mem;                  /* the shard owns the memfd from here */
	m->mem = (struct qc_map){.fd = -1};
	return qc_st_open_mem(sh->mem.p ? sh->mem.p : (const uint8_t *)"", sh->mem.size, label, &sh->st, err);
}

static int shard_index(struct ctx *c, const char *name, struct qc_err *err)
{
	struct qc_hf_source *src = c->src;
	for (int i = 0; i < src->n_shards; i++)
		if (strcmp(src->shards[i].name, name) == 0)
			return i;
	if (src->n_shards == QC_HF_MAX_SHARDS)
		return qc_err_set(err, QC_ERANGE, src->path, NULL, -1, "more than %d shards", QC_HF_MAX_SHARDS);
	struct qc_hf_shard *s = realloc(src->shards, (size_t)(src->n_shards + 1) * sizeof(*s));
	if (!s)
		return qc_err_set(err, QC_ENOMEM, src->path, NULL, -1, "out of memory");
	src->shards = s;
	struct qc_hf_shard *sh = &s[src->n_shards++];
	memset(sh, 0, sizeof(*sh));
	int rc = open_shard(c, name, sh, err);
	return rc ? rc : src->n_shards - 1;
}

static int cmp_tensor(const void *a, const void *b)
{
	const struct qc_hf_tensor *x = a, *y = b;
	return strcmp(x->name, y->name);
}

/* Merge every shard's tensors into one name-sorted table; a name in two shards is an error. */
static int merge_tables(struct qc_hf_source *src, struct qc_err *err)
{
	uint64_t n = 0;
	for (int i = 0; i < src->n_shards; i++)
		n += src->shards[i].st->n_tensors;
	src->tensors = calloc(n ? n : 1, sizeof(*src->tensors));
	if (!src->tensors)
		return qc_err_set(err, QC_ENOMEM, src->path, NULL, -1, "out of memory");
	for (int i = 0; i < src->n_shards; i++) {
		const struct qc_st *st = src->shards[i].st;
		for (uint64_t k = 0; k < st->n_tensors; k++) {
			struct qc_hf_tensor *t = &src->tensors[src->n_tensors++];
			t->t = &st->tensors[k];
			t->name = t->t->name;
			t->shard = i;
			t->data = qc_st_data(st, t->t);
		}
	}
	qsort(src->tensors, src->n_tensors, sizeof(*src->tensors), cmp_tensor);
	for (uint64_t k = 1; k < src->n_tensors; k++) {
		const struct qc_hf_tensor *a = &src->tensors[k - 1], *b = &src->tensors[k];
		if (strcmp(a->name, b->name) == 0)
			return qc_err_set(err, QC_EFORMAT, src->shards[b->shard].st->path, b->name,
					  (int64_t)b->t->hdr_off, "tensor also present in shard '%s'",
					  src->shards[a->shard].name);
	}
	return QC_OK;
}

static int load_weights(struct ctx *c, struct qc_err *err)
{
	struct qc_hf_source *src = c->src;
	char ix[QC_ERR_NAME_MAX];
	int rc;
	member_label(c, "model.safetensors.index.json", ix, sizeof ix);
	if (!src->index) {
		rc = shard_index(c, "model.safetensors", err);
		return rc < 0 ? rc : merge_tables(src, err);
	}
	const cJSON *wm = cJSON_GetObjectItemCaseSensitive(src->index, "weight_map");
	if (!cJSON_IsObject(wm))
		return qc_err_set(err, QC_EFORMAT, ix, NULL, -1, "\"weight_map\" is not an object");
	for (const cJSON *j = wm->child; j; j = j->next) {
		if (!cJSON_IsString(j))
			return qc_err_set(err, QC_EFORMAT, ix, j->string, -1, "weight_map value is not a file name");
		rc = shard_index(c, j->valuestring, err);
		if (rc < 0)
			return rc;
	}
	rc = merge_tables(src, err);
	if (rc)
		return rc;
	uint64_t listed = 0;
	for (const cJSON *j = wm->child; j; j = j->next, listed++) {
		const struct qc_hf_tensor *t = qc_hf_find(src, j->string);
		if (!t || strcmp(src->shards[t->shard].name, j->valuestring) != 0)
			return qc_err_set(err, QC_EFORMAT, ix, j->string, -1, "mapped to shard '%s', which lacks it%s%s",
					  j->valuestring, t ? "; it is in " : "", t ? src->shards[t->shard].name : "");
	}
	if (listed != src->n_tensors) {
		for (uint64_t k = 0; k < src->n_tensors; k++) {
			const struct qc_hf_tensor *t = &src->tensors[k];
			const cJSON *j = cJSON_GetObjectItemCaseSensitive(wm, t->name);
			if (!j || strcmp(j->valuestring, src->shards[t->shard].name) != 0)
				return qc_err_set(err, QC_EFORMAT, src->shards[t->shard].st->path, t->name,
						  (int64_t)t->t->hdr_off,
						  "tensor not listed for this shard in model.safetensors.index.json");
		}
		return qc_err_set(err, QC_EFORMAT, ix, NULL, -1, "weight_map lists a tensor twice");
	}
	return QC_OK;
}

int qc_hf_open(const char *path, struct qc_hf_source **out, struct qc_err *err)
{
	*out = NULL;
	struct qc_hf_source *src = calloc(1, sizeof(*src));
	struct ctx c = {.src = src, .root = ""};
	struct stat st;
	int rc;
	if (!src)
		return qc_err_set(err, QC_ENOMEM, path, NULL, -1, "out of memory");
	src->archive.fd = -1;
	src->path = strdup(path);
	if (!src->path) {
		rc = qc_err_set(err, QC_ENOMEM, path, NULL, -1, "out of memory");
		goto out_close;
	}
	if (stat(path, &st) != 0) {
		rc = qc_err_set(err, QC_EIO, path, NULL, -1, "cannot stat: %s", strerror(errno));
		goto out_close;
	}
	src->kind = QC_HF_KIND_DIR;
	if (!S_ISDIR(st.st_mode)) {
		rc = scan_archive(&c, err);
		if (rc)
			goto out_close;
	}
	cJSON **slots[N_JSON] = {&src->config, &src->tokenizer, &src->tokenizer_config,
				 &src->generation_config, &src->quantize_config, &src->index};
	for (size_t i = 0; i < N_JSON; i++) {
		rc = load_json(&c, json_names[i], i == 0, slots[i], err);
		if (rc)
			goto out_close;
	}
	rc = load_weights(&c, err);
	if (rc)
		goto out_close;
	ctx_free(&c);
	*out = src;
	return QC_OK;
out_close:
	ctx_free(&c);
	qc_hf_close(src);
	return rc;
}

void qc_hf_close(struct qc_hf_source *src)
{
	if (!src)
		return;
	for (int i = 0; i < src->n_shards; i++) {
		qc_st_close(src->shards[i].st);
		qc_map_close(&src->shards[i].mem);
		free(src->shards[i].name);
	}
	free(src->shards);
	free(src->tensors);
	cJSON *all[] = {src->config, src->tokenizer, src->tokenizer_config, src->generation_config,
			src->quantize_config, src->index};
	for (size_t i = 0; i < N_JSON; i++)
		cJSON_Delete(all[i]);
	qc_map_close(&src->archive);
	free(src->path);
	free(src);
}

const struct qc_hf_tensor *qc_hf_find(const struct qc_hf_source *src, const char *name)
{
	uint64_t lo = 0, hi = src->n_tensors;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		int c = strcmp(src->tensors[mid].name, name);
		if (c == 0)
			return &src->tensors[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const char *qc_hf_quant_method(const struct qc_hf_source *src)
{
	const cJSON *q = cJSON_GetObjectItemCaseSensitive(src->config, "quantization_config");
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
	if (!cJSON_IsString(m))
		m = cJSON_GetObjectItemCaseSensitive(src->quantize_config, "quant_method");
	return cJSON_IsString(m) ? m->valuestring : "none";
}
