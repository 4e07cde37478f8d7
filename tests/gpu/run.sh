#!/bin/sh
# tests/gpu/run.sh — the GPU tests (make test-gpu): the mkgguf models of
# tests/gpu/gen_models.sh, then each binary through tests/run.sh,
# then the kernel test under compute-sanitizer memcheck and racecheck (quick shapes)
# when compute-sanitizer is on the PATH or in $CUDA_HOME/bin, then the marlin
# kernels (GEMM, decode GEMV, fp16 decode + cuBLAS) against their C reference
# (tools/gpu_marlin.sh --check: it builds only what it needs).
set -u
# the mkgguf models test_e2e needs besides the fixtures
QC_GPU_GEN=${QC_GPU_GEN:-/tmp/qc-gpu-gen-$$}
export QC_GPU_GEN
sh tests/gpu/gen_models.sh "${QC_BIN:-build/bin}/mkgguf" "$QC_GPU_GEN" || exit 1
sh tests/run.sh "$@"; rc=$?
if out=$(sh tools/gpu_marlin.sh --check 2>&1); then m=0; else m=1; rc=1; fi
printf '%s\n' "$out" | grep -E '^FAIL|marlin_gemm_test:' | tail -n 20
[ $m -eq 0 ] || echo "tools/gpu_marlin.sh --check: failed"
cs=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
for t in "$@"; do
	case "$t" in *test_kernels) ;; *) continue ;; esac
	if [ ! -x "$cs" ]; then echo "compute-sanitizer not found: skipped"; continue; fi
	for tool in memcheck racecheck; do
		out=$(QC_GPU_TEST_QUICK=1 "$cs" --tool $tool --error-exitcode 3 "$t" 2>&1); s=$?
		printf '%s\n' "$out" | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Error|passed, [0-9]+ failed' | tail -n 5
		if [ "$s" -ne 0 ]; then echo "compute-sanitizer $tool: exit $s"; rc=1; else echo "compute-sanitizer $tool: clean"; fi
	done
done
exit $rc
