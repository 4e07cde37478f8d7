/* qtype.c — the traits table, filled from qtype.def. */
#include "qtype.h"

#include <stddef.h>
#include <strings.h>

#include "dequant.h"
#include "cursor.h"

const struct qc_type_traits qc_types[QC_TYPE_COUNT] = {
#define QC_TYPE(E, id, nm, be, bb, fam, q, tol) \
	[id] = { .name = nm, .block_elems = be, .block_bytes = bb, .family = fam, \
		 .dequant_row = qc_dequant_row_##E, .quant_row = q, .nmse_tol = tol },
#include "qtype.def"
#undef QC_TYPE
};

bool qc_type_valid(uint32_t id)
{
	return id < QC_TYPE_COUNT && qc_types[id].block_elems > 0;
}

int qc_type_from_name(const char *name)
{
	for (int i = 0; i < QC_TYPE_COUNT; i++)
		if (qc_types[i].name && strcasecmp(qc_types[i].name, name) == 0)
			return i;
	return -1;
}

int qc_type_row_bytes(enum qc_type t, uint64_t n_elems, uint64_t *out_bytes)
{
	const struct qc_type_traits *tt = &qc_types[t];
	if (n_elems % (uint64_t)tt->block_elems)
		return QC_EFORMAT;
	if (!qc_mul_ok(n_elems / (uint64_t)tt->block_elems, (uint64_t)tt->block_bytes, out_bytes))
		return QC_ERANGE;
	return QC_OK;
}

double qc_type_bpw(enum qc_type t)
{
	return 8.0 * (double)qc_types[t].block_bytes / (double)qc_types[t].block_elems;
}
