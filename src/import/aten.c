/* ATen calls of traced code -> IR nodes with ONNX semantics.
 *
 * One table row per ATen name: the parameter names of its schema (arguments are bound
 * by position or keyword, as Python would; omitted ones take the schema's default,
 * which the code printer leaves out) and the function that lowers it. In-place
 * variants (relu_, add_, fill_, copy_) lower as their functional twins, whose result
 * becomes what the written tensor, and the tensors it shares memory with, hold from
 * then on (functionalization, at the end of this file).
 *
 * Python ints from shapes are either known while building (a literal, or a dim that
 * the graph declares) or graph values (0-D int64 from Shape + Gather). Arithmetic on
 * known ones is done here, so shape lists of a model traced at fixed sizes become
 * constants; the rest becomes nodes.
 */
#include "import/torchscript.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PARAMS 16
#define MAX_LIST 64 /* ints in a list argument, tensors in most list arguments */
#define MAX_CAT 1024 /* tensors in cat/stack (SSD concatenates one per class, 90) */

typedef struct call {
  kl_ts_build *b;
  kl_graph *g;
  kl_err *e;
  const char *const *params;
  const kl_tsv *a[MAX_PARAMS];
  bool kw_bound[MAX_PARAMS]; /* the argument was given by keyword */
  int variant;
  kl_tsv *out;
} call;

typedef kiln_status (*lower_fn)(call *c);

typedef struct aten_op {
  const char *name;
  const char *const *params;
  lower_fn fn;
  int variant;
} aten_op;

/* ---- arguments ---- */

static kiln_status bad_arg(call *c, int i, const char *expected) {
  const kl_tsv *v = c->a[i];
  static const char *const kinds[] = {"None", "bool", "int", "float", "str",
                                      "tensor", "list", "tuple", "module", "function",
                                      "dict", "a list whose length the run decides"};
  _Static_assert(sizeof kinds / sizeof kinds[0] == KL_TSV_STACK + 1, "a name per kl_tsv_kind");
  const char *found = !v ? "nothing" : (v->kind == KL_TSV_INT || v->kind == KL_TSV_FLOAT) &&
                                               v->id >= 0 ? "a value computed by the graph"
                                                          : kinds[v->kind];
  return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "argument '%s' is %s, expected %s",
                 c->params[i], found, expected);
}

static bool given(const call *c, int i) { return c->a[i] && c->a[i]->kind != KL_TSV_NONE; }

static bool is_number(const kl_tsv *v) {
  return v && (v->kind == KL_TSV_INT || v->kind == KL_TSV_FLOAT || v->kind == KL_TSV_BOOL) &&
         v->id < 0;
}

static double number(const kl_tsv *v) { return v->kind == KL_TSV_FLOAT ? v->f : (double)v->i; }

/* The value of a one-element constant graph value. */
static bool const_scalar(const call *c, int id, double *v) {
  const kl_value *val = &c->g->values[id];
  int64_t n;
  if (val->kind != KL_VALUE_CONST || !kl_type_numel(&val->type, &n) || n != 1) return false;
  *v = kl_load_f64(val->data, val->type.dtype, 0);
  return true;
}

static bool const_int(const call *c, int id, int64_t *v) {
  double d;
  if (!const_scalar(c, id, &d) || kl_dtype_is_float(c->g->values[id].type.dtype)) return false;
  *v = kl_load_i64(c->g->values[id].data, c->g->values[id].type.dtype, 0);
  return true;
}

/* int_arg without failing: false when the argument is not an int known now. */
static bool peek_int(call *c, int i, int64_t dflt, int64_t *v) {
  const kl_tsv *a = c->a[i];
  *v = dflt;
  if (!given(c, i)) return *v = dflt, true;
  if ((a->kind == KL_TSV_INT || a->kind == KL_TSV_BOOL) && a->id < 0) return *v = a->i, true;
  return (a->kind == KL_TSV_INT || a->kind == KL_TSV_TENSOR) && a->id >= 0 && const_int(c, a->id, v);
}

static kiln_status int_arg(call *c, int i, int64_t dflt, int64_t *v) {
  if (peek_int(c, i, dflt, v)) return KILN_OK;
  return bad_arg(c, i, "an int known when the graph is built");
}

static kiln_status float_arg(call *c, int i, double dflt, double *v) {
  const kl_tsv *a = c->a[i];
  *v = dflt;
  if (!given(c, i)) return *v = dflt, KILN_OK;
  if (is_number(a)) return *v = number(a), KILN_OK;
  if (a->id >= 0 && const_scalar(c, a->id, v)) return KILN_OK;
  return bad_arg(c, i, "a number known when the graph is built");
}

static kiln_status bool_arg(call *c, int i, bool dflt, bool *v) {
  int64_t x;
  kiln_status s = int_arg(c, i, dflt, &x);
  *v = x != 0;
  return s;
}

static kiln_status str_arg(call *c, int i, const char *dflt, const char **v) {
  *v = dflt;
  if (!given(c, i)) return *v = dflt, KILN_OK;
  if (c->a[i]->kind != KL_TSV_STR) return bad_arg(c, i, "a string");
  *v = c->a[i]->s;
  return KILN_OK;
}

/* A list of known ints; a single int is repeated `expand` times (conv's stride=2). */
static kiln_status ints_arg(call *c, int i, int expand, int64_t *v, int *n) {
  const kl_tsv *a = c->a[i];
  *n = 0;
  if (!given(c, i)) return KILN_OK;
  if (a->kind == KL_TSV_INT && a->id < 0) {
    for (int k = 0; k < (expand ? expand : 1); k++) v[k] = a->i;
    *n = expand ? expand : 1;
    return KILN_OK;
  }
  if ((a->kind != KL_TSV_LIST && a->kind != KL_TSV_TUPLE) || a->n > MAX_LIST)
    return bad_arg(c, i, "a list of ints");
  for (int k = 0; k < a->n; k++) {
    const kl_tsv *x = &a->items[k];
    if (x->kind == KL_TSV_INT && x->id < 0) v[k] = x->i;
    else if (!(x->id >= 0 && const_int(c, x->id, &v[k])))
      return bad_arg(c, i, "a list of ints known when the graph is built");
  }
  *n = a->n;
  return KILN_OK;
}

static kiln_status tensor_arg(call *c, int i, int *id) {
  const kl_tsv *a = c->a[i];
  *id = KL_ABSENT;
  if (a && (a->kind == KL_TSV_TENSOR ||
            ((a->kind == KL_TSV_INT || a->kind == KL_TSV_FLOAT || a->kind == KL_TSV_BOOL) &&
             a->id >= 0)))
    return *id = a->id, KILN_OK;
  return bad_arg(c, i, "a tensor");
}

static kiln_status opt_tensor_arg(call *c, int i, int *id) {
  if (!given(c, i)) return *id = KL_ABSENT, KILN_OK;
  return tensor_arg(c, i, id);
}

/* ---- results ---- */

static kiln_status ret_tensor(call *c, int id) {
  *c->out = (kl_tsv){.kind = KL_TSV_TENSOR, .id = id};
  return KILN_OK;
}

static kiln_status ret_int(call *c, int64_t v) {
  *c->out = (kl_tsv){.kind = KL_TSV_INT, .i = v, .id = -1};
  return KILN_OK;
}

/* A list of tensors ids[0..n-1]. */
static kiln_status ret_list(call *c, const int *ids, int n) {
  kl_tsv *items = kl_ts_alloc(c->b, sizeof *items * (size_t)(n ? n : 1));
  if (!items) return c->e->code;
  for (int k = 0; k < n; k++) items[k] = (kl_tsv){.kind = KL_TSV_TENSOR, .id = ids[k]};
  *c->out = (kl_tsv){.kind = KL_TSV_LIST, .items = items, .n = n, .id = -1};
  return KILN_OK;
}

/* ---- nodes ---- */

static const kl_type *type_of(call *c, int id) { return kl_ts_type(c->b, id); }
static int rank_of(call *c, int id) { return type_of(c, id)->rank; }
static kl_dtype dtype_of(call *c, int id) { return type_of(c, id)->dtype; }

static kiln_status rank_unknown(call *c) {
  return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "needs the rank of its input, which is not known "
                 "(an archive without traced_inputs.pkl, as torch 1.x writes: declare the "
                 "inputs with the option input_types, kiln --input-types, or save the "
                 "trace with torch 2.x)");
}

static kiln_status need_rank(call *c, int id, int *rank) {
  *rank = rank_of(c, id);
  return *rank >= 0 ? KILN_OK : rank_unknown(c);
}

/* Begin a node with one output; set attributes, then end_node. */
static int begin_node(call *c, kl_op op, int n_in, const int *in, int *y) {
  return kl_ts_node(c->b, op, n_in, in, 1, y);
}

static kiln_status end_node(call *c, int node, kiln_status s) {
  if (node < 0) return c->e->code;
  return s != KILN_OK ? s : kl_ts_finish(c->b, node);
}

/* A node without attributes; *y its output. */
static kiln_status op_node(call *c, kl_op op, int n_in, const int *in, int *y) {
  int node = begin_node(c, op, n_in, in, y);
  return end_node(c, node, KILN_OK);
}

static kiln_status op1(call *c, kl_op op, int x, int *y) { return op_node(c, op, 1, &x, y); }

static kiln_status op2(call *c, kl_op op, int a, int b, int *y) {
  int in[2] = {a, b};
  return op_node(c, op, 2, in, y);
}

static kiln_status node_int(call *c, kl_op op, int n_in, const int *in, const char *attr,
                            int64_t v, int *y) {
  int node = begin_node(c, op, n_in, in, y);
  return end_node(c, node, node < 0 ? KILN_OK : kl_node_set_int(c->g, node, attr, v, c->e));
}

static kiln_status cast(call *c, int x, kl_dtype to, int *y) {
  if (dtype_of(c, x) == to) return *y = x, KILN_OK;
  return node_int(c, KL_OP_Cast, 1, &x, "to", to, y);
}

static int const_ints(call *c, const int64_t *v, int n) { return kl_ts_const_i64(c->b, v, n, false); }

static kiln_status const_id(call *c, int id, int *out) {
  *out = id;
  return id < 0 ? c->e->code : KILN_OK;
}

/* ---- shapes: dims known now or computed by the graph ---- */

typedef struct dimlist {
  int n;
  int64_t v[MAX_LIST];
  int id[MAX_LIST];  /* >= 0: a 0-D int64 graph value instead of v */
  int sym[MAX_LIST]; /* for those: 1 + the symbol the value equals, or 0 */
} dimlist;

/* Dim `axis` of x: known, or Gather(Shape(x), axis) (*sym: 1 + its symbol, or 0). */
static kiln_status dim_of(call *c, int x, int axis, int64_t *v, int *id, int *sym) {
  const kl_type *t = type_of(c, x);
  *id = -1;
  *sym = t->rank > axis && t->dims[axis].size < 0 ? t->dims[axis].sym + 1 : 0;
  if (t->rank > axis && t->dims[axis].size >= 0) return *v = t->dims[axis].size, KILN_OK;
  int shape, idx = kl_ts_const_i64(c->b, (int64_t[]){axis}, 1, true);
  kiln_status s = idx < 0 ? c->e->code : op1(c, KL_OP_Shape, x, &shape);
  return s != KILN_OK ? s : node_int(c, KL_OP_Gather, 2, (int[]){shape, idx}, "axis", 0, id);
}

static kiln_status dims_add(call *c, dimlist *d, int64_t v, int id, int sym) {
  if (d->n == MAX_LIST) return kl_fail(c->e, KILN_ERR_LIMIT, "a shape of over %d dims", MAX_LIST);
  d->v[d->n] = v;
  d->sym[d->n] = id >= 0 ? sym : 0;
  d->id[d->n++] = id;
  return KILN_OK;
}

/* Dims [from, to) of x appended to d. */
static kiln_status dims_copy(call *c, dimlist *d, int x, int from, int to) {
  for (int k = from; k < to; k++) {
    int64_t v = 0;
    int id, sym;
    kiln_status s = dim_of(c, x, k, &v, &id, &sym);
    if (s == KILN_OK) s = dims_add(c, d, v, id, sym);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

/* A list argument of ints, known or not, appended to d. */
static kiln_status dims_from_arg(call *c, int i, dimlist *d) {
  const kl_tsv *a = c->a[i];
  if (!a || (a->kind != KL_TSV_LIST && a->kind != KL_TSV_TUPLE)) return bad_arg(c, i, "a list of ints");
  for (int k = 0; k < a->n; k++) {
    const kl_tsv *x = &a->items[k];
    int64_t v = 0;
    int id = -1;
    if (x->kind == KL_TSV_INT && x->id < 0) v = x->i;
    else if ((x->kind == KL_TSV_INT || x->kind == KL_TSV_TENSOR) && x->id >= 0 &&
             !const_int(c, x->id, &v))
      id = x->id;
    else if (x->id < 0 || x->kind == KL_TSV_FLOAT) return bad_arg(c, i, "a list of ints");
    kiln_status s = dims_add(c, d, v, id, x->dim_sym);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

/* The 1-D int64 value of d: a constant when every dim is known, else a Concat. */
static kiln_status dims_value(call *c, const dimlist *d, int *out) {
  bool known = true;
  for (int k = 0; k < d->n; k++) known &= d->id[k] < 0;
  if (known) return const_id(c, const_ints(c, d->v, d->n), out);
  int parts[MAX_LIST], n = 0, one = const_ints(c, (int64_t[]){0}, 1);
  if (one < 0) return c->e->code;
  for (int k = 0; k < d->n; k++) {
    kiln_status s;
    int id = d->id[k];
    /* (a size the graph computes in floats, math.floor(size * scale) in F.interpolate:
     * a number of the graph is a 0-D tensor, whose floor stays a float) */
    if (id >= 0 && dtype_of(c, id) != KL_I64 && (s = cast(c, id, KL_I64, &id))) return s;
    if (id >= 0) s = op2(c, KL_OP_Unsqueeze, id, one, &parts[n++]);
    else s = const_id(c, const_ints(c, &d->v[k], 1), &parts[n++]);
    if (s != KILN_OK) return s;
  }
  return node_int(c, KL_OP_Concat, n, parts, "axis", 0, out);
}

/* The size of a -1 in d reshaping x: x's dims over the other entries of d, where
 * every symbol of one is matched by the same symbol in the other; -1 if unknown. */
static int64_t inferred_dim(call *c, int x, const dimlist *d) {
  const kl_type *t = type_of(c, x);
  int64_t num = 1, den = 1;
  bool used[KL_MAX_RANK] = {false};
  if (t->rank < 0) return -1;
  for (int k = 0; k < d->n; k++) {
    if (d->id[k] < 0 && d->v[k] >= 0) den *= d->v[k];
    else if (d->id[k] >= 0) { /* a symbolic entry cancels one input dim of that symbol */
      int j = 0;
      while (j < t->rank && (used[j] || t->dims[j].size >= 0 || !d->sym[k] ||
                             t->dims[j].sym != d->sym[k] - 1))
        j++;
      if (j == t->rank) return -1;
      used[j] = true;
    }
  }
  for (int j = 0; j < t->rank; j++) {
    if (used[j]) continue;
    if (t->dims[j].size < 0) return -1;
    num *= t->dims[j].size;
  }
  return den > 0 && num % den == 0 ? num / den : -1;
}

/* A symbol of its own for a dim that the graph computes (timm's window attention
 * reshapes to [B * nH * nW, 49, C]): the size(x, 0) read from it later then stands for
 * that dim, so that a -1 beside it can be inferred (view(qkv, [B_, N, heads, -1])).
 * Named "?tsN", a name no other symbol of the graph has; -1 (unknown) on failure. */
static int fresh_symbol(call *c) {
  char name[32];
  for (int k = c->g->n_symbols;; k++) {
    snprintf(name, sizeof name, "?ts%d", k);
    bool taken = false;
    for (int i = 0; !taken && i < c->g->n_symbols; i++) taken = strcmp(c->g->symbols[i], name) == 0;
    if (!taken) return kl_graph_symbol(c->g, name);
  }
}

/* What a Reshape of x to d is known to give when its shape is computed by the graph:
 * inference sees no contents, but the rank and the dims known here are certain. */
static void known_dims(call *c, int x, int y, const dimlist *d) {
  kl_type *t = &c->g->values[y].type;
  if (d->n > KL_MAX_RANK || (t->rank >= 0 && t->rank != d->n)) return;
  if (t->rank < 0) {
    t->rank = d->n;
    for (int k = 0; k < d->n; k++) t->dims[k] = (kl_dim){-1, -1};
  }
  for (int k = 0; k < d->n; k++) {
    if (t->dims[k].size >= 0) continue;
    if (d->id[k] < 0 && d->v[k] >= 0) t->dims[k] = (kl_dim){d->v[k], -1};
    else if (d->id[k] >= 0 && d->sym[k]) t->dims[k] = (kl_dim){-1, d->sym[k] - 1};
    else if (d->id[k] >= 0) t->dims[k] = (kl_dim){-1, fresh_symbol(c)};
    else if (d->id[k] < 0 && d->v[k] == -1) t->dims[k] = (kl_dim){inferred_dim(c, x, d), -1};
  }
}

static kiln_status reshape_to(call *c, int x, const dimlist *d, int *y) {
  int shape;
  kiln_status s = dims_value(c, d, &shape);
  if (s != KILN_OK) return s;
  bool zero = false;
  for (int k = 0; k < d->n; k++) zero |= d->id[k] < 0 && d->v[k] == 0;
  int node = begin_node(c, KL_OP_Reshape, 2, (int[]){x, shape}, y);
  s = end_node(c, node, node >= 0 && zero ? kl_node_set_int(c->g, node, "allowzero", 1, c->e)
                                          : KILN_OK);
  if (s == KILN_OK) known_dims(c, x, *y, d);
  return s;
}

static kiln_status norm_axis(call *c, int64_t axis, int rank, int *out) {
  *out = 0;
  if (rank < 0) return rank_unknown(c);
  if (axis < -rank || axis >= rank)
    return kl_fail(c->e, KILN_ERR_SHAPE, "dim %lld is out of range for rank %d",
                   (long long)axis, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return KILN_OK;
}

/* ---- elementwise ---- */

static int category(kl_dtype t) { return t == KL_BOOL ? 0 : kl_dtype_is_float(t) ? 2 : 1; }

/* The dtype both tensors compute in, by torch's rules in short: the higher category
 * (bool < int < float) wins; within one, a dimensioned tensor wins over a 0-D one,
 * else the wider type. */
static kl_dtype promote(kl_dtype a, int ra, kl_dtype b, int rb) {
  if (a == b || b == KL_UNDEFINED) return a;
  if (a == KL_UNDEFINED) return b;
  if (category(a) != category(b)) return category(a) > category(b) ? a : b;
  if ((ra == 0) != (rb == 0)) return ra == 0 ? b : a;
  return kl_dtype_size(a) >= kl_dtype_size(b) ? a : b;
}

/* The dtype a tensor computes in with a Python number: its own, unless the number is
 * of a higher category (int tensor * 0.5 is float32). */
static kl_dtype with_number(kl_dtype t, const kl_tsv *num) {
  if (num->kind == KL_TSV_FLOAT && !kl_dtype_is_float(t)) return KL_F32;
  if (t == KL_BOOL && num->kind != KL_TSV_BOOL) return KL_I64;
  return t;
}

/* Arguments ia and ib as two graph values of one dtype. */
static kiln_status operands(call *c, int ia, int ib, int *a, int *b) {
  const kl_tsv *va = c->a[ia], *vb = c->a[ib];
  if (!va || !vb) return bad_arg(c, va ? ib : ia, "a tensor or number");
  kiln_status s = KILN_OK;
  if (is_number(va) || is_number(vb)) {
    int t = is_number(va) ? ib : ia;
    const kl_tsv *num = is_number(va) ? va : vb;
    int tid;
    if ((s = tensor_arg(c, t, &tid)) != KILN_OK) return s;
    kl_dtype own = dtype_of(c, tid);
    kl_dtype dt = own == KL_UNDEFINED ? KL_F32 : with_number(own, num); /* a guess */
    int k = kl_ts_const_scalar(c->b, dt, number(num));
    if (k < 0) return c->e->code;
    if (own != KL_UNDEFINED && (s = cast(c, tid, dt, &tid)) != KILN_OK) return s;
    *a = is_number(va) ? k : tid;
    *b = is_number(va) ? tid : k;
    return KILN_OK;
  }
  if ((s = tensor_arg(c, ia, a)) || (s = tensor_arg(c, ib, b))) return s;
  kl_dtype dt = promote(dtype_of(c, *a), rank_of(c, *a), dtype_of(c, *b), rank_of(c, *b));
  if (dt == KL_UNDEFINED) return KILN_OK;
  if ((s = cast(c, *a, dt, a)) != KILN_OK) return s;
  return cast(c, *b, dt, b);
}

/* Both arguments are ints known now (literals or one-element int constants). */
static bool known_ints(call *c, int ia, int ib, int64_t *x, int64_t *y, bool *tensor) {
  const kl_tsv *v[2] = {c->a[ia], c->a[ib]};
  int64_t *r[2] = {x, y};
  *tensor = false;
  for (int k = 0; k < 2; k++) {
    if (!v[k]) return false;
    if ((v[k]->kind == KL_TSV_INT || v[k]->kind == KL_TSV_BOOL) && v[k]->id < 0) *r[k] = v[k]->i;
    else if (v[k]->id >= 0 && v[k]->kind != KL_TSV_FLOAT && const_int(c, v[k]->id, r[k]))
      *tensor |= v[k]->kind == KL_TSV_TENSOR;
    else return false;
  }
  return true;
}

/* Shape arithmetic done now: a known int, or a 0-D int64 constant when an operand was
 * a tensor (torch.mul(bsz, CONSTANTS.c0) stays a tensor). */
static kiln_status ret_known_int(call *c, int64_t v, bool tensor) {
  if (!tensor) return ret_int(c, v);
  int id = kl_ts_const_i64(c->b, &v, 1, true);
  return id < 0 ? c->e->code : ret_tensor(c, id);
}

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* add, sub, mul (variant: the op) with alpha for add and sub. */
/* l1 + l2 of two lists (torch.add of lists, as scripted code writes `a + b`): their
 * concatenation. */
static kiln_status list_concat(call *c) {
  const kl_tsv *x = c->a[0], *y = c->a[1];
  if (!y || (y->kind != KL_TSV_LIST && y->kind != KL_TSV_TUPLE))
    return bad_arg(c, 1, "a list (the list added to a list)");
  kiln_status s = kl_ts_list_copied(c->b, (int64_t)x->n + y->n);
  if (s != KILN_OK) return s;
  kl_tsv *items = kl_ts_alloc(c->b, sizeof *items * (size_t)(x->n + y->n + 1));
  if (!items) return c->e->code;
  if (x->n) memcpy(items, x->items, sizeof *items * (size_t)x->n);
  if (y->n) memcpy(items + x->n, y->items, sizeof *items * (size_t)y->n);
  *c->out = (kl_tsv){.kind = KL_TSV_LIST, .items = items, .n = x->n + y->n, .id = -1};
  return KILN_OK;
}

static bool is_list(const kl_tsv *v) {
  return v && (v->kind == KL_TSV_LIST || v->kind == KL_TSV_TUPLE);
}

/* l * n and n * l of a list (torch.mul of a list and an int, as scripted code writes
 * `[0, 1] * n` and `[x] * n`): the list repeated n times (none for n <= 0), n known
 * while building. */
static kiln_status list_repeat(call *c) {
  int li = is_list(c->a[0]) ? 0 : 1;
  const kl_tsv *l = c->a[li];
  int64_t times;
  if (!peek_int(c, 1 - li, 0, &times) || !given(c, 1 - li)) {
    const kl_tsv *t = c->a[1 - li];
    if (t && (t->kind == KL_TSV_INT || t->kind == KL_TSV_TENSOR) && t->id >= 0)
      return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "a list repeated a number of times that the "
                     "graph computes (from a dim whose size the data decides): the length of "
                     "the list it makes would be known only at run time; expected an int "
                     "known when the graph is built");
    return bad_arg(c, 1 - li, "an int (the times a list is repeated)");
  }
  if (times < 0 || l->n == 0) times = 0;
  kiln_status s = kl_ts_list_copied(c->b, times > INT32_MAX / (l->n ? l->n : 1)
                                              ? INT64_MAX / 2 : times * l->n);
  if (s != KILN_OK) return s;
  int m = (int)(times * l->n);
  kl_tsv *items = kl_ts_alloc(c->b, sizeof *items * (size_t)(m + 1));
  if (!items) return c->e->code;
  for (int k = 0; k < m; k++) items[k] = l->items[k % l->n];
  *c->out = (kl_tsv){.kind = KL_TSV_LIST, .items = items, .n = m, .id = -1,
                     .made_in = kl_ts_bodies(c->b) + 1};
  return KILN_OK;
}

/* Arithmetic on two numbers known while building, one of them a float (Python's float
 * arithmetic, as scripted code does it on sizes: 1. / float(E)): *done when so. */
static kiln_status known_float_op(call *c, kl_op op, bool *done) {
  const kl_tsv *a = c->a[0], *b = c->a[1];
  *done = is_number(a) && is_number(b) && (a->kind == KL_TSV_FLOAT || b->kind == KL_TSV_FLOAT) &&
          !given(c, 2);
  if (!*done) return KILN_OK;
  double x = number(a), y = number(b);
  if (op == KL_OP_Div && y == 0)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "float division by zero (ZeroDivisionError)");
  double r = op == KL_OP_Add ? x + y : op == KL_OP_Sub ? x - y : op == KL_OP_Mul ? x * y : x / y;
  *c->out = (kl_tsv){.kind = KL_TSV_FLOAT, .f = r, .id = -1};
  return KILN_OK;
}

static kiln_status lower_arith(call *c) {
  kl_op op = (kl_op)c->variant;
  if (op == KL_OP_Add && is_list(c->a[0])) return list_concat(c);
  if (op == KL_OP_Mul && (is_list(c->a[0]) || is_list(c->a[1]))) return list_repeat(c);
  bool done;
  kiln_status fs = known_float_op(c, op, &done);
  if (done) return fs;
  int64_t x, y, alpha_i = 1;
  bool tensor;
  double alpha = 1;
  kiln_status s = op == KL_OP_Mul ? KILN_OK : float_arg(c, 2, 1, &alpha);
  if (s != KILN_OK) return s;
  if (known_ints(c, 0, 1, &x, &y, &tensor) && alpha == floor(alpha) &&
      alpha >= -9223372036854775808.0 && alpha < 9223372036854775808.0) {
    alpha_i = (int64_t)alpha;
    int64_t r, t;
    bool overflow = op == KL_OP_Mul ? __builtin_mul_overflow(x, y, &r)
                    : __builtin_mul_overflow(alpha_i, y, &t) ||
                        (op == KL_OP_Add ? __builtin_add_overflow(x, t, &r)
                                         : __builtin_sub_overflow(x, t, &r));
    if (overflow)
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "integer arithmetic on %" PRId64
                     " and %" PRId64 " overflows 64 bits", x, y);
    return ret_known_int(c, r, tensor);
  }
  int a, b, y_id;
  if ((s = operands(c, 0, 1, &a, &b)) != KILN_OK) return s;
  if (alpha != 1) {
    kl_dtype dt = dtype_of(c, b);
    int k = kl_ts_const_scalar(c->b, dt == KL_UNDEFINED ? KL_F32 : dt, alpha);
    if (k < 0 || (s = op2(c, KL_OP_Mul, b, k, &b)) != KILN_OK) return c->e->code;
  }
  if ((s = op2(c, op, a, b, &y_id)) != KILN_OK) return s;
  return ret_tensor(c, y_id);
}

/* rsub(self, other, alpha) = other - alpha * self */
static kiln_status lower_rsub(call *c) {
  const kl_tsv *self = c->a[0];
  c->a[0] = c->a[1];
  c->a[1] = self;
  c->variant = KL_OP_Sub;
  return lower_arith(c);
}

/* trunc(x) = x - fmod(x, 1) for floats; ONNX has no Trunc. */
static kiln_status trunc_float(call *c, int x, int *y) {
  int one = kl_ts_const_scalar(c->b, dtype_of(c, x), 1), frac;
  if (one < 0) return c->e->code;
  int node = begin_node(c, KL_OP_Mod, 2, (int[]){x, one}, &frac);
  kiln_status s = end_node(c, node, node < 0 ? KILN_OK : kl_node_set_int(c->g, node, "fmod", 1, c->e));
  return s != KILN_OK ? s : op2(c, KL_OP_Sub, x, frac, y);
}

/* div(self, other, rounding_mode=None|"trunc"|"floor"), floor_divide (variant 1) */
static kiln_status lower_div(call *c) {
  bool done;
  kiln_status fs = c->variant ? KILN_OK : known_float_op(c, KL_OP_Div, &done);
  if (!c->variant && done) return fs;
  const char *mode = c->variant ? "floor" : NULL;
  kiln_status s = c->variant ? KILN_OK : str_arg(c, 2, NULL, &mode);
  int64_t x, y;
  bool tensor;
  if (s != KILN_OK) return s;
  if (mode && strcmp(mode, "trunc") != 0 && strcmp(mode, "floor") != 0)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "rounding_mode '%s'", mode);
  if (mode && known_ints(c, 0, 1, &x, &y, &tensor) && y != 0)
    return ret_known_int(c, *mode == 't' ? x / y : floor_div(x, y), tensor);
  int a, b, q;
  if ((s = operands(c, 0, 1, &a, &b)) != KILN_OK) return s;
  kl_dtype dt = dtype_of(c, a);
  bool is_int = dt != KL_UNDEFINED && !kl_dtype_is_float(dt);
  if (is_int && (!mode || *mode == 'f')) { /* true or floor division of ints: in floats */
    kl_dtype f = mode ? KL_F64 : KL_F32;
    if ((s = cast(c, a, f, &a)) || (s = cast(c, b, f, &b))) return s;
  }
  if ((s = op2(c, KL_OP_Div, a, b, &q)) != KILN_OK) return s;
  if (mode && *mode == 'f' && (s = op1(c, KL_OP_Floor, q, &q)) != KILN_OK) return s;
  if (mode && *mode == 't' && !is_int && (s = trunc_float(c, q, &q)) != KILN_OK) return s;
  if (is_int && mode && (s = cast(c, q, dt, &q)) != KILN_OK) return s;
  return ret_tensor(c, q);
}

/* pow of two numbers known while building (C // num_heads) ** -0.5, as Python has it:
 * an int for ints and an exponent >= 0, else a float. */
static kiln_status known_pow(call *c) {
  const kl_tsv *a = c->a[0], *b = c->a[1];
  if (a->kind == KL_TSV_FLOAT || b->kind == KL_TSV_FLOAT || b->i < 0) {
    double x = number(a), y = number(b);
    if (x == 0 && y < 0)
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "0 to a negative power (ZeroDivisionError)");
    return *c->out = (kl_tsv){.kind = KL_TSV_FLOAT, .f = pow(x, y), .id = -1}, KILN_OK;
  }
  int64_t r = 1;
  for (int64_t k = 0; k < b->i; k++)
    if (__builtin_mul_overflow(r, a->i, &r))
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%" PRId64 " ** %" PRId64 " overflows 64 "
                     "bits", a->i, b->i);
    else if (r == 0 || r == 1)
      break; /* (0 and 1 stay; -1 flips, below) */
  if (r == 1 && a->i == -1 && b->i % 2) r = -1;
  return ret_int(c, r);
}

static kiln_status lower_pow(call *c) {
  int a, b, y;
  if (is_number(c->a[0]) && is_number(c->a[1])) return known_pow(c);
  kiln_status s = operands(c, 0, 1, &a, &b);
  if (s == KILN_OK) s = op2(c, KL_OP_Pow, a, b, &y);
  return s != KILN_OK ? s : ret_tensor(c, y);
}

/* floor / ceil of a Python number (math.floor, math.ceil in scripted code): an int,
 * known while building for a known number, else a 0-D int64 of the graph */
static kiln_status round_number(call *c) {
  const kl_tsv *a = c->a[0];
  kl_op op = (kl_op)c->variant;
  if (is_number(a)) {
    double v = op == KL_OP_Floor ? floor(number(a)) : ceil(number(a));
    if (a->kind != KL_TSV_FLOAT) return ret_int(c, a->i);
    if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0))
      return bad_arg(c, 0, "a number whose floor or ceil fits in a 64-bit int");
    return ret_int(c, (int64_t)v);
  }
  int x, y;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s && a->kind == KL_TSV_FLOAT) s = op1(c, op, x, &x);
  if (!s) s = cast(c, x, KL_I64, &y);
  if (s) return s;
  *c->out = (kl_tsv){.kind = KL_TSV_INT, .id = y};
  return KILN_OK;
}

/* torch computes the transcendental ops (sqrt, exp, log, sigmoid, ...) of an integer or
 * bool tensor in float32 (RAFT scales by torch.sqrt of a channel count): x cast so. */
static kiln_status float_of_int(call *c, kl_op op, int x, int *y) {
  static const kl_op floats[] = {KL_OP_Sigmoid, KL_OP_Tanh, KL_OP_Exp, KL_OP_Log, KL_OP_Sqrt,
                                 KL_OP_Erf, KL_OP_Sin, KL_OP_Cos, KL_OP_Reciprocal};
  kl_dtype dt = dtype_of(c, x);
  *y = x;
  if (dt == KL_UNDEFINED || kl_dtype_is_float(dt)) return KILN_OK;
  for (size_t k = 0; k < sizeof floats / sizeof floats[0]; k++)
    if (floats[k] == op) return cast(c, x, KL_F32, y);
  return KILN_OK;
}

/* relu, sigmoid, exp, ... (variant: the op); sqrt of a number known while building is
 * one too (math.sqrt, as scripted code scales by it) */
static kiln_status lower_unary(call *c) {
  int x, y;
  if ((kl_op)c->variant == KL_OP_Sqrt && is_number(c->a[0])) {
    *c->out = (kl_tsv){.kind = KL_TSV_FLOAT, .f = sqrt(number(c->a[0])), .id = -1};
    return KILN_OK;
  }
  if ((kl_op)c->variant == KL_OP_Neg && is_number(c->a[0])) { /* -n of a size: -x.size(1) */
    const kl_tsv *a = c->a[0];
    if (a->kind == KL_TSV_FLOAT) return *c->out = (kl_tsv){.kind = KL_TSV_FLOAT, .f = -a->f,
                                                           .id = -1}, KILN_OK;
    if (a->i == INT64_MIN)
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "-(%" PRId64 ") overflows 64 bits", a->i);
    return ret_int(c, -a->i);
  }
  bool rounding = (kl_op)c->variant == KL_OP_Floor || (kl_op)c->variant == KL_OP_Ceil;
  if (rounding && c->a[0] && c->a[0]->kind != KL_TSV_TENSOR) return round_number(c);
  kiln_status s = tensor_arg(c, 0, &x);
  if (s == KILN_OK) s = float_of_int(c, (kl_op)c->variant, x, &x);
  if (s == KILN_OK) s = op1(c, (kl_op)c->variant, x, &y);
  return s != KILN_OK ? s : ret_tensor(c, y);
}

/* log2(x) of a tensor (an integer one as float32, as torch promotes it). Of a
 * constant: C's log2 of each element while building, exact at powers of two as torch's
 * is (torchvision's poolers take int() of -log2 of a feature map's scale, 0.0625, where
 * Log(x) / ln 2 in float32 could fall a rounding short of 4). Else Log(x) * (1 / ln 2),
 * within a few roundings of torch's. */
static kiln_status lower_log2(call *c) {
  int x, y;
  kiln_status s = tensor_arg(c, 0, &x);
  if (s != KILN_OK) return s;
  kl_dtype dt = dtype_of(c, x);
  if (dt == KL_UNDEFINED)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "log2 of a tensor of unknown dtype");
  if (!kl_dtype_is_float(dt) && (s = cast(c, x, dt = KL_F32, &x)) != KILN_OK) return s;
  const kl_value *v = &c->g->values[x];
  int64_t n;
  if (v->kind == KL_VALUE_CONST && kl_type_numel(&v->type, &n)) {
    size_t bytes = (size_t)n * kl_dtype_size(dt);
    void *data = malloc(bytes ? bytes : 1);
    if (!data) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int64_t i = 0; i < n; i++)
      kl_store_f64(data, dt, (size_t)i, log2(kl_load_f64(v->data, dt, (size_t)i)));
    int64_t dims[KL_MAX_RANK];
    for (int k = 0; k < v->type.rank; k++) dims[k] = v->type.dims[k].size;
    if ((y = kl_ts_const_data(c->b, dt, v->type.rank, dims, data, bytes)) < 0) return c->e->code;
    return ret_tensor(c, y);
  }
  int k = kl_ts_const_scalar(c->b, dt, 1.0 / log(2.0));
  if (k < 0) return c->e->code;
  if ((s = op1(c, KL_OP_Log, x, &y)) != KILN_OK || (s = op2(c, KL_OP_Mul, y, k, &y)) != KILN_OK)
    return s;
  return ret_tensor(c, y);
}

static kiln_status lower_rsqrt(call *c) {
  int x, y;
  kiln_status s = tensor_arg(c, 0, &x);
  if (s == KILN_OK) s = float_of_int(c, KL_OP_Sqrt, x, &x);
  if (s == KILN_OK) s = op1(c, KL_OP_Sqrt, x, &y);
  if (s == KILN_OK) s = op1(c, KL_OP_Reciprocal, y, &y);
  return s != KILN_OK ? s : ret_tensor(c, y);
}

/* silu(x) = x * sigmoid(x), the form fuse_act recognises and ONNX exports write. */
static kiln_status lower_silu(call *c) {
  int x, sig, y;
  kiln_status s = tensor_arg(c, 0, &x);
  if (s == KILN_OK) s = op1(c, KL_OP_Sigmoid, x, &sig);
  if (s == KILN_OK) s = op2(c, KL_OP_Mul, x, sig, &y);
  return s != KILN_OK ? s : ret_tensor(c, y);
}

static kiln_status lower_gelu(call *c) {
  int x, y;
  const char *approx;
  kiln_status s = tensor_arg(c, 0, &x);
  if (s == KILN_OK) s = str_arg(c, 1, "none", &approx);
  if (s != KILN_OK) return s;
  int node = begin_node(c, KL_OP_Gelu, 1, &x, &y);
  s = end_node(c, node, node < 0 ? KILN_OK : kl_node_set_string(c->g, node, "approximate", approx, c->e));
  return s != KILN_OK ? s : ret_tensor(c, y);
}

/* An activation with float attributes: names[k] gets vals[k]. */
static kiln_status act_attrs(call *c, kl_op op, int x, int n, const char *const *names,
                             const double *vals) {
  int y, node = begin_node(c, op, 1, &x, &y);
  kiln_status s = KILN_OK;
  for (int k = 0; node >= 0 && s == KILN_OK && k < n; k++)
    s = kl_node_set_float(c->g, node, names[k], (float)vals[k], c->e);
  s = end_node(c, node, s);
  return s != KILN_OK ? s : ret_tensor(c, y);
}

static kiln_status lower_hardsigmoid(call *c) {
  int x;
  kiln_status s = tensor_arg(c, 0, &x);
  return s ? s : act_attrs(c, KL_OP_HardSigmoid, x, 2, (const char *[]){"alpha", "beta"},
                            (double[]){1.0 / 6, 0.5});
}

static kiln_status lower_leaky_relu(call *c) {
  int x;
  double slope;
  kiln_status s = tensor_arg(c, 0, &x);
  if (s == KILN_OK) s = float_arg(c, 1, 0.01, &slope);
  return s ? s : act_attrs(c, KL_OP_LeakyRelu, x, 1, (const char *[]){"alpha"}, &slope);
}

static kiln_status lower_elu(call *c) {
  int x;
  double alpha, scale, input_scale;
  kiln_status s = tensor_arg(c, 0, &x);
  if (s == KILN_OK) s = float_arg(c, 1, 1, &alpha);
  if (s == KILN_OK) s = float_arg(c, 2, 1, &scale);
  if (s == KILN_OK) s = float_arg(c, 3, 1, &input_scale);
  if (s == KILN_OK && (scale != 1 || input_scale != 1))
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "elu with scale or input_scale other than 1");
  return s ? s : act_attrs(c, KL_OP_Elu, x, 1, (const char *[]){"alpha"}, &alpha);
}

/* softplus(x, beta, threshold) = softplus(beta x) / beta; past the threshold torch
 * returns x, which softplus equals there to float precision. */
static kiln_status lower_softplus(call *c) {
  int x, y;
  double beta;
  kiln_status s = tensor_arg(c, 0, &x);
  if (s == KILN_OK) s = float_arg(c, 1, 1, &beta);
  if (s != KILN_OK) return s;
  if (beta == 1) {
    if ((s = op1(c, KL_OP_Softplus, x, &y)) != KILN_OK) return s;
    return ret_tensor(c, y);
  }
  int k = kl_ts_const_scalar(c->b, dtype_of(c, x), beta);
  if (k < 0) return c->e->code;
  if ((s = op2(c, KL_OP_Mul, x, k, &y)) || (s = op1(c, KL_OP_Softplus, y, &y)) ||
      (s = op2(c, KL_OP_Div, y, k, &y)))
    return s;
  return ret_tensor(c, y);
}

/* The forms of Clip: for the lower and upper bound, the argument that gives it (-1:
 * none) and its default (NAN: absent). */
static const struct clip_form {
  int arg[2];
  double dflt[2];
} clip_forms[] = {
    {{1, 2}, {NAN, NAN}}, /* clamp(self, min, max) */
    {{1, 2}, {-1, 1}},    /* hardtanh(self, min_val, max_val) */
    {{-1, -1}, {0, 6}},   /* relu6(self) */
    {{1, -1}, {NAN, NAN}}, /* clamp_min(self, min) */
    {{-1, 1}, {NAN, NAN}}, /* clamp_max(self, max) */
};

/* Clip(x, lo, hi) with bounds of x's dtype; absent bounds stay absent. */
static kiln_status lower_clip(call *c) {
  const struct clip_form *f = &clip_forms[c->variant];
  int x, in[3] = {0, KL_ABSENT, KL_ABSENT}, y;
  kiln_status s = tensor_arg(c, 0, &x);
  in[0] = x;
  for (int k = 0; !s && k < 2; k++) {
    double v = f->dflt[k];
    if (f->arg[k] >= 0 && (s = float_arg(c, f->arg[k], v, &v))) break;
    if (isnan(v)) continue;
    kl_dtype dt = dtype_of(c, x);
    if ((in[1 + k] = kl_ts_const_scalar(c->b, dt == KL_UNDEFINED ? KL_F32 : dt, v)) < 0)
      return c->e->code;
  }
  if (!s) s = op_node(c, KL_OP_Clip, 3, in, &y);
  return s ? s : ret_tensor(c, y);
}

/* Values that inference leaves alone: dropout and friends in eval mode, contiguous,
 * clone, detach. */
static kiln_status lower_passthrough(call *c) {
  int x;
  kiln_status s = tensor_arg(c, 0, &x);
  bool train = false;
  if (s == KILN_OK && c->variant) s = bool_arg(c, 2, false, &train);
  if (s == KILN_OK && train)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "dropout in training mode: call model.eval() "
                   "before torch.jit.trace");
  return s != KILN_OK ? s : ret_tensor(c, x);
}

/* ---- convolution, normalization, linear ---- */

typedef struct conv_geom {
  int n; /* spatial dims */
  int64_t stride[KL_MAX_RANK], pad[2 * KL_MAX_RANK], dil[KL_MAX_RANK], out_pad[KL_MAX_RANK];
  int64_t groups;
  bool transposed;
} conv_geom;

static kiln_status set_conv_attrs(call *c, int node, const conv_geom *g) {
  kiln_status s = kl_node_set_ints(c->g, node, "strides", g->stride, g->n, c->e);
  if (!s) s = kl_node_set_ints(c->g, node, "pads", g->pad, 2 * g->n, c->e);
  if (!s) s = kl_node_set_ints(c->g, node, "dilations", g->dil, g->n, c->e);
  if (!s) s = kl_node_set_int(c->g, node, "group", g->groups, c->e);
  if (!s && g->transposed) s = kl_node_set_ints(c->g, node, "output_padding", g->out_pad, g->n, c->e);
  return s;
}

static kiln_status emit_conv(call *c, int x, int w, int bias, const conv_geom *g) {
  int y, in[3] = {x, w, bias};
  int node = begin_node(c, g->transposed ? KL_OP_ConvTranspose : KL_OP_Conv,
                        bias == KL_ABSENT ? 2 : 3, in, &y);
  kiln_status s = end_node(c, node, node < 0 ? KILN_OK : set_conv_attrs(c, node, g));
  return s != KILN_OK ? s : ret_tensor(c, y);
}

/* Argument i as g->n ints (a single int repeated), dflt when absent or []; i < 0
 * means the form has no such argument. */
static kiln_status spatial_ints(call *c, int i, conv_geom *g, int64_t dflt, int64_t *v,
                                const char *what) {
  int n = 0;
  kiln_status s = i >= 0 ? ints_arg(c, i, g->n, v, &n) : KILN_OK;
  if (s != KILN_OK) return s;
  if (n && n != g->n) return bad_arg(c, i, what);
  for (int k = 0; !n && k < g->n; k++) v[k] = dflt;
  return KILN_OK;
}

/* Stride, padding (torch pads both sides alike) and dilation from arguments is, ip, id. */
static kiln_status conv_lists(call *c, int is, int ip, int id, conv_geom *g) {
  int64_t pad[KL_MAX_RANK];
  kiln_status s = spatial_ints(c, is, g, 1, g->stride, "one stride per spatial dim");
  if (!s) s = spatial_ints(c, id, g, 1, g->dil, "one dilation per spatial dim");
  if (!s) s = spatial_ints(c, ip, g, 0, pad, "one padding per spatial dim");
  for (int k = 0; !s && k < g->n; k++) g->pad[k] = g->pad[k + g->n] = pad[k];
  return s;
}

static kiln_status conv_rank(call *c, int w, conv_geom *g) {
  int r = rank_of(c, w);
  if (r < 3 || r > KL_MAX_RANK)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "a convolution weight of rank %d", r);
  g->n = r - 2;
  return KILN_OK;
}

/* _convolution(input, weight, bias, stride, padding, dilation, transposed,
 *              output_padding, groups, benchmark, deterministic, cudnn_enabled[,
 *              allow_tf32]) */
static kiln_status lower_convolution(call *c) {
  int x, w, bias, n;
  conv_geom g = {0};
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = tensor_arg(c, 1, &w);
  if (!s) s = opt_tensor_arg(c, 2, &bias);
  if (!s) s = conv_rank(c, w, &g);
  if (!s) s = conv_lists(c, 3, 4, 5, &g);
  if (!s) s = bool_arg(c, 6, false, &g.transposed);
  if (!s) s = ints_arg(c, 7, g.n, g.out_pad, &n);
  if (!s) s = int_arg(c, 8, 1, &g.groups);
  return s ? s : emit_conv(c, x, w, bias, &g);
}

/* padding="same": total dilation*(k-1) per dim, the odd one at the end, as torch does */
static kiln_status same_pads(call *c, int w, conv_geom *g) {
  const kl_type *t = type_of(c, w);
  for (int k = 0; k < g->n; k++) {
    int64_t kernel = t->dims[k + 2].size;
    if (kernel < 0) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "padding='same' with a weight "
                                   "of unknown size");
    int64_t total = g->dil[k] * (kernel - 1);
    g->pad[k] = total / 2;
    g->pad[k + g->n] = total - total / 2;
  }
  return KILN_OK;
}

/* conv1d/2d/3d(input, weight, bias, stride, padding, dilation, groups), and
 * _convolution_mode, the form of padding="same"/"valid" */
static kiln_status lower_conv(call *c) {
  int x, w, bias;
  conv_geom g = {0};
  bool str_pad = given(c, 4) && c->a[4]->kind == KL_TSV_STR;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = tensor_arg(c, 1, &w);
  if (!s) s = opt_tensor_arg(c, 2, &bias);
  if (!s) s = conv_rank(c, w, &g);
  if (!s) s = conv_lists(c, 3, str_pad ? -1 : 4, 5, &g);
  if (!s) s = int_arg(c, 6, 1, &g.groups);
  if (!s && str_pad && strcmp(c->a[4]->s, "same") == 0) s = same_pads(c, w, &g);
  else if (!s && str_pad && strcmp(c->a[4]->s, "valid") != 0)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "padding '%s'", c->a[4]->s);
  return s ? s : emit_conv(c, x, w, bias, &g);
}

/* conv_transpose1d/2d/3d(input, weight, bias, stride, padding, output_padding, groups,
 * dilation) */
static kiln_status lower_conv_transpose(call *c) {
  int x, w, bias, n;
  conv_geom g = {.transposed = true};
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = tensor_arg(c, 1, &w);
  if (!s) s = opt_tensor_arg(c, 2, &bias);
  if (!s) s = conv_rank(c, w, &g);
  if (!s) s = conv_lists(c, 3, 4, 7, &g);
  if (!s) s = ints_arg(c, 5, g.n, g.out_pad, &n);
  if (!s) s = int_arg(c, 6, 1, &g.groups);
  return s ? s : emit_conv(c, x, w, bias, &g);
}

/* A constant of `count` elements of value v, dtype like x's (float32 if unknown). */
static int filled(call *c, int like, int64_t count, double v) {
  kl_dtype dt = dtype_of(c, like);
  if (dt == KL_UNDEFINED) dt = KL_F32;
  size_t size = kl_dtype_size(dt), bytes;
  if (count < 0 || kl_mul_overflow_size((size_t)count, size, &bytes) ||
      bytes > (uint64_t)kl_ts_max_bytes(c->b))
    return kl_fail(c->e, KILN_ERR_LIMIT, "a constant of %lld elements (the default weight or "
                   "bias of a normalization) is over the limit of %lld bytes a tensor may "
                   "take", (long long)count, (long long)kl_ts_max_bytes(c->b)), -1;
  void *data = malloc(bytes ? bytes : 1);
  if (!data) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory"), -1;
  for (int64_t k = 0; k < count; k++) kl_store_f64(data, dt, (size_t)k, v);
  return kl_ts_const_data(c->b, dt, 1, &count, data, bytes);
}

static int64_t numel_of(call *c, int id) {
  int64_t n;
  return kl_type_numel(type_of(c, id), &n) ? n : -1;
}

/* batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps,
 * cudnn_enabled) */
static kiln_status lower_batch_norm(call *c) {
  int x, in[5], y;
  bool training;
  double eps;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = bool_arg(c, 5, false, &training);
  if (!s) s = float_arg(c, 7, 1e-5, &eps);
  if (s) return s;
  bool running = given(c, 3) && given(c, 4);
  if (training && running)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "batch_norm in training mode with running "
                   "statistics (the module was traced in train()): call model.eval() before "
                   "torch.jit.trace");
  if (!training && !running)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "batch_norm in eval mode without running "
                   "statistics");
  /* training without running statistics normalizes with the batch's own, also in eval
   * mode: BatchNorm with track_running_stats=False, timm's NFNets standardizing their
   * weights (ScaledStdConv2d); BatchNormalization training_mode=1, whose mean and var
   * inputs then only feed its running outputs, which nothing reads */
  int64_t ch = -1;
  if (running) {
    if ((s = tensor_arg(c, 3, &in[3])) || (s = tensor_arg(c, 4, &in[4]))) return s;
    ch = numel_of(c, in[3]);
  } else {
    const kl_type *t = type_of(c, x);
    ch = t->rank >= 2 ? t->dims[1].size : t->rank == 1 ? 1 : -1;
    if (ch < 0)
      return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "batch_norm with batch statistics of an "
                     "input whose channel count (dim 1) is not known when the graph is built");
    if ((in[3] = filled(c, x, ch, 0)) < 0 || (in[4] = filled(c, x, ch, 1)) < 0)
      return c->e->code;
  }
  in[0] = x;
  if (given(c, 1) ? (s = tensor_arg(c, 1, &in[1])) != KILN_OK : (in[1] = filled(c, x, ch, 1)) < 0)
    return c->e->code;
  if (given(c, 2) ? (s = tensor_arg(c, 2, &in[2])) != KILN_OK : (in[2] = filled(c, x, ch, 0)) < 0)
    return c->e->code;
  int node = begin_node(c, KL_OP_BatchNormalization, 5, in, &y);
  s = node < 0 ? KILN_OK : kl_node_set_float(c->g, node, "epsilon", (float)eps, c->e);
  if (!s && node >= 0 && training) s = kl_node_set_int(c->g, node, "training_mode", 1, c->e);
  s = end_node(c, node, s);
  return s ? s : ret_tensor(c, y);
}

/* layer_norm(input, normalized_shape, weight, bias, eps, cudnn_enable) */
static kiln_status lower_layer_norm(call *c) {
  int x, in[3] = {0, 0, KL_ABSENT}, y, n;
  int64_t shape[MAX_LIST], count = 1;
  double eps;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = ints_arg(c, 1, 0, shape, &n);
  if (!s) s = float_arg(c, 4, 1e-5, &eps);
  if (!s) s = opt_tensor_arg(c, 3, &in[2]);
  if (s) return s;
  if (n < 1) return bad_arg(c, 1, "a non-empty list of ints");
  for (int k = 0; k < n; k++)
    if (shape[k] < 0 || kl_mul_overflow_i64(count, shape[k], &count)) return bad_arg(c, 1, "sizes");
  in[0] = x;
  if (given(c, 2) ? (s = tensor_arg(c, 2, &in[1])) != KILN_OK : (in[1] = filled(c, x, count, 1)) < 0)
    return c->e->code;
  int node = begin_node(c, KL_OP_LayerNormalization, in[2] == KL_ABSENT ? 2 : 3, in, &y);
  s = node < 0 ? KILN_OK : kl_node_set_int(c->g, node, "axis", -n, c->e);
  if (node >= 0 && s == KILN_OK) s = kl_node_set_float(c->g, node, "epsilon", (float)eps, c->e);
  s = end_node(c, node, s);
  return s ? s : ret_tensor(c, y);
}

/* group_norm(input, num_groups, weight, bias, eps, cudnn_enabled) */
static kiln_status lower_group_norm(call *c) {
  int x, in[3], y;
  int64_t groups, ch = -1;
  double eps;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = int_arg(c, 1, 1, &groups);
  if (!s) s = float_arg(c, 4, 1e-5, &eps);
  if (s) return s;
  const kl_type *t = type_of(c, x);
  if (t->rank >= 2) ch = t->dims[1].size;
  if ((!given(c, 2) || !given(c, 3)) && ch < 0)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "group_norm without weight or bias on an input "
                   "whose channel count is not known");
  in[0] = x;
  if (given(c, 2) ? (s = tensor_arg(c, 2, &in[1])) != KILN_OK : (in[1] = filled(c, x, ch, 1)) < 0)
    return c->e->code;
  if (given(c, 3) ? (s = tensor_arg(c, 3, &in[2])) != KILN_OK : (in[2] = filled(c, x, ch, 0)) < 0)
    return c->e->code;
  int node = begin_node(c, KL_OP_GroupNormalization, 3, in, &y);
  s = node < 0 ? KILN_OK : kl_node_set_int(c->g, node, "num_groups", groups, c->e);
  if (node >= 0 && s == KILN_OK) s = kl_node_set_float(c->g, node, "epsilon", (float)eps, c->e);
  s = end_node(c, node, s);
  return s ? s : ret_tensor(c, y);
}

static kiln_status transpose_node(call *c, int x, const int64_t *perm, int rank, int *y) {
  int node = begin_node(c, KL_OP_Transpose, 1, &x, y);
  return end_node(c, node, node < 0 ? KILN_OK : kl_node_set_ints(c->g, node, "perm", perm, rank, c->e));
}

/* linear(input, weight, bias): Gemm(transB) for 2-D input, else MatMul by the
 * transposed weight plus the bias, as ONNX exporters write it. */
static kiln_status lower_linear(call *c) {
  int x, w, bias, y, wt;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = tensor_arg(c, 1, &w);
  if (!s) s = opt_tensor_arg(c, 2, &bias);
  if (s) return s;
  if (rank_of(c, x) == 2 && rank_of(c, w) == 2) {
    int in[3] = {x, w, bias};
    int node = begin_node(c, KL_OP_Gemm, bias == KL_ABSENT ? 2 : 3, in, &y);
    s = end_node(c, node, node < 0 ? KILN_OK : kl_node_set_int(c->g, node, "transB", 1, c->e));
    return s ? s : ret_tensor(c, y);
  }
  if (rank_of(c, w) == 2) s = transpose_node(c, w, (int64_t[]){1, 0}, 2, &wt);
  else wt = w; /* a 1-D weight: a dot product */
  if (!s) s = op2(c, KL_OP_MatMul, x, wt, &y);
  if (!s && bias != KL_ABSENT) s = op2(c, KL_OP_Add, y, bias, &y);
  return s ? s : ret_tensor(c, y);
}

static kiln_status lower_matmul(call *c) {
  int a, b, y;
  kiln_status s = tensor_arg(c, 0, &a);
  if (!s) s = tensor_arg(c, 1, &b);
  if (!s) s = op2(c, KL_OP_MatMul, a, b, &y);
  return s ? s : ret_tensor(c, y);
}

/* addmm(self, mat1, mat2, beta, alpha) = beta self + alpha mat1 mat2 */
static kiln_status lower_addmm(call *c) {
  int in[3], y;
  double beta, alpha;
  kiln_status s = tensor_arg(c, 1, &in[0]);
  if (!s) s = tensor_arg(c, 2, &in[1]);
  if (!s) s = tensor_arg(c, 0, &in[2]);
  if (!s) s = float_arg(c, 3, 1, &beta);
  if (!s) s = float_arg(c, 4, 1, &alpha);
  if (s) return s;
  int node = begin_node(c, KL_OP_Gemm, 3, in, &y);
  s = node < 0 ? KILN_OK : kl_node_set_float(c->g, node, "alpha", (float)alpha, c->e);
  if (node >= 0 && !s) s = kl_node_set_float(c->g, node, "beta", (float)beta, c->e);
  s = end_node(c, node, s);
  return s ? s : ret_tensor(c, y);
}

/* y * k for a number k known while building (y itself when k is 1) */
static kiln_status times(call *c, int y, double k, int *out) {
  *out = y;
  if (k == 1) return KILN_OK;
  kl_dtype dt = dtype_of(c, y);
  int kc = kl_ts_const_scalar(c->b, dt == KL_UNDEFINED ? KL_F32 : dt, k);
  return kc < 0 ? c->e->code : op2(c, KL_OP_Mul, y, kc, out);
}

/* baddbmm(self, batch1, batch2, beta, alpha) = beta * self + alpha * (batch1 @ batch2)
 * (F.multi_head_attention_forward adds its mask so) */
static kiln_status lower_baddbmm(call *c) {
  int self, b1, b2, p, q, y;
  double beta, alpha;
  kiln_status s = tensor_arg(c, 0, &self);
  if (!s) s = tensor_arg(c, 1, &b1);
  if (!s) s = tensor_arg(c, 2, &b2);
  if (!s) s = float_arg(c, 3, 1, &beta);
  if (!s) s = float_arg(c, 4, 1, &alpha);
  if (!s) s = op2(c, KL_OP_MatMul, b1, b2, &p);
  if (!s) s = times(c, p, alpha, &p);
  if (!s && beta == 0) return ret_tensor(c, p); /* (torch ignores self then, NaN or not) */
  if (!s) s = times(c, self, beta, &q);
  if (!s) s = op2(c, KL_OP_Add, q, p, &y);
  return s ? s : ret_tensor(c, y);
}

/* is_floating_point(x): known from x's dtype */
static kiln_status lower_is_floating_point(call *c) {
  int x;
  kiln_status s = tensor_arg(c, 0, &x);
  kl_dtype dt = s ? KL_UNDEFINED : dtype_of(c, x);
  if (!s && dt == KL_UNDEFINED) return bad_arg(c, 0, "a tensor of a known dtype");
  if (!s) *c->out = (kl_tsv){.kind = KL_TSV_BOOL, .i = kl_dtype_is_float(dt), .id = -1};
  return s;
}

/* all(x[, dim[, keepdim]]) / any (variant 1): of a list of bools known while building, a
 * bool; of a tensor, the min / max of its elements as int32 along dim (an int or a list
 * of them: all.dim, all.dims) or of every element. */
static kiln_status lower_all_any(call *c) {
  const kl_tsv *l = c->a[0];
  bool any = c->variant == 1;
  if (l && (l->kind == KL_TSV_LIST || l->kind == KL_TSV_TUPLE)) {
    bool r = !any;
    for (int k = 0; k < l->n; k++) {
      const kl_tsv *v = &l->items[k];
      if (!is_number(v)) return bad_arg(c, 0, "a list of bools known when the graph is built");
      if (any ? number(v) != 0 : number(v) == 0) r = any;
    }
    *c->out = (kl_tsv){.kind = KL_TSV_BOOL, .i = r, .id = -1};
    return KILN_OK;
  }
  int x, y, rank = 0, n = 0, in[2];
  int64_t dims[MAX_LIST];
  bool keep;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s && given(c, 1)) s = need_rank(c, x, &rank);
  if (!s) s = ints_arg(c, 1, 1, dims, &n);
  if (!s) s = bool_arg(c, 2, false, &keep);
  if (!s && rank == 0) n = 0; /* (dim 0 or -1 of a 0-D tensor: the tensor) */
  for (int k = 0; k < n && !s; k++) {
    int axis;
    if (!(s = norm_axis(c, dims[k], rank ? rank : 1, &axis))) dims[k] = axis;
  }
  kl_dtype dt = dtype_of(c, x);
  if (!s) s = cast(c, x, KL_BOOL, &x);
  if (!s) s = cast(c, x, KL_I32, &x);
  if (s) return s;
  in[0] = x;
  if (n && (in[1] = const_ints(c, dims, n)) < 0) return c->e->code;
  int node = begin_node(c, any ? KL_OP_ReduceMax : KL_OP_ReduceMin, n ? 2 : 1, in, &y);
  s = end_node(c, node, node < 0 ? KILN_OK : kl_node_set_int(c->g, node, "keepdims", n && keep,
                                                             c->e));
  /* (torch's all and any give uint8 for uint8, bool for any other dtype) */
  if (!s) s = cast(c, y, dt == KL_U8 ? KL_U8 : KL_BOOL, &y);
  return s ? s : ret_tensor(c, y);
}

/* ---- pooling ---- */

/* max_pool{1,2,3}d(self, kernel_size, stride, padding, dilation, ceil_mode) and
 * avg_pool{1,2,3}d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
 * divisor_override); variant: spatial dims, negative for average. */
static kiln_status lower_pool(call *c) {
  bool avg = c->variant < 0;
  int n = avg ? -c->variant : c->variant, x, y, got;
  conv_geom g = {.n = n};
  int64_t kernel[KL_MAX_RANK];
  bool ceil_mode, count_pad = true;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = ints_arg(c, 1, n, kernel, &got);
  if (!s && got != n) return bad_arg(c, 1, "one kernel size per spatial dim");
  if (!s) s = conv_lists(c, 2, 3, avg ? -1 : 4, &g);
  if (s) return s;
  if (!given(c, 2) || (c->a[2]->kind == KL_TSV_LIST && c->a[2]->n == 0))
    memcpy(g.stride, kernel, sizeof kernel); /* stride=[] means the kernel size */
  if ((s = bool_arg(c, avg ? 4 : 5, false, &ceil_mode))) return s;
  if (avg && (s = bool_arg(c, 5, true, &count_pad))) return s;
  if (avg && given(c, 6)) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "divisor_override");
  int node = begin_node(c, avg ? KL_OP_AveragePool : KL_OP_MaxPool, 1, &x, &y);
  if (node < 0) return c->e->code;
  s = kl_node_set_ints(c->g, node, "kernel_shape", kernel, n, c->e);
  if (!s) s = kl_node_set_ints(c->g, node, "strides", g.stride, n, c->e);
  if (!s) s = kl_node_set_ints(c->g, node, "pads", g.pad, 2 * n, c->e);
  if (!s && !avg) s = kl_node_set_ints(c->g, node, "dilations", g.dil, n, c->e);
  if (!s) s = kl_node_set_int(c->g, node, "ceil_mode", ceil_mode, c->e);
  if (!s && avg) s = kl_node_set_int(c->g, node, "count_include_pad", count_pad, c->e);
  s = end_node(c, node, s);
  return s ? s : ret_tensor(c, y);
}

/* The window matrix of adaptive average pooling along one axis: [in, out] (or [out,
 * in] when `left`), column i averaging input cells [floor(i in/out), ceil((i+1) in/out)),
 * as torch's windows are. */
static int window_matrix(call *c, int like, int64_t in, int64_t out, bool left) {
  int64_t count, dims[2] = {left ? out : in, left ? in : out};
  kl_dtype dt = kl_dtype_is_float(dtype_of(c, like)) ? dtype_of(c, like) : KL_F32;
  if (kl_mul_overflow_i64(in, out, &count) || count > (1 << 24))
    return kl_fail(c->e, KILN_ERR_LIMIT, "an adaptive pool from %lld to %lld cells",
                   (long long)in, (long long)out), -1;
  size_t size = kl_dtype_size(dt);
  void *data = calloc((size_t)count, size);
  if (!data) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory"), -1;
  for (int64_t i = 0; i < out; i++) {
    int64_t lo = i * in / out, hi = ((i + 1) * in + out - 1) / out;
    for (int64_t j = lo; j < hi; j++)
      kl_store_f64(data, dt, (size_t)(left ? i * in + j : j * out + i), 1.0 / (double)(hi - lo));
  }
  return kl_ts_const_data(c->b, dt, 2, dims, data, (size_t)count * size);
}

/* Adaptive average pooling over the last one or two dims of known size, any sizes:
 * averaging is linear and separable, so it is x W (last dim) and H x (the one before). */
static kiln_status adaptive_avg_matmul(call *c, int x, int n, const int64_t *in,
                                       const int64_t *out, int *y) {
  if (n > 2)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "a 3-D adaptive pool whose output size does "
                   "not divide the input size");
  int w = window_matrix(c, x, in[n - 1], out[n - 1], false);
  kiln_status s = w < 0 ? c->e->code : op2(c, KL_OP_MatMul, x, w, y);
  if (s || n == 1) return s;
  int h = window_matrix(c, x, in[0], out[0], true);
  return h < 0 ? c->e->code : op2(c, KL_OP_MatMul, h, *y, y);
}

/* adaptive_{avg,max}_pool{1,2,3}d(self, output_size): output 1 is the global pool;
 * sizes that divide the input's are a plain pool; other sizes of an average pool are
 * matrix products. variant: dims, negative for max (which returns the indices too:
 * kiln gives None for them). */
static kiln_status lower_adaptive(call *c) {
  bool max = c->variant < 0;
  int n = max ? -c->variant : c->variant, x, y, got, rank;
  int64_t size[KL_MAX_RANK], kernel[KL_MAX_RANK], in[KL_MAX_RANK];
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = ints_arg(c, 1, n, size, &got);
  if (!s && got != n) return bad_arg(c, 1, "one output size per spatial dim");
  if (!s) s = need_rank(c, x, &rank);
  if (s) return s;
  bool global = true, fits = rank >= n, known = rank >= n;
  for (int k = 0; k < n; k++) {
    in[k] = rank >= n ? type_of(c, x)->dims[rank - n + k].size : -1;
    global &= size[k] == 1;
    known &= in[k] > 0 && size[k] > 0;
    fits &= in[k] > 0 && size[k] > 0 && in[k] % size[k] == 0;
    kernel[k] = fits ? in[k] / size[k] : 0;
  }
  if (global) {
    s = op1(c, max ? KL_OP_GlobalMaxPool : KL_OP_GlobalAveragePool, x, &y);
  } else if (fits) {
    int node = begin_node(c, max ? KL_OP_MaxPool : KL_OP_AveragePool, 1, &x, &y);
    s = node < 0 ? KILN_OK : kl_node_set_ints(c->g, node, "kernel_shape", kernel, n, c->e);
    if (node >= 0 && !s) s = kl_node_set_ints(c->g, node, "strides", kernel, n, c->e);
    s = end_node(c, node, s);
  } else if (known && !max) {
    s = adaptive_avg_matmul(c, x, n, in, size, &y);
  } else {
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "an adaptive %s pool whose output size does "
                   "not divide the input size, or an input of unknown size",
                   max ? "max" : "average");
  }
  if (s || !max) return s ? s : ret_tensor(c, y);
  kl_tsv *items = kl_ts_alloc(c->b, 2 * sizeof *items);
  if (!items) return c->e->code;
  items[0] = (kl_tsv){.kind = KL_TSV_TENSOR, .id = y};
  items[1] = (kl_tsv){.kind = KL_TSV_NONE, .id = -1};
  *c->out = (kl_tsv){.kind = KL_TSV_TUPLE, .items = items, .n = 2, .id = -1};
  return KILN_OK;
}

/* ---- shape and data movement ---- */

/* view(self, size), reshape(self, shape) */
static kiln_status lower_view(call *c) {
  int x, y;
  dimlist d = {0};
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = dims_from_arg(c, 1, &d);
  if (!s) s = reshape_to(c, x, &d, &y);
  return s ? s : ret_tensor(c, y);
}

/* flatten(self, start_dim, end_dim) */
static kiln_status lower_flatten(call *c) {
  int x, y, rank = -1, start, end;
  int64_t a, b;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = int_arg(c, 1, 0, &a);
  if (!s) s = int_arg(c, 2, -1, &b);
  if (s) return s;
  rank = rank_of(c, x);
  if (rank < 0 && b == -1 && a >= 0) { /* leading dims kept with Reshape's 0 */
    if (a == 1) return (s = node_int(c, KL_OP_Flatten, 1, &x, "axis", 1, &y)) ? s : ret_tensor(c, y);
    dimlist d = {0};
    for (int k = 0; k < a && !s; k++) s = dims_add(c, &d, 0, -1, 0);
    if (!s) s = dims_add(c, &d, -1, -1, 0);
    int shape = s ? -1 : const_ints(c, d.v, d.n);
    if (!s && shape < 0) return c->e->code;
    if (!s) s = op2(c, KL_OP_Reshape, x, shape, &y);
    return s ? s : ret_tensor(c, y);
  }
  if ((s = need_rank(c, x, &rank))) return s;
  if (rank == 0) return ret_tensor(c, x); /* flatten of a scalar would be 1-D; rare */
  if ((s = norm_axis(c, a, rank, &start)) || (s = norm_axis(c, b, rank, &end))) return s;
  if (start >= end) return ret_tensor(c, x);
  if (start == 1 && end == rank - 1)
    return (s = node_int(c, KL_OP_Flatten, 1, &x, "axis", 1, &y)) ? s : ret_tensor(c, y);
  dimlist d = {0};
  s = dims_copy(c, &d, x, 0, start);
  if (!s) s = dims_add(c, &d, -1, -1, 0);
  if (!s) s = dims_copy(c, &d, x, end + 1, rank);
  if (!s) s = reshape_to(c, x, &d, &y);
  return s ? s : ret_tensor(c, y);
}

/* unflatten(self, dim, sizes) */
static kiln_status lower_unflatten(call *c) {
  int x, y, rank, dim;
  int64_t a;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = int_arg(c, 1, 0, &a);
  if (!s) s = need_rank(c, x, &rank);
  if (!s) s = norm_axis(c, a, rank, &dim);
  if (s) return s;
  dimlist d = {0};
  s = dims_copy(c, &d, x, 0, dim);
  if (!s) s = dims_from_arg(c, 2, &d);
  if (!s) s = dims_copy(c, &d, x, dim + 1, rank);
  if (!s) s = reshape_to(c, x, &d, &y);
  return s ? s : ret_tensor(c, y);
}

/* permute(self, dims) */
static kiln_status lower_permute(call *c) {
  int x, y, n;
  int64_t perm[MAX_LIST];
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = ints_arg(c, 1, 0, perm, &n);
  if (s) return s;
  if (n > KL_MAX_RANK) return bad_arg(c, 1, "at most 8 dims");
  for (int k = 0; k < n; k++) {
    int d;
    if ((s = norm_axis(c, perm[k], n, &d))) return s;
    perm[k] = d;
  }
  s = transpose_node(c, x, perm, n, &y);
  return s ? s : ret_tensor(c, y);
}

/* transpose(self, dim0, dim1); t(self) (variant 1) */
static kiln_status lower_transpose(call *c) {
  int x, y, rank, d0 = 0, d1 = 1;
  int64_t a = 0, b = 1;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s && !c->variant) s = int_arg(c, 1, 0, &a);
  if (!s && !c->variant) s = int_arg(c, 2, 1, &b);
  if (!s) s = need_rank(c, x, &rank);
  if (s) return s;
  if (c->variant && rank < 2) return ret_tensor(c, x);
  if ((s = norm_axis(c, a, rank, &d0)) || (s = norm_axis(c, b, rank, &d1))) return s;
  if (d0 == d1) return ret_tensor(c, x);
  int64_t perm[KL_MAX_RANK];
  for (int k = 0; k < rank; k++) perm[k] = k;
  perm[d0] = d1;
  perm[d1] = d0;
  s = transpose_node(c, x, perm, rank, &y);
  return s ? s : ret_tensor(c, y);
}

/* Tensors of a list argument, at most cap (MAX_LIST, or MAX_CAT for cat and stack). */
static kiln_status tensor_list_of(call *c, int i, int *ids, int cap, int *n) {
  const kl_tsv *a = c->a[i];
  *n = 0;
  if (!a || (a->kind != KL_TSV_LIST && a->kind != KL_TSV_TUPLE) || a->n < 1 || a->n > cap)
    return bad_arg(c, i, cap == MAX_CAT ? "a list of 1 to 1024 tensors"
                                        : "a list of 1 to 64 tensors");
  for (int k = 0; k < a->n; k++) {
    if (a->items[k].kind != KL_TSV_TENSOR) return bad_arg(c, i, "a list of tensors");
    ids[k] = a->items[k].id;
  }
  *n = a->n;
  return KILN_OK;
}

static kiln_status tensor_list(call *c, int i, int *ids, int *n) {
  return tensor_list_of(c, i, ids, MAX_LIST, n);
}

static void skip_empty_1d(call *c, int *ids, int *n);

/* cat(tensors, dim); stack(tensors, dim) (variant 1) */
/* stack(l, 0) of a list whose length the run decides, appended to once per pass of a
 * Loop (KL_TSV_STACK): the Loop's scan output, its elements stacked already. Along
 * another dim, and cat, are refused. */
static kiln_status cat_stacked(call *c) {
  int64_t dim;
  kiln_status s = int_arg(c, 1, 0, &dim);
  if (s) return s;
  int rank = rank_of(c, c->a[0]->id);
  if (c->variant && (dim == 0 || (rank > 0 && dim == -rank))) return ret_tensor(c, c->a[0]->id);
  return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "%s of a list whose length the run decides "
                 "(appended to in a loop whose count the data decides) along dim %" PRId64
                 ": only stack along dim 0", c->variant ? "stack" : "cat", dim);
}

static kiln_status lower_cat(call *c) {
  int ids[MAX_CAT], n, y;
  int64_t dim;
  if (c->a[0] && c->a[0]->kind == KL_TSV_STACK) return cat_stacked(c);
  kiln_status s = tensor_list_of(c, 0, ids, MAX_CAT, &n);
  if (!s) s = int_arg(c, 1, 0, &dim);
  if (s) return s;
  if (!c->variant) skip_empty_1d(c, ids, &n);
  int axes = c->variant ? const_ints(c, &dim, 1) : 0;
  for (int k = 0; c->variant && k < n && !s; k++)
    s = axes < 0 ? c->e->code : op2(c, KL_OP_Unsqueeze, ids[k], axes, &ids[k]);
  while (!s && n > MAX_LIST) { /* a node has at most 64 inputs: Concats of Concats */
    int m = 0;
    for (int k = 0; !s && k < n; k += MAX_LIST)
      s = node_int(c, KL_OP_Concat, n - k < MAX_LIST ? n - k : MAX_LIST, ids + k, "axis", dim,
                   &ids[m++]);
    n = m;
  }
  if (!s) s = node_int(c, KL_OP_Concat, n, ids, "axis", dim, &y);
  return s ? s : ret_tensor(c, y);
}

/* Split x along axis into the given sizes; outputs to ids. */
static kiln_status split_sizes(call *c, int x, int axis, const int64_t *sizes, int n, int *ids) {
  int split = const_ints(c, sizes, n);
  if (split < 0) return c->e->code;
  int node = kl_ts_node(c->b, KL_OP_Split, 2, (int[]){x, split}, n, ids);
  return end_node(c, node, node < 0 ? KILN_OK : kl_node_set_int(c->g, node, "axis", axis, c->e));
}

/* The known size of dim `a` of x, normalized into *axis. */
static kiln_status known_dim(call *c, int x, int64_t a, int *axis, int64_t *size) {
  int rank;
  kiln_status s = need_rank(c, x, &rank);
  if (!s) s = norm_axis(c, a, rank, axis);
  if (s) return s;
  *size = type_of(c, x)->dims[*axis].size;
  if (*size < 0)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "splits dim %d, whose size is not known when "
                   "the graph is built", *axis);
  return KILN_OK;
}

/* Whether argument i is a list of ints all known while building. */
static bool sizes_known(call *c, int i) {
  const kl_tsv *a = c->a[i];
  int64_t v;
  if (!given(c, i) || a->kind != KL_TSV_LIST) return true; /* (refused by ints_arg) */
  for (int k = 0; k < a->n; k++)
    if (!(a->items[k].kind == KL_TSV_INT && a->items[k].id < 0) &&
        !(a->items[k].id >= 0 && const_int(c, a->items[k].id, &v)))
      return false;
  return true;
}

/* split(x, sizes, dim) where the graph computes some of the sizes (torchvision's RoI
 * heads split the decoded boxes by each image's count of proposals, which NMS decides)
 * or the dim's size: a Slice per part, from the sum of the sizes before it to that plus
 * its own. */
static kiln_status split_computed(call *c, int x, int64_t dim) {
  const kl_tsv *a = c->a[1];
  int axis, rank, ids[MAX_LIST];
  kiln_status s = need_rank(c, x, &rank);
  if (!s) s = norm_axis(c, dim, rank, &axis);
  if (s) return s;
  if (a->n < 1 || a->n > MAX_LIST)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "a split into %d parts (1 to %d)", a->n, MAX_LIST);
  int start = const_ints(c, (int64_t[]){0}, 1), axes = const_ints(c, (int64_t[]){axis}, 1);
  int first = const_ints(c, (int64_t[]){0}, 1);
  if (start < 0 || axes < 0 || first < 0) return c->e->code;
  for (int k = 0; k < a->n; k++) {
    const kl_tsv *v = &a->items[k];
    int size, end;
    if (v->kind == KL_TSV_INT && v->id < 0) {
      if (v->i < 0) return bad_arg(c, 1, "a list of sizes of at least 0");
      if ((size = const_ints(c, &v->i, 1)) < 0) return c->e->code;
    } else if ((v->kind == KL_TSV_INT || v->kind == KL_TSV_TENSOR) && v->id >= 0 &&
               rank_of(c, v->id) == 0 && !kl_dtype_is_float(dtype_of(c, v->id))) {
      if ((s = cast(c, v->id, KL_I64, &size)) || (s = op2(c, KL_OP_Unsqueeze, size, first, &size)))
        return s;
    } else {
      return bad_arg(c, 1, "a list of ints");
    }
    if ((s = op2(c, KL_OP_Add, start, size, &end)) ||
        (s = op_node(c, KL_OP_Slice, 4, (int[]){x, start, end, axes}, &ids[k])))
      return s;
    start = end;
  }
  return ret_list(c, ids, a->n);
}

/* Whether dim a of x is one whose size is not known while building. */
static bool unknown_dim(call *c, int x, int64_t a) {
  const kl_type *t = type_of(c, x);
  return t->rank > 0 && a >= -t->rank && a < t->rank && t->dims[a < 0 ? a + t->rank : a].size < 0;
}

/* chunk(x, chunks, dim) of a dim whose size the graph decides (RAFT chunks the batch of
 * cat([image1, image2]) in two): a Split into `chunks` parts of ceil(size / chunks),
 * the last what is left, as torch's; torch makes fewer parts when the size is too small
 * for as many, which the trace would then have recorded, and its unpacking refuses. */
static kiln_status chunk_unknown(call *c, int x, int64_t dim, int64_t chunks) {
  int ids[MAX_LIST], axis;
  kiln_status s = norm_axis(c, dim, rank_of(c, x), &axis);
  if (s) return s;
  if (chunks < 1 || chunks > MAX_LIST) return bad_arg(c, 1, "a count of chunks from 1 to 64");
  int node = kl_ts_node(c->b, KL_OP_Split, 1, &x, (int)chunks, ids);
  s = node < 0 ? KILN_OK : kl_node_set_int(c->g, node, "axis", axis, c->e);
  if (!s && node >= 0) s = kl_node_set_int(c->g, node, "num_outputs", chunks, c->e);
  if ((s = end_node(c, node, s))) return s;
  return ret_list(c, ids, (int)chunks);
}

/* chunk(self, chunks, dim) (variant 0), split(self, split_size, dim) (variant 1),
 * split_with_sizes (variant 2), unbind(self, dim) (variant 3) */
static kiln_status lower_split(call *c) {
  int x, axis, n = 0, ids[MAX_LIST];
  int64_t size, arg = 1, dim, sizes[MAX_LIST];
  bool list = c->variant == 2 || (c->variant == 1 && given(c, 1) && c->a[1]->kind == KL_TSV_LIST);
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = int_arg(c, c->variant == 3 ? 1 : 2, 0, &dim);
  if (!s && c->variant != 3 && !list) s = int_arg(c, 1, 1, &arg);
  if (!s && list && !sizes_known(c, 1)) return split_computed(c, x, dim);
  if (!s && list) s = ints_arg(c, 1, 0, sizes, &n);
  if (!s && list && rank_of(c, x) >= 0 && !norm_axis(c, dim, rank_of(c, x), &axis) &&
      type_of(c, x)->dims[axis].size < 0)
    return split_computed(c, x, dim);
  if (!s && c->variant == 0 && unknown_dim(c, x, dim)) return chunk_unknown(c, x, dim, arg);
  if (!s) s = known_dim(c, x, dim, &axis, &size);
  if (s) return s;
  if (!list) {
    if (arg < 1) return bad_arg(c, 1, "a positive count or size");
    int64_t each = c->variant == 3 ? 1 : c->variant == 0 ? (size + arg - 1) / arg : arg;
    if (each < 1) each = 1;
    for (int64_t left = size; left > 0 && n < MAX_LIST; left -= each)
      sizes[n++] = left < each ? left : each;
    if (n == MAX_LIST && size > each * MAX_LIST)
      return kl_fail(c->e, KILN_ERR_LIMIT, "a split into more than %d parts", MAX_LIST);
  }
  if (n == 0) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "a split of an empty dim");
  if ((s = split_sizes(c, x, axis, sizes, n, ids))) return s;
  int axes = c->variant == 3 ? const_ints(c, (int64_t[]){axis}, 1) : 0;
  for (int k = 0; c->variant == 3 && k < n && !s; k++)
    s = axes < 0 ? c->e->code : op2(c, KL_OP_Squeeze, ids[k], axes, &ids[k]);
  return s ? s : ret_list(c, ids, n);
}

/* An int argument as a graph value of shape [1], for Slice's lists. */
static kiln_status int_as_list(call *c, int i, int64_t dflt, int *id) {
  const kl_tsv *a = c->a[i];
  if (given(c, i) && a->id >= 0 && a->kind != KL_TSV_FLOAT) {
    int64_t v;
    if (const_int(c, a->id, &v)) return const_id(c, const_ints(c, &v, 1), id);
    int axes = const_ints(c, (int64_t[]){0}, 1), x;
    if (axes < 0) return c->e->code;
    kiln_status s = cast(c, a->id, KL_I64, &x); /* (an int tensor annotated as an int) */
    return s ? s : op2(c, KL_OP_Unsqueeze, x, axes, id);
  }
  int64_t v;
  kiln_status s = int_arg(c, i, dflt, &v);
  return s ? s : const_id(c, const_ints(c, &v, 1), id);
}

/* A bound of a list slice known while building, in *v (dflt when None); a value the
 * graph computes (a size of the batch dim) is refused: the slice's length, and so the
 * list's, would be known only at run time. */
static kiln_status slice_bound(call *c, int i, int64_t dflt, int64_t *v) {
  if (peek_int(c, i, dflt, v)) return KILN_OK;
  const kl_tsv *a = c->a[i];
  if ((a->kind == KL_TSV_INT || a->kind == KL_TSV_TENSOR) && a->id >= 0)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "a list slice whose '%s' the graph computes "
                   "(from a dim whose size the data decides): the length of the list it "
                   "makes would be known only at run time; expected an int known when the "
                   "graph is built", c->params[i]);
  return bad_arg(c, i, "an int or None");
}

/* Python's clamping of slice bound v of a list of n elements for step's sign. */
static int64_t slice_clamp(int64_t v, int64_t n, int64_t step) {
  if (v < 0) v = v < -n ? (step < 0 ? -1 : 0) : v + n;
  else if (v >= n) v = step < 0 ? n - 1 : n;
  return v;
}

/* l[start:end:step] of a list (slice.t(l, start, end, step): the list's own overload,
 * `x.shape[2:]`, `l[::-1]`), with bounds known while building (literals, or sizes of
 * fixed dims and arithmetic on them), as Python slices: negative bounds count from the
 * end, all are clamped to the list, a negative step walks it backwards. */
static kiln_status list_slice(call *c) {
  static const char *const params[] = {"l", "start", "end", "step", NULL};
  const kl_tsv *l = c->a[0];
  int64_t n = l->n, start, end, step;
  c->params = params;
  kiln_status s = slice_bound(c, 3, 1, &step);
  if (s) return s;
  if (step == 0)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "a list slice with a step of 0 (ValueError: "
                   "slice step cannot be zero)");
  if (step == INT64_MIN) step = -INT64_MAX; /* (walks past either end all the same) */
  if ((s = slice_bound(c, 1, step < 0 ? INT64_MAX : 0, &start)) ||
      (s = slice_bound(c, 2, step < 0 ? INT64_MIN : INT64_MAX, &end)))
    return s;
  if ((s = kl_ts_list_copied(c->b, n)) != KILN_OK) return s;
  start = slice_clamp(start, n, step);
  end = slice_clamp(end, n, step);
  int64_t m = step > 0 ? (end > start ? (end - start - 1) / step + 1 : 0)
                       : (start > end ? (start - end - 1) / -step + 1 : 0);
  kl_tsv *items = kl_ts_alloc(c->b, sizeof *items * (size_t)(m + 1));
  if (!items) return c->e->code;
  for (int64_t k = 0; k < m; k++) items[k] = l->items[start + k * step];
  *c->out = (kl_tsv){.kind = KL_TSV_LIST, .items = items, .n = (int)m, .id = -1,
                     .made_in = kl_ts_bodies(c->b) + 1};
  return KILN_OK;
}

/* slice(self, dim, start, end, step); narrow(self, dim, start, length) (variant 1) */
static kiln_status lower_slice(call *c) {
  if (!c->variant && is_list(c->a[0])) return list_slice(c);
  int x, in[5], y;
  int64_t dim, start = 0, end = INT64_MAX, step = 1;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = int_arg(c, 1, 0, &dim);
  if (s) return s;
  bool known_start = peek_int(c, 2, 0, &start);
  bool known_end = c->variant || peek_int(c, 3, INT64_MAX, &end);
  if (!c->variant && (s = int_arg(c, 4, 1, &step))) return s;
  if (!c->variant && known_start && known_end && start == 0 && end == INT64_MAX && step == 1)
    return ret_tensor(c, x); /* x[:] */
  in[0] = x;
  if ((s = int_as_list(c, 2, 0, &in[1]))) return s;
  if (c->variant) {
    int64_t len;
    if ((s = int_arg(c, 3, 0, &len))) return s;
    if (!known_start) return bad_arg(c, 2, "an int known when the graph is built");
    int64_t stop;
    if (__builtin_add_overflow(start, len, &stop))
      return bad_arg(c, 3, "a length whose end (start + length) fits in 64 bits");
    if ((in[2] = const_ints(c, &stop, 1)) < 0) return c->e->code;
  } else if ((s = int_as_list(c, 3, INT64_MAX, &in[2]))) {
    return s;
  }
  if ((in[3] = const_ints(c, &dim, 1)) < 0 || (in[4] = const_ints(c, &step, 1)) < 0)
    return c->e->code;
  if ((s = op_node(c, KL_OP_Slice, 5, in, &y))) return s;
  return ret_tensor(c, y);
}

/* flip(self, dims): one Slice over the dims, each from its last element backwards
 * (start -1, end INT64_MIN, step -1). */
static kiln_status lower_flip(call *c) {
  int x, rank, y;
  int64_t dims[KL_MAX_RANK], starts[KL_MAX_RANK], ends[KL_MAX_RANK], steps[KL_MAX_RANK];
  int n;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = ints_arg(c, 1, 0, dims, &n);
  if (!s) s = need_rank(c, x, &rank);
  if (s) return s;
  for (int k = 0; k < n; k++) {
    if (dims[k] < -rank || dims[k] >= rank)
      return bad_arg(c, 1, "dims within the input's rank");
    for (int j = 0; j < k; j++)
      if ((dims[j] < 0 ? dims[j] + rank : dims[j]) == (dims[k] < 0 ? dims[k] + rank : dims[k]))
        return bad_arg(c, 1, "dims each named once");
    starts[k] = -1, ends[k] = INT64_MIN, steps[k] = -1;
  }
  if (n == 0) return ret_tensor(c, x);
  int in[5] = {x, const_ints(c, starts, n), const_ints(c, ends, n), const_ints(c, dims, n),
               const_ints(c, steps, n)};
  if (in[1] < 0 || in[2] < 0 || in[3] < 0 || in[4] < 0) return c->e->code;
  if ((s = op_node(c, KL_OP_Slice, 5, in, &y))) return s;
  return ret_tensor(c, y);
}

/* Slice of x along axis from start to end (step 1). */
static kiln_status slice_axis(call *c, int x, int64_t axis, int64_t start, int64_t end, int *y) {
  int in[4] = {x, const_ints(c, &start, 1), const_ints(c, &end, 1), const_ints(c, &axis, 1)};
  if (in[1] < 0 || in[2] < 0 || in[3] < 0) return c->e->code;
  return op_node(c, KL_OP_Slice, 4, in, y);
}

/* roll(self, shifts, dims): per dim, the last `shift` elements moved to the front */
static kiln_status lower_roll(call *c) {
  int x, ns, nd, rank;
  int64_t shifts[MAX_LIST], dims[MAX_LIST];
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = ints_arg(c, 1, 0, shifts, &ns);
  if (!s) s = ints_arg(c, 2, 0, dims, &nd);
  if (!s) s = need_rank(c, x, &rank);
  if (s) return s;
  if (nd == 0 || ns != nd)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "roll without one dim per shift");
  for (int k = 0; k < nd; k++) {
    int axis, parts[2];
    if ((s = norm_axis(c, dims[k], rank, &axis))) return s;
    int64_t n = type_of(c, x)->dims[axis].size, shift = shifts[k];
    if (n < 0) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "roll along a dim of unknown size");
    shift = n ? ((shift % n) + n) % n : 0;
    if (shift == 0) continue;
    if ((s = slice_axis(c, x, axis, n - shift, n, &parts[0])) ||
        (s = slice_axis(c, x, axis, 0, n - shift, &parts[1])) ||
        (s = node_int(c, KL_OP_Concat, 2, parts, "axis", axis, &x)))
      return s;
  }
  return ret_tensor(c, x);
}

/* select(self, dim, index): Gather with a scalar index drops the dim */
static kiln_status lower_select(call *c) {
  int x, idx, y;
  int64_t dim, i;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = int_arg(c, 1, 0, &dim);
  if (s) return s;
  if (given(c, 2) && c->a[2]->id >= 0 && c->a[2]->kind != KL_TSV_FLOAT) idx = c->a[2]->id;
  else if ((s = int_arg(c, 2, 0, &i)) || (idx = kl_ts_const_i64(c->b, &i, 1, true)) < 0)
    return s ? s : c->e->code;
  s = node_int(c, KL_OP_Gather, 2, (int[]){x, idx}, "axis", dim, &y);
  return s ? s : ret_tensor(c, y);
}

/* squeeze(self[, dim]); a dim whose size is known not to be 1 stays, as in torch */
static kiln_status lower_squeeze(call *c) {
  int x, y, rank = -1, n = 0, keep = 0;
  int64_t dims[MAX_LIST];
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = ints_arg(c, 1, 0, dims, &n);
  if (s) return s;
  if (!given(c, 1)) return (s = op1(c, KL_OP_Squeeze, x, &y)) ? s : ret_tensor(c, y);
  rank = rank_of(c, x);
  for (int k = 0; k < n; k++) {
    int d;
    if (rank >= 0 && (s = norm_axis(c, dims[k], rank, &d))) return s;
    if (rank >= 0 && type_of(c, x)->dims[d].size > 1) continue;
    dims[keep++] = dims[k];
  }
  if (!keep) return ret_tensor(c, x);
  int axes = const_ints(c, dims, keep);
  if (axes < 0 || (s = op2(c, KL_OP_Squeeze, x, axes, &y))) return s ? s : c->e->code;
  return ret_tensor(c, y);
}

static kiln_status lower_unsqueeze(call *c) {
  int x, y;
  int64_t dim;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = int_arg(c, 1, 0, &dim);
  if (s) return s;
  int axes = const_ints(c, &dim, 1);
  if (axes < 0 || (s = op2(c, KL_OP_Unsqueeze, x, axes, &y))) return s ? s : c->e->code;
  return ret_tensor(c, y);
}

/* What an Expand to d computed by the graph is known to give: torch's expand makes
 * each dim the size asked for (a -1 keeps the input's), so a size read from a symbolic
 * dim (expand(ids, [batch, seq]), transformers' token types) is that symbol, and one
 * the graph computes otherwise a symbol of its own, as reshape_to's. */
static void expand_known_dims(call *c, int y, const dimlist *d) {
  kl_type *t = &c->g->values[y].type;
  if (t->rank != d->n) return;
  for (int k = 0; k < d->n; k++)
    if (t->dims[k].size < 0 && t->dims[k].sym < 0 && d->id[k] >= 0)
      t->dims[k] = (kl_dim){-1, d->sym[k] ? d->sym[k] - 1 : fresh_symbol(c)};
}

/* expand(self, size, implicit): torch's -1 keeps a dim, which Expand's 1 does too */
static kiln_status lower_expand(call *c) {
  int x, y, shape;
  dimlist d = {0};
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = dims_from_arg(c, 1, &d);
  if (s) return s;
  for (int k = 0; k < d.n; k++)
    if (d.id[k] < 0 && d.v[k] == -1) d.v[k] = 1;
  if ((s = dims_value(c, &d, &shape)) || (s = op2(c, KL_OP_Expand, x, shape, &y))) return s;
  expand_known_dims(c, y, &d);
  return ret_tensor(c, y);
}

/* expand_as(self, other) */
static kiln_status lower_expand_as(call *c) {
  int x, other, shape, y;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = tensor_arg(c, 1, &other);
  if (!s) s = op1(c, KL_OP_Shape, other, &shape);
  if (!s) s = op2(c, KL_OP_Expand, x, shape, &y);
  return s ? s : ret_tensor(c, y);
}

/* constant_pad_nd(self, pad, value) (variant 0), pad(self, pad, mode, value) (1),
 * reflection_padNd(self, padding) (2), replication_padNd (3): torch lists (begin, end)
 * from the last dim back, which Pad's axes input takes as they are. */
static kiln_status lower_pad(call *c) {
  static const char *const modes[][2] = {{"constant", "constant"}, {"reflect", "reflect"},
                                         {"replicate", "edge"}, {"circular", "wrap"}};
  int x, in[4], y, n;
  int64_t axes[MAX_LIST / 2];
  dimlist pad = {0}, pads = {0};
  double value;
  const char *mode = c->variant == 2 ? "reflect" : c->variant == 3 ? "replicate" : "constant";
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = dims_from_arg(c, 1, &pad);
  if (!s && c->variant == 1) s = str_arg(c, 2, "constant", &mode);
  if (!s) s = float_arg(c, c->variant == 1 ? 3 : 2, 0, &value);
  if (s) return s;
  size_t m = 0;
  while (m < sizeof modes / sizeof modes[0] && strcmp(modes[m][0], mode) != 0) m++;
  if (m == sizeof modes / sizeof modes[0])
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "padding mode '%s'", mode);
  n = pad.n;
  if (n % 2 || n == 0) return bad_arg(c, 1, "an even number of pads");
  /* all begins, then all ends; pads computed by the graph (timm's conv2d_same pads by
   * sizes) make the pads input a Concat, which Pad reads when it runs */
  for (int k = 0; k < n; k++) {
    int j = k < n / 2 ? 2 * k : 2 * (k - n / 2) + 1;
    if ((s = dims_add(c, &pads, pad.v[j], pad.id[j], pad.sym[j]))) return s;
  }
  for (int k = 0; k < n / 2; k++) axes[k] = -1 - k;
  kl_dtype dt = dtype_of(c, x);
  in[0] = x;
  if ((s = dims_value(c, &pads, &in[1]))) return s;
  if ((in[2] = kl_ts_const_scalar(c->b, dt == KL_UNDEFINED ? KL_F32 : dt, value)) < 0 ||
      (in[3] = const_ints(c, axes, n / 2)) < 0)
    return c->e->code;
  int node = begin_node(c, KL_OP_Pad, 4, in, &y);
  s = end_node(c, node, node < 0 ? KILN_OK : kl_node_set_string(c->g, node, "mode", modes[m][1], c->e));
  kl_type *t = &c->g->values[y].type;
  const kl_type *u = type_of(c, x);
  for (int k = 0; !s && t->rank == u->rank && k < n / 2 && k < t->rank; k++) {
    int d = t->rank - 1 - k; /* what inference cannot see when other pads are not known */
    int64_t size;
    if (t->dims[d].size < 0 && u->dims[d].size >= 0 && pad.id[2 * k] < 0 &&
        pad.id[2 * k + 1] < 0 && !__builtin_add_overflow(u->dims[d].size, pad.v[2 * k], &size) &&
        !__builtin_add_overflow(size, pad.v[2 * k + 1], &size) && size >= 0)
      t->dims[d] = (kl_dim){size, -1};
  }
  return s ? s : ret_tensor(c, y);
}

/* ---- softmax, reductions, lookups ---- */

static kl_dtype scalar_type(int64_t t);

/* x cast to the dtype that argument i names (torch's ScalarType number t), as softmax's
 * and the reductions' dtype arguments do before they compute (transformers calls
 * softmax(x, dim=-1, dtype=torch.float32)). */
static kiln_status cast_to_dtype_arg(call *c, int i, int64_t t, int x, int *y) {
  kl_dtype to = scalar_type(t);
  if (to == KL_UNDEFINED || to == KL_BOOL) return bad_arg(c, i, "a numeric dtype");
  return cast(c, x, to, y);
}

/* softmax / log_softmax (variant: the op) (self, dim, dtype): the dtype casts first */
static kiln_status lower_softmax(call *c) {
  int x, y;
  int64_t dim, dt;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = int_arg(c, 1, -1, &dim);
  if (!s && given(c, 2)) s = int_arg(c, 2, 0, &dt);
  if (!s && given(c, 2)) s = cast_to_dtype_arg(c, 2, dt, x, &x);
  if (s) return s;
  s = node_int(c, (kl_op)c->variant, 1, &x, "axis", dim, &y);
  return s ? s : ret_tensor(c, y);
}

/* sum(l) of a list of numbers known while building (sum.int, sum.float) */
static kiln_status list_sum(call *c) {
  const kl_tsv *l = c->a[0];
  bool floats = false;
  int64_t i = 0;
  double f = 0;
  for (int k = 0; k < l->n; k++) {
    const kl_tsv *v = &l->items[k];
    if (!is_number(v)) return bad_arg(c, 0, "a list of numbers known when the graph is built");
    floats |= v->kind == KL_TSV_FLOAT;
    f += number(v);
    if (v->kind != KL_TSV_FLOAT && __builtin_add_overflow(i, v->i, &i))
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "a sum of a list of ints overflows 64 bits");
  }
  if (given(c, 1)) return bad_arg(c, 1, "absent (the sum of a list)");
  if (floats) return *c->out = (kl_tsv){.kind = KL_TSV_FLOAT, .f = f, .id = -1}, KILN_OK;
  return ret_int(c, i);
}

/* mean/sum/amax (variant: the op) (self, dim, keepdim, dtype) */
static kiln_status lower_reduce(call *c) {
  int x, y, n, in[2];
  int64_t dims[MAX_LIST], dt;
  bool keep;
  if ((kl_op)c->variant == KL_OP_ReduceSum && is_list(c->a[0])) return list_sum(c);
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = ints_arg(c, 1, 0, dims, &n);
  if (!s) s = bool_arg(c, 2, false, &keep);
  if (!s && given(c, 3) && !(s = int_arg(c, 3, 0, &dt))) s = cast_to_dtype_arg(c, 3, dt, x, &x);
  if (s) return s;
  in[0] = x;
  if (n && (in[1] = const_ints(c, dims, n)) < 0) return c->e->code;
  int node = begin_node(c, (kl_op)c->variant, n ? 2 : 1, in, &y);
  s = end_node(c, node, node < 0 ? KILN_OK : kl_node_set_int(c->g, node, "keepdims", keep, c->e));
  return s ? s : ret_tensor(c, y);
}

/* argmax(self, dim=None, keepdim=False), argmin (variant 1): ArgMax/ArgMin along dim,
 * or of the flattened tensor for dim None (a 0-d result; keepdim then keeps every dim
 * as 1). Ties give the first index, as torch's do. */
static kiln_status lower_argmax(call *c) {
  int x, y, rank, axis = 0;
  int64_t dim;
  bool keep;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = need_rank(c, x, &rank);
  if (!s) s = bool_arg(c, 2, false, &keep);
  if (!s && given(c, 1)) s = int_arg(c, 1, 0, &dim);
  if (!s && given(c, 1)) s = norm_axis(c, dim, rank ? rank : 1, &axis);
  if (s) return s;
  bool flat = !given(c, 1) || rank == 0;
  if (flat) {
    int64_t all = -1;
    int shape = const_ints(c, &all, 1);
    if (shape < 0 || (s = op2(c, KL_OP_Reshape, x, shape, &x))) return c->e->code;
    axis = 0;
  }
  kl_op op = c->variant ? KL_OP_ArgMin : KL_OP_ArgMax;
  int node = begin_node(c, op, 1, &x, &y);
  if (node >= 0) s = kl_node_set_int(c->g, node, "axis", axis, c->e);
  if (node >= 0 && !s) s = kl_node_set_int(c->g, node, "keepdims", flat ? 0 : keep, c->e);
  if ((s = end_node(c, node, s))) return s;
  if (flat && keep && rank > 0) { /* torch keeps every dim as 1 */
    int64_t ones[KL_MAX_RANK];
    for (int k = 0; k < rank; k++) ones[k] = 1;
    int shape = const_ints(c, ones, rank);
    if (shape < 0 || (s = op2(c, KL_OP_Reshape, y, shape, &y))) return c->e->code;
  }
  return ret_tensor(c, y);
}

/* len(x): a list's, tuple's or string's length, a tensor's size along dim 0. */
static kiln_status lower_len(call *c) {
  const kl_tsv *a = c->a[0];
  if (a && (a->kind == KL_TSV_LIST || a->kind == KL_TSV_TUPLE)) return ret_int(c, a->n);
  if (a && a->kind == KL_TSV_STR) return ret_int(c, (int64_t)strlen(a->s));
  int x, rank, id, sym;
  int64_t v = 0;
  kiln_status s = a && a->kind == KL_TSV_STACK ? (x = a->id, KILN_OK) : tensor_arg(c, 0, &x);
  if (!s) s = need_rank(c, x, &rank);
  if (!s && rank == 0) return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "len() of a 0-d tensor");
  if (!s) s = dim_of(c, x, 0, &v, &id, &sym);
  if (s) return s;
  *c->out = (kl_tsv){.kind = KL_TSV_INT, .i = v, .id = id, .dim_sym = sym};
  return KILN_OK;
}

/* dim(x): the rank */
static kiln_status lower_dim(call *c) {
  int x, rank;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = need_rank(c, x, &rank);
  return s ? s : ret_int(c, rank);
}

/* a is b, a is not b (variant 1), as scripted code tests Optionals: known when either
 * is None (only None is None). */
static kiln_status lower_is(call *c) {
  const kl_tsv *a = c->a[0], *b = c->a[1];
  bool tensors = a && b && a->kind == KL_TSV_TENSOR && b->kind == KL_TSV_TENSOR;
  if (!a || !b || (a->kind != KL_TSV_NONE && b->kind != KL_TSV_NONE && !tensors))
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "an identity test of two values that are not "
                   "None or tensors");
  /* (two tensors: the same one, as nn.MultiheadAttention asks of query, key and value) */
  bool is = tensors ? a->id == b->id : a->kind == KL_TSV_NONE && b->kind == KL_TSV_NONE;
  *c->out = (kl_tsv){.kind = KL_TSV_BOOL, .i = c->variant ? !is : is, .id = -1};
  return KILN_OK;
}

/* prim::is_nested(x): false, kiln has no nested tensors */
static kiln_status lower_is_nested(call *c) {
  int x;
  kiln_status s = tensor_arg(c, 0, &x);
  if (s == KILN_OK) *c->out = (kl_tsv){.kind = KL_TSV_BOOL, .i = 0, .id = -1};
  return s;
}

/* An int argument as a 0-d int64 graph value (a literal as a constant). */
static kiln_status int_value(call *c, int i, int *id) {
  const kl_tsv *a = c->a[i];
  if (a && (a->kind == KL_TSV_INT || a->kind == KL_TSV_BOOL) && a->id < 0)
    return const_id(c, kl_ts_const_i64(c->b, &a->i, 1, true), id);
  kiln_status s = tensor_arg(c, i, id);
  if (s) return s;
  if (kl_dtype_is_float(dtype_of(c, *id)) || rank_of(c, *id) > 0)
    return bad_arg(c, i, "an int");
  return cast(c, *id, KL_I64, id);
}

/* __range_length(lo, hi, step): the trip count of `for i in range(lo, hi, step)` as
 * TorchScript writes it, max(0, ceil((hi - lo) / step)). The step must be known when
 * the graph is built (0 is an error, as in Python); the bounds may be graph values. */
static kiln_status lower_range_length(call *c) {
  int64_t lo, hi, step;
  bool tensor;
  kiln_status s = int_arg(c, 2, 1, &step);
  if (s) return s;
  if (step == 0) return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "range() with a step of 0");
  if (step == INT64_MIN) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "range() with a step of -2^63");
  uint64_t mag = step > 0 ? (uint64_t)step : 0 - (uint64_t)step;
  if (known_ints(c, 0, 1, &lo, &hi, &tensor)) {
    uint64_t span = step > 0 ? (hi > lo ? (uint64_t)hi - (uint64_t)lo : 0)
                             : (lo > hi ? (uint64_t)lo - (uint64_t)hi : 0);
    uint64_t n = span ? (span - 1) / mag + 1 : 0;
    if (n > (uint64_t)INT64_MAX)
      return kl_fail(c->e, KILN_ERR_LIMIT, "range(%" PRId64 ", %" PRId64 ", %" PRId64 ") "
                     "has more than 2^63 - 1 elements", lo, hi, step);
    return ret_known_int(c, (int64_t)n, tensor);
  }
  int a, b, d, zero, y;
  int64_t z = 0, up = (int64_t)(mag - 1), by = (int64_t)mag;
  if ((s = int_value(c, step > 0 ? 1 : 0, &a)) || (s = int_value(c, step > 0 ? 0 : 1, &b)) ||
      (s = op2(c, KL_OP_Sub, a, b, &d)) ||
      (s = const_id(c, kl_ts_const_i64(c->b, &z, 1, true), &zero)) ||
      (s = op2(c, KL_OP_Max, d, zero, &y)))
    return s;
  if (mag > 1) {
    int k_up, k_by;
    if ((s = const_id(c, kl_ts_const_i64(c->b, &up, 1, true), &k_up)) ||
        (s = const_id(c, kl_ts_const_i64(c->b, &by, 1, true), &k_by)) ||
        (s = op2(c, KL_OP_Add, y, k_up, &y)) || (s = op2(c, KL_OP_Div, y, k_by, &y)))
      return s;
  }
  *c->out = (kl_tsv){.kind = KL_TSV_INT, .id = y};
  return KILN_OK;
}

/* __derive_index(index, start, step) = start + index * step: the loop variable of
 * `for i in range(start, stop, step)` from the Loop's iteration number. */
static kiln_status lower_derive_index(call *c) {
  int64_t i, start, step;
  bool tensor;
  kiln_status s = int_arg(c, 2, 1, &step);
  if (s) return s;
  if (known_ints(c, 0, 1, &i, &start, &tensor)) {
    int64_t r;
    if (__builtin_mul_overflow(i, step, &r) || __builtin_add_overflow(start, r, &r))
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "a range index overflows 64 bits");
    return ret_known_int(c, r, tensor);
  }
  int x, k, y;
  if ((s = int_value(c, 0, &x))) return s;
  y = x;
  if (step != 1 && ((s = const_id(c, kl_ts_const_i64(c->b, &step, 1, true), &k)) ||
                    (s = op2(c, KL_OP_Mul, x, k, &y))))
    return s;
  const kl_tsv *a = c->a[1];
  bool zero = a && a->kind == KL_TSV_INT && a->id < 0 && a->i == 0;
  if (!zero && ((s = int_value(c, 1, &k)) || (s = op2(c, KL_OP_Add, y, k, &y)))) return s;
  *c->out = (kl_tsv){.kind = KL_TSV_INT, .id = y};
  return KILN_OK;
}

/* embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse) */
static kiln_status lower_embedding(call *c) {
  int w, idx, y;
  kiln_status s = tensor_arg(c, 0, &w);
  if (!s) s = tensor_arg(c, 1, &idx);
  if (!s) s = node_int(c, KL_OP_Gather, 2, (int[]){w, idx}, "axis", 0, &y);
  return s ? s : ret_tensor(c, y);
}

/* A [L, S] mask of 0 and -inf above the diagonal, for is_causal. */
static kiln_status causal_mask(call *c, int q, int k, kl_dtype dt, int *id) {
  const kl_type *tq = type_of(c, q), *tk = type_of(c, k);
  int64_t l = tq->rank >= 2 ? tq->dims[tq->rank - 2].size : -1;
  int64_t m = tk->rank >= 2 ? tk->dims[tk->rank - 2].size : -1, count, dims[2] = {l, m};
  if (l < 0 || m < 0 || kl_mul_overflow_i64(l, m, &count) || count > (1 << 26))
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "is_causal with sequence lengths not known "
                   "when the graph is built");
  size_t size = kl_dtype_size(dt);
  void *data = malloc((size_t)count * size + 1);
  if (!data) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int64_t i = 0; i < l; i++)
    for (int64_t j = 0; j < m; j++) kl_store_f64(data, dt, (size_t)(i * m + j), j > i ? -INFINITY : 0);
  return const_id(c, kl_ts_const_data(c->b, dt, 2, dims, data, (size_t)count * size), id);
}

/* A boolean attn_mask as an additive one: where(mask, 0, -inf). */
static kiln_status additive_mask(call *c, int mask, kl_dtype dt, int *id) {
  if (dtype_of(c, mask) != KL_BOOL) return *id = mask, KILN_OK;
  int zero = kl_ts_const_scalar(c->b, dt, 0), ninf = kl_ts_const_scalar(c->b, dt, -INFINITY);
  if (zero < 0 || ninf < 0) return c->e->code;
  return op_node(c, KL_OP_Where, 3, (int[]){mask, zero, ninf}, id);
}

/* scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale,
 * enable_gqa) = softmax(q k^T * scale + mask) v, the pattern fuse_attention makes
 * into kiln.Attention. With a mask, a query that sees no key gives 0 in torch (not the
 * NaN of a softmax over nothing but -inf): Where(IsNaN(p), 0, p) after the softmax, as
 * torch.onnx writes it, which the fusion takes as zero_masked_rows. */
static kiln_status lower_sdpa(call *c) {
  int q, k, v, mask = KL_ABSENT, rank, kt, y;
  double p, scale = 0;
  bool causal, gqa;
  kiln_status s = tensor_arg(c, 0, &q);
  if (!s) s = tensor_arg(c, 1, &k);
  if (!s) s = tensor_arg(c, 2, &v);
  if (!s) s = opt_tensor_arg(c, 3, &mask);
  if (!s) s = float_arg(c, 4, 0, &p);
  if (!s) s = bool_arg(c, 5, false, &causal);
  if (!s) s = float_arg(c, 6, 0, &scale);
  if (!s) s = bool_arg(c, 7, false, &gqa);
  if (!s) s = need_rank(c, k, &rank);
  if (s) return s;
  if (p != 0) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "dropout_p=%g: attention dropout is "
                             "for training", p);
  if (gqa) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "enable_gqa=True");
  if (rank < 2) return kl_fail(c->e, KILN_ERR_SHAPE, "key of rank %d, expected 2 or more", rank);
  int64_t e_dim = type_of(c, q)->rank > 0 ? type_of(c, q)->dims[type_of(c, q)->rank - 1].size : -1;
  if (!given(c, 6) && e_dim <= 0)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "a query whose last dim is not known (for the "
                   "default scale)");
  if (!given(c, 6)) scale = 1.0 / sqrt((double)e_dim);
  kl_dtype dt = dtype_of(c, q) == KL_UNDEFINED ? KL_F32 : dtype_of(c, q);
  int64_t perm[KL_MAX_RANK];
  for (int d = 0; d < rank; d++) perm[d] = d;
  perm[rank - 2] = rank - 1;
  perm[rank - 1] = rank - 2;
  int sc = kl_ts_const_scalar(c->b, dt, scale);
  if (sc < 0) return c->e->code;
  s = transpose_node(c, k, perm, rank, &kt);
  if (!s) s = op2(c, KL_OP_MatMul, q, kt, &y);
  if (!s) s = op2(c, KL_OP_Mul, y, sc, &y);
  if (!s && mask != KL_ABSENT && !(s = additive_mask(c, mask, dt, &mask))) s = op2(c, KL_OP_Add, y, mask, &y);
  if (!s && causal && !(s = causal_mask(c, q, k, dt, &mask))) s = op2(c, KL_OP_Add, y, mask, &y);
  if (!s) s = node_int(c, KL_OP_Softmax, 1, &y, "axis", -1, &y);
  if (!s && mask != KL_ABSENT) {
    int nan, zero = kl_ts_const_scalar(c->b, dt, 0);
    if (zero < 0) return c->e->code;
    s = op1(c, KL_OP_IsNaN, y, &nan);
    if (!s) s = op_node(c, KL_OP_Where, 3, (int[]){nan, zero, y}, &y);
  }
  if (!s) s = op2(c, KL_OP_MatMul, y, v, &y);
  return s ? s : ret_tensor(c, y);
}

/* torch's ScalarType numbers */
static kl_dtype scalar_type(int64_t t) {
  static const kl_dtype map[] = {KL_U8, KL_I8, KL_I16, KL_I32, KL_I64, KL_F16, KL_F32,
                                 KL_F64, KL_UNDEFINED, KL_UNDEFINED, KL_UNDEFINED, KL_BOOL};
  if (t >= 0 && t < (int64_t)(sizeof map / sizeof map[0])) return map[t];
  return t == 15 ? KL_BF16 : KL_UNDEFINED;
}

/* prim::dtype(t): t's dtype as torch's ScalarType number */
static kiln_status lower_prim_dtype(call *c) {
  int x;
  kiln_status s = tensor_arg(c, 0, &x);
  if (s) return s;
  kl_dtype dt = dtype_of(c, x);
  for (int64_t t = 0; t < 16; t++)
    if (dt != KL_UNDEFINED && scalar_type(t) == dt) return ret_int(c, t);
  return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "the dtype of a %s tensor as a torch dtype",
                 kl_dtype_name(dt));
}

/* prim::device(t): kiln's tensors are all on one device, "cpu" to the code */
static kiln_status lower_prim_device(call *c) {
  int x;
  kiln_status s = tensor_arg(c, 0, &x);
  if (s) return s;
  *c->out = (kl_tsv){.kind = KL_TSV_STR, .s = "cpu", .id = -1};
  return KILN_OK;
}

/* prim::type(device): the device's type ("cpu" of "cpu:0"); kiln's devices are "cpu" */
static kiln_status lower_prim_type(call *c) {
  const char *dev;
  kiln_status s = str_arg(c, 0, NULL, &dev);
  if (!s && (!dev || strncmp(dev, "cpu", 3) != 0 || (dev[3] && dev[3] != ':')))
    return bad_arg(c, 0, "a device");
  if (s) return s;
  *c->out = (kl_tsv){.kind = KL_TSV_STR, .s = "cpu", .id = -1};
  return KILN_OK;
}

/* Whether two values are known equal (*eq), known to differ (!*eq), or neither
 * (false): numbers and strings known now, graph ints that are the same value or the
 * same symbolic dim. */
static bool known_equal(const kl_tsv *x, const kl_tsv *y, bool *eq) {
  if (is_number(x) && is_number(y)) return *eq = number(x) == number(y), true;
  if (x->kind == KL_TSV_STR && y->kind == KL_TSV_STR) return *eq = strcmp(x->s, y->s) == 0, true;
  if (x->kind == KL_TSV_NONE || y->kind == KL_TSV_NONE)
    return *eq = x->kind == y->kind, true;
  if (x->id >= 0 && (x->id == y->id || (x->dim_sym && x->dim_sym == y->dim_sym)))
    return *eq = true, true;
  return false;
}

/* __contains__(list, x): x in a list, known now */
static kiln_status lower_contains(call *c) {
  const kl_tsv *l = c->a[0], *x = c->a[1];
  if (!l || (l->kind != KL_TSV_LIST && l->kind != KL_TSV_TUPLE) || !x)
    return bad_arg(c, 0, "a list");
  bool in = false, eq;
  for (int k = 0; k < l->n && !in; k++) {
    if (!known_equal(&l->items[k], x, &eq))
      return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "'in' of a value that is not known when the "
                     "graph is built");
    in = eq;
  }
  *c->out = (kl_tsv){.kind = KL_TSV_BOOL, .i = in, .id = -1};
  return KILN_OK;
}

/* eq/ne of two lists (RNN modules compare sizes so): known now, element by element */
static kiln_status compare_lists(call *c, const kl_tsv *x, const kl_tsv *y) {
  bool all = x->n == y->n, eq;
  for (int k = 0; all && k < x->n; k++) {
    if (!known_equal(&x->items[k], &y->items[k], &eq))
      return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "a comparison of lists whose elements are "
                     "not known when the graph is built");
    all = eq;
  }
  *c->out = (kl_tsv){.kind = KL_TSV_BOOL, .i = c->variant == 1 ? !all : all, .id = -1};
  return KILN_OK;
}

/* list(x): a copy of a list (its elements are values) */
static kiln_status lower_list(call *c) {
  const kl_tsv *l = c->a[0];
  if (!l || (l->kind != KL_TSV_LIST && l->kind != KL_TSV_TUPLE)) return bad_arg(c, 0, "a list");
  kiln_status s = kl_ts_list_copied(c->b, l->n); /* (a copy: appends to it leave l be) */
  kl_tsv *items = s ? NULL : kl_ts_alloc(c->b, sizeof *items * (size_t)(l->n + 1));
  if (!items) return c->e->code;
  if (l->n) memcpy(items, l->items, sizeof *items * (size_t)l->n);
  *c->out = (kl_tsv){.kind = KL_TSV_LIST, .items = items, .n = l->n, .id = -1,
                     .made_in = kl_ts_bodies(c->b) + 1};
  return KILN_OK;
}

/* The shape of data, a number or (nested) lists of numbers known while building, into
 * dims/rank; false when it is not rectangular or holds anything else. */
static bool data_shape(const kl_tsv *v, int depth, int64_t *dims, int *rank) {
  if (!is_list(v)) {
    *rank = depth;
    return is_number(v) && depth <= KL_MAX_RANK;
  }
  if (depth >= KL_MAX_RANK) return false;
  dims[depth] = v->n;
  int r0 = -1;
  for (int k = 0; k < v->n; k++) {
    int r;
    if (!data_shape(&v->items[k], depth + 1, dims, &r) || (r0 >= 0 && r != r0)) return false;
    if (is_list(&v->items[k]) && v->items[k].n != v->items[0].n) return false;
    r0 = r;
  }
  if (v->n == 0) *rank = depth + 1;
  else *rank = r0;
  return true;
}

/* The numbers of data stored in order at *at (dtype dt), and what kinds they are. */
static void data_store(const kl_tsv *v, void *out, kl_dtype dt, size_t *at, int *kinds) {
  if (!is_list(v)) {
    kl_store_f64(out, dt, (*at)++, number(v));
    *kinds |= 1 << v->kind;
    return;
  }
  for (int k = 0; k < v->n; k++) data_store(&v->items[k], out, dt, at, kinds);
}

/* tensor(data, dtype, device, requires_grad) of a number or nested lists of numbers known
 * while building (torch.tensor(0, dtype=...), torch.tensor([1, 2])): a constant of data's
 * shape, in the dtype given, else float32 for floats, int64 for ints, bool for bools (as
 * torch infers it); a 1-D list of ints some of which the graph computes (sizes of the
 * batch dim) is their Concat, cast to the dtype. */
static kiln_status lower_tensor(call *c) {
  int64_t dims[KL_MAX_RANK], st = -1, numel = 1;
  int rank = 0, kinds = 0, id;
  kiln_status s = int_arg(c, 1, -1, &st);
  if (s) return s;
  kl_dtype dt = st >= 0 ? scalar_type(st) : KL_UNDEFINED;
  if (st >= 0 && dt == KL_UNDEFINED) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "an unknown dtype");
  if (!data_shape(c->a[0], 0, dims, &rank)) {
    dimlist d = {0};
    bool ints = is_list(c->a[0]);
    for (int k = 0; ints && k < c->a[0]->n; k++) {
      const kl_tsv *v = &c->a[0]->items[k];
      ints = (v->kind == KL_TSV_INT || v->kind == KL_TSV_TENSOR) && v->id >= 0 &&
             kl_ts_type(c->b, v->id)->rank == 0 && kl_ts_type(c->b, v->id)->dtype == KL_I64;
      ints |= v->kind == KL_TSV_INT && v->id < 0;
    }
    if (!ints)
      return bad_arg(c, 0, "a number or rectangular lists of numbers known when the graph is "
                     "built, or a list of ints");
    if ((s = dims_from_arg(c, 0, &d))) return s;
    if ((s = dims_value(c, &d, &id)) || (s = cast(c, id, dt == KL_UNDEFINED ? KL_I64 : dt, &id)))
      return s;
    return ret_tensor(c, id);
  }
  for (int k = 0; k < rank; k++) numel *= dims[k];
  if (numel > MAX_LIST * MAX_LIST) return bad_arg(c, 0, "at most 4096 numbers");
  double *probe = malloc(sizeof *probe * (size_t)(numel ? numel : 1));
  if (!probe) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  size_t at = 0;
  data_store(c->a[0], probe, KL_F64, &at, &kinds);
  if (dt == KL_UNDEFINED)
    dt = kinds & (1 << KL_TSV_FLOAT) ? KL_F32 : kinds & (1 << KL_TSV_INT) ? KL_I64
         : kinds ? KL_BOOL : KL_F32;
  size_t size = kl_dtype_size(dt) * (size_t)numel;
  void *data = malloc(size ? size : 1);
  if (!data) return free(probe), kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int64_t k = 0; k < numel; k++) kl_store_f64(data, dt, (size_t)k, probe[k]);
  free(probe);
  id = kl_ts_const_data(c->b, dt, rank, dims, data, size);
  return id < 0 ? c->e->code : ret_tensor(c, id);
}

/* An int that the graph computes (a 0-D int64 value: len() of a tensor whose rows the
 * data decides). */
static bool computed_int(call *c, const kl_tsv *v) {
  return (v->kind == KL_TSV_INT || v->kind == KL_TSV_TENSOR) && v->id >= 0 &&
         rank_of(c, v->id) == 0 &&
         dtype_of(c, v->id) == KL_I64;
}

/* min(l) / max(l) of a list of ints some of which the graph computes (torchvision's
 * mask pasting loops over range(min([len(masks), len(boxes)]))): Min/Max nodes over
 * them and the best of the known ones (best; NULL when there is none). */
static kiln_status list_minmax(call *c, const kl_tsv *l, const kl_tsv *best, bool max) {
  int y = -1;
  kiln_status s = KILN_OK;
  if (best && best->kind != KL_TSV_INT && best->kind != KL_TSV_BOOL)
    return bad_arg(c, 0, "a list of ints (some of which the graph computes)");
  if (best && (y = kl_ts_const_i64(c->b, (int64_t[]){best->i}, 1, true)) < 0) return c->e->code;
  for (int k = 0; k < l->n && !s; k++) {
    const kl_tsv *v = &l->items[k];
    if (!computed_int(c, v)) continue;
    if (y < 0) y = v->id;
    else s = op2(c, max ? KL_OP_Max : KL_OP_Min, y, v->id, &y);
  }
  if (s) return s;
  *c->out = (kl_tsv){.kind = KL_TSV_INT, .id = y};
  return KILN_OK;
}

/* prim::min / prim::max (variant 1) of a list of ints known while building (min(l)), or
 * of two ints or floats (min(a, b)): known while building, else a Min/Max node (of a list
 * of ints some of which the graph computes: list_minmax). */
static kiln_status lower_prim_minmax(call *c) {
  bool max = c->variant == 1;
  const kl_tsv *l = c->a[0];
  if (is_list(l) && !given(c, 1)) {
    if (l->n == 0)
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%s of an empty list (ValueError)",
                     max ? "max" : "min");
    const kl_tsv *best = NULL;
    int computed = 0;
    for (int k = 0; k < l->n; k++) {
      const kl_tsv *v = &l->items[k];
      if (computed_int(c, v)) {
        computed++;
        continue;
      }
      if (!is_number(v))
        return bad_arg(c, 0, "a list of numbers known when the graph is built, or of ints");
      if (!best || (max ? number(v) > number(best) : number(v) < number(best))) best = v;
    }
    if (!computed) return *c->out = *best, KILN_OK;
    return list_minmax(c, l, best, max);
  }
  if (is_number(l) && is_number(c->a[1])) {
    bool second = max ? number(c->a[1]) > number(l) : number(c->a[1]) < number(l);
    return *c->out = *(second ? c->a[1] : l), KILN_OK;
  }
  int a, b, y;
  kiln_status s = operands(c, 0, 1, &a, &b);
  if (!s) s = op2(c, max ? KL_OP_Max : KL_OP_Min, a, b, &y);
  if (s) return s;
  *c->out = (kl_tsv){.kind = l->kind == KL_TSV_FLOAT || c->a[1]->kind == KL_TSV_FLOAT
                                 ? KL_TSV_FLOAT : KL_TSV_INT, .id = y};
  return KILN_OK;
}

/* index(self, indices): one index tensor (the others None) is a Gather on its dim */
/* x[i0, i1, ..., ik-1] with k > 1 index tensors on x's first k dims: they broadcast
 * together to a shape S, and the result is S + x's dims past k; GatherND of x by the
 * indices stacked on a last axis of k (each first brought to S by adding a zero tensor
 * of shape S, the sum of the indices times 0). transformers' masks index so
 * (attention_mask[batch_idx, kv_idx]). */
static kiln_status index_leading(call *c, int x, const kl_tsv *l, int *y) {
  int zero = -1, ids[MAX_LIST], minus1 = const_ints(c, (int64_t[]){-1}, 1);
  kiln_status s = minus1 < 0 ? c->e->code : KILN_OK;
  if (l->n > MAX_LIST) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "%d index tensors", l->n);
  for (int k = 0; !s && k < l->n; k++) {
    int i = l->items[k].id, z;
    if (dtype_of(c, i) == KL_BOOL)
      return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "indexing by a boolean mask");
    if (dtype_of(c, i) != KL_I64 && (s = cast(c, i, KL_I64, &i))) return s;
    ids[k] = i;
    int zc = kl_ts_const_scalar(c->b, KL_I64, 0);
    if (zc < 0) return c->e->code;
    if ((s = op2(c, KL_OP_Mul, i, zc, &z))) return s;
    if (zero < 0) zero = z;
    else s = op2(c, KL_OP_Add, zero, z, &zero);
  }
  for (int k = 0; !s && k < l->n; k++) {
    if ((s = op2(c, KL_OP_Add, ids[k], zero, &ids[k]))) break;
    s = op2(c, KL_OP_Unsqueeze, ids[k], minus1, &ids[k]);
  }
  int stacked;
  if (!s) s = node_int(c, KL_OP_Concat, l->n, ids, "axis", -1, &stacked);
  if (!s) s = op2(c, KL_OP_GatherND, x, stacked, y);
  return s;
}

/* x[mask] with a boolean mask: the elements (or slices) where it holds, in order, as
 * many as the data decides (Compress). A 1-D mask selects along its dim; a mask of
 * x's shape (on dim 0) the elements of the flattened tensor. */
static kiln_status index_mask(call *c, int x, int mask, int axis, int *y) {
  int rank = rank_of(c, x), mrank = rank_of(c, mask);
  bool whole = axis == 0 && mrank == rank && rank > 1;
  if (mrank != 1 && !whole)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "indexing by a boolean mask of rank %d (of a "
                   "tensor of rank %d, at index %d): expected a 1-D mask, or one of the "
                   "tensor's rank at index 0", mrank, rank, axis);
  if (whole) { /* Compress with no axis flattens x, and takes a 1-D condition */
    int flat = const_ints(c, (int64_t[]){-1}, 1);
    kiln_status s = flat < 0 ? c->e->code : op2(c, KL_OP_Reshape, mask, flat, &mask);
    return s ? s : op2(c, KL_OP_Compress, x, mask, y);
  }
  return node_int(c, KL_OP_Compress, 2, (int[]){x, mask}, "axis", axis, y);
}

static kiln_status lower_index(call *c) {
  int x, y, axis = -1, tensors = 0;
  kiln_status s = tensor_arg(c, 0, &x);
  const kl_tsv *l = c->a[1];
  if (s) return s;
  if (!l || (l->kind != KL_TSV_LIST && l->kind != KL_TSV_TUPLE)) return bad_arg(c, 1, "a list");
  bool leading = true; /* every item a tensor: x's first dims, indexed together */
  for (int k = 0; k < l->n; k++) {
    if (l->items[k].kind == KL_TSV_NONE) {
      leading = false;
      continue;
    }
    if (l->items[k].kind != KL_TSV_TENSOR)
      return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "an index that is not a tensor or None");
    tensors++;
    axis = k;
  }
  if (tensors > 1) {
    if (!leading)
      return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "indexing by more than one tensor with "
                     "a None between or before them");
    s = index_leading(c, x, l, &y);
    return s ? s : ret_tensor(c, y);
  }
  if (axis < 0) return ret_tensor(c, x);
  int idx = l->items[axis].id;
  if (dtype_of(c, idx) == KL_BOOL) {
    s = index_mask(c, x, idx, axis, &y);
    return s ? s : ret_tensor(c, y);
  }
  s = node_int(c, KL_OP_Gather, 2, (int[]){x, idx}, "axis", axis, &y);
  return s ? s : ret_tensor(c, y);
}

/* remainder(self, other): Python's %, the sign of the divisor */
static kiln_status lower_remainder(call *c) {
  int64_t x, y;
  bool tensor;
  if (known_ints(c, 0, 1, &x, &y, &tensor) && y != 0) {
    int64_t r = x % y;
    return ret_known_int(c, r != 0 && (r < 0) != (y < 0) ? r + y : r, tensor);
  }
  int a, b, r;
  kiln_status s = operands(c, 0, 1, &a, &b);
  if (s) return s;
  if (!kl_dtype_is_float(dtype_of(c, a))) {
    s = node_int(c, KL_OP_Mod, 2, (int[]){a, b}, "fmod", 0, &r);
    return s ? s : ret_tensor(c, r);
  }
  if ((s = op2(c, KL_OP_Div, a, b, &r)) || (s = op1(c, KL_OP_Floor, r, &r)) ||
      (s = op2(c, KL_OP_Mul, r, b, &r)) || (s = op2(c, KL_OP_Sub, a, r, &r)))
    return s;
  return ret_tensor(c, r);
}

/* einsum(equation, tensors, path) */
static kiln_status lower_einsum(call *c) {
  int ids[MAX_LIST], n, y;
  const char *eq;
  kiln_status s = str_arg(c, 0, "", &eq);
  if (!s) s = tensor_list(c, 1, ids, &n);
  if (s) return s;
  int node = begin_node(c, KL_OP_Einsum, n, ids, &y);
  s = end_node(c, node, node < 0 ? KILN_OK : kl_node_set_string(c->g, node, "equation", eq, c->e));
  return s ? s : ret_tensor(c, y);
}

/* linalg_vector_norm(self, ord, dim, keepdim, dtype): ord 1, 2 or inf */
static kiln_status lower_vector_norm(call *c) {
  int x, y, n, in[2];
  int64_t dims[MAX_LIST];
  double ord;
  bool keep;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = float_arg(c, 1, 2, &ord);
  if (!s) s = ints_arg(c, 2, 0, dims, &n);
  if (!s) s = bool_arg(c, 3, false, &keep);
  if (s) return s;
  if (given(c, 4)) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "a norm with a dtype argument");
  kl_op op = ord == 1 ? KL_OP_ReduceL1 : ord == 2 ? KL_OP_ReduceL2 : KL_OP_ReduceMax;
  if (ord != 1 && ord != 2 && !(isinf(ord) && ord > 0))
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "a vector norm of order %g", ord);
  in[0] = x;
  if (isinf(ord) && (s = op1(c, KL_OP_Abs, x, &in[0]))) return s;
  if (n && (in[1] = const_ints(c, dims, n)) < 0) return c->e->code;
  int node = begin_node(c, op, n ? 2 : 1, in, &y);
  s = end_node(c, node, node < 0 ? KILN_OK : kl_node_set_int(c->g, node, "keepdims", keep, c->e));
  return s ? s : ret_tensor(c, y);
}

/* zeros_like / ones_like (variant: the value) (self, dtype, ...) and zero_(self):
 * the value expanded to self's shape */
static kiln_status lower_fill_like(call *c) {
  int x, shape, k, y;
  int64_t st = -1;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s && c->params[1]) s = int_arg(c, 1, -1, &st);
  if (s) return s;
  kl_dtype dt = st >= 0 ? scalar_type(st) : dtype_of(c, x);
  if (dt == KL_UNDEFINED) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "an unknown dtype");
  if ((k = kl_ts_const_scalar(c->b, dt, c->variant)) < 0) return c->e->code;
  if ((s = op1(c, KL_OP_Shape, x, &shape)) || (s = op2(c, KL_OP_Expand, k, shape, &y))) return s;
  return ret_tensor(c, y);
}

/* ---- Python numbers and shapes ---- */

/* numel(self) */
static kiln_status lower_numel(call *c) {
  int x, y;
  int64_t n;
  kiln_status s = tensor_arg(c, 0, &x);
  if (s) return s;
  if (kl_type_numel(type_of(c, x), &n)) return ret_int(c, n);
  if ((s = op1(c, KL_OP_Size, x, &y))) return s;
  *c->out = (kl_tsv){.kind = KL_TSV_INT, .id = y};
  return KILN_OK;
}

/* size(self[, dim]) */
static kiln_status lower_size(call *c) {
  int x, rank;
  int64_t a;
  kiln_status s = tensor_arg(c, 0, &x);
  if (s) return s;
  if (given(c, 1)) {
    int axis, id, sym;
    int64_t v = 0;
    if ((s = int_arg(c, 1, 0, &a)) || (s = need_rank(c, x, &rank)) ||
        (s = norm_axis(c, a, rank, &axis)) || (s = dim_of(c, x, axis, &v, &id, &sym)))
      return s;
    *c->out = (kl_tsv){.kind = KL_TSV_INT, .i = v, .id = id, .dim_sym = sym};
    return KILN_OK;
  }
  if ((s = need_rank(c, x, &rank))) return s;
  kl_tsv *items = kl_ts_alloc(c->b, sizeof *items * (size_t)(rank ? rank : 1));
  if (!items) return c->e->code;
  for (int k = 0; k < rank; k++) {
    items[k] = (kl_tsv){.kind = KL_TSV_INT, .id = -1};
    if ((s = dim_of(c, x, k, &items[k].i, &items[k].id, &items[k].dim_sym))) return s;
  }
  *c->out = (kl_tsv){.kind = KL_TSV_LIST, .items = items, .n = rank, .id = -1};
  return KILN_OK;
}

/* prim::NumToTensor(a): a 0-D tensor of the number */
static kiln_status lower_num_to_tensor(call *c) {
  const kl_tsv *a = c->a[0];
  if (a && (a->kind == KL_TSV_INT || a->kind == KL_TSV_FLOAT) && a->id >= 0) {
    *c->out = (kl_tsv){.kind = KL_TSV_TENSOR, .id = a->id, .dim_sym = a->dim_sym};
    return KILN_OK;
  }
  if (!is_number(a)) return bad_arg(c, 0, "a number");
  int id = a->kind == KL_TSV_FLOAT ? kl_ts_const_scalar(c->b, KL_F64, a->f)
                                   : kl_ts_const_i64(c->b, &a->i, 1, true);
  return id < 0 ? c->e->code : ret_tensor(c, id);
}

/* int(a), float(a) (variant 1), bool(a) (variant 2) */
static kiln_status lower_number(call *c) {
  const kl_tsv *a = c->a[0];
  kl_tsv_kind kind = c->variant == 1 ? KL_TSV_FLOAT : c->variant == 2 ? KL_TSV_BOOL : KL_TSV_INT;
  double v;
  if (is_number(a) || (a && a->id >= 0 && const_scalar(c, a->id, &v))) {
    if (is_number(a)) v = number(a);
    /* false for NaN, the infinities and what int64 cannot hold */
    bool fits = v >= -9223372036854775808.0 && v < 9223372036854775808.0;
    if (kind == KL_TSV_INT && !fits)
      return bad_arg(c, 0, "a number that fits in a 64-bit int (not NaN or infinite)");
    *c->out = (kl_tsv){.kind = kind,
                       .i = kind == KL_TSV_BOOL ? v != 0 : fits ? (int64_t)v : 0,
                       .f = v,
                       .id = -1};
    return KILN_OK;
  }
  int x, y; /* bool(t) of a value known at run time: the condition of an if or while */
  kiln_status s = tensor_arg(c, 0, &x);
  kl_dtype to = c->variant == 1 ? KL_F32 : c->variant == 2 ? KL_BOOL : KL_I64;
  if (!s) s = cast(c, x, to, &y);
  if (s) return s;
  *c->out = (kl_tsv){.kind = kind, .id = y, .dim_sym = y == x ? a->dim_sym : 0};
  return KILN_OK;
}

/* torch.device("cpu"): kept as its string, which `to` skips */
static kiln_status lower_device(call *c) {
  const char *name;
  kiln_status s = str_arg(c, 0, "cpu", &name);
  if (s) return s;
  *c->out = (kl_tsv){.kind = KL_TSV_STR, .s = name, .id = -1};
  return KILN_OK;
}

/* to(self, [device,] dtype, ...) / to(self, other, ...): the first int after self is
 * the dtype, a tensor gives its dtype; no dtype leaves the tensor as it is. */
static kiln_status lower_to(call *c) {
  int x, y;
  kl_dtype to = KL_UNDEFINED;
  kiln_status s = tensor_arg(c, 0, &x);
  for (int k = 1; !s && k < MAX_PARAMS && c->params[k] && to == KL_UNDEFINED; k++) {
    const kl_tsv *a = c->a[k];
    if (!a) continue;
    /* given by keyword: only `dtype` names one (layout 0 is strided, not uint8) */
    if (c->kw_bound[k] && strcmp(c->params[k], "dtype") != 0) continue;
    if (a->kind == KL_TSV_TENSOR) to = dtype_of(c, a->id);
    else if (a->kind == KL_TSV_INT && a->id < 0) {
      if ((to = scalar_type(a->i)) == KL_UNDEFINED)
        return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "dtype number %lld", (long long)a->i);
    } else if (a->kind != KL_TSV_STR && a->kind != KL_TSV_NONE && a->kind != KL_TSV_BOOL)
      return bad_arg(c, k, "a dtype, device or tensor");
    if (a->kind == KL_TSV_BOOL) break; /* non_blocking: past the dtype */
  }
  if (s || to == KL_UNDEFINED) return s ? s : ret_tensor(c, x);
  return (s = cast(c, x, to, &y)) ? s : ret_tensor(c, y);
}

static kiln_status lower_type_as(call *c) {
  int x, other, y;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = tensor_arg(c, 1, &other);
  if (!s && dtype_of(c, other) != KL_UNDEFINED) s = cast(c, x, dtype_of(c, other), &x);
  y = x;
  return s ? s : ret_tensor(c, y);
}

/* ---- the table ---- */

/* ---- writes (functional forms of fill_, copy_, masked_fill_) and new tensors ---- */

/* y is known to have x's shape: its type says so (its dtype stays). */
static void same_shape(call *c, int y, int x) {
  kl_type *t = &c->g->values[y].type;
  const kl_type *u = type_of(c, x);
  if (u->rank < 0) return;
  kl_dtype dt = t->dtype;
  *t = *u;
  t->dtype = dt;
}

/* A value (argument i: a number or a tensor) cast to dt and expanded to the shape of x. */
static kiln_status value_like(call *c, int i, int x, kl_dtype dt, int *y) {
  int v, shape;
  kiln_status s = KILN_OK;
  if (is_number(c->a[i])) {
    if ((v = kl_ts_const_scalar(c->b, dt, number(c->a[i]))) < 0) return c->e->code;
  } else if ((s = tensor_arg(c, i, &v)) || (s = cast(c, v, dt, &v))) {
    return s;
  }
  if ((s = op1(c, KL_OP_Shape, x, &shape)) || (s = op2(c, KL_OP_Expand, v, shape, y))) return s;
  same_shape(c, *y, x); /* inference cannot see the dims of a Shape it does not fold */
  return KILN_OK;
}

/* fill(self, value), copy(self, src, non_blocking): self's shape and dtype, the value's
 * contents (the functional twins of fill_ and copy_) */
static kiln_status lower_fill(call *c) {
  int x, y;
  if (is_list(c->a[0]) && !given(c, 1)) return lower_list(c); /* copy.t(l): l.copy() */
  kiln_status s = tensor_arg(c, 0, &x);
  if (s) return s;
  kl_dtype dt = dtype_of(c, x);
  if (dt == KL_UNDEFINED) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "an unknown dtype");
  if ((s = value_like(c, 1, x, dt, &y))) return s;
  return ret_tensor(c, y);
}

/* masked_fill(self, mask, value) = Where(mask, value, self) */
/* tril, triu (variant 0, 1) (self, diagonal): ONNX Trilu on the last two dims. */
static kiln_status lower_trilu(call *c) {
  int x, k = KL_ABSENT, y, rank;
  int64_t diag;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = need_rank(c, x, &rank);
  if (!s && rank < 2)
    s = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "needs a tensor of rank 2 or more, found "
                "rank %d", rank);
  if (!s) s = int_arg(c, 1, 0, &diag);
  if (s) return s;
  if (diag != 0 && (k = kl_ts_const_i64(c->b, &diag, 1, true)) < 0) return c->e->code;
  if ((s = node_int(c, KL_OP_Trilu, 2, (int[]){x, k}, "upper", c->variant, &y))) return s;
  return ret_tensor(c, y);
}

/* bitwise_not (variant 0): Not on bool, BitwiseNot on integers; logical_not (1): Not
 * of the input as bool. */
static kiln_status lower_not(call *c) {
  const kl_tsv *a = c->a[0];
  if (a && a->kind == KL_TSV_BOOL && a->id < 0) /* not of a bool known now */
    return *c->out = (kl_tsv){.kind = KL_TSV_BOOL, .i = !a->i, .id = -1}, KILN_OK;
  int x, y;
  kiln_status s = tensor_arg(c, 0, &x);
  if (s) return s;
  kl_dtype dt = dtype_of(c, x);
  if (c->variant == 1 && (s = cast(c, x, KL_BOOL, &x))) return s;
  if (c->variant == 0 && dt != KL_BOOL && (dt == KL_UNDEFINED || kl_dtype_is_float(dt)))
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "bitwise_not of a %s tensor: expected bool "
                   "or an integer type", kl_dtype_name(dt));
  bool logical = c->variant == 1 || dt == KL_BOOL;
  if ((s = op1(c, logical ? KL_OP_Not : KL_OP_BitwiseNot, x, &y))) return s;
  return ret_tensor(c, y);
}

/* Argument i as a tensor of dtype dt: a number becomes a constant of dt, a tensor is
 * cast to dt (the value written by masked_fill and index_put). */
static kiln_status value_arg(call *c, int i, kl_dtype dt, int *v) {
  if (is_number(c->a[i])) {
    *v = kl_ts_const_scalar(c->b, dt, number(c->a[i]));
    return *v < 0 ? c->e->code : KILN_OK;
  }
  kiln_status s = tensor_arg(c, i, v);
  return s ? s : cast(c, *v, dt, v);
}

static kiln_status lower_masked_fill(call *c) {
  int x, mask, v, y;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = tensor_arg(c, 1, &mask);
  if (s) return s;
  kl_dtype dt = dtype_of(c, x);
  if (dt == KL_UNDEFINED) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "an unknown dtype");
  if ((s = value_arg(c, 2, dt, &v))) return s;
  if ((s = cast(c, mask, KL_BOOL, &mask))) return s;
  if ((s = op_node(c, KL_OP_Where, 3, (int[]){mask, v, x}, &y))) return s;
  return ret_tensor(c, y);
}

/* new_zeros, new_ones (variant 0, 1) (self, size, dtype, ...), new_full (2) (self, size,
 * fill_value, dtype, ...), zeros, ones (3, 4) (size, dtype, ...), full (5) (size,
 * fill_value, dtype, ...): the value expanded to size. The dtype is the argument's,
 * else self's (new_*), else float32, or full's fill value's (int64, bool). */
static kiln_status lower_new_full(call *c) {
  bool has_self = c->variant <= 2, has_fill = c->variant == 2 || c->variant == 5;
  int size_i = has_self ? 1 : 0, fill_i = size_i + 1, dtype_i = size_i + 1 + has_fill;
  int x = KL_ABSENT, k, shape, y;
  int64_t st = -1;
  double v = c->variant == 1 || c->variant == 4;
  dimlist d = {0};
  kiln_status s = has_self ? tensor_arg(c, 0, &x) : KILN_OK;
  if (!s) s = dims_from_arg(c, size_i, &d);
  if (!s && has_fill) s = float_arg(c, fill_i, 0, &v);
  if (!s) s = int_arg(c, dtype_i, -1, &st);
  if (s) return s;
  kl_dtype dt = st >= 0 ? scalar_type(st) : has_self ? dtype_of(c, x) : KL_F32;
  if (st < 0 && has_fill && !has_self && c->a[fill_i]->kind != KL_TSV_FLOAT)
    dt = c->a[fill_i]->kind == KL_TSV_BOOL ? KL_BOOL : KL_I64;
  if (dt == KL_UNDEFINED) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "an unknown dtype");
  if ((k = kl_ts_const_scalar(c->b, dt, v)) < 0) return c->e->code;
  if ((s = dims_value(c, &d, &shape)) || (s = op2(c, KL_OP_Expand, k, shape, &y))) return s;
  known_dims(c, k, y, &d);
  return ret_tensor(c, y);
}

/* index_put(self, indices, values, accumulate), the functional twin of x[i] = v: one
 * index tensor, either a boolean mask of self's rank (Where) or int64 indices of dim 0
 * (ScatterND); values broadcast to what they replace. */
static kiln_status lower_index_put(call *c) {
  int x, v, idx, y;
  bool acc;
  const kl_tsv *l = c->a[1];
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = bool_arg(c, 3, false, &acc);
  if (s) return s;
  if (acc) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "index_put with accumulate=True");
  if (!l || (l->kind != KL_TSV_LIST && l->kind != KL_TSV_TUPLE) || l->n != 1 ||
      l->items[0].kind != KL_TSV_TENSOR)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "index_put with other than one index tensor "
                   "(x[mask] = v, x[i] = v on dim 0)");
  idx = l->items[0].id;
  kl_dtype dt = dtype_of(c, x);
  if (dt == KL_UNDEFINED) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "an unknown dtype");
  if ((s = value_arg(c, 2, dt, &v))) return s;
  if (dtype_of(c, idx) == KL_BOOL) {
    if (rank_of(c, idx) != rank_of(c, x) || rank_of(c, x) < 0)
      return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "index_put with a boolean mask of another "
                     "rank than the tensor");
    if (rank_of(c, v) > 0) /* values fill the masked elements in order: only a scalar fits */
      return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "index_put of a tensor of values by a mask");
    if ((s = op_node(c, KL_OP_Where, 3, (int[]){idx, v, x}, &y))) return s;
    return ret_tensor(c, y);
  }
  /* x[i] = v: ScatterND with indices [n, 1] and updates of shape [n, x.shape[1:]...] */
  int64_t rank = rank_of(c, x);
  int axes = const_ints(c, (int64_t[]){-1}, 1), ishape, xshape, rest, ushape, upd, nidx;
  int64_t beg = 1, end = INT64_MAX, zero = 0;
  if (rank < 1 || rank_of(c, idx) != 1)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "index_put with indices that are not 1-D");
  if (axes < 0) return c->e->code;
  if ((s = cast(c, idx, KL_I64, &idx))) return s;
  /* negative indices count from the end: Where(i < 0, i + n, i) */
  int n_id, neg, fixed, zc = kl_ts_const_i64(c->b, &zero, 1, true);
  int64_t ax0 = 0;
  if (zc < 0) return c->e->code;
  if ((s = dim_of(c, x, 0, &ax0, &n_id, &(int){0}))) return s;
  if (n_id < 0 && (n_id = kl_ts_const_i64(c->b, &ax0, 1, true)) < 0) return c->e->code;
  if ((s = op2(c, KL_OP_Less, idx, zc, &neg)) || (s = op2(c, KL_OP_Add, idx, n_id, &fixed)) ||
      (s = op_node(c, KL_OP_Where, 3, (int[]){neg, fixed, idx}, &idx)))
    return s;
  int in[4] = {0, const_ints(c, &beg, 1), const_ints(c, &end, 1), const_ints(c, &zero, 1)};
  if (in[1] < 0 || in[2] < 0 || in[3] < 0) return c->e->code;
  if ((s = op2(c, KL_OP_Unsqueeze, idx, axes, &nidx)) || (s = op1(c, KL_OP_Shape, idx, &ishape)) ||
      (s = op1(c, KL_OP_Shape, x, &xshape)))
    return s;
  in[0] = xshape;
  if ((s = op_node(c, KL_OP_Slice, 4, in, &rest)) ||
      (s = node_int(c, KL_OP_Concat, 2, (int[]){ishape, rest}, "axis", 0, &ushape)) ||
      (s = op2(c, KL_OP_Expand, v, ushape, &upd)) ||
      (s = op_node(c, KL_OP_ScatterND, 3, (int[]){x, nidx, upd}, &y)))
    return s;
  same_shape(c, y, x);
  return ret_tensor(c, y);
}

/* index_fill(self, dim, index, value): ScatterElements along dim, with the (k) indices
 * reshaped to [1, .., k, .., 1] and they and the value expanded to self's shape with k
 * at dim; negative indices count from the end. */
static kiln_status lower_index_fill(call *c) {
  int x, idx, rank, axis, v, y;
  int64_t dim, k;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = int_arg(c, 1, 0, &dim);
  if (!s) s = tensor_arg(c, 2, &idx);
  if (!s) s = need_rank(c, x, &rank);
  if (!s) s = norm_axis(c, dim, rank, &axis);
  if (s) return s;
  kl_dtype dt = dtype_of(c, x);
  if (dt == KL_UNDEFINED || !kl_type_numel(type_of(c, idx), &k) || rank_of(c, idx) > 1)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "index_fill with indices of unknown shape or "
                   "over one dim, or of an unknown dtype");
  if (is_number(c->a[3])) {
    if ((v = kl_ts_const_scalar(c->b, dt, number(c->a[3]))) < 0) return c->e->code;
  } else if ((s = tensor_arg(c, 3, &v)) || (s = cast(c, v, dt, &v))) {
    return s;
  }
  /* the indices, non-negative, as [1, .., k, .., 1] */
  int64_t n, zero = 0, dims[KL_MAX_RANK];
  int n_id, sym, neg, fixed, zc = kl_ts_const_i64(c->b, &zero, 1, true), shape, kshape;
  if (zc < 0) return c->e->code;
  if ((s = cast(c, idx, KL_I64, &idx)) || (s = dim_of(c, x, axis, &n, &n_id, &sym))) return s;
  if (n_id < 0 && (n_id = kl_ts_const_i64(c->b, &n, 1, true)) < 0) return c->e->code;
  if ((s = op2(c, KL_OP_Less, idx, zc, &neg)) || (s = op2(c, KL_OP_Add, idx, n_id, &fixed)) ||
      (s = op_node(c, KL_OP_Where, 3, (int[]){neg, fixed, idx}, &idx)))
    return s;
  for (int j = 0; j < rank; j++) dims[j] = j == axis ? k : 1;
  if ((shape = const_ints(c, dims, rank)) < 0) return c->e->code;
  if ((s = op2(c, KL_OP_Reshape, idx, shape, &idx))) return s;
  /* self's shape with k at dim: Shape * (1 - onehot) + k * onehot */
  for (int j = 0; j < rank; j++) dims[j] = j == axis ? 0 : 1;
  int keep = const_ints(c, dims, rank), xs, masked;
  for (int j = 0; j < rank; j++) dims[j] = j == axis ? k : 0;
  int put = const_ints(c, dims, rank);
  if (keep < 0 || put < 0) return c->e->code;
  if ((s = op1(c, KL_OP_Shape, x, &xs)) || (s = op2(c, KL_OP_Mul, xs, keep, &masked)) ||
      (s = op2(c, KL_OP_Add, masked, put, &kshape)) ||
      (s = op2(c, KL_OP_Expand, idx, kshape, &idx)) || (s = op2(c, KL_OP_Expand, v, kshape, &v)) ||
      (s = node_int(c, KL_OP_ScatterElements, 3, (int[]){x, idx, v}, "axis", axis, &y)))
    return s;
  same_shape(c, y, x);
  return ret_tensor(c, y);
}

/* ---- recurrent layers ---- */

/* The gate blocks (rows) of a weight or bias of torch's order put in ONNX's: order[k]
 * is the torch block that goes k-th (LSTM i,f,g,o -> i,o,f,c; GRU r,z,n -> z,r,h). */
static kiln_status gate_order(call *c, int w, const int *order, int gates, int *y) {
  const kl_type *t = type_of(c, w);
  int parts[4], re[4];
  int64_t sizes[4];
  if (t->rank < 1 || t->dims[0].size < 0 || t->dims[0].size % gates)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "a recurrent weight whose first dim is not "
                   "%d gates of one size", gates);
  for (int k = 0; k < gates; k++) sizes[k] = t->dims[0].size / gates;
  kiln_status s = split_sizes(c, w, 0, sizes, gates, parts);
  for (int k = 0; k < gates; k++) re[k] = parts[order[k]];
  return s ? s : node_int(c, KL_OP_Concat, gates, re, "axis", 0, y);
}

/* One layer's W, R and B (or KL_ABSENT) for the ONNX op, directions stacked: params
 * holds w_ih, w_hh[, b_ih, b_hh] per direction. */
static kiln_status rnn_weights(call *c, const int *params, int per, int dirs, bool gru,
                               int *w, int *r, int *b) {
  static const int lstm_order[] = {0, 3, 1, 2}, gru_order[] = {1, 0, 2};
  const int *order = gru ? gru_order : lstm_order;
  int gates = gru ? 3 : 4, ws[2], rs[2], bs[2], zero = const_ints(c, (int64_t[]){0}, 1);
  kiln_status s = zero < 0 ? c->e->code : KILN_OK;
  for (int d = 0; !s && d < dirs; d++) {
    const int *p = params + d * per;
    int bi, bh;
    s = gate_order(c, p[0], order, gates, &ws[d]);
    if (!s) s = op2(c, KL_OP_Unsqueeze, ws[d], zero, &ws[d]);
    if (!s) s = gate_order(c, p[1], order, gates, &rs[d]);
    if (!s) s = op2(c, KL_OP_Unsqueeze, rs[d], zero, &rs[d]);
    if (!s && per == 4) s = gate_order(c, p[2], order, gates, &bi);
    if (!s && per == 4) s = gate_order(c, p[3], order, gates, &bh);
    if (!s && per == 4) s = node_int(c, KL_OP_Concat, 2, (int[]){bi, bh}, "axis", 0, &bs[d]);
    if (!s && per == 4) s = op2(c, KL_OP_Unsqueeze, bs[d], zero, &bs[d]);
  }
  *b = KL_ABSENT;
  if (!s) s = dirs == 1 ? (*w = ws[0], KILN_OK) : node_int(c, KL_OP_Concat, 2, ws, "axis", 0, w);
  if (!s) s = dirs == 1 ? (*r = rs[0], KILN_OK) : node_int(c, KL_OP_Concat, 2, rs, "axis", 0, r);
  if (!s && per == 4)
    s = dirs == 1 ? (*b = bs[0], KILN_OK) : node_int(c, KL_OP_Concat, 2, bs, "axis", 0, b);
  return s;
}

/* The most steps (sequence length x directions x layers) lstm_proj unrolls. */
#define MAX_PROJ_STEPS 4096

/* An LSTM with proj_size (torch's: h = (o * tanh(c)) W_hr^T, P < H; ONNX's LSTM has no
 * projection), unrolled over its sequence, whose length the graph must know: x [T, B,
 * I]; params per layer and direction w_ih [4H, I], w_hh [4H, P], (b_ih, b_hh [4H]),
 * w_hr [P, H] (per of them); h0 [L D, B, P], c0 [L D, B, H]. Per step t: gates = X_t
 * W_ih^T (all steps in one product) + b_ih + b_hh + h W_hh^T, in torch's order i, f,
 * g, o; c = sigmoid(f) c + sigmoid(i) tanh(g); h = (sigmoid(o) tanh(c)) W_hr^T. The
 * reverse direction runs t = T-1 .. 0. *y [T, B, D P], *hn, *cn as torch's. */
static kiln_status lstm_proj(call *c, int x, int h0, int c0, const int *params, int per,
                             int64_t layers, int dirs, int *y, int *hn, int *cn) {
  const kl_type *xt = type_of(c, x);
  int64_t steps = xt->rank == 3 ? xt->dims[0].size : -1;
  if (steps < 1)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "an LSTM with proj_size over a sequence whose "
                   "length the graph does not know (kiln unrolls it, and takes an input's "
                   "dim 0 as the batch: use batch_first=True, or no proj_size)");
  if (steps * dirs * layers > MAX_PROJ_STEPS)
    return kl_fail(c->e, KILN_ERR_LIMIT, "an LSTM with proj_size of %lld steps x %d "
                   "directions x %lld layers: kiln unrolls at most %d", (long long)steps, dirs,
                   (long long)layers, MAX_PROJ_STEPS);
  int64_t perm[2] = {1, 0};
  int *hs = kl_ts_alloc(c->b, sizeof *hs * (size_t)(2 * steps));
  int *hl = kl_ts_alloc(c->b, sizeof *hl * (size_t)(layers * dirs * 2));
  int *ys = kl_ts_alloc(c->b, sizeof *ys * (size_t)steps);
  int zero = const_ints(c, (int64_t[]){0}, 1);
  if (!hs || !hl || !ys || zero < 0) return c->e->code;
  kiln_status s = KILN_OK;
  for (int64_t l = 0; l < layers && !s; l++) {
    for (int d = 0; d < dirs && !s; d++) {
      const int *p = params + (l * dirs + d) * per;
      int64_t at = l * dirs + d;
      int xw, wt_hh, wt_hr, h, cell, bias, k;
      const kl_type *wt = type_of(c, p[0]);
      int64_t h4 = wt->rank == 2 ? wt->dims[0].size : -1;
      if (h4 < 4 || h4 % 4)
        return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "an LSTM weight_ih whose first dim is "
                       "not 4 gates of one size");
      int64_t sizes[4] = {h4 / 4, h4 / 4, h4 / 4, h4 / 4};
      s = transpose_node(c, p[0], perm, 2, &k);
      if (!s) s = op2(c, KL_OP_MatMul, x, k, &xw);
      if (!s && per == 5) s = op2(c, KL_OP_Add, p[2], p[3], &bias);
      if (!s && per == 5) s = op2(c, KL_OP_Add, xw, bias, &xw);
      if (!s) s = transpose_node(c, p[1], perm, 2, &wt_hh);
      if (!s) s = transpose_node(c, p[per - 1], perm, 2, &wt_hr);
      int ia = kl_ts_const_i64(c->b, &at, 1, true);
      if (ia < 0) return c->e->code;
      if (!s) s = node_int(c, KL_OP_Gather, 2, (int[]){h0, ia}, "axis", 0, &h);
      if (!s) s = node_int(c, KL_OP_Gather, 2, (int[]){c0, ia}, "axis", 0, &cell);
      for (int64_t i = 0; i < steps && !s; i++) {
        int64_t t = d ? steps - 1 - i : i;
        int it = kl_ts_const_i64(c->b, &t, 1, true), g, rh, gate[4], ig, fc, hf, tc;
        if (it < 0) return c->e->code;
        s = node_int(c, KL_OP_Gather, 2, (int[]){xw, it}, "axis", 0, &g);
        if (!s) s = op2(c, KL_OP_MatMul, h, wt_hh, &rh);
        if (!s) s = op2(c, KL_OP_Add, g, rh, &g);
        if (!s) s = split_sizes(c, g, 1, sizes, 4, gate);
        if (!s) s = op1(c, KL_OP_Sigmoid, gate[0], &gate[0]);
        if (!s) s = op1(c, KL_OP_Sigmoid, gate[1], &gate[1]);
        if (!s) s = op1(c, KL_OP_Tanh, gate[2], &gate[2]);
        if (!s) s = op1(c, KL_OP_Sigmoid, gate[3], &gate[3]);
        if (!s) s = op2(c, KL_OP_Mul, gate[1], cell, &fc);
        if (!s) s = op2(c, KL_OP_Mul, gate[0], gate[2], &ig);
        if (!s) s = op2(c, KL_OP_Add, fc, ig, &cell);
        if (!s) s = op1(c, KL_OP_Tanh, cell, &tc);
        if (!s) s = op2(c, KL_OP_Mul, gate[3], tc, &hf);
        if (!s) s = op2(c, KL_OP_MatMul, hf, wt_hr, &h);
        hs[d * steps + t] = h;
      }
      if (!s) s = op2(c, KL_OP_Unsqueeze, h, zero, &hl[at]);
      if (!s) s = op2(c, KL_OP_Unsqueeze, cell, zero, &hl[layers * dirs + at]);
    }
    for (int64_t t = 0; t < steps && !s; t++) {
      int yt = hs[t];
      if (dirs == 2) s = node_int(c, KL_OP_Concat, 2, (int[]){hs[t], hs[steps + t]}, "axis", 1, &yt);
      if (!s) s = op2(c, KL_OP_Unsqueeze, yt, zero, &ys[t]);
    }
    if (!s) s = node_int(c, KL_OP_Concat, (int)steps, ys, "axis", 0, &x);
  }
  if (!s) s = node_int(c, KL_OP_Concat, (int)(layers * dirs), hl, "axis", 0, hn);
  if (!s) s = node_int(c, KL_OP_Concat, (int)(layers * dirs), hl + layers * dirs, "axis", 0, cn);
  *y = x;
  return s;
}

/* lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
 * batch_first) (variant 0) and gru(input, hx, ...) (1): one ONNX LSTM or GRU per layer
 * (GRU with linear_before_reset, torch's form), the next layer's input each one's Y
 * with its directions side by side. hx is [h0, c0] for lstm, h0 for gru, each
 * [layers * dirs, batch, hidden]. */
static kiln_status lower_rnn(call *c) {
  bool gru = c->variant == 1, biases, train, bidir, batch_first;
  int x, h0, c0 = KL_ABSENT, params[MAX_LIST], n, hs[2], n_hs = 0;
  int64_t layers;
  double dropout;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s && gru) s = tensor_arg(c, 1, &h0);
  if (!s && !gru && (s = tensor_list(c, 1, hs, &n_hs)) == KILN_OK && n_hs != 2)
    return bad_arg(c, 1, "a list of two tensors (h0, c0)");
  if (!s) s = tensor_list(c, 2, params, &n);
  if (!s) s = bool_arg(c, 3, true, &biases);
  if (!s) s = int_arg(c, 4, 1, &layers);
  if (!s) s = float_arg(c, 5, 0, &dropout);
  if (!s) s = bool_arg(c, 6, false, &train);
  if (!s) s = bool_arg(c, 7, false, &bidir);
  if (!s) s = bool_arg(c, 8, false, &batch_first);
  if (s) return s;
  if (!gru) h0 = hs[0], c0 = hs[1];
  if (train && dropout != 0)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "dropout between layers in training mode: "
                   "call model.eval() before torch.jit.trace");
  int dirs = bidir ? 2 : 1, per = biases ? 4 : 2;
  if (!gru && layers >= 1 && layers * dirs * (per + 1) == n) { /* proj_size: w_hr too */
    int ids[3] = {KL_ABSENT, KL_ABSENT, KL_ABSENT};
    int64_t perm3[3] = {1, 0, 2};
    if (batch_first && (s = transpose_node(c, x, perm3, 3, &x))) return s;
    if ((s = lstm_proj(c, x, h0, c0, params, per + 1, layers, dirs, &ids[0], &ids[1], &ids[2])))
      return s;
    if (batch_first && (s = transpose_node(c, ids[0], perm3, 3, &ids[0]))) return s;
    kl_tsv *items = kl_ts_alloc(c->b, 3 * sizeof *items);
    if (!items) return c->e->code;
    for (int k = 0; k < 3; k++) items[k] = (kl_tsv){.kind = KL_TSV_TENSOR, .id = ids[k]};
    *c->out = (kl_tsv){.kind = KL_TSV_TUPLE, .items = items, .n = 3, .id = -1};
    return KILN_OK;
  }
  if (layers < 1 || layers * dirs * per != n)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%d weight tensors for %lld layers, expected "
                   "%lld (or %lld for an LSTM with proj_size)", n, (long long)layers,
                   (long long)(layers * dirs * per), (long long)(layers * dirs * (per + 1)));
  const kl_type *wh = type_of(c, params[1]);
  if (wh->rank != 2 || wh->dims[1].size < 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "a recurrent weight_hh of unknown size");
  int64_t hidden = wh->dims[1].size, perm[3] = {1, 0, 2};
  int yh[MAX_LIST], yc[MAX_LIST];
  if (batch_first && (s = transpose_node(c, x, perm, 3, &x))) return s;
  int flat = const_ints(c, (int64_t[]){0, 0, -1}, 3);
  if (flat < 0) return c->e->code;
  for (int l = 0; l < layers; l++) {
    int w, r, b, ih, ic = KL_ABSENT, out[3];
    s = rnn_weights(c, params + l * dirs * per, per, dirs, gru, &w, &r, &b);
    if (!s) s = slice_axis(c, h0, 0, l * dirs, (l + 1) * dirs, &ih);
    if (!s && !gru) s = slice_axis(c, c0, 0, l * dirs, (l + 1) * dirs, &ic);
    if (s) return s;
    int in[7] = {x, w, r, b, KL_ABSENT, ih, ic};
    int node = kl_ts_node(c->b, gru ? KL_OP_GRU : KL_OP_LSTM, gru ? 6 : 7, in, gru ? 2 : 3, out);
    s = node < 0 ? KILN_OK : kl_node_set_int(c->g, node, "hidden_size", hidden, c->e);
    if (node >= 0 && !s)
      s = kl_node_set_string(c->g, node, "direction", bidir ? "bidirectional" : "forward", c->e);
    if (node >= 0 && !s && gru) s = kl_node_set_int(c->g, node, "linear_before_reset", 1, c->e);
    if ((s = end_node(c, node, s))) return s;
    yh[l] = out[1];
    yc[l] = gru ? KL_ABSENT : out[2];
    if ((s = transpose_node(c, out[0], (int64_t[]){0, 2, 1, 3}, 4, &x)) ||
        (s = op2(c, KL_OP_Reshape, x, flat, &x)))
      return s;
  }
  if (batch_first && (s = transpose_node(c, x, perm, 3, &x))) return s;
  int ids[3] = {x};
  if ((s = node_int(c, KL_OP_Concat, (int)layers, yh, "axis", 0, &ids[1]))) return s;
  if (!gru && (s = node_int(c, KL_OP_Concat, (int)layers, yc, "axis", 0, &ids[2]))) return s;
  kl_tsv *items = kl_ts_alloc(c->b, 3 * sizeof *items);
  if (!items) return c->e->code;
  for (int k = 0; k < (gru ? 2 : 3); k++) items[k] = (kl_tsv){.kind = KL_TSV_TENSOR, .id = ids[k]};
  *c->out = (kl_tsv){.kind = KL_TSV_TUPLE, .items = items, .n = gru ? 2 : 3, .id = -1};
  return KILN_OK;
}

static kiln_status shape_value(call *c, int x, int *out);

/* ---- ranges, sorting, scans, resampling ---- */

/* A bound of arange: known now (*id -1; *v, and *iv for an int) or a graph value (*id);
 * *fl: a float (then arange's default dtype is float32). */
typedef struct bound {
  double v;
  int64_t iv;
  int id;
  bool fl;
} bound;

static kiln_status bound_arg(call *c, int i, int64_t dflt, bound *r) {
  const kl_tsv *a = c->a[i];
  *r = (bound){.v = (double)dflt, .iv = dflt, .id = -1};
  if (!given(c, i)) return KILN_OK;
  if (is_number(a)) {
    r->fl = a->kind == KL_TSV_FLOAT;
    r->v = number(a);
    r->iv = a->kind == KL_TSV_FLOAT ? 0 : a->i;
    return KILN_OK;
  }
  if (a->id < 0 || (a->kind != KL_TSV_INT && a->kind != KL_TSV_FLOAT && a->kind != KL_TSV_TENSOR))
    return bad_arg(c, i, "a number");
  kl_dtype dt = dtype_of(c, a->id);
  r->fl = a->kind == KL_TSV_FLOAT || kl_dtype_is_float(dt);
  if (rank_of(c, a->id) > 1) return bad_arg(c, i, "a number (a tensor of one element)");
  if (r->fl ? const_scalar(c, a->id, &r->v) : const_int(c, a->id, &r->iv)) {
    if (!r->fl) r->v = (double)r->iv;
    return KILN_OK;
  }
  r->id = a->id;
  return KILN_OK;
}

/* The number of elements of arange(start, end, step) known now, as torch counts them. */
static kiln_status range_count(call *c, const bound *b, bool fl, int64_t *n) {
  double start = b[0].v, end = b[1].v, step = b[2].v;
  if (step == 0 || isnan(step) || (step > 0 ? start > end : start < end) || !isfinite(start) ||
      !isfinite(end))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "arange from %g to %g by step %g: the step "
                   "is zero or points away from the end", start, end, step);
  if (!fl) {
    int64_t d, q;
    if (__builtin_sub_overflow(b[1].iv, b[0].iv, &d) || d == INT64_MIN)
      return kl_fail(c->e, KILN_ERR_LIMIT, "arange of over 2^63 elements");
    q = d / b[2].iv; /* ceil of d / step, both of one sign */
    *n = q + (d % b[2].iv != 0);
    return KILN_OK;
  }
  double count = ceil((end - start) / step);
  if (!(count < 9.0e15)) return kl_fail(c->e, KILN_ERR_LIMIT, "arange of %g elements", count);
  *n = (int64_t)count;
  return KILN_OK;
}

/* arange(start, end, step) known now: a constant of dtype dt. */
static kiln_status range_const(call *c, const bound *b, bool fl, kl_dtype dt, int *y) {
  int64_t n;
  size_t bytes, size = kl_dtype_size(dt);
  kiln_status s = range_count(c, b, fl, &n);
  if (s) return s;
  if (kl_mul_overflow_size((size_t)n, size, &bytes) || bytes > (uint64_t)kl_ts_max_bytes(c->b))
    return kl_fail(c->e, KILN_ERR_LIMIT, "an arange of %lld elements is over the limit of "
                   "%lld bytes a tensor may take", (long long)n, (long long)kl_ts_max_bytes(c->b));
  void *data = malloc(bytes ? bytes : 1);
  if (!data) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int64_t k = 0; k < n; k++) {
    if (fl || kl_dtype_is_float(dt)) kl_store_f64(data, dt, (size_t)k, b[0].v + (double)k * b[2].v);
    else if (dt == KL_I64) ((int64_t *)data)[k] = b[0].iv + k * b[2].iv;
    else kl_store_f64(data, dt, (size_t)k, (double)(b[0].iv + k * b[2].iv));
  }
  return const_id(c, kl_ts_const_data(c->b, dt, 1, &n, data, bytes), y);
}

/* A bound as a 0-D graph value of dtype dt. */
static kiln_status bound_value(call *c, const bound *r, kl_dtype dt, int *id) {
  if (r->id < 0) {
    *id = dt == KL_I64 ? kl_ts_const_i64(c->b, &r->iv, 1, true)
                       : kl_ts_const_scalar(c->b, dt, r->v);
    return *id < 0 ? c->e->code : KILN_OK;
  }
  kiln_status s = cast(c, r->id, dt, id);
  if (!s && rank_of(c, *id) != 0) { /* one element of rank 1: to a scalar */
    int shape = const_ints(c, NULL, 0);
    s = shape < 0 ? c->e->code : op2(c, KL_OP_Reshape, *id, shape, id);
  }
  return s;
}

/* arange(end, *, dtype, layout, device, pin_memory), arange(start, end[, step], *, ...):
 * the options are keyword-only, so the positional arguments tell the form. Bounds known
 * now make a constant; others a Range, in int64, or float64 when a bound or the dtype
 * is a float (torch steps in double), cast to the dtype. */
static kiln_status lower_arange(call *c) {
  bound b[3];
  int64_t st;
  bool end_only = given(c, 0) && !given(c, 1);
  kiln_status s = bound_arg(c, end_only ? 1 : 0, 0, &b[0]);
  if (!s) s = bound_arg(c, end_only ? 0 : 1, 0, &b[1]);
  if (!s) s = bound_arg(c, 2, 1, &b[2]);
  if (!s) s = int_arg(c, 3, -1, &st);
  if (s) return s;
  if (end_only) b[0] = (bound){.id = -1};
  if (!given(c, 0) && !given(c, 1)) return bad_arg(c, 1, "a number");
  bool fl = b[0].fl || b[1].fl || b[2].fl;
  kl_dtype dt = st >= 0 ? scalar_type(st) : fl ? KL_F32 : KL_I64;
  if (dt == KL_UNDEFINED || dt == KL_BOOL)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "arange of dtype number %lld", (long long)st);
  int y, in[3];
  if (b[0].id < 0 && b[1].id < 0 && b[2].id < 0) {
    if ((s = range_const(c, b, fl, dt, &y))) return s;
    return ret_tensor(c, y);
  }
  kl_dtype work = fl || kl_dtype_is_float(dt) ? KL_F64 : KL_I64;
  for (int k = 0; k < 3; k++)
    if ((s = bound_value(c, &b[k], work, &in[k]))) return s;
  if ((s = op_node(c, KL_OP_Range, 3, in, &y)) || (s = cast(c, y, dt, &y))) return s;
  const kl_tsv *end = c->a[end_only ? 0 : 1];
  kl_type *t = &c->g->values[y].type;
  if (b[0].id < 0 && b[0].iv == 0 && !b[0].fl && b[2].id < 0 && b[2].iv == 1 && !b[2].fl &&
      end->dim_sym && t->rank == 1 && t->dims[0].size < 0)
    t->dims[0] = (kl_dim){-1, end->dim_sym - 1}; /* arange(x.size(0)): the batch's length */
  return ret_tensor(c, y);
}

/* gather(self, dim, index, sparse_grad) */
static kiln_status lower_gather(call *c) {
  int x, idx, y;
  int64_t dim;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = int_arg(c, 1, 0, &dim);
  if (!s) s = tensor_arg(c, 2, &idx);
  if (!s) s = node_int(c, KL_OP_GatherElements, 2, (int[]){x, idx}, "axis", dim, &y);
  return s ? s : ret_tensor(c, y);
}

/* cumsum(self, dim, dtype): in the dtype when given; integers and bools sum in int64,
 * as torch does. */
static kiln_status lower_cumsum(call *c) {
  int x, axis, y;
  int64_t dim, st;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = int_arg(c, 1, 0, &dim);
  if (!s) s = int_arg(c, 2, -1, &st);
  if (s) return s;
  kl_dtype dt = st >= 0 ? scalar_type(st) : dtype_of(c, x);
  if (st < 0 && dt != KL_UNDEFINED && !kl_dtype_is_float(dt)) dt = KL_I64;
  if (st >= 0 && dt == KL_UNDEFINED)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "dtype number %lld", (long long)st);
  if (dt != KL_UNDEFINED && (s = cast(c, x, dt, &x))) return s;
  if ((axis = kl_ts_const_i64(c->b, &dim, 1, true)) < 0) return c->e->code;
  if ((s = op2(c, KL_OP_CumSum, x, axis, &y))) return s;
  return ret_tensor(c, y);
}

/* reshape_as(self, other), view_as(self, other) */
static kiln_status lower_reshape_as(call *c) {
  int x, other, shape, y;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = tensor_arg(c, 1, &other);
  if (!s) s = shape_value(c, other, &shape);
  if (s) return s;
  bool zero = false; /* an empty dim: 0 is a size, not "keep x's" */
  for (int k = 0; k < rank_of(c, other); k++) zero |= type_of(c, other)->dims[k].size == 0;
  int node = begin_node(c, KL_OP_Reshape, 2, (int[]){x, shape}, &y);
  s = end_node(c, node, node >= 0 && zero ? kl_node_set_int(c->g, node, "allowzero", 1, c->e)
                                          : KILN_OK);
  if (s) return s;
  same_shape(c, y, other);
  return ret_tensor(c, y);
}

/* _shape_as_tensor(self): a constant when every dim is known */
static kiln_status lower_shape_as_tensor(call *c) {
  int x, y;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = shape_value(c, x, &y);
  return s ? s : ret_tensor(c, y);
}

static kiln_status ret_pair(call *c, int a, int b) {
  kl_tsv *items = kl_ts_alloc(c->b, 2 * sizeof *items);
  if (!items) return c->e->code;
  items[0] = (kl_tsv){.kind = KL_TSV_TENSOR, .id = a};
  items[1] = (kl_tsv){.kind = KL_TSV_TENSOR, .id = b};
  *c->out = (kl_tsv){.kind = KL_TSV_TUPLE, .items = items, .n = 2, .id = -1};
  return KILN_OK;
}

/* TopK of x along axis with k (a [1] int64 value): *vals, *idx. TopK sorts and puts
 * equal values by increasing index, which is a stable sort both ways. */
static kiln_status topk_node(call *c, int x, int k, int64_t axis, bool largest, int *vals,
                             int *idx) {
  int out[2], node = kl_ts_node(c->b, KL_OP_TopK, 2, (int[]){x, k}, 2, out);
  kiln_status s = node < 0 ? KILN_OK : kl_node_set_int(c->g, node, "axis", axis, c->e);
  if (node >= 0 && !s) s = kl_node_set_int(c->g, node, "largest", largest, c->e);
  if (node >= 0 && !s) s = kl_node_set_int(c->g, node, "sorted", 1, c->e);
  if ((s = end_node(c, node, s))) return s;
  *vals = out[0];
  *idx = out[1];
  return KILN_OK;
}

/* argsort (variant 0) and sort (1) (self, dim, descending, stable): TopK of all the
 * elements along dim. */
static kiln_status lower_sort(call *c) {
  int x, rank, axis, k, sym, vals, idx;
  int64_t dim, n = 0;
  bool desc, stable;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = int_arg(c, 1, -1, &dim);
  if (!s) s = bool_arg(c, 2, false, &desc);
  if (!s) s = bool_arg(c, 3, false, &stable); /* TopK is stable: nothing to do */
  if (!s) s = need_rank(c, x, &rank);
  if (s) return s;
  if (rank == 0) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "sorting a 0-D tensor");
  if ((s = norm_axis(c, dim, rank, &axis)) || (s = dim_of(c, x, axis, &n, &k, &sym))) return s;
  int one = const_ints(c, (int64_t[]){0}, 1);
  if (one < 0) return c->e->code;
  if (k >= 0) s = op2(c, KL_OP_Unsqueeze, k, one, &k); /* a dim of unknown size */
  else if ((k = const_ints(c, &n, 1)) < 0) return c->e->code;
  if (s) return s;
  if ((s = topk_node(c, x, k, axis, desc, &vals, &idx))) return s;
  same_shape(c, vals, x);
  same_shape(c, idx, x);
  return c->variant ? ret_pair(c, vals, idx) : ret_tensor(c, idx);
}

/* topk(self, k, dim, largest, sorted) */
static kiln_status lower_topk(call *c) {
  int x, k, vals, idx;
  int64_t dim;
  bool largest;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = int_as_list(c, 1, 1, &k);
  if (!s) s = int_arg(c, 2, -1, &dim);
  if (!s) s = bool_arg(c, 3, true, &largest);
  if (!s) s = topk_node(c, x, k, dim, largest, &vals, &idx);
  return s ? s : ret_pair(c, vals, idx);
}

/* _weight_norm(v, g, dim) = v * (g / ||v||), the norm over every dim but `dim` (over
 * all of them for dim -1), kept as dims of 1 so that it broadcasts as g does. */
static kiln_status lower_weight_norm(call *c) {
  int v, g, rank, y, node, in[2];
  int64_t dim, axes[KL_MAX_RANK];
  kiln_status s = tensor_arg(c, 0, &v);
  if (!s) s = tensor_arg(c, 1, &g);
  if (!s) s = int_arg(c, 2, 0, &dim);
  if (!s) s = need_rank(c, v, &rank);
  if (s) return s;
  if (dim < -1 || dim >= rank)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "_weight_norm along dim %lld of a tensor of "
                   "rank %d", (long long)dim, rank);
  int n = 0;
  for (int k = 0; k < rank; k++)
    if (k != dim) axes[n++] = k;
  in[0] = v;
  if (n && (in[1] = const_ints(c, axes, n)) < 0) return c->e->code;
  if (n) { /* else a 1-D v along its dim: the norm of each element alone */
    node = begin_node(c, KL_OP_ReduceL2, 2, in, &y);
    s = end_node(c, node, node < 0 ? KILN_OK : kl_node_set_int(c->g, node, "keepdims", 1, c->e));
  } else {
    s = op1(c, KL_OP_Abs, v, &y);
  }
  if (!s) s = op2(c, KL_OP_Div, g, y, &y);
  if (!s) s = op2(c, KL_OP_Mul, v, y, &y);
  return s ? s : ret_tensor(c, y);
}

/* The per-dim scale factors of an upsample: argument i a list (the .vec form) or None,
 * or arguments i.. one float or None each (the form with scales_h, scales_w). *n 0 when
 * none are given. */
static kiln_status upsample_scales(call *c, int i, int dims, double *v, int *n) {
  const kl_tsv *a = c->a[i];
  *n = 0;
  if (a && (a->kind == KL_TSV_LIST || a->kind == KL_TSV_TUPLE)) {
    if (a->n != dims) return bad_arg(c, i, "one scale factor per spatial dim");
    for (int k = 0; k < a->n; k++) {
      if (!is_number(&a->items[k]))
        return bad_arg(c, i, "a list of numbers known when the graph is built");
      v[k] = number(&a->items[k]);
    }
    *n = dims;
    return KILN_OK;
  }
  for (int k = 0; k < dims && i + k < MAX_PARAMS && c->params[i + k]; k++) {
    if (!given(c, i + k)) continue;
    kiln_status s = float_arg(c, i + k, 0, &v[k]);
    if (s) return s;
    *n = dims;
  }
  for (int k = 0; *n && k < dims; k++) /* some given, others not: torch takes in / out */
    if (!given(c, i + k)) return bad_arg(c, i + k, "a scale factor, as the other dims have");
  return KILN_OK;
}

/* The scales input of a Resize: float32 as ONNX has it, unless float32 rounding changes
 * an output size torch computes in double (floor(2.3f * 10) is 22, torch's 23). */
static kiln_status scales_value(call *c, int x, int n, const double *v, int *out) {
  const kl_type *t = type_of(c, x);
  kl_dtype dt = KL_F32;
  for (int k = 0; k < n; k++) {
    double in = t->rank >= n ? (double)t->dims[t->rank - n + k].size : -1;
    if (in >= 0 && floor(in * (double)(float)v[k]) != floor(in * v[k])) dt = KL_F64;
  }
  int64_t count = n;
  size_t size = kl_dtype_size(dt);
  void *data = malloc(size * (size_t)n);
  if (!data) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int k = 0; k < n; k++) kl_store_f64(data, dt, (size_t)k, v[k]);
  return const_id(c, kl_ts_const_data(c->b, dt, 1, &count, data, size * (size_t)n), out);
}

/* upsample_nearest{1,2,3}d(input, output_size, scale_factors) and upsample_linear1d /
 * bilinear2d / trilinear3d / bicubic2d(input, output_size, align_corners,
 * scale_factors), or those with one scales_* argument per dim: Resize of the last dims.
 * variant: the spatial dims, negative for linear, -(10 + dims) for cubic. torch's
 * nearest takes floor(o * in / out), ONNX's asymmetric + floor; linear is half_pixel
 * (torch clamps the coordinate at 0, and Resize's taps at the edge read the same
 * element) or align_corners; cubic is Resize's cubic with its default coefficient
 * -0.75 (torch's), the coordinate not clamped and the taps past the edge reading it,
 * as torch's bicubic does. Given scale
 * factors map coordinates by 1 / scale in torch, as Resize's scales do, except with
 * align_corners, which maps by the sizes: then sizes floor(in * scale) are given. */
static kiln_status lower_upsample(call *c) {
  bool cubic = c->variant <= -10, linear = c->variant < 0, corners = false;
  int n = cubic ? -c->variant - 10 : linear ? -c->variant : c->variant, x, rank, in[4], y, ns;
  int si = linear ? 3 : 2;
  double scales[KL_MAX_RANK];
  dimlist d = {0};
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s && linear) s = bool_arg(c, 2, false, &corners);
  if (!s) s = need_rank(c, x, &rank);
  if (!s) s = upsample_scales(c, si, n, scales, &ns);
  if (!s && given(c, 1)) s = dims_from_arg(c, 1, &d);
  if (s) return s;
  if (rank < n) return kl_fail(c->e, KILN_ERR_SHAPE, "an input of rank %d, expected %d or more",
                               rank, n);
  if (!given(c, 1) && !ns) return bad_arg(c, 1, "a list of sizes when there are no scale factors");
  if (given(c, 1) && d.n != n) return bad_arg(c, 1, "one size per spatial dim");
  if (ns && !corners) d.n = 0; /* sizes and scales both: torch maps by the scales */
  if (!given(c, 1) && corners) { /* align_corners maps by sizes: floor(in * scale) */
    const kl_type *t = type_of(c, x);
    bool known = true;
    for (int k = 0; k < n; k++) known &= t->dims[rank - n + k].size >= 0;
    for (int k = 0; !known && k < n; k++) /* integer scales map as the sizes would */
      if (scales[k] != floor(scales[k]))
        return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "align_corners with a scale factor of %g "
                       "along a dim of unknown size", scales[k]);
    for (int k = 0; known && k < n; k++)
      if ((s = dims_add(c, &d, (int64_t)floor((double)t->dims[rank - n + k].size * scales[k]),
                        -1, 0)))
        return s;
  }
  int64_t axes[KL_MAX_RANK];
  for (int k = 0; k < n; k++) axes[k] = rank - n + k;
  in[0] = x;
  in[1] = in[2] = in[3] = KL_ABSENT;
  s = d.n ? dims_value(c, &d, &in[3]) : scales_value(c, x, n, scales, &in[2]);
  if (s) return s;
  int node = begin_node(c, KL_OP_Resize, 4, in, &y);
  if (node < 0) return c->e->code;
  s = kl_node_set_string(c->g, node, "mode", cubic ? "cubic" : linear ? "linear" : "nearest",
                         c->e);
  if (!s) s = kl_node_set_string(c->g, node, "coordinate_transformation_mode",
                                 !linear ? "asymmetric" : corners ? "align_corners" : "half_pixel",
                                 c->e);
  if (!s && !linear) s = kl_node_set_string(c->g, node, "nearest_mode", "floor", c->e);
  if (!s) s = kl_node_set_ints(c->g, node, "axes", axes, n, c->e);
  s = end_node(c, node, s);
  kl_type *t = &c->g->values[y].type;
  for (int k = 0; !s && d.n && t->rank == rank && k < n; k++) /* sizes from the graph */
    if (t->dims[rank - n + k].size < 0 && d.id[k] >= 0 && d.sym[k])
      t->dims[rank - n + k] = (kl_dim){-1, d.sym[k] - 1};
  return s ? s : ret_tensor(c, y);
}

/* eq, ne, lt, gt, le, ge (variant: 0..5) of two tensors or a tensor and a number */
static kiln_status lower_compare(call *c) {
  static const kl_op op[] = {KL_OP_Equal, KL_OP_Equal, KL_OP_Less, KL_OP_Greater,
                             KL_OP_LessOrEqual, KL_OP_GreaterOrEqual};
  const kl_tsv *x = c->a[0], *z = c->a[1];
  bool lists = x && z && (x->kind == KL_TSV_LIST || x->kind == KL_TSV_TUPLE) &&
               (z->kind == KL_TSV_LIST || z->kind == KL_TSV_TUPLE);
  if (lists && c->variant <= 1) return compare_lists(c, x, z);
  bool eq;
  if (x && z && c->variant <= 1 && (x->kind == KL_TSV_STR || x->kind == KL_TSV_NONE) &&
      known_equal(x, z, &eq)) { /* mode == "nearest", as scripted code tests strings */
    *c->out = (kl_tsv){.kind = KL_TSV_BOOL, .i = c->variant ? !eq : eq, .id = -1};
    return KILN_OK;
  }
  if (is_number(x) && is_number(z)) { /* numbers known now: a bool known now */
    bool ints = x->kind != KL_TSV_FLOAT && z->kind != KL_TSV_FLOAT;
    int cmp = ints ? (x->i > z->i) - (x->i < z->i) : (number(x) > number(z)) - (number(x) < number(z));
    bool unordered = !ints && (isnan(number(x)) || isnan(number(z)));
    static const int want[][2] = {{0, 0}, {0, 0}, {-1, -1}, {1, 1}, {-1, 0}, {0, 1}};
    bool r = !unordered && (cmp == want[c->variant][0] || cmp == want[c->variant][1]);
    if (c->variant == 1) r = unordered || cmp != 0;
    *c->out = (kl_tsv){.kind = KL_TSV_BOOL, .i = r, .id = -1};
    return KILN_OK;
  }
  int a, b, y;
  kiln_status s = operands(c, 0, 1, &a, &b);
  if (!s) s = op2(c, op[c->variant], a, b, &y);
  if (!s && c->variant == 1) s = op1(c, KL_OP_Not, y, &y);
  return s ? s : ret_tensor(c, y);
}

/* __and__ / bitwise_and (variant 0), __or__ (1), __xor__ (2): And/Or/Xor of booleans,
 * the Bitwise ops of integers; logical_and/or/xor (3..5): of the operands as booleans. */
static kiln_status lower_logic(call *c) {
  static const kl_op boolean[] = {KL_OP_And, KL_OP_Or, KL_OP_Xor};
  static const kl_op bitwise[] = {KL_OP_BitwiseAnd, KL_OP_BitwiseOr, KL_OP_BitwiseXor};
  int a, b, y, v = c->variant % 3;
  bool logical = c->variant >= 3;
  kiln_status s = operands(c, 0, 1, &a, &b);
  if (s) return s;
  kl_dtype ta = dtype_of(c, a), tb = dtype_of(c, b);
  if (logical) {
    if (ta != KL_BOOL && (s = cast(c, a, KL_BOOL, &a))) return s;
    if (tb != KL_BOOL && (s = cast(c, b, KL_BOOL, &b))) return s;
    ta = tb = KL_BOOL;
  }
  if (ta == KL_BOOL && tb == KL_BOOL) s = op2(c, boolean[v], a, b, &y);
  else if (kl_dtype_is_float(ta) || kl_dtype_is_float(tb))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "a bitwise op of a floating-point tensor");
  else s = op2(c, bitwise[v], a, b, &y);
  return s ? s : ret_tensor(c, y);
}

/* ---- detection models' ops (torchvision's scripted SSD) ---- */

/* as_tensor(data, dtype, device): a tensor as it is (cast to dtype when given; the same
 * tensor when it already has it), else what tensor(data, dtype) makes. */
static kiln_status lower_as_tensor(call *c) {
  const kl_tsv *d = c->a[0];
  if (!d || d->kind != KL_TSV_TENSOR) return lower_tensor(c);
  int64_t st;
  int y = d->id;
  kiln_status s = int_arg(c, 1, -1, &st);
  if (s) return s;
  kl_dtype dt = st >= 0 ? scalar_type(st) : dtype_of(c, y);
  if (dt == KL_UNDEFINED) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "an unknown dtype");
  return (s = cast(c, y, dt, &y)) ? s : ret_tensor(c, y);
}

/* scalar_tensor(s, dtype, ...): a 0-D tensor of s, float32 unless dtype says */
static kiln_status lower_scalar_tensor(call *c) {
  int64_t st;
  int y;
  kiln_status s = int_arg(c, 1, -1, &st);
  if (s) return s;
  kl_dtype dt = st >= 0 ? scalar_type(st) : KL_F32;
  if (dt == KL_UNDEFINED) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "an unknown dtype");
  if ((s = value_arg(c, 0, dt, &y))) return s;
  if (rank_of(c, y) != 0)
    return bad_arg(c, 0, "a number (scalar_tensor)");
  return ret_tensor(c, y);
}

/* full_like(self, fill_value, dtype, ...): fill_value (a number, known or computed by
 * the graph) in self's shape and, unless dtype says, self's dtype */
static kiln_status lower_full_like(call *c) {
  int x, v, shape, y;
  int64_t st;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = int_arg(c, 2, -1, &st);
  if (s) return s;
  kl_dtype dt = st >= 0 ? scalar_type(st) : dtype_of(c, x);
  if (dt == KL_UNDEFINED) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "an unknown dtype");
  if ((s = value_arg(c, 1, dt, &v))) return s;
  if (rank_of(c, v) > 0) return bad_arg(c, 1, "a number (the fill value)");
  if ((s = op1(c, KL_OP_Shape, x, &shape)) || (s = op2(c, KL_OP_Expand, v, shape, &y))) return s;
  return ret_tensor(c, y);
}

/* max / min (variant 1): of every element (max(self): a 0-D tensor), along a dim
 * (max(self, dim, keepdim): the pair values, indices, the first index of the extreme
 * value), or the elementwise extreme of two tensors (max(self, other): promoted and
 * broadcast, as maximum). */
static kiln_status lower_max_min(call *c) {
  bool min = c->variant == 1;
  int x, y, idx, rank, axis;
  kiln_status s = tensor_arg(c, 0, &x);
  if (s) return s;
  if (c->a[1] && c->a[1]->kind == KL_TSV_TENSOR) {
    int a, b;
    if (given(c, 2)) return bad_arg(c, 2, "absent (the extreme of two tensors)");
    if ((s = operands(c, 0, 1, &a, &b))) return s;
    return (s = op2(c, min ? KL_OP_Min : KL_OP_Max, a, b, &y)) ? s : ret_tensor(c, y);
  }
  kl_op reduce = min ? KL_OP_ReduceMin : KL_OP_ReduceMax;
  if (!given(c, 1)) {
    if (given(c, 2)) return bad_arg(c, 2, "absent (max of every element)");
    return (s = node_int(c, reduce, 1, &x, "keepdims", 0, &y)) ? s : ret_tensor(c, y);
  }
  int64_t dim;
  bool keep;
  if ((s = int_arg(c, 1, 0, &dim)) || (s = bool_arg(c, 2, false, &keep)) ||
      (s = need_rank(c, x, &rank)) || (s = norm_axis(c, dim, rank ? rank : 1, &axis)))
    return s;
  int axes = const_ints(c, (int64_t[]){axis}, 1);
  if (axes < 0) return c->e->code;
  if ((s = node_int(c, reduce, 2, (int[]){x, axes}, "keepdims", keep, &y))) return s;
  int node = begin_node(c, min ? KL_OP_ArgMin : KL_OP_ArgMax, 1, &x, &idx);
  if (node >= 0) s = kl_node_set_int(c->g, node, "axis", axis, c->e);
  if (node >= 0 && !s) s = kl_node_set_int(c->g, node, "keepdims", keep, c->e);
  if ((s = end_node(c, node, s))) return s;
  return ret_pair(c, y, idx);
}

/* where(condition): the indices of its nonzero elements, a tuple of one 1-D int64
 * tensor per dim (NonZero's rows); where(condition, self, other): self where the
 * condition holds, else other (tensors or numbers, promoted as torch does). */
static kiln_status lower_where(call *c) {
  int cond, y, rank;
  kiln_status s = tensor_arg(c, 0, &cond);
  if (!s) s = cast(c, cond, KL_BOOL, &cond);
  if (s) return s;
  if (!given(c, 1) && !given(c, 2)) {
    int nz, rows[KL_MAX_RANK];
    if ((s = need_rank(c, cond, &rank))) return s;
    if (rank == 0) return bad_arg(c, 0, "a tensor of rank 1 or more (where of a 0-D tensor)");
    if ((s = op1(c, KL_OP_NonZero, cond, &nz))) return s;
    for (int k = 0; k < rank; k++) {
      int at = kl_ts_const_i64(c->b, (int64_t[]){k}, 1, true);
      if (at < 0) return c->e->code;
      if ((s = node_int(c, KL_OP_Gather, 2, (int[]){nz, at}, "axis", 0, &rows[k]))) return s;
    }
    if ((s = ret_list(c, rows, rank))) return s;
    c->out->kind = KL_TSV_TUPLE;
    return KILN_OK;
  }
  if (!given(c, 1) || !given(c, 2)) return bad_arg(c, given(c, 1) ? 2 : 1, "a tensor or number");
  int a, b;
  if (is_number(c->a[1]) && is_number(c->a[2])) {
    int kinds = 1 << c->a[1]->kind | 1 << c->a[2]->kind;
    kl_dtype dt = kinds & 1 << KL_TSV_FLOAT ? KL_F32 : kinds & 1 << KL_TSV_INT ? KL_I64 : KL_BOOL;
    a = kl_ts_const_scalar(c->b, dt, number(c->a[1]));
    b = kl_ts_const_scalar(c->b, dt, number(c->a[2]));
    if (a < 0 || b < 0) return c->e->code;
  } else if ((s = operands(c, 1, 2, &a, &b))) {
    return s;
  }
  return (s = op_node(c, KL_OP_Where, 3, (int[]){cond, a, b}, &y)) ? s : ret_tensor(c, y);
}

/* item(self): the number a one-element tensor holds (an int for integer dtypes, a float
 * for floating-point ones, a bool for bool); known while building when the tensor is a
 * constant, else a 0-D graph value, which code needing it while building (a list
 * index, a shape known to the graph) refuses. */
static kiln_status lower_item(call *c) {
  int x, y;
  int64_t n;
  double v;
  kiln_status s = tensor_arg(c, 0, &x);
  if (s) return s;
  kl_dtype dt = dtype_of(c, x);
  if (kl_type_numel(type_of(c, x), &n) && n != 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "item() of a tensor of %" PRId64 " elements: "
                   "expected one (torch: a Tensor with %" PRId64 " elements cannot be "
                   "converted to Scalar)", n, n);
  if (dt == KL_UNDEFINED) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "an unknown dtype");
  kl_tsv_kind kind = kl_dtype_is_float(dt) ? KL_TSV_FLOAT : dt == KL_BOOL ? KL_TSV_BOOL
                                                                            : KL_TSV_INT;
  if (const_scalar(c, x, &v)) {
    *c->out = (kl_tsv){.kind = kind, .f = v, .id = -1};
    if (kind != KL_TSV_FLOAT) c->out->i = dt == KL_BOOL ? v != 0 : kl_load_i64(
                                  c->g->values[x].data, dt, 0);
    return KILN_OK;
  }
  int scalar = kl_ts_const_i64(c->b, (int64_t[]){0}, 0, false);
  if (scalar < 0 || (s = op2(c, KL_OP_Reshape, x, scalar, &y))) return c->e->code;
  if (kind == KL_TSV_INT && (s = cast(c, y, KL_I64, &y))) return s;
  *c->out = (kl_tsv){.kind = kind, .id = y};
  return KILN_OK;
}

/* meshgrid(tensors, indexing): for n 1-D tensors, n tensors of their sizes' shape,
 * tensor k varying along dim k ("ij", the default) or with the first two dims swapped
 * ("xy") */
static kiln_status lower_meshgrid(call *c) {
  int ids[MAX_LIST], n, out[MAX_LIST], minus1 = const_ints(c, (int64_t[]){-1}, 1), shape;
  const char *ix;
  dimlist d = {0};
  kiln_status s = minus1 < 0 ? c->e->code : tensor_list(c, 0, ids, &n);
  if (!s) s = str_arg(c, 1, "ij", &ix);
  if (s) return s;
  bool xy = strcmp(ix, "xy") == 0;
  if (!xy && strcmp(ix, "ij") != 0)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "meshgrid indexing '%s': expected 'ij' or "
                   "'xy'", ix);
  if (n > KL_MAX_RANK) return bad_arg(c, 0, "a list of at most 8 tensors");
  for (int k = 0; k < n; k++) {
    if (rank_of(c, ids[k]) > 1 || rank_of(c, ids[k]) < 0)
      return bad_arg(c, 0, "a list of 0-D or 1-D tensors");
    if ((s = op2(c, KL_OP_Reshape, ids[k], minus1, &ids[k]))) return s;
  }
  for (int j = 0; j < n; j++) { /* dim j is the size of the tensor that varies along it */
    int src = xy && n > 1 && j < 2 ? 1 - j : j;
    if ((s = dims_copy(c, &d, ids[src], 0, 1))) return s;
  }
  if ((s = dims_value(c, &d, &shape))) return s;
  for (int k = 0; k < n; k++) {
    int64_t view[KL_MAX_RANK];
    int at = xy && n > 1 && k < 2 ? 1 - k : k, v;
    for (int j = 0; j < n; j++) view[j] = j == at ? -1 : 1;
    if ((v = const_ints(c, view, n)) < 0) return c->e->code;
    if ((s = op2(c, KL_OP_Reshape, ids[k], v, &v)) ||
        (s = op2(c, KL_OP_Expand, v, shape, &out[k])))
      return s;
    known_dims(c, v, out[k], &d);
  }
  return ret_list(c, out, n);
}

/* repeat(self, repeats): Tile, after leading dims of 1 when there are more repeats than
 * dims (fewer is torch's error too) */
static kiln_status lower_repeat(call *c) {
  int x, rank, reps, y;
  dimlist d = {0};
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = need_rank(c, x, &rank);
  if (!s) s = dims_from_arg(c, 1, &d);
  if (s) return s;
  if (d.n < rank)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "repeat with %d repeats of a tensor of rank "
                   "%d: expected at least as many repeats as dims", d.n, rank);
  if (d.n > KL_MAX_RANK) return bad_arg(c, 1, "a list of at most 8 repeats");
  if (d.n > rank) {
    int64_t lead[KL_MAX_RANK];
    for (int k = 0; k < d.n - rank; k++) lead[k] = k;
    int axes = const_ints(c, lead, d.n - rank);
    if (axes < 0 || (s = op2(c, KL_OP_Unsqueeze, x, axes, &x))) return c->e->code;
  }
  if ((s = dims_value(c, &d, &reps)) || (s = op2(c, KL_OP_Tile, x, reps, &y))) return s;
  return ret_tensor(c, y);
}

/* broadcast_tensors(tensors): each expanded to the shape they broadcast to (that of
 * an Expand of a scalar by each tensor's shape in turn) */
static kiln_status lower_broadcast_tensors(call *c) {
  int ids[MAX_LIST], n, out[MAX_LIST], acc = kl_ts_const_scalar(c->b, KL_U8, 0), shape;
  kiln_status s = acc < 0 ? c->e->code : tensor_list(c, 0, ids, &n);
  for (int k = 0; !s && k < n; k++)
    if (!(s = op1(c, KL_OP_Shape, ids[k], &shape))) s = op2(c, KL_OP_Expand, acc, shape, &acc);
  if (!s) s = op1(c, KL_OP_Shape, acc, &shape);
  for (int k = 0; !s && k < n; k++) s = op2(c, KL_OP_Expand, ids[k], shape, &out[k]);
  return s ? s : ret_list(c, out, n);
}

/* round(self, decimals=0): halves to even, as ONNX's Round; with decimals d,
 * round(x * 10^d) / 10^d, as torch computes it */
static kiln_status lower_round(call *c) {
  int x, y, scale;
  int64_t d;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = int_arg(c, 1, 0, &d);
  if (s) return s;
  kl_dtype dt = dtype_of(c, x);
  if (!kl_dtype_is_float(dt)) return ret_tensor(c, x); /* integers are whole already */
  if (d == 0) return (s = op1(c, KL_OP_Round, x, &y)) ? s : ret_tensor(c, y);
  if (d < -300 || d > 300) return bad_arg(c, 1, "a number of decimals from -300 to 300");
  if ((scale = kl_ts_const_scalar(c->b, dt, pow(10.0, (double)d))) < 0) return c->e->code;
  if ((s = op2(c, KL_OP_Mul, x, scale, &y)) || (s = op1(c, KL_OP_Round, y, &y)) ||
      (s = op2(c, KL_OP_Div, y, scale, &y)))
    return s;
  return ret_tensor(c, y);
}

/* _unique2(self, sorted, return_inverse, return_counts) (torch.unique with no dim): the
 * triple (the distinct elements, each element's index among them in self's shape, each
 * one's count) of ONNX's Unique of the flattened tensor; sorted=False gives them in the
 * order they first occur, an order torch leaves unspecified. */
static kiln_status lower_unique(call *c) {
  int x, out[4], shape, inverse;
  bool sorted;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = bool_arg(c, 1, true, &sorted);
  if (s) return s;
  int node = kl_ts_node(c->b, KL_OP_Unique, 1, &x, 4, out);
  s = end_node(c, node, node < 0 ? KILN_OK : kl_node_set_int(c->g, node, "sorted", sorted,
                                                               c->e));
  if (!s) s = op1(c, KL_OP_Shape, x, &shape);
  if (!s) s = op2(c, KL_OP_Reshape, out[2], shape, &inverse);
  if (s) return s;
  kl_tsv *items = kl_ts_alloc(c->b, 3 * sizeof *items);
  if (!items) return c->e->code;
  int ids[3] = {out[0], inverse, out[3]};
  for (int k = 0; k < 3; k++) items[k] = (kl_tsv){.kind = KL_TSV_TENSOR, .id = ids[k]};
  *c->out = (kl_tsv){.kind = KL_TSV_TUPLE, .items = items, .n = 3, .id = -1};
  return KILN_OK;
}

/* torchvision::nms(boxes, scores, iou_threshold): the indices of the boxes kept, best
 * score first (a box is dropped when its IoU with a kept one is above the threshold);
 * NonMaxSuppression of one batch and one class, with no limit on the boxes kept */
static kiln_status lower_nms(call *c) {
  int boxes, scores, sel, y;
  double iou;
  kiln_status s = tensor_arg(c, 0, &boxes);
  if (!s) s = tensor_arg(c, 1, &scores);
  if (!s) s = float_arg(c, 2, 0, &iou);
  if (s) return s;
  if (rank_of(c, boxes) != 2 || rank_of(c, scores) != 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "nms of boxes of rank %d and scores of rank "
                   "%d: expected [N, 4] and [N]", rank_of(c, boxes), rank_of(c, scores));
  int zero = const_ints(c, (int64_t[]){0}, 1), zero_one = const_ints(c, (int64_t[]){0, 1}, 2);
  int most = kl_ts_const_i64(c->b, (int64_t[]){INT64_MAX}, 1, true);
  int thr = kl_ts_const_scalar(c->b, KL_F32, iou);
  int col = kl_ts_const_i64(c->b, (int64_t[]){2}, 1, true);
  if (zero < 0 || zero_one < 0 || most < 0 || thr < 0 || col < 0) return c->e->code;
  if ((s = op2(c, KL_OP_Unsqueeze, boxes, zero, &boxes)) ||
      (s = op2(c, KL_OP_Unsqueeze, scores, zero_one, &scores)) ||
      (s = op_node(c, KL_OP_NonMaxSuppression, 4, (int[]){boxes, scores, most, thr}, &sel)) ||
      (s = node_int(c, KL_OP_Gather, 2, (int[]){sel, col}, "axis", 1, &y)))
    return s;
  return ret_tensor(c, y);
}

/* torchvision::roi_align(input, rois, spatial_scale, pooled_height, pooled_width,
 * sampling_ratio, aligned): rois [K, 5] rows of (batch index, x1, y1, x2, y2). ONNX's
 * RoiAlign (opset 16) computes torchvision's average: coordinate_transformation_mode
 * half_pixel for aligned, else output_half_pixel (rois of at least 1 x 1); a
 * sampling_ratio below 1 is adaptive (ceil(roi size / bins) samples), RoiAlign's 0. */
static kiln_status lower_roi_align(call *c) {
  int x, rois, idx, boxes, y;
  int64_t out_h, out_w, ratio;
  double scale;
  bool aligned;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = tensor_arg(c, 1, &rois);
  if (!s) s = float_arg(c, 2, 1, &scale);
  if (!s) s = int_arg(c, 3, 1, &out_h);
  if (!s) s = int_arg(c, 4, 1, &out_w);
  if (!s) s = int_arg(c, 5, -1, &ratio);
  if (!s) s = bool_arg(c, 6, false, &aligned);
  if (s) return s;
  const kl_type *r = type_of(c, rois);
  if (rank_of(c, x) != 4 || r->rank != 2 || (r->dims[1].size >= 0 && r->dims[1].size != 5))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "roi_align of an input of rank %d and rois "
                   "of rank %d: expected [N, C, H, W] and [K, 5]", rank_of(c, x), r->rank);
  if (out_h < 1 || out_w < 1 || out_h > INT32_MAX || out_w > INT32_MAX)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "roi_align to %" PRId64 " x %" PRId64
                   " bins", out_h, out_w);
  int col = kl_ts_const_i64(c->b, (int64_t[]){0}, 1, true);
  if (col < 0) return c->e->code;
  if ((s = node_int(c, KL_OP_Gather, 2, (int[]){rois, col}, "axis", 1, &idx)) ||
      (s = cast(c, idx, KL_I64, &idx)) || (s = slice_axis(c, rois, 1, 1, 5, &boxes)) ||
      (s = cast(c, boxes, dtype_of(c, x), &boxes)))
    return s;
  int node = begin_node(c, KL_OP_RoiAlign, 3, (int[]){x, boxes, idx}, &y);
  if (node < 0) return c->e->code;
  s = kl_node_set_string(c->g, node, "coordinate_transformation_mode",
                         aligned ? "half_pixel" : "output_half_pixel", c->e);
  if (!s) s = kl_node_set_int(c->g, node, "output_height", out_h, c->e);
  if (!s) s = kl_node_set_int(c->g, node, "output_width", out_w, c->e);
  if (!s) s = kl_node_set_int(c->g, node, "sampling_ratio", ratio < 0 ? 0 : ratio, c->e);
  if (!s) s = kl_node_set_float(c->g, node, "spatial_scale", (float)scale, c->e);
  if ((s = end_node(c, node, s))) return s;
  return ret_tensor(c, y);
}

/* ---- more ops of traced real models (issue 21) ---- */

/* A Concat of ids[0..n-1] along axis, as Concats of at most 64 inputs each. */
static kiln_status concat_many(call *c, int *ids, int n, int64_t axis, int *y) {
  kiln_status s = KILN_OK;
  while (!s && n > MAX_LIST) {
    int m = 0;
    for (int k = 0; !s && k < n; k += MAX_LIST)
      s = node_int(c, KL_OP_Concat, n - k < MAX_LIST ? n - k : MAX_LIST, ids + k, "axis", axis,
                   &ids[m++]);
    n = m;
  }
  return s ? s : n == 1 ? (*y = ids[0], KILN_OK) : node_int(c, KL_OP_Concat, n, ids, "axis", axis, y);
}

/* torch.cat leaves out 1-D tensors of no elements whatever the other tensors' rank (the
 * legacy rule transformers' caches rely on: a layer's keys start as torch.tensor([]),
 * then cat([keys, k], dim=-2)); at least one tensor is kept. */
static void skip_empty_1d(call *c, int *ids, int *n) {
  int m = 0;
  for (int k = 0; k < *n; k++) {
    const kl_type *t = type_of(c, ids[k]);
    if (!(t->rank == 1 && t->dims[0].size == 0)) ids[m++] = ids[k];
  }
  if (m > 0) *n = m;
}

/* addcmul(self, tensor1, tensor2, value) = self + value * tensor1 * tensor2, addcdiv
 * (variant 1) with tensor1 / tensor2; (value * tensor1) first, as torch computes it */
static kiln_status lower_addcmul(call *c) {
  int x, t1, t2, p, y;
  double value;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = tensor_arg(c, 1, &t1);
  if (!s) s = tensor_arg(c, 2, &t2);
  if (!s) s = float_arg(c, 3, 1, &value);
  if (s) return s;
  int r1 = rank_of(c, t1), r2 = rank_of(c, t2);
  kl_dtype dt = promote(dtype_of(c, t1), r1, dtype_of(c, t2), r2);
  dt = promote(dtype_of(c, x), rank_of(c, x), dt, r1 > r2 ? r1 : r2);
  if (dt != KL_UNDEFINED &&
      ((s = cast(c, x, dt, &x)) || (s = cast(c, t1, dt, &t1)) || (s = cast(c, t2, dt, &t2))))
    return s;
  p = t1;
  if (value != 1) {
    int k = kl_ts_const_scalar(c->b, dt == KL_UNDEFINED ? KL_F32 : dt, value);
    if (k < 0 || (s = op2(c, KL_OP_Mul, k, t1, &p))) return c->e->code;
  }
  if ((s = op2(c, c->variant ? KL_OP_Div : KL_OP_Mul, p, t2, &p)) || (s = op2(c, KL_OP_Add, x, p, &y)))
    return s;
  return ret_tensor(c, y);
}

/* diff(self, n, dim, prepend, append): prepend and append joined along dim, then n times
 * the differences of neighbours, x[1:] - x[:-1] (not-equal for bool, as torch) */
static kiln_status lower_diff(call *c) {
  int x, rank, axis, parts[3], np = 0, y;
  int64_t n, dim;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = int_arg(c, 1, 1, &n);
  if (!s) s = int_arg(c, 2, -1, &dim);
  if (!s) s = need_rank(c, x, &rank);
  if (!s && rank < 1) s = bad_arg(c, 0, "a tensor of at least one dim");
  if (!s) s = norm_axis(c, dim, rank, &axis);
  if (s) return s;
  if (n < 0 || n > MAX_LIST) return bad_arg(c, 1, "an order from 0 to 64");
  kl_dtype dt = dtype_of(c, x);
  for (int i = 3; i <= 4; i++) {
    if (i == 4) parts[np++] = x;
    if (!given(c, i)) continue;
    int p;
    if ((s = tensor_arg(c, i, &p))) return s;
    if (rank_of(c, p) >= 0 && rank_of(c, p) != rank)
      return bad_arg(c, i, "a tensor of the input's rank");
    if (dt != KL_UNDEFINED && (s = cast(c, p, dt, &p))) return s;
    parts[np++] = p;
  }
  y = x;
  if (np > 1 && (s = node_int(c, KL_OP_Concat, np, parts, "axis", axis, &y))) return s;
  for (int64_t k = 0; k < n; k++) {
    int a, b;
    if ((s = slice_axis(c, y, axis, 1, INT64_MAX, &a)) || (s = slice_axis(c, y, axis, 0, -1, &b)) ||
        (s = op2(c, dt == KL_BOOL ? KL_OP_Xor : KL_OP_Sub, a, b, &y)))
      return s;
  }
  return ret_tensor(c, y);
}

/* im2col(self, kernel_size, dilation, padding, stride), F.unfold: [N, C, H, W] (or
 * [C, H, W]) to [N, C * kh * kw, L], row c * kh * kw + i * kw + j holding tap (i, j)
 * of channel c at each of the L output positions. Exact: a Pad, one strided Slice per
 * tap, the taps stacked after the channels, and a Reshape. H and W must be known. */
static kiln_status lower_im2col(call *c) {
  int64_t g[4][MAX_LIST], out[2];
  int x, rank, y, ids[MAX_CAT], n;
  static const char *const what[] = {"a kernel size of two positive ints",
                                     "a dilation of two positive ints",
                                     "a padding of two non-negative ints",
                                     "a stride of two positive ints"};
  kiln_status s = tensor_arg(c, 0, &x);
  for (int i = 0; i < 4 && !s; i++) {
    if (!given(c, i + 1)) return bad_arg(c, i + 1, what[i]);
    if ((s = ints_arg(c, i + 1, 2, g[i], &n))) return s;
    if (n != 2) return bad_arg(c, i + 1, what[i]);
    for (int k = 0; k < 2; k++)
      if (g[i][k] < (i == 2 ? 0 : 1) || g[i][k] > (1 << 20)) return bad_arg(c, i + 1, what[i]);
  }
  if (!s) s = need_rank(c, x, &rank);
  if (s) return s;
  if (rank != 3 && rank != 4) return bad_arg(c, 0, "a tensor of rank 3 or 4");
  int64_t taps = g[0][0] * g[0][1];
  if (taps > MAX_CAT)
    return kl_fail(c->e, KILN_ERR_LIMIT, "im2col of %lld taps, kiln takes at most %d",
                   (long long)taps, MAX_CAT);
  const kl_type *t = type_of(c, x);
  for (int k = 0; k < 2; k++) {
    int64_t size = t->dims[rank - 2 + k].size;
    if (size < 0)
      return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "im2col of an input whose dim %d is not "
                     "known when the graph is built", rank - 2 + k);
    int64_t span = g[1][k] * (g[0][k] - 1) + 1, padded = size + 2 * g[2][k];
    if (padded < span)
      return kl_fail(c->e, KILN_ERR_SHAPE, "im2col: a kernel spanning %lld is larger than "
                     "dim %d padded (%lld)", (long long)span, rank - 2 + k, (long long)padded);
    out[k] = (padded - span) / g[3][k] + 1;
  }
  int zero = const_ints(c, (int64_t[]){0}, 1), two = const_ints(c, (int64_t[]){2}, 1);
  if (zero < 0 || two < 0) return c->e->code;
  if (rank == 3 && (s = op2(c, KL_OP_Unsqueeze, x, zero, &x))) return s;
  if (g[2][0] || g[2][1]) {
    int pads = const_ints(c, (int64_t[]){0, 0, g[2][0], g[2][1], 0, 0, g[2][0], g[2][1]}, 8);
    if (pads < 0 || (s = op2(c, KL_OP_Pad, x, pads, &x))) return c->e->code;
  }
  n = 0;
  for (int64_t i = 0; i < g[0][0]; i++)
    for (int64_t j = 0; j < g[0][1]; j++) {
      int64_t st[2] = {i * g[1][0], j * g[1][1]};
      int64_t en[2] = {st[0] + (out[0] - 1) * g[3][0] + 1, st[1] + (out[1] - 1) * g[3][1] + 1};
      int in[5] = {x, const_ints(c, st, 2), const_ints(c, en, 2),
                   const_ints(c, (int64_t[]){2, 3}, 2), const_ints(c, g[3], 2)};
      if (in[1] < 0 || in[2] < 0 || in[3] < 0 || in[4] < 0) return c->e->code;
      if ((s = op_node(c, KL_OP_Slice, 5, in, &ids[n])) ||
          (s = op2(c, KL_OP_Unsqueeze, ids[n], two, &ids[n])))
        return s;
      n++;
    }
  int shape = const_ints(c, (int64_t[]){0, -1, out[0] * out[1]}, 3);
  if (shape < 0) return c->e->code;
  if ((s = concat_many(c, ids, n, 2, &y)) || (s = op2(c, KL_OP_Reshape, y, shape, &y))) return s;
  if (rank == 3 && (s = op2(c, KL_OP_Squeeze, y, zero, &y))) return s;
  return ret_tensor(c, y);
}

/* instance_norm(input, weight, bias, running_mean, running_var, use_input_stats,
 * momentum, eps, cudnn_enabled): InstanceNormalization; without use_input_stats, the
 * running statistics normalize, as batch_norm's eval mode (the same parameters) */
static kiln_status lower_instance_norm(call *c) {
  int x, in[3], y;
  bool stats;
  double eps;
  kiln_status s = tensor_arg(c, 0, &x);
  if (!s) s = bool_arg(c, 5, true, &stats);
  if (!s) s = float_arg(c, 7, 1e-5, &eps);
  if (s) return s;
  if (!stats) return lower_batch_norm(c);
  const kl_type *t = type_of(c, x);
  if (t->rank >= 0 && t->rank < 3) return bad_arg(c, 0, "a tensor of rank 3 or more");
  int64_t ch = t->rank >= 2 ? t->dims[1].size : -1;
  if ((!given(c, 1) || !given(c, 2)) && ch < 0)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "instance_norm without weight or bias on an "
                   "input whose channel count is not known");
  in[0] = x;
  if (given(c, 1) ? (s = tensor_arg(c, 1, &in[1])) != KILN_OK : (in[1] = filled(c, x, ch, 1)) < 0)
    return c->e->code;
  if (given(c, 2) ? (s = tensor_arg(c, 2, &in[2])) != KILN_OK : (in[2] = filled(c, x, ch, 0)) < 0)
    return c->e->code;
  int node = begin_node(c, KL_OP_InstanceNormalization, 3, in, &y);
  s = node < 0 ? KILN_OK : kl_node_set_float(c->g, node, "epsilon", (float)eps, c->e);
  s = end_node(c, node, s);
  return s ? s : ret_tensor(c, y);
}

/* linspace(start, end, steps, dtype, layout, device, pin_memory) of numbers known while
 * building: a constant, float32 unless dtype, computed as torch does (the step in the
 * dtype for floats, the first half from start, the second back from end) */
static kiln_status lower_linspace(call *c) {
  bound b[2];
  int64_t steps, st, dims[1];
  kiln_status s = bound_arg(c, 0, 0, &b[0]);
  if (!s) s = bound_arg(c, 1, 0, &b[1]);
  if (!s) s = int_arg(c, 2, 0, &steps);
  if (!s) s = int_arg(c, 3, -1, &st);
  if (s) return s;
  for (int k = 0; k < 2; k++)
    if (b[k].id >= 0) return bad_arg(c, k, "a number known when the graph is built");
  if (steps < 0 || steps > (1 << 24)) return bad_arg(c, 2, "a count of steps from 0 to 2^24");
  kl_dtype dt = st >= 0 ? scalar_type(st) : KL_F32;
  if (dt == KL_UNDEFINED || dt == KL_BOOL)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "linspace of dtype number %lld", (long long)st);
  size_t bytes = (size_t)steps * kl_dtype_size(dt);
  if (bytes > (uint64_t)kl_ts_max_bytes(c->b))
    return kl_fail(c->e, KILN_ERR_LIMIT, "a linspace of %lld elements is over the limit of "
                   "%lld bytes a tensor may take", (long long)steps,
                   (long long)kl_ts_max_bytes(c->b));
  void *data = malloc(bytes ? bytes : 1);
  if (!data) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  double d0 = b[0].v, d1 = b[1].v, dstep = steps > 1 ? (d1 - d0) / (double)(steps - 1) : 0;
  float f0 = (float)d0, f1 = (float)d1, fstep = steps > 1 ? (f1 - f0) / (float)(steps - 1) : 0;
  bool single = dt == KL_F32 || dt == KL_F16 || dt == KL_BF16;
  for (int64_t k = 0; k < steps; k++) {
    double v;
    if (single) v = k < steps / 2 ? f0 + fstep * (float)k : f1 - fstep * (float)(steps - k - 1);
    else v = k < steps / 2 ? d0 + dstep * (double)k : d1 - dstep * (double)(steps - k - 1);
    kl_store_f64(data, dt, (size_t)k, v);
  }
  dims[0] = steps;
  int y = kl_ts_const_data(c->b, dt, 1, dims, data, bytes);
  return y < 0 ? c->e->code : ret_tensor(c, y);
}

/* grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners):
 * GridSample, whose mode and padding_mode lists are in torch's order */
static kiln_status lower_grid_sampler(call *c) {
  static const char *const modes[] = {"linear", "nearest", "cubic"};
  static const char *const pads[] = {"zeros", "border", "reflection"};
  int in[2], y;
  int64_t mode, pad;
  bool align;
  kiln_status s = tensor_arg(c, 0, &in[0]);
  if (!s) s = tensor_arg(c, 1, &in[1]);
  if (!s) s = int_arg(c, 2, 0, &mode);
  if (!s) s = int_arg(c, 3, 0, &pad);
  if (!s) s = bool_arg(c, 4, false, &align);
  if (s) return s;
  if (mode < 0 || mode > 2) return bad_arg(c, 2, "0 (bilinear), 1 (nearest) or 2 (bicubic)");
  if (pad < 0 || pad > 2) return bad_arg(c, 3, "0 (zeros), 1 (border) or 2 (reflection)");
  int node = begin_node(c, KL_OP_GridSample, 2, in, &y);
  s = node < 0 ? KILN_OK : kl_node_set_string(c->g, node, "mode", modes[mode], c->e);
  if (!s && node >= 0) s = kl_node_set_string(c->g, node, "padding_mode", pads[pad], c->e);
  if (!s && node >= 0) s = kl_node_set_int(c->g, node, "align_corners", align, c->e);
  s = end_node(c, node, s);
  return s ? s : ret_tensor(c, y);
}

#define P(...) ((const char *const[]){__VA_ARGS__, NULL})
#define X1 P("self")

static const aten_op ops[] = {
    {"_convolution", P("input", "weight", "bias", "stride", "padding", "dilation", "transposed",
                       "output_padding", "groups", "benchmark", "deterministic",
                       "cudnn_enabled", "allow_tf32"), lower_convolution, 0},
    {"_convolution_mode", P("input", "weight", "bias", "stride", "padding", "dilation",
                            "groups"), lower_conv, 0},
    {"conv1d", P("input", "weight", "bias", "stride", "padding", "dilation", "groups"), lower_conv, 0},
    {"conv2d", P("input", "weight", "bias", "stride", "padding", "dilation", "groups"), lower_conv, 0},
    {"conv3d", P("input", "weight", "bias", "stride", "padding", "dilation", "groups"), lower_conv, 0},
    {"conv_transpose1d", P("input", "weight", "bias", "stride", "padding", "output_padding",
                           "groups", "dilation"), lower_conv_transpose, 0},
    {"conv_transpose2d", P("input", "weight", "bias", "stride", "padding", "output_padding",
                           "groups", "dilation"), lower_conv_transpose, 0},
    {"conv_transpose3d", P("input", "weight", "bias", "stride", "padding", "output_padding",
                           "groups", "dilation"), lower_conv_transpose, 0},
    {"batch_norm", P("input", "weight", "bias", "running_mean", "running_var", "training",
                     "momentum", "eps", "cudnn_enabled"), lower_batch_norm, 0},
    {"layer_norm", P("input", "normalized_shape", "weight", "bias", "eps", "cudnn_enable"),
     lower_layer_norm, 0},
    {"group_norm", P("input", "num_groups", "weight", "bias", "eps", "cudnn_enabled"),
     lower_group_norm, 0},
    {"linear", P("input", "weight", "bias"), lower_linear, 0},
    {"matmul", P("self", "other"), lower_matmul, 0},
    {"mm", P("self", "mat2"), lower_matmul, 0},
    {"bmm", P("self", "mat2"), lower_matmul, 0},
    {"addmm", P("self", "mat1", "mat2", "beta", "alpha"), lower_addmm, 0},
    {"baddbmm", P("self", "batch1", "batch2", "beta", "alpha"), lower_baddbmm, 0},
    {"all", P("self", "dim", "keepdim"), lower_all_any, 0},
    {"any", P("self", "dim", "keepdim"), lower_all_any, 1},
    {"is_floating_point", P("self"), lower_is_floating_point, 0},
    {"add", P("self", "other", "alpha"), lower_arith, KL_OP_Add},
    {"sub", P("self", "other", "alpha"), lower_arith, KL_OP_Sub},
    {"mul", P("self", "other"), lower_arith, KL_OP_Mul},
    {"rsub", P("self", "other", "alpha"), lower_rsub, 0},
    {"div", P("self", "other", "rounding_mode"), lower_div, 0},
    {"floor_divide", P("self", "other"), lower_div, 1},
    {"floordiv", P("a", "b"), lower_div, 1}, /* a // b of ints, as scripted code writes it */
    {"pow", P("self", "exponent"), lower_pow, 0},
    {"relu", X1, lower_unary, KL_OP_Relu},
    {"sigmoid", X1, lower_unary, KL_OP_Sigmoid},
    {"tanh", X1, lower_unary, KL_OP_Tanh},
    {"exp", X1, lower_unary, KL_OP_Exp},
    {"log", X1, lower_unary, KL_OP_Log},
    {"log2", X1, lower_log2, 0},
    {"sqrt", X1, lower_unary, KL_OP_Sqrt},
    {"abs", X1, lower_unary, KL_OP_Abs},
    {"neg", X1, lower_unary, KL_OP_Neg},
    {"erf", X1, lower_unary, KL_OP_Erf},
    {"sin", X1, lower_unary, KL_OP_Sin},
    {"cos", X1, lower_unary, KL_OP_Cos},
    {"reciprocal", X1, lower_unary, KL_OP_Reciprocal},
    {"floor", X1, lower_unary, KL_OP_Floor},
    {"ceil", X1, lower_unary, KL_OP_Ceil},
    {"sign", X1, lower_unary, KL_OP_Sign},
    {"hardswish", X1, lower_unary, KL_OP_HardSwish},
    {"mish", X1, lower_unary, KL_OP_Mish},
    {"rsqrt", X1, lower_rsqrt, 0},
    {"silu", X1, lower_silu, 0},
    {"gelu", P("self", "approximate"), lower_gelu, 0},
    {"hardsigmoid", X1, lower_hardsigmoid, 0},
    {"leaky_relu", P("self", "negative_slope"), lower_leaky_relu, 0},
    {"elu", P("self", "alpha", "scale", "input_scale"), lower_elu, 0},
    {"softplus", P("self", "beta", "threshold"), lower_softplus, 0},
    {"clamp", P("self", "min", "max"), lower_clip, 0},
    {"clip", P("self", "min", "max"), lower_clip, 0},
    {"hardtanh", P("self", "min_val", "max_val"), lower_clip, 1},
    {"relu6", X1, lower_clip, 2},
    {"clamp_min", P("self", "min"), lower_clip, 3},
    {"clamp_max", P("self", "max"), lower_clip, 4},
    {"dropout", P("input", "p", "train"), lower_passthrough, 1},
    {"feature_dropout", P("input", "p", "train"), lower_passthrough, 1},
    {"alpha_dropout", P("input", "p", "train"), lower_passthrough, 1},
    {"contiguous", P("self", "memory_format"), lower_passthrough, 0},
    {"clone", P("self", "memory_format"), lower_passthrough, 0},
    {"detach", X1, lower_passthrough, 0},
    {"max_pool1d", P("self", "kernel_size", "stride", "padding", "dilation", "ceil_mode"), lower_pool, 1},
    {"max_pool2d", P("self", "kernel_size", "stride", "padding", "dilation", "ceil_mode"), lower_pool, 2},
    {"max_pool3d", P("self", "kernel_size", "stride", "padding", "dilation", "ceil_mode"), lower_pool, 3},
    {"avg_pool1d", P("self", "kernel_size", "stride", "padding", "ceil_mode",
                     "count_include_pad"), lower_pool, -1},
    {"avg_pool2d", P("self", "kernel_size", "stride", "padding", "ceil_mode",
                     "count_include_pad", "divisor_override"), lower_pool, -2},
    {"avg_pool3d", P("self", "kernel_size", "stride", "padding", "ceil_mode",
                     "count_include_pad", "divisor_override"), lower_pool, -3},
    {"adaptive_avg_pool1d", P("self", "output_size"), lower_adaptive, 1},
    {"adaptive_avg_pool2d", P("self", "output_size"), lower_adaptive, 2},
    {"adaptive_avg_pool3d", P("self", "output_size"), lower_adaptive, 3},
    {"adaptive_max_pool1d", P("self", "output_size"), lower_adaptive, -1},
    {"adaptive_max_pool2d", P("self", "output_size"), lower_adaptive, -2},
    {"adaptive_max_pool3d", P("self", "output_size"), lower_adaptive, -3},
    {"view", P("self", "size"), lower_view, 0},
    {"reshape", P("self", "shape"), lower_view, 0},
    {"flatten", P("self", "start_dim", "end_dim"), lower_flatten, 0},
    {"unflatten", P("self", "dim", "sizes"), lower_unflatten, 0},
    {"permute", P("self", "dims"), lower_permute, 0},
    {"transpose", P("self", "dim0", "dim1"), lower_transpose, 0},
    {"t", X1, lower_transpose, 1},
    {"swapaxes", P("self", "axis0", "axis1"), lower_transpose, 0},
    {"swapdims", P("self", "dim0", "dim1"), lower_transpose, 0},
    {"cat", P("tensors", "dim"), lower_cat, 0},
    {"concat", P("tensors", "dim"), lower_cat, 0},
    {"stack", P("tensors", "dim"), lower_cat, 1},
    {"chunk", P("self", "chunks", "dim"), lower_split, 0},
    {"split", P("self", "split_size", "dim"), lower_split, 1},
    {"split_with_sizes", P("self", "split_sizes", "dim"), lower_split, 2},
    {"unbind", P("self", "dim"), lower_split, 3},
    {"slice", P("self", "dim", "start", "end", "step"), lower_slice, 0},
    {"narrow", P("self", "dim", "start", "length"), lower_slice, 1},
    {"select", P("self", "dim", "index"), lower_select, 0},
    {"roll", P("self", "shifts", "dims"), lower_roll, 0},
    {"squeeze", P("self", "dim"), lower_squeeze, 0},
    {"unsqueeze", P("self", "dim"), lower_unsqueeze, 0},
    {"expand", P("self", "size", "implicit"), lower_expand, 0},
    {"expand_as", P("self", "other"), lower_expand_as, 0},
    {"reshape_as", P("self", "other"), lower_reshape_as, 0},
    {"view_as", P("self", "other"), lower_reshape_as, 0},
    {"_shape_as_tensor", X1, lower_shape_as_tensor, 0},
    {"arange", P("start", "end", "step", "dtype", "layout", "device", "pin_memory"),
     lower_arange, 0},
    {"gather", P("self", "dim", "index", "sparse_grad"), lower_gather, 0},
    {"cumsum", P("self", "dim", "dtype"), lower_cumsum, 0},
    {"argsort", P("self", "dim", "descending", "stable"), lower_sort, 0},
    {"sort", P("self", "dim", "descending", "stable"), lower_sort, 1},
    {"topk", P("self", "k", "dim", "largest", "sorted"), lower_topk, 0},
    {"_weight_norm", P("v", "g", "dim"), lower_weight_norm, 0},
    {"lstm", P("input", "hx", "params", "has_biases", "num_layers", "dropout", "train",
               "bidirectional", "batch_first"), lower_rnn, 0},
    {"gru", P("input", "hx", "params", "has_biases", "num_layers", "dropout", "train",
              "bidirectional", "batch_first"), lower_rnn, 1},
    {"upsample_nearest1d", P("input", "output_size", "scale_factors"), lower_upsample, 1},
    {"upsample_nearest2d", P("input", "output_size", "scale_factors", "scales_w"),
     lower_upsample, 2},
    {"upsample_nearest3d", P("input", "output_size", "scale_factors", "scales_h", "scales_w"),
     lower_upsample, 3},
    {"upsample_linear1d", P("input", "output_size", "align_corners", "scale_factors"),
     lower_upsample, -1},
    {"upsample_bilinear2d", P("input", "output_size", "align_corners", "scale_factors",
                              "scales_w"), lower_upsample, -2},
    {"upsample_trilinear3d", P("input", "output_size", "align_corners", "scale_factors",
                               "scales_h", "scales_w"), lower_upsample, -3},
    {"flip", P("self", "dims"), lower_flip, 0},
    {"upsample_bicubic2d", P("input", "output_size", "align_corners", "scale_factors",
                             "scales_w"), lower_upsample, -12},
    {"constant_pad_nd", P("self", "pad", "value"), lower_pad, 0},
    {"pad", P("self", "pad", "mode", "value"), lower_pad, 1},
    {"reflection_pad1d", P("self", "padding"), lower_pad, 2},
    {"reflection_pad2d", P("self", "padding"), lower_pad, 2},
    {"reflection_pad3d", P("self", "padding"), lower_pad, 2},
    {"replication_pad1d", P("self", "padding"), lower_pad, 3},
    {"replication_pad2d", P("self", "padding"), lower_pad, 3},
    {"replication_pad3d", P("self", "padding"), lower_pad, 3},
    {"softmax", P("self", "dim", "dtype"), lower_softmax, KL_OP_Softmax},
    {"log_softmax", P("self", "dim", "dtype"), lower_softmax, KL_OP_LogSoftmax},
    {"mean", P("self", "dim", "keepdim", "dtype"), lower_reduce, KL_OP_ReduceMean},
    {"sum", P("self", "dim", "keepdim", "dtype"), lower_reduce, KL_OP_ReduceSum},
    {"amax", P("self", "dim", "keepdim"), lower_reduce, KL_OP_ReduceMax},
    {"amin", P("self", "dim", "keepdim"), lower_reduce, KL_OP_ReduceMin},
    {"embedding", P("weight", "indices", "padding_idx", "scale_grad_by_freq", "sparse"),
     lower_embedding, 0},
    {"scaled_dot_product_attention", P("query", "key", "value", "attn_mask", "dropout_p",
                                       "is_causal", "scale", "enable_gqa"), lower_sdpa, 0},
    {"size", P("self", "dim"), lower_size, 0},
    {"len", P("a"), lower_len, 0},
    {"list", P("l"), lower_list, 0},
    {"__contains__", P("l", "item"), lower_contains, 0},
    {"prim::dtype", P("a"), lower_prim_dtype, 0},
    {"prim::min", P("a", "b"), lower_prim_minmax, 0},
    {"prim::max", P("a", "b"), lower_prim_minmax, 1},
    {"prim::is_nested", P("a"), lower_is_nested, 0},
    {"prim::device", P("a"), lower_prim_device, 0},
    {"prim::type", P("a"), lower_prim_type, 0},
    {"dim", X1, lower_dim, 0},
    {"__is__", P("self", "obj"), lower_is, 0},
    {"__isnot__", P("self", "obj"), lower_is, 1},
    {"__range_length", P("lo", "hi", "step"), lower_range_length, 0},
    {"__derive_index", P("index", "start", "step"), lower_derive_index, 0},
    {"argmax", P("self", "dim", "keepdim"), lower_argmax, 0},
    {"argmin", P("self", "dim", "keepdim"), lower_argmax, 1},
    {"numel", X1, lower_numel, 0},
    {"index", P("self", "indices"), lower_index, 0},
    {"remainder", P("self", "other"), lower_remainder, 0},
    {"einsum", P("equation", "tensors", "path"), lower_einsum, 0},
    {"linalg_vector_norm", P("self", "ord", "dim", "keepdim", "dtype"), lower_vector_norm, 0},
    /* norm(self, p, dim, keepdim): F.normalize's (the ScalarOpt_dim overload) */
    {"norm", P("self", "p", "dim", "keepdim", "dtype"), lower_vector_norm, 0},
    {"zeros_like", P("self", "dtype", "layout", "device", "pin_memory", "memory_format"),
     lower_fill_like, 0},
    {"ones_like", P("self", "dtype", "layout", "device", "pin_memory", "memory_format"),
     lower_fill_like, 1},
    {"zero", X1, lower_fill_like, 0},
    {"fill", P("self", "value"), lower_fill, 0},
    {"copy", P("self", "src", "non_blocking"), lower_fill, 0},
    {"tensor", P("data", "dtype", "device", "requires_grad"), lower_tensor, 0},
    {"masked_fill", P("self", "mask", "value"), lower_masked_fill, 0},
    {"index_put", P("self", "indices", "values", "accumulate"), lower_index_put, 0},
    {"index_fill", P("self", "dim", "index", "value"), lower_index_fill, 0},
    {"tril", P("self", "diagonal"), lower_trilu, 0},
    {"triu", P("self", "diagonal"), lower_trilu, 1},
    {"bitwise_not", X1, lower_not, 0},
    {"logical_not", X1, lower_not, 1},
    {"__not__", X1, lower_not, 1}, /* not b, as scripted code writes it */
    {"new_zeros", P("self", "size", "dtype", "layout", "device", "pin_memory"), lower_new_full, 0},
    {"new_ones", P("self", "size", "dtype", "layout", "device", "pin_memory"), lower_new_full, 1},
    {"new_full", P("self", "size", "fill_value", "dtype", "layout", "device", "pin_memory"),
     lower_new_full, 2},
    {"zeros", P("size", "dtype", "layout", "device", "pin_memory"), lower_new_full, 3},
    {"ones", P("size", "dtype", "layout", "device", "pin_memory"), lower_new_full, 4},
    {"full", P("size", "fill_value", "dtype", "layout", "device", "pin_memory"), lower_new_full, 5},
    {"__and__", P("self", "other"), lower_logic, 0},
    {"bitwise_and", P("self", "other"), lower_logic, 0},
    {"__or__", P("self", "other"), lower_logic, 1},
    {"bitwise_or", P("self", "other"), lower_logic, 1},
    {"__xor__", P("self", "other"), lower_logic, 2},
    {"bitwise_xor", P("self", "other"), lower_logic, 2},
    {"logical_and", P("self", "other"), lower_logic, 3},
    {"logical_or", P("self", "other"), lower_logic, 4},
    {"logical_xor", P("self", "other"), lower_logic, 5},
    {"eq", P("self", "other"), lower_compare, 0},
    {"ne", P("self", "other"), lower_compare, 1},
    {"lt", P("self", "other"), lower_compare, 2},
    {"gt", P("self", "other"), lower_compare, 3},
    {"le", P("self", "other"), lower_compare, 4},
    {"ge", P("self", "other"), lower_compare, 5},
    {"prim::NumToTensor", P("a"), lower_num_to_tensor, 0},
    {"int", P("a"), lower_number, 0},
    {"float", P("a"), lower_number, 1},
    {"bool", P("a"), lower_number, 2},
    {"device", P("type"), lower_device, 0},
    /* to(self, dtype | device | other, ...) by position; the dtype_layout overload by
     * keyword (dtype=, layout=, device=, pin_memory=): lower_to finds the dtype */
    {"to", P("self", "dtype", "layout", "device", "pin_memory", "non_blocking", "copy",
             "memory_format"), lower_to, 0},
    {"type_as", P("self", "other"), lower_type_as, 0},
    {"as_tensor", P("data", "dtype", "device"), lower_as_tensor, 0},
    {"scalar_tensor", P("s", "dtype", "layout", "device", "pin_memory"), lower_scalar_tensor, 0},
    {"full_like", P("self", "fill_value", "dtype", "layout", "device", "pin_memory",
                    "memory_format"), lower_full_like, 0},
    {"empty", P("size", "dtype", "layout", "device", "pin_memory", "memory_format"),
     lower_new_full, 3}, /* its contents are any: zeros */
    {"new_empty", P("self", "size", "dtype", "layout", "device", "pin_memory"),
     lower_new_full, 0},
    {"max", P("self", "dim", "keepdim"), lower_max_min, 0},
    {"min", P("self", "dim", "keepdim"), lower_max_min, 1},
    {"maximum", P("self", "other"), lower_max_min, 0},
    {"minimum", P("self", "other"), lower_max_min, 1},
    {"where", P("condition", "self", "other"), lower_where, 0},
    {"item", X1, lower_item, 0},
    {"meshgrid", P("tensors", "indexing"), lower_meshgrid, 0},
    {"repeat", P("self", "repeats"), lower_repeat, 0},
    {"broadcast_tensors", P("tensors"), lower_broadcast_tensors, 0},
    {"round", P("self", "decimals"), lower_round, 0},
    {"_unique2", P("self", "sorted", "return_inverse", "return_counts"), lower_unique, 0},
    {"torchvision::nms", P("dets", "scores", "iou_threshold"), lower_nms, 0},
    {"torchvision::roi_align", P("input", "rois", "spatial_scale", "pooled_height",
                                 "pooled_width", "sampling_ratio", "aligned"), lower_roi_align, 0},
    /* issue 21: more ops of traced real models */
    {"multiply", P("self", "other"), lower_arith, KL_OP_Mul},
    {"subtract", P("self", "other", "alpha"), lower_arith, KL_OP_Sub},
    {"divide", P("self", "other", "rounding_mode"), lower_div, 0},
    {"true_divide", P("self", "other"), lower_div, 0},
    {"addcmul", P("self", "tensor1", "tensor2", "value"), lower_addcmul, 0},
    {"addcdiv", P("self", "tensor1", "tensor2", "value"), lower_addcmul, 1},
    {"diff", P("self", "n", "dim", "prepend", "append"), lower_diff, 0},
    {"im2col", P("self", "kernel_size", "dilation", "padding", "stride"), lower_im2col, 0},
    {"instance_norm", P("input", "weight", "bias", "running_mean", "running_var",
                        "use_input_stats", "momentum", "eps", "cudnn_enabled"),
     lower_instance_norm, 0},
    {"linspace", P("start", "end", "steps", "dtype", "layout", "device", "pin_memory"),
     lower_linspace, 0},
    {"grid_sampler", P("input", "grid", "interpolation_mode", "padding_mode", "align_corners"),
     lower_grid_sampler, 0},
    {"grid_sampler_2d", P("input", "grid", "interpolation_mode", "padding_mode",
                          "align_corners"), lower_grid_sampler, 0},
    {"grid_sampler_3d", P("input", "grid", "interpolation_mode", "padding_mode",
                          "align_corners"), lower_grid_sampler, 0},
};

static const aten_op *find_op(const char *name) {
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if (strcmp(ops[i].name, name) == 0) return &ops[i];
  return NULL;
}

/* Bind arguments to the schema's parameters, as Python does. */
static kiln_status bind(call *c, const kl_tsv *args, const char *const *kw, int n) {
  int n_params = 0;
  while (c->params[n_params]) n_params++;
  for (int k = 0; k < n; k++) {
    int slot = k;
    if (kw && kw[k]) {
      for (slot = 0; slot < n_params && strcmp(c->params[slot], kw[k]) != 0; slot++) {}
      if (slot == n_params)
        return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "no parameter named '%s'", kw[k]);
    }
    if (slot >= n_params)
      return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "%d arguments, kiln knows the form with at "
                     "most %d", n, n_params);
    if (c->a[slot])
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "parameter '%s' given twice", c->params[slot]);
    c->a[slot] = &args[k];
    c->kw_bound[slot] = kw && kw[k];
  }
  return KILN_OK;
}

/* ---- functionalization: in-place writes, through views too ----
 *
 * PyTorch's in-place ops change memory that other tensors share: the base a view
 * (slice, select, view, permute, ...) was made from, and the base's other views. Graph
 * values never change, so a write makes new values: the written tensor's new contents
 * (the op's functional twin, in the tensor's dtype), then, up the chain of views it
 * was made by, each base with the written region replaced: a Concat of the untouched
 * parts around a slice, a ScatterElements for a slice with a step, the inverse
 * Transpose of a permute, a Reshape back for view/reshape/(un)squeeze. Every tensor id
 * of the trace that is a view or was written keeps a record: the value it holds now,
 * and for a view how it was made and from which value of its base; a view whose base
 * changed since is made again from the base's new value when next read. Views kiln
 * cannot follow exactly (made by expand, chunk, split or unbind, or a reshape or
 * flatten that PyTorch may have done by copying) are refused when written through,
 * or read after their base changed. */

enum { VK_BASE, VK_RESHAPE, VK_PERMUTE, VK_SLICE, VK_SLICE_AT, VK_SELECT, VK_OPAQUE };

typedef struct view_rec {
  int cur;      /* the value the id holds now */
  int parent;   /* a view: its base's id; else -1 */
  int seen;     /* the base's value that cur was made from */
  int kind;     /* VK_* */
  bool strided; /* not contiguous in PyTorch, as far as kiln can tell */
  int axis;     /* slice, select: the dim, and its size in the base */
  int64_t size, start, end, step;
  int start_id, end_id; /* VK_SLICE_AT: the bounds, [1] int64 values of the graph */
  int64_t perm[KL_MAX_RANK];
  int rank;
  const char *op; /* the ATen op that made the view */
} view_rec;

typedef struct fn_state {
  int *index; /* by value id: 1 + its record, or 0 */
  int cap_index;
  view_rec *recs;
  int n_recs, cap_recs;
} fn_state;

#define MAX_VIEW_CHAIN 4096

static fn_state *fn_get(kl_ts_build *b) { return *kl_ts_aten_state(b); }

static int rec_of(const fn_state *st, int id) {
  return st && id >= 0 && id < st->cap_index && st->index[id] ? st->index[id] - 1 : -1;
}

/* Grow an array of kl_ts_alloc'd memory to cap elements of size (the old block stays
 * until the builder is freed). */
static void *grow(call *c, void *old, size_t n_old, size_t cap, size_t size) {
  if (cap > SIZE_MAX / size) {
    kl_fail(c->e, KILN_ERR_LIMIT, "too many values to track");
    return NULL;
  }
  void *p = kl_ts_alloc(c->b, cap * size);
  if (p && old) memcpy(p, old, n_old * size);
  return p;
}

/* The record of id, made (holding id itself, not a view) if it has none; -1 on failure. */
static int rec_new(call *c, int id) {
  void **slot = kl_ts_aten_state(c->b);
  if (!*slot && !(*slot = kl_ts_alloc(c->b, sizeof(fn_state)))) return -1;
  fn_state *st = *slot;
  int r = rec_of(st, id);
  if (r >= 0) return r;
  if (id >= st->cap_index) {
    int cap = c->g->n_values > id ? c->g->n_values : id + 1;
    if (cap > INT32_MAX / 2) return kl_fail(c->e, KILN_ERR_LIMIT, "too many values"), -1;
    cap *= 2;
    int *ix = grow(c, st->index, (size_t)st->cap_index, (size_t)cap, sizeof *ix);
    if (!ix) return -1;
    st->index = ix;
    st->cap_index = cap;
  }
  if (st->n_recs == st->cap_recs) {
    int cap = st->cap_recs ? st->cap_recs : 32;
    if (cap > INT32_MAX / 2) return kl_fail(c->e, KILN_ERR_LIMIT, "too many views"), -1;
    view_rec *rs = grow(c, st->recs, (size_t)st->n_recs, (size_t)cap * 2, sizeof *rs);
    if (!rs) return -1;
    st->recs = rs;
    st->cap_recs = cap * 2;
  }
  r = st->n_recs++;
  st->recs[r] = (view_rec){.cur = id, .parent = -1, .seen = -1, .kind = VK_BASE};
  st->index[id] = r + 1;
  return r;
}

/* The shape of x as a value: a constant when every dim is known. */
static kiln_status shape_value(call *c, int x, int *out) {
  const kl_type *t = type_of(c, x);
  int64_t dims[KL_MAX_RANK];
  bool known = t->rank >= 0;
  for (int k = 0; known && k < t->rank; k++) known = (dims[k] = t->dims[k].size) >= 0;
  if (known) return const_id(c, const_ints(c, dims, t->rank), out);
  return op1(c, KL_OP_Shape, x, out);
}

/* The view v made again from its base's value p; old is the value it held. */
static kiln_status view_forward(call *c, const view_rec *v, int p, int old, int *y) {
  int shape, in[5];
  switch (v->kind) {
  case VK_RESHAPE: {
    kiln_status s = shape_value(c, old, &shape);
    return s ? s : op2(c, KL_OP_Reshape, p, shape, y);
  }
  case VK_PERMUTE:
    return transpose_node(c, p, v->perm, v->rank, y);
  case VK_SLICE_AT:
    in[0] = p;
    in[1] = v->start_id;
    in[2] = v->end_id;
    in[3] = const_ints(c, (int64_t[]){v->axis}, 1);
    return in[3] < 0 ? c->e->code : op_node(c, KL_OP_Slice, 4, in, y);
  case VK_SLICE:
    in[0] = p;
    in[1] = const_ints(c, &v->start, 1);
    in[2] = const_ints(c, &v->end, 1);
    in[3] = const_ints(c, (int64_t[]){v->axis}, 1);
    in[4] = const_ints(c, &v->step, 1);
    if (in[1] < 0 || in[2] < 0 || in[3] < 0 || in[4] < 0) return c->e->code;
    return op_node(c, KL_OP_Slice, 5, in, y);
  default: { /* VK_SELECT */
    int idx = kl_ts_const_i64(c->b, &v->start, 1, true);
    return idx < 0 ? c->e->code : node_int(c, KL_OP_Gather, 2, (int[]){p, idx}, "axis", v->axis, y);
  }
  }
}

/* Bound b ([1] int64) of a slice of a dim of `size` elements ([1] int64), as Python
 * takes it: counted from the end when negative, then clamped to 0..size: *out. (At
 * most size before adding it: an end of None is INT64_MAX.) */
static kiln_status slice_bound_at(call *c, int b, int size, int *out) {
  int zero = const_ints(c, (int64_t[]){0}, 1), from_end, neg, at_most;
  if (zero < 0) return c->e->code;
  kiln_status s = op2(c, KL_OP_Min, b, size, &at_most);
  if (!s) s = op2(c, KL_OP_Add, at_most, size, &from_end);
  if (!s) s = op2(c, KL_OP_Less, at_most, zero, &neg);
  if (!s) s = op_node(c, KL_OP_Where, 3, (int[]){neg, from_end, at_most}, out);
  if (!s) s = op2(c, KL_OP_Max, *out, zero, out);
  return s;
}

/* Base value p with the region [start, end) along v->axis, bounds that the graph
 * computes (torchvision's mask pasting writes each mask into im_mask[y0:y1, x0:x1]),
 * replaced by y: y padded to p's shape where the region lies, and Where of the region's
 * positions. */
static kiln_status slice_write_at(call *c, const view_rec *v, int p, int y, int *np) {
  int size, start, end, after, idx, lo, hi, in, padded, pads[2 * KL_MAX_RANK];
  int rank = v->rank, axis = v->axis;
  kiln_status s;
  if (rank < 1 || rank > KL_MAX_RANK)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "a write through a slice of a tensor of "
                   "unknown rank whose bounds the graph computes");
  if (v->size >= 0) {
    if ((size = const_ints(c, &v->size, 1)) < 0) return c->e->code;
  } else {
    int shape, at = const_ints(c, (int64_t[]){axis}, 1);
    if (at < 0) return c->e->code;
    if ((s = op1(c, KL_OP_Shape, p, &shape)) ||
        (s = node_int(c, KL_OP_Gather, 2, (int[]){shape, at}, "axis", 0, &size)))
      return s;
  }
  if ((s = slice_bound_at(c, v->start_id, size, &start)) ||
      (s = slice_bound_at(c, v->end_id, size, &end)) ||
      (s = op2(c, KL_OP_Max, end, start, &end)) || (s = op2(c, KL_OP_Sub, size, end, &after)))
    return s;
  int zero = const_ints(c, (int64_t[]){0}, 1), all_pads;
  if (zero < 0) return c->e->code;
  for (int k = 0; k < rank; k++) { /* (ONNX's pads: every dim's start, then every end) */
    pads[k] = k == axis ? start : zero;
    pads[rank + k] = k == axis ? after : zero;
  }
  if ((s = node_int(c, KL_OP_Concat, 2 * rank, pads, "axis", 0, &all_pads))) return s;
  int node = begin_node(c, KL_OP_Pad, 2, (int[]){y, all_pads}, &padded);
  if ((s = end_node(c, node, node < 0 ? KILN_OK
                                      : kl_node_set_string(c->g, node, "mode", "constant", c->e))))
    return s;
  /* the region: positions along the axis in [start, end), broadcast over the others */
  int64_t dims[KL_MAX_RANK];
  for (int k = 0; k < rank; k++) dims[k] = k == axis ? -1 : 1;
  int zero0 = kl_ts_const_i64(c->b, (int64_t[]){0}, 1, true);
  int one0 = kl_ts_const_i64(c->b, (int64_t[]){1}, 1, true), shape = const_ints(c, dims, rank);
  int first = const_ints(c, (int64_t[]){0}, 1), size0;
  if (zero0 < 0 || one0 < 0 || shape < 0 || first < 0) return c->e->code;
  if ((s = op2(c, KL_OP_Squeeze, size, first, &size0)) ||
      (s = op_node(c, KL_OP_Range, 3, (int[]){zero0, size0, one0}, &idx)) ||
      (s = op2(c, KL_OP_Reshape, idx, shape, &idx)) ||
      (s = op2(c, KL_OP_GreaterOrEqual, idx, start, &lo)) ||
      (s = op2(c, KL_OP_Less, idx, end, &hi)) || (s = op2(c, KL_OP_And, lo, hi, &in)))
    return s;
  return op_node(c, KL_OP_Where, 3, (int[]){in, padded, p}, np);
}

/* Base value p with the region that view v covers replaced by y: *np. */
static kiln_status view_backward(call *c, const view_rec *v, int p, int y, int *np) {
  kiln_status s;
  if (v->kind == VK_SLICE_AT) return slice_write_at(c, v, p, y, np);
  if (v->kind == VK_RESHAPE) {
    int shape;
    return (s = shape_value(c, p, &shape)) ? s : op2(c, KL_OP_Reshape, y, shape, np);
  }
  if (v->kind == VK_PERMUTE) {
    int64_t inv[KL_MAX_RANK];
    for (int k = 0; k < v->rank; k++) inv[v->perm[k]] = k;
    return transpose_node(c, y, inv, v->rank, np);
  }
  if (v->kind == VK_SELECT) {
    int axes = const_ints(c, (int64_t[]){v->axis}, 1);
    if (axes < 0) return c->e->code;
    if ((s = op2(c, KL_OP_Unsqueeze, y, axes, &y))) return s;
  }
  int64_t start = v->start, end = v->kind == VK_SELECT ? v->start + 1 : v->end;
  if (v->kind == VK_SELECT || v->step == 1) {
    int parts[3], n = 0;
    if (start >= end) return *np = p, KILN_OK; /* an empty slice */
    if (start > 0 && (s = slice_axis(c, p, v->axis, 0, start, &parts[n++]))) return s;
    parts[n++] = y;
    if ((v->size < 0 ? end < INT64_MAX : end < v->size) &&
        (s = slice_axis(c, p, v->axis, end, v->size < 0 ? INT64_MAX : v->size, &parts[n++])))
      return s;
    if (n == 1) return *np = y, KILN_OK;
    return node_int(c, KL_OP_Concat, n, parts, "axis", v->axis, np);
  }
  /* a slice with a step: ScatterElements with each element's index along the dim, a
   * [1, .., count, .., 1] constant expanded to the shape of y */
  /* start <= end <= the dim's size and step >= 1 (a step other than 1 is recorded only
   * for a dim of known size), so neither this nor start + k * step below can overflow,
   * whatever the step (a step of 2^63 - 1 takes one element) */
  int64_t count = end > start ? (end - start - 1) / v->step + 1 : 0, dims[KL_MAX_RANK];
  if (v->rank < 1 || v->rank > KL_MAX_RANK || count < 1) return *np = p, KILN_OK;
  size_t idx_bytes;
  if (kl_mul_overflow_size((size_t)count, sizeof(int64_t), &idx_bytes))
    return kl_fail(c->e, KILN_ERR_LIMIT, "writing through a slice of %lld elements: too many "
                   "to index", (long long)count);
  int64_t *idx = malloc(idx_bytes);
  if (!idx) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the indices of "
                           "a write through a slice (%zu bytes)", idx_bytes);
  for (int64_t k = 0; k < count; k++) idx[k] = start + k * v->step;
  for (int k = 0; k < v->rank; k++) dims[k] = k == v->axis ? count : 1;
  int pattern = kl_ts_const_data(c->b, KL_I64, v->rank, dims, idx, idx_bytes);
  int ids, shape;
  if (pattern < 0) return c->e->code;
  if ((s = op1(c, KL_OP_Shape, y, &shape)) || (s = op2(c, KL_OP_Expand, pattern, shape, &ids)))
    return s;
  return node_int(c, KL_OP_ScatterElements, 3, (int[]){p, ids, y}, "axis", v->axis, np);
}

static kiln_status opaque_view(call *c, const view_rec *v, const char *what) {
  return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "%s a view made by aten::%s%s; kiln cannot tell "
                 "which elements the two share: export the model to ONNX", what, v->op,
                 v->kind == VK_OPAQUE && (strcmp(v->op, "reshape") == 0 ||
                                          strcmp(v->op, "flatten") == 0 ||
                                          strcmp(v->op, "reshape_as") == 0 ||
                                          strcmp(v->op, "unflatten") == 0)
                     ? " of a non-contiguous tensor (PyTorch may have copied it)" : "");
}

/* The value tensor id holds now (*out), its view made again where its base changed. */
static kiln_status current(call *c, int id, int *out, int depth) {
  fn_state *st = fn_get(c->b);
  int r = rec_of(st, id), p;
  *out = id;
  if (r < 0) return KILN_OK;
  if (depth > MAX_VIEW_CHAIN)
    return kl_fail(c->e, KILN_ERR_LIMIT, "a chain of over %d views", MAX_VIEW_CHAIN);
  if (st->recs[r].parent >= 0) {
    kiln_status s = current(c, st->recs[r].parent, &p, depth + 1);
    if (s) return s;
    if (p != st->recs[r].seen) {
      view_rec v = st->recs[r];
      int y;
      if (v.kind == VK_OPAQUE) return opaque_view(c, &v, "a tensor written in place is read through");
      if ((s = view_forward(c, &v, p, v.cur, &y))) return s;
      same_shape(c, y, v.cur);
      st->recs[r].cur = y;
      st->recs[r].seen = p;
    }
  }
  *out = st->recs[r].cur;
  return KILN_OK;
}

kiln_status kl_aten_current(kl_ts_build *b, int id, int *out) {
  call c = {.b = b, .g = kl_ts_graph(b), .e = kl_ts_err(b)};
  return current(&c, id, out, 0);
}

/* Tensor id (as the trace names it) now holds y: so do, up its chain of views, the
 * bases it was made from, each with the view's region replaced. */
static kiln_status write_through(call *c, int id, int y) {
  for (int depth = 0;; depth++) {
    int r = rec_new(c, id), p, np;
    if (r < 0) return c->e->code;
    if (depth > MAX_VIEW_CHAIN)
      return kl_fail(c->e, KILN_ERR_LIMIT, "a chain of over %d views", MAX_VIEW_CHAIN);
    fn_state *st = fn_get(c->b);
    view_rec v = st->recs[r];
    st->recs[r].cur = y;
    if (v.parent < 0) return KILN_OK;
    if (v.kind == VK_OPAQUE) return opaque_view(c, &v, "an in-place write into");
    kiln_status s = current(c, v.parent, &p, 0);
    if (!s) s = view_backward(c, &v, p, y, &np);
    if (s) return s;
    same_shape(c, np, p);
    st = fn_get(c->b);
    st->recs[rec_of(st, id)].seen = np;
    id = v.parent;
    y = np;
  }
}

/* Ops whose result aliases their input's memory in PyTorch. */
static const char *const view_ops[] = {
    "slice", "select", "narrow", "view", "reshape", "transpose", "t", "permute", "expand",
    "expand_as", "unsqueeze", "squeeze", "chunk", "split", "split_with_sizes", "unbind",
    "flatten", "unflatten", "swapaxes", "swapdims", "reshape_as", "view_as", NULL};

static bool is_view_op(const char *name) {
  for (int i = 0; view_ops[i]; i++)
    if (strcmp(view_ops[i], name) == 0) return true;
  return false;
}

static bool rec_strided(call *c, int id) {
  fn_state *st = fn_get(c->b);
  int r = rec_of(st, id);
  return r >= 0 && st->recs[r].strided;
}

/* Whether any dim of x before axis is not 1: a slice along axis is then strided. */
static bool outer_dims(call *c, int x, int axis) {
  const kl_type *t = type_of(c, x);
  for (int k = 0; k < axis && k < t->rank; k++)
    if (t->dims[k].size != 1) return true;
  return false;
}

/* How view op `name` made a view of base (the value the call read): into v. */
static void classify_view(call *c, const char *name, int base, view_rec *v) {
  const kl_type *t = type_of(c, base);
  int64_t a = 0, b = 0, step = 1;
  int n = 0;
  v->kind = VK_OPAQUE;
  v->rank = t->rank;
  if (strcmp(name, "view") == 0 || strcmp(name, "view_as") == 0 ||
      strcmp(name, "squeeze") == 0 || strcmp(name, "unsqueeze") == 0 ||
      (!v->strided && (strcmp(name, "reshape") == 0 || strcmp(name, "reshape_as") == 0 ||
                       strcmp(name, "flatten") == 0 || strcmp(name, "unflatten") == 0))) {
    v->kind = VK_RESHAPE;
  } else if (strcmp(name, "permute") == 0) {
    if (ints_arg(c, 1, 0, v->perm, &n) == KILN_OK && n == t->rank && n <= KL_MAX_RANK) {
      bool ok = true;
      for (int k = 0; k < n; k++) ok &= norm_axis(c, v->perm[k], n, &v->axis) == KILN_OK &&
                                        ((v->perm[k] = v->axis), true);
      v->kind = ok ? VK_PERMUTE : VK_OPAQUE;
    }
  } else if (strcmp(name, "transpose") == 0 || strcmp(name, "t") == 0 ||
             strcmp(name, "swapaxes") == 0 || strcmp(name, "swapdims") == 0) {
    int d0 = 0, d1 = 1;
    bool ok = t->rank >= 2 && t->rank <= KL_MAX_RANK &&
              (name[0] == 't' && name[1] == 0 ? true
                                              : peek_int(c, 1, 0, &a) && peek_int(c, 2, 1, &b) &&
                                                    !norm_axis(c, a, t->rank, &d0) &&
                                                    !norm_axis(c, b, t->rank, &d1));
    if (ok) {
      for (int k = 0; k < t->rank; k++) v->perm[k] = k;
      v->perm[d0] = d1;
      v->perm[d1] = d0;
      v->kind = VK_PERMUTE;
    }
  } else if (strcmp(name, "slice") == 0 || strcmp(name, "narrow") == 0 ||
             strcmp(name, "select") == 0) {
    bool sel = name[1] == 'e', narrow = name[0] == 'n';
    int64_t dim;
    if (!peek_int(c, 1, 0, &dim) || norm_axis(c, dim, t->rank, &v->axis)) return;
    v->size = t->dims[v->axis].size; /* -1: unknown, then only bounds from the start */
    if (sel) {
      if (!peek_int(c, 2, 0, &a)) return;
      if (a < 0 && v->size >= 0) a += v->size;
      /* a size not known while building: any index but the largest (the region it
       * covers ends at a + 1) */
      if (a < 0 || (v->size >= 0 && a >= v->size) || a == INT64_MAX) return;
      v->start = a;
      v->kind = VK_SELECT;
    } else {
      if (!narrow && (!peek_int(c, 2, 0, &a) || !peek_int(c, 3, INT64_MAX, &b)) &&
          peek_int(c, 4, 1, &step) && step == 1) { /* bounds that the graph computes */
        if (int_as_list(c, 2, 0, &v->start_id) || int_as_list(c, 3, INT64_MAX, &v->end_id))
          return;
        v->kind = VK_SLICE_AT;
        v->strided |= outer_dims(c, base, v->axis);
        return;
      }
      if (!peek_int(c, 2, 0, &a)) return;
      if (narrow) {
        int64_t len;
        if (!peek_int(c, 3, 0, &len) || __builtin_add_overflow(a, len, &b)) return;
      } else if (!peek_int(c, 3, INT64_MAX, &b) || !peek_int(c, 4, 1, &step) || step < 1) {
        return;
      }
      if (v->size < 0) { /* bounds counted from the start, a step of 1 */
        if (a < 0 || b < 0 || step != 1) return;
        v->start = a;
        v->end = b < a ? a : b;
      } else {
        if (a < 0) a += v->size;
        if (b < 0) b += v->size;
        v->start = a < 0 ? 0 : a > v->size ? v->size : a;
        v->end = b < v->start ? v->start : b > v->size ? v->size : b;
      }
      v->step = step;
      v->kind = VK_SLICE;
    }
  }
  if (v->kind == VK_PERMUTE)
    for (int k = 0; k < v->rank; k++) v->strided |= v->perm[k] != k;
  if (v->kind == VK_SELECT) v->strided |= outer_dims(c, base, v->axis);
  if (v->kind == VK_SLICE)
    v->strided |= outer_dims(c, base, v->axis) &&
                  !(v->start == 0 && v->end == (v->size < 0 ? INT64_MAX : v->size) &&
                    v->step == 1);
  if (v->kind == VK_OPAQUE) v->strided = true;
}

/* Records for the new tensors of a view op's result: views of `key` (as the trace
 * names it), made from its value base. */
static kiln_status record_views(call *c, const char *name, const kl_tsv *out, int key, int base) {
  if (out->kind == KL_TSV_LIST || out->kind == KL_TSV_TUPLE) {
    for (int k = 0; k < out->n; k++) {
      kiln_status s = record_views(c, name, &out->items[k], key, base);
      if (s) return s;
    }
    return KILN_OK;
  }
  if (out->kind != KL_TSV_TENSOR || out->id == base) return KILN_OK;
  view_rec v = {.cur = out->id, .parent = key, .seen = base, .op = name,
                .strided = rec_strided(c, key)};
  classify_view(c, name, base, &v);
  int r = rec_new(c, out->id);
  if (r < 0) return c->e->code;
  fn_get(c->b)->recs[r] = v;
  return KILN_OK;
}

/* A copy of the arguments with every tensor as the value it holds now. */
static kiln_status resolve_args(call *c, const kl_tsv *args, int n, kl_tsv *out, int depth) {
  for (int k = 0; k < n; k++) {
    out[k] = args[k];
    if (args[k].kind == KL_TSV_TENSOR) {
      kiln_status s = current(c, args[k].id, &out[k].id, 0);
      if (s) return s;
    } else if ((args[k].kind == KL_TSV_LIST || args[k].kind == KL_TSV_TUPLE) && depth < 4 &&
               args[k].n > 0 && fn_get(c->b)) {
      kl_tsv *items = kl_ts_alloc(c->b, sizeof *items * (size_t)args[k].n);
      if (!items) return c->e->code;
      kiln_status s = resolve_args(c, args[k].items, args[k].n, items, depth + 1);
      if (s) return s;
      out[k].items = items;
    }
  }
  return KILN_OK;
}

bool kl_aten_known(const char *name) {
  if (find_op(name)) return true;
  size_t len = strlen(name);
  if (len < 2 || len >= 128 || name[len - 1] != '_') return false;
  char base[128];
  memcpy(base, name, len - 1);
  base[len - 1] = 0;
  return find_op(base) != NULL;
}

/* Numbers of the result (in its lists and tuples too) that the graph computed from
 * constants, which the build ran (kl_ts_finish): numbers known while building, so that
 * code that needs one then (a slice's bounds, a range, an if) takes them. */
static void known_numbers(call *c, kl_tsv *v, int depth) {
  if ((v->kind == KL_TSV_LIST || v->kind == KL_TSV_TUPLE) && depth < 8)
    for (int k = 0; k < v->n; k++) known_numbers(c, &v->items[k], depth + 1);
  if ((v->kind != KL_TSV_INT && v->kind != KL_TSV_FLOAT && v->kind != KL_TSV_BOOL) ||
      v->id < 0)
    return;
  int64_t i = 0;
  double f = 0;
  if (v->kind == KL_TSV_FLOAT ? const_scalar(c, v->id, &f) : const_int(c, v->id, &i)) {
    if (v->kind == KL_TSV_FLOAT) v->f = f;
    else v->i = v->kind == KL_TSV_BOOL ? i != 0 : i;
    v->id = -1;
    v->dim_sym = 0;
  }
}

kiln_status kl_aten_call(kl_ts_build *b, const char *name, const kl_tsv *args,
                         const char *const *kw, int n_args, kl_tsv *out) {
  kl_err *e = kl_ts_err(b);
  const aten_op *op = find_op(name);
  size_t len = strlen(name);
  bool in_place = !op && len > 1 && name[len - 1] == '_' && len < 128;
  if (in_place) { /* relu_ -> relu */
    char base[128];
    memcpy(base, name, len - 1);
    base[len - 1] = 0;
    op = find_op(base);
  }
  if (!op)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "kiln has no lowering for this ATen op; export "
                   "the model to ONNX instead");
  if (n_args > MAX_PARAMS)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "%d arguments", n_args);
  call c = {.b = b, .g = kl_ts_graph(b), .e = e, .params = op->params, .variant = op->variant,
            .out = out};
  kl_tsv now[MAX_PARAMS];
  memset(out, 0, sizeof *out);
  out->id = -1;
  kiln_status s = resolve_args(&c, args, n_args, now, 0);
  if (s != KILN_OK || (s = bind(&c, now, kw, n_args)) != KILN_OK || (s = op->fn(&c)) != KILN_OK)
    return s;
  known_numbers(&c, out, 0);
  int key = n_args > 0 && args[0].kind == KL_TSV_TENSOR ? args[0].id : -1;
  int base = key >= 0 ? now[0].id : -1;
  if (key < 0) return KILN_OK;
  if (out->kind == KL_TSV_TENSOR && out->id == base) {
    /* clone, and contiguous of a strided tensor, copy in PyTorch: a value of their own */
    if (strcmp(op->name, "clone") == 0 ||
        (strcmp(op->name, "contiguous") == 0 && rec_strided(&c, key)))
      return (s = op1(&c, KL_OP_Identity, base, &out->id)) ? s : KILN_OK;
    out->id = key; /* the result aliases the argument: the same tensor */
    return KILN_OK;
  }
  if (in_place) { /* the functional result is what the tensor holds now */
    if (out->kind != KL_TSV_TENSOR)
      return kl_fail(e, KILN_ERR_UNSUPPORTED, "an in-place op whose result is not a tensor");
    int y = out->id;
    kl_dtype dt = dtype_of(&c, base);
    if (dt != KL_UNDEFINED && dtype_of(&c, y) != KL_UNDEFINED && (s = cast(&c, y, dt, &y)))
      return s;
    if ((s = write_through(&c, key, y))) return s;
    out->id = key;
    return KILN_OK;
  }
  return is_view_op(op->name) ? record_views(&c, op->name, out, key, base) : KILN_OK;
}
