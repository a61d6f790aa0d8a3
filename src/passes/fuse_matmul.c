/* Matrix-product rewrites.
 *
 * fuse_matmul_add: MatMul followed by an Add, the MatMul's output read by nothing else.
 *   2-D:  MatMul(A, B) -> Add(., C)     becomes  Gemm(A, B, C)   (C broadcasting to
 *         the product, constant or not)
 *   N-D:  MatMul(A, B) -> Add(., bias)  becomes  kiln.FusedMatMul(A, B, bias) when bias
 *         is a constant varying along the last axis only.
 * fold_transpose: a 2-D Transpose feeding a Gemm (or a 2-D MatMul, which becomes a
 *   Gemm), read by nothing else, becomes the Gemm's transA/transB:
 *         Gemm(Transpose(A), B)          becomes  Gemm(A, B) transA=1
 */
#include "ir/fused.h"
#include "passes/rewrite.h"

/* c broadcasts to x without enlarging it; when last_only, c also has size 1 on every
 * axis but the last. */
static bool bias_like(const kl_type *c, const kl_type *x, bool last_only) {
  if (!kl_rw_fits(c, x)) return false;
  for (int i = 0; last_only && i < c->rank - 1; i++)
    if (c->dims[i].size != 1) return false;
  return true;
}

static kiln_status fuse_add(kl_graph *g, int i, int *changed, kl_err *e) {
  const kl_node *n = &g->nodes[i];
  for (int k = 0; k < 2; k++) {
    int x = n->in[k], c = n->in[1 - k];
    int p = kl_rw_producer(g, x);
    if (x == c || p < 0 || g->nodes[p].op != KL_OP_MatMul || kl_rw_sole_consumer(g, x) != i ||
        !kl_dtype_is_float(g->values[x].type.dtype))
      continue;
    const kl_type *a = &g->values[g->nodes[p].in[0]].type;
    const kl_type *b = &g->values[g->nodes[p].in[1]].type;
    const kl_type *ct = &g->values[c].type, *xt = &g->values[x].type;
    kl_op op;
    if (a->rank == 2 && b->rank == 2 && bias_like(ct, xt, false)) op = KL_OP_Gemm;
    else if (kl_rw_const(g, c) && bias_like(ct, xt, true)) op = KL_OP_KilnFusedMatMul;
    else continue;
    kl_rw_set_op(g, p, op);
    kiln_status st = kl_rw_set_input(g, p, op == KL_OP_Gemm ? 2 : KL_FUSED_BIAS, c, e);
    if (st != KILN_OK) return st;
    int y = n->out[0];
    kl_rw_remove(g, i);
    kl_rw_take_output(g, p, 0, y);
    (*changed)++;
    return KILN_OK;
  }
  return KILN_OK;
}

kiln_status kl_pass_fuse_matmul_add(kl_graph *g, const kl_pass_config *cfg, int *changed,
                                    kl_err *e) {
  (void)cfg;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    if (n->op == KL_OP_Add && n->n_in == 2 && n->n_out == 1) st = fuse_add(g, i, changed, e);
  }
  if (st == KILN_OK) st = kl_rw_finish(g, *changed, e);
  return st;
}

/* The Transpose feeding input k of node n when it swaps the two dims of a matrix and
 * nothing else reads it; else -1. */
static int matrix_transpose(const kl_graph *g, int n, int k) {
  int t = kl_rw_input_op(g, n, k, KL_OP_Transpose);
  if (t < 0 || kl_rw_sole_consumer(g, g->nodes[t].out[0]) != n) return -1;
  if (g->values[g->nodes[t].in[0]].type.rank != 2) return -1;
  const int64_t *perm;
  int count = kl_attr_ints(&g->nodes[t], "perm", &perm);
  return count < 0 || (count == 2 && perm[0] == 1 && perm[1] == 0) ? t : -1;
}

static kiln_status fold_into(kl_graph *g, int n, int *changed, kl_err *e) {
  kl_node *node = &g->nodes[n];
  if (node->n_in < 2 || node->n_out != 1) return KILN_OK;
  bool is_gemm = node->op == KL_OP_Gemm || node->op == KL_OP_KilnFusedGemm;
  if (!is_gemm && (node->op != KL_OP_MatMul || g->values[node->in[0]].type.rank != 2 ||
                   g->values[node->in[1]].type.rank != 2))
    return KILN_OK;
  static const char *const flag[2] = {"transA", "transB"};
  for (int k = 0; k < 2; k++) {
    int t = matrix_transpose(g, n, k);
    if (t < 0) continue;
    if (g->nodes[n].op == KL_OP_MatMul) kl_rw_set_op(g, n, KL_OP_Gemm);
    int64_t was = kl_attr_int(&g->nodes[n], flag[k], 0) != 0;
    kiln_status st = kl_node_set_int(g, n, flag[k], !was, e);
    if (st != KILN_OK) return st;
    kl_graph_set_input(g, n, k, g->nodes[t].in[0]);
    kl_rw_remove(g, t);
    (*changed)++;
  }
  return KILN_OK;
}

kiln_status kl_pass_fold_transpose(kl_graph *g, const kl_pass_config *cfg, int *changed,
                                   kl_err *e) {
  (void)cfg;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++) st = fold_into(g, i, changed, e);
  if (st == KILN_OK) st = kl_rw_finish(g, *changed, e);
  return st;
}
