/* hfq_emit.c — the dense intermediate of hfq_scheme.h into rows of the qtype.def
 * encodings the HF schemes normalize to (hq4, hq8, bnb_nf4, bnb_fp4, f8_e4m3,
 * nvfp4; layouts in quant/qblock.h). Codes are copied bit for bit, scales stored
 * as f32: nothing is re-quantized here.
 * Non-goals: deciding codes or scales (the scheme decoders do).
 */
#include "hfq_scheme.h"

#include <stdlib.h>
#include <string.h>

#include "dequant_hfq.h"
#include "cursor.h"

int qc_hfq_dense_new(struct qc_hfq_dense *dn, int64_t n, int64_t k, int per, bool zeros, const char *file,
		     const char *tensor, struct qc_err *err)
{
	memset(dn, 0, sizeof *dn);
	uint64_t nk;
	if (n <= 0 || k <= 0)
		return qc_err_set(err, QC_EFORMAT, file, tensor, -1, "empty weight (%lld x %lld)", (long long)n,
				  (long long)k);
	if (k % 32)
		return qc_err_set(err, QC_EUNSUPPORTED, file, tensor, -1,
				  "in_features %lld is not a multiple of 32 (the normalized blocks hold 32)",
				  (long long)k);
	if (!qc_mul_ok((uint64_t)n, (uint64_t)k, &nk) || nk > (1ull << 40))
		return qc_err_set(err, QC_ERANGE, file, tensor, -1, "weight too large");
	dn->n = n;
	dn->k = k;
	dn->codes = malloc(nk);
	dn->d = malloc(nk / (uint64_t)per * sizeof *dn->d);
	dn->z = zeros ? malloc(nk / 32 * sizeof *dn->z) : NULL;
	if (!dn->codes || !dn->d || (zeros && !dn->z)) {
		qc_hfq_dense_free(dn);
		return qc_err_set(err, QC_ENOMEM, file, tensor, -1, "out of memory");
	}
	return QC_OK;
}

void qc_hfq_dense_free(struct qc_hfq_dense *dn)
{
	free(dn->codes);
	free(dn->d);
	free(dn->z);
	free(dn->perm);
	memset(dn, 0, sizeof *dn);
}

/* One 32-element block b of the dense matrix into dst (bytes of the type's block). */
typedef void (*emit_fn)(const struct qc_hfq_dense *dn, uint64_t b, uint8_t *dst);

static void emit_hq4(const struct qc_hfq_dense *dn, uint64_t b, uint8_t *dst)
{
	struct qc_block_HQ4 blk;
	const uint8_t *c = dn->codes + 32 * b;
	qc_hfq_put_f32(blk.d, dn->d[b]);
	blk.z = dn->z[b];
	for (int j = 0; j < 16; j++)
		blk.qs[j] = (uint8_t)((c[j] & 0xf) | (c[j + 16] << 4));
	memcpy(dst, &blk, sizeof blk);
}

static void emit_hq8(const struct qc_hfq_dense *dn, uint64_t b, uint8_t *dst)
{
	struct qc_block_HQ8 blk;
	qc_hfq_put_f32(blk.d, dn->d[b]);
	blk.z = dn->z[b];
	memcpy(blk.qs, dn->codes + 32 * b, 32);
	memcpy(dst, &blk, sizeof blk);
}

/* bnb order: element 2j in the high nibble (what bnb's packed bytes already are). */
static void emit_bnb4(const struct qc_hfq_dense *dn, uint64_t b, uint8_t *dst)
{
	struct qc_block_BNB_NF4 blk;
	const uint8_t *c = dn->codes + 32 * b;
	qc_hfq_put_f32(blk.d, dn->d[b]);
	for (int j = 0; j < 16; j++)
		blk.qs[j] = (uint8_t)((c[2 * j] << 4) | (c[2 * j + 1] & 0xf));
	memcpy(dst, &blk, sizeof blk);
}

static void emit_f8(const struct qc_hfq_dense *dn, uint64_t b, uint8_t *dst)
{
	struct qc_block_F8E4M3 blk;
	qc_hfq_put_f32(blk.d, dn->d[b]);
	memcpy(blk.qs, dn->codes + 32 * b, 32);
	memcpy(dst, &blk, sizeof blk);
}

static void emit_f8a8(const struct qc_hfq_dense *dn, uint64_t b, uint8_t *dst)
{
	struct qc_block_F8A8 blk;
	qc_hfq_put_f32(blk.d, dn->d[b]);
	qc_hfq_put_f32(blk.a, dn->a);
	memcpy(blk.qs, dn->codes + 32 * b, 32);
	memcpy(dst, &blk, sizeof blk);
}

static void emit_nvfp4(const struct qc_hfq_dense *dn, uint64_t b, uint8_t *dst)
{
	struct qc_block_NVFP4 blk;
	const uint8_t *c = dn->codes + 32 * b;
	qc_hfq_put_f32(blk.d, dn->d[2 * b]);
	qc_hfq_put_f32(blk.d + 2, dn->d[2 * b + 1]);
	for (int j = 0; j < 16; j++)
		blk.qs[j] = (uint8_t)((c[2 * j] & 0xf) | (c[2 * j + 1] << 4));
	memcpy(dst, &blk, sizeof blk);
}

/* The block writer of each HF target type (from codes + scales, not floats, hence
 * not qtype.def's quant_fn); a type missing here is a caller bug. */
static const struct {
	enum qc_type type;
	emit_fn fn;
	int max_code;              /* codes above this do not fit the block */
} emitters[] = {
	{ QC_TYPE_HQ4, emit_hq4, 15 },       { QC_TYPE_HQ8, emit_hq8, 255 },
	{ QC_TYPE_BNB_NF4, emit_bnb4, 15 },  { QC_TYPE_BNB_FP4, emit_bnb4, 15 },
	{ QC_TYPE_F8E4M3, emit_f8, 255 },    { QC_TYPE_NVFP4, emit_nvfp4, 15 },
	{ QC_TYPE_F8A8, emit_f8a8, 255 },
};

int qc_hfq_emit(struct qc_hfq_dense *dn, enum qc_type type, struct qc_hfq_tensor *out, struct qc_err *err)
{
	emit_fn fn = NULL;
	int max_code = 0;
	for (size_t i = 0; i < sizeof emitters / sizeof emitters[0]; i++) {
		if (emitters[i].type == type) {
			fn = emitters[i].fn;
			max_code = emitters[i].max_code;
		}
	}
	QC_ASSERT(fn != NULL);
	const uint64_t nk = (uint64_t)dn->n * (uint64_t)dn->k, nb = nk / 32;
	for (uint64_t i = 0; i < nk; i++)
		if (dn->codes[i] > max_code) /* decoders mask codes; a wider one would decode wrong */
			return qc_err_set(err, QC_EFORMAT, NULL, NULL, -1, "code %d at element %llu does not fit %s",
					  dn->codes[i], (unsigned long long)i, qc_types[type].name);
	uint64_t size;
	if (!qc_mul_ok(nb, (uint64_t)qc_types[type].block_bytes, &size))
		return qc_err_set(err, QC_ERANGE, NULL, NULL, -1, "weight too large");
	uint8_t *data = malloc(size);
	if (!data)
		return qc_err_set(err, QC_ENOMEM, NULL, NULL, -1, "out of memory");
	for (uint64_t b = 0; b < nb; b++)
		fn(dn, b, data + b * (uint64_t)qc_types[type].block_bytes);
	out->type = type;
	out->n_rows = dn->n;
	out->n_cols = dn->k;
	out->data = data;
	out->size = size;
	out->act_perm = dn->perm;
	dn->perm = NULL;
	return QC_OK;
}
