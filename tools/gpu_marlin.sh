#!/bin/sh
# gpu_marlin.sh — build and run the marlin GEMM GPU check and timings
# (tests/gpu/marlin_gemm_test.c) on a machine with nvcc and a GPU.
#   sh tools/gpu_marlin.sh [--check | --gemv-bench | --wg-bench | --build-only]
#   (--check: correctness only; --gemv-bench: the decode GEMV's timings only;
#   --wg-bench: the GEMM's mma.sync / wgmma (form 0) / warp-specialized wgmma
#   (marlin_wgmma_ws.cu) / cuBLAS fp16 table on the 8B shapes; QC_WG_BENCH_QUICK=1:
#   two shapes at 64-1024 tokens, the warp-specialized form also at fixed splits 1-8)
# Builds into $BUILD (default build-gpu-mrl) only what the test needs: the layout
# packer, the type table and reference decoders, the C reference, the kernel.
# cuBLAS fp16 timings are added when libcublas links; the script says which.
set -e
BUILD=${BUILD:-build-gpu-mrl}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$(command -v nvcc || echo $CUDA_HOME/bin/nvcc)}
CC=${CC:-cc}
# same strictness as the Makefile; no fast-math: the C reference is the ground truth
CFLAGS="-O2 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Ibase -Iquant -Iruntime/ops -Iruntime/cuda/kernels -I$CUDA_HOME/include"
NVFLAGS="-O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80 -Ibase -Iquant -Iruntime/ops -Iruntime/cuda/kernels"
mkdir -p $BUILD/obj
objs=""
for f in quant/layout.c quant/layout_marlin.c quant/layout_marlin6.c quant/layout_nvfp4.c quant/layout_fp8.c quant/qtype.c base/qc_err.c \
	 quant/dequant_*.c quant/iq_tables.c quant/quant_ref.c quant/quant_k.c runtime/ops/dequant_f16.c runtime/ops/marlin_gemm.c; do
	o=$BUILD/obj/$(echo $f | tr / _).o
	$CC $CFLAGS -c $f -o $o
	objs="$objs $o"
done
rm -f $BUILD/libmrl.a
ar rcs $BUILD/libmrl.a $objs
$NVCC $NVFLAGS -Xptxas -v -c runtime/cuda/kernels/marlin_gemm.cu -o $BUILD/obj/marlin_gemm_cu.o 2> $BUILD/ptxas.txt || { cat $BUILD/ptxas.txt; exit 1; }
grep -E "registers|spill" $BUILD/ptxas.txt | sort | uniq -c | head -20
# the Hopper kernel: registers, and whether ptxas serialized its wgmma (C7513/C7515)
$NVCC $NVFLAGS -Xptxas -v -c runtime/cuda/kernels/marlin_wgmma.cu -o $BUILD/obj/marlin_wgmma_cu.o 2> $BUILD/ptxas_wg.txt || { cat $BUILD/ptxas_wg.txt; exit 1; }
grep -E "registers|spill|C75" $BUILD/ptxas_wg.txt | sort | uniq -c | head -20
# marlin_mm.cu: the backend's table entry; cuda_err.cu: qc_cuda_check; the
# GEMV's two kernels and what its fusions are checked against; moe_sort.cu and
# marlin_moe.cu: stacked experts on the grouped warp-specialized GEMM
# the warp-specialized form: the same check (a divergent-path wgmma is C7520)
$NVCC $NVFLAGS -Xptxas -v -c runtime/cuda/kernels/marlin_wgmma_ws.cu -o $BUILD/obj/marlin_wgmma_ws_cu.o 2> $BUILD/ptxas_ws.txt || { cat $BUILD/ptxas_ws.txt; exit 1; }
grep -E "registers|spill|C75" $BUILD/ptxas_ws.txt | sort | uniq -c | head -20
cuobjs="$BUILD/obj/marlin_gemm_cu.o $BUILD/obj/marlin_wgmma_cu.o $BUILD/obj/marlin_wgmma_ws_cu.o"
# the persistent GEMV's registers and spills, for the log
$NVCC $NVFLAGS -Xptxas -v -c runtime/cuda/kernels/marlin_gemv_persist.cu -o $BUILD/obj/marlin_gemv_persist_cu.o \
	2> $BUILD/ptxas_persist.txt || { cat $BUILD/ptxas_persist.txt; exit 1; }
grep -E "registers|spill" $BUILD/ptxas_persist.txt | sort | uniq -c | head -20
cuobjs="$cuobjs $BUILD/obj/marlin_gemv_persist_cu.o"
for f in cuda_err marlin_mm marlin_gemv marlin_gemv_stream pdl mm_fuse silu_mul add rms_norm marlin_dequant moe_sort marlin_moe; do
	$NVCC $NVFLAGS -c runtime/cuda/kernels/$f.cu -o $BUILD/obj/${f}_cu.o
	cuobjs="$cuobjs $BUILD/obj/${f}_cu.o"
done
if $CC $CFLAGS -DQC_WITH_CUBLAS -c tests/gpu/marlin_gemm_test.c -o $BUILD/obj/test_cublas.o &&
   $NVCC -o $BUILD/marlin_gemm_test $BUILD/obj/test_cublas.o $cuobjs $BUILD/libmrl.a -lcublas -lm 2>/dev/null; then
	echo "gpu_marlin: built with cuBLAS fp16 comparison"
else
	echo "gpu_marlin: cuBLAS did not link; timings without the cuBLAS comparison"
	$CC $CFLAGS -c tests/gpu/marlin_gemm_test.c -o $BUILD/obj/test.o
	$NVCC -o $BUILD/marlin_gemm_test $BUILD/obj/test.o $cuobjs $BUILD/libmrl.a -lcublas -lm
fi
[ "$1" = "--build-only" ] && exit 0
exec $BUILD/marlin_gemm_test "$@"
