/* test_qrun.c — the qrun command line as a user runs it: --json greedy output on a
 * .gguf equals llama.cpp's reference ids (stories260K: every margin is large), the
 * same through a converted bundle, --tokenize (stdin bytes) equals llama.cpp's own
 * tokenizer test vectors on vocab-only GGUFs, --n-choices (choice i = a run with
 * seed + i; greedy choices = llama.cpp's ids), and --device cuda says it is absent. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../tests/check.h"
#include "bundle.h"

static const char *bin(void)
{
	const char *b = getenv("QC_BIN");
	return b && *b ? b : "build/bin";
}

/* Run cmd with optional stdin bytes; returns malloc'd stdout, *status the exit code. */
static char *run(const char *cmd, const char *in, size_t in_len, int *status)
{
	char tmp[] = "/tmp/qc_qrun_in.XXXXXX";
	int fd = mkstemp(tmp);
	if (fd < 0 || (in_len && write(fd, in, in_len) != (ssize_t)in_len))
		return NULL;
	close(fd);
	char full[4096];
	snprintf(full, sizeof full, "%s < %s 2>/dev/null", cmd, tmp);
	FILE *p = popen(full, "r");
	char *out = NULL;
	size_t len = 0, cap = 0;
	int c;
	while (p && (c = fgetc(p)) != EOF) {
		if (len + 2 > cap) {
			cap = cap ? cap * 2 : 4096;
			out = realloc(out, cap);
		}
		out[len++] = (char)c;
	}
	if (out)
		out[len] = '\0';
	int st = p ? pclose(p) : -1;
	*status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	unlink(tmp);
	return out ? out : strdup("");
}

static cJSON *load_json(const char *path)
{
	char *b = check_read_file(path, NULL);
	cJSON *j = b ? cJSON_Parse(b) : NULL;
	free(b);
	return j;
}

static bool same_ids(const cJSON *a, const cJSON *b)
{
	if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b))
		return false;
	for (int i = 0; i < cJSON_GetArraySize(a); i++)
		if (cJSON_GetArrayItem(a, i)->valuedouble != cJSON_GetArrayItem(b, i)->valuedouble)
			return false;
	return true;
}

static void check_greedy(const char *model, const cJSON *g)
{
	const char *prompt = cJSON_GetObjectItem(g, "prompt")->valuestring;
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "%s/qrun %s -p - -n 32 --temp 0 --ignore-eos --json", bin(), model);
	int st;
	char *out = run(cmd, prompt, strlen(prompt), &st);
	cJSON *j = out ? cJSON_Parse(out) : NULL;
	CHECK(st == 0 && j, "%s: qrun failed (%d): %s", model, st, out ? out : "");
	if (j) {
		CHECK(same_ids(cJSON_GetObjectItem(j, "prompt_ids"), cJSON_GetObjectItem(g, "prompt_ids")),
		      "%s '%s': prompt ids differ from llama.cpp", model, prompt);
		CHECK(same_ids(cJSON_GetObjectItem(j, "ids"), cJSON_GetObjectItem(g, "ids")),
		      "%s '%s': greedy ids differ from llama.cpp", model, prompt);
	}
	cJSON_Delete(j);
	free(out);
}

static void check_tokenize(const char *vocab)
{
	char inp[1100], outp[1100], model[1024];
	snprintf(model, sizeof model, "%s/vocab/ggml-vocab-%s.gguf", check_fixtures(), vocab);
	snprintf(inp, sizeof inp, "%s.inp", model);
	snprintf(outp, sizeof outp, "%s.out", model);
	FILE *fi = fopen(inp, "rb"), *fo = fopen(outp, "rb");
	CHECK(fi && fo, "missing %s", inp);
	if (!fi || !fo)
		return;
	static char ib[1 << 16], ob[1 << 16];
	size_t il = fread(ib, 1, sizeof ib - 1, fi), ol = fread(ob, 1, sizeof ob - 1, fo);
	ib[il] = ob[ol] = '\0';
	fclose(fi);
	fclose(fo);
	const char *sep = "\n__ggml_vocab_test__\n";
	char *s = ib, *line = ob;
	int n = 0, ok = 0;
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "%s/qrun %s --tokenize -", bin(), model);
	for (char *e; (e = strstr(s, sep)); s = e + strlen(sep)) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		int st;
		char *got = run(cmd, s, (size_t)(e - s), &st);
		/* compare as whitespace-separated id lists */
		char *a = strdup(got), *b = strdup(line);
		for (char *p = a; *p; p++)
			if (*p == '\n')
				*p = ' ';
		char *x = a, *y = b;
		while (*x == ' ')
			x++;
		while (*y == ' ')
			y++;
		size_t lx = strlen(x), ly = strlen(y);
		while (lx && x[lx - 1] == ' ')
			x[--lx] = '\0';
		while (ly && y[ly - 1] == ' ')
			y[--ly] = '\0';
		ok += st == 0 && strcmp(x, y) == 0;
		n++;
		free(a);
		free(b);
		free(got);
		line = nl ? nl + 1 : line + strlen(line);
	}
	CHECK(n == 46 && ok == n, "qrun --tokenize %s: %d/%d strings match llama.cpp", vocab, ok, n);
}


/* stderr of cmd (stdout dropped), malloc'd; *status its exit code. */
static char *run_stderr(const char *cmd, int *status)
{
	char full[4096];
	snprintf(full, sizeof full, "%s 2>&1 >/dev/null </dev/null", cmd);
	FILE *p = popen(full, "r");
	char *out = calloc(1, 65536);
	size_t len = p ? fread(out, 1, 65535, p) : 0;
	out[len] = '\0';
	int st = p ? pclose(p) : -1;
	*status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	return out;
}

/* qrun MODEL -p PROMPT --json with extra flags; the parsed object (caller deletes) or NULL. */
static cJSON *qrun_json(const char *model, const char *prompt, const char *flags)
{
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "%s/qrun %s -p - --json %s", bin(), model, flags);
	int st;
	char *out = run(cmd, prompt, strlen(prompt), &st);
	cJSON *j = st == 0 && out ? cJSON_Parse(out) : NULL;
	free(out);
	return j;
}

static const char *jstr(const cJSON *j, const char *k)
{
	const cJSON *v = cJSON_GetObjectItem(j, k);
	return cJSON_IsString(v) ? v->valuestring : "";
}

/* The options issue #3 names on the command line: stop strings, chunked prefill and
 * a small K/V pool (same greedy ids), sampling flags (a seed reproduces, top-k 1 is
 * greedy), and bad values refused naming the flag. */
static void check_options(const char *model)
{
	const char *prompt = "Once upon a time";
	cJSON *full = qrun_json(model, prompt, "-n 40");
	CHECK(full != NULL, "qrun -n 40 --json failed");
	if (!full)
		return;
	const char *text = jstr(full, "text");
	const cJSON *ids = cJSON_GetObjectItem(full, "ids");
	CHECK(!strcmp(jstr(full, "finish"), "length") && cJSON_GetArraySize(ids) == 40, "plain run: %s",
	      jstr(full, "finish"));

	/* a stop string taken from the middle of the greedy text */
	const char *word = strstr(text, " little");
	CHECK(word != NULL, "greedy text lacks ' little': %s", text);
	if (word) {
		cJSON *st = qrun_json(model, prompt, "-n 40 --stop ' little'");
		CHECK(st != NULL, "qrun --stop failed");
		if (st) {
			size_t pre = (size_t)(word - text);
			const char *t = jstr(st, "text");
			CHECK(strlen(t) == pre && !strncmp(t, text, pre),
			      "--stop: text '%s', expected the %zu bytes before the stop string", t, pre);
			CHECK(!strcmp(jstr(st, "finish"), "stop_string"), "--stop: finish %s", jstr(st, "finish"));
			const cJSON *sid = cJSON_GetObjectItem(st, "ids");
			int n = cJSON_GetArraySize(sid);
			bool prefix = n > 0 && n < 40;
			for (int i = 0; prefix && i < n; i++)
				prefix = cJSON_GetArrayItem(sid, i)->valueint == cJSON_GetArrayItem(ids, i)->valueint;
			CHECK(prefix, "--stop: %d ids, expected a proper prefix of the plain run's", n);
			cJSON_Delete(st);
		}
		/* the streamed (non-JSON) form prints the same text */
		char cmd[2048];
		snprintf(cmd, sizeof cmd, "%s/qrun %s -p - -n 40 --stop ' little'", bin(), model);
		int rc;
		char *out = run(cmd, prompt, strlen(prompt), &rc);
		size_t pre = (size_t)(word - text);
		CHECK(rc == 0 && out && strlen(out) == pre + 1 && !strncmp(out, text, pre) && out[pre] == '\n',
		      "--stop streamed: '%s'", out ? out : "");
		free(out);
	}
	/* a stop string that never occurs changes nothing */
	cJSON *no = qrun_json(model, prompt, "-n 40 --stop 'zzqq'");
	CHECK(no && !strcmp(jstr(no, "text"), text) && !strcmp(jstr(no, "finish"), "length"),
	      "--stop that never matches changed the output");
	cJSON_Delete(no);

	/* prefill in 3-token chunks over a 1 MiB K/V pool: the same greedy ids */
	cJSON *ch = qrun_json(model, prompt, "-n 40 --max-prefill-tokens 3 --kv-mem 1 --max-batch-tokens 8");
	CHECK(ch && same_ids(cJSON_GetObjectItem(ch, "ids"), ids) &&
	      same_ids(cJSON_GetObjectItem(ch, "prompt_ids"), cJSON_GetObjectItem(full, "prompt_ids")),
	      "chunked prefill changed the greedy ids");
	cJSON_Delete(ch);

	/* sampling: a seed reproduces, different seeds differ somewhere, top-k 1 is greedy */
	const char *samp = "-n 40 --temp 1.0 --top-p 0.95 --min-p 0.02 --repeat-penalty 1.1";
	char f1[256], f2[256];
	snprintf(f1, sizeof f1, "%s --seed 7", samp);
	cJSON *s1 = qrun_json(model, prompt, f1), *s1b = qrun_json(model, prompt, f1);
	CHECK(s1 && s1b && same_ids(cJSON_GetObjectItem(s1, "ids"), cJSON_GetObjectItem(s1b, "ids")),
	      "the same --seed gave different tokens");
	int differ = 0;
	for (int seed = 8; seed < 12 && s1; seed++) {
		snprintf(f2, sizeof f2, "%s --seed %d", samp, seed);
		cJSON *s2 = qrun_json(model, prompt, f2);
		differ += s2 && !same_ids(cJSON_GetObjectItem(s1, "ids"), cJSON_GetObjectItem(s2, "ids"));
		cJSON_Delete(s2);
	}
	CHECK(differ > 0, "four other seeds all gave seed 7's tokens: sampling ignores the seed");
	cJSON_Delete(s1);
	cJSON_Delete(s1b);
	cJSON *k1 = qrun_json(model, prompt, "-n 40 --temp 1.5 --top-k 1 --seed 3");
	CHECK(k1 && same_ids(cJSON_GetObjectItem(k1, "ids"), ids), "--top-k 1 is not greedy");
	cJSON_Delete(k1);
	cJSON_Delete(full);

	/* bad values: exit 1, the flag named */
	static const char *bad[][2] = {
		{"--top-p 2", "--top-p"},           {"--kv-mem 0", "--kv-mem"},
		{"--max-prefill-tokens x", "--max-prefill-tokens"}, {"-n 0", "-n"},
		{"--device tpu", "--device"},        {"--temp", "--temp"},
		{"--stop ''", "--stop"},             {"--seed -1", "--seed"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char cmd[2048];
		snprintf(cmd, sizeof cmd, "%s/qrun %s -p hi %s", bin(), model, bad[i][0]);
		int rc;
		char *e = run_stderr(cmd, &rc);
		CHECK(rc == 1 && strstr(e, bad[i][1]), "qrun ... %s: exit %d, stderr '%s'", bad[i][0], rc, e);
		free(e);
	}
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "%s/qrun bench --help | grep -q -- --max-prefill-tokens", bin());
	CHECK(system(cmd) == 0, "qrun bench --help does not list the engine flags");
}

/* qrun --n-choices: with a seed, choice i of N=3 equals a separate run with seed
 * S + i (text and ids: the prompt prefilled once changes nothing); greedy N=2
 * gives llama.cpp's greedy ids twice (g: the reference's first greedy case);
 * --stop ends each choice alone; 0 and 17 are refused naming the flag. */
static void check_n_choices(const char *model, const cJSON *g)
{
	const char *prompt = "Once upon a time";
	const char *samp = "-n 24 --temp 1.0 --top-p 0.95 --repeat-penalty 1.1";
	char f[512];
	snprintf(f, sizeof f, "%s --seed 40 --n-choices 3", samp);
	cJSON *all = qrun_json(model, prompt, f);
	CHECK(cJSON_IsArray(all) && cJSON_GetArraySize(all) == 3, "--n-choices 3 --json: not an array of 3");
	int distinct = 0;
	for (int i = 0; i < 3 && cJSON_GetArraySize(all) == 3; i++) {
		const cJSON *c = cJSON_GetArrayItem(all, i);
		snprintf(f, sizeof f, "%s --seed %d", samp, 40 + i);
		cJSON *one = qrun_json(model, prompt, f);
		CHECK(one && cJSON_GetObjectItem(c, "index") && cJSON_GetObjectItem(c, "index")->valueint == i,
		      "choice %d: index missing or wrong", i);
		CHECK(one && same_ids(cJSON_GetObjectItem(c, "ids"), cJSON_GetObjectItem(one, "ids")) &&
		      !strcmp(jstr(c, "text"), jstr(one, "text")) && !strcmp(jstr(c, "finish"), jstr(one, "finish")) &&
		      same_ids(cJSON_GetObjectItem(c, "prompt_ids"), cJSON_GetObjectItem(one, "prompt_ids")),
		      "choice %d differs from the run with --seed %d: '%s' vs '%s'", i, 40 + i, jstr(c, "text"),
		      one ? jstr(one, "text") : "");
		distinct += i > 0 && !same_ids(cJSON_GetObjectItem(c, "ids"),
					       cJSON_GetObjectItem(cJSON_GetArrayItem(all, 0), "ids"));
		cJSON_Delete(one);
	}
	CHECK(distinct > 0, "the three choices are all the same: the seeds are not seed + i");
	cJSON_Delete(all);

	cJSON *gr = qrun_json(model, cJSON_GetObjectItem(g, "prompt")->valuestring,
			      "-n 32 --ignore-eos --n-choices 2");
	CHECK(cJSON_GetArraySize(gr) == 2, "greedy --n-choices 2: not an array of 2");
	for (int i = 0; i < cJSON_GetArraySize(gr); i++)
		CHECK(same_ids(cJSON_GetObjectItem(cJSON_GetArrayItem(gr, i), "ids"), cJSON_GetObjectItem(g, "ids")),
		      "greedy choice %d differs from llama.cpp's ids", i);
	cJSON_Delete(gr);

	/* the plain form: one header per choice, then its text (greedy: the reference's) */
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "%s/qrun %s -p - -n 32 --ignore-eos --n-choices 2", bin(), model);
	int rc;
	const char *gp = cJSON_GetObjectItem(g, "prompt")->valuestring, *gt = jstr(g, "text");
	char *out = run(cmd, gp, strlen(gp), &rc);
	char want[1024];
	snprintf(want, sizeof want, "--- choice 0 ---\n%s\n--- choice 1 ---\n%s\n", gt, gt);
	CHECK(rc == 0 && out && !strcmp(out, want), "--n-choices 2 plain: '%s', want '%s'", out ? out : "", want);
	free(out);

	/* --stop per choice: each stopped choice's text ends before its own stop string */
	snprintf(f, sizeof f, "%s --seed 40 --n-choices 3 --stop ' was'", samp);
	cJSON *st = qrun_json(model, prompt, f);
	CHECK(cJSON_GetArraySize(st) == 3, "--n-choices 3 --stop: not an array of 3");
	int stopped = 0;
	for (int i = 0; i < cJSON_GetArraySize(st); i++) {
		const cJSON *c = cJSON_GetArrayItem(st, i);
		bool s = !strcmp(jstr(c, "finish"), "stop_string");
		stopped += s;
		CHECK(!strstr(jstr(c, "text"), " was") && (s || !strcmp(jstr(c, "finish"), "length")),
		      "choice %d with --stop ' was': finish %s, text '%s'", i, jstr(c, "finish"), jstr(c, "text"));
	}
	CHECK(stopped > 0, "no choice met ' was'");
	cJSON_Delete(st);

	static const char *bad[] = {"--n-choices 0", "--n-choices 17", "--n-choices x", "--n-choices"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(cmd, sizeof cmd, "%s/qrun %s -p hi %s", bin(), model, bad[i]);
		char *e = run_stderr(cmd, &rc);
		CHECK(rc == 1 && strstr(e, "--n-choices"), "qrun ... %s: exit %d, stderr '%s'", bad[i], rc, e);
		free(e);
	}
}

/* Entries in dir other than . and .. (-1: unreadable). */
static int dir_entries(const char *dir, char *first, size_t first_len)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && !n++)
			snprintf(first, first_len, "%s", e->d_name);
	closedir(d);
	return n;
}

/* Remove dir and what is in it, one level of subdirectories deep. */
static void rm_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[2048];
	while (d && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		if (unlink(p) != 0)
			rm_dir(p);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

/* Does process pid hold an open file under prefix (its temp bundle)? */
static bool holds_file_under(pid_t pid, const char *prefix)
{
	char fdd[64], p[384], target[2048];
	snprintf(fdd, sizeof fdd, "/proc/%d/fd", (int)pid);
	DIR *d = opendir(fdd);
	struct dirent *e;
	bool found = false;
	while (d && !found && (e = readdir(d))) {
		snprintf(p, sizeof p, "%s/%s", fdd, e->d_name);
		ssize_t n = readlink(p, target, sizeof target - 1);
		if (n > 0) {
			target[n] = '\0';
			found = !strncmp(target, prefix, strlen(prefix));
		}
	}
	if (d)
		closedir(d);
	return found;
}

/* Start qrun on model with TMPDIR=tmpdir, stdout/stderr to /dev/null. */
static pid_t spawn_qrun(const char *model, const char *tmpdir)
{
	char exe[1024];
	snprintf(exe, sizeof exe, "%s/qrun", bin());
	pid_t pid = fork();
	if (pid == 0) {
		int nul = open("/dev/null", O_RDWR);
		dup2(nul, 0);
		dup2(nul, 1);
		dup2(nul, 2);
		setenv("TMPDIR", tmpdir, 1);
		execl(exe, exe, model, "-p", "hi", "-n", "4", (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* issue 15 #4: qrun converting a .gguf on the fly and killed (TERM, INT, HUP, or
 * KILL: a crash) while its temp bundle is open leaves nothing in $TMPDIR; a normal
 * run leaves nothing either. The model (~110 MB) is big enough that conversion is
 * still running when the signal lands; a run that finished first is not counted. */
static void check_qrun_signal_leaves_no_temp(const char *work)
{
	char model[1100], tmp[1100], prefix[1200], cmd[4096], first[256] = "";
	snprintf(model, sizeof model, "%s/big.gguf", work);
	snprintf(tmp, sizeof tmp, "%s/tmp", work);
	snprintf(prefix, sizeof prefix, "%s/", tmp);
	snprintf(cmd, sizeof cmd, "%s/mkgguf --preset tiny --n-embd 512 --n-layer 8 --n-ff 1408 --n-vocab 32000 "
		 "-o %s >/dev/null 2>&1", bin(), model);
	bool ok = system(cmd) == 0 && mkdir(tmp, 0700) == 0;
	CHECK(ok, "qrun_signal: cannot make %s and %s", model, tmp);
	if (!ok)
		return;
	/* the checker can fail: a stray entry is seen */
	snprintf(cmd, sizeof cmd, "%s/stray", tmp);
	close(open(cmd, O_CREAT | O_WRONLY, 0600));
	CHECK(dir_entries(tmp, first, sizeof first) == 1, "dir_entries misses a stray file");
	unlink(cmd);
	static const struct { int sig; const char *name; } sigs[] = {
		{ SIGTERM, "TERM" }, { SIGINT, "INT" }, { SIGHUP, "HUP" }, { SIGKILL, "KILL" },
	};
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
		bool hit = false;
		for (int attempt = 0; attempt < 3 && !hit; attempt++) {
			pid_t pid = spawn_qrun(model, tmp);
			int st = 0;
			const struct timespec ms = { 0, 1000000 };
			for (int k = 0; k < 20000; k++) { /* up to ~20 s for the temp bundle to appear */
				if (waitpid(pid, &st, WNOHANG) == pid) {
					pid = -1;
					break;
				}
				if (holds_file_under(pid, prefix)) {
					kill(pid, sigs[i].sig);
					hit = true;
					break;
				}
				nanosleep(&ms, NULL);
			}
			if (pid > 0)
				while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
					;
			first[0] = '\0';
			int n = dir_entries(tmp, first, sizeof first);
			CHECK(n == 0, "qrun_%s_mid_conversion_leaves_no_temp: %d entries in $TMPDIR, first '%s'", sigs[i].name,
			      n, first);
			rm_dir(tmp);
			mkdir(tmp, 0700);
		}
		CHECK(hit, "qrun_signal %s: never caught qrun with its temp bundle open", sigs[i].name);
	}
	/* a run to the end leaves nothing either */
	snprintf(cmd, sizeof cmd, "TMPDIR=%s %s/qrun %s -p hi -n 2 >/dev/null 2>&1", tmp, bin(), model);
	int rc = system(cmd);
	CHECK(rc == 0 && dir_entries(tmp, first, sizeof first) == 0, "qrun on a .gguf left '%s' in $TMPDIR (exit %d)",
	      first, rc);
}

/* issue 15 #8b: a .gguf of an architecture qrun does not run is refused before any
 * conversion (TMPDIR points nowhere, so converting would fail differently), with a
 * message naming the .gguf and the architecture. */
static void check_qrun_refuses_unsupported_arch_first(const char *work)
{
	char model[1100], cmd[4096];
	snprintf(model, sizeof model, "%s/bloom.gguf", work);
	snprintf(cmd, sizeof cmd, "%s/mkgguf --preset tiny -o %s >/dev/null 2>&1", bin(), model);
	CHECK(system(cmd) == 0, "mkgguf --preset tiny");
	size_t n = 0;
	char *b = check_read_file(model, &n);
	/* general.architecture = "llama" -> "bloom" (same length, a real llama.cpp arch) */
	char *k = b ? memmem(b, n, "general.architecture", 20) : NULL;
	bool patched = k && (size_t)(k - b) + 20 + 4 + 8 + 5 <= n && !memcmp(k + 20 + 4 + 8, "llama", 5);
	if (patched) {
		memcpy(k + 20 + 4 + 8, "bloom", 5);
		FILE *f = fopen(model, "wb");
		patched = f && fwrite(b, 1, n, f) == n;
		if (f)
			fclose(f);
	}
	free(b);
	CHECK(patched, "cannot patch general.architecture in %s", model);
	snprintf(cmd, sizeof cmd, "TMPDIR=%s/no-such-dir %s/qrun %s -p hi -n 1", work, bin(), model);
	int rc;
	char *e = run_stderr(cmd, &rc);
	CHECK(rc == 1 && strstr(e, model) && strstr(e, "architecture 'bloom'") && !strstr(e, ".qb") &&
	      !strstr(e, "no-such-dir"), "qrun_refuses_unsupported_arch_before_converting: exit %d, stderr '%s'", rc, e);
	free(e);
	unlink(model);
}

/* issue 17 #1: a bundle whose tensor bytes changed after conversion is refused at
 * load, naming the file and the tensor, unless --no-verify; an intact one loads
 * and says what it checked. The flipped byte is in the middle of the largest
 * tensor (found through the bundle reader, not by a fixed offset). */
static void check_verify_at_load(const char *work)
{
	char gguf[1100], qb[1100], cmd[4096];
	snprintf(gguf, sizeof gguf, "%s/verify.gguf", work);
	snprintf(qb, sizeof qb, "%s/verify.qb", work);
	snprintf(cmd, sizeof cmd, "%s/mkgguf --preset tiny -o %s >/dev/null 2>&1 && %s/qconvert %s --target cpu -q -o %s",
		 bin(), gguf, bin(), gguf, qb);
	CHECK(system(cmd) == 0, "%s", cmd);
	int rc;
	snprintf(cmd, sizeof cmd, "%s/qrun %s -p hi -n 2", bin(), qb);
	char *e = run_stderr(cmd, &rc);
	CHECK(rc == 0 && strstr(e, "verify: ") && strstr(e, "checked (XXH3)"), "intact bundle: exit %d, stderr '%s'", rc,
	      e);
	free(e);
	struct qc_bundle *b = NULL;
	struct qc_err err = {0};
	char name[256] = "";
	uint64_t off = 0;
	if (qc_bundle_open(qb, &b, &err) == QC_OK) {
		const struct qc_bundle_tensor *big = NULL;
		for (uint64_t i = 0; i < b->n_tensors; i++)
			if (!big || b->tensors[i].size > big->size)
				big = &b->tensors[i];
		if (big) {
			snprintf(name, sizeof name, "%s", big->name);
			off = big->off + big->size / 2;
		}
		qc_bundle_close(b);
	}
	CHECK(name[0] && off, "no tensor found in %s: %s", qb, err.msg);
	int fd = open(qb, O_RDWR);
	unsigned char c = 0;
	bool flipped = fd >= 0 && pread(fd, &c, 1, (off_t)off) == 1 && (c ^= 0x20, pwrite(fd, &c, 1, (off_t)off) == 1);
	if (fd >= 0)
		close(fd);
	CHECK(flipped, "cannot flip a byte of %s", qb);
	e = run_stderr(cmd, &rc);
	CHECK(rc == 1 && strstr(e, qb) && strstr(e, name) && strstr(e, "checksum mismatch") && strstr(e, "--no-verify"),
	      "flipped byte in %s: exit %d, stderr '%s'", name, rc, e);
	free(e);
	snprintf(cmd, sizeof cmd, "%s/qrun %s -p hi -n 2 --no-verify", bin(), qb);
	e = run_stderr(cmd, &rc);
	CHECK(rc == 0 && !strstr(e, "verify: "), "--no-verify: exit %d, stderr '%s'", rc, e);
	free(e);
	snprintf(cmd, sizeof cmd, "%s/qserve --help 2>&1 | grep -q -- --no-verify", bin());
	CHECK(system(cmd) == 0, "qserve --help does not list --no-verify");
	unlink(gguf);
	unlink(qb);
}

/* mkgguf --preset tiny (+ extra flags) at path; its vocab is <unk> <s> </s> ... */
static bool make_tiny(const char *path, const char *extra)
{
	char cmd[4096];
	snprintf(cmd, sizeof cmd, "%s/mkgguf --preset tiny %s -o %s >/dev/null 2>&1", bin(), extra, path);
	return system(cmd) == 0;
}

/* Occurrences of needle in hay. */
static int count_of(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* issue 15 #8c: --ctx above the model's context length (mkgguf --ctx 64) warns once,
 * naming both numbers; --ctx at it does not. */
static void check_ctx_warning(const char *work)
{
	char model[1100], cmd[4096];
	snprintf(model, sizeof model, "%s/ctx64.gguf", work);
	CHECK(make_tiny(model, "--ctx 64"), "mkgguf --ctx 64");
	static const struct { int ctx; bool warns; } cases[] = { { 128, true }, { 64, false }, { 32, false } };
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		snprintf(cmd, sizeof cmd, "%s/qrun %s -p hi -n 1 --ctx %d", bin(), model, cases[i].ctx);
		int rc;
		char *e = run_stderr(cmd, &rc);
		if (cases[i].warns)
			CHECK(rc == 0 && count_of(e, "warning") == 1 && strstr(e, "--ctx 128") && strstr(e, "context length 64"),
			      "qrun_warns_once_for_ctx_above_the_model's: exit %d, stderr '%s'", rc, e);
		else
			CHECK(rc == 0 && !strstr(e, "warning"), "qrun --ctx %d (not above 64) warned: '%s'", cases[i].ctx, e);
		free(e);
	}
	unlink(model);
}

/* issue 15 #8e: --bos adds BOS (<s>, id 1 in mkgguf's vocab) even when the vocabulary
 * says add_bos = false, as the README says; without --bos there is none. */
static void check_bos_forced(const char *work)
{
	char model[1100], cmd[4096];
	snprintf(model, sizeof model, "%s/nobos.gguf", work);
	CHECK(make_tiny(model, ""), "mkgguf --preset tiny");
	size_t n = 0;
	char *b = check_read_file(model, &n);
	const char *key = "tokenizer.ggml.add_bos_token";
	char *k = b ? memmem(b, n, key, strlen(key)) : NULL;
	size_t at = k ? (size_t)(k - b) + strlen(key) : 0; /* then u32 type 7 (bool), then the byte */
	bool patched = k && at + 5 <= n && !memcmp(k + strlen(key), "\x07\0\0\0\x01", 5);
	if (patched) {
		b[at + 4] = 0;
		FILE *f = fopen(model, "wb");
		patched = f && fwrite(b, 1, n, f) == n;
		if (f)
			fclose(f);
	}
	free(b);
	CHECK(patched, "cannot set add_bos_token = false in %s", model);
	int st;
	snprintf(cmd, sizeof cmd, "%s/qrun %s --tokenize hello --bos", bin(), model);
	char *with = run(cmd, "", 0, &st);
	CHECK(st == 0 && with && !strncmp(with, "1 ", 2), "qrun_bos_flag_forces_bos: '%s'", with ? with : "");
	snprintf(cmd, sizeof cmd, "%s/qrun %s --tokenize hello", bin(), model);
	char *without = run(cmd, "", 0, &st);
	CHECK(st == 0 && without && strncmp(without, "1 ", 2) && with && !strcmp(with + 2, without),
	      "qrun --tokenize without --bos: '%s' (with: '%s')", without ? without : "", with ? with : "");
	free(with);
	free(without);
	unlink(model);
}

/* issue 15 #8d: --json's "text" leaves control tokens out, as plain output does,
 * while "ids" still lists them. Sampling hot over a random tiny model until a run
 * emits <s> or </s> (ids 1, 2 in mkgguf's vocab). */
static void check_json_text_drops_control_tokens(const char *work)
{
	char model[1100], cmd[4096], flags[256];
	snprintf(model, sizeof model, "%s/ctl.gguf", work);
	CHECK(make_tiny(model, ""), "mkgguf --preset tiny");
	bool seen = false;
	for (int seed = 1; seed <= 30 && !seen; seed++) {
		snprintf(flags, sizeof flags, "-n 48 --ignore-eos --temp 3 --seed %d", seed);
		cJSON *j = qrun_json(model, "hi", flags);
		const cJSON *ids = cJSON_GetObjectItem(j, "ids"), *id;
		cJSON_ArrayForEach(id, ids)
			seen = seen || id->valueint == 1 || id->valueint == 2;
		if (seen) {
			const char *t = jstr(j, "text");
			CHECK(!strstr(t, "</s>") && !strstr(t, "<s>"), "qrun_json_text_leaves_out_control_tokens: '%s'", t);
			snprintf(cmd, sizeof cmd, "%s/qrun %s -p - %s", bin(), model, flags);
			int st;
			char *plain = run(cmd, "hi", 2, &st);
			size_t pl = plain ? strlen(plain) : 0;
			CHECK(st == 0 && pl && plain[pl - 1] == '\n' && pl - 1 == strlen(t) && !strncmp(plain, t, pl - 1),
			      "qrun --json text '%s' differs from plain output '%s'", t, plain ? plain : "");
			free(plain);
		}
		cJSON_Delete(j);
	}
	CHECK(seen, "no run emitted a control token: the --json text check did not run");
	unlink(model);
}

int main(void)
{
	char work[] = "/tmp/qc_qrun_work.XXXXXX";
	if (mkdtemp(work)) {
		check_qrun_signal_leaves_no_temp(work);
		check_qrun_refuses_unsupported_arch_first(work);
		check_ctx_warning(work);
		check_bos_forced(work);
		check_json_text_drops_control_tokens(work);
		check_verify_at_load(work);
		rm_dir(work);
	}
	/* the comparator must notice a wrong id list */
	cJSON *a = cJSON_Parse("[1,2,3]"), *b = cJSON_Parse("[1,2,4]");
	CHECK(!same_ids(a, b), "id comparator accepts different lists");
	cJSON_Delete(a);
	cJSON_Delete(b);
	if (!check_have_fixtures("test_qrun"))
		return check_report("test_qrun");

	char model[1024], ref[1024], bundle[] = "/tmp/qc_qrun_XXXXXX.qb";
	snprintf(model, sizeof model, "%s/gguf/stories260K.gguf", check_fixtures());
	snprintf(ref, sizeof ref, "%s/reference/stories260K.json", check_fixtures());
	cJSON *r = load_json(ref);
	CHECK(r != NULL, "cannot read %s", ref);
	int fd = mkstemps(bundle, 3);
	close(fd);
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "%s/qconvert %s --target cpu -o %s -q", bin(), model, bundle);
	CHECK(system(cmd) == 0, "%s", cmd);
	const cJSON *g;
	if (r)
		cJSON_ArrayForEach(g, cJSON_GetObjectItem(r, "greedy")) {
			check_greedy(model, g);
			check_greedy(bundle, g);
		}
	check_options(bundle);
	if (r)
		check_n_choices(bundle, cJSON_GetArrayItem(cJSON_GetObjectItem(r, "greedy"), 0));
	unlink(bundle);
	cJSON_Delete(r);
	check_tokenize("llama-spm");
	check_tokenize("llama-bpe");
	check_tokenize("bert-bge");
	int st;
	snprintf(cmd, sizeof cmd, "%s/qrun %s -p hi --device cuda", bin(), model);
	free(run(cmd, "", 0, &st));
	/* 2: no CUDA in this build or no device; 0 on a machine with a GPU */
	CHECK(st == 2 || st == 0, "--device cuda exits %d, expected 2 (no CUDA build or device) or 0", st);
	/* qrun bench: every request's prompt is prefilled and every token after the first
	 * is a decode token; latency percentiles are ordered */
	snprintf(cmd, sizeof cmd, "%s/qrun bench %s --requests 5 --concurrency 2 --in 8 --out 6 --threads 1", bin(), model);
	char *bo = run(cmd, "", 0, &st);
	unsigned long long pre = 0, dec = 0;
	double p50 = -1, p99 = -1, i50 = -1, i99 = -1;
	const char *pp = bo ? strstr(bo, "prompt: ") : NULL, *dp = bo ? strstr(bo, "decode: ") : NULL;
	const char *tp = bo ? strstr(bo, "TTFT ms: ") : NULL, *ip = bo ? strstr(bo, "inter-token ms: ") : NULL;
	CHECK(st == 0 && pp && dp && tp && ip && sscanf(pp, "prompt: %llu", &pre) == 1 && sscanf(dp, "decode: %llu", &dec) == 1 &&
	      sscanf(tp, "TTFT ms: p50 %lf p99 %lf", &p50, &p99) == 2 &&
	      sscanf(ip, "inter-token ms: p50 %lf p99 %lf", &i50, &i99) == 2,
	      "qrun bench output not as documented (%d): %s", st, bo ? bo : "");
	CHECK(pre == 5 * 8 && dec == 5 * (6 - 1), "qrun bench counted %llu prompt and %llu decode tokens, expected 40 and 25",
	      pre, dec);
	CHECK(p50 >= 0 && p50 <= p99 && i50 >= 0 && i50 <= i99, "qrun bench percentiles out of order");
	free(bo);
	/* warm-up rounds are not counted; a count outside 0..16 is refused */
	for (int w = 0; w <= 3; w += 3) {
		snprintf(cmd, sizeof cmd, "%s/qrun bench %s --requests 3 --concurrency 2 --in 5 --out 4 --threads 1 --warmup %d",
			 bin(), model, w);
		bo = run(cmd, "", 0, &st);
		pp = bo ? strstr(bo, "prompt: ") : NULL;
		dp = bo ? strstr(bo, "decode: ") : NULL;
		pre = dec = 0;
		CHECK(st == 0 && pp && dp && sscanf(pp, "prompt: %llu", &pre) == 1 && sscanf(dp, "decode: %llu", &dec) == 1 &&
		      pre == 3 * 5 && dec == 3 * 3, "qrun bench --warmup %d: status %d, %llu prompt / %llu decode tokens", w,
		      st, pre, dec);
		free(bo);
	}
	snprintf(cmd, sizeof cmd, "%s/qrun bench %s --requests 3 --concurrency 2 --in 5 --out 4 --warmup 17", bin(), model);
	free(run(cmd, "", 0, &st));
	CHECK(st == 1, "qrun bench --warmup 17 exits %d, expected 1", st);
	return check_report("test_qrun");
}
