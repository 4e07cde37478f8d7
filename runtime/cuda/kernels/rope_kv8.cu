/* rope_kv8.cu — RoPE of this step's Q and K and their store into the fp8 K/V
 * pool (kv_pool.cuh) in one launch per layer, where there were two (rope_kv.cu
 * without a pool, then kv_store.cu's qc_cuda_kv_store_e4m3), each costing its
 * fixed time in every layer of a decode step (issue #19).
 *
 * Grid (token, group of ROPE_KV8_WARPS heads); one warp per head, a token's heads
 * in order: K heads, V heads, q heads. A block with a K or q head first fills a
 * table of its token's n_rot / 2 angles (rope_pair.cuh, rope_kv.cu's math: the
 * same floats). The warp copies its head to shared memory, RoPEs the pairs there
 * (rope_pair_rotate on the same inputs: rope_kv.cu's bits), then: K written back
 * RoPE'd (rope_kv's contract) and stored rotated; V stored; q rotated by H
 * (kv8_rotate) and written back once. The store is kv8_store_staged, the very
 * code qc_cuda_kv_store_e4m3 runs, on the same floats: the same codes and
 * exponents (qc_ref_kv_store_e4m3's bit for bit).
 * Non-goals: the binary16 pool (rope_kv.cu), Q/K norms (rms_norm.cu).
 * Reference: runtime/ops/rope.c + runtime/ops/kv_store.c.
 */
#include "rope_kv.h"

#include <cuda_runtime.h>

#include "kv_pool.cuh"
#include "pdl.cuh"
#include "rope_pair.cuh"

enum {
	ROPE_KV8_WARPS = 8,      /* heads per block: the angle table is made once per 8 heads */
	ROPE_KV8_MAX_HD = 1024,  /* shared memory: 8 heads * 4 KiB + the table, under 48 KiB */
	ROPE_KV8_MAX_GROUPS = 65535, /* gridDim.y */
};

static __global__ void rope_kv8_kernel(const struct qc_cuda_rope_kv_args a)
{
	qc_pdl_enter();
	extern __shared__ float rkv8_sm[]; /* (n_rot / 2) rope_cs, then (ROPE_KV8_WARPS, hd) floats */
	const struct qc_cuda_rope_args &r = a.rope;
	const int half = r.n_rot / 2, hd = r.hd, n_kv = a.n_head_kv, per = 2 * n_kv + a.n_head;
	struct rope_cs *ang = (struct rope_cs *)rkv8_sm;
	const int64_t t = blockIdx.x;
	const int h0 = (int)blockIdx.y * ROPE_KV8_WARPS, h1 = min(h0 + ROPE_KV8_WARPS, per);
	if (h0 < n_kv || h1 > 2 * n_kv) { /* a K or q head in the block: uniform, all reach the barrier */
		for (int p = threadIdx.x; p < half; p += blockDim.x)
			ang[p] = rope_pair_cs(r, r.d_pos[t], p);
		__syncthreads();
	}
	const int h = h0 + (int)(threadIdx.x >> 5), lane = threadIdx.x & 31;
	if (h >= per)
		return; /* a whole warp */
	float *y = rkv8_sm + 2 * half + (threadIdx.x >> 5) * hd;
	const int64_t kv_dim = (int64_t)n_kv * hd;
	const bool is_q = h >= 2 * n_kv, is_v = !is_q && h >= n_kv;
	float *x = is_q ? a.d_q + (t * a.n_head + (h - 2 * n_kv)) * hd
		 : is_v ? NULL : a.d_k + t * kv_dim + (int64_t)h * hd;
	const float *src = is_v ? a.d_v + t * kv_dim + (int64_t)(h - n_kv) * hd : x;
	for (int d = lane; d < hd; d += 32)
		y[d] = src[d];
	__syncwarp();
	if (!is_v)
		rope_head_warp(y, half, r.mode, ang);
	if (is_q) {
		kv8_rotate(y, hd);
		for (int d = lane; d < hd; d += 32)
			x[d] = y[d];
		return;
	}
	if (!is_v) /* K RoPE'd in place, as rope_kv leaves it; the store rotates its own copy */
		for (int d = lane; d < hd; d += 32)
			x[d] = y[d];
	const int kvh = is_v ? h - n_kv : h;
	const int64_t slot = a.d_slots[t], b = slot / a.block_tokens, o = slot % a.block_tokens;
	const int64_t row = ((b * a.n_layer + a.layer) * 2 + (is_v ? 1 : 0)) * a.block_tokens + o;
	kv8_store_staged(y, a.d_pool8 + row * kv_dim + (int64_t)kvh * hd, a.d_pool8_exp + row * n_kv + kvh, hd,
			 is_v ? KV8_ROT_NONE : KV8_ROT_WHT);
}

extern "C" int qc_cuda_rope_kv_e4m3(const struct qc_cuda_rope_kv_args *a, cudaStream_t s, struct qc_err *err)
{
	const struct qc_cuda_rope_args *r = &a->rope;
	if (r->n_rot < 2 || r->n_rot % 2 || r->n_rot > r->hd || r->hd > ROPE_KV8_MAX_HD || a->n_head < 1 ||
	    a->n_head_kv < 1 || r->n_tok < 0 || (r->mode != QC_ROPE_NORM && r->mode != QC_ROPE_NEOX) ||
	    !(r->mscale > 0.0f) || a->block_tokens < 1 || a->layer < 0 || a->layer >= a->n_layer || a->d_pool ||
	    !a->d_pool8 || !a->d_pool8_exp)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "rope_kv_e4m3: n_rot %d, head dim %d (at most %d), %d/%d heads, mode %d, mscale %g, "
				  "%lld tokens, block_tokens %d, layer %d/%d, pools: f16 %s, fp8 %s/%s",
				  r->n_rot, r->hd, ROPE_KV8_MAX_HD, a->n_head, a->n_head_kv, r->mode, (double)r->mscale,
				  (long long)r->n_tok, a->block_tokens, a->layer, a->n_layer, a->d_pool ? "set" : "none",
				  a->d_pool8 ? "codes" : "no codes", a->d_pool8_exp ? "exponents" : "no exponents");
	const int64_t groups = (2 * (int64_t)a->n_head_kv + a->n_head + ROPE_KV8_WARPS - 1) / ROPE_KV8_WARPS;
	if (r->n_tok > INT32_MAX || groups > ROPE_KV8_MAX_GROUPS)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "rope_kv_e4m3: %lld tokens, %lld head groups per token (at most %d)",
				  (long long)r->n_tok, (long long)groups, ROPE_KV8_MAX_GROUPS);
	if (!r->n_tok)
		return QC_OK;
	const size_t smem = sizeof(float) * ((size_t)r->n_rot + (size_t)ROPE_KV8_WARPS * (size_t)r->hd);
	return qc_cuda_check(qc_launch(rope_kv8_kernel, dim3((unsigned)r->n_tok, (unsigned)groups),
				       dim3(32 * ROPE_KV8_WARPS), smem, s, *a),
			     "rope_kv8_kernel", err);
}
