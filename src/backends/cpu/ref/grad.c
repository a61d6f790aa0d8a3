/* Reference kernels of the gradient ops (ops.def, "gradient ops"; the losses are in
 * loss_train.c). Each computes in double whatever the storage dtype; a gradient that
 * many elements add into (SumTo, ConvGradX, GatherGrad, ...) is accumulated in a
 * double buffer of the output's size and rounded once. Inputs named "Like" give only
 * their shape. Shapes were checked by infer_grad.c.
 */
#include "backends/cpu/ref/ref.h"
#include "ir/grad.h"
#include "ir/data_plan.h"
#include "ir/infer_common.h"

#include <math.h>
#include <stdlib.h>

/* n zeroed doubles (n fits: it is an output's element count, below 2^59). */
static double *accumulators(kl_kernel_ctx *c, int64_t n) {
  double *p = calloc(n > 0 ? (size_t)n : 1, sizeof *p);
  if (!p)
    kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for %lld gradient accumulators",
            (long long)n);
  return p;
}

/* t = acc, rounded to t's dtype; frees acc. */
static kiln_status store_all(kl_tensor *t, double *acc) {
  int64_t n = kl_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) kl_ref_store(t->data, t->dtype, i, acc[i]);
  free(acc);
  return KILN_OK;
}

static double sigmoid(double x) {
  if (x >= 0) return 1 / (1 + exp(-x));
  double e = exp(x);
  return e / (1 + e);
}

static double softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }

/* ---- SumTo: dX [Like's shape] = dY [a shape Like broadcasts to] summed over every
 * position that broadcasts from each element of dX ---- */

int kl_ref_sum_to(kl_kernel_ctx *c) {
  const kl_tensor *dy = c->in[0];
  kl_tensor *dx = c->out[0];
  double *acc = accumulators(c, kl_tensor_numel(dx));
  if (!acc) return KILN_ERR_OUT_OF_MEMORY;
  kl_ref_iter it;
  kl_ref_iter_init(&it, dy->rank, dy->dims);
  kl_ref_iter_bcast(&it, 0, dx->rank, dx->dims, 1);
  int64_t n = kl_tensor_numel(dy);
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it))
    acc[it.off[0]] += kl_ref_load(dy->data, dy->dtype, i);
  return store_all(dx, acc);
}

/* ---- UnaryGrad: dX = dY * f'(X), f the forward op named by "op" ---- */

/* f'(x) for the rules that need only x; y is the forward output or NaN when absent. */
#define SQRT1_2 0.70710678118654752440
#define TWO_OVER_SQRTPI 1.12837916709551257390

static double gelu_slope(double x, bool tanh_form) {
  if (!tanh_form) /* Phi(x) + x phi(x) */
    return 0.5 * (1 + erf(x * SQRT1_2)) + x * exp(-0.5 * x * x) * (0.5 * TWO_OVER_SQRTPI * SQRT1_2);
  const double k = 0.79788456080286535588, kappa = 0.044715; /* k = sqrt(2 / pi) */
  double t = tanh(k * (x + kappa * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * kappa * x * x);
}

static double unary_slope(const kl_unary_grad *u, double x, double y, bool has_y) {
  switch (u->op) {
  case KL_UG_RELU: return x > 0 ? 1 : 0;
  case KL_UG_LEAKY_RELU: return x > 0 ? 1 : u->alpha;
  case KL_UG_ELU: return x > 0 ? 1 : u->alpha * exp(x);
  case KL_UG_SELU: return x > 0 ? u->gamma : u->gamma * u->alpha * exp(x);
  case KL_UG_SIGMOID: {
    double s = has_y ? y : sigmoid(x);
    return s * (1 - s);
  }
  case KL_UG_HARD_SIGMOID: {
    double v = u->alpha * x + u->beta;
    return v > 0 && v < 1 ? u->alpha : 0;
  }
  case KL_UG_HARD_SWISH: return x < -3 ? 0 : x <= 3 ? x / 3 + 0.5 : 1;
  case KL_UG_TANH: {
    double t = has_y ? y : tanh(x);
    return 1 - t * t;
  }
  case KL_UG_SOFTPLUS: return sigmoid(x);
  case KL_UG_SOFTSIGN: {
    double d = 1 + fabs(x);
    return 1 / (d * d);
  }
  case KL_UG_EXP: return has_y ? y : exp(x);
  case KL_UG_LOG: return 1 / x;
  case KL_UG_SQRT: return 0.5 / sqrt(x);
  case KL_UG_RECIPROCAL: return -1 / (x * x);
  case KL_UG_ABS: return isnan(x) ? x : (x > 0) - (x < 0);
  case KL_UG_ERF: return TWO_OVER_SQRTPI * exp(-x * x);
  case KL_UG_GELU: return gelu_slope(x, u->tanh_gelu);
  case KL_UG_SIN: return cos(x);
  case KL_UG_COS: return -sin(x);
  case KL_UG_MISH: {
    double t = tanh(softplus(x));
    return t + x * sigmoid(x) * (1 - t * t);
  }
  case KL_UG_SILU: {
    double s = sigmoid(x);
    return s * (1 + x * (1 - s));
  }
  case KL_UG_SWISH: {
    double s = sigmoid(u->alpha * x);
    return s + u->alpha * x * s * (1 - s);
  }
  case KL_UG_CLIP: return x >= u->alpha && x <= u->beta ? 1 : 0;
  case KL_UG_COUNT: break;
  }
  return NAN;
}

int kl_ref_unary_grad(kl_kernel_ctx *c) {
  kl_unary_grad u;
  kiln_status st = kl_unary_grad_read(c->node, &u, c->e);
  if (st != KILN_OK) return st;
  const kl_tensor *dy = c->in[0], *x = c->in[1];
  const kl_tensor *y = c->n_in > 2 && kl_unary_grad_uses_y(u.op) ? c->in[2] : NULL;
  kl_tensor *dx = c->out[0];
  int64_t n = kl_tensor_numel(dx);
  for (int64_t i = 0; i < n; i++) {
    double yv = y ? kl_ref_load(y->data, y->dtype, i) : 0;
    double slope = unary_slope(&u, kl_ref_load(x->data, x->dtype, i), yv, y != NULL);
    /* where the rule's slope is 0 the gradient is 0, an infinite dY included (PyTorch) */
    kl_ref_store(dx->data, dx->dtype, i, slope == 0 ? 0 : kl_ref_load(dy->data, dy->dtype, i) * slope);
  }
  return KILN_OK;
}

/* ---- SoftmaxGrad: along the axis, viewed as [outer, len, inner],
 *   log 0 (Softmax):    dX = Y * (dY - sum(dY * Y))
 *   log 1 (LogSoftmax): dX = dY - exp(Y) * sum(dY) ---- */

static void softmax_grad_row(const kl_tensor *dy, const kl_tensor *y, kl_tensor *dx,
                             int64_t base, int64_t len, int64_t step, bool log_form) {
  double s = 0;
  for (int64_t j = 0, at = base; j < len; j++, at += step) {
    double g = kl_ref_load(dy->data, dy->dtype, at);
    s += log_form ? g : g * kl_ref_load(y->data, y->dtype, at);
  }
  for (int64_t j = 0, at = base; j < len; j++, at += step) {
    double g = kl_ref_load(dy->data, dy->dtype, at), v = kl_ref_load(y->data, y->dtype, at);
    kl_ref_store(dx->data, dx->dtype, at, log_form ? g - exp(v) * s : v * (g - s));
  }
}

int kl_ref_softmax_grad(kl_kernel_ctx *c) {
  const kl_tensor *dy = c->in[0], *y = c->in[1];
  int64_t a = kl_attr_int(c->node, "axis", -1);
  int axis = (int)(a < 0 ? a + y->rank : a);
  int64_t outer = kl_ref_span(y->dims, 0, axis), len = y->dims[axis];
  int64_t inner = kl_ref_span(y->dims, axis + 1, y->rank);
  bool log_form = kl_attr_int(c->node, "log", 0) != 0;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++)
      softmax_grad_row(dy, y, c->out[0], o * len * inner + i, len, inner, log_form);
  return KILN_OK;
}

/* ---- ReduceGrad: dX [XLike's shape] = dY broadcast back over the reduced axes
 * (re-inserted as 1s when keepdims was 0), divided by their element count when mean ---- */

int kl_ref_reduce_grad(kl_kernel_ctx *c) {
  const kl_tensor *dy = c->in[0], *x = c->in[1];
  kl_tensor *dx = c->out[0];
  const int64_t *axes;
  int n_axes = kl_attr_ints(c->node, "axes", &axes);
  bool reduced[KL_MAX_RANK];
  for (int d = 0; d < x->rank; d++) reduced[d] = n_axes <= 0;
  for (int k = 0; k < n_axes; k++) reduced[axes[k] < 0 ? axes[k] + x->rank : axes[k]] = true;
  int64_t kept[KL_MAX_RANK], count = 1; /* dY's dims with the reduced axes as 1s */
  for (int d = 0; d < x->rank; d++) {
    kept[d] = reduced[d] ? 1 : x->dims[d];
    if (reduced[d]) count *= x->dims[d];
  }
  double scale = kl_attr_int(c->node, "mean", 0) ? 1.0 / (double)count : 1.0;
  kl_ref_iter it;
  kl_ref_iter_init(&it, x->rank, x->dims);
  kl_ref_iter_bcast(&it, 0, x->rank, kept, 1);
  int64_t n = kl_tensor_numel(dx);
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it))
    kl_ref_store(dx->data, dx->dtype, i, kl_ref_load(dy->data, dy->dtype, it.off[0]) * scale);
  return KILN_OK;
}

/* ---- ConvGradX and ConvGradW ----
 * For the forward Conv Y [N, M, o] = sum over c in m's group, k of
 * X[n, c, o * stride - pad + k * dilation] * W[m, c', k]:
 *   ConvGradX (dY, W, XLike) -> dX[n, c, i] = sum of dY[n, m, o] W[m, c', k] over the
 *     (m, o, k) whose tap lands on i;
 *   ConvGradW (X, dY, WLike) -> dW[m, c', k] = sum over n, o of dY[n, m, o] X[n, c, tap].
 * Both walk every (n, m, o, c', k) once, as the forward kernel does. */

/* The window of the forward op over x producing y (only their dims are read). */
static kiln_status forward_window(kl_kernel_ctx *c, const kl_tensor *x, const kl_tensor *y,
                                  const int64_t *kernel, kl_ref_window *g) {
  kl_tensor yy = *y;
  const kl_tensor *in[1] = {x};
  kl_tensor *out[1] = {&yy};
  kl_kernel_ctx f = *c;
  f.n_in = f.n_out = 1;
  f.in = in;
  f.out = out;
  return kl_ref_window_init(&f, kernel, g);
}

typedef struct conv_grad_args {
  const kl_tensor *dy, *x, *w; /* x or w is the shape of the gradient being made */
  kl_ref_window g;
  int64_t cin_per_group, cout_per_group;
  double *acc;
  bool to_x; /* ConvGradX: acc is dX, else dW */
} conv_grad_args;

/* Input coordinate of output position o and tap k along dim i, -1 in the padding. */
static int64_t conv_tap(const kl_ref_window *g, int i, int64_t o, int64_t k) {
  int64_t p = o * g->stride[i] - g->pad_begin[i] + k * g->dilation[i];
  return p >= 0 && p < g->in[i] ? p : -1;
}

/* dY[n, m, o] = dy into every tap of one input channel's window. */
static void conv_grad_channel(const conv_grad_args *a, double dy, int64_t xplane,
                              int64_t wplane, const int64_t *o) {
  const kl_ref_window *g = &a->g;
  for (int64_t k0 = 0; k0 < g->kernel[0]; k0++) {
    int64_t i0 = conv_tap(g, 0, o[0], k0);
    for (int64_t k1 = 0; i0 >= 0 && k1 < g->kernel[1]; k1++) {
      int64_t i1 = conv_tap(g, 1, o[1], k1);
      for (int64_t k2 = 0; i1 >= 0 && k2 < g->kernel[2]; k2++) {
        int64_t i2 = conv_tap(g, 2, o[2], k2);
        if (i2 < 0) continue;
        int64_t xi = xplane + kl_ref_at3(g->in, i0, i1, i2);
        int64_t wi = wplane + kl_ref_at3(g->kernel, k0, k1, k2);
        if (a->to_x) a->acc[xi] += dy * kl_ref_load(a->w->data, a->w->dtype, wi);
        else a->acc[wi] += dy * kl_ref_load(a->x->data, a->x->dtype, xi);
      }
    }
  }
}

static void conv_grad_point(const conv_grad_args *a, int64_t n, int64_t m, const int64_t *o,
                            double dy) {
  const kl_ref_window *g = &a->g;
  int64_t xsize = kl_ref_span(g->in, 0, 3), wsize = kl_ref_span(g->kernel, 0, 3);
  int64_t c0 = m / a->cout_per_group * a->cin_per_group;
  for (int64_t ci = 0; ci < a->cin_per_group; ci++)
    conv_grad_channel(a, dy, (n * a->x->dims[1] + c0 + ci) * xsize,
                      (m * a->cin_per_group + ci) * wsize, o);
}

static int conv_grad(kl_kernel_ctx *c, conv_grad_args *a) {
  kiln_status st = forward_window(c, a->x, a->dy, a->w->dims + 2, &a->g);
  if (st != KILN_OK) return st;
  kl_tensor *out = c->out[0];
  a->cin_per_group = a->w->dims[1];
  a->cout_per_group = a->w->dims[0] / kl_attr_int(c->node, "group", 1);
  a->acc = accumulators(c, kl_tensor_numel(out));
  if (!a->acc) return KILN_ERR_OUT_OF_MEMORY;
  const kl_tensor *dy = a->dy;
  int64_t i = 0, o[3];
  for (int64_t n = 0; n < dy->dims[0]; n++)
    for (int64_t m = 0; m < dy->dims[1]; m++)
      for (o[0] = 0; o[0] < a->g.out[0]; o[0]++)
        for (o[1] = 0; o[1] < a->g.out[1]; o[1]++)
          for (o[2] = 0; o[2] < a->g.out[2]; o[2]++)
            conv_grad_point(a, n, m, o, kl_ref_load(dy->data, dy->dtype, i++));
  return store_all(out, a->acc);
}

int kl_ref_conv_grad_x(kl_kernel_ctx *c) {
  conv_grad_args a = {.dy = c->in[0], .w = c->in[1], .x = c->out[0], .to_x = true};
  return conv_grad(c, &a);
}

int kl_ref_conv_grad_w(kl_kernel_ctx *c) {
  conv_grad_args a = {.x = c->in[0], .dy = c->in[1], .w = c->out[0], .to_x = false};
  return conv_grad(c, &a);
}

/* ---- MaxPoolGrad (dY, X) and AveragePoolGrad (dY, XLike) ----
 * Each dY element goes to its window over X (taps o * stride - pad + k * dilation):
 * MaxPool's to the window's maximum, found as PyTorch's CPU kernel does (taps in scan
 * order, a later one wins when greater or NaN: the first of equal maxima, the last
 * NaN; the first tap inside X when nothing is greater than -inf); AveragePool's
 * divided evenly over the taps inside X by the count the forward op divides by (the
 * taps inside X, or with count_include_pad inside the padded input). */

static int64_t pool_tap(const kl_ref_window *g, int i, int64_t o, int64_t k) {
  return o * g->stride[i] - g->pad_begin[i] + k * g->dilation[i];
}

/* The taps of output position o along dim i that land in [lo, hi): [*k0, *k1). */
static void pool_taps(const kl_ref_window *g, int i, int64_t o, int64_t lo, int64_t hi,
                      int64_t *k0, int64_t *k1) {
  kl_ref_tap_span(pool_tap(g, i, o, 0), g->kernel[i], g->dilation[i], lo, hi, k0, k1);
}

typedef struct pool_grad_args {
  const kl_tensor *x; /* MaxPool's X (read) */
  kl_ref_window g;
  bool is_max, include_pad;
  double *acc;
} pool_grad_args;

static void pool_grad_window(const pool_grad_args *a, int64_t xplane, const int64_t *o,
                             double dy) {
  const kl_ref_window *g = &a->g;
  int64_t from[3], to[3], k[3];
  double padded = 1;
  for (int i = 0; i < 3; i++) {
    int64_t p0, p1;
    pool_taps(g, i, o[i], -g->pad_begin[i], g->in[i] + g->pad_end[i], &p0, &p1);
    padded *= (double)(p1 - p0);
    pool_taps(g, i, o[i], 0, g->in[i], &from[i], &to[i]);
    if (from[i] >= to[i]) return; /* no tap inside X */
  }
  double inside = (double)((to[0] - from[0]) * (to[1] - from[1]) * (to[2] - from[2]));
  double share = dy / (a->include_pad ? padded : inside), max = -INFINITY;
  int64_t best = -1;
  for (k[0] = from[0]; k[0] < to[0]; k[0]++)
    for (k[1] = from[1]; k[1] < to[1]; k[1]++)
      for (k[2] = from[2]; k[2] < to[2]; k[2]++) {
        int64_t at = xplane + kl_ref_at3(g->in, pool_tap(g, 0, o[0], k[0]),
                                         pool_tap(g, 1, o[1], k[1]), pool_tap(g, 2, o[2], k[2]));
        if (!a->is_max) {
          a->acc[at] += share;
          continue;
        }
        double v = kl_ref_load(a->x->data, a->x->dtype, at);
        if (best < 0) best = at;
        if (v > max || isnan(v)) {
          max = v;
          best = at;
        }
      }
  if (a->is_max) a->acc[best] += dy;
}

static int pool_grad(kl_kernel_ctx *c, bool is_max) {
  const kl_tensor *dy = c->in[0];
  pool_grad_args a = {.x = c->in[1], .is_max = is_max};
  kiln_status st = forward_window(c, c->in[1], dy, NULL, &a.g);
  if (st != KILN_OK) return st;
  a.include_pad = kl_attr_int(c->node, "count_include_pad", 0) != 0;
  a.acc = accumulators(c, kl_tensor_numel(c->out[0]));
  if (!a.acc) return KILN_ERR_OUT_OF_MEMORY;
  int64_t planes = dy->dims[0] * dy->dims[1], xsize = kl_ref_span(a.g.in, 0, 3), i = 0, o[3];
  for (int64_t p = 0; p < planes; p++)
    for (o[0] = 0; o[0] < a.g.out[0]; o[0]++)
      for (o[1] = 0; o[1] < a.g.out[1]; o[1]++)
        for (o[2] = 0; o[2] < a.g.out[2]; o[2]++)
          pool_grad_window(&a, p * xsize, o, kl_ref_load(dy->data, dy->dtype, i++));
  return store_all(c->out[0], a.acc);
}

int kl_ref_max_pool_grad(kl_kernel_ctx *c) { return pool_grad(c, true); }
int kl_ref_average_pool_grad(kl_kernel_ctx *c) { return pool_grad(c, false); }

/* ---- BatchNormTrain and BatchNormGrad ----
 * X [N, C, spatial...] viewed as [N, C, inner]; per channel over its n = N * inner
 * values: mean, biased variance var, xhat = (x - mean) / sqrt(var + epsilon).
 * BatchNormTrain: Y = xhat * scale + B; new_running_mean = running_mean * momentum +
 *   mean * (1 - momentum), new_running_var likewise with the unbiased variance
 *   var * n / (n - 1) (PyTorch; n must be at least 2).
 * BatchNormGrad: dB = sum dY, dScale = sum dY * xhat,
 *   dX = scale / sqrt(var + epsilon) * (dY - dB / n - xhat * dScale / n). */

typedef struct channel_view {
  int64_t batch, channels, inner;
} channel_view;

static channel_view channels_of(const kl_tensor *x) {
  return (channel_view){x->dims[0], x->dims[1], kl_ref_span(x->dims, 2, x->rank)};
}

/* Mean and biased variance of channel ch of x. */
static void channel_stats(const kl_tensor *x, channel_view v, int64_t ch, double *mean,
                          double *var) {
  double sum = 0, sq = 0, n = (double)(v.batch * v.inner);
  for (int64_t b = 0; b < v.batch; b++)
    for (int64_t j = 0, at = (b * v.channels + ch) * v.inner; j < v.inner; j++)
      sum += kl_ref_load(x->data, x->dtype, at + j);
  *mean = sum / n;
  for (int64_t b = 0; b < v.batch; b++)
    for (int64_t j = 0, at = (b * v.channels + ch) * v.inner; j < v.inner; j++) {
      double d = kl_ref_load(x->data, x->dtype, at + j) - *mean;
      sq += d * d;
    }
  *var = sq / n;
}

int kl_ref_batchnorm_train(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *scale = c->in[1], *bias = c->in[2];
  channel_view v = channels_of(x);
  if (v.channels == 0) return KILN_OK; /* every output empty; N * inner may not fit */
  int64_t n = v.batch * v.inner; /* at most X's element count */
  if (n < 2)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 0 (X) has %lld values per channel; training "
                   "needs more than 1 (the unbiased variance divides by n - 1)", (long long)n);
  double eps = kl_attr_float(c->node, "epsilon", 1e-5f);
  double momentum = kl_attr_float(c->node, "momentum", 0.9f);
  kl_tensor *y = c->out[0];
  for (int64_t ch = 0; ch < v.channels; ch++) {
    double mean, var;
    channel_stats(x, v, ch, &mean, &var);
    double k = kl_ref_load(scale->data, scale->dtype, ch) / sqrt(var + eps);
    double b0 = kl_ref_load(bias->data, bias->dtype, ch);
    for (int64_t b = 0; b < v.batch; b++)
      for (int64_t j = 0, at = (b * v.channels + ch) * v.inner; j < v.inner; j++)
        kl_ref_store(y->data, y->dtype, at + j, (kl_ref_load(x->data, x->dtype, at + j) - mean) * k + b0);
    double stat[2] = {mean, var * (double)n / (double)(n - 1)};
    for (int s = 0; s < 2 && s + 1 < c->n_out; s++) {
      const kl_tensor *old = c->in[3 + s];
      kl_ref_store(c->out[1 + s]->data, c->out[1 + s]->dtype, ch,
                   kl_ref_load(old->data, old->dtype, ch) * momentum + stat[s] * (1 - momentum));
    }
  }
  return KILN_OK;
}

int kl_ref_batchnorm_grad(kl_kernel_ctx *c) {
  const kl_tensor *dy = c->in[0], *x = c->in[1], *scale = c->in[2];
  channel_view v = channels_of(x);
  if (v.channels == 0) return KILN_OK; /* every output empty; N * inner may not fit */
  /* at most X's element count; with no value per channel ([2^40, 3, 0]) dX is empty and
   * dScale, dB are 0: no row is visited */
  int64_t count = v.batch * v.inner;
  double n = (double)count, eps = kl_attr_float(c->node, "epsilon", 1e-5f);
  kl_tensor *dx = c->out[0];
  if (count == 0) v.batch = 0;
  for (int64_t ch = 0; ch < v.channels; ch++) {
    double mean, var, sum_dy = 0, sum_dy_xhat = 0;
    if (n > 0) channel_stats(x, v, ch, &mean, &var);
    else mean = var = 0;
    double invstd = 1 / sqrt(var + eps);
    for (int64_t b = 0; b < v.batch; b++)
      for (int64_t j = 0, at = (b * v.channels + ch) * v.inner; j < v.inner; j++) {
        double g = kl_ref_load(dy->data, dy->dtype, at + j);
        sum_dy += g;
        sum_dy_xhat += g * (kl_ref_load(x->data, x->dtype, at + j) - mean) * invstd;
      }
    double k = kl_ref_load(scale->data, scale->dtype, ch) * invstd;
    for (int64_t b = 0; b < v.batch; b++)
      for (int64_t j = 0, at = (b * v.channels + ch) * v.inner; j < v.inner; j++) {
        double xhat = (kl_ref_load(x->data, x->dtype, at + j) - mean) * invstd;
        double g = kl_ref_load(dy->data, dy->dtype, at + j);
        kl_ref_store(dx->data, dx->dtype, at + j, k * (g - sum_dy / n - xhat * sum_dy_xhat / n));
      }
    if (c->n_out > 1) kl_ref_store(c->out[1]->data, c->out[1]->dtype, ch, sum_dy_xhat);
    if (c->n_out > 2) kl_ref_store(c->out[2]->data, c->out[2]->dtype, ch, sum_dy);
  }
  return KILN_OK;
}

/* ---- LayerNormGrad (dY, X, scale) -> dX, dScale, dB ----
 * X viewed as [rows, cols], cols the normalized dims axis..rank-1; per row: mean, biased
 * variance, r = 1 / sqrt(var + epsilon), xhat = (x - mean) r, g = dY * scale (scale
 * broadcast to the normalized dims):
 *   dX = r (g - mean(g) - xhat mean(g xhat)); dScale = sum over rows of dY xhat, and
 *   dB of dY, each summed into the scale element it broadcast from. */

typedef struct ln_args {
  const kl_tensor *dy, *x, *scale;
  int64_t cols;
  int norm_rank;
  double *dscale, *db;
} ln_args;

/* The scale offsets of one row's elements, walked in order. */
static void ln_iter(const ln_args *a, kl_ref_iter *it) {
  kl_ref_iter_init(it, a->norm_rank, a->x->dims + a->x->rank - a->norm_rank);
  kl_ref_iter_bcast(it, 0, a->scale->rank, a->scale->dims, 1);
}

static void ln_row(const ln_args *a, kl_tensor *dx, int64_t base, double eps) {
  const kl_tensor *x = a->x, *dy = a->dy, *s = a->scale;
  double sum = 0, sq = 0, n = (double)a->cols;
  for (int64_t j = 0; j < a->cols; j++) sum += kl_ref_load(x->data, x->dtype, base + j);
  double mean = sum / n;
  for (int64_t j = 0; j < a->cols; j++) {
    double d = kl_ref_load(x->data, x->dtype, base + j) - mean;
    sq += d * d;
  }
  double r = 1 / sqrt(sq / n + eps), mg = 0, mgx = 0;
  kl_ref_iter it;
  ln_iter(a, &it);
  for (int64_t j = 0; j < a->cols; j++, kl_ref_iter_next(&it)) {
    double g = kl_ref_load(dy->data, dy->dtype, base + j);
    double xhat = (kl_ref_load(x->data, x->dtype, base + j) - mean) * r;
    double gs = g * kl_ref_load(s->data, s->dtype, it.off[0]);
    mg += gs;
    mgx += gs * xhat;
    a->dscale[it.off[0]] += g * xhat;
    a->db[it.off[0]] += g;
  }
  mg /= n;
  mgx /= n;
  ln_iter(a, &it);
  for (int64_t j = 0; j < a->cols; j++, kl_ref_iter_next(&it)) {
    double xhat = (kl_ref_load(x->data, x->dtype, base + j) - mean) * r;
    double gs = kl_ref_load(dy->data, dy->dtype, base + j) * kl_ref_load(s->data, s->dtype, it.off[0]);
    kl_ref_store(dx->data, dx->dtype, base + j, r * (gs - mg - xhat * mgx));
  }
}

int kl_ref_layernorm_grad(kl_kernel_ctx *c) {
  ln_args a = {.dy = c->in[0], .x = c->in[1], .scale = c->in[2]};
  int64_t ax = kl_attr_int(c->node, "axis", -1);
  int axis = (int)(ax < 0 ? ax + a.x->rank : ax);
  a.norm_rank = a.x->rank - axis;
  a.cols = kl_ref_span(a.x->dims, axis, a.x->rank);
  int64_t rows = kl_ref_span(a.x->dims, 0, axis), ns = kl_tensor_numel(a.scale);
  a.dscale = accumulators(c, ns);
  a.db = a.dscale ? accumulators(c, ns) : NULL;
  if (!a.db) {
    free(a.dscale);
    return KILN_ERR_OUT_OF_MEMORY;
  }
  double eps = kl_attr_float(c->node, "epsilon", 1e-5f);
  for (int64_t r = 0; a.cols > 0 && r < rows; r++) ln_row(&a, c->out[0], r * a.cols, eps);
  if (c->n_out > 1) store_all(c->out[1], a.dscale);
  else free(a.dscale);
  if (c->n_out > 2) store_all(c->out[2], a.db);
  else free(a.db);
  return KILN_OK;
}

/* ---- GatherGrad (dY, Indices, XLike) axis -> dX: zeros, then each dY row added at
 * the index it was gathered from (repeated indexes add up; negative ones count from
 * the end). XLike viewed as [outer, len, inner], dY as [outer, indexes, inner]. ---- */

int kl_ref_gather_grad(kl_kernel_ctx *c) {
  const kl_tensor *dy = c->in[0], *ind = c->in[1];
  kl_tensor *dx = c->out[0];
  int64_t ax = kl_attr_int(c->node, "axis", 0);
  int axis = (int)(ax < 0 ? ax + dx->rank : ax);
  int64_t outer = kl_ref_span(dx->dims, 0, axis), len = dx->dims[axis];
  int64_t inner = kl_ref_span(dx->dims, axis + 1, dx->rank), count = kl_tensor_numel(ind);
  for (int64_t j = 0; j < count; j++) {
    int64_t v = kl_ref_load_int(ind->data, ind->dtype, j);
    if (v < -len || v >= len)
      return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "input 1 (Indices) holds %lld at flat "
                     "index %lld, expected a value in [%lld, %lld) (axis %d of XLike has "
                     "%lld elements)", (long long)v, (long long)j, (long long)-len,
                     (long long)len, axis, (long long)len);
  }
  double *acc = accumulators(c, kl_tensor_numel(dx));
  if (!acc) return KILN_ERR_OUT_OF_MEMORY;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < count; j++) {
      int64_t v = kl_ref_load_int(ind->data, ind->dtype, j);
      int64_t to = (o * len + (v < 0 ? v + len : v)) * inner, from = (o * count + j) * inner;
      for (int64_t k = 0; k < inner; k++) acc[to + k] += kl_ref_load(dy->data, dy->dtype, from + k);
    }
  return store_all(dx, acc);
}

/* ---- SliceGrad (dY, XLike, starts, ends, axes?, steps?) -> dX: zeros but where the
 * forward Slice took its elements (ir/data_plan.h, the plan Slice itself uses), which
 * get dY. A slice takes each element at most once, so they are stored, not added. ---- */

/* Up to KL_MAX_RANK values of a 0-D or 1-D integer tensor (absent: none). */
static int list_of(const kl_tensor *t, int64_t *v) {
  int64_t n = t ? kl_tensor_numel(t) : 0;
  if (n > KL_MAX_RANK) n = KL_MAX_RANK;
  for (int64_t k = 0; k < n; k++) v[k] = kl_ref_load_int(t->data, t->dtype, k);
  return (int)n;
}

int kl_ref_slice_grad(kl_kernel_ctx *c) {
  const kl_tensor *dy = c->in[0];
  kl_tensor *dx = c->out[0];
  int64_t starts[KL_MAX_RANK], ends[KL_MAX_RANK], axes[KL_MAX_RANK], steps[KL_MAX_RANK];
  const kl_tensor *ta = c->n_in > 4 ? c->in[4] : NULL, *ts = c->n_in > 5 ? c->in[5] : NULL;
  int n = list_of(c->in[2], starts);
  list_of(c->in[3], ends);
  list_of(ta, axes);
  list_of(ts, steps);
  kl_slice_plan p;
  kiln_status st = kl_slice_plan_make(dx->rank, dx->dims, n, starts, ends, ta ? axes : NULL,
                                      ts ? steps : NULL, &p, c->e);
  if (st != KILN_OK) return st;
  int64_t xs[KL_MAX_RANK], stride[KL_MAX_RANK], base, size = 1;
  for (int d = dx->rank - 1; d >= 0; d--) {
    xs[d] = size;
    size *= dx->dims[d];
  }
  kl_slice_plan_view(&p, dx->rank, xs, stride, &base);
  int64_t total = kl_tensor_numel(dx), count = kl_tensor_numel(dy);
  for (int64_t i = 0; i < total; i++) kl_ref_store(dx->data, dx->dtype, i, 0);
  kl_ref_iter it;
  kl_ref_iter_init(&it, dy->rank, dy->dims);
  for (int d = 0; d < dy->rank; d++) it.stride[0][d] = stride[d];
  for (int64_t i = 0; i < count; i++, kl_ref_iter_next(&it))
    kl_ref_store(dx->data, dx->dtype, base + it.off[0], kl_ref_load(dy->data, dy->dtype, i));
  return KILN_OK;
}

/* ---- DropoutTrain (X, ratio?, seed) -> Y, mask and DropoutGrad (dY, mask, ratio?) ----
 * mask[i] = kl_dropout_keep(seed, i, ratio) (ir/grad.h: a function of seed and i only,
 * whatever the threads), Y = X * mask / (1 - ratio), dX = dY * mask / (1 - ratio);
 * ratio 0.5 when absent, in [0, 1). */

static kiln_status ratio_of(kl_kernel_ctx *c, int i, double *r) {
  const kl_tensor *t = c->n_in > i ? c->in[i] : NULL;
  *r = t ? kl_ref_load(t->data, t->dtype, 0) : 0.5;
  if (*r >= 0 && *r < 1) return KILN_OK;
  return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "input %d (ratio) is %g, expected a value "
                 "in [0, 1)", i, *r);
}

int kl_ref_dropout_train(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *seed = c->in[2];
  double ratio;
  kiln_status st = ratio_of(c, 1, &ratio);
  if (st != KILN_OK) return st;
  int64_t s = kl_ref_load_int(seed->data, seed->dtype, 0), n = kl_tensor_numel(x);
  kl_tensor *y = c->out[0], *mask = c->n_out > 1 ? c->out[1] : NULL;
  double k = 1 / (1 - ratio);
  for (int64_t i = 0; i < n; i++) {
    bool keep = kl_dropout_keep(s, i, ratio);
    kl_ref_store(y->data, y->dtype, i, keep ? kl_ref_load(x->data, x->dtype, i) * k : 0);
    if (mask) ((uint8_t *)mask->data)[i] = keep;
  }
  return KILN_OK;
}

int kl_ref_dropout_grad(kl_kernel_ctx *c) {
  const kl_tensor *dy = c->in[0], *mask = c->in[1];
  double ratio;
  kiln_status st = ratio_of(c, 2, &ratio);
  if (st != KILN_OK) return st;
  kl_tensor *dx = c->out[0];
  int64_t n = kl_tensor_numel(dx);
  double k = 1 / (1 - ratio);
  for (int64_t i = 0; i < n; i++)
    kl_ref_store(dx->data, dx->dtype, i,
                 ((const uint8_t *)mask->data)[i] ? kl_ref_load(dy->data, dy->dtype, i) * k : 0);
  return KILN_OK;
}
