/* A per-channel scale of a convolution's input moved into its weights:
 *
 *   Mul(X, S) -> Conv(., W, B)      becomes      Conv(X, Mul(W, S), B)
 *
 * where S varies along X's channel axis only (size 1 on every other axis: the
 * [1, C, 1, 1] scale that a squeeze-and-excitation block computes from X itself at
 * batch 1, or any per-channel tensor), the product is read only as the input of a Conv
 * or kiln.FusedConv with one group, and W is the convolution's [M, C, k...] weights.
 * The two are equal because sum_c W[m, c, k] (X[c] S[c]) = sum_c (W[m, c, k] S[c]) X[c]
 * at every output position, padding included (a zero scaled is still zero). S stays
 * right-aligned against W exactly as against X, so Mul(W, S) broadcasts it along the
 * same axis.
 *
 * Worth it only when W has fewer elements than X: the Mul then runs over the weights
 * instead of the activation, and the activation goes to the convolution as it is, not
 * through a second copy. In EfficientNet-B0 that is the first 9 of its 16
 * squeeze-and-excitation blocks (X from 32x112x112 down to 672x14x14), not the last
 * ones at 7x7 (W 1152 x 192 against X 1152 x 49). A constant S leaves Mul(W, S) for
 * const_fold, which folds it once.
 */
#include "passes/rewrite.h"

/* Whether s, right-aligned against x (rank >= 3, [N, C, spatial...]), has size 1 on
 * every axis but the channel axis 1, where it has 1 or x's C. */
static bool per_channel(const kl_type *s, const kl_type *x) {
  if (!kl_type_is_concrete(s) || s->rank > x->rank) return false;
  for (int i = 0; i < s->rank; i++) {
    int axis = x->rank - s->rank + i;
    int64_t size = s->dims[i].size;
    if (size != 1 && !(axis == 1 && size == x->dims[1].size)) return false;
  }
  return true;
}

kiln_status kl_pass_fold_input_scale(kl_graph *g, const kl_pass_config *cfg, int *changed,
                                     kl_err *e) {
  (void)cfg;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    if (n->op != KL_OP_Mul || n->n_in != 2 || n->n_out != 1) continue;
    int y = n->out[0], c = kl_rw_sole_consumer(g, y);
    if (c < 0) continue;
    const kl_node *conv = &g->nodes[c];
    if ((conv->op != KL_OP_Conv && conv->op != KL_OP_KilnFusedConv) || conv->n_in < 2 ||
        conv->in[0] != y || conv->in[1] == y || kl_attr_int(conv, "group", 1) != 1)
      continue;
    int w = conv->in[1];
    const kl_type *wt = &g->values[w].type, *yt = &g->values[y].type;
    /* X's size is needed only to weigh a scale computed at run time; a constant one
     * folds whatever X's batch (a symbolic dim: numel unknown) */
    int64_t w_numel, y_numel;
    bool sized = kl_type_numel(yt, &y_numel);
    if (!kl_type_numel(wt, &w_numel) || yt->rank < 3 ||
        wt->rank != yt->rank || wt->dims[1].size < 0 || wt->dims[1].size != yt->dims[1].size ||
        !kl_dtype_is_float(yt->dtype) || wt->dtype != yt->dtype)
      continue;
    for (int k = 0; k < 2; k++) {
      int x = n->in[k], s = n->in[1 - k];
      const kl_type *xt = &g->values[x].type, *st_ = &g->values[s].type;
      if (x == s || st_->dtype != yt->dtype || !kl_rw_same_shape(xt, yt) ||
          !per_channel(st_, yt))
        continue;
      if (!kl_rw_const(g, s) && (!sized || w_numel >= y_numel)) break; /* cheaper on X */
      /* the Mul now scales the weights, and the convolution reads X */
      st = kl_rw_set_input(g, i, 0, w, e);
      if (st == KILN_OK) st = kl_rw_set_input(g, i, 1, s, e);
      if (st == KILN_OK) st = kl_rw_set_input(g, c, 0, x, e);
      if (st == KILN_OK) st = kl_rw_set_input(g, c, 1, y, e);
      if (st != KILN_OK) break;
      g->values[y].type = *wt;
      (*changed)++;
      break;
    }
  }
  if (st == KILN_OK) st = kl_rw_finish(g, *changed, e);
  return st;
}
