/* One gradient rule per op (autograd.h): what node n's input gradients are, given its
 * output gradients dy[]. Each rule reads the forward node's inputs and outputs as the
 * forward graph holds them and adds nodes after the forward graph; an input whose
 * gradient nobody needs (kl_ad_wants) gets none.
 *
 * Rules that broadcast (Add, Mul, Expand, ...) sum the gradient back to the input's
 * shape with kiln.SumTo. Matrix products are differentiated into matrix products
 * (MatMul, Gemm) so that they run on the same fast kernels as the forward ones. */
#include "train/autograd.h"

#include "ir/infer_common.h"
#include "ir/infer_more.h"
#include "passes/rewrite.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define G(a) ((a)->g)
#define NODE(a, n) (&(a)->g->nodes[n])
#define IN(a, n, k) ((k) < NODE(a, n)->n_in ? NODE(a, n)->in[k] : -1)
#define OUT(a, n, k) (NODE(a, n)->out[k])
#define TYPE(a, v) (&(a)->g->values[v].type)

static kiln_status fail_node(kl_ad *a, int n, kiln_status code, const char *what) {
  char d[256];
  return kl_fail(a->e, code, "%s: %s", kl_node_describe(a->g, NODE(a, n), d, sizeof d), what);
}

/* One output of a new node (the node in *node when node is not NULL); -1 on error. */
static int op1_node(kl_ad *a, int fwd, kl_op op, int n_in, const int *in, int *node) {
  int out;
  int k = kl_ad_node(a, fwd, op, n_in, in, 1, &out);
  if (node) *node = k;
  return k < 0 ? -1 : out;
}

static int op1(kl_ad *a, int fwd, kl_op op, int n_in, const int *in) {
  return op1_node(a, fwd, op, n_in, in, NULL);
}

static int bin(kl_ad *a, int fwd, kl_op op, int x, int y) {
  int in[2] = {x, y};
  return op1(a, fwd, op, 2, in);
}

static int neg(kl_ad *a, int fwd, int x) { return op1(a, fwd, KL_OP_Neg, 1, &x); }

/* d, a gradient of the shape of forward value `as` (-1: not known), summed to value
 * like's shape. (The gradients' own types are inferred only at the end.) */
static int sum_to_as(kl_ad *a, int fwd, int d, int as, int like) {
  if (d < 0) return -1;
  if (as >= 0 && kl_rw_same_shape(TYPE(a, as), TYPE(a, like))) return d;
  int in[2] = {d, like};
  return op1(a, fwd, KL_OP_KilnSumTo, 2, in);
}

/* The same for a gradient of the shape of node fwd's output. */
static int sum_to(kl_ad *a, int fwd, int d, int like) {
  return sum_to_as(a, fwd, d, OUT(a, fwd, 0), like);
}

static kiln_status give(kl_ad *a, int v, int dv) {
  if (dv < 0) return a->e->code ? a->e->code : KILN_ERR_INTERNAL;
  return kl_ad_accumulate(a, v, dv);
}

/* The types inferred so far are those of the forward graph; the rules add nodes whose
 * types are inferred at the end. A shape a rule needs now is the forward values'. */
static int rank_of(kl_ad *a, int v) { return TYPE(a, v)->rank; }

/* ---- elementwise ---- */

static kiln_status r_identity(kl_ad *a, int n, const int *dy) {
  return kl_ad_wants(a, n, 0) ? kl_ad_accumulate(a, IN(a, n, 0), dy[0]) : KILN_OK;
}

static kiln_status r_cast(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0)) return KILN_OK;
  int x = IN(a, n, 0);
  kl_dtype from = TYPE(a, x)->dtype;
  if (!kl_dtype_is_float(from)) return KILN_OK;
  if (from == TYPE(a, OUT(a, n, 0))->dtype) return kl_ad_accumulate(a, x, dy[0]);
  int in = dy[0];
  int k = kl_ad_node(a, n, KL_OP_Cast, 1, &in, 1, &in);
  if (k < 0) return a->e->code;
  kiln_status st = kl_node_set_int(a->g, k, "to", (int64_t)from, a->e);
  return st == KILN_OK ? kl_ad_accumulate(a, x, in) : st;
}

static kiln_status r_add_sub(kl_ad *a, int n, const int *dy) {
  int x = IN(a, n, 0), y = IN(a, n, 1);
  bool sub = NODE(a, n)->op == KL_OP_Sub;
  kiln_status st = KILN_OK;
  if (kl_ad_wants(a, n, 0)) st = give(a, x, sum_to(a, n, dy[0], x));
  if (st == KILN_OK && kl_ad_wants(a, n, 1)) {
    int d = sub ? neg(a, n, dy[0]) : dy[0];
    st = give(a, y, sum_to(a, n, d, y));
  }
  return st;
}

static kiln_status r_mul(kl_ad *a, int n, const int *dy) {
  int x = IN(a, n, 0), y = IN(a, n, 1);
  kiln_status st = KILN_OK;
  if (kl_ad_wants(a, n, 0)) st = give(a, x, sum_to(a, n, bin(a, n, KL_OP_Mul, dy[0], y), x));
  if (st == KILN_OK && kl_ad_wants(a, n, 1))
    st = give(a, y, sum_to(a, n, bin(a, n, KL_OP_Mul, dy[0], x), y));
  return st;
}

static kiln_status r_div(kl_ad *a, int n, const int *dy) {
  int x = IN(a, n, 0), y = IN(a, n, 1), q = OUT(a, n, 0);
  kiln_status st = KILN_OK;
  if (kl_ad_wants(a, n, 0)) st = give(a, x, sum_to(a, n, bin(a, n, KL_OP_Div, dy[0], y), x));
  if (st == KILN_OK && kl_ad_wants(a, n, 1)) {
    /* d(x/y)/dy = -q/y */
    int t = bin(a, n, KL_OP_Div, bin(a, n, KL_OP_Mul, dy[0], q), y);
    st = give(a, y, sum_to(a, n, t < 0 ? -1 : neg(a, n, t), y));
  }
  return st;
}

static kiln_status r_neg(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0)) return KILN_OK;
  return give(a, IN(a, n, 0), neg(a, n, dy[0]));
}

/* x ^ c for a constant scalar c: c x^(c-1) */
static kiln_status r_pow(kl_ad *a, int n, const int *dy) {
  int x = IN(a, n, 0);
  double c;
  if (kl_ad_wants(a, n, 1))
    return fail_node(a, n, KILN_ERR_UNSUPPORTED, "the gradient of Pow is implemented for a "
                     "constant exponent only; this exponent depends on trainable weights");
  if (!kl_rw_scalar(a->g, IN(a, n, 1), &c))
    return fail_node(a, n, KILN_ERR_UNSUPPORTED, "the gradient of Pow is implemented for "
                     "a constant scalar exponent only");
  kl_dtype t = TYPE(a, x)->dtype;
  int d;
  if (c == 2.0) {
    d = bin(a, n, KL_OP_Mul, x, kl_ad_scalar(a, t, 2.0));
  } else {
    int p = bin(a, n, KL_OP_Pow, x, kl_ad_scalar(a, t, c - 1.0));
    d = p < 0 ? -1 : bin(a, n, KL_OP_Mul, p, kl_ad_scalar(a, t, c));
  }
  return give(a, x, d < 0 ? -1 : bin(a, n, KL_OP_Mul, dy[0], d));
}

/* The activations and math functions: kiln.UnaryGrad with the op's name and
 * attributes. */
static kiln_status r_unary(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0)) return KILN_OK;
  int x = IN(a, n, 0), y = OUT(a, n, 0);
  kl_op op = NODE(a, n)->op;
  double lo = -INFINITY, hi = INFINITY;
  if (op == KL_OP_Clip) {
    if ((IN(a, n, 1) >= 0 && !kl_rw_scalar(a->g, IN(a, n, 1), &lo)) ||
        (IN(a, n, 2) >= 0 && !kl_rw_scalar(a->g, IN(a, n, 2), &hi)))
      return fail_node(a, n, KILN_ERR_UNSUPPORTED, "the gradient of Clip is implemented for "
                       "constant bounds only");
  }
  int in[3] = {dy[0], x, y}, k;
  int d = op1_node(a, n, KL_OP_KilnUnaryGrad, 3, in, &k);
  if (d < 0) return a->e->code;
  kiln_status st = kl_ad_copy_attrs(a, n, k);
  if (st == KILN_OK) st = kl_node_set_string(a->g, k, "op", kl_op_name(op), a->e);
  if (st == KILN_OK && op == KL_OP_Clip) {
    st = kl_node_set_float(a->g, k, "alpha", (float)lo, a->e);
    if (st == KILN_OK) st = kl_node_set_float(a->g, k, "beta", (float)hi, a->e);
  }
  return st == KILN_OK ? give(a, x, d) : st;
}

static kiln_status r_softmax(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0)) return KILN_OK;
  int in[2] = {dy[0], OUT(a, n, 0)}, k;
  int d = op1_node(a, n, KL_OP_KilnSoftmaxGrad, 2, in, &k);
  if (d < 0) return a->e->code;
  kiln_status st = kl_node_set_int(a->g, k, "axis", kl_attr_int(NODE(a, n), "axis", -1), a->e);
  if (st == KILN_OK)
    st = kl_node_set_int(a->g, k, "log", NODE(a, n)->op == KL_OP_LogSoftmax, a->e);
  return st == KILN_OK ? give(a, IN(a, n, 0), d) : st;
}

/* ---- matrix products ---- */

/* x with its last two axes swapped */
static int swap_last(kl_ad *a, int fwd, int x) {
  int r = rank_of(a, x);
  int64_t perm[KL_MAX_RANK];
  for (int i = 0; i < r; i++) perm[i] = i;
  perm[r - 1] = r - 2;
  perm[r - 2] = r - 1;
  int k, out;
  if ((k = kl_ad_node(a, fwd, KL_OP_Transpose, 1, &x, 1, &out)) < 0) return -1;
  return kl_node_set_ints(a->g, k, "perm", perm, r, a->e) == KILN_OK ? out : -1;
}

/* x (of forward value as's shape) as a matrix [-1, last dim] */
static int as_rows(kl_ad *a, int fwd, int x, int as) {
  int r = rank_of(a, as);
  const kl_dim *last = &TYPE(a, as)->dims[r - 1];
  if (r == 2) return x;
  int64_t shape[2] = {-1, last->size};
  int in[2] = {x, kl_ad_ints(a, shape, 2)};
  return in[1] < 0 ? -1 : op1(a, fwd, KL_OP_Reshape, 2, in);
}

static int gemm(kl_ad *a, int fwd, int x, int y, bool ta, bool tb, float alpha) {
  int in[2] = {x, y}, out;
  int k = kl_ad_node(a, fwd, KL_OP_Gemm, 2, in, 1, &out);
  if (k < 0) return -1;
  kiln_status st = kl_node_set_int(a->g, k, "transA", ta, a->e);
  if (st == KILN_OK) st = kl_node_set_int(a->g, k, "transB", tb, a->e);
  if (st == KILN_OK && alpha != 1.0f) st = kl_node_set_float(a->g, k, "alpha", alpha, a->e);
  return st == KILN_OK ? out : -1;
}

/* Whether u and v (of one rank) have the same dims but the last two. */
static bool batch_same(kl_ad *a, int u, int v) {
  const kl_type *p = TYPE(a, u), *q = TYPE(a, v);
  if (p->rank != q->rank || p->rank < 2) return false;
  for (int i = 0; i < p->rank - 2; i++)
    if (!kl_dim_equal(p->dims[i], q->dims[i])) return false;
  return true;
}

static kiln_status r_matmul(kl_ad *a, int n, const int *dy) {
  int x = IN(a, n, 0), w = IN(a, n, 1), d = dy[0];
  int rx = rank_of(a, x), rw = rank_of(a, w);
  if (rx < 2 || rw < 2)
    return fail_node(a, n, KILN_ERR_UNSUPPORTED, "the gradient of MatMul is implemented "
                     "for operands of rank 2 or more (a vector operand is not)");
  kiln_status st = KILN_OK;
  const kl_type *ty = TYPE(a, OUT(a, n, 0));
  bool rows_known = ty->rank >= 2 && ty->dims[ty->rank - 1].size >= 0 &&
                    TYPE(a, x)->dims[rx - 1].size >= 0;
  if (kl_ad_wants(a, n, 0) && rw == 2 && rows_known) {
    /* a weight matrix shared by every row: dX = rows(dY) W^T as one Gemm, reshaped to
     * X's shape (no transposed copy of W) */
    int dr = as_rows(a, n, d, OUT(a, n, 0));
    int prod = dr < 0 ? -1 : gemm(a, n, dr, w, false, true, 1.0f);
    int dx = prod;
    if (prod >= 0 && rx > 2) {
      int in[2] = {prod, op1(a, n, KL_OP_Shape, 1, &x)};
      dx = in[1] < 0 ? -1 : op1(a, n, KL_OP_Reshape, 2, in);
    }
    kiln_status st0 = give(a, x, dx);
    if (st0 != KILN_OK) return st0;
  } else if (kl_ad_wants(a, n, 0)) {
    /* dX = dY W^T, summed over W's broadcast batch dims */
    int wt = swap_last(a, n, w);
    /* dY W^T has Y's batch dims: X's shape when X has them all */
    int as = rx == TYPE(a, OUT(a, n, 0))->rank && batch_same(a, x, OUT(a, n, 0)) ? x : -1;
    st = give(a, x, wt < 0 ? -1 : sum_to_as(a, n, bin(a, n, KL_OP_MatMul, d, wt), as, x));
  }
  if (st == KILN_OK && kl_ad_wants(a, n, 1)) {
    int dw;
    const kl_type *yt = TYPE(a, OUT(a, n, 0));
    if (rw == 2 && TYPE(a, x)->dims[rx - 1].size >= 0 && yt->rank >= 2 &&
        yt->dims[yt->rank - 1].size >= 0) {
      /* a weight matrix shared by every row: X's rows^T dY's rows, one product */
      int xr = as_rows(a, n, x, x), dr = as_rows(a, n, d, OUT(a, n, 0));
      dw = xr < 0 || dr < 0 ? -1 : gemm(a, n, xr, dr, true, false, 1.0f);
    } else {
      int xt = swap_last(a, n, x);
      int as = rw == TYPE(a, OUT(a, n, 0))->rank && batch_same(a, w, OUT(a, n, 0)) ? w : -1;
      dw = xt < 0 ? -1 : sum_to_as(a, n, bin(a, n, KL_OP_MatMul, xt, d), as, w);
    }
    st = give(a, w, dw);
  }
  return st;
}

/* Y = alpha op(A) op(B) + beta C */
static kiln_status r_gemm(kl_ad *a, int n, const int *dy) {
  const kl_node *node = NODE(a, n);
  int x = IN(a, n, 0), w = IN(a, n, 1), c = IN(a, n, 2), d = dy[0];
  bool ta = kl_attr_int(node, "transA", 0) != 0, tb = kl_attr_int(node, "transB", 0) != 0;
  float alpha = kl_attr_float(node, "alpha", 1.0f), beta = kl_attr_float(node, "beta", 1.0f);
  kiln_status st = KILN_OK;
  if (kl_ad_wants(a, n, 0)) /* d op(A) = alpha dY op(B)^T */
    st = give(a, x, ta ? gemm(a, n, w, d, tb, true, alpha) : gemm(a, n, d, w, false, !tb, alpha));
  if (st == KILN_OK && kl_ad_wants(a, n, 1)) /* d op(B) = alpha op(A)^T dY */
    st = give(a, w, tb ? gemm(a, n, d, x, true, ta, alpha) : gemm(a, n, x, d, !ta, false, alpha));
  if (st == KILN_OK && c >= 0 && kl_ad_wants(a, n, 2)) {
    int dc = d;
    if (beta != 1.0f) dc = bin(a, n, KL_OP_Mul, d, kl_ad_scalar(a, TYPE(a, OUT(a, n, 0))->dtype, beta));
    st = give(a, c, sum_to(a, n, dc, c));
  }
  return st;
}

/* ---- convolution and pooling ---- */

/* d (of rank r) summed over every axis but 1, the channels: [C]. */
static int sum_but_channels(kl_ad *a, int fwd, int d, int r) {
  int64_t axes[KL_MAX_RANK];
  int m = 0, k;
  for (int i = 0; i < r; i++)
    if (i != 1) axes[m++] = i;
  int in[2] = {d, kl_ad_ints(a, axes, m)};
  int out = d < 0 || in[1] < 0 ? -1 : op1_node(a, fwd, KL_OP_ReduceSum, 2, in, &k);
  if (out >= 0 && kl_node_set_int(a->g, k, "keepdims", 0, a->e) != KILN_OK) return -1;
  return out;
}

/* Ones of dtype in the shape of x's dims from `start` on, made at run time (x may be a
 * value the rules made, whose type is not inferred yet). */
static int ones_from(kl_ad *a, int fwd, int x, int start, kl_dtype dtype) {
  int k, shape = op1_node(a, fwd, KL_OP_Shape, 1, &x, &k);
  if (shape < 0 || kl_node_set_int(a->g, k, "start", start, a->e) != KILN_OK) return -1;
  int in[2] = {kl_ad_scalar(a, dtype, 1.0), shape};
  return in[0] < 0 ? -1 : op1(a, fwd, KL_OP_Expand, 2, in);
}

/* v [C] as [C, 1, ...] against a tensor of rank r. */
static int per_channel(kl_ad *a, int fwd, int v, int r) {
  int64_t axes[KL_MAX_RANK];
  for (int i = 1; i < r - 1; i++) axes[i - 1] = i;
  int in[2] = {v, kl_ad_ints(a, axes, r - 2)};
  return in[1] < 0 ? -1 : op1(a, fwd, KL_OP_Unsqueeze, 2, in);
}

static kiln_status r_conv(kl_ad *a, int n, const int *dy) {
  int x = IN(a, n, 0), w = IN(a, n, 1), b = IN(a, n, 2), d = dy[0], k;
  kiln_status st = KILN_OK;
  if (kl_ad_wants(a, n, 0)) {
    int in[3] = {d, w, x};
    int dx = op1_node(a, n, KL_OP_KilnConvGradX, 3, in, &k);
    if (dx >= 0) st = kl_ad_copy_attrs(a, n, k);
    if (st == KILN_OK) st = give(a, x, dx);
  }
  if (st == KILN_OK && kl_ad_wants(a, n, 1)) {
    int in[3] = {x, d, w};
    int dw = op1_node(a, n, KL_OP_KilnConvGradW, 3, in, &k);
    if (dw >= 0) st = kl_ad_copy_attrs(a, n, k);
    if (st == KILN_OK) st = give(a, w, dw);
  }
  if (st == KILN_OK && b >= 0 && kl_ad_wants(a, n, 2))
    st = give(a, b, sum_but_channels(a, n, d, rank_of(a, x)));
  return st;
}

static kiln_status r_pool(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0) || dy[0] < 0) return KILN_OK;
  int x = IN(a, n, 0), k;
  int in[2] = {dy[0], x};
  kl_op op = NODE(a, n)->op == KL_OP_MaxPool ? KL_OP_KilnMaxPoolGrad : KL_OP_KilnAveragePoolGrad;
  int dx = op1_node(a, n, op, 2, in, &k);
  if (dx < 0) return a->e->code;
  kiln_status st = kl_ad_copy_attrs(a, n, k);
  return st == KILN_OK ? give(a, x, dx) : st;
}

/* A reduction's gradient: dY spread back over the reduced axes (kiln.ReduceGrad). */
static kiln_status reduce_grad(kl_ad *a, int n, int x, int d, const int64_t *axes, int m,
                               bool keepdims, bool mean) {
  int in[2] = {d, x}, k;
  int dx = op1_node(a, n, KL_OP_KilnReduceGrad, 2, in, &k);
  if (dx < 0) return a->e->code;
  kiln_status st = kl_node_set_ints(a->g, k, "axes", axes, m, a->e);
  if (st == KILN_OK) st = kl_node_set_int(a->g, k, "keepdims", keepdims, a->e);
  if (st == KILN_OK) st = kl_node_set_int(a->g, k, "mean", mean, a->e);
  return st == KILN_OK ? give(a, x, dx) : st;
}

static kiln_status r_global_pool(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0)) return KILN_OK;
  int x = IN(a, n, 0), r = rank_of(a, x);
  if (r < 3) return fail_node(a, n, KILN_ERR_UNSUPPORTED, "input of unknown rank");
  int64_t axes[KL_MAX_RANK];
  for (int i = 2; i < r; i++) axes[i - 2] = i;
  return reduce_grad(a, n, x, dy[0], axes, r - 2, true, true);
}

static kiln_status r_reduce(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0)) return KILN_OK;
  const kl_node *node = NODE(a, n);
  int x = IN(a, n, 0), r = rank_of(a, x);
  bool mean = node->op == KL_OP_ReduceMean;
  bool keep = kl_attr_int(node, "keepdims", 1) != 0;
  int64_t axes[KL_MAX_RANK];
  int m = 0;
  int ax = IN(a, n, 1);
  if (r < 0) return fail_node(a, n, KILN_ERR_UNSUPPORTED, "input of unknown rank");
  if (ax >= 0) {
    const kl_value *c = kl_rw_const(a->g, ax);
    int64_t cnt;
    if (!c || !kl_type_numel(&c->type, &cnt) || cnt > KL_MAX_RANK)
      return fail_node(a, n, KILN_ERR_UNSUPPORTED, "the gradient of a reduction is "
                       "implemented for constant axes only");
    for (int64_t i = 0; i < cnt; i++) axes[m++] = kl_load_i64(c->data, c->type.dtype, (size_t)i);
  }
  if (m == 0) {
    if (kl_attr_int(node, "noop_with_empty_axes", 0)) return kl_ad_accumulate(a, x, dy[0]);
    for (int i = 0; i < r; i++) axes[m++] = i;
  }
  return reduce_grad(a, n, x, dy[0], axes, m, keep, mean);
}

static kiln_status r_batchnorm_train(kl_ad *a, int n, const int *dy) {
  if (dy[0] < 0) return KILN_OK; /* only the running statistics were read */
  int in[3] = {dy[0], IN(a, n, 0), IN(a, n, 1)}, out[3];
  int k = kl_ad_node(a, n, KL_OP_KilnBatchNormGrad, 3, in, 3, out);
  if (k < 0) return a->e->code;
  kiln_status st = kl_node_set_float(a->g, k, "epsilon",
                                     kl_attr_float(NODE(a, n), "epsilon", 1e-5f), a->e);
  for (int i = 0; i < 3 && st == KILN_OK; i++)
    if (kl_ad_wants(a, n, i)) st = give(a, IN(a, n, i), out[i]);
  return st;
}

static kiln_status r_layernorm(kl_ad *a, int n, const int *dy) {
  if (dy[0] < 0) return KILN_OK;
  int in[3] = {dy[0], IN(a, n, 0), IN(a, n, 1)}, out[3];
  int k = kl_ad_node(a, n, KL_OP_KilnLayerNormGrad, 3, in, 3, out);
  if (k < 0) return a->e->code;
  kiln_status st = kl_node_set_int(a->g, k, "axis", kl_attr_int(NODE(a, n), "axis", -1), a->e);
  if (st == KILN_OK)
    st = kl_node_set_float(a->g, k, "epsilon", kl_attr_float(NODE(a, n), "epsilon", 1e-5f),
                           a->e);
  for (int i = 0; i < 3 && st == KILN_OK; i++)
    if (kl_ad_wants(a, n, i)) st = give(a, IN(a, n, i), out[i]);
  return st;
}

/* A normalization over the axes from 2 on of x: LayerNormalization's (axis 2) with a
 * unit scale, from the same ones (op KilnLayerNormGrad: d -> dX; LayerNormalization:
 * x -> its normalized form). */
static int norm_rows(kl_ad *a, int fwd, kl_op op, int d, int x, int ones, float eps) {
  int in[3] = {d, x, ones}, k, out;
  int n_in = op == KL_OP_KilnLayerNormGrad ? 3 : 2;
  if (op == KL_OP_LayerNormalization) {
    in[0] = x;
    in[1] = ones;
  }
  if (in[0] < 0 || in[1] < 0 || (n_in == 3 && in[2] < 0)) return -1;
  k = kl_ad_node(a, fwd, op, n_in, in, 1, &out);
  if (k < 0 || kl_node_set_int(a->g, k, "axis", 2, a->e) != KILN_OK ||
      kl_node_set_float(a->g, k, "epsilon", eps, a->e) != KILN_OK)
    return -1;
  return out;
}

/* InstanceNormalization (X [N, C, ...], scale [C], B [C]) and GroupNormalization
 * (num_groups G; scale and B per channel, the opset-21 form the importer makes): each
 * is a LayerNormalization over the axes from 2 on of X seen as [N, C, S] or [N, G,
 * C / G * S] with a unit scale, then scale and B per channel. So dX is LayerNormGrad's
 * of dY * scale (per channel) in that view, dScale the channel sums of dY * X's
 * normalized form, dB those of dY. */
static kiln_status r_channel_norm(kl_ad *a, int n, const int *dy) {
  if (dy[0] < 0) return KILN_OK;
  const kl_node *node = NODE(a, n);
  int x = IN(a, n, 0), r = rank_of(a, x);
  if (r < 3) return fail_node(a, n, KILN_ERR_UNSUPPORTED, "input of rank under 3 or unknown");
  float eps = kl_attr_float(node, "epsilon", 1e-5f);
  bool groups = node->op == KL_OP_GroupNormalization;
  int view = x, shape = -1, rows = -1; /* X as the rows normalized; X's shape */
  if (groups) {
    int64_t dims[3] = {0, kl_attr_int(node, "num_groups", 1), -1};
    rows = kl_ad_ints(a, dims, 3);
    view = rows < 0 ? -1 : bin(a, n, KL_OP_Reshape, x, rows);
    shape = op1(a, n, KL_OP_Shape, 1, &x);
    if (view < 0 || shape < 0) return a->e->code;
  }
  int ones = ones_from(a, n, view, 2, TYPE(a, x)->dtype);
  if (ones < 0) return a->e->code;
  kiln_status st = KILN_OK;
  if (kl_ad_wants(a, n, 0)) {
    int g = bin(a, n, KL_OP_Mul, dy[0], per_channel(a, n, IN(a, n, 1), r));
    if (groups && g >= 0) g = bin(a, n, KL_OP_Reshape, g, rows);
    int dx = norm_rows(a, n, KL_OP_KilnLayerNormGrad, g, view, ones, eps);
    if (groups && dx >= 0) dx = bin(a, n, KL_OP_Reshape, dx, shape);
    st = give(a, x, dx);
  }
  if (st == KILN_OK && kl_ad_wants(a, n, 1)) {
    int xhat = norm_rows(a, n, KL_OP_LayerNormalization, -1, view, ones, eps);
    if (groups && xhat >= 0) xhat = bin(a, n, KL_OP_Reshape, xhat, shape);
    int t = xhat < 0 ? -1 : bin(a, n, KL_OP_Mul, dy[0], xhat);
    st = give(a, IN(a, n, 1), sum_but_channels(a, n, t, r));
  }
  if (st == KILN_OK && IN(a, n, 2) >= 0 && kl_ad_wants(a, n, 2))
    st = give(a, IN(a, n, 2), sum_but_channels(a, n, dy[0], r));
  return st;
}

static kiln_status r_dropout_train(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0) || dy[0] < 0) return KILN_OK;
  int in[3] = {dy[0], OUT(a, n, 1), IN(a, n, 1)};
  int dx = op1(a, n, KL_OP_KilnDropoutGrad, in[2] >= 0 ? 3 : 2, in);
  return give(a, IN(a, n, 0), dx);
}

/* ---- shapes and data movement ---- */

/* Reshape, Flatten, Squeeze, Unsqueeze: dY reshaped to X's shape. */
static kiln_status r_reshape(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0)) return KILN_OK;
  int x = IN(a, n, 0);
  int shape = op1(a, n, KL_OP_Shape, 1, &x);
  int in[2] = {dy[0], shape};
  return give(a, x, shape < 0 ? -1 : op1(a, n, KL_OP_Reshape, 2, in));
}

/* Resize: dY back along the taps the forward op read (kiln.ResizeGrad, the forward
 * node's attributes and request inputs); roi, scales and sizes get none. */
static kiln_status r_resize(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0) || dy[0] < 0) return KILN_OK;
  int in[5] = {dy[0], IN(a, n, 0), IN(a, n, 1), IN(a, n, 2), IN(a, n, 3)}, k;
  int dx = op1_node(a, n, KL_OP_KilnResizeGrad, 5, in, &k);
  if (dx < 0) return a->e->code;
  kiln_status st = kl_ad_copy_attrs(a, n, k);
  return st == KILN_OK ? give(a, IN(a, n, 0), dx) : st;
}

/* Tile: dY [r0 d0, r1 d1, ...] seen as [r0, d0, r1, d1, ...] (the shape interleaved at
 * run time from the repeats and X's shape) and summed over the repeats' axes. */
static kiln_status r_tile(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0)) return KILN_OK;
  int x = IN(a, n, 0), r = rank_of(a, x);
  if (r < 1 || 2 * r > KL_MAX_RANK)
    return fail_node(a, n, KILN_ERR_UNSUPPORTED, "Tile's gradient takes inputs of rank 1 to 4");
  int64_t one = 1, flat = -1, axes[KL_MAX_RANK];
  int col = kl_ad_ints(a, &one, 1);
  int shape = op1(a, n, KL_OP_Shape, 1, &x);
  int pair[2] = {bin(a, n, KL_OP_Unsqueeze, IN(a, n, 1), col),
                 shape < 0 ? -1 : bin(a, n, KL_OP_Unsqueeze, shape, col)};
  int k, pairs = pair[0] < 0 || pair[1] < 0 ? -1 : op1_node(a, n, KL_OP_Concat, 2, pair, &k);
  if (pairs < 0 || kl_node_set_int(a->g, k, "axis", 1, a->e) != KILN_OK) return a->e->code;
  int both = bin(a, n, KL_OP_Reshape, pairs, kl_ad_ints(a, &flat, 1));
  int spread = both < 0 ? -1 : bin(a, n, KL_OP_Reshape, dy[0], both);
  for (int i = 0; i < r; i++) axes[i] = 2 * i;
  int in[2] = {spread, kl_ad_ints(a, axes, r)};
  int dx = in[0] < 0 || in[1] < 0 ? -1 : op1_node(a, n, KL_OP_ReduceSum, 2, in, &k);
  if (dx >= 0 && kl_node_set_int(a->g, k, "keepdims", 0, a->e) != KILN_OK) return a->e->code;
  return give(a, x, dx);
}

static kiln_status r_expand(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0)) return KILN_OK;
  return give(a, IN(a, n, 0), sum_to(a, n, dy[0], IN(a, n, 0)));
}

static kiln_status r_transpose(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0)) return KILN_OK;
  int x = IN(a, n, 0), r = rank_of(a, x);
  const int64_t *perm = NULL;
  int np = kl_attr_ints(NODE(a, n), "perm", &perm);
  int64_t inv[KL_MAX_RANK];
  if (r < 0) return fail_node(a, n, KILN_ERR_UNSUPPORTED, "input of unknown rank");
  for (int i = 0; i < r; i++) {
    int64_t p = np == r ? perm[i] : r - 1 - i;
    if (p < 0 || p >= r) return fail_node(a, n, KILN_ERR_INVALID_MODEL, "invalid perm");
    inv[p] = i;
  }
  int out, k = kl_ad_node(a, n, KL_OP_Transpose, 1, &dy[0], 1, &out);
  if (k < 0) return a->e->code;
  kiln_status st = kl_node_set_ints(a->g, k, "perm", inv, r, a->e);
  return st == KILN_OK ? give(a, x, out) : st;
}

static kiln_status r_concat(kl_ad *a, int n, const int *dy) {
  const kl_node *node = NODE(a, n);
  int m = node->n_in, r = rank_of(a, OUT(a, n, 0));
  int axis;
  kl_infer_ctx ic = {.e = a->e};
  if (r < 0 || kl_norm_axis(&ic, kl_attr_int(node, "axis", 0), r, "axis", &axis) != KILN_OK)
    return fail_node(a, n, KILN_ERR_UNSUPPORTED, "output of unknown rank");
  int64_t *sizes = malloc(sizeof(int64_t) * (size_t)m);
  int *outs = malloc(sizeof(int) * (size_t)m), *ins = malloc(sizeof(int) * (size_t)m);
  kiln_status st = KILN_OK;
  if (!sizes || !outs || !ins) st = kl_fail(a->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  bool known = true;
  for (int i = 0; i < m && st == KILN_OK; i++) {
    int v = NODE(a, n)->in[i];
    sizes[i] = TYPE(a, v)->rank == r ? TYPE(a, v)->dims[axis].size : -1;
    ins[i] = v;
    known &= sizes[i] >= 0;
  }
  /* the pieces' sizes: constants when known, else read from the inputs' shapes at run
   * time (Shape's start/end give the one dim) */
  int split_sizes = -1;
  if (st == KILN_OK && known) {
    split_sizes = kl_ad_ints(a, sizes, m);
  } else if (st == KILN_OK) {
    for (int i = 0; i < m && st == KILN_OK; i++) {
      int k = kl_ad_node(a, n, KL_OP_Shape, 1, &ins[i], 1, &outs[i]);
      if (k < 0) st = a->e->code;
      if (st == KILN_OK) st = kl_node_set_int(a->g, k, "start", axis, a->e);
      if (st == KILN_OK) st = kl_node_set_int(a->g, k, "end", axis + 1, a->e);
    }
    int k = st == KILN_OK ? kl_ad_node(a, n, KL_OP_Concat, m, outs, 1, &split_sizes) : -1;
    if (st == KILN_OK && k < 0) st = a->e->code;
    if (st == KILN_OK) st = kl_node_set_int(a->g, k, "axis", 0, a->e);
  }
  int k = -1;
  if (st == KILN_OK) {
    int in[2] = {dy[0], split_sizes};
    k = in[1] < 0 ? -1 : kl_ad_node(a, n, KL_OP_Split, 2, in, m, outs);
    if (k < 0) st = a->e->code;
  }
  if (st == KILN_OK) st = kl_node_set_int(a->g, k, "axis", axis, a->e);
  for (int i = 0; i < m && st == KILN_OK; i++)
    if (kl_ad_wants(a, n, i)) st = give(a, ins[i], outs[i]);
  free(sizes);
  free(outs);
  free(ins);
  return st;
}

static kiln_status r_split(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0)) return KILN_OK;
  const kl_node *node = NODE(a, n);
  int m = node->n_out, r = rank_of(a, IN(a, n, 0));
  int *parts = malloc(sizeof(int) * (size_t)(m ? m : 1));
  if (!parts) return kl_fail(a->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  kiln_status st = KILN_OK;
  for (int i = 0; i < m && st == KILN_OK; i++) {
    parts[i] = dy[i];
    if (parts[i] >= 0) continue;
    /* an unused piece: zeros of its shape */
    int y = OUT(a, n, i);
    int shape = op1(a, n, KL_OP_Shape, 1, &y), k, z;
    k = shape < 0 ? -1 : kl_ad_node(a, n, KL_OP_ConstantOfShape, 1, &shape, 1, &z);
    if (k < 0) {
      st = a->e->code;
      break;
    }
    kl_tensor *t = calloc(1, sizeof *t);
    void *data = calloc(1, 8);
    if (!t || !data) {
      free(t);
      free(data);
      st = kl_fail(a->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      break;
    }
    t->dtype = TYPE(a, y)->dtype;
    t->rank = 1;
    t->dims[0] = 1;
    t->data = data;
    st = kl_node_set_tensor(a->g, k, "value", t, a->e);
    parts[i] = z;
  }
  int k, out;
  if (st == KILN_OK && (k = kl_ad_node(a, n, KL_OP_Concat, m, parts, 1, &out)) < 0)
    st = a->e->code;
  int axis = 0;
  kl_infer_ctx ic = {.e = a->e};
  if (st == KILN_OK)
    st = kl_norm_axis(&ic, kl_attr_int(NODE(a, n), "axis", 0), r, "axis", &axis);
  if (st == KILN_OK) st = kl_node_set_int(a->g, k, "axis", axis, a->e);
  if (st == KILN_OK) st = give(a, IN(a, n, 0), out);
  free(parts);
  return st;
}

static kiln_status r_slice(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0)) return KILN_OK;
  const kl_node *node = NODE(a, n);
  int in[6] = {dy[0], IN(a, n, 0), -1, -1, -1, -1};
  int count = node->n_in + 1;
  for (int k = 1; k < node->n_in && k < 5; k++) in[k + 1] = node->in[k];
  int dx = op1(a, n, KL_OP_KilnSliceGrad, count > 6 ? 6 : count, in);
  return give(a, IN(a, n, 0), dx);
}

/* Pad of constant mode with constant non-negative pads: dY sliced back to X. */
static kiln_status r_pad(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0)) return KILN_OK;
  const kl_node *node = NODE(a, n);
  int x = IN(a, n, 0), r = rank_of(a, x);
  const char *mode = kl_attr_string(node, "mode", "constant");
  const kl_value *pads = kl_rw_const(a->g, IN(a, n, 1));
  const kl_value *axv = IN(a, n, 3) >= 0 ? kl_rw_const(a->g, IN(a, n, 3)) : NULL;
  int64_t np = 0, na = 0;
  if (strcmp(mode, "constant") != 0 || !pads || r < 0 || (IN(a, n, 3) >= 0 && !axv) ||
      !kl_type_numel(&pads->type, &np) || (axv && !kl_type_numel(&axv->type, &na)))
    return fail_node(a, n, KILN_ERR_UNSUPPORTED, "the gradient of Pad is implemented for "
                     "mode constant with constant pads (and axes) only");
  int64_t axes[KL_MAX_RANK], starts[KL_MAX_RANK], ends[KL_MAX_RANK];
  int count = (int)(np / 2);
  if (count > KL_MAX_RANK || (axv && na != count) || (!axv && count != r))
    return fail_node(a, n, KILN_ERR_INVALID_MODEL, "pads do not match the axes");
  for (int i = 0; i < count; i++) {
    int64_t b = kl_load_i64(pads->data, pads->type.dtype, (size_t)i);
    int64_t e = kl_load_i64(pads->data, pads->type.dtype, (size_t)(i + count));
    if (b < 0 || e < 0)
      return fail_node(a, n, KILN_ERR_UNSUPPORTED, "the gradient of Pad is implemented for "
                       "non-negative pads only (these crop)");
    axes[i] = axv ? kl_load_i64(axv->data, axv->type.dtype, (size_t)i) : i;
    starts[i] = b;
    ends[i] = e == 0 ? INT64_MAX : -e;
  }
  int in[4] = {dy[0], kl_ad_ints(a, starts, count), kl_ad_ints(a, ends, count),
               kl_ad_ints(a, axes, count)};
  if (in[1] < 0 || in[2] < 0 || in[3] < 0) return a->e->code;
  return give(a, x, op1(a, n, KL_OP_Slice, 4, in));
}

static kiln_status r_gather(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0)) return KILN_OK;
  int in[3] = {dy[0], IN(a, n, 1), IN(a, n, 0)}, k;
  int dx = op1_node(a, n, KL_OP_KilnGatherGrad, 3, in, &k);
  if (dx < 0) return a->e->code;
  kiln_status st = kl_node_set_int(a->g, k, "axis", kl_attr_int(NODE(a, n), "axis", 0), a->e);
  return st == KILN_OK ? give(a, IN(a, n, 0), dx) : st;
}

/* dY routed by a bool cond to inputs kx (where true) and ky (where false) of node n,
 * each summed to its shape: Where's gradient, and Max/Min's with cond their choice. */
static kiln_status route_grads(kl_ad *a, int n, int cond, int kx, int ky, int d) {
  int zero = kl_ad_scalar(a, TYPE(a, OUT(a, n, 0))->dtype, 0.0);
  if (zero < 0) return a->e->code;
  kiln_status st = KILN_OK;
  if (kl_ad_wants(a, n, kx)) {
    int in[3] = {cond, d, zero};
    st = give(a, IN(a, n, kx), sum_to(a, n, op1(a, n, KL_OP_Where, 3, in), IN(a, n, kx)));
  }
  if (st == KILN_OK && kl_ad_wants(a, n, ky)) {
    int in[3] = {cond, zero, d};
    st = give(a, IN(a, n, ky), sum_to(a, n, op1(a, n, KL_OP_Where, 3, in), IN(a, n, ky)));
  }
  return st;
}

static kiln_status r_where(kl_ad *a, int n, const int *dy) {
  return route_grads(a, n, IN(a, n, 0), 1, 2, dy[0]);
}

/* Sum and Mean of any number of inputs: each gets dY (divided by the count for Mean),
 * summed to its shape. */
static kiln_status r_sum_mean(kl_ad *a, int n, const int *dy) {
  int m = NODE(a, n)->n_in;
  int d = dy[0];
  if (NODE(a, n)->op == KL_OP_Mean && m > 1)
    d = bin(a, n, KL_OP_Div, d, kl_ad_scalar(a, TYPE(a, OUT(a, n, 0))->dtype, (double)m));
  kiln_status st = d < 0 ? a->e->code : KILN_OK;
  for (int k = 0; k < m && st == KILN_OK; k++)
    if (kl_ad_wants(a, n, k)) st = give(a, IN(a, n, k), sum_to(a, n, d, IN(a, n, k)));
  return st;
}

/* Max and Min of two inputs: dY goes to the one chosen (the first on a tie). */
static kiln_status r_max_min(kl_ad *a, int n, const int *dy) {
  if (NODE(a, n)->n_in != 2)
    return fail_node(a, n, KILN_ERR_UNSUPPORTED, "the gradient of Max/Min is implemented for "
                     "two inputs");
  kl_op cmp = NODE(a, n)->op == KL_OP_Max ? KL_OP_GreaterOrEqual : KL_OP_LessOrEqual;
  int first = bin(a, n, cmp, IN(a, n, 0), IN(a, n, 1)); /* input 0 chosen */
  if (first < 0) return a->e->code;
  return route_grads(a, n, first, 0, 1, dy[0]);
}

/* ReduceMax/ReduceMin (constant axes) and GlobalMaxPool: dY goes to every element
 * equal to the result (all of them on a tie). */
static kiln_status r_reduce_extreme(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0)) return KILN_OK;
  const kl_node *node = NODE(a, n);
  int x = IN(a, n, 0), r = rank_of(a, x), yv = OUT(a, n, 0), d = dy[0];
  bool keep = node->op == KL_OP_GlobalMaxPool || kl_attr_int(node, "keepdims", 1) != 0;
  if (r < 0) return fail_node(a, n, KILN_ERR_UNSUPPORTED, "input of unknown rank");
  if (!keep) {
    int64_t axes[KL_MAX_RANK];
    int m = 0;
    const kl_value *c = IN(a, n, 1) >= 0 ? kl_rw_const(a->g, IN(a, n, 1)) : NULL;
    int64_t cnt = 0;
    if (IN(a, n, 1) >= 0 && (!c || !kl_type_numel(&c->type, &cnt) || cnt > KL_MAX_RANK))
      return fail_node(a, n, KILN_ERR_UNSUPPORTED, "the gradient of a reduction is "
                       "implemented for constant axes only");
    for (int64_t i = 0; i < cnt; i++) {
      int64_t v = kl_load_i64(c->data, c->type.dtype, (size_t)i);
      axes[m++] = v < 0 ? v + r : v;
    }
    if (m == 0)
      for (int i = 0; i < r; i++) axes[m++] = i;
    int ax = kl_ad_ints(a, axes, m);
    int in1[2] = {yv, ax}, in2[2] = {d, ax};
    yv = ax < 0 ? -1 : op1(a, n, KL_OP_Unsqueeze, 2, in1);
    d = yv < 0 ? -1 : op1(a, n, KL_OP_Unsqueeze, 2, in2);
    if (d < 0) return a->e->code;
  }
  int hit = bin(a, n, KL_OP_Equal, x, yv);
  int zero = kl_ad_scalar(a, TYPE(a, x)->dtype, 0.0);
  int in[3] = {hit, d, zero};
  return give(a, x, hit < 0 || zero < 0 ? -1 : op1(a, n, KL_OP_Where, 3, in));
}

/* ---- recurrent ---- */

/* LSTM and GRU: kiln.LSTMGrad / kiln.GRUGrad walk the sequence back (backpropagation
 * through time) from the gradients of Y, Y_h (and Y_c) to those of X, W, R, B and the
 * initial states. They take the forward node's inputs in its own slots and its
 * attributes; the forms they do not differentiate are refused here, at trainer
 * creation. */
static kiln_status r_rnn(kl_ad *a, int n, const int *dy) {
  const kl_node *node = NODE(a, n);
  bool lstm = node->op == KL_OP_LSTM;
  kl_rnn r;
  kiln_status st = kl_rnn_init(node, &r, a->e);
  if (st != KILN_OK) {
    char msg[sizeof a->e->msg];
    memcpy(msg, a->e->msg, sizeof msg);
    return fail_node(a, n, st, msg);
  }
  const char *why = kl_rnn_grad_unsupported(&r);
  if (!why && lstm && IN(a, n, 7) >= 0) why = "peepholes (input P)";
  if (why) {
    char msg[512];
    snprintf(msg, sizeof msg, "the gradient of %s is implemented for layout 0, the default "
             "activations (Sigmoid, Tanh%s), no clip%s; this node has %s",
             kl_op_name(node->op), lstm ? ", Tanh" : "",
             lstm ? ", input_forget 0, without peepholes" : "", why);
    return fail_node(a, n, KILN_ERR_UNSUPPORTED, msg);
  }
  int n_fwd = lstm ? 8 : 6, n_dy = lstm ? 3 : 2, n_out = lstm ? 6 : 5;
  int in[11], out[6];
  for (int k = 0; k < n_fwd; k++) in[k] = IN(a, n, k);
  for (int k = 0; k < n_dy; k++) in[n_fwd + k] = k < node->n_out ? dy[k] : KL_ABSENT;
  int k = kl_ad_node(a, n, lstm ? KL_OP_KilnLSTMGrad : KL_OP_KilnGRUGrad, n_fwd + n_dy, in,
                     n_out, out);
  if (k < 0) return a->e->code;
  st = kl_ad_copy_attrs(a, n, k);
  static const int slot[6] = {0, 1, 2, 3, 5, 6}; /* dX, dW, dR, dB, dinitial_h, _c */
  for (int i = 0; i < n_out && st == KILN_OK; i++)
    if (kl_ad_wants(a, n, slot[i])) st = give(a, IN(a, n, slot[i]), out[i]);
  return st;
}

/* ---- losses ---- */

static kiln_status r_loss(kl_ad *a, int n, const int *dy) {
  if (!kl_ad_wants(a, n, 0)) return KILN_OK;
  const kl_node *node = NODE(a, n);
  int in[4] = {dy[0], node->in[0], node->in[1], node->n_in > 2 ? node->in[2] : -1}, k;
  int dx = op1_node(a, n, KL_OP_KilnLossGrad, in[3] >= 0 ? 4 : 3, in, &k);
  if (dx < 0) return a->e->code;
  kiln_status st = kl_ad_copy_attrs(a, n, k);
  return st == KILN_OK ? give(a, IN(a, n, 0), dx) : st;
}

/* ---- the table ---- */

kl_grad_rule kl_grad_rule_of(kl_op op) {
  switch (op) {
  case KL_OP_Identity: return r_identity;
  case KL_OP_Cast: return r_cast;
  case KL_OP_Add:
  case KL_OP_Sub: return r_add_sub;
  case KL_OP_Mul: return r_mul;
  case KL_OP_Div: return r_div;
  case KL_OP_Neg: return r_neg;
  case KL_OP_Pow: return r_pow;
  case KL_OP_Relu:
  case KL_OP_LeakyRelu:
  case KL_OP_Elu:
  case KL_OP_Selu:
  case KL_OP_Sigmoid:
  case KL_OP_HardSigmoid:
  case KL_OP_HardSwish:
  case KL_OP_Tanh:
  case KL_OP_Softplus:
  case KL_OP_Softsign:
  case KL_OP_Exp:
  case KL_OP_Log:
  case KL_OP_Sqrt:
  case KL_OP_Reciprocal:
  case KL_OP_Abs:
  case KL_OP_Erf:
  case KL_OP_Gelu:
  case KL_OP_Sin:
  case KL_OP_Cos:
  case KL_OP_Mish:
  case KL_OP_Swish:
  case KL_OP_Clip: return r_unary;
  case KL_OP_Softmax:
  case KL_OP_LogSoftmax: return r_softmax;
  case KL_OP_MatMul: return r_matmul;
  case KL_OP_Gemm: return r_gemm;
  case KL_OP_Conv: return r_conv;
  case KL_OP_MaxPool:
  case KL_OP_AveragePool: return r_pool;
  case KL_OP_GlobalAveragePool: return r_global_pool;
  case KL_OP_ReduceSum:
  case KL_OP_ReduceMean: return r_reduce;
  case KL_OP_LayerNormalization: return r_layernorm;
  case KL_OP_InstanceNormalization:
  case KL_OP_GroupNormalization: return r_channel_norm;
  case KL_OP_Tile: return r_tile;
  case KL_OP_Resize: return r_resize;
  case KL_OP_Reshape:
  case KL_OP_Flatten:
  case KL_OP_Squeeze:
  case KL_OP_Unsqueeze: return r_reshape;
  case KL_OP_Expand: return r_expand;
  case KL_OP_Transpose: return r_transpose;
  case KL_OP_Concat: return r_concat;
  case KL_OP_Split: return r_split;
  case KL_OP_Slice: return r_slice;
  case KL_OP_Pad: return r_pad;
  case KL_OP_Gather: return r_gather;
  case KL_OP_Where: return r_where;
  case KL_OP_Sum:
  case KL_OP_Mean: return r_sum_mean;
  case KL_OP_Max:
  case KL_OP_Min: return r_max_min;
  case KL_OP_ReduceMax:
  case KL_OP_ReduceMin:
  case KL_OP_GlobalMaxPool: return r_reduce_extreme;
  case KL_OP_KilnBatchNormTrain: return r_batchnorm_train;
  case KL_OP_KilnDropoutTrain: return r_dropout_train;
  case KL_OP_LSTM:
  case KL_OP_GRU: return r_rnn;
  case KL_OP_KilnLoss: return r_loss;
  default: return NULL;
  }
}
