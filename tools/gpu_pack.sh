#!/bin/sh
# tools/gpu_pack.sh — build here, pack what a GPU machine without this project's
# Debian libraries needs into .gpu/payload.tgz (git-ignored; carried by the device
# tool, unpacked by tools/gpu_check.sh): qrun, the tests/gpu binaries and
# bench_gemv (stripped),
# the shared libraries they load (all but glibc, libstdc++ and CUDA's: a CUDA image
# lacks cJSON, xxHash, PCRE2, ICU 72, libarchive), and the fixtures (gguf,
# gguf-quant). BUILD defaults to build-cuda.
set -eu
B=${BUILD:-build-cuda}
FX=${QC_FIXTURES:-../shared/fixtures}
make BUILD="$B" -j"$(nproc)" "$B/bin/qrun" "$B/bin/qconvert" "$B/bin/mkgguf" "$B/tests/gpu/test_kernels" "$B/tests/gpu/test_e2e" \
	"$B/tests/gpu/bench_gemv" >/dev/null
d=$(mktemp -d)
mkdir -p "$d/bin" "$d/lib" "$d/fixtures"
cp "$B/bin/qrun" "$B/tests/gpu/test_kernels" "$B/tests/gpu/test_e2e" "$B/tests/gpu/bench_gemv" "$d/bin/"
# extra binaries to carry (A/B comparisons): $QC_PACK_EXTRA, space-separated paths
[ -z "${QC_PACK_EXTRA:-}" ] || cp $QC_PACK_EXTRA "$d/bin/"
cp "$B/bin/mkgguf" "$B/bin/qconvert" "$d/bin/"
strip "$d"/bin/*
# every shared library the binaries load, except glibc, the C++ runtime and CUDA's
for l in $(ldd "$d"/bin/* 2>/dev/null | awk '$3 ~ /^\// {print $3}' | sort -u |
	   grep -v -E '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so|/libcu'); do
	cp -L "$l" "$d/lib/"
done
cp -r "$FX/gguf" "$FX/gguf-quant" "$d/fixtures/"
mkdir -p .gpu
tar czf .gpu/payload.tgz -C "$d" bin lib fixtures
rm -rf "$d"
ls -la .gpu/payload.tgz
