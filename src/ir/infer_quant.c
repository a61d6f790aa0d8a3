/* Shape/dtype inference for the quantization ops: QuantizeLinear, DequantizeLinear,
 * DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv, and
 * kiln's QLinearGemm, QLinearAdd and QLinearLookup.
 *
 * kiln stores 8- and 16-bit integers; the float8, int4, int2 and float4 forms of the
 * ONNX ops need dtypes kiln does not store and are refused with the dtype named. */
#include "ir/infer_common.h"

/* infer_nn.c: the shapes of the float ops that the integer ones compute. */
int kl_infer_matmul(kl_infer_ctx *c);
int kl_infer_conv(kl_infer_ctx *c);

#define DTS_INT8 (KL_DT(KL_U8) | KL_DT(KL_I8))
#define DTS_F8 (KL_DT(KL_F8E4M3FN) | KL_DT(KL_F8E4M3FNUZ) | KL_DT(KL_F8E5M2) | \
                KL_DT(KL_F8E5M2FNUZ))
#define DTS_QUANT (DTS_INT8 | KL_DT(KL_U16) | KL_DT(KL_I16) | DTS_F8 | KL_DT(KL_U4) | \
                   KL_DT(KL_I4) | KL_DT(KL_U2) | KL_DT(KL_I2) | KL_DT(KL_F4E2M1))
#define DTS_SCALE (KL_DT(KL_F32) | KL_DT(KL_F16) | KL_DT(KL_BF16))

/* ---- scales and zero points ---- */

/* Input i must hold exactly one value (rank 0, or every dim 1) when its shape is known. */
static kiln_status check_one_value(const kl_infer_ctx *c, int i, const char *name) {
  const kl_type *t = kl_infer_in(c, i);
  bool ok = !t || t->rank < 0 || t->rank <= 1;
  for (int k = 0; ok && t && k < t->rank; k++)
    ok = !kl_dim_known(t->dims[k]) || t->dims[k].size == 1;
  if (ok) return KILN_OK;
  return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) must hold one value (per-tensor "
                 "quantization)", i, name);
}

/* Whether t holds one value for sure: rank 0, or rank 1 of size 1. */
static bool one_value(const kl_type *t) {
  return t->rank == 0 || (t->rank == 1 && kl_dim_known(t->dims[0]) && t->dims[0].size == 1);
}

/* The scales of QLinearMatMul's and QLinearConv's eight inputs, each followed by its zero
 * point: the input's, the weight's and the output's. */
static const int scale_inputs[3] = {1, 4, 6};

/* Inputs s and z (a scale and its zero point) must have the same shape; a scalar and a
 * [1] both hold the one value of per-tensor quantization, as onnxruntime accepts (its
 * own quantizer writes a [1] scale with a scalar zero point). */
static kiln_status check_same_shape(const kl_infer_ctx *c, int s, int z) {
  const kl_type *a = kl_infer_in(c, s), *b = kl_infer_in(c, z);
  if (!a || !b || a->rank < 0 || b->rank < 0 || (one_value(a) && one_value(b))) return KILN_OK;
  bool ok = a->rank == b->rank;
  for (int k = 0; ok && k < a->rank; k++) kl_dim_merge(a->dims[k], b->dims[k], &ok);
  if (ok) return KILN_OK;
  char sa[256], sb[256];
  kl_type_format(c->g, a, sa, sizeof sa);
  kl_type_format(c->g, b, sb, sizeof sb);
  return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (zero point) %s must have the shape of "
                 "input %d (scale) %s", z, sb, s, sa);
}

/* Per-axis: a 1-D scale of one value per index of x's dim `axis`. */
static kiln_status check_per_axis(const kl_infer_ctx *c, const kl_type *x, kl_dim n) {
  int axis;
  kiln_status st = kl_norm_axis(c, kl_attr_int(c->node, "axis", 1), x->rank, "axis", &axis);
  if (st != KILN_OK || !kl_dim_known(x->dims[axis]) || x->dims[axis].size == n.size)
    return st;
  return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (scale) has %lld values, expected %lld "
                 "(one per index of input 0's dim %d)", (long long)n.size,
                 (long long)x->dims[axis].size, axis);
}

/* Blocked: the scale has x's shape except along axis, where it holds one value per
 * block of block_size indexes (the last block may be short). */
static kiln_status check_blocked(const kl_infer_ctx *c, const kl_type *x, const kl_type *s,
                                 int64_t block) {
  if (s->rank != x->rank)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (scale) has rank %d, expected %d like "
                   "input 0 (blocked quantization)", s->rank, x->rank);
  int axis;
  kiln_status st = kl_norm_axis(c, kl_attr_int(c->node, "axis", 1), x->rank, "axis", &axis);
  for (int k = 0; st == KILN_OK && k < x->rank; k++) {
    kl_dim d = x->dims[k], sd = s->dims[k];
    if (!kl_dim_known(d) || !kl_dim_known(sd)) continue;
    int64_t want = k == axis ? d.size / block + (d.size % block != 0) : d.size;
    if (sd.size != want)
      st = kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (scale) has %lld in dim %d, expected "
                   "%lld (input 0 has %lld, block_size %lld along axis %d)",
                   (long long)sd.size, k, (long long)want, (long long)d.size,
                   (long long)block, axis);
  }
  return st;
}

/* The scale (input 1) and zero point (input 2) of QuantizeLinear / DequantizeLinear:
 * per tensor, per axis or blocked, as block_size and the scale's shape say. */
static kiln_status check_qparams(const kl_infer_ctx *c) {
  kiln_status st = check_same_shape(c, 1, 2);
  int64_t block = kl_attr_int(c->node, "block_size", 0);
  if (st == KILN_OK && block < 0)
    st = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "block_size is %lld, expected at least 0",
                 (long long)block);
  const kl_type *x = c->in[0], *s = c->in[1];
  if (st != KILN_OK || x->rank < 0 || s->rank < 0) return st;
  if (block > 0) return check_blocked(c, x, s, block);
  if (s->rank > 1)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (scale) has rank %d, expected 0 or 1 "
                   "(or block_size for blocked quantization)", s->rank);
  if (s->rank == 1 && kl_dim_known(s->dims[0]) && s->dims[0].size != 1)
    return check_per_axis(c, x, s->dims[0]);
  return KILN_OK;
}

/* An attribute naming a dtype (0: not given) must be one of `allowed`. */
static kiln_status check_dtype_attr(const kl_infer_ctx *c, const char *name, uint32_t allowed,
                                    kl_dtype *out) {
  int64_t v = kl_attr_int(c->node, name, 0);
  *out = (kl_dtype)v;
  if (v == 0 || (v > 0 && v < 32 && kl_dtype_valid((int)v) && (allowed & KL_DT(v))))
    return KILN_OK;
  const char *what = v > 0 && v < 32 && kl_dtype_valid((int)v) ? kl_dtype_name((kl_dtype)v)
                                                              : "a dtype kiln does not store";
  return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "%s is %lld (%s); %s takes %s", name,
                 (long long)v, what, kl_op_name(c->node->op),
                 allowed == DTS_SCALE ? "float32, float16 or bfloat16"
                                      : "uint8, int8, uint16 or int16");
}

/* ---- QuantizeLinear / DequantizeLinear ---- */

/* The output dtype: y_zero_point's, else output_dtype, else uint8; both given must agree. */
static kiln_status quantize_dtype(const kl_infer_ctx *c, kl_dtype *out) {
  kl_dtype attr;
  kiln_status st = check_dtype_attr(c, "output_dtype", DTS_QUANT, &attr);
  const kl_type *z = kl_infer_in(c, 2);
  if (st != KILN_OK) return st;
  *out = attr != KL_UNDEFINED ? attr : KL_U8;
  if (!z) return KILN_OK;
  if (attr != KL_UNDEFINED && z->dtype != KL_UNDEFINED && z->dtype != attr)
    return kl_fail(c->e, KILN_ERR_DTYPE, "output_dtype is %s but input 2 (y_zero_point) "
                   "is %s", kl_dtype_name(attr), kl_dtype_name(z->dtype));
  if (z->dtype != KL_UNDEFINED) *out = z->dtype;
  return KILN_OK;
}

int kl_infer_quantize_linear(kl_infer_ctx *c) {
  kl_dtype precision, out;
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK)
    st = kl_check_dtype(c, 0, "x", KL_DT(KL_F32) | KL_DT(KL_F16) | KL_DT(KL_BF16) |
                                       KL_DT(KL_I32));
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "y_scale", DTS_SCALE);
  if (st == KILN_OK) st = kl_check_dtype(c, 2, "y_zero_point", DTS_QUANT);
  if (st == KILN_OK) st = check_dtype_attr(c, "precision", DTS_SCALE, &precision);
  if (st == KILN_OK) st = quantize_dtype(c, &out);
  if (st == KILN_OK) st = check_qparams(c);
  if (st != KILN_OK) return st;
  c->out[0] = *c->in[0];
  c->out[0].dtype = out;
  return KILN_OK;
}

int kl_infer_dequantize_linear(kl_infer_ctx *c) {
  kl_dtype out;
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "x", DTS_QUANT | KL_DT(KL_I32));
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "x_scale", DTS_SCALE);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 2);
  if (st == KILN_OK) st = check_dtype_attr(c, "output_dtype", DTS_SCALE, &out);
  if (st == KILN_OK) st = check_qparams(c);
  if (st != KILN_OK) return st;
  c->out[0] = *c->in[0];
  c->out[0].dtype = out != KL_UNDEFINED ? out : c->in[1]->dtype;
  return KILN_OK;
}

int kl_infer_dynamic_quantize_linear(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "x", KL_DT(KL_F32));
  if (st != KILN_OK) return st;
  c->out[0] = *c->in[0];
  c->out[0].dtype = KL_U8;
  if (c->n_out > 1) kl_type_unknown_dims(&c->out[1], KL_F32, 0);
  if (c->n_out > 2) kl_type_unknown_dims(&c->out[2], KL_U8, 0);
  return KILN_OK;
}

/* ---- integer matrix products ---- */

/* Zero point or scale z of matrix operand t (input ti): one value, one per row of A
 * (is_a: [M] or [..., M, 1]) or one per column of B ([N] or [..., 1, N]). */
static kiln_status check_matrix_qparam(const kl_infer_ctx *c, int z, int ti, bool is_a) {
  const kl_type *q = kl_infer_in(c, z), *t = c->in[ti];
  if (!q || q->rank < 0 || t->rank < 0) return KILN_OK;
  if (q->rank > 1 && t->rank >= 2) {
    kl_dim unit = q->dims[q->rank - (is_a ? 1 : 2)];
    if (q->rank != t->rank || (kl_dim_known(unit) && unit.size != 1))
      return kl_fail(c->e, KILN_ERR_SHAPE, "input %d has rank %d, expected 0, 1 or %d with "
                     "a 1 in dim %d (per %s quantization of input %d)", z, q->rank, t->rank,
                     t->rank - (is_a ? 1 : 2), is_a ? "row" : "column", ti);
    return kl_check_unidirectional(c, z, "quantization parameter", t);
  }
  if (q->rank > 1)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input %d has rank %d, expected 0 or 1 for the "
                   "1-D input %d", z, q->rank, ti);
  kl_dim n = q->rank == 1 ? q->dims[0] : kl_dim_of(1);
  kl_dim want = t->rank >= 2 ? t->dims[t->rank - (is_a ? 2 : 1)] : kl_dim_of(1);
  if (kl_dim_known(n) && n.size != 1 && kl_dim_known(want) && n.size != want.size)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input %d has %lld values, expected 1 or %lld "
                   "(one per %s of input %d)", z, (long long)n.size, (long long)want.size,
                   is_a ? "row" : "column", ti);
  return KILN_OK;
}

/* QLinearMatMul's and QLinearConv's inputs: (a, a_scale, a_zero_point, b, b_scale,
 * b_zero_point, y_scale, y_zero_point). */
static bool is_scale(int i) { return i == 1 || i == 4 || i == 6; }

/* NumPy matmul's output shape for inputs ia and ib, through MatMul's inference (which
 * takes float operands, so the copies here say float32). */
static kiln_status matmul_shape(const kl_infer_ctx *c, int ia, int ib, kl_type *out) {
  kl_type a = *c->in[ia], b = *c->in[ib];
  a.dtype = b.dtype = KL_F32;
  if (a.rank >= 1 && b.rank >= 1) {
    kl_dim ka = a.dims[a.rank - 1], kb = b.dims[b.rank == 1 ? 0 : b.rank - 2];
    bool ok;
    kl_dim_merge(ka, kb, &ok);
    if (!ok)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input %d has %lld rows, expected %lld to match "
                     "input %d's columns", ib, (long long)kb.size, (long long)ka.size, ia);
  }
  const kl_type *pair[2] = {&a, &b};
  const void *data[2] = {NULL, NULL};
  kl_infer_ctx sub = *c;
  sub.in = pair;
  sub.data = data;
  sub.n_in = 2;
  sub.out = out;
  sub.n_out = 1;
  kiln_status st = kl_infer_matmul(&sub);
  if (st != KILN_OK) kl_err_prefix(c->e, "inputs %d and %d", ia, ib);
  return st;
}

int kl_infer_matmul_integer(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "A", DTS_INT8);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "B", DTS_INT8);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 2);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 1, 3);
  if (st == KILN_OK) st = check_matrix_qparam(c, 2, 0, true);
  if (st == KILN_OK) st = check_matrix_qparam(c, 3, 1, false);
  if (st == KILN_OK) st = matmul_shape(c, 0, 1, &c->out[0]);
  c->out[0].dtype = KL_I32;
  return st;
}

/* Input i of kiln's MatMulIntegerToFloat (scale, bias): float32, one value or one per
 * column of y (rank at most y's, every dim 1 but the last, which is 1 or y's last). */
static kiln_status check_per_column(const kl_infer_ctx *c, int i, const char *name,
                                    const kl_type *y) {
  kiln_status st = kl_check_dtype(c, i, name, KL_DT(KL_F32));
  const kl_type *v = kl_infer_in(c, i);
  if (st != KILN_OK || !v || v->rank < 0 || y->rank < 0) return st;
  bool ok = v->rank <= y->rank;
  for (int d = 0; ok && d < v->rank - 1; d++)
    ok = !kl_dim_known(v->dims[d]) || v->dims[d].size == 1;
  kl_dim last = v->rank > 0 ? v->dims[v->rank - 1] : kl_dim_of(1);
  kl_dim n = y->rank > 0 ? y->dims[y->rank - 1] : kl_dim_of(1);
  if (ok && (!kl_dim_known(last) || last.size == 1 || !kl_dim_known(n) || last.size == n.size))
    return KILN_OK;
  char have[128];
  kl_type_format(c->g, v, have, sizeof have);
  return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) is %s, expected one value or one per "
                 "column (%lld) of the rank-%d output", i, name, have, (long long)n.size,
                 y->rank);
}

int kl_infer_matmul_integer_to_float(kl_infer_ctx *c) {
  kl_infer_ctx mm = *c;
  mm.n_in = c->n_in < 4 ? c->n_in : 4;
  kiln_status st = kl_infer_matmul_integer(&mm);
  if (st == KILN_OK && !kl_infer_in(c, 4))
    st = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "input 4 (scale) is required but absent");
  c->out[0].dtype = KL_F32;
  if (st == KILN_OK) st = check_per_column(c, 4, "scale", &c->out[0]);
  if (st == KILN_OK) st = check_per_column(c, 5, "bias", &c->out[0]);
  return st;
}

int kl_infer_qlinear_matmul(kl_infer_ctx *c) {
  static const char *const names[] = {"a", "a_scale", "a_zero_point", "b", "b_scale",
                                      "b_zero_point", "y_scale", "y_zero_point"};
  kiln_status st = kl_check_required(c, 8);
  for (int i = 0; st == KILN_OK && i < 8; i++)
    st = kl_check_dtype(c, i, names[i], is_scale(i) ? DTS_SCALE : DTS_INT8);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 2);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 3, 5);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 1, 4);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 1, 6);
  for (int i = 0; st == KILN_OK && i < 3; i++)
    st = check_same_shape(c, scale_inputs[i], scale_inputs[i] + 1);
  if (st == KILN_OK) st = check_matrix_qparam(c, 1, 0, true);
  if (st == KILN_OK) st = check_matrix_qparam(c, 4, 3, false);
  for (int i = 6; st == KILN_OK && i < 8; i++) st = check_one_value(c, i, names[i]);
  if (st == KILN_OK) st = matmul_shape(c, 0, 3, &c->out[0]);
  c->out[0].dtype = c->in[7] ? c->in[7]->dtype : KL_UNDEFINED;
  return st;
}

/* ---- integer convolutions ---- */

/* Conv's output shape for x (input 0) and w (input iw), through Conv's inference. */
static kiln_status conv_shape(const kl_infer_ctx *c, int iw, kl_type *out) {
  kl_type x = *c->in[0], w = *c->in[iw];
  x.dtype = w.dtype = KL_F32;
  const kl_type *pair[2] = {&x, &w};
  const void *data[2] = {NULL, NULL};
  kl_infer_ctx sub = *c;
  sub.in = pair;
  sub.data = data;
  sub.n_in = 2;
  sub.out = out;
  sub.n_out = 1;
  return kl_infer_conv(&sub);
}

/* Input z (a weight's zero point or scale): one value, or one per output channel. */
static kiln_status check_per_channel(const kl_infer_ctx *c, int z, const kl_type *y) {
  const kl_type *q = kl_infer_in(c, z);
  if (!q || q->rank < 0) return KILN_OK;
  kl_dim m = y->rank >= 2 ? y->dims[1] : kl_dim_unknown();
  kl_dim n = q->rank == 1 ? q->dims[0] : kl_dim_of(1);
  if (q->rank <= 1 && !(kl_dim_known(n) && kl_dim_known(m) && n.size != 1 && n.size != m.size))
    return KILN_OK;
  return kl_fail(c->e, KILN_ERR_SHAPE, "input %d must hold one value or one per output "
                 "channel (%lld)", z, (long long)m.size);
}

int kl_infer_conv_integer(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "x", DTS_INT8);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "w", DTS_INT8);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 2);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 1, 3);
  if (st == KILN_OK) st = check_one_value(c, 2, "x_zero_point");
  if (st == KILN_OK) st = conv_shape(c, 1, &c->out[0]);
  if (st == KILN_OK) st = check_per_channel(c, 3, &c->out[0]);
  c->out[0].dtype = KL_I32;
  return st;
}

/* QLinearConv's and QLinearGemm's B: one int32 per output channel (y's dim `axis`),
 * already at scale x_scale * w_scale. */
static kiln_status check_bias(const kl_infer_ctx *c, const kl_type *y, int axis) {
  const kl_type *b = kl_infer_in(c, 8);
  kl_dim m = y->rank >= 2 && axis < y->rank ? y->dims[axis] : kl_dim_unknown();
  if (!b || b->rank != 1 || !kl_dim_known(m) || !kl_dim_known(b->dims[0]) ||
      b->dims[0].size == m.size)
    return KILN_OK;
  return kl_fail(c->e, KILN_ERR_SHAPE, "input 8 (B) has %lld values, expected %lld (one "
                 "per output channel)", (long long)b->dims[0].size, (long long)m.size);
}

int kl_infer_qlinear_conv(kl_infer_ctx *c) {
  static const char *const names[] = {"x", "x_scale", "x_zero_point", "w", "w_scale",
                                      "w_zero_point", "y_scale", "y_zero_point"};
  kiln_status st = kl_check_required(c, 8);
  for (int i = 0; st == KILN_OK && i < 8; i++)
    st = kl_check_dtype(c, i, names[i], is_scale(i) ? KL_DT(KL_F32) : DTS_INT8);
  if (st == KILN_OK) st = kl_check_dtype(c, 8, "B", KL_DT(KL_I32));
  if (st == KILN_OK) st = kl_check_rank(c, 8, "B", 1, 1);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 2);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 3, 5);
  for (int i = 0; st == KILN_OK && i < 3; i++)
    st = check_same_shape(c, scale_inputs[i], scale_inputs[i] + 1);
  if (st == KILN_OK) st = check_one_value(c, 1, names[1]);
  for (int i = 6; st == KILN_OK && i < 8; i++) st = check_one_value(c, i, names[i]);
  if (st == KILN_OK) st = conv_shape(c, 3, &c->out[0]);
  if (st == KILN_OK) st = check_per_channel(c, 4, &c->out[0]);
  if (st == KILN_OK) st = check_bias(c, &c->out[0], 1);
  c->out[0].dtype = c->in[7] ? c->in[7]->dtype : KL_UNDEFINED;
  return st;
}

/* kiln's QLinearGemm: QLinearMatMul's eight inputs and an optional int32 bias [N]. */
int kl_infer_qlinear_gemm(kl_infer_ctx *c) {
  kl_infer_ctx mm = *c;
  mm.n_in = c->n_in < 8 ? c->n_in : 8;
  kiln_status st = kl_infer_qlinear_matmul(&mm);
  if (st == KILN_OK) st = kl_check_dtype(c, 8, "B", KL_DT(KL_I32));
  if (st == KILN_OK) st = kl_check_rank(c, 8, "B", 1, 1);
  if (st == KILN_OK) st = check_bias(c, &c->out[0], c->out[0].rank - 1);
  return st;
}

int kl_infer_qlinear_add(kl_infer_ctx *c) {
  static const char *const names[] = {"A", "A_scale", "A_zero_point", "B", "B_scale",
                                      "B_zero_point", "C_scale", "C_zero_point"};
  kiln_status st = kl_check_required(c, 8);
  for (int i = 0; st == KILN_OK && i < 8; i++)
    st = kl_check_dtype(c, i, names[i], is_scale(i) ? KL_DT(KL_F32) : DTS_INT8);
  for (int i = 2; st == KILN_OK && i < 8; i++) /* B and the zero points: A's dtype */
    if (!is_scale(i)) st = kl_check_same_dtype(c, 0, i);
  for (int i = 1; st == KILN_OK && i < 8; i++)
    if (i != 3) st = check_one_value(c, i, names[i]);
  if (st != KILN_OK) return st;
  kl_type_unknown(&c->out[0], c->in[0]->dtype);
  return kl_broadcast(c, 0, 3, &c->out[0]);
}

/* QLinearGlobalAveragePool's and QLinearAveragePool's (X, x_scale, x_zero_point,
 * y_scale, y_zero_point): X and the zero points of one 8-bit dtype, float32 scales,
 * per tensor. */
static kiln_status check_pool_params(kl_infer_ctx *c) {
  static const char *const names[] = {"X", "x_scale", "x_zero_point", "y_scale",
                                      "y_zero_point"};
  kiln_status st = kl_check_required(c, 5);
  for (int i = 0; st == KILN_OK && i < 5; i++)
    st = kl_check_dtype(c, i, names[i], i == 1 || i == 3 ? KL_DT(KL_F32) : DTS_INT8);
  for (int i = 2; st == KILN_OK && i < 5; i += 2) st = kl_check_same_dtype(c, 0, i);
  for (int i = 1; st == KILN_OK && i < 5; i++) st = check_one_value(c, i, names[i]);
  return st;
}

/* AveragePool's window geometry over input 0 (infer_nn.c). */
int kl_infer_pool(kl_infer_ctx *c);

int kl_infer_qlinear_pool(kl_infer_ctx *c) {
  kiln_status st = check_pool_params(c);
  if (st != KILN_OK) return st;
  kl_infer_ctx x = *c;
  x.n_in = 1;
  return kl_infer_pool(&x);
}

int kl_infer_qlinear_global_pool(kl_infer_ctx *c) {
  kiln_status st = check_pool_params(c);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "X", 3, KL_MAX_RANK);
  if (st != KILN_OK) return st;
  kl_type_unknown(&c->out[0], c->in[0]->dtype);
  if (c->in[0]->rank < 0) return KILN_OK;
  c->out[0].rank = c->in[0]->rank;
  for (int d = 0; d < c->in[0]->rank; d++)
    c->out[0].dims[d] = d < 2 ? c->in[0]->dims[d] : kl_dim_of(1);
  return KILN_OK;
}

int kl_infer_qlinear_lookup(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", DTS_INT8);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "Table", DTS_INT8);
  if (st != KILN_OK) return st;
  const kl_type *t = c->in[1];
  if (t->rank >= 0 && (t->rank != 1 || (kl_dim_known(t->dims[0]) && t->dims[0].size != 256)))
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (Table) is %s, expected 256 values (one per "
                   "8-bit code)", t->rank == 1 ? "of another length" : "not 1-D");
  c->out[0] = *c->in[0];
  c->out[0].dtype = t->dtype;
  return KILN_OK;
}
