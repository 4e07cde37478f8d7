/* backend_cuda_kv.c — the CUDA backend's K/V pool: which dtypes it stores, a
 * block's bytes, allocation (poisoned), the block copies of forks, and the store
 * of a layer's K/V rows.
 *
 * Two pools, the CPU backend's layout ([block][layer][K,V][token][kv_dim]):
 * binary16 (--kv-dtype f16), or fp8 (--kv-dtype fp8): E4M3FN codes in that shape
 * plus one power-of-two scale exponent per (block, layer, K/V, token, kv head),
 * the CPU's fp8 scheme bit for bit (runtime/ops qc_ref_kv_store_e4m3; K heads
 * rotated, so attention takes q rotated: qc_cuda_rope_kv_e4m3 does that too,
 * with RoPE and the store, in one launch per layer).
 * An fp8 block is qc_backend_block_bytes(fp8): head_dim + 1 bytes per head and
 * token against binary16's 2 head_dim, so the same --kv-mem holds ~2x the tokens.
 * Non-goals: other dtypes (refused at create, naming them).
 */
#include <cuda_runtime_api.h>

#include "backend_cuda_int.h"
#include "kernels/rope_kv.h"

int qc_cuda_be_kv_check(const struct qc_backend_params *p, struct qc_err *err)
{
	if (p->kv_dtype == QC_KV_F16 || p->kv_dtype == QC_KV_FP8)
		return QC_OK;
	return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
			  "--kv-dtype %s (%d): the CUDA backend stores f16 or fp8 K/V only",
			  qc_kv_dtype_name(p->kv_dtype), (int)p->kv_dtype);
}

int qc_cuda_be_kv_block_bytes(const struct qc_model *m, const struct qc_backend_params *p, uint64_t *out,
			      struct qc_err *err)
{
	const struct qc_model_config *cfg = &m->cfg;
	if (p->kv_dtype == QC_KV_FP8) /* the CPU's fp8 block: the same bytes */
		return qc_backend_block_bytes(m, p->block_tokens, QC_KV_FP8, out, err);
	return qc_kv_block_bytes(cfg->n_layer, cfg->n_head_kv, cfg->head_dim, 2, p->block_tokens, out, err);
}

int qc_cuda_be_kv_alloc(struct cu *c, struct qc_err *err)
{
	const size_t n = (size_t)c->p.n_blocks * c->block_elems, n_exp = n / (size_t)c->m->cfg.head_dim;
	int rc;
	/* poison: a kernel reading K/V it never wrote shows up as NaN (0xff: the
	   binary16 NaN, the E4M3 NaN code), not as plausible zeros */
	if (c->p.kv_dtype == QC_KV_FP8) {
		if ((rc = qc_cuda_be_dalloc(c, n, (void **)&c->d_kv8, err)) ||
		    (rc = qc_cuda_be_dalloc(c, n_exp, (void **)&c->d_kv8_exp, err)))
			return rc;
		if ((rc = qc_cuda_be_ck(cudaMemsetAsync(c->d_kv8, 0xff, n, c->st), "cudaMemset (K/V)", err)))
			return rc;
		return qc_cuda_be_ck(cudaMemsetAsync(c->d_kv8_exp, 0, n_exp, c->st), "cudaMemset (K/V)", err);
	}
	if ((rc = qc_cuda_be_dalloc(c, n * 2, (void **)&c->d_kv, err)))
		return rc;
	return qc_cuda_be_ck(cudaMemsetAsync(c->d_kv, 0xff, n * 2, c->st), "cudaMemset (K/V)", err);
}

/* One run of bytes from block src to block dst at the same offset. */
static int copy(struct cu *c, void *base, size_t block_bytes, int32_t src, int32_t dst, size_t off, size_t n,
		struct qc_err *err)
{
	char *b = base;
	return qc_cuda_be_ck(cudaMemcpyAsync(b + (size_t)dst * block_bytes + off, b + (size_t)src * block_bytes + off, n,
					     cudaMemcpyDeviceToDevice, c->st),
			     "cudaMemcpyAsync (K/V copy)", err);
}

int qc_cuda_be_kv_copy(struct cu *c, int32_t src, int32_t dst, int32_t n_tokens, struct qc_err *err)
{
	const struct qc_model_config *cfg = &c->m->cfg;
	const size_t bt = (size_t)c->p.block_tokens, nt = (size_t)n_tokens, kvd = (size_t)c->kv_dim;
	const size_t nkv = (size_t)cfg->n_head_kv;
	int rc;
	/* K and V of every layer of a block are contiguous per (layer, K/V) */
	for (int il = 0; il < cfg->n_layer; il++)
		for (int w = 0; w < 2; w++) {
			const size_t r = ((size_t)il * 2 + (size_t)w) * bt; /* first row of (il, w) in a block */
			if (c->d_kv8) {
				if ((rc = copy(c, c->d_kv8, c->block_elems, src, dst, r * kvd, nt * kvd, err)) ||
				    (rc = copy(c, c->d_kv8_exp, c->block_elems / (size_t)cfg->head_dim, src, dst, r * nkv,
					       nt * nkv, err)))
					return rc;
				continue;
			}
			if ((rc = copy(c, c->d_kv, c->block_elems * 2, src, dst, r * kvd * 2, nt * kvd * 2, err)))
				return rc;
		}
	return QC_OK;
}

int qc_cuda_be_kv_store(struct cu *c, const struct qc_cuda_rope_kv_args *rkv, struct qc_err *err)
{
	if (!c->d_kv8) /* RoPE and the binary16 store in one kernel */
		return qc_cuda_rope_kv(rkv, c->st, err);
	/* fp8: RoPE, the store and q's rotation for attention in one kernel too */
	struct qc_cuda_rope_kv_args r = *rkv;
	r.d_pool = NULL;
	r.d_pool8 = c->d_kv8;
	r.d_pool8_exp = c->d_kv8_exp;
	return qc_cuda_rope_kv_e4m3(&r, c->st, err);
}
