/* test_hf.c — Hugging Face folders/archives in, bundles out, checked against
 * transformers and llama.cpp (docs/hf.md, "Tests"). Models (tests/data/hf/,
 * tests/gen/make_hf_models.py): every bundle tensor dumps back bit-exactly to the
 * safetensors (decoded here; Q/K through llama.cpp's permute re-derived in hf_util.h),
 * every HF tensor is used, output is byte-identical on a rerun, and the CPU engine
 * (plain float activations) gives transformers' greedy ids up to the first step with a
 * margin below MARGIN_MIN; the normalized GGUF equals llama.cpp's own converter's output
 * (tensors bit-equal, <arch>.* keys). Each checker also gets a wrong expectation that
 * must fail. Bad input: test_hf_bad.c; quantized MoE: test_hf_quant_moe.c; tokenizers:
 * test_hf_tokenizer.c.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <xxhash.h>

#include "bundle.h"
#include "check.h"
#include "engine.h"
#include "gguf.h"
#include "gguf_write.h"
#include "hf_convert.h"
#include "hf_source.h"
#include "hf_util.h"
#include "vocab.h"

#define N_GEN 16
#define N_PROMPTS 4
/* Both sides compute in float32 from the same weights, except that the engine's
 * K/V cache stores binary16 like llama.cpp's (relative rounding 2^-11 on every K
 * and V element); that, not summation order, sets the logit differences: measured
 * at most 3.6e-3 on the first step of these models, 8.5e-3 for qwen2 whose YaRN
 * attention factor (1.14 on both q and k) amplifies it (printed per model), so
 * TOL_LOGIT = 1.5e-2. Each of the two top logits may move by that much, so a
 * transformers margin above 2 * TOL_LOGIT is a genuine preference and the ids must
 * agree up to the first step with a smaller margin. */
#define TOL_LOGIT 1.5e-2
#define MARGIN_MIN (2 * TOL_LOGIT)

static const struct model models[] = {
	{ "llama", "llama", true, 4, 2, 16, 0, false, true, true },
	{ "llama-tied", "llama-tied", true, 4, 4, 16, 0, true, true, true },
	{ "mistral", "mistral", true, 4, 1, 24, 0, false, true, true },
	{ "qwen2", "qwen2", false, 4, 2, 16, 0, true, true, true },
	{ "qwen3", "qwen3", false, 4, 2, 32, 0, false, true, true },
	{ "mixtral.tar.gz", "mixtral", true, 4, 2, 16, 1, false, true, true },
	{ "qwen2-moe", "qwen2-moe", false, 4, 2, 16, 2, false, true, true },
	{ "qwen3-moe", "qwen3-moe", false, 4, 2, 16, 2, false, true, true },
	/* q/k/v/o biases (permuted q/k biases): the runtime has no attn_output.bias yet,
	 * so only conversion and dumps are checked */
	{ "llama-bias", "llama-bias", true, 4, 2, 16, 0, true, false, false },
};

/* llama.cpp's rope_freqs.weight for Llama 3 RoPE scaling: per rotated pair the ratio
 * of the unscaled to the scaled inverse frequency, from transformers'
 * _compute_llama3_parameters (re-derived here in double). */
static void check_rope_freqs(const struct model *m, const struct qc_hf_source *src, const struct qc_bundle *b)
{
	const cJSON *rs = cJSON_GetObjectItem(src->config, "rope_scaling");
	double base = cJSON_GetObjectItem(src->config, "rope_theta")->valuedouble;
	double factor = cJSON_GetObjectItem(rs, "factor")->valuedouble;
	double lo = cJSON_GetObjectItem(rs, "low_freq_factor")->valuedouble;
	double hi = cJSON_GetObjectItem(rs, "high_freq_factor")->valuedouble;
	double old = cJSON_GetObjectItem(rs, "original_max_position_embeddings")->valuedouble;
	size_t n = 0;
	float *v = dump(b, "rope_freqs.weight", &n);
	CHECK(v && n == (size_t)m->head_dim / 2, "%s: rope_freqs.weight has %zu values", m->name, n);
	int n_scaled = 0;
	for (size_t i = 0; v && i < n; i++) {
		double inv = pow(base, -2.0 * (double)i / m->head_dim), wl = 2 * M_PI / inv, inv_new;
		if (wl < old / hi) {
			inv_new = inv;
		} else if (wl > old / lo) {
			inv_new = inv / factor;
		} else {
			double smooth = (old / wl - lo) / (hi - lo);
			inv_new = (1 - smooth) * inv / factor + smooth * inv;
		}
		double want = inv / inv_new;
		n_scaled += want > 1.0;
		CHECK(fabs(v[i] - want) <= 1e-5 * want, "%s: rope_freqs[%zu] = %.7g, %.7g expected", m->name, i, v[i], want);
	}
	CHECK(n_scaled > 0, "%s: the fixture's llama3 scaling should scale some frequencies", m->name);
	free(v);
}

/* Compare one GGUF tensor (or one part of a fused one) with its HF source(s). */
static uint64_t check_tensor(const struct model *m, const struct qc_hf_source *src, const struct qc_bundle *b,
			     const char *name, int64_t ne0, int64_t ne1, int64_t n_mat, bool *used, bool skip_perm)
{
	size_t n = 0;
	float *v = dump(b, name, &n);
	CHECK(v && n == (size_t)(ne0 * ne1 * n_mat), "%s %s: dump of %zu values, %lld expected", m->name, name, n,
	      (long long)(ne0 * ne1 * n_mat));
	if (!v || n != (size_t)(ne0 * ne1 * n_mat)) {
		free(v);
		return UINT64_MAX;
	}
	int64_t heads = 0;
	if (m->permute && !skip_perm && (strstr(name, "attn_q.") || strstr(name, "attn_k.")))
		heads = strstr(name, "attn_q.") ? m->n_head : m->n_head_kv;
	uint64_t bad = 0, first = 0;
	for (int64_t e = 0; e < n_mat; e++) {
		char hn[160];
		CHECK(hf_name(m, name, (int)e, hn, sizeof hn), "%s: no HF name for %s", m->name, name);
		const struct qc_hf_tensor *t = qc_hf_find(src, hn);
		CHECK(t != NULL, "%s: %s (for %s) not in the checkpoint", m->name, hn, name);
		if (!t || t->t->n_elems != (uint64_t)(ne0 * ne1))
			continue;
		used[t - src->tensors] = true;
		for (int64_t r = 0; r < ne1; r++) {
			int64_t hr = heads && ne1 > 1 ? unpermute(r, heads, ne1) : r;
			for (int64_t c = 0; c < ne0; c++) {
				/* a q/k bias is one row whose elements are the permuted rows */
				int64_t hc = heads && ne1 == 1 ? unpermute(c, heads, ne0) : c;
				float want = st_value(t, (uint64_t)(hr * ne0 + hc));
				float got = v[(e * ne1 + r) * ne0 + c];
				if (memcmp(&want, &got, 4) != 0 && !bad++)
					first = (uint64_t)((e * ne1 + r) * ne0 + c);
			}
		}
	}
	CHECK(bad == 0 || skip_perm, "%s %s: %llu values differ from the safetensors (first at %llu)", m->name, name,
	      (unsigned long long)bad, (unsigned long long)first);
	free(v);
	return bad;
}

/* ---- against llama.cpp's own converter --------------------------------------------- */

/* tests/data/hf/<model>.llamacpp.json (tests/gen/make_hf_llamacpp_ref.py): what
 * convert_hf_to_gguf.py of llama.cpp c392e509 writes for the model (vocabulary step
 * off): per tensor its ne and the XXH3 of its values as float32, and the <arch>.*
 * keys. Our normalized GGUF (qc_hf_to_gguf, before the bundle) must hold the same
 * tensors with the same values, and every one of those keys with the same value.
 * One deliberate difference: Llama 3 rope_freqs, where llama.cpp reads the original
 * context from a top-level key configs do not have (docs/hf.md); it must differ. */
static void check_llamacpp(const struct model *m, const char *in)
{
	char p[300], g[600];
	snprintf(p, sizeof p, "tests/data/hf/%s.llamacpp.json", m->ref);
	char *txt = check_read_file(p, NULL);
	if (!txt) {
		printf("  %s: no llama.cpp reference (architecture newer than llama.cpp c392e509)\n", m->name);
		return;
	}
	cJSON *ref = cJSON_Parse(txt);
	free(txt);
	snprintf(g, sizeof g, "%s/%s.gguf", tmpdir, m->ref);
	struct qc_err err = { 0 };
	struct qc_gguf_model *gm = NULL;
	int rc = qc_hf_to_gguf(in, g, NULL, 0, &err);
	if (!rc)
		rc = qc_gguf_model_open(g, &gm, &err);
	CHECK(rc == QC_OK && ref, "%s: normalized GGUF: %s", m->name, err.msg);
	if (rc || !ref)
		goto out;
	const cJSON *t;
	int n_ref = 0, n_same = 0;
	cJSON_ArrayForEach(t, cJSON_GetObjectItem(ref, "tensors")) {
		n_ref++;
		const struct qc_gguf_tensor *ours = qc_gguf_model_find(gm, t->string);
		CHECK(ours != NULL, "%s: llama.cpp has %s, we do not", m->name, t->string);
		if (!ours)
			continue;
		const cJSON *ne = cJSON_GetObjectItem(t, "ne");
		bool shape = cJSON_GetArraySize(ne) == (int)ours->n_dims;
		for (uint32_t d = 0; shape && d < ours->n_dims; d++)
			shape = cJSON_GetArrayItem(ne, (int)d)->valuedouble == (double)ours->ne[d];
		CHECK(shape, "%s: %s: shape differs from llama.cpp's", m->name, t->string);
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);
		rc = f ? qc_dump_gguf(gm, t->string, f, &err) : QC_ENOMEM;
		if (f)
			fclose(f);
		char hex[17];
		snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits(buf, len));
		free(buf);
		bool same = !rc && !strcmp(hex, cJSON_GetObjectItem(t, "xxh3_f32")->valuestring);
		if (!strcmp(t->string, "rope_freqs.weight"))
			CHECK(!same, "%s: rope_freqs.weight equals llama.cpp's, whose original context is 8192", m->name);
		else
			CHECK(same, "%s: %s: values differ from llama.cpp's conversion", m->name, t->string);
		n_same += same;
	}
	CHECK((uint64_t)n_ref == gm->n_tensors, "%s: %llu tensors, llama.cpp writes %d", m->name,
	      (unsigned long long)gm->n_tensors, n_ref);
	int n_kv = 0;
	cJSON_ArrayForEach(t, cJSON_GetObjectItem(ref, "kv")) {
		const struct qc_gguf_kv *kv = qc_gguf_find(gm->files[0], t->string);
		double v;
		struct qc_gguf_str str;
		bool ok = kv != NULL;
		if (ok && cJSON_IsString(t))
			ok = !qc_gguf_get_str(gm->files[0], t->string, &str, NULL) && str.len == strlen(t->valuestring) &&
			     !memcmp(str.p, t->valuestring, str.len);
		else if (ok)
			ok = qc_gguf_value_as_f64(&kv->val, &v) && (float)v == (float)t->valuedouble;
		CHECK(ok, "%s: key %s missing or not llama.cpp's value", m->name, t->string);
		n_kv++;
	}
	printf("  %s: as llama.cpp's converter: %d/%d tensors bit-equal, %d keys equal\n", m->name, n_same, n_ref, n_kv);
out:
	qc_gguf_model_close(gm);
	unlink(g);
	cJSON_Delete(ref);
}

/* ---- reference ------------------------------------------------------------------ */

struct ref {
	char text[N_PROMPTS][64];
	int32_t prompt[N_PROMPTS][32];
	int n_prompt[N_PROMPTS];
	int32_t ids[N_PROMPTS][N_GEN];
	double margin[N_PROMPTS][N_GEN];
	int32_t top_id[N_PROMPTS][5];
	double top_logit[N_PROMPTS][5];
};

static bool load_ref(const char *name, struct ref *r)
{
	char p[256];
	snprintf(p, sizeof p, "tests/data/hf/%s.reference.json", name);
	char *txt = check_read_file(p, NULL);
	cJSON *j = txt ? cJSON_Parse(txt) : NULL;
	free(txt);
	const cJSON *g = cJSON_GetObjectItem(j, "greedy");
	bool ok = cJSON_GetArraySize(g) == N_PROMPTS;
	for (int k = 0; ok && k < N_PROMPTS; k++) {
		const cJSON *e = cJSON_GetArrayItem(g, k);
		const cJSON *t = cJSON_GetObjectItem(e, "text"), *pi = cJSON_GetObjectItem(e, "prompt_ids");
		const cJSON *ids = cJSON_GetObjectItem(e, "ids"), *mg = cJSON_GetObjectItem(e, "margins");
		const cJSON *top = cJSON_GetObjectItem(e, "first_step_top5");
		ok = cJSON_IsString(t) && cJSON_GetArraySize(pi) >= 1 && cJSON_GetArraySize(pi) <= 32 &&
		     cJSON_GetArraySize(ids) == N_GEN && cJSON_GetArraySize(mg) == N_GEN && cJSON_GetArraySize(top) == 5;
		if (!ok)
			break;
		snprintf(r->text[k], sizeof r->text[k], "%s", t->valuestring);
		r->n_prompt[k] = cJSON_GetArraySize(pi);
		for (int i = 0; i < r->n_prompt[k]; i++)
			r->prompt[k][i] = (int32_t)cJSON_GetArrayItem(pi, i)->valuedouble;
		for (int i = 0; i < N_GEN; i++) {
			r->ids[k][i] = (int32_t)cJSON_GetArrayItem(ids, i)->valuedouble;
			r->margin[k][i] = cJSON_GetArrayItem(mg, i)->valuedouble;
		}
		for (int i = 0; i < 5; i++) {
			const cJSON *x = cJSON_GetArrayItem(top, i);
			r->top_id[k][i] = (int32_t)cJSON_GetObjectItem(x, "id")->valuedouble;
			r->top_logit[k][i] = cJSON_GetObjectItem(x, "logit")->valuedouble;
		}
	}
	cJSON_Delete(j);
	return ok;
}

struct first_logits {
	uint64_t id;
	const struct ref *r;
	int k;
	double max_err;
	bool seen;
};

static void on_logits(void *ctx, uint64_t id, int32_t step, const float *logits, int32_t n_vocab)
{
	struct first_logits *f = ctx;
	if (id != f->id || step != 0)
		return;
	f->seen = true;
	for (int i = 0; i < 5; i++) {
		int32_t t = f->r->top_id[f->k][i];
		double d = t >= 0 && t < n_vocab ? fabs((double)logits[t] - f->r->top_logit[f->k][i]) : INFINITY;
		f->max_err = d > f->max_err ? d : f->max_err;
	}
}

/* Greedy generation with the CPU engine; returns false when the runtime does not
 * support the architecture (only allowed for !runtime_required). */
static bool generate(const struct model *m, const char *bundle, const struct ref *r, int *n_cmp_total,
		     double *max_logit_err, bool *all_ids_equal, bool expect)
{
	struct qc_engine_opts o;
	struct first_logits fl = { .r = r };
	qc_engine_opts_init(&o);
	o.act_round = QC_ACT_ROUND_NONE;
	o.n_threads = 1;
	o.on_logits = on_logits;
	o.cb_ctx = &fl;
	*all_ids_equal = true;
	struct qc_engine *e = NULL;
	struct qc_err err = { 0 };
	int rc = qc_engine_new(bundle, &o, &e, &err);
	if (rc == QC_EUNSUPPORTED && !m->runtime_required) {
		printf("  %s: SKIP engine run: %s\n", m->name, err.msg);
		return false;
	}
	CHECK(rc == QC_OK, "%s: engine: %s", m->name, err.msg);
	if (rc)
		return false;
	for (int k = 0; k < N_PROMPTS; k++) {
		int32_t *ids = NULL;
		size_t n = 0;
		rc = qc_engine_tokenize(e, r->text[k], strlen(r->text[k]), true, &ids, &n, &err);
		bool same = rc == QC_OK && n == (size_t)r->n_prompt[k] && !memcmp(ids, r->prompt[k], n * sizeof *ids);
		CHECK(same || !expect, "%s: prompt '%s' tokenizes to %zu ids, HF gives %d (first %d vs %d)", m->name, r->text[k], n,
		      r->n_prompt[k], n ? ids[0] : -1, r->prompt[k][0]);
		free(ids);
		struct qc_engine_request q = { .prompt = r->prompt[k], .n_prompt = r->n_prompt[k], .max_tokens = N_GEN,
					       .ignore_eos = true };
		qc_sampler_params_init(&q.sampling);
		q.sampling.temperature = 0.0f;
		uint64_t id;
		fl.id = UINT64_MAX;
		fl.k = k;
		fl.seen = false;
		rc = qc_engine_add(e, &q, &id, &err);
		fl.id = id; /* the first forward runs in qc_engine_step, after this */
		while (rc == QC_OK && qc_engine_has_work(e))
			rc = qc_engine_step(e, &err);
		const int32_t *out = NULL;
		int32_t n_out = 0;
		enum qc_sched_finish fin;
		CHECK(rc == QC_OK && qc_engine_output(e, id, &out, &n_out, &fin) == QC_OK && n_out == N_GEN,
		      "%s: prompt %d: generation failed: %s", m->name, k, err.msg);
		int n_cmp = 0;
		while (n_cmp < N_GEN && r->margin[k][n_cmp] >= MARGIN_MIN)
			n_cmp++;
		int diff = -1;
		for (int i = 0; out && i < n_cmp && i < n_out && diff < 0; i++)
			if (out[i] != r->ids[k][i])
				diff = i;
		for (int i = 0; out && i < n_out && i < N_GEN; i++)
			*all_ids_equal &= out[i] == r->ids[k][i];
		CHECK(fl.seen, "%s: prompt %d: no logits seen", m->name, k);
		*max_logit_err = fl.max_err > *max_logit_err ? fl.max_err : *max_logit_err;
		CHECK(fl.max_err <= TOL_LOGIT || !expect, "%s: prompt %d: first-step top-5 logits off by %.3g", m->name, k,
		      fl.max_err);
		CHECK(diff < 0 || !expect, "%s: prompt %d: id %d at step %d, transformers %d (margin %.4f; %d steps compared)",
		      m->name, k, diff >= 0 ? out[diff] : -1, diff, r->ids[k][diff < 0 ? 0 : diff],
		      r->margin[k][diff < 0 ? 0 : diff], n_cmp);
		*n_cmp_total += n_cmp;
		qc_engine_release(e, id);
	}
	qc_engine_free(e);
	return true;
}

static void test_model(const struct model *m)
{
	char in[256], out[512], errp[512];
	snprintf(in, sizeof in, "tests/data/hf/%s", m->name);
	snprintf(out, sizeof out, "%s/%s.qb", tmpdir, m->ref);
	snprintf(errp, sizeof errp, "%s/err.txt", tmpdir);
	const char *args[] = { in, "--target", "cpu", "-o", out, "-q", NULL };
	int rc = run_cli(args, errp);
	char *msg = check_read_file(errp, NULL);
	CHECK(rc == 0 && file_exists(out), "%s: qconvert exit %d: %s", m->name, rc, msg ? msg : "");
	free(msg);
	if (rc)
		return;
	/* byte-identical output from the same input under another path (trailing slash) */
	char in2[300], out2[600];
	snprintf(in2, sizeof in2, "./%s%s", in, strstr(in, ".tar") ? "" : "/");
	snprintf(out2, sizeof out2, "%s/%s.again.qb", tmpdir, m->ref);
	const char *args2[] = { in2, "--target", "cpu", "-o", out2, "-q", NULL };
	size_t l1 = 0, l2 = 0;
	char *b1 = NULL, *b2 = NULL;
	if (run_cli(args2, errp) == 0) {
		b1 = check_read_file(out, &l1);
		b2 = check_read_file(out2, &l2);
	}
	CHECK(b1 && b2 && l1 == l2 && !memcmp(b1, b2, l1), "%s: a second conversion is not byte-identical", m->name);
	free(b1);
	free(b2);
	unlink(out2);
	struct qc_hf_source *src = NULL;
	struct qc_bundle *b = NULL;
	struct qc_err err = { 0 };
	CHECK(qc_hf_open(in, &src, &err) == QC_OK, "%s: open source: %s", m->name, err.msg);
	CHECK(qc_bundle_open(out, &b, &err) == QC_OK, "%s: open bundle: %s", m->name, err.msg);
	if (!src || !b)
		goto out;
	bool *used = calloc(src->n_tensors + 1, 1);
	int n_checked = 0;
	for (uint64_t i = 0; i < b->n_tensors; i++) {
		const struct qc_bundle_tensor *t = &b->tensors[i];
		if (t->n_parts) {
			for (int p = 0; p < t->n_parts; p++)
				check_tensor(m, src, b, t->parts[p].name, t->ne[0], t->parts[p].n_rows, t->ne[2], used, false);
			n_checked++;
			continue;
		}
		if (!strcmp(t->name, "rope_freqs.weight"))
			check_rope_freqs(m, src, b);
		else
			check_tensor(m, src, b, t->name, t->ne[0], t->ne[1], t->ne[2], used, false);
		n_checked++;
	}
	if (m->permute) { /* the checker must see an unpermuted Q/K as wrong */
		const struct qc_bundle_tensor *q = qc_bundle_find(b, "blk.0.attn_k.weight");
		CHECK(q && check_tensor(m, src, b, q->name, q->ne[0], q->ne[1], 1, used, true) > 0,
		      "%s: attn_k compared without the RoPE permutation should differ", m->name);
	}
	for (uint64_t i = 0; i < src->n_tensors; i++)
		CHECK(used[i] || (m->tied && !strcmp(src->tensors[i].name, "lm_head.weight")),
		      "%s: HF tensor %s did not reach the bundle", m->name, src->tensors[i].name);
	CHECK(m->tied == (qc_bundle_find(b, "output.weight") == NULL), "%s: output.weight presence vs tied", m->name);
	check_llamacpp(m, in);
	if (m->moe)
		CHECK(qc_bundle_find(b, "blk.0.ffn_gate_up_exps.weight") != NULL, "%s: gate/up experts not fused", m->name);
	const cJSON *s = cJSON_GetObjectItem(b->manifest, "source");
	CHECK(cJSON_IsString(cJSON_GetObjectItem(s, "format")) &&
	      !strcmp(cJSON_GetObjectItem(s, "format")->valuestring, "hf") &&
	      cJSON_GetArraySize(cJSON_GetObjectItem(s, "files")) >= 1,
	      "%s: manifest source does not describe the HF input", m->name);
	free(used);
	struct ref r;
	CHECK(load_ref(m->ref, &r), "%s: cannot read the reference", m->name);
	int n_cmp = 0;
	double lerr = 0;
	bool same;
	if (!m->engine) {
		printf("  %s: %d tensors match the safetensors (engine not run: see the table)\n", m->name, n_checked);
	} else if (generate(m, out, &r, &n_cmp, &lerr, &same, true)) {
		printf("  %s: %d tensors match the safetensors; greedy ids match transformers over %d steps, first-step logits within %.2g\n",
		       m->name, n_checked, n_cmp, lerr);
		/* the comparison must fail against another model's reference */
		struct ref wrong;
		double werr = 0;
		int wn = 0;
		/* another model with the same tokenizer: SPM (llama, mistral, mixtral) or BPE */
		bool spm = !strcmp(m->ref, "llama") || !strcmp(m->ref, "mistral") || !strcmp(m->ref, "mixtral");
		const char *other = spm ? (strcmp(m->ref, "llama") ? "llama" : "mistral")
					: (strcmp(m->ref, "qwen2") ? "qwen2" : "qwen3");
		CHECK(load_ref(other, &wrong), "reference %s", other);
		generate(m, out, &wrong, &wn, &werr, &same, false);
		CHECK(!same && werr > TOL_LOGIT, "%s: checked against another model's reference, ids/logits still agree",
		      m->name);
	} else
		printf("  %s: %d tensors match the safetensors\n", m->name, n_checked);
out:
	qc_bundle_close(b);
	qc_hf_close(src);
	unlink(out);
}

int main(void)
{
	if (!hf_test_init("qc-test-hf"))
		return 1;
	for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
		test_model(&models[i]);
	rm_rf(tmpdir);
	return check_report("test_hf");
}
