/* The traced-code parser (see tscode.h): a tokenizer that splits the file into logical
 * lines (newlines inside brackets do not end a line), then a line-oriented parser:
 * indentation tells classes, methods, method bodies and the blocks of if/for/while
 * apart. */
#include "import/tscode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EXPR_DEPTH 64  /* brackets and calls nested in one expression */
#define MAX_BRACKETS 256

/* ---- allocation: every piece of the result is a block on one list ---- */

typedef struct kl_ts_block {
  struct kl_ts_block *next;
  max_align_t data[];
} kl_ts_block;

static void *block_alloc(kl_ts_code *c, size_t size) {
  kl_ts_block *b = calloc(1, sizeof *b + size);
  if (!b) return NULL;
  b->next = c->blocks;
  c->blocks = b;
  return b->data;
}

void kl_tscode_free(kl_ts_code *c) {
  if (!c) return;
  for (kl_ts_block *b = c->blocks, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  free(c);
}

/* ---- tokens ---- */

typedef enum tkind { T_NAME, T_INT, T_FLOAT, T_STR, T_OP, T_NEWLINE, T_END } tkind;

typedef struct tok {
  tkind k;
  int line, col;
  const char *s; /* NAME, STR: NUL-terminated copy */
  int64_t i;
  double f;
  char op[3];
} tok;

typedef struct lexer {
  kl_ts_code *c;
  const char *src, *what;
  size_t len, pos;
  int line;
  size_t line_start;
  kl_err *e;
  tok *toks;
  int n, cap;
  int depth; /* open brackets */
} lexer;

static kiln_status lex_fail(lexer *x, const char *msg, const char *detail) {
  return kl_fail(x->e, KILN_ERR_INVALID_MODEL, "%s:%d: %s%s", x->what, x->line, msg, detail);
}

static kiln_status add_tok(lexer *x, tok t) {
  if (x->n == x->cap) {
    int cap = x->cap ? x->cap * 2 : 256;
    tok *p = realloc(x->toks, sizeof *p * (size_t)cap);
    if (!p) return kl_fail(x->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    x->toks = p;
    x->cap = cap;
  }
  t.line = x->line;
  x->toks[x->n++] = t;
  return KILN_OK;
}

static char *copy_str(kl_ts_code *c, const char *s, size_t n) {
  char *r = block_alloc(c, n + 1);
  if (r) memcpy(r, s, n);
  return r;
}

static bool is_name_char(char ch, bool first) {
  return ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
         (!first && ch >= '0' && ch <= '9');
}

static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* A decimal number: ints exactly; floats as mantissa * 10^exp in long double, which
 * rounds to the nearest double for the literals torch prints (17 digits). Independent
 * of the C locale, unlike strtod. */
static kiln_status lex_number(lexer *x, int col) {
  const char *s = x->src;
  size_t p = x->pos;
  uint64_t mant = 0;
  int exp10 = 0, digits = 0;
  bool is_float = false, overflow = false;
  for (; p < x->len && (is_digit(s[p]) || s[p] == '.'); p++) {
    if (s[p] == '.') {
      if (is_float) return lex_fail(x, "a number with two decimal points", "");
      is_float = true;
      continue;
    }
    if (digits < 19) {
      mant = mant * 10 + (uint64_t)(s[p] - '0');
      if (mant) digits++;
      if (is_float) exp10--;
    } else {
      if (!is_float) exp10++;
      overflow = true;
    }
  }
  if (p < x->len && (s[p] == 'e' || s[p] == 'E')) {
    is_float = true;
    p++;
    int sign = 1, e = 0;
    if (p < x->len && (s[p] == '+' || s[p] == '-')) sign = s[p++] == '-' ? -1 : 1;
    if (p >= x->len || !is_digit(s[p])) return lex_fail(x, "a number with an empty exponent", "");
    for (; p < x->len && is_digit(s[p]); p++)
      if (e < 10000) e = e * 10 + (s[p] - '0');
    exp10 += sign * e;
  }
  if (p < x->len && is_name_char(s[p], false))
    return lex_fail(x, "a number followed by letters", "");
  tok t = {.k = is_float ? T_FLOAT : T_INT, .col = col};
  if (!is_float && (overflow || mant > (uint64_t)INT64_MAX))
    return lex_fail(x, "an integer literal beyond 64 bits", "");
  t.i = (int64_t)mant;
  t.f = (double)((long double)mant * powl(10.0L, (long double)exp10));
  x->pos = p;
  return add_tok(x, t);
}

static kiln_status lex_string(lexer *x, int col) {
  char quote = x->src[x->pos++];
  size_t end = x->pos; /* the closing quote bounds the decoded length */
  while (end < x->len && x->src[end] != quote && x->src[end] != '\n')
    end += x->src[end] == '\\' ? 2 : 1;
  char *buf = block_alloc(x->c, end - x->pos + 1);
  if (!buf) return kl_fail(x->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  size_t n = 0;
  for (;;) {
    if (x->pos >= x->len || x->src[x->pos] == '\n') return lex_fail(x, "an unterminated string", "");
    char ch = x->src[x->pos++];
    if (ch == quote) break;
    if (ch == '\\') {
      if (x->pos >= x->len) return lex_fail(x, "an unterminated string", "");
      ch = x->src[x->pos++];
      if (ch == 'n') ch = '\n';
      else if (ch == 't') ch = '\t';
      else if (ch != '\\' && ch != '\'' && ch != '"')
        return lex_fail(x, "a string escape kiln does not read", "");
    }
    if (ch == 0) return lex_fail(x, "a NUL character in a string", "");
    buf[n++] = ch;
  }
  return add_tok(x, (tok){.k = T_STR, .col = col, .s = buf});
}

static kiln_status lex_op(lexer *x, int col) {
  static const char *const two[] = {"->", "==", "!=", "<=", ">=", "**", "//", "+=", "-=",
                                    "*=", "/="};
  tok t = {.k = T_OP, .col = col};
  for (size_t i = 0; i < sizeof two / sizeof two[0]; i++)
    if (x->len - x->pos >= 2 && memcmp(x->src + x->pos, two[i], 2) == 0) {
      memcpy(t.op, two[i], 2);
      x->pos += 2;
      return add_tok(x, t);
    }
  char ch = x->src[x->pos];
  if (!strchr("()[]{},.:=-+*/%<>@!~&|^;", ch) || ch == 0) {
    char d[8];
    snprintf(d, sizeof d, "0x%02x", (unsigned char)ch);
    return lex_fail(x, "a character kiln does not read: ", d);
  }
  if (strchr("([{", ch) && ++x->depth > MAX_BRACKETS)
    return lex_fail(x, "brackets nested too deeply", "");
  if (strchr(")]}", ch) && --x->depth < 0) return lex_fail(x, "an unmatched closing bracket", "");
  t.op[0] = ch;
  x->pos++;
  return add_tok(x, t);
}

static kiln_status lex_newline(lexer *x) {
  x->pos++;
  x->line++;
  x->line_start = x->pos;
  if (x->depth || !x->n || x->toks[x->n - 1].k == T_NEWLINE) return KILN_OK;
  return add_tok(x, (tok){.k = T_NEWLINE});
}

static kiln_status lex_one(lexer *x) {
  char ch = x->src[x->pos];
  int col = (int)(x->pos - x->line_start);
  if (ch == '\n') return lex_newline(x);
  if (ch == ' ' || ch == '\r' || ch == '\t') {
    x->pos++;
    return KILN_OK;
  }
  if (ch == '#') {
    while (x->pos < x->len && x->src[x->pos] != '\n') x->pos++;
    return KILN_OK;
  }
  if (ch == '\\' && x->pos + 1 < x->len && x->src[x->pos + 1] == '\n') {
    x->pos++; /* an explicit line continuation */
    x->line++;
    x->pos++;
    x->line_start = x->pos;
    return KILN_OK;
  }
  if (is_digit(ch)) return lex_number(x, col);
  if (ch == '"' || ch == '\'') return lex_string(x, col);
  if (is_name_char(ch, true)) {
    size_t start = x->pos;
    while (x->pos < x->len && is_name_char(x->src[x->pos], false)) x->pos++;
    char *s = copy_str(x->c, x->src + start, x->pos - start);
    if (!s) return kl_fail(x->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    return add_tok(x, (tok){.k = T_NAME, .col = col, .s = s});
  }
  return lex_op(x, col);
}

static kiln_status tokenize(lexer *x) {
  while (x->pos < x->len) {
    kiln_status s = lex_one(x);
    if (s != KILN_OK) return s;
  }
  if (x->depth) return lex_fail(x, "the file ends inside brackets", "");
  kiln_status s = KILN_OK;
  if (x->n && x->toks[x->n - 1].k != T_NEWLINE) s = add_tok(x, (tok){.k = T_NEWLINE});
  return s ? s : add_tok(x, (tok){.k = T_END});
}

/* ---- parser ---- */

typedef struct parser {
  kl_ts_code *c;
  const char *what;
  tok *t;
  int pos;
  int depth;
  kl_err *e;
} parser;

static const tok *peek(const parser *p) { return &p->t[p->pos]; }

static bool is_op(const tok *t, const char *op) { return t->k == T_OP && strcmp(t->op, op) == 0; }
static bool is_name(const tok *t, const char *s) { return t->k == T_NAME && strcmp(t->s, s) == 0; }

static const char *tok_text(const tok *t, char *buf, size_t len) {
  switch (t->k) {
  case T_NAME: snprintf(buf, len, "'%s'", t->s); break;
  case T_OP: snprintf(buf, len, "'%s'", t->op); break;
  case T_INT: case T_FLOAT: snprintf(buf, len, "a number"); break;
  case T_STR: snprintf(buf, len, "a string"); break;
  case T_NEWLINE: snprintf(buf, len, "the end of the line"); break;
  case T_END: snprintf(buf, len, "the end of the file"); break;
  }
  return buf;
}

static kiln_status syntax(parser *p, const char *expected) {
  char b[96];
  const tok *t = peek(p);
  return kl_fail(p->e, KILN_ERR_INVALID_MODEL, "%s:%d: expected %s, found %s", p->what,
                 t->line, expected, tok_text(t, b, sizeof b));
}

static kiln_status expect_op(parser *p, const char *op) {
  if (!is_op(peek(p), op)) {
    char b[16];
    snprintf(b, sizeof b, "'%s'", op);
    return syntax(p, b);
  }
  p->pos++;
  return KILN_OK;
}

static kl_ts_expr *new_expr(parser *p, kl_tse_kind kind) {
  kl_ts_expr *x = block_alloc(p->c, sizeof *x);
  if (!x) kl_fail(p->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  else {
    x->kind = kind;
    x->line = peek(p)->line;
  }
  return x;
}

static kl_ts_expr *parse_expr(parser *p);
static void skip_type(parser *p, const char *stops);

/* A growable list of expressions (and keyword names) while parsing brackets. */
typedef struct expr_list {
  kl_ts_expr **items;
  const char **kw;
  int n, cap;
} expr_list;

static bool list_add(parser *p, expr_list *l, kl_ts_expr *x, const char *kw) {
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 8;
    kl_ts_expr **items = block_alloc(p->c, sizeof *items * (size_t)cap);
    const char **kws = block_alloc(p->c, sizeof *kws * (size_t)cap);
    if (!items || !kws) {
      kl_fail(p->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      return false;
    }
    if (l->n) {
      memcpy(items, l->items, sizeof *items * (size_t)l->n);
      memcpy(kws, l->kw, sizeof *kws * (size_t)l->n);
    }
    l->items = items;
    l->kw = kws;
    l->cap = cap;
  }
  l->items[l->n] = x;
  l->kw[l->n++] = kw;
  return true;
}

/* Items up to the closing bracket `close`; *trailing_comma tells "(x,)" from "(x)". */
static bool parse_items(parser *p, const char *close, bool keywords, expr_list *l,
                        bool *trailing_comma) {
  *trailing_comma = false;
  while (!is_op(peek(p), close)) {
    const char *kw = NULL;
    if (keywords && peek(p)->k == T_NAME && is_op(&p->t[p->pos + 1], "=")) {
      kw = peek(p)->s;
      p->pos += 2;
    }
    kl_ts_expr *x = parse_expr(p);
    if (!x || !list_add(p, l, x, kw)) return false;
    *trailing_comma = false;
    if (!is_op(peek(p), ",")) break;
    p->pos++;
    *trailing_comma = true;
  }
  return expect_op(p, close) == KILN_OK;
}

static kl_ts_expr *parse_bracket(parser *p, kl_tse_kind kind, const char *close) {
  p->pos++;
  expr_list l = {0};
  bool comma;
  if (!parse_items(p, close, false, &l, &comma)) return NULL;
  if (kind == KL_TSE_TUPLE && l.n == 1 && !comma) return l.items[0]; /* (x) is x */
  kl_ts_expr *x = new_expr(p, kind);
  if (x) {
    x->args = l.items;
    x->n_args = l.n;
  }
  return x;
}

static kl_ts_expr *parse_literal(parser *p) {
  const tok *t = peek(p);
  kl_ts_expr *x = NULL;
  if (t->k == T_INT) x = new_expr(p, KL_TSE_INT);
  else if (t->k == T_FLOAT) x = new_expr(p, KL_TSE_FLOAT);
  else if (t->k == T_STR) x = new_expr(p, KL_TSE_STR);
  else if (is_name(t, "True") || is_name(t, "False")) x = new_expr(p, KL_TSE_BOOL);
  else if (is_name(t, "None")) x = new_expr(p, KL_TSE_NONE);
  else if (is_name(t, "inf") || is_name(t, "nan")) x = new_expr(p, KL_TSE_FLOAT);
  else if (t->k == T_NAME) x = new_expr(p, KL_TSE_NAME);
  else {
    syntax(p, "an expression");
    return NULL;
  }
  if (!x) return NULL;
  x->i = t->k == T_NAME ? is_name(t, "True") : t->i;
  x->f = is_name(t, "inf") ? INFINITY : is_name(t, "nan") ? NAN : t->f; /* as printed */
  x->s = t->s;
  p->pos++;
  return x;
}

/* {key: value, ...}: keys and values alternate in args */
static kl_ts_expr *parse_dict(parser *p) {
  p->pos++;
  expr_list l = {0};
  while (!is_op(peek(p), "}")) {
    kl_ts_expr *k = parse_expr(p), *v = NULL;
    if (!k || expect_op(p, ":") != KILN_OK || !(v = parse_expr(p)) ||
        !list_add(p, &l, k, NULL) || !list_add(p, &l, v, NULL))
      return NULL;
    if (!is_op(peek(p), ",")) break;
    p->pos++;
  }
  if (expect_op(p, "}") != KILN_OK) return NULL;
  kl_ts_expr *x = new_expr(p, KL_TSE_DICT);
  if (x) {
    x->args = l.items;
    x->n_args = l.n;
  }
  return x;
}

static kl_ts_expr *parse_primary(parser *p) {
  const tok *t = peek(p);
  if (is_op(t, "{")) return parse_dict(p);
  if (is_op(t, "(")) return parse_bracket(p, KL_TSE_TUPLE, ")");
  if (is_op(t, "[")) return parse_bracket(p, KL_TSE_LIST, "]");
  if (is_op(t, "-")) { /* only negative literals: the tracer writes no arithmetic */
    p->pos++;
    kl_ts_expr *x = parse_literal(p);
    if (x && x->kind != KL_TSE_INT && x->kind != KL_TSE_FLOAT) {
      p->pos--;
      syntax(p, "a number after '-'");
      return NULL;
    }
    if (x) x->i = -x->i, x->f = -x->f;
    return x;
  }
  return parse_literal(p);
}

static kl_ts_expr *parse_call(parser *p, kl_ts_expr *callee) {
  p->pos++;
  expr_list l = {0};
  bool comma;
  /* annotate(List[int], []) and unchecked_cast(int, x): the type is for TorchScript's
   * checker; only the value is kept */
  if (callee->kind == KL_TSE_NAME &&
      (strcmp(callee->s, "annotate") == 0 || strcmp(callee->s, "unchecked_cast") == 0)) {
    skip_type(p, ",)");
    if (expect_op(p, ",") != KILN_OK) return NULL;
  }
  if (callee->kind == KL_TSE_NAME && strcmp(callee->s, "uninitialized") == 0)
    skip_type(p, ")"); /* uninitialized(Tuple[Tensor, Tensor]): the type only */
  if (!parse_items(p, ")", true, &l, &comma)) return NULL;
  kl_ts_expr *x = new_expr(p, KL_TSE_CALL);
  if (x) {
    x->line = callee->line; /* (the token after ')' may be the next line's newline) */
    x->obj = callee;
    x->args = l.items;
    x->kw = l.kw;
    x->n_args = l.n;
  }
  return x;
}

static kl_ts_expr *parse_postfix(parser *p, kl_ts_expr *x) {
  while (x) {
    const tok *t = peek(p);
    if (is_op(t, "(")) {
      x = parse_call(p, x);
    } else if (is_op(t, ".")) {
      p->pos++;
      if (peek(p)->k != T_NAME) return syntax(p, "a name after '.'"), NULL;
      kl_ts_expr *a = new_expr(p, KL_TSE_ATTR);
      if (!a) return NULL;
      a->obj = x;
      a->s = peek(p)->s;
      p->pos++;
      x = a;
    } else if (is_op(t, "[")) {
      p->pos++;
      kl_ts_expr *ix = new_expr(p, KL_TSE_INDEX);
      if (!ix) return NULL;
      ix->obj = x;
      bool neg = is_op(peek(p), "-");
      const tok *n = &p->t[p->pos + neg];
      if (n->k == T_INT && is_op(n + 1, "]")) { /* xs[2], xs[-1] */
        ix->i = neg ? -n->i : n->i;
        p->pos += neg + 1;
      } else { /* xs[i]: an index the code computes */
        if (!(ix->args = block_alloc(p->c, sizeof *ix->args))) {
          kl_fail(p->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
          return NULL;
        }
        if (!(ix->args[0] = parse_expr(p))) return NULL;
        ix->n_args = 1;
      }
      if (expect_op(p, "]") != KILN_OK) return NULL;
      x = ix;
    } else {
      return x;
    }
  }
  return NULL;
}

static kl_ts_expr *parse_expr(parser *p) {
  if (++p->depth > MAX_EXPR_DEPTH) {
    kl_fail(p->e, KILN_ERR_LIMIT, "%s:%d: an expression nested deeper than %d levels",
            p->what, peek(p)->line, MAX_EXPR_DEPTH);
    return NULL;
  }
  kl_ts_expr *x = parse_postfix(p, parse_primary(p));
  p->depth--;
  const tok *t = peek(p);
  if (x && t->k == T_OP && !is_op(t, ",") && !is_op(t, ")") && !is_op(t, "]") &&
      !is_op(t, "}") && !is_op(t, "=") && !is_op(t, ":")) {
    char b[16];
    kl_fail(p->e, KILN_ERR_UNSUPPORTED, "%s:%d: operator %s is not supported in traced code: "
            "export with torch.jit.trace or to ONNX", p->what, t->line, tok_text(t, b, sizeof b));
    return NULL;
  }
  return x;
}

/* ---- statements ---- */

#define MAX_BLOCK_DEPTH 32 /* if/for/while blocks nested in each other */

static const char *const refused_words[] = {"with", "try", "except", "finally", "break",
                                            "continue", "raise", "assert", "del",
                                            "global", "lambda", "yield"};

static kiln_status refused(parser *p, const tok *t) {
  return kl_fail(p->e, KILN_ERR_UNSUPPORTED, "%s:%d: '%s' is not supported in scripted code "
                 "(kiln lowers if/else, for ... in range(...) and while): export with "
                 "torch.jit.trace or to ONNX", p->what, t->line, t->s);
}

static bool is_refused(const tok *t) {
  for (size_t i = 0; t->k == T_NAME && i < sizeof refused_words / sizeof *refused_words; i++)
    if (strcmp(t->s, refused_words[i]) == 0) return true;
  return false;
}

/* The names before '=' of "a, b, = ..." or "a = ...", if this line is an assignment. */
static kiln_status parse_targets(parser *p, kl_ts_stmt *st) {
  int save = p->pos, n = 0;
  if (peek(p)->k == T_NAME && is_op(&p->t[p->pos + 1], ":") &&
      p->t[p->pos + 2].k != T_NEWLINE) { /* "a : Type = value" (not "else:") */
    p->pos += 2;
    skip_type(p, "=");
    if (!is_op(peek(p), "=")) return syntax(p, "'=' after an annotated name");
    if (!(st->targets = block_alloc(p->c, sizeof *st->targets)))
      return kl_fail(p->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    st->targets[0] = p->t[save].s;
    st->n_targets = 1;
    p->pos++;
    return KILN_OK;
  }
  while (peek(p)->k == T_NAME && (is_op(&p->t[p->pos + 1], ",") || is_op(&p->t[p->pos + 1], "="))) {
    n++;
    p->pos++;
    if (is_op(peek(p), "=")) break;
    p->pos++;
    if (is_op(peek(p), "=")) break;
  }
  if (!n || !is_op(peek(p), "=")) {
    p->pos = save;
    return KILN_OK;
  }
  st->targets = block_alloc(p->c, sizeof *st->targets * (size_t)n);
  if (!st->targets) return kl_fail(p->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int i = 0, k = save; i < n; k++)
    if (p->t[k].k == T_NAME) st->targets[i++] = p->t[k].s;
  st->n_targets = n;
  p->pos++; /* '=' */
  return KILN_OK;
}

/* "a, b" without brackets (the right side of "x, y = a, b"): a tuple */
static kl_ts_expr *parse_value(parser *p) {
  kl_ts_expr *x = parse_expr(p);
  if (!x || !is_op(peek(p), ",")) return x;
  expr_list l = {0};
  if (!list_add(p, &l, x, NULL)) return NULL;
  while (is_op(peek(p), ",")) {
    p->pos++;
    if (peek(p)->k == T_NEWLINE) break;
    if (!(x = parse_expr(p)) || !list_add(p, &l, x, NULL)) return NULL;
  }
  kl_ts_expr *t = new_expr(p, KL_TSE_TUPLE);
  if (t) {
    t->args = l.items;
    t->n_args = l.n;
  }
  return t;
}

static kiln_status parse_block(parser *p, kl_ts_stmt **body, int *n_body, int outer_col,
                               int depth);

/* "KEYWORD ...:" then the end of the line */
static kiln_status expect_colon_line(parser *p) {
  if (expect_op(p, ":") != KILN_OK) return p->e->code;
  if (peek(p)->k != T_NEWLINE) return syntax(p, "the end of the line after ':'");
  p->pos++;
  return KILN_OK;
}

/* if/for/while at column col: the header, then the block(s) */
static kiln_status parse_compound(parser *p, kl_ts_stmt *st, int col, int depth) {
  const tok *t = peek(p);
  if (depth >= MAX_BLOCK_DEPTH)
    return kl_fail(p->e, KILN_ERR_LIMIT, "%s:%d: blocks nested deeper than %d levels",
                   p->what, t->line, MAX_BLOCK_DEPTH);
  st->kind = is_name(t, "if") || is_name(t, "elif") ? KL_TSS_IF
             : is_name(t, "for") ? KL_TSS_FOR : KL_TSS_WHILE;
  p->pos++;
  if (st->kind == KL_TSS_FOR) {
    if (peek(p)->k != T_NAME) return syntax(p, "a loop variable after 'for'");
    st->var = peek(p)->s;
    p->pos++;
    if (!is_name(peek(p), "in")) return syntax(p, "'in'");
    p->pos++;
    if (!is_name(peek(p), "range") || !is_op(&p->t[p->pos + 1], "("))
      return kl_fail(p->e, KILN_ERR_UNSUPPORTED, "%s:%d: a for loop over something other "
                     "than range(...) is not supported (torch writes a loop over a list or "
                     "tensor as a range over its length)", p->what, t->line);
    p->pos += 2;
    kl_ts_expr *a[3];
    int n = 0;
    while (n < 3 && !is_op(peek(p), ")")) {
      if (!(a[n++] = parse_expr(p))) return p->e->code;
      if (!is_op(peek(p), ",")) break;
      p->pos++;
    }
    if (n == 0 || !is_op(peek(p), ")"))
      return syntax(p, "range with 1 to 3 arguments");
    p->pos++;
    st->value = n == 1 ? a[0] : a[1];
    st->start = n > 1 ? a[0] : NULL;
    st->step = n > 2 ? a[2] : NULL;
  } else if (!(st->value = parse_expr(p))) {
    return p->e->code;
  }
  kiln_status s = expect_colon_line(p);
  if (s == KILN_OK) s = parse_block(p, &st->body, &st->n_body, col, depth + 1);
  if (s != KILN_OK || st->kind != KL_TSS_IF || peek(p)->col != col) return s;
  if (is_name(peek(p), "elif")) { /* else: if ... */
    if (!(st->orelse = block_alloc(p->c, sizeof *st->orelse)))
      return kl_fail(p->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    st->n_orelse = 1;
    st->orelse->line = peek(p)->line;
    return parse_compound(p, st->orelse, col, depth + 1);
  }
  if (!is_name(peek(p), "else")) return KILN_OK;
  p->pos++;
  s = expect_colon_line(p);
  return s ? s : parse_block(p, &st->orelse, &st->n_orelse, col, depth + 1);
}

static kiln_status parse_stmt(parser *p, kl_ts_stmt *st, int depth) {
  const tok *t = peek(p);
  st->line = t->line;
  if (is_name(t, "if") || is_name(t, "for") || is_name(t, "while"))
    return parse_compound(p, st, t->col, depth);
  if (is_refused(t)) return refused(p, t);
  if (is_name(t, "pass")) {
    st->kind = KL_TSS_PASS;
    p->pos++;
    if (peek(p)->k != T_NEWLINE) return syntax(p, "the end of the statement");
    p->pos++;
    return KILN_OK;
  }
  if (is_name(t, "return")) {
    st->is_return = true;
    p->pos++;
  } else if (t->k == T_NAME && is_op(&p->t[p->pos + 1], ".") &&
             p->t[p->pos + 2].k == T_NAME && is_op(&p->t[p->pos + 3], "=")) {
    /* "self.flag = value": an attribute of a module set (torchvision's SSD sets
     * self._has_warned after its warning) */
    kl_ts_expr *obj = new_expr(p, KL_TSE_NAME), *x = obj ? new_expr(p, KL_TSE_ATTR) : NULL;
    if (!x) return p->e->code;
    obj->s = t->s;
    x->obj = obj;
    x->s = p->t[p->pos + 2].s;
    st->attr_target = x;
    p->pos += 4;
  } else {
    kiln_status s = parse_targets(p, st);
    if (s != KILN_OK) return s;
  }
  if (!(st->value = parse_value(p))) return p->e->code;
  if (peek(p)->k != T_NEWLINE) return syntax(p, "the end of the statement");
  p->pos++;
  return KILN_OK;
}

/* The statements indented deeper than outer_col, all at the column of the first. */
static kiln_status parse_block(parser *p, kl_ts_stmt **body, int *n_body, int outer_col,
                               int depth) {
  int col = peek(p)->col, cap = 0;
  if (peek(p)->k == T_END || col <= outer_col) return syntax(p, "an indented block");
  while (peek(p)->k != T_END && peek(p)->col > outer_col) {
    if (peek(p)->col != col)
      return kl_fail(p->e, KILN_ERR_INVALID_MODEL, "%s:%d: indentation of %d columns where "
                     "the block has %d", p->what, peek(p)->line, peek(p)->col, col);
    if (*n_body == cap) {
      cap = cap ? cap * 2 : 16;
      kl_ts_stmt *b = block_alloc(p->c, sizeof *b * (size_t)cap);
      if (!b) return kl_fail(p->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      if (*n_body) memcpy(b, *body, sizeof *b * (size_t)*n_body);
      *body = b;
    }
    kiln_status s = parse_stmt(p, &(*body)[(*n_body)++], depth);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

/* Skip to the token after the end of the logical line. */
static void skip_line(parser *p) {
  while (peek(p)->k != T_NEWLINE && peek(p)->k != T_END) p->pos++;
  if (peek(p)->k == T_NEWLINE) p->pos++;
}

/* A type annotation: tokens up to one of the one-character operators of stops at
 * bracket depth 0. */
static void skip_type(parser *p, const char *stops) {
  int depth = 0;
  for (;; p->pos++) {
    const tok *t = peek(p);
    if (t->k == T_NEWLINE || t->k == T_END) return;
    if (depth == 0 && t->k == T_OP && t->op[0] && !t->op[1] && strchr(stops, t->op[0])) return;
    if (is_op(t, "[") || is_op(t, "(")) depth++;
    if (is_op(t, "]") || is_op(t, ")")) depth--;
  }
}

/* "(name: Type, name: Type=default, ...)": the names in kw, the defaults (or NULL) in
 * items */
static kiln_status parse_params(parser *p, kl_ts_method *m) {
  expr_list names = {0};
  if (expect_op(p, "(") != KILN_OK) return p->e->code;
  while (!is_op(peek(p), ")")) {
    if (peek(p)->k != T_NAME) return syntax(p, "a parameter name");
    const char *name = peek(p)->s;
    p->pos++;
    if (is_op(peek(p), ":")) skip_type(p, ",)=");
    kl_ts_expr *dflt = NULL;
    if (is_op(peek(p), "=")) {
      p->pos++;
      if (!(dflt = parse_expr(p))) return p->e->code;
    }
    if (!list_add(p, &names, dflt, name)) return p->e->code;
    if (!is_op(peek(p), ",")) break;
    p->pos++;
  }
  if (expect_op(p, ")") != KILN_OK) return p->e->code;
  if (is_op(peek(p), "->")) skip_type(p, ":");
  if (expect_op(p, ":") != KILN_OK) return p->e->code;
  if (peek(p)->k != T_NEWLINE) return syntax(p, "the end of the line after 'def ...:'");
  p->pos++;
  m->params = names.kw;
  m->defaults = names.items;
  m->n_params = names.n;
  return KILN_OK;
}

static kiln_status parse_body(parser *p, kl_ts_method *m, int def_col) {
  if (peek(p)->k == T_END || peek(p)->col <= def_col) return syntax(p, "a method body");
  return parse_block(p, &m->body, &m->n_body, def_col, 0);
}

static kiln_status add_method(parser *p, kl_ts_class *cls, int def_col, int *cap) {
  p->pos++; /* def */
  if (peek(p)->k != T_NAME) return syntax(p, "a method name");
  if (cls->n_methods == *cap) {
    *cap = *cap ? *cap * 2 : 4;
    kl_ts_method *ms = block_alloc(p->c, sizeof *ms * (size_t)*cap);
    if (!ms) return kl_fail(p->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (cls->n_methods) memcpy(ms, cls->methods, sizeof *ms * (size_t)cls->n_methods);
    cls->methods = ms;
  }
  kl_ts_method *m = &cls->methods[cls->n_methods++];
  m->name = peek(p)->s;
  m->line = peek(p)->line;
  p->pos++;
  kiln_status s = parse_params(p, m);
  return s != KILN_OK ? s : parse_body(p, m, def_col);
}

static kiln_status add_field(parser *p, kl_ts_class *cls, const char *name, int *cap) {
  if (cls->n_fields == *cap) {
    *cap = *cap ? *cap * 2 : 4;
    const char **fs = block_alloc(p->c, sizeof *fs * (size_t)*cap);
    if (!fs) return kl_fail(p->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (cls->n_fields) memcpy(fs, cls->fields, sizeof *fs * (size_t)cls->n_fields);
    cls->fields = fs;
  }
  cls->fields[cls->n_fields++] = name;
  return KILN_OK;
}

static kiln_status parse_class(parser *p, kl_ts_class *cls) {
  int col = peek(p)->col, cap = 0;
  p->pos++; /* class */
  if (peek(p)->k != T_NAME) return syntax(p, "a class name");
  cls->name = peek(p)->s;
  p->pos++;
  if (is_op(peek(p), "(") && is_name(peek(p) + 1, "NamedTuple") && is_op(peek(p) + 2, ")"))
    cls->named_tuple = true;
  skip_line(p);
  int fcap = 0;
  while (peek(p)->k != T_END && peek(p)->col > col) {
    if (is_name(peek(p), "def")) {
      kiln_status s = add_method(p, cls, peek(p)->col, &cap);
      if (s != KILN_OK) return s;
      continue;
    }
    if (peek(p)->k == T_NAME && is_op(peek(p) + 1, ":")) {
      kiln_status s = add_field(p, cls, peek(p)->s, &fcap);
      if (s != KILN_OK) return s;
    }
    skip_line(p); /* attribute declarations: the pickle has the values */
  }
  return KILN_OK;
}

static kiln_status parse_file(parser *p) {
  int cap = 0, fcap = 0;
  p->c->functions.name = "";
  while (peek(p)->k != T_END) {
    if (is_name(peek(p), "def")) {
      kiln_status s = add_method(p, &p->c->functions, peek(p)->col, &fcap);
      if (s != KILN_OK) return s;
      continue;
    }
    if (!is_name(peek(p), "class")) {
      skip_line(p); /* imports and the like */
      continue;
    }
    if (p->c->n_classes == cap) {
      cap = cap ? cap * 2 : 4;
      kl_ts_class *cs = block_alloc(p->c, sizeof *cs * (size_t)cap);
      if (!cs) return kl_fail(p->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      if (p->c->n_classes) memcpy(cs, p->c->classes, sizeof *cs * (size_t)p->c->n_classes);
      p->c->classes = cs;
    }
    kiln_status s = parse_class(p, &p->c->classes[p->c->n_classes++]);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

kiln_status kl_tscode_parse(const char *src, size_t len, const char *what, kl_ts_code **out,
                            kl_err *e) {
  *out = NULL;
  kl_ts_code *c = calloc(1, sizeof *c);
  if (!c) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  lexer x = {.c = c, .src = src, .what = what, .len = len, .line = 1, .e = e};
  kiln_status s = tokenize(&x);
  if (s == KILN_OK) {
    parser p = {.c = c, .what = what, .t = x.toks, .e = e};
    s = parse_file(&p);
  }
  free(x.toks);
  if (s != KILN_OK) {
    kl_tscode_free(c);
    return s;
  }
  *out = c;
  return KILN_OK;
}

const kl_ts_class *kl_tscode_class(const kl_ts_code *c, const char *name) {
  for (int i = 0; i < c->n_classes; i++)
    if (strcmp(c->classes[i].name, name) == 0) return &c->classes[i];
  return NULL;
}

const kl_ts_method *kl_tscode_method(const kl_ts_class *c, const char *name) {
  for (int i = 0; i < c->n_methods; i++)
    if (strcmp(c->methods[i].name, name) == 0) return &c->methods[i];
  return NULL;
}

const kl_ts_method *kl_tscode_function(const kl_ts_code *c, const char *name) {
  return kl_tscode_method(&c->functions, name);
}
