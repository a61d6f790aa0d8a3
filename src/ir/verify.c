/* The verifier: structural invariants every pass must keep. */
#include "ir/ir.h"

#include <stdlib.h>

static kiln_status check_node(const kl_graph *g, int i, const bool *defined, kl_err *e) {
  const kl_node *n = &g->nodes[i];
  const kl_op_info *info = kl_op_get(n->op);
  char d[256];
  kl_node_describe(g, n, d, sizeof d);
  if (!info) return kl_fail(e, KILN_ERR_INTERNAL, "%s has an invalid op id %d", d, n->op);
  int given = kl_node_input_count(n);
  if (given < info->min_in || n->n_in > info->max_in)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s has %d inputs; %s takes %d to %d", d,
                   given, info->name, info->min_in, info->max_in);
  if (n->n_out < info->min_out || n->n_out > info->max_out)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s has %d outputs; %s gives %d to %d", d,
                   n->n_out, info->name, info->min_out, info->max_out);
  for (int k = 0; k < n->n_attrs; k++) {
    kiln_status st = kl_attr_kind_check(&n->attrs[k], d, e);
    if (st != KILN_OK) return st;
  }
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    if (v == KL_ABSENT) continue;
    if (v < 0 || v >= g->n_values)
      return kl_fail(e, KILN_ERR_INTERNAL, "%s input %d refers to value id %d", d, k, v);
    if (!defined[v])
      return kl_fail(e, KILN_ERR_INVALID_MODEL,
                     "%s input %d '%s' is not a graph input, a constant or the output of "
                     "an earlier node", d, k, g->values[v].name);
  }
  for (int k = 0; k < n->n_out; k++) {
    int v = n->out[k];
    if (v == KL_ABSENT) continue;
    if (v < 0 || v >= g->n_values)
      return kl_fail(e, KILN_ERR_INTERNAL, "%s output %d refers to value id %d", d, k, v);
    if (g->values[v].kind != KL_VALUE_INTERMEDIATE || g->values[v].producer != i)
      return kl_fail(e, KILN_ERR_INVALID_MODEL,
                     "%s output %d '%s' is already defined elsewhere (one producer per "
                     "value)", d, k, g->values[v].name);
  }
  return KILN_OK;
}

/* If, Loop, Scan: the bodies their op needs, with the node's captures, each verified. */
static kiln_status check_control(const kl_graph *g, const kl_node *n, kl_err *e) {
  char d[256];
  kl_node_describe(g, n, d, sizeof d);
  const char *names[2] = {"body", NULL};
  if (n->op == KL_OP_If) names[0] = "then_branch", names[1] = "else_branch";
  const kl_graph *first = kl_node_first_body(n);
  for (int k = 0; k < 2 && names[k]; k++) {
    const kl_graph *b = kl_node_body(n, names[k]);
    if (!b) return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s has no graph attribute %s", d,
                           names[k]);
    if (b->n_outer != first->n_outer || b->n_outer > n->n_in || b->n_outer > b->n_inputs)
      return kl_fail(e, KILN_ERR_INTERNAL, "%s: %s reads %d values of the enclosing graph; "
                     "the node gives %d (of %d inputs) and the first body %d", d, names[k],
                     b->n_outer, first->n_outer, n->n_in, first->n_outer);
    for (int c = n->n_in - b->n_outer; c < n->n_in; c++)
      if (n->in[c] == KL_ABSENT)
        return kl_fail(e, KILN_ERR_INTERNAL, "%s: the enclosing graph's value %d that %s "
                       "reads is absent", d, c - (n->n_in - b->n_outer), names[k]);
    kiln_status st = kl_graph_verify(b, e);
    if (st != KILN_OK) {
      kl_err_prefix(e, "%s: in %s", d, names[k]);
      return st;
    }
  }
  return KILN_OK;
}

static kiln_status check_value(const kl_graph *g, int v, kl_err *e) {
  const kl_value *val = &g->values[v];
  if (val->kind != KL_VALUE_CONST) return KILN_OK;
  int64_t numel;
  size_t bytes;
  if (!kl_type_is_concrete(&val->type) || !kl_type_numel(&val->type, &numel) ||
      kl_mul_overflow_size((size_t)numel, kl_dtype_size(val->type.dtype), &bytes) ||
      bytes != val->nbytes || (bytes && !val->data))
    return kl_fail(e, KILN_ERR_INTERNAL, "constant '%s' has %zu bytes of data that do not "
                   "match its type", val->name, val->nbytes);
  return KILN_OK;
}

kiln_status kl_graph_verify(const kl_graph *g, kl_err *e) {
  bool *defined = calloc((size_t)g->n_values + 1, sizeof(bool));
  if (!defined) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory verifying");
  kiln_status st = KILN_OK;
  for (int v = 0; v < g->n_values && st == KILN_OK; v++) {
    defined[v] = g->values[v].kind != KL_VALUE_INTERMEDIATE;
    st = check_value(g, v, e);
  }
  for (int i = 0; i < g->n_inputs && st == KILN_OK; i++)
    if (g->inputs[i] < 0 || g->inputs[i] >= g->n_values ||
        g->values[g->inputs[i]].kind != KL_VALUE_INPUT)
      st = kl_fail(e, KILN_ERR_INTERNAL, "graph input %d is not an input value", i);
  for (int i = 0; i < g->n_nodes && st == KILN_OK; i++) {
    st = check_node(g, i, defined, e);
    if (st == KILN_OK && kl_op_is_control(g->nodes[i].op)) st = check_control(g, &g->nodes[i], e);
    for (int k = 0; st == KILN_OK && k < g->nodes[i].n_out; k++)
      if (g->nodes[i].out[k] >= 0) defined[g->nodes[i].out[k]] = true;
  }
  for (int i = 0; i < g->n_outputs && st == KILN_OK; i++) {
    int v = g->outputs[i];
    if (v < 0 || v >= g->n_values)
      st = kl_fail(e, KILN_ERR_INTERNAL, "graph output %d refers to value id %d", i, v);
    else if (!defined[v])
      st = kl_fail(e, KILN_ERR_INVALID_MODEL, "graph output '%s' is never computed",
                   g->values[v].name);
  }
  free(defined);
  return st;
}
