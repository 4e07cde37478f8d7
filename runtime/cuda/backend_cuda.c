/* backend_cuda.c — the CUDA backend: llama forward over a scheduler plan on one GPU.
 *
 * Owns: create/destroy and every activation buffer, all sized at create. The
 * K/V pool (binary16, or fp8 as the CPU's) is backend_cuda_kv.c's.
 * Weights: backend_cuda_weights.c; matmuls: backend_cuda_mm.c (the layout table
 * picks the kernel kind); knobs: backend_cuda_env.c, read once here.
 * Forward: plan arrays up in one copy, kernels of runtime/cuda/kernels/ on one stream
 * (MoE routing on the device), logits down in one copy: the step's only host
 * sync. A dense layer takes the fused entry points of backend_cuda_mm.c (norm, Q|K|V,
 * gate|up, SwiGLU and residual adds inside the GEMV where its kind can: docs/cuda.md
 * "One decode layer"); a residual the kind cannot add waits in d_pend for the next
 * norm. Decode steps (every row wants logits, at most GRAPH_MAX_ROWS rows) replay a CUDA graph
 * per shape (backend_cuda_graph.h); QC_PROFILE=1 times the phases instead
 * (backend_cuda_prof.h).
 * Sampling: forward_top brings back the argmax (greedy rows) or the top-k
 * candidates (topk.cu) instead of the row where the sampler allows.
 * Non-goals (yet): a grouped MoE GEMM for the marlin layouts, device sampling
 * of rows without a top-k cut. (Flash prefill attention is chosen inside
 * qc_cuda_paged_attn, flash_attn.cu; QC_CUDA_FLASH=0 turns it off, docs/cuda.md.)
 * Act-order weights get their activations gathered first (act_gather.cu);
 * YaRN, llama3 rope_freqs and sigmoid-gated shared experts as the CPU backend.
 * Gemma 2 / Gemma 3 / Phi-3 as the CPU backend computes them (backend_cpu.c):
 * embeddings scaled, q scaled after RoPE (the attention's scale), soft-capped
 * scores and logits, a window per layer, Gemma 3's local RoPE base, GELU-tanh
 * (a kernel of its own: the GEMV fuses SiLU only), and post-attention/post-FFN
 * norms: the O / down output normed first, then added by the next norm (never
 * in the GEMV's store); Phi-3's LongRoPE table chosen for max_ctx at create,
 * its fused q|k|v and gate|up weights row views (model.c) like any other.
 * Tensor parallelism (p->tp, docs/tp.md): this instance runs one rank's shard on
 * device p->device (its cfg holds the rank's widths) and sums partial rows with
 * NCCL on its stream (backend_cuda_tp.c): after the vocabulary-sharded embedding,
 * the O projection, the FFN down projection and the MoE combine; each sum then
 * waits in d_pend for the next norm (the GEMV's residual-add store is not used).
 * Without p->tp nothing of it runs: the same kernels as before.
 */
#include "backend_cuda_int.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/act_gather.h"
#include "kernels/add.h"
#include "kernels/argmax.h"
#include "kernels/embed.h"
#include "kernels/gelu_mul.h"
#include "kernels/matmul_dispatch.h"
#include "kernels/moe_combine.h"
#include "kernels/moe_gemm.h"
#include "kernels/moe_route.h"
#include "kernels/paged_attn.h"
#include "kernels/pdl.h"
#include "kernels/rms_norm.h"
#include "kernels/rope_kv.h"
#include "kernels/silu_mul.h"
#include "kernels/softcap.h"
#include "kernels/topk.h"
#include "fp16.h"
#include "backend_cuda_graph.h"
#include "backend_cuda_prof.h"

#define GRAPH_MAX_ROWS 256             /* steps of more rows run eagerly (launches amortized) */
#define GRAPH_CACHE 64                 /* step shapes kept as instantiated graphs */

/* Split-K arrival counters for the widest matmul output: one per 32 outputs per
 * activation row of a GEMV launch (at most 4 rows share one, marlin_gemv.cu). */
static int64_t flag_count(const struct qc_model_config *cfg, int64_t q_dim)
{
	int64_t n = cfg->n_vocab;
	const int64_t w[] = {q_dim, cfg->n_embd, cfg->n_ff, cfg->n_ff_shexp, cfg->n_expert};
	for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
		n = w[i] > n ? w[i] : n;
	return 4 * (n / 32 + 1);
}

/* Floats of every activation buffer create allocates (kv_limits subtracts them). */
static uint64_t buffer_floats(const struct qc_model_config *cfg, const struct qc_backend_params *p)
{
	const uint64_t T = (uint64_t)p->max_tokens, E = (uint64_t)cfg->n_embd, F = (uint64_t)cfg->n_ff;
	const uint64_t K = cfg->n_expert ? (uint64_t)cfg->n_expert_used : 1, X = (uint64_t)cfg->n_expert;
	const uint64_t KF = K * F > (uint64_t)cfg->n_ff_shexp ? K * F : (uint64_t)cfg->n_ff_shexp;
	const uint64_t q = (uint64_t)cfg->n_head * (uint64_t)cfg->head_dim;
	const uint64_t kv = (uint64_t)cfg->n_head_kv * (uint64_t)cfg->head_dim;
	const uint64_t wide = q > E ? q : E, L = (uint64_t)p->max_logits, V = (uint64_t)cfg->n_vocab;
	return T * E + 2 * T * wide + T * q + 2 * T * kv + 2 * T * KF + T * X + 2 * T * K +
	       T * K * E + L * E + L * V + T + (uint64_t)flag_count(cfg, (int64_t)q); /* counters: 4 bytes too */
}

static uint64_t plan_ints(const struct qc_backend_params *p)
{
	const uint64_t stride = ((uint64_t)p->max_ctx + (uint64_t)p->block_tokens - 1) / (uint64_t)p->block_tokens + 1;
	return 4 * (uint64_t)p->max_tokens + 2 * (uint64_t)p->max_logits + (uint64_t)p->max_logits * stride + 64;
}

static void cuda_destroy(void *state)
{
	struct cu *c = state;
	if (!c)
		return;
	if (c->p.tp)
		cudaSetDevice(c->p.device);
	if (c->st)
		cudaStreamSynchronize(c->st);
	qc_cuda_graphs_free(c->graphs); /* before the communicator: graphs hold NCCL work */
	qc_cuda_be_tp_end(c);           /* before the buffers it may have registered */
	qc_cuda_prof_free(c->prof, stderr);
	for (int i = 0; i < c->n_allocs; i++)
		cudaFree(c->allocs[i]);
	if (c->h_plan)
		cudaFreeHost(c->h_plan);
	if (c->h_logits)
		cudaFreeHost(c->h_logits);
	if (c->h_argmax)
		cudaFreeHost(c->h_argmax);
	if (c->h_top_ids)
		cudaFreeHost(c->h_top_ids);
	if (c->h_top_vals)
		cudaFreeHost(c->h_top_vals);
	if (c->blas)
		cublasDestroy(c->blas);
	if (c->st)
		cudaStreamDestroy(c->st);
	free(c->allocs);
	free(c->convs);
	free(c->l2_seq);
	free(c->L);
	free(c);
}

/* A device is there; p->device is one of them and current on this thread (every
 * entry point calls this first: a tensor-parallel rank's thread drives its own GPU). */
static int check_device(const struct qc_backend_params *p, struct qc_err *err)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n < 1)
		return qc_err_set(err, QC_ECUDA, NULL, NULL, -1, "no CUDA device (%s)",
				  e != cudaSuccess ? cudaGetErrorString(e) : "none found");
	if (p->device < 0 || p->device >= n)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "CUDA device %d: this machine has %d (0..%d)", p->device,
				  n, n - 1);
	return qc_cuda_be_ck(cudaSetDevice(p->device), "cudaSetDevice", err);
}

/* Programmatic dependent launch (kernels/pdl.h) on compute capability 9.0 and up: a
 * process-wide switch, set here for every later launch. QC_CUDA_PDL=1/0 forces it;
 * on by default. Measured on one H100 (docs/perf-notes.md): once the decode GEMV
 * streamed (marlin_gemv_stream.cu, whose first weight loads go out before the
 * wait), decode gained 5% on the 8B Q4_0 shape, 2% on Q4_K_M, 4% on a 0.14 GB
 * model, and moved Q8_0 by -1% (noise); before it, the 8B shapes lost up to 4.7%,
 * which is why it was on only under 1 GiB of weights then. */
static int pdl_setup(struct cu *c, struct qc_err *err)
{
	int dev = 0, major = 0, rc;
	if ((rc = qc_cuda_be_ck(cudaGetDevice(&dev), "cudaGetDevice", err)) ||
	    (rc = qc_cuda_be_ck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev),
				"cudaDeviceGetAttribute", err)))
		return rc;
	const bool want = c->env.pdl != 0; /* -1 (unset): on */
	qc_cuda_pdl_set(want && major >= 9);
	return QC_OK;
}

/* Hopper's row columns for the marlin layouts (compute capability 9.0). The
 * warp-specialized wgmma GEMM (marlin_wgmma_ws.cu, the tune's form 1) beats the
 * weight decoded to fp16 + cuBLAS on decode steps (fourteenth session, H200, 8B
 * Q4_0, decode tok/s: 128 rows 9,274 -> 11,028, 192: 11,816 -> 13,490, 256:
 * 13,870 -> 15,998; 96: 7,366 -> 8,908) and loses from 384 rows (15,367 -> 11,981:
 * three 128-token blocks) and on prefill steps of thousands of rows (pp512 x 8:
 * 33.8k -> 26.5k; one 28672 x 4096 GEMM of 1024 rows 511 us against 394 + the
 * decode). So by default it runs 65-256 rows (the mma.sync kernel's second 64-row
 * tile starts at 65) and the f16+cublas column starts at 257. QC_MARLIN_CUBLAS_ROWS or QC_MARLIN_WGMMA_ROWS given: the twelfth
 * session's rule, the column from 65 rows and wgmma off, or with QC_MARLIN_WGMMA_ROWS
 * at most 128 the tenth session's table (wgmma to 192 rows, the column from 193;
 * the vocabulary matrix, which never takes the fp16 copy, keeps the GEMM past it).
 * Before any scratch is sized. */
#define HOPPER_BLAS_MIN_ROWS 65
#define HOPPER_WS_MIN_ROWS 65
#define HOPPER_WS_BLAS_ROWS 257
static int wgmma_setup(struct cu *c, struct qc_err *err)
{
	int dev = 0, major = 0, minor = 0, rc;
	if ((rc = qc_cuda_be_ck(cudaGetDevice(&dev), "cudaGetDevice", err)) ||
	    (rc = qc_cuda_be_ck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev),
				"cudaDeviceGetAttribute", err)) ||
	    (rc = qc_cuda_be_ck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev),
				"cudaDeviceGetAttribute", err)))
		return rc;
	int64_t max_rows = INT64_MAX;
	if (major == 9 && minor == 0 && !c->env.cublas_rows_given && !c->env.wgmma_rows_given &&
	    c->env.mm.wgmma_form >= 1) {
		c->env.mm.wgmma_rows = HOPPER_WS_MIN_ROWS;
		c->env.mm.rows.blas_min_rows = HOPPER_WS_BLAS_ROWS;
	} else if (major == 9 && minor == 0 && !c->env.cublas_rows_given) {
		if (c->env.mm.wgmma_rows > 0 && c->env.mm.wgmma_rows <= 128) {
			c->env.mm.rows.blas_min_rows = 193;
			max_rows = 192;
		} else if (c->env.mm.wgmma_rows <= 0) {
			c->env.mm.rows.blas_min_rows = HOPPER_BLAS_MIN_ROWS;
		}
	}
	qc_cuda_marlin_gemm_wgmma_rows(c->env.mm.wgmma_rows, max_rows);
	return QC_OK;
}

/* Everything of create but a tensor-parallel rank's communicator: *out is the
 * state, also when it fails part way (the caller destroys it), or NULL. */
static int create_local(const struct qc_model *m, const struct qc_backend_params *p, struct cu **out,
			struct qc_err *err)
{
	const struct qc_model_config *cfg = &m->cfg;
	bool warned[QC_TYPE_COUNT] = {false};
	struct cu *c;
	int rc;

	*out = NULL;
	if (p->n_blocks < 1 || p->block_tokens < 1 || p->max_tokens < 1 || p->max_logits < 1 || p->max_ctx < 1)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "backend parameters must be positive");
	if ((rc = qc_model_check_backend(m, QC_ARCH_BACKEND_CUDA, err)) || (rc = qc_cuda_be_kv_check(p, err)) ||
	    (rc = check_device(p, err)))
		return rc;
	if (m->tp.rank < 0) /* qc_model_open of a --tp bundle: the description, no weights */
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "a tensor-parallel bundle runs one rank per backend "
				  "(qc_model_rank_open), not the whole model");
	if (p->tp && (m->tp.rank != p->tp_rank || m->tp.size != qc_tp_group_size(p->tp)))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "tensor-parallel rank %d of %d given the shard of rank %d of %d", p->tp_rank,
				  qc_tp_group_size(p->tp), m->tp.rank, m->tp.size);
	if (!p->tp && m->tp.size != 1)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "rank %d of a %d-way tensor-parallel bundle without its group", m->tp.rank, m->tp.size);
	if (p->act_round != QC_ACT_ROUND_NONE)
		QC_WARN_ONCE("cuda: activation rounding emulation is CPU-only; the CUDA backend uses float activations");
	c = calloc(1, sizeof *c);
	if (!c)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	*out = c;
	c->m = m;
	c->p = *p;
	qc_cuda_env_read(&c->env);
	if ((rc = wgmma_setup(c, err)))
		return rc;
	qc_cuda_marlin_gemv_stream_tune(c->env.mm.stream_blocks, c->env.mm.stream_min_wt);
	qc_cuda_marlin_gemv_stream_cluster(c->env.mm.stream_cluster);
	qc_cuda_marlin_gemv_stream_xq(c->env.mm.stream_xq); /* -1, 0, 8 or 16: checked by env_read */
	qc_cuda_marlin_gemv_stream_ring(c->env.mm.stream_ring);
	qc_cuda_marlin_gemv_stream_persist(c->env.mm.stream_persist);
	qc_cuda_marlin_gemv_stream_wave(c->env.mm.stream_wave);
	qc_cuda_marlin_gemv_norm_once(c->env.mm.norm_once);
	qc_cuda_marlin_gemm_wgmma_tune(c->env.mm.wgmma_stages, c->env.mm.wgmma_groups, c->env.mm.wgmma_split_free,
				       c->env.mm.wgmma_form);
	qc_cuda_marlin_moe_rows(c->env.mm.moe_rows);
	c->L = calloc((size_t)cfg->n_layer, sizeof *c->L);
	if (!c->L)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	if ((rc = qc_cuda_be_ck(cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking), "cudaStreamCreate", err)))
		return rc;
	if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS) {
		c->blas = NULL;
		return qc_err_set(err, QC_ECUDA, NULL, NULL, -1, "cublasCreate failed");
	}
	/* a workspace of its own: cuBLAS then allocates nothing inside a graph capture */
	void *blas_ws = NULL;
	if ((rc = qc_cuda_be_dalloc(c, (size_t)32 << 20, &blas_ws, err)))
		return rc;
	if (cublasSetStream(c->blas, c->st) != CUBLAS_STATUS_SUCCESS ||
	    cublasSetWorkspace(c->blas, blas_ws, (size_t)32 << 20) != CUBLAS_STATUS_SUCCESS)
		return qc_err_set(err, QC_ECUDA, NULL, NULL, -1, "cublasSetWorkspace failed");
	if ((rc = qc_cuda_be_upload_file(c, err)) || (rc = pdl_setup(c, err)))
		return rc;

	/* weights and small vectors */
	if ((rc = qc_cuda_be_make_dmat(c, &m->token_embd, "token_embd.weight", &c->tok, warned, err)) ||
	    (rc = qc_cuda_be_make_dmat(c, &m->output, "output.weight", &c->out, warned, err)) ||
	    (rc = qc_cuda_be_upload_vec(c, m->output_norm, cfg->n_embd, &c->d_out_norm, err)) ||
	    (rc = qc_cuda_be_upload_vec(c, qc_model_rope_factors(m, p->max_ctx), cfg->rope_dim / 2, &c->d_rope_ff, err)))
		return rc;
	c->q_dim = (int64_t)cfg->n_head * cfg->head_dim;
	c->kv_dim = (int64_t)cfg->n_head_kv * cfg->head_dim;
	c->wide = c->q_dim > cfg->n_embd ? c->q_dim : cfg->n_embd;
	for (int il = 0; il < cfg->n_layer; il++) {
		const struct qc_layer *ml = &m->layers[il];
		struct dlayer *L = &c->L[il];
		char nm[64];
		snprintf(nm, sizeof nm, "blk.%d", il);
		if ((rc = qc_cuda_be_make_dmat(c, &ml->wq, nm, &L->wq, warned, err)) ||
		    (rc = qc_cuda_be_make_dmat(c, &ml->wk, nm, &L->wk, warned, err)) ||
		    (rc = qc_cuda_be_make_dmat(c, &ml->wv, nm, &L->wv, warned, err)) ||
		    (rc = qc_cuda_be_make_dmat(c, &ml->wo, nm, &L->wo, warned, err)) ||
		    (rc = qc_cuda_be_make_dmat(c, &ml->ffn_gate, nm, &L->gate, warned, err)) ||
		    (rc = qc_cuda_be_make_dmat(c, &ml->ffn_up, nm, &L->up, warned, err)) ||
		    (rc = qc_cuda_be_make_dmat(c, &ml->ffn_down, nm, &L->down, warned, err)) ||
		    (rc = qc_cuda_be_make_dmat(c, &ml->gate_inp, nm, &L->gate_inp, warned, err)) ||
		    (rc = qc_cuda_be_make_dmat(c, &ml->gate_exps, nm, &L->gate_exps, warned, err)) ||
		    (rc = qc_cuda_be_make_dmat(c, &ml->up_exps, nm, &L->up_exps, warned, err)) ||
		    (rc = qc_cuda_be_make_dmat(c, &ml->down_exps, nm, &L->down_exps, warned, err)) ||
		    (rc = qc_cuda_be_make_dmat(c, &ml->gate_inp_shexp, nm, &L->gate_inp_sh, warned, err)) ||
		    (rc = qc_cuda_be_make_dmat(c, &ml->gate_shexp, nm, &L->gate_sh, warned, err)) ||
		    (rc = qc_cuda_be_make_dmat(c, &ml->up_shexp, nm, &L->up_sh, warned, err)) ||
		    (rc = qc_cuda_be_make_dmat(c, &ml->down_shexp, nm, &L->down_sh, warned, err)) ||
		    (rc = qc_cuda_be_upload_vec(c, ml->attn_norm, cfg->n_embd, &L->d_attn_norm, err)) ||
		    (rc = qc_cuda_be_upload_vec(c, ml->ffn_norm, cfg->n_embd, &L->d_ffn_norm, err)) ||
		    (rc = qc_cuda_be_upload_vec(c, ml->bq, c->q_dim, &L->d_bq, err)) ||
		    (rc = qc_cuda_be_upload_vec(c, ml->bk, c->kv_dim, &L->d_bk, err)) ||
		    (rc = qc_cuda_be_upload_vec(c, ml->bv, c->kv_dim, &L->d_bv, err)) ||
		    (rc = qc_cuda_be_upload_vec(c, ml->q_norm, cfg->head_dim, &L->d_q_norm, err)) ||
		    (rc = qc_cuda_be_upload_vec(c, ml->k_norm, cfg->head_dim, &L->d_k_norm, err)) ||
		    (rc = qc_cuda_be_upload_vec(c, ml->attn_post_norm, cfg->n_embd, &L->d_attn_post_norm, err)) ||
		    (rc = qc_cuda_be_upload_vec(c, ml->ffn_post_norm, cfg->n_embd, &L->d_ffn_post_norm, err)))
			return rc;
	}

	if ((rc = qc_cuda_be_l2_order(c, err)))
		return rc;

	/* K/V pool and activations */
	const size_t T = (size_t)p->max_tokens, E = (size_t)cfg->n_embd, F = (size_t)cfg->n_ff;
	const size_t K = cfg->n_expert ? (size_t)cfg->n_expert_used : 1, X = (size_t)cfg->n_expert;
	const size_t FSH = (size_t)cfg->n_ff_shexp, KF = K * F > FSH ? K * F : FSH;
	const size_t LG = (size_t)p->max_logits, V = (size_t)cfg->n_vocab;
	/* the widest matmul input: n_embd (Q/K/V, gate/up), n_ff (down), q_dim (wo) */
	size_t max_in = E > F ? E : F;
	max_in = FSH > max_in ? FSH : max_in;
	max_in = (size_t)c->q_dim > max_in ? (size_t)c->q_dim : max_in;
	c->block_elems = (size_t)cfg->n_layer * 2 * (size_t)p->block_tokens * (size_t)c->kv_dim;
	c->plan_cap = (size_t)plan_ints(p);
	c->table_stride = (int32_t)(((int64_t)p->max_ctx + p->block_tokens - 1) / p->block_tokens + 1);
	c->prof = qc_cuda_prof_new();
	c->graphs = c->prof ? NULL : qc_cuda_graphs_new(GRAPH_CACHE);
	c->ws_bytes = qc_cuda_be_ws_need(c);
	{ /* the split-K attention shares the scratch (it runs between matmuls, on one stream):
	     room for a step of max_logits tokens at once, larger steps go in slices */
		const uint64_t aw = qc_cuda_paged_attn_ws_bytes(p->max_logits, cfg->n_head, cfg->head_dim, p->max_ctx);
		c->ws_bytes = aw > c->ws_bytes ? aw : c->ws_bytes;
	}
	if ((rc = qc_cuda_be_kv_alloc(c, err)) || (rc = qc_cuda_be_dfloats(c, T * E, &c->d_x, err)) || (rc = qc_cuda_be_dfloats(c, T * (size_t)c->wide, &c->d_xn, err)) ||
	    (rc = qc_cuda_be_dfloats(c, T * (size_t)c->q_dim, &c->d_q, err)) ||
	    (rc = qc_cuda_be_dfloats(c, T * (size_t)c->kv_dim, &c->d_k, err)) ||
	    (rc = qc_cuda_be_dfloats(c, T * (size_t)c->kv_dim, &c->d_v, err)) ||
	    (rc = qc_cuda_be_dfloats(c, T * (size_t)c->wide, &c->d_att, err)) || (rc = qc_cuda_be_dfloats(c, T * KF, &c->d_fa, err)) ||
	    (rc = qc_cuda_be_dfloats(c, T * KF, &c->d_fb, err)) || (FSH && (rc = qc_cuda_be_dfloats(c, T, &c->d_shg, err))) || (rc = qc_cuda_be_dfloats(c, T * (X ? X : 1), &c->d_router, err)) ||
	    (rc = qc_cuda_be_dfloats(c, T * K, &c->d_selw, err)) ||
	    (rc = qc_cuda_be_dalloc(c, T * K * sizeof(int32_t), (void **)&c->d_sel, err)) ||
	    (rc = qc_cuda_be_dfloats(c, (X ? T * K : 1) * E, &c->d_eout, err)) || (rc = qc_cuda_be_dfloats(c, LG * E, &c->d_lx, err)) ||
	    (rc = qc_cuda_be_dfloats(c, LG * V, &c->d_logits, err)) ||
	    (rc = qc_cuda_be_dalloc(c, c->plan_cap * sizeof(int32_t), (void **)&c->d_plan, err)) ||
	    (rc = qc_cuda_be_dalloc(c, c->ws_bytes, &c->d_ws, err)) ||
	    (rc = qc_cuda_be_dalloc(c, (size_t)(c->n_flags = flag_count(cfg, c->q_dim)) * sizeof(uint32_t),
				    (void **)&c->d_flags, err)) ||
	    (rc = qc_cuda_be_ck(cudaMallocHost((void **)&c->h_plan, c->plan_cap * sizeof(int32_t)), "cudaMallocHost", err)) ||
	    (rc = qc_cuda_be_dalloc(c, LG * sizeof(int32_t), (void **)&c->d_argmax, err)) ||
	    (c->any_perm && (rc = qc_cuda_be_dfloats(c, (size_t)(c->xperm_cap = (int64_t)(T * K * max_in)),
					  &c->d_xperm, err))) ||
	    (rc = qc_cuda_be_ck(cudaMallocHost((void **)&c->h_logits, LG * V * sizeof(float)), "cudaMallocHost", err)) ||
	    (rc = qc_cuda_be_ck(cudaMallocHost((void **)&c->h_argmax, LG * sizeof(int32_t)), "cudaMallocHost", err)) ||
	    (rc = qc_cuda_be_dalloc(c, LG * QC_BACKEND_TOP_MAX * sizeof(int32_t), (void **)&c->d_top_ids, err)) ||
	    (rc = qc_cuda_be_dfloats(c, LG * QC_BACKEND_TOP_MAX, &c->d_top_vals, err)) ||
	    (rc = qc_cuda_be_ck(cudaMallocHost((void **)&c->h_top_ids, LG * QC_BACKEND_TOP_MAX * sizeof(int32_t)),
		     "cudaMallocHost", err)) ||
	    (rc = qc_cuda_be_ck(cudaMallocHost((void **)&c->h_top_vals, LG * QC_BACKEND_TOP_MAX * sizeof(float)),
		     "cudaMallocHost", err)))
		return rc;
	if ((rc = qc_cuda_be_ck(cudaMemsetAsync(c->d_flags, 0, (size_t)c->n_flags * sizeof(uint32_t), c->st),
				"cudaMemset (flags)", err)) ||
	    (rc = qc_cuda_be_ck(cudaStreamSynchronize(c->st), "cudaStreamSynchronize", err)))
		return rc;
	return QC_OK;
}

static int cuda_create(const struct qc_model *m, const struct qc_backend_params *p, void **state,
		       struct qc_err *err)
{
	struct cu *c = NULL;
	*state = NULL;
	int rc = create_local(m, p, &c, err);
	if (p->tp) /* every rank, also one that failed: the others wait for its word */
		rc = qc_cuda_be_tp_start(c, p, rc, err);
	if (rc) {
		cuda_destroy(c);
		return rc;
	}
	*state = c;
	return QC_OK;
}

static int rms(struct cu *c, const float *d_x, int64_t ldx, const int32_t *d_rows, const float *d_w,
	       float *d_y, int64_t ldy, int64_t n_rows, int64_t n, struct qc_err *err)
{
	const struct qc_cuda_rms_norm_args a = {d_x, ldx, d_rows, d_w, d_y, ldy, n_rows, n, c->m->cfg.norm_eps};
	return qc_cuda_rms_norm(&a, c->st, err);
}

/* y = norm(x) (rows d_rows, or all n_rows) after adding the pending residual into
 * x, in one kernel (add_rms_norm) when one is pending. */
static int norm_in(struct cu *c, const int32_t *d_rows, const float *d_w, float *d_y, int64_t n_rows,
		   struct qc_err *err)
{
	const int64_t E = c->m->cfg.n_embd;
	float *res = c->d_pend;
	c->d_pend = NULL;
	if (!res)
		return rms(c, c->d_x, E, d_rows, d_w, d_y, E, n_rows, E, err);
	const struct qc_cuda_add_rms_norm_args a = {c->d_x, E, d_rows, d_w, d_y, E, n_rows, E, c->m->cfg.norm_eps, res};
	return qc_cuda_add_rms_norm(&a, c->st, err);
}

/* y[i] = w[i] RMSNorm(x) for the n matrices after a norm (Q, K, V; gate, up): the
 * norm inside their GEMV launches where they can (no residual pending), else
 * norm_in into d_xn first. Matrices go in runs that share a launch (one run
 * unless their layouts differ: Q4_K_M's q6_K V beside its q4_K Q and K), each
 * launch with the norm folded in; all runs or none, so a step's matrices see
 * one kind of normed x. */
static int normed_mm(struct cu *c, const float *d_norm_w, const struct dmat *const *w, float *const *y,
		     const int64_t *ld, int n, int64_t T, struct qc_err *err)
{
	const int64_t E = c->m->cfg.n_embd;
	int rc;
	if (c->env.fuse_norm && !c->d_pend) {
		int len[1 + QC_CUDA_MM_MORE], nrun = 0;
		bool all = n <= 1 + QC_CUDA_MM_MORE;
		for (int i = 0; all && i < n; i += len[nrun++]) {
			int j = i + 1;
			while (j < n && qc_cuda_be_mm_multi_can(c, w + i, j - i + 1, T, QC_MM_FUSE_NORM))
				j++;
			len[nrun] = j - i;
			all = qc_cuda_be_mm_multi_can(c, w + i, j - i, T, QC_MM_FUSE_NORM);
		}
		for (int r = 0, i = 0; all && r < nrun; i += len[r++])
			if ((rc = qc_cuda_be_mm_multi(c, w + i, y + i, ld + i, len[r], c->d_x, E, T, d_norm_w, err)))
				return rc;
		if (all)
			return QC_OK;
	}
	if ((rc = norm_in(c, NULL, d_norm_w, c->d_xn, T, err)))
		return rc;
	return qc_cuda_be_mm_multi(c, w, y, ld, n, c->d_xn, E, T, NULL, err);
}

/* x += W in: the GEMV's store does the add where its kind can; else W in goes to
 * tmp and the next norm_in adds it. in = silu(in) * in2 when in2 (fused likewise,
 * or silu_mul first). With d_post (Gemma's post-attention/post-FFN norm): W in
 * to tmp, normed there in place, and the next norm_in adds it (the CPU's order:
 * norm, then the residual add). Tensor parallel: W in is this rank's partial sum,
 * so it goes to tmp, is all-reduced there (then post-normed), and waits likewise. */
static int mm_residual(struct cu *c, const struct dmat *w, float *in, const float *in2, int64_t ld_in, int64_t T,
		       float *tmp, const float *d_post, struct qc_err *err)
{
	const int64_t E = c->m->cfg.n_embd;
	int rc;
	if (d_post || c->comm) { /* tensor parallel: the rank's partial W in, summed over the ranks first */
		if ((rc = qc_cuda_be_mm_fused(c, w, in, in2, ld_in, T, tmp, E, false, NULL, err)) ||
		    (c->comm && (rc = qc_cuda_be_allreduce(c, tmp, T * E, err))) ||
		    (d_post && (rc = rms(c, tmp, E, NULL, d_post, tmp, E, T, E, err))))
			return rc;
		c->d_pend = tmp;
		return QC_OK;
	}
	if (qc_cuda_be_mm_fuses(c, w, T) & QC_MM_FUSE_ACC)
		return qc_cuda_be_mm_fused(c, w, in, in2, ld_in, T, c->d_x, E, true, tmp, err);
	c->d_pend = tmp;
	return qc_cuda_be_mm_fused(c, w, in, in2, ld_in, T, tmp, E, false, NULL, err);
}

static int add(struct cu *c, float *d_y, const float *d_x, int64_t n, int64_t n_x, struct qc_err *err)
{
	if (!d_x)
		return QC_OK;
	const struct qc_cuda_add_args a = {d_y, d_x, n, n_x};
	return qc_cuda_add(&a, c->st, err);
}

/* Device pointers into the uploaded plan. */
struct dplan {
	const int32_t *tokens, *pos, *slots, *tok_seq, *logit_rows, *want, *tables;
	int32_t stride;
};

/* Rows up to which a decode step does RoPE and the K/V store inside the attention:
 * every chunk block repeats q's rotation (and, fp8, its Walsh-Hadamard transform),
 * which pays where launches dominate and not where the step is compute bound
 * (H100, 8B Q4_0: binary16 +2.8% at 1 row, +1.3% at 8, -1.2% at 64, -0.3% at 256;
 * fp8 +4.8% at 1, -6.5% at 256; docs/perf-notes.md). */
#define FUSE_ROPE_ROWS 8

static int attention_block(struct cu *c, const struct qc_sched_plan *plan, const struct dplan *dp, int il,
			   struct qc_err *err)
{
	const struct qc_model_config *cfg = &c->m->cfg;
	const struct dlayer *L = &c->L[il];
	const int64_t T = plan->n_tokens;
	int rc;

	const struct dmat *const qkv[] = {&L->wq, &L->wk, &L->wv};
	float *const qkv_y[] = {c->d_q, c->d_k, c->d_v};
	const int64_t qkv_ld[] = {c->q_dim, c->kv_dim, c->kv_dim};
	if ((rc = normed_mm(c, L->d_attn_norm, qkv, qkv_y, qkv_ld, 3, T, err)) ||
	    (rc = add(c, c->d_q, L->d_bq, T * c->q_dim, c->q_dim, err)) ||
	    (rc = add(c, c->d_k, L->d_bk, T * c->kv_dim, c->kv_dim, err)) ||
	    (rc = add(c, c->d_v, L->d_bv, T * c->kv_dim, c->kv_dim, err)))
		return rc;
	qc_cuda_prof_mark(c->prof, c->st, QC_PROF_QKV);
	const int hd = cfg->head_dim;
	if (L->d_q_norm && (rc = rms(c, c->d_q, hd, NULL, L->d_q_norm, c->d_q, hd, T * cfg->n_head, hd, err)))
		return rc;
	if (L->d_k_norm && (rc = rms(c, c->d_k, hd, NULL, L->d_k_norm, c->d_k, hd, T * cfg->n_head_kv, hd, err)))
		return rc;
	/* the CPU backend's rope_ext: mscale = attn_factor (* (1 + 0.1 ln(1/scale)) with YaRN) */
	float ms = cfg->rope_attn_factor;
	if (cfg->rope_ext_factor != 0.0f)
		ms *= 1.0f + 0.1f * logf(1.0f / cfg->rope_freq_scale);
	/* Gemma 3's local layers rotate with their own base, unscaled */
	const bool local = qc_model_layer_local_rope(cfg, il);
	const float base = local ? cfg->rope_local_base : cfg->rope_freq_base;
	const struct qc_cuda_rope_args rq = {
		.d_x = c->d_q, .d_pos = dp->pos, .n_tok = T, .n_heads = cfg->n_head, .hd = hd,
		.n_rot = cfg->rope_dim, .mode = (int32_t)cfg->rope_mode,
		.theta_scale = powf(base, -2.0f / (float)cfg->rope_dim),
		.freq_scale = local ? 1.0f : cfg->rope_freq_scale, .ext_factor = cfg->rope_ext_factor, .mscale = ms,
		.corr = {cfg->rope_corr_dims[0], cfg->rope_corr_dims[1]}, .d_ff = c->d_rope_ff,
	};
	/* RoPE of Q and K and the K/V store: one kernel (rope_kv.cu) */
	const struct qc_cuda_rope_kv_args rkv = {
		.rope = rq, .d_q = c->d_q, .n_head = cfg->n_head, .d_k = c->d_k, .d_v = c->d_v,
		.n_head_kv = cfg->n_head_kv, .d_slots = dp->slots, .d_pool = c->d_kv, .layer = il,
		.n_layer = cfg->n_layer, .block_tokens = plan->block_tokens,
	};
	/* decode steps: RoPE and the K/V store inside the attention kernel */
	const bool old_ctx = c->env.attn_early && plan->n_seqs == (int32_t)T;
	const bool fuse_rope = old_ctx && c->env.attn_rope && T <= FUSE_ROPE_ROWS;
	struct qc_cuda_rope_kv_args rkv_in = rkv; /* the attention's copy names the pool it reads */
	if (c->d_kv8) {
		rkv_in.d_pool = NULL;
		rkv_in.d_pool8 = c->d_kv8;
		rkv_in.d_pool8_exp = c->d_kv8_exp;
	}
	const struct qc_cuda_paged_attn_args pa = {
		.d_q = c->d_q, .d_out = c->d_att, .d_pool = c->d_kv, .layer = il, .n_layer = cfg->n_layer,
		.block_tokens = plan->block_tokens, .n_head = cfg->n_head, .n_head_kv = cfg->n_head_kv,
		.hd = hd, .d_pos = dp->pos, .d_tok_seq = dp->tok_seq, .d_tables = dp->tables,
		.table_stride = dp->stride, .n_tok = T, .max_ctx = c->p.max_ctx,
		/* Gemma, Phi-3: the CPU scales q after RoPE and the scores by 1; here the
		   kernels' q * scale is that product */
		.scale = cfg->q_scale > 0.0f ? cfg->q_scale : 1.0f / sqrtf((float)hd),
		.softcap = cfg->attn_softcap, .window = qc_model_layer_windowed(cfg, il) ? cfg->sliding_window : 0,
		.d_ws = c->d_ws, .ws_bytes = c->ws_bytes, .flash = c->env.flash,
		.d_flags = T <= c->env.attn_merge_rows ? c->d_flags : NULL,
		.n_flags = T <= c->env.attn_merge_rows ? c->n_flags : 0,
		.d_pool8 = c->d_kv8, .d_pool8_exp = c->d_kv8_exp,
		/* one token per sequence: its earlier positions are from earlier forwards
		   (block copies run before the forward, upload_plan before its kernels) */
		.old_ctx = old_ctx, .fuse_rope = fuse_rope, .rope_kv = rkv_in,
	};
	if ((!fuse_rope && (rc = qc_cuda_be_kv_store(c, &rkv, err))) || (rc = qc_cuda_paged_attn(&pa, c->st, err)))
		return rc;
	qc_cuda_prof_mark(c->prof, c->st, QC_PROF_ATTN);
	/* x += Wo att */
	rc = mm_residual(c, &L->wo, c->d_att, NULL, c->q_dim, T, c->d_xn, L->d_attn_post_norm, err);
	qc_cuda_prof_mark(c->prof, c->st, QC_PROF_WO);
	return rc;
}

static int ffn_block(struct cu *c, int64_t T, int il, struct qc_err *err)
{
	const struct qc_model_config *cfg = &c->m->cfg;
	const struct dlayer *L = &c->L[il];
	const int64_t E = cfg->n_embd, F = cfg->n_ff;
	int rc;

	if (!cfg->n_expert) {
		const struct dmat *const gu[] = {&L->gate, &L->up};
		float *const gu_y[] = {c->d_fa, c->d_fb};
		const int64_t gu_ld[] = {F, F};
		if ((rc = normed_mm(c, L->d_ffn_norm, gu, gu_y, gu_ld, 2, T, err)))
			return rc;
		qc_cuda_prof_mark(c->prof, c->st, QC_PROF_FFN_UP);
		/* GeGLU: gelu(gate) * up into gate first (the GEMV's fused prologue is SiLU's) */
		const struct qc_cuda_gelu_mul_args ga = {c->d_fa, c->d_fb, c->d_fa, T * F};
		if (cfg->ffn_gelu && (rc = qc_cuda_gelu_mul(&ga, c->st, err)))
			return rc;
		/* x += down(silu(gate) * up), or down(that product) */
		if ((rc = mm_residual(c, &L->down, c->d_fa, cfg->ffn_gelu ? NULL : c->d_fb, F, T, c->d_att,
				      L->d_ffn_post_norm, err)))
			return rc;
		qc_cuda_prof_mark(c->prof, c->st, QC_PROF_FFN_DOWN);
		return QC_OK;
	}
	if ((rc = norm_in(c, NULL, L->d_ffn_norm, c->d_xn, T, err)))
		return rc;
	qc_cuda_prof_mark(c->prof, c->st, QC_PROF_NORM);
	const int32_t K = cfg->n_expert_used;
	const int64_t R = T * K; /* (token, slot) rows */
	const struct qc_cuda_moe_route_args ra = {c->d_router, T, cfg->n_expert, K, c->d_sel, c->d_selw,
						  cfg->expert_norm_w ? 1 : 0};
	const struct qc_cuda_silu_mul_args sm = {c->d_fa, c->d_fb, c->d_fa, R * F};
	const bool sh = L->gate_sh.d_w != NULL;
	/* tensor parallel: each rank's experts hold F/N of every expert (and of the
	   shared one), so the combine is a partial sum: into zeros (d_xn, read by the
	   matmuls above only), summed over the ranks, then pending like a projection's */
	float *acc = c->comm ? c->d_xn : c->d_x;
	const struct qc_cuda_moe_combine_args ca = {acc, c->d_eout, c->d_selw, T, E, K,
						    sh ? c->d_att : NULL, sh ? c->d_shg : NULL};
	if ((rc = qc_cuda_be_mm(c, &L->gate_inp, c->d_xn, E, 1, NULL, T, c->d_router, cfg->n_expert, err)) ||
	    (rc = qc_cuda_moe_route(&ra, c->st, err)) ||
	    (rc = qc_cuda_be_mm(c, &L->gate_exps, c->d_xn, E, K, c->d_sel, R, c->d_fa, F, err)) ||
	    (rc = qc_cuda_be_mm(c, &L->up_exps, c->d_xn, E, K, c->d_sel, R, c->d_fb, F, err)) ||
	    (rc = qc_cuda_silu_mul(&sm, c->st, err)) ||
	    (rc = qc_cuda_be_mm(c, &L->down_exps, c->d_fa, F, 1, c->d_sel, R, c->d_eout, E, err)))
		return rc;
	if (sh) { /* the shared expert into d_att, its gate logit into d_shg; combined below */
		const int64_t FS = L->gate_sh.n_out;
		const struct qc_cuda_silu_mul_args ss = {c->d_fa, c->d_fb, c->d_fa, T * FS};
		if ((rc = qc_cuda_be_mm(c, &L->gate_sh, c->d_xn, E, 1, NULL, T, c->d_fa, FS, err)) ||
		    (rc = qc_cuda_be_mm(c, &L->up_sh, c->d_xn, E, 1, NULL, T, c->d_fb, FS, err)) ||
		    (rc = qc_cuda_silu_mul(&ss, c->st, err)) ||
		    (rc = qc_cuda_be_mm(c, &L->down_sh, c->d_fa, FS, 1, NULL, T, c->d_att, E, err)) ||
		    (rc = qc_cuda_be_mm(c, &L->gate_inp_sh, c->d_xn, E, 1, NULL, T, c->d_shg, 1, err)))
			return rc;
	}
	if ((c->comm && (rc = qc_cuda_be_ck(cudaMemsetAsync(acc, 0, sizeof(float) * (size_t)(T * E), c->st),
					     "cudaMemsetAsync (MoE sum)", err))) ||
	    (rc = qc_cuda_moe_combine(&ca, c->st, err)) || (c->comm && (rc = qc_cuda_be_allreduce(c, acc, T * E, err))))
		return rc;
	if (c->comm)
		c->d_pend = acc;
	qc_cuda_prof_mark(c->prof, c->st, QC_PROF_FFN_DOWN);
	return QC_OK;
}

/* Pack the plan's arrays into h_plan, upload them in one copy. */
static int upload_plan(struct cu *c, const struct qc_sched_plan *plan, const int32_t *want, struct dplan *dp,
		       struct qc_err *err)
{
	const int32_t T = plan->n_tokens;
	const size_t need = 4 * (size_t)T + 2 * (size_t)plan->n_logits + (size_t)plan->n_seqs * (size_t)c->table_stride;
	int32_t *h = c->h_plan;
	if (need > c->plan_cap || plan->n_seqs > c->p.max_logits)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "plan of %d entries x %d blocks exceeds the backend's",
				  plan->n_seqs, plan->table_stride);
	memcpy(h, plan->tokens, sizeof(int32_t) * (size_t)T);
	memcpy(h + T, plan->positions, sizeof(int32_t) * (size_t)T);
	memcpy(h + 2 * T, plan->slots, sizeof(int32_t) * (size_t)T);
	int32_t *seq = h + 3 * T, *lr = h + 4 * T, n = 0;
	for (int32_t i = 0; i < plan->n_seqs; i++) {
		for (int32_t t = plan->tok_start[i]; t < plan->tok_start[i + 1]; t++)
			seq[t] = i;
		if (plan->need_logits[i])
			lr[n++] = plan->tok_start[i + 1] - 1;
	}
	/* tables at the fixed device stride (entries past a sequence's own are never read) */
	if (plan->table_stride > c->table_stride)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "block table of %d entries exceeds the backend's %d",
				  plan->table_stride, c->table_stride);
	/* per logit row: how many best ids the caller wants (0: none, the row) */
	for (int32_t k = 0; k < n; k++)
		lr[n + k] = want ? want[k] : 0;
	int32_t *tb = lr + 2 * n;
	for (int32_t i = 0; i < plan->n_seqs; i++) {
		memcpy(tb + (size_t)i * (size_t)c->table_stride, plan->block_tables + (size_t)i * (size_t)plan->table_stride,
		       sizeof(int32_t) * (size_t)plan->table_stride);
		memset(tb + (size_t)i * (size_t)c->table_stride + plan->table_stride, 0,
		       sizeof(int32_t) * (size_t)(c->table_stride - plan->table_stride));
	}
	dp->tokens = c->d_plan;
	dp->pos = c->d_plan + T;
	dp->slots = c->d_plan + 2 * T;
	dp->tok_seq = c->d_plan + 3 * T;
	dp->logit_rows = c->d_plan + 4 * T;
	dp->want = c->d_plan + 4 * T + n;
	dp->tables = c->d_plan + 4 * T + 2 * n;
	dp->stride = c->table_stride;
	return qc_cuda_be_ck(cudaMemcpyAsync(c->d_plan, h, need * sizeof(int32_t), cudaMemcpyHostToDevice, c->st),
		  "cudaMemcpyAsync (plan)", err);
}

/* One step's device work after the plan upload: embedding, layers, and (when the
 * step wants logits) the final norm and vocabulary matmul into d_logits. Every
 * launch parameter depends only on (n_tokens, n_logits): see backend_cuda_graph.h. */
struct fwd_ctx {
	struct cu *c;
	const struct qc_sched_plan *plan;
	const struct dplan *dp;
};

static int fwd_body(void *ctx, cudaStream_t s, struct qc_err *err)
{
	const struct fwd_ctx *f = ctx;
	struct cu *c = f->c;
	const struct qc_model_config *cfg = &c->m->cfg;
	const int32_t T = f->plan->n_tokens, n = f->plan->n_logits;
	const int64_t E = cfg->n_embd;
	int rc;
	(void)s; /* every helper queues on c->st, the stream being captured */
	/* tensor parallel: this rank's vocabulary rows, zeros for the others' ids, summed */
	const struct qc_cuda_embed_args ea = {c->tok.d_w, c->tok.type, c->tok.row_bytes, E, f->dp->tokens, T, c->d_x,
					      c->m->tp.vocab0, c->tok.n_out};
	const struct qc_cuda_softcap_args es = {c->d_x, T * E, cfg->embd_scale, 0.0f}; /* Gemma: times sqrt(n_embd) */
	if ((rc = qc_cuda_embed(&ea, c->st, err)) || (c->comm && (rc = qc_cuda_be_allreduce(c, c->d_x, T * E, err))) ||
	    (cfg->embd_scale != 1.0f && (rc = qc_cuda_softcap(&es, c->st, err))))
		return rc;
	qc_cuda_prof_mark(c->prof, c->st, QC_PROF_UPLOAD);
	c->d_pend = NULL;
	for (int il = 0; il < cfg->n_layer; il++)
		if ((rc = attention_block(c, f->plan, f->dp, il, err)) || (rc = ffn_block(c, T, il, err)))
			return rc;
	if (!n)
		return QC_OK;
	const struct qc_cuda_softcap_args ls = {c->d_logits, (int64_t)n * cfg->n_vocab, 1.0f, cfg->final_softcap};
	if ((rc = norm_in(c, f->dp->logit_rows, c->d_out_norm, c->d_lx, n, err)) ||
	    (rc = qc_cuda_be_mm(c, &c->out, c->d_lx, E, 1, NULL, n, c->d_logits, cfg->n_vocab, err)) ||
	    (cfg->final_softcap > 0.0f && (rc = qc_cuda_softcap(&ls, c->st, err))))
		return rc;
	/* greedy choice of every row (a few microseconds), used when the caller asks;
	   the top-k candidates of the rows that want m >= 2 (the others exit at once) */
	const struct qc_cuda_argmax_args aa = {c->d_logits, c->d_argmax, n, cfg->n_vocab};
	const struct qc_cuda_topk_args ta = {c->d_logits, f->dp->want, c->d_top_ids, c->d_top_vals,
					     n, cfg->n_vocab, QC_BACKEND_TOP_MAX};
	if ((rc = qc_cuda_argmax(&aa, c->st, err)) || (rc = qc_cuda_topk(&ta, c->st, err)))
		return rc;
	qc_cuda_prof_mark(c->prof, c->st, QC_PROF_HEAD);
	return QC_OK;
}

_Static_assert(QC_CUDA_TOPK_MAX == QC_BACKEND_TOP_MAX, "topk.cu returns what forward_top promises");

/* Logit row k crosses to the host: every row for plain forward, else the rows the
 * caller samples itself and the rows whose selection flags a bad logit. */
static bool row_needed(const int32_t *want, const int32_t *top_ids, int32_t k)
{
	return !want || !want[k] || top_ids[(size_t)k * QC_BACKEND_TOP_MAX] < 0;
}

static int cuda_forward_top(void *state, const struct qc_sched_plan *plan, const int32_t *want, float *logits,
			    int32_t *top_ids, float *top_logits, struct qc_err *err)
{
	struct cu *c = state;
	const struct qc_model_config *cfg = &c->m->cfg;
	const int32_t T = plan->n_tokens;
	struct dplan dp = {0};
	int rc;

	if (c->p.tp && (rc = qc_cuda_be_ck(cudaSetDevice(c->p.device), "cudaSetDevice", err)))
		return rc;
	if (T > c->p.max_tokens || plan->n_logits > c->p.max_logits || plan->block_tokens != c->p.block_tokens)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "plan of %d tokens / %d logits / block %d exceeds the backend's %d / %d / %d", T,
				  plan->n_logits, plan->block_tokens, c->p.max_tokens, c->p.max_logits,
				  c->p.block_tokens);
	for (int32_t t = 0; t < T; t++) {
		const int32_t pos = plan->positions[t], id = plan->tokens[t];
		if (id < 0 || id >= c->m->tp.n_vocab_all || pos < 0 || pos >= c->p.max_ctx || plan->slots[t] < 0 ||
		    plan->slots[t] / plan->block_tokens >= c->p.n_blocks)
			return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
					  "token %d: id %d, position %d or slot %d out of range", t, id, pos,
					  plan->slots[t]);
	}
	/* block copies first (forks) */
	for (int32_t k = 0; k < plan->n_cow; k++)
		if ((rc = qc_cuda_be_kv_copy(c, plan->cow_src[k], plan->cow_dst[k], plan->cow_n_tokens[k], err)))
			return rc;
	if (!T)
		return QC_OK;
	qc_cuda_prof_begin(c->prof, c->st, T);
	if ((rc = upload_plan(c, plan, want, &dp, err)))
		return rc;
	struct fwd_ctx fc = {c, plan, &dp};
	const int32_t n = plan->n_logits;
	/* decode steps replay a graph per (rows, logit rows); others run kernel by kernel */
	if (n == T && T <= GRAPH_MAX_ROWS)
		rc = qc_cuda_graphs_run(c->graphs, T, n, c->st, fwd_body, &fc, err);
	else
		rc = fwd_body(&fc, c->st, err);
	if (rc)
		return rc;
	if (!n) {
		rc = qc_cuda_be_ck(cudaStreamSynchronize(c->st), "forward", err);
		qc_cuda_prof_end(c->prof);
		return rc;
	}
	const size_t rowb = sizeof(float) * (size_t)cfg->n_vocab;
	if (want) { /* the choices first: a bad row (-1) comes back in full for the host's message */
		int32_t lo = n, hi = -1;
		for (int32_t k = 0; k < n; k++)
			if (want[k] > 1) {
				lo = k < lo ? k : lo;
				hi = k;
			}
		const size_t tb = (size_t)QC_BACKEND_TOP_MAX * (size_t)(hi - lo + 1), to = (size_t)lo * QC_BACKEND_TOP_MAX;
		if ((rc = qc_cuda_be_ck(cudaMemcpyAsync(c->h_argmax, c->d_argmax, sizeof(int32_t) * (size_t)n,
					     cudaMemcpyDeviceToHost, c->st), "cudaMemcpyAsync (argmax)", err)) ||
		    (hi >= lo && ((rc = qc_cuda_be_ck(cudaMemcpyAsync(c->h_top_ids + to, c->d_top_ids + to, tb * sizeof(int32_t),
							  cudaMemcpyDeviceToHost, c->st), "cudaMemcpyAsync (top ids)", err)) ||
				  (rc = qc_cuda_be_ck(cudaMemcpyAsync(c->h_top_vals + to, c->d_top_vals + to, tb * sizeof(float),
							  cudaMemcpyDeviceToHost, c->st), "cudaMemcpyAsync (top logits)", err)))) ||
		    (rc = qc_cuda_be_ck(cudaStreamSynchronize(c->st), "forward", err)))
			return rc;
		for (int32_t k = 0; k < n; k++) {
			const size_t o = (size_t)k * QC_BACKEND_TOP_MAX;
			if (want[k] == 1) {
				top_ids[o] = c->h_argmax[k];
			} else if (want[k] > 1) {
				const int32_t m = want[k] < QC_BACKEND_TOP_MAX ? want[k] : QC_BACKEND_TOP_MAX;
				memcpy(top_ids + o, c->h_top_ids + o, sizeof(int32_t) * (size_t)m);
				memcpy(top_logits + o, c->h_top_vals + o, sizeof(float) * (size_t)m);
			}
		}
	}
	/* wanted rows in runs of consecutive rows, one copy per run */
	int32_t n_copied = 0;
	for (int32_t k0 = 0; k0 < n;) {
		if (!row_needed(want, top_ids, k0)) {
			k0++;
			continue;
		}
		int32_t k1 = k0 + 1;
		while (k1 < n && row_needed(want, top_ids, k1))
			k1++;
		if ((rc = qc_cuda_be_ck(cudaMemcpyAsync(c->h_logits + (size_t)k0 * cfg->n_vocab,
					     c->d_logits + (size_t)k0 * cfg->n_vocab, rowb * (size_t)(k1 - k0),
					     cudaMemcpyDeviceToHost, c->st), "cudaMemcpyAsync (logits)", err)))
			return rc;
		n_copied += k1 - k0;
		k0 = k1;
	}
	qc_cuda_prof_mark(c->prof, c->st, QC_PROF_LOGITS);
	if ((n_copied || c->prof) && (rc = qc_cuda_be_ck(cudaStreamSynchronize(c->st), "forward", err)))
		return rc;
	qc_cuda_prof_end(c->prof);
	for (int32_t k = 0; k < n; k++)
		if (row_needed(want, top_ids, k))
			memcpy(logits + (size_t)k * cfg->n_vocab, c->h_logits + (size_t)k * cfg->n_vocab, rowb);
	return QC_OK;
}

static int cuda_forward(void *state, const struct qc_sched_plan *plan, float *logits, struct qc_err *err)
{
	return cuda_forward_top(state, plan, NULL, logits, NULL, NULL, err);
}

/* K/V blocks (backend_cuda_kv.c); what fits in mem_util of the device after the
 * weights (file region + f16 conversions), buffers, and a 1 GiB margin for the
 * CUDA context, cuBLAS workspaces and fragmentation. */
static int cuda_kv_limits(const struct qc_model *m, const struct qc_backend_params *p, float mem_util,
			  uint64_t *block_bytes, uint64_t *max_bytes, struct qc_err *err)
{
	const struct qc_model_config *cfg = &m->cfg;
	size_t free_b, total_b;
	int rc;

	if ((rc = qc_model_check_backend(m, QC_ARCH_BACKEND_CUDA, err)) || (rc = qc_cuda_be_kv_check(p, err)) ||
	    (rc = check_device(p, err)) || (rc = qc_cuda_be_ck(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo", err)))
		return rc;
	if ((rc = qc_cuda_be_kv_block_bytes(m, p, block_bytes, err)))
		return rc;
	/* the model's own tensors (a tensor-parallel rank's members), on its own device;
	   K/V blocks of its K/V heads (cfg holds the rank's widths) */
	const uint64_t lo = m->data_lo, hi = m->data_hi > m->data_lo ? m->data_hi : m->data_lo;
	uint64_t used = (hi - lo) + buffer_floats(cfg, p) * sizeof(float) + plan_ints(p) * 4 + ((uint64_t)1 << 30);
	/* slow-path conversions: f16 copies of every tensor without a device kernel */
	for (uint64_t i = 0; i < m->bundle->n_tensors; i++) {
		const struct qc_bundle_tensor *t = &m->bundle->tensors[i];
		if (t->off >= lo && t->off < hi && t->n_dims >= 2 && !qc_cuda_mm_find(t->layout, t->type))
			used += 2 * (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
	}
	/* gemm scratch: the largest matrix in fp16 plus the activations */
	uint64_t big = 0;
	for (uint64_t i = 0; i < m->bundle->n_tensors; i++) {
		const struct qc_bundle_tensor *t = &m->bundle->tensors[i];
		const uint64_t ne = (uint64_t)(t->ne[0] * t->ne[1]);
		if (t->off >= lo && t->off < hi)
			big = ne > big ? ne : big;
	}
	used += 2 * big + 2 * (uint64_t)p->max_tokens * (uint64_t)(cfg->n_ff > cfg->n_embd ? cfg->n_ff : cfg->n_embd);
	used += qc_cuda_paged_attn_ws_bytes(p->max_logits, cfg->n_head, cfg->head_dim, p->max_ctx);
	const double allowed = (double)mem_util * (double)total_b;
	const double have = allowed < (double)free_b ? allowed : (double)free_b;
	*max_bytes = have > (double)used ? (uint64_t)(have - (double)used) : *block_bytes;
	return QC_OK;
}

const struct qc_backend_ops qc_backend_cuda = {
	.name = "cuda",
	.create = cuda_create,
	.forward = cuda_forward,
	.forward_top = cuda_forward_top,
	.destroy = cuda_destroy,
	.kv_limits = cuda_kv_limits,
};
