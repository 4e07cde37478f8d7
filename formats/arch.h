/* arch.h — what a GGUF general.architecture name means: the features its forward
 * pass needs (norm, activation, RoPE style and scaling, biases, q/k norm,
 * soft-capping, sliding window, MoE, tied embeddings), one table for qconvert and
 * the runtime (docs/bundle.md "Architectures" repeats it for users).
 * Owns: the feature list (arch_feat.def), the architecture table qc_archs, the
 * features each backend implements (qc_arch_backends, QC_ARCH_RUNTIME_FEATURES), and refining a
 * row by a manifest's config/metadata (qc_arch_describe).
 * It lives in formats/ because general.architecture is a format concept, and both
 * convert/ (inspect, the convert-time warning) and runtime/engine (the load check)
 * must read it; convert/ may not include the engine (floors.mk).
 * Bloat: no hyper-parameters (gguf_meta.c), no tensor names, nothing stored in a
 * bundle: features are computed at inspect/load so bundles stay byte-identical.
 * Reference: llama.cpp llama-arch.cpp / llama-model.cpp (load_hparams, build_*:
 * which arch has which norm, activation, rope type, soft-cap and window; facts only). */
#ifndef QC_ARCH_H
#define QC_ARCH_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum qc_arch_feat {
#define X(id, key, phrase) QC_AF_##id##_BIT,
#include "arch_feat.def"
#undef X
	QC_AF_COUNT
};
#define QC_AF(id) (UINT64_C(1) << QC_AF_##id##_BIT)

struct qc_arch_feat_info {
	const char *key;    /* JSON spelling */
	const char *phrase; /* for people */
};
extern const struct qc_arch_feat_info qc_arch_feats[QC_AF_COUNT];

/* How an architecture treats expert keys (llama.cpp builds some archs dense
 * whatever expert_count says, and refuses others without experts). */
enum qc_arch_experts { QC_EXPERTS_NONE, QC_EXPERTS_OPTIONAL, QC_EXPERTS_REQUIRED };

struct qc_arch {
	const char *name;      /* general.architecture, or a family name (see stored_as) */
	const char *stored_as; /* NULL: name is a GGUF architecture; else the one this
				* family is written as (mistral: "llama"), listed so its
				* features are documented and tested, never looked up */
	uint64_t feats;        /* QC_AF() bits the forward pass needs */
	enum qc_arch_experts experts;
	int window_pattern;    /* layers per window period: 0 none, 1 every layer
				* windowed, n: n-1 windowed layers then one global */
	const char *examples;  /* model families, for the docs table */
};
extern const struct qc_arch qc_archs[];
extern const size_t qc_n_archs;

/* The runtime's columns, one per backend: what runtime/engine/model.c and each
 * backend's forward pass implement. They sit here, not in the engine, so qconvert
 * can warn at convert time without linking the engine; tests/test_arch.c holds
 * them to what qc_model_open and each backend's create really accept. Add a bit
 * to a backend's column when it learns the feature.
 * QC_ARCH_BASE_FEATURES: what both backends run for every architecture. */
#define QC_ARCH_BASE_FEATURES                                                                 \
	(QC_AF(RMSNORM) | QC_AF(SWIGLU) | QC_AF(ROPE_NORM) | QC_AF(ROPE_NEOX) | QC_AF(ROPE_LINEAR) | \
	 QC_AF(ROPE_YARN) | QC_AF(QKV_BIAS) | QC_AF(QK_NORM) | QC_AF(MOE) | QC_AF(MOE_RENORM) |      \
	 QC_AF(MOE_SHARED) | QC_AF(TIED_EMBD))
/* Extras, each checked against a reference for some architectures only (the rows
 * of qc_arch_checked): Gemma 2's (RMSNORM_1P is a plain RMSNorm on a GGUF, whose
 * converter stores 1 + w; llama.cpp build_gemma2) and Phi-3's (build_phi3). */
#define QC_ARCH_EXTRA_GEMMA2                                                                  \
	(QC_AF(RMSNORM_1P) | QC_AF(GEGLU_TANH) | QC_AF(EMBD_SCALE) | QC_AF(POST_NORM) |             \
	 QC_AF(ATTN_SOFTCAP) | QC_AF(FINAL_SOFTCAP) | QC_AF(SLIDING_WINDOW))
#define QC_ARCH_EXTRA_PHI3 (QC_AF(FUSED_QKV) | QC_AF(FUSED_GATE_UP) | QC_AF(LONGROPE) | QC_AF(SLIDING_WINDOW))
/* Mistral's (stored as llama) and Qwen2's window on every layer, as transformers
 * applies it (its SDPA/eager mask: the last W positions); llama.cpp c392e50
 * ignores the key for these, and its converter never writes it. */
#define QC_ARCH_EXTRA_HF_WINDOW QC_AF(SLIDING_WINDOW)
/* Gemma 3's, checked against transformers (Gemma3ForCausalLM): Gemma 2's block
 * without the soft-caps, plus the local layers' own RoPE base. */
#define QC_ARCH_EXTRA_GEMMA3                                                                  \
	(QC_AF(RMSNORM_1P) | QC_AF(GEGLU_TANH) | QC_AF(EMBD_SCALE) | QC_AF(POST_NORM) |             \
	 QC_AF(SLIDING_WINDOW) | QC_AF(ROPE_LOCAL))
#define QC_ARCH_EXTRAS (QC_ARCH_EXTRA_GEMMA2 | QC_ARCH_EXTRA_PHI3 | QC_ARCH_EXTRA_GEMMA3 | QC_ARCH_EXTRA_HF_WINDOW)
/* The CPU's column: the base plus every extra (backend_cpu.c). */
#define QC_ARCH_CPU_FEATURES (QC_ARCH_BASE_FEATURES | QC_ARCH_EXTRAS)
/* The CUDA column: the base plus every extra, computed as the CPU computes them
 * (backend_cuda.c; tests/gpu/test_e2e.c compares the two on gemma2, gemma3 and
 * phi3 models). */
#define QC_ARCH_CUDA_FEATURES (QC_ARCH_BASE_FEATURES | QC_ARCH_EXTRAS)
/* A backend's extras count for the architecture whose graph they were checked
 * against only (gemma, falcon graphs differ: q scaling, window rules, parallel
 * blocks; llama ignores a stated soft-cap): one row per architecture, the extras
 * it may use (on a backend whose column has them). */
struct qc_arch_checked {
	const char *arch;
	uint64_t feats;
};
extern const struct qc_arch_checked qc_arch_checked[];
extern const size_t qc_n_arch_checked;
/* What some backend of this qrun/qserve implements (the CPU's is a superset). */
#define QC_ARCH_RUNTIME_FEATURES (QC_ARCH_CPU_FEATURES | QC_ARCH_CUDA_FEATURES)

enum qc_arch_backend { QC_ARCH_BACKEND_CPU, QC_ARCH_BACKEND_CUDA, QC_ARCH_BACKEND_COUNT };

struct qc_arch_backend_info {
	const char *name;   /* for people: "CPU", "CUDA" */
	uint64_t feats;     /* QC_AF() bits its forward pass implements */
};
extern const struct qc_arch_backend_info qc_arch_backends[QC_ARCH_BACKEND_COUNT];

/* The row for GGUF architecture name (rows with stored_as are never found), or NULL. */
const struct qc_arch *qc_arch_find(const char *name);

/* One model's features: its row refined by what its manifest says. */
struct qc_arch_desc {
	const struct qc_arch *arch; /* NULL: the name is in no row */
	char name[64];              /* config.architecture ("" when absent) */
	uint64_t feats;
	double attn_softcap, final_softcap; /* from metadata; 0: not stated */
	int64_t sliding_window;             /* tokens, from metadata; 0: not stated */
	int window_pattern;                 /* the row's, 0 when the window is off */
	int64_t n_expert, n_expert_used, n_expert_shared;
};

/* Fill d from manifest "config" (architecture, experts, rope scaling, LongRoPE
 * tables, tied embeddings, context) and "metadata" ("<arch>.attn_logit_softcapping",
 * "<arch>.final_logit_softcapping", "<arch>.attention.sliding_window"; for phi3
 * without the window key, llama.cpp's defaults for the models that predate it).
 * Never fails: a key that is absent or not a number leaves the row's answer. */
void qc_arch_describe(const cJSON *manifest, struct qc_arch_desc *d);

/* Features in d that no backend implements (QC_ARCH_RUNTIME_FEATURES lacks): 0
 * when some backend runs it; an unknown arch needs everything. */
uint64_t qc_arch_missing(const struct qc_arch_desc *d);

/* Features in d that backend b lacks; an unknown arch needs everything. */
uint64_t qc_arch_missing_on(const struct qc_arch_desc *d, enum qc_arch_backend b);

/* The d whose 1/sqrt(d) multiplies q after RoPE, scores then unscaled (llama.cpp
 * build_gemma2, build_phi3, build_gemma3): head_dim, or n_embd / n_head for the
 * 27B Gemma models, which llama.cpp tells by their layer count (their
 * query_pre_attn_scalar; a GGUF does not store it). 0: arch scales scores as usual.
 * qconvert holds a Hugging Face config's query_pre_attn_scalar to it. */
int64_t qc_arch_q_scale_dim(const char *arch, int64_t n_layer, int64_t n_embd, int64_t n_head, int64_t head_dim);

/* The phrases of the bits in mask, ", "-separated, into buf (truncated to len). Returns buf. */
const char *qc_arch_feat_list(uint64_t mask, char *buf, size_t len);

#endif
