/* engine_cli.h — the engine options qrun, qrun bench and qserve share on their
 * command lines, and opening a model path (bundle or GGUF) for them.
 *
 * Owns: parsing and range-checking those flags (one message per bad value, naming
 * the flag), turning them into qc_engine_opts, the GGUF-through-a-temp-bundle open,
 * and the exit status of a failed open. Non-goals: each command's own flags.
 */
#ifndef QC_ENGINE_CLI_H
#define QC_ENGINE_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "engine.h"

struct qc_engine_cli {
	const char *device;    /* "cpu" (default) or "cuda" */
	float gpu_mem_util;    /* 0: the backend's default */
	long threads;          /* 0: online CPUs */
	long kv_mib;           /* K/V pool in MiB; 0: the engine's default */
	enum qc_kv_dtype kv_dtype; /* --kv-dtype; default QC_KV_F16 */
	long max_running;      /* 0: the command's default */
	long ctx;              /* longest sequence; 0: the model's, at most 4096 */
	long max_batch;        /* tokens per forward; 0: 512 */
	long max_prefill;      /* prompt tokens per forward (chunk); 0: the backend's default */
	bool no_prefix_cache;  /* --no-prefix-cache */
	bool no_verify;        /* --no-verify */
	long tp;               /* --tp N: tensor parallel ranks; 0: the bundle's own */
};

/* The flags' help lines, for a command's usage text. */
extern const char qc_engine_cli_help[];

void qc_engine_cli_init(struct qc_engine_cli *c);

/* When argv[*i] is one of the shared flags, consume it and its value if it takes one (advancing
 * *i) and return 1; a missing or out-of-range value prints "prog: FLAG 'V': ..."
 * to stderr and returns -1; any other argument returns 0, *i unchanged. */
int qc_engine_cli_parse(struct qc_engine_cli *c, const char *prog, int argc, char **argv, int *i);

/* o after qc_engine_opts_init, with the flags that were given applied (CUDA: the
 * backend, and float activations: the ggml rounding emulation is CPU-only). */
void qc_engine_cli_apply(const struct qc_engine_cli *c, struct qc_engine_opts *o);

/* Integer argument in [lo, hi]; false after printing "prog: flag 'v': ..." otherwise. */
bool qc_cli_long(const char *prog, const char *flag, const char *v, long lo, long hi, long *out);
/* Float argument in [lo, hi] (finite); false after a message otherwise. */
bool qc_cli_float(const char *prog, const char *flag, const char *v, double lo, double hi, float *out);

/* True when path starts with the GGUF magic. */
bool qc_path_is_gguf(const char *path);

/* With tensor parallel ranks, one line per rank to f, each starting "tag: ": its
 * device, heads, K/V heads, FFN width, vocabulary range and weight bytes. */
void qc_engine_cli_print_ranks(const struct qc_engine *e, const struct qc_engine_opts *o, const char *tag, FILE *f);

/* qc_engine_new over a bundle, or over a GGUF converted (target cpu, MoE fused)
 * into an unnamed file in $TMPDIR (O_TMPFILE, else unlinked at once), read back
 * through its descriptor: no signal, crash or SIGKILL leaves anything behind. A
 * GGUF of an architecture the engine does not run is refused before converting;
 * errors name path, never the temp bundle. When o->max_seq_tokens (--ctx) is above
 * the model's context length, prints one "tag: warning: ..." line to stderr; with
 * tensor parallel ranks, qc_engine_cli_print_ranks's lines to stderr. */
int qc_engine_open_path(const char *path, const char *tag, const struct qc_engine_opts *o,
			struct qc_engine **e, struct qc_err *err);

/* Exit status for a failed open: 2 when CUDA was asked for and the build has none
 * or the machine has no device, else 1. */
int qc_engine_cli_open_status(const struct qc_engine_cli *c, const struct qc_err *err);

#endif
