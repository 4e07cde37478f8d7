/* ops.h — plain-C references of the CUDA ops in runtime/cuda/kernels/ (same names).
 *
 * Each qc_ref_<op> computes what qc_cuda_<op> computes, on host arrays, in the
 * simplest order: tests/gpu checks every kernel against it on random inputs.
 * Shapes and layouts are the ones the kernel's args struct documents.
 * The CPU backend (runtime/cpu/backend_cpu.c) runs these same functions for
 * everything but its matmuls (matmul_cpu.c): norms, RoPE, SiLU, adds,
 * act-order gather, embedding, MoE routing and combine, attention. So their
 * numbers are the ones tests/test_engine*.c compare with llama.cpp's.
 * Precision: float data, float math, double where ggml sums in double;
 * gemv_q/gemm_f16 also have a double variant ("truth") for the 2x-error rule.
 * No allocation, no failure.
 */
#ifndef QC_REF_OPS_H
#define QC_REF_OPS_H

#include <stdint.h>

#include "qtype.h"

/* Rotary embedding pairing (llama.cpp LLAMA_ROPE_TYPE_NORM / _NEOX). */
enum qc_rope_mode {
	QC_ROPE_NORM = 0,  /* rotate adjacent pairs (x[2i], x[2i+1]): llama */
	QC_ROPE_NEOX = 2,  /* rotate (x[i], x[i + n_rot/2]): qwen2, qwen3 */
};

/* y[r] = rmsnorm(x[rows ? rows[r] : r]) * w, sum of squares in double; rows of
 * n floats, ldx / ldy apart; y may be x (in place, ldy == ldx). */
void qc_ref_rms_norm(const float *x, int64_t ldx, const int32_t *rows, const float *w, float *y,
		     int64_t ldy, int64_t n_rows, int64_t n, float eps);

/* YaRN / llama3 extras of RoPE (NULL: plain RoPE). */
struct qc_ref_rope_ext {
	float ext_factor;          /* YaRN ramp mix, 0: off */
	float mscale;              /* cos/sin multiplier */
	float corr[2];             /* YaRN ramp bounds in rotated pairs */
	const float *ff;           /* (n_rot / 2) frequency divisors, or NULL */
};

/* In place on x (n_tok, n_heads * hd): token t rotated for position pos[t];
 * NORM (mode 0) or NEOX (mode 2) pairing, theta by repeated products;
 * theta_scale = base^(-2/n_rot) (the caller's powf). */
void qc_ref_rope(float *x, const int32_t *pos, int64_t n_tok, int n_heads, int hd, int n_rot,
		 int mode, float theta_scale, float freq_scale, const struct qc_ref_rope_ext *ext);

/* How gelu_tanh is evaluated: exactly in float, or through binary16 as ggml's
 * CPU backend does (GGML_GELU_FP16 table). */
enum qc_ref_gelu_mode {
	QC_REF_GELU_EXACT = 0,
	QC_REF_GELU_F16_TABLE = 1,
};

/* y[i] = gelu_tanh(g[i]) * u[i]; y may be g or u (gelu_mul.c). */
void qc_ref_gelu_mul(const float *g, const float *u, float *y, int64_t n, enum qc_ref_gelu_mode mode);

/* x[i] *= s (softcap.c). */
void qc_ref_scale(float *x, int64_t n, float s);

/* tanh(x / cap) * cap for one value, and for n in place (softcap.c). */
float qc_ref_softcap1(float x, float cap);
void qc_ref_softcap(float *x, int64_t n, float cap);

/* y[i] = silu(g[i]) * u[i]; y may be g or u. */
void qc_ref_silu_mul(const float *g, const float *u, float *y, int64_t n);

/* ggml's vector exp (ggml_v_expf, AVX2/FMA), one value: what llama.cpp's CPU build
 * uses in soft_max and SiLU (expf_ggml.c). */
float qc_ref_expf_ggml(float x);

/* y[i] += x[i % n_x] (a residual with n_x == n, a bias with n_x = row length). */
void qc_ref_add(float *y, const float *x, int64_t n, int64_t n_x);

/* out[r][i] = x[(r / x_div) * ldx + perm_e(r)[i]] (act-order activations). */
void qc_ref_act_gather(const float *x, int64_t ldx, int32_t x_div, const int32_t *expert, const int32_t *perm,
		       int64_t perm_stride, int64_t n_rows, int64_t k, float *out);

/* out[r]: lowest index of the largest value of row r; -1 if the row has a NaN
 * or +inf, or only -inf. */
void qc_ref_argmax(const float *x, int64_t n_rows, int32_t n, int32_t *out);

/* Rows with k[r] >= 2: the k[r] best (larger, then lower id) at ids/vals + r *
 * stride, best first; ids[r * stride] = -1 for a NaN/+inf/all -inf row. */
void qc_ref_topk(const float *x, int64_t n_rows, int32_t n, const int32_t *k, int32_t stride, int32_t *ids,
		 float *vals);

/* pool: (n_blocks, n_layer, 2, bt, kv_dim) binary16 bits. */
void qc_ref_kv_store(const float *k, const float *v, const int32_t *slots, int64_t n_tok,
		     uint16_t *pool, int layer, int n_layer, int bt, int kv_dim);

/* The fp8 K/V cache's scale: one power of two per (token, layer, K/V, kv head),
 * 2^exp with exp the smallest integer putting the head's largest |x| at or below
 * 448 (E4M3FN's max finite), so no value saturates whatever its magnitude, and a
 * token's codes depend on its own K/V row only (the same alone or in a batch).
 * Dividing by a power of two is exact: the only rounding is the E4M3 one.
 * A head of zeros gets exp 0; a head holding NaN/inf gets exp 0 and NaN codes
 * for those values (fp8 has no inf; it shows as NaN logits, never clamped). */
int8_t qc_ref_kv_e4m3_exp(const float *x, int hd);

/* Whether a head is rotated before it is quantized (the fp8 pool: K yes, V no). */
enum qc_ref_kv_rot {
	QC_REF_KV_ROT_NONE = 0,
	QC_REF_KV_ROT_WHT = 1,     /* qc_ref_kv_rotate */
};

/* The block of qc_ref_kv_rotate for head_dim hd: the largest power of two
 * dividing hd, or 1 (no rotation) below 16: 64 -> 64, 80 -> 16, 96 -> 32,
 * 8 -> 1 (at head_dim 8 the rotation flipped a greedy id at margin 0.77). */
int qc_ref_kv_rot_block(int hd);

/* x (hd floats) <- H x, H block-diagonal with orthonormal Walsh-Hadamard blocks
 * of qc_ref_kv_rot_block(hd) (Sylvester order, scaled by 1/sqrt(block)); H is
 * symmetric and its own inverse, so rotating q and k alike keeps q . k. Why: a
 * few channels of K carry most of its magnitude, and E4M3's 2^-4 relative error
 * on them lands in q . k where q is large too; rotated, every channel holds a
 * mix and the dot product's error falls (docs/serve.md: K fp8 alone +1.34%
 * perplexity, K rotated much less). Floats: sums in the butterfly's order. */
void qc_ref_kv_rotate(float *x, int hd);

/* qc_ref_kv_store into an fp8 pool: codes (n_blocks, n_layer, 2, bt, kv_dim) E4M3FN,
 * exps (n_blocks, n_layer, 2, bt, kv_dim / hd) the heads' scale exponents; value
 * = e4m3(code) * 2^exp. K heads are stored rotated (qc_ref_kv_rotate of the head
 * divided by 2^e0, e0 the exponent of its largest |x|: exact, and keeps the
 * butterfly in range), exp the e0 plus qc_ref_kv_e4m3_exp of the rotated head;
 * V heads as they are, exp = qc_ref_kv_e4m3_exp. Either way no code saturates
 * and a token's bytes depend on its own row. A K head whose rotated values pass
 * float's range (|x| near FLT_MAX / sqrt(block)) decodes as inf, never clamped.
 * CUDA: runtime/cuda/kernels/kv_store.cu qc_cuda_kv_store_e4m3, bit for bit. */
void qc_ref_kv_store_e4m3(const float *k, const float *v, const int32_t *slots, int64_t n_tok,
			  uint8_t *codes, int8_t *exps, int layer, int n_layer, int bt, int kv_dim, int hd);

/* A paged K/V pool: the K (which 0) or V (1) row of slot off of block b in layer
 * il starts at element (((b * n_layer + il) * 2 + which) * bt + off) * kv_dim.
 * Exactly one of f16 (binary16 bits: the CUDA backend's pool), f32 (floats
 * holding binary16 values: the CPU backend's f16 cache) and e4m3 (the CPU
 * backend's fp8 cache, with e4m3_exp) is set. */
struct qc_ref_kv_pool {
	const uint16_t *f16;       /* (n_blocks, n_layer, 2, bt, kv_dim) binary16 bits, or NULL */
	const float *f32;          /* the same shape in floats, or NULL */
	const uint8_t *e4m3;       /* the same shape in E4M3FN codes, or NULL; K rows
				      rotated (qc_ref_kv_store_e4m3), so attention
				      rotates q the same way */
	const int8_t *e4m3_exp;    /* (n_blocks, n_layer, 2, bt, kv_dim / hd) per-head scale
				      exponents (qc_ref_kv_e4m3_exp), with e4m3 */
	int n_layer, bt, kv_dim;
};

/* What q and the softmax weights are rounded to before their products. */
enum qc_ref_attn_round {
	QC_REF_ATTN_F32 = 0,       /* kept as floats (the CUDA kernels' class) */
	QC_REF_ATTN_F16 = 1,       /* rounded to binary16: ggml's mul_mat on an f16 cache */
};

struct qc_ref_attn_args {
	struct qc_ref_kv_pool pool;
	int layer;
	int n_head, n_head_kv, hd; /* GQA: head h reads kv head h / (n_head / n_head_kv) */
	float scale;               /* applied to q . k */
	enum qc_ref_attn_round round;
	float softcap;             /* scores -> tanh(s / softcap) * softcap before softmax; 0: none */
	int32_t window;            /* only the last window positions (pos - j < window); 0: all */
	int32_t n_seq_tokens;      /* tokens of this token's sequence in this forward: with
				      QC_REF_ATTN_F16 on a float pool llama.cpp's order is
				      tinyBLAS tiles for 2 or more, ggml_vec_dot_f16 for 1 */
};

/* Causal attention of one token at position pos over positions 0..pos (with a
 * window W: max(0, pos - W + 1)..pos, llama.cpp's SWA mask) of its
 * sequence: q, out (n_head * hd) floats; table: the sequence's block ids
 * (pos / bt + 1 used); scratch: (2 * hd + pos + 1) floats of the caller's.
 * Dots in double (four partial sums), softmax sum in double, ·V in float. */
void qc_ref_attn_token(const struct qc_ref_attn_args *a, const float *q, float *out, int32_t pos,
		       const int32_t *table, float *scratch);

/* qc_ref_attn_token for heads h0..h1-1 only (0 <= h0 <= h1 <= n_head): each head
 * is computed alone, so splitting a token's heads over calls changes no bit. */
void qc_ref_attn_token_heads(const struct qc_ref_attn_args *a, const float *q, float *out, int32_t pos,
			     const int32_t *table, float *scratch, int h0, int h1);

/* out (n_tok, n_head * hd); tables (n_seqs, stride): qc_ref_attn_token per
 * token on a binary16 pool, QC_REF_ATTN_F32. */
void qc_ref_paged_attn(const float *q, float *out, const uint16_t *pool, int layer, int n_layer,
		       int bt, int n_head, int n_head_kv, int hd, const int32_t *pos,
		       const int32_t *tok_seq, const int32_t *tables, int stride, int64_t n_tok,
		       float scale);

/* qc_ref_paged_attn for the tokens of runs of min_run+ consecutive plan tokens of
 * one sequence at consecutive positions in 0..max_ctx-1 (done (n_tok): 1 for
 * those, 0 else); other rows of out are not written. */
void qc_ref_flash_attn(const float *q, float *out, int32_t *done, const uint16_t *pool, int layer, int n_layer,
		       int bt, int n_head, int n_head_kv, int hd, const int32_t *pos, const int32_t *tok_seq,
		       const int32_t *tables, int stride, int64_t n_tok, int32_t max_ctx, float scale,
		       int32_t min_run);

/* out (n_tok, n_embd): row ids[t] - vocab0 of w (n_rows rows row_bytes apart)
 * decoded for ids in [vocab0, vocab0 + n_rows), zeros for the others (a
 * tensor-parallel rank's vocabulary share; 0 and the vocabulary otherwise). */
void qc_ref_embed(const uint8_t *w, enum qc_type type, uint64_t row_bytes, int64_t n_embd,
		  const int32_t *ids, int64_t n_tok, int64_t vocab0, int64_t n_rows, float *out);

/* Per token: softmax of the n_expert logits (sum in double), the k best
 * (larger, then lower id) in sel (n_tok, k) and their probabilities in w
 * (n_tok, k); norm: w divided by its double sum, clamped to 2^-14. */
void qc_ref_moe_route(const float *logits, int64_t n_tok, int n_expert, int k, int norm, int32_t *sel,
		      float *w);

/* x[t] += sum over s in order of w[t,s] * eout[t*k+s] (each product rounded),
 * then + sh[t] * silu(shg[t]) / shg[t] when sh is given (NULL: no shared expert). */
void qc_ref_moe_combine(float *x, const float *eout, const float *w, int64_t n_tok, int64_t n, int k,
			const float *sh, const float *shg);

/* y[r*ldy + o] = W_{e(r)}[o] . x[(r / x_div) * ldx]; e(r) = expert ? expert[r] : 0.
 * truth != 0: products and sums in double (the fp64 truth); else a float
 * running sum (a plain same-precision reference). */
void qc_ref_gemv_q(const uint8_t *w, enum qc_type type, int64_t n_in, int64_t n_out,
		   uint64_t row_bytes, uint64_t mat_stride, const float *x, int64_t ldx, int x_div,
		   const int32_t *expert, int64_t n_rows, float *y, int64_t ldy, int truth);

/* dst = fp16 bits of decode(src rows). */
void qc_ref_dequant_f16(const uint8_t *src, enum qc_type type, uint64_t row_bytes, int64_t n_rows,
			int64_t n, uint16_t *dst);

/* As qc_ref_gemv_q for one matrix with weights and activations rounded to
 * fp16 first (F32 weights: not rounded), products summed in double. */
void qc_ref_gemm_f16(const uint8_t *w, enum qc_type type, int64_t n_in, int64_t n_out,
		     uint64_t row_bytes, const float *x, int64_t ldx, int64_t n_rows, float *y,
		     int64_t ldy);

/* As qc_ref_gemv_q with experts (n_mat matrices, mat_stride bytes apart),
 * every weight (F32 too) and activation rounded to fp16 first, products summed
 * in double; a row whose expert is outside [0, n_mat) gets NaN. */
void qc_ref_moe_gemm(const uint8_t *w, enum qc_type type, int64_t n_in, int64_t n_out, uint64_t row_bytes,
		     uint64_t mat_stride, int64_t n_mat, const float *x, int64_t ldx, int x_div,
		     const int32_t *expert, int64_t n_rows, float *y, int64_t ldy);

/* Precision of a matmul reference: a float running sum (the kernel's class), the
 * fp64 truth, or weights and activations rounded to fp16 with double sums (the
 * fp16 + cuBLAS paths'). */
enum qc_ref_prec {
	QC_REF_F32 = 0,
	QC_REF_F64 = 1,
	QC_REF_F16 = 2,
};

/* y[i] = x[0][i] + x[1][i] + .. + x[n_ranks - 1][i], added in that order (the
 * tensor-parallel all-reduce's sum, tp_allreduce.cu); n_ranks >= 1, y may be x[0]. */
void qc_ref_tp_sum(const float *const *x, int n_ranks, int64_t n, float *y);

/* W8A8 FP8 (runtime/cuda/kernels/fp8_gemm.cu): rows t < n_rows of x (stride ldx) rounded
 * to e4m3 by quant/act_fp8.h under activation scale a (> 0 static, else dynamic per
 * row): codes (n_rows, k) and each row's scale. */
void qc_ref_fp8_act_quant(const float *x, int64_t ldx, int64_t n_rows, int64_t k, float a, uint8_t *codes,
			  float *scales);
/* The activation scale a stored in an fp8_rows matrix (quant/layout_fp8.h). */
float qc_ref_fp8_rows_act_scale(const uint8_t *w, int64_t n_in, int64_t n_out);
/* y[t * ldy + o] = d[o] * s[t] * sum_i e4m3(w[o][i]) * e4m3(xc[t][i]) in double, for W
 * in the fp8_rows layout (one matrix) and x rounded as qc_ref_fp8_act_quant does.
 * QC_ENOMEM when its buffers cannot be had. */
int qc_ref_fp8_gemm(const uint8_t *w, int64_t n_in, int64_t n_out, const float *x, int64_t ldx, int64_t n_rows,
		    float *y, int64_t ldy);

/* As qc_ref_gemv_q for nvfp4 weights in the nvfp4_swz layout (quant/layout_nvfp4.h):
 * w = matrix 0's slice, n_in = K, n_out = N rows, matrices mat_stride bytes apart;
 * weights decoded from the packed bytes by docs/layout-nvfp4.md's formulas. */
void qc_ref_nvfp4_swz(const uint8_t *w, int64_t n_in, int64_t n_out, uint64_t mat_stride, const float *x,
		      int64_t ldx, int x_div, const int32_t *expert, int64_t n_rows, float *y, int64_t ldy,
		      enum qc_ref_prec prec);

#endif
