/* test_hf_quant.c — the HF quantization schemes (convert/hf_quant.h) against the
 * libraries that write them. Good inputs: tests/data/hfq/<name>/ from
 * tests/gen/make_hf_quant.py (auto-gptq, autoawq, bitsandbytes, compressed-tensors
 * packers; ref.safetensors is each library's own float32 dequantization). Every
 * quantized module is loaded through qc_hfq_open/qc_hfq_load, every row decoded with
 * its traits-table decoder, columns put back through act_perm, and compared with the
 * reference: bit-exact except LLM.int8 (documented ≤ 1e-6 relative, docs/hf-quant.md).
 * Also: act-order, static groups, v1/v2 zeros, double quant, skip/ignore rules, "re:"
 * targets, several config_groups, MoE pairs, and Gemma 2 / Gemma 3 checkpoints (one
 * in the multimodal class; tied embeddings: the embedding loads plain, norms dump as
 * 1 + w, no output.weight; a packed lm_head beside tied embeddings is refused). Bad
 * inputs are built here as small checkpoints in a temp folder; each rejection is
 * checked for code, file, tensor and offset next to a valid twin. Through the CLI
 * ($QC_BIN/qconvert): every fixture converts, `qconvert dump` of its weights (act_perm
 * undone, experts cut from the fused w13) equals the reference, the CPU engine's
 * greedy ids equal transformers' (near ties excepted), and bad folders exit 1 leaving
 * no output. Run from the repo root.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tests/check.h"
#include "engine.h"
#include "hf_quant.h"
#include "hf_source.h"
#include "hfq_scheme.h"
#include "qtype.h"
#include "safetensors.h"

#define DIR_HFQ "tests/data/hfq"

struct fixture {
	const char *name, *method;
	double rel_tol;            /* 0: bit-exact */
	int act_order;             /* 1: every quantized module has act_perm; 0: none has */
	const char *q_type, *mlp_type;  /* types of layer 0 q_proj / gate (or w1) */
	const char *plain;         /* a module this config leaves unquantized, or NULL */
	const char *root;          /* tied Gemma: the text model's prefix ("model", or
				      "language_model.model" in the multimodal class); its
				      embedding loads plain and there is no lm_head. NULL: untied */
};

static const struct fixture fixtures[] = {
	{ "gptq_b4_g32_sym", "gptq", 0, 0, "hq4", "hq4", "lm_head", NULL },
	{ "gptq_b4_g32_asym_act", "gptq", 0, 1, "hq4", "hq4", NULL, NULL },
	{ "gptq_b3_g64_asym", "gptq", 0, 0, "hq4", "hq4", NULL, NULL },
	{ "gptq_b2_g32_asym_v2", "gptq", 0, 1, "hq4", "hq4", NULL, NULL },
	{ "gptq_b8_chan_static", "gptq", 0, 0, "hq8", "hq8", NULL, NULL },
	{ "gptq_b4_g32_static_act", "gptq", 0, 0, "hq4", "hq4", NULL, NULL },
	{ "awq_b4_g64", "awq", 0, 0, "hq4", "hq4", NULL, NULL },
	{ "bnb_nf4", "bitsandbytes", 0, 0, "bnb_nf4", "bnb_nf4", NULL, NULL },
	{ "bnb_fp4_dq", "bitsandbytes", 0, 0, "bnb_fp4", "bnb_fp4", NULL, NULL },
	{ "bnb_nf4_dq_skip", "bitsandbytes", 0, 0, "bnb_nf4", "bnb_nf4", "model.layers.0.mlp.down_proj", NULL },
	{ "bnb_int8", "bitsandbytes", 1e-6, 0, "hq8", "hq8", NULL, NULL },
	{ "ct_int4_g32_asym_act", "compressed-tensors", 0, 1, "hq4", "hq4", "lm_head", NULL },
	{ "ct_multi", "compressed-tensors", 0, 0, "hq8", "hq4", "model.layers.1.mlp.down_proj", NULL },
	{ "ct_fp8_tensor", "compressed-tensors", 0, 0, "f8_e4m3", "f8_e4m3", NULL, NULL },
	{ "ct_fp8_channel", "compressed-tensors", 0, 0, "f8_e4m3", "f8_e4m3", NULL, NULL },
	{ "ct_fp8_block", "compressed-tensors", 0, 0, "f8_e4m3", "f8_e4m3", NULL, NULL },
	/* W8A8 FP8: the greedy reference rounds every linear's input (make_hf_quant.act_fp8_hook) */
	{ "ct_fp8_w8a8_static", "compressed-tensors", 0, 0, "f8_a8", "f8_a8", NULL, NULL },
	{ "ct_fp8_w8a8_dynamic", "compressed-tensors", 0, 0, "f8_a8", "f8_a8", NULL, NULL },
	{ "ct_naive_int8", "compressed-tensors", 0, 0, "hq8", "hq8", NULL, NULL },
	{ "ct_nvfp4", "compressed-tensors", 0, 0, "nvfp4", "nvfp4", NULL, NULL },
	{ "moe_ct_fp8_tensor", "compressed-tensors", 0, 0, "f8_e4m3", "f8_e4m3", "model.layers.0.block_sparse_moe.gate", NULL },
	{ "moe_gptq_b4_act", "gptq", 0, 1, "hq4", "hq4", NULL, NULL },
	{ "moe_ct_nvfp4", "compressed-tensors", 0, 0, "f16", "nvfp4", "model.layers.0.self_attn.q_proj", NULL },
	/* Gemma 2 / Gemma 3 (tied embeddings, (1 + w) norms, soft-caps, q/k norms, windows) */
	{ "gemma2_gptq_b4_g32_asym_act", "gptq", 0, 1, "hq4", "hq4", NULL, "model" },
	{ "gemma2_ct_fp8_channel", "compressed-tensors", 0, 0, "f8_e4m3", "f8_e4m3", NULL, "model" },
	{ "gemma2_bnb_nf4", "bitsandbytes", 0, 0, "bnb_nf4", "bnb_nf4", NULL, "model" },
	{ "gemma3_gptq_b4_g32_sym", "gptq", 0, 0, "hq4", "hq4", NULL, "model" },
	{ "gemma3_ct_int8", "compressed-tensors", 0, 0, "hq8", "hq8", NULL, "model" },
	{ "gemma3_awq_b4_g32", "awq", 0, 0, "hq4", "hq4", NULL, "model" },
	{ "gemma3cg_ct_int4_g32", "compressed-tensors", 0, 0, "hq4", "hq4", NULL, "language_model.model" },
};

static void print_err(const char *what, const struct qc_err *e)
{
	char b[1024];
	qc_err_format(e, b, sizeof b);
	fprintf(stderr, "  %s: %s\n", what, b);
}

/* Decoded row r of t, columns back in checkpoint order. */
static void decode_row(const struct qc_hfq_tensor *t, int64_t r, float *tmp, float *row)
{
	uint64_t rb = 0;
	qc_type_row_bytes(t->type, (uint64_t)t->n_cols, &rb);
	qc_types[t->type].dequant_row(t->data + (uint64_t)r * rb, tmp, t->n_cols);
	for (int64_t j = 0; j < t->n_cols; j++)
		row[t->act_perm ? t->act_perm[j] : j] = tmp[j];
}

/* a == b element-wise within rel_tol·|b| (rel_tol 0: equal values, ±0 alike) */
static bool compare_flat(const float *a, const float *b, uint64_t n, double rel_tol)
{
	for (uint64_t i = 0; i < n; i++)
		if (!(fabs((double)a[i] - (double)b[i]) <= rel_tol * fabs((double)b[i])))
			return false;
	return true;
}

static bool is_perm(const int32_t *p, int64_t n)
{
	char *seen = calloc((size_t)n, 1);
	bool ok = seen != NULL;
	for (int64_t i = 0; ok && i < n; i++) {
		ok = p[i] >= 0 && p[i] < n && !seen[p[i]];
		if (ok)
			seen[p[i]] = 1;
	}
	free(seen);
	return ok;
}

/* Elements of t differing from ref (beyond rel_tol·|ref|); reports the first. */
static int64_t compare(const char *fx, const char *mod, const struct qc_hfq_tensor *t, const float *ref, double rel_tol)
{
	float *tmp = malloc((size_t)t->n_cols * sizeof *tmp), *row = malloc((size_t)t->n_cols * sizeof *row);
	int64_t bad = 0;
	for (int64_t r = 0; tmp && row && r < t->n_rows; r++) {
		decode_row(t, r, tmp, row);
		for (int64_t c = 0; c < t->n_cols; c++) {
			const float a = row[c], b = ref[r * t->n_cols + c];
			const bool ok = rel_tol == 0 ? a == b : fabs((double)a - (double)b) <= rel_tol * fabs((double)b) + 1e-30;
			if (!ok && !bad++)
				fprintf(stderr, "  %s %s [%lld,%lld]: got %.9g want %.9g\n", fx, mod, (long long)r, (long long)c,
					a, b);
		}
	}
	free(tmp);
	free(row);
	return bad;
}

/* types compared bit-exactly with a library here (test_gguf_reference.c relies on it) */
static int exact_seen[QC_TYPE_COUNT];

static const char *type_name(enum qc_type t)
{
	return qc_types[t].name;
}

static void check_fixture(const struct fixture *f)
{
	char dir[512], refp[600];
	snprintf(dir, sizeof dir, "%s/%s", DIR_HFQ, f->name);
	snprintf(refp, sizeof refp, "%s/ref.safetensors", dir);
	struct qc_err err = { 0 };
	struct qc_hf_source *src = NULL;
	struct qc_hfq *q = NULL;
	struct qc_st *ref = NULL;
	int rc = qc_hf_open(dir, &src, &err);
	CHECK(rc == QC_OK, "%s: qc_hf_open %d", f->name, rc);
	if (rc) {
		print_err(f->name, &err);
		return;
	}
	rc = qc_hfq_open(src, &q, &err);
	CHECK(rc == QC_OK, "%s: qc_hfq_open %d", f->name, rc);
	if (rc) {
		print_err(f->name, &err);
		goto out;
	}
	CHECK(strcmp(qc_hfq_method(q), f->method) == 0, "%s: method %s", f->name, qc_hfq_method(q));
	rc = qc_st_open(refp, &ref, &err);
	CHECK(rc == QC_OK, "%s: reference missing", f->name);
	if (rc)
		goto out;
	int n_mod = 0, n_perm = 0;
	for (uint64_t i = 0; i < ref->n_tensors; i++) {
		const struct qc_st_tensor *rt = &ref->tensors[i];
		const char *mod = rt->name;
		n_mod++;
		CHECK(qc_hfq_is_quantized(q, src, mod), "%s: %s not seen as quantized", f->name, mod);
		struct qc_hfq_tensor t;
		rc = qc_hfq_load(q, src, mod, &t, &err);
		CHECK(rc == QC_OK, "%s: load %s: %d", f->name, mod, rc);
		if (rc) {
			print_err(mod, &err);
			continue;
		}
		CHECK(t.n_rows == (int64_t)rt->shape[0] && t.n_cols == (int64_t)rt->shape[1], "%s: %s shape %lldx%lld",
		      f->name, mod, (long long)t.n_rows, (long long)t.n_cols);
		uint64_t rb = 0;
		CHECK(qc_type_row_bytes(t.type, (uint64_t)t.n_cols, &rb) == QC_OK && t.size == rb * (uint64_t)t.n_rows,
		      "%s: %s size %zu", f->name, mod, t.size);
		if (t.act_perm) {
			n_perm++;
			CHECK(is_perm(t.act_perm, t.n_cols), "%s: %s act_perm is not a permutation", f->name, mod);
		}
		const int64_t bad = compare(f->name, mod, &t, (const float *)qc_st_data(ref, rt), f->rel_tol);
		CHECK(bad == 0, "%s: %s: %lld elements differ from the library's dequantization", f->name, mod,
		      (long long)bad);
		if (bad == 0 && f->rel_tol == 0)
			exact_seen[t.type]++;
		if (strstr(mod, "layers.0.self_attn.q_proj"))
			CHECK(strcmp(type_name(t.type), f->q_type) == 0, "%s: q_proj type %s", f->name, type_name(t.type));
		if (strstr(mod, "layers.0.mlp.gate_proj") || strstr(mod, "layers.0.block_sparse_moe.experts.0.w1"))
			CHECK(strcmp(type_name(t.type), f->mlp_type) == 0, "%s: gate type %s", f->name, type_name(t.type));
		qc_hfq_tensor_free(&t);
		CHECK(t.data == NULL && t.act_perm == NULL, "tensor_free did not zero");
	}
	CHECK(n_mod >= 12, "%s: only %d reference modules", f->name, n_mod);
	if (f->act_order)
		CHECK(n_perm == n_mod, "%s: %d of %d modules have act_perm", f->name, n_perm, n_mod);
	else
		CHECK(n_perm == 0, "%s: %d modules have act_perm without act-order", f->name, n_perm);
	/* lm_head (never quantized here; tied: the embedding) and the config's own
	 * exclusions load plain */
	char embed[96];
	snprintf(embed, sizeof embed, "%s.embed_tokens", f->root ? f->root : "");
	const char *plain[2] = { f->root ? embed : "lm_head", f->plain };
	for (int i = 0; i < 2; i++) {
		if (!plain[i] || (i && strcmp(f->plain, "lm_head") == 0))
			continue;
		if (strcmp(f->q_type, "f16") == 0 && i == 1) { /* moe_ct_nvfp4: attention is outside the targets */
			CHECK(!qc_hfq_rule(q, plain[i]), "%s: %s matches a target", f->name, plain[i]);
		}
		CHECK(!qc_hfq_is_quantized(q, src, plain[i]), "%s: %s seen as quantized", f->name, plain[i]);
		CHECK(qc_st_find(ref, plain[i]) == NULL, "%s: %s has a reference", f->name, plain[i]);
		struct qc_hfq_tensor t;
		rc = qc_hfq_load(q, src, plain[i], &t, &err);
		CHECK(rc == QC_OK && t.type == QC_TYPE_F16 && !t.act_perm, "%s: %s plain load %d", f->name, plain[i], rc);
		qc_hfq_tensor_free(&t);
	}
out:
	qc_st_close(ref);
	qc_hfq_close(q);
	qc_hf_close(src);
}

/* ---- MoE pairs ---- */

static void check_pairs(void)
{
	struct qc_err err = { 0 };
	const char *names[] = { "moe_ct_fp8_tensor", "moe_gptq_b4_act", "moe_ct_nvfp4" };
	for (size_t i = 0; i < 3; i++) {
		char dir[256], refp[300];
		snprintf(dir, sizeof dir, "%s/%s", DIR_HFQ, names[i]);
		snprintf(refp, sizeof refp, "%s/ref.safetensors", dir);
		struct qc_hf_source *src = NULL;
		struct qc_hfq *q = NULL;
		struct qc_st *ref = NULL;
		if (qc_hf_open(dir, &src, &err) || qc_hfq_open(src, &q, &err) || qc_st_open(refp, &ref, &err)) {
			CHECK(0, "%s: cannot open", names[i]);
			print_err(names[i], &err);
			goto next;
		}
		for (int e = 0; e < 4; e++) {
			char g[128], u[128];
			snprintf(g, sizeof g, "model.layers.1.block_sparse_moe.experts.%d.w1", e);
			snprintf(u, sizeof u, "model.layers.1.block_sparse_moe.experts.%d.w3", e);
			struct qc_hfq_tensor tg, tu;
			struct qc_hfq_fuse_stats st;
			int rc = qc_hfq_load_pair(q, src, g, u, &tg, &tu, &st, &err);
			CHECK(rc == QC_OK, "%s: pair %d: %d", names[i], e, rc);
			if (rc) {
				print_err(g, &err);
				continue;
			}
			/* per-block scales: no half needed re-quantizing, each stays exact */
			CHECK(!st.requantized && st.max_abs_err == 0 && st.rms_err == 0, "%s: pair re-quantized", names[i]);
			CHECK(tg.type == tu.type && tg.n_cols == tu.n_cols, "%s: pair types differ", names[i]);
			CHECK(compare(names[i], g, &tg, (const float *)qc_st_data(ref, qc_st_find(ref, g)), 0) == 0, "%s gate", names[i]);
			CHECK(compare(names[i], u, &tu, (const float *)qc_st_data(ref, qc_st_find(ref, u)), 0) == 0, "%s up", names[i]);
			qc_hfq_tensor_free(&tg);
			qc_hfq_tensor_free(&tu);
		}
		if (strcmp(names[i], "moe_ct_fp8_tensor") == 0) {
			/* the two halves really had different per-tensor scales */
			const struct qc_hf_tensor *a = qc_hf_find(src, "model.layers.1.block_sparse_moe.experts.0.w1.weight_scale");
			const struct qc_hf_tensor *b = qc_hf_find(src, "model.layers.1.block_sparse_moe.experts.0.w3.weight_scale");
			CHECK(a && b && qc_hfq_f32_at(a, 0) != qc_hfq_f32_at(b, 0), "fp8 fixture halves share a scale");
		}
		if (strcmp(names[i], "moe_gptq_b4_act") == 0) {
			/* q_proj and an expert's w1 have different act-order permutations */
			struct qc_hfq_tensor tg, tu;
			struct qc_hfq_fuse_stats st;
			int rc = qc_hfq_load_pair(q, src, "model.layers.0.self_attn.q_proj",
						  "model.layers.0.block_sparse_moe.experts.0.w1", &tg, &tu, &st, &err);
			CHECK(rc == QC_EUNSUPPORTED && strstr(err.msg, "permutations differ"), "differing act_perm fused: %d", rc);
			CHECK(tg.data == NULL && tu.data == NULL, "failed pair left data");
		}
next:
		qc_st_close(ref);
		qc_hfq_close(q);
		qc_hf_close(src);
	}
}

/* ---- bad inputs: small checkpoints written here ---- */

struct wt {
	const char *name, *dtype;
	int n_dims;
	int64_t shape[2];
	const void *data;
	size_t n_bytes;
};

static char tmp_root[256];

/* A safetensors file at path holding t[0..n). */
static int write_st(const char *path, const struct wt *t, int n)
{
	char hdr[8192];
	size_t o = (size_t)snprintf(hdr, sizeof hdr, "{");
	uint64_t off = 0;
	for (int i = 0; i < n; i++) {
		o += (size_t)snprintf(hdr + o, sizeof hdr - o, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", t[i].name,
				      t[i].dtype);
		for (int d = 0; d < t[i].n_dims; d++)
			o += (size_t)snprintf(hdr + o, sizeof hdr - o, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
		o += (size_t)snprintf(hdr + o, sizeof hdr - o, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
				      (unsigned long long)(off + t[i].n_bytes));
		off += t[i].n_bytes;
	}
	o += (size_t)snprintf(hdr + o, sizeof hdr - o, "}");
	while (o % 8)
		hdr[o++] = ' ';
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	uint64_t hl = o;
	fwrite(&hl, 8, 1, f);
	fwrite(hdr, 1, o, f);
	for (int i = 0; i < n; i++)
		fwrite(t[i].data, 1, t[i].n_bytes, f);
	return fclose(f) ? -1 : 0;
}

static int write_ckpt(const char *sub, const char *config, const struct wt *t, int n)
{
	char dir[512], p[600];
	snprintf(dir, sizeof dir, "%s/%s", tmp_root, sub);
	mkdir(dir, 0755);
	snprintf(p, sizeof p, "%s/config.json", dir);
	FILE *f = fopen(p, "wb");
	if (!f)
		return -1;
	fputs(config, f);
	fclose(f);
	snprintf(p, sizeof p, "%s/model.safetensors", dir);
	return write_st(p, t, n);
}

#define BK 64   /* in_features of the synthetic layers */
#define BN 32   /* out_features */

static uint32_t gq_qweight[BK * 4 / 32 * BN], gq_qzeros[2 * BN * 4 / 32];
static uint16_t gq_scales[2 * BN];
static int32_t gq_gidx[BK];

static const char *gptq_cfg(int gs)
{
	static char b[512];
	snprintf(b, sizeof b, "{\"architectures\":[\"LlamaForCausalLM\"],\"quantization_config\":{\"quant_method\":\"gptq\","
		 "\"bits\":4,\"group_size\":%d,\"desc_act\":true,\"sym\":true}}", gs);
	return b;
}

/* A valid 4-bit GPTQ module "m" with group 32 (two groups over K = 64). */
static int gptq_tensors(struct wt *t, bool with_scales, const char *scale_dtype)
{
	int n = 0;
	t[n++] = (struct wt){ "m.qweight", "I32", 2, { BK * 4 / 32, BN }, gq_qweight, sizeof gq_qweight };
	t[n++] = (struct wt){ "m.qzeros", "I32", 2, { 2, BN * 4 / 32 }, gq_qzeros, sizeof gq_qzeros };
	if (with_scales)
		t[n++] = (struct wt){ "m.scales", scale_dtype, 2, { 2, BN }, gq_scales, sizeof gq_scales };
	t[n++] = (struct wt){ "m.g_idx", "I32", 1, { BK, 0 }, gq_gidx, sizeof gq_gidx };
	return n;
}

/* Load module m of folder sub; returns the code and fills err. */
static int try_load(const char *sub, struct qc_err *err)
{
	char dir[512];
	snprintf(dir, sizeof dir, "%s/%s", tmp_root, sub);
	struct qc_hf_source *src = NULL;
	struct qc_hfq *q = NULL;
	int rc = qc_hf_open(dir, &src, err);
	if (!rc)
		rc = qc_hfq_open(src, &q, err);
	if (!rc) {
		struct qc_hfq_tensor t;
		rc = qc_hfq_load(q, src, "m", &t, err);
		qc_hfq_tensor_free(&t);
	}
	qc_hfq_close(q);
	qc_hf_close(src);
	return rc;
}

/* Copy fixture fx into tmp_root/sub with `len` bytes at element byte `at` of tensor
 * `tensor` replaced by `bytes`; returns the patched byte's file offset or -1. */
static int64_t patch_fixture(const char *fx, const char *sub, const char *tensor, uint64_t at, const void *bytes,
			     size_t len)
{
	char src[512], dst[600];
	snprintf(src, sizeof src, "%s/%s/model.safetensors", DIR_HFQ, fx);
	size_t n = 0;
	char *b = check_read_file(src, &n);
	struct qc_st *st = NULL;
	struct qc_err err;
	int64_t off = -1;
	if (b && qc_st_open(src, &st, &err) == QC_OK) {
		const struct qc_st_tensor *t = qc_st_find(st, tensor);
		if (t && at + len <= t->n_bytes) {
			off = (int64_t)(t->data_off + at);
			memcpy(b + off, bytes, len);
		}
	}
	qc_st_close(st);
	snprintf(dst, sizeof dst, "%s/%s", tmp_root, sub);
	mkdir(dst, 0755);
	snprintf(dst, sizeof dst, "%s/%s/model.safetensors", tmp_root, sub);
	FILE *f = off >= 0 ? fopen(dst, "wb") : NULL;
	if (f) {
		fwrite(b, 1, n, f);
		fclose(f);
	}
	free(b);
	char cfg[600], *c;
	snprintf(src, sizeof src, "%s/%s/config.json", DIR_HFQ, fx);
	snprintf(cfg, sizeof cfg, "%s/%s/config.json", tmp_root, sub);
	c = check_read_file(src, &n);
	f = c ? fopen(cfg, "wb") : NULL;
	if (f) {
		fwrite(c, 1, n, f);
		fclose(f);
	}
	free(c);
	return f ? off : -1;
}

/* Load `module` of tmp_root/sub. */
static int try_load_module(const char *sub, const char *module, struct qc_err *err)
{
	char dir[512];
	snprintf(dir, sizeof dir, "%s/%s", tmp_root, sub);
	struct qc_hf_source *src = NULL;
	struct qc_hfq *q = NULL;
	int rc = qc_hf_open(dir, &src, err);
	if (!rc)
		rc = qc_hfq_open(src, &q, err);
	if (!rc) {
		struct qc_hfq_tensor t;
		rc = qc_hfq_load(q, src, module, &t, err);
		qc_hfq_tensor_free(&t);
	}
	qc_hfq_close(q);
	qc_hf_close(src);
	return rc;
}

static void check_bad_inputs(void)
{
	snprintf(tmp_root, sizeof tmp_root, "/tmp/qc_test_hfq_%d", (int)getpid());
	mkdir(tmp_root, 0755);
	for (size_t i = 0; i < sizeof gq_qweight / 4; i++)
		gq_qweight[i] = 0x76543210u * (uint32_t)(i + 1);
	for (size_t i = 0; i < sizeof gq_qzeros / 4; i++)
		gq_qzeros[i] = 0x77777777u;
	for (int i = 0; i < 2 * BN; i++)
		gq_scales[i] = 0x3c00; /* 1.0 */
	for (int i = 0; i < BK; i++)
		gq_gidx[i] = (i * 7 % BK) / 32; /* act-order-like: two groups of 32, interleaved */
	struct wt t[8];
	struct qc_err err;

	/* valid twin */
	int n = gptq_tensors(t, true, "F16");
	write_ckpt("ok", gptq_cfg(32), t, n);
	memset(&err, 0, sizeof err);
	int rc = try_load("ok", &err);
	CHECK(rc == QC_OK, "valid synthetic GPTQ rejected: %d", rc);
	if (rc)
		print_err("ok", &err);

	/* missing scale tensor */
	n = gptq_tensors(t, false, "F16");
	write_ckpt("noscale", gptq_cfg(32), t, n);
	rc = try_load("noscale", &err);
	CHECK(rc == QC_ENOTFOUND && strcmp(err.tensor, "m.scales") == 0, "missing scales: %d '%s'", rc, err.tensor);

	/* scale dtype mismatch */
	n = gptq_tensors(t, true, "I16");
	write_ckpt("scaledtype", gptq_cfg(32), t, n);
	rc = try_load("scaledtype", &err);
	CHECK(rc == QC_EFORMAT && strcmp(err.tensor, "m.scales") == 0 && strcmp(err.path, "model.safetensors") == 0 &&
	      err.off > 0 && strstr(err.msg, "dtype"), "scale dtype: %d '%s' '%s' %lld", rc, err.tensor, err.path, (long long)err.off);

	/* shape mismatch: group 16 wants 4 scale rows */
	n = gptq_tensors(t, true, "F16");
	write_ckpt("shape", gptq_cfg(16), t, n);
	rc = try_load("shape", &err);
	CHECK(rc == QC_EFORMAT && strstr(err.msg, "shape") && strstr(err.msg, "want [4, 32]"), "scale shape: %d %s", rc, err.msg);

	/* group size not dividing the 32-column blocks (48 over K = 64: two groups, block 1 spans both) */
	for (int i = 0; i < BK; i++)
		gq_gidx[i] = i / 48;
	n = gptq_tensors(t, true, "F16");
	write_ckpt("gs48", gptq_cfg(48), t, n);
	rc = try_load("gs48", &err);
	CHECK(rc == QC_EUNSUPPORTED && strcmp(err.tensor, "m.g_idx") == 0 && strstr(err.msg, "block 1"),
	      "group 48: %d %s", rc, err.msg);

	/* g_idx out of range, reported at its byte offset */
	for (int i = 0; i < BK; i++)
		gq_gidx[i] = i / 32;
	gq_gidx[5] = 2;
	n = gptq_tensors(t, true, "F16");
	write_ckpt("gidx", gptq_cfg(32), t, n);
	rc = try_load("gidx", &err);
	{
		/* data starts after 8 + header; g_idx is the last tensor */
		const int64_t want_off = (int64_t)(sizeof gq_qweight + sizeof gq_qzeros + sizeof gq_scales + 5 * 4);
		CHECK(rc == QC_EFORMAT && strcmp(err.tensor, "m.g_idx") == 0 && err.off > want_off &&
		      strstr(err.msg, "g_idx[5] = 2"), "g_idx range: %d %s off %lld", rc, err.msg, (long long)err.off);
	}

	/* unknown quant_method */
	n = gptq_tensors(t, true, "F16");
	write_ckpt("method", "{\"quantization_config\":{\"quant_method\":\"hqq\"}}", t, n);
	rc = try_load("method", &err);
	CHECK(rc == QC_EUNSUPPORTED && strcmp(err.path, "config.json") == 0 && strstr(err.msg, "hqq"), "method: %d %s", rc,
	      err.msg);

	/* unsupported bits */
	write_ckpt("bits", "{\"quantization_config\":{\"quant_method\":\"gptq\",\"bits\":5,\"group_size\":32}}", t, n);
	rc = try_load("bits", &err);
	CHECK(rc == QC_EUNSUPPORTED && strstr(err.msg, "bits"), "bits 5: %d %s", rc, err.msg);

	/* AWQ group size not dividing K */
	static uint32_t aw[BK * BN / 8], az[1 * BN / 8];
	static uint16_t as[1 * BN];
	struct wt a[3] = {
		{ "m.qweight", "I32", 2, { BK, BN / 8 }, aw, sizeof aw },
		{ "m.qzeros", "I32", 2, { 1, BN / 8 }, az, sizeof az },
		{ "m.scales", "F16", 2, { 1, BN }, as, sizeof as },
	};
	write_ckpt("awq48", "{\"quantization_config\":{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":48,\"version\":\"gemm\"}}",
		   a, 3);
	rc = try_load("awq48", &err);
	CHECK(rc == QC_EUNSUPPORTED && strcmp(err.tensor, "m.qweight") == 0 && strstr(err.msg, "does not divide"),
	      "awq 48: %d %s", rc, err.msg);
	write_ckpt("awq64", "{\"quantization_config\":{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":64,\"version\":\"gemm\"}}",
		   a, 3);
	rc = try_load("awq64", &err);
	CHECK(rc == QC_OK, "awq 64 twin: %d %s", rc, err.msg);

	/* in_features not a multiple of 32 (FP8, K = 48) */
	static uint8_t f8[BN * 48];
	static float f8s[1] = { 1.0f };
	struct wt fp[2] = {
		{ "m.weight", "F8_E4M3", 2, { BN, 48 }, f8, sizeof f8 },
		{ "m.weight_scale", "F32", 1, { 1, 0 }, f8s, sizeof f8s },
	};
	const char *ctc = "{\"quantization_config\":{\"quant_method\":\"compressed-tensors\",\"format\":\"float-quantized\","
			  "\"config_groups\":{\"g\":{\"targets\":[\"re:^m$\"],\"weights\":{\"num_bits\":8,\"type\":\"float\","
			  "\"symmetric\":true,\"strategy\":\"tensor\"}}},\"quantization_status\":\"compressed\"}}";
	write_ckpt("k48", ctc, fp, 2);
	rc = try_load("k48", &err);
	CHECK(rc == QC_EUNSUPPORTED && strcmp(err.tensor, "m.weight") == 0 && strstr(err.msg, "multiple of 32"),
	      "K 48: %d %s", rc, err.msg);
	fp[0].shape[1] = 32;
	fp[0].n_bytes = BN * 32;
	write_ckpt("k32", ctc, fp, 2);
	rc = try_load("k32", &err);
	CHECK(rc == QC_OK, "K 32 twin: %d %s", rc, err.msg);

	/* naive int4 stored as int8: a value outside [-8, 7] is bad input, not a crash */
	{
		static int8_t q4[BN * 64];
		static float s4[BN];
		for (int i = 0; i < BN; i++)
			s4[i] = 0.5f;
		for (size_t i = 0; i < sizeof q4; i++)
			q4[i] = (int8_t)((int)(i % 16) - 8);
		struct wt nv[2] = {
			{ "m.weight", "I8", 2, { BN, 64 }, q4, sizeof q4 },
			{ "m.weight_scale", "F32", 2, { BN, 1 }, s4, sizeof s4 },
		};
		const char *nc = "{\"quantization_config\":{\"quant_method\":\"compressed-tensors\",\"format\":\"naive-quantized\","
				 "\"config_groups\":{\"g\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":4,\"type\":\"int\","
				 "\"symmetric\":true,\"strategy\":\"channel\"}}}}}";
		write_ckpt("naive4", nc, nv, 2);
		rc = try_load("naive4", &err);
		CHECK(rc == QC_OK, "naive int4 twin: %d %s", rc, err.msg);
		q4[77] = 100;
		write_ckpt("naive4bad", nc, nv, 2);
		rc = try_load("naive4bad", &err);
		CHECK(rc == QC_EFORMAT && strcmp(err.tensor, "m.weight") == 0 && strstr(err.msg, "value 100") && err.off > 77,
		      "naive int4 out of range: %d %s", rc, err.msg);
	}

	/* reference-writer files with one value changed */
	{
		const float not_nf4 = 0.25f;
		const char *m = "model.layers.0.mlp.up_proj";
		int64_t off = patch_fixture("bnb_nf4", "qmap", "model.layers.0.mlp.up_proj.weight.quant_map", 4 * 9, &not_nf4, 4);
		rc = try_load_module("qmap", m, &err);
		CHECK(off > 0 && rc == QC_EUNSUPPORTED && err.off == off && strstr(err.msg, "quant_map[9]") &&
		      strcmp(err.tensor, "model.layers.0.mlp.up_proj.weight.quant_map") == 0,
		      "bnb quant_map: %d off %lld (want %lld) %s", rc, (long long)err.off, (long long)off, err.msg);
		const int32_t big = 1000;
		off = patch_fixture("gptq_b4_g32_asym_act", "gidx2", "model.layers.1.self_attn.o_proj.g_idx", 4 * 3, &big, 4);
		rc = try_load_module("gidx2", "model.layers.1.self_attn.o_proj", &err);
		CHECK(off > 0 && rc == QC_EFORMAT && err.off == off && strstr(err.msg, "g_idx[3] = 1000"),
		      "real g_idx out of range: %d off %lld (want %lld) %s", rc, (long long)err.off, (long long)off, err.msg);
		rc = try_load_module("gidx2", "model.layers.1.self_attn.q_proj", &err);
		CHECK(rc == QC_OK, "untouched module of the patched file: %d", rc);
	}

	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
	CHECK(system(cmd) == 0, "cleanup");
}

/* ---- config parser rules without tensors ---- */

static void check_rules(void)
{
	struct qc_err err;
	struct qc_hfq *q = NULL;
	cJSON *c = cJSON_Parse("{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","
			       "\"ignore\":[\"lm_head\",\"re:.*layers\\\\.1\\\\..*\",\"re:model\\\\.layers\\\\.2\\\\.\"],\"config_groups\":{"
			       "\"a\":{\"targets\":[\"re:.*self_attn\\\\.(q|k)_proj$\"],\"weights\":{\"num_bits\":8,\"type\":\"int\",\"strategy\":\"channel\"}},"
			       "\"b\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":4,\"type\":\"int\",\"strategy\":\"group\",\"group_size\":128}}}}");
	int rc = qc_hfq_parse(c, NULL, &q, &err);
	CHECK(rc == QC_OK, "ct parse %d", rc);
	if (!rc) {
		CHECK(qc_hfq_rule(q, "model.layers.0.self_attn.q_proj"), "re: target");
		CHECK(qc_hfq_rule(q, "model.layers.0.mlp.up_proj"), "Linear target");
		CHECK(!qc_hfq_rule(q, "model.layers.1.self_attn.q_proj"), "re: ignore");
		CHECK(!qc_hfq_rule(q, "lm_head"), "ignore by name");
		CHECK(!qc_hfq_rule(q, "model.layers.2.mlp.up_proj"), "re: prefix match");
		CHECK(qc_hfq_rule(q, "xmodel.layers.2.mlp.up_proj"), "re: is anchored at the start");
	}
	qc_hfq_close(q);
	cJSON_Delete(c);

	/* precedence: an exact name beats an earlier group's regex; Linear (a class) beats re: */
	c = cJSON_Parse("{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\",\"config_groups\":{"
			"\"a\":{\"targets\":[\"re:.*q_proj\"],\"weights\":{\"num_bits\":4,\"type\":\"int\",\"strategy\":\"channel\"}},"
			"\"b\":{\"targets\":[\"model.layers.0.self_attn.q_proj\",\"Linear\"],\"format\":\"dense\","
			"\"weights\":{\"num_bits\":8,\"type\":\"int\",\"strategy\":\"channel\"}}}}");
	q = NULL;
	rc = qc_hfq_parse(c, NULL, &q, &err);
	CHECK(rc == QC_OK, "ct precedence parse %d", rc);
	if (!rc) {
		CHECK(!qc_hfq_rule(q, "model.layers.0.self_attn.q_proj"), "exact name must beat an earlier re:");
		CHECK(!qc_hfq_rule(q, "model.layers.1.self_attn.q_proj"), "class Linear must beat re:");
	}
	qc_hfq_close(q);
	cJSON_Delete(c);

	c = cJSON_Parse("{\"quant_method\":\"bitsandbytes\",\"load_in_4bit\":true,\"llm_int8_skip_modules\":[\"lm_head\",\"mlp\"]}");
	rc = qc_hfq_parse(c, NULL, &q, &err);
	CHECK(rc == QC_OK, "bnb parse %d", rc);
	if (!rc) {
		CHECK(!qc_hfq_rule(q, "lm_head"), "skip exact");
		CHECK(!qc_hfq_rule(q, "model.layers.0.mlp.up_proj"), "skip 'mlp.'");
		CHECK(qc_hfq_rule(q, "model.layers.0.mlpx.up_proj"), "skip needs the dot");
		CHECK(qc_hfq_rule(q, "model.layers.0.self_attn.q_proj"), "not skipped");
	}
	qc_hfq_close(q);
	cJSON_Delete(c);

	c = cJSON_Parse("{\"bits\":4,\"group_size\":128,\"desc_act\":false}");
	rc = qc_hfq_parse(NULL, c, &q, &err);
	CHECK(rc == QC_OK && strcmp(qc_hfq_method(q), "gptq") == 0, "quantize_config.json without quant_method: %d", rc);
	qc_hfq_close(q);
	q = NULL;
	cJSON_Delete(c);

	rc = qc_hfq_parse(NULL, NULL, &q, &err);
	CHECK(rc == QC_OK && strcmp(qc_hfq_method(q), "none") == 0 && !qc_hfq_rule(q, "x"), "none");
	qc_hfq_close(q);
	q = NULL;

	const char *bad[] = {
		"{\"quant_method\":\"gptq\",\"bits\":4,\"checkpoint_format\":\"marlin\"}",
		"{\"quant_method\":\"awq\",\"version\":\"gemv\"}",
		"{\"quant_method\":\"bitsandbytes\"}",
		"{\"quant_method\":\"compressed-tensors\",\"format\":\"marlin-24\",\"config_groups\":{}}",
		("{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\",\"config_groups\":{\"a\":{\"targets\":[\"Linear\"],"
		 "\"weights\":{\"num_bits\":4,\"type\":\"int\",\"strategy\":\"group\"}}}}"),
		"{\"quant_method\":\"gptq\",\"bits\":\"4\"}",
		"{\"quant_method\":7}",
	};
	const int codes[] = { QC_EUNSUPPORTED, QC_EUNSUPPORTED, QC_EFORMAT, QC_EUNSUPPORTED, QC_EFORMAT, QC_EFORMAT, QC_EFORMAT };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		c = cJSON_Parse(bad[i]);
		q = NULL;
		rc = qc_hfq_parse(c, NULL, &q, &err);
		CHECK(rc == codes[i] && q == NULL && strcmp(err.path, "config.json") == 0, "bad config %zu: %d (%s)", i, rc, err.msg);
		cJSON_Delete(c);
	}

	/* quantized activations: llm-compressor's FP8 (static per-tensor) and FP8_DYNAMIC
	   (per-token) parse, as W8A8 groups; every other activation scheme (int8 W8A8, FP8
	   block weights with per-group activations, FP8 static per token, W4A4) is refused,
	   naming the group and the scheme; "input_activations": null (weight-only) parses */
#define W8A8_CFG(FMT, W, A) \
	("{\"quant_method\":\"compressed-tensors\",\"format\":\"" FMT "\",\"config_groups\":{\"g1\":{" \
	 "\"targets\":[\"Linear\"],\"weights\":{" W "},\"input_activations\":{" A "}}}}")
	const struct {
		const char *cfg;
		int act;                /* the group's scheme when it parses; -1 refused */
		const char *want;       /* refused: part of the message */
	} w8a8[] = {
		{ W8A8_CFG("float-quantized", "\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"",
			   "\"num_bits\":8,\"type\":\"float\",\"strategy\":\"token\",\"dynamic\":true"), 2, NULL },
		{ W8A8_CFG("float-quantized", "\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\"",
			   "\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\",\"dynamic\":false"), 1, NULL },
		{ W8A8_CFG("naive-quantized", "\"num_bits\":8,\"type\":\"int\",\"strategy\":\"tensor\"",
			   "\"num_bits\":8,\"type\":\"int\",\"strategy\":\"tensor\",\"dynamic\":false"), -1,
		  "config_groups.g1: quantized activations (input_activations: int 8-bit, tensor, static input_scale) "
		  "with int 8-bit tensor weights" },
		{ W8A8_CFG("float-quantized",
			   "\"num_bits\":8,\"type\":\"float\",\"strategy\":\"block\",\"block_structure\":[128,128]",
			   "\"num_bits\":8,\"type\":\"float\",\"strategy\":\"group\",\"group_size\":128,\"dynamic\":true"),
		  -1, "(input_activations: float 8-bit, group, dynamic scales) with float 8-bit block weights" },
		{ W8A8_CFG("float-quantized", "\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"",
			   "\"num_bits\":8,\"type\":\"float\",\"strategy\":\"token\",\"dynamic\":false"), -1,
		  "(input_activations: float 8-bit, token, static input_scale)" },
		{ W8A8_CFG("nvfp4-pack-quantized",
			   "\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\",\"group_size\":16",
			   "\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\",\"group_size\":16,"
			   "\"dynamic\":\"local\""), -1, "(input_activations: float 4-bit, tensor_group, dynamic scales)" },
	};
#undef W8A8_CFG
	for (size_t i = 0; i < sizeof w8a8 / sizeof w8a8[0]; i++) {
		c = cJSON_Parse(w8a8[i].cfg);
		q = NULL;
		rc = qc_hfq_parse(c, NULL, &q, &err);
		if (w8a8[i].act < 0)
			CHECK(rc == QC_EUNSUPPORTED && q == NULL && strstr(err.msg, w8a8[i].want) &&
				      strstr(err.msg, "weight-only"),
			      "W8A8 config %zu: %d (%s)", i, rc, err.msg);
		else
			CHECK(rc == QC_OK && q && q->n_groups == 1 && q->groups[0].act == w8a8[i].act,
			      "W8A8 config %zu: %d (%s)", i, rc, rc ? err.msg : "");
		qc_hfq_close(q);
		cJSON_Delete(c);
	}
	c = cJSON_Parse("{\"quant_method\":\"compressed-tensors\",\"format\":\"float-quantized\",\"config_groups\":{"
			"\"group_0\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":8,\"type\":\"float\","
			"\"strategy\":\"channel\"},\"input_activations\":null}}}");
	q = NULL;
	rc = qc_hfq_parse(c, NULL, &q, &err);
	CHECK(rc == QC_OK && q != NULL, "weight-only FP8 with input_activations null: %d (%s)", rc, rc ? err.msg : "");
	qc_hfq_close(q);
	cJSON_Delete(c);
}

/* ---- through the CLI: qconvert DIR, then qconvert dump (act_perm undone, experts cut
 * out of fused w13) must equal the library's dequantization ---- */

static const char *bin_dir(void)
{
	const char *b = getenv("QC_BIN");
	return b && *b ? b : "build/bin";
}

static int run(const char *cmd)
{
	int st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* qconvert dump of tensor into a fresh float buffer of n elements; NULL on failure. */
static float *dump(const char *qb, const char *tensor, size_t n)
{
	char cmd[1024], out[600];
	snprintf(out, sizeof out, "%s.dump", qb);
	snprintf(cmd, sizeof cmd, "'%s/qconvert' dump '%s' '%s' -o '%s' 2>/dev/null", bin_dir(), qb, tensor, out);
	if (run(cmd) != 0)
		return NULL;
	size_t len = 0;
	char *b = check_read_file(out, &len);
	unlink(out);
	if (b && len != n * sizeof(float)) {
		free(b);
		b = NULL;
	}
	return (float *)(void *)b;
}

/* HF module suffix -> GGUF name part, for modules whose rows the converter keeps in
 * order (q/k are RoPE-permuted, so they are left to the direct loads above). */
static const struct { const char *hf, *gguf; } cli_names[] = {
	{ "self_attn.v_proj", "attn_v" }, { "self_attn.o_proj", "attn_output" },
	{ "mlp.gate_proj", "ffn_gate" }, { "mlp.up_proj", "ffn_up" }, { "mlp.down_proj", "ffn_down" },
};


/* Gemma norms (HF module suffix -> GGUF name): HF applies (1 + w); the bundle stores
 * 1 + w, w widened to f32 first (llama.cpp's converter). q/k norms: Gemma 3 only. */
static const struct { const char *hf, *gguf; bool gemma3_only; } gemma_norms[] = {
	{ "input_layernorm", "attn_norm", false }, { "post_attention_layernorm", "post_attention_norm", false },
	{ "pre_feedforward_layernorm", "ffn_norm", false }, { "post_feedforward_layernorm", "post_ffw_norm", false },
	{ "self_attn.q_norm", "attn_q_norm", true }, { "self_attn.k_norm", "attn_k_norm", true },
};

/* A tied Gemma bundle: every norm of layers 0-1 and the final one dump as 1 + w of the
 * checkpoint's f16 w, and there is no output.weight (the embedding is the head). */
static void check_gemma(const char *fx, const char *root, const char *qb, int *n_cmp)
{
	char path[600];
	snprintf(path, sizeof path, "%s/%s/model.safetensors", DIR_HFQ, fx);
	struct qc_st *st = NULL;
	struct qc_err err;
	CHECK(qc_st_open(path, &st, &err) == QC_OK, "%s: open %s", fx, path);
	const bool g3 = strncmp(fx, "gemma3", 6) == 0;
	for (int l = -1; st && l < 2; l++) {
		for (size_t k = 0; k < sizeof gemma_norms / sizeof gemma_norms[0]; k++) {
			char hf[256], gg[128];
			if ((gemma_norms[k].gemma3_only && !g3) || (l < 0 && k > 0))
				continue;
			if (l < 0) {
				snprintf(hf, sizeof hf, "%s.norm.weight", root);
				snprintf(gg, sizeof gg, "output_norm.weight");
			} else {
				snprintf(hf, sizeof hf, "%s.layers.%d.%s.weight", root, l, gemma_norms[k].hf);
				snprintf(gg, sizeof gg, "blk.%d.%s.weight", l, gemma_norms[k].gguf);
			}
			const struct qc_st_tensor *t = qc_st_find(st, hf);
			CHECK(t && t->dtype == QC_ST_F16 && t->n_dims == 1, "%s: %s missing or not an f16 vector", fx, hf);
			if (!t || t->dtype != QC_ST_F16)
				continue;
			const int64_t n = (int64_t)t->shape[0];
			float *w = malloc((size_t)n * sizeof *w), *d = dump(qb, gg, (size_t)n);
			CHECK(w && d, "%s: dump %s", fx, gg);
			int bad = 0;
			if (w && d) {
				qc_types[QC_TYPE_F16].dequant_row(qc_st_data(st, t), w, n);
				for (int64_t i = 0; i < n; i++)
					bad += d[i] != w[i] + 1.0f;
			}
			CHECK(bad == 0, "%s: %s: %d of %lld elements are not 1 + %s", fx, gg, bad, (long long)n, hf);
			*n_cmp += d != NULL;
			free(w);
			free(d);
		}
	}
	qc_st_close(st);
	float *out = dump(qb, "output.weight", 1);
	CHECK(out == NULL, "%s: tied, yet the bundle has output.weight", fx);
	free(out);
}

/* Greedy ids of the converted bundle on the CPU engine (float activations) against
 * transformers' greedy ids on the library-dequantized float model (ref metadata).
 * A difference is accepted only at a step whose reference top-1/top-2 margin is a
 * near tie (< 1e-3): summation order may flip those; the prompt stops there. */
static void check_greedy(const char *fx, const char *qb, const struct qc_st *ref, int *n_ok, int *n_tie)
{
	const char *meta = qc_st_meta_get(ref, "greedy");
	cJSON *g = meta ? cJSON_Parse(meta) : NULL;
	const cJSON *prompts = cJSON_GetObjectItem(g, "prompts"), *ids = cJSON_GetObjectItem(g, "ids");
	const cJSON *margins = cJSON_GetObjectItem(g, "margins");
	CHECK(cJSON_GetArraySize(prompts) >= 2 && cJSON_GetArraySize(ids) == cJSON_GetArraySize(prompts) &&
	      cJSON_GetArraySize(margins) == cJSON_GetArraySize(prompts), "%s: no greedy reference", fx);
	struct qc_engine_opts o;
	qc_engine_opts_init(&o);
	o.act_round = QC_ACT_ROUND_NONE;
	o.n_threads = 1;
	struct qc_engine *e = NULL;
	struct qc_err err;
	int rc = qc_engine_new(qb, &o, &e, &err);
	CHECK(rc == QC_OK, "%s: engine %d", fx, rc);
	if (rc)
		print_err(fx, &err);
	for (int p = 0; !rc && p < cJSON_GetArraySize(prompts); p++) {
		const cJSON *pr = cJSON_GetArrayItem(prompts, p), *want = cJSON_GetArrayItem(ids, p);
		const cJSON *mg = cJSON_GetArrayItem(margins, p);
		int32_t prompt[64];
		int np = cJSON_GetArraySize(pr), nw = cJSON_GetArraySize(want);
		for (int i = 0; i < np && i < 64; i++)
			prompt[i] = (int32_t)cJSON_GetArrayItem(pr, i)->valuedouble;
		struct qc_engine_request r = { .prompt = prompt, .n_prompt = np, .max_tokens = nw, .ignore_eos = true };
		qc_sampler_params_init(&r.sampling);
		r.sampling.temperature = 0;
		uint64_t id;
		rc = qc_engine_add(e, &r, &id, &err);
		while (!rc && qc_engine_has_work(e))
			rc = qc_engine_step(e, &err);
		const int32_t *got = NULL;
		int32_t n = 0;
		enum qc_sched_finish fin;
		CHECK(rc == QC_OK && qc_engine_output(e, id, &got, &n, &fin) == QC_OK && n == nw, "%s: prompt %d: rc %d, %d ids",
		      fx, p, rc, n);
		for (int i = 0; got && i < n && i < nw; i++) {
			const int32_t w = (int32_t)cJSON_GetArrayItem(want, i)->valuedouble;
			if (got[i] == w)
				continue;
			const double m = cJSON_GetArrayItem(mg, i)->valuedouble;
			CHECK(m < 1e-3, "%s: prompt %d step %d: id %d, transformers %d (margin %.3g)", fx, p, i, got[i], w, m);
			*n_tie += m < 1e-3;
			if (m < 1e-3)
				fprintf(stderr, "  note: %s prompt %d step %d: near tie (margin %.2g), id %d vs %d\n", fx, p, i, m,
					got[i], w);
			n = 0; /* later steps follow another history */
			break;
		}
		*n_ok += n == nw;
		if (rc == QC_OK)
			qc_engine_release(e, id);
	}
	qc_engine_free(e);
	cJSON_Delete(g);
}

/* A tied Gemma with a packed lm_head beside it (GPTQModel's lm_head=True): the
 * gemma2 GPTQ fixture plus a shard holding lm_head's GPTQ tensors, joined by an index.
 * transformers would multiply by that head; the bundle reads the output from the
 * embedding, so qconvert must refuse, naming the head's tensor, and leave no output. */
static void check_gemma_packed_head(const char *tmp)
{
	static const char fx[] = "gemma2_gptq_b4_g32_asym_act";
	char dir[512], p[700], cmd[2048];
	snprintf(dir, sizeof dir, "%s/gemma_head", tmp);
	snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && cp '%s/%s/config.json' '%s/%s/model.safetensors' '%s/'",
		 dir, dir, DIR_HFQ, fx, DIR_HFQ, fx, dir);
	CHECK(run(cmd) == 0, "%s", cmd);
	/* [K/8, N] qweight, [K/32, N/8] qzeros, [K/32, N] scales, [K] g_idx: K 64, N 256 */
	static uint32_t qw[8 * 256], qz[2 * 32];
	static uint16_t sc[2 * 256];
	static int32_t gi[64];
	const struct wt head[] = {
		{ "lm_head.qweight", "I32", 2, { 8, 256 }, qw, sizeof qw },
		{ "lm_head.qzeros", "I32", 2, { 2, 32 }, qz, sizeof qz },
		{ "lm_head.scales", "F16", 2, { 2, 256 }, sc, sizeof sc },
		{ "lm_head.g_idx", "I32", 1, { 64 }, gi, sizeof gi },
	};
	snprintf(p, sizeof p, "%s/head.safetensors", dir);
	CHECK(write_st(p, head, 4) == 0, "write %s", p);
	struct qc_st *st = NULL;
	struct qc_err err;
	snprintf(p, sizeof p, "%s/model.safetensors", dir);
	CHECK(qc_st_open(p, &st, &err) == QC_OK, "open %s", p);
	/* first the valid twin: the index lists the model's own tensors only */
	for (int with_head = 0; st && with_head < 2; with_head++) {
		snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
		FILE *f = fopen(p, "w");
		if (!f) {
			CHECK(0, "write %s", p);
			break;
		}
		fputs("{\"metadata\": {}, \"weight_map\": {", f);
		for (uint64_t i = 0; i < st->n_tensors; i++)
			fprintf(f, "%s\"%s\": \"model.safetensors\"", i ? ", " : "", st->tensors[i].name);
		for (int i = 0; with_head && i < 4; i++)
			fprintf(f, ", \"%s\": \"head.safetensors\"", head[i].name);
		fputs("}}\n", f);
		CHECK(fclose(f) == 0, "write %s", p);
		char qb[600];
		snprintf(qb, sizeof qb, "%s/gemma_head.qb", tmp);
		snprintf(cmd, sizeof cmd, "'%s/qconvert' '%s' --target cpu -q -o '%s' 2>'%s/err.txt'", bin_dir(), dir, qb,
			 tmp);
		int rc = run(cmd);
		snprintf(p, sizeof p, "%s/err.txt", tmp);
		char *msg = check_read_file(p, NULL);
		if (!with_head)
			CHECK(rc == 0 && access(qb, F_OK) == 0, "Gemma twin, index without a head: exit %d, stderr '%s'", rc,
			      msg ? msg : "");
		else
			CHECK(rc == 1 && access(qb, F_OK) != 0 && msg && strstr(msg, "'lm_head.") &&
			      strstr(msg, "head.safetensors") && strstr(msg, "tied embeddings"),
			      "Gemma with a packed lm_head: exit %d, output %s, stderr '%s'", rc,
			      access(qb, F_OK) ? "absent" : "left", msg ? msg : "");
		free(msg);
		unlink(qb);
	}
	qc_st_close(st);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	CHECK(run(cmd) == 0, "cleanup %s", dir);
}

/* W8A8 for the FP8 tensor cores: --target sm90 stores every linear as fp8_rows (inspect
 * says so) and dump, undoing the layout, still returns the library's dequantization bit
 * for bit. */
static void check_w8a8_sm90(const struct fixture *f, const char *tmp, const struct qc_st *ref)
{
	char qb[600], cmd[2048];
	snprintf(qb, sizeof qb, "%s/%s.sm90.qb", tmp, f->name);
	snprintf(cmd, sizeof cmd, "'%s/qconvert' '%s/%s' --target sm90 -q -o '%s' 2>/dev/null", bin_dir(), DIR_HFQ,
		 f->name, qb);
	int rc = run(cmd);
	CHECK(rc == 0, "%s: qconvert --target sm90 exit %d", f->name, rc);
	if (rc)
		return;
	snprintf(cmd, sizeof cmd, "'%s/qconvert' inspect '%s' | grep -c 'f8_a8/fp8_rows' | grep -qx 15", bin_dir(), qb);
	CHECK(run(cmd) == 0, "%s: the 14 linears (+ the total line) are not all f8_a8/fp8_rows", f->name);
	for (size_t k = 0; k < sizeof cli_names / sizeof cli_names[0]; k++) {
		char hf[256], gg[128];
		snprintf(hf, sizeof hf, "model.layers.1.%s", cli_names[k].hf);
		snprintf(gg, sizeof gg, "blk.1.%s.weight", cli_names[k].gguf);
		const struct qc_st_tensor *rt = qc_st_find(ref, hf);
		float *d = rt ? dump(qb, gg, (size_t)rt->n_elems) : NULL;
		CHECK(d && memcmp(d, qc_st_data(ref, rt), (size_t)rt->n_bytes) == 0, "%s sm90: dump %s differs from %s",
		      f->name, gg, hf);
		free(d);
	}
	unlink(qb); /* the CPU backend refuses GPU layouts; tests/gpu/test_e2e runs this one */
}

static void check_cli(void)
{
	char tmp[256], qb[600], cmd[2048];
	snprintf(tmp, sizeof tmp, "/tmp/qc_test_hfq_cli_%d", (int)getpid());
	mkdir(tmp, 0755);
	snprintf(cmd, sizeof cmd, "test -x '%s/qconvert'", bin_dir());
	if (run(cmd) != 0) {
		CHECK(0, "no %s/qconvert (set QC_BIN)", bin_dir());
		return;
	}
	int n_cmp = 0, n_greedy = 0, n_tie = 0, n_gemma = 0;
	for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) {
		const struct fixture *f = &fixtures[i];
		char refp[600];
		snprintf(refp, sizeof refp, "%s/%s/ref.safetensors", DIR_HFQ, f->name);
		snprintf(qb, sizeof qb, "%s/%s.qb", tmp, f->name);
		snprintf(cmd, sizeof cmd, "'%s/qconvert' '%s/%s' --target cpu -q -o '%s' 2>/dev/null", bin_dir(), DIR_HFQ, f->name, qb);
		int rc = run(cmd);
		CHECK(rc == 0, "%s: qconvert exit %d", f->name, rc);
		struct qc_st *ref = NULL;
		struct qc_err err;
		if (rc || qc_st_open(refp, &ref, &err))
			continue;
		const bool moe = strncmp(f->name, "moe_", 4) == 0;
		for (int l = 0; l < 2; l++) {
			for (size_t k = 0; k < sizeof cli_names / sizeof cli_names[0]; k++) {
				char hf[256], gg[128];
				snprintf(hf, sizeof hf, "%s.layers.%d.%s", f->root ? f->root : "model", l, cli_names[k].hf);
				snprintf(gg, sizeof gg, "blk.%d.%s.weight", l, cli_names[k].gguf);
				const struct qc_st_tensor *rt = qc_st_find(ref, hf);
				if (!rt)
					continue; /* plain (skipped/ignored) or a MoE model's mlp */
				float *d = dump(qb, gg, (size_t)rt->n_elems);
				CHECK(d != NULL, "%s: dump %s", f->name, gg);
				if (d)
					CHECK(memcmp(d, qc_st_data(ref, rt), (size_t)rt->n_bytes) == 0 || compare_flat(d, (const float *)qc_st_data(ref, rt), rt->n_elems, f->rel_tol),
					      "%s: dump %s differs from %s", f->name, gg, hf);
				n_cmp += d != NULL;
				free(d);
			}
			/* experts: gate (w1) and up (w3) are parts of the fused w13, down (w2) a stack */
			static const struct { const char *w, *gguf; } ex[] = {
				{ "w1", "ffn_gate_exps" }, { "w3", "ffn_up_exps" }, { "w2", "ffn_down_exps" },
			};
			for (size_t k = 0; moe && k < 3; k++) {
				char hf[256], gg[128];
				snprintf(hf, sizeof hf, "model.layers.%d.block_sparse_moe.experts.0.%s", l, ex[k].w);
				snprintf(gg, sizeof gg, "blk.%d.%s.weight", l, ex[k].gguf);
				const struct qc_st_tensor *rt = qc_st_find(ref, hf);
				if (!rt)
					continue;
				float *d = dump(qb, gg, 4 * (size_t)rt->n_elems);
				CHECK(d != NULL, "%s: dump %s", f->name, gg);
				for (int e = 0; d && e < 4; e++) {
					snprintf(hf, sizeof hf, "model.layers.%d.block_sparse_moe.experts.%d.%s", l, e, ex[k].w);
					const struct qc_st_tensor *re = qc_st_find(ref, hf);
					CHECK(re && memcmp(d + (size_t)e * rt->n_elems, qc_st_data(ref, re), (size_t)rt->n_bytes) == 0,
					      "%s: %s expert %d differs from %s", f->name, gg, e, hf);
				}
				n_cmp += d != NULL;
				free(d);
			}
		}
		if (f->root)
			check_gemma(f->name, f->root, qb, &n_gemma);
		check_greedy(f->name, qb, ref, &n_greedy, &n_tie);
		if (strcmp(f->q_type, "f8_a8") == 0)
			check_w8a8_sm90(f, tmp, ref);
		qc_st_close(ref);
		unlink(qb);
	}
	CHECK(n_cmp >= 150, "only %d tensors compared through qconvert dump", n_cmp);
	/* 3 Gemma 2 fixtures x 9 norms, 4 Gemma 3 fixtures x 13 */
	CHECK(n_gemma == 3 * 9 + 4 * 13, "%d Gemma norms compared through qconvert dump", n_gemma);
	/* all prompts but the near ties must reproduce transformers' ids */
	CHECK(n_greedy + n_tie == 2 * (int)(sizeof fixtures / sizeof fixtures[0]) && n_tie <= 2,
	      "greedy: %d prompts identical, %d stopped at a near tie", n_greedy, n_tie);
	printf("test_hf_quant: greedy ids identical to transformers for %d prompts, %d stopped at a near tie\n", n_greedy,
	       n_tie);

	/* bad input at the CLI: exit 1, message on stderr, no output left behind */
	snprintf(cmd, sizeof cmd,
		 "rm -rf '%s/bad' && mkdir -p '%s/bad' && cp '%s/gptq_b4_g32_sym/model.safetensors' '%s/bad/' && "
		 "sed 's/\"quant_method\": \"gptq\"/\"quant_method\": \"hqq\"/' '%s/gptq_b4_g32_sym/config.json' > '%s/bad/config.json'",
		 tmp, tmp, DIR_HFQ, tmp, DIR_HFQ, tmp);
	CHECK(run(cmd) == 0, "%s", cmd);
	snprintf(qb, sizeof qb, "%s/bad.qb", tmp);
	snprintf(cmd, sizeof cmd, "'%s/qconvert' '%s/bad' --target cpu -q -o '%s' 2>'%s/err.txt'", bin_dir(), tmp, qb, tmp);
	int rc = run(cmd);
	snprintf(cmd, sizeof cmd, "%s/err.txt", tmp);
	char *msg = check_read_file(cmd, NULL);
	CHECK(rc == 1 && access(qb, F_OK) != 0 && msg && strstr(msg, "config.json") && strstr(msg, "hqq"),
	      "unknown quant_method at the CLI: exit %d, output %s, stderr '%s'", rc, access(qb, F_OK) ? "absent" : "left",
	      msg ? msg : "");
	free(msg);
	/* a module whose scales are missing: the reference writer's file with one tensor renamed */
	snprintf(cmd, sizeof cmd,
		 "cp '%s/gptq_b4_g32_sym/config.json' '%s/bad/config.json' && "
		 "sed 's/model.layers.1.mlp.up_proj.scales/model.layers.1.mlp.up_proj.scalex/' "
		 "'%s/gptq_b4_g32_sym/model.safetensors' > '%s/bad/model.safetensors'",
		 DIR_HFQ, tmp, DIR_HFQ, tmp);
	CHECK(run(cmd) == 0, "%s", cmd);
	snprintf(cmd, sizeof cmd, "'%s/qconvert' '%s/bad' --target cpu -q -o '%s' 2>'%s/err.txt'", bin_dir(), tmp, qb, tmp);
	rc = run(cmd);
	snprintf(cmd, sizeof cmd, "%s/err.txt", tmp);
	msg = check_read_file(cmd, NULL);
	CHECK(rc == 1 && access(qb, F_OK) != 0 && msg && strstr(msg, "model.layers.1.mlp.up_proj.scales"),
	      "missing scales at the CLI: exit %d, stderr '%s'", rc, msg ? msg : "");
	free(msg);
	check_gemma_packed_head(tmp);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
	CHECK(run(cmd) == 0, "cleanup");
}

int main(void)
{
	for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++)
		check_fixture(&fixtures[i]);
	const enum qc_type hf_types[] = { QC_TYPE_HQ4, QC_TYPE_HQ8, QC_TYPE_BNB_NF4, QC_TYPE_BNB_FP4,
					  QC_TYPE_F8E4M3, QC_TYPE_NVFP4, QC_TYPE_F8A8 };
	for (size_t i = 0; i < sizeof hf_types / sizeof hf_types[0]; i++)
		CHECK(exact_seen[hf_types[i]] > 0, "%s never matched a library bit for bit", qc_types[hf_types[i]].name);
	check_pairs();
	check_rules();
	check_bad_inputs();
	check_cli();
	return check_report("test_hf_quant");
}
