/* Collapsing chains of data-movement ops.
 *
 * collapse_reshape: a Reshape to a constant shape (no 0 entries that would copy a dim
 *   of its input, unless allowzero) only depends on how many elements its input has, so
 *   a Reshape, Flatten, Squeeze or Unsqueeze before it, read by nothing else, can go:
 *         Reshape(Flatten(x), [2, -1])   becomes   Reshape(x, [2, -1])
 * collapse_transpose: Transpose(Transpose(x, p1), p2) is Transpose(x, p) with
 *   p[i] = p1[p2[i]]; when p is the identity the Transpose goes too. A Transpose that
 *   keeps its first axis, between a Reshape merging x's leading axes into that axis
 *   and a Reshape splitting it back, is one Transpose of x (see unmerge_at).
 * unflatten_softmax: see below.
 */
#include "passes/rewrite.h"

static bool copies_no_dims(const kl_graph *g, const kl_node *r) {
  const kl_value *shape = r->n_in == 2 ? kl_rw_const(g, r->in[1]) : NULL;
  int64_t n;
  if (!shape || !kl_type_numel(&shape->type, &n)) return false;
  if (kl_attr_int(r, "allowzero", 0)) return true;
  for (int64_t i = 0; i < n; i++)
    if (kl_load_i64(shape->data, shape->type.dtype, (size_t)i) == 0) return false;
  return true;
}

static bool is_reshaping(kl_op op) {
  return op == KL_OP_Reshape || op == KL_OP_Flatten || op == KL_OP_Squeeze ||
         op == KL_OP_Unsqueeze;
}

kiln_status kl_pass_collapse_reshape(kl_graph *g, const kl_pass_config *cfg, int *changed,
                                     kl_err *e) {
  (void)cfg;
  for (int i = 0; i < g->n_nodes; i++) {
    kl_node *r = &g->nodes[i];
    if (r->op != KL_OP_Reshape || r->n_out != 1 || !copies_no_dims(g, r)) continue;
    int inner = kl_rw_producer(g, r->in[0]);
    if (inner < 0 || !is_reshaping(g->nodes[inner].op) ||
        kl_rw_sole_consumer(g, r->in[0]) != i)
      continue;
    kl_graph_set_input(g, i, 0, g->nodes[inner].in[0]);
    kl_rw_remove(g, inner);
    (*changed)++;
  }
  return kl_rw_finish(g, *changed, e);
}

/* The permutation of Transpose node t over `rank` dims (absent perm reverses). */
static bool perm_of(const kl_node *t, int rank, int64_t *perm) {
  const int64_t *p;
  int count = kl_attr_ints(t, "perm", &p);
  if (count < 0) {
    for (int i = 0; i < rank; i++) perm[i] = rank - 1 - i;
    return rank >= 0;
  }
  if (count != rank) return false;
  for (int i = 0; i < rank; i++) {
    if (p[i] < 0 || p[i] >= rank) return false;
    perm[i] = p[i];
  }
  return true;
}

static kiln_status compose(kl_graph *g, int i, int *changed, kl_err *e) {
  int t1 = kl_rw_input_op(g, i, 0, KL_OP_Transpose);
  if (t1 < 0) return KILN_OK;
  int x = g->nodes[t1].in[0], rank = g->values[x].type.rank;
  int64_t p1[KL_MAX_RANK], p2[KL_MAX_RANK], p[KL_MAX_RANK];
  if (rank < 0 || !perm_of(&g->nodes[t1], rank, p1) || !perm_of(&g->nodes[i], rank, p2))
    return KILN_OK;
  bool identity = true;
  for (int d = 0; d < rank; d++) {
    p[d] = p1[p2[d]];
    identity &= p[d] == d;
  }
  kl_graph_set_input(g, i, 0, x);
  if (identity && kl_rw_bypass(g, i, x, g->nodes[i].out[0])) {
    (*changed)++;
    return KILN_OK;
  }
  (*changed)++;
  return kl_node_set_ints(g, i, "perm", p, rank, e);
}

/* Reshape node r2 of Transpose(Reshape(x, merged), p) with p[0] = 0, where the first
 * Reshape gives x's k leading axes as one (its other dims are x's) and r2 gives them
 * back (its other dims are the Transpose's): r2 becomes Transpose(x), those k axes
 * staying in front. torch.onnx's dynamo exporter transposes the keys of
 * scaled_dot_product_attention so: [B, H, T, D] -> [B*H, T, D] -> [B*H, D, T] ->
 * [B, H, D, T]. Dims are compared as inferred, symbols included. */
static kiln_status unmerge_at(kl_graph *g, int r2, int *changed, kl_err *e) {
  int t = kl_rw_input_op(g, r2, 0, KL_OP_Transpose);
  int r1 = t >= 0 ? kl_rw_input_op(g, t, 0, KL_OP_Reshape) : -1;
  if (r1 < 0 || kl_rw_sole_consumer(g, g->nodes[t].out[0]) != r2 ||
      kl_rw_sole_consumer(g, g->nodes[r1].out[0]) != t)
    return KILN_OK;
  int x = g->nodes[r1].in[0];
  const kl_type *xt = &g->values[x].type, *mt = &g->values[g->nodes[r1].out[0]].type;
  const kl_type *tt = &g->values[g->nodes[t].out[0]].type;
  const kl_type *yt = &g->values[g->nodes[r2].out[0]].type;
  int n = xt->rank, q = mt->rank, k = n - q + 1;
  int64_t p[KL_MAX_RANK], perm[KL_MAX_RANK];
  if (q < 1 || k < 1 || yt->rank != n || tt->rank != q || !perm_of(&g->nodes[t], q, p) ||
      p[0] != 0)
    return KILN_OK;
  for (int i = 0; i < k; i++) {
    if (!kl_dim_equal(yt->dims[i], xt->dims[i])) return KILN_OK;
    perm[i] = i;
  }
  for (int j = 1; j < q; j++) {
    if (!kl_dim_equal(mt->dims[j], xt->dims[k - 1 + j]) ||
        !kl_dim_equal(yt->dims[k - 1 + j], tt->dims[j]))
      return KILN_OK;
    perm[k - 1 + j] = k - 1 + p[j];
  }
  kiln_status st = kl_rw_become(g, r2, KL_OP_Transpose, 1, &x, e);
  if (st == KILN_OK) st = kl_node_set_ints(g, r2, "perm", perm, n, e);
  if (st != KILN_OK) return st;
  kl_rw_remove(g, t);
  kl_rw_remove(g, r1);
  (*changed)++;
  return KILN_OK;
}

kiln_status kl_pass_collapse_transpose(kl_graph *g, const kl_pass_config *cfg,
                                       int *changed, kl_err *e) {
  (void)cfg;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++)
    if (g->nodes[i].op == KL_OP_Transpose && g->nodes[i].n_out == 1)
      st = compose(g, i, changed, e);
    else if (g->nodes[i].op == KL_OP_Reshape && g->nodes[i].n_out == 1)
      st = unmerge_at(g, i, changed, e);
  return st == KILN_OK ? kl_rw_finish(g, *changed, e) : st;
}

/* unflatten_softmax: older opsets' Softmax/LogSoftmax worked on a 2-D view, which the
 * importer writes as Flatten -> Softmax(axis 1) -> Reshape back. When the Flatten only
 * merges the leading dims (axis = rank - 1), the softmax already runs along the last
 * axis of the original tensor:
 *         Reshape(Softmax(Flatten(x, axis=r-1)), shape of x)   becomes   Softmax(x, axis=-1)
 */
static kiln_status unflatten_at(kl_graph *g, int r, int *changed, kl_err *e) {
  int sm = kl_rw_producer(g, g->nodes[r].in[0]);
  if (sm < 0 || (g->nodes[sm].op != KL_OP_Softmax && g->nodes[sm].op != KL_OP_LogSoftmax) ||
      kl_rw_sole_consumer(g, g->nodes[sm].out[0]) != r)
    return KILN_OK;
  int fl = kl_rw_producer(g, g->nodes[sm].in[0]);
  if (fl < 0 || g->nodes[fl].op != KL_OP_Flatten ||
      kl_rw_sole_consumer(g, g->nodes[fl].out[0]) != sm)
    return KILN_OK;
  int x = g->nodes[fl].in[0];
  const kl_type *xt = &g->values[x].type;
  int64_t axis = kl_attr_int(&g->nodes[fl], "axis", 1), sm_axis = kl_attr_int(&g->nodes[sm], "axis", -1);
  if (xt->rank < 2 || (axis != xt->rank - 1 && axis != -1) || (sm_axis != 1 && sm_axis != -1) ||
      !kl_rw_same_shape(xt, &g->values[g->nodes[r].out[0]].type))
    return KILN_OK;
  kiln_status st = kl_rw_become(g, r, g->nodes[sm].op, 1, &x, e);
  if (st == KILN_OK) st = kl_node_set_int(g, r, "axis", -1, e);
  if (st != KILN_OK) return st;
  kl_rw_remove(g, sm);
  kl_rw_remove(g, fl);
  (*changed)++;
  return KILN_OK;
}

kiln_status kl_pass_unflatten_softmax(kl_graph *g, const kl_pass_config *cfg, int *changed,
                                      kl_err *e) {
  (void)cfg;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++)
    if (g->nodes[i].op == KL_OP_Reshape && g->nodes[i].n_out == 1)
      st = unflatten_at(g, i, changed, e);
  return st == KILN_OK ? kl_rw_finish(g, *changed, e) : st;
}
