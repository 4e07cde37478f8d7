#!/bin/sh
# tools/nccl.sh [DIR] — install the pinned NCCL that `--tp N` on CUDA loads, and say
# how to point the runtime at it.
#
# Why a script and not a build dependency: NCCL is needed only by multi-GPU runs, is
# ~200 MB, and is loaded at run time (runtime/cuda/backend_cuda_nccl.c), so the
# binaries build and run without it. The runtime takes $QC_NCCL_LIB (a libnccl.so.2
# or its folder) first, then whatever libnccl.so.2 the loader finds (a CUDA toolkit's
# lib64 on LD_LIBRARY_PATH, or Debian/NVIDIA's libnccl2 package), and needs 2.18 or
# newer. This script installs NVIDIA's wheel at the version and sha256 in
# tools/nccl-requirements.txt (pip --require-hashes) into DIR (default build/nccl),
# unless it is there already, and prints the export line. x86-64 only (the pinned
# hash is the manylinux x86_64 wheel's).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-build/nccl}
lib="$dir/nvidia/nccl/lib/libnccl.so.2"
if [ ! -f "$lib" ]; then
	[ "$(uname -m)" = x86_64 ] || { echo "nccl.sh: the pinned wheel is x86_64's; install libnccl2 for $(uname -m) and set QC_NCCL_LIB" >&2; exit 1; }
	mkdir -p "$dir"
	python3 -m pip install -q --no-deps --require-hashes --target "$dir" -r "$here/nccl-requirements.txt" >&2
fi
[ -f "$lib" ] || { echo "nccl.sh: $lib missing after the install" >&2; exit 1; }
echo "export QC_NCCL_LIB=$(cd "$(dirname "$lib")" && pwd)"
