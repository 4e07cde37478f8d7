/* test_bad_bundle.c — the bundle reader rejects hostile input with a full qc_err:
 * a bundle the CLI made from stories260K, cut at every byte of its first 1.5 KB and
 * ~300 more offsets, with header, manifest and data damage, and with manifests that are
 * valid JSON but wrong (misaligned, overlapping, past the manifest, unknown type or
 * layout, duplicate names, bad dims, bad hashes) and, on a --tp 2 bundle, "tp" objects
 * and rank members that are wrong; verify names the tensor whose data
 * byte flipped and passes its neighbours. Expected offsets come from where this file
 * put the bytes it changed. Each check has a valid near-miss input that must pass.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include <cjson/cJSON.h>

#include "../tests/check.h"
#include "bad_input_util.h"
#include "bundle.h"
#include "gguf_walk.h"
#include "tar.h"

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

static cJSON *manifest_tensor(cJSON *m, int i)
{
	return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(m, "tensors"), i);
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

/* ---- a --tp bundle's "tp" object and members (formats/bundle_tp.h) ------------------- */

enum tp_edit {
	TP_NONE, TP_OTHER_SPLIT, TP_NOT_OBJECT, TP_SIZE_0, TP_SIZE_9, TP_SIZE_FRACTION, TP_VOCAB_ONE, TP_VOCAB_GAP,
	TP_VOCAB_SHORT, TP_VOCAB_ZERO, TP_VOCAB_INT32, TP_NO_N_VOCAB, TP_NO_PREFIX, TP_RANK_5, TP_INTERLEAVE,
	TP_EMPTY_RANK, TP_COUNT
};

/* The --tp 2 stories260K bundle with one edit of its manifest; *t0 the offset of its
 * first member (rank 0's first). */
static void tp_edit(const uint8_t *src, enum tp_edit e, struct blob *out, uint64_t *t0)
{
	cJSON *m = bundle_manifest(src);
	cJSON *tp = cJSON_GetObjectItemCaseSensitive(m, "tp");
	cJSON *cfg = cJSON_GetObjectItemCaseSensitive(m, "config");
	cJSON *a = manifest_tensor(m, 0);
	const double V = num(cfg, "n_vocab");
	*t0 = (uint64_t)num(a, "offset");
	cJSON *b = NULL; /* rank 1's first member */
	cJSON *x;
	cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(m, "tensors"))
		if (!b && strncmp(cJSON_GetObjectItemCaseSensitive(x, "name")->valuestring, "tp1.", 4) == 0)
			b = x;
	const char *vocab = NULL;
	char buf[256], an[256];
	switch (e) {
	case TP_NONE: break;
	case TP_OTHER_SPLIT: snprintf(buf, sizeof buf, "[[0, 200], [200, %.0f]]", V - 200); vocab = buf; break;
	case TP_NOT_OBJECT: cJSON_ReplaceItemInObjectCaseSensitive(m, "tp", cJSON_CreateNumber(2)); break;
	case TP_SIZE_0: set_num(tp, "size", 0); break;
	case TP_SIZE_9: set_num(tp, "size", 9); break;
	case TP_SIZE_FRACTION: set_num(tp, "size", 1.5); break;
	case TP_VOCAB_ONE: snprintf(buf, sizeof buf, "[[0, %.0f]]", V); vocab = buf; break;
	case TP_VOCAB_GAP: snprintf(buf, sizeof buf, "[[0, 200], [210, %.0f]]", V - 210); vocab = buf; break;
	case TP_VOCAB_SHORT: vocab = "[[0, 200], [200, 100]]"; break;
	case TP_VOCAB_ZERO: snprintf(buf, sizeof buf, "[[0, 0], [0, %.0f]]", V); vocab = buf; break;
	case TP_VOCAB_INT32: vocab = "[[0, 3000000000], [3000000000, 1]]"; break;
	case TP_NO_N_VOCAB: cJSON_DeleteItemFromObjectCaseSensitive(cfg, "n_vocab"); break;
	case TP_NO_PREFIX: set_str(a, "name", cJSON_GetObjectItemCaseSensitive(a, "name")->valuestring + 4); break;
	case TP_RANK_5: snprintf(an, sizeof an, "tp5.%s", cJSON_GetObjectItemCaseSensitive(a, "name")->valuestring + 4);
		set_str(a, "name", an); break;
	case TP_INTERLEAVE: /* rank 0's first member named as rank 1's and the other way round */
		snprintf(an, sizeof an, "%s", cJSON_GetObjectItemCaseSensitive(a, "name")->valuestring);
		set_str(a, "name", cJSON_GetObjectItemCaseSensitive(b, "name")->valuestring);
		set_str(b, "name", an);
		break;
	case TP_EMPTY_RANK: set_num(tp, "size", 3);
		snprintf(buf, sizeof buf, "[[0, 100], [100, 100], [200, %.0f]]", V - 200); vocab = buf; break;
	case TP_COUNT: break;
	}
	if (vocab)
		cJSON_ReplaceItemInObjectCaseSensitive(tp, "vocab", cJSON_Parse(vocab));
	char *json = cJSON_PrintUnformatted(m);
	bundle_with_manifest(src, json, out);
	free(json);
	cJSON_Delete(m);
}

static void tp_checks(const uint8_t *good, size_t len)
{
	const char *nm = "stories260K-tp2.qb";
	CHECK(bundle_opens("--tp 2 bundle", nm, good, len), "bundle_opens_tp_bundle");
	static const struct {
		const char *what;
		bool at_member;            /* the error's offset: the first member's, else the manifest's */
		const char *tensor;        /* named tensor ("" none) */
	} want[TP_COUNT] = {
		[TP_NOT_OBJECT] = { "tp_not_an_object", false, "" },
		[TP_SIZE_0] = { "tp_size_0", false, "" },
		[TP_SIZE_9] = { "tp_size_9", false, "" },
		[TP_SIZE_FRACTION] = { "tp_size_not_integer", false, "" },
		[TP_VOCAB_ONE] = { "tp_vocab_one_range_for_two_ranks", false, "" },
		[TP_VOCAB_GAP] = { "tp_vocab_gap", false, "" },
		[TP_VOCAB_SHORT] = { "tp_vocab_does_not_cover_n_vocab", false, "" },
		[TP_VOCAB_ZERO] = { "tp_vocab_empty_range", false, "" },
		[TP_VOCAB_INT32] = { "tp_vocab_past_int32", false, "" },
		[TP_NO_N_VOCAB] = { "tp_without_config_n_vocab", false, "" },
		[TP_NO_PREFIX] = { "tp_member_without_rank", true, NULL },
		[TP_RANK_5] = { "tp_member_of_rank_5", true, NULL },
		[TP_INTERLEAVE] = { "tp_ranks_interleave", true, "" },
		[TP_EMPTY_RANK] = { "tp_rank_without_members", false, "" },
	};
	for (int e = 0; e < TP_COUNT; e++) {
		struct blob b;
		uint64_t t0;
		tp_edit(good, (enum tp_edit)e, &b, &t0);
		if (e == TP_NONE || e == TP_OTHER_SPLIT) { /* valid near-misses */
			CHECK(bundle_opens(e ? "another valid vocabulary split" : "rewritten tp bundle", nm, b.p, b.len),
			      "bundle_opens_valid_tp %d", e);
		} else {
			cJSON *m = bundle_manifest(b.p);
			const cJSON *t = manifest_tensor(m, 0);
			char tn[256];
			snprintf(tn, sizeof tn, "%s", cJSON_GetObjectItemCaseSensitive(t, "name")->valuestring);
			cJSON_Delete(m);
			const int64_t off = want[e].at_member ? (int64_t)t0 : (int64_t)get_le(b.p + HDR + 16, 8);
			CHECK(bundle_fails(want[e].what, nm, b.p, b.len, QC_EFORMAT, off, want[e].tensor ? want[e].tensor : tn),
			      "bundle_rejects_%s", want[e].what);
		}
		blob_free(&b);
	}
}

/* qconvert stories260K --tp 2, then tp_checks. */
static void tp_bundle_checks(const struct stories_run *r)
{
	char bundle[1100], errp[1100];
	snprintf(bundle, sizeof bundle, "%s/stories260K-tp2.qb", r->dir);
	snprintf(errp, sizeof errp, "%s/stderr.txt", r->dir);
	const char *args[] = { r->st.path, "--target", "cpu", "-q", "--tp", "2", "-o", bundle, NULL };
	int rc = run_cli(args, errp);
	CHECK(rc == 0, "qconvert %s --tp 2 (exit %d)", r->st.path, rc);
	size_t len = 0;
	uint8_t *bb = rc == 0 ? slurp(bundle, &len) : NULL;
	if (bb)
		tp_checks(bb, len);
	free(bb);
}

int main(void)
{
	if (!check_have_fixtures("test_bad_bundle"))
		return check_report("test_bad_bundle");
	struct stories_run r;
	stories_open(&r, "/tmp/qc_bad_bundle.XXXXXX");
	if (r.bb)
		bundle_checks(r.bb, r.blen, "stories260K.qb");
	if (r.have_dir)
		tp_bundle_checks(&r);
	stories_close(&r);
	return check_report("test_bad_bundle");
}
