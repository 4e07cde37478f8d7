/* test_quant_ref.c — the reference encoders/decoders in runtime/ops/.
 *
 * Checks: every type in qtype.def decodes a zero block to zeros from an odd
 * address and its struct in qblock.h has the table's size; every type with an
 * encoder survives a random round trip within a bound derived from its format
 * (not from our own output); fp16/bf16 conversions hit hand-computed special
 * values and all 65536 halves decode to the IEEE formula. Each checker is
 * also fed a deliberately wrong input (corrupted block, truncating
 * converter, wrong size) and must flag it.
 * Non-goals: bit-exactness against llama.cpp for the quantized decoders —
 * that is the fixture test's job (reference JSONs from llama.cpp).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "qblock.h"
#include "qtype.h"
#include "dequant.h"
#include "fp16.h"

/* ---- deterministic random numbers (splitmix64) ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rng_next(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

/* uniform in [0, 1) */
static double rng_unit(void)
{
	return (double)(rng_next() >> 11) * 0x1p-53;
}

static uint32_t f2u(float f) { return qc_f32_to_bits(f); }
static float u2f(uint32_t u) { return qc_bits_to_f32(u); }

/* ---- every id: struct sizes and zero blocks ---- */

struct block_shape {
	int64_t bytes, elems;
};

/* From qblock.h, independently of qtype.def; a type missing its struct or
 * its QC_BLOCK_ELEMS_ macro fails to compile here. */
static const struct block_shape struct_shape[QC_TYPE_COUNT] = {
#define QC_TYPE(E, id, nm, be, bb, fam, q, tol) \
	[id] = { (int64_t)sizeof(struct qc_block_##E), QC_BLOCK_ELEMS_##E },
#include "qtype.def"
#undef QC_TYPE
};

static bool shape_matches(const struct qc_type_traits *tt, struct block_shape s)
{
	return tt->block_bytes == s.bytes && tt->block_elems == s.elems;
}

static bool all_zero(const float *y, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		if (y[i] != 0.0f) /* NaN poison fails too */
			return false;
	return true;
}

#define MAX_BLOCK_BYTES 512
#define MAX_BLOCK_ELEMS 256

static void test_every_type_has_struct_and_decodes_zero_block(void)
{
	int n_valid = 0;
	for (uint32_t id = 0; id < QC_TYPE_COUNT; id++) {
		if (!qc_type_valid(id)) {
			CHECK(qc_types[id].name == NULL, "hole %u has a name", id);
			continue;
		}
		const struct qc_type_traits *tt = qc_type_get((enum qc_type)id);
		n_valid++;
		CHECK(tt->dequant_row != NULL, "%s: no decoder", tt->name);
		CHECK(shape_matches(tt, struct_shape[id]), "%s: table %lld B/%lld elems, struct %lld B/%lld elems",
		      tt->name, (long long)tt->block_bytes, (long long)tt->block_elems,
		      (long long)struct_shape[id].bytes, (long long)struct_shape[id].elems);
		struct block_shape off_by_one = { struct_shape[id].bytes + 1, struct_shape[id].elems };
		CHECK(!shape_matches(tt, off_by_one), "%s: size check accepts a wrong size", tt->name);
		if (tt->block_bytes > MAX_BLOCK_BYTES || tt->block_elems > MAX_BLOCK_ELEMS) {
			CHECK(0, "%s: block larger than this test's buffers", tt->name);
			continue;
		}

		/* +1: decode from an odd address, as blocks inside a file may be */
		uint8_t buf[MAX_BLOCK_BYTES + 1];
		float y[MAX_BLOCK_ELEMS];
		memset(buf, 0, sizeof buf);
		for (int i = 0; i < MAX_BLOCK_ELEMS; i++)
			y[i] = NAN;
		CHECK(!all_zero(y, tt->block_elems), "%s: zero check passes NaN poison", tt->name);
		tt->dequant_row(buf + 1, y, tt->block_elems);
		CHECK(all_zero(y, tt->block_elems), "%s: zero block does not decode to zeros", tt->name);

		/* a non-zero pattern (0x3c: small normal scales in every format,
		 * non-zero codes) must not decode to all zeros */
		memset(buf, 0x3c, sizeof buf);
		tt->dequant_row(buf + 1, y, tt->block_elems);
		CHECK(!all_zero(y, tt->block_elems), "%s: 0x3c-filled block decodes to zeros", tt->name);
	}
	int n_listed = 0;
#define QC_TYPE(E, id, nm, be, bb, fam, q, tol) n_listed++;
#include "qtype.def"
#undef QC_TYPE
	CHECK(n_valid == n_listed, "%d valid ids, qtype.def lists %d types", n_valid, n_listed);
	const uint32_t retired[] = { 4, 5, 31, 32, 33, 36, 37, 38 };
	for (size_t i = 0; i < sizeof retired / sizeof retired[0]; i++)
		CHECK(!qc_type_valid(retired[i]), "retired id %u is valid", retired[i]);
}

/* ---- round trips: per-element error bounds from the format math ---- */

/* Fills tol[0..k) for one block of k inputs x. */
typedef void (*bound_fn)(const float *x, int64_t k, double *tol);

static void bound_exact(const float *x, int64_t k, double *tol)
{
	(void)x;
	for (int64_t i = 0; i < k; i++)
		tol[i] = 0.0;
}

/* half an ulp of a binary format with `mant` explicit mantissa bits and
 * smallest normal exponent `emin`, at |x| */
static double half_ulp(double x, int mant, int emin)
{
	int e;
	frexp(fabs(x), &e); /* |x| = m * 2^e, m in [0.5, 1) */
	if (x == 0.0 || e - 1 < emin)
		e = emin + 1;
	return ldexp(1.0, e - 1 - mant - 1);
}

static void bound_f16(const float *x, int64_t k, double *tol)
{
	for (int64_t i = 0; i < k; i++)
		tol[i] = half_ulp(x[i], 10, -14);
}

static void bound_bf16(const float *x, int64_t k, double *tol)
{
	for (int64_t i = 0; i < k; i++)
		tol[i] = half_ulp(x[i], 7, -126);
}

/* fp16 storage of the scale d: relative error 2^-11 when normal, absolute
 * 2^-25 when subnormal; every code q multiplies that error by |q|. */
static double fp16_scale_err(double d, double qmax)
{
	return qmax * (ldexp(d, -11) + 0x1p-25);
}

/* q8_0: d = amax/127, q = round(x/d): |x - q*d| <= d/2, plus the stored
 * scale's error times |q| <= 127, plus float rounding of x/d and q*d. */
static void bound_q8_0(const float *x, int64_t k, double *tol)
{
	double amax = 0.0;
	for (int64_t i = 0; i < k; i++)
		amax = fmax(amax, fabs(x[i]));
	const double d = amax / 127.0;
	for (int64_t i = 0; i < k; i++)
		tol[i] = 0.5 * d + fp16_scale_err(d, 127.0) + ldexp(amax, -20);
}

/* q4_0: d = vmax/-8 (vmax = the signed extreme), q = min(15, floor(x/d + 8.5)):
 * error <= |d|/2, except where x/d > 7.5 (opposite sign to vmax) and the
 * clamp to code 15 (= 7*d) costs up to (x/d - 7)*|d| <= |d|. */
static void bound_q4_0(const float *x, int64_t k, double *tol)
{
	double amax = 0.0, vmax = 0.0;
	for (int64_t i = 0; i < k; i++) {
		if (fabs(x[i]) > amax) {
			amax = fabs(x[i]);
			vmax = x[i];
		}
	}
	const double d = amax / 8.0;
	for (int64_t i = 0; i < k; i++) {
		const double r = vmax != 0.0 ? -8.0 * x[i] / vmax : 0.0;
		const double rounding = r > 7.5 ? (r - 7.0) * d : 0.5 * d;
		tol[i] = rounding + fp16_scale_err(d, 8.0) + ldexp(amax, -20);
	}
}

/* An upper bound on x >= 0 stored in fp16 rounded up (as a covering encoder must
 * store its scales): one half ulp step, 2^-10 relative when normal, 2^-24 when not. */
static double fp16_up_max(double x)
{
	return x * (1.0 + 0x1p-10) + 0x1p-24;
}

/* q4_K / q5_K with `levels` codes above 0: per 32-element sub-block the covered
 * range is [min(0, lo), hi]; the min scale dmin is at most max(-lo)/63 (rounded up
 * in fp16), so the mins may overshoot by one dmin step; the sub-block step is at
 * most need + d, need = (range + dmin)/levels, d = max(need)/63 rounded up. Error:
 * half a step, plus float rounding (2^-18 of the block's magnitude). */
static void bound_kq(const float *x, int64_t k, double *tol, int levels)
{
	double lo[8], hi[8], mmax = 0.0, amax = 0.0;
	for (int s = 0; s < 8; s++) {
		lo[s] = 0.0;
		hi[s] = x[32 * s];
		for (int l = 0; l < 32; l++) {
			lo[s] = fmin(lo[s], x[32 * s + l]);
			hi[s] = fmax(hi[s], x[32 * s + l]);
			amax = fmax(amax, fabs(x[32 * s + l]));
		}
		mmax = fmax(mmax, -lo[s]);
	}
	const double dmin = fp16_up_max(mmax / 63.0);
	double need[8], nmax = 0.0;
	for (int s = 0; s < 8; s++) {
		need[s] = (hi[s] - lo[s] + dmin) / levels;
		nmax = fmax(nmax, need[s]);
	}
	const double d = fp16_up_max(nmax / 63.0);
	for (int64_t i = 0; i < k; i++)
		tol[i] = 0.5 * (need[i / 32] + d) + ldexp(amax, -18);
}

static void bound_q4_k(const float *x, int64_t k, double *tol)
{
	bound_kq(x, k, tol, 15);
}

static void bound_q5_k(const float *x, int64_t k, double *tol)
{
	bound_kq(x, k, tol, 31);
}

/* q6_K: 16 sub-blocks of 16, codes -32..31; a symmetric covering scale is
 * amax/31 per sub-block, its int8 multiple of d = max/127 (rounded up) at most one
 * d larger; error half that step plus float rounding. */
static void bound_q6_k(const float *x, int64_t k, double *tol)
{
	double need[16], nmax = 0.0, amax = 0.0;
	for (int s = 0; s < 16; s++) {
		need[s] = 0.0;
		for (int l = 0; l < 16; l++)
			need[s] = fmax(need[s], fabs(x[16 * s + l]) / 31.0);
		nmax = fmax(nmax, need[s]);
		amax = fmax(amax, 31.0 * need[s]);
	}
	const double d = fp16_up_max(nmax / 127.0);
	for (int64_t i = 0; i < k; i++)
		tol[i] = 0.5 * (need[i / 16] + d) + ldexp(amax, -18);
}

/* f8_a8: one scale for the whole call (a row), d = amax/448: e4m3 keeps 3 mantissa bits,
 * so normal values are within 2^-4 relative (half a step), subnormals (below 2^-6 d)
 * within half their step 2^-9 d; plus the float product e4m3 * d (2^-24). row_amax is
 * the call's, set by the caller (the bound sees one block). */
static double row_amax;
static void bound_f8a8(const float *x, int64_t k, double *tol)
{
	const double d = row_amax / 448.0;
	for (int64_t i = 0; i < k; i++)
		tol[i] = fmax(fabs(x[i]) * 0x1p-4, 0x1p-10 * d) * (1.0 + 0x1p-20) + fabs(x[i]) * 0x1p-23;
}

static const bound_fn round_trip_bound[QC_TYPE_COUNT] = {
	[QC_TYPE_F8A8] = bound_f8a8,
	[QC_TYPE_F32] = bound_exact,
	[QC_TYPE_F16] = bound_f16,
	[QC_TYPE_BF16] = bound_bf16,
	[QC_TYPE_Q8_0] = bound_q8_0,
	[QC_TYPE_Q4_0] = bound_q4_0,
	[QC_TYPE_Q4_K] = bound_q4_k,
	[QC_TYPE_Q5_K] = bound_q5_k,
	[QC_TYPE_Q6_K] = bound_q6_k,
};

#define RT_GROUP 32            /* inputs share a magnitude per 32 elements */
#define RT_N (64 * 256)        /* elements per round trip, a multiple of every block */

/* Elements of y outside the bound for x; reports the first one. */
static int64_t count_outside(enum qc_type t, const float *x, const float *y, int64_t n, int verbose)
{
	const struct qc_type_traits *tt = qc_type_get(t);
	const int64_t k = tt->block_elems;
	double tol[MAX_BLOCK_ELEMS];
	int64_t bad = 0;
	for (int64_t b = 0; b < n / k; b++) {
		round_trip_bound[t](x + b * k, k, tol);
		for (int64_t i = 0; i < k; i++) {
			const int64_t at = b * k + i;
			const double err = fabs((double)y[at] - (double)x[at]);
			if (!(err <= tol[i])) {
				if (!bad && verbose)
					fprintf(stderr, "  %s[%lld]: x=%.9g y=%.9g err=%.3g tol=%.3g\n", tt->name,
						(long long)at, x[at], y[at], err, tol[i]);
				bad++;
			}
		}
	}
	return bad;
}

static void fill_round_trip_input(float *x, int64_t n)
{
	for (int64_t g = 0; g < n / RT_GROUP; g++) {
		/* magnitudes 10^-1.5 .. 10^2: fp16 scales stay normal for every
		 * encoder here, halves and bf16 see many binades */
		const double mag = pow(10.0, rng_unit() * 3.5 - 1.5);
		for (int j = 0; j < RT_GROUP; j++)
			x[g * RT_GROUP + j] = (float)((2.0 * rng_unit() - 1.0) * mag);
	}
	x[0] = x[0] != 0.0f ? x[0] : 1.0f; /* the corruption below targets block 0 */
	for (int j = 0; j < RT_GROUP; j++)
		x[3 * RT_GROUP + j] = 0.0f; /* an all-zero block: the d == 0 path */
}

static void test_round_trip_within_format_bound(void)
{
	float *x = malloc(RT_N * sizeof *x);
	float *y = malloc(RT_N * sizeof *y);
	uint8_t *q = malloc(RT_N * 8); /* >= RT_N * block_bytes / block_elems for any type */
	if (!x || !y || !q) {
		CHECK(0, "out of memory");
		goto out;
	}
	for (uint32_t id = 0; id < QC_TYPE_COUNT; id++) {
		if (!qc_type_valid(id) || !qc_types[id].quant_row)
			continue;
		const enum qc_type t = (enum qc_type)id;
		const struct qc_type_traits *tt = qc_type_get(t);
		if (!round_trip_bound[t]) {
			CHECK(0, "%s has an encoder but this test has no error bound for it", tt->name);
			continue;
		}
		for (int rep = 0; rep < 4; rep++) {
			fill_round_trip_input(x, RT_N);
			row_amax = 0.0;
			for (int64_t i = 0; i < RT_N; i++)
				row_amax = fmax(row_amax, fabs(x[i]));
			tt->quant_row(x, q, RT_N);
			tt->dequant_row(q, y, RT_N);
			const int64_t bad = count_outside(t, x, y, RT_N, 1);
			CHECK(bad == 0, "%s: %lld of %d elements outside the bound", tt->name, (long long)bad, RT_N);
		}
		/* flip the top bit of block 0's last byte: a sign, exponent or
		 * quant high bit in every format here; the bound must notice */
		q[tt->block_bytes - 1] ^= 0x80;
		tt->dequant_row(q, y, RT_N);
		CHECK(count_outside(t, x, y, RT_N, 0) > 0, "%s: corrupted block passes the round-trip bound", tt->name);
	}
out:
	free(x);
	free(y);
	free(q);
}

/* ---- fp16 / bf16 special values ---- */

struct enc_case {
	uint32_t f32;
	uint16_t want;
};

/* Worked out by hand from IEEE 754 (RNE; ties noted). */
static const struct enc_case f16_enc_cases[] = {
	{ 0x00000000, 0x0000 }, { 0x80000000, 0x8000 },
	{ 0x3f800000, 0x3c00 }, { 0xc0000000, 0xc000 },
	{ 0x3dcccccd, 0x2e66 },                         /* 0.1f */
	{ 0x477fe000, 0x7bff },                         /* 65504, largest half */
	{ 0x477fefff, 0x7bff },                         /* just below the overflow tie */
	{ 0x477ff000, 0x7c00 },                         /* 65520: tie, even side is inf */
	{ 0x7f7fffff, 0x7c00 }, { 0xc7800000, 0xfc00 },  /* FLT_MAX, -65536 */
	{ 0x7f800000, 0x7c00 }, { 0xff800000, 0xfc00 },  /* +-inf */
	{ 0x7fc00000, 0x7e00 }, { 0xffc00001, 0xfe00 }, { 0x7f800001, 0x7e00 }, /* NaNs */
	{ 0x3f801000, 0x3c00 },                         /* 1 + 2^-11: tie to even */
	{ 0x3f801001, 0x3c01 },                         /* just above the tie */
	{ 0x3f803000, 0x3c02 },                         /* 1 + 3*2^-11: tie to even (up) */
	{ 0x38800000, 0x0400 },                         /* 2^-14, smallest normal */
	{ 0x387fe000, 0x0400 },                         /* 1023.5 * 2^-24: tie, rounds into normal */
	{ 0x387fc000, 0x03ff },                         /* largest subnormal */
	{ 0x33800000, 0x0001 },                         /* 2^-24, smallest subnormal */
	{ 0x33000000, 0x0000 },                         /* 2^-25: tie to even zero */
	{ 0x33000001, 0x0001 },                         /* just above 2^-25 */
	{ 0x33c00000, 0x0002 },                         /* 1.5 * 2^-24: tie, even is 2 */
	{ 0x34200000, 0x0002 },                         /* 2.5 * 2^-24: tie, even is 2 */
	{ 0xb3c00000, 0x8002 },
};

static const struct enc_case bf16_enc_cases[] = {
	{ 0x3f800000, 0x3f80 }, { 0x3dcccccd, 0x3dcd },
	{ 0x3f808000, 0x3f80 },                         /* tie, even stays */
	{ 0x3f818000, 0x3f82 },                         /* tie, odd rounds up */
	{ 0x3f808001, 0x3f81 },
	{ 0x7f7fffff, 0x7f80 },                         /* FLT_MAX rounds to inf */
	{ 0x7f800000, 0x7f80 }, { 0xff800000, 0xff80 },
	{ 0x7f800001, 0x7fc0 }, { 0xff812345, 0xffc1 }, { 0x7fc00000, 0x7fc0 }, /* NaN made quiet */
	{ 0x00000001, 0x0000 }, { 0x00008000, 0x0000 }, /* subnormal tie to even */
	{ 0x00018000, 0x0002 }, { 0x80010000, 0x8001 }, /* subnormals are kept */
};

typedef uint16_t (*enc16_fn)(float);

static int count_enc_mismatches(const struct enc_case *c, size_t n, enc16_fn enc, const char *what, int verbose)
{
	int bad = 0;
	for (size_t i = 0; i < n; i++) {
		const uint16_t got = enc(u2f(c[i].f32));
		if (got != c[i].want) {
			if (verbose)
				fprintf(stderr, "  %s(0x%08x) = 0x%04x, want 0x%04x\n", what,
					(unsigned)c[i].f32, got, c[i].want);
			bad++;
		}
	}
	return bad;
}

static uint16_t f16_fn(float f) { return qc_f32_to_fp16(f); }
static uint16_t bf16_fn(float f) { return qc_f32_to_bf16(f); }

/* deliberately wrong: truncate instead of rounding */
static uint16_t f16_truncating(float f)
{
	uint32_t u = f2u(f), a = u & 0x7fffffffu;
	uint16_t s = (uint16_t)((u >> 16) & 0x8000u);
	if (a >= 0x47800000u)
		return s | 0x7c00u;
	if (a < 0x38800000u)
		return s | (uint16_t)(u2f(a) * 0x1p24f);
	return s | (uint16_t)((a >> 13) - (112u << 10));
}

static uint16_t bf16_truncating(float f) { return (uint16_t)(f2u(f) >> 16); }

/* IEEE binary16 value by the textbook formula, in double */
static float f16_formula(uint16_t h)
{
	const int e = (h >> 10) & 31, m = h & 1023;
	const double mag = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
	return (float)(h & 0x8000 ? -mag : mag);
}

static void test_fp16_bf16_special_values(void)
{
	const size_t nf = sizeof f16_enc_cases / sizeof f16_enc_cases[0];
	const size_t nb = sizeof bf16_enc_cases / sizeof bf16_enc_cases[0];
	CHECK(count_enc_mismatches(f16_enc_cases, nf, f16_fn, "f32_to_fp16", 1) == 0, "fp16 encode special values");
	CHECK(count_enc_mismatches(f16_enc_cases, nf, f16_truncating, "", 0) > 0, "fp16 cases miss a truncating encoder");
	CHECK(count_enc_mismatches(bf16_enc_cases, nb, bf16_fn, "f32_to_bf16", 1) == 0, "bf16 encode special values");
	CHECK(count_enc_mismatches(bf16_enc_cases, nb, bf16_truncating, "", 0) > 0, "bf16 cases miss a truncating encoder");

	/* all 65536 halves: value by formula, NaN kept quiet with its payload,
	 * and re-encoding gives the same bits */
	int bad_val = 0, bad_nan = 0, bad_rt = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		const float v = qc_fp16_to_f32((uint16_t)h);
		const bool is_nan = ((h >> 10) & 31) == 31 && (h & 1023);
		if (is_nan) {
			const uint32_t want = ((h & 0x8000u) << 16) | 0x7fc00000u | ((h & 1023u) << 13);
			bad_nan += f2u(v) != want;
			bad_rt += qc_f32_to_fp16(v) != (uint16_t)((h & 0x8000u) | 0x7e00u);
		} else {
			bad_val += f2u(v) != f2u(f16_formula((uint16_t)h));
			bad_rt += qc_f32_to_fp16(v) != h;
		}
	}
	CHECK(bad_val == 0, "%d halves decode off the IEEE formula", bad_val);
	CHECK(bad_nan == 0, "%d NaN halves decode without payload or quiet bit", bad_nan);
	CHECK(bad_rt == 0, "%d halves do not survive decode+encode", bad_rt);
	CHECK(f2u(f16_formula(0x3c01)) != f2u(qc_fp16_to_f32(0x3c02)), "formula check cannot tell neighbours apart");

	int bad_bf = 0;
	for (uint32_t b = 0; b < 65536; b++) {
		const float v = qc_bf16_to_f32((uint16_t)b);
		bad_bf += f2u(v) != b << 16;
		if ((b & 0x7fffu) <= 0x7f80u) /* non-NaN: exact round trip */
			bad_bf += qc_f32_to_bf16(v) != b;
	}
	CHECK(bad_bf == 0, "%d bf16 values fail decode or round trip", bad_bf);

	CHECK(f2u(qc_e8m0_to_f32_half(0)) == 0x00200000u, "e8m0 0 -> 2^-128");
	CHECK(f2u(qc_e8m0_to_f32_half(1)) == 0x00400000u, "e8m0 1 -> 2^-127");
	CHECK(qc_e8m0_to_f32_half(127) == 0.5f, "e8m0 127 -> 2^0 / 2");
	CHECK(qc_e8m0_to_f32_half(255) == 0x1p127f, "e8m0 255 -> 2^127 (ggml: not NaN)");
}

int main(void)
{
	test_every_type_has_struct_and_decodes_zero_block();
	test_round_trip_within_format_bound();
	test_fp16_bf16_special_values();
	return check_report("test_quant_ref");
}
