/* mkgguf_presets.c — mkgguf's model presets and the architectures it can write.
 *
 * Owns: the --preset table (tiny, tiny-moe, llama3-8b, llama3-70b, cpu-bench, bench4g: shapes as
 * llama.cpp names them) and the general.architecture names. Adding a preset is one
 * row here; its tensors come from mkgguf_plan.c, its keys from mkgguf_meta.c.
 */
#include "mkgguf.h"

#define BENCH_MIN_BYTES ((42ull << 30) / 10) /* 4.2 GiB: past every 32-bit offset */

const char *const qc_mkgguf_arch_names[ARCH_COUNT] = {
	[ARCH_LLAMA] = "llama", [ARCH_QWEN2] = "qwen2", [ARCH_QWEN3] = "qwen3",
	[ARCH_QWEN2MOE] = "qwen2moe", [ARCH_QWEN3MOE] = "qwen3moe", [ARCH_GEMMA2] = "gemma2",
	[ARCH_PHI3] = "phi3", [ARCH_GEMMA3] = "gemma3",
};

const struct preset qc_mkgguf_presets[] = {
	{ "tiny", "small llama: n_embd 64, 2 layers, 4/2 heads, n_ff 192, vocab 300",
	  { ARCH_LLAMA, 64, 2, 192, 4, 2, 300, 0, 0, 512, 10000.0f, 1e-5f }, 0 },
	{ "tiny-moe", "tiny as mixtral: 4 experts, 2 used, stacked *_exps + router",
	  { ARCH_LLAMA, 64, 2, 192, 4, 2, 300, 4, 2, 512, 10000.0f, 1e-5f }, 0 },
	{ "llama3-8b", "Llama-3-8B shapes: 4096, 32 layers, n_ff 14336, 32/8 heads, vocab 128256",
	  { ARCH_LLAMA, 4096, 32, 14336, 32, 8, 128256, 0, 0, 8192, 500000.0f, 1e-5f }, 0 },
	{ "llama3-70b", "Llama-3-70B shapes: 8192, 80 layers, n_ff 28672, 64/8 heads, vocab 128256",
	  { ARCH_LLAMA, 8192, 80, 28672, 64, 8, 128256, 0, 0, 8192, 500000.0f, 1e-5f }, 0 },
	{ "cpu-bench", "llama 2048/5632, 8 layers, 16/4 heads, vocab 32000 (0.5 B; matmul-bound)",
	  { ARCH_LLAMA, 2048, 8, 5632, 16, 4, 32000, 0, 0, 4096, 10000.0f, 1e-5f }, 0 },
	{ "bench4g", "llama 4096/11008, 32/8 heads, vocab 32000; layers until the file >= 4.2 GiB",
	  { ARCH_LLAMA, 4096, 0, 11008, 32, 8, 32000, 0, 0, 4096, 10000.0f, 1e-5f }, BENCH_MIN_BYTES },
};

const size_t qc_mkgguf_n_presets = sizeof qc_mkgguf_presets / sizeof qc_mkgguf_presets[0];

bool qc_mkgguf_has_experts(enum arch a)
{
	return a == ARCH_QWEN2MOE || a == ARCH_QWEN3MOE;
}
