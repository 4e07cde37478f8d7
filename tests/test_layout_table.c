/* test_layout_table.c — the layout table (quant/layout.c) and its copy in docs/cuda.md.
 *
 * Checks: every layout's row is sane (name round-trips, a fusable layout has a row
 * alignment, every kernel column names a kind); qc_layout_kernel gives, for every
 * layout, 1..300 rows (0 rows are a no-op in every kernel), with and without experts and under several knob settings,
 * what the three places that decided before the table did (the backend's 8-row
 * GEMV limit, marlin_gemv.cu's hand-back to the GEMM, marlin_mm.cu's cuBLAS from
 * 128 rows), written out here from that old code as the independent expectation;
 * the "Which kernel runs" table of docs/cuda.md agrees with qc_layouts, and the
 * same checker fails on deliberately altered copies of the text.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "layout.h"
#include "layout_marlin.h"

/* The pre-table rules, from runtime/cuda/backend_cuda.c mm(), marlin_gemv.cu and
 * marlin_mm.cu as they were (G = QC_CUDA_GEMV_MAX_ROWS, C = QC_MARLIN_CUBLAS_ROWS
 * after its <= 0 -> never, N = QC_MARLIN_GEMV_ROWS). */
static enum qc_kernel_kind old_rule(enum qc_layout l, int64_t n, bool experts, int64_t n_in, int64_t n_out,
				    int64_t G, int64_t C, int64_t N)
{
	/* the marlin layouts (marlin_i6, which came after these rules, has their
	 * tensor-core GEMM too: it takes the 4-bit rule) */
	const bool marlin = qc_marlin_is(l);
	/* fp8_rows (W8A8 FP8, after the table): its GEMV for one row (N != 0: up to N rows, at
	   most G), its FP8 GEMM otherwise; no experts */
	if (l == QC_LAYOUT_FP8_ROWS) {
		if (experts)
			return QC_KERNEL_NONE;
		if (n > G)
			return QC_KERNEL_MMA;
		return (N ? n <= N : n <= 1) ? QC_KERNEL_GEMV : QC_KERNEL_MMA;
	}
	if (experts) { /* marlin experts: the grouped Hopper GEMM since the fifteenth session */
		if (n > G && n_in % 32 == 0 && (l == QC_LAYOUT_GGML || marlin))
			return QC_KERNEL_MOE_GEMM;
		return QC_KERNEL_GEMV;
	}
	/* marlin_mm: cuBLAS from C rows for matrices up to 2^27 elements, else mma */
	const enum qc_kernel_kind mm = n >= C && n_in * n_out <= ((int64_t)1 << 27) ? QC_KERNEL_F16_BLAS : QC_KERNEL_MMA;
	if (n > G) /* the table's gemm entry */
		return marlin ? mm : QC_KERNEL_F16_BLAS;
	if (!marlin) /* gemv_q and the nvfp4_swz GEMV take any rows */
		return QC_KERNEL_GEMV;
	const int64_t lim = N ? N : qc_marlin_bits(l) == 8 ? 0 : 1;
	return n > lim ? mm : QC_KERNEL_GEMV;
}

static void table_rows_sane(void)
{
	for (int l = 0; l < QC_LAYOUT_COUNT; l++) {
		const struct qc_layout_traits *t = &qc_layouts[l];
		CHECK(t->name && qc_layout_from_name(t->name) == l, "layout %d: name", l);
		CHECK(t->fits && t->row_bytes && t->bytes && t->pack_slice && t->unpack_rows, "%s: functions", t->name);
		CHECK(!t->fusable || t->row_align >= 1, "%s: fusable halves need a row alignment", t->name);
		for (int c = 0; c < QC_ROWS_COUNT; c++)
			CHECK(t->kernel[c] > QC_KERNEL_NONE && t->kernel[c] < QC_KERNEL_COUNT &&
				      t->kernel[c] != QC_KERNEL_MOE_GEMM,
			      "%s: column %d", t->name, c);
		CHECK(t->experts == QC_KERNEL_GEMV || t->experts == QC_KERNEL_MOE_GEMM ||
			      (t->experts == QC_KERNEL_NONE && t->row_align == 0),
		      "%s: experts", t->name);
	}
	CHECK(qc_layout_kernel(QC_LAYOUT_COUNT, 1, false, 32, 32, &(struct qc_kernel_rows)QC_KERNEL_ROWS_DEFAULT) ==
		      QC_KERNEL_NONE,
	      "a bad layout id has no kernel");
}

static void kernel_choice_matches_old_rules(void)
{
	static const int64_t knobs[][3] = { /* G, C (as set), N */
		{ 8, 128, 0 }, { 0, 128, 0 }, { 256, 128, 0 }, { 8, 0, 0 }, { 8, 64, 4 },
		{ 16, 128, 64 }, { 300, 100, 0 }, { 8, 128, -1 }, { 4, 2, 3 },
	};
	static const int64_t shapes[][2] = { { 4096, 14336 }, { 96, 64 }, { 4096, 128256 } };
	int64_t bad = 0, total = 0;
	for (size_t k = 0; k < sizeof knobs / sizeof knobs[0]; k++) {
		const int64_t C = knobs[k][1] <= 0 ? INT64_MAX : knobs[k][1];
		const struct qc_kernel_rows r = { knobs[k][0], C, knobs[k][2], (int64_t)1 << 27, 0 }; /* the old rules had no size rule */
		for (int l = 0; l < QC_LAYOUT_COUNT; l++)
			for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
				for (int e = 0; e < 2; e++)
					for (int64_t n = 1; n <= 300; n++) {
						const int64_t in = shapes[s][0] + (e && s == 1 ? 16 : 0), out = shapes[s][1];
						const enum qc_kernel_kind got = qc_layout_kernel((enum qc_layout)l, n, e, in,
												 out, &r);
						const enum qc_kernel_kind want = old_rule((enum qc_layout)l, n, e, in, out,
											  knobs[k][0], C, knobs[k][2]);
						total++;
						if (got != want && bad++ < 5)
							fprintf(stderr, "%s rows %lld experts %d %lldx%lld G %lld C %lld N %lld: "
								"%s, was %s\n", qc_layout_name((enum qc_layout)l), (long long)n, e,
								(long long)in, (long long)out, (long long)knobs[k][0],
								(long long)C, (long long)knobs[k][2], qc_kernel_kind_name(got),
								qc_kernel_kind_name(want));
					}
	}
	CHECK(bad == 0, "%lld of %lld (layout, rows, experts, shape, knobs) cases changed kernel", (long long)bad,
	      (long long)total);
}

/* One decode row of a matrix: the GEMV where the 1-row column says mma and the
 * layout has a GEMV (marlin_i8, marlin_i8z), from gemv_small_elems (2^32) down;
 * nothing else moves, and 0 turns it off. */
static void small_matrix_rule(void)
{
	const struct qc_kernel_rows def = QC_KERNEL_ROWS_DEFAULT;
	const int64_t lim = def.gemv_small_elems;
	CHECK(lim == (int64_t)1 << 32, "default size %lld", (long long)lim);
	int64_t bad = 0;
	for (int l = 0; l < QC_LAYOUT_COUNT; l++) {
		const struct qc_layout_traits *t = &qc_layouts[l];
		bool gemv = t->experts != QC_KERNEL_NONE; /* the rule needs a GEMV to move to (stacked experts
						      * take one up to gemv_max_rows) */
		for (int k = 0; k < QC_ROWS_COUNT; k++)
			gemv |= t->kernel[k] == QC_KERNEL_GEMV;
		const bool takes = t->kernel[QC_ROWS_1] == QC_KERNEL_MMA && gemv;
		struct qc_kernel_rows off = def;
		off.gemv_small_elems = 0;
		/* at the limit, one past it, a 1-row call of 0 rows, and 2 rows (never moved) */
		const struct { int64_t rows, in, out; bool small; } c[] = {
			{ 1, 4096, lim / 4096, true }, { 1, 4096, lim / 4096 + 1, false }, { 0, 576, 576, true },
			{ 2, 576, 576, false },
		};
		for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
			const enum qc_kernel_kind got = qc_layout_kernel((enum qc_layout)l, c[i].rows, false, c[i].in, c[i].out, &def);
			const enum qc_kernel_kind plain = qc_layout_kernel((enum qc_layout)l, c[i].rows, false, c[i].in, c[i].out, &off);
			const enum qc_kernel_kind want = takes && c[i].small ? QC_KERNEL_GEMV : plain;
			bad += got != want;
		}
		CHECK(!takes || qc_layout_kernel((enum qc_layout)l, 1, false, 4096, 4096, &off) == QC_KERNEL_MMA,
		      "%s: 0 turns the rule off", t->name);
	}
	CHECK(bad == 0, "%lld small-matrix cases wrong", (long long)bad);
	CHECK(qc_layout_kernel(QC_LAYOUT_MARLIN_I8, 1, false, 576, 1536, &def) == QC_KERNEL_GEMV &&
		      qc_layout_kernel(QC_LAYOUT_MARLIN_I8, 1, false, 4096, 14336, &def) == QC_KERNEL_GEMV &&
		      qc_layout_kernel(QC_LAYOUT_MARLIN_I8, 1, false, 4096, 128256, &def) == QC_KERNEL_GEMV &&
		      qc_layout_kernel(QC_LAYOUT_MARLIN_I8, 1, false, 65536, 65537, &def) == QC_KERNEL_MMA,
	      "marlin_i8: SmolLM2's and Llama-3-8B's matrices (FFN, vocabulary) on the GEMV, past 2^32 on mma");
}

/* The cells of one markdown table row, trimmed, backticks dropped; returns the count. */
static int cells(const char *line, size_t len, char out[][32], int max)
{
	int n = 0;
	size_t i = 0;
	while (i < len && line[i] != '|')
		i++;
	while (i < len && n < max) {
		size_t j = i + 1;
		while (j < len && line[j] != '|')
			j++;
		if (j >= len)
			break;
		size_t a = i + 1, b = j;
		while (a < b && (line[a] == ' ' || line[a] == '`'))
			a++;
		while (b > a && (line[b - 1] == ' ' || line[b - 1] == '`'))
			b--;
		snprintf(out[n], 32, "%.*s", (int)(b - a), line + a);
		n++;
		i = j;
	}
	return n;
}

/* 0 when the "## Which kernel runs" table of md names every layout once with the
 * table's kinds; else the number of disagreements (each printed when verbose). */
static int doc_disagrees(const char *md, bool verbose)
{
	const char *sec = strstr(md, "\n## Which kernel runs");
	if (!sec) {
		if (verbose)
			fprintf(stderr, "docs/cuda.md: no \"## Which kernel runs\" section\n");
		return 1;
	}
	const char *end = strstr(sec + 1, "\n## ");
	if (!end)
		end = sec + strlen(sec);
	int seen[QC_LAYOUT_COUNT] = { 0 }, bad = 0;
	for (const char *p = sec + 1; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
		char c[8][32];
		const int n = p[0] == '|' ? cells(p, len, c, 8) : 0;
		const int l = n > 0 ? qc_layout_from_name(c[0]) : -1;
		if (l >= 0) {
			seen[l]++;
			for (int k = 0; k <= QC_ROWS_COUNT; k++) {
				const enum qc_kernel_kind want = k < QC_ROWS_COUNT ? qc_layouts[l].kernel[k] : qc_layouts[l].experts;
				if (n != QC_ROWS_COUNT + 2 || strcmp(c[1 + k], qc_kernel_kind_name(want)) != 0) {
					bad++;
					if (verbose)
						fprintf(stderr, "docs/cuda.md: %s column %d says \"%s\", the table %s\n",
							c[0], k + 1, 1 + k < n ? c[1 + k] : "", qc_kernel_kind_name(want));
				}
			}
		}
		p += len + 1;
	}
	for (int l = 0; l < QC_LAYOUT_COUNT; l++)
		if (seen[l] != 1) {
			bad++;
			if (verbose)
				fprintf(stderr, "docs/cuda.md: layout %s has %d rows\n", qc_layouts[l].name, seen[l]);
		}
	return bad;
}

static char *replace_once(const char *s, const char *from, const char *to)
{
	const char *at = strstr(s, from);
	if (!at)
		return NULL;
	char *o = malloc(strlen(s) - strlen(from) + strlen(to) + 1);
	sprintf(o, "%.*s%s%s", (int)(at - s), s, to, at + strlen(from));
	return o;
}

static void doc_table_matches(void)
{
	char *md = check_read_file("docs/cuda.md", NULL);
	CHECK(md != NULL, "docs/cuda.md unreadable (run from the checkout)");
	if (!md)
		return;
	CHECK(doc_disagrees(md, true) == 0, "docs/cuda.md's \"Which kernel runs\" disagrees with quant/layout.c");
	/* the checker can fail: a changed cell, a missing row, a doubled row */
	char *a = replace_once(md, "| marlin_i8 | mma | mma | mma |", "| marlin_i8 | gemv | mma | mma |");
	char *b = replace_once(md, "| nvfp4_swz |", "| nvfp4_swz_old |");
	char *c = replace_once(md, "| ggml | gemv | gemv | f16+cublas | f16+cublas | moe_gemm |\n",
			       "| ggml | gemv | gemv | f16+cublas | f16+cublas | moe_gemm |\n"
			       "| ggml | gemv | gemv | f16+cublas | f16+cublas | moe_gemm |\n");
	CHECK(a && doc_disagrees(a, false) == 1, "an altered cell is caught");
	CHECK(b && doc_disagrees(b, false) == 1, "a missing layout row is caught");
	CHECK(c && doc_disagrees(c, false) == 1, "a doubled layout row is caught");
	free(a);
	free(b);
	free(c);
	free(md);
}

int main(void)
{
	table_rows_sane();
	kernel_choice_matches_old_rules();
	small_matrix_rule();
	doc_table_matches();
	return check_report("test_layout_table");
}
