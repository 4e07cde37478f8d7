#!/bin/sh
# tools/attn_stamps.sh — link a qrun whose split-K decode attention records the
# %globaltimer of its phases (paged_attn_split.cu built with -DQC_ATTN_STAMPS), for
# finding where a decode step's attention spends its time. Never the product's
# binary. Usage: sh tools/attn_stamps.sh [BUILD] -> $BUILD/bin/qrun_stamps; run it
# with QC_ATTN_STAMPS=file, then: python3 tools/attn_stamps.py file
set -eu
B=${1:-build}
make BUILD="$B" -j"$(nproc)" "$B/bin/qrun" >/dev/null
d=$(mktemp -d)
/usr/local/cuda/bin/nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DQC_ATTN_STAMPS \
	-Iruntime/cuda/kernels -Ibase -Iquant -Iruntime/ops -c runtime/cuda/kernels/paged_attn_split.cu -o "$d/paged_attn_split.o"
cc -O2 -Wall -Wextra -c tools/attn_stamps_env.c -o "$d/attn_stamps_env.o"
cp "$B/libqc_cuda.a" "$d/libqc_cuda.a"
ar rcs "$d/libqc_cuda.a" "$d/paged_attn_split.o"
cc -O2 "$B/obj/runtime/qrun_main.o" "$B/obj/runtime/engine_cli.o" "$d/attn_stamps_env.o" "$d/libqc_cuda.a" "$B/libqc.a" -o "$B/bin/qrun_stamps" \
	-lcjson -lxxhash -larchive -lpcre2-8 -licuuc -lmicrohttpd -lm -lpthread -L/usr/local/cuda/lib64 \
	-Wl,-rpath,/usr/local/cuda/lib64 -lcublas -lcublasLt -lcudart_static -ldl -lrt -lstdc++
rm -rf "$d"
echo "$B/bin/qrun_stamps"
