/* nvfp4_swz.cu — y = W x for W in the nvfp4_swz layout (quant/layout_nvfp4.h,
 * docs/layout-nvfp4.md): the matmul_layouts.def row of QC_LAYOUT_NVFP4_SWZ.
 *
 * GEMV (few float rows, MoE rows with an expert each): one warp per output row n;
 * lane l takes scale groups c = l, l+32, ... of the row: 8 code bytes (one 8-byte
 * load; a warp reads 256 contiguous bytes), the E4M3 code of (n, c) from its
 * 128x4 tile, d = fl(e4m3/g) (the nvfp4 decoder's block scale, bit for bit: the
 * bundle's pack checked that), weights fl(e2m1(q)·d), float fmas with float x;
 * the 32 lanes are summed by a fixed xor tree. Up to ROWS activation rows share a
 * warp's weight decode; each row has its own sums, so a row's result does not
 * depend on the others (batched == alone).
 * GEMM (many rows, no experts): the slice decoded to fp16 W[n][k] (same weights,
 * rounded to fp16), activations to fp16, cuBLAS GemmEx with fp32 accumulation.
 * Built for every NVFLAGS arch; the Makefile adds sm_100a for this file when nvcc
 * has it (compile-only: sm100's block-scaled tcgen05 MMA would read these bytes
 * directly; this file does not use it).
 * Index grammar: o output row (n), r activation row, c scale group (16 elements),
 * q a 4-bit code, s an E4M3 code, g the row's global scale.
 * Reference: runtime/ops/nvfp4_swz.c (same function, host decode of the layout).
 */
#include "matmul_dispatch.h"

extern "C" {
#include "layout_nvfp4.h"
}
#include "dequant_f16.h"
#include "dequant_hfq.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace {

constexpr int WARPS = 8;           /* output rows per block, a warp each */
constexpr int ROWS = 4;            /* activation rows per block (dense) */
constexpr int64_t GRID_Y = 65535;  /* launches cover at most this many row groups */

struct geom {
	uint64_t scale_off, gs_off;    /* bytes from a slice's start */
	int64_t kgp;                   /* scales per padded row (multiple of 4) */
};

struct gparams {
	const uint8_t *w;
	uint64_t mat_stride;
	geom gm;
	const int32_t *expert;         /* (n_rows) or NULL */
	const float *x;
	int64_t ldx;
	int32_t x_div;
	float *y;
	int64_t ldy;
	int64_t r0, n_rows;            /* rows of this launch: r0 + blockIdx.y * NR .. */
	int64_t n;
	int k;
};

/* OCP E2M1 s.ee.m: m/2 for e = 0, else (1 + m/2)·2^(e-1), i.e. f32 bits
 * (126 + e) << 23 | m << 22 = 0x3f000000 + (ee.m << 22); exact. */
__device__ __forceinline__ float e2m1(uint32_t q)
{
	const uint32_t mag = q & 7;
	const float v = mag < 2 ? 0.5f * (float)mag : __uint_as_float(0x3f000000u + (mag << 22));
	return q & 8 ? -v : v;
}

/* Byte offset of scale (o, c) in the scale region: tile (o/128, c/4), then
 * (o%32)·16 + ((o%128)/32)·4 + c%4 (CUTLASS's 128x4 K-major atom). */
__device__ __forceinline__ uint64_t scale_at(int64_t o, int64_t c, int64_t kgp)
{
	return ((uint64_t)(o / 128) * (uint64_t)(kgp / 4) + (uint64_t)(c / 4)) * 512 + (uint64_t)(o % 32) * 16 +
	       (uint64_t)((o % 128) / 32) * 4 + (uint64_t)(c % 4);
}

/* The 16 weights of group c of row o: fl(e2m1(q)·d), d = fl(e4m3(s)/g). */
__device__ __forceinline__ void group_weights(const uint8_t *slice, const geom &gm, int64_t o, int64_t c, int k,
					      float g, float wv[16])
{
	const uint2 q = *(const uint2 *)(slice + (uint64_t)o * (uint64_t)(k / 2) + (uint64_t)c * 8);
	const float d = __fdiv_rn(qc_e4m3_to_f32(slice[gm.scale_off + scale_at(o, c, gm.kgp)]), g);
	const uint32_t qw[2] = {q.x, q.y};
#pragma unroll
	for (int j = 0; j < 16; j++)
		wv[j] = __fmul_rn(e2m1(qw[j / 8] >> (4 * (j % 8))), d);
}

template <int NR> __global__ void __launch_bounds__(WARPS * 32) gemv_kernel(const gparams p)
{
	const int lane = threadIdx.x & 31;
	const int64_t o = (int64_t)blockIdx.x * WARPS + threadIdx.x / 32;
	const int64_t r0 = p.r0 + (int64_t)blockIdx.y * NR;
	if (o >= p.n || r0 >= p.n_rows)
		return; /* whole warps: no block-wide sync below */
	const int nr = p.n_rows - r0 < NR ? (int)(p.n_rows - r0) : NR;
	const uint8_t *slice = p.w + (uint64_t)(p.expert ? p.expert[r0] : 0) * p.mat_stride;
	const float g = *(const float *)(slice + p.gm.gs_off + 4 * (uint64_t)o);
	const float *xr[NR];
	float acc[NR];
#pragma unroll
	for (int i = 0; i < NR; i++) {
		xr[i] = p.x + ((r0 + (i < nr ? i : 0)) / p.x_div) * p.ldx; /* rows past nr: read, unused */
		acc[i] = 0.0f;
	}
	for (int64_t c = lane; c < p.k / 16; c += 32) {
		float wv[16];
		group_weights(slice, p.gm, o, c, p.k, g, wv);
#pragma unroll
		for (int i = 0; i < NR; i++) {
			const float *xc = xr[i] + c * 16;
#pragma unroll
			for (int j = 0; j < 16; j++)
				acc[i] = fmaf(wv[j], xc[j], acc[i]);
		}
	}
#pragma unroll
	for (int i = 0; i < NR; i++)
		for (int off = 16; off; off >>= 1)
			acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], off);
	if (lane == 0)
		for (int i = 0; i < nr; i++)
			p.y[(r0 + i) * p.ldy + o] = acc[i];
}

/* One thread per (o, c): 16 fp16 weights, two 16-byte stores. */
__global__ void to_f16_kernel(const uint8_t *slice, geom gm, int64_t n, int k, __half *out)
{
	const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, groups = k / 16;
	if (t >= n * groups)
		return;
	const int64_t o = t / groups, c = t % groups;
	const float g = *(const float *)(slice + gm.gs_off + 4 * (uint64_t)o);
	float wv[16];
	group_weights(slice, gm, o, c, k, g, wv);
	uint32_t u[8];
#pragma unroll
	for (int j = 0; j < 8; j++) {
		const __half2 h = __floats2half2_rn(wv[2 * j], wv[2 * j + 1]);
		memcpy(&u[j], &h, 4);
	}
	uint4 *dst = (uint4 *)(out + o * k + c * 16);
	dst[0] = make_uint4(u[0], u[1], u[2], u[3]);
	dst[1] = make_uint4(u[4], u[5], u[6], u[7]);
}

uint64_t align256(uint64_t v)
{
	return (v + 255) & ~(uint64_t)255;
}

/* Geometry of a's matrices, or QC_EUNSUPPORTED naming the shape. */
int check(const struct qc_cuda_mm_args *a, const char *what, geom *gm, struct qc_err *err)
{
	struct qc_nvfp4_swz_geom g;
	const int64_t ne[4] = {a->n_in, a->n_out, 1, 1};
	if (a->layout != QC_LAYOUT_NVFP4_SWZ || qc_nvfp4_swz_geom(a->type, ne, &g) || a->x_div < 1 || a->n_rows < 0 ||
	    (a->d_expert && a->mat_stride < g.slice_bytes) || a->mat_stride % 16 || (uintptr_t)a->d_w % 16)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "%s: %s %s n_in %lld, n_out %lld, x_div %d, mat_stride %llu not supported", what,
				  qc_layout_name(a->layout), qc_types[a->type].name, (long long)a->n_in,
				  (long long)a->n_out, a->x_div, (unsigned long long)a->mat_stride);
	gm->scale_off = g.scale_off;
	gm->gs_off = g.gs_off;
	gm->kgp = g.kgp;
	return QC_OK;
}

template <int NR> int launch_gemv(gparams p, cudaStream_t s, struct qc_err *err)
{
	const int64_t groups = (p.n_rows + NR - 1) / NR;
	for (int64_t g0 = 0; g0 < groups; g0 += GRID_Y) {
		const int64_t gy = groups - g0 < GRID_Y ? groups - g0 : GRID_Y;
		p.r0 = g0 * NR;
		const dim3 grid((unsigned)((p.n + WARPS - 1) / WARPS), (unsigned)gy);
		gemv_kernel<NR><<<grid, WARPS * 32, 0, s>>>(p);
		const int rc = qc_cuda_check(cudaGetLastError(), "nvfp4_swz gemv_kernel", err);
		if (rc)
			return rc;
	}
	return QC_OK;
}

int blas_check(cublasStatus_t st, const char *what, struct qc_err *err)
{
	if (st == CUBLAS_STATUS_SUCCESS)
		return QC_OK;
	return qc_err_set(err, QC_ECUDA, NULL, NULL, -1, "%s: cuBLAS status %d (%s)", what, (int)st,
			  cublasGetStatusString(st));
}

} /* namespace */

/* Scratch: the GEMM's fp16 weight and activations (the GEMV needs none). */
extern "C" uint64_t qc_cuda_nvfp4_swz_ws(int64_t n_in, int64_t n_out, int64_t n_rows,
				       const struct qc_cuda_mm_tuning *t)
{
	(void)t; /* the same at any boundary */
	return align256((uint64_t)n_in * (uint64_t)n_out * 2) + align256((uint64_t)n_in * (uint64_t)n_rows * 2);
}

extern "C" int qc_cuda_nvfp4_swz_gemv(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err)
{
	if (qc_cuda_mm_check_fuse(a, 0, "nvfp4_swz_gemv", err))
		return QC_EUNSUPPORTED;
	geom gm;
	int rc = check(a, "nvfp4_swz_gemv", &gm, err);
	if (rc || a->n_rows == 0 || a->n_out == 0)
		return rc;
	if (a->n_in > INT32_MAX)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "nvfp4_swz_gemv: n_in %lld", (long long)a->n_in);
	gparams p = {};
	p.w = a->d_w;
	p.mat_stride = a->mat_stride;
	p.gm = gm;
	p.expert = a->d_expert;
	p.x = a->d_x;
	p.ldx = a->ldx;
	p.x_div = a->x_div;
	p.y = a->d_y;
	p.ldy = a->ldy;
	p.n_rows = a->n_rows;
	p.n = a->n_out;
	p.k = (int)a->n_in;
	/* experts: every row its own matrix, one row per block */
	return a->d_expert ? launch_gemv<1>(p, s, err) : launch_gemv<ROWS>(p, s, err);
}

extern "C" int qc_cuda_nvfp4_swz_gemm(const struct qc_cuda_mm_args *a, cudaStream_t s, struct qc_err *err)
{
	if (qc_cuda_mm_check_fuse(a, 0, "nvfp4_swz_gemm", err))
		return QC_EUNSUPPORTED;
	geom gm;
	int rc = check(a, "nvfp4_swz_gemm", &gm, err);
	if (rc)
		return rc;
	cublasHandle_t h = (cublasHandle_t)a->blas;
	if (a->d_expert || a->x_div != 1 || !h || a->n_in > INT32_MAX || a->n_out > INT32_MAX || a->n_rows > INT32_MAX)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "nvfp4_swz_gemm: experts, x_div %d or shape %lld x %lld x %lld not supported", a->x_div,
				  (long long)a->n_rows, (long long)a->n_out, (long long)a->n_in);
	if (a->n_rows == 0 || a->n_out == 0)
		return QC_OK;
	const uint64_t wb = align256((uint64_t)a->n_in * (uint64_t)a->n_out * 2);
	if (!a->d_ws || a->ws_bytes < align256((uint64_t)a->n_in * (uint64_t)a->n_out * 2) +
					    align256((uint64_t)a->n_in * (uint64_t)a->n_rows * 2))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1, "nvfp4_swz_gemm: scratch of %llu bytes too small",
				  (unsigned long long)a->ws_bytes);
	__half *w16 = (__half *)a->d_ws;
	uint16_t *x16 = (uint16_t *)((uint8_t *)a->d_ws + wb);
	const int64_t threads = a->n_out * (a->n_in / 16);
	if ((threads + 255) / 256 > INT32_MAX)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1, "nvfp4_swz_gemm: %lld x %lld weight too large",
				  (long long)a->n_out, (long long)a->n_in);
	to_f16_kernel<<<(unsigned)((threads + 255) / 256), 256, 0, s>>>(a->d_w, gm, a->n_out, (int)a->n_in, w16);
	if ((rc = qc_cuda_check(cudaGetLastError(), "nvfp4_swz to_f16_kernel", err)))
		return rc;
	const struct qc_cuda_dequant_f16_args dx = {(const uint8_t *)a->d_x, QC_TYPE_F32, (uint64_t)a->ldx * 4,
						    a->n_rows, a->n_in, x16};
	if ((rc = qc_cuda_dequant_f16(&dx, s, err)))
		return rc;
	/* only when it differs: cublasSetStream drops a workspace set with cublasSetWorkspace */
	cudaStream_t cur = NULL;
	if ((rc = blas_check(cublasGetStream(h, &cur), "cublasGetStream", err)) ||
	    (cur != s && (rc = blas_check(cublasSetStream(h, s), "cublasSetStream", err))))
		return rc;
	const float one = 1.0f, zero = 0.0f;
	const int m = (int)a->n_out, n = (int)a->n_rows, k = (int)a->n_in;
	return blas_check(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, w16, CUDA_R_16F, k, x16,
				       CUDA_R_16F, k, &zero, a->d_y, CUDA_R_32F, (int)a->ldy, CUBLAS_COMPUTE_32F,
				       CUBLAS_GEMM_DEFAULT),
			  "nvfp4_swz_gemm: cublasGemmEx", err);
}
