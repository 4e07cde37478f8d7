/* backend_cuda_l2.c — the order in which a decode step reads the dense weights
 * (per layer Q, K, V, O, gate, up, down; then the output matrix; then layer 0
 * again, the next step), and the L2 prefetch hint each matmul launch carries:
 * the first QC_CUDA_L2_PREFETCH MB of the weights that follow its own in that
 * order (qc_cuda_l2_hint, matmul_dispatch.h).
 *
 * Why: between the GEMVs a layer runs latency-bound kernels (RoPE and the K/V
 * store, attention, its merge; ~15 us per layer on an 8B model) during which the
 * memory system idles, and the 4096-wide GEMVs themselves run at a third of the
 * copy rate (docs/perf-notes.md). Bytes asked of L2 then are bytes the next GEMV
 * does not wait for. Only a hint: no result depends on it.
 * Non-goals: MoE expert stacks (a step reads only the routed experts' rows).
 */
#include <stdlib.h>

#include "backend_cuda_int.h"

/* Appends w to the order (when present and its bytes can be asked of L2 as they
 * are: 16-byte aligned, whole 16-byte units) and remembers its place. */
static void add(struct cu *c, struct dmat *w)
{
	if (!w->d_w)
		return;
	const uint64_t bytes = w->mat_stride * (uint64_t)(w->n_mat > 1 ? w->n_mat : 1);
	if ((uintptr_t)w->d_w % 16 || bytes % 16 || !bytes)
		return;
	c->l2_seq[c->n_l2] = (struct l2_range){w->d_w, bytes};
	w->l2_at = ++c->n_l2; /* 1-based: a zeroed dmat has no place */
}

int qc_cuda_be_l2_order(struct cu *c, struct qc_err *err)
{
	const int nl = c->m->cfg.n_layer;
	if (c->env.l2_bytes <= 0)
		return QC_OK;
	c->l2_seq = calloc((size_t)nl * 7 + 1, sizeof *c->l2_seq);
	if (!c->l2_seq)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	for (int il = 0; il < nl; il++) {
		struct dlayer *L = &c->L[il];
		struct dmat *const ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
		for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
			add(c, ws[i]);
	}
	add(c, &c->out);
	return QC_OK;
}

void qc_cuda_be_l2_hint(const struct cu *c, const struct dmat *const *w, int n, struct qc_cuda_l2_hint *h)
{
	h->n = 0;
	int last = 0;
	for (int i = 0; i < n; i++)
		last = w[i]->l2_at > last ? w[i]->l2_at : last;
	if (!last || c->n_l2 < 2)
		return;
	uint64_t left = (uint64_t)c->env.l2_bytes;
	/* the ranges after the launch's last matrix, wrapping to layer 0 */
	for (int k = 0; k < c->n_l2 - 1 && left && h->n < QC_CUDA_L2_RANGES; k++) {
		const struct l2_range *r = &c->l2_seq[(last + k) % c->n_l2];
		const uint64_t b = r->bytes < left ? r->bytes : left & ~(uint64_t)15;
		if (!b)
			break;
		h->d[h->n] = r->d;
		h->bytes[h->n] = b;
		h->n++;
		left -= b;
	}
}
