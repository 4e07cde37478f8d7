#!/bin/sh
# bench_cpu.sh — CPU engine vs llama.cpp: prefill and decode tokens/s, same files, same threads.
#
# For each weight type in BENCH_TYPES (mkgguf --preset cpu-bench, 0.49 B parameters,
# generated into BENCH_DIR on first use) and each thread count in BENCH_THREADS:
# BENCH_RUNS rounds, each running `qrun bench` (1 request, BENCH_PP prompt tokens,
# BENCH_TG + 1 generated: the first comes out of the prefill) and then llama-bench
# (-p BENCH_PP -n BENCH_TG -r 1) back to back, so both see the same machine load.
# Prints every run and the medians: ours pp / tg, llama.cpp pp / tg, ratios
# (llama.cpp / ours). LLAMA_BENCH names llama-bench; without it only ours runs.
# BENCH_GGUF="a.gguf b.gguf": those models instead of the presets (converted once into
# BENCH_DIR), e.g. SmolLM2 Q4_1 and a Q4_K_M model (docs/bench.md). BENCH_TG_IN: the
# prompt our decode follows (default BENCH_PP; 1 matches llama-bench's tg, which
# generates from an empty context).
# Not a test: numbers go to docs/bench.md by hand.
set -eu

BIN=${QC_BIN:-build/bin}
DIR=${BENCH_DIR:-/tmp/qc-bench-cpu}
TYPES=${BENCH_TYPES:-"f32 q8_0"}
THREADS=${BENCH_THREADS:-"1 2"}
RUNS=${BENCH_RUNS:-3}
PP=${BENCH_PP:-128}
TG=${BENCH_TG:-32}
TG_IN=${BENCH_TG_IN:-$PP}
GGUFS=${BENCH_GGUF:-}
LB=${LLAMA_BENCH:-$(command -v llama-bench || true)}

mkdir -p "$DIR"
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "llama-bench: ${LB:-none}"
for t in ${GGUFS:-$TYPES}; do
	if [ -n "$GGUFS" ]; then
		g="$t"
		t=$(basename "$g" .gguf)
		q="$DIR/$t.qb"
	else
		g="$DIR/cpu-bench-$t.gguf"
		q="$DIR/cpu-bench-$t.qb"
		[ -f "$g" ] || "$BIN/mkgguf" --preset cpu-bench --type "$t" -o "$g" >/dev/null
	fi
	[ -f "$q" ] || "$BIN/qconvert" "$g" --target cpu -o "$q" >/dev/null
	for th in $THREADS; do
		: >"$DIR/ours.pp"; : >"$DIR/ours.tg"; : >"$DIR/ll.pp"; : >"$DIR/ll.tg"
		r=0
		while [ "$r" -lt "$RUNS" ]; do
			r=$((r + 1))
			"$BIN/qrun" bench "$q" --requests 1 --concurrency 1 --in "$PP" --out $((TG + 1)) \
				--threads "$th" >"$DIR/ours.out" 2>&1
			awk '/^prompt:/ { print $(NF-1) }' "$DIR/ours.out" >>"$DIR/ours.pp"
			if [ "$TG_IN" != "$PP" ]; then
				"$BIN/qrun" bench "$q" --requests 1 --concurrency 1 --in "$TG_IN" --out $((TG + 1)) \
					--threads "$th" >"$DIR/ours.out" 2>&1
			fi
			awk '/^decode:/ { print $(NF-1) }' "$DIR/ours.out" >>"$DIR/ours.tg"
			if [ -n "$LB" ]; then
				"$LB" -m "$g" -p "$PP" -n "$TG" -t "$th" -r 1 -o csv 2>/dev/null >"$DIR/ll.out"
				# columns found by name in the CSV header (n_prompt, n_gen, avg_ts)
				awk -F, -v pp="$PP" -v tg="$TG" -v fpp="$DIR/ll.pp" -v ftg="$DIR/ll.tg" '
					{ gsub(/"/, "") }
					NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
					$c["n_prompt"] == pp && $c["n_gen"] == 0 { print $c["avg_ts"] >> fpp }
					$c["n_prompt"] == 0 && $c["n_gen"] == tg { print $c["avg_ts"] >> ftg }' "$DIR/ll.out"
			fi
		done
		opp=$(median <"$DIR/ours.pp"); otg=$(median <"$DIR/ours.tg")
		echo "$t threads $th: ours pp$PP $(tr '\n' ' ' <"$DIR/ours.pp")| tg$TG $(tr '\n' ' ' <"$DIR/ours.tg")"
		if [ -n "$LB" ]; then
			lpp=$(median <"$DIR/ll.pp"); ltg=$(median <"$DIR/ll.tg")
			echo "$t threads $th: llama.cpp pp$PP $(tr '\n' ' ' <"$DIR/ll.pp")| tg$TG $(tr '\n' ' ' <"$DIR/ll.tg")"
			awk -v t="$t" -v th="$th" -v a="$opp" -v b="$lpp" -v c="$otg" -v d="$ltg" 'BEGIN {
				printf "| %s | %s | %.1f | %.1f | %.2fx | %.2f | %.2f | %.2fx |\n", t, th, a, b, b / a, c, d, d / c }'
		else
			echo "| $t | $th | $opp | - | - | $otg | - | - |"
		fi
	done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
