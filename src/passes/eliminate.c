/* Eliminate nodes that copy their input unchanged: Identity, inference Dropout (when
 * its mask is unused), Cast/CastLike to the dtype the input already has, a one-input
 * Concat, a Transpose whose permutation is the identity, and shape ops (Reshape,
 * Expand, Flatten, Squeeze, Unsqueeze) whose output shape is statically the input's.
 *
 *   x -> Identity -> y -> Relu      becomes      x -> Relu
 *
 * A Transpose that moves only axes of size 1 (the other axes keep their order, as in
 * [1, S, C] -> [S, 1, C]) moves no bytes: it becomes a Reshape to its output shape,
 * which the runtime does as a view instead of a copy. Its dims must all be known.
 *
 * A ReduceMean or ReduceMax of a float [N, C, H, W] over exactly H and W with keepdims
 * (timm's x.mean((2, 3), keepdim=True), torch.export's adaptive pooling to 1x1) is the
 * global pooling of the same: it becomes GlobalAveragePool or GlobalMaxPool, which the
 * CPU backend runs on channels-last tensors as they lie between convolutions (a
 * ReduceMean kept its input plain, and with it the convolution before it).
 */
#include "passes/rewrite.h"

#include <stdlib.h>
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

/* True when Transpose n permutes only axes of size 1 of an input whose dims are all
 * known (and is not the identity, which is_copy removes). */
static bool moves_only_unit_axes(const kl_graph *g, const kl_node *n) {
  if (n->op != KL_OP_Transpose || n->n_in < 1 || n->in[0] < 0 || n->n_out < 1 ||
      n->out[0] < 0)
    return false;
  const kl_type *x = &g->values[n->in[0]].type, *y = &g->values[n->out[0]].type;
  if (x->rank < 2 || x->rank != y->rank || x->dtype == KL_UNDEFINED) return false;
  const int64_t *perm;
  int count = kl_attr_ints(n, "perm", &perm);
  if (count != x->rank) return false; /* no perm (reversed dims) is left alone */
  for (int i = 0; i < x->rank; i++)
    if (x->dims[i].size < 1 || y->dims[i].size < 1) return false; /* 0 means "keep" */
  int64_t last = -1;
  for (int i = 0; i < count; i++) {
    if (perm[i] < 0 || perm[i] >= x->rank) return false;
    if (x->dims[perm[i]].size == 1) continue;
    if (perm[i] < last) return false; /* two axes longer than 1 change their order */
    last = perm[i];
  }
  return !identity_transpose(n, x->rank);
}

/* Transpose n becomes Reshape(x, y's dims). */
static kiln_status transpose_to_reshape(kl_graph *g, int i, kl_err *e) {
  const kl_type *y = &g->values[g->nodes[i].out[0]].type;
  int rank = y->rank;
  int64_t dims[1] = {rank};
  int64_t *shape = malloc(sizeof(int64_t) * (size_t)rank);
  if (!shape) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory rewriting a Transpose");
  for (int k = 0; k < rank; k++) shape[k] = y->dims[k].size;
  int c = kl_rw_add_const(g, "transpose_shape", KL_I64, 1, dims, shape, e);
  if (c < 0) return e->code;
  int ids[2] = {g->nodes[i].in[0], c};
  return kl_rw_become(g, i, KL_OP_Reshape, 2, ids, e);
}

kiln_status kl_pass_eliminate(kl_graph *g, const kl_pass_config *cfg, int *changed,
                              kl_err *e) {
  (void)cfg;
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    kl_op pool;
    if (is_copy(g, n) && kl_rw_bypass(g, i, n->in[0], n->out[0])) {
      (*changed)++;
    } else if (moves_only_unit_axes(g, n)) {
      kiln_status st = transpose_to_reshape(g, i, e);
      if (st != KILN_OK) return st;
      (*changed)++;
    } else if ((pool = kl_rw_global_pool_of(g, n)) != KL_OP_COUNT &&
               kl_dtype_is_float(g->values[n->in[0]].type.dtype)) {
      int x = n->in[0];
      kiln_status st = kl_rw_become(g, i, pool, 1, &x, e);
      if (st != KILN_OK) return st;
      (*changed)++;
    }
  }
  return kl_rw_finish(g, *changed, e);
}
