/* sampler.h — next-token sampling on one logits row, per-request state.
 *
 * Owns: per-request sampling state (params, PRNG, penalty history) and a reusable
 * workspace sized to the vocabulary. Chain, as llama.cpp common_sampler's default
 * order: penalties (repeat, frequency, presence) -> top-k -> top-p -> min-p ->
 * temperature -> draw. temperature below QC_SAMPLER_GREEDY_BELOW (0 and negative
 * included) is greedy (argmax, ties to lowest id).
 * Penalty formulas follow llama_sampler_penalties_apply (llama-sampling.cpp):
 * for each token with count c > 0 in the last N accepted tokens (prompt included):
 * l = l <= 0 ? l * repeat : l / repeat; then l -= c * frequency + presence.
 * Logprobs (OpenAI-style report): log-softmax over the whole vocabulary of the
 * penalized logits divided by the temperature (1 when greedy), before top-k/p/min-p
 * truncation, so they describe the model's distribution, not the truncated one.
 * Draws are deterministic per request: xoshiro256** seeded through splitmix64.
 * Row edits (OpenAI logit_bias, vLLM min_tokens) come after the penalties:
 * bias[i] is added to its token's logit, and while fewer than min_tokens
 * tokens were drawn the min_ban ids (EOS, stop ids) are set to -inf. Both
 * happen before greedy's argmax too, and logprobs see the edited row. A
 * sampler with row edits always needs the whole row (qc_sampler_top_need 0).
 * Non-goals: grammar/DRY/mirostat, stop strings, batching across rows.
 */
#ifndef QC_SAMPLER_H
#define QC_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "qc_err.h"

#define QC_SAMPLER_MAX_LOGPROBS 20        /* OpenAI's top_logprobs cap */
#define QC_SAMPLER_MAX_VOCAB (1 << 24)
#define QC_SAMPLER_MAX_HISTORY (1 << 20)  /* penalty window cap, tokens */
#define QC_SAMPLER_MAX_BIAS 1024          /* logit_bias entries per request */
#define QC_SAMPLER_MAX_BIAS_ABS 100.0f    /* OpenAI's logit_bias range [-100, 100] */
#define QC_SAMPLER_MAX_BAN 32             /* ids min_tokens holds back */

/* Temperatures below this act as 0 (greedy), as vLLM's _SAMPLING_EPS does.
 * Why 1e-5: 1/T then stays <= 1e5, so logits / T cannot overflow a float for
 * any logit below 3e33, while below it a logit gap of 0.001 already weights the
 * runner-up by e^-100 (under FLT_MIN): the draw is the argmax anyway, except
 * on exact ties, which greedy breaks by the lowest id. Subnormal temperatures
 * such as 1e-45 would otherwise make 1/T infinite and every weight NaN. */
#define QC_SAMPLER_GREEDY_BELOW 1e-5f

struct qc_sampler;     /* opaque, one per request */
struct qc_sampler_ws;  /* opaque, one per sampling thread; reused across requests */

struct qc_sampler_params {
	float temperature;        /* < QC_SAMPLER_GREEDY_BELOW: greedy */
	int32_t top_k;            /* keep the k highest logits; <= 0: off */
	float top_p;              /* keep the smallest set with mass >= top_p; >= 1: off */
	float min_p;              /* keep p_i >= min_p * p_max; <= 0: off; <= 1 */
	float repeat_penalty;     /* > 0; 1: off */
	float frequency_penalty;  /* subtracted per occurrence; 0: off */
	float presence_penalty;   /* subtracted once if present; 0: off */
	int32_t penalty_last_n;   /* penalty window in tokens; 0: off; -1: max_history */
	uint64_t seed;            /* same seed + same logits => same draws */
	bool logprobs;            /* report the chosen token's logprob */
	int32_t n_logprobs;       /* also report this many top alternatives, 0..20 */
	int32_t n_bias;           /* entries of the two arrays below, 0..QC_SAMPLER_MAX_BIAS */
	int32_t bias_ids[QC_SAMPLER_MAX_BIAS];  /* token ids >= 0; an id past the row is ignored */
	float bias[QC_SAMPLER_MAX_BIAS];        /* added to that token's logit, [-100, 100] */
	int32_t min_tokens;       /* draws before a min_ban id may be picked; 0: off */
	int32_t n_min_ban;        /* 0..QC_SAMPLER_MAX_BAN */
	int32_t min_ban_ids[QC_SAMPLER_MAX_BAN]; /* EOS and stop ids (the engine fills them) */
};

struct qc_sample_result {
	int32_t token;                                 /* chosen id */
	float logprob;                                 /* NAN unless logprobs requested */
	int32_t n_top;                                 /* entries of the two arrays below */
	int32_t top_ids[QC_SAMPLER_MAX_LOGPROBS];      /* highest first, ties lowest id */
	float top_logprobs[QC_SAMPLER_MAX_LOGPROBS];   /* natural log */
};

/* Neutral defaults (the OpenAI API's): temperature 1, top_k 0, top_p 1, min_p 0,
 * repeat 1, frequency 0, presence 0, penalty_last_n 64, seed 0, no logprobs. */
void qc_sampler_params_init(struct qc_sampler_params *p);

/* Per-request state. max_history (0..QC_SAMPLER_MAX_HISTORY, typically the context
 * length) caps the penalty window; penalty_last_n -1 means exactly max_history.
 * Memory is O(window). Returns QC_OK and *out, QC_EINVAL (a parameter outside its
 * documented range, NaN included; the message names it), QC_ENOMEM. */
int qc_sampler_new(const struct qc_sampler_params *p, int32_t max_history,
		   struct qc_sampler **out, struct qc_err *err);

/* Accepts NULL. */
void qc_sampler_free(struct qc_sampler *s);

/* Append tokens to the penalty history (call once with the prompt; sampled
 * tokens are appended by qc_sampler_sample itself). Negative ids are ignored. */
void qc_sampler_accept(struct qc_sampler *s, const int32_t *tokens, int32_t n);

/* Workspace for rows of up to n_vocab logits: O(n_vocab) memory, reused by every
 * call; not shareable between threads. Returns QC_OK, QC_EINVAL, QC_ENOMEM. */
int qc_sampler_ws_new(int32_t n_vocab, struct qc_sampler_ws **out, struct qc_err *err);

/* Accepts NULL. */
void qc_sampler_ws_free(struct qc_sampler_ws *ws);

/* Pick the next token from logits (n_vocab floats, not modified), advance the
 * PRNG (not when greedy), append the token to s's history, fill *res.
 * Cost: a few O(n_vocab) passes plus O(n_vocab log k) for top-k; top-p sorts
 * only one logit bucket; never a full-vocabulary sort. Returns QC_OK, or QC_EINVAL when
 * n_vocab exceeds the workspace, a logit is NaN or +inf, or all are -inf
 * (nothing changed then). */
int qc_sampler_sample(struct qc_sampler *s, struct qc_sampler_ws *ws, const float *logits,
		      int32_t n_vocab, struct qc_sample_result *res, struct qc_err *err);

/* True when the next qc_sampler_sample is a plain argmax (temperature 0, no
 * logprobs, no row edits, penalties neutral or no history): its token is then the lowest id of
 * the largest logit, which a backend may compute where the logits are. */
bool qc_sampler_is_greedy(const struct qc_sampler *s);

/* What qc_sampler_sample does for a greedy sampler once the argmax is known:
 * fill *res with token (no logprobs) and append it to the history. */
void qc_sampler_take(struct qc_sampler *s, int32_t token, struct qc_sample_result *res);

/* How many of the row's best logits the next qc_sampler_sample depends on:
 * 1 when it is a plain argmax (qc_sampler_is_greedy), top_k when only the
 * top_k best survive the chain's first cut and nothing else reads the row
 * (temperature > 0, 2 <= top_k < n_vocab, no logprobs, no row edits, penalties
 * neutral or no history), else 0 (it needs the whole row). */
int32_t qc_sampler_top_need(const struct qc_sampler *s, int32_t n_vocab);

/* qc_sampler_sample given only the row's top_k best (qc_sampler_top_need > 1):
 * ids/logits (n = top_k entries) best first (larger logit, then lower id), as
 * a backend selected them. Runs the rest of the chain (top-p, min-p,
 * temperature, draw) on them: the same token and PRNG advance as the full row
 * would give. QC_EINVAL when the sampler needs more than these n, or a logit
 * is NaN/+inf (nothing changed then). */
int qc_sampler_sample_top(struct qc_sampler *s, struct qc_sampler_ws *ws, const int32_t *ids,
			  const float *logits, int32_t n, struct qc_sample_result *res, struct qc_err *err);

#endif
