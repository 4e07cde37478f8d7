/* jinja_int.h — the Jinja interpreter's private types (see jinja.h).
 *
 * Owns: tokens (jinja_lex.c), the syntax tree (jinja_parse.c), values and the
 * scratch arena (jinja_value.c), and the evaluator state shared by jinja_eval.c
 * and jinja_builtin.c. Invariant: every value lives in the render's arena and
 * dies with it, so values are plain structs copied freely and never freed one
 * by one; dicts are the only mutable values (namespace attribute set).
 */
#ifndef QC_JINJA_INT_H
#define QC_JINJA_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jbuf.h"
#include "jinja.h"

/* ---- tokens ---- */
enum jtok {
	T_EOF, T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
	T_NAME, T_STR, T_INT, T_FLOAT, T_OP
};

struct jtoken {
	enum jtok k;
	int line, col;
	const char *s; /* T_TEXT/T_STR: owned decoded text; T_NAME/T_OP: points into the source */
	size_t n;
	int64_t i;
	double f;
};

struct jtokens {
	struct jtoken *v;
	size_t n, cap;
};

struct qc_jinja;
/* Split src into tokens, applying whitespace control, trim_blocks and lstrip_blocks.
 * Token texts live in t's tree allocations. */
int jinja_lex(struct qc_jinja *t, const char *src, size_t len, struct jtokens *out, struct qc_err *err);
void jinja_tokens_deinit(struct jtokens *t);

/* ---- syntax tree ---- */
enum jnode {
	/* statements */
	N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_BREAK, N_CONTINUE, N_BODY,
	/* expressions */
	N_LIT, N_NAME, N_LIST, N_DICT, N_ATTR, N_INDEX, N_SLICE, N_CALL, N_FILTER, N_TEST,
	N_UNARY, N_BIN, N_AND, N_OR, N_NOT, N_COND
};

struct jval;

enum jkind { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_LOOP };

struct jdict;
struct jloop;

struct jv {
	enum jkind k;
	size_t n; /* V_STR bytes, V_LIST items */
	union {
		bool b;
		int64_t i;
		double f;
		const char *s;
		struct jv *items;
		struct jdict *d;
		struct jloop *loop;
	} u;
	const char *name; /* V_UNDEF: the missing name, for error messages (may be NULL) */
	bool tuple;       /* V_LIST made as a Python tuple: repr() uses parentheses */
};

struct jdict {
	size_t n, cap;
	struct jv *keys, *vals; /* (cap) each; keys are V_STR in practice, insertion order */
};

struct jloop {
	size_t idx, len;
};

struct jn {
	enum jnode k;
	int line, col;
	const char *s; /* N_NAME/N_ATTR/N_FILTER/N_TEST/N_CALL name, N_BIN/N_UNARY operator, N_SET target */
	const char *attr; /* N_SET ns.attr: the attribute */
	struct jv lit;    /* N_LIT; N_TEXT text */
	struct jn *a, *b, *c; /* operands; N_FOR: a=iter b=body c=else, N_IF: a=cond b=then c=else */
	struct jn *cond;      /* N_FOR inline "if" filter */
	const char *var2;     /* N_FOR second target (k, v) */
	struct jn **args;     /* N_CALL/N_FILTER/N_TEST args, N_LIST items, N_DICT k,v pairs, N_BODY stmts */
	const char **kw;      /* keyword name per arg, NULL for positional */
	size_t n_args;
};

struct qc_jinja {
	struct qc_jinja_limits lim;
	struct jn *root;
	void *blocks; /* linked list of malloc'd blocks owned by the tree */
	int depth;    /* parser recursion */
};

/* tree allocations: zeroed, freed with the template */
void *jinja_tree_alloc(struct qc_jinja *t, size_t n);

void jinja_tree_free(struct qc_jinja *t);

/* parser state and the helpers jinja_stmt.c shares with jinja_parse.c */
struct ps {
	struct qc_jinja *t;
	const struct jtokens *tk;
	size_t i;
	struct qc_err *err;
	int rc;
};

/* A growable node list, copied into the tree at the end. */
struct nlist {
	struct jn **v;
	const char **kw;
	size_t n, cap;
};

const struct jtoken *jp_cur(struct ps *p);
int jp_pfail(struct ps *p, const struct jtoken *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool jp_is_op(const struct jtoken *t, const char *op);
bool jp_is_name(const struct jtoken *t, const char *nm);
bool jp_accept_op(struct ps *p, const char *op);
bool jp_accept_name(struct ps *p, const char *nm);
bool jp_expect_op(struct ps *p, const char *op);
char *jp_dup_tok(struct ps *p, const struct jtoken *t);
struct jn *jp_node(struct ps *p, enum jnode k, const struct jtoken *at);
bool jp_nl_push(struct ps *p, struct nlist *l, struct jn *n, const char *kw);
/* recursion guard: false (error set) past lim.max_depth; the caller decrements t->depth */
bool jp_enter(struct ps *p);
/* a full expression, ternary included */
struct jn *jp_expr(struct ps *p);
/* an expression without the ternary (for-loop iterables stop before "if") */
struct jn *jp_logic(struct ps *p, bool is_or);

/* ---- render-time arena and values ---- */
struct jarena {
	void *blocks;
	size_t used, cap_total;
	int oom; /* QC_ENOMEM or QC_ERANGE once it fails */
};

void *jarena_alloc(struct jarena *a, size_t n);
void jarena_deinit(struct jarena *a);


struct jv jv_undef(const char *name);
struct jv jv_none(void);
struct jv jv_bool(bool b);
struct jv jv_int(int64_t i);
struct jv jv_float(double f);
struct jv jv_str(const char *s, size_t n); /* s must outlive the value (arena or tree) */
struct jv jv_strdup(struct jarena *a, const char *s, size_t n);
struct jv jv_list(struct jv *items, size_t n);
struct jv jv_dict_new(struct jarena *a);

bool jv_truthy(const struct jv *v);
bool jv_equal(const struct jv *a, const struct jv *b);
/* -2 when a and b are not comparable */
int jv_cmp(const struct jv *a, const struct jv *b);
/* lookup a string key; NULL when absent */
struct jv *jdict_get(const struct jdict *d, const char *k, size_t n);
int jdict_set(struct jarena *a, struct jdict *d, struct jv key, struct jv val);
const char *jv_type_name(const struct jv *v);

/* Python str(v) (jinja's {{ }} output) and json.dumps(v, ensure_ascii=False, indent). */
void jv_str_out(struct jbuf *b, const struct jv *v);
/* indent < 0: none; sort_keys: python's sort_keys */
int jv_json_out(struct jbuf *b, const struct jv *v, int indent, bool sort_keys, int depth);
/* str(v) into the arena */
struct jv jv_to_str(struct jarena *a, const struct jv *v);
size_t jutf8_len(const char *s, size_t n);
/* Python's str.isspace for ASCII (what strip/split without arguments remove) */
bool jinja_is_ws(char ch);
/* positional argument i of a call, else its keyword argument name, else NULL */
const struct jv *jinja_arg(const struct jv *a, const char **kw, size_t n, size_t i, const char *name);

/* ---- evaluation ---- */
struct jframe { /* one scope: the globals, or one for-loop iteration */
	struct jframe *up;
	struct jdict vars;
};

struct jctx {
	const struct qc_jinja *t;
	const struct qc_jinja_chat *chat;
	struct jarena ar;
	struct jbuf out;
	struct jframe *top;
	size_t iters, depth;
	struct qc_err *err;
	int rc;
	enum { FLOW_NONE, FLOW_BREAK, FLOW_CONTINUE } flow;
};

/* set ctx->rc (the first error wins) and fill err with "line L col C: msg" */
int jinja_fail(struct jctx *c, const struct jn *at, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The values a for loop walks over v (undefined: none; a dict: its keys; a
 * string: its UTF-8 characters, in the arena); a non-iterable fails at `at`. */
bool jinja_iter_items(struct jctx *c, const struct jn *at, const struct jv *v, struct jv **items, size_t *n);

struct jv jinja_eval(struct jctx *c, const struct jn *e);
/* innermost binding of name, NULL when unbound */
struct jv *jinja_lookup(struct jctx *c, const char *name);
/* JSON text -> value (jinja_json.c); QC_EINVAL for bad JSON, QC_ERANGE too deep or past scratch */
int jinja_json_value(struct jctx *c, const char *json, struct jv *out);
/* bind name in the innermost frame; name must outlive the render */
void jinja_set(struct jctx *c, const char *name, struct jv v);
/* builtins (jinja_builtin.c); each returns false after jinja_fail */
bool jinja_filter(struct jctx *c, const struct jn *at, const char *name, struct jv *v, const struct jv *args,
		  const char **kw, size_t n, struct jv *out);
bool jinja_test(struct jctx *c, const struct jn *at, const char *name, const struct jv *v, const struct jv *args,
		size_t n, bool *out);
bool jinja_method(struct jctx *c, const struct jn *at, struct jv *self, const char *name, const struct jv *args,
		  const char **kw, size_t n, struct jv *out);
bool jinja_func(struct jctx *c, const struct jn *at, const char *name, const struct jv *args, const char **kw,
		size_t n, struct jv *out);

#endif
