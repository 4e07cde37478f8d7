/* matmul_cpu_int.h — what the CPU matmul's files share (runtime/cpu/matmul_*.c, its test).
 *
 * Owns: the tile sizes and index grammar, struct qc_matmul (the prepared job and the
 * kernels chosen for this CPU), the per-thread scratch slot, the int8 weight-type
 * record, and the entry points each kernel file gives the dispatcher: matmul_cpu.c
 * (jobs, lifetime, CPU features), matmul_float.c, matmul_int8.c, matmul_q8_1.c,
 * matmul_kq.c, matmul_ref.c (the five kernels), matmul_round.c (activation rounding).
 * Index grammar: r output row (weight row), t token, k input element, b 32-element
 * block, i row inside a tile, g 4-byte group inside a block.
 * Not an interface for callers: matmul_cpu.h is; tests/test_matmul_cpu.c includes this
 * to swap in the portable kernels and read the prepared job.
 */
#ifndef QC_MATMUL_CPU_INT_H
#define QC_MATMUL_CPU_INT_H

#include <stddef.h>
#include <string.h>

#include "matmul_cpu.h"
#include "qblock.h"
#include "qtype.h"
#include "fp16.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QC_X86 1
#endif

#define FR 8     /* float kernel: rows per register tile */
#define FT 3     /* float kernel: tokens per register tile */
#define KC 512   /* float kernel: k per chunk (a tile's rows stay in L1 across tokens) */
#define IR 16    /* int8 kernel: rows per packed tile (one per 32-bit lane of a zmm) */
#define IT 8     /* int8 kernel: tokens per register tile */
#define DOT16_MAX_TOK 4 /* int8 kernel: fewer tokens than this skip the repack */
#define TOK_L2 (1 << 20) /* bytes of activations kept hot while a row tile streams */

enum mm_kind { MM_REF, MM_FLOAT, MM_INT8, MM_Q81, MM_KQ };

/* Codes of block b of a weight row as int8 (value = d * code), d returned. */
typedef float (*codes_fn)(const uint8_t *row, int64_t b, int8_t *codes);

struct slot {
	float *ftile;                 /* (FR, max_in) decoded float rows */
	float *lanes;                 /* (max_tok + FT, FR, 16) float kernel lanes between chunks */
	double *rowd;                 /* (max_in) a decoded row widened (reference) */
	uint8_t *pk;                  /* (max_in / 32, 8 groups, IR rows, 4) codes + 128 */
	double *pkd;                  /* (max_in / 32, IR) d_w per block and row */
	int8_t *codes;                /* (32) one block's codes */
};

struct int8_type;

/* see qc_matmul_ftile_generic */
typedef void (*ftile_fn)(const float *const *w, int nr, const float *x, int64_t ldx, int nt,
			 int64_t k0, int64_t k1, int64_t n, float *lanes, float *out);

/* Repack rows[0..IR) (nb blocks each) into s->pk / s->pkd: group g of block b
 * holds the 4 codes k = 32b + 4g .. +3 of every row, as code + 128 (u8). */
typedef void (*pack_fn)(struct slot *s, const struct int8_type *it, const uint8_t *const *rows,
			int64_t nb, const uint8_t *next);

/* Weight types the int8 kernel reads: value = d * int8 code per 32 elements. */
struct int8_type {
	enum qc_type type;
	codes_fn codes;               /* portable decoder */
	pack_fn pack_simd;            /* AVX2 repack, or NULL */
	/* AVX-512 VNNI: one token against IR rows in place (decode), or NULL */
	void (*dot16_vnni)(const uint8_t *const *rows, int64_t nb, const int8_t *xq,
			   const double *xqd, const int32_t *xs, double *acc);
};

/* One matrix of a prepared job: its weights, its output, and where its rows
 * start in the job's row space (parts follow each other in order). */
struct mm_part {
	const struct qc_mat *w;
	float *y;
	int64_t ldy;
	int64_t r_base;               /* first job row of this part */
};

struct qc_matmul {
	enum qc_act_round ar;
	int64_t max_in, max_tok;
	int n_slots;
	struct slot *slots;           /* (n_slots) */
	float *xr;                    /* (max_tok, max_in) rounded activations */
	double *xd;                   /* (max_tok, max_in) activations widened (reference) */
	double *sdelta;               /* (max_tok, max_in / 32) q8_1: s - d16 * sum q */
	float *xs81;                  /* (max_tok, max_in / 32) q8_1: s = fp16(d * sum q), as float */
	int8_t *xq;                   /* (max_tok, max_in) q8_0 activation codes */
	double *xqd;                  /* (max_tok, max_in / 32) their d16, widened */
	int32_t *xs;                  /* (max_tok, max_in / 32) -128 * sum of a block's codes */
	int16_t *xb16;                /* (max_tok, max_in / 16) q8_K: sum of each 16 codes */
	uint8_t *qbuf;                /* (n_slots, max_in * 8 + 64) one quantized activation row per slot */
	/* the prepared job: n_parts matrices of one type and width over the same x */
	enum mm_kind kind;
	struct mm_part parts[QC_MATMUL_MAX_PARTS];
	int n_parts;
	int64_t n_rows;               /* rows of all parts */
	int64_t e, n_tok;
	const float *xa;              /* (n_tok, n_in) activations as the kernel reads them */
	const float *x;               /* (n_tok, n_in) the job's activations before rounding */
	bool codes;                   /* the kernel reads activation codes */
	bool q81;
	const struct int8_type *i8;   /* the int8 kernel's weight type, or NULL */
	pack_fn pack;
	void (*dot16)(const uint8_t *const *rows, int64_t nb, const int8_t *xq, const double *xqd,
		      const int32_t *xs, double *acc);
	/* kernels, chosen once */
	bool avx2, vnni;
	ftile_fn ftile;
	void (*itile)(const uint8_t *pk, const double *pkd, int64_t nb, const int8_t *xq,
		      const double *xqd, const int32_t *xs, int64_t n_in, int nt, double *acc);
	double (*dot_dd)(const double *a, const double *b, int64_t n);
	double (*dot_fd)(const float *a, const double *b, int64_t n);
};

/* Weight rows stream from the mapped file; this machine's hardware prefetch did
 * not keep up (q8_0 decode 17 tokens/s without, 57 at 16 KiB ahead), and into
 * L2 beat into L1 here. A prefetch never faults; the address is formed as an
 * integer to stay clear of pointer-overflow UB. */
static inline void prefetch_ahead(const void *p, size_t bytes)
{
	__builtin_prefetch((const void *)((uintptr_t)p + bytes), 0, 2);
}

/* ggml pairs these weights with q8_1 activations (type_traits_cpu vec_dot_type);
 * both blocks begin with fp16 d then fp16 m. */
static inline bool pairs_q8_1(enum qc_type t)
{
	return t == QC_TYPE_Q4_1 || t == QC_TYPE_Q5_1;
}
_Static_assert(offsetof(struct qc_block_Q4_1, m) == offsetof(struct qc_block_Q5_1, m),
	       "q4_1 and q5_1 keep m at the same offset");

/* Block minimum m of block b of a q8_1-paired weight row. */
static inline float block_min(const struct qc_type_traits *tt, const uint8_t *row, int64_t b)
{
	uint16_t h;
	memcpy(&h, row + b * tt->block_bytes + offsetof(struct qc_block_Q4_1, m), sizeof h);
	return qc_fp16_to_f32(h);
}

/* ---- float kernel (matmul_float.c) ---------------------------------------- */

/* The portable float tile (contract: matmul_float.c); the SIMD clones do the same
 * IEEE operations. */
void qc_matmul_ftile_generic(const float *const *w, int nr, const float *x, int64_t ldx, int nt,
			     int64_t k0, int64_t k1, int64_t n, float *lanes, float *out);
#ifdef QC_X86
void qc_matmul_ftile_avx2(const float *const *w, int nr, const float *x, int64_t ldx, int nt,
			  int64_t k0, int64_t k1, int64_t n, float *lanes, float *out);
void qc_matmul_ftile_avx2vl(const float *const *w, int nr, const float *x, int64_t ldx, int nt,
			    int64_t k0, int64_t k1, int64_t n, float *lanes, float *out);
#endif

/* Whether weights of type t go to the float kernel. */
bool qc_matmul_float_kernel(enum qc_type t);

/* Output rows [r0, r1) of part p of the prepared job (the part's own row numbers)
 * with the float kernel, scratch s. */
void qc_matmul_rows_float(struct qc_matmul *mm, const struct mm_part *p, struct slot *s, int64_t r0,
			  int64_t r1);

/* ---- int8 kernel (matmul_int8.c) ------------------------------------------ */

/* Fills the fp16 -> f32 table the int8 decoders read; idempotent, thread-safe. */
void qc_matmul_int8_init(void);

/* The int8 kernel's record for weight type t, or NULL when it does not read t. */
const struct int8_type *qc_matmul_find_int8(enum qc_type t);

/* The portable repack (see pack_fn). */
void qc_matmul_pack_generic(struct slot *s, const struct int8_type *it, const uint8_t *const *rows,
			    int64_t nb, const uint8_t *next);

/* The portable integer tile (contract: matmul_int8.c), its AVX-512 VNNI clone and
 * an AVX2 one (same bits). */
void qc_matmul_itile_generic(const uint8_t *pk, const double *pkd, int64_t nb, const int8_t *xq,
			     const double *xqd, const int32_t *xs, int64_t n_in, int nt, double *acc);
#ifdef QC_X86
void qc_matmul_itile_vnni(const uint8_t *pk, const double *pkd, int64_t nb, const int8_t *xq,
			  const double *xqd, const int32_t *xs, int64_t n_in, int nt, double *acc);
void qc_matmul_itile_avx2(const uint8_t *pk, const double *pkd, int64_t nb, const int8_t *xq,
			  const double *xqd, const int32_t *xs, int64_t n_in, int nt, double *acc);
#endif

/* Rows [r0, r1) of part p (its own row numbers) with the int8 kernel, scratch s. */
void qc_matmul_rows_int8(struct qc_matmul *mm, const struct mm_part *p, struct slot *s, int64_t r0,
			  int64_t r1);

/* ---- q8_1 kernel (matmul_q8_1.c) ------------------------------------------ */

/* Whether the q8_1 kernel reads weights of type t (q4_1, q5_1). */
bool qc_matmul_q81_kernel(enum qc_type t);

/* Rows [r0, r1) of part p (its own row numbers) with the q8_1 kernel (ggml's float order). */
void qc_matmul_rows_q81(struct qc_matmul *mm, const struct mm_part *p, int64_t r0, int64_t r1);

/* ---- K-quant kernel (matmul_kq.c) ----------------------------------------- */

/* Whether the K-quant kernel reads weights of type t (q4_K, q5_K, q6_K). */
bool qc_matmul_kq_kernel(enum qc_type t);

/* Rows [r0, r1) of part p (its own row numbers) with the K-quant kernel, scratch s. */
void qc_matmul_rows_kq(struct qc_matmul *mm, const struct mm_part *p, struct slot *s, int64_t r0, int64_t r1);

/* ---- reference kernel (matmul_ref.c) -------------------------------------- */

/* Dots of n floats (as doubles, or floats against doubles) in double: matmul_ref.c. */
double qc_matmul_dot_dd_generic(const double *a, const double *b, int64_t n);
double qc_matmul_dot_fd_generic(const float *a, const double *b, int64_t n);
#ifdef QC_X86
double qc_matmul_dot_dd_avx2(const double *a, const double *b, int64_t n);
double qc_matmul_dot_fd_avx2(const float *a, const double *b, int64_t n);
#endif

/* Rows [r0, r1) of part p (its own row numbers) with the reference kernel, scratch s. */
void qc_matmul_rows_ref(struct qc_matmul *mm, const struct mm_part *p, struct slot *s, int64_t r0,
			  int64_t r1);

/* ---- activation rounding (matmul_round.c) --------------------------------- */

/* Whether activations for weights of type wt are rounded (into mm->xr) under mm's
 * mode; false (and a warning once) for a type with no activation encoder. */
bool qc_matmul_act_rounded(const struct qc_matmul *mm, enum qc_type wt);

/* The activation scale a of W8A8 weights (matrix e's first block; every block of a
 * matrix holds the same): > 0 static, 0 dynamic per token. */
float qc_matmul_w8a8_scale(const struct qc_mat *w, int64_t e);

/* Rounds rows t0..t1-1 of x (rows of n_in) for weights of type wt into mm->xr (and
 * the kernel's codes when codes is set), with qbuf (a slot's) as scratch. Each row
 * alone: any split of the rows over threads gives the same bits. */
void qc_matmul_round_tokens(struct qc_matmul *mm, enum qc_type wt, const float *x, int64_t n_in, int64_t t0,
			    int64_t t1, bool codes, uint8_t *qbuf);

#endif
