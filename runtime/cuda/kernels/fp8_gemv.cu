/* fp8_gemv.cu — y = W x for W8A8 FP8 weights in the fp8_rows layout and a few activation
 * rows (the decode steps of a few sequences): the GEMV kind of QC_LAYOUT_FP8_ROWS.
 *
 * The activations are rounded to e4m3 first (fp8_act.cu, the same codes as the GEMM
 * path's), so this is the checkpoint's arithmetic, not a float GEMV: each product
 * e4m3(w) * e4m3(x) is exact in fp32 (8 significant bits), summed in fp32, and the row
 * is scaled by d[o] * s[t] at the end. One warp per output row, streaming the row's
 * codes 16 bytes a lane (two loads in flight), converted by the e4m3x2 -> f16x2
 * instruction; the activation codes (n_rows * K bytes) come through L1. Past 2 rows the
 * conversions and FMAs (8 per weight byte at 8 rows) outrun the byte stream, so the table
 * gives it one row only (bench_fp8); it takes any count, in launches of 8. The 32 lanes are
 * summed by a fixed xor tree and each activation row has its own sums, so a row's result
 * does not depend on the others (batched == alone) nor on the launch.
 * Why: cuBLASLt's FP8 GEMM takes 13-50 us for one row of the 8B shapes (bench_fp8, H200),
 * where streaming the bytes takes 4-15.
 * Reference: runtime/ops/fp8_gemm.c (same rounding, double sums).
 */
#include "fp8_act.h"
#include "matmul_dispatch.h"
#include "pdl.cuh"

extern "C" {
#include "layout_fp8.h"
}

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace {

constexpr int WARPS = 8;  /* output rows a block */
constexpr int MAX_ROWS = 8;

/* 16 e4m3 codes (a uint4) as floats */
__device__ __forceinline__ void dec16(const uint4 q, float *f)
{
	const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w[i] & 0xffff), __NV_E4M3);
		const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w[i] >> 16), __NV_E4M3);
		const float2 a = __half22float2(*(const __half2 *)&lo), b = __half22float2(*(const __half2 *)&hi);
		f[4 * i] = a.x;
		f[4 * i + 1] = a.y;
		f[4 * i + 2] = b.x;
		f[4 * i + 3] = b.y;
	}
}

template <int R>
__global__ void __launch_bounds__(WARPS * 32) fp8_gemv(const uint8_t *__restrict__ w, const float *__restrict__ wd,
						       int64_t n, int k, const uint8_t *__restrict__ xc,
						       const float *__restrict__ xs, int rows, float *__restrict__ y,
						       int64_t ldy)
{
	const int lane = threadIdx.x & 31;
	const int64_t o = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
	if (o >= n)
		return;
	const uint8_t *wr = w + o * (int64_t)k;
	float acc[R];
#pragma unroll
	for (int r = 0; r < R; r++)
		acc[r] = 0.0f;
	/* lane l takes the 16-byte chunks l, l + 32, ...: two consumed an iteration while the
	   next two load; the first two load before the wait (weights are read-only), so
	   they stream while the activation rounding before this kernel finishes */
	const int nc = k / 16;
	const uint4 zero = make_uint4(0, 0, 0, 0);
	uint4 q0 = lane < nc ? __ldcs((const uint4 *)(wr + (int64_t)lane * 16)) : zero;
	uint4 q1 = lane + 32 < nc ? __ldcs((const uint4 *)(wr + (int64_t)(lane + 32) * 16)) : zero;
	qc_pdl_trigger();
	qc_pdl_wait();
	for (int c = lane; c < nc; c += 64) {
		const bool two = c + 32 < nc;
		const uint4 n0 = c + 64 < nc ? __ldcs((const uint4 *)(wr + (int64_t)(c + 64) * 16)) : zero;
		const uint4 n1 = c + 96 < nc ? __ldcs((const uint4 *)(wr + (int64_t)(c + 96) * 16)) : zero;
		float f0[16], f1[16];
		dec16(q0, f0);
		dec16(q1, f1);
#pragma unroll
		for (int r = 0; r < R; r++) {
			if (r >= rows)
				break;
			float g[16];
			dec16(__ldg((const uint4 *)(xc + (int64_t)r * k + (int64_t)c * 16)), g);
			float s = acc[r];
#pragma unroll
			for (int j = 0; j < 16; j++)
				s = fmaf(f0[j], g[j], s);
			if (two) {
				dec16(__ldg((const uint4 *)(xc + (int64_t)r * k + (int64_t)(c + 32) * 16)), g);
#pragma unroll
				for (int j = 0; j < 16; j++)
					s = fmaf(f1[j], g[j], s);
			}
			acc[r] = s;
		}
		q0 = n0;
		q1 = n1;
	}
#pragma unroll
	for (int r = 0; r < R; r++) {
		float v = acc[r];
		for (int off = 16; off > 0; off >>= 1)
			v += __shfl_xor_sync(0xffffffffu, v, off);
		if (lane == 0 && r < rows)
			y[(int64_t)r * ldy + o] = v * wd[o] * xs[r];
	}
}

} // namespace

extern "C" int qc_cuda_fp8_gemv(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err)
{
	if (qc_cuda_mm_check_fuse(a, 0, "fp8_gemv", err))
		return QC_EUNSUPPORTED;
	if (a->n_rows == 0)
		return QC_OK;
	const int64_t ne[4] = {a->n_in, a->n_out, 1, 1};
	struct qc_fp8_rows_geom g;
	if (a->d_expert || a->x_div != 1 || qc_fp8_rows_geom(a->type, ne, &g) || a->n_rows < 0 ||
	    a->n_rows > INT32_MAX || a->n_out > (int64_t)INT32_MAX * WARPS || (uintptr_t)a->d_w % 16)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "fp8_gemv: experts, x_div %d, shape %lld x %lld x %lld (%s) or weights not 16-byte "
				  "aligned not supported",
				  a->x_div, (long long)a->n_rows, (long long)a->n_out, (long long)a->n_in,
				  qc_types[a->type].name);
	const uint64_t need = qc_cuda_fp8_ws_scales(a->n_in, a->n_rows) + 4 * (uint64_t)a->n_rows;
	if (a->ws_bytes < need || !a->d_ws)
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "fp8_gemv: scratch of %llu bytes, %llu needed",
				  (unsigned long long)a->ws_bytes, (unsigned long long)need);
	uint8_t *xc = (uint8_t *)a->d_ws + qc_cuda_fp8_ws_codes();
	float *xs = (float *)((uint8_t *)a->d_ws + qc_cuda_fp8_ws_scales(a->n_in, a->n_rows));
	int rc = qc_cuda_fp8_act_quant(a->d_x, a->ldx, a->n_rows, a->n_in, (const float *)(a->d_w + g.act_off), xc, xs,
				       s, err);
	if (rc)
		return rc;
	const unsigned grid = (unsigned)((a->n_out + WARPS - 1) / WARPS);
	const float *wd = (const float *)(a->d_w + g.scale_off);
	const int k = (int)a->n_in;
	/* more than MAX_ROWS rows (a row boundary set past 8): chunks of MAX_ROWS, each its own
	   launch over the same codes (each row still has its own sums) */
	for (int64_t r0 = 0; r0 < a->n_rows; r0 += MAX_ROWS) {
		const int rows = (int)(a->n_rows - r0 < MAX_ROWS ? a->n_rows - r0 : MAX_ROWS);
		const uint8_t *c = xc + r0 * (int64_t)k;
		const float *sc = xs + r0;
		float *y = a->d_y + r0 * a->ldy;
		const dim3 gd(grid), bd(WARPS * 32);
		const cudaError_t e =
			rows == 1   ? qc_launch(fp8_gemv<1>, gd, bd, 0, s, a->d_w, wd, a->n_out, k, c, sc, rows, y, a->ldy)
			: rows == 2 ? qc_launch(fp8_gemv<2>, gd, bd, 0, s, a->d_w, wd, a->n_out, k, c, sc, rows, y, a->ldy)
			: rows <= 4 ? qc_launch(fp8_gemv<4>, gd, bd, 0, s, a->d_w, wd, a->n_out, k, c, sc, rows, y, a->ldy)
				    : qc_launch(fp8_gemv<8>, gd, bd, 0, s, a->d_w, wd, a->n_out, k, c, sc, rows, y, a->ldy);
		if ((rc = qc_cuda_check(e, "fp8_gemv launch", err)))
			return rc;
	}
	return QC_OK;
}
