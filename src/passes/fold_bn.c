/* Folding per-channel affine ops into the weights of the node before them.
 *
 * A BatchNormalization in inference is y = x * s[c] + t[c] with s = scale/sqrt(var+eps)
 * and t = B - mean * s; an Add, Sub, Mul or Div by a constant that varies only along
 * the channel axis is the same form. When x is the output of a Conv, ConvTranspose,
 * Gemm or MatMul with constant weights and nothing else reads x, the weights of each
 * output channel are multiplied by s[c] and its bias becomes b[c] * s[c] + t[c]:
 *
 *   Conv(X, W, b) -> BatchNormalization(scale, B, mean, var)
 *     becomes  Conv(X, W', b')                      (fold_bn)
 *   Gemm(A, B, C) -> Mul(const [N])   becomes  Gemm(A, B', C')  (fold_scale_bias)
 *
 * The channel axis is 1 for Conv, ConvTranspose and Gemm (and for BatchNormalization),
 * the last axis for MatMul (so MatMul+BN folds only when the output is 2-D). A MatMul
 * that gains a bias becomes a Gemm (2-D) or a kiln FusedMatMul with a Bias input.
 *
 * The node before may also be a kiln.FusedConv without a Sum whose activation is a
 * Relu, a Clip or a LeakyRelu, where the affine passes through it exactly:
 * Clip(z, lo, hi) * s + t is Clip(z * s + t, lo * s + t, hi * s + t) for s > 0 (the bounds
 * swapped for s < 0), so the weights and bias are scaled as above and the bounds become
 * those; it folds when the new bounds are the same for every channel (a scalar s and t,
 * or a Relu times a per-channel s of one sign, no t). LeakyRelu takes a positive s only.
 * HGNetV2's learnable affine blocks (Conv, ReLU, then Mul and Add of a scalar) fold so:
 *
 *   kiln.FusedConv(X, W, b) activation=Relu -> Mul(a) -> Add(c)
 *     becomes  kiln.FusedConv(X, a W, a b + c) activation=Clip [c, inf]   (a > 0)
 */
#include "ir/fused.h"
#include "passes/rewrite.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Where the weighted node's output channels lie. */
typedef struct channels {
  int axis, rank;
  int64_t count;
  int w_slot; /* input holding the weights */
  kl_op op;   /* the node's op, or the op a fused one extends */
  /* a fused node's activation: ACT_NONE, or a Clip [lo, hi] (Relu: [0, inf]) or a
   * LeakyRelu the affine passes through (see above) */
  enum { ACT_NONE, ACT_CLIP, ACT_LEAKY } act;
  float lo, hi;
} channels;

static const kl_value *float_const(const kl_graph *g, int v) {
  const kl_value *c = kl_rw_const(g, v);
  return c && kl_dtype_is_float(c->type.dtype) ? c : NULL;
}

/* A kiln.FusedConv's activation as ch->act (and its bounds); false for one the affine
 * cannot pass through, and for a Sum (added before the activation, not scaled). */
static bool fused_activation(const kl_node *n, channels *ch) {
  if (n->n_in > KL_FUSED_SUM && n->in[KL_FUSED_SUM] >= 0) return false;
  const char *name = kl_attr_string(n, "activation", NULL);
  const float *p = NULL;
  int n_p = kl_attr_floats(n, "activation_params", &p);
  ch->act = ACT_NONE;
  if (!name) return true;
  if (strcmp(name, "Relu") == 0) {
    ch->act = ACT_CLIP, ch->lo = 0, ch->hi = INFINITY;
  } else if (strcmp(name, "Clip") == 0 && n_p >= 2) {
    ch->act = ACT_CLIP, ch->lo = isnan(p[0]) ? -INFINITY : p[0];
    ch->hi = isnan(p[1]) ? INFINITY : p[1];
  } else if (strcmp(name, "LeakyRelu") == 0) {
    ch->act = ACT_LEAKY;
  } else {
    return false;
  }
  return true;
}

static bool weighted_channels(const kl_graph *g, int p, channels *ch) {
  const kl_node *n = &g->nodes[p];
  const kl_value *w = n->n_in > 1 ? float_const(g, n->in[1]) : NULL;
  if (!w || n->n_out != 1) return false;
  const kl_type *y = &g->values[n->out[0]].type;
  if (y->rank < 1 || y->dtype != w->type.dtype) return false;
  ch->w_slot = 1;
  ch->rank = y->rank;
  ch->axis = 1;
  ch->op = n->op;
  ch->act = ACT_NONE;
  ch->lo = -INFINITY, ch->hi = INFINITY;
  if (n->op == KL_OP_KilnFusedConv) {
    if (!fused_activation(n, ch)) return false;
    ch->op = KL_OP_Conv;
  }
  switch (ch->op) {
  case KL_OP_Conv:
    ch->count = w->type.dims[0].size;
    break;
  case KL_OP_ConvTranspose: {
    int64_t group = kl_attr_int(n, "group", 1);
    bool ok = w->type.rank >= 3 && group >= 1 && group <= w->type.dims[0].size &&
              w->type.dims[1].size < (INT64_C(1) << 31) / group;
    ch->count = ok ? w->type.dims[1].size * group : -1;
    break;
  }
  case KL_OP_Gemm:
    ch->count = w->type.dims[kl_attr_int(n, "transB", 0) ? 0 : 1].size;
    break;
  case KL_OP_MatMul:
    if (w->type.rank != 2) return false;
    ch->count = w->type.dims[1].size;
    ch->axis = y->rank - 1;
    break;
  default: return false;
  }
  bool bias_ok = n->op == KL_OP_MatMul || n->n_in < 3 || n->in[2] < 0 ||
                 kl_rw_const(g, n->in[2]);
  return bias_ok && ch->count > 0 && ch->count < (INT64_C(1) << 31) && ch->axis < y->rank;
}

/* Channel of weight element i. */
static int64_t weight_channel(const kl_node *n, kl_op op, const kl_value *w, int64_t i) {
  const kl_type *t = &w->type;
  int64_t inner = 1;
  for (int d = 2; d < t->rank; d++) inner *= t->dims[d].size;
  switch (op) {
  case KL_OP_Conv: return i / (t->dims[1].size * inner);
  case KL_OP_ConvTranspose: {
    int64_t per_group_out = t->dims[1].size, group = kl_attr_int(n, "group", 1);
    int64_t cin = i / (per_group_out * inner), j = i / inner % per_group_out;
    return cin / (t->dims[0].size / group) * per_group_out + j;
  }
  case KL_OP_Gemm:
    return kl_attr_int(n, "transB", 0) ? i / t->dims[1].size : i % t->dims[1].size;
  default: return i % t->dims[1].size; /* MatMul: columns */
  }
}

static kiln_status scale_weights(kl_graph *g, int p, const channels *ch, const double *s,
                                 kl_err *e) {
  bool unit = true;
  for (int64_t c = 0; c < ch->count; c++) unit &= s[c] == 1.0;
  if (unit) return KILN_OK;
  const kl_value *w = &g->values[g->nodes[p].in[ch->w_slot]];
  int64_t numel;
  if (!kl_type_numel(&w->type, &numel)) return kl_fail(e, KILN_ERR_INTERNAL, "weights");
  void *data = malloc(w->nbytes ? w->nbytes : 1);
  if (!data) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory folding weights");
  for (int64_t i = 0; i < numel; i++) {
    double v = kl_load_f64(w->data, w->type.dtype, (size_t)i);
    kl_store_f64(data, w->type.dtype, (size_t)i,
                 v * s[weight_channel(&g->nodes[p], ch->op, w, i)]);
  }
  int64_t dims[KL_MAX_RANK];
  for (int d = 0; d < w->type.rank; d++) dims[d] = w->type.dims[d].size;
  char hint[256];
  snprintf(hint, sizeof hint, "%s_folded", w->name);
  int id = kl_rw_add_const(g, hint, w->type.dtype, w->type.rank, dims, data, e);
  if (id < 0) return e->code;
  return kl_rw_set_input(g, p, ch->w_slot, id, e);
}

/* The node's current bias per channel (0 when it has none); false when its bias does
 * not vary along the channel axis only. Conv's B is 1-D; Gemm's C broadcasts to
 * [M, N] and is read times beta. */
static bool current_bias(const kl_graph *g, int p, const channels *ch, double *b) {
  const kl_node *n = &g->nodes[p];
  if (n->op == KL_OP_MatMul || n->n_in <= 2 || n->in[2] < 0) {
    for (int64_t c = 0; c < ch->count; c++) b[c] = 0;
    return true;
  }
  if (n->op != KL_OP_Gemm) {
    const kl_value *v = float_const(g, n->in[2]);
    if (!v || v->type.rank != 1 || v->type.dims[0].size != ch->count) return false;
    for (int64_t c = 0; c < ch->count; c++) b[c] = kl_load_f64(v->data, v->type.dtype, (size_t)c);
    return true;
  }
  if (!kl_rw_per_axis(g, n->in[2], ch->rank, ch->axis, ch->count, b)) return false;
  double beta = kl_attr_float(n, "beta", 1.0f);
  for (int64_t c = 0; c < ch->count; c++) b[c] *= beta;
  return true;
}

/* New bias b * s + t, attached where the op keeps it. */
static kiln_status set_bias(kl_graph *g, int p, const channels *ch, double *b,
                            const double *s, const double *t, kl_err *e) {
  bool zero = true;
  for (int64_t c = 0; c < ch->count; c++) {
    b[c] = b[c] * s[c] + t[c];
    zero &= b[c] == 0.0;
  }
  kl_node *n = &g->nodes[p];
  bool has_bias = n->op != KL_OP_MatMul && n->n_in > 2 && n->in[2] >= 0;
  if (zero && !has_bias) return KILN_OK;
  kl_dtype dt = g->values[n->in[ch->w_slot]].type.dtype;
  char hint[256];
  snprintf(hint, sizeof hint, "%s_bias", g->values[n->out[0]].name);
  int id = kl_rw_add_vector(g, hint, dt, 1, b, ch->count, e);
  if (id < 0) return e->code;
  if (n->op == KL_OP_MatMul) {
    const kl_type *a = &g->values[n->in[0]].type;
    bool two_d = a->rank == 2 && ch->rank == 2;
    kl_rw_set_op(g, p, two_d ? KL_OP_Gemm : KL_OP_KilnFusedMatMul);
    return kl_rw_set_input(g, p, two_d ? 2 : KL_FUSED_BIAS, id, e);
  }
  if (n->op == KL_OP_Gemm) {
    kiln_status st = kl_node_set_float(g, p, "beta", 1.0f, e);
    if (st != KILN_OK) return st;
  }
  return kl_rw_set_input(g, p, 2, id, e);
}

/* Whether act(z) * s + t is act'(z * s + t) over every channel of ch (the header's
 * rule); act' is a Clip [*lo, *hi] where ch's activation is one. */
static bool through_activation(const channels *ch, const double *s, const double *t,
                               float *lo, float *hi) {
  if (ch->act == ACT_NONE) return true;
  for (int64_t c = 0; c < ch->count; c++) {
    if (!(s[c] > 0 || (s[c] < 0 && ch->act == ACT_CLIP)) || !isfinite(s[c]) || !isfinite(t[c]) ||
        (ch->act == ACT_LEAKY && t[c] != 0))
      return false;
    if (ch->act == ACT_LEAKY) continue;
    double a = ch->lo * s[c] + t[c], b = ch->hi * s[c] + t[c]; /* 0 * s is 0; inf * s inf */
    if (ch->lo == 0) a = t[c];
    if (ch->hi == 0) b = t[c];
    float l = (float)(s[c] > 0 ? a : b), h = (float)(s[c] > 0 ? b : a);
    if (c > 0 && (l != *lo || h != *hi)) return false;
    *lo = l, *hi = h;
  }
  return true;
}

/* y = x * s + t per channel, y the output of node `affine`, x of producer p: folds it;
 * node `taker` (p, or the Mul the scale was moved across) then writes y. */
static kiln_status fold(kl_graph *g, int p, const channels *ch, const double *s,
                        const double *t, int affine, int taker, int *changed, kl_err *e) {
  float lo = ch->lo, hi = ch->hi;
  if (!through_activation(ch, s, t, &lo, &hi)) return KILN_OK;
  double *b = malloc(sizeof(double) * (size_t)ch->count);
  if (!b) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory folding weights");
  kiln_status st = KILN_OK;
  if (current_bias(g, p, ch, b)) {
    st = scale_weights(g, p, ch, s, e);
    if (st == KILN_OK) st = set_bias(g, p, ch, b, s, t, e);
    if (st == KILN_OK && ch->act == ACT_CLIP && (lo != ch->lo || hi != ch->hi)) {
      st = kl_node_set_string(g, p, "activation", "Clip", e);
      if (st == KILN_OK)
        st = kl_node_set_floats(g, p, "activation_params", (const float[]){lo, hi}, 2, e);
    }
    if (st == KILN_OK) {
      int y = g->nodes[affine].out[0];
      kl_rw_remove(g, affine);
      kl_rw_take_output(g, taker, 0, y);
      (*changed)++;
    }
  }
  free(b);
  return st;
}

/* s and t of a BatchNormalization with constant parameters over `ch`'s channels. */
static bool bn_affine(const kl_graph *g, const kl_node *bn, const channels *ch, double *s,
                      double *t) {
  return ch->axis == 1 && kl_rw_bn_affine(g, bn, ch->count, s, t);
}

/* s and t of an Add/Sub/Mul/Div of x by a constant varying along the channel axis. */
static bool binary_affine(const kl_graph *g, const kl_node *n, int x, const channels *ch,
                          double *s, double *t) {
  int c = kl_rw_other_input(n, x);
  if (c < 0 || c == x || !kl_rw_per_axis(g, c, ch->rank, ch->axis, ch->count, t)) return false;
  if (g->values[c].type.dtype != g->values[x].type.dtype) return false;
  bool x_first = n->in[0] == x;
  for (int64_t k = 0; k < ch->count; k++) {
    double v = t[k];
    s[k] = 1;
    t[k] = 0;
    switch (n->op) {
    case KL_OP_Add: t[k] = v; break;
    case KL_OP_Sub: if (!x_first) return false; t[k] = -v; break;
    case KL_OP_Mul: s[k] = v; break;
    case KL_OP_Div: if (!x_first || v == 0) return false; s[k] = 1 / v; break;
    default: return false;
    }
  }
  return true;
}

/* A constant scale after a Mul of two tensors, one of them made by a weighted node
 * read by that Mul alone and of the product's shape, moves into that node's weights:
 *   Mul(Mul(Conv(X, W, B), S), c)  becomes  Mul(Conv(X, cW, cB), S)
 * (a product commutes); and two single-value scales in a row become one:
 *   Mul(Mul(X, a), b)  becomes  Mul(X, a * b)
 * (NFNet's squeeze-and-excitation output times its two scalar gains). Node i is the
 * outer Mul (or Div by the constant). */
/* One float value (numel 1) of a constant, or false. */
static bool one_value(const kl_graph *g, int v, const kl_type *of, double *out) {
  const kl_value *c = float_const(g, v);
  int64_t numel;
  if (!c || !c->data || !kl_type_numel(&c->type, &numel) || numel != 1 ||
      c->type.rank > of->rank || c->type.dtype != of->dtype)
    return false;
  *out = kl_load_f64(c->data, c->type.dtype, 0);
  return true;
}

/* Mul(Mul(X, a), b) or Div(Mul(X, a), b), a and b single constant values: one Mul of X
 * by a * b (a / b). Node i is the outer one, `inner` the Mul, x its output. */
static kiln_status merge_scalars(kl_graph *g, int i, int inner, int x, int *changed,
                                 kl_err *e) {
  const kl_node *n = &g->nodes[i];
  int bv = kl_rw_other_input(n, x);
  double a, b;
  if (!one_value(g, bv, &g->values[x].type, &b) || (n->op == KL_OP_Div && n->in[1] != bv))
    return KILN_OK;
  for (int m = 0; m < 2; m++) {
    int av = g->nodes[inner].in[m];
    if (!one_value(g, av, &g->values[x].type, &a)) continue;
    double v = n->op == KL_OP_Div ? a / b : a * b;
    const kl_type *t = &g->values[av].type;
    int64_t dims[KL_MAX_RANK];
    for (int d = 0; d < t->rank; d++) dims[d] = 1;
    void *data = malloc(kl_dtype_size(t->dtype));
    if (!data) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory folding weights");
    kl_store_f64(data, t->dtype, 0, v);
    int id = kl_rw_add_const(g, "scale", t->dtype, t->rank, dims, data, e);
    if (id < 0) return e->code;
    kiln_status st = kl_rw_set_input(g, inner, m, id, e);
    if (st != KILN_OK) return st;
    int y = g->nodes[i].out[0];
    kl_rw_remove(g, i);
    kl_rw_take_output(g, inner, 0, y);
    (*changed)++;
    return KILN_OK;
  }
  return KILN_OK;
}

static kiln_status across_mul(kl_graph *g, int i, int *changed, kl_err *e) {
  const kl_node *n = &g->nodes[i];
  for (int k = 0; k < 2; k++) {
    int x = n->in[k], inner = kl_rw_producer(g, x);
    if (inner < 0 || g->nodes[inner].op != KL_OP_Mul || g->nodes[inner].n_in != 2 ||
        kl_rw_sole_consumer(g, x) != i || kl_rw_other_input(n, x) < 0 ||
        !kl_rw_const(g, kl_rw_other_input(n, x)))
      continue;
    int before = *changed;
    kiln_status st = merge_scalars(g, i, inner, x, changed, e);
    if (st != KILN_OK || *changed != before) return st;
    for (int m = 0; m < 2; m++) {
      int a = g->nodes[inner].in[m], p = kl_rw_producer(g, a);
      channels ch;
      if (p < 0 || a == g->nodes[inner].in[1 - m] || kl_rw_sole_consumer(g, a) != inner ||
          !kl_rw_same_shape(&g->values[a].type, &g->values[x].type) ||
          !weighted_channels(g, p, &ch))
        continue;
      double *s = malloc(sizeof(double) * (size_t)ch.count * 2);
      if (!s) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory folding weights");
      double *t = s + ch.count;
      kiln_status st = KILN_OK;
      if (binary_affine(g, n, x, &ch, s, t)) st = fold(g, p, &ch, s, t, i, inner, changed, e);
      free(s);
      return st;
    }
  }
  return KILN_OK;
}

static kiln_status run(kl_graph *g, bool bn, int *changed, kl_err *e) {
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    bool is_bn = n->op == KL_OP_BatchNormalization;
    bool is_bin = n->op == KL_OP_Add || n->op == KL_OP_Sub || n->op == KL_OP_Mul ||
                  n->op == KL_OP_Div;
    if (n->n_out != 1 || (bn ? !is_bn : !is_bin)) continue;
    for (int k = 0; k < (bn ? 1 : 2) && st == KILN_OK && n->n_out; k++) {
      int x = n->in[k], p = kl_rw_producer(g, x);
      channels ch;
      if (p < 0 || kl_rw_sole_consumer(g, x) != i || !weighted_channels(g, p, &ch)) continue;
      double *s = malloc(sizeof(double) * (size_t)ch.count * 2);
      if (!s) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory folding weights");
      double *t = s + ch.count;
      bool ok = bn ? bn_affine(g, n, &ch, s, t) : binary_affine(g, n, x, &ch, s, t);
      if (ok) st = fold(g, p, &ch, s, t, i, p, changed, e);
      free(s);
    }
    if (!bn && (n->op == KL_OP_Mul || n->op == KL_OP_Div) && n->n_out && st == KILN_OK)
      st = across_mul(g, i, changed, e);
  }
  if (st == KILN_OK) st = kl_rw_finish(g, *changed, e);
  return st;
}

kiln_status kl_pass_fold_bn(kl_graph *g, const kl_pass_config *cfg, int *changed, kl_err *e) {
  (void)cfg;
  return run(g, true, changed, e);
}

kiln_status kl_pass_fold_scale_bias(kl_graph *g, const kl_pass_config *cfg, int *changed,
                                    kl_err *e) {
  (void)cfg;
  return run(g, false, changed, e);
}
