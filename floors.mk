# floors.mk — the house's floors: which folder may include which (docs/house.md).
#
# One row per room: DIR_<room> is its folder, USE_<room> the rooms below it whose
# headers it may include. The Makefile compiles every file of a room with -I for its
# own folder and for its USE list only, so an include that goes up a floor does not
# compile; tests/test_floors.c reads this same file and checks every include in the
# tree (and proves on a planted wrong-way include that it can fail).
# A file belongs to the room with the longest DIR that is a prefix of its path.
# Lists are written out in full (no transitive closure) so a row reads alone.

ROOMS := base quant formats convert ops text engine cpu kernels cuda serve runtime samples

# errors, arena, cursor, mapped files, configuration: needs nothing
DIR_base    := base
USE_base    :=
# the type table, block structs, fp16, reference decoders, layouts and their pack/unpack
DIR_quant   := quant
USE_quant   := base
# GGUF, safetensors, Hugging Face sources, tar, the bundle
DIR_formats := formats
USE_formats := base quant
# qconvert: open -> normalize -> fuse -> repack -> checksum -> write
DIR_convert := convert
USE_convert := base quant formats
# the ops in plain C: the CPU backend runs them, every CUDA kernel is tested against them
DIR_ops     := runtime/ops
USE_ops     := base quant
# vocabularies, tokenizers, detokenizer, chat templates, UTF-8
DIR_text    := runtime/text
USE_text    := base quant formats
# engine, scheduler, paged K/V blocks, model description, sampler, backend interface
DIR_engine  := runtime/engine
USE_engine  := base quant formats ops text
# the plain-C backend and its fast matmuls
DIR_cpu     := runtime/cpu
USE_cpu     := base quant formats ops text engine
# CUDA kernels, one op per .cu, each with a same-named reference in runtime/ops
DIR_kernels := runtime/cuda/kernels
USE_kernels := base quant ops
# the CUDA backend (graphs, profiling) over those kernels
DIR_cuda    := runtime/cuda
USE_cuda    := base quant formats ops text engine kernels
# qserve's HTTP server, requests, responses, metrics
DIR_serve   := runtime/serve
USE_serve   := base quant formats ops text engine
# the programs: qrun, qserve and the flags they share (they may use every room)
DIR_runtime := runtime
USE_runtime := base quant formats convert ops text engine cpu cuda serve
# mkgguf, the sample-model writer
DIR_samples := samples
USE_samples := base quant formats
