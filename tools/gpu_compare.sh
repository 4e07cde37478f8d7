#!/bin/sh
# tools/gpu_compare.sh — ours against llama.cpp, side by side, on one GPU in one run.
#
# On the GPU machine (the device tool; or `make bench-gpu-compare` where this project
# builds): builds llama.cpp's CUDA tools from the source snapshot at $LLAMA_SRC (a
# fetched ggerganov/llama.cpp tree, never committed; or give $LLAMA_BIN, a folder
# that already has llama-bench, llama-batched-bench and llama-quantize), measures the
# device copy rate (tests/gpu/bench_copy), then for each model of $QC_CMP_MODELS
# (default "q4_0 q4_k_m q8_0 small"):
#   q4_0, q8_0  mkgguf --preset llama3-8b --type T (Llama-3-8B shape, random weights)
#   q4_k_m      the same shape in F16, then llama-quantize Q4_K_M
#   small       SmolLM2-135M's shape in Q8_0 (30 x 576, 9/3 heads, ff 1536, vocab 49152, tied)
#   moe         4 layers of Mixtral-8x7B's shape in Q4_0 (8 experts, 2 used; issue #18 item 5)
# converts it (qconvert --target $QC_CMP_TARGET, default sm90) and measures, on the
# same GGUF, pp512 and tg128 (ours: qrun bench --requests 1 --in 512 --out 128;
# llama.cpp: llama-bench -p 512 -n 128, best of -fa 0 and 1) and decode at each of
# $QC_CMP_CONC (default "64 256") concurrent requests of 128 in / 128 out (ours: qrun
# bench --requests C --concurrency C; llama.cpp: llama-batched-bench's S_TG, best of
# -fa 0 and 1). Weight bytes streamed per token: every tensor of the bundle but the
# token embedding (gathered, not streamed) unless the output matrix is tied to it.
# Roofline % = bytes per token x tg128 / copy rate.
# Prints one markdown table last (also $OUT/compare.md, raw rows in $OUT/compare.tsv).
# A/B on the same bundles: $QC_CMP_AB, space-separated LABEL@ENV@QRUN entries (ENV one
# VAR=VALUE or -), each measured for tg128 like ours; $OUT/ab.tsv and a second table.
# $QC_CMP_CONC empty: no concurrent-decode columns (and no llama-batched-bench).
# Binaries from $QC_BIN (default: the payload tools/gpu_pack.sh makes, unpacked at
# /tmp/qc-payload/bin); models in $QC_CMP_DIR (default /tmp/qc-cmp), each deleted
# after its row. Exit 1 when a step fails (the table still prints what was measured).
set -u
BIN=${QC_BIN:-/tmp/qc-payload/bin}
D=${QC_CMP_DIR:-/tmp/qc-cmp}
OUT=${OUT:-gpu-logs}
TARGET=${QC_CMP_TARGET:-sm90}
CONC=${QC_CMP_CONC-64 256}
mkdir -p "$D" "$OUT"
[ -d /tmp/qc-payload/lib ] && export LD_LIBRARY_PATH="/tmp/qc-payload/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
LOG="$OUT/compare.log"
: >"$LOG"
TSV="$OUT/compare.tsv"
rc=0
say() { echo "$*" | tee -a "$LOG"; }

# ---- llama.cpp, built here from the snapshot ------------------------------------------
if [ -z "${LLAMA_BIN:-}" ]; then
	[ -n "${LLAMA_SRC:-}" ] && [ -f "$LLAMA_SRC/CMakeLists.txt" ] ||
		{ echo "gpu_compare: set LLAMA_SRC to a llama.cpp source tree (or LLAMA_BIN)"; exit 2; }
	LB=${LLAMA_BUILD:-/tmp/llama-build}
	s=$(date +%s)
	# sm_90 only (the card here); curl off (nothing can be fetched); release build
	cmake -S "$LLAMA_SRC" -B "$LB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
		-DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF >>"$LOG" 2>&1 &&
	cmake --build "$LB" -j"$(nproc)" --target llama-bench llama-batched-bench llama-quantize >>"$LOG" 2>&1 ||
		{ tail -n 30 "$LOG"; echo "gpu_compare: llama.cpp build failed"; exit 1; }
	LLAMA_BIN="$LB/bin"
	say "llama.cpp $(git -C "$LLAMA_SRC" rev-parse --short HEAD 2>/dev/null || cat "$LLAMA_SRC/.snapshot" 2>/dev/null || echo '?') built in $(( $(date +%s) - s )) s"
fi

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
R=$("$BIN/bench_copy" 2>>"$LOG" | tee -a "$LOG" | sed -n 's/^copy rate (read + write): \([0-9.]*\) GB\/s$/\1/p')
[ -n "$R" ] || { echo "gpu_compare: bench_copy failed (see $LOG)"; exit 1; }
say "device: $gpu; copy rate (read + write): $R GB/s; $(date -u '+%Y-%m-%d %H:%M UTC')"
printf 'model\tbytes\tours_pp\tllama_pp\tours_tg\tllama_tg' >"$TSV"
printf 'model\tbytes\tours' >"$OUT/ab.tsv"
for ab in ${QC_CMP_AB:-}; do printf '\t%s' "${ab%%@*}" >>"$OUT/ab.tsv"; done
echo >>"$OUT/ab.tsv"
for c in $CONC; do printf '\tours_%s\tllama_%s' "$c" "$c" >>"$TSV"; done
echo >>"$TSV"

# qrun bench's "prompt:" / "decode:" tokens per second
ours() { # $1 bundle, $2 requests, $3 in, $4 out -> "pp tg"
	"$BIN/qrun" bench "$1" --device cuda --requests "$2" --concurrency "$2" --in "$3" --out "$4" >"$D/ours.txt" 2>&1
	cat "$D/ours.txt" >>"$LOG"
	pp=$(sed -n 's/^prompt: .* = \([0-9.]*\) tokens\/s$/\1/p' "$D/ours.txt")
	tg=$(sed -n 's/^decode: .* = \([0-9.]*\) tokens\/s$/\1/p' "$D/ours.txt")
	echo "${pp:-nan} ${tg:-nan}"
}

for m in ${QC_CMP_MODELS:-q4_0 q4_k_m q8_0 small}; do
	say "== $m"
	s=$(date +%s)
	case $m in
	q4_0|q8_0) "$BIN/mkgguf" --preset llama3-8b --type "$m" -o "$D/m.gguf" >>"$LOG" 2>&1 ;;
	q4_k_m)	"$BIN/mkgguf" --preset llama3-8b --type f16 -o "$D/f16.gguf" >>"$LOG" 2>&1 &&
		"$LLAMA_BIN/llama-quantize" "$D/f16.gguf" "$D/m.gguf" Q4_K_M >>"$LOG" 2>&1
		r=$?; rm -f "$D/f16.gguf"; [ $r -eq 0 ] ;;
	small)	"$BIN/mkgguf" --preset tiny --type q8_0 --n-embd 576 --n-layer 30 --n-head 9 --n-head-kv 3 \
			--n-ff 1536 --n-vocab 49152 --tie-embeddings --ctx 8192 -o "$D/m.gguf" >>"$LOG" 2>&1 ;;
	moe)	"$BIN/mkgguf" --preset tiny-moe --arch mixtral --type q4_0 --n-embd 4096 --n-layer 4 --n-ff 14336 \
			--n-head 32 --n-head-kv 8 --n-vocab 32000 --n-expert 8 --n-expert-used 2 -o "$D/m.gguf" >>"$LOG" 2>&1 ;;
	*)	say "unknown model $m"; false ;;
	esac || { say "$m: generation failed"; rc=1; continue; }
	"$BIN/qconvert" "$D/m.gguf" --target "$TARGET" -q -o "$D/m.qb" >>"$LOG" 2>&1 ||
		{ say "$m: qconvert failed"; rc=1; rm -f "$D/m.gguf"; continue; }
	say "generated and converted in $(( $(date +%s) - s )) s"
	# weight bytes a one-request decode step streams (stacked experts: the used share)
	used=1; [ "$m" = moe ] && used=0.25
	bytes=$("$BIN/qconvert" inspect "$D/m.qb" --json | python3 -c '
import json, sys
t = json.load(sys.stdin)["tensors"]
used = float(sys.argv[1])
names = {x["name"] for x in t}
tied = "output.weight" not in names
print(int(sum(x["size"] * (used if "_exps" in x["name"] else 1) for x in t
              if x["name"] != "token_embd.weight" or tied)))' "$used")
	set -- $(ours "$D/m.qb" 1 512 128)
	o_pp=$1; o_tg=$2
	abrow="$m	$bytes	$o_tg"
	for ab in ${QC_CMP_AB:-}; do
		ab_env=$(echo "$ab" | cut -d@ -f2); ab_bin=$(echo "$ab" | cut -d@ -f3)
		[ "$ab_env" = "-" ] && ab_env=""
		env $ab_env "$ab_bin" bench "$D/m.qb" --device cuda --requests 1 --concurrency 1 --in 512 --out 128 \
			>"$D/ab.txt" 2>&1
		cat "$D/ab.txt" >>"$LOG"
		t=$(sed -n 's/^decode: .* = \([0-9.]*\) tokens\/s$/\1/p' "$D/ab.txt")
		abrow="$abrow	${t:-nan}"
	done
	echo "$abrow" >>"$OUT/ab.tsv"
	row="$m	$bytes	$o_pp"
	# llama.cpp: llama-bench, best of -fa 0/1 (3 repetitions each, its average)
	"$LLAMA_BIN/llama-bench" -m "$D/m.gguf" -ngl 99 -p 512 -n 128 -fa 0,1 -r 3 -o json >"$D/lb.json" 2>>"$LOG" ||
		{ say "$m: llama-bench failed"; rc=1; }
	cat "$D/lb.json" >>"$LOG"
	set -- $(python3 -c '
import json, sys
try: rows = json.load(open(sys.argv[1]))
except Exception: rows = []
pp = max([r["avg_ts"] for r in rows if r["n_prompt"] == 512 and r["n_gen"] == 0] or [float("nan")])
tg = max([r["avg_ts"] for r in rows if r["n_prompt"] == 0 and r["n_gen"] == 128] or [float("nan")])
print(pp, tg)' "$D/lb.json")
	row="$row	$1	$o_tg	$2"
	# decode at C concurrent requests; llama.cpp's batched bench needs C x 256 cells
	maxc=0; for c in $CONC; do [ "$c" -gt "$maxc" ] && maxc=$c; done
	npl=$(echo $CONC | tr ' ' ',')
	: >"$D/bb.txt"
	for fa in "" "-fa"; do
		[ -n "$npl" ] || break
		echo "-- llama-batched-bench $fa" >>"$D/bb.txt"
		"$LLAMA_BIN/llama-batched-bench" -m "$D/m.gguf" -ngl 99 -c $((maxc * 256)) -b 2048 -ub 512 \
			-npp 128 -ntg 128 -npl "$npl" $fa >>"$D/bb.txt" 2>>"$LOG" || { say "$m: llama-batched-bench $fa failed"; rc=1; }
	done
	cat "$D/bb.txt" >>"$LOG"
	for c in $CONC; do
		set -- $(ours "$D/m.qb" "$c" 128 128)
		# best S_TG t/s over the two runs for B = c (columns: PP TG B N_KV T_PP S_PP T_TG S_TG T S)
		l=$(awk -F'|' -v b="$c" '$2+0 == 128 && $3+0 == 128 && $4+0 == b { v = $9 + 0; if (v > best) best = v }
			END { if (best > 0) print best; else print "nan" }' "$D/bb.txt")
		row="$row	$2	$l"
	done
	echo "$row" >>"$TSV"
	say "$(echo "$row" | tr '\t' ' ')"
	rm -f "$D/m.gguf" "$D/m.qb"
done

python3 - "$TSV" "$R" "$gpu" "$CONC" >"$OUT/compare.md" <<'EOF'
import sys, math
tsv, R, gpu, conc = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4].split()
rows = [l.rstrip("\n").split("\t") for l in open(tsv)][1:]
def f(x):
    try: return float(x)
    except ValueError: return float("nan")
def ratio(a, b): return "-" if math.isnan(a) or math.isnan(b) or b == 0 else f"{a / b:.2f}x"
def num(x): return "-" if math.isnan(x) else f"{x:,.1f}"
print(f"{gpu}; copy rate (read + write) {R:.0f} GB/s; ours --target sm90 vs llama.cpp (best of -fa 0/1), tokens/s")
print()
head = "| model | weight GB/token | pp512 ours | llama.cpp | ratio | tg128 ours | llama.cpp | ratio | tg128 % of roofline |"
sep = "|---|---|---|---|---|---|---|---|---|"
for c in conc:
    head += f" @{c} ours | llama.cpp | ratio |"; sep += "---|---|---|"
print(head); print(sep)
for r in rows:
    v = [f(x) for x in r[1:]]
    b, opp, lpp, otg, ltg = v[:5]
    roof = "-" if math.isnan(otg) else f"{100.0 * b * otg / (R * 1e9):.0f}%"
    line = f"| {r[0]} | {b / 1e9:.3f} | {num(opp)} | {num(lpp)} | {ratio(opp, lpp)} | {num(otg)} | {num(ltg)} | {ratio(otg, ltg)} | {roof} |"
    for i in range(len(conc)):
        oc, lc = v[5 + 2 * i], v[6 + 2 * i]
        line += f" {num(oc)} | {num(lc)} | {ratio(oc, lc)} |"
    print(line)
EOF
if [ -n "${QC_CMP_AB:-}" ]; then
	python3 - "$OUT/ab.tsv" "$R" "$gpu" >>"$OUT/compare.md" <<'EOF'
import sys, math
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
R = float(sys.argv[2])
head = rows[0]
print()
print(f"A/B tg128 on the same bundles, {sys.argv[3]} (tokens/s; % of the copy-rate roofline)")
print()
print("| model | " + " | ".join(head[2:]) + " |")
print("|---|" + "---|" * (len(head) - 2))
for r in rows[1:]:
    b = float(r[1])
    cells = []
    for x in r[2:]:
        try:
            v = float(x); cells.append(f"{v:,.1f} ({100.0 * b * v / (R * 1e9):.0f}%)")
        except ValueError:
            cells.append("-")
    print(f"| {r[0]} | " + " | ".join(cells) + " |")
EOF
fi
cat "$OUT/compare.md"
exit $rc
