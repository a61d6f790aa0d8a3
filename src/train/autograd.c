/* Reverse-mode differentiation over the IR: the walk and the helpers the rules share
 * (autograd.h). */
#include "train/autograd.h"

#include "passes/rewrite.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool kl_ad_wants(const kl_ad *a, int n, int k) {
  const kl_node *node = &a->g->nodes[n];
  if (k >= node->n_in) return false;
  int v = node->in[k];
  return v >= 0 && v < a->n_vals && a->requires[v];
}

int kl_ad_node(kl_ad *a, int fwd, kl_op op, int n_in, const int *in, int n_out, int *out) {
  kl_graph *g = a->g;
  int *ids = malloc(sizeof(int) * (size_t)(n_out > 0 ? n_out : 1));
  if (!ids) {
    kl_fail(a->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    return -1;
  }
  char name[512];
  const char *base = g->nodes[fwd].name && *g->nodes[fwd].name ? g->nodes[fwd].name
                                                                : kl_op_name(g->nodes[fwd].op);
  for (int k = 0; k < n_out; k++) {
    /* unique by the count of values made so far; a clash with a name of the model
     * (improbable) gets a fresh "_vN" */
    snprintf(name, sizeof name, "%s/grad/%s:%d", base, kl_op_name(op), ++a->made);
    ids[k] = kl_graph_add_value(g, kl_graph_find_value(g, name) >= 0 ? NULL : name, a->e);
    if (ids[k] < 0) {
      free(ids);
      return -1;
    }
    if (out) out[k] = ids[k];
  }
  snprintf(name, sizeof name, "%s/grad/%s", base, kl_op_name(op));
  int n = kl_graph_add_node(g, op, name, n_in, in, n_out, ids, a->e);
  free(ids);
  return n;
}

kiln_status kl_ad_copy_attrs(kl_ad *a, int from, int to) {
  kl_graph *g = a->g;
  for (int i = 0; i < g->nodes[from].n_attrs; i++) {
    const kl_attr *s = &g->nodes[from].attrs[i];
    kiln_status st;
    switch (s->kind) {
    case KL_ATTR_FLOAT: st = kl_node_set_float(g, to, s->name, s->f, a->e); break;
    case KL_ATTR_INT: st = kl_node_set_int(g, to, s->name, s->i, a->e); break;
    case KL_ATTR_STRING: st = kl_node_set_string(g, to, s->name, s->s, a->e); break;
    case KL_ATTR_INTS: st = kl_node_set_ints(g, to, s->name, s->ints, s->n, a->e); break;
    case KL_ATTR_FLOATS: st = kl_node_set_floats(g, to, s->name, s->floats, s->n, a->e); break;
    case KL_ATTR_STRINGS:
      st = kl_node_set_strings(g, to, s->name, (const char *const *)s->strings, s->n, a->e);
      break;
    default:
      st = kl_fail(a->e, KILN_ERR_UNSUPPORTED, "attribute '%s' of kind %d cannot be copied "
                   "to a gradient node", s->name, (int)s->kind);
    }
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

int kl_ad_scalar(kl_ad *a, kl_dtype dtype, double v) {
  size_t size = kl_dtype_size(dtype);
  void *data = malloc(size ? size : 1);
  if (!data) {
    kl_fail(a->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    return -1;
  }
  kl_store_f64(data, dtype, 0, v);
  char hint[32];
  snprintf(hint, sizeof hint, "grad_const:%d", ++a->made);
  return kl_rw_add_const(a->g, hint, dtype, 0, NULL, data, a->e);
}

int kl_ad_ints(kl_ad *a, const int64_t *v, int n) {
  int64_t *data = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  if (!data) {
    kl_fail(a->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    return -1;
  }
  if (n) memcpy(data, v, sizeof(int64_t) * (size_t)n);
  int64_t dims[1] = {n};
  char hint[32];
  snprintf(hint, sizeof hint, "grad_ints:%d", ++a->made);
  return kl_rw_add_const(a->g, hint, KL_I64, 1, dims, data, a->e);
}

kiln_status kl_ad_accumulate(kl_ad *a, int v, int dv) {
  if (v < 0 || v >= a->n_vals || !a->requires[v] || dv < 0) return KILN_OK;
  if (a->grad[v] < 0) {
    a->grad[v] = dv;
    return KILN_OK;
  }
  int p = a->g->values[v].producer;
  int in[2] = {a->grad[v], dv}, out;
  /* named after the value's producer, or the first reader for inputs and weights */
  int fwd = p >= 0 ? p : a->n_fwd - 1;
  if (kl_ad_node(a, fwd, KL_OP_Add, 2, in, 1, &out) < 0) return a->e->code;
  a->grad[v] = out;
  return KILN_OK;
}

/* Which values depend on a trainable one, through ops that pass gradients: every float
 * output of a node with such an input. */
static void mark_requires(kl_ad *a, const bool *trainable) {
  const kl_graph *g = a->g;
  for (int v = 0; v < a->n_vals; v++) a->requires[v] = trainable[v];
  for (int i = 0; i < a->n_fwd; i++) {
    const kl_node *n = &g->nodes[i];
    bool any = false;
    for (int k = 0; k < n->n_in && !any; k++) any = n->in[k] >= 0 && a->requires[n->in[k]];
    if (!any) continue;
    for (int k = 0; k < n->n_out; k++) {
      int v = n->out[k];
      if (v >= 0 && kl_dtype_is_float(g->values[v].type.dtype)) a->requires[v] = true;
    }
  }
}

kiln_status kl_autograd(kl_graph *g, int loss, const bool *trainable, int **grads, kl_err *e) {
  *grads = NULL;
  kl_ad a = {.g = g, .e = e, .n_fwd = g->n_nodes, .n_vals = g->n_values};
  a.requires = calloc((size_t)a.n_vals + 1, sizeof(bool));
  a.grad = malloc(sizeof(int) * ((size_t)a.n_vals + 1));
  int *dy = malloc(sizeof(int) * 64);
  kiln_status st = KILN_OK;
  if (!a.requires || !a.grad || !dy) {
    st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory differentiating the graph");
    goto done;
  }
  for (int v = 0; v < a.n_vals; v++) a.grad[v] = -1;
  mark_requires(&a, trainable);
  if (loss < 0 || loss >= a.n_vals || !kl_dtype_is_float(g->values[loss].type.dtype)) {
    st = kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "the loss is not a float value of the graph");
    goto done;
  }
  if (!a.requires[loss]) {
    st = kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "the loss '%s' does not depend on any "
                 "trainable weight", g->values[loss].name);
    goto done;
  }
  int one = kl_ad_scalar(&a, g->values[loss].type.dtype, 1.0);
  if (one < 0) {
    st = e->code;
    goto done;
  }
  a.grad[loss] = one;
  for (int i = a.n_fwd - 1; i >= 0 && st == KILN_OK; i--) {
    const kl_node *n = &g->nodes[i];
    if (n->n_out > 64) continue;
    bool any_out = false, any_in = false;
    for (int k = 0; k < n->n_out; k++) {
      int v = n->out[k];
      dy[k] = v >= 0 ? a.grad[v] : -1;
      any_out |= dy[k] >= 0;
    }
    for (int k = 0; k < n->n_in; k++) any_in |= kl_ad_wants(&a, i, k);
    if (!any_out || !any_in) continue;
    kl_grad_rule rule = kl_grad_rule_of(n->op);
    char d[256];
    if (!rule) {
      st = kl_fail(e, KILN_ERR_UNSUPPORTED, "%s: kiln has no gradient rule for op %s, which "
                   "lies between trainable weights and the loss (freeze the weights before "
                   "it, or train a model without it)",
                   kl_node_describe(g, n, d, sizeof d), kl_op_name(n->op));
      break;
    }
    st = rule(&a, i, dy);
    if (st != KILN_OK && strncmp(e->msg, "node", 4) != 0)
      kl_err_prefix(e, "%s, its gradient", kl_node_describe(g, &g->nodes[i], d, sizeof d));
  }
  if (st == KILN_OK) st = kl_graph_infer(g, e);
  if (st == KILN_OK) {
    *grads = a.grad;
    a.grad = NULL;
  }
done:
  free(a.requires);
  free(a.grad);
  free(dy);
  return st;
}
