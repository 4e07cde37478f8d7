/* layout_marlin6.c — pack/unpack of marlin_i6 (see layout_marlin6.h, docs/layout-marlin.md
 * §marlin_i6 for the byte layout).
 *
 * Index grammar: nn column in the stripe (j = nn/8 its n8 tile, r = nn%8), k32 the k
 * inside a 32-k unit (t = k32/16 its tile), lane/w/p a code's lane, 32-bit word and
 * nibble in its tile. A unit's 2048 code slots are numbered t·1024 + lane·32 + w·8 + p;
 * the map from a slot to (nn, k32) is written once (slot_to_nk, marlin_i4's mma
 * B-fragment order) and inverted into a table, so pack and unpack share it;
 * runtime/ops/marlin_gemm.c goes from (n, k) to bytes with the documented formulas
 * on its own, which is what checks this file.
 */
#include "layout_marlin6.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp16.h"
#include "qblock.h"

#define S6 QC_MARLIN_STRIPE_I6         /* columns per stripe */
#define UNIT_BYTES 1536                /* one 32-k unit: two 512-byte nibble tiles, 512 of high bits */
#define HI_PLANE 1024                  /* high-bit plane inside a unit */
#define SC_RUN (2 * S6)                /* scale bytes per unit: 64 columns x 2 tiles, int8 */
#define D_RUN (2 * S6)                 /* d bytes per super-block: 64 columns x fp16 */
#define SLOTS (2 * 32 * 32)            /* codes per unit: 2 tiles x 32 lanes x 32 nibbles */
#define Q6_BYTES ((int64_t)sizeof(struct qc_block_Q6_K))

struct geom {
	int64_t K, N, G, B;      /* G 32-k units, B 256-element super-blocks per row */
	uint64_t cb, db;         /* scale and d regions inside a stripe */
	uint64_t stripe_bytes, slice_bytes;
	/* slot of (nn, k32) and each slot's bytes in its unit: low nibble at lo (shift
	 * lo_sh), high two bits at hi (shift hi_sh) */
	uint16_t slot[S6 * 32];
	uint16_t lo[SLOTS], hi[SLOTS];
	uint8_t lo_sh[SLOTS], hi_sh[SLOTS];
	uint8_t nn[SLOTS], k32[SLOTS];
};

/* Slot -> (nn, k32). Within a tile it is marlin_i4's: nibble p of word w is n8 tile
 * j = 2w + (p>>1 & 1), fragment register p & 1, second half of the pair p >> 2; lane
 * l holds column l/4 and rows 2(l%4) + {0,1} (register 0) / + {8,9} (register 1). */
static void slot_to_nk(int s, int *nn, int *k32)
{
	const int t = s / 1024, lane = s / 32 % 32, w = s / 8 % 4, p = s % 8;
	const int j = 2 * w + ((p >> 1) & 1), reg = p & 1, second = p >> 2;
	*nn = 8 * j + lane / 4;
	*k32 = 16 * t + 2 * (lane % 4) + 8 * reg + second;
}

uint64_t qc_marlin6_stripe_bytes(int64_t k)
{
	const uint64_t G = (uint64_t)k / 32, B = (uint64_t)k / QC_QK_K;
	return G * UNIT_BYTES + G * SC_RUN + B * D_RUN;
}

static void geom_init(struct geom *g, const int64_t ne[4])
{
	g->K = ne[0];
	g->N = ne[1];
	g->G = g->K / 32;
	g->B = g->K / QC_QK_K;
	g->cb = (uint64_t)g->G * UNIT_BYTES;
	g->db = g->cb + (uint64_t)g->G * SC_RUN;
	g->stripe_bytes = qc_marlin6_stripe_bytes(g->K);
	g->slice_bytes = g->stripe_bytes * (uint64_t)(g->N / S6);
	for (int s = 0; s < SLOTS; s++) {
		const int t = s / 1024, lane = s / 32 % 32, w = s / 8 % 4, p = s % 8;
		int nn, k32;
		slot_to_nk(s, &nn, &k32);
		g->nn[s] = (uint8_t)nn;
		g->k32[s] = (uint8_t)k32;
		g->slot[nn * 32 + k32] = (uint16_t)s;
		g->lo[s] = (uint16_t)(512 * t + 16 * lane + 4 * w + p / 2);
		g->lo_sh[s] = (uint8_t)(4 * (p % 2));
		/* the high bits sit where the kernel's shift-and-mask puts them next to the
		 * nibble: word 2t + w/2 of the lane's 16 bytes, same byte, bit pair
		 * 2(w%2) + (p%2) */
		g->hi[s] = (uint16_t)(HI_PLANE + 16 * lane + 4 * (2 * t + w / 2) + p / 2);
		g->hi_sh[s] = (uint8_t)(2 * (2 * (w % 2) + p % 2));
	}
}

/* int8 scale of (nn, tile kt) and fp16 d of (nn, super-block b) in a stripe: lane
 * group r reads a unit's 16 scale bytes, and a super-block's 8 d, with one load */
static uint64_t sc_off(const struct geom *g, int nn, int64_t kt)
{
	return g->cb + (uint64_t)(kt / 2) * SC_RUN + 16 * (uint64_t)(nn % 8) + 8 * (uint64_t)(kt % 2) + (uint64_t)(nn / 8);
}

static uint64_t d_off(const struct geom *g, int nn, int64_t b)
{
	return g->db + (uint64_t)b * D_RUN + 16 * (uint64_t)(nn % 8) + 2 * (uint64_t)(nn / 8);
}

/* q6_K element e's code: the low nibble of ql[64h + 32(c%2) + l] (high nibble when
 * c >= 2) and bits 2c, 2c+1 of qh[32h + l], for h = e/128, c = e%128/32, l = e%32
 * (quant/dequant_k.c, ggml's dequantize_row_q6_K) */
static void q6k_codes_get(const struct qc_block_Q6_K *b, uint8_t q[QC_QK_K])
{
	for (int e = 0; e < QC_QK_K; e++) {
		const int h = e / 128, c = e % 128 / 32, l = e % 32;
		const int lo = (b->ql[64 * h + 32 * (c % 2) + l] >> (4 * (c / 2))) & 15;
		const int hi = (b->qh[32 * h + l] >> (2 * c)) & 3;
		q[e] = (uint8_t)(lo | hi << 4);
	}
}

static void q6k_codes_put(const uint8_t q[QC_QK_K], struct qc_block_Q6_K *b)
{
	memset(b->ql, 0, sizeof b->ql);
	memset(b->qh, 0, sizeof b->qh);
	for (int e = 0; e < QC_QK_K; e++) {
		const int h = e / 128, c = e % 128 / 32, l = e % 32;
		b->ql[64 * h + 32 * (c % 2) + l] |= (uint8_t)((q[e] & 15) << (4 * (c / 2)));
		b->qh[32 * h + l] |= (uint8_t)((q[e] >> 4) << (2 * c));
	}
}

int qc_marlin6_pack_slice(const int64_t ne[4], const uint8_t *rows, uint8_t *out, struct qc_err *err)
{
	struct geom gs, *g = &gs; /* ~20 KiB */
	/* one stripe's codes decoded [64][K] first, so each unit is then written in slot
	 * order from the table (as layout_marlin.c does for its tiles) */
	uint8_t *codes = malloc((size_t)(S6 * ne[0]));
	if (!codes)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory packing a %lld-long stripe",
				  (long long)ne[0]);
	geom_init(g, ne);
	memset(out, 0, (size_t)g->slice_bytes); /* codes are or-ed in two bits and a nibble at a time */
	for (int64_t nt = 0; nt < g->N / S6; nt++) {
		uint8_t *st = out + (uint64_t)nt * g->stripe_bytes;
		for (int nn = 0; nn < S6; nn++) {
			const uint8_t *row = rows + (uint64_t)(nt * S6 + nn) * (uint64_t)(g->B * Q6_BYTES);
			for (int64_t b = 0; b < g->B; b++) {
				struct qc_block_Q6_K blk;
				memcpy(&blk, row + b * Q6_BYTES, sizeof blk);
				q6k_codes_get(&blk, codes + nn * g->K + b * QC_QK_K);
				for (int i = 0; i < QC_QK_K / 16; i++)
					st[sc_off(g, nn, b * (QC_QK_K / 16) + i)] = (uint8_t)blk.scales[i];
				memcpy(st + d_off(g, nn, b), &blk.d, 2);
			}
		}
		for (int64_t u = 0; u < g->G; u++) {
			uint8_t *unit = st + (uint64_t)u * UNIT_BYTES;
			const uint8_t *col = codes + u * 32;
			for (int s = 0; s < SLOTS; s++) {
				const uint8_t v = col[g->nn[s] * g->K + g->k32[s]];
				unit[g->lo[s]] |= (uint8_t)((v & 15) << g->lo_sh[s]);
				unit[g->hi[s]] |= (uint8_t)((v >> 4) << g->hi_sh[s]);
			}
		}
	}
	free(codes);
	return QC_OK;
}

/* q6_K block b of column nn of the stripe at st, back from the packed bytes; q
 * receives its 256 codes */
static void block_get(const struct geom *g, const uint8_t *st, int nn, int64_t b, uint8_t q[QC_QK_K],
		      struct qc_block_Q6_K *blk)
{
	for (int e = 0; e < QC_QK_K; e++) {
		const int64_t k = b * QC_QK_K + e;
		const uint8_t *unit = st + (uint64_t)(k / 32) * UNIT_BYTES;
		const int s = g->slot[nn * 32 + k % 32];
		q[e] = (uint8_t)(((unit[g->lo[s]] >> g->lo_sh[s]) & 15) | ((unit[g->hi[s]] >> g->hi_sh[s]) & 3) << 4);
	}
	q6k_codes_put(q, blk);
	for (int i = 0; i < QC_QK_K / 16; i++)
		blk->scales[i] = (int8_t)st[sc_off(g, nn, b * (QC_QK_K / 16) + i)];
	memcpy(&blk->d, st + d_off(g, nn, b), 2);
}

static const uint8_t *stripe_of_row(const struct geom *g, const uint8_t *packed, uint64_t r, int *nn)
{
	const uint64_t slice = r / (uint64_t)g->N, n = r % (uint64_t)g->N;
	*nn = (int)(n % S6);
	return packed + slice * g->slice_bytes + (n / S6) * g->stripe_bytes;
}

void qc_marlin6_unpack_rows(const int64_t ne[4], const uint8_t *packed, uint64_t row0, uint64_t n_rows,
			    uint8_t *out)
{
	struct geom gs, *g = &gs; /* ~20 KiB */
	geom_init(g, ne);
	for (uint64_t r = row0; r < row0 + n_rows; r++) {
		int nn;
		const uint8_t *st = stripe_of_row(g, packed, r, &nn);
		uint8_t *o = out + (r - row0) * (uint64_t)(g->B * Q6_BYTES);
		for (int64_t b = 0; b < g->B; b++) {
			struct qc_block_Q6_K blk;
			uint8_t q[QC_QK_K];
			block_get(g, st, nn, b, q, &blk);
			memcpy(o + b * Q6_BYTES, &blk, sizeof blk);
		}
	}
}

void qc_marlin6_error(const int64_t ne[4], const uint8_t *packed, struct qc_marlin_err *e)
{
	struct geom gs, *g = &gs; /* ~20 KiB */
	geom_init(g, ne);
	const struct qc_type_traits *tt = qc_type_get(QC_TYPE_Q6_K);
	double se = 0, sw = 0;
	memset(e, 0, sizeof *e);
	const uint64_t rows = (uint64_t)(ne[1] * ne[2] * ne[3]);
	for (uint64_t r = 0; r < rows; r++) {
		int nn;
		const uint8_t *st = stripe_of_row(g, packed, r, &nn);
		for (int64_t b = 0; b < g->B; b++) {
			struct qc_block_Q6_K blk;
			uint8_t q[QC_QK_K];
			float exact[QC_QK_K];
			block_get(g, st, nn, b, q, &blk);
			tt->dequant_row(&blk, exact, QC_QK_K);
			const float d = qc_fp16_to_f32(blk.d);
			for (int i = 0; i < QC_QK_K; i++) {
				/* the kernel: (d·sc) exact in float, one rounding of its product with q − 32 */
				const float kv = (d * (float)blk.scales[i / 16]) * (float)(q[i] - 32);
				const double diff = fabs((double)kv - (double)exact[i]);
				if (e->max_abs == e->max_abs && !(diff <= e->max_abs)) /* a NaN sticks */
					e->max_abs = diff;
				se += diff * diff;
				sw += (double)exact[i] * exact[i];
			}
			e->n += QC_QK_K;
		}
	}
	e->rms = e->n ? sqrt(se / (double)e->n) : 0;
	e->rms_w = e->n ? sqrt(sw / (double)e->n) : 0;
}
