/* Runs passes to a fixed point, with per-pass counters. */
#include "passes/pass.h"

#include <string.h>

kiln_status kl_pass_dce(kl_graph *g, const kl_pass_config *cfg, bool *changed, kl_err *e);

static const kl_pass pass_table[] = {
    {"dce", 1, "remove nodes whose results are never used", kl_pass_dce},
};
#define N_PASSES ((int)(sizeof pass_table / sizeof pass_table[0]))
_Static_assert(sizeof pass_table / sizeof pass_table[0] <= KL_MAX_PASSES, "too many passes");

const kl_pass *kl_passes(int *count) {
  *count = N_PASSES;
  return pass_table;
}

/* +1 forced on, -1 forced off, 0 by level; KILN_ERR_INVALID_ARGUMENT for a bad list. */
static kiln_status parse_overrides(const char *list, int *force, kl_err *e) {
  memset(force, 0, sizeof(int) * N_PASSES);
  if (!list) return KILN_OK;
  const char *p = list;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > 0) {
      int sign = 1;
      if (*p == '+' || *p == '-') {
        sign = *p == '-' ? -1 : 1;
        p++;
        len--;
      }
      int k = 0;
      while (k < N_PASSES && !(strlen(pass_table[k].name) == len &&
                               strncmp(pass_table[k].name, p, len) == 0))
        k++;
      if (k == N_PASSES)
        return kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "unknown pass '%.*s' in --passes",
                       (int)len, p);
      force[k] = sign;
    }
    p += len;
    if (*p == ',') p++;
  }
  return KILN_OK;
}

static void count_ops(const kl_graph *g, int *ops, int *total) {
  memset(ops, 0, sizeof(int) * KL_OP_COUNT);
  for (int i = 0; i < g->n_nodes; i++) ops[g->nodes[i].op]++;
  *total = g->n_nodes;
}

kiln_status kl_optimize(kl_graph *g, const kl_pass_config *cfg, kl_pass_stats *stats,
                        kl_err *e) {
  int force[N_PASSES];
  kiln_status st = parse_overrides(cfg->passes, force, e);
  if (st != KILN_OK) return st;
  if (stats) {
    memset(stats, 0, sizeof *stats);
    stats->n_passes = N_PASSES;
    for (int k = 0; k < N_PASSES; k++) stats->name[k] = pass_table[k].name;
    count_ops(g, stats->ops_before, &stats->nodes_before);
  }
  bool verify = cfg->verify;
#ifdef KL_DEBUG_VERIFY
  verify = true;
#endif
  /* every pass shrinks or rewrites; the round limit only guards against a pass pair
   * that undoes each other */
  for (int round = 0; round < 32; round++) {
    bool any = false;
    for (int k = 0; k < N_PASSES; k++) {
      bool on = force[k] ? force[k] > 0 : cfg->level >= pass_table[k].min_level;
      if (!on) continue;
      bool changed = false;
      st = pass_table[k].run(g, cfg, &changed, e);
      if (st == KILN_OK && changed) st = kl_graph_toposort(g, e);
      if (st == KILN_OK && changed && verify) st = kl_graph_verify(g, e);
      if (st != KILN_OK) {
        kl_err_prefix(e, "pass '%s'", pass_table[k].name);
        return st;
      }
      if (changed && stats) stats->fired[k]++;
      any |= changed;
    }
    if (!any) break;
  }
  if (stats) count_ops(g, stats->ops_after, &stats->nodes_after);
  return KILN_OK;
}
