/* qblock.h — the on-disk block layout of every qtype.def encoding, for cc and nvcc.
 *
 * Owns: one struct qc_block_<ENUM> per qtype.def row (named with the row's ENUM
 * so X-macros can reach it), the sub-block constants, and the storage-qualifier
 * macros every lookup table is defined with (QC_TABLE_BEGIN/END).
 * Invariants: plain C that is also valid C++ (nvcc); fp16/bf16 fields are raw
 * uint16_t bits; sizeof(struct) == qtype.def block_bytes (asserted below);
 * little-endian host, as GGUF stores blocks little-endian.
 * Non-goals: decoding (runtime/ops/), packing helpers, alignment promises —
 * blocks in a file may sit at any address, so readers memcpy them out.
 * Reference: llama.cpp ggml/src/ggml-common.h (layouts read as facts).
 */
#ifndef QC_QBLOCK_H
#define QC_QBLOCK_H

#include <stdint.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "qblock.h: block fields are read in host order; only little-endian hosts are supported"
#endif

#ifdef __cplusplus
#define QC_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define QC_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* Lookup tables are defined once (QC_TABLE_BEGIN ... QC_TABLE_END) and declared
 * with QC_TABLE_EXTERN. Host code links one copy; a .cu that needs them in
 * device memory includes the defining .c and gets its own static __device__
 * copy, so no relocatable device code is needed. */
#if defined(__CUDACC__)
#define QC_HOSTDEV __host__ __device__
#define QC_TABLE_BEGIN(type, name, size) static const __device__ type name[size] = {
#define QC_TABLE_EXTERN(type, name, size)
#else
#define QC_HOSTDEV
#define QC_TABLE_BEGIN(type, name, size) const type name[size] = {
#define QC_TABLE_EXTERN(type, name, size) extern const type name[size];
#endif
#define QC_TABLE_END() };

#define QC_QK32 32   /* elements in a legacy / iq4_nl / mxfp4 block */
#define QC_QK_K 256  /* elements in a K-quant / IQ / ternary super-block */

/* Elements per block, by ENUM; qtype.def repeats them and the asserts at the
 * end of this file make the two agree. */
#define QC_BLOCK_ELEMS_F32 1
#define QC_BLOCK_ELEMS_F16 1
#define QC_BLOCK_ELEMS_BF16 1
#define QC_BLOCK_ELEMS_F64 1
#define QC_BLOCK_ELEMS_I8 1
#define QC_BLOCK_ELEMS_I16 1
#define QC_BLOCK_ELEMS_I32 1
#define QC_BLOCK_ELEMS_I64 1
#define QC_BLOCK_ELEMS_Q4_0 QC_QK32
#define QC_BLOCK_ELEMS_Q4_1 QC_QK32
#define QC_BLOCK_ELEMS_Q5_0 QC_QK32
#define QC_BLOCK_ELEMS_Q5_1 QC_QK32
#define QC_BLOCK_ELEMS_Q8_0 QC_QK32
#define QC_BLOCK_ELEMS_Q8_1 QC_QK32
#define QC_BLOCK_ELEMS_Q2_K QC_QK_K
#define QC_BLOCK_ELEMS_Q3_K QC_QK_K
#define QC_BLOCK_ELEMS_Q4_K QC_QK_K
#define QC_BLOCK_ELEMS_Q5_K QC_QK_K
#define QC_BLOCK_ELEMS_Q6_K QC_QK_K
#define QC_BLOCK_ELEMS_Q8_K QC_QK_K
#define QC_BLOCK_ELEMS_IQ2_XXS QC_QK_K
#define QC_BLOCK_ELEMS_IQ2_XS QC_QK_K
#define QC_BLOCK_ELEMS_IQ2_S QC_QK_K
#define QC_BLOCK_ELEMS_IQ3_XXS QC_QK_K
#define QC_BLOCK_ELEMS_IQ3_S QC_QK_K
#define QC_BLOCK_ELEMS_IQ1_S QC_QK_K
#define QC_BLOCK_ELEMS_IQ1_M QC_QK_K
#define QC_BLOCK_ELEMS_IQ4_NL QC_QK32
#define QC_BLOCK_ELEMS_IQ4_XS QC_QK_K
#define QC_BLOCK_ELEMS_TQ1_0 QC_QK_K
#define QC_BLOCK_ELEMS_TQ2_0 QC_QK_K
#define QC_BLOCK_ELEMS_MXFP4 QC_QK32

/* ---- plain element types: a "block" is one element ---- */

struct qc_block_F32 { float v; };       /* 4 B = 32 bpw */
struct qc_block_F16 { uint16_t bits; }; /* IEEE binary16, 2 B = 16 bpw */
struct qc_block_BF16 { uint16_t bits; };/* top half of a binary32, 2 B = 16 bpw */
struct qc_block_F64 { double v; };      /* 8 B = 64 bpw */
struct qc_block_I8 { int8_t v; };       /* 1 B */
struct qc_block_I16 { int16_t v; };     /* 2 B */
struct qc_block_I32 { int32_t v; };     /* 4 B */
struct qc_block_I64 { int64_t v; };     /* 8 B */
QC_STATIC_ASSERT(sizeof(struct qc_block_F32) == 4, "f32 block");
QC_STATIC_ASSERT(sizeof(struct qc_block_F16) == 2, "f16 block");
QC_STATIC_ASSERT(sizeof(struct qc_block_BF16) == 2, "bf16 block");
QC_STATIC_ASSERT(sizeof(struct qc_block_F64) == 8, "f64 block");
QC_STATIC_ASSERT(sizeof(struct qc_block_I8) == 1, "i8 block");
QC_STATIC_ASSERT(sizeof(struct qc_block_I16) == 2, "i16 block");
QC_STATIC_ASSERT(sizeof(struct qc_block_I32) == 4, "i32 block");
QC_STATIC_ASSERT(sizeof(struct qc_block_I64) == 8, "i64 block");

/* ---- 32-element blocks with one fp16 scale ---- */

/* x = d*(q-8), q 4-bit; 2 + 32/2 = 18 B = 4.5 bpw */
struct qc_block_Q4_0 {
	uint16_t d;      /* fp16 scale */
	uint8_t qs[16];  /* (16) byte j: element j low nibble, element j+16 high nibble */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_Q4_0) == 2 + 16, "q4_0 block");

/* x = d*q + m, q 4-bit; 2*2 + 32/2 = 20 B = 5 bpw */
struct qc_block_Q4_1 {
	uint16_t d;      /* fp16 scale */
	uint16_t m;      /* fp16 offset (block minimum) */
	uint8_t qs[16];  /* (16) nibbles, as q4_0 */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_Q4_1) == 2 * 2 + 16, "q4_1 block");

/* x = d*(q-16), q 5-bit; 2 + 4 + 32/2 = 22 B = 5.5 bpw */
struct qc_block_Q5_0 {
	uint16_t d;      /* fp16 scale */
	uint8_t qh[4];   /* (32) bits, LE uint32: bit j = 5th bit of element j */
	uint8_t qs[16];  /* (16) low nibbles, as q4_0 */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_Q5_0) == 2 + 4 + 16, "q5_0 block");

/* x = d*q + m, q 5-bit; 2*2 + 4 + 32/2 = 24 B = 6 bpw */
struct qc_block_Q5_1 {
	uint16_t d;      /* fp16 scale */
	uint16_t m;      /* fp16 offset */
	uint8_t qh[4];   /* (32) 5th bits, as q5_0 */
	uint8_t qs[16];  /* (16) low nibbles */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_Q5_1) == 2 * 2 + 4 + 16, "q5_1 block");

/* x = d*q, q int8; 2 + 32 = 34 B = 8.5 bpw */
struct qc_block_Q8_0 {
	uint16_t d;      /* fp16 scale */
	int8_t qs[32];   /* (32) signed quants */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_Q8_0) == 2 + 32, "q8_0 block");

/* x = d*q, q int8, s = d*sum(q) kept for dot products; 2*2 + 32 = 36 B = 9 bpw */
struct qc_block_Q8_1 {
	uint16_t d;      /* fp16 scale */
	uint16_t s;      /* fp16 d * sum(qs); not needed to decode */
	int8_t qs[32];   /* (32) signed quants */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_Q8_1) == 2 * 2 + 32, "q8_1 block");

/* ---- 256-element K-quant super-blocks ---- */

/* 16 sub-blocks of 16, x = d*sc*q - dmin*mn, q 2-bit, sc/mn 4-bit;
 * 16 + 64 + 2*2 = 84 B = 2.625 bpw */
struct qc_block_Q2_K {
	uint8_t scales[16]; /* (16) low nibble sc, high nibble mn, per 16 elements */
	uint8_t qs[64];     /* (64) 2-bit quants: 128-element halves of 32 bytes, 4 shifts each */
	uint16_t d;         /* fp16 scale of sc */
	uint16_t dmin;      /* fp16 scale of mn */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_Q2_K) == 16 + 64 + 2 * 2, "q2_K block");

/* 16 sub-blocks of 16, x = d*(sc-32)*q, q 3-bit signed (-4..3), sc 6-bit;
 * 32 + 64 + 12 + 2 = 110 B = 3.4375 bpw */
struct qc_block_Q3_K {
	uint8_t hmask[32];  /* (32) bit k of byte l: high bit of element 32k+l (set = no -4) */
	uint8_t qs[64];     /* (64) low 2 bits, laid out as q2_K */
	uint8_t scales[12]; /* 16 x 6-bit: low nibbles in bytes 0..7, high pairs in 8..11 */
	uint16_t d;         /* fp16 super-block scale */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_Q3_K) == 32 + 64 + 12 + 2, "q3_K block");

/* 8 sub-blocks of 32, x = d*sc*q - dmin*mn, q 4-bit, sc/mn 6-bit;
 * 2*2 + 12 + 128 = 144 B = 4.5 bpw */
struct qc_block_Q4_K {
	uint16_t d;         /* fp16 scale of sc */
	uint16_t dmin;      /* fp16 scale of mn */
	uint8_t scales[12]; /* 8 x (6-bit sc, 6-bit mn), packed (see dequant_k.c) */
	uint8_t qs[128];    /* (128) nibbles: 32-byte chunk c holds sub-blocks 2c (low), 2c+1 (high) */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_Q4_K) == 2 * 2 + 12 + 128, "q4_K block");

/* as q4_K with a 5th bit; 2*2 + 12 + 32 + 128 = 176 B = 5.5 bpw */
struct qc_block_Q5_K {
	uint16_t d;         /* fp16 scale of sc */
	uint16_t dmin;      /* fp16 scale of mn */
	uint8_t scales[12]; /* as q4_K */
	uint8_t qh[32];     /* (32) bit s of byte l: 5th bit of element 32s+l */
	uint8_t qs[128];    /* (128) low nibbles, as q4_K */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_Q5_K) == 2 * 2 + 12 + 32 + 128, "q5_K block");

/* 16 sub-blocks of 16, x = d*sc*(q-32), q 6-bit, sc int8;
 * 128 + 64 + 16 + 2 = 210 B = 6.5625 bpw */
struct qc_block_Q6_K {
	uint8_t ql[128];    /* (128) low nibbles: per 128-half, 64 bytes, two nibble planes */
	uint8_t qh[64];     /* (64) high 2 bits: per 128-half, 32 bytes, four 2-bit planes */
	int8_t scales[16];  /* (16) signed sub-block scales */
	uint16_t d;         /* fp16 super-block scale */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_Q6_K) == 128 + 64 + 16 + 2, "q6_K block");

/* x = d*q, d float32 (llama.cpp's activation format); 4 + 256 + 16*2 = 292 B = 9.125 bpw */
struct qc_block_Q8_K {
	float d;            /* fp32 scale */
	int8_t qs[256];     /* (256) signed quants */
	int16_t bsums[16];  /* (16) sums of 16 quants each; not needed to decode */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_Q8_K) == 4 + 256 + 16 * 2, "q8_K block");

/* ---- 256-element lattice ("i-quant") super-blocks ---- */

/* 8 sub-blocks of 32 = 4 grid rows of 8; per sub-block 4 B row indices +
 * 4 B (4x7-bit signs, 4-bit scale); 2 + 32*2 = 66 B = 2.0625 bpw */
struct qc_block_IQ2_XXS {
	uint16_t d;         /* fp16 scale */
	uint16_t qs[32];    /* (32) per sub-block: 2 words of row indices (bytes), 2 of signs+scale */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_IQ2_XXS) == 2 + 32 * 2, "iq2_xxs block");

/* 32 rows of 8: 9-bit row index + 7-bit sign index each; 2 + 32*2 + 8 = 74 B = 2.3125 bpw */
struct qc_block_IQ2_XS {
	uint16_t d;         /* fp16 scale */
	uint16_t qs[32];    /* (32) bits 0..8 row of iq2xs grid, bits 9..15 sign index */
	uint8_t scales[8];  /* (8) two 4-bit scales per sub-block of 32 (one per 16) */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_IQ2_XS) == 2 + 32 * 2 + 8, "iq2_xs block");

/* 32 rows of 8: 10-bit row index, 8 explicit sign bits; 2 + 64 + 8 + 8 = 82 B = 2.5625 bpw */
struct qc_block_IQ2_S {
	uint16_t d;         /* fp16 scale */
	uint8_t qs[64];     /* (32) low 8 bits of row indices, then (32) sign bytes */
	uint8_t qh[8];      /* (8) per sub-block: 2 high index bits for each of its 4 rows */
	uint8_t scales[8];  /* (8) two 4-bit scales per sub-block */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_IQ2_S) == 2 + 64 + 8 + 8, "iq2_s block");

/* 64 rows of 4 (8-bit index) + per sub-block 32-bit (4x7-bit signs, 4-bit scale);
 * 2 + 3*256/8 = 98 B = 3.0625 bpw */
struct qc_block_IQ3_XXS {
	uint16_t d;         /* fp16 scale */
	uint8_t qs[96];     /* (64) iq3xxs row indices, then (8) LE uint32 signs+scale */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_IQ3_XXS) == 2 + 96, "iq3_xxs block");

/* 64 rows of 4 (9-bit index), explicit signs, 4-bit odd scales;
 * 2 + 64 + 8 + 32 + 4 = 110 B = 3.4375 bpw */
struct qc_block_IQ3_S {
	uint16_t d;         /* fp16 scale */
	uint8_t qs[64];     /* (64) low 8 bits of iq3s row indices */
	uint8_t qh[8];      /* (8) per sub-block: 9th index bit of its 8 rows */
	uint8_t signs[32];  /* (32) one sign bit per element */
	uint8_t scales[4];  /* (4) two 4-bit scales per byte, one per sub-block */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_IQ3_S) == 2 + 64 + 8 + 32 + 4, "iq3_s block");

/* 32 rows of 8 from the ternary iq1s grid, 11-bit index, 3-bit scale + delta sign
 * per sub-block; 2 + 32 + 8*2 = 50 B = 1.5625 bpw */
struct qc_block_IQ1_S {
	uint16_t d;         /* fp16 scale */
	uint8_t qs[32];     /* (32) low 8 bits of row indices */
	uint16_t qh[8];     /* (8) per sub-block: 4x3 high index bits, 3-bit scale, delta sign (bit 15) */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_IQ1_S) == 2 + 32 + 8 * 2, "iq1_s block");

/* as iq1_s, scale per 16 elements, fp16 super-scale spread over the scale words;
 * 32 + 16 + 8 = 56 B = 1.75 bpw */
struct qc_block_IQ1_M {
	uint8_t qs[32];     /* (32) low 8 bits of row indices */
	uint8_t qh[16];     /* (16) per row pair: 3 high index bits + delta sign, one nibble per row */
	uint8_t scales[8];  /* 4 LE uint16: 4 x 3-bit scales each, top nibbles = fp16 super-scale */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_IQ1_M) == 32 + 16 + 8, "iq1_m block");

/* x = d*kvalues_iq4nl[q], q 4-bit; 2 + 32/2 = 18 B = 4.5 bpw */
struct qc_block_IQ4_NL {
	uint16_t d;         /* fp16 scale */
	uint8_t qs[16];     /* (16) nibbles, as q4_0 */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_IQ4_NL) == 2 + 16, "iq4_nl block");

/* 8 sub-blocks of 32, x = d*(ls-32)*kvalues_iq4nl[q], ls 6-bit;
 * 2 + 2 + 4 + 128 = 136 B = 4.25 bpw */
struct qc_block_IQ4_XS {
	uint16_t d;          /* fp16 scale */
	uint16_t scales_h;   /* 8 x 2 high bits of ls */
	uint8_t scales_l[4]; /* 8 x 4 low bits of ls, sub-block 2k low nibble, 2k+1 high */
	uint8_t qs[128];     /* (128) nibbles, 16 bytes per sub-block as q4_0 */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_IQ4_XS) == 2 + 2 + 4 + 128, "iq4_xs block");

/* ---- ternary ---- */

/* x = d*(t-1), t in {0,1,2}; 5 trits per byte in qs, 4 in qh;
 * 48 + 4 + 2 = 54 B = 1.6875 bpw */
struct qc_block_TQ1_0 {
	uint8_t qs[48];     /* (48) base-3 fixed-point bytes, 5 trits each (240 elements) */
	uint8_t qh[4];      /* (4) 4 trits each (last 16 elements) */
	uint16_t d;         /* fp16 scale */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_TQ1_0) == 48 + 4 + 2, "tq1_0 block");

/* x = d*(q-1), q 2-bit; 64 + 2 = 66 B = 2.0625 bpw */
struct qc_block_TQ2_0 {
	uint8_t qs[64];     /* (64) 2-bit codes: 32-byte halves, 4 shifts each */
	uint16_t d;         /* fp16 scale */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_TQ2_0) == 64 + 2, "tq2_0 block");

/* ---- microscaling FP4 (OCP MX v1.0) ---- */

/* x = 2^(e-127) * e2m1(q); 1 + 32/2 = 17 B = 4.25 bpw */
struct qc_block_MXFP4 {
	uint8_t e;          /* E8M0 shared exponent, bias 127 */
	uint8_t qs[16];     /* (16) E2M1 codes: byte j = element j low nibble, j+16 high */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_MXFP4) == 1 + 16, "mxfp4 block");

/* ---- normalized Hugging Face schemes (convert/hf_quant.h, docs/hf-quant.md) ----
 * 32 elements per block, each block self-contained: the f32 scale of the source
 * group/channel/tile it lies in is copied into it (fp16/bf16 scales widen exactly).
 * Scales are stored as raw f32 bits split in two uint16_t (little-endian: d[0] low)
 * so the structs stay 2-byte aligned with no padding; readers memcpy them out. */

#define QC_BLOCK_ELEMS_HQ4 QC_QK32
#define QC_BLOCK_ELEMS_HQ8 QC_QK32
#define QC_BLOCK_ELEMS_BNB_NF4 QC_QK32
#define QC_BLOCK_ELEMS_BNB_FP4 QC_QK32
#define QC_BLOCK_ELEMS_F8E4M3 QC_QK32
#define QC_BLOCK_ELEMS_NVFP4 QC_QK32
#define QC_BLOCK_ELEMS_F8A8 QC_QK32

/* x = d*(q - z), q 4-bit unsigned (GPTQ/AWQ/compressed-tensors 2/3/4-bit codes),
 * z int16 (GPTQ v1's stored zero + 1 reaches 2^bits); 4 + 2 + 16 = 22 B = 5.5 bpw */
struct qc_block_HQ4 {
	uint16_t d[2];   /* f32 scale bits */
	int16_t z;       /* zero point in code units */
	uint8_t qs[16];  /* (16) byte j: element j low nibble, element j+16 high nibble */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_HQ4) == 4 + 2 + 16, "hq4 block");

/* x = d*(q - z), q 8-bit unsigned (signed int8 sources store q+128, z+128);
 * 4 + 2 + 32 = 38 B = 9.5 bpw */
struct qc_block_HQ8 {
	uint16_t d[2];   /* f32 scale bits */
	int16_t z;       /* zero point in code units */
	uint8_t qs[32];  /* (32) codes */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_HQ8) == 4 + 2 + 32, "hq8 block");

/* x = qc_bnb_nf4[q]*absmax (bitsandbytes NF4); 4 + 16 = 20 B = 5 bpw */
struct qc_block_BNB_NF4 {
	uint16_t d[2];   /* f32 absmax bits (double quant resolved at convert time) */
	uint8_t qs[16];  /* (16) byte j: element 2j high nibble, 2j+1 low (bnb order) */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_BNB_NF4) == 4 + 16, "bnb_nf4 block");

/* x = qc_bnb_fp4[q]*absmax (bitsandbytes FP4); 4 + 16 = 20 B = 5 bpw */
struct qc_block_BNB_FP4 {
	uint16_t d[2];   /* f32 absmax bits */
	uint8_t qs[16];  /* (16) as bnb_nf4 */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_BNB_FP4) == 4 + 16, "bnb_fp4 block");

/* x = e4m3(q)*d (OCP FP8 E4M3FN, no infinities); 4 + 32 = 36 B = 9 bpw */
struct qc_block_F8E4M3 {
	uint16_t d[2];   /* f32 scale bits */
	uint8_t qs[32];  /* (32) e4m3fn codes */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_F8E4M3) == 4 + 32, "f8_e4m3 block");

/* x = e2m1(q)*d[j/16], d = f32(e4m3 group scale)/global_scale (NVFP4, group 16);
 * 2*4 + 16 = 24 B = 6 bpw */
struct qc_block_NVFP4 {
	uint16_t d[4];   /* two f32 scale bits: elements 0..15, 16..31 */
	uint8_t qs[16];  /* (16) byte j: element 2j low nibble, 2j+1 high */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_NVFP4) == 8 + 16, "nvfp4 block");

/* W8A8 FP8: weights x = e4m3(q)*d as f8_e4m3; a is the activation scale of the
 * whole matrix: > 0 a static input_scale, 0 dynamic per token (quant/act_fp8.h).
 * Every block of a matrix carries the same a. 4 + 4 + 32 = 40 B = 10 bpw (the sm89+
 * layout fp8_rows keeps the codes, one d per row and one a: 8 bpw) */
struct qc_block_F8A8 {
	uint16_t d[2];   /* f32 weight scale bits */
	uint16_t a[2];   /* f32 activation scale bits (0: dynamic per token) */
	uint8_t qs[32];  /* (32) e4m3fn codes */
};
QC_STATIC_ASSERT(sizeof(struct qc_block_F8A8) == 8 + 32, "f8_a8 block");

/* Every qtype.def row has a struct of exactly block_bytes and agreeing elems. */
#define QC_TYPE(E, id, name, be, bb, fam, q, tol) \
	QC_STATIC_ASSERT(sizeof(struct qc_block_##E) == (bb), "qblock.h and qtype.def disagree on " #E " bytes"); \
	QC_STATIC_ASSERT(QC_BLOCK_ELEMS_##E == (be), "qblock.h and qtype.def disagree on " #E " elems");
#include "qtype.def"
#undef QC_TYPE

#endif
