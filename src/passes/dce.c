/* Dead code elimination: nodes none of whose outputs reach a graph output. */
#include "passes/pass.h"

kiln_status kl_pass_dce(kl_graph *g, const kl_pass_config *cfg, int *changed, kl_err *e) {
  (void)cfg;
  int nodes = g->n_nodes;
  kiln_status st = kl_graph_compact(g, e);
  *changed = nodes - g->n_nodes;
  return st;
}
