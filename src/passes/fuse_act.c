/* Activation fusion: an activation whose input is the output of a Conv, ConvTranspose,
 * Gemm or MatMul (or of a fused one that has no activation yet), read by nothing else,
 * becomes the "activation" attribute of a kiln fused op:
 *
 *   Conv(X, W, B) -> Relu                becomes  kiln.FusedConv(X, W, B) activation=Relu
 *   MatMul(A, B) -> x; Mul(x, Sigmoid(x)) becomes  kiln.FusedMatMul(A, B) activation=Silu
 *   Conv -> x; Mul(x, HardSigmoid(x) alpha=1/6)  becomes  kiln.FusedConv activation=HardSwish
 *
 * Activations: Relu, LeakyRelu, Clip (constant bounds, so ReLU6), Sigmoid, Tanh,
 * HardSigmoid, HardSwish, Gelu (exact and tanh; the Erf form is made a Gelu by
 * fuse_gelu first), Swish with alpha 1 and x*Sigmoid(x) (both SiLU), Mish, Elu.
 */
#include "ir/fused.h"
#include "passes/rewrite.h"

#include <math.h>
#include <string.h>

/* A Clip bound: absent is +-inf; present must be a constant float exactly. */
static bool clip_bound(const kl_graph *g, const kl_node *n, int k, double dflt, float *out) {
  double v = dflt;
  if (k < n->n_in && n->in[k] >= 0 && !kl_rw_scalar(g, n->in[k], &v)) return false;
  *out = (float)v;
  return isinf(v) || (double)*out == v;
}

/* The fused activation node n computes on its input 0, with its parameters in p; NULL
 * when it computes none. */
static const kl_fused_act *activation_of(const kl_graph *g, const kl_node *n, float *p) {
  const char *name = NULL;
  switch (n->op) {
  case KL_OP_Relu: name = "Relu"; break;
  case KL_OP_Sigmoid: name = "Sigmoid"; break;
  case KL_OP_Tanh: name = "Tanh"; break;
  case KL_OP_HardSwish: name = "HardSwish"; break;
  case KL_OP_Mish: name = "Mish"; break;
  case KL_OP_LeakyRelu:
    p[0] = kl_attr_float(n, "alpha", 0.01f);
    name = "LeakyRelu";
    break;
  case KL_OP_Elu:
    p[0] = kl_attr_float(n, "alpha", 1.0f);
    name = "Elu";
    break;
  case KL_OP_HardSigmoid:
    p[0] = kl_attr_float(n, "alpha", 0.2f);
    p[1] = kl_attr_float(n, "beta", 0.5f);
    name = "HardSigmoid";
    break;
  case KL_OP_Gelu: {
    const char *approx = kl_attr_string(n, "approximate", "none");
    name = strcmp(approx, "tanh") == 0 ? "GeluTanh" : strcmp(approx, "none") == 0 ? "Gelu" : NULL;
    break;
  }
  case KL_OP_Swish:
    if (kl_attr_float(n, "alpha", 1.0f) == 1.0f) name = "Silu";
    break;
  case KL_OP_Clip:
    if (clip_bound(g, n, 1, -INFINITY, &p[0]) && clip_bound(g, n, 2, INFINITY, &p[1]))
      name = "Clip";
    break;
  default: break;
  }
  return kl_fused_act_find(name);
}

/* A node that can take an activation: a base op, or a fused op without one. */
static bool takes_activation(const kl_graph *g, int p) {
  if (p < 0) return false;
  const kl_node *n = &g->nodes[p];
  bool base = kl_fused_of(n->op) != KL_OP_COUNT;
  bool fused = kl_fused_base(n->op) != KL_OP_COUNT && !kl_node_attr(n, "activation");
  return (base || fused) && n->n_out == 1 && kl_dtype_is_float(g->values[n->out[0]].type.dtype);
}

/* p gets the activation and takes over the output of node `last`, which is removed. */
static kiln_status fuse(kl_graph *g, int p, const kl_fused_act *act, const float *params,
                        int last, kl_err *e) {
  if (kl_fused_base(g->nodes[p].op) == KL_OP_COUNT)
    kl_rw_set_op(g, p, kl_fused_of(g->nodes[p].op));
  kiln_status st = kl_node_set_string(g, p, "activation", act->name, e);
  if (st == KILN_OK && act->n_params)
    st = kl_node_set_floats(g, p, "activation_params", params, act->n_params, e);
  if (st != KILN_OK) return st;
  int y = g->nodes[last].out[0];
  kl_rw_remove(g, last);
  kl_rw_take_output(g, p, 0, y);
  return KILN_OK;
}

/* The activation of Mul(x, f(x)), f a Sigmoid (SiLU) or a HardSigmoid with alpha 1/6
 * and beta 1/2 (HardSwish, as opset 13 exports write it); NULL for other ops. */
static const kl_fused_act *gated(const kl_node *f) {
  if (f->op == KL_OP_Sigmoid) return kl_fused_act_find("Silu");
  if (f->op == KL_OP_HardSigmoid &&
      fabs(kl_attr_float(f, "alpha", 0.2f) - 1.0 / 6.0) < 1e-6 &&
      kl_attr_float(f, "beta", 0.5f) == 0.5f)
    return kl_fused_act_find("HardSwish");
  return NULL;
}

/* Mul(x, f(x)) in either order (see gated), x read by nothing else: returns x's
 * producer, sets *act and *gate (the f node); -1 when node m is not that. */
static int gated_producer(const kl_graph *g, int m, const kl_fused_act **act, int *gate) {
  const kl_node *n = &g->nodes[m];
  if (n->op != KL_OP_Mul || n->n_in != 2) return -1;
  for (int k = 0; k < 2; k++) {
    int f = kl_rw_producer(g, n->in[k]);
    int x = n->in[1 - k];
    if (f < 0 || !(*act = gated(&g->nodes[f])) || g->nodes[f].in[0] != x ||
        kl_rw_sole_consumer(g, g->nodes[f].out[0]) != m)
      continue;
    int readers[2];
    if (kl_rw_is_output(g, x) || kl_rw_uses(g, x) != 2 || kl_rw_consumers(g, x, readers, 2) != 2)
      continue;
    *gate = f;
    return kl_rw_producer(g, x);
  }
  return -1;
}

kiln_status kl_pass_fuse_act(kl_graph *g, const kl_pass_config *cfg, int *changed,
                             kl_err *e) {
  (void)cfg;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    if (n->n_out != 1 || n->n_in < 1) continue;
    float params[2] = {0, 0};
    const kl_fused_act *act = activation_of(g, n, params);
    int sig = -1, p = -1;
    if (act) {
      p = kl_rw_producer(g, n->in[0]);
      if (kl_rw_sole_consumer(g, n->in[0]) != i) p = -1;
    } else {
      p = gated_producer(g, i, &act, &sig);
    }
    if (!act || !takes_activation(g, p)) continue;
    st = fuse(g, p, act, params, i, e);
    if (sig >= 0) kl_rw_remove(g, sig);
    (*changed)++;
  }
  if (st == KILN_OK) st = kl_rw_finish(g, *changed, e);
  return st;
}
