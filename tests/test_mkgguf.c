/* test_mkgguf.c — mkgguf's K-quant types (q4_k, q5_k, q6_k) and the q4_k_m mix.
 *
 * Expectations are computed here from llama.cpp facts, never read from mkgguf:
 * - the Q4_K_M type of every tensor of --dry-run plans: llama.cpp's use_more_bits
 *   layers written out by hand for 8 and 80 layers, the 70B attn_v bump (80 layers
 *   with GQA; llama-model.cpp's LLM_TYPE_70B) and its absence without GQA, a tied
 *   token_embd taking output's Q6_K, norms and rope factors f32;
 * - the llama3-70b Q4_K_M plan: Llama-3-70B's shapes and its total from ggml's block
 *   sizes (q4_K 144, q5_K 176, q6_K 210 bytes per 256 weights);
 * - written files, through the independent walker (gguf_walk.h): each tensor's
 *   offset and the file size follow from those block sizes and 32-byte alignment;
 *   general.file_type is llama.cpp's (15 MOSTLY_Q4_K_M, 18 MOSTLY_Q6_K);
 * - the same bytes with 1, 2 and 5 threads;
 * - every decoded K-quant matrix against the f32 file of the same seed: the error of
 *   each value is within half the largest step a covering encoder of that format can
 *   have for Irwin-Hall weights (|x| <= 2 sqrt(3) std), and the NMSE within that
 *   step's uniform-rounding variance;
 * - the q4_k_m model converts (cpu and sm90; its q6_K in marlin_i6 there), verifies
 *   (the sm90 one --deep) and runs 8 tokens on the CPU;
 * - refusals: q4_k_m for qwen2 and for experts, q4_k with rows not a multiple of 256.
 * llama.cpp itself reads these blocks in test_engine_arch (llama-yarn-q4_k_m, -q5_k).
 */
#include <math.h>

#include "gguf_walk.h"
#include "qtype.h"

static const char *bin_dir(void)
{
	const char *b = getenv("QC_BIN");
	return b && *b ? b : "build/bin";
}

static char tmpdir[] = "/tmp/qc-test-mkgguf-XXXXXX";

/* The small llama every written-file check uses: K-quant rows (256), GQA 4/2. */
#define SMALL "--preset tiny --n-embd 256 --n-ff 512 --n-layer 8 --seed 5"

/* ---- llama.cpp facts ---------------------------------------------------------- */

/* ggml's type ids and block sizes (ggml.c type_traits): bytes per blck weights. */
struct ggml_size {
	uint32_t id;
	const char *name;
	uint64_t blck, bytes;
};

static const struct ggml_size ggml_sizes[] = {
	{ 0, "f32", 1, 4 },
	{ 12, "q4_K", 256, 2 + 2 + 12 + 128 },
	{ 13, "q5_K", 256, 2 + 2 + 12 + 32 + 128 },
	{ 14, "q6_K", 256, 128 + 64 + 16 + 2 },
};

static const struct ggml_size *size_by_id(uint32_t id)
{
	for (size_t i = 0; i < sizeof ggml_sizes / sizeof ggml_sizes[0]; i++)
		if (ggml_sizes[i].id == id)
			return &ggml_sizes[i];
	return NULL;
}

/* llama-quant.cpp's use_more_bits, worked out by hand. 8 layers: n/8 = 1, 7n/8 = 7:
 * layer 0, layer 7, and (i - 1) % 3 == 2: 3 and 6. 80 layers: n/8 = 10, 7n/8 = 70:
 * 0..9, 70..79, and (i - 10) % 3 == 2: 12, 15, ..., 69. */
static const int more8[] = { 0, 3, 6, 7 };
static const int more80[] = { 0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  12, 15, 18, 21,
			      24, 27, 30, 33, 36, 39, 42, 45, 48, 51, 54, 57, 60, 63,
			      66, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79 };

static bool in_list(int layer, const int *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (list[i] == layer)
			return true;
	return false;
}

/* The Q4_K_M type llama-quantize gives `name` (dense llama): big = LLM_TYPE_70B. */
static const char *q4_k_m_type(const char *name, const int *more, size_t n_more, bool big, bool tied)
{
	int layer = -1, at = 0;
	if (sscanf(name, "blk.%d.%n", &layer, &at) < 1 || !at)
		layer = -1;
	const char *base = layer >= 0 ? name + at : name;
	if (strstr(base, "norm") || !strcmp(base, "rope_freqs.weight"))
		return "f32";
	if (!strcmp(base, "output.weight") || (tied && !strcmp(base, "token_embd.weight")))
		return "q6_K";
	const bool mb = layer >= 0 && in_list(layer, more, n_more);
	if (!strcmp(base, "attn_v.weight"))
		return mb ? "q6_K" : big ? "q5_K" : "q4_K";
	if (!strcmp(base, "ffn_down.weight"))
		return mb ? "q6_K" : "q4_K";
	return "q4_K";
}

/* ---- running mkgguf ------------------------------------------------------------ */

struct plan_row {
	char name[96], type[16];
	long long ne[3];
	unsigned long long bytes;
};

struct plan {
	struct plan_row *r;
	size_t n;
	unsigned long long total;
	size_t total_n;
};

/* mkgguf ARGS --dry-run, parsed; false (counted) when it fails or prints garbage. */
static bool dry_run(const char *args, struct plan *p)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "%s/mkgguf %s --dry-run 2>/dev/null", bin_dir(), args);
	FILE *f = popen(cmd, "r");
	*p = (struct plan){ 0 };
	if (!f) {
		CHECK(0, "cannot run %s", cmd);
		return false;
	}
	size_t cap = 0;
	char line[512];
	bool ok = true, total = false;
	while (fgets(line, sizeof line, f)) {
		if (sscanf(line, "total %llu bytes in %zu tensors", &p->total, &p->total_n) == 2) {
			total = true;
			continue;
		}
		if (p->n == cap) {
			cap = cap ? 2 * cap : 256;
			struct plan_row *r = realloc(p->r, cap * sizeof *r);
			if (!r) {
				ok = false;
				break;
			}
			p->r = r;
		}
		struct plan_row *r = &p->r[p->n];
		if (sscanf(line, "%95s %15s %lld %lld %lld %llu", r->name, r->type, &r->ne[0], &r->ne[1], &r->ne[2],
			   &r->bytes) != 6) {
			ok = false;
			break;
		}
		p->n++;
	}
	int st = pclose(f);
	CHECK(ok && total && st == 0 && p->total_n == p->n, "%s: exit %d, %zu rows, total line %s", cmd, st, p->n,
	      total ? "present" : "missing");
	return ok && total && st == 0;
}

/* mkgguf ARGS -o tmpdir/NAME.gguf; the exit status (stderr in tmpdir/NAME.err). */
static int mkgguf(const char *args, const char *name)
{
	char cmd[1400];
	snprintf(cmd, sizeof cmd, "%s/mkgguf %s -o %s/%s.gguf >/dev/null 2>%s/%s.err", bin_dir(), args, tmpdir,
		 name, tmpdir, name);
	int st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

struct file {
	uint8_t *buf;
	size_t len;
	struct walk w;
};

static bool load(const char *name, struct file *f)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s.gguf", tmpdir, name);
	f->buf = (uint8_t *)check_read_file(path, &f->len);
	bool ok = f->buf && walk_gguf(f->buf, f->len, &f->w);
	CHECK(ok, "%s: unreadable or not a GGUF the walker reads", path);
	return ok;
}

static void unload(struct file *f)
{
	walk_free(&f->w);
	free(f->buf);
	*f = (struct file){ 0 };
}

/* ---- the mix's types ------------------------------------------------------------ */

static void check_plan_types(const char *what, const struct plan *p, const int *more, size_t n_more, bool big,
			     bool tied)
{
	int bad = 0, q5 = 0;
	bool has_output = false, has_embd = false;
	for (size_t i = 0; i < p->n; i++) {
		const char *want = q4_k_m_type(p->r[i].name, more, n_more, big, tied);
		if (strcmp(p->r[i].type, want) && bad++ < 3)
			fprintf(stderr, "  %s: %s is %s, llama-quantize makes %s\n", what, p->r[i].name, p->r[i].type,
				want);
		q5 += !strcmp(p->r[i].type, "q5_K");
		has_output |= !strcmp(p->r[i].name, "output.weight");
		has_embd |= !strcmp(p->r[i].name, "token_embd.weight");
	}
	CHECK(bad == 0, "%s: %d tensors of the wrong type", what, bad);
	CHECK(has_embd && has_output == !tied, "%s: token_embd %d, output.weight %d (tied %d)", what, has_embd,
	      has_output, tied);
	CHECK(big == (q5 > 0), "%s: %d q5_K tensors (70B bump %s)", what, q5, big ? "expected" : "not expected");
}

static void test_mix_types(void)
{
	struct plan p;
	const size_t n8 = sizeof more8 / sizeof more8[0], n80 = sizeof more80 / sizeof more80[0];
	CHECK(n80 == 40, "hand-written 80-layer list has %zu layers", n80);
	if (dry_run(SMALL " --type q4_k_m --rope-scaling llama3", &p))
		check_plan_types("8 layers", &p, more8, n8, false, false);
	free(p.r);
	if (dry_run(SMALL " --type q4_k_m --tie-embeddings", &p))
		check_plan_types("8 layers, tied", &p, more8, n8, false, true);
	free(p.r);
	/* 80 layers with GQA is llama.cpp's 70B type; with n_head_kv == n_head its 65B */
	if (dry_run("--preset tiny --n-embd 256 --n-ff 256 --n-layer 80 --n-head 4 --n-head-kv 1 --type q4_k_m", &p))
		check_plan_types("80 layers, GQA", &p, more80, n80, true, false);
	free(p.r);
	if (dry_run("--preset tiny --n-embd 256 --n-ff 256 --n-layer 80 --n-head 4 --n-head-kv 4 --type q4_k_m", &p))
		check_plan_types("80 layers, no GQA", &p, more80, n80, false, false);
	free(p.r);
	/* the pure types: every matrix that type, norms f32 */
	static const char *const pure[][2] = { { "q4_k", "q4_K" }, { "q5_k", "q5_K" }, { "q6_k", "q6_K" } };
	for (size_t k = 0; k < 3; k++) {
		char args[256];
		snprintf(args, sizeof args, SMALL " --type %s", pure[k][0]);
		if (!dry_run(args, &p))
			continue;
		int bad = 0;
		for (size_t i = 0; i < p.n; i++)
			bad += strcmp(p.r[i].type, strstr(p.r[i].name, "norm") ? "f32" : pure[k][1]) != 0;
		CHECK(bad == 0, "--type %s: %d tensors of another type", pure[k][0], bad);
		free(p.r);
	}
}

/* Llama-3-70B: 8192 wide, 80 layers, 64 query and 8 K/V heads of 128, FFN 28672,
 * vocabulary 128256; its Q4_K_M size summed with ggml's block sizes. */
static void test_llama3_70b_plan(void)
{
	struct plan p;
	if (!dry_run("--preset llama3-70b --type q4_k_m", &p))
		return;
	const uint64_t e = 8192, ff = 28672, kv = 8 * 128, V = 128256;
	const uint64_t q4 = 144, q5 = 176, q6 = 210; /* bytes per 256 */
	uint64_t want = e * V / 256 * q4 + e * 4 + e * V / 256 * q6;   /* token_embd, output_norm, output */
	for (int l = 0; l < 80; l++) {
		const bool mb = in_list(l, more80, sizeof more80 / sizeof more80[0]);
		want += 2 * e * 4;                                            /* attn_norm, ffn_norm */
		want += (e * e + e * kv + e * e + 2 * e * ff) / 256 * q4;     /* q, k, output, gate, up */
		want += e * kv / 256 * (mb ? q6 : q5);                        /* attn_v */
		want += ff * e / 256 * (mb ? q6 : q4);                        /* ffn_down */
	}
	CHECK(p.total == want, "llama3-70b q4_k_m: %llu bytes planned, Llama-3-70B's shapes give %llu",
	      p.total, (unsigned long long)want);
	CHECK(p.n == 3 + 80 * 9, "llama3-70b: %zu tensors, want %d", p.n, 3 + 80 * 9);
	check_plan_types("llama3-70b", &p, more80, sizeof more80 / sizeof more80[0], true, false);
	int shapes = 0;
	for (size_t i = 0; i < p.n; i++) {
		const struct plan_row *r = &p.r[i];
		if (strstr(r->name, "attn_q.weight") || strstr(r->name, "attn_output.weight"))
			shapes += r->ne[0] == 8192 && r->ne[1] == 8192;
		else if (strstr(r->name, "attn_k.weight") || strstr(r->name, "attn_v.weight"))
			shapes += r->ne[0] == 8192 && r->ne[1] == 1024;
		else if (strstr(r->name, "ffn_gate") || strstr(r->name, "ffn_up"))
			shapes += r->ne[0] == 8192 && r->ne[1] == 28672;
		else if (strstr(r->name, "ffn_down"))
			shapes += r->ne[0] == 28672 && r->ne[1] == 8192;
		else if (!strcmp(r->name, "token_embd.weight") || !strcmp(r->name, "output.weight"))
			shapes += r->ne[0] == 8192 && r->ne[1] == 128256;
		else
			shapes += r->ne[0] == 8192 && r->ne[1] == 1;   /* norms */
	}
	CHECK(shapes == (int)p.n, "llama3-70b: %d of %zu tensors have Llama-3-70B's shape", shapes, p.n);
	free(p.r);
}

/* ---- written files ---------------------------------------------------------------- */

/* Offsets and file size from ggml's block sizes; general.file_type when want >= 0. */
static void check_layout(const char *name, int64_t want_ftype)
{
	struct file f;
	if (!load(name, &f))
		return;
	uint64_t at = 0;
	int bad = 0;
	for (uint64_t i = 0; i < f.w.n_tensors; i++) {
		const struct walk_tensor *t = &f.w.t[i];
		const struct ggml_size *s = size_by_id(t->type);
		uint64_t n = 1;
		for (uint32_t d = 0; d < t->n_dims; d++)
			n *= t->ne[d];
		if (!s || n % s->blck || t->rel != at) {
			if (bad++ < 3)
				fprintf(stderr, "  %s: %s type %u at %llu, expected at %llu\n", name, t->name, t->type,
					(unsigned long long)t->rel, (unsigned long long)at);
			continue;
		}
		at += (n / s->blck * s->bytes + 31) / 32 * 32;
	}
	CHECK(bad == 0, "%s: %d tensors off ggml's block arithmetic", name, bad);
	CHECK(f.w.data_off + at == f.len, "%s: file is %zu bytes, header + blocks give %llu", name, f.len,
	      (unsigned long long)(f.w.data_off + at));
	const struct walk_kv *kv = walk_find_kv(&f.w, "general.file_type");
	if (want_ftype >= 0)
		CHECK(kv && kv->type == 4 && get_le(f.buf + kv->val_off, 4) == (uint64_t)want_ftype,
		      "%s: general.file_type missing or not %lld", name, (long long)want_ftype);
	else
		CHECK(!kv, "%s: general.file_type written for a type llama.cpp has no ftype for", name);
	unload(&f);
}

static bool same_file(const char *a, const char *b)
{
	char pa[256], pb[256];
	size_t la = 0, lb = 0;
	snprintf(pa, sizeof pa, "%s/%s.gguf", tmpdir, a);
	snprintf(pb, sizeof pb, "%s/%s.gguf", tmpdir, b);
	char *x = check_read_file(pa, &la), *y = check_read_file(pb, &lb);
	bool same = x && y && la == lb && !memcmp(x, y, la);
	free(x);
	free(y);
	return same;
}

/* Largest rounding step a covering encoder of type t can have on values within
 * +-a (q4_K/q5_K: range 2a plus one dmin step of a/63 over 15/31 levels, plus one d
 * step of that over 63; q6_K: a/31 plus one d step of that over 127), and the error
 * bound half of it. */
static double max_step(const char *t, double a)
{
	if (!strcmp(t, "q4_K") || !strcmp(t, "q5_K")) {
		const double need = (2.0 * a + a / 63.0) / (!strcmp(t, "q4_K") ? 15.0 : 31.0);
		return need * (1.0 + 1.0 / 63.0);
	}
	return a / 31.0 * (1.0 + 1.0 / 127.0);
}

/* Every matrix of file `name` decoded against the f32 file of the same seed. */
static void check_values(const char *name, const struct file *ref)
{
	struct file f;
	if (!load(name, &f))
		return;
	const double sd = 0.02, a = 2.0 * sqrt(3.0) * sd * (1.0 + 1e-6); /* Irwin-Hall of 4: |z| <= 2 sqrt 3 */
	int n_mat = 0, bad = 0;
	for (uint64_t i = 0; i < f.w.n_tensors; i++) {
		const struct walk_tensor *t = &f.w.t[i];
		const struct walk_tensor *r = walk_find_tensor(&ref->w, t->name);
		const struct ggml_size *s = size_by_id(t->type);
		if (!r || r->type != 0 || !s || t->type == 0)
			continue;
		n_mat++;
		const uint64_t n = t->ne[0] * t->ne[1];
		float *y = malloc(n * sizeof *y);
		if (!y) {
			CHECK(0, "out of memory");
			break;
		}
		qc_types[t->type].dequant_row(f.buf + f.w.data_off + t->rel, y, (int64_t)n);
		const float *x = (const float *)(const void *)(ref->buf + ref->w.data_off + r->rel);
		double se = 0.0, sx = 0.0, emax = 0.0;
		bool finite = true;
		for (uint64_t k = 0; k < n; k++) {
			finite &= isfinite(y[k]) != 0;
			const double e = (double)y[k] - (double)x[k];
			se += e * e;
			sx += (double)x[k] * x[k];
			emax = fmax(emax, fabs(e));
		}
		const double step = max_step(s->name, a);
		const double nmse = se / sx, nmse_max = step * step / 12.0 / (sx / (double)n);
		if (!finite || emax > 0.5 * step || nmse > nmse_max) {
			if (bad++ < 3)
				fprintf(stderr, "  %s: %s (%s): finite %d, max error %.3g (bound %.3g), NMSE %.3g (bound %.3g)\n",
					name, t->name, s->name, finite, emax, 0.5 * step, nmse, nmse_max);
		}
		free(y);
	}
	CHECK(n_mat > 0 && bad == 0, "%s: %d of %d matrices off the f32 weights", name, bad, n_mat);
	unload(&f);
}

static void test_files(void)
{
	static const char *const types[] = { "q4_k", "q5_k", "q6_k", "q4_k_m" };
	static const int64_t ftypes[] = { -1, -1, 18, 15 };
	char args[256];
	snprintf(args, sizeof args, SMALL " --type f32 --threads 1");
	CHECK(mkgguf(args, "f32") == 0, "mkgguf --type f32");
	struct file ref;
	bool have_ref = load("f32", &ref);
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
		snprintf(args, sizeof args, SMALL " --type %s --threads 1", types[i]);
		if (mkgguf(args, types[i])) {
			CHECK(0, "mkgguf --type %s failed", types[i]);
			continue;
		}
		check_layout(types[i], ftypes[i]);
		if (have_ref)
			check_values(types[i], &ref);
	}
	if (have_ref)
		unload(&ref);
	/* threads split rows, never values */
	for (int t = 2; t <= 5; t += 3) {
		char nm[32];
		snprintf(nm, sizeof nm, "q4_k_m-t%d", t);
		snprintf(args, sizeof args, SMALL " --type q4_k_m --threads %d", t);
		CHECK(mkgguf(args, nm) == 0, "mkgguf --threads %d", t);
		CHECK(same_file("q4_k_m", nm), "--threads %d wrote other bytes than --threads 1", t);
	}
	/* another seed, other bytes: the comparison above can fail */
	CHECK(mkgguf(SMALL " --type q4_k_m --seed 6", "q4_k_m-s6") == 0, "mkgguf --seed 6");
	CHECK(!same_file("q4_k_m", "q4_k_m-s6"), "--seed 6 wrote the bytes of --seed 5");
}

/* ---- the engine runs it; refusals ---------------------------------------------------- */

static int run(const char *bin, const char *const *args, const char *errname)
{
	char b[256], e[256];
	snprintf(b, sizeof b, "%s/%s", bin_dir(), bin);
	snprintf(e, sizeof e, "%s/%s", tmpdir, errname);
	return check_spawn(b, args, e);
}

static void test_engine(void)
{
	char gguf[128], qb[128], qb90[128], errp[128];
	snprintf(gguf, sizeof gguf, "%s/q4_k_m.gguf", tmpdir);
	snprintf(qb, sizeof qb, "%s/q4_k_m.qb", tmpdir);
	snprintf(qb90, sizeof qb90, "%s/q4_k_m.sm90.qb", tmpdir);
	const char *conv[] = { gguf, "--target", "cpu", "-q", "-o", qb, NULL };
	CHECK(run("qconvert", conv, "conv.err") == 0, "qconvert --target cpu of the q4_k_m model");
	const char *ver[] = { "verify", qb, NULL };
	CHECK(run("qconvert", ver, "verify.err") == 0, "qconvert verify");
	const char *conv90[] = { gguf, "--target", "sm90", "-q", "-o", qb90, NULL };
	CHECK(run("qconvert", conv90, "conv90.err") == 0, "qconvert --target sm90 of the q4_k_m model");
	/* its q6_K matrices are marlin_i6 there: every row unpacks and decodes */
	const char *ver90[] = { "verify", qb90, "--deep", NULL };
	CHECK(run("qconvert", ver90, "verify90.err") == 0, "qconvert verify --deep of the sm90 bundle");
	const char *gen[] = { qb, "-p", "Once upon a time", "-n", "8", NULL };
	CHECK(run("qrun", gen, "qrun.err") == 0, "qrun on the q4_k_m bundle");
	snprintf(errp, sizeof errp, "%s/qrun.err", tmpdir);
	char *log = check_read_file(errp, NULL);
	CHECK(log && strstr(log, " 8 generated"), "qrun: no \"8 generated\" in: %s", log ? log : "(none)");
	free(log);
}

static void refused(const char *args, const char *name, const char *says)
{
	int rc = mkgguf(args, name);
	char errp[256];
	snprintf(errp, sizeof errp, "%s/%s.err", tmpdir, name);
	char *msg = check_read_file(errp, NULL);
	CHECK(rc == 2 && msg && strstr(msg, says), "mkgguf %s: exit %d, stderr \"%s\" (want 2 and \"%s\")", args, rc,
	      msg ? msg : "", says);
	free(msg);
}

static void test_refusals(void)
{
	refused("--preset tiny --n-embd 256 --n-ff 512 --arch qwen2 --type q4_k_m", "r-qwen2", "dense llama");
	refused("--preset tiny-moe --n-embd 256 --n-ff 256 --type q4_k_m", "r-moe", "dense llama");
	refused("--preset tiny --type q4_k", "r-rows", "block size 256");
	refused("--preset tiny --n-embd 256 --n-ff 512 --type q3_k", "r-q3k", "no encoder");
}

int main(void)
{
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	test_mix_types();
	test_llama3_70b_plan();
	test_files();
	test_engine();
	test_refusals();
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", tmpdir);
	return check_report("test_mkgguf");
}
