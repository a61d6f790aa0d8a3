/* Runs passes to a fixed point, with per-pass counters. */
#include "passes/pass.h"

#include <string.h>

#define KL_PASS(fn) \
  kiln_status kl_pass_##fn(kl_graph *g, const kl_pass_config *cfg, int *changed, kl_err *e);
KL_PASS(dce)
KL_PASS(eliminate)
KL_PASS(fold_qdq)
KL_PASS(const_fold)
KL_PASS(inline_if)
KL_PASS(shape_values)
KL_PASS(cse)
KL_PASS(collapse_reshape)
KL_PASS(collapse_transpose)
KL_PASS(unflatten_softmax)
KL_PASS(fuse_layernorm)
KL_PASS(fuse_gelu)
KL_PASS(fuse_skip_layernorm)
KL_PASS(fuse_attention)
KL_PASS(fuse_mha)
KL_PASS(fuse_qkv)
KL_PASS(fuse_rmsnorm)
KL_PASS(sink_reshape)
KL_PASS(trim_taps)
KL_PASS(fold_bn)
KL_PASS(fold_scale_bias)
KL_PASS(merge_convs)
KL_PASS(fuse_matmul_add)
KL_PASS(fuse_int_matmul)
KL_PASS(fold_transpose)
KL_PASS(fuse_sum)
KL_PASS(fuse_act)
KL_PASS(fold_input_scale)
KL_PASS(layout)
#undef KL_PASS

/* In the order they run each round; docs/passes.md describes each with an example. */
static const kl_pass pass_table[] = {
    {"dce", 1, "remove nodes whose results are never used", kl_pass_dce},
    {"eliminate", 1, "remove Identity, Dropout, no-op Cast/Reshape/Expand/Transpose",
     kl_pass_eliminate},
    /* before const_fold, which would fold the weights' DequantizeLinear to float32 */
    {"fold_qdq", 2, "DequantizeLinear/QuantizeLinear around a Conv, MatMul or Gemm into "
     "QLinearConv, QLinearMatMul or QLinearGemm (int8); a QLinearConv/QLinearMatMul of "
     "weights the int8 kernels cannot take exactly into float32",
     kl_pass_fold_qdq},
    {"const_fold", 1, "run nodes with constant inputs (and Shape of known dims) once",
     kl_pass_const_fold},
    {"inline_if", 1, "an If whose condition is constant becomes the branch it takes",
     kl_pass_inline_if},
    {"shape_values", 1, "shape arithmetic on symbolic dims: fold what is known, constant "
     "Reshape/Expand targets", kl_pass_shape_values},
    {"cse", 1, "merge duplicate constants and nodes with the same op, inputs, attributes",
     kl_pass_cse},
    {"collapse_reshape", 2, "drop a Reshape/Flatten/Squeeze/Unsqueeze before a Reshape",
     kl_pass_collapse_reshape},
    {"collapse_transpose", 2, "compose Transpose pairs; drop identity results",
     kl_pass_collapse_transpose},
    {"unflatten_softmax", 2, "old-opset Flatten, Softmax, Reshape into one last-axis Softmax",
     kl_pass_unflatten_softmax},
    {"fuse_layernorm", 2, "decomposed LayerNormalization (ReduceMean ... Sqrt, Div) into one",
     kl_pass_fuse_layernorm},
    {"fuse_gelu", 2, "GELU written with Erf or Tanh into Gelu", kl_pass_fuse_gelu},
    {"fuse_skip_layernorm", 2, "Add + LayerNormalization into kiln.SkipLayerNorm",
     kl_pass_fuse_skip_layernorm},
    {"fuse_attention", 2, "MatMul, scale, mask Add, Softmax, MatMul into kiln.Attention",
     kl_pass_fuse_attention},
    {"fuse_mha", 2, "head split/merge Reshape+Transpose around kiln.Attention into it",
     kl_pass_fuse_mha},
    {"fuse_qkv", 2, "three Q/K/V projections of one input into one with packed weights",
     kl_pass_fuse_qkv},
    {"fuse_rmsnorm", 2, "x * rsqrt(mean(x^2) + eps) * w into RMSNormalization",
     kl_pass_fuse_rmsnorm},
    {"sink_reshape", 2, "move an activation above a Reshape of a matmul, for fuse_act",
     kl_pass_sink_reshape},
    {"trim_taps", 2, "drop kernel taps of a Conv that only ever read padding (large "
     "dilations)", kl_pass_trim_taps},
    {"fold_bn", 2, "fold BatchNormalization into Conv/ConvTranspose/Gemm/MatMul weights",
     kl_pass_fold_bn},
    {"fold_scale_bias", 2, "fold per-channel constant Add/Sub/Mul/Div into weights",
     kl_pass_fold_scale_bias},
    {"merge_convs", 2, "summed convolutions of one input (and a BatchNorm of it) into one "
     "(RepVGG/MobileOne blocks)", kl_pass_merge_convs},
    {"fuse_matmul_add", 2, "MatMul+Add into Gemm (2-D) or FusedMatMul with a bias",
     kl_pass_fuse_matmul_add},
    {"fuse_int_matmul", 2, "MatMulInteger, Cast to float32, scale Mul (and bias Add) into "
     "kiln.MatMulIntegerToFloat", kl_pass_fuse_int_matmul},
    {"fold_transpose", 2, "fold 2-D Transposes into Gemm transA/transB",
     kl_pass_fold_transpose},
    {"fuse_sum", 2, "fuse a residual Add into the Conv/Gemm/MatMul before it",
     kl_pass_fuse_sum},
    {"fuse_act", 2, "fuse activations into the Conv/Gemm/MatMul before them",
     kl_pass_fuse_act},
    {"fold_input_scale", 2, "per-channel Mul before a Conv into its weights (SE blocks)",
     kl_pass_fold_input_scale},
    {"layout", 3, "channels-last convolutions and pooling, explicit Transposes (oneDNN)",
     kl_pass_layout},
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

/* The bodies of If, Loop and Scan, each optimized as a graph of its own (their inputs
 * typed by the enclosing graph's inference), before the graph around them. */
static kiln_status optimize_bodies(kl_graph *g, const kl_pass_config *cfg, kl_err *e) {
  for (int i = 0; i < g->n_nodes; i++) {
    kl_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_attrs; k++) {
      if (n->attrs[k].kind != KL_ATTR_GRAPH || !n->attrs[k].g) continue;
      kiln_status st = kl_optimize(n->attrs[k].g, cfg, NULL, e);
      if (st != KILN_OK) {
        char d[256];
        kl_err_prefix(e, "%s: in %s", kl_node_describe(g, n, d, sizeof d), n->attrs[k].name);
        return st;
      }
    }
  }
  return KILN_OK;
}

kiln_status kl_optimize(kl_graph *g, const kl_pass_config *cfg, kl_pass_stats *stats,
                        kl_err *e) {
  int force[N_PASSES];
  kiln_status st = parse_overrides(cfg->passes, force, e);
  if (st != KILN_OK) return st;
  if ((st = optimize_bodies(g, cfg, e)) != KILN_OK) return st;
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
   * that undoes each other. The passes of level 3 start once those below have done
   * all they can (phase 0), so that -O3 is the -O2 graph made ready for the backend. */
  bool on[N_PASSES], late = false;
  for (int k = 0; k < N_PASSES; k++) {
    on[k] = force[k] ? force[k] > 0
                     : cfg->level >= pass_table[k].min_level &&
                           (pass_table[k].run != kl_pass_layout || cfg->native_nhwc);
    late |= on[k] && pass_table[k].min_level >= 3;
  }
  for (int phase = 0; phase < (late ? 2 : 1); phase++)
  for (int round = 0; round < 32; round++) {
    bool any = false;
    for (int k = 0; k < N_PASSES; k++) {
      if (!on[k] || (phase == 0 && late && pass_table[k].min_level >= 3)) continue;
      int rewrites = 0;
      kl_graph_uses_reset(g); /* made afresh by the pass's first query */
      st = pass_table[k].run(g, cfg, &rewrites, e);
      if (st == KILN_OK && verify) st = kl_graph_uses_check(g, e);
      kl_graph_uses_reset(g);
      bool changed = rewrites > 0;
      if (st == KILN_OK && changed) st = kl_graph_toposort(g, e);
      if (st == KILN_OK && changed && verify) st = kl_graph_verify(g, e);
      if (st != KILN_OK) {
        kl_err_prefix(e, "pass '%s'", pass_table[k].name);
        return st;
      }
      if (stats) stats->fired[k] += rewrites;
      any |= changed;
    }
    if (!any) break;
  }
  if (stats) count_ops(g, stats->ops_after, &stats->nodes_after);
  return KILN_OK;
}
