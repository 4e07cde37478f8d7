/* tp_shard.h — a test-only sharder: a plain ggml-layout bundle into a --tp N
 * bundle by docs/tp.md's table, written apart from qconvert --tp so that the
 * runtime is checked against the contract itself, and so that its bundles and
 * the converter's can be run side by side.
 * Rank r gets rows [r·R/N, (r+1)·R/N) of each row section (Q/K/V heads, gate/up
 * rows per expert, each fused part, each Phi-3 section), columns [r·C/N,
 * (r+1)·C/N) of attn_output / ffn_down(_exps, _shexp) and of the q/k/v biases,
 * its vocabulary rows of token_embd / output, and a copy of everything else;
 * members "tp<r>.<name>", rank 0's first; manifest "tp": {size, vocab}.
 * Refuses (returns -1 with a message) what it does not cut: other layouts,
 * act-order permutations, a column cut off a block boundary. A flaw, for the
 * checks that must then fail: TP_FLAW_ATTN_V, every rank gets rank 0's attn_v
 * rows instead of its own (a wrong cut); TP_FLAW_GAP, the manifest's rank 1
 * range starts one row late (a gap in the vocabulary).
 * Header-only, static functions.
 */
#ifndef QC_TEST_TP_SHARD_H
#define QC_TEST_TP_SHARD_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "bundle.h"
#include "qtype.h"

enum tp_cut { TP_REP, TP_ROWS, TP_COLS, TP_VOCAB };
enum tp_flaw { TP_FLAW_NONE, TP_FLAW_ATTN_V, TP_FLAW_GAP };

struct tp_sections {
	int n;
	int64_t rows[QC_BUNDLE_MAX_PARTS]; /* each section's rows, in order */
	const char *names[QC_BUNDLE_MAX_PARTS]; /* a fused tensor's part names, else NULL */
};

static bool tp_ends(const char *s, const char *suf)
{
	const size_t l = strlen(s), m = strlen(suf);
	return l >= m && !strcmp(s + l - m, suf);
}

/* How tensor t is cut, and its row sections. phi3: fused attn_qkv (q, k, v) and
 * gate|up ffn_up (two halves). */
static enum tp_cut tp_cut_of(const struct qc_bundle_tensor *t, bool phi3, int64_t q_dim, int64_t kv_dim,
			     struct tp_sections *s)
{
	static const char *const rows[] = {".attn_q.weight", ".attn_k.weight", ".attn_v.weight", ".ffn_gate.weight",
					   ".ffn_up.weight", ".ffn_gate_exps.weight", ".ffn_up_exps.weight",
					   ".ffn_gate_shexp.weight", ".ffn_up_shexp.weight", ".ffn_gate_up_exps.weight"};
	static const char *const cols[] = {".attn_output.weight", ".ffn_down.weight", ".ffn_down_exps.weight",
					   ".ffn_down_shexp.weight", ".attn_q.bias", ".attn_k.bias", ".attn_v.bias"};
	s->n = 1;
	s->rows[0] = t->ne[1];
	s->names[0] = NULL;
	if (!strcmp(t->name, "token_embd.weight") || !strcmp(t->name, "output.weight"))
		return TP_VOCAB;
	if (phi3 && tp_ends(t->name, ".attn_qkv.weight")) {
		*s = (struct tp_sections){3, {q_dim, kv_dim, kv_dim}, {NULL, NULL, NULL}};
		return TP_ROWS;
	}
	if (phi3 && tp_ends(t->name, ".ffn_up.weight")) {
		*s = (struct tp_sections){2, {t->ne[1] / 2, t->ne[1] / 2}, {NULL, NULL}};
		return TP_ROWS;
	}
	for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
		if (tp_ends(t->name, cols[i]))
			return TP_COLS;
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
		if (tp_ends(t->name, rows[i])) {
			if (t->n_parts) {
				s->n = t->n_parts;
				for (int k = 0; k < t->n_parts; k++) {
					s->rows[k] = t->parts[k].n_rows;
					s->names[k] = t->parts[k].name;
				}
			}
			return TP_ROWS;
		}
	return TP_REP;
}

/* Rank r's bytes of t into *out (malloc'd, *size bytes) and its shape into ne; the
 * fused parts' rows into s. -1 with msg when it cannot be cut. */
static int tp_cut_tensor(const struct qc_bundle *b, const struct qc_bundle_tensor *t, enum tp_cut cut,
			 struct tp_sections *s, int r, int N, int64_t v0, int64_t nv, uint8_t **out, uint64_t *size,
			 int64_t ne[4], char *msg, size_t msg_len)
{
	const struct qc_type_traits *tt = &qc_types[t->type];
	const uint64_t rb = (uint64_t)(t->ne[0] / tt->block_elems) * tt->block_bytes;
	const uint8_t *src = qc_bundle_data(b, t);
	const int64_t n_slices = t->ne[2] * t->ne[3];
	memcpy(ne, t->ne, sizeof t->ne);
	*out = NULL;
	if (cut == TP_REP) {
		*size = t->size;
		*out = malloc(t->size ? t->size : 1);
		memcpy(*out, src, t->size);
		return 0;
	}
	if (cut == TP_COLS) {
		const int64_t c0 = t->ne[0] * r / N, c1 = t->ne[0] * (r + 1) / N;
		if (t->ne[0] % N || c0 % tt->block_elems || c1 % tt->block_elems) {
			snprintf(msg, msg_len, "%s: columns [%lld, %lld) are not whole %s blocks", t->name, (long long)c0,
				 (long long)c1, tt->name);
			return -1;
		}
		const uint64_t b0 = (uint64_t)(c0 / tt->block_elems) * tt->block_bytes;
		const uint64_t nb = (uint64_t)((c1 - c0) / tt->block_elems) * tt->block_bytes;
		const int64_t n_rows = t->ne[1] * n_slices;
		ne[0] = c1 - c0;
		*size = nb * (uint64_t)n_rows;
		*out = malloc(*size ? *size : 1);
		for (int64_t i = 0; i < n_rows; i++)
			memcpy(*out + (uint64_t)i * nb, src + (uint64_t)i * rb + b0, nb);
		return 0;
	}
	/* rows: per slice, per section, rank r's share (vocabulary: its range) */
	int64_t per_slice = 0;
	for (int k = 0; k < s->n; k++) {
		if (cut == TP_ROWS && s->rows[k] % N) {
			snprintf(msg, msg_len, "%s: section %d of %lld rows does not split %d ways", t->name, k,
				 (long long)s->rows[k], N);
			return -1;
		}
		per_slice += cut == TP_VOCAB ? nv : s->rows[k] / N;
	}
	ne[1] = per_slice;
	*size = rb * (uint64_t)per_slice * (uint64_t)n_slices;
	*out = malloc(*size ? *size : 1);
	uint8_t *dst = *out;
	for (int64_t e = 0; e < n_slices; e++) {
		int64_t base = 0;
		for (int k = 0; k < s->n; k++) {
			const int64_t a = cut == TP_VOCAB ? v0 : base + s->rows[k] * r / N;
			const int64_t n = cut == TP_VOCAB ? nv : s->rows[k] / N;
			memcpy(dst, src + ((uint64_t)e * (uint64_t)t->ne[1] + (uint64_t)a) * rb, rb * (uint64_t)n);
			dst += rb * (uint64_t)n;
			base += s->rows[k];
		}
	}
	for (int k = 0; k < s->n; k++)
		s->rows[k] /= N;
	return 0;
}

static int tp_cfg_int(const cJSON *man, const char *key, int64_t def)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(man, "config"), key);
	if (cJSON_IsArray(it))
		it = cJSON_GetArrayItem(it, 0);
	return cJSON_IsNumber(it) ? (int)it->valuedouble : (int)def;
}

/* in (a plain bundle) sharded N ways into out; vocabulary ranges start on
 * multiples of align (the last takes the rest). 0, or -1 with msg. */
static int tp_shard(const char *in, const char *out, int N, int64_t align, enum tp_flaw flaw, char *msg,
		    size_t msg_len)
{
	struct qc_bundle *b = NULL;
	struct qc_bundle_writer *w = NULL;
	struct qc_err err = {0};
	cJSON *man = NULL;
	int rc = -1;
	if (qc_bundle_open(in, &b, &err)) {
		snprintf(msg, msg_len, "%s", err.msg);
		return -1;
	}
	const struct qc_bundle_tensor *te = qc_bundle_find(b, "token_embd.weight");
	const cJSON *arch = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(b->manifest, "config"),
							     "architecture");
	const bool phi3 = cJSON_IsString(arch) && !strcmp(arch->valuestring, "phi3");
	const int64_t n_embd = tp_cfg_int(b->manifest, "n_embd", 0), n_head = tp_cfg_int(b->manifest, "n_head", 1);
	const int64_t hd = tp_cfg_int(b->manifest, "head_dim_k", n_embd / n_head);
	const int64_t q_dim = n_head * hd, kv_dim = tp_cfg_int(b->manifest, "n_head_kv", n_head) * hd;
	const int64_t V = te ? te->ne[1] : 0;
	int64_t per = (V + N - 1) / N;
	per = (per + align - 1) / align * align;
	int64_t v0[8], nv[8];
	for (int r = 0; r < N; r++) {
		v0[r] = r * per < V ? r * per : V;
		nv[r] = r + 1 < N ? (per < V - v0[r] ? per : V - v0[r]) : V - v0[r];
		if (nv[r] < 1) {
			snprintf(msg, msg_len, "vocabulary of %lld rows does not give %d ranks a range", (long long)V, N);
			goto out;
		}
	}
	man = cJSON_Duplicate(b->manifest, true);
	cJSON_DeleteItemFromObjectCaseSensitive(man, "tensors");
	cJSON *tensors = cJSON_AddArrayToObject(man, "tensors");
	cJSON *tpo = cJSON_AddObjectToObject(man, "tp");
	cJSON_AddNumberToObject(tpo, "size", N);
	cJSON *va = cJSON_AddArrayToObject(tpo, "vocab");
	for (int r = 0; r < N; r++) {
		cJSON *pair = cJSON_CreateArray();
		cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)v0[r] + (flaw == TP_FLAW_GAP && r == 1)));
		cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)nv[r]));
		cJSON_AddItemToArray(va, pair);
	}
	if (qc_bundle_writer_open(out, b->alignment, &w, &err)) {
		snprintf(msg, msg_len, "%s", err.msg);
		goto out;
	}
	for (int r = 0; r < N; r++)
		for (uint64_t i = 0; i < b->n_tensors; i++) {
			const struct qc_bundle_tensor *t = &b->tensors[i];
			struct tp_sections s;
			int64_t ne[4];
			uint8_t *data;
			uint64_t size, off, h;
			char name[160], hex[17];
			if (t->layout != QC_LAYOUT_GGML || tp_ends(t->name, ".act_perm")) {
				snprintf(msg, msg_len, "%s: not cut by this test sharder", t->name);
				goto out;
			}
			const enum tp_cut cut = tp_cut_of(t, phi3, q_dim, kv_dim, &s);
			const int rr = flaw == TP_FLAW_ATTN_V && tp_ends(t->name, ".attn_v.weight") ? 0 : r;
			if (tp_cut_tensor(b, t, cut, &s, rr, N, v0[r], nv[r], &data, &size, ne, msg, msg_len)) {
				free(data);
				goto out;
			}
			snprintf(name, sizeof name, "tp%d.%s", r, t->name);
			int wrc = qc_bundle_writer_begin(w, name, size, &off, &err);
			if (!wrc)
				wrc = qc_bundle_writer_write(w, data, size, &err);
			if (!wrc)
				wrc = qc_bundle_writer_end(w, &h, &err);
			free(data);
			if (wrc) {
				snprintf(msg, msg_len, "%s", err.msg);
				goto out;
			}
			cJSON *e = cJSON_CreateObject();
			cJSON_AddStringToObject(e, "name", name);
			cJSON *nej = cJSON_AddArrayToObject(e, "ne");
			for (uint32_t d = 0; d < t->n_dims; d++)
				cJSON_AddItemToArray(nej, cJSON_CreateNumber((double)ne[d]));
			cJSON_AddItemToObject(e, "encoding",
					      cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(t->json, "encoding"), true));
			cJSON_AddNumberToObject(e, "offset", (double)off);
			cJSON_AddNumberToObject(e, "size", (double)size);
			qc_bundle_hash_hex(h, hex);
			cJSON_AddStringToObject(e, "xxh3", hex);
			if (t->n_parts) {
				cJSON *pa = cJSON_AddArrayToObject(e, "parts");
				int64_t row0 = 0;
				for (int k = 0; k < s.n; k++) {
					char pn[160];
					cJSON *p = cJSON_CreateObject();
					snprintf(pn, sizeof pn, "tp%d.%s", r, s.names[k]);
					cJSON_AddStringToObject(p, "name", pn);
					cJSON_AddNumberToObject(p, "row0", (double)row0);
					cJSON_AddNumberToObject(p, "rows", (double)s.rows[k]);
					cJSON_AddItemToArray(pa, p);
					row0 += s.rows[k];
				}
			}
			cJSON_AddItemToArray(tensors, e);
		}
	if (qc_bundle_writer_finish(w, man, &err)) {
		w = NULL;
		snprintf(msg, msg_len, "%s", err.msg);
		goto out;
	}
	w = NULL;
	rc = 0;
out:
	qc_bundle_writer_abort(w);
	cJSON_Delete(man);
	qc_bundle_close(b);
	return rc;
}

#endif
