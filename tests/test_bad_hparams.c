/* test_bad_hparams.c — hyper-parameters that contradict the tensors, or are not finite
 * and positive, are refused: at convert (issue 15 #6: qconvert exits 1 naming the file
 * and the key, no output) and at load (a bundle whose manifest config was edited is
 * refused by the runtime, naming the field). The same edits with consistent values
 * convert and load, so every checker can fail. Values come from stories260K's own
 * tensors as gguf_walk.h's independent walker reads them, not from our reader.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../tests/check.h"
#include "bad_input_util.h"
#include "bundle.h"
#include "gguf.h"
#include "gguf_walk.h"
#include "model.h"

/* issue 15 #6 at convert: hyper-parameters that contradict the tensors, or are not
 * finite and positive, are refused naming the file and the key (exit 1, no output);
 * the same edits with consistent values convert. Values come from the fixture's own
 * tensors as the independent walker reads them (5 layers, ffn_down 172 wide, rows
 * of 64), not from our reader. */
static void cli_refuses_inconsistent_hparams(const char *dir, const struct fixture *st)
{
	char errp[1024], in[1100], out[1100];
	snprintf(errp, sizeof errp, "%s/stderr.txt", dir);
	const struct walk_tensor *down = walk_find_tensor(&st->w, "blk.4.ffn_down.weight");
	const struct walk_tensor *emb = walk_find_tensor(&st->w, "token_embd.weight");
	CHECK(down && emb && !walk_find_tensor(&st->w, "blk.5.attn_norm.weight") && down->ne[0] == 172 && emb->ne[0] == 64,
	      "stories260K: 5 layers, n_ff 172, n_embd 64 by the walker");
	static const struct {
		const char *file, *key;    /* key: "llama.<...>", set in place (u32) or added (f32) */
		bool add_f32;
		double value;
		bool refused;
	} cases[] = {
		{ "block-count-4.gguf", "llama.block_count", false, 4, true },
		{ "block-count-6.gguf", "llama.block_count", false, 6, true },
		{ "rope-base-nan.gguf", "llama.rope.freq_base", true, NAN, true },
		{ "rope-base-0.gguf", "llama.rope.freq_base", true, 0, true },
		{ "rope-dim-0.gguf", "llama.rope.dimension_count", false, 0, true },
		{ "ffn-0.gguf", "llama.feed_forward_length", false, 0, true },
		{ "ffn-171.gguf", "llama.feed_forward_length", false, 171, true },
		{ "embd-63.gguf", "llama.embedding_length", false, 63, true },
		{ "block-count-5.gguf", "llama.block_count", false, 5, false },
		{ "rope-base-500k.gguf", "llama.rope.freq_base", true, 500000, false },
		{ "ffn-172.gguf", "llama.feed_forward_length", false, 172, false },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct rebuilt r = {0};
		if (cases[i].add_f32) {
			struct blob kv = {0};
			float f = (float)cases[i].value;
			uint32_t bits;
			memcpy(&bits, &f, 4);
			put_str(&kv, cases[i].key, strlen(cases[i].key));
			put_le(&kv, QC_GGUF_FLOAT32, 4);
			put_le(&kv, bits, 4);
			with_extra_kv(st, &kv, &r);
			blob_free(&kv);
		} else {
			const struct walk_kv *kv = walk_find_kv(&st->w, cases[i].key);
			CHECK(kv && kv->type == QC_GGUF_UINT32, "stories260K has %s as u32", cases[i].key);
			if (!kv || kv->type != QC_GGUF_UINT32)
				continue;
			r.b.p = dup_bytes(st->buf, st->len);
			r.b.len = st->len;
			set_le(r.b.p + kv->val_off, (uint64_t)cases[i].value, 4);
		}
		snprintf(in, sizeof in, "%s/%s", dir, cases[i].file);
		snprintf(out, sizeof out, "%s/%s.qb", dir, cases[i].file);
		CHECK(spit(in, r.b.p, r.b.len), "write %s", in);
		blob_free(&r.b);
		const char *args[] = { in, "--target", "cpu", "-q", "-o", out, NULL };
		int rc = run_cli(args, errp);
		size_t elen = 0;
		char *e = (char *)slurp(errp, &elen);
		const char *key = cases[i].key + 6; /* the message names it; "llama." may be spelled either way */
		if (cases[i].refused)
			CHECK(rc == 1 && e && strstr(e, in) && strstr(e, key) && !file_exists(out),
			      "cli_convert_refuses_inconsistent_hparams %s: exit %d, stderr: %s", cases[i].file, rc, e ? e : "");
		else
			CHECK(rc == 0 && file_exists(out), "cli_convert_accepts_consistent_hparams %s: exit %d, stderr: %s",
			      cases[i].file, rc, e ? e : "");
		free(e);
		unlink(out);
		unlink(in);
	}
}

/* issue 15 #6 at load: a bundle whose config contradicts its tensors or holds a
 * non-finite / non-positive value is refused by the runtime, naming the field; the
 * unedited manifest, re-serialized the same way, loads. */
static void model_refuses_inconsistent_config(const uint8_t *good, const char *nm)
{
	static const struct { const char *field; double value; bool null; bool refused; } cases[] = {
		{ "n_layer", 4, false, true },         /* tensors for 5 layers */
		{ "rope_freq_base", 0, true, true },   /* a NaN, as cJSON writes it */
		{ "rope_freq_base", -1, false, true },
		{ "rope_dim", 0, false, true },
		{ "n_ff", 0, false, true },
		{ "n_ff", 171, false, true },          /* ffn_down is 172 wide */
		{ "n_ctx_train", 0, false, true },
		{ NULL, 0, false, false },
		{ "rope_freq_base", 500000, false, false },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		cJSON *m = bundle_manifest(good);
		cJSON *cfg = cJSON_GetObjectItemCaseSensitive(m, "config");
		if (cases[i].field && cases[i].null)
			cJSON_ReplaceItemInObjectCaseSensitive(cfg, cases[i].field, cJSON_CreateNull());
		else if (cases[i].field)
			set_num(cfg, cases[i].field, cases[i].value);
		char *json = cJSON_PrintUnformatted(m);
		cJSON_Delete(m);
		struct blob out;
		bundle_with_manifest(good, json, &out);
		free(json);
		struct qc_bundle *b = NULL;
		struct qc_model *md = NULL;
		struct qc_err err = {0};
		int rc = qc_bundle_open_mem(out.p, out.len, nm, &b, &err);
		CHECK(rc == QC_OK, "edited bundle opens: %s", err.msg);
		if (!rc)
			rc = qc_model_from_bundle(b, &md, &err);
		char want[64];
		snprintf(want, sizeof want, "'%s'", cases[i].field ? cases[i].field : "");
		if (cases[i].refused)
			CHECK(rc == QC_EFORMAT && strcmp(err.path, nm) == 0 && strstr(err.msg, want),
			      "model_refuses_inconsistent_config %s = %s%g: rc %d: %s", cases[i].field,
			      cases[i].null ? "null " : "", cases[i].value, rc, err.msg);
		else
			CHECK(rc == QC_OK, "model_loads_consistent_config (%s): %s", cases[i].field ? cases[i].field : "unedited",
			      err.msg);
		qc_model_close(md);
		qc_bundle_close(b);
		blob_free(&out);
	}
}

int main(void)
{
	if (!check_have_fixtures("test_bad_hparams"))
		return check_report("test_bad_hparams");
	struct stories_run r;
	stories_open(&r, "/tmp/qc_bad_hparams.XXXXXX");
	if (r.bb)
		model_refuses_inconsistent_config(r.bb, "stories260K.qb");
	if (r.have_dir)
		cli_refuses_inconsistent_hparams(r.dir, &r.st);
	stories_close(&r);
	return check_report("test_bad_hparams");
}
