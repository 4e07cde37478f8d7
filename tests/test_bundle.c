/* test_bundle.c — GGUF → bundle → dump round trips for every fixture and target.
 * dump(bundle) must equal dump(gguf) byte for byte for every source tensor
 * (fused MoE halves included); outputs are byte-identical across runs; verify
 * passes and catches a flipped byte; an independent tar reader (libarchive)
 * sees the same members and data; tensor data is 4096-aligned. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../tests/check.h"
#include "bundle.h"
#include "convert.h"
#include "dump.h"
#include "plan.h"

static char tmpdir[256];

static char *dump_to_mem(bool bundle, const void *h, const char *name, size_t *len, int *rc)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	struct qc_err err = {0};
	*rc = bundle ? qc_dump_bundle(h, name, f, &err) : qc_dump_gguf(h, name, f, &err);
	fclose(f);
	if (*rc)
		fprintf(stderr, "dump %s: %s\n", name, err.msg);
	return buf;
}

static bool files_equal(const char *a, const char *b)
{
	FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
	bool eq = fa && fb;
	while (eq) {
		int x = fgetc(fa), y = fgetc(fb);
		if (x != y)
			eq = false;
		if (x == EOF || y == EOF)
			break;
	}
	if (fa)
		fclose(fa);
	if (fb)
		fclose(fb);
	return eq;
}

/* libarchive reads the bundle as a plain tar: same members, same bytes. */
static void check_with_libarchive(const char *path, const struct qc_bundle *b)
{
	struct archive *a = archive_read_new();
	archive_read_support_format_tar(a);
	int r = archive_read_open_filename(a, path, 1 << 16);
	CHECK(r == ARCHIVE_OK, "libarchive cannot open %s: %s", path, archive_error_string(a));
	struct archive_entry *e;
	uint64_t n_tensors = 0;
	bool saw_hdr = false, saw_manifest = false;
	while (r == ARCHIVE_OK && archive_read_next_header(a, &e) == ARCHIVE_OK) {
		const char *nm = archive_entry_pathname(e);
		int64_t sz = archive_entry_size(e);
		if (strcmp(nm, QC_BUNDLE_HDR_MEMBER) == 0) {
			saw_hdr = true;
		} else if (strcmp(nm, "manifest.json") == 0) {
			saw_manifest = (uint64_t)sz == b->manifest_size;
		} else if (strncmp(nm, "tensors/", 8) == 0) {
			const struct qc_bundle_tensor *t = qc_bundle_find(b, nm + 8);
			CHECK(t && (uint64_t)sz == t->size, "%s: member %s unknown or wrong size", path, nm);
			if (t) {
				uint8_t *buf = malloc((size_t)sz + 1);
				la_ssize_t got = archive_read_data(a, buf, (size_t)sz);
				CHECK(got == sz && memcmp(buf, qc_bundle_data(b, t), (size_t)sz) == 0,
				      "%s: member %s data differs", path, nm);
				free(buf);
				n_tensors++;
			}
		} else {
			CHECK(0, "%s: unexpected member %s", path, nm);
		}
	}
	CHECK(saw_hdr && saw_manifest && n_tensors == b->n_tensors, "%s: tar members: hdr %d manifest %d tensors %llu/%llu",
	      path, saw_hdr, saw_manifest, (unsigned long long)n_tensors, (unsigned long long)b->n_tensors);
	archive_read_free(a);
}

/* Encodings the sm80+ targets store in a marlin layout, and its stripe (rows);
 * docs/layout-marlin.md's table, written out here. */
static int marlin_stripe(enum qc_target tgt, enum qc_type t)
{
	static const struct { const char *type; int rows; } marlin[] = {
		{ "q4_0", 64 }, { "q4_1", 64 }, { "q4_K", 64 }, { "q6_K", 64 }, { "q8_0", 32 }, { "q5_K", 32 },
	};
	if (tgt == QC_TARGET_CPU)
		return 0;
	for (size_t i = 0; i < sizeof marlin / sizeof marlin[0]; i++)
		if (!strcmp(qc_type_get(t)->name, marlin[i].type))
			return marlin[i].rows;
	return 0;
}

/* Dense fusion (docs/bundle.md "Fusion"): on sm80+ targets, attn_q|attn_k|attn_v
 * become attn_qkv (attn_q|attn_k attn_qk when attn_v's encoding differs) and
 * ffn_gate|ffn_up ffn_gate_up, rows stacked in that order, where the encoding has a
 * marlin layout and every part starts on its stripe; never on cpu. */
static void check_dense_fusion(const struct qc_gguf_model *m, const struct qc_bundle *b, enum qc_target tgt,
			       const char *out)
{
	static const struct { const char *part[3]; const char *fused[4]; } groups[] = {
		{ { "attn_q", "attn_k", "attn_v" }, { NULL, NULL, "attn_qk", "attn_qkv" } },
		{ { "ffn_gate", "ffn_up", NULL }, { NULL, NULL, "ffn_gate_up", NULL } },
	};
	for (long layer = 0;; layer++) {
		char nm[96];
		snprintf(nm, sizeof nm, "blk.%ld.attn_norm.weight", layer);
		if (!qc_gguf_model_find(m, nm))
			break;
		for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++) {
			const struct qc_gguf_tensor *src[3] = { NULL };
			int n_src = 0, want = 0;
			for (int j = 0; j < 3 && groups[gi].part[j]; j++, n_src++) {
				snprintf(nm, sizeof nm, "blk.%ld.%s.weight", layer, groups[gi].part[j]);
				src[j] = qc_gguf_model_find(m, nm);
			}
			if (!src[0])
				continue;
			/* the run from the first part that shares its encoding, if that has a name */
			const int stripe = marlin_stripe(tgt, src[0]->type);
			int64_t rows = 0;
			for (int j = 0; j < n_src && src[j] && src[j]->type == src[0]->type && stripe &&
					rows % stripe == 0; j++) {
				rows += src[j]->ne[1];
				want = j + 1;
			}
			while (want > 1 && !groups[gi].fused[want])
				want--;
			for (int f = 2; f <= n_src; f++) {
				if (!groups[gi].fused[f])
					continue;
				snprintf(nm, sizeof nm, "blk.%ld.%s.weight", layer, groups[gi].fused[f]);
				const struct qc_bundle_tensor *t = qc_bundle_find(b, nm);
				if (f != want) {
					CHECK(!t, "%s: %s written (expected %d parts fused)", out, nm, want);
					continue;
				}
				bool ok = t && t->n_parts == f && t->ne[0] == src[0]->ne[0] && t->ne[2] == 1;
				for (int j = 0, r0 = 0; ok && j < f; r0 += (int)src[j]->ne[1], j++)
					ok = !strcmp(t->parts[j].name, src[j]->name) && t->parts[j].row0 == r0 &&
					     t->parts[j].n_rows == src[j]->ne[1] && !qc_bundle_find(b, src[j]->name);
				CHECK(ok, "%s: %s missing or not its parts in order", out, nm);
			}
		}
	}
}

static void check_model(const char *in, enum qc_target tgt, bool deep)
{
	char out[512], out2[512];
	const char *base = strrchr(in, '/') + 1;
	snprintf(out, sizeof out, "%s/%s.%s.qb", tmpdir, base, qc_target_name(tgt));
	struct qc_convert_opts o = { .in = in, .out = out, .target = tgt, .alignment = QC_BUNDLE_ALIGN,
				     .plan_flags = QC_PLAN_FUSE_ALL };
	struct qc_err err = {0};
	int rc = qc_convert_gguf(&o, NULL, &err);
	CHECK(rc == QC_OK, "convert %s for %s: %s", in, qc_target_name(tgt), err.msg);
	if (rc)
		return;
	struct qc_bundle *b = NULL;
	struct qc_gguf_model *m = NULL;
	rc = qc_bundle_open(out, &b, &err);
	CHECK(rc == QC_OK, "open %s: %s", out, err.msg);
	qc_gguf_model_open(in, &m, &err);
	if (rc || !m)
		goto done;
	CHECK(strcmp(b->target, qc_target_name(tgt)) == 0, "%s: target %s", out, b->target);
	for (uint64_t i = 0; i < b->n_tensors; i++) {
		CHECK(b->tensors[i].off % 4096 == 0, "%s: %s misaligned", out, b->tensors[i].name);
		CHECK(qc_bundle_verify_tensor(b, &b->tensors[i], &err) == QC_OK, "%s: %s", out, err.msg);
	}
	/* every source tensor comes back exactly, fused or not */
	for (uint64_t i = 0; i < m->n_tensors; i++) {
		size_t la = 0, lb = 0;
		int ra, rb;
		const char *nm = m->tensors[i]->name;
		char *da = dump_to_mem(false, m, nm, &la, &ra);
		char *db = dump_to_mem(true, b, nm, &lb, &rb);
		CHECK(ra == 0 && rb == 0 && la == lb && la == m->tensors[i]->n_elems * 4 && memcmp(da, db, la) == 0,
		      "%s: dump(bundle) != dump(gguf) for %s (%zu vs %zu bytes)", out, nm, lb, la);
		free(da);
		free(db);
	}
	/* MoE: gate and up experts of the same encoding are fused into one w13 per layer */
	for (uint64_t i = 0; i < m->n_tensors; i++) {
		const char *nm = m->tensors[i]->name;
		if (!strstr(nm, "ffn_gate_exps"))
			continue;
		char up[96], w13[96];
		long layer = strtol(nm + 4, NULL, 10);
		snprintf(up, sizeof up, "blk.%ld.ffn_up_exps.weight", layer);
		snprintf(w13, sizeof w13, "blk.%ld.ffn_gate_up_exps.weight", layer);
		const struct qc_gguf_tensor *g = m->tensors[i], *u = qc_gguf_model_find(m, up);
		const struct qc_bundle_tensor *f = qc_bundle_find(b, w13);
		if (u && u->type == g->type) {
			CHECK(f && f->ne[0] == g->ne[0] && f->ne[1] == 2 * g->ne[1] && f->ne[2] == g->ne[2] && f->n_parts == 2 &&
			      strcmp(f->parts[0].name, nm) == 0 && f->parts[0].row0 == 0 && f->parts[1].row0 == g->ne[1],
			      "%s: %s not fused as gate-then-up", out, w13);
			CHECK(!qc_bundle_find(b, nm) && !qc_bundle_find(b, up), "%s: halves stored twice", out);
		} else {
			CHECK(!f, "%s: %s fused although encodings differ", out, w13);
		}
	}
	check_dense_fusion(m, b, tgt, out);
	if (deep)
		check_with_libarchive(out, b);
	if (deep) {
		/* byte-identical output across runs */
		snprintf(out2, sizeof out2, "%s/again.qb", tmpdir);
		o.out = out2;
		CHECK(qc_convert_gguf(&o, NULL, &err) == QC_OK && files_equal(out, out2), "%s: second run differs", in);
		unlink(out2);
	}
done:
	qc_bundle_close(b);
	qc_gguf_model_close(m);
	unlink(out);
}

/* A flipped data byte is caught by verify and names the tensor; the rest still pass. */
static void check_verify_catches_flip(const char *in)
{
	char out[512];
	snprintf(out, sizeof out, "%s/flip.qb", tmpdir);
	struct qc_convert_opts o = { .in = in, .out = out, .target = QC_TARGET_CPU, .alignment = QC_BUNDLE_ALIGN };
	struct qc_err err = {0};
	CHECK(qc_convert_gguf(&o, NULL, &err) == QC_OK, "%s", err.msg);
	FILE *f = fopen(out, "rb");
	CHECK(f != NULL, "cannot read %s", out);
	if (!f)
		return;
	fseek(f, 0, SEEK_END);
	size_t n = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *buf = malloc(n);
	CHECK(fread(buf, 1, n, f) == n, "read");
	fclose(f);
	struct qc_bundle *b = NULL;
	CHECK(qc_bundle_open_mem(buf, n, out, &b, &err) == QC_OK, "%s", err.msg);
	if (b) {
		const struct qc_bundle_tensor *t = &b->tensors[b->n_tensors / 2];
		buf[t->off + t->size / 2] ^= 0x40;
		int bad = 0;
		for (uint64_t i = 0; i < b->n_tensors; i++)
			if (qc_bundle_verify_tensor(b, &b->tensors[i], &err) != QC_OK) {
				bad++;
				CHECK(&b->tensors[i] == t && err.code == QC_ECHECKSUM && strcmp(err.tensor, t->name) == 0,
				      "wrong tensor blamed: %s", err.tensor);
			}
		CHECK(bad == 1, "%d tensors failed verification, expected exactly the flipped one", bad);
	}
	qc_bundle_close(b);
	free(buf);
	unlink(out);
}

/* A split set (mkgguf --split 3, llama.cpp's gguf-split layout) converts to the same
 * tensors as the single file made from the same seed, with every shard in "source". */
static void check_split(void)
{
	const char *bin = getenv("QC_BIN") ? getenv("QC_BIN") : "build/bin";
	char cmd[2048], one[512], split[512], shard[512];
	snprintf(one, sizeof one, "%s/one.gguf", tmpdir);
	snprintf(split, sizeof split, "%s/sp.gguf", tmpdir);
	snprintf(cmd, sizeof cmd, "%s/mkgguf --preset tiny-moe --type q8_0 --seed 7 -o %s && "
		 "%s/mkgguf --preset tiny-moe --type q8_0 --seed 7 --split 3 -o %s", bin, one, bin, split);
	int rc = system(cmd);
	CHECK(rc == 0, "mkgguf failed: %s", cmd);
	if (rc)
		return;
	snprintf(shard, sizeof shard, "%s/sp-00002-of-00003.gguf", tmpdir);
	struct qc_gguf_model *a = NULL, *b = NULL;
	struct qc_err err = {0};
	CHECK(qc_gguf_model_open(one, &a, &err) == QC_OK, "%s", err.msg);
	CHECK(qc_gguf_model_open(shard, &b, &err) == QC_OK, "split set via shard 2: %s", err.msg);
	if (a && b) {
		CHECK(b->n_files == 3 && a->n_tensors == b->n_tensors, "split: %d files, %llu vs %llu tensors", b->n_files,
		      (unsigned long long)b->n_tensors, (unsigned long long)a->n_tensors);
		char out[512];
		snprintf(out, sizeof out, "%s/sp.qb", tmpdir);
		struct qc_convert_opts o = { .in = shard, .out = out, .target = QC_TARGET_SM90, .alignment = QC_BUNDLE_ALIGN,
					     .plan_flags = QC_PLAN_FUSE_ALL };
		struct qc_bundle *qb = NULL;
		CHECK(qc_convert_gguf(&o, NULL, &err) == QC_OK && qc_bundle_open(out, &qb, &err) == QC_OK, "%s", err.msg);
		if (qb) {
			const cJSON *files = cJSON_GetObjectItem(cJSON_GetObjectItem(qb->manifest, "source"), "files");
			CHECK(cJSON_GetArraySize(files) == 3, "split: %d source files recorded", cJSON_GetArraySize(files));
			for (uint64_t i = 0; i < a->n_tensors; i++) {
				size_t la, lb;
				int ra, rb;
				char *da = dump_to_mem(false, a, a->tensors[i]->name, &la, &ra);
				char *db = dump_to_mem(true, qb, a->tensors[i]->name, &lb, &rb);
				CHECK(!ra && !rb && la == lb && memcmp(da, db, la) == 0, "split: %s differs", a->tensors[i]->name);
				free(da);
				free(db);
			}
		}
		qc_bundle_close(qb);
		unlink(out);
		/* issue 15 #1: another shard of the set as the output is refused before
		 * anything is written, and the set still opens */
		char last[512];
		snprintf(last, sizeof last, "%s/sp-00003-of-00003.gguf", tmpdir);
		o.out = last;
		struct qc_err e3 = {0};
		rc = qc_convert_gguf(&o, NULL, &e3);
		CHECK(rc == QC_EINVAL && strcmp(e3.path, last) == 0 && strstr(e3.msg, "input"),
		      "convert_refuses_output_that_is_a_shard: rc %d, %s: %s", rc, e3.path, e3.msg);
		struct qc_gguf_model *c = NULL;
		CHECK(qc_gguf_model_open(shard, &c, &err) == QC_OK && c->n_files == 3,
		      "split set intact after a refused conversion: %s", err.msg);
		qc_gguf_model_close(c);
	}
	qc_gguf_model_close(a);
	qc_gguf_model_close(b);
	unlink(one);
	for (int i = 1; i <= 3; i++) {
		snprintf(shard, sizeof shard, "%s/sp-%05d-of-00003.gguf", tmpdir, i);
		unlink(shard);
	}
}

int main(void)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/qc_test_bundle.XXXXXX");
	CHECK(mkdtemp(tmpdir) != NULL, "mkdtemp");
	const char *sub[] = { "gguf", "gguf-quant" };
	const bool have_fx = check_have_fixtures("test_bundle");
	int n = 0;
	for (int s = 0; have_fx && s < 2; s++) {
		char dir[1024];
		snprintf(dir, sizeof dir, "%s/%s", check_fixtures(), sub[s]);
		DIR *d = opendir(dir);
		CHECK(d != NULL, "no fixtures at %s", dir);
		struct dirent *e;
		while (d && (e = readdir(d))) {
			size_t l = strlen(e->d_name);
			if (l < 6 || strcmp(e->d_name + l - 5, ".gguf") != 0 || strstr(e->d_name, "tinyllamas-stories-260k-q8_0"))
				continue; /* that one is malformed on purpose: test_bad_gguf covers it */
			char p[2048];
			snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
			for (int t = 0; t < QC_TARGET_COUNT; t++)
				check_model(p, (enum qc_target)t, t == QC_TARGET_SM90);
			n++;
		}
		if (d)
			closedir(d);
	}
	if (have_fx) {
		CHECK(n >= 28, "only %d fixture models", n);
		char p[1024];
		snprintf(p, sizeof p, "%s/gguf/stories260K.gguf", check_fixtures());
		check_verify_catches_flip(p);
	}
	check_split();
	rmdir(tmpdir);
	return check_report("test_bundle");
}
