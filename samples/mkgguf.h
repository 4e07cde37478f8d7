/* mkgguf.h — what mkgguf's files share: model shapes, the tensor plan, the generator.
 *
 * Owns: the hyperparameters and presets' types, the options parsed from the command
 * line, the tensor plan record, the fill-callback state, the seed hash every file
 * derives values from, and the entry points of mkgguf's files: mkgguf.c (command
 * line), mkgguf_presets.c (presets, architectures), mkgguf_plan.c (tensor names and
 * shapes), mkgguf_mix.c (llama-quantize's per-tensor type mixes),
 * mkgguf_weights.c (seeded values, the fill callback), mkgguf_vocab.c (the
 * SentencePiece vocab), mkgguf_meta.c (the key set), mkgguf_out.c (files, shards).
 * Internal to samples/: mkgguf is a program, this is not a library interface.
 */
#ifndef QC_MKGGUF_H
#define QC_MKGGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gguf_write.h"
#include "qc_err.h"
#include "qtype.h"

#define MAX_THREADS 64                     /* --threads cap; scratch rows are per thread */
#define MAX_ROPE_FREQS 512                  /* rope_freqs.weight: one per rotated pair */

enum arch { ARCH_LLAMA, ARCH_QWEN2, ARCH_QWEN3, ARCH_QWEN2MOE, ARCH_QWEN3MOE, ARCH_GEMMA2, ARCH_PHI3, ARCH_GEMMA3, ARCH_COUNT };

/* RoPE scaling written to the GGUF (llama.cpp rope.scaling.type; LLAMA3 = the
 * rope_freqs.weight factors tensor convert_hf_to_gguf writes for Llama 3.1;
 * LONGROPE = Phi-3's rope_factors_long/short.weight tables and attn_factor key). */
enum rope_scaling { ROPE_NONE, ROPE_LINEAR, ROPE_YARN, ROPE_LLAMA3, ROPE_LONGROPE };

struct hparams {
	enum arch arch;
	int64_t n_embd, n_layer, n_ff, n_head, n_head_kv, n_vocab, n_expert, n_expert_used, n_ctx;
	float rope_base, rms_eps;
};

/* Options outside the presets; 0 means none / derived / WEIGHT_STD. */
struct hparams_x {
	int64_t n_ff_shexp;             /* qwen2moe shared expert width (0: n_ff) */
	enum rope_scaling rope_scaling;
	float rope_factor;              /* linear / yarn / llama3 factor; longrope: the
					 * largest long factor */
	int64_t rope_orig_ctx;          /* yarn / llama3 / phi3 original context (0: n_ctx) */
	double weight_std;              /* std of matrices and biases (0: WEIGHT_STD) */
	bool tie_embeddings;            /* no output.weight: llama.cpp reuses token_embd */
	float attn_softcap, final_softcap; /* gemma2 soft-caps (0: Gemma 2's 50 and 30) */
	int64_t sliding_window;         /* gemma2 / phi3 / gemma3 window in tokens (0: Gemma 2's
					 * 4096, Phi-3-mini-4k's 2047, Gemma 3 1B's 512) */
};

struct preset {
	const char *name;
	const char *desc;
	struct hparams hp;
	uint64_t min_file_bytes;    /* >0: n_layer grows until the file reaches this size */
};

/* The presets of --preset (mkgguf_presets.c), qc_mkgguf_n_presets of them. */
extern const struct preset qc_mkgguf_presets[];
extern const size_t qc_mkgguf_n_presets;

/* GGUF general.architecture names, by enum arch. */
extern const char *const qc_mkgguf_arch_names[ARCH_COUNT];

struct vocab {
	uint64_t n;
	char **tok;         /* (n) NUL-terminated pieces, owned */
	float *score;       /* (n) SentencePiece log-prob style scores */
	int32_t *ttype;     /* (n) TOK_* */
};

enum init { INIT_WEIGHT, INIT_NORM, INIT_BIAS, INIT_FIXED };

struct gen;

struct tensor_plan {
	char name[QC_GGUF_MAX_NAME];
	uint32_t n_dims;
	int64_t ne[QC_GGUF_MAX_DIMS];   /* ne[0] = input (contiguous) dim */
	enum qc_type type;
	enum init init;
	uint64_t seed;                  /* per-tensor stream, from --seed and the name */
	double std;                     /* std of generated values */
	const float *fixed;             /* INIT_FIXED: (ne[0]) values of a 1-row tensor */
	uint64_t row_bytes, n_rows, n_bytes;
	struct gen *g;
};

struct mix_rule;

/* A llama-quantize type mix (mkgguf_mix.c): its --type name, the type of most
 * matrices, llama.cpp's general.file_type for it, and its rule table. */
struct mix {
	const char *name;
	enum qc_type base;
	uint32_t ftype;
	const struct mix_rule *rules;
};

/* The mixes of --type (mkgguf_mix.c), qc_mkgguf_n_mixes of them. */
extern const struct mix qc_mkgguf_mixes[];
extern const size_t qc_mkgguf_n_mixes;

struct opts {
	const char *preset, *out;
	enum qc_type type;              /* matrices; with a mix, its base type */
	const struct mix *mix;          /* NULL: every matrix is `type` */
	uint64_t seed;
	int split, n_threads;
	bool dry_run;                   /* print the plan, write nothing */
	uint64_t min_file_bytes;        /* >0: choose n_layer so the file reaches this size */
	struct hparams hp;
	struct hparams_x hx;
};

/* Shared by all fill calls: per-thread scratch rows and progress. */
struct gen {
	int n_threads;
	int64_t max_row;                /* floats per scratch row */
	float *rows[MAX_THREADS];       /* (n_threads, max_row) f32 scratch */
	uint8_t *edge;                  /* one encoded row, for rows cut by a chunk edge */
	bool tty;
	uint64_t done, total;           /* bytes generated, bytes to generate */
	double t_start, t_last;
	const char *label;              /* current output file, for progress */
};

/* ---- deterministic numbers ----------------------------------------------------- */

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

/* Whether architecture a has stacked experts of its own (mixtral is llama + experts). */
bool qc_mkgguf_has_experts(enum arch a);

/* The tensors of a model of hp/hx with matrices of type wt (mix: retyped by its
 * rules; NULL: none), seeded by seed, in llama.cpp's order: *out (caller frees) of
 * *n_out. QC_OK, QC_ENOMEM, QC_EINVAL or QC_EUNSUPPORTED (a mix for another arch). */
int qc_mkgguf_plan_tensors(const struct hparams *hp, const struct hparams_x *hx, enum qc_type wt,
			   const struct mix *mix, uint64_t seed, struct tensor_plan **out, size_t *n_out,
			   struct qc_err *err);

/* llama.cpp's use_more_bits: layer i of n gets the larger type of a mix. */
bool qc_mkgguf_use_more_bits(int64_t i_layer, int64_t n_layer);

/* The type mix gives matrix `name` of a model of hp (has_output: the model has an
 * output.weight; without one token_embd takes its rule). */
enum qc_type qc_mkgguf_mix_type(const struct mix *mix, const struct hparams *hp, const char *name,
				bool has_output);

/* Retypes the n matrices of plan p of base type mix->base by mix's rules and
 * recomputes their sizes. QC_OK, QC_EUNSUPPORTED (not a dense llama), QC_EINVAL. */
int qc_mkgguf_mix_apply(const struct mix *mix, const struct hparams *hp, struct tensor_plan *p, size_t n,
			struct qc_err *err);

/* Total data bytes of the n tensors of plan p. */
uint64_t qc_mkgguf_plan_bytes(const struct tensor_plan *p, size_t n);

/* Fills v with n pieces (n >= 259); on failure v is freed. QC_OK or QC_ENOMEM. */
int qc_mkgguf_vocab_build(struct vocab *v, uint64_t n, struct qc_err *err);

/* Frees what vocab_build allocated and zeroes v; safe on a zeroed or freed v. */
void qc_mkgguf_vocab_free(struct vocab *v);

/* qc_gguf_fill_fn over a struct tensor_plan (ctx): its seeded, encoded bytes. */
int qc_mkgguf_fill_tensor(void *ctx, uint64_t off, void *buf, size_t n);

/* Progress line on stderr (terminals only, at most every 0.25 s unless final). */
void qc_mkgguf_progress(struct gen *g, const struct tensor_plan *t, bool final);

/* Monotonic clock in seconds. */
double qc_mkgguf_now_s(void);

/* Adds the key set of a llama.cpp-converted checkpoint for o and vocab v to w. */
int qc_mkgguf_add_metadata(struct qc_gguf_writer *w, const struct opts *o, const struct vocab *v,
			   struct qc_err *err);

/* Prints o's tensor plan to f (--dry-run): "NAME TYPE NE0 NE1 NE2 BYTES" per tensor,
 * then "total BYTES bytes in N tensors". QC_OK or the plan's error. */
int qc_mkgguf_print_plan(const struct opts *o, FILE *f, struct qc_err *err);

/* Writes the model o describes to o->out (or its --split shards). */
int qc_mkgguf_write_model(const struct opts *o, struct qc_err *err);

#endif
