/* test_gemma_ops.c — the plain-C ops Gemma 2 adds (runtime/ops), against formulas.
 *
 * qc_ref_attn_token with a window and a soft-cap against a direct evaluation in
 * double of llama.cpp's definition: scores s_j = cap * tanh((q . k_j) * scale / cap)
 * for pos - W < j <= pos (llama_context's SWA mask: pos - p >= n_swa is cut),
 * softmax, sum of p_j v_j. The same direct evaluation without the window (or
 * without the cap) must disagree with the op: the checker can fail. GELU-tanh:
 * qc_ref_gelu_mul exact against the formula in double, and the binary16 mode
 * against that formula rounded through binary16 (ggml GGML_GELU_FP16), with its
 * -10 / +10 cut-offs. qc_ref_softcap against tanh in double.
 */
#include <math.h>

#include "check.h"
#include "fp16.h"
#include "ops.h"

#define HD 8
#define NH 2
#define NKV 1
#define BT 4
#define N 13 /* positions 0..12: longer than the window */
#define W 5

static uint64_t rng = 12345;

static double uni(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(rng >> 11) / (double)(1ull << 53);
}

/* head h's output by the formula; window 0: all positions; cap 0: none */
static void direct(const float *q, const float *pool, const int32_t *table, int h, int window, double cap,
		   double scale, double *out)
{
	const int32_t pos = N - 1, j0 = window ? pos - window + 1 : 0;
	double s[N], mx = -INFINITY, sum = 0.0;
	for (int32_t j = j0; j <= pos; j++) {
		const float *k = pool + (((int64_t)table[j / BT] * 2 + 0) * BT + j % BT) * HD;
		double d = 0.0;
		for (int i = 0; i < HD; i++)
			d += (double)q[h * HD + i] * k[i];
		d *= scale;
		s[j] = cap > 0 ? cap * tanh(d / cap) : d;
		mx = s[j] > mx ? s[j] : mx;
	}
	for (int32_t j = j0; j <= pos; j++)
		sum += exp(s[j] - mx);
	for (int i = 0; i < HD; i++)
		out[i] = 0.0;
	for (int32_t j = j0; j <= pos; j++) {
		const float *v = pool + (((int64_t)table[j / BT] * 2 + 1) * BT + j % BT) * HD;
		for (int i = 0; i < HD; i++)
			out[i] += exp(s[j] - mx) / sum * v[i];
	}
}

static double max_err(const float *got, const float *q, const float *pool, const int32_t *table, int window,
		      double cap, double scale)
{
	double e = 0.0, want[HD];
	for (int h = 0; h < NH; h++) {
		direct(q, pool, table, h, window, cap, scale, want);
		for (int i = 0; i < HD; i++)
			e = fmax(e, fabs(got[h * HD + i] - want[i]));
	}
	return e;
}

static void attention_window_softcap(void)
{
	const int32_t table[] = {3, 0, 2, 1}; /* blocks out of order */
	static float pool[4 * 2 * BT * HD], q[NH * HD], out[NH * HD], scratch[2 * HD + N];
	for (size_t i = 0; i < sizeof pool / sizeof pool[0]; i++)
		pool[i] = (float)(uni() * 4 - 2);
	for (int i = 0; i < NH * HD; i++)
		q[i] = (float)(uni() * 6 - 3);
	const float scale = 0.5f, cap = 2.0f;
	struct qc_ref_attn_args a = {
		.pool = {.f32 = pool, .n_layer = 1, .bt = BT, .kv_dim = NKV * HD},
		.layer = 0, .n_head = NH, .n_head_kv = NKV, .hd = HD, .scale = scale, .round = QC_REF_ATTN_F32,
		.softcap = cap, .window = W,
	};
	qc_ref_attn_token(&a, q, out, N - 1, table, scratch);
	const double e0 = max_err(out, q, pool, table, W, cap, scale);
	CHECK(e0 < 1e-5, "window %d, cap %g: max error %.3e", W, cap, e0);
	/* the checker tells a missing window and a missing cap apart from the op */
	double ew = max_err(out, q, pool, table, 0, cap, scale), ec = max_err(out, q, pool, table, W, 0, scale);
	CHECK(ew > 1e-2 && ec > 1e-2, "blind checker: without window %.3e, without cap %.3e", ew, ec);
	/* a window as long as the context cuts nothing; window 0 is none */
	a.window = N;
	qc_ref_attn_token(&a, q, out, N - 1, table, scratch);
	double e = max_err(out, q, pool, table, 0, cap, scale);
	a.window = 0;
	float out0[NH * HD];
	qc_ref_attn_token(&a, q, out0, N - 1, table, scratch);
	CHECK(e < 1e-5 && !memcmp(out, out0, sizeof out0), "window >= context: error %.3e", e);
	/* window 1: the token sees only itself, so out = its V row */
	a.window = 1;
	a.softcap = 0.0f;
	qc_ref_attn_token(&a, q, out, N - 1, table, scratch);
	const float *v = pool + (((int64_t)table[(N - 1) / BT] * 2 + 1) * BT + (N - 1) % BT) * HD;
	CHECK(!memcmp(out, v, sizeof(float) * HD) && !memcmp(out + HD, v, sizeof(float) * HD), "window 1 != own V");
	printf("  attention: window %d of %d positions, soft-cap %g: max error %.2e (without window %.2e, cap %.2e)\n",
	       W, N, cap, e0, ew, ec);
}

static double gelu_d(double x)
{
	return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * x * (1.0 + 0.044715 * x * x)));
}

static void gelu_and_softcap(void)
{
	enum { M = 4001 };
	static float g[M], u[M], y[M], y16[M];
	for (int i = 0; i < M; i++) {
		g[i] = (float)(-12.0 + 24.0 * i / (M - 1));
		u[i] = (float)(uni() + 0.5);
	}
	qc_ref_gelu_mul(g, u, y, M, QC_REF_GELU_EXACT);
	qc_ref_gelu_mul(g, u, y16, M, QC_REF_GELU_F16_TABLE);
	double e = 0.0, e16 = 0.0;
	int cut = 0;
	for (int i = 0; i < M; i++) {
		e = fmax(e, fabs(y[i] - gelu_d(g[i]) * u[i]) / (1.0 + fabs(gelu_d(g[i]))));
		if (g[i] <= -10.0f || g[i] >= 10.0f) {
			cut += y16[i] != (g[i] <= -10.0f ? 0.0f : g[i] * u[i]);
			continue;
		}
		const float x16 = qc_fp16_to_f32(qc_f32_to_fp16(g[i]));
		const double want = (double)qc_fp16_to_f32(qc_f32_to_fp16((float)gelu_d(x16))) * u[i];
		/* within one binary16 ulp of the gelu value (the float gelu may round the
		 * other way next to a binary16 boundary) plus the float formula's own
		 * cancellation in 1 + tanh for negative x, |x| 2^-24 (ggml's table has it too) */
		int ex;
		frexp(gelu_d(x16), &ex);
		const double ulp = ex - 11 < -24 ? 0x1p-24 : ldexp(1.0, ex - 11);
		e16 = fmax(e16, fabs(y16[i] - want) / u[i] / (ulp + fabs(x16) * 0x1p-24));
	}
	CHECK(e < 1e-6, "gelu exact: relative error %.3e", e);
	CHECK(e16 <= 1.0, "gelu binary16: %.2f of the allowed error from the formula rounded", e16);
	CHECK(cut == 0, "gelu binary16: %d values past +-10 not cut off as ggml does", cut);
	/* the binary16 mode really rounds: it differs from the exact one somewhere */
	int diff = 0;
	for (int i = 0; i < M; i++)
		diff += y[i] != y16[i];
	CHECK(diff > M / 2, "binary16 mode equals exact on %d of %d", M - diff, M);

	float x[5] = {-100.0f, -3.0f, 0.0f, 2.5f, 1e4f};
	qc_ref_softcap(x, 5, 30.0f);
	const double in[5] = {-100.0, -3.0, 0.0, 2.5, 1e4};
	double es = 0.0;
	for (int i = 0; i < 5; i++)
		es = fmax(es, fabs(x[i] - 30.0 * tanh(in[i] / 30.0)));
	CHECK(es < 1e-5 && x[4] <= 30.0f, "softcap: max error %.3e, cap exceeded %g", es, x[4]);
	printf("  gelu exact rel err %.2e, binary16 %.2f of its bound; softcap err %.2e\n", e, e16, es);
}

int main(void)
{
	attention_window_softcap();
	gelu_and_softcap();
	return check_report("test_gemma_ops");
}
