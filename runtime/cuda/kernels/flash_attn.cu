/* flash_attn.cu — causal prefill attention over the paged K/V pool (binary16, or fp8) on
 * tensor cores: each query tile reads its sequence's keys once, not once per token.
 *
 * A run = consecutive plan tokens of one sequence at consecutive positions (a
 * prefill chunk); runs_kernel (one block) finds them on the device and lists
 * query tiles of Bq = FM / G tokens (G = query heads per K/V head). One block of
 * FT threads per (K/V head, tile): FM query rows (token-major: row r = token
 * r / G, head r % G), four warps of 16 rows each; keys in tiles of BK through the
 * block table, cp.async double-buffered; S = Q K^T and O += P V with
 * mma.sync m16n8k16 (binary16 in, fp32 accumulate; Q fragments in registers,
 * re-read from shared memory for hd > 128), online softmax in registers
 * (running max and sum per row, FlashAttention-2), causal mask where a key tile
 * passes a row's position. Per row the result does not depend on the tile it
 * shares (fully masked key tiles leave it bit-identical), only on its q and keys.
 * Numerics: q * scale * log2(e) and P rounded to binary16; l sums the rounded P.
 * fp8 pool (d_pool8): a tile's values are decoded to binary16 by plain loads, four
 * chunks in flight per thread (kv_pool.cuh kv8_half8_raw, exact in binary16's
 * range) where the f16 pool's are copied by cp.async; q comes rotated as its K rows
 * are (paged_attn.h).
 * Soft-capped scores and sliding windows (attn_window.cuh): the cap on the score
 * in natural units (log2 units divided out and back), then the causal and window
 * masks; a tile's keys start at its first row's window, and key tiles before a
 * warp's windows are skipped like those past its positions (nothing before a
 * window is read: its blocks may be released).
 * Non-goals: decode tokens and short runs (paged_attn.cu keeps them), ALiBi.
 * Index grammar: t token (plan), r query row of a tile, j key position, k0 first
 * key of a key tile, gr/tq lane / 4 and lane % 4 (mma fragment row / column pair).
 * Reference: runtime/ops/flash_attn.c; Dao, FlashAttention-2 (2023) §3.1 (facts only);
 * PTX ISA: mma.m16n8k16 and ldmatrix fragment layouts.
 */
#include "flash_attn.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "attn_window.cuh"
#include "cp_async.cuh"
#include "kv_pool.cuh"
#include "mma_sync.cuh"

#define FT 128    /* threads of an attention block: 4 warps x 16 query rows */
#define FM 64     /* query rows (token, head) per block */
#define RT 1024   /* threads of runs_kernel */
#define LOG2E 1.4426950408889634f

/* ---- run list ------------------------------------------------------------ */

struct flash_meta {
	int32_t *count; /* (1) tiles listed */
	int2 *tiles;    /* (n_tok) (first token, tokens) of each tile, plan order */
	int32_t *rs;    /* (n_tok) first token of each token's run */
	int32_t *len;   /* (n_tok) run length, at a run's first token */
};

static __device__ __forceinline__ bool pos_ok(const struct qc_cuda_paged_attn_args &a, int64_t t)
{
	return a.d_pos[t] >= 0 && a.d_pos[t] < a.max_ctx;
}

/* Token t continues the run of token t - 1 (both positions in range). */
static __device__ __forceinline__ bool linked(const struct qc_cuda_paged_attn_args &a, int64_t t)
{
	return t > 0 && a.d_tok_seq[t] == a.d_tok_seq[t - 1] && pos_ok(a, t - 1) && pos_ok(a, t) &&
	       a.d_pos[t] == a.d_pos[t - 1] + 1;
}

enum scan_op { SCAN_SUM, SCAN_MAX };

/* Inclusive block scan of v (identity 0); *total = the block's last value. */
template <enum scan_op OP> static __device__ int32_t block_scan(int32_t v, int32_t *total)
{
	__shared__ int32_t part[32];
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	for (int off = 1; off < 32; off <<= 1) {
		const int32_t y = __shfl_up_sync(0xffffffffu, v, off);
		if (lane >= off)
			v = OP == SCAN_SUM ? v + y : max(v, y);
	}
	if (lane == 31)
		part[w] = v;
	__syncthreads();
	if (w == 0) {
		int32_t x = lane < nw ? part[lane] : 0;
		for (int off = 1; off < 32; off <<= 1) {
			const int32_t y = __shfl_up_sync(0xffffffffu, x, off);
			if (lane >= off)
				x = OP == SCAN_SUM ? x + y : max(x, y);
		}
		if (lane < nw)
			part[lane] = x;
	}
	__syncthreads();
	if (w > 0)
		v = OP == SCAN_SUM ? v + part[w - 1] : max(v, part[w - 1]);
	*total = part[nw - 1];
	__syncthreads(); /* part is reused by the next call */
	return v;
}

/* Runs, d_done and the tile list, in one block: pass 1 gives every token its
 * run's first token (max-scan of run starts) and stores each run's length at
 * its first token; pass 2 flags the tokens of runs of min_run+ and lists a tile
 * at every bq-th token of such a run (sum-scan for the slot). */
static __global__ void __launch_bounds__(RT) runs_kernel(const struct qc_cuda_paged_attn_args a, int32_t min_run,
							  int32_t bq, int32_t *done, struct flash_meta m)
{
	__shared__ int32_t carry;
	const int64_t n = a.n_tok;
	if (threadIdx.x == 0)
		carry = 0;
	__syncthreads();
	for (int64_t base = 0; base < n; base += RT) {
		const int64_t t = base + threadIdx.x;
		int32_t tot, v = t < n && !linked(a, t) ? (int32_t)t : 0;
		v = max(block_scan<SCAN_MAX>(v, &tot), carry);
		if (t < n) {
			m.rs[t] = v;
			if (t == n - 1 || !linked(a, t + 1))
				m.len[v] = (int32_t)(t + 1 - v);
		}
		__syncthreads(); /* every thread has read carry */
		if (threadIdx.x == RT - 1)
			carry = v;
		__syncthreads();
	}
	/* the len writes above are visible to the whole block after a __syncthreads */
	if (threadIdx.x == 0)
		carry = 0;
	__syncthreads();
	for (int64_t base = 0; base < n; base += RT) {
		const int64_t t = base + threadIdx.x;
		int32_t st = 0, r = 0, len = 0;
		if (t < n) {
			r = m.rs[t];
			len = m.len[r];
			/* a bad position never links, so it can only be a run of one */
			const bool f = len >= min_run && (len > 1 || pos_ok(a, t));
			done[t] = f;
			st = f && (t - r) % bq == 0;
		}
		int32_t tot;
		const int32_t slot = carry + block_scan<SCAN_SUM>(st, &tot) - st;
		if (st)
			m.tiles[slot] = make_int2((int32_t)t, min(bq, (int32_t)(r + len - t)));
		__syncthreads();
		if (threadIdx.x == 0)
			carry += tot;
		__syncthreads();
	}
	if (threadIdx.x == 0)
		*m.count = carry;
}

/* ---- tensor-core helpers (sm_80+) ----------------------------------------- */

static __device__ __forceinline__ uint32_t smem_u32(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

/* Four 8x8 b16 matrices; lane l gives the row address of row l % 8 of matrix l / 8. */
static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], const __half *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(smem_u32(p))
		     : "memory");
}

static __device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const __half *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(smem_u32(p))
		     : "memory");
}

/* binary16 pair of (x, y) as an mma operand register; *sum += the rounded values */
static __device__ __forceinline__ uint32_t pack_p(float x, float y, float *sum)
{
	union {
		__half2 h;
		uint32_t u;
	} c;
	c.h = __floats2half2_rn(x, y);
	const float2 f = __half22float2(c.h);
	*sum += f.x + f.y;
	return c.u;
}

/* ---- attention ----------------------------------------------------------- */

/* Head dims past 128 (registers): keys in tiles of 32, not 64, and the Q
 * fragments read from shared memory at every key tile instead of held in registers. */
template <int HDP> struct flash_tile {
	static constexpr int BK = HDP > 128 ? 32 : 64;
	static constexpr bool QREG = HDP <= 128;
};

template <int HDP> static size_t flash_smem(int32_t hd)
{
	/* K and V tiles, two stages, rows of hd + 8 halves (16-byte aligned rows whose
	 * ldmatrix addresses fall in distinct bank quads); Q staged in the stage-1
	 * area (FM <= 2 BK rows) or, when not held in registers, FM rows of its own */
	const int rows = 4 * flash_tile<HDP>::BK + (flash_tile<HDP>::QREG ? 0 : FM);
	return (size_t)rows * (size_t)(hd + 8) * sizeof(__half);
}

/* Keys k0 .. k0 + BK - 1 of K/V head kvh into ks / vs; rows before k_lo (the tile's
 * window) and at n_keys and past are zeros. */
template <int BK>
static __device__ __forceinline__ void load_kv(const struct qc_cuda_paged_attn_args &a, const int32_t *table, int kvh,
					       int32_t k0, int32_t k_lo, int32_t n_keys, __half *ks, __half *vs, int lds)
{
	const int nch = a.hd >> 3; /* 16-byte chunks per row */
	const int64_t kv_dim = (int64_t)a.n_head_kv * a.hd;
	if (a.d_pool8) {
		/* fp8 pool: decoded to binary16 in registers, plain stores (not cp.async);
		   U chunks' loads in flight before any is decoded, so a tile costs
		   BK * nch / (FT * U) round trips (8 when they went one at a time) */
		constexpr int U = 4;
		const int n = BK * nch;
		for (int c0 = threadIdx.x; c0 < n; c0 += FT * U) {
			kv_fp8::raw kr[U], vr[U];
#pragma unroll
			for (int u = 0; u < U; u++) {
				const int c = c0 + u * FT, r = c / nch, ch = c - r * nch;
				const int32_t j = k0 + r;
				kr[u] = vr[u] = kv_fp8::zero8(); /* zero codes: binary16 zeros */
				if (c < n && j >= k_lo && j < n_keys) {
					kr[u] = kv_fp8::load8(kv_fp8::at(a, table, j, 0, kvh), ch);
					vr[u] = kv_fp8::load8(kv_fp8::at(a, table, j, 1, kvh), ch);
				}
			}
#pragma unroll
			for (int u = 0; u < U; u++) {
				const int c = c0 + u * FT, r = c / nch, ch = c - r * nch;
				if (c < n) {
					*(uint4 *)(ks + r * lds + ch * 8) = kv8_half8_raw(kr[u]);
					*(uint4 *)(vs + r * lds + ch * 8) = kv8_half8_raw(vr[u]);
				}
			}
		}
		return;
	}
	for (int c = threadIdx.x; c < BK * nch; c += FT) {
		const int r = c / nch, ch = c - r * nch;
		const int32_t j = k0 + r;
		const bool ok = j >= k_lo && j < n_keys;
		const __half *kp = (const __half *)a.d_pool;
		if (ok) {
			const int64_t b = table[j / a.block_tokens], o = j % a.block_tokens;
			kp += ((b * a.n_layer + a.layer) * 2 * a.block_tokens + o) * kv_dim + (int64_t)kvh * a.hd + ch * 8;
		}
		cp_async16(ks + r * lds + ch * 8, kp, ok);
		cp_async16(vs + r * lds + ch * 8, ok ? kp + a.block_tokens * kv_dim : kp, ok);
	}
}

template <int HDP>
static __global__ void __launch_bounds__(FT) flash_attn_kernel(const struct qc_cuda_paged_attn_args a,
							       const int2 *tiles, const int32_t *n_tiles)
{
	constexpr int BK = flash_tile<HDP>::BK;
	constexpr bool QREG = flash_tile<HDP>::QREG;
	constexpr int NKS = HDP / 16; /* k-steps of Q K^T over head dims */
	constexpr int NO = HDP / 8;   /* 8-wide column tiles of O */
	constexpr int NS = BK / 8;    /* 8-wide column tiles of S */
	extern __shared__ uint4 flash_sm[];
	__half *sm = reinterpret_cast<__half *>(flash_sm);
	const int hd = a.hd, lds = hd + 8, nks = hd >> 4, nno = hd >> 3, nq4 = hd >> 2;
	const int G = a.n_head / a.n_head_kv, kvh = blockIdx.x;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gr = lane >> 2, tq = lane & 3;
	const int64_t q_dim = (int64_t)a.n_head * hd;
	const float qscale = a.scale * LOG2E;
	const int32_t n_all = *n_tiles;

	/* tiles in reverse plan order: a run's later (longer) tiles start first */
	for (int32_t it = blockIdx.y; it < n_all; it += gridDim.y) {
		const int2 tile = tiles[n_all - 1 - it];
		const int64_t t0 = tile.x;
		const int rows = tile.y * G;
		const int32_t p0 = a.d_pos[t0], n_keys = p0 + tile.y, nkt = (n_keys + BK - 1) / BK;
		/* the tile's first key: its first row's window start (rows after it start later) */
		const int32_t k_lo = qc_attn_win_start(a, p0), kt0 = k_lo / BK;
		const int32_t *table = a.d_tables + (int64_t)a.d_tok_seq[t0] * a.table_stride;

		load_kv<BK>(a, table, kvh, kt0 * BK, k_lo, n_keys, sm, sm + BK * lds, lds);
		cp_async_commit();
		/* Q rows, scaled to log2 units, binary16; rows past the tile are zeros */
		__half *qs = sm + (QREG ? 2 : 4) * BK * lds;
		for (int c = threadIdx.x; c < FM * nq4; c += FT) {
			const int r = c / nq4, d = (c - r * nq4) * 4;
			float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			if (r < rows)
				v = *(const float4 *)(a.d_q + (t0 + r / G) * q_dim + ((int64_t)kvh * G + r % G) * hd + d);
			__half2 *dst = (__half2 *)(qs + r * lds + d);
			dst[0] = __floats2half2_rn(v.x * qscale, v.y * qscale);
			dst[1] = __floats2half2_rn(v.z * qscale, v.w * qscale);
		}
		__syncthreads();
		/* A fragments: lane l addresses row l % 16, columns 8 (l / 16) on of a 16 x 16 block */
		const __half *qa_row = qs + (warp * 16 + (lane & 15)) * lds + (lane >> 4) * 8;
		uint32_t qf[QREG ? NKS : 1][4];
		if constexpr (QREG) {
#pragma unroll
			for (int ks = 0; ks < NKS; ks++) {
				qf[ks][0] = qf[ks][1] = qf[ks][2] = qf[ks][3] = 0;
				if (ks < nks)
					ldsm_x4(qf[ks], qa_row + ks * 16);
			}
			__syncthreads(); /* qs is the stage-1 area the first prefetch fills */
		}

		/* this thread's rows r0 and r0 + 8; rows past the tile take the last
		 * token's position (computed on zeros, never written) */
		const int r0 = warp * 16 + gr;
		const int32_t pr[2] = {p0 + min(r0, rows - 1) / G, p0 + min(r0 + 8, rows - 1) / G};
		const bool wact = warp * 16 < rows;
		const int32_t wpmax = p0 + min(warp * 16 + 15, rows - 1) / G; /* the warp's last position */
		const int32_t wjmin = qc_attn_win_start(a, p0 + min(warp * 16, rows - 1) / G); /* its first key */
		float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
		float o[NO][4];
#pragma unroll
		for (int nn = 0; nn < NO; nn++)
			o[nn][0] = o[nn][1] = o[nn][2] = o[nn][3] = 0.0f;

		for (int32_t kt = kt0; kt < nkt; kt++) {
			const int stage = (kt - kt0) & 1; /* the first tile in stage 0 (Q's staging area is stage 1) */
			const __half *kc = sm + stage * 2 * BK * lds, *vc = kc + BK * lds;
			if (kt + 1 < nkt) {
				__half *kn = sm + (stage ^ 1) * 2 * BK * lds;
				load_kv<BK>(a, table, kvh, (kt + 1) * BK, k_lo, n_keys, kn, kn + BK * lds, lds);
				cp_async_commit();
				cp_async_wait<1>();
			} else {
				cp_async_wait<0>();
			}
			__syncthreads();
			const int32_t k0 = kt * BK;
			/* a key tile past all of a warp's positions, or before all its windows,
			   would change nothing */
			if (wact && k0 <= wpmax && k0 + BK > wjmin) {
				float s[NS][4];
#pragma unroll
				for (int nt = 0; nt < NS; nt++)
					s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
				for (int ks = 0; ks < NKS; ks++) {
					if (ks >= nks)
						break;
					const uint32_t *qa = qf[QREG ? ks : 0];
					if constexpr (!QREG)
						ldsm_x4(qf[0], qa_row + ks * 16);
#pragma unroll
					for (int np = 0; np < NS / 2; np++) {
						uint32_t kb[4];
						ldsm_x4(kb, kc + (np * 16 + ((lane >> 4) << 3) + (lane & 7)) * lds + ks * 16 +
								    (((lane >> 3) & 1) << 3));
						mma16816(s[2 * np], qa, kb[0], kb[1]);
						mma16816(s[2 * np + 1], qa, kb[2], kb[3]);
					}
				}
				if (a.softcap > 0.0f) /* the cap in natural units: s / log2(e) */
#pragma unroll
					for (int nt = 0; nt < NS; nt++)
#pragma unroll
						for (int e = 0; e < 4; e++)
							s[nt][e] = qc_attn_cap(a, s[nt][e] * (1.0f / LOG2E)) * LOG2E;
				/* causal mask (keys past n_keys are past every row), window mask */
				if (k0 + BK - 1 > p0 || (a.window > 0 && k0 <= wpmax - a.window)) {
#pragma unroll
					for (int nt = 0; nt < NS; nt++)
#pragma unroll
						for (int e = 0; e < 4; e++) {
							const int32_t j = k0 + nt * 8 + 2 * tq + (e & 1), p = pr[e >> 1];
							if (j > p || (a.window > 0 && j <= p - a.window))
								s[nt][e] = -INFINITY;
						}
				}
				/* online softmax per row: new max, rescale O and l by 2^(m_old - m_new) */
#pragma unroll
				for (int h = 0; h < 2; h++) {
					float mx = m[h];
#pragma unroll
					for (int nt = 0; nt < NS; nt++)
						mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
					mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
					mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
					const float base = mx == -INFINITY ? 0.0f : mx;
					const float alpha = exp2f(m[h] - base);
					m[h] = mx;
					l[h] *= alpha;
#pragma unroll
					for (int nn = 0; nn < NO; nn++) {
						o[nn][2 * h] *= alpha;
						o[nn][2 * h + 1] *= alpha;
					}
#pragma unroll
					for (int nt = 0; nt < NS; nt++) {
						s[nt][2 * h] = exp2f(s[nt][2 * h] - base);
						s[nt][2 * h + 1] = exp2f(s[nt][2 * h + 1] - base);
					}
				}
				/* O += P V: the S accumulator of keys 16kk..16kk+15 is P's A fragment */
#pragma unroll
				for (int kk = 0; kk < NS / 2; kk++) {
					uint32_t pa[4];
					pa[0] = pack_p(s[2 * kk][0], s[2 * kk][1], &l[0]);
					pa[1] = pack_p(s[2 * kk][2], s[2 * kk][3], &l[1]);
					pa[2] = pack_p(s[2 * kk + 1][0], s[2 * kk + 1][1], &l[0]);
					pa[3] = pack_p(s[2 * kk + 1][2], s[2 * kk + 1][3], &l[1]);
#pragma unroll
					for (int dp = 0; dp < NO / 2; dp++) {
						if (2 * dp >= nno)
							break;
						uint32_t vb[4];
						ldsm_x4_t(vb, vc + (kk * 16 + (((lane >> 3) & 1) << 3) + (lane & 7)) * lds + dp * 16 +
								      ((lane >> 4) << 3));
						mma16816(o[2 * dp], pa, vb[0], vb[1]);
						mma16816(o[2 * dp + 1], pa, vb[2], vb[3]);
					}
				}
			}
			__syncthreads(); /* this stage is refilled by the next iteration's prefetch */
		}

#pragma unroll
		for (int h = 0; h < 2; h++) {
			float sum = l[h];
			sum += __shfl_xor_sync(0xffffffffu, sum, 1);
			sum += __shfl_xor_sync(0xffffffffu, sum, 2);
			const int r = r0 + 8 * h;
			if (!wact || r >= rows)
				continue;
			const float inv = 1.0f / sum;
			float *dst = a.d_out + (t0 + r / G) * q_dim + ((int64_t)kvh * G + r % G) * hd + 2 * tq;
#pragma unroll
			for (int nn = 0; nn < NO; nn++)
				if (nn < nno)
					*(float2 *)(dst + nn * 8) = make_float2(o[nn][2 * h] * inv, o[nn][2 * h + 1] * inv);
		}
	}
}

/* ---- host ----------------------------------------------------------------- */

extern "C" bool qc_cuda_flash_attn_shape_ok(int32_t hd, int32_t n_head, int32_t n_head_kv)
{
	return hd >= 16 && hd <= 256 && hd % 16 == 0 && n_head_kv >= 1 && n_head >= n_head_kv &&
	       n_head % n_head_kv == 0 && n_head / n_head_kv <= FM;
}

extern "C" uint64_t qc_cuda_flash_attn_ws_bytes(int64_t n_tok)
{
	if (n_tok < 0)
		return 0;
	/* count (16 bytes), tiles (8 each), run starts and lengths (4 + 4 each) */
	return (16 + 16 * (uint64_t)n_tok + 255) / 256 * 256;
}

template <int HDP>
static int launch(const struct qc_cuda_paged_attn_args &a, const struct flash_meta &m, unsigned gy, cudaStream_t s,
		  struct qc_err *err)
{
	const size_t smem = flash_smem<HDP>(a.hd);
	int dev, max_smem, rc;
	if ((rc = qc_cuda_check(cudaGetDevice(&dev), "cudaGetDevice", err)) ||
	    (rc = qc_cuda_check(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
				"cudaDeviceGetAttribute", err)))
		return rc;
	if (smem > (size_t)max_smem)
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "flash_attn: head_dim %d needs %zu bytes of shared memory (device: %d)", a.hd, smem,
				  max_smem);
	if (smem > 48 * 1024 &&
	    (rc = qc_cuda_check(cudaFuncSetAttribute(flash_attn_kernel<HDP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
						     (int)smem), "cudaFuncSetAttribute(flash_attn)", err)))
		return rc;
	flash_attn_kernel<HDP><<<dim3((unsigned)a.n_head_kv, gy), FT, smem, s>>>(a, m.tiles, m.count);
	return qc_cuda_check(cudaGetLastError(), "flash_attn_kernel", err);
}

extern "C" int qc_cuda_flash_attn(const struct qc_cuda_flash_attn_args *f, cudaStream_t s, struct qc_err *err)
{
	const struct qc_cuda_paged_attn_args *a = &f->attn;
	if (a->n_head < 1 || a->n_head_kv < 1 || a->n_head % a->n_head_kv || a->hd < 1 || a->n_tok < 0 ||
	    a->n_tok > INT32_MAX || a->max_ctx < 1 || a->block_tokens < 1 || f->min_run < 1 || !f->d_done ||
	    !f->d_ws || ((uintptr_t)f->d_ws & 15) || f->ws_bytes < qc_cuda_flash_attn_ws_bytes(a->n_tok))
		return qc_err_set(err, QC_EINVAL, NULL, NULL, -1,
				  "flash_attn: %lld tokens, %d heads / %d kv heads of %d, max_ctx %d, min_run %d, "
				  "scratch %llu bytes", (long long)a->n_tok, a->n_head, a->n_head_kv, a->hd, a->max_ctx,
				  f->min_run, (unsigned long long)f->ws_bytes);
	if (!qc_cuda_flash_attn_shape_ok(a->hd, a->n_head, a->n_head_kv))
		return qc_err_set(err, QC_EUNSUPPORTED, NULL, NULL, -1,
				  "flash_attn: head_dim %d with %d heads / %d kv heads (needs head_dim a multiple of "
				  "16 up to 256, at most %d heads per kv head)", a->hd, a->n_head, a->n_head_kv, FM);
	if (!a->n_tok)
		return QC_OK;
	const int64_t n = a->n_tok;
	const int32_t bq = FM / (a->n_head / a->n_head_kv);
	struct flash_meta m;
	m.count = (int32_t *)f->d_ws;
	m.tiles = (int2 *)((char *)f->d_ws + 16);
	m.rs = (int32_t *)(m.tiles + n);
	m.len = m.rs + n;
	runs_kernel<<<1, RT, 0, s>>>(*a, f->min_run, bq, f->d_done, m);
	int rc;
	if ((rc = qc_cuda_check(cudaGetLastError(), "flash runs_kernel", err)))
		return rc;
	/* tiles at most: one per bq tokens plus one partial per run (runs of min_run+) */
	int64_t gy = n / bq + n / f->min_run + 1;
	gy = gy < 65535 ? gy : 65535;
	if (a->hd <= 64)
		return launch<64>(*a, m, (unsigned)gy, s, err);
	if (a->hd <= 128)
		return launch<128>(*a, m, (unsigned)gy, s, err);
	return launch<256>(*a, m, (unsigned)gy, s, err);
}
