/* test_floors.c — includes only go down the floors (floors.mk, docs/house.md).
 *
 * The build already refuses a wrong-way include that needs an -I path (each room
 * compiles with the paths of the rooms below it only), but a quoted include is
 * also looked up beside the including file, so "../engine/model.h" would compile
 * anywhere. This test reads floors.mk, resolves every `#include "..."` in every
 * room the way the compiler does (the file's own folder first, then the room's
 * -I folders) and fails on an include that lands in a room the includer may not
 * use, or on one that resolves only through a folder it may not use. It first
 * proves it can fail: a planted tree with two wrong-way includes must give two.
 */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../tests/check.h"

#define MAX_ROOMS 32
#define MAX_USE 32

struct room {
	char name[32];
	char dir[128];
	int use[MAX_USE]; /* room indices this room may include */
	int n_use;
};

struct floors {
	struct room r[MAX_ROOMS];
	int n;
	char root[PATH_MAX];
	int violations;
	int files, includes;
	int quiet;          /* the planted tree: count, do not print */
};

static int room_index(const struct floors *f, const char *name)
{
	for (int i = 0; i < f->n; i++)
		if (strcmp(f->r[i].name, name) == 0)
			return i;
	return -1;
}

/* Reads ROOMS, DIR_x and USE_x lines of ROOT/floors.mk; 0 on success. */
static int floors_read(struct floors *f, const char *root)
{
	memset(f, 0, sizeof *f);
	snprintf(f->root, sizeof f->root, "%s", root);
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/floors.mk", root);
	FILE *fp = fopen(path, "r");
	if (!fp) {
		fprintf(stderr, "%s: cannot open\n", path);
		return -1;
	}
	char line[1024];
	char uses[MAX_ROOMS][512] = {{0}};
	while (fgets(line, sizeof line, fp)) {
		char key[64], *val = strstr(line, ":=");
		if (line[0] == '#' || !val)
			continue;
		if (sscanf(line, "%63s", key) != 1)
			continue;
		val += 2;
		val[strcspn(val, "\n")] = '\0';
		if (strcmp(key, "ROOMS") == 0) {
			for (char *t = strtok(val, " \t"); t && f->n < MAX_ROOMS; t = strtok(NULL, " \t"))
				snprintf(f->r[f->n++].name, sizeof f->r[0].name, "%s", t);
		} else if (strncmp(key, "DIR_", 4) == 0 || strncmp(key, "USE_", 4) == 0) {
			int i = room_index(f, key + 4);
			if (i < 0) {
				fprintf(stderr, "%s: %s names a room not in ROOMS\n", path, key);
				fclose(fp);
				return -1;
			}
			while (*val == ' ' || *val == '\t')
				val++;
			if (key[0] == 'D')
				snprintf(f->r[i].dir, sizeof f->r[i].dir, "%s", val);
			else
				snprintf(uses[i], sizeof uses[i], "%s", val);
		}
	}
	fclose(fp);
	for (int i = 0; i < f->n; i++) {
		if (!f->r[i].dir[0]) {
			fprintf(stderr, "%s: room %s has no DIR_\n", path, f->r[i].name);
			return -1;
		}
		for (char *t = strtok(uses[i], " \t"); t; t = strtok(NULL, " \t")) {
			int j = room_index(f, t);
			if (j < 0 || f->r[i].n_use >= MAX_USE) {
				fprintf(stderr, "%s: USE_%s names unknown room %s\n", path, f->r[i].name, t);
				return -1;
			}
			f->r[i].use[f->r[i].n_use++] = j;
		}
	}
	return f->n > 0 ? 0 : -1;
}

/* Room of a path relative to the root: the longest DIR that is a prefix of it. */
static int room_of(const struct floors *f, const char *rel)
{
	int best = -1;
	size_t best_len = 0;
	for (int i = 0; i < f->n; i++) {
		size_t l = strlen(f->r[i].dir);
		if (strncmp(rel, f->r[i].dir, l) == 0 && rel[l] == '/' && l > best_len) {
			best = i;
			best_len = l;
		}
	}
	return best;
}

static int may_use(const struct floors *f, int from, int to)
{
	if (from == to)
		return 1;
	for (int k = 0; k < f->r[from].n_use; k++)
		if (f->r[from].use[k] == to)
			return 1;
	return 0;
}

/* Normalizes "a/b/../c" (relative to the root) in place; 0 when it leaves the root. */
static int normalize(char *p)
{
	char *parts[128];
	int n = 0;
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof tmp, "%s", p);
	for (char *t = strtok(tmp, "/"); t; t = strtok(NULL, "/")) {
		if (strcmp(t, ".") == 0)
			continue;
		if (strcmp(t, "..") == 0) {
			if (n == 0)
				return 0;
			n--;
			continue;
		}
		if (n < 128)
			parts[n++] = t;
	}
	p[0] = '\0';
	for (int i = 0; i < n; i++) {
		strcat(p, parts[i]);
		if (i + 1 < n)
			strcat(p, "/");
	}
	return 1;
}

static int exists(const struct floors *f, const char *rel)
{
	char p[PATH_MAX * 2];
	struct stat st;
	snprintf(p, sizeof p, "%s/%s", f->root, rel);
	return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static void check_include(struct floors *f, const char *file, int room, const char *inc)
{
	char cand[PATH_MAX];
	f->includes++;
	/* 1. beside the including file, as the compiler looks first */
	snprintf(cand, sizeof cand, "%s", file);
	char *slash = strrchr(cand, '/');
	if (slash)
		snprintf(slash + 1, sizeof cand - (size_t)(slash + 1 - cand), "%s", inc);
	else
		snprintf(cand, sizeof cand, "%s", inc);
	if (normalize(cand) && exists(f, cand)) {
		int to = room_of(f, cand);
		if (to >= 0 && !may_use(f, room, to)) {
			if (!f->quiet)
				fprintf(stderr, "%s: includes \"%s\" = %s, in room %s, which room %s may not use (floors.mk)\n",
					file, inc, cand, f->r[to].name, f->r[room].name);
			f->violations++;
		}
		return;
	}
	/* 2. the room's own -I folders, in order */
	for (int k = -1; k < f->r[room].n_use; k++) {
		int r = k < 0 ? room : f->r[room].use[k];
		snprintf(cand, sizeof cand, "%s/%s", f->r[r].dir, inc);
		if (normalize(cand) && exists(f, cand))
			return;
	}
	/* 3. found only in a room it may not use: the build would fail too */
	for (int r = 0; r < f->n; r++) {
		snprintf(cand, sizeof cand, "%s/%s", f->r[r].dir, inc);
		if (normalize(cand) && exists(f, cand)) {
			if (!f->quiet)
				fprintf(stderr, "%s: includes \"%s\", found only in room %s, which room %s may not use (floors.mk)\n",
					file, inc, f->r[r].name, f->r[room].name);
			f->violations++;
			return;
		}
	}
	/* else: a system or toolkit header spelled with quotes; not ours */
}

static void check_file(struct floors *f, const char *rel)
{
	int room = room_of(f, rel);
	if (room < 0)
		return;
	char p[PATH_MAX * 2];
	snprintf(p, sizeof p, "%s/%s", f->root, rel);
	FILE *fp = fopen(p, "r");
	if (!fp)
		return;
	f->files++;
	char line[1024];
	while (fgets(line, sizeof line, fp)) {
		char *s = line;
		while (*s == ' ' || *s == '\t')
			s++;
		if (*s++ != '#')
			continue;
		while (*s == ' ' || *s == '\t')
			s++;
		if (strncmp(s, "include", 7) != 0)
			continue;
		s += 7;
		while (*s == ' ' || *s == '\t')
			s++;
		if (*s != '"')
			continue;
		char *end = strchr(s + 1, '"');
		if (!end)
			continue;
		*end = '\0';
		check_include(f, rel, room, s + 1);
	}
	fclose(fp);
}

static int is_source(const char *name)
{
	static const char *const ext[] = {".c", ".h", ".cu", ".cuh", ".def"};
	size_t l = strlen(name);
	for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
		size_t e = strlen(ext[i]);
		if (l > e && strcmp(name + l - e, ext[i]) == 0)
			return 1;
	}
	return 0;
}

static void walk(struct floors *f, const char *rel)
{
	char p[PATH_MAX * 2];
	snprintf(p, sizeof p, "%s/%s", f->root, rel);
	DIR *d = opendir(p);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char sub[PATH_MAX];
		snprintf(sub, sizeof sub, "%s/%s", rel, e->d_name);
		char full[PATH_MAX * 2];
		snprintf(full, sizeof full, "%s/%s", f->root, sub);
		struct stat st;
		if (stat(full, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode))
			walk(f, sub);
		else if (is_source(e->d_name))
			check_file(f, sub);
	}
	closedir(d);
}

/* Checks every room's top folder (sub-rooms are reached by the walk and
 * classified by room_of). Returns the number of violations. */
static int check_tree(struct floors *f)
{
	for (int i = 0; i < f->n; i++)
		if (!strchr(f->r[i].dir, '/'))
			walk(f, f->r[i].dir);
	return f->violations;
}

static void put(const char *root, const char *rel, const char *text)
{
	char p[PATH_MAX * 2];
	snprintf(p, sizeof p, "%s/%s", root, rel);
	char dir[PATH_MAX * 2];
	snprintf(dir, sizeof dir, "%s", p);
	for (char *s = dir + strlen(root) + 1; (s = strchr(s, '/')); s++) {
		*s = '\0';
		mkdir(dir, 0755);
		*s = '/';
	}
	FILE *fp = fopen(p, "w");
	if (fp) {
		fputs(text, fp);
		fclose(fp);
	}
}

static void rm_tree(const char *p)
{
	DIR *d = opendir(p);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d))) {
			if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
				continue;
			char sub[PATH_MAX * 2];
			snprintf(sub, sizeof sub, "%s/%s", p, e->d_name);
			rm_tree(sub);
		}
		closedir(d);
		rmdir(p);
	} else {
		unlink(p);
	}
}

/* A planted tree: low may use nothing, high may use low, high/sub may use both.
 * Two wrong-way includes (one through -I, one through "../"), three right ones. */
static void floors_check_can_fail(void)
{
	char root[] = "/tmp/qc_test_floors.XXXXXX";
	if (!mkdtemp(root)) {
		CHECK(0, "mkdtemp failed");
		return;
	}
	put(root, "floors.mk",
	    "ROOMS := low high sub\n"
	    "DIR_low := low\nUSE_low :=\n"
	    "DIR_high := high\nUSE_high := low\n"
	    "DIR_sub := high/sub\nUSE_sub := low high\n");
	put(root, "low/a.h", "#include \"b.h\"\n");             /* b.h is high's: wrong way (-I) */
	put(root, "low/c.c", "#include \"../high/b.h\"\n");     /* wrong way (beside, ../) */
	put(root, "low/d.c", "#include \"a.h\"\n#include <stdio.h>\n#include \"cuda_runtime.h\"\n");
	put(root, "high/b.h", "#include \"a.h\"\n");            /* down: fine */
	put(root, "high/sub/e.c", "#include \"b.h\"\n#include \"../b.h\"\n#include \"a.h\"\n");
	struct floors *f = calloc(1, sizeof *f);
	CHECK(f && floors_read(f, root) == 0, "planted floors.mk reads");
	if (f && f->n == 3) {
		f->quiet = 1;
		int v = check_tree(f);
		CHECK(v == 2, "planted tree: %d wrong-way includes found, want 2", v);
		CHECK(f->files == 5, "planted tree: %d files checked, want 5", f->files);
	}
	free(f);
	rm_tree(root);
}

static void floors_hold_in_this_tree(void)
{
	struct floors *f = calloc(1, sizeof *f);
	if (!f || floors_read(f, ".") != 0) {
		CHECK(0, "floors.mk not readable from %s (run from the repository root)", getcwd((char[PATH_MAX]){0}, PATH_MAX));
		free(f);
		return;
	}
	int v = check_tree(f);
	CHECK(v == 0, "%d include(s) go up a floor (listed above)", v);
	CHECK(f->files > 150, "only %d source files found in the rooms", f->files);
	CHECK(f->includes > 300, "only %d quoted includes found", f->includes);
	printf("floors: %d rooms, %d files, %d quoted includes, %d wrong-way\n", f->n, f->files, f->includes, v);
	free(f);
}

int main(void)
{
	floors_check_can_fail();
	floors_hold_in_this_tree();
	return check_report("test_floors");
}
