/* mkgguf_weights.c — mkgguf's seeded values and the writer's fill callback.
 *
 * Element j of row r of tensor T depends on (seed, T's name, r, j) only, so bytes do
 * not depend on order, chunking, threads or --split: mean + std * z, z the centred sum
 * of four 16-bit splitmix64 draws (Irwin-Hall, |z| < 3.47), encoded by
 * qc_types[t].quant_row row by row inside the writer's fill callback, threads over
 * whole rows, so memory stays bounded (K-quants: quant/quant_k.c's min/max encoder).
 * Non-goals: trained weights, llama-quantize's K-quant search.
 */
#include "mkgguf.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define GOLDEN 0x9e3779b97f4a7c15ull
#define IH_SD 37837.226                     /* sd of a sum of four uniform u16: 65536/sqrt(3) */
#define IH_MEAN 131070                      /* its mean, 4 * 65535 / 2 */

/* Float arithmetic only (one rounded multiply, one rounded add), so any IEEE float32
 * implementation reproduces the values exactly. */
static void gen_row(const struct tensor_plan *t, uint64_t row, float *dst)
{
	const float mean = t->init == INIT_NORM ? 1.0f : 0.0f;
	const float scale = (float)(t->std / IH_SD);
	if (t->init == INIT_FIXED) {
		memcpy(dst, t->fixed, sizeof(float) * (size_t)t->ne[0]);
		return;
	}
	uint64_t st = mix64(t->seed + row * GOLDEN);
	for (int64_t j = 0; j < t->ne[0]; j++) {
		st += GOLDEN;
		uint64_t z = mix64(st);
		int32_t s = (int32_t)(z & 0xffff) + (int32_t)((z >> 16) & 0xffff) +
			    (int32_t)((z >> 32) & 0xffff) + (int32_t)(z >> 48);
		dst[j] = mean + (float)(s - IH_MEAN) * scale;
	}
}

double qc_mkgguf_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- fill callback: rows -> encoded bytes, threads over whole rows ---------------- */

struct row_job {
	const struct tensor_plan *t;
	uint64_t r0, r1;    /* rows [r0, r1) */
	uint8_t *dst;       /* encoded row r0 */
	float *scratch;
};

static void *run_rows(void *arg)
{
	const struct row_job *j = arg;
	qc_quant_row_fn quant = qc_types[j->t->type].quant_row;
	uint8_t *p = j->dst;
	for (uint64_t r = j->r0; r < j->r1; r++, p += j->t->row_bytes) {
		gen_row(j->t, r, j->scratch);
		quant(j->scratch, p, j->t->ne[0]);
	}
	return NULL;
}

static int encode_rows(struct gen *g, const struct tensor_plan *t, uint64_t r0, uint64_t n_rows,
		       uint8_t *dst)
{
	int n_thr = g->n_threads;
	/* threads only pay for themselves on big spans */
	if ((uint64_t)t->ne[0] * n_rows < (1u << 16))
		n_thr = 1;
	if ((uint64_t)n_thr > n_rows)
		n_thr = (int)n_rows;
	struct row_job jobs[MAX_THREADS];
	pthread_t tid[MAX_THREADS];
	int started = 0, rc = QC_OK;
	for (int i = 0; i < n_thr; i++) {
		uint64_t a = r0 + n_rows * (uint64_t)i / (uint64_t)n_thr;
		uint64_t b = r0 + n_rows * (uint64_t)(i + 1) / (uint64_t)n_thr;
		jobs[i] = (struct row_job){ t, a, b, dst + (a - r0) * t->row_bytes, g->rows[i] };
	}
	for (int i = 1; i < n_thr; i++) {
		if (pthread_create(&tid[i], NULL, run_rows, &jobs[i])) {
			rc = QC_ENOMEM;
			break;
		}
		started = i;
	}
	if (!rc)
		run_rows(&jobs[0]);
	for (int i = 1; i <= started; i++)
		pthread_join(tid[i], NULL);
	return rc;
}

void qc_mkgguf_progress(struct gen *g, const struct tensor_plan *t, bool final)
{
	double now = qc_mkgguf_now_s();
	if (!g->tty || (!final && now - g->t_last < 0.25))
		return;
	g->t_last = now;
	double el = now - g->t_start;
	fprintf(stderr, "\r\033[K%s: %s  %.2f / %.2f GB  %.0f MB/s", g->label, t ? t->name : "done",
		(double)g->done / 1e9, (double)g->total / 1e9,
		el > 0 ? (double)g->done / 1e6 / el : 0.0);
	if (final)
		fputc('\n', stderr);
}

/* qc_gguf_fill_fn: bytes [off, off+n) of tensor ctx. Rows cut by the chunk edges are
 * encoded whole into g->edge and sliced; whole rows are encoded in place. */
int qc_mkgguf_fill_tensor(void *ctx, uint64_t off, void *buf, size_t n)
{
	const struct tensor_plan *t = ctx;
	struct gen *g = t->g;
	uint8_t *dst = buf;
	size_t left = n;
	uint64_t row = off / t->row_bytes, in = off % t->row_bytes;
	int rc = QC_OK;
	if (in) {
		size_t k = t->row_bytes - in < left ? (size_t)(t->row_bytes - in) : left;
		gen_row(t, row, g->rows[0]);
		qc_types[t->type].quant_row(g->rows[0], g->edge, t->ne[0]);
		memcpy(dst, g->edge + in, k);
		dst += k;
		left -= k;
		row++;
	}
	uint64_t whole = left / t->row_bytes;
	if (whole) {
		rc = encode_rows(g, t, row, whole, dst);
		dst += whole * t->row_bytes;
		left -= (size_t)(whole * t->row_bytes);
		row += whole;
	}
	if (!rc && left) {
		gen_row(t, row, g->rows[0]);
		qc_types[t->type].quant_row(g->rows[0], g->edge, t->ne[0]);
		memcpy(dst, g->edge, left);
	}
	g->done += n;
	qc_mkgguf_progress(g, t, false);
	return rc;
}
