#!/bin/sh
# tools/gpu_check.sh — run on the GPU machine (the device tool), from the repo root,
# with .gpu/payload.tar.xz from tools/gpu_pack.sh carried: unpacks it, then runs the
# kernel tests (plus compute-sanitizer memcheck/racecheck on quick shapes), the
# tensor-parallel test (test_tp, after test_e2e), the end-to-end tests against the CPU backend (fixtures + a few mkgguf models, + SmolLM2
# when its .gpu/smollm2.gguf.part-NN were carried), and
# qrun --device cuda on two fixtures (one again with --kv-dtype fp8).
# Logs go to $OUT (or ./gpu-logs). Exit status: nonzero when a test failed.
# Where the build environment exists on the GPU machine, `make test-gpu` does
# the same from source.
set -u
OUT=${OUT:-gpu-logs}
mkdir -p "$OUT"
P=/tmp/qc-payload
rm -rf "$P" && mkdir -p "$P" && tar xJf .gpu/payload.tar.xz -C "$P" || exit 1
export LD_LIBRARY_PATH="$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export QC_FIXTURES="$P/fixtures"
export PATH="$PATH:/usr/local/cuda/bin"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
# models no fixture covers (qwen2 biases, qwen3, MoE variants, rope scalings)
G=/tmp/qc-gpu-gen
rm -rf "$G"
sh tests/gpu/gen_models.sh "$P/bin/mkgguf" "$G" || exit 1
export QC_GPU_GEN="$G"
# SmolLM2 for test_e2e, when the parts tools/gpu_pack.sh split it into were carried
# (all of them: the joined file must have fetch_smollm2.sh's sha256)
if ls .gpu/smollm2.gguf.part-* >/dev/null 2>&1; then
	sm=$P/models/SmolLM2-135M-Instruct.Q4_1.gguf
	want=$(sed -n 's/^gguf_sha=//p' tools/fetch_smollm2.sh)
	mkdir -p "$P/models" && cat .gpu/smollm2.gguf.part-* >"$sm"
	if [ "$(sha256sum "$sm" | cut -d' ' -f1)" = "$want" ]; then
		export QC_MODELS="$P/models"
	else
		echo "SmolLM2: the carried parts do not join to sha256 $want (one missing?): test_e2e skips it"
		rm -f "$sm"
	fi
fi
rc=0
"$P/bin/test_kernels" >"$OUT/kernels.log" 2>&1 || rc=1
tail -n 3 "$OUT/kernels.log"; grep -E "FAIL|FIRST BAD" "$OUT/kernels.log" | head -n 20
"$P/bin/test_e2e" >"$OUT/e2e.log" 2>&1 || rc=1
cat "$OUT/e2e.log" | grep -v "^  .*equal;" | tail -n 40
# tensor parallelism: NCCL on every visible GPU, the vocab-range embedding, --tp end
# to end through qconvert / qrun (NCCL from $QC_NCCL_LIB, e.g. the nvidia-nccl-cu13
# wheel's lib folder, or the loader's path)
QC_BIN="$P/bin" "$P/bin/test_tp" >"$OUT/tp.log" 2>&1 || rc=1
grep -E "FAIL|SKIP|rank|NCCL|--tp|passed" "$OUT/tp.log" | tail -n 40
for tool in memcheck racecheck; do
	QC_GPU_TEST_QUICK=1 compute-sanitizer --tool $tool --error-exitcode 3 "$P/bin/test_kernels" >"$OUT/sanitizer-$tool.log" 2>&1
	s=$?
	echo "compute-sanitizer $tool: exit $s; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer-$tool.log" | tail -n 1)"
	[ $s -eq 0 ] || rc=1
done
# the marlin GEMM/GEMV checks, when the payload carries them (QC_PACK_EXTRA=
# build-gpu-mrl/marlin_gemm_test, built by tools/gpu_marlin.sh --build-only):
# every check, then the decode GEMVs under both sanitizer tools
if [ -x "$P/bin/marlin_gemm_test" ]; then
	"$P/bin/marlin_gemm_test" --check >"$OUT/marlin.log" 2>&1 || rc=1
	tail -n 1 "$OUT/marlin.log"; grep FAIL "$OUT/marlin.log" | head -n 10
	for tool in memcheck racecheck; do
		QC_GPU_TEST_QUICK=1 compute-sanitizer --tool $tool --error-exitcode 3 "$P/bin/marlin_gemm_test" --gemv-check \
			>"$OUT/sanitizer-gemv-$tool.log" 2>&1
		s=$?
		echo "compute-sanitizer $tool (marlin GEMVs): exit $s; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer-gemv-$tool.log" | tail -n 1)"
		[ $s -eq 0 ] || rc=1
	done
fi
for f in gguf-quant/tiny-llama-256-Q4_K_M-mix.gguf gguf-quant/tiny-moe-256-Q8_0.gguf; do
	"$P/bin/qrun" "$QC_FIXTURES/$f" -p "Once upon a time" -n 24 --device cuda 2>&1 | tail -n 4
done
# the fp8 K/V pool on the device (its closing line gives the pool's tokens)
"$P/bin/qrun" "$QC_FIXTURES/gguf-quant/tiny-llama-256-Q4_K_M-mix.gguf" -p "Once upon a time" -n 24 --device cuda \
	--kv-dtype fp8 2>&1 | tail -n 4
exit $rc
