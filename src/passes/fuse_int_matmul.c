/* An integer product whose sums are scaled back to float32 becomes one node, as dynamic
 * quantization (kiln quantize --dynamic, onnxruntime's quantize_dynamic) and fold_qdq's
 * float products write it:
 *
 *   MatMulInteger(A, B, za, zb) -> Cast(to float32) -> Mul(., scale) -> Add(., bias)
 *     becomes  kiln.MatMulIntegerToFloat(A, B, za, zb, scale, bias)
 *
 * scale (the product of A's and B's scales, often computed at run time from a
 * DynamicQuantizeLinear) and bias hold one value or one per column of the product and
 * do not enlarge it; the Add is optional, and either operand order of the Mul and the
 * Add is taken. The fused node computes each step in float32 as the nodes it replaces
 * (Y = float(sum) * scale, then + bias), so its results are theirs bit for bit; kiln's
 * int8 product applies the scale and bias to each task's sums while they are in the
 * cache, the other kernels in one pass after the product, instead of three more passes
 * over its output (Cast, Mul, Add: about 7 of BERT-base's 150 ms when dynamically
 * quantized, at 1 thread on a Zen 3).
 */
#include "ir/infer_common.h"
#include "passes/rewrite.h"

/* v (float32) holds one value or one per column of y: no more dims than y, every dim
 * 1 but the last, which is 1 or y's last; all known. */
static bool per_column(const kl_type *v, const kl_type *y) {
  if (v->dtype != KL_F32 || v->rank < 0 || y->rank < 1 || v->rank > y->rank) return false;
  for (int d = 0; d < v->rank; d++)
    if (!kl_dim_known(v->dims[d])) return false;
  for (int d = 0; d + 1 < v->rank; d++)
    if (v->dims[d].size != 1) return false;
  kl_dim n = y->dims[y->rank - 1];
  return v->rank == 0 || v->dims[v->rank - 1].size == 1 ||
         (kl_dim_known(n) && v->dims[v->rank - 1].size == n.size);
}

/* The node reading x alone when it is a two-input op of kind op with x on one side and,
 * on the other, a per-column float32 operand of y; *other gets that operand. */
static int scaling_consumer(const kl_graph *g, int x, kl_op op, const kl_type *y, int *other) {
  int k = kl_rw_sole_consumer(g, x);
  if (k < 0) return -1;
  const kl_node *n = &g->nodes[k];
  if (n->op != op || n->n_in != 2 || n->n_out != 1) return -1;
  int o = kl_rw_other_input(n, x);
  if (o < 0 || o == x || !per_column(&g->values[o].type, y) ||
      !kl_rw_same_shape(&g->values[n->out[0]].type, y))
    return -1;
  *other = o;
  return k;
}

kiln_status kl_pass_fuse_int_matmul(kl_graph *g, const kl_pass_config *cfg, int *changed,
                                    kl_err *e) {
  (void)cfg;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++) {
    const kl_node *mm = &g->nodes[i];
    if (mm->op != KL_OP_MatMulInteger || mm->n_out != 1 || mm->out[0] < 0) continue;
    int cast = kl_rw_sole_consumer(g, mm->out[0]);
    if (cast < 0 || g->nodes[cast].op != KL_OP_Cast ||
        kl_attr_int(&g->nodes[cast], "to", 0) != KL_F32 || g->nodes[cast].n_out != 1)
      continue;
    int f = g->nodes[cast].out[0], scale, bias = -1;
    kl_type y = g->values[f].type;
    y.dtype = KL_F32;
    int mul = scaling_consumer(g, f, KL_OP_Mul, &y, &scale);
    if (mul < 0) continue;
    int add = scaling_consumer(g, g->nodes[mul].out[0], KL_OP_Add, &y, &bias);
    int last = add >= 0 ? add : mul, ins[6] = {-1, -1, -1, -1, scale, bias};
    for (int k = 0; k < 4; k++) ins[k] = k < mm->n_in ? mm->in[k] : -1;
    int out = g->nodes[last].out[0]; /* the product keeps its name, takes the result */
    kl_rw_remove(g, cast);
    kl_rw_remove(g, mul);
    if (add >= 0) kl_rw_remove(g, add);
    st = kl_rw_become(g, i, KL_OP_KilnMatMulIntegerToFloat, bias >= 0 ? 6 : 5, ins, e);
    if (st != KILN_OK) break;
    kl_rw_take_output(g, i, 0, out);
    (*changed)++;
  }
  if (st == KILN_OK) st = kl_rw_finish(g, *changed, e);
  return st;
}
