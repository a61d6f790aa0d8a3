/* Constant folding: a node whose inputs are all constants is run once, by its own
 * reference kernel, and its outputs become constants (ir/fold.c, which the TorchScript
 * importer runs while building too). A Shape (or Size) of a tensor whose dims are all
 * known folds too, which collapses the shape arithmetic that exporters write around
 * Reshape. Afterwards types are inferred again, since a folded shape input can make
 * downstream shapes known.
 *
 *   Shape(x: [1,3,8,8]) -> Gather(1) -> s      becomes      s = const 3
 *
 * Bounded (ir/fold.c): a node is not folded when its results are larger than both the
 * fold limit (cfg->fold_limit, default 1 MiB) and its inputs together, nor when its
 * work is too large to do at every load.
 */
#include "passes/rewrite.h"

#define DEFAULT_FOLD_LIMIT (INT64_C(1) << 20)

/* Runnable now, with no output that is a graph output (those keep being computed). */
static bool foldable(const kl_graph *g, const kl_node *n) {
  if (!kl_node_inputs_known(g, n)) return false;
  for (int k = 0; k < n->n_out; k++)
    if (kl_rw_is_output(g, n->out[k])) return false;
  return true;
}

kiln_status kl_pass_const_fold(kl_graph *g, const kl_pass_config *cfg, int *changed,
                               kl_err *e) {
  int64_t limit = cfg->fold_limit > 0 ? cfg->fold_limit : DEFAULT_FOLD_LIMIT;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++) {
    bool folded = false;
    if (foldable(g, &g->nodes[i])) st = kl_node_fold(g, i, limit, true, &folded, e);
    *changed += folded;
  }
  if (st == KILN_OK) st = kl_rw_finish(g, *changed, e);
  if (st == KILN_OK && *changed) st = kl_graph_infer(g, e);
  return st;
}
