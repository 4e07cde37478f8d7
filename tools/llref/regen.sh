#!/bin/sh
# regen.sh — rewrite tests/data/ref/NAME.json (and models.tsv's size/XXH3 columns are
# printed for checking) from llama.cpp itself. Run from the repository root:
#   sh tools/llref/regen.sh BIN LLREF_C392 LLREF_EC98 [NAME...]
# BIN: directory with mkgguf; LLREF_*: llref linked against the c392e50 build and
# against the ec98e2002 one (README.md). Rows whose llama.cpp column starts with
# "ec98" use the second. Prompts: the 8 id lists below (BOS = 1; vocab 300).
set -eu
bin=$1; old=$2; new=$3; shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prompts="1 1,270,280,290,265 1,261,262,263,264,265,266,267 1,299,150,42 1,100,200 1,5,17,33,65,129,257 1,280 1,263,270,271,272,273,274,275,276,277,278,279"
grep -v '^#' tests/data/ref/models.tsv | while IFS="$(printf '\t')" read -r name size hash llama args; do
	if [ $# -gt 0 ]; then
		case " $* " in *" $name "*) ;; *) continue ;; esac
	fi
	# shellcheck disable=SC2086 # args is a word list
	"$bin/mkgguf" $args --threads 1 -o "$tmp/$name.gguf"
	case $llama in
	ec98*) tool=$new; made="llama.cpp ec98e2002 as vendored by ollama 9db4bdbad^ (CPU build)" ;;
	*) tool=$old; made="llama.cpp c392e5094deaf2d1a7c18683214f007fad3fe42b (CPU build)" ;;
	esac
	# shellcheck disable=SC2086 # prompts is a word list
	"$tool" "$tmp/$name.gguf" "$name.gguf" "$made" $prompts > "tests/data/ref/$name.json"
	echo "$name: $(wc -c < "$tmp/$name.gguf") bytes (recorded $size, XXH3 $hash), sha256 $(sha256sum "$tmp/$name.gguf" | cut -c1-16)..."
done
