/* Reference kernels for the activation functions with attributes, PRelu and Hardmax.
 *
 * Shapes: Y = f(X), X's shape. PRelu: Y = X < 0 ? slope[bcast] * X : X, slope
 * broadcast to X. Hardmax: along `axis` (default -1, opset-13 meaning), 1 at the
 * first maximum of each row, 0 elsewhere.
 * Computed in double, rounded once to the output dtype.
 */
#include "backends/cpu/ref/ref.h"

#include <math.h>
#include <string.h>

/* The attributes of one activation, with ONNX's defaults. */
typedef struct act_params {
  double alpha, beta, gamma;
  bool tanh_gelu;
} act_params;

static act_params read_params(const kl_node *n) {
  act_params p = {0, 0, 0, false};
  switch (n->op) {
  case KL_OP_LeakyRelu: p.alpha = kl_attr_float(n, "alpha", 0.01f); break;
  case KL_OP_Selu:
    p.alpha = kl_attr_float(n, "alpha", 1.67326319217681884765625f);
    p.gamma = kl_attr_float(n, "gamma", 1.05070102214813232421875f);
    break;
  case KL_OP_HardSigmoid:
    p.alpha = kl_attr_float(n, "alpha", 0.2f);
    p.beta = kl_attr_float(n, "beta", 0.5f);
    break;
  case KL_OP_Shrink:
    p.alpha = kl_attr_float(n, "lambd", 0.5f);
    p.beta = kl_attr_float(n, "bias", 0.0f);
    break;
  case KL_OP_Gelu: p.tanh_gelu = strcmp(kl_attr_string(n, "approximate", "none"), "tanh") == 0;
    break;
  default: p.alpha = kl_attr_float(n, "alpha", 1.0f); break; /* Elu, Celu, Thresh., Swish */
  }
  return p;
}

/* log(1 + exp(x)) without overflow for large x. */
static double softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }

static double clamp01(double v) { return v < 0 ? 0 : v > 1 ? 1 : v; }

static double gelu(double x, bool tanh_form) {
  if (!tanh_form) return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
  double k = sqrt(2.0 / 3.14159265358979323846);
  return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}

static double act_f(kl_op op, const act_params *p, double x) {
  switch (op) {
  case KL_OP_LeakyRelu: return x < 0 ? p->alpha * x : x;
  case KL_OP_Elu: return x < 0 ? p->alpha * expm1(x) : x;
  case KL_OP_Selu: return x <= 0 ? p->gamma * p->alpha * expm1(x) : p->gamma * x;
  case KL_OP_Celu: return x < 0 ? p->alpha * expm1(x / p->alpha) : x;
  case KL_OP_HardSigmoid: return clamp01(p->alpha * x + p->beta);
  case KL_OP_HardSwish: return x * clamp01(x / 6.0 + 0.5);
  case KL_OP_Mish: return x * tanh(softplus(x));
  case KL_OP_Gelu: return gelu(x, p->tanh_gelu);
  case KL_OP_Softplus: return softplus(x);
  case KL_OP_Softsign: return x / (1.0 + fabs(x));
  case KL_OP_ThresholdedRelu: return x > p->alpha ? x : 0;
  case KL_OP_Shrink: return x < -p->alpha ? x + p->beta : x > p->alpha ? x - p->beta : 0;
  default: return x / (1.0 + exp(-p->alpha * x)); /* Swish: x * sigmoid(alpha * x) */
  }
}

int kl_ref_activation(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  act_params p = read_params(c->node);
  kl_op op = c->node->op;
  int64_t n = kl_tensor_numel(x);
  bool to_int = kl_dtype_is_int(y->dtype); /* Shrink on integers */
  for (int64_t i = 0; i < n; i++) {
    double v = act_f(op, &p, kl_ref_load(x->data, x->dtype, i));
    if (to_int) kl_ref_store_int(y->data, y->dtype, i, kl_ref_trunc_i64(v));
    else kl_ref_store(y->data, y->dtype, i, v);
  }
  return KILN_OK;
}

int kl_ref_prelu(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *slope = c->in[1];
  kl_tensor *y = c->out[0];
  kl_ref_iter it;
  kl_ref_iter_init(&it, y->rank, y->dims);
  kl_ref_iter_bcast(&it, 0, slope->rank, slope->dims, 1);
  int64_t n = kl_tensor_numel(y);
  bool is_float = kl_dtype_is_float(y->dtype);
  bool is_signed = !is_float && y->dtype != KL_U32 && y->dtype != KL_U64;
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it)) {
    if (is_float) {
      double v = kl_ref_load(x->data, x->dtype, i);
      if (v < 0) v *= kl_ref_load(slope->data, slope->dtype, it.off[0]);
      kl_ref_store(y->data, y->dtype, i, v);
      continue;
    }
    int64_t v = kl_ref_load_int(x->data, x->dtype, i);
    if (is_signed && v < 0) /* wraps, computed unsigned */
      v = (int64_t)((uint64_t)v * (uint64_t)kl_ref_load_int(slope->data, slope->dtype,
                                                             it.off[0]));
    kl_ref_store_int(y->data, y->dtype, i, v);
  }
  return KILN_OK;
}

/* Index (0..len-1) of the first maximum of a row; NaN counts as the maximum, as in
 * NumPy's argmax. */
static int64_t row_argmax(const kl_tensor *x, int64_t base, int64_t len, int64_t step) {
  int64_t best = 0;
  double max = kl_ref_load(x->data, x->dtype, base);
  for (int64_t j = 1; j < len && !isnan(max); j++) {
    double v = kl_ref_load(x->data, x->dtype, base + j * step);
    if (v > max || isnan(v)) {
      max = v;
      best = j;
    }
  }
  return best;
}

int kl_ref_hardmax(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  int64_t a = kl_attr_int(c->node, "axis", -1);
  int axis = (int)(a < 0 ? a + x->rank : a);
  int64_t outer = kl_ref_span(x->dims, 0, axis), len = x->dims[axis];
  int64_t inner = kl_ref_span(x->dims, axis + 1, x->rank);
  int64_t n = kl_tensor_numel(y);
  for (int64_t i = 0; i < n; i++) kl_ref_store(y->data, y->dtype, i, 0.0);
  if (len == 0) return KILN_OK;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t base = o * len * inner + i;
      kl_ref_store(y->data, y->dtype, base + row_argmax(x, base, len, inner) * inner, 1.0);
    }
  return KILN_OK;
}
