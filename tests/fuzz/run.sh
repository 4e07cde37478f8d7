#!/bin/sh
# tests/fuzz/run.sh SECONDS fuzz_a.c [fuzz_b.c ...] — build and run libFuzzer harnesses.
#
# Builds the library sources (base/, quant/, formats/, runtime/ops/, runtime/text/) and each harness with
# clang -fsanitize=fuzzer,address,undefined into build-fuzz/, makes a seed corpus
# from the fixtures (a few whole small GGUFs, truncated prefixes, bundles converted
# by build/bin/qconvert), replays tests/fuzz/regress/*, then runs every harness for
# SECONDS (in parallel when there are enough cores). Prints runs, exec/s and corpus
# size per harness; exits 1 if anything crashed, leaked, timed out or ran out of memory.
# Env: FUZZ_CC (clang), FUZZ_BUILD (build-fuzz), QC_FIXTURES, QC_BIN (build/bin),
#      FUZZ_JOBS (harnesses at once; default: number of CPUs).
set -u
secs=${1:-60}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || { echo "usage: $0 SECONDS tests/fuzz/fuzz_X.c ..." >&2; exit 2; }
CC=${FUZZ_CC:-clang}
OUT=${FUZZ_BUILD:-build-fuzz}
FIX=${QC_FIXTURES:-../shared/fixtures}
BIN=${QC_BIN:-build/bin}
JOBS=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
# -fsanitize=fuzzer-no-link: coverage instrumentation for library objects; the harness link adds libFuzzer's main.
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
CFLAGS="-O1 -g -std=c11 -D_GNU_SOURCE -Ibase -Iquant -Iformats -Iconvert -Iruntime/ops -Iruntime/text -Iruntime/engine -Iruntime/serve -Wall -Wextra -Wno-unused-parameter $SAN"
LIBS="-lcjson -lxxhash -larchive -lpcre2-8 -licuuc -lm -lpthread"
MAX_LEN=3145728

command -v "$CC" >/dev/null 2>&1 || { echo "fuzz: $CC not found (libFuzzer needs clang)" >&2; exit 1; }
mkdir -p "$OUT/obj" "$OUT/seeds" "$OUT/corpus" "$OUT/crashes" || exit 1

# ---- library, instrumented -----------------------------------------------------------
objs=
# the tokenizer files too (fuzz_tokenizer), not the engine
for c in base/*.c quant/*.c formats/*.c runtime/ops/*.c runtime/text/*.c \
	 convert/hf_quant.c convert/hfq_*.c convert/hf_config.c convert/hf_names.c convert/hf_tokenizer.c; do
	o="$OUT/obj/$(echo "$c" | tr / _ | sed 's/\.c$/.o/')"
	if [ ! -f "$o" ] || [ "$c" -nt "$o" ] ||
	   [ -n "$(find base quant formats runtime \( -name '*.h' -o -name '*.def' \) -newer "$o" 2>/dev/null | head -n 1)" ]; then
		$CC $CFLAGS -fsanitize=fuzzer-no-link -c "$c" -o "$o" || { echo "fuzz: cannot compile $c" >&2; exit 1; }
	fi
	objs="$objs $o"
done
rm -f "$OUT/libqc-fuzz.a"
ar rcs "$OUT/libqc-fuzz.a" $objs || exit 1

# ---- seeds -----------------------------------------------------------------------------
# tokenizer: each llama.cpp test string, prefixed by a vocab selector byte and a flags byte
ts="$OUT/seeds/fuzz_tokenizer"
mkdir -p "$ts"
if [ -f "$FIX/vocab/ggml-vocab-llama-spm.gguf.inp" ]; then
	awk -v dir="$ts" 'BEGIN { RS = "\n__ggml_vocab_test__\n"; n = 0 }
		{ for (v = 0; v < 4; v++) { f = sprintf("%s/s%02d-v%d", dir, n, v); printf "%c%c%s", 48 + v, 50, $0 > f; close(f) } n++ }' \
		"$FIX/vocab/ggml-vocab-llama-spm.gguf.inp"
fi
# jinja: the chat templates the oracle test renders
js="$OUT/seeds/fuzz_jinja"
mkdir -p "$js"
cp tests/data/chat/*.jinja "$js"/ 2>/dev/null || true
# safetensors: reference-writer fixtures and header-cut prefixes
ss="$OUT/seeds/fuzz_safetensors"
mkdir -p "$ss"
for f in tests/data/st/tiny/model.safetensors tests/data/st/sharded/*.safetensors tests/data/st/bad-*/*.safetensors; do
	[ -f "$f" ] && cp "$f" "$ss/$(echo "$f" | tr / _)"
done
head -c 64 tests/data/st/tiny/model.safetensors > "$ss/tiny-prefix64.safetensors"
cat > "$OUT/fuzz_safetensors.dict" <<'DICT'
"\"dtype\":"
"\"shape\":["
"\"data_offsets\":["
"\"__metadata__\":{"
"\"F32\""
"\"BF16\""
"\"F8_E4M3\""
"\"BOOL\""
"9007199254740992"
"1.5"
"-1"
DICT
# hfconfig: the quantization configs of the HF fixtures (tests/gen/make_hf_quant.py)
hs="$OUT/seeds/fuzz_hfconfig"
mkdir -p "$hs"
for f in tests/data/hfq/*/config.json; do
	[ -f "$f" ] && cp "$f" "$hs/$(basename "$(dirname "$f")").json"
done
# hf_model: the HF test models' config.json and (small) tokenizer.json
ms="$OUT/seeds/fuzz_hf_model"
mkdir -p "$ms"
for f in tests/data/hf/*/config.json tests/data/hf/*/tokenizer.json; do
	[ -f "$f" ] && cp "$f" "$ms/$(basename "$(dirname "$f")")-$(basename "$f")"
done
# GGUF: whole small files (v2, v3, quantized, vocab-only) and prefixes cut inside headers.
gs="$OUT/seeds/fuzz_gguf"
mkdir -p "$gs"
for f in gguf/tinyllamas-stories-260k-q8_0.gguf gguf-quant/tiny-llama-256-TQ1_0.gguf \
	 gguf-quant/tiny-llama-256-IQ1_M.gguf gguf-quant/tiny-llama-256-Q4_K_M-mix.gguf \
	 vocab/ggml-vocab-bert-bge.gguf; do
	[ -f "$FIX/$f" ] && cp "$FIX/$f" "$gs/$(basename "$f")"
done
for f in gguf/stories260K.gguf gguf/llama-2-tiny-random.gguf gguf-quant/tiny-moe-256-Q4_0.gguf \
	 gguf-quant/stories260K-BF16.gguf; do
	[ -f "$FIX/$f" ] || continue
	for n in 256 4096 32768 131072; do
		head -c "$n" "$FIX/$f" > "$gs/$(basename "$f" .gguf)-prefix$n.gguf"
	done
done
# bundles: converted by the regular (uninstrumented) CLI, plus prefixes
bs="$OUT/seeds/fuzz_bundle"
mkdir -p "$bs"
if [ ! -x "$BIN/qconvert" ]; then
	make -s "$BIN/qconvert" >/dev/null 2>&1 || echo "fuzz: note: could not build $BIN/qconvert; bundle seeds missing" >&2
fi
if [ -x "$BIN/qconvert" ]; then
	for f in gguf/stories260K.gguf gguf-quant/tiny-llama-256-TQ1_0.gguf gguf-quant/tiny-llama-256-IQ1_M.gguf \
		 gguf-quant/tiny-moe-256-Q4_0.gguf gguf-quant/tiny-llama-256-Q4_K_M-mix.gguf; do
		[ -f "$FIX/$f" ] || continue
		b="$bs/$(basename "$f" .gguf).qb"
		[ -f "$b" ] || "$BIN/qconvert" "$FIX/$f" --target cpu -q -o "$b" ||
			echo "fuzz: note: converting $f failed" >&2
	done
	# sm90 bundles: the marlin layouts' unpackers (q4_0 -> marlin_i4, Q4_K_M-mix ->
	# marlin_i4z and marlin_i6, Q6_K -> marlin_i6; the MoE model's stacked experts and
	# fused gate|up halves in marlin_i4)
	for f in gguf-quant/tiny-llama-256-Q4_0.gguf gguf-quant/tiny-llama-256-Q4_K_M-mix.gguf \
		 gguf-quant/tiny-llama-256-Q6_K.gguf gguf-quant/tiny-moe-256-Q4_0.gguf; do
		[ -f "$FIX/$f" ] || continue
		b="$bs/$(basename "$f" .gguf)-sm90.qb"
		[ -f "$b" ] || "$BIN/qconvert" "$FIX/$f" --target sm90 -q -o "$b" ||
			echo "fuzz: note: converting $f for sm90 failed" >&2
	done
	# an sm90 bundle of W8A8 FP8: the fp8_rows unpacker
	b="$bs/ct_fp8_w8a8_dynamic-sm90.qb"
	[ -f "$b" ] || "$BIN/qconvert" tests/data/hfq/ct_fp8_w8a8_dynamic --target sm90 -q -o "$b" 2>/dev/null ||
		echo "fuzz: note: converting ct_fp8_w8a8_dynamic for sm90 failed" >&2
	if [ -f "$bs/stories260K.qb" ]; then
		head -c 1024 "$bs/stories260K.qb" > "$bs/stories260K-prefix1024.qb"
		head -c 8192 "$bs/stories260K.qb" > "$bs/stories260K-prefix8192.qb"
	fi
fi

# GGUF: record prefixes the fixtures lack (general.alignment, v1 header, value types)
cat > "$OUT/fuzz_gguf.dict" <<'EOF'
"\x11\x00\x00\x00\x00\x00\x00\x00general.alignment\x04\x00\x00\x00"
"general.alignment"
"GGUF\x01\x00\x00\x00"
"GGUF\x02\x00\x00\x00"
"GGUF\x03\x00\x00\x00"
"\x00\x00\x00\x03"
"\x07\x00\x00\x00"
"\x08\x00\x00\x00"
"\x09\x00\x00\x00"
"\x09\x00\x00\x00\x09\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00"
"\x0c\x00\x00\x00"
"\xff\xff\xff\xff\xff\xff\xff\x7f"
"\x00\x00\x00\x00\x00\x00\x00\x80"
"general.architecture"
"split.count"
EOF

# manifest keys and values for the bundle harness (JSON is a small target in a large file)
cat > "$OUT/fuzz_bundle.dict" <<'EOF'
"\"name\":"
"\"ne\":["
"\"encoding\":{"
"\"type\":"
"\"layout\":"
"\"layout_id\":"
"\"params\":{}"
"\"offset\":"
"\"size\":"
"\"xxh3\":"
"\"parts\":["
"\"row0\":"
"\"rows\":"
"\"tensors\":["
"\"target\":"
"\"marlin_i6\""
"\"marlin_i4z\""
"\"sm90\""
"\"ggml\""
"\"q4_K\""
"\"iq2_xxs\""
"\"tq1_0\""
"\"mxfp4\""
"9007199254740993"
"-0"
"1e300"
"4096"
"QCBUNDLE"
"\"parts\":[{\"name\":\"a\",\"row0\":0,\"rows\":1}]"
EOF

# ---- build, replay regressions, run -------------------------------------------------------
status=0
names=
for src in "$@"; do
	name=$(basename "$src" .c)
	exe="$OUT/$name"
	if ! $CC $CFLAGS -fsanitize=fuzzer "$src" "$OUT/libqc-fuzz.a" $LIBS -o "$exe"; then
		echo "fuzz: cannot build $src" >&2; status=1; continue
	fi
	mkdir -p "$OUT/corpus/$name" "$OUT/seeds/$name"
	if ls tests/fuzz/regress/* >/dev/null 2>&1; then
		if ! "$exe" tests/fuzz/regress/* > "$OUT/$name.regress.log" 2>&1; then
			echo "$name: FAILED on a tests/fuzz/regress input; see $OUT/$name.regress.log" >&2
			tail -n 30 "$OUT/$name.regress.log" >&2
			status=1
			continue
		fi
	fi
	names="$names $name"
done

running=0
for name in $names; do
	dict=
	[ -f "$OUT/$name.dict" ] && dict="-dict=$OUT/$name.dict"
	(
		"$OUT/$name" $dict -max_len=$MAX_LEN -max_total_time="$secs" -timeout=60 -rss_limit_mb=2048 \
			-print_final_stats=1 -artifact_prefix="$OUT/crashes/$name-" \
			"$OUT/corpus/$name" "$OUT/seeds/$name" > "$OUT/$name.log" 2>&1
		echo $? > "$OUT/$name.rc"
	) &
	running=$((running + 1))
	if [ "$running" -ge "$JOBS" ]; then
		wait
		running=0
	fi
done
wait

for name in $names; do
	log="$OUT/$name.log"
	rc=$(cat "$OUT/$name.rc" 2>/dev/null || echo 1)
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
	took=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
	files=$(find "$OUT/corpus/$name" -type f | wc -l)
	bytes=$(du -sk "$OUT/corpus/$name" | cut -f1)
	echo "$name: ${runs:-?} runs in ${took:-?} s of ${secs} (${speed:-?} exec/s), corpus $files files (${bytes} KiB), exit $rc"
	if [ "$rc" -ne 0 ] || grep -qE '^==[0-9]+==ERROR|runtime error:|SUMMARY: ' "$log"; then
		echo "$name: CRASH — log $log; artifacts:" >&2
		ls "$OUT/crashes/$name-"* >&2 2>/dev/null
		grep -m 1 -A 40 -E '^==[0-9]+==ERROR|runtime error:|ALARM|out-of-memory' "$log" >&2
		status=1
	fi
done
exit $status
