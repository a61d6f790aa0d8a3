/* Pattern matching helpers shared by the fusion passes (fuse_transformer.c,
 * fuse_mha.c): the nodes a match will remove, collected while the pattern is matched
 * and detached together once the fused node is in place. */
#ifndef KL_PASSES_PATTERN_H
#define KL_PASSES_PATTERN_H

#include "passes/rewrite.h"

#define MAX_PATTERN 12

/* The nodes a match will remove. More than MAX_PATTERN are not recorded: those stay
 * in the graph, unread once the fused node replaces the pattern, and dce removes them. */
typedef struct match {
  int nodes[MAX_PATTERN];
  int n;
} match;

static inline void take(match *m, int node) {
  if (m->n < MAX_PATTERN) m->nodes[m->n++] = node;
}

static inline void remove_all(kl_graph *g, const match *m) {
  for (int i = 0; i < m->n; i++) kl_rw_remove(g, m->nodes[i]);
}

/* Node n's output 0 feeds only node `to` (and is not a graph output). */
static inline bool feeds_only(const kl_graph *g, int n, int to) {
  return n >= 0 && g->nodes[n].n_out >= 1 && kl_rw_sole_consumer(g, g->nodes[n].out[0]) == to;
}

#endif
