/* Reference elementwise kernels: Relu, Sigmoid, Tanh, Clip, Dropout (inference) and
 * the broadcasting binary ops Add, Sub, Mul, Div.
 *
 * Shapes: unary Y = f(X), same shape; binary Y[i] = A[bcast(i)] op B[bcast(i)] with
 * Y of the NumPy-broadcast shape. Float dtypes compute in double; int32/int64 in int64
 * with two's-complement wrap-around, and Div truncates toward zero like C and
 * onnxruntime.
 */
#include "backends/cpu/ref/ref.h"

#include <math.h>

static double unary_f(kl_op op, double x) {
  switch (op) {
  case KL_OP_Relu: return x > 0 || isnan(x) ? x : 0; /* NaN stays NaN, as np.maximum(x, 0) */
  case KL_OP_Sigmoid: return 1.0 / (1.0 + exp(-x));
  case KL_OP_Tanh: return tanh(x);
  default: return x;
  }
}

int kl_ref_unary(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  int64_t n = kl_tensor_numel(x);
  kl_op op = c->node->op;
  if (kl_dtype_is_int(x->dtype)) { /* Relu is the only unary op taking integers */
    for (int64_t i = 0; i < n; i++) {
      int64_t v = kl_ref_load_int(x->data, x->dtype, i);
      kl_ref_store_int(y->data, y->dtype, i, v > 0 ? v : 0);
    }
    return KILN_OK;
  }
  for (int64_t i = 0; i < n; i++)
    kl_ref_store(y->data, y->dtype, i, unary_f(op, kl_ref_load(x->data, x->dtype, i)));
  return KILN_OK;
}

/* Clip: Y = min(max(X, min), max), so min > max gives max everywhere (ONNX). A
 * missing bound does not clip; NaN passes through. */
static void clip_float(const kl_tensor *x, const kl_tensor *lo, const kl_tensor *hi,
                       kl_tensor *y) {
  double l = lo ? kl_ref_load(lo->data, lo->dtype, 0) : -INFINITY;
  double h = hi ? kl_ref_load(hi->data, hi->dtype, 0) : INFINITY;
  int64_t n = kl_tensor_numel(x);
  for (int64_t i = 0; i < n; i++) {
    double v = kl_ref_load(x->data, x->dtype, i);
    if (v < l) v = l;
    if (v > h) v = h;
    kl_ref_store(y->data, y->dtype, i, v);
  }
}

static void clip_int(const kl_tensor *x, const kl_tensor *lo, const kl_tensor *hi,
                     kl_tensor *y) {
  int64_t l = lo ? kl_ref_load_int(lo->data, lo->dtype, 0) : INT64_MIN;
  int64_t h = hi ? kl_ref_load_int(hi->data, hi->dtype, 0) : INT64_MAX;
  int64_t n = kl_tensor_numel(x);
  for (int64_t i = 0; i < n; i++) {
    int64_t v = kl_ref_load_int(x->data, x->dtype, i);
    if (v < l) v = l;
    if (v > h) v = h;
    kl_ref_store_int(y->data, y->dtype, i, v);
  }
}

int kl_ref_clip(kl_kernel_ctx *c) {
  const kl_tensor *lo = c->n_in > 1 ? c->in[1] : NULL, *hi = c->n_in > 2 ? c->in[2] : NULL;
  if (kl_dtype_is_int(c->in[0]->dtype)) clip_int(c->in[0], lo, hi, c->out[0]);
  else clip_float(c->in[0], lo, hi, c->out[0]);
  return KILN_OK;
}

/* Inference Dropout: the data passes through and the optional mask is all true
 * (infer refuses training mode with a non-zero ratio). */
int kl_ref_dropout(kl_kernel_ctx *c) {
  kl_ref_copy_bytes(c->out[0]->data, c->in[0]->data, kl_tensor_nbytes(c->in[0]));
  if (c->n_out > 1 && c->out[1]) {
    size_t n = kl_tensor_nbytes(c->out[1]);
    if (n) memset(c->out[1]->data, 1, n);
  }
  return KILN_OK;
}

static double binary_f(kl_op op, double a, double b) {
  switch (op) {
  case KL_OP_Add: return a + b;
  case KL_OP_Sub: return a - b;
  case KL_OP_Mul: return a * b;
  default: return a / b;
  }
}

/* Integer ops wrap (computed unsigned, where overflow is defined). Division by zero
 * has no value to give, so it is an error rather than undefined behaviour. */
static kiln_status binary_i(kl_kernel_ctx *c, int64_t a, int64_t b, int64_t *r) {
  uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
  switch (c->node->op) {
  case KL_OP_Add: *r = (int64_t)(ua + ub); return KILN_OK;
  case KL_OP_Sub: *r = (int64_t)(ua - ub); return KILN_OK;
  case KL_OP_Mul: *r = (int64_t)(ua * ub); return KILN_OK;
  default: break;
  }
  if (b == 0) return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "integer division by zero");
  *r = b == -1 ? (int64_t)(0 - ua) : a / b; /* INT64_MIN / -1 wraps instead of trapping */
  return KILN_OK;
}

int kl_ref_binary(kl_kernel_ctx *c) {
  const kl_tensor *a = c->in[0], *b = c->in[1];
  kl_tensor *y = c->out[0];
  kl_ref_iter it;
  kl_ref_iter_init(&it, y->rank, y->dims);
  kl_ref_iter_bcast(&it, 0, a->rank, a->dims, 1);
  kl_ref_iter_bcast(&it, 1, b->rank, b->dims, 1);
  int64_t n = kl_tensor_numel(y);
  bool is_int = kl_dtype_is_int(y->dtype);
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it)) {
    if (!is_int) {
      double va = kl_ref_load(a->data, a->dtype, it.off[0]);
      double vb = kl_ref_load(b->data, b->dtype, it.off[1]);
      kl_ref_store(y->data, y->dtype, i, binary_f(c->node->op, va, vb));
      continue;
    }
    int64_t r = 0;
    kiln_status st = binary_i(c, kl_ref_load_int(a->data, a->dtype, it.off[0]),
                              kl_ref_load_int(b->data, b->dtype, it.off[1]), &r);
    if (st != KILN_OK) return st;
    kl_ref_store_int(y->data, y->dtype, i, r);
  }
  return KILN_OK;
}
