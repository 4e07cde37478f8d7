/* tools/attn_stamps_env.c — linked into qrun_stamps only (tools/attn_stamps.sh): the
 * file the split attention's phase stamps go to, from $QC_ATTN_STAMPS, read here so
 * that the kernel file reads no environment. */
#include <stdlib.h>

extern const char *qc_attn_stamps_path;

__attribute__((constructor)) static void attn_stamps_env(void)
{
	qc_attn_stamps_path = getenv("QC_ATTN_STAMPS");
}
