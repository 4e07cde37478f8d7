/* llref.c — llama.cpp's own greedy outputs for a GGUF, as tests/data/ref/NAME.json.
 *
 * Owns: loading a GGUF through llama.cpp's public C API (llama.h) and writing the
 * format of fixtures/reference/NAME.json: per prompt, prompt_ids, 32 greedy ids
 * (argmax of the raw logits, ties to the lowest id), margins (top-1 minus top-2
 * logit per step), first_step_top10 and first_step_logsumexp (over the whole
 * vocabulary, in double: a log-prob is logit - it). 1 thread, f16 K/V cache, no flash
 * attention, prompt decoded in one batch then one token per step, a fresh
 * context per prompt. Prompts are given as ids (no tokenizer question).
 * Built outside the repository's Makefile against a llama.cpp build that stays
 * out of the tree (tools/llref/README.md); never linked into qconvert.
 * Non-goals: sampling, text output, GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

#define N_GEN 32
#define MAX_PROMPT 64

static void quiet(enum ggml_log_level level, const char *text, void *ud)
{
	(void)ud;
	if (level == GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

/* "1,15,27" -> ids; returns the count or -1. */
static int parse_ids(const char *s, llama_token *ids)
{
	int n = 0;
	while (*s) {
		char *end;
		long v = strtol(s, &end, 10);
		if (end == s || n == MAX_PROMPT)
			return -1;
		ids[n++] = (llama_token)v;
		s = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return -1;
	}
	return n;
}

static struct llama_context *new_ctx(struct llama_model *m)
{
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = 256;
	cp.n_batch = 256;
	cp.n_ubatch = 256;
	cp.n_threads = 1;
	cp.n_threads_batch = 1;
	cp.type_k = GGML_TYPE_F16;
	cp.type_v = GGML_TYPE_F16;
#ifdef LLREF_FA_TYPE
	cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
#else
	cp.flash_attn = false;
#endif
	cp.no_perf = true;
	return llama_init_from_model(m, cp);
}

static int run_prompt(struct llama_model *m, int n_vocab, const llama_token *prompt, int n_prompt,
		      FILE *out, int first)
{
	struct llama_context *ctx = new_ctx(m);
	llama_token ids[N_GEN];
	double margins[N_GEN];
	int top_id[10];
	float top_logit[10];
	double lse = 0.0;
	if (!ctx)
		return -1;
	llama_token buf[MAX_PROMPT];
	memcpy(buf, prompt, sizeof(llama_token) * (size_t)n_prompt);
	if (llama_decode(ctx, llama_batch_get_one(buf, n_prompt))) {
		llama_free(ctx);
		return -1;
	}
	for (int step = 0; step < N_GEN; step++) {
		const float *lg = llama_get_logits_ith(ctx, -1);
		int best = 0, second = -1;
		for (int i = 1; i < n_vocab; i++) {
			if (lg[i] > lg[best]) {
				second = best;
				best = i;
			} else if (second < 0 || lg[i] > lg[second]) {
				second = i;
			}
		}
		ids[step] = best;
		margins[step] = (double)lg[best] - (double)lg[second];
		if (step == 0) { /* log-sum-exp in double: log-probs are logit - lse */
			double sum = 0.0;
			for (int i = 0; i < n_vocab; i++)
				sum += exp((double)lg[i] - (double)lg[best]);
			lse = (double)lg[best] + log(sum);
			for (int k = 0; k < 10; k++) { /* selection: 10 passes, ties to the lowest id */
				int b = -1;
				for (int i = 0; i < n_vocab; i++) {
					int taken = 0;
					for (int u = 0; u < k; u++)
						taken |= top_id[u] == i;
					if (!taken && (b < 0 || lg[i] > lg[b]))
						b = i;
				}
				top_id[k] = b;
				top_logit[k] = lg[b];
			}
		}
		llama_token t = best;
		if (llama_decode(ctx, llama_batch_get_one(&t, 1))) {
			llama_free(ctx);
			return -1;
		}
	}
	llama_free(ctx);
	fprintf(out, "%s\n    {\"prompt_ids\": [", first ? "" : ",");
	for (int i = 0; i < n_prompt; i++)
		fprintf(out, "%s%d", i ? ", " : "", prompt[i]);
	fprintf(out, "],\n     \"ids\": [");
	for (int i = 0; i < N_GEN; i++)
		fprintf(out, "%s%d", i ? ", " : "", ids[i]);
	fprintf(out, "],\n     \"margins\": [");
	for (int i = 0; i < N_GEN; i++)
		fprintf(out, "%s%.9g", i ? ", " : "", margins[i]);
	fprintf(out, "],\n     \"first_step_top10\": [");
	for (int i = 0; i < 10; i++)
		fprintf(out, "%s{\"id\": %d, \"logit\": %.9g}", i ? ", " : "", top_id[i],
			(double)top_logit[i]);
	fprintf(out, "],\n     \"first_step_logsumexp\": %.9g}", lse);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: llref MODEL.gguf FILE_FIELD MADE_BY IDS [IDS...] > out.json\n"
				"  IDS: comma-separated prompt token ids, e.g. 1,300,301\n");
		return 2;
	}
	llama_log_set(quiet, NULL);
	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	mp.n_gpu_layers = 0;
	struct llama_model *m = llama_model_load_from_file(argv[1], mp);
	if (!m) {
		fprintf(stderr, "llref: cannot load %s\n", argv[1]);
		return 1;
	}
	const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
	FILE *out = stdout;
	fprintf(out, "{\"file\": \"%s\",\n \"made_by\": \"%s\",\n", argv[2], argv[3]);
	fprintf(out, " \"greedy_invocation\": \"llref MODEL IDS (1 thread, f16 K/V cache, no flash "
		     "attention, argmax of raw logits, prompt in one batch then one token per step)\",\n");
	fprintf(out, " \"greedy\": [");
	int rc = 0;
	for (int a = 4; a < argc && !rc; a++) {
		llama_token prompt[MAX_PROMPT];
		int n = parse_ids(argv[a], prompt);
		if (n < 1) {
			fprintf(stderr, "llref: bad ids '%s'\n", argv[a]);
			rc = 2;
			break;
		}
		if (run_prompt(m, n_vocab, prompt, n, out, a == 4)) {
			fprintf(stderr, "llref: decode failed\n");
			rc = 1;
		}
	}
	fprintf(out, "\n ]}\n");
	llama_model_free(m);
	llama_backend_free();
	return rc;
}
