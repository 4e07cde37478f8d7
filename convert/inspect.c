/* inspect.c — see inspect.h. */
#include "inspect.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "arch.h"
#include "bundle_tp.h"
#include "gguf_meta.h"
#include "tp_rules.h"

static void add_tensor(cJSON *arr, const char *name, uint32_t n_dims, const int64_t *ne, const char *enc,
		       uint64_t off, uint64_t size)
{
	cJSON *t = cJSON_CreateObject();
	cJSON_AddItemToArray(arr, t);
	cJSON_AddStringToObject(t, "name", name);
	cJSON *a = cJSON_AddArrayToObject(t, "ne");
	for (uint32_t d = 0; d < n_dims; d++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber((double)ne[d]));
	cJSON_AddStringToObject(t, "encoding", enc);
	cJSON_AddNumberToObject(t, "offset", (double)off);
	cJSON_AddNumberToObject(t, "size", (double)size);
}

static void add_bytes(cJSON *by, const char *enc, uint64_t n)
{
	cJSON *x = cJSON_GetObjectItemCaseSensitive(by, enc);
	if (x)
		cJSON_SetNumberValue(x, x->valuedouble + (double)n);
	else
		cJSON_AddNumberToObject(by, enc, (double)n);
}

/* Hugging Face conversions record, per fused MoE gate/up tensor whose halves the
 * quant scheme decoded together, metadata "qconvert.fuse_error.<name>" = [max |err|,
 * rms err, re-quantized 0/1] (hf_convert.c): what unifying the halves' scales cost. */
static void add_fuse_error(cJSON *t, const cJSON *man, const char *name)
{
	char key[160];
	snprintf(key, sizeof key, "qconvert.fuse_error.%s", name);
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(man, "metadata"), key);
	if (cJSON_GetArraySize(v) != 3)
		return;
	cJSON *f = cJSON_AddObjectToObject(t, "fuse_error");
	cJSON_AddNumberToObject(f, "max_abs", cJSON_GetArrayItem(v, 0)->valuedouble);
	cJSON_AddNumberToObject(f, "rms", cJSON_GetArrayItem(v, 1)->valuedouble);
	cJSON_AddBoolToObject(f, "requantized", cJSON_GetArrayItem(v, 2)->valuedouble != 0);
}

/* Summary of a manifest-schema tokenizer object (no token lists). */
static cJSON *tok_summary(const cJSON *tok)
{
	if (!tok)
		return cJSON_CreateNull();
	cJSON *s = cJSON_CreateObject();
	static const char *const copy[] = { "model", "pre", "special", "add_bos", "add_eos" };
	for (size_t i = 0; i < sizeof copy / sizeof copy[0]; i++) {
		const cJSON *x = cJSON_GetObjectItemCaseSensitive(tok, copy[i]);
		if (x)
			cJSON_AddItemToObject(s, copy[i], cJSON_Duplicate(x, 1));
	}
	cJSON_AddNumberToObject(s, "n_tokens", cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(tok, "tokens")));
	cJSON_AddNumberToObject(s, "n_merges", cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(tok, "merges")));
	cJSON_AddBoolToObject(s, "chat_template", cJSON_GetObjectItemCaseSensitive(tok, "chat_template") != NULL);
	return s;
}

/* "architecture_features": the arch row refined by this file (formats/arch.h), and
 * "runs": whether this qrun/qserve implements all of them, with "missing" keys.
 * Computed here, never stored, so bundles stay byte-identical across versions. */
static void add_arch(cJSON *r, const cJSON *man)
{
	struct qc_arch_desc d;
	qc_arch_describe(man, &d);
	cJSON *f = cJSON_AddObjectToObject(r, "architecture_features");
	cJSON_AddBoolToObject(f, "known", d.arch != NULL);
	cJSON *list = cJSON_AddArrayToObject(f, "features");
	for (int i = 0; i < QC_AF_COUNT; i++)
		if (d.feats & (UINT64_C(1) << i))
			cJSON_AddItemToArray(list, cJSON_CreateString(qc_arch_feats[i].key));
	if (d.attn_softcap > 0)
		cJSON_AddNumberToObject(f, "attn_softcap", d.attn_softcap);
	if (d.final_softcap > 0)
		cJSON_AddNumberToObject(f, "final_softcap", d.final_softcap);
	if (d.sliding_window > 0)
		cJSON_AddNumberToObject(f, "sliding_window", (double)d.sliding_window);
	cJSON_AddNumberToObject(f, "window_pattern", d.window_pattern);
	if (d.feats & QC_AF(MOE)) {
		cJSON *moe = cJSON_AddObjectToObject(f, "experts");
		cJSON_AddNumberToObject(moe, "count", (double)d.n_expert);
		cJSON_AddNumberToObject(moe, "used", (double)d.n_expert_used);
		cJSON_AddNumberToObject(moe, "shared", (double)d.n_expert_shared);
	}
	const uint64_t missing = qc_arch_missing(&d);
	cJSON_AddBoolToObject(r, "runs", !missing);
	cJSON *ms = cJSON_AddArrayToObject(r, "missing");
	if (!d.arch)
		cJSON_AddItemToArray(ms, cJSON_CreateString("unknown_architecture"));
	for (int i = 0; d.arch && i < QC_AF_COUNT; i++)
		if (missing & (UINT64_C(1) << i))
			cJSON_AddItemToArray(ms, cJSON_CreateString(qc_arch_feats[i].key));
}

static void add_common(cJSON *r, const cJSON *man)
{
	const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(man, "config");
	const cJSON *arch = cJSON_GetObjectItemCaseSensitive(cfg, "architecture");
	const cJSON *md = cJSON_GetObjectItemCaseSensitive(man, "metadata");
	const cJSON *nm = cJSON_GetObjectItemCaseSensitive(md, "general.name");
	cJSON_AddStringToObject(r, "architecture", cJSON_IsString(arch) ? arch->valuestring : "?");
	if (cJSON_IsString(nm))
		cJSON_AddStringToObject(r, "name", nm->valuestring);
	if (cfg)
		cJSON_AddItemToObject(r, "config", cJSON_Duplicate(cfg, 1));
	cJSON_AddItemToObject(r, "tokenizer", tok_summary(cJSON_GetObjectItemCaseSensitive(man, "tokenizer")));
	add_arch(r, man);
}

cJSON *qc_inspect_gguf(const struct qc_gguf_model *m, struct qc_err *err)
{
	cJSON *man = cJSON_CreateObject(), *r = cJSON_CreateObject();
	if (!man || !r || qc_meta_from_gguf(m, man, err)) {
		cJSON_Delete(man);
		cJSON_Delete(r);
		return NULL;
	}
	cJSON_AddStringToObject(r, "file", m->files[0]->path);
	cJSON_AddStringToObject(r, "kind", "gguf");
	cJSON_AddNumberToObject(r, "gguf_version", m->files[0]->version);
	cJSON_AddNumberToObject(r, "n_files", m->n_files);
	add_common(r, man);
	cJSON_Delete(man);
	uint64_t params = 0;
	cJSON *by = cJSON_CreateObject();
	cJSON *ts = cJSON_CreateArray();
	for (uint64_t i = 0; i < m->n_tensors; i++) {
		const struct qc_gguf_tensor *t = m->tensors[i];
		const char *enc = qc_type_get(t->type)->name;
		params += t->n_elems;
		add_bytes(by, enc, t->n_bytes);
		add_tensor(ts, t->name, t->n_dims, t->ne, enc, t->data_off, t->n_bytes);
	}
	cJSON_AddNumberToObject(r, "n_params", (double)params);
	cJSON_AddNumberToObject(r, "n_tensors", (double)m->n_tensors);
	cJSON_AddItemToObject(r, "bytes_by_encoding", by);
	cJSON_AddItemToObject(r, "tensors", ts);
	return r;
}

/* A rank's FFN width of one kind: its first layer's down matrix columns (0: none). */
static double rank_ff(const struct qc_bundle *b, int r, const char *down)
{
	const struct qc_bundle_tensor *t = qc_bundle_tp_find(b, r, down);
	return t ? (double)t->ne[0] : 0;
}

/* "tp": the plan of a --tp bundle, per rank: its byte range and tensor bytes, its
 * local widths (the whole model's over the ranks; FFN widths read off its shards)
 * and its vocabulary range. */
static int add_tp(cJSON *r, const struct qc_bundle *b, struct qc_err *err)
{
	struct qc_bundle_tp tp;
	int rc = qc_bundle_tp_read(b, &tp, err);
	if (rc || !tp.size)
		return rc;
	const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(b->manifest, "config");
	const double nh = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(cfg, "n_head"));
	const cJSON *kv = cJSON_GetObjectItemCaseSensitive(cfg, "n_head_kv");
	cJSON *o = cJSON_AddObjectToObject(r, "tp");
	cJSON_AddNumberToObject(o, "size", tp.size);
	cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
	for (int k = 0; k < tp.size; k++) {
		uint64_t bytes = 0;
		const char *base;
		for (uint64_t i = 0; i < b->n_tensors; i++)
			if (qc_bundle_tp_rank_of(b->tensors[i].name, &base) == k)
				bytes += b->tensors[i].size;
		cJSON *e = cJSON_CreateObject();
		cJSON_AddItemToArray(ranks, e);
		cJSON_AddNumberToObject(e, "rank", k);
		cJSON_AddNumberToObject(e, "offset", (double)tp.lo[k]);
		cJSON_AddNumberToObject(e, "end", (double)tp.hi[k]);
		cJSON_AddNumberToObject(e, "bytes", (double)bytes);
		cJSON_AddNumberToObject(e, "n_tensors", (double)tp.n_tensors[k]);
		cJSON_AddNumberToObject(e, "n_head", nh / tp.size);
		cJSON_AddNumberToObject(e, "n_head_kv", (cJSON_IsNumber(kv) ? kv->valuedouble : nh) / tp.size);
		cJSON_AddNumberToObject(e, "n_ff", rank_ff(b, k, "blk.0.ffn_down.weight"));
		cJSON_AddNumberToObject(e, "n_ff_expert", rank_ff(b, k, "blk.0.ffn_down_exps.weight"));
		cJSON_AddNumberToObject(e, "n_ff_shexp", rank_ff(b, k, "blk.0.ffn_down_shexp.weight"));
		const double v[2] = { tp.vocab0[k], tp.n_vocab[k] };
		cJSON_AddItemToObject(e, "vocab", cJSON_CreateDoubleArray(v, 2));
	}
	return QC_OK;
}

cJSON *qc_inspect_bundle(const struct qc_bundle *b, struct qc_err *err)
{
	cJSON *r = cJSON_CreateObject();
	if (!r) {
		qc_err_set(err, QC_ENOMEM, b->path, NULL, -1, "out of memory");
		return NULL;
	}
	cJSON_AddStringToObject(r, "file", b->path);
	cJSON_AddStringToObject(r, "kind", "bundle");
	char v[32];
	snprintf(v, sizeof v, "%u.%u", b->major, b->minor);
	cJSON_AddStringToObject(r, "bundle_version", v);
	cJSON_AddStringToObject(r, "target", b->target);
	static const char *const copy[] = { "converter", "source" };
	for (size_t i = 0; i < sizeof copy / sizeof copy[0]; i++) {
		const cJSON *x = cJSON_GetObjectItemCaseSensitive(b->manifest, copy[i]);
		if (x)
			cJSON_AddItemToObject(r, copy[i], cJSON_Duplicate(x, 1));
	}
	add_common(r, b->manifest);
	if (add_tp(r, b, err)) {
		cJSON_Delete(r);
		return NULL;
	}
	uint64_t params = 0;
	const bool is_tp = cJSON_GetObjectItemCaseSensitive(r, "tp") != NULL;
	cJSON *by = cJSON_CreateObject();
	cJSON *ts = cJSON_CreateArray();
	for (uint64_t i = 0; i < b->n_tensors; i++) {
		const struct qc_bundle_tensor *t = &b->tensors[i];
		char enc[64];
		snprintf(enc, sizeof enc, "%s/%s", qc_type_get(t->type)->name, qc_layout_name(t->layout));
		const char *base;
		const struct qc_tp_rule *rule = NULL;
		const int rank = is_tp ? qc_bundle_tp_rank_of(t->name, &base) : -1;
		if (rank > 0)
			rule = qc_tp_rule_of(base);
		/* the model's parameters: a replicated tensor once (rank 0's), the shards of a split one added up */
		if (!rule || (rule->split != QC_TP_REPLICATE && rule->split != QC_TP_PERM))
			params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
		add_bytes(by, enc, t->size);
		add_tensor(ts, t->name, t->n_dims, t->ne, enc, t->off, t->size);
		if (t->n_parts) {
			cJSON *last = cJSON_GetArrayItem(ts, cJSON_GetArraySize(ts) - 1);
			cJSON_AddItemToObject(last, "parts",
					      cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(t->json, "parts"), 1));
			add_fuse_error(last, b->manifest, t->name);
		}
		const cJSON *le = cJSON_GetObjectItemCaseSensitive(t->json, "layout_error");
		if (le)
			cJSON_AddItemToObject(cJSON_GetArrayItem(ts, cJSON_GetArraySize(ts) - 1), "layout_error",
					      cJSON_Duplicate(le, 1));
	}
	cJSON_AddNumberToObject(r, "n_params", (double)params);
	cJSON_AddNumberToObject(r, "n_tensors", (double)b->n_tensors);
	cJSON_AddItemToObject(r, "bytes_by_encoding", by);
	cJSON_AddItemToObject(r, "tensors", ts);
	return r;
}

static const char *s_or(const cJSON *o, const char *k, const char *def)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(x) ? x->valuestring : def;
}

static double n_or(const cJSON *o, const char *k, double def)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsNumber(x) ? x->valuedouble : def;
}

/* The phrase of feature key k (the JSON spells keys; people read phrases). */
static const char *phrase_of(const char *k)
{
	for (int i = 0; i < QC_AF_COUNT; i++)
		if (!strcmp(k, qc_arch_feats[i].key))
			return qc_arch_feats[i].phrase;
	return k;
}

static void print_keys(const cJSON *arr, FILE *out)
{
	const cJSON *k;
	const char *sep = "";
	cJSON_ArrayForEach(k, arr) {
		fprintf(out, "%s%s", sep, cJSON_IsString(k) ? phrase_of(k->valuestring) : "?");
		sep = ", ";
	}
}

static void print_arch(const cJSON *r, FILE *out)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(r, "architecture_features");
	const cJSON *moe = cJSON_GetObjectItemCaseSensitive(f, "experts");
	fprintf(out, "architecture features: ");
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "known")))
		fprintf(out, "unknown architecture");
	print_keys(cJSON_GetObjectItemCaseSensitive(f, "features"), out);
	if (n_or(f, "attn_softcap", 0) > 0 || n_or(f, "final_softcap", 0) > 0)
		fprintf(out, "; soft-cap attention %g, final %g", n_or(f, "attn_softcap", 0), n_or(f, "final_softcap", 0));
	const double pat = n_or(f, "window_pattern", 0), win = n_or(f, "sliding_window", 0);
	if (pat > 0) {
		fprintf(out, "; window ");
		fprintf(out, win > 0 ? "%.0f tokens" : "(size not stated)", win);
		if (pat == 1)
			fprintf(out, " on every layer");
		else
			fprintf(out, " on %.0f of every %.0f layers", pat - 1, pat);
	}
	if (moe)
		fprintf(out, "; experts %.0f, %.0f used, %.0f shared", n_or(moe, "count", 0), n_or(moe, "used", 0),
			n_or(moe, "shared", 0));
	fprintf(out, "\nruns:          %s", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "runs")) ? "yes" : "no (missing: ");
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "runs"))) {
		print_keys(cJSON_GetObjectItemCaseSensitive(r, "missing"), out);
		fprintf(out, ")");
	}
	fprintf(out, "\n");
}

void qc_inspect_print(const cJSON *r, FILE *out)
{
	const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(r, "config");
	const cJSON *tok = cJSON_GetObjectItemCaseSensitive(r, "tokenizer");
	fprintf(out, "file:          %s (%s", s_or(r, "file", "?"), s_or(r, "kind", "?"));
	if (cJSON_GetObjectItemCaseSensitive(r, "gguf_version"))
		fprintf(out, " v%.0f", n_or(r, "gguf_version", 0));
	if (cJSON_GetObjectItemCaseSensitive(r, "target"))
		fprintf(out, " %s, target %s", s_or(r, "bundle_version", "?"), s_or(r, "target", "?"));
	fprintf(out, ")\n");
	fprintf(out, "architecture:  %s%s%s%s\n", s_or(r, "architecture", "?"), cJSON_GetObjectItemCaseSensitive(r, "name") ? " (" : "",
		s_or(r, "name", ""), cJSON_GetObjectItemCaseSensitive(r, "name") ? ")" : "");
	print_arch(r, out);
	fprintf(out, "parameters:    %.0f (%.3f B)\n", n_or(r, "n_params", 0), n_or(r, "n_params", 0) / 1e9);
	if (cfg)
		fprintf(out, "shape:         n_embd %.0f, n_layer %.0f, n_head %.0f/%.0f kv, n_ff %.0f, n_vocab %.0f, ctx %.0f, experts %.0f/%.0f\n",
			n_or(cfg, "n_embd", 0), n_or(cfg, "n_layer", 0), n_or(cfg, "n_head", 0), n_or(cfg, "n_head_kv", 0),
			n_or(cfg, "n_ff", 0), n_or(cfg, "n_vocab", 0), n_or(cfg, "n_ctx_train", 0),
			n_or(cfg, "n_expert_used", 0), n_or(cfg, "n_expert", 0));
	if (cJSON_IsObject(tok)) {
		const cJSON *sp = cJSON_GetObjectItemCaseSensitive(tok, "special");
		fprintf(out, "tokenizer:     %s/%s, %.0f tokens, %.0f merges, bos %.0f, eos %.0f%s\n", s_or(tok, "model", "?"),
			s_or(tok, "pre", "-"), n_or(tok, "n_tokens", 0), n_or(tok, "n_merges", 0), n_or(sp, "bos", -1),
			n_or(sp, "eos", -1), cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tok, "chat_template")) ? ", chat template" : "");
	} else {
		fprintf(out, "tokenizer:     none\n");
	}
	const cJSON *tp = cJSON_GetObjectItemCaseSensitive(r, "tp");
	if (tp) {
		fprintf(out, "tensor parallel: %.0f ranks, each one byte range (docs/tp.md)\n", n_or(tp, "size", 0));
		const cJSON *k;
		cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(tp, "ranks")) {
			const cJSON *v = cJSON_GetObjectItemCaseSensitive(k, "vocab");
			const double v0 = cJSON_GetNumberValue(cJSON_GetArrayItem(v, 0)), vn = cJSON_GetNumberValue(cJSON_GetArrayItem(v, 1));
			fprintf(out, "  rank %.0f: bytes [%.0f, %.0f), %.0f in %.0f tensors; heads %.0f, kv heads %.0f", n_or(k, "rank", 0),
				n_or(k, "offset", 0), n_or(k, "end", 0), n_or(k, "bytes", 0), n_or(k, "n_tensors", 0),
				n_or(k, "n_head", 0), n_or(k, "n_head_kv", 0));
			if (n_or(k, "n_ff", 0) > 0)
				fprintf(out, ", ff %.0f", n_or(k, "n_ff", 0));
			if (n_or(k, "n_ff_expert", 0) > 0)
				fprintf(out, ", ff per expert %.0f", n_or(k, "n_ff_expert", 0));
			if (n_or(k, "n_ff_shexp", 0) > 0)
				fprintf(out, ", ff shared expert %.0f", n_or(k, "n_ff_shexp", 0));
			fprintf(out, "; vocabulary [%.0f, %.0f)\n", v0, v0 + vn);
		}
	}
	fprintf(out, "bytes by encoding:\n");
	const cJSON *e;
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(r, "bytes_by_encoding"))
		fprintf(out, "  %-14s %14.0f  (%.2f MB)\n", e->string, e->valuedouble, e->valuedouble / 1e6);
	fprintf(out, "tensors (%.0f):\n", n_or(r, "n_tensors", 0));
	const cJSON *t;
	cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(r, "tensors")) {
		char shape[96] = "", *p = shape;
		const cJSON *d;
		cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(t, "ne"))
			p += snprintf(p, (size_t)(shape + sizeof shape - p), "%s%.0f", p == shape ? "" : " x ", d->valuedouble);
		fprintf(out, "  %-36s %-22s %-12s %12.0f\n", s_or(t, "name", "?"), shape, s_or(t, "encoding", "?"),
			n_or(t, "size", 0));
		const cJSON *pt;
		const bool stacked = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(t, "ne")) > 2;
		cJSON_ArrayForEach(pt, cJSON_GetObjectItemCaseSensitive(t, "parts"))
			fprintf(out, "    part %-31s rows %.0f..%.0f%s\n", s_or(pt, "name", "?"), n_or(pt, "row0", 0),
				n_or(pt, "row0", 0) + n_or(pt, "rows", 0), stacked ? " of each expert" : "");
		const cJSON *le = cJSON_GetObjectItemCaseSensitive(t, "layout_error");
		if (le) /* marlin_i4z/_i8z: fp16 scale and offset, then fp16(q*s + o), vs the exact values */
			fprintf(out, "    kernel values vs exact: max |err| %.3g, rms %.3g (weights rms %.3g)\n",
				n_or(le, "max_abs", 0), n_or(le, "rms", 0), n_or(le, "rms_weights", 0));
		const cJSON *fe = cJSON_GetObjectItemCaseSensitive(t, "fuse_error");
		if (fe)
			fprintf(out, "    fusion error: max %.3g, rms %.3g (%s)\n", n_or(fe, "max_abs", 0), n_or(fe, "rms", 0),
				cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(fe, "requantized"))
					? "halves re-quantized to one scale"
					: "no re-quantization needed");
	}
}
