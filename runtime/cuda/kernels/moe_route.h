/* moe_route.h — entry point of moe_route.cu (Mixtral router: softmax, top-k, renormalize). */
#ifndef QC_CUDA_MOE_ROUTE_H
#define QC_CUDA_MOE_ROUTE_H

#include "qc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qc_cuda_moe_route_args {
	const float *d_logits;     /* (n_tok, n_expert) router outputs */
	int64_t n_tok;
	int32_t n_expert, k;       /* k <= 32, n_expert <= 256 */
	int32_t *d_sel;            /* (n_tok, k) experts, by falling probability */
	float *d_w;                /* (n_tok, k) their probabilities */
	int32_t norm;              /* 1: renormalize the k weights to sum 1 (Mixtral) */
};

/* llm_build_moe_ffn(softmax gating, norm_w = norm): first index wins ties. */
int qc_cuda_moe_route(const struct qc_cuda_moe_route_args *a, cudaStream_t s, struct qc_err *err);

#ifdef __cplusplus
}
#endif

#endif
