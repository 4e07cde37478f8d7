#!/bin/sh
# tests/bench_convert.sh — conversion throughput and peak RSS on a >= 4 GB GGUF.
# Usage: make bench [BENCH_DIR=/tmp/qc-bench] [BENCH_TYPES="q8_0 f16"] [BENCH_RUNS=3]
# Generates the model once per type (mkgguf --preset bench4g), then converts it
# BENCH_RUNS times to a fresh output (replacing an existing multi-GB file would time
# the filesystem freeing it), printing input GB/s and peak RSS for each run.
set -e
BIN=${QC_BIN:-build/bin}
DIR=${BENCH_DIR:-/tmp/qc-bench}
TYPES=${BENCH_TYPES:-q8_0 f16}
RUNS=${BENCH_RUNS:-3}
mkdir -p "$DIR"
echo "| input | size | run | wall s | input GB/s | peak RSS MB |"
echo "|---|---|---|---|---|---|"
for t in $TYPES; do
	in="$DIR/bench4g-$t.gguf"
	[ -f "$in" ] || "$BIN/mkgguf" --preset bench4g --type "$t" -o "$in" >/dev/null
	size=$(stat -c %s "$in")
	cat "$in" >/dev/null # warm the page cache once, so every run reads from memory alike
	for r in $(seq 1 "$RUNS"); do
		rm -f "$DIR/out.qb"; sync
		/usr/bin/time -f "%e %M" -o "$DIR/time.txt" "$BIN/qconvert" "$in" --target sm90 -o "$DIR/out.qb" -q
		read -r wall rss < "$DIR/time.txt"
		awk -v n="$(basename "$in")" -v s="$size" -v r="$r" -v w="$wall" -v m="$rss" \
			'BEGIN { printf "| %s | %.2f GB | %d | %.2f | %.2f | %.1f |\n", n, s/1e9, r, w, s/1e9/w, m/1024 }'
	done
	"$BIN/qconvert" verify "$DIR/out.qb" >/dev/null
	rm -f "$DIR/out.qb"
done
