/* layout_marlin.c — pack/unpack of the marlin tensor-core layouts (see layout_marlin.h,
 * docs/layout-marlin.md for the byte layout).
 *
 * Per-encoding knowledge is one row of `codecs` (ggml block <-> raw codes, fp16
 * scale (+ offset) per 32, verbatim header); everything else is geometry. The map from a lane's code slot to its
 * (n, k) is written once (slot_to_nk) and inverted into a table, so pack and unpack
 * share it; runtime/ops/marlin_gemm.c computes the other direction from the
 * documented formulas on its own, which is what checks this file. marlin_i6 (q6_K)
 * has a geometry of its own (6-bit codes split into a nibble tile and a plane of
 * high bits): its codec row says which encoding it holds, and the public functions
 * below hand its pack, unpack and error to layout_marlin6.c.
 */
#include "layout_marlin.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cursor.h"
#include "layout_marlin6.h"
#include "qblock.h"
#include "fp16.h"

struct codec {
	enum qc_type type;
	enum qc_layout layout;
	int groups;      /* 32-element groups per ggml block: 1 or 8 */
	int hdr_bytes;   /* bytes per ggml block kept verbatim so the unpack is exact (0: none needed) */
	/* block -> codes as stored (i4/i4z: 0..15, i8/i8z: int8 bits), per group the
	 * fp16 scale bits and (i4z/i8z) the fp16 offset bits, and the verbatim header */
	void (*get)(const uint8_t *blk, uint8_t *codes, uint16_t *scale, uint16_t *offs, uint8_t *hdr);
	/* the inverse; scale/offs are what get produced, hdr what it kept */
	void (*put)(const uint8_t *codes, const uint16_t *scale, const uint16_t *offs, const uint8_t *hdr,
		    uint8_t *blk);
};

/* q4_0, q4_1, hq4: qs[j] holds element j (low nibble) and j+16 (high nibble) */
static void nibbles_get(const uint8_t qs[16], uint8_t codes[32])
{
	for (int j = 0; j < 16; j++) {
		codes[j] = qs[j] & 15;
		codes[j + 16] = qs[j] >> 4;
	}
}

static void nibbles_put(const uint8_t codes[32], uint8_t qs[16])
{
	for (int j = 0; j < 16; j++)
		qs[j] = (uint8_t)(codes[j] | codes[j + 16] << 4);
}

static void q4_0_get(const uint8_t *blk, uint8_t *codes, uint16_t *scale, uint16_t *offs, uint8_t *hdr)
{
	struct qc_block_Q4_0 b;
	(void)offs;
	(void)hdr;
	memcpy(&b, blk, sizeof b);
	*scale = b.d;
	nibbles_get(b.qs, codes);
}

static void q4_0_put(const uint8_t *codes, const uint16_t *scale, const uint16_t *offs, const uint8_t *hdr,
		     uint8_t *blk)
{
	struct qc_block_Q4_0 b;
	(void)offs;
	(void)hdr;
	b.d = *scale;
	nibbles_put(codes, b.qs);
	memcpy(blk, &b, sizeof b);
}

static void q8_0_get(const uint8_t *blk, uint8_t *codes, uint16_t *scale, uint16_t *offs, uint8_t *hdr)
{
	struct qc_block_Q8_0 b;
	(void)offs;
	(void)hdr;
	memcpy(&b, blk, sizeof b);
	*scale = b.d;
	memcpy(codes, b.qs, QC_MARLIN_GROUP);
}

static void q8_0_put(const uint8_t *codes, const uint16_t *scale, const uint16_t *offs, const uint8_t *hdr,
		     uint8_t *blk)
{
	struct qc_block_Q8_0 b;
	(void)offs;
	(void)hdr;
	b.d = *scale;
	memcpy(b.qs, codes, QC_MARLIN_GROUP);
	memcpy(blk, &b, sizeof b);
}

/* q4_1: x = d*q + m is already scale and offset: both kept bit for bit */
static void q4_1_get(const uint8_t *blk, uint8_t *codes, uint16_t *scale, uint16_t *offs, uint8_t *hdr)
{
	struct qc_block_Q4_1 b;
	(void)hdr;
	memcpy(&b, blk, sizeof b);
	*scale = b.d;
	*offs = b.m;
	nibbles_get(b.qs, codes);
}

static void q4_1_put(const uint8_t *codes, const uint16_t *scale, const uint16_t *offs, const uint8_t *hdr,
		     uint8_t *blk)
{
	struct qc_block_Q4_1 b;
	(void)hdr;
	b.d = *scale;
	b.m = *offs;
	nibbles_put(codes, b.qs);
	memcpy(blk, &b, sizeof b);
}

/* double -> binary16 bits, rounded once: the float in between is rounded to odd
 * (an inexact result takes the neighbour with an odd last bit), which keeps the
 * sticky information float's 13 extra bits would otherwise lose, so the
 * float -> fp16 rounding that follows is the correct rounding of v. */
static uint16_t fp16_of_double(double v)
{
	float f = (float)v;
	if (isfinite(v) && (double)f != v && !(qc_f32_to_bits(f) & 1))
		f = nextafterf(f, v > (double)f ? INFINITY : -INFINITY);
	return qc_f32_to_fp16(f);
}

/* q4_K: sub-block s of 32 is x = d*sc_s*q - dmin*m_s (6-bit sc, m). Scale and
 * offset are rounded to fp16 once each; d, dmin and the 12 scale bytes are kept
 * so the block comes back exactly. Same bit layout as quant/dequant_k.c
 * (q5_K shares the 12-byte scale field). */
static void q4_k_scale_min(const uint8_t sc[12], int s, int *scale, int *min)
{
	if (s < 4) {
		*scale = sc[s] & 63;
		*min = sc[s + 4] & 63;
	} else {
		*scale = (sc[s + 4] & 0xf) | (sc[s - 4] >> 6) << 4;
		*min = (sc[s + 4] >> 4) | (sc[s] >> 6) << 4;
	}
}

static void q4_k_get(const uint8_t *blk, uint8_t *codes, uint16_t *scale, uint16_t *offs, uint8_t *hdr)
{
	struct qc_block_Q4_K b;
	memcpy(&b, blk, sizeof b);
	memcpy(hdr, blk, 16); /* d, dmin, scales[12] */
	const float d = qc_fp16_to_f32(b.d), dmin = qc_fp16_to_f32(b.dmin);
	for (int s = 0; s < 8; s++) {
		int sc, mn;
		q4_k_scale_min(b.scales, s, &sc, &mn);
		scale[s] = qc_f32_to_fp16(d * (float)sc);    /* exact product, one rounding */
		offs[s] = qc_f32_to_fp16(-(dmin * (float)mn));
		for (int l = 0; l < 32; l++)
			codes[32 * s + l] = (b.qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 15;
	}
}

static void q4_k_put(const uint8_t *codes, const uint16_t *scale, const uint16_t *offs, const uint8_t *hdr,
		     uint8_t *blk)
{
	struct qc_block_Q4_K b;
	(void)scale;
	(void)offs;
	memcpy(&b, hdr, 16);
	for (int c = 0; c < 4; c++)
		for (int l = 0; l < 32; l++)
			b.qs[32 * c + l] = (uint8_t)(codes[64 * c + l] | codes[64 * c + 32 + l] << 4);
	memcpy(blk, &b, sizeof b);
}

/* q5_K: as q4_K with a 5th code bit (qh bit s of byte l for element 32s+l), so
 * x = d*sc_s*q - dmin*m_s with q in 0..31. Stored as the int8 code c = q - 16
 * (-16..15: the i8 kernels' signed decode as it is) with scale s = fp16(d*sc_s)
 * and offset o = fp16(16*d*sc_s - dmin*m_s): x = c*s + o. The products are exact
 * in float and their difference in double (for any two terms within 2^36 of
 * each other), so each of s and o is rounded to fp16 once; centring the codes
 * halves what the rounding of s costs (|c| <= 16 instead of q <= 31) and puts o
 * near the middle of the group's range, usually small. d, dmin and the 12 scale
 * bytes are kept so the block comes back exactly (q is c + 16 mod 32). */
static void q5_k_get(const uint8_t *blk, uint8_t *codes, uint16_t *scale, uint16_t *offs, uint8_t *hdr)
{
	struct qc_block_Q5_K b;
	memcpy(&b, blk, sizeof b);
	memcpy(hdr, blk, 16); /* d, dmin, scales[12] */
	const float d = qc_fp16_to_f32(b.d), dmin = qc_fp16_to_f32(b.dmin);
	for (int s = 0; s < 8; s++) {
		int sc, mn;
		q4_k_scale_min(b.scales, s, &sc, &mn);
		const float ds = d * (float)sc, dm = dmin * (float)mn; /* exact: 11-bit times 6-bit */
		scale[s] = qc_f32_to_fp16(ds);
		offs[s] = fp16_of_double(16.0 * (double)ds - (double)dm);
		for (int l = 0; l < 32; l++) {
			int q = ((b.qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 15) | ((b.qh[l] >> s) & 1) << 4;
			codes[32 * s + l] = (uint8_t)(q - 16); /* int8 bits (two's complement) of q - 16 */
		}
	}
}

static void q5_k_put(const uint8_t *codes, const uint16_t *scale, const uint16_t *offs, const uint8_t *hdr,
		     uint8_t *blk)
{
	struct qc_block_Q5_K b;
	(void)scale;
	(void)offs;
	memcpy(&b, hdr, 16);
	memset(b.qh, 0, sizeof b.qh);
	memset(b.qs, 0, sizeof b.qs);
	for (int s = 0; s < 8; s++)
		for (int l = 0; l < 32; l++) {
			int q = (codes[32 * s + l] + 16) & 31;
			b.qs[32 * (s / 2) + l] |= (uint8_t)((q & 15) << (4 * (s % 2)));
			b.qh[l] |= (uint8_t)((q >> 4) << s);
		}
	memcpy(blk, &b, sizeof b);
}

/* hq4 (GPTQ/AWQ/compressed-tensors int4): x = d*(q - z), f32 d, int16 z:
 * scale fp16(d), offset fp16(-d*z); d and z kept for the exact unpack. */
static void hq4_get(const uint8_t *blk, uint8_t *codes, uint16_t *scale, uint16_t *offs, uint8_t *hdr)
{
	struct qc_block_HQ4 b;
	memcpy(&b, blk, sizeof b);
	memcpy(hdr, blk, 6); /* f32 d, int16 z */
	float d;
	memcpy(&d, b.d, 4);
	*scale = qc_f32_to_fp16(d);
	*offs = qc_f32_to_fp16(-(d * (float)b.z)); /* float: overflow is inf, not UB */
	nibbles_get(b.qs, codes);
}

static void hq4_put(const uint8_t *codes, const uint16_t *scale, const uint16_t *offs, const uint8_t *hdr,
		    uint8_t *blk)
{
	struct qc_block_HQ4 b;
	(void)scale;
	(void)offs;
	memcpy(&b, hdr, 6);
	nibbles_put(codes, b.qs);
	memcpy(blk, &b, sizeof b);
}

/* hq8 (GPTQ 8-bit, compressed-tensors int8): x = d*(q - z), q 0..255: int8 code
 * c = q - 128 (the marlin_i8 kernels read signed codes), scale fp16(d), offset
 * fp16(d*(128 - z)) (the product exact in double, rounded once); d and z kept
 * for the exact unpack. */
static void hq8_get(const uint8_t *blk, uint8_t *codes, uint16_t *scale, uint16_t *offs, uint8_t *hdr)
{
	struct qc_block_HQ8 b;
	memcpy(&b, blk, sizeof b);
	memcpy(hdr, blk, 6); /* f32 d, int16 z */
	float d;
	memcpy(&d, b.d, 4);
	*scale = qc_f32_to_fp16(d);
	*offs = fp16_of_double((double)d * (128.0 - (double)b.z));
	for (int l = 0; l < 32; l++)
		codes[l] = (uint8_t)(b.qs[l] ^ 0x80); /* int8 bits of q - 128 */
}

static void hq8_put(const uint8_t *codes, const uint16_t *scale, const uint16_t *offs, const uint8_t *hdr,
		    uint8_t *blk)
{
	struct qc_block_HQ8 b;
	(void)scale;
	(void)offs;
	memcpy(&b, hdr, 6);
	for (int l = 0; l < 32; l++)
		b.qs[l] = (uint8_t)(codes[l] ^ 0x80);
	memcpy(blk, &b, sizeof b);
}

/* The encodings that are "codes times an fp16 scale (plus an offset) per 32 along K".
 * q5_K and hq8 rows are i8z: a 5- or 8-bit code with an offset takes a byte there.
 * q6_K's row only names its layout and block length: layout_marlin6.c packs it. */
static const struct codec codecs[] = {
	{ QC_TYPE_Q4_0, QC_LAYOUT_MARLIN_I4, 1, 0, q4_0_get, q4_0_put },
	{ QC_TYPE_Q8_0, QC_LAYOUT_MARLIN_I8, 1, 0, q8_0_get, q8_0_put },
	{ QC_TYPE_Q4_1, QC_LAYOUT_MARLIN_I4Z, 1, 0, q4_1_get, q4_1_put },
	{ QC_TYPE_Q4_K, QC_LAYOUT_MARLIN_I4Z, 8, 16, q4_k_get, q4_k_put },
	{ QC_TYPE_HQ4, QC_LAYOUT_MARLIN_I4Z, 1, 6, hq4_get, hq4_put },
	{ QC_TYPE_Q5_K, QC_LAYOUT_MARLIN_I8Z, 8, 16, q5_k_get, q5_k_put },
	{ QC_TYPE_HQ8, QC_LAYOUT_MARLIN_I8Z, 1, 6, hq8_get, hq8_put },
	{ QC_TYPE_Q6_K, QC_LAYOUT_MARLIN_I6, 8, 0, NULL, NULL },
};

static const struct codec *codec_of(enum qc_type type)
{
	for (size_t i = 0; i < sizeof codecs / sizeof codecs[0]; i++)
		if (codecs[i].type == type)
			return &codecs[i];
	return NULL;
}

struct geom {
	int bits;        /* per code: 4 or 8 */
	int stripe;      /* n columns per tile */
	int per_lane;    /* codes per lane per tile: 16 bytes * 8 / bits */
	int has_offs;    /* i4z/i8z: an fp16 offset region after the scales */
	int64_t K, N, KT, G, B;  /* B: ggml blocks per row */
	int hdr_bytes;           /* per ggml block, verbatim */
	uint64_t codes_bytes;    /* codes of one stripe: KT tiles */
	uint64_t hdr_off;        /* start of the header region in a stripe */
	uint64_t stripe_bytes;   /* everything of one stripe */
	uint64_t slice_bytes;
	/* code slot in a tile (lane * per_lane + c) for column nn, tile row kk */
	uint16_t slot[QC_MARLIN_STRIPE_I4 * QC_MARLIN_TILE_K];
};

/* Lane l, code c of its 16 bytes -> (nn, kk) inside the stripe x 16 tile.
 * mma.m16n8k16 B fragment: lane l holds column l/4 of an n8 tile, rows
 * 2(l%4)+{0,1} (register 0) and 2(l%4)+8+{0,1} (register 1), as half pairs.
 * i4: 32-bit word w holds n8 tiles 2w and 2w+1; nibbles (p, p+4) form one half
 *     pair (so one mask-and-or makes two halves), p = 0,1: tile 2w regs 0,1;
 *     p = 2,3: tile 2w+1 regs 0,1.
 * i8: word w is n8 tile w; bytes (0,1) register 0, bytes (2,3) register 1. */
static void slot_to_nk(int bits, int lane, int c, int *nn, int *kk)
{
	int j, reg, second;
	if (bits == 4) {
		int w = c / 8, p = c % 8, i = p & 3;
		second = p >> 2;
		j = 2 * w + (i >> 1);
		reg = i & 1;
	} else {
		int p = c % 4;
		j = c / 4;
		reg = p >> 1;
		second = p & 1;
	}
	*nn = 8 * j + lane / 4;
	*kk = 2 * (lane % 4) + 8 * reg + second;
}

/* sizes only; geom_init adds the slot table */
static void geom_sizes(struct geom *g, enum qc_layout l, const struct codec *c, const int64_t ne[4])
{
	g->bits = qc_marlin_bits(l);
	g->stripe = qc_marlin_stripe(l);
	g->per_lane = QC_MARLIN_LANE_BYTES * 8 / g->bits;
	g->has_offs = qc_marlin_has_offsets(l);
	g->K = ne[0];
	g->N = ne[1];
	g->KT = g->K / QC_MARLIN_TILE_K;
	g->G = g->K / QC_MARLIN_GROUP;
	g->B = g->G / c->groups;
	g->hdr_bytes = c->hdr_bytes;
	g->codes_bytes = (uint64_t)g->KT * 32 * QC_MARLIN_LANE_BYTES;
	g->hdr_off = g->codes_bytes + (uint64_t)g->G * (uint64_t)g->stripe * 2 * (g->has_offs ? 2 : 1);
	g->stripe_bytes = g->hdr_off + (uint64_t)g->stripe * (uint64_t)g->B * (uint64_t)g->hdr_bytes;
	g->slice_bytes = g->stripe_bytes * (uint64_t)(g->N / g->stripe);
}

static void geom_init(struct geom *g, enum qc_layout l, const struct codec *c, const int64_t ne[4])
{
	geom_sizes(g, l, c, ne);
	for (int lane = 0; lane < 32; lane++)
		for (int k = 0; k < g->per_lane; k++) {
			int nn, kk;
			slot_to_nk(g->bits, lane, k, &nn, &kk);
			g->slot[nn * QC_MARLIN_TILE_K + kk] = (uint16_t)(lane * g->per_lane + k);
		}
}

/* Byte offset of the scale of (column n, group gi) inside a slice: after its
 * stripe's codes, per group a run of `stripe` fp16, lane-group r = nn%8 reading
 * its stripe/8 scales at once. The i4z/i8z offsets follow in the same order. */
static uint64_t scale_off(const struct geom *g, int64_t n, int64_t gi)
{
	int64_t nt = n / g->stripe, nn = n % g->stripe;
	return (uint64_t)nt * g->stripe_bytes + g->codes_bytes +
	       2 * (uint64_t)(gi * g->stripe + (g->stripe / 8) * (nn % 8) + nn / 8);
}

static uint64_t offs_off(const struct geom *g, int64_t n, int64_t gi)
{
	return scale_off(g, n, gi) + (uint64_t)g->G * (uint64_t)g->stripe * 2;
}

/* header of ggml block b of column n: row-major within the stripe */
static uint64_t hdr_off(const struct geom *g, int64_t n, int64_t b)
{
	int64_t nt = n / g->stripe, nn = n % g->stripe;
	return (uint64_t)nt * g->stripe_bytes + g->hdr_off + (uint64_t)(nn * g->B + b) * (uint64_t)g->hdr_bytes;
}

/* Bit offset of code (n, k) inside a slice. */
static uint64_t code_bit(const struct geom *g, int64_t n, int64_t k)
{
	int64_t nt = n / g->stripe, nn = n % g->stripe, kt = k / QC_MARLIN_TILE_K;
	uint64_t tile = (uint64_t)nt * g->stripe_bytes + (uint64_t)kt * 32 * QC_MARLIN_LANE_BYTES;
	return tile * 8 + (uint64_t)g->slot[nn * QC_MARLIN_TILE_K + k % QC_MARLIN_TILE_K] * (uint64_t)g->bits;
}

bool qc_marlin_is(enum qc_layout l)
{
	return l == QC_LAYOUT_MARLIN_I4 || l == QC_LAYOUT_MARLIN_I8 || l == QC_LAYOUT_MARLIN_I4Z ||
	       l == QC_LAYOUT_MARLIN_I8Z || l == QC_LAYOUT_MARLIN_I6;
}

int qc_marlin_bits(enum qc_layout l)
{
	QC_ASSERT(qc_marlin_is(l));
	if (l == QC_LAYOUT_MARLIN_I6)
		return 6;
	return l == QC_LAYOUT_MARLIN_I8 || l == QC_LAYOUT_MARLIN_I8Z ? 8 : 4;
}

bool qc_marlin_has_offsets(enum qc_layout l)
{
	return l == QC_LAYOUT_MARLIN_I4Z || l == QC_LAYOUT_MARLIN_I8Z;
}

enum qc_layout qc_marlin_layout_for(enum qc_type type)
{
	const struct codec *c = codec_of(type);
	return c ? c->layout : QC_LAYOUT_GGML;
}

int qc_marlin_stripe(enum qc_layout l)
{
	QC_ASSERT(qc_marlin_is(l));
	if (l == QC_LAYOUT_MARLIN_I6)
		return QC_MARLIN_STRIPE_I6;
	return qc_marlin_bits(l) == 8 ? QC_MARLIN_STRIPE_I8 : QC_MARLIN_STRIPE_I4;
}

bool qc_marlin_fits(enum qc_layout l, enum qc_type type, const int64_t ne[4], uint32_t n_dims, const char **why)
{
	const char *w = NULL;
	const struct codec *c = codec_of(type);
	if (!qc_marlin_is(l) || !c || c->layout != l)
		w = "encoding has no marlin form";
	else if (n_dims < 2)
		w = "1-D tensor is not a matrix";
	else if (ne[0] <= 0 || ne[0] % (QC_MARLIN_GROUP * c->groups))
		w = "ne[0] (K) is not a positive multiple of the block length";
	else if (ne[1] <= 0 || ne[1] % qc_marlin_stripe(l))
		w = qc_marlin_bits(l) == 8 ? "ne[1] (N) is not a multiple of the 32-column tile"
					   : "ne[1] (N) is not a multiple of the 64-column tile";
	else if (ne[2] <= 0 || ne[3] <= 0)
		w = "empty tensor";
	if (why)
		*why = w;
	return w == NULL;
}

int qc_marlin_row_bytes(enum qc_layout l, enum qc_type type, int64_t ne0, uint64_t *bytes)
{
	const int64_t ne[4] = { ne0, qc_marlin_is(l) ? qc_marlin_stripe(l) : 1, 1, 1 };
	if (!qc_marlin_fits(l, type, ne, 2, NULL) || ne0 > ((int64_t)1 << 40))
		return QC_EFORMAT;
	if (l == QC_LAYOUT_MARLIN_I6) {
		*bytes = qc_marlin6_stripe_bytes(ne0) / QC_MARLIN_STRIPE_I6;
		return QC_OK;
	}
	struct geom g;
	geom_sizes(&g, l, codec_of(type), ne);
	*bytes = g.stripe_bytes / (uint64_t)g.stripe;
	return QC_OK;
}

int qc_marlin_bytes(enum qc_layout l, enum qc_type type, const int64_t ne[4], uint64_t *bytes)
{
	uint64_t row, rows = 1;
	if (!qc_marlin_fits(l, type, ne, 2, NULL) || qc_marlin_row_bytes(l, type, ne[0], &row))
		return QC_EFORMAT;
	for (int d = 1; d < 4; d++)
		if (!qc_mul_ok(rows, (uint64_t)ne[d], &rows))
			return QC_ERANGE;
	return qc_mul_ok(row, rows, bytes) ? QC_OK : QC_ERANGE;
}

/* codes, scales, offsets and headers of one ggml block (n, b), at most 256 elements */
struct blockbuf {
	uint8_t codes[QC_QK_K];
	uint16_t scale[QC_QK_K / QC_MARLIN_GROUP], offs[QC_QK_K / QC_MARLIN_GROUP];
	uint8_t hdr[16];
};

int qc_marlin_pack_slice(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *rows,
			 uint8_t *out, struct qc_err *err)
{
	const struct codec *c = codec_of(type);
	struct geom g;
	QC_ASSERT(qc_marlin_fits(l, type, ne, 2, NULL));
	if (l == QC_LAYOUT_MARLIN_I6)
		return qc_marlin6_pack_slice(ne, rows, out, err);
	geom_init(&g, l, c, ne);
	const int64_t bb = qc_type_get(type)->block_bytes, be = qc_type_get(type)->block_elems;
	/* one stripe's codes decoded [stripe][K] first, so each 512-byte tile is then
	 * written in order from a table of its slots (a few times faster than
	 * placing element by element) */
	uint8_t *codes = malloc((size_t)(g.stripe * g.K));
	if (!codes)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory packing a %lld-long stripe",
				  (long long)g.K);
	uint8_t slot_nn[32 * 32], slot_kk[32 * 32];
	for (int lane = 0; lane < 32; lane++)
		for (int k = 0; k < g.per_lane; k++) {
			int nn, kk;
			slot_to_nk(g.bits, lane, k, &nn, &kk);
			slot_nn[lane * g.per_lane + k] = (uint8_t)nn;
			slot_kk[lane * g.per_lane + k] = (uint8_t)kk;
		}
	memset(out, 0, g.slice_bytes); /* i4 codes are or-ed in a nibble at a time */
	for (int64_t nt = 0; nt < g.N / g.stripe; nt++) {
		for (int64_t nn = 0; nn < g.stripe; nn++) {
			const int64_t n = nt * g.stripe + nn;
			for (int64_t b = 0; b < g.B; b++) {
				struct blockbuf k;
				c->get(rows + (uint64_t)(n * g.B + b) * (uint64_t)bb, k.codes, k.scale, k.offs, k.hdr);
				memcpy(codes + nn * g.K + b * be, k.codes, (size_t)be);
				if (g.hdr_bytes)
					memcpy(out + hdr_off(&g, n, b), k.hdr, (size_t)g.hdr_bytes);
				for (int j = 0; j < c->groups; j++) {
					memcpy(out + scale_off(&g, n, b * c->groups + j), &k.scale[j], 2);
					if (g.has_offs)
						memcpy(out + offs_off(&g, n, b * c->groups + j), &k.offs[j], 2);
				}
			}
		}
		for (int64_t kt = 0; kt < g.KT; kt++) {
			uint8_t *tile = out + (uint64_t)nt * g.stripe_bytes + (uint64_t)kt * 32 * QC_MARLIN_LANE_BYTES;
			const uint8_t *col = codes + kt * QC_MARLIN_TILE_K;
			for (int i = 0; i < 32 * g.per_lane; i++) {
				uint8_t v = col[slot_nn[i] * g.K + slot_kk[i]];
				if (g.bits == 8)
					tile[i] = v;
				else
					tile[i / 2] |= (uint8_t)(v << (4 * (i % 2)));
			}
		}
	}
	free(codes);
	return QC_OK;
}

/* ggml block (n, b) of a slice back from the packed bytes */
static void unpack_block(const struct codec *c, const struct geom *g, const uint8_t *s, int64_t n, int64_t b,
			 struct blockbuf *k)
{
	if (g->hdr_bytes)
		memcpy(k->hdr, s + hdr_off(g, n, b), (size_t)g->hdr_bytes);
	for (int j = 0; j < c->groups; j++) {
		int64_t gi = b * c->groups + j;
		memcpy(&k->scale[j], s + scale_off(g, n, gi), 2);
		k->offs[j] = 0;
		if (g->has_offs)
			memcpy(&k->offs[j], s + offs_off(g, n, gi), 2);
		for (int e = 0; e < QC_MARLIN_GROUP; e++) {
			uint64_t bit = code_bit(g, n, gi * QC_MARLIN_GROUP + e);
			k->codes[j * QC_MARLIN_GROUP + e] =
				g->bits == 8 ? s[bit / 8] : (uint8_t)((s[bit / 8] >> (bit % 8)) & 15);
		}
	}
}

int qc_marlin_unpack_rows(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *packed,
			  uint64_t row0, uint64_t n_rows, uint8_t *out, struct qc_err *err)
{
	const char *why;
	if (!qc_marlin_fits(l, type, ne, 2, &why))
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "%s in layout %s: %s", qc_type_get(type)->name,
				  qc_layout_name(l), why);
	if (l == QC_LAYOUT_MARLIN_I6) {
		qc_marlin6_unpack_rows(ne, packed, row0, n_rows, out);
		return QC_OK;
	}
	const struct codec *c = codec_of(type);
	struct geom g;
	geom_init(&g, l, c, ne);
	const int64_t bb = qc_type_get(type)->block_bytes;
	for (uint64_t r = row0; r < row0 + n_rows; r++) {
		const uint8_t *s = packed + (r / (uint64_t)g.N) * g.slice_bytes;
		int64_t n = (int64_t)(r % (uint64_t)g.N);
		for (int64_t b = 0; b < g.B; b++) {
			struct blockbuf k;
			unpack_block(c, &g, s, n, b, &k);
			c->put(k.codes, k.scale, k.offs, k.hdr, out + (r - row0) * (uint64_t)(g.B * bb) + (uint64_t)(b * bb));
		}
	}
	return QC_OK;
}

int qc_marlin_error(enum qc_layout l, enum qc_type type, const int64_t ne[4], const uint8_t *packed,
		    struct qc_marlin_err *e, struct qc_err *err)
{
	const char *why;
	if (!qc_marlin_fits(l, type, ne, 2, &why))
		return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "%s in layout %s: %s", qc_type_get(type)->name,
				  qc_layout_name(l), why);
	if (l == QC_LAYOUT_MARLIN_I6) {
		qc_marlin6_error(ne, packed, e);
		return QC_OK;
	}
	const struct codec *c = codec_of(type);
	struct geom g;
	geom_init(&g, l, c, ne);
	const struct qc_type_traits *tt = qc_type_get(type);
	uint8_t blk[QC_QK_K * 2];
	float exact[QC_QK_K];
	double se = 0, sw = 0;
	memset(e, 0, sizeof *e);
	const uint64_t rows = (uint64_t)(ne[1] * ne[2] * ne[3]);
	for (uint64_t r = 0; r < rows; r++) {
		const uint8_t *s = packed + (r / (uint64_t)g.N) * g.slice_bytes;
		int64_t n = (int64_t)(r % (uint64_t)g.N);
		for (int64_t b = 0; b < g.B; b++) {
			struct blockbuf k;
			unpack_block(c, &g, s, n, b, &k);
			c->put(k.codes, k.scale, k.offs, k.hdr, blk);
			tt->dequant_row(blk, exact, tt->block_elems);
			/* a group's scale and offset once (the conversions dominated the time) */
			double gs[QC_QK_K / QC_MARLIN_GROUP], go[QC_QK_K / QC_MARLIN_GROUP];
			for (int64_t j = 0; j < tt->block_elems / QC_MARLIN_GROUP; j++) {
				gs[j] = qc_fp16_to_f32(k.scale[j]);
				go[j] = g.has_offs ? qc_fp16_to_f32(k.offs[j]) : 0.0;
			}
			for (int64_t i = 0; i < tt->block_elems; i++) {
				int j = (int)(i / QC_MARLIN_GROUP);
				float q = (float)k.codes[i];
				if (l == QC_LAYOUT_MARLIN_I4)
					q -= 8.0f;
				else if (g.bits == 8)
					q = (float)(int8_t)k.codes[i];
				/* the kernel: one fp16 fma (i4z, i8z) or product (i4, i8), one rounding */
				double v = (double)q * gs[j] + go[j];
				float kv = qc_fp16_to_f32(fp16_of_double(v));
				double d = fabs((double)kv - (double)exact[i]);
				if (e->max_abs == e->max_abs && !(d <= e->max_abs)) /* a NaN sticks */
					e->max_abs = d;
				se += d * d;
				sw += (double)exact[i] * exact[i];
			}
			e->n += (uint64_t)tt->block_elems;
		}
	}
	e->rms = e->n ? sqrt(se / (double)e->n) : 0;
	e->rms_w = e->n ? sqrt(sw / (double)e->n) : 0;
	return QC_OK;
}
