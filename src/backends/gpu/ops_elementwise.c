/* Elementwise ops on the GPU (kernels/elementwise.cl): unary functions and activations,
 * binary ops with broadcasting, and the ops that only rename their input's bytes; Cast,
 * comparisons, And/Or/Xor/Not and Where, and int64 Add, Sub, Mul, Div, Min, Max, Neg
 * and Abs (a transformer's mask arithmetic), with the dtypes kernels.h's `dtypes` lists. */
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

/* The dtype of value v (its static type). */
static kl_dtype dtype_of(const kl_graph *g, int v) { return g->values[v].type.dtype; }

/* Whether every present input and output of n is of dtype t. */
static bool all_of(const kl_graph *g, const kl_node *n, kl_dtype t) {
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] >= 0 && dtype_of(g, n->in[k]) != t) return false;
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] >= 0 && dtype_of(g, n->out[k]) != t) return false;
  return true;
}

static kiln_status run_unary(kl_cl *c, kl_kernel_ctx *kc) {
  kl_gpu_act a;
  unary_act(kc->node, kc, &a);
  int64_t n = kl_tensor_numel(kc->out[0]);
  if (kc->out[0]->dtype == KL_I64)
    return KL_GPU_LAUNCH1(c, "kl_unary_l", n, kc->e, CLA_T(kc->in[0]), CLA_T(kc->out[0]),
                          CLA_L(n), CLA_I(a.code));
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
  if (kc->out[0]->dtype == KL_I64) {
    const kl_tensor *flag = kl_cl_flag(c, kc->e); /* a division by zero raises it */
    if (!flag) return kc->e->code;
    return KL_GPU_LAUNCH1(c, "kl_binary_l", n, kc->e, CLA_T(kc->in[0]), CLA_T(kc->in[1]),
                          CLA_T(kc->out[0]), CLA_L(n), CLA_I(binary_code(kc->node->op)),
                          CLA_S(bc), CLA_T(flag), CLA_I(kl_cl_node(c)));
  }
  return KL_GPU_LAUNCH1(c, "kl_binary", n, kc->e, CLA_T(kc->in[0]), CLA_T(kc->in[1]),
                        CLA_T(kc->out[0]), CLA_L(n), CLA_I(binary_code(kc->node->op)),
                        CLA_S(bc));
}

/* float32 throughout, or int64 throughout (Add, Sub, Mul, Div; Min/Max of exactly two
 * operands: more stay on the CPU). */
static bool arith_ok(const kl_graph *g, const kl_node *n) {
  if ((n->op == KL_OP_Max || n->op == KL_OP_Min) && n->n_in != 2) return false;
  return all_of(g, n, KL_F32) || all_of(g, n, KL_I64);
}

/* Clip's bounds must be constants or host values: they are read on the host. */
static bool has_act(const kl_graph *g, const kl_node *n) {
  (void)g;
  kl_gpu_act a;
  return unary_act(n, NULL, &a);
}

/* Neg and Abs: float32, or int64 throughout. */
static bool neg_abs_ok(const kl_graph *g, const kl_node *n) {
  return all_of(g, n, KL_F32) || all_of(g, n, KL_I64);
}

/* Identity copies (its output may be a graph output beside its input). */
static kiln_status run_copy(kl_cl *c, kl_kernel_ctx *kc) {
  char name[64];
  int64_t n = kl_tensor_numel(kc->out[0]);
  return KL_GPU_LAUNCH1(c, kl_gpu_sized("kl_copy", kc->out[0], name), n, kc->e,
                        CLA_T(kc->in[0]), CLA_T(kc->out[0]), CLA_L(n));
}

/* Views and Identity: the output has the input's dtype (any the moves take). */
static bool same_dtype(const kl_graph *g, const kl_node *n) {
  return dtype_of(g, n->in[0]) == dtype_of(g, n->out[0]);
}

/* ---- Cast, comparisons, logic, Where ---- */

/* elementwise.cl's KL_DT_*: the dtypes kl_cast reads and writes. */
enum { DT_F32, DT_I64, DT_I32, DT_U8, DT_BOOL };

static int cast_code(kl_dtype t) {
  switch (t) {
  case KL_F32: return DT_F32;
  case KL_I64: return DT_I64;
  case KL_I32: return DT_I32;
  case KL_U8: return DT_U8;
  default: return DT_BOOL;
  }
}

/* Cast among float32, int64, int32, uint8 and bool (backend.c has checked both ends);
 * float8's attributes do not concern these. */
static kiln_status run_cast(kl_cl *c, kl_kernel_ctx *kc) {
  const kl_tensor *x = kc->in[0];
  kl_tensor *y = kc->out[0];
  int64_t n = kl_tensor_numel(y);
  if (x->dtype == y->dtype) return run_copy(c, kc);
  return KL_GPU_LAUNCH1(c, "kl_cast", n, kc->e, CLA_T(x), CLA_I(cast_code(x->dtype)), CLA_T(y),
                        CLA_I(cast_code(y->dtype)), CLA_L(n));
}

/* elementwise.cl's KL_CMP_* and KL_LOGIC_*. */
enum { CMP_EQ, CMP_LT, CMP_LE, CMP_GT, CMP_GE };
enum { LOGIC_AND, LOGIC_OR, LOGIC_XOR };

static int compare_code(kl_op op) {
  switch (op) {
  case KL_OP_Less: return CMP_LT;
  case KL_OP_LessOrEqual: return CMP_LE;
  case KL_OP_Greater: return CMP_GT;
  case KL_OP_GreaterOrEqual: return CMP_GE;
  default: return CMP_EQ;
  }
}

/* Two operands of one dtype, a bool out. */
static bool compare_ok(const kl_graph *g, const kl_node *n) {
  return dtype_of(g, n->in[0]) == dtype_of(g, n->in[1]) && dtype_of(g, n->out[0]) == KL_BOOL;
}

static kiln_status run_compare(kl_cl *c, kl_kernel_ctx *kc) {
  kl_cl_bcast bc;
  kl_gpu_bcast(&bc, kc->out[0], kc->in, 2);
  int64_t n = kl_tensor_numel(kc->out[0]);
  kl_dtype t = kc->in[0]->dtype;
  const char *name = t == KL_F32 ? "kl_compare_f" : t == KL_I64 ? "kl_compare_l"
                     : t == KL_I32 ? "kl_compare_i" : "kl_compare_b";
  return KL_GPU_LAUNCH1(c, name, n, kc->e, CLA_T(kc->in[0]), CLA_T(kc->in[1]),
                        CLA_T(kc->out[0]), CLA_L(n), CLA_I(compare_code(kc->node->op)),
                        CLA_S(bc));
}

static bool bools_ok(const kl_graph *g, const kl_node *n) { return all_of(g, n, KL_BOOL); }

static kiln_status run_logic(kl_cl *c, kl_kernel_ctx *kc) {
  int64_t n = kl_tensor_numel(kc->out[0]);
  if (kc->node->op == KL_OP_Not)
    return KL_GPU_LAUNCH1(c, "kl_not", n, kc->e, CLA_T(kc->in[0]), CLA_T(kc->out[0]), CLA_L(n));
  kl_cl_bcast bc;
  kl_gpu_bcast(&bc, kc->out[0], kc->in, 2);
  int op = kc->node->op == KL_OP_And ? LOGIC_AND : kc->node->op == KL_OP_Or ? LOGIC_OR : LOGIC_XOR;
  return KL_GPU_LAUNCH1(c, "kl_logic", n, kc->e, CLA_T(kc->in[0]), CLA_T(kc->in[1]),
                        CLA_T(kc->out[0]), CLA_L(n), CLA_I(op), CLA_S(bc));
}

/* A bool condition; X, Y and the output of one dtype. */
static bool where_ok(const kl_graph *g, const kl_node *n) {
  kl_dtype t = dtype_of(g, n->out[0]);
  return dtype_of(g, n->in[0]) == KL_BOOL && dtype_of(g, n->in[1]) == t &&
         dtype_of(g, n->in[2]) == t;
}

static kiln_status run_where(kl_cl *c, kl_kernel_ctx *kc) {
  kl_cl_bcast bc;
  kl_gpu_bcast(&bc, kc->out[0], kc->in, 3);
  int64_t n = kl_tensor_numel(kc->out[0]);
  char name[64];
  return KL_GPU_LAUNCH1(c, kl_gpu_sized("kl_where", kc->out[0], name), n, kc->e,
                        CLA_T(kc->in[0]), CLA_T(kc->in[1]), CLA_T(kc->in[2]),
                        CLA_T(kc->out[0]), CLA_L(n), CLA_S(bc));
}

#define UNARY(op) {KL_OP_##op, "cl:unary", 0, 0, false, has_act, run_unary}
#define BINARY(op) {KL_OP_##op, "cl:binary", 0, 0, false, NULL, run_binary}
#define ARITH(op) {KL_OP_##op, "cl:binary", 0, KL_GPU_DT(KL_I64), false, arith_ok, run_binary}
#define COMPARE(op) {KL_OP_##op, "cl:compare", 0, KL_GPU_DT_MOVABLE, false, compare_ok, run_compare}
#define LOGIC(op) {KL_OP_##op, "cl:logic", 0, KL_GPU_DT(KL_BOOL), false, bools_ok, run_logic}
#define VIEW(op, host) {KL_OP_##op, "view", host, KL_GPU_DT_MOVABLE, true, same_dtype, run_copy}

const kl_gpu_op kl_gpu_ops_elementwise[] = {
    UNARY(Relu), UNARY(Sigmoid), UNARY(Tanh), UNARY(Exp), UNARY(Log),
    UNARY(Sqrt), UNARY(Reciprocal), UNARY(Floor), UNARY(Ceil), UNARY(Round), UNARY(Sign),
    UNARY(Erf), UNARY(Sin), UNARY(Cos), UNARY(HardSwish), UNARY(Mish), UNARY(Softplus),
    UNARY(Softsign), UNARY(LeakyRelu), UNARY(Elu), UNARY(Celu), UNARY(ThresholdedRelu),
    UNARY(Selu), UNARY(HardSigmoid), UNARY(Gelu),
    {KL_OP_Abs, "cl:unary", 0, KL_GPU_DT(KL_I64), false, neg_abs_ok, run_unary},
    {KL_OP_Neg, "cl:unary", 0, KL_GPU_DT(KL_I64), false, neg_abs_ok, run_unary},
    {KL_OP_Clip, "cl:unary", 6, 0, false, has_act, run_unary},
    ARITH(Add), ARITH(Sub), ARITH(Mul), ARITH(Div), ARITH(Max), ARITH(Min),
    BINARY(Pow), BINARY(PRelu),
    {KL_OP_Identity, "cl:copy", 0, KL_GPU_DT_MOVABLE, false, same_dtype, run_copy},
    {KL_OP_Cast, "cl:cast", 0, KL_GPU_DT_MOVABLE, false, NULL, run_cast},
    COMPARE(Equal), COMPARE(Less), COMPARE(LessOrEqual), COMPARE(Greater),
    COMPARE(GreaterOrEqual),
    LOGIC(And), LOGIC(Or), LOGIC(Xor), LOGIC(Not),
    {KL_OP_Where, "cl:where", 0, KL_GPU_DT_MOVABLE, false, where_ok, run_where},
    /* views: the session gives out[0] in[0]'s device memory and runs nothing; run_copy
     * only fills the slot */
    VIEW(Reshape, 2), VIEW(Flatten, 0), VIEW(Squeeze, 2), VIEW(Unsqueeze, 2),
};
const int kl_gpu_ops_elementwise_count =
    (int)(sizeof kl_gpu_ops_elementwise / sizeof kl_gpu_ops_elementwise[0]);
