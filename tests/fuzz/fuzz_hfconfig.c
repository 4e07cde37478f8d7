/* fuzz_hfconfig.c — libFuzzer entry for the quantization_config parser
 * (convert/hf_quant.c qc_hfq_parse and the scheme parsers hfq_*.c).
 *
 * The input is JSON text. If it holds "quantization_config" that object is parsed as
 * config.json's, else the whole object is tried as config.json's quantization_config
 * and as an AutoGPTQ quantize_config.json. A rejection must carry a message and the
 * config file as path and leave no handle; an accepted config must name its method
 * and answer the module rules (ignore lists, "re:" targets through PCRE2, skip lists)
 * for a few typical module names without crashing.
 * Build and run: tests/fuzz/run.sh. Seeds: tests/data/hfq/<fixture>/config.json.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hfq_scheme.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const modules[] = {
	"lm_head", "model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj",
	"model.layers.0.block_sparse_moe.experts.3.w1", "model.layers.0.block_sparse_moe.gate", "",
};

static void try_parse(const cJSON *qcfg, const cJSON *quantize_cfg)
{
	struct qc_hfq *q = NULL;
	struct qc_err err = { 0 };
	int rc = qc_hfq_parse(qcfg, quantize_cfg, &q, &err);
	if (rc != QC_OK) {
		if (q || !err.msg[0] || !err.path[0] || rc >= 0) {
			fprintf(stderr, "bad error record: rc %d path '%s' msg '%s'\n", rc, err.path, err.msg);
			abort();
		}
		return;
	}
	if (!q || !qc_hfq_method(q)[0])
		abort();
	for (size_t i = 0; i < sizeof modules / sizeof modules[0]; i++)
		(void)qc_hfq_rule(q, modules[i]);
	qc_hfq_close(q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	cJSON *j = cJSON_ParseWithLength((const char *)data, size);
	if (!j)
		return 0;
	const cJSON *qc = cJSON_GetObjectItemCaseSensitive(j, "quantization_config");
	if (qc) {
		try_parse(cJSON_IsNull(qc) ? NULL : qc, NULL);
	} else {
		try_parse(j, NULL);
		try_parse(NULL, j);
	}
	cJSON_Delete(j);
	return 0;
}
