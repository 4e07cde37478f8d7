/* expf_ggml.c — qc_ref_expf_ggml: expf_ggml.h's ggml exp as a function (SiLU and
 * the other callers that are not built twice for FMA). */
#include "expf_ggml.h"
#include "ops.h"

float qc_ref_expf_ggml(float x)
{
	return qc_expf_ggml_inline(x);
}
