/* test_bad_cli.c — qconvert on hostile input, as a user sees it: bad GGUFs exit 1 with a
 * message naming the file, the offset and the tensor, and leave no output or temp file
 * (convert and inspect); verify names the tensor whose byte flipped; usage errors exit
 * 2 (a bad --tp N among them; a --tp not dividing the heads exits 1 naming the tensor);
 * an output that is an input under any name (same path, symlink, hard link, HF folder
 * member) is refused before anything is written; hostile key and tensor names give a
 * UTF-8 manifest and tar members that stay inside the archive (or a clean refusal).
 * Each check has a valid near-miss run that must pass.
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include "../tests/check.h"
#include "bad_input_util.h"
#include "bundle.h"
#include "gguf.h"
#include "gguf_walk.h"

static void cli_checks(const char *dir, const struct fixture *st, const struct fixture *q8, const char *bundle)
{
	char errp[1024], in[1024], out[1024], base[64];
	snprintf(errp, sizeof errp, "%s/stderr.txt", dir);
	/* ~6 bad GGUFs built from stories260K, plus the real unaligned q8_0 file */
	struct bad_file {
		const char *name;
		const char *tensor; /* expected in stderr, or NULL */
	} files[] = {
		{ "bad-magic.gguf", NULL }, { "truncated.gguf", NULL }, { "version4.gguf", NULL },
		{ "misaligned.gguf", NULL }, { "past-end.gguf", NULL }, { "n-dims-5.gguf", NULL },
		{ "absurd-count.gguf", NULL }, { NULL, "blk.0.ffn_down.weight" },
	};
	const struct walk_tensor *te = walk_find_tensor(&st->w, "token_embd.weight");
	CHECK(te != NULL, "stories260K.gguf has token_embd.weight");
	if (!te)
		return;
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		uint8_t *p = dup_bytes(st->buf, st->len);
		size_t len = st->len;
		const char *nm = files[i].name;
		if (!nm) {
			snprintf(in, sizeof in, "%s", q8->path);
		} else {
			if (strcmp(nm, "bad-magic.gguf") == 0)
				p[0] = 'X';
			else if (strcmp(nm, "truncated.gguf") == 0)
				len = (size_t)(st->w.t[3].off + 5);
			else if (strcmp(nm, "version4.gguf") == 0)
				set_le(p + 4, 4, 4);
			else if (strcmp(nm, "misaligned.gguf") == 0)
				set_le(p + te->offset_off, te->rel + 4, 8);
			else if (strcmp(nm, "past-end.gguf") == 0)
				set_le(p + te->offset_off, 1ull << 40, 8);
			else if (strcmp(nm, "n-dims-5.gguf") == 0)
				set_le(p + te->ndims_off, 5, 4);
			else
				set_le(p + 8, 1ull << 62, 8);
			snprintf(in, sizeof in, "%s/%s", dir, nm);
			CHECK(spit(in, p, len), "write %s", in);
			if (strcmp(nm, "misaligned.gguf") == 0 || strcmp(nm, "past-end.gguf") == 0 ||
			    strcmp(nm, "n-dims-5.gguf") == 0)
				files[i].tensor = "token_embd.weight";
		}
		free(p);
		snprintf(base, sizeof base, "out%zu.qb", i);
		snprintf(out, sizeof out, "%s/%s", dir, base);
		const char *args[] = { in, "--target", "cpu", "-o", out, NULL };
		int rc = run_cli(args, errp);
		size_t elen = 0;
		char *e = (char *)slurp(errp, &elen);
		bool names = e && strstr(e, in) && strstr(e, "offset 0x") &&
			     (!files[i].tensor || strstr(e, files[i].tensor));
		CHECK(rc == 1 && names, "cli_convert_rejects_bad_gguf %s: exit %d, stderr: %s", nm ? nm : in, rc, e ? e : "");
		CHECK(!file_exists(out) && !temp_left(dir, base), "cli_convert_leaves_no_output %s", nm ? nm : in);
		free(e);
		const char *iargs[] = { "inspect", in, NULL };
		rc = run_cli(iargs, errp);
		e = (char *)slurp(errp, &elen);
		CHECK(rc == 1 && e && strstr(e, in) && strstr(e, "offset 0x"), "cli_inspect_rejects_bad_gguf %s: exit %d, stderr: %s",
		      nm ? nm : in, rc, e ? e : "");
		free(e);
	}
	/* the same command on a valid file succeeds (so the checker can fail) */
	snprintf(out, sizeof out, "%s/good-again.qb", dir);
	const char *okargs[] = { st->path, "--target", "cpu", "-q", "-o", out, NULL };
	CHECK(run_cli(okargs, errp) == 0 && file_exists(out) && !temp_left(dir, "good-again.qb"),
	      "cli_convert_accepts_valid_gguf");

	/* verify: intact bundle passes; one flipped data byte fails naming the tensor */
	const char *vargs[] = { "verify", bundle, NULL };
	CHECK(run_cli(vargs, errp) == 0, "cli_verify_accepts_intact_bundle");
	size_t blen;
	uint8_t *bb = slurp(bundle, &blen);
	struct qc_bundle *b = NULL;
	if (bb && qc_bundle_open_mem(bb, blen, bundle, &b, NULL) == QC_OK) {
		const struct qc_bundle_tensor *t = &b->tensors[b->n_tensors / 2];
		char tname[256];
		snprintf(tname, sizeof tname, "'%s'", t->name);
		uint8_t *q = dup_bytes(bb, blen);
		q[t->off + t->size / 3] ^= 0x10;
		snprintf(in, sizeof in, "%s/flipped.qb", dir);
		CHECK(spit(in, q, blen), "write %s", in);
		free(q);
		const char *fargs[] = { "verify", in, NULL };
		int rc = run_cli(fargs, errp);
		size_t elen;
		char *e = (char *)slurp(errp, &elen);
		CHECK(rc == 1 && e && strstr(e, tname) && strstr(e, in), "cli_verify_rejects_flipped_data_byte: exit %d, stderr: %s",
		      rc, e ? e : "");
		free(e);
	}
	qc_bundle_close(b);
	free(bb);

	/* usage errors exit 2 */
	const char *u1[] = { NULL };
	const char *u2[] = { st->path, NULL };
	const char *u3[] = { st->path, "--target", "bogus", NULL };
	const char *u4[] = { st->path, "--target", "cpu", "--bogus", NULL };
	const char *u5[] = { st->path, "--target", NULL };
	const char *u6[] = { "verify", NULL };
	const char *u7[] = { "dump", st->path, NULL };
	const char *u8[] = { st->path, "--target", "cpu", "--align", "1000", NULL };
	const char *u9[] = { st->path, "--target", "cpu", "--tp", "0", NULL };
	const char *u10[] = { st->path, "--target", "cpu", "--tp", "9", NULL };
	const char *u11[] = { st->path, "--target", "cpu", "--tp", "2x", NULL };
	const char *u12[] = { st->path, "--target", "cpu", "--tp", NULL };
	const char *const *usage[] = { u1, u2, u3, u4, u5, u6, u7, u8, u9, u10, u11, u12 };
	for (size_t i = 0; i < sizeof usage / sizeof usage[0]; i++)
		CHECK(run_cli(usage[i], errp) == 2, "cli_usage_error_exits_2 (case %zu)", i + 1);
	const char *help[] = { "--help", NULL };
	CHECK(run_cli(help, errp) == 0, "cli_help_exits_0");

	/* --tp 3 of stories260K's 8 query heads: exit 1 naming the file, tensor and width,
	 * nothing left; --tp 2 of the same file converts */
	snprintf(out, sizeof out, "%s/tp3.qb", dir);
	const char *t3[] = { st->path, "--target", "cpu", "--tp", "3", "-o", out, NULL };
	int rc = run_cli(t3, errp);
	size_t elen = 0;
	char *e = (char *)slurp(errp, &elen);
	CHECK(rc == 1 && e && strstr(e, st->path) && strstr(e, "'blk.0.attn_q.weight'") &&
		      strstr(e, "n_head 8 is not divisible by 3"),
	      "cli_convert_refuses_tp_not_dividing_heads: exit %d, stderr: %s", rc, e ? e : "");
	CHECK(!file_exists(out) && !temp_left(dir, "tp3.qb"), "cli_refused_tp_leaves_no_output");
	free(e);
	snprintf(out, sizeof out, "%s/tp2.qb", dir);
	const char *t2[] = { st->path, "--target", "cpu", "-q", "--tp", "2", "-o", out, NULL };
	CHECK(run_cli(t2, errp) == 0 && file_exists(out), "cli_convert_accepts_tp_dividing_heads");
}

/* Copy file src to dst (small test inputs only). */
static bool copy_file(const char *src, const char *dst)
{
	size_t n = 0;
	uint8_t *p = slurp(src, &n);
	bool ok = p && spit(dst, p, n);
	free(p);
	return ok;
}

/* Fresh inputs in dir: self.gguf (stories260K), sym.qb -> self.gguf, hard.qb (a
 * hard link to it), hf/ (a copy of tests/data/hf/llama) and hf-config-link.qb (a
 * hard link to hf/config.json). Made again for every case, so a case that
 * replaced an input (before the fix) cannot break the next one. */
static bool make_inputs(const char *dir, const struct fixture *st)
{
	static const char *const hf_files[] = { "config.json", "model.safetensors", "tokenizer.json",
						"tokenizer_config.json", "generation_config.json" };
	char a[1100], b[1100], src[512];
	const char *plain[] = { "self.gguf", "sym.qb", "hard.qb", "hf-config-link.qb" };
	for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
		snprintf(a, sizeof a, "%s/%s", dir, plain[i]);
		unlink(a);
	}
	snprintf(a, sizeof a, "%s/hf", dir);
	rm_tree_files(a);
	snprintf(a, sizeof a, "%s/self.gguf", dir);
	snprintf(b, sizeof b, "%s/hard.qb", dir);
	bool ok = spit(a, st->buf, st->len) && link(a, b) == 0;
	snprintf(b, sizeof b, "%s/sym.qb", dir);
	ok = ok && symlink("self.gguf", b) == 0;
	snprintf(a, sizeof a, "%s/hf", dir);
	ok = ok && mkdir(a, 0755) == 0;
	for (size_t i = 0; ok && i < sizeof hf_files / sizeof hf_files[0]; i++) {
		snprintf(src, sizeof src, "tests/data/hf/llama/%s", hf_files[i]);
		snprintf(a, sizeof a, "%s/hf/%s", dir, hf_files[i]);
		ok = copy_file(src, a);
	}
	snprintf(a, sizeof a, "%s/hf/config.json", dir);
	snprintf(b, sizeof b, "%s/hf-config-link.qb", dir);
	return ok && link(a, b) == 0;
}

/* issue 15 #1: an output that is an input, under any name, is refused (exit 1, a
 * message naming the output and calling it the input) before anything is written,
 * and the input is intact. */
static void cli_refuses_output_that_is_input(const char *dir, const struct fixture *st)
{
	char errp[1024], self[1024], sym[1024], hard[1024], hf[1024], member[1100], cfg_path[1100], hfhard[1024];
	char fresh[1100];
	snprintf(errp, sizeof errp, "%s/stderr.txt", dir);
	snprintf(self, sizeof self, "%s/self.gguf", dir);
	snprintf(sym, sizeof sym, "%s/sym.qb", dir);
	snprintf(hard, sizeof hard, "%s/hard.qb", dir);
	snprintf(hf, sizeof hf, "%s/hf", dir);
	snprintf(member, sizeof member, "%s/model.safetensors", hf);
	snprintf(cfg_path, sizeof cfg_path, "%s/config.json", hf);
	snprintf(hfhard, sizeof hfhard, "%s/hf-config-link.qb", dir);
	size_t cfg_len = 0, st_len = 0;
	uint8_t *cfg = slurp("tests/data/hf/llama/config.json", &cfg_len);
	uint8_t *safet = slurp("tests/data/hf/llama/model.safetensors", &st_len);
	struct { const char *what, *in, *out, *victim; const uint8_t *want; size_t want_len; } cases[] = {
		{ "same path", self, self, self, st->buf, st->len },
		{ "symlink to the input", self, sym, self, st->buf, st->len },
		{ "hard link to the input", self, hard, self, st->buf, st->len },
		{ "HF folder member", hf, member, member, safet, st_len },
		{ "hard link to an HF folder member", hf, hfhard, cfg_path, cfg, cfg_len },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		bool ok = cfg && safet && make_inputs(dir, st);
		CHECK(ok, "cli_refuses_output_that_is_input: cannot set up %s: %s", dir, strerror(errno));
		if (!ok)
			break;
		const char *args[] = { cases[i].in, "--target", "cpu", "-q", "-o", cases[i].out, NULL };
		int rc = run_cli(args, errp);
		size_t elen = 0, vlen = 0;
		char *e = (char *)slurp(errp, &elen);
		uint8_t *v = slurp(cases[i].victim, &vlen);
		bool intact = v && vlen == cases[i].want_len && memcmp(v, cases[i].want, vlen) == 0;
		CHECK(rc == 1 && e && strstr(e, "input") && strstr(e, cases[i].out) && intact,
		      "cli_refuses_output_that_is_input (%s): exit %d, input %s, stderr: %s", cases[i].what, rc,
		      intact ? "intact" : "REPLACED", e ? e : "");
		free(e);
		free(v);
		const char *b = strrchr(cases[i].out, '/') + 1;
		char d[1024];
		snprintf(d, sizeof d, "%.*s", (int)(b - 1 - cases[i].out), cases[i].out);
		CHECK(!temp_left(d, b), "cli_refuses_output_that_is_input (%s): a temp file is left", cases[i].what);
	}
	/* the near miss: a fresh output beside the same inputs converts */
	snprintf(fresh, sizeof fresh, "%s/fresh.qb", dir);
	const char *okargs[] = { hf, "--target", "cpu", "-q", "-o", fresh, NULL };
	CHECK(make_inputs(dir, st) && run_cli(okargs, errp) == 0 && file_exists(fresh),
	      "cli_converts_hf_folder_to_a_fresh_output");
	free(cfg);
	free(safet);
	rm_tree_files(hf);
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF), as RFC 8259 wants. */
static bool utf8_valid(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint8_t c = p[i];
		size_t k;
		uint32_t cp, min;
		if (c < 0x80) {
			i++;
			continue;
		} else if ((c & 0xe0) == 0xc0) {
			k = 1, cp = c & 0x1fu, min = 0x80;
		} else if ((c & 0xf0) == 0xe0) {
			k = 2, cp = c & 0x0fu, min = 0x800;
		} else if ((c & 0xf8) == 0xf0) {
			k = 3, cp = c & 0x07u, min = 0x10000;
		} else {
			return false;
		}
		if (n - i <= k)
			return false;
		for (size_t j = 1; j <= k; j++) {
			if ((p[i + j] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (p[i + j] & 0x3fu);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += k + 1;
	}
	return true;
}

/* Members of the bundle (read by libarchive, not by tar.c) whose path escapes the
 * archive: absolute, or with a ".." component. Returns the count, -1 if unreadable. */
static int tar_escaping_members(const uint8_t *p, size_t n, char *first, size_t first_len)
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	int bad = 0;
	archive_read_support_format_tar(a);
	if (archive_read_open_memory(a, p, n) != ARCHIVE_OK) {
		archive_read_free(a);
		return -1;
	}
	while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
		const char *path = archive_entry_pathname(e);
		bool esc = path && path[0] == '/';
		for (const char *c = path; c && !esc; c = strchr(c, '/') ? strchr(c, '/') + 1 : NULL)
			esc = strncmp(c, "..", 2) == 0 && (c[2] == '/' || c[2] == '\0');
		if (esc && !bad++)
			snprintf(first, first_len, "%s", path);
		archive_read_data_skip(a);
	}
	archive_read_free(a);
	return bad;
}

/* A GGUF the reader accepts but whose names are hostile: convert must either refuse it
 * (exit 1, naming the file) or write a bundle whose manifest is valid UTF-8 and whose
 * tar members stay inside the archive. */
static void cli_hostile_names(const char *dir, const struct fixture *st)
{
	char in[1024], out[1024], errp[1024];
	snprintf(errp, sizeof errp, "%s/stderr.txt", dir);
	const struct walk_tensor *t1 = &st->w.t[1];
	struct blob x = {0};
	struct rebuilt r;
	struct { const char *file; const char *key; size_t key_len; const char *tname; } cases[] = {
		{ "ok-names.gguf", "qc.test.key", 11, "qc.test.tensor" },
		{ "key-not-utf8.gguf", "bad\xff\xfekey", 9, NULL },
		{ "key-ctrl.gguf", "bad\x01\n\"key", 9, NULL },
		{ "tensor-not-utf8.gguf", NULL, 0, "out\xffput\xc0\xafnorm" },
		{ "tensor-dotdot.gguf", NULL, 0, "../../../../tmp/qc_bad_input_escape" },
		{ "tensor-absolute.gguf", NULL, 0, "/tmp/qc_bad_input_escape" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		x.len = 0;
		if (cases[i].key) {
			put_str(&x, cases[i].key, cases[i].key_len);
			put_le(&x, QC_GGUF_UINT32, 4);
			put_le(&x, 1, 4);
		}
		struct blob infos = {0}, rec = {0};
		if (cases[i].tname)
			tensor_rec(&rec, cases[i].tname, strlen(cases[i].tname), t1->n_dims, t1->ne, t1->type, t1->rel);
		infos_with(st, cases[i].tname ? 1 : -1, &rec, &infos);
		gguf_rebuild(st, cases[i].key ? &x : NULL, cases[i].key ? 1 : 0, &infos, st->w.n_tensors, st->w.align, &r);
		blob_free(&infos);
		blob_free(&rec);
		CHECK(gguf_opens(cases[i].file, cases[i].file, r.b.p, r.b.len), "reader accepts %s", cases[i].file);
		snprintf(in, sizeof in, "%s/%s", dir, cases[i].file);
		snprintf(out, sizeof out, "%s/hostile%zu.qb", dir, i);
		CHECK(spit(in, r.b.p, r.b.len), "write %s", in);
		blob_free(&r.b);
		const char *args[] = { in, "--target", "cpu", "-q", "-o", out, NULL };
		int rc = run_cli(args, errp);
		size_t elen = 0, blen = 0;
		char *e = (char *)slurp(errp, &elen);
		if (rc == 1) {
			CHECK(i > 0 && e && strstr(e, in) && !file_exists(out),
			      "cli_convert_refuses_hostile_names %s cleanly: stderr: %s", cases[i].file, e ? e : "");
		} else {
			uint8_t *b = rc == 0 ? slurp(out, &blen) : NULL;
			CHECK(b != NULL, "cli_convert_hostile_names %s: exit %d: %s", cases[i].file, rc, e ? e : "");
			if (b) {
				uint64_t moff = get_le(b + HDR + 16, 8), mlen = get_le(b + HDR + 24, 8);
				CHECK(moff + mlen <= blen && utf8_valid(b + moff, (size_t)mlen),
				      "cli_convert_writes_utf8_manifest: %s gives a manifest that is not UTF-8", cases[i].file);
				char first[256] = "";
				int esc = tar_escaping_members(b, blen, first, sizeof first);
				CHECK(esc == 0, "cli_convert_keeps_tar_members_inside: %s gives %d escaping member(s), first '%s'",
				      cases[i].file, esc, first);
				free(b);
			}
		}
		free(e);
	}
	blob_free(&x);
}

int main(void)
{
	struct fixture st = {0}, q8 = {0};
	const bool have_fx = check_have_fixtures("test_bad_cli");
	if (have_fx && !fixture_load(&st, "gguf", "stories260K.gguf"))
		CHECK(0, "cannot read and walk %s", st.path); /* counted once, by test_bad_gguf */
	if (have_fx && !fixture_load(&q8, "gguf", "tinyllamas-stories-260k-q8_0.gguf"))
		CHECK(0, "cannot read and walk %s", q8.path); /* counted once, by test_bad_gguf */

	find_bin();
	char dir[] = "/tmp/qc_bad_cli.XXXXXX";
	bool have_bin = access(qc_bin, X_OK) == 0;
	CHECK(have_bin, "qconvert binary at %s (set QC_BIN to its directory)", qc_bin);
	if (have_bin && st.buf && q8.buf && mkdtemp(dir)) {
		char bundle[1100];
		int rc = convert_stories(st.path, dir, bundle, sizeof bundle);
		CHECK(rc == 0, "cli_converts_stories260K (exit %d)", rc);
		cli_checks(dir, &st, &q8, bundle);
		cli_hostile_names(dir, &st);
		cli_refuses_output_that_is_input(dir, &st);
		rm_tree_files(dir);
	}
	fixture_free(&st);
	fixture_free(&q8);
	return check_report("test_bad_cli");
}
