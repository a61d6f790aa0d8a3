/* If with a constant condition: the branch it takes replaces it, its nodes moved into
 * the enclosing graph (its captures read as the values they are, its constants and
 * values copied), so that the passes see through it and no body session runs.
 *
 *   c = Constant(true); y = If(c) then_branch: {t = Relu(x); out t}
 *                                                      becomes    t' = Relu(x); y = Identity(t')
 *
 * The Identity for each output goes with the eliminate pass. Exports make such Ifs from
 * shape checks (an image count, an empty box list) that constant folding settles. */
#include "passes/rewrite.h"

#include <stdlib.h>
#include <string.h>

/* Body value v's id in g, made as needed: a capture is the node's input, a constant a
 * copy, anything else a fresh value of the same type (its name when g has none such). */
static int map_value(kl_graph *g, const kl_node *n, kl_graph *b, int v, int *map, kl_err *e) {
  if (v < 0 || map[v] != -2) return v < 0 ? v : map[v];
  const kl_value *x = &b->values[v];
  int id = -1;
  if (x->kind == KL_VALUE_INPUT) {
    int k = 0;
    while (k < b->n_inputs && b->inputs[k] != v) k++;
    int formal = n->n_in - b->n_outer, first_cap = b->n_inputs - b->n_outer;
    if (k < first_cap || k >= b->n_inputs)
      return kl_fail(e, KILN_ERR_INTERNAL, "a branch input '%s' that is not a capture",
                     x->name), -1;
    id = n->in[formal + k - first_cap];
  } else if (x->kind == KL_VALUE_CONST) {
    int64_t dims[KL_MAX_RANK];
    for (int d = 0; d < x->type.rank; d++) dims[d] = x->type.dims[d].size;
    void *data = malloc(x->nbytes ? x->nbytes : 1);
    if (!data) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory"), -1;
    if (x->nbytes) memcpy(data, x->data, x->nbytes);
    id = kl_rw_add_const(g, x->name, x->type.dtype, x->type.rank, dims, data, e);
  } else {
    kl_type t = kl_type_translate(g, b, &x->type);
    id = kl_graph_add_value(g, kl_graph_find_value(g, x->name) < 0 ? x->name : NULL, e);
    if (id >= 0) g->values[id].type = t;
  }
  map[v] = id;
  return id;
}

/* Node i, an If whose cond is the constant `cond`, replaced by its branch. */
static kiln_status inline_branch(kl_graph *g, int i, bool cond, kl_err *e) {
  kl_graph *b = kl_node_body(&g->nodes[i], cond ? "then_branch" : "else_branch");
  int *map = malloc(sizeof(int) * (size_t)(b->n_values + 1));
  int n_out = g->nodes[i].n_out;
  int *outs = malloc(sizeof(int) * (size_t)(n_out + 1));
  int *ins = NULL, *bouts = NULL;
  if (!map || !outs) {
    free(map);
    free(outs);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (int v = 0; v < b->n_values; v++) map[v] = -2;
  memcpy(outs, g->nodes[i].out, sizeof(int) * (size_t)n_out);
  kiln_status st = KILN_OK;
  for (int j = 0; st == KILN_OK && j < b->n_nodes; j++) {
    kl_node *bn = &b->nodes[j];
    free(ins);
    free(bouts);
    ins = malloc(sizeof(int) * (size_t)(bn->n_in + 1));
    bouts = malloc(sizeof(int) * (size_t)(bn->n_out + 1));
    if (!ins || !bouts) {
      st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      break;
    }
    for (int k = 0; k < bn->n_in && st == KILN_OK; k++)
      if ((ins[k] = map_value(g, &g->nodes[i], b, bn->in[k], map, e)) < 0 && bn->in[k] >= 0)
        st = e->code;
    for (int k = 0; k < bn->n_out && st == KILN_OK; k++)
      if ((bouts[k] = map_value(g, &g->nodes[i], b, bn->out[k], map, e)) < 0 && bn->out[k] >= 0)
        st = e->code;
    if (st != KILN_OK) break;
    int id = kl_graph_add_node(g, bn->op, bn->name, bn->n_in, ins, bn->n_out, bouts, e);
    if (id < 0) {
      st = e->code;
      break;
    }
    /* the branch goes with the If: its attributes (bodies included) move */
    kl_node *nn = &g->nodes[id];
    nn->attrs = bn->attrs;
    nn->n_attrs = bn->n_attrs;
    bn->attrs = NULL;
    bn->n_attrs = 0;
    free(nn->src);
    nn->src = bn->src;
    bn->src = NULL;
  }
  int *results = st == KILN_OK ? malloc(sizeof(int) * (size_t)(n_out + 1)) : NULL;
  if (st == KILN_OK && !results) st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int k = 0; st == KILN_OK && k < n_out; k++)
    if ((results[k] = map_value(g, &g->nodes[i], b, b->outputs[k], map, e)) < 0) st = e->code;
  if (st == KILN_OK) {
    kl_rw_remove(g, i); /* frees the If (and what is left of b) with kl_rw_finish */
    for (int k = 0; st == KILN_OK && k < n_out; k++) {
      if (outs[k] < 0) continue;
      if (kl_graph_add_node(g, KL_OP_Identity, "", 1, &results[k], 1, &outs[k], e) < 0)
        st = e->code;
    }
  }
  free(results);
  free(ins);
  free(bouts);
  free(map);
  free(outs);
  return st;
}

kiln_status kl_pass_inline_if(kl_graph *g, const kl_pass_config *cfg, int *changed,
                              kl_err *e) {
  (void)cfg;
  int count = g->n_nodes; /* the nodes added are the branches' own, inlined already */
  for (int i = 0; i < count; i++) {
    const kl_node *n = &g->nodes[i];
    const kl_value *c = n->op == KL_OP_If && n->n_in > 0 ? kl_rw_const(g, n->in[0]) : NULL;
    int64_t numel;
    if (!c || c->type.dtype != KL_BOOL || !kl_type_numel(&c->type, &numel) || numel != 1)
      continue;
    kiln_status st = inline_branch(g, i, *(const uint8_t *)c->data != 0, e);
    if (st != KILN_OK) return st;
    (*changed)++;
  }
  return kl_rw_finish(g, *changed, e);
}
