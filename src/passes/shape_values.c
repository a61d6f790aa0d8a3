/* shape_values: the shape arithmetic that exporters write around Reshape and Expand,
 * worked out on symbolic dims.
 *
 * A model exported with a dynamic batch (or sequence) axis computes its reshape targets
 * at run time: Shape(x) -> Gather(0) -> Unsqueeze -> Concat(with constants) -> Reshape.
 * const_fold cannot fold that (x's shape is not known), so every fusion that wants a
 * constant Reshape target missed (a 2-layer XLM-R kept 123 of 206 nodes with no
 * attention fused). This pass follows small integer tensors (0-D or 1-D, at most
 * MAX_ELEMS elements) through Shape, Gather, Unsqueeze, Squeeze, Reshape, Concat, Slice,
 * Cast, Identity, integer arithmetic, Equal and Where, knowing each element as a number,
 * as a symbolic dim of the graph ("batch"), or not at all. Then:
 *
 *   - a value whose elements are all numbers becomes a constant (its producer goes):
 *         Gather(Shape(ids: [batch,16]), 1)            becomes   16
 *   - a Reshape target whose elements are numbers or dims of the Reshape's own input at
 *     the same position becomes a constant, 0 copying such a dim (allowzero 0):
 *         Reshape(x: [batch,16,128], Concat(Gather(Shape(x),0), 16, 4, 32))
 *                                                      becomes   Reshape(x, [0,16,4,32])
 *   - an Expand target whose elements are numbers or dims of the Expand's input at the
 *     same (right-aligned) position becomes a constant, 1 keeping such a dim.
 *
 * A symbolic dim is never negative, so Equal(dim, -1) is false: torch's expand writes
 * Where(Equal(shape, -1), 1, shape). Nothing else is assumed about a symbol's value
 * (it may be 0 or 1), so a rewrite only names dims the node's input already has.
 */
#include "passes/rewrite.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ELEMS 16

enum { KNOWN = -1, UNKNOWN = -2 }; /* an element's sym when not a symbol */

typedef struct elem {
  int64_t k;   /* the number, when sym == KNOWN */
  int32_t sym; /* >= 0: the graph symbol; KNOWN; UNKNOWN */
} elem;

typedef struct sval {
  int rank; /* 0 or 1 */
  int n;    /* elements: 1 when rank 0 */
  elem e[MAX_ELEMS];
} sval;

typedef struct ctx {
  kl_graph *g;
  sval **sv; /* per value (the first n), NULL when not followed */
  int n;
  int32_t *le; /* per symbol t (the first n_syms): a symbol s with t <= s, or -1 */
  int n_syms;
} ctx;

/* Whether dim t is known to be at most symbol s (t is s, or a slice [0, s) of a dim). */
static bool at_most(const ctx *c, kl_dim t, int32_t s) {
  if (t.size >= 0 || t.sym < 0) return false;
  return t.sym == s || (t.sym < c->n_syms && c->le[t.sym] == s);
}

static bool small_int(kl_dtype t) {
  return t == KL_I64 || t == KL_I32 || t == KL_BOOL;
}

static bool all_known(const sval *s) {
  for (int i = 0; i < s->n; i++)
    if (s->e[i].sym != KNOWN) return false;
  return true;
}

/* The value of v as far as known: followed before, or a small constant. */
static const sval *get(ctx *c, int v) {
  if (v < 0 || v >= c->n) return NULL;
  if (c->sv[v]) return c->sv[v];
  const kl_value *val = &c->g->values[v];
  int64_t n;
  if (val->kind != KL_VALUE_CONST || !small_int(val->type.dtype) || val->type.rank > 1 ||
      !kl_type_numel(&val->type, &n) || n > MAX_ELEMS || (val->type.rank == 0 && n != 1))
    return NULL;
  sval *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->rank = val->type.rank;
  s->n = (int)n;
  for (int i = 0; i < s->n; i++)
    s->e[i] = (elem){kl_load_i64(val->data, val->type.dtype, (size_t)i), KNOWN};
  c->sv[v] = s;
  return s;
}

static elem of_dim(kl_dim d) {
  if (d.size >= 0) return (elem){d.size, KNOWN};
  return (elem){0, d.sym >= 0 ? d.sym : UNKNOWN};
}

static elem unknown(void) { return (elem){0, UNKNOWN}; }

/* Constant integer list input (axes, starts, ...) of up to max entries; -1 if not. */
static int const_list(ctx *c, int v, int64_t *out, int max) {
  const sval *s = get(c, v);
  if (!s || !all_known(s) || s->n > max) return -1;
  for (int i = 0; i < s->n; i++) out[i] = s->e[i].k;
  return s->n;
}

static bool eval_shape(ctx *c, const kl_node *n, sval *o) {
  const kl_type *t = &c->g->values[n->in[0]].type;
  if (t->rank < 0) return false;
  int64_t r = t->rank, start = kl_attr_int(n, "start", 0), end = kl_attr_int(n, "end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = start < 0 ? 0 : start > r ? r : start;
  end = end < 0 ? 0 : end > r ? r : end;
  if (end < start) end = start;
  if (end - start > MAX_ELEMS) return false;
  o->rank = 1;
  o->n = (int)(end - start);
  for (int i = 0; i < o->n; i++) o->e[i] = of_dim(t->dims[start + i]);
  return true;
}

static bool eval_gather(ctx *c, const kl_node *n, const sval *d, sval *o) {
  if (d->rank != 1 || kl_attr_int(n, "axis", 0) != 0) return false;
  const sval *ix = get(c, n->in[1]);
  if (!ix || !all_known(ix)) return false;
  o->rank = ix->rank;
  o->n = ix->n;
  for (int i = 0; i < ix->n; i++) {
    int64_t k = ix->e[i].k < 0 ? ix->e[i].k + d->n : ix->e[i].k;
    if (k < 0 || k >= d->n) return false; /* the kernel reports it */
    o->e[i] = d->e[k];
  }
  return true;
}

static bool eval_slice(ctx *c, const kl_node *n, const sval *d, sval *o) {
  int64_t st[1], en[1], ax[1] = {0}, sp[1] = {1};
  if (d->rank != 1 || n->n_in < 3 || const_list(c, n->in[1], st, 1) != 1 ||
      const_list(c, n->in[2], en, 1) != 1)
    return false;
  if (n->n_in > 3 && n->in[3] >= 0 && const_list(c, n->in[3], ax, 1) != 1) return false;
  if (n->n_in > 4 && n->in[4] >= 0 && const_list(c, n->in[4], sp, 1) != 1) return false;
  if ((ax[0] != 0 && ax[0] != -1) || sp[0] == 0) return false;
  int64_t len = d->n, s = st[0], e = en[0], step = sp[0];
  if (s < 0) s += len;
  if (e < 0) e += len;
  if (step > 0) {
    s = s < 0 ? 0 : s > len ? len : s;
    e = e < 0 ? 0 : e > len ? len : e;
  } else {
    s = s < 0 ? -1 : s > len - 1 ? len - 1 : s;
    e = e < -1 ? -1 : e > len - 1 ? len - 1 : e;
  }
  /* the count first: s + step past the end may overflow (a step of 2^63 - 1) */
  int64_t count;
  if (step > 0) count = e > s ? 1 + (e - s - 1) / step : 0;
  else count = s > e ? (step == INT64_MIN ? 1 : 1 + (s - e - 1) / -step) : 0;
  o->rank = 1;
  o->n = (int)count;
  for (int64_t j = 0; j < count; j++) o->e[j] = d->e[s + j * step];
  return true;
}

/* Elementwise integer ops on numbers, and the identities that keep a symbol. */
static elem arith(kl_op op, elem a, elem b) {
  if (a.sym == KNOWN && b.sym == KNOWN) {
    int64_t x = a.k, y = b.k, r;
    switch (op) {
    case KL_OP_Add: if (__builtin_add_overflow(x, y, &r)) return unknown(); break;
    case KL_OP_Sub: if (__builtin_sub_overflow(x, y, &r)) return unknown(); break;
    case KL_OP_Mul: if (__builtin_mul_overflow(x, y, &r)) return unknown(); break;
    case KL_OP_Div:
      if (y == 0 || x < 0 || y < 0) return unknown(); /* truncation vs floor: leave it */
      r = x / y;
      break;
    case KL_OP_Max: r = x > y ? x : y; break;
    case KL_OP_Min: r = x < y ? x : y; break;
    case KL_OP_Equal: r = x == y; break;
    default: return unknown();
    }
    return (elem){r, KNOWN};
  }
  bool bk = b.sym == KNOWN, ak = a.sym == KNOWN;
  switch (op) {
  case KL_OP_Add: if (bk && b.k == 0) return a; if (ak && a.k == 0) return b; break;
  case KL_OP_Sub: if (bk && b.k == 0) return a; break;
  case KL_OP_Mul: if (bk && b.k == 1) return a; if (ak && a.k == 1) return b; break;
  case KL_OP_Div: if (bk && b.k == 1) return a; break;
  case KL_OP_Equal:
    if (a.sym >= 0 && a.sym == b.sym) return (elem){1, KNOWN};
    /* a dim is never negative */
    if ((a.sym >= 0 && bk && b.k < 0) || (b.sym >= 0 && ak && a.k < 0)) return (elem){0, KNOWN};
    break;
  default: break;
  }
  return unknown();
}

/* Two operands broadcast: same count, or one of them a single element. */
static bool broadcast(const sval *a, const sval *b, sval *o) {
  if (a->n != b->n && a->n != 1 && b->n != 1) return false;
  o->rank = a->rank > b->rank ? a->rank : b->rank;
  o->n = a->n > b->n ? a->n : b->n;
  return true;
}

static bool eval_binary(ctx *c, const kl_node *n, sval *o) {
  const sval *a = get(c, n->in[0]), *b = n->n_in > 1 ? get(c, n->in[1]) : NULL;
  if (!a || !b || !broadcast(a, b, o)) return false;
  for (int i = 0; i < o->n; i++)
    o->e[i] = arith(n->op, a->e[a->n == 1 ? 0 : i], b->e[b->n == 1 ? 0 : i]);
  return true;
}

static bool eval_where(ctx *c, const kl_node *n, sval *o) {
  const sval *w = get(c, n->in[0]), *a = get(c, n->in[1]), *b = get(c, n->in[2]);
  sval ab;
  if (!w || !a || !b || !broadcast(a, b, &ab) || !broadcast(w, &ab, o)) return false;
  for (int i = 0; i < o->n; i++) {
    elem cond = w->e[w->n == 1 ? 0 : i];
    if (cond.sym != KNOWN)
      o->e[i] = unknown();
    else
      o->e[i] = cond.k ? a->e[a->n == 1 ? 0 : i] : b->e[b->n == 1 ? 0 : i];
  }
  return true;
}

/* The value of node n's single output, when it is a small integer tensor we follow. */
static bool eval(ctx *c, const kl_node *n, sval *o) {
  const kl_value *out = &c->g->values[n->out[0]];
  if (!small_int(out->type.dtype) || out->type.rank > 1) return false;
  if (n->op == KL_OP_Shape) return eval_shape(c, n, o);
  const sval *d = get(c, n->in[0]);
  int64_t axes[2];
  switch (n->op) {
  case KL_OP_Identity:
    if (!d) return false;
    *o = *d;
    return true;
  case KL_OP_Cast: /* integer to integer only: the numbers are unchanged */
    if (!d || out->type.dtype == KL_BOOL || c->g->values[n->in[0]].type.dtype == KL_BOOL)
      return false;
    *o = *d;
    return true;
  case KL_OP_Gather:
    return d && eval_gather(c, n, d, o);
  case KL_OP_Unsqueeze:
    if (!d || d->rank != 0 || const_list(c, n->in[1], axes, 2) != 1 ||
        (axes[0] != 0 && axes[0] != -1))
      return false;
    *o = *d;
    o->rank = 1;
    return true;
  case KL_OP_Squeeze:
    if (!d || d->rank != 1 || d->n != 1 || out->type.rank != 0) return false;
    *o = *d;
    o->rank = 0;
    return true;
  case KL_OP_Reshape:
    if (!d || out->type.rank < 0 || (out->type.rank == 0 && d->n != 1)) return false;
    *o = *d;
    o->rank = out->type.rank;
    return true;
  case KL_OP_Concat: {
    int64_t axis = kl_attr_int(n, "axis", 0);
    if (axis != 0 && axis != -1) return false;
    o->rank = 1;
    o->n = 0;
    for (int k = 0; k < n->n_in; k++) {
      const sval *p = get(c, n->in[k]);
      if (!p || p->rank != 1 || o->n + p->n > MAX_ELEMS) return false;
      memcpy(&o->e[o->n], p->e, sizeof p->e[0] * (size_t)p->n);
      o->n += p->n;
    }
    return true;
  }
  case KL_OP_Slice:
    return d && eval_slice(c, n, d, o);
  case KL_OP_Add: case KL_OP_Sub: case KL_OP_Mul: case KL_OP_Div: case KL_OP_Max:
  case KL_OP_Min: case KL_OP_Equal:
    if (n->n_in != 2) return false;
    return eval_binary(c, n, o);
  case KL_OP_Where:
    return n->n_in == 3 && eval_where(c, n, o);
  default:
    return false;
  }
}

/* Node i's output becomes the constant o. */
static kiln_status to_const(ctx *c, int i, const sval *o, int *changed, kl_err *e) {
  kl_graph *g = c->g;
  int v = g->nodes[i].out[0];
  kl_dtype t = g->values[v].type.dtype;
  size_t bytes = kl_dtype_size(t) * (size_t)o->n;
  void *data = malloc(bytes ? bytes : 1);
  if (!data) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory folding a shape");
  for (int k = 0; k < o->n; k++) {
    if (t == KL_I64) ((int64_t *)data)[k] = o->e[k].k;
    else if (t == KL_I32) ((int32_t *)data)[k] = (int32_t)o->e[k].k;
    else ((unsigned char *)data)[k] = o->e[k].k != 0;
  }
  int64_t dims[1] = {o->n};
  kl_value *val = &g->values[v];
  if (!val->borrowed) free(val->data);
  val->kind = KL_VALUE_CONST;
  kl_type_set_shape(&val->type, o->rank, dims);
  val->data = data;
  val->nbytes = bytes;
  val->borrowed = false;
  kl_rw_remove(g, i);
  (*changed)++;
  return KILN_OK;
}

/* Input 1 of node i becomes the constant target[0..n-1]. */
static kiln_status set_target(kl_graph *g, int i, const int64_t *target, int n, int *changed,
                              kl_err *e) {
  int64_t *data = malloc(sizeof *data * (size_t)(n ? n : 1)), dims[1] = {n};
  if (!data) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory folding a shape");
  memcpy(data, target, sizeof *data * (size_t)n);
  int k = kl_rw_add_const(g, "shape", KL_I64, 1, dims, data, e);
  if (k < 0) return KILN_ERR_OUT_OF_MEMORY;
  kl_graph_set_input(g, i, 1, k);
  (*changed)++;
  return KILN_OK;
}

/* Reshape: numbers stay; a symbol that is the input's dim at the same position is 0. */
static kiln_status reshape_target(ctx *c, int i, const sval *s, int *changed, kl_err *e) {
  const kl_node *n = &c->g->nodes[i];
  const kl_type *x = &c->g->values[n->in[0]].type;
  if (s->rank != 1 || s->n > KL_MAX_RANK || x->rank < 0 || kl_attr_int(n, "allowzero", 0))
    return KILN_OK; /* (a target of too many dims is the run's to refuse) */
  int64_t target[MAX_ELEMS];
  for (int k = 0; k < s->n; k++) {
    if (s->e[k].sym == KNOWN)
      target[k] = s->e[k].k;
    else if (s->e[k].sym >= 0 && k < x->rank && x->dims[k].size < 0 &&
             x->dims[k].sym == s->e[k].sym)
      target[k] = 0;
    else
      return KILN_OK;
  }
  return set_target(c->g, i, target, s->n, changed, e);
}

/* Expand: numbers stay; a symbol that is the input's dim at the same right-aligned
 * position is 1 (broadcasting keeps the input's dim). */
static kiln_status expand_target(ctx *c, int i, const sval *s, int *changed, kl_err *e) {
  const kl_node *n = &c->g->nodes[i];
  const kl_type *x = &c->g->values[n->in[0]].type;
  if (s->rank != 1 || s->n > KL_MAX_RANK || x->rank < 0) return KILN_OK;
  int64_t target[MAX_ELEMS];
  for (int k = 0; k < s->n; k++) {
    int d = x->rank - s->n + k;
    if (s->e[k].sym == KNOWN)
      target[k] = s->e[k].k;
    else if (s->e[k].sym >= 0 && d >= 0 && x->dims[d].size < 0 && x->dims[d].sym == s->e[k].sym)
      target[k] = 1;
    else
      return KILN_OK;
  }
  return set_target(c->g, i, target, s->n, changed, e);
}

/* The dim that broadcasting input dim x against target element t gives, when known. */
static kl_dim broadcast_dim(const ctx *c, kl_dim x, elem t) {
  kl_dim unk = {-1, -1};
  if (t.sym == KNOWN && t.k == 1) return x;
  if (x.size == 1) return t.sym == KNOWN ? (kl_dim){t.k, -1} : (kl_dim){-1, t.sym};
  if (t.sym == KNOWN) return x.size == t.k ? x : unk;
  /* x at most t: equal to it, or the broadcast fails (x is not 1 when t is 1) */
  return t.sym >= 0 && at_most(c, x, t.sym) ? (kl_dim){-1, t.sym} : unk;
}

/* What the target tells of the output's dims where inference (which needs a constant
 * target) left them unknown: a Reshape's elements that are numbers or symbols (0
 * copies the input's dim), an Expand's broadcast against the input. Counted as a
 * change when a dim is learnt: inference keeps a known dim over its own unknown one. */
static void refine_output(ctx *c, const kl_node *n, const sval *s, int *changed) {
  const kl_type *x = &c->g->values[n->in[0]].type;
  kl_type *out = &c->g->values[n->out[0]].type;
  int rank = n->op == KL_OP_Reshape ? s->n : (x->rank > s->n ? x->rank : s->n);
  if (x->rank < 0 || rank > KL_MAX_RANK || (out->rank >= 0 && out->rank != rank)) return;
  kl_dim dims[MAX_ELEMS];
  for (int d = 0; d < rank; d++) {
    if (n->op == KL_OP_Reshape) {
      elem t = s->e[d];
      if (t.sym == KNOWN && t.k == 0 && kl_attr_int(n, "allowzero", 0))
        dims[d] = (kl_dim){0, -1};
      else if (t.sym == KNOWN && t.k == 0)
        dims[d] = d < x->rank ? x->dims[d] : (kl_dim){-1, -1};
      else if (t.sym == KNOWN)
        dims[d] = t.k > 0 ? (kl_dim){t.k, -1} : (kl_dim){-1, -1};
      else
        dims[d] = (kl_dim){-1, t.sym >= 0 ? t.sym : -1};
    } else {
      int xd = d - (rank - x->rank), sd = d - (rank - s->n);
      kl_dim xdim = xd >= 0 ? x->dims[xd] : (kl_dim){1, -1};
      dims[d] = sd >= 0 ? broadcast_dim(c, xdim, s->e[sd]) : xdim;
    }
  }
  bool learnt = false;
  if (out->rank < 0) {
    out->rank = rank;
    for (int d = 0; d < rank; d++) out->dims[d] = (kl_dim){-1, -1};
    learnt = true;
  }
  for (int d = 0; d < rank; d++) {
    kl_dim *o = &out->dims[d];
    if (o->size >= 0 || o->sym >= 0 || (dims[d].size < 0 && dims[d].sym < 0)) continue;
    *o = dims[d];
    learnt = true;
  }
  if (learnt) (*changed)++;
}

/* Range(0, limit, 1) has limit elements: a symbolic limit names its output's dim. */
static void refine_range(ctx *c, const kl_node *n, int *changed) {
  const sval *st = get(c, n->in[0]), *lim = get(c, n->in[1]), *dl = get(c, n->in[2]);
  kl_type *out = &c->g->values[n->out[0]].type;
  if (!st || !lim || !dl || st->n != 1 || lim->n != 1 || dl->n != 1 || out->rank != 1 ||
      out->dims[0].size >= 0 || out->dims[0].sym >= 0)
    return;
  if (st->e[0].sym != KNOWN || st->e[0].k != 0 || dl->e[0].sym != KNOWN || dl->e[0].k != 1 ||
      lim->e[0].sym < 0)
    return;
  out->dims[0] = (kl_dim){-1, lim->e[0].sym};
  (*changed)++;
}

/* Slice(x, 0, s) along one axis, step 1, s a symbol: the output's dim there is at most
 * s (the end is clamped to x's dim). BERT's position ids are arange(512)[:seq]. */
static void slice_bound(ctx *c, const kl_node *n) {
  int64_t axis = 0, step = 1;
  const sval *st = get(c, n->in[1]), *en = get(c, n->in[2]);
  if (!st || !en || st->n != 1 || en->n != 1 || st->e[0].sym != KNOWN || st->e[0].k != 0 ||
      en->e[0].sym < 0)
    return;
  if (n->n_in > 3 && n->in[3] >= 0 && const_list(c, n->in[3], &axis, 1) != 1) return;
  if (n->n_in > 4 && n->in[4] >= 0 && (const_list(c, n->in[4], &step, 1) != 1 || step != 1))
    return;
  const kl_type *out = &c->g->values[n->out[0]].type;
  if (axis < 0) axis += out->rank;
  if (axis < 0 || axis >= out->rank) return;
  kl_dim d = out->dims[axis];
  if (d.size < 0 && d.sym >= 0 && d.sym < c->n_syms && d.sym != en->e[0].sym)
    c->le[d.sym] = en->e[0].sym;
}

static bool broadcasts(kl_op op) {
  return op == KL_OP_Add || op == KL_OP_Sub || op == KL_OP_Mul || op == KL_OP_Div ||
         op == KL_OP_And || op == KL_OP_Or || op == KL_OP_Where;
}

/* A broadcast's output dim that inference left unknown, where one input has symbol s
 * and each other one 1, s, or a dim at most s: when the op succeeds that dim is s (a
 * dim below s and not 1 does not broadcast; when s is 1 so is such a dim). */
static void refine_broadcast(ctx *c, const kl_node *n, int *changed) {
  kl_type *out = &c->g->values[n->out[0]].type;
  for (int d = 0; d < out->rank; d++) {
    if (out->dims[d].size >= 0 || out->dims[d].sym >= 0) continue;
    int32_t s = -1;
    for (int k = 0; k < n->n_in && s < 0; k++) { /* the candidate: an input's symbol */
      const kl_type *t = n->in[k] >= 0 ? &c->g->values[n->in[k]].type : NULL;
      int td = t && t->rank >= 0 ? d - (out->rank - t->rank) : -1;
      if (td >= 0 && t->dims[td].size < 0 && t->dims[td].sym >= 0) s = t->dims[td].sym;
    }
    bool fits = s >= 0;
    for (int k = 0; fits && k < n->n_in; k++) {
      const kl_type *t = n->in[k] >= 0 ? &c->g->values[n->in[k]].type : NULL;
      if (!t || t->rank < 0) {
        fits = false;
        break;
      }
      int td = d - (out->rank - t->rank);
      if (td < 0 || t->dims[td].size == 1) continue;
      fits = at_most(c, t->dims[td], s);
    }
    if (!fits) continue;
    out->dims[d] = (kl_dim){-1, s};
    (*changed)++;
  }
}

static kiln_status visit(ctx *c, int i, int *changed, kl_err *e) {
  const kl_node *n = &c->g->nodes[i];
  if (n->op == KL_OP_Slice && n->n_in >= 3 && n->n_out == 1 && n->out[0] >= 0)
    slice_bound(c, n);
  if (broadcasts(n->op) && n->n_out == 1 && n->out[0] >= 0)
    refine_broadcast(c, n, changed);
  if (n->op == KL_OP_Range && n->n_in == 3 && n->n_out == 1 && n->out[0] >= 0) {
    refine_range(c, n, changed);
    return KILN_OK;
  }
  if ((n->op == KL_OP_Reshape || n->op == KL_OP_Expand) && n->n_in == 2 && n->in[1] >= 0 &&
      n->n_out == 1 && n->out[0] >= 0 && !kl_rw_const(c->g, n->in[1])) {
    const sval *s = get(c, n->in[1]);
    if (!s || s->rank != 1) return KILN_OK;
    refine_output(c, n, s, changed);
    if (n->op == KL_OP_Reshape) return reshape_target(c, i, s, changed, e);
    return expand_target(c, i, s, changed, e);
  }
  if (n->n_out != 1 || n->out[0] < 0 || n->n_in < 1 || n->in[0] < 0) return KILN_OK;
  sval o;
  if (!eval(c, n, &o)) return KILN_OK;
  if (all_known(&o) && !kl_rw_is_output(c->g, n->out[0])) return to_const(c, i, &o, changed, e);
  sval *keep = malloc(sizeof *keep);
  if (!keep) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory following shapes");
  *keep = o;
  c->sv[n->out[0]] = keep;
  return KILN_OK;
}

/* A new symbol for a dim that inference left unknown, named "?N" (a name no other
 * symbol of the graph has). */
static int fresh_symbol(kl_graph *g) {
  char name[32];
  for (int k = g->n_symbols;; k++) {
    snprintf(name, sizeof name, "?%d", k);
    bool taken = false;
    for (int i = 0; !taken && i < g->n_symbols; i++) taken = strcmp(g->symbols[i], name) == 0;
    if (!taken) return kl_graph_symbol(g, name);
  }
}

/* The unknown dims that a Shape reads get a symbol of their own: the dims that are
 * read from them (Gather(Shape(x), 1)) and the dims of what x flows into (x @ W) then
 * share it, and a Reshape of x @ W to a target made from it keeps that dim (0). An
 * unknown dim stays the same size while it flows through inference's rules, so naming
 * it claims nothing about its value; inference keeps a named dim over an unknown one. */
static kiln_status name_read_dims(kl_graph *g, bool slices, int *changed, kl_err *e) {
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    int v = -1;
    if (!slices && n->op == KL_OP_Shape && n->n_in >= 1) v = n->in[0];
    /* a Slice to a computed end: slice_bound can then say its dim is at most the end */
    if (slices && n->op == KL_OP_Slice && n->n_in >= 3 && n->n_out == 1 && n->in[2] >= 0 &&
        !kl_rw_const(g, n->in[2]))
      v = n->out[0];
    if (v < 0) continue;
    kl_type *t = &g->values[v].type;
    for (int d = 0; d < t->rank; d++) {
      if (t->dims[d].size >= 0 || t->dims[d].sym >= 0) continue;
      int sym = fresh_symbol(g);
      if (sym < 0) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory naming a dim");
      t->dims[d].sym = sym;
      (*changed)++;
    }
  }
  return KILN_OK;
}

kiln_status kl_pass_shape_values(kl_graph *g, const kl_pass_config *cfg, int *changed,
                                 kl_err *e) {
  (void)cfg;
  ctx c = {g, calloc((size_t)g->n_values + 1, sizeof *c.sv), g->n_values,
           malloc(sizeof *c.le * (size_t)(g->n_symbols + 1)), g->n_symbols};
  if (!c.sv || !c.le) {
    free(c.sv);
    free(c.le);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory following shapes");
  }
  for (int k = 0; k < c.n_syms; k++) c.le[k] = -1;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++) st = visit(&c, i, changed, e);
  for (int v = 0; v < c.n; v++) free(c.sv[v]);
  free(c.sv);
  free(c.le);
  if (st == KILN_OK) st = kl_rw_finish(g, *changed, e);
  /* Names only once nothing else is learnt: a dim that the shapes would name ("batch")
   * is not given a new name first. Slices first: what their bounds teach (a position
   * embedding's dim is the sequence's) comes before a Shape's dim is named. */
  if (st == KILN_OK && !*changed) st = name_read_dims(g, true, changed, e);
  if (st == KILN_OK && !*changed) st = name_read_dims(g, false, changed, e);
  if (st == KILN_OK && *changed) st = kl_graph_infer(g, e);
  return st;
}
