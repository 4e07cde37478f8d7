#!/bin/sh
# tools/bundle_identity.sh OLD_BIN NEW_BIN [OUTDIR]
#
# Converts every fixture with two builds of qconvert (OLD_BIN/qconvert and
# NEW_BIN/qconvert) for every target and compares the bundles byte for byte.
# Used when a change must not alter output (a refactor): the house issue's
# "a bundle converted before and after is byte-identical". Fixtures: the shared
# GGUFs (../shared/fixtures or $QC_FIXTURES), the Hugging Face checkpoints in
# tests/data/{hf,hfq}, and mkgguf's presets (written once by NEW_BIN/mkgguf).
# Prints one line per (fixture, target) and "N identical, N differ"; exit 1 on any
# difference or failed conversion.
set -u
old=${1:?usage: bundle_identity.sh OLD_BIN NEW_BIN [OUTDIR]}
new=${2:?usage: bundle_identity.sh OLD_BIN NEW_BIN [OUTDIR]}
out=${3:-$(mktemp -d)}
fx=${QC_FIXTURES:-../shared/fixtures}
mkdir -p "$out/src"

# mkgguf presets cover the architectures the shared files lack (qwen, MoE, rope scaling)
for p in tiny tiny-moe; do
	"$new/mkgguf" --preset "$p" -o "$out/src/mk-$p.gguf" >/dev/null 2>&1 ||
		echo "mkgguf --preset $p failed"
done
for t in q4_0 q8_0 bf16; do
	"$new/mkgguf" --preset tiny --type "$t" -o "$out/src/mk-tiny-$t.gguf" >/dev/null 2>&1 ||
		echo "mkgguf --type $t failed"
done
for a in qwen2 qwen3 qwen2moe; do
	"$new/mkgguf" --preset tiny --arch "$a" --type q4_0 -o "$out/src/mk-$a.gguf" >/dev/null 2>&1 ||
		echo "mkgguf --arch $a failed"
done

models=$(ls "$fx"/gguf/*.gguf "$fx"/gguf-quant/*.gguf "$out"/src/*.gguf 2>/dev/null;
	 for d in tests/data/hf/* tests/data/hfq/*; do [ -f "$d/config.json" ] && echo "$d"; done)
same=0; differ=0
for m in $models; do
	name=$(echo "$m" | tr '/' '_')
	for t in cpu sm80 sm90 sm100; do
		a="$out/$name.$t.old.qb"; b="$out/$name.$t.new.qb"
		"$old/qconvert" "$m" --target "$t" -q -o "$a" 2>"$out/err.old"; ra=$?
		"$new/qconvert" "$m" --target "$t" -q -o "$b" 2>"$out/err.new"; rb=$?
		if [ $ra -ne $rb ]; then
			echo "DIFFER $m --target $t: exit $ra (old) vs $rb (new)"; differ=$((differ + 1))
		elif [ $ra -ne 0 ]; then
			# both refuse it (e.g. a legacy file): the messages must match too
			if cmp -s "$out/err.old" "$out/err.new"; then same=$((same + 1)); echo "same (both refuse) $m --target $t"
			else echo "DIFFER $m --target $t: different error text"; differ=$((differ + 1)); fi
		elif cmp -s "$a" "$b"; then
			echo "identical $(sha256sum < "$b" | cut -c1-16) $m --target $t"; same=$((same + 1))
		else
			echo "DIFFER $m --target $t"; differ=$((differ + 1))
		fi
		rm -f "$a" "$b"
	done
done
echo "$same identical, $differ differ"
[ $differ -eq 0 ]
