/* Eliminate nodes that copy their input unchanged: Identity, inference Dropout (when
 * its mask is unused), Cast/CastLike to the dtype the input already has, a one-input
 * Concat, a Transpose whose permutation is the identity, and shape ops (Reshape,
 * Expand, Flatten, Squeeze, Unsqueeze) whose output shape is statically the input's.
 *
 *   x -> Identity -> y -> Relu      becomes      x -> Relu
 */
#include "passes/rewrite.h"

#include <string.h>

static bool is_shape_op(const kl_node *n) {
  static const char *const names[] = {"Reshape", "Expand", "Flatten", "Squeeze", "Unsqueeze"};
  const char *name = kl_op_name(n->op);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(name, names[i]) == 0) return true;
  return false;
}

static bool identity_transpose(const kl_node *n, int rank) {
  const int64_t *perm;
  int count = kl_attr_ints(n, "perm", &perm);
  if (count < 0) return rank >= 0 && rank <= 1; /* no perm: the dims are reversed */
  for (int i = 0; i < count; i++)
    if (perm[i] != i) return false;
  return true;
}

/* True when node n's output 0 is always an exact copy of its input 0. */
static bool is_copy(const kl_graph *g, const kl_node *n) {
  if (n->n_in < 1 || n->in[0] < 0 || n->n_out < 1 || n->out[0] < 0) return false;
  const kl_type *x = &g->values[n->in[0]].type, *y = &g->values[n->out[0]].type;
  switch (n->op) {
  case KL_OP_Identity: return true;
  case KL_OP_Dropout: return n->n_out < 2 || n->out[1] < 0 || kl_rw_uses(g, n->out[1]) == 0;
  case KL_OP_Cast:
  case KL_OP_CastLike:
    return x->dtype != KL_UNDEFINED && x->dtype == y->dtype;
  case KL_OP_Concat: return kl_node_input_count(n) == 1;
  case KL_OP_Transpose: return identity_transpose(n, x->rank);
  default: return is_shape_op(n) && kl_rw_same_shape(x, y) && x->dtype == y->dtype;
  }
}

kiln_status kl_pass_eliminate(kl_graph *g, const kl_pass_config *cfg, int *changed,
                              kl_err *e) {
  (void)cfg;
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    if (is_copy(g, n) && kl_rw_bypass(g, i, n->in[0], n->out[0])) (*changed)++;
  }
  return kl_rw_finish(g, *changed, e);
}
