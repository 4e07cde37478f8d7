#!/bin/sh
# tools/gpu_tp.sh — tensor parallelism (issue #21): a Llama-3-70B-shape Q4_K_M model
# (random weights) on N GPUs, ours (qconvert --tp N, qrun bench --tp N) beside
# llama.cpp's own multi-GPU split (-sm layer, -sm row) on the same GPUs, one table.
#
# On the GPU machine (the device tool, a multi-GPU kind; binaries from the payload of
# tools/gpu_pack.sh, or $QC_BIN):
#   LLAMA_SRC=DIR sh tools/gpu_tp.sh     # DIR: a llama.cpp source snapshot (c392e50)
#   LLAMA_BIN=DIR sh tools/gpu_tp.sh     # DIR: llama-bench and llama-batched-bench built
# Steps, $QC_TP_STEPS (default "build copy gen convert ours llama"), each timed:
#   build    llama.cpp's CUDA tools from $LLAMA_SRC into $LLAMA_BUILD (default
#            /tmp/llama-build; sm_90, release); skipped when built there or LLAMA_BIN given
#   copy     one GPU's device copy rate (bench_copy: read + write GB/s)
#   gen      mkgguf --preset llama3-70b --type q4_k_m (42.5 GB; Q4_K/Q5_K/Q6_K blocks
#            written directly, all CPUs, no F16 file, no llama-quantize); $QC_TP_MODEL
#            replaces those mkgguf arguments (a smaller model to try the pipeline first)
#   convert  qconvert M.gguf --target $QC_TP_TARGET (default sm90) --tp N -o M.tpN.qb
#   ours     qrun bench M.tpN.qb --device cuda --tp N: 1 request (--in 512 --out 128),
#            then 64 concurrent (--in 128 --out 128)
#   llama    llama-bench -ngl 99 -sm layer,row -fa 0,1 -p 512 -n 128 -r $QC_TP_REPS (3),
#            and llama-batched-bench -ngl 99 -sm S -npp 128 -ntg 128 -npl 64 -c 16384,
#            without and with -fa, for each S of $QC_TP_BB_SM (default "layer")
# Files stay in $QC_TP_DIR (default /tmp/qc-tp): a step whose output is there is not
# redone, so a warm machine can run the steps in separate calls (each under 10 minutes),
# e.g. QC_TP_STEPS="build copy gen", then "convert ours", then "llama". Results
# accumulate in $QC_TP_DIR/results-tpN.txt; every call ends by printing the table of
# what is there (also $OUT/tp.md, default gpu-logs/). QC_TP_CLEAN=1 deletes the
# GGUF, the bundle and the results at the end.
# GPUs: N = $QC_TP_N (default: all visible); every program sees only the first N
# (CUDA_VISIBLE_DEVICES) and runs with NCCL_NVLS_ENABLE=0 (NVLink multicast off).
# Decode @64: tokens/s of 64 concurrent requests (ours: qrun bench's decode line;
# llama.cpp: llama-batched-bench's S_TG at B = 64), a step every 64 tokens.
# Per-GPU roofline % = weight bytes one GPU streams per decode step (ours: the
# largest rank's tensors less its token-embedding rows, which are gathered; llama.cpp:
# the GGUF's tensors less token_embd, / N) x steps per second / one GPU's copy rate.
# Under -sm layer the GPUs take turns, so its % is at most 100/N by construction.
# Exit 1 when a step fails (the table still prints what was measured).
set -u
BIN=${QC_BIN:-/tmp/qc-payload/bin}
D=${QC_TP_DIR:-/tmp/qc-tp}
OUT=${OUT:-gpu-logs}
TARGET=${QC_TP_TARGET:-sm90}
STEPS=${QC_TP_STEPS:-build copy gen convert ours llama}
MK_ARGS=${QC_TP_MODEL:-"--preset llama3-70b --type q4_k_m"}
mkdir -p "$D" "$OUT"
[ -d /tmp/qc-payload/lib ] && export LD_LIBRARY_PATH="/tmp/qc-payload/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0
LOG="$OUT/tp.log"
rc=0
say() { echo "$*" | tee -a "$LOG"; }
has_step() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
now() { date +%s; }

# ---- the GPUs: the first N visible ------------------------------------------------------
all=${CUDA_VISIBLE_DEVICES:-$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | tr -d ' ' | paste -sd, -)}
n_all=$(echo "$all" | tr ',' '\n' | grep -c .)
N=${QC_TP_N:-$n_all}
[ "$N" -ge 1 ] 2>/dev/null && [ "$N" -le "$n_all" ] ||
	{ echo "gpu_tp: QC_TP_N=$N, but $n_all GPUs are visible ($all)"; exit 2; }
CUDA_VISIBLE_DEVICES=$(echo "$all" | cut -d, -f1-"$N")
export CUDA_VISIBLE_DEVICES
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i "$(echo "$CUDA_VISIBLE_DEVICES" | cut -d, -f1)" | head -n 1)
RES="$D/results-tp$N.txt"
put() { echo "$1=$2" >>"$RES"; }          # key=value; the last one of a key wins
put gpu "$gpu"
put n "$N"
GGUF="$D/m.gguf"
QB="$D/m.tp$N.qb"
say "gpu_tp: $gpu x $N (CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES), steps: $STEPS, $(date -u '+%Y-%m-%d %H:%M UTC')"

# free bytes where $1 will be written
avail() { df -B1 --output=avail "$(dirname "$1")" | tail -n 1 | tr -d ' '; }

# ---- build: llama.cpp's CUDA tools ---------------------------------------------------------
if [ -z "${LLAMA_BIN:-}" ]; then
	LB=${LLAMA_BUILD:-/tmp/llama-build}
	LLAMA_BIN="$LB/bin"
	if has_step build && ! { [ -x "$LB/bin/llama-bench" ] && [ -x "$LB/bin/llama-batched-bench" ]; }; then
		[ -n "${LLAMA_SRC:-}" ] && [ -f "$LLAMA_SRC/CMakeLists.txt" ] ||
			{ echo "gpu_tp: set LLAMA_SRC to a llama.cpp source tree (or LLAMA_BIN)"; exit 2; }
		s=$(now)
		# sm_90 only (the cards here); curl off (nothing can be fetched); release build
		cmake -S "$LLAMA_SRC" -B "$LB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
			-DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF >>"$LOG" 2>&1 &&
		cmake --build "$LB" -j"$(nproc)" --target llama-bench llama-batched-bench >>"$LOG" 2>&1 ||
			{ tail -n 30 "$LOG"; echo "gpu_tp: llama.cpp build failed"; exit 1; }
		put time_build $(( $(now) - s ))
		say "build: llama.cpp $(git -C "$LLAMA_SRC" rev-parse --short HEAD 2>/dev/null || cat "$LLAMA_SRC/.snapshot" 2>/dev/null || echo '?') in $(( $(now) - s )) s"
	fi
fi

# ---- copy: one GPU's copy rate -----------------------------------------------------------
if has_step copy; then
	R=$("$BIN/bench_copy" 2>>"$LOG" | tee -a "$LOG" | sed -n 's/^copy rate (read + write): \([0-9.]*\) GB\/s$/\1/p')
	if [ -n "$R" ]; then put copy_rate "$R"; say "copy: $R GB/s (read + write) on one GPU"
	else say "copy: bench_copy failed (see $LOG)"; rc=1; fi
fi

# ---- gen: the GGUF, Q4_K_M blocks written directly --------------------------------------
if has_step gen || has_step convert || has_step llama; then
	# the plan (no file): tensor bytes, and the token embedding llama.cpp gathers
	if "$BIN/mkgguf" $MK_ARGS --dry-run >"$D/plan.txt" 2>>"$LOG"; then
		bytes=$(sed -n 's/^total \([0-9]*\) bytes.*/\1/p' "$D/plan.txt")
		embd=$(awk '$1 == "token_embd.weight" { print $6 }' "$D/plan.txt")
		put gguf_tensor_bytes "$bytes"
		put llama_step_bytes $((bytes - embd))
	else
		say "gen: mkgguf --dry-run failed (see $LOG)"; rc=1; bytes=0
	fi
fi
if has_step gen; then
	if [ -f "$GGUF" ] && [ "$(cat "$GGUF.args" 2>/dev/null)" = "$MK_ARGS" ]; then
		put model "$MK_ARGS"
		say "gen: $GGUF is there (delete it to regenerate)"
	elif [ "$(avail "$GGUF")" -lt $((bytes + bytes / 50)) ]; then
		say "gen: $(avail "$GGUF") bytes free in $D, the GGUF needs $bytes"; rc=1
	else
		rm -f "$GGUF" "$GGUF.args" "$QB"
		# a new model: earlier measurements are of another one
		grep -E '^(gpu|n|copy_rate|time_build|gguf_tensor_bytes|llama_step_bytes)=' "$RES" >"$RES.keep"
		mv "$RES.keep" "$RES"
		put model "$MK_ARGS"
		s=$(now)
		if "$BIN/mkgguf" $MK_ARGS -o "$GGUF" >>"$LOG" 2>&1; then
			t=$(( $(now) - s )); [ "$t" -gt 0 ] || t=1
			echo "$MK_ARGS" >"$GGUF.args"
			put time_gen "$t"
			say "gen: $(stat -c %s "$GGUF") bytes in $t s ($(awk -v b="$bytes" -v t="$t" 'BEGIN { printf "%.2f", b / t / 1e9 }') GB/s, $(nproc) CPUs)"
		else
			say "gen: mkgguf failed (see $LOG)"; rc=1
		fi
	fi
fi

# ---- convert: the --tp bundle -------------------------------------------------------------
if has_step convert; then
	if [ -f "$QB" ] && [ "$QB" -nt "$GGUF" ]; then
		say "convert: $QB is there"
	elif ! [ -f "$GGUF" ]; then
		say "convert: no $GGUF (run the gen step)"; rc=1
	elif [ "$(avail "$QB")" -lt $((bytes + bytes / 20)) ]; then
		say "convert: $(avail "$QB") bytes free in $D, the bundle needs about $bytes"; rc=1
	else
		s=$(now)
		if "$BIN/qconvert" "$GGUF" --target "$TARGET" --tp "$N" -q -o "$QB" >>"$LOG" 2>&1; then
			put time_convert $(( $(now) - s ))
			say "convert: --target $TARGET --tp $N in $(( $(now) - s )) s, $(stat -c %s "$QB") bytes"
		else
			say "convert: qconvert failed (see $LOG)"; rc=1
		fi
	fi
fi
if [ -f "$QB" ] && { has_step convert || has_step ours; }; then
	# bytes one rank streams per decode step: its tensors but the gathered embedding rows
	# (all of them when output.weight is tied to token_embd); the largest rank
	rb=$("$BIN/qconvert" inspect "$QB" --json 2>>"$LOG" | python3 -c '
import json, re, sys
t = json.load(sys.stdin)["tensors"]
ranks = {}
for x in t:
    m = re.match(r"tp(\d+)\.(.*)$", x["name"])
    if m:
        ranks.setdefault(int(m.group(1)), {})[m.group(2)] = x["size"]
best = 0
for names in ranks.values():
    tied = "output.weight" not in names
    best = max(best, sum(v for k, v in names.items() if k != "token_embd.weight" or tied))
print(best if ranks else "")' 2>>"$LOG")
	[ -n "$rb" ] && put rank_step_bytes "$rb"
fi

# ---- ours: qrun bench --tp N ---------------------------------------------------------------
ours() { # $1 requests (= concurrency), $2 in, $3 out -> "pp tg"
	"$BIN/qrun" bench "$QB" --device cuda --tp "$N" --requests "$1" --concurrency "$1" --in "$2" --out "$3" \
		>"$D/ours.txt" 2>&1
	cat "$D/ours.txt" >>"$LOG"
	pp=$(sed -n 's/^prompt: .* = \([0-9.]*\) tokens\/s$/\1/p' "$D/ours.txt")
	tg=$(sed -n 's/^decode: .* = \([0-9.]*\) tokens\/s$/\1/p' "$D/ours.txt")
	echo "${pp:-nan} ${tg:-nan}"
}
if has_step ours; then
	if [ -f "$QB" ]; then
		s=$(now)
		set -- $(ours 1 512 128)
		put ours_pp "$1"; put ours_tg "$2"
		[ "$2" = nan ] && { say "ours: qrun bench (1 request) failed: $(tail -n 3 "$D/ours.txt")"; rc=1; }
		set -- $(ours 64 128 128)
		put ours_tg64 "$2"
		[ "$2" = nan ] && { say "ours: qrun bench (64 requests) failed: $(tail -n 3 "$D/ours.txt")"; rc=1; }
		put time_ours $(( $(now) - s ))
		say "ours: $(( $(now) - s )) s (two runs, each loading the bundle)"
	else
		say "ours: no $QB (run the convert step)"; rc=1
	fi
fi

# ---- llama: llama-bench and llama-batched-bench on the same GGUF ---------------------------
if has_step llama; then
	if ! [ -f "$GGUF" ]; then
		say "llama: no $GGUF (run the gen step)"; rc=1
	elif ! [ -x "$LLAMA_BIN/llama-bench" ]; then
		say "llama: no $LLAMA_BIN/llama-bench (run the build step, or set LLAMA_BIN)"; rc=1
	else
		s=$(now)
		"$LLAMA_BIN/llama-bench" -m "$GGUF" -ngl 99 -sm layer,row -fa 0,1 -p 512 -n 128 -r "${QC_TP_REPS:-3}" \
			-o json >"$D/lb.json" 2>>"$LOG" || { say "llama: llama-bench failed (see $LOG)"; rc=1; }
		cat "$D/lb.json" >>"$LOG"
		python3 -c '
import json, sys
try: rows = json.load(open(sys.argv[1]))
except Exception: rows = []
for r in rows:
    fa = 1 if r["flash_attn"] in (True, 1, "1", "true") else 0
    k = "pp" if r["n_gen"] == 0 else "tg"
    print("lb_%s_fa%d_%s=%s" % (r["split_mode"], fa, k, r["avg_ts"]))' "$D/lb.json" >>"$RES"
		put time_llama_bench $(( $(now) - s ))
		say "llama: llama-bench in $(( $(now) - s )) s"
		for sm in ${QC_TP_BB_SM:-layer}; do
			for fa in 0 1; do
				s=$(now)
				flag=""; [ $fa = 1 ] && flag="-fa"
				"$LLAMA_BIN/llama-batched-bench" -m "$GGUF" -ngl 99 -sm "$sm" -c 16384 -b 2048 -ub 512 \
					-npp 128 -ntg 128 -npl 64 $flag >"$D/bb.txt" 2>>"$LOG" ||
					{ say "llama: llama-batched-bench -sm $sm $flag failed"; rc=1; }
				cat "$D/bb.txt" >>"$LOG"
				# S_TG t/s of the B = 64 row (columns: PP TG B N_KV T_PP S_PP T_TG S_TG T S)
				v=$(awk -F'|' '$2+0 == 128 && $3+0 == 128 && $4+0 == 64 { print $9 + 0 }' "$D/bb.txt" | tail -n 1)
				put "bb_${sm}_fa${fa}_tg64" "${v:-nan}"
				put "time_bb_${sm}_fa${fa}" $(( $(now) - s ))
				say "llama: llama-batched-bench -sm $sm -fa $fa in $(( $(now) - s )) s"
			done
		done
	fi
fi

# ---- the table ---------------------------------------------------------------------------------
python3 - "$RES" >"$OUT/tp.md" <<'EOF'
import math, sys
v = {}
for line in open(sys.argv[1]):
    k, _, x = line.rstrip("\n").partition("=")
    v[k] = x
def f(k):
    try: return float(v[k])
    except (KeyError, ValueError): return float("nan")
n = int(v.get("n", "1"))
R = f("copy_rate")
lstep = f("llama_step_bytes")
ostep = f("rank_step_bytes")
def num(x): return "-" if math.isnan(x) else f"{x:,.1f}"
def ratio(a, b): return "-" if math.isnan(a) or math.isnan(b) or b == 0 else f"{a / b:.2f}x"
def roof(bytes_, steps): return "-" if math.isnan(bytes_ * steps * R) else f"{100.0 * bytes_ * steps / (R * 1e9):.0f}%"
def gb(x): return "-" if math.isnan(x) else f"{x / 1e9:.3f} GB"
print(f"{v.get('gpu', '?')} x {n}; one GPU's copy rate (read + write) {num(R)} GB/s; "
      f"mkgguf {v.get('model', '?')} (random weights), GGUF tensors {gb(f('gguf_tensor_bytes'))}")
print(f"weights streamed per decode step per GPU: ours {gb(ostep)} (largest rank), "
      f"llama.cpp {gb(lstep / n)} (all but token_embd, / {n}); tokens/s; ratio = ours / that run")
print()
print("| run | pp512 | tg128 | tg ratio | tg128 roofline/GPU | decode @64 | @64 ratio | @64 roofline/GPU |")
print("|---|---|---|---|---|---|---|---|")
opp, otg, o64 = f("ours_pp"), f("ours_tg"), f("ours_tg64")
print(f"| ours --tp {n} | {num(opp)} | {num(otg)} | 1.00x | {roof(ostep, otg)} | {num(o64)} | 1.00x | "
      f"{roof(ostep, o64 / 64)} |")
for sm in ("layer", "row"):
    for fa in (0, 1):
        pp, tg, t64 = f(f"lb_{sm}_fa{fa}_pp"), f(f"lb_{sm}_fa{fa}_tg"), f(f"bb_{sm}_fa{fa}_tg64")
        if all(math.isnan(x) for x in (pp, tg, t64)):
            continue
        print(f"| llama.cpp -sm {sm} -fa {fa} | {num(pp)} | {num(tg)} | {ratio(otg, tg)} | {roof(lstep / n, tg)} | "
              f"{num(t64)} | {ratio(o64, t64)} | {roof(lstep / n, t64 / 64)} |")
t = [(k[5:], v[k]) for k in v if k.startswith("time_")]
if t:
    print()
    print("phase wall times (s): " + ", ".join(f"{k} {x}" for k, x in t))
EOF
cat "$OUT/tp.md"
if [ "${QC_TP_CLEAN:-0}" = 1 ]; then rm -f "$GGUF" "$GGUF.args" "$QB" "$RES"; fi
exit $rc
