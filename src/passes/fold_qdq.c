/* A convolution between DequantizeLinear and QuantizeLinear nodes, as QDQ models
 * (onnxruntime's quantize_static, QDQ format) write one, becomes one QLinearConv (a
 * MatMul of constant 2-D weights one QLinearMatMul, fold_matmul below, and a Gemm or a
 * MatMul with its bias and Relu kiln's QLinearGemm, fold_gemm):
 *
 *   DequantizeLinear(Xq, sx, zx) ---------------------.
 *   DequantizeLinear(Wq, sw, zw)  (constant Wq) ------ Conv -> QuantizeLinear(., sy, zy)
 *   DequantizeLinear(Bq, sb, 0)   (constant, int32) --'
 *     becomes  QLinearConv(Xq, sx, zx, Wq, sw, zw, sy, zy, B')
 *
 * which the CPU backend runs on oneDNN's int8 convolution (dnnl_qconv.c); an Add of two
 * quantized activations kiln's QLinearAdd, a Mul QLinearMul (fold_binary), and an
 * elementwise op between the two a lookup table (fold_lookup, below). Xq is uint8
 * or int8 with one scale and zero point; Wq int8 or uint8, per tensor or per output
 * channel (axis 0); sx, zx, sy, zy constants of one value. The bias may also be a
 * float constant. B' is the bias at scale sx * sw[m]: rint(Bq * sb / (sx * sw[m])),
 * which is Bq itself when sb is that product (onnxruntime makes it so), and
 * rint(B / (sx * sw[m])) for a float bias.
 *
 * Rounding: the QDQ graph rounds the convolution's float32 sum (of dequantized
 * products, plus the bias) once to sy's grid; QLinearConv sums exactly in int32 and
 * rounds acc * (sx * sw / sy) once. The two agree but where the float32 sum lands
 * within its rounding error of a half step: there they differ by one step (a float
 * bias also rounds to the accumulator's grid first). onnxruntime folds the same
 * pattern into its QLinearConv, so the folded form is the one that matches it.
 *
 * Where the backend's int8 convolution is exact only for 7-bit weights (AVX2 without
 * VNNI: cfg->int8_weight_bits), wider weights are left unfolded: the graph then runs
 * its float32 convolution, as fast as the float model, instead of an exact int8
 * reference kernel 40 times slower (docs/precision.md).
 *
 * The Dequantize nodes stay for their other readers (a residual Add reads the same
 * activation); dce drops those left unread. Runs before const_fold, which would
 * otherwise turn the weights' DequantizeLinear into float32 weights; weights that the
 * graph quantizes itself (DQ(Q(W)), W float32) are quantized first (quantize_weights).
 * A Relu or Clip between the product and its QuantizeLinear moves onto the codes
 * (lift_clamp), and a Flatten or Reshape between DequantizeLinear and QuantizeLinear
 * moves the codes (fold_move).
 */
#include "ir/infer_common.h"
#include "passes/rewrite.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A constant of one element. */
static bool const_scalar(const kl_graph *g, int v) {
  const kl_value *c = kl_rw_const(g, v);
  int64_t n;
  return c && kl_type_numel(&c->type, &n) && n == 1;
}

static bool is_q8(kl_dtype t) { return t == KL_U8 || t == KL_I8; }

/* Node d is DequantizeLinear of a quantized 8-bit value with a constant scalar scale
 * and zero point, per tensor: an activation's. */
static bool activation_dq(const kl_graph *g, int d) {
  if (d < 0 || g->nodes[d].op != KL_OP_DequantizeLinear) return false;
  const kl_node *n = &g->nodes[d];
  return n->n_in == 3 && is_q8(g->values[n->in[0]].type.dtype) &&
         g->values[n->in[1]].type.dtype == KL_F32 && const_scalar(g, n->in[1]) &&
         n->in[2] >= 0 && const_scalar(g, n->in[2]) &&
         g->values[n->in[2]].type.dtype == g->values[n->in[0]].type.dtype &&
         kl_attr_int(n, "block_size", 0) == 0;
}

/* Node d is DequantizeLinear of constant 8-bit weights of rank `rank`, scale and zero
 * point one value or one per output channel (m of them, along channel_axis: 0 for a
 * convolution's [M, C, K...], 1 for a matrix product's [K, N]). */
static bool weights_dq(const kl_graph *g, int d, int rank, int64_t m, int channel_axis) {
  if (d < 0 || g->nodes[d].op != KL_OP_DequantizeLinear) return false;
  const kl_node *n = &g->nodes[d];
  if (n->n_in != 3 || n->in[2] < 0 || kl_attr_int(n, "block_size", 0) != 0) return false;
  const kl_value *w = kl_rw_const(g, n->in[0]), *s = kl_rw_const(g, n->in[1]),
                 *z = kl_rw_const(g, n->in[2]);
  int64_t ns, nz;
  if (!w || !s || !z || !is_q8(w->type.dtype) || w->type.rank != rank ||
      z->type.dtype != w->type.dtype || s->type.dtype != KL_F32 ||
      !kl_type_numel(&s->type, &ns) || !kl_type_numel(&z->type, &nz) || ns != nz ||
      s->type.rank > 1 || z->type.rank != s->type.rank)
    return false;
  int64_t axis = kl_attr_int(n, "axis", 1);
  return ns == 1 || (ns == m && (axis == channel_axis || axis == channel_axis - rank));
}

/* Whether the constant weights fit `bits` bits as the backend needs them to (int8
 * within [-64, 64] for 7; anything for 0 or 8). */
static bool weights_fit(const kl_value *w, int bits) {
  int64_t n;
  if (bits == 0 || bits >= 8 || !kl_type_numel(&w->type, &n)) return true;
  int lim = 1 << (bits - 1);
  for (int64_t i = 0; i < n; i++) {
    int v = w->type.dtype == KL_I8 ? ((const int8_t *)w->data)[i] : ((const uint8_t *)w->data)[i];
    if (v > lim || v < -lim) return false;
  }
  return true;
}

/* Whether constant bias type t broadcasts as m values along the last of at most
 * max_rank axes: [m] or [1, m] (a Gemm's C as exporters write it too), or one value
 * ([], [1], [1, 1]) taken m times; *nb is 1 or m. */
static bool bias_shape(const kl_type *t, int64_t m, int max_rank, int64_t *nb) {
  if (t->rank > max_rank || !kl_type_numel(t, nb) || (*nb != m && *nb != 1)) return false;
  for (int k = 0; k + 1 < t->rank; k++)
    if (t->dims[k].size != 1) return false;
  return true;
}

/* The bias times mul (a Gemm's beta; 1 else) at scale sx * sw[m] as int32 (a new
 * constant [m], *out), from a constant float bias or DequantizeLinear of a constant
 * int32 one with zero point 0, of a shape bias_shape takes; false when b is neither, or
 * a value does not fit int32. */
static bool bias_of(kl_graph *g, int b, double sx, const float *sw, int64_t nw, int64_t m,
                    int max_rank, double mul, int *out, kl_err *e) {
  *out = -1;
  if (b < 0) return true;
  const kl_value *bc = kl_rw_const(g, b);
  const kl_value *bq = NULL, *bs = NULL, *bz = NULL;
  int d = kl_rw_producer(g, b);
  if (!bc && d >= 0 && g->nodes[d].op == KL_OP_DequantizeLinear) {
    const kl_node *n = &g->nodes[d];
    bq = kl_rw_const(g, n->in[0]);
    bs = kl_rw_const(g, n->in[1]);
    bz = n->n_in > 2 && n->in[2] >= 0 ? kl_rw_const(g, n->in[2]) : NULL;
    if (!bq || !bs || (n->n_in > 2 && n->in[2] >= 0 && !bz) || bq->type.dtype != KL_I32 ||
        bs->type.dtype != KL_F32 || (bz && bz->type.dtype != KL_I32))
      return false;
  } else if (!bc || bc->type.dtype != KL_F32) {
    return false;
  }
  const kl_value *v = bc ? bc : bq;
  int64_t nb, ns = 1;
  if (!bias_shape(&v->type, m, max_rank, &nb) ||
      (bs && (!kl_type_numel(&bs->type, &ns) || (ns != 1 && ns != nb))))
    return false;
  int32_t *q = malloc((size_t)(m > 0 ? m : 1) * sizeof *q);
  if (!q) return false;
  for (int64_t i = 0; i < m; i++) {
    double real;
    int64_t j = nb == 1 ? 0 : i;
    if (bc) {
      real = ((const float *)bc->data)[j];
    } else {
      int64_t nz = 1, z = 0;
      if (bz && kl_type_numel(&bz->type, &nz)) z = ((const int32_t *)bz->data)[nz == nb ? j : 0];
      real = (double)(((const int32_t *)bq->data)[j] - z) *
             ((const float *)bs->data)[ns == 1 ? 0 : j];
    }
    real *= mul;
    double scale = (double)(float)(sx * sw[nw == 1 ? 0 : i]); /* as the kernel computes it */
    double r = scale > 0 ? rint(real / scale) : 0;
    if (!(fabs(r) <= 2147483647.0)) {
      free(q);
      return false;
    }
    q[i] = (int32_t)r;
  }
  int64_t dims[1] = {m};
  *out = kl_rw_add_const(g, g->values[b].name, KL_I32, 1, dims, q, e);
  return *out >= 0;
}

/* The node whose output QuantizeLinear node qi alone reads, when qi quantizes per tensor
 * to 8 bits with constant parameters; else -1. */
static int quantized_producer(const kl_graph *g, int qi) {
  const kl_node *q = &g->nodes[qi];
  if (q->n_in != 3 || q->in[2] < 0 || q->n_out != 1 || !const_scalar(g, q->in[1]) ||
      !const_scalar(g, q->in[2]) || g->values[q->in[1]].type.dtype != KL_F32 ||
      !is_q8(g->values[q->in[2]].type.dtype) || kl_node_attr(q, "precision") ||
      kl_attr_int(q, "saturate", 1) != 1)
    return -1;
  int p = kl_rw_producer(g, q->in[0]);
  return p >= 0 && g->nodes[p].n_out == 1 && kl_rw_sole_consumer(g, q->in[0]) == qi ? p : -1;
}

/* Node ci becomes op reading ins[0..count-1] and writing what QuantizeLinear qi wrote
 * (qi removed). */
static kiln_status become_quantized(kl_graph *g, int qi, int ci, kl_op op, const int *ins,
                                    int count, int *changed, kl_err *e) {
  int y = g->nodes[qi].out[0];
  kl_rw_set_op(g, ci, op);
  kiln_status st = KILN_OK;
  for (int k = 0; st == KILN_OK && k < count; k++) st = kl_rw_set_input(g, ci, k, ins[k], e);
  if (st != KILN_OK) return st;
  kl_rw_remove(g, qi);
  kl_rw_take_output(g, ci, 0, y);
  (*changed)++;
  return KILN_OK;
}

/* The MatMul ci that QuantizeLinear qi quantizes becomes QLinearMatMul when A is a
 * quantized activation and B constant 2-D weights [K, N] (per tensor or per column):
 *   Q(MatMul(DQ(Aq, sa, za), DQ(Bq, sb, zb)), sy, zy) -> QLinearMatMul(Aq, sa, za, Bq, sb,
 *   zb, sy, zy). QLinearMatMul has no bias: a MatMul and Add stay two nodes. */
static kiln_status fold_matmul(kl_graph *g, int qi, int ci, int bits, int *changed,
                               kl_err *e) {
  const kl_node *mm = &g->nodes[ci];
  int da = kl_rw_producer(g, mm->in[0]), db = kl_rw_producer(g, mm->in[1]);
  const kl_type *bt = &g->values[mm->in[1]].type, *at = &g->values[mm->in[0]].type;
  if (at->rank < 2 || bt->rank != 2 || !kl_dim_known(bt->dims[1]) || !activation_dq(g, da) ||
      !weights_dq(g, db, 2, bt->dims[1].size, 1) ||
      !weights_fit(kl_rw_const(g, g->nodes[db].in[0]), bits))
    return KILN_OK;
  const kl_node *q = &g->nodes[qi], *na = &g->nodes[da], *nb = &g->nodes[db];
  int ins[8] = {na->in[0], na->in[1], na->in[2], nb->in[0], nb->in[1], nb->in[2],
                q->in[1], q->in[2]};
  return become_quantized(g, qi, ci, KL_OP_QLinearMatMul, ins, 8, changed, e);
}

/* Weights [N, K] (Gemm's transB) as a new constant [K, N] of the same 8-bit dtype, or -1. */
static int transposed_weights(kl_graph *g, int w, kl_err *e) {
  const kl_value *v = kl_rw_const(g, w);
  int64_t n = v->type.dims[0].size, k = v->type.dims[1].size;
  uint8_t *t = malloc((size_t)(n * k > 0 ? n * k : 1));
  if (!t) {
    kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for %lld weights", (long long)(n * k));
    return -1;
  }
  const uint8_t *from = v->data;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < k; j++) t[j * n + i] = from[i * k + j];
  int64_t dims[2] = {k, n};
  return kl_rw_add_const(g, "qlinear_gemm_weights", v->type.dtype, 2, dims, t, e);
}

/* A new constant: the float32 scales of constant s times alpha, or -1. */
static int scaled_scales(kl_graph *g, int s, double alpha, kl_err *e) {
  const kl_value *v = kl_rw_const(g, s);
  int64_t n;
  kl_type_numel(&v->type, &n);
  float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof *f);
  if (!f) {
    kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for %lld scales", (long long)n);
    return -1;
  }
  for (int64_t i = 0; i < n; i++) f[i] = (float)(alpha * ((const float *)v->data)[i]);
  int64_t dims[KL_MAX_RANK];
  for (int k = 0; k < v->type.rank; k++) dims[k] = v->type.dims[k].size;
  return kl_rw_add_const(g, "qlinear_gemm_scales", KL_F32, v->type.rank, dims, f, e);
}

/* The matrix product under node p (a Relu, or not) that QuantizeLinear qi quantizes,
 * with its bias: a Gemm, or a MatMul read only by the Add of its bias. *ci is the
 * product, *b_in the bias (-1: none), *add and *relu the Add and Relu (-1: none). */
static bool gemm_pattern(const kl_graph *g, int p, int *ci, int *b_in, int *add, int *relu) {
  *ci = p, *b_in = *add = *relu = -1;
  if (g->nodes[p].op == KL_OP_Relu) {
    int v = g->nodes[p].in[0];
    *relu = p;
    *ci = kl_rw_producer(g, v);
    if (*ci < 0 || g->nodes[*ci].n_out != 1 || kl_rw_sole_consumer(g, v) != p) return false;
  }
  const kl_node *n = &g->nodes[*ci];
  if (n->op == KL_OP_Add) {
    *add = *ci;
    for (int side = 0; side < 2; side++) {
      int m = kl_rw_producer(g, n->in[side]);
      if (m >= 0 && g->nodes[m].op == KL_OP_MatMul && kl_rw_sole_consumer(g, n->in[side]) == *add) {
        *ci = m, *b_in = n->in[1 - side];
        return true;
      }
    }
    return false;
  }
  if (n->op == KL_OP_Gemm) {
    *b_in = n->n_in > 2 ? n->in[2] : -1;
    float alpha = kl_attr_float(n, "alpha", 1), beta = kl_attr_float(n, "beta", 1);
    return !kl_attr_int(n, "transA", 0) && alpha > 0 && isfinite(alpha) && isfinite(beta);
  }
  return n->op == KL_OP_MatMul && *relu >= 0; /* a MatMul alone is fold_matmul's */
}

/* A Gemm, or a MatMul and the Add of its bias, and a Relu after either, that
 * QuantizeLinear qi quantizes, becomes kiln's QLinearGemm when A is a quantized
 * activation and B constant 2-D 8-bit weights (per tensor or per column):
 *   Q(Relu?(Gemm(DQ(Aq, sa, za), DQ(Bq, sb, zb), C?)), sy, zy)
 *   Q(Relu?(Add(MatMul(DQ(Aq, sa, za), DQ(Bq, sb, zb)), C)), sy, zy)
 *     -> QLinearGemm(Aq, sa, za, Bq', sb, zb, sy, zy, C') activation=Relu?
 * Gemm with transA 0; transB 1 reads Bq [N, K], transposed once into a new constant Bq'
 * [K, N]; alpha (positive) scales sb into a new constant sb' = alpha * sb, beta the
 * bias. C' is beta * C at scale sa * sb'[n] (bias_of): DequantizeLinear of int32, as
 * onnxruntime writes a Gemm's bias, or float, [N], [1, N] or one value. Rounding as for
 * QLinearConv (alpha * sb rounded to float32 once more). */
static kiln_status fold_gemm(kl_graph *g, int qi, int p, int bits, int *changed, kl_err *e) {
  int ci, b_in, add, relu;
  if (!gemm_pattern(g, p, &ci, &b_in, &add, &relu)) return KILN_OK;
  const kl_node *mm = &g->nodes[ci];
  bool trans = mm->op == KL_OP_Gemm && kl_attr_int(mm, "transB", 0);
  double alpha = mm->op == KL_OP_Gemm ? kl_attr_float(mm, "alpha", 1) : 1;
  double beta = mm->op == KL_OP_Gemm ? kl_attr_float(mm, "beta", 1) : 1;
  int da = kl_rw_producer(g, mm->in[0]), db = kl_rw_producer(g, mm->in[1]);
  const kl_type *at = &g->values[mm->in[0]].type, *bt = &g->values[mm->in[1]].type;
  if (at->rank < 2 || (mm->op == KL_OP_Gemm && at->rank != 2) || bt->rank != 2 ||
      !kl_dim_known(bt->dims[!trans]) || !activation_dq(g, da))
    return KILN_OK;
  int64_t n = bt->dims[!trans].size, nsw;
  int out_rank = add >= 0 ? at->rank : 2; /* at and bt point into values, which may move */
  if (!weights_dq(g, db, 2, n, !trans) || !weights_fit(kl_rw_const(g, g->nodes[db].in[0]), bits))
    return KILN_OK;
  double sa;
  kl_rw_scalar(g, g->nodes[da].in[1], &sa);
  int sw = g->nodes[db].in[1];
  kl_type_numel(&g->values[sw].type, &nsw);
  if (alpha != 1 && (sw = scaled_scales(g, sw, alpha, e)) < 0)
    return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
  int bias = -1;
  if (!bias_of(g, b_in, sa, kl_rw_const(g, sw)->data, nsw, n, out_rank, beta, &bias, e))
    return KILN_OK;
  int wq = g->nodes[db].in[0];
  if (trans && (wq = transposed_weights(g, wq, e)) < 0)
    return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
  const kl_node *na = &g->nodes[da], *nb = &g->nodes[db], *q = &g->nodes[qi];
  int ins[9] = {na->in[0], na->in[1], na->in[2], wq, sw, nb->in[2], q->in[1], q->in[2], bias};
  if (relu >= 0) kl_rw_remove(g, relu);
  if (add >= 0) kl_rw_remove(g, add);
  kl_rw_drop_attrs(g, ci); /* Gemm's: the transposed weights hold transB */
  kiln_status st = become_quantized(g, qi, ci, KL_OP_KilnQLinearGemm, ins, bias >= 0 ? 9 : 8,
                                    changed, e);
  if (st == KILN_OK && relu >= 0) st = kl_node_set_string(g, ci, "activation", "Relu", e);
  return st;
}

/* Whether the constant zero point v is 0 everywhere. */
static bool zero_points_zero(const kl_graph *g, int v) {
  const kl_value *z = kl_rw_const(g, v);
  int64_t n;
  if (!z || !kl_type_numel(&z->type, &n)) return false;
  for (int64_t i = 0; i < n; i++)
    if (((const uint8_t *)z->data)[i]) return false;
  return true;
}

/* A new value of y's shape and dtype dt (a product's intermediate), or -1. */
static int like_value(kl_graph *g, int y, kl_dtype dt, kl_err *e) {
  int v = kl_graph_add_value(g, NULL, e);
  if (v < 0) return -1;
  g->values[v].type = g->values[y].type;
  g->values[v].type.dtype = dt;
  return v;
}

/* A matrix product whose result stays float32 (a classifier's last Gemm, which kiln
 * quantize leaves unquantized so that the logits keep their precision; any product no
 * QuantizeLinear folds above) of a quantized activation and constant 8-bit weights
 * with zero points 0, per tensor or per column, runs on the codes:
 *   Gemm(DQ(Aq, sa, za), DQ(Bq, sb, 0), C)  (transA 0; MatMul likewise, without C)
 *     -> Add(Mul(Cast(MatMulInteger(Aq, Bq', za), float), s), beta * C)
 * with Bq' [K, N] (Gemm's transB transposed once) and s [N] = alpha * sa * sb (one value
 * per tensor). The int32 sums are exact; the float32 QDQ graph rounds each partial sum.
 * MatMulInteger reads a quarter of the float32 weights' bytes: ShuffleNetV2's 1024 x
 * 1000 classifier 0.15 ms -> 0.01 ms on one AMX core (weights in cache). Weights that
 * do not fit the backend's exact width (bits) stay float32, as for the folds above. */
static kiln_status fold_float_product(kl_graph *g, int ci, int bits, int *changed,
                                      kl_err *e) {
  const kl_node *mm = &g->nodes[ci];
  bool gemm = mm->op == KL_OP_Gemm;
  if ((!gemm && mm->op != KL_OP_MatMul) || mm->n_in < 2 || mm->n_out != 1) return KILN_OK;
  bool trans = gemm && kl_attr_int(mm, "transB", 0);
  double alpha = gemm ? kl_attr_float(mm, "alpha", 1) : 1;
  double beta = gemm ? kl_attr_float(mm, "beta", 1) : 1;
  int da = kl_rw_producer(g, mm->in[0]), db = kl_rw_producer(g, mm->in[1]);
  const kl_type *at = &g->values[mm->in[0]].type, *bt = &g->values[mm->in[1]].type;
  if ((gemm && (kl_attr_int(mm, "transA", 0) || at->rank != 2)) || at->rank < 2 ||
      bt->rank != 2 || !kl_dim_known(bt->dims[!trans]) || !isfinite(alpha) ||
      !isfinite(beta) || g->values[mm->out[0]].type.dtype != KL_F32 || !activation_dq(g, da))
    return KILN_OK;
  int64_t n = bt->dims[!trans].size;
  if (!weights_dq(g, db, 2, n, !trans) || !zero_points_zero(g, g->nodes[db].in[2]) ||
      !weights_fit(kl_rw_const(g, g->nodes[db].in[0]), bits))
    return KILN_OK;
  double sa;
  kl_rw_scalar(g, g->nodes[da].in[1], &sa);
  int scale = scaled_scales(g, g->nodes[db].in[1], alpha * sa, e); /* alpha sa sb */
  if (scale < 0) return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
  int wq = g->nodes[db].in[0];
  if (trans && (wq = transposed_weights(g, wq, e)) < 0)
    return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
  int bias = gemm && g->nodes[ci].n_in > 2 ? g->nodes[ci].in[2] : -1;
  int y = g->nodes[ci].out[0], aq = g->nodes[da].in[0], za = g->nodes[da].in[2];
  char name[256];
  snprintf(name, sizeof name, "%s", g->nodes[ci].name);
  int acc = like_value(g, y, KL_I32, e), fv = acc < 0 ? -1 : like_value(g, y, KL_F32, e);
  if (fv < 0) return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
  int mi = kl_graph_add_node(g, KL_OP_MatMulInteger, name, 3, (int[]){aq, wq, za}, 1, &acc, e);
  int cast = mi < 0 ? -1 : kl_graph_add_node(g, KL_OP_Cast, name, 1, &acc, 1, &fv, e);
  if (cast < 0 || kl_node_set_int(g, cast, "to", KL_F32, e) != KILN_OK)
    return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
  kiln_status st;
  if (bias < 0) {
    st = kl_rw_become(g, ci, KL_OP_Mul, 2, (int[]){fv, scale}, e);
  } else {
    int scaled = like_value(g, y, KL_F32, e);
    if (scaled < 0 || kl_graph_add_node(g, KL_OP_Mul, name, 2, (int[]){fv, scale}, 1, &scaled,
                                        e) < 0)
      return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
    if (beta != 1) { /* beta * C: const_fold computes it once for a constant C */
      int bv = kl_rw_add_vector(g, "gemm_beta", KL_F32, 1, &beta, 1, e);
      int cb = bv < 0 ? -1 : kl_graph_add_value(g, NULL, e);
      if (cb < 0) return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
      g->values[cb].type = g->values[bias].type;
      if (kl_graph_add_node(g, KL_OP_Mul, name, 2, (int[]){bias, bv}, 1, &cb, e) < 0)
        return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
      bias = cb;
    }
    st = kl_rw_become(g, ci, KL_OP_Add, 2, (int[]){scaled, bias}, e);
  }
  if (st == KILN_OK) (*changed)++;
  return st;
}

/* Folds the Conv ci that QuantizeLinear node qi quantizes, when it is the pattern above. */
static kiln_status fold_conv(kl_graph *g, int qi, int ci, int bits, int *changed, kl_err *e) {
  const kl_node *q = &g->nodes[qi];
  const kl_node *conv = &g->nodes[ci];
  int dx = kl_rw_producer(g, conv->in[0]), dw = kl_rw_producer(g, conv->in[1]);
  const kl_type *wt = &g->values[conv->in[1]].type;
  if (!activation_dq(g, dx) || wt->rank < 3 || !kl_dim_known(wt->dims[0]) ||
      !weights_dq(g, dw, wt->rank, wt->dims[0].size, 0) ||
      !weights_fit(kl_rw_const(g, g->nodes[dw].in[0]), bits))
    return KILN_OK;
  const kl_node *nx = &g->nodes[dx], *nw = &g->nodes[dw];
  double sx;
  kl_rw_scalar(g, nx->in[1], &sx);
  const kl_value *sw = kl_rw_const(g, nw->in[1]);
  int64_t nsw;
  kl_type_numel(&sw->type, &nsw);
  int bias = -1;
  int b_in = conv->n_in > 2 ? conv->in[2] : -1;
  if (!bias_of(g, b_in, sx, sw->data, nsw, wt->dims[0].size, 1, 1, &bias, e)) return KILN_OK;
  /* g->nodes may move when bias_of added a constant: read the nodes again */
  q = &g->nodes[qi];
  conv = &g->nodes[ci];
  nx = &g->nodes[dx];
  nw = &g->nodes[dw];
  int ins[9] = {nx->in[0], nx->in[1], nx->in[2], nw->in[0], nw->in[1], nw->in[2],
                q->in[1], q->in[2], bias};
  return become_quantized(g, qi, ci, KL_OP_QLinearConv, ins, bias >= 0 ? 9 : 8, changed, e);
}

bool kl_rw_qbinary_fits(const kl_type *v, const kl_type *y, bool *full) {
  if (v->rank != y->rank || y->rank < 0) return false;
  int k = 0;
  while (k < y->rank && kl_dim_equal(v->dims[k], y->dims[k])) k++; /* a symbolic batch too */
  *full = k == y->rank;
  for (int d = k; d < y->rank; d++)
    if (!kl_dim_known(v->dims[d]) || v->dims[d].size != 1) return false;
  return true;
}

/* The Add or Mul bi that QuantizeLinear qi quantizes becomes kiln's QLinearAdd or
 * QLinearMul when both its operands are quantized activations of Y's 8-bit dtype, one
 * of Y's shape and the other too or one value per leading index (what the fast kernel
 * takes; a residual connection, SiLU's x * sigmoid(x), a squeeze-and-excitation
 * scale):
 *   Q(Add(DQ(Aq, sa, za), DQ(Bq, sb, zb)), sy, zy) -> QLinearAdd(Aq, sa, za, Bq, sb, zb,
 *   sy, zy), which computes what the three nodes compute (ref/qadd.c): no bit changes. */
static kiln_status fold_binary(kl_graph *g, int qi, int bi, int *changed, kl_err *e) {
  const kl_node *bin = &g->nodes[bi], *q = &g->nodes[qi];
  int da = kl_rw_producer(g, bin->in[0]), db = kl_rw_producer(g, bin->in[1]);
  if (!activation_dq(g, da) || !activation_dq(g, db)) return KILN_OK;
  const kl_node *na = &g->nodes[da], *nb = &g->nodes[db];
  kl_dtype yt = g->values[q->in[2]].type.dtype;
  const kl_type *y = &g->values[bin->out[0]].type;
  bool fa, fb;
  if (g->values[na->in[0]].type.dtype != yt || g->values[nb->in[0]].type.dtype != yt ||
      !kl_rw_qbinary_fits(&g->values[bin->in[0]].type, y, &fa) ||
      !kl_rw_qbinary_fits(&g->values[bin->in[1]].type, y, &fb) || !(fa || fb))
    return KILN_OK;
  int ins[8] = {na->in[0], na->in[1], na->in[2], nb->in[0], nb->in[1], nb->in[2],
                q->in[1], q->in[2]};
  return become_quantized(g, qi, bi,
                          bin->op == KL_OP_Add ? KL_OP_KilnQLinearAdd : KL_OP_KilnQLinearMul,
                          ins, 8, changed, e);
}

/* The 8-bit code (as a byte of dtype yt) that QuantizeLinear gives q, the float32
 * quotient x / scale already taken: NaN -> the zero point, else rint(q) + z saturated,
 * as the reference kernel (ref/quant.c). */
static uint8_t quantized_code(float q, double z, kl_dtype yt) {
  double lo = yt == KL_U8 ? 0 : -128, hi = yt == KL_U8 ? 255 : 127;
  double v = isnan(q) ? z : rint((double)q) + z;
  v = v < lo ? lo : v > hi ? hi : v;
  return yt == KL_U8 ? (uint8_t)v : (uint8_t)(int8_t)v;
}

/* The code of byte b of 8-bit dtype t as an integer. */
static int code_of(uint8_t b, kl_dtype t) { return t == KL_I8 ? (int8_t)b : b; }

/* The bounds of Relu or Clip node a: 0 and +inf for Relu, Clip's constant float32 min
 * and max inputs (an absent one infinite; the importer makes Clip-6's attributes
 * inputs); false for anything else or bounds out of order. */
static bool clamp_bounds(const kl_graph *g, const kl_node *a, float *lo, float *hi) {
  *lo = -INFINITY, *hi = INFINITY;
  if (a->op == KL_OP_Relu) return *lo = 0, a->n_in == 1;
  if (a->op != KL_OP_Clip || a->n_in < 1) return false;
  for (int k = 1; k < a->n_in && k < 3; k++) {
    if (a->in[k] < 0) continue;
    const kl_value *c = kl_rw_const(g, a->in[k]);
    if (!c || c->type.dtype != KL_F32 || !const_scalar(g, a->in[k])) return false;
    *(k == 1 ? lo : hi) = *(const float *)c->data;
  }
  return *lo <= *hi; /* NaN bounds too: false */
}

/* The producers whose QuantizeLinear fold_qdq folds, and so the ones a Relu or Clip
 * between them and it is lifted off (lift_clamp). */
static bool clamp_liftable(kl_op op) {
  return op == KL_OP_Conv || op == KL_OP_Gemm || op == KL_OP_MatMul || op == KL_OP_Add;
}

/* A Relu, or a Clip of constant bounds, ai between a Conv (Gemm, MatMul, bias Add) and
 * QuantizeLinear qi moves after the quantization, onto the codes: QuantizeLinear is
 * increasing, so
 *   Q(Clip(v, lo, hi)) = clamp(Q(v), Q(lo), Q(hi))   and   Q(Relu(v)) = max(Q(v), Q(0))
 * exactly (NaN aside). qi then reads v, which the folds take (a QLinearConv); the clamp
 * is a QLinearLookup of the codes, or nothing where the quantized range already holds
 * it (Q(lo) at or below the lowest code, Q(hi) at or above the highest: a Relu before
 * a uint8 QuantizeLinear of zero point 0, a ReLU6 whose 6 the scale puts at 255). */
static kiln_status lift_clamp(kl_graph *g, int qi, int ai, int *changed, kl_err *e) {
  const kl_node *a = &g->nodes[ai], *q = &g->nodes[qi];
  float lo, hi;
  if (!clamp_bounds(g, a, &lo, &hi) || g->values[a->in[0]].type.dtype != KL_F32) return KILN_OK;
  int v = a->in[0], c = kl_rw_producer(g, v);
  if (c < 0 || g->nodes[c].n_out != 1 || !clamp_liftable(g->nodes[c].op) ||
      kl_rw_sole_consumer(g, v) != ai)
    return KILN_OK;
  kl_dtype yt = g->values[q->in[2]].type.dtype;
  double sy, zy;
  kl_rw_scalar(g, q->in[1], &sy);
  kl_rw_scalar(g, q->in[2], &zy);
  if (!(sy > 0)) return KILN_OK;
  int cmin = yt == KL_U8 ? 0 : -128, cmax = yt == KL_U8 ? 255 : 127;
  int qlo = code_of(quantized_code(lo / (float)sy, zy, yt), yt);
  int qhi = code_of(quantized_code(hi / (float)sy, zy, yt), yt);
  int y = q->out[0];
  kiln_status st = kl_rw_set_input(g, qi, 0, v, e);
  if (st != KILN_OK) return st;
  (*changed)++;
  if (qlo <= cmin && qhi >= cmax) {
    kl_rw_remove(g, ai);
    return KILN_OK;
  }
  uint8_t *table = malloc(256);
  if (!table) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a lookup table");
  for (int k = 0; k < 256; k++) {
    int code = k + cmin; /* the table's index is a uint8 code, an int8 one plus 128 */
    code = code < qlo ? qlo : code > qhi ? qhi : code;
    table[k] = (uint8_t)code;
  }
  int64_t dims[1] = {256};
  int t = kl_rw_add_const(g, "qlinear_clamp_table", yt, 1, dims, table, e);
  int codes = t < 0 ? -1 : kl_graph_add_value(g, NULL, e);
  if (codes < 0) return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
  g->values[codes].type = g->values[y].type;
  kl_rw_take_output(g, qi, 0, codes);
  st = kl_rw_become(g, ai, KL_OP_KilnQLinearLookup, 2, (int[]){codes, t}, e);
  if (st == KILN_OK) kl_rw_take_output(g, ai, 0, y);
  return st;
}

/* The elementwise ops of one input whose result for each of the 256 codes of a
 * quantized input fold_lookup works out once. */
static bool lookup_op(kl_op op) {
  switch (op) {
  case KL_OP_Relu: case KL_OP_Sigmoid: case KL_OP_Tanh: case KL_OP_LeakyRelu: case KL_OP_Elu:
  case KL_OP_Selu: case KL_OP_Celu: case KL_OP_HardSigmoid: case KL_OP_HardSwish:
  case KL_OP_Softplus: case KL_OP_Softsign: case KL_OP_Gelu: case KL_OP_Erf: case KL_OP_Exp:
  case KL_OP_Abs: case KL_OP_Neg: case KL_OP_Mish: case KL_OP_ThresholdedRelu:
    return true;
  default: return false;
  }
}

/* The scale and zero point that DequantizeLinear dq reads its input with (sx, zx) and
 * those that QuantizeLinear q writes (sy, zy), constants that the callers' matches
 * checked. */
static void qdq_params(const kl_graph *g, const kl_node *dq, const kl_node *q, double *sx,
                       double *zx, double *sy, double *zy) {
  kl_rw_scalar(g, dq->in[1], sx);
  kl_rw_scalar(g, dq->in[2], zx);
  kl_rw_scalar(g, q->in[1], sy);
  kl_rw_scalar(g, q->in[2], zy);
}

/* The op ui between DequantizeLinear and QuantizeLinear qi becomes kiln's QLinearLookup
 * of a table of its 256 results:
 *   Q(Op(DQ(Xq, sx, zx)), sy, zy) -> QLinearLookup(Xq, T), T[k] = Q(Op(DQ(code k)))
 * with the op's reference kernel and the two conversions as the reference kernels
 * compute them (ref/quant.c): the table is what the three nodes give for each code. */
static kiln_status fold_lookup(kl_graph *g, int qi, int ui, int *changed, kl_err *e) {
  const kl_node *u = &g->nodes[ui], *q = &g->nodes[qi];
  float lo, hi; /* a Clip of constant bounds, as its kernel computes it (ref/elementwise.c) */
  bool clip = u->op == KL_OP_Clip && clamp_bounds(g, u, &lo, &hi);
  if (u->n_out != 1 || (!clip && (u->n_in != 1 || !lookup_op(u->op)))) return KILN_OK;
  int dx = kl_rw_producer(g, u->in[0]);
  if (!activation_dq(g, dx) || g->values[u->out[0]].type.dtype != KL_F32) return KILN_OK;
  const kl_node *nx = &g->nodes[dx];
  kl_dtype xt = g->values[nx->in[0]].type.dtype, yt = g->values[q->in[2]].type.dtype;
  double sx, zx, sy, zy;
  qdq_params(g, nx, q, &sx, &zx, &sy, &zy);
  float in[256], out[256];
  uint8_t table[256];
  for (int k = 0; k < 256; k++) in[k] = (float)((double)(k - (xt == KL_I8 ? 128 : 0)) - zx) * (float)sx;
  kl_tensor ti = {.dtype = KL_F32, .rank = 1, .dims = {256}, .data = in};
  kl_tensor to = {.dtype = KL_F32, .rank = 1, .dims = {256}, .data = out};
  kl_tensor *pi[1] = {&ti}, *po[1] = {&to};
  kl_err local = {0};
  kl_kernel_ctx kc = {u, 1, 1, (const kl_tensor **)pi, po, &local, 1, NULL, 0};
  if (clip) {
    for (int k = 0; k < 256; k++) out[k] = in[k] < lo ? lo : in[k] > hi ? hi : in[k];
  } else if (kl_op_get(u->op)->ref(&kc) != KILN_OK) {
    return KILN_OK; /* the op stays as it is */
  }
  for (int k = 0; k < 256; k++) table[k] = quantized_code(out[k] / (float)sy, zy, yt);
  int64_t dims[1] = {256};
  void *copy = malloc(256);
  if (!copy) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a lookup table");
  memcpy(copy, table, 256);
  int t = kl_rw_add_const(g, "qlinear_lookup_table", yt, 1, dims, copy, e);
  if (t < 0) return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
  u = &g->nodes[ui]; /* nodes may have moved */
  q = &g->nodes[qi];
  nx = &g->nodes[dx];
  int xq = nx->in[0], yv = q->out[0];
  /* the table holds what alpha, approximate, Clip's bounds and the like meant */
  kiln_status st = kl_rw_become(g, ui, KL_OP_KilnQLinearLookup, 2, (int[]){xq, t}, e);
  if (st != KILN_OK) return st;
  kl_rw_remove(g, qi);
  kl_rw_take_output(g, ui, 0, yv);
  (*changed)++;
  return KILN_OK;
}

/* The table of Q(DQ(code, s_in, z_in), s_out, z_out) for the 256 codes of dtype xt into
 * dtype yt, each step as the reference kernels compute it; a new constant, or -1. */
static int requantize_table(kl_graph *g, kl_dtype xt, double s_in, double z_in, kl_dtype yt,
                            double s_out, double z_out, kl_err *e) {
  uint8_t *table = malloc(256);
  if (!table) {
    kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a lookup table");
    return -1;
  }
  for (int k = 0; k < 256; k++) {
    float f = (float)((double)(k - (xt == KL_I8 ? 128 : 0)) - z_in) * (float)s_in;
    table[k] = quantized_code(f / (float)s_out, z_out, yt);
  }
  int64_t dims[1] = {256};
  return kl_rw_add_const(g, "qlinear_requantize_table", yt, 1, dims, table, e);
}

/* The Concat ci that QuantizeLinear qi quantizes concatenates the codes themselves when
 * every input is a quantized activation: an input quantized as Y is taken as it is,
 * another through a QLinearLookup that requantizes it (Q(DQ(x)) for each code):
 *   Q(Concat(DQ(A, sa, za), DQ(B, sy, zy)), sy, zy) -> Concat(Lookup(A, T), B)
 * exactly what the unfolded nodes compute (SqueezeNet's fire modules, Inception's). */
static kiln_status fold_concat(kl_graph *g, int qi, int ci, int *changed, kl_err *e) {
  const kl_node *c = &g->nodes[ci];
  if (c->n_in < 1 || c->n_in > 64) return KILN_OK;
  kl_dtype yt = g->values[g->nodes[qi].in[2]].type.dtype;
  int d[64];
  for (int k = 0; k < c->n_in; k++) {
    d[k] = kl_rw_producer(g, c->in[k]);
    if (!activation_dq(g, d[k]) || g->values[g->nodes[d[k]].in[0]].type.dtype != yt)
      return KILN_OK;
  }
  double sy, zy;
  kl_rw_scalar(g, g->nodes[qi].in[1], &sy);
  kl_rw_scalar(g, g->nodes[qi].in[2], &zy);
  int codes[64];
  for (int k = 0; k < g->nodes[ci].n_in; k++) {
    const kl_node *dq = &g->nodes[d[k]];
    int xq = dq->in[0];
    double sx, zx;
    kl_rw_scalar(g, dq->in[1], &sx);
    kl_rw_scalar(g, dq->in[2], &zx);
    codes[k] = xq;
    if ((float)sx == (float)sy && zx == zy) continue;
    int t = requantize_table(g, yt, sx, zx, yt, sy, zy, e);
    if (t < 0) return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
    int v = kl_graph_add_value(g, NULL, e);
    if (v < 0) return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
    g->values[v].type = g->values[xq].type;
    if (kl_graph_add_node(g, KL_OP_KilnQLinearLookup, "requantize", 2, (int[]){xq, t}, 1, &v,
                          e) < 0)
      return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
    codes[k] = v;
  }
  return become_quantized(g, qi, ci, KL_OP_Concat, codes, g->nodes[ci].n_in, changed, e);
}

/* Ops that only move or relabel elements, of any dtype: on the codes they give what
 * they give on the dequantized values. */
static bool moves_only(kl_op op) {
  return op == KL_OP_Flatten || op == KL_OP_Reshape || op == KL_OP_Squeeze ||
         op == KL_OP_Unsqueeze || op == KL_OP_Transpose || op == KL_OP_Slice;
}

/* The Flatten (Reshape, Squeeze, Unsqueeze, Transpose, Slice) mi between DequantizeLinear and
 * QuantizeLinear qi moves the codes themselves, requantized by a QLinearLookup where
 * the two quantize differently (the 256 results of Q(DQ(code)), exactly what the
 * unfolded nodes compute for each element):
 *   Q(Flatten(DQ(Xq, sx, zx)), sy, zy) -> Flatten(Xq) [-> QLinearLookup(., T)]
 * (a classifier's DQ -> Flatten -> Q, as quantize_static writes it, between a
 * QLinearGlobalAveragePool and a QLinearGemm: one scale, no lookup). */
static kiln_status fold_move(kl_graph *g, int qi, int mi, int *changed, kl_err *e) {
  const kl_node *mv = &g->nodes[mi], *q = &g->nodes[qi];
  int dx = kl_rw_producer(g, mv->in[0]);
  if (mv->n_out != 1 || !activation_dq(g, dx)) return KILN_OK;
  const kl_node *nx = &g->nodes[dx];
  kl_dtype xt = g->values[nx->in[0]].type.dtype, yt = g->values[q->in[2]].type.dtype;
  double sx, zx, sy, zy;
  qdq_params(g, nx, q, &sx, &zx, &sy, &zy);
  int t = requantize_table(g, xt, sx, zx, yt, sy, zy, e);
  if (t < 0) return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
  const uint8_t *table = kl_rw_const(g, t)->data;
  bool identity = xt == yt; /* index k is code k, or k - 128 of int8: byte k ^ 0x80 */
  for (int k = 0; identity && k < 256; k++)
    identity = table[k] == (uint8_t)(k ^ (xt == KL_I8 ? 0x80 : 0));
  int xq = g->nodes[dx].in[0], yv = g->nodes[qi].out[0], moved = g->nodes[mi].out[0];
  kiln_status st = kl_rw_set_input(g, mi, 0, xq, e);
  if (st != KILN_OK) return st;
  (*changed)++;
  if (identity) {
    kl_rw_remove(g, qi);
    kl_rw_take_output(g, mi, 0, yv);
    return KILN_OK;
  }
  g->values[moved].type.dtype = xt; /* the codes, moved */
  return kl_rw_become(g, qi, KL_OP_KilnQLinearLookup, 2, (int[]){moved, t}, e);
}

/* The MaxPool mi that QuantizeLinear qi quantizes with the parameters its input was
 * dequantized with (a positive scale) pools the codes themselves: dequantizing is
 * increasing, so the largest code is the largest value, which quantizes back to that
 * code, and an empty window's -inf to the lowest code, as the 8-bit MaxPool gives. */
static kiln_status fold_maxpool(kl_graph *g, int qi, int mi, int *changed, kl_err *e) {
  const kl_node *mp = &g->nodes[mi], *q = &g->nodes[qi];
  int dx = kl_rw_producer(g, mp->in[0]);
  if (mp->n_out != 1 || !activation_dq(g, dx)) return KILN_OK;
  const kl_node *nx = &g->nodes[dx];
  double sx, zx, sy, zy;
  qdq_params(g, nx, q, &sx, &zx, &sy, &zy);
  if (!(sx > 0) || (float)sx != (float)sy || zx != zy ||
      g->values[nx->in[0]].type.dtype != g->values[q->in[2]].type.dtype)
    return KILN_OK;
  int xq = nx->in[0], yv = q->out[0];
  kiln_status st = kl_rw_set_input(g, mi, 0, xq, e);
  if (st != KILN_OK) return st;
  kl_rw_remove(g, qi);
  kl_rw_take_output(g, mi, 0, yv);
  (*changed)++;
  return KILN_OK;
}

/* The GlobalAveragePool pi that QuantizeLinear qi quantizes (or a ReduceMean that is
 * one: kl_rw_global_pool_of), of a quantized activation of Y's 8-bit dtype, becomes
 * kiln's QLinearGlobalAveragePool (onnxruntime's com.microsoft op, ops.def), and an
 * AveragePool kiln's QLinearAveragePool (qop, with AveragePool's attributes):
 *   Q(GlobalAveragePool(DQ(Xq, sx, zx)), sy, zy) -> QLinearGlobalAveragePool(Xq, sx, zx,
 *   sy, zy)
 * It sums the codes exactly and rounds acc * (sx / (sy * S)) once, in float32, where the
 * QDQ graph rounds each dequantized value, their mean and its quotient by sy: the two
 * differ by one step where the mean lands within those roundings of a half step. */
static kiln_status fold_mean_pool(kl_graph *g, int qi, int pi, kl_op qop, int *changed,
                                  kl_err *e) {
  const kl_node *pool = &g->nodes[pi], *q = &g->nodes[qi];
  int dx = kl_rw_producer(g, pool->in[0]);
  if (!activation_dq(g, dx) || g->values[pool->in[0]].type.rank < 3) return KILN_OK;
  const kl_node *nx = &g->nodes[dx];
  if (g->values[nx->in[0]].type.dtype != g->values[q->in[2]].type.dtype) return KILN_OK;
  int ins[5] = {nx->in[0], nx->in[1], nx->in[2], q->in[1], q->in[2]};
  if (g->nodes[pi].op == KL_OP_ReduceMean) kl_rw_drop_attrs(g, pi); /* keepdims */
  return become_quantized(g, qi, pi, qop, ins, 5, changed, e);
}

/* The QLinearMul or QLinearAdd bi of a quantized x and a QLinearLookup of the same x
 * that nothing else reads (SiLU: x * sigmoid(x); HardSwish written out) becomes one
 * QLinearLookup of x: both operands are functions of x's code, so the table holds the
 * binary op's result for each code, computed as its kernels compute it (ref/qadd.c). */
static kiln_status fold_lookup_pair(kl_graph *g, int bi, int *changed, kl_err *e) {
  const kl_node *b = &g->nodes[bi];
  for (int side = 0; side < 2; side++) {
    int lv = b->in[side ? 0 : 3], xv = b->in[side ? 3 : 0];
    int li = kl_rw_producer(g, lv);
    if (li < 0 || g->nodes[li].op != KL_OP_KilnQLinearLookup || g->nodes[li].in[0] != xv ||
        kl_rw_sole_consumer(g, lv) != bi || !kl_rw_const(g, g->nodes[li].in[1]))
      continue;
    const uint8_t *t = kl_rw_const(g, g->nodes[li].in[1])->data;
    kl_dtype xt = g->values[xv].type.dtype, yt = g->values[b->out[0]].type.dtype;
    double s[3], z[3]; /* x's, the lookup's and Y's parameters */
    int ix = side ? 4 : 1, il = side ? 1 : 4;
    kl_rw_scalar(g, b->in[ix], &s[0]);
    kl_rw_scalar(g, b->in[ix + 1], &z[0]);
    kl_rw_scalar(g, b->in[il], &s[1]);
    kl_rw_scalar(g, b->in[il + 1], &z[1]);
    kl_rw_scalar(g, b->in[6], &s[2]);
    kl_rw_scalar(g, b->in[7], &z[2]);
    bool mul = b->op == KL_OP_KilnQLinearMul;
    uint8_t *table = malloc(256);
    if (!table) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a lookup table");
    for (int k = 0; k < 256; k++) {
      int code = k - (xt == KL_I8 ? 128 : 0);
      int lcode = g->values[lv].type.dtype == KL_I8 ? (int8_t)t[k] : t[k];
      float fx = (float)((double)code - z[0]) * (float)s[0];
      float fl = (float)((double)lcode - z[1]) * (float)s[1];
      table[k] = quantized_code((mul ? fx * fl : fx + fl) / (float)s[2], z[2], yt);
    }
    int64_t dims[1] = {256};
    int tv = kl_rw_add_const(g, "qlinear_lookup_table", yt, 1, dims, table, e);
    if (tv < 0) return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
    int yv = g->nodes[bi].out[0];
    kl_rw_remove(g, bi);
    kiln_status st = kl_rw_set_input(g, li, 1, tv, e);
    if (st != KILN_OK) return st;
    kl_rw_take_output(g, li, 0, yv);
    (*changed)++;
    return KILN_OK;
  }
  return KILN_OK;
}

/* A QuantizeLinear of constant float weights that a DequantizeLinear reads (a model
 * that holds its weights in float32 and quantizes them in the graph: DQ(Q(W))) runs
 * now, so that the DequantizeLinear reads constant codes as the folds want. */
static kiln_status quantize_weights(kl_graph *g, int *changed, kl_err *e) {
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    int readers[1];
    if (n->op != KL_OP_QuantizeLinear || n->n_out != 1 || !kl_rw_const(g, n->in[0]) ||
        g->values[n->in[0]].type.dtype != KL_F32 || !kl_node_inputs_known(g, n) ||
        kl_rw_consumers(g, n->out[0], readers, 1) < 1 ||
        g->nodes[readers[0]].op != KL_OP_DequantizeLinear)
      continue;
    bool folded = false;
    kiln_status st = kl_node_fold(g, i, INT64_MAX, true, &folded, e);
    if (st != KILN_OK) return st;
    *changed += folded;
  }
  return KILN_OK;
}

/* ---- QLinearConv and QLinearMatMul whose weights the backend cannot take exactly ----
 *
 * A QLinearConv or QLinearMatMul read from a file (onnxruntime's QOperator format, the
 * ONNX model zoo's int8 models) with weights the backend's int8 kernels cannot
 * multiply exactly (past 7 bits on AVX2 without VNNI: onnxruntime's quantizer writes
 * 8-bit weights by default; uint8 weights; weights' zero points not 0) ran on the
 * reference kernel: onnxruntime's MobileNetV2 in QOperator form took 3.7 s at 1 thread
 * on a Zen 3. It becomes what the same model in QDQ form runs here (fold_conv leaves
 * such weights unfolded):
 *
 *   QLinearConv(x, sx, zx, w, sw, zw, sy, zy, B)
 *     -> QuantizeLinear(Conv(DequantizeLinear(x, sx, zx), W, B'), sy, zy)
 *
 * with W = (w - zw) sw (float32, per output channel or per tensor, as
 * DequantizeLinear computes it) and B' = B sx sw; QLinearMatMul likewise with MatMul and
 * per-column weights. The float32 sums round where QLinearConv's int32 ones are exact:
 * an output differs by one step where the sum lies within its rounding error of a half
 * step (docs/precision.md). */

/* Scale s and zero point z (constants of one value or `count` values) at index i. */
static void qparam_at(const kl_value *s, const kl_value *z, int64_t count, int64_t i,
                      float *scale, int32_t *zero) {
  int64_t ns = 1, nz = 1;
  kl_type_numel(&s->type, &ns);
  if (z) kl_type_numel(&z->type, &nz);
  *scale = ((const float *)s->data)[ns == count ? i : 0];
  *zero = !z ? 0
          : z->type.dtype == KL_U8 ? ((const uint8_t *)z->data)[nz == count ? i : 0]
                                   : ((const int8_t *)z->data)[nz == count ? i : 0];
}

static kiln_status unfold_wide(kl_graph *g, int ni, int bits, int *changed, kl_err *e) {
  const kl_node *n = &g->nodes[ni];
  bool conv = n->op == KL_OP_QLinearConv;
  if ((!conv && n->op != KL_OP_QLinearMatMul) || n->n_in < 8 || n->n_out != 1) return KILN_OK;
  for (int k = 0; k < 8; k++)
    if (n->in[k] < 0) return KILN_OK;
  const kl_value *w = kl_rw_const(g, n->in[3]), *sw = kl_rw_const(g, n->in[4]),
                 *zw = kl_rw_const(g, n->in[5]);
  int b = conv && n->n_in > 8 ? n->in[8] : -1;
  const kl_value *bc = b >= 0 ? kl_rw_const(g, b) : NULL;
  double sx = 0;
  int64_t nw, ch, ns, nz;
  if (!w || !sw || !zw || !is_q8(w->type.dtype) || zw->type.dtype != w->type.dtype ||
      sw->type.dtype != KL_F32 || w->type.rank != (conv ? w->type.rank : 2) ||
      w->type.rank < 2 || !kl_type_numel(&w->type, &nw) || !kl_type_numel(&sw->type, &ns) ||
      !kl_type_numel(&zw->type, &nz) || !const_scalar(g, n->in[1]) ||
      !const_scalar(g, n->in[2]) || (b >= 0 && (!bc || bc->type.dtype != KL_I32)) ||
      g->values[n->in[1]].type.dtype != KL_F32 || !kl_rw_scalar(g, n->in[1], &sx))
    return KILN_OK;
  ch = w->type.dims[conv ? 0 : 1].size;
  if ((ns != 1 && ns != ch) || (nz != 1 && nz != ch) || ch <= 0 ||
      (bc && (!kl_type_numel(&bc->type, &nz) || nz != ch)))
    return KILN_OK;
  if (w->type.dtype == KL_I8 && zero_points_zero(g, n->in[5]) && weights_fit(w, bits))
    return KILN_OK; /* the int8 kernels take it */
  float *wf = malloc(sizeof(float) * (size_t)nw), *bf = bc ? malloc(sizeof(float) * (size_t)ch) : NULL;
  if (!wf || (bc && !bf)) {
    free(wf), free(bf);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for float32 weights");
  }
  int64_t per = nw / ch;
  for (int64_t i = 0; i < nw; i++) {
    int64_t c = conv ? i / per : i % ch;
    float s;
    int32_t z;
    qparam_at(sw, zw, ch, c, &s, &z);
    int32_t v = w->type.dtype == KL_U8 ? ((const uint8_t *)w->data)[i] : ((const int8_t *)w->data)[i];
    wf[i] = (float)(v - z) * s;
  }
  for (int64_t c = 0; bc && c < ch; c++) {
    float s;
    int32_t z;
    qparam_at(sw, zw, ch, c, &s, &z);
    bf[c] = (float)((double)((const int32_t *)bc->data)[c] * (double)(float)(sx * s));
  }
  int64_t wdims[KL_MAX_RANK];
  for (int k = 0; k < w->type.rank; k++) wdims[k] = w->type.dims[k].size;
  char name[256];
  snprintf(name, sizeof name, "%s", n->name ? n->name : "");
  int cw = kl_rw_add_const(g, g->values[n->in[3]].name, KL_F32, w->type.rank, wdims, wf, e);
  int cb = !bf ? -1 : kl_rw_add_const(g, g->values[b].name, KL_F32, 1, &ch, bf, e);
  if (cw < 0 || (bc && cb < 0)) return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
  n = &g->nodes[ni];
  int x = n->in[0], zx = n->in[2], sy = n->in[6], zy = n->in[7], y = n->out[0];
  int xf = like_value(g, x, KL_F32, e), yf = xf < 0 ? -1 : like_value(g, y, KL_F32, e);
  int tmp = yf < 0 ? -1 : kl_graph_add_value(g, NULL, e);
  if (tmp < 0) return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
  g->values[tmp].type = g->values[y].type;
  if (kl_graph_add_node(g, KL_OP_DequantizeLinear, name, 3, (int[]){x, g->nodes[ni].in[1], zx},
                        1, &xf, e) < 0)
    return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
  int q = kl_graph_add_node(g, KL_OP_QuantizeLinear, name, 3, (int[]){yf, sy, zy}, 1, &tmp, e);
  if (q < 0) return e->code ? e->code : KILN_ERR_OUT_OF_MEMORY;
  kl_rw_set_op(g, ni, conv ? KL_OP_Conv : KL_OP_MatMul); /* Conv keeps QLinearConv's attributes */
  kiln_status st = KILN_OK;
  for (int k = g->nodes[ni].n_in - 1; st == KILN_OK && k >= 3; k--)
    st = kl_rw_set_input(g, ni, k, KL_ABSENT, e);
  if (st == KILN_OK) st = kl_rw_set_input(g, ni, 2, conv ? cb : KL_ABSENT, e);
  if (st == KILN_OK) st = kl_rw_set_input(g, ni, 1, cw, e);
  if (st == KILN_OK) st = kl_rw_set_input(g, ni, 0, xf, e);
  if (st != KILN_OK) return st;
  kl_rw_take_output(g, ni, 0, yf);
  kl_rw_take_output(g, q, 0, y);
  (*changed)++;
  return KILN_OK;
}

kiln_status kl_pass_fold_qdq(kl_graph *g, const kl_pass_config *cfg, int *changed,
                             kl_err *e) {
  int bits = cfg->int8_weight_bits;
  kiln_status st = quantize_weights(g, changed, e);
  for (int i = 0, n = g->n_nodes; st == KILN_OK && i < n; i++)
    st = unfold_wide(g, i, bits, changed, e);
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++) {
    int p = g->nodes[i].op == KL_OP_QuantizeLinear ? quantized_producer(g, i) : -1;
    if (p < 0) continue;
    kl_op op = g->nodes[p].op;
    int before = *changed;
    if (op == KL_OP_Gemm || op == KL_OP_Add || op == KL_OP_Relu)
      st = fold_gemm(g, i, p, bits, changed, e); /* else an Add or Relu of its own */
    if (st != KILN_OK || *changed != before) continue;
    if (op == KL_OP_Relu || op == KL_OP_Clip) { /* the clamp onto the codes, then the fold */
      st = lift_clamp(g, i, p, changed, e);
      if (st != KILN_OK) continue;
      if (*changed != before) { /* else a Relu or Clip of a DequantizeLinear: a lookup */
        if ((p = quantized_producer(g, i)) < 0) continue;
        op = g->nodes[p].op;
        before = *changed;
        if (op == KL_OP_Gemm || op == KL_OP_Add) st = fold_gemm(g, i, p, bits, changed, e);
        if (st != KILN_OK || *changed != before) continue;
      }
    }
    if (op == KL_OP_Conv)
      st = fold_conv(g, i, p, bits, changed, e);
    else if (op == KL_OP_MatMul)
      st = fold_matmul(g, i, p, bits, changed, e);
    else if (op == KL_OP_Add || op == KL_OP_Mul)
      st = fold_binary(g, i, p, changed, e);
    else if (op == KL_OP_Concat)
      st = fold_concat(g, i, p, changed, e);
    else if (op == KL_OP_MaxPool)
      st = fold_maxpool(g, i, p, changed, e);
    else if (moves_only(op))
      st = fold_move(g, i, p, changed, e);
    else if (op == KL_OP_GlobalAveragePool ||
             kl_rw_global_pool_of(g, &g->nodes[p]) == KL_OP_GlobalAveragePool)
      st = fold_mean_pool(g, i, p, KL_OP_KilnQLinearGlobalAveragePool, changed, e);
    else if (op == KL_OP_AveragePool)
      st = fold_mean_pool(g, i, p, KL_OP_KilnQLinearAveragePool, changed, e);
    else
      st = fold_lookup(g, i, p, changed, e);
  }
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++) /* after the lookups exist */
    if (g->nodes[i].op == KL_OP_KilnQLinearMul || g->nodes[i].op == KL_OP_KilnQLinearAdd)
      st = fold_lookup_pair(g, i, changed, e);
  /* the products no QuantizeLinear took; nodes added by it are past n (not revisited) */
  for (int i = 0, n = g->n_nodes; st == KILN_OK && i < n; i++)
    st = fold_float_product(g, i, bits, changed, e);
  if (st == KILN_OK) st = kl_rw_finish(g, *changed, e);
  return st;
}
