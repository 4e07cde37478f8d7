/* hf_tokenizer.h — tokenizer.json (+ tokenizer_config.json, config.json,
 * generation_config.json) as llama.cpp's GGUF tokenizer.ggml.* keys.
 * Owns: byte-level BPE → "gpt2" (tokens, merges verbatim; "pre" from the pre-tokenizer:
 * Llama 3 / Qwen2 Split regex, ByteLevel, Digits+ByteLevel; others QC_EUNSUPPORTED) and
 * SentencePiece-as-BPE (byte_fallback, "▁") → "llama" with scores = −(rank of the first
 * merge producing the token), so SPM's score order is the BPE merge order; special ids,
 * add_bos/add_eos, token types, chat template; [PAD<id>] up to vocab_size. docs/hf.md.
 * Non-goals: WordPiece/Unigram tokenizer.json, tokenizer.model, tiktoken.
 * References: llama.cpp convert_hf_to_gguf.py get_vocab_base, gguf-py vocab.py
 * SpecialVocab; transformers convert_slow_tokenizer.py (how SPM merges are derived).
 */
#ifndef QC_HF_TOKENIZER_H
#define QC_HF_TOKENIZER_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "gguf_write.h"
#include "qc_err.h"

struct qc_hf_tok_src {
	const cJSON *tokenizer;          /* tokenizer.json, required */
	const cJSON *tokenizer_config;   /* each of these may be NULL */
	const cJSON *config;
	const cJSON *generation_config;
	const char *path;                /* for messages: "<model>/tokenizer.json" */
	int64_t n_vocab;                 /* config vocab_size (pad up to it), 0: none */
};

/* Add tokenizer.ggml.* (and tokenizer.chat_template) keys to w. Errors name the
 * tokenizer file and the offending token/merge. QC_EFORMAT, QC_EUNSUPPORTED, QC_ENOMEM. */
int qc_hf_tokenizer_to_gguf(const struct qc_hf_tok_src *s, struct qc_gguf_writer *w, struct qc_err *err);

#endif
