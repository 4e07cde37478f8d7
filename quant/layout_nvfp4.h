/* layout_nvfp4.h — nvfp4_swz: NVFP4 matrices with CUTLASS sm100 block-scale tiles.
 *
 * Owns: whether an nvfp4 tensor fits, its sizes, the pack of one [N rows, K] slice
 * of nvfp4 ggml blocks and the exact unpack back to them. A slice (docs/layout-nvfp4.md):
 *   1. codes: N rows of K/2 bytes (E2M1, element 2j low nibble, K fastest);
 *   2. scales at N*K/2: the [N, K/16] E4M3 codes padded with 0 to Np = N rounded up
 *      to 128 rows, Kgp = K/16 rounded up to 4, cut into 128x4 tiles of 512 bytes,
 *      tile (r/128, c/4) at ((r/128)*(Kgp/4) + c/4)*512, scale (r, c) in its tile at
 *      byte (r%32)*16 + ((r%128)/32)*4 + c%4;
 *   3. global scales at N*K/2 + Np*Kgp: Np f32 g (rows >= N: 0); block scale d of
 *      the ggml block = fl(e4m3(code)/g) bit for bit.
 * Checked against: CUTLASS include/cutlass/detail/sm100_blockscaled_layout.hpp
 * (Sm1xxBlockScaledBasicChunk: 128-row x 4-scale atom, SfKMajorAtom row stride 16
 * for r%32 and 4 for r/32, scale stride 1; tile_to_shape with the K mode first) and
 * vLLM nvfp4_utils.swizzle_blockscale (pad to 128/4, reshape to (B, Np/128, 4, 32,
 * Kgp/4, 4), permute (0, 1, 4, 3, 2, 5), contiguous) — facts only.
 * Invariants: unpack(pack(x)) == x byte for byte; padding bytes are 0; every slice is
 * 16-byte aligned inside the tensor.
 * Non-goals: row ranges as matrices of their own (fused gate/up parts stay unfused),
 * re-quantization (a tensor whose scales are not e4m3/g exactly stays ggml).
 */
#ifndef QC_LAYOUT_NVFP4_H
#define QC_LAYOUT_NVFP4_H

#include <stdbool.h>
#include <stdint.h>

#include "layout.h"

#define QC_NVFP4_GROUP 16          /* elements per E4M3 block scale */
#define QC_NVFP4_TILE_ROWS 128     /* rows of one scale tile */
#define QC_NVFP4_TILE_SCALES 4     /* scales per row of one tile */
#define QC_NVFP4_TILE_BYTES 512

/* Sizes of one slice of N rows of K elements, in bytes unless named otherwise. */
struct qc_nvfp4_swz_geom {
	int64_t n, k;              /* rows, elements per row */
	int64_t np, kgp;           /* rows and scales per row of the padded scale matrix */
	uint64_t row_bytes;        /* K/2: code bytes of a row */
	uint64_t scale_off;        /* N*K/2 */
	uint64_t gs_off;           /* scale_off + Np*Kgp: the Np f32 global scales */
	uint64_t slice_bytes;      /* gs_off + 4*Np */
};

/* Whether a tensor of this type and shape can be stored as nvfp4_swz (nvfp4, 2+
 * dims, K a positive multiple of 32 up to 2^24, N up to 2^30). On false, *why (may
 * be NULL) gets a static sentence. */
bool qc_nvfp4_swz_fits(enum qc_type type, const int64_t ne[4], uint32_t n_dims, const char **why);

/* Geometry of one slice of ne[1] rows of ne[0] elements; QC_EFORMAT when the
 * type or shape does not fit. */
int qc_nvfp4_swz_geom(enum qc_type type, const int64_t ne[4], struct qc_nvfp4_swz_geom *g);

/* Byte offset of scale (r, c) inside the scale region of a slice whose padded
 * scale rows hold kgp scales (a multiple of 4). */
uint64_t qc_nvfp4_swz_scale_off(int64_t r, int64_t c, int64_t kgp);

/* K/2, the code bytes of a row (row r's codes start at r * this); QC_EFORMAT when
 * the type or ne0 does not fit. A slice is longer (qc_nvfp4_swz_bytes). */
int qc_nvfp4_swz_row_bytes(enum qc_type type, int64_t ne0, uint64_t *bytes);

/* Bytes of the whole tensor (ne[2]*ne[3] slices back to back); QC_EFORMAT on a
 * misfit, QC_ERANGE on overflow. */
int qc_nvfp4_swz_bytes(enum qc_type type, const int64_t ne[4], uint64_t *bytes);

/* Whether every slice of a tensor whose nvfp4 ggml rows are `rows` has block
 * scales of the form fl(e4m3/g) (one g per row), i.e. whether pack will succeed.
 * On false, *why (may be NULL) gets a static sentence. Caller checked the shape. */
bool qc_nvfp4_swz_data_fits(enum qc_type type, const int64_t ne[4], const uint8_t *rows, const char **why);

/* Pack one slice: rows = ne[1] nvfp4 ggml rows, out = slice_bytes. QC_EFORMAT
 * (naming the row) when a row's block scales are not fl(e4m3/g) for any g, or on a
 * misfit. */
int qc_nvfp4_swz_pack_slice(enum qc_type type, const int64_t ne[4], const uint8_t *rows, uint8_t *out,
			    struct qc_err *err);

/* Undo the layout for rows [row0, row0+n_rows) of the flattened [ne[1]*ne[2]*ne[3],
 * ne[0]] view, writing nvfp4 ggml blocks to out. QC_EFORMAT on a misfit,
 * QC_ERANGE for rows past the tensor. */
int qc_nvfp4_swz_unpack_rows(enum qc_type type, const int64_t ne[4], const uint8_t *packed, uint64_t row0,
			     uint64_t n_rows, uint8_t *out, struct qc_err *err);

#endif
