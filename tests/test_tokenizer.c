/* test_tokenizer.c — the tokenizer against llama.cpp's own test vectors.
 *
 * For every X.gguf in <fixtures>/vocab with X.gguf.inp / X.gguf.out (written by
 * llama.cpp's test-tokenizer-0 tooling), tokenize each input exactly as
 * test-tokenizer-0 does (add_special and parse_special off) and require the
 * expected ids; detokenize them back (SPM/BPE: the input, modulo llama.cpp's
 * documented clean-up; WPM: a stable round trip); stream them one id at a time
 * and require valid UTF-8 throughout and the input at the end. Every vocab is
 * also rebuilt through the manifest JSON schema and must give the same ids.
 * Expected values come from the fixtures, never from this code's own output;
 * a deliberately wrong id list must fail the comparator.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "gguf.h"
#include "vocab.h"

/* ---- test vectors ------------------------------------------------------------ */

struct vec {
	char *text;     /* NUL-terminated copy, len bytes */
	size_t len;
	int32_t *ids;   /* expected, no BOS */
	size_t n_ids;
};

struct vecs {
	struct vec *v;
	size_t n;
};

static char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);
	for (size_t k; buf && (k = fread(buf + n, 1, cap - n, f)) > 0;) {
		n += k;
		if (n == cap) {
			char *p = realloc(buf, cap *= 2);
			if (!p) {
				free(buf);
				buf = NULL;
			}
			buf = p;
		}
	}
	fclose(f);
	if (buf) {
		buf[n] = '\0';
		*len = n;
	}
	return buf;
}

static void free_vecs(struct vecs *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->v[i].text);
		free(t->v[i].ids);
	}
	free(t->v);
	t->v = NULL;
	t->n = 0;
}

/* test-tokenizer-0's reader: inputs split on the separator (a trailing one adds
 * nothing), one output line per input, ids separated by spaces. */
static int load_vecs(const char *gguf_path, struct vecs *t)
{
	char p[1024];
	size_t in_len, out_len;
	char *in = NULL, *out = NULL;
	if (snprintf(p, sizeof p, "%s.inp", gguf_path) < (int)sizeof p)
		in = read_all(p, &in_len);
	if (snprintf(p, sizeof p, "%s.out", gguf_path) < (int)sizeof p)
		out = read_all(p, &out_len);
	int rc = -1;
	if (!in || !out)
		goto out_free;
	const char *sep = "\n__ggml_vocab_test__\n";
	size_t sl = strlen(sep);
	memset(t, 0, sizeof(*t));
	t->v = calloc(in_len + 1, sizeof(*t->v));
	for (size_t pos = 0; pos < in_len;) {
		char *next = memmem(in + pos, in_len - pos, sep, sl);
		size_t end = next ? (size_t)(next - in) : in_len;
		struct vec *v = &t->v[t->n++];
		v->len = end - pos;
		v->text = malloc(v->len + 1);
		memcpy(v->text, in + pos, v->len);
		v->text[v->len] = '\0';
		if (!next)
			break;
		pos = end + sl;
	}
	size_t line = 0;
	for (char *s = out, *nl; s < out + out_len && line < t->n; s = nl + 1, line++) {
		nl = memchr(s, '\n', (size_t)(out + out_len - s));
		if (!nl)
			nl = out + out_len;
		struct vec *v = &t->v[line];
		v->ids = calloc((size_t)(nl - s) + 1, sizeof(*v->ids));
		for (char *q = s; q < nl;) {
			char *e;
			long x = strtol(q, &e, 10);
			if (e == q) {
				q++;
				continue;
			}
			v->ids[v->n_ids++] = (int32_t)x;
			q = e;
		}
	}
	rc = line == t->n ? 0 : -1;
	if (rc)
		fprintf(stderr, "%s: %zu inputs but %zu output lines\n", gguf_path, t->n, line);
out_free:
	free(in);
	free(out);
	return rc;
}

/* The comparator every id check goes through. */
static bool ids_equal(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
	if (na != nb)
		return false;
	for (size_t i = 0; i < na; i++)
		if (a[i] != b[i])
			return false;
	return true;
}

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
	fprintf(stderr, "  %s:", what);
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, " %d", ids[i]);
	fputc('\n', stderr);
}

/* Strict UTF-8 (Unicode Table 3-7), written independently of detok.c. */
static bool utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		uint32_t c = p[i];
		size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
		if (!k || i + k > n)
			return false;
		uint32_t cp = k == 1 ? c : c & (0x7f >> k);
		for (size_t j = 1; j < k; j++) {
			if ((p[i + j] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (p[i + j] & 0x3f);
		}
		static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
		if (cp < min[k] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += k;
	}
	return true;
}

/* What llama.cpp's detokenizer makes of the original text when the vocab cleans
 * up spaces: Hugging Face's clean_up_tokenization replacements, minus " n't"
 * (llama.cpp leaves that one alone). Independent of detok.c's passes. */
static char *hf_cleanup(const char *s)
{
	static const char *const rep[][2] = {
		{ " .", "." }, { " ?", "?" }, { " !", "!" }, { " ,", "," }, { " ' ", "'" },
		{ " 'm", "'m" }, { " 's", "'s" }, { " 've", "'ve" }, { " 're", "'re" },
	};
	char *cur = strdup(s);
	for (size_t r = 0; r < sizeof rep / sizeof rep[0]; r++) {
		size_t fl = strlen(rep[r][0]), tl = strlen(rep[r][1]);
		char *out = malloc(strlen(cur) + 1), *o = out;
		for (const char *q = cur; *q;) {
			if (strncmp(q, rep[r][0], fl) == 0) {
				memcpy(o, rep[r][1], tl);
				o += tl;
				q += fl;
			} else {
				*o++ = *q++;
			}
		}
		*o = '\0';
		free(cur);
		cur = out;
	}
	return cur;
}

/* llama.cpp's BPE pre-tokenizers that turn the clean-up off (llama-vocab.cpp). */
static bool bpe_keeps_spaces(const char *pre)
{
	static const char *const keep[] = { "deepseek-llm", "deepseek-coder", "deepseek-v3", "command-r",
					    "qwen2", "deepseek-r1-qwen", "poro-chat", "viking", "tekken",
					    "smollm", "chameleon" };
	for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
		if (strcmp(pre, keep[i]) == 0)
			return true;
	return false;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- GGUF vocab -> manifest JSON, per the schema in vocab_json.c ---------------- */

static cJSON *str_array(const struct qc_gguf_value *a, bool hex_if_needed)
{
	cJSON *arr = cJSON_CreateArray();
	for (uint64_t i = 0; i < a->arr.n; i++) {
		const struct qc_gguf_str *s = &a->arr.items[i].s;
		char *z = strndup(s->p, (size_t)s->len);
		if (!hex_if_needed || (utf8_valid(s->p, (size_t)s->len) && strlen(z) == s->len)) {
			cJSON_AddItemToArray(arr, cJSON_CreateString(z));
		} else {
			char *hex = malloc(2 * (size_t)s->len + 1);
			for (uint64_t k = 0; k < s->len; k++)
				sprintf(hex + 2 * k, "%02x", (unsigned char)s->p[k]);
			hex[2 * s->len] = '\0';
			cJSON *o = cJSON_CreateObject();
			cJSON_AddStringToObject(o, "hex", hex);
			cJSON_AddItemToArray(arr, o);
			free(hex);
		}
		free(z);
	}
	return arr;
}

static cJSON *num_array(const struct qc_gguf_value *a)
{
	cJSON *arr = cJSON_CreateArray();
	for (uint64_t i = 0; i < a->arr.n; i++) {
		double d = 0;
		qc_gguf_arr_f64(a, i, &d);
		cJSON_AddItemToArray(arr, cJSON_CreateNumber(d));
	}
	return arr;
}

static void add_str(cJSON *o, const char *name, const struct qc_gguf *g, const char *key)
{
	struct qc_gguf_str s;
	if (qc_gguf_get_str(g, key, &s, NULL) == QC_OK) {
		char *z = strndup(s.p, (size_t)s.len);
		cJSON_AddStringToObject(o, name, z);
		free(z);
	}
}

static cJSON *gguf_to_json(const struct qc_gguf *g)
{
	cJSON *o = cJSON_CreateObject();
	add_str(o, "model", g, "tokenizer.ggml.model");
	add_str(o, "pre", g, "tokenizer.ggml.pre");
	cJSON_AddItemToObject(o, "tokens", str_array(qc_gguf_get_arr(g, "tokenizer.ggml.tokens"), true));
	const struct qc_gguf_value *a;
	if ((a = qc_gguf_get_arr(g, "tokenizer.ggml.scores")))
		cJSON_AddItemToObject(o, "scores", num_array(a));
	if ((a = qc_gguf_get_arr(g, "tokenizer.ggml.token_type")))
		cJSON_AddItemToObject(o, "token_types", num_array(a));
	if ((a = qc_gguf_get_arr(g, "tokenizer.ggml.merges")))
		cJSON_AddItemToObject(o, "merges", str_array(a, false));
	static const char *const sp[][2] = {
		{ "bos", "tokenizer.ggml.bos_token_id" }, { "eos", "tokenizer.ggml.eos_token_id" },
		{ "unk", "tokenizer.ggml.unknown_token_id" }, { "sep", "tokenizer.ggml.seperator_token_id" },
		{ "pad", "tokenizer.ggml.padding_token_id" }, { "cls", "tokenizer.ggml.cls_token_id" },
		{ "mask", "tokenizer.ggml.mask_token_id" }, { "eot", "tokenizer.ggml.eot_token_id" },
		{ "eom", "tokenizer.ggml.eom_token_id" },
	};
	cJSON *special = cJSON_AddObjectToObject(o, "special");
	for (size_t k = 0; k < sizeof sp / sizeof sp[0]; k++) {
		int64_t id;
		if (qc_gguf_get_i64(g, sp[k][1], &id, NULL) == QC_OK)
			cJSON_AddNumberToObject(special, sp[k][0], (double)id);
	}
	static const char *const fl[][2] = {
		{ "add_bos", "tokenizer.ggml.add_bos_token" }, { "add_eos", "tokenizer.ggml.add_eos_token" },
		{ "add_space_prefix", "tokenizer.ggml.add_space_prefix" },
		{ "remove_extra_whitespaces", "tokenizer.ggml.remove_extra_whitespaces" },
	};
	for (size_t k = 0; k < sizeof fl / sizeof fl[0]; k++) {
		bool b;
		if (qc_gguf_get_bool(g, fl[k][1], &b, NULL) == QC_OK)
			cJSON_AddBoolToObject(o, fl[k][0], b);
	}
	add_str(o, "chat_template", g, "tokenizer.chat_template");
	return o;
}

/* ---- per-vocab checks ------------------------------------------------------------ */

static const struct vec *find_vec(const struct vecs *t, const char *text)
{
	for (size_t i = 0; i < t->n; i++)
		if (strcmp(t->v[i].text, text) == 0)
			return &t->v[i];
	return NULL;
}

/* Tokenize as test-tokenizer-0 does and compare with want through ids_equal. */
static bool tokenizes_to(const struct qc_vocab *v, const char *text, size_t len, const int32_t *want,
			 size_t n_want, bool verbose)
{
	int32_t *ids = NULL;
	size_t n = 0;
	struct qc_err err = { 0 };
	int rc = qc_tokenize(v, text, len, 0, &ids, &n, &err);
	bool same = rc == QC_OK && ids_equal(ids, n, want, n_want);
	if (!same && verbose) {
		fprintf(stderr, "  rc %d %s\n", rc, err.msg);
		print_ids("want", want, n_want);
		print_ids("got ", ids, n);
	}
	free(ids);
	return same;
}

static size_t check_ids(const struct qc_vocab *v, const struct vecs *t, const char *name, const char *how)
{
	size_t ok = 0;
	for (size_t i = 0; i < t->n; i++) {
		const struct vec *x = &t->v[i];
		bool same = tokenizes_to(v, x->text, x->len, x->ids, x->n_ids, true);
		CHECK(same, "%s (%s): input %zu '%s'", name, how, i, x->text);
		ok += same;
	}
	return ok;
}

/* The same path must reject a fixture line with one id changed or one dropped. */
static void check_wrong_ids_fail(const struct qc_vocab *v, const struct vecs *t, const char *name)
{
	for (size_t i = 0; i < t->n; i++) {
		const struct vec *x = &t->v[i];
		if (x->n_ids < 2)
			continue;
		int32_t *bad = malloc(x->n_ids * sizeof(*bad));
		memcpy(bad, x->ids, x->n_ids * sizeof(*bad));
		bad[x->n_ids / 2] ^= 1;
		CHECK(!tokenizes_to(v, x->text, x->len, bad, x->n_ids, false),
		      "%s: a wrong id in the expected list went unnoticed", name);
		CHECK(!tokenizes_to(v, x->text, x->len, x->ids, x->n_ids - 1, false),
		      "%s: a missing id in the expected list went unnoticed", name);
		free(bad);
		return;
	}
}

static void check_detok(const struct qc_vocab *v, const struct vecs *t, const char *name)
{
	enum qc_vocab_type type = qc_vocab_type(v);
	bool cleanup = type == QC_VOCAB_BPE && !bpe_keeps_spaces(qc_vocab_pre_name(v));
	for (size_t i = 0; i < t->n; i++) {
		const struct vec *x = &t->v[i];
		char *text = NULL;
		size_t len = 0;
		struct qc_err err = { 0 };
		int rc = qc_detokenize(v, x->ids, x->n_ids, QC_DETOK_UNPARSE_SPECIAL, &text, &len, &err);
		CHECK(rc == QC_OK, "%s: detokenize input %zu: %s", name, i, err.msg);
		if (rc)
			continue;
		if (type == QC_VOCAB_WPM) {
			/* BERT text is lowercased and unaccented: it must re-tokenize to itself */
			int32_t *ids = NULL;
			size_t n = 0;
			bool has_unk = false;
			for (size_t k = 0; k < x->n_ids; k++)
				has_unk |= x->ids[k] == qc_vocab_special(v, QC_SPECIAL_UNK);
			rc = qc_tokenize(v, text, len, 0, &ids, &n, &err);
			CHECK(rc == QC_OK && (has_unk || ids_equal(ids, n, x->ids, x->n_ids)),
			      "%s: input %zu detokenized to '%s', which does not re-tokenize the same", name, i, text);
			free(ids);
		} else {
			char *want = cleanup ? hf_cleanup(x->text) : strdup(x->text);
			CHECK(len == strlen(want) && memcmp(text, want, len) == 0,
			      "%s: input %zu detokenized to '%s', want '%s'", name, i, text, want);
			free(want);
		}
		free(text);
	}
}

/* Feed ids one at a time; returns how many pushes held bytes back. */
static size_t check_stream(const struct qc_vocab *v, const struct vecs *t, const char *name)
{
	size_t held = 0;
	struct qc_detok *d = NULL;
	struct qc_err err = { 0 };
	CHECK(qc_detok_new(v, QC_DETOK_UNPARSE_SPECIAL, &d, &err) == QC_OK, "%s: detok_new", name);
	for (size_t i = 0; d && i < t->n; i++) {
		const struct vec *x = &t->v[i];
		char *acc = malloc(16 * x->len + 64);
		size_t n = 0, pieces = 0;
		bool valid = true;
		for (size_t k = 0; k < x->n_ids; k++) {
			const char *s;
			size_t len;
			CHECK(qc_detok_push(d, x->ids[k], &s, &len, &err) == QC_OK, "%s: push: %s", name, err.msg);
			valid &= utf8_valid(s, len);
			memcpy(acc + n, s, len);
			n += len;
			pieces += qc_token_to_piece(v, x->ids[k], NULL, 0, QC_PIECE_SPECIAL);
			held += n < pieces;
		}
		const char *s;
		size_t len;
		qc_detok_flush(d, &s, &len);
		valid &= utf8_valid(s, len);
		memcpy(acc + n, s, len);
		n += len;
		CHECK(valid, "%s: input %zu: the stream emitted invalid UTF-8", name, i);
		if (qc_vocab_type(v) != QC_VOCAB_WPM)
			CHECK(n == x->len && memcmp(acc, x->text, n) == 0,
			      "%s: input %zu streamed to '%.*s', want '%s'", name, i, (int)n, acc, x->text);
		free(acc);
	}
	qc_detok_free(d);
	return held;
}

static void check_json(const struct qc_gguf *g, const struct vecs *t, const char *name)
{
	cJSON *j = gguf_to_json(g);
	char *txt = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	cJSON *back = txt ? cJSON_Parse(txt) : NULL;
	free(txt);
	struct qc_vocab *v = NULL;
	struct qc_err err = { 0 };
	int rc = qc_vocab_from_json(back, &v, &err);
	CHECK(rc == QC_OK, "%s: vocab from manifest JSON: %s", name, err.msg);
	if (v) {
		size_t ok = check_ids(v, t, name, "from JSON");
		CHECK(ok == t->n, "%s: JSON-built vocab matched %zu/%zu", name, ok, t->n);
	}
	qc_vocab_free(v);
	cJSON_Delete(back);
}

/* Flags and specials, with expectations from the fixture's own lines. */
static void check_specials(const struct qc_vocab *v, const struct vecs *t, const char *name)
{
	const struct vec *hw = find_vec(t, "Hello world");
	if (!hw)
		return;
	int32_t *ids = NULL;
	size_t n = 0;
	struct qc_err err = { 0 };
	int32_t want[64];
	size_t nw = 0;
	enum qc_vocab_type type = qc_vocab_type(v);
	bool bos = type == QC_VOCAB_WPM || qc_vocab_add_bos(v);
	if (bos)
		want[nw++] = qc_vocab_bos(v);
	for (size_t k = 0; k < hw->n_ids && nw < 60; k++)
		want[nw++] = hw->ids[k];
	if (type == QC_VOCAB_WPM)
		want[nw++] = qc_vocab_special(v, QC_SPECIAL_SEP);
	else if (qc_vocab_add_eos(v))
		want[nw++] = qc_vocab_eos(v);
	int rc = qc_tokenize(v, "Hello world", 11, QC_TOK_ADD_SPECIAL, &ids, &n, &err);
	CHECK(rc == QC_OK && ids_equal(ids, n, want, nw), "%s: add_special around 'Hello world'", name);
	free(ids);

	/* llama.cpp finds EOT by its text when the GGUF does not name it (Llama 3) */
	int32_t eot_text = qc_vocab_find(v, "<|eot_id|>", 10);
	if (eot_text >= 0)
		CHECK(qc_vocab_eot(v) == eot_text && qc_vocab_is_eog(v, eot_text) &&
			      (qc_vocab_token_attr(v, eot_text) & QC_TOKEN_ATTR_CONTROL),
		      "%s: <|eot_id|> is EOT, ends generation and is a control token", name);

	/* a control token's text is plain text unless parse_special is on */
	int32_t eos = qc_vocab_eos(v);
	size_t el;
	const char *et = eos >= 0 ? qc_vocab_token_text(v, eos, &el) : NULL;
	if (et && (qc_vocab_token_attr(v, eos) & QC_TOKEN_ATTR_CONTROL)) {
		char buf[256];
		int m = snprintf(buf, sizeof buf, "Hello world%s", et);
		rc = qc_tokenize(v, buf, (size_t)m, QC_TOK_PARSE_SPECIAL, &ids, &n, &err);
		bool tail = rc == QC_OK && n == hw->n_ids + 1 && ids[n - 1] == eos &&
			    ids_equal(ids, n - 1, hw->ids, hw->n_ids);
		CHECK(tail, "%s: parse_special splits 'Hello world' + EOS text", name);
		free(ids);
		rc = qc_tokenize(v, buf, (size_t)m, 0, &ids, &n, &err);
		bool found = false;
		for (size_t k = 0; rc == QC_OK && k < n; k++)
			found |= ids[k] == eos;
		CHECK(rc == QC_OK && !found, "%s: without parse_special the EOS text is not EOS", name);
		free(ids);
		CHECK(qc_vocab_is_eog(v, eos), "%s: EOS ends generation", name);
		size_t ne;
		const int32_t *eog = qc_vocab_eog_ids(v, &ne);
		bool listed = false;
		for (size_t k = 0; k < ne; k++)
			listed |= eog[k] == eos;
		CHECK(listed && !qc_vocab_is_eog(v, hw->ids[0]), "%s: EOG list has EOS, not 'Hello'", name);
	}
}

/* test-tokenizer-0 tokenizes from every core at once; a vocab is read-only, so
 * concurrent callers must all see the expected ids. */
struct par {
	const struct qc_vocab *v;
	const struct vecs *t;
	size_t ok;
};

static void *par_run(void *arg)
{
	struct par *p = arg;
	for (int rep = 0; rep < 3; rep++)
		for (size_t i = 0; i < p->t->n; i++)
			p->ok += tokenizes_to(p->v, p->t->v[i].text, p->t->v[i].len, p->t->v[i].ids,
					      p->t->v[i].n_ids, false);
	return NULL;
}

static void check_threads(const struct qc_vocab *v, const struct vecs *t, const char *name)
{
	enum { N = 4 };
	pthread_t th[N];
	struct par p[N];
	int started = 0;
	for (int k = 0; k < N; k++) {
		p[k] = (struct par){ .v = v, .t = t };
		started += pthread_create(&th[k], NULL, par_run, &p[k]) == 0;
	}
	CHECK(started == N, "%s: started %d of %d threads", name, started, N);
	for (int k = 0; k < started; k++) {
		pthread_join(th[k], NULL);
		CHECK(p[k].ok == 3 * t->n, "%s: thread %d matched %zu/%zu", name, k, p[k].ok, 3 * t->n);
	}
}

static void check_vocab(const char *dir, const char *file)
{
	char path[1024];
	struct vecs t;
	if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path || load_vecs(path, &t)) {
		CHECK(0, "%s: cannot read test vectors", file);
		return;
	}
	struct qc_gguf *g = NULL;
	struct qc_vocab *v = NULL;
	struct qc_err err = { 0 };
	int rc = qc_gguf_open(path, &g, &err);
	CHECK(rc == QC_OK, "%s: open: %s", file, err.msg);
	double t0 = now_ms();
	if (!rc)
		rc = qc_vocab_from_gguf(g, &v, &err);
	double ms = now_ms() - t0;
	CHECK(rc == QC_OK, "%s: vocab: %s", file, err.msg);
	if (v) {
		size_t ok = check_ids(v, &t, file, "from GGUF");
		printf("%-36s %-5s %6u tokens, loaded in %7.1f ms: %zu/%zu strings match\n", file,
		       qc_vocab_type(v) == QC_VOCAB_SPM ? "SPM" : qc_vocab_type(v) == QC_VOCAB_BPE ? "BPE" : "WPM",
		       qc_vocab_n_tokens(v), ms, ok, t.n);
		check_wrong_ids_fail(v, &t, file);
		check_threads(v, &t, file);
		check_detok(v, &t, file);
		size_t held = check_stream(v, &t, file);
		if (qc_vocab_type(v) == QC_VOCAB_BPE)
			CHECK(held > 0, "%s: no input split a character across tokens; streaming untested", file);
		check_specials(v, &t, file);
		check_json(g, &t, file);
	}
	qc_vocab_free(v);
	qc_gguf_close(g);
	free_vecs(&t);
}

/* ---- focused cases ----------------------------------------------------------------- */

static void test_comparator_can_fail(void)
{
	const int32_t want[] = { 15043, 3186 };
	const int32_t wrong_id[] = { 15043, 3187 };
	const int32_t wrong_len[] = { 15043 };
	CHECK(ids_equal(want, 2, want, 2), "comparator accepts equal lists");
	CHECK(!ids_equal(want, 2, wrong_id, 2), "comparator must reject a wrong id");
	CHECK(!ids_equal(want, 2, wrong_len, 1), "comparator must reject a wrong length");
	CHECK(!utf8_valid("\xed\xa0\x80", 3) && !utf8_valid("\xc0\x80", 2) && utf8_valid("\xf0\x9f\xa6\x99", 4),
	      "UTF-8 checker rejects surrogates/overlongs, accepts U+1F999");
}

static void test_stream_holds_partial_chars(const char *dir)
{
	char path[1024];
	struct qc_gguf *g = NULL;
	struct qc_vocab *v = NULL;
	struct qc_detok *d = NULL;
	if (snprintf(path, sizeof path, "%s/ggml-vocab-llama-spm.gguf", dir) >= (int)sizeof path ||
	    qc_gguf_open(path, &g, NULL) || qc_vocab_from_gguf(g, &v, NULL) || qc_detok_new(v, 0, &d, NULL)) {
		CHECK(0, "llama-spm vocab for the streaming test");
		goto out;
	}
	/* U+1F999 as four byte tokens, then a lone 0xFF, then a dangling lead byte */
	const char *bytes[] = { "<0xF0>", "<0x9F>", "<0xA6>", "<0x99>", "<0xFF>", "<0xE2>" };
	size_t got[6];
	const char *s[6];
	for (int k = 0; k < 6; k++) {
		int32_t id = qc_vocab_find(v, bytes[k], strlen(bytes[k]));
		CHECK(id >= 0, "byte token %s exists", bytes[k]);
		CHECK(qc_detok_push(d, id, &s[k], &got[k], NULL) == QC_OK, "push %s", bytes[k]);
		if (k == 3)
			CHECK(got[3] == 4 && memcmp(s[3], "\xf0\x9f\xa6\x99", 4) == 0, "4th byte completes U+1F999");
		if (k == 4)
			CHECK(got[4] == 3 && memcmp(s[4], "\xef\xbf\xbd", 3) == 0, "0xFF comes out as U+FFFD");
	}
	CHECK(got[0] == 0 && got[1] == 0 && got[2] == 0 && got[5] == 0, "partial characters are held back");
	const char *f;
	size_t fl;
	qc_detok_flush(d, &f, &fl);
	CHECK(fl == 3 && memcmp(f, "\xef\xbf\xbd", 3) == 0, "flush turns a dangling lead byte into U+FFFD");
	const char *dummy;
	size_t dl;
	struct qc_err err = { 0 };
	CHECK(qc_detok_push(d, -5, &dummy, &dl, &err) == QC_ERANGE, "an id out of range is refused");
out:
	qc_detok_free(d);
	qc_vocab_free(v);
	qc_gguf_close(g);
}

static int json_vocab(const char *text, struct qc_err *err)
{
	cJSON *j = cJSON_Parse(text);
	struct qc_vocab *v = NULL;
	int rc = qc_vocab_from_json(j, &v, err);
	if (rc == QC_OK) {
		int32_t *ids = NULL;
		size_t n = 0;
		rc = qc_tokenize(v, "ab", 2, 0, &ids, &n, err);
		free(ids);
	}
	qc_vocab_free(v);
	cJSON_Delete(j);
	return rc;
}

static void test_json_rejects_bad_input(void)
{
	struct qc_err err = { 0 };
	CHECK(json_vocab("{\"model\":\"gpt2\",\"pre\":\"gpt-2\",\"tokens\":[\"a\",\"b\",\"ab\"],"
			 "\"merges\":[\"a b\"]}", &err) == QC_OK,
	      "a minimal BPE vocab loads: %s", err.msg);
	CHECK(json_vocab("{\"model\":\"gpt2\",\"pre\":\"gpt-2\",\"tokens\":[\"a\"]}", &err) == QC_EFORMAT,
	      "BPE without a merges list is refused");
	CHECK(json_vocab("{\"model\":\"gpt2\",\"pre\":\"gpt-2\",\"tokens\":[\"a\",\"b\"],\"merges\":[]}", &err) ==
		      QC_OK,
	      "an empty merges list loads, as in llama.cpp: %s", err.msg);
	CHECK(json_vocab("{\"model\":\"llama\"}", &err) == QC_EFORMAT, "missing tokens is refused");
	CHECK(json_vocab("{\"model\":\"llama\",\"tokens\":[\"a\",\"b\"],\"scores\":[0]}", &err) == QC_EFORMAT,
	      "scores of the wrong length are refused");
	CHECK(json_vocab("{\"model\":\"llama\",\"tokens\":[\"a\",{\"hex\":\"4\"}]}", &err) == QC_EFORMAT,
	      "odd-length hex is refused");
	CHECK(json_vocab("{\"model\":\"llama\",\"tokens\":[\"a\",{\"hex\":\"zz\"}]}", &err) == QC_EFORMAT,
	      "bad hex is refused");
	CHECK(json_vocab("{\"model\":\"llama\",\"tokens\":[\"a\",\"a\"]}", &err) == QC_EFORMAT,
	      "duplicate token texts are refused");
	CHECK(json_vocab("{\"model\":\"gpt2\",\"pre\":\"nope\",\"tokens\":[\"a\"],\"merges\":[\"a a\"]}", &err) ==
		      QC_EFORMAT,
	      "an unknown pre-tokenizer is refused");
	CHECK(strstr(err.msg, "nope") != NULL, "the message names the pre-tokenizer: %s", err.msg);
	CHECK(json_vocab("{\"model\":\"t5\",\"tokens\":[\"a\"]}", &err) == QC_EUNSUPPORTED, "UGM is unsupported");
	CHECK(json_vocab("{\"model\":\"klingon\",\"tokens\":[\"a\"]}", &err) == QC_EFORMAT, "unknown model");
	CHECK(json_vocab("[1,2]", &err) == QC_EFORMAT, "a non-object is refused");
	/* SPM with no byte fallback for 'b' cannot tokenize "ab": an error, not a crash */
	CHECK(json_vocab("{\"model\":\"llama\",\"tokens\":[\"<unk>\",\"<s>\",\"</s>\",\"\xe2\x96\x81\",\"a\"]}",
			 &err) == QC_EFORMAT,
	      "a missing byte token is an error");
}

int main(void)
{
	const char *root = check_fixtures();
	char dir[1024];
	snprintf(dir, sizeof dir, "%s/vocab", root);

	test_comparator_can_fail();
	test_json_rejects_bad_input();
	if (!check_have_fixtures("test_tokenizer"))
		return check_report("test_tokenizer");
	test_stream_holds_partial_chars(dir);

	DIR *dp = opendir(dir);
	CHECK(dp != NULL, "fixture directory %s", dir);
	char *names[256];
	int n = 0;
	for (struct dirent *e; dp && (e = readdir(dp)) != NULL && n < 256;) {
		size_t l = strlen(e->d_name);
		if (l > 5 && strcmp(e->d_name + l - 5, ".gguf") == 0)
			names[n++] = strdup(e->d_name);
	}
	if (dp)
		closedir(dp);
	/* stable order for readable output */
	for (int i = 1; i < n; i++)
		for (int k = i; k > 0 && strcmp(names[k - 1], names[k]) > 0; k--) {
			char *s = names[k];
			names[k] = names[k - 1];
			names[k - 1] = s;
		}
	CHECK(n >= 6, "expected the six fixture vocabs, found %d", n);
	for (int i = 0; i < n; i++) {
		check_vocab(dir, names[i]);
		free(names[i]);
	}
	return check_report("test_tokenizer");
}
