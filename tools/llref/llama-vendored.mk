# llama-vendored.mk — libllama.so from the llama.cpp tree ollama vendored at 9db4bdbad^
# (llama.cpp ec98e2002, Dec 2025; c392e50 predates qwen3/qwen3moe). CPU only, configured
# like the c392e50 reference build: llamafile sgemm, CPU repack, -march=native, no OpenMP.
# Usage (outside the repository's build; nothing here is committed but this file):
#   git -C OLLAMA_GIT archive '9db4bdbad^' llama/llama.cpp ml/backend/ggml/ggml | tar -x -C SRC
#   make -f tools/llref/llama-vendored.mk SRC=SRC OUT=OUTDIR -j2
G := $(SRC)/ml/backend/ggml/ggml
L := $(SRC)/llama/llama.cpp
DEFS := -DNDEBUG -DGGML_USE_CPU -DGGML_USE_LLAMAFILE -DGGML_USE_CPU_REPACK \
	-DGGML_VERSION='"ec98e2002"' -DGGML_COMMIT='"ec98e2002"' -D_GNU_SOURCE -DGGML_SCHED_MAX_COPIES=4
INC := -I$(G)/include -I$(G)/src -I$(G)/src/ggml-cpu -I$(L)/include -I$(L)/src
FL := -O2 -march=native -fPIC -pthread $(DEFS) $(INC)
CSRC := $(G)/src/ggml.c $(G)/src/ggml-alloc.c $(G)/src/ggml-quants.c $(G)/src/ggml-cpu/ggml-cpu.c \
	$(G)/src/ggml-cpu/quants.c $(G)/src/ggml-cpu/arch/x86/quants.c
CXXSRC := $(G)/src/ggml.cpp $(G)/src/ggml-backend.cpp $(G)/src/ggml-backend-reg.cpp $(G)/src/ggml-opt.cpp \
	$(G)/src/ggml-threading.cpp $(G)/src/gguf.cpp $(G)/src/ggml-cpu/ggml-cpu.cpp $(G)/src/ggml-cpu/ops.cpp \
	$(G)/src/ggml-cpu/vec.cpp $(G)/src/ggml-cpu/repack.cpp $(G)/src/ggml-cpu/binary-ops.cpp \
	$(G)/src/ggml-cpu/unary-ops.cpp $(G)/src/ggml-cpu/traits.cpp $(G)/src/ggml-cpu/hbm.cpp \
	$(G)/src/ggml-cpu/llamafile/sgemm.cpp $(G)/src/ggml-cpu/arch/x86/repack.cpp \
	$(G)/src/ggml-cpu/amx/amx.cpp $(G)/src/ggml-cpu/amx/mmq.cpp \
	$(wildcard $(L)/src/*.cpp) $(wildcard $(L)/src/models/*.cpp)
OBJ := $(patsubst $(SRC)/%,$(OUT)/obj/%.o,$(CSRC) $(CXXSRC))

$(OUT)/libllama.so: $(OBJ)
	g++ -shared -pthread -o $@ $^
$(OUT)/obj/%.c.o: $(SRC)/%.c
	@mkdir -p $(dir $@)
	gcc -std=gnu11 $(FL) -c $< -o $@
$(OUT)/obj/%.cpp.o: $(SRC)/%.cpp
	@mkdir -p $(dir $@)
	g++ -std=gnu++17 $(FL) -c $< -o $@
