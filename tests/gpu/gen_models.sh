#!/bin/sh
# tests/gpu/gen_models.sh MKGGUF DIR — write the mkgguf models test_e2e runs for
# what no fixture has: qwen2 biases, qwen3 q/k norms (NEOX), qwen3moe, mixtral,
# qwen2moe (sigmoid-gated shared expert), linear rope + tied embeddings, YaRN,
# llama3 rope_freqs factors; gemma2 (soft-caps), phi3 (LongRoPE, fused tensors) and
# gemma3 (local RoPE base), each with a window of 8, shorter than the run; and a
# dense llama, a mixtral and a qwen2 with 8 query / 4 K/V heads, the models
# test_tp can cut 4 ways (tiny's 2 K/V heads stop at --tp 2). Used by
# tests/gpu/run.sh (make test-gpu) and tools/gpu_check.sh; test_e2e and test_tp
# read DIR from $QC_GPU_GEN.
set -eu
MK=$1
G=$2
mkdir -p "$G"
for spec in "qwen2 q8_0 --n-embd 128" "qwen3 q4_0 --n-embd 128" "qwen3moe q4_0 --n-embd 128" \
	    "mixtral bf16" "llama f16 --rope-scaling linear --tie-embeddings" \
	    "qwen2moe q8_0 --n-embd 128 --n-ff-shexp 256" \
	    "llama q8_0 --rope-scaling yarn --ctx 256 --rope-orig-ctx 64" \
	    "llama q4_0 --rope-scaling llama3 --ctx 256 --rope-orig-ctx 64" \
	    "gemma2 q8_0 --sliding-window 8" \
	    "phi3 q8_0 --rope-scaling longrope --rope-orig-ctx 64 --sliding-window 8" \
	    "gemma3 q8_0 --sliding-window 8" \
	    "llama q4_0 --n-embd 256 --n-head 8 --n-head-kv 4 --n-ff 512" \
	    "mixtral q8_0 --n-embd 256 --n-head 8 --n-head-kv 4 --n-ff 256" \
	    "qwen2 q8_0 --n-embd 256 --n-head 8 --n-head-kv 4 --n-ff 512"; do
	set -- $spec
	a=$1 t=$2
	shift 2
	n="gen-$a-$t"
	case "$*" in *yarn*) n="$n-yarn" ;; *llama3*) n="$n-llama3" ;; *"--n-head-kv 4"*) n="$n-kv4" ;; esac
	"$MK" --preset tiny --arch "$a" --type "$t" --weight-std 0.1 "$@" -o "$G/$n.gguf" >/dev/null
done
