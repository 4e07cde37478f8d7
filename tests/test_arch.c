/* test_arch.c — formats/arch.h's table against the runtime, inspect and convert.
 *
 * The table says what each architecture needs; QC_ARCH_RUNTIME_FEATURES says what
 * the engine implements. Held here to what the engine really does: every arch that
 * should run (a list written here from the brief and llama.cpp, not read from the
 * table) opens through qc_model_open from an mkgguf model, and its features are
 * its row's; every other arch is refused by qc_model_open naming what it lacks,
 * which must include the llama.cpp facts written below (gemma2's soft-caps and
 * window, falcon's fused qkv and parallel block, ...). Then inspect's JSON for the
 * stories fixture and for a copy whose general.architecture (and "<arch>." keys)
 * say gemma2, and the convert-time note: present for gemma2, absent for llama and
 * with -q. Phi-3: inspect and convert (no note: both backends run it) for mkgguf
 * models with and without LongRoPE tables and window, llama.cpp's windows for phi3
 * files without the key, and dump of its fused tensors equal to the GGUF's bytes.
 * Gemma 3: inspect's features and window pattern, and the local layers' RoPE base
 * kept when the window cuts nothing. Both backends run gemma2, gemma3 and phi3;
 * the per-architecture extras still count for their own architecture only, on
 * either backend (a qwen3 with a window is refused by both).
 * Expected features come from llama.cpp's build_* graphs, never from qconvert's
 * output.
 */
#include <cjson/cJSON.h>

#include "arch.h"
#include "gguf_walk.h"
#include "inspect.h"
#include "model.h"

static const char *bin_dir(void)
{
	const char *b = getenv("QC_BIN");
	return b && *b ? b : "build/bin";
}

static char tmpdir[] = "/tmp/qc-test-arch-XXXXXX";

/* mkgguf args -> tmpdir/name.gguf -> tmpdir/name.qb; false (counted) on failure. */
static bool make_bundle(const char *name, const char *const *args, char *qb, size_t len)
{
	char gguf[256], errp[256], mk[1100];
	snprintf(gguf, sizeof gguf, "%s/%s.gguf", tmpdir, name);
	snprintf(qb, len, "%s/%s.qb", tmpdir, name);
	snprintf(errp, sizeof errp, "%s/%s.err", tmpdir, name);
	snprintf(mk, sizeof mk, "%s/mkgguf", bin_dir());
	const char *a[16] = { "--preset", "tiny", "--threads", "1", "-o", gguf };
	int n = 6;
	for (int i = 0; args[i] && n < 15; i++)
		a[n++] = args[i];
	a[n] = NULL;
	int rc = check_spawn(mk, a, errp);
	CHECK(rc == 0, "%s: mkgguf exit %d (see %s)", name, rc, errp);
	if (rc)
		return false;
	const char *c[] = { gguf, "--target", "cpu", "-q", "-o", qb, NULL };
	rc = run_cli(c, errp);
	CHECK(rc == 0, "%s: qconvert exit %d", name, rc);
	return rc == 0;
}

/* The archs that run: the brief's list (llama.cpp names; mistral and mixtral are
 * written as llama). Each with the mkgguf flags that make one. */
static const struct {
	const char *row, *args[10];
} runs[] = {
	{"llama", {"--arch", "llama", NULL}},
	{"mistral", {"--arch", "llama", NULL}},
	{"mixtral", {"--arch", "mixtral", "--n-expert", "4", "--n-expert-used", "2", NULL}},
	{"qwen2", {"--arch", "qwen2", NULL}},
	{"qwen2moe", {"--arch", "qwen2moe", "--n-expert", "4", "--n-expert-used", "2", "--n-ff-shexp", "128", NULL}},
	{"qwen3", {"--arch", "qwen3", NULL}},
	{"qwen3moe", {"--arch", "qwen3moe", "--n-expert", "4", "--n-expert-used", "2", NULL}},
	{"gemma2", {"--arch", "gemma2", "--sliding-window", "64", NULL}},
	{"phi3", {"--arch", "phi3", "--rope-scaling", "longrope", "--rope-orig-ctx", "64", "--sliding-window", "64", NULL}},
	{"gemma3", {"--arch", "gemma3", "--sliding-window", "64", NULL}},
};

static const struct qc_arch *row_named(const char *name)
{
	for (size_t i = 0; i < qc_n_archs; i++)
		if (!strcmp(qc_archs[i].name, name))
			return &qc_archs[i];
	return NULL;
}

static void supported_open(char *llama_qb, size_t len)
{
	for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
		const struct qc_arch *row = row_named(runs[i].row);
		CHECK(row && !(row->feats & ~QC_ARCH_RUNTIME_FEATURES), "%s: its row should need only implemented features",
		      runs[i].row);
		char qb[256];
		if (!make_bundle(runs[i].row, runs[i].args, qb, sizeof qb))
			continue;
		if (!strcmp(runs[i].row, "llama"))
			snprintf(llama_qb, len, "%s", qb);
		struct qc_model *m = NULL;
		struct qc_err err = {0};
		int rc = qc_model_open(qb, &m, &err);
		CHECK(rc == QC_OK, "%s: qc_model_open: %s", runs[i].row, err.msg);
		if (m && row) {
			struct qc_arch_desc d;
			qc_arch_describe(m->bundle->manifest, &d);
			/* mkgguf ties nothing: the file's features are exactly the row's, less
			 * an optional row's MoE bits for a dense file (llama without experts) */
			uint64_t want = row->feats;
			if (row->experts == QC_EXPERTS_OPTIONAL)
				want &= ~(QC_AF(MOE) | QC_AF(MOE_RENORM) | QC_AF(MOE_SHARED));
			CHECK(d.feats == want && qc_arch_missing(&d) == 0, "%s: file features %#llx, row %#llx",
			      runs[i].row, (unsigned long long)d.feats, (unsigned long long)want);
			/* the engine's MoE rules are the row's (llama.cpp build_moe_ffn norm_w) */
			const bool renorm = !strcmp(runs[i].row, "mixtral") || !strcmp(runs[i].row, "qwen3moe");
			CHECK(m->cfg.expert_norm_w == renorm, "%s: expert_norm_w %d", runs[i].row, m->cfg.expert_norm_w);
			CHECK((m->cfg.n_ff_shexp > 0) == !strcmp(runs[i].row, "qwen2moe"), "%s: shared expert width %d",
			      runs[i].row, m->cfg.n_ff_shexp);
			/* per backend: every arch of the list runs on both (gemma2, gemma3 and
			 * phi3 on CUDA since its forward pass learned their extras) */
			struct qc_err be = {0};
			CHECK(qc_model_check_backend(m, QC_ARCH_BACKEND_CPU, &be) == QC_OK, "%s: CPU refuses: %s",
			      runs[i].row, be.msg);
			rc = qc_model_check_backend(m, QC_ARCH_BACKEND_CUDA, &be);
			CHECK(rc == QC_OK, "%s: CUDA refuses (rc %d): %s", runs[i].row, rc, be.msg);
		}
		qc_model_close(m);
	}
	/* and no other row claims to run */
	for (size_t i = 0; i < qc_n_archs; i++) {
		bool listed = false;
		for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++)
			listed = listed || !strcmp(runs[k].row, qc_archs[i].name);
		struct qc_arch_desc rd = {.arch = &qc_archs[i], .feats = qc_archs[i].feats};
		snprintf(rd.name, sizeof rd.name, "%s", qc_archs[i].stored_as ? qc_archs[i].stored_as : qc_archs[i].name);
		CHECK(listed == !qc_arch_missing(&rd), "%s: runs per the table %d, per the list %d", qc_archs[i].name,
		      !qc_arch_missing(&rd), listed);
	}
}

/* What llama.cpp's graph for each arch does that a llama/qwen engine does not
 * (llama-model.cpp build_gemma*, build_phi3, build_starcoder2, build_falcon,
 * build_gpt2, build_bert; llm_graph ffn types): each phrase must be named. */
static const struct {
	const char *arch, *want[6];
} refused[] = {
	{"gemma", {"RMSNorm (1+w)", "GELU-tanh gated FFN", "embeddings scaled by sqrt(n_embd)", NULL}},
	{"starcoder2", {"LayerNorm", "GELU FFN (not gated)", "biases on every linear layer", NULL}},
	{"falcon", {"LayerNorm", "GELU FFN (not gated)", "fused attn_qkv", "parallel attention and FFN", NULL}},
	{"gpt2", {"LayerNorm", "learned position embeddings", "fused attn_qkv", "biases on every linear layer", NULL}},
	{"bert", {"LayerNorm", "learned position embeddings", "bidirectional (encoder) attention", NULL}},
};

/* The llama bundle with its manifest edited by edit(config, metadata, arg), written
 * to tmpdir/name.qb and opened: the rc, err filled. */
static int open_edited(const uint8_t *src, const char *name, const char *arch, const char *md_key, double md_val,
		       struct qc_err *err, struct qc_arch_desc *d)
{
	cJSON *man = bundle_manifest(src);
	cJSON *cfg = cJSON_GetObjectItemCaseSensitive(man, "config");
	cJSON_ReplaceItemInObjectCaseSensitive(cfg, "architecture", cJSON_CreateString(arch));
	if (md_key)
		cJSON_AddNumberToObject(cJSON_GetObjectItemCaseSensitive(man, "metadata"), md_key, md_val);
	qc_arch_describe(man, d);
	char *json = cJSON_PrintUnformatted(man);
	struct blob out;
	bundle_with_manifest(src, json, &out);
	char path[256];
	snprintf(path, sizeof path, "%s/%s.qb", tmpdir, name);
	spit(path, out.p, out.len);
	free(json);
	blob_free(&out);
	cJSON_Delete(man);
	struct qc_model *m = NULL;
	int rc = qc_model_open(path, &m, err);
	qc_model_close(m);
	return rc;
}

static void unsupported_refused(const char *llama_qb)
{
	size_t len;
	uint8_t *src = slurp(llama_qb, &len);
	CHECK(src != NULL, "cannot read %s", llama_qb);
	if (!src)
		return;
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		struct qc_err err = {0};
		struct qc_arch_desc d;
		int rc = open_edited(src, refused[i].arch, refused[i].arch, NULL, 0, &err, &d);
		CHECK(rc == QC_EUNSUPPORTED, "%s: opened (rc %d: %s)", refused[i].arch, rc, err.msg);
		for (int k = 0; k < 6 && refused[i].want[k]; k++)
			CHECK(strstr(err.msg, refused[i].want[k]), "%s: '%s' not named in: %s", refused[i].arch,
			      refused[i].want[k], err.msg);
		/* the runtime's list is the table's (inspect and convert print that one) */
		char list[1024], want[1200];
		snprintf(want, sizeof want, "architecture '%s' not supported: missing %s", refused[i].arch,
			 qc_arch_feat_list(qc_arch_missing(&d), list, sizeof list));
		CHECK(!strcmp(err.msg, want), "%s: runtime says '%s', table '%s'", refused[i].arch, err.msg, want);
		CHECK(!strstr(err.msg, "SiLU-gated FFN") && !strstr(err.msg, "q/k/v biases"),
		      "%s: names a feature the engine has: %s", refused[i].arch, err.msg);
	}
	/* metadata refines the row: a soft-cap shorter stops a llama; a window
	 * shorter than the context (stories: 128 tokens) puts one on every layer
	 * (Mistral's, Qwen2's, as transformers), which both backends run; qwen3's
	 * window is checked against no reference: refused by both (the extras count
	 * for their own archs only, on CUDA's column too); gemma2's stated 0 turns
	 * its attention soft-cap off */
	struct qc_err err = {0};
	struct qc_arch_desc d;
	int rc = open_edited(src, "llama-softcap", "llama", "llama.attn_logit_softcapping", 50, &err, &d);
	CHECK(rc == QC_EUNSUPPORTED && strstr(err.msg, "missing attention soft-capping"), "llama + soft-cap: %d %s", rc,
	      err.msg);
	memset(&err, 0, sizeof err);
	rc = open_edited(src, "llama-swa", "llama", "llama.attention.sliding_window", 64, &err, &d);
	CHECK(rc == QC_OK && (d.feats & QC_AF(SLIDING_WINDOW)) && d.window_pattern == 1 && d.sliding_window == 64 &&
	      !qc_arch_missing(&d) && qc_arch_missing_on(&d, QC_ARCH_BACKEND_CUDA) == 0,
	      "llama + window 64: %d %s (pattern %d)", rc, err.msg, d.window_pattern);
	open_edited(src, "qwen2-swa", "qwen2", "qwen2.attention.sliding_window", 64, &err, &d);
	CHECK((d.feats & QC_AF(SLIDING_WINDOW)) && d.window_pattern == 1 && !qc_arch_missing(&d),
	      "qwen2 + window 64: missing %#llx", (unsigned long long)qc_arch_missing(&d));
	open_edited(src, "qwen3-swa", "qwen3", "qwen3.attention.sliding_window", 64, &err, &d);
	CHECK(qc_arch_missing(&d) == QC_AF(SLIDING_WINDOW) &&
		      qc_arch_missing_on(&d, QC_ARCH_BACKEND_CUDA) == QC_AF(SLIDING_WINDOW),
	      "qwen3's window is not checked against any reference: CPU %#llx, CUDA %#llx",
	      (unsigned long long)qc_arch_missing(&d), (unsigned long long)qc_arch_missing_on(&d, QC_ARCH_BACKEND_CUDA));
	memset(&err, 0, sizeof err);
	rc = open_edited(src, "llama-swa-ctx", "llama", "llama.attention.sliding_window", 4096, &err, &d);
	CHECK(rc == QC_OK, "llama + window past the context: %s", err.msg);
	/* a phi3 with neither the window key nor one of llama.cpp's defaults for it
	 * (this one: 2 layers): llama.cpp refuses to load it, so does the engine */
	memset(&err, 0, sizeof err);
	rc = open_edited(src, "phi3-nowindow", "phi3", NULL, 0, &err, &d);
	CHECK(rc == QC_EFORMAT && strstr(err.msg, "'phi3.attention.sliding_window' is not stated"), "phi3, no window: %d %s",
	      rc, err.msg);
	open_edited(src, "gemma2-nocap", "gemma2", "gemma2.attn_logit_softcapping", 0, &err, &d);
	CHECK(!(d.feats & QC_AF(ATTN_SOFTCAP)) && (d.feats & QC_AF(FINAL_SOFTCAP)),
	      "gemma2 with attention soft-cap 0: %#llx", (unsigned long long)d.feats);
	free(src);
}

/* stories260K with general.architecture arch ("gemma2" or "gemma"), every "llama."
 * key renamed to "<arch>." and one extra key <arch>.attn_logit_softcapping = 50
 * (f32), as a new GGUF at path. Built from the independent walker's offsets. */
static bool gemma_gguf(const struct fixture *f, const char *path, const char *arch)
{
	const struct walk *w = &f->w;
	struct blob b = {0};
	put(&b, f->buf, 16);
	put_le(&b, w->n_kv + 1, 8);
	for (uint64_t i = 0; i < w->n_kv; i++) {
		const struct walk_kv *kv = &w->kv[i];
		const uint64_t end = i + 1 < w->n_kv ? w->kv[i + 1].off : w->kv_end;
		char key[128];
		if (!strncmp(kv->key, "llama.", 6))
			snprintf(key, sizeof key, "%s.%s", arch, kv->key + 6);
		else
			snprintf(key, sizeof key, "%s", kv->key);
		put_str(&b, key, strlen(key));
		if (!strcmp(kv->key, "general.architecture")) {
			put_le(&b, 8, 4); /* GGUF_TYPE_STRING */
			put_str(&b, arch, strlen(arch));
		} else {
			put(&b, f->buf + kv->type_off, (size_t)(end - kv->type_off));
		}
	}
	char cap[64];
	snprintf(cap, sizeof cap, "%s.attn_logit_softcapping", arch);
	const float v = 50.0f;
	put_str(&b, cap, strlen(cap));
	put_le(&b, 6, 4); /* GGUF_TYPE_FLOAT32 */
	put(&b, &v, 4);
	put(&b, f->buf + w->kv_end, (size_t)(w->info_end - w->kv_end));
	put_zeros(&b, (size_t)((w->align - b.len % w->align) % w->align));
	put(&b, f->buf + w->data_off, f->len - (size_t)w->data_off);
	bool ok = spit(path, b.p, b.len);
	blob_free(&b);
	return ok;
}

static bool json_has(const cJSON *arr, const char *s)
{
	const cJSON *e;
	cJSON_ArrayForEach(e, arr)
		if (cJSON_IsString(e) && !strcmp(e->valuestring, s))
			return true;
	return false;
}

/* The report and its text form for a GGUF; NULL (counted) when it does not open. */
static cJSON *inspect(const char *path, char *text, size_t len)
{
	struct qc_gguf_model *m = NULL;
	struct qc_err err = {0};
	int rc = qc_gguf_model_open(path, &m, &err);
	CHECK(rc == QC_OK, "%s: %s", path, err.msg);
	cJSON *r = rc ? NULL : qc_inspect_gguf(m, &err);
	qc_gguf_model_close(m);
	FILE *f = fmemopen(text, len, "w");
	if (r && f)
		qc_inspect_print(r, f);
	if (f)
		fclose(f);
	return r;
}

static void inspect_and_convert(const struct fixture *st)
{
	char g2[256], text[1 << 16], errp[256], qb[256];
	snprintf(g2, sizeof g2, "%s/gemma2.gguf", tmpdir);
	CHECK(gemma_gguf(st, g2, "gemma2"), "cannot write %s", g2);

	/* stories is llama.cpp's LLM_ARCH_LLAMA: RMSNorm, SwiGLU, LLAMA_ROPE_TYPE_NORM, untied */
	cJSON *r = inspect(st->path, text, sizeof text);
	const cJSON *af = cJSON_GetObjectItemCaseSensitive(r, "architecture_features");
	const cJSON *fs = cJSON_GetObjectItemCaseSensitive(af, "features");
	CHECK(cJSON_GetArraySize(fs) == 3 && json_has(fs, "rmsnorm") && json_has(fs, "swiglu") && json_has(fs, "rope_norm"),
	      "stories: features %s", fs ? cJSON_PrintUnformatted(fs) : "absent");
	CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "runs")) &&
		      cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "missing")) == 0,
	      "stories: should run");
	CHECK(strstr(text, "\narchitecture features: RMSNorm, SiLU-gated FFN, RoPE (adjacent pairs)\nruns:          yes\n"),
	      "stories: text report lacks the features/runs lines:\n%.400s", text);
	cJSON_Delete(r);

	r = inspect(g2, text, sizeof text);
	af = cJSON_GetObjectItemCaseSensitive(r, "architecture_features");
	fs = cJSON_GetObjectItemCaseSensitive(af, "features");
	const cJSON *ms = cJSON_GetObjectItemCaseSensitive(r, "missing");
	CHECK(json_has(fs, "rmsnorm_1p") && json_has(fs, "geglu_tanh") && json_has(fs, "attn_softcap") &&
		      json_has(fs, "sliding_window") && !json_has(fs, "rmsnorm") && !json_has(fs, "swiglu"),
	      "gemma2: features %s", fs ? cJSON_PrintUnformatted(fs) : "absent");
	const cJSON *cap = cJSON_GetObjectItemCaseSensitive(af, "attn_softcap");
	CHECK(cJSON_IsNumber(cap) && cap->valuedouble == 50.0, "gemma2: attn_softcap should be the file's 50");
	CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "runs")) && cJSON_GetArraySize(ms) == 0,
	      "gemma2 (runs on both backends): runs/missing %s", ms ? cJSON_PrintUnformatted(ms) : "absent");
	CHECK(strstr(text, "\nruns:          yes\n") && strstr(text, "attention soft-capping") &&
		      strstr(text, "; soft-cap attention 50,") && strstr(text, " on 1 of every 2 layers"),
	      "gemma2: text report:\n%.600s", text);
	cJSON_Delete(r);

	/* convert: no note for gemma2 (both backends run it), from a GGUF or a
	   Hugging Face folder; a gemma (llama.cpp's Gemma 1 graph, which no backend
	   runs) gets one, naming the file and what is missing; none with -q, none
	   for llama */
	snprintf(errp, sizeof errp, "%s/conv.err", tmpdir);
	snprintf(qb, sizeof qb, "%s/g2.qb", tmpdir);
	const char *a1[] = { g2, "--target", "cpu", "-o", qb, NULL };
	int rc = run_cli(a1, errp);
	char *e = check_read_file(errp, NULL);
	CHECK(rc == 0 && e && !strstr(e, "does not run"), "gemma2 convert (exit %d): %s", rc, e ? e : "");
	free(e);
	unlink(qb);
	const char *hf = "tests/data/hf/gemma2";
	const char *ah[] = { hf, "--target", "cpu", "-o", qb, NULL };
	rc = run_cli(ah, errp);
	e = check_read_file(errp, NULL);
	CHECK(rc == 0 && e && !strstr(e, "does not run"), "HF gemma2 convert (exit %d): %s", rc, e ? e : "");
	free(e);
	unlink(qb);
	char g1[256];
	snprintf(g1, sizeof g1, "%s/gemma1.gguf", tmpdir);
	CHECK(gemma_gguf(st, g1, "gemma"), "cannot write %s", g1);
	const char *a0[] = { g1, "--target", "cpu", "-o", qb, NULL };
	rc = run_cli(a0, errp);
	e = check_read_file(errp, NULL);
	const char *want = "note: architecture 'gemma' does not run in this qrun/qserve yet: missing RMSNorm (1+w), ";
	const char *hit = e ? strstr(e, want) : NULL;
	CHECK(rc == 0 && hit && !strstr(hit + 1, "note: architecture") && strstr(e, "GELU-tanh gated FFN") &&
		      !strncmp(e, g1, strlen(g1)),
	      "gemma convert (exit %d): the note should start with the model's path: %s", rc, e ? e : "");
	free(e);
	unlink(qb);
	const char *a2[] = { g2, "--target", "cpu", "-q", "-o", qb, NULL };
	rc = run_cli(a2, errp);
	e = check_read_file(errp, NULL);
	CHECK(rc == 0 && e && !strstr(e, "does not run"), "gemma2 -q: exit %d, stderr %s", rc, e ? e : "");
	free(e);
	unlink(qb);
	snprintf(qb, sizeof qb, "%s/st.qb", tmpdir);
	const char *a3[] = { st->path, "--target", "cpu", "-o", qb, NULL };
	rc = run_cli(a3, errp);
	e = check_read_file(errp, NULL);
	CHECK(rc == 0 && e && !strstr(e, "does not run") && strstr(e, "wrote"), "llama: exit %d, stderr %s", rc,
	      e ? e : "");
	free(e);
}

/* The inspect report of an mkgguf model (tmpdir/name.gguf from args), its text
 * into text; NULL (counted) on failure. */
static cJSON *mk_inspect(const char *name, const char *const *args, char *gguf, size_t len, char *text, size_t tlen)
{
	char errp[256], mk[256];
	const char *a[16] = { "--preset", "tiny", "-o", gguf }; /* check_spawn passes 14 */
	int n = 4;
	snprintf(gguf, len, "%s/%s.gguf", tmpdir, name);
	snprintf(errp, sizeof errp, "%s/%s.err", tmpdir, name);
	snprintf(mk, sizeof mk, "%s/mkgguf", bin_dir());
	for (int i = 0; args[i] && n < 15; i++)
		a[n++] = args[i];
	a[n] = NULL;
	int rc = check_spawn(mk, a, errp);
	CHECK(rc == 0, "%s: mkgguf exit %d", name, rc);
	return rc ? NULL : inspect(gguf, text, tlen);
}

/* `qconvert dump` of tensor `name` in bundle qb: the GGUF's own bytes (f32). */
static void dump_equals_gguf(const char *qb, const struct qc_gguf_model *g, const char *name)
{
	char out[256], errp[256];
	snprintf(out, sizeof out, "%s/dump.f32", tmpdir);
	snprintf(errp, sizeof errp, "%s/dump.err", tmpdir);
	const char *a[] = { "dump", qb, name, "-o", out, NULL };
	int rc = run_cli(a, errp);
	size_t n = 0;
	uint8_t *got = rc ? NULL : slurp(out, &n);
	const struct qc_gguf_tensor *t = qc_gguf_model_find(g, name);
	CHECK(got && t && t->type == QC_TYPE_F32 && n == t->n_bytes && !memcmp(got, qc_gguf_model_data(g, t), n),
	      "dump %s: exit %d, %zu bytes, not the GGUF's", name, rc, n);
	free(got);
	unlink(out);
}

/* Phi-3 from mkgguf (llama.cpp's names and keys): with LongRoPE tables and a
 * window shorter than the context, inspect lists both (llama.cpp build_phi3:
 * the window on every layer), it runs (on both backends), and converting it notes
 * nothing; without tables and with Phi-3-mini-4k's window 2047 past this
 * context, neither is listed. The bundle keeps the fused tensors: dump returns
 * each as the GGUF holds it. */
static void phi3_inspect_dump(void)
{
	char gguf[256], text[1 << 16], qb[256], errp[256];
	const char *lr[] = { "--arch", "phi3", "--rope-scaling", "longrope", "--rope-orig-ctx", "64", "--sliding-window",
			     "64", "--type", "f32", NULL };
	cJSON *r = mk_inspect("phi3-lr", lr, gguf, sizeof gguf, text, sizeof text);
	const cJSON *af = cJSON_GetObjectItemCaseSensitive(r, "architecture_features");
	const cJSON *fs = cJSON_GetObjectItemCaseSensitive(af, "features");
	CHECK(json_has(fs, "rmsnorm") && json_has(fs, "swiglu") && json_has(fs, "rope_neox") && json_has(fs, "longrope") &&
		      json_has(fs, "fused_qkv") && json_has(fs, "fused_gate_up") && json_has(fs, "sliding_window") &&
		      cJSON_GetArraySize(fs) == 7,
	      "phi3 + longrope: features %s", fs ? cJSON_PrintUnformatted(fs) : "absent");
	CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "runs")) &&
		      strstr(text, "LongRoPE, sliding-window attention, fused attn_qkv, fused gate|up FFN; window 64 tokens on every layer\nruns:          yes\n"),
	      "phi3 + longrope: text report:\n%.600s", text);
	cJSON_Delete(r);

	snprintf(qb, sizeof qb, "%s/phi3-lr.qb", tmpdir);
	snprintf(errp, sizeof errp, "%s/phi3-conv.err", tmpdir);
	const char *c[] = { gguf, "--target", "cpu", "-o", qb, NULL };
	int rc = run_cli(c, errp);
	char *e = check_read_file(errp, NULL);
	CHECK(rc == 0 && e && !strstr(e, "does not run"), "phi3 convert: exit %d, stderr %s", rc, e ? e : "");
	free(e);
	struct qc_gguf_model *g = NULL;
	struct qc_err err = {0};
	CHECK(qc_gguf_model_open(gguf, &g, &err) == QC_OK, "%s: %s", gguf, err.msg);
	static const char *const fused[] = { "blk.1.attn_qkv.weight", "blk.0.ffn_up.weight", "rope_factors_long.weight",
					     "rope_factors_short.weight" };
	for (size_t i = 0; g && rc == 0 && i < sizeof fused / sizeof fused[0]; i++)
		dump_equals_gguf(qb, g, fused[i]);
	qc_gguf_model_close(g);

	const char *plain[] = { "--arch", "phi3", NULL };
	r = mk_inspect("phi3-plain", plain, gguf, sizeof gguf, text, sizeof text);
	fs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "architecture_features"), "features");
	CHECK(json_has(fs, "fused_qkv") && json_has(fs, "fused_gate_up") && !json_has(fs, "longrope") &&
		      !json_has(fs, "sliding_window") && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "runs")),
	      "plain phi3: features %s", fs ? cJSON_PrintUnformatted(fs) : "absent");
	cJSON_Delete(r);
}

/* Gemma 3 from mkgguf (llama.cpp's gemma3 names and keys): inspect lists q/k norm,
 * the window on 5 of every 6 layers (llama.cpp's and transformers' pattern) and the
 * local layers' RoPE base, and says it runs; with a window past the context the
 * window goes, but the local layers keep their own base (transformers and llama.cpp
 * choose it by the layer's place in the pattern, not by the window's length). */
static void gemma3_inspect(void)
{
	char gguf[256], text[1 << 16];
	const char *win[] = { "--arch", "gemma3", "--sliding-window", "64", "--type", "f32", NULL };
	cJSON *r = mk_inspect("gemma3-win", win, gguf, sizeof gguf, text, sizeof text);
	const cJSON *fs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "architecture_features"),
							   "features");
	CHECK(json_has(fs, "rmsnorm_1p") && json_has(fs, "post_norm") && json_has(fs, "geglu_tanh") &&
		      json_has(fs, "rope_neox") && json_has(fs, "qk_norm") && json_has(fs, "sliding_window") &&
		      json_has(fs, "embd_scale") && json_has(fs, "tied_embeddings") && json_has(fs, "rope_local") &&
		      !json_has(fs, "attn_softcap") && !json_has(fs, "final_softcap") && cJSON_GetArraySize(fs) == 9,
	      "gemma3: features %s", fs ? cJSON_PrintUnformatted(fs) : "absent");
	CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "runs")) &&
		      strstr(text, "RoPE base 10000 on sliding-window layers; window 64 tokens on 5 of every 6 layers\n"
				   "runs:          yes\n"),
	      "gemma3: text report:\n%.600s", text);
	cJSON_Delete(r);

	const char *past[] = { "--arch", "gemma3", "--sliding-window", "4096", NULL };
	char qb[256];
	struct qc_model *m = NULL;
	struct qc_err err = {0};
	if (!make_bundle("gemma3-past", past, qb, sizeof qb))
		return;
	CHECK(qc_model_open(qb, &m, &err) == QC_OK, "gemma3-past: %s", err.msg);
	struct qc_arch_desc d = {0};
	if (m)
		qc_arch_describe(m->bundle->manifest, &d);
	CHECK(!(d.feats & QC_AF(SLIDING_WINDOW)) && (d.feats & QC_AF(ROPE_LOCAL)),
	      "gemma3, window past the context: features %#llx", (unsigned long long)d.feats);
	CHECK(!m || (m->cfg.sliding_window == 0 && qc_model_layer_local_rope(&m->cfg, 0) &&
		     !qc_model_layer_local_rope(&m->cfg, 5) && m->cfg.rope_local_base == 10000.0f),
	      "gemma3-past: window %d, layer 0 local %d, layer 5 local %d", m ? m->cfg.sliding_window : -1,
	      m && qc_model_layer_local_rope(&m->cfg, 0), m && qc_model_layer_local_rope(&m->cfg, 5));
	qc_model_close(m);
}

/* llama.cpp c392e50 load_hparams (LLM_ARCH_PHI3) for files without the window
 * key: 32 or 40 layers at a 4096 context get 2047; Phi-3-mini-128k (32 layers,
 * 32 K/V heads, 131072) 262144, which never cuts that context. */
static void phi3_window_defaults(void)
{
	static const struct {
		const char *cfg;
		int64_t window;
		bool on;
	} cases[] = {
		{"{\"architecture\":\"phi3\",\"n_layer\":32,\"n_head_kv\":32,\"n_ctx_train\":4096}", 2047, true},
		{"{\"architecture\":\"phi3\",\"n_layer\":40,\"n_head_kv\":10,\"n_ctx_train\":4096}", 2047, true},
		{"{\"architecture\":\"phi3\",\"n_layer\":32,\"n_head_kv\":32,\"n_ctx_train\":131072}", 262144, false},
		{"{\"architecture\":\"phi3\",\"n_layer\":32,\"n_head_kv\":8,\"n_ctx_train\":131072}", 0, true},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char j[512];
		snprintf(j, sizeof j, "{\"config\":%s,\"metadata\":{}}", cases[i].cfg);
		cJSON *man = cJSON_Parse(j);
		struct qc_arch_desc d;
		qc_arch_describe(man, &d);
		CHECK(d.sliding_window == cases[i].window && ((d.feats & QC_AF(SLIDING_WINDOW)) != 0) == cases[i].on,
		      "%s: window %lld, feature %d", cases[i].cfg, (long long)d.sliding_window,
		      (d.feats & QC_AF(SLIDING_WINDOW)) != 0);
		cJSON_Delete(man);
	}
}

/* The checks above must be able to fail: a describe that ignored metadata, or a
 * list that dropped a feature, would be caught. */
static void self_check(void)
{
	cJSON *man = cJSON_Parse("{\"config\":{\"architecture\":\"llama\",\"n_expert\":8,\"n_expert_used\":2},"
				 "\"metadata\":{\"llama.final_logit_softcapping\":30}}");
	struct qc_arch_desc d;
	qc_arch_describe(man, &d);
	CHECK((d.feats & QC_AF(MOE)) && (d.feats & QC_AF(FINAL_SOFTCAP)) && d.n_expert == 8 && d.final_softcap == 30,
	      "describe ignores the manifest: %#llx", (unsigned long long)d.feats);
	CHECK(qc_arch_missing(&d) == QC_AF(FINAL_SOFTCAP), "missing %#llx", (unsigned long long)qc_arch_missing(&d));
	char buf[16];
	qc_arch_feat_list(QC_AF(RMSNORM) | QC_AF(LAYERNORM), buf, sizeof buf);
	CHECK(strlen(buf) < sizeof buf, "feat_list overran its buffer");
	cJSON_Delete(man);
}

int main(void)
{
	self_check();
	phi3_window_defaults();
	if (!check_have_fixtures("test_arch"))
		return check_report("test_arch");
	find_bin();
	struct fixture st;
	CHECK(fixture_load(&st, "gguf", "stories260K.gguf"), "cannot read and walk stories260K.gguf");
	CHECK(mkdtemp(tmpdir) != NULL, "mkdtemp");
	char llama_qb[256] = "";
	supported_open(llama_qb, sizeof llama_qb);
	if (llama_qb[0])
		unsupported_refused(llama_qb);
	if (st.buf)
		inspect_and_convert(&st);
	phi3_inspect_dump();
	gemma3_inspect();
	fixture_free(&st);
	rm_tree_files(tmpdir);
	return check_report("test_arch");
}
