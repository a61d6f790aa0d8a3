/* Reference kernels for linear quantization.
 *
 * QuantizeLinear:   y = saturate(rint(x / scale) + zero_point), the division rounded to
 *                   the `precision` dtype (default: the scale's), ties to even.
 * DequantizeLinear: y = (x - zero_point) * scale, rounded once to y's dtype.
 *   The scale and zero point of element x[..., a, ...] (a along `axis`) are element 0
 *   (per tensor), element a (per axis) or the element with a / block_size in place of
 *   a (blocked, the scale having x's shape but ceil(D / block_size) along axis).
 * DynamicQuantizeLinear: uint8 quantization of x with the range [min(0, x), max(0, x)],
 *   in float32 arithmetic step by step as the ONNX function body does.
 * MatMulInteger, ConvInteger: the float reference MatMul / Conv run on the operands
 *   minus their zero points (exact in double: int8 products and their sums fit), int32
 *   result. Zero points: one value, one per row of A / column of B / output channel.
 * QLinearMatMul, QLinearConv: the same integer result (QLinearConv's and kiln's
 *   QLinearGemm's int32 bias added to it), then
 *   y = saturate(rint(acc * (a_scale * b_scale / y_scale) + y_zero_point)) (the zero
 *   point added before rounding, which matters for ties), the scale
 *   product and quotient rounded to the scales' dtype step by step (as onnxruntime
 *   and the ONNX reference do) and the rest in double. QLinearGemm's Relu takes the
 *   larger of acc * multiplier and 0 before the zero point is added.
 */
#include "backends/cpu/ref/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* gemm.c and conv.c: the float kernels that the integer ones reuse. */
int kl_ref_matmul(kl_kernel_ctx *c);
int kl_ref_conv(kl_kernel_ctx *c);

/* v rounded to float dtype t (to nearest even), as a value of that dtype holds it. */
static double round_to(kl_dtype t, double v) {
  switch (t) {
  case KL_F32: return (float)v;
  case KL_F16: return kl_f16_to_f32(kl_f32_to_f16((float)v));
  case KL_BF16: return kl_bf16_to_f32(kl_f32_to_bf16((float)v));
  default: return v;
  }
}

static void int_range(kl_dtype t, double *lo, double *hi) {
  switch (t) {
  case KL_I8: *lo = INT8_MIN, *hi = INT8_MAX; break;
  case KL_U16: *lo = 0, *hi = UINT16_MAX; break;
  case KL_I16: *lo = INT16_MIN, *hi = INT16_MAX; break;
  case KL_I4: *lo = -8, *hi = 7; break;
  case KL_U4: *lo = 0, *hi = 15; break;
  case KL_I2: *lo = -2, *hi = 1; break;
  case KL_U2: *lo = 0, *hi = 3; break;
  default: *lo = 0, *hi = UINT8_MAX; break;
  }
}

/* rint(v) saturated to t's range, stored as element i of y. NaN becomes 0, which no
 * saturating conversion can do better. */
static void store_saturated(kl_tensor *y, int64_t i, double v) {
  double lo, hi;
  int_range(y->dtype, &lo, &hi);
  v = isnan(v) ? 0 : rint(v);
  kl_ref_store_int(y->data, y->dtype, i, (int64_t)(v < lo ? lo : v > hi ? hi : v));
}

/* ---- where an element's scale lives ---- */

typedef enum { Q_TENSOR, Q_AXIS, Q_BLOCKED } q_mode;

typedef struct qmap {
  q_mode mode;
  int64_t axis_len, inner; /* x viewed as [outer, axis_len, inner] */
  int64_t block, scale_axis_len;
} qmap;

static qmap qmap_of(const kl_node *node, const kl_tensor *x, const kl_tensor *s) {
  qmap m = {Q_TENSOR, 1, 1, 1, 1};
  if (kl_tensor_numel(s) == 1) return m;
  int64_t axis = kl_attr_int(node, "axis", 1);
  if (axis < 0) axis += x->rank;
  m.axis_len = x->dims[axis];
  m.inner = kl_ref_span(x->dims, (int)axis + 1, x->rank);
  m.block = kl_attr_int(node, "block_size", 0);
  m.mode = m.block > 0 ? Q_BLOCKED : Q_AXIS;
  if (m.mode == Q_BLOCKED) m.scale_axis_len = s->dims[axis];
  return m;
}

static int64_t qmap_at(const qmap *m, int64_t i) {
  if (m->mode == Q_TENSOR) return 0;
  int64_t a = i / m->inner % m->axis_len;
  if (m->mode == Q_AXIS) return a;
  int64_t outer = i / (m->inner * m->axis_len), in = i % m->inner;
  return (outer * m->scale_axis_len + a / m->block) * m->inner + in;
}

/* ---- QuantizeLinear / DequantizeLinear ---- */

int kl_ref_quantize_linear(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *s = c->in[1], *z = c->n_in > 2 ? c->in[2] : NULL;
  kl_tensor *y = c->out[0];
  kl_dtype prec = (kl_dtype)kl_attr_int(c->node, "precision", 0);
  if (prec == KL_UNDEFINED) prec = s->dtype;
  qmap m = qmap_of(c->node, x, s);
  int64_t n = kl_tensor_numel(x);
  bool saturate = kl_attr_int(c->node, "saturate", 1) != 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t at = qmap_at(&m, i);
    double xv = round_to(prec, kl_ref_load(x->data, x->dtype, i));
    double q = round_to(prec, xv / round_to(prec, kl_ref_load(s->data, s->dtype, at)));
    if (y->dtype == KL_F4E2M1 && z) q += kl_ref_load(z->data, z->dtype, at);
    if (kl_dtype_is_f8(y->dtype)) { /* ONNX: a float8 zero point is 0 and not added */
      ((uint8_t *)y->data)[i] = kl_f32_to_f8((float)q, y->dtype, saturate);
      continue;
    }
    double zp = z ? (double)kl_ref_load_int(z->data, z->dtype, at) : 0;
    store_saturated(y, i, isnan(q) ? zp : rint(q) + zp);
  }
  return KILN_OK;
}

int kl_ref_dequantize_linear(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *s = c->in[1], *z = c->n_in > 2 ? c->in[2] : NULL;
  kl_tensor *y = c->out[0];
  qmap m = qmap_of(c->node, x, s);
  int64_t n = kl_tensor_numel(x);
  for (int64_t i = 0; i < n; i++) {
    int64_t at = qmap_at(&m, i);
    if (kl_dtype_is_f8(x->dtype)) {
      double d = kl_ref_load(x->data, x->dtype, i);
      if (z) d -= kl_ref_load(z->data, z->dtype, at);
      kl_ref_store(y->data, y->dtype, i, d * kl_ref_load(s->data, s->dtype, at));
      continue;
    }
    int64_t v = kl_ref_load_int(x->data, x->dtype, i);
    if (z) v -= kl_ref_load_int(z->data, z->dtype, at);
    kl_ref_store(y->data, y->dtype, i, (double)v * kl_ref_load(s->data, s->dtype, at));
  }
  return KILN_OK;
}

int kl_ref_dynamic_quantize_linear(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  const float *xv = x->data;
  int64_t n = kl_tensor_numel(x);
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < n; i++) {
    /* a NaN or infinity has no place in a range: the scale came out infinite and the
     * zero point NaN, cast to uint8 */
    if (!isfinite(xv[i]))
      return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "x holds %g at element %lld; "
                     "DynamicQuantizeLinear needs finite values to make a range",
                     (double)xv[i], (long long)i);
    if (xv[i] < lo) lo = xv[i];
    if (xv[i] > hi) hi = xv[i];
  }
  float scale = (hi == lo ? 1.0f : hi - lo) / 255.0f;
  float zp = 0.0f - lo / scale;
  zp = rintf(zp < 0.0f ? 0.0f : zp > 255.0f ? 255.0f : zp);
  kl_tensor *y = c->out[0];
  for (int64_t i = 0; i < n; i++) store_saturated(y, i, rintf(xv[i] / scale) + zp);
  if (c->n_out > 1 && c->out[1]) *(float *)c->out[1]->data = scale;
  if (c->n_out > 2 && c->out[2]) *(uint8_t *)c->out[2]->data = (uint8_t)zp;
  return KILN_OK;
}

/* ---- integer products ---- */

/* t minus its zero point z (NULL: none), as a new float64 tensor. A 1-D z of more than
 * one value runs along t's dim `axis` (rows of A, columns of B, output channels of W);
 * any other z broadcasts against t as NumPy does. */
static kiln_status shifted(const kl_kernel_ctx *c, const kl_tensor *t, const kl_tensor *z,
                           int axis, kl_tensor *out) {
  *out = *t;
  out->dtype = KL_F64;
  int64_t n = kl_tensor_numel(t);
  double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
  out->data = v;
  if (!v) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for %lld values",
                         (long long)n);
  int64_t zdims[KL_MAX_RANK];
  int zrank = z ? z->rank : 0;
  for (int i = 0; i < zrank; i++) zdims[i] = z->dims[i];
  if (z && z->rank == 1 && z->dims[0] != 1 && t->rank >= 1) {
    zrank = t->rank;
    for (int i = 0; i < zrank; i++) zdims[i] = i == axis ? z->dims[0] : 1;
  }
  kl_ref_iter it;
  kl_ref_iter_init(&it, t->rank, t->dims);
  kl_ref_iter_bcast(&it, 0, zrank, zdims, 1);
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it)) {
    int64_t zp = z ? kl_ref_load_int(z->data, z->dtype, it.off[0]) : 0;
    v[i] = (double)(kl_ref_load_int(t->data, t->dtype, i) - zp);
  }
  return KILN_OK;
}

/* Runs a float kernel on (a, b[, bias]) into y through a copy of c. */
static kiln_status run_float(kl_kernel_ctx *c, kl_kernel_fn fn, const kl_tensor *a,
                             const kl_tensor *b, const kl_tensor *bias, kl_tensor *y) {
  const kl_tensor *in[3] = {a, b, bias};
  kl_tensor *out[1] = {y};
  kl_kernel_ctx sub = *c;
  sub.in = in;
  sub.n_in = bias ? 3 : 2;
  sub.out = out;
  sub.n_out = 1;
  return fn(&sub);
}

/* A float64 tensor shaped like y, for the integer result before requantization. */
static kiln_status scratch_like(const kl_kernel_ctx *c, const kl_tensor *y, kl_tensor *t) {
  *t = *y;
  t->dtype = KL_F64;
  int64_t n = kl_tensor_numel(y);
  t->data = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  if (!t->data)
    return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for %lld values",
                   (long long)n);
  return KILN_OK;
}

static const kl_tensor *opt_in(const kl_kernel_ctx *c, int i) {
  return i < c->n_in ? c->in[i] : NULL;
}

int kl_ref_matmul_integer(kl_kernel_ctx *c) {
  const kl_tensor *a = c->in[0], *b = c->in[1];
  kl_tensor sa = {0}, sb = {0};
  kiln_status st = shifted(c, a, opt_in(c, 2), a->rank - 2, &sa);
  if (st == KILN_OK) st = shifted(c, b, opt_in(c, 3), b->rank - 1, &sb);
  if (st == KILN_OK) st = run_float(c, kl_ref_matmul, &sa, &sb, NULL, c->out[0]);
  free(sa.data);
  free(sb.data);
  return st;
}

/* kiln's MatMulIntegerToFloat: MatMulInteger's int32 sums (its reference, into a
 * scratch int32 tensor), then float(v) * scale + bias in float32, one step at a time as
 * the Cast, Mul and Add it replaces. */
int kl_ref_matmul_integer_to_float(kl_kernel_ctx *c) {
  kl_tensor *y = c->out[0], acc = *y;
  const kl_tensor *s = c->in[4], *b = opt_in(c, 5);
  int64_t n = kl_tensor_numel(y), cols = y->rank > 0 ? y->dims[y->rank - 1] : 1;
  acc.dtype = KL_I32;
  acc.data = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
  if (!acc.data)
    return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for %lld values", (long long)n);
  kl_tensor *out[1] = {&acc};
  kl_kernel_ctx sub = *c;
  sub.n_in = c->n_in < 4 ? c->n_in : 4;
  sub.out = out;
  kiln_status st = kl_ref_matmul_integer(&sub);
  const float *sv = s->data, *bv = b ? b->data : NULL;
  bool s_cols = kl_tensor_numel(s) != 1, b_cols = b && kl_tensor_numel(b) != 1;
  for (int64_t i = 0; st == KILN_OK && i < n; i++) {
    int64_t j = cols > 0 ? i % cols : 0;
    float v = (float)((const int32_t *)acc.data)[i] * sv[s_cols ? j : 0];
    if (bv) v = v + bv[b_cols ? j : 0];
    ((float *)y->data)[i] = v;
  }
  free(acc.data);
  return st;
}

int kl_ref_conv_integer(kl_kernel_ctx *c) {
  kl_tensor sx = {0}, sw = {0};
  kiln_status st = shifted(c, c->in[0], opt_in(c, 2), 1, &sx);
  if (st == KILN_OK) st = shifted(c, c->in[1], opt_in(c, 3), 0, &sw);
  if (st == KILN_OK) st = run_float(c, kl_ref_conv, &sx, &sw, NULL, c->out[0]);
  free(sx.data);
  free(sw.data);
  return st;
}

/* sa * sb / sy with each step rounded to the scales' dtype t. */
static double multiplier(kl_dtype t, double sa, double sb, double sy) {
  return round_to(t, round_to(t, sa * sb) / sy);
}

/* Requantizes acc into y: a_scale per row (a 1-D one is [M, 1] when y has columns),
 * b_scale per column, y_scale and y_zero_point one value each; relu: the scaled sum
 * at least 0 (QLinearGemm's activation). */
static kiln_status requantize_matmul(kl_kernel_ctx *c, const kl_tensor *acc, bool relu) {
  const kl_tensor *as = c->in[1], *bs = c->in[4], *ys = c->in[6], *yz = c->in[7];
  kl_tensor *y = c->out[0];
  int64_t adims[2] = {kl_tensor_numel(as), 1};
  bool rows = as->rank == 1 && adims[0] != 1 && c->in[3]->rank >= 2;
  if ((rows ? 2 : as->rank) > y->rank || bs->rank > y->rank)
    return kl_fail(c->e, KILN_ERR_SHAPE, "the scales of inputs 1 and 4 (rank %d and %d) do "
                   "not broadcast to the output's rank %d", as->rank, bs->rank, y->rank);
  kl_ref_iter it;
  kl_ref_iter_init(&it, y->rank, y->dims);
  if (rows) kl_ref_iter_bcast(&it, 0, 2, adims, 1);
  else kl_ref_iter_bcast(&it, 0, as->rank, as->dims, 1);
  kl_ref_iter_bcast(&it, 1, bs->rank, bs->dims, 1);
  double sy = kl_ref_load(ys->data, ys->dtype, 0);
  double zp = (double)kl_ref_load_int(yz->data, yz->dtype, 0);
  int64_t n = kl_tensor_numel(y);
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it)) {
    double m = multiplier(as->dtype, kl_ref_load(as->data, as->dtype, it.off[0]),
                          kl_ref_load(bs->data, bs->dtype, it.off[1]), sy);
    double v = ((const double *)acc->data)[i] * m;
    store_saturated(y, i, (relu && v < 0 ? 0 : v) + zp);
  }
  return KILN_OK;
}

/* acc [..., N] plus bias [N] (int32) along its last dim. */
static void add_bias(kl_tensor *acc, const kl_tensor *bias) {
  int64_t n = kl_tensor_numel(acc), cols = bias->dims[0];
  double *v = acc->data;
  for (int64_t i = 0; cols > 0 && i < n; i++) v[i] += ((const int32_t *)bias->data)[i % cols];
}

/* QLinearMatMul, and kiln's QLinearGemm: its bias (input 8) and activation. */
static kiln_status qlinear_matmul(kl_kernel_ctx *c, const kl_tensor *bias, bool relu) {
  const kl_tensor *a = c->in[0], *b = c->in[3];
  kl_tensor sa = {0}, sb = {0}, acc = {0};
  kiln_status st = shifted(c, a, c->in[2], a->rank - 2, &sa);
  if (st == KILN_OK) st = shifted(c, b, c->in[5], b->rank - 1, &sb);
  if (st == KILN_OK) st = scratch_like(c, c->out[0], &acc);
  if (st == KILN_OK) st = run_float(c, kl_ref_matmul, &sa, &sb, NULL, &acc);
  if (st == KILN_OK && bias) add_bias(&acc, bias);
  if (st == KILN_OK) st = requantize_matmul(c, &acc, relu);
  free(sa.data);
  free(sb.data);
  free(acc.data);
  return st;
}

int kl_ref_qlinear_matmul(kl_kernel_ctx *c) { return qlinear_matmul(c, NULL, false); }

int kl_ref_qlinear_gemm(kl_kernel_ctx *c) {
  const char *act = kl_attr_string(c->node, "activation", NULL);
  if (act && strcmp(act, "Relu") != 0)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "QLinearGemm's activation is %s, expected Relu "
                   "or none", act);
  return qlinear_matmul(c, opt_in(c, 8), act != NULL);
}

/* Requantizes acc [N, M, ...] into y: w_scale one value or one per channel m. */
static void requantize_conv(kl_kernel_ctx *c, const kl_tensor *acc) {
  const kl_tensor *xs = c->in[1], *ws = c->in[4], *ys = c->in[6], *yz = c->in[7];
  kl_tensor *y = c->out[0];
  int64_t channels = y->dims[1], spatial = kl_ref_span(y->dims, 2, y->rank);
  bool per_channel = kl_tensor_numel(ws) > 1;
  double sx = kl_ref_load(xs->data, xs->dtype, 0), sy = kl_ref_load(ys->data, ys->dtype, 0);
  double zp = (double)kl_ref_load_int(yz->data, yz->dtype, 0);
  int64_t n = kl_tensor_numel(y);
  for (int64_t i = 0; i < n; i++) {
    int64_t m = per_channel ? i / spatial % channels : 0;
    double mult = multiplier(KL_F32, sx, kl_ref_load(ws->data, ws->dtype, m), sy);
    store_saturated(y, i, ((const double *)acc->data)[i] * mult + zp);
  }
}

int kl_ref_qlinear_conv(kl_kernel_ctx *c) {
  kl_tensor sx = {0}, sw = {0}, acc = {0};
  kiln_status st = shifted(c, c->in[0], c->in[2], 1, &sx);
  if (st == KILN_OK) st = shifted(c, c->in[3], c->in[5], 0, &sw);
  if (st == KILN_OK) st = scratch_like(c, c->out[0], &acc);
  if (st == KILN_OK) st = run_float(c, kl_ref_conv, &sx, &sw, opt_in(c, 8), &acc);
  if (st == KILN_OK) requantize_conv(c, &acc);
  free(sx.data);
  free(sw.data);
  free(acc.data);
  return st;
}
