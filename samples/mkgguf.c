/* mkgguf.c — synthetic, llama.cpp-loadable GGUF checkpoints for tests, samples, benchmarks.
 *
 * Owns: the presets (tiny, tiny-moe, llama3-8b, cpu-bench, bench4g), the tensor plan with
 * llama.cpp's names and shapes (llama-arch.cpp / llama-model.cpp load_tensors) for
 * llama/mixtral/qwen2/qwen3/qwen2moe/qwen3moe with optional linear/YaRN/llama3 rope
 * scaling (keys, or the rope_freqs.weight factors tensor), a synthetic SentencePiece vocab (llama-vocab.cpp: tokens, scores, token types, byte
 * tokens "<0xXX>"), seeded weights, and gguf-split's shard convention.
 * Element j of row r of tensor T depends on (seed, T's name, r, j) only, so bytes do not
 * depend on order, chunking, threads or --split: mean + std * z, z the centred sum of
 * four 16-bit splitmix64 draws (Irwin-Hall, |z| < 3.47), encoded by qc_types[t].quant_row
 * row by row inside the writer's fill callback, so memory stays bounded.
 * Non-goals: real tokenizers (BPE merges), trained weights, K-quants.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cursor.h"
#include "gguf_write.h"
#include "qc_err.h"
#include "qtype.h"

#define PROG "mkgguf"
#define MAX_THREADS 16
#define MAX_SPLIT 65535                     /* split.count is a u16 */
#define BENCH_MIN_BYTES ((42ull << 30) / 10) /* 4.2 GiB: past every 32-bit offset */
#define GOLDEN 0x9e3779b97f4a7c15ull
#define IH_SD 37837.226                     /* sd of a sum of four uniform u16: 65536/sqrt(3) */
#define IH_MEAN 131070                      /* its mean, 4 * 65535 / 2 */
#define WEIGHT_STD 0.02                     /* std of every generated value */
#define SPM_SPACE "\xe2\x96\x81"            /* U+2581, SentencePiece's word-start mark */

enum arch { ARCH_LLAMA, ARCH_QWEN2, ARCH_QWEN3, ARCH_QWEN2MOE, ARCH_QWEN3MOE };

static const char *const arch_names[] = { [ARCH_LLAMA] = "llama", [ARCH_QWEN2] = "qwen2",
					  [ARCH_QWEN3] = "qwen3", [ARCH_QWEN2MOE] = "qwen2moe",
					  [ARCH_QWEN3MOE] = "qwen3moe" };

/* RoPE scaling written to the GGUF (llama.cpp rope.scaling.type; LLAMA3 = the
 * rope_freqs.weight factors tensor convert_hf_to_gguf writes for Llama 3.1). */
enum rope_scaling { ROPE_NONE, ROPE_LINEAR, ROPE_YARN, ROPE_LLAMA3 };

struct hparams {
	enum arch arch;
	int64_t n_embd, n_layer, n_ff, n_head, n_head_kv, n_vocab, n_expert, n_expert_used, n_ctx;
	float rope_base, rms_eps;
};

/* Options outside the presets; 0 means none / derived / WEIGHT_STD. */
struct hparams_x {
	int64_t n_ff_shexp;             /* qwen2moe shared expert width (0: n_ff) */
	enum rope_scaling rope_scaling;
	float rope_factor;              /* linear / yarn / llama3 factor */
	int64_t rope_orig_ctx;          /* yarn / llama3 original context (0: n_ctx) */
	double weight_std;              /* std of matrices and biases (0: WEIGHT_STD) */
	bool tie_embeddings;            /* no output.weight: llama.cpp reuses token_embd */
};

struct preset {
	const char *name;
	const char *desc;
	struct hparams hp;
	uint64_t min_file_bytes;    /* >0: n_layer grows until the file reaches this size */
};

static const struct preset presets[] = {
	{ "tiny", "small llama: n_embd 64, 2 layers, 4/2 heads, n_ff 192, vocab 300",
	  { ARCH_LLAMA, 64, 2, 192, 4, 2, 300, 0, 0, 512, 10000.0f, 1e-5f }, 0 },
	{ "tiny-moe", "tiny as mixtral: 4 experts, 2 used, stacked *_exps + router",
	  { ARCH_LLAMA, 64, 2, 192, 4, 2, 300, 4, 2, 512, 10000.0f, 1e-5f }, 0 },
	{ "llama3-8b", "Llama-3-8B shapes: 4096, 32 layers, n_ff 14336, 32/8 heads, vocab 128256",
	  { ARCH_LLAMA, 4096, 32, 14336, 32, 8, 128256, 0, 0, 8192, 500000.0f, 1e-5f }, 0 },
	{ "cpu-bench", "llama 2048/5632, 8 layers, 16/4 heads, vocab 32000 (0.5 B; matmul-bound)",
	  { ARCH_LLAMA, 2048, 8, 5632, 16, 4, 32000, 0, 0, 4096, 10000.0f, 1e-5f }, 0 },
	{ "bench4g", "llama 4096/11008, 32/8 heads, vocab 32000; layers until the file >= 4.2 GiB",
	  { ARCH_LLAMA, 4096, 0, 11008, 32, 8, 32000, 0, 0, 4096, 10000.0f, 1e-5f }, BENCH_MIN_BYTES },
};

/* llama.cpp's general.file_type (enum llama_ftype) for the --type choices that have one. */
static const struct { enum qc_type type; uint32_t ftype; } ftypes[] = {
	{ QC_TYPE_F32, 0 }, { QC_TYPE_F16, 1 }, { QC_TYPE_Q4_0, 2 }, { QC_TYPE_Q8_0, 7 },
	{ QC_TYPE_BF16, 32 },
};

/* llama.cpp token types (LLAMA_TOKEN_TYPE_*) used by the synthetic vocab. */
enum { TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_BYTE = 6 };

/* Common SentencePiece pieces, most frequent first; the rest are generated. */
static const char *const spm_pieces[] = {
	SPM_SPACE "t", "er", "in", SPM_SPACE "a", "en", "on", SPM_SPACE "th", "es", SPM_SPACE "the",
	SPM_SPACE "s", "at", "or", SPM_SPACE "c", "is", SPM_SPACE "w", "an", "re", SPM_SPACE "o",
	SPM_SPACE "f", "ing", SPM_SPACE "b", SPM_SPACE "p", SPM_SPACE "and", SPM_SPACE "m",
	SPM_SPACE "to", SPM_SPACE "of", SPM_SPACE "in", "ed", "ar", SPM_SPACE "d", SPM_SPACE "is",
	SPM_SPACE "h", "ou", "it", "le", "al", SPM_SPACE "l", SPM_SPACE "I", SPM_SPACE "n",
	SPM_SPACE "that", SPM_SPACE "it", SPM_SPACE, "e", "t", "a", "o", "i", "n", "s", "r", "h",
	"l", "d", "c", "u", "m", "f", "p", "g", "w", "y", "b", ".", ",", "v", "k", "-", "'", "x",
	"j", "q", "z", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", SPM_SPACE "be",
	SPM_SPACE "for", SPM_SPACE "with", SPM_SPACE "on", SPM_SPACE "as", SPM_SPACE "was",
	SPM_SPACE "he", SPM_SPACE "you", SPM_SPACE "are", SPM_SPACE "this", SPM_SPACE "by",
	SPM_SPACE "model", SPM_SPACE "token", "ly", "ion", "tion", "ent", "ation", SPM_SPACE "The",
};

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

struct opts {
	const char *preset, *out;
	enum qc_type type;
	uint64_t seed;
	int split, n_threads;
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

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

/* Float arithmetic only (one rounded multiply, one rounded add), so any IEEE float32
 * implementation reproduces the values exactly. */
static void gen_row(const struct tensor_plan *t, uint64_t row, float *dst)
{
	const float mean = t->init == INIT_NORM ? 1.0f : 0.0f;
	const float scale = (float)(t->std / IH_SD);
	if (t->init == INIT_FIXED) {
		memcpy(dst, t->fixed, sizeof(float) * (size_t)t->ne[0]);
		return;
	}
	uint64_t st = mix64(t->seed + row * GOLDEN);
	for (int64_t j = 0; j < t->ne[0]; j++) {
		st += GOLDEN;
		uint64_t z = mix64(st);
		int32_t s = (int32_t)(z & 0xffff) + (int32_t)((z >> 16) & 0xffff) +
			    (int32_t)((z >> 32) & 0xffff) + (int32_t)(z >> 48);
		dst[j] = mean + (float)(s - IH_MEAN) * scale;
	}
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- fill callback: rows -> encoded bytes, threads over whole rows ---------------- */

struct row_job {
	const struct tensor_plan *t;
	uint64_t r0, r1;    /* rows [r0, r1) */
	uint8_t *dst;       /* encoded row r0 */
	float *scratch;
};

static void *run_rows(void *arg)
{
	const struct row_job *j = arg;
	qc_quant_row_fn quant = qc_types[j->t->type].quant_row;
	uint8_t *p = j->dst;
	for (uint64_t r = j->r0; r < j->r1; r++, p += j->t->row_bytes) {
		gen_row(j->t, r, j->scratch);
		quant(j->scratch, p, j->t->ne[0]);
	}
	return NULL;
}

static int encode_rows(struct gen *g, const struct tensor_plan *t, uint64_t r0, uint64_t n_rows,
		       uint8_t *dst)
{
	int n_thr = g->n_threads;
	/* threads only pay for themselves on big spans */
	if ((uint64_t)t->ne[0] * n_rows < (1u << 16))
		n_thr = 1;
	if ((uint64_t)n_thr > n_rows)
		n_thr = (int)n_rows;
	struct row_job jobs[MAX_THREADS];
	pthread_t tid[MAX_THREADS];
	int started = 0, rc = QC_OK;
	for (int i = 0; i < n_thr; i++) {
		uint64_t a = r0 + n_rows * (uint64_t)i / (uint64_t)n_thr;
		uint64_t b = r0 + n_rows * (uint64_t)(i + 1) / (uint64_t)n_thr;
		jobs[i] = (struct row_job){ t, a, b, dst + (a - r0) * t->row_bytes, g->rows[i] };
	}
	for (int i = 1; i < n_thr; i++) {
		if (pthread_create(&tid[i], NULL, run_rows, &jobs[i])) {
			rc = QC_ENOMEM;
			break;
		}
		started = i;
	}
	if (!rc)
		run_rows(&jobs[0]);
	for (int i = 1; i <= started; i++)
		pthread_join(tid[i], NULL);
	return rc;
}

static void progress(struct gen *g, const struct tensor_plan *t, bool final)
{
	double now = now_s();
	if (!g->tty || (!final && now - g->t_last < 0.25))
		return;
	g->t_last = now;
	double el = now - g->t_start;
	fprintf(stderr, "\r\033[K%s: %s  %.2f / %.2f GB  %.0f MB/s", g->label, t ? t->name : "done",
		(double)g->done / 1e9, (double)g->total / 1e9,
		el > 0 ? (double)g->done / 1e6 / el : 0.0);
	if (final)
		fputc('\n', stderr);
}

/* qc_gguf_fill_fn: bytes [off, off+n) of tensor ctx. Rows cut by the chunk edges are
 * encoded whole into g->edge and sliced; whole rows are encoded in place. */
static int fill_tensor(void *ctx, uint64_t off, void *buf, size_t n)
{
	const struct tensor_plan *t = ctx;
	struct gen *g = t->g;
	uint8_t *dst = buf;
	size_t left = n;
	uint64_t row = off / t->row_bytes, in = off % t->row_bytes;
	int rc = QC_OK;
	if (in) {
		size_t k = t->row_bytes - in < left ? (size_t)(t->row_bytes - in) : left;
		gen_row(t, row, g->rows[0]);
		qc_types[t->type].quant_row(g->rows[0], g->edge, t->ne[0]);
		memcpy(dst, g->edge + in, k);
		dst += k;
		left -= k;
		row++;
	}
	uint64_t whole = left / t->row_bytes;
	if (whole) {
		rc = encode_rows(g, t, row, whole, dst);
		dst += whole * t->row_bytes;
		left -= (size_t)(whole * t->row_bytes);
		row += whole;
	}
	if (!rc && left) {
		gen_row(t, row, g->rows[0]);
		qc_types[t->type].quant_row(g->rows[0], g->edge, t->ne[0]);
		memcpy(dst, g->edge, left);
	}
	g->done += n;
	progress(g, t, false);
	return rc;
}

/* ---- tensor plan ------------------------------------------------------------------ */

static int plan_add(struct tensor_plan *p, size_t *n, size_t cap, const char *name, enum qc_type type,
		    enum init init, uint32_t n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
		    uint64_t seed, struct qc_err *err)
{
	QC_ASSERT(*n < cap);
	struct tensor_plan *t = &p[(*n)++];
	memset(t, 0, sizeof *t);
	snprintf(t->name, sizeof t->name, "%s", name);
	t->n_dims = n_dims;
	t->ne[0] = ne0;
	t->ne[1] = ne1;
	t->ne[2] = ne2;
	t->ne[3] = 1;
	t->type = type;
	t->init = init;
	t->seed = mix64(seed ^ fnv1a(name));
	int rc = qc_type_row_bytes(type, (uint64_t)ne0, &t->row_bytes);
	if (rc)
		return qc_err_set(err, QC_EINVAL, NULL, name, -1,
				  "row length %lld is not a multiple of %s's block size %lld",
				  (long long)ne0, qc_types[type].name, (long long)qc_types[type].block_elems);
	t->n_rows = (uint64_t)(ne1 * ne2);
	if (!qc_mul_ok(t->row_bytes, t->n_rows, &t->n_bytes))
		return qc_err_set(err, QC_ERANGE, NULL, name, -1, "tensor size overflows");
	return QC_OK;
}

/* Tensors per layer, for sizing the plan array. */
#define PER_LAYER_MAX 18
#define MAX_ROPE_FREQS 512

static bool has_experts(enum arch a)
{
	return a == ARCH_QWEN2MOE || a == ARCH_QWEN3MOE;
}

/* Llama 3.1 rope factors as convert_hf_to_gguf computes them (low/high frequency
 * factors 1 and 4, original context rope_orig_ctx), one per rotated pair. Static:
 * the plan points at it and mkgguf writes one model per run. */
static float rope_freqs_buf[MAX_ROPE_FREQS];

static void llama3_rope_factors(const struct hparams *hp, const struct hparams_x *hx, int64_t hd)
{
	const double lo = 1.0, hi = 4.0, f = hx->rope_factor;
	const double old = (double)(hx->rope_orig_ctx ? hx->rope_orig_ctx : hp->n_ctx);
	for (int64_t i = 0; i < hd / 2; i++) {
		double freq = 1.0 / pow((double)hp->rope_base, (double)(2 * i) / (double)hd);
		double wavelen = 2.0 * M_PI / freq, r;
		if (wavelen < old / hi)
			r = 1.0;
		else if (wavelen > old / lo)
			r = f;
		else {
			double smooth = (old / wavelen - lo) / (hi - lo);
			r = 1.0 / ((1.0 - smooth) / f + smooth);
		}
		rope_freqs_buf[i] = (float)r;
	}
}

static int plan_tensors(const struct hparams *hp, const struct hparams_x *hx, enum qc_type wt, uint64_t seed,
			struct tensor_plan **out, size_t *n_out, struct qc_err *err)
{
	size_t cap = 4 + (size_t)hp->n_layer * PER_LAYER_MAX, n = 0;
	struct tensor_plan *p = calloc(cap, sizeof *p);
	if (!p)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory planning tensors");
	int64_t e = hp->n_embd, ff = hp->n_ff, hd = hp->n_embd / hp->n_head;
	int64_t kv = hd * hp->n_head_kv, x = hp->n_expert;
	int64_t sh = hx->n_ff_shexp ? hx->n_ff_shexp : ff;
	const bool bias = hp->arch == ARCH_QWEN2 || hp->arch == ARCH_QWEN2MOE;
	const bool qk_norm = hp->arch == ARCH_QWEN3 || hp->arch == ARCH_QWEN3MOE;
	const enum qc_type f32 = QC_TYPE_F32;
	char nm[QC_GGUF_MAX_NAME];
	int rc = plan_add(p, &n, cap, "token_embd.weight", wt, INIT_WEIGHT, 2, e, hp->n_vocab, 1, seed, err);
	if (!rc && hx->rope_scaling == ROPE_LLAMA3) {
		llama3_rope_factors(hp, hx, hd);
		rc = plan_add(p, &n, cap, "rope_freqs.weight", f32, INIT_FIXED, 1, hd / 2, 1, 1, seed, err);
		p[n - 1].fixed = rope_freqs_buf;
	}
	for (int64_t l = 0; l < hp->n_layer && !rc; l++) {
#define T(suffix, type, init, nd, a, b, c)                                                       \
		if (!rc) {                                                                        \
			snprintf(nm, sizeof nm, "blk.%lld." suffix, (long long)l);                \
			rc = plan_add(p, &n, cap, nm, type, init, nd, a, b, c, seed, err);         \
		}
		T("attn_norm.weight", f32, INIT_NORM, 1, e, 1, 1)
		T("attn_q.weight", wt, INIT_WEIGHT, 2, e, hd * hp->n_head, 1)
		T("attn_k.weight", wt, INIT_WEIGHT, 2, e, kv, 1)
		T("attn_v.weight", wt, INIT_WEIGHT, 2, e, kv, 1)
		if (bias) {
			T("attn_q.bias", f32, INIT_BIAS, 1, e, 1, 1)
			T("attn_k.bias", f32, INIT_BIAS, 1, kv, 1, 1)
			T("attn_v.bias", f32, INIT_BIAS, 1, kv, 1, 1)
		}
		if (qk_norm) {
			T("attn_q_norm.weight", f32, INIT_NORM, 1, hd, 1, 1)
			T("attn_k_norm.weight", f32, INIT_NORM, 1, hd, 1, 1)
		}
		T("attn_output.weight", wt, INIT_WEIGHT, 2, hd * hp->n_head, e, 1)
		T("ffn_norm.weight", f32, INIT_NORM, 1, e, 1, 1)
		if (x) {
			/* router stays f32, as llama.cpp's converter and quantizer keep it */
			T("ffn_gate_inp.weight", f32, INIT_WEIGHT, 2, e, x, 1)
			T("ffn_gate_exps.weight", wt, INIT_WEIGHT, 3, e, ff, x)
			T("ffn_up_exps.weight", wt, INIT_WEIGHT, 3, e, ff, x)
			T("ffn_down_exps.weight", wt, INIT_WEIGHT, 3, ff, e, x)
		}
		if (x && hp->arch == ARCH_QWEN2MOE) {
			/* shared expert; its gate is one f32 row, kept f32 as the quantizer does */
			T("ffn_gate_inp_shexp.weight", f32, INIT_WEIGHT, 1, e, 1, 1)
			T("ffn_gate_shexp.weight", wt, INIT_WEIGHT, 2, e, sh, 1)
			T("ffn_up_shexp.weight", wt, INIT_WEIGHT, 2, e, sh, 1)
			T("ffn_down_shexp.weight", wt, INIT_WEIGHT, 2, sh, e, 1)
		}
		if (!x) {
			T("ffn_gate.weight", wt, INIT_WEIGHT, 2, e, ff, 1)
			T("ffn_up.weight", wt, INIT_WEIGHT, 2, e, ff, 1)
			T("ffn_down.weight", wt, INIT_WEIGHT, 2, ff, e, 1)
		}
#undef T
	}
	if (!rc)
		rc = plan_add(p, &n, cap, "output_norm.weight", f32, INIT_NORM, 1, e, 1, 1, seed, err);
	if (!rc && !hx->tie_embeddings)
		rc = plan_add(p, &n, cap, "output.weight", wt, INIT_WEIGHT, 2, e, hp->n_vocab, 1, seed, err);
	if (rc) {
		free(p);
		return rc;
	}
	for (size_t i = 0; i < n; i++)
		p[i].std = p[i].init == INIT_NORM || hx->weight_std <= 0 ? WEIGHT_STD : hx->weight_std;
	*out = p;
	*n_out = n;
	return QC_OK;
}

static uint64_t plan_bytes(const struct tensor_plan *p, size_t n)
{
	uint64_t s = 0;
	for (size_t i = 0; i < n; i++)
		s += p[i].n_bytes;
	return s;
}

/* ---- vocab ---------------------------------------------------------------------------- */

static void vocab_free(struct vocab *v)
{
	for (uint64_t i = 0; v->tok && i < v->n; i++)
		free(v->tok[i]);
	free(v->tok);
	free(v->score);
	free(v->ttype);
	memset(v, 0, sizeof *v);
}

static bool is_fixed_piece(const char *s)
{
	for (size_t i = 0; i < sizeof spm_pieces / sizeof spm_pieces[0]; i++)
		if (strcmp(spm_pieces[i], s) == 0)
			return true;
	return false;
}

/* k-th word of the bijective base-26 sequence a, b, .., z, aa, ab, ... */
static void word_of(uint64_t k, char *buf)
{
	char tmp[16];
	int n = 0;
	for (k++; k; k = (k - 1) / 26)
		tmp[n++] = (char)('a' + (k - 1) % 26);
	for (int i = 0; i < n; i++)
		buf[i] = tmp[n - 1 - i];
	buf[n] = '\0';
}

/* <unk> <s> </s>, the 256 byte tokens, the fixed pieces, then "▁word"/"word" pairs
 * until n tokens; every piece unique, as llama.cpp's token_to_id map requires. */
static int vocab_build(struct vocab *v, uint64_t n, struct qc_err *err)
{
	const size_t n_fixed = sizeof spm_pieces / sizeof spm_pieces[0];
	v->n = n;
	v->tok = calloc(n, sizeof *v->tok);
	v->score = calloc(n, sizeof *v->score);
	v->ttype = calloc(n, sizeof *v->ttype);
	if (!v->tok || !v->score || !v->ttype)
		goto out_nomem;
	char buf[32];
	uint64_t word = 0;
	for (uint64_t i = 0; i < n; i++) {
		if (i < 3) {
			snprintf(buf, sizeof buf, "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
			v->ttype[i] = i == 0 ? TOK_UNKNOWN : TOK_CONTROL;
		} else if (i < 259) {
			snprintf(buf, sizeof buf, "<0x%02X>", (unsigned)(i - 3));
			v->ttype[i] = TOK_BYTE;
		} else {
			uint64_t k = i - 259;
			if (k < n_fixed) {
				snprintf(buf, sizeof buf, "%s", spm_pieces[k]);
			} else {
				do {
					char w[16];
					word_of(word / 2, w);
					snprintf(buf, sizeof buf, "%s%s", word % 2 ? "" : SPM_SPACE, w);
					word++;
				} while (is_fixed_piece(buf));
			}
			v->ttype[i] = TOK_NORMAL;
			/* negation, not 0 - k: gcc and clang disagree on the sign of 0.0f - 0.0f
			 * after the u64 conversion; -(float)0 is -0.0 for both */
			v->score[i] = -(float)k;
		}
		v->tok[i] = strdup(buf);
		if (!v->tok[i])
			goto out_nomem;
	}
	return QC_OK;

out_nomem:
	vocab_free(v);
	return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory building the vocab");
}

/* ---- metadata --------------------------------------------------------------------------- */

static int add_hparam(struct qc_gguf_writer *w, const struct hparams *hp, const char *suffix,
		      uint32_t v, struct qc_err *err)
{
	char key[96];
	snprintf(key, sizeof key, "%s.%s", arch_names[hp->arch], suffix);
	return qc_gguf_writer_add_u32(w, key, v, err);
}

static int add_hparam_f32(struct qc_gguf_writer *w, const struct hparams *hp, const char *suffix,
			  float v, struct qc_err *err)
{
	char key[96];
	snprintf(key, sizeof key, "%s.%s", arch_names[hp->arch], suffix);
	return qc_gguf_writer_add_f32(w, key, v, err);
}

/* The full key set of a llama.cpp-converted checkpoint, in convert_hf_to_gguf's order. */
static int add_metadata(struct qc_gguf_writer *w, const struct opts *o, const struct vocab *v,
			struct qc_err *err)
{
	const struct hparams *hp = &o->hp;
	uint32_t hd = (uint32_t)(hp->n_embd / hp->n_head);
	char name[96];
	snprintf(name, sizeof name, "qconvert synthetic %s (%s, seed %llu)", o->preset,
		 qc_types[o->type].name, (unsigned long long)o->seed);
	int rc = qc_gguf_writer_add_str(w, "general.architecture", arch_names[hp->arch], err);
	if (!rc)
		rc = qc_gguf_writer_add_str(w, "general.name", name, err);
	if (!rc)
		rc = add_hparam(w, hp, "vocab_size", (uint32_t)hp->n_vocab, err);
	if (!rc)
		rc = add_hparam(w, hp, "context_length", (uint32_t)hp->n_ctx, err);
	if (!rc)
		rc = add_hparam(w, hp, "embedding_length", (uint32_t)hp->n_embd, err);
	if (!rc)
		rc = add_hparam(w, hp, "block_count", (uint32_t)hp->n_layer, err);
	if (!rc)
		rc = add_hparam(w, hp, "feed_forward_length", (uint32_t)hp->n_ff, err);
	if (!rc)
		rc = add_hparam(w, hp, "rope.dimension_count", hd, err);
	if (!rc)
		rc = add_hparam_f32(w, hp, "rope.freq_base", hp->rope_base, err);
	if (!rc)
		rc = add_hparam(w, hp, "attention.head_count", (uint32_t)hp->n_head, err);
	if (!rc)
		rc = add_hparam(w, hp, "attention.head_count_kv", (uint32_t)hp->n_head_kv, err);
	if (!rc)
		rc = add_hparam_f32(w, hp, "attention.layer_norm_rms_epsilon", hp->rms_eps, err);
	const bool qwen3 = hp->arch == ARCH_QWEN3 || hp->arch == ARCH_QWEN3MOE;
	if (!rc && qwen3)
		rc = add_hparam(w, hp, "attention.key_length", hd, err);
	if (!rc && qwen3)
		rc = add_hparam(w, hp, "attention.value_length", hd, err);
	if (!rc && hp->n_expert)
		rc = add_hparam(w, hp, "expert_count", (uint32_t)hp->n_expert, err);
	if (!rc && hp->n_expert)
		rc = add_hparam(w, hp, "expert_used_count", (uint32_t)hp->n_expert_used, err);
	if (!rc && has_experts(hp->arch))
		rc = add_hparam(w, hp, "expert_feed_forward_length", (uint32_t)hp->n_ff, err);
	if (!rc && hp->arch == ARCH_QWEN2MOE)
		rc = add_hparam(w, hp, "expert_shared_feed_forward_length",
				(uint32_t)(o->hx.n_ff_shexp ? o->hx.n_ff_shexp : hp->n_ff), err);
	const struct hparams_x *hx = &o->hx;
	if (!rc && (hx->rope_scaling == ROPE_LINEAR || hx->rope_scaling == ROPE_YARN)) {
		char key[96];
		snprintf(key, sizeof key, "%s.rope.scaling.type", arch_names[hp->arch]);
		rc = qc_gguf_writer_add_str(w, key, hx->rope_scaling == ROPE_YARN ? "yarn" : "linear", err);
		if (!rc)
			rc = add_hparam_f32(w, hp, "rope.scaling.factor", hx->rope_factor, err);
		if (!rc && hx->rope_scaling == ROPE_YARN)
			rc = add_hparam(w, hp, "rope.scaling.original_context_length",
					(uint32_t)(hx->rope_orig_ctx ? hx->rope_orig_ctx : hp->n_ctx), err);
	}
	for (size_t i = 0; i < sizeof ftypes / sizeof ftypes[0] && !rc; i++)
		if (ftypes[i].type == o->type)
			rc = qc_gguf_writer_add_u32(w, "general.file_type", ftypes[i].ftype, err);
	if (!rc)
		rc = qc_gguf_writer_add_str(w, "tokenizer.ggml.model", "llama", err);
	if (!rc)
		rc = qc_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok,
						v->n, err);
	if (!rc)
		rc = qc_gguf_writer_add_arr(w, "tokenizer.ggml.scores", QC_GGUF_FLOAT32, v->score, v->n, err);
	if (!rc)
		rc = qc_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", QC_GGUF_INT32, v->ttype, v->n,
					    err);
	if (!rc)
		rc = qc_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1, err);
	if (!rc)
		rc = qc_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2, err);
	if (!rc)
		rc = qc_gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 0, err);
	if (!rc)
		rc = qc_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true, err);
	if (!rc)
		rc = qc_gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", false, err);
	if (!rc)
		rc = qc_gguf_writer_add_u32(w, "general.quantization_version", 2, err);
	return rc;
}

/* ---- output files --------------------------------------------------------------------------- */

/* mkdir -p of path's directory, so "-o samples/out/x.gguf" works in a fresh checkout. */
static int make_parent_dirs(const char *path, struct qc_err *err)
{
	char *dir = strdup(path);
	int rc = QC_OK;
	if (!dir)
		return qc_err_set(err, QC_ENOMEM, path, NULL, -1, "out of memory");
	for (char *p = dir + 1; *p && !rc; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(dir, 0777) && errno != EEXIST)
			rc = qc_err_set(err, QC_EIO, path, NULL, -1, "cannot create directory %s: %s", dir,
					strerror(errno));
		*p = '/';
	}
	free(dir);
	return rc;
}

/* One file holding tensors [t0, t1) of the plan; split_count 0 means an unsplit file. */
static int write_one(const struct opts *o, const struct vocab *v, struct tensor_plan *p, size_t n_all,
		     size_t t0, size_t t1, int split_no, int split_count, const char *path,
		     struct gen *g, struct qc_err *err)
{
	struct qc_gguf_writer *w = qc_gguf_writer_new(3, 0);
	if (!w)
		return qc_err_set(err, QC_ENOMEM, path, NULL, -1, "out of memory");
	int rc = QC_OK;
	if (split_no == 0)
		rc = add_metadata(w, o, v, err);
	if (!rc && split_count) {
		rc = qc_gguf_writer_add_u16(w, "split.no", (uint16_t)split_no, err);
		if (!rc)
			rc = qc_gguf_writer_add_u16(w, "split.count", (uint16_t)split_count, err);
		if (!rc)
			rc = qc_gguf_writer_add_i32(w, "split.tensors.count", (int32_t)n_all, err);
	}
	for (size_t i = t0; i < t1 && !rc; i++)
		rc = qc_gguf_writer_add_tensor_fill(w, p[i].name, p[i].type, p[i].n_dims, p[i].ne,
						    fill_tensor, &p[i], err);
	if (!rc) {
		g->label = path;
		rc = qc_gguf_writer_write_file(w, path, err);
	}
	if (rc && !err->path[0])
		qc_err_set(err, err->code, path, err->tensor, err->off, "%s", err->msg);
	qc_gguf_writer_free(w);
	return rc;
}

/* Shard s gets the tensors whose cumulative size ends in (s/N, (s+1)/N] of the total,
 * at least one each; returns the first tensor of shard s. */
static size_t shard_start(const struct tensor_plan *p, size_t n, int n_split, int s)
{
	if (s == 0)
		return 0;
	if (s == n_split)
		return n;
	uint64_t total = plan_bytes(p, n), acc = 0;
	size_t i = 0;
	while (i < n && acc + p[i].n_bytes <= total / (uint64_t)n_split * (uint64_t)s)
		acc += p[i++].n_bytes;
	size_t lo = (size_t)s, hi = n - (size_t)(n_split - s);  /* leave one per shard */
	return i < lo ? lo : i > hi ? hi : i;
}

static int write_model(const struct opts *o, struct qc_err *err)
{
	struct vocab v = { 0 };
	struct tensor_plan *p = NULL;
	size_t n = 0;
	struct gen g = { .n_threads = o->n_threads, .tty = isatty(2) };
	int rc = plan_tensors(&o->hp, &o->hx, o->type, o->seed, &p, &n, err);
	if (rc)
		return rc;
	if (o->split > 0 && (size_t)o->split > n) {
		rc = qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "--split %d exceeds the %zu tensors",
				o->split, n);
		goto out_free_plan;
	}
	g.max_row = o->hp.n_embd > o->hp.n_ff ? o->hp.n_embd : o->hp.n_ff;
	uint64_t max_row_bytes = 0;
	for (size_t i = 0; i < n; i++) {
		p[i].g = &g;
		if (p[i].row_bytes > max_row_bytes)
			max_row_bytes = p[i].row_bytes;
		if (p[i].ne[0] > g.max_row)
			g.max_row = p[i].ne[0];
	}
	bool scratch_ok = (g.edge = malloc(max_row_bytes)) != NULL;
	for (int i = 0; i < g.n_threads; i++)
		scratch_ok &= (g.rows[i] = malloc((size_t)g.max_row * sizeof(float))) != NULL;
	if (!scratch_ok) {
		rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory for scratch rows");
		goto out_free_rows;
	}
	rc = vocab_build(&v, (uint64_t)o->hp.n_vocab, err);
	if (rc)
		goto out_free_rows;
	rc = make_parent_dirs(o->out, err);
	if (rc)
		goto out_free_vocab;
	g.total = plan_bytes(p, n);
	g.t_start = now_s();
	if (o->split <= 1) {
		rc = write_one(o, &v, p, n, 0, n, 0, 0, o->out, &g, err);
	} else {
		size_t len = strlen(o->out);
		size_t stem = len > 5 && strcmp(o->out + len - 5, ".gguf") == 0 ? len - 5 : len;
		char *path = malloc(stem + 32);
		if (!path) {
			rc = qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
			goto out_free_vocab;
		}
		for (int s = 0; s < o->split && !rc; s++) {
			snprintf(path, stem + 32, "%.*s-%05d-of-%05d.gguf", (int)stem, o->out, s + 1, o->split);
			rc = write_one(o, &v, p, n, shard_start(p, n, o->split, s),
				       shard_start(p, n, o->split, s + 1), s, o->split, path, &g, err);
		}
		free(path);
	}
	if (!rc)
		progress(&g, NULL, true);
	else if (g.tty)
		fputc('\n', stderr);

out_free_vocab:
	vocab_free(&v);
out_free_rows:
	for (int i = 0; i < g.n_threads; i++)
		free(g.rows[i]);
	free(g.edge);
out_free_plan:
	free(p);
	return rc;
}

/* ---- command line -------------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " --preset NAME -o OUT.gguf [options]\n"
		"\n"
		"Write a synthetic GGUF v3 checkpoint that llama.cpp can load: llama.cpp tensor\n"
		"names and shapes, the hparam keys it reads, a SentencePiece-style vocab\n"
		"(<unk> <s> </s>, <0x00>..<0xFF>, word pieces), and seeded weights (~N(0, 0.02);\n"
		"norm weights ~1 + N(0, 0.02)). Norms and biases (and the MoE router) are f32,\n"
		"every other matrix is --type. The same seed gives the same bytes whatever\n"
		"--split or --threads. The file appears atomically (temp file + rename);\n"
		"missing parent directories of OUT are created.\n"
		"\n"
		"presets:\n");
	for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
		fprintf(f, "  %-10s %s\n", presets[i].name, presets[i].desc);
	fprintf(f,
		"\n"
		"options:\n"
		"  --type T         f32|f16|bf16|q8_0|q4_0 for the matrices (default f16)\n"
		"  --seed N         weight seed, unsigned 64-bit (default 0)\n"
		"  --split N        N shards OUT-00001-of-0000N.gguf ... (llama.cpp gguf-split\n"
		"                   layout: all keys in the first, split.no/count/tensors.count\n"
		"                   in every shard, tensors in order balanced by bytes);\n"
		"                   N <= 1 writes one plain file\n"
		"  --threads N      generator threads (default: online CPUs, at most %d)\n"
		"  --arch A         llama|mixtral|qwen2|qwen3|qwen2moe|qwen3moe (mixtral = llama\n"
		"                   with experts, 8 experts / 2 used unless given; qwen2 adds q/k/v\n"
		"                   biases, qwen3 adds q/k norms; the moe variants add stacked\n"
		"                   experts (n_ff each), qwen2moe also a shared expert with a\n"
		"                   sigmoid gate; the vocab is always the SPM one)\n"
		"  --rope-scaling S none|linear|yarn|llama3 (llama3: a rope_freqs.weight tensor of\n"
		"                   Llama 3.1 factors, low/high frequency factors 1 and 4)\n"
		"  --rope-factor F  scaling factor (default 4)\n"
		"  --weight-std F   std of matrices and biases (default 0.02; norms keep 0.02)\n"
		"  --tie-embeddings no output.weight (llama.cpp then uses token_embd)\n"
		"  --n-embd N  --n-layer N  --n-ff N  --n-head N  --n-head-kv N  --n-vocab N\n"
		"  --n-expert N  --n-expert-used N  --ctx N  --n-ff-shexp N (qwen2moe; default n_ff)\n"
		"  --rope-orig-ctx N  yarn/llama3 original context (default --ctx)\n"
		"                   override the preset's value (bench4g: an explicit --n-layer\n"
		"                   wins over its size rule)\n"
		"  -h, --help       this text\n"
		"\n"
		"Progress goes to stderr when it is a terminal; nothing is printed otherwise.\n"
		"Exit status: 0 ok, 1 failure, 2 bad usage.\n",
		MAX_THREADS);
}

static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
	char *end;
	if (!s || !*s)
		return false;
	long long v = strtoll(s, &end, 10);
	if (*end || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

static bool parse_u64(const char *s, uint64_t *out)
{
	char *end;
	if (!s || !*s || *s == '-')
		return false;
	unsigned long long v = strtoull(s, &end, 0);
	if (*end)
		return false;
	*out = v;
	return true;
}

/* Check the shape is one llama.cpp accepts and our quant types can encode. */
static int check_hparams(const struct opts *o, struct qc_err *err)
{
	const struct hparams *hp = &o->hp;
	int64_t be = qc_types[o->type].block_elems;
	if (hp->n_embd % hp->n_head || (hp->n_embd / hp->n_head) % 2)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "n_embd %lld must be n_head %lld times an even head size",
				  (long long)hp->n_embd, (long long)hp->n_head);
	if (hp->n_head % hp->n_head_kv)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "n_head %lld not a multiple of n_head_kv %lld",
				  (long long)hp->n_head, (long long)hp->n_head_kv);
	if (hp->n_embd % be || hp->n_ff % be)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "n_embd %lld and n_ff %lld must be multiples of %s's block size %lld",
				  (long long)hp->n_embd, (long long)hp->n_ff, qc_types[o->type].name,
				  (long long)be);
	if (hp->n_vocab < 259)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "n_vocab %lld < 259 (3 specials + 256 byte tokens)", (long long)hp->n_vocab);
	if (hp->n_expert_used > hp->n_expert || (hp->n_expert && !hp->n_expert_used))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "need 0 < n_expert_used <= n_expert, got %lld/%lld",
				  (long long)hp->n_expert_used, (long long)hp->n_expert);
	if (hp->n_expert && hp->arch != ARCH_LLAMA && !has_experts(hp->arch))
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "experts are only generated for mixtral/qwen2moe/qwen3moe, not %s",
				  arch_names[hp->arch]);
	if (has_experts(hp->arch) && !hp->n_expert)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "--arch %s needs --n-expert > 0",
				  arch_names[hp->arch]);
	if (o->hx.rope_scaling == ROPE_LLAMA3 && hp->n_embd / hp->n_head / 2 > MAX_ROPE_FREQS)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "head size too large for rope factors");
	return QC_OK;
}

/* bench-style presets: grow n_layer until the file reaches the preset's size. */
static int size_layers(struct opts *o, uint64_t min_bytes, struct qc_err *err)
{
	struct tensor_plan *p;
	size_t n;
	o->hp.n_layer = 1;
	int rc = plan_tensors(&o->hp, &o->hx, o->type, o->seed, &p, &n, err);
	if (rc)
		return rc;
	uint64_t one = plan_bytes(p, n);
	free(p);
	o->hp.n_layer = 2;
	rc = plan_tensors(&o->hp, &o->hx, o->type, o->seed, &p, &n, err);
	if (rc)
		return rc;
	uint64_t per_layer = plan_bytes(p, n) - one, fixed = one - per_layer;
	free(p);
	o->hp.n_layer = min_bytes > fixed ? (int64_t)((min_bytes - fixed + per_layer - 1) / per_layer) : 1;
	if (o->hp.n_layer < 1)
		o->hp.n_layer = 1;
	return QC_OK;
}

static int parse_args(int argc, char **argv, struct opts *o, bool *help)
{
	const struct preset *pre = NULL;
	struct hparams ov;          /* overrides; -1 = not given */
	struct hparams_x ovx;
	int64_t *fields[] = { &ov.n_embd, &ov.n_layer, &ov.n_ff, &ov.n_head, &ov.n_head_kv,
			      &ov.n_vocab, &ov.n_expert, &ov.n_expert_used, &ov.n_ctx,
			      &ovx.n_ff_shexp, &ovx.rope_orig_ctx };
	static const char *const names[] = { "--n-embd", "--n-layer", "--n-ff", "--n-head",
					     "--n-head-kv", "--n-vocab", "--n-expert",
					     "--n-expert-used", "--ctx", "--n-ff-shexp",
					     "--rope-orig-ctx" };
	static const int64_t lo[] = { 2, 1, 1, 1, 1, 259, 0, 0, 1, 1, 1 };
	int rope_scaling = -1;
	double rope_factor = 4.0, weight_std = 0.0;
	bool tie = false;
	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
		*fields[i] = -1;
	int arch = -1;
	bool mixtral = false;
	const char *type_name = "f16";
	memset(o, 0, sizeof *o);
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	o->n_threads = ncpu < 1 ? 1 : ncpu > MAX_THREADS ? MAX_THREADS : (int)ncpu;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		int64_t x;
		bool matched = false;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			*help = true;
			return 0;
		}
		if (!strcmp(a, "--tie-embeddings")) {
			tie = true;
			continue;
		}
		for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
			if (strcmp(a, names[f]))
				continue;
			if (!parse_i64(val, lo[f], INT32_MAX, &x)) {
				fprintf(stderr, PROG ": %s needs an integer >= %lld\n", a, (long long)lo[f]);
				return 2;
			}
			*fields[f] = x;
			matched = true;
			i++;
		}
		if (matched)
			continue;
		if (!val && a[0] == '-') {
			fprintf(stderr, PROG ": %s: missing value or unknown option (try --help)\n", a);
			return 2;
		}
		if (!strcmp(a, "--preset")) {
			pre = NULL;
			for (size_t p = 0; p < sizeof presets / sizeof presets[0]; p++)
				if (!strcmp(presets[p].name, val))
					pre = &presets[p];
			if (!pre) {
				fprintf(stderr, PROG ": unknown preset '%s' (try --help)\n", val);
				return 2;
			}
		} else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
			o->out = val;
		} else if (!strcmp(a, "--type")) {
			type_name = val;
		} else if (!strcmp(a, "--seed")) {
			if (!parse_u64(val, &o->seed)) {
				fprintf(stderr, PROG ": --seed needs an unsigned integer\n");
				return 2;
			}
		} else if (!strcmp(a, "--split")) {
			if (!parse_i64(val, 0, MAX_SPLIT, &x)) {
				fprintf(stderr, PROG ": --split needs an integer in 0..%d\n", MAX_SPLIT);
				return 2;
			}
			o->split = (int)x;
		} else if (!strcmp(a, "--threads")) {
			if (!parse_i64(val, 1, MAX_THREADS, &x)) {
				fprintf(stderr, PROG ": --threads needs an integer in 1..%d\n", MAX_THREADS);
				return 2;
			}
			o->n_threads = (int)x;
		} else if (!strcmp(a, "--arch")) {
			mixtral = !strcmp(val, "mixtral");
			arch = mixtral ? ARCH_LLAMA : -1;
			for (int k = 0; k < (int)(sizeof arch_names / sizeof arch_names[0]); k++)
				if (!strcmp(val, arch_names[k]))
					arch = k;
			if (arch < 0) {
				fprintf(stderr, PROG ": unknown --arch '%s' (llama|mixtral|qwen2|qwen3|qwen2moe|qwen3moe)\n",
					val);
				return 2;
			}
		} else if (!strcmp(a, "--rope-scaling")) {
			static const char *const rs[] = { "none", "linear", "yarn", "llama3" };
			rope_scaling = -1;
			for (int k = 0; k < 4; k++)
				if (!strcmp(val, rs[k]))
					rope_scaling = k;
			if (rope_scaling < 0) {
				fprintf(stderr, PROG ": unknown --rope-scaling '%s' (none|linear|yarn|llama3)\n", val);
				return 2;
			}
		} else if (!strcmp(a, "--rope-factor") || !strcmp(a, "--weight-std")) {
			char *end;
			double v = strtod(val, &end);
			if (*end || !(v > 0 && v < 1e6)) {
				fprintf(stderr, PROG ": %s needs a positive number\n", a);
				return 2;
			}
			*(!strcmp(a, "--rope-factor") ? &rope_factor : &weight_std) = v;
		} else {
			fprintf(stderr, PROG ": unknown option '%s' (try --help)\n", a);
			return 2;
		}
		i++;
	}
	if (!pre || !o->out) {
		fprintf(stderr, PROG ": %s is required (try --help)\n", !pre ? "--preset" : "-o");
		return 2;
	}
	int t = qc_type_from_name(type_name);
	if (t < 0 || !qc_types[t].quant_row) {
		fprintf(stderr, PROG ": --type '%s' has no encoder (f32|f16|bf16|q8_0|q4_0)\n", type_name);
		return 2;
	}
	o->type = (enum qc_type)t;
	o->preset = pre->name;
	o->hp = pre->hp;
	if (arch >= 0)
		o->hp.arch = (enum arch)arch;
	if (has_experts(o->hp.arch))
		mixtral = true; /* the same expert defaults */
	if (mixtral && !o->hp.n_expert && ov.n_expert < 0) {
		o->hp.n_expert = 8;
		o->hp.n_expert_used = 2;
	}
	int64_t *dst[] = { &o->hp.n_embd, &o->hp.n_layer, &o->hp.n_ff, &o->hp.n_head, &o->hp.n_head_kv,
			   &o->hp.n_vocab, &o->hp.n_expert, &o->hp.n_expert_used, &o->hp.n_ctx,
			   &o->hx.n_ff_shexp, &o->hx.rope_orig_ctx };
	if (rope_scaling >= 0)
		o->hx.rope_scaling = (enum rope_scaling)rope_scaling;
	o->hx.rope_factor = (float)rope_factor;
	o->hx.weight_std = weight_std;
	o->hx.tie_embeddings = tie;
	for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++)
		if (*fields[f] >= 0)
			*dst[f] = *fields[f];
	if (mixtral && !o->hp.n_expert && ov.n_expert < 0)
		o->hp.n_expert = 8;
	if (mixtral && !o->hp.n_expert) {
		fprintf(stderr, PROG ": --arch %s needs --n-expert > 0\n",
			has_experts(o->hp.arch) ? arch_names[o->hp.arch] : "mixtral");
		return 2;
	}
	/* experts without an explicit used count: Mixtral's 2 (or all, if fewer) */
	if (ov.n_expert_used < 0 && o->hp.n_expert && !o->hp.n_expert_used)
		o->hp.n_expert_used = 2;
	if (ov.n_expert_used < 0 && o->hp.n_expert_used > o->hp.n_expert)
		o->hp.n_expert_used = o->hp.n_expert;
	o->min_file_bytes = ov.n_layer < 0 ? pre->min_file_bytes : 0;
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	struct qc_err err = { 0 };
	bool help = false;
	int rc = parse_args(argc, argv, &o, &help);
	if (help) {
		usage(stdout);
		return 0;
	}
	if (rc)
		return rc;
	if (o.min_file_bytes)
		o.hp.n_layer = 1;   /* placeholder until size_layers; check_hparams ignores it */
	rc = check_hparams(&o, &err);
	if (!rc && o.min_file_bytes)
		rc = size_layers(&o, o.min_file_bytes, &err);
	if (!rc)
		rc = write_model(&o, &err);
	if (rc) {
		qc_err_print(&err, PROG, stderr);
		return rc == QC_EINVAL || rc == QC_EUNSUPPORTED ? 2 : 1;
	}
	return 0;
}
