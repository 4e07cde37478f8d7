# qconvert — one plain Makefile, one target per deliverable.
#   make            build/bin/{qconvert,qrun,mkgguf} (+ CUDA objects when nvcc exists)
#   make test       every CPU test; ends with "N passed, N failed"
#   make asan       the same tests under AddressSanitizer + UBSan
#   make fuzz       libFuzzer harnesses (clang), FUZZ_SECONDS each
#   make bench      conversion throughput benchmark (docs/bench.md)
#   make cuda-check compile the CUDA sources only (no GPU needed)

CC      ?= cc
BUILD   ?= build
# Warnings are errors in CI so "warning-free" stays true on main.
WERROR  := $(if $(CI),-Werror,)
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wformat=2 -Wcast-qual -Wno-format-nonliteral
# _GNU_SOURCE: mremap/madvise/O_TMPFILE-free POSIX extras; no -ffast-math anywhere:
# the C reference is the ground truth for every kernel.
CFLAGS  ?= -O2 -g
# project flags stay even when CFLAGS is given on the command line (make asan does)
QCFLAGS := -std=c11 -D_GNU_SOURCE -MMD -MP $(WARN) $(WERROR) -Iformats -Ikernels -Iconvert -Iruntime
LDLIBS  := -lcjson -lxxhash -larchive -lpcre2-8 -licuuc -lm -lpthread

# CUDA: built whenever nvcc is found. sm_90a for Hopper (wgmma/TMA), sm_80 for Ampere.
CUDA_HOME ?= /usr/local/cuda
NVCC    := $(shell command -v nvcc 2>/dev/null || (test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc))
NVFLAGS := -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80 \
	   -Iformats -Ikernels -Xcompiler -Wall,-Wextra

LIB_SRC := $(wildcard formats/*.c kernels/ref/*.c) \
	   $(filter-out convert/qconvert.c,$(wildcard convert/*.c)) \
	   $(filter-out %_main.c,$(wildcard runtime/*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
LIB     := $(BUILD)/libqc.a

TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
CU_SRC   := $(wildcard kernels/cuda/*.cu)
CU_OBJ   := $(CU_SRC:%.cu=$(BUILD)/obj/%.o)

BINS := $(BUILD)/bin/qconvert $(BUILD)/bin/mkgguf $(BUILD)/bin/qrun

.PHONY: all deps test check asan fuzz bench cuda-check clean sample tests-build
all: $(BINS) $(if $(NVCC),cuda-check)

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

$(BUILD)/bin/mkgguf: $(BUILD)/obj/samples/mkgguf.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(QCFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/bin/qrun: $(BUILD)/obj/runtime/qrun_main.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(QCFLAGS) $^ -o $@ $(LDLIBS)

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
	$(NVCC) $(NVFLAGS) -c $< -o $@

cuda-check: $(CU_OBJ)
	@echo "cuda-check: $(words $(CU_OBJ)) CUDA source(s) compiled for sm_90a and sm_80$(if $(NVCC),, (nvcc not found: skipped))"

FUZZ_SECONDS ?= 60
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
fuzz:
	@sh tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_SRC)

bench: $(BINS)
	@sh tests/bench_convert.sh

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
