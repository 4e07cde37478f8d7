/* silu_mul.c — reference of runtime/cuda/kernels/silu_mul.cu: y = silu(g) * u.
 * silu(g) = g / (1 + exp(-g)) with ggml's exp (expf_ggml.h), rounded to float, then
 * times u: llama.cpp's AVX2/FMA ggml_vec_silu_f32 then ggml_mul, bit for bit (rows whose
 * length is not a multiple of 8 take libm's expf for their last n % 8 there; not here).
 * Built twice, as paged_attn.c's head: for FMA (the exp's fmaf as instructions) and
 * plain (libm's fmaf), picked per call by CPU; the same bits. The library calls were
 * a tenth of a SmolLM2 prefill, all of it on one thread.
 */
#include <math.h>

#include "expf_ggml.h"
#include "ops.h"

static inline __attribute__((always_inline)) void silu_mul_body(const float *g, const float *u, float *y,
								 int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		const float s = g[i] / (1.0f + qc_expf_ggml_inline(-g[i]));
		y[i] = s * u[i];
	}
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
static __attribute__((target("fma"))) void silu_mul_fma(const float *g, const float *u, float *y, int64_t n)
{
	silu_mul_body(g, u, y, n);
}
#endif

void qc_ref_silu_mul(const float *g, const float *u, float *y, int64_t n)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
	if (__builtin_cpu_supports("fma")) {
		silu_mul_fma(g, u, y, n);
		return;
	}
#endif
	silu_mul_body(g, u, y, n);
}
