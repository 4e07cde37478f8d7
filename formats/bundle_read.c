/* bundle_read.c — open and validate a bundle (layout in bundle.h).
 * Nothing in the file is trusted: the header hashes itself, the manifest is
 * hashed, and every tensor's range, alignment, size-for-shape and uniqueness is
 * checked before any pointer is handed out, and a --tp bundle's "tp" object and rank
 * members (bundle_tp.c). JSON numbers must be exact integers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "bundle.h"
#include "bundle_tp.h"
#include "cursor.h"
#include "tar.h"

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static bool json_u64(const cJSON *o, const char *key, uint64_t *v)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!cJSON_IsNumber(x))
		return false;
	double d = x->valuedouble;
	if (!(d >= 0) || d > 9007199254740992.0 || floor(d) != d)
		return false;
	*v = (uint64_t)d;
	return true;
}

static int parse_header(struct qc_bundle *b, struct qc_err *err)
{
	char name[101], type;
	uint64_t sz;
	if (b->size < 2 * QC_TAR_BLOCK)
		return qc_err_set(err, QC_EFORMAT, b->path, NULL, 0, "file truncated: %llu bytes is too small for a bundle",
				  (unsigned long long)b->size);
	if (!qc_tar_parse_header(b->map, name, &sz, &type) || strcmp(name, QC_BUNDLE_HDR_MEMBER) != 0 ||
	    memcmp(b->map + QC_TAR_BLOCK, "QCBUNDLE", 8) != 0)
		return qc_err_set(err, QC_EFORMAT, b->path, NULL, 0, "not a qconvert bundle (no '%s' header member)",
				  QC_BUNDLE_HDR_MEMBER);
	const uint8_t *h = b->map + QC_TAR_BLOCK;
	b->major = (uint16_t)(h[8] | h[9] << 8);
	b->minor = (uint16_t)(h[10] | h[11] << 8);
	if (b->major != QC_BUNDLE_MAJOR)
		return qc_err_set(err, QC_EUNSUPPORTED, b->path, NULL, QC_TAR_BLOCK + 8,
				  "bundle format version %u.%u; this build reads major version %d only (re-convert, or upgrade qconvert)",
				  b->major, b->minor, QC_BUNDLE_MAJOR);
	if (XXH3_64bits(h, 48) != get64(h + 48))
		return qc_err_set(err, QC_ECHECKSUM, b->path, NULL, QC_TAR_BLOCK, "bundle header checksum mismatch");
	b->alignment = (uint32_t)(h[12] | h[13] << 8 | h[14] << 16 | (uint32_t)h[15] << 24);
	b->manifest_off = get64(h + 16);
	b->manifest_size = get64(h + 24);
	uint64_t file_size = get64(h + 40), end;
	if (file_size != b->size)
		return qc_err_set(err, QC_EFORMAT, b->path, NULL, QC_TAR_BLOCK + 40,
				  "file is %llu bytes but its header says %llu (truncated or appended to)",
				  (unsigned long long)b->size, (unsigned long long)file_size);
	if (b->alignment < QC_BUNDLE_ALIGN || (b->alignment & (b->alignment - 1)))
		return qc_err_set(err, QC_EFORMAT, b->path, NULL, QC_TAR_BLOCK + 12, "bad alignment %u", b->alignment);
	if (b->manifest_off < 2 * QC_TAR_BLOCK || !qc_add_ok(b->manifest_off, b->manifest_size, &end) ||
	    end > b->size)
		return qc_err_set(err, QC_EFORMAT, b->path, NULL, QC_TAR_BLOCK + 16,
				  "manifest range [%llu, +%llu) is outside the file",
				  (unsigned long long)b->manifest_off, (unsigned long long)b->manifest_size);
	if (XXH3_64bits(b->map + b->manifest_off, (size_t)b->manifest_size) != get64(h + 32))
		return qc_err_set(err, QC_ECHECKSUM, b->path, NULL, (int64_t)b->manifest_off, "manifest checksum mismatch");
	return QC_OK;
}

static int parse_parts(struct qc_bundle *b, struct qc_bundle_tensor *t, const cJSON *parts, struct qc_err *err)
{
	int n = cJSON_GetArraySize(parts);
	if (n > QC_BUNDLE_MAX_PARTS)
		return qc_err_set(err, QC_EFORMAT, b->path, t->name, -1, "%d fused parts (max %d)", n, QC_BUNDLE_MAX_PARTS);
	int64_t next = 0;
	for (int i = 0; i < n; i++) {
		const cJSON *p = cJSON_GetArrayItem(parts, i);
		const cJSON *nm = cJSON_GetObjectItemCaseSensitive(p, "name");
		uint64_t r0, nr;
		if (!cJSON_IsString(nm) || !json_u64(p, "row0", &r0) || !json_u64(p, "rows", &nr) ||
		    (int64_t)r0 != next || (int64_t)(r0 + nr) > t->ne[1])
			return qc_err_set(err, QC_EFORMAT, b->path, t->name, -1, "fused part %d is malformed", i);
		t->parts[i] = (struct qc_bundle_part){ nm->valuestring, (int64_t)r0, (int64_t)nr };
		next = (int64_t)(r0 + nr);
	}
	if (n && next != t->ne[1])
		return qc_err_set(err, QC_EFORMAT, b->path, t->name, -1, "fused parts cover %lld of %lld rows",
				  (long long)next, (long long)t->ne[1]);
	t->n_parts = n;
	return QC_OK;
}

static int parse_tensor(struct qc_bundle *b, const cJSON *j, struct qc_bundle_tensor *t, struct qc_err *err)
{
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
	if (!cJSON_IsString(name) || !name->valuestring[0])
		return qc_err_set(err, QC_EFORMAT, b->path, NULL, (int64_t)b->manifest_off, "tensor entry without a name");
	t->name = name->valuestring;
	t->json = j;
	const cJSON *ne = cJSON_GetObjectItemCaseSensitive(j, "ne");
	int nd = cJSON_GetArraySize(ne);
	if (!cJSON_IsArray(ne) || nd < 1 || nd > 4)
		return qc_err_set(err, QC_EFORMAT, b->path, t->name, -1, "bad 'ne' (1 to 4 dimensions)");
	t->n_dims = (uint32_t)nd;
	for (int d = 0; d < 4; d++) {
		t->ne[d] = 1;
		if (d < nd) {
			const cJSON *x = cJSON_GetArrayItem(ne, d);
			if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 9007199254740992.0 ||
			    floor(x->valuedouble) != x->valuedouble)
				return qc_err_set(err, QC_EFORMAT, b->path, t->name, -1, "bad dimension %d", d);
			t->ne[d] = (int64_t)x->valuedouble;
		}
	}
	const cJSON *enc = cJSON_GetObjectItemCaseSensitive(j, "encoding");
	const cJSON *ty = cJSON_GetObjectItemCaseSensitive(enc, "type");
	const cJSON *lay = cJSON_GetObjectItemCaseSensitive(enc, "layout");
	uint64_t lid;
	if (!cJSON_IsString(ty) || !cJSON_IsString(lay) || !json_u64(enc, "layout_id", &lid))
		return qc_err_set(err, QC_EFORMAT, b->path, t->name, -1, "bad 'encoding'");
	int ti = qc_type_from_name(ty->valuestring);
	if (ti < 0)
		return qc_err_set(err, QC_EUNSUPPORTED, b->path, t->name, -1, "unknown encoding type '%s'", ty->valuestring);
	int li = qc_layout_from_name(lay->valuestring);
	if (li < 0 || (uint64_t)li != lid)
		return qc_err_set(err, QC_EUNSUPPORTED, b->path, t->name, -1,
				  "layout '%s' (id %llu) is not known to this build", lay->valuestring,
				  (unsigned long long)lid);
	t->type = (enum qc_type)ti;
	t->layout = (enum qc_layout)li;
	const cJSON *hx = cJSON_GetObjectItemCaseSensitive(j, "xxh3");
	char *endp;
	if (!json_u64(j, "offset", &t->off) || !json_u64(j, "size", &t->size) || !cJSON_IsString(hx) ||
	    strlen(hx->valuestring) != 16)
		return qc_err_set(err, QC_EFORMAT, b->path, t->name, -1, "missing offset/size/xxh3");
	t->xxh3 = strtoull(hx->valuestring, &endp, 16);
	if (*endp)
		return qc_err_set(err, QC_EFORMAT, b->path, t->name, -1, "bad xxh3 '%s'", hx->valuestring);
	uint64_t want, end;
	int rc = qc_layout_bytes(t->layout, t->type, t->ne, &want);
	if (rc || want != t->size)
		return qc_err_set(err, QC_EFORMAT, b->path, t->name, (int64_t)t->off,
				  "size %llu does not match its shape and encoding (%llu)", (unsigned long long)t->size,
				  (unsigned long long)want);
	if (t->off % b->alignment || t->off < 2 * QC_TAR_BLOCK || !qc_add_ok(t->off, t->size, &end) ||
	    end > b->manifest_off)
		return qc_err_set(err, QC_EFORMAT, b->path, t->name, (int64_t)t->off,
				  "data range [%llu, +%llu) is misaligned or outside the data area",
				  (unsigned long long)t->off, (unsigned long long)t->size);
	const cJSON *parts = cJSON_GetObjectItemCaseSensitive(j, "parts");
	return parts ? parse_parts(b, t, parts, err) : QC_OK;
}

static int cmp_off(const void *a, const void *b)
{
	const struct qc_bundle_tensor *x = a, *y = b;
	return x->off < y->off ? -1 : x->off > y->off;
}

static int check_disjoint(struct qc_bundle *b, struct qc_err *err)
{
	/* sort a copy by offset; the manifest order stays what users see */
	size_t n = (size_t)b->n_tensors;
	struct qc_bundle_tensor *v = malloc(n * sizeof(*v) + 1);
	if (!v)
		return qc_err_set(err, QC_ENOMEM, b->path, NULL, -1, "out of memory");
	memcpy(v, b->tensors, n * sizeof(*v));
	qsort(v, n, sizeof(*v), cmp_off);
	int rc = QC_OK;
	for (size_t i = 1; i < n && !rc; i++)
		if (v[i - 1].off + v[i - 1].size > v[i].off)
			rc = qc_err_set(err, QC_EFORMAT, b->path, v[i].name, (int64_t)v[i].off, "data overlaps tensor '%s'",
					v[i - 1].name);
	for (size_t i = 0; i < n && !rc; i++)
		for (size_t k = i + 1; k < n; k++)
			if (strcmp(b->tensors[i].name, b->tensors[k].name) == 0) {
				rc = qc_err_set(err, QC_EFORMAT, b->path, b->tensors[k].name, -1, "duplicate tensor name");
				break;
			}
	free(v);
	return rc;
}

static int parse(struct qc_bundle *b, struct qc_err *err)
{
	int rc = parse_header(b, err);
	if (rc)
		return rc;
	b->manifest = cJSON_ParseWithLength((const char *)b->map + b->manifest_off, (size_t)b->manifest_size);
	if (!b->manifest)
		return qc_err_set(err, QC_EFORMAT, b->path, NULL, (int64_t)b->manifest_off, "manifest is not valid JSON");
	const cJSON *tg = cJSON_GetObjectItemCaseSensitive(b->manifest, "target");
	const cJSON *ts = cJSON_GetObjectItemCaseSensitive(b->manifest, "tensors");
	if (!cJSON_IsString(tg) || !cJSON_IsArray(ts))
		return qc_err_set(err, QC_EFORMAT, b->path, NULL, (int64_t)b->manifest_off,
				  "manifest lacks 'target' or 'tensors'");
	b->target = tg->valuestring;
	b->n_tensors = (uint64_t)cJSON_GetArraySize(ts);
	b->tensors = calloc((size_t)b->n_tensors + 1, sizeof(*b->tensors));
	if (!b->tensors)
		return qc_err_set(err, QC_ENOMEM, b->path, NULL, -1, "out of memory");
	uint64_t i = 0;
	const cJSON *j;
	cJSON_ArrayForEach(j, ts) {
		rc = parse_tensor(b, j, &b->tensors[i++], err);
		if (rc)
			return rc;
	}
	if ((rc = check_disjoint(b, err)))
		return rc;
	struct qc_bundle_tp tp; /* a --tp bundle: its "tp" object and members (bundle_tp.h) */
	return qc_bundle_tp_read(b, &tp, err);
}

static int open_common(struct qc_bundle *b, struct qc_bundle **out, struct qc_err *err)
{
	int rc = parse(b, err);
	if (rc) {
		qc_bundle_close(b);
		return rc;
	}
	*out = b;
	return QC_OK;
}

int qc_bundle_open(const char *path, struct qc_bundle **out, struct qc_err *err)
{
	*out = NULL;
	struct qc_bundle *b = calloc(1, sizeof(*b));
	if (!b || !(b->path = strdup(path))) {
		free(b);
		return qc_err_set(err, QC_ENOMEM, path, NULL, -1, "out of memory");
	}
	b->file.fd = -1;
	int rc = qc_map_open(path, &b->file, err);
	if (rc) {
		qc_bundle_close(b);
		return rc;
	}
	b->map = b->file.p;
	b->size = b->file.size;
	return open_common(b, out, err);
}

int qc_bundle_open_mem(const void *buf, uint64_t len, const char *name, struct qc_bundle **out,
		       struct qc_err *err)
{
	*out = NULL;
	struct qc_bundle *b = calloc(1, sizeof(*b));
	if (!b || !(b->path = strdup(name))) {
		free(b);
		return qc_err_set(err, QC_ENOMEM, name, NULL, -1, "out of memory");
	}
	b->file.fd = -1;
	b->map = buf;
	b->size = len;
	return open_common(b, out, err);
}

void qc_bundle_close(struct qc_bundle *b)
{
	if (!b)
		return;
	cJSON_Delete(b->manifest);
	free(b->tensors);
	qc_map_close(&b->file);
	free(b->path);
	free(b);
}

const struct qc_bundle_tensor *qc_bundle_find(const struct qc_bundle *b, const char *name)
{
	for (uint64_t i = 0; i < b->n_tensors; i++)
		if (strcmp(b->tensors[i].name, name) == 0)
			return &b->tensors[i];
	return NULL;
}

const struct qc_bundle_tensor *qc_bundle_find_part(const struct qc_bundle *b, const char *name,
						   const struct qc_bundle_part **part)
{
	for (uint64_t i = 0; i < b->n_tensors; i++)
		for (int k = 0; k < b->tensors[i].n_parts; k++)
			if (strcmp(b->tensors[i].parts[k].name, name) == 0) {
				*part = &b->tensors[i].parts[k];
				return &b->tensors[i];
			}
	return NULL;
}

int qc_bundle_verify_tensor(const struct qc_bundle *b, const struct qc_bundle_tensor *t, struct qc_err *err)
{
	/* hash in windows and drop each from RSS, so verifying a 100 GB bundle stays small */
	const uint64_t win = 64u << 20;
	XXH3_state_t *st = XXH3_createState();
	if (!st)
		return qc_err_set(err, QC_ENOMEM, b->path, t->name, -1, "out of memory");
	XXH3_64bits_reset(st);
	for (uint64_t o = 0; o < t->size; o += win) {
		uint64_t n = t->size - o < win ? t->size - o : win;
		XXH3_64bits_update(st, b->map + t->off + o, (size_t)n);
		qc_map_release(&b->file, t->off + o, n);
	}
	uint64_t h = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	if (h != t->xxh3)
		return qc_err_set(err, QC_ECHECKSUM, b->path, t->name, (int64_t)t->off,
				  "checksum mismatch: stored %016llx, data hashes to %016llx",
				  (unsigned long long)t->xxh3, (unsigned long long)h);
	return QC_OK;
}
