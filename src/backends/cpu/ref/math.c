/* Reference kernels for the math ops: unary math and bit ops, comparisons, logical and
 * bitwise binary ops, Pow, Mod, the variadic Min/Max/Mean/Sum, Where and Cast.
 *
 * Shapes: unary Y = f(X), X's shape; binary and variadic Y[i] = f(A[bcast(i)], ...)
 * with Y of the NumPy-broadcast shape of all inputs.
 * Float dtypes compute in double and round once to the output dtype. Integer dtypes
 * compute in 64 bits and wrap to the output's width like NumPy; uint64 values travel
 * as their int64 bit pattern, so whatever orders or divides them (comparisons, Min,
 * Max, Mod, right shifts) treats that dtype as unsigned explicitly.
 */
#include "backends/cpu/ref/ref.h"

#include <math.h>
#include <string.h>

static bool is_unsigned(kl_dtype t) {
  return t == KL_U8 || t == KL_U16 || t == KL_U32 || t == KL_U64;
}

/* -1, 0 or 1 as a < b, a == b, a > b, for two integers of dtype t. */
static int int_order(int64_t a, int64_t b, kl_dtype t) {
  if (t == KL_U64) return ((uint64_t)a > (uint64_t)b) - ((uint64_t)a < (uint64_t)b);
  return (a > b) - (a < b);
}

/* Sets up `it` over y's shape for operands a (0) and b (1); returns y's element count. */
static int64_t iter_binary(kl_ref_iter *it, const kl_tensor *a, const kl_tensor *b,
                           const kl_tensor *y) {
  kl_ref_iter_init(it, y->rank, y->dims);
  kl_ref_iter_bcast(it, 0, a->rank, a->dims, 1);
  kl_ref_iter_bcast(it, 1, b->rank, b->dims, 1);
  return kl_tensor_numel(y);
}

/* ---- unary ---- */

static double unary_float(kl_op op, double x) {
  switch (op) {
  case KL_OP_Abs: return fabs(x);
  case KL_OP_Neg: return -x;
  case KL_OP_Exp: return exp(x);
  case KL_OP_Log: return log(x);
  case KL_OP_Sqrt: return sqrt(x);
  case KL_OP_Reciprocal: return 1.0 / x;
  case KL_OP_Floor: return floor(x);
  case KL_OP_Ceil: return ceil(x);
  case KL_OP_Round: return nearbyint(x); /* the default rounding mode: half to even */
  case KL_OP_Sign: return x > 0 ? 1.0 : x < 0 ? -1.0 : x; /* 0 and NaN stay */
  case KL_OP_Erf: return erf(x);
  case KL_OP_Sin: return sin(x);
  case KL_OP_Cos: return cos(x);
  case KL_OP_Tan: return tan(x);
  case KL_OP_Asin: return asin(x);
  case KL_OP_Acos: return acos(x);
  case KL_OP_Atan: return atan(x);
  case KL_OP_Sinh: return sinh(x);
  case KL_OP_Cosh: return cosh(x);
  case KL_OP_Asinh: return asinh(x);
  case KL_OP_Acosh: return acosh(x);
  default: return atanh(x);
  }
}

/* Abs, Neg, Sign and BitwiseNot on integers; negation wraps (computed unsigned). */
static int64_t unary_int(kl_op op, int64_t v, bool uns) {
  int64_t neg = (int64_t)(0 - (uint64_t)v);
  switch (op) {
  case KL_OP_Abs: return !uns && v < 0 ? neg : v;
  case KL_OP_Neg: return neg;
  case KL_OP_Sign: return uns ? v != 0 : (v > 0) - (v < 0);
  default: return ~v;
  }
}

/* IsNaN, and IsInf with its detect_negative / detect_positive switches (default on). */
static void float_tests(const kl_kernel_ctx *c, const kl_tensor *x, kl_tensor *y) {
  bool nan_test = c->node->op == KL_OP_IsNaN;
  bool neg = kl_attr_int(c->node, "detect_negative", 1) != 0;
  bool pos = kl_attr_int(c->node, "detect_positive", 1) != 0;
  int64_t n = kl_tensor_numel(x);
  uint8_t *out = y->data;
  for (int64_t i = 0; i < n; i++) {
    double v = kl_ref_load(x->data, x->dtype, i);
    out[i] = nan_test ? isnan(v) : isinf(v) && (v > 0 ? pos : neg);
  }
}

int kl_ref_math_unary(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  kl_op op = c->node->op;
  int64_t n = kl_tensor_numel(x);
  if (op == KL_OP_IsNaN || op == KL_OP_IsInf) {
    float_tests(c, x, y);
  } else if (op == KL_OP_Not) {
    const uint8_t *in = x->data;
    uint8_t *out = y->data;
    for (int64_t i = 0; i < n; i++) out[i] = !in[i];
  } else if (kl_dtype_is_int(x->dtype)) {
    bool uns = is_unsigned(x->dtype);
    for (int64_t i = 0; i < n; i++)
      kl_ref_store_int(y->data, y->dtype, i,
                       unary_int(op, kl_ref_load_int(x->data, x->dtype, i), uns));
  } else {
    for (int64_t i = 0; i < n; i++)
      kl_ref_store(y->data, y->dtype, i, unary_float(op, kl_ref_load(x->data, x->dtype, i)));
  }
  return KILN_OK;
}

/* ---- comparisons and logical ops: bool outputs ---- */

/* The comparison's answer for an ordering (-1, 0, 1; 2 when unordered: NaN). */
static bool order_satisfies(kl_op op, int ord) {
  switch (op) {
  case KL_OP_Equal: return ord == 0;
  case KL_OP_Less: return ord == -1;
  case KL_OP_Greater: return ord == 1;
  case KL_OP_LessOrEqual: return ord == -1 || ord == 0;
  default: return ord == 1 || ord == 0; /* GreaterOrEqual */
  }
}

static int load_order(const kl_tensor *a, int64_t ia, const kl_tensor *b, int64_t ib) {
  if (kl_dtype_is_float(a->dtype)) {
    double va = kl_ref_load(a->data, a->dtype, ia), vb = kl_ref_load(b->data, b->dtype, ib);
    return va < vb ? -1 : va > vb ? 1 : va == vb ? 0 : 2;
  }
  return int_order(kl_ref_load_int(a->data, a->dtype, ia),
                   kl_ref_load_int(b->data, b->dtype, ib), a->dtype);
}

int kl_ref_compare(kl_kernel_ctx *c) {
  const kl_tensor *a = c->in[0], *b = c->in[1];
  kl_tensor *y = c->out[0];
  kl_ref_iter it;
  int64_t n = iter_binary(&it, a, b, y);
  uint8_t *out = y->data;
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it))
    out[i] = order_satisfies(c->node->op, load_order(a, it.off[0], b, it.off[1]));
  return KILN_OK;
}

int kl_ref_logical(kl_kernel_ctx *c) {
  const kl_tensor *a = c->in[0], *b = c->in[1];
  kl_tensor *y = c->out[0];
  kl_ref_iter it;
  int64_t n = iter_binary(&it, a, b, y);
  const uint8_t *pa = a->data, *pb = b->data;
  uint8_t *out = y->data;
  kl_op op = c->node->op;
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it)) {
    bool va = pa[it.off[0]] != 0, vb = pb[it.off[1]] != 0;
    out[i] = op == KL_OP_And ? va && vb : op == KL_OP_Or ? va || vb : va != vb;
  }
  return KILN_OK;
}

/* ---- bitwise ops ---- */

/* A shift by the type's width or more leaves no bits (C would leave it undefined). */
static int64_t shift(int64_t v, int64_t by, kl_dtype t, bool left) {
  uint64_t u = (uint64_t)v, n = (uint64_t)by;
  if (n >= 8 * kl_dtype_size(t)) return 0;
  return (int64_t)(left ? u << n : u >> n); /* BitShift takes unsigned dtypes only */
}

int kl_ref_bitwise(kl_kernel_ctx *c) {
  const kl_tensor *a = c->in[0], *b = c->in[1];
  kl_tensor *y = c->out[0];
  kl_ref_iter it;
  int64_t n = iter_binary(&it, a, b, y);
  kl_op op = c->node->op;
  bool left = op == KL_OP_BitShift && kl_attr_string(c->node, "direction", "")[0] == 'L';
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it)) {
    int64_t va = kl_ref_load_int(a->data, a->dtype, it.off[0]);
    int64_t vb = kl_ref_load_int(b->data, b->dtype, it.off[1]);
    int64_t r = op == KL_OP_BitwiseAnd ? va & vb
              : op == KL_OP_BitwiseOr  ? va | vb
              : op == KL_OP_BitwiseXor ? va ^ vb
                                       : shift(va, vb, a->dtype, left);
    kl_ref_store_int(y->data, y->dtype, i, r);
  }
  return KILN_OK;
}

/* ---- Pow ---- */

/* base^e for integers by repeated squaring, wrapping like NumPy. A negative exponent
 * leaves 1 / base^|e| truncated toward zero (onnxruntime); zero has no such power. */
static kiln_status int_pow(kl_kernel_ctx *c, int64_t base, int64_t e, bool e_unsigned,
                           int64_t *r) {
  if (e < 0 && !e_unsigned) {
    if (base == 0)
      return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "integer 0 raised to the negative "
                     "power %lld", (long long)e);
    *r = base == 1 ? 1 : base == -1 ? ((e & 1) ? -1 : 1) : 0;
    return KILN_OK;
  }
  uint64_t result = 1, b = (uint64_t)base, n = (uint64_t)e;
  for (; n; n >>= 1, b *= b)
    if (n & 1) result *= b;
  *r = (int64_t)result;
  return KILN_OK;
}

int kl_ref_pow(kl_kernel_ctx *c) {
  const kl_tensor *a = c->in[0], *b = c->in[1];
  kl_tensor *y = c->out[0];
  kl_ref_iter it;
  int64_t n = iter_binary(&it, a, b, y);
  bool float_base = kl_dtype_is_float(a->dtype), float_exp = kl_dtype_is_float(b->dtype);
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it)) {
    if (float_base || float_exp) {
      double r = pow(kl_ref_load(a->data, a->dtype, it.off[0]),
                     kl_ref_load(b->data, b->dtype, it.off[1]));
      if (float_base) kl_ref_store(y->data, y->dtype, i, r);
      else kl_ref_store_int(y->data, y->dtype, i, kl_ref_trunc_i64(r));
      continue;
    }
    int64_t r = 0;
    kiln_status st = int_pow(c, kl_ref_load_int(a->data, a->dtype, it.off[0]),
                             kl_ref_load_int(b->data, b->dtype, it.off[1]),
                             b->dtype == KL_U64, &r);
    if (st != KILN_OK) return st;
    kl_ref_store_int(y->data, y->dtype, i, r);
  }
  return KILN_OK;
}

/* ---- Mod ---- */

/* Integer remainder: truncated (sign of a) when fmod, else floored (sign of b). */
static kiln_status int_mod(kl_kernel_ctx *c, int64_t a, int64_t b, kl_dtype t, bool fmod_,
                           int64_t *r) {
  if (b == 0) return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "integer modulo by zero");
  if (t == KL_U64) {
    *r = (int64_t)((uint64_t)a % (uint64_t)b);
    return KILN_OK;
  }
  int64_t m = b == -1 ? 0 : a % b; /* INT64_MIN % -1 would trap */
  if (!fmod_ && m != 0 && (m < 0) != (b < 0)) m += b;
  *r = m;
  return KILN_OK;
}

int kl_ref_mod(kl_kernel_ctx *c) {
  const kl_tensor *a = c->in[0], *b = c->in[1];
  kl_tensor *y = c->out[0];
  kl_ref_iter it;
  int64_t n = iter_binary(&it, a, b, y);
  bool fmod_ = kl_attr_int(c->node, "fmod", 0) != 0;
  bool is_float = kl_dtype_is_float(y->dtype); /* infer ensures fmod=1 for these */
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it)) {
    if (is_float) {
      double r = fmod(kl_ref_load(a->data, a->dtype, it.off[0]),
                      kl_ref_load(b->data, b->dtype, it.off[1]));
      kl_ref_store(y->data, y->dtype, i, r);
      continue;
    }
    int64_t r = 0;
    kiln_status st = int_mod(c, kl_ref_load_int(a->data, a->dtype, it.off[0]),
                             kl_ref_load_int(b->data, b->dtype, it.off[1]), a->dtype, fmod_,
                             &r);
    if (st != KILN_OK) return st;
    kl_ref_store_int(y->data, y->dtype, i, r);
  }
  return KILN_OK;
}

/* ---- Min, Max, Mean, Sum ---- */

/* Folds x into the running value; Min and Max let NaN win, like NumPy's minimum. */
static double fold_float(kl_op op, double acc, double x) {
  switch (op) {
  case KL_OP_Min: return x < acc || isnan(x) ? x : acc;
  case KL_OP_Max: return x > acc || isnan(x) ? x : acc;
  default: return acc + x; /* Sum, Mean */
  }
}

static int64_t fold_int(kl_op op, int64_t acc, int64_t x, kl_dtype t) {
  int ord = int_order(x, acc, t);
  return (op == KL_OP_Min ? ord < 0 : ord > 0) ? x : acc;
}

/* y = fold(y, x[bcast]) over y, or y = x[bcast] for the first input. The running value
 * is kept in y, rounded to its dtype at each step as NumPy's pairwise ops do. */
static void fold_input(kl_op op, const kl_tensor *x, kl_tensor *y, bool first) {
  kl_ref_iter it;
  kl_ref_iter_init(&it, y->rank, y->dims);
  kl_ref_iter_bcast(&it, 0, x->rank, x->dims, 1);
  int64_t n = kl_tensor_numel(y);
  bool is_float = kl_dtype_is_float(y->dtype);
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it)) {
    if (is_float) {
      double v = kl_ref_load(x->data, x->dtype, it.off[0]);
      if (!first) v = fold_float(op, kl_ref_load(y->data, y->dtype, i), v);
      kl_ref_store(y->data, y->dtype, i, v);
    } else {
      int64_t v = kl_ref_load_int(x->data, x->dtype, it.off[0]);
      if (!first) v = fold_int(op, kl_ref_load_int(y->data, y->dtype, i), v, y->dtype);
      kl_ref_store_int(y->data, y->dtype, i, v);
    }
  }
}

int kl_ref_variadic(kl_kernel_ctx *c) {
  kl_tensor *y = c->out[0];
  for (int k = 0; k < c->n_in; k++) fold_input(c->node->op, c->in[k], y, k == 0);
  if (c->node->op == KL_OP_Mean) {
    int64_t n = kl_tensor_numel(y);
    for (int64_t i = 0; i < n; i++)
      kl_ref_store(y->data, y->dtype, i, kl_ref_load(y->data, y->dtype, i) / c->n_in);
  }
  return KILN_OK;
}

/* ---- Where ---- */

int kl_ref_where(kl_kernel_ctx *c) {
  const kl_tensor *cond = c->in[0], *x = c->in[1], *yv = c->in[2];
  kl_tensor *out = c->out[0];
  kl_ref_iter it;
  kl_ref_iter_init(&it, out->rank, out->dims);
  kl_ref_iter_bcast(&it, 0, cond->rank, cond->dims, 1);
  kl_ref_iter_bcast(&it, 1, x->rank, x->dims, 1);
  kl_ref_iter_bcast(&it, 2, yv->rank, yv->dims, 1);
  size_t size = kl_dtype_size(out->dtype);
  int64_t n = kl_tensor_numel(out);
  const uint8_t *pc = cond->data;
  const char *px = x->data, *py = yv->data;
  char *po = out->data;
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it)) {
    const char *src = pc[it.off[0]] ? px + (size_t)it.off[1] * size
                                    : py + (size_t)it.off[2] * size;
    memcpy(po + (size_t)i * size, src, size);
  }
  return KILN_OK;
}

/* ---- Cast and CastLike ----
 * Float to integer truncates toward zero, saturating at the int64 range (NaN gives 0),
 * then wraps to the target's width like NumPy; ONNX leaves out-of-range values
 * undefined. Anything to bool is "not zero" (NaN is true, as in NumPy). */

typedef struct cast_opts {
  bool saturate;          /* float8 targets: clamp out-of-range values (default) */
  kl_round_mode round;    /* float8e8m0 targets */
} cast_opts;

static void cast_from_float(double v, kl_tensor *y, int64_t i, const cast_opts *o) {
  if (y->dtype == KL_F8E8M0)
    ((uint8_t *)y->data)[i] = kl_f32_to_e8m0((float)v, o->saturate, o->round);
  else if (kl_dtype_is_f8(y->dtype))
    ((uint8_t *)y->data)[i] = kl_f32_to_f8((float)v, y->dtype, o->saturate);
  else if (kl_dtype_is_float(y->dtype))
    kl_ref_store(y->data, y->dtype, i, v);
  else if (y->dtype == KL_U64 && v >= 9223372036854775808.0 && v < 18446744073709551616.0)
    ((uint64_t *)y->data)[i] = (uint64_t)v;
  else if (y->dtype == KL_BOOL)
    ((uint8_t *)y->data)[i] = v != 0;
  else
    kl_ref_store_int(y->data, y->dtype, i, kl_ref_trunc_i64(v));
}

/* v holds an integer of dtype t (a uint64 as its bit pattern). Conversions to float32
 * go straight from the integer so that they round once. */
static void cast_from_int(int64_t v, kl_dtype t, kl_tensor *y, int64_t i) {
  bool u64 = t == KL_U64;
  if (y->dtype == KL_F32)
    ((float *)y->data)[i] = u64 ? (float)(uint64_t)v : (float)v;
  else if (kl_dtype_is_float(y->dtype))
    kl_ref_store(y->data, y->dtype, i, u64 ? (double)(uint64_t)v : (double)v);
  else
    kl_ref_store_int(y->data, y->dtype, i, v);
}

int kl_ref_cast(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  if (x->dtype == y->dtype) {
    kl_ref_copy_bytes(y->data, x->data, kl_tensor_nbytes(x));
    return KILN_OK;
  }
  int64_t n = kl_tensor_numel(x);
  bool from_float = kl_dtype_is_float(x->dtype) || kl_dtype_is_f8(x->dtype);
  cast_opts o = {kl_attr_int(c->node, "saturate", 1) != 0, KL_ROUND_UP};
  const char *rm = kl_attr_string(c->node, "round_mode", "up");
  if (!strcmp(rm, "nearest")) o.round = KL_ROUND_NEAREST;
  else if (!strcmp(rm, "down")) o.round = KL_ROUND_DOWN;
  for (int64_t i = 0; i < n; i++) {
    if (from_float) cast_from_float(kl_ref_load(x->data, x->dtype, i), y, i, &o);
    else cast_from_int(kl_ref_load_int(x->data, x->dtype, i), x->dtype, y, i);
  }
  return KILN_OK;
}
