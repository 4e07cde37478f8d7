/* fuzz_hf_model.c — libFuzzer entry for the Hugging Face model side:
 * convert/hf_config.c, hf_names.c and hf_tokenizer.c.
 *
 * The input is JSON text. An object with a "model" member is a tokenizer.json: it is
 * converted to tokenizer.ggml.* keys, written as a GGUF in memory, read back, and
 * (when the runtime accepts the vocab) a short text is tokenized. Anything else is a
 * config.json: parsed, its tensor list built, its keys written and read back. A
 * rejection must carry a message; nothing may crash, leak or read out of bounds.
 * Build and run: tests/fuzz/run.sh. Seeds: tests/data/hf/<model>/{config,tokenizer}.json.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "gguf_write.h"
#include "hf_config.h"
#include "hf_names.h"
#include "hf_tokenizer.h"
#include "vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Write w to memory and parse it back (the keys must form a valid GGUF). */
static struct qc_gguf *roundtrip(const struct qc_gguf_writer *w, uint8_t **buf)
{
	size_t len = 0;
	struct qc_gguf *g = NULL;
	struct qc_err err = { 0 };
	if (qc_gguf_writer_write_mem(w, buf, &len, &err))
		return NULL;
	if (qc_gguf_open_mem(*buf, len, "fuzz", &g, &err))
		abort(); /* our own writer's output must parse */
	return g;
}

static void tokenizer(const cJSON *j)
{
	struct qc_err err = { 0 };
	struct qc_hf_tok_src s = { .tokenizer = j, .path = "tokenizer.json" };
	struct qc_gguf_writer *w = qc_gguf_writer_new(3, 0);
	uint8_t *buf = NULL;
	if (!w)
		return;
	int rc = qc_hf_tokenizer_to_gguf(&s, w, &err);
	if (rc && !err.msg[0])
		abort();
	struct qc_gguf *g = rc ? NULL : roundtrip(w, &buf);
	struct qc_vocab *v = NULL;
	if (g && qc_vocab_from_gguf(g, &v, &err) == QC_OK) {
		int32_t *ids = NULL;
		size_t n = 0;
		if (qc_tokenize(v, "Hello world 123", 15, QC_TOK_ADD_SPECIAL, &ids, &n, &err) == QC_OK)
			free(ids);
		qc_vocab_free(v);
	}
	qc_gguf_close(g);
	free(buf);
	qc_gguf_writer_free(w);
}

static void config(cJSON *j)
{
	struct qc_hf_source src = { .path = (char *)(uintptr_t)"fuzz", .config = j };
	struct qc_hf_config c;
	struct qc_err err = { 0 };
	if (qc_hf_config_parse(&src, &c, &err)) {
		if (!err.msg[0])
			abort();
		return;
	}
	struct qc_hf_tspec *specs = NULL;
	size_t n = 0;
	if (qc_hf_names_build(&c, &specs, &n, &err) == QC_OK) {
		for (size_t i = 0; i < n; i++)
			if (!specs[i].gguf[0] || !specs[i].hf[0] || specs[i].ne0 < 1 || specs[i].ne1 < 1)
				abort();
		free(specs);
	}
	struct qc_gguf_writer *w = qc_gguf_writer_new(3, 0);
	uint8_t *buf = NULL;
	if (w && qc_hf_config_to_gguf(&c, w, &err) == QC_OK)
		qc_gguf_close(roundtrip(w, &buf));
	free(buf);
	qc_gguf_writer_free(w);
	if (c.rope.type == QC_HF_ROPE_LLAMA3) {
		float *f = malloc(sizeof(float) * (size_t)(c.head_dim / 2 + 1));
		if (f)
			qc_hf_config_llama3_rope_factors(&c, f);
		free(f);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	cJSON *j = cJSON_ParseWithLength((const char *)data, size);
	if (!j)
		return 0;
	if (cJSON_GetObjectItemCaseSensitive(j, "model"))
		tokenizer(j);
	else
		config(j);
	cJSON_Delete(j);
	return 0;
}
