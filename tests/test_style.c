/* test_style.c — the type-traits table is the only place that knows the types:
 * no hand-written `case QC_TYPE_...` anywhere in the sources (STYLE.md §1: ggml's
 * Q4_K appears 115 times across 16 CUDA files; here a new type touches qtype.def,
 * its block struct and its decoder, nothing else). */
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

#include "../tests/check.h"

static int count_in_text(const char *s)
{
	int n = 0;
	for (const char *p = s; (p = strstr(p, "case QC_TYPE_")); p++)
		n++;
	return n;
}

static int count_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return 0;
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = calloc(1, (size_t)len + 1);
	size_t got = fread(b, 1, (size_t)len, f);
	fclose(f);
	b[got] = '\0';
	int n = count_in_text(b);
	if (n)
		fprintf(stderr, "%s: %d hand-written 'case QC_TYPE_'\n", path, n);
	free(b);
	return n;
}

static int scan(const char *dir, int *files)
{
	int n = 0;
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char p[1024];
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		struct stat st;
		if (stat(p, &st) != 0)
			continue;
		size_t l = strlen(e->d_name);
		if (S_ISDIR(st.st_mode)) {
			n += scan(p, files);
		} else if (l > 2 && (strcmp(e->d_name + l - 2, ".c") == 0 || strcmp(e->d_name + l - 2, ".h") == 0 ||
				     (l > 3 && (strcmp(e->d_name + l - 3, ".cu") == 0 || strcmp(e->d_name + l - 4, ".cuh") == 0)))) {
			n += count_file(p);
			(*files)++;
		}
	}
	if (d)
		closedir(d);
	return n;
}

int main(void)
{
	/* the counter must see one when there is one */
	CHECK(count_in_text("switch (t) { case QC_TYPE_Q4_K: break; }") == 1, "counter misses a case label");
	CHECK(count_in_text("qc_types[QC_TYPE_Q4_K]") == 0, "counter flags a table index");
	const char *dirs[] = { "formats", "convert", "kernels", "runtime", "samples" };
	int files = 0, n = 0;
	for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
		n += scan(dirs[i], &files);
	CHECK(files > 20, "scanned only %d source files (run from the repo root)", files);
	CHECK(n == 0, "%d hand-written type switches outside qtype.def", n);
	return check_report("test_style");
}
