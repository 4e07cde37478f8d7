/* backend_cuda_int.h — what the CUDA backend's files share (not an interface).
 *
 * Owns: the backend state (struct cu) and the device view of a weight (struct
 * dmat). backend_cuda.c creates, runs the forward and destroys; backend_cuda_weights.c
 * uploads the weights and builds the dmats; backend_cuda_mm.c runs one matmul,
 * asking the layout table (qc_layout_kernel) which kernel kind; backend_cuda_env.c
 * reads the environment block once; backend_cuda_tp.c owns a tensor-parallel
 * rank's NCCL communicator and its all-reduce.
 */
#ifndef QC_BACKEND_CUDA_INT_H
#define QC_BACKEND_CUDA_INT_H

#include <cublas_v2.h>
#include <stdbool.h>

#include "backend_cuda.h"
#include "backend_cuda_env.h"
#include "backend_cuda_nccl.h"
#include "kernels/matmul_dispatch.h"
#include "kernels/tp_allreduce.h"
#include "model.h"

struct qc_cuda_graphs;
struct qc_cuda_prof;

/* A weight on the device. */
struct dmat {
	const uint8_t *d_w;        /* NULL when the model has no such weight */
	enum qc_type type;
	enum qc_layout layout;
	int64_t n_in, n_out, n_mat;
	uint64_t row_bytes, mat_stride;
	const struct qc_cuda_mm_kernels *k;
	const int32_t *d_perm;     /* act-order permutation(s) in the uploaded file, or NULL */
	int64_t perm_stride;
	int32_t l2_at;             /* 1 + its place in the step's read order (cu.l2_seq), 0: none */
};

/* One matrix's bytes in the decode step's read order (backend_cuda_l2.c). */
struct l2_range {
	const uint8_t *d;
	uint64_t bytes;
};

struct dlayer {
	struct dmat wq, wk, wv, wo, gate, up, down, gate_inp, gate_exps, up_exps, down_exps;
	struct dmat gate_inp_sh, gate_sh, up_sh, down_sh; /* shared expert (Qwen2-MoE), or absent */
	const float *d_attn_norm, *d_ffn_norm, *d_bq, *d_bk, *d_bv, *d_q_norm, *d_k_norm;
	const float *d_attn_post_norm, *d_ffn_post_norm; /* (n_embd) Gemma's norms before each residual add, or NULL */
};

/* A host-converted (f16) copy, shared by views of the same host bytes. */
struct conv {
	const uint8_t *h_src;
	const uint8_t *d_w;
};

struct cu {
	const struct qc_model *m;
	struct qc_backend_params p;
	cudaStream_t st;
	cublasHandle_t blas;
	void **allocs;             /* (n_allocs) every cudaMalloc, freed at destroy */
	int n_allocs, cap_allocs;
	const uint8_t *d_file;     /* the bundle bytes [file_lo, file_hi) */
	uint64_t file_lo, file_hi;
	struct conv *convs;
	int n_convs;
	struct dlayer *L;          /* (n_layer) */
	struct dmat tok, out;
	const float *d_out_norm;
	const float *d_rope_ff;    /* (rope_dim / 2) frequency divisors: llama3 rope_freqs, or Phi-3's
				      LongRoPE table for max_ctx (qc_model_rope_factors), or NULL */
	uint16_t *d_kv;            /* (n_blocks, block_elems) binary16; NULL with --kv-dtype fp8 */
	uint8_t *d_kv8;            /* fp8: (n_blocks, block_elems) E4M3FN codes, else NULL */
	int8_t *d_kv8_exp;         /* fp8: (n_blocks, block_elems / head_dim) scale exponents */
	size_t block_elems;
	int64_t q_dim, kv_dim, wide, n_exp_rows;
	float *d_x, *d_xn;         /* (T, E) residual, (T, wide) normed / matmul out */
	float *d_q, *d_k, *d_v;    /* (T, q_dim | kv_dim) */
	float *d_att;              /* (T, wide) */
	float *d_fa, *d_fb;        /* (T, max(max(1, K) * F, F_shexp)) */
	float *d_shg;              /* (T) shared expert gate logits, or NULL */
	float *d_router, *d_selw;  /* (T, X), (T, K) */
	int32_t *d_sel;            /* (T, K) */
	float *d_eout;             /* (T * K, E) */
	float *d_lx, *d_logits;    /* (max_logits, E), (max_logits, V) */
	int32_t *d_plan, *h_plan;  /* packed plan arrays (plan_cap int32) */
	size_t plan_cap;
	float *h_logits;           /* pinned (max_logits, V) */
	bool any_perm;             /* some weight has an act-order permutation */
	float *d_xperm;            /* (max_tokens * max(1, n_expert_used), max n_in) gathered x, or NULL */
	int64_t xperm_cap;         /* floats of d_xperm */
	int32_t *d_argmax, *h_argmax; /* (max_logits) greedy choice per logit row; host side pinned */
	int32_t *d_top_ids, *h_top_ids; /* (max_logits, QC_BACKEND_TOP_MAX) top-k rows' ids; host pinned */
	float *d_top_vals, *h_top_vals; /* (max_logits, QC_BACKEND_TOP_MAX) and their logits */
	void *d_ws;                /* gemm scratch */
	uint64_t ws_bytes;
	uint32_t *d_flags;         /* split-K arrival counters (qc_cuda_mm_args.d_flags), zeroed once */
	float *d_pend;             /* during a forward: a residual not yet added into d_x (the
				      next norm adds it, add_rms_norm), or NULL */
	int64_t n_flags;
	struct qc_cuda_env env;    /* the knobs, read once at create (backend_cuda_env.c) */
	int32_t table_stride;      /* block-table entries per sequence on the device: fixed, so a
				      captured graph stays valid as sequences grow */
	struct qc_cuda_graphs *graphs; /* NULL: graphs off (QC_CUDA_GRAPHS=0, or profiling) */
	struct qc_cuda_prof *prof;     /* NULL unless QC_PROFILE */
	struct l2_range *l2_seq;       /* (n_l2) the dense weights in the order a step reads them */
	int n_l2;
	/* tensor parallelism (p.tp set; docs/tp.md): this rank's communicator, NULL
	   otherwise: a non-NULL comm is what turns the all-reduces on */
	const struct qc_nccl *nccl;
	qc_nccl_comm_t comm;
	/* QC_CUDA_TP_P2P=1 and every pair of ranks' GPUs peer-capable: the one-shot
	   peer-to-peer all-reduce's table (every rank's staging and flags, this rank's
	   epoch), used for sums of at most p2p.cap floats; p2p_on is the same on
	   every rank */
	bool p2p_on;
	struct qc_cuda_tp_allreduce_args p2p;
};

/* cuda_check with the backend's spelling. */
int qc_cuda_be_ck(cudaError_t e, const char *what, struct qc_err *err);

/* cudaMalloc of bytes (16 when 0) tracked for destroy; QC_ENOMEM / QC_ECUDA naming the size. */
int qc_cuda_be_dalloc(struct cu *c, size_t bytes, void **out, struct qc_err *err);
int qc_cuda_be_dfloats(struct cu *c, size_t n, float **out, struct qc_err *err);

/* n floats of h to the device (*d NULL when h is). */
int qc_cuda_be_upload_vec(struct cu *c, const float *h, int64_t n, const float **d, struct qc_err *err);

/* The model's tensor bytes [m->data_lo, m->data_hi) (a tensor-parallel rank's
 * own members) to c->d_file through pinned staging; prints the rate. */
int qc_cuda_be_upload_file(struct cu *c, struct qc_err *err);

/* The device view of w (zeroed when w has no data): a slice of the uploaded file,
 * or an f16 host conversion (logged once per type in warned). QC_EUNSUPPORTED
 * when a kernel kind the layout table names for its layout has no function. */
int qc_cuda_be_make_dmat(struct cu *c, const struct qc_mat *w, const char *what, struct dmat *d,
			 bool warned[QC_TYPE_COUNT], struct qc_err *err);

/* Largest matmul scratch over the model's matrices at c's row limits. */
uint64_t qc_cuda_be_ws_need(const struct cu *c);

/* y = W x for n_rows activation rows (matmul_dispatch.h's contract), on the kernel
 * kind qc_layout_kernel picks. */
int qc_cuda_be_mm(struct cu *c, const struct dmat *w, const float *d_x, int64_t ldx, int32_t x_div,
		  const int32_t *d_expert, int64_t n_rows, float *d_y, int64_t ldy, struct qc_err *err);
/* y = W x (acc: y += W x) for n_rows dense rows (x_div 1), where x = silu(x) * x2
 * when d_x2; fused into the matmul where its kernel kind can, else silu_mul in
 * place in d_x first and, for acc, the product into d_tmp ((n_rows, ldy) floats)
 * then the add kernel. */
int qc_cuda_be_mm_fused(struct cu *c, const struct dmat *w, float *d_x, const float *d_x2, int64_t ldx,
			int64_t n_rows, float *d_y, int64_t ldy, bool acc, float *d_tmp, struct qc_err *err);

/* d_y[i] = w[i] x for i < n (n <= 3) dense rows: one launch where the kind can take
 * several matrices and w[] agree in layout, type and n_in, else n matmuls; with
 * d_norm_w, x is RMSNorm(x) * d_norm_w inside that one launch. */
int qc_cuda_be_mm_multi(struct cu *c, const struct dmat *const *w, float *const *d_y, const int64_t *ldy, int n,
			const float *d_x, int64_t ldx, int64_t n_rows, const float *d_norm_w, struct qc_err *err);

/* backend_cuda_kv.c, the K/V pool. QC_OK for the dtypes it stores (f16, fp8),
 * else QC_EUNSUPPORTED naming the dtype; needs no device. */
int qc_cuda_be_kv_check(const struct qc_backend_params *p, struct qc_err *err);
/* Bytes of one K/V block of p->kv_dtype (fp8: qc_backend_block_bytes's). */
int qc_cuda_be_kv_block_bytes(const struct qc_model *m, const struct qc_backend_params *p, uint64_t *out,
			      struct qc_err *err);
/* c->p.n_blocks blocks of c->block_elems values (d_kv, or d_kv8 and d_kv8_exp),
 * poisoned on c->st. */
int qc_cuda_be_kv_alloc(struct cu *c, struct qc_err *err);
/* The first n_tokens slots of every (layer, K/V) of block src into block dst (forks). */
int qc_cuda_be_kv_copy(struct cu *c, int32_t src, int32_t dst, int32_t n_tokens, struct qc_err *err);
struct qc_cuda_rope_kv_args;
/* RoPE of q and k and the K/V store, rkv as for qc_cuda_rope_kv with d_pool =
 * c->d_kv: binary16, that one launch; fp8 (d_kv NULL), one launch of
 * qc_cuda_rope_kv_e4m3 into d_kv8, which rotates q's heads for attention too. */
int qc_cuda_be_kv_store(struct cu *c, const struct qc_cuda_rope_kv_args *rkv, struct qc_err *err);

/* The decode step's weight read order into c->l2_seq and each dense dmat's l2_at
 * (nothing when the hint is off, c->env.l2_bytes <= 0). After every make_dmat. */
int qc_cuda_be_l2_order(struct cu *c, struct qc_err *err);
/* The L2 hint of a launch of the n matrices w[]: up to c->env.l2_bytes of the
 * weights read after the last of them (h->n = 0 when none of them has a place). */
void qc_cuda_be_l2_hint(const struct cu *c, const struct dmat *const *w, int n, struct qc_cuda_l2_hint *h);

/* backend_cuda_tp.c: a tensor-parallel rank's start-up, after its own create
 * (rc: how that went; c may be NULL when it failed early). Every rank of p->tp
 * calls it at once, each from its own thread: the ranks agree that all got
 * there, rank 0's NCCL id goes through the group's slot, every rank makes its
 * communicator (ncclCommInitRank) and checks a warm-up all-reduce. QC_OK with
 * c->comm set, or rc, or the first failure (another rank's named), with no
 * communicator left on any rank. With QC_CUDA_TP_P2P=1 it also sets up the
 * peer-to-peer all-reduce (c->p2p_on) and checks it with the same warm-up, or
 * says why not (a GPU pair without peer access) and leaves NCCL for all. */
int qc_cuda_be_tp_start(struct cu *c, const struct qc_backend_params *p, int rc, struct qc_err *err);
/* The communicator's end (ncclCommDestroy: every rank's destroy must run at
 * once, each on its own thread). After c->st is idle; nothing when c->comm is NULL.
 * With c->p2p_on, a barrier of the ranks first: no rank frees its staging buffers
 * (destroy's cudaFree) while a peer's last all-reduce may still read them. */
void qc_cuda_be_tp_end(struct cu *c);
/* d[0..n) summed over the ranks, in place, on c->st (captured into a graph like a
 * kernel): every rank gets the same bits. With c->p2p_on and n <= c->p2p.cap,
 * tp_allreduce.cu (rank order), else ncclAllReduce; every rank must make the
 * same sequence of calls. */
int qc_cuda_be_allreduce(struct cu *c, float *d, int64_t n, struct qc_err *err);

/* Whether qc_cuda_be_mm_multi runs w[0..n) in one launch that also takes the
 * QC_MM_FUSE_* bits in fuse (d_norm_w may be given only then). */
bool qc_cuda_be_mm_multi_can(const struct cu *c, const struct dmat *const *w, int n, int64_t n_rows, unsigned fuse);

/* The QC_MM_FUSE_* bits the kernel for w at n_rows dense rows takes. */
unsigned qc_cuda_be_mm_fuses(const struct cu *c, const struct dmat *w, int64_t n_rows);

#endif
