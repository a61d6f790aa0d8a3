/* Reference kernels of kiln.Loss and kiln.LossGrad, with PyTorch's semantics
 * (torch.nn.functional's cross_entropy, nll_loss, mse_loss, l1_loss, smooth_l1_loss and
 * binary_cross_entropy_with_logits), computed in double.
 *
 * Class kinds: Input [N, C, d1, ...] (or [C]), Target int64 [N, d1, ...] (or []),
 * Weight [C] (1s when absent). At each position i with class t (ignored when t is
 * ignore_index: loss 0, weight 0):
 *   nll:           l_i = -w_t x_t
 *   cross_entropy: l_i = (1 - eps) (-w_t logp_t) + eps / C * sum_c (-w_c logp_c),
 *                  logp = log_softmax(x) over the classes, eps = label_smoothing
 * and "mean" is sum_i l_i / sum_i w_{t_i} over the positions not ignored (NaN when all
 * are, as PyTorch).
 * Value kinds: Input and Target alike, d = x - t per element:
 *   mse d^2; l1 |d|; smooth_l1 |d| < beta ? d^2 / (2 beta) : |d| - beta / 2 (l1 when
 *   beta is 0); bce_logits w (max(x, 0) - x t + log(1 + exp(-|x|))), Weight broadcast
 *   to Input; "mean" divides the sum by the element count.
 * "none" keeps the per-position losses (Target's shape for class kinds, Input's else).
 * LossGrad: dInput = dLoss times the derivative of the loss above.
 */
#include "backends/cpu/ref/ref.h"
#include "ir/grad.h"

#include <math.h>

typedef struct loss_args {
  kl_loss_attrs a;
  const kl_tensor *x, *t, *w;
  int64_t classes, inner, positions; /* class kinds: Input viewed as [N, C, inner] */
} loss_args;

static void loss_args_init(loss_args *l, const kl_tensor *const *in, int n_in) {
  l->x = in[0];
  l->t = in[1];
  l->w = n_in > 2 ? in[2] : NULL;
  const kl_tensor *x = l->x;
  l->classes = x->rank == 1 ? x->dims[0] : x->rank > 1 ? x->dims[1] : 1;
  l->inner = x->rank > 2 ? kl_ref_span(x->dims, 2, x->rank) : 1;
  l->positions = kl_tensor_numel(kl_loss_is_class(l->a.kind) ? l->t : l->x);
}

static double weight_of(const loss_args *l, int64_t k) {
  return l->w ? kl_ref_load(l->w->data, l->w->dtype, k) : 1.0;
}

/* Position i's class, -1 when ignored; an index out of range is an error. */
static kiln_status class_at(kl_kernel_ctx *c, const loss_args *l, int64_t i, int64_t *cls) {
  int64_t t = kl_ref_load_int(l->t->data, l->t->dtype, i);
  *cls = -1;
  if (t == l->a.ignore_index) return KILN_OK;
  if (t < 0 || t >= l->classes)
    return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "input %d (Target) holds class index "
                   "%lld at flat index %lld, expected a value in [0, %lld) (C = %lld) or "
                   "ignore_index %lld", c->node->op == KL_OP_KilnLossGrad ? 2 : 1,
                   (long long)t, (long long)i, (long long)l->classes,
                   (long long)l->classes, (long long)l->a.ignore_index);
  *cls = t;
  return KILN_OK;
}

/* Element of class k at position i of Input. */
static int64_t class_elem(const loss_args *l, int64_t i, int64_t k) {
  return (i / l->inner * l->classes + k) * l->inner + i % l->inner;
}

static double log_sum_exp(const loss_args *l, int64_t i) {
  double max = -INFINITY, sum = 0;
  for (int64_t k = 0; k < l->classes; k++) {
    double v = kl_ref_load(l->x->data, l->x->dtype, class_elem(l, i, k));
    if (v > max || isnan(v)) max = v;
  }
  if (isinf(max)) return max;
  for (int64_t k = 0; k < l->classes; k++)
    sum += exp(kl_ref_load(l->x->data, l->x->dtype, class_elem(l, i, k)) - max);
  return max + log(sum);
}

/* The loss at class position i (of class cls, not ignored). */
static double class_loss(const loss_args *l, int64_t i, int64_t cls) {
  double xt = kl_ref_load(l->x->data, l->x->dtype, class_elem(l, i, cls));
  if (l->a.kind == KL_LOSS_NLL) return -weight_of(l, cls) * xt;
  double lse = log_sum_exp(l, i), eps = l->a.label_smoothing;
  double loss = (1 - eps) * -weight_of(l, cls) * (xt - lse);
  if (eps == 0) return loss;
  double smooth = 0;
  for (int64_t k = 0; k < l->classes; k++)
    smooth -= weight_of(l, k) * (kl_ref_load(l->x->data, l->x->dtype, class_elem(l, i, k)) - lse);
  return loss + eps / (double)l->classes * smooth;
}

/* The weight element i of a bce_logits Input takes (Weight broadcast to Input). */
static double bce_weight(const loss_args *l, const kl_ref_iter *it) {
  return l->w ? kl_ref_load(l->w->data, l->w->dtype, it->off[0]) : 1.0;
}

static double value_loss(const loss_args *l, int64_t i, double w) {
  double x = kl_ref_load(l->x->data, l->x->dtype, i), t = kl_ref_load(l->t->data, l->t->dtype, i);
  double d = x - t, beta = l->a.beta;
  switch (l->a.kind) {
  case KL_LOSS_MSE: return d * d;
  case KL_LOSS_SMOOTH_L1:
    if (beta > 0 && fabs(d) < beta) return 0.5 * d * d / beta;
    return beta > 0 ? fabs(d) - 0.5 * beta : fabs(d);
  case KL_LOSS_BCE_LOGITS: return w * (fmax(x, 0) - x * t + log1p(exp(-fabs(x))));
  default: return fabs(d);
  }
}

static double value_slope(const loss_args *l, int64_t i, double w) {
  double x = kl_ref_load(l->x->data, l->x->dtype, i), t = kl_ref_load(l->t->data, l->t->dtype, i);
  double d = x - t, beta = l->a.beta, sign = isnan(d) ? d : (d > 0) - (d < 0);
  switch (l->a.kind) {
  case KL_LOSS_MSE: return 2 * d;
  case KL_LOSS_SMOOTH_L1: return beta > 0 && fabs(d) < beta ? d / beta : sign;
  case KL_LOSS_BCE_LOGITS: {
    double s = x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
    return w * (s - t);
  }
  default: return sign;
  }
}

static void weight_iter(const loss_args *l, kl_ref_iter *it) {
  kl_ref_iter_init(it, l->x->rank, l->x->dims);
  if (l->w && !kl_loss_is_class(l->a.kind)) kl_ref_iter_bcast(it, 0, l->w->rank, l->w->dims, 1);
}

/* Every position's loss: into `none` when the reduction is "none", else summed into
 * *sum with the weights taken (the mean's divisor) into *wsum. */
static kiln_status losses(kl_kernel_ctx *c, const loss_args *l, kl_tensor *none, double *sum,
                          double *wsum) {
  *sum = *wsum = 0;
  kl_ref_iter it;
  weight_iter(l, &it);
  for (int64_t i = 0; i < l->positions; i++, kl_ref_iter_next(&it)) {
    double loss = 0, w = 1;
    if (kl_loss_is_class(l->a.kind)) {
      int64_t cls;
      kiln_status st = class_at(c, l, i, &cls);
      if (st != KILN_OK) return st;
      w = cls >= 0 ? weight_of(l, cls) : 0;
      loss = cls >= 0 ? class_loss(l, i, cls) : 0;
    } else {
      loss = value_loss(l, i, bce_weight(l, &it));
    }
    if (none) kl_ref_store(none->data, none->dtype, i, loss);
    *sum += loss;
    *wsum += w;
  }
  return KILN_OK;
}

int kl_ref_train_loss(kl_kernel_ctx *c) {
  loss_args l;
  kiln_status st = kl_loss_attrs_read(c->node, &l.a, c->e);
  if (st != KILN_OK) return st;
  loss_args_init(&l, c->in, c->n_in);
  kl_tensor *y = c->out[0];
  double sum, wsum;
  st = losses(c, &l, l.a.reduction == KL_RED_NONE ? y : NULL, &sum, &wsum);
  if (st != KILN_OK || l.a.reduction == KL_RED_NONE) return st;
  if (l.a.reduction == KL_RED_MEAN)
    sum /= kl_loss_is_class(l.a.kind) ? wsum : (double)l.positions;
  kl_ref_store(y->data, y->dtype, 0, sum);
  return KILN_OK;
}

/* dInput at class position i (class cls) for upstream gradient g. */
static void class_grad(const loss_args *l, kl_tensor *dx, int64_t i, int64_t cls, double g,
                       double weight_total) {
  if (l->a.kind == KL_LOSS_NLL) {
    kl_ref_store(dx->data, dx->dtype, class_elem(l, i, cls), -g * weight_of(l, cls));
    return;
  }
  double lse = log_sum_exp(l, i), eps = l->a.label_smoothing, wt = weight_of(l, cls);
  double smooth = eps / (double)l->classes;
  for (int64_t k = 0; k < l->classes; k++) {
    int64_t at = class_elem(l, i, k);
    double p = exp(kl_ref_load(l->x->data, l->x->dtype, at) - lse);
    double d = (1 - eps) * wt * (p - (k == cls)) + smooth * (p * weight_total - weight_of(l, k));
    kl_ref_store(dx->data, dx->dtype, at, g * d);
  }
}

/* The upstream gradient of position i: dLoss[i] for "none", else dLoss / divisor. */
static double upstream(const loss_args *l, const kl_tensor *dl, int64_t i, double divisor) {
  if (l->a.reduction == KL_RED_NONE) return kl_ref_load(dl->data, dl->dtype, i);
  return kl_ref_load(dl->data, dl->dtype, 0) / divisor;
}

int kl_ref_train_loss_grad(kl_kernel_ctx *c) {
  loss_args l;
  kiln_status st = kl_loss_attrs_read(c->node, &l.a, c->e);
  if (st != KILN_OK) return st;
  loss_args_init(&l, c->in + 1, c->n_in - 1);
  const kl_tensor *dl = c->in[0];
  kl_tensor *dx = c->out[0];
  double sum, divisor = 1;
  if (kl_loss_is_class(l.a.kind)) {
    st = losses(c, &l, NULL, &sum, &divisor); /* checks every class; the mean's divisor */
    if (st != KILN_OK) return st;
  } else {
    divisor = (double)l.positions;
  }
  if (l.a.reduction == KL_RED_SUM) divisor = 1;
  kl_ref_iter it;
  weight_iter(&l, &it);
  if (!kl_loss_is_class(l.a.kind)) {
    for (int64_t i = 0; i < l.positions; i++, kl_ref_iter_next(&it))
      kl_ref_store(dx->data, dx->dtype, i,
                   upstream(&l, dl, i, divisor) * value_slope(&l, i, bce_weight(&l, &it)));
    return KILN_OK;
  }
  int64_t n = kl_tensor_numel(dx);
  for (int64_t i = 0; i < n; i++) kl_ref_store(dx->data, dx->dtype, i, 0);
  double weight_total = 0;
  for (int64_t k = 0; k < l.classes; k++) weight_total += weight_of(&l, k);
  for (int64_t i = 0; i < l.positions; i++) {
    int64_t cls;
    class_at(c, &l, i, &cls); /* checked above */
    if (cls >= 0) class_grad(&l, dx, i, cls, upstream(&l, dl, i, divisor), weight_total);
  }
  return KILN_OK;
}
