/* Elementwise ops on the GPU (kernels/elementwise.cl): unary functions and activations,
 * binary ops with broadcasting, and the ops that only rename their input's bytes. */
#include "backends/gpu/kernels.h"

#include <math.h>
#include <string.h>

/* The activation of a unary node: its code and parameters (attributes with ONNX's
 * defaults; Clip's bounds from inputs 1 and 2, read on the host). */
static bool unary_act(const kl_node *n, const kl_kernel_ctx *kc, kl_gpu_act *a) {
  *a = (kl_gpu_act){KL_ACT_NONE, 0, 0};
  switch (n->op) {
  case KL_OP_Relu: a->code = KL_ACT_RELU; break;
  case KL_OP_Sigmoid: a->code = KL_ACT_SIGMOID; break;
  case KL_OP_Tanh: a->code = KL_ACT_TANH; break;
  case KL_OP_Abs: a->code = KL_ACT_ABS; break;
  case KL_OP_Neg: a->code = KL_ACT_NEG; break;
  case KL_OP_Exp: a->code = KL_ACT_EXP; break;
  case KL_OP_Log: a->code = KL_ACT_LOG; break;
  case KL_OP_Sqrt: a->code = KL_ACT_SQRT; break;
  case KL_OP_Reciprocal: a->code = KL_ACT_RECIP; break;
  case KL_OP_Floor: a->code = KL_ACT_FLOOR; break;
  case KL_OP_Ceil: a->code = KL_ACT_CEIL; break;
  case KL_OP_Round: a->code = KL_ACT_ROUND; break;
  case KL_OP_Sign: a->code = KL_ACT_SIGN; break;
  case KL_OP_Erf: a->code = KL_ACT_ERF; break;
  case KL_OP_Sin: a->code = KL_ACT_SIN; break;
  case KL_OP_Cos: a->code = KL_ACT_COS; break;
  case KL_OP_HardSwish: a->code = KL_ACT_HSWISH; break;
  case KL_OP_Mish: a->code = KL_ACT_MISH; break;
  case KL_OP_Softplus: a->code = KL_ACT_SOFTPLUS; break;
  case KL_OP_Softsign: a->code = KL_ACT_SOFTSIGN; break;
  case KL_OP_LeakyRelu: *a = (kl_gpu_act){KL_ACT_LEAKY, kl_attr_float(n, "alpha", 0.01f), 0}; break;
  case KL_OP_Elu: *a = (kl_gpu_act){KL_ACT_ELU, kl_attr_float(n, "alpha", 1.0f), 0}; break;
  case KL_OP_Celu: *a = (kl_gpu_act){KL_ACT_CELU, kl_attr_float(n, "alpha", 1.0f), 0}; break;
  case KL_OP_ThresholdedRelu:
    *a = (kl_gpu_act){KL_ACT_THRELU, kl_attr_float(n, "alpha", 1.0f), 0};
    break;
  case KL_OP_Selu:
    *a = (kl_gpu_act){KL_ACT_SELU, kl_attr_float(n, "alpha", 1.67326319217681884765625f),
                      kl_attr_float(n, "gamma", 1.05070102214813232421875f)};
    break;
  case KL_OP_HardSigmoid:
    *a = (kl_gpu_act){KL_ACT_HSIGMOID, kl_attr_float(n, "alpha", 0.2f),
                      kl_attr_float(n, "beta", 0.5f)};
    break;
  case KL_OP_Gelu:
    a->code = strcmp(kl_attr_string(n, "approximate", "none"), "tanh") == 0 ? KL_ACT_GELU_TANH
                                                                          : KL_ACT_GELU;
    break;
  case KL_OP_Clip: {
    *a = (kl_gpu_act){KL_ACT_CLIP, -INFINITY, INFINITY};
    if (!kc) break;
    for (int k = 1; k < 3 && k < kc->n_in; k++) {
      const kl_tensor *t = kc->in[k];
      if (!t || kl_tensor_numel(t) == 0) continue;
      float v = ((const float *)t->data)[0];
      if (k == 1) a->a = v;
      else a->b = v;
    }
    break;
  }
  default: return false;
  }
  return true;
}

static kiln_status run_unary(kl_cl *c, kl_kernel_ctx *kc) {
  kl_gpu_act a;
  unary_act(kc->node, kc, &a);
  int64_t n = kl_tensor_numel(kc->out[0]);
  return KL_GPU_LAUNCH1(c, "kl_unary", n, kc->e, CLA_T(kc->in[0]), CLA_T(kc->out[0]),
                        CLA_L(n), CLA_I(a.code), CLA_F(a.a), CLA_F(a.b));
}

enum { BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV, BIN_POW, BIN_MAX, BIN_MIN, BIN_PRELU };

static int binary_code(kl_op op) {
  switch (op) {
  case KL_OP_Add: return BIN_ADD;
  case KL_OP_Sub: return BIN_SUB;
  case KL_OP_Mul: return BIN_MUL;
  case KL_OP_Div: return BIN_DIV;
  case KL_OP_Pow: return BIN_POW;
  case KL_OP_Max: return BIN_MAX;
  case KL_OP_Min: return BIN_MIN;
  default: return BIN_PRELU;
  }
}

static kiln_status run_binary(kl_cl *c, kl_kernel_ctx *kc) {
  kl_cl_bcast bc;
  kl_gpu_bcast(&bc, kc->out[0], kc->in, 2);
  int64_t n = kl_tensor_numel(kc->out[0]);
  return KL_GPU_LAUNCH1(c, "kl_binary", n, kc->e, CLA_T(kc->in[0]), CLA_T(kc->in[1]),
                        CLA_T(kc->out[0]), CLA_L(n), CLA_I(binary_code(kc->node->op)),
                        CLA_S(bc));
}

/* Min/Max of exactly two operands (more stay on the CPU). */
static bool two_inputs(const kl_graph *g, const kl_node *n) {
  (void)g;
  return n->n_in == 2;
}

/* Clip's bounds must be constants or host values: they are read on the host. */
static bool has_act(const kl_graph *g, const kl_node *n) {
  (void)g;
  kl_gpu_act a;
  return unary_act(n, NULL, &a);
}

/* Identity copies (its output may be a graph output beside its input). */
static kiln_status run_copy(kl_cl *c, kl_kernel_ctx *kc) {
  int64_t n = kl_tensor_numel(kc->out[0]);
  return KL_GPU_LAUNCH1(c, "kl_copy", n, kc->e, CLA_T(kc->in[0]), CLA_T(kc->out[0]), CLA_L(n));
}


#define UNARY(op) {KL_OP_##op, "cl:unary", 0, 0, false, has_act, run_unary}
#define BINARY(op) {KL_OP_##op, "cl:binary", 0, 0, false, NULL, run_binary}

const kl_gpu_op kl_gpu_ops_elementwise[] = {
    UNARY(Relu), UNARY(Sigmoid), UNARY(Tanh), UNARY(Abs), UNARY(Neg), UNARY(Exp), UNARY(Log),
    UNARY(Sqrt), UNARY(Reciprocal), UNARY(Floor), UNARY(Ceil), UNARY(Round), UNARY(Sign),
    UNARY(Erf), UNARY(Sin), UNARY(Cos), UNARY(HardSwish), UNARY(Mish), UNARY(Softplus),
    UNARY(Softsign), UNARY(LeakyRelu), UNARY(Elu), UNARY(Celu), UNARY(ThresholdedRelu),
    UNARY(Selu), UNARY(HardSigmoid), UNARY(Gelu),
    {KL_OP_Clip, "cl:unary", 6, 0, false, has_act, run_unary},
    BINARY(Add), BINARY(Sub), BINARY(Mul), BINARY(Div), BINARY(Pow), BINARY(PRelu),
    {KL_OP_Max, "cl:binary", 0, 0, false, two_inputs, run_binary},
    {KL_OP_Min, "cl:binary", 0, 0, false, two_inputs, run_binary},
    {KL_OP_Identity, "cl:copy", 0, 0, false, NULL, run_copy},
    /* views: the session gives out[0] in[0]'s device memory and runs nothing; run_copy
     * only fills the slot */
    {KL_OP_Reshape, "view", 2, 0, true, NULL, run_copy},
    {KL_OP_Flatten, "view", 0, 0, true, NULL, run_copy},
    {KL_OP_Squeeze, "view", 2, 0, true, NULL, run_copy},
    {KL_OP_Unsqueeze, "view", 2, 0, true, NULL, run_copy},
};
const int kl_gpu_ops_elementwise_count =
    (int)(sizeof kl_gpu_ops_elementwise / sizeof kl_gpu_ops_elementwise[0]);
