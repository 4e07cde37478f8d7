/* hf_util.h — what the Hugging Face tests (tests/test_hf*.c) share: the qconvert runner
 * and a temp folder per binary, the model description (struct model), safetensors values
 * as float, bundle tensors dumped through the library's dump path, and the independent
 * name mapping (llama.cpp tensor_mapping.py, by hand) with llama.cpp's Q/K RoPE
 * permutation undone. Header-only with static functions, as check.h is.
 * Bloat: no reader of its own — safetensors come through hf_source.h, bundles bundle.h.
 */
#ifndef QC_HF_UTIL_H
#define QC_HF_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bundle.h"
#include "check.h"
#include "dump.h"
#include "hf_source.h"
#include "safetensors.h"

extern char **environ;

static char qc_bin[512];
static char tmpdir[256];

struct model {
	const char *name;          /* tests/data/hf/<name> (folder or archive) */
	const char *ref;           /* tests/data/hf/<ref>.reference.json */
	bool permute;              /* llama family: NORM rope, Q/K rows permuted */
	int n_head, n_head_kv, head_dim;
	int moe;                   /* 0 dense, 1 mixtral names, 2 qwen names */
	bool tied;
	bool runtime_required;     /* the engine must run it (else: skip when unsupported) */
	bool engine;               /* false: conversion and dumps only (see the entry) */
};

/* qc_bin from $QC_BIN (else build/bin), and a fresh /tmp/<prefix>.XXXXXX in tmpdir;
 * false (after perror) when the folder cannot be made. */
static inline bool hf_test_init(const char *prefix)
{
	const char *bin = getenv("QC_BIN");
	snprintf(qc_bin, sizeof qc_bin, "%s/qconvert", bin && *bin ? bin : "build/bin");
	snprintf(tmpdir, sizeof tmpdir, "/tmp/%s.XXXXXX", prefix);
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return false;
	}
	return true;
}

/* ---- helpers ------------------------------------------------------------------ */

static inline int run_cli(const char *const *args, const char *err_path)
{
	return check_spawn(qc_bin, args, err_path);
}

static inline bool file_exists(const char *p)
{
	return check_exists(p);
}

/* Entries of dir other than "." / ".." and the names in keep (NULL-terminated). */
static inline int count_extra(const char *dir, const char *const *keep)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	while (d && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		bool k = false;
		for (int i = 0; keep && keep[i]; i++)
			k |= strcmp(e->d_name, keep[i]) == 0;
		n += !k;
	}
	if (d)
		closedir(d);
	return n;
}

static inline float f16_to_f32(uint16_t h)
{
	int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
	double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
	return (float)(s ? -v : v);
}

static inline float bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* Element i of a safetensors tensor as float (F32/F16/BF16). */
static inline float st_value(const struct qc_hf_tensor *t, uint64_t i)
{
	if (t->t->dtype == QC_ST_F32) {
		float f;
		memcpy(&f, t->data + 4 * i, 4);
		return f;
	}
	uint16_t h;
	memcpy(&h, t->data + 2 * i, 2);
	return t->t->dtype == QC_ST_F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

/* Dump a bundle tensor (or part) through the library's dump path: float32 values. */
static inline float *dump(const struct qc_bundle *b, const char *name, size_t *n)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	struct qc_err err = { 0 };
	int rc = f ? qc_dump_bundle(b, name, f, &err) : -1;
	if (f)
		fclose(f);
	if (rc) {
		fprintf(stderr, "  dump %s: %s\n", name, err.msg);
		free(buf);
		return NULL;
	}
	*n = len / 4;
	return (float *)(void *)buf;
}

static inline bool copy_file(const char *from, const char *to)
{
	size_t n;
	char *b = check_read_file(from, &n);
	FILE *f = b ? fopen(to, "wb") : NULL;
	bool ok = f && fwrite(b, 1, n, f) == n;
	if (f)
		ok = fclose(f) == 0 && ok;
	free(b);
	return ok;
}

/* Replace the first occurrence of from by to (same length) in file p. */
static inline bool patch_file(const char *p, const char *from, const char *to)
{
	size_t n;
	char *b = check_read_file(p, &n);
	char *hit = b ? memmem(b, n, from, strlen(from)) : NULL;
	bool ok = hit && strlen(from) == strlen(to);
	if (ok) {
		memcpy(hit, to, strlen(to));
		FILE *f = fopen(p, "wb");
		ok = f && fwrite(b, 1, n, f) == n;
		if (f)
			ok = fclose(f) == 0 && ok;
	}
	free(b);
	return ok;
}

static inline void rm_rf(const char *dir)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "  could not remove %s\n", dir);
}

/* ---- independent name mapping (llama.cpp tensor_mapping.py, by hand) --------- */

static inline bool hf_name(const struct model *m, const char *gguf, int expert, char *out, size_t len)
{
	static const char *const top[][2] = {
		{ "token_embd.weight", "model.embed_tokens.weight" },
		{ "output_norm.weight", "model.norm.weight" },
		{ "output.weight", "lm_head.weight" },
	};
	for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
		if (!strcmp(gguf, top[i][0])) {
			snprintf(out, len, "%s", top[i][1]);
			return true;
		}
	int layer, k = 0;
	if (sscanf(gguf, "blk.%d.%n", &layer, &k) != 1 || !k)
		return false;
	const char *rest = gguf + k;
	const char *mx = m->moe == 1 ? "block_sparse_moe" : "mlp";
	char e1[96], e2[96], e3[96], g[64];
	snprintf(e1, sizeof e1, m->moe == 1 ? "%s.experts.%d.w1.weight" : "%s.experts.%d.gate_proj.weight", mx, expert);
	snprintf(e2, sizeof e2, m->moe == 1 ? "%s.experts.%d.w3.weight" : "%s.experts.%d.up_proj.weight", mx, expert);
	snprintf(e3, sizeof e3, m->moe == 1 ? "%s.experts.%d.w2.weight" : "%s.experts.%d.down_proj.weight", mx, expert);
	snprintf(g, sizeof g, "%s.gate.weight", mx);
	const char *const per[][2] = {
		{ "attn_norm.weight", "input_layernorm.weight" },
		{ "attn_q.weight", "self_attn.q_proj.weight" },
		{ "attn_k.weight", "self_attn.k_proj.weight" },
		{ "attn_v.weight", "self_attn.v_proj.weight" },
		{ "attn_output.weight", "self_attn.o_proj.weight" },
		{ "attn_q.bias", "self_attn.q_proj.bias" },
		{ "attn_k.bias", "self_attn.k_proj.bias" },
		{ "attn_v.bias", "self_attn.v_proj.bias" },
		{ "attn_output.bias", "self_attn.o_proj.bias" },
		{ "attn_q_norm.weight", "self_attn.q_norm.weight" },
		{ "attn_k_norm.weight", "self_attn.k_norm.weight" },
		{ "ffn_norm.weight", "post_attention_layernorm.weight" },
		{ "ffn_gate.weight", "mlp.gate_proj.weight" },
		{ "ffn_up.weight", "mlp.up_proj.weight" },
		{ "ffn_down.weight", "mlp.down_proj.weight" },
		{ "ffn_gate_inp.weight", g },
		{ "ffn_gate_exps.weight", e1 },
		{ "ffn_up_exps.weight", e2 },
		{ "ffn_down_exps.weight", e3 },
		{ "ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight" },
		{ "ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight" },
		{ "ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight" },
		{ "ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight" },
	};
	for (size_t i = 0; i < sizeof per / sizeof per[0]; i++)
		if (!strcmp(rest, per[i][0])) {
			snprintf(out, len, "model.layers.%d.%s", layer, per[i][1]);
			return true;
		}
	return false;
}

/* GGUF row r of a Q/K weight (or bias element) → HF row, from llama.cpp's definition
 * w.reshape(n_head, 2, hd/2, ...).swapaxes(1, 2).reshape(w.shape): GGUF row
 * (h, a, b) with a < hd/2, b < 2 is HF row (h, b, a). */
static inline int64_t unpermute(int64_t r, int64_t n_head, int64_t n_rows)
{
	int64_t hd = n_rows / n_head, h = r / hd, a = (r % hd) / 2, b = r % 2;
	return h * hd + b * (hd / 2) + a;
}

#endif
