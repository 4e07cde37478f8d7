/* rope_kv.cu — RoPE of this step's Q and K in place, and the K/V store of the
 * rotated K and of V into their paged fp16 slots, in one kernel where there
 * were three (two rope launches and kv_store), each launch costing its fixed
 * time in every layer of a decode step.
 *
 * Grid (token, chunk of 256 work items). A token's items in order: Q pairs
 * (head, pair), K pairs (rotated in place and both halves stored to the pool),
 * K dims past n_rot (stored unrotated), V dims. A block with pairs first fills
 * a table of its token's n_rot / 2 angles (rope_pair.cuh, the math rope.cu
 * uses: same floats), shared by every head. Pool layout as kv_store.cu.
 * No pool (d_pool NULL): RoPE of Q and K only (the first of the two launches
 * rope_kv8.cu fuses for the fp8 pool; test_kernels checks the fused kernel
 * against this pair bit for bit). d_pool8 set: refused (qc_cuda_rope_kv_e4m3's).
 * Non-goals: quantized caches, Q/K norms (kept in rms_norm.cu).
 * Reference: runtime/ops/rope.c + runtime/ops/kv_store.c.
 */
#include "rope_kv.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "pdl.cuh"
#include "rope_pair.cuh"

enum {
	ROPE_KV_THREADS = 256,
	ROPE_KV_MAX_ROT = 8192, /* angle table: n_rot / 2 * 8 bytes = 32 KiB, under the 48 KiB default */
	ROPE_KV_MAX_CHUNKS = 65535, /* gridDim.y */
};

/* Work items per token: q pairs, k pairs, unrotated k dims, v dims. */
struct rope_kv_items {
	int64_t q, k, u, v;
};

static __host__ __device__ struct rope_kv_items rope_kv_count(const struct qc_cuda_rope_kv_args &a)
{
	const int64_t half = a.rope.n_rot / 2;
	const int64_t store = a.d_pool ? a.n_head_kv : 0; /* no pool: RoPE only */
	return {a.n_head * half, a.n_head_kv * half, store * (a.rope.hd - a.rope.n_rot), store * a.rope.hd};
}

static __global__ void rope_kv_kernel(const struct qc_cuda_rope_kv_args a)
{
	qc_pdl_enter();
	extern __shared__ struct rope_cs ang[]; /* (n_rot / 2) this token's cos/sin */
	const struct qc_cuda_rope_args &r = a.rope;
	const struct rope_kv_items n = rope_kv_count(a);
	const int half = r.n_rot / 2, hd = r.hd, stride = rope_pair_stride(r.mode, half);
	const int64_t t = blockIdx.x, e0 = (int64_t)blockIdx.y * blockDim.x, e = e0 + threadIdx.x;
	if (e0 < n.q + n.k) { /* the same for the whole block: the barrier is reached by all */
		for (int p = threadIdx.x; p < half; p += blockDim.x)
			ang[p] = rope_pair_cs(r, r.d_pos[t], p);
		__syncthreads();
	}
	const int64_t kv_dim = (int64_t)a.n_head_kv * hd;
	__half *kp = NULL, *vp = NULL;
	if (a.d_pool) {
		const int64_t slot = a.d_slots[t], b = slot / a.block_tokens, o = slot % a.block_tokens;
		kp = (__half *)a.d_pool + (((b * a.n_layer + a.layer) * 2 + 0) * a.block_tokens + o) * kv_dim;
		vp = kp + a.block_tokens * kv_dim;
	}
	if (e < n.q) {
		const int p = (int)(e % half);
		float *x = a.d_q + (t * a.n_head + e / half) * hd + rope_pair_first(r.mode, p);
		const float2 y = rope_pair_rotate(x[0], x[stride], ang[p]);
		x[0] = y.x;
		x[stride] = y.y;
	} else if (e < n.q + n.k) {
		const int p = (int)((e - n.q) % half);
		const int64_t d = (e - n.q) / half * hd + rope_pair_first(r.mode, p);
		float *x = a.d_k + t * kv_dim + d;
		const float2 y = rope_pair_rotate(x[0], x[stride], ang[p]);
		x[0] = y.x;
		x[stride] = y.y;
		if (kp) {
			kp[d] = __float2half_rn(y.x);
			kp[d + stride] = __float2half_rn(y.y);
		}
	} else if (e < n.q + n.k + n.u) {
		const int64_t u = e - n.q - n.k, nu = hd - r.n_rot, d = u / nu * hd + r.n_rot + u % nu;
		kp[d] = __float2half_rn(a.d_k[t * kv_dim + d]);
	} else if (e < n.q + n.k + n.u + n.v) {
		const int64_t d = e - n.q - n.k - n.u;
		vp[d] = __float2half_rn(a.d_v[t * kv_dim + d]);
	}
}

extern "C" int qc_cuda_rope_kv(const struct qc_cuda_rope_kv_args *a, cudaStream_t s, struct qc_err *err)
{
	const struct qc_cuda_rope_args *r = &a->rope;
	if (r->n_rot < 2 || r->n_rot % 2 || r->n_rot > r->hd || a->n_head < 1 || a->n_head_kv < 1 || r->n_tok < 0 ||
	    (r->mode != QC_ROPE_NORM && r->mode != QC_ROPE_NEOX) || !(r->mscale > 0.0f) || a->block_tokens < 1 ||
	    a->layer < 0 || a->layer >= a->n_layer || a->d_pool8 || a->d_pool8_exp)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "rope_kv: n_rot %d, head dim %d, %d/%d heads, mode %d, mscale %g, %lld tokens, "
				  "block_tokens %d, layer %d/%d%s",
				  r->n_rot, r->hd, a->n_head, a->n_head_kv, r->mode, (double)r->mscale,
				  (long long)r->n_tok, a->block_tokens, a->layer, a->n_layer,
				  a->d_pool8 || a->d_pool8_exp ? ", an fp8 pool (qc_cuda_rope_kv_e4m3's)" : "");
	const struct rope_kv_items n = rope_kv_count(*a);
	const int64_t chunks = (n.q + n.k + n.u + n.v + ROPE_KV_THREADS - 1) / ROPE_KV_THREADS;
	if (r->n_rot > ROPE_KV_MAX_ROT || r->n_tok > INT32_MAX || chunks > ROPE_KV_MAX_CHUNKS)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "rope_kv: n_rot %d (at most %d), %lld tokens, %lld blocks per token (at most %d)",
				  r->n_rot, ROPE_KV_MAX_ROT, (long long)r->n_tok, (long long)chunks, ROPE_KV_MAX_CHUNKS);
	if (!r->n_tok)
		return QC_OK;
	const dim3 grid((unsigned)r->n_tok, (unsigned)chunks);
	return qc_cuda_check(qc_launch(rope_kv_kernel, grid, dim3(ROPE_KV_THREADS), sizeof(struct rope_cs) * (r->n_rot / 2),
				       s, *a),
			     "rope_kv_kernel", err);
}
