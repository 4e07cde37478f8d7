/* pdl.h — the process-wide switch for programmatic dependent launch (pdl.cuh).
 *
 * One switch, not a per-call flag: every kernel launch of our ops goes through
 * qc_launch, and a decode step must be all-or-nothing for the A/B measurement
 * (QC_CUDA_PDL, docs/cuda.md). The CUDA backend sets it once at create, from
 * its environment block, and only on devices of compute capability 9.0 or more;
 * off until then (tests that call ops directly run plain launches unless they
 * turn it on).
 */
#ifndef QC_CUDA_PDL_H
#define QC_CUDA_PDL_H

#ifdef __cplusplus
extern "C" {
#endif

void qc_cuda_pdl_set(int on);
int qc_cuda_pdl_on(void);

#ifdef __cplusplus
}
#endif

#endif
