/* A parser for the Python code that torch.jit.trace + torch.jit.save write under
 * code/__torch__/...: class bodies (whose attribute lines are skipped: the pickle
 * holds the attributes) and methods of statements:
 *
 *   def forward(self: __torch__.M, x: Tensor) -> Tensor:
 *     conv = self.conv
 *     _0 = getattr(self, "0")
 *     a, b, = torch.chunk((conv).forward(x, ), 2, 1)
 *     y = torch.add(a, CONSTANTS.c0, alpha=1)
 *     return (y, [1, -2], None)
 *
 * Expressions: names, attributes, calls with positional and keyword arguments,
 * int/float/string/bool/None literals, negation of a literal, lists, tuples, dicts,
 * indexing by an int or by an expression, and annotate(Type, value) (kept as a call
 * with the value only).
 * From torch.jit.script: if/else (elif read as else + if), for NAME in range(n),
 * range(a, b) and range(a, b, s), while blocks, pass, "a, b = c, d" (torch writes
 * break and continue as flags of a while), free functions (def at column 0, as
 * code/__torch__/torch/nn/functional.py holds them) and parameter defaults.
 * unchecked_cast(T, v) is kept as a call with the value only, like annotate. A class
 * whose base is NamedTuple keeps its annotated names ("logits : Tensor") as fields. Anything
 * else (other compound statements, a break or continue in the code, operators) is an
 * error naming the line and the construct.
 */
#ifndef KL_IMPORT_TSCODE_H
#define KL_IMPORT_TSCODE_H

#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum kl_tse_kind {
  KL_TSE_NAME,  /* s */
  KL_TSE_INT,   /* i */
  KL_TSE_FLOAT, /* f */
  KL_TSE_STR,   /* s */
  KL_TSE_BOOL,  /* i */
  KL_TSE_NONE,
  KL_TSE_ATTR,  /* obj.s */
  KL_TSE_CALL,  /* obj(args), kw[k] names argument k or is NULL */
  KL_TSE_LIST,  /* [args] */
  KL_TSE_TUPLE, /* (args) */
  KL_TSE_INDEX, /* obj[i], or obj[args[0]] when n_args is 1 */
  KL_TSE_DICT,  /* {args[0]: args[1], args[2]: args[3], ...} */
} kl_tse_kind;

typedef struct kl_ts_expr kl_ts_expr;
struct kl_ts_expr {
  kl_tse_kind kind;
  int line;
  const char *s;
  int64_t i;
  double f;
  kl_ts_expr *obj;
  kl_ts_expr **args;
  const char **kw;
  int n_args;
};

/* A statement: an assignment, expression or return (KL_TSS_SIMPLE), pass, or a block
 * statement as torch.jit.script serializes control flow:
 *   if value:           body, then the else block (n_orelse 0 when there is none)
 *   for var in range(value):   body (range(start, value) and range(start, value, step)
 *                                     set start and step; NULL when absent)
 *   while value:        body */
typedef enum kl_tss_kind {
  KL_TSS_SIMPLE,
  KL_TSS_PASS,
  KL_TSS_IF,
  KL_TSS_FOR,
  KL_TSS_WHILE
} kl_tss_kind;

typedef struct kl_ts_stmt kl_ts_stmt;
struct kl_ts_stmt {
  kl_tss_kind kind;
  int line;
  bool is_return;
  const char **targets; /* assigned names; none for an expression statement or return */
  int n_targets;
  kl_ts_expr *attr_target; /* "name.attr = value" (a module's attribute): NAME.attr */
  kl_ts_expr *value;    /* also the condition of if/while, the count (stop) of for */
  kl_ts_expr *start, *step; /* for's range(start, stop[, step]); NULL when absent */
  const char *var;      /* for's loop variable */
  kl_ts_stmt *body, *orelse;
  int n_body, n_orelse;
};

typedef struct kl_ts_method {
  const char *name;
  int line;
  const char **params; /* including self (a method's; a free function has no self) */
  kl_ts_expr **defaults; /* per parameter: its default value, or NULL */
  int n_params;
  kl_ts_stmt *body;
  int n_body;
} kl_ts_method;

typedef struct kl_ts_class {
  const char *name;
  kl_ts_method *methods;
  int n_methods;
  bool named_tuple;    /* class NAME(NamedTuple): its fields are the annotated names */
  const char **fields; /* the annotated names (a NamedTuple's fields), in order */
  int n_fields;
} kl_ts_class;

typedef struct kl_ts_code {
  kl_ts_class *classes;
  int n_classes;
  kl_ts_class functions; /* the file's free functions (def at column 0), name "" */
  struct kl_ts_block *blocks; /* everything above lives in these */
} kl_ts_code;

/* Parse one code file (src need not be NUL-terminated and is not kept). `what` names
 * the file in messages. On failure *out is NULL. */
kiln_status kl_tscode_parse(const char *src, size_t len, const char *what, kl_ts_code **out,
                            kl_err *e);
void kl_tscode_free(kl_ts_code *c);

/* The class of that name, or NULL; the method of that name in it, or NULL; the free
 * function of that name, or NULL. */
const kl_ts_class *kl_tscode_class(const kl_ts_code *c, const char *name);
const kl_ts_method *kl_tscode_method(const kl_ts_class *c, const char *name);
const kl_ts_method *kl_tscode_function(const kl_ts_code *c, const char *name);

#endif
