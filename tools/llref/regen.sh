#!/bin/sh
# regen.sh — rewrite tests/data/ref/NAME.json (and models.tsv's size/XXH3 columns are
# printed for checking) from llama.cpp itself. Run from the repository root:
#   sh tools/llref/regen.sh BIN LLREF_C392 LLREF_EC98 [NAME...]
# BIN: directory with mkgguf; LLREF_*: llref linked against the c392e50 build and
# against the ec98e2002 one (README.md). Rows whose llama.cpp column starts with
# "ec98" use the second. Prompts: the 8 id lists below (BOS = 1; vocab 300).
# Rows whose ARGS read "fetch SCRIPT" (a real model) take the GGUF SCRIPT prints and
# their own prompts (below); their llama.cpp column "c392e50-avx2" runs LLREF_C392
# with LLREF_AVX2_LIB (env) first on LD_LIBRARY_PATH: the ggml-cpu of a portable
# AVX2/FMA build (README.md), not the native one.
set -eu
bin=$1; old=$2; new=$3; shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prompts="1 1,270,280,290,265 1,261,262,263,264,265,266,267 1,299,150,42 1,100,200 1,5,17,33,65,129,257 1,280 1,263,270,271,272,273,274,275,276,277,278,279"
# smollm2-q4_1, from `qrun MODEL --tokenize TEXT` (the vocabulary adds no BOS):
# "One day, Lily went to the park and saw a big red ball under a tree",
# "The capital of France is", "def fibonacci(n):", and the chat template's
# <|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n
# (1 = <|im_start|>, 2 = <|im_end|>, the text between tokenized piece by piece)
smol_prompts="2705,1194,28,14176,3514,288,260,5949,284,3680,253,2066,2382,4405,656,253,3187 504,3575,282,4649,314 1604,3987,46477,24,94,727 1,4093,198,1780,314,260,3575,282,4649,47,2,198,1,520,9531,198"
grep -v '^#' tests/data/ref/models.tsv | while IFS="$(printf '\t')" read -r name size hash llama args; do
	if [ $# -gt 0 ]; then
		case " $* " in *" $name "*) ;; *) continue ;; esac
	fi
	case $args in
	fetch\ *)
		gguf=$(sh "${args#fetch }")
		file=$(basename "$gguf")
		ps=$smol_prompts
		;;
	*)
		gguf=$tmp/$name.gguf
		file=$name.gguf
		ps=$prompts
		# shellcheck disable=SC2086 # args is a word list
		"$bin/mkgguf" $args --threads 1 -o "$gguf"
		;;
	esac
	lib=
	case $llama in
	ec98*) tool=$new; made="llama.cpp ec98e2002 as vendored by ollama 9db4bdbad^ (CPU build)" ;;
	*-avx2)
		tool=$old
		lib=${LLREF_AVX2_LIB:?"$name needs LLREF_AVX2_LIB (tools/llref/README.md)"}
		made="llama.cpp c392e5094deaf2d1a7c18683214f007fad3fe42b (CPU build, ggml-cpu GGML_NATIVE=OFF AVX2/FMA/F16C)"
		;;
	*) tool=$old; made="llama.cpp c392e5094deaf2d1a7c18683214f007fad3fe42b (CPU build)" ;;
	esac
	# shellcheck disable=SC2086 # ps is a word list
	LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$tool" "$gguf" "$file" "$made" $ps > "tests/data/ref/$name.json"
	echo "$name: $(wc -c < "$gguf") bytes (recorded $size, XXH3 $hash), sha256 $(sha256sum "$gguf" | cut -c1-16)..."
done
