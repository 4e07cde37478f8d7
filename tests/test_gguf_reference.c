/* test_gguf_reference.c — the GGUF reader + type table against llama.cpp itself.
 * For every fixture GGUF with a reference/NAME.json (made by llama.cpp c392e509,
 * see fixtures/reference/README.md): same tensor names, types and shapes in file
 * order, and our dequantization of every tensor reproduces llama.cpp's float64
 * sum, sum of squares, max |x| (1e-6 relative) and the 65 sampled float32 values
 * (1e-6 relative; in practice bit-exact). Also covers types without a llama.cpp
 * fixture through tests/data/extra-types.{gguf,json} (values from gguf-py). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <string.h>

#include "../tests/check.h"
#include "gguf.h"

static bool close_rel(double a, double b, double rel)
{
	if (a == b)
		return true;
	double scale = fmax(fabs(a), fabs(b));
	return fabs(a - b) <= rel * scale;
}

/* Compare one tensor against its reference entry; returns the number of mismatches
 * (so a deliberately corrupted entry can prove the comparator fails). */
static int compare_tensor(const struct qc_gguf_model *m, const cJSON *ref, const char *file, bool report)
{
	int bad = 0;
	const char *name = cJSON_GetObjectItem(ref, "name")->valuestring;
	const struct qc_gguf_tensor *t = qc_gguf_model_find(m, name);
	if (!t) {
		if (report)
			fprintf(stderr, "%s: tensor %s missing\n", file, name);
		return 1;
	}
	const char *type = cJSON_GetObjectItem(ref, "type")->valuestring;
	if (strcmp(type, qc_type_get(t->type)->name) != 0) {
		if (report)
			fprintf(stderr, "%s: %s type %s vs %s\n", file, name, qc_type_get(t->type)->name, type);
		bad++;
	}
	const cJSON *ne = cJSON_GetObjectItem(ref, "ne");
	for (int d = 0; d < cJSON_GetArraySize(ne); d++)
		if ((double)t->ne[d] != cJSON_GetArrayItem(ne, d)->valuedouble)
			bad++;
	uint64_t n = t->n_elems;
	float *v = malloc(n * sizeof(float) + 1);
	uint64_t rows = n / (uint64_t)t->ne[0], rb;
	qc_type_row_bytes(t->type, (uint64_t)t->ne[0], &rb);
	const uint8_t *data = qc_gguf_model_data(m, t);
	for (uint64_t r = 0; r < rows; r++)
		qc_type_get(t->type)->dequant_row(data + r * rb, v + r * (uint64_t)t->ne[0], t->ne[0]);
	double sum = 0, sumsq = 0, maxabs = 0;
	for (uint64_t i = 0; i < n; i++) {
		sum += v[i];
		sumsq += (double)v[i] * v[i];
		maxabs = fmax(maxabs, fabs(v[i]));
	}
	double rsum = cJSON_GetObjectItem(ref, "sum")->valuedouble;
	double rsq = cJSON_GetObjectItem(ref, "sumsq")->valuedouble;
	double rmax = cJSON_GetObjectItem(ref, "maxabs")->valuedouble;
	/* sums of many signed values cancel: compare against the magnitude they came from */
	double sum_scale = fmax(fabs(rsum), sqrt(rsq * (double)n) * 1e-3);
	if (fabs(sum - rsum) > 1e-6 * sum_scale + 1e-9 || !close_rel(sumsq, rsq, 1e-6) || !close_rel(maxabs, rmax, 1e-6)) {
		if (report)
			fprintf(stderr, "%s: %s (%s) sum %.9g/%.9g sumsq %.9g/%.9g max %.9g/%.9g\n", file, name, type, sum, rsum,
				sumsq, rsq, maxabs, rmax);
		bad++;
	}
	const cJSON *s;
	cJSON_ArrayForEach(s, cJSON_GetObjectItem(ref, "samples")) {
		uint64_t idx = (uint64_t)cJSON_GetArrayItem(s, 0)->valuedouble;
		double want = cJSON_GetArrayItem(s, 1)->valuedouble;
		if (idx >= n || !close_rel(v[idx], want, 1e-6)) {
			if (report && bad < 4)
				fprintf(stderr, "%s: %s (%s) [%llu] = %.9g, llama.cpp %.9g\n", file, name, type,
					(unsigned long long)idx, idx < n ? v[idx] : NAN, want);
			bad++;
		}
	}
	free(v);
	return bad;
}

static int types_seen[QC_TYPE_COUNT];

static void check_file(const char *refpath)
{
	char *js = check_read_file(refpath, NULL);
	cJSON *ref = js ? cJSON_Parse(js) : NULL;
	CHECK(ref != NULL, "cannot read %s", refpath);
	if (!ref) {
		free(js);
		return;
	}
	char path[1024];
	snprintf(path, sizeof path, "%s/%s", check_fixtures(), cJSON_GetObjectItem(ref, "file")->valuestring);
	struct qc_gguf_model *m = NULL;
	struct qc_err err = {0};
	int rc = qc_gguf_model_open(path, &m, &err);
	CHECK(rc == QC_OK, "%s: %s", path, err.msg);
	if (rc == QC_OK) {
		const cJSON *deq = cJSON_GetObjectItem(ref, "dequant");
		CHECK((int)m->n_tensors == cJSON_GetArraySize(deq), "%s: %llu tensors vs %d", path,
		      (unsigned long long)m->n_tensors, cJSON_GetArraySize(deq));
		int i = 0;
		const cJSON *t;
		cJSON_ArrayForEach(t, deq) {
			const char *nm = cJSON_GetObjectItem(t, "name")->valuestring;
			CHECK(i < (int)m->n_tensors && strcmp(m->tensors[i]->name, nm) == 0, "%s: tensor %d is not %s", path, i, nm);
			int bad = compare_tensor(m, t, path, true);
			CHECK(bad == 0, "%s: %s: %d mismatches against llama.cpp", path, nm, bad);
			const struct qc_gguf_tensor *gt = qc_gguf_model_find(m, nm);
			if (gt && bad == 0)
				types_seen[gt->type]++;
			i++;
		}
		/* the comparator must notice a wrong value: corrupt one sample of the first tensor */
		cJSON *first = cJSON_GetArrayItem(deq, 0);
		cJSON *smp = cJSON_GetArrayItem(cJSON_GetObjectItem(first, "samples"), 1);
		cJSON *val = cJSON_GetArrayItem(smp, 1);
		cJSON_SetNumberValue(val, val->valuedouble * 1.001 + 1e-3);
		CHECK(compare_tensor(m, first, path, false) > 0, "%s: corrupted reference not detected", path);
	}
	qc_gguf_model_close(m);
	cJSON_Delete(ref);
	free(js);
}

/* tests/data/extra-types.json: {"file", "tensors":[{"name","type","ne","values":[...]}]} */
static void check_extra_types(void)
{
	char *js = check_read_file("tests/data/extra-types.json", NULL);
	cJSON *ref = js ? cJSON_Parse(js) : NULL;
	CHECK(ref != NULL, "cannot read tests/data/extra-types.json");
	struct qc_gguf_model *m = NULL;
	struct qc_err err = {0};
	int rc = ref ? qc_gguf_model_open("tests/data/extra-types.gguf", &m, &err) : QC_EIO;
	CHECK(rc == QC_OK, "extra-types.gguf: %s", err.msg);
	const cJSON *t;
	if (rc == QC_OK)
		cJSON_ArrayForEach(t, cJSON_GetObjectItem(ref, "tensors")) {
			const char *nm = cJSON_GetObjectItem(t, "name")->valuestring;
			const struct qc_gguf_tensor *gt = qc_gguf_model_find(m, nm);
			CHECK(gt != NULL, "extra-types: %s missing", nm);
			if (!gt)
				continue;
			CHECK(strcmp(qc_type_get(gt->type)->name, cJSON_GetObjectItem(t, "type")->valuestring) == 0,
			      "extra-types: %s type", nm);
			float *v = malloc(gt->n_elems * sizeof(float) + 1);
			uint64_t rows = gt->n_elems / (uint64_t)gt->ne[0], rb;
			qc_type_row_bytes(gt->type, (uint64_t)gt->ne[0], &rb);
			for (uint64_t r = 0; r < rows; r++)
				qc_type_get(gt->type)->dequant_row(qc_gguf_model_data(m, gt) + r * rb, v + r * (uint64_t)gt->ne[0],
								  gt->ne[0]);
			const cJSON *vals = cJSON_GetObjectItem(t, "values");
			CHECK((uint64_t)cJSON_GetArraySize(vals) == gt->n_elems, "extra-types: %s count", nm);
			int bad = 0, i = 0;
			const cJSON *x;
			cJSON_ArrayForEach(x, vals) {
				if ((uint64_t)i < gt->n_elems && !close_rel(v[i], x->valuedouble, 1e-6))
					bad++;
				i++;
			}
			CHECK(bad == 0, "extra-types: %s (%s): %d of %d values differ from gguf-py", nm,
			      qc_type_get(gt->type)->name, bad, i);
			if (!bad)
				types_seen[gt->type]++;
			free(v);
		}
	qc_gguf_model_close(m);
	cJSON_Delete(ref);
	free(js);
}

int main(void)
{
	char dir[1024];
	const bool have_fx = check_have_fixtures("test_gguf_reference");
	snprintf(dir, sizeof dir, "%s/reference", check_fixtures());
	DIR *d = have_fx ? opendir(dir) : NULL;
	CHECK(!have_fx || d != NULL, "no fixture directory %s (set QC_FIXTURES)", dir);
	int files = 0;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		size_t n = strlen(e->d_name);
		if (n < 6 || strcmp(e->d_name + n - 5, ".json") != 0)
			continue;
		char p[2048];
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		check_file(p);
		files++;
	}
	if (d)
		closedir(d);
	CHECK(!have_fx || files >= 29, "only %d reference files found", files);
	check_extra_types();
	/* every weight type in the table is covered by one of the two sources, except the
	 * Hugging Face scheme encodings: no GGUF holds them; tests/test_hf_quant.c compares
	 * each one, row by row, with the dequantization of the library that wrote it
	 * (auto-gptq, autoawq, bitsandbytes, compressed-tensors) and checks it saw all seven */
	const enum qc_type hf_only[] = { QC_TYPE_HQ4, QC_TYPE_HQ8, QC_TYPE_BNB_NF4, QC_TYPE_BNB_FP4,
					 QC_TYPE_F8E4M3, QC_TYPE_NVFP4, QC_TYPE_F8A8 };
	for (size_t i = 0; i < sizeof hf_only / sizeof hf_only[0]; i++)
		types_seen[hf_only[i]] += !types_seen[hf_only[i]];
	for (int t = 0; have_fx && t < QC_TYPE_COUNT; t++) /* coverage is the fixtures' */
		if (qc_type_valid((uint32_t)t))
			CHECK(types_seen[t] > 0, "type %s is not checked against an independent reference",
			      qc_type_get((enum qc_type)t)->name);
	return check_report("test_gguf_reference");
}
