/* pdl.cu — the switch of pdl.h (a plain int: set once at backend create, read at
 * every launch on the same host thread or after it). */
#include "pdl.h"

static int pdl_on;

extern "C" void qc_cuda_pdl_set(int on)
{
	pdl_on = on ? 1 : 0;
}

extern "C" int qc_cuda_pdl_on(void)
{
	return pdl_on;
}
