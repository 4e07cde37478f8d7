/* qconvert.c — the command line: convert, inspect, verify, dump.
 * Only main() exits. Inputs are recognized by their bytes (GGUF magic, the bundle's
 * header member, tar/gzip/zip/xz/zstd magic for a Hugging Face archive) or as a
 * directory (a Hugging Face folder), not by their names. Exit codes: 0 ok, 1 bad
 * input or failed check, 2 usage error. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bundle.h"
#include "bundle_tp.h"
#include "convert.h"
#include "dump.h"
#include "hf_convert.h"
#include "inspect.h"
#include "plan.h"
#include "qc_config.h"
#include "verify.h"

static const char *prog = "qconvert";

static const char usage_main[] =
	"usage: qconvert MODEL --target {cpu,sm80,sm86,sm89,sm90,sm100} [-o OUT.qb] [--tp N] [options]\n"
	"       qconvert inspect FILE [--json]\n"
	"       qconvert verify BUNDLE [--deep]\n"
	"       qconvert dump FILE TENSOR [-o OUT.f32]\n"
	"\n"
	"Converts a model into one checksummed, mmap-able bundle laid out for the target's\n"
	"kernels. MODEL is a GGUF file (any type llama.cpp writes; split sets given by any\n"
	"shard) or a Hugging Face folder (config.json, *.safetensors, tokenizer.json) or a\n"
	".tar/.tar.gz/.zip of one (docs/hf.md lists the architectures).\n"
	"\n"
	"convert options:\n"
	"  --target T     cpu, sm80, sm86, sm89, sm90 or sm100 (required; sm100 also stores\n"
	"                 NVFP4 with CUTLASS block-scale tiles, docs/layout-nvfp4.md; sm90\n"
	"                 also packs stacked MoE experts in the marlin layouts)\n"
	"  -o, --out F    output bundle (default: MODEL.<target>.qb beside the input)\n"
	"  --align N      tensor data alignment in bytes, a power of two >= 4096 (default 4096)\n"
	"  --no-fuse      keep every tensor separate; by default MoE gate and up experts are\n"
	"                 fused, and for sm80+ Q|K|V and gate|up where the tensor-core\n"
	"                 layout takes them (docs/bundle.md, \"Fusion\")\n"
	"  --tp N         shard for N-way tensor parallelism (1 to 8): rank r's members\n"
	"                 'tp<r>.<name>' hold its heads, FFN rows/columns and vocabulary\n"
	"                 range, each rank's in one byte range (docs/tp.md). n_head,\n"
	"                 n_head_kv and the FFN widths must be divisible by N; refused, naming\n"
	"                 the tensor, otherwise (and for a column split off the encoding's\n"
	"                 blocks or of a GPTQ act-order weight)\n"
	"  -q, --quiet    no notes or summary on stderr\n"
	"  -h, --help     this text; 'qconvert CMD --help' for a subcommand\n"
	"  --version      print the version\n"
	"\n"
	"The output is written to a temporary file beside it and renamed at the end; on any\n"
	"error nothing is left behind and the exit code is 1. An output that is an input\n"
	"(the same file, a symlink or hard link to it, any shard or folder member) is\n"
	"refused before anything is written.\n";

static const char usage_inspect[] =
	"usage: qconvert inspect FILE [--json]\n"
	"Describe a .gguf or a bundle: architecture, parameter count, bytes per encoding,\n"
	"tokenizer summary and every tensor (name, shape ne[0..], encoding, offset, size); for a\n"
	"--tp bundle also each rank's byte range, widths and vocabulary range.\n"
	"  --json   print the same report as one JSON object\n";

static const char usage_verify[] =
	"usage: qconvert verify BUNDLE [--deep]\n"
	"Check the bundle header and manifest checksums and re-hash every tensor (XXH3-64).\n"
	"Exits 1 naming the first bad tensor.\n"
	"  --deep   also decode every tensor and require finite values\n";

static const char usage_dump[] =
	"usage: qconvert dump FILE TENSOR [-o OUT.f32]\n"
	"Write TENSOR dequantized to little-endian float32, row-major with ne[0] fastest, from\n"
	"a .gguf or a bundle (target layouts undone; the halves of a fused MoE w13 tensor can be\n"
	"named by their source names, e.g. blk.0.ffn_gate_exps.weight). In a --tp bundle an\n"
	"original name (blk.0.attn_q.weight) is put back together from the ranks' shards, and a\n"
	"shard is named by its member name (tp1.blk.0.attn_q.weight). Without -o, writes to\n"
	"stdout unless it is a terminal.\n";

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "%s: ", prog);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n(try '%s --help')\n", prog);
	return 2;
}

static int fail(const struct qc_err *err)
{
	qc_err_print(err, prog, stderr);
	return 1;
}

static void on_signal(int sig)
{
	const char *tmp = qc_bundle_writer_tmp_path();
	if (tmp)
		unlink(tmp);
	tmp = qc_hf_convert_tmp_path();
	if (tmp)
		unlink(tmp);
	signal(sig, SIG_DFL);
	raise(sig);
}

enum input_kind { INPUT_GGUF, INPUT_BUNDLE, INPUT_DIR, INPUT_HF_ARCHIVE, INPUT_UNKNOWN };

static enum input_kind sniff(const char *path, struct qc_err *err)
{
	struct stat st;
	if (stat(path, &st) != 0) {
		qc_err_set(err, QC_EIO, path, NULL, -1, "cannot open: %s", strerror(errno));
		return INPUT_UNKNOWN;
	}
	if (S_ISDIR(st.st_mode))
		return INPUT_DIR;
	unsigned char b[1024] = {0};
	FILE *f = fopen(path, "rb");
	if (!f) {
		qc_err_set(err, QC_EIO, path, NULL, -1, "cannot open: %s", strerror(errno));
		return INPUT_UNKNOWN;
	}
	size_t n = fread(b, 1, sizeof b, f);
	fclose(f);
	if (n >= 4 && memcmp(b, "GGUF", 4) == 0)
		return INPUT_GGUF;
	if (n >= 520 && memcmp(b, QC_BUNDLE_HDR_MEMBER, sizeof QC_BUNDLE_HDR_MEMBER) == 0 &&
	    memcmp(b + 512, "QCBUNDLE", 8) == 0)
		return INPUT_BUNDLE;
	static const struct { size_t off, n; const char *magic; } archives[] = {
		{ 257, 5, "ustar" }, { 0, 2, "\x1f\x8b" }, { 0, 4, "PK\x03\x04" },
		{ 0, 6, "\xfd" "7zXZ\x00" }, { 0, 4, "\x28\xb5\x2f\xfd" },
	};
	for (size_t i = 0; i < sizeof archives / sizeof archives[0]; i++)
		if (n >= archives[i].off + archives[i].n && memcmp(b + archives[i].off, archives[i].magic, archives[i].n) == 0)
			return INPUT_HF_ARCHIVE;
	qc_err_set(err, QC_EFORMAT, path, NULL, 0,
		   "neither a GGUF file, a qconvert bundle nor an archive of a Hugging Face folder (unrecognized first bytes)");
	return INPUT_UNKNOWN;
}

static bool is_help(const char *a)
{
	return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0;
}

static int cmd_convert(int argc, char **argv)
{
	struct qc_convert_opts o = { .alignment = QC_BUNDLE_ALIGN, .plan_flags = QC_PLAN_FUSE_ALL, .verbose = 1 };
	int target = -1;
	char outbuf[4096];
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (is_help(a)) {
			fputs(usage_main, stdout);
			return 0;
		} else if (strcmp(a, "--target") == 0 || strcmp(a, "-t") == 0) {
			if (++i >= argc)
				return usage_error("%s needs a value", a);
			target = qc_target_from_name(argv[i]);
			if (target < 0)
				return usage_error("unknown target '%s' (cpu, sm80, sm86, sm89, sm90, sm100)", argv[i]);
		} else if (strcmp(a, "-o") == 0 || strcmp(a, "--out") == 0) {
			if (++i >= argc)
				return usage_error("%s needs a value", a);
			o.out = argv[i];
		} else if (strcmp(a, "--align") == 0) {
			if (++i >= argc)
				return usage_error("%s needs a value", a);
			char *end;
			unsigned long v = strtoul(argv[i], &end, 10);
			if (*end || v < QC_BUNDLE_ALIGN || v > (1ul << 30) || (v & (v - 1)))
				return usage_error("--align '%s' must be a power of two from 4096 to 2^30", argv[i]);
			o.alignment = (uint32_t)v;
		} else if (strcmp(a, "--tp") == 0) {
			if (++i >= argc)
				return usage_error("%s needs a value", a);
			char *end;
			long v = strtol(argv[i], &end, 10);
			if (*end || end == argv[i] || v < 1 || v > QC_TP_MAX)
				return usage_error("--tp '%s' must be a number of ranks from 1 to 8", argv[i]);
			o.tp = (int)v;
		} else if (strcmp(a, "--no-fuse") == 0) {
			o.plan_flags = 0;
		} else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
			o.verbose = 0;
		} else if (a[0] == '-' && a[1]) {
			return usage_error("unknown option '%s'", a);
		} else if (!o.in) {
			o.in = a;
		} else {
			return usage_error("unexpected argument '%s'", a);
		}
	}
	if (!o.in)
		return usage_error("%s", "no input model given");
	if (target < 0)
		return usage_error("%s", "--target is required (cpu, sm80, sm86, sm89, sm90, sm100)");
	o.target = (enum qc_target)target;
	struct qc_err err = {0};
	enum input_kind k = sniff(o.in, &err);
	if (k == INPUT_UNKNOWN)
		return fail(&err);
	if (k == INPUT_BUNDLE) {
		qc_err_set(&err, QC_EINVAL, o.in, NULL, -1, "already a qconvert bundle");
		return fail(&err);
	}
	bool hf = k == INPUT_DIR || k == INPUT_HF_ARCHIVE;
	if (!o.out) {
		if (hf)
			qc_hf_default_out(o.in, o.target, outbuf, sizeof outbuf);
		else
			qc_convert_default_out(o.in, o.target, outbuf, sizeof outbuf);
		o.out = outbuf;
	}
	/* before anything is written: an output that is an input would replace it */
	if (qc_convert_check_out(o.out, o.in, &err))
		return fail(&err);
	struct qc_convert_stats st = {0};
	if (hf ? qc_convert_hf(&o, &st, &err) : qc_convert_gguf(&o, &st, &err))
		return fail(&err);
	if (o.verbose)
		fprintf(stderr, "%s: wrote %s: %llu tensors, %.2f MB from %.2f MB in %.2f s (%.2f GB/s)\n", prog, o.out,
			(unsigned long long)st.n_tensors, (double)st.out_bytes / 1e6, (double)st.in_bytes / 1e6, st.seconds,
			st.seconds > 0 ? (double)st.in_bytes / 1e9 / st.seconds : 0.0);
	return 0;
}

/* Shared by the subcommands that take one FILE and at most one boolean flag.
 * Returns -1 to go on, else the exit code (help printed, or a usage error). */
static int parse_file_and_flag(int argc, char **argv, const char *usage, const char *flag, const char **in,
			       bool *flag_set)
{
	for (int i = 1; i < argc; i++) {
		if (is_help(argv[i])) {
			fputs(usage, stdout);
			return 0;
		} else if (strcmp(argv[i], flag) == 0) {
			*flag_set = true;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			return usage_error("unknown option '%s'", argv[i]);
		} else if (!*in) {
			*in = argv[i];
		} else {
			return usage_error("unexpected argument '%s'", argv[i]);
		}
	}
	if (!*in)
		return usage_error("%s", "missing FILE");
	return -1;
}

static int cmd_inspect(int argc, char **argv)
{
	const char *in = NULL;
	bool json = false;
	int code = parse_file_and_flag(argc, argv, usage_inspect, "--json", &in, &json);
	if (code >= 0)
		return code;
	struct qc_err err = {0};
	cJSON *r = NULL;
	struct qc_gguf_model *m = NULL;
	struct qc_bundle *b = NULL;
	enum input_kind k = sniff(in, &err);
	if (k == INPUT_GGUF && !qc_gguf_model_open(in, &m, &err))
		r = qc_inspect_gguf(m, &err);
	else if (k == INPUT_BUNDLE && !qc_bundle_open(in, &b, &err))
		r = qc_inspect_bundle(b, &err);
	else if (k == INPUT_DIR || k == INPUT_HF_ARCHIVE)
		qc_err_set(&err, QC_EUNSUPPORTED, in, NULL, -1,
			   "a Hugging Face model: convert it first (qconvert %s --target cpu), then inspect the bundle", in);
	qc_gguf_model_close(m);
	if (!r) {
		qc_bundle_close(b);
		return fail(&err);
	}
	if (json) {
		char *s = cJSON_Print(r);
		puts(s ? s : "null");
		free(s);
	} else {
		qc_inspect_print(r, stdout);
	}
	cJSON_Delete(r);
	qc_bundle_close(b);
	return 0;
}

static int cmd_verify(int argc, char **argv)
{
	const char *in = NULL;
	bool deep = false;
	int code = parse_file_and_flag(argc, argv, usage_verify, "--deep", &in, &deep);
	if (code >= 0)
		return code;
	struct qc_err err = {0};
	struct qc_bundle *b = NULL;
	uint64_t n_ok = 0;
	if (qc_bundle_open(in, &b, &err) || qc_verify_bundle(b, deep, &n_ok, &err)) {
		qc_bundle_close(b);
		return fail(&err);
	}
	printf("%s: OK: %llu tensors%s, manifest and header checksums match\n", in, (unsigned long long)n_ok,
	       deep ? " (hashes and finite values)" : "");
	qc_bundle_close(b);
	return 0;
}

static int cmd_dump(int argc, char **argv)
{
	const char *in = NULL, *name = NULL, *out = NULL;
	for (int i = 1; i < argc; i++) {
		if (is_help(argv[i])) {
			fputs(usage_dump, stdout);
			return 0;
		} else if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--out") == 0) {
			if (++i >= argc)
				return usage_error("%s needs a value", argv[i - 1]);
			out = argv[i];
		} else if (argv[i][0] == '-' && argv[i][1]) {
			return usage_error("unknown option '%s'", argv[i]);
		} else if (!in) {
			in = argv[i];
		} else if (!name) {
			name = argv[i];
		} else {
			return usage_error("unexpected argument '%s'", argv[i]);
		}
	}
	if (!in || !name)
		return usage_error("%s", "dump needs FILE and TENSOR");
	if (!out && isatty(1))
		return usage_error("%s", "refusing to write binary float32 to a terminal; use -o FILE");
	struct qc_err err = {0};
	struct qc_gguf_model *m = NULL;
	struct qc_bundle *b = NULL;
	enum input_kind k = sniff(in, &err);
	int rc = k == INPUT_GGUF ? qc_gguf_model_open(in, &m, &err)
		 : k == INPUT_BUNDLE ? qc_bundle_open(in, &b, &err)
		 : (k == INPUT_DIR || k == INPUT_HF_ARCHIVE
			    ? qc_err_set(&err, QC_EUNSUPPORTED, in, NULL, -1, "a Hugging Face model: convert it first")
			    : QC_EFORMAT);
	char tmp[4096] = "";
	FILE *f = stdout;
	if (!rc && out && strcmp(out, "-") != 0) {
		/* temp + rename, so a failed dump leaves no partial file */
		snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", out);
		int fd = mkstemp(tmp);
		mode_t um = umask(0);
		umask(um);
		if (fd >= 0)
			fchmod(fd, 0666 & ~um); /* mkstemp makes 0600; a dump is an ordinary file */
		f = fd >= 0 ? fdopen(fd, "wb") : NULL;
		if (!f) {
			rc = qc_err_set(&err, QC_EIO, out, NULL, -1, "cannot create: %s", strerror(errno));
			if (fd >= 0)
				close(fd);
			if (fd >= 0)
				unlink(tmp);
			tmp[0] = '\0';
		}
	}
	if (!rc)
		rc = m ? qc_dump_gguf(m, name, f, &err) : qc_dump_bundle(b, name, f, &err);
	if (f && f != stdout) {
		if (fclose(f) != 0 && !rc)
			rc = qc_err_set(&err, QC_EIO, out, NULL, -1, "write failed: %s", strerror(errno));
		if (!rc && rename(tmp, out) != 0)
			rc = qc_err_set(&err, QC_EIO, out, NULL, -1, "cannot rename into place: %s", strerror(errno));
		if (rc)
			unlink(tmp);
	} else if (!rc && fflush(stdout) != 0) {
		rc = qc_err_set(&err, QC_EIO, "stdout", NULL, -1, "write failed: %s", strerror(errno));
	}
	qc_gguf_model_close(m);
	qc_bundle_close(b);
	return rc ? fail(&err) : 0;
}

int main(int argc, char **argv)
{
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	if (argc < 2) {
		fputs(usage_main, stderr);
		return 2;
	}
	const char *cmd = argv[1];
	if (is_help(cmd) || strcmp(cmd, "help") == 0) {
		fputs(usage_main, stdout);
		return 0;
	}
	if (strcmp(cmd, "--version") == 0) {
		printf("qconvert %s (bundle format %d.%d)\n", QC_VERSION, QC_BUNDLE_MAJOR, QC_BUNDLE_MINOR);
		return 0;
	}
	if (strcmp(cmd, "inspect") == 0)
		return cmd_inspect(argc - 1, argv + 1);
	if (strcmp(cmd, "verify") == 0)
		return cmd_verify(argc - 1, argv + 1);
	if (strcmp(cmd, "dump") == 0)
		return cmd_dump(argc - 1, argv + 1);
	if (strcmp(cmd, "convert") == 0)
		return cmd_convert(argc - 1, argv + 1);
	return cmd_convert(argc, argv);
}
