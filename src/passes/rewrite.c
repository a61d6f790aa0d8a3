/* Shared helpers for graph rewrites (see rewrite.h). */
#include "passes/rewrite.h"
#include "ir/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The queries read the graph's readers index (kl_graph_readers, ir.h); without one
 * (out of memory) they scan the nodes. */
int kl_rw_uses(const kl_graph *g, int v) {
  int uses = kl_rw_is_output(g, v) ? 1 : 0, count;
  if (v < 0) return uses;
  if (kl_graph_readers(g, v, &count)) return uses + count;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) uses += g->nodes[i].in[k] == v;
  return uses;
}

bool kl_rw_is_output(const kl_graph *g, int v) {
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == v) return true;
  return false;
}

int kl_rw_sole_consumer(const kl_graph *g, int v) {
  if (v < 0 || kl_rw_is_output(g, v)) return -1;
  int count;
  const int *readers = kl_graph_readers(g, v, &count);
  if (readers) return count == 1 ? readers[0] : -1;
  int found = -1;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      if (g->nodes[i].in[k] != v) continue;
      if (found >= 0) return -1;
      found = i;
    }
  return found;
}

int kl_rw_consumers(const kl_graph *g, int v, int *nodes, int max) {
  int count = 0, slots;
  const int *readers = v >= 0 ? kl_graph_readers(g, v, &slots) : NULL;
  if (readers) { /* ascending: a node reading v in two slots is there twice in a row */
    for (int i = 0; i < slots; i++)
      if (i == 0 || readers[i] != readers[i - 1]) {
        if (count < max) nodes[count] = readers[i];
        count++;
      }
    return count;
  }
  for (int i = 0; v >= 0 && i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] == v) {
        if (count < max) nodes[count] = i;
        count++;
        break;
      }
  return count;
}

int kl_rw_producer(const kl_graph *g, int v) {
  if (v < 0 || v >= g->n_values || g->values[v].kind != KL_VALUE_INTERMEDIATE) return -1;
  int p = g->values[v].producer;
  if (p < 0 || p >= g->n_nodes) return -1;
  const kl_node *n = &g->nodes[p];
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] == v) return p;
  return -1;
}

int kl_rw_input_op(const kl_graph *g, int n, int k, kl_op op) {
  const kl_node *node = &g->nodes[n];
  if (k >= node->n_in) return -1;
  int p = kl_rw_producer(g, node->in[k]);
  return p >= 0 && g->nodes[p].op == op ? p : -1;
}

const kl_value *kl_rw_const(const kl_graph *g, int v) {
  if (v < 0 || v >= g->n_values || g->values[v].kind != KL_VALUE_CONST) return NULL;
  return &g->values[v];
}

bool kl_rw_scalar(const kl_graph *g, int v, double *x) {
  const kl_value *c = kl_rw_const(g, v);
  int64_t n;
  if (!c || !kl_type_numel(&c->type, &n) || n != 1) return false;
  kl_dtype t = c->type.dtype;
  if (!kl_dtype_is_float(t) && !kl_dtype_is_int(t)) return false;
  *x = kl_load_f64(c->data, t, 0);
  return true;
}

bool kl_rw_scalar_near(const kl_graph *g, int v, double want) {
  double x;
  return kl_rw_scalar(g, v, &x) && fabs(x - want) <= 1e-4 * fabs(want);
}

bool kl_rw_same_shape(const kl_type *a, const kl_type *b) {
  if (a->rank < 0 || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (!kl_dim_equal(a->dims[i], b->dims[i])) return false;
  return true;
}

bool kl_rw_fits(const kl_type *small, const kl_type *big) {
  if (small->rank < 0 || big->rank < 0 || small->rank > big->rank || small->dtype != big->dtype)
    return false;
  for (int i = 0; i < small->rank; i++) {
    kl_dim d = small->dims[i];
    if (d.size != 1 && !kl_dim_equal(d, big->dims[i + big->rank - small->rank])) return false;
  }
  return true;
}

int kl_rw_other_input(const kl_node *n, int v) {
  if (n->n_in != 2) return -1;
  if (n->in[0] == v) return n->in[1];
  if (n->in[1] == v) return n->in[0];
  return -1;
}

bool kl_rw_per_axis(const kl_graph *g, int c, int rank, int axis, int64_t len,
                    double *out) {
  const kl_value *v = kl_rw_const(g, c);
  if (!v || !kl_dtype_is_float(v->type.dtype) || v->type.rank > rank || len <= 0)
    return false;
  int64_t size = 1;
  for (int i = 0; i < v->type.rank; i++) {
    int64_t d = v->type.dims[i].size;
    bool on_axis = i + rank - v->type.rank == axis;
    if (d != 1 && !(on_axis && d == len)) return false;
    size *= d;
  }
  for (int64_t j = 0; j < len; j++)
    out[j] = kl_load_f64(v->data, v->type.dtype, size == 1 ? 0 : (size_t)j);
  return true;
}

bool kl_rw_deterministic(kl_op op) { return kl_node_deterministic(op); }

int kl_rw_replace_uses(kl_graph *g, int old, int repl) {
  int count = 0, slots;
  if (old < 0 || old == repl) return 0;
  const int *readers = kl_graph_readers(g, old, &slots);
  if (readers) {
    /* each change takes a reader off old's list: read the first one left, each time */
    while (slots > 0) {
      int i = readers[0];
      for (int k = 0; k < g->nodes[i].n_in; k++)
        if (g->nodes[i].in[k] == old) {
          kl_graph_set_input(g, i, k, repl);
          count++;
        }
      readers = kl_graph_readers(g, old, &slots);
      if (!readers) break; /* the index was lost (out of memory): scan the rest */
    }
    if (readers) return count;
  }
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] == old) {
        kl_graph_set_input(g, i, k, repl);
        count++;
      }
  return count;
}

void kl_rw_remove(kl_graph *g, int n) {
  kl_node *node = &g->nodes[n];
  for (int k = 0; k < node->n_out; k++) {
    int v = node->out[k];
    if (v >= 0 && g->values[v].producer == n) g->values[v].producer = -1;
  }
  kl_graph_uses_node(g, n, false);
  node->n_in = 0;
  node->n_out = 0;
}

void kl_rw_take_output(kl_graph *g, int n, int slot, int v) {
  g->nodes[n].out[slot] = v;
  g->values[v].producer = n;
}

bool kl_rw_bypass(kl_graph *g, int n, int in, int out) {
  if (!kl_rw_is_output(g, out)) {
    kl_rw_replace_uses(g, out, in);
    kl_rw_remove(g, n);
    return true;
  }
  int p = kl_rw_producer(g, in);
  if (p < 0 || kl_rw_is_output(g, in)) return false;
  kl_rw_remove(g, n);
  kl_rw_replace_uses(g, in, out);
  for (int k = 0; k < g->nodes[p].n_out; k++)
    if (g->nodes[p].out[k] == in) kl_rw_take_output(g, p, k, out);
  return true;
}

static kiln_status set_inputs(kl_graph *g, int n, int count, const int *ids, kl_err *e) {
  kl_node *node = &g->nodes[n];
  if (count > node->n_in) {
    int *p = realloc(node->in, sizeof(int) * (size_t)count);
    if (!p) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory rewriting a node");
    node->in = p;
  }
  kl_graph_uses_node(g, n, false);
  memmove(node->in, ids, sizeof(int) * (size_t)count);
  node->n_in = count;
  while (node->n_in > 0 && node->in[node->n_in - 1] == KL_ABSENT) node->n_in--;
  kl_graph_uses_node(g, n, true);
  return KILN_OK;
}

kiln_status kl_rw_set_input(kl_graph *g, int n, int slot, int v, kl_err *e) {
  kl_node *node = &g->nodes[n];
  if (slot >= node->n_in) {
    int *p = realloc(node->in, sizeof(int) * (size_t)(slot + 1));
    if (!p) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory rewriting a node");
    node->in = p;
    while (node->n_in <= slot) node->in[node->n_in++] = KL_ABSENT;
  }
  kl_graph_set_input(g, n, slot, v);
  while (node->n_in > 0 && node->in[node->n_in - 1] == KL_ABSENT) node->n_in--;
  return KILN_OK;
}

void kl_rw_set_op(kl_graph *g, int n, kl_op op) { g->nodes[n].op = op; }

void kl_rw_drop_attrs(kl_graph *g, int n) {
  kl_node *node = &g->nodes[n];
  for (int i = 0; i < node->n_attrs; i++) kl_attr_clear(&node->attrs[i]);
  node->n_attrs = 0;
}

/* hint itself when free, else hint_1, hint_2, ... */
static void fresh_name(const kl_graph *g, const char *hint, char *buf, size_t len) {
  if (!hint || !*hint) hint = "_fold";
  snprintf(buf, len, "%s", hint);
  for (int k = 1; kl_graph_find_value(g, buf) >= 0; k++) snprintf(buf, len, "%s_%d", hint, k);
}

int kl_rw_add_const(kl_graph *g, const char *hint, kl_dtype dtype, int rank,
                    const int64_t *dims, void *data, kl_err *e) {
  char name[512];
  fresh_name(g, hint, name, sizeof name);
  int64_t numel = 1;
  size_t bytes = 0;
  for (int i = 0; i < rank; i++)
    if (dims[i] < 0 || kl_mul_overflow_i64(numel, dims[i], &numel)) numel = -1;
  if (numel < 0 || kl_mul_overflow_size((size_t)numel, kl_dtype_size(dtype), &bytes)) {
    free(data);
    kl_fail(e, KILN_ERR_INTERNAL, "constant '%s' has an invalid shape", name);
    return -1;
  }
  return kl_graph_add_const(g, name, dtype, rank, dims, data, bytes, false, e);
}

int kl_rw_add_vector(kl_graph *g, const char *hint, kl_dtype dtype, int rank,
                     const double *vals, int64_t n, kl_err *e) {
  size_t size = kl_dtype_size(dtype), bytes;
  if (rank < 1 || rank > KL_MAX_RANK || n < 0 ||
      kl_mul_overflow_size((size_t)n, size, &bytes)) {
    kl_fail(e, KILN_ERR_INTERNAL, "invalid constant vector");
    return -1;
  }
  void *data = malloc(bytes ? bytes : 1);
  if (!data) {
    kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    return -1;
  }
  for (int64_t i = 0; i < n; i++) kl_store_f64(data, dtype, (size_t)i, vals[i]);
  int64_t dims[KL_MAX_RANK];
  for (int i = 0; i < rank; i++) dims[i] = i == rank - 1 ? n : 1;
  return kl_rw_add_const(g, hint, dtype, rank, dims, data, e);
}

kiln_status kl_rw_become(kl_graph *g, int n, kl_op op, int count, const int *ids, kl_err *e) {
  kl_node *node = &g->nodes[n];
  char *src = strdup(kl_op_name(op));
  if (!src) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory rewriting a node");
  free(node->src);
  node->src = src;
  node->op = op;
  kl_rw_drop_attrs(g, n);
  return set_inputs(g, n, count, ids, e);
}

kiln_status kl_rw_add_output(kl_graph *g, int n, int v, kl_err *e) {
  kl_node *node = &g->nodes[n];
  int *p = realloc(node->out, sizeof(int) * (size_t)(node->n_out + 1));
  if (!p) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory rewriting a node");
  node->out = p;
  node->n_out++;
  kl_rw_take_output(g, n, node->n_out - 1, v);
  return KILN_OK;
}

kiln_status kl_rw_finish(kl_graph *g, bool changed, kl_err *e) {
  if (!changed) return KILN_OK;
  kiln_status st = kl_graph_toposort(g, e);
  return st == KILN_OK ? kl_graph_compact(g, e) : st;
}

/* Constant integer values of v (1-D, at most 4), or false. */
bool kl_rw_const_ints(const kl_graph *g, int v, int64_t *out, int *n) {
  const kl_value *c = kl_rw_const(g, v);
  if (!c || c->type.rank != 1 || c->type.dims[0].size > 4 ||
      (c->type.dtype != KL_I64 && c->type.dtype != KL_I32))
    return false;
  *n = (int)c->type.dims[0].size;
  for (int i = 0; i < *n; i++)
    out[i] = c->type.dtype == KL_I64 ? ((const int64_t *)c->data)[i]
                                      : ((const int32_t *)c->data)[i];
  return true;
}

/* ReduceMean or ReduceMax over the two spatial axes with keepdims, as torch.export
 * writes an adaptive pooling to 1x1: the global pooling of the same. */
kl_op kl_rw_global_pool_of(const kl_graph *g, const kl_node *n) {
  if ((n->op != KL_OP_ReduceMean && n->op != KL_OP_ReduceMax) || n->n_in < 1 || n->n_in > 2 ||
      kl_attr_int(n, "keepdims", 1) != 1 || g->values[n->in[0]].type.rank != 4)
    return KL_OP_COUNT;
  int64_t axes[4];
  int k;
  if (n->n_in == 2) { /* opset 18: the axes an input (absent: every axis) */
    if (n->in[1] < 0 || !kl_rw_const_ints(g, n->in[1], axes, &k) || k != 2) return KL_OP_COUNT;
  } else { /* earlier opsets: an attribute */
    const int64_t *a;
    if (kl_attr_ints(n, "axes", &a) != 2) return KL_OP_COUNT;
    axes[0] = a[0], axes[1] = a[1];
  }
  for (int i = 0; i < 2; i++)
    if (axes[i] < -4 || axes[i] > 3) return KL_OP_COUNT;
  unsigned seen = 0;
  for (int i = 0; i < 2; i++) seen |= 1u << (axes[i] < 0 ? axes[i] + 4 : axes[i]);
  if (seen != (1u << 2 | 1u << 3)) return KL_OP_COUNT;
  return n->op == KL_OP_ReduceMean ? KL_OP_GlobalAveragePool : KL_OP_GlobalMaxPool;
}

bool kl_rw_bn_affine(const kl_graph *g, const kl_node *bn, int64_t count, double *s,
                     double *t) {
  if (bn->op != KL_OP_BatchNormalization || kl_node_input_count(bn) != 5 || bn->n_out != 1 ||
      kl_attr_int(bn, "training_mode", 0) != 0) /* the batch's statistics: not constants */
    return false;
  const kl_value *p[4];
  for (int k = 0; k < 4; k++) {
    p[k] = kl_rw_const(g, bn->in[k + 1]);
    int64_t n;
    if (!p[k] || !p[k]->data || !kl_dtype_is_float(p[k]->type.dtype) ||
        !kl_type_numel(&p[k]->type, &n) || n != count)
      return false;
  }
  double eps = kl_attr_float(bn, "epsilon", 1e-5f);
  for (int64_t c = 0; c < count; c++) {
    double var = kl_load_f64(p[3]->data, p[3]->type.dtype, (size_t)c);
    s[c] = kl_load_f64(p[0]->data, p[0]->type.dtype, (size_t)c) / sqrt(var + eps);
    t[c] = kl_load_f64(p[1]->data, p[1]->type.dtype, (size_t)c) -
           kl_load_f64(p[2]->data, p[2]->type.dtype, (size_t)c) * s[c];
  }
  return true;
}
