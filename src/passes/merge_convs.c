/* Parallel convolutions of one input that are summed, merged into one:
 *
 *   Add(Conv(X, W3 [C, C/g, 3, 3], b3) pads 1, Conv(X, W1 [C, C/g, 1, 1], b1) pads 0)
 *                    becomes   Conv(X, W3 + W1 at the centre tap, b3 + b1) pads 1
 *   Add(Conv(X, W, b) pads 1, BatchNormalization(X, scale, B, mean, var))
 *                    becomes   Conv(X, W + diag(s) at the centre tap, b + t)
 *   Add(Conv(X, W, b) pads 1, X)              the same with s = 1, t = 0
 *   Sub(Conv(X, W, b), BatchNormalization(X))  the same with -s, -t (FastViT's RepMixer,
 *                                              whose Mul and Add then fold the same way)
 *
 * as RepVGG, MobileOne and FastViT "reparameterize" their training-time blocks (a kxk
 * convolution, a 1x1 one and a BatchNorm of the input, summed): a model exported
 * without that step runs one convolution a block instead of three to five, and no
 * Add. A convolution y[o] = b + sum_k W[k] x[o * s - p + k * d]: two of them over the
 * same X with the same group, strides and dilations read the same input positions
 * when their taps line up, tap k' of the smaller at tap k' + (p_big - p_small) / d of
 * the bigger (per spatial axis), which must lie inside the bigger kernel; then the sum
 * is one convolution with the smaller's weights added there. A BatchNormalization of X
 * (inference: x * s[c] + t[c]), or X itself, is a convolution with s[c] at the tap that
 * reads position o (stride 1, p / d a tap) from input channel c (as many outputs as
 * inputs; in a group of C/g channels, input c % (C/g) of output c).
 *
 * Both summands read by the Add alone, no graph outputs; the convolutions plain Conv
 * (before fuse_sum and fuse_act make them fused ones) with constant weights and bias,
 * explicit pads (auto_pad NOTSET), X's spatial rank 1 to 3; the Add's inputs of its
 * output's dims (no broadcasting). The merged weights and bias are new constants. The
 * sum is computed in another order (within rounding, as fold_bn's).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/infer_common.h"
#include "passes/rewrite.h"

#define MAX_SP 3

/* A summand of the Add: a convolution of X, a BatchNormalization of X, or X. */
typedef struct branch {
  int node;           /* its producer (-1 for X itself) */
  bool conv;
  int sp;             /* spatial axes */
  int64_t group;
  int64_t k[MAX_SP], s[MAX_SP], d[MAX_SP], pb[MAX_SP];
  const kl_value *w, *b; /* a Conv's weights and bias (NULL: none) */
} branch;

/* Node p as a convolution of X into *br; false when it is not one this pass merges. */
static bool conv_branch(const kl_graph *g, int p, int x, branch *br) {
  const kl_node *n = &g->nodes[p];
  if (n->op != KL_OP_Conv || n->n_in < 2 || n->n_out != 1 || n->in[0] != x) return false;
  const kl_value *w = kl_rw_const(g, n->in[1]);
  const kl_type *xt = &g->values[x].type;
  if (!w || !w->data || !kl_dtype_is_float(w->type.dtype) || w->type.dtype != xt->dtype ||
      xt->rank < 3 || xt->rank > 2 + MAX_SP || w->type.rank != xt->rank)
    return false;
  br->b = NULL;
  if (n->n_in > 2 && n->in[2] >= 0) {
    br->b = kl_rw_const(g, n->in[2]);
    if (!br->b || !br->b->data || br->b->type.dtype != w->type.dtype || br->b->type.rank != 1 ||
        br->b->type.dims[0].size != w->type.dims[0].size)
      return false;
  }
  br->node = p, br->conv = true, br->w = w;
  br->sp = xt->rank - 2;
  br->group = kl_attr_int(n, "group", 1);
  int64_t kernel[MAX_SP];
  for (int i = 0; i < br->sp; i++) kernel[i] = w->type.dims[2 + i].size;
  kl_window win; /* the attributes as shape inference reads them, checked there */
  kl_err err = {0};
  if (kl_window_init(n, br->sp, kernel, &win, &err) != KILN_OK || win.auto_pad != KL_PAD_NOTSET)
    return false;
  for (int i = 0; i < br->sp; i++) {
    br->k[i] = win.kernel[i], br->s[i] = win.stride[i], br->d[i] = win.dilation[i];
    br->pb[i] = win.pad_begin[i];
    if (br->k[i] < 1 || br->s[i] < 1 || br->d[i] < 1 || br->pb[i] < 0) return false;
  }
  return br->group >= 1;
}

/* The per-channel s and t of summand v of an Add with X: a BatchNormalization of X with
 * constant parameters (inference), or X itself (s 1, t 0); false for anything else. */
static bool identity_branch(const kl_graph *g, int v, int x, int64_t c, double *s, double *t) {
  if (v == x) {
    for (int64_t i = 0; i < c; i++) s[i] = 1, t[i] = 0;
    return true;
  }
  int p = kl_rw_producer(g, v);
  if (p < 0) return false;
  const kl_node *bn = &g->nodes[p];
  if (bn->in[0] != x || !kl_rw_bn_affine(g, bn, c, s, t)) return false;
  for (int64_t i = 0; i < c; i++)
    if (!isfinite(s[i]) || !isfinite(t[i])) return false;
  return true;
}

/* Tap offsets (per axis) at which a kernel of `small`'s size lines up inside `big`'s
 * (see the header); false when it does not. */
static bool line_up(const branch *big, const int64_t *k, const int64_t *pb, int64_t *off) {
  for (int i = 0; i < big->sp; i++) {
    int64_t diff = big->pb[i] - pb[i];
    if (diff < 0 || diff % big->d[i] != 0) return false;
    off[i] = diff / big->d[i];
    if (off[i] + k[i] > big->k[i]) return false;
  }
  return true;
}

/* The merged weights: big's times sign_big, plus small's times sign_small at taps off
 * (small NULL: s[c] on output c's own input channel at taps off). Returns the new constant's id, or -1 (*e set); big
 * and small point into g->values, which adding the constant may move. */
static int merged_weights(kl_graph *g, const branch *big, const branch *small,
                          const int64_t *off, const double *s, double sign_big,
                          double sign_small, kl_err *e) {
  const kl_value *w = big->w;
  int64_t numel, dims[KL_MAX_RANK];
  if (!kl_type_numel(&w->type, &numel)) return kl_fail(e, KILN_ERR_INTERNAL, "weights"), -1;
  for (int d = 0; d < w->type.rank; d++) dims[d] = w->type.dims[d].size;
  void *data = malloc(w->nbytes ? w->nbytes : 1);
  if (!data) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory merging convolutions"), -1;
  for (int64_t i = 0; i < numel; i++)
    kl_store_f64(data, w->type.dtype, (size_t)i,
                 sign_big * kl_load_f64(w->data, w->type.dtype, (size_t)i));
  int64_t cout = dims[0], cpg = dims[1], taps = cout > 0 && cpg > 0 ? numel / (cout * cpg) : 1;
  int64_t stride[MAX_SP], small_taps = 1, sstride[MAX_SP];
  const int64_t *sk = small ? small->k : NULL;
  for (int64_t i = big->sp - 1, a = 1, b = 1; i >= 0; i--) {
    stride[i] = a, a *= big->k[i];
    sstride[i] = b, b *= small ? sk[i] : 1;
  }
  for (int i = 0; i < big->sp; i++) small_taps *= small ? sk[i] : 1;
  for (int64_t co = 0; co < cout; co++) {
    for (int64_t ci = 0; ci < cpg; ci++) {
      if (!small && ci != co % cpg) continue;
      for (int64_t t = 0; t < small_taps; t++) {
        int64_t at = 0; /* the tap of big's kernel */
        for (int i = 0; i < big->sp; i++)
          at += (t / sstride[i] % (small ? sk[i] : 1) + off[i]) * stride[i];
        size_t dst = (size_t)((co * cpg + ci) * taps + at);
        double add = small ? kl_load_f64(small->w->data, small->w->type.dtype,
                                         (size_t)((co * cpg + ci) * small_taps + t))
                           : s[co];
        kl_store_f64(data, w->type.dtype, dst,
                     kl_load_f64(data, w->type.dtype, dst) + sign_small * add);
      }
    }
  }
  char hint[256];
  snprintf(hint, sizeof hint, "%s_merged", w->name);
  return kl_rw_add_const(g, hint, w->type.dtype, w->type.rank, dims, data, e);
}

/* Add (or Sub) node i of a and b merged into a's convolution (a Conv of X), a taken
 * with sign_a and b with sign_b; b is the other Conv's output or an identity branch's.
 * Returns 1 when merged, 0 when not, -1 on failure (*e set). */
static int merge(kl_graph *g, int i, int a, int b, double sign_a, double sign_b, kl_err *e) {
  int pa = kl_rw_producer(g, a), pbn = kl_rw_producer(g, b);
  branch big, other;
  if (pa < 0 || !conv_branch(g, pa, g->nodes[pa].in[0], &big)) return 0;
  int x = g->nodes[pa].in[0];
  int64_t cout = big.w->type.dims[0].size, off[MAX_SP];
  double *s = NULL, *t = NULL;
  bool is_conv = pbn >= 0 && conv_branch(g, pbn, x, &other);
  if (is_conv) {
    if (other.group != big.group || other.w->type.dims[0].size != cout ||
        other.w->type.dims[1].size != big.w->type.dims[1].size)
      return 0;
    for (int k = 0; k < big.sp; k++)
      if (other.s[k] != big.s[k] || other.d[k] != big.d[k]) return 0;
    if (!line_up(&big, other.k, other.pb, off)) return 0;
  } else {
    /* X or a BatchNormalization of X: stride 1, as many outputs as inputs, and a tap
     * that reads position o */
    int64_t cin = g->values[x].type.dims[1].size;
    if (!kl_dim_known(g->values[x].type.dims[1]) || cin != cout ||
        cout % big.group || big.w->type.dims[1].size != cout / big.group)
      return 0;
    for (int k = 0; k < big.sp; k++) {
      if (big.s[k] != 1 || big.pb[k] % big.d[k]) return 0;
      off[k] = big.pb[k] / big.d[k];
      if (off[k] >= big.k[k]) return 0;
    }
    s = malloc(sizeof(double) * (size_t)cout * 2);
    if (!s) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory merging convolutions"), -1;
    t = s + cout;
    if (!identity_branch(g, b, x, cout, s, t)) {
      free(s);
      return 0;
    }
  }
  /* the bias first: adding constants may move g->values, where big and other point */
  double *bias = malloc(sizeof(double) * (size_t)cout);
  if (!bias) {
    free(s);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory merging convolutions"), -1;
  }
  for (int64_t c = 0; c < cout; c++) {
    double ob = is_conv ? (other.b ? kl_load_f64(other.b->data, other.b->type.dtype, (size_t)c) : 0)
                        : t[c];
    bias[c] = (big.b ? kl_load_f64(big.b->data, big.b->type.dtype, (size_t)c) : 0) * sign_a +
              ob * sign_b;
  }
  kl_dtype dt = big.w->type.dtype;
  int wid = merged_weights(g, &big, is_conv ? &other : NULL, off, s, sign_a, sign_b, e);
  free(s);
  char hint[256];
  snprintf(hint, sizeof hint, "%s_bias", g->values[g->nodes[i].out[0]].name);
  int bid = wid < 0 ? -1 : kl_rw_add_vector(g, hint, dt, 1, bias, cout, e);
  free(bias);
  if (bid < 0) return -1;
  kiln_status st = kl_rw_set_input(g, pa, 1, wid, e);
  if (st == KILN_OK) st = kl_rw_set_input(g, pa, 2, bid, e);
  if (st != KILN_OK) return -1;
  int y = g->nodes[i].out[0];
  if (pbn >= 0 && b != x) kl_rw_remove(g, pbn);
  kl_rw_remove(g, i);
  kl_rw_take_output(g, pa, 0, y);
  return 1;
}

kiln_status kl_pass_merge_convs(kl_graph *g, const kl_pass_config *cfg, int *changed,
                                kl_err *e) {
  (void)cfg;
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    if ((n->op != KL_OP_Add && n->op != KL_OP_Sub) || n->n_in != 2 || n->n_out != 1) continue;
    const kl_type *yt = &g->values[n->out[0]].type;
    int in[2] = {n->in[0], n->in[1]};
    bool ok = in[0] >= 0 && in[1] >= 0 && in[0] != in[1];
    for (int k = 0; ok && k < 2; k++) {
      const kl_type *t = &g->values[in[k]].type;
      ok = kl_rw_same_shape(t, yt) && t->dtype == yt->dtype && !kl_rw_is_output(g, in[k]);
    }
    if (!ok) continue;
    for (int k = 0; k < 2; k++) {
      int a = in[k], b = in[1 - k], pa = kl_rw_producer(g, a), pb = kl_rw_producer(g, b);
      /* a's producer is a Conv read by the Add alone; b likewise, or X itself (read by
       * a's convolution too) */
      if (pa < 0 || kl_rw_sole_consumer(g, a) != i) continue;
      if (b != g->nodes[pa].in[0] && (pb < 0 || kl_rw_sole_consumer(g, b) != i)) continue;
      double sign_b = n->op == KL_OP_Sub ? -1 : 1; /* in[0] - in[1] */
      int r = merge(g, i, a, b, k == 0 ? 1 : sign_b, k == 0 ? sign_b : 1, e);
      if (r < 0) return e->code;
      if (r > 0) {
        (*changed)++;
        break;
      }
    }
  }
  return kl_rw_finish(g, *changed, e);
}
