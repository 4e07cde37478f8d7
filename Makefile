# qconvert — one plain Makefile, one target per deliverable.
#   make            build/bin/{qconvert,qrun,qserve,mkgguf} (+ CUDA objects when nvcc exists)
#   make test       every CPU test; ends with "N passed, N failed"
#   make asan       the same tests under AddressSanitizer + UBSan
#   make fuzz       libFuzzer harnesses (clang), FUZZ_SECONDS each
#   make bench      conversion throughput benchmark (docs/bench.md)
#   make bench-cpu  CPU engine prefill/decode vs llama.cpp (docs/bench.md)
#   make cuda-check compile the CUDA sources only (no GPU needed)
#   make test-gpu   every CUDA kernel vs its C reference + end to end vs the CPU (needs a GPU)
#   make bench-gpu  Llama-3-8B-shape decode/prefill benchmark (needs a GPU; docs/bench.md)
#   make bench-gpu-compare LLAMA_SRC=DIR  ours vs llama.cpp built from DIR, one table (GPU)
#   make nccl       the pinned NCCL that --tp N on CUDA loads (prints QC_NCCL_LIB=...)
#   make help       this text
# Sources, by floor (floors.mk; docs/house.md): base/ quant/ formats/ convert/ (qconvert)
#   runtime/{ops,text,engine,cpu,cuda,cuda/kernels,serve}/ and runtime/*_main.c (qrun, qserve),
#   samples/ (mkgguf); tests in tests/ (CPU), tests/gpu/ (CUDA), tests/fuzz/ (libFuzzer).

CC      ?= cc
BUILD   ?= build
# Warnings are errors in CI so "warning-free" stays true on main.
WERROR  := $(if $(CI),-Werror,)
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wformat=2 -Wcast-qual -Wno-format-nonliteral
# _GNU_SOURCE: mremap/madvise/O_TMPFILE-free POSIX extras; no -ffast-math anywhere:
# the C reference is the ground truth for every kernel.
CFLAGS  ?= -O2 -g
# project flags stay even when CFLAGS is given on the command line (make asan does)
QCFLAGS  = -std=c11 -D_GNU_SOURCE -MMD -MP $(WARN) $(WERROR) $(INC)
LDLIBS  := -lcjson -lxxhash -larchive -lpcre2-8 -licuuc -lmicrohttpd -lm -lpthread

# The floors (floors.mk): each room compiles with -I for its own folder and the rooms
# below it only, so an include that goes up a floor fails to compile. Tests see all.
include floors.mk
room_inc = $(foreach r,$(1) $(USE_$(1)),-I$(DIR_$(r)))
INC := $(foreach r,$(ROOMS),-I$(DIR_$(r)))
$(foreach r,$(ROOMS),$(eval $(BUILD)/obj/$(DIR_$(r))/%.o: INC := $$(call room_inc,$(r))))

# CUDA: built whenever nvcc is found. sm_90a for Hopper (wgmma/TMA), sm_80 for Ampere.
CUDA_HOME ?= /usr/local/cuda
NVCC    := $(shell command -v nvcc 2>/dev/null || (test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc))
NVFLAGS := -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80 \
	   -MMD -MP -Xcompiler -Wall,-Wextra
# nvfp4_swz.cu also gets sm_100a (Blackwell, compile-only here) when this nvcc lists
# compute_100 (CUDA 12.8+); older nvcc: skipped, the file still builds for the above.
SM100_GENCODE := -gencode=arch=compute_100a,code=sm_100a
NV_SM100 := $(if $(NVCC),$(if $(shell $(NVCC) --list-gpu-arch 2>/dev/null | grep -x compute_100),$(SM100_GENCODE)))
$(BUILD)/obj/runtime/cuda/kernels/nvfp4_swz.o: NVFLAGS += $(NV_SM100)
# The CUDA backend: with nvcc, libqc_cuda.a = runtime/cuda/kernels/*.cu + runtime/cuda/backend_cuda*.c (cc,
# CUDA headers as system headers so -Werror sees only ours); cudart static so a binary runs
# (and says "no CUDA device") on a machine without a GPU; cuBLAS found through the rpath.
# Without nvcc, libqc_nocuda.a holds the stub whose create says the build has no CUDA.
# CUDA_ROOT: the toolkit the nvcc found belongs to (its headers and libraries).
CUDA_ROOT := $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(NVCC)),$(CUDA_HOME))
ifneq ($(NVCC),)
CUDA_LIB    := $(BUILD)/libqc_cuda.a
CUDA_LDLIBS := -L$(CUDA_ROOT)/lib64 -Wl,-rpath,$(CUDA_ROOT)/lib64 -lcublas -lcublasLt -lcudart_static -ldl -lrt -lstdc++
else
CUDA_LIB    := $(BUILD)/libqc_nocuda.a
CUDA_LDLIBS :=
endif

LIB_SRC := $(wildcard base/*.c quant/*.c formats/*.c runtime/ops/*.c) \
	   $(filter-out convert/qconvert.c,$(wildcard convert/*.c)) \
	   $(wildcard runtime/text/*.c runtime/engine/*.c runtime/cpu/*.c runtime/serve/*.c)
# engine_cli.o names the CUDA backend, so it links before $(CUDA_LIB), not inside libqc.a
CLI_OBJ := $(BUILD)/obj/runtime/engine_cli.o
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
LIB     := $(BUILD)/libqc.a

TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
CU_SRC   := $(wildcard runtime/cuda/kernels/*.cu)
CU_OBJ   := $(CU_SRC:%.cu=$(BUILD)/obj/%.o)

BINS := $(BUILD)/bin/qconvert $(BUILD)/bin/mkgguf $(BUILD)/bin/qrun $(BUILD)/bin/qserve

.PHONY: all help deps nccl test check asan fuzz bench bench-cpu cuda-check clean sample tests-build loadtest test-gpu bench-gpu bench-gpu-compare
all: $(BINS) $(if $(NVCC),cuda-check)

help:
	@sed -n '2,/^$$/p' Makefile | sed -e 's/^# \{0,1\}//' -e '/^$$/d'

# Installs missing Debian packages (no-op when present).
deps:
	@sh tools/deps.sh

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(QCFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/bin/qconvert: $(BUILD)/obj/convert/qconvert.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(QCFLAGS) $^ -o $@ $(LDLIBS)

# mkgguf: every samples/*.c (command line, presets, plan, weights, vocab, keys, files)
MKGGUF_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard samples/*.c))
$(BUILD)/bin/mkgguf: $(MKGGUF_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(QCFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/bin/qrun: $(BUILD)/obj/runtime/qrun_main.o $(CLI_OBJ) $(CUDA_LIB) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(QCFLAGS) $^ -o $@ $(LDLIBS) $(CUDA_LDLIBS)

$(BUILD)/bin/qserve: $(BUILD)/obj/runtime/qserve_main.o $(CLI_OBJ) $(CUDA_LIB) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(QCFLAGS) $^ -o $@ $(LDLIBS) $(CUDA_LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(QCFLAGS) $^ -o $@ $(LDLIBS)

tests-build: $(BINS) $(TEST_BIN)

# Builds, then runs every test binary through one runner (last line: N passed, N failed).
test: deps
	@$(MAKE) --no-print-directory tests-build
	@QC_BIN=$(BUILD)/bin sh tests/run.sh $(TEST_BIN)

# The same tests under AddressSanitizer + UBSan (clang), in their own build tree.
asan: deps
	@$(MAKE) --no-print-directory BUILD=build-asan CC=clang \
	  CFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" tests-build
	@ASAN_OPTIONS=detect_leaks=1 QC_BIN=build-asan/bin sh tests/run.sh $(TEST_BIN:$(BUILD)/%=build-asan/%)

# What CI runs (.ci/run): the tests, then the same tests under sanitizers.
check: test asan

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $(INC) -c $< -o $@

cuda-check: $(CU_OBJ)
	@echo "cuda-check: $(words $(CU_OBJ)) CUDA source(s) compiled for sm_90a and sm_80$(if $(NV_SM100), (+ sm_100a: nvfp4_swz.cu),)$(if $(NVCC),, (nvcc not found: skipped))"

CUDA_RT_SRC := $(filter-out runtime/cuda/backend_cuda_stub.c,$(wildcard runtime/cuda/backend_cuda*.c))
CUDA_RT_OBJ := $(CUDA_RT_SRC:%.c=$(BUILD)/obj/%.o)
$(CUDA_RT_OBJ) $(BUILD)/obj/tests/gpu/%.o: QCFLAGS += -isystem $(CUDA_ROOT)/include

$(BUILD)/libqc_cuda.a: $(CU_OBJ) $(CUDA_RT_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libqc_nocuda.a: $(BUILD)/obj/runtime/cuda/backend_cuda_stub.o
	@rm -f $@
	ar rcs $@ $^

# GPU tests (tests/gpu/): built and run by `make test-gpu` on a machine with a GPU
# (tools/gpu_check.sh does it on the device); never part of `make test`.
GPU_TEST_SRC := $(wildcard tests/gpu/test_*.c)
GPU_TEST_BIN := $(GPU_TEST_SRC:tests/gpu/%.c=$(BUILD)/tests/gpu/%)

$(BUILD)/tests/gpu/%: $(BUILD)/obj/tests/gpu/%.o $(CUDA_LIB) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(QCFLAGS) $^ -o $@ $(LDLIBS) $(CUDA_LDLIBS)

# test_kernels is one binary (tools/gpu_check.sh, gpu_pack.sh) from test_kernels.c (main) and
# tests/gpu/kernels_*.c (one file per concern; not test_*.c, so no binaries of their own).
KERNELS_TEST_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/gpu/kernels_*.c))
$(BUILD)/tests/gpu/test_kernels: $(BUILD)/obj/tests/gpu/test_kernels.o $(KERNELS_TEST_OBJ) $(CUDA_LIB) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(QCFLAGS) $^ -o $@ $(LDLIBS) $(CUDA_LDLIBS)

# The graph-node tracer (tests/gpu/ktrace.c): a CUPTI injection library, loaded into any
# CUDA program by CUDA_INJECTION64_PATH (tools/ktrace_report.py reads its TSV). Not in `all`.
$(BUILD)/lib/libqc_ktrace.so: tests/gpu/ktrace.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Wall -Wextra -shared -fPIC -isystem $(CUDA_ROOT)/include $< -o $@ -L$(CUDA_ROOT)/lib64 -lcupti \
		-Wl,-rpath,'$$ORIGIN'

test-gpu:
	@test -n "$(NVCC)" || { echo "test-gpu: nvcc not found"; exit 1; }
	@$(MAKE) --no-print-directory $(BINS) $(GPU_TEST_BIN)
	@QC_BIN=$(BUILD)/bin sh tests/gpu/run.sh $(GPU_TEST_BIN)

# Llama-3-8B-shape GPU benchmark (docs/bench.md, GPU section): run on the device.
bench-gpu:
	@test -n "$(NVCC)" || { echo "bench-gpu: nvcc not found"; exit 1; }
	@$(MAKE) --no-print-directory $(BINS) $(BUILD)/tests/gpu/bench_gemv
	@QC_BIN=$(BUILD)/bin QC_BENCH_GEMV=$(BUILD)/tests/gpu/bench_gemv sh tools/gpu_bench.sh

# Ours vs llama.cpp (built from $(LLAMA_SRC), a snapshot never committed) side by side:
# pp512, tg128, decode at 64/256 requests, % of the measured copy-rate roofline.
bench-gpu-compare:
	@test -n "$(NVCC)" || { echo "bench-gpu-compare: nvcc not found"; exit 1; }
	@$(MAKE) --no-print-directory $(BINS) $(BUILD)/tests/gpu/bench_copy
	@mkdir -p $(BUILD)/cmp-bin && cp $(BINS) $(BUILD)/tests/gpu/bench_copy $(BUILD)/cmp-bin/
	@QC_BIN=$(BUILD)/cmp-bin LLAMA_SRC=$(LLAMA_SRC) sh tools/gpu_compare.sh

FUZZ_SECONDS ?= 60
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
fuzz:
	@sh tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_SRC)

# NCCL for --tp N on CUDA: NVIDIA's wheel at the pinned version and hash into build/nccl
# (tools/nccl-requirements.txt); prints the QC_NCCL_LIB line to export (docs/tp.md).
nccl:
	@sh tools/nccl.sh $(BUILD)/nccl

# qserve under 64 concurrent streaming clients for LOADTEST_SECONDS (docs/serve.md).
LOADTEST_SECONDS ?= 60
loadtest: deps
	@$(MAKE) --no-print-directory $(BINS)
	@QC_BIN=$(BUILD)/bin sh tests/serve/loadtest.sh $(LOADTEST_SECONDS)

bench: $(BINS)
	@sh tests/bench_convert.sh

# CPU engine vs llama.cpp (LLAMA_BENCH=path/to/llama-bench); results in docs/bench.md.
bench-cpu: $(BINS)
	@QC_BIN=$(BUILD)/bin sh tests/bench_cpu.sh

sample: deps
	@$(MAKE) --no-print-directory $(BINS)
	@mkdir -p samples/out
	$(BUILD)/bin/mkgguf --preset tiny -o samples/out/tiny-llama.gguf
	$(BUILD)/bin/qconvert samples/out/tiny-llama.gguf --target cpu -o samples/out/tiny-llama.qb
	$(BUILD)/bin/qconvert inspect samples/out/tiny-llama.qb
	$(BUILD)/bin/qconvert verify samples/out/tiny-llama.qb
	$(BUILD)/bin/qrun samples/out/tiny-llama.qb -p "Once upon a time" -n 16

clean:
	rm -rf build build-asan

-include $(shell find $(BUILD) build-asan -name '*.d' 2>/dev/null)
