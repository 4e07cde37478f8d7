#!/bin/sh
# tools/gpu_pack.sh — build here, pack what a GPU machine without this project's
# Debian libraries needs into .gpu/payload.tar.xz (git-ignored; carried by the device
# tool, unpacked by tools/gpu_check.sh): qrun, the tests/gpu binaries and
# bench_gemv, bench_copy and bench_fp8 (stripped),
# the shared libraries they load (all but glibc, libstdc++ and CUDA's: a CUDA image
# lacks cJSON, xxHash, PCRE2, ICU 72, libarchive), and the fixtures (gguf,
# gguf-quant); SmolLM2's GGUF, when cached, in parts beside it (below). BUILD defaults
# to build-cuda. QC_PACK_TESTS: the tests/gpu binaries to pack (default all: test_kernels
# test_e2e test_tp bench_gemv bench_copy bench_fp8); a device call carries at most
# 64 MiB with the tracked tree, so a benchmark call packs fewer (bench_copy alone for
# tools/gpu_compare.sh), and the last line says what the payload leaves.
set -eu
B=${BUILD:-build-cuda}
FX=${QC_FIXTURES:-../shared/fixtures}
TESTS=${QC_PACK_TESTS-test_kernels test_e2e test_tp bench_gemv bench_copy bench_fp8}
tb=""
for t in $TESTS; do tb="$tb $B/tests/gpu/$t"; done
make BUILD="$B" -j"$(nproc)" "$B/bin/qrun" "$B/bin/qconvert" "$B/bin/mkgguf" $tb >/dev/null
d=$(mktemp -d)
mkdir -p "$d/bin" "$d/lib" "$d/fixtures"
cp "$B/bin/qrun" $tb "$d/bin/"
# extra binaries to carry (A/B comparisons): $QC_PACK_EXTRA, space-separated paths
[ -z "${QC_PACK_EXTRA:-}" ] || cp $QC_PACK_EXTRA "$d/bin/"
cp "$B/bin/mkgguf" "$B/bin/qconvert" "$d/bin/"
strip "$d"/bin/*
# every shared library the binaries load, except glibc, the C++ runtime and CUDA's
for l in $(ldd "$d"/bin/* 2>/dev/null | awk '$3 ~ /^\// {print $3}' | sort -u |
	   grep -v -E '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so|/libcu'); do
	cp -L "$l" "$d/lib/"
done
# the graph-node tracer (tests/gpu/ktrace.c) and the CUPTI it loads, when this build has CUDA
if make BUILD="$B" "$B/lib/libqc_ktrace.so" >/dev/null 2>&1; then
	cp "$B/lib/libqc_ktrace.so" "$d/lib/"
	cp -L "$(ldd "$B/lib/libqc_ktrace.so" | awk '/libcupti/ {print $3}')" "$d/lib/"
fi
cp -r "$FX/gguf" "$FX/gguf-quant" "$d/fixtures/"
mkdir -p .gpu
rm -f .gpu/payload.tgz
# xz: a third smaller than gzip (the carried tree is capped at 64 MiB)
tar cf - -C "$d" bin lib fixtures | xz -T"$(nproc)" -6 >.gpu/payload.tar.xz
rm -rf "$d"
# SmolLM2-135M-Instruct Q4_1 for test_e2e's real-model run, when tools/fetch_smollm2.sh
# has cached it: 98 MB that xz cannot shrink (its 4-bit blocks), more than one device
# call carries, so not in the payload but beside it in parts of $QC_PACK_PART_MIB
# (default 40) MiB, .gpu/smollm2.gguf.part-NN, each carried by its own call (a warm
# machine keeps them); tools/gpu_check.sh joins them and checks the pinned sha256.
rm -f .gpu/smollm2.gguf.part-*
sm=${QC_MODELS:-build/models}/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$sm" ]; then
	split -b "${QC_PACK_PART_MIB:-40}M" -d -a 2 "$sm" .gpu/smollm2.gguf.part-
	ls -la .gpu/smollm2.gguf.part-*
	echo "gpu_pack: carry each .gpu/smollm2.gguf.part-NN in its own call (at most 64 MiB travel at once)"
else
	echo "gpu_pack: no $sm: test_e2e will skip SmolLM2 (sh tools/fetch_smollm2.sh fetches it)"
fi
# llama.cpp's source for tools/gpu_compare.sh, when $LLAMA_GIT names a clone of it:
# its HEAD without the vocab models, docs and web UI (~20 MB unpacked, ~4 MB packed;
# a mirror may lack those blobs), its short hash in .snapshot. Never committed.
if [ -n "${LLAMA_GIT:-}" ]; then
	l=$(mktemp -d)
	git -C "$LLAMA_GIT" archive --format=tar HEAD -- ':(exclude)models' ':(exclude)docs' \
		':(exclude)examples/server/public' ':(exclude)media' ':(exclude)ggml/src/ggml-kompute/kompute' \
		2>/dev/null | tar -x -C "$l"
	[ -f "$l/CMakeLists.txt" ] && [ -d "$l/src" ] || { echo "gpu_pack: $LLAMA_GIT: archive incomplete"; exit 1; }
	git -C "$LLAMA_GIT" rev-parse --short HEAD >"$l/.snapshot"
	tar czf .gpu/llama.tgz -C "$l" .
	rm -rf "$l"
	ls -la .gpu/llama.tgz
fi
ls -la .gpu/payload.tar.xz
# what a call carrying the payload (and llama.tgz, when packed) leaves of its 64 MiB
tree=$(git ls-files -z | xargs -0 cat 2>/dev/null | wc -c)
pay=$(cat .gpu/payload.tar.xz $( [ -f .gpu/llama.tgz ] && [ -n "${LLAMA_GIT:-}" ] && echo .gpu/llama.tgz) | wc -c)
echo "gpu_pack: tracked tree $((tree >> 20)) MiB + payload $((pay >> 20)) MiB: $(((67108864 - tree - pay) >> 20)) MiB left for a call's other carried files"
