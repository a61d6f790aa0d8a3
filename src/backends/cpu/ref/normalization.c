/* Reference normalizations, computed in double whatever the dtype (stash_type only
 * names the dtype of LayerNormalization's Mean and InvStdDev outputs).
 *
 * Statistics are over a "row" of contiguous elements, except for
 * MeanVarianceNormalization (any axes) and LpNormalization (one axis):
 *   LayerNormalization  X viewed as [rows, len], len = prod(X.shape[axis:]);
 *                       Y = (X - mean) * inv * Scale + B, inv = 1 / sqrt(var + epsilon),
 *                       Scale and B broadcast to X; Mean and InvStdDev [rows] shaped
 *                       X.shape[:axis] + [1, ...]
 *   RMSNormalization    Y = X / sqrt(mean(X^2) + epsilon) * scale, same rows
 *   InstanceNormalization  X [N, C, D...]: a row per (n, c); scale and B [C]
 *   GroupNormalization  a row per (n, group) of C / num_groups channels; scale and
 *                       bias [C], per channel (opset 21)
 *   MeanVarianceNormalization  Y = (X - mean) / (sqrt(var) + 1e-9) over `axes`
 *   LpNormalization     Y = X / ||X||_p along axis (p 1 or 2); 0 where the norm is 0
 *   LRN                 Y = X / (bias + alpha / size * sum of X^2 over the channels
 *                       c - floor((size-1)/2) .. c + ceil((size-1)/2))^beta
 * The variance is the population one (divided by the count), from two passes.
 */
#include "backends/cpu/ref/reduce_view.h"
#include "ir/reduce.h"

#include <math.h>

/* Mean and variance of the n elements at base + set.off[0] (set a walk from
 * kl_reduce_view, or a rank-1 walk over a contiguous row). */
static void set_stats(const kl_tensor *x, int64_t base, kl_ref_iter set, int64_t n,
                      double *mean, double *var) {
  kl_ref_iter start = set;
  double sum = 0, sq = 0;
  for (int64_t k = 0; k < n; k++, kl_ref_iter_next(&set))
    sum += kl_ref_load(x->data, x->dtype, base + set.off[0]);
  *mean = sum / (double)n;
  set = start;
  for (int64_t k = 0; k < n; k++, kl_ref_iter_next(&set)) {
    double d = kl_ref_load(x->data, x->dtype, base + set.off[0]) - *mean;
    sq += d * d;
  }
  *var = sq / (double)n;
}

/* A walk over n contiguous elements. */
static kl_ref_iter row_walk(int64_t n) {
  kl_ref_iter it;
  kl_ref_iter_init(&it, 1, &n);
  it.stride[0][0] = 1;
  return it;
}

static int norm_axis(const kl_kernel_ctx *c, int rank) {
  int64_t a = kl_attr_int(c->node, "axis", -1);
  return (int)(a < 0 ? a + rank : a);
}

/* Output k when the node has it. */
static kl_tensor *optional_out(const kl_kernel_ctx *c, int k) {
  return k < c->n_out ? c->out[k] : NULL;
}

int kl_ref_layernorm(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *scale = c->in[1], *bias = c->n_in > 2 ? c->in[2] : NULL;
  kl_tensor *y = c->out[0], *mean_out = optional_out(c, 1), *inv_out = optional_out(c, 2);
  int axis = norm_axis(c, x->rank);
  int64_t rows = kl_ref_span(x->dims, 0, axis), len = kl_ref_span(x->dims, axis, x->rank);
  double eps = kl_attr_float(c->node, "epsilon", 1e-5f);
  bool rms = c->node->op == KL_OP_RMSNormalization;
  kl_ref_iter it;
  kl_ref_iter_init(&it, x->rank, x->dims);
  kl_ref_iter_bcast(&it, 0, scale->rank, scale->dims, 1);
  if (bias) kl_ref_iter_bcast(&it, 1, bias->rank, bias->dims, 1);
  for (int64_t r = 0; r < rows; r++) {
    double mean, var;
    set_stats(x, r * len, row_walk(len), len, &mean, &var);
    if (rms) { /* the mean of squares, with nothing subtracted */
      var += mean * mean;
      mean = 0;
    }
    double inv = 1 / sqrt(var + eps);
    for (int64_t j = 0, i = r * len; j < len; j++, i++, kl_ref_iter_next(&it)) {
      double v = (kl_ref_load(x->data, x->dtype, i) - mean) * inv *
                 kl_ref_load(scale->data, scale->dtype, it.off[0]);
      if (bias) v += kl_ref_load(bias->data, bias->dtype, it.off[1]);
      kl_ref_store(y->data, y->dtype, i, v);
    }
    if (mean_out) kl_ref_store(mean_out->data, mean_out->dtype, r, mean);
    if (inv_out) kl_ref_store(inv_out->data, inv_out->dtype, r, inv);
  }
  return KILN_OK;
}

int kl_ref_rmsnorm(kl_kernel_ctx *c) { return kl_ref_layernorm(c); }

/* InstanceNormalization is GroupNormalization with one channel per group. */
static int channel_norm(kl_kernel_ctx *c, int64_t groups) {
  const kl_tensor *x = c->in[0], *scale = c->in[1], *bias = c->in[2];
  kl_tensor *y = c->out[0];
  double eps = kl_attr_float(c->node, "epsilon", 1e-5f);
  int64_t channels = x->dims[1], per_group = groups > 0 ? channels / groups : 0;
  int64_t spatial = kl_ref_span(x->dims, 2, x->rank), len = per_group * spatial;
  int64_t rows = x->dims[0] * groups;
  for (int64_t r = 0; r < rows; r++) {
    double mean, var;
    set_stats(x, r * len, row_walk(len), len, &mean, &var);
    double inv = 1 / sqrt(var + eps);
    for (int64_t j = 0, i = r * len; j < len; j++, i++) {
      int64_t ch = (r % groups) * per_group + j / spatial;
      double v = (kl_ref_load(x->data, x->dtype, i) - mean) * inv *
                     kl_ref_load(scale->data, scale->dtype, ch) +
                 kl_ref_load(bias->data, bias->dtype, ch);
      kl_ref_store(y->data, y->dtype, i, v);
    }
  }
  return KILN_OK;
}

int kl_ref_instancenorm(kl_kernel_ctx *c) { return channel_norm(c, c->in[0]->dims[1]); }

int kl_ref_groupnorm(kl_kernel_ctx *c) {
  return channel_norm(c, kl_attr_int(c->node, "num_groups", 1));
}

int kl_ref_mvn(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  bool mask[KL_MAX_RANK];
  kiln_status st = kl_mvn_mask(c->node, x->rank, mask, c->e);
  if (st != KILN_OK) return st;
  kl_reduce_view v;
  kl_reduce_view_init(x, mask, &v);
  kl_ref_iter kept = v.kept;
  for (int64_t o = 0; o < v.n_kept; o++, kl_ref_iter_next(&kept)) {
    double mean, var;
    set_stats(x, kept.off[0], v.set, v.n_set, &mean, &var);
    double inv = 1 / (sqrt(var) + 1e-9);
    kl_ref_iter set = v.set;
    for (int64_t k = 0; k < v.n_set; k++, kl_ref_iter_next(&set)) {
      int64_t i = kept.off[0] + set.off[0];
      kl_ref_store(y->data, y->dtype, i, (kl_ref_load(x->data, x->dtype, i) - mean) * inv);
    }
  }
  return KILN_OK;
}

int kl_ref_lpnorm(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  int axis = norm_axis(c, x->rank);
  bool l1 = kl_attr_int(c->node, "p", 2) == 1;
  int64_t outer = kl_ref_span(x->dims, 0, axis), len = x->dims[axis];
  int64_t inner = kl_ref_span(x->dims, axis + 1, x->rank);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t base = o * len * inner + i;
      double norm = 0;
      for (int64_t j = 0; j < len; j++) {
        double v = kl_ref_load(x->data, x->dtype, base + j * inner);
        norm += l1 ? fabs(v) : v * v;
      }
      if (!l1) norm = sqrt(norm);
      for (int64_t j = 0; j < len; j++) {
        int64_t at = base + j * inner;
        double v = kl_ref_load(x->data, x->dtype, at);
        kl_ref_store(y->data, y->dtype, at, norm == 0 ? 0 : v / norm);
      }
    }
  return KILN_OK;
}

int kl_ref_lrn(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  int64_t size = kl_attr_int(c->node, "size", 1);
  double alpha = kl_attr_float(c->node, "alpha", 1e-4f);
  double beta = kl_attr_float(c->node, "beta", 0.75f);
  double bias = kl_attr_float(c->node, "bias", 1.0f);
  int64_t channels = x->dims[1], inner = kl_ref_span(x->dims, 2, x->rank);
  int64_t before = (size - 1) / 2, after = size - 1 - before;
  for (int64_t n = 0; n < x->dims[0]; n++)
    for (int64_t ch = 0; ch < channels; ch++)
      for (int64_t i = 0; i < inner; i++) {
        int64_t lo = ch - before < 0 ? 0 : ch - before;
        int64_t hi = ch + after >= channels ? channels - 1 : ch + after;
        double sq = 0;
        for (int64_t k = lo; k <= hi; k++) {
          double v = kl_ref_load(x->data, x->dtype, (n * channels + k) * inner + i);
          sq += v * v;
        }
        int64_t at = (n * channels + ch) * inner + i;
        double v = kl_ref_load(x->data, x->dtype, at);
        kl_ref_store(y->data, y->dtype, at, v / pow(bias + alpha / (double)size * sq, beta));
      }
  return KILN_OK;
}
