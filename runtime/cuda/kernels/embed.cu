/* embed.cu — token embedding: decode row ids[t] of the embedding matrix.
 * One thread per 32-element chunk, through the same decode.cuh decoders as the
 * matmuls (bit-exact with qc_dequant_row_*). A tensor-parallel rank holds the
 * rows of ids [vocab0, vocab0 + n_rows) only: other ids give zeros, which the
 * all-reduce over ranks fills in (docs/tp.md). Non-goals: scaling (gemma).
 * Reference: runtime/ops/embed.c.
 */
#include "embed.h"
#include "pdl.cuh"

#include <cuda_runtime.h>

#include "decode_dispatch.cuh"

template <int T> static __global__ void embed_kernel(const struct qc_cuda_embed_args a)
{
	qc_pdl_enter();
	const int64_t n_chunks = (a.n_embd + 31) / 32;
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= a.n_tok * n_chunks)
		return;
	const int64_t t = i / n_chunks, j = i % n_chunks;
	const int64_t r = (int64_t)a.d_ids[t] - a.vocab0;
	float *out = a.d_out + t * a.n_embd;
	if (r < 0 || r >= a.n_rows) { /* another rank's row */
		const int64_t end = 32 * j + 32 < a.n_embd ? 32 * j + 32 : a.n_embd;
		for (int64_t k = 32 * j; k < end; k++)
			out[k] = 0.0f;
		return;
	}
	const uint8_t *row = a.d_w + (uint64_t)r * a.row_bytes;
	if constexpr (qc_dev<T>::PLAIN) {
		if (32 * j + 32 > a.n_embd) { /* the short last chunk of a plain row */
			for (int64_t k = 32 * j; k < a.n_embd; k++)
				out[k] = qc_dev<T>::dec1(row, k);
			return;
		}
	}
	int c;
	qc_dev<T>::dec32(chunk_ptr<T>(row, j, &c), c, out + j * 32);
}

typedef void (*launch_fn)(const struct qc_cuda_embed_args *a, cudaStream_t s);

template <int T> static void launch(const struct qc_cuda_embed_args *a, cudaStream_t s)
{
	const int64_t n = a->n_tok * ((a->n_embd + 31) / 32);
	(void)qc_launch(embed_kernel<T>, dim3((unsigned)((n + 127) / 128)), dim3(128), 0, s, *a);
}

/* The launcher for t, nullptr when t has no device decoder (decode_dispatch.cuh). */
static launch_fn find(enum qc_type t)
{
	return qc_dev_find<launch_fn>(t, [](auto tag) { return launch<decltype(tag)::value>; });
}

extern "C" int qc_cuda_embed(const struct qc_cuda_embed_args *a, cudaStream_t s, struct qc_err *err)
{
	const launch_fn f = find(a->type);
	if (!f || (a->n_embd % 32 && qc_types[a->type].block_elems != 1) || a->n_embd < 1 || a->n_tok < 0)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "embed: type %s, n_embd %lld not supported",
				  qc_types[a->type].name ? qc_types[a->type].name : "?", (long long)a->n_embd);
	if (a->n_rows < 1 || a->vocab0 < 0)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "embed: %lld rows from id %lld", (long long)a->n_rows,
				  (long long)a->vocab0);
	if (!a->n_tok)
		return QC_OK;
	f(a, s);
	return qc_cuda_check(cudaGetLastError(), "embed_kernel", err);
}
