/* Residual (sum) fusion: Add(x, other), where x is the output of a Conv,
 * ConvTranspose, Gemm or MatMul read by nothing else and `other` broadcasts to x's
 * shape without enlarging it, becomes that node's Sum input. The sum is added before
 * the activation, so a later activation still fuses (fuse_act), while a node that
 * already has an activation or a Sum takes none:
 *
 *   Conv(X, W, B) -> Add(., shortcut) -> Relu
 *     becomes  kiln.FusedConv(X, W, B, shortcut) activation=Relu
 */
#include "ir/fused.h"
#include "passes/rewrite.h"

/* A node that can take a Sum input: a base op, or a fused op with no Sum and no
 * activation. */
static bool takes_sum(const kl_graph *g, int p) {
  if (p < 0 || g->nodes[p].n_out != 1) return false;
  const kl_node *n = &g->nodes[p];
  if (kl_fused_of(n->op) != KL_OP_COUNT) return true;
  return kl_fused_base(n->op) != KL_OP_COUNT && !kl_node_attr(n, "activation") &&
         (n->n_in <= KL_FUSED_SUM || n->in[KL_FUSED_SUM] < 0);
}

kiln_status kl_pass_fuse_sum(kl_graph *g, const kl_pass_config *cfg, int *changed,
                             kl_err *e) {
  (void)cfg;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    if (n->op != KL_OP_Add || n->n_in != 2 || n->n_out != 1) continue;
    for (int k = 0; k < 2; k++) {
      int x = n->in[k], other = n->in[1 - k], p = kl_rw_producer(g, x);
      if (x == other || !takes_sum(g, p) || kl_rw_sole_consumer(g, x) != i ||
          !kl_rw_fits(&g->values[other].type, &g->values[x].type) ||
          !kl_dtype_is_float(g->values[x].type.dtype))
        continue;
      if (kl_fused_base(g->nodes[p].op) == KL_OP_COUNT)
        kl_rw_set_op(g, p, kl_fused_of(g->nodes[p].op));
      st = kl_rw_set_input(g, p, KL_FUSED_SUM, other, e);
      if (st != KILN_OK) break;
      int y = n->out[0];
      kl_rw_remove(g, i);
      kl_rw_take_output(g, p, 0, y);
      (*changed)++;
      break;
    }
  }
  if (st == KILN_OK) st = kl_rw_finish(g, *changed, e);
  return st;
}
