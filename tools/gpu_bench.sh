#!/bin/sh
# tools/gpu_bench.sh — the GPU baseline of docs/bench.md on a Llama-3-8B-shape model
# with random weights: for each --type (default "q4_0 q8_0 f16"; $QC_BENCH_TYPES),
# mkgguf --preset llama3-8b writes the GGUF, qconvert converts it for each target of
# $QC_BENCH_TARGETS (default "sm90": Marlin tensor-core layouts for q4_0/q8_0;
# "cpu" keeps ggml blocks, read by the fused-dequant GEMV), and qrun bench --device cuda
# measures batch-1 pp512 + tg128, then decode with 64 and 256 concurrent requests
# (128 prompt + 128 generated tokens each), and sampled decode at 64 (top-k 40 +
# top-p, then top-p alone). Models live in $QC_BENCH_DIR (default
# /tmp/qc-bench) and are deleted after each type. Binaries from $QC_BIN (make
# bench-gpu) or the unpacked payload (tools/gpu_check.sh). Type q4_k_m is made
# from the F16 GGUF by llama.cpp's llama-quantize ($LLAMA_QUANTIZE; built from a
# fetched snapshot, never committed): without it that type is skipped, saying so.
# First, tests/gpu/bench_gemv ($QC_BENCH_GEMV) times the GGML-layout GEMV alone.
set -u
BIN=${QC_BIN:-/tmp/qc-payload/bin}
D=${QC_BENCH_DIR:-/tmp/qc-bench}
OUT=${OUT:-gpu-logs}
mkdir -p "$D" "$OUT"
[ -d /tmp/qc-payload/lib ] && export LD_LIBRARY_PATH="/tmp/qc-payload/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# the GGML-layout GEMV per type and shape first (tests/gpu/bench_gemv; ~30 s)
GEMV=${QC_BENCH_GEMV:-$BIN/bench_gemv}
if [ -x "$GEMV" ]; then "$GEMV" | tee "$OUT/bench_gemv.txt"; else echo "bench_gemv not found ($GEMV): skipped"; fi
for t in ${QC_BENCH_TYPES:-q4_0 q8_0 f16}; do
	echo "== llama3-8b $t"
	s=$(date +%s)
	case $t in
	q4_k_m|Q4_K_M)
		if [ -z "${LLAMA_QUANTIZE:-}" ] || [ ! -x "$LLAMA_QUANTIZE" ]; then
			echo "skipped: set LLAMA_QUANTIZE to llama.cpp's llama-quantize"; continue
		fi
		"$BIN/mkgguf" --preset llama3-8b --type f16 -o "$D/f16.gguf" >/dev/null || exit 1
		"$LLAMA_QUANTIZE" "$D/f16.gguf" "$D/m.gguf" Q4_K_M >"$OUT/llama-quantize.log" 2>&1 ||
			{ tail -n 5 "$OUT/llama-quantize.log"; exit 1; }
		rm -f "$D/f16.gguf" ;;
	*)	"$BIN/mkgguf" --preset llama3-8b --type "$t" -o "$D/m.gguf" >/dev/null || exit 1 ;;
	esac
	echo "generated in $(( $(date +%s) - s )) s"
	for tg in ${QC_BENCH_TARGETS:-sm90}; do
		s=$(date +%s)
		"$BIN/qconvert" "$D/m.gguf" --target "$tg" -o "$D/m.qb" >/dev/null || exit 1
		echo "-- target $tg: converted in $(( $(date +%s) - s )) s, $(du -h "$D/m.qb" | cut -f1)"
		"$BIN/qrun" bench "$D/m.qb" --device cuda --requests 1 --concurrency 1 --in 512 --out 128 2>&1 |
			grep -E "cuda:|prompt:|decode:|inter-token|error|qrun:"
		for c in ${QC_BENCH_CONC:-64 256}; do
			"$BIN/qrun" bench "$D/m.qb" --device cuda --requests $c --concurrency $c --in 128 --out 128 2>&1 |
				grep -E "concurrency|prompt:|decode:|total:|error|qrun:"
		done
		# sampled decode at 64: top-k (candidates selected on the device) vs top-p
		# alone (every row crosses to the host); QC_BENCH_SAMPLED=0 skips it
		if [ "${QC_BENCH_SAMPLED:-1}" != 0 ]; then
			for smp in "--temp 0.8 --top-k 40 --top-p 0.95" "--temp 0.8 --top-p 0.95"; do
				echo "sampled @64: $smp"
				"$BIN/qrun" bench "$D/m.qb" --device cuda --requests 64 --concurrency 64 --in 128 --out 128 \
					$smp 2>&1 | grep -E "decode:|error|qrun:"
			done
		fi
		rm -f "$D/m.qb"
	done
	rm -f "$D/m.gguf"
done
