/* test_tp_convert.c — `qconvert --tp N` (docs/tp.md) through the CLI ($QC_BIN/qconvert).
 * For dense llama, GQA, MoE (fused gate|up and --no-fuse), tied embeddings, qwen2
 * biases, a shared expert (qwen2moe), Phi-3's fused attn_qkv and gate|up ffn_up,
 * the fused Q|K|V (or Q|K) and gate|up qconvert writes for sm80+ marlin layouts,
 * Gemma 2/3 (post norms, q/k norms), qwen3 and qwen3moe,
 * llama.cpp-quantized fixtures, a GPTQ checkpoint and a GGUF with act-order
 * permutations on its row-split weights, for targets cpu and sm90 (marlin layouts),
 * NVFP4 checkpoints on sm100 (nvfp4_swz), and N = 1, 2, 4 where the widths divide (8 on one
 * model with 8 K/V heads):
 *   - every original tensor, put back together HERE from the ranks' members (this
 *     file's own reading of the split: rows by section, columns side by side,
 *     vocabulary ranges, replicated copies equal on every rank), equals the plain
 *     bundle's tensor byte for byte (ggml rows, target layouts undone);
 *   - qc_dump_bundle of each original name on the --tp bundle writes exactly the
 *     plain bundle's dump (fused halves by their part names too);
 *   - the "tp" object: N ranks, vocabulary ranges contiguous over [0, V), equal but
 *     for the last, on the target's stripe (computed here from the encoding); each
 *     rank's members one byte range, ascending, as counted here from the members;
 *     checksums verify; inspect reports the same ranges and widths; a marlin tensor's
 *     shard stays marlin where its rows are whole stripes;
 * and refusals (exit 1, the tensor and the width named, no output left): heads,
 * K/V heads and n_ff not divisible, columns off the encoding's blocks, act-order on
 * a column-split weight. Expected shapes come from the fixtures' stated widths.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../tests/check.h"
#include "bundle.h"
#include "bundle_tp.h"
#include "dump.h"
#include "gguf.h"
#include "gguf_write.h"
#include "inspect.h"
#include "layout.h"
#include "layout_marlin.h"
#include "qtype.h"

static char bin[512], tmpdir[256];
static int n_marlin_shards; /* shards kept in a marlin layout, over the whole run */
static int n_nvfp4_shards;  /* shards in nvfp4_swz */

static int qconvert(const char *const *args, const char *errp)
{
	char p[600];
	snprintf(p, sizeof p, "%s/qconvert", bin);
	return check_spawn(p, args, errp);
}

/* mkgguf ARGS -o out; true on success. */
static bool mkgguf(const char *out, const char *args)
{
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "%s/mkgguf %s -o %s >/dev/null 2>&1", bin, args, out);
	return system(cmd) == 0;
}

static char *dump_mem(const struct qc_bundle *b, const char *name, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	struct qc_err err = { 0 };
	int rc = f ? qc_dump_bundle(b, name, f, &err) : -1;
	if (f)
		fclose(f);
	if (rc) {
		fprintf(stderr, "  dump %s of %s: %s\n", name, b->path, err.msg);
		free(buf);
		return NULL;
	}
	return buf;
}

/* Every row of t as ggml blocks (layout undone); *row_bytes, *rows set. */
static uint8_t *ggml_rows(const struct qc_bundle *b, const struct qc_bundle_tensor *t, uint64_t *row_bytes,
			  uint64_t *rows)
{
	struct qc_err err = { 0 };
	*rows = (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
	if (qc_type_row_bytes(t->type, (uint64_t)t->ne[0], row_bytes))
		return NULL;
	uint8_t *p = malloc((size_t)(*rows * *row_bytes) + 1);
	if (p && qc_layout_unpack_rows(t->layout, t->type, t->ne, qc_bundle_data(b, t), 0, *rows, p, &err)) {
		fprintf(stderr, "  unpack %s: %s\n", t->name, err.msg);
		free(p);
		return NULL;
	}
	return p;
}

/* ---- this file's own reading of the split (docs/tp.md's table) -------------------- */

enum kind { K_REPL, K_ROWS, K_COLS, K_VOCAB };

static bool ends(const char *s, const char *tail)
{
	size_t a = strlen(s), b = strlen(tail);
	return a >= b && strcmp(s + a - b, tail) == 0;
}

/* The split of plain tensor t; units[] the relative sizes of its row sections. */
static enum kind kind_of(const struct qc_bundle *plain, const struct qc_bundle_tensor *t, int64_t H, int64_t G,
			 int64_t units[3], int *n_sec)
{
	const char *n = t->name;
	*n_sec = 1;
	units[0] = 1;
	if (!strcmp(n, "token_embd.weight") || !strcmp(n, "output.weight"))
		return K_VOCAB;
	if (ends(n, ".attn_output.weight") || ends(n, ".ffn_down.weight") || ends(n, ".ffn_down_exps.weight") ||
	    ends(n, ".ffn_down_shexp.weight"))
		return K_COLS;
	if (ends(n, ".attn_qkv.weight") || ends(n, ".attn_qkv.bias")) {
		*n_sec = 3;
		units[0] = H, units[1] = G, units[2] = G;
		return K_ROWS;
	}
	if (ends(n, ".attn_qk.weight")) { /* plan.c's Q|K where V's encoding differs */
		*n_sec = 2;
		units[0] = H, units[1] = G;
		return K_ROWS;
	}
	if (ends(n, ".ffn_gate_up_exps.weight") || ends(n, ".ffn_gate_up.weight")) {
		*n_sec = 2;
		units[1] = 1;
		return K_ROWS;
	}
	if (ends(n, ".ffn_up.weight")) { /* Phi-3: 2F rows = gate|up, F = ffn_down's columns */
		char d[128];
		snprintf(d, sizeof d, "%.*s.ffn_down.weight", (int)(strlen(n) - strlen(".ffn_up.weight")), n);
		const struct qc_bundle_tensor *dn = qc_bundle_find(plain, d);
		if (dn && t->ne[1] == 2 * dn->ne[0]) {
			*n_sec = 2;
			units[1] = 1;
		}
		return K_ROWS;
	}
	static const char *const rows[] = { ".attn_q.weight", ".attn_k.weight", ".attn_v.weight", ".attn_q.bias",
					    ".attn_k.bias", ".attn_v.bias", ".ffn_gate.weight", ".ffn_gate_exps.weight",
					    ".ffn_up_exps.weight", ".ffn_gate_shexp.weight", ".ffn_up_shexp.weight" };
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
		if (ends(n, rows[i]))
			return K_ROWS;
	return K_REPL; /* norms, router, rope tables, act_perm of a row-split weight */
}

/* Rows per stripe a shard of encoding `type` gets on target sm90 (1: ggml). */
static int64_t stripe_of(const char *target, enum qc_type type)
{
	static const struct { const char *type; int64_t rows; } marlin[] = {
		{ "q4_0", 64 }, { "q4_1", 64 }, { "q4_K", 64 }, { "hq4", 64 }, { "q6_K", 64 },
		{ "q8_0", 32 }, { "q5_K", 32 }, { "hq8", 32 },
	};
	if (strcmp(target, "sm90") != 0 && strcmp(target, "sm100") != 0) /* sm100: sm90's choices + nvfp4_swz */
		return 1;
	for (size_t i = 0; i < sizeof marlin / sizeof marlin[0]; i++)
		if (!strcmp(qc_type_get(type)->name, marlin[i].type))
			return marlin[i].rows;
	return 1;
}

/* Put original tensor t back together from the ranks' members; compare with t. */
static void check_reassembly(const struct qc_bundle *plain, const struct qc_bundle *tb, const struct qc_bundle_tensor *t,
			     int N, int64_t H, int64_t G, const char *label)
{
	int64_t units[3];
	int n_sec;
	const enum kind k = kind_of(plain, t, H, G, units, &n_sec);
	uint64_t rb, rows, urb[QC_TP_MAX], urows[QC_TP_MAX];
	uint8_t *want = ggml_rows(plain, t, &rb, &rows), *got[QC_TP_MAX] = { NULL };
	const struct qc_bundle_tensor *m[QC_TP_MAX];
	bool ok = want != NULL;
	for (int r = 0; r < N; r++) {
		m[r] = qc_bundle_tp_find(tb, r, t->name);
		ok = ok && m[r] && m[r]->type == t->type && m[r]->n_dims == t->n_dims && m[r]->ne[2] == t->ne[2] &&
		     m[r]->ne[3] == t->ne[3] && (got[r] = ggml_rows(tb, m[r], &urb[r], &urows[r])) != NULL;
	}
	CHECK(ok, "%s: %s: every rank has a member tp<r>.%s of the same type", label, t->name, t->name);
	if (!ok)
		goto out;
	const uint64_t slices = (uint64_t)(t->ne[2] * t->ne[3]), total = rows * rb;
	uint8_t *put = malloc((size_t)total + 1), *w = put;
	int64_t sum_units = 0;
	for (int s = 0; s < n_sec; s++)
		sum_units += units[s];
	if (k == K_REPL) {
		for (int r = 0; r < N; r++)
			CHECK(urows[r] * urb[r] == total && !memcmp(got[r], want, (size_t)total),
			      "%s: replicated %s differs on rank %d", label, t->name, r);
		free(put);
		goto out;
	}
	if (k == K_VOCAB) {
		for (int r = 0; r < N; r++) {
			memcpy(w, got[r], (size_t)(urows[r] * urb[r]));
			w += urows[r] * urb[r];
		}
	} else if (k == K_COLS) {
		for (uint64_t i = 0; i < rows; i++)
			for (int r = 0; r < N; r++) {
				CHECK(urows[r] == rows, "%s: %s rank %d has %llu rows", label, t->name, r,
				      (unsigned long long)urows[r]);
				memcpy(w, got[r] + i * urb[r], (size_t)urb[r]);
				w += urb[r];
			}
	} else if (t->n_dims == 1) { /* a bias: elements, by section */
		for (int s = 0, off = 0; s < n_sec; s++) {
			for (int r = 0; r < N; r++) {
				const uint64_t sb = urb[r] * (uint64_t)units[s] / (uint64_t)sum_units;
				memcpy(w, got[r] + urb[r] * (uint64_t)off / (uint64_t)sum_units, (size_t)sb);
				w += sb;
			}
			off += (int)units[s];
		}
	} else {
		for (uint64_t sl = 0; sl < slices; sl++) {
			int64_t at = 0;
			for (int s = 0; s < n_sec; s++) {
				for (int r = 0; r < N; r++) {
					const uint64_t sr = (uint64_t)m[r]->ne[1] * (uint64_t)units[s] / (uint64_t)sum_units;
					memcpy(w, got[r] + (sl * (uint64_t)m[r]->ne[1] + (uint64_t)at) * urb[r], (size_t)(sr * urb[r]));
					w += sr * urb[r];
				}
				at += m[0]->ne[1] * units[s] / sum_units;
			}
		}
	}
	CHECK((uint64_t)(w - put) == total && !memcmp(put, want, (size_t)total),
	      "%s: %s put back together from %d ranks differs from the plain bundle's", label, t->name, N);
	free(put);
	/* a marlin tensor stays marlin where the shard's rows (and sections) are whole stripes */
	for (int r = 0; r < N; r++) {
		const int64_t S = stripe_of(tb->target, t->type);
		bool whole = k == K_COLS || m[r]->ne[1] % S == 0;
		for (int s = 0, at = 0; k == K_ROWS && s < n_sec; s++) {
			whole = whole && at % S == 0;
			at += (int)(m[r]->ne[1] * units[s] / sum_units);
		}
		if (qc_marlin_is(t->layout) && whole && t->n_dims == 2)
			CHECK(m[r]->layout == t->layout, "%s: %s rank %d stored %s, the whole tensor %s", label, m[r]->name, r,
			      qc_layout_name(m[r]->layout), qc_layout_name(t->layout));
		n_marlin_shards += qc_marlin_is(m[r]->layout);
		n_nvfp4_shards += m[r]->layout == QC_LAYOUT_NVFP4_SWZ;
	}
out:
	free(want);
	for (int r = 0; r < N; r++)
		free(got[r]);
}

/* dump(plain, name) == dump(tp, name): the library's reassembly. */
static void check_dump(const struct qc_bundle *plain, const struct qc_bundle *tb, const char *name, const char *label)
{
	size_t la = 0, lb = 0;
	char *a = dump_mem(plain, name, &la), *b = dump_mem(tb, name, &lb);
	CHECK(a && b && la == lb && !memcmp(a, b, la), "%s: dump of %s on the --tp bundle (%zu bytes) differs from the plain bundle's (%zu)",
	      label, name, lb, la);
	free(a);
	free(b);
}

static int64_t cfg_int(const struct qc_bundle *b, const char *key)
{
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(b->manifest, "config");
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(c, key);
	return cJSON_IsNumber(x) ? (int64_t)x->valuedouble : -1;
}

/* The whole check of one --tp N bundle against the plain bundle of the same input. */
static void check_tp(const char *plain_path, const char *tp_path, int N, const char *label)
{
	struct qc_bundle *plain = NULL, *tb = NULL;
	struct qc_err err = { 0 };
	CHECK(qc_bundle_open(plain_path, &plain, &err) == QC_OK, "%s: open plain: %s", label, err.msg);
	CHECK(qc_bundle_open(tp_path, &tb, &err) == QC_OK, "%s: open --tp %d: %s", label, N, err.msg);
	if (!plain || !tb)
		goto out;
	struct qc_bundle_tp tp;
	CHECK(qc_bundle_tp_read(tb, &tp, &err) == QC_OK && tp.size == N, "%s: tp size %d, want %d (%s)", label, tp.size, N,
	      err.msg);
	struct qc_bundle_tp none;
	CHECK(qc_bundle_tp_read(plain, &none, &err) == QC_OK && none.size == 0, "%s: the plain bundle has no tp", label);
	if (tp.size != N)
		goto out;
	/* vocabulary ranges */
	const struct qc_bundle_tensor *te = qc_bundle_find(plain, "token_embd.weight");
	const struct qc_bundle_tensor *ou = qc_bundle_find(plain, "output.weight");
	const int64_t V = te ? te->ne[1] : -1;
	const int64_t A = stripe_of(tb->target, ou ? ou->type : te->type);
	int64_t next = 0;
	for (int r = 0; r < N; r++) {
		CHECK(tp.vocab0[r] == next && tp.n_vocab[r] > 0, "%s: vocab[%d] = [%d, %d) does not continue at %lld", label, r,
		      tp.vocab0[r], tp.vocab0[r] + tp.n_vocab[r], (long long)next);
		if (r < N - 1)
			CHECK(tp.n_vocab[r] == tp.n_vocab[0] && (V / N < A || tp.vocab0[r + 1] % A == 0),
			      "%s: vocab[%d] = %d rows (rank 0: %d), not on %lld-row stripes", label, r, tp.n_vocab[r],
			      tp.n_vocab[0], (long long)A);
		next += tp.n_vocab[r];
	}
	CHECK(next == V && tp.n_vocab_all == V, "%s: vocabulary ranges cover %lld of %lld", label, (long long)next,
	      (long long)V);
	/* members: named by rank, each rank one ascending byte range, N per plain tensor */
	uint64_t lo[QC_TP_MAX], hi[QC_TP_MAX] = { 0 }, cnt[QC_TP_MAX] = { 0 };
	for (int r = 0; r < N; r++)
		lo[r] = UINT64_MAX;
	for (uint64_t i = 0; i < tb->n_tensors; i++) {
		const struct qc_bundle_tensor *t = &tb->tensors[i];
		int r = -1, used = 0;
		if (sscanf(t->name, "tp%d.%n", &r, &used) != 1 || used == 0 || r < 0 || r >= N) {
			CHECK(0, "%s: member %s is not tp<r>.<name>", label, t->name);
			continue;
		}
		CHECK(qc_bundle_find(plain, t->name + used) != NULL, "%s: member %s has no plain tensor %s", label, t->name,
		      t->name + used);
		lo[r] = t->off < lo[r] ? t->off : lo[r];
		hi[r] = t->off + t->size > hi[r] ? t->off + t->size : hi[r];
		cnt[r]++;
		CHECK(qc_bundle_verify_tensor(tb, t, &err) == QC_OK, "%s: %s", label, err.msg);
	}
	for (int r = 0; r < N; r++) {
		CHECK(cnt[r] == plain->n_tensors, "%s: rank %d has %llu members, plain %llu tensors", label, r,
		      (unsigned long long)cnt[r], (unsigned long long)plain->n_tensors);
		CHECK(r == 0 || lo[r] >= hi[r - 1], "%s: rank %d's bytes start before rank %d's end", label, r, r - 1);
		CHECK(tp.lo[r] == lo[r] && tp.hi[r] == hi[r], "%s: rank %d range [%llu, %llu), counted [%llu, %llu)", label, r,
		      (unsigned long long)tp.lo[r], (unsigned long long)tp.hi[r], (unsigned long long)lo[r],
		      (unsigned long long)hi[r]);
	}
	/* every original tensor: bytes put back together here, and the library's dump */
	const int64_t H = cfg_int(plain, "n_head"), G = cfg_int(plain, "n_head_kv");
	for (uint64_t i = 0; i < plain->n_tensors; i++) {
		const struct qc_bundle_tensor *t = &plain->tensors[i];
		check_reassembly(plain, tb, t, N, H, G, label);
		check_dump(plain, tb, t->name, label);
		for (int k = 0; k < t->n_parts; k++)
			check_dump(plain, tb, t->parts[k].name, label);
	}
	/* inspect: the same ranges and widths */
	cJSON *rep = qc_inspect_bundle(tb, &err);
	const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(rep, "tp"), "ranks");
	CHECK(cJSON_GetArraySize(ranks) == N, "%s: inspect lists %d ranks", label, cJSON_GetArraySize(ranks));
	for (int r = 0; r < cJSON_GetArraySize(ranks) && r < N; r++) {
		const cJSON *e = cJSON_GetArrayItem(ranks, r);
		CHECK(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "offset")) == (double)lo[r] &&
			      cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "end")) == (double)hi[r] &&
			      cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "n_head")) == (double)(H / N) &&
			      cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "n_head_kv")) == (double)(G / N),
		      "%s: inspect's rank %d differs from the members' range or the widths", label, r);
	}
	cJSON_Delete(rep);
out:
	qc_bundle_close(plain);
	qc_bundle_close(tb);
}

/* Convert in for each target (NULL: cpu and sm90; extra: one more flag or NULL) plain
 * and --tp N for each N. */
static void case_ok_on(const char *label, const char *in, const char *extra, const int *ns, int n_ns,
		       const char *const *targets)
{
	static const char *const both[] = { "cpu", "sm90", NULL };
	char errp[600], plain[600], out[600], lb[256], nb[8];
	snprintf(errp, sizeof errp, "%s/stderr.txt", tmpdir);
	if (!targets)
		targets = both;
	for (int ti = 0; targets[ti]; ti++) {
		snprintf(plain, sizeof plain, "%s/plain.qb", tmpdir);
		const char *pa[] = { in, "--target", targets[ti], "-q", "-o", plain, extra, NULL };
		int rc = qconvert(pa, errp);
		CHECK(rc == 0, "%s --target %s: plain conversion exit %d", label, targets[ti], rc);
		for (int k = 0; !rc && k < n_ns; k++) {
			snprintf(out, sizeof out, "%s/tp.qb", tmpdir);
			snprintf(nb, sizeof nb, "%d", ns[k]);
			snprintf(lb, sizeof lb, "%s --target %s --tp %d", label, targets[ti], ns[k]);
			const char *ta[] = { in, "--target", targets[ti], "-q", "--tp", nb, "-o", out, extra, NULL };
			int trc = qconvert(ta, errp);
			char *e = check_read_file(errp, NULL);
			CHECK(trc == 0, "%s: exit %d: %s", lb, trc, e ? e : "");
			free(e);
			if (trc == 0)
				check_tp(plain, out, ns[k], lb);
			unlink(out);
		}
		unlink(plain);
	}
}

static void case_ok(const char *label, const char *in, const char *extra, const int *ns, int n_ns)
{
	case_ok_on(label, in, extra, ns, n_ns, NULL);
}

/* --tp N on in must exit 1 with every string of want in stderr, leaving nothing. */
static void case_refused(const char *label, const char *in, int N, const char *const *want)
{
	char errp[600], out[600], nb[8];
	snprintf(errp, sizeof errp, "%s/stderr.txt", tmpdir);
	snprintf(out, sizeof out, "%s/refused.qb", tmpdir);
	snprintf(nb, sizeof nb, "%d", N);
	const char *a[] = { in, "--target", "cpu", "-q", "--tp", nb, "-o", out, NULL };
	int rc = qconvert(a, errp);
	char *e = check_read_file(errp, NULL);
	bool has = e != NULL;
	for (int i = 0; has && want[i]; i++)
		has = strstr(e, want[i]) != NULL;
	CHECK(rc == 1 && has, "%s --tp %d: exit %d (want 1), stderr must name %s...: %s", label, N, rc, want[0], e ? e : "");
	free(e);
	int left = 0;
	DIR *d = opendir(tmpdir);
	for (struct dirent *x; d && (x = readdir(d));)
		left += strncmp(x->d_name, "refused.qb", 10) == 0;
	if (d)
		closedir(d);
	CHECK(left == 0, "%s --tp %d: a refused conversion left %d files", label, N, left);
}

/* ---- a GGUF with act-order permutations (GPTQ desc_act as hf_convert.c stores them) -- */

static int copy_kvs(const struct qc_gguf *g, struct qc_gguf_writer *w, struct qc_err *err)
{
	int rc = QC_OK;
	for (uint64_t i = 0; i < g->n_kv && !rc; i++) {
		const struct qc_gguf_kv *kv = &g->kv[i];
		const struct qc_gguf_value *v = &kv->val;
		char key[256];
		snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.p);
		if (v->type == QC_GGUF_UINT32)
			rc = qc_gguf_writer_add_u32(w, key, (uint32_t)v->u, err);
		else if (v->type == QC_GGUF_INT32)
			rc = qc_gguf_writer_add_i32(w, key, (int32_t)v->i, err);
		else if (v->type == QC_GGUF_FLOAT32)
			rc = qc_gguf_writer_add_f32(w, key, (float)v->f, err);
		else if (v->type == QC_GGUF_BOOL)
			rc = qc_gguf_writer_add_bool(w, key, v->b, err);
		else if (v->type == QC_GGUF_STRING)
			rc = qc_gguf_writer_add_strn(w, key, v->s.p, v->s.len, err);
		else if (v->type == QC_GGUF_ARRAY && v->arr.elem == QC_GGUF_STRING) {
			char **s = calloc(v->arr.n + 1, sizeof *s);
			for (uint64_t k = 0; s && k < v->arr.n; k++)
				s[k] = strndup(v->arr.items[k].s.p, v->arr.items[k].s.len);
			rc = s ? qc_gguf_writer_add_arr_str(w, key, (const char *const *)s, v->arr.n, err) : QC_ENOMEM;
			for (uint64_t k = 0; s && k < v->arr.n; k++)
				free(s[k]);
			free(s);
		} else if (v->type == QC_GGUF_ARRAY) {
			rc = qc_gguf_writer_add_arr(w, key, v->arr.elem, v->arr.raw, v->arr.n, err);
		} else {
			rc = qc_err_set(err, QC_EUNSUPPORTED, g->path, NULL, -1, "key %s: type %d", key, (int)v->type);
		}
	}
	return rc;
}

/* src's tensors, each weight named in `permuted` followed by "<base>.act_perm": a
 * seeded permutation of its K columns. */
static bool write_act_order(const char *src, const char *dst, const char *const *permuted)
{
	struct qc_gguf_model *m = NULL;
	struct qc_err err = { 0 };
	struct qc_gguf_writer *w = NULL;
	int32_t *perms[64] = { NULL };
	int np = 0, rc = qc_gguf_model_open(src, &m, &err);
	if (!rc && !(w = qc_gguf_writer_new(3, 0)))
		rc = QC_ENOMEM;
	if (!rc)
		rc = copy_kvs(m->files[0], w, &err);
	uint64_t seed = 12345;
	for (uint64_t i = 0; !rc && i < m->n_tensors; i++) {
		const struct qc_gguf_tensor *t = m->tensors[i];
		rc = qc_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, qc_gguf_model_data(m, t), &err);
		bool perm = false;
		for (int k = 0; permuted[k]; k++)
			perm |= ends(t->name, permuted[k]);
		if (rc || !perm || np >= 64)
			continue;
		int32_t *p = perms[np++] = malloc(sizeof(int32_t) * (size_t)t->ne[0]);
		for (int64_t j = 0; j < t->ne[0]; j++)
			p[j] = (int32_t)j;
		for (int64_t j = t->ne[0] - 1; j > 0; j--) { /* Fisher-Yates, a fixed LCG */
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			const int64_t x = (int64_t)((seed >> 33) % (uint64_t)(j + 1));
			const int32_t tmp = p[j];
			p[j] = p[x];
			p[x] = tmp;
		}
		char pn[160];
		snprintf(pn, sizeof pn, "%.*s.act_perm", (int)(strlen(t->name) - 7), t->name);
		const int64_t ne[1] = { t->ne[0] };
		rc = qc_gguf_writer_add_tensor(w, pn, QC_TYPE_I32, 1, ne, p, &err);
	}
	if (!rc)
		rc = qc_gguf_writer_write_file(w, dst, &err);
	if (rc)
		fprintf(stderr, "  write %s: %s\n", dst, err.msg);
	for (int k = 0; k < np; k++)
		free(perms[k]);
	qc_gguf_writer_free(w);
	qc_gguf_model_close(m);
	return rc == QC_OK;
}

/* ---- the cases ------------------------------------------------------------------------- */

static void generated_cases(void)
{
	char p[600];
	static const int n12[] = { 1, 2 }, n124[] = { 1, 2, 4 }, n28[] = { 2, 8 };
	static const struct {
		const char *label, *args, *extra;
		const int *ns;
		int n_ns;
	} mk[] = {
		{ "dense llama f16", "--preset tiny --type f16", NULL, n12, 2 },
		{ "GQA 8/4 q8_0", "--preset tiny --n-embd 256 --n-head 8 --n-head-kv 4 --n-ff 512 --n-vocab 512 --type q8_0",
		  NULL, n124, 3 },
		{ "GQA 8/4 q4_0", "--preset tiny --n-embd 256 --n-head 8 --n-head-kv 4 --n-ff 512 --n-vocab 512 --type q4_0",
		  NULL, n124, 3 },
		{ "8 / 8 heads 8-way q4_0", "--preset tiny --n-embd 1024 --n-head 8 --n-head-kv 8 --n-ff 2048 --n-vocab 2048 --type q4_0",
		  NULL, n28, 2 },
		{ "MoE fused q8_0", "--preset tiny-moe --type q8_0", NULL, n12, 2 },
		{ "MoE --no-fuse q8_0", "--preset tiny-moe --type q8_0", "--no-fuse", n12, 2 },
		{ "tied q8_0", "--preset tiny --n-embd 256 --n-vocab 512 --n-ff 512 --tie-embeddings --type q8_0", NULL, n12, 2 },
		/* llama.cpp's Q4_K_M mix: q4_K (marlin_i4z) and q6_K (marlin_i6) on sm90; 256-wide
		 * blocks, so 512 columns cut in two stay whole blocks */
		{ "Q4_K_M mix q4_K + q6_K", "--preset tiny --n-embd 512 --n-ff 1024 --n-vocab 512 --type q4_k_m", NULL, n12, 2 },
		{ "qwen2 biases q4_0", "--preset tiny --arch qwen2 --n-embd 256 --n-ff 512 --n-vocab 512 --type q4_0", NULL, n12, 2 },
		{ "qwen2moe shared expert q8_0", "--preset tiny --arch qwen2moe --n-expert 4 --n-expert-used 2 --type q8_0",
		  NULL, n12, 2 },
		{ "phi3 qkv + gate|up q8_0", "--preset tiny --arch phi3 --n-embd 256 --n-ff 512 --n-vocab 512 --type q8_0",
		  NULL, n12, 2 },
		{ "llama3 rope_freqs q8_0", "--preset tiny --rope-scaling llama3 --type q8_0", NULL, n12, 2 },
		{ "phi3 LongRoPE tables q8_0", "--preset tiny --arch phi3 --rope-scaling longrope --type q8_0", NULL, n12, 2 },
		{ "gemma2 post norms, tied q8_0", "--preset tiny --arch gemma2 --type q8_0", NULL, n12, 2 },
		{ "gemma3 q/k norms q8_0", "--preset tiny --arch gemma3 --type q8_0", NULL, n12, 2 },
		{ "qwen3 q/k norms q4_0", "--preset tiny --arch qwen3 --type q4_0", NULL, n12, 2 },
		{ "qwen3moe q8_0", "--preset tiny --arch qwen3moe --n-expert 4 --n-expert-used 2 --type q8_0", NULL, n12, 2 },
	};
	for (size_t i = 0; i < sizeof mk / sizeof mk[0]; i++) {
		snprintf(p, sizeof p, "%s/mk%zu.gguf", tmpdir, i);
		bool ok = mkgguf(p, mk[i].args);
		CHECK(ok, "mkgguf %s", mk[i].args);
		if (ok)
			case_ok(mk[i].label, p, mk[i].extra, mk[i].ns, mk[i].n_ns);
		unlink(p);
	}
	/* refusals, each naming the tensor and the width */
	snprintf(p, sizeof p, "%s/mk-kv2.gguf", tmpdir);
	if (mkgguf(p, "--preset tiny --type f16")) /* 4 heads, 2 K/V heads */
		case_refused("tiny", p, 4, (const char *const[]){ "blk.0.attn_k.weight", "n_head_kv 2 is not divisible by 4", NULL });
	snprintf(p, sizeof p, "%s/mk-h6.gguf", tmpdir);
	if (mkgguf(p, "--preset tiny --n-embd 96 --n-head 6 --n-head-kv 6 --type f32"))
		case_refused("6 heads", p, 4, (const char *const[]){ "blk.0.attn_q.weight", "n_head 6 is not divisible by 4", NULL });
	snprintf(p, sizeof p, "%s/mk-ff66.gguf", tmpdir);
	if (mkgguf(p, "--preset tiny --n-head-kv 4 --n-ff 66 --type f32"))
		case_refused("n_ff 66", p, 4, (const char *const[]){ "blk.0.ffn_gate.weight", "n_ff 66 is not divisible by 4", NULL });
	snprintf(p, sizeof p, "%s/mk-q8-cols.gguf", tmpdir);
	if (mkgguf(p, "--preset tiny --n-head-kv 4 --type q8_0")) /* attn_output: 64 columns, 16 a rank */
		case_refused("q8_0 columns", p, 4,
			     (const char *const[]){ "blk.0.attn_output.weight", "do not fall on the 32-element blocks of q8_0", NULL });
	unlink(p);
}

static void fixture_cases(void)
{
	char p[1024], q[1024];
	static const int n12[] = { 1, 2 }, n124[] = { 1, 2, 4 };
	snprintf(p, sizeof p, "%s/gguf/stories260K.gguf", check_fixtures());
	case_ok("stories260K (8/4 heads, n_ff 172)", p, NULL, n124, 3);
	case_refused("stories260K", p, 8, (const char *const[]){ "blk.0.attn_k.weight", "n_head_kv 4 is not divisible by 8", NULL });
	case_refused("stories260K", p, 3, (const char *const[]){ "blk.0.attn_q.weight", "n_head 8 is not divisible by 3", NULL });
	snprintf(p, sizeof p, "%s/gguf-quant/tiny-llama-256-Q4_0.gguf", check_fixtures());
	case_ok("llama.cpp Q4_0", p, NULL, n12, 2);
	snprintf(p, sizeof p, "%s/gguf-quant/tiny-moe-256-Q8_0.gguf", check_fixtures());
	case_ok("llama.cpp MoE Q8_0", p, NULL, n12, 2);
	/* q4_K blocks are 256 wide: attn_output's 256 columns cut in two are not whole blocks */
	snprintf(p, sizeof p, "%s/gguf-quant/tiny-llama-256-Q4_K_S.gguf", check_fixtures());
	case_refused("llama.cpp Q4_K_S", p, 2,
		     (const char *const[]){ "blk.0.attn_output.weight", "256-element blocks of q4_K", NULL });

	/* act-order on row-split weights: each rank keeps the whole permutation */
	snprintf(p, sizeof p, "%s/gguf/stories260K.gguf", check_fixtures());
	snprintf(q, sizeof q, "%s/act-rows.gguf", tmpdir);
	static const char *const rows[] = { ".attn_q.weight", ".attn_v.weight", ".ffn_gate.weight", ".ffn_up.weight", NULL };
	bool ok = write_act_order(p, q, rows);
	CHECK(ok, "write %s", q);
	if (ok)
		case_ok("act-order rows", q, NULL, n12, 2);
	static const char *const cols[] = { ".attn_q.weight", ".ffn_down.weight", NULL };
	snprintf(q, sizeof q, "%s/act-cols.gguf", tmpdir);
	ok = write_act_order(p, q, cols);
	CHECK(ok, "write %s", q);
	if (ok)
		case_refused("act-order columns", q, 2, (const char *const[]){ "blk.0.ffn_down.weight", "act-order", NULL });
	unlink(q);
	snprintf(q, sizeof q, "%s/act-rows.gguf", tmpdir);
	unlink(q);
}

static void hf_cases(void)
{
	static const int n12[] = { 1, 2 };
	case_ok("HF GPTQ 4-bit g32", "tests/data/hfq/gptq_b4_g32_sym", NULL, n12, 2);
	case_ok("HF qwen2 (biases)", "tests/data/hf/qwen2", NULL, n12, 2);
	case_ok("HF llama tied", "tests/data/hf/llama-tied", NULL, n12, 2);
	case_ok("HF phi3 (qkv, gate|up)", "tests/data/hf/phi3", NULL, n12, 2);
	/* nvfp4 on sm100 (nvfp4_swz): each shard's scales checked and packed as stored */
	static const char *const sm100[] = { "sm100", NULL };
	case_ok_on("HF NVFP4", "tests/data/hfq/ct_nvfp4", NULL, n12, 2, sm100);
	case_ok_on("HF MoE NVFP4", "tests/data/hfq/moe_ct_nvfp4", NULL, n12, 2, sm100);
	case_refused("HF GPTQ act-order", "tests/data/hfq/gptq_b4_g32_asym_act", 2,
		     (const char *const[]){ "blk.0.attn_output.weight", "act-order", NULL });
	case_refused("HF MoE GPTQ act-order", "tests/data/hfq/moe_gptq_b4_act", 2,
		     (const char *const[]){ "blk.0.attn_output.weight", "act-order", NULL });
}

/* The CLI: dump and inspect of a --tp bundle, and reproducible bytes. */
static void cli_cases(void)
{
	char in[600], a[600], b[600], errp[600], da[600], db[600];
	snprintf(in, sizeof in, "%s/cli.gguf", tmpdir);
	snprintf(a, sizeof a, "%s/cli-a.qb", tmpdir);
	snprintf(b, sizeof b, "%s/cli-b.qb", tmpdir);
	snprintf(errp, sizeof errp, "%s/stderr.txt", tmpdir);
	snprintf(da, sizeof da, "%s/a.f32", tmpdir);
	snprintf(db, sizeof db, "%s/b.f32", tmpdir);
	if (!mkgguf(in, "--preset tiny --type q8_0")) {
		CHECK(0, "mkgguf for the CLI checks");
		return;
	}
	const char *c1[] = { in, "--target", "sm90", "-q", "--tp", "2", "-o", a, NULL };
	const char *c2[] = { in, "--target", "sm90", "-q", "--tp", "2", "-o", b, NULL };
	CHECK(qconvert(c1, errp) == 0 && qconvert(c2, errp) == 0, "cli: two --tp 2 conversions");
	size_t la = 0, lb = 0;
	char *x = check_read_file(a, &la), *y = check_read_file(b, &lb);
	CHECK(x && y && la == lb && !memcmp(x, y, la), "cli: --tp bundles are byte-identical across runs");
	free(x);
	free(y);
	const char *p1[] = { in, "--target", "sm90", "-q", "-o", b, NULL };
	const char *d1[] = { "dump", a, "blk.1.attn_output.weight", "-o", da, NULL };
	const char *d2[] = { "dump", b, "blk.1.attn_output.weight", "-o", db, NULL };
	CHECK(qconvert(p1, errp) == 0 && qconvert(d1, errp) == 0 && qconvert(d2, errp) == 0, "cli: dump runs");
	x = check_read_file(da, &la), y = check_read_file(db, &lb);
	CHECK(x && y && la == lb && la == 64 * 64 * 4 && !memcmp(x, y, la),
	      "cli: qconvert dump of an original name on the --tp bundle equals the plain one's (%zu, %zu bytes)", la, lb);
	free(x);
	free(y);
	char out[600];
	snprintf(out, sizeof out, "%s/inspect.txt", tmpdir);
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "%s/qconvert inspect %s > %s", bin, a, out);
	CHECK(system(cmd) == 0, "cli: inspect");
	x = check_read_file(out, NULL);
	CHECK(x && strstr(x, "tensor parallel: 2 ranks") && strstr(x, "rank 1: bytes [") &&
		      strstr(x, "heads 2, kv heads 1, ff 96; vocabulary [0, "),
	      "cli: inspect shows the plan: %s", x ? x : "");
	free(x);
	unlink(in), unlink(a), unlink(b), unlink(da), unlink(db), unlink(out);
}

int main(void)
{
	const char *e = getenv("QC_BIN");
	snprintf(bin, sizeof bin, "%s", e && *e ? e : "build/bin");
	snprintf(tmpdir, sizeof tmpdir, "/tmp/qc_tp_convert.XXXXXX");
	CHECK(mkdtemp(tmpdir) != NULL, "mkdtemp");
	generated_cases();
	hf_cases();
	cli_cases();
	if (check_have_fixtures("test_tp_convert"))
		fixture_cases();
	CHECK(n_marlin_shards > 50, "only %d shards were stored in a marlin layout: the sm90 cases did not reach it",
	      n_marlin_shards);
	CHECK(n_nvfp4_shards > 10, "only %d shards were stored in nvfp4_swz", n_nvfp4_shards);
	char p[600];
	snprintf(p, sizeof p, "%s/stderr.txt", tmpdir);
	unlink(p);
	rmdir(tmpdir);
	return check_report("test_tp_convert");
}
